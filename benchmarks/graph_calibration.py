"""The graph's ``ef`` calibration: its boundary sample, and leave-one-out against held-out recall.

``HyperbolicGraphIndex`` calibrates its default ``ef_`` by leave-one-out
recall@10 on :data:`~hypann.graph.knn_graph.CALIBRATION_SIZE` nodes drawn
uniformly and, since the forty-fourth session, also on
:data:`~hypann.graph.knn_graph.CALIBRATION_BOUNDARY_SIZE` nodes of the
boundary tenth (:func:`~hypann.graph.knn_graph._calibration_sample`); the
sampled nodes prune no other row (``relative_neighbourhood_rows``' ``mute``).

Default mode: the default graph built under each calibration of
``--variants`` (in all of them the sampled nodes prune no other row):
``"uniform"``, the uniform sample alone (the boundary sample's size set to 0);
``"boundary"``, the boundary sample must reach the target too (the
forty-fourth session's rule); ``"gap"`` (the default since the forty-fifth
session), it must also come within
:data:`~hypann.graph.knn_graph.BOUNDARY_GAP` of the uniform sample.
On the families of :mod:`hypann.datasets.families` (``--families``,
``--dims``) and on the generators of ``independent_data.py`` (``--data``).
For each: ``ef_``, whether ``prune="auto"`` kept the pruned graph, recall@10
and boundary recall (the 10% of held-out queries nearest the boundary) of the
default search, the calibration's evaluations per query (and, under
``prune="auto"``, the pruned graph's, which the choice compared with the
unpruned one's), and the default search's batch time per query (one numba
thread, the indexes timed in turn, median of ``--repeats``).

``--leave-one-out``: the pruned graph (``prune="always"``) built with a
calibration (its sample muted) and with a given ``ef`` (no calibration, nothing
muted); each searched at ``--ef`` by the calibration's sample leave-one-out
(its uniform and its boundary part) and by the held-out queries (all, and the
boundary tenth), and the share of rows in which the two graphs differ. So the
leave-one-out estimate of each graph can be read against held-out recall.

The data are made as in ``families_peers.py`` and ``independent_data.py``.

Usage::

    NUMBA_NUM_THREADS=2 python benchmarks/graph_calibration.py --n 100000
    NUMBA_NUM_THREADS=2 python benchmarks/graph_calibration.py --n 100000 --leave-one-out --dims 10 \\
        --families hierarchical_tree,wordnet_nouns --data rays

Writes ``results/graph_calibration.json`` (``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import hypann
import independent_data
from _common import boundary_rows, family_cases, family_split, report_rows
from hypann.eval.numpy_brute import numpy_brute_knn
from hypann.geometry._kernels import conformal_factor
from hypann.geometry.gram_scan import knn_delta_scan
from hypann.graph import HyperbolicGraphIndex, knn_graph
from hypann.metrics import recall_per_query

K = 10
#: The calibrations compared: the boundary sample's size and the largest gap it may fall below the uniform one.
VARIANTS = {"uniform": (0, 1.0), "boundary": (knn_graph.CALIBRATION_BOUNDARY_SIZE, 1.0),
            "gap": (knn_graph.CALIBRATION_BOUNDARY_SIZE, knn_graph.BOUNDARY_GAP)}


def cases(args):
    """``(label, dim, base, queries)`` of every family case, then every generator."""
    if args.families:
        for name, dim in family_cases(args.families, args.dims):
            _, X, _, Q, _ = family_split(name, dim, args)
            yield name, dim, X, Q
    for name in filter(None, args.data.split(",")):
        base, queries = independent_data.generate_split(name, args.n, args.queries, args.seed)
        yield name, base.shape[1], base, queries


def measure(name, dim, base, queries, args):
    """The default graph under each calibration of ``args.variants``: a row each."""
    _, true_d = numpy_brute_knn(queries, base, K)
    boundary = boundary_rows(conformal_factor(queries))
    variants = args.variants.split(",")
    built = {}
    try:
        for label in variants:
            knn_graph.CALIBRATION_BOUNDARY_SIZE, knn_graph.BOUNDARY_GAP = VARIANTS[label]
            t0 = time.perf_counter()
            built[label] = hypann.HyperbolicIndex(algorithm="graph", random_state=args.seed,
                                                  verbose=False).build(base), time.perf_counter() - t0
    finally:
        knn_graph.CALIBRATION_BOUNDARY_SIZE, knn_graph.BOUNDARY_GAP = VARIANTS["gap"]
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        times = {label: [] for label in variants}
        found = {}
        for _ in range(args.repeats):
            for label in variants:
                t0 = time.perf_counter()
                found[label] = built[label][0].search(queries, K)
                times[label].append(time.perf_counter() - t0)
    finally:
        numba.set_num_threads(threads)
    rows = []
    for label in variants:
        index, build_s = built[label]
        graph = index.algorithm_.graph_
        per_query = recall_per_query(found[label].distances, true_d, K, epsilon=1e-9)
        rows.append({"data": name, "dim": dim, "n": len(base), "calibration": label, "ef_": graph.ef_,
                     "pruned": bool(graph.pruned_), "recall": float(per_query.mean()),
                     "boundary_recall": float(per_query[boundary].mean()),
                     "evaluations": graph.default_evaluations_,
                     "pruned_evaluations": (graph.prune_comparison_ or (float("nan"),))[0],
                     "us_per_query": 1e6 * float(np.median(times[label])) / len(queries), "build_s": build_s})
    for r in rows:
        r["time_vs_first"] = r["us_per_query"] / rows[0]["us_per_query"]
    for r in rows:
        print(f"{name} {dim}-D {r['calibration']}: ef_ {r['ef_']} pruned {r['pruned']} recall {r['recall']:.4f} "
              f"boundary {r['boundary_recall']:.4f} {r['us_per_query']:.1f} us/query", flush=True)
    return rows


def leave_one_out(name, dim, base, queries, args):
    """The pruned graph with its calibration sample muted and unmuted: leave-one-out against held-out recall
    at ``args.ef`` (two rows)."""
    cx, cq = conformal_factor(base), conformal_factor(queries)
    _, true_q = knn_delta_scan(queries, cq, base, cx, K)
    boundary = boundary_rows(cq)
    # the graph's own sample (same seed, nodes in input order: no keep_order, so every point is a node)
    sample, edge = knn_graph._calibration_sample(cx, np.random.default_rng(args.seed))
    truth = knn_graph._leave_one_out_truth(base, cx, sample, K)
    graphs = {"sample muted": HyperbolicGraphIndex(random_state=args.seed, prune="always").build(base, cx),
              "nothing muted": HyperbolicGraphIndex(random_state=args.seed, prune="always",
                                                    ef=args.ef).build(base, cx)}
    differ = float(np.mean(np.any(graphs["sample muted"].neighbors_ != graphs["nothing muted"].neighbors_, axis=1)))
    rows = []
    for label, graph in graphs.items():
        _, deltas, _ = graph._run(base[sample], cx[sample], K, args.ef, None, sample, copies=False)
        loo = recall_per_query(deltas, truth, K, epsilon=knn_graph.RECALL_RTOL)
        held = recall_per_query(graph.search(queries, cq, K, ef=args.ef).deltas, true_q, K,
                                epsilon=knn_graph.RECALL_RTOL)
        rows.append({"data": name, "dim": dim, "n": len(base), "graph": label, "ef": args.ef,
                     "loo_recall": float(loo[~edge].mean()), "loo_boundary_recall": float(loo[edge].mean()),
                     "heldout_recall": float(held.mean()), "heldout_boundary_recall": float(held[boundary].mean()),
                     "rows_differing": differ})
        r = rows[-1]
        print(f"{name} {dim}-D pruned, {label}: leave-one-out {r['loo_recall']:.4f} / boundary "
              f"{r['loo_boundary_recall']:.4f}; held-out {r['heldout_recall']:.4f} / boundary "
              f"{r['heldout_boundary_recall']:.4f}", flush=True)
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
    ap.add_argument("--variants", default="boundary,gap",
                    help=f"comma-separated calibrations of {', '.join(VARIANTS)} (time_vs_first: against the first)")
    ap.add_argument("--leave-one-out", action="store_true",
                    help="leave-one-out against held-out recall of the pruned graph, its sample muted or not")
    ap.add_argument("--ef", type=int, default=10, help="list size of --leave-one-out")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default=None, help="name of the results/<out>.json file (default: graph_calibration, "
                                                "graph_calibration_loo with --leave-one-out)")
    args = ap.parse_args(argv)
    run = leave_one_out if args.leave_one_out else measure
    rows = []
    for name, dim, base, queries in cases(args):
        rows += run(name, dim, base, queries, args)
    if args.leave_one_out:
        cols = ["data", "dim", "n", "graph", "ef", "loo_recall", "loo_boundary_recall", "heldout_recall",
                "heldout_boundary_recall", "rows_differing"]
    else:
        cols = ["data", "dim", "n", "calibration", "ef_", "pruned", "recall", "boundary_recall", "evaluations",
                "pruned_evaluations", "us_per_query", "time_vs_first", "build_s"]
    out = args.out or ("graph_calibration_loo" if args.leave_one_out else "graph_calibration")
    report_rows(out, rows, cols, {**vars(args), "k": K})


if __name__ == "__main__":
    main()
