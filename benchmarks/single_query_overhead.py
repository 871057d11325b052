"""Where a one-query call to hypann spends its time: the public wrapper against the search below it.

For one family (default: the 10-D Gaussian mixture, 20,000 points), on one
numba thread, the median time of a call that asks for the 10 nearest
neighbours of one query, through

* ``HyperbolicIndex.search`` (the public API: validation, conformal factor,
  thread setting, result assembly);
* the algorithm object below it (``HyperbolicGraphIndex.search`` for
  ``graph``, ``algorithm_.search`` for ``hkdtree``), with the query's
  conformal factor given;
* pynndescent's ``query`` (numba Poincare metric, :mod:`peers`), for scale;

and the per-query time of the same index in a batch of ``--queries`` queries.
``benchmarks/families_peers.py`` measures single-query latency through the
public API; this script says how much of it is per-call overhead.

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/single_query_overhead.py
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import hypann
import peers
from hypann.datasets.base import holdout_split
from hypann.datasets.families import make_family
from hypann.geometry import _kernels

K = 10


def per_call_us(fn, n):
    """Median microseconds of ``fn(i)`` over ``i < n`` (one untimed call first)."""
    fn(0)
    times = []
    for i in range(n):
        t0 = time.perf_counter()
        fn(i)
        times.append(time.perf_counter() - t0)
    return 1e6 * float(np.median(times))


def batch_us(fn, queries, repeats=3):
    """Best-of-``repeats`` microseconds per query of ``fn(queries)``."""
    fn(queries[:2])
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn(queries)
        best = min(best, time.perf_counter() - t0)
    return 1e6 * best / len(queries)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", default="gaussian_mixture")
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-pynndescent", action="store_true")
    args = ap.parse_args(argv)
    numba.set_num_threads(1)
    points = make_family(args.family, args.n + args.queries, args.dim, seed=args.seed)
    base_ids, query_ids = holdout_split(len(points), args.queries, seed=args.seed)
    base, queries = points[base_ids], points[query_ids]
    q_conf = _kernels.conformal_factor(queries)
    m = len(queries)
    print(f"{args.family} {args.dim}-D, {len(base)} points, k={K}, one thread; microseconds")
    print(f"{'method':12s} {'public 1-query call':>20s} {'inner 1-query call':>20s} {'per query in batch':>20s}")
    for algorithm in ("graph", "hkdtree", "auto"):
        index = hypann.HyperbolicIndex(algorithm=algorithm, n_jobs=1, verbose=False,
                                       random_state=args.seed).build(base)
        public = per_call_us(lambda i: index.search(queries[i:i + 1], K), m)
        batch = batch_us(lambda q: index.search(q, K), queries)
        if algorithm == "graph":
            inner_obj = index.algorithm_.graph_
        else:
            inner_obj = index.algorithm_
        inner = per_call_us(lambda i: inner_obj.search(queries[i:i + 1], q_conf[i:i + 1], K), m)
        print(f"{algorithm:12s} {public:20.1f} {inner:20.1f} {batch:20.1f}")
    if not args.no_pynndescent:
        from pynndescent import NNDescent

        peers.pynndescent_warmup(args.dim)
        problem = peers.make_problem(base, queries, K)
        lifted_base, lifted_queries = problem.lifted(np.float64)
        index = NNDescent(lifted_base, metric=peers._PYNND_METRIC, n_neighbors=30, random_state=0, n_jobs=1)
        index.prepare()
        numba.set_num_threads(1)
        for eps in (0.0, 0.1, 0.2):
            single = per_call_us(lambda i: index.query(lifted_queries[i:i + 1], k=K, epsilon=eps), m)
            batch = batch_us(lambda q: index.query(q, k=K, epsilon=eps), lifted_queries)
            print(f"{'pynnd e=' + str(eps):12s} {single:20.1f} {'':>20s} {batch:20.1f}")


if __name__ == "__main__":
    main()
