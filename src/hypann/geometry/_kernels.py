"""Numba twins of the hot formulas in :mod:`hypann.geometry.poincare`.

Same names and the same arithmetic as the numpy reference (tested against it);
no ``fastmath`` anywhere: distance code must not be reassociated.

Every hyperbolic comparison in the package goes through :func:`delta_row`,
which takes ``(q, cq, x, cx)``: a point with its stored conformal factor
``1-|q|^2``, so no kernel ever recomputes a norm.

Kernel contract
---------------
Every k-nearest-neighbour kernel of the package (here, in the oracles, the
kd-tree and the graphs) follows one convention:

* it returns ``(ids, keys, ...)`` -- ids first, then their keys, then any
  per-query counters (``evaluations``, ``samples``); a kernel that fills
  caller-owned buffers takes them in the same order (``out_i, out_d``);
* ``ids`` is ``(m, k)`` int64 and ``keys`` ``(m, k)`` float64, each row
  ascending by key (ties: the order in which the points were met, which is
  the lower index for a scan in index order);
* a slot with no result holds id ``-1`` and key ``+inf``, always together
  and always after every real result;
* the key is ``delta = |q-x|^2 / ((1-|q|^2)(1-|x|^2))`` for hyperbolic
  kernels and ``|q-x|^2`` for Euclidean ones; distances are formed outside
  the kernels, in one place (:func:`hypann.geometry.poincare.dist_from_delta`).

The top-k lists are kept by :func:`insert_sorted` (and
:func:`insert_sorted_unique`, which skips an id already listed).

A search kernel that runs ``prange`` over queries has a serial twin
(``*_serial``) sharing its per-query body, used for batches of at most
:data:`hypann._runtime.SERIAL_MAX_QUERIES` queries: a thread-pool launch
costs more than one query's search, and waits for a busy core.
"""

from __future__ import annotations

import numba as nb
import numpy as np
from numba.core import types
from numba.extending import overload

from hypann.geometry._vector_lanes import (LANE_BLOCK, ROW_LANES, add_row_squares4, add_row_squares8,
                                          block_square_sum, narrow_square_sums, split_square_block_sums,
                                          split_square_sums)

_SPLITTER = 134217729.0  # 2**27 + 1, Veltkamp split for Dekker's exact product


@nb.njit(cache=True, inline="always")
def _sum_sq_dd(x):
    """``|x|^2`` as a double-double ``hi + lo``: Dekker's exact square of each
    coordinate, summed with Knuth's TwoSum (errors gathered in ``lo``)."""
    hi = 0.0
    lo = 0.0
    for j in range(x.shape[0]):
        a = x[j]
        p = a * a
        t = _SPLITTER * a
        ah = t - (t - a)
        al = a - ah
        e = ((ah * ah - p) + 2.0 * ah * al) + al * al
        s = hi + p
        bb = s - hi
        e2 = (hi - (s - bb)) + (p - bb)
        hi = s
        lo += e + e2
    return hi, lo


@nb.njit(cache=True, inline="always")
def _conformal_row(x):
    hi, lo = _sum_sq_dd(x)
    r = 1.0 - hi
    bb = r - 1.0
    e = (1.0 - (r - bb)) + (-hi - bb)
    return r + (e - lo)


@nb.njit(cache=True, parallel=True)
def conformal_factor(X):
    """Compensated ``1 - |x|^2`` for each row of ``X`` (n, d)."""
    n = X.shape[0]
    out = np.empty(n)
    for i in nb.prange(n):
        out[i] = _conformal_row(X[i])
    return out


@nb.njit(cache=True, inline="always")
def _conformal_row_curved(x, c):
    hi, lo = _sum_sq_dd(x)
    # c * (hi + lo) in double-double: Dekker's exact product c*hi = p + e, plus c*lo
    p = c * hi
    t = _SPLITTER * c
    ch = t - (t - c)
    cl = c - ch
    t = _SPLITTER * hi
    hh = t - (t - hi)
    hl = hi - hh
    e = ((ch * hh - p) + ch * hl + cl * hh) + cl * hl
    e += c * lo
    # 1 - (p + e): exact TwoSum for 1 - p, then fold in the low part
    r = 1.0 - p
    bb = r - 1.0
    e3 = (1.0 - (r - bb)) + (-p - bb)
    return r + (e3 - e)


@nb.njit(cache=True, parallel=True)
def conformal_factor_curved(X, c):
    """Compensated ``1 - c|x|^2`` for each row of ``X`` (n, d), from the caller's coordinates.

    .. math:: \\lambda_c(x) = 1 - c\\sum_j x_j^2

    The sum of squares is a double-double ``s_hi + s_lo``; ``c * s_hi`` is
    formed exactly with Dekker's product and ``c * s_lo`` added to its low
    part, so ``1 - c|x|^2`` keeps its digits even where it is ``1e-13``.
    Scaling the points by ``sqrt(c)`` first would round every coordinate
    and cost ``log10(1/(1-c|x|^2))`` digits of the result.
    """
    n = X.shape[0]
    out = np.empty(n)
    for i in nb.prange(n):
        out[i] = _conformal_row_curved(X[i], c)
    return out


@nb.njit(cache=True)
def few_points_conformal(X, c):
    """Serial ``(points, conformal, worst)`` of a few rows: the fast path of input checking.

    ``points = sqrt(c) X`` in float64 (``X`` itself for ``c = 1``),
    ``conformal`` = :func:`conformal_factor_curved` of ``X`` (compensated
    ``1 - c|x|^2``), and ``worst``, the smallest of ``conformal`` and, for
    ``c != 1``, of the rounded points' own ``1 - |p|^2``: the rows are inside
    the ball, finite, and stay inside after rounding exactly when
    ``worst > 0`` (it is ``-inf`` at the first row that is not: a NaN or
    infinite coordinate makes ``conformal`` NaN).
    Same arithmetic as the parallel kernels, for inputs too small to repay a
    thread-pool launch.
    """
    n, d = X.shape
    points = np.empty((n, d))
    conformal = np.empty(n)
    worst = np.inf
    scale = np.sqrt(c)
    for i in range(n):
        for j in range(d):
            points[i, j] = X[i, j]
        if c == 1.0:
            conformal[i] = _conformal_row(points[i])
        else:
            conformal[i] = _conformal_row_curved(points[i], c)
            for j in range(d):
                points[i, j] = points[i, j] * scale
            worst = min(worst, _conformal_row(points[i]))
        if not conformal[i] > 0.0:  # outside, or NaN from a NaN or infinite coordinate
            return points, conformal, -np.inf
        worst = min(worst, conformal[i])
    return points, conformal, worst


#: Relative tolerance on the Lorentz constraint ``-x0^2 + |xs|^2 = -1/c``: rows further off are not on the
#: hyperboloid (a likely unit mix-up) and are refused by the input check.
LORENTZ_CONSTRAINT_RTOL = 1e-6


@nb.njit(cache=True, inline="always")
def _lorentz_row(x, c, point):
    r"""The unit-ball Poincare image of the hyperboloid row ``x`` (d+1) of curvature ``-c``, into ``point`` (d).

    .. math::

        \lambda = 1 - c\|p\|^2 = \frac{2}{1 + \sqrt{1 + c\|x_s\|^2}}, \qquad
        \sqrt c\,p = \frac{\sqrt c\,\lambda}{2}\,x_s

    (:func:`hypann.geometry.models.lorentz_conformal_factor`: a sum of
    positive terms, accurate at any distance from the origin; the spatial
    part ``x_s`` defines the point). Returns ``(lambda, residual)``, with the
    constraint's relative residual
    ``|c (x0^2 - |x_s|^2) - 1| / max(1, c x0^2)``: NaN or ``inf`` for a row
    that is not finite (or whose squares overflow).
    """
    s = 0.0
    for j in range(1, x.shape[0]):
        v = np.float64(x[j])  # float64 arithmetic also for a float32 row
        s += v * v
    conformal = 2.0 / (1.0 + np.sqrt(1.0 + c * s))
    scale = np.sqrt(c) * conformal / 2.0
    for j in range(point.shape[0]):
        point[j] = np.float64(x[j + 1]) * scale
    x0 = np.float64(x[0])
    big = c * x0 * x0
    residual = abs(c * (x0 * x0 - s) - 1.0) / (big if big > 1.0 else 1.0)
    return conformal, residual


@nb.njit(cache=True, inline="always")
def on_upper_sheet(x0, residual):
    """Whether a hyperboloid row with first coordinate ``x0`` and constraint residual ``residual``
    (:func:`_lorentz_row`) is a point the input check takes: ``x0 > 0`` and ``residual <= LORENTZ_CONSTRAINT_RTOL``
    (false for NaN)."""
    return x0 > 0.0 and residual <= LORENTZ_CONSTRAINT_RTOL


@nb.njit(cache=True, parallel=True)
def lorentz_points(X, c):
    """``(points, conformal, residual, on_sheet)`` of the hyperboloid rows ``X`` (n, d+1) of curvature ``-c``.

    Per row, :func:`_lorentz_row`: the unit-curvature Poincare point
    (n, d), its conformal factor ``1 - |p|^2``, the constraint's relative
    residual, and whether the input check takes the row (:func:`on_upper_sheet`).
    The one-query kernels compute the same per row (:func:`few_lorentz_points`),
    so a query gets the same bits, and the same verdict, either way.
    """
    n = X.shape[0]
    points = np.empty((n, X.shape[1] - 1))
    conformal = np.empty(n)
    residual = np.empty(n)
    on_sheet = np.empty(n, dtype=np.bool_)
    for i in nb.prange(n):
        conformal[i], residual[i] = _lorentz_row(X[i], c, points[i])
        on_sheet[i] = on_upper_sheet(X[i, 0], residual[i])
    return points, conformal, residual, on_sheet


@nb.njit(cache=True)
def few_lorentz_points(X, c):
    """Serial ``(points, conformal, worst)`` of a few hyperboloid rows ``X`` (n, d+1): the Lorentz twin of
    :func:`few_points_conformal`.

    ``points`` and ``conformal`` as :func:`lorentz_points` gives them;
    ``worst`` is the smallest conformal factor of the points and of their
    rounded coordinates (``1 - |p|^2`` from ``p`` itself), or ``-inf`` at the
    first row that the input check refuses (not :func:`on_upper_sheet`,
    which also catches rows that are not finite, or rounding onto the
    boundary): the rows are valid exactly when ``worst > 0``.
    """
    n = X.shape[0]
    points = np.empty((n, X.shape[1] - 1))
    conformal = np.empty(n)
    worst = np.inf
    for i in range(n):
        conformal[i], residual = _lorentz_row(X[i], c, points[i])
        if not on_upper_sheet(X[i, 0], residual):
            return points, conformal, -np.inf
        rounded = _conformal_row(points[i])
        if not (conformal[i] > 0.0 and rounded > 0.0):
            return points, conformal, -np.inf
        worst = min(worst, conformal[i], rounded)
    return points, conformal, worst


@nb.njit(cache=True, inline="always")
def one_query_start(X, c, lorentz, out_i, out_d, samples):
    """The first step of a one-query search kernel (``search_coordinates``): the input check of the row ``X``
    (1, d), or (1, d+1) on the hyperboloid when ``lorentz``, in curvature ``-c``, and the empty answer in
    the caller's arrays.

    Fills ``out_i`` (1, k) with ``-1``, ``out_d`` (1, k) with ``inf`` and
    ``samples`` (1,) with 0 (the caller allocates them: numpy arrays made by
    the caller cost less than arrays returned from compiled code), and
    returns ``(query, q_conformal, valid)``: the unit-ball point and its
    conformal factor (:func:`few_points_conformal`, or
    :func:`few_lorentz_points`), and whether ``X`` is a valid point
    (``worst > 0``; the kernel then searches nothing).
    """
    if lorentz:
        query, q_conformal, worst = few_lorentz_points(X, c)
    else:
        query, q_conformal, worst = few_points_conformal(X, c)
    out_i[:] = -1
    out_d[:] = np.inf
    samples[:] = 0
    return query, q_conformal, worst > 0.0


@nb.njit(cache=True, inline="always")
def sq_dist_row(q, x):
    """``|q - x|^2`` from explicit differences, in float64 also for float32 rows (float32 storage)."""
    return _sq_dist_rest(q, x, 0.0, 0)


@nb.njit(cache=True, inline="always")
def sq_dist_pair(q, a, b):
    """``(|q - a|^2, |q - b|^2)``: two :func:`sq_dist_row` sums side by side, each in its order (the same bits).

    Two independent chains of additions overlap instead of waiting for each
    other: for the tree descents of a query, where the next node (and so the
    next pair) depends on this one, that halves the latency of a level at
    high dimension.
    """
    sa = 0.0
    sb = 0.0
    for j in range(q.shape[0]):
        v = np.float64(q[j])
        ta = v - np.float64(a[j])
        tb = v - np.float64(b[j])
        sa += ta * ta
        sb += tb * tb
    return sa, sb


@nb.njit(cache=True, inline="always")
def _sq_dist_rest(q, x, s, first):
    """``s`` plus the terms ``first, first + 1, ...`` of :func:`sq_dist_row`, in its order."""
    for j in range(first, q.shape[0]):
        t = np.float64(q[j]) - np.float64(x[j])
        s += t * t
    return s


@nb.njit(cache=True, inline="always")
def delta_row(q, cq, x, cx):
    """``|q - x|^2 / (cq * cx)`` for one pair."""
    return sq_dist_row(q, x) / (cq * cx)


@nb.njit(cache=True, inline="always")
def delta_row_below(q, cq, x, cx, worst):
    """:func:`delta_row`, or ``inf`` once a prefix of its sum proves it ``>= worst``.

    The sum runs in :func:`sq_dist_row`'s order, so a returned finite value is
    :func:`delta_row`'s bit for bit. A prefix ``p`` of a sum of squares is
    ``<=`` the whole in floating point too (adding a non-negative term never
    lowers a rounded sum), so ``p / (c_q c_x) >= worst`` proves the point
    cannot enter a list whose worst key is ``worst``; that exact test runs
    only after the cheap screen ``p > worst c_q c_x`` passes.
    """
    return delta_row_below_counted(q, cq, x, cx, worst)[0]


@nb.njit(cache=True, inline="always")
def delta_row_below_counted(q, cq, x, cx, worst):
    """``(delta_row_below(q, cq, x, cx, worst), coordinates its sum read)``: ``d`` when the sum ran to its end,
    ``j + 1`` when it stopped after coordinate ``j`` (NN-descent's rounds measure how early their sums stop,
    :func:`hypann.graph.knn_graph._refine`)."""
    den = cq * cx
    screen = worst * den
    s = 0.0
    for j in range(q.shape[0]):
        t = np.float64(q[j]) - np.float64(x[j])
        s += t * t
        if s > screen and s / den >= worst:
            return np.inf, j + 1
    return s / den, q.shape[0]


#: coordinates between two early-abandon tests of :func:`delta4_below`
ABANDON_STRIDE = 8


@nb.njit(cache=True, inline="always")
def _finish_below(q, x, s, first, den, worst):
    """The ``delta`` of a sum ``s`` stopped before coordinate ``first``: ``inf`` when its prefix
    already proves it ``>= worst``, else the finished sum over ``den``."""
    if s / den >= worst:
        return np.inf
    return _sq_dist_rest(q, x, s, first) / den


@nb.njit(cache=True, inline="always")
def delta4_below(q, cq, x0, c0, x1, c1, x2, c2, x3, c3, worst):
    """:func:`delta_row_below` of four rows at once: four independent sums side by side.

    Each sum runs in :func:`sq_dist_row`'s order, so every finite result is
    :func:`delta_row`'s value bit for bit; the four chains of additions (and
    the four rows' memory loads) overlap instead of waiting for each other,
    as two 2-wide vectors (:func:`~hypann.geometry._vector_lanes.add_row_squares4`).
    Every :data:`ABANDON_STRIDE` coordinates, once all four prefixes pass the
    cheap screen ``p > worst c_q c_x``, the sums stop: a row whose prefix
    proves ``p / (c_q c_x) >= worst`` gets ``inf``, the others are finished
    one by one.
    """
    d = q.shape[0]
    n0 = cq * c0
    n1 = cq * c1
    n2 = cq * c2
    n3 = cq * c3
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    j = 0
    while j < d:
        stop = min(j + ABANDON_STRIDE, d)
        s0, s1, s2, s3 = add_row_squares4(q, x0, x1, x2, x3, j, stop, s0, s1, s2, s3)
        j = stop
        if j < d and s0 > worst * n0 and s1 > worst * n1 and s2 > worst * n2 and s3 > worst * n3:
            break
    if j == d:
        return s0 / n0, s1 / n1, s2 / n2, s3 / n3
    return (_finish_below(q, x0, s0, j, n0, worst), _finish_below(q, x1, s1, j, n1, worst),
            _finish_below(q, x2, s2, j, n2, worst), _finish_below(q, x3, s3, j, n3, worst))


#: Coordinates between two early-abandon tests of :func:`delta4_split_below` (a multiple of ``ROW_LANES``).
SPLIT_STRIDE = 16


@nb.njit(cache=True)
def _split_rest(q, x, s, first):
    """``s`` plus the rest of :func:`delta4_split_below`'s sum of one row from coordinate ``first`` (the start
    of one of its blocks) on: the later blocks, then the last ``d % 4`` terms in order. Not inlined: only a
    row that a group's early stop leaves unproved takes it."""
    whole = q.shape[0] - q.shape[0] % ROW_LANES
    j = first
    while j < whole:
        stop = min(j + SPLIT_STRIDE, whole)
        s += split_square_block_sums(q, (x,), j, stop)[0]
        j = stop
    return _sq_dist_rest(q, x, s, whole)


@nb.njit(cache=True, inline="always")
def _split_finish(q, x, s, first, den, worst):
    """The split ``delta`` of a row whose sum stopped before coordinate ``first`` (a block start): ``inf`` when
    its prefix already proves it ``>= worst``, else the finished sum over ``den``."""
    if s / den >= worst:
        return np.inf
    return _split_rest(q, x, s, first) / den


@nb.njit(cache=True, inline="always")
def delta4_split_below(q, cq, x0, c0, x1, c1, x2, c2, x3, c3, worst):
    """``|q - x_r|^2 / (c_q c_r)`` of four rows, each sum split over four lanes, or ``inf`` where a prefix
    proves it ``>= worst``.

    Each row's sum runs in blocks of :data:`SPLIT_STRIDE` coordinates: a block's terms in the four lanes
    of :func:`~hypann.geometry._vector_lanes.split_square_block_sums` (``(l_0 + l_1) + (l_2 + l_3)``),
    added to the running sum block after block, then the last ``d % 4`` terms in order. So a finite
    result is a function of ``q`` and the row alone (:func:`delta_split_below`'s bits), within a few units
    in the last place of :func:`delta_row`'s but not its bits. Four rows and four lanes make sixteen
    independent chains of additions, where :func:`delta4_below` has four chains of ``d`` additions each.
    After every block but the last, once all four prefixes pass the cheap screen ``p > worst c_q c_r``,
    the sums stop: a row whose prefix proves ``p / (c_q c_r) >= worst`` gets ``inf`` (a sum of
    non-negative terms never falls as terms are added, in floating point too), the others are finished
    one by one. For the graph walk from 16-D on, whose reported entries get their exact values afterwards.
    """
    whole = q.shape[0] - q.shape[0] % ROW_LANES
    n0 = cq * c0
    n1 = cq * c1
    n2 = cq * c2
    n3 = cq * c3
    s0 = 0.0
    s1 = 0.0
    s2 = 0.0
    s3 = 0.0
    j = 0
    while j < whole:
        stop = min(j + SPLIT_STRIDE, whole)
        a0, a1, a2, a3 = split_square_block_sums(q, (x0, x1, x2, x3), j, stop)
        s0 += a0
        s1 += a1
        s2 += a2
        s3 += a3
        j = stop
        if j < whole and s0 > worst * n0 and s1 > worst * n1 and s2 > worst * n2 and s3 > worst * n3:
            break
    if j == whole:
        return (_sq_dist_rest(q, x0, s0, whole) / n0, _sq_dist_rest(q, x1, s1, whole) / n1,
                _sq_dist_rest(q, x2, s2, whole) / n2, _sq_dist_rest(q, x3, s3, whole) / n3)
    return (_split_finish(q, x0, s0, j, n0, worst), _split_finish(q, x1, s1, j, n1, worst),
            _split_finish(q, x2, s2, j, n2, worst), _split_finish(q, x3, s3, j, n3, worst))


@nb.njit(cache=True, inline="always")
def delta_split_below(q, cq, x, cx, worst):
    """:func:`delta4_split_below` of one row (the same bits when finite), tested after every block."""
    whole = q.shape[0] - q.shape[0] % ROW_LANES
    den = cq * cx
    screen = worst * den
    s = 0.0
    j = 0
    while j < whole:
        stop = min(j + SPLIT_STRIDE, whole)
        s += split_square_block_sums(q, (x,), j, stop)[0]
        j = stop
        if s > screen and s / den >= worst:
            return np.inf
    return _sq_dist_rest(q, x, s, whole) / den


@nb.njit(cache=True, inline="always")
def sq_dist8_split(q, rows):
    """``|q - x_r|^2`` of the eight rows of the tuple ``rows``, each sum split over four lanes: the
    coordinates before ``d - d % 4`` by :func:`~hypann.geometry._vector_lanes.split_square_sums` (lane
    ``i mod 4``, then ``(l_0 + l_1) + (l_2 + l_3)``), the last ``d % 4`` terms added in order. Fixed by
    the inputs, within a few units of the last place of :func:`sq_dist_row` but not its bits; the
    eight rows run side by side."""
    d = q.shape[0]
    whole = d - d % ROW_LANES
    sums = split_square_sums(q, rows, whole)
    return (_sq_dist_rest(q, rows[0], sums[0], whole), _sq_dist_rest(q, rows[1], sums[1], whole),
            _sq_dist_rest(q, rows[2], sums[2], whole), _sq_dist_rest(q, rows[3], sums[3], whole),
            _sq_dist_rest(q, rows[4], sums[4], whole), _sq_dist_rest(q, rows[5], sums[5], whole),
            _sq_dist_rest(q, rows[6], sums[6], whole), _sq_dist_rest(q, rows[7], sums[7], whole))


_ZERO8 = (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0)


@nb.njit(cache=True, inline="always")
def sq_dist8(q, rows, split):
    """``|q - x_r|^2`` of the eight rows of the tuple ``rows``, side by side: split over four lanes
    (:func:`sq_dist8_split`) with ``split``, else each in coordinate order
    (:func:`~hypann.geometry._vector_lanes.add_row_squares8`, :func:`sq_dist_row`'s bits)."""
    if split:
        return sq_dist8_split(q, rows)
    return add_row_squares8(q, rows, 0, q.shape[0], _ZERO8)


@nb.njit(cache=True, inline="always")
def sq_dist_split(q, x):
    """:func:`sq_dist8_split` of one row (the same bits as in a group of eight)."""
    d = q.shape[0]
    whole = d - d % ROW_LANES
    return _sq_dist_rest(q, x, split_square_sums(q, (x,), whole)[0], whole)


@nb.njit(cache=True, inline="always")
def sq_dist_pair_split(q, a, b):
    """``(|q - a|^2, |q - b|^2)`` as :func:`sq_dist8_split` sums them (the same bits), the two rows side by
    side: eight independent chains of additions where :func:`sq_dist_pair` has two. For the descents of
    trees whose split keys were computed so (``(q_j - x_j)^2 = (x_j - q_j)^2`` exactly, so the pivot
    and the point may trade places)."""
    d = q.shape[0]
    whole = d - d % ROW_LANES
    sums = split_square_sums(q, (a, b), whole)
    return _sq_dist_rest(q, a, sums[0], whole), _sq_dist_rest(q, b, sums[1], whole)


def split_sums8(q, rows):
    """NN-descent's ``|q - x_r|^2`` of the eight rows of the tuple ``rows`` (compiled code only), float64: with
    float32 ``q`` and rows (float32 storage) summed in float32 over eight lanes
    (:func:`~hypann.geometry._vector_lanes.narrow_square_sums`), otherwise over four float64 lanes
    (:func:`sq_dist8_split`). Either way fixed by the inputs; NN-descent ranks by float32 keys of them."""
    raise NotImplementedError("split_sums8 runs in compiled code only")


def split_sum(q, x):
    """:func:`split_sums8` of one row (the same bits as in a group of eight), compiled code only."""
    raise NotImplementedError("split_sum runs in compiled code only")


def _narrow(q, row_type):
    """Whether :func:`split_sums8` and :func:`split_sum` sum in float32: a float32 query and float32 rows."""
    return q.dtype == types.float32 and row_type.dtype == types.float32


# the overloads are not inline="always": numba's IR inlining of such an overload lost its caller's row writes (a
# test's reference pull step, tests/test_graph.py); compiled as calls, LLVM inlines them anyway
@overload(split_sums8)
def _split_sums8_impl(q, rows):
    if _narrow(q, rows.dtype):
        def narrow(q, rows):
            s = narrow_square_sums(q, rows)
            return (np.float64(s[0]), np.float64(s[1]), np.float64(s[2]), np.float64(s[3]), np.float64(s[4]),
                    np.float64(s[5]), np.float64(s[6]), np.float64(s[7]))
        return narrow
    return lambda q, rows: sq_dist8_split(q, rows)


@overload(split_sum)
def _split_sum_impl(q, x):
    if _narrow(q, x):
        return lambda q, x: np.float64(narrow_square_sums(q, (x,))[0])
    return lambda q, x: sq_dist_split(q, x)


@nb.njit(cache=True, inline="always")
def deltas_to_rows(q, cq, points, conf, ids, split, out):
    """``out[t] = |q - x|^2 / (c_q c_x)`` of ``x = points[ids[t]]`` for every ``t < len(ids)``, eight rows
    side by side (the same bits as one by one). A last group of two to seven rows is filled up with copies
    of its last row, whose sums are dropped: the group's eight chains of additions run side by side, where
    rows one by one would wait on one chain after another, so only a last single row is summed alone.

    ``split``: NN-descent's keys, :func:`split_sums8` and :func:`split_sum` (sums over four float64 lanes, or
    over eight float32 lanes when ``q`` and ``points`` are float32). Otherwise in coordinate order
    (:func:`sq_dist8`, :func:`sq_dist_row`): :func:`delta_row`'s bits (``(q_j - x_j)^2 = (x_j - q_j)^2``
    exactly, and ``c_q c_x = c_x c_q``), without waiting on one chain of additions at a time. NN-descent's
    rows and candidates, the graph's reverse edges, the long edges' k-NN rows.
    """
    m = ids.shape[0]
    last = m - 1
    t = 0
    while t < last:
        rows = (points[ids[t]], points[ids[t + 1]], points[ids[min(t + 2, last)]], points[ids[min(t + 3, last)]],
                points[ids[min(t + 4, last)]], points[ids[min(t + 5, last)]], points[ids[min(t + 6, last)]],
                points[ids[min(t + 7, last)]])
        sums = split_sums8(q, rows) if split else sq_dist8(q, rows, False)
        for r in range(min(8, m - t)):
            out[t + r] = sums[r] / (cq * conf[ids[t + r]])
        t += 8
    for r in range(t, m):
        v = ids[r]
        x = points[v]
        out[r] = (split_sum(q, x) if split else sq_dist_row(q, x)) / (cq * conf[v])


#: Dimension from which a scan screens each row with :func:`delta_lanes_below` (shorter rows: the
#: sequential sum is as fast and needs no second pass).
LANES_MIN_DIM = 16
#: Coordinates between two early-abandon tests of :func:`delta_lanes_below` (one block of
#: :func:`~hypann.geometry._vector_lanes.block_square_sum`).
LANES_STRIDE = LANE_BLOCK
#: ``u = 2^-53``, the unit roundoff of float64 (the error bounds of the lanes and of the Gram scan).
UNIT_ROUNDOFF = 2.0**-53


@nb.njit(cache=True, inline="always")
def lanes_shrink(d):
    """A factor ``f < 1`` with ``fl(L f) <= S`` for any two float sums ``L``, ``S`` of the same ``d``
    non-negative terms in any two orders (used by :func:`delta_lanes_below`).

    Each order's sum is within ``gamma_h |sum|`` of the exact sum, ``gamma_h = h u / (1 - h u)``
    for a summation tree of depth ``h`` and ``u = 2^-53``: ``h <= d`` for the sequential sum and,
    for the screen's sum, ``h <= 5 + d / LANES_STRIDE + (LANES_STRIDE - 1) <= d + 20`` (its first
    block's four lanes and their sum: 5; one addition per later block, whose own tree,
    ``BLOCK_SUM_DEPTH = 4``, is shallower; the last ``d % LANES_STRIDE`` terms one by one). So with
    ``g = gamma_{d+20}``, ``S >= L (1 - g) / (1 + g) >= L (1 - 2 g)``, and one more rounding of
    ``L f`` costs a factor ``1 + u`` (or nothing when ``L f`` is subnormal: then every term is, and
    both sums are exact). ``f = 1 - 4 (d + 22) u`` is below ``(1 - 2 g) / (1 + u)`` for every
    ``(d + 20) u < 0.1``.
    """
    return 1.0 - 4.0 * (d + 22) * UNIT_ROUNDOFF


@nb.njit(cache=True, inline="always")
def delta_lanes_below(q, cq, x, cx, worst, shrink):
    """:func:`delta_row` of one row, or ``inf`` when a fast sum proves it ``>= worst``.

    A screen, then the exact value. The screen sums the squares of the
    differences (the same terms as :func:`sq_dist_row`'s) in an order whose
    additions do not wait for each other: the first :data:`LANES_STRIDE`
    terms in four interleaved scalar lanes, ``((l_0 + l_1) + (l_2 + l_3))``;
    every later block of :data:`LANES_STRIDE` in 2-wide vectors
    (:func:`~hypann.geometry._vector_lanes.block_square_sum`), added to the
    running sum; the last ``d % LANES_STRIDE`` one by one. (The first block
    stays scalar: on clustered data most rows are abandoned after it, and in a
    one-off timing vector code there made scans of rows read from memory
    slower.) Such a sum ``L`` of a prefix of the terms, times ``shrink``
    (:func:`lanes_shrink` of the dimension), is at most the sequential sum
    ``S`` of all of them (rounded additions of non-negative terms never
    decrease), so ``fl(fl(L shrink) / (c_q c_x)) >= worst`` proves
    ``delta_row >= worst`` (rounding is monotone). The test runs after every
    block and at the end; a row that passes it gets :func:`delta_row`'s
    value, bit for bit, from the sequential sum (a second pass over the row,
    now in cache).
    """
    d = q.shape[0]
    den = cq * cx
    s = 0.0
    j = 0
    if d >= LANES_STRIDE:
        s0 = 0.0
        s1 = 0.0
        s2 = 0.0
        s3 = 0.0
        for b in range(LANES_STRIDE // 4):  # a constant trip count: unrolled
            jb = 4 * b
            t0 = np.float64(q[jb]) - np.float64(x[jb])
            t1 = np.float64(q[jb + 1]) - np.float64(x[jb + 1])
            t2 = np.float64(q[jb + 2]) - np.float64(x[jb + 2])
            t3 = np.float64(q[jb + 3]) - np.float64(x[jb + 3])
            s0 += t0 * t0
            s1 += t1 * t1
            s2 += t2 * t2
            s3 += t3 * t3
        s = (s0 + s1) + (s2 + s3)
        j = LANES_STRIDE
        if s * shrink / den >= worst:
            return np.inf
    while j + LANES_STRIDE <= d:
        s += block_square_sum(q, x, j)
        j += LANES_STRIDE
        if s * shrink / den >= worst:
            return np.inf
    while j < d:
        t = np.float64(q[j]) - np.float64(x[j])
        s += t * t
        j += 1
    if s * shrink / den >= worst:
        return np.inf
    return sq_dist_row(q, x) / den


@nb.njit(cache=True, inline="always")
def insert_sorted(keys, ids, key, ident):
    """Insert ``(key, ident)`` into a fixed-size list sorted ascending, dropping the last.

    The caller has checked ``key < keys[-1]``. The one top-k primitive of the
    package (brute force, kd-tree, graph and LSH kernels all use it).
    """
    pos = keys.shape[0] - 1
    while pos > 0 and keys[pos - 1] > key:
        keys[pos] = keys[pos - 1]
        ids[pos] = ids[pos - 1]
        pos -= 1
    keys[pos] = key
    ids[pos] = ident


@nb.njit(cache=True, inline="always")
def holds(ids, m, ident):
    """Whether ``ident`` is among ``ids[:m]`` (a linear scan: the lists are short)."""
    for t in range(m):
        if ids[t] == ident:
            return True
    return False


@nb.njit(cache=True, inline="always")
def insert_sorted_unique(keys, ids, key, ident):
    """:func:`insert_sorted` unless ``ident`` is already in ``ids``; True when the list changed.

    A fixed-size list sorted ascending by ``keys`` (k small, so the scan for
    ``ident`` is linear); ``keys[-1]`` is the current worst and the caller
    checks ``key < keys[-1]``. (Formerly misnamed ``heap_push_max``: there is
    no heap.)
    """
    if holds(ids, keys.shape[0], ident):
        return False
    insert_sorted(keys, ids, key, ident)
    return True


@nb.njit(cache=True, inline="always")
def _brute_row(q, cq, X, cx, kd, ki):
    """Scan every row of ``X`` into the sorted top-k list ``kd``/``ki`` of one query.

    The list is that of offering each row's :func:`delta_row` in row order. From
    :data:`LANES_MIN_DIM` coordinates on, each row is first screened by
    :func:`delta_lanes_below` against the list's current ``k``-th key (an
    ``inf`` there could not have entered it); the rows that pass get their
    exact :func:`delta_row`.
    """
    k = kd.shape[0]
    d = q.shape[0]
    if d >= LANES_MIN_DIM:
        shrink = lanes_shrink(d)
        for j in range(X.shape[0]):
            v = delta_lanes_below(q, cq, X[j], cx[j], kd[k - 1], shrink)
            if v < kd[k - 1]:
                insert_sorted(kd, ki, v, j)
        return
    for j in range(X.shape[0]):
        v = delta_row(q, cq, X[j], cx[j])
        if v < kd[k - 1]:
            insert_sorted(kd, ki, v, j)


@nb.njit(cache=True, parallel=True)
def brute_knn_delta(Q, cq, X, cx, k):
    """Exact k smallest ``delta`` of each query against every row of ``X``.

    Returns ``(ids, deltas)`` of shape (m, k), sorted ascending; ties broken by
    the lower index. Parallel over queries.
    """
    m = Q.shape[0]
    ids = np.full((m, k), -1, dtype=np.int64)
    ds = np.full((m, k), np.inf)
    for i in nb.prange(m):
        _brute_row(Q[i], cq[i], X, cx, ds[i], ids[i])
    return ids, ds


@nb.njit(cache=True)
def brute_knn_delta_serial(Q, cq, X, cx, k):
    """:func:`brute_knn_delta` on the calling thread (small batches: no thread-pool launch)."""
    m = Q.shape[0]
    ids = np.full((m, k), -1, dtype=np.int64)
    ds = np.full((m, k), np.inf)
    for i in range(m):
        _brute_row(Q[i], cq[i], X, cx, ds[i], ids[i])
    return ids, ds


@nb.njit(cache=True, parallel=True)
def brute_knn_delta_split(Q, cq, X, cx, k, n_blocks):
    """:func:`brute_knn_delta` with each query's rows split into ``n_blocks`` blocks scanned in parallel.

    For fewer queries than threads (one query on all cores). Each block
    keeps its own top-k (ids made global); the blocks' lists are then
    offered in block order, each in its sorted order, stopping at its first
    entry that does not beat the list's ``k``-th key. The result is the
    ``k`` smallest ``(delta, row)`` pairs in that order, as in one scan in
    row order: the same ids, ties and bits, whatever ``n_blocks``.
    """
    step, part_i, part_d = block_lists(Q.shape[0], X.shape[0], n_blocks, k)
    for t in nb.prange(part_i.shape[0]):
        lo, hi = block_rows(t, n_blocks, step, X.shape[0])
        _brute_row(Q[t // n_blocks], cq[t // n_blocks], X[lo:hi], cx[lo:hi], part_d[t], part_i[t])
    return merged_block_lists(part_i, part_d, n_blocks, step)


@nb.njit(cache=True)
def block_lists(m, n, n_blocks, k):
    """``(step, part_i, part_d)`` of a split scan of ``m`` queries over ``n`` rows in ``n_blocks`` blocks
    of ``step`` rows: an empty list (``-1`` / ``inf``, ``k`` entries) for every (query, block) pair, pair
    ``t`` being query ``t // n_blocks`` and block ``t % n_blocks``."""
    step = (n + n_blocks - 1) // n_blocks
    return step, np.full((m * n_blocks, k), -1, dtype=np.int64), np.full((m * n_blocks, k), np.inf)


@nb.njit(cache=True, inline="always")
def block_rows(t, n_blocks, step, n):
    """Rows ``lo:hi`` of pair ``t``'s block in a split scan (:func:`block_lists`; empty past the ``n``
    rows)."""
    lo = min(n, (t % n_blocks) * step)
    return lo, min(n, lo + step)


@nb.njit(cache=True, nogil=True)
def merged_block_lists(part_i, part_d, n_blocks, step):
    """The lists of a split scan (:func:`block_lists`; each pair's list of its block's rows, ids counted
    from the block's first row) made global and merged in block order (:func:`merge_in_block_order`):
    ``(ids, deltas)`` of shape (m, k)."""
    pairs, k = part_i.shape
    m = pairs // n_blocks
    for t in range(pairs):
        lo = (t % n_blocks) * step
        for s in range(k):
            if part_i[t, s] >= 0:
                part_i[t, s] += lo
    ids = np.full((m, k), -1, dtype=np.int64)
    ds = np.full((m, k), np.inf)
    merge_in_block_order(part_i.reshape(m, n_blocks, k), part_d.reshape(m, n_blocks, k), ids, ds)
    return ids, ds


@nb.njit(cache=True, nogil=True)
def merge_in_block_order(part_i, part_d, ids, ds):
    """Offer each query's block lists ``part_*[i, b]`` (sorted, ``-1``/``inf`` padded, global ids)
    to its list ``ids[i]``/``ds[i]``, block after block, each in its sorted order, stopping at the
    first entry that does not beat the list's ``k``-th key.

    When block ``b`` holds the top-k of rows that all precede block ``b + 1``'s
    (by ``(delta, row)``, ties to the lower row), the result is the top-k of
    all the rows in that order: the list of one scan in row order, ties included.
    """
    m, n_blocks, kb = part_i.shape
    k = ids.shape[1]
    for i in range(m):
        for b in range(n_blocks):
            for s in range(kb):
                if part_i[i, b, s] < 0 or not part_d[i, b, s] < ds[i, k - 1]:
                    break
                insert_sorted(ds[i], ids[i], part_d[i, b, s], part_i[i, b, s])


@nb.njit(cache=True)
def delta_to_candidates(Q, cq, X, cx, cand):
    """``delta`` of each query to its candidate ids ``cand`` (m, c); -1 -> inf.

    Serial on purpose: the work per call is small and a parallel region
    costs more than it saves when the cores are shared.
    """
    m, c = cand.shape
    out = np.full((m, c), np.inf)
    for i in range(m):
        for t in range(c):
            j = cand[i, t]
            if j >= 0:
                out[i, t] = delta_row(Q[i], cq[i], X[j], cx[j])
    return out


@nb.njit(cache=True)
def merge_topk(best_ids, best_d, cand_ids, cand_d):
    """Merge candidates into per-row sorted top-k lists in place.

    Returns a boolean array: True for rows whose k-th value decreased or whose
    set changed.
    """
    m, k = best_ids.shape
    changed = np.zeros(m, dtype=np.bool_)
    for i in range(m):
        for t in range(cand_ids.shape[1]):
            j = cand_ids[i, t]
            d = cand_d[i, t]
            if j >= 0 and d < best_d[i, k - 1]:
                if insert_sorted_unique(best_d[i], best_ids[i], d, j):
                    changed[i] = True
    return changed


@nb.njit(cache=True, inline="always")
def delta_within(q, cq, x, cx, above, shrink):
    """:func:`delta_row`, or ``inf`` once it is proved ``>= above`` (from :data:`LANES_MIN_DIM` on).

    With ``above`` the next float after a range limit, ``result <= limit``
    decides exactly as ``delta_row(...) <= limit``: the range scans' count
    and fill passes make the same decisions.
    """
    if q.shape[0] >= LANES_MIN_DIM:
        return delta_lanes_below(q, cq, x, cx, above, shrink)
    return delta_row(q, cq, x, cx)


@nb.njit(cache=True, parallel=True)
def brute_range_count(Q, cq, X, cx, limits):
    """Number of rows of ``X`` with ``delta(q_i, x) <= limits[i]``, per query."""
    m = Q.shape[0]
    counts = np.zeros(m, dtype=np.int64)
    shrink = lanes_shrink(Q.shape[1])
    for i in nb.prange(m):
        c = 0
        above = np.nextafter(limits[i], np.inf)
        for j in range(X.shape[0]):
            if delta_within(Q[i], cq[i], X[j], cx[j], above, shrink) <= limits[i]:
                c += 1
        counts[i] = c
    return counts


@nb.njit(cache=True, parallel=True)
def brute_range_fill(Q, cq, X, cx, limits, offsets, ids, deltas):
    """Second pass of a brute-force range search: hits of query ``i`` (ascending
    row order) into ``ids/deltas[offsets[i]:offsets[i+1]]``, sized by :func:`brute_range_count`."""
    m = Q.shape[0]
    shrink = lanes_shrink(Q.shape[1])
    for i in nb.prange(m):
        pos = offsets[i]
        end = offsets[i + 1]
        above = np.nextafter(limits[i], np.inf)
        for j in range(X.shape[0]):
            if pos == end:
                break
            d = delta_within(Q[i], cq[i], X[j], cx[j], above, shrink)
            if d <= limits[i]:
                ids[pos] = j
                deltas[pos] = d
                pos += 1


@nb.njit(cache=True)
def delta_pairs(Q, cq, X, cx, rows, ids):
    """``delta(Q[rows[t]], X[ids[t]])`` for each pair ``t`` (ragged candidate lists)."""
    out = np.empty(ids.shape[0])
    for t in range(ids.shape[0]):
        i = rows[t]
        j = ids[t]
        out[t] = delta_row(Q[i], cq[i], X[j], cx[j])
    return out


# --------------------------------------------------------------------------- reordering in place


@nb.njit(cache=True)
def gather_rows_in_place(rows, perm):
    """``rows[t] = old rows[perm[t]]`` for every ``t``, in place (``rows`` 2-D, any dtype).

    Follows the cycles of the permutation ``perm`` (one saved row per cycle,
    one flag per row), so a structure can reorder an array its caller owns
    instead of making a second copy of it. ``perm`` must be a permutation of
    ``0 .. n-1`` (callers pass one they built).
    """
    n = rows.shape[0]
    done = np.zeros(n, dtype=np.bool_)
    row = np.empty(rows.shape[1], dtype=rows.dtype)
    for i in range(n):
        if done[i]:
            continue
        row[:] = rows[i]
        j = i
        while True:
            done[j] = True
            k = perm[j]
            if k == i:
                rows[j] = row
                break
            rows[j] = rows[k]
            j = k


def gather_points_in_place(points, conformal, perm):
    """:func:`gather_rows_in_place` of ``points`` (n, d) and their ``conformal`` (n,) by the same ``perm``."""
    gather_rows_in_place(points, perm)
    gather_rows_in_place(conformal[:, None], perm)  # a view: the writes reach ``conformal``


@nb.njit(cache=True)
def any_negative(ids):
    """Whether any entry of the int array ``ids`` is ``< 0`` (a missing neighbour).

    One serial pass that stops at the first hit; for a query's row of ids
    it is cheaper than the numpy call ``ids.min() < 0``.
    """
    for v in ids.flat:
        if v < 0:
            return True
    return False


def inverse_permutation(perm):
    """``inverse`` (int64) with ``inverse[perm[t]] == t``: gathering by it undoes a gather by ``perm``.

    ``perm`` must be a permutation of ``0 .. n-1``.
    """
    inverse = np.empty(perm.shape[0], dtype=np.int64)
    inverse[perm] = np.arange(perm.shape[0])
    return inverse
