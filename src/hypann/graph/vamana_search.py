"""``algorithm="vamana"``: the DiskANN graph with the Poincare distance, behind the index API.

A baseline (Wu & Charikar compare against it): no guarantee, restarts from
random points until a sample ``budget`` is used (the paper's protocol). The
query-time list size ``ef`` can be swept per call (``L``, its old name, is a
deprecated alias; the build setting ``L`` keeps DiskANN's name).

Budget: a hard limit with no allowance; evaluation stops at exactly
``budget`` distance evaluations (``samples <= budget``), possibly in the
middle of a neighbour list. Restart points are drawn from ``random_state``
(default 0) and the query's row in the batch, so a call is a deterministic
function of its arguments.
"""

from __future__ import annotations

from hypann._params import Param
from hypann.graph.vamana import VamanaIndex
from hypann.result import SearchStats
from hypann.search.base import SearchAlgorithm


class VamanaSearch(SearchAlgorithm):
    """Vamana graph search (Subramanya et al. 2019) ranked by hyperbolic distance.

    Parameters
    ----------
    R : int, default 10
        Out-degree (paper: 10 at 10-D, 20 at 100-D).
    L : int, default 10
        Build list size (DiskANN's ``L``) and default search list size
        ``ef`` (paper: 10 / 40).
    alpha : float, default 1.5
        RobustPrune slack on the hyperbolic distance, ``>= 1``.
    passes : int, default 2

    Notes
    -----
    The initial graph, the pass orders and the medoid sample are drawn from
    a seed taken from the index's ``random_state``; the restart points of a
    budgeted search from the query-time ``random_state`` or, by default,
    from that same build seed (stored with the graph, so a loaded index
    restarts identically).
    """

    name = "vamana"
    first_use_kernels = VamanaIndex.first_use_kernels
    uses_oracle = False
    build_settings = (
        Param("R", "int", 10, "out-degree (paper: 10 at 10-D, 20 at 100-D)", low=1),
        Param("L", "int", 10, "build list size (DiskANN's L) and default search list size ef (paper: 10 / 40)",
              low=1),
        Param("alpha", "float", 1.5, "RobustPrune slack on the hyperbolic distance", low=1.0),
        Param("passes", "int", 2, "build passes over the points", low=1),
    )
    query_settings = (
        Param("ef", "int", None, "search list size of this call (default: the build's L)", low=1, none_ok=True,
              aliases=("L",)),
        Param("random_state", "seed", None, "seed of the restart points of a budgeted search (default: the "
              "build's seed)", none_ok=True),
    )

    def __init__(self, *, R: int = 10, L: int = 10, alpha: float = 1.5, passes: int = 2):
        self.R, self.L, self.alpha, self.passes = R, L, alpha, passes

    def _build(self, points, conformal, oracle):
        seed = int(self.rng_.integers(2**31))
        self.graph_ = VamanaIndex(R=self.R, L=self.L, alpha=self.alpha, passes=self.passes, random_state=seed)
        self.graph_.build(points, conformal)

    def search(self, queries, q_conformal, k, *, budget=None, ef=None, random_state=None):
        if random_state is None:
            random_state = self.graph_.random_state
        ids, deltas, samples = self.graph_.search(queries, q_conformal, k, ef=ef, budget=budget,
                                                  random_state=random_state)
        stats = SearchStats.zeros(queries.shape[0])
        stats.samples[:] = samples
        stats.rounds[:] = 1
        return ids, deltas, stats

    def get_state(self):
        # the points are the index's own: saved once by the index, handed back on load
        return self.graph_.to_arrays(include_points=False)

    def restore(self, points, conformal, state, *, oracle=None, random_state=None):
        """Take a stored graph after checking it (:meth:`VamanaIndex.validate_state`); it refers to ``points``."""
        self._check_settings()
        graph = VamanaIndex.from_arrays(state, points=points, conformal=conformal)
        for name in ("R", "L", "alpha", "passes"):
            if getattr(graph, name) != getattr(self, name):
                raise ValueError(
                    f"VamanaIndex state {'alpha' if name == 'alpha' else 'settings'!r}: the stored graph has "
                    f"{name}={getattr(graph, name)!r}, the settings say {name}={getattr(self, name)!r}"
                )
        self.points_, self.conformal_ = points, conformal
        self.graph_ = graph
        return self

    @property
    def nbytes(self):
        return int(self.graph_.nbytes)
