"""The graph's ``ef`` calibration with and without its boundary sample.

``HyperbolicGraphIndex`` calibrates its default ``ef_`` by leave-one-out
recall@10 on :data:`~hypann.graph.knn_graph.CALIBRATION_SIZE` nodes drawn
uniformly and, since the forty-fourth session, also on
:data:`~hypann.graph.knn_graph.CALIBRATION_BOUNDARY_SIZE` nodes of the
boundary tenth (:func:`~hypann.graph.knn_graph._calibration_sample`). This
script builds the default graph both ways (``"without"``: the boundary sample
size set to 0, the uniform sample alone; in both the sampled nodes prune no
other row) on the families of
:mod:`hypann.datasets.families` (``--families``, ``--dims``) and on the
generators of ``independent_data.py`` (``--data``), and reports for each:
``ef_``, whether ``prune="auto"`` kept the pruned graph, recall@10 and
boundary recall (the 10% of held-out queries nearest the boundary) of the
default search, the calibration's evaluations per query, and the default
search's batch time per query (one numba thread, both indexes timed in turn,
median of ``--repeats``). The data are made as in ``families_peers.py`` and
``independent_data.py``.

Usage::

    NUMBA_NUM_THREADS=2 python benchmarks/graph_calibration.py --n 100000

Writes ``results/graph_calibration.json`` (``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import hypann
import independent_data
from _common import family_cases, family_split, report_rows
from hypann.eval.numpy_brute import numpy_brute_knn
from hypann.graph import knn_graph
from hypann.metrics import recall_per_query

K = 10
BOUNDARY_FRACTION = 0.1
VARIANTS = (("without", 0), ("with", knn_graph.CALIBRATION_BOUNDARY_SIZE))


def cases(args):
    """``(label, dim, base, queries)`` of every family case, then every generator."""
    if args.families:
        for name, dim in family_cases(args.families, args.dims):
            _, X, _, Q, _ = family_split(name, dim, args)
            yield name, dim, X, Q
    for name in filter(None, args.data.split(",")):
        rng = np.random.default_rng([args.seed, list(independent_data.GENERATORS).index(name)])
        points = independent_data.GENERATORS[name](args.n + args.queries, rng)
        points = points[rng.permutation(len(points))]
        yield name, points.shape[1], points[:args.n], points[args.n:]


def measure(name, dim, base, queries, args):
    _, true_d = numpy_brute_knn(queries, base, K)
    conformal = 1.0 - np.einsum("ij,ij->i", queries, queries)
    boundary = np.argsort(conformal, kind="stable")[:max(1, int(round(BOUNDARY_FRACTION * len(queries))))]
    built = {}
    try:
        for label, size in VARIANTS:
            knn_graph.CALIBRATION_BOUNDARY_SIZE = size
            t0 = time.perf_counter()
            built[label] = hypann.HyperbolicIndex(algorithm="graph", random_state=args.seed,
                                                  verbose=False).build(base), time.perf_counter() - t0
    finally:
        knn_graph.CALIBRATION_BOUNDARY_SIZE = VARIANTS[-1][1]
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        times = {label: [] for label, _ in VARIANTS}
        for _ in range(args.repeats):
            for label, _ in VARIANTS:
                t0 = time.perf_counter()
                built[label][0].search(queries, K)
                times[label].append(time.perf_counter() - t0)
    finally:
        numba.set_num_threads(threads)
    rows = []
    for label, _ in VARIANTS:
        index, build_s = built[label]
        graph = index.algorithm_.graph_
        per_query = recall_per_query(index.search(queries, K).distances, true_d, K, epsilon=1e-9)
        rows.append({"data": name, "dim": dim, "n": len(base), "calibration": label, "ef_": graph.ef_,
                     "pruned": bool(graph.pruned_), "recall": float(per_query.mean()),
                     "boundary_recall": float(per_query[boundary].mean()),
                     "evaluations": graph.default_evaluations_,
                     "us_per_query": 1e6 * float(np.median(times[label])) / len(queries), "build_s": build_s})
    rows[-1]["time_vs_without"] = rows[-1]["us_per_query"] / rows[0]["us_per_query"]
    for r in rows:
        print(f"{name} {dim}-D {r['calibration']}: ef_ {r['ef_']} pruned {r['pruned']} recall {r['recall']:.4f} "
              f"boundary {r['boundary_recall']:.4f} {r['us_per_query']:.1f} us/query", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000, help="base points per case (WordNet: at most 82,115 - queries)")
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--families", default="hierarchical_tree,gaussian_mixture,hyperbolic_uniform,boundary_heavy,"
                                          "duplicates,wordnet_nouns", help="comma-separated; empty: none")
    ap.add_argument("--dims", default="10,100")
    ap.add_argument("--data", default=",".join(independent_data.GENERATORS),
                    help="comma-separated generators of independent_data.py; empty: none")
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="graph_calibration", help="name of the results/<out>.json file")
    args = ap.parse_args(argv)
    rows = []
    for name, dim, base, queries in cases(args):
        rows += measure(name, dim, base, queries, args)
    cols = ["data", "dim", "n", "calibration", "ef_", "pruned", "recall", "boundary_recall", "evaluations",
            "us_per_query", "time_vs_without", "build_s"]
    report_rows(args.out, rows, cols, {**vars(args), "k": K})


if __name__ == "__main__":
    main()
