"""The paper's kd-tree oracle: Euclidean kd-tree traversal that tracks the hyperbolic best.

Wu & Charikar (section 6.1) power Recentering with a classic kd-tree modified
so that "whenever the algorithm solves for the Euclidean distance between a
data point and q, we also solve for the hyperbolic distance": traversal and
termination are Euclidean, but the tree also keeps the hyperbolically closest
points it has examined, and it counts the points it examines ("samples") so
that a sample budget means what the paper means.

This module provides

* :class:`HyperbolicKDTree` -- the tree itself, stored in flat arrays (it
  pickles and saves with :func:`numpy.savez` through :meth:`~HyperbolicKDTree.to_arrays`);
* :meth:`HyperbolicKDTree.knn_tracking` -- the paper's modified Euclidean
  k-NN traversal around a centre, with the hyperbolic top-k of a separate
  query point and exact per-query sample counts and budgets;
* :meth:`HyperbolicKDTree.search_exact` -- beyond the paper: exact hyperbolic
  k-NN in the same tree with hyperbolic pruning (see below);
* :class:`HyperbolicKDTreeOracle` -- the tree behind the
  :class:`~hypann.oracles.base.EuclideanOracle` protocol (``"hkdtree"``).

Tree layout
-----------
Nodes are split along the coordinate of largest spread, at the multiple of
``leaf_size`` points nearest to the median, until they hold at most
``leaf_size`` points: every leaf is full except one, so a tree over ``n``
points has ``2 ceil(n / leaf_size) - 1`` nodes whatever ``n``. (Splitting at
the median instead leaves ``leaf_size / 2`` to ``leaf_size`` points per leaf
depending on ``n``, and up to twice the nodes; the boxes, ``2 d`` coordinates
per node, are most of the tree's memory beyond the points.) Nodes are
numbered in preorder, so a node's id follows from the sizes of the nodes
alone and the subtrees below the top levels are built in parallel with the
same result for any number of threads. Every node stores the tight bounding box of
its points (``lo``, ``hi``), its range ``[start, end)`` into the permuted
copy of the points, its children (``-1`` for a leaf) and the *largest*
conformal factor ``c_B = max_{x in B} (1-|x|^2)`` of its points (that is,
``1 - r^2`` for the smallest norm ``r`` reached by a point of the node: exact,
and tighter than the box corner nearest the origin).

Hyperbolic pruning
------------------
For every point ``x`` of a node ``B``, ``|q-x|^2 >= mindist(q, B)^2`` and
``1-|x|^2 <= c_B``, hence

.. math::

    \\delta(q, x) = \\frac{\\|q-x\\|^2}{(1-\\|q\\|^2)(1-\\|x\\|^2)}
    \\;\\ge\\; \\frac{\\operatorname{mindist}(q, B)^2}{(1-\\|q\\|^2)\\, c_B} .

(The denominator needs the largest conformal factor -- the point of the node
closest to the origin --; the smallest one would not give a lower bound.)
The bound is computed with the same floating-point operations, in the same
order, as ``delta`` itself and rounding is monotone, so it never exceeds the
computed ``delta`` of a point in the node: pruning when it is ``>=`` the
current k-th best is exact in floating point, not only in exact arithmetic.

The query walk abandons sums early with the same argument: the terms are
non-negative and added in a fixed order, so a computed prefix ``p`` of a
sum never exceeds the computed full sum, and ``p / den >= D`` (the same
division as the full value's) proves that the full bound or ``delta`` is
``>= D`` too. A cheaper screen ``p > D * den`` only decides when to try that
test; its rounding never decides a pruning. The leaf scan runs four points and
the child bounds two nodes at a time -- independent sums, each still in its
own fixed order -- so the values are those of a one-at-a-time walk.

Float32 storage
---------------
The points may be float32 (``HyperbolicIndex(storage="float32")``): the
permuted copy and the boxes are then float32 and everything else (conformal
factors, ``max_conformal``, all arithmetic) float64. A float32 value converts
exactly to float64, and a box is the min / max of stored float32 values, hence
exact in float32; ``q_j - lo_j`` and ``q_j - x_j`` are then the same float64
operations as for float64 points, so the argument above holds unchanged: the
search is exact for the stored points. (With float32 arithmetic, or boxes
rounded from float64 values, it would not be.)

A tighter test exists -- the hyperbolic ball of the current k-th ``delta`` is a
Euclidean ball (:func:`hypann.geometry.poincare.euclidean_ball_from_delta`)
and a node can be skipped when its box misses that ball -- but on the
synthetic tree and cluster data it saved only 10-15% of the samples and cost
more time (a second box distance per node, plus a rounding margin), so it is
not used.
"""

from __future__ import annotations

from typing import NamedTuple

import numba as nb
import numpy as np

from hypann._borrowed import borrowed
from hypann._params import Param
from hypann._runtime import (
    ORDER_NODE_POINTS,
    SERIAL_MAX_QUERIES,
    OneQueryKernel,
    filled,
    one_query_arrays,
    read_only,
)
from hypann._validation import (
    check_positive_int,
    check_query_coordinates,
    check_state_array,
    check_state_fields,
    check_stored_points,
    check_stored_queries,
    common_length,
    first_bad,
    state_error,
)
from hypann.geometry import _kernels
from hypann.geometry._kernels import (ABANDON_STRIDE, LANES_MIN_DIM, delta4_below, delta_lanes_below, delta_row,
                                      delta_within, gather_points_in_place, insert_sorted, insert_sorted_unique,
                                      inverse_permutation, lanes_shrink, one_query_start, sq_dist_row)
from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle
from hypann.oracles.registry import register_oracle

__all__ = ["HyperbolicKDTree", "HyperbolicKDTreeOracle", "TrackingResult", "KNNResult", "default_leaf_size",
           "leaf_size_for"]

# Per-query budget meaning "no budget" inside the kernels.
_NO_BUDGET = np.iinfo(np.int64).max

# Names of the arrays that make up a fitted tree (see ``to_arrays``).
_STATE = ("points", "conformal", "indices", "lo", "hi", "left", "right", "start", "end", "max_conformal")

#: Leaf size of the exact searches (``hkdtree``, ``auto``, ``graph`` with ``exact=True``) when none is
#: given, below :data:`WIDE_LEAF_MIN_DIM` coordinates ...
NARROW_LEAF_SIZE = 16
#: ... and from there on (see :func:`default_leaf_size`).
WIDE_LEAF_SIZE = 48
#: Coordinates from which :func:`default_leaf_size` is :data:`WIDE_LEAF_SIZE`: where a leaf's
#: points are screened with four lanes (:data:`~hypann.geometry._kernels.LANES_MIN_DIM`).
WIDE_LEAF_MIN_DIM = LANES_MIN_DIM


def default_leaf_size(dim):
    """The kd-tree's leaf size when none is given: 16 below 16 coordinates, 48 from 16 on.

    From :data:`~hypann.geometry._kernels.LANES_MIN_DIM` coordinates on, a
    leaf's points are screened with four lanes that drop most points after
    their first 16 coordinates (:func:`_scan_leaf`), so a point examined costs
    much less than a node's walk (two box bounds and a heap push), and fewer,
    larger leaves pay. Measured on every data family
    (``benchmarks/hkdtree_leaf_size.py``, ``docs/benchmarks.md``): at 32, 100
    and 256 dimensions leaves of 48 points answer 1.11-1.47x faster than leaves
    of 16 on the clustered, boundary-heavy, duplicate and WordNet families
    (0.97-1.08x on the tree) and take less memory; at 10-D
    (four rows side by side, no screen) 16 is the best compromise: larger
    leaves win on some families and lose on others.
    """
    return WIDE_LEAF_SIZE if dim >= WIDE_LEAF_MIN_DIM else NARROW_LEAF_SIZE


def leaf_size_for(leaf_size, dim):
    """The leaf size a search builds with: the setting ``leaf_size``, or ``None``: :func:`default_leaf_size`."""
    return default_leaf_size(dim) if leaf_size is None else leaf_size


#: :func:`default_leaf_size` in words (the parameter tables of the searches that use it).
LEAF_SIZE_RULE = (f"{NARROW_LEAF_SIZE} below {WIDE_LEAF_MIN_DIM} dimensions, "
                  f"{WIDE_LEAF_SIZE} from {WIDE_LEAF_MIN_DIM} on")
#: The meaning of a ``leaf_size`` setting of those searches.
LEAF_SIZE_MEANING = f"points per leaf of the kd-tree (default: {LEAF_SIZE_RULE})"


class TrackingResult(NamedTuple):
    """Answer of :meth:`HyperbolicKDTree.knn_tracking` (unpacks as a 5-tuple).

    Attributes
    ----------
    euclid_sq : ndarray of shape (m, k)
        Squared Euclidean distances from each centre, ascending (``inf`` pad).
    euclid_ids : ndarray of shape (m, k), int64
        Ids of the Euclidean k-NN of each centre among the examined points (``-1`` pad).
    hyp_ids : ndarray of shape (m, k), int64
        Ids of the k examined points with smallest ``delta`` to the query.
    hyp_delta : ndarray of shape (m, k)
        Their ``delta``, ascending (``inf`` pad).
    samples : ndarray of shape (m,), int64
        Points examined per row.
    """

    euclid_sq: np.ndarray
    euclid_ids: np.ndarray
    hyp_ids: np.ndarray
    hyp_delta: np.ndarray
    samples: np.ndarray


class KNNResult(NamedTuple):
    """Answer of :meth:`HyperbolicKDTree.search_exact` (unpacks as a 3-tuple).

    Attributes
    ----------
    ids : ndarray of shape (m, k), int64
    deltas : ndarray of shape (m, k), ascending, ``inf`` pad
    samples : ndarray of shape (m,), int64
    """

    ids: np.ndarray
    deltas: np.ndarray
    samples: np.ndarray


# --------------------------------------------------------------------------- build


@nb.njit(cache=True, inline="always")
def _split_count(m, leaf_size):
    """Points of the left child when a node of ``m > leaf_size`` points is split.

    The multiple of ``leaf_size`` nearest to ``m / 2`` (so at most
    ``leaf_size / 2`` points from the median), kept within
    ``[leaf_size, (L - 1) leaf_size]`` for ``L = ceil(m / leaf_size)``: both
    children are non-empty and, by induction, the node ends in exactly ``L``
    leaves, all full but the last. Halving at the median instead gives leaves
    of ``leaf_size / 2`` to ``leaf_size`` points depending on ``n``, up to
    twice as many nodes and their boxes (``2 d`` coordinates each), which is
    most of the kd-tree's memory beyond the points.
    """
    n_leaves = (m + leaf_size - 1) // leaf_size
    blocks = (m + leaf_size) // (2 * leaf_size)  # round(m / (2 leaf_size)), halves up
    if blocks < 1:
        blocks = 1
    if blocks > n_leaves - 1:
        blocks = n_leaves - 1
    return blocks * leaf_size


@nb.njit(cache=True, inline="always")
def _subtree_nodes(m, leaf_size):
    """Nodes of the subtree over ``m >= 1`` points: ``2 ceil(m / leaf_size) - 1`` (see :func:`_split_count`)."""
    return 2 * ((m + leaf_size - 1) // leaf_size) - 1


@nb.njit(cache=True)
def _build_subtree(points, conformal, leaf_size, perm, lo, hi, left, right, start, end, max_conf, depth_of, root,
                   stop_depth, frontier):
    """Build the subtree of node ``root`` (its ``start``/``end``/``depth_of`` set) in place; serial.

    Nodes are numbered in preorder: the left child of ``node`` is ``node + 1``
    and its right child follows the left child's subtree, whose size depends
    only on its number of points (:func:`_subtree_nodes`). So every node's id
    is fixed by the sizes alone, and disjoint subtrees can be built in any
    order, or in parallel, into the same arrays with the same result.

    With ``stop_depth >= 0`` the nodes at that depth are not processed but
    written to ``frontier`` (at most ``2**(stop_depth - depth of root)`` of
    them); returns how many.
    """
    d = points.shape[1]
    stack = np.empty(_subtree_nodes(end[root] - start[root], leaf_size), dtype=np.int64)  # each node pushed once
    stack[0] = root
    sp = 1
    n_front = 0
    while sp > 0:
        sp -= 1
        node = stack[sp]
        if depth_of[node] == stop_depth:
            frontier[n_front] = node
            n_front += 1
            continue
        s = start[node]
        e = end[node]
        # tight box and largest conformal factor of the node's points
        mc = 0.0
        for j in range(d):
            lo[node, j] = np.inf
            hi[node, j] = -np.inf
        for t in range(s, e):
            x = points[perm[t]]
            for j in range(d):
                v = x[j]
                if v < lo[node, j]:
                    lo[node, j] = v
                if v > hi[node, j]:
                    hi[node, j] = v
            c = conformal[perm[t]]
            if c > mc:
                mc = c
        max_conf[node] = mc
        if e - s <= leaf_size:
            continue
        dim = 0
        spread = -1.0
        for j in range(d):
            w = hi[node, j] - lo[node, j]
            if w > spread:
                spread = w
                dim = j
        sub = perm[s:e].copy()
        vals = np.empty(e - s)
        for t in range(e - s):
            vals[t] = points[sub[t], dim]
        order = np.argsort(vals, kind="mergesort")
        for t in range(e - s):
            perm[s + t] = sub[order[t]]
        mid = s + _split_count(e - s, leaf_size)
        a = node + 1
        b = a + _subtree_nodes(mid - s, leaf_size)
        left[node] = a
        right[node] = b
        start[a] = s
        end[a] = mid
        start[b] = mid
        end[b] = e
        depth_of[a] = depth_of[node] + 1
        depth_of[b] = depth_of[node] + 1
        stack[sp] = b
        stack[sp + 1] = a
        sp += 2
    return n_front


@nb.njit(cache=True, parallel=True)
def _build_tree(points, conformal, leaf_size, top_depth):
    """kd-tree in flat arrays: the arrays of ``_STATE`` but the points and conformal factors, and the depth.

    The nodes down to depth ``top_depth`` are built first (serially); the
    subtrees below them are then built in parallel. Node ids depend only on
    the sizes of the nodes (preorder, see :func:`_build_subtree`) and every
    node is split the same way whoever builds it, so the tree is the same for
    any ``top_depth`` and any number of threads.

    ``points`` is only read; the caller puts it in tree order (``points[perm]``,
    or :func:`~hypann.geometry._kernels.gather_points_in_place`). It may be
    float32 or float64: the boxes keep that dtype (a box is the min / max of
    stored values, so it is exact in it).
    """
    n, d = points.shape
    # Every split puts a multiple of leaf_size points on the left (see _split_count), so by
    # induction a node of m points ends in exactly ceil(m / leaf_size) leaves: 2 L - 1 nodes.
    max_nodes = _subtree_nodes(n, leaf_size)
    lo = np.empty((max_nodes, d), dtype=points.dtype)  # min / max of stored values: exact in their dtype
    hi = np.empty((max_nodes, d), dtype=points.dtype)
    left = np.full(max_nodes, -1, dtype=np.int64)
    right = np.full(max_nodes, -1, dtype=np.int64)
    start = np.zeros(max_nodes, dtype=np.int64)
    end = np.zeros(max_nodes, dtype=np.int64)
    depth_of = np.zeros(max_nodes, dtype=np.int64)
    max_conf = np.empty(max_nodes)
    perm = np.arange(n)
    end[0] = n
    cap = max_nodes  # nodes at depth top_depth: at most 2**top_depth, and at most all nodes
    if top_depth < 62 and (1 << top_depth) < cap:
        cap = 1 << top_depth
    frontier = np.empty(cap, dtype=np.int64)
    # typed values, not the literals 0 and -1: literal arguments would compile _build_subtree once per call site
    n_front = _build_subtree(points, conformal, leaf_size, perm, lo, hi, left, right, start, end, max_conf,
                             depth_of, np.int64(0), top_depth, frontier)
    for f in nb.prange(n_front):
        _build_subtree(points, conformal, leaf_size, perm, lo, hi, left, right, start, end, max_conf, depth_of,
                       frontier[f], np.int64(-1), frontier[:0])
    return perm, lo, hi, left, right, start, end, max_conf, depth_of.max()


# --------------------------------------------------------------------------- kernels


@nb.njit(cache=True, inline="always")
def _box_sq_mindist(c, lo, hi):
    """``mindist(c, box)^2``, summed in the same order as :func:`sq_dist_row`."""
    return _box_sq_from(c, lo, hi, 0.0, 0)


@nb.njit(cache=True, inline="always")
def _box_sq_from(q, lo_row, hi_row, s, first):
    """``s`` plus the terms ``first, first + 1, ...`` of :func:`_box_sq_mindist`, in its order.

    The term ``max(lo - v, 0) + max(v - hi, 0)`` is ``lo - v``, ``v - hi`` or
    ``0`` exactly (``lo <= hi``), and adding ``0`` leaves a sum unchanged: the
    sum of the coordinates outside the box, without a branch.
    """
    for j in range(first, q.shape[0]):
        v = q[j]
        t = max(lo_row[j] - v, 0.0) + max(v - hi_row[j], 0.0)
        s += t * t
    return s


@nb.njit(cache=True, inline="always")
def _node_delta_bound(q, cq, lo, hi, max_conf, node):
    """Lower bound of ``delta(q, x)`` over the points ``x`` of ``node``: the one formula of
    every hyperbolic pruning test (module docstring, "Hyperbolic pruning").

    .. math:: \\frac{\\operatorname{mindist}(q, B)^2}{(1-\\|q\\|^2)\\, c_B}
    """
    return _box_sq_mindist(q, lo[node], hi[node]) / (cq * max_conf[node])


@nb.njit(cache=True)
def _grow_pair(keys, nodes, size):
    """Twice-as-large copies of the node buffer pair ``keys``/``nodes`` (first ``size`` entries kept)."""
    cap = max(2 * keys.shape[0], 16)
    keys2 = np.empty(cap)
    nodes2 = np.empty(cap, dtype=np.int64)
    keys2[:size] = keys[:size]
    nodes2[:size] = nodes[:size]
    return keys2, nodes2


@nb.njit(cache=True)
def _knn_tracking_one(pts, conf, perm, lo, hi, left, right, start, end, stack_size, c, q, cq, limit, track,
                      ed, ei, hd, hid):
    """One row of :func:`_knn_tracking`; fills ``ed``/``ei`` (and ``hd``/``hid``), returns the samples.

    A separate (serial) function so that its growable stack is private to the
    calling thread. Depth-first with both children pushed: the stack holds at
    most one node per tree level plus one, so ``depth + 2`` entries suffice for
    a tree built here; the stack still grows if a tree is deeper than stated.
    """
    # the arrays are the caller's: their views here need no reference counts (hypann._borrowed)
    pts, conf, perm, lo, hi, left, right = borrowed(pts), borrowed(conf), borrowed(perm), borrowed(lo), \
        borrowed(hi), borrowed(left), borrowed(right)
    start, end, c, q, ed, ei, hd, hid = borrowed(start), borrowed(end), borrowed(c), borrowed(q), borrowed(ed), \
        borrowed(ei), borrowed(hd), borrowed(hid)
    k = ed.shape[0]
    st_bound = np.empty(max(stack_size, 2))
    st_node = np.empty(max(stack_size, 2), dtype=np.int64)
    st_node[0] = 0
    st_bound[0] = _box_sq_mindist(c, lo[0], hi[0])
    sp = 1
    cnt = 0
    stop = limit <= 0
    while sp > 0 and not stop:
        sp -= 1
        node = st_node[sp]
        if st_bound[sp] >= ed[k - 1]:
            continue
        a = left[node]
        if a < 0:
            for t in range(start[node], end[node]):
                if cnt >= limit:
                    stop = True
                    break
                cnt += 1
                x = pts[t]
                e = sq_dist_row(c, x)
                if e < ed[k - 1]:
                    insert_sorted(ed, ei, e, perm[t])
                if track:
                    h = delta_row(q, cq, x, conf[t])
                    if h < hd[k - 1]:
                        insert_sorted(hd, hid, h, perm[t])
            continue
        b = right[node]
        ba = _box_sq_mindist(c, lo[a], hi[a])
        bb = _box_sq_mindist(c, lo[b], hi[b])
        if ba > bb:
            a, b = b, a
            ba, bb = bb, ba
        if sp + 2 > st_node.shape[0]:
            st_bound, st_node = _grow_pair(st_bound, st_node, sp)
        if bb < ed[k - 1]:  # farther child first, so the nearer one is popped next
            st_node[sp] = b
            st_bound[sp] = bb
            sp += 1
        if ba < ed[k - 1]:
            st_node[sp] = a
            st_bound[sp] = ba
            sp += 1
    return cnt


@nb.njit(cache=True, parallel=True)
def _knn_tracking(
    pts, conf, perm, lo, hi, left, right, start, end, stack_size, centers, k, queries, q_conf, budget, track
):
    """Euclidean k-NN of ``centers`` (depth-first, nearer child first, box pruning);
    with ``track`` also the ``delta`` top-k of ``queries`` among examined points.

    Returns ``(e_id, e_sq, h_id, h_d, samples)``: ids ``-1`` and keys ``inf``
    where fewer than k points were examined (kernel contract: :mod:`hypann.geometry._kernels`).
    """
    m = centers.shape[0]
    e_sq = np.full((m, k), np.inf)
    e_id = np.full((m, k), -1, dtype=np.int64)
    h_d = np.full((m, k), np.inf)
    h_id = np.full((m, k), -1, dtype=np.int64)
    samples = np.zeros(m, dtype=np.int64)
    for i in nb.prange(m):
        samples[i] = _knn_tracking_one(
            pts, conf, perm, lo, hi, left, right, start, end, stack_size, centers[i], queries[i], q_conf[i],
            budget[i], track, e_sq[i], e_id[i], h_d[i], h_id[i],
        )
    return e_id, e_sq, h_id, h_d, samples


@nb.njit(cache=True, inline="always")
def _heap_push(hb, hn, size, bound, node):
    """Push ``(bound, node)`` on the binary min-heap ``hb``/``hn`` of ``size`` entries.

    The caller guarantees ``size < hb.shape[0]``.
    """
    pos = size
    while pos > 0:
        parent = (pos - 1) >> 1
        if hb[parent] <= bound:
            break
        hb[pos] = hb[parent]
        hn[pos] = hn[parent]
        pos = parent
    hb[pos] = bound
    hn[pos] = node
    return size + 1


@nb.njit(cache=True, inline="always")
def _heap_pop(hb, hn, size):
    """Remove the root of the min-heap; returns the new size (the root is read before)."""
    size -= 1
    bound = hb[size]
    node = hn[size]
    pos = 0
    while True:
        child = 2 * pos + 1
        if child >= size:
            break
        if child + 1 < size and hb[child + 1] < hb[child]:
            child += 1
        if hb[child] >= bound:
            break
        hb[pos] = hb[child]
        hn[pos] = hn[child]
        pos = child
    hb[pos] = bound
    hn[pos] = node
    return size


# Initial capacity of the best-first heap of one query; it doubles when full.
_HEAP_START = 64


@nb.njit(cache=True, inline="always")
def _heap_scratch():
    """The empty best-first heap a caller of :func:`_search_exact_one` gives it: keys and nodes of
    :data:`_HEAP_START` entries."""
    return np.empty(_HEAP_START), np.empty(_HEAP_START, dtype=np.int64)


@nb.njit(cache=True, inline="always")
def _child_bounds(q, cq, lo, hi, max_conf, a, b, worst):
    """Bounds (:func:`_node_delta_bound`) of the children ``a`` and ``b``; ``inf`` for a child whose
    bound is proved ``>= worst`` from a prefix of its sum.

    The two sums run interleaved (two independent chains of additions, each in
    the order of :func:`_box_sq_mindist`). After every :data:`~hypann.geometry._kernels.ABANDON_STRIDE`
    coordinates, when both prefixes pass the cheap screen ``p > worst c_q c_B``,
    each is tested exactly: a prefix ``p`` is ``<=`` the full sum, so
    ``p / (c_q c_B) >= worst`` proves the bound ``>= worst``; a child that
    fails the exact test (rounding of the screen) has its sum finished.
    """
    d = q.shape[0]
    la = lo[a]
    ha = hi[a]
    lb = lo[b]
    hb = hi[b]
    den_a = cq * max_conf[a]
    den_b = cq * max_conf[b]
    scr_a = worst * den_a
    scr_b = worst * den_b
    sa = 0.0
    sb = 0.0
    j = 0
    while j < d:
        stop = min(j + ABANDON_STRIDE, d)
        for jj in range(j, stop):
            v = q[jj]
            ta = max(la[jj] - v, 0.0) + max(v - ha[jj], 0.0)
            tb = max(lb[jj] - v, 0.0) + max(v - hb[jj], 0.0)
            sa += ta * ta
            sb += tb * tb
        j = stop
        if j < d and sa > scr_a and sb > scr_b:
            break
    if j == d:
        return sa / den_a, sb / den_b
    ba = np.inf
    if sa / den_a < worst:
        ba = _box_sq_from(q, la, ha, sa, j) / den_a
    bb = np.inf
    if sb / den_b < worst:
        bb = _box_sq_from(q, lb, hb, sb, j) / den_b
    return ba, bb


@nb.njit(cache=True, inline="always")
def _offer(hd, hid, h, ident, seeded):
    """Insert ``(h, ident)`` into the top-k when it beats the k-th (and, seeded, is not listed yet)."""
    if h < hd[hd.shape[0] - 1] and not (seeded and _listed(hid, ident)):
        insert_sorted(hd, hid, h, ident)


@nb.njit(cache=True, inline="always")
def _scan_leaf(pts, conf, perm, first, stop, q, cq, hd, hid, seeded, alive, cnt, limit):
    """Offer the points of tree positions ``[first, stop)`` to the top-k ``hd``/``hid``; returns
    ``(samples so far, budget exhausted)``.

    The result is that of offering each point's :func:`delta_row` in turn.
    Below :data:`~hypann.geometry._kernels.LANES_MIN_DIM` coordinates, points
    go four at a time (:func:`~hypann.geometry._kernels.delta4_below`: four
    independent chains of additions, each in the order of
    :func:`sq_dist_row`, a point's sum abandoned once a prefix proves its
    ``delta`` ``>= hd[-1]``, so it could not enter the list, whose k-th value
    only decreases). From there on, each point is screened alone
    (:func:`~hypann.geometry._kernels.delta_lanes_below`: four lanes over one
    row read in order, then the exact sum of the points that pass), which
    keeps one stream of memory reads. The offers are made in tree order.
    """
    k = hd.shape[0]
    t = first
    if alive.shape[0] == 0 and q.shape[0] >= LANES_MIN_DIM:
        shrink = lanes_shrink(q.shape[0])
        while t < stop and cnt < limit:
            cnt += 1
            _offer(hd, hid, delta_lanes_below(q, cq, pts[t], conf[t], hd[k - 1], shrink), perm[t], seeded)
            t += 1
    elif alive.shape[0] == 0:
        while t + 4 <= stop and cnt + 4 <= limit:
            # inf: proved >= the k-th delta at the start, which the offers below only lower
            d0, d1, d2, d3 = delta4_below(q, cq, pts[t], conf[t], pts[t + 1], conf[t + 1], pts[t + 2], conf[t + 2],
                                          pts[t + 3], conf[t + 3], hd[k - 1])
            cnt += 4
            _offer(hd, hid, d0, perm[t], seeded)
            _offer(hd, hid, d1, perm[t + 1], seeded)
            _offer(hd, hid, d2, perm[t + 2], seeded)
            _offer(hd, hid, d3, perm[t + 3], seeded)
            t += 4
    for u in range(t, stop):
        if alive.shape[0] and not alive[u]:
            continue
        if cnt >= limit:
            return cnt, True
        cnt += 1
        _offer(hd, hid, delta_row(q, cq, pts[u], conf[u]), perm[u], seeded)
    return cnt, False


@nb.njit(cache=True)
def _search_exact_one(pts, conf, perm, lo, hi, left, right, start, end, max_conf, q, cq, limit, hd, hid, seeded,
                      alive, hb, hn):
    """One query of :func:`_search_exact`; fills ``hd``/``hid`` and returns the samples.

    With ``seeded`` the lists arrive holding candidates with their true
    ``delta`` (e.g. a graph search's answer): their k-th value prunes from the
    start, and a point already listed is not inserted twice. ``alive`` (one
    flag per tree position, or empty for "all") skips removed points; the
    node bounds stay valid lower bounds for the points left.

    Order: from the node taken off the heap the walk descends to a leaf,
    always into the child of smaller bound, and puts the other child on the
    heap (when its bound is below the current k-th ``delta``); after a leaf
    the open node of smallest bound is taken next, and the walk ends when that
    bound reaches the k-th ``delta``. So the query's own leaf comes first (a
    tight k-th ``delta`` early) and half of the heap traffic of a pure
    best-first walk is saved. Every node left out has a bound ``>=`` the k-th
    ``delta`` at that moment, which only decreases: the answer is exact.
    Bounds and distances are abandoned early (:func:`_child_bounds`,
    :func:`_scan_leaf`) with the same floating-point values as the full sums.

    A separate (serial) function: the heap starts in the caller's scratch
    ``hb``/``hn`` (:func:`_heap_scratch`) and is grown here, private to the
    calling thread. The heap grows before every push that would overflow it,
    so no capacity bound is assumed. (When the growth was written
    inline in the ``prange`` body, numba's parallel lowering turned the slice
    copies of the grown heap into nested parallel loops and the pushes then
    wrote past the end of the buffer -- also with one thread. Kernels of this
    package keep every reallocating buffer in a serial per-row function.)
    """
    # the arrays are the caller's: their views here need no reference counts (hypann._borrowed)
    pts, conf, perm, lo, hi, left, right = borrowed(pts), borrowed(conf), borrowed(perm), borrowed(lo), \
        borrowed(hi), borrowed(left), borrowed(right)
    start, end, max_conf, q, hd, hid, alive = borrowed(start), borrowed(end), borrowed(max_conf), borrowed(q), \
        borrowed(hd), borrowed(hid), borrowed(alive)
    hb, hn = borrowed(hb), borrowed(hn)  # (a grown heap is this function's own, counted)
    k = hd.shape[0]
    size = np.int64(0)  # typed from the start: numba would compile _grow_pair once more for the literal 0
    cnt = 0
    if limit <= 0 or _node_delta_bound(q, cq, lo, hi, max_conf, 0) >= hd[k - 1]:
        return cnt
    node = 0
    while True:
        # descend from ``node`` (bound below the k-th delta when it was reached) to a leaf
        while True:
            a = left[node]
            if a < 0:
                cnt, stop = _scan_leaf(pts, conf, perm, start[node], end[node], q, cq, hd, hid, seeded, alive,
                                       cnt, limit)
                if stop:
                    return cnt
                break
            b = right[node]
            worst = hd[k - 1]
            ba, bb = _child_bounds(q, cq, lo, hi, max_conf, a, b, worst)
            if bb < ba:
                a, b = b, a
                ba, bb = bb, ba
            if bb < worst:
                if size + 1 > hb.shape[0]:
                    hb, hn = _grow_pair(hb, hn, size)
                size = _heap_push(hb, hn, size, bb, b)
            if ba < worst:
                node = a
            else:
                break
        # the open node of smallest bound, unless it cannot beat the k-th delta (then none can)
        if size == 0 or hb[0] >= hd[k - 1]:
            return cnt
        node = hn[0]
        size = _heap_pop(hb, hn, size)


@nb.njit(cache=True, parallel=True)
def _first_node_starts(lo, hi, left, right, start, end, max_conf, queries, q_conf, max_points):
    """Per query, the first tree position of the node that :func:`_search_exact_one` descends into first
    and that holds at most ``max_points`` points (or is a leaf): from the root into the child of smaller
    bound (:func:`_child_bounds` with no k-th ``delta`` yet, so both sums are finished; the left one on a
    tie), as the walk's first descent goes."""
    m = queries.shape[0]
    keys = np.empty(m, dtype=np.int64)
    for i in nb.prange(m):
        q = queries[i]
        cq = q_conf[i]
        node = 0
        while left[node] >= 0 and end[node] - start[node] > max_points:
            ba, bb = _child_bounds(q, cq, lo, hi, max_conf, left[node], right[node], np.inf)
            node = right[node] if bb < ba else left[node]
        keys[i] = start[node]
    return keys


@nb.njit(cache=True, inline="always")
def _listed(ids, ident):
    """Whether ``ident`` is in the short list ``ids``."""
    for t in range(ids.shape[0]):
        if ids[t] == ident:
            return True
    return False


@nb.njit(cache=True, parallel=True)
def _search_exact(pts, conf, perm, lo, hi, left, right, start, end, max_conf, queries, q_conf, budget, out_i, out_d,
                  seeded, alive):
    """Exact ``delta`` k-NN with the hyperbolic box bound (see module docstring).

    Each query descends to a leaf through the child of smaller bound and keeps
    the other children in a min-heap keyed by their lower bound (the priority
    search of Arya & Mount); after a leaf the open node of smallest bound is
    descended from next, and the search ends when that bound reaches the k-th
    best ``delta`` (:func:`_search_exact_one`). Under a sample budget the
    query's own leaf and then the most promising open nodes are examined
    first. Returns ``(ids, deltas, samples)``, ``-1``/``inf`` pad.
    """
    m = queries.shape[0]
    samples = np.zeros(m, dtype=np.int64)
    for i in nb.prange(m):
        hb, hn = _heap_scratch()
        samples[i] = _search_exact_one(
            pts, conf, perm, lo, hi, left, right, start, end, max_conf, queries[i], q_conf[i], budget[i],
            out_d[i], out_i[i], seeded, alive, hb, hn,
        )
    return samples


@nb.njit(cache=True)
def _search_exact_serial(pts, conf, perm, lo, hi, left, right, start, end, max_conf, queries, q_conf, budget, out_i,
                         out_d, seeded, alive):
    """:func:`_search_exact` on the calling thread (small batches: no thread-pool launch)."""
    m = queries.shape[0]
    samples = np.zeros(m, dtype=np.int64)
    hb, hn = _heap_scratch()
    for i in range(m):
        samples[i] = _search_exact_one(
            pts, conf, perm, lo, hi, left, right, start, end, max_conf, queries[i], q_conf[i], budget[i],
            out_d[i], out_i[i], seeded, alive, hb, hn,
        )
    return samples


@nb.njit(cache=True)
def _search_exact_coordinates(pts, conf, perm, lo, hi, left, right, start, end, max_conf, X, c, lorentz, out_i,
                              out_d, samples):
    """One query given by its coordinates ``X`` (1, d), or (1, d+1) on the hyperboloid when ``lorentz``, in
    curvature ``-c``: its input check
    (:func:`~hypann.geometry._kernels.one_query_start`, which fills ``out_i``, ``out_d`` (1, k) and
    ``samples`` (1,) with the empty answer) and, when it is a valid point, its exact search into them as
    :func:`_search_exact_serial` does it without a budget, seeds or removed points. Returns whether ``X``
    is a valid point."""
    queries, q_conf, valid = one_query_start(X, c, lorentz, out_i, out_d, samples)
    if valid:
        hb, hn = _heap_scratch()
        # typed values, not the literals _NO_BUDGET and False: literal arguments would compile the search anew
        samples[0] = _search_exact_one(pts, conf, perm, lo, hi, left, right, start, end, max_conf, queries[0],
                                       q_conf[0], np.int64(_NO_BUDGET), out_d[0], out_i[0], np.bool_(False),
                                       np.empty(0, dtype=np.uint8), hb, hn)
    return valid


@nb.njit(cache=True)
def _seed_lists_fill(pts, conf, perm, queries, q_conf, rows, out_i, out_d):
    """Fill each query's top-k lists with its distinct seed points, by true ``delta``.

    ``rows[i]`` holds tree positions (``-1`` or out of range: none);
    ``out_i/out_d`` arrive as ``-1``/``inf`` and receive input ids
    (``perm[row]``) ascending by ``delta``. Serial: ``m * s`` distances.
    """
    n = pts.shape[0]
    k = out_i.shape[1]
    for i in range(queries.shape[0]):
        for t in range(rows.shape[1]):
            r = rows[i, t]
            if r < 0 or r >= n:
                continue
            d = delta_row(queries[i], q_conf[i], pts[r], conf[r])
            if d < out_d[i, k - 1]:
                insert_sorted_unique(out_d[i], out_i[i], d, perm[r])


@nb.njit(cache=True)
def _range_one(pts, conf, perm, lo, hi, left, right, start, end, max_conf, alive, q, cq, limit, out_i, out_d):
    """Points of one query with ``delta <= limit``, by the same hyperbolic box bound.

    Writes at most ``out_i.shape[0]`` hits (pass empty arrays to count only)
    and returns the number of hits found. Depth-first; the stack grows.
    """
    # the arrays are the caller's: their views here need no reference counts (hypann._borrowed)
    pts, conf, perm, lo, hi, left, right = borrowed(pts), borrowed(conf), borrowed(perm), borrowed(lo), \
        borrowed(hi), borrowed(left), borrowed(right)
    start, end, max_conf, alive, q, out_i, out_d = borrowed(start), borrowed(end), borrowed(max_conf), \
        borrowed(alive), borrowed(q), borrowed(out_i), borrowed(out_d)
    st = np.empty(64, dtype=np.int64)
    st[0] = 0
    sp = 1
    found = 0
    cap = out_i.shape[0]
    shrink = lanes_shrink(q.shape[0])
    above = np.nextafter(limit, np.inf)  # delta_within: h <= limit decides as delta_row's value would
    while sp > 0:
        sp -= 1
        node = st[sp]
        if _node_delta_bound(q, cq, lo, hi, max_conf, node) > limit:
            continue
        a = left[node]
        if a < 0:
            for t in range(start[node], end[node]):
                if alive.shape[0] and not alive[t]:
                    continue
                h = delta_within(q, cq, pts[t], conf[t], above, shrink)
                if h <= limit:
                    if found < cap:
                        out_i[found] = perm[t]
                        out_d[found] = h
                    found += 1
            continue
        if sp + 2 > st.shape[0]:
            grown = np.empty(2 * st.shape[0], dtype=np.int64)
            grown[:sp] = st[:sp]
            st = grown
        st[sp] = right[node]
        st[sp + 1] = a
        sp += 2
    return found


@nb.njit(cache=True, parallel=True)
def _range_count(pts, conf, perm, lo, hi, left, right, start, end, max_conf, alive, queries, q_conf, limits):
    """Hits per query of :func:`_range_one` (first pass of a range search)."""
    m = queries.shape[0]
    counts = np.zeros(m, dtype=np.int64)
    no_i = np.empty(0, dtype=np.int64)
    no_d = np.empty(0)
    for i in nb.prange(m):
        counts[i] = _range_one(pts, conf, perm, lo, hi, left, right, start, end, max_conf, alive, queries[i], q_conf[i],
                               limits[i], no_i, no_d)
    return counts


@nb.njit(cache=True, parallel=True)
def _range_fill(pts, conf, perm, lo, hi, left, right, start, end, max_conf, alive, queries, q_conf, limits, offsets,
                ids, deltas):
    """Second pass: hits of query ``i`` into ``ids/deltas[offsets[i]:offsets[i+1]]``."""
    m = queries.shape[0]
    for i in nb.prange(m):
        _range_one(pts, conf, perm, lo, hi, left, right, start, end, max_conf, alive, queries[i], q_conf[i], limits[i],
                   ids[offsets[i]:offsets[i + 1]], deltas[offsets[i]:offsets[i + 1]])


# --------------------------------------------------------------------------- tree


def _budget_array(budget, m):
    """None -> no limit; scalar or (m,) -> int64 (m,) remaining samples (negatives -> 0)."""
    if budget is None:
        return filled(m, _NO_BUDGET, np.int64)
    b = np.asarray(budget)
    if b.ndim > 1 or (b.ndim == 1 and b.shape[0] != m):
        raise ValueError(f"budget must be None, a scalar or an array of shape ({m},), got shape {b.shape}")
    if b.dtype.kind not in "iuf" or (b.dtype.kind == "f" and not np.all(np.isfinite(b))):
        raise ValueError(f"budget must hold finite numbers, got dtype={b.dtype}")
    out = np.empty(m, dtype=np.int64)  # a fresh writable array: one numba signature
    out[:] = np.maximum(b, 0)
    return out



def _check_point_values(pts, conf, perm, points, conformal, bad):
    """Full check of a stored tree's point arrays (see :meth:`HyperbolicKDTree.validate_state`)."""
    n = pts.shape[0]
    if not np.all((conf > 0.0) & (conf <= 1.0)):
        t = first_bad(~((conf > 0.0) & (conf <= 1.0)))
        raise bad("conformal", f"conformal factors 1-|x|^2 must be in (0, 1], got {conf[t]!r} at position {t}")
    if not np.all((perm >= 0) & (perm < n)):
        t = first_bad((perm < 0) | (perm >= n))
        raise bad("indices", f"ids must be in [0, {n}), got {int(perm[t])} at position {t}")
    seen = np.bincount(perm, minlength=n)
    if not np.all(seen == 1):
        raise bad("indices", f"must be a permutation of 0..{n - 1}, but id {first_bad(seen != 1)} appears "
                             f"{int(seen[first_bad(seen != 1)])} times")
    if points is not None:
        if not np.array_equal(pts, np.asarray(points)[perm]):
            raise bad("points", "the tree's copy of the points is not the index's points permuted by 'indices'")
    if conformal is not None and not np.array_equal(conf, np.asarray(conformal)[perm]):
        raise bad("conformal", "the tree's conformal factors are not those of the index's points "
                               "permuted by 'indices'")


def _check_tree_shape(n, left, right, start, end, bad):
    """The nodes form one tree rooted at 0 whose leaves partition ``[0, n)`` (O(n_nodes))."""
    n_nodes = left.shape[0]
    for field, child in (("left", left), ("right", right)):
        out = (child < -1) | (child >= n_nodes)
        if out.any():
            i = first_bad(out)
            raise bad(field, f"child ids must be in [-1, {n_nodes}), got {int(child[i])} at node {i}")
    is_leaf = left < 0
    if np.any(is_leaf != (right < 0)):
        i = first_bad(is_leaf != (right < 0))
        raise bad("right", f"node {i} has left={int(left[i])} and right={int(right[i])}: "
                           "a node has two children (both ids valid) or none (both -1)")
    parents = np.flatnonzero(~is_leaf)
    for field, child in (("left", left), ("right", right)):
        back = child[parents] <= parents
        if back.any():
            p = int(parents[first_bad(back)])
            raise bad(field, f"child {int(child[p])} of node {p} must have a larger id than its parent "
                             "(the tree must be acyclic)")
    n_parents = np.bincount(np.concatenate([left[parents], right[parents]]), minlength=n_nodes)
    if np.any(n_parents[1:] != 1):
        j = first_bad(n_parents[1:] != 1) + 1
        raise bad("left", f"node {j} is a child of {int(n_parents[j])} nodes; every node but the root "
                          "(0) must be the child of exactly one node")
    lc, rc = left[parents], right[parents]
    if start[0] != 0 or end[0] != n:
        raise bad("start" if start[0] != 0 else "end",
                  f"the root must cover [0, {n}), got [{int(start[0])}, {int(end[0])})")
    if np.any(start >= end):
        i = first_bad(start >= end)
        raise bad("end", f"node {i} has an empty range [{int(start[i])}, {int(end[i])})")
    for field, ok, what in (
        ("start", start[lc] == start[parents], "its left child must start where the node starts"),
        ("end", end[lc] == start[rc], "its left child must end where its right child starts"),
        ("end", end[rc] == end[parents], "its right child must end where the node ends"),
    ):
        if not ok.all():
            p = int(parents[first_bad(~ok)])
            raise bad(field, f"node {p} covers [{int(start[p])}, {int(end[p])}) but {what} "
                             f"(children [{int(start[left[p]])}, {int(end[left[p]])}) and "
                             f"[{int(start[right[p]])}, {int(end[right[p]])}))")


def _check_tree_bounds(pts, conf, lo, hi, max_conf, left, right, start, end, bad):
    """Every node's box and ``max_conformal`` bound the points below it (reads every point)."""
    n = pts.shape[0]
    is_leaf = left < 0
    parents = np.flatnonzero(~is_leaf)
    lc, rc = left[parents], right[parents]
    # -- bounds hold every point below them
    for field, a in (("lo", lo), ("hi", hi), ("max_conformal", max_conf)):
        if not np.isfinite(a).all():
            raise bad(field, f"contains NaN or inf (first at {first_bad(~np.isfinite(a))})")
    if np.any(lo > hi):
        i, j = first_bad(lo > hi)
        raise bad("hi", f"node {i} has lo > hi in coordinate {j} ({lo[i, j]!r} > {hi[i, j]!r})")
    for child in (lc, rc):
        for field, ok in (
            ("lo", lo[child] >= lo[parents]),
            ("hi", hi[child] <= hi[parents]),
            ("max_conformal", max_conf[child] <= max_conf[parents]),
        ):
            if not ok.all():
                r = first_bad(~ok)
                r = r[0] if isinstance(r, tuple) else r
                raise bad(field, f"the bound of node {int(child[r])} is not inside that of its parent "
                                 f"{int(parents[r])}")
    leaves = np.flatnonzero(is_leaf)
    leaves = leaves[np.argsort(start[leaves], kind="stable")]
    leaf_of = np.repeat(leaves, end[leaves] - start[leaves])  # length n: the leaves partition [0, n)
    block = 1 << 16
    for s in range(0, n, block):
        own = leaf_of[s : s + block]
        x = pts[s : s + block]
        for field, inside in (("lo", x >= lo[own]), ("hi", x <= hi[own])):
            if not inside.all():
                t = s + first_bad(~inside.all(axis=1))
                raise bad(field, f"the point at position {t} lies outside the box of its leaf {int(leaf_of[t])}")
        below = conf[s : s + block] <= max_conf[own]
        if not below.all():
            t = s + first_bad(~below)
            raise bad("max_conformal", f"the conformal factor of the point at position {t} exceeds the "
                                       f"max_conformal of its leaf {int(leaf_of[t])}")


def _compact_permutation(perm):
    """``perm`` as int32 when every id fits (``n < 2**31``), else unchanged (int64): 4 bytes a point less."""
    if perm.shape[0] <= np.iinfo(np.int32).max:
        return perm.astype(np.int32, copy=False)
    return perm


class HyperbolicKDTree:
    """kd-tree over Poincare points that counts samples and can rank by ``delta``.

    Parameters
    ----------
    leaf_size : int, default 16
        Largest number of points in a leaf. Nodes are split along their
        widest coordinate, at the multiple of ``leaf_size`` points nearest to
        the median (every leaf but one is full).

    Attributes
    ----------
    points_ : ndarray of shape (n, d), float64 or float32
        The points in tree order (a permuted copy, in the dtype given to :meth:`build`).
    conformal_ : ndarray of shape (n,)
        Their stored conformal factors ``1-|x|^2``.
    indices_ : ndarray of shape (n,), int32 (int64 for ``n >= 2**31``)
        ``points_[t]`` is input row ``indices_[t]``. Also a file's int64 ids (written before int32 was
        stored) become int32 when loaded.
    n_nodes_, depth_ : int

    The arrays of the tree (these and the nodes') are read-only views.

    Examples
    --------
    >>> import numpy as np
    >>> from hypann.geometry._kernels import conformal_factor
    >>> X = np.random.default_rng(0).uniform(-0.5, 0.5, (1000, 3))
    >>> tree = HyperbolicKDTree(leaf_size=8).build(X, conformal_factor(X))
    >>> ids, deltas, samples = tree.search_exact(X[:2], conformal_factor(X[:2]), 1)
    >>> ids[:, 0].tolist()
    [0, 1]
    """

    #: kernels every build runs (their on-disk cache shows whether a first build compiles)
    first_use_kernels = (_build_tree,)

    def __init__(self, *, leaf_size: int = 16):
        self.leaf_size = leaf_size

    def build(self, points, conformal, *, in_place=False):
        """Build the tree on validated float64 or float32 ``points`` (n, d) with their stored ``conformal``.

        The tree keeps a permuted copy of ``points`` in their dtype (float32
        points stay float32; all arithmetic on them is float64, see the
        module docstring), so the caller may drop its own copy and get the
        points back with :meth:`points_in_input_order`.

        Parameters
        ----------
        points : ndarray of shape (n, d), float64 or float32
        conformal : ndarray of shape (n,)
        in_place : bool, default False
            Put ``points`` and ``conformal`` themselves in tree order and keep
            them (no copy) when they are writeable, C-contiguous arrays of the
            stored dtypes; the caller must not use them afterwards. Otherwise
            (and by default) the tree makes its own copy.

        Returns
        -------
        self
        """
        leaf_size = check_positive_int(self.leaf_size, "leaf_size")
        given = points, conformal
        points, conformal = check_stored_points(points, conformal, allow_float32=True)
        # subtrees below depth top_depth are built in parallel (same tree for any value)
        top_depth = max(1, int(np.ceil(np.log2(4 * nb.get_num_threads()))))
        out = dict(zip(_STATE[2:], _build_tree(read_only(points), read_only(conformal), leaf_size, top_depth)[:-1]))
        perm = out["indices"]
        reuse = in_place and all(  # the caller's own arrays, not converted copies of them
            isinstance(b, np.ndarray) and b.flags.writeable and a.dtype == b.dtype and a.shape == b.shape
            and a.flags.c_contiguous and b.flags.c_contiguous and a.ctypes.data == b.ctypes.data
            for a, b in zip((points, conformal), given))
        if reuse:
            points, conformal = given
            gather_points_in_place(points, conformal, perm)
            out["points"], out["conformal"] = points, conformal
        else:
            out["points"], out["conformal"] = points[perm], conformal[perm]
        self._set_state(out)  # (which makes the ids int32)
        return self

    def _set_state(self, arrays):
        # read-only views, whether the arrays are the build's own (writable) or a loaded file's (read-only), and
        # int32 ids also from files of before they were stored so: numba compiles each search kernel once per
        # array type (a kernel of some 10 s), and the kernels only read the tree
        for name in _STATE:
            array = np.ascontiguousarray(arrays[name])
            setattr(self, name + "_", read_only(_compact_permutation(array) if name == "indices" else array))
        self.n_points_, self.dim_ = self.points_.shape
        self.n_nodes_ = int(self.left_.shape[0])
        # depth from the arrays, one level at a time (the arrays form a tree: checked or built here)
        level, depth = np.zeros(1, dtype=np.int64), -1
        while level.size:
            depth += 1
            inner = level[self.left_[level] >= 0]
            level = np.concatenate([self.left_[inner], self.right_[inner]])
        self.depth_ = depth

    def __setstate__(self, state):
        # an unpickled array is writable: back to read-only views (see _set_state)
        self.__dict__.update(state)
        for name in _STATE:
            if isinstance(state.get(name + "_"), np.ndarray):
                setattr(self, name + "_", read_only(state[name + "_"]))

    def to_arrays(self) -> dict:
        """The fitted tree as a dict of arrays (for :func:`numpy.savez`); see :meth:`from_arrays`."""
        out = {name: getattr(self, name + "_") for name in _STATE}
        out["leaf_size"] = np.int64(self.leaf_size)
        return out

    @classmethod
    def from_arrays(cls, arrays, *, points=None, conformal=None, full=True):
        """Rebuild a fitted tree from :meth:`to_arrays` output (or an ``np.load`` of it).

        The arrays are untrusted (e.g. read from a file): they go through
        :meth:`validate_state` first, so a damaged state raises ``ValueError``
        naming the field instead of crashing or answering wrongly.

        Parameters
        ----------
        arrays : mapping of str to ndarray
        points, conformal : ndarray, optional
            The points (n, d) and conformal factors (n,) the tree must index, in
            input order; when given, the tree's copies must equal them permuted
            by ``indices``.
        full : bool, default True
            ``False``: structural checks only (see :meth:`validate_state`).
        """
        arrays = cls.validate_state(arrays, points=points, conformal=conformal, full=full)
        tree = cls(leaf_size=int(arrays["leaf_size"]))
        tree._set_state(arrays)
        return tree

    @staticmethod
    def validate_state(arrays, *, points=None, conformal=None, full=True) -> dict:
        """Check a stored tree completely; returns its arrays (C-contiguous, exact dtypes).

        Checked, in this order (every failure is a ``ValueError`` naming the field):

        * names: exactly those of :meth:`to_arrays`; dtypes (int64 / float64;
          ``indices`` int32 or int64)
          and shapes consistent with ``n`` points, ``d`` dimensions and
          ``n_nodes`` nodes; ``leaf_size >= 1``;
        * ``points`` finite, ``conformal`` in ``(0, 1]``; ``indices`` a
          permutation of ``0..n-1``; with ``points``/``conformal`` given,
          ``points_[t] == points[indices[t]]`` and likewise ``conformal``;
        * shape of the tree: ``left``/``right`` in ``[-1, n_nodes)``, both
          ``-1`` (leaf) or both valid, children ids larger than their parent's
          and every node except the root the child of exactly one node -- so
          the nodes form one tree rooted at node 0 and every node is reached
          exactly once;
        * ranges: the root covers ``[0, n)``, every range is non-empty and an
          internal node's range is its left child's followed by its right
          child's (hence the leaves partition ``[0, n)``);
        * bounds: ``lo``/``hi``/``max_conformal`` finite, ``lo <= hi``, every
          point inside its leaf's box with ``conformal <= max_conformal`` of
          the leaf, and child boxes and ``max_conformal`` inside / below their
          parent's. By induction every node's box holds all its points and its
          ``max_conformal`` bounds their conformal factors, which is what makes
          the pruning of :meth:`search_exact` exact.

        ``points`` may be float32 or float64 (float32 storage); ``lo``/``hi``
        must then have the same dtype. With ``full=False`` (a memory-mapped
        file loaded with ``verify="structure"``) only what the kernels need to
        stay inside their arrays is checked: names, dtypes, shapes,
        ``leaf_size``, the tree's shape and ranges, and ``max_conformal`` in
        ``(0, 1]`` -- all ``O(n_nodes)``. Nothing that reads every point
        (values, the permutation, the boxes) is checked then: a damaged file
        cannot make a kernel read or write out of bounds, but may give wrong
        answers; the file's checksum (``verify="full"``) catches that.
        """
        owner = "HyperbolicKDTree"
        check_state_fields(arrays, (*_STATE, "leaf_size"), owner)

        def get(field, dtype, shape):
            return check_state_array(arrays, field, dtype, shape, owner)

        def bad(field, message):
            return state_error(owner, field, message)

        leaf_size = get("leaf_size", np.int64, ())
        if leaf_size < 1:
            raise bad("leaf_size", f"must be >= 1, got {int(leaf_size)}")
        raw_points = arrays["points"]
        point_dtype = np.float32 if getattr(raw_points, "dtype", None) == np.float32 else np.float64
        pts = get("points", point_dtype, (None, None))
        n, d = pts.shape
        if n < 1 or d < 1:
            raise bad("points", f"must hold at least one point of at least one dimension, got shape {pts.shape}")
        if points is not None and np.shape(points) != (n, d):
            raise bad("points", f"must have the shape of the index's points {np.shape(points)}, got {pts.shape}")
        if full and not np.isfinite(pts).all():
            raise bad("points", f"contains NaN or inf (first at {first_bad(~np.isfinite(pts))})")
        conf = get("conformal", np.float64, (n,))
        # int32 ids (written since they are stored that way, n < 2**31) or int64 (older files, larger n)
        perm_dtype = np.int32 if getattr(arrays["indices"], "dtype", None) == np.int32 else np.int64
        perm = get("indices", perm_dtype, (n,))
        if full:
            _check_point_values(pts, conf, perm, points, conformal, bad)

        node_fields = ("left", "right", "start", "end", "lo", "hi", "max_conformal")
        n_nodes = common_length(arrays, node_fields)
        if n_nodes < 1:
            raise bad("left", f"the tree must have at least one node, got {n_nodes}")
        left = get("left", np.int64, (n_nodes,))
        right = get("right", np.int64, (n_nodes,))
        start = get("start", np.int64, (n_nodes,))
        end = get("end", np.int64, (n_nodes,))
        lo = get("lo", point_dtype, (n_nodes, d))
        hi = get("hi", point_dtype, (n_nodes, d))
        max_conf = get("max_conformal", np.float64, (n_nodes,))
        _check_tree_shape(n, left, right, start, end, bad)
        if full:
            _check_tree_bounds(pts, conf, lo, hi, max_conf, left, right, start, end, bad)
        elif not np.all((max_conf > 0.0) & (max_conf <= 1.0)):
            i = first_bad(~((max_conf > 0.0) & (max_conf <= 1.0)))
            raise bad("max_conformal", f"must be in (0, 1], got {max_conf[i]!r} at node {i}")
        out = {"points": pts, "conformal": conf, "indices": perm, "lo": lo, "hi": hi, "left": left,
               "right": right, "start": start, "end": end, "max_conformal": max_conf, "leaf_size": leaf_size}
        return out


    def points_in_input_order(self):
        """``(points, conformal)`` in input row order: new arrays, gathered through ``indices_``."""
        self._check_fitted()
        pos = inverse_permutation(self.indices_)
        return self.points_[pos], self.conformal_[pos]

    def conformal_in_input_order(self):
        """The ``conformal`` of :meth:`points_in_input_order` alone (without gathering the points)."""
        self._check_fitted()
        return self.conformal_[inverse_permutation(self.indices_)]

    @property
    def nbytes(self) -> int:
        """Memory held by the tree's arrays (bytes), including the point copy."""
        return int(sum(getattr(self, name + "_").nbytes for name in _STATE))

    def _check_fitted(self):
        if not hasattr(self, "points_"):
            raise ValueError(f"this {type(self).__name__} is not built yet; call build(points, conformal) first")

    def _rows(self, x, name):
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim != 2 or x.shape[1] != self.dim_:
            raise ValueError(f"{name} must have shape (m, {self.dim_}), got {x.shape}")
        return x

    def knn_tracking(self, centers, k, queries, q_conformal, budget=None) -> TrackingResult:
        """Euclidean k-NN of ``centers`` that also keeps the hyperbolic top-k of ``queries``.

        The paper's modified kd-tree: the traversal (depth-first, nearer child
        first) and its pruning (box distance against the current k-th
        Euclidean distance) are purely Euclidean around ``centers[i]``; every
        point examined also has its ``delta(queries[i], x)`` computed and
        offered to a hyperbolic top-k.

        Parameters
        ----------
        centers : ndarray of shape (m, d)
            Euclidean query points (e.g. recentred ball centres).
        k : int
            Neighbours per row, for both lists.
        queries : ndarray of shape (m, d)
            Hyperbolic query points, one per centre.
        q_conformal : ndarray of shape (m,)
            Their stored ``1-|q|^2``.
        budget : None, int or ndarray of shape (m,)
            Remaining samples per row; the traversal stops as soon as that many
            points have been examined. ``None``: no limit (exact Euclidean k-NN).

        Returns
        -------
        TrackingResult
            ``(euclid_sq, euclid_ids, hyp_ids, hyp_delta, samples)``; ``samples[i]
            <= budget[i]`` exactly.
        """
        self._check_fitted()
        k = check_positive_int(k, "k")
        centers = self._rows(centers, "centers")
        queries = self._rows(queries, "queries")
        m = centers.shape[0]
        q_conformal = np.ascontiguousarray(q_conformal, dtype=np.float64)
        if queries.shape[0] != m or q_conformal.shape != (m,):
            raise ValueError(
                f"centers, queries and q_conformal must have m={m} rows, got {queries.shape[0]} and "
                f"{q_conformal.shape}"
            )
        e_id, e_sq, h_id, h_d, samples = _knn_tracking(
            self.points_, self.conformal_, self.indices_, self.lo_, self.hi_, self.left_, self.right_,
            self.start_, self.end_, self.depth_ + 2, centers, k, queries, q_conformal,
            _budget_array(budget, m), True,
        )
        return TrackingResult(e_sq, e_id, h_id, h_d, samples)

    def knn(self, centers, k, budget=None):
        """Plain Euclidean k-NN: ``(sq_dist, ids, samples)`` (no hyperbolic tracking)."""
        self._check_fitted()
        k = check_positive_int(k, "k")
        centers = self._rows(centers, "centers")
        m = centers.shape[0]
        e_id, e_sq, _, _, samples = _knn_tracking(
            self.points_, self.conformal_, self.indices_, self.lo_, self.hi_, self.left_, self.right_,
            self.start_, self.end_, self.depth_ + 2, centers, k, centers, np.ones(m),
            _budget_array(budget, m), False,
        )
        return e_sq, e_id, samples

    def search_exact(self, queries, q_conformal, k, budget=None, *, seed_ids=None, seed_rows=None,
                     removed=None) -> KNNResult:
        """Exact hyperbolic k-NN by ``delta`` with hyperbolic box pruning.

        A node is skipped when the lower bound

        .. math::

            \\frac{\\operatorname{mindist}(q, B)^2}{(1-\\|q\\|^2)\\,\\max_{x \\in B}(1-\\|x\\|^2)}

        is ``>=`` the current k-th smallest ``delta``. From the root the walk
        descends into the child of smaller bound and keeps the other on a heap;
        after each leaf it resumes at the open node of smallest bound, and it
        ends when that bound reaches the k-th ``delta`` (see
        :func:`_search_exact_one`). Under a ``budget`` the query's own leaf
        and then the most promising open nodes get the samples.

        Parameters
        ----------
        queries : ndarray of shape (m, d)
        q_conformal : ndarray of shape (m,)
            Stored ``1-|q|^2`` of the queries.
        k : int
        budget : None, int or ndarray of shape (m,)
            Optional sample limit per query (then the answer may be inexact).
        seed_ids : ndarray of shape (m, s), int, optional
            Candidate ids per query (``-1`` for none), e.g. an approximate
            graph search's answer. Their ``delta`` is recomputed here and the
            best ``k`` of them start the search, so the tree prunes with their
            k-th ``delta`` from the first node on. The answer is exact whatever
            the seeds are; good seeds only make it cheaper.
        seed_rows : ndarray of shape (m, s), int, optional
            Seeds given as tree positions (rows of ``points_``) instead of
            input ids: what a graph built on the tree's own points returns.
        removed : ndarray of shape (n,), bool, optional
            Input rows to skip (deleted points), by input row id.

        Returns
        -------
        KNNResult
            ``(ids, deltas, samples)``; ids int64 (m, k) and deltas ascending,
            ``-1`` / ``inf`` where fewer than k points exist. Ties in ``delta``
            may be resolved by any of the tied ids. ``samples`` counts the
            points examined by the tree (not the seeds).
        """
        self._check_fitted()
        k = check_positive_int(k, "k")
        queries, q_conformal = check_stored_queries(queries, q_conformal, self.dim_)
        m = queries.shape[0]
        out_i = filled((m, k), -1, np.int64)
        out_d = filled((m, k), np.inf)
        if seed_ids is not None and seed_rows is not None:
            raise ValueError("give seed_ids or seed_rows, not both")
        seeded = seed_ids is not None or seed_rows is not None
        if seeded:
            positions = seed_rows is not None
            out_i, out_d = self._seed_lists(queries, q_conformal, k, seed_rows if positions else seed_ids,
                                            positions=positions)
        kernel = _search_exact if m > SERIAL_MAX_QUERIES else _search_exact_serial
        samples = kernel(
            self.points_, self.conformal_, self.indices_, self.lo_, self.hi_, self.left_, self.right_,
            self.start_, self.end_, self.max_conformal_, queries, q_conformal, _budget_array(budget, m),
            out_i, out_d, seeded, self._alive(removed),
        )
        return KNNResult(out_i, out_d, samples)

    def query_order(self, queries, q_conformal):
        """The order in which to search a batch: grouped by the first node of at most
        :data:`~hypann._runtime.ORDER_NODE_POINTS` points that each query's walk descends into, in tree order
        (:func:`_first_node_starts`; a stable sort, so queries of one node keep their order).

        Consecutive queries then read the same part of the tree and of the points, which the cache still
        holds; the answer of every query is the same in any order.

        Returns
        -------
        ndarray of shape (m,), int64
            A permutation of ``range(m)``: search ``queries[order]``.
        """
        self._check_fitted()
        queries, q_conformal = check_stored_queries(queries, q_conformal, self.dim_)
        keys = _first_node_starts(self.lo_, self.hi_, self.left_, self.right_, self.start_, self.end_,
                                  self.max_conformal_, queries, q_conformal, ORDER_NODE_POINTS)
        return np.argsort(keys, kind="stable")

    def search_coordinates(self, X, c, k, *, model="poincare") -> KNNResult | None:
        """One query given by its coordinates, checked and searched exactly in one compiled call.

        The fast path of a one-query call (:meth:`hypann.HyperbolicIndex.search`):
        the same answer as :func:`hypann._validation.check_points` followed by
        :meth:`search_exact` (no budget, seeds or removed points), without the
        layers between them.

        Parameters
        ----------
        X : ndarray of shape (1, d), or (1, d+1) for ``model="lorentz"``, float64 or float32
            The query in the ball (or on the hyperboloid) of curvature ``-c``
            (``d`` = :attr:`dim_`).
        c : float
            Curvature magnitude of ``X``.
        k : int
            Neighbours.
        model : {"poincare", "lorentz"}, default "poincare"
            The model of ``X``; a hyperboloid row is taken to the unit ball
            as the input check does it
            (:func:`hypann.geometry._kernels.lorentz_points`, the same bits).

        Returns
        -------
        KNNResult or None
            ``None`` when ``X`` is not a valid point (not finite, or not inside
            the ball): the checked path reports what is wrong.
        """
        self._check_fitted()
        k, c = check_query_coordinates(X, self.dim_, k, c, model)
        found = self.one_query_function(c, model == "lorentz")(X, k)
        return None if found is None else KNNResult(*found)

    def one_query_function(self, c, lorentz):
        """``run(X, k)``: :meth:`search_coordinates`'s ``(ids, deltas, samples)`` (or ``None``) for the curvature
        ``c`` and ``lorentz``, with the tree's arrays gathered once. The caller checks the arguments: ``X`` a
        float64 or float32 array of shape (1, d), or (1, d+1) on the hyperboloid when ``lorentz``; ``c`` a
        finite float > 0; ``k`` a positive int. The one-query path of :meth:`hypann.HyperbolicIndex.search`
        keeps it for its build and calls it for every query. Only for callers that checked them: unchecked,
        the kernel could read outside its arrays."""
        self._check_fitted()
        arrays = (self.points_, self.conformal_, self.indices_, self.lo_, self.hi_, self.left_, self.right_,
                  self.start_, self.end_, self.max_conformal_)
        kernel = OneQueryKernel(_search_exact_coordinates)  # every argument but X keeps its type

        def run(X, k):
            ids, deltas, samples = one_query_arrays(k)
            valid = kernel(X, *arrays, X, c, lorentz, ids, deltas, samples)
            return (ids, deltas, samples) if valid else None

        return run

    def _alive(self, removed):
        """Per tree position: 1 for points to consider; empty when none is removed."""
        if removed is None:
            return np.empty(0, dtype=np.uint8)
        removed = np.asarray(removed, dtype=bool)
        if removed.shape != (self.n_points_,):
            raise ValueError(f"removed must have shape ({self.n_points_},), got {removed.shape}")
        return np.ascontiguousarray(~removed[self.indices_], dtype=np.uint8)

    def _seed_lists(self, queries, q_conformal, k, seeds, *, positions=False):
        """Best ``k`` distinct valid seeds per row with their true ``delta``; ``-1``/``inf`` pad.

        ``seeds``: input ids, or tree positions with ``positions=True``;
        ``-1`` and ids out of range are ignored.
        """
        m = queries.shape[0]
        name = "seed_rows" if positions else "seed_ids"
        seeds = np.asarray(seeds)
        if seeds.ndim != 2 or seeds.shape[0] != m or seeds.dtype.kind not in "iu":
            raise ValueError(f"{name} must be an integer array of shape ({m}, s), got {seeds.dtype} {seeds.shape}")
        seeds = seeds.astype(np.int64)
        if positions:
            rows = seeds
        else:  # the stored points are in tree order
            valid = (seeds >= 0) & (seeds < self.n_points_)
            pos = np.empty(self.n_points_, dtype=np.int64)
            pos[self.indices_] = np.arange(self.n_points_)
            rows = np.where(valid, pos[np.where(valid, seeds, 0)], -1)
        out_d = np.full((m, k), np.inf)
        out_i = np.full((m, k), -1, dtype=np.int64)
        _seed_lists_fill(self.points_, self.conformal_, self.indices_, queries, q_conformal,
                         np.ascontiguousarray(rows), out_i, out_d)
        return out_i, out_d

    def search_radius(self, queries, q_conformal, delta_limit, *, removed=None):
        """All points with ``delta(q, x) <= delta_limit[i]`` for each query: exact range search.

        Nodes are pruned with the same lower bound as :meth:`search_exact`
        (``mindist^2 / (cq * max_conformal) > limit``), which never exceeds the
        computed ``delta`` of a point of the node, so no point is missed. Two
        passes (count, then fill), so no buffer is sized by a guess.

        Parameters
        ----------
        queries : ndarray of shape (m, d)
        q_conformal : ndarray of shape (m,)
        delta_limit : ndarray of shape (m,)
            Largest ``delta`` to report per query (``>= 0``).
        removed : ndarray of shape (n,), bool, optional
            Input rows to skip (deleted points).

        Returns
        -------
        offsets : ndarray of shape (m+1,), int64
            Hits of query ``i`` are ``ids[offsets[i]:offsets[i+1]]``.
        ids : ndarray of int64
        deltas : ndarray of float64
            Sorted ascending within each query.
        """
        self._check_fitted()
        queries, q_conformal = check_stored_queries(queries, q_conformal, self.dim_)
        m = queries.shape[0]
        limits = np.ascontiguousarray(np.broadcast_to(np.asarray(delta_limit, dtype=np.float64), (m,)))
        arrays = (self.points_, self.conformal_, self.indices_, self.lo_, self.hi_, self.left_, self.right_,
                  self.start_, self.end_, self.max_conformal_, self._alive(removed))
        counts = _range_count(*arrays, queries, q_conformal, limits)
        offsets = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        ids = np.empty(offsets[-1], dtype=np.int64)
        deltas = np.empty(offsets[-1])
        _range_fill(*arrays, queries, q_conformal, limits, offsets, ids, deltas)
        owner = np.repeat(np.arange(m), counts)
        order = np.lexsort((ids, deltas, owner))
        return offsets, ids[order], deltas[order]

    def __repr__(self):
        fitted = f", n_points={self.n_points_}, dim={self.dim_}, n_nodes={self.n_nodes_}" if hasattr(
            self, "points_"
        ) else ""
        return f"{type(self).__name__}(leaf_size={self.leaf_size}{fitted})"


# --------------------------------------------------------------------------- oracle


class HyperbolicKDTreeOracle(EuclideanOracle):
    """Exact Euclidean oracle on :class:`HyperbolicKDTree` that counts samples.

    As an ordinary oracle it answers Euclidean ``knn`` and reports the points
    examined per query. Algorithms that know about it (Recentering) call
    :meth:`knn_tracking` instead, which also returns the hyperbolic best of
    every examined point, and pass a per-query sample ``budget``.

    Parameters
    ----------
    leaf_size : int, default 16
    """

    name = "hkdtree"
    exact = True
    counts_evaluations = True
    supports_budget = True
    thread_safe = True
    uses_conformal = True
    supports_tracking = True
    build_settings = (Param("leaf_size", "int", 16, "points per leaf of the kd-tree", low=1),)

    def __init__(self, *, leaf_size: int = 16):
        self.leaf_size = leaf_size

    def _build(self, points):
        self.tree_ = HyperbolicKDTree(leaf_size=self.leaf_size).build(points, _kernels.conformal_factor(points))

    def build_with_conformal(self, points, conformal):
        """Index ``points`` with their stored conformal factors (not recomputed); returns self."""
        self._check_settings()
        points = np.ascontiguousarray(points, dtype=np.float64)
        self.n_points_, self.dim_ = points.shape
        self.tree_ = HyperbolicKDTree(leaf_size=self.leaf_size).build(points, conformal)
        return self

    def _knn(self, queries, k, budget=None):
        sq, ids, samples = self.tree_.knn(queries, k, budget)
        return EuclideanNeighbors(sq, ids, samples)

    def knn_tracking(self, centers, k, queries, q_conformal, budget=None) -> TrackingResult:
        """See :meth:`HyperbolicKDTree.knn_tracking`."""
        return self.tree_.knn_tracking(centers, k, queries, q_conformal, budget)

    def search_exact(self, queries, q_conformal, k, budget=None, **options) -> KNNResult:
        """See :meth:`HyperbolicKDTree.search_exact`."""
        return self.tree_.search_exact(queries, q_conformal, k, budget, **options)

    @property
    def nbytes(self):
        return self.tree_.nbytes if hasattr(self, "tree_") else 0

    def spec(self):
        return f"hkdtree:leaf_size={self.leaf_size}"


# The oracle registry is one layer down and cannot import this module: the
# module that defines the built-in "hkdtree" oracle registers it.
register_oracle("hkdtree", HyperbolicKDTreeOracle)
