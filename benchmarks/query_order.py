"""A batch searched in its structure's order against the same batch searched as given.

``HyperbolicIndex.search`` searches a large enough batch
(``hypann._runtime.searched_in_order``) in the order of the algorithm's
``query_order`` (the kd-tree's or the graph's tree: queries that read the
same points follow each other) and puts the answers back. This script
measures what that order changes, for every batch size: for each family of
:mod:`hypann.datasets.families` and dimension it builds each index of
``--algorithms`` once and times, round-robin over ``--repeats`` passes, the
search of the first ``m`` held-out queries for every ``m`` of ``--batches``,
on ``--threads`` threads (``n_jobs``), once in the structure's order and
once as given (the same index, with the thresholds of ``searched_in_order``
set for the one or the other), and notes which of the two the library does
at that size ("default"). It checks that both give the same ids, distances
and sample counts. Untimed, it then measures each order's peak of memory
allocated during the search (``tracemalloc``, which counts numpy's arrays and
not numba's), in MiB (2^20 bytes) beside the batch's own size.

An algorithm is ``name`` or ``name:storage`` or ``name:storage:ef``
(``graph:float32:16``); ``ef`` applies to ``graph``. ``--search range`` times
``search_radius`` instead, each query's radius the distance of its 10th
nearest neighbour (for the algorithms with a range search).

Prints a markdown table (speed-up = time as given / time in order, the
median of each; the peaks) and writes ``results/query_order_<search>_n<N>_d<dims>.json``.

Usage::

    NUMBA_NUM_THREADS=2 python benchmarks/query_order.py
    python benchmarks/query_order.py --n 20000 --dims 10 --threads 1,2
    python benchmarks/query_order.py --search range --algorithms auto --dims 10
"""

from __future__ import annotations

import argparse
import time
import tracemalloc

import numba
import numpy as np

from _common import family_arguments, family_cases, family_split, markdown_table, write_json
from hypann import HyperbolicIndex, _runtime

K = 10
DEFAULT_ALGORITHMS = "auto,graph,graph:float32:16,graph:float32:64"


def parse_algorithm(text):
    """``(name, storage, ef)`` of ``name[:storage[:ef]]``."""
    parts = text.split(":")
    name = parts[0]
    storage = parts[1] if len(parts) > 1 else "float64"
    ef = int(parts[2]) if len(parts) > 2 else None
    return name, storage, ef


def timed_search(index, Q, ef, radius, ordered):
    """``(seconds, answer arrays)`` of one batch search (k-NN, or a range search when ``radius`` is given),
    in the structure's order or as given, whatever :func:`hypann._runtime.searched_in_order` says of
    its size."""
    kept = _runtime.ORDERED_MIN_QUERIES, _runtime.ORDERED_POINTS_PER_QUERY
    _runtime.ORDERED_MIN_QUERIES, _runtime.ORDERED_POINTS_PER_QUERY = (0, 2**62) if ordered else (2**62, 0)
    try:
        t = time.perf_counter()
        if radius is not None:
            res = index.search_radius(Q, radius)
            answer = (res.offsets, res.indices, res.distances)
        else:
            res = index.search(Q, K) if ef is None else index.search(Q, K, ef=ef)
            answer = (res.indices, res.distances, res.stats.samples)
        return time.perf_counter() - t, answer
    finally:
        _runtime.ORDERED_MIN_QUERIES, _runtime.ORDERED_POINTS_PER_QUERY = kept


def peak_search_mb(index, Q, ef, radius, ordered):
    """Peak MiB that numpy allocated during one search of :func:`timed_search` (``tracemalloc``; untimed)."""
    tracemalloc.start()
    try:
        timed_search(index, Q, ef, radius, ordered)
        return tracemalloc.get_traced_memory()[1] / 2**20
    finally:
        tracemalloc.stop()


def run_case(name, dim, args):
    n, X, _, Q, _ = family_split(name, dim, args)
    rows = []
    for text in args.algorithms.split(","):
        algorithm, storage, ef = parse_algorithm(text)
        numba.set_num_threads(max(args.thread_list))
        index = HyperbolicIndex(algorithm=algorithm, storage=storage, random_state=args.seed, verbose=False)
        index.build(X)
        # range search: each query's radius is the distance of its K-th nearest neighbour
        radius = index.search(Q, K).distances[:, -1] if args.search == "range" else None
        for threads in args.thread_list:
            index.n_jobs = threads
            for m in args.batch_list:
                batch, limit = Q[:m], None if radius is None else radius[:m]
                _, a = timed_search(index, batch, ef, limit, False)  # also compiles / warms
                _, b = timed_search(index, batch, ef, limit, True)
                if not all(np.array_equal(x, y) for x, y in zip(a, b)):
                    raise AssertionError(f"{name} {dim}-D {text} m={m}: the two orders answer differently")
                times = {False: [], True: []}
                for _ in range(args.repeats):
                    for ordered in (False, True):
                        times[ordered].append(timed_search(index, batch, ef, limit, ordered)[0])
                given, in_order = (float(np.median(times[o])) for o in (False, True))
                row = {"family": name, "dim": dim, "n": n, "search": args.search, "algorithm": text,
                       "threads": threads, "m": m,
                       "default": "in order" if _runtime.searched_in_order(m, n) else "as given",
                       "given_ms": 1e3 * given, "ordered_ms": 1e3 * in_order, "speedup": given / in_order,
                       "batch_mb": batch.nbytes / 2**20,
                       "given_peak_mb": peak_search_mb(index, batch, ef, limit, False),
                       "ordered_peak_mb": peak_search_mb(index, batch, ef, limit, True),
                       "given_s": times[False], "ordered_s": times[True]}
                print(f"{name:18s} {dim:3d}-D n={n} {text:18s} {threads} thr m={m:5d}: as given {1e3 * given:9.2f} ms,"
                      f" in order {1e3 * in_order:9.2f} ms = {row['speedup']:.3f}x; peak MiB"
                      f" {row['given_peak_mb']:.1f} / {row['ordered_peak_mb']:.1f} (batch {row['batch_mb']:.1f})",
                      flush=True)
                rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    family_arguments(ap, n=100_000, queries=5000, brute_queries=0, repeats=7)
    ap.add_argument("--dims", default="10,100")
    ap.add_argument("--algorithms", default=DEFAULT_ALGORITHMS, help="comma-separated name[:storage[:ef]]")
    ap.add_argument("--batches", default="100,1000,5000", help="batch sizes (at most --queries), comma-separated")
    ap.add_argument("--threads", default="1", help="search threads (n_jobs), comma-separated")
    ap.add_argument("--search", default="knn", choices=["knn", "range"],
                    help=f"k-NN ({K} neighbours) or range search (radius: the distance of the {K}-th neighbour)")
    args = ap.parse_args(argv)
    args.batch_list = [int(m) for m in args.batches.split(",") if m]
    args.thread_list = [int(t) for t in args.threads.split(",") if t]
    if max(args.batch_list) > args.queries:
        ap.error(f"--batches must be at most --queries ({args.queries})")
    rows = []
    t0 = time.perf_counter()
    for name, dim in family_cases(args.families, args.dims):
        rows += run_case(name, dim, args)
    columns = ["family", "dim", "n", "search", "algorithm", "threads", "m", "default", "given_ms", "ordered_ms",
               "speedup", "batch_mb", "given_peak_mb", "ordered_peak_mb"]
    print(markdown_table(rows, columns))
    name = f"query_order_{args.search}_n{args.n}_d{args.dims.replace(',', '-')}"
    write_json(name, {"args": vars(args), "seconds": time.perf_counter() - t0, "rows": rows})


if __name__ == "__main__":
    main()
