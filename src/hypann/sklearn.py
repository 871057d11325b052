"""scikit-learn estimators over :class:`hypann.HyperbolicIndex` (thin wrappers).

:class:`HyperbolicNearestNeighbors` follows ``sklearn.neighbors.NearestNeighbors``
and :class:`HyperbolicKNeighborsTransformer` follows
``sklearn.neighbors.KNeighborsTransformer``: ``fit`` stores a fitted
``index_``; ``kneighbors`` / ``radius_neighbors`` return ``(distances,
indices)``; the ``*_graph`` methods and ``transform`` return CSR matrices;
``X=None`` queries the training points themselves, each excluding itself.

The distance is the hyperbolic one of the model and curvature ``-c``:
``d(x, y) = arcosh(1 + 2 c |x-y|^2 / ((1 - c|x|^2)(1 - c|y|^2))) / sqrt(c)``
in the Poincare ball. Input (``X``) may be a numpy array, a PyTorch tensor or a
geoopt ``ManifoldTensor`` (its manifold must match ``model`` and ``c``);
results are numpy arrays (``torch.from_numpy(ind)`` wraps them without a copy).

Needs scikit-learn >= 1.6 (``pip install "hypann[sklearn]"``).
"""

from __future__ import annotations

from numbers import Integral

import numpy as np
from scipy import sparse

try:
    from sklearn import get_config
    from sklearn.base import BaseEstimator, ClassNamePrefixFeaturesOutMixin, TransformerMixin
    from sklearn.utils.validation import check_is_fitted, validate_data
except ImportError as exc:  # pragma: no cover - exercised only without scikit-learn
    raise ImportError(
        "hypann.sklearn needs scikit-learn >= 1.6; install it with: pip install \"hypann[sklearn]\""
    ) from exc

from hypann import _validation as V
from hypann._runtime import check_n_jobs
from hypann.index import DEFAULT_ALGORITHM, HyperbolicIndex

__all__ = ["HyperbolicNearestNeighbors", "HyperbolicKNeighborsTransformer"]

_MODES = ("connectivity", "distance")
# parameters of HyperbolicIndex that the estimators set themselves
_OWN_INDEX_PARAMS = ("algorithm", "oracle", "model", "c", "random_state", "n_jobs")


class _HyperbolicNeighborsBase(BaseEstimator):
    """fit / kneighbors / kneighbors_graph shared by the estimators (parameters live in subclasses)."""

    # -- fitting ----------------------------------------------------------
    def fit(self, X, y=None):
        """Index the training points.

        Parameters
        ----------
        X : array_like or tensor of shape (n_samples, d) (``(n_samples, d+1)`` for ``model="lorentz"``)
            Points strictly inside the ball of radius ``1/sqrt(c)`` (Poincare)
            or on the upper sheet of ``-x0^2 + |xs|^2 = -1/c`` (Lorentz).
        y : ignored

        Returns
        -------
        self
        """
        V.check_model(self.model)
        V.check_curvature(self.c)
        self._check_params()
        params = self.algorithm_params if self.algorithm_params is not None else {}
        if not isinstance(params, dict):
            raise V.ParameterTypeError(f"algorithm_params must be a dict or None, got {type(params).__name__}")
        bad = [key for key in params if not isinstance(key, str)]
        if bad:
            raise V.ParameterTypeError(f"algorithm_params keys must be strings, got {bad!r}")
        clash = sorted(set(params) & set(_OWN_INDEX_PARAMS))
        if clash:
            raise ValueError(f"algorithm_params must not repeat the estimator's own parameters, got {clash}")
        X = self._validate_X(X, reset=True, model=self.model, c=self.c)
        self.index_ = HyperbolicIndex(
            algorithm=self.algorithm, oracle=self.oracle, model=self.model, c=self.c,
            random_state=self.random_state, n_jobs=self.n_jobs, **params,
        ).build(X)
        self.n_samples_fit_ = self.index_.n_points_
        return self

    def _check_params(self):
        V.check_positive_int(self.n_neighbors, "n_neighbors")
        check_n_jobs(self.n_jobs)

    def _validate_X(self, X, *, reset, model, c):
        """Tensors -> numpy (manifold checked), then scikit-learn's checks (sparse, dtype, shape, NaN, n_features)."""
        X = V.numpy_input(X, name="X", model=model, c=c)
        return validate_data(
            self, X, reset=reset, accept_sparse=False, dtype=np.float64,
            ensure_min_samples=1 if reset else 0,
            ensure_min_features=2 if model == "lorentz" else 1,
        )

    def _validate_queries(self, X):
        check_is_fitted(self)
        # n_jobs may be changed after fit (set_params), as in scikit-learn's estimators
        check_n_jobs(self.n_jobs)
        self.index_.n_jobs = self.n_jobs
        return self._validate_X(X, reset=False, model=self.index_.model, c=self.index_.c)

    # -- k nearest neighbours ----------------------------------------------
    def kneighbors(self, X=None, n_neighbors=None, return_distance=True):
        """The ``n_neighbors`` nearest training points of each query.

        Parameters
        ----------
        X : array_like or tensor of shape (n_queries, d), optional
            Queries in the fit's model and curvature. ``None``: the training
            points, each excluding itself (``n_neighbors <= n_samples_fit_ - 1``;
            of exact duplicates, one other copy may be returned).
        n_neighbors : int, optional
            Default: the ``n_neighbors`` parameter.
        return_distance : bool, default True

        Returns
        -------
        distances : ndarray of shape (n_queries, n_neighbors), float64
            Hyperbolic distances, ascending per row (only if ``return_distance``).
        indices : ndarray of shape (n_queries, n_neighbors), int64
            Rows of the training points; ``-1`` (distance ``inf``) where an
            approximate algorithm found fewer.
        """
        check_is_fitted(self)
        V.check_bool(return_distance, "return_distance")
        k = self.n_neighbors if n_neighbors is None else n_neighbors
        n = self.n_samples_fit_
        if X is None:
            if isinstance(k, bool) or not isinstance(k, Integral):
                raise TypeError(f"n_neighbors must be an integer, got {type(k).__name__} ({k!r})")
            if not 1 <= k <= n - 1:
                raise ValueError(
                    f"n_neighbors must be in [1, {n - 1}] when X is None (n_samples_fit_ - 1: each sample's "
                    f"own index is excluded), got n_neighbors={k}"
                )
            res = self.index_.search(None, int(k) + 1)  # the indexed points as stored
            ind, dist = _drop_self(res.indices, res.distances)
        else:
            k = V.check_k(k, n, name="n_neighbors")
            res = self.index_.search(self._validate_queries(X), k)
            ind, dist = res.indices, res.distances
        return (dist, ind) if return_distance else ind

    def kneighbors_graph(self, X=None, n_neighbors=None, mode="connectivity"):
        """Sparse graph of the k nearest neighbours of each query.

        Parameters
        ----------
        X, n_neighbors
            As in :meth:`kneighbors` (``X=None``: the training points, without self-loops).
        mode : {"connectivity", "distance"}, default "connectivity"
            Entries are 1 or the hyperbolic distance (a stored, explicit 0 for
            a duplicate or the query itself).

        Returns
        -------
        scipy.sparse CSR matrix of shape (n_queries, n_samples_fit_)
            Row ``i`` holds the neighbours of query ``i``, nearest first.
        """
        check_is_fitted(self)
        V.check_choice(mode, "mode", _MODES)
        dist, ind = self.kneighbors(X, n_neighbors, return_distance=True)
        found = ind >= 0
        indptr = np.zeros(ind.shape[0] + 1, dtype=np.int64)
        np.cumsum(found.sum(axis=1), out=indptr[1:])
        data = dist[found] if mode == "distance" else np.ones(int(indptr[-1]))
        return _csr(data, ind[found], indptr, (ind.shape[0], self.n_samples_fit_))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.input_tags.sparse = False  # points are coordinates in a model of hyperbolic space
        tags.input_tags.allow_nan = False
        return tags


class HyperbolicNearestNeighbors(_HyperbolicNeighborsBase):
    """Unsupervised hyperbolic nearest neighbours (``sklearn.neighbors.NearestNeighbors`` for the ball).

    Parameters
    ----------
    n_neighbors : int, default 5
        Neighbours per query of :meth:`kneighbors`. The default is
        scikit-learn's (``NearestNeighbors``), not hypann's
        :data:`~hypann.settings.DEFAULT_K` (1), so that the estimator is a
        drop-in replacement.
    radius : float, default 1.0
        Hyperbolic radius of :meth:`radius_neighbors`, in the curvature ``-c``.
    algorithm : str, default :data:`hypann.index.DEFAULT_ALGORITHM` (``"auto"``)
        Any :class:`hypann.HyperbolicIndex` algorithm. Radius queries need one
        with range search: ``"auto"``, ``"hkdtree"``, ``"brute"``, or ``"recentering"``
        with oracle ``"kdtree"`` / ``"brute"``.
    oracle : str, optional
        Euclidean oracle spec, for the algorithms that use one.
    model : {"poincare", "lorentz"}, default "poincare"
    c : float, default 1.0
        Curvature magnitude: the space has curvature ``-c``.
    algorithm_params : dict, optional
        Build settings of the algorithm (e.g. ``{"width": 3}``).
    random_state : int, optional
        Seed of every random choice of the algorithm.
    n_jobs : int or None, default None
        Threads of the index's build and searches (numba threads, not joblib
        processes); ``None`` or ``-1``: all cores. Unlike scikit-learn's
        ``None`` (one job), hypann's default uses every core, because its
        kernels are threaded and answers do not depend on the thread count.
        May be changed with ``set_params`` after ``fit``.

    Attributes
    ----------
    index_ : HyperbolicIndex
        The fitted index (searched by every method).
    n_samples_fit_ : int
    n_features_in_ : int
        Columns of the training ``X`` (``d``, or ``d+1`` for Lorentz).
    feature_names_in_ : ndarray of str
        Set when ``X`` has string column names (a pandas DataFrame).

    Notes
    -----
    scikit-learn's generic ``check_estimator`` draws data from ``[0, 3)^d``,
    mostly outside the unit ball; the checks that fail for that reason alone
    are listed, each with its reason, in ``tests/test_sklearn.py``.

    Examples
    --------
    >>> import numpy as np
    >>> from hypann.sklearn import HyperbolicNearestNeighbors
    >>> X = np.array([[0.0, 0.0], [0.5, 0.0], [0.0, 0.9]])
    >>> dist, ind = HyperbolicNearestNeighbors(n_neighbors=1).fit(X).kneighbors()
    >>> ind.ravel().tolist()
    [1, 0, 0]
    """

    def __init__(self, n_neighbors=5, *, radius=1.0, algorithm=DEFAULT_ALGORITHM, oracle=None, model="poincare",
                 c=1.0, algorithm_params=None, random_state=None, n_jobs=None):
        self.n_neighbors = n_neighbors
        self.radius = radius
        self.algorithm = algorithm
        self.oracle = oracle
        self.model = model
        self.c = c
        self.algorithm_params = algorithm_params
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _check_params(self):
        super()._check_params()
        V.check_real(self.radius, "radius", low=0.0)

    # -- radius neighbours -------------------------------------------------
    def _radius_search(self, X, radius):
        """``(offsets, indices, distances)`` of the points within ``radius`` (self excluded for ``X=None``)."""
        check_is_fitted(self)
        r = self.radius if radius is None else radius
        queries = None if X is None else self._validate_queries(X)  # None: the indexed points as stored
        m = self.n_samples_fit_ if X is None else queries.shape[0]
        res = self.index_.search_radius(queries, V.check_radius(r, m, name="radius"))
        offsets, ind, dist = res.offsets, res.indices, res.distances
        if X is None:
            rows = np.repeat(np.arange(m), np.diff(offsets))
            keep = ind != rows
            offsets = np.zeros(m + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows[keep], minlength=m), out=offsets[1:])
            ind, dist = ind[keep], dist[keep]
        return offsets, ind, dist

    def radius_neighbors(self, X=None, radius=None, return_distance=True, sort_results=False):
        """All training points within hyperbolic distance ``radius`` of each query (exact).

        Parameters
        ----------
        X : array_like or tensor of shape (n_queries, d), optional
            ``None``: the training points, each excluding itself.
        radius : float or array_like of shape (n_queries,), optional
            ``>= 0``; default: the ``radius`` parameter. A point at distance
            exactly ``radius`` is included.
        return_distance : bool, default True
        sort_results : bool, default False
            Accepted for scikit-learn compatibility: results are always sorted
            by distance. Requires ``return_distance=True``.

        Returns
        -------
        distances : ndarray of shape (n_queries,), dtype object
            One float64 array per query, ascending (only if ``return_distance``).
        indices : ndarray of shape (n_queries,), dtype object
            One int64 array per query.

        Raises
        ------
        NotImplementedError
            If the fitted algorithm has no range search (see ``algorithm``).
        """
        V.check_bool(return_distance, "return_distance")
        V.check_bool(sort_results, "sort_results")
        if sort_results and not return_distance:
            raise ValueError("return_distance must be True if sort_results is True")
        offsets, ind, dist = self._radius_search(X, radius)
        ind_rows = _ragged(ind, offsets)
        return (_ragged(dist, offsets), ind_rows) if return_distance else ind_rows

    def radius_neighbors_graph(self, X=None, radius=None, mode="connectivity", sort_results=False):
        """Sparse graph of the training points within ``radius`` of each query.

        Parameters
        ----------
        X, radius
            As in :meth:`radius_neighbors`.
        mode : {"connectivity", "distance"}, default "connectivity"
        sort_results : bool, default False
            Accepted for scikit-learn compatibility: rows are always sorted by distance.

        Returns
        -------
        scipy.sparse CSR matrix of shape (n_queries, n_samples_fit_)
        """
        check_is_fitted(self)
        V.check_choice(mode, "mode", _MODES)
        offsets, ind, dist = self._radius_search(X, radius)
        data = dist if mode == "distance" else np.ones(ind.shape[0])
        return _csr(data, ind, offsets, (offsets.shape[0] - 1, self.n_samples_fit_))


class HyperbolicKNeighborsTransformer(ClassNamePrefixFeaturesOutMixin, TransformerMixin, _HyperbolicNeighborsBase):
    """Points -> sparse graph of hyperbolic k nearest neighbours (``sklearn.neighbors.KNeighborsTransformer``).

    Put it before an estimator with ``metric="precomputed"`` (``TSNE``,
    ``Isomap``, ``DBSCAN``, ``SpectralClustering(affinity="precomputed_nearest_neighbors")``...)
    to run that estimator on hyperbolic distances found by a hypann index.

    Parameters
    ----------
    mode : {"distance", "connectivity"}, default "distance"
    n_neighbors : int, default 5
        Neighbours per sample. As in scikit-learn, each sample counts as its
        own neighbour (distance 0, stored explicitly) and ``mode="distance"``
        computes one more: the graph has ``n_neighbors + 1`` entries per row
        (``n_neighbors`` for ``"connectivity"``).
    algorithm, oracle, model, c, algorithm_params, random_state, n_jobs
        As in :class:`HyperbolicNearestNeighbors`.

    Attributes
    ----------
    index_ : HyperbolicIndex
    n_samples_fit_ : int
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.pipeline import make_pipeline
    >>> from sklearn.cluster import DBSCAN
    >>> from hypann.sklearn import HyperbolicKNeighborsTransformer
    >>> X = 0.3 * np.random.default_rng(0).uniform(-1, 1, (200, 3))
    >>> labels = make_pipeline(HyperbolicKNeighborsTransformer(n_neighbors=10),
    ...                        DBSCAN(eps=0.3, metric="precomputed")).fit_predict(X)
    >>> labels.shape
    (200,)
    """

    def __init__(self, *, mode="distance", n_neighbors=5, algorithm=DEFAULT_ALGORITHM, oracle=None,
                 model="poincare", c=1.0, algorithm_params=None, random_state=None, n_jobs=None):
        self.mode = mode
        self.n_neighbors = n_neighbors
        self.algorithm = algorithm
        self.oracle = oracle
        self.model = model
        self.c = c
        self.algorithm_params = algorithm_params
        self.random_state = random_state
        self.n_jobs = n_jobs

    def _check_params(self):
        super()._check_params()
        V.check_choice(self.mode, "mode", _MODES)

    def fit(self, X, y=None):
        """Index the training points (see :meth:`HyperbolicNearestNeighbors.fit`); returns self."""
        super().fit(X)
        self._n_features_out = self.n_samples_fit_
        return self

    def transform(self, X):
        """Sparse graph of the neighbours of ``X`` among the training points.

        Parameters
        ----------
        X : array_like or tensor of shape (n_queries, d)

        Returns
        -------
        scipy.sparse CSR matrix of shape (n_queries, n_samples_fit_)
            ``n_neighbors + 1`` entries per row for ``mode="distance"``,
            ``n_neighbors`` for ``"connectivity"``, nearest first.
        """
        check_is_fitted(self)
        extra = 1 if self.mode == "distance" else 0
        return self.kneighbors_graph(X, mode=self.mode, n_neighbors=self.n_neighbors + extra)

    def fit_transform(self, X, y=None):
        """``fit(X).transform(X)``."""
        return self.fit(X).transform(X)


def _drop_self(ind, dist):
    """Remove each row's own index (or, for duplicates, the last column) from k+1 results."""
    m, k1 = ind.shape
    own = ind == np.arange(m)[:, None]
    # rows where self was not returned (exact duplicates): drop the last column
    own[~own.any(axis=1), k1 - 1] = True
    first = own & (np.cumsum(own, axis=1) == 1)
    keep = ~first
    return ind[keep].reshape(m, k1 - 1), dist[keep].reshape(m, k1 - 1)


def _ragged(values, offsets):
    """Object array of the per-query slices ``values[offsets[i]:offsets[i+1]]`` (scikit-learn's layout)."""
    m = offsets.shape[0] - 1
    out = np.empty(m, dtype=object)
    for i in range(m):
        out[i] = values[offsets[i]:offsets[i + 1]]
    return out


def _csr(data, indices, indptr, shape):
    """A CSR matrix, or a CSR array when scikit-learn is configured with ``sparse_interface="sparray"``."""
    cls = sparse.csr_array if get_config().get("sparse_interface", "spmatrix") == "sparray" else sparse.csr_matrix
    return cls((np.asarray(data, dtype=np.float64), indices, indptr), shape=shape)
