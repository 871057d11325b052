"""The main job on the embedded data: build, search, check against brute force, time.

Used by ``hypann demo``; returns rows for the CLI to print (no printing here).

Default: the WordNet noun hierarchy shipped with hypann, searched exactly in
10-D (the trained Poincare embedding) and approximately in 100-D (the
combinatorial embedding), 1,000 held-out queries each, k = 10. Ground truth
is exact float64 brute force; the speed baseline is the blocked numpy
brute force, timed in the same run.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass

import numpy as np

from hypann.metrics import recall
from hypann.eval.numpy_brute import numpy_brute_knn
from hypann.index import HyperbolicIndex
from hypann.settings import DEFAULT_EVAL_K

log = logging.getLogger(__name__)

#: Points of the untimed build before each timed one (run_table).
WARMUP_POINTS = 2_000

EXACT_CONFIGS = (
    ("Recentering + cKDTree (exact)", dict(algorithm="recentering", oracle="kdtree")),
    ("hyperbolic kd-tree (exact)", dict(algorithm="hkdtree")),
)
APPROX_CONFIGS = (
    ("Spherical-Shell + LSH (paper: w=3, 5x15, probe 1)", dict(algorithm="shells", oracle="lsh:tables=5,bits=15,granularity=auto,probe=1", width=3.0)),
    ("Spherical-Shell + LSH, recentred in shells", dict(algorithm="shells", oracle="lsh:tables=5,bits=15,granularity=auto,probe=1", width=3.0, recenter=True)),
    ("hyperbolic kd-tree (exact)", dict(algorithm="hkdtree")),
)


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
    """``(result, seconds)`` of one search of the whole batch, after an untimed search of the same batch.

    The warm-up is the whole batch, not a few queries: a batch of hundreds of queries takes other kernels
    than a small one (searched in the structure's order, ``hypann._runtime.searched_in_order``), and on a
    fresh machine their first compilation fell inside the timed call (with an empty numba cache the 10-D
    kd-tree read 2.1x numpy brute force; 336x with this warm-up).
    """
    index.search(queries, k, **kw)  # warm-up: numba compile, caches
    t0 = time.perf_counter()
    res = index.search(queries, k, **kw)
    return res, time.perf_counter() - t0


def run_table(name, base, queries, *, k=DEFAULT_EVAL_K, configs=EXACT_CONFIGS, true_d=None, brute_queries=None, progress=None):
    """Each config vs blocked numpy brute force on the same queries.

    The numpy baseline is timed on the first ``brute_queries`` queries (its
    time per query is what matters; 100-D brute force is slow); when
    ``true_d`` is not given, its answers are the ground truth for those.
    """
    nb = len(queries) if brute_queries is None else min(brute_queries, len(queries))
    t0 = time.perf_counter()
    _, brute_d = numpy_brute_knn(queries[:nb], base, k)
    brute_qps = nb / (time.perf_counter() - t0)
    if true_d is None:
        true_d, checked = brute_d, nb
    else:
        checked = len(queries)
        np.testing.assert_allclose(brute_d, true_d[:nb, :k], rtol=1e-9, atol=1e-12)
    rows = []
    for label, settings in configs:
        if progress:
            progress(f"{name}: {label}")
        # an untimed build on a part of the points first, so that the timed build does not include numba's
        # first compilation of the build's kernels (on a fresh machine: seconds)
        HyperbolicIndex(random_state=0, **settings).build(base[:WARMUP_POINTS])
        t0 = time.perf_counter()
        index = HyperbolicIndex(random_state=0, **settings).build(base)
        build_s = time.perf_counter() - t0
        res, secs = time_search(index, queries, k)
        qps = len(queries) / secs
        rows.append(
            DemoRow(name, label, recall(res.distances[:checked], true_d[:checked], k),
                    float(res.stats.oracle_calls.mean()), float(res.stats.samples.mean()), build_s, qps, qps / brute_qps)
        )
    rows.append(DemoRow(name, "numpy brute force (float64)", 1.0, 0.0, float(len(base)), 0.0, brute_qps, 1.0))
    return rows


def run_demo(data="default", *, n_queries=1000, k=DEFAULT_EVAL_K, quick=False, seed=0, log=None):
    """Exact 10-D and approximate 100-D search on the embedded data; rows for a table."""
    from hypann.datasets import load
    from hypann.datasets.synthetic import hierarchical_tree

    if quick:  # small synthetic trees: seconds, no WordNet needed
        rows = []
        for dim, configs in ((10, EXACT_CONFIGS), (100, APPROX_CONFIGS)):
            pts = hierarchical_tree(5_000 + min(n_queries, 200), dim, seed=seed)
            base, queries = holdout_split(pts, min(n_queries, 200), seed)
            rows += run_table(f"synthetic tree {dim}-D, n={len(base):,}", base, queries, k=k, configs=configs, progress=log)
        return rows
    exact_name = "wordnet-nouns-10d" if data == "default" else data
    ds = load(exact_name, n_queries=n_queries, k=k, seed=seed)
    rows = run_table(f"{exact_name}, n={len(ds.train):,}", ds.train, ds.test, k=k, configs=EXACT_CONFIGS,
                     true_d=ds.distances, progress=log)
    if data == "default":
        ds = load("wordnet-nouns-100d", n_queries=n_queries, k=k, seed=seed)
        rows += run_table(f"wordnet-nouns-100d, n={len(ds.train):,}", ds.train, ds.test, k=k, configs=APPROX_CONFIGS,
                          true_d=ds.distances, brute_queries=100, progress=log)
    return rows
