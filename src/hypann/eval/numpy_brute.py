"""Blocked numpy float64 brute force: the baseline every speed ratio is measured against.

Done the careful way: ``1-|x|^2`` once per point with
compensated arithmetic, ``|q-x|^2`` from explicit differences, ranking by the
monotone ``delta = |q-x|^2/((1-|q|^2)(1-|x|^2))`` and ``asinh`` only for the k
winners. Single-threaded numpy, no BLAS shortcut (the matrix-product form
``|q|^2+|x|^2-2q.x`` is faster but loses the true neighbour near the boundary).
"""

from __future__ import annotations

import numpy as np

from hypann.geometry.poincare import conformal_factor, dist_from_delta

# Elements of the (queries, points, dims) difference block held at once.
_BLOCK_ELEMENTS = 1 << 23


def numpy_brute_knn(queries, points, k, *, points_conformal=None):
    """Exact hyperbolic k-NN in blocks; returns ``(ids (m,k) int64, distances (m,k))``."""
    queries = np.ascontiguousarray(queries, dtype=np.float64)
    points = np.ascontiguousarray(points, dtype=np.float64)
    cx = conformal_factor(points) if points_conformal is None else points_conformal
    cq = conformal_factor(queries)
    m, n = queries.shape[0], points.shape[0]
    ids = np.empty((m, k), dtype=np.int64)
    deltas = np.empty((m, k))
    rows = max(1, _BLOCK_ELEMENTS // max(1, n * points.shape[1]))
    for s in range(0, m, rows):
        q = queries[s : s + rows]
        diff = q[:, None, :] - points[None, :, :]
        dl = np.einsum("mnd,mnd->mn", diff, diff) / (cq[s : s + rows, None] * cx[None, :])
        part = np.argpartition(dl, k - 1, axis=1)[:, :k] if k < n else np.tile(np.arange(n), (len(q), 1))
        vals = np.take_along_axis(dl, part, 1)
        order = np.lexsort((part, vals), axis=1)
        ids[s : s + rows] = np.take_along_axis(part, order, 1)
        deltas[s : s + rows] = np.take_along_axis(vals, order, 1)
    return ids, dist_from_delta(deltas)
