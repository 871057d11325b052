"""Rounding-safe certificates: when an exact oracle's answer proves a hyperbolic ball complete.

The recentring algorithms ask an exact Euclidean oracle for the nearest
points of the centre ``c`` of a hyperbolic ball ``B_H(q, D)``
(:func:`~hypann.geometry.poincare.euclidean_ball_from_delta`):

.. math::

    c = \\frac{q}{1 + D\\lambda_q},\\qquad
    \\rho = \\frac{\\lambda_q\\sqrt{D(1+D)}}{1 + D\\lambda_q},\\qquad
    \\lambda_q = 1 - \\|q\\|^2 .

In exact arithmetic the ball is ``B_E(c, rho)``. In float64 the centre is
rounded, by up to about ``1e-16 |q|`` per coordinate, and near the boundary
``rho`` is itself that small (``rho ~ lambda_q sqrt(D)``: ``1e-13`` at
hyperbolic norm 30 and below ``1e-16`` at 37), so "the k Euclidean nearest
points of the centre" can miss a point strictly inside the ball. This module
turns the rounding into a bound.

Certificate. Let an oracle call centred at the *computed* ``c'`` (computed
from ``D_call``) return its ``k'`` nearest points, the last at squared
distance ``e_{k'}``. Every point with computed ``delta(q, x) < D_test``
lies within

.. math::

    \\rho_{out} = \\rho(D^+)\\,(1 + \\epsilon_\\lambda + 8u)
        + \\|c(D^+) - c(D_{call})\\| + (\\epsilon_\\lambda + 4u)\\|q\\|,
    \\qquad D^+ = D_{test}\\,(1 + \\eta),

of ``c'`` (:func:`enclosing_sq_radius`), where ``u = 2^-53``, ``eta``
bounds the relative error of a computed ``delta`` (:func:`delta_rtol`) and
``eps_lambda`` that of a stored conformal factor
(:func:`conformal_rtol`): the first term is the true ball, the second the
distance between the centres for ``D^+`` and ``D_call``, the third the
rounding of ``c'``. An exact oracle guarantees that every point it did not
return is at squared distance at least ``e_{k'} (1 - eps_d)`` from ``c'``
(:func:`hypann.oracles.base.exact_sq_rtol`). Hence

.. math:: e_{k'}\\,(1 - \\epsilon_d) > \\rho_{out}^2

proves that the call returned every point with ``delta < D_test``
(:func:`is_certified`); a call that returned fewer than ``k'`` points
(``e_{k'} = inf``) returned them all.

The algorithms certify ``D_test = D_k``, the current k-th best: a certified
call proves that no point outside the top-k has a smaller computed
``delta``, which is what float64 brute force returns (ties in ``delta`` may
be broken differently). To get the proof without an extra call, Recentering
asks for ``k + 1`` neighbours in its final-phase rounds and uses the
``(k+1)``-th only for the certificate: on well-spread data it lies well
outside the ball and the paper's rounds are unchanged. Where it does not
(near the boundary, where the centre's rounding is as large as the ball),
the round is repeated with ``2k'``, ``4k'``, ... neighbours until the
certificate holds (with ``k' >= n`` it always does).
"""

from __future__ import annotations

import numpy as np

from hypann.oracles.base import UNIT_ROUNDOFF, exact_sq_rtol

__all__ = ["conformal_rtol", "delta_rtol", "enclosing_sq_radius", "is_certified"]

_U = UNIT_ROUNDOFF


def conformal_rtol(conformal, dim):
    """Relative error bound of a stored (compensated) conformal factor ``1-|x|^2``.

    The double-double sum of squares is exact to about ``dim^2 u^2`` in
    absolute terms and the result is rounded once: ``2u + 4 dim^2 u^2 / lambda``.
    """
    conformal = np.asarray(conformal, dtype=np.float64)
    return 2.0 * _U + 4.0 * float(dim) ** 2 * _U * _U / conformal


def delta_rtol(dim, q_conformal, min_conformal):
    """Relative error bound ``eta`` of a computed ``delta(q, x)`` (see the module docstring).

    ``|q-x|^2`` from explicit differences is within ``(dim + 2) u``; the
    product and quotient add ``2u``; each conformal factor adds its own
    :func:`conformal_rtol` (``min_conformal``: the smallest over the data).
    """
    return (
        (float(dim) + 6.0) * _U
        + conformal_rtol(q_conformal, dim)
        + conformal_rtol(min_conformal, dim)
    ) * 1.01


def enclosing_sq_radius(q_norm, q_conformal, d_call, d_test, dim, min_conformal):
    """``rho_out^2``: every point with computed ``delta < d_test`` is this close to the computed centre.

    Parameters
    ----------
    q_norm : ndarray of shape (m,)
        ``|q|`` of the queries.
    q_conformal : ndarray of shape (m,)
        Their stored ``1-|q|^2``.
    d_call : ndarray of shape (m,)
        The ``delta`` the call's centre was computed from
        (``euclidean_ball_from_delta(q, d_call)``; 0 for a call centred on q).
    d_test : ndarray of shape (m,)
        The ``delta`` to certify.
    dim : int
    min_conformal : float
        Smallest stored conformal factor of the indexed points.

    Returns
    -------
    ndarray of shape (m,)
        Squared radius, rounded up.
    """
    q_norm = np.asarray(q_norm, dtype=np.float64) * (1.0 + (float(dim) + 2.0) * _U)
    lam = np.asarray(q_conformal, dtype=np.float64)
    eps_lam = conformal_rtol(lam, dim)
    d_plus = np.asarray(d_test, dtype=np.float64) * (1.0 + delta_rtol(dim, lam, min_conformal)) * (1.0 + 2.0 * _U)
    d_call = np.asarray(d_call, dtype=np.float64)
    with np.errstate(over="ignore", invalid="ignore"):
        rho = lam * np.sqrt(d_plus) * np.sqrt(1.0 + d_plus) / (1.0 + d_plus * lam) * (1.0 + eps_lam + 8.0 * _U)
        lam_hi = lam * (1.0 + eps_lam)
        lam_lo = lam * (1.0 - eps_lam)
        shift = q_norm * lam_hi * np.abs(d_plus - d_call) / ((1.0 + d_plus * lam_lo) * (1.0 + d_call * lam_lo))
        shift *= 1.0 + 8.0 * _U
        centre_err = (eps_lam + 4.0 * _U) * q_norm
        r = (rho + shift + centre_err) * (1.0 + 4.0 * _U)
        return r * r * (1.0 + 3.0 * _U)


def is_certified(last_sq, rho_out_sq, dim):
    """True where an exact oracle's last returned squared distance proves the ball complete."""
    return np.asarray(last_sq, dtype=np.float64) * (1.0 - exact_sq_rtol(dim)) > rho_out_sq
