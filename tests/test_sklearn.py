from __future__ import annotations

import numpy as np
import pytest

from hypann.sklearn import HyperbolicNearestNeighbors
from tests.conftest import ball_points
from tests.test_exact_search import true_knn_dist


def test_kneighbors_matches_brute_force(rng):
    X = ball_points(rng, 300, 4)
    Q = ball_points(rng, 20, 4)
    nn = HyperbolicNearestNeighbors(n_neighbors=4).fit(X)
    dist, ind = nn.kneighbors(Q)
    np.testing.assert_allclose(dist, true_knn_dist(X, Q, 4), rtol=1e-9)
    assert nn.kneighbors(Q, 2, return_distance=False).shape == (20, 2)


def test_x_none_excludes_self(rng):
    X = ball_points(rng, 100, 3)
    dist, ind = HyperbolicNearestNeighbors(n_neighbors=3).fit(X).kneighbors()
    assert not np.any(ind == np.arange(100)[:, None])
    full = true_knn_dist(X, X, 4)[:, 1:]
    np.testing.assert_allclose(dist, full, rtol=1e-9, atol=1e-12)


def test_errors(rng):
    X = ball_points(rng, 5, 2)
    with pytest.raises(ValueError, match=r"not fitted yet"):
        HyperbolicNearestNeighbors().kneighbors(X)
    with pytest.raises(ValueError, match=r"n_neighbors must be in \[1, 4\]"):
        HyperbolicNearestNeighbors(n_neighbors=5).fit(X).kneighbors()


def test_clone_when_sklearn_present():
    sk = pytest.importorskip("sklearn.base")
    est = HyperbolicNearestNeighbors(n_neighbors=2, algorithm="shells", algorithm_params={"width": 2.0})
    assert sk.clone(est).get_params()["algorithm_params"] == {"width": 2.0}
