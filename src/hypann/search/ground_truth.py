"""Exact hyperbolic k-nearest neighbours by brute force: the ground truth of every benchmark.

In the search layer so that the data sets (:mod:`hypann.datasets`) and the evaluation
(:mod:`hypann.eval`, which re-exports it) share it without importing each other.

Queries are processed in chunks through the exact batch scan
:func:`hypann.geometry.gram_scan.knn_delta_scan` (the same answer as the
numba scan :func:`hypann.geometry._kernels.brute_knn_delta`), which ranks by the monotone
surrogate ``delta = |q-x|^2 / ((1-|q|^2)(1-|x|^2))`` formed from explicit
differences and the stored (compensated) conformal factors; only the ``k``
winners are converted to distances ``2 asinh(sqrt(delta))``. Ties are broken by
the lower point index, so the answer is a deterministic function of the input.
"""

from __future__ import annotations

import logging

import numpy as np

from hypann import _progress as progress
from hypann._validation import check_k, check_points, check_positive_int
from hypann.geometry.gram_scan import knn_delta_scan
from hypann.geometry.poincare import dist_from_delta

__all__ = ["exact_knn"]

logger = logging.getLogger(__name__)

# Queries per call of the kernel: large enough to keep both cores busy, small
# enough that progress is logged and an interrupt is honoured within seconds.
_QUERY_CHUNK = 256
#: A ground-truth computation shows a progress bar (on a terminal) once it has
#: taken this many seconds.
GROUND_TRUTH_PROGRESS_DELAY = 2.0


def _check_conformal(conformal, points, name):
    conformal = np.ascontiguousarray(conformal, dtype=np.float64)
    if conformal.shape != (points.shape[0],):
        raise ValueError(f"{name} must have shape ({points.shape[0]},), got {conformal.shape}")
    if not np.all(conformal > 0.0):
        bad = int(np.flatnonzero(~(conformal > 0.0))[0])
        raise ValueError(f"{name} must be > 0 (1-|x|^2 of points inside the ball), got {name}[{bad}]={conformal[bad]!r}")
    return conformal


def exact_knn(queries, points, k, *, q_conformal=None, x_conformal=None, chunk=_QUERY_CHUNK):
    """Exact hyperbolic k nearest neighbours of every query among ``points``.

    .. math::

        \\operatorname{knn}(q) = \\operatorname{arg\\,k\\text{-}min}_{i}\\;
        \\frac{\\|q - x_i\\|^2}{(1-\\|q\\|^2)(1-\\|x_i\\|^2)},\\qquad
        d(q, x_i) = 2\\operatorname{asinh}\\sqrt{\\delta(q, x_i)}

    Parameters
    ----------
    queries : array_like of shape (m, d)
        Query points in the unit Poincare ball.
    points : array_like of shape (n, d)
        Data points in the unit Poincare ball.
    k : int
        Number of neighbours, ``1 <= k <= n``.
    q_conformal, x_conformal : array_like of shape (m,) and (n,), optional
        Precomputed conformal factors ``1-|x|^2`` (compensated); recomputed
        when omitted. Must be positive.
    chunk : int, default 256
        Queries per kernel call.

    Returns
    -------
    ids : ndarray of shape (m, k), int64
        Neighbour indices sorted by increasing distance; ties by lower index.
    distances : ndarray of shape (m, k), float64
        Hyperbolic distances (unit curvature), ascending.
    """
    X, cx = check_points(points, name="points")
    Q, cq = check_points(queries, name="queries", dim=X.shape[1], allow_empty=True)
    k = check_k(k, X.shape[0])
    chunk = check_positive_int(chunk, "chunk")
    if q_conformal is not None:
        cq = _check_conformal(q_conformal, Q, "q_conformal")
    if x_conformal is not None:
        cx = _check_conformal(x_conformal, X, "x_conformal")
    m = Q.shape[0]
    ids = np.empty((m, k), dtype=np.int64)
    deltas = np.empty((m, k))
    with progress.task("exact k-NN", total=m, unit="q", delay=GROUND_TRUTH_PROGRESS_DELAY):
        for start in range(0, m, chunk):
            stop = min(m, start + chunk)
            ids[start:stop], deltas[start:stop] = knn_delta_scan(Q[start:stop], cq[start:stop], X, cx, k)
            logger.debug("exact_knn: %d/%d queries", stop, m)
            progress.advance(stop - start)
    return ids, dist_from_delta(deltas)
