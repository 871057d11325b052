"""Lorentz input at 256 and 768 dimensions with a learned curvature, end to end.

Image-text models in the Lorentz model (MERU-style) have 256-768 dimensions and a learned
curvature. Here: clustered rows on ``-x0^2 + |xs|^2 = -1/c`` with ``c = 0.37``, built and searched
by the exact methods (equal to float64 brute force on the caller's rows, distances checked against
60-digit mpmath), the graph (recall), and saved/loaded with identical answers.
"""

from __future__ import annotations

import numpy as np
import pytest

import hypann
from tests.test_precision import mp_lorentz_dist, rel_err

C = 0.37  # a "learned" curvature, not 1
K = 10


def _clustered_lorentz(rng, n, d, c, n_clusters=12):
    """Rows (x0, xs) on the hyperboloid of curvature ``-c``: clusters of directions at norms 2-15."""
    centres = rng.normal(size=(n_clusters, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    which = rng.integers(n_clusters, size=n)
    u = centres[which] + rng.normal(scale=0.15, size=(n, d)) / np.sqrt(d) * 4
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    h = rng.uniform(2.0, 15.0, n)  # unit-curvature hyperbolic norms; 1-|x|^2 of the ball image down to ~1e-6
    return np.c_[np.cosh(h), u * np.sinh(h)[:, None]] / np.sqrt(c)


@pytest.fixture(scope="module", params=[256, 768])
def data(request):
    rng = np.random.default_rng(request.param)
    rows = _clustered_lorentz(rng, 1540, request.param, C)
    return rows[:1500], rows[1500:]


def test_exact_methods_equal_brute_force_and_mpmath(data):
    X, Q = data
    brute = hypann.HyperbolicIndex(algorithm="brute", model="lorentz", c=C).build(X).search(Q, K)
    for i in range(3):  # the brute force itself against 60 digits
        errs = [rel_err(brute.distances[i, j], mp_lorentz_dist(Q[i], X[brute.indices[i, j]], C)) for j in range(K)]
        assert max(errs) < 1e-10
    for algorithm, oracle in (("hkdtree", None), ("recentering", "kdtree")):
        res = hypann.HyperbolicIndex(algorithm=algorithm, oracle=oracle, model="lorentz", c=C).build(X).search(Q, K)
        np.testing.assert_allclose(res.distances, brute.distances, rtol=1e-12, err_msg=algorithm)
        np.testing.assert_array_equal(res.indices, brute.indices, err_msg=algorithm)


def test_graph_recall_and_save_load(data, tmp_path):
    X, Q = data
    truth = hypann.HyperbolicIndex(algorithm="brute", model="lorentz", c=C).build(X).search(Q, K).indices
    for algorithm in ("graph", "hkdtree"):
        index = hypann.HyperbolicIndex(algorithm=algorithm, model="lorentz", c=C, random_state=0).build(X)
        res = index.search(Q, K)
        recall = np.mean([len(np.intersect1d(a, b)) / K for a, b in zip(res.indices, truth)])
        assert recall >= (0.95 if algorithm == "graph" else 1.0), (algorithm, recall)
        index.save(tmp_path / f"{algorithm}.hypann")
        loaded = hypann.load(tmp_path / f"{algorithm}.hypann")
        assert (loaded.model, loaded.c, loaded.dim_) == ("lorentz", C, X.shape[1] - 1)
        again = loaded.search(Q, K)
        np.testing.assert_array_equal(again.indices, res.indices)
        np.testing.assert_array_equal(again.distances, res.distances)
