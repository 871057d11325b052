"""Tests of hypann's graph index (hypann.graph.knn_graph, algorithm="graph")."""

from __future__ import annotations

import pickle
import warnings

import numba
import numpy as np
import pytest

import hypann
from hypann._runtime import read_only
from hypann.datasets.families import FAMILIES, make_family
from hypann.geometry._kernels import conformal_factor, delta_to_candidates, deltas_to_rows, sq_dist_split
from hypann.graph import HyperbolicGraphIndex
from hypann.graph import knn_graph
from hypann.graph.knn_graph import _reverse_lists, _search_graph, nn_descent
from hypann.graph.partition_tree import (SPLIT_SUMS_MIN_DIM, build_forest, build_tree, descend, node_capacity,
                                         split_key)
from hypann.metrics import recall
from tests.conftest import brute_knn_delta, without_far_stage

K = 10
N_BASE = 5000
N_QUERIES = 200


def _recall(found_d, true_d, k=K):
    """Recall@k by distance threshold (on deltas), so ties (duplicates) do not matter."""
    return recall(found_d, true_d, k, epsilon=1e-12)


def _split(X, m, seed):
    perm = np.random.default_rng(seed).permutation(len(X))
    Q, D = X[perm[:m]], X[perm[m:]]
    return np.ascontiguousarray(D), conformal_factor(D), np.ascontiguousarray(Q), conformal_factor(Q)


def _family(name, dim):
    return _split(make_family(name, N_BASE + N_QUERIES, dim, seed=0), N_QUERIES, seed=1)


@pytest.fixture(scope="module")
def mixture():
    return _family("gaussian_mixture", 10)


@pytest.fixture(scope="module")
def mixture_index(mixture):
    X, cx, _, _ = mixture
    return HyperbolicGraphIndex(random_state=0).build(X, cx)


CASES = [(name, 10) for name in FAMILIES] + [("gaussian_mixture", 100)]


@pytest.mark.parametrize(("name", "dim"), CASES, ids=[f"{n}-{d}d" for n, d in CASES])
def test_default_recall_on_every_family(name, dim):
    X, cx, Q, cq = _family(name, dim)
    index = HyperbolicGraphIndex(random_state=0).build(X, cx)
    _, true_d = brute_knn_delta(Q, cq, X, cx, K)
    res = index.search(Q, cq, K)
    assert _recall(res.deltas, true_d) >= 0.95
    assert index.calibration_recall_ >= 0.98
    assert np.mean(res.samples) < 0.5 * len(X)  # a graph walk, not a scan
    # a larger list gets the last percent
    assert _recall(index.search(Q, cq, K, ef=4 * index.ef_).deltas, true_d) >= 0.99


def test_results_are_valid_distinct_ids_with_true_deltas(mixture, mixture_index):
    X, cx, Q, cq = mixture
    for ef in (None, 10, 64):
        res = mixture_index.search(Q, cq, K, ef=ef)
        assert res.ids.shape == (len(Q), K) and res.ids.dtype == np.int64
        assert np.all((res.ids >= 0) & (res.ids < len(X)))
        assert all(len(set(row.tolist())) == K for row in res.ids)
        assert np.all(np.diff(res.deltas, axis=1) >= 0)
        np.testing.assert_array_equal(delta_to_candidates(Q, cq, X, cx, res.ids), res.deltas)


@pytest.mark.parametrize(("name", "dim", "dtype", "keep_order"),
                         [("gaussian_mixture", 100, np.float64, False), ("hierarchical_tree", 32, np.float32, True),
                          ("duplicates", SPLIT_SUMS_MIN_DIM, np.float64, True)])
def test_split_key_pivots_are_reported_with_exact_deltas_in_order(name, dim, dtype, keep_order):
    """From ``SPLIT_SUMS_MIN_DIM`` coordinates on the descent offers its pivots with the entry tree's split
    sums: every reported delta is still ``delta_row``'s, bit for bit, and the rows ascend (with copies
    reported after their node, in leaf order, in float32). Before the answers' front was made exact, all
    three cases failed."""
    X, cx, Q, cq = _family(name, dim)
    X = X.astype(dtype)
    cx = conformal_factor(X)
    index = HyperbolicGraphIndex(random_state=0).build(X.copy(), cx.copy(), keep_order=keep_order)
    assert index.split_keys_ and (index.copy_groups_.shape[0] > 0) == (name == "duplicates")
    for ef in (None, 10, 64):
        res = index.search(Q, cq, K, ef=ef)
        assert np.all(res.ids >= 0) and all(len(set(row.tolist())) == K for row in res.ids)
        assert np.all(np.diff(res.deltas, axis=1) >= 0)
        np.testing.assert_array_equal(delta_to_candidates(Q, cq, X, cx, res.ids), res.deltas)
    # the answer's first entries are the walk's nearest: its recall holds
    _, true_d = brute_knn_delta(Q, cq, X, cx, K)
    assert _recall(res.deltas, true_d) >= 0.99


def test_graph_shape_degree_and_no_self_loops(mixture, mixture_index):
    X = mixture[0]
    nb = mixture_index.neighbors_
    assert nb.shape == (len(X), 40) and nb.dtype == np.int32
    for i, row in enumerate(nb):
        valid = row[row >= 0]
        assert np.all(row[len(valid) :] == -1)
        assert len(valid) >= 24 and i not in valid and len(set(valid.tolist())) == len(valid)


def test_build_is_deterministic_for_a_seed_and_the_thread_count(mixture, mixture_index):
    X, cx, Q, cq = mixture
    again = HyperbolicGraphIndex(random_state=0).build(X, cx)
    np.testing.assert_array_equal(again.neighbors_, mixture_index.neighbors_)
    assert again.ef_ == mixture_index.ef_
    threads = numba.get_num_threads()
    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs 2 numba threads to compare 1 and 2")
    try:
        numba.set_num_threads(1)
        one = HyperbolicGraphIndex(random_state=0).build(X, cx)
        res_one = one.search(Q, cq, K)
        numba.set_num_threads(2)
        two = HyperbolicGraphIndex(random_state=0).build(X, cx)
        res_two = two.search(Q, cq, K)
    finally:
        numba.set_num_threads(threads)
    np.testing.assert_array_equal(one.neighbors_, mixture_index.neighbors_)
    np.testing.assert_array_equal(two.neighbors_, mixture_index.neighbors_)
    for a, b in zip(res_one, res_two):
        np.testing.assert_array_equal(a, b)
    other = HyperbolicGraphIndex(random_state=1).build(X, cx)
    assert not np.array_equal(other.neighbors_, mixture_index.neighbors_)


def test_build_in_leaf_order_restores_the_points_and_gives_input_row_ids(mixture, mixture_index):
    """The graph is built over the points in tree-leaf order, in place or on a copy: the same graph,
    the caller's arrays back in their order bit for bit, and neighbour rows of input rows."""
    X, cx, _, _ = mixture
    X_own, cx_own = X.copy(), cx.copy()
    in_place = HyperbolicGraphIndex(random_state=0).build(X_own, cx_own, in_place=True)
    np.testing.assert_array_equal(X_own, X)
    np.testing.assert_array_equal(cx_own, cx)
    assert in_place.points_ is X_own
    np.testing.assert_array_equal(in_place.neighbors_, mixture_index.neighbors_)
    frozen_X, frozen_cx = X.copy(), cx.copy()
    frozen_X.flags.writeable = frozen_cx.flags.writeable = False  # in_place asked, a copy used
    np.testing.assert_array_equal(HyperbolicGraphIndex(random_state=0).build(frozen_X, frozen_cx,
                                                                             in_place=True).neighbors_,
                                  mixture_index.neighbors_)
    # row p lists points near X[p]: its k-NN part (after any bridges) is nearest first from p
    nb = mixture_index.neighbors_
    for p in range(0, len(X), 97):
        ids = nb[p][nb[p] >= 0][:24]
        d = delta_to_candidates(X[p:p + 1], cx[p:p + 1], X, cx, ids[None, :].astype(np.int64))[0]
        true_d = brute_knn_delta(X[p:p + 1], cx[p:p + 1], X, cx, 25)[1][0, 1:]
        assert np.median(d) <= 2 * np.median(true_d)


@pytest.mark.parametrize(("keep_order", "copies"), [(False, False), (True, False), (True, True)])
def test_build_in_place_restores_the_points_after_an_error(mixture, monkeypatch, keep_order, copies):
    X, cx, _, _ = mixture
    if copies:  # the build over groups of copies (hypann.graph.copies) reorders them its own way
        X, cx = np.concatenate([X, X[::3]]), np.concatenate([cx, cx[::3]])
    X_own, cx_own = X.copy(), cx.copy()

    def fail(points, *args):
        assert not np.array_equal(points, X)  # reordered while the graph is built
        raise MemoryError("no room")

    monkeypatch.setattr(knn_graph, "_build_search_graph", fail)
    with pytest.raises(MemoryError, match="no room"):
        HyperbolicGraphIndex(random_state=0).build(X_own, cx_own, in_place=True, keep_order=keep_order)
    np.testing.assert_array_equal(X_own, X)
    np.testing.assert_array_equal(cx_own, cx)


@pytest.mark.parametrize("in_place", [False, True])
def test_points_kept_in_leaf_order_give_the_same_graph_and_answers(mixture, mixture_index, in_place):
    """``keep_order=True``: the same graph over the points in the entry tree's leaf order, and the
    same search answers in input rows (the search visits the same points in the same order)."""
    X, cx, Q, cq = mixture
    X_own, cx_own = X.copy(), cx.copy()
    kept = HyperbolicGraphIndex(random_state=0, ef=24).build(X_own, cx_own, in_place=in_place, keep_order=True)
    plain = HyperbolicGraphIndex(random_state=0, ef=24).build(X, cx)
    assert kept.in_leaf_order_ and not plain.in_leaf_order_
    order = kept.tree_order_
    np.testing.assert_array_equal(kept.points_, X[order])  # row t is input row order[t]
    np.testing.assert_array_equal(kept.conformal_, cx[order])
    if in_place:  # the caller's own arrays, reordered and kept
        assert np.shares_memory(kept.points_, X_own) and np.shares_memory(kept.conformal_, cx_own)
    else:  # a reordered copy; the caller's arrays untouched
        np.testing.assert_array_equal(X_own, X)
    np.testing.assert_array_equal(kept.points_in_input_order()[0], X)
    np.testing.assert_array_equal(kept.points_in_input_order()[1], cx)
    rows = np.where(kept.neighbors_ >= 0, order[np.maximum(kept.neighbors_, 0)], -1)
    position = np.argsort(order)
    np.testing.assert_array_equal(rows[position], plain.neighbors_)
    for k, ef in ((1, None), (10, None), (10, 64)):
        a, b = kept.search(Q, cq, k, ef=ef), plain.search(Q, cq, k, ef=ef)
        np.testing.assert_array_equal(a.ids, b.ids)
        np.testing.assert_array_equal(a.deltas, b.deltas)
        np.testing.assert_array_equal(a.samples, b.samples)
    back = HyperbolicGraphIndex.from_arrays(kept.to_arrays())
    assert back.in_leaf_order_
    np.testing.assert_array_equal(back.search(Q, cq, 10).ids, kept.search(Q, cq, 10).ids)
    with pytest.raises(ValueError, match="holds its own points in leaf order: pass no points/conformal"):
        HyperbolicGraphIndex.from_arrays(kept.to_arrays(include_points=False), points=X, conformal=cx)


@numba.njit
def _pull_step_split_one_at_a_time(p, X, cx, new_i, old_i, row_d, row_i, row_f, seen, tag, cand):
    """The pull step as :func:`knn_graph._refine_row_batched` documents it, one candidate at a time: each
    candidate's delta offered in turn (:func:`~hypann.geometry._kernels.deltas_to_rows` with ``split`` of
    that one candidate: float64 points its split sum, float32 points its float32 sum; tests/test_geometry.py
    checks both against their lanes)."""
    m = knn_graph._pull_candidates(p, new_i, old_i, seen, tag, cand)
    changed = 0
    one = np.empty(1)
    for s in range(m):
        deltas_to_rows(X[p], cx[p], X, cx, cand[s:s + 1], True, one)
        changed += knn_graph._offer_to_row(one[0], cand[s], row_d, row_i, row_f)
    return changed


@pytest.mark.kernels
@pytest.mark.parametrize("storage", [np.float64, np.float32])
@pytest.mark.parametrize("dim", [3, 40, 70])
def test_nn_descent_step_eight_at_a_time_makes_the_rows_of_one_at_a_time(dim, storage):
    """The pull step with its deltas eight at a time (used from REFINE_BATCH_MIN_DIM dimensions on)
    inserts exactly what offering the same candidates one at a time inserts, row by row, also with copies
    and half-full rows, for float64 points (split sums) and float32 points (float32 sums)."""
    rng = np.random.default_rng(dim)
    n, K, C = 300, 8, 6
    base = rng.uniform(-0.6, 0.6, (n // 3, dim)) / np.sqrt(dim)
    X = np.ascontiguousarray(np.vstack([base, base, rng.uniform(-0.6, 0.6, (n - 2 * len(base), dim)) / np.sqrt(dim)]))
    # the kernel's types as _refine passes them: read-only views, int32 row numbers
    cx = read_only(conformal_factor(X))
    X = read_only(np.ascontiguousarray(X.astype(storage)))
    new_i = rng.integers(-1, n, (n, C)).astype(np.int32)
    old_i = rng.integers(-1, n, (n, C)).astype(np.int32)
    rows = []
    for step in (_pull_step_split_one_at_a_time, knn_graph._refine_row_batched):
        row_d = np.full((n, K), np.inf, dtype=np.float32)
        row_i = np.full((n, K), -1, dtype=np.int32)
        row_f = np.zeros((n, K), dtype=np.bool_)
        seen = np.zeros(n, dtype=np.int32)
        cand = np.empty(3 * C * C, dtype=np.int32)
        changed = []
        for rnd in range(2):  # the second pass starts from full rows, which most candidates do not enter
            for p in range(n):
                extra = (np.empty(len(cand)),) if step is knn_graph._refine_row_batched else ()
                changed.append(step(np.int32(p), X, cx, new_i, old_i, row_d[p], row_i[p], row_f[p], seen,
                                    rnd * n + p + 1, cand, *extra))
        rows.append((row_d, row_i, row_f, changed))
    for a, b in zip(*rows):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    assert sum(rows[0][3]) > n  # rows were filled and changed


def test_save_load_and_pickle_roundtrip(mixture, mixture_index, tmp_path):
    _, _, Q, cq = mixture
    np.savez(tmp_path / "graph.npz", **mixture_index.to_arrays())
    with np.load(tmp_path / "graph.npz") as f:
        loaded = HyperbolicGraphIndex.from_arrays(dict(f))
    again = pickle.loads(pickle.dumps(mixture_index))
    want = mixture_index.search(Q, cq, K, ef=20)
    for other in (loaded, again):
        assert other.ef_ == mixture_index.ef_ and other.neighbors_.dtype == np.int32
        got = other.search(Q, cq, K, ef=20)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
        np.testing.assert_array_equal(other.search(Q, cq, K).ids, mixture_index.search(Q, cq, K).ids)


def test_hyperbolic_index_algorithm_graph_save_load(mixture, tmp_path):
    X, _, Q, _ = mixture
    index = hypann.HyperbolicIndex(algorithm="graph", random_state=3).build(X)
    res = index.search(Q, k=K, ef=16)
    index.save(tmp_path / "g.hypann")
    loaded = hypann.HyperbolicIndex.load(tmp_path / "g.hypann")
    again = loaded.search(Q, k=K, ef=16)
    np.testing.assert_array_equal(again.indices, res.indices)
    np.testing.assert_array_equal(again.distances, res.distances)
    assert loaded.algorithm_.graph_.ef_ == index.algorithm_.graph_.ef_


def test_corrupt_state_is_rejected(mixture_index):
    state = dict(mixture_index.to_arrays())
    bad = dict(state, neighbors=np.where(state["neighbors"] == 5, 10**6, state["neighbors"]))
    with pytest.raises(ValueError, match="neighbors holds ids outside"):
        HyperbolicGraphIndex.from_arrays(bad)
    bad = dict(state, tree_order=state["tree_order"][::-1][:-1])
    with pytest.raises(ValueError, match="tree_order is not a permutation"):
        HyperbolicGraphIndex.from_arrays(bad)
    bad = dict(state, tree_children=np.zeros_like(state["tree_children"]))
    with pytest.raises(ValueError, match="tree_children is not a tree"):
        HyperbolicGraphIndex.from_arrays(bad)
    missing = {k: v for k, v in state.items() if k != "tree_pivots"}
    with pytest.raises(ValueError, match=r"missing arrays \['tree_pivots'\]"):
        HyperbolicGraphIndex.from_arrays(missing)


def test_L_is_a_deprecated_alias_of_ef(mixture, mixture_index):
    _, _, Q, cq = mixture
    with pytest.warns(DeprecationWarning, match="L is deprecated for the graph search; use ef"):
        old = mixture_index.search(Q, cq, K, L=40)
    new = mixture_index.search(Q, cq, K, ef=40)
    for a, b in zip(old, new):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"give ef or its deprecated alias L, not both \(ef=40, L=40\)"):
        mixture_index.search(Q, cq, K, ef=40, L=40)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mixture_index.search(Q, cq, K, ef=40)


def test_budget_is_a_hard_limit(mixture, mixture_index):
    X, cx, Q, cq = mixture
    for budget in (0, 1, 25, 300):
        res = mixture_index.search(Q, cq, K, ef=64, budget=budget)
        assert np.all(res.samples <= budget)
    zero = mixture_index.search(Q, cq, K, budget=0)
    assert np.all(zero.ids == -1) and np.all(np.isinf(zero.deltas))


def test_fixed_ef_skips_calibration(mixture):
    X, cx, Q, cq = mixture
    index = HyperbolicGraphIndex(ef=17).build(X, cx)
    assert index.ef_ == 17 and np.isnan(index.calibration_recall_)


class _LadderStub:
    """Stands in for an index in ``_calibrate_ef``: every search at list size ``ef`` finds the true ``k``
    nearest of the first ``found(ef)`` sample points and nothing of the others, and evaluates
    ``evaluations(ef, rows, calls)`` points per query (``calls``: the list sizes of the searches so far,
    this one included; no evaluations by default, so the ladder never stops for the scan)."""

    def __init__(self, n_nodes, found, evaluations=None):
        self.n_nodes_ = self.n_points_ = n_nodes
        self.found, self.calls = found, []
        self.evaluations = evaluations or (lambda ef, rows, calls: np.zeros(len(rows)))
        self.points_ = self.conformal_ = np.arange(n_nodes)

    def _run(self, points, conformal, k, ef, budget, exclude, *, copies):
        self.calls.append(ef)
        rows = np.asarray(exclude)
        hit = rows < self.found(ef)
        samples = np.asarray(self.evaluations(ef, rows, self.calls), dtype=np.int64)
        return None, np.where(hit[:, None], 1.0, np.inf) * np.ones((len(rows), k)), samples


@pytest.mark.parametrize("n_nodes", [300, 5000])
def test_calibration_short_of_its_target_keeps_the_smallest_ef_near_the_best(n_nodes):
    """No ``ef`` reaches the target: not the longest list, but the smallest within CALIBRATION_PLATEAU of
    the best recall, and the ladder ends at a list of every node."""
    sample, truth = np.arange(300), np.ones((300, K))
    # recall 0.5 at ef 10, 0.96 at 12-48, 0.9667 at 64-96, 0.97 from 128: the target 0.98 is never reached,
    # and 0.9667 is the first within 0.005 of the best, 0.97
    stub = _LadderStub(n_nodes, lambda ef: 150 if ef < 12 else 288 if ef < 64 else 290 if ef < 128 else 291)
    ef, rec, best, walked = knn_graph._calibrate_ef(stub, sample, truth, 0.98)
    assert (best, ef, rec, walked) == (0.97, 64, 290 / 300, None)
    assert stub.calls[-1] == n_nodes  # tried up to a list of every node
    # reached: the first ef that does, its recall twice
    stub = _LadderStub(n_nodes, lambda ef: 150 if ef < 16 else 297)
    assert knn_graph._calibrate_ef(stub, sample, truth, 0.98) == (16, 0.99, 0.99, None)
    assert stub.calls == [10, 12, 16]


def test_the_calibration_ladder_climbs_in_steps_of_at_most_four_thirds():
    """No step of the ladder is longer than 4/3 (the 1.5x step from 256 to 384 made a set that needed 300 search
    with 384), and a target first reached between 256 and 384 is reached at 320."""
    ladder = knn_graph.EF_LADDER
    assert all(1 < b / a <= 4 / 3 for a, b in zip(ladder, ladder[1:]))
    sample, truth = np.arange(300), np.ones((300, K))
    stub = _LadderStub(100000, lambda ef: 150 if ef < 300 else 297)
    assert knn_graph._calibrate_ef(stub, sample, truth, 0.98) == (320, 0.99, 0.99, None)
    assert stub.calls[-2:] == [256, 320]


@pytest.mark.parametrize("n_nodes", [500, 600])
def test_calibration_stops_climbing_where_the_walk_evaluates_more_than_the_scan(n_nodes):
    """A search at list size ``ef`` evaluates ``ef`` points; recall 1/3 up to ``ef`` 48, 2/3 at 64-96, 1 at 128.
    At ``ef`` 64 the mean evaluations, each point counted at its last search, are (100 * 10 + 200 * 64) / 300
    = 46: above SCAN_FRACTION of 500 points (45.5), so the ladder stops there (the default search scans
    whatever a longer list would reach), after searching the points found at ``ef`` 10 again at 64; below
    that of 600 points (54.5), so it climbs on to the target."""
    sample, truth = np.arange(300), np.ones((300, K))
    stub = _LadderStub(n_nodes, lambda ef: 100 if ef < 64 else 200 if ef < 128 else 300,
                       lambda ef, rows, calls: np.full(len(rows), ef))
    got = knn_graph._calibrate_ef(stub, sample, truth, 0.98)
    climb = [10, 12, 16, 20, 24, 32, 40, 48, 64]
    if n_nodes == 500:
        assert got == (64, 2 / 3, 2 / 3, 64.0) and stub.calls == climb + [64]
    else:
        assert got == (128, 1.0, 1.0, None) and stub.calls == climb + [80, 96, 128]


def test_calibration_on_a_plateau_climbs_on_while_its_start_walks_cheaply():
    """Recall stays at 0.5 at every ``ef``, and the longer lists evaluate more than SCAN_FRACTION of the points:
    the smallest ``ef`` within CALIBRATION_PLATEAU of the best walks 10, so the ladder runs to its end and keeps
    it (groups of copies that no walk reaches, ``test_near_duplicates_do_not_make_...``). A bound that a second
    search at the same ``ef`` does not confirm does not stop it either: it is replaced by the measured mean."""
    sample, truth = np.arange(300), np.ones((300, K))
    stub = _LadderStub(500, lambda ef: 150, lambda ef, rows, calls: np.full(len(rows), ef))
    assert knn_graph._calibrate_ef(stub, sample, truth, 0.98) == (10, 0.5, 0.5, None)
    assert stub.calls[-1] == 500 and len(stub.calls) == len(set(stub.calls))
    # the first search at each ef evaluates 1,000 points, a second one none: at ef 10 the bound (1,000) asks for
    # the found points' second search, whose mean (10 * 1000 / 300 = 33) is below 45.5, and the ladder goes on
    stub = _LadderStub(500, lambda ef: 290,
                       lambda ef, rows, calls: np.full(len(rows), 1000 if calls.count(ef) == 1 else 0))
    assert knn_graph._calibrate_ef(stub, sample, truth, 0.98) == (10, 29 / 30, 29 / 30, None)
    assert stub.calls[:3] == [10, 10, 12] and stub.calls[-1] == 500 and stub.calls.count(10) == 2


def test_calibration_sample_adds_points_of_the_boundary_tenth():
    """256 nodes at random and 128 of the tenth with the smallest ``1-|x|^2``, sorted, marked, drawn by the
    seed; all of them (and the whole boundary tenth) when there are fewer nodes."""
    conf = np.random.default_rng(3).uniform(1e-9, 1.0, 5000)
    sample, boundary = knn_graph._calibration_sample(conf, np.random.default_rng(0))
    assert np.all(np.diff(sample) >= 0) and sample.dtype == np.int64
    assert (~boundary).sum() == knn_graph.CALIBRATION_SIZE and boundary.sum() == knn_graph.CALIBRATION_BOUNDARY_SIZE
    assert len(set(sample[~boundary])) == knn_graph.CALIBRATION_SIZE
    assert len(set(sample[boundary])) == knn_graph.CALIBRATION_BOUNDARY_SIZE
    tenth = np.sort(conf)[499]
    assert np.all(conf[sample[boundary]] <= tenth)
    again = knn_graph._calibration_sample(conf, np.random.default_rng(0))
    assert np.array_equal(again[0], sample) and np.array_equal(again[1], boundary)
    small, edge = knn_graph._calibration_sample(conf[:30], np.random.default_rng(0))
    assert sorted(small[~edge]) == list(range(30))
    assert sorted(small[edge]) == sorted(np.argsort(conf[:30], kind="stable")[:3])


def test_calibration_reaches_the_target_on_the_boundary_sample_too():
    """The uniform part finds its neighbours at ``ef`` 10, the boundary part only from ``ef`` 24: the
    calibration keeps 24, and its recall is the lower of the two parts'."""
    sample, truth = np.arange(384), np.ones((384, K))
    boundary = np.arange(384) >= 256
    stub = _LadderStub(384, lambda ef: 256 if ef < 24 else 384)
    assert knn_graph._calibrate_ef(stub, sample, truth, 0.98, boundary) == (24, 1.0, 1.0, None)
    # without a mask the mean over the whole sample decides: 2/3 until ef 24
    assert knn_graph._calibrate_ef(_LadderStub(384, lambda ef: 256 if ef < 24 else 384), sample, truth,
                                   0.6) == (10, 256 / 384, 256 / 384, None)
    # the lower part decides, also short of the target: boundary at 0.5 until 128, uniform found at once
    stub = _LadderStub(384, lambda ef: 320 if ef < 128 else 350)
    assert knn_graph._calibrate_ef(stub, sample, truth, 0.98, boundary) == (128, 94 / 128, 94 / 128, None)


def test_calibration_holds_the_boundary_within_the_gap_of_the_rest():
    """Both parts pass the target from ``ef`` 12, but the boundary part comes within ``BOUNDARY_GAP`` of the
    uniform part only at 32: the calibration keeps 32. Found counts per ``ef`` (uniform of 256, boundary of
    128): 12 -> 256 / 126 (gap 0.016), 16 -> 256 / 126, 32 -> 256 / 127 (gap 0.008)."""
    sample, truth = np.arange(384), np.ones((384, K))
    boundary = np.arange(384) >= 256
    stub = _LadderStub(384, lambda ef: 200 if ef < 12 else 382 if ef < 32 else 383)
    assert knn_graph._calibrate_ef(stub, sample, truth, 0.98, boundary) == (32, 127 / 128, 127 / 128, None)
    assert stub.calls == [10, 12, 16, 20, 24, 32]
    # a boundary part above the uniform one holds at once
    boundary = np.arange(384) < 128
    stub = _LadderStub(384, lambda ef: 200 if ef < 12 else 382)
    assert knn_graph._calibrate_ef(stub, sample, truth, 0.98, boundary) == (12, 254 / 256, 254 / 256, None)
    # the rule is the constant's: with a gap of 0.02 the first ef both parts pass is kept
    boundary = np.arange(384) >= 256
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(knn_graph, "BOUNDARY_GAP", 0.02)
        stub = _LadderStub(384, lambda ef: 200 if ef < 12 else 382 if ef < 32 else 383)
        assert knn_graph._calibrate_ef(stub, sample, truth, 0.98, boundary) == (12, 126 / 128, 126 / 128, None)


def test_near_duplicates_do_not_make_the_default_list_as_long_as_the_data(caplog, monkeypatch):
    """Groups of ten points 1e-9 apart (tangent space), 10-D: some groups have no edge in from the rest of the
    graph, and a target of 1.0 is out of reach at every ``ef``. The calibration keeps a short list and warns,
    instead of a list of every node (a scan of the whole graph on every default search).

    Without the far queries' second stage: a left-out point of such a group is far from every point its walk
    finds, and the entry tree's upper pivots reach its group (the calibration then reaches 1.0)."""
    without_far_stage(monkeypatch)
    rng = np.random.default_rng(1)
    v = np.repeat(rng.standard_normal((500, 10)) * 2, 10, axis=0)
    v = v + 1e-9 * rng.standard_normal(v.shape)
    r = np.linalg.norm(v, axis=1, keepdims=True)
    X = np.tanh(r / 2) * v / r
    cx = conformal_factor(X)
    with caplog.at_level("WARNING", logger="hypann.graph.knn_graph"):
        index = HyperbolicGraphIndex(random_state=0, target_recall=1.0).build(X, cx, keep_order=True)
    assert index.calibration_recall_ < 1.0  # the fallback ran
    assert index.ef_ < 100 and index.calibration_recall_ >= 0.95
    assert "at every ef up to 5000" in caplog.text
    Q, cq = X[::50] + 0.0, cx[::50] + 0.0  # contiguous, as the library's scans take them
    _, true_d = brute_knn_delta(Q, cq, X, cx, K)
    assert _recall(index.search(Q, cq, K).deltas, true_d) >= 0.95


def test_nn_descent_finds_most_true_neighbours(mixture):
    X, cx, _, _ = mixture
    ids, deltas = nn_descent(X, cx, 16, n_trees=4, leaf_size=32, max_candidates=16, max_rounds=16, tol=1e-3, seed=0)
    sample = np.arange(0, len(X), 25)
    _, true_d = brute_knn_delta(X[sample], cx[sample], X, cx, 16)
    assert np.mean(deltas[sample] <= true_d[:, -1:] * (1 + 1e-12)) > 0.9
    assert np.all(ids[sample] != sample[:, None])
    np.testing.assert_array_equal(delta_to_candidates(X[sample], cx[sample], X, cx, ids[sample]), deltas[sample])


def test_nn_descent_round_limit_stops_it_there_and_a_higher_one_changes_nothing(caplog):
    """``max_rounds`` (default :data:`~hypann.graph.knn_graph.MAX_ROUNDS`) caps the rounds; where NN-descent stops
    on its tolerance first, any higher limit gives the same rows bit for bit."""
    X = make_family("hyperbolic_uniform", 3000, 24, seed=2)  # high intrinsic dimension: many rounds
    cx = conformal_factor(X)
    kw = dict(n_trees=2, leaf_size=16, max_candidates=8, tol=1e-3, seed=5)

    def rounds_run(limit):
        caplog.clear()
        with caplog.at_level("DEBUG", logger="hypann.graph.knn_graph"):
            rows, deltas = nn_descent(X, cx, 12, max_rounds=limit, **kw)
        return sum(r.getMessage().startswith("nn-descent round") for r in caplog.records), rows, deltas

    free, rows, deltas = rounds_run(64)
    assert 2 < free < 64, free  # stopped on the tolerance
    for limit in (free, free + 1, 64):
        got, got_rows, got_deltas = rounds_run(limit)
        assert got == free
        np.testing.assert_array_equal(got_rows, rows)
        np.testing.assert_array_equal(got_deltas, deltas)
    assert rounds_run(2)[0] == 2
    built = hypann.HyperbolicIndex(algorithm="graph", verbose=False).build(X[:300])
    assert built.algorithm_.max_rounds == built.algorithm_.graph_.max_rounds == knn_graph.MAX_ROUNDS


def test_partition_tree_leaves_partition_the_points(mixture):
    X = mixture[0]
    pivots, thresholds, children, ranges, order = build_tree(read_only(X), 32, np.uint64(5), False)
    np.testing.assert_array_equal(np.sort(order), np.arange(len(X)))
    leaves = np.flatnonzero(children[:, 0] < 0)
    sizes = ranges[leaves, 1] - ranges[leaves, 0]
    assert sizes.sum() == len(X) and sizes.max() <= 32 and sizes.min() >= 1
    # every indexed point descends to its own leaf (continuous data: no ties at a threshold)
    leaf_of = np.empty(len(X), dtype=np.int64)
    for v in leaves:
        leaf_of[order[ranges[v, 0] : ranges[v, 1]]] = v
    for i in range(0, len(X), 7):
        assert descend(pivots, thresholds, children, X, X[i]) == leaf_of[i]


@pytest.mark.parametrize("dtype", [np.float64, np.float32])
@pytest.mark.parametrize("dim", [6, 40, 103])
def test_partition_tree_with_split_sums_splits_every_node_at_its_median_key(dim, dtype):
    """The keys summed over four lanes: every node sends the points whose split key is at most its
    threshold left and the others right, half each; every point descends to its own leaf with the same
    sums (as a float64 query, also over float32 points); the forest builds these trees from 16-D on."""
    rng = np.random.default_rng(dim)
    X = (rng.uniform(-0.7, 0.7, (600, dim)) / np.sqrt(dim)).astype(dtype)
    pivots, thresholds, children, ranges, order = build_tree(read_only(X), 16, np.uint64(dim), True)
    np.testing.assert_array_equal(np.sort(order), np.arange(len(X)))
    for v in np.flatnonzero(children[:, 0] >= 0):
        a, b = X[pivots[v, 0]], X[pivots[v, 1]]
        keys = np.array([split_key(sq_dist_split(x, a), sq_dist_split(x, b)) for x in X])  # (x-a)^2 = (a-x)^2
        for side, child in enumerate(children[v]):
            inside = keys[order[ranges[child, 0]:ranges[child, 1]]]
            assert np.all(inside <= thresholds[v]) if side == 0 else np.all(inside >= thresholds[v])
        assert ranges[children[v, 0], 1] - ranges[children[v, 0], 0] == (ranges[v, 1] - ranges[v, 0]) // 2
    leaves = np.flatnonzero(children[:, 0] < 0)
    leaf_of = np.empty(len(X), dtype=np.int64)
    for v in leaves:
        leaf_of[order[ranges[v, 0]:ranges[v, 1]]] = v
    queries = X.astype(np.float64)
    reached = [descend(pivots, thresholds, children, X, queries[i], True) for i in range(len(X))]
    np.testing.assert_array_equal(reached, leaf_of)
    if dim >= SPLIT_SUMS_MIN_DIM:
        _, orders = build_forest(X, 16, np.array([dim], dtype=np.uint64))
        np.testing.assert_array_equal(orders[0], order)


def test_partition_tree_of_identical_points_is_one_leaf():
    X = np.tile([[0.3, -0.2, 0.1]], (100, 1))
    _, _, children, ranges, order = build_tree(read_only(X), 8, np.uint64(0), False)
    assert children.shape[0] == 1 and tuple(ranges[0]) == (0, 100)


def test_a_second_build_of_the_same_object_searches_its_own_arrays():
    """The kernels' arguments are gathered once per build (``_structure``): building the object again on
    other points (another dimension, count and layout) must search those, as a fresh object does."""
    rng = np.random.default_rng(8)
    first = rng.uniform(-0.5, 0.5, (700, 20)) / np.sqrt(20)
    second = rng.uniform(-0.5, 0.5, (400, 6)) / np.sqrt(6)
    index = HyperbolicGraphIndex(random_state=1).build(first, conformal_factor(first))
    index.search(first[:3], conformal_factor(first[:3]), 5)
    index.search_coordinates(first[:1], 1.0, 5)
    index.build(second, conformal_factor(second), keep_order=True)
    fresh = HyperbolicGraphIndex(random_state=1).build(second, conformal_factor(second), keep_order=True)
    for q in (second[:40], second[:1]):
        got, want = index.search(q, conformal_factor(q), 5), fresh.search(q, conformal_factor(q), 5)
        np.testing.assert_array_equal(got.ids, want.ids)
        np.testing.assert_array_equal(got.deltas, want.deltas)
    got, want = index.search_coordinates(second[:1], 1.0, 5), fresh.search_coordinates(second[:1], 1.0, 5)
    np.testing.assert_array_equal(got.ids, want.ids)


def test_tiny_inputs():
    X = np.array([[0.1, 0.0], [0.0, 0.2], [-0.3, 0.1]])
    cx = conformal_factor(X)
    index = HyperbolicGraphIndex().build(X, cx)
    res = index.search(X, cx, 5)
    assert res.ids.shape == (3, 5) and np.all(res.ids[:, 3:] == -1)
    np.testing.assert_array_equal(res.ids[:, 0], [0, 1, 2])
    one = HyperbolicGraphIndex().build(X[:1], cx[:1]).search(X, cx, 1)
    np.testing.assert_array_equal(one.ids[:, 0], 0)
    copies = np.tile(X[:1], (50, 1))
    res = HyperbolicGraphIndex().build(copies, conformal_factor(copies)).search(X[:1], cx[:1], 10)
    assert np.all(res.deltas == 0.0) and len(set(res.ids[0].tolist())) == 10


def test_errors_name_the_bad_value(mixture):
    X, cx, Q, cq = mixture
    with pytest.raises(ValueError, match=r"max_degree must be >= n_neighbors \(24\), got max_degree=8"):
        HyperbolicGraphIndex(max_degree=8).build(X, cx)
    with pytest.raises(ValueError, match="n_neighbors must be a positive integer, got n_neighbors=0"):
        HyperbolicGraphIndex(n_neighbors=0).build(X, cx)
    with pytest.raises(ValueError, match=r"target_recall must be <= 1.0, got target_recall=1.5"):
        HyperbolicGraphIndex(target_recall=1.5).build(X, cx)
    with pytest.raises(ValueError, match="random_state must be a non-negative integer, got random_state=-1"):
        HyperbolicGraphIndex(random_state=-1).build(X, cx)
    with pytest.raises(ValueError, match="not built yet"):
        HyperbolicGraphIndex().search(Q, cq, 1)
    index = HyperbolicGraphIndex(ef=8).build(X[:200], cx[:200])
    with pytest.raises(ValueError, match="ef must be a positive integer, got ef=0"):
        index.search(Q, cq, 1, ef=0)
    with pytest.raises(ValueError, match="L must be a positive integer, got L=0"), pytest.warns(DeprecationWarning):
        index.search(Q, cq, 1, L=0)
    with pytest.raises(ValueError, match=r"budget must be None or a non-negative integer, got budget=1.5"):
        index.search(Q, cq, 1, budget=1.5)
    with pytest.raises(ValueError, match=r"queries must have shape \(m, 10\)"):
        index.search(Q[:, :3], cq, 1)
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['R'\] for search with algorithm 'graph'"):
        hypann.HyperbolicIndex(algorithm="graph").build(X[:300]).search(Q, k=1, R=3)


def test_nn_descent_ids_are_int32_and_the_result_does_not_depend_on_the_id_type(mixture):
    X, cx, _, _ = mixture
    kw = dict(n_trees=4, leaf_size=32, max_candidates=12, max_rounds=4, tol=1e-3, seed=3)
    ids32, d32 = nn_descent(X, cx, 12, **kw)
    ids64, d64 = nn_descent(X, cx, 12, index_dtype=np.int64, **kw)
    assert ids32.dtype == np.int32 and ids64.dtype == np.int64
    np.testing.assert_array_equal(ids32, ids64)
    np.testing.assert_array_equal(d32, d64)
    assert np.all(np.diff(d32, axis=1) >= 0)  # rows ascending by the exact delta
    only_ids, none = nn_descent(X, cx, 12, return_deltas=False, **kw)
    assert none is None
    np.testing.assert_array_equal(np.sort(only_ids, axis=1), np.sort(ids32, axis=1))


def test_forest_id_type_must_hold_the_point_count(mixture):
    X = mixture[0]
    with pytest.raises(ValueError, match=r"index_dtype must hold ids up to n=5000, got index_dtype=int8$"):
        build_forest(X, 32, np.array([1, 2], dtype=np.uint64), np.int8)
    leaf_ranges, orders = build_forest(X, 32, np.array([1, 2], dtype=np.uint64))
    assert leaf_ranges.dtype == orders.dtype == np.int32
    for t in range(2):
        np.testing.assert_array_equal(np.sort(orders[t]), np.arange(len(X)))
        assert np.all(orders[t][leaf_ranges[t, :, 0]] >= 0)
        assert np.all(leaf_ranges[t, :, 1] - leaf_ranges[t, :, 0] <= 32)


@pytest.mark.parametrize("leaf_size", [1, 2, 3, 8, 33])
@pytest.mark.parametrize("n", [1, 2, 7, 100, 513])
def test_partition_tree_nodes_stay_within_the_proven_capacity(n, leaf_size):
    rng = np.random.default_rng(n * 100 + leaf_size)
    X = rng.uniform(-0.5, 0.5, (n, 3))
    X[: n // 3] = X[0]  # a block of identical points: a leaf of any size
    _, _, children, ranges, order = build_tree(read_only(X), leaf_size, np.uint64(leaf_size), False)
    assert children.shape[0] <= node_capacity(n, leaf_size)
    leaves = children[:, 0] < 0
    sizes = ranges[leaves, 1] - ranges[leaves, 0]
    assert sizes.sum() == n and (children.shape[0] == 1 or sizes.min() >= max(1, (leaf_size + 1) // 2))


def _reference_search_graph(X, cx, rows, bridges, D, max_copies):
    """The search graph's definition in plain Python: bridges, then k-NN row and reverse edges merged by delta;
    with the count of the bridges at the front of each row."""
    n = len(X)
    d = lambda a, b: delta_to_candidates(X[a : a + 1], cx[a : a + 1], X, cx, np.array([[b]]))[0, 0]  # noqa: E731
    rev = [[] for _ in range(n)]
    for p in range(n):
        for v in rows[p]:
            if v >= 0:
                rev[v].append((d(p, v), p))
    out = np.full((n, D), -1)
    n_first = np.zeros(n, dtype=np.uint8)
    for p in range(n):
        fwd = sorted(((d(p, v), j, v) for j, v in enumerate(rows[p]) if v >= 0))
        fwd = [(dv, v) for dv, _, v in fwd]
        back = sorted(rev[p], key=lambda e: e[0])[:D]  # stable: smaller p first
        merged, copies = list(dict.fromkeys(v for v in bridges[p] if v >= 0))[:D], 0
        n_first[p] = len(merged)
        a = b = 0
        while len(merged) < D and (a < len(fwd) or b < len(back)):
            if a < len(fwd) and (b == len(back) or fwd[a][0] <= back[b][0]):
                dv, v = fwd[a]
                a += 1
            else:
                dv, v = back[b]
                b += 1
            if (dv == 0.0 and copies >= max_copies) or v in merged:
                continue
            copies += dv == 0.0
            merged.append(v)
        out[p, : len(merged)] = merged
    return out, n_first


def test_search_graph_matches_its_definition():
    rng = np.random.default_rng(7)
    X = rng.uniform(-0.4, 0.4, (60, 3))
    X[10:14] = X[9]  # copies: at most max_copies neighbours at delta 0
    cx = conformal_factor(X)
    rows, _ = nn_descent(X, cx, 6, n_trees=2, leaf_size=8, max_candidates=6, max_rounds=3, tol=1e-3, seed=1)
    bridges = np.full((60, 2), -1, dtype=rows.dtype)
    bridges[::7, 0] = np.arange(0, 60, 7)[::-1]
    bridges[5, 1] = bridges[5, 0] = 3  # a repeated bridge is one edge
    want, want_first = _reference_search_graph(X, cx, rows, bridges, 9, 2)
    got, got_first = _search_graph(read_only(X), read_only(cx), rows, bridges, 9, 2)  # the build's types
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_first, want_first)
    assert want_first[5] == 1 and want_first.max() == 1
    start, src = _reverse_lists(rows, 20, 35)  # one block of targets
    assert start[0] == 0 and start[-1] == src.size == np.count_nonzero((rows >= 20) & (rows < 35))
    for t, v in enumerate(range(20, 35)):
        np.testing.assert_array_equal(src[start[t] : start[t + 1]], np.flatnonzero((rows == v).any(axis=1)))


def test_search_graph_in_blocks_equals_one_block(monkeypatch):
    X = np.random.default_rng(8).uniform(-0.4, 0.4, (3000, 4))
    cx = conformal_factor(X)
    rows, _ = nn_descent(X, cx, 8, n_trees=2, leaf_size=16, max_candidates=8, max_rounds=3, tol=1e-3, seed=2)
    none = np.full((3000, 0), -1, dtype=rows.dtype)
    X, cx = read_only(X), read_only(cx)  # as the build passes them (one compiled type)
    blocked = _search_graph(X, cx, rows, none, 12, 6)[0]  # 3 blocks of 1024 points
    monkeypatch.setattr(knn_graph, "_REVERSE_BLOCKS", 1)
    monkeypatch.setattr(knn_graph, "_CHUNK", 4096)
    np.testing.assert_array_equal(_search_graph(X, cx, rows, none, 12, 6)[0], blocked)


def test_candidate_lists_do_not_depend_on_the_blocks(mixture):
    X, cx, _, _ = mixture
    rows, _ = nn_descent(X, cx, 10, n_trees=2, leaf_size=16, max_candidates=10, max_rounds=1, tol=1e-3, seed=4)
    flags = np.random.default_rng(3).random(rows.shape) < 0.5
    out = []
    for blocks in (1, 3, 64):
        f = flags.copy()
        out.append((*knn_graph._candidates(rows, f, 6, knn_graph._round_base(4, 2), blocks), f))
    for got in out[1:]:
        for a, b in zip(out[0], got):
            np.testing.assert_array_equal(a, b)
    new_i, old_i, f = out[0]
    assert np.all((new_i >= 0).sum(axis=1) <= 6) and np.any(new_i[:, -1] >= 0)  # some lists were sampled down
    assert np.array_equal(f, flags & ~np.array([[q in new_i[p] for q in rows[p]] for p in range(len(rows))]))


def _candidate_lists_by_hand(rows, flags, C, base):
    """Plain-Python candidate lists: of each point's forward and reverse entries of a flag, each id
    once, the C with the smallest pair priority, ascending (-1 padded)."""
    n = len(rows)
    offers = [[set(), set()] for _ in range(n)]
    for p in range(n):
        for j, q in enumerate(rows[p]):
            if q < 0:
                break
            side = 0 if flags[p, j] else 1
            offers[p][side].add(int(q))
            offers[q][side].add(p)
    lists = []
    for side in range(2):
        out = np.full((n, C), -1, dtype=rows.dtype)
        for p in range(n):
            chosen = sorted(offers[p][side], key=lambda q: int(knn_graph._pair_priority(base, p, q)))[:C]
            out[p, :len(chosen)] = chosen
        lists.append(out)
    return lists


@pytest.mark.parametrize("blocks", [1, 2, 7])
def test_candidate_lists_are_the_smallest_priorities(blocks):
    # hubs with more offers than RANKED_OFFERS (kept by insertion), short rows (-1 ends), an id in both a
    # point's row and its reverse entries (counted once), and lists sampled down to C
    rng = np.random.default_rng(5)
    n, K, C = 400, 8, 5
    rows = np.full((n, K), -1, dtype=np.int32)
    for p in range(n):
        length = int(rng.integers(1, K + 1))
        hubs = [h for h in (0, 1) if h != p and p % 3][:length]  # points 0 and 1 are in most rows
        picks = rng.choice(np.setdiff1d(np.arange(n), [p, 0, 1]), length - len(hubs), replace=False)
        rows[p, :length] = np.concatenate([hubs, picks])  # rows hold each id once, as NN-descent's do
    rows[0, :K] = np.arange(1, K + 1)  # 0 and 1 link each other (an entry met from both sides)
    flags = rng.random((n, K)) < 0.5
    base = knn_graph._round_base(9, 1)
    assert (rows == 0).sum() > knn_graph.RANKED_OFFERS
    f = flags.copy()
    new_i, old_i = knn_graph._candidates(rows, f, C, base, blocks)
    want_new, want_old = _candidate_lists_by_hand(rows, flags, C, base)
    np.testing.assert_array_equal(new_i, want_new)
    np.testing.assert_array_equal(old_i, want_old)
    in_new = np.array([[q >= 0 and q in new_i[p] for q in rows[p]] for p in range(n)])
    assert np.array_equal(f, flags & ~in_new)  # forward entries taken into new lists are flagged old


def test_every_way_to_build_gives_the_build_kernels_one_type_per_dtype(monkeypatch):
    """The build's kernels get the points and their factors as read-only views whichever way the build is asked
    for (writable or read-only input, ``exact``, the bare graph with ``keep_order``, float32 storage) and the
    exact scan's codes of the same points likewise: numba compiles a kernel once per type of its arguments,
    and each other type costs seconds of compilation at first use."""
    from numba import typeof

    from hypann.geometry import gram_scan, screen_codes
    from hypann.graph import long_edges

    seen = {}

    def spy(module, name):
        kernel = getattr(module, name)

        def call(*args):
            arrays = tuple(typeof(a) for a in args if isinstance(a, np.ndarray))
            seen.setdefault((name, arrays[0].dtype.name), set()).add(arrays)
            return kernel(*args)

        monkeypatch.setattr(module, name, call)

    for module, name in ((knn_graph, "_init_graph"), (knn_graph, "_refine"), (knn_graph, "relative_neighbourhood_rows"),
                         (long_edges, "_long_rows"),
                         (screen_codes, "_code_rows"), (gram_scan, "_fold_block"),
                         (gram_scan, "_fold_block_serial")):
        spy(module, name)
    X = make_family("gaussian_mixture", 700, knn_graph.SCREEN_MIN_DIM + 4, seed=2)
    frozen = X.copy()
    frozen.flags.writeable = False
    for data, settings in ((X, {}), (frozen, {}), (X, dict(exact=True)), (X, dict(storage="float32"))):
        index = hypann.HyperbolicIndex(algorithm="graph", random_state=0, verbose=False, **settings).build(data)
        index.search(X[:1], 5)
    HyperbolicGraphIndex(random_state=0).build(X.copy(), conformal_factor(X), keep_order=True)
    for storage in ("float64", "float32"):  # a one-query scan reads the points' codes
        hypann.HyperbolicIndex(algorithm="brute", storage=storage, verbose=False).build(X).search(X[:1], 5)
    names = {name for name, _ in seen}
    assert names >= {"_init_graph", "_refine", "relative_neighbourhood_rows", "_long_rows", "_code_rows"}
    assert names & {"_fold_block", "_fold_block_serial"}  # the long edges' scan (which of them: the threads)
    assert {dtype for _, dtype in seen} == {"float64", "float32"}
    for (name, dtype), types in seen.items():
        assert len(types) == 1, (name, dtype, types)
