"""Shell routing of the sharded index, without Ray: the interval test, the round plans, the partitions.

The property behind exactness: a point ``y`` with ``d(q, y) <= r`` lies in a
shard whose norm interval meets ``[h_q - r, h_q + r]``. The tests use the
tightest interval ``[h_y, h_y]`` and the adversarial configurations where the
triangle inequality through the origin is an equality (``q`` and ``y`` on one
ray, or on opposite rays), computed in float64.
"""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypann.distributed import (
    ShardedIndex,
    assign_shards,
    first_round_shards,
    next_round_shards,
    norm_gap,
    shards_meeting_ball,
)
from hypann.eval.ground_truth import exact_knn
from hypann.geometry import poincare as P
from hypann.geometry.bands import ball_meets_norm_interval
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


@given(X=point_sets())
def test_a_ball_through_a_point_always_meets_that_points_norm(X):
    """For every pair (q, y): the ball B(q, d(q, y)) meets the one-point interval [h_y, h_y] (float64)."""
    conf = P.conformal_factor(X)
    h = P.dist0(X, cx=conf)
    r = P.dist_from_delta(P.pairwise_delta(X, X, cq=conf, cx=conf))
    meets = ball_meets_norm_interval(h[:, None], r, h[None, :], h[None, :])
    assert meets.all(), np.argwhere(~meets)[:3]
    # and the test is not vacuous: a ball of radius r/2 around q misses [h_y, h_y] when |h_q - h_y| > r/2 by a margin
    far = np.abs(h[:, None] - h[None, :]) > 0.5 * r * (1 + 1e-6) + 1e-6
    assert not ball_meets_norm_interval(h[:, None], 0.5 * r, h[None, :], h[None, :])[far].any()


def test_interval_test_with_inf_radius_meets_everything():
    lo, hi = np.array([0.0, 5.0, 30.0]), np.array([1.0, 6.0, 40.0])
    assert ball_meets_norm_interval(3.0, np.inf, lo, hi).all()
    np.testing.assert_array_equal(ball_meets_norm_interval(3.0, 1.0, lo, hi), [False, False, False])
    np.testing.assert_array_equal(ball_meets_norm_interval(3.0, 2.0, lo, hi), [True, True, False])


@given(
    sizes=st.lists(st.integers(1, 20), min_size=1, max_size=12),
    k=st.integers(1, 40),
    seed=st.integers(0, 2**31 - 1),
)
def test_first_round_holds_k_points_nearest_first(sizes, k, seed):
    rng = np.random.default_rng(seed)
    sizes = np.array(sizes)
    k = min(k, int(sizes.sum()))
    edges = np.sort(rng.uniform(0, 20, 2 * len(sizes)))
    lo, hi = edges[0::2], edges[1::2]
    h_q = rng.uniform(-1, 22, 30).clip(0)
    plan = first_round_shards(h_q, lo, hi, sizes, k)
    gap = norm_gap(h_q, lo, hi)
    assert (plan @ sizes >= k).all()
    for i in range(len(h_q)):
        chosen = np.flatnonzero(plan[i])
        # minimal: dropping the farthest chosen shard would leave fewer than k points
        far = chosen[np.argmax(gap[i, chosen])]
        assert sizes[chosen].sum() - sizes[far] < k
        # nearest first: every unchosen shard is at least as far as every chosen one
        if len(chosen) < len(sizes):
            assert gap[i, ~plan[i]].min() >= gap[i, chosen].max()


def test_later_rounds_take_the_nearest_meeting_shards():
    lo, hi = np.array([0.0, 2.0, 4.0, 8.0]), np.array([2.0, 4.0, 8.0, 16.0])
    h_q, r = np.array([5.0, 5.0, 1.0]), np.array([0.5, 2.5, np.inf])
    meets = [[False, False, True, False], [False, True, True, False], [True, True, True, True]]
    np.testing.assert_array_equal(shards_meeting_ball(h_q, r, lo, hi), meets)
    visited = np.array([[False, False, True, False], [False, False, True, False], [True, False, False, False]])
    np.testing.assert_array_equal(next_round_shards(h_q, r, lo, hi, visited, None), meets & ~visited)
    np.testing.assert_array_equal(
        next_round_shards(h_q, r, lo, hi, visited, 1), [[False] * 4, [False, True, False, False], [False, True, False, False]]
    )
    np.testing.assert_array_equal(
        next_round_shards(h_q, r, lo, hi, visited, 2), [[False] * 4, [False, True, False, False], [False, True, True, False]]
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
)
def test_routing_rounds_find_the_exact_knn(data, n_shards, k, per_round):
    """The routing loop of ShardedIndex.search, with brute force standing in for the shards."""
    X, Q = data
    conf, q_conf = P.conformal_factor(X), P.conformal_factor(Q)
    h, h_q = P.dist0(X, cx=conf), P.dist0(Q, cx=q_conf)
    parts = assign_shards(h, n_shards, "shells")
    lo = np.array([h[p].min() for p in parts])
    hi = np.array([h[p].max() for p in parts])
    sizes = np.array([p.size for p in parts])
    D = P.dist_from_delta(P.pairwise_delta(Q, X, cq=q_conf, cx=conf))
    found = np.full(D.shape, np.inf)
    plan = first_round_shards(h_q, lo, hi, sizes, k)
    visited = plan.copy()
    while plan.any():
        for s in range(n_shards):
            rows = np.flatnonzero(plan[:, s])
            found[np.ix_(rows, parts[s])] = D[np.ix_(rows, parts[s])]
        r_k = np.sort(found, axis=1)[:, k - 1]
        plan = next_round_shards(h_q, r_k, lo, hi, visited, per_round)
        visited |= plan
    np.testing.assert_array_equal(np.sort(found, axis=1)[:, :k], np.sort(D, axis=1)[:, :k])
    np.testing.assert_allclose(np.sort(D, axis=1)[:, :k], exact_knn(Q, X, k)[1], rtol=1e-12)


@pytest.mark.parametrize("partition", ["shells", "random", "hash"])
def test_partitions_cover_every_point_once(partition):
    rng = np.random.default_rng(3)
    norms = rng.exponential(5.0, 1003)
    norms[:100] = 7.0  # ties
    parts = assign_shards(norms, 6, partition, seed=11)
    allids = np.concatenate(parts)
    np.testing.assert_array_equal(np.sort(allids), np.arange(1003))
    assert all(np.all(np.diff(p) > 0) for p in parts)
    sizes = np.array([p.size for p in parts])
    if partition == "shells":
        assert sizes.max() - sizes.min() <= 1
        for a, b in zip(parts, parts[1:]):
            assert norms[a].max() <= norms[b].min()
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
        ({"partition": "bands"}, ValueError, r"unknown partition 'bands'; expected one of \['hash', 'random', 'shells'\]"),
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
    code = "import sys, hypann, hypann.distributed, hypann.cli; hypann.ShardedIndex; assert 'ray' not in sys.modules, 'ray imported'"
    subprocess.run([sys.executable, "-c", code], check=True)
