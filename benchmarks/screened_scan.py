"""Scans of few queries with and without the points' one-byte codes read first, by family, dimension and storage.

For each family of ``--families`` and dimension of ``--dims`` (at least 16: below, no codes are made),
``--n`` base points and ``--queries`` held-out queries of the same generator, stored as ``--storage``
(float32: the points rounded as a float32 index stores them), ``k = --k``: the median milliseconds of
one call of :func:`hypann.geometry.gram_scan.knn_delta_scan` for each batch size of ``--batches``
(below the Gram blocks' :data:`~hypann.geometry.gram_scan.GRAM_MIN_QUERIES`), without codes (the plain
scan) and with them (:mod:`hypann.geometry.screened_scan`), on each thread count of ``--threads``
(numba threads: from two on, one query's rows are split among them). The two ways alternate
``--alternations`` times, each time over every query once; a column is the median of the
alternations' medians. The answers are checked to be the same, bit for bit.

The points stay in the cache between calls when they fit (a benchmark's queries follow each other):
``--evict`` reads a buffer of that many MB between calls, so that each call reads its points from
memory, as a query of an application that does other work between queries would.

Prints a markdown table and writes ``results/<--output>.json``.

Usage::

    NUMBA_NUM_THREADS=2 python benchmarks/screened_scan.py
    NUMBA_NUM_THREADS=2 python benchmarks/screened_scan.py --n 100000 --dims 100 --evict 512
    NUMBA_NUM_THREADS=2 python benchmarks/screened_scan.py --families "" --data lowrank,meru_like

``--data`` adds generators of ``independent_data.py`` (data made by other processes than the families).
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

import independent_data
from _common import markdown_table, write_json
from hypann._runtime import read_only
from hypann.datasets.base import holdout_split
from hypann.datasets.families import make_family
from hypann.geometry._kernels import conformal_factor
from hypann.geometry.gram_scan import GRAM_MIN_QUERIES, knn_delta_scan
from hypann.geometry.screened_scan import ScanCodes


def case(family, dim, args):
    """Rows of one family (or generator of ``independent_data.py``, ``dim=None``) and dimension: each thread
    count and batch size, both ways."""
    if dim is None:
        X64, Q = independent_data.generate_split(family, args.n, args.queries, args.seed)
        dim = X64.shape[1]
    else:
        points = make_family(family, args.n + args.queries, dim, seed=args.seed)
        base_ids, query_ids = holdout_split(len(points), args.queries, seed=args.seed)
        X64, Q = points[base_ids], points[query_ids]
    Q = np.ascontiguousarray(Q)
    X = np.ascontiguousarray(X64, dtype=np.float32 if args.storage == "float32" else np.float64)
    cx, cq = read_only(conformal_factor(X64)), conformal_factor(Q)
    X = read_only(X)
    codes = ScanCodes()
    evict = np.ones(args.evict << 17) if args.evict else None  # float64: 2^17 a MB
    ScanCodes().get(X[:64], cx[:64])  # compiles or loads the coding kernel
    t0 = time.perf_counter()
    codes.get(X, cx)
    make_ms = 1e3 * (time.perf_counter() - t0)
    rows = []
    for threads in (int(t) for t in args.threads.split(",")):
        numba.set_num_threads(threads)
        for m in (int(b) for b in args.batches.split(",")):
            starts = range(0, args.queries - m + 1, m)
            ways = {"plain": None, "codes": codes}
            for way in ways.values():  # untimed: compiles or loads the kernels
                knn_delta_scan(Q[:m], cq[:m], X, cx, args.k, codes=way)
            times = {name: [] for name in ways}
            for _ in range(args.alternations):
                for name, way in ways.items():
                    calls = []
                    for s in starts:
                        if evict is not None:
                            evict.sum()
                        t = time.perf_counter()
                        got = knn_delta_scan(Q[s:s + m], cq[s:s + m], X, cx, args.k, codes=way)
                        calls.append(time.perf_counter() - t)
                        if name == "codes":
                            want = knn_delta_scan(Q[s:s + m], cq[s:s + m], X, cx, args.k)
                            assert np.array_equal(got[0], want[0]) and np.array_equal(got[1], want[1]), (family, s)
                    times[name].append(1e3 * float(np.median(calls)))
            plain, coded = float(np.median(times["plain"])), float(np.median(times["codes"]))
            rows.append({"family": family, "dim": dim, "storage": args.storage, "threads": threads, "batch": m,
                         "plain_ms": plain, "codes_ms": coded, "plain_over_codes": plain / coded,
                         "codes_made_ms": make_ms, "runs_ms": times})
            print(f"{family} {dim}-D {args.storage}, {threads} thread(s), {m} quer{'y' if m == 1 else 'ies'}: "
                  f"plain {plain:.3f} ms, codes {coded:.3f} ms ({plain / coded:.2f}x)", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="hierarchical_tree,gaussian_mixture,hyperbolic_uniform,boundary_heavy,"
                                          "duplicates")
    ap.add_argument("--dims", default="100")
    ap.add_argument("--data", default="", help="comma-separated generators of independent_data.py of at least "
                                               "16 coordinates (lowrank, meru_like), each in its own dimension")
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--queries", type=int, default=60)
    ap.add_argument("--k", type=int, default=10)
    ap.add_argument("--batches", default="1,2,3")
    ap.add_argument("--threads", default="1,2", help="numba thread counts (at most NUMBA_NUM_THREADS)")
    ap.add_argument("--storage", choices=["float64", "float32"], default="float64")
    ap.add_argument("--alternations", type=int, default=5)
    ap.add_argument("--evict", type=int, default=0, help="MB read between calls (0: none)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="screened_scan")
    args = ap.parse_args(argv)
    if any(int(b) >= GRAM_MIN_QUERIES for b in args.batches.split(",")):
        ap.error(f"--batches must stay below GRAM_MIN_QUERIES = {GRAM_MIN_QUERIES} (larger ones take Gram blocks)")
    rows = []
    for dim in (int(d) for d in filter(None, args.dims.split(","))):
        for family in filter(None, args.families.split(",")):
            rows += case(family, dim, args)
    for name in filter(None, args.data.split(",")):
        rows += case(name, None, args)
    print(markdown_table([{**r, "plain_ms": f"{r['plain_ms']:.3f}", "codes_ms": f"{r['codes_ms']:.3f}",
                           "plain_over_codes": f"{r['plain_over_codes']:.2f}",
                           "codes_made_ms": f"{r['codes_made_ms']:.1f}"} for r in rows],
                         ["family", "dim", "storage", "threads", "batch", "plain_ms", "codes_ms", "plain_over_codes",
                          "codes_made_ms"]))
    print("wrote", write_json(args.output, {"args": vars(args), "rows": rows, "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
