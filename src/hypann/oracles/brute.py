"""Exact Euclidean oracle by brute force (ground truth for oracles).

Returned squared distances are summed from explicit float64 differences,
``|q - x|^2 = sum_j (q_j - x_j)^2``. The fast expanded form
``F = |q|^2 + |x|^2 - 2 q.x`` (one matrix product) only *proposes*
candidates: near the boundary of the ball, where hyperbolic neighbours are
``1e-13`` apart or closer, it cancels to noise. It is within

.. math:: |F(x) - D(x)| \\le E = 2 (d + 4)\\, u\\, (\\|q\\| + \\max\\|x\\|)^2,
          \\qquad u = 2^{-53},

of the direct ``D`` (the norms, the dot product and the two additions each
err by at most ``(d + 3) u`` of that scale; twice that is taken). The
``k' = 2k + 10`` smallest ``F`` are re-ranked by ``D``; if the ``k'``-th
``F`` exceeds the re-ranked k-th ``D`` by more than ``E`` (plus the rounding
of ``D``), no other point can be among the k nearest. Rows where that does
not hold (clusters at the boundary) are scanned again with direct
differences only. Either way the answer is the float64 k-NN.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from hypann._params import Param
from hypann.geometry._kernels import insert_sorted, sq_dist_row
from hypann.oracles.base import UNIT_ROUNDOFF, EuclideanNeighbors, EuclideanOracle, exact_sq_rtol

# Seed of the fixed permutation whose prefix a budgeted call scans.
_PERMUTATION_SEED = 0

# Elements of the (queries x points) block of expanded distances kept in memory at once.
_BLOCK_ELEMENTS = 1 << 22


@nb.njit(cache=True, parallel=True)
def _brute_sq_knn(Q, X, order, limit, k):
    """k smallest ``|q - x|^2`` per query; row ``i`` scans ``order[:limit[i]]``.

    A row with ``limit[i] >= n`` scans every point in index order (ties go
    to the lower index). Returns ``(ids (m, k), sq (m, k), evaluations (m,))``
    (kernel contract: :mod:`hypann.geometry._kernels`).
    """
    m = Q.shape[0]
    n = X.shape[0]
    out_d = np.full((m, k), np.inf)
    out_i = np.full((m, k), -1, dtype=np.int64)
    evals = np.zeros(m, dtype=np.int64)
    for i in nb.prange(m):
        q = Q[i]
        kd = out_d[i]
        ki = out_i[i]
        full = limit[i] >= n
        lim = n if full else max(limit[i], 0)
        for t in range(lim):
            j = t if full else order[t]
            d = sq_dist_row(q, X[j])
            if d < kd[k - 1]:
                insert_sorted(kd, ki, d, j)
        evals[i] = lim
    return out_i, out_d, evals


class BruteForceOracle(EuclideanOracle):
    """Exact ``knn`` by scanning every point; counts n evaluations per query.

    With a ``budget`` of ``b < n`` samples for a row, that row scans only the
    first ``b`` points of a fixed pseudo-random permutation of the indexed
    points (drawn at build time from ``random_state``, the same for every
    call) and reports ``b`` evaluations: the budget is a hard limit.

    Parameters
    ----------
    random_state : int, default 0
        Seed of that permutation (an index made with a ``random_state``
        passes its own to an oracle named by a spec string).
    """

    name = "brute"
    exact = True
    counts_evaluations = True
    supports_budget = True
    thread_safe = True
    build_settings = (Param("random_state", "seed", _PERMUTATION_SEED, "seed of the sample a budget scans"),)

    def __init__(self, *, random_state: int = _PERMUTATION_SEED):
        self.random_state = random_state

    def spec(self) -> str:
        return "brute" if self.random_state == _PERMUTATION_SEED else f"brute:random_state={self.random_state}"

    def _build(self, points):
        self._points = points
        self._sq = np.einsum("ij,ij->i", points, points)
        self._max_norm = float(np.sqrt(self._sq.max())) if len(points) else 0.0
        self._order = np.random.default_rng(self.random_state).permutation(points.shape[0]).astype(np.int64)

    def _knn(self, queries, k, budget=None):
        m = queries.shape[0]
        n = self._points.shape[0]
        if k == 0 or n == 0:
            return EuclideanNeighbors(np.full((m, k), np.inf), np.full((m, k), -1, np.int64), np.zeros(m, np.int64))
        if budget is not None:
            limit = np.ascontiguousarray(budget, dtype=np.int64)
            ids, sq, evals = _brute_sq_knn(queries, self._points, self._order, limit, k)
            return EuclideanNeighbors(sq, ids, evals)
        sq, ids, unproven = self._knn_expanded(queries, k)
        if unproven.size:
            full = np.full(unproven.size, n, dtype=np.int64)
            ids[unproven], sq[unproven], _ = _brute_sq_knn(
                np.ascontiguousarray(queries[unproven]), self._points, self._order, full, k
            )
        return EuclideanNeighbors(sq, ids, np.full(m, n, dtype=np.int64))

    def _knn_expanded(self, queries, k):
        """Candidates by the expanded form, re-ranked directly; rows it cannot prove come back in ``unproven``."""
        m, d = queries.shape
        n = self._points.shape[0]
        wide = min(n, 2 * k + 10)
        q_sq = np.einsum("ij,ij->i", queries, queries)
        scale = (np.sqrt(q_sq) + self._max_norm) * (1.0 + 1e-12)
        err = 1.01 * 2.0 * (d + 4.0) * UNIT_ROUNDOFF * scale * scale
        slack = 1.0 + exact_sq_rtol(d)
        out_sq = np.empty((m, k))
        out_ids = np.empty((m, k), dtype=np.int64)
        proven = np.empty(m, dtype=bool)
        rows = max(1, _BLOCK_ELEMENTS // n)
        for s in range(0, m, rows):
            q = queries[s : s + rows]
            expanded = (self._sq[None, :] - 2.0 * (q @ self._points.T)) + q_sq[s : s + rows, None]
            if wide < n:
                cand = np.argpartition(expanded, wide - 1, axis=1)[:, :wide]
                last = np.take_along_axis(expanded, cand, 1).max(axis=1)
            else:
                cand = np.tile(np.arange(n), (len(q), 1))
                last = np.full(len(q), np.inf)
            diff = q[:, None, :] - self._points[cand]
            sq = np.einsum("mkd,mkd->mk", diff, diff)
            order = np.lexsort((cand, sq), axis=1)[:, :k]  # by distance, ties to the lower id
            out_sq[s : s + rows] = np.take_along_axis(sq, order, 1)
            out_ids[s : s + rows] = np.take_along_axis(cand, order, 1)
            proven[s : s + rows] = last - err[s : s + rows] > out_sq[s : s + rows, k - 1] * slack
        return out_sq, out_ids, np.flatnonzero(~proven)

    supports_radius = True

    def _radius(self, queries, radii):
        hits = []
        for q, r in zip(queries, radii):
            diff = self._points - q
            hits.append(np.flatnonzero(np.einsum("ij,ij->i", diff, diff) <= r * r))
        offsets = np.zeros(len(hits) + 1, dtype=np.int64)
        np.cumsum([len(h) for h in hits], out=offsets[1:])
        ids = np.concatenate(hits).astype(np.int64) if hits else np.empty(0, np.int64)
        return offsets, ids

    @property
    def nbytes(self):
        return int(self._sq.nbytes + self._order.nbytes)
