"""Exact Euclidean oracle by blocked numpy brute force (ground truth for oracles)."""

from __future__ import annotations

import numpy as np

from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle

# Rows of the (queries x points) distance block kept in memory at once.
_BLOCK_ELEMENTS = 1 << 22


class BruteForceOracle(EuclideanOracle):
    """Exact ``knn`` by scanning every point; counts n evaluations per query.

    Squared distances use ``|q|^2 + |x|^2 - 2 q.x`` for speed and are then
    recomputed from explicit differences for the returned neighbours.
    """

    name = "brute"
    exact = True
    counts_evaluations = True

    def _build(self, points):
        self._points = points
        self._sq = np.einsum("ij,ij->i", points, points)

    def _knn(self, queries, k):
        m = queries.shape[0]
        n = self._points.shape[0]
        idx = np.empty((m, k), dtype=np.int64)
        rows = max(1, _BLOCK_ELEMENTS // max(n, 1))
        for s in range(0, m, rows):
            q = queries[s : s + rows]
            d = self._sq[None, :] - 2.0 * (q @ self._points.T)
            part = np.argpartition(d, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (len(q), 1))
            idx[s : s + rows] = part
        diff = queries[:, None, :] - self._points[idx]
        sq = np.einsum("mkd,mkd->mk", diff, diff)
        order = np.argsort(sq, axis=1, kind="stable")
        return EuclideanNeighbors(
            np.take_along_axis(sq, order, 1),
            np.take_along_axis(idx, order, 1),
            np.full(m, n, dtype=np.int64),
        )

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
        return int(self._sq.nbytes)
