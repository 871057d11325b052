"""The graph over groups of exact copies (hypann.graph.copies, HyperbolicGraphIndex.copy_groups_)."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypann
from hypann.datasets.families import make_family
from hypann.geometry._kernels import conformal_factor, delta_to_candidates
from hypann.graph import HyperbolicGraphIndex
from hypann.graph import copies as copies_module
from hypann.graph.copies import copy_leaders
from hypann.metrics import recall
from tests.conftest import brute_knn_delta

pytestmark = pytest.mark.kernels  # also run under NUMBA_BOUNDSCHECK=1 (make test-boundscheck)


def _reference_leaders(points, conformal):
    first = {}
    return np.array([first.setdefault((p.tobytes(), c.tobytes()), i) for i, (p, c) in enumerate(zip(points,
                                                                                                  conformal))])


@st.composite
def _rows_with_copies(draw):
    dtype = draw(st.sampled_from([np.float32, np.float64]))
    n_distinct = draw(st.integers(1, 12))
    dim = draw(st.integers(1, 5))
    rng = np.random.default_rng(draw(st.integers(0, 2**32 - 1)))
    distinct = rng.uniform(-0.5, 0.5, (n_distinct, dim)).astype(dtype)
    if draw(st.booleans()):  # rows that differ in one last bit, or only in the sign of a zero
        distinct[0, 0] = 0.0
        if n_distinct > 1:
            distinct[1] = distinct[0]
            distinct[1, 0] = -0.0
        if n_distinct > 2:
            distinct[2] = distinct[0]
            distinct[2, -1] = np.nextafter(distinct[0, -1], dtype(1))
    pick = rng.integers(0, n_distinct, draw(st.integers(1, 60)))
    points = np.ascontiguousarray(distinct[pick])
    conformal = conformal_factor(points.astype(np.float64))
    if draw(st.booleans()):  # the same coordinates with a different conformal factor are different points
        conformal[0] = np.nextafter(conformal[0], 2.0)
    return points, conformal


@given(_rows_with_copies())
@settings(max_examples=150, deadline=None)
def test_copy_leaders_are_the_first_equal_rows(case):
    points, conformal = case
    np.testing.assert_array_equal(copy_leaders(points, conformal), _reference_leaders(points, conformal))


@given(_rows_with_copies())
@settings(max_examples=60, deadline=None)
def test_a_hash_collision_never_joins_two_points(case):
    """Every row in one run of equal hashes: the rows are still grouped by comparing them."""
    points, conformal = case
    bits = points.view(np.uint32 if points.dtype == np.float32 else np.uint64)
    hashes = np.zeros(len(points), dtype=np.uint64)
    got = copies_module._leaders(bits, conformal.view(np.uint64), hashes, np.arange(len(points)))
    np.testing.assert_array_equal(got, _reference_leaders(points, conformal))


def test_copy_leaders_rejects_what_it_cannot_compare():
    with pytest.raises(TypeError, match="float32 or float64"):
        copy_leaders(np.zeros((3, 2), dtype=np.int64), np.ones(3))
    with pytest.raises(ValueError, match=r"conformal must have shape \(3,\)"):
        copy_leaders(np.zeros((3, 2)), np.ones(2))


def _groups_of(rows_per_point, dim, seed):
    """Distinct points repeated ``rows_per_point[j]`` times each, shuffled."""
    rng = np.random.default_rng(seed)
    distinct = rng.uniform(-0.6, 0.6, (len(rows_per_point), dim)) / np.sqrt(dim)
    X = np.repeat(distinct, rows_per_point, axis=0)
    return np.ascontiguousarray(X[rng.permutation(len(X))])


@pytest.fixture(scope="module")
def duplicates():
    points = make_family("duplicates", 3150, 10, seed=3)
    perm = np.random.default_rng(4).permutation(len(points))  # held-out queries (some are copies of points)
    X, Q = points[np.sort(perm[150:])], points[perm[:150]]
    return X, conformal_factor(X), Q, conformal_factor(Q)


@pytest.mark.parametrize("storage", [np.float64, np.float32])
def test_a_graph_over_copies_has_one_node_per_point_and_finds_every_row(duplicates, storage):
    X, cx, Q, cq = duplicates
    stored = X.astype(storage)
    distinct = len(np.unique(stored, axis=0))
    index = HyperbolicGraphIndex(random_state=0).build(stored.copy(), cx.copy(), keep_order=True)
    assert index.n_nodes_ == distinct < len(X)
    groups = index.copy_groups_
    assert groups.shape == (distinct + 1,) and groups[0] == distinct and groups[-1] == len(X)
    assert np.all(np.diff(groups) >= 0)
    # every copy row holds its node's point, and the rows are in input order within a group
    rows = index.tree_order_
    np.testing.assert_array_equal(index.points_, stored[rows])
    for u in range(0, distinct, 37):
        members = rows[groups[u]:groups[u + 1]]
        assert np.all(stored[members] == stored[rows[u]]) and np.all(np.diff(members) > 0)
        assert not members.size or rows[u] < members[0]
    k = 15  # larger than many groups
    ids, deltas, _ = index.search(Q, cq, k)
    assert ids.min() >= 0 and all(len(set(row)) == k for row in ids)
    np.testing.assert_allclose(deltas, delta_to_candidates(Q, cq, stored.astype(np.float64), cx, ids), rtol=1e-12)
    assert np.all(np.diff(deltas, axis=1) >= 0)
    _, true_d = brute_knn_delta(Q, cq, stored.astype(np.float64), cx, k)
    assert recall(deltas, true_d, k, epsilon=1e-12) >= 0.99


def test_copies_follow_their_node_in_increasing_input_row():
    X = _groups_of([7, 1, 3, 12, 2], dim=3, seed=5)
    cx = conformal_factor(X)
    index = HyperbolicGraphIndex(random_state=0, ef=8).build(X.copy(), cx.copy(), keep_order=True)
    assert index.n_nodes_ == 5
    for row in range(len(X)):
        ids, deltas, _ = index.search(X[row:row + 1], cx[row:row + 1], len(X))
        ids, deltas = ids[0], deltas[0]
        same = np.flatnonzero(np.all(X == X[row], axis=1))
        np.testing.assert_array_equal(ids[:len(same)], same)  # the whole group first, at delta 0
        assert np.all(deltas[:len(same)] == 0) and np.all(deltas[len(same):] > 0)
        assert sorted(ids) == list(range(len(X)))


@pytest.mark.parametrize("n", [1, 2, 40])
def test_identical_points_are_one_node(n):
    X = np.full((n, 4), 0.25)
    cx = conformal_factor(X)
    index = HyperbolicGraphIndex(random_state=0).build(X.copy(), cx.copy(), keep_order=True)
    assert index.n_nodes_ == 1
    ids, deltas, _ = index.search(np.zeros((1, 4)), np.ones(1), min(n, 10) + 2)
    expect = list(range(min(n, 10 + 2))) + [-1] * max(0, 12 - n)
    assert ids[0].tolist() == expect[:min(n, 10) + 2]
    assert np.all(np.isfinite(deltas[0][:n])) and np.all(np.isinf(deltas[0][n:]))


def test_copies_are_grouped_only_when_the_graph_keeps_its_order(duplicates):
    """With the points in input order (the exact search's graph) every row stays a node."""
    X, cx, Q, cq = duplicates
    index = HyperbolicGraphIndex(random_state=0).build(X.copy(), cx.copy(), keep_order=False)
    assert index.n_nodes_ == len(X) and index.copy_groups_.shape == (0,)


def test_a_graph_over_copies_is_the_same_in_place_or_not_and_for_any_thread_count(duplicates):
    import numba

    X, cx, Q, cq = duplicates
    a = HyperbolicGraphIndex(random_state=2).build(X.copy(), cx.copy(), keep_order=True)
    X_own, cx_own = X.copy(), cx.copy()
    threads = numba.get_num_threads()
    numba.set_num_threads(1)
    try:
        b = HyperbolicGraphIndex(random_state=2).build(X_own, cx_own, in_place=True, keep_order=True)
    finally:
        numba.set_num_threads(threads)
    assert b.points_ is X_own
    for name, value in a.to_arrays().items():
        np.testing.assert_array_equal(value, b.to_arrays()[name], err_msg=name)
    np.testing.assert_array_equal(a.search(Q, cq, 10).ids, b.search(Q, cq, 10).ids)


def test_save_load_keeps_the_groups_and_rejects_damaged_ones(duplicates, tmp_path):
    X, cx, Q, cq = duplicates
    index = HyperbolicGraphIndex(random_state=0).build(X.copy(), cx.copy(), keep_order=True)
    state = index.to_arrays()
    assert "copy_groups" in state
    np.savez(tmp_path / "g.npz", **state)
    loaded = HyperbolicGraphIndex.from_arrays(dict(np.load(tmp_path / "g.npz")))
    for a, b in zip(index.search(Q, cq, 12), loaded.search(Q, cq, 12)):
        np.testing.assert_array_equal(a, b)
    groups = state["copy_groups"]
    m = len(groups) - 1
    damaged = {
        "not a partition": np.concatenate([groups[:-1], [len(X) + 1]]),
        "neighbors has shape": groups[:-1],
        "not copies of their node": np.concatenate([[m], groups[2:], groups[-1:]]),  # the groups moved by one
    }
    for what, bad in damaged.items():
        with pytest.raises(ValueError, match=what):
            HyperbolicGraphIndex.from_arrays(dict(state, copy_groups=bad))
    decreasing = groups.copy()
    decreasing[1], decreasing[2] = groups[2] + 1, groups[1]
    with pytest.raises(ValueError, match="not a partition"):
        HyperbolicGraphIndex.from_arrays(dict(state, copy_groups=decreasing))
    # without full checks the search clips what it reads and stays within the arrays
    loose = HyperbolicGraphIndex.from_arrays(dict(state, copy_groups=decreasing), full=False)
    ids, _, _ = loose.search(Q, cq, 12)
    assert ids.min() >= -1 and ids.max() < len(X)
    with pytest.raises(ValueError, match="1-D integer array"):
        HyperbolicGraphIndex.from_arrays(dict(state, copy_groups=groups.astype(np.float64)))
    in_input_order = {name: value for name, value in state.items() if name != "leaf_order"}
    with pytest.raises(ValueError, match="needs the points in leaf order"):
        HyperbolicGraphIndex.from_arrays(in_input_order)


@pytest.mark.filterwarnings("ignore::hypann.rounding.Float32PrecisionWarning")  # the family's points near the boundary
@pytest.mark.parametrize("storage", ["float64", "float32"])
def test_hyperbolic_index_over_copies_saves_loads_adds_and_removes(duplicates, storage, tmp_path):
    X, _, Q, _ = duplicates
    index = hypann.HyperbolicIndex(algorithm="graph", storage=storage).build(X)
    assert index.algorithm_.graph_.n_nodes_ < len(X)
    found = index.search(Q, 10)
    path = tmp_path / "dup.hypann"
    index.save(path)
    for mmap in (False, True):
        again = hypann.HyperbolicIndex.load(path, mmap=mmap).search(Q, 10)
        np.testing.assert_array_equal(again.indices, found.indices)
    # a removed row is never reported; its copies still are
    gone = int(found.indices[0, 0])
    index.remove([gone])
    after = index.search(Q[:1], 10).indices[0]
    assert gone not in after
    twins = np.flatnonzero(np.all(X == X[gone], axis=1))
    assert set(twins[twins != gone][:9]) <= set(after.tolist())
    index.add(X[:5])  # rows len(X) .. len(X) + 4, copies of indexed points
    got = index.search(X[:5], 40).indices
    for j in range(5):
        assert len(X) + j in got[j].tolist()


def test_describe_says_how_many_copies_the_graph_groups(duplicates):
    X, _, _, _ = duplicates
    index = hypann.HyperbolicIndex(algorithm="graph").build(X)
    nodes = len(np.unique(X, axis=0))
    assert f"; {len(X) - nodes} exact copies searched as {nodes} graph nodes" in index.describe()
    plain = hypann.HyperbolicIndex(algorithm="graph").build(np.unique(X, axis=0))
    assert f"; default ef {plain.algorithm_.graph_.ef_}" in plain.describe() and "copies" not in plain.describe()
