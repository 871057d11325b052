"""The graph index against NN-descent's round limit: build time and search quality per ``max_rounds``.

NN-descent (``hypann.graph.knn_graph.nn_descent``) stops when a round changes fewer than
``NN_DESCENT_TOL n K`` row entries, or after ``max_rounds`` rounds. Most families stop on the first
test within 5-7 rounds; on data of high intrinsic dimension the rounds run on, each changing fewer
entries than the last. This script measures what the later rounds buy the *search*: for every case
and every ``--max-rounds`` value it builds ``HyperbolicIndex(algorithm="graph", max_rounds=R,
storage=--storage, n_jobs=--n-jobs, random_state=--seed)`` and reports

* ``build s``: the build's seconds (median of ``--repeats`` builds), ``rounds``: the rounds NN-descent
  ran, ``last changes``: the row entries its last round changed, ``ef_``, ``scans``;
* per search setting (the default, then ``ef`` of ``--efs``), over ``--queries`` held-out queries of
  the same generator (``families_peers.case_split``), k = 10, on one thread: recall@10 by distance
  (float64 distances recomputed for the returned ids, ``peers.exact_neighbours``, against the exact
  scan of ``peers.make_problem``), the boundary recall (the 10% of queries
  nearest the boundary) and microseconds per query in one batch (median of ``--search-repeats``).

A round limit that is reached changes the graph; one that is not leaves it as it is, bit for bit
(the same seed). The cases are the families of ``hypann.datasets.families`` (``--families`` x
``--dims``) and the generators of ``independent_data.py`` (``--data``, each in its own dimension).

Usage::

    NUMBA_NUM_THREADS=2 python benchmarks/nn_descent_rounds.py --n 100000 --max-rounds 6,8,10,16 \\
        --families wordnet_nouns,hyperbolic_uniform --dims 10,100 --data meru_like

Prints one table and writes ``results/<--output>.json``.
"""

from __future__ import annotations

import argparse
import time
import warnings

import numpy as np

import independent_data
import peers
from _common import boundary_rows, family_cases, markdown_table, write_json
from build_phases import RoundLog
from families_peers import case_split

K = 10


def cases(args):
    """``(name, dim)`` of every case: the families, then the generators."""
    yield from family_cases(args.families, args.dims)
    for name in filter(None, args.data.split(",")):
        yield name, independent_data.generator_dim(name)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--dims", default="10,100")
    ap.add_argument("--families", default="hierarchical_tree,gaussian_mixture,hyperbolic_uniform,boundary_heavy,"
                                          "duplicates,wordnet_nouns")
    ap.add_argument("--data", default="", help="comma-separated generators of independent_data.py")
    ap.add_argument("--max-rounds", default="6,8,10,16")
    ap.add_argument("--efs", default="32,64,128")
    ap.add_argument("--storage", choices=["float64", "float32"], default="float32")
    ap.add_argument("--n-jobs", type=int, default=2, help="threads of the builds (searches run on one)")
    ap.add_argument("--repeats", type=int, default=1, help="builds per setting (median)")
    ap.add_argument("--search-repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="nn_descent_rounds")
    args = ap.parse_args()

    import numba

    import hypann
    from hypann.metrics import recall_per_query

    warnings.simplefilter("ignore", hypann.Float32PrecisionWarning)  # the rounding's note, not a measurement
    rounds = RoundLog.installed()
    limits = [int(r) for r in args.max_rounds.split(",")]
    efs = [None] + [int(e) for e in filter(None, args.efs.split(","))]
    rows, results = [], []
    for name, dim in cases(args):
        problem = peers.make_problem(*case_split(name, dim, args), K)
        base, queries = problem.base, problem.queries
        edge = boundary_rows(problem.query_conformal)
        settings = {"algorithm": "graph", "storage": args.storage, "n_jobs": args.n_jobs, "random_state": args.seed,
                    "verbose": False}
        hypann.HyperbolicIndex(**settings).build(base[:3000])  # compiled (or loaded) before the timed builds
        for limit in limits:
            settings["max_rounds"] = limit
            times = []
            for _ in range(args.repeats):
                rounds.changes.clear()
                numba.set_num_threads(args.n_jobs)
                t0 = time.perf_counter()
                index = hypann.HyperbolicIndex(**settings).build(base)
                times.append(time.perf_counter() - t0)
            graph = index.algorithm_.graph_
            index.n_jobs = 1  # the searches on one thread
            build = {"build s": float(np.median(times)), "rounds": len(rounds.changes),
                     "last changes": (rounds.changes or [0])[-1], "ef_": int(graph.ef_), "scans": bool(graph.scans_)}
            for ef in efs:
                params = {} if ef is None else {"ef": ef}
                index.search(queries[:10], K, **params)
                seconds = []
                for _ in range(args.search_repeats):
                    t0 = time.perf_counter()
                    found = index.search(queries, K, **params)
                    seconds.append(time.perf_counter() - t0)
                found_d = peers.exact_neighbours(problem, found.indices)[1]
                per_query = recall_per_query(found_d, problem.true_distances, K)
                row = {"data": name, "dim": dim, "max_rounds": limit, **build,
                       "search": "default" if ef is None else f"ef={ef}",
                       "recall": float(per_query.mean()), "boundary": float(per_query[edge].mean()),
                       "us/query": 1e6 * float(np.median(seconds)) / len(queries)}
                rows.append(row)
                results.append({**row, "build_times": times})
            print(f"{name} {dim}-D max_rounds={limit}: build {build['build s']:.2f} s, {build['rounds']} rounds, "
                  f"ef_={build['ef_']}", flush=True)
    columns = ["data", "dim", "max_rounds", "build s", "rounds", "last changes", "ef_", "scans", "search", "recall",
               "boundary", "us/query"]
    print(markdown_table(rows, columns))
    print("wrote", write_json(args.output, {"parameters": vars(args), "rows": results}))


if __name__ == "__main__":
    main()
