"""`HyperbolicIndex`: one class in front of every algorithm and oracle."""

from __future__ import annotations

import contextlib
import inspect
import logging
import os

import numpy as np

from hypann import _validation as V
from hypann import _progress as progress
from hypann._runtime import (SERIAL_MAX_QUERIES, check_n_jobs, notice_first_compile, numba_threads,
                             ordered_piece_rows, searched_in_order)
from hypann.geometry._kernels import any_negative, inverse_permutation
from hypann.geometry.gram_scan import knn_delta_scan
from hypann.geometry.poincare import delta_from_dist, dist_from_delta
from hypann.oracles.base import EuclideanOracle
from hypann.result import RangeSearchResult, SearchResult, SearchStats
from hypann import rounding
from hypann.search.registry import algorithm_class, available_algorithms, make_algorithm
from hypann.settings import DEFAULT_K
from hypann.updates import LiveSet, check_ids, concat_ragged, merge_knn, merge_ragged, take_ragged

log = logging.getLogger(__name__)

#: A search with ``verbose=True`` shows a progress bar (stderr, when it is a
#: terminal) for batches of more than this many queries ...
PROGRESS_MIN_QUERIES = 20_000
#: ... run in chunks of this many queries, the bar advancing per chunk.
PROGRESS_CHUNK = 10_000
#: A build (or load) with ``verbose=True`` shows its bar only once it has
#: taken this many seconds (at its next step).
BUILD_PROGRESS_DELAY = 2.0
#: Algorithms whose random choices depend on a query's row number within the
#: batch: never split into chunks (the answers would change).
_ROW_SEEDED = frozenset({"vamana", "random_shells"})
#: Distinct per-call settings of one-query searches whose checked form an index keeps.
_QUERY_PARAMS_KEPT = 64
#: Values of ``storage=``: the dtype of the stored coordinates.
STORAGE_DTYPES = ("float64", "float32")
#: Algorithms that accept ``storage="float32"`` (exact against the stored points; see
#: :class:`HyperbolicIndex`); the others need float64 coordinates.
FLOAT32_ALGORITHMS = ("auto", "hkdtree", "brute", "graph")
#: Largest rows per block when ``build`` checks and converts a large input (see :meth:`HyperbolicIndex.build`) ...
_STORAGE_BLOCK = 1 << 16
#: ... and largest values per block (8 MB of float64), so that a block's temporaries stay small at high d.
_STORAGE_BLOCK_VALUES = 1 << 20
#: The Euclidean oracle of oracle-based algorithms when none is given.
DEFAULT_ORACLE = "kdtree"
#: The algorithm of ``HyperbolicIndex()``, the scikit-learn estimators and the CLI
#: when none is named: ``"auto"``, exact (needs no oracle, supports range search),
#: which picks the kd-tree or a scan from the kd-tree's measured pruning
#: (:mod:`hypann.search.auto`).
DEFAULT_ALGORITHM = "auto"


def open_npy(path, *, name="X"):
    """The array of the ``.npy`` file at ``path``, memory-mapped read-only (no copy is read).

    Raises ``ValueError`` naming ``name`` and the path when the file cannot be
    read, is not a ``.npy`` file (e.g. a ``.npz`` archive or a hypann index) or
    holds no 2-D array of real numbers.
    """
    shown = os.fspath(path)
    try:
        arr = np.load(shown, mmap_mode="r", allow_pickle=False)
    except (OSError, ValueError, EOFError) as exc:
        raise ValueError(f"{name}: cannot read {shown!r} as a .npy file of points ({type(exc).__name__}: {exc})") from None
    if not isinstance(arr, np.ndarray):  # an .npz archive
        arr.close()
        raise ValueError(f"{name}: {shown!r} is a .npz archive, not a .npy file of points (save one array with "
                         f"numpy.save)")
    if arr.dtype.kind not in "fiu" or arr.ndim != 2:
        raise ValueError(f"{name}: {shown!r} must hold a 2-D array of real numbers (n_points, n_dims), got "
                         f"dtype={arr.dtype}, shape={arr.shape}")
    return arr


def check_search_options(algorithm, budget, oracle_params, query_params):
    """Validated ``(budget, query_params)`` for a search with ``algorithm`` (a registry name).

    ``oracle_params`` (a dict, only for algorithms that use an oracle) is
    folded into the returned ``query_params``; unknown query settings raise
    ``ValueError`` naming the allowed ones.
    """
    if budget is None and oracle_params is None and not query_params:
        return None, {}
    cls = algorithm_class(algorithm)
    budget = V.check_positive_int(budget, "budget", allow_none=True)
    query_params = dict(query_params)
    V.reject_unknown(query_params, cls.query_params, f"search with algorithm {algorithm!r}")
    if oracle_params is not None:
        if not isinstance(oracle_params, dict):
            raise V.ParameterTypeError(
                f"oracle_params must be a dict or None, got {type(oracle_params).__name__} ({oracle_params!r})"
            )
        if oracle_params and not cls.uses_oracle:
            raise ValueError(f"algorithm {algorithm!r} does not use an oracle, got oracle_params={oracle_params!r}")
        if oracle_params:
            query_params["oracle_params"] = oracle_params
    return budget, query_params


class HyperbolicIndex:
    """Nearest-neighbour index for points in hyperbolic space.

    Configure, then :meth:`build`, then :meth:`search`. Points may be given in
    the Poincare ball or on the hyperboloid (``model="lorentz"``), of any
    curvature ``-c``; they are stored as float64 unit-curvature Poincare
    points with their conformal factors ``1-|x|^2`` (computed once, exactly
    rounded). Distances come back in the caller's curvature.

    Parameters
    ----------
    algorithm : str, default :data:`DEFAULT_ALGORITHM` (``"auto"``)
        ``"auto"`` (exact: the kd-tree, or a scan when the kd-tree's measured
        pruning is poor; see :meth:`describe`), ``"hkdtree"`` (exact kd-tree with hyperbolic pruning), ``"recentering"`` (exact, Wu & Charikar Alg. 1), ``"binary_search"``
        (``ratio``-approximate, Alg. 2), ``"shells"`` / ``"random_shells"``
        (``sqrt(width)``-approximate with any oracle, Alg. 3 / 8), ``"graph"``
        (approximate k-NN graph search, the fast choice; query setting
        ``ef``; an exact scan by default where the calibrated list would
        evaluate over 1/11 of the points, see :meth:`describe`; with
        ``exact=True`` its answer seeds an exact kd-tree search), ``"vamana"`` (the paper's graph baseline), ``"brute"``
        (exact scan).
    oracle : str or EuclideanOracle, default "kdtree"
        Euclidean oracle spec (``"kdtree"``, ``"brute"``, ``"hkdtree"``,
        ``"lsh:tables=5,bits=15"``, ``"faiss:HNSW32"``, ``"hnswlib:M=16"``) or
        an instance. Ignored by algorithms that do not use one.
    model : {"poincare", "lorentz"}, default "poincare"
    c : float, default 1.0
        Curvature magnitude (the space has curvature ``-c``).
    random_state : int >= 0 or None
        Seed of every random choice: Vamana's initial graph, build order,
        medoid sample and restart points, the random shell order, the
        brute-force sample under a budget, and the seed of oracles made from
        a spec string that does not set its own (``"lsh"`` hyperplanes,
        ``"hnswlib"`` levels). The same seed gives identical results in any
        process. ``None``: fresh entropy for the index's own choices, and the
        oracles' default seeds.
    n_jobs : int or None, default None
        Threads of the numba kernels for build and search: ``None`` or ``-1``
        use all cores. Results are identical for any thread count.
    storage : {"float64", "float32"}, default "float64"
        dtype of the stored coordinates. ``"float32"`` halves the memory and
        file size of the points (:data:`FLOAT32_ALGORITHMS` only). The
        conformal factor ``1-|x|^2`` of every point stays float64, computed as
        always from the caller's own float64 coordinates, and every distance is
        computed in float64 from the float32 coordinates (converted exactly)
        and that stored factor. Both algorithms stay exact *for the stored
        points*: the ``k`` returned are exactly the ``k`` smallest of
        ``delta(q, x) = |q - x32|^2 / ((1-|q|^2) (1-|x|^2))`` over the index,
        the value float64 brute force over the stored representation gives
        (the kd-tree's boxes are the min/max of float32 values, hence exact).
        What changes is the *points*: rounding the coordinates to float32 moves
        a point by up to ``2^-24 |x|`` (Euclidean), which is noise for
        neighbours at hyperbolic distance well above ``2^-24 e^h`` at
        hyperbolic norm ``h`` and decides close pairs far out
        (``docs/storage.md`` has the measured effect). If the data were
        float32 already, nothing is lost. Otherwise :meth:`build` checks the
        points nearest the boundary (:mod:`hypann.rounding`): when rounding
        changed the distance to the nearest neighbour by more than 10 % for
        more than a tenth of them, it warns with a
        :class:`~hypann.rounding.Float32PrecisionWarning`. :meth:`add`
        checks the points it adds (through the index: the built points'
        float64 originals are gone). The latest check's
        :class:`~hypann.rounding.RoundingReport` is kept as
        ``float32_rounding_`` (an ``add`` of float32 input, which has
        nothing to check, leaves it).
    verbose : bool, default True
        Show a progress bar (tqdm, on stderr, only when stderr is a terminal)
        for :meth:`search` batches of more than :data:`PROGRESS_MIN_QUERIES`
        queries, which then run in chunks of :data:`PROGRESS_CHUNK`. Results
        are identical either way; batches whose answers depend on the row
        number (``"vamana"``, ``"random_shells"``, or a ``budget``) run in
        one piece without a bar. A setting of this process: not saved.
    **params
        Build settings of the algorithm (e.g. ``ratio=1.1``, ``width=3``).

    Notes
    -----
    Settings are stored as given and checked by :meth:`build` (and query
    settings by :meth:`search`): a wrong type raises ``TypeError`` (also a
    ``ValueError``), a value out of range ``ValueError``, each naming the
    parameter, the value and what is allowed. The index keeps its own copy of
    the points: changing ``X`` after :meth:`build` does not change the index.
    Threads: a built index may be searched from several Python threads at
    once; every call returns exactly what it would return alone (searches
    keep no state on the index; hnswlib's index-global ``ef`` is set under a
    per-oracle lock, so hnswlib calls run one at a time). Building, loading
    or saving while another thread searches is not supported.

    Examples
    --------
    >>> import numpy as np, hypann
    >>> X = 0.5 * np.random.default_rng(0).uniform(-1, 1, (1000, 5)) / np.sqrt(5)
    >>> index = hypann.HyperbolicIndex(algorithm="recentering", oracle="kdtree").build(X)
    >>> res = index.search(X[:3], k=2)
    >>> res.indices[:, 0].tolist()
    [0, 1, 2]
    """

    def __init__(self, *, algorithm=DEFAULT_ALGORITHM, oracle=None, model="poincare", c=1.0, random_state=None,
                 n_jobs=None, verbose=True, storage="float64", **params):
        self.algorithm = algorithm
        self.storage = storage
        self.oracle = oracle
        self.model = model
        self.c = c
        self.random_state = random_state
        self.n_jobs = n_jobs
        self.verbose = verbose
        self.params = params

    # -- building ---------------------------------------------------------
    def _check_settings(self):
        V.check_model(self.model)
        V.check_curvature(self.c)
        check_n_jobs(self.n_jobs)
        V.check_bool(self.verbose, "verbose")
        if not isinstance(self.algorithm, str):
            raise V.ParameterTypeError(
                f"algorithm must be a string, one of {available_algorithms()}, got algorithm={self.algorithm!r}"
            )
        cls = algorithm_class(self.algorithm)
        if self.oracle is not None and not isinstance(self.oracle, (str, EuclideanOracle)):
            raise V.ParameterTypeError(
                f"oracle must be a spec string or an EuclideanOracle, got {type(self.oracle).__name__} ({self.oracle!r})"
            )
        if self.oracle is not None and not cls.uses_oracle:
            raise ValueError(
                f"algorithm {self.algorithm!r} does not use an oracle, got oracle={self.oracle!r}; "
                f"oracle-based algorithms: recentering, binary_search, shells, random_shells "
                f"(e.g. HyperbolicIndex(algorithm='recentering', oracle={self.oracle!r}))"
            )
        V.check_seed(self.random_state, "random_state")
        self._check_storage()

    def _check_storage(self):
        if not isinstance(self.storage, str):
            raise V.ParameterTypeError(
                f"storage must be one of {STORAGE_DTYPES}, got storage={self.storage!r} ({type(self.storage).__name__})"
            )
        if self.storage not in STORAGE_DTYPES:
            raise ValueError(f"storage must be one of {STORAGE_DTYPES}, got storage={self.storage!r}")
        if self.storage == "float32" and self.algorithm not in FLOAT32_ALGORITHMS:
            raise ValueError(
                f"storage='float32' is supported by the algorithms {', '.join(map(repr, FLOAT32_ALGORITHMS))} "
                f"(exact for the stored points; the graph with exact=True), got algorithm={self.algorithm!r}; "
                f"use storage='float64' with it"
            )

    def build(self, X):
        """Index the points ``X`` of shape (n, d) (or (n, d+1) on the hyperboloid); returns self.

        The index stores its own copy of the (unit-curvature) points, float64
        or float32 (``storage``): ``X`` may be changed or freed afterwards.
        ``X`` may also be the path of a ``.npy`` file, which is then read
        through a memory map (:func:`numpy.load` with ``mmap_mode="r"``).
        A large ``X`` (e.g. a :class:`numpy.memmap`) is checked and converted
        in blocks of rows straight into the index's copy, so no other copy of
        it is made; the kd-tree (``"hkdtree"``, ``"auto"``) then puts that
        copy in its own order instead of copying it again.
        """
        self._check_settings()
        if isinstance(X, (str, os.PathLike)):
            X = open_npy(X, name="X")
        X = V.numpy_input(X, name="X", model=self.model, c=self.c)  # read again by the float32 check
        if isinstance(X, np.ndarray) and X.ndim == 2 and X.shape[0] > _STORAGE_BLOCK:
            points, conformal = self._check_points_blockwise(X)
        else:
            points, conformal = V.check_points(X, name="X", model=self.model, c=self.c)
        self._build_validated(points, conformal)
        if self.storage == "float32":
            self._check_float32_rounding(X)
        return self

    def _check_float32_rounding(self, X):
        """Warn (:class:`~hypann.rounding.Float32PrecisionWarning`) when rounding the built points to float32
        changed the nearest-neighbour distances of the points nearest the boundary (:mod:`hypann.rounding`).

        Sets ``float32_rounding_``: the :class:`~hypann.rounding.RoundingReport`, or ``None`` when there is
        nothing to check (float32 Poincare input at ``c = 1``, which the rounding leaves as it is, or fewer
        than two points).
        """
        self.float32_rounding_ = None
        source = np.asarray(X)  # numpy_input's: no copy of an array, a memory map or a tensor
        if rounding.nothing_to_check(source, self.model, self.c, self.n_points_):
            return
        changes = rounding.built_changes(lambda rows: V.check_points(source[rows], name="X", model=self.model, c=self.c),
                                         self._search_validated, c=self.c)
        # the factors in row order (the kd-tree has put the build's array in its own); warns from build
        self.float32_rounding_ = rounding.check(self.conformal_, changes, stacklevel=4)

    def _check_points_blockwise(self, X):
        """:func:`hypann._validation.check_points` of ``X`` block by block, into points of the ``storage`` dtype.

        The same checks and conformal factors as one call on all of ``X``; a
        bad row is reported by a second call on all of ``X`` (so the message
        names its row number in ``X``).
        """
        n = X.shape[0]
        dim = X.shape[1] - (self.model == "lorentz")
        points = np.empty((n, max(dim, 0)), dtype=np.dtype(self.storage))
        conformal = np.empty(n)
        rows = max(1, min(_STORAGE_BLOCK, _STORAGE_BLOCK_VALUES // max(X.shape[1], 1)))
        for start in range(0, n, rows):
            stop = min(start + rows, n)
            try:
                block, block_conf = V.check_points(X[start:stop], name="X", model=self.model, c=self.c)
            except (ValueError, TypeError):
                V.check_points(X, name="X", model=self.model, c=self.c)  # the message with the row number in X
                raise
            points[start:stop] = block
            conformal[start:stop] = block_conf
        return points, conformal

    def _build_validated(self, points, conformal, state=None, labels=None, full_check=True):
        """Build (or, with ``state``, restore) over validated points; ``points=None``: the state holds them."""
        algo = make_algorithm(self.algorithm, self.params)
        oracle = self.oracle if self.oracle is not None else DEFAULT_ORACLE
        if points is not None and self.storage == "float32" and points.dtype != np.float32:
            points = points.astype(np.float32)
        if not state:  # a load runs none of the build's kernels (its search compiles on first use)
            notice_first_compile(*algo.first_use_kernels)
        verb = "load" if state else "build"
        with numba_threads(self.n_jobs), progress.task(f"{verb} {self.algorithm}", enabled=self.verbose,
                                                      delay=BUILD_PROGRESS_DELAY):
            progress.advance(stage="reading the stored structure" if points is None else f"{points.shape[0]:,} points")
            if state:
                # structural checks only (a memory-mapped file, verify="structure"): for the
                # algorithms that offer them; the others check their state in full
                # (whether it holds the points is only known after the restore: ask its signature)
                takes_option = "full_check" in inspect.signature(algo.restore).parameters
                options = {} if full_check or not takes_option else {"full_check": False}
                algo.restore(points, conformal, state, oracle=oracle, random_state=self.random_state, **options)
            else:
                algo.build(points, conformal, oracle=oracle, random_state=self.random_state)
            progress.advance(stage="done")
        self.algorithm_ = algo
        # one copy of the points: an algorithm that keeps its own (the kd-tree, permuted) is the only holder
        owned = algo.owns_points
        self._points = None if owned else points
        self._conformal = None if owned else conformal
        n, self.dim_ = algo.points_shape() if owned else points.shape
        self.live_ = LiveSet(n, self.dim_, labels)
        log.debug("built %r", self)
        return self

    @property
    def points_(self) -> np.ndarray:
        """The built points (unit-curvature Poincare, in row order; float64 or float32 per ``storage``).

        When the search structure holds the only copy (the kd-tree keeps them
        in its own order), this is a new array gathered from it on every access.
        """
        if not hasattr(self, "algorithm_"):
            raise AttributeError("points_: this HyperbolicIndex is not built yet")
        return self._stored_rows()[0]

    @property
    def conformal_(self) -> np.ndarray:
        """The stored conformal factors ``1-|x|^2`` of :attr:`points_` (float64, row order)."""
        if not hasattr(self, "algorithm_"):
            raise AttributeError("conformal_: this HyperbolicIndex is not built yet")
        if self._conformal is None:
            return self.algorithm_.conformal_in_input_order()
        return self._conformal

    def _stored_rows(self):
        """``(points_, conformal_)`` at once: one gather from the search structure when it holds the only
        copy (two property reads would gather the conformal factors twice)."""
        if self._points is None:
            return self.algorithm_.points_in_input_order()
        return self._points, self._conformal

    @property
    def n_points_(self) -> int:
        """Number of live points (built + added - removed)."""
        return self.live_.n_live

    @property
    def ids_(self) -> np.ndarray:
        """The id of every live point, in row order (the ids search results are given in)."""
        self._check_fitted()
        return self.live_.labels[~self.live_.removed]

    # -- changing the point set ---------------------------------------------
    def add(self, X, ids=None):
        """Add points after :meth:`build`; returns self.

        Added points are searched exactly (by a kd-tree of their own) and
        merged with the structure's answers; when added + removed points
        exceed :data:`hypann.updates.REBUILD_FRACTION` of the built ones, the
        structure is rebuilt over the live points (:meth:`compact`).

        Parameters
        ----------
        X : array_like of shape (m, d)
            Points in the index's model and curvature.
        ids : array_like of shape (m,), int, optional
            Their ids (distinct, ``>= 0``, not the id of a live point). Default:
            consecutive ids after the largest id in use.
        """
        self._check_fitted()
        X = V.numpy_input(X, name="X", model=self.model, c=self.c)  # read again by the float32 check
        points, conformal = V.check_points(X, name="X", model=self.model, c=self.c, dim=self.dim_)
        live = self.live_
        if ids is None:
            start = live.next_label()
            labels = np.arange(start, start + points.shape[0], dtype=np.int64)
        else:
            labels = check_ids(ids, points.shape[0])
            taken = live.live_label_mask(labels)
            if taken.any():
                raise ValueError(f"ids already in the index: {labels[taken][:5].tolist()}")
            if live.has_removed_label(labels):
                self.compact()  # a removed row still holds that id
                live = self.live_
        exact = points
        if self.storage == "float32":  # stored as the built points are: float32 coordinates (held as float64)
            points = rounding.as_stored(points)
        live.add(points.copy(), conformal, labels)
        if live.needs_rebuild():
            self.compact()
        if self.storage == "float32" and not rounding.nothing_to_check(X, self.model, self.c, self.n_points_):
            # what rounding the added points changed (the built points' float64 originals are gone)
            changes = rounding.added_changes(exact, conformal, labels, self._search_validated)
            self.float32_rounding_ = rounding.check(conformal, changes, added=True, stacklevel=3)
        return self

    def remove(self, ids):
        """Remove the points with these ids; they are never returned again. Returns self.

        Raises ``ValueError`` naming any id that is not a live point.
        """
        self._check_fitted()
        ids = np.atleast_1d(np.asarray(ids))
        if ids.dtype.kind not in "iu" or ids.ndim != 1:
            raise TypeError(f"ids must be integers, got dtype={ids.dtype}, shape={ids.shape}")
        if ids.size == 0:
            return self
        if np.unique(ids).size != ids.size:
            raise ValueError("ids to remove must be distinct")
        rows = self.live_.rows_of(ids)
        if rows.size >= self.live_.n_live:
            raise ValueError(f"cannot remove all {self.live_.n_live} points of the index; build a new one instead")
        self.live_.remove_rows(rows)
        if self.live_.needs_rebuild():
            self.compact()
        return self

    def compact(self):
        """Rebuild the search structure over the live points (ids kept); returns self.

        Called automatically when the changes since the build grow large; call
        it yourself before a long series of searches after many changes.
        """
        self._check_fitted()
        if self.live_.n_changes == 0:
            return self
        points, conformal, labels = self.live_.live_rows(*self._stored_rows())
        plain = np.array_equal(labels, np.arange(labels.shape[0]))  # row-number ids: no array kept
        self._build_validated(points, conformal, labels=None if plain else labels)
        return self

    def _check_fitted(self):
        if not hasattr(self, "algorithm_"):
            raise ValueError("this HyperbolicIndex is not built yet: call build(X) first")

    # -- searching --------------------------------------------------------
    def search(self, Q, k=DEFAULT_K, *, budget=None, oracle_params=None, **query_params) -> SearchResult:
        """The ``k`` nearest indexed points of each query.

        Parameters
        ----------
        Q : array_like of shape (m, d), or None
            Queries in the index's model and curvature. ``None``: the indexed
            points themselves (exactly as stored, so each finds itself at
            distance 0).
        k : int, default :data:`hypann.settings.DEFAULT_K` (1)
            Neighbours per query, ``1 <= k <= n_points``.
        budget : int, optional
            Sample budget: stop a query once it has examined this many points
            (the paper's "# Samples", reported as ``stats.samples``) and
            return the best found. A hard limit: ``stats.samples <= budget``
            for every algorithm with every built-in oracle, with no
            allowance (oracles stop after the samples a query has left, or
            are asked for no more neighbours than that). ``"brute"`` scans a
            fixed random sample of ``budget`` points. The one exception is
            a third-party oracle that counts its evaluations
            (``counts_evaluations``) but cannot stop early
            (``supports_budget`` False): a query may then overshoot by the
            evaluations of its last oracle call. Fewer than ``k`` points may
            come back when ``budget < k`` (``-1`` ids, ``inf`` distances).
            Under a budget no search is exact.
        oracle_params : dict, optional
            Per-call settings of the Euclidean oracle(s), e.g. ``{"ef": 128}``
            for hnswlib or ``{"ef": 64}`` / ``{"nprobe": 16}`` for faiss.
        **query_params
            Per-call settings of the algorithm (e.g. ``ratio`` for
            ``binary_search``, ``ef`` for ``graph`` and ``vamana``).

        Returns
        -------
        SearchResult
            ``indices`` (m, k) int64, ``distances`` (m, k) float64 ascending,
            ``stats`` per query.
        """
        if budget is None and oracle_params is None:
            found = self._search_one(Q, k, query_params)
            if found is not None:
                return found
        self._check_fitted()
        queries, q_conf = self._queries(Q)
        return self._search_validated(queries, q_conf, k, budget=budget, oracle_params=oracle_params, **query_params)

    def _search_one(self, Q, k, query_params):
        """:meth:`search` of one plain query in one compiled call of the algorithm (its
        :meth:`~hypann.search.base.SearchAlgorithm.one_query_function`), or ``None`` to take the checked path.

        Taken for one row of the index's model and dimension in a float64 or
        float32 array, a valid ``k`` (an int or a numpy integer) and valid
        settings, with no point added or removed since the build. The
        checked path answers the rest: a query, ``k`` or setting with a
        problem (it reports them in its order), a query that is not a valid
        point, and a graph search that came back short of ``k`` points (it
        completes the row).
        """
        run = self._one_query_function()
        if (run is None or not V.plain_rows(Q, model=self.model, dim=self.dim_, max_rows=1)
                or not (type(k) is int or isinstance(k, np.integer))
                or not 1 <= k <= self.live_.n_built):  # all built points are live (_one_query_function)
            return None
        try:
            params = self._one_query_params(query_params)
        except (TypeError, ValueError):
            return None
        found = run(Q, int(k), **params)
        if found is None or any_negative(found[0]):  # a row short of k points: the checked path completes it
            return None
        ids, deltas, samples = found
        return SearchResult(self.live_.labels_of(ids), dist_from_delta(deltas, c=self.c),
                            SearchStats.one_query(samples), self.storage == "float32")

    def _one_query_function(self):
        """The algorithm's one-query function (:meth:`_search_one`) for this build, curvature and model, made
        on the first call and kept; ``None`` before a build, after points were added or removed, for
        settings with a problem, or for an algorithm without one."""
        algorithm = self.__dict__.get("algorithm_")
        if algorithm is None or self.live_.n_changes:
            return None
        c, model = self.c, self.model
        kept = self.__dict__.get("_one_query")
        if kept is not None and kept[0] is algorithm and kept[1] is c and kept[2] is model:
            return kept[3]
        try:
            checked = V.check_curvature(c)
            V.check_model(model)
        except (TypeError, ValueError):
            return None
        run = algorithm.one_query_function(checked, model)
        self._one_query = (algorithm, c, model, run)
        return run

    def _one_query_params(self, query_params):
        """Checked per-call settings of a one-query search, kept per algorithm class and setting (a loop of
        one-query calls passes the same ones each time). A setting given by a deprecated alias (its warning
        is due on every call) or by an unhashable value is checked anew each time."""
        if not query_params:
            return {}
        memo = self.__dict__.setdefault("_checked_query_params", {})
        try:  # with the type: ef=True must not find the entry of ef=1
            key = (type(self.algorithm_), *[(name, type(value), value) for name, value in query_params.items()])
            return memo[key]
        except KeyError:
            pass
        except TypeError:  # an unhashable value
            key = None
        _, params = check_search_options(self.algorithm, None, None, query_params)
        params = self.algorithm_.check_query_params(**params)
        if key is not None and params.keys() == query_params.keys() and len(memo) < _QUERY_PARAMS_KEPT:
            memo[key] = params
        return params

    def _search_validated(self, queries, q_conf, k, *, budget=None, oracle_params=None, **query_params):
        """:meth:`search` for queries already in the index's representation (unit-curvature points)."""
        self._check_fitted()
        k = V.check_k(k, self.n_points_)
        budget, query_params = check_search_options(self.algorithm, budget, oracle_params, query_params)
        query_params = self.algorithm_.check_query_params(**query_params)
        m = queries.shape[0]
        if m == 0:
            return self._result(np.empty((0, k), np.int64), np.empty((0, k)), SearchStats.zeros(0))
        if m <= SERIAL_MAX_QUERIES and self.algorithm_.serial_small_batches and not self.live_.n_changes:
            # serial kernels only: numba's thread setting does not matter (and costs a few microseconds)
            rows, deltas, stats = self._search_rows(queries, q_conf, k, budget, query_params)
        else:
            with numba_threads(self.n_jobs, work=self.algorithm_.search_work(m)):
                bar = self.verbose and m > PROGRESS_MIN_QUERIES and budget is None and self.algorithm not in _ROW_SEEDED
                rows, deltas, stats = self._search_rows(queries, q_conf, k, budget, query_params, progress_bar=bar)
        return self._result(rows, deltas, stats)

    def _search_rows(self, queries, q_conf, k, budget, query_params, *, progress_bar=False):
        """``(rows, deltas, stats)`` of validated queries: the search behind :meth:`search`.

        A batch large enough (:func:`~hypann._runtime.searched_in_order`) is searched in the order the
        algorithm gives (:meth:`~hypann.search.base.SearchAlgorithm.query_order`, for the cache), in pieces
        of :func:`~hypann._runtime.ordered_piece_rows` queries: each piece is gathered in that order by one
        copy, searched, and its answers written to the caller's rows, so the copies of queries and answers
        stay bounded. With ``progress_bar`` (no budget; only for algorithms whose answer to a query does not
        depend on its row in the batch) the pieces hold at most :data:`PROGRESS_CHUNK` queries, in order or
        as given, and a tqdm bar advances per piece. The answers equal those of the batch searched in one
        piece.
        """
        m = queries.shape[0]
        order = self._query_order(queries, q_conf)
        if order is None and not progress_bar:
            return self._search_rows_in_order(queries, q_conf, k, budget, query_params)
        step = ordered_piece_rows(queries.shape[1], k)
        if progress_bar:
            step = min(step, PROGRESS_CHUNK)
        rows = np.empty((m, k), dtype=np.int64)
        deltas = np.empty((m, k))
        stats = SearchStats.zeros(m)  # put() adds the algorithm's extra counters
        with progress.task("search", total=m, unit="q") if progress_bar else contextlib.nullcontext():
            for start in range(0, m, step):
                stop = min(start + step, m)
                piece = slice(start, stop) if order is None else order[start:stop]
                piece_rows, piece_deltas, piece_stats = self._search_rows_in_order(queries[piece], q_conf[piece],
                                                                                   k, budget, query_params)
                rows[piece] = piece_rows
                deltas[piece] = piece_deltas
                stats.put(piece, piece_stats)
                if progress_bar:
                    progress.advance(stop - start)
        return rows, deltas, stats

    def _query_order(self, queries, q_conf):
        """The algorithm's order of a batch large enough to be searched in it
        (:func:`~hypann._runtime.searched_in_order`), else ``None``."""
        if not searched_in_order(queries.shape[0], self.n_points_):
            return None
        return self.algorithm_.query_order(queries, q_conf)

    def _search_rows_in_order(self, queries, q_conf, k, budget, query_params):
        """:meth:`_search_rows` of the queries in the order given."""
        if self.live_.n_changes:
            return self._search_changed(queries, q_conf, k, budget, query_params)
        rows, deltas, stats = self.algorithm_.search(queries, q_conf, k, budget=budget, **query_params)
        if budget is None:
            rows, deltas = self._fill_short_rows(queries, q_conf, k, rows, deltas, stats)
        return rows, deltas, stats

    def _fill_short_rows(self, queries, q_conf, k, rows, deltas, stats):
        """Complete rows where an approximate search found fewer than ``k`` points (no budget given).

        Graph and LSH searches can end with fewer than ``k`` candidates (a
        search list that cannot reach ``k`` points, empty buckets). Without a
        budget the contract is ``k`` distinct valid ids whenever ``k <= n``, so
        such rows are answered by an exact scan (their samples count it).
        """
        rows = np.asarray(rows, dtype=np.int64)
        if not any_negative(rows):
            return rows, deltas
        short = np.flatnonzero((rows < 0).any(axis=1))
        points, conformal = self._stored_rows()
        with numba_threads(self.n_jobs):  # a one-query call has set no thread count: the scan may split rows
            ids, exact = knn_delta_scan(np.ascontiguousarray(queries[short]), np.ascontiguousarray(q_conf[short]),
                                        points, conformal, k)
        rows = rows.copy()
        deltas = np.array(deltas, dtype=np.float64)
        rows[short], deltas[short] = ids, exact
        stats.samples[short] += points.shape[0]
        return rows, deltas

    def _search_changed(self, queries, q_conf, k, budget, query_params):
        """Search with added / removed points: structure + added buffer, merged by ``delta``."""
        live = self.live_
        n_built = live.n_built
        removed_built = live.removed[:n_built]
        m = queries.shape[0]
        if self.algorithm_.supports_removed:
            k_main = min(k, n_built - int(removed_built.sum()))
            extra = {"removed": removed_built}
        else:  # ask for enough neighbours that k live ones remain
            k_main = min(n_built, k + int(removed_built.sum()))
            extra = {}
        if k_main > 0:
            rows, deltas, stats = self.algorithm_.search(queries, q_conf, k_main, budget=budget, **query_params, **extra)
            rows = np.asarray(rows, dtype=np.int64)
            gone = rows >= 0
            gone[gone] = removed_built[rows[gone]]
            rows = np.where(gone, -1, rows)
        else:
            rows, deltas, stats = np.full((m, 0), -1, np.int64), np.empty((m, 0)), SearchStats.zeros(m)
        remaining = None if budget is None else np.maximum(budget - stats.samples, 0)
        b_rows, b_deltas, b_samples = live.buffer_knn(queries, q_conf, k, remaining)
        stats.samples += b_samples
        rows, deltas = merge_knn(k, (rows, deltas), (b_rows, b_deltas))
        return rows, deltas, stats

    def search_radius(self, Q, r) -> RangeSearchResult:
        """Every indexed point within hyperbolic distance ``r`` of each query (range search).

        Exact for ``algorithm="auto"``, ``"hkdtree"``, ``"brute"`` and ``"graph"`` with ``exact=True``, and for
        ``"recentering"`` over an exact oracle with ball queries (``"kdtree"``,
        ``"brute"``); other algorithms raise ``NotImplementedError``. The kd-tree
        prunes a node when ``mindist(q, box)^2 / ((1-|q|^2) max_B(1-|x|^2))``
        exceeds ``sinh^2(sqrt(c) r / 2)``; Recentering asks its oracle for the
        Euclidean ball of the hyperbolic ball. Candidates are then kept when
        their distance, computed as for :meth:`search`, is ``<= r``.

        Parameters
        ----------
        Q : array_like of shape (m, d), or None
            Queries in the index's model and curvature; ``None``: the indexed points.
        r : float or array_like of shape (m,)
            Radius per query (``>= 0``, finite), in the index's curvature.
            ``r = 0`` returns the exact duplicates of the query.

        Returns
        -------
        RangeSearchResult
            ``offsets`` (m+1,), ``indices`` and ``distances`` (ascending per query).
        """
        self._check_fitted()
        queries, q_conf = self._queries(Q)
        m = queries.shape[0]
        radius = V.check_radius(r, m)
        # a slightly larger surrogate limit for the search; the exact test is on the distances below
        limits = delta_from_dist(radius * np.sqrt(self.c)) * (1.0 + 1e-12) + 1e-300
        limits = np.ascontiguousarray(limits)
        with numba_threads(self.n_jobs, work=m):
            offsets, ids, deltas = self._search_radius_rows(queries, q_conf, limits)
        distances = dist_from_delta(deltas) / np.sqrt(self.c)
        rows = np.repeat(np.arange(m), np.diff(offsets))
        keep = distances <= radius[rows]
        counts = np.bincount(rows[keep], minlength=m)
        new_offsets = np.zeros(m + 1, dtype=np.int64)
        np.cumsum(counts, out=new_offsets[1:])
        return RangeSearchResult(new_offsets, self._labels_of(ids[keep].astype(np.int64)), distances[keep],
                                 self.storage == "float32")

    def _search_radius_rows(self, queries, q_conf, limits):
        """Range search in row numbering, with added / removed points merged in; a large batch in the
        algorithm's order and in pieces (as in :meth:`_search_rows`), its answers put back in the caller's."""
        order = self._query_order(queries, q_conf)
        if order is None:
            return self._search_radius_rows_in_order(queries, q_conf, limits)
        step = ordered_piece_rows(queries.shape[1])
        pieces = [order[start:start + step] for start in range(0, order.shape[0], step)]
        offsets, ids, deltas = concat_ragged(
            *(self._search_radius_rows_in_order(queries[piece], q_conf[piece], limits[piece]) for piece in pieces))
        return take_ragged(offsets, inverse_permutation(order), ids, deltas)

    def _search_radius_rows_in_order(self, queries, q_conf, limits):
        """:meth:`_search_radius_rows` of the queries in the order given."""
        m = queries.shape[0]
        live = self.live_
        if live.n_changes:
            removed_built = live.removed[:live.n_built]
            if self.algorithm_.supports_removed:
                main = self.algorithm_.search_radius(queries, q_conf, limits, removed=removed_built)
            else:
                main = self.algorithm_.search_radius(queries, q_conf, limits)
            offsets, ids, deltas = merge_ragged(m, main, live.buffer_radius(queries, q_conf, limits))
            keep = ~live.removed[ids]
            rows_of_hit = np.repeat(np.arange(m), np.diff(offsets))[keep]
            ids, deltas = ids[keep], deltas[keep]
            offsets = np.zeros(m + 1, dtype=np.int64)
            np.cumsum(np.bincount(rows_of_hit, minlength=m), out=offsets[1:])
        else:
            offsets, ids, deltas = self.algorithm_.search_radius(queries, q_conf, limits)
        return offsets, ids, deltas

    def _labels_of(self, rows):
        """User ids of ``rows`` (``-1`` stays ``-1``)."""
        return self.live_.labels_of(rows)

    def _queries(self, Q):
        """Validated queries and their conformal factors; ``Q=None``: the indexed points, bit for bit."""
        if Q is None:
            if self.live_.n_changes:
                points, conformal = self.live_.live_rows(*self._stored_rows())[:2]
            else:
                points, conformal = self._stored_rows()
            return np.ascontiguousarray(points, dtype=np.float64), conformal
        return V.check_points(Q, name="Q", model=self.model, c=self.c, dim=self.dim_, allow_empty=True)

    def _result(self, ids, deltas, stats):
        """The :class:`SearchResult` of rows ``ids`` and their ``deltas``; ``-1`` ids get distance ``inf``."""
        ids = self._labels_of(np.asarray(ids, dtype=np.int64))
        distances = dist_from_delta(deltas, c=self.c)
        if any_negative(ids):
            distances[ids < 0] = np.inf
        return SearchResult(ids, distances, stats, self.storage == "float32")

    # -- persistence ------------------------------------------------------
    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_one_query", None)  # a function of this process (a closure over the build), made again on use
        return state

    def save(self, path, *, format_version=None):
        """Write the index to ``path`` atomically (see :mod:`hypann.io`).

        Points added or removed since the build are folded in first
        (:meth:`compact`), so the file holds one structure over the live points
        and their ids. ``format_version``: default the current one (3, whose
        arrays can be memory-mapped by ``hypann.load(path, mmap=True)``); 2
        writes the older ``.npz`` layout (float64 storage only).
        """
        from hypann.io import FORMAT_VERSION, save_index

        self._check_fitted()
        self.compact()
        save_index(self, path, format_version=FORMAT_VERSION if format_version is None else format_version)

    @classmethod
    def load(cls, path, *, mmap=False, verify=None, **overrides):
        """Read an index written by :meth:`save` (``overrides`` replace stored settings, e.g. ``oracle=``).

        ``mmap=True`` maps the arrays of a format-3 file read-only instead of
        reading them; ``verify`` (``"full"`` or ``"structure"``, default
        ``"full"``, or ``"structure"`` with ``mmap``) says how much of the file
        is checked first (see :func:`hypann.io.load_index`).
        """
        from hypann.io import load_index

        return load_index(cls, path, mmap=mmap, verify=verify, **overrides)

    @property
    def nbytes(self) -> int:
        """Bytes held by the points, conformal factors, the search structure and the ids.

        The points are counted once: when the structure holds them (the
        kd-tree), the index keeps no copy of its own.
        """
        self._check_fitted()
        own = sum(a.nbytes for a in (self._points, self._conformal) if a is not None)
        live = self.live_
        ids = live.labels_nbytes + live.removed.nbytes + live.added_points.nbytes + live.added_conformal.nbytes
        return int(own + self.algorithm_.nbytes + ids)

    def describe(self) -> str:
        """One line on the built structure: the algorithm, the data size and, for
        ``algorithm="auto"``, which exact method it chose and the measured fraction
        of points the kd-tree examined that decided it."""
        self._check_fitted()
        text = f"{self.algorithm} over {self.n_points_} points in {self.dim_}-D"
        explain = self.algorithm_.describe()
        return f"{text}; {explain}" if explain else text

    def get_params(self) -> dict:
        return {
            "algorithm": self.algorithm,
            "oracle": self.oracle.spec() if isinstance(self.oracle, EuclideanOracle) else self.oracle,
            "model": self.model,
            "c": self.c,
            "random_state": self.random_state,
            "n_jobs": self.n_jobs,
            "verbose": self.verbose,
            "storage": self.storage,
            **self.params,
        }

    def __repr__(self):
        parts = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items()
                          if v is not None and not (k == "verbose" and v is True)
                          and not (k == "storage" and v == "float64"))
        fitted = f", n_points={self.n_points_}, dim={self.dim_}" if hasattr(self, "n_points_") else ""
        if hasattr(self, "algorithm_") and hasattr(self.algorithm_, "choice_"):
            fitted += f", chosen={self.algorithm_.choice_!r}"  # what algorithm="auto" picked (see describe())
        return f"HyperbolicIndex({parts}{fitted})"


def verify_file(path) -> dict:
    """Check an index file completely (every checksum and value, as ``load(path, verify="full")``).

    Returns its header; raises ``ValueError`` naming the file and the field on any damage.
    """
    from hypann.io import read_metadata

    HyperbolicIndex.load(path, verify="full")
    return read_metadata(path)
