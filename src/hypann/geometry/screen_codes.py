"""One-byte codes of points that prove a ``delta`` too large before the point's row is read.

NN-descent (:mod:`hypann.graph.knn_graph`) compares each point with hundreds of
candidates a round, of which only a few percent enter its row; from about
100 dimensions on, reading each candidate's row from memory costs more than
the arithmetic. A point ``x`` (``d`` coordinates, float32 or float64) is
coded here as ``d`` signed bytes ``z`` and a float32 scale ``s``,

.. math::

    \\tilde x = s\\, z, \\qquad s = \\max_j |x_j| / 127, \\qquad
    z_j = \\operatorname{round}(x_j / s) \\in [-127, 127],

with ``A_x >= |x - x~| + 3 u (1 + |x - x~|)`` (``u = 2^-24``) stored beside
it: a quarter of a float32 row, an eighth of a float64 one. For a query ``q``
(rounded to float32 once, ``q'``) the screen computes ``D = sum_j (q'_j - s
z_j)^2`` in float32 and

.. math::

    L = \\sqrt{D (1 - \\eta)} - A_x \\;\\le\\; |q - x| ,
    \\qquad \\eta = 4 (d + 16) u .

Why ``L`` is a lower bound: the float32 sum of ``d`` squares, in any order and
with or without fused multiply-adds, is within ``gamma_{d+2} <= (d + 3) u`` of
the sum of the computed terms' squares (Higham, *Accuracy and Stability of
Numerical Algorithms*, 3.1), so ``sqrt(D (1 - eta))`` is at most the norm of
the computed differences times ``1 - u``. Each computed difference is
``q'_j - s z_j`` with at most two roundings, hence within ``u |x~_j| + u |q'_j
- x~_j|`` (and ``u^2`` terms) of the exact one: their norm is at most ``(1 +
u) |q' - x~| + 2 u |x~|``. With ``|x~| <= |x| + |x - x~| < 1 + |x - x~|`` and
``|q - q'| <= u |q| < u``, the triangle inequality gives ``|q - x| >= |q' -
x~| - |x - x~| - u >= L``. The sum is the only part compiled with
``fastmath`` (reassociation and contraction only), which the bound allows:
any order and any fusing of its operations stays within it.

Then ``delta(q, x) = |q - x|^2 / (c_q c_x) >= L^2 / (c_q c_x)``, and a
``delta`` computed from explicit differences (float64 sums, or float32 sums of
float32 rows: within ``(d + 4) u`` of the exact value) is at least ``L^2 (1 -
eta) / (c_q c_x)``. So :func:`screen_rejects` is True only when that computed
``delta`` is ``>= worst`` (every product and comparison in float64, whose
roundings the factor ``1 - eta`` holds many times over; a product
``worst c_q c_x`` below :data:`SCREEN_MIN_PRODUCT`, where it may have lost
digits, or ``inf``, never rejects). The screen therefore never changes which
candidates a k-NN row takes: it only spares the rows of those it would not.

The codes are coarse: the error ``|x - x~|`` is about ``sqrt(d / 12) s``,
a few thousandths for points in the unit ball. Where neighbours lie closer
than that (points within ``1e-4`` of the boundary, a fine hierarchy) nearly
every candidate passes the screen and it only costs time; its caller measures
that and stops screening (:func:`hypann.graph.knn_graph._refine`).
Beyond :data:`SCREEN_MAX_DIM` coordinates ``eta`` would grow past ``2^-8`` and
no codes are made.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from hypann._runtime import read_only

__all__ = ["SCREEN_MAX_DIM", "SCREEN_MIN_PRODUCT", "screen_codes", "screen_margin", "screen_rejects"]

#: Coordinates up to which points are coded (``eta = 4 (d + 16) 2^-24`` stays below ``2^-8``).
SCREEN_MAX_DIM = 16368
#: ``worst c_q c_x`` below this (a normal float64 with room to spare) never rejects: it may have underflowed.
SCREEN_MIN_PRODUCT = 2.0**-1000
# float32's unit roundoff
_U32 = 2.0**-24
# float64's unit roundoff
_U64 = 2.0**-53
# the columns of the codes' float64 info rows: scale, slack A_x, conformal factor (one cache line holds two rows)
_SCALE, _SLACK, _CONF = 0, 1, 2
_INFO_COLUMNS = 4


@nb.njit(cache=True)
def screen_margin(dim):
    """``eta = 4 (d + 16) 2^-24``: the relative margin of :func:`screen_rejects` for ``d`` coordinates."""
    return 4.0 * (dim + 16) * _U32


@nb.njit(cache=True, parallel=True)
def _code_rows(points, conf, codes, info):
    """Fill ``codes`` and ``info`` for every row of ``points`` (see the module docstring), in parallel."""
    n, d = points.shape
    slack_factor = 1.0 + (d + 8) * 2.0 * _U64  # |x - x~| computed in float64: a sum of d squares and a root
    for i in nb.prange(n):
        amax = 0.0
        for j in range(d):
            amax = max(amax, abs(np.float64(points[i, j])))
        s = np.float32(amax / 127.0)
        if not s > 0:  # a point at the origin, or one whose scale underflows float32: coded as 0
            s = np.float32(0.0)
        err = 0.0
        for j in range(d):
            x = np.float64(points[i, j])
            z = 0.0
            if s > 0:
                z = min(127.0, max(-127.0, np.rint(x / np.float64(s))))
            codes[i, j] = np.int8(z)
            e = x - np.float64(s) * z  # s z is exact in float64 (24 + 8 bits)
            err += e * e
        err = np.sqrt(err) * slack_factor
        info[i, _SCALE] = np.float64(s)
        info[i, _SLACK] = (err + 3.0 * _U32 * (1.0 + err)) * (1.0 + 4.0 * _U64)
        info[i, _CONF] = conf[i]
        info[i, 3] = 0.0


def screen_codes(points, conf):
    """One-byte codes of ``points`` for :func:`screen_rejects`: ``(codes, info)``.

    ``codes`` is ``(n, d)`` int8; ``info`` ``(n, 4)`` float64 rows ``(s, A_x, c_x, 0)``: the scale, the
    slack and the conformal factor ``conf`` of each point, side by side so that one cache line holds what
    the screen reads beside the codes. ``d + 32`` bytes a point.
    """
    n, d = points.shape
    if d > SCREEN_MAX_DIM:
        raise ValueError(f"screen codes need at most {SCREEN_MAX_DIM} coordinates, got {d}")
    codes = np.empty((n, d), dtype=np.int8)
    info = np.empty((n, _INFO_COLUMNS), dtype=np.float64)
    # read-only views: one compiled type for NN-descent's points and a structure's, writable or not
    _code_rows(read_only(points), read_only(np.ascontiguousarray(conf, dtype=np.float64)), codes, info)
    return codes, info


@nb.njit(cache=True, fastmath={"reassoc", "contract"})
def _code_square_sum(qf, code, s):
    """``sum_j (qf_j - s code_j)^2`` in float32, in any order (see the module docstring: the bound allows it).

    Not inlined into its callers, so that only this loop is compiled with reassociation and contraction.
    """
    acc = np.float32(0.0)
    for j in range(qf.shape[0]):
        t = qf[j] - s * np.float32(code[j])
        acc += t * t
    return acc


@nb.njit(cache=True, inline="always")
def screen_rejects(qf, cq, codes, info, v, worst, eta):
    """True when the computed ``delta`` of the query (float32 coordinates ``qf``, conformal factor ``cq``)
    and the coded point ``v`` is proved ``>= worst`` (the module docstring's bound; ``eta``:
    :func:`screen_margin`). False says nothing."""
    product = worst * (cq * info[v, _CONF])
    if not (product >= SCREEN_MIN_PRODUCT and product < np.inf):
        return False
    big = np.float64(_code_square_sum(qf, codes[v], np.float32(info[v, _SCALE])))
    low = np.sqrt(big * (1.0 - eta)) - info[v, _SLACK]
    return low > 0.0 and low * low * (1.0 - eta) >= product
