"""Tests of the paper's kd-tree oracle (hypann.search.hyperbolic_kdtree)."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypann.geometry._kernels import conformal_factor, delta_to_candidates
from hypann.oracles.base import EuclideanOracle
from hypann.search.hyperbolic_kdtree import _STATE, HyperbolicKDTree, HyperbolicKDTreeOracle
from tests.conftest import ball_points, brute_knn_delta

# numba-kernel tests: `make test` runs them again under NUMBA_BOUNDSCHECK=1 (pytest -m kernels)
pytestmark = pytest.mark.kernels


def _data(seed, n, d, *, n_dup=0, min_conformal=1e-12):
    """Ball points down to ``1-|x|^2 = min_conformal``, with ``n_dup`` repeated rows."""
    rng = np.random.default_rng(seed)
    X = ball_points(rng, n, d, min_conformal=min_conformal)
    if n_dup:
        X[rng.integers(0, n, n_dup)] = X[rng.integers(0, n, n_dup)]
    return np.ascontiguousarray(X), conformal_factor(X)


def _queries(seed, X, m):
    """Half fresh ball points, half copies / tiny perturbations of data points."""
    rng = np.random.default_rng(seed + 1)
    d = X.shape[1]
    fresh = ball_points(rng, m - m // 2, d)
    near = X[rng.integers(0, len(X), m // 2)].copy()
    near[::2] *= 1.0 - 1e-9  # slightly inside, still near the boundary
    Q = np.ascontiguousarray(np.vstack([fresh, near]))
    return Q, conformal_factor(Q)


def _euclid_brute(C, X, k):
    sq = np.einsum("mnd,mnd->mn", C[:, None, :] - X[None], C[:, None, :] - X[None])
    order = np.argsort(sq, axis=1, kind="stable")[:, :k]
    return np.take_along_axis(sq, order, 1), order


# --------------------------------------------------------------------------- search_exact


@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 400),
    d=st.sampled_from([2, 3, 10]),
    k=st.integers(1, 12),
    leaf=st.sampled_from([1, 4, 16]),
    dup=st.integers(0, 40),
)
def test_search_exact_matches_brute_force(seed, n, d, k, leaf, dup):
    X, cx = _data(seed, n, d, n_dup=min(dup, n))
    Q, cq = _queries(seed, X, 12)
    tree = HyperbolicKDTree(leaf_size=leaf).build(X, cx)
    ids, deltas, samples = tree.search_exact(Q, cq, k)
    ref_ids, ref_d = brute_knn_delta(Q, cq, X, cx, k)
    # Same k smallest delta values, bit for bit (ties may pick other ids).
    np.testing.assert_array_equal(deltas, ref_d)
    # Each returned id really has the reported delta; no id twice in a row.
    np.testing.assert_array_equal(delta_to_candidates(Q, cq, X, cx, ids), deltas)
    for row in ids:
        valid = row[row >= 0]
        assert len(set(valid.tolist())) == len(valid)
    assert np.all((ids >= 0) == np.isfinite(deltas))
    assert np.all(samples <= n) and np.all(samples >= min(k, n))


@pytest.mark.parametrize("storage", [np.float64, np.float32])
@pytest.mark.parametrize("d", [1, 8, 9, 16, 33, 64])
@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 400),
    k=st.integers(1, 12),
    leaf=st.sampled_from([1, 3, 5, 16]),
    removed_share=st.sampled_from([0.0, 0.0, 0.3]),
)
def test_search_exact_early_abandoning_is_exact_across_chunks(seed, n, d, k, leaf, storage, removed_share):
    # The leaf scan runs four points at a time (below LANES_MIN_DIM = 16; from there on one point
    # in four lanes, tested every 16 coordinates) and the child bounds two at a time, testing the
    # partial sums every 8 coordinates: dimensions below, at and across those widths, leaves
    # not a multiple of four, float32 rows, removed points and seeds must all give brute force.
    # float32 rows stay inside the ball only down to 1-|x|^2 of about 1e-7: keep them above
    X, cx = _data(seed, n, d, n_dup=n // 6, min_conformal=1e-12 if storage is np.float64 else 1e-5)
    Xs = X.astype(storage)
    cx = conformal_factor(Xs.astype(np.float64))
    Q, cq = _queries(seed, Xs.astype(np.float64), 10)
    rng = np.random.default_rng(seed)
    removed = rng.random(n) < removed_share
    tree = HyperbolicKDTree(leaf_size=leaf).build(Xs, cx)
    keep = np.flatnonzero(~removed)
    ref_ids, ref_d = brute_knn_delta(Q, cq, np.ascontiguousarray(Xs[keep], dtype=np.float64), cx[keep], k)
    seeds = np.full((len(Q), 3), -1)  # seeds are the caller's: none of them removed
    if len(keep):
        seeds[:, 1:] = keep[rng.integers(0, len(keep), (len(Q), 2))]
    for options in ({}, {"seed_ids": seeds}):
        ids, deltas, samples = tree.search_exact(Q, cq, k, removed=removed if removed.any() else None, **options)
        np.testing.assert_array_equal(deltas, ref_d)
        np.testing.assert_array_equal(np.isin(ids[ids >= 0], keep), True)
        np.testing.assert_array_equal(delta_to_candidates(Q, cq, Xs.astype(np.float64), cx, ids), deltas)


def test_search_exact_many_nodes_grows_the_heap():
    # leaf_size=1 on 5,000 points: ~10,000 nodes, far more than the heap's initial 64 slots.
    X, cx = _data(5, 5000, 3)
    Q, cq = _queries(5, X, 30)
    ids, deltas, samples = HyperbolicKDTree(leaf_size=1).build(X, cx).search_exact(Q, cq, 50)
    _, ref_d = brute_knn_delta(Q, cq, X, cx, 50)
    np.testing.assert_array_equal(deltas, ref_d)
    np.testing.assert_array_equal(delta_to_candidates(Q, cq, X, cx, ids), deltas)
    assert np.all(samples < 5000)


@pytest.mark.parametrize(
    "n, d, scale",
    [
        (20000, 20, 0.9 / np.sqrt(20)),  # uniform cube scaled into the ball: crashed the process before
        (20000, 16, None),  # uniform in a ball of radius 0.5: crashed the process before
        (3000, 64, None),  # many open nodes per query: the heap grows several times
    ],
)
def test_search_exact_uniform_high_dim_regression(n, d, scale):
    # Regression: the best-first heap, grown inline in the parallel query loop,
    # was written past its end on uniform 16-20-D data (segfault; IndexError
    # under NUMBA_BOUNDSCHECK=1).
    rng = np.random.default_rng(0)
    if scale is not None:
        X = scale * rng.uniform(-1, 1, (n, d))
    else:
        g = rng.normal(size=(n, d))
        X = 0.5 * g / np.linalg.norm(g, axis=1, keepdims=True) * rng.uniform(0, 1, (n, 1)) ** (1 / d)
    X = np.ascontiguousarray(X)
    cx = conformal_factor(X)
    Q, cq = X[:40], cx[:40]
    ids, deltas, samples = HyperbolicKDTree().build(X, cx).search_exact(Q, cq, 10)
    _, ref_d = brute_knn_delta(Q, cq, X, cx, 10)
    np.testing.assert_array_equal(deltas, ref_d)
    np.testing.assert_array_equal(ids[:, 0], np.arange(40))
    np.testing.assert_array_equal(delta_to_candidates(Q, cq, X, cx, ids), deltas)


def test_knn_tracking_stack_grows_when_the_stated_depth_is_too_small():
    # The depth-first stack is sized depth+2 (enough for trees built here); a
    # smaller stated size must grow instead of overflowing.
    from hypann.search.hyperbolic_kdtree import _budget_array, _knn_tracking

    X, cx = _data(3, 2000, 3)
    tree = HyperbolicKDTree(leaf_size=2).build(X, cx)
    C = X[:20]
    out = _knn_tracking(
        tree.points_, tree.conformal_, tree.indices_, tree.lo_, tree.hi_, tree.left_, tree.right_,
        tree.start_, tree.end_, 1, C, 5, C, cx[:20], _budget_array(None, 20), True,
    )
    ref_sq, _ = _euclid_brute(C, X, 5)
    np.testing.assert_allclose(out[1], ref_sq, rtol=1e-12, atol=0)


def test_search_exact_near_boundary_and_duplicates():
    # Clusters of near-identical points at 1-|x|^2 ~ 1e-12, plus exact duplicates.
    rng = np.random.default_rng(7)
    d = 5
    base = ball_points(rng, 30, d, min_conformal=1e-12, radial_power=0.01)
    X = np.repeat(base, 20, axis=0) * (1.0 - rng.uniform(0, 1e-12, (600, 1)))
    X[::7] = X[3]
    cx = conformal_factor(X)
    assert cx.min() < 1e-11
    Q = base[rng.integers(0, 30, 25)] * (1.0 - 3e-13)
    cq = conformal_factor(Q)
    for k in (1, 7, 30):
        ids, deltas, _ = HyperbolicKDTree(leaf_size=4).build(X, cx).search_exact(Q, cq, k)
        _, ref_d = brute_knn_delta(Q, cq, X, cx, k)
        np.testing.assert_array_equal(deltas, ref_d)
        np.testing.assert_array_equal(delta_to_candidates(Q, cq, X, cx, ids), deltas)


def test_search_exact_k_larger_than_n_pads():
    X, cx = _data(3, 5, 3)
    ids, deltas, samples = HyperbolicKDTree(leaf_size=2).build(X, cx).search_exact(X, cx, 8)
    assert ids.shape == (5, 8)
    assert np.all(ids[:, 5:] == -1) and np.all(np.isinf(deltas[:, 5:]))
    assert sorted(ids[0, :5].tolist()) == list(range(5))
    np.testing.assert_array_equal(samples, 5)


def test_search_exact_budget_is_a_hard_limit():
    X, cx = _data(11, 3000, 4)
    Q, cq = _queries(11, X, 40)
    tree = HyperbolicKDTree(leaf_size=8).build(X, cx)
    free = tree.search_exact(Q, cq, 5)
    budget = np.maximum(free.samples // 2, 1)
    capped = tree.search_exact(Q, cq, 5, budget=budget)
    np.testing.assert_array_equal(capped.samples, budget)
    # What it returns is real: the ids carry the reported deltas, never better than the truth.
    ok = capped.ids >= 0
    np.testing.assert_array_equal(delta_to_candidates(Q, cq, X, cx, capped.ids)[ok], capped.deltas[ok])
    assert np.all(capped.deltas >= free.deltas)
    # A budget that is never reached changes nothing.
    same = tree.search_exact(Q, cq, 5, budget=free.samples)
    np.testing.assert_array_equal(same.deltas, free.deltas)
    np.testing.assert_array_equal(same.samples, free.samples)
    zero = tree.search_exact(Q, cq, 5, budget=0)
    assert np.all(zero.samples == 0) and np.all(zero.ids == -1)


# --------------------------------------------------------------------------- knn_tracking


@given(seed=st.integers(0, 2**31), n=st.integers(1, 300), k=st.integers(1, 10), leaf=st.sampled_from([1, 5, 16]))
def test_knn_tracking_is_exact_euclidean_and_consistent(seed, n, k, leaf):
    X, cx = _data(seed, n, 3, n_dup=n // 10)
    Q, cq = _queries(seed, X, 10)
    rng = np.random.default_rng(seed + 2)
    centers = Q * rng.uniform(0.3, 1.0, (len(Q), 1))  # e.g. recentred ball centres
    tree = HyperbolicKDTree(leaf_size=leaf).build(X, cx)
    e_sq, e_ids, h_ids, h_d, samples = tree.knn_tracking(centers, k, Q, cq)

    ref_sq, _ = _euclid_brute(centers, X, min(k, n))
    np.testing.assert_allclose(e_sq[:, : min(k, n)], ref_sq, rtol=1e-12, atol=0)
    got_sq = np.where(e_ids >= 0, np.sum((centers[:, None] - X[np.maximum(e_ids, 0)]) ** 2, axis=2), np.inf)
    np.testing.assert_allclose(got_sq, e_sq, rtol=1e-12, atol=0)

    # Hyperbolic list: true deltas of its ids, ascending, and at least as good as
    # the deltas of the Euclidean neighbours (which were examined too).
    np.testing.assert_array_equal(delta_to_candidates(Q, cq, X, cx, h_ids), h_d)
    assert np.all(h_d[:, 1:] >= h_d[:, :-1])
    e_as_h = np.sort(delta_to_candidates(Q, cq, X, cx, e_ids), axis=1)
    assert np.all(h_d <= e_as_h)
    assert np.all(samples >= min(k, n)) and np.all(samples <= n)


def test_knn_tracking_one_leaf_examines_everything():
    X, cx = _data(5, 200, 6, n_dup=10)
    Q, cq = _queries(5, X, 15)
    tree = HyperbolicKDTree(leaf_size=10_000).build(X, cx)
    assert tree.n_nodes_ == 1
    e_sq, e_ids, h_ids, h_d, samples = tree.knn_tracking(Q * 0.5, 4, Q, cq)
    np.testing.assert_array_equal(samples, 200)
    _, ref_d = brute_knn_delta(Q, cq, X, cx, 4)
    np.testing.assert_array_equal(h_d, ref_d)


def test_knn_tracking_budget_stops_early():
    X, cx = _data(6, 200, 6)
    Q, cq = _queries(6, X, 15)
    tree = HyperbolicKDTree(leaf_size=10_000).build(X, cx)
    budget = np.arange(15) * 13  # 0 .. 182, per query
    e_sq, e_ids, h_ids, h_d, samples = tree.knn_tracking(Q, 3, Q, cq, budget)
    np.testing.assert_array_equal(samples, budget)
    # One leaf, scanned in tree order: the answer is the brute force over the first b points.
    for i, b in enumerate(budget):
        if b == 0:
            assert np.all(h_ids[i] == -1) and np.all(e_ids[i] == -1)
            continue
        seen = tree.indices_[:b]
        _, ref = brute_knn_delta(Q[i : i + 1], cq[i : i + 1], X[seen], cx[seen], 3)
        np.testing.assert_array_equal(h_d[i], ref[0])
        assert set(e_ids[i][e_ids[i] >= 0].tolist()) <= set(seen.tolist())


def test_knn_tracking_budget_in_a_deep_tree():
    X, cx = _data(8, 2000, 3)
    Q, cq = _queries(8, X, 30)
    tree = HyperbolicKDTree(leaf_size=4).build(X, cx)
    free = tree.knn_tracking(Q, 5, Q, cq)
    capped = tree.knn_tracking(Q, 5, Q, cq, budget=free.samples - 1)
    np.testing.assert_array_equal(capped.samples, np.maximum(free.samples - 1, 0))
    same = tree.knn_tracking(Q, 5, Q, cq, budget=int(free.samples.max()))
    for a, b in zip(same, free):
        np.testing.assert_array_equal(a, b)


def test_tree_arrays_are_well_formed():
    X, cx = _data(9, 1000, 4)
    tree = HyperbolicKDTree(leaf_size=7).build(X, cx)
    assert sorted(tree.indices_.tolist()) == list(range(1000))
    np.testing.assert_array_equal(tree.points_, X[tree.indices_])
    np.testing.assert_array_equal(tree.conformal_, cx[tree.indices_])  # stored, not recomputed
    leaves = tree.left_ < 0
    assert np.all(tree.end_[leaves] - tree.start_[leaves] <= 7)
    for node in range(tree.n_nodes_):
        s, e = tree.start_[node], tree.end_[node]
        pts = tree.points_[s:e]
        np.testing.assert_array_equal(pts.min(0), tree.lo_[node])
        np.testing.assert_array_equal(pts.max(0), tree.hi_[node])
        assert tree.max_conformal_[node] == tree.conformal_[s:e].max()


@pytest.mark.parametrize("n", [1, 15, 16, 17, 33, 48, 49, 100, 1000, 4097])
@pytest.mark.parametrize("leaf", [1, 3, 16])
def test_leaves_are_full_but_one(n, leaf):
    """Splits at a multiple of leaf_size: ceil(n / leaf) leaves, all full but one, 2 L - 1 nodes."""
    X, cx = _data(n + leaf, n, 3)
    tree = HyperbolicKDTree(leaf_size=leaf).build(X, cx)
    n_leaves = -(-n // leaf)
    sizes = (tree.end_ - tree.start_)[tree.left_ < 0]
    assert tree.n_nodes_ == 2 * n_leaves - 1 and sizes.shape == (n_leaves,)
    assert np.all(sizes >= 1) and np.count_nonzero(sizes == leaf) >= n_leaves - 1
    # each split is at most leaf/2 points (rounded up) off the median of its node
    inner = np.flatnonzero(tree.left_ >= 0)
    size = tree.end_ - tree.start_
    off = np.abs(size[tree.left_[inner]] - size[inner] / 2)
    assert np.all(off <= np.maximum(leaf / 2, size[inner] / 2 - 1) + 0.5)


def test_parallel_build_gives_the_same_tree_for_any_split_depth_and_thread_count():
    """Subtrees below depth top_depth are built in parallel; node ids depend on the sizes alone."""
    import numba

    from hypann._runtime import read_only
    from hypann.search.hyperbolic_kdtree import _build_tree

    X, cx = map(read_only, _data(17, 3000, 4, n_dup=40))  # as build() passes them: one compiled kernel
    ref = _build_tree(X, cx, 5, 1)
    before = numba.get_num_threads()
    try:
        for threads in sorted({1, min(2, numba.config.NUMBA_NUM_THREADS)}):
            numba.set_num_threads(threads)
            for top_depth in (1, 3, 6, 40):
                got = _build_tree(X, cx, 5, top_depth)
                for a, b in zip(got, ref):
                    np.testing.assert_array_equal(a, b)
    finally:
        numba.set_num_threads(before)
    # preorder ids: the left child follows its parent, the right child follows the left subtree
    perm, lo, hi, left, right, start, end, max_conf, depth = ref
    inner = np.flatnonzero(left >= 0)
    np.testing.assert_array_equal(left[inner], inner + 1)
    np.testing.assert_array_equal(right[inner], inner + 1 + 2 * -(-(end[left[inner]] - start[left[inner]]) // 5) - 1)


def test_permutation_is_int32():
    X, cx = _data(3, 500, 4)
    tree = HyperbolicKDTree(leaf_size=8).build(X, cx)
    assert tree.indices_.dtype == np.int32
    arrays = tree.to_arrays()
    old = dict(arrays, indices=arrays["indices"].astype(np.int64))  # as files before int32 stored it
    Q, cq = _queries(3, X, 10)
    for state in (arrays, old):
        back = HyperbolicKDTree.from_arrays(state, points=X, conformal=cx)
        assert back.indices_.dtype == np.int32  # older files' int64 ids too: one compiled kernel
        np.testing.assert_array_equal(back.search_exact(Q, cq, 5).ids, tree.search_exact(Q, cq, 5).ids)
    with pytest.raises(ValueError, match=r"state 'indices': must have dtype int64, got int16"):
        HyperbolicKDTree.from_arrays(dict(arrays, indices=arrays["indices"].astype(np.int16)))


# --------------------------------------------------------------------------- oracle, persistence, errors


def test_oracle_protocol_and_tracking():
    X, cx = _data(10, 800, 5)
    Q, cq = _queries(10, X, 20)
    oracle = HyperbolicKDTreeOracle(leaf_size=8).build(X)
    assert isinstance(oracle, EuclideanOracle)
    assert (oracle.name, oracle.exact, oracle.counts_evaluations) == ("hkdtree", True, True)
    assert oracle.spec() == "hkdtree:leaf_size=8"
    res = oracle.knn(Q, 6)
    ref_sq, _ = _euclid_brute(Q, X, 6)
    np.testing.assert_allclose(res.sq_dist, ref_sq, rtol=1e-12, atol=0)
    assert res.evaluations.shape == (20,) and np.all(res.evaluations >= 6)
    tracked = oracle.knn_tracking(Q, 6, Q, cq)
    np.testing.assert_array_equal(tracked.euclid_sq, res.sq_dist)
    np.testing.assert_array_equal(tracked.samples, res.evaluations)
    assert oracle.nbytes > X.nbytes
    # padding to k > n follows the oracle contract
    assert oracle.knn(Q, 900).indices.shape == (20, 900)
    # a budget caps the points examined, per query
    assert oracle.supports_budget
    capped = oracle.knn(Q, 6, budget=np.arange(20) + 1)
    assert np.all(capped.evaluations <= np.arange(20) + 1)
    assert np.all(capped.sq_dist >= res.sq_dist)


def test_oracle_build_with_conformal_keeps_given_factors():
    X, cx = _data(12, 300, 3)
    marked = cx * 0.5  # deliberately not 1-|x|^2: must be used as given
    oracle = HyperbolicKDTreeOracle().build_with_conformal(X, marked)
    np.testing.assert_array_equal(oracle.tree_.conformal_, marked[oracle.tree_.indices_])
    assert (oracle.n_points_, oracle.dim_) == (300, 3)


def test_save_load_and_pickle_roundtrip(tmp_path):
    X, cx = _data(13, 500, 4)
    Q, cq = _queries(13, X, 10)
    tree = HyperbolicKDTree(leaf_size=6).build(X, cx)
    np.savez(tmp_path / "tree.npz", **tree.to_arrays())
    with np.load(tmp_path / "tree.npz") as f:
        loaded = HyperbolicKDTree.from_arrays(dict(f))
    again = pickle.loads(pickle.dumps(tree))
    want = tree.search_exact(Q, cq, 4)
    for other in (loaded, again):
        got = other.search_exact(Q, cq, 4)
        for a, b in zip(got, want):
            np.testing.assert_array_equal(a, b)
    assert loaded.leaf_size == 6 and loaded.depth_ == tree.depth_
    with pytest.raises(ValueError, match="missing arrays"):
        HyperbolicKDTree.from_arrays({"points": X})


def test_errors_name_the_bad_value():
    X, cx = _data(14, 50, 3)
    with pytest.raises(ValueError, match="leaf_size must be a positive integer"):
        HyperbolicKDTree(leaf_size=0).build(X, cx)
    with pytest.raises(ValueError, match="not built yet"):
        HyperbolicKDTree().search_exact(X, cx, 1)
    tree = HyperbolicKDTree().build(X, cx)
    with pytest.raises(ValueError, match="k must be a positive integer"):
        tree.search_exact(X, cx, 0)
    with pytest.raises(ValueError, match=r"queries must have shape \(m, 3\)"):
        tree.search_exact(X[:, :2], cx, 1)
    with pytest.raises(ValueError, match="conformal must have shape"):
        HyperbolicKDTree().build(X, cx[:-1])
    with pytest.raises(ValueError, match="budget must be None, a scalar or an array of shape"):
        tree.search_exact(X, cx, 1, budget=np.ones(3))
    with pytest.raises(ValueError, match="centers, queries and q_conformal must have m=50 rows"):
        tree.knn_tracking(X, 1, X[:3], cx[:3])


# --------------------------------------------------------------------------- seeded search and range search


@given(
    seed=st.integers(0, 2**31),
    n=st.integers(1, 300),
    k=st.integers(1, 10),
    n_seeds=st.integers(0, 15),
)
def test_search_exact_with_any_seeds_stays_exact(seed, n, k, n_seeds):
    # Seeds may be good, bad, repeated, out of range or -1: the answer is exact anyway.
    X, cx = _data(seed, n, 4, n_dup=n // 8)
    Q, cq = _queries(seed, X, 10)
    rng = np.random.default_rng(seed)
    tree = HyperbolicKDTree(leaf_size=4).build(X, cx)
    seeds = rng.integers(-2, n + 2, (len(Q), n_seeds))
    ids, deltas, samples = tree.search_exact(Q, cq, k, seed_ids=seeds)
    ref_ids, ref_d = brute_knn_delta(Q, cq, X, cx, k)
    np.testing.assert_array_equal(deltas, ref_d)
    np.testing.assert_array_equal(delta_to_candidates(Q, cq, X, cx, ids), deltas)
    for row in ids:
        valid = row[row >= 0]
        assert len(set(valid.tolist())) == len(valid)


def test_search_exact_seeded_with_the_answer_examines_no_more_points():
    X, cx = _data(11, 4000, 6)
    Q, cq = _queries(11, X, 50)
    tree = HyperbolicKDTree().build(X, cx)
    ref_ids, ref_d = brute_knn_delta(Q, cq, X, cx, 10)
    plain = tree.search_exact(Q, cq, 10)
    seeded = tree.search_exact(Q, cq, 10, seed_ids=ref_ids)
    np.testing.assert_array_equal(seeded.deltas, ref_d)
    # best-first already examines only leaves whose bound is below the final
    # k-th delta (plus the few popped before it was reached): seeds can only cut those
    assert np.all(seeded.samples <= plain.samples)


@pytest.mark.parametrize("d", [3, 16, 40])  # leaves scanned with delta_row, and screened (LANES_MIN_DIM = 16)
@given(seed=st.integers(0, 2**31), n=st.integers(1, 300), quantile=st.sampled_from([0.0, 0.01, 0.3, 1.0]),
       method=st.sampled_from(["linear", "nearest"]))
def test_search_radius_matches_brute_force(seed, n, quantile, d, method):
    X, cx = _data(seed, n, d, n_dup=n // 5)
    Q, cq = _queries(seed, X, 8)
    all_d = delta_to_candidates(Q, cq, X, cx, np.tile(np.arange(n), (len(Q), 1)))
    # 0 (duplicates only) ... everything; "nearest": a limit equal to a point's delta (kept)
    limits = np.quantile(all_d, quantile, axis=1, method=method)
    offsets, ids, deltas = HyperbolicKDTree(leaf_size=3).build(X, cx).search_radius(Q, cq, limits)
    for i in range(len(Q)):
        expect = np.flatnonzero(all_d[i] <= limits[i])
        got = ids[offsets[i]:offsets[i + 1]]
        assert sorted(got.tolist()) == sorted(expect.tolist())
        np.testing.assert_array_equal(deltas[offsets[i]:offsets[i + 1]], np.sort(all_d[i, expect]))


@pytest.mark.parametrize("algorithm, key", [("hkdtree", "leaf_size"), ("graph", "tree_leaf_size")])
@pytest.mark.parametrize("dim, leaf", [(3, 16), (15, 16), (16, 48), (40, 48)])
def test_default_leaf_size_by_dimension_survives_save_and_load(tmp_path, algorithm, key, dim, leaf):
    """``leaf_size=None`` (``tree_leaf_size`` for the graph): 16 below 16 coordinates, 48 from 16 on;
    the file keeps the built tree's size; a load with an explicit size rebuilds with that size."""
    import hypann
    from hypann.search.hyperbolic_kdtree import default_leaf_size

    assert default_leaf_size(dim) == leaf
    X = ball_points(np.random.default_rng(dim), 400, dim, min_conformal=1e-8)
    extra = {"exact": True} if algorithm == "graph" else {}
    index = hypann.HyperbolicIndex(algorithm=algorithm, random_state=0, **extra).build(X)
    tree = index.algorithm_.tree_
    assert tree.leaf_size == leaf
    assert getattr(index.algorithm_, key) is None
    path = tmp_path / "i.hypann"
    index.save(path)
    loaded = hypann.load(path)
    assert loaded.algorithm_.tree_.leaf_size == leaf
    np.testing.assert_array_equal(loaded.search(X[:9], 5).distances, index.search(X[:9], 5).distances)
    rebuilt = hypann.load(path, **{key: leaf + 1})
    assert rebuilt.algorithm_.tree_.leaf_size == leaf + 1
    np.testing.assert_array_equal(rebuilt.search(X[:9], 5).distances, index.search(X[:9], 5).distances)


def test_built_loaded_mapped_and_unpickled_trees_give_the_kernels_one_type(tmp_path):
    """The tree's arrays reach the kernels as read-only views however the tree came to be (built from the
    caller's writable arrays, in place or copied; from a file's arrays, read or mapped; unpickled), and its
    ids as int32 also from a file of int64 ids: numba compiles each search kernel once per type, so each
    other type would cost a compilation of some 10 s."""
    import pickle

    from numba import typeof

    X, cx = _data(5, 400, 3)
    built = HyperbolicKDTree(leaf_size=8).build(X, cx)
    taken = HyperbolicKDTree(leaf_size=8).build(X.copy(), cx.copy(), in_place=True)
    arrays = built.to_arrays()
    np.savez(tmp_path / "tree.npz", **dict(arrays, indices=arrays["indices"].astype(np.int64)))
    with np.load(tmp_path / "tree.npz") as read:
        loaded = HyperbolicKDTree.from_arrays(dict(read))
    for name, a in arrays.items():
        if name != "leaf_size":
            np.save(tmp_path / f"{name}.npy", a)
    mapped_arrays = {name: np.load(tmp_path / f"{name}.npy", mmap_mode="r") for name in arrays if name != "leaf_size"}
    mapped = HyperbolicKDTree.from_arrays(dict(mapped_arrays, leaf_size=arrays["leaf_size"]))
    unpickled = pickle.loads(pickle.dumps(built))

    def kernel_types(tree):
        return tuple(typeof(getattr(tree, name + "_")) for name in _STATE)

    want = kernel_types(built)
    assert want[2].dtype.name == "int32" and not any(t.mutable for t in want)
    for tree in (taken, loaded, mapped, unpickled):
        assert kernel_types(tree) == want
    Q, cq = _queries(5, X, 6)
    for tree in (taken, loaded, mapped, unpickled):
        np.testing.assert_array_equal(tree.search_exact(Q, cq, 4).ids, built.search_exact(Q, cq, 4).ids)
