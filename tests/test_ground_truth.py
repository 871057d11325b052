"""Exact hyperbolic k-NN ground truth, and the exact distances of a given answer, against a numpy reference."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypann.datasets.synthetic import clustered
from hypann.eval.ground_truth import distances_of_ids, exact_knn
from hypann.geometry.models import poincare_to_lorentz
from hypann.geometry.poincare import conformal_factor, pairwise_dist
from tests.conftest import ball_points


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


@pytest.mark.parametrize(("model", "c"), [("poincare", 0.25), ("poincare", 3.0), ("lorentz", 1.0), ("lorentz", 2.0)])
def test_other_models_and_curvatures_answer_as_the_brute_index(model, c):
    """``exact_knn(..., c=, model=)`` is the ground truth of an index of that model and curvature."""
    import hypann

    rng = np.random.default_rng(3)
    unit = ball_points(rng, 400, 5, min_conformal=1e-12)
    pts = unit / np.sqrt(c)  # Poincare points of curvature -c
    if model == "lorentz":
        pts = poincare_to_lorentz(pts, c=c)
    Q, X = pts[:40], pts[40:]
    ids, dist = exact_knn(Q, X, 7, c=c, model=model)
    want = hypann.HyperbolicIndex(algorithm="brute", c=c, model=model).build(X).search(Q, 7)
    np.testing.assert_array_equal(ids, want.indices)
    np.testing.assert_allclose(dist, want.distances, rtol=1e-12)
    np.testing.assert_array_equal(distances_of_ids(Q, X, ids, c=c, model=model), dist)


def test_validation():
    X = np.zeros((5, 2))
    with pytest.raises(ValueError, match="k must be in"):
        exact_knn(X, X, 6)
    with pytest.raises(ValueError, match="dimensions"):
        exact_knn(np.zeros((2, 3)), X, 1)
    with pytest.raises(ValueError, match="curvature c"):
        exact_knn(X, X, 1, c=0.0)
    with pytest.raises(ValueError, match="model"):
        exact_knn(X, X, 1, model="klein")


def test_empty_queries():
    ids, dist = exact_knn(np.zeros((0, 2)), np.zeros((3, 2)), 2)
    assert ids.shape == (0, 2) and dist.shape == (0, 2)


# -- distances_of_ids: the exact distances of a given answer ---------------------------------------------------


def test_distances_of_ids_are_the_exact_distances_of_those_ids():
    X = clustered(500, 5, seed=4, n_clusters=4)
    Q = clustered(30, 5, seed=5, n_clusters=4)
    ids, dist = exact_knn(Q, X, 8)
    np.testing.assert_array_equal(distances_of_ids(Q, X, ids), dist)  # the same float64 operations
    other = np.random.default_rng(0).permutation(500)[:240].reshape(30, 8)  # distinct ids, in no order
    np.testing.assert_allclose(distances_of_ids(Q, X, other), np.take_along_axis(pairwise_dist(Q, X), other, 1),
                               rtol=1e-12)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), min_exp=st.integers(1, 13), c=st.sampled_from([1.0, 0.3, 4.0]))
def test_distances_of_ids_near_the_boundary_and_in_any_curvature(seed, min_exp, c):
    rng = np.random.default_rng(seed)
    unit = ball_points(rng, 60, 4, min_conformal=10.0**-min_exp)  # unit-curvature points, 1-|x|^2 down to 1e-13
    X, Q = unit[10:] / np.sqrt(c), unit[:10] / np.sqrt(c)  # the same points in curvature -c
    ids = rng.integers(-1, 50, size=(10, 6))
    got = distances_of_ids(Q, X, ids, c=c)
    ref = np.take_along_axis(pairwise_dist(Q, X, c=c), np.maximum(ids, 0), 1)
    for i, row in enumerate(ids):
        seen = set()
        for t, j in enumerate(row.tolist()):
            if j < 0 or j in seen:
                assert got[i, t] == np.inf  # none, or a repeat of an earlier id: counted once
            else:
                np.testing.assert_allclose(got[i, t], ref[i, t], rtol=1e-9)
                seen.add(j)
    lorentz = distances_of_ids(poincare_to_lorentz(Q, c=c), poincare_to_lorentz(X, c=c), ids, c=c, model="lorentz")
    np.testing.assert_allclose(lorentz, got, rtol=1e-9)


def test_distances_of_ids_validation():
    X = np.zeros((5, 2))
    Q = np.zeros((2, 2))
    with pytest.raises(TypeError, match="ids must be an array of integers"):
        distances_of_ids(Q, X, np.zeros((2, 3)))
    with pytest.raises(TypeError, match="ids must be an array of integers"):
        distances_of_ids(Q, X, np.zeros((2, 3), dtype=bool))
    with pytest.raises(ValueError, match=r"ids must have shape \(2, k\)"):
        distances_of_ids(Q, X, np.zeros((3, 3), dtype=int))
    with pytest.raises(ValueError, match=r"ids must have shape \(2, k\)"):
        distances_of_ids(Q, X, np.zeros(2, dtype=int))
    with pytest.raises(ValueError, match=r"ids must be an \(m, k\) array of integers"):
        distances_of_ids(Q, X, [[0, 1], [2]])
    with pytest.raises(ValueError, match=r"ids\[1, 2\] = 5 is neither a row of points \(0 to 4\) nor -1"):
        distances_of_ids(Q, X, [[0, 1, 2], [0, 1, 5]])
    with pytest.raises(ValueError, match=r"ids\[0, 0\] = -2"):
        distances_of_ids(Q, X, [[-2], [0]])
    with pytest.raises(ValueError, match="dimensions"):
        distances_of_ids(np.zeros((2, 3)), X, [[0], [1]])
    with pytest.raises(ValueError, match="not strictly inside"):
        distances_of_ids(Q, np.full((5, 2), 0.8), [[0], [1]])
    with pytest.raises(ValueError, match="curvature c"):
        distances_of_ids(Q, X, [[0], [1]], c=-1.0)
    assert distances_of_ids(np.zeros((0, 2)), X, np.zeros((0, 3), dtype=int)).shape == (0, 3)
