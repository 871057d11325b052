"""Exact hyperbolic k-NN ground truth against a numpy reference."""

import numpy as np
import pytest

from hypann.datasets.synthetic import clustered
from hypann.eval.ground_truth import exact_knn
from hypann.geometry.poincare import conformal_factor, pairwise_dist


def _reference(Q, X, k):
    d = pairwise_dist(Q, X)
    ids = np.argsort(d, axis=1, kind="stable")[:, :k]
    return ids, np.take_along_axis(d, ids, 1)


@pytest.mark.parametrize("k", [1, 5, 10])
def test_matches_numpy_reference(k):
    X = clustered(700, 6, seed=2, n_clusters=5)
    Q = clustered(40, 6, seed=3, n_clusters=5)
    ids, dist = exact_knn(Q, X, k, chunk=16)
    ref_ids, ref_dist = _reference(Q, X, k)
    assert ids.dtype == np.int64 and dist.dtype == np.float64 and ids.shape == (40, k)
    np.testing.assert_allclose(dist, ref_dist, rtol=1e-12)
    np.testing.assert_array_equal(ids, ref_ids)


def test_ties_broken_by_lower_index_and_self_match():
    rng = np.random.default_rng(0)
    base = rng.uniform(-0.5, 0.5, size=(30, 3))
    X = np.vstack([base, base[:5]])  # rows 30..34 duplicate rows 0..4
    ids, dist = exact_knn(base[:5], X, 2)
    np.testing.assert_array_equal(ids, np.c_[np.arange(5), np.arange(30, 35)])
    np.testing.assert_array_equal(dist, 0.0)


def test_precomputed_conformal_is_used_and_checked():
    rng = np.random.default_rng(1)
    X = rng.uniform(-0.5, 0.5, size=(50, 4))
    ids, dist = exact_knn(X[:3], X, 3, q_conformal=conformal_factor(X[:3]), x_conformal=conformal_factor(X))
    ref_ids, _ = _reference(X[:3], X, 3)
    np.testing.assert_array_equal(ids, ref_ids)
    with pytest.raises(ValueError, match="x_conformal must have shape"):
        exact_knn(X[:3], X, 3, x_conformal=np.ones(3))
    with pytest.raises(ValueError, match="must be > 0"):
        exact_knn(X[:3], X, 3, x_conformal=np.zeros(50))


def test_validation():
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match="k must be in"):
        exact_knn(X, X, 6)
    with pytest.raises(ValueError, match="dimensions"):
        exact_knn(np.zeros((2, 3)), X, 1)


def test_empty_queries():
    ids, dist = exact_knn(np.zeros((0, 2)), np.zeros((3, 2)), 2)
    assert ids.shape == (0, 2) and dist.shape == (0, 2)
