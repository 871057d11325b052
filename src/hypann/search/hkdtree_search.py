"""``algorithm="hkdtree"``: exact k-NN in one kd-tree walk with hyperbolic pruning.

Beyond the paper. A kd-tree node is skipped when a lower bound of ``delta``
over it cannot beat the current k-th best:

.. math::

    \\delta(q, x) \\ge \\frac{\\operatorname{mindist}(q, \\text{box})^2}
    {(1-\\|q\\|^2)\\,\\min_{x \\in \\text{node}}(1-\\|x\\|^2)} ,

so no oracle round trips are needed (see
:mod:`hypann.search.hyperbolic_kdtree`). Budget: with a ``budget`` the walk
stops after exactly that many examined points, so ``samples <= budget``
with no allowance; the most promising leaves are examined first.
"""

from __future__ import annotations

from hypann._params import Param
from hypann.result import SearchStats
from hypann.search.base import SearchAlgorithm
from hypann.search.hyperbolic_kdtree import LEAF_SIZE_MEANING, HyperbolicKDTree, leaf_size_for


class HyperbolicKDTreeSearch(SearchAlgorithm):
    """Exact hyperbolic k-NN by a kd-tree with hyperbolic pruning.

    Parameters
    ----------
    leaf_size : int or None, default None
        Points per leaf; ``None``: :func:`~hypann.search.hyperbolic_kdtree.default_leaf_size`
        of the dimension (16 below 16 dimensions, 48 from 16 on).

    Attributes
    ----------
    leaf_size_ : int
        The leaf size of the built tree.
    """

    name = "hkdtree"
    first_use_kernels = HyperbolicKDTree.first_use_kernels
    uses_oracle = False
    build_settings = (Param("leaf_size", "int", None, LEAF_SIZE_MEANING, low=1, none_ok=True),)

    def __init__(self, *, leaf_size=None):
        self.leaf_size = leaf_size

    #: the tree holds the only copy of the points (permuted into tree order);
    #: :class:`hypann.HyperbolicIndex` keeps none and asks :meth:`points_in_input_order`
    owns_points = True

    def _build(self, points, conformal, oracle):
        # the index hands over arrays it owns (see SearchAlgorithm.build): the tree puts them
        # in its order and keeps them, so the build makes no second copy of the points
        leaf_size = leaf_size_for(self.leaf_size, points.shape[1])
        self.tree_ = HyperbolicKDTree(leaf_size=leaf_size).build(points, conformal, in_place=True)
        self.points_ = self.conformal_ = None  # now in tree order: only the tree refers to them

    @property
    def leaf_size_(self):
        """The leaf size of the built tree (``leaf_size``, or the default of the dimension)."""
        return self.tree_.leaf_size

    def points_shape(self):
        """``(n, d)`` of the indexed points."""
        return self.tree_.n_points_, self.tree_.dim_

    def points_in_input_order(self):
        """``(points, conformal)`` in input row order (new arrays gathered from the tree)."""
        return self.tree_.points_in_input_order()

    def conformal_in_input_order(self):
        """The ``conformal`` of :meth:`points_in_input_order` alone."""
        return self.tree_.conformal_in_input_order()

    #: ``search`` takes ``removed=`` (a flag per built row) and skips those points
    supports_removed = True
    serial_small_batches = True

    def search(self, queries, q_conformal, k, *, budget=None, removed=None):
        ids, deltas, samples = self.tree_.search_exact(queries, q_conformal, k, budget=budget, removed=removed)
        return ids, deltas, SearchStats.without_oracle(samples, 1)

    def query_order(self, queries, q_conformal):
        return self.tree_.query_order(queries, q_conformal)

    def one_query_function(self, c, model):
        return self.tree_.one_query_function(c, model == "lorentz")

    supports_radius = True

    def search_radius(self, queries, q_conformal, delta_limits, *, removed=None):
        return self.tree_.search_radius(queries, q_conformal, delta_limits, removed=removed)

    def get_state(self):
        return self.tree_.to_arrays()

    def restore(self, points, conformal, state, *, oracle=None, random_state=None, full_check=True):
        """Take a stored tree after checking it (:meth:`HyperbolicKDTree.validate_state`).

        ``points``/``conformal`` (input row order) are compared with the
        tree's copy when given (files of format 1 and 2 store both); ``None``:
        the tree's copy is the only one (format 3). ``full_check=False``: only
        the structural checks (see ``validate_state(full=False)``).
        """
        self._check_settings()
        tree = HyperbolicKDTree.from_arrays(state, points=points, conformal=conformal, full=full_check)
        if self.leaf_size is not None and tree.leaf_size != self.leaf_size:  # None: the stored one
            raise ValueError(
                f"HyperbolicKDTree state 'leaf_size': the stored tree has leaf_size={tree.leaf_size}, "
                f"the settings say leaf_size={self.leaf_size!r}"
            )
        self.points_ = self.conformal_ = None
        self.tree_ = tree
        return self

    @property
    def nbytes(self):
        return int(self.tree_.nbytes)
