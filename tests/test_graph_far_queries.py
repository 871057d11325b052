"""The graph search's second stage for queries far from the data: the entry tree's upper pivots.

A walk whose nearest found point is more than ``FAR_RATIO`` times as far from the query as the
found points are from each other offers the pivots of the entry tree's first ``upper_levels(n)``
levels to its list and walks on (:mod:`hypann.graph.knn_graph`).
"""

from __future__ import annotations

import contextlib

import numpy as np
import pytest

import hypann
from hypann._runtime import read_only
from hypann.datasets.families import far_queries, make_family
from hypann.geometry._kernels import conformal_factor, delta_row
from hypann.graph import HyperbolicGraphIndex, knn_graph
from hypann.graph.partition_tree import build_tree, upper_pivots
from tests.conftest import brute_knn_delta

pytestmark = pytest.mark.kernels  # also run under NUMBA_BOUNDSCHECK=1 (make test)


@contextlib.contextmanager
def _far_stage(g, *, off=False, ratio=None):
    """Searches of ``g`` inside the block: without the far queries' second stage (``off``: no upper pivots), or
    with the threshold ``ratio`` instead of its own; its kept kernel arguments are restored after."""
    kept = g._structure()
    upper = read_only(np.empty(0, dtype=np.int64)) if off else kept[-2]  # read-only, as the library's
    g.__dict__["_kernel_structure"] = (*kept[:-2], upper, kept[-1] if ratio is None else ratio)
    try:
        yield
    finally:
        g.__dict__["_kernel_structure"] = kept


@pytest.fixture(scope="module")
def boundary_heavy():
    """5,000 boundary-heavy points (10-D), far queries, and the graph built on them."""
    X = np.ascontiguousarray(make_family("boundary_heavy", 5000, 10, seed=1))
    cx = conformal_factor(X)
    Q = far_queries(X, 200, seed=2)
    return X, cx, Q, conformal_factor(Q), HyperbolicGraphIndex(random_state=0).build(X, cx, keep_order=True)


def _recall(g, X, cx, Q, cq):
    true_ids, _ = brute_knn_delta(Q, cq, X, cx, 10)
    found = g.search(Q, cq, 10).ids
    return np.mean([len(np.intersect1d(a, b)) / 10 for a, b in zip(found, true_ids)])


def test_upper_pivots_find_the_neighbours_of_far_queries(boundary_heavy):
    # the walk stops in the cluster its leaf holds; the upper pivots lie in many clusters
    X, cx, Q, cq, g = boundary_heavy
    with_upper = _recall(g, X, cx, Q, cq)
    with _far_stage(g, off=True):
        without = _recall(g, X, cx, Q, cq)
    assert with_upper >= 0.95 and with_upper >= without + 0.1, (with_upper, without)


def test_queries_at_indexed_points_never_take_the_second_stage(boundary_heavy):
    # distance 0 to the nearest found point is never far: the same answers and counts without the stage
    X, cx, Q, cq, g = boundary_heavy
    at = np.ascontiguousarray(X[::25])
    with_upper = g.search(at, cx[::25], 10)
    with _far_stage(g, off=True):
        without = g.search(at, cx[::25], 10)
    for a, b in zip(with_upper, without):
        np.testing.assert_array_equal(a, b)


def test_far_queries_keep_the_budget_and_report_true_deltas(boundary_heavy):
    X, cx, Q, cq, g = boundary_heavy
    unlimited = g.search(Q, cq, 10).samples
    assert np.any(unlimited > 300)  # the stage ran
    for budget in (0, 1, 7, 60, 300, 700):
        res = g.search(Q, cq, 10, budget=budget)
        assert np.all(res.samples <= budget)
        for q, c, ids, deltas in zip(Q, cq, res.ids, res.deltas):
            found = ids >= 0
            assert len(np.unique(ids[found])) == found.sum()
            assert np.all(np.diff(deltas[found]) >= 0)
            np.testing.assert_array_equal(deltas[found], [delta_row(q, c, X[i], cx[i]) for i in ids[found]])


@pytest.mark.parametrize("config", [dict(algorithm="graph"), dict(algorithm="graph", exact=True)],
                         ids=["graph", "graph-exact"])
def test_far_queries_one_per_call_equal_the_batch(config):
    X = make_family("gaussian_mixture", 3000, 6, seed=3)
    Q = far_queries(X, 30, seed=4)
    index = hypann.HyperbolicIndex(random_state=0, verbose=False, **config).build(X)
    for kw in (dict(k=7), dict(k=3, budget=400)):
        batch = index.search(Q, **kw)
        for i in range(len(Q)):
            one = index.search(Q[i:i + 1], **kw)
            np.testing.assert_array_equal(one.indices[0], batch.indices[i])
            np.testing.assert_array_equal(one.distances[0], batch.distances[i])
            np.testing.assert_array_equal(one.stats.samples[0], batch.stats.samples[i])
    if config.get("exact"):
        ref = hypann.HyperbolicIndex(algorithm="brute").build(X).search(Q, 7)
        np.testing.assert_array_equal(index.search(Q, 7).distances, ref.distances)


def _pivots_above(pivots, children, node, depth, levels, out):
    """The pivots of ``node``'s subtree down to level ``levels - 1``, written out recursively."""
    if depth >= levels or children[node, 0] < 0:
        return
    out.extend(pivots[node])
    for child in children[node]:
        _pivots_above(pivots, children, child, depth + 1, levels, out)


@pytest.mark.parametrize("n, leaf_size", [(1, 4), (10, 16), (700, 4), (5000, 32)])
@pytest.mark.parametrize("levels", [0, 1, 3, 8])
def test_upper_pivots_are_the_pivots_of_the_first_levels(n, leaf_size, levels):
    X = make_family("gaussian_mixture", n, 4, seed=n)
    pivots, _, children, _, _ = build_tree(read_only(X), leaf_size, np.uint64(7), False)
    got = upper_pivots(pivots, children, levels)
    ref = []
    _pivots_above(pivots, children, 0, 0, levels, ref)
    assert got.dtype == np.int64 and got.shape[0] <= 2 * (2 ** levels - 1)
    np.testing.assert_array_equal(np.sort(got), np.sort(np.asarray(ref, dtype=np.int64)))


@pytest.mark.parametrize("n_nodes, levels", [(1, knn_graph.UPPER_LEVELS), (20000, knn_graph.UPPER_LEVELS),
                                             (40000, knn_graph.UPPER_LEVELS + 1),
                                             (80000, knn_graph.UPPER_LEVELS + 2),
                                             (10 ** 9, knn_graph.UPPER_LEVELS_MAX)])
def test_upper_levels_grow_one_per_doubling_up_to_a_cap(n_nodes, levels):
    assert knn_graph.upper_levels(n_nodes) == levels


def _tight_groups_with_satellites(n_groups, dim, seed):
    """Groups of ten points 1e-6 apart (tangent space), each with one satellite 0.3 away: a satellite's nearest
    points (its group) lie close together and far from it, as a leaf noun's siblings can in WordNet."""
    rng = np.random.default_rng(seed)
    centres = rng.standard_normal((n_groups, dim)) * 3
    tight = np.repeat(centres, 10, axis=0) + 1e-6 * rng.standard_normal((10 * n_groups, dim))
    away = rng.standard_normal((n_groups, dim))
    satellites = centres + 0.3 * away / np.linalg.norm(away, axis=1, keepdims=True)
    v = np.concatenate([tight, satellites])
    r = np.linalg.norm(v, axis=1, keepdims=True)
    return np.ascontiguousarray(np.tanh(r / 2) * v / r)


def test_far_ratio_is_the_default_where_indexed_points_are_near_their_neighbours(boundary_heavy):
    *_, g = boundary_heavy
    assert g._structure()[-1] == knn_graph.FAR_RATIO


def _took_the_stage(g, Q, ratio):
    """Which queries the second stage ran for at threshold ``ratio`` (more evaluations than without it)."""
    cq = conformal_factor(Q)
    with _far_stage(g, ratio=ratio):
        with_stage = g.search(Q, cq, 10).samples
    with _far_stage(g, off=True):
        return with_stage > g.search(Q, cq, 10).samples


def test_far_ratio_rises_where_indexed_points_are_themselves_far():
    # one indexed point in 21 is a satellite, 'far' by FAR_RATIO from its group: the threshold rises to the
    # indexed points' own 0.99 quantile, so that new satellites do not all take the second stage
    points = _tight_groups_with_satellites(300, 8, 5)
    X, Q = points[:3150], points[3150:]  # the groups, half of the satellites; the other half
    g = HyperbolicGraphIndex(random_state=0).build(X, conformal_factor(X), keep_order=True)
    ratio = g._structure()[-1]
    assert ratio > knn_graph.FAR_RATIO
    # a function of the graph and the seed, not stored: the same after a save and load
    assert HyperbolicGraphIndex.from_arrays(g.to_arrays())._structure()[-1] == ratio
    assert np.mean(_took_the_stage(g, Q, knn_graph.FAR_RATIO)) > 0.9
    assert np.mean(_took_the_stage(g, Q, ratio)) < 0.6
