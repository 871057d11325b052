"""The graph's relative-neighbourhood pruning (``prune``): the rule, and what ``"auto"`` chooses."""

from __future__ import annotations

import pickle

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypann
from hypann._runtime import read_only
from hypann.datasets.families import make_family
from hypann.geometry._kernels import conformal_factor, delta_row
from hypann.graph import HyperbolicGraphIndex, knn_graph
from tests.conftest import brute_knn_delta

pytestmark = pytest.mark.kernels  # also run under NUMBA_BOUNDSCHECK=1 (make test)

K = 10


def _reference(points, conf, nbrs, n_first, keep, mute):
    """The rule of :func:`~hypann.graph.knn_graph.relative_neighbourhood_rows` written out with Python lists."""
    d = lambda a, b: delta_row(points[a], conf[a], points[b], conf[b])  # noqa: E731
    out = np.full(nbrs.shape, -1, dtype=np.int32)
    for p, row in enumerate(nbrs):
        ids = [int(v) for v in row if v >= 0]
        first, near = ids[: n_first[p]], []
        for v in ids[n_first[p] :]:
            if len(near) < keep or not any(d(u, v) < d(p, v) for u in near if not mute[u]):
                near.append(v)
        out[p, : len(first) + len(near)] = first + near
    return out


def _points(rng, n, dim):
    """Clusters at several radii, some a hair from the boundary, with exact copies and near-copies."""
    centres = rng.standard_normal((4, dim))
    centres *= (rng.uniform(0.2, 0.999999, 4) / np.linalg.norm(centres, axis=1))[:, None]
    X = centres[rng.integers(0, 4, n)] + rng.standard_normal((n, dim)) * rng.choice([1e-9, 1e-4, 1e-2], n)[:, None]
    X[1 : n // 4 : 3] = X[0]  # copies: delta 0 between them
    norms = np.linalg.norm(X, axis=1)
    big = norms >= 1 - 1e-12
    X[big] *= ((1 - 1e-12) / norms[big])[:, None]
    return np.ascontiguousarray(X)


@settings(max_examples=25, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), dim=st.sampled_from([2, 5, 10, 17]), keep=st.integers(0, 6),
       n_first=st.integers(0, 3), float32=st.booleans(), muted=st.sampled_from([0.0, 0.3, 1.0]))
def test_pruned_rows_follow_the_rule(seed, dim, keep, n_first, float32, muted):
    """The kernel against the rule in plain Python, with a share ``muted`` of the points unable to dominate."""
    rng = np.random.default_rng(seed)
    n, D = 60, 12
    X = _points(rng, n, dim)
    if float32:
        X = X.astype(np.float32)
    cx = conformal_factor(X.astype(np.float64))
    # rows as the search graph has them: first edges, then ids nearest first, -1 padded
    nbrs = np.full((n, D), -1, dtype=np.int32)
    firsts = np.full(n, n_first, dtype=np.uint8)
    for p in range(n):
        others = np.delete(np.arange(n), p)
        order = sorted(others, key=lambda v: delta_row(X[p], cx[p], X[v], cx[v]))
        first = list(rng.choice(others, n_first, replace=False))
        rest = [v for v in order if v not in first][: int(rng.integers(0, D - n_first + 1))]
        nbrs[p, : n_first + len(rest)] = first + rest
    mute = rng.random(n) < muted
    # read-only views, as the build passes them (one compiled type)
    got = knn_graph.relative_neighbourhood_rows(read_only(X), read_only(cx), nbrs, firsts, np.int64(keep), mute)
    np.testing.assert_array_equal(got, _reference(X, cx, nbrs, firsts, keep, mute))
    # a pruned row is its row with entries left out, in the same order
    for p in range(n):
        kept = got[p][got[p] >= 0].tolist()
        row = nbrs[p][nbrs[p] >= 0].tolist()
        assert kept == [v for v in row if v in kept]
        assert kept[: n_first + keep] == row[: n_first + keep]


def test_the_rule_drops_what_a_kept_neighbour_is_nearer_to():
    """Three points on a line: the far one is reached through the middle one and goes; with ``keep`` 2 it stays."""
    X = read_only(np.array([[0.0, 0.0], [0.3, 0.0], [0.6, 0.0], [0.0, 0.5]]))  # as the build passes them
    cx = read_only(conformal_factor(X))
    nbrs = np.array([[1, 3, 2, -1], [0, 2, 3, -1], [1, 0, 3, -1], [0, 1, 2, -1]], dtype=np.int32)
    none = np.zeros(4, dtype=np.uint8)
    free = np.zeros(4, dtype=np.bool_)
    got = knn_graph.relative_neighbourhood_rows(X, cx, nbrs, none, np.int64(1), free)
    assert got[0].tolist() == [1, 3, -1, -1]  # 2 lies behind 1; 3 does not lie behind 1
    assert knn_graph.relative_neighbourhood_rows(X, cx, nbrs, none, np.int64(3), free)[0].tolist() == [1, 3, 2, -1]
    first = np.array([2, 0, 0, 0], dtype=np.uint8)  # the first edges stay, and prune nothing (none kept besides)
    assert knn_graph.relative_neighbourhood_rows(X, cx, nbrs, first, np.int64(0), free)[0].tolist() == [1, 3, 2, -1]
    # a muted 1 is kept but dominates nothing: 2 stays
    mute = np.array([False, True, False, False])
    assert knn_graph.relative_neighbourhood_rows(X, cx, nbrs, none, np.int64(1), mute)[0].tolist() == [1, 3, 2, -1]


@pytest.fixture(scope="module")
def tree():
    X = make_family("hierarchical_tree", 5200, 10, seed=0)
    return X[:5000].copy(), conformal_factor(X[:5000]), X[5000:].copy(), conformal_factor(X[5000:])


def test_auto_prunes_the_tree_and_keeps_its_recall(tree):
    X, cx, Q, cq = tree
    auto = HyperbolicGraphIndex(random_state=0).build(X, cx)
    never = HyperbolicGraphIndex(random_state=0, prune="never").build(X, cx)
    always = HyperbolicGraphIndex(random_state=0, prune="always").build(X, cx)
    assert auto.pruned_ and always.pruned_ and not never.pruned_
    np.testing.assert_array_equal(auto.neighbors_, always.neighbors_)
    assert never.prune_comparison_ is None and always.prune_comparison_ is None
    pruned, unpruned = auto.prune_comparison_
    assert pruned == auto.default_evaluations_ <= knn_graph.PRUNE_EVALUATIONS * unpruned
    assert unpruned == never.default_evaluations_
    # every pruned row is a part of the unpruned row, and the pruned graph is smaller
    for a, b in zip(always.neighbors_, never.neighbors_):
        assert set(a[a >= 0].tolist()) <= set(b[b >= 0].tolist())
    assert (always.neighbors_ >= 0).sum() < 0.5 * (never.neighbors_ >= 0).sum()
    _, true_d = brute_knn_delta(Q, cq, X, cx, K)
    for index in (auto, never):
        res = index.search(Q, cq, K)
        assert hypann.metrics.recall(res.deltas, true_d, K, epsilon=1e-12) >= 0.98
    assert np.mean(auto.search(Q, cq, K, ef=10).samples) < np.mean(never.search(Q, cq, K, ef=10).samples)


def test_the_calibration_sample_prunes_no_other_row(tree):
    """The nodes the calibration leaves out one at a time dominate nothing: a row pruned with a calibration
    differs from the row pruned without one (a given ``ef``) only where the latter kept a sampled node."""
    X, cx, _, _ = tree
    calibrated = HyperbolicGraphIndex(random_state=0, prune="always").build(X, cx)
    given = HyperbolicGraphIndex(random_state=0, prune="always", ef=10).build(X, cx)
    sample, _ = knn_graph._calibration_sample(cx, np.random.default_rng(0))
    never = HyperbolicGraphIndex(random_state=0, prune="never", ef=10).build(X, cx)
    differ = np.flatnonzero(np.any(calibrated.neighbors_ != given.neighbors_, axis=1))
    assert differ.size > 0
    for p in differ:
        assert np.isin(given.neighbors_[p], sample).any()
        row = calibrated.neighbors_[p]
        assert set(row[row >= 0].tolist()) <= set(never.neighbors_[p].tolist())


def test_auto_keeps_every_edge_where_pruning_costs_recall():
    """Points uniform in the hyperbolic ball: pruning leaves the graph needing more evaluations, not fewer."""
    X = make_family("hyperbolic_uniform", 5000, 10, seed=0)
    cx = conformal_factor(X)
    auto = HyperbolicGraphIndex(random_state=0).build(X, cx)
    never = HyperbolicGraphIndex(random_state=0, prune="never").build(X, cx)
    assert not auto.pruned_
    np.testing.assert_array_equal(auto.neighbors_, never.neighbors_)
    assert auto.ef_ == never.ef_ and auto.default_evaluations_ == never.default_evaluations_
    pruned, unpruned = auto.prune_comparison_
    assert pruned > knn_graph.PRUNE_EVALUATIONS * unpruned


def test_a_given_ef_keeps_the_graph_unpruned_under_auto(tree):
    X, cx, _, _ = tree
    index = HyperbolicGraphIndex(random_state=0, ef=16).build(X, cx)
    assert not index.pruned_ and index.prune_comparison_ is None and index.ef_ == 16
    assert HyperbolicGraphIndex(random_state=0, ef=16, prune="always").build(X, cx).pruned_


def test_pruned_state_survives_save_load_and_pickle(tree, tmp_path):
    X, cx, Q, cq = tree
    index = HyperbolicGraphIndex(random_state=0).build(X, cx)
    np.savez(tmp_path / "graph.npz", **index.to_arrays())
    with np.load(tmp_path / "graph.npz") as f:
        loaded = HyperbolicGraphIndex.from_arrays(dict(f))
    again = pickle.loads(pickle.dumps(index))
    want = index.search(Q, cq, K)
    for other in (loaded, again):
        assert other.pruned_ and other.prune == "auto" and other.prune_comparison_ == index.prune_comparison_
        np.testing.assert_array_equal(other.neighbors_, index.neighbors_)
        for a, b in zip(other.search(Q, cq, K), want):
            np.testing.assert_array_equal(a, b)
    state = index.to_arrays()
    with pytest.raises(ValueError, match="'pruned' must be the integer 1"):
        HyperbolicGraphIndex.from_arrays(dict(state, pruned=np.int64(2)))
    never = HyperbolicGraphIndex(random_state=0, prune="never").build(X, cx).to_arrays()
    assert "pruned" not in never and "prune_comparison" not in never
    for setting in ("always", "never"):  # the setting comes back too (the default "auto" is not written)
        built = HyperbolicGraphIndex(random_state=0, ef=16, prune=setting).build(X, cx)
        assert HyperbolicGraphIndex.from_arrays(built.to_arrays()).prune == setting
    for bad in (np.int64(3), np.float64(1.0), np.array([1])):
        with pytest.raises(ValueError, match="'prune_setting' must be an integer in"):
            HyperbolicGraphIndex.from_arrays(dict(state, prune_setting=bad))
    for bad in (np.array([1.0]), np.array([1.0, np.nan]), np.array([1, 2])):
        with pytest.raises(ValueError, match="'prune_comparison' must be two finite floats"):
            HyperbolicGraphIndex.from_arrays(dict(state, prune_comparison=bad))


def test_prune_setting_is_checked_and_described(tree):
    X, _, _, _ = tree
    with pytest.raises(ValueError, match=r"prune must be one of \('auto', 'always', 'never'\), got prune='yes'"):
        HyperbolicGraphIndex(prune="yes").build(X, conformal_factor(X))
    with pytest.raises(ValueError, match="prune must be one of"):
        hypann.HyperbolicIndex(algorithm="graph", prune=True).build(X)
    index = hypann.HyperbolicIndex(algorithm="graph").build(X)
    assert "pruned by the relative-neighbourhood rule" in index.describe()
    assert "evaluations per query at the calibrated ef" in index.describe()
    never = hypann.HyperbolicIndex(algorithm="graph", prune="never").build(X)
    assert "pruned" not in never.describe()
