"""The graph index and its peers on queries far from the data, beside held-out queries.

For each family of :mod:`hypann.datasets.families` and dimension, ``n`` base
points and three sets of ``queries`` queries, k = 10:

* **held-out**: points of the same generator (as in every other benchmark);
* **far**: :func:`hypann.datasets.families.far_queries`, random directions at
  the hyperbolic norms of random data points;
* **far, norms 1-4**: random directions at hyperbolic norms uniform in
  ``[1, 4]``, nearer the origin than most data (as text embeddings are to
  image embeddings in MERU).

Methods, each built once and asked every query set (one thread):

* ``HyperbolicGraphIndex`` with default settings (built on ``--threads``
  numba threads), at its calibrated ``ef_`` and at ``ef`` of ``--efs``;
* pynndescent (numba Poincare callable, ``n_neighbors=30``) sweeping
  ``epsilon``, and usearch HNSW (numba ``cfunc`` metric, float64,
  ``connectivity=16``, ``expansion_add=128``) sweeping ``expansion_search``,
  set up as in :mod:`peers`; ``--no-peers`` leaves them out;
* numpy float64 brute force on ``--brute-queries`` held-out queries: the
  baseline of the "x" column.

Recall@10 is scored on exact float64 distances of the returned ids
(:func:`peers.score`). Writes ``results/graph_far_queries.json`` and prints a
table of every row and a summary: per case and query set, the recall at each
method's default and the fastest setting of each method reaching 0.95.

Usage::

    NUMBA_NUM_THREADS=2 python benchmarks/graph_far_queries.py --n 20000 --dims 10,100
    python benchmarks/graph_far_queries.py --report
"""

from __future__ import annotations

import argparse
import json
import os
import time

import numba
import numpy as np

import peers
from _common import ROOT, family_arguments, family_cases, family_split, markdown_table, median_time, write_json
from hypann.datasets.families import far_queries
from hypann.eval.numpy_brute import numpy_brute_knn
from hypann.graph import HyperbolicGraphIndex

K = 10
EFS = (32, 64, 128, 256)
QUERY_SETS = ("held-out", "far", "far, norms 1-4")
FAR_LOW_NORMS = (1.0, 4.0)
TARGET = 0.95


def query_sets(X, Q, m, seed):
    """The three query sets of the module docstring, ``m`` queries each."""
    return {"held-out": Q[:m],
            "far": far_queries(X, m, seed=seed + 1),
            "far, norms 1-4": far_queries(X, m, seed=seed + 2, norms=FAR_LOW_NORMS)}


def graph_rows(problems, efs, repeats, build_threads, seed):
    """The graph, built once with defaults, at ``ef_`` and every ``ef`` on every query set (one thread)."""
    any_problem = next(iter(problems.values()))
    numba.set_num_threads(build_threads)
    t0 = time.perf_counter()
    index = HyperbolicGraphIndex(random_state=seed).build(any_problem.base, any_problem.base_conformal,
                                                          keep_order=True)  # as algorithm="graph" builds
    build_s = time.perf_counter() - t0
    numba.set_num_threads(1)
    rows = []
    for name, problem in problems.items():
        for ef in (None, *efs):
            index.search(problem.queries[:8], problem.query_conformal[:8], K, ef=ef)  # compile / warm
            query_s, res = median_time(lambda p=problem, ef=ef: index.search(p.queries, p.query_conformal, K, ef=ef),
                                       repeats=repeats)
            setting = f"default (ef_={index.ef_})" if ef is None else f"ef={ef}"
            rows.append({**peers._row(problem, "hypann graph", {"setting": setting}, res.ids, query_s, build_s,
                                      index.nbytes, mean_samples=float(res.samples.mean())),
                         "queries": name, "default": ef is None})
    return rows, index


def pynndescent_rows(problems, repeats):
    """pynndescent built once (one thread), every ``epsilon`` on every query set."""
    from pynndescent import NNDescent

    any_problem = next(iter(problems.values()))
    peers.pynndescent_warmup(any_problem.dim)
    base, _ = any_problem.lifted(np.float64)
    t0 = time.perf_counter()
    index = NNDescent(base, metric=peers._PYNND_METRIC, n_neighbors=30, random_state=0, n_jobs=1)
    index.prepare()
    build_s = time.perf_counter() - t0
    rows = []
    for name, problem in problems.items():
        _, queries = problem.lifted(np.float64)
        for eps in peers.PYNND_EPSILONS:
            query_s, (ids, _) = median_time(lambda q=queries, eps=eps: index.query(q, k=K, epsilon=eps),
                                            repeats=repeats)
            rows.append({**peers._row(problem, "pynndescent", {"setting": f"epsilon={eps}"}, ids, query_s, build_s,
                                      0), "queries": name, "default": eps == 0.1})
    return rows


def usearch_rows(problems, repeats):
    """usearch HNSW built once (one thread), every ``expansion_search`` on every query set."""
    from usearch.index import Index

    any_problem = next(iter(problems.values()))
    base, _ = any_problem.lifted(np.float64)
    metric, keep_alive = peers.usearch_poincare_metric(any_problem.dim)
    index = Index(ndim=any_problem.dim + 1, metric=metric, dtype="f64", connectivity=16, expansion_add=128)
    t0 = time.perf_counter()
    index.add(np.arange(len(base), dtype=np.uint64), base, threads=1)
    build_s = time.perf_counter() - t0
    rows = []
    for name, problem in problems.items():
        _, queries = problem.lifted(np.float64)
        for ef in peers.USEARCH_EXPANSIONS:
            index.expansion_search = int(ef)
            query_s, ids = median_time(lambda q=queries: peers.usearch_ids(index, q, K), repeats=repeats)
            rows.append({**peers._row(problem, "usearch", {"setting": f"expansion_search={ef}"}, ids, query_s,
                                      build_s, 0), "queries": name, "default": ef == 64})
    del keep_alive
    return rows


def summary(rows):
    """Per case and query set, per method: recall at its default setting, and the fastest setting reaching
    :data:`TARGET` (its recall and speed over brute force)."""
    out = []
    for family, dim, queries in dict.fromkeys((r["family"], r["dim"], r["queries"]) for r in rows):
        got = [r for r in rows if (r["family"], r["dim"], r["queries"]) == (family, dim, queries)]
        line = {"family": family, "dim": dim, "queries": queries}
        for method, short in (("hypann graph", "graph"), ("pynndescent", "pynndescent"), ("usearch", "usearch")):
            mine = [r for r in got if r["method"] == method]
            if not mine:
                continue
            default = next(r for r in mine if r["default"])
            line[f"{short} default recall"] = default["recall_at_k"]
            reach = [r for r in mine if r["recall_at_k"] >= TARGET]
            if reach:
                best = max(reach, key=lambda r: r["speedup"])
                line[f"{short} fastest >= {TARGET}"] = (f"{best['params']['setting']}: {best['recall_at_k']:.3f}, "
                                                       f"{best['speedup']:.0f}x")
            else:
                line[f"{short} fastest >= {TARGET}"] = f"none (best {max(r['recall_at_k'] for r in mine):.3f})"
        out.append(line)
    return out


def print_tables(rows):
    columns = ["family", "dim", "n", "queries", "method", "setting", "recall_at_k", "speedup", "queries_per_s",
               "mean_samples", "build_s"]
    print(markdown_table([{**r, "setting": r["params"]["setting"]} for r in rows], columns))
    print()
    lines = summary(rows)
    columns = ["family", "dim", "queries"] + [c for c in (
        "graph default recall", f"graph fastest >= {TARGET}", "pynndescent default recall",
        f"pynndescent fastest >= {TARGET}", "usearch default recall", f"usearch fastest >= {TARGET}")
        if any(c in line for line in lines)]
    print(markdown_table(lines, columns))


def run_case(name, dim, args, progress):
    n, X, _, Q, _ = family_split(name, dim, args)
    sets = query_sets(X, Q, args.queries, args.seed)
    problems = {label: peers.make_problem(X, queries, K) for label, queries in sets.items()}
    nb = min(args.brute_queries, args.queries)
    brute_s, _ = median_time(lambda: numpy_brute_knn(Q[:nb], X, K), repeats=1, warmup=0)
    case = {"family": name, "dim": dim, "n": n, "brute_qps": nb / brute_s}
    rows, index = graph_rows(problems, [int(e) for e in args.efs.split(",")], args.repeats, args.threads,
                             args.seed)
    case["ef_"] = int(index.ef_)
    if not args.no_peers:
        numba.set_num_threads(1)
        for run in (pynndescent_rows, usearch_rows):
            try:
                rows += run(problems, args.repeats)
            except ImportError as exc:
                progress(f"skipping {run.__name__}: {exc}")
    for r in rows:
        r.update(case)
        r["speedup"] = r["queries_per_s"] / case["brute_qps"]
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    family_arguments(ap, n=20000, queries=300, brute_queries=100, repeats=3)
    ap.add_argument("--dims", default="10,100")
    ap.add_argument("--efs", default=",".join(str(e) for e in EFS), help="ef values of the graph besides ef_")
    ap.add_argument("--threads", type=int, default=1, help="numba threads of the graph build")
    ap.add_argument("--no-peers", action="store_true", help="leave out pynndescent and usearch")
    ap.add_argument("--report", action="store_true", help="only print the tables of results/graph_far_queries.json")
    args = ap.parse_args(argv)
    path = os.path.join(ROOT, "results", "graph_far_queries.json")
    if args.report:
        with open(path) as fh:
            print_tables(json.load(fh)["rows"])
        return
    rows = []
    for name, dim in family_cases(args.families, args.dims):
        print(f"# {name} {dim}-D", flush=True)
        rows += run_case(name, dim, args, print)
    write_json("graph_far_queries", {"args": vars(args), "rows": rows})
    print_tables(rows)


if __name__ == "__main__":
    main()
