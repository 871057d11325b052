"""What every search algorithm offers :class:`hypann.HyperbolicIndex`.

An algorithm is configured with keyword settings (``__init__`` stores them),
built once on validated unit-curvature Poincare points and their conformal
factors, and answers batches of queries with ``(ids, deltas, stats)`` where
``deltas`` is the surrogate ``|q-x|^2/((1-|q|^2)(1-|x|^2))``; the index turns
them into distances in one place.
"""

from __future__ import annotations

import numpy as np

from hypann import _params
from hypann import _validation as V
from hypann.oracles.registry import make_oracle
from hypann.result import SearchStats


class SearchAlgorithm:
    """Base class. Subclasses set ``name``, ``uses_oracle``, ``build_settings``, ``query_settings``.

    ``build_settings`` declares the keyword-only arguments of ``__init__``
    and ``query_settings`` the extra keywords of ``search``, once, as
    :class:`hypann._params.Param` tuples: :meth:`_check_settings` (called by
    :meth:`build` and :meth:`restore`) and :meth:`check_query_params` check
    values against them, :func:`hypann.search.registry.make_algorithm` refuses
    undeclared options, and ``docs/parameters.md`` lists them. Subclasses with
    a rule across settings extend ``_check_settings`` (calling ``super()``).
    """

    name = "base"
    uses_oracle = True
    #: the constructor's settings, declared once
    build_settings: tuple = ()
    #: the extra per-call settings of ``search``
    query_settings: tuple = ()
    #: names (and deprecated aliases) of the extra keyword arguments ``search`` accepts,
    #: derived from ``query_settings``
    query_params: tuple = ()
    #: True when the algorithm keeps the only copy of the points (then it offers
    #: ``points_shape()``, ``points_in_input_order()`` and ``conformal_in_input_order()``,
    #: and :class:`hypann.HyperbolicIndex` keeps none of its own)
    owns_points = False
    #: numba kernels a build compiles on first use: when one has no on-disk cache yet, the index logs
    #: that it is compiling (:func:`hypann._runtime.notice_first_compile`); none: no notice
    first_use_kernels = ()
    #: True when ``search`` (and ``search_radius``) take ``removed=`` (one flag per
    #: built row) and skip those points; otherwise the index filters the answers
    supports_removed = False
    #: True when ``search`` answers a batch of at most
    #: :data:`hypann._runtime.SERIAL_MAX_QUERIES` queries (without ``removed``)
    #: with serial kernels only: the index then leaves numba's thread setting
    #: alone for such a call (no parallel kernel waits for an idle thread)
    serial_small_batches = False

    def conformal_in_input_order(self):
        """The conformal factors of ``points_in_input_order()`` alone (an algorithm that owns the points
        overrides this to gather them without the points)."""
        return self.points_in_input_order()[1]

    def search_work(self, m):
        """Independent items a search of ``m`` queries splits among threads: caps the threads of
        the call (:func:`hypann._runtime.numba_threads`). ``None``: no cap. Default ``m``."""
        return m

    def describe(self) -> str:
        """What the built algorithm chose and why, in words; ``""`` when there is nothing to add."""
        return ""

    def build(self, points, conformal, *, oracle="kdtree", random_state=None):
        """Index ``points`` (n, d) with stored ``conformal`` (n,); returns self.

        ``points`` and ``conformal`` are kept by reference: the caller
        (:class:`hypann.HyperbolicIndex`) hands over arrays it owns.
        ``random_state`` (int >= 0 or None) seeds every random choice of the
        build and is passed to oracles made from spec strings.
        """
        self._check_settings()
        self.random_state_ = V.check_seed(random_state, "random_state")
        self.points_ = points
        self.conformal_ = conformal
        self.rng_ = np.random.default_rng(random_state)
        self.oracle_spec_ = oracle
        self._build(points, conformal, oracle)
        return self

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "build_settings" not in vars(cls) and "__init__" in vars(cls):
            cls.build_settings = _params.from_signature(cls.__init__)  # an undeclared subclass: unchecked
        cls.query_params = _params.accepted_names(cls.query_settings)

    def _check_settings(self):
        """Raise ValueError/TypeError for a bad constructor setting (each checked by its declaration)."""
        for p in self.build_settings:
            p.check(getattr(self, p.name))

    def check_query_params(self, **params) -> dict:
        """Validated per-call settings (names already checked against ``query_params``).

        A deprecated alias is renamed (with a :class:`DeprecationWarning`);
        each declared setting is checked by its declaration (``None`` means
        the build's default); other keys (``oracle_params``) pass through.
        """
        if not params:
            return params
        params = _params.resolve_aliases(self.query_settings, params, f"algorithm {self.name!r}", stacklevel=5)
        declared = _params.by_name(self.query_settings)
        return {key: (declared[key].check(value) if key in declared and value is not None else value)
                for key, value in params.items()}

    def _make_oracle(self, oracle):
        """An unbuilt oracle: a spec string is parsed and gets the index's seed
        (unless the spec sets ``random_state`` itself); an instance is used as is."""
        if isinstance(oracle, str):
            return make_oracle(oracle, random_state=getattr(self, "random_state_", None))
        return oracle

    def _build(self, points, conformal, oracle):
        raise NotImplementedError(f"{type(self).__name__} must implement _build")

    def search(self, queries, q_conformal, k, *, budget=None, **params):
        """Returns ``(ids (m,k) int64, deltas (m,k) float64, SearchStats)``."""
        raise NotImplementedError(f"{type(self).__name__} must implement search")

    def query_order(self, queries, q_conformal):
        """The order in which a batch of checked queries is best searched, as a permutation of
        ``range(m)``, or ``None``: as given (the default).

        :class:`hypann.HyperbolicIndex` searches ``queries[order]`` and puts
        the answers back in the callers' order. Only for algorithms whose
        answer to a query does not depend on its row in the batch; the order
        is for the memory cache (queries that read the same points one after
        the other).
        """
        return None

    def one_query_function(self, c, model):
        """A function ``run(X, k, **params)`` that answers one query in one compiled call, or ``None``: this
        algorithm has no such path.

        The fast path of :meth:`hypann.HyperbolicIndex.search` for one
        query: the index asks for the function once per build, curvature
        ``c`` (a finite float > 0) and ``model`` (``"lorentz"``: ``X`` is a
        hyperboloid row of one more coordinate), keeps it, and calls it
        with a float64 or float32 ``X`` of shape (1, d) in that model, a
        checked ``k`` and checked per-call settings ``params``, with no
        budget and no points added or removed. ``run`` returns ``(ids (1, k)
        int64, deltas (1, k) float64, samples (1,) int64)``: :meth:`search`'s
        answer for the checked query bit for bit, from one round and no
        oracle call, or ``None`` when ``X`` is not a valid point; the index
        then takes the checked path (which reports what is wrong), as it
        does for a row short of ``k`` points (which it completes).
        """
        return None

    def search_coordinates(self, X, c, k, *, model="poincare", **params):
        """One query given by its coordinates ``X`` (1, d) in curvature ``-c`` through
        :meth:`one_query_function`: ``(ids, deltas, SearchStats)``, or ``None`` (no such path, or ``X`` not a
        valid point). ``X``, ``c``, ``k`` and ``params`` as :meth:`one_query_function` takes them."""
        run = self.one_query_function(c, model)
        found = None if run is None else run(X, k, **params)
        return None if found is None else (found[0], found[1], SearchStats.one_query(found[2]))

    #: whether :meth:`search_radius` is exact (False: not offered)
    supports_radius = False

    def search_radius(self, queries, q_conformal, delta_limits):
        """All points with ``delta <= delta_limits[i]``: ``(offsets, ids, deltas)``, ascending per query."""
        raise NotImplementedError(
            f"algorithm {self.name!r} has no range search; use algorithm='hkdtree' or 'brute' "
            f"(exact), or 'recentering' with oracle 'kdtree' or 'brute'"
        )

    def get_state(self) -> dict:
        """Arrays that let :meth:`restore` skip the build (empty: rebuild on load)."""
        return {}

    def restore(self, points, conformal, state, *, oracle="kdtree", random_state=None):
        """Recreate a built algorithm from :meth:`get_state` output (default: rebuild).

        ``state`` is untrusted (read from a file): subclasses that store one
        check every array before use. Those that store none accept only an
        empty state.
        """
        if state:
            raise ValueError(f"algorithm {self.name!r} stores no state, but got arrays {sorted(state)}")
        return self.build(points, conformal, oracle=oracle, random_state=random_state)

    def settings(self) -> dict:
        """Constructor settings, ``{name: value}`` in the order of ``build_settings`` (for saving and ``repr``)."""
        return {p.name: getattr(self, p.name) for p in self.build_settings}

    get_params = settings

    def _query_seed(self, random_state):
        """Seed of a search's random choices: the per-call ``random_state`` or, by
        default, ``query_seed_``, drawn once at build time from the index's seed
        (so equal calls give equal answers, and an int index seed fixes it in
        any process)."""
        if random_state is not None:
            return V.check_seed(random_state, "random_state")
        return self.query_seed_

    @property
    def nbytes(self) -> int:
        return 0


def sort_ragged(offsets, ids, deltas):
    """Sort each query's slice of a ragged result by ``(delta, id)``."""
    owner = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    order = np.lexsort((ids, deltas, owner))
    return offsets, ids[order], deltas[order]
