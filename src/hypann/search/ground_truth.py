"""Exact hyperbolic k-nearest neighbours by brute force: the ground truth of every benchmark, and the exact
distances of a given answer (:func:`distances_of_ids`), to score it with.

In the search layer so that the data sets (:mod:`hypann.datasets`) and the evaluation
(:mod:`hypann.eval`, which re-exports it) share it without importing each other.

Points of curvature ``-c`` (or on the hyperboloid) are mapped to the unit ball first, as an index maps
them. Queries are processed in chunks through the exact batch scan
:func:`hypann.geometry.gram_scan.knn_delta_scan` (the same answer as the
numba scan :func:`hypann.geometry._kernels.brute_knn_delta`), which ranks by the monotone
surrogate ``delta = |q-x|^2 / ((1-|q|^2)(1-|x|^2))`` formed from explicit
differences and the stored (compensated) conformal factors; only the ``k``
winners are converted to distances ``2 asinh(sqrt(delta)) / sqrt(c)``. Ties are broken by
the lower point index, so the answer is a deterministic function of the input.
:func:`distances_of_ids` computes the same ``delta`` for the pairs it is given
(:func:`hypann.geometry._kernels.delta_to_candidates`).
"""

from __future__ import annotations

import logging

import numpy as np

from hypann import _progress as progress
from hypann._validation import ParameterTypeError, check_curvature, check_k, check_points, check_positive_int
from hypann.geometry._kernels import delta_to_candidates
from hypann.geometry.gram_scan import knn_delta_scan
from hypann.geometry.poincare import dist_from_delta

__all__ = ["exact_knn", "distances_of_ids"]

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


def _checked_points(queries, points, c, model):
    """``(c, Q, cq, X, cx)``: the checked curvature and the queries and points mapped to the unit ball with their
    conformal factors (:func:`~hypann._validation.check_points`; the queries may be empty)."""
    c = check_curvature(c)
    X, cx = check_points(points, name="points", model=model, c=c)
    Q, cq = check_points(queries, name="queries", model=model, c=c, dim=X.shape[1], allow_empty=True)
    return c, Q, cq, X, cx


def exact_knn(queries, points, k, *, q_conformal=None, x_conformal=None, chunk=_QUERY_CHUNK, c=1.0,
              model="poincare"):
    """Exact hyperbolic k nearest neighbours of every query among ``points``.

    .. math::

        \\operatorname{knn}(q) = \\operatorname{arg\\,k\\text{-}min}_{i}\\;
        \\frac{c\\|q - x_i\\|^2}{(1-c\\|q\\|^2)(1-c\\|x_i\\|^2)},\\qquad
        d(q, x_i) = \\frac{2}{\\sqrt c}\\operatorname{asinh}\\sqrt{\\delta(q, x_i)}

    for Poincare points of curvature ``-c`` (hyperboloid points are mapped to the ball first, as
    :class:`hypann.HyperbolicIndex` maps them): the answer of ``HyperbolicIndex(algorithm="brute",
    c=c, model=model)``.

    Parameters
    ----------
    queries : array_like of shape (m, d), or (m, d+1) for ``model="lorentz"``
        Query points.
    points : array_like of shape (n, d), or (n, d+1) for ``model="lorentz"``
        Data points.
    k : int
        Number of neighbours, ``1 <= k <= n``.
    q_conformal, x_conformal : array_like of shape (m,) and (n,), optional
        Precomputed conformal factors ``1-|x|^2`` (compensated) of the points
        in the unit ball (``1 - c|x|^2`` of Poincare points of curvature
        ``-c``); recomputed when omitted. Must be positive.
    chunk : int, default 256
        Queries per kernel call.
    c : float, default 1.0
        Curvature ``-c`` of ``queries`` and ``points``.
    model : {"poincare", "lorentz"}, default "poincare"

    Returns
    -------
    ids : ndarray of shape (m, k), int64
        Neighbour indices sorted by increasing distance; ties by lower index.
    distances : ndarray of shape (m, k), float64
        Hyperbolic distances in curvature ``-c``, ascending.
    """
    c, Q, cq, X, cx = _checked_points(queries, points, c, model)
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
    return ids, dist_from_delta(deltas, c=c)


def _check_ids(ids, m, n):
    """``ids`` as an (m, k) int64 array of rows of ``n`` points or ``-1``; a ``TypeError`` or ``ValueError``
    naming the problem otherwise."""
    try:
        arr = np.asarray(ids)
    except ValueError as exc:  # ragged rows
        raise ValueError(f"ids must be an (m, k) array of integers: {exc}") from None
    if arr.dtype == np.bool_ or not np.issubdtype(arr.dtype, np.integer):
        raise ParameterTypeError(f"ids must be an array of integers (rows of points, -1 for none), "
                                 f"got dtype={arr.dtype}")
    if arr.ndim != 2 or arr.shape[0] != m:
        raise ValueError(f"ids must have shape ({m}, k), one row per query, got shape {arr.shape}")
    bad = (arr < -1) | (arr >= n)
    if bad.any():
        i, t = (int(v) for v in np.argwhere(bad)[0])
        raise ValueError(f"ids[{i}, {t}] = {arr[i, t]} is neither a row of points (0 to {n - 1}) nor -1 (none)")
    return arr.astype(np.int64)


def _first_occurrences(ids):
    """``ids`` with every entry that repeats an id earlier in its row set to ``-1``."""
    order = np.argsort(ids, axis=1, kind="stable")  # equal ids keep their row order
    ranked = np.take_along_axis(ids, order, axis=1)
    repeat = np.zeros(ids.shape, dtype=bool)
    repeat[:, 1:] = (ranked[:, 1:] == ranked[:, :-1]) & (ranked[:, 1:] >= 0)
    out = ids.copy()
    rows, cols = np.nonzero(repeat)
    out[rows, order[rows, cols]] = -1
    return out


def distances_of_ids(queries, points, ids, *, c=1.0, model="poincare"):
    """Exact float64 distances from each query to the points it was answered with (``ids``), to score an answer
    whose own distances are not those of ``points``.

    .. math::

        D_{it} = \\frac{2}{\\sqrt c}\\operatorname{asinh}\\sqrt{\\delta(q_i, x_{j})},\\qquad
        \\delta(q, x) = \\frac{c\\|q - x\\|^2}{(1-c\\|q\\|^2)(1-c\\|x\\|^2)},\\qquad j = \\text{ids}_{it}

    from explicit differences and compensated conformal factors, as :func:`exact_knn` computes them. An index
    built with ``storage="float32"`` reports the distances of its float32-rounded points; these are the
    distances of the caller's own points, so ``recall(distances_of_ids(Q, X, result.indices), true_distances)``
    (:func:`hypann.metrics.recall`) counts a neighbour that was found even where rounding moved its distance.
    The same scores another library's answer.

    Parameters
    ----------
    queries : array_like of shape (m, d), or (m, d+1) for ``model="lorentz"``
    points : array_like of shape (n, d), or (n, d+1) for ``model="lorentz"``
        The points the answer refers to, in the caller's precision.
    ids : array_like of shape (m, k), integers
        Rows of ``points`` (an index's answer with its default ids), ``-1`` for none.
    c : float, default 1.0
        Curvature ``-c`` of ``queries`` and ``points``.
    model : {"poincare", "lorentz"}, default "poincare"

    Returns
    -------
    distances : ndarray of shape (m, k), float64
        In the order of ``ids`` (not sorted). ``inf`` for ``-1`` and for an id that repeats one earlier in its
        row, so that no point counts twice in a recall.
    """
    c, Q, cq, X, cx = _checked_points(queries, points, c, model)
    ids = _first_occurrences(_check_ids(ids, Q.shape[0], X.shape[0]))
    return dist_from_delta(delta_to_candidates(Q, cq, X, cx, ids), c=c)
