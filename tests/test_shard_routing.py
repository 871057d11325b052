"""Routing of the sharded index, without Ray: shard lower bounds, the round plans, the partitions.

The property behind exactness: the lower bound of the shard holding ``y``
never exceeds ``d(q, y)`` (with the rounding slack of ``may_hold``). The tests
use one-point shards, where both the norm-gap bound and the box bound are
tight, and the configurations where the triangle inequality through the
origin is an equality (``q`` and ``y`` on one ray, or on opposite rays),
computed in float64.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypann.distributed import ShardBounds, ShardedIndex, assign_shards, first_round_shards, may_hold, next_round_shards
from hypann.eval.ground_truth import exact_knn
from hypann.geometry import poincare as P
from tests.conftest import ball_points


def _unit(v):
    return v / np.linalg.norm(v, axis=-1, keepdims=True)


@st.composite
def point_sets(draw):
    """Points and queries, including exactly collinear and antipodal ones and tiny / boundary norms."""
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    kind = draw(st.sampled_from(["ray", "antipodal", "boundary", "tiny", "mixed"]))
    d = draw(st.sampled_from([2, 3, 10]))
    n = 40
    u = _unit(rng.normal(size=d))
    # hyperbolic norms from 1e-12 to 35, placed through tanh(h/2) along u
    h = np.exp(rng.uniform(np.log(1e-12), np.log(35.0), n))
    if kind == "ray":
        X = np.outer(np.tanh(h / 2), u)
    elif kind == "antipodal":
        X = np.outer(np.tanh(h / 2) * rng.choice([-1.0, 1.0], n), u)
    elif kind == "boundary":
        X = ball_points(rng, n, d, min_conformal=1e-14, radial_power=0.05)
    elif kind == "tiny":
        X = _unit(rng.normal(size=(n, d))) * 10.0 ** rng.uniform(-12, -4, (n, 1))
    else:
        X = np.vstack([np.outer(np.tanh(h[: n // 2] / 2), u), ball_points(rng, n - n // 2, d, min_conformal=1e-12)])
    X = X[np.linalg.norm(X, axis=1) < 1.0]
    return X


def _bounds(X, parts):
    conf = P.conformal_factor(X)
    return ShardBounds.of_parts(X, conf, P.dist0(X, cx=conf), parts)


@given(X=point_sets())
def test_a_points_own_shard_always_admits_the_ball_through_it(X):
    """One shard per point: for every pair (q, y), shard {y} may hold a point within d(q, y) of q (float64)."""
    conf = P.conformal_factor(X)
    h = P.dist0(X, cx=conf)
    bounds = _bounds(X, [np.array([i]) for i in range(len(X))])
    lower = bounds.lower_bounds(X, conf, h)
    r = P.dist_from_delta(P.pairwise_delta(X, X, cq=conf, cx=conf))
    for j in range(len(X)):
        ok = may_hold(lower[:, [j]], r[:, j], h)
        assert ok.all(), (j, np.flatnonzero(~ok[:, 0])[:3])
    # and the bounds are tight, so the test is not vacuous: half the distance is refused
    far = r > 1e-6
    half = np.column_stack([may_hold(lower[:, [j]], 0.5 * r[:, j], h)[:, 0] for j in range(len(X))])
    assert not half[far].any()


def test_an_infinite_radius_admits_every_shard():
    X = ball_points(np.random.default_rng(1), 30, 3)
    bounds = _bounds(X, np.array_split(np.arange(30), 5))
    Q = ball_points(np.random.default_rng(2), 4, 3)
    cq = P.conformal_factor(Q)
    lower = bounds.lower_bounds(Q, cq, P.dist0(Q, cx=cq))
    assert may_hold(lower, np.full(4, np.inf), P.dist0(Q, cx=cq)).all()
    assert not may_hold(lower + 1.0, np.full(4, 0.5), np.zeros(4)).any()


@given(
    sizes=st.lists(st.integers(1, 20), min_size=1, max_size=12),
    k=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
)
def test_first_round_holds_k_points_nearest_first(sizes, k, seed):
    rng = np.random.default_rng(seed)
    sizes = np.array(sizes)
    k = min(k, int(sizes.sum()))
    lower = rng.uniform(0, 5, (30, len(sizes))) * (rng.uniform(size=(30, len(sizes))) < 0.7)
    plan = first_round_shards(lower, sizes, k)
    assert (plan @ sizes >= k).all()
    for i in range(len(lower)):
        chosen = np.flatnonzero(plan[i])
        # minimal: dropping the last chosen shard (largest bound, ties by shard number) leaves fewer than k points
        order = np.argsort(lower[i], kind="stable")
        far = order[max(np.flatnonzero(np.isin(order, chosen)))]
        assert sizes[chosen].sum() - sizes[far] < k
        # smallest bounds first: every unchosen shard is at least as far as every chosen one
        if len(chosen) < len(sizes):
            assert lower[i, ~plan[i]].min() >= lower[i, chosen].max()


def test_later_rounds_take_the_shards_of_smallest_bound():
    lower = np.array([[3.0, 1.0, 0.0, 6.0], [2.9, 0.5, 0.0, 2.0], [4.0, 3.0, 2.0, 1.0]])
    r, h_q = np.array([0.5, 2.5, np.inf]), np.array([5.0, 5.0, 1.0])
    np.testing.assert_array_equal(
        may_hold(lower, r, h_q), [[False, False, True, False], [False, True, True, True], [True, True, True, True]]
    )
    visited = np.array([[False, False, True, False], [False, False, True, False], [False, False, False, True]])
    np.testing.assert_array_equal(
        next_round_shards(lower, r, h_q, visited, None), [[False] * 4, [False, True, False, True], [True, True, True, False]]
    )
    np.testing.assert_array_equal(
        next_round_shards(lower, r, h_q, visited, 1), [[False] * 4, [False, True, False, False], [False, False, True, False]]
    )
    np.testing.assert_array_equal(
        next_round_shards(lower, r, h_q, visited, 2), [[False] * 4, [False, True, False, True], [False, True, True, False]]
    )


@st.composite
def sharded_sets(draw):
    rng = np.random.default_rng(draw(st.integers(0, 2**31 - 1)))
    d = draw(st.sampled_from([2, 4]))
    kind = draw(st.sampled_from(["boundary", "ray", "duplicates"]))
    if kind == "boundary":
        X = ball_points(rng, 300, d, min_conformal=1e-12, radial_power=0.2)
    elif kind == "ray":  # everything on one line through the origin: the triangle inequality is tight
        X = np.outer(np.tanh(rng.uniform(-15, 15, 300) / 2), _unit(rng.normal(size=d)))
    else:
        X = ball_points(rng, 60, d, min_conformal=1e-9)[rng.integers(0, 60, 300)]
    Q = np.vstack([X[rng.integers(0, 300, 10)], ball_points(rng, 10, d, min_conformal=1e-10)])
    return X, Q


@given(
    data=sharded_sets(),
    n_shards=st.integers(1, 12),
    k=st.sampled_from([1, 4, 30]),
    per_round=st.sampled_from([1, 3, None]),
    partition=st.sampled_from(["shells", "kd"]),
)
def test_routing_rounds_find_the_exact_knn(data, n_shards, k, per_round, partition):
    """The routing loop of ShardedIndex.search, with brute force standing in for the shards."""
    X, Q = data
    conf, q_conf = P.conformal_factor(X), P.conformal_factor(Q)
    h, h_q = P.dist0(X, cx=conf), P.dist0(Q, cx=q_conf)
    parts = assign_shards(h, n_shards, partition, points=X)
    bounds = ShardBounds.of_parts(X, conf, h, parts)
    lower = bounds.lower_bounds(Q, q_conf, h_q)
    D = P.dist_from_delta(P.pairwise_delta(Q, X, cq=q_conf, cx=conf))
    found = np.full(D.shape, np.inf)
    plan = first_round_shards(lower, bounds.sizes, k)
    visited = plan.copy()
    while plan.any():
        for s in range(n_shards):
            rows = np.flatnonzero(plan[:, s])
            found[np.ix_(rows, parts[s])] = D[np.ix_(rows, parts[s])]
        r_k = np.sort(found, axis=1)[:, k - 1]
        plan = next_round_shards(lower, r_k, h_q, visited, per_round)
        visited |= plan
    np.testing.assert_array_equal(np.sort(found, axis=1)[:, :k], np.sort(D, axis=1)[:, :k])
    np.testing.assert_allclose(np.sort(D, axis=1)[:, :k], exact_knn(Q, X, k)[1], rtol=1e-12)


@pytest.mark.parametrize("partition", ["shells", "kd", "random", "hash"])
def test_partitions_cover_every_point_once(partition):
    rng = np.random.default_rng(3)
    X = ball_points(rng, 1003, 3)
    X[:100] = X[100]  # ties
    norms = P.dist0(X)
    parts = assign_shards(norms, 6, partition, seed=11, points=X)
    allids = np.concatenate(parts)
    np.testing.assert_array_equal(np.sort(allids), np.arange(1003))
    assert all(np.all(np.diff(p) > 0) for p in parts)
    sizes = np.array([p.size for p in parts])
    if partition == "shells":
        assert sizes.max() - sizes.min() <= 1
        for a, b in zip(parts, parts[1:]):
            assert norms[a].max() <= norms[b].min()
    elif partition == "kd":
        assert sizes.max() - sizes.min() <= 2
        boxes = _bounds(X, parts)
        inside = [(X[p] >= boxes.box_lo[s]).all() and (X[p] <= boxes.box_hi[s]).all() for s, p in enumerate(parts)]
        assert all(inside) and (boxes.box_hi - boxes.box_lo).max(axis=1).max() < 2.0
    elif partition == "random":
        assert sizes.max() - sizes.min() <= 1
    else:
        again = assign_shards(norms, 6, "hash", seed=11)
        assert all(np.array_equal(a, b) for a, b in zip(parts, again))
        assert sizes.min() > 100


def test_hash_partition_refuses_empty_shards():
    with pytest.raises(ValueError, match=r"partition='hash' left shard\(s\) \[.*\] empty \(3 points in n_shards=40\)"):
        assign_shards(np.zeros(3), 40, "hash")


@pytest.mark.parametrize(
    "kwargs, error, pattern",
    [
        ({"n_shards": 0}, ValueError, r"n_shards must be a positive integer, got n_shards=0"),
        ({"n_shards": 2.5}, ValueError, r"n_shards must be a positive integer, got n_shards=2.5"),
        ({"partition": "bands"}, ValueError, r"unknown partition 'bands'; expected one of \['hash', 'kd', 'random', 'shells'\]"),
        ({"algorithm": "nope"}, ValueError, r"unknown algorithm 'nope'"),
        ({"leaf_sizee": 3}, ValueError, r"bad settings for algorithm 'hkdtree'"),
        ({"n_actors": -1}, ValueError, r"n_actors must be a positive integer or None, got n_actors=-1"),
        ({"actor_options": [1]}, TypeError, r"actor_options must be a dict or None, got list"),
        ({"n_shards": 11}, ValueError, r"n_shards must be <= the number of points \(10\), got n_shards=11"),
    ],
)
def test_bad_settings_fail_before_ray_is_touched(kwargs, error, pattern):
    X = ball_points(np.random.default_rng(0), 10, 3)
    with pytest.raises(error, match=pattern):
        ShardedIndex(**kwargs).build(X)


def test_searching_an_unbuilt_index_says_so():
    with pytest.raises(ValueError, match=r"this ShardedIndex is not built yet"):
        ShardedIndex().search(np.zeros((1, 2)))


def test_import_hypann_does_not_import_ray():
    code = "import sys, hypann, hypann.distributed, hypann.apps.cli; hypann.ShardedIndex; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
