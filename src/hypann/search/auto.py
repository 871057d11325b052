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
points). With the scan's cost per point taken as 1 and the tree's as ``r``,
the tree is cheaper while ``f r < 1``. But ``r`` is not a constant of the
dimension: per examined point the tree's walk costs 2.3 to 12.2 times a
batch scan's point on the data families and other data at 10 to 256
coordinates where it examines 5-100% of the points (one thread; lowest on
tight clusters far apart, whose sums the walk abandons after a few
coordinates, highest on wide mixtures; ``benchmarks/auto_choice.py``). So
the default decides by the count only outside a band where either can win:

.. math::

    f \\le f_{lo} = 1/16 \\Rightarrow \\text{kd-tree}, \\qquad
    f > f_{hi} = 0.4 \\Rightarrow \\text{scan},

(the measurement stops after the first step of 8 whose running mean exceeds
``f_hi``), and in between times both on the sampled points (the tree's
search and a batch scan of them on one thread, best of
:data:`TIMING_REPEATS` each, after the counting pass and an untimed scan of 16 of them)
and keeps the faster. Outside the
band the choice is a function of the points and the seed; inside it, of the
machine's speed too, and both candidates are exact (equal to float64 brute
force). Until the forty-third session the cut was one fraction per
dimension, ``1/(1 + 44/sqrt(d))`` below 16 coordinates and ``1/11`` from
there on, fitted on uniform data when the scan and the walk were slower: it
scanned where the tree was 1.8x (points on one sphere, 10-D), 2.2x
(a mixture, 16-D and 24-D) and 1.9-3.5x (tight clusters, 16-256-D) faster
at 50,000 points. A given
``scan_fraction`` keeps that rule with its own cut (no timing). When the
scan is chosen the tree is dropped (no memory kept for it).

The graph with exact re-check (``algorithm="graph", exact=True``) is not a
candidate: seeding the kd-tree with the graph's answer saves only 0-3% of the
tree's samples (the best-first walk finds a near-final bound after a few
leaves), so it always costs more than the tree alone.
"""

from __future__ import annotations

import time

import numpy as np

from hypann import _validation as V
from hypann._params import Param
from hypann._runtime import numba_threads
from hypann.geometry._kernels import gather_points_in_place, inverse_permutation
from hypann.geometry.gram_scan import knn_delta_scan
from hypann.search.base import SearchAlgorithm
from hypann.search.brute import BruteForceSearch
from hypann.search.hkdtree_search import HyperbolicKDTreeSearch
from hypann.search.hyperbolic_kdtree import LEAF_SIZE_MEANING, HyperbolicKDTree, leaf_size_for

#: The methods ``"auto"`` chooses from, by their code in the saved state.
CHOICES = ("hkdtree", "brute")
#: Neighbours per sampled point in the pruning measurement (itself + 10).
MEASURE_K = 11
#: Sampled points searched per step of the measurement (it stops after a step whose running mean chose the scan).
MEASURE_CHUNK = 8
#: Examined fractions at or below this keep the kd-tree without timing (the walk's cost per examined point is
#: at most 12.2 scan points where it examines 5% or more in ``benchmarks/auto_choice.py``) ...
TREE_FRACTION = 1.0 / 16.0
#: ... and above this choose the scan without timing (at least 2.3 scan points there).
SCAN_FRACTION = 0.4
#: Timed passes over the sample of each candidate in the band between the two (the best counts) ...
TIMING_REPEATS = 2
#: ... after an untimed scan of this many sampled points (enough for the batch scan's Gram blocks).
WARM_QUERIES = 16


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
        Examined fraction above which the scan is chosen, with no timing;
        ``None``: the count decides outside ``(TREE_FRACTION, SCAN_FRACTION]``
        and a timing of both on the sample inside it. ``1.0`` always keeps
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
        The examined fraction above which the count alone chose the scan:
        ``scan_fraction``, or :data:`SCAN_FRACTION` by default.
    timing_ : tuple of float or None
        Seconds of the kd-tree's and of the scan's search of the sample when
        the choice was timed (``None`` when the count decided).
    """

    timing_ = None

    name = "auto"
    first_use_kernels = HyperbolicKDTree.first_use_kernels  # it builds the kd-tree first
    uses_oracle = False
    build_settings = (
        Param("leaf_size", "int", None, LEAF_SIZE_MEANING, low=1, none_ok=True),
        Param("sample_size", "int", 64, "indexed points searched to measure the tree's pruning", low=1),
        Param("scan_fraction", "float", None, "examined fraction above which the scan is chosen without timing "
              "(default: time both where the fraction is in (1/16, 0.4])", low=0.0, high=1.0, low_open=True,
              none_ok=True),
    )

    def __init__(self, *, leaf_size=None, sample_size=64, scan_fraction=None):
        self.leaf_size = leaf_size
        self.sample_size = sample_size
        self.scan_fraction = scan_fraction

    def _build(self, points, conformal, oracle):
        n, dim = points.shape
        sample = np.sort(self.rng_.choice(n, size=min(n, self.sample_size), replace=False))
        queries, q_conformal = points[sample], conformal[sample]  # before the tree reorders the points
        # the index hands over arrays it owns: the tree takes them over in its order (no second copy)
        tree = HyperbolicKDTree(leaf_size=leaf_size_for(self.leaf_size, dim)).build(points, conformal, in_place=True)
        timed = self.scan_fraction is None
        self.threshold_ = SCAN_FRACTION if timed else float(self.scan_fraction)
        # the scan once the mean over the points measured so far exceeds the threshold (uniform data at 32-D
        # and above: every search examines every point, and the first step of 8 decides)
        total, measured = 0, 0
        k = min(MEASURE_K, n)
        for start in range(0, sample.size, MEASURE_CHUNK):
            rows = slice(start, start + MEASURE_CHUNK)
            total += int(tree.search_exact(queries[rows], q_conformal[rows], k).samples.sum())
            measured += queries[rows].shape[0]
            if total > self.threshold_ * n * measured:
                break
        self.examined_fraction_ = total / (n * measured)
        self.measured_ = measured
        self.timing_ = None
        if self.examined_fraction_ > self.threshold_:
            self.choice_ = "brute"
        elif timed and self.examined_fraction_ > TREE_FRACTION:
            self.timing_ = _time_tree_and_scan(tree, queries, q_conformal, k)
            self.choice_ = "brute" if self.timing_[1] < self.timing_[0] else "hkdtree"
        else:
            self.choice_ = "hkdtree"
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
        text = (f"chose {self.choice_!r}: the kd-tree examined {self.examined_fraction_:.2%} of the points "
                f"for {min(MEASURE_K, self.points_shape()[0])} neighbours of {self.measured_} sampled points")
        if self.timing_ is not None:
            tree_s, scan_s = self.timing_
            return (text + f" (between {TREE_FRACTION:.2%} and {self.threshold_:.2%}: timed on them, kd-tree "
                    f"{1e3 * tree_s:.3g} ms, scan {1e3 * scan_s:.3g} ms)")
        if self.choice_ == "brute":
            return text + f" (> scan threshold {self.threshold_:.2%})"
        if self.scan_fraction is not None:  # the one cut given: the tree below it
            return text + f" (<= scan threshold {self.threshold_:.2%})"
        return text + f" (<= kd-tree threshold {TREE_FRACTION:.2%})"

    # -- state ----------------------------------------------------------------
    def get_state(self):
        state = {"choice": np.int64(CHOICES.index(self.choice_)),
                 "measurement": np.array([self.examined_fraction_, self.threshold_, self.measured_])}
        if self.timing_ is not None:
            state["timing"] = np.array(self.timing_, dtype=np.float64)
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
        timing = state.pop("timing", None)
        if timing is not None:
            timing = np.asarray(timing)
            if timing.shape != (2,) or timing.dtype.kind != "f" or not np.all((timing >= 0) & (timing < np.inf)):
                raise ValueError(f"auto state 'timing' must be two finite seconds >= 0, got {timing!r}")
            timing = (float(timing[0]), float(timing[1]))
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
        self.timing_ = timing
        if self.owns_points:
            self.points_ = self.conformal_ = None
        return self

    @property
    def nbytes(self):
        return int(self.chosen_.nbytes)


def _time_tree_and_scan(tree, queries, q_conformal, k):
    """Seconds of the kd-tree's exact search of ``queries`` and of a batch scan of them over the tree's points
    (the scan the ``"brute"`` choice runs), the best of :data:`TIMING_REPEATS` each, taken in turns, after an
    untimed scan of :data:`WARM_QUERIES` of them (its kernels' first use; the tree has just searched them all
    for the count).

    Both on one numba thread (and so one BLAS thread): the cost per query is what decides, and on a machine
    whose other cores are busy a scan on all threads waits for the slowest of them, while the tree's queries
    do not wait for each other (so a timing on all threads can favour the tree by the machine's load)."""
    points, conformal = tree.points_, tree.conformal_
    best = [np.inf, np.inf]
    with numba_threads(1):
        warm = slice(0, WARM_QUERIES)  # the batch scan's kernels (Gram blocks), first used here
        knn_delta_scan(queries[warm], q_conformal[warm], points, conformal, k)
        for _ in range(TIMING_REPEATS):
            t0 = time.perf_counter()
            tree.search_exact(queries, q_conformal, k)
            best[0] = min(best[0], time.perf_counter() - t0)
            t0 = time.perf_counter()
            knn_delta_scan(queries, q_conformal, points, conformal, k)
            best[1] = min(best[1], time.perf_counter() - t0)
    return best[0], best[1]
