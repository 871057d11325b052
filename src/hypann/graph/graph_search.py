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
whatever the graph returned. There is one copy of the points, in memory and
in the file: without ``exact`` the graph takes the index's over in the leaf
order of its entry tree (``keep_order``; a search then reads nearby memory);
with ``exact=True`` the kd-tree takes them over in its order (as ``"hkdtree"``
does) and the graph is built over the tree's copy, its ids mapped back to
input rows by the tree's permutation. With ``storage="float32"`` the points are float32 and
every distance is computed in float64 from them, so ``exact=True`` is exact
for the stored points, as the kd-tree is.
Measured (``benchmarks/graph_exact.py``): the best-first kd-tree already
finds a near-final k-th distance after a few leaves, so the seed saves only
0-3% of the tree's samples and ``exact=True`` costs about the graph search
plus the plain kd-tree search.
"""

from __future__ import annotations

import numpy as np

from hypann._params import Param
from hypann._validation import state_flag
from hypann.graph.knn_graph import (MAX_ROUNDS, PRUNE_EVALUATIONS, PRUNE_SETTINGS, SCAN_FRACTION, HyperbolicGraphIndex,
                                   rows_to_ids)
from hypann.result import SearchStats
from hypann.search.base import SearchAlgorithm
from hypann.search.hyperbolic_kdtree import LEAF_SIZE_RULE, HyperbolicKDTree, leaf_size_for

#: Prefix of the kd-tree's arrays in the saved state of ``exact=True``.
_TREE_PREFIX = "tree."
#: State flag of ``exact=True``: the graph is over the kd-tree's copy of the points (tree positions as ids).
_TREE_ORDER = "graph_in_tree_order"


def _require_one_copy(mine, theirs, how):
    """The graph state's ``(points, conformal)`` ``theirs`` must equal the index's ``mine`` (``how``: in
    which order they were compared), or the file holds two different copies."""
    for name, a, b in zip(("points", "conformal"), mine, theirs):
        b = np.asarray(b)
        if b.shape != np.shape(a) or not np.array_equal(b, a):
            raise ValueError(f"graph state '{name}' is not the index's {name}{how}: the file holds two different "
                             "copies")


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
        Leave-one-out recall@10 the calibrated ``ef`` reaches, on a uniform
        sample of the points and on a sample of the boundary tenth.
    leaf_size : int, default 32
    n_trees : int, default 4
    max_rounds : int, default :data:`~hypann.graph.knn_graph.MAX_ROUNDS` (8)
    prune : {"auto", "always", "never"}, default "auto"
        Prune the graph by the relative-neighbourhood rule; ``"auto"`` keeps
        it pruned where that reaches ``target_recall`` with at most
        :data:`~hypann.graph.knn_graph.PRUNE_EVALUATIONS` of the evaluations
        (:class:`~hypann.graph.knn_graph.HyperbolicGraphIndex`).
    exact : bool, default False
        Re-check the graph's answer with a hyperbolic kd-tree seeded by it
        (see the module docstring): exact k-NN (and exact range search), at
        about the cost of the graph plus the kd-tree search.
    tree_leaf_size : int or None, default None
        Leaf size of that kd-tree (``exact=True`` only); ``None``:
        :func:`~hypann.search.hyperbolic_kdtree.default_leaf_size` of the
        dimension (16 below 16 dimensions, 48 from 16 on).
    """

    name = "graph"
    first_use_kernels = HyperbolicGraphIndex.first_use_kernels
    uses_oracle = False
    serial_small_batches = True
    build_settings = (
        Param("n_neighbors", "int", 24, "neighbours per point in the k-NN graph", low=1),
        Param("max_degree", "int", 40, "out-degree cap of the search graph (>= n_neighbors)", low=1),
        Param("ef", "int", None, "default search list size (default: calibrated at build time)", low=1,
              none_ok=True),
        Param("target_recall", "float", 0.98, "leave-one-out recall@10 the calibrated ef reaches, on a uniform "
              "sample and on the boundary tenth, the latter within 0.01 of the former (when no ef does: the "
              "smallest within 0.005 of the best, and a warning)", low=0.0, high=1.0, low_open=True),
        Param("leaf_size", "int", 32, "points per leaf of the partition trees", low=1),
        Param("n_trees", "int", 4, "partition trees (entry points)", low=1),
        Param("max_rounds", "int", MAX_ROUNDS, "NN-descent rounds at most", low=1),
        Param("prune", "str", "auto", "prune the graph by the relative-neighbourhood rule (auto: where that reaches "
              f"target_recall with at most {PRUNE_EVALUATIONS:g} of the evaluations; not with a given ef; never: "
              "every edge, for the last fraction of a percent of recall)", choices=PRUNE_SETTINGS),
        Param("exact", "bool", False, "re-check the graph's answer with a hyperbolic kd-tree (exact k-NN)"),
        Param("tree_leaf_size", "int", None, f"leaf size of that kd-tree (exact=True only; default: {LEAF_SIZE_RULE})",
              low=1, none_ok=True),
    )
    query_settings = (
        Param("ef", "int", None, "search list size of this call (default: the build's ef)", low=1, none_ok=True,
              aliases=("L",)),
    )

    def __init__(self, *, n_neighbors=24, max_degree=40, ef=None, target_recall=0.98, leaf_size=32, n_trees=4,
                 max_rounds=MAX_ROUNDS, prune="auto", exact=False, tree_leaf_size=None):
        self.n_neighbors = n_neighbors
        self.max_degree = max_degree
        self.ef = ef
        self.target_recall = target_recall
        self.leaf_size = leaf_size
        self.n_trees = n_trees
        self.max_rounds = max_rounds
        self.prune = prune
        self.exact = exact
        self.tree_leaf_size = tree_leaf_size

    def _check_settings(self):
        super()._check_settings()
        if self.max_degree < self.n_neighbors:
            raise ValueError(f"max_degree must be >= n_neighbors ({self.n_neighbors}), "
                             f"got max_degree={self.max_degree}")

    def _graph_settings(self):
        return {k: v for k, v in self.settings().items() if k not in ("exact", "tree_leaf_size")}

    @property
    def owns_points(self):
        """Whether the structure holds the only copy of the points, in an order of its own.

        With ``exact=True`` the kd-tree holds them (in tree order) and the graph
        is built over that copy: its ids are tree positions, mapped back by the
        tree's ``indices_``. Otherwise the graph holds them in its entry
        tree's leaf order (``in_leaf_order_``), so that a search reads points
        that lie near each other in memory. Files written before either keep
        the points in input order (the index's copy).
        """
        if self.exact:
            return bool(getattr(self, "graph_in_tree_order_", False))
        return bool(getattr(getattr(self, "graph_", None), "in_leaf_order_", False))

    def points_shape(self):
        """``(n, d)`` of the indexed points."""
        if not self.owns_points:
            return self.points_.shape
        return (self.tree_.n_points_, self.tree_.dim_) if self.exact else self.graph_.points_.shape

    def points_in_input_order(self):
        """``(points, conformal)`` in input row order (new arrays gathered from the kd-tree or the graph)."""
        return (self.tree_ if self.exact else self.graph_).points_in_input_order()

    def conformal_in_input_order(self):
        """The ``conformal`` of :meth:`points_in_input_order` alone."""
        return (self.tree_ if self.exact else self.graph_).conformal_in_input_order()

    def _build(self, points, conformal, oracle):
        seed = int(self.rng_.integers(2**31))
        self.graph_ = HyperbolicGraphIndex(**self._graph_settings(), random_state=seed)
        # the index hands over arrays it owns: they are reordered in place and kept (one copy)
        if self.exact:
            # the tree takes them over in its order and the graph refers to that single copy
            # (its ids are then tree positions; the tree's leaves already keep neighbours together)
            leaf_size = leaf_size_for(self.tree_leaf_size, points.shape[1])
            self.tree_ = HyperbolicKDTree(leaf_size=leaf_size).build(points, conformal, in_place=True)
            self.graph_.build(self.tree_.points_, self.tree_.conformal_, in_place=True)
            self.graph_in_tree_order_ = True
        else:
            self.graph_.build(points, conformal, in_place=True, keep_order=True)
        self.points_ = self.conformal_ = None

    def describe(self) -> str:
        """The default search list size (or the scan that replaces it) and, when there are exact copies, the
        graph's nodes."""
        graph = self.graph_
        text = f"default ef {graph.ef_}"
        if graph.pruned_ or graph.prune_comparison_ is not None:
            text += "; the graph " + ("pruned by the relative-neighbourhood rule" if graph.pruned_ else "unpruned")
        if graph.prune_comparison_ is not None:
            pruned, unpruned = graph.prune_comparison_
            text += f" (evaluations per query at the calibrated ef: {pruned:.0f} pruned, {unpruned:.0f} unpruned)"
        if graph.scans_:
            text += (f"; the default search scans every point exactly: at that ef the graph evaluated "
                     f"{graph.default_evaluations_ / graph.n_points_:.1%} of them per query (> {SCAN_FRACTION:.1%})")
        copies = graph.n_points_ - graph.n_nodes_
        if copies:
            text += f"; {copies} exact copies searched as {graph.n_nodes_} graph nodes"
        return text

    @property
    def supports_radius(self):
        """Range search is offered (exactly, by the kd-tree) with ``exact=True``."""
        return bool(self.exact)

    def search_radius(self, queries, q_conformal, delta_limits):
        if not self.exact:
            return super().search_radius(queries, q_conformal, delta_limits)
        return self.tree_.search_radius(queries, q_conformal, delta_limits)

    def search(self, queries, q_conformal, k, *, budget=None, ef=None):
        ids, deltas, samples = self.graph_.search(queries, q_conformal, k, ef=ef, budget=budget)
        if self.exact and self.graph_.scans_for(ef, budget):
            # the graph's default search was an exact scan: no re-check, only its ids made input rows
            if self.owns_points:  # graph ids are positions in the kd-tree's copy
                rows_to_ids(ids, deltas, self.tree_.indices_)
            return ids, deltas, SearchStats.without_oracle(samples, 1)
        if self.exact:
            # the tree gets what the graph left of the budget (a hard limit overall)
            left = None if budget is None else np.maximum(budget - samples, 0)
            seeds = {"seed_rows" if self.owns_points else "seed_ids": ids}  # graph ids: tree positions, or input ids
            ids, deltas, tree_samples = self.tree_.search_exact(queries, q_conformal, k, budget=left, **seeds)
            samples = samples + tree_samples
        return ids, deltas, SearchStats.without_oracle(samples, 2 if self.exact else 1)

    def query_order(self, queries, q_conformal):
        return self.graph_.query_order(queries, q_conformal)

    def one_query_function(self, c, model):
        if self.exact:  # the kd-tree's re-check (or the mapping of a scan's ids) takes the checked path
            return None
        return self.graph_.one_query_function(c, model == "lorentz")

    def get_state(self):
        # the points are saved once: by the graph (leaf order) or the kd-tree (exact=True)
        state = self.graph_.to_arrays(include_points=self.owns_points and not self.exact)
        if self.exact:
            state.update({_TREE_PREFIX + name: arr for name, arr in self.tree_.to_arrays().items()})
            if self.owns_points:
                state[_TREE_ORDER] = np.int64(1)
        return state

    def restore(self, points, conformal, state, *, oracle=None, random_state=None, full_check=True):
        """Take a stored graph (and kd-tree); ``points=None``: the stored kd-tree holds them.

        ``full_check=False`` (a memory-mapped file, ``verify="structure"``):
        the kd-tree gets only its structural checks, and the graph's per-point
        ids (neighbour lists, leaf order) are not read.
        """
        self._check_settings()
        self.points_, self.conformal_ = points, conformal
        state = dict(state)
        in_tree_order = state_flag(state, _TREE_ORDER, "graph")
        state.pop(_TREE_ORDER, None)
        in_leaf_order = HyperbolicGraphIndex.state_in_leaf_order(state)
        if in_tree_order and not self.exact:
            raise ValueError(f"graph state '{_TREE_ORDER}' must be the integer 1 and only appear with exact=True, "
                             f"got 1 with exact={self.exact!r}")
        if points is None and not (in_tree_order or in_leaf_order):
            raise ValueError("graph state holds no points: expected the index's points, the graph's own (leaf "
                             f"order) or, with exact=True, the kd-tree's ('{_TREE_ORDER}')")
        tree_state = {name[len(_TREE_PREFIX):]: state.pop(name) for name in list(state)
                      if name.startswith(_TREE_PREFIX)}
        if self.exact:
            if not tree_state:
                raise ValueError("graph state with exact=True: the kd-tree arrays ('tree.*') are missing")
            if "points" in state or "conformal" in state:
                raise ValueError("graph state with exact=True must not hold its own 'points'/'conformal'")
            self.tree_ = HyperbolicKDTree.from_arrays(tree_state, points=points, conformal=conformal,
                                                      full=full_check)
            if self.tree_leaf_size is not None and self.tree_.leaf_size != self.tree_leaf_size:
                raise ValueError(
                    f"HyperbolicKDTree state 'leaf_size': the stored tree has leaf_size={self.tree_.leaf_size}, "
                    f"the settings say tree_leaf_size={self.tree_leaf_size!r}"
                )
        elif tree_state:
            raise ValueError(f"graph state with exact=False holds kd-tree arrays {sorted(tree_state)}")
        if in_leaf_order:  # the graph holds the points, in its leaf order
            if self.exact:
                raise ValueError("graph state with exact=True must not hold its points in leaf order")
            if "points" not in state or "conformal" not in state:
                raise ValueError("graph state in leaf order: its 'points'/'conformal' are missing")
            self.graph_ = HyperbolicGraphIndex.from_arrays(state, full=full_check)
            if points is not None and full_check:  # a file that also holds the index's copy (format 2)
                _require_one_copy((points, conformal), self.graph_.points_in_input_order(), " in leaf order")
            self.points_ = self.conformal_ = None
            return self
        if "points" in state or "conformal" in state:  # files written before the graph shared the index's points
            _require_one_copy((points, conformal), (state.pop("points", None), state.pop("conformal", None)), "")
        if in_tree_order:  # the graph refers to the kd-tree's copy
            self.graph_ = HyperbolicGraphIndex.from_arrays(state, points=self.tree_.points_,
                                                           conformal=self.tree_.conformal_, full=full_check)
            self.graph_in_tree_order_ = True
            self.points_ = self.conformal_ = None
        else:
            self.graph_ = HyperbolicGraphIndex.from_arrays(state, points=points, conformal=conformal,
                                                           full=full_check)
            self.graph_in_tree_order_ = False
        if self.graph_.n_points_ != self.points_shape()[0]:
            raise ValueError(f"graph state holds {self.graph_.n_points_} points, the index {self.points_shape()[0]}")
        return self

    @property
    def nbytes(self):
        """Bytes of the graph and of the points it holds (or of the kd-tree with them, ``exact=True``);
        without the points when the index holds them (files written before the leaf order)."""
        held = self.graph_.points_.nbytes + self.graph_.conformal_.nbytes if self.owns_points and not self.exact else 0
        return int(self.graph_.nbytes + held + (self.tree_.nbytes if self.exact else 0))
