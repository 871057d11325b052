"""Exact Euclidean oracle by blocked numpy brute force (ground truth for oracles)."""

from __future__ import annotations

import numpy as np

from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle

# Floats of the (queries x points x dims) difference block kept in memory at once.
_BLOCK_ELEMENTS = 1 << 22


class BruteForceOracle(EuclideanOracle):
    """Exact ``knn`` by scanning every point; counts n evaluations per query.

    Squared distances come from explicit differences, ``sum_j (q_j - x_j)^2``,
    for choosing the neighbours as well as for reporting them. The expansion
    ``|q|^2 + |x|^2 - 2 q.x`` would lose everything below about ``1e-16``
    absolute to cancellation, and near the boundary of the Poincare ball
    the Euclidean balls that recentering asks about are that small.
    """

    name = "brute"
    exact = True
    counts_evaluations = True

    def _build(self, points):
        self._points = points

    def _knn(self, queries, k):
        m = queries.shape[0]
        n, d = self._points.shape
        idx = np.empty((m, k), dtype=np.int64)
        sq = np.empty((m, k))
        rows = max(1, _BLOCK_ELEMENTS // max(n * d, 1))
        for s in range(0, m, rows):
            diff = queries[s : s + rows, None, :] - self._points[None, :, :]
            block = np.einsum("mnd,mnd->mn", diff, diff)
            part = np.argpartition(block, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (len(block), 1))
            part_sq = np.take_along_axis(block, part, 1)
            order = np.argsort(part_sq, axis=1, kind="stable")
            idx[s : s + rows] = np.take_along_axis(part, order, 1)
            sq[s : s + rows] = np.take_along_axis(part_sq, order, 1)
        return EuclideanNeighbors(sq, idx, np.full(m, n, dtype=np.int64))

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
        return 0
