"""Tests of the synthetic data generators (random trees, wrapped-normal clusters)."""

import numpy as np
import pytest

from hypann.datasets.synthetic import (
    _levels,
    clustered,
    embed_tree,
    hierarchical_tree,
    random_tree_parents,
)
from hypann.geometry.poincare import conformal_factor, dist


@pytest.mark.parametrize("dim", [2, 10, 100])
def test_tree_inside_ball_distinct_and_deterministic(dim):
    X = hierarchical_tree(3000, dim, seed=3)
    assert X.shape == (3000, dim) and X.dtype == np.float64
    assert np.all(conformal_factor(X) > 0.0)
    assert np.unique(X, axis=0).shape[0] == X.shape[0]
    np.testing.assert_array_equal(X, hierarchical_tree(3000, dim, seed=3))
    assert not np.array_equal(X, hierarchical_tree(3000, dim, seed=4))


@pytest.mark.parametrize("dim", [10, 100])
def test_default_tree_reaches_documented_depth(dim):
    # The docstring promises min(1-|x|^2) in [3e-9, 5e-8] for n = 100,000.
    X = hierarchical_tree(100_000, dim, seed=0)
    c = conformal_factor(X)
    assert np.all(c > 0.0)
    assert 3e-9 <= c.min() <= 5e-8
    assert 0.7 < np.mean(c < 1e-5) < 0.95


def test_tree_edges_have_requested_length():
    parents = random_tree_parents(500, branching=(1, 4), seed=1)
    X = embed_tree(parents, 5, edge_length=1.5, edge_noise=0.0, jitter=0.0, seed=2)
    d = dist(X[1:], X[parents[1:]])
    np.testing.assert_allclose(d, 1.5, rtol=1e-9)


def test_children_point_away_from_origin():
    parents = random_tree_parents(2000, seed=5)
    X = embed_tree(parents, 10, jitter=0.0, seed=5)
    depth = _levels(parents)
    h = dist(X, np.zeros_like(X))
    deep = depth >= 2
    # cos(a) >= 0 to the radial direction: a child is never closer to the origin.
    assert np.all(h[deep] > h[parents[deep]])


def test_random_tree_parents_structure():
    parents = random_tree_parents(1000, branching=(2, 3), seed=0)
    assert parents[0] == -1 and parents.size == 1000
    assert np.all(parents[1:] < np.arange(1, 1000))
    counts = np.bincount(parents[1:], minlength=1000)
    depth = _levels(parents)
    inner = depth < depth.max() - 1  # levels before the last two are complete
    assert np.all((counts[inner] >= 2) & (counts[inner] <= 3))


def test_levels_rejects_bad_parents():
    with pytest.raises(ValueError, match="exactly one root"):
        _levels(np.array([-1, -1, 0]))
    with pytest.raises(ValueError, match="cycle"):
        _levels(np.array([-1, 2, 1]))


@pytest.mark.parametrize("dim", [2, 10, 100])
def test_clustered_inside_and_deterministic(dim):
    X = clustered(2000, dim, seed=1, n_clusters=7)
    assert X.shape == (2000, dim)
    assert np.all(conformal_factor(X) > 0.0)
    assert np.unique(X, axis=0).shape[0] == 2000
    np.testing.assert_array_equal(X, clustered(2000, dim, seed=1, n_clusters=7))


def test_clustered_points_near_centres():
    # Centres at norm exactly 5; points at hyperbolic distance ~spread from one of them.
    X = clustered(4000, 20, seed=0, n_clusters=3, spread=0.5, center_norm=(5.0, 5.0))
    h = dist(X, np.zeros_like(X))
    assert abs(np.median(h) - 5.0) < 0.2
    assert h.max() < 5.0 + 4 * 0.5


@pytest.mark.parametrize(
    "kwargs, match",
    [
        (dict(dim=1), "dim must be >= 2"),
        (dict(n=0), "n must be a positive integer"),
        (dict(branching=(3, 2)), "branching must satisfy"),
        (dict(edge_length=-1.0), "edge_length must be >"),
        (dict(outward=(0.0, 2.0)), "outward must lie in"),
    ],
)
def test_tree_validation(kwargs, match):
    args = dict(n=100, dim=3) | kwargs
    with pytest.raises(ValueError, match=match):
        hierarchical_tree(**args)
