"""Quality measures of approximate nearest-neighbour answers.

* :func:`recall` / :func:`recall_per_query` -- recall@k counted against a
  distance threshold, as ann-benchmarks does: a returned neighbour counts when
  its distance is at most the true k-th distance times ``1 + epsilon``, so
  which of several tied points was returned does not matter.
* :func:`id_recall` / :func:`id_recall_per_query` -- the paper's recall,
  "# of the K true nearest neighbors found / K", by neighbour ids.
* :func:`approximation_ratios` -- pointwise ratios ``d(q, n_k) / d(q, n*_k)``
  for each rank ``k`` and their summaries, the paper's "Avg Ratio" and
  "Avg Max" (Wu & Charikar, section 6).

Found distances must be exact float64 distances of the returned points (as in
:class:`hypann.SearchResult`); padding entries (id ``-1``, distance ``inf``)
never count as found.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = [
    "recall",
    "recall_per_query",
    "id_recall",
    "id_recall_per_query",
    "approximation_ratios",
    "ApproximationRatios",
    "DEFAULT_EPSILON",
]

# Relative slack on the true k-th distance: distances recomputed by different
# but exact float64 code paths differ by a few ulps, never by 1e-9.
DEFAULT_EPSILON = 1e-9


def _as_2d(a, name, dtype):
    arr = np.asarray(a, dtype=dtype)
    if arr.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n_queries, k), got shape {arr.shape}")
    return arr


def _check_k(k, found, truth):
    if k is None:
        k = truth.shape[1]
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
        raise ValueError(f"k must be a positive integer, got k={k!r}")
    if k > truth.shape[1]:
        raise ValueError(f"k={k} exceeds the {truth.shape[1]} ground-truth neighbours given")
    if found.shape[0] != truth.shape[0]:
        raise ValueError(
            f"found and true results must have the same number of queries, got {found.shape[0]} and {truth.shape[0]}"
        )
    return int(k)


def recall_per_query(found_distances, true_distances, k=None, *, epsilon=DEFAULT_EPSILON):
    """Per-query recall@k against the true k-th distance (ann-benchmarks style).

    .. math::

        \\operatorname{recall}_k(q) = \\frac{1}{k}\\,\\#\\{\\,j < k :
        \\hat d_j \\le d^*_{k}\\,(1+\\epsilon)\\,\\}

    where ``hat d_j`` are the first ``k`` found distances and ``d*_k`` the
    true k-th smallest distance.

    Parameters
    ----------
    found_distances : array_like of shape (m, >=k)
        Distances of the returned neighbours (``inf`` for padding).
    true_distances : array_like of shape (m, >=k)
        Exact neighbour distances, ascending.
    k : int, optional
        Defaults to ``true_distances.shape[1]``. Found rows with fewer than
        ``k`` columns are treated as padded.
    epsilon : float, default 1e-9
        Relative slack on the threshold.

    Returns
    -------
    ndarray of shape (m,), values in ``[0, 1]``
    """
    found = _as_2d(found_distances, "found_distances", np.float64)
    truth = _as_2d(true_distances, "true_distances", np.float64)
    k = _check_k(k, found, truth)
    threshold = truth[:, k - 1] * (1.0 + epsilon)
    hits = found[:, :k] <= threshold[:, None]  # inf and NaN never count
    return hits.sum(axis=1) / k


def recall(found_distances, true_distances, k=None, *, epsilon=DEFAULT_EPSILON):
    """Mean of :func:`recall_per_query` over the queries (a float)."""
    return float(np.mean(recall_per_query(found_distances, true_distances, k, epsilon=epsilon)))


def id_recall_per_query(found_ids, true_ids, k=None):
    """Per-query fraction of the k true neighbour ids that were returned.

    .. math::

        \\operatorname{recall}_k(q) = \\frac{|\\hat N_k(q) \\cap N^*_k(q)|}{k}

    The paper's definition ("# of the K true nearest neighbors found / K").
    Unlike :func:`recall_per_query` it penalises returning a different point
    at exactly the same distance. Ids ``< 0`` (padding) are ignored.

    Returns
    -------
    ndarray of shape (m,), values in ``[0, 1]``
    """
    found = _as_2d(found_ids, "found_ids", np.int64)
    truth = _as_2d(true_ids, "true_ids", np.int64)
    k = _check_k(k, found, truth)
    f = found[:, :k]
    t = truth[:, :k]
    match = (f[:, :, None] == t[:, None, :]) & (f[:, :, None] >= 0)
    # count each true id at most once even if an answer repeats an id
    return match.any(axis=1).sum(axis=1) / k


def id_recall(found_ids, true_ids, k=None):
    """Mean of :func:`id_recall_per_query` over the queries (a float)."""
    return float(np.mean(id_recall_per_query(found_ids, true_ids, k)))


@dataclass(frozen=True)
class ApproximationRatios:
    """Pointwise approximation ratios and the paper's summaries.

    Attributes
    ----------
    ratios : ndarray of shape (m, k)
        ``d(q, n_j) / d(q, n*_j)`` for each rank ``j`` (found distances sorted
        ascending); 1 for an exact answer, ``inf`` for padding.
    mean_ratio : float
        Mean of all entries of ``ratios`` (the paper's "Avg Ratio").
    mean_max_ratio : float
        Mean over queries of the largest ratio of the query ("Avg Max").
    """

    ratios: np.ndarray
    mean_ratio: float
    mean_max_ratio: float


def approximation_ratios(found_distances, true_distances, k=None):
    """Pointwise approximation ratios ``d(q, n_j) / d(q, n*_j)``, ``j = 1..k``.

    .. math::

        \\rho_j(q) = \\frac{d(q, n_j)}{d(q, n^*_j)}, \\qquad
        \\text{Avg Ratio} = \\operatorname{mean}_{q, j} \\rho_j(q), \\qquad
        \\text{Avg Max} = \\operatorname{mean}_q \\max_j \\rho_j(q)

    Found distances are sorted per query first, so ``n_j`` is the j-th
    closest returned point. A zero true distance (the query is a data point)
    gives ratio 1 if the found distance is 0 too and ``inf`` otherwise.

    Parameters
    ----------
    found_distances : array_like of shape (m, >=k)
    true_distances : array_like of shape (m, >=k), ascending
    k : int, optional
        Defaults to ``true_distances.shape[1]``.

    Returns
    -------
    ApproximationRatios
    """
    found = _as_2d(found_distances, "found_distances", np.float64)
    truth = _as_2d(true_distances, "true_distances", np.float64)
    k = _check_k(k, found, truth)
    if found.shape[1] < k:
        pad = np.full((found.shape[0], k - found.shape[1]), np.inf)
        found = np.hstack([found, pad])
    f = np.sort(found[:, :k], axis=1)
    t = truth[:, :k]
    with np.errstate(divide="ignore", invalid="ignore"):
        ratios = np.where(t > 0.0, f / np.where(t > 0.0, t, 1.0), np.where(f == 0.0, 1.0, np.inf))
    if ratios.size == 0:
        return ApproximationRatios(ratios, float("nan"), float("nan"))
    return ApproximationRatios(ratios, float(ratios.mean()), float(ratios.max(axis=1).mean()))
