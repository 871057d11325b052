"""Apollonian partition trees of Poincare points: entry points and initial candidates for graphs.

A node of the tree splits its points with two pivots ``a, b`` (points of the
node) and a threshold ``t``: a point ``x`` goes left when

.. math::

    \\|x - a\\|^2 \\le t \\, \\|x - b\\|^2 ,

and ``t`` is the median of ``|x-a|^2 / |x-b|^2`` over the node, so the two
children hold half the points each (ties are split by position). The
surfaces ``|x-a| = sqrt(t) |x-b|`` are Apollonian spheres, and since

.. math::

    \\frac{\\delta(x, a)}{\\delta(x, b)} = \\frac{\\|x-a\\|^2 (1-\\|b\\|^2)}{\\|x-b\\|^2 (1-\\|a\\|^2)}

they are also level sets of ``delta(x, a) / delta(x, b)``, with
``delta(x, y) = |x-y|^2/((1-|x|^2)(1-|y|^2))`` the monotone surrogate of the
Poincare distance: a split separates the points nearer ``a`` (in the
hyperbolic sense, relative to ``b``) from those nearer ``b``, at every scale
and at any distance from the boundary (the test never forms ``1-|x|^2``).
It is the hyperbolic counterpart of a random-projection tree split (Dasgupta
& Freund 2008; pynndescent splits on the Euclidean bisector of two random
points). Pivots are two distinct random points of the node; a node whose
points are all identical becomes a leaf of any size.

Leaves hold at most ``leaf_size`` points (or identical points only). A tree
is a set of flat arrays (below), built serially for one seed; several trees
build in parallel, each from its own seed, so the result does not depend on
the thread count.

References
----------
Dasgupta & Freund, *Random projection trees and low dimensional manifolds*,
STOC 2008.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from hypann._runtime import read_only
from hypann.geometry._kernels import sq_dist8, sq_dist_pair, sq_dist_pair_split, sq_dist_row

# Random pivot pairs tried before scanning the node for a point distinct from ``a``.
_PIVOT_DRAWS = 8


@nb.njit(cache=True, inline="always")
def splitmix64(state):
    """One step of splitmix64: returns ``(new_state, 64-bit output)`` as uint64."""
    state = state + np.uint64(0x9E3779B97F4A7C15)
    z = state
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return state, z ^ (z >> np.uint64(31))


@nb.njit(cache=True, inline="always")
def mix_seed(seed, a, b):
    """A uint64 stream state from a seed and two integers (a hash, not a sequence)."""
    s = np.uint64(seed) ^ (np.uint64(a) * np.uint64(0xD1B54A32D192ED03))
    s, z = splitmix64(s)
    s = z ^ (np.uint64(b) * np.uint64(0x8CB92BA72F3D8DD7))
    s, z = splitmix64(s)
    return z


@nb.njit(cache=True, inline="always")
def node_capacity(n, leaf_size):
    """Upper bound on the nodes of a tree of ``n`` points with leaves of ``leaf_size`` (see :func:`build_tree`)."""
    smallest_leaf = max(1, (leaf_size + 1) // 2)
    return 2 * max(1, n // smallest_leaf)


@nb.njit(cache=True, inline="always")
def pivot_sums(q, a, b, split_sums):
    """``(|q - a|^2, |q - b|^2)`` as a tree built with ``split_sums`` (:func:`build_tree`) summed its keys:
    :func:`~hypann.geometry._kernels.sq_dist_pair_split` or
    :func:`~hypann.geometry._kernels.sq_dist_pair`."""
    if split_sums:
        return sq_dist_pair_split(q, a, b)
    return sq_dist_pair(q, a, b)


@nb.njit(cache=True, inline="always")
def _split_keys(points, order, lo, hi, pa, pb, keys, split_sums):
    """``keys[t] = split_key(|x - a|^2, |x - b|^2)`` of the points ``x = points[order[t]]``, ``lo <= t < hi``.

    Eight points at a time (each pivot's eight sums side by side,
    :func:`~hypann.geometry._kernels.sq_dist8`), then one by one (:func:`pivot_sums`). By default
    every sum adds the same terms in the same order as :func:`sq_dist_pair`
    (``(a_j - x_j)^2 = (x_j - a_j)^2`` exactly), so the keys are the bits a descent computes.
    ``split_sums``: the sums split over four lanes instead (one load per four coordinates), the bits
    of a descent with ``split_sums`` (:func:`descend`).
    """
    t = lo
    while t + 8 <= hi:
        rows = (points[order[t]], points[order[t + 1]], points[order[t + 2]], points[order[t + 3]],
                points[order[t + 4]], points[order[t + 5]], points[order[t + 6]], points[order[t + 7]])
        da = sq_dist8(pa, rows, split_sums)
        db = sq_dist8(pb, rows, split_sums)
        for r in range(8):
            keys[t + r] = split_key(da[r], db[r])
        t += 8
    while t < hi:
        da1, db1 = pivot_sums(points[order[t]], pa, pb, split_sums)
        keys[t] = split_key(da1, db1)
        t += 1


@nb.njit(cache=True)
def build_tree(points, leaf_size, seed, split_sums=False):
    """One Apollonian partition tree (see module docstring).

    ``split_sums``: compute the split keys with sums split over four lanes (:func:`_split_keys`),
    faster from :data:`SPLIT_SUMS_MIN_DIM` dimensions on; such a tree is descended with the same
    sums (:func:`descend` with ``split_sums=True``).

    Returns
    -------
    pivots : ndarray (n_nodes, 2), int64
        Pivot ids of internal nodes (``-1`` at leaves).
    thresholds : ndarray (n_nodes,)
    children : ndarray (n_nodes, 2), int64
        Left and right child (``-1`` at leaves).
    ranges : ndarray (n_nodes, 2), int64
        ``order[ranges[v, 0]:ranges[v, 1]]`` are the points under node ``v``.
    order : ndarray (n,), int64
        Point ids grouped by leaf.
    """
    n = points.shape[0]
    # Every leaf but a root leaf comes from splitting a node of more than
    # leaf_size points into halves, so it holds at least
    # m = max(1, (leaf_size + 1) // 2) points (a node of identical points that
    # becomes a leaf holds more). The leaves are disjoint, so there are at most
    # max(1, n // m) of them and at most 2 max(1, n // m) - 1 nodes: the
    # arrays never overflow (node_capacity).
    cap = node_capacity(n, leaf_size)
    pivots = np.full((cap, 2), -1, dtype=np.int64)
    thresholds = np.zeros(cap)
    children = np.full((cap, 2), -1, dtype=np.int64)
    ranges = np.zeros((cap, 2), dtype=np.int64)
    order = np.arange(n, dtype=np.int64)
    keys = np.empty(n)
    stack = np.empty(cap, dtype=np.int64)  # node ids waiting to be split, at most n_nodes
    state = np.uint64(seed)
    ranges[0, 0] = 0
    ranges[0, 1] = n
    n_nodes = 1
    top = 0
    stack[top] = 0
    top += 1
    while top > 0:
        top -= 1
        node = stack[top]
        lo = ranges[node, 0]
        hi = ranges[node, 1]
        size = hi - lo
        if size <= leaf_size:
            continue
        a = -1
        b = -1
        for _ in range(_PIVOT_DRAWS):
            state, z = splitmix64(state)
            ca = order[lo + np.int64(z % np.uint64(size))]
            state, z = splitmix64(state)
            cb = order[lo + np.int64(z % np.uint64(size))]
            if sq_dist_row(points[ca], points[cb]) > 0.0:
                a = ca
                b = cb
                break
        if a < 0:
            a = order[lo]
            for t in range(lo + 1, hi):
                if sq_dist_row(points[a], points[order[t]]) > 0.0:
                    b = order[t]
                    break
            if b < 0:
                continue  # all points identical: a leaf of any size
        _split_keys(points, order, lo, hi, points[a], points[b], keys, split_sums)
        srt = np.argsort(keys[lo:hi], kind="mergesort")
        block = order[lo:hi].copy()
        for t in range(size):
            order[lo + t] = block[srt[t]]
        mid = lo + size // 2
        pivots[node, 0] = a
        pivots[node, 1] = b
        thresholds[node] = keys[lo + srt[size // 2 - 1]]
        for side in range(2):
            child = n_nodes
            n_nodes += 1
            children[node, side] = child
            ranges[child, 0] = lo if side == 0 else mid
            ranges[child, 1] = mid if side == 0 else hi
            stack[top] = child
            top += 1
    m = n_nodes
    return pivots[:m].copy(), thresholds[:m].copy(), children[:m].copy(), ranges[:m].copy(), order


def forest_index_dtype(n):
    """Integer type of the forest's arrays: int32 when every position ``0..n`` fits (``n < 2^31``), else int64."""
    return np.int32 if n < np.iinfo(np.int32).max else np.int64


def build_forest(points, leaf_size, seeds, index_dtype=None):
    """``len(seeds)`` trees built in parallel; returns the leaf of each point in each tree.

    From :data:`SPLIT_SUMS_MIN_DIM` dimensions on, the trees' split keys come from sums split over
    four lanes (:func:`build_tree` with ``split_sums=True``).

    Parameters
    ----------
    points : ndarray of shape (n, d)
    leaf_size : int
    seeds : ndarray of uint64
        One seed per tree.
    index_dtype : numpy integer type, optional
        Type of the returned arrays; default :func:`forest_index_dtype` (int32
        below ``2^31`` points: every position and id is at most ``n``).

    Returns
    -------
    leaf_ranges : ndarray of shape (n_trees, n, 2)
        ``(start, end)`` of each point's leaf in ``orders[tree]``.
    orders : ndarray of shape (n_trees, n)
        Each tree's ``order`` (point ids grouped by leaf).
    """
    n = points.shape[0]
    dtype = forest_index_dtype(n) if index_dtype is None else index_dtype
    if n > np.iinfo(dtype).max:
        raise ValueError(f"index_dtype must hold ids up to n={n}, got index_dtype={np.dtype(dtype).name}")
    leaf_ranges = np.empty((seeds.shape[0], n, 2), dtype=dtype)
    orders = np.empty((seeds.shape[0], n), dtype=dtype)
    # a read-only view, as the graph's entry tree gets (hypann.graph.knn_graph): one compiled build_tree
    _fill_forest(read_only(points), leaf_size, seeds, leaf_ranges, orders)
    return leaf_ranges, orders


#: Dimension from which the trees of :func:`build_forest` compute their split keys with sums split over four
#: lanes (``build_tree(..., split_sums=True)``), and the graph's entry tree too, which its searches descend with
#: the same sums (``descend(..., split_sums=True)``): a level then costs eight short chains of additions
#: instead of two long ones.
SPLIT_SUMS_MIN_DIM = 16


@nb.njit(cache=True, inline="always")
def split_sums_for(dim):
    """Whether trees over points of ``dim`` coordinates sum their split keys over four lanes (from
    :data:`SPLIT_SUMS_MIN_DIM` on): the forest's trees and the graph's entry tree."""
    return dim >= SPLIT_SUMS_MIN_DIM


@nb.njit(cache=True, parallel=True)
def _fill_forest(points, leaf_size, seeds, leaf_ranges, orders):
    """Build tree ``t`` from ``seeds[t]`` into ``orders[t]`` and ``leaf_ranges[t]`` (trees in parallel)."""
    split_sums = split_sums_for(points.shape[1])
    for t in nb.prange(seeds.shape[0]):
        _pivots, _thr, children, ranges, order = build_tree(points, leaf_size, seeds[t], split_sums)
        for s in range(order.shape[0]):
            orders[t, s] = order[s]
        for v in range(children.shape[0]):
            if children[v, 0] < 0:
                for s in range(ranges[v, 0], ranges[v, 1]):
                    leaf_ranges[t, order[s], 0] = ranges[v, 0]
                    leaf_ranges[t, order[s], 1] = ranges[v, 1]


@nb.njit(cache=True, inline="always")
def descend(pivots, thresholds, children, points, q, split_sums=False):
    """Leaf node reached by ``q`` (the side test of the module docstring at every node) in a tree built with
    ``split_sums``."""
    node = 0
    while children[node, 0] >= 0:
        node = _child_toward(pivots, thresholds, children, points, q, split_sums, node)
    return node


@nb.njit(cache=True, inline="always")
def _child_toward(pivots, thresholds, children, points, q, split_sums, node):
    """The child of the internal ``node`` on ``q``'s side (the side test of the module docstring)."""
    da, db = pivot_sums(q, points[pivots[node, 0]], points[pivots[node, 1]], split_sums)
    return children[node, 0] if split_key(da, db) <= thresholds[node] else children[node, 1]


@nb.njit(cache=True, parallel=True)
def first_node_starts(pivots, thresholds, children, ranges, points, queries, split_sums, max_points):
    """Per query, the first leaf slot of the node of at most ``max_points`` points (or the leaf) on its way
    down a tree built with ``split_sums`` (the side test of :func:`descend`): a key that puts queries with
    the same region of the tree side by side."""
    m = queries.shape[0]
    keys = np.empty(m, dtype=np.int64)
    for i in nb.prange(m):
        q = queries[i]
        node = 0
        while children[node, 0] >= 0 and ranges[node, 1] - ranges[node, 0] > max_points:
            node = _child_toward(pivots, thresholds, children, points, q, split_sums, node)
        keys[i] = ranges[node, 0]
    return keys


@nb.njit(cache=True, inline="always")
def split_key(da, db):
    """``|x-a|^2 / |x-b|^2`` (``inf`` at ``x = b``): the key compared with a node's threshold.

    Build and descent use this one expression, of the two sums of
    :func:`pivot_sums` (summed the same way in both), so an indexed point
    descends to its own leaf (up to ties of the key).
    """
    return da / db if db > 0.0 else np.inf


def upper_pivots(pivots, children, levels):
    """The pivots of the internal nodes of a tree's first ``levels`` levels (the root's is level 0), level by
    level, as an int64 array of at most ``2 (2^levels - 1)`` point ids (a point may appear twice).

    ``pivots``/``children``: a tree of :func:`build_tree` (children's ids above their parent's, so the walk
    down ends).
    """
    out = []
    level = np.zeros(1, dtype=np.int64)
    for _ in range(levels):
        inner = level[children[level, 0] >= 0]
        if inner.shape[0] == 0:
            break
        out.append(pivots[inner].ravel())
        level = children[inner].ravel()
    return np.concatenate(out).astype(np.int64) if out else np.empty(0, dtype=np.int64)
