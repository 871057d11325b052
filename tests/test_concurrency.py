"""Concurrent queries: 8 Python threads searching one index get exactly the single-threaded results."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest

import hypann
from tests.conftest import ball_points

pytest.importorskip("faiss")
pytest.importorskip("hnswlib")

THREADS = 8
ORACLES = ["kdtree", "hkdtree", "lsh:tables=4,bits=6,granularity=4", "faiss:HNSW16", "hnswlib:M=8,ef=16"]
CONFIGS = [(a, o) for a in ("recentering", "binary_search", "shells", "random_shells") for o in ORACLES] + [
    ("hkdtree", None),
    ("vamana", None),
    ("brute", None),
]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(11)
    X = ball_points(rng, 400, 4, min_conformal=1e-6)
    Q = ball_points(rng, 32, 4, min_conformal=1e-6)
    return X, Q


def _same(a, b):
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.distances, b.distances)
    np.testing.assert_array_equal(a.stats.samples, b.stats.samples)
    np.testing.assert_array_equal(a.stats.oracle_calls, b.stats.oracle_calls)


@pytest.mark.parametrize("algorithm, oracle", CONFIGS)
def test_threads_get_the_single_threaded_results(data, algorithm, oracle):
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm=algorithm, oracle=oracle, random_state=5).build(X)
    slices = np.array_split(np.arange(len(Q)), THREADS)
    calls = [dict(k=5)]
    if algorithm in ("vamana", "brute", "random_shells", "recentering"):
        # budgets exercise the restarts (vamana), the sample (brute) and early stops
        calls.append(dict(k=3, budget=40))
    for kw in calls:
        reference_full = index.search(Q, **kw)
        reference = [index.search(Q[s], **kw) for s in slices]
        with ThreadPoolExecutor(THREADS) as pool:
            own = list(pool.map(lambda s: index.search(Q[s], **kw), slices))
            shared = list(pool.map(lambda _: index.search(Q, **kw), range(THREADS)))
        for got, ref in zip(own, reference):
            _same(got, ref)
        for got in shared:
            _same(got, reference_full)


def test_hnswlib_ef_per_call_is_not_shared_between_threads(data):
    """hnswlib's ef is index-global; concurrent calls with different ef must each get their own."""
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm="recentering", oracle="hnswlib:M=4,ef=4").build(X)
    efs = [4, 5, 8, 200] * 2
    reference = {ef: index.search(Q, 10, oracle_params={"ef": ef}) for ef in set(efs)}
    assert not np.array_equal(reference[4].indices, reference[200].indices)
    for _ in range(3):
        with ThreadPoolExecutor(THREADS) as pool:
            got = list(pool.map(lambda ef: index.search(Q, 10, oracle_params={"ef": ef}), efs))
        for ef, res in zip(efs, got):
            _same(res, reference[ef])


def test_random_shells_repeat_calls_are_reproducible(data):
    """The shell order is drawn per call from a build-time seed, not from a shared generator."""
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm="random_shells", oracle="kdtree", random_state=5).build(X)
    first = index.search(Q, 5, budget=30)
    again = index.search(Q, 5, budget=30)
    _same(first, again)
    other_seed = index.search(Q, 5, budget=30, random_state=123)
    assert not np.array_equal(first.stats.samples, other_seed.stats.samples) or not np.array_equal(
        first.indices, other_seed.indices
    )
