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
"""

from __future__ import annotations

import numpy as np

from hypann.geometry.poincare import conformal_factor

__all__ = [
    "minkowski_inner",
    "lorentz_dist",
    "lorentz_to_poincare",
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

    evaluated as the Poincare distance of the converted points, which avoids
    the cancellation of ``-<x, y>_L`` (terms of size ``cosh(d(0,x))``).
    """
    from hypann.geometry.poincare import dist

    return dist(lorentz_to_poincare(x, c=c), lorentz_to_poincare(y, c=c), c=c)


def lorentz_to_poincare(x, *, c: float = 1.0):
    """Map hyperboloid points (..., d+1) to the Poincare ball (..., d).

    .. math:: p = \\frac{x_s}{1 + \\sqrt{c}\\,x_0}
    """
    x = np.asarray(x, dtype=np.float64)
    s = np.sqrt(c)
    return x[..., 1:] / (1.0 + s * x[..., :1])


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
