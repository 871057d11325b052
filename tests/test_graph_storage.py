"""The graph index holds the index's single copy of the points and supports float32 storage."""

from __future__ import annotations

import numpy as np
import pytest

import hypann
from hypann import io as hio
from hypann.geometry._kernels import conformal_factor, delta_to_candidates
from hypann.geometry.poincare import dist_from_delta
from tests.conftest import ball_points, brute_knn_delta

pytestmark = pytest.mark.kernels

N, D = 1500, 5


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(21)
    X = ball_points(rng, N + 60, D, min_conformal=1e-6)
    return np.ascontiguousarray(X[:N]), np.ascontiguousarray(X[N:])


@pytest.fixture(scope="module")
def built(data):
    X, _ = data
    out = {}
    for storage in ("float64", "float32"):
        for exact in (False, True):
            out[storage, exact] = hypann.HyperbolicIndex(algorithm="graph", storage=storage, exact=exact,
                                                         random_state=5).build(X)
    return out


def _truth(index, Q, k):
    """float64 brute force over the stored points (float32 coordinates as stored, float64 conformal factors)."""
    P = np.asarray(index.points_, dtype=np.float64)
    return brute_knn_delta(Q, conformal_factor(Q), P, index.conformal_, k)


@pytest.mark.parametrize("storage", ["float64", "float32"])
def test_recall_at_defaults(data, built, storage):
    X, Q = data
    index = built[storage, False]
    assert index.points_.dtype == np.dtype(storage)
    ids, _ = _truth(index, Q, 10)
    got = index.search(Q, 10).indices
    recall = np.mean([len(set(a) & set(b)) / 10 for a, b in zip(got.tolist(), ids.tolist())])
    assert recall >= 0.95


@pytest.mark.parametrize("storage", ["float64", "float32"])
def test_exact_equals_float64_brute_force_over_the_stored_points(data, built, storage):
    X, Q = data
    index = built[storage, True]
    ids, deltas = _truth(index, Q, 8)
    res = index.search(Q, 8)
    np.testing.assert_array_equal(res.distances, dist_from_delta(deltas))
    # the returned ids have exactly those deltas (ties may be broken either way)
    P = np.asarray(index.points_, dtype=np.float64)
    got = delta_to_candidates(Q, conformal_factor(Q), P, index.conformal_, res.indices)
    np.testing.assert_array_equal(got, deltas)


@pytest.mark.parametrize("storage", ["float64", "float32"])
@pytest.mark.parametrize("exact", [False, True])
def test_one_copy_in_memory_and_file_and_identical_answers_after_load(data, built, tmp_path, storage, exact):
    X, Q = data
    index = built[storage, exact]
    def single_copy(ix):
        graph = ix.algorithm_.graph_
        assert ix._points is None and ix._conformal is None
        if exact:  # the kd-tree holds the only copy, the graph refers to it
            assert graph.points_ is ix.algorithm_.tree_.points_
        else:  # the graph holds it, in leaf order
            assert graph.in_leaf_order_ and ix.algorithm_.owns_points

    single_copy(index)
    path = tmp_path / "g.hypann"
    index.save(path)
    header, arrays = hio.read_raw(path)
    assert header["dtype"] == storage
    points = [name for name in arrays if name.endswith("points")]
    assert points == (["state/tree.points"] if exact else ["state/points"])  # the points are saved once
    assert arrays[points[0]].dtype == np.dtype(storage)
    want = index.search(Q, 6)
    for mmap in (False, True):
        back = hypann.load(path, mmap=mmap)
        single_copy(back)
        np.testing.assert_array_equal(back.points_, index.points_)
        got = back.search(Q, 6)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.distances, want.distances)


def _input_order_file(index, tmp_path, name):
    """``(header, arrays)`` of ``index`` saved as files were written before the graph kept its points in
    leaf order: the points at the top level in input order, the graph's ids input rows, no flag."""
    index.save(tmp_path / name)
    header, arrays = hio.read_raw(tmp_path / name)
    order = np.asarray(arrays.pop("state/tree_order"))
    assert int(arrays.pop("state/leaf_order")) == 1
    position = np.empty_like(order)
    position[order] = np.arange(order.size)
    nbrs = np.asarray(arrays.pop("state/neighbors"))
    rows = np.where(nbrs >= 0, order[np.maximum(nbrs, 0)], -1).astype(nbrs.dtype)[position]
    pivots = np.array(arrays.pop("state/tree_pivots"))
    inner = pivots[:, 0] >= 0
    pivots[inner] = order[pivots[inner]]
    arrays["points"] = np.asarray(arrays.pop("state/points"))[position]
    arrays["conformal"] = np.asarray(arrays.pop("state/conformal"))[position]
    arrays.update({"state/neighbors": rows, "state/tree_pivots": pivots, "state/tree_order": order})
    return header, arrays


def test_older_file_in_input_order_still_loads_and_answers_alike(data, built, tmp_path):
    """Files written before the leaf order: the same graph searched in input order gives the same answers
    (ties in the search list are broken by insertion order, never by id)."""
    X, Q = data
    index = built["float64", False]
    header, arrays = _input_order_file(index, tmp_path, "new.hypann")
    hio.write_raw(tmp_path / "old.hypann", header, arrays)
    want = index.search(Q, 6)
    for mmap in (False, True):
        back = hypann.load(tmp_path / "old.hypann", mmap=mmap)
        assert not back.algorithm_.owns_points and back.algorithm_.graph_.points_ is back._points
        got = back.search(Q, 6)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.distances, want.distances)
    # saved again, it stays in input order with one copy of the points
    back = hypann.load(tmp_path / "old.hypann")
    back.save(tmp_path / "again.hypann")
    assert [k for k in hio.read_raw(tmp_path / "again.hypann")[1] if k.endswith("points")] == ["points"]


def test_older_file_with_the_graphs_own_copy_still_loads(data, built, tmp_path):
    X, Q = data
    index = built["float64", False]
    header, arrays = _input_order_file(index, tmp_path, "new.hypann")
    old = {**arrays, "state/points": np.array(arrays["points"]), "state/conformal": np.array(arrays["conformal"])}
    hio.write_raw(tmp_path / "old.hypann", header, old)
    back = hypann.load(tmp_path / "old.hypann")
    np.testing.assert_array_equal(back.search(Q, 4).indices, index.search(Q, 4).indices)
    assert back.algorithm_.graph_.points_ is back._points
    moved = dict(old)
    moved["state/points"] = old["state/points"].copy()
    moved["state/points"][3, 0] *= 0.5
    hio.write_raw(tmp_path / "two.hypann", header, moved)
    with pytest.raises(ValueError, match=r"graph state 'points' is not the index's points: the file holds two "
                                         r"different copies"):
        hypann.load(tmp_path / "two.hypann")


def test_leaf_order_file_checks_its_flag_and_a_second_copy(data, built, tmp_path):
    X, Q = data
    index = built["float64", False]
    index.save(tmp_path / "g.hypann")
    header, arrays = hio.read_raw(tmp_path / "g.hypann")
    hio.write_raw(tmp_path / "flag.hypann", header, {**arrays, "state/leaf_order": np.int64(2)})
    with pytest.raises(ValueError, match=r"'leaf_order' must be the integer 1"):
        hypann.load(tmp_path / "flag.hypann")
    # format 2 holds the index's copy (input order) beside the graph's (leaf order): they must agree
    index.save(tmp_path / "v2.npz", format_version=2)
    with np.load(tmp_path / "v2.npz") as f:
        assert np.array_equal(f["points"], X) and "state/points" in f.files
    np.testing.assert_array_equal(hypann.load(tmp_path / "v2.npz").search(Q, 4).indices, index.search(Q, 4).indices)
    graph = index.algorithm_.graph_
    state = {**graph.to_arrays()}
    state["points"] = state["points"].copy()
    state["points"][0, 0] *= 0.5
    algo = type(index.algorithm_)(**index.algorithm_.settings())
    with pytest.raises(ValueError, match=r"graph state 'points' is not the index's points in leaf order"):
        algo.restore(X, graph.points_in_input_order()[1], state)


def test_float32_graph_on_float32_input_equals_float64_storage(data):
    X, Q = data
    X32 = X.astype(np.float32)
    a = hypann.HyperbolicIndex(algorithm="graph", storage="float32", random_state=2, ef=40).build(X32)
    b = hypann.HyperbolicIndex(algorithm="graph", random_state=2, ef=40).build(X32)
    ra, rb = a.search(Q, 5), b.search(Q, 5)
    np.testing.assert_array_equal(ra.indices, rb.indices)
    np.testing.assert_array_equal(ra.distances, rb.distances)
    assert a.nbytes < b.nbytes


def test_older_exact_file_with_the_graph_in_input_order_still_loads(data, built, tmp_path):
    """exact=True files written before the graph moved onto the kd-tree's copy: points, graph, tree apart."""
    from hypann.search.hyperbolic_kdtree import HyperbolicKDTree

    X, Q = data
    plain = built["float64", False]
    header, arrays = _input_order_file(plain, tmp_path, "plain.hypann")
    tree = HyperbolicKDTree(leaf_size=16).build(plain.points_, plain.conformal_)
    arrays.update({f"state/tree.{name}": arr for name, arr in tree.to_arrays().items()})
    header["params"] = {**header["params"], "exact": True}
    hio.write_raw(tmp_path / "old-exact.hypann", header, arrays)
    for mmap in (False, True):
        back = hypann.load(tmp_path / "old-exact.hypann", mmap=mmap)
        assert not back.algorithm_.owns_points and back.algorithm_.graph_.points_ is back._points
        ids, deltas = _truth(back, Q, 5)
        np.testing.assert_array_equal(back.search(Q, 5).distances, dist_from_delta(deltas))
    flagged = {**arrays, "state/graph_in_tree_order": np.int64(1)}
    hio.write_raw(tmp_path / "bad.hypann", {**header, "params": {**header["params"], "exact": False}}, flagged)
    with pytest.raises(ValueError, match=r"graph state 'graph_in_tree_order' must be the integer 1 and only appear "
                                         r"with exact=True"):
        hypann.load(tmp_path / "bad.hypann")


def test_split_keys_flag_is_saved_checked_and_absent_in_older_files(tmp_path):
    """From 16-D on the entry tree sums its split keys over four lanes (``split_keys_``): the file says so,
    the flag must be the integer 1, and a file without it (written before it existed) is descended with
    sums in coordinate order, still to a right answer."""
    rng = np.random.default_rng(23)
    X = ball_points(rng, 900, 20, min_conformal=1e-6)
    base, Q = np.ascontiguousarray(X[:800]), np.ascontiguousarray(X[800:])
    index = hypann.HyperbolicIndex(algorithm="graph", random_state=3).build(base)
    assert index.algorithm_.graph_.split_keys_
    assert not hypann.HyperbolicIndex(algorithm="graph").build(base[:, :15] * 0.9).algorithm_.graph_.split_keys_
    want = index.search(Q, 5)
    index.save(tmp_path / "g.hypann")
    back = hypann.load(tmp_path / "g.hypann")
    assert back.algorithm_.graph_.split_keys_
    np.testing.assert_array_equal(back.search(Q, 5).indices, want.indices)
    header, arrays = hio.read_raw(tmp_path / "g.hypann")
    assert int(arrays["state/split_keys"]) == 1
    hio.write_raw(tmp_path / "flag.hypann", header, {**arrays, "state/split_keys": np.int64(2)})
    with pytest.raises(ValueError, match=r"'split_keys' must be the integer 1"):
        hypann.load(tmp_path / "flag.hypann")
    older = {name: value for name, value in arrays.items() if name != "state/split_keys"}
    hio.write_raw(tmp_path / "older.hypann", header, older)
    old = hypann.load(tmp_path / "older.hypann")
    assert not old.algorithm_.graph_.split_keys_
    got = old.search(Q, 5, ef=64)
    truth = hypann.HyperbolicIndex(algorithm="brute").build(base).search(Q, 5)
    np.testing.assert_allclose(got.distances, truth.distances, rtol=1e-12)
