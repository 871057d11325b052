"""Binary-Search-HyperbolicNN (Wu & Charikar, Algorithm 2): a ``ratio``-approximate k-NN.

Keeps a lower bound ``L`` and an upper bound ``R`` on the hyperbolic distance
of the (k-th) nearest neighbour and bisects geometrically: the oracle, asked
for the ``k`` Euclidean nearest points of the Euclidean centre of
``B_H(q, sqrt(R L))``, certifies whether that ball holds ``k`` points. Stops
when ``R <= ratio * L``; Theorem 2 bounds the rounds by
``log2(log(R0/L0) / log(ratio))`` after the first call.

Initial lower bound. The first call returns the k-th Euclidean nearest point
at Euclidean distance ``rho``: the open Euclidean ball ``B_E(q, rho)`` holds
fewer than k points, so the k-th hyperbolic neighbour lies on or outside it,
and ``L0`` is the smallest hyperbolic distance from ``q`` to its boundary
sphere, reached on the ray through 0 and q at norm ``| |q| - rho |``:

.. math::

    \\delta_{L_0} = \\frac{\\rho^2}{\\lambda_q\\,(1 - (\\|q\\| - \\rho)^2)},\\qquad
    1-(\\|q\\|-\\rho)^2 = \\Big(\\frac{\\lambda_q}{1+\\|q\\|} + \\rho\\Big)(1+\\|q\\|-\\rho).

For k = 1 and ``rho < |q|`` this is the paper's
``L = d_H(q, (1 - |n_E - q|/|q|) q)``; the form above also covers ``q = 0``
and ``rho >= |q|`` (where the paper's point would cross the origin) and keeps
its digits at the boundary. The guarantee is on the k-th returned distance:
``d(q, n_k) <= ratio * d(q, n*_k)``.

Rounding (beyond the paper). The guarantee needs every lower bound to be
true. With an exact oracle ``rho`` is shrunk by the oracle's rounding slack,
and a ball is declared to hold fewer than k points only when the call also
passes the certificate of :mod:`hypann.search.certify` for
``delta < delta_mid`` (its k-th neighbour lies outside a ball that provably
holds every such point); otherwise the call is repeated at the same radius
with ``2k``, ``4k``, ... neighbours (``stats.extra["rechecks"]``, not
counted in ``rounds``). The guarantee then holds for the float64 distances
at any norm, also at the boundary of the ball where the rounded ball
centres are off by more than the balls' radii.

Budget: ``samples <= budget`` per query, exactly, with every built-in oracle
(as :class:`~hypann.search.recentering.RecenteringSearch`).
"""

from __future__ import annotations

from dataclasses import replace

import numpy as np

from hypann._params import Param
from hypann.geometry import _kernels
from hypann.geometry.poincare import delta_from_dist, dist_from_delta, euclidean_ball_from_delta
from hypann.oracles.base import UNIT_ROUNDOFF, exact_sq_rtol
from hypann.search.certify import conformal_rtol
from hypann.search.recentering import MAX_ROUNDS, RecenteringSearch


def initial_lower_delta(q_norm, q_conformal, rho):
    """``delta`` lower bound from an empty open Euclidean ball of radius ``rho`` around q."""
    a = q_conformal / (1.0 + q_norm) + rho
    b = 1.0 + q_norm - rho
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.where(rho > 0, rho * rho / (q_conformal * a * b), 0.0)


#: the approximation factor, a build setting and a per-call one
RATIO = Param("ratio", "float", 1.1, "approximation factor c > 1 of the paper (the guarantee on the k-th distance)",
              low=1.0, low_open=True)


class BinarySearchSearch(RecenteringSearch):
    """``ratio``-approximate k-NN by geometric bisection on the radius.

    Parameters
    ----------
    ratio : float, default 1.1
        Approximation factor ``c > 1`` of the paper (named ``ratio`` here
        because ``c`` is the curvature throughout hypann); also a per-call
        setting of ``search``. Theorem 2's round count
        ``log2(log(R0/L0) / log(ratio))`` is unbounded as ``ratio -> 1``, so
        ``ratio <= 1`` is refused.
    """

    name = "binary_search"
    build_settings = (RATIO,)
    query_settings = (replace(RATIO, default=None, none_ok=True, doc="approximation factor of this call"),)

    def __init__(self, *, ratio: float = 1.1):
        self.ratio = ratio

    def search(self, queries, q_conformal, k, *, budget=None, ratio=None, oracle_params=None):
        ratio = RATIO.check(self.ratio if ratio is None else ratio)
        m, dim = queries.shape
        n = self.points_.shape[0]
        certify = self._certifies
        best_ids, best_d, stats, _, last_sq = self._first_round(queries, q_conformal, k, budget, oracle_params)

        # rho: Euclidean distance of the k-th Euclidean neighbour of q, less
        # the oracle's rounding slack (inf when fewer than k came back)
        rho = np.sqrt(last_sq * (1.0 - exact_sq_rtol(dim)))
        q_norm = np.linalg.norm(queries, axis=1)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            lower_delta = initial_lower_delta(q_norm, q_conformal, rho)
            # rounding of the formula: a few u, the conformal factor, and 1+|q|-rho
            slack = (dim + 16.0) * UNIT_ROUNDOFF + 2.0 * conformal_rtol(q_conformal, dim)
            slack = slack + 4.0 * UNIT_ROUNDOFF / np.abs(1.0 + q_norm - rho)
            lower_delta = np.where(np.isfinite(rho), lower_delta * np.maximum(1.0 - slack, 0.0), 0.0)
        lower = dist_from_delta(lower_delta)
        upper = dist_from_delta(best_d[:, k - 1])
        with np.errstate(divide="ignore", invalid="ignore"):
            stats.extra["initial_ratio_log"] = np.where(lower > 0, np.log(upper / lower), 0.0)

        kreq = np.full(m, k, dtype=np.int64)  # neighbours asked for: > k once a call needed re-checking
        recheck = np.zeros(m, dtype=bool)  # the next call repeats the last radius
        active = (upper > ratio * lower) & np.isfinite(upper)
        if budget is not None:
            active &= stats.samples < budget
        for _ in range(MAX_ROUNDS):
            act = np.flatnonzero(active)
            if act.size == 0:
                break
            mid = np.sqrt(upper[act] * lower[act])
            mid_delta = delta_from_dist(mid)
            centers, _ = euclidean_ball_from_delta(queries[act], mid_delta, cq=q_conformal[act])
            rem = None if budget is None else budget - stats.samples[act]
            ids, cand_d, last_sq, samples = self._ask_grouped(
                np.ascontiguousarray(centers), kreq[act], queries[act], q_conformal[act], rem, oracle_params
            )
            sub_ids = best_ids[act]
            sub_d = best_d[act]
            _kernels.merge_topk(sub_ids, sub_d, ids, cand_d)
            best_ids[act] = sub_ids
            best_d[act] = sub_d
            stats.oracle_calls[act] += 1
            stats.samples[act] += samples
            stats.rounds[act] += ~recheck[act]
            stats.extra["rechecks"][act] += recheck[act]
            # The ball of radius mid holds k points iff the k-th best is now inside it.
            new_upper = dist_from_delta(sub_d[:, k - 1])
            nonempty = new_upper <= mid
            if certify:
                # "fewer than k inside" is a lower bound only if no point was lost to rounding
                cert = self._certified(act, queries, q_conformal, mid_delta, mid_delta, last_sq, kreq[act])
                raised = np.maximum(lower[act], dist_from_delta(mid_delta))
            else:
                cert = np.ones(act.size, dtype=bool)
                raised = mid
            upper[act] = np.where(nonempty, new_upper, upper[act])
            lower[act] = np.where(~nonempty & cert, raised, lower[act])
            widen = act[~nonempty & ~cert]
            kreq[widen] = np.minimum(2 * kreq[widen], max(n, k))
            recheck[act] = False
            recheck[widen] = True
            active[act] = upper[act] > ratio * lower[act]
            if budget is not None:
                active &= stats.samples < budget
        return best_ids, best_d, stats
