"""The Euclidean oracle protocol: what any Euclidean NN library must offer hypann.

An oracle indexes Euclidean points once and answers Euclidean questions; it
knows nothing of hyperbolic geometry (the algorithms in :mod:`hypann.search`
turn hyperbolic questions into Euclidean ones). A new library plugs in by
subclassing :class:`EuclideanOracle` and writing ``_build`` and ``_knn``
(about 30 lines, see :mod:`hypann.oracles.kdtree`).

Capabilities
------------
``exact``
    ``knn`` returns the true Euclidean nearest neighbours (the paper's O);
    otherwise it is a (1+eps)-approximate oracle (the paper's O~).
``counts_evaluations``
    ``knn`` reports, per query, how many points it examined (the paper's
    "samples"); otherwise hypann counts the candidates it is handed.
``query_params``
    names of per-call settings ``_knn`` accepts (e.g. hnswlib's ``ef``),
    passed as ``knn(queries, k, **params)`` and by
    ``HyperbolicIndex.search(..., oracle_params={...})``.
``supports_budget``
    ``_knn`` accepts ``budget`` (per-query cap on examined points) and stops
    there, so a sample budget is a hard limit rather than checked between
    oracle calls.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hypann._validation import reject_unknown


@dataclass(frozen=True)
class EuclideanNeighbors:
    """Answer of :meth:`EuclideanOracle.knn` for a batch of queries.

    Attributes
    ----------
    sq_dist : ndarray of shape (m, k), float64
        Squared Euclidean distances, ascending; ``inf`` where fewer than k exist.
    indices : ndarray of shape (m, k), int64
        Row ids into the indexed points; ``-1`` where fewer than k exist.
    evaluations : ndarray of shape (m,), int64, or None
        Points examined per query, when the oracle can count them.
    """

    sq_dist: np.ndarray
    indices: np.ndarray
    evaluations: np.ndarray | None = None


def rerank_float64(queries, points, ids):
    """Exact float64 squared distances of candidate ``ids`` (m, c), re-sorted; -1 stays last.

    For oracles that choose neighbours in lower precision (faiss, hnswlib).
    """
    valid = ids >= 0
    diff = queries[:, None, :] - points[np.where(valid, ids, 0)]
    sq = np.where(valid, np.einsum("mkd,mkd->mk", diff, diff), np.inf)
    order = np.argsort(sq, axis=1, kind="stable")
    return np.take_along_axis(sq, order, 1), np.take_along_axis(ids, order, 1)


class EuclideanOracle:
    """Base class of Euclidean nearest-neighbour oracles.

    Subclasses set ``name`` and the capability flags, store their settings in
    ``__init__`` (no work), and implement :meth:`_build` and :meth:`_knn`.
    ``points`` handed to ``build`` are float64 C-contiguous (n, d); queries
    likewise. Optional: :meth:`_near` for a faster (1+eps, R) decision query.
    """

    name = "base"
    exact = False
    counts_evaluations = False
    supports_budget = False
    query_params: tuple = ()

    def build(self, points):
        """Index ``points`` (n, d); returns self."""
        points = np.ascontiguousarray(points, dtype=np.float64)
        self.n_points_, self.dim_ = points.shape
        self._build(points)
        return self

    def knn(self, queries, k, budget=None, **params) -> EuclideanNeighbors:
        """The ``k`` Euclidean nearest indexed points of each query row.

        ``budget`` (int or (m,) ints) caps the points examined per query for
        oracles with ``supports_budget``; others ignore it. ``params`` are
        per-call settings named in ``query_params``.
        """
        if params:
            reject_unknown(params, self.query_params, f"oracle {self.name!r}")
        queries = np.ascontiguousarray(queries, dtype=np.float64)
        k_eff = min(int(k), self.n_points_)
        if budget is not None and self.supports_budget:
            budget = np.ascontiguousarray(np.broadcast_to(np.asarray(budget, dtype=np.int64), (queries.shape[0],)))
            res = self._knn(queries, k_eff, budget=budget, **params)
        else:
            res = self._knn(queries, k_eff, **params)
        if k_eff < k:  # pad to the contract's shape
            m = queries.shape[0]
            pad_d = np.full((m, k - k_eff), np.inf)
            pad_i = np.full((m, k - k_eff), -1, dtype=np.int64)
            res = EuclideanNeighbors(
                np.hstack([res.sq_dist, pad_d]), np.hstack([res.indices, pad_i]), res.evaluations
            )
        return res

    #: ``radius`` answers exact Euclidean ball queries (``_radius`` implemented)
    supports_radius = False

    def radius(self, queries, radii):
        """Every indexed point within Euclidean distance ``radii[i]`` of ``queries[i]``.

        Returns
        -------
        offsets : ndarray of shape (m+1,), int64
        ids : ndarray of int64
            Hits of query ``i`` are ``ids[offsets[i]:offsets[i+1]]`` (any order).
        """
        if not self.supports_radius:
            raise NotImplementedError(f"oracle {self.name!r} has no radius query")
        queries = np.ascontiguousarray(queries, dtype=np.float64)
        radii = np.ascontiguousarray(np.broadcast_to(np.asarray(radii, dtype=np.float64), (queries.shape[0],)))
        return self._radius(queries, radii)

    def near(self, queries, radius, eps=0.0):
        """(1+eps, R) near-neighbour decision oracle (the paper's DO~).

        For each query, returns the id of a point within ``(1+eps) * radius``
        when some point lies within ``radius`` (a certificate), else -1. The
        default asks ``knn(q, 1)``, which is a valid decision oracle for any
        (1+eps)-approximate ``knn``.

        Returns
        -------
        certificate : ndarray of shape (m,), int64
        evaluations : ndarray of shape (m,) or None
        """
        queries = np.ascontiguousarray(queries, dtype=np.float64)
        radius = np.broadcast_to(np.asarray(radius, dtype=np.float64), (queries.shape[0],))
        if hasattr(self, "_near"):
            return self._near(queries, radius, float(eps))
        res = self.knn(queries, 1)
        ok = res.sq_dist[:, 0] <= ((1.0 + eps) * radius) ** 2
        return np.where(ok, res.indices[:, 0], -1), res.evaluations

    @property
    def nbytes(self) -> int:
        """Approximate memory held by the index structure (bytes)."""
        return 0

    def spec(self) -> str:
        """Spec string that recreates this oracle (see :mod:`hypann.oracles.registry`)."""
        return self.name

    def _build(self, points):  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} must implement _build(points)")

    def _knn(self, queries, k) -> EuclideanNeighbors:  # pragma: no cover - abstract
        raise NotImplementedError(f"{type(self).__name__} must implement _knn(queries, k)")

    def __repr__(self):
        fitted = f", n_points={self.n_points_}, dim={self.dim_}" if hasattr(self, "n_points_") else ""
        return f"{type(self).__name__}(spec={self.spec()!r}{fitted})"
