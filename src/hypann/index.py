"""`HyperbolicIndex`: one class in front of every algorithm and oracle."""

from __future__ import annotations

import logging

import numpy as np

from hypann import _validation as V
from hypann.geometry.poincare import dist_from_delta
from hypann.oracles.base import EuclideanOracle
from hypann.result import SearchResult, SearchStats
from hypann.search.registry import algorithm_class, make_algorithm

log = logging.getLogger(__name__)

DEFAULT_ORACLE = "kdtree"


class HyperbolicIndex:
    """Nearest-neighbour index for points in hyperbolic space.

    Configure, then :meth:`build`, then :meth:`search`. Points may be given in
    the Poincare ball or on the hyperboloid (``model="lorentz"``), of any
    curvature ``-c``; they are stored as float64 unit-curvature Poincare
    points with their conformal factors ``1-|x|^2`` (computed once, exactly
    rounded). Distances come back in the caller's curvature.

    Parameters
    ----------
    algorithm : str, default "recentering"
        ``"recentering"`` (exact, Wu & Charikar Alg. 1), ``"binary_search"``
        (``ratio``-approximate, Alg. 2), ``"shells"`` / ``"random_shells"``
        (``sqrt(width)``-approximate with any oracle, Alg. 3 / 8),
        ``"hkdtree"`` (exact kd-tree with hyperbolic pruning), ``"graph"``
        (approximate k-NN graph search, the fast choice; query setting
        ``ef``), ``"vamana"`` (the paper's graph baseline), ``"brute"``
        (exact scan).
    oracle : str or EuclideanOracle, default "kdtree"
        Euclidean oracle spec (``"kdtree"``, ``"brute"``, ``"hkdtree"``,
        ``"lsh:tables=5,bits=15"``, ``"faiss:HNSW32"``, ``"hnswlib:M=16"``) or
        an instance. Ignored by algorithms that do not use one.
    model : {"poincare", "lorentz"}, default "poincare"
    c : float, default 1.0
        Curvature magnitude (the space has curvature ``-c``).
    random_state : int or None
        Seed for every random choice (LSH planes, graph starts, ...).
    **params
        Build settings of the algorithm (e.g. ``ratio=1.1``, ``width=3``).

    Examples
    --------
    >>> import numpy as np, hypann
    >>> X = 0.5 * np.random.default_rng(0).uniform(-1, 1, (1000, 5)) / np.sqrt(5)
    >>> index = hypann.HyperbolicIndex(algorithm="recentering", oracle="kdtree").build(X)
    >>> res = index.search(X[:3], k=2)
    >>> res.indices[:, 0].tolist()
    [0, 1, 2]
    """

    def __init__(self, *, algorithm="recentering", oracle=None, model="poincare", c=1.0, random_state=None, **params):
        self.algorithm = algorithm
        self.oracle = oracle
        self.model = model
        self.c = c
        self.random_state = random_state
        self.params = params

    # -- building ---------------------------------------------------------
    def _check_settings(self):
        V.check_model(self.model)
        V.check_curvature(self.c)
        cls = algorithm_class(self.algorithm)
        if self.oracle is not None and not cls.uses_oracle:
            raise ValueError(f"algorithm {self.algorithm!r} does not use an oracle, got oracle={self.oracle!r}")
        if self.oracle is not None and not isinstance(self.oracle, (str, EuclideanOracle)):
            raise TypeError(f"oracle must be a spec string or an EuclideanOracle, got {type(self.oracle).__name__}")
        if self.random_state is not None and (isinstance(self.random_state, bool) or not isinstance(self.random_state, (int, np.integer))):
            raise TypeError(f"random_state must be an int or None, got {self.random_state!r}")

    def build(self, X):
        """Index the points ``X`` of shape (n, d) (or (n, d+1) on the hyperboloid); returns self."""
        self._check_settings()
        points, conformal = V.check_points(X, name="X", model=self.model, c=self.c)
        return self._build_validated(points, conformal)

    def _build_validated(self, points, conformal, state=None):
        algo = make_algorithm(self.algorithm, self.params)
        oracle = self.oracle if self.oracle is not None else DEFAULT_ORACLE
        if state:
            algo.restore(points, conformal, state, oracle=oracle, random_state=self.random_state)
        else:
            algo.build(points, conformal, oracle=oracle, random_state=self.random_state)
        self.algorithm_ = algo
        self.points_ = points
        self.conformal_ = conformal
        self.n_points_, self.dim_ = points.shape
        log.debug("built %r", self)
        return self

    def _check_fitted(self):
        if not hasattr(self, "algorithm_"):
            raise ValueError("this HyperbolicIndex is not built yet: call build(X) first")

    # -- searching --------------------------------------------------------
    def search(self, Q, k=1, *, budget=None, oracle_params=None, **query_params) -> SearchResult:
        """The ``k`` nearest indexed points of each query.

        Parameters
        ----------
        Q : array_like of shape (m, d)
            Queries in the index's model and curvature.
        k : int, default 1
            Neighbours per query, ``1 <= k <= n_points``.
        budget : int, optional
            Sample budget: stop a query once it has examined this many points
            (the paper's "# Samples") and return the best found.
        oracle_params : dict, optional
            Per-call settings of the Euclidean oracle(s), e.g. ``{"ef": 128}``
            for hnswlib or ``{"ef_search": 64}`` / ``{"nprobe": 16}`` for faiss.
        **query_params
            Per-call settings of the algorithm (e.g. ``ratio`` for
            ``binary_search``, ``ef`` for ``graph``, ``L`` for ``vamana``).

        Returns
        -------
        SearchResult
            ``indices`` (m, k) int64, ``distances`` (m, k) float64 ascending,
            ``stats`` per query.
        """
        self._check_fitted()
        k = V.check_k(k, self.n_points_)
        budget = V.check_positive_int(budget, "budget", allow_none=True)
        V.reject_unknown(query_params, self.algorithm_.query_params, f"search with algorithm {self.algorithm!r}")
        if oracle_params:
            if not isinstance(oracle_params, dict):
                raise TypeError(f"oracle_params must be a dict, got {type(oracle_params).__name__}")
            if not self.algorithm_.uses_oracle:
                raise ValueError(f"algorithm {self.algorithm!r} does not use an oracle, got oracle_params={oracle_params!r}")
            query_params["oracle_params"] = oracle_params
        queries, q_conf = V.check_points(Q, name="Q", model=self.model, c=self.c, dim=self.dim_, allow_empty=True)
        m = queries.shape[0]
        if m == 0:
            return SearchResult(np.empty((0, k), np.int64), np.empty((0, k)), SearchStats.zeros(0))
        ids, deltas, stats = self.algorithm_.search(queries, q_conf, k, budget=budget, **query_params)
        return self._result(ids, deltas, stats)

    def _result(self, ids, deltas, stats):
        ids = np.asarray(ids, dtype=np.int64)
        distances = dist_from_delta(deltas) / np.sqrt(self.c)
        distances[ids < 0] = np.inf
        return SearchResult(ids, distances, stats)

    # -- persistence ------------------------------------------------------
    def save(self, path):
        """Write the index to ``path`` atomically (see :mod:`hypann.io`)."""
        from hypann.io import save_index

        self._check_fitted()
        save_index(self, path)

    @classmethod
    def load(cls, path, **overrides):
        """Read an index written by :meth:`save` (``overrides`` replace stored settings, e.g. ``oracle=``)."""
        from hypann.io import load_index

        return load_index(path, **overrides)

    @property
    def nbytes(self) -> int:
        """Bytes held by the points, conformal factors and the search structure."""
        self._check_fitted()
        return int(self.points_.nbytes + self.conformal_.nbytes + self.algorithm_.nbytes)

    def get_params(self) -> dict:
        return {
            "algorithm": self.algorithm,
            "oracle": self.oracle.spec() if isinstance(self.oracle, EuclideanOracle) else self.oracle,
            "model": self.model,
            "c": self.c,
            "random_state": self.random_state,
            **self.params,
        }

    def __repr__(self):
        parts = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items() if v is not None)
        fitted = f", n_points={self.n_points_}, dim={self.dim_}" if hasattr(self, "n_points_") else ""
        return f"HyperbolicIndex({parts}{fitted})"
