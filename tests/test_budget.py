"""``budget=`` is a hard limit: ``stats.samples <= budget`` for every algorithm and oracle.

Every built-in combination stops exactly (the allowance stated in each
algorithm's docstring and in ``HyperbolicIndex.search`` is zero); a
third-party oracle that counts its evaluations but cannot stop early may
overshoot by the evaluations of one call, and no more.
"""

from __future__ import annotations

import numpy as np
import pytest

import hypann
from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle
from tests.conftest import ball_points

pytest.importorskip("faiss")
pytest.importorskip("hnswlib")

ORACLES = {
    "brute": "brute",
    "kdtree": "kdtree",
    "hkdtree": "hkdtree",
    "lsh": "lsh:tables=3,bits=4,granularity=4",
    "faiss": "faiss:HNSW8",
    "hnswlib": "hnswlib:M=8,ef=16",
}
ORACLE_ALGORITHMS = ["recentering", "binary_search", "shells", "random_shells"]
COMBINATIONS = [(a, o) for a in ORACLE_ALGORITHMS for o in ORACLES] + [
    ("shells-recenter", o) for o in ("brute", "kdtree", "faiss")
] + [("hkdtree", None), ("vamana", None), ("brute", None), ("auto", None)]
BUDGETS = [1, 7, 100]


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(7)
    X = ball_points(rng, 400, 3, min_conformal=1e-8)
    Q = np.vstack([ball_points(rng, 10, 3, min_conformal=1e-8), X[:2]])
    return X, Q


_built = {}


def _index(algorithm, oracle, X):
    key = (algorithm, oracle)
    if key not in _built:
        params = {}
        if algorithm == "shells-recenter":
            algorithm, params = "shells", {"recenter": True}
        spec = None if oracle is None else ORACLES[oracle]
        _built[key] = hypann.HyperbolicIndex(algorithm=algorithm, oracle=spec, random_state=3, **params).build(X)
    return _built[key]


@pytest.mark.parametrize("k", [1, 10])
@pytest.mark.parametrize("budget", BUDGETS)
@pytest.mark.parametrize("algorithm, oracle", COMBINATIONS)
def test_samples_never_exceed_budget(data, algorithm, oracle, budget, k):
    X, Q = data
    index = _index(algorithm, oracle, X)
    res = index.search(Q, k, budget=budget)
    assert res.stats.samples.max() <= budget
    assert np.all(res.stats.samples >= 1)
    # never more neighbours than points examined, and what is returned is real
    found = res.indices >= 0
    assert np.all(found.sum(axis=1) <= res.stats.samples)
    assert np.all(np.isfinite(res.distances[found])) and np.all(np.isinf(res.distances[~found]))


def test_large_budget_changes_nothing_for_exact_search(data):
    X, Q = data
    for algorithm, oracle in [("recentering", "kdtree"), ("hkdtree", None), ("brute", None)]:
        index = _index(algorithm, oracle, X)
        free = index.search(Q, 5)
        capped = index.search(Q, 5, budget=10**9)
        np.testing.assert_array_equal(capped.indices, free.indices)
        np.testing.assert_array_equal(capped.distances, free.distances)


class _CountingNoStop(EuclideanOracle):
    """A third-party style oracle: counts its evaluations (all n) but cannot stop early."""

    name = "counting-no-stop"
    exact = True
    counts_evaluations = True

    def _build(self, points):
        self._points = points

    def _knn(self, queries, k):
        sq = ((queries[:, None, :] - self._points[None]) ** 2).sum(-1)
        ids = np.argsort(sq, axis=1, kind="stable")[:, :k]
        return EuclideanNeighbors(np.take_along_axis(sq, ids, 1), ids, np.full(len(queries), len(self._points)))


@pytest.mark.parametrize("algorithm", ["recentering", "binary_search", "shells"])
def test_non_stopping_counting_oracle_overshoots_by_at_most_one_call(data, algorithm):
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm=algorithm, oracle=_CountingNoStop()).build(X)
    res = index.search(Q, 3, budget=7)
    # one call examines every point of the oracle (all of X for recentering)
    assert np.all(res.stats.samples <= 7 + len(X))
    assert np.all(res.stats.oracle_calls == 1)


def test_brute_algorithm_budget_scans_a_fixed_sample(data):
    X, Q = data
    index = _index("brute", None, X)
    a = index.search(Q, 3, budget=50)
    b = index.search(Q[::-1], 3, budget=50)
    assert np.all(a.stats.samples == 50)
    np.testing.assert_array_equal(a.indices, b.indices[::-1])
