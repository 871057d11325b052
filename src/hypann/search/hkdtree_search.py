"""``algorithm="hkdtree"``: exact k-NN in one kd-tree walk with hyperbolic pruning.

Beyond the paper. A kd-tree node is skipped when a lower bound of ``delta``
over it cannot beat the current k-th best:

.. math::

    \\delta(q, x) \\ge \\frac{\\operatorname{mindist}(q, \\text{box})^2}
    {(1-\\|q\\|^2)\\,\\min_{x \\in \\text{node}}(1-\\|x\\|^2)} ,

so no oracle round trips are needed (see
:mod:`hypann.search.hyperbolic_kdtree`). With a ``budget`` the walk stops
after that many examined points.
"""

from __future__ import annotations

from hypann.result import SearchStats
from hypann.search.base import SearchAlgorithm
from hypann.search.hyperbolic_kdtree import HyperbolicKDTree


class HyperbolicKDTreeSearch(SearchAlgorithm):
    """Exact hyperbolic k-NN by a kd-tree with hyperbolic pruning.

    Parameters
    ----------
    leaf_size : int, default 16
    """

    name = "hkdtree"
    uses_oracle = False

    def __init__(self, *, leaf_size: int = 16):
        self.leaf_size = leaf_size

    def _build(self, points, conformal, oracle):
        self.tree_ = HyperbolicKDTree(leaf_size=self.leaf_size).build(points, conformal)

    #: ``search`` takes ``removed=`` (a flag per built row) and skips those points
    supports_removed = True

    def search(self, queries, q_conformal, k, *, budget=None, removed=None):
        ids, deltas, samples = self.tree_.search_exact(queries, q_conformal, k, budget=budget, removed=removed)
        stats = SearchStats.zeros(queries.shape[0])
        stats.samples[:] = samples
        stats.rounds[:] = 1
        return ids, deltas, stats

    supports_radius = True

    def search_radius(self, queries, q_conformal, delta_limits, *, removed=None):
        return self.tree_.search_radius(queries, q_conformal, delta_limits, removed=removed)

    def get_state(self):
        return self.tree_.to_arrays()

    def restore(self, points, conformal, state, *, oracle=None, random_state=None):
        self.points_, self.conformal_ = points, conformal
        self.tree_ = HyperbolicKDTree.from_arrays(state)
        return self

    @property
    def nbytes(self):
        return int(self.tree_.nbytes)
