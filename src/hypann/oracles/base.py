"""The Euclidean oracle protocol: what any Euclidean NN library must offer hypann.

An oracle indexes Euclidean points once and answers Euclidean questions; it
knows nothing of hyperbolic geometry (the algorithms in :mod:`hypann.search`
turn hyperbolic questions into Euclidean ones). A new library plugs in by
subclassing :class:`EuclideanOracle` and writing ``_build`` and ``_knn``
(about 30 lines, see :mod:`hypann.oracles.kdtree`).

Capabilities
------------
Each is a class attribute of :class:`EuclideanOracle` (False by default; an
instance may refine one, as faiss sets ``exact`` for ``"Flat"``), read by the
search algorithms instead of probing for methods, listed by
:meth:`EuclideanOracle.capabilities` and checked by the shared conformance
test ``tests/test_oracle_conformance.py``, which a user's oracle can run too.

``exact``
    ``knn`` returns the true Euclidean nearest neighbours (the paper's O);
    otherwise it is a (1+eps)-approximate oracle (the paper's O~). Exact
    means exact in float64 up to the rounding of a squared distance: with
    ``e_k`` the k-th returned squared distance, every point ``x`` not
    returned has

    .. math:: \\|x - c\\|^2 \\ge e_k\\,(1 - \\epsilon_d),\\qquad
              \\epsilon_d = (d + 8)\\, 2^{-52}

    (:func:`exact_sq_rtol`), as float64 distances formed from explicit
    differences guarantee. The recentring algorithms build their
    rounding-safe certificates on this (:mod:`hypann.search.certify`). An
    oracle that chooses in lower precision (faiss ``"Flat"``) must widen its
    candidate list until the float64 re-rank provably holds the answer.
``counts_evaluations``
    ``knn`` reports, per query, how many points it examined (the paper's
    "samples"); otherwise hypann counts the candidates it is handed.
``query_params``
    names of per-call settings ``_knn`` accepts (e.g. hnswlib's ``ef``),
    passed as ``knn(queries, k, **params)`` and by
    ``HyperbolicIndex.search(..., oracle_params={...})``.
``supports_budget``
    ``_knn`` accepts ``budget`` (per-query cap on examined points, each
    ``>= 1``) and stops there, so a sample budget is a hard limit rather than
    checked between oracle calls.
``supports_radius``
    :meth:`~EuclideanOracle.radius` returns every indexed point within a
    Euclidean radius (``_radius`` implemented); otherwise it raises
    ``NotImplementedError``.
``supports_decision``
    ``_near`` answers the (1+eps, R) near-neighbour decision query faster
    than a 1-NN query (:meth:`~EuclideanOracle.near`; the paper's DO~);
    otherwise ``near`` asks ``knn(q, 1)``, which is as valid.
``thread_safe``
    ``knn`` (and ``radius``, ``near``) may be called on one built oracle
    from several Python threads at once and give the answers of sequential
    calls.
``uses_conformal``
    :meth:`~EuclideanOracle.build_with_conformal` keeps the conformal
    factors ``1-|x|^2`` the index stored (the hyperbolic kd-tree);
    otherwise it ignores them and builds as :meth:`~EuclideanOracle.build`.
``supports_tracking``
    ``knn_tracking(centers, k, queries, q_conformal, budget)`` answers the
    Euclidean k-NN of ``centers`` and also hands back the hyperbolic best of
    every point it examined (the paper's modified kd-tree); the recentring
    algorithms use it instead of ``knn`` when no per-call settings are given.
``adapts_per_shell``
    :meth:`~EuclideanOracle.for_shell` returns a copy tuned to one shell of
    a shell partition (LSH's bucket width); otherwise the shell algorithms
    use a plain copy for every shell.

Settings. ``build_settings`` and ``query_settings`` (tuples of
:class:`hypann._params.Param`) declare the constructor keywords and the
per-call keywords of ``knn`` once; :meth:`EuclideanOracle.build` checks the
constructor settings against them, :meth:`EuclideanOracle.from_spec_args`
parses spec strings with them and :meth:`EuclideanOracle.get_params` lists
them. A class that declares no ``build_settings`` gets an unchecked
declaration read from its ``__init__`` signature.

Budgets. :meth:`EuclideanOracle.knn` makes a ``budget`` a hard limit on the
samples an algorithm charges for the call, whatever the oracle: with
``supports_budget`` the oracle stops after ``budget[i]`` examined points;
an oracle that neither supports budgets nor counts its evaluations is asked
for ``min(k, max(budget))`` neighbours and row ``i`` keeps only its
``budget[i]`` nearest (the samples charged are the candidates handed back).
Only an oracle that counts its evaluations but cannot stop early (none of
the built-in ones) may overshoot, by at most the evaluations of that one
call.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from hypann import _params
from hypann._validation import check_positive_int, reject_unknown

#: Unit roundoff of float64.
UNIT_ROUNDOFF = 2.0**-53


def exact_sq_rtol(dim):
    """Relative rounding slack ``(dim + 8) 2^-52`` of an exact oracle's squared distances.

    A squared distance summed from ``dim`` explicit float64 differences has
    a relative error below ``(dim + 2) 2^-53``; a square root and a square
    on the way (scipy returns distances) add a few ``2^-53``. The bound
    ``(dim + 8) 2^-52`` covers both the returned value and the oracle's
    internal ranking, with a factor of two to spare.
    """
    return (float(dim) + 8.0) * 2.0 * UNIT_ROUNDOFF


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
    ``__init__`` (no work), check them in :meth:`_check_settings` (called by
    :meth:`build`), and implement :meth:`_build` and :meth:`_knn`.
    ``points`` handed to ``_build`` are float64 C-contiguous (n, d) and owned
    by the oracle (a copy of the caller's array unless ``build(copy=False)``);
    queries likewise. Optional: :meth:`_near` for a faster (1+eps, R)
    decision query (``_near(queries, radius, eps)``, plus ``budget=`` with
    ``supports_budget``).
    """

    name = "base"
    # capabilities (module docstring, "Capabilities")
    exact = False
    counts_evaluations = False
    supports_budget = False
    supports_radius = False
    supports_decision = False
    thread_safe = False
    uses_conformal = False
    supports_tracking = False
    adapts_per_shell = False
    #: the constructor's settings, declared once (module docstring, "Settings")
    build_settings: tuple = ()
    #: the per-call settings of ``knn``
    query_settings: tuple = ()
    #: names (and deprecated aliases) ``knn`` accepts, derived from ``query_settings``
    query_params: tuple = ()

    #: names of the boolean capability flags, in the order of the module docstring
    CAPABILITIES = ("exact", "counts_evaluations", "supports_budget", "supports_radius", "supports_decision",
                    "thread_safe", "uses_conformal", "supports_tracking", "adapts_per_shell")

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        if "build_settings" not in vars(cls) and "__init__" in vars(cls):
            cls.build_settings = _params.from_signature(cls.__init__)  # a third-party oracle's keywords, unchecked
        cls.query_params = _params.accepted_names(cls.query_settings)
        if "_near" in vars(cls) and "supports_decision" not in vars(cls):
            warnings.warn(
                f"{cls.__qualname__} defines _near without declaring supports_decision = True; hypann "
                f"treats it as declared for now, but set the class attribute (it will be required)",
                DeprecationWarning, stacklevel=2,
            )
            cls.supports_decision = True
        for flag, method in (("supports_radius", "_radius"), ("supports_decision", "_near"),
                             ("supports_tracking", "knn_tracking")):
            if getattr(cls, flag) and not callable(getattr(cls, method, None)):
                raise TypeError(f"{cls.__qualname__} declares {flag} = True but does not implement {method}")

    def capabilities(self) -> dict:
        """The capability flags of this oracle, ``{name: bool}`` (see the module docstring)."""
        return {name: bool(getattr(self, name)) for name in self.CAPABILITIES}

    def build(self, points, *, copy=True):
        """Index ``points`` (n, d); returns self.

        Oracles that re-rank in float64 keep the points; ``copy=True`` (the
        default) makes that a private copy, so that changing the caller's
        array later cannot change the answers. ``copy=False`` is for callers
        handing over an array they own and never modify (the search
        algorithms pass the index's own points).
        """
        self._check_settings()
        if copy:
            points = np.array(points, dtype=np.float64, order="C")
        else:
            points = np.ascontiguousarray(points, dtype=np.float64)
        if points.ndim != 2:
            raise ValueError(f"points must be a 2-D array (n, d), got shape {points.shape}")
        self.n_points_, self.dim_ = points.shape
        self._build(points)
        return self

    def build_with_conformal(self, points, conformal):
        """Index ``points`` handed over by a search algorithm with their stored
        conformal factors ``1-|x|^2``; returns self.

        Oracles with ``uses_conformal`` keep the factors; the others ignore
        them and index ``points`` without a copy (the algorithm owns them).
        """
        return self.build(points, copy=False)

    def for_shell(self, shell_index: int, width: float):
        """An unbuilt oracle for shell ``shell_index`` of a partition of multiplicative width ``width``.

        Oracles with ``adapts_per_shell`` tune a copy to the shell; the
        default is an unbuilt copy with the same settings.
        """
        return type(self)(**self.get_params())

    def get_params(self) -> dict:
        """The constructor settings, ``{name: value}`` in the order of ``build_settings``."""
        return {p.name: getattr(self, p.name) for p in self.build_settings}

    @classmethod
    def from_spec_args(cls, args: str, *, random_state=None, name=None):
        """An unbuilt oracle from the part of a spec string after ``name:``.

        The default syntax is ``key=value`` items separated by commas, each
        key a declared build setting and each value parsed and checked by its
        declaration. ``random_state`` (an int or None) is given to an oracle
        that declares ``random_state`` when the spec does not set it. ``name``
        is the registered name the spec used (for messages; default
        ``cls.name``). An oracle with its own syntax (faiss: a factory
        string) overrides this.
        """
        from hypann.oracles.spec import parse_kwargs

        name = cls.name if name is None else name
        spec = name + (":" + args if args else "")
        declared = _params.by_name(cls.build_settings)
        kwargs = parse_kwargs(args, where=f"oracle spec {spec!r}", declared=declared)
        unknown = sorted(set(kwargs) - set(declared))
        if unknown:
            raise ValueError(
                f"bad settings for oracle {name!r} in spec {spec!r}: unknown option(s) {unknown}; "
                f"allowed: {list(declared) or 'none'}"
            )
        kwargs = {key: declared[key].check(value) for key, value in kwargs.items()}
        if random_state is not None and "random_state" not in kwargs and "random_state" in declared:
            kwargs["random_state"] = random_state
        try:
            return cls(**kwargs)
        except TypeError as exc:
            raise ValueError(f"bad settings for oracle {name!r} in spec {spec!r}: {exc}") from None

    def _check_settings(self):
        """Check every declared build setting (ValueError/TypeError naming it).

        Subclasses with a rule across settings extend this (call ``super()``).
        """
        for p in self.build_settings:
            p.check(getattr(self, p.name))

    def knn(self, queries, k, budget=None, **params) -> EuclideanNeighbors:
        """The ``k`` Euclidean nearest indexed points of each query row.

        ``budget`` (int or (m,) ints, each ``>= 1``) is the number of samples
        the caller may still spend on each row (see "Budgets" in the module
        docstring): oracles with ``supports_budget`` stop after that many
        examined points; oracles that do not count evaluations return at
        most ``budget[i]`` neighbours for row ``i`` (the rest padded with
        ``-1`` / ``inf``); the nearest ones, so the prefix of an exact
        answer stays exact. ``params`` are per-call settings named in
        ``query_params``.
        """
        if params:
            reject_unknown(params, self.query_params, f"oracle {self.name!r}")
            params = _params.resolve_aliases(self.query_settings, params, f"oracle {self.name!r}")
            params = _params.check_values(self.query_settings, params)
        k = check_positive_int(k, "k")
        queries = np.ascontiguousarray(queries, dtype=np.float64)
        m = queries.shape[0]
        k_eff = min(int(k), self.n_points_)
        if budget is not None:
            budget = np.ascontiguousarray(np.broadcast_to(np.asarray(budget, dtype=np.int64), (m,)))
        if budget is not None and self.supports_budget:
            res = self._knn(queries, k_eff, budget=budget, **params)
        elif budget is not None and not self.counts_evaluations and m and k_eff:
            # k-limited request: the samples charged are the neighbours handed back
            k_req = int(min(k_eff, max(1, budget.max())))
            res = self._knn(queries, k_req, **params)
            cut = np.arange(k_req)[None, :] >= budget[:, None]
            res = EuclideanNeighbors(np.where(cut, np.inf, res.sq_dist), np.where(cut, -1, res.indices),
                                     res.evaluations)
            k_eff = k_req
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

    def near(self, queries, radius, eps=0.0, budget=None):
        """(1+eps, R) near-neighbour decision oracle (the paper's DO~).

        For each query, returns the id of a point within ``(1+eps) * radius``
        when some point lies within ``radius`` (a certificate), else -1. The
        default asks ``knn(q, 1, budget=budget)``, which is a valid decision
        oracle for any (1+eps)-approximate ``knn``. ``budget`` is as in
        :meth:`knn`: with it the call charges at most ``budget[i]`` samples.

        Returns
        -------
        certificate : ndarray of shape (m,), int64
        evaluations : ndarray of shape (m,) or None
        """
        queries = np.ascontiguousarray(queries, dtype=np.float64)
        radius = np.broadcast_to(np.asarray(radius, dtype=np.float64), (queries.shape[0],))
        if self.supports_decision and budget is None:
            return self._near(queries, radius, float(eps))
        if self.supports_decision and self.supports_budget:
            budget = np.ascontiguousarray(np.broadcast_to(np.asarray(budget, dtype=np.int64), (queries.shape[0],)))
            return self._near(queries, radius, float(eps), budget=budget)
        res = self.knn(queries, 1, budget=budget)
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
