"""Tests of the Vamana baseline with the Poincare distance (hypann.graph.vamana)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest

from hypann.datasets.synthetic import hierarchical_tree
from hypann.geometry._kernels import conformal_factor, delta_to_candidates
from hypann.graph import VamanaIndex
from hypann.graph.vamana import _robust_prune
from hypann.metrics import recall
from tests.conftest import ball_points, brute_knn_delta

# numba-kernel tests: `make test` runs them again under NUMBA_BOUNDSCHECK=1 (pytest -m kernels)
pytestmark = pytest.mark.kernels

K = 10


def _recall(found_d, true_d, k=K):
    """Recall@k by distance threshold (on deltas), so ties (duplicates) do not matter."""
    return recall(found_d, true_d, k, epsilon=1e-12)


def _split(X, m, seed):
    perm = np.random.default_rng(seed).permutation(len(X))
    Q, D = X[perm[:m]], X[perm[m:]]
    return np.ascontiguousarray(D), conformal_factor(D), np.ascontiguousarray(Q), conformal_factor(Q)


@pytest.fixture(scope="module")
def tree_data():
    return _split(hierarchical_tree(2100, 10, seed=3), 100, seed=1)


@pytest.fixture(scope="module")
def uniform_data():
    rng = np.random.default_rng(4)
    return _split(ball_points(rng, 2100, 10, min_conformal=1e-6), 100, seed=2)


@pytest.fixture(scope="module")
def tree_index(tree_data):
    X, cx, _, _ = tree_data
    return VamanaIndex(R=10, L=10, alpha=1.5, random_state=0).build(X, cx)


@pytest.mark.parametrize("data", ["tree_data", "uniform_data"])
def test_recall_approaches_one_with_large_list_or_budget(data, request):
    X, cx, Q, cq = request.getfixturevalue(data)
    index = VamanaIndex(R=10, L=10, alpha=1.5, random_state=0).build(X, cx)
    _, true_d = brute_knn_delta(Q, cq, X, cx, K)
    big_list = index.search(Q, cq, K, ef=150)
    assert _recall(big_list.deltas, true_d) >= 0.98
    big_budget = index.search(Q, cq, K, ef=20, budget=1000)
    assert _recall(big_budget.deltas, true_d) >= 0.98
    # reported deltas are the true deltas of the reported ids
    for res in (big_list, big_budget):
        np.testing.assert_array_equal(delta_to_candidates(Q, cq, X, cx, res.ids), res.deltas)


def test_graph_shape_degree_and_no_self_loops(tree_index, tree_data):
    X = tree_data[0]
    nb = tree_index.neighbors_
    assert nb.shape == (len(X), 10) and nb.dtype == np.int32
    for i, row in enumerate(nb):
        valid = row[row >= 0]
        assert np.all(row[len(valid) :] == -1)  # padding only at the end
        assert len(valid) >= 1 and i not in valid and len(set(valid.tolist())) == len(valid)
    assert 0 <= tree_index.medoid_ < len(X)


def test_build_and_search_are_deterministic(tree_data, tree_index):
    X, cx, Q, cq = tree_data
    again = VamanaIndex(R=10, L=10, alpha=1.5, random_state=0).build(X, cx)
    np.testing.assert_array_equal(again.neighbors_, tree_index.neighbors_)
    other = VamanaIndex(R=10, L=10, alpha=1.5, random_state=1).build(X, cx)
    assert not np.array_equal(other.neighbors_, tree_index.neighbors_)
    a = tree_index.search(Q, cq, K, budget=300, random_state=5)
    b = tree_index.search(Q, cq, K, budget=300, random_state=5)
    for x, y in zip(a, b):
        np.testing.assert_array_equal(x, y)


def test_budget_is_used_exactly_and_never_exceeded(tree_index, tree_data):
    X, cx, Q, cq = tree_data
    n = len(X)
    for budget in (1, 37, 100, 500):
        res = tree_index.search(Q, cq, K, budget=budget)
        # restarts continue until the budget is used: no overshoot, no slack
        np.testing.assert_array_equal(res.samples, budget)
    per_query = np.arange(len(Q)) * 7
    np.testing.assert_array_equal(tree_index.search(Q, cq, 3, budget=per_query).samples, per_query)
    zero = tree_index.search(Q, cq, K, budget=0)
    assert np.all(zero.samples == 0) and np.all(zero.ids == -1)
    # a budget of n evaluates every point once: the answer is exact
    full = tree_index.search(Q, cq, K, budget=n + 50)
    np.testing.assert_array_equal(full.samples, n)
    _, true_d = brute_knn_delta(Q, cq, X, cx, K)
    np.testing.assert_array_equal(full.deltas, true_d)


def test_larger_budget_never_hurts_on_average(tree_index, tree_data):
    X, cx, Q, cq = tree_data
    _, true_d = brute_knn_delta(Q, cq, X, cx, K)
    recalls = [_recall(tree_index.search(Q, cq, K, budget=b).deltas, true_d) for b in (20, 100, 400, 2000)]
    assert recalls == sorted(recalls)
    assert recalls[-1] == 1.0


def test_single_greedy_search_without_budget(tree_index, tree_data):
    X, cx, Q, cq = tree_data
    res = tree_index.search(Q, cq, K)
    assert np.all(res.samples < len(X) // 4)  # a graph walk, not a scan
    assert np.all(res.ids >= 0)
    assert np.all(res.deltas[:, 1:] >= res.deltas[:, :-1])
    np.testing.assert_array_equal(delta_to_candidates(Q, cq, X, cx, res.ids), res.deltas)


def test_robust_prune_keeps_alpha_diverse_neighbours():
    rng = np.random.default_rng(8)
    X = ball_points(rng, 300, 4, min_conformal=1e-4)
    cx = conformal_factor(X)
    alpha, R = 1.3, 12
    cand = np.concatenate([rng.permutation(300)[:120], [0, 0, 5]]).astype(np.int64)  # p and repeats
    mark = np.zeros(300, dtype=np.int64)
    out = np.empty(R, dtype=np.int32)
    deg = _robust_prune(0, cand, len(cand), X, cx, alpha, R, mark, 1, out)
    chosen = out[:deg].astype(np.int64)
    assert 1 <= deg <= R and np.all(out[deg:] == -1) and 0 not in chosen

    def dist(i, j):
        d = delta_to_candidates(X[i : i + 1], cx[i : i + 1], X, cx, np.array([[j]]))[0, 0]
        return 2 * np.arcsinh(np.sqrt(d))

    d0 = np.array([dist(0, c) for c in chosen])
    assert np.all(np.diff(d0) >= 0)  # chosen nearest first
    for b in range(deg):  # no chosen point is dominated by an earlier chosen one
        for a in range(b):
            assert alpha * dist(chosen[a], chosen[b]) > d0[b]
    if deg < R:  # every dropped candidate is dominated by a chosen one
        for c in set(cand.tolist()) - set(chosen.tolist()) - {0}:
            assert any(alpha * dist(s, c) <= dist(0, c) for s in chosen)


def test_save_load_and_pickle_roundtrip(tree_index, tree_data, tmp_path):
    _, _, Q, cq = tree_data
    np.savez(tmp_path / "vamana.npz", **tree_index.to_arrays())
    with np.load(tmp_path / "vamana.npz") as f:
        loaded = VamanaIndex.from_arrays(dict(f))
    again = pickle.loads(pickle.dumps(tree_index))
    want = tree_index.search(Q, cq, K, budget=200)
    for other in (loaded, again):
        got = other.search(Q, cq, K, budget=200)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert (loaded.R, loaded.L, loaded.alpha) == (10, 10, 1.5)


def test_state_without_points_refers_to_the_given_ones_and_old_copies_must_match(tree_index, tree_data):
    D, cd, Q, cq = tree_data
    shared = VamanaIndex.from_arrays(tree_index.to_arrays(include_points=False), points=D, conformal=cd)
    assert shared.points_ is D and shared.conformal_ is cd  # no copy
    for a, b in zip(shared.search(Q, cq, K), tree_index.search(Q, cq, K)):
        np.testing.assert_array_equal(a, b)
    with pytest.raises(ValueError, match=r"VamanaIndex state holds no points: give the index's points"):
        VamanaIndex.from_arrays(tree_index.to_arrays(include_points=False))
    old = tree_index.to_arrays()  # files written before: the graph's own copy, compared with the index's
    VamanaIndex.from_arrays(old, points=D, conformal=cd)
    nudged = D.copy()
    nudged[4, 1] += 1e-9
    with pytest.raises(ValueError, match=r"VamanaIndex state 'points': the graph's copy of the points differs"):
        VamanaIndex.from_arrays(old, points=nudged, conformal=cd)
    with pytest.raises(ValueError, match=r"VamanaIndex state 'conformal': conformal factors 1-\|x\|\^2 must be in"):
        VamanaIndex.from_arrays(tree_index.to_arrays(include_points=False), points=D, conformal=-cd)


def test_tiny_inputs():
    X = np.array([[0.1, 0.0], [0.0, 0.2], [-0.3, 0.1]])
    cx = conformal_factor(X)
    index = VamanaIndex(R=5, L=4).build(X, cx)
    res = index.search(X, cx, 5)
    assert res.ids.shape == (3, 5) and np.all(res.ids[:, 3:] == -1)
    np.testing.assert_array_equal(res.ids[:, 0], [0, 1, 2])
    one = VamanaIndex().build(X[:1], cx[:1]).search(X, cx, 1)
    np.testing.assert_array_equal(one.ids[:, 0], 0)


def test_errors_name_the_bad_value(tree_data):
    X, cx, Q, cq = tree_data
    with pytest.raises(ValueError, match="alpha must be >= 1.0"):
        VamanaIndex(alpha=0.5).build(X, cx)
    with pytest.raises(ValueError, match="R must be a positive integer"):
        VamanaIndex(R=0).build(X, cx)
    with pytest.raises(ValueError, match="not built yet"):
        VamanaIndex().search(Q, cq, 1)
    index = VamanaIndex(R=4, L=4).build(X[:50], cx[:50])
    with pytest.raises(ValueError, match="L must be a positive integer"), pytest.warns(DeprecationWarning):
        index.search(Q, cq, 1, L=0)
    with pytest.raises(ValueError, match="ef must be a positive integer, got ef=0"):
        index.search(Q, cq, 1, ef=0)
    with pytest.raises(ValueError, match="budget must be None, an integer"):
        index.search(Q, cq, 1, budget=1.5)
    with pytest.raises(ValueError, match=r"queries must have shape \(m, 10\)"):
        index.search(Q[:, :3], cq, 1)


def test_search_list_size_is_ef_and_l_is_a_deprecated_alias(tree_index, tree_data):
    X, cx, Q, cq = tree_data
    new = tree_index.search(Q, cq, K, ef=30)
    with pytest.warns(DeprecationWarning, match=r"L is deprecated for the Vamana search; use ef"):
        old = tree_index.search(Q, cq, K, L=30)
    np.testing.assert_array_equal(old.ids, new.ids)
    with pytest.raises(ValueError, match=r"give ef or its deprecated alias L, not both \(ef=30, L=30\)"):
        tree_index.search(Q, cq, K, ef=30, L=30)


def test_index_search_takes_ef_and_warns_for_l(tree_data):
    import hypann

    X, _, Q, _ = tree_data
    index = hypann.HyperbolicIndex(algorithm="vamana", R=6, L=8, random_state=0).build(X)
    new = index.search(Q, K, ef=25)
    with pytest.warns(DeprecationWarning, match=r"L is deprecated for algorithm 'vamana'; use ef"):
        old = index.search(Q, K, L=25)
    np.testing.assert_array_equal(old.indices, new.indices)
    with pytest.raises(ValueError, match=r"give ef or its deprecated alias L, not both \(ef=25, L=25\)"):
        index.search(Q, K, ef=25, L=25)
