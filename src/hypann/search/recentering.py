"""Recentering-HyperbolicNN (Wu & Charikar, Algorithm 1) and its K-NN generalization.

Exact hyperbolic k-NN from an exact Euclidean k-NN oracle. Every hyperbolic
ball ``B_H(q, r)`` is a Euclidean ball (:func:`~hypann.geometry.poincare.euclidean_ball_from_delta`):

.. math::

    B_H(q, r) = B_E\\Big(\\frac{q}{1+\\delta\\lambda_q},\\;
    \\frac{\\lambda_q\\sqrt{\\delta(1+\\delta)}}{1+\\delta\\lambda_q}\\Big),
    \\qquad \\delta = \\sinh^2(r/2),\\ \\lambda_q = 1-\\|q\\|^2 .

Starting from the oracle's answer at ``q``, the algorithm asks the oracle for
the ``k`` Euclidean nearest points of the centre of the ball through the
current candidate; any point strictly inside that ball is hyperbolically
closer, so the answer either improves or proves the candidate optimal.

K-NN (the paper's evaluation section): every oracle call returns ``k``
Euclidean neighbours, merged into the running top-k by ``delta``. Phase 1
recentres on the ball of the current *best* until it stops improving; phase 2
recentres on the ball of the current *k-th best* until the top-k set stops
changing. Phase 2 makes the result exact: if some point not in the top-k set
``S`` were strictly inside the k-th ball, then the k Euclidean nearest points
of its centre contain a point outside ``S`` that is strictly inside the ball.

Theorem 1: for 1-NN at most ``j + 1`` oracle calls when the Euclidean nearest
neighbour of ``q`` is its ``j``-th hyperbolic nearest neighbour.

Oracles with a ``knn_tracking`` method (the paper's modified kd-tree,
:mod:`hypann.search.hyperbolic_kdtree`) also hand back the hyperbolic best of
every point they examined; those are merged too, and their exact sample
counts make a ``budget`` mean what the paper means.
"""

from __future__ import annotations

import numpy as np

from hypann.geometry import _kernels
from hypann.geometry.poincare import euclidean_ball_from_delta
from hypann.result import SearchStats
from hypann.search.base import SearchAlgorithm, sort_ragged

# Safety net only: each round strictly improves the top-k, so the loop ends on
# its own; this bounds it if a broken (non-exact) oracle were ever plugged in.
MAX_ROUNDS = 10_000

# Padding of the Euclidean ball of a range query: relative to its radius, and
# absolute for the rounding of its centre (a few ulps of a number below 1).
RADIUS_PAD_REL = 1e-9
RADIUS_PAD_ABS = 4e-15


class RecenteringSearch(SearchAlgorithm):
    """Exact k-NN by recentring hyperbolic balls (needs an exact oracle for exactness).

    Parameters
    ----------
    two_phase : bool, default True
        Recentre on the best first, then on the k-th best (the paper's K-NN
        scheme). ``False`` recentres on the k-th best from the start.
    """

    name = "recentering"

    def __init__(self, *, two_phase: bool = True):
        self.two_phase = two_phase

    def _build(self, points, conformal, oracle):
        self.oracle_ = self._make_oracle(oracle)
        if hasattr(self.oracle_, "build_with_conformal"):
            self.oracle_.build_with_conformal(points, conformal)
        else:
            self.oracle_.build(points)

    @property
    def nbytes(self):
        return int(self.oracle_.nbytes)

    @property
    def supports_radius(self):
        return bool(getattr(self.oracle_, "exact", False) and getattr(self.oracle_, "supports_radius", False))

    def search_radius(self, queries, q_conformal, delta_limits):
        """Exact range search: one Euclidean ball query per hyperbolic ball.

        ``{x: delta(q, x) <= t}`` is the Euclidean ball of
        :func:`~hypann.geometry.poincare.euclidean_ball_from_delta`; its radius
        is padded by ``RADIUS_PAD_REL`` (relative) plus ``RADIUS_PAD_ABS``
        (the rounding of a centre of norm < 1), then every candidate is
        checked by its ``delta``.
        """
        if not self.supports_radius:
            return super().search_radius(queries, q_conformal, delta_limits)
        centers, radii = euclidean_ball_from_delta(queries, delta_limits, cq=q_conformal)
        radii = radii * (1.0 + RADIUS_PAD_REL) + RADIUS_PAD_ABS
        offsets, ids = self.oracle_.radius(np.ascontiguousarray(centers), radii)
        rows = np.repeat(np.arange(queries.shape[0]), np.diff(offsets))
        deltas = _kernels.delta_pairs(queries, q_conformal, self.points_, self.conformal_, rows, ids)
        keep = deltas <= delta_limits[rows]
        counts = np.bincount(rows[keep], minlength=queries.shape[0])
        offsets = np.zeros(queries.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        return sort_ragged(offsets, ids[keep], deltas[keep])

    def _ask(self, centers, k, queries, q_conformal, remaining, oracle_params=None):
        """One oracle round: candidate ids and their deltas to the queries."""
        oracle = self.oracle_
        if hasattr(oracle, "knn_tracking") and not oracle_params:
            e_sq, e_ids, h_ids, h_d, samples = oracle.knn_tracking(centers, k, queries, q_conformal, remaining)
            ids = np.hstack([e_ids, h_ids])
            cand_d = _kernels.delta_to_candidates(queries, q_conformal, self.points_, self.conformal_, ids)
            return ids, cand_d, np.asarray(samples, dtype=np.int64)
        res = oracle.knn(centers, k, budget=remaining, **(oracle_params or {}))
        ids = res.indices
        cand_d = _kernels.delta_to_candidates(queries, q_conformal, self.points_, self.conformal_, ids)
        if res.evaluations is not None:
            samples = np.asarray(res.evaluations, dtype=np.int64)
        else:
            samples = np.sum(ids >= 0, axis=1).astype(np.int64)
        return ids, cand_d, samples

    def _first_round(self, queries, q_conformal, k, budget, oracle_params):
        """The oracle's neighbours of q itself: the starting top-k, stats and first candidates."""
        m = queries.shape[0]
        stats = SearchStats.zeros(m)
        best_ids = np.full((m, k), -1, dtype=np.int64)
        best_d = np.full((m, k), np.inf)
        remaining = None if budget is None else np.full(m, budget, dtype=np.int64)
        ids, cand_d, samples = self._ask(queries, k, queries, q_conformal, remaining, oracle_params)
        _kernels.merge_topk(best_ids, best_d, ids, cand_d)
        stats.oracle_calls += 1
        stats.samples += samples
        stats.rounds += 1
        return best_ids, best_d, stats, ids

    def search(self, queries, q_conformal, k, *, budget=None, oracle_params=None):
        m = queries.shape[0]
        best_ids, best_d, stats, _ = self._first_round(queries, q_conformal, k, budget, oracle_params)
        # phase 1 recentres on the best, phase 2 on the k-th best
        phase = np.full(m, 1 if (self.two_phase and k > 1) else 2, dtype=np.int8)
        active = np.ones(m, dtype=bool)
        if budget is not None:
            active &= stats.samples < budget

        for _ in range(MAX_ROUNDS):
            # A zero radius cannot hold a strictly closer point; inf means the
            # oracle found fewer than k points (approximate oracles only).
            radius_col = np.where(phase == 1, 0, k - 1)
            r_delta = best_d[np.arange(m), radius_col]
            done_now = active & ((r_delta == 0) | ~np.isfinite(r_delta))
            promote = done_now & (phase == 1) & np.isfinite(best_d[:, k - 1])
            phase[promote] = 2
            active &= ~(done_now & ~promote)
            act = np.flatnonzero(active)
            if act.size == 0:
                break
            r_delta = best_d[act, np.where(phase[act] == 1, 0, k - 1)]
            centers, _ = euclidean_ball_from_delta(queries[act], r_delta, cq=q_conformal[act])
            rem = None if budget is None else budget - stats.samples[act]
            ids, cand_d, samples = self._ask(
                np.ascontiguousarray(centers), k, queries[act], q_conformal[act], rem, oracle_params
            )
            sub_ids = best_ids[act]
            sub_d = best_d[act]
            before_best = sub_d[:, 0].copy()
            changed = _kernels.merge_topk(sub_ids, sub_d, ids, cand_d)
            best_ids[act] = sub_ids
            best_d[act] = sub_d
            stats.oracle_calls[act] += 1
            stats.samples[act] += samples
            stats.rounds[act] += 1

            improved = np.where(phase[act] == 1, sub_d[:, 0] < before_best, changed)
            stalled = act[~improved]
            to_phase2 = stalled[phase[stalled] == 1]
            phase[to_phase2] = 2
            finished = stalled[phase[stalled] == 2]
            finished = np.setdiff1d(finished, to_phase2, assume_unique=True)
            active[finished] = False
            if budget is not None:
                active &= stats.samples < budget
        return best_ids, best_d, stats
