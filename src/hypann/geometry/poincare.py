"""Poincare-ball geometry in float64: distances, the conformal factor, hyperbolic balls.

All functions are pure numpy, take points of shape ``(..., d)`` and work in the
unit-curvature ball unless a keyword ``c > 0`` (curvature ``-c``) is given. A
ball of curvature ``-c`` has radius ``1/sqrt(c)``; it is mapped to the unit ball
by ``x -> sqrt(c) x`` and distances scale by ``1/sqrt(c)``.

Numerical design
----------------
The Poincare distance (Wu & Charikar, eq. 1)

.. math::

    d(x, y) = \\operatorname{arccosh}\\Big(1 + \\frac{2\\|x-y\\|^2}{(1-\\|x\\|^2)(1-\\|y\\|^2)}\\Big)

is evaluated through the monotone surrogate

.. math::

    \\delta(x, y) = \\frac{\\|x-y\\|^2}{(1-\\|x\\|^2)(1-\\|y\\|^2)}, \\qquad
    d = 2\\,\\operatorname{asinh}\\sqrt{\\delta},

which equals the formula above (``cosh 2a = 1 + 2 sinh^2 a``) but keeps all
digits for close points, where ``arccosh(1 + tiny)`` loses half of them.
Three rules keep it accurate near the boundary of the ball:

* the conformal factor ``1-|x|^2`` is computed once per point with error-free
  (double-double) arithmetic, see :func:`conformal_factor`; for ``|x|`` close to
  1 the naive ``1 - x @ x`` loses ``log10(1/(1-|x|^2))`` digits;
* ``|x-y|^2`` is formed from explicit differences, never as
  ``|x|^2 + |y|^2 - 2 x.y`` (which cancels for close points near the boundary);
* search ranks by ``delta`` and applies ``asinh`` only to returned results.

Limits: the conformal factor is exact for the float64 point you pass in, but a
float64 coordinate near 1 has spacing ``1.1e-16``, so a point at hyperbolic
norm ``h`` (``1-|x| ~ 2 exp(-h)``) can only be *placed* with relative accuracy
about ``1e-16 * exp(h)``: about 1e-3 at ``h = 30`` and nothing at ``h ~ 37``.
Distances between the float64 points given are accurate to ~1e-12 relative up
to ``1-|x|^2 ~ 1e-300``; what float64 cannot represent is the intended point.

References
----------
Wu & Charikar, *Nearest Neighbor Search for Hyperbolic Embeddings*,
appendix A (Euclidean-Center-of-Hyperbolic-Ball), appendix C (bands).
"""

from __future__ import annotations

import numpy as np

__all__ = [
    "conformal_factor",
    "delta",
    "pairwise_delta",
    "dist",
    "pairwise_dist",
    "dist_from_delta",
    "delta_from_dist",
    "dist0",
    "norm_at_dist0",
    "euclidean_ball",
    "euclidean_ball_from_delta",
    "ray_points",
    "log_cosh",
]

# Veltkamp splitting constant for float64 (2**27 + 1): splits a double into two
# halves whose products are exact, the core of Dekker's error-free product.
_SPLITTER = 134217729.0


def _two_square(a):
    """Error-free square: ``a*a = p + e`` exactly (Dekker 1971, no FMA needed)."""
    p = a * a
    t = _SPLITTER * a
    hi = t - (t - a)
    lo = a - hi
    e = ((hi * hi - p) + 2.0 * hi * lo) + lo * lo
    return p, e


def _two_sum(a, b):
    """Error-free sum: ``a + b = s + e`` exactly (Knuth's TwoSum)."""
    s = a + b
    bb = s - a
    e = (a - (s - bb)) + (b - bb)
    return s, e


def _two_product(a, b):
    """Error-free product: ``a*b = p + e`` exactly (Dekker 1971, Veltkamp splits)."""
    p = a * b
    t = _SPLITTER * a
    ah = t - (t - a)
    al = a - ah
    t = _SPLITTER * b
    bh = t - (t - b)
    bl = b - bh
    e = ((ah * bh - p) + ah * bl + al * bh) + al * bl
    return p, e


def conformal_factor(x, *, c: float = 1.0):
    """Conformal factor ``1 - c |x|^2`` computed with compensated arithmetic.

    .. math::

        \\lambda_c(x) = 1 - c\\sum_i x_i^2

    The sum of squares is accumulated in double-double (Dekker's exact
    product plus Knuth's exact sum), multiplied by ``c`` in double-double
    (``c s_{hi}`` exactly by Dekker's product, plus ``c s_{lo}``), and the
    subtraction from 1 is done on the double-double value, so the result is
    correct to a few ulps *of the result* even when ``sqrt(c)|x|`` is within
    1e-15 of the boundary. The coordinates are never rescaled by ``sqrt(c)``
    first: that would round them and cost ``log10(1/lambda)`` digits.

    Parameters
    ----------
    x : ndarray of shape (..., d)
        Points, float64.
    c : float, default 1.0
        Curvature magnitude; the ball has radius ``1/sqrt(c)``.

    Returns
    -------
    ndarray of shape (...)
        ``1 - c|x|^2``; ``<= 0`` for points on or outside the boundary.
    """
    x = np.asarray(x, dtype=np.float64)
    hi = np.zeros(x.shape[:-1])
    lo = np.zeros(x.shape[:-1])
    for j in range(x.shape[-1]):
        p, e = _two_square(x[..., j])
        hi, e2 = _two_sum(hi, p)
        lo = lo + (e + e2)
    if c != 1.0:
        # c * (hi + lo) as a double-double
        hi, e = _two_product(float(c), hi)
        lo = e + float(c) * lo
    # 1 - (hi + lo): exact TwoSum for 1 - hi, then fold in the low parts.
    r, e = _two_sum(1.0, -hi)
    return r + (e - lo)


def _sq_dist(x, y):
    diff = np.asarray(x, dtype=np.float64) - np.asarray(y, dtype=np.float64)
    return np.einsum("...i,...i->...", diff, diff)


def delta(x, y, *, cx=None, cy=None, c: float = 1.0):
    """Monotone surrogate of the Poincare distance, broadcast over rows.

    .. math::

        \\delta(x, y) = \\frac{c\\,\\|x-y\\|^2}{(1-c\\|x\\|^2)(1-c\\|y\\|^2)},
        \\qquad d_c(x, y) = \\frac{2}{\\sqrt c}\\operatorname{asinh}\\sqrt{\\delta}

    Parameters
    ----------
    x, y : array_like of shape (..., d)
        Points (broadcastable).
    cx, cy : array_like of shape (...), optional
        Precomputed conformal factors ``1 - c|x|^2`` (see
        :func:`conformal_factor`); computed when omitted.
    c : float, default 1.0
        Curvature magnitude.
    """
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    if cx is None:
        cx = conformal_factor(x, c=c)
    if cy is None:
        cy = conformal_factor(y, c=c)
    return c * _sq_dist(x, y) / (cx * cy)


def pairwise_delta(q, x, *, cq=None, cx=None, c: float = 1.0):
    """``delta`` between every row of ``q`` (m, d) and every row of ``x`` (n, d).

    Direct differences, shape (m, n); memory ``m*n*d`` floats, so callers
    block large inputs.
    """
    q = np.atleast_2d(np.asarray(q, dtype=np.float64))
    x = np.atleast_2d(np.asarray(x, dtype=np.float64))
    if cq is None:
        cq = conformal_factor(q, c=c)
    if cx is None:
        cx = conformal_factor(x, c=c)
    sq = _sq_dist(q[:, None, :], x[None, :, :])
    return c * sq / (np.asarray(cq)[:, None] * np.asarray(cx)[None, :])


def dist_from_delta(d, *, c: float = 1.0):
    """Distance from the surrogate: ``2 asinh(sqrt(delta)) / sqrt(c)``.

    Computed in place in one new array (the same operations in the same
    order as the formula, so the same bits; the doubling is ``out + out``,
    exact like ``2 * out`` and cheaper on the one-row arrays of a one-query
    call than a product with a Python scalar).
    """
    d = np.asarray(d, dtype=np.float64)
    if d.ndim == 0:
        return 2.0 * np.arcsinh(np.sqrt(d)) / np.sqrt(c)
    out = np.sqrt(d)
    np.arcsinh(out, out=out)
    np.add(out, out, out=out)
    if c != 1.0:
        out /= np.sqrt(c)
    return out


def delta_from_dist(r, *, c: float = 1.0):
    """Inverse of :func:`dist_from_delta`: ``sinh(sqrt(c) r / 2)^2``."""
    return np.sinh(np.sqrt(c) * np.asarray(r, dtype=np.float64) / 2.0) ** 2


def dist(x, y, *, c: float = 1.0):
    """Poincare distance between points (broadcast over leading axes).

    .. math::

        d_c(x, y) = \\frac{2}{\\sqrt c}\\operatorname{asinh}
        \\sqrt{\\frac{c\\|x-y\\|^2}{(1-c\\|x\\|^2)(1-c\\|y\\|^2)}}

    equal to ``arccosh(1 + 2 c|x-y|^2 / ((1-c|x|^2)(1-c|y|^2))) / sqrt(c)``
    (Wu & Charikar eq. 1 for c = 1) but accurate for close points.
    """
    return dist_from_delta(delta(x, y, c=c), c=c)


def pairwise_dist(q, x, *, c: float = 1.0):
    """Poincare distances between rows of ``q`` (m, d) and ``x`` (n, d): (m, n)."""
    return dist_from_delta(pairwise_delta(q, x, c=c), c=c)


def dist0(x, *, cx=None, c: float = 1.0):
    """Distance from the origin (the hyperbolic norm).

    .. math::

        d(0, x) = 2\\operatorname{artanh}\\|x\\| = 2\\operatorname{asinh}
        \\frac{\\|x\\|}{\\sqrt{1-\\|x\\|^2}}

    The asinh form uses the stored conformal factor and stays accurate at
    the boundary where ``artanh`` of a rounded norm does not.
    """
    x = np.asarray(x, dtype=np.float64)
    if cx is None:
        cx = conformal_factor(x, c=c)
    sq = np.sqrt(c) * np.linalg.norm(x, axis=-1)
    return 2.0 * np.arcsinh(sq / np.sqrt(cx)) / np.sqrt(c)


def norm_at_dist0(h, *, c: float = 1.0):
    """Euclidean norm of a point at hyperbolic norm ``h``: ``tanh(sqrt(c) h/2)/sqrt(c)``."""
    return np.tanh(np.sqrt(c) * np.asarray(h, dtype=np.float64) / 2.0) / np.sqrt(c)


def log_cosh(a):
    """``log(cosh(a))`` without overflow: ``|a| + log1p(exp(-2|a|)) - log 2``."""
    a = np.abs(np.asarray(a, dtype=np.float64))
    return a + np.log1p(np.exp(-2.0 * a)) - np.log(2.0)


def euclidean_ball_from_delta(q, d, *, cq=None):
    """Euclidean centre and radius of the hyperbolic ball ``{x: delta(q, x) <= d}``.

    Unit curvature. Expanding ``|x-q|^2 <= d (1-|q|^2)(1-|x|^2)`` gives a
    Euclidean ball; with ``lambda_q = 1-|q|^2`` and ``lambda_q + |q|^2 = 1``:

    .. math::

        \\text{center} = \\frac{q}{1 + d\\,\\lambda_q}, \\qquad
        \\text{radius} = \\frac{\\lambda_q\\sqrt{d(1+d)}}{1 + d\\,\\lambda_q}.

    This is the closed form of the paper's *Euclidean-Center-of-Hyperbolic-Ball*
    (appendix A: the midpoint of ``t1 q`` and ``t2 q``), written with no
    cancellation, so it is accurate for ``q`` at the boundary and for any
    ``d`` (``q = 0`` gives centre 0, radius ``sqrt(d/(1+d))``).

    Parameters
    ----------
    q : ndarray of shape (..., dim)
    d : ndarray of shape (...)
        Surrogate radius ``delta = sinh(r/2)^2``.
    cq : ndarray of shape (...), optional
        Conformal factor of ``q``.

    Returns
    -------
    center : ndarray of shape (..., dim)
    radius : ndarray of shape (...)
    """
    q = np.asarray(q, dtype=np.float64)
    d = np.asarray(d, dtype=np.float64)
    if cq is None:
        cq = conformal_factor(q)
    denom = 1.0 + d * cq
    center = q / denom[..., None]
    radius = cq * np.sqrt(d * (1.0 + d)) / denom
    return center, radius


def euclidean_ball(q, r, *, c: float = 1.0):
    """Euclidean centre and radius of the hyperbolic ball ``B_H(q, r)``.

    .. math::

        B_H(q, r) = B_E\\Big(\\frac{q}{1 + \\delta\\lambda_q},
        \\frac{\\lambda_q\\sqrt{\\delta(1+\\delta)}}{1+\\delta\\lambda_q}\\Big),
        \\quad \\delta = \\sinh^2(r/2),\\ \\lambda_q = 1-\\|q\\|^2

    for unit curvature; for curvature ``c`` the ball is computed in the unit
    ball after scaling by ``sqrt(c)`` and mapped back.
    """
    q = np.asarray(q, dtype=np.float64)
    s = np.sqrt(c)
    center, radius = euclidean_ball_from_delta(q * s, delta_from_dist(r, c=c))
    return center / s, radius / s


def ray_points(q, r, *, cq=None):
    """Norms of the two points of ``B_H(q, r)`` on the line through 0 and ``q``.

    The paper's ``t1 |q|`` and ``t2 |q|`` (appendix A and Check-Intersection):

    .. math::

        t_1\\|q\\| = \\tanh\\frac{d(0,q) + r}{2}, \\qquad
        t_2\\|q\\| = \\tanh\\frac{d(0,q) - r}{2}

    ``t1 |q|`` is the largest Euclidean norm in the ball; ``t2 |q|`` is the
    smallest when positive, and negative when the ball contains the origin.
    Unit curvature.

    Returns
    -------
    outer, inner : ndarray of shape (...)
        Signed norms ``t1 |q|`` and ``t2 |q|``.
    """
    h = dist0(q, cx=cq)
    r = np.asarray(r, dtype=np.float64)
    return np.tanh((h + r) / 2.0), np.tanh((h - r) / 2.0)
