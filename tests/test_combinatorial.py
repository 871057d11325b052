"""Tests of the combinatorial (Sarkar / de Sa et al.) tree embedding."""

import numpy as np
import pytest

from hypann.datasets.combinatorial import (
    combinatorial_embedding,
    sarkar_tau,
    spread_directions,
    tree_distances,
    tree_distortion,
)
from hypann.datasets.synthetic import _mobius_add, random_tree_parents
from hypann.geometry.poincare import conformal_factor, dist


def _direction(frm, to):
    """Unit direction of ``(-frm) (+) to``: the geodesic from ``frm`` to ``to`` in frm's frame."""
    z, _ = _mobius_add(-frm[None], conformal_factor(frm[None]), to[None], conformal_factor(to[None]))
    return z[0] / np.linalg.norm(z[0])


@pytest.fixture(scope="module")
def small_tree():
    return random_tree_parents(200, branching=(3, 5), seed=0)


@pytest.mark.parametrize("sibling_angle", [60.0, None])
def test_small_tree_low_distortion_inside_ball(small_tree, sibling_angle):
    X = combinatorial_embedding(small_tree, 10, sibling_angle=sibling_angle)
    assert X.shape == (200, 10)
    assert np.all(conformal_factor(X) > 0.0)
    r = tree_distortion(X, small_tree, n_pairs=5000)
    # Measured: mean relative error 0.024 (cones) / 0.046 (spread sets) at
    # tau = 30/4; thresholds leave about 2x room.
    assert r["mean_relative_error"] < (0.05 if sibling_angle else 0.1)
    assert r["worst_case_distortion"] < 1.25
    assert r["max_hyperbolic_norm"] <= 30.0 + 1e-6


def test_every_edge_has_length_tau(small_tree):
    X = combinatorial_embedding(small_tree, 6, tau=2.0)
    d = dist(X[1:], X[small_tree[1:]])
    np.testing.assert_allclose(d, 2.0, rtol=1e-9)
    assert np.all(X[0] == 0.0)


def test_children_avoid_parent_and_each_other():
    # node 1 has parent 0 and children 2..5: directions at node 1 must be separated
    parents = np.array([-1, 0, 1, 1, 1, 1])
    X = combinatorial_embedding(parents, 8, tau=3.0, sibling_angle=None)
    dirs = np.array([_direction(X[1], X[j]) for j in (0, 2, 3, 4, 5)])
    g = dirs @ dirs.T
    # five directions of a regular simplex: pairwise cosine -1/4
    np.testing.assert_allclose(g[~np.eye(5, dtype=bool)], -0.25, atol=1e-9)


def test_cone_children_sibling_angle():
    parents = np.array([-1, 0, 1, 1, 1])
    X = combinatorial_embedding(parents, 8, tau=3.0, sibling_angle=60.0)
    back = _direction(X[1], X[0])
    kids = np.array([_direction(X[1], X[j]) for j in (2, 3, 4)])
    g = kids @ kids.T
    np.testing.assert_allclose(g[~np.eye(3, dtype=bool)], 0.5, atol=1e-9)  # 60 degrees
    assert np.all(kids @ back < 0.0)  # every child leaves away from the parent


def test_deterministic_and_seeded(small_tree):
    a = combinatorial_embedding(small_tree, 10, seed=3)
    np.testing.assert_array_equal(a, combinatorial_embedding(small_tree, 10, seed=3))
    assert not np.array_equal(a, combinatorial_embedding(small_tree, 10, seed=4))


def test_deep_tree_reaches_precision_budget():
    parents = random_tree_parents(3000, branching=(1, 3), seed=1)  # depth ~10
    X = combinatorial_embedding(parents, 12, max_norm=30.0)
    c = conformal_factor(X)
    assert np.all(c > 0.0)
    r = tree_distortion(X, parents, n_pairs=2000)
    assert 20.0 < r["max_hyperbolic_norm"] <= 30.0 + 1e-6
    assert r["conformal_quantiles"][0.0] == pytest.approx(c.min())


def test_spread_directions_are_unit_and_separated():
    for m, d, min_deg in [(5, 5, 104.0), (10, 5, 90.0), (30, 5, 55.0), (7, 2, 51.0)]:
        s = spread_directions(m, d)
        np.testing.assert_allclose(np.linalg.norm(s, axis=1), 1.0)
        g = s @ s.T
        np.fill_diagonal(g, -1.0)
        assert np.degrees(np.arccos(g.max())) >= min_deg - 1e-9


def test_sarkar_tau_formula():
    # 2-D, deg_max 4: theta = pi/2, nu = -2 log tan(pi/8)
    assert sarkar_tau(1.0, np.pi / 2) == pytest.approx(2 * -2 * np.log(np.tan(np.pi / 8)))
    # epsilon makes tau smaller than the precision cap on a shallow tree
    parents = np.array([-1, 0, 0, 0])
    X = combinatorial_embedding(parents, 3, epsilon=1.0)
    h = dist(X[1:], X[:1])
    np.testing.assert_allclose(h, sarkar_tau(1.0, np.arccos(-1 / 2)), rtol=1e-12)


def test_tree_distances_hand_made():
    #      0
    #    1   2
    #   3     4
    #  5
    parents = np.array([-1, 0, 0, 1, 2, 3])
    got = tree_distances(parents, [5, 5, 3, 4, 0], [4, 1, 3, 0, 5])
    np.testing.assert_array_equal(got, [5, 2, 0, 2, 3])


def test_validation():
    with pytest.raises(ValueError, match="exactly one root"):
        combinatorial_embedding(np.array([-1, -1]), 3)
    with pytest.raises(ValueError, match="1-D integer array"):
        combinatorial_embedding(np.array([[-1]]), 3)
    with pytest.raises(ValueError, match="dim must be >= 2"):
        combinatorial_embedding(np.array([-1, 0]), 1)
