"""The kd-tree's ``leaf_size`` on every data family: batch and one-query speed, points examined, memory.

For each family of :mod:`hypann.datasets.families` and dimension, ``--n``
base points and ``--queries`` held-out queries
(:func:`hypann.datasets.base.holdout_split`), k = 10, one numba thread. For
every leaf size in ``--leaf-sizes`` the script builds
``HyperbolicIndex(algorithm="hkdtree", leaf_size=L, n_jobs=1)`` and measures

* ``batch_us``: microseconds per query of one call with all the queries; the
  leaf sizes are timed round-robin (``--repeats`` passes over all of them,
  median per leaf size), so a busy machine slows them alike;
* ``single_us``: the median time of a call with one query, on the first
  ``--single`` queries, the calls interleaved query by query over the leaf sizes;
* ``samples``: the mean points examined per query;
* ``build_s`` and ``bytes_per_point`` (``index.nbytes / n``).

Every leaf size must give the same answer (the search is exact): the
distances are compared bit for bit with the first leaf size's. The table
gives each leaf size's batch and one-query time over that of ``--baseline``
(the current default) in the same run.

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/hkdtree_leaf_size.py
    NUMBA_NUM_THREADS=1 python benchmarks/hkdtree_leaf_size.py --families gaussian_mixture --dims 10 --n 20000

Writes ``results/hkdtree_leaf_size.json`` (``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import hypann
from _common import family_cases, family_split, report_rows
from hypann.datasets.families import FAMILIES

K = 10


def measure_case(family, dim, args):
    """Rows (one per leaf size) for one family and dimension."""
    _, base, _, queries, _ = family_split(family, dim, args)
    indexes, builds = {}, {}
    for leaf in args.leaf_sizes:
        t0 = time.perf_counter()
        indexes[leaf] = hypann.HyperbolicIndex(algorithm="hkdtree", leaf_size=leaf, n_jobs=1,
                                               verbose=False).build(base)
        builds[leaf] = time.perf_counter() - t0
        indexes[leaf].search(queries[:4], K)  # warm
    batch = {leaf: [] for leaf in args.leaf_sizes}
    results = {}
    for _ in range(args.repeats):
        for leaf in args.leaf_sizes:
            t0 = time.perf_counter()
            results[leaf] = indexes[leaf].search(queries, K)
            batch[leaf].append(time.perf_counter() - t0)
    single = {leaf: [] for leaf in args.leaf_sizes}
    for i in range(min(args.single, len(queries))):
        for leaf in args.leaf_sizes:
            t0 = time.perf_counter()
            indexes[leaf].search(queries[i:i + 1], K)
            single[leaf].append(time.perf_counter() - t0)
    first = results[args.leaf_sizes[0]]
    rows = []
    for leaf in args.leaf_sizes:
        res = results[leaf]
        if not np.array_equal(res.distances, first.distances):
            raise AssertionError(f"{family} {dim}-D: leaf_size={leaf} answers differently from "
                                 f"leaf_size={args.leaf_sizes[0]} (the search is exact)")
        rows.append({"family": family, "dim": dim, "n": len(base), "leaf_size": leaf,
                     "batch_us": 1e6 * float(np.median(batch[leaf])) / len(queries),
                     "single_us": 1e6 * float(np.median(single[leaf])),
                     "samples": float(res.stats.samples.mean()), "build_s": builds[leaf],
                     "bytes_per_point": indexes[leaf].nbytes / len(base)})
    base_row = next(r for r in rows if r["leaf_size"] == args.baseline)
    for r in rows:
        r["batch_vs_baseline"] = base_row["batch_us"] / r["batch_us"]
        r["single_vs_baseline"] = base_row["single_us"] / r["single_us"]
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join(FAMILIES), help="comma-separated family names")
    ap.add_argument("--dims", default="10,100")
    ap.add_argument("--n", type=int, default=100_000, help="base points per family (WordNet: at most 82,115 - queries)")
    ap.add_argument("--queries", type=int, default=300)
    ap.add_argument("--single", type=int, default=200, help="queries timed one per call")
    ap.add_argument("--leaf-sizes", default="8,16,24,32,48,64")
    ap.add_argument("--baseline", type=int, default=16, help="the leaf size the ratios are taken against")
    ap.add_argument("--repeats", type=int, default=3, help="passes over all leaf sizes (median per leaf size)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="hkdtree_leaf_size", help="name of the results/<out>.json file")
    args = ap.parse_args(argv)
    args.leaf_sizes = [int(x) for x in args.leaf_sizes.split(",")]
    if args.baseline not in args.leaf_sizes:
        ap.error(f"--baseline {args.baseline} must be one of --leaf-sizes {args.leaf_sizes}")
    numba.set_num_threads(1)
    rows = []
    for family, dim in family_cases(args.families, args.dims):
        t0 = time.perf_counter()
        got = measure_case(family, dim, args)
        rows += got
        best = max(got, key=lambda r: r["batch_vs_baseline"])
        print(f"{family} {dim}-D ({time.perf_counter() - t0:.0f}s): fastest batch at leaf_size="
              f"{best['leaf_size']} ({best['batch_vs_baseline']:.2f}x leaf_size={args.baseline})", flush=True)
    cols = ["family", "dim", "n", "leaf_size", "batch_us", "batch_vs_baseline", "single_us", "single_vs_baseline",
            "samples", "build_s", "bytes_per_point"]
    report_rows(args.out, rows, cols, {**vars(args), "k": K})


if __name__ == "__main__":
    main()
