"""The main job on an embedded data set: build, search exactly, check, time.

Used by ``hypann demo``; returns rows for the CLI to print (no printing here).
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from hypann.eval.numpy_brute import numpy_brute_knn
from hypann.index import HyperbolicIndex

log = logging.getLogger(__name__)


@dataclass
class DemoRow:
    data: str
    method: str
    recall_at_k: float
    mean_oracle_calls: float
    mean_samples: float
    build_s: float
    queries_per_s: float
    speedup_vs_numpy_brute: float


def holdout_split(points, n_queries, seed):
    """Withhold ``n_queries`` random points as queries (the paper's protocol)."""
    rng = np.random.default_rng(seed)
    qid = rng.choice(len(points), size=n_queries, replace=False)
    keep = np.ones(len(points), dtype=bool)
    keep[qid] = False
    return points[keep], points[qid]


def time_search(index, queries, k, **kw):
    index.search(queries[: min(8, len(queries))], k, **kw)  # warm-up: numba compile, caches
    t0 = time.perf_counter()
    res = index.search(queries, k, **kw)
    return res, time.perf_counter() - t0


def run_exact(name, base, queries, *, k=10, configs=(("recentering", "kdtree", {}),), brute_queries=None, progress=None):
    """Exact search vs blocked numpy brute force on the same queries.

    ``brute_queries`` limits the numpy baseline to the first that many queries
    (its time per query is what matters; 100-D brute force is slow).
    """
    nb = len(queries) if brute_queries is None else min(brute_queries, len(queries))
    t0 = time.perf_counter()
    true_ids, true_d = numpy_brute_knn(queries[:nb], base, k)
    brute_qps = nb / (time.perf_counter() - t0)
    rows = []
    for algorithm, oracle, params in configs:
        if progress:
            progress(f"{name}: {algorithm}+{oracle}")
        t0 = time.perf_counter()
        index = HyperbolicIndex(algorithm=algorithm, oracle=oracle, random_state=0, **params).build(base)
        build_s = time.perf_counter() - t0
        res, secs = time_search(index, queries, k)
        qps = len(queries) / secs
        rows.append(
            DemoRow(
                name,
                f"{algorithm} + {oracle}" if oracle else algorithm,
                _recall(res, true_d, nb),
                float(res.stats.oracle_calls.mean()),
                float(res.stats.samples.mean()),
                build_s,
                qps,
                qps / brute_qps,
            )
        )
    rows.append(DemoRow(name, "numpy brute force (float64)", 1.0, 0.0, float(len(base)), 0.0, brute_qps, 1.0))
    return rows


def _recall(res, true_d, nb):
    k = res.k
    thresh = true_d[:, k - 1 : k] * (1 + 1e-9)
    return float(np.mean(np.sum(res.distances[:nb] <= thresh, axis=1) / k))


def run_demo(data="default", *, n_queries=1000, k=10, quick=False, seed=0, log=None):
    """The demo: exact 10-D search on the default data; rows for a table."""
    from hypann.datasets.synthetic import hierarchical_tree

    n = 20_000 if quick else 100_000
    n_queries = min(n_queries, 200) if quick else n_queries
    if data not in ("default", "synthetic-tree-10d"):
        raise ValueError(f"unknown demo data {data!r}; expected 'default' or 'synthetic-tree-10d'")
    pts = hierarchical_tree(n + n_queries, 10, seed=seed)
    base, queries = holdout_split(pts, n_queries, seed)
    return run_exact(
        f"synthetic tree 10-D, n={len(base):,}",
        base,
        queries,
        k=k,
        configs=(("recentering", "kdtree", {}),),
        progress=log,
    )
