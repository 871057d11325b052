"""Exact and ratio-approximate search vs blocked numpy float64 brute force.

Data: the demo's hierarchical tree (100,000 base points + 1,000 held-out
queries) in 10-D and 100-D. Every method answers the same batch of 1,000
queries with k=10 (and k=1 for the oracle-call statistics of the paper's
Table 1); speed is queries/second, median of repeats, and the ratio against
numpy brute force measured in the same run. Single thread for every method
(NUMBA_NUM_THREADS=1 is set before numba loads; cKDTree workers=1).

    python benchmarks/exact.py [--quick] [--dims 10 100] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from _common import markdown_table, median_time, write_json  # noqa: E402

import hypann  # noqa: E402
from hypann.datasets.synthetic import hierarchical_tree  # noqa: E402
from hypann.apps.demo import holdout_split  # noqa: E402
from hypann.eval.metrics import recall  # noqa: E402
from hypann.eval.numpy_brute import numpy_brute_knn  # noqa: E402

METHODS = [
    ("recentering + kdtree", dict(algorithm="recentering", oracle="kdtree"), {}),
    ("recentering + kdtree (one phase)", dict(algorithm="recentering", oracle="kdtree", two_phase=False), {}),
    ("binary_search ratio=1.1 + kdtree", dict(algorithm="binary_search", oracle="kdtree", ratio=1.1), {}),
    ("binary_search ratio=2 + kdtree", dict(algorithm="binary_search", oracle="kdtree", ratio=2.0), {}),
    ("recentering + hkdtree", dict(algorithm="recentering", oracle="hkdtree"), {}),
    ("hkdtree (hyperbolic pruning)", dict(algorithm="hkdtree"), {}),
    ("brute (numba)", dict(algorithm="brute"), {}),
]


def run(dim, n, n_queries, k, repeats, brute_queries):
    pts = hierarchical_tree(n + n_queries, dim, seed=0)
    base, queries = holdout_split(pts, n_queries, seed=0)
    nb = min(brute_queries, n_queries)
    brute_s, (true_ids, true_d) = median_time(lambda: numpy_brute_knn(queries[:nb], base, k), repeats=1, warmup=0)
    brute_qps = nb / brute_s
    rows = [{"data": f"tree {dim}-D", "method": "numpy brute force (float64, baseline)", "k": k, "recall": 1.0,
             "queries_per_s": brute_qps, "speedup": 1.0}]
    for label, settings, query_kw in METHODS:
        try:
            index = hypann.HyperbolicIndex(random_state=0, **settings)
            build_s, index = median_time(lambda: index.build(base), repeats=1, warmup=0)
        except (ImportError, ValueError) as exc:  # an optional algorithm not available
            print(f"skip {label}: {exc}")
            continue
        secs, res = median_time(lambda: index.search(queries, k, **query_kw), repeats=repeats)
        _, res1 = median_time(lambda: index.search(queries, 1), repeats=1, warmup=0)
        qps = n_queries / secs
        calls = res.stats.summary()["oracle_calls"]
        calls1 = res1.stats.summary()["oracle_calls"]
        rows.append({
            "data": f"tree {dim}-D", "method": label, "k": k,
            "recall": recall(res.distances[:nb], true_d, k),
            "max_ratio": float(np.max(res.distances[:nb] / np.where(true_d > 0, true_d, 1))),
            "queries_per_s": qps, "speedup": qps / brute_qps, "build_s": build_s,
            "calls_mean": calls["mean"], "calls_sd": calls["sd"], "calls_min": calls["min"], "calls_max": calls["max"],
            "calls_k1_mean": calls1["mean"], "calls_k1_sd": calls1["sd"], "calls_k1_min": calls1["min"], "calls_k1_max": calls1["max"],
            "samples_mean": float(res.stats.samples.mean()), "index_bytes": index.nbytes,
        })
    return rows


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20k points, 200 queries")
    ap.add_argument("--dims", type=int, nargs="+", default=[10, 100])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("-k", type=int, default=10)
    args = ap.parse_args()
    n, nq = (20_000, 200) if args.quick else (100_000, 1000)
    rows = []
    for dim in args.dims:
        # numpy brute force at 100-D takes ~0.1 s/query: time it on 200 queries
        rows += run(dim, n, nq, args.k, args.repeats, brute_queries=nq if dim <= 10 else min(nq, 200))
    cols = ["data", "method", "recall", "max_ratio", "queries_per_s", "speedup", "build_s",
            "calls_mean", "calls_sd", "calls_min", "calls_max", "calls_k1_mean", "calls_k1_max", "samples_mean"]
    print(markdown_table(rows, cols))
    path = write_json("exact", {"params": vars(args) | {"n": n, "n_queries": nq}, "rows": rows})
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
