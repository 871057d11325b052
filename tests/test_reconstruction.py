"""Reconstruction metrics (mean rank, MAP) against hand-computed values and a direct reference."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypann.eval.reconstruction import reconstruction_metrics
from hypann.geometry.poincare import pairwise_dist

# Five points on a line in the 1-D ball. Hyperbolic coordinate 2*atanh(x):
# x0 = 0 -> 0, x3 = 0.1 -> 0.2007, x1 = 0.2 -> 0.4055, x4 = 0.3 -> 0.6190, x2 = 0.4 -> 0.8473.
LINE = np.array([[0.0], [0.2], [0.4], [0.1], [0.3]])
# Node 0 is related to nodes 1 and 2 (its "ancestors"); nodes 3 and 4 are unrelated.
LINE_PAIRS = np.array([[0, 1], [0, 2]])


def test_hand_computed_directed():
    # From node 0 the order is 3 (no), 1 (yes), 4 (no), 2 (yes):
    # rank(1) = 1 + 1 = 2, rank(2) = 1 + 2 = 3; AP = (1/2 + 2/4) / 2 = 0.5.
    out = reconstruction_metrics(LINE, LINE_PAIRS, symmetric=False)
    assert out["mean_rank"] == pytest.approx(2.5, abs=1e-15)
    assert out["map"] == pytest.approx(0.5, abs=1e-15)
    assert (out["n_nodes"], out["n_pairs"]) == (1, 2)
    per = reconstruction_metrics(LINE, LINE_PAIRS, symmetric=False, per_node=True)
    np.testing.assert_array_equal(per["nodes"], [0])
    np.testing.assert_array_equal(per["degree"], [2])
    np.testing.assert_allclose(per["rank_sum"], [5.0])
    np.testing.assert_allclose(per["average_precision"], [0.5])


def test_hand_computed_symmetric():
    # Node 0: as above, ranks 2 and 3, AP 1/2.
    # Node 1 (at 0.4055), neighbour 0 at distance 0.4055; unrelated: 3 at 0.2048, 4 at 0.2135,
    #   2 at 0.4418 -> two closer: rank 3, AP 1/3.
    # Node 2 (at 0.8473), neighbour 0 at 0.8473; 3 at 0.6466, 4 at 0.2283, 1 at 0.4418
    #   -> three closer: rank 4, AP 1/4.
    out = reconstruction_metrics(LINE, LINE_PAIRS)
    assert out["mean_rank"] == pytest.approx((2 + 3 + 3 + 4) / 4, abs=1e-15)
    assert out["map"] == pytest.approx((1 / 2 + 1 / 3 + 1 / 4) / 3, abs=1e-15)
    assert (out["n_nodes"], out["n_pairs"]) == (3, 4)


def _tree_embedding():
    """Root at 0, three children on three rays, one grandchild further out on each ray.

    Every node is closer to each of its ancestors and descendants than to any
    unrelated node (checked by hand: e.g. from (0.5, 0) the root and (0.8, 0)
    are at delta = 1/3, the nearest unrelated node (0, 0.5) at delta = 8/9).
    """
    pts = np.array(
        [
            [0.0, 0.0],  # 0 root
            [0.5, 0.0],  # 1 child
            [-0.5, 0.0],  # 2 child
            [0.0, 0.5],  # 3 child
            [0.8, 0.0],  # 4 grandchild of 1
            [-0.8, 0.0],  # 5 grandchild of 2
            [0.0, 0.8],  # 6 grandchild of 3
        ]
    )
    closure = np.array([[1, 0], [2, 0], [3, 0], [4, 1], [4, 0], [5, 2], [5, 0], [6, 3], [6, 0]])
    return pts, closure


def test_perfect_embedding_has_rank_one_and_map_one():
    pts, closure = _tree_embedding()
    for symmetric in (True, False):
        out = reconstruction_metrics(pts, closure, symmetric=symmetric)
        assert out["mean_rank"] == 1.0
        assert out["map"] == 1.0


def test_swapping_two_points_breaks_the_ranking():
    pts, closure = _tree_embedding()
    pts = pts.copy()
    pts[[1, 2]] = pts[[2, 1]]  # children exchanged: grandchildren now sit by their uncle
    out = reconstruction_metrics(pts, closure, symmetric=False)
    assert out["mean_rank"] > 1.0 and out["map"] < 1.0


def _reference(points, pairs, symmetric):
    """Direct definition: rank each neighbour among non-neighbours; AP from the full sorted list."""
    n = len(points)
    nbrs = [set() for _ in range(n)]
    for u, v in pairs:
        if u != v:
            nbrs[u].add(v)
            if symmetric:
                nbrs[v].add(u)
    d = pairwise_dist(points, points)
    ranks, aps = [], []
    for u in range(n):
        if not nbrs[u]:
            continue
        others = [w for w in range(n) if w != u and w not in nbrs[u]]
        for v in nbrs[u]:
            ranks.append(1 + sum(d[u, w] < d[u, v] for w in others))
        pos = sorted(d[u, v] for v in nbrs[u])
        prec = [(i + 1) / (i + 1 + sum(d[u, w] < dv for w in others)) for i, dv in enumerate(pos)]
        aps.append(np.mean(prec))
    return np.mean(ranks), np.mean(aps)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(2, 25), symmetric=st.booleans())
def test_matches_direct_definition(seed, n, symmetric):
    rng = np.random.default_rng(seed)
    pts = rng.uniform(-0.57, 0.57, size=(n, 3))  # |x| <= 0.57 sqrt(3) < 1
    m = rng.integers(1, 3 * n)
    pairs = rng.integers(0, n, size=(m, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    if len(pairs) == 0:
        pairs = np.array([[0, 1]])
    out = reconstruction_metrics(pts, pairs, symmetric=symmetric, n_chunks=3)
    rank, ap = _reference(pts, pairs, symmetric)
    assert out["mean_rank"] == pytest.approx(rank, rel=1e-12)
    assert out["map"] == pytest.approx(ap, rel=1e-12)


def test_node_subset_averages_over_those_nodes(rng):
    pts = rng.uniform(-0.5, 0.5, size=(30, 2))
    pairs = rng.integers(0, 30, size=(60, 2))
    pairs = pairs[pairs[:, 0] != pairs[:, 1]]
    full = reconstruction_metrics(pts, pairs, symmetric=False)
    sources = np.unique(pairs[:, 0])
    half = reconstruction_metrics(pts, pairs, symmetric=False, nodes=sources[::2])
    other = reconstruction_metrics(pts, pairs, symmetric=False, nodes=sources[1::2])
    total_pairs = half["n_pairs"] + other["n_pairs"]
    assert total_pairs == full["n_pairs"]
    combined_rank = (half["mean_rank"] * half["n_pairs"] + other["mean_rank"] * other["n_pairs"]) / total_pairs
    assert combined_rank == pytest.approx(full["mean_rank"], rel=1e-12)


@pytest.mark.parametrize(
    "pairs, match",
    [
        (np.array([[0, 1, 2]]), r"shape \(n_pairs, 2\)"),
        (np.array([[0.0, 1.0]]), "integer"),
        (np.array([[0, 7]]), r"outside \[0, 5\)"),
        (np.array([[-1, 0]]), r"outside \[0, 5\)"),
    ],
)
def test_bad_pairs(pairs, match):
    with pytest.raises(ValueError, match=match):
        reconstruction_metrics(LINE, pairs)


def test_points_outside_ball_rejected():
    with pytest.raises(ValueError, match="not strictly inside"):
        reconstruction_metrics(np.array([[0.0], [1.0]]), np.array([[0, 1]]))


def test_no_evaluable_node():
    with pytest.raises(ValueError, match="no evaluated node"):
        reconstruction_metrics(LINE, LINE_PAIRS, symmetric=False, nodes=[3, 4])
