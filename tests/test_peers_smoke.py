"""Smoke tests of the peer wrappers in ``benchmarks/peers.py`` (tiny data, no timing claims)."""

import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

import peers  # noqa: E402
from hypann.geometry import poincare  # noqa: E402


@pytest.fixture(scope="module")
def problem():
    """400 points and 20 queries with conformal factors from 1 down to ~1e-6."""
    rng = np.random.default_rng(7)
    x = rng.normal(size=(420, 8))
    x /= np.linalg.norm(x, axis=1, keepdims=True)
    x *= np.sqrt(1.0 - 10.0 ** -rng.uniform(0, 6, size=(420, 1)))
    return peers.make_problem(x[:400], x[400:], 5)


def test_ground_truth_matches_numpy_reference(problem):
    d = poincare.pairwise_dist(problem.queries, problem.base)
    np.testing.assert_allclose(problem.true_distances, np.sort(d, axis=1)[:, :5], rtol=1e-12)


def test_score_of_the_truth_and_of_a_bad_answer(problem):
    ids, dist = peers.exact_neighbours(problem, problem.true_ids)
    s = peers.score(problem, dist)
    assert s["recall_at_k"] == 1.0 and s["recall_at_1"] == 1.0 and s["max_ratio"] == pytest.approx(1.0)
    # repeating the nearest neighbour k times must not count k times
    rep = np.repeat(problem.true_ids[:, :1], 5, axis=1)
    ids, dist = peers.exact_neighbours(problem, rep)
    assert (ids[:, 1:] == -1).all()
    s = peers.score(problem, dist)
    assert s["recall_at_1"] == 1.0
    assert s["recall_at_k"] == pytest.approx(0.2)
    assert s["missing"] == pytest.approx(0.8)


def test_lorentz_lift_inner_product_is_minus_cosh(problem):
    b = peers.lorentz_lift(problem.base[:30], problem.base_conformal[:30])
    q = peers.lorentz_lift(problem.queries[:3], problem.query_conformal[:3])
    q[:, 0] = -q[:, 0]
    d = poincare.pairwise_dist(problem.queries[:3], problem.base[:30])
    np.testing.assert_allclose(q @ b.T, -np.cosh(d), rtol=1e-7)


def test_usearch_with_compiled_poincare_metric_is_exact_on_tiny_data(problem):
    pytest.importorskip("usearch")
    pytest.importorskip("numba")
    rows = peers.run_usearch(problem, expansions=(400,), repeats=1)
    assert len(rows) == 1
    assert rows[0]["recall_at_k"] == 1.0


def test_hnswlib_rerank_of_every_point_is_exact(problem):
    pytest.importorskip("hnswlib")
    rows = peers.run_hnswlib_rerank(problem, sweep=((400, (400,)),), repeats=1)
    assert rows[0]["recall_at_k"] == 1.0
