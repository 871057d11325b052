"""Conversions between the Poincare ball, the Lorentz (hyperboloid) model and the Klein ball.

Unit curvature unless ``c`` is given. For curvature ``-c`` the hyperboloid is
``-x0^2 + |xs|^2 = -1/c`` and the balls have radius ``1/sqrt(c)``.

.. math::

    \\text{Lorentz}(p) = \\frac{1}{1-\\|p\\|^2}\\,(1+\\|p\\|^2,\\; 2p), \\qquad
    \\text{Poincare}(x) = \\frac{x_s}{1+x_0}, \\qquad
    \\text{Klein}(p) = \\frac{2p}{1+\\|p\\|^2}, \\qquad
    \\text{Poincare}(k) = \\frac{k}{1+\\sqrt{1-\\|k\\|^2}}.

The Lorentz -> Poincare map ``xs / (1 + x0)`` involves no cancellation and is
the accurate direction; the Minkowski inner product ``x0 y0 - xs.ys`` cancels
catastrophically for points far from the origin, which is why hypann searches
in the Poincare ball.

Near the boundary the *conformal factor* ``1 - c|p|^2`` of the converted point
must not be taken from the rounded ``p`` (``|p|`` is within ``1e-13`` of
``1/sqrt(c)`` at hyperbolic norm 30, and rounding ``p`` costs that many
digits): :func:`lorentz_conformal_factor` takes it from the Lorentz
coordinates themselves.
"""

from __future__ import annotations

import numpy as np

from hypann.geometry.poincare import conformal_factor

__all__ = [
    "minkowski_inner",
    "lorentz_dist",
    "lorentz_to_poincare",
    "lorentz_conformal_factor",
    "poincare_to_lorentz",
    "klein_to_poincare",
    "poincare_to_klein",
]


def minkowski_inner(x, y):
    """Minkowski inner product ``<x, y>_L = -x0 y0 + xs . ys`` (rows)."""
    x = np.asarray(x, dtype=np.float64)
    y = np.asarray(y, dtype=np.float64)
    return -x[..., 0] * y[..., 0] + np.einsum("...i,...i->...", x[..., 1:], y[..., 1:])


def lorentz_dist(x, y, *, c: float = 1.0):
    """Distance on the hyperboloid, computed through the Poincare ball.

    .. math::

        d(x, y) = \\frac{1}{\\sqrt c}\\operatorname{arccosh}(-c\\langle x, y\\rangle_L)
                = \\frac{2}{\\sqrt c}\\operatorname{asinh}\\sqrt{\\frac{c\\|p-q\\|^2}{\\lambda_p\\lambda_q}}

    evaluated as the Poincare distance of the converted points ``p``, ``q``
    (:func:`lorentz_to_poincare`), which avoids the cancellation of
    ``-<x, y>_L`` (terms of size ``cosh(d(0,x))``), with the conformal
    factors ``lambda = 1 - c|p|^2`` taken from the Lorentz coordinates
    (:func:`lorentz_conformal_factor`), not from the rounded ``p``.
    """
    from hypann.geometry.poincare import delta, dist_from_delta

    p, q = lorentz_to_poincare(x, c=c), lorentz_to_poincare(y, c=c)
    cp, cq = lorentz_conformal_factor(x, c=c), lorentz_conformal_factor(y, c=c)
    return dist_from_delta(delta(p, q, cx=cp, cy=cq, c=c), c=c)


def lorentz_to_poincare(x, *, c: float = 1.0):
    """Map hyperboloid points (..., d+1) to the Poincare ball (..., d).

    .. math:: p = \\frac{x_s}{1 + \\sqrt{c}\\,x_0} = \\frac{x_s}{1 + \\sqrt{1 + c\\|x_s\\|^2}}

    The spatial part ``xs`` defines the point (``x0`` is implied by it on the
    hyperboloid and only checked by callers): float64 rows are on the
    hyperboloid only to rounding, ``c x0^2 - c|xs|^2 - 1`` is off by about
    ``1e-16 c x0^2``, and a map mixing ``x0`` and ``xs`` would turn that into
    a relative error of ``1e-16 sqrt(c) x0`` in ``1 - c|p|^2`` (5e-4 at
    hyperbolic norm 30). From ``xs`` alone both ``p`` and
    :func:`lorentz_conformal_factor` are accurate to a few ulps.
    """
    x = np.asarray(x, dtype=np.float64)
    return x[..., 1:] / _lorentz_one_plus_x0(x, float(c))[..., None]


def _lorentz_one_plus_x0(x, c):
    """``1 + sqrt(c) x0`` with ``x0`` implied by the spatial part: ``1 + sqrt(1 + c|xs|^2)``."""
    xs = x[..., 1:]
    return 1.0 + np.sqrt(1.0 + c * np.einsum("...i,...i->...", xs, xs))


def lorentz_conformal_factor(x, *, c: float = 1.0):
    """Conformal factor ``1 - c|p|^2`` of ``p = lorentz_to_poincare(x, c)``, from ``x`` itself.

    On the hyperboloid ``c x0^2 = 1 + c|xs|^2``, so

    .. math::

        1 - c\\|p\\|^2 = \\frac{2}{1 + \\sqrt c\\,x_0} = \\frac{2}{1 + \\sqrt{1 + c\\|x_s\\|^2}},

    a sum of positive terms: correct to a few ulps at any distance from the
    origin, where ``1 - c|p|^2`` taken from the rounded ``p`` loses
    ``log10(1/lambda)`` digits (all of them near hyperbolic norm 37). The
    spatial part defines the point, as in :func:`lorentz_to_poincare`.

    Parameters
    ----------
    x : ndarray of shape (..., d+1)
        Points on (or within rounding of) the upper sheet.
    c : float, default 1.0

    Returns
    -------
    ndarray of shape (...)
    """
    x = np.asarray(x, dtype=np.float64)
    return 2.0 / _lorentz_one_plus_x0(x, float(c))


def poincare_to_lorentz(p, *, c: float = 1.0):
    """Map Poincare points (..., d) to the hyperboloid (..., d+1).

    .. math:: x = \\frac{1}{\\sqrt c\\,(1-c\\|p\\|^2)}\\,(1+c\\|p\\|^2,\\; 2\\sqrt c\\,p)
    """
    p = np.asarray(p, dtype=np.float64)
    s = np.sqrt(c)
    lam = conformal_factor(p, c=c)
    sq = c * np.einsum("...i,...i->...", p, p)
    x0 = (1.0 + sq) / (s * lam)
    xs = 2.0 * p / lam[..., None]
    return np.concatenate([x0[..., None], xs], axis=-1)


def poincare_to_klein(p, *, c: float = 1.0):
    """Map Poincare points to the Klein ball: ``k = 2p / (1 + c|p|^2)``."""
    p = np.asarray(p, dtype=np.float64)
    sq = c * np.einsum("...i,...i->...", p, p)
    return 2.0 * p / (1.0 + sq)[..., None]


def klein_to_poincare(k, *, c: float = 1.0):
    """Map Klein points to the Poincare ball: ``p = k / (1 + sqrt(1 - c|k|^2))``."""
    k = np.asarray(k, dtype=np.float64)
    lam = conformal_factor(k, c=c)
    return k / (1.0 + np.sqrt(np.maximum(lam, 0.0)))[..., None]
