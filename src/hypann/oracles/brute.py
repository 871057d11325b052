"""Exact Euclidean oracle by brute force (ground truth for oracles).

Squared distances are summed from explicit float64 differences,
``|q - x|^2 = sum_j (q_j - x_j)^2``, never as ``|q|^2 + |x|^2 - 2 q.x``: near
the boundary of the ball, where hyperbolic neighbours are ``1e-13`` apart
or closer, the expanded form cancels to noise and would rank them at random.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from hypann.geometry._kernels import insert_sorted, sq_dist_row
from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle

# Seed of the fixed permutation whose prefix a budgeted call scans.
_PERMUTATION_SEED = 0


@nb.njit(cache=True, parallel=True)
def _brute_sq_knn(Q, X, order, limit, k):
    """k smallest ``|q - x|^2`` per query; row ``i`` scans ``order[:limit[i]]``.

    A row with ``limit[i] >= n`` scans every point in index order (ties go
    to the lower index). Returns ``(sq (m, k), ids (m, k), evaluations (m,))``.
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
    return out_d, out_i, evals


class BruteForceOracle(EuclideanOracle):
    """Exact ``knn`` by scanning every point; counts n evaluations per query.

    With a ``budget`` of ``b < n`` samples for a row, that row scans only the
    first ``b`` points of a fixed pseudo-random permutation of the indexed
    points (drawn at build time with seed 0, the same for every call) and
    reports ``b`` evaluations: the budget is a hard limit.
    """

    name = "brute"
    exact = True
    counts_evaluations = True
    supports_budget = True

    def _build(self, points):
        self._points = points
        self._order = np.random.default_rng(_PERMUTATION_SEED).permutation(points.shape[0]).astype(np.int64)

    def _knn(self, queries, k, budget=None):
        m = queries.shape[0]
        n = self._points.shape[0]
        if k == 0 or n == 0:
            return EuclideanNeighbors(np.full((m, k), np.inf), np.full((m, k), -1, np.int64), np.zeros(m, np.int64))
        limit = np.full(m, n, dtype=np.int64) if budget is None else np.ascontiguousarray(budget, dtype=np.int64)
        sq, ids, evals = _brute_sq_knn(queries, self._points, self._order, limit, k)
        return EuclideanNeighbors(sq, ids, evals)

    @property
    def nbytes(self):
        return int(self._order.nbytes)
