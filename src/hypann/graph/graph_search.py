"""``algorithm="graph"``: hypann's graph index (k-NN graph + partition-tree entry points), behind the index API.

The recommended approximate search: NN-descent k-NN graph with reverse edges,
searched best-first from the leaf of an Apollonian partition tree (see
:mod:`hypann.graph.knn_graph`). The search list size ``ef`` is the one
query-time setting; its default is calibrated at build time so that
recall@10 reaches ``target_recall`` on a leave-one-out sample. ``L`` is
accepted as a deprecated alias of ``ef``. Builds are deterministic for a
``random_state`` whatever the number of numba threads.
"""

from __future__ import annotations

from hypann.graph.knn_graph import HyperbolicGraphIndex
from hypann.result import SearchStats
from hypann.search.base import SearchAlgorithm


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
    """

    name = "graph"
    uses_oracle = False
    query_params = ("ef", "L")

    def __init__(self, *, n_neighbors=24, max_degree=40, ef=None, target_recall=0.98, leaf_size=32, n_trees=4,
                 max_rounds=16):
        self.n_neighbors = n_neighbors
        self.max_degree = max_degree
        self.ef = ef
        self.target_recall = target_recall
        self.leaf_size = leaf_size
        self.n_trees = n_trees
        self.max_rounds = max_rounds

    def _build(self, points, conformal, oracle):
        seed = int(self.rng_.integers(2**31))
        self.graph_ = HyperbolicGraphIndex(**self.settings(), random_state=seed)
        self.graph_.build(points, conformal)

    def search(self, queries, q_conformal, k, *, budget=None, ef=None, L=None):
        ids, deltas, samples = self.graph_.search(queries, q_conformal, k, ef=ef, budget=budget, L=L)
        stats = SearchStats.zeros(queries.shape[0])
        stats.samples[:] = samples
        stats.rounds[:] = 1
        return ids, deltas, stats

    def get_state(self):
        return self.graph_.to_arrays()

    def restore(self, points, conformal, state, *, oracle=None, random_state=None):
        self.points_, self.conformal_ = points, conformal
        self.graph_ = HyperbolicGraphIndex.from_arrays(state)
        return self

    @property
    def nbytes(self):
        return int(self.graph_.nbytes)
