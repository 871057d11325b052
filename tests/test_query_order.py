"""A batch searched in its structure's order: the answers are those of the queries searched as given.

:class:`hypann.HyperbolicIndex` searches a large enough batch
(``searched_in_order``), k-NN or range, in the order of ``query_order`` (the
kd-tree's or the graph's tree, for the cache) and puts the answers back. Every test
compares with the same queries searched in smaller batches (which keep their
order) or with float64 brute force, and checks that the order it relies on is
not the identity, so that a wrong put-back would fail.
"""

from __future__ import annotations

import tracemalloc
from unittest import mock

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypann
from hypann import _runtime
from hypann import index as index_module
from hypann.datasets.families import make_family
from hypann.graph import knn_graph
from hypann.search import hyperbolic_kdtree
from hypann.result import SearchStats
from hypann.updates import concat_ragged, take_ragged
from tests.conftest import ball_points
from tests.test_exact_search import true_knn_dist

# numba-kernel tests: `make test` runs them again under NUMBA_BOUNDSCHECK=1 (pytest -m kernels)
pytestmark = pytest.mark.kernels

ORDERED = _runtime.ORDERED_MIN_QUERIES
SETTINGS = [
    ("hkdtree", {}),
    ("auto", {}),
    ("graph", {}),
    ("graph", {"exact": True}),
    ("graph", {"storage": "float32"}),
    ("hkdtree", {"storage": "float32"}),
]


def _in_smaller_batches(index, Q, k, **params):
    """The search of ``Q`` in batches too small to be reordered."""
    step = ORDERED - 1
    parts = [index.search(Q[s:s + step], k, **params) for s in range(0, len(Q), step)]
    return (np.concatenate([p.indices for p in parts]), np.concatenate([p.distances for p in parts]),
            np.concatenate([p.stats.samples for p in parts]))


@pytest.fixture(scope="module")
def data():
    """4,000 points of a Gaussian mixture in 6-D and held-out queries of it, a batch searched in order
    (``auto`` chooses the kd-tree on them)."""
    points = make_family("gaussian_mixture", 4000 + ORDERED + 37, 6, seed=1)
    return points[:4000], points[4000:]


@pytest.mark.filterwarnings("ignore::hypann.Float32PrecisionWarning")
@pytest.mark.parametrize("algorithm, settings_", SETTINGS)
def test_a_reordered_batch_answers_as_the_queries_in_their_order(data, algorithm, settings_):
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm=algorithm, random_state=0, **settings_).build(X)
    queries, q_conf = index._queries(Q)
    order = index.algorithm_.query_order(queries, q_conf)
    assert algorithm != "auto" or index.algorithm_.choice_ == "hkdtree"
    assert order is not None and not np.array_equal(order, np.arange(len(Q)))  # a real reordering
    np.testing.assert_array_equal(np.sort(order), np.arange(len(Q)))
    res = index.search(Q, 10)
    ids, dist, samples = _in_smaller_batches(index, Q, 10)
    np.testing.assert_array_equal(res.indices, ids)
    np.testing.assert_array_equal(res.distances, dist)
    np.testing.assert_array_equal(res.stats.samples, samples)
    flipped = index.search(Q[::-1], 10)  # a batch given in another order answers each query alike
    np.testing.assert_array_equal(flipped.indices, res.indices[::-1])
    np.testing.assert_array_equal(flipped.distances, res.distances[::-1])


def test_only_large_enough_batches_are_reordered(data):
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm="hkdtree").build(X)
    n = len(X)
    assert _runtime.searched_in_order(ORDERED, n) and not _runtime.searched_in_order(ORDERED - 1, n)
    many = ORDERED * _runtime.ORDERED_POINTS_PER_QUERY  # a batch of ORDERED queries over more points is not
    assert _runtime.searched_in_order(ORDERED, many) and not _runtime.searched_in_order(ORDERED, many + 1)
    spy = mock.MagicMock(wraps=index.algorithm_.query_order)
    with mock.patch.object(index.algorithm_, "query_order", spy):
        index.search(Q[:ORDERED - 1], 3)
        assert spy.call_count == 0
        index.search(Q[:ORDERED], 3)
        assert spy.call_count == 1


def test_a_batch_searched_in_chunks_with_a_bar_is_ordered_as_one(data, monkeypatch):
    """With a progress bar the batch is ordered once and then searched in chunks, so chunks smaller than a
    reordered batch still follow the whole batch's order."""
    X, Q = data
    monkeypatch.setattr(index_module, "PROGRESS_MIN_QUERIES", 100)
    monkeypatch.setattr(index_module, "PROGRESS_CHUNK", 200)  # chunks too small to be reordered alone
    quiet = hypann.HyperbolicIndex(algorithm="hkdtree", verbose=False).build(X)
    loud = hypann.HyperbolicIndex(algorithm="hkdtree", verbose=True).build(X)
    spy = mock.MagicMock(wraps=loud.algorithm_.query_order)
    with mock.patch.object(loud.algorithm_, "query_order", spy):
        res = loud.search(Q, 10)
    assert spy.call_count == 1 and spy.call_args.args[0].shape[0] == len(Q)
    expected = quiet.search(Q, 10)
    np.testing.assert_array_equal(res.indices, expected.indices)
    np.testing.assert_array_equal(res.distances, expected.distances)
    np.testing.assert_array_equal(res.stats.samples, expected.stats.samples)


def _piece_sizes(index, Q, k):
    """The batch sizes of the searches run for ``index.search(Q, k)`` (a spy on ``_search_rows_in_order``),
    and its answer."""
    spy = mock.MagicMock(wraps=index._search_rows_in_order)
    with mock.patch.object(index, "_search_rows_in_order", spy):
        res = index.search(Q, k)
    return [c.args[0].shape[0] for c in spy.call_args_list], res


@pytest.mark.filterwarnings("ignore::hypann.Float32PrecisionWarning")
@pytest.mark.parametrize("algorithm, settings_", [("hkdtree", {}), ("graph", {}), ("graph", {"storage": "float32"})])
def test_an_ordered_batch_searched_in_pieces_answers_as_in_one(data, algorithm, settings_, monkeypatch):
    """Pieces of at least ``ORDERED_MIN_QUERIES`` queries (here 512 and 37), each gathered in the batch's order:
    every answer and counter equals the one-piece search's."""
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm=algorithm, random_state=0, **settings_).build(X)
    whole_sizes, whole = _piece_sizes(index, Q, 10)
    monkeypatch.setattr(_runtime, "ORDERED_PIECE_BYTES", 1)
    sizes, res = _piece_sizes(index, Q, 10)
    assert whole_sizes == [len(Q)] and sizes == [ORDERED, len(Q) - ORDERED]
    np.testing.assert_array_equal(res.indices, whole.indices)
    np.testing.assert_array_equal(res.distances, whole.distances)
    for name, counts in whole.stats.as_dict().items():
        np.testing.assert_array_equal(res.stats.as_dict()[name], counts)


def test_an_ordered_range_search_in_pieces_answers_as_in_one(data, monkeypatch):
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm="hkdtree").build(X)
    radius = index.search(Q, 6).distances[:, -1] * np.linspace(0.5, 1.5, len(Q))
    whole = index.search_radius(Q, radius)
    spy = mock.MagicMock(wraps=index._search_radius_rows_in_order)
    monkeypatch.setattr(_runtime, "ORDERED_PIECE_BYTES", 1)
    with mock.patch.object(index, "_search_radius_rows_in_order", spy):
        res = index.search_radius(Q, radius)
    assert [c.args[0].shape[0] for c in spy.call_args_list] == [ORDERED, len(Q) - ORDERED]
    assert _rows_of(res) == _rows_of(whole)


def test_an_ordered_batch_copies_its_queries_piece_by_piece(monkeypatch):
    """The memory a large ordered batch takes beside the checked copy of its queries is bounded by a piece, not
    a second copy of the batch (measured by tracemalloc, which counts numpy's arrays)."""
    rng = np.random.default_rng(3)
    X = ball_points(rng, 1000, 64)
    Q = ball_points(rng, 20_000, 64)
    index = hypann.HyperbolicIndex(algorithm="hkdtree").build(X)
    monkeypatch.setattr(_runtime, "ORDERED_PIECE_BYTES", 1 << 18)  # 512 rows of 64 coordinates
    spy = mock.MagicMock(wraps=index.algorithm_.query_order)
    index.search(Q[:ORDERED], 1)  # compiled before measuring
    tracemalloc.start()
    try:
        with mock.patch.object(index.algorithm_, "query_order", spy):
            res = index.search(Q, 1)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert spy.call_count == 1  # the batch was ordered
    np.testing.assert_allclose(res.distances[::7], true_knn_dist(X, Q[::7], 1), rtol=1e-9, atol=1e-12)
    # the checked copy of the queries (Q.nbytes) plus a few (m,) arrays; a second copy would pass 2 Q.nbytes
    assert peak < 1.4 * Q.nbytes, (peak, Q.nbytes)


def _first_node_start(tree, q, cq, max_points):
    """The kd-tree walk's first descent, in Python: into the child of smaller bound, down to a node of at
    most ``max_points`` points or a leaf; its first tree position."""
    def bound(node):
        s = 0.0
        for v, lo, hi in zip(q, tree.lo_[node], tree.hi_[node]):
            t = max(lo - v, 0.0) + max(v - hi, 0.0)
            s += t * t
        return s / (cq * tree.max_conformal_[node])

    node = 0
    while tree.left_[node] >= 0 and tree.end_[node] - tree.start_[node] > max_points:
        a, b = tree.left_[node], tree.right_[node]
        node = b if bound(b) < bound(a) else a
    return tree.start_[node]


def test_the_order_groups_the_queries_by_the_kd_tree_node_their_walk_enters(data):
    X, Q = data
    tree = hyperbolic_kdtree.HyperbolicKDTree(leaf_size=16).build(X, 1.0 - np.einsum("ij,ij->i", X, X))
    q_conf = 1.0 - np.einsum("ij,ij->i", Q, Q)
    for max_points in (1, 100, _runtime.ORDER_NODE_POINTS, 10**6):
        keys = hyperbolic_kdtree._first_node_starts(tree.lo_, tree.hi_, tree.left_, tree.right_, tree.start_,
                                                    tree.end_, tree.max_conformal_, Q, q_conf, max_points)
        expected = [_first_node_start(tree, q, cq, max_points) for q, cq in zip(Q, q_conf)]
        np.testing.assert_array_equal(keys, expected)
    order = tree.query_order(Q, q_conf)
    keys = hyperbolic_kdtree._first_node_starts(tree.lo_, tree.hi_, tree.left_, tree.right_, tree.start_,
                                                tree.end_, tree.max_conformal_, Q, q_conf, _runtime.ORDER_NODE_POINTS)
    assert len(set(keys.tolist())) > 1
    assert np.all(np.diff(keys[order]) >= 0)
    ties = keys[order][1:] == keys[order][:-1]
    assert np.all(np.diff(order)[ties] > 0)  # a stable sort: one node's queries keep their order


def test_query_order_checks_its_queries(data):
    X, Q = data
    for algorithm in ("hkdtree", "graph"):
        index = hypann.HyperbolicIndex(algorithm=algorithm, random_state=0).build(X)
        structure = index.algorithm_.tree_ if algorithm == "hkdtree" else index.algorithm_.graph_
        with pytest.raises(ValueError, match="queries must have shape"):
            structure.query_order(Q[:, :3], np.ones(len(Q)))
        with pytest.raises(ValueError, match="q_conformal must have shape"):
            structure.query_order(Q, np.ones(3))


def test_the_scan_and_row_seeded_searches_keep_the_order_given(data):
    X, Q = data
    for algorithm in ("brute", "vamana"):
        index = hypann.HyperbolicIndex(algorithm=algorithm, random_state=0).build(X[:500])
        assert index.algorithm_.query_order(*index._queries(Q)) is None


def _changed_index(X):
    """A kd-tree index of the first 3,000 points of ``X``, the others added, every 7th removed; and the
    ids of the points left."""
    index = hypann.HyperbolicIndex(algorithm="hkdtree").build(X[:3000])
    index.add(X[3000:])
    index.remove(np.arange(0, len(X), 7))
    return index, np.setdiff1d(np.arange(len(X)), np.arange(0, len(X), 7))


def _in_smaller_range_batches(index, Q, radius):
    """:func:`_rows_of` the range search of ``Q`` in batches too small to be reordered."""
    step = ORDERED - 1
    return [row for s in range(0, len(Q), step)
            for row in _rows_of(index.search_radius(Q[s:s + step], radius[s:s + step]))]


def test_added_and_removed_points_with_a_reordered_batch(data):
    X, Q = data
    index, live = _changed_index(X)
    res = index.search(Q, 10)
    np.testing.assert_allclose(res.distances, true_knn_dist(X[live], Q, 10), rtol=1e-9, atol=1e-12)
    assert np.isin(res.indices, live).all()
    ids, dist, _ = _in_smaller_batches(index, Q, 10)
    np.testing.assert_array_equal(res.indices, ids)
    np.testing.assert_array_equal(res.distances, dist)


def _rows_of(res):
    """A range search's answer as one (ids, distances) pair per query."""
    bounds = zip(res.offsets[:-1], res.offsets[1:])
    return [(res.indices[a:b].tolist(), res.distances[a:b].tolist()) for a, b in bounds]


@pytest.mark.parametrize("algorithm, settings_", [("hkdtree", {}), ("auto", {}), ("graph", {"exact": True})])
def test_a_reordered_range_search_answers_as_the_queries_in_their_order(data, algorithm, settings_):
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm=algorithm, random_state=0, **settings_).build(X)
    radius = index.search(Q, 6).distances[:, -1] * np.linspace(0.5, 1.5, len(Q))  # 0 to a dozen points each
    res = index.search_radius(Q, radius)
    assert _rows_of(res) == _in_smaller_range_batches(index, Q, radius)
    brute = hypann.HyperbolicIndex(algorithm="brute").build(X).search_radius(Q, radius)
    assert [sorted(ids) for ids, _ in _rows_of(res)] == [sorted(ids) for ids, _ in _rows_of(brute)]
    assert len(set(np.diff(res.offsets).tolist())) > 1


def test_a_reordered_range_search_with_added_and_removed_points(data):
    X, Q = data
    index, live = _changed_index(X)
    radius = np.full(len(Q), float(np.median(index.search(Q, 8).distances[:, -1])))
    res = index.search_radius(Q, radius)
    assert _rows_of(res) == _in_smaller_range_batches(index, Q, radius)
    brute = hypann.HyperbolicIndex(algorithm="brute").build(X[live]).search_radius(Q, radius)
    assert [sorted(ids) for ids, _ in _rows_of(res)] == [sorted(live[ids].tolist()) for ids, _ in _rows_of(brute)]


@settings(max_examples=50, deadline=None)
@given(counts=st.lists(st.integers(0, 4), min_size=1, max_size=30), seed=st.integers(0, 2**31 - 1))
def test_take_ragged_takes_rows_in_the_order_given(counts, seed):
    rng = np.random.default_rng(seed)
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    values = rng.normal(size=offsets[-1])
    rows = rng.permutation(len(counts))
    taken, got = take_ragged(offsets, rows, values)
    expected = [values[offsets[r]:offsets[r + 1]].tolist() for r in rows]
    assert [got[a:b].tolist() for a, b in zip(taken[:-1], taken[1:])] == expected


def test_stats_put_writes_a_piece_into_its_rows():
    stats = SearchStats.zeros(5)
    part = SearchStats(np.array([1, 2]), np.array([3, 4]), np.array([5, 6]), {"probes": np.array([7, 8])})
    stats.put(np.array([3, 0]), part)
    np.testing.assert_array_equal(stats.oracle_calls, [2, 0, 0, 1, 0])
    np.testing.assert_array_equal(stats.samples, [4, 0, 0, 3, 0])
    np.testing.assert_array_equal(stats.rounds, [6, 0, 0, 5, 0])
    np.testing.assert_array_equal(stats.extra["probes"], [8, 0, 0, 7, 0])  # new to stats: zero elsewhere


@settings(max_examples=50, deadline=None)
@given(counts=st.lists(st.integers(0, 4), min_size=1, max_size=30), cuts=st.lists(st.integers(0, 30), max_size=4))
def test_concat_ragged_joins_consecutive_pieces(counts, cuts):
    offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
    values = np.arange(offsets[-1], dtype=np.float64)
    bounds = [0, *sorted(min(c, len(counts)) for c in cuts), len(counts)]
    pieces = [(offsets[a:b + 1] - offsets[a], values[offsets[a]:offsets[b]], -values[offsets[a]:offsets[b]])
              for a, b in zip(bounds[:-1], bounds[1:])]
    joined, got, negated = concat_ragged(*pieces)
    np.testing.assert_array_equal(joined, offsets)
    np.testing.assert_array_equal(got, values)
    np.testing.assert_array_equal(negated, -values)


@settings(max_examples=30, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(20, 400), d=st.sampled_from([2, 3, 7]),
       k=st.integers(1, 12), boundary=st.booleans(), algorithm=st.sampled_from(["hkdtree", "auto", "graph_exact"]))
def test_reordered_exact_batches_equal_brute_force(seed, n, d, k, boundary, algorithm):
    """Small data with nodes of one point as the order's groups (so that the order is not the identity), points
    and queries down to ``1-|x|^2 = 1e-12``."""
    rng = np.random.default_rng(seed)
    power = 0.05 if boundary else 0.5
    X = ball_points(rng, n, d, min_conformal=1e-12, radial_power=power)
    Q = ball_points(rng, ORDERED + 16, d, min_conformal=1e-12, radial_power=power)
    Q[:8] = X[rng.integers(0, n, 8)]  # queries on indexed points
    k = min(k, n)
    settings_ = {"exact": True} if algorithm == "graph_exact" else {}
    name = "graph" if algorithm == "graph_exact" else algorithm
    with mock.patch.object(hyperbolic_kdtree, "ORDER_NODE_POINTS", 1), \
            mock.patch.object(knn_graph, "ORDER_NODE_POINTS", 1):
        index = hypann.HyperbolicIndex(algorithm=name, random_state=0, **settings_).build(X)
        res = index.search(Q, k)
    brute = hypann.HyperbolicIndex(algorithm="brute").build(X).search(Q, k)
    np.testing.assert_array_equal(res.distances, brute.distances)
    np.testing.assert_allclose(res.distances, true_knn_dist(X, Q, k), rtol=1e-9, atol=1e-12)
