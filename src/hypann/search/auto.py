"""``algorithm="auto"``: an exact search that picks its method from the data at build time.

Both candidates are exact (equal to float64 brute force):

* ``"hkdtree"`` -- the hyperbolic kd-tree (:mod:`hypann.search.hkdtree_search`),
  fast when its box bound prunes most of the data;
* ``"brute"`` -- a scan of every point (:mod:`hypann.search.brute`), which
  wins when the tree has to examine a large part of the data anyway (points
  uniform in a hyperbolic ball at 10-D and above): per point examined, the
  scan is several times cheaper than the tree walk.

The build makes the kd-tree, then measures how well it prunes: it searches
``sample_size`` indexed points (drawn with the index's ``random_state``) for
their ``k = 11`` nearest (the point itself and 10 neighbours) and takes the
mean fraction ``f`` of the ``n`` points the tree examined (in steps of 8
points; it stops once the running count already exceeds the threshold for
the whole sample, which decides for the scan). With the scan's
cost per point taken as 1 and the tree's as ``r(d)``, the tree is cheaper
while ``f r(d) < 1``; so the scan is chosen when

.. math::

    f > f^*(d) = \\frac{1}{r(d)}, \\qquad
    r(d) = 1 + \\frac{44}{\\sqrt{d}} \\ (d < 16), \\qquad r(d) = 11 \\ (d \\ge 16),

the per-point cost ratio of the tree's walk to a batch scan measured on
the data families (``benchmarks/graph_exact.py``, one thread, 100,000
points). Below 16 coordinates (leaves of 16 points) it is 12-15 where the
tree examines many points (uniform data, the mixture, boundary-heavy
clusters) at 10-D. From 16 coordinates on the kd-tree has leaves of 48
points (:func:`~hypann.search.hyperbolic_kdtree.default_leaf_size`), and
on uniform data, where it examines every point, the ratio is 8.2 at 32-D,
11.5 at 100-D and 13.7 at 256-D. (The earlier ``1 + 44/sqrt(d)`` at every
dimension was fitted before the scan computed batches through Gram
blocks, git c1676fc; at 100-D it put the break-even at twice the examined
fraction where it now is.) The counts are deterministic, so the choice is a function
of the points and the seed, never of the machine's speed. When the scan is
chosen the tree is dropped (no memory kept for it).

The graph with exact re-check (``algorithm="graph", exact=True``) is not a
candidate: seeding the kd-tree with the graph's answer saves only 0-3% of the
tree's samples (the best-first walk finds a near-final bound after a few
leaves), so it always costs more than the tree alone.
"""

from __future__ import annotations

import numpy as np

from hypann import _validation as V
from hypann._params import Param
from hypann.geometry._kernels import gather_points_in_place, inverse_permutation
from hypann.search.base import SearchAlgorithm
from hypann.search.brute import BruteForceSearch
from hypann.search.hkdtree_search import HyperbolicKDTreeSearch
from hypann.search.hyperbolic_kdtree import LEAF_SIZE_MEANING, WIDE_LEAF_MIN_DIM, HyperbolicKDTree, leaf_size_for

#: The methods ``"auto"`` chooses from, by their code in the saved state.
CHOICES = ("hkdtree", "brute")
#: Neighbours per sampled point in the pruning measurement (itself + 10).
MEASURE_K = 11
#: Sampled points searched per step of the measurement (it stops once the scan is certain).
MEASURE_CHUNK = 8
#: ``r(d) = 1 + TREE_COST_SCALE / sqrt(d)`` below :data:`WIDE_LEAF_MIN_DIM` coordinates: the
#: kd-tree's cost per examined point relative to a scan's ...
TREE_COST_SCALE = 44.0
#: ... and ``r(d)`` from there on, where the tree has leaves of
#: :data:`~hypann.search.hyperbolic_kdtree.WIDE_LEAF_SIZE` points.
WIDE_TREE_COST = 11.0


def default_scan_fraction(dim: int) -> float:
    """The examined fraction above which a scan beats the kd-tree: ``1 / r(dim)``.

    ``r(d) = 1 + 44 / sqrt(d)`` below 16 coordinates and ``11`` from 16 on (see the module docstring).
    """
    cost = WIDE_TREE_COST if dim >= WIDE_LEAF_MIN_DIM else 1.0 + TREE_COST_SCALE / np.sqrt(dim)
    return 1.0 / cost


class AutoSearch(SearchAlgorithm):
    """Exact k-NN by the kd-tree or a scan, whichever the data favour (see the module docstring).

    Parameters
    ----------
    leaf_size : int or None, default None
        Leaf size of the kd-tree; ``None``:
        :func:`~hypann.search.hyperbolic_kdtree.default_leaf_size` of the
        dimension (16 below 16 dimensions, 48 from 16 on).
    sample_size : int, default 64
        Indexed points searched to measure the tree's pruning (at most ``n``).
    scan_fraction : float in (0, 1] or None, default None
        Examined fraction above which the scan is chosen; ``None``:
        :func:`default_scan_fraction` of the dimension. ``1.0`` always keeps
        the tree.

    Attributes
    ----------
    choice_ : str
        ``"hkdtree"`` or ``"brute"``.
    examined_fraction_ : float
        The measured mean fraction of points the tree examined.
    measured_ : int
        Sampled points searched: ``sample_size`` (at most ``n``), or fewer
        when the running count already exceeded the threshold.
    threshold_ : float
        The ``scan_fraction`` in force.
    """

    name = "auto"
    first_use_kernels = HyperbolicKDTree.first_use_kernels  # it builds the kd-tree first
    uses_oracle = False
    build_settings = (
        Param("leaf_size", "int", None, LEAF_SIZE_MEANING, low=1, none_ok=True),
        Param("sample_size", "int", 64, "indexed points searched to measure the tree's pruning", low=1),
        Param("scan_fraction", "float", None, "examined fraction above which the scan is chosen "
              "(default: default_scan_fraction(dim))", low=0.0, high=1.0, low_open=True, none_ok=True),
    )

    def __init__(self, *, leaf_size=None, sample_size=64, scan_fraction=None):
        self.leaf_size = leaf_size
        self.sample_size = sample_size
        self.scan_fraction = scan_fraction

    def _threshold(self, dim):
        return default_scan_fraction(dim) if self.scan_fraction is None else float(self.scan_fraction)

    def _build(self, points, conformal, oracle):
        n, dim = points.shape
        sample = np.sort(self.rng_.choice(n, size=min(n, self.sample_size), replace=False))
        queries, q_conformal = points[sample], conformal[sample]  # before the tree reorders the points
        # the index hands over arrays it owns: the tree takes them over in its order (no second copy)
        tree = HyperbolicKDTree(leaf_size=leaf_size_for(self.leaf_size, dim)).build(points, conformal, in_place=True)
        self.threshold_ = self._threshold(dim)
        # the mean over the whole sample exceeds the threshold as soon as the running sum
        # does, so the measurement stops there (same decision, less work on uniform data)
        limit = self.threshold_ * n * sample.size
        total, measured = 0, 0
        for start in range(0, sample.size, MEASURE_CHUNK):
            rows = slice(start, start + MEASURE_CHUNK)
            total += int(tree.search_exact(queries[rows], q_conformal[rows], min(MEASURE_K, n)).samples.sum())
            measured += queries[rows].shape[0]
            if total > limit:
                break
        self.examined_fraction_ = total / (n * measured)
        self.measured_ = measured
        self.choice_ = "brute" if total > limit else "hkdtree"
        if self.choice_ == "hkdtree":  # the tree holds the only copy of the points (see owns_points)
            self.chosen_ = HyperbolicKDTreeSearch(leaf_size=self.leaf_size)
            self.chosen_.points_ = self.chosen_.conformal_ = None
            self.chosen_.tree_ = tree
            self.points_ = self.conformal_ = None
        else:  # the scan keeps the points in input order: undo the tree's order, in place
            points, conformal = self.points_, self.conformal_
            if np.may_share_memory(tree.points_, points):  # the tree took them over (its views are read-only)
                gather_points_in_place(points, conformal, inverse_permutation(tree.indices_))
            # else the tree made its own copy; the caller's arrays are untouched
            self.chosen_ = BruteForceSearch().build(points, conformal, random_state=self.random_state_)

    # -- the points: held by the kd-tree when it was chosen ---------------------
    @property
    def owns_points(self):
        """Whether the chosen method holds the only copy of the points (the kd-tree does)."""
        return getattr(self, "chosen_", None) is not None and self.chosen_.owns_points

    def points_shape(self):
        """``(n, d)`` of the indexed points."""
        return self.chosen_.points_shape() if self.owns_points else self.points_.shape

    def points_in_input_order(self):
        """``(points, conformal)`` in input row order (see :class:`HyperbolicKDTreeSearch`)."""
        return self.chosen_.points_in_input_order()

    def conformal_in_input_order(self):
        """The ``conformal`` of :meth:`points_in_input_order` alone."""
        return self.chosen_.conformal_in_input_order()

    # -- delegation ---------------------------------------------------------
    @property
    def supports_removed(self):
        return self.chosen_.supports_removed

    @property
    def serial_small_batches(self):
        return self.chosen_.serial_small_batches

    def search_work(self, m):
        return self.chosen_.search_work(m)

    supports_radius = True

    def search(self, queries, q_conformal, k, *, budget=None, **params):
        return self.chosen_.search(queries, q_conformal, k, budget=budget, **params)

    def query_order(self, queries, q_conformal):
        return self.chosen_.query_order(queries, q_conformal)

    def one_query_function(self, c, model):
        return self.chosen_.one_query_function(c, model)

    def search_radius(self, queries, q_conformal, delta_limits, **params):
        return self.chosen_.search_radius(queries, q_conformal, delta_limits, **params)

    def describe(self) -> str:
        """What was chosen and why, in one sentence."""
        verdict = ">" if self.choice_ == "brute" else "<="
        return (f"chose {self.choice_!r}: the kd-tree examined {self.examined_fraction_:.2%} of the points "
                f"for {min(MEASURE_K, self.points_shape()[0])} neighbours of {self.measured_} sampled points "
                f"({verdict} scan threshold {self.threshold_:.2%})")

    # -- state ----------------------------------------------------------------
    def get_state(self):
        state = {"choice": np.int64(CHOICES.index(self.choice_)),
                 "measurement": np.array([self.examined_fraction_, self.threshold_, self.measured_])}
        state.update({f"{self.choice_}.{name}": arr for name, arr in self.chosen_.get_state().items()})
        return state

    def restore(self, points, conformal, state, *, oracle=None, random_state=None, full_check=True):
        """Take a stored choice and its structure; ``points=None``: the stored kd-tree holds them."""
        self._check_settings()
        self.random_state_ = V.check_seed(random_state, "random_state")
        self.points_, self.conformal_ = points, conformal
        state = dict(state)
        if "choice" not in state or "measurement" not in state:
            raise ValueError(f"auto state must hold 'choice' and 'measurement', got arrays {sorted(state)}")
        code = np.asarray(state.pop("choice"))
        if code.shape != () or code.dtype.kind not in "iu" or not 0 <= int(code) < len(CHOICES):
            raise ValueError(f"auto state 'choice' must be an integer code in [0, {len(CHOICES)}), got {code!r}")
        measurement = np.asarray(state.pop("measurement"), dtype=np.float64)
        choice = CHOICES[int(code)]
        prefix = choice + "."
        inner = {name[len(prefix):]: arr for name, arr in state.items() if name.startswith(prefix)}
        stray = sorted(name for name in state if not name.startswith(prefix))
        if stray:
            raise ValueError(f"auto state for choice {choice!r} holds unexpected arrays {stray}")
        if choice == "hkdtree":
            chosen = HyperbolicKDTreeSearch(leaf_size=self.leaf_size)
            chosen.restore(points, conformal, inner, random_state=random_state, full_check=full_check)
            n = chosen.points_shape()[0]
        else:
            if points is None:
                raise ValueError("auto state chose 'brute', but the file holds no points")
            chosen = BruteForceSearch()
            chosen.restore(points, conformal, inner, random_state=random_state)
            n = points.shape[0]
        if (measurement.shape != (3,) or not np.all(np.isfinite(measurement))
                or not np.all((measurement[:2] >= 0) & (measurement[:2] <= 1))
                or measurement[2] != int(measurement[2]) or not 1 <= measurement[2] <= n):
            raise ValueError(f"auto state 'measurement' must be two fractions in [0, 1] and the number of "
                             f"sampled points (1 to n), got {measurement!r}")
        self.choice_, self.chosen_ = choice, chosen
        self.examined_fraction_, self.threshold_ = (float(v) for v in measurement[:2])
        self.measured_ = int(measurement[2])
        if self.owns_points:
            self.points_ = self.conformal_ = None
        return self

    @property
    def nbytes(self):
        return int(self.chosen_.nbytes)
