"""What every search algorithm offers :class:`hypann.HyperbolicIndex`.

An algorithm is configured with keyword settings (``__init__`` stores them),
built once on validated unit-curvature Poincare points and their conformal
factors, and answers batches of queries with ``(ids, deltas, stats)`` where
``deltas`` is the surrogate ``|q-x|^2/((1-|q|^2)(1-|x|^2))``; the index turns
them into distances in one place.
"""

from __future__ import annotations

import numpy as np

from hypann import _validation as V
from hypann.oracles.registry import make_oracle


class SearchAlgorithm:
    """Base class. Subclasses set ``name``, ``uses_oracle``, ``query_params``.

    Subclasses check their constructor settings in :meth:`_check_settings`
    (called by :meth:`build` and :meth:`restore`) and their query settings in
    :meth:`check_query_params`.
    """

    name = "base"
    uses_oracle = True
    #: names of the extra keyword arguments ``search`` accepts
    query_params: tuple = ()
    #: True when the algorithm keeps the only copy of the points (then it offers
    #: ``points_shape()`` and ``points_in_input_order()``, and
    #: :class:`hypann.HyperbolicIndex` keeps none of its own)
    owns_points = False

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

    def _check_settings(self):
        """Raise ValueError/TypeError for a bad constructor setting (none by default)."""

    def check_query_params(self, **params) -> dict:
        """Validated per-call settings (names already checked against ``query_params``)."""
        return params

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
        """Constructor settings (for saving and ``repr``)."""
        return {k: v for k, v in vars(self).items() if not k.endswith("_") and not k.startswith("_")}

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
