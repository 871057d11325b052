"""The graph pruned and unpruned per data family: recall, evaluations and batch time at each ``ef``, and what
``prune="auto"`` keeps.

For each family of :mod:`hypann.datasets.families` and dimension: ``--n`` base
points and ``--queries`` held-out queries (same generator), k = 10, one numba
thread. Three indexes, ``HyperbolicIndex(algorithm="graph", prune=...,
storage=--storage, n_jobs=1, random_state=0)``: ``"never"``, ``"always"`` and
the default ``"auto"`` (whose choice, ``describe()``, is printed). For each
``ef`` of ``--efs`` the two fixed graphs answer the batch ``--repeats`` times,
alternately (so the machine's load hits both alike); per graph:

* ``recall``: recall@10 against float64 brute force, by distance, on float64
  distances recomputed for the returned ids (``distances_of_ids``);
* ``evaluations``: mean distance evaluations per query;
* ``batch_us``: median time of one call with every query, per query;
* ``time_ratio``: pruned over unpruned ``batch_us`` at the same ``ef``.

``--keep K`` builds the pruned graphs with ``K`` nearest neighbours kept per row instead of the library's
``PRUNE_KEEP`` (it sets that constant for the run: how the choice of ``PRUNE_KEEP`` was measured).

Prints a markdown table and writes ``results/<--output>.json`` (default ``graph_prune``).

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/graph_prune.py --dims 10 --families hierarchical_tree,wordnet_nouns
    NUMBA_NUM_THREADS=1 python benchmarks/graph_prune.py --dims 10 --families wordnet_nouns --efs 10,64 --keep 8
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import hypann
from _common import family_arguments, family_cases, family_split, markdown_table, write_json
from hypann.eval import distances_of_ids, exact_knn
from hypann.graph import knn_graph
from hypann.metrics import recall

K = 10


def run_case(name, dim, args):
    n, X, _, Q, _ = family_split(name, dim, args)
    true_d = exact_knn(Q, X, K)[1]
    built, indexes = {}, {}
    for mode in ("never", "always", "auto"):
        t0 = time.perf_counter()
        indexes[mode] = hypann.HyperbolicIndex(algorithm="graph", prune=mode, storage=args.storage, n_jobs=1,
                                               random_state=0).build(X)
        built[mode] = time.perf_counter() - t0
    auto = indexes.pop("auto")
    print(f"{name} {dim}-D, n={n:,}: auto: {auto.describe()}; builds (s): "
          + ", ".join(f"{m} {s:.2f}" for m, s in built.items()), flush=True)
    rows = []
    for ef in (int(e) for e in args.efs.split(",")):
        times = {mode: [] for mode in indexes}
        results = {mode: index.search(Q, k=K, ef=ef) for mode, index in indexes.items()}  # warm
        for _ in range(args.repeats):
            for mode, index in indexes.items():
                t0 = time.perf_counter()
                index.search(Q, k=K, ef=ef)
                times[mode].append(time.perf_counter() - t0)
        row = {"family": name, "dim": dim, "n": n, "keep": knn_graph.PRUNE_KEEP, "ef": ef,
               "auto_pruned": auto.algorithm_.graph_.pruned_}
        for mode, res in results.items():
            found = np.sort(distances_of_ids(Q, X, res.indices), axis=1)
            row[f"{mode}_recall"] = recall(found, true_d, K)
            row[f"{mode}_evaluations"] = float(np.mean(res.stats.samples))
            row[f"{mode}_batch_us"] = 1e6 * float(np.median(times[mode])) / len(Q)
        row["time_ratio"] = row["always_batch_us"] / row["never_batch_us"]
        rows.append(row)
        print(f"  ef={ef:3d}  unpruned: recall {row['never_recall']:.4f} {row['never_evaluations']:7.1f} evaluations "
              f"{row['never_batch_us']:7.2f} us/q   pruned: recall {row['always_recall']:.4f} "
              f"{row['always_evaluations']:7.1f} evaluations {row['always_batch_us']:7.2f} us/q   "
              f"time ratio {row['time_ratio']:.2f}", flush=True)
    return rows, {"family": name, "dim": dim, "auto": auto.describe(), "build_s": built}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    family_arguments(ap, n=100_000, queries=1_000, brute_queries=0, repeats=5)
    ap.add_argument("--dims", default="10,100")
    ap.add_argument("--efs", default="10,12,16,24,32,48,64,96")
    ap.add_argument("--storage", default="float32", choices=("float64", "float32"))
    ap.add_argument("--keep", type=int, default=knn_graph.PRUNE_KEEP,
                    help="nearest neighbours a pruned row keeps (default: the library's PRUNE_KEEP)")
    ap.add_argument("--output", default="graph_prune")
    args = ap.parse_args(argv)
    if args.keep < 0:
        raise ValueError(f"--keep must be >= 0, got {args.keep}")
    knn_graph.PRUNE_KEEP = args.keep
    numba.set_num_threads(1)
    rows, cases = [], []
    t0 = time.perf_counter()
    for name, dim in family_cases(args.families, args.dims):
        case_rows, case = run_case(name, dim, args)
        rows += case_rows
        cases.append(case)
    print(markdown_table(rows, ["family", "dim", "keep", "ef", "auto_pruned", "never_recall", "always_recall",
                                "never_evaluations", "always_evaluations", "never_batch_us", "always_batch_us",
                                "time_ratio"]))
    write_json(args.output, {"args": vars(args), "seconds": time.perf_counter() - t0, "cases": cases, "rows": rows})


if __name__ == "__main__":
    main()
