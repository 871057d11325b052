"""The graph searched with its points in leaf order against the same graph in input order.

``algorithm="graph"`` keeps its points in the leaf order of its entry-point
tree (``HyperbolicGraphIndex.build(..., keep_order=True)``), so that a
point's graph neighbours mostly lie near it in memory. Files written before
that hold the points in input order and are searched as they are. This
script measures what the layout alone changes: for each family of
:mod:`hypann.datasets.families` and dimension it builds one graph (default
settings, leaf order), makes its input-order twin from the same arrays
(rows permuted back, ids mapped: the same graph), checks that both give the
same ids and deltas, and times, on one thread, round-robin over
``--repeats`` passes:

* a batch search of all ``--queries`` held-out queries at the calibrated
  ``ef_`` and at each ``ef`` of ``--efs`` (queries per second);
* one query per call on the first ``--single`` queries at ``ef_`` (median
  microseconds per call).

Prints a markdown table and writes ``results/graph_layout_<storage>.json``.

Usage::

    python benchmarks/graph_layout.py
    python benchmarks/graph_layout.py --n 20000 --dims 10 --storage float32
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

from _common import family_arguments, family_cases, family_split, markdown_table, write_json
from hypann.graph import HyperbolicGraphIndex

K = 10


def input_order_twin(graph):
    """The same graph over the points in input order (the layout of files written before the leaf order)."""
    state = graph.to_arrays()
    order = state.pop("tree_order")
    del state["leaf_order"]
    position = np.argsort(order)
    nbrs = state["neighbors"]
    state["neighbors"] = np.where(nbrs >= 0, order[np.maximum(nbrs, 0)], -1).astype(nbrs.dtype)[position]
    pivots = state["tree_pivots"].copy()
    inner = pivots[:, 0] >= 0
    pivots[inner] = order[pivots[inner]]
    state.update(tree_pivots=pivots, tree_order=order, points=state["points"][position],
                 conformal=state["conformal"][position])
    twin = HyperbolicGraphIndex.from_arrays(state)
    assert not twin.in_leaf_order_
    return twin


def run_case(name, dim, args):
    n, X, cx, Q, cq = family_split(name, dim, args)
    X = X.astype(args.storage)
    numba.set_num_threads(args.build_threads)
    t0 = time.perf_counter()
    leaf = HyperbolicGraphIndex(random_state=args.seed).build(X, cx, in_place=True, keep_order=True)
    build_s = time.perf_counter() - t0
    plain = input_order_twin(leaf)
    numba.set_num_threads(1)
    layouts = {"input": plain, "leaf": leaf}
    rows = []
    for ef in [leaf.ef_] + [e for e in args.ef_list if e != leaf.ef_]:
        answers = {name_: g.search(Q, cq, K, ef=ef) for name_, g in layouts.items()}  # also compiles / warms
        a, b = answers["input"], answers["leaf"]
        if not (np.array_equal(a.ids, b.ids) and np.array_equal(a.deltas, b.deltas)):
            raise AssertionError(f"{name} {dim}-D ef={ef}: the two layouts answer differently")
        times = {name_: [] for name_ in layouts}
        for _ in range(args.repeats):
            for name_, g in layouts.items():
                t = time.perf_counter()
                g.search(Q, cq, K, ef=ef)
                times[name_].append(time.perf_counter() - t)
        qps = {name_: len(Q) / float(np.median(ts)) for name_, ts in times.items()}
        row = {"family": name, "dim": dim, "n": n, "storage": args.storage, "ef": ef,
               "calibrated": ef == leaf.ef_, "build_s": build_s,
               "input_qps": qps["input"], "leaf_qps": qps["leaf"], "leaf_over_input": qps["leaf"] / qps["input"]}
        if ef == leaf.ef_ and args.single:
            per_call = {name_: [] for name_ in layouts}
            for _ in range(args.repeats):
                for i in range(min(args.single, len(Q))):
                    for name_, g in layouts.items():
                        t = time.perf_counter()
                        g.search(Q[i:i + 1], cq[i:i + 1], K, ef=ef)
                        per_call[name_].append(time.perf_counter() - t)
            row["input_single_us"] = 1e6 * float(np.median(per_call["input"]))
            row["leaf_single_us"] = 1e6 * float(np.median(per_call["leaf"]))
        print(f"{name:18s} {dim:3d}-D n={n} {args.storage} ef={ef:4d}: input order {qps['input']:9.0f} q/s, "
              f"leaf order {qps['leaf']:9.0f} q/s = {row['leaf_over_input']:.2f}x"
              + (f"; one query {row['input_single_us']:.1f} / {row['leaf_single_us']:.1f} us"
                 if "leaf_single_us" in row else ""), flush=True)
        rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    family_arguments(ap, n=100_000, queries=1000, brute_queries=0, repeats=5)
    ap.add_argument("--dims", default="10,100")
    ap.add_argument("--efs", default="32", help="search list sizes besides the calibrated one, comma-separated")
    ap.add_argument("--single", type=int, default=200, help="queries timed one per call (0: none)")
    ap.add_argument("--storage", default="float64", choices=["float64", "float32"])
    ap.add_argument("--build-threads", type=int, default=numba.config.NUMBA_NUM_THREADS)
    args = ap.parse_args(argv)
    args.ef_list = [int(e) for e in args.efs.split(",") if e]
    rows = []
    t0 = time.perf_counter()
    for name, dim in family_cases(args.families, args.dims):
        rows += run_case(name, dim, args)
    columns = ["family", "dim", "n", "storage", "ef", "input_qps", "leaf_qps", "leaf_over_input", "input_single_us",
               "leaf_single_us"]
    print(markdown_table(rows, columns))
    write_json(f"graph_layout_{args.storage}", {"args": vars(args), "seconds": time.perf_counter() - t0, "rows": rows})


if __name__ == "__main__":
    main()
