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

``--model lorentz`` builds and queries the hypann indexes with the same points
on the hyperboloid (``poincare_to_lorentz``); the inner calls take the
unit-ball queries as before.

``--dispatcher`` also times each hypann method's public one-query call with
the kernel called through numba's dispatcher (``dispatcher_us``; the
library calls the compiled code of the query's kind directly,
:class:`hypann._runtime.OneQueryKernel`): the two ways alternate
``--alternations`` times on the same index and queries, and each column
is the median of the alternations' medians.

``--n-jobs 2`` (under ``NUMBA_NUM_THREADS=2``) builds the hypann indexes with
two threads: a one-query scan long enough to split its rows
(``hypann.geometry.gram_scan.SPLIT_SCAN_MIN_WORK``) then runs on both.

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/single_query_overhead.py
    NUMBA_NUM_THREADS=1 python benchmarks/single_query_overhead.py --families hierarchical_tree,gaussian_mixture --dims 10,100

Prints a table per family and a markdown table; writes ``results/<--output>.json`` (default
``single_query_overhead``).
"""

from __future__ import annotations

import argparse
import os
import time

import numba
import numpy as np

import hypann
import peers
from _common import markdown_table, write_json
from hypann._runtime import OneQueryKernel
from hypann.datasets.base import holdout_split
from hypann.datasets.families import make_family
from hypann.geometry import _kernels
from hypann.geometry.models import poincare_to_lorentz

K = 10


def _us(value):
    """A table's microseconds: one decimal, or empty for ``None``."""
    return "" if value is None else f"{value:.1f}"


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


def public_us_both_ways(index, queries, alternations):
    """``(compiled, dispatcher)``: median microseconds of a public one-query call of ``index`` with the
    kernel's compiled code called directly (the library's way) and through numba's dispatcher, the two
    alternating ``alternations`` times (medians of the alternations' medians)."""
    direct = OneQueryKernel._entry_point
    through_dispatcher = lambda self, args: self.kernel  # noqa: E731
    times = {direct: [], through_dispatcher: []}
    try:
        for _ in range(alternations):
            for way in times:
                OneQueryKernel._entry_point = way
                index.__dict__.pop("_one_query", None)  # the one-query function made anew, with this way
                times[way].append(per_call_us(lambda i: index.search(queries[i:i + 1], K), len(queries)))
    finally:
        OneQueryKernel._entry_point = direct
        index.__dict__.pop("_one_query", None)
    return float(np.median(times[direct])), float(np.median(times[through_dispatcher]))


def measure_family(family, dim, args):
    """Rows of the table for one family: each method's public, inner and batch microseconds."""
    points = make_family(family, args.n + args.queries, dim, seed=args.seed)
    base_ids, query_ids = holdout_split(len(points), args.queries, seed=args.seed)
    base, queries = points[base_ids], points[query_ids]
    q_conf = _kernels.conformal_factor(queries)
    m = len(queries)
    if args.model == "lorentz":
        base_in, queries_in = poincare_to_lorentz(base), poincare_to_lorentz(queries)
    else:
        base_in, queries_in = base, queries
    rows = []
    for algorithm in ("graph", "hkdtree", "auto"):
        index = hypann.HyperbolicIndex(algorithm=algorithm, n_jobs=args.n_jobs, verbose=False,
                                       random_state=args.seed, model=args.model).build(base_in)
        if args.dispatcher:
            public, dispatcher = public_us_both_ways(index, queries_in, args.alternations)
        else:
            public, dispatcher = per_call_us(lambda i: index.search(queries_in[i:i + 1], K), m), None
        batch = batch_us(lambda q: index.search(q, K), queries_in)
        inner_obj = index.algorithm_.graph_ if algorithm == "graph" else index.algorithm_
        inner = per_call_us(lambda i: inner_obj.search(queries[i:i + 1], q_conf[i:i + 1], K), m)
        rows.append({"family": family, "dim": dim, "model": args.model, "method": algorithm, "public_us": public,
                     "dispatcher_us": dispatcher, "inner_us": inner, "batch_us": batch})
    if not args.no_pynndescent:
        from pynndescent import NNDescent

        problem = peers.make_problem(base, queries, K)
        lifted_base, lifted_queries = problem.lifted(np.float64)
        index = NNDescent(lifted_base, metric=peers._PYNND_METRIC, n_neighbors=30, random_state=0, n_jobs=1)
        index.prepare()
        numba.set_num_threads(1)
        for eps in (0.0, 0.1, 0.2):
            single = per_call_us(lambda i: index.query(lifted_queries[i:i + 1], k=K, epsilon=eps), m)
            batch = batch_us(lambda q: index.query(q, k=K, epsilon=eps), lifted_queries)
            rows.append({"family": family, "dim": dim, "model": "poincare", "method": f"pynndescent epsilon={eps}",
                         "public_us": single, "dispatcher_us": None, "inner_us": None, "batch_us": batch})
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default="gaussian_mixture", help="comma-separated family names")
    ap.add_argument("--dims", default="10", help="comma-separated dimensions")
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--output", default="single_query_overhead", help="name of the JSON file under results/")
    ap.add_argument("--no-pynndescent", action="store_true")
    ap.add_argument("--model", choices=["poincare", "lorentz"], default="poincare",
                    help="the model of the hypann indexes' input points and queries")
    ap.add_argument("--dispatcher", action="store_true",
                    help="also time the public one-query call with the kernel called through numba's dispatcher")
    ap.add_argument("--alternations", type=int, default=5, help="alternations of the two ways (--dispatcher)")
    ap.add_argument("--n-jobs", type=int, default=1,
                    help="threads of the hypann indexes (run with NUMBA_NUM_THREADS at least this); pynndescent: 1")
    args = ap.parse_args(argv)
    numba.set_num_threads(1)
    if not args.no_pynndescent:
        peers.pynndescent_warmup(10)
    rows = []
    for dim in (int(d) for d in args.dims.split(",")):
        for family in args.families.split(","):
            got = measure_family(family, dim, args)
            rows += got
            print(f"{family} {dim}-D, {args.n} points, k={K}, hypann on {args.n_jobs} thread(s); median microseconds",
                  flush=True)
            print(f"{'method':26s} {'public 1-query call':>20s} {'through dispatcher':>20s} "
                  f"{'inner 1-query call':>20s} {'per query in batch':>20s}")
            for r in got:
                print(f"{r['method']:26s} {r['public_us']:20.1f} {_us(r['dispatcher_us']):>20s} "
                      f"{_us(r['inner_us']):>20s} {r['batch_us']:20.1f}", flush=True)
    table = markdown_table([{**r, **{name: _us(r[name]) for name in ("public_us", "dispatcher_us", "inner_us",
                                                                     "batch_us")}} for r in rows],
                           ["family", "dim", "model", "method", "public_us", "dispatcher_us", "inner_us", "batch_us"])
    print(table)
    print("wrote", write_json(args.output, {"args": vars(args), "rows": rows, "load": os.getloadavg()}))


if __name__ == "__main__":
    main()
