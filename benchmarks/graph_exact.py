"""Exact search on every data family: hkdtree, scan, graph + exact re-check, and ``algorithm="auto"``.

For each family of :mod:`hypann.datasets.families` and dimension, ``n`` base
points and ``queries`` held-out queries (same generator), k = 10, every
method through :class:`hypann.HyperbolicIndex` with ``n_jobs=1`` (build and
search on one numba thread):

* ``hkdtree`` -- the exact kd-tree;
* ``brute`` -- hypann's exact scan (numba);
* ``graph`` -- the approximate graph at its calibrated ``ef`` (recall@10 shown);
* ``graph exact`` -- ``algorithm="graph", exact=True``: graph, then the kd-tree
  seeded with its answer (also: mean tree samples vs the unseeded tree);
* ``auto`` -- the new default, with what it chose and the measured fraction.

Speed is queries per second as a multiple of float64 numpy brute force
(:func:`hypann.eval.numpy_brute.numpy_brute_knn`) on ``--brute-queries``
queries in the same process; the methods are timed round-robin, best of
``--repeats``, so a busy machine slows them alike. Exact methods are checked against the scan
(``exact`` column: distances bit-equal). Writes ``results/graph_exact.json``
and prints a markdown table.

Usage::

    python benchmarks/graph_exact.py --n 20000 --dims 10,100
    python benchmarks/graph_exact.py --n 100000 --dims 10 --no-graph
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import hypann
from _common import WORDNET_POINTS, family_arguments, markdown_table, median_time, write_json
from hypann.datasets.base import holdout_split
from hypann.datasets.families import FAMILIES, make_family
from hypann.eval.numpy_brute import numpy_brute_knn

K = 10


def run_case(name, dim, args, progress):
    n = args.n
    if name == "wordnet_nouns":
        n = min(n, WORDNET_POINTS - args.queries)
    points = make_family(name, n + args.queries, dim, seed=args.seed)
    base_ids, query_ids = holdout_split(len(points), args.queries, seed=args.seed)
    base, queries = points[base_ids], points[query_ids]
    nb = min(args.brute_queries, args.queries)
    brute_s, _ = median_time(lambda: numpy_brute_knn(queries[:nb], base, K), repeats=1, warmup=0)
    brute_qps = nb / brute_s
    case = {"family": name, "dim": dim, "n": len(base), "numpy_brute_qps": brute_qps}
    methods = [("hkdtree", {"algorithm": "hkdtree"}), ("brute", {"algorithm": "brute"}),
               ("auto", {"algorithm": "auto"})]
    if not args.no_graph:
        methods += [("graph", {"algorithm": "graph"}), ("graph exact", {"algorithm": "graph", "exact": True})]
    built = []
    for label, settings in methods:
        t0 = time.perf_counter()
        index = hypann.HyperbolicIndex(**settings, random_state=args.seed, n_jobs=1, verbose=False).build(base)
        built.append((label, index, time.perf_counter() - t0))
        index.search(queries[:4], K)  # compile / warm
    # round-robin timing, best of --repeats: the methods share the machine's load alike
    times = {label: [] for label, _, _ in built}
    results = {}
    for _ in range(args.repeats):
        for label, index, _ in built:
            t0 = time.perf_counter()
            results[label] = index.search(queries, K)
            times[label].append(time.perf_counter() - t0)
    rows = []
    for label, index, build_s in built:
        res = results[label]
        row = {**case, "method": label, "build_s": build_s, "queries_per_s": len(queries) / min(times[label]),
               "mean_samples": float(res.stats.samples.mean()), "_dist": res.distances}
        row["speedup"] = row["queries_per_s"] / brute_qps
        if label == "auto":
            row["note"] = index.describe().split("; ", 1)[1]
        if label == "graph":
            row["note"] = f"ef_={index.algorithm_.graph_.ef_}"
        rows.append(row)
    exact = next(r for r in rows if r["method"] == "brute")["_dist"]
    thresh = exact[:, K - 1:K] * (1 + 1e-12)
    tree_samples = next(r for r in rows if r["method"] == "hkdtree")["mean_samples"]
    for r in rows:
        r["recall_at_10"] = float(np.mean(np.sum(r["_dist"] <= thresh, axis=1)) / K)
        r["exact"] = bool(np.array_equal(r["_dist"], exact))
        if r["method"] == "graph exact":
            graph_samples = next(x for x in rows if x["method"] == "graph")["mean_samples"]
            seeded = r["mean_samples"] - graph_samples
            r["note"] = f"seeded tree samples {seeded:.0f} vs unseeded {tree_samples:.0f}"
        del r["_dist"]
        progress(f"{name:18s} {dim:3d}-D n={r['n']} {r['method']:12s} recall {r['recall_at_10']:.4f} "
                 f"exact {r['exact']!s:5s} {r['speedup']:8.1f}x numpy brute  build {r['build_s']:6.2f}s  "
                 f"samples {r['mean_samples']:9.0f}  {r.get('note', '')}")
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    family_arguments(ap, n=20_000, queries=300, brute_queries=100, repeats=5,
                     repeats_help="round-robin timings per method (best kept)")
    ap.add_argument("--dims", default="10,100")
    ap.add_argument("--no-graph", action="store_true", help="skip the graph methods (slow builds at large n)")
    ap.add_argument("--out", default="graph_exact", help="name of the results/<out>.json file")
    args = ap.parse_args(argv)

    def progress(msg):
        print(msg, flush=True)

    rows = []
    t_start = time.perf_counter()
    for dim in (int(d) for d in args.dims.split(",")):
        for name in args.families.split(","):
            family = FAMILIES[name]
            if family.dims is not None and dim not in family.dims:
                continue
            rows += run_case(name, dim, args, progress)
    columns = ["family", "dim", "n", "method", "recall_at_10", "exact", "speedup", "build_s", "mean_samples", "note"]
    print(markdown_table(rows, columns))
    path = write_json(args.out, {"args": vars(args), "rows": rows, "seconds": time.perf_counter() - t_start})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
