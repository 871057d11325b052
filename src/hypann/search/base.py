"""What every search algorithm offers :class:`hypann.HyperbolicIndex`.

An algorithm is configured with keyword settings (``__init__`` stores them),
built once on validated unit-curvature Poincare points and their conformal
factors, and answers batches of queries with ``(ids, deltas, stats)`` where
``deltas`` is the surrogate ``|q-x|^2/((1-|q|^2)(1-|x|^2))``; the index turns
them into distances in one place.
"""

from __future__ import annotations

import numpy as np

from hypann.oracles.registry import make_oracle


class SearchAlgorithm:
    """Base class. Subclasses set ``name``, ``uses_oracle``, ``query_params``."""

    name = "base"
    uses_oracle = True
    #: names of the extra keyword arguments ``search`` accepts
    query_params: tuple = ()

    def build(self, points, conformal, *, oracle="kdtree", random_state=None):
        """Index ``points`` (n, d) with stored ``conformal`` (n,); returns self."""
        self.points_ = points
        self.conformal_ = conformal
        self.rng_ = np.random.default_rng(random_state)
        self.oracle_spec_ = oracle
        self._build(points, conformal, oracle)
        return self

    def _make_oracle(self, oracle):
        return make_oracle(oracle) if isinstance(oracle, str) else oracle

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
        """Recreate a built algorithm from :meth:`get_state` output (default: rebuild)."""
        return self.build(points, conformal, oracle=oracle, random_state=random_state)

    def settings(self) -> dict:
        """Constructor settings (for saving and ``repr``)."""
        return {k: v for k, v in vars(self).items() if not k.endswith("_") and not k.startswith("_")}

    @property
    def nbytes(self) -> int:
        return 0


def sort_ragged(offsets, ids, deltas):
    """Sort each query's slice of a ragged result by ``(delta, id)``."""
    owner = np.repeat(np.arange(offsets.shape[0] - 1), np.diff(offsets))
    order = np.lexsort((ids, deltas, owner))
    return offsets, ids[order], deltas[order]
