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

Rounding (beyond the paper). Near the boundary the rounded centre of a ball
can be farther from the true one than the ball's own radius, so "the top-k
did not change" proves nothing there. With an exact oracle, phase-2 rounds
ask for ``k + 1`` neighbours, merge the first ``k`` as the paper does, and
use the ``(k+1)``-th for the rounding-safe certificate of
:mod:`hypann.search.certify`: it must lie outside a ball that provably holds
every point with ``delta`` below the k-th best. The search stops when the
top-k did not change *and* the certificate holds; when it does not hold,
the round is repeated with ``2(k+1)``, ``4(k+1)``, ... neighbours, all
merged (``stats.extra["rechecks"]``, not counted in ``rounds``). On
well-spread data the certificate holds at once and the paper's rounds and
oracle calls are unchanged; near the boundary it costs a few calls. The
result is exact: the distances of float64 brute force (ties in ``delta``
may be broken differently), at any norm.

Oracles declaring ``supports_tracking`` (the paper's modified kd-tree,
:mod:`hypann.search.hyperbolic_kdtree`) also hand back the hyperbolic best of
every point they examined; those are merged too, and their exact sample
counts make a ``budget`` mean what the paper means.

Budget: ``samples <= budget`` per query, exactly, with every built-in oracle
(the oracle stops, or is asked for no more neighbours than the budget has
left, :meth:`~hypann.oracles.base.EuclideanOracle.knn`). A third-party oracle
that counts its evaluations but cannot stop early may overshoot by the
evaluations of its last call.
"""

from __future__ import annotations

import numpy as np

from hypann._params import Param
from hypann.geometry import _kernels
from hypann.geometry.poincare import euclidean_ball_from_delta
from hypann.result import SearchStats
from hypann.search.base import SearchAlgorithm, sort_ragged
from hypann.search.certify import enclosing_sq_radius, is_certified

# Safety net only: each round strictly improves the top-k, so the loop ends on
# its own; this bounds it if a broken (non-exact) oracle were ever plugged in.
MAX_ROUNDS = 10_000

# Padding of the Euclidean ball of a range query: relative to its radius, and
# absolute for the rounding of its centre (a few ulps of a number below 1).
RADIUS_PAD_REL = 1e-9
RADIUS_PAD_ABS = 4e-15


class RecenteringSearch(SearchAlgorithm):
    """Exact k-NN by recentring hyperbolic balls (needs an exact oracle for exactness).

    With an exact oracle the answer equals float64 brute force (distances;
    ids up to near ties, see the module docstring). ``budget``: at most
    ``budget`` samples per query with every built-in oracle.

    Parameters
    ----------
    two_phase : bool, default True
        Recentre on the best first, then on the k-th best (the paper's K-NN
        scheme). ``False`` recentres on the k-th best from the start.
    """

    name = "recentering"
    build_settings = (
        Param("two_phase", "bool", True, "recentre on the best first, then on the k-th best (the paper's K-NN scheme)"),
    )

    def __init__(self, *, two_phase: bool = True):
        self.two_phase = two_phase

    def _build(self, points, conformal, oracle):
        self.min_conformal_ = float(conformal.min())
        self.oracle_ = self._make_oracle(oracle)
        self.oracle_.build_with_conformal(points, conformal)  # the index's own arrays, no copy

    @property
    def nbytes(self):
        return int(self.oracle_.nbytes)

    @property
    def _certifies(self):
        """Rounding certificates need an exact oracle."""
        return bool(self.oracle_.exact)

    @property
    def supports_radius(self):
        return bool(self.oracle_.exact and self.oracle_.supports_radius)

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
        """One oracle call for ``k`` neighbours of each centre.

        Returns candidate ids (m, c), their deltas to the queries, the
        squared Euclidean distance of each centre's k-th neighbour (``inf``
        when fewer were returned) and the samples charged.
        """
        oracle = self.oracle_
        if oracle.supports_tracking and not oracle_params:
            e_sq, e_ids, h_ids, h_d, samples = oracle.knn_tracking(centers, k, queries, q_conformal, remaining)
            ids = np.hstack([e_ids, h_ids])
            cand_d = _kernels.delta_to_candidates(queries, q_conformal, self.points_, self.conformal_, ids)
            return ids, cand_d, e_sq[:, k - 1], np.asarray(samples, dtype=np.int64)
        res = oracle.knn(centers, k, budget=remaining, **(oracle_params or {}))
        ids = res.indices
        cand_d = _kernels.delta_to_candidates(queries, q_conformal, self.points_, self.conformal_, ids)
        if res.evaluations is not None:
            samples = np.asarray(res.evaluations, dtype=np.int64)
        else:
            samples = np.sum(ids >= 0, axis=1).astype(np.int64)
        return ids, cand_d, res.sq_dist[:, k - 1], samples

    def _ask_grouped(self, centers, kreq, queries, q_conformal, remaining, oracle_params=None):
        """:meth:`_ask` with a per-row neighbour count ``kreq``: one oracle call per distinct count."""
        m = centers.shape[0]
        groups = []
        for kv in np.unique(kreq):
            sel = np.flatnonzero(kreq == kv)
            rem = None if remaining is None else remaining[sel]
            groups.append((sel, self._ask(centers[sel], int(kv), queries[sel], q_conformal[sel], rem, oracle_params)))
        if len(groups) == 1:
            return groups[0][1]
        width = max(g[1][0].shape[1] for g in groups)
        ids = np.full((m, width), -1, dtype=np.int64)
        cand_d = np.full((m, width), np.inf)
        last_sq = np.empty(m)
        samples = np.empty(m, dtype=np.int64)
        for sel, (g_ids, g_d, g_last, g_samples) in groups:
            ids[sel, : g_ids.shape[1]] = g_ids
            cand_d[sel, : g_d.shape[1]] = g_d
            last_sq[sel] = g_last
            samples[sel] = g_samples
        return ids, cand_d, last_sq, samples

    def _certified(self, rows, queries, q_conformal, d_call, d_kth, last_sq, kreq):
        """Rows whose call (centre from ``d_call``) proves every ``delta < d_kth`` was returned."""
        radius_sq = enclosing_sq_radius(
            np.linalg.norm(queries[rows], axis=1), q_conformal[rows], d_call, d_kth,
            self.points_.shape[1], self.min_conformal_,
        )
        return is_certified(last_sq, radius_sq, self.points_.shape[1]) | (kreq >= self.points_.shape[0])

    def _first_round(self, queries, q_conformal, k, budget, oracle_params):
        """The oracle's neighbours of q itself: the starting top-k, stats, ids and k-th squared distance."""
        m = queries.shape[0]
        stats = SearchStats.zeros(m, "rechecks")
        best_ids = np.full((m, k), -1, dtype=np.int64)
        best_d = np.full((m, k), np.inf)
        remaining = None if budget is None else np.full(m, budget, dtype=np.int64)
        ids, cand_d, last_sq, samples = self._ask(queries, k, queries, q_conformal, remaining, oracle_params)
        _kernels.merge_topk(best_ids, best_d, ids, cand_d)
        stats.oracle_calls += 1
        stats.samples += samples
        stats.rounds += 1
        return best_ids, best_d, stats, ids, last_sq

    def search(self, queries, q_conformal, k, *, budget=None, oracle_params=None):
        m = queries.shape[0]
        n = self.points_.shape[0]
        best_ids, best_d, stats, _, _ = self._first_round(queries, q_conformal, k, budget, oracle_params)
        # phase 1 recentres on the best, phase 2 on the k-th best
        phase = np.full(m, 1 if (self.two_phase and k > 1) else 2, dtype=np.int8)
        active = np.ones(m, dtype=bool)
        certify = self._certifies
        # neighbours asked for in phase 2: k+1 (the last one only certifies) with
        # an exact oracle, more after a round that could not be certified
        k2 = np.full(m, k + 1 if certify else k, dtype=np.int64)
        recheck = np.zeros(m, dtype=bool)  # the next call repeats a round that was not certified
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
            in_phase2 = phase[act] == 2
            r_delta = best_d[act, np.where(in_phase2, k - 1, 0)]
            centers, _ = euclidean_ball_from_delta(queries[act], r_delta, cq=q_conformal[act])
            rem = None if budget is None else budget - stats.samples[act]
            kreq = np.where(in_phase2, k2[act], k)
            ids, cand_d, last_sq, samples = self._ask_grouped(
                np.ascontiguousarray(centers), kreq, queries[act], q_conformal[act], rem, oracle_params
            )
            if certify and cand_d.shape[1] > k:  # a plain round's (k+1)-th neighbour only certifies
                cand_d[kreq == k + 1, k] = np.inf
            sub_ids = best_ids[act]
            sub_d = best_d[act]
            before_best = sub_d[:, 0].copy()
            changed = _kernels.merge_topk(sub_ids, sub_d, ids, cand_d)
            best_ids[act] = sub_ids
            best_d[act] = sub_d
            stats.oracle_calls[act] += 1
            stats.samples[act] += samples
            stats.rounds[act] += ~recheck[act]
            stats.extra["rechecks"][act] += recheck[act]

            improved = np.where(in_phase2, changed, sub_d[:, 0] < before_best)
            phase[act[~improved & ~in_phase2]] = 2
            # phase 2 ends when the top-k stops changing (the paper) and, with an
            # exact oracle, the call proves that no point was lost to rounding
            stop = in_phase2 & ~improved
            recheck[act] = False
            if certify:
                # (a plain round did not merge its last neighbour: no "all n returned" rule)
                merged_all = np.where(kreq == k + 1, 0, kreq)
                cert = self._certified(act, queries, q_conformal, r_delta, sub_d[:, k - 1], last_sq, merged_all)
                widen = act[stop & ~cert]
                stop = in_phase2 & cert & (~improved | (kreq > k + 1))
                k2[widen] = np.minimum(2 * k2[widen], max(n, k + 2))
                recheck[widen] = True
            active[act[stop]] = False
            if budget is not None:
                active &= stats.samples < budget
        return best_ids, best_d, stats
