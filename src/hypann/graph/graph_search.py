"""``algorithm="graph"``: hypann's graph index (k-NN graph + partition-tree entry points), behind the index API.

The recommended approximate search: NN-descent k-NN graph with reverse edges,
searched best-first from the leaf of an Apollonian partition tree (see
:mod:`hypann.graph.knn_graph`). The search list size ``ef`` is the one
query-time setting; its default is calibrated at build time so that
recall@10 reaches ``target_recall`` on a leave-one-out sample. ``L`` is
accepted as a deprecated alias of ``ef``. Builds are deterministic for a
``random_state`` whatever the number of numba threads.

``exact=True`` makes the search exact: the graph's answer seeds a hyperbolic
kd-tree search (:meth:`hypann.search.hyperbolic_kdtree.HyperbolicKDTree.search_exact`
with ``seed_ids``), which starts with the graph's k-th ``delta`` as its
pruning bound and then examines every tree node whose lower bound

.. math::

    \\frac{\\operatorname{mindist}(q, B)^2}{(1-\\|q\\|^2)\\,\\max_{x \\in B}(1-\\|x\\|^2)}

is below the current k-th best, so the answer equals float64 brute force
whatever the graph returned. The graph references the index's points (no
copy, in memory or in the file); the tree keeps its own copy in tree order,
as ``"hkdtree"`` does. With ``storage="float32"`` the points are float32 and
every distance is computed in float64 from them, so ``exact=True`` is exact
for the stored points, as the kd-tree is.
Measured (``benchmarks/graph_exact.py``): the best-first kd-tree already
finds a near-final k-th distance after a few leaves, so the seed saves only
0-3% of the tree's samples and ``exact=True`` costs about the graph search
plus the plain kd-tree search.
"""

from __future__ import annotations

import numpy as np

from hypann import _validation as V
from hypann.graph.knn_graph import HyperbolicGraphIndex
from hypann.result import SearchStats
from hypann.search.base import SearchAlgorithm
from hypann.search.hyperbolic_kdtree import HyperbolicKDTree

#: Prefix of the kd-tree's arrays in the saved state of ``exact=True``.
_TREE_PREFIX = "tree."


class GraphSearch(SearchAlgorithm):
    """Hyperbolic k-NN graph search (NN-descent graph, tree entry points).

    Parameters
    ----------
    n_neighbors : int, default 24
        Neighbours per point in the k-NN graph.
    max_degree : int, default 40
        Out-degree cap of the search graph (k-NN row plus reverse edges).
    ef : int, optional
        Default search list size; ``None`` calibrates it at build time.
    target_recall : float, default 0.98
        Leave-one-out recall@10 the calibrated ``ef`` reaches.
    leaf_size : int, default 32
    n_trees : int, default 4
    max_rounds : int, default 16
    exact : bool, default False
        Re-check the graph's answer with a hyperbolic kd-tree seeded by it
        (see the module docstring): exact k-NN (and exact range search), at
        about the cost of the graph plus the kd-tree search.
    tree_leaf_size : int, default 16
        Leaf size of that kd-tree (``exact=True`` only).
    """

    name = "graph"
    uses_oracle = False
    query_params = ("ef", "L")

    def __init__(self, *, n_neighbors=24, max_degree=40, ef=None, target_recall=0.98, leaf_size=32, n_trees=4,
                 max_rounds=16, exact=False, tree_leaf_size=16):
        self.n_neighbors = n_neighbors
        self.max_degree = max_degree
        self.ef = ef
        self.target_recall = target_recall
        self.leaf_size = leaf_size
        self.n_trees = n_trees
        self.max_rounds = max_rounds
        self.exact = exact
        self.tree_leaf_size = tree_leaf_size

    def _check_settings(self):
        V.check_bool(self.exact, "exact")
        V.check_positive_int(self.tree_leaf_size, "tree_leaf_size")

    def _graph_settings(self):
        return {k: v for k, v in self.settings().items() if k not in ("exact", "tree_leaf_size")}

    def _build(self, points, conformal, oracle):
        seed = int(self.rng_.integers(2**31))
        self.graph_ = HyperbolicGraphIndex(**self._graph_settings(), random_state=seed)
        self.graph_.build(points, conformal)
        if self.exact:
            self.tree_ = HyperbolicKDTree(leaf_size=self.tree_leaf_size).build(points, conformal)

    @property
    def supports_radius(self):
        """Range search is offered (exactly, by the kd-tree) with ``exact=True``."""
        return bool(self.exact)

    def search_radius(self, queries, q_conformal, delta_limits):
        if not self.exact:
            return super().search_radius(queries, q_conformal, delta_limits)
        return self.tree_.search_radius(queries, q_conformal, delta_limits)

    def search(self, queries, q_conformal, k, *, budget=None, ef=None, L=None):
        ids, deltas, samples = self.graph_.search(queries, q_conformal, k, ef=ef, budget=budget, L=L)
        stats = SearchStats.zeros(queries.shape[0])
        stats.rounds[:] = 1
        if self.exact:
            # the tree gets what the graph left of the budget (a hard limit overall)
            left = None if budget is None else np.maximum(budget - samples, 0)
            ids, deltas, tree_samples = self.tree_.search_exact(queries, q_conformal, k, budget=left, seed_ids=ids)
            samples = samples + tree_samples
            stats.rounds[:] = 2
        stats.samples[:] = samples
        return ids, deltas, stats

    def get_state(self):
        # the points are the index's own: saved once by the index, shared on load
        state = self.graph_.to_arrays(include_points=False)
        if self.exact:
            state.update({_TREE_PREFIX + name: arr for name, arr in self.tree_.to_arrays().items()})
        return state

    def restore(self, points, conformal, state, *, oracle=None, random_state=None):
        self._check_settings()
        self.points_, self.conformal_ = points, conformal
        state = dict(state)
        tree_state = {name[len(_TREE_PREFIX):]: state.pop(name) for name in list(state)
                      if name.startswith(_TREE_PREFIX)}
        if self.exact:
            if not tree_state:
                raise ValueError("graph state with exact=True: the kd-tree arrays ('tree.*') are missing")
            if "points" in state or "conformal" in state:
                raise ValueError("graph state with exact=True must not hold its own 'points'/'conformal'")
            self.tree_ = HyperbolicKDTree.from_arrays(tree_state, points=points, conformal=conformal)
            if self.tree_.leaf_size != self.tree_leaf_size:
                raise ValueError(
                    f"HyperbolicKDTree state 'leaf_size': the stored tree has leaf_size={self.tree_.leaf_size}, "
                    f"the settings say tree_leaf_size={self.tree_leaf_size!r}"
                )
        elif tree_state:
            raise ValueError(f"graph state with exact=False holds kd-tree arrays {sorted(tree_state)}")
        if "points" in state or "conformal" in state:  # files written before the graph shared the index's points
            for name, mine in (("points", points), ("conformal", conformal)):
                theirs = np.asarray(state.pop(name, None))
                if theirs.shape != np.shape(mine) or not np.array_equal(theirs, mine):
                    raise ValueError(f"graph state '{name}' is not the index's {name}: the file holds two "
                                     "different copies")
        self.graph_ = HyperbolicGraphIndex.from_arrays(state, points=points, conformal=conformal)
        if self.graph_.n_points_ != points.shape[0]:
            raise ValueError(f"graph state holds {self.graph_.n_points_} points, the index {points.shape[0]}")
        return self

    @property
    def nbytes(self):
        """Graph (and kd-tree, with ``exact=True``) bytes, not counting the index's points."""
        return int(self.graph_.nbytes + (self.tree_.nbytes if self.exact else 0))
