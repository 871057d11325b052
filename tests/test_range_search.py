"""Range search (``HyperbolicIndex.search_radius``) against float64 brute force."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hypann
from hypann.geometry.poincare import pairwise_dist
from tests.conftest import ball_points

EXACT = [
    dict(algorithm="hkdtree"),
    dict(algorithm="brute"),
    dict(algorithm="recentering", oracle="kdtree"),
    dict(algorithm="recentering", oracle="brute"),
]


def _truth(Q, X, r, c=1.0):
    D = pairwise_dist(Q, X, c=c)
    return [np.flatnonzero(D[i] <= r[i]) for i in range(len(Q))], D


@pytest.mark.parametrize("settings", EXACT, ids=lambda s: "-".join(s.values()))
@given(seed=st.integers(0, 2**31), n=st.integers(1, 200), quantile=st.sampled_from([0.0, 0.02, 0.5, 1.0]))
def test_search_radius_equals_brute_force(settings, seed, n, quantile):
    rng = np.random.default_rng(seed)
    X = ball_points(rng, n, 3, min_conformal=1e-10)
    X[: n // 4] = X[n - n // 4:]  # exact duplicates
    Q = np.vstack([ball_points(rng, 5, 3), X[:3]])
    _, D = _truth(Q, X, np.zeros(len(Q)))
    # radii between data distances (a point at exactly r is a rounding-level tie):
    # 0 gives the exact duplicates only, quantile 1.0 every point
    r = 0.0 if quantile == 0.0 else np.quantile(D, quantile, axis=1) * (1 + 1e-9)
    res = hypann.HyperbolicIndex(**settings).build(X).search_radius(Q, r)
    expect, _ = _truth(Q, X, np.broadcast_to(r, (len(Q),)))
    assert len(res) == len(Q)
    for i in range(len(Q)):
        ids, dist = res[i]
        assert sorted(ids.tolist()) == sorted(expect[i].tolist())
        assert np.all(np.diff(dist) >= 0)
        np.testing.assert_allclose(dist, D[i, ids], rtol=1e-12, atol=0)
    if quantile == 1.0:
        assert np.all(res.counts == n)


def test_search_radius_zero_returns_exact_duplicates_only():
    X = np.array([[0.1, 0.2], [0.1, 0.2], [0.3, -0.4], [0.1, 0.2 + 1e-15]])
    res = hypann.HyperbolicIndex(algorithm="hkdtree").build(X).search_radius(X[:1], 0.0)
    assert sorted(res[0][0].tolist()) == [0, 1]
    np.testing.assert_array_equal(res[0][1], [0.0, 0.0])


def test_search_radius_with_curvature_and_per_query_radii():
    rng = np.random.default_rng(3)
    c = 2.5
    X = ball_points(rng, 300, 4) / np.sqrt(c)
    Q = ball_points(rng, 6, 4) / np.sqrt(c)
    r = np.linspace(0.5, 6.0, 6)
    res = hypann.HyperbolicIndex(algorithm="hkdtree", c=c).build(X).search_radius(Q, r)
    expect, D = _truth(Q, X, r, c=c)
    for i in range(6):
        assert sorted(res[i][0].tolist()) == sorted(expect[i].tolist())
        np.testing.assert_allclose(res[i][1], np.sort(D[i, expect[i]]), rtol=1e-12)


@pytest.mark.parametrize(
    "r, err, match",
    [
        (-1.0, ValueError, r"r must be finite and >= 0, got r=-1.0"),
        (np.nan, ValueError, r"r must be finite and >= 0"),
        ([1.0, 2.0], ValueError, r"r must be a scalar or have shape \(3,\)"),
        ("far", TypeError, r"r must be a number or an array of numbers"),
    ],
)
def test_search_radius_rejects_bad_radius(r, err, match):
    X = ball_points(np.random.default_rng(0), 20, 2)
    index = hypann.HyperbolicIndex(algorithm="hkdtree").build(X)
    with pytest.raises(err, match=match):
        index.search_radius(X[:3], r)


def test_search_radius_not_offered_names_the_alternatives():
    X = ball_points(np.random.default_rng(0), 50, 3)
    index = hypann.HyperbolicIndex(algorithm="vamana").build(X)
    with pytest.raises(NotImplementedError, match=r"algorithm 'vamana' has no range search; use algorithm='hkdtree'"):
        index.search_radius(X[:2], 1.0)
