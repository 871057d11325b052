"""hypann's graph index on every data family: recall@10 and speed against numpy brute force.

For each family of :mod:`hypann.datasets.families` and dimension, ``n`` base
points and ``queries`` held-out queries (same generator), k = 10:

* numpy float64 brute force (:func:`hypann.eval.numpy_brute.numpy_brute_knn`,
  one thread) on ``--brute-queries`` queries: the speed baseline;
* ``HyperbolicGraphIndex`` (``algorithm="graph"``) with default settings: build
  time, the calibrated ``ef_``, then a sweep of ``ef``; queries timed on one
  numba thread (median of ``--repeats``); the default search (the walk at
  ``ef_``, or the exact scan where the index ``scans_``, and then also the walk
  at ``ef_``) also one query per call;
* the exact scan (:func:`~hypann.geometry.gram_scan.knn_delta_scan`) of the
  same points, timed the same way: what the default search costs where the
  index scans;
* with ``--pynndescent``: pynndescent with the numba Poincare metric
  (:func:`peers.run_pynndescent`, one thread), sweeping ``epsilon``;
* with ``--build-threads``: build times of both on 1 and 2 threads.

Quality is scored on exact float64 distances of the returned ids
(:func:`peers.score`: recall by distance threshold). Writes
``results/graph_families.json`` and prints a markdown table.

Usage::

    NUMBA_NUM_THREADS=2 python benchmarks/graph_families.py --n 20000 --pynndescent --build-threads
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numba
import numpy as np

import peers
from _common import ROOT, WORDNET_POINTS, family_arguments, markdown_table, median_time, write_json
from hypann.datasets.base import holdout_split
from hypann.datasets.families import FAMILIES, make_family
from hypann.eval.numpy_brute import numpy_brute_knn
from hypann.geometry.gram_scan import knn_delta_scan
from hypann.graph import HyperbolicGraphIndex

K = 10
EF_SWEEP = (10, 16, 32, 64, 128, 256, 1024)
# One-query calls timed for the default search and for the scan (median).
ONE_QUERY_CALLS = 100
PYNND_EPSILONS = (0.0, 0.1, 0.2, 0.4)


def one_query_ms(search, queries, q_conformal, count=ONE_QUERY_CALLS):
    """Median milliseconds of ``search(q, cq)`` on one query at a time (the first ``count`` queries)."""
    times = []
    for i in range(min(count, len(queries))):
        t0 = time.perf_counter()
        search(queries[i:i + 1], q_conformal[i:i + 1])
        times.append(time.perf_counter() - t0)
    return 1e3 * float(np.median(times))


def graph_rows(problem, efs, repeats, seed=0):
    """Build with defaults (threads as set by the caller), then time queries on one thread.

    The default row is the graph walk at ``ef_``, or the exact scan when the index ``scans_``; the walk at
    ``ef_`` then gets its own row. The default (and that walk) also time one query per call.
    """
    t0 = time.perf_counter()
    index = HyperbolicGraphIndex(random_state=seed).build(problem.base, problem.base_conformal, in_place=True)
    build_s = time.perf_counter() - t0
    numba.set_num_threads(1)
    rows = []
    walk_at_default = [index.ef_] if index.scans_ else []
    for ef in [None, *walk_at_default, *[e for e in efs if e != index.ef_]]:
        index.search(problem.queries[:8], problem.query_conformal[:8], K, ef=ef)  # compile / warm
        query_s, res = median_time(lambda ef=ef: index.search(problem.queries, problem.query_conformal, K, ef=ef),
                                   repeats=repeats)
        if ef is None:
            label = "default (exact scan)" if index.scans_ else f"default (ef_={index.ef_})"
        else:
            label = f"ef={ef}" + (" (ef_, walk)" if ef == index.ef_ else "")
        extra = {}
        if ef is None or ef == index.ef_:
            extra["single_ms"] = one_query_ms(lambda q, cq, ef=ef: index.search(q, cq, K, ef=ef), problem.queries,
                                              problem.query_conformal)
        rows.append(peers._row(problem, "hypann graph", {"ef": label}, res.ids, query_s, build_s, index.nbytes,
                               mean_samples=float(res.samples.mean()),
                               evaluations_per_point=float(res.samples.mean()) / len(problem.base), **extra))
    return rows, index


def scan_row(problem, index, repeats):
    """The exact scan (:func:`knn_delta_scan`) of the graph's points, timed as the graph (one thread)."""
    points, conformal = index.points_, index.conformal_  # input order: this script builds without keep_order
    queries, q_conformal = problem.queries, problem.query_conformal
    knn_delta_scan(queries[:8], q_conformal[:8], points, conformal, K)  # compile / warm
    query_s, (ids, _) = median_time(lambda: knn_delta_scan(queries, q_conformal, points, conformal, K),
                                    repeats=repeats)
    single = one_query_ms(lambda q, cq: knn_delta_scan(q, cq, points, conformal, K), queries, q_conformal)
    return peers._row(problem, "exact scan (knn_delta_scan)", {"ef": "-"}, ids, query_s, 0.0, 0,
                      mean_samples=float(len(points)), evaluations_per_point=1.0, single_ms=single)


def scan_summary(rows):
    """Per case: the walk at ``ef_`` against the exact scan of the same points (one row per family and dim).

    ``walk / scan``: the walk's time over the scan's, batch and one query per call; ``per fraction``:
    that ratio over the walk's evaluations per point (what a walk costs per point against the scan);
    ``slower from``: the smallest evaluations per point of the ``ef`` sweep at which the walk's batch
    was slower than the scan's, ``faster up to``: the largest at which it was faster.
    """
    cases = {}
    for r in rows:
        cases.setdefault((r["family"], r["dim"]), []).append(r)
    out = []
    for (family, dim), got in cases.items():
        scan = next(r for r in got if r["method"].startswith("exact scan"))
        graph = [r for r in got if r["method"] == "hypann graph"]
        walk = next((r for r in graph if "(ef_, walk)" in r["params"]["ef"]), graph[0])  # the default walks
        sweep = [r for r in graph if r["params"]["ef"].startswith("ef=")]
        slower = [r["evaluations_per_point"] for r in sweep if r["queries_per_s"] < scan["queries_per_s"]]
        faster = [r["evaluations_per_point"] for r in sweep if r["queries_per_s"] >= scan["queries_per_s"]]
        fraction = walk["evaluations_per_point"]
        batch = scan["queries_per_s"] / walk["queries_per_s"]
        one = walk["single_ms"] / scan["single_ms"]
        out.append({"family": family, "dim": dim, "n": walk["n"], "ef_": walk["ef_"], "scans": walk["scans_"],
                    "evaluations per point at ef_": fraction, "walk recall": walk["recall_at_k"],
                    "walk q/s": walk["queries_per_s"], "walk one query ms": walk["single_ms"],
                    "scan q/s": scan["queries_per_s"], "scan one query ms": scan["single_ms"],
                    "walk / scan, batch": batch, "walk / scan, one query": one,
                    "per fraction, batch": batch / fraction, "per fraction, one query": one / fraction,
                    "slower from": min(slower) if slower else None, "faster up to": max(faster) if faster else None})
    return out


SUMMARY_COLUMNS = ["family", "dim", "n", "ef_", "scans", "evaluations per point at ef_", "walk recall", "walk q/s",
                   "walk one query ms", "scan q/s", "scan one query ms", "walk / scan, batch", "walk / scan, one query",
                   "per fraction, batch", "per fraction, one query", "slower from", "faster up to"]


def print_tables(rows):
    """The table of every row, then :func:`scan_summary`'s."""
    columns = ["family", "dim", "n", "method", "params", "recall_at_k", "speedup", "queries_per_s", "build_s",
               "mean_samples", "evaluations_per_point", "single_ms"]
    print(markdown_table([{**r, "params": r["params"].get("ef", r["params"].get("epsilon"))} for r in rows], columns))
    print()
    print(markdown_table(scan_summary(rows), SUMMARY_COLUMNS))


def build_times(problem, threads=(1, 2), seed=0):
    """Build seconds of the graph and of pynndescent (construct + prepare) per thread count."""
    from pynndescent import NNDescent

    out = {}
    base, _ = problem.lifted(np.float64)
    for t in threads:
        numba.set_num_threads(t)
        t0 = time.perf_counter()
        HyperbolicGraphIndex(random_state=seed).build(problem.base, problem.base_conformal, in_place=True)
        out[f"graph_build_s_{t}thr"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        index = NNDescent(base, metric=peers._PYNND_METRIC, n_neighbors=30, random_state=0, n_jobs=t)
        index.prepare()
        out[f"pynndescent_build_s_{t}thr"] = time.perf_counter() - t0
    numba.set_num_threads(1)
    return out


def run_case(name, dim, args, progress):
    n = args.n
    if name == "wordnet_nouns":
        n = min(n, WORDNET_POINTS - args.queries)
    points = make_family(name, n + args.queries, dim, seed=args.seed)
    base_ids, query_ids = holdout_split(len(points), args.queries, seed=args.seed)
    base, queries = points[base_ids], points[query_ids]
    problem = peers.make_problem(base, queries, K)
    nb = min(args.brute_queries, args.queries)
    brute_s, _ = median_time(lambda: numpy_brute_knn(queries[:nb], base, K), repeats=1, warmup=0)
    brute_qps = nb / brute_s
    case = {"family": name, "dim": dim, "n": len(base), "brute_qps": brute_qps}
    rows = []
    numba.set_num_threads(args.threads)
    got, index = graph_rows(problem, EF_SWEEP, args.repeats, seed=args.seed)
    rows += got
    rows.append(scan_row(problem, index, args.repeats))
    case["scans_"] = bool(index.scans_)
    case["ef_"] = int(index.ef_)
    case["calibration_recall"] = float(index.calibration_recall_)
    if args.pynndescent:
        numba.set_num_threads(1)
        try:
            rows += peers.run_pynndescent(problem, epsilons=PYNND_EPSILONS, repeats=args.repeats)
        except ImportError as exc:
            progress(f"skipping pynndescent: {exc}")
    if args.build_threads:
        case.update(build_times(problem, seed=args.seed))
    for r in rows:
        r.update(case)
        r["speedup"] = r["queries_per_s"] / brute_qps
        progress(f"{name:18s} {dim:3d}-D {r['method']:42s} {str(r['params']):46s} "
                 f"recall@10 {r['recall_at_k']:.4f}  {r['speedup']:8.1f}x brute  build {r['build_s']:.1f}s")
    if args.build_threads:
        times = ", ".join(f"{k} {v:.1f}" for k, v in case.items() if k.endswith("thr"))
        progress(f"{name} {dim}-D build times: {times}")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    family_arguments(ap, n=100_000, queries=1000, brute_queries=200, repeats=3)
    ap.add_argument("--dims", default="10,100")
    ap.add_argument("--threads", type=int, default=1, help="numba threads of the graph build")
    ap.add_argument("--pynndescent", action="store_true", help="also run pynndescent with the numba Poincare metric")
    ap.add_argument("--build-threads", action="store_true", help="build times of both on 1 and 2 threads")
    ap.add_argument("--report", action="store_true", help="only print the tables of results/graph_families.json")
    args = ap.parse_args(argv)
    if args.report:
        with open(os.path.join(ROOT, "results", "graph_families.json")) as f:
            print_tables(json.load(f)["rows"])
        return

    def progress(msg):
        print(msg, flush=True)

    if args.pynndescent or args.build_threads:
        peers.pynndescent_warmup(10)
    rows = []
    t_start = time.perf_counter()
    for dim in (int(d) for d in args.dims.split(",")):
        for name in args.families.split(","):
            family = FAMILIES[name]
            if family.dims is not None and dim not in family.dims:
                continue
            rows += run_case(name, dim, args, progress)
    print_tables(rows)
    path = write_json("graph_families", {"args": vars(args), "rows": rows, "seconds": time.perf_counter() - t_start})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
