"""What the README calls exact is exact against float64 brute force, up to hyperbolic norm 37.

Data: clusters at hyperbolic norms 20-37 (``1-|x|^2`` down to ~3e-16), whose
points are ulps apart, where the float64 centre of a recentred ball is off
by more than the ball's radius and float32 cannot tell points apart.
Ground truth: :func:`hypann.eval.ground_truth.exact_knn` (float64 brute
force). Distances are compared sorted with a tight relative tolerance (ties
allowed); ids wherever the reference distance is strictly below the k-th.
"""

from __future__ import annotations

import numpy as np
import pytest

import hypann
from hypann.eval.ground_truth import exact_knn
from hypann.geometry import poincare as P
from hypann.geometry.poincare import dist0
from tests.conftest import deep_clusters

RTOL = 1e-12


@pytest.fixture(scope="module", autouse=True)
def faiss_single_thread():
    """faiss's OpenMP threads spin on a shared machine; one thread is 10x faster here."""
    try:
        import faiss
    except ImportError:
        yield
        return
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


@pytest.fixture(scope="module", params=[(0, 2), (2, 5), (3, 10)], ids=lambda p: f"seed{p[0]}-d{p[1]}")
def deep(request):
    seed, d = request.param
    rng = np.random.default_rng(seed)
    X = deep_clusters(rng, 1500, d)
    Q = np.vstack([X[:8], deep_clusters(rng, 16, d), np.zeros((1, d)), 0.5 * X[8:10]])
    return X, Q


def test_data_reach_norm_37(deep):
    X, Q = deep
    h = dist0(X)
    assert h.max() > 36.9 and h.min() > 15
    assert np.min(1.0 - np.einsum("ij,ij->i", X, X)) < 1e-15


def assert_exact(X, Q, res, k):
    """Sorted distances equal brute force; ids agree wherever distances are distinct."""
    ref_ids, ref = exact_knn(Q, X, k)
    np.testing.assert_allclose(res.distances, ref, rtol=RTOL, atol=0)
    # the returned ids really are at the returned distances
    np.testing.assert_allclose(P.dist(Q[:, None, :], X[res.indices]), res.distances, rtol=RTOL, atol=0)
    for row in range(len(Q)):
        strictly_inside = ref[row] < ref[row, k - 1] * (1 - RTOL)
        assert set(ref_ids[row, strictly_inside]) <= set(res.indices[row]), row
    assert np.all(np.diff(res.distances, axis=1) >= 0)


EXACT = [
    ("recentering", "kdtree", {}),
    ("recentering", "hkdtree", {}),
    ("recentering", "brute", {}),
    ("recentering", "faiss:Flat", {}),
    ("recentering", "kdtree", {"two_phase": False}),
    ("shells", "kdtree", {"recenter": True}),
    ("shells", "hkdtree", {"recenter": True}),
    ("shells", "brute", {"recenter": True}),
    ("shells", "faiss:Flat", {"recenter": True}),
    ("hkdtree", None, {}),
    ("hkdtree", None, {"leaf_size": 1}),
    ("brute", None, {}),
]


@pytest.mark.parametrize("k", [1, 10])
@pytest.mark.parametrize("algorithm, oracle, params", EXACT, ids=lambda v: str(v))
def test_exact_at_the_boundary(deep, algorithm, oracle, params, k):
    if oracle == "faiss:Flat":
        pytest.importorskip("faiss")
    X, Q = deep
    res = hypann.HyperbolicIndex(algorithm=algorithm, oracle=oracle, **params).build(X).search(Q, k)
    assert_exact(X, Q, res, k)


@pytest.mark.parametrize("ratio", [1.1, 2.0])
@pytest.mark.parametrize("k", [1, 10])
@pytest.mark.parametrize("oracle", ["kdtree", "brute", "hkdtree"])
def test_binary_search_guarantee_at_the_boundary(deep, oracle, k, ratio):
    X, Q = deep
    res = hypann.HyperbolicIndex(algorithm="binary_search", oracle=oracle, ratio=ratio).build(X).search(Q, k)
    _, ref = exact_knn(Q, X, k)
    assert np.all(res.distances[:, k - 1] <= ratio * ref[:, k - 1] * (1 + RTOL))
    assert np.all(res.distances >= ref * (1 - RTOL))


def test_faiss_flat_oracle_is_float64_exact_at_the_boundary(deep):
    pytest.importorskip("faiss")
    from hypann.oracles.brute import BruteForceOracle
    from hypann.oracles.registry import make_oracle

    X, Q = deep
    truth = BruteForceOracle().build(X).knn(Q, 10)
    res = make_oracle("faiss:Flat").build(X).knn(Q, 10)
    # the same float64 distances (up to summation order), the same ids where distances differ
    np.testing.assert_allclose(res.sq_dist, truth.sq_dist, rtol=1e-14, atol=0)
    for row in range(len(Q)):
        strictly_inside = truth.sq_dist[row] < truth.sq_dist[row, -1] * (1 - 1e-14)
        assert set(truth.indices[row, strictly_inside]) <= set(res.indices[row]), row
