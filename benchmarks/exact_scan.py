"""The exact scan with and without the Gram screen, by data family, dimension and batch size.

For each family of :mod:`hypann.datasets.families` and dimension, ``--n``
base points and the largest batch of held-out queries (same generator),
``--k`` neighbours (default 10), one thread (numba and BLAS; ``--threads`` for
more), the median over ``--repeats`` of:

* numpy float64 brute force (:func:`hypann.eval.numpy_brute.numpy_brute_knn`)
  on ``--brute-queries`` queries: the baseline of every "x";
* the plain numba scan (:func:`hypann.geometry._kernels.brute_knn_delta`);
* the Gram-screened scan (:func:`hypann.geometry.gram_scan.gram_knn_delta`),
  with the points it evaluated exactly per query;

for every batch size of ``--batches`` (queries per call; the calls cover
the same queries). Both scans are checked to return the same ids and
deltas. ``--storage float32`` rounds the base points to float32 as a float32 index stores them
(with the conformal factors of the float64 points) and scans them as float32 rows: the Gram
products are then float32 ones (module docstring of :mod:`hypann.geometry.gram_scan`); numpy
brute force still gets the float64 points. Prints a markdown
table and writes ``results/exact_scan.json`` (``exact_scan_k<k>.json`` for another ``--k``, with
``_float32`` added for float32 storage).
``hypann.geometry.gram_scan.GRAM_MIN_QUERIES`` is the batch size from which
the screen is used.

Usage::

    python benchmarks/exact_scan.py
    python benchmarks/exact_scan.py --n 100000 --dims 10,100 --batches 1,8,256
    python benchmarks/exact_scan.py --k 100 --batches 256
    python benchmarks/exact_scan.py --n 100000 --dims 100 --batches 256 --storage float32
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np
from threadpoolctl import threadpool_limits

from _common import family_arguments, family_cases, family_split, markdown_table, median_time, write_json
from hypann.eval.numpy_brute import numpy_brute_knn
from hypann.geometry._kernels import brute_knn_delta, brute_knn_delta_serial
from hypann.geometry.gram_scan import gram_knn_delta


def in_calls(fn, Q, cq, batch):
    """``fn`` over ``Q`` in calls of ``batch`` queries; returns the stacked ``(ids, deltas)``."""
    parts = [fn(Q[s:s + batch], cq[s:s + batch]) for s in range(0, len(Q), batch)]
    return np.vstack([p[0] for p in parts]), np.vstack([p[1] for p in parts])


def run_case(name, dim, args):
    n, X, cx, Q, cq = family_split(name, dim, args)
    nbq = min(args.brute_queries, args.queries)
    brute_s, _ = median_time(lambda: numpy_brute_knn(Q[:nbq], X, args.k), repeats=1, warmup=0)
    brute_qps = nbq / brute_s
    if args.storage == "float32":  # as a float32 index stores them: the factors stay those of the float64 points
        X = np.ascontiguousarray(X, dtype=np.float32)
    rows = []
    for batch in args.batch_sizes:
        plain = brute_knn_delta_serial if batch == 1 else brute_knn_delta

        def run_plain(batch=batch, plain=plain):
            return in_calls(lambda q, c: plain(q, c, X, cx, args.k), Q, cq, batch)

        def run_gram(batch=batch):
            return in_calls(lambda q, c: gram_knn_delta(q, c, X, cx, args.k), Q, cq, batch)

        run_plain(), run_gram()  # compile / warm
        plain_s, want = median_time(run_plain, repeats=args.repeats, warmup=0)
        gram_s, got = median_time(run_gram, repeats=args.repeats, warmup=0)
        if not (np.array_equal(want[0], got[0]) and np.array_equal(want[1], got[1])):
            raise AssertionError(f"{name} {dim}-D batch {batch}: the Gram scan differs from the plain scan")
        evaluated = gram_knn_delta(Q[:batch], cq[:batch], X, cx, args.k, return_evaluated=True)[2]
        row = {"family": name, "dim": dim, "n": n, "storage": args.storage, "k": args.k, "batch": batch,
               "brute_qps": brute_qps,
               "plain_x": len(Q) / plain_s / brute_qps, "gram_x": len(Q) / gram_s / brute_qps,
               "gram_over_plain": plain_s / gram_s, "evaluated_per_query": float(np.median(evaluated))}
        print(f"{name:18s} {dim:3d}-D batch {batch:4d}: plain {row['plain_x']:7.1f}x, gram {row['gram_x']:7.1f}x "
              f"brute ({row['gram_over_plain']:.2f}x plain), {row['evaluated_per_query']:.0f} evaluated a query",
              flush=True)
        rows.append(row)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    family_arguments(ap, n=20_000, queries=256, brute_queries=50, repeats=3)
    ap.add_argument("--dims", default="10,32,100")
    ap.add_argument("--batches", default="1,2,4,8,16,256", help="queries per call, comma-separated")
    ap.add_argument("--k", type=int, default=10, help="neighbours per query")
    ap.add_argument("--threads", type=int, default=1,
                    help="numba threads of the scans (run with NUMBA_NUM_THREADS at least this); the Gram "
                         "scan sets BLAS's threads itself; numpy brute force runs on one")
    ap.add_argument("--storage", choices=("float64", "float32"), default="float64",
                    help="the base points' type in the scans (float32: rounded as a float32 index stores them)")
    args = ap.parse_args(argv)
    args.batch_sizes = [int(b) for b in args.batches.split(",")]
    numba.set_num_threads(args.threads)
    rows = []
    t0 = time.perf_counter()
    with threadpool_limits(1):
        for name, dim in family_cases(args.families, args.dims):
            rows += run_case(name, dim, args)
    columns = ["family", "dim", "n", "storage", "k", "batch", "brute_qps", "plain_x", "gram_x", "gram_over_plain",
               "evaluated_per_query"]
    print(markdown_table(rows, columns))
    name = "exact_scan" if args.k == 10 else f"exact_scan_k{args.k}"
    if args.storage == "float32":
        name += "_float32"
    write_json(name, {"args": vars(args), "seconds": time.perf_counter() - t0, "rows": rows})


if __name__ == "__main__":
    main()
