"""``algorithm="graph", exact=True``: graph search re-checked by a seeded hyperbolic kd-tree.

Exact against float64 brute force on adversarial data (boundary points,
duplicates, ``k`` up to ``n``), deterministic for a seed, budget a hard
limit, range search exact, save/load sharing the index's points.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypann
from hypann.geometry import poincare as P
from tests.conftest import ball_points
from tests.test_exact_search import datasets, true_knn_dist


def _exact_index(X, **kw):
    return hypann.HyperbolicIndex(algorithm="graph", exact=True, random_state=0, **kw).build(X)


@settings(max_examples=40, deadline=None)
@given(data=datasets(), k_frac=st.floats(0.0, 1.0), ef=st.sampled_from([None, 1, 64]),
       leaf=st.sampled_from([1, 16]))
def test_graph_exact_equals_brute_force(data, k_frac, ef, leaf):
    X, Q = data
    k = max(1, int(round(k_frac * len(X))))  # k from 1 up to n
    index = _exact_index(X, tree_leaf_size=leaf, n_neighbors=4, max_degree=8, leaf_size=4)
    res = index.search(Q, k) if ef is None else index.search(Q, k, ef=ef)
    brute = hypann.HyperbolicIndex(algorithm="brute").build(X).search(Q, k)
    np.testing.assert_array_equal(res.distances, brute.distances)  # same float64 kernel values
    np.testing.assert_allclose(res.distances, true_knn_dist(X, Q, k), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(P.dist(Q[:, None, :], X[res.indices]), res.distances, rtol=1e-9, atol=1e-12)
    assert all(len(set(row)) == k for row in res.indices.tolist())  # k distinct ids


def test_graph_exact_fixes_a_poor_graph_answer():
    """With a tiny search list the plain graph misses neighbours; the re-check finds them all."""
    rng = np.random.default_rng(5)
    X = ball_points(rng, 3000, 8, min_conformal=1e-6)
    Q = ball_points(rng, 100, 8, min_conformal=1e-6)
    plain = hypann.HyperbolicIndex(algorithm="graph", random_state=0, n_neighbors=4, max_degree=4, ef=1).build(X)
    exact = _exact_index(X, n_neighbors=4, max_degree=4, ef=1)
    truth = true_knn_dist(X, Q, 10)
    approx = plain.search(Q, 10).distances
    assert not np.allclose(approx, truth)  # the graph alone is not exact here
    np.testing.assert_allclose(exact.search(Q, 10).distances, truth, rtol=1e-9, atol=1e-12)


def test_graph_exact_duplicates_and_boundary():
    rng = np.random.default_rng(1)
    base = ball_points(rng, 40, 4, min_conformal=1e-13, radial_power=0.05)  # near the boundary
    X = base[rng.integers(0, 40, 400)]  # ~10 exact copies of each
    index = _exact_index(X)
    res = index.search(None, 25)
    np.testing.assert_array_equal(res.distances, hypann.HyperbolicIndex(algorithm="brute").build(X).search(None, 25).distances)
    assert np.all(res.distances[:, 0] == 0.0)


def test_graph_exact_build_is_deterministic_for_a_seed():
    rng = np.random.default_rng(2)
    X = ball_points(rng, 1500, 6, min_conformal=1e-8)
    a = _exact_index(X, n_jobs=1)
    b = _exact_index(X, n_jobs=2)
    state_a, state_b = a.algorithm_.get_state(), b.algorithm_.get_state()
    assert sorted(state_a) == sorted(state_b)
    for name in state_a:
        np.testing.assert_array_equal(state_a[name], state_b[name], err_msg=name)
    Q = ball_points(rng, 30, 6)
    ra, rb = a.search(Q, 7), b.search(Q, 7)
    np.testing.assert_array_equal(ra.indices, rb.indices)
    np.testing.assert_array_equal(ra.stats.samples, rb.stats.samples)


def test_graph_exact_budget_is_a_hard_limit():
    rng = np.random.default_rng(3)
    X = ball_points(rng, 2000, 5)
    index = _exact_index(X)
    Q = ball_points(rng, 40, 5)
    full = index.search(Q, 5)
    for budget in (1, 5, 30, 400):
        capped = index.search(Q, 5, budget=budget)
        assert capped.stats.samples.max() <= budget
        assert np.all(capped.distances >= full.distances * (1 - 1e-12))
    assert np.all(full.stats.rounds == 2)


def test_graph_exact_range_search_and_plain_graph_has_none():
    rng = np.random.default_rng(4)
    X = ball_points(rng, 800, 3)
    Q = ball_points(rng, 5, 3)
    got = _exact_index(X).search_radius(Q, 1.5)
    ref = hypann.HyperbolicIndex(algorithm="brute").build(X).search_radius(Q, 1.5)
    np.testing.assert_array_equal(got.offsets, ref.offsets)
    np.testing.assert_array_equal(got.distances, ref.distances)
    plain = hypann.HyperbolicIndex(algorithm="graph", random_state=0).build(X)
    with pytest.raises(NotImplementedError, match=r"algorithm 'graph' has no range search"):
        plain.search_radius(Q, 1.5)


def test_graph_exact_with_added_and_removed_points():
    rng = np.random.default_rng(6)
    X = ball_points(rng, 600, 4)
    Y = ball_points(rng, 20, 4)
    index = _exact_index(X).remove(np.arange(0, 600, 7)).add(Y)
    keep = np.setdiff1d(np.arange(600), np.arange(0, 600, 7))
    live = np.concatenate([X[keep], Y])
    Q = ball_points(rng, 12, 4)
    np.testing.assert_allclose(index.search(Q, 9).distances, true_knn_dist(live, Q, 9), rtol=1e-9, atol=1e-12)


def test_graph_exact_save_load_shares_the_points(tmp_path):
    rng = np.random.default_rng(7)
    X = ball_points(rng, 1200, 5)
    index = _exact_index(X)
    state = index.algorithm_.get_state()
    assert "points" not in state and "tree.points" in state  # the kd-tree's copy is the only one
    # the graph holds no copy: it refers to the kd-tree's (and the index keeps none)
    assert index.algorithm_.graph_.points_ is index.algorithm_.tree_.points_ and index._points is None
    np.testing.assert_array_equal(index.points_, X)
    index.save(tmp_path / "g.hypann")
    loaded = hypann.HyperbolicIndex.load(tmp_path / "g.hypann")
    assert loaded.algorithm_.graph_.points_ is loaded.algorithm_.tree_.points_ and loaded._points is None
    Q = ball_points(rng, 20, 5)
    a, b = index.search(Q, 6), loaded.search(Q, 6)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.distances, b.distances)
    assert "exact=True" in repr(loaded)
