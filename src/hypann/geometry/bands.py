"""Spherical shells ("bands") of the Poincare ball by conformal factor (Wu & Charikar, appendix C).

Shell ``i >= 1`` of multiplicative width ``w > 1`` holds the points with

.. math::

    w^{i-1} \\le \\frac{1}{1-\\|x\\|^2} \\le w^{i},

i.e. hyperbolic norms ``h`` with ``H_{i-1} <= h <= H_i`` where, since
``1/(1-|x|^2) = cosh^2(h/2)``,

.. math::

    H_i = 2\\operatorname{arccosh}(w^{i/2}), \\qquad H_0 = 0 .

A hyperbolic ball ``B_H(q, r)`` covers exactly the hyperbolic norms
``[max(0, h_q - r), h_q + r]`` (it is connected and meets the ray through 0
and q at both extremes, the paper's ``t1 q`` and ``t2 q``), so it meets shell
``b`` iff ``H_{b-1} <= h_q + r`` and ``H_b >= h_q - r``: that is
Check-Intersection (Algorithm 6). The paper computes the lower band with a
floor, which probes one band more than needed; the test here is the exact
one, with a small conservative tolerance for rounding.
"""

from __future__ import annotations

import numpy as np

from hypann.geometry.poincare import log_cosh

# Relative slack on hyperbolic norms in Check-Intersection: rounding must
# only ever make the test probe more, never skip a shell it should probe.
INTERSECT_RTOL = 1e-9


def shell_of(conformal, width):
    """Shell index ``max(1, ceil(log(1/(1-|x|^2)) / log w))`` of points (Algorithm 5)."""
    conformal = np.asarray(conformal, dtype=np.float64)
    idx = np.ceil(-np.log(conformal) / np.log(width))
    return np.maximum(idx, 1).astype(np.int64)


def n_shells_for(max_norm, width):
    """Number of shells needed up to Euclidean norm ``max_norm`` (Algorithm 5's num_bands)."""
    lam = (1.0 - max_norm) * (1.0 + max_norm)
    return int(max(1, np.ceil(-np.log(lam) / np.log(width))))


def shell_radii(n_shells, width):
    """Hyperbolic norms ``H_0 = 0, H_1, ..., H_n`` of the shell boundaries.

    .. math:: H_i = 2\\operatorname{arccosh}(w^{i/2}) = 2\\log(w^{i/2} + \\sqrt{w^i - 1})
    """
    i = np.arange(n_shells + 1, dtype=np.float64)
    return 2.0 * np.arccosh(np.power(float(width), i / 2.0))


def hyperbolic_norm_from_conformal(conformal):
    """``h = d(0, x)`` from ``1-|x|^2`` alone: ``cosh^2(h/2) = 1/(1-|x|^2)``."""
    conformal = np.asarray(conformal, dtype=np.float64)
    return 2.0 * np.arccosh(1.0 / np.sqrt(conformal))


def ball_meets_shell(h_q, r, shell, radii):
    """Check-Intersection: does ``B_H(q, r)`` meet shell ``shell``? (vectorized)

    Parameters
    ----------
    h_q : ndarray
        Hyperbolic norms of the queries.
    r : ndarray
        Ball radii (``inf`` for "no candidate yet": every shell meets).
    shell : ndarray of int
        Shell indices (1-based); indices outside ``1..n`` never meet.
    radii : ndarray
        :func:`shell_radii` output.
    """
    n = len(radii) - 1
    valid = (shell >= 1) & (shell <= n)
    s = np.clip(shell, 1, n)
    slack = INTERSECT_RTOL * (1.0 + h_q + np.where(np.isfinite(r), r, 0.0))
    inner_ok = radii[s - 1] <= h_q + r + slack
    outer_ok = radii[s] >= h_q - r - slack
    return valid & inner_ok & outer_ok


def covered_radius(h_q, lo, hi, radii):
    """Largest ``rho`` with ``B_H(q, rho)`` inside shells ``lo..hi`` (used by Choose-Band).

    ``min(H_hi - h_q, h_q - H_{lo-1})``, the second term dropped when ``lo = 1``
    (the union then contains the origin); negative when ``q`` is outside.
    """
    up = radii[np.clip(hi, 0, len(radii) - 1)] - h_q
    down = np.where(lo <= 1, np.inf, h_q - radii[np.clip(lo - 1, 0, len(radii) - 1)])
    return np.minimum(up, down)


def band_log_extent(h):
    """``log(1/(1-|x|^2)) = 2 log cosh(h/2)`` for hyperbolic norm ``h`` (overflow-free)."""
    return 2.0 * log_cosh(np.asarray(h, dtype=np.float64) / 2.0)
