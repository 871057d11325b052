"""Hyperbolic k-NN graph searched from partition-tree entry points (``algorithm="graph"``).

hypann's approximate search. It replaces the paper's Vamana baseline
(:mod:`hypann.graph.vamana`), which collapses on clustered and real data.

Why Vamana collapses (measured)
-------------------------------
``benchmarks/vamana_diagnosis.py``, 20,000 points, 500 held-out queries,
Vamana with the paper's ``R=10, L=10, alpha=1.5``, two passes:

================================ ========= ========== ============ ========
                                 mixture   mixture    WordNet      tree
                                 10-D      100-D      nouns 10-D   10-D
================================ ========= ========== ============ ========
recall@10, L=10 / 100 / 1000     .29/.55/  .003/.22/  .70/.71/.71  .99 all
                                 .79       .56
points reachable from the medoid 0.84      0.54       0.013        0.99
points without an in-edge        7%        32%        98%          0.1%
mean out-degree (R=10)           8.2       5.6        1.04         6.1
clusters unreachable             24%       30%        --           --
recall, search started at the    0.92      0.62       0.72         1.00
true nearest neighbour (L=40)
================================ ========= ========== ============ ========

A larger list does not help (recall saturates with ``L``), because the
answers are *unreachable*: on WordNet 98% of the points have no in-edge;
on the 10-D mixture the queries whose cluster is unreachable get recall
0.01, those whose cluster is reachable 0.73. The cause is RobustPrune in
hyperbolic geometry:

1. **A central point prunes everything.** For two points ``p, v`` far out
   in different directions the geodesic between them passes near the
   origin, so a point ``h`` near the origin has ``d(h, v) < d(p, v)``
   (by about ``d(p, h)``). RobustPrune keeps the nearest candidate and drops
   every ``v`` with ``alpha d(h, v) <= d(p, v)``; once such an ``h`` is kept,
   all candidates behind it go. On WordNet every out-list shrinks to one
   edge: the points of out-degree 1 sit at median hyperbolic norm 12.2 and
   their one neighbour at norm 0.4 (also with one pass at ``alpha=1.5``:
   75% of the points; with ``R=32, L=64``: 86%). On the mixtures the outer
   clusters do the same (35% of the 100-D points at out-degree 1 after an
   ``alpha=1`` pass, at norm 8.5, neighbour at norm 0.6).
2. **The reverse edges that would make them reachable are capped.** The hub
   receives thousands of reverse edges, prunes them back to ``R`` and keeps
   the nearest, so the outer points lose their only in-edges. Between
   clusters the same cap drops the long edges first (RobustPrune keeps the
   ``R`` nearest non-dominated candidates), so whole clusters become
   islands.
3. **The second pass cannot repair it.** Its greedy searches start from the
   one medoid and only see the reachable core; the outer points never come
   back as candidates. (At 100-D the local graph is also too sparse: from the
   true nearest neighbour the search finds 0.62 of the answers.)

Larger ``R``/``L`` do not remove the mechanism (recall 0.003 at ``L=100``
on the 100-D mixture with ``R=32, L=64``).

The design here
---------------
* **No RobustPrune; relative-neighbourhood pruning only where it pays.** The
  graph is the (approximate) k-NN graph: each point keeps
  its ``n_neighbors`` nearest by ``delta`` (``K = 24``), plus reverse edges
  (up to ``max_degree = 40`` in all, nearest first). An outer point is
  reachable from its own neighbours whatever lies between them and the
  origin. With ``prune="auto"`` (the default) the build also prunes a copy
  of the graph by the relative-neighbourhood rule, keeping each row's 12
  nearest, its bridges and long edges (:func:`relative_neighbourhood_rows`),
  calibrates ``ef`` on both and keeps the pruned graph only where it reaches
  the target recall with at most 3/4 of the evaluations: on hierarchies (the
  tree family at 10-D and 100-D, 10-D out-degree 29 to 12; WordNet 10-D) the
  same recall then costs 0.6-0.75 of the evaluations at the calibrated
  ``ef``; on clusters and uniform data pruning costs recall or evaluations,
  and the graph stays whole. A pruned graph's recall can stop a little lower
  at any ``ef`` (WordNet 10-D: 0.997 against 0.999 at ``ef=64``);
  ``prune="never"`` keeps every edge (``docs/benchmarks.md``, "The graph
  pruned where it pays"). The points the calibration leaves out one at a
  time prune no other row, so that leaving one out takes from the walk
  only what a held-out query never gave it. The reverse edges matter at
  100-D, where some points are in many k-NN lists (Gaussian mixture 100-D, 50,000 points:
  recall@10 0.978 at ``ef=32`` with ``max_degree=32``, 0.989 with 40). (Relative-neighbourhood
  pruning of this graph, keeping the 4 nearest, brings the WordNet
  out-degree to 4.4, leaves 64% of the points without an in-edge and caps
  recall at 0.976; without it 0.996.)
* **k-NN by NN-descent** (Dong et al. 2011) in *pull* form: in a round every
  point compares itself with the candidates of its candidates (new/old
  flags, ``min(K, 16)`` candidates sampled by a hash) and writes only its own
  row, so the rounds run in parallel and the result does not depend on the
  thread count. The initial rows come from 4 Apollonian partition trees
  (:mod:`hypann.graph.partition_tree`; every pair sharing a leaf). Stops when
  a round changes fewer than ``0.001 n K`` entries. The build keeps int32
  ids and float32 keys (see "Memory of the build" below); the search graph
  is assembled with float64 deltas. From 16 dimensions on a point's
  candidates are compared eight at a time and never stopped early
  (:func:`~hypann.geometry._kernels.split_sums8`: each sum split over
  four float64 vector lanes, or, with float32 storage, summed in float32
  over eight lanes; the keys of the rounds need not be :func:`delta_row`'s
  bits, only fixed by the inputs); below, one sum at a time in coordinate
  order, abandoned once it is proved above the row's worst key or not, as a
  probe of each chunk of points finds faster (:func:`_refine`; the same rows
  either way). From 16 dimensions on, a round also screens each point's
  candidates by one-byte codes of the points first
  (:mod:`hypann.geometry.screen_codes`): a candidate proved too far to enter
  the row is left out without reading its row, which from about 100
  dimensions on costs more than its arithmetic. Where neighbours lie closer
  than the codes' step (boundary-heavy data, fine hierarchies) most
  candidates pass: a window of them measures that, and the points after it
  read every row (the same rows either way).
* **Built and kept in leaf order.** The entry-point tree (below) is built
  first, and the graph is built over the points reordered into its leaf
  order (the index's own arrays in place; a copy otherwise). NN-descent
  compares each point with the neighbours of its neighbours, which then
  mostly lie in nearby memory: on the Gaussian mixture (float32 storage,
  ``benchmarks/scaling.py``) the build takes 46 s instead of 91 s at 10^6
  10-D points and 61 s instead of 88 s at 3·10^5 100-D points. With
  ``keep_order=True`` (what ``algorithm="graph"`` uses) the points stay in
  that order and searches map their answers to input rows through
  ``tree_order_``: at 10^5 points the same graph answers batches 1.13-1.61x
  faster than in input order on 9 of 12 family/dimension cases
  (``benchmarks/graph_layout.py``; no gain on the tree family, whose input
  order is already local, or on uniform 100-D data). Otherwise the ids are
  mapped back to input rows and the points put back in their order.
* **Entry points from a partition tree, not one medoid.** A query descends
  the tree (two Euclidean distances per level, no conformal factor; from
  16 dimensions on each sum split over four vector lanes, in the build's
  keys and in the descent alike) to a leaf; the leaf's points (at most
  ``leaf_size``) and the pivots of the last levels (nodes of at most
  ``8 leaf_size`` points) seed the search list. The pivots matter on
  boundary-heavy data, where a tight cluster can be cut by a split and the query's leaf holds no neighbour at all
  (boundary-heavy 10-D, 5,000 points: recall 0.9895 at any ``ef`` without
  them, 0.999 with them). Pivots of the upper levels are left out: they are
  random, often central points, which on WordNet fill the list with hubs
  and drop recall from 0.996 to 0.989.
* **Bridges between components.** The k-NN graph of separated clusters is
  disconnected (76 components on boundary-heavy 10-D, 5,000 points). When
  it is, every point also links to its nearest leaf mates of other
  components (4 at most, from the NN-descent trees).
* **Long edges for queries far from the data.** The nearest points of a query
  far from every point (another kind of data than the index holds: text
  against image embeddings, new directions) are the points furthest out
  towards it, spread over several clusters, and the k-NN graph has no edge
  between those clusters: the walk stops in the cluster it started in. Each
  point therefore also gets up to 4 edges chosen by relative-neighbourhood
  pruning over its k-NN row and its nearest points of a random sample
  (:mod:`hypann.graph.long_edges`). Sample points behind a point's own
  neighbours are dominated by them, so the edges go where the k-NN row does
  not reach: from the rims of clusters to the clusters around them. They
  come after the bridges at the front of the row (within ``max_degree``).
  On 20,000 points,
  with queries in random directions at the data's norms
  (:func:`~hypann.datasets.families.far_queries`), recall@10 at ``ef_`` went
  from 0.47 to 0.90 on the 100-D mixture, 0.77 to 0.85 on the 10-D mixture
  and 0.18 to 0.56 on boundary-heavy 10-D, and held-out queries kept theirs
  (``docs/benchmarks.md``, "Queries far from the data").
* **A second stage for queries far from the data.** Where a cluster holds no
  sample point, no long edge leads into it, and a walk that starts elsewhere
  never gets there. A walk that ends with its nearest found point ``r_1``
  more than ``FAR_RATIO = 4`` times as far from the query as ``r_1`` is from
  the ``FAR_RANK = 10``-th found point (``d(q, r_1) > 4 d(r_1, r_10)``, both
  from ``delta`` as ``2 asinh(sqrt(delta))``) is *far*. (Where more than 1 %
  of the indexed points, searched leave-one-out, are far by 4, as on WordNet
  10-D, the threshold is their ``FAR_QUANTILE = 0.99`` quantile instead:
  ``HyperbolicGraphIndex._far_ratio``.) Then the pivots of the entry tree's
  first :func:`upper_levels` levels (8 up to 20,000 nodes, one more per
  doubling, at most 12: 510 to 8,190 points, spread over the data as the tree
  splits it) are offered to its list, which grows
  to ``FAR_EF = 64`` entries (its neighbours may lie in several clusters),
  and the walk goes on from the nearest unexpanded entry. The pivots count
  as evaluations (within ``budget``); the spread's one delta, between two
  found points, does not. On 20,000 points, far queries' recall@10 at
  ``ef_`` went from 0.51-0.59 to 0.85-0.997 on boundary-heavy data and from
  0.83-0.90 to 0.91-0.96 on the mixtures, at up to 5.7x their evaluations;
  held-out queries kept their recall, and their evaluations changed only on
  WordNet 10-D (208 to 229 a query) and the 100-D mixture (189 to 192).
  At 100,000 points: boundary-heavy 0.38-0.84 to 0.76-0.93, the mixtures
  0.58-0.89 to 0.86-0.95, at 2-10x their evaluations; held-out queries'
  evaluations changed on WordNet 10-D (150 to 203) and the 100-D mixture
  (562 to 592) (``docs/benchmarks.md``, "Queries far from the data: a second
  stage").
* **Copies.** With ``keep_order`` (``algorithm="graph"``) each group of exact
  copies (equal stored rows, :mod:`hypann.graph.copies`) is one node: the graph
  and its entry tree are built over the first row of each group, and a search
  reports a found node's other copies after it, at its ``delta``
  (:attr:`HyperbolicGraphIndex.copy_groups_`). Otherwise k-NN rows fill with
  copies of one point and a list of ``ef`` entries holds a few points many
  times (``docs/benchmarks.md``, "Exact copies as one graph node": on the
  duplicates family the build is 7x faster and the default list reaches
  recall 0.999 instead of 0.987). In input order (the exact search's graph)
  every row stays a node, and at most ``max_degree // 2`` neighbours at
  ``delta = 0`` are kept per point, so a group of copies links to the rest of
  the data.
* **Search** is best-first with a sorted list of ``ef`` entries (the list of
  :mod:`hypann.graph.vamana`), ranking by ``delta``; every reported
  ``delta`` is the exact float64 value of the reported point
  (:func:`delta_row`'s bits). The descent's pivots enter the list with the
  sums the side test computed; from 16 coordinates on (``split_keys_``) those
  are split over four lanes, a few units in the last place off, so the
  entries an answer reports get their exact value there and are sorted by it
  (:func:`_exact_front`). (Until the twenty-seventh session they were
  reported with those values; ``tests/test_graph.py`` now checks the bits
  from 16-D on.) There the walk ranks its candidates by split sums too
  (:func:`~hypann.geometry._kernels.delta4_split_below`: each row in blocks of
  16 coordinates over four lanes, stopped between blocks once proved above
  the list's worst entry), whose sixteen chains of additions for four rows
  do not wait on each other as four ordered sums do: on 100,000 points at
  100-D a batch took 0.87-0.97 of the time on five families, with the same
  answers (``docs/benchmarks.md``, "The graph walk's sums split over four
  lanes from 16-D on").
* **Reads announced before they are made** (cache prefetch hints,
  :mod:`hypann._prefetch`), so their cache misses overlap. At every
  dimension the descent announces the pivot rows of a node's children. From
  rows of 128 bytes on (:data:`~hypann._prefetch.PREFETCH_MIN_ROW_BYTES`),
  expanding an entry first announces the coordinates, conformal factor and
  neighbour row of each of its unvisited neighbours; on 100,000 points at
  100-D a batch took 0.65-0.84 of the time on four families
  (``docs/benchmarks.md``, "Cache prefetch hints in the graph walk"). On
  shorter rows, where that did not pay, it announces only the neighbour row
  of the next entry it will expand (:func:`_prefetch_next_row`;
  ``docs/benchmarks.md``, "Two reads announced in the 10-D walk"). The same
  answers either way.
* **ef calibrated at build time.** Data differ in how many evaluations a
  given recall costs, so ``ef=None`` picks the smallest ``ef`` of
  ``10, 12, 16, 20, 24, 32, ...`` (doubling past 512, up to ``n``) whose
  recall@10 on 256 indexed points, each searched with itself excluded
  (leave-one-out: its own out-edges still help, its distance 0 does not),
  reaches ``target_recall = 0.98``, and so does the recall on 128 points of
  the boundary tenth (the nodes with the smallest ``1-|x|^2``), which must
  also be within ``BOUNDARY_GAP = 0.01`` of the former; held-out queries of
  the same data get within ~0.01 of that. The boundary sample keeps the
  default from serving the inner nine tenths only: on points along 50
  geodesics (50,000, ``benchmarks/independent_data.py``) the pruned graph
  calibrated on the uniform sample alone had held-out recall 0.984 and
  0.951 on the boundary tenth; at 100,000 the target alone on the boundary
  sample still left 0.994 and 0.972, and with the gap the unpruned graph
  is chosen (1.000 and 1.000, ``benchmarks/graph_calibration.py``). Picks
  10 on trees and WordNet and 20 on the 100-D mixture. On uniform 100-D
  data (20,000 points) it picked 512, where nearest neighbours are only
  2-3% nearer than a typical point and every method needs to look at a
  large part of the data; there it now stops short for the scan (below).
  When no ``ef`` up to ``n`` reaches the target, ``ef_`` is the smallest
  whose recall is within ``CALIBRATION_PLATEAU = 0.005`` of the best any
  reached, with a warning.
  That happens where some points are found only from their own leaf: on
  20,000 points in groups of ten 1e-9 apart (10-D), the search graph has
  1,681 strongly connected components, some groups have no edge in from
  the rest, and the leave-one-out recall is 0.979 even with a list of every
  node. ``ef_`` is then 10 (held-out recall 0.998, 71 evaluations per
  query), where it used to be ``n`` (recall 1.000, 2,419 evaluations: the
  whole part of the graph a search reaches); ``docs/benchmarks.md``,
  "A calibration short of its target".
* **A scan where the walk does not pay.** The calibration also measures the
  mean evaluations per query at ``ef_`` (``default_evaluations_``). Above
  ``SCAN_FRACTION = 1/11`` of the points (``scans_``) the default search is
  the exact scan of every point (:func:`~hypann.geometry.gram_scan.knn_delta_scan`):
  a walk reads scattered rows and costs 13-48x the scan per point in a
  batch, 9-33x one query per call (12 family cases, 100,000 points), so
  there the scan is faster and exact. Only uniform 100-D data get there
  (38 % of the points at ``ef = 2048``; the default goes from 2.3x to 42.6x
  numpy brute force); every other family walks 0.07-0.58 %. An explicit
  ``ef`` or a ``budget`` walks the graph (``docs/benchmarks.md``, "The default
  search as an exact scan where the walk does not pay"). Since a longer list
  only evaluates more, the ladder stops climbing once even the smallest
  ``ef`` within ``CALIBRATION_PLATEAU`` of the best recall so far walks more
  than that fraction: the default search scans whatever the rest of the
  ladder would find, and ``ef_`` is the last ``ef`` tried, short of the
  target. On 100,000 uniform 100-D points that is 384, and the one-thread
  build's calibration takes 9-10 s less of 53-69 s (``docs/benchmarks.md``,
  "The calibration stops where the scan wins").

Kernels: every parallel loop is a ``prange`` over fixed blocks whose body
calls a serial function that writes only its own rows; buffers are
allocated at their proven size (rows of ``K``, lists of ``ef``, trees of
``2n`` nodes) and nothing grows inside a ``prange``.

References
----------
Dong, Charikar, Li, *Efficient K-Nearest Neighbor Graph Construction for
Generic Similarity Measures*, WWW 2011.
Malkov & Yashunin, *Efficient and robust approximate nearest neighbor search
using Hierarchical Navigable Small World graphs*, TPAMI 2018 (the ``ef``
search list).
Subramanya et al., *DiskANN*, NeurIPS 2019 (Vamana, RobustPrune).
"""

from __future__ import annotations

import logging
import math
import warnings

import numba as nb
import numpy as np

from hypann import _progress as progress
from hypann._borrowed import borrowed
from hypann._prefetch import prefetch_item, prefetch_row, prefetches_rows
from hypann._runtime import (
    ORDER_NODE_POINTS,
    SERIAL_MAX_QUERIES,
    OneQueryKernel,
    VisitedMarks,
    one_query_arrays,
    read_only,
    release_freed_heap,
)
from hypann._validation import (check_positive_int, check_query_coordinates, check_real, check_stored_points,
                                check_stored_queries, state_flag)
from hypann.geometry._kernels import (delta4_below, delta4_split_below, delta_row, delta_row_below,
                                      delta_row_below_counted, delta_split_below, deltas_to_rows, few_lorentz_points,
                                      few_points_conformal, gather_points_in_place, gather_rows_in_place, holds,
                                      insert_sorted, inverse_permutation, one_query_start, sq_dist8, sq_dist_row)
from hypann.geometry.gram_scan import knn_delta_scan
from hypann.geometry.screen_codes import SCREEN_MAX_DIM, screen_codes, screen_margin, screen_rejects
from hypann.geometry.screened_scan import ScanCodes
from hypann.graph.copies import copy_leaders
from hypann.graph.long_edges import dominated, long_edges
from hypann.graph.partition_tree import (build_forest, build_tree, first_node_starts, forest_index_dtype, mix_seed,
                                         pivot_sums, split_key, split_sums_for, splitmix64, upper_pivots)
from hypann.graph.vamana import GraphSearchResult, _list_offer
from hypann.metrics import recall_per_query

__all__ = ["HyperbolicGraphIndex", "GraphSearchResult"]

logger = logging.getLogger(__name__)

_NO_BUDGET = np.iinfo(np.int64).max
# Per-query budgets and left-out points of a small search without either (read, never written,
# by the search kernels): one allocation fewer per one-query call.
_NO_BUDGETS = np.full(SERIAL_MAX_QUERIES, _NO_BUDGET, dtype=np.int64)
_NO_EXCLUDES = np.full(SERIAL_MAX_QUERIES, -1, dtype=np.int64)
# Points per block of the parallel loops (a block's work does not depend on the thread count).
_CHUNK = 1024
# Candidates per point and round in NN-descent (new and old each; at most K). A round costs
# about 3 C^2 distances per point; 16 instead of K = 24 builds 1.3-1.8x faster on clustered
# data at the same recall, and the candidate lists take 8 C bytes a point.
MAX_CANDIDATES = 16
# NN-descent stops when a round changes fewer than this fraction of the n*K row entries.
NN_DESCENT_TOL = 1e-3
#: Default ``max_rounds``: NN-descent's rounds at most. At 100,000 points every data family and set of the
#: benchmarks but three stopped on ``NN_DESCENT_TOL`` within 2-7 rounds (the tree and the mixture at 10-D also
#: at 1,000,000); WordNet 10-D ran 14, uniform 100-D and the MERU-like 256-D set 16. There the later rounds
#: mostly reorder near-equal neighbours: with 8 the builds took 19-30% less time, and the searches at the same
#: ``ef`` reached the same recall on WordNet 10-D, within 0.006 on the MERU-like set (whose calibrated ``ef_`` went
#: from 256 to 384, before :data:`EF_LADDER` had 320) and within 0.015 on uniform 100-D (whose default search is
#: the exact scan either way) (``docs/benchmarks.md``, "NN-descent's rounds at most").
MAX_ROUNDS = 8
# Edges per point to the nearest leaf mates in other components of the k-NN graph.
N_BRIDGES = 4
#: The trees that seed NN-descent are kept through the rounds (for the bridges) when they take at most this
#: fraction of the points' bytes (4 trees, int32 ids: from 23-D in float64, 46-D in float32), else freed after
#: the initial rows and built again when bridges are needed: rebuilding costs time, keeping them costs build
#: peak, which matters where the points are small (docs/storage.md, "Graph index build").
KEEP_TREES_UP_TO = 0.25
# Pivots of tree nodes with at most this many leaves' worth of points seed the search.
PIVOT_SEED_LEAVES = 8
#: A query is *far from the data* when its distance to the nearest point its walk found exceeds ``FAR_RATIO``
#: times the distance from that point to the walk's ``FAR_RANK``-th: then the pivots of the entry tree's first
#: :func:`upper_levels` levels (at most ``2 (2^levels - 1)`` points spread over the data) are offered to its
#: list and the walk goes on (module docstring, "A second stage for queries far from the data").
FAR_RATIO = 4.0
FAR_RANK = 10
#: ... or more, where more than ``1 - FAR_QUANTILE`` of the indexed points (left out) exceed ``FAR_RATIO``:
#: then that quantile of their ratios (``HyperbolicGraphIndex._far_ratio``).
FAR_QUANTILE = 0.99
UPPER_LEVELS = 8
#: ``UPPER_LEVELS`` holds up to this many graph nodes; each doubling beyond adds a level (rounded: from this
#: many nodes to the cap the pivots are between about ``n / 55`` and ``n / 28`` points, see
#: :func:`upper_levels`), up to ``UPPER_LEVELS_MAX`` (at most 8,190 pivots).
UPPER_LEVELS_NODES = 20000
UPPER_LEVELS_MAX = 12
#: ... and its search list grows to at least this many entries.
FAR_EF = 64
#: Settings of ``prune``: choose by the calibration, prune, keep every edge.
PRUNE_SETTINGS = ("auto", "always", "never")
#: A pruned row keeps this many nearest neighbours whatever the rule says (relative_neighbourhood_rows). On
#: WordNet 10-D the rule drops every later one, and recall stops lower the fewer are kept (4, 8, 12, 16: 0.982,
#: 0.991, 0.996, 0.997 at ef=10 on 1,000 held-out queries, at 128, 129, 132, 126 evaluations); on the tree a
#: kept neighbour costs evaluations (8, 12, 16: 43, 47, 50 at ef=10; unpruned 69) and no recall
#: (benchmarks/graph_prune.py --keep; docs/benchmarks.md, "The graph pruned where it pays").
PRUNE_KEEP = 12
#: ``prune="auto"`` keeps the pruned graph when its calibrated ``ef_`` reaches the target recall with at most
#: this fraction of the unpruned graph's evaluations per query (docs/benchmarks.md, "The graph pruned where
#: it pays").
PRUNE_EVALUATIONS = 0.75
# Indexed points whose leave-one-out search calibrates the default ef, and their k.
CALIBRATION_SIZE = 256
#: The calibration also searches this many points of the boundary tenth (the :data:`BOUNDARY_SHARE` of the
#: nodes with the smallest ``1-|x|^2``), leave-one-out, and the calibrated ``ef`` must reach the target recall
#: on them too: points along a few geodesics (``benchmarks/independent_data.py``, rays) lose 0.03 of recall@10
#: there under pruning while the whole sample, nine tenths inner points, stays at the target
#: (``docs/benchmarks.md``, "The calibration holds the boundary too").
CALIBRATION_BOUNDARY_SIZE = 128
#: Share of the nodes, nearest the boundary, that the boundary sample is drawn from.
BOUNDARY_SHARE = 0.1
#: The calibrated ``ef`` must also bring the boundary sample's recall within this of the uniform sample's: on
#: 100,000 points along 50 geodesics the pruned graph's held-out boundary recall stayed 0.022 below the rest
#: with both parts at the target, and the unpruned graph holds both at once (``benchmarks/graph_calibration.py``;
#: ``docs/benchmarks.md``, "The boundary within 0.01 of the rest").
BOUNDARY_GAP = 0.01
CALIBRATION_K = 10
#: Search list sizes tried by the calibration, smallest first (then doubling up to n). Steps of 1.14-1.33x; 320
#: and 448 since the fifty-first session (the step from 256 to 384 was 1.5x): the MERU-like 256-D set (100,000
#: points) then calibrates to 320 instead of 384: held-out recall 0.986 against 0.989, in 0.91 of the time per
#: query (``docs/benchmarks.md``, "The calibration's ladder in finer steps above 256").
EF_LADDER = (10, 12, 16, 20, 24, 32, 40, 48, 64, 80, 96, 128, 160, 192, 256, 320, 384, 448, 512)
# Relative slack of the distance threshold in recall (ties near the boundary).
RECALL_RTOL = 1e-12
#: When no ``ef`` up to ``n`` reaches the target recall, the calibration keeps the smallest ``ef`` whose
#: leave-one-out recall is within this of the best any ``ef`` reached: past it a longer list buys almost
#: nothing (the graph does not reach some neighbours from their queries' entry points), and a list as long
#: as the data would make every default search a scan of the whole graph.
CALIBRATION_PLATEAU = 0.005
#: The calibrated default search is an exact scan (:func:`~hypann.geometry.gram_scan.knn_delta_scan`) when the
#: graph walk at ``ef_`` evaluated more than this fraction of the points per query on the calibration sample
#: (``docs/benchmarks.md``, "The default search as an exact scan where the walk does not pay").
SCAN_FRACTION = 1 / 11
# Arrays that make up a fitted index (see ``to_arrays``).
_STATE = ("points", "conformal", "neighbors", "tree_pivots", "tree_thresholds", "tree_children", "tree_ranges",
          "tree_order", "settings", "recalls")
# Optional state flag (the integer 1): the points are stored in leaf order (``in_leaf_order_``).
# Files written before it existed have them in input order.
_LEAF_ORDER = "leaf_order"
# Optional state flag (the integer 1): the entry tree's split keys were summed over four lanes
# (``split_keys_``). Files written before it existed summed them in coordinate order.
_SPLIT_KEYS = "split_keys"
# Optional state flag (the integer 1): the search graph is pruned (``pruned_``). Files written before it existed
# are not.
_PRUNED = "pruned"
# Optional state scalar: the position of the ``prune`` setting in PRUNE_SETTINGS; absent for the default "auto"
# (and in files written before it).
_PRUNE_SETTING = "prune_setting"
# Optional state array: ``prune_comparison_`` (two finite floats >= 0); absent when it is ``None``.
_PRUNE_COMPARISON = "prune_comparison"
# Optional state array: the groups of exact copies (``copy_groups_``); absent when there are none.
_COPY_GROUPS = "copy_groups"
# Optional state scalar: the calibration's evaluations per query at ``ef_`` (``default_evaluations_``); absent
# when ``ef`` was given, and in files written before it (whose default search is then the graph walk).
_DEFAULT_EVALUATIONS = "default_evaluations"
# ``copy_groups_`` of a graph whose nodes are all its points (read only, shared).
_NO_GROUPS = np.empty(0, dtype=np.int64)
_NO_GROUPS.setflags(write=False)
#: No upper pivots (no second stage for far queries), read-only as the structure's own (HyperbolicGraphIndex._structure)
_NO_UPPER = np.empty(0, dtype=np.int64)
_NO_UPPER.setflags(write=False)


# --------------------------------------------------------------------------- k-NN rows
#
# Memory of the build (n points, K = n_neighbors, C = max_candidates, D = max_degree; ids are int32
# below 2^31 points, see forest_index_dtype): the NN-descent rows hold ids (4K B/pt), float32 keys
# of delta (4K) and new flags (K); the candidate lists of a round 2 C ids (8C; their sampling
# priorities are recomputed from a hash, never stored), chosen from reverse entries gathered for
# half the points at a time (CANDIDATE_BLOCKS; for a moment 2K B/pt with int32 ids and 16 B/pt of
# offsets); from 16 dimensions on, one-byte codes of the points screen the rounds' candidates (d + 32
# B/pt, made after the initial rows and freed after the rounds: a quarter of float32 points, an eighth
# of float64 ones, plus 32 B); the partition trees that seed the rows (12 n_trees B/pt) are freed
# before the rounds and rebuilt (same seeds) only when the graph needs bridges, unless they are small
# beside the points (KEEP_TREES_UP_TO): then they are kept through the rounds. The search graph is assembled from the
# ids alone (deltas recomputed in float64), so the rows' keys are freed first. The entry-point tree
# (its leaf order, 8 B/pt, and a node per leaf_size/2 points at most) is part of the final index and
# lives through the rounds; the build in leaf order adds an inverse permutation (8 B/pt) at the end,
# and a reordered copy of the points only when the caller's arrays may not be reordered in place.
# Finding exact copies (builds that keep the leaf order) takes 24 B/pt for a moment (hashes, their
# order, the leaders); with copies, their arrangement adds 8-16 B/pt until the graph is built. The
# long edges add 4 ids a point (with the bridges, the edges put first in the rows) and, for 2^15
# points at a time, their 32 nearest sample points (ids and deltas, 512 B/pt: 16 MB), after the
# rows' keys are freed.

# Largest float32: the keys of the rows are float32(min(delta, this)), never inf.
_KEY_MAX = float(np.finfo(np.float32).max)


@nb.njit(cache=True, inline="always")
def _row_key(d):
    """float32 key of a float64 ``delta`` in an NN-descent row (rounded to nearest, capped below inf)."""
    return np.float32(min(d, _KEY_MAX))


@nb.njit(cache=True, inline="always")
def _row_insert(row_d, row_i, row_f, d, v):
    """Insert ``v`` at key ``d`` into a sorted k-NN row (if better than the last and new).

    Returns True when the row changed; the inserted entry is flagged new.
    """
    K = row_d.shape[0]
    if not d < row_d[K - 1]:
        return False
    for t in range(K):
        if row_i[t] == v:
            return False
    pos = K - 1
    while pos > 0 and row_d[pos - 1] > d:
        row_d[pos] = row_d[pos - 1]
        row_i[pos] = row_i[pos - 1]
        row_f[pos] = row_f[pos - 1]
        pos -= 1
    row_d[pos] = d
    row_i[pos] = v
    row_f[pos] = True
    return True


@nb.njit(cache=True, inline="always")
def _leaf_window(leaf_ranges, p, tr, max_members, seed):
    """The leaf mates of ``p`` in tree ``tr`` to visit: ``(lo, size, take, off)``.

    The leaf is ``orders[tr, lo:lo+size]``; at most ``max_members`` of it are
    visited, ``orders[tr, lo + (off + s) % size]`` for ``s < take``, starting at
    an offset drawn from ``(seed, p, tr)`` when the leaf is larger.
    """
    lo = np.int64(leaf_ranges[tr, p, 0])
    size = np.int64(leaf_ranges[tr, p, 1]) - lo
    take = min(size, max_members)
    off = 0
    if size > take:
        off = np.int64(mix_seed(seed, p, tr) % np.uint64(size))
    return lo, size, take, off


@nb.njit(cache=True, inline="always")
def _leaf_mates(p, leaf_ranges, orders, max_members, seed, seen, tag, cand):
    """The leaf mates of ``p`` in every tree (:func:`_leaf_window`), each once and not ``p``, into
    ``cand``; returns their number, at most ``n_trees * max_members`` (the size ``cand`` needs).
    Marks ``p`` and them ``seen == tag``."""
    seen[p] = tag
    m = 0
    for tr in range(orders.shape[0]):
        lo, size, take, off = _leaf_window(leaf_ranges, p, tr, max_members, seed)
        for s in range(take):
            v = orders[tr, lo + (off + s) % size]
            if seen[v] == tag:
                continue
            seen[v] = tag
            cand[m] = v
            m += 1
    return m


@nb.njit(cache=True)
def _init_row(p, points, conf, leaf_ranges, orders, max_members, seed, row_d, row_i, row_f, seen, tag, cand,
              cand_d):
    """Fill the k-NN row of ``p`` from its leaf mates in every tree (:func:`_leaf_mates`, into
    ``cand``), then random points. From :data:`REFINE_BATCH_MIN_DIM` dimensions the leaf mates are
    offered with their candidate deltas (:func:`_offer_batched`); in fewer, their deltas in coordinate
    order are computed first (:func:`deltas_to_rows`, into ``cand_d``, as long as ``cand``) and offered
    one at a time."""
    # the arrays are the caller's: their views here need no reference counts (hypann._borrowed)
    points, conf, leaf_ranges, orders, row_d, row_i = borrowed(points), borrowed(conf), borrowed(leaf_ranges), \
        borrowed(orders), borrowed(row_d), borrowed(row_i)
    row_f, seen, cand, cand_d = borrowed(row_f), borrowed(seen), borrowed(cand), borrowed(cand_d)
    m = _leaf_mates(p, leaf_ranges, orders, max_members, seed, seen, tag, cand)
    if points.shape[1] >= REFINE_BATCH_MIN_DIM:
        _offer_batched(points[p], conf[p], points, conf, cand, m, row_d, row_i, row_f, cand_d)
    else:
        deltas_to_rows(points[p], conf[p], points, conf, cand[:m], False, cand_d)
        for s in range(m):
            _row_insert(row_d, row_i, row_f, _row_key(cand_d[s]), cand[s])
    _fill_row_at_random(p, points, conf, seed, row_d, row_i, row_f, seen, tag)


@nb.njit(cache=True, inline="always")
def _fill_row_at_random(p, points, conf, seed, row_d, row_i, row_f, seen, tag):
    """Offer random points to the row of ``p`` while it is not full (at most ``4 K`` draws from ``(seed, p)``)."""
    n = points.shape[0]
    K = row_d.shape[0]
    state = mix_seed(seed, p, 0x5EED)
    tries = 0
    while row_i[K - 1] < 0 and tries < 4 * K and n > 1:
        state, z = splitmix64(state)
        v = np.int64(z % np.uint64(n))
        tries += 1
        if seen[v] == tag:
            continue
        seen[v] = tag
        _row_insert(row_d, row_i, row_f, _row_key(delta_row(points[p], conf[p], points[v], conf[v])), v)


def _thread_marks(n, dtype):
    """Zeroed visited marks for a parallel loop over points: one row of ``n`` per thread.

    Inside a ``prange``, ``numba.get_thread_id()`` is in ``[0, get_num_threads())``
    and picks the row. One row per thread, zeroed once, instead of one per
    chunk: a zeroed ``n`` per chunk of :data:`_CHUNK` points would cost
    ``n^2 / 1024`` writes. (Made here, not in the kernel: a kernel that calls
    ``get_num_threads`` cannot be cached on disk.)
    """
    return np.zeros((nb.get_num_threads(), n), dtype=dtype)


@nb.njit(cache=True, parallel=True)
def _init_graph(points, conf, leaf_ranges, orders, max_members, seed, row_i, row_d, row_f, seen):
    """Initial k-NN rows of all points into ``row_i`` (-1), ``row_d`` (inf), ``row_f``, in parallel blocks.

    Points are visited in the leaf order of the first tree (``orders[0]``),
    so that consecutive points share leaf mates in the cache. ``seen`` tags
    are ``p + 1 <= n``, of the rows' id type (which holds ``n``): distinct
    for every point, so one row of marks per thread (:func:`_thread_marks`)
    serves all the chunks that thread runs without being cleared.
    """
    n = points.shape[0]
    n_chunks = (n + _CHUNK - 1) // _CHUNK
    for ch in nb.prange(n_chunks):
        mine = seen[nb.get_thread_id()]
        cand = np.empty(orders.shape[0] * max_members, dtype=orders.dtype)  # the bound of _leaf_mates
        cand_d = np.empty(cand.shape[0])
        for i in range(ch * _CHUNK, min(n, (ch + 1) * _CHUNK)):
            p = orders[0, i]
            _init_row(p, points, conf, leaf_ranges, orders, max_members, seed, row_d[p], row_i[p], row_f[p], mine,
                      p + 1, cand, cand_d)


@nb.njit(cache=True, inline="always")
def _pair_priority(base, a, b):
    """Sampling priority of the pair ``{a, b}`` in a round: one splitmix64 step of ``base ^ (min << 32 | max)``.

    Symmetric in ``a, b``; ``base`` mixes the seed and the round
    (:func:`_round_base`). The pair code is distinct for distinct pairs of
    ids below ``2^32``, and splitmix64 is a bijection, so two pairs of a round
    get the same priority only for ids beyond that.
    """
    lo = np.uint64(min(a, b))
    hi = np.uint64(max(a, b))
    _, z = splitmix64(base ^ ((lo << np.uint64(32)) | hi))
    return z


def _round_base(seed, rnd):
    """The per-round key of :func:`_pair_priority` (a hash of the seed and the round)."""
    return np.uint64(mix_seed(np.uint64(seed), 0xCA9D, rnd))


#: Offers to one candidate list (its forward and reverse entries of one flag) up to which
#: :func:`_smallest_priorities` ranks them all at once; a longer list (a hub's reverse entries) is
#: kept by insertion (:func:`_insert_by_priority`).
RANKED_OFFERS = 64
#: Blocks of points whose reverse entries :func:`_candidates` gathers at a time (each block scans
#: all rows twice; its reverse lists take about ``n K / CANDIDATE_BLOCKS`` ids).
CANDIDATE_BLOCKS = 2


@nb.njit(cache=True, inline="always")
def _insert_by_priority(ids, keys, filled, key, ident):
    """Keep in ``ids[:filled]`` (priorities ``keys``, ascending) the ``len(ids)`` smallest priorities
    offered, each id once; returns the new number of entries."""
    C = ids.shape[0]
    if filled == C and key >= keys[C - 1]:
        return filled
    for t in range(filled):
        if ids[t] == ident:
            return filled
    pos = filled if filled < C else C - 1
    while pos > 0 and keys[pos - 1] > key:
        ids[pos] = ids[pos - 1]
        keys[pos] = keys[pos - 1]
        pos -= 1
    ids[pos] = ident
    keys[pos] = key
    return filled + 1 if filled < C else C


@nb.njit(cache=True, inline="always")
def _smallest_priorities(p, row_i, row_f, flag, src, a, b, base, out, buf_i, buf_k, keys):
    """One candidate list of ``p`` into ``out`` (``-1`` padded): of the entries of row ``p`` flagged
    ``flag`` and the reverse entries ``src[a:b]`` (points whose rows hold ``p`` with that flag), each
    id once, the ``len(out)`` with the smallest :func:`_pair_priority`, ascending.

    The row's entries and their priorities go to ``buf_i``, ``buf_k`` (``max(RANKED_OFFERS, K)``
    long) first. Up to :data:`RANKED_OFFERS` offers in all, the reverse entries join them and each
    offer's rank is the number of smaller priorities (distinct ids have distinct priorities, an id in
    both parts the same one: dropped from the reverse part); longer lists go through
    :func:`_insert_by_priority` (``keys``: ``len(out)`` priorities).
    """
    K = row_i.shape[1]
    C = out.shape[0]
    nf = 0
    for j in range(K):
        q = row_i[p, j]
        if q < 0:
            break
        if row_f[p, j] == flag:
            buf_i[nf] = q
            buf_k[nf] = _pair_priority(base, p, q)
            nf += 1
    if nf + (b - a) <= RANKED_OFFERS:
        m = nf
        for s in range(a, b):
            q = src[s]
            key = _pair_priority(base, p, q)
            repeated = 0
            for j in range(nf):
                repeated += buf_k[j] == key
            if repeated == 0:
                buf_i[m] = q
                buf_k[m] = key
                m += 1
        for i in range(m):
            key = buf_k[i]
            rank = 0
            for j in range(m):
                rank += buf_k[j] < key
            if rank < C:
                out[rank] = buf_i[i]
    else:
        filled = 0
        for j in range(nf):
            filled = _insert_by_priority(out, keys, filled, buf_k[j], buf_i[j])
        for s in range(a, b):
            q = src[s]
            filled = _insert_by_priority(out, keys, filled, _pair_priority(base, p, q), q)


@nb.njit(cache=True, inline="always")
def _reverse_slot(t, row_f, p, j):
    """Range of :func:`_reverse_lists` that row ``p``'s entry ``j`` (the block's ``t``-th target) goes to."""
    if row_f is None:
        return t
    return 2 * t + (0 if row_f[p, j] else 1)


@nb.njit(cache=True)
def _reverse_lists(row_i, lo, hi, row_f=None):
    """Reverse edges into the points ``lo <= v < hi``, compressed.

    ``src[start[v-lo]:start[v-lo+1]]`` are the ``p`` with ``v`` in row ``p``,
    in increasing ``p`` (the order of a serial scan of the rows). ``src`` has
    one entry per row entry pointing into the block (at most ``n K``), of the
    type of ``row_i``. With the rows' new flags ``row_f``, each ``v`` has two
    ranges: ``src[start[2 (v-lo)]:start[2 (v-lo) + 1]]`` the ``p`` holding it
    flagged new, the next range those holding it flagged old.
    """
    n, K = row_i.shape
    slots = hi - lo if row_f is None else 2 * (hi - lo)
    start = np.zeros(slots + 1, dtype=np.int64)
    for p in range(n):
        for j in range(K):
            v = row_i[p, j]
            if v < 0:
                break
            if lo <= v < hi:
                start[_reverse_slot(v - lo, row_f, p, j) + 1] += 1
    for t in range(slots):
        start[t + 1] += start[t]
    src = np.empty(start[slots], dtype=row_i.dtype)
    fill = start[:slots].copy()
    for p in range(n):
        for j in range(K):
            v = row_i[p, j]
            if v < 0:
                break
            if lo <= v < hi:
                t = _reverse_slot(v - lo, row_f, p, j)
                src[fill[t]] = p
                fill[t] += 1
    return start, src


@nb.njit(cache=True, parallel=True)
def _candidates(row_i, row_f, C, base, n_blocks):
    """New and old candidate lists of NN-descent for one round (deterministic).

    ``new[p]`` holds up to ``C`` neighbours of ``p`` flagged new plus reverse
    neighbours ``q`` (``p`` in the row of ``q``) whose entry is new; ``old[p]``
    the same for entries not new. When more than ``C`` qualify, the ``C``
    with the smallest priority ``h(base, {p, q})`` are kept (a random
    sample; ``base`` is :func:`_round_base` of the seed and the round; the
    hash is symmetric, so a pair met from both sides has one priority), in
    ascending priority. Forward entries that made it into ``new`` are
    flagged old. Ids have the type of ``row_i``: ``(n, C)`` each.

    The reverse entries are gathered for ``n_blocks`` blocks of points in
    turn (:func:`_reverse_lists` by flag); then each point's two lists are
    chosen from its offers at once (:func:`_smallest_priorities`), in
    parallel chunks. A list is a function of its offers only, so the lists
    do not depend on ``n_blocks`` or the threads. (Until the thirty-eighth
    session each offer was inserted into its list as the rows were scanned,
    its place found by recomputed hashes: the same lists, about 1.5x slower
    on one thread in a scratch timing of a 10-D tree's rounds.)
    """
    n, K = row_i.shape
    new_i = np.full((n, C), -1, dtype=row_i.dtype)
    old_i = np.full((n, C), -1, dtype=row_i.dtype)
    step = max(1, (n + n_blocks - 1) // n_blocks)
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        start, src = _reverse_lists(row_i, lo, hi, row_f)
        n_chunks = (hi - lo + _CHUNK - 1) // _CHUNK
        for ch in nb.prange(n_chunks):
            buf_i = np.empty(max(RANKED_OFFERS, K), dtype=row_i.dtype)  # the bound of _smallest_priorities
            buf_k = np.empty(buf_i.shape[0], dtype=np.uint64)
            keys = np.empty(C, dtype=np.uint64)
            for p in range(lo + ch * _CHUNK, min(hi, lo + (ch + 1) * _CHUNK)):
                s0 = 2 * (p - lo)
                _smallest_priorities(p, row_i, row_f, True, src, start[s0], start[s0 + 1], base, new_i[p],
                                     buf_i, buf_k, keys)
                _smallest_priorities(p, row_i, row_f, False, src, start[s0 + 1], start[s0 + 2], base, old_i[p],
                                     buf_i, buf_k, keys)
    # the flags change only now: every block's reverse lists were gathered with the round's flags
    for p in nb.prange(n):
        for j in range(K):
            q = row_i[p, j]
            if q < 0:
                break
            if row_f[p, j]:
                for t in range(C):
                    if new_i[p, t] == q:
                        row_f[p, j] = False
                        break
    return new_i, old_i


@nb.njit(cache=True, inline="always")
def _keep_smallest(keys, ids, key, ident):
    """Keep the ``len(keys)`` smallest keys (ascending list); ignore ``ident`` already present."""
    if key >= keys[keys.shape[0] - 1]:
        return
    for t in range(keys.shape[0]):
        if ids[t] == ident:
            return
    insert_sorted(keys, ids, key, ident)


#: Points at the start of each chunk of an NN-descent round (below :data:`REFINE_BATCH_MIN_DIM` dimensions)
#: whose sums are abandoned early, to measure how early (:func:`_refine`).
PROBE_ROWS = 32
#: The share of the coordinates an abandoned sum reads on average, from which the rest of the chunk sums in
#: full (:func:`_refine`). A scratch timing of single rounds (100,000 points, 10-D, one thread) put the
#: crossing at 2.1-2.3 of the 10 coordinates: WordNet's later rounds (1.7-2.1 read) ran 1.1-1.5x faster
#: abandoned, its first rounds (2.3-5.2) and the tree, mixture and uniform sets (3.4-7) 1.01-1.5x faster
#: in full.
FULL_SUMS_FROM_SHARE = 0.22


#: How :func:`_refine_row` sums a ``delta``: abandoned once a prefix proves it ``>=`` the row's worst key, with
#: the coordinates read counted (the probe of a chunk, :func:`_refine`); abandoned so; in full.
_SUMS_PROBED = 0
_SUMS_ABANDONED = 1
_SUMS_FULL = 2


@nb.njit(cache=True, inline="always")
def _refine_row(p, q, points, conf, new_i, old_i, row_d, row_i, row_f, seen, tag, sums, reads):
    """Pull step of NN-descent for ``p`` (coordinates ``q``: ``points[p]``, or its float64 copy): try the
    candidates of its candidates.

    Compares ``p`` with every ``v`` in ``new[u]`` for ``u`` in ``new[p]`` or
    ``old[p]``, and with every ``v`` in ``old[u]`` for ``u`` in ``new[p]``
    (each pair has at least one new link, as in the local join). Only the row
    of ``p`` is written. ``sums`` (a constant in each of
    :func:`_probe_row`, :func:`_abandon_row`, :func:`_full_row`, which inline
    this function, so that each keeps one kind of sum) says how a ``delta`` is computed:
    :data:`_SUMS_FULL` the full sum (:func:`delta_row`'s, divided only when it can enter the row,
    :func:`_full_sum_enters`); otherwise it stops
    once a prefix proves it ``>=`` the row's worst key
    (:func:`delta_row_below`), and with :data:`_SUMS_PROBED` ``reads`` gains
    the coordinates read and the sums computed (``reads[0]``, ``reads[1]``,
    :func:`~hypann.geometry._kernels.delta_row_below_counted`). All make the same insertions: a prefix is
    at most the full sum, and rounding to float32 is monotone. Which is faster
    depends on the data (:func:`_refine`). Returns the number of insertions.
    """
    C = new_i.shape[1]
    K = row_d.shape[0]
    changed = 0
    coords = 0
    evaluated = 0
    cq = conf[p]
    seen[p] = tag
    for side in range(2):
        for a in range(C):
            u = new_i[p, a] if side == 0 else old_i[p, a]
            if u < 0:
                continue
            for lists in range(2 if side == 0 else 1):
                for b in range(C):
                    v = new_i[u, b] if lists == 0 else old_i[u, b]
                    if v < 0:
                        continue
                    if seen[v] == tag:
                        continue
                    seen[v] = tag
                    if sums == _SUMS_FULL:
                        s = sq_dist_row(q, points[v])
                        den = cq * conf[v]
                        if not _full_sum_enters(s, den, np.float64(row_d[K - 1])):
                            continue
                        d = s / den
                    elif sums == _SUMS_ABANDONED:
                        d = delta_row_below(q, cq, points[v], conf[v], np.float64(row_d[K - 1]))
                    else:
                        d, read = delta_row_below_counted(q, cq, points[v], conf[v], np.float64(row_d[K - 1]))
                        coords += read
                        evaluated += 1
                    if d < np.inf and _row_insert(row_d, row_i, row_f, _row_key(d), v):
                        changed += 1
    if sums == _SUMS_PROBED:
        reads[0] += coords
        reads[1] += evaluated
    return changed


#: A full sum ``s`` over ``den`` with ``s > worst den (1 + 2^-20)`` cannot enter a row of worst key ``worst``
#: (:func:`_full_sum_enters`) ...
_ENTER_MARGIN = 1.0 + 2.0 ** -20
#: ... when ``worst den`` is at least this (a normal float64 with room to spare: its product and the margin's
#: are then rounded to within 2^-53 relatively).
_ENTER_SCREEN_MIN = 2.0 ** -1000


@nb.njit(cache=True, inline="always")
def _full_sum_enters(s, den, worst):
    """False only when ``delta = s / den`` is proved not to enter a row whose worst key is ``worst``.

    With ``screen = worst den >=`` :data:`_ENTER_SCREEN_MIN`, ``s > screen (1 + 2^-20)`` (both products
    rounded to within ``2^-53``) gives ``fl(s / den) > worst (1 + 2^-20)(1 - 2^-53)^3 > worst``, and
    rounding to the float32 key is monotone, so the key is ``>= worst`` and :func:`_row_insert` would
    reject it. Testing the product first saves the division and the key of most candidates, which do not
    enter. ``worst = inf`` (a row not full) never screens.
    """
    screen = worst * den
    return not (screen >= _ENTER_SCREEN_MIN and s > screen * _ENTER_MARGIN)


@nb.njit(cache=True, inline="always")
def _borrowed_row_arguments(points, conf, new_i, old_i, row_d, row_i, row_f, seen, extra):
    """The arguments of a NN-descent row kernel (:func:`_probe_row` and the others below) as borrowed arrays:
    the caller (:func:`_refine`) holds them for the whole call, so their views and rows need no reference
    counts (:mod:`hypann._borrowed`). Without it every candidate's row took an atomic increment and
    decrement; without them NN-descent takes 0.61-0.74 of its time from 64-D on (``docs/benchmarks.md``)."""
    return (borrowed(points), borrowed(conf), borrowed(new_i), borrowed(old_i), borrowed(row_d), borrowed(row_i),
            borrowed(row_f), borrowed(seen), borrowed(extra))


@nb.njit(cache=True)
def _probe_row(p, points, conf, new_i, old_i, row_d, row_i, row_f, seen, tag, reads):
    """:func:`_refine_row` with :data:`_SUMS_PROBED`."""
    points, conf, new_i, old_i, row_d, row_i, row_f, seen, reads = _borrowed_row_arguments(
        points, conf, new_i, old_i, row_d, row_i, row_f, seen, reads)
    return _refine_row(p, points[p], points, conf, new_i, old_i, row_d, row_i, row_f, seen, tag, _SUMS_PROBED,
                       reads)


@nb.njit(cache=True)
def _abandon_row(p, points, conf, new_i, old_i, row_d, row_i, row_f, seen, tag, reads):
    """:func:`_refine_row` with :data:`_SUMS_ABANDONED`."""
    points, conf, new_i, old_i, row_d, row_i, row_f, seen, reads = _borrowed_row_arguments(
        points, conf, new_i, old_i, row_d, row_i, row_f, seen, reads)
    return _refine_row(p, points[p], points, conf, new_i, old_i, row_d, row_i, row_f, seen, tag, _SUMS_ABANDONED,
                       reads)


@nb.njit(cache=True)
def _full_row(p, points, conf, new_i, old_i, row_d, row_i, row_f, seen, tag, reads, qd):
    """:func:`_refine_row` with :data:`_SUMS_FULL`, ``p``'s coordinates first copied into the float64 ``qd``.

    The copy is exact, so every sum has :func:`sq_dist_row`'s bits, without converting ``p``'s float32
    coordinates (float32 storage) once per candidate. (The abandoned sums were not faster with it: a
    scratch timing of captured rounds, 100,000 points, 10-D.)
    """
    points, conf, new_i, old_i, row_d, row_i, row_f, seen, reads = _borrowed_row_arguments(
        points, conf, new_i, old_i, row_d, row_i, row_f, seen, reads)
    qd = borrowed(qd)
    qd[:] = points[p]
    return _refine_row(p, qd, points, conf, new_i, old_i, row_d, row_i, row_f, seen, tag, _SUMS_FULL, reads)


#: Dimension from which NN-descent evaluates its candidates eight at a time with split sums
#: (:func:`_refine_row_batched`) instead of one at a time in coordinate order (:func:`_refine_row`).
REFINE_BATCH_MIN_DIM = 16
#: The share of the candidates of a window (:data:`SCREEN_WINDOW`) the screen may keep for the points after it to
#: go on screening theirs by their one-byte codes (:func:`_refine`). In scratch timings of captured rounds
#: (100,000 points, one thread) screening cost 0.5-0.67 of reading a candidate's row at 100-256 D when the
#: rows come from memory, so it pays once it leaves out more than a half to two thirds of them; this keeps
#: a margin (``docs/benchmarks.md``, "NN-descent's candidates screened by one-byte codes").
SCREEN_KEPT = 0.25
#: Candidates whose share kept decides whether the points after them screen theirs (:func:`_refine`): a
#: window ends with the point whose candidates bring the count to this many or more.
SCREEN_WINDOW = 512
#: Points of a chunk that read every candidate's row after a window kept too many, before the next point
#: screens again to measure a new window (:func:`_refine`).
SCREEN_RETRY_ROWS = 256
#: Candidates ahead of the one screened whose codes are announced (:func:`_refine_row_screened`).
SCREEN_AHEAD = 8
#: Coordinates from which NN-descent makes one-byte codes of the points and screens by them (read when the
#: build runs: a larger value turns the screen off; at most
#: :data:`~hypann.geometry.screen_codes.SCREEN_MAX_DIM`).
SCREEN_MIN_DIM = REFINE_BATCH_MIN_DIM


@nb.njit(cache=True, inline="always")
def _offer_to_row(d, v, row_d, row_i, row_f):
    """Insert candidate ``v`` at ``delta`` ``d`` (``inf``: proved not to enter) into the row; 1 if it changed."""
    if d < np.inf and _row_insert(row_d, row_i, row_f, _row_key(d), v):
        return 1
    return 0


@nb.njit(cache=True, inline="always")
def _pull_candidates(p, new_i, old_i, seen, tag, cand):
    """The points NN-descent compares ``p`` with in a round, each once, into ``cand``; returns their number.

    Every ``v`` in ``new[u]`` for ``u`` in ``new[p]`` or ``old[p]``, and every
    ``v`` in ``old[u]`` for ``u`` in ``new[p]`` (each pair has at least one
    new link, as in the local join), but ``p`` and points already met (marks
    ``seen == tag``). Each of the ``C`` entries of ``new[p]`` gives at most
    ``2 C`` ids and each of ``old[p]`` at most ``C``: ``cand`` holds
    ``3 C^2``. (:func:`_refine_row` walks the same lists but evaluates each
    ``v`` as it meets it: gathering the ids first made the rounds slower at
    10-D in a profile, where the list reads then no longer overlap the
    distance sums.)
    """
    C = new_i.shape[1]
    m = 0
    seen[p] = tag
    for side in range(2):
        for a in range(C):
            u = new_i[p, a] if side == 0 else old_i[p, a]
            if u < 0:
                continue
            for lists in range(2 if side == 0 else 1):
                for b in range(C):
                    v = new_i[u, b] if lists == 0 else old_i[u, b]
                    if v < 0 or seen[v] == tag:
                        continue
                    seen[v] = tag
                    cand[m] = v
                    m += 1
    return m


@nb.njit(cache=True)
def _refine_row_batched(p, points, conf, new_i, old_i, row_d, row_i, row_f, seen, tag, cand, cand_d):
    """:func:`_refine_row` with the candidates gathered first (:func:`_pull_candidates`), then offered
    in that order (:func:`_offer_batched`), their deltas computed first. The deltas are
    :func:`~hypann.geometry._kernels.split_sums8` (split sums; float32 sums for float32 points), which
    may differ from :func:`_refine_row`'s in the last bits, so a
    float64 value next to a float32 key boundary can get the other key. Faster from
    :data:`REFINE_BATCH_MIN_DIM` dimensions on; in fewer, one sum at a time wins.
    """
    points, conf, new_i, old_i, row_d, row_i, row_f, seen, cand = _borrowed_row_arguments(
        points, conf, new_i, old_i, row_d, row_i, row_f, seen, cand)
    cand_d = borrowed(cand_d)
    m = _pull_candidates(p, new_i, old_i, seen, tag, cand)
    return _offer_batched(points[p], conf[p], points, conf, cand, m, row_d, row_i, row_f, cand_d)


@nb.njit(cache=True, inline="always")
def _offer_batched(q, cq, points, conf, cand, m, row_d, row_i, row_f, cand_d):
    """Offer the points ``cand[:m]`` to the row of the point ``q`` (conformal factor ``cq``), in that order.

    Their deltas are computed first, all of them and in full (:func:`deltas_to_rows` with ``split``:
    split sums, or float32 sums for float32 points; into ``cand_d``, as long as ``cand``), then offered
    one by one. Stopping each sum once it is proved
    above the row's worst key would save arithmetic, but in a one-off timing of a 100-D round the eight
    full split sums side by side were faster than with the tests, although the tests stopped most sums.
    Returns the number of insertions.
    """
    deltas_to_rows(q, cq, points, conf, cand[:m], True, cand_d)
    changed = 0
    for s in range(m):
        changed += _offer_to_row(cand_d[s], cand[s], row_d, row_i, row_f)
    return changed


@nb.njit(cache=True)
def _refine_row_screened(p, points, conf, new_i, old_i, row_d, row_i, row_f, seen, tag, cand, cand_d, codes, info,
                         eta, qf, kept):
    """:func:`_refine_row_batched` with the candidates screened first by their one-byte codes
    (:func:`~hypann.geometry.screen_codes.screen_rejects`, ``eta`` its margin): a candidate whose computed
    ``delta`` is proved ``>=`` the row's worst key before the round's offers to ``p`` is left out, the
    others are offered in the same order. The worst key only falls while they are offered, so the row would
    have rejected every one left out: the same insertions, reading the codes (a quarter of a float32 row)
    instead of most rows. The codes of the candidates :data:`SCREEN_AHEAD` places on are announced before
    they are read (:mod:`hypann._prefetch`). ``qf``: room for ``p``'s coordinates in float32; ``kept`` gains
    the candidates kept and met (``kept[0]``, ``kept[1]``)."""
    points, conf, new_i, old_i, row_d, row_i, row_f, seen, cand = _borrowed_row_arguments(
        points, conf, new_i, old_i, row_d, row_i, row_f, seen, cand)
    cand_d = borrowed(cand_d)
    codes, info, qf, kept = borrowed(codes), borrowed(info), borrowed(qf), borrowed(kept)
    m = _pull_candidates(p, new_i, old_i, seen, tag, cand)
    worst = np.float64(row_d[row_d.shape[0] - 1])
    cq = conf[p]
    for j in range(qf.shape[0]):
        qf[j] = np.float32(points[p, j])
    for s in range(min(m, SCREEN_AHEAD)):
        prefetch_row(codes, cand[s])
        prefetch_row(info, cand[s])
    k = 0
    for s in range(m):
        if s + SCREEN_AHEAD < m:
            prefetch_row(codes, cand[s + SCREEN_AHEAD])
            prefetch_row(info, cand[s + SCREEN_AHEAD])
        v = cand[s]
        if not screen_rejects(qf, cq, codes, info, v, worst, eta):
            cand[k] = v  # k <= s: the kept candidates move to the front, in order
            k += 1
    kept[0] += k
    kept[1] += m
    return _offer_batched(points[p], cq, points, conf, cand, k, row_d, row_i, row_f, cand_d)


@nb.njit(cache=True, parallel=True)
def _refine(points, conf, new_i, old_i, row_d, row_i, row_f, visit, seen, codes, info, screen_kept):
    """One NN-descent round over all points (parallel blocks, each point writes its own row).

    Reads only the candidate lists (frozen for the round), so the result does
    not depend on the thread count (nor on the visit order). Points are
    visited in the order ``visit`` (a permutation: the leaf order of a
    partition tree, so that consecutive points share most candidates and
    their coordinates stay in the cache). Marks as in :func:`_init_graph`.
    Below :data:`REFINE_BATCH_MIN_DIM` dimensions the first :data:`PROBE_ROWS`
    points of a chunk abandon their sums early and count the coordinates
    read; when those are at least :data:`FULL_SUMS_FROM_SHARE` of the
    coordinates on average, the chunk's other points sum in full (the test at
    every coordinate then costs more than it saves), else they abandon too.
    Either way the same insertions (:func:`_refine_row`).
    From that dimension on, with one-byte codes of the points (``codes``, ``info``:
    :func:`~hypann.geometry.screen_codes.screen_codes`; none: ``(0, d)`` arrays), a chunk's points screen
    their candidates (:func:`_refine_row_screened`) in windows of at least :data:`SCREEN_WINDOW`
    candidates: after a window that kept more than ``screen_kept`` of them, the next
    :data:`SCREEN_RETRY_ROWS` points read every candidate's row (:func:`_refine_row_batched`), then a new
    window is screened. (A fixed probe at a chunk's start measured a few candidates in late rounds, and
    its part of a chunk could lie in other clusters than the rest.) Again the same insertions.
    Returns the number of row insertions.
    """
    n = points.shape[0]
    batched = points.shape[1] >= REFINE_BATCH_MIN_DIM
    screening = codes.shape[0] > 0
    eta = screen_margin(points.shape[1])
    n_chunks = (n + _CHUNK - 1) // _CHUNK
    counts = np.zeros(n_chunks, dtype=np.int64)
    for ch in nb.prange(n_chunks):
        mine = seen[nb.get_thread_id()]
        cand = np.empty(3 * new_i.shape[1] ** 2, dtype=new_i.dtype)  # the bound of _pull_candidates
        cand_d = np.empty(cand.shape[0])
        reads = np.zeros(2, dtype=np.int64)
        qd = np.empty(points.shape[1])  # _full_row's float64 copy of a point
        qf = np.empty(points.shape[1], dtype=np.float32)  # _refine_row_screened's float32 copy of a point
        kept = np.zeros(2, dtype=np.int64)  # the current window's candidates kept and met
        full = False
        screen = screening
        unscreened = 0  # points since the last window that kept too many
        c = 0
        first = ch * _CHUNK
        for i in range(first, min(n, first + _CHUNK)):
            p = visit[i]
            if batched and screen:
                c += _refine_row_screened(p, points, conf, new_i, old_i, row_d[p], row_i[p], row_f[p], mine, p + 1,
                                          cand, cand_d, codes, info, eta, qf, kept)
                if kept[1] >= SCREEN_WINDOW:
                    screen = kept[0] <= screen_kept * kept[1]
                    kept[:] = 0
                    unscreened = 0
                continue
            if batched:
                c += _refine_row_batched(p, points, conf, new_i, old_i, row_d[p], row_i[p], row_f[p], mine, p + 1,
                                         cand, cand_d)
                unscreened += 1
                screen = screening and unscreened >= SCREEN_RETRY_ROWS
                continue
            if i < first + PROBE_ROWS:
                c += _probe_row(p, points, conf, new_i, old_i, row_d[p], row_i[p], row_f[p], mine, p + 1, reads)
                full = reads[0] >= FULL_SUMS_FROM_SHARE * points.shape[1] * reads[1]
            elif full:
                c += _full_row(p, points, conf, new_i, old_i, row_d[p], row_i[p], row_f[p], mine, p + 1, reads, qd)
            else:
                c += _abandon_row(p, points, conf, new_i, old_i, row_d[p], row_i[p], row_f[p], mine, p + 1, reads)
        counts[ch] = c
    return counts.sum()


@nb.njit(cache=True, parallel=True)
def _row_deltas(points, conf, row_i):
    """Float64 ``delta`` of every row entry (``inf`` at ``-1``), in parallel over the points."""
    n, K = row_i.shape
    out = np.full((n, K), np.inf)
    for p in nb.prange(n):
        for j in range(K):
            v = row_i[p, j]
            if v >= 0:
                out[p, j] = delta_row(points[p], conf[p], points[v], conf[v])
    return out


def _forest(points, leaf_size, n_trees, seed, index_dtype):
    """The ``n_trees`` partition trees seeding NN-descent (a function of ``seed``: rebuilt identically)."""
    seeds = np.array([int(mix_seed(seed, 7, t)) for t in range(n_trees)], dtype=np.uint64)
    return build_forest(points, leaf_size, seeds, index_dtype)


def nn_descent(points, conf, K, *, n_trees, leaf_size, max_candidates, max_rounds, tol, seed, return_deltas=True,
               index_dtype=None, forest=None):
    """Approximate ``K`` nearest neighbours of every point: ``(ids, deltas)``, ascending.

    Initial rows come from ``n_trees`` Apollonian partition trees (every pair
    sharing a leaf), then NN-descent rounds in pull form until fewer than
    ``tol * n * K`` row entries change (or ``max_rounds``). Rows are ranked by
    float32 keys of ``delta``; the returned ``deltas`` (float64, exact for the
    returned ids) are recomputed, and ``None`` with ``return_deltas=False``.
    From :data:`SCREEN_MIN_DIM` dimensions on, the rounds screen their
    candidates by one-byte codes of the points (made here, freed after the
    rounds; :func:`_refine`), which changes their speed only.

    ``index_dtype`` (default int32 below ``2^31`` points, see
    :func:`~hypann.graph.partition_tree.forest_index_dtype`) is the type of
    the ids and of every id array of the build; the result does not depend
    on it.

    ``forest``, optional, is ``_forest(points, leaf_size, n_trees, seed,
    index_dtype)`` made by the caller, who keeps it (for the bridges of
    :func:`_build_search_graph`); otherwise the trees are made here and freed
    after the initial rows. The result is the same.

    The kernels get read-only views of ``points`` and ``conf`` (:func:`~hypann._runtime.read_only`):
    one compiled type whether the caller's arrays are writable or not.
    """
    points, conf = read_only(points), read_only(conf)
    n = points.shape[0]
    dtype = forest_index_dtype(n) if index_dtype is None else index_dtype
    # the arrays that live through the rounds first, the trees (freed after the initial rows) last,
    # so that the trees' memory is at the top of the heap and can go back to the system
    row_i = np.full((n, K), -1, dtype=dtype)
    row_d = np.full((n, K), np.inf, dtype=np.float32)
    row_f = np.zeros((n, K), dtype=np.bool_)
    visit = np.empty(n, dtype=dtype)
    leaf_ranges, orders = _forest(points, leaf_size, n_trees, seed, dtype) if forest is None else forest
    _init_graph(points, conf, leaf_ranges, orders, 2 * leaf_size, np.uint64(seed), row_i, row_d, row_f,
                _thread_marks(n, dtype))
    visit[:] = orders[0]
    del leaf_ranges, orders
    release_freed_heap()
    progress.advance(stage="initial graph")
    d = points.shape[1]
    if max(SCREEN_MIN_DIM, REFINE_BATCH_MIN_DIM) <= d <= SCREEN_MAX_DIM and max_rounds > 0:
        codes, info = screen_codes(points, conf)
    else:
        codes, info = np.empty((0, d), dtype=np.int8), np.empty((0, 4))
    for rnd in range(max_rounds):
        new_i, old_i = _candidates(row_i, row_f, max_candidates, _round_base(seed, rnd), CANDIDATE_BLOCKS)
        changed = _refine(points, conf, new_i, old_i, row_d, row_i, row_f, visit, _thread_marks(n, dtype), codes,
                          info, SCREEN_KEPT)
        del new_i, old_i
        logger.debug("nn-descent round %d: %d changes", rnd, changed)
        progress.advance(stage=f"nn-descent round {rnd + 1}: {changed:,} changes")
        if changed <= tol * n * K:
            break
    del row_d, row_f, codes, info
    if not return_deltas:
        return row_i, None
    deltas = _row_deltas(points, conf, row_i)
    # float32 keys can tie where the float64 deltas differ: order each row by the exact value (stable)
    order = np.argsort(deltas, axis=1, kind="stable")
    return np.take_along_axis(row_i, order, axis=1), np.take_along_axis(deltas, order, axis=1)


@nb.njit(cache=True)
def _find(parent, x):
    while parent[x] != x:
        parent[x] = parent[parent[x]]
        x = parent[x]
    return x


@nb.njit(cache=True)
def components(row_i):
    """Connected components of the k-NN graph taken as undirected (union-find, serial).

    Returns a component id per point (the smallest point id of the component).
    """
    n, K = row_i.shape
    parent = np.arange(n)
    for p in range(n):
        for j in range(K):
            v = row_i[p, j]
            if v < 0:
                break
            a = _find(parent, p)
            b = _find(parent, v)
            if a < b:
                parent[b] = a
            elif b < a:
                parent[a] = b
    comp = np.empty(n, dtype=np.int64)
    for p in range(n):
        comp[p] = _find(parent, p)
    return comp


@nb.njit(cache=True)
def _bridge_row(p, points, conf, comp, leaf_ranges, orders, max_members, seed, out_d, out_i):
    """Nearest points of *other* components among the leaf mates of ``p`` in every tree."""
    # the arrays are the caller's: their views here need no reference counts (hypann._borrowed)
    points, conf, comp, leaf_ranges, orders = borrowed(points), borrowed(conf), borrowed(comp), \
        borrowed(leaf_ranges), borrowed(orders)
    out_d, out_i = borrowed(out_d), borrowed(out_i)
    for tr in range(orders.shape[0]):
        lo, size, take, off = _leaf_window(leaf_ranges, p, tr, max_members, seed)
        for s in range(take):
            v = orders[tr, lo + (off + s) % size]
            if comp[v] == comp[p]:
                continue
            d = delta_row(points[p], conf[p], points[v], conf[v])
            if d < out_d[out_d.shape[0] - 1]:
                _keep_smallest(out_d, out_i, d, v)


@nb.njit(cache=True, parallel=True)
def _bridges(points, conf, comp, leaf_ranges, orders, n_bridges, max_members, seed):
    """Up to ``n_bridges`` edges per point to the nearest points of other components sharing a leaf.

    Returns ``(ids, deltas)`` of shape ``(n, n_bridges)``, ids of the type of ``orders``.
    """
    n = points.shape[0]
    out_i = np.full((n, n_bridges), -1, dtype=orders.dtype)
    out_d = np.full((n, n_bridges), np.inf)
    for p in nb.prange(n):
        _bridge_row(p, points, conf, comp, leaf_ranges, orders, max_members, seed, out_d[p], out_i[p])
    return out_i, out_d


# --------------------------------------------------------------------------- search graph


# Blocks of target points whose reverse lists are gathered at a time (each block scans all rows
# once; the lists take about n K / _REVERSE_BLOCKS ids).
_REVERSE_BLOCKS = 8


#: Reverse neighbours of a point whose deltas :func:`_search_row` computes together (the scratch it takes).
_REVERSE_BATCH = 64


@nb.njit(cache=True)
def _search_row(p, points, conf, row_i, rev_start, rev_stop, src, first_i, max_copies, fwd_d, fwd_i, rev_d, rev_i,
                scratch, out):
    """Out-list of ``p`` (see :func:`_search_graph`) into ``out`` (``-1`` padded), from float64 deltas; returns
    how many of its first entries are edges of ``first_i`` (the rest are nearest first).

    ``src[rev_start:rev_stop]`` are the points whose rows hold ``p``. ``scratch``:
    float64, at least ``max(K, _REVERSE_BATCH)`` entries (the deltas of
    :func:`deltas_to_rows` before they are sorted in).
    """
    # the arrays are the caller's: their views here need no reference counts (hypann._borrowed)
    points, conf, row_i, src, first_i = borrowed(points), borrowed(conf), borrowed(row_i), borrowed(src), \
        borrowed(first_i)
    fwd_d, fwd_i, rev_d, rev_i, scratch, out = borrowed(fwd_d), borrowed(fwd_i), borrowed(rev_d), borrowed(rev_i), \
        borrowed(scratch), borrowed(out)
    K = row_i.shape[1]
    D = out.shape[0]
    for t in range(K):
        fwd_d[t] = np.inf
        fwd_i[t] = -1
    for t in range(D):
        rev_d[t] = np.inf
        rev_i[t] = -1
        out[t] = -1
    # the k-NN row by its exact delta; stable (the row's order breaks ties)
    nf = 0
    while nf < K and row_i[p, nf] >= 0:
        nf += 1
    deltas_to_rows(points[p], conf[p], points, conf, row_i[p, :nf], False, scratch)
    for j in range(nf):
        # the list grows by one: insert into its first j + 1 slots (the last one is free)
        insert_sorted(fwd_d[:j + 1], fwd_i[:j + 1], scratch[j], row_i[p, j])
    # the D nearest reverse neighbours (ties: smaller p first)
    for first in range(rev_start, rev_stop, _REVERSE_BATCH):
        last = min(first + _REVERSE_BATCH, rev_stop)
        deltas_to_rows(points[p], conf[p], points, conf, src[first:last], False, scratch)
        for s in range(first, last):
            d = scratch[s - first]
            if d < rev_d[D - 1]:
                insert_sorted(rev_d, rev_i, d, src[s])
    a = 0
    b = 0
    c = 0
    copies = 0
    for t in range(first_i.shape[1]):
        v = first_i[p, t]
        if v >= 0 and c < D and not holds(out, c, v):
            out[c] = v
            c += 1
    n_first = c
    while c < D:
        has_fwd = a < nf
        has_rev = b < D and rev_i[b] >= 0
        if not (has_fwd or has_rev):
            break
        if has_fwd and (not has_rev or fwd_d[a] <= rev_d[b]):
            v = fwd_i[a]
            d = fwd_d[a]
            a += 1
        else:
            v = rev_i[b]
            d = rev_d[b]
            b += 1
        if d == 0.0:
            if copies >= max_copies:
                continue
        if holds(out, c, v):
            continue
        if d == 0.0:
            copies += 1
        out[c] = v
        c += 1
    return n_first


@nb.njit(cache=True, parallel=True)
def _search_rows(points, conf, row_i, lo, start, src, first_i, max_copies, nbrs, n_first):
    """Rows ``lo .. lo + len(start) - 2`` of the search graph into ``nbrs``, and how many of each row's first
    entries are edges of ``first_i`` into ``n_first`` (parallel blocks, own rows only)."""
    K = row_i.shape[1]
    max_degree = nbrs.shape[1]
    m = start.shape[0] - 1
    n_chunks = (m + _CHUNK - 1) // _CHUNK
    for ch in nb.prange(n_chunks):
        fwd_d = np.empty(K)
        fwd_i = np.empty(K, dtype=np.int64)
        rev_d = np.empty(max_degree)
        rev_i = np.empty(max_degree, dtype=np.int64)
        scratch = np.empty(max(K, _REVERSE_BATCH))
        for t in range(ch * _CHUNK, min(m, (ch + 1) * _CHUNK)):
            n_first[lo + t] = _search_row(lo + t, points, conf, row_i, start[t], start[t + 1], src, first_i,
                                          max_copies, fwd_d, fwd_i, rev_d, rev_i, scratch, nbrs[lo + t])


def _search_graph(points, conf, row_i, first_i, max_degree, max_copies):
    """Adjacency of the search graph: each k-NN row merged with its reverse edges.

    Point ``p`` links to its k-NN row and to the points whose rows hold ``p``
    (reverse edges, :func:`_reverse_lists`), nearest first by the float64
    ``delta`` (recomputed from the points: the rows' keys are float32),
    without repeats, at most ``max_degree`` in all; reverse edges of a point
    are limited to its ``max_degree`` nearest (ties: the smaller id first).
    At most ``max_copies`` neighbours at ``delta = 0`` (exact copies of ``p``)
    are kept, so a group of copies larger than a row still links to the rest
    of the data. The edges of ``first_i`` come first (bridges, then long edges; ``-1`` padded, repeats
    dropped). The reverse lists are gathered for
    :data:`_REVERSE_BLOCKS` blocks of points in turn (about ``n K / 8`` ids
    at a time); within a block, parallel chunks each write their own rows,
    so the result does not depend on the thread count.

    Returns
    -------
    nbrs : ndarray of shape (n, max_degree), int32, ``-1`` padded
    n_first : ndarray of shape (n,), uint8
        How many of each row's first entries are edges of ``first_i`` (at most ``max_degree``).
    """
    n = row_i.shape[0]
    nbrs = np.empty((n, max_degree), dtype=np.int32)
    n_first = np.empty(n, dtype=np.uint8)
    step = max(_CHUNK, -(-n // _REVERSE_BLOCKS))
    for lo in range(0, n, step):
        hi = min(n, lo + step)
        start, src = _reverse_lists(row_i, lo, hi)
        _search_rows(points, conf, row_i, lo, start, src, first_i, max_copies, nbrs, n_first)
        del start, src
    return nbrs, n_first


@nb.njit(cache=True)
def _pruned_row(p, points, conf, row, n_first, keep, split, mute, row_d, dom, out):
    """One row of :func:`relative_neighbourhood_rows` into ``out`` (``-1`` padded); ``row_d`` and ``dom``:
    scratch of the row's length (the deltas, the kept neighbours that may dominate)."""
    # the arrays are the caller's: their views here need no reference counts (hypann._borrowed)
    points, conf, row, mute, row_d, dom, out = borrowed(points), borrowed(conf), borrowed(row), borrowed(mute), \
        borrowed(row_d), borrowed(dom), borrowed(out)
    D = row.shape[0]
    end = n_first
    while end < D and row[end] >= 0:
        end += 1
    if not split:  # delta(p, v) of the nearest-first part, eight sums side by side: delta_row's bits
        deltas_to_rows(points[p], conf[p], points, conf, row[n_first:end], False, row_d)
    out[:n_first] = row[:n_first]
    c = n_first
    n_dom = 0
    for t in range(n_first, end):
        v = row[t]
        if c - n_first >= keep:
            # delta(p, v) summed as dominated sums delta(u, v): with split sums, delta_split_below's bits, so that
            # an exact copy u of p ties with p (not nearer to v by a rounding)
            dv = delta_split_below(points[v], conf[v], points[p], conf[p], np.inf) if split else row_d[t - n_first]
            if dominated(points, conf, dom, n_dom, v, dv, split):
                continue
        out[c] = v
        c += 1
        if not mute[v]:
            dom[n_dom] = v
            n_dom += 1
    out[c:] = -1


@nb.njit(cache=True, parallel=True)
def relative_neighbourhood_rows(points, conf, nbrs, n_first, keep, mute):
    """The search graph ``nbrs`` pruned by the relative-neighbourhood rule (a new array of its shape).

    Row ``p`` keeps its first ``n_first[p]`` entries (bridges and long edges)
    and the first ``keep`` of the rest (its nearest neighbours: the rest of
    a row is nearest first); every later neighbour ``v`` is kept unless a
    neighbour ``u`` kept before it is nearer to it than ``p`` is,
    ``delta(u, v) < delta(p, v)`` (the rule of the relative-neighbourhood
    graph; ``delta`` is monotone in the distance), tested as the long edges
    test it (:func:`~hypann.graph.long_edges.dominated`: from 16
    coordinates on with sums split over four lanes, ``delta(p, v)`` too, so
    that an exact copy of ``p`` ties with it; a near tie within a few units in
    the last place may go either way). Such a ``v`` is reached
    through ``u``, so a walk that expands ``p`` need not evaluate it. On
    hierarchies most of a row goes (the 10-D tree: out-degree 29 to 12 with
    ``keep`` 12), and a walk reaches the same recall with about 0.7 of the
    evaluations; on clusters and uniform data recall drops more than the
    evaluations do (``HyperbolicGraphIndex``'s ``prune`` chooses). Parallel
    over rows, each written by one thread: the result does not depend on the
    thread count.

    A kept neighbour ``u`` with ``mute[u]`` (a boolean per row of ``points``)
    dominates nothing: the points the calibration searches leave-one-out.
    A left-out point cannot relay the walk to the neighbours it took from
    other rows, which a held-out query never took, so without this the
    calibration can underrate the pruned graph (on 100,000 rays by 0.0016,
    ``benchmarks/graph_calibration.py --leave-one-out``; ``docs/benchmarks.md``,
    "The calibration holds the boundary too").
    """
    n, D = nbrs.shape
    split = split_sums_for(points.shape[1])
    out = np.empty((n, D), dtype=np.int32)
    n_chunks = (n + _CHUNK - 1) // _CHUNK
    for ch in nb.prange(n_chunks):
        row_d = np.empty(D)
        dom = np.empty(D, dtype=np.int64)
        for p in range(ch * _CHUNK, min(n, (ch + 1) * _CHUNK)):
            _pruned_row(p, points, conf, nbrs[p], min(np.int64(n_first[p]), D), keep, split, mute, row_d, dom,
                        out[p])
    return out


def _build_search_graph(points, conf, K, D, n_trees, leaf_size, max_rounds, seed):
    """The search graph of ``points`` (:func:`_search_graph` of the NN-descent graph, with bridges
    between its components when it has several, and long edges, :mod:`hypann.graph.long_edges`); returns
    ``(neighbours, number of components, n_first)``, ``n_first`` as :func:`_search_graph` gives it. The
    kernels get read-only views of ``points`` and ``conf`` (:func:`nn_descent`)."""
    points, conf = read_only(points), read_only(conf)
    n = points.shape[0]
    dtype = forest_index_dtype(n)
    tree_bytes = n_trees * 3 * np.dtype(dtype).itemsize  # a point's leaf range and position in every tree
    point_bytes = points.shape[1] * points.itemsize + conf.itemsize
    forest = _forest(points, leaf_size, n_trees, seed, dtype) if tree_bytes <= KEEP_TREES_UP_TO * point_bytes else None
    row_i, _ = nn_descent(points, conf, K, n_trees=n_trees, leaf_size=leaf_size, max_candidates=min(K, MAX_CANDIDATES),
                          max_rounds=max_rounds, tol=NN_DESCENT_TOL, seed=seed, return_deltas=False,
                          index_dtype=dtype, forest=forest)
    release_freed_heap()  # the rounds' keys, flags and candidate lists
    comp = components(row_i)
    n_comp = int(np.count_nonzero(comp == np.arange(n)))
    if n_comp > 1:
        # the trees that seeded NN-descent: kept, or rebuilt from their seeds (freed after the initial rows)
        leaf_ranges, orders = _forest(points, leaf_size, n_trees, seed, dtype) if forest is None else forest
        bridge_i, _ = _bridges(points, conf, comp, leaf_ranges, orders, min(N_BRIDGES, D), 2 * leaf_size,
                               np.uint64(seed))
        del leaf_ranges, orders
    else:
        bridge_i = np.full((n, 0), -1, dtype=dtype)
    del comp, forest
    release_freed_heap()  # the components' labels and, with bridges, the trees and their deltas
    first_i = np.concatenate([bridge_i, long_edges(points, conf, row_i, seed)], axis=1)  # both of row_i's dtype
    del bridge_i
    nbrs, n_first = _search_graph(points, conf, row_i, first_i, D, max(1, D // 2))
    del row_i, first_i
    release_freed_heap()
    return nbrs, n_comp, n_first


@nb.njit(cache=True, parallel=True)
def _positions_to_rows(nbrs, order):
    """Replace every id ``v >= 0`` of ``nbrs`` by ``order[v]`` (tree position -> input row), in place."""
    for p in nb.prange(nbrs.shape[0]):
        for j in range(nbrs.shape[1]):
            v = nbrs[p, j]
            if v >= 0:
                nbrs[p, j] = order[v]


# --------------------------------------------------------------------------- search


@nb.njit(cache=True, inline="always")
def _take_unvisited(u, n, seen, tag, batch, got):
    """Mark ``u`` visited and put it at ``batch[got]`` unless it is visited already or not a row of
    ``[0, n)`` (ids out of range come only from a damaged file opened without reading them);
    returns the new count."""
    if u < 0 or u >= n or seen[u] == tag:
        return got
    seen[u] = tag
    batch[got] = u
    return got + 1


@nb.njit(cache=True, inline="always")
def _offer_batch(q, cq, points, conf, batch, got, lst_d, lst_i, lst_e, size, ef, low, split):
    """Offer the points ``batch[:got]`` (``got <= 4``) to the search list in order; returns ``(size, low)``.

    Their deltas are four sums side by side (:func:`delta4_below`) when
    ``got == 4``, else one at a time (:func:`delta_row_below`), each
    abandoned against the list's worst entry: that worst only falls while
    they are offered, in order, so a point abandoned against it could not
    have entered the list (the same offers as with full deltas). With
    ``split`` (a graph's ``split_keys_``, from 16-D on) the sums are split
    over four lanes (:func:`delta4_split_below`, :func:`delta_split_below`:
    a point's value is the same bits either way), and :func:`_exact_front`
    gives the reported entries their exact values. ``low`` becomes the
    smallest position a point was inserted at, if below it.
    """
    if got == 4:
        u0, u1, u2, u3 = batch[0], batch[1], batch[2], batch[3]
        if split:
            d0, d1, d2, d3 = delta4_split_below(q, cq, points[u0], conf[u0], points[u1], conf[u1], points[u2],
                                                conf[u2], points[u3], conf[u3], lst_d[ef - 1])
        else:
            d0, d1, d2, d3 = delta4_below(q, cq, points[u0], conf[u0], points[u1], conf[u1], points[u2], conf[u2],
                                          points[u3], conf[u3], lst_d[ef - 1])  # inf until the list is full
        size, pos = _list_offer(lst_d, lst_i, lst_e, size, ef, d0, u0)
        low = pos if 0 <= pos < low else low
        size, pos = _list_offer(lst_d, lst_i, lst_e, size, ef, d1, u1)
        low = pos if 0 <= pos < low else low
        size, pos = _list_offer(lst_d, lst_i, lst_e, size, ef, d2, u2)
        low = pos if 0 <= pos < low else low
        size, pos = _list_offer(lst_d, lst_i, lst_e, size, ef, d3, u3)
        low = pos if 0 <= pos < low else low
    else:
        for t in range(got):
            u = batch[t]
            if split:
                d = delta_split_below(q, cq, points[u], conf[u], lst_d[ef - 1])
            else:
                d = delta_row_below(q, cq, points[u], conf[u], lst_d[ef - 1])
            size, pos = _list_offer(lst_d, lst_i, lst_e, size, ef, d, u)
            low = pos if 0 <= pos < low else low
    return size, low


@nb.njit(cache=True)
def _search_one(points, conf, nbrs, pivots, thresholds, children, ranges, order, leaf_order, split_keys, n_seeds,
                pivot_node_size, upper, far_ratio, q, cq, ef, budget, exclude, seen, tag, lst_d, lst_i, lst_e, batch):
    """Best-first search for ``q`` with a list of ``ef`` entries, seeded from the tree leaf of ``q``.

    Fills ``lst_d/lst_i`` (ascending, ``inf``/-1 pad; ids of ``points``' rows)
    and returns the number of distance evaluations (at most ``budget``).
    When the walk ends far from the data (the module docstring's test with
    :data:`FAR_RATIO` and :data:`FAR_RANK`), the list grows to
    ``max(ef, FAR_EF)`` entries (the buffers hold at least that many when
    ``upper`` is not empty), the points ``upper`` (the entry tree's upper
    pivots; none: no second stage) are offered to it, and the walk goes on
    from its nearest unexpanded entry.
    ``leaf_order``: the points are stored in the tree's leaf order, so leaf
    slot ``s`` is row ``s``; otherwise it is row ``order[s]``. ``split_keys``:
    the tree was built with ``split_sums`` (descended with the same sums,
    :func:`~hypann.graph.partition_tree.pivot_sums`). Neighbour and
    leaf ids outside ``[0, n)`` are skipped, so a memory-mapped file opened
    without reading them (``verify="structure"``) cannot make it read out of
    bounds.
    """
    # the arrays are the caller's: their views here need no reference counts (hypann._borrowed)
    points, conf, nbrs, pivots, thresholds = borrowed(points), borrowed(conf), borrowed(nbrs), borrowed(pivots), \
        borrowed(thresholds)
    children, ranges, order, upper, q = borrowed(children), borrowed(ranges), borrowed(order), borrowed(upper), \
        borrowed(q)
    seen, lst_d, lst_i, lst_e, batch = borrowed(seen), borrowed(lst_d), borrowed(lst_i), borrowed(lst_e), \
        borrowed(batch)
    for t in range(ef):
        lst_d[t] = np.inf
        lst_i[t] = -1
        lst_e[t] = False
    if exclude >= 0:
        seen[exclude] = tag
    # typed int64 from the start: numba would compile _offer_seeds once more for the literal 0
    size = np.int64(0)
    cnt = np.int64(0)
    # descend the tree; the pivots met on the way are seeds too (their |q-x|^2 is
    # computed for the side test anyway): deep pivots lie near q even when q
    # falls on the wrong side of a split (see the module docstring)
    node = 0
    while children[node, 0] >= 0:
        a = pivots[node, 0]
        b = pivots[node, 1]
        _prefetch_child_pivots(node, pivots, children, points)
        da, db = pivot_sums(q, points[a], points[b], split_keys)
        local = ranges[node, 1] - ranges[node, 0] <= pivot_node_size
        for side in range(2):
            u = a if side == 0 else b
            if local and seen[u] != tag and cnt < budget:
                seen[u] = tag
                cnt += 1
                dd = (da if side == 0 else db) / (cq * conf[u])
                size, _ = _list_offer(lst_d, lst_i, lst_e, size, ef, dd, u)
        node = children[node, 0] if split_key(da, db) <= thresholds[node] else children[node, 1]
    lo = ranges[node, 0]
    size, cnt = _offer_seeds(q, cq, points, conf, nbrs.shape[0], order, leaf_order, lo,
                             min(ranges[node, 1], lo + n_seeds), budget, seen, tag, batch, lst_d, lst_i, lst_e, size,
                             ef, cnt, split_keys)
    size, cnt = _expand(q, cq, points, conf, nbrs, budget, seen, tag, batch, lst_d, lst_i, lst_e, size, ef, cnt,
                         split_keys)
    if upper.shape[0] == 0 or size < 2 or cnt >= budget:
        return cnt
    # far from the data (module docstring): the walk found points much nearer each other than q
    to_query, spread = _found_half_distances(points, conf, lst_d, lst_i, size)
    if not (spread > 0.0 and to_query > far_ratio * spread):
        return cnt
    # the list grows to FAR_EF entries (its buffers hold them: _search_range)
    far_ef = max(ef, min(FAR_EF, lst_d.shape[0]))
    for t in range(ef, far_ef):
        lst_d[t] = np.inf
        lst_i[t] = -1
        lst_e[t] = False
    ef = far_ef
    # typed values, not the literals False and 0: a literal argument would compile _offer_seeds a second time
    size, cnt = _offer_seeds(q, cq, points, conf, nbrs.shape[0], upper, np.bool_(False), np.int64(0),
                             upper.shape[0], budget, seen, tag, batch, lst_d, lst_i, lst_e, size, ef, cnt, split_keys)
    size, cnt = _expand(q, cq, points, conf, nbrs, budget, seen, tag, batch, lst_d, lst_i, lst_e, size, ef, cnt,
                         split_keys)
    return cnt


@nb.njit(cache=True)
def _offer_seeds(q, cq, points, conf, n, ids, identity, lo, hi, budget, seen, tag, batch, lst_d, lst_i, lst_e, size,
                 ef, cnt, split):
    """Offer the unvisited points ``ids[s]`` (``s`` itself when ``identity``) of ``lo <= s < hi`` to the search list,
    four at a time (:func:`_offer_batch`), while ``cnt`` (evaluations so far) stays below ``budget``; returns
    ``(size, cnt)``.

    The walk's seeds: the first points of the query's leaf (``ids`` the tree's ``order``, ``identity`` when the
    points are stored in leaf order) and, far from the data, the entry tree's upper pivots. A function of its
    own, not inlined, as :func:`_expand`: numba compiles every inlined copy of :func:`_offer_batch` anew, for
    seconds each. Ids outside ``[0, n)`` are skipped.
    """
    # the arrays are the caller's: their views here need no reference counts (hypann._borrowed)
    q, points, conf, ids, seen = borrowed(q), borrowed(points), borrowed(conf), borrowed(ids), borrowed(seen)
    batch, lst_d, lst_i, lst_e = borrowed(batch), borrowed(lst_d), borrowed(lst_i), borrowed(lst_e)
    s = lo
    while s < hi and cnt < budget:
        got = 0
        while s < hi and got < 4 and cnt + got < budget:
            got = _take_unvisited(s if identity else ids[s], n, seen, tag, batch, got)
            s += 1
        cnt += got
        size, _ = _offer_batch(q, cq, points, conf, batch, got, lst_d, lst_i, lst_e, size, ef, ef, split)
    return size, cnt


@nb.njit(cache=True, inline="always")
def _found_half_distances(points, conf, lst_d, lst_i, size):
    """``(d(q, r_1) / 2, d(r_1, r_m) / 2)`` of a search list of ``size >= 2`` found points, as
    ``asinh(sqrt(delta))``: ``r_1`` its nearest, ``r_m`` its ``FAR_RANK``-th (or its last when shorter), or its
    last when ``r_m`` is a copy of ``r_1`` (a graph in input order); the second is 0 when that is a copy too.

    The spread is between found points, not an examined one: it is not counted (the paper's samples).
    """
    first = lst_i[0]
    last = lst_i[min(size, FAR_RANK) - 1]
    spread = delta_row(points[first], conf[first], points[last], conf[last])
    if spread == 0.0:
        last = lst_i[size - 1]
        spread = delta_row(points[first], conf[first], points[last], conf[last])
    return np.arcsinh(np.sqrt(lst_d[0])), np.arcsinh(np.sqrt(spread))


@nb.njit(cache=True)
def _expand(q, cq, points, conf, nbrs, budget, seen, tag, batch, lst_d, lst_i, lst_e, size, ef, cnt, split):
    """Best-first expansion of the search list from its nearest unexpanded entry until every entry is
    expanded or ``cnt`` (evaluations so far) reaches ``budget``; returns ``(size, cnt)``.

    Expanding an entry offers its unvisited out-neighbours, four at a time
    (:func:`_offer_batch`, with its ``split``); the next entry expanded is the nearest one not yet expanded.
    A function of its own, called once or twice a walk, with :func:`_offer_batch` inlined into its loop: numba
    inlining it into :func:`_search_one` at both calls made the walk's first compilation take minutes.
    """
    # the arrays are the caller's: their views here need no reference counts (hypann._borrowed)
    q, points, conf, nbrs, seen = borrowed(q), borrowed(points), borrowed(conf), borrowed(nbrs), borrowed(seen)
    batch, lst_d, lst_i, lst_e = borrowed(batch), borrowed(lst_d), borrowed(lst_i), borrowed(lst_e)
    n = nbrs.shape[0]  # the graph's nodes: the points, or their first rows when copies are grouped
    cur = _first_unexpanded(lst_e, 0, size)
    deg = nbrs.shape[1]
    announce = prefetches_rows(points)
    while cur < size and cnt < budget:
        p = lst_i[cur]
        lst_e[cur] = True
        if announce:
            _prefetch_unvisited(p, nbrs, n, seen, tag, points, conf)
        else:
            _prefetch_next_row(cur, size, lst_i, lst_e, nbrs)
        low = size
        s = 0
        while s < deg:
            # the next (at most) four unvisited neighbours, within the budget
            got = 0
            while s < deg and got < 4:
                u = nbrs[p, s]
                if u < 0 or cnt + got >= budget:
                    s = deg
                    break
                s += 1
                got = _take_unvisited(u, n, seen, tag, batch, got)
            cnt += got
            size, low = _offer_batch(q, cq, points, conf, batch, got, lst_d, lst_i, lst_e, size, ef, low, split)
        cur = _first_unexpanded(lst_e, low if low <= cur else cur + 1, size)
    return size, cnt


@nb.njit(cache=True, inline="always")
def _first_unexpanded(lst_e, start, size):
    """The first position ``>= start`` of the search list's ``size`` entries not expanded yet (``lst_e``
    False), or ``size`` when there is none."""
    j = start
    while j < size and lst_e[j]:
        j += 1
    return j


@nb.njit(cache=True, inline="always")
def _prefetch_next_row(cur, size, lst_i, lst_e, nbrs):
    """Announce the neighbour row of the first entry after ``cur`` not expanded yet: the entry
    :func:`_expand` takes next unless the expansion of ``cur`` inserts one before it. Reading a
    neighbour row was where the 10-D walk waited most (a ``perf`` profile, scratch)."""
    j = _first_unexpanded(lst_e, cur + 1, size)
    if j < size:
        prefetch_row(nbrs, lst_i[j])


@nb.njit(cache=True, inline="always")
def _prefetch_child_pivots(node, pivots, children, points):
    """Announce the pivot rows of both children of an inner ``node`` of the entry tree: the descent reads
    one pair of them next (:mod:`hypann._prefetch`)."""
    for c in range(2):
        child = children[node, c]
        if child >= 0 and children[child, 0] >= 0:
            prefetch_row(points, pivots[child, 0])
            prefetch_row(points, pivots[child, 1])


@nb.njit(cache=True, inline="always")
def _prefetch_unvisited(p, nbrs, n, seen, tag, points, conf):
    """Announce the rows (and conformal factors) of ``p``'s unvisited out-neighbours, which
    :func:`_expand` is about to evaluate: their cache misses then overlap (:mod:`hypann._prefetch`)."""
    for s in range(nbrs.shape[1]):
        u = nbrs[p, s]
        if u < 0:
            break
        if u < n and seen[u] != tag:
            prefetch_row(points, u)
            prefetch_item(conf, u)
            prefetch_row(nbrs, u)


@nb.njit(cache=True)
def _exact_front(q, cq, points, conf, groups, k, ef, lst_d, lst_i):
    """Give the entries of a searched list that a ``k``-row answer reports their :func:`delta_row` value, bit
    for bit, and sort them by it (stable).

    For a graph whose entry tree sums its split keys over four lanes (``split_keys``): the descent offers its
    pivots with those sums, a few units in the last place off :func:`delta_row`'s, which every other entry
    has. The reported entries are the first nodes of the list (its first ``ef``; ``-1`` ends it) up to ``k``
    rows, a node counting with its copies (``groups``, :attr:`HyperbolicGraphIndex.copy_groups_`, as
    :func:`_search_range` reports them); they stay the reported nodes in any order. Their sums run eight
    rows side by side, each in :func:`~hypann.geometry._kernels.sq_dist_row`'s order
    (:func:`~hypann.geometry._kernels.sq_dist8`; a last group short of eight repeats its last row). A
    function of its own (not inlined), called once a query.
    """
    n = points.shape[0]
    grouped = groups.shape[0] > 0
    rows = 0
    m = 0
    while m < ef and rows < k and lst_i[m] >= 0:
        u = lst_i[m]
        rows += 1
        if grouped:
            rows += max(min(groups[u + 1], n) - max(groups[u], 0), 0)
        m += 1
    for t in range(0, m, 8):
        last = m - 1
        ids = (lst_i[min(t, last)], lst_i[min(t + 1, last)], lst_i[min(t + 2, last)], lst_i[min(t + 3, last)],
               lst_i[min(t + 4, last)], lst_i[min(t + 5, last)], lst_i[min(t + 6, last)], lst_i[min(t + 7, last)])
        sums = sq_dist8(q, (points[ids[0]], points[ids[1]], points[ids[2]], points[ids[3]], points[ids[4]],
                            points[ids[5]], points[ids[6]], points[ids[7]]), False)
        for r in range(min(8, m - t)):
            lst_d[t + r] = sums[r] / (cq * conf[ids[r]])
    for t in range(1, m):  # each entry into the sorted ones before it (equal values keep their order)
        insert_sorted(lst_d[:t + 1], lst_i[:t + 1], lst_d[t], lst_i[t])


@nb.njit(cache=True, inline="always")
def _emit_row(u, d, n, row_i, row_d, out):
    """Write input row ``u`` at ``delta = d`` to slot ``out`` of an answer row, or ``-1`` (``inf``) when ``u`` is
    not a row of ``[0, n)`` (only from a damaged file opened without reading it); returns ``out + 1``."""
    ok = 0 <= u < n
    row_i[out] = u if ok else -1
    row_d[out] = d if ok else np.inf
    return out + 1


@nb.njit(cache=True)
def _search_range(points, conf, nbrs, pivots, thresholds, children, ranges, order, leaf_order, split_keys,
                  n_seeds, pivot_node_size, groups, upper, far_ratio, queries, q_conf, ef, budget, exclude, first, stop,
                  seen, tag0, out_i, out_d, samples):
    """Search queries ``first <= i < stop`` (:func:`_search_one`) into rows ``i`` of the outputs.

    Query ``i`` marks what it visits in ``seen`` with tag ``tag0 + i``; the
    caller guarantees that no entry of ``seen`` holds such a tag yet. The
    output ids are input rows: with ``leaf_order`` a found row ``u`` (a leaf
    slot) is reported as ``order[u]``, or as ``-1`` when that is not a row
    (only in a damaged file opened without reading ``order``). With copy
    ``groups`` (``len(groups) > 0``, see :attr:`HyperbolicGraphIndex.copy_groups_`)
    each found node is followed by its copies, input rows ``order[groups[u]:groups[u + 1]]``
    at the same ``delta``, until ``k`` rows are out.
    """
    k = out_i.shape[1]
    n = points.shape[0]
    grouped = groups.shape[0] > 0
    cap = max(ef, FAR_EF) if upper.shape[0] else ef  # a far query's list grows to FAR_EF (_search_one)
    lst_d = np.empty(cap)
    lst_i = np.empty(cap, dtype=np.int64)
    lst_e = np.empty(cap, dtype=np.bool_)
    batch = np.empty(4, dtype=np.int64)
    for i in range(first, stop):
        samples[i] = _search_one(points, conf, nbrs, pivots, thresholds, children, ranges, order, leaf_order,
                                 split_keys, n_seeds, pivot_node_size, upper, far_ratio, queries[i], q_conf[i], ef,
                                 budget[i], exclude[i], seen, tag0 + i, lst_d, lst_i, lst_e, batch)
        if split_keys:
            _exact_front(queries[i], q_conf[i], points, conf, groups, k, ef, lst_d, lst_i)
        out = 0
        for t in range(ef):
            if out == k:
                break
            u = lst_i[t]
            if u < 0:
                break
            d = lst_d[t]
            out = _emit_row(u if not leaf_order else order[u], d, n, out_i[i], out_d[i], out)
            if grouped:
                for s in range(max(groups[u], 0), min(groups[u + 1], n)):
                    if out == k:
                        break
                    out = _emit_row(order[s], d, n, out_i[i], out_d[i], out)
        for t in range(out, k):
            out_d[i, t] = np.inf
            out_i[i, t] = -1


@nb.njit(cache=True, parallel=True)
def _search(points, conf, nbrs, pivots, thresholds, children, ranges, order, leaf_order, split_keys, n_seeds,
            pivot_node_size, groups, upper, far_ratio, queries, q_conf, k, ef, budget, exclude, n_chunks, seen, tag0):
    """Search every query (:func:`_search_range`), parallel over chunks of queries.

    ``seen`` holds one row of visited marks per thread (``numba.get_thread_id()``
    is in ``[0, get_num_threads())``, the rows the caller gives); query ``i``
    uses tag ``tag0 + i``, so chunks that follow each other on a thread never
    see each other's marks. ``exclude[i] >= 0`` hides that point from query
    ``i`` (leave-one-out).
    """
    m = queries.shape[0]
    out_d = np.full((m, k), np.inf)
    out_i = np.full((m, k), -1, dtype=np.int64)
    samples = np.zeros(m, dtype=np.int64)
    per = (m + n_chunks - 1) // n_chunks
    for ch in nb.prange(n_chunks):
        _search_range(points, conf, nbrs, pivots, thresholds, children, ranges, order, leaf_order, split_keys,
                      n_seeds, pivot_node_size, groups, upper, far_ratio, queries, q_conf, ef, budget, exclude,
                      ch * per, min(m, (ch + 1) * per), seen[nb.get_thread_id()], tag0, out_i, out_d, samples)
    return out_i, out_d, samples


@nb.njit(cache=True)
def _search_serial(points, conf, nbrs, pivots, thresholds, children, ranges, order, leaf_order, split_keys,
                   n_seeds, pivot_node_size, groups, upper, far_ratio, queries, q_conf, k, ef, budget, exclude, seen,
                   tag0):
    """:func:`_search` on the calling thread (one row of marks ``seen``, tags from ``tag0`` on).

    For batches of at most ``SERIAL_MAX_QUERIES`` queries: no thread-pool launch.
    """
    m = queries.shape[0]
    out_d = np.full((m, k), np.inf)
    out_i = np.full((m, k), -1, dtype=np.int64)
    samples = np.zeros(m, dtype=np.int64)
    # typed, not the literal 0: a literal argument would compile _search_range anew
    _search_range(points, conf, nbrs, pivots, thresholds, children, ranges, order, leaf_order, split_keys, n_seeds,
                  pivot_node_size, groups, upper, far_ratio, queries, q_conf, ef, budget, exclude, np.int64(0), m,
                  seen, tag0, out_i, out_d, samples)
    return out_i, out_d, samples


@nb.njit(cache=True)
def _search_coordinates(points, conf, nbrs, pivots, thresholds, children, ranges, order, leaf_order, split_keys,
                        n_seeds, pivot_node_size, groups, upper, far_ratio, X, c, lorentz, ef, budget, exclude, seen,
                        tag, out_i, out_d, samples):
    """One query given by its coordinates ``X`` (1, d), or (1, d+1) on the hyperboloid when ``lorentz``, in
    curvature ``-c``: its input check
    (:func:`~hypann.geometry._kernels.one_query_start`, which fills ``out_i``, ``out_d`` (1, k) and
    ``samples`` (1,) with the empty answer) and, when it is a valid point, its search into them as
    :func:`_search_serial` does it, with tag ``tag`` on the one row of marks ``seen`` (1, n) (``budget``,
    ``exclude``: rows of one, read only). Returns whether ``X`` is a valid point."""
    queries, q_conf, valid = one_query_start(X, c, lorentz, out_i, out_d, samples)
    if valid:
        # typed, not the literals 0 and 1: literal arguments would compile _search_range anew
        _search_range(points, conf, nbrs, pivots, thresholds, children, ranges, order, leaf_order, split_keys,
                      n_seeds, pivot_node_size, groups, upper, far_ratio, queries, q_conf, ef, budget, exclude,
                      np.int64(0), np.int64(1), seen[0], tag, out_i, out_d, samples)
    return valid


@nb.njit(cache=True)
def _far_ratios(points, conf, nbrs, pivots, thresholds, children, ranges, order, leaf_order, split_keys, n_seeds,
                pivot_node_size, no_upper, sample, seen, tag0):
    """``asinh(sqrt(delta(q, r_1))) / asinh(sqrt(delta(r_1, r_10)))`` (the ratio of distances ``d(q, r_1) /
    d(r_1, r_10)``) of every node ``q = sample[i]``, searched leave-one-out by :func:`_search_one` with a list of
    ``FAR_RANK`` and no second stage (``no_upper``: :data:`_NO_UPPER`); ``nan`` where fewer than ``FAR_RANK``
    points are found or ``r_1`` and ``r_10`` coincide. Query ``i`` marks ``seen`` with tag ``tag0 + i``; the rows
    are the graph's own."""
    lst_d = np.empty(FAR_RANK)
    lst_i = np.empty(FAR_RANK, dtype=np.int64)
    lst_e = np.empty(FAR_RANK, dtype=np.bool_)
    batch = np.empty(4, dtype=np.int64)
    out = np.full(sample.shape[0], np.nan)
    # typed int64, not numba's literal types of the constants, and a float64 query also under float32 storage (the
    # walk widens every coordinate to float64, the same bits): otherwise _search_one would compile once more
    ef = np.int64(FAR_RANK)
    budget = np.int64(_NO_BUDGET)
    q = np.empty(points.shape[1])
    for i in range(sample.shape[0]):
        p = sample[i]
        q[:] = points[p]
        _search_one(points, conf, nbrs, pivots, thresholds, children, ranges, order, leaf_order, split_keys, n_seeds,
                    pivot_node_size, no_upper, np.inf, q, conf[p], ef, budget, p, seen, tag0 + i, lst_d, lst_i,
                    lst_e, batch)
        if lst_i[FAR_RANK - 1] >= 0:  # a full list
            to_query, spread = _found_half_distances(points, conf, lst_d, lst_i, FAR_RANK)
            if spread > 0.0:
                out[i] = to_query / spread
    return out


# --------------------------------------------------------------------------- calibration


def _leave_one_out_truth(points, conf, sample, k):
    """Exact ``k`` nearest ``delta`` of each sampled point among the *other* points (ascending)."""
    ids, deltas = knn_delta_scan(points[sample], conf[sample], points, conf, k + 1)
    drop = ids == sample[:, None]
    missing = ~drop.any(axis=1)  # more than k+1 copies: self may be left out; drop the last
    drop[missing, k] = True
    return deltas[~drop].reshape(len(sample), k)


def _calibration_sample(conformal, rng):
    """Leave-one-out calibration sample of the nodes (``conformal``: their ``1-|x|^2``), sorted, and its boundary
    mask: :data:`CALIBRATION_SIZE` nodes uniformly, then :data:`CALIBRATION_BOUNDARY_SIZE` of the
    :data:`BOUNDARY_SHARE` of the nodes with the smallest ``1-|x|^2`` (a node may be drawn by both)."""
    m = conformal.shape[0]
    uniform = rng.choice(m, size=min(m, CALIBRATION_SIZE), replace=False)
    n_edge = max(1, int(BOUNDARY_SHARE * m))
    edge = np.argsort(conformal, kind="stable")[:n_edge]
    edge = edge[rng.choice(n_edge, size=min(n_edge, CALIBRATION_BOUNDARY_SIZE), replace=False)]
    sample = np.concatenate([uniform, edge]).astype(np.int64)
    boundary = np.concatenate([np.zeros(uniform.shape[0], bool), np.ones(edge.shape[0], bool)])
    order = np.argsort(sample, kind="stable")  # row order: the searches read the rows in order
    return sample[order], boundary[order]


def _calibration_score(per_point, boundary):
    """``(recall, held)``: the calibration's recall, the lower of the mean recall ``r_u`` over the uniform sample
    and ``r_b`` over the boundary sample (``boundary``: its mask), and whether ``r_b >= r_u - BOUNDARY_GAP``
    (without a boundary sample: the mean over the sample, and ``True``)."""
    if boundary is None or not boundary.any():
        return float(np.mean(per_point)), True
    uniform, edge = float(np.mean(per_point[~boundary])), float(np.mean(per_point[boundary]))
    return min(uniform, edge), edge >= uniform - BOUNDARY_GAP


def _calibrate_ef(index, sample, truth, target, boundary=None):
    """Smallest ``ef`` of :data:`EF_LADDER` (then doubling up to ``n``) whose leave-one-out recall reaches ``target``.

    The recall is :func:`_calibration_score`: with a ``boundary`` mask over
    the sample, the lower of the uniform part's and the boundary part's
    (without one, the mean over the sample); an ``ef`` is kept only where the
    boundary part is also within :data:`BOUNDARY_GAP` of the uniform part.
    Returns ``(ef, recall, best, evaluations)``:
    ``best`` is the highest recall tried (``recall`` when the target is
    reached). When no ``ef`` reaches it (with the gap held), ``ef`` is the
    smallest whose recall is within :data:`CALIBRATION_PLATEAU` of ``best``. The ladder ends
    at ``n``, a list that can hold every node. A sample point whose ``k``
    neighbours were all found at a smaller ``ef`` is not searched again
    (counted as found: a longer list starts from the same entry points and
    only explores more), so each step searches only the points still missing
    a neighbour.

    The ladder stops early where the walk cannot pay: when even the smallest
    ``ef`` tried whose recall is within :data:`CALIBRATION_PLATEAU` of the best
    so far evaluated more than :data:`SCAN_FRACTION` of the ``n_points_`` per
    query, averaged over the uniform part (each point counted at its last
    search: at most what it would evaluate at a longer list), every ``ef`` the
    full ladder could choose evaluates more, and the default search scans
    every point (``scans_``) whatever it chooses. The points found earlier
    are then searched at the current ``ef`` too, and if the uniform part's
    mean evaluations there still exceed the fraction, ``ef`` is the current
    one and ``evaluations`` that mean; otherwise (and when the ladder runs
    to its end) ``evaluations`` is ``None``.
    """
    n = index.n_nodes_
    k = truth.shape[1]
    ladder = [e for e in EF_LADDER if e < n]
    e = EF_LADDER[-1]
    while e < n:
        e *= 2
        ladder.append(min(e, n))
    if not ladder or ladder[-1] < n:
        ladder.append(n)
    ladder = [max(e, k) for e in ladder]
    uniform = np.ones(len(sample), bool) if boundary is None else ~boundary
    scan_above = SCAN_FRACTION * index.n_points_
    per_point = np.zeros(len(sample))
    evaluations = np.zeros(len(sample))  # of each sample point at its last search
    tried = []
    for ef in ladder:
        todo = np.flatnonzero(per_point < 1.0)
        rows = sample[todo]
        _, deltas, samples = index._run(index.points_[rows], index.conformal_[rows], k, ef, None, rows, copies=False)
        evaluations[todo] = samples
        # by delta: monotone in the distance
        per_point[todo] = recall_per_query(deltas, truth[todo], k, epsilon=RECALL_RTOL)
        rec, held = _calibration_score(per_point, boundary)
        if rec >= target and held:
            return ef, rec, rec, None
        tried.append((ef, rec, float(np.mean(evaluations[uniform]))))
        best = max(r for _, r, _ in tried)
        if next(walked for _, r, walked in tried if r >= best - CALIBRATION_PLATEAU) > scan_above:
            found = np.flatnonzero(uniform & (per_point >= 1.0))
            if found.size:
                rows = sample[found]
                evaluations[found] = index._run(index.points_[rows], index.conformal_[rows], k, ef, None, rows,
                                                copies=False)[2]
            walked = float(np.mean(evaluations[uniform]))
            if walked > scan_above:
                return ef, rec, best, walked
            tried[-1] = (ef, rec, walked)  # measured, not bounded: the next step compares with it
    ef, rec = next((ef, rec) for ef, rec, _ in tried if rec >= best - CALIBRATION_PLATEAU)
    return ef, rec, best, None


# --------------------------------------------------------------------------- index


class HyperbolicGraphIndex:
    """k-NN graph of Poincare points, searched best-first from partition-tree entry points.

    Parameters
    ----------
    n_neighbors : int, default 24
        ``K``: neighbours per point in the k-NN graph (NN-descent).
    max_degree : int, default 40
        Largest out-degree of the search graph (k-NN row plus reverse edges).
    ef : int, optional
        Default search list size. ``None`` (default): calibrated at build
        time, the smallest ``ef`` whose leave-one-out recall@10 reaches
        ``target_recall`` both on :data:`CALIBRATION_SIZE` indexed points
        and on :data:`CALIBRATION_BOUNDARY_SIZE` points of the boundary
        tenth, the latter within :data:`BOUNDARY_GAP` of the former (stored
        as ``ef_``); when none does, the smallest within
        :data:`CALIBRATION_PLATEAU` of the best recall, with a warning. The
        calibration stops short of the target where the walk would
        evaluate more than :data:`SCAN_FRACTION` of the points (``scans_``):
        the default search is then the exact scan, and ``ef_`` the last
        ``ef`` tried (:func:`_calibrate_ef`).
    target_recall : float, default 0.98
        Recall@10 the calibrated ``ef`` reaches on the leave-one-out sample
        and on its boundary part (which must also come within
        :data:`BOUNDARY_GAP` of the rest).
    leaf_size : int, default 32
        Points per leaf of the partition trees; the search starts from the
        (at most ``leaf_size``) points of the query's leaf.
    n_trees : int, default 4
        Partition trees that seed NN-descent.
    max_rounds : int, default :data:`MAX_ROUNDS` (8)
        Largest number of NN-descent rounds (it stops earlier when a round
        changes fewer than ``NN_DESCENT_TOL n K`` row entries).
    prune : {"auto", "always", "never"}, default "auto"
        Prune the search graph by the relative-neighbourhood rule
        (:func:`relative_neighbourhood_rows`: drop a neighbour ``v`` of ``p``
        when a nearer kept neighbour ``u`` has ``d(u, v) < d(p, v)``, keeping
        the :data:`PRUNE_KEEP` nearest, the bridges and the long edges).
        ``"auto"``: calibrate ``ef`` on both graphs and keep the pruned one
        when it reaches ``target_recall`` with at most
        :data:`PRUNE_EVALUATIONS` of the evaluations per query: hierarchies
        do, clustered and uniform data do not. With a given ``ef`` there is
        no calibration and the graph stays unpruned. The pruned graph's
        recall can stop a little below the unpruned graph's at any ``ef``
        (the module docstring): ``"never"`` for the last fraction of a
        percent.
    random_state : int, default 0
        Seed of every random choice; the graph is a function of the seed and
        the points only (not of the number of threads).

    Attributes
    ----------
    neighbors_ : ndarray of shape (n, max_degree), int32
        Out-neighbours of each row of ``points_``: its bridges and long edges
        first, then its k-NN and reverse neighbours nearest first, ``-1``
        padded (rows of ``points_``).
    in_leaf_order_ : bool
        Whether ``points_`` holds the points in the entry tree's leaf order
        (``build(..., keep_order=True)``): row ``t`` of ``points_`` is input
        row ``tree_order_[t]``, and :meth:`search` reports input rows.
        Otherwise ``points_`` is in input order.
    split_keys_ : bool
        Whether the entry tree's split keys were summed over four lanes
        (from 16 dimensions on, ``SPLIT_SUMS_MIN_DIM``;
        :func:`~hypann.graph.partition_tree.pivot_sums`): a search descends
        it with the same sums. ``False`` for files written before the flag.
    copy_groups_ : ndarray of shape (m + 1,) or (0,), int64
        Groups of exact copies (rows equal bit for bit, coordinates and
        conformal factor: :func:`~hypann.graph.copies.copy_leaders`). A
        ``keep_order`` build of points with copies builds the graph over the
        ``m`` first rows of the groups only (the *nodes*, rows ``0 .. m-1``
        of ``points_``, in leaf order); the other copies of node ``u`` are rows
        ``copy_groups_[u] .. copy_groups_[u+1]-1`` (after the nodes, in
        increasing input row) and a search reports them right after ``u``, at
        its ``delta``. On data with many copies the graph is smaller and its
        lists do not fill with copies of one point. Empty when every point is
        a node.
    n_nodes_ : int
        Nodes of the graph (rows of ``neighbors_``): ``m``, or ``n`` without
        groups of copies.
    pruned_ : bool
        Whether ``neighbors_`` is pruned (``prune``). ``False`` for files
        written before pruning existed.
    prune_comparison_ : tuple of float or None
        ``prune="auto"``: the ``default_evaluations_`` of the pruned and of
        the unpruned graph, which the choice compared (``None`` otherwise;
        saved and loaded with the index).
    ef_ : int
        Default search list size (``ef`` or the calibrated value).
    calibration_recall_ : float
        Leave-one-out recall@10 at ``ef_``, the lower of the uniform
        sample's and the boundary sample's (``nan`` when ``ef`` was given).
    default_evaluations_ : float
        Mean distance evaluations per query of the search at ``ef_`` on every
        fourth point of the uniform part of the calibration's leave-one-out
        sample, on every point of that part where the calibration stopped for
        the scan (``nan`` when ``ef`` was given).
    scans_ : bool
        Whether the default search (no ``ef``, no ``budget``) is an exact
        scan of every point instead of the graph walk: when
        ``default_evaluations_`` exceeds :data:`SCAN_FRACTION` of the points,
        where the walk costs more than the scan and is not exact.

    Examples
    --------
    >>> import numpy as np
    >>> from hypann.geometry._kernels import conformal_factor
    >>> X = np.random.default_rng(0).uniform(-0.5, 0.5, (500, 3))
    >>> index = HyperbolicGraphIndex().build(X, conformal_factor(X))
    >>> ids, deltas, samples = index.search(X[:2], conformal_factor(X[:2]), 1)
    >>> ids[:, 0].tolist()
    [0, 1]
    """

    #: kernels every build runs (their on-disk cache shows whether a first build compiles)
    first_use_kernels = (_refine, _search)

    #: Input-order layout unless a build or a state says otherwise (also for objects pickled before the flag).
    in_leaf_order_ = False
    #: No groups of copies unless a build or a state has them (also for objects pickled before them).
    copy_groups_ = _NO_GROUPS
    #: Split keys summed in coordinate order unless a build or a state says otherwise (also for objects pickled
    #: before the flag).
    split_keys_ = False
    #: Not measured unless a calibration or a state gives it (also for objects pickled before it): no scan.
    default_evaluations_ = float("nan")
    #: Unpruned unless a build or a state says otherwise (also for objects pickled before pruning existed).
    pruned_ = False
    prune_comparison_ = None

    def __init__(self, *, n_neighbors=24, max_degree=40, ef=None, target_recall=0.98, leaf_size=32, n_trees=4,
                 max_rounds=MAX_ROUNDS, prune="auto", random_state=0):
        self.n_neighbors = n_neighbors
        self.max_degree = max_degree
        self.ef = ef
        self.target_recall = target_recall
        self.leaf_size = leaf_size
        self.n_trees = n_trees
        self.max_rounds = max_rounds
        self.prune = prune
        self.random_state = random_state

    def _check_settings(self):
        K = check_positive_int(self.n_neighbors, "n_neighbors")
        D = check_positive_int(self.max_degree, "max_degree")
        if D < K:
            raise ValueError(f"max_degree must be >= n_neighbors ({K}), got max_degree={D}")
        ef = check_positive_int(self.ef, "ef", allow_none=True)
        target = check_real(self.target_recall, "target_recall", low=0.0, high=1.0, low_open=True)
        check_positive_int(self.leaf_size, "leaf_size")
        check_positive_int(self.n_trees, "n_trees")
        check_positive_int(self.max_rounds, "max_rounds")
        if not isinstance(self.prune, str) or self.prune not in PRUNE_SETTINGS:
            raise ValueError(f"prune must be one of {PRUNE_SETTINGS}, got prune={self.prune!r}")
        rs = self.random_state
        if isinstance(rs, bool) or not isinstance(rs, (int, np.integer)) or rs < 0:
            raise ValueError(f"random_state must be a non-negative integer, got random_state={rs!r}")
        return K, D, ef, target

    def build(self, points, conformal, *, in_place=False, keep_order=False):
        """Build the graph on validated float64 or float32 ``points`` (n, d) with their stored ``conformal``.

        The index refers to ``points`` (no copy). Float32 points (float32
        storage) stay float32; every distance is computed in float64 from
        them and the float64 ``conformal``.

        The graph is built over the points in the leaf order of the
        entry-point tree (built first), so that points NN-descent compares
        with each other lie near each other in memory (far fewer cache misses
        on large data). The graph is a function of the seed and the points in
        their order.

        Parameters
        ----------
        points, conformal : ndarray
        in_place : bool, default False
            Reorder ``points`` and ``conformal`` themselves (when they are
            writeable) instead of a copy.
        keep_order : bool, default False
            Keep the points in leaf order after the build (see
            :attr:`in_leaf_order_`): ``points_`` is then the reordered array
            (the caller's own with ``in_place``, otherwise a reordered copy),
            neighbour ids are its rows, and searches map their answers to
            input rows through ``tree_order_``. A search then reads points
            that lie near each other in memory. Otherwise the graph's ids are
            mapped back to input rows at the end and, with ``in_place``, the
            caller's arrays are back in their order, bit for bit, before this
            returns (also after an error).

        Returns
        -------
        self
        """
        K, D, ef, target = self._check_settings()
        points, conformal = check_stored_points(points, conformal, allow_float32=True)
        n = points.shape[0]
        seed = int(self.random_state) & 0xFFFFFFFFFFFFFFFF
        in_place = in_place and points.flags.writeable and conformal.flags.writeable
        if keep_order:
            leader = copy_leaders(points, conformal)
            is_node = leader == np.arange(n)
            if not is_node.all():
                return self._build_grouped(points, conformal, leader, is_node, in_place, K, D, ef, target, seed)
            del leader, is_node
        K = min(K, max(n - 1, 1))
        tree = _entry_tree(points, self.leaf_size, seed)
        order = tree[4]  # tree position -> input row, points of a leaf side by side
        work, work_conformal = _gathered(points, conformal, order, in_place)
        try:
            self.neighbors_, n_comp, n_first = _build_search_graph(work, work_conformal, K, D, self.n_trees,
                                                                   self.leaf_size, self.max_rounds, seed)
        except BaseException:
            if in_place:
                gather_points_in_place(points, conformal, inverse_permutation(order))
            raise
        inverse = inverse_permutation(order)  # input row -> tree position
        self.copy_groups_ = _NO_GROUPS
        if keep_order:  # the pivots become rows of the reordered points too
            pivots = tree[0]
            inner = pivots[:, 0] >= 0
            pivots[inner] = inverse[pivots[inner]]
            points, conformal = work, work_conformal
        else:
            if in_place:
                gather_points_in_place(points, conformal, inverse)
            # graph ids and rows from tree positions back to input rows
            _positions_to_rows(self.neighbors_, order)
            gather_rows_in_place(self.neighbors_, inverse)
            n_first = n_first[inverse]
        del inverse, work, work_conformal
        release_freed_heap()
        self.in_leaf_order_ = bool(keep_order)
        return self._finish(points, conformal, tree, n_comp, n_first, K, D, ef, target, seed)

    def _build_grouped(self, points, conformal, leader, is_node, in_place, K, D, ef, target, seed):
        """:meth:`build` with ``keep_order`` of points with exact copies (``leader``: :func:`copy_leaders`;
        ``is_node``: ``leader == arange(n)``, the first row of each group).

        The graph and its entry tree are built over the ``m`` first rows of
        the groups of copies only (the *nodes*). ``points_`` holds the nodes
        in the tree's leaf order (rows ``0 .. m-1``), then the other copies,
        grouped by their node and in increasing input row within a group
        (rows ``m .. n-1``); :attr:`copy_groups_` says which.
        """
        nodes = np.flatnonzero(is_node)  # input rows, increasing
        copies = np.flatnonzero(~is_node)
        m = nodes.shape[0]
        K = min(K, max(m - 1, 1))
        arrangement = np.concatenate([nodes, copies])  # position -> input row, kept current for a rollback
        work, work_conformal = _gathered(points, conformal, arrangement, in_place)
        try:
            tree = _entry_tree(work[:m], self.leaf_size, seed)
            order = tree[4]  # tree position -> node
            gather_points_in_place(work[:m], work_conformal[:m], order)
            arrangement = np.concatenate([nodes[order], copies])
            position = inverse_permutation(order)  # node -> tree position
            owner = position[np.searchsorted(nodes, leader[copies])]  # each copy's node, as a tree position
            by_owner = np.argsort(owner, kind="stable")  # input rows stay increasing within a group
            gather_points_in_place(work[m:], work_conformal[m:], by_owner)
            arrangement = np.concatenate([nodes[order], copies[by_owner]])
            self.neighbors_, n_comp, n_first = _build_search_graph(work[:m], work_conformal[:m], K, D, self.n_trees,
                                                                   self.leaf_size, self.max_rounds, seed)
        except BaseException:
            if in_place:
                gather_points_in_place(points, conformal, inverse_permutation(arrangement))
            raise
        pivots = tree[0]
        inner = pivots[:, 0] >= 0
        pivots[inner] = position[pivots[inner]]
        groups = np.empty(m + 1, dtype=np.int64)
        groups[0] = m
        np.cumsum(np.bincount(owner, minlength=m), out=groups[1:])
        groups[1:] += m
        self.copy_groups_ = groups
        self.in_leaf_order_ = True
        del leader, is_node, nodes, copies, position, owner, by_owner
        release_freed_heap()
        return self._finish(work, work_conformal, (*tree[:4], arrangement), n_comp, n_first, K, D, ef, target, seed)

    def _finish(self, points, conformal, tree, n_comp, n_first, K, D, ef, target, seed):
        """Keep the built arrays, prune the graph or not (``prune``) and calibrate ``ef_`` (the end of
        :meth:`build`); ``n_first``: :func:`_search_graph`'s, in the rows of ``neighbors_``."""
        self.__dict__.pop("_kernel_structure", None)  # of an earlier build
        ScanCodes.drop_from(self)  # codes of an earlier build's points (and those points)
        self.n_components_ = n_comp
        self.tree_pivots_, self.tree_thresholds_, self.tree_children_, self.tree_ranges_, self.tree_order_ = tree
        self.split_keys_ = bool(split_sums_for(points.shape[1]))
        self.points_ = points
        self.conformal_ = conformal
        self.n_points_, self.dim_ = points.shape
        m = self.n_nodes_
        self.default_evaluations_ = float("nan")
        self.prune_comparison_ = None
        self.pruned_ = False
        # "auto" chooses by the calibration: with a given ef there is none, and the graph stays unpruned
        mode = "never" if m < 2 or (self.prune == "auto" and ef is not None) else self.prune
        calibrating = ef is None and m >= 2
        if calibrating:
            # leave-one-out among the nodes: the copies of a sampled node are left out with it
            sample, boundary = _calibration_sample(conformal[:m], np.random.default_rng(seed))
        pruned = None
        if mode != "never":
            mute = np.zeros(points.shape[0], dtype=np.bool_)
            if calibrating:
                mute[sample] = True  # the left-out nodes prune no other row (relative_neighbourhood_rows)
            pruned = relative_neighbourhood_rows(read_only(points), read_only(conformal), self.neighbors_, n_first,
                                                 np.int64(PRUNE_KEEP), mute)
        if mode == "always":
            self._use_neighbors(pruned, pruned=True)
            pruned = None
        if ef is not None:
            self.ef_ = ef
            self.calibration_recall_ = float("nan")
        elif m < 2:
            self.ef_ = EF_LADDER[0]
            self.calibration_recall_ = float("nan")
        else:
            progress.advance(stage="calibrating ef")
            truth = _leave_one_out_truth(points[:m], conformal[:m], sample, min(CALIBRATION_K, m - 1))
            best = self._calibrate(sample, truth, target, boundary)
            if pruned is not None:  # "auto": the pruned graph where it reaches the target with fewer evaluations
                # the unpruned graph and what its calibration found, its kernels' structure included (with the far
                # queries' threshold, searched for): put back as they are if the pruned graph is not kept
                unpruned = self.neighbors_, self.__dict__.get("_kernel_structure")
                calibrated = self.ef_, self.calibration_recall_, self.default_evaluations_, best
                unpruned_evaluations = self.default_evaluations_
                self._use_neighbors(pruned, pruned=True)
                best = self._calibrate(sample, truth, target, boundary)
                self.prune_comparison_ = (self.default_evaluations_, unpruned_evaluations)
                if not (self.calibration_recall_ >= target
                        and self.default_evaluations_ <= PRUNE_EVALUATIONS * unpruned_evaluations):
                    self._use_neighbors(*unpruned, pruned=False)
                    self.ef_, self.calibration_recall_, self.default_evaluations_, best = calibrated
                del pruned, unpruned
            if self.calibration_recall_ < target and not self.scans_:
                logger.warning("graph ef calibration: recall %.3f < target %.3f at every ef up to %d (the graph does "
                               "not reach some neighbours from their entry points); ef_=%d, recall %.3f, the smallest "
                               "ef within %.3f of the best; exact=True or algorithm='auto' give exact answers",
                               best, target, m, self.ef_, self.calibration_recall_, CALIBRATION_PLATEAU)
            if self.scans_:
                logger.info("graph: the default search evaluated %.1f%% of the points (> %.1f%%): it scans them "
                            "exactly instead", 100 * self.default_evaluations_ / self.n_points_, 100 * SCAN_FRACTION)
        logger.debug("graph built: n=%d nodes=%d K=%d max_degree=%d ef_=%d (calibration recall %.3f)",
                     self.n_points_, m, K, D, self.ef_, self.calibration_recall_)
        return self

    def _calibrate(self, sample, truth, target, boundary):
        """``ef_``, ``calibration_recall_`` and ``default_evaluations_`` of the current ``neighbors_`` from the
        leave-one-out ``sample`` with its ``truth`` and ``boundary`` mask (:func:`_calibrate_ef`); returns the best
        recall tried. The evaluations are those of a typical query: of the uniform part only."""
        self.ef_, self.calibration_recall_, best, walked = _calibrate_ef(self, sample, truth, target, boundary)
        if walked is None:
            some = sample[~boundary][::4]  # a spread quarter (the sample is in row order): the mean needs no more
            samples = self._run(self.points_[some], self.conformal_[some], truth.shape[1], self.ef_, None, some,
                                copies=False)[2]
            walked = float(np.mean(samples))
        self.default_evaluations_ = walked
        return best

    def _use_neighbors(self, neighbors, structure=None, *, pruned):
        """Make ``neighbors`` the graph (``pruned``: by :func:`relative_neighbourhood_rows`); ``structure``: the
        kernels' structure gathered for it earlier (:meth:`_structure`), or ``None`` to gather it again on the
        next search."""
        self.neighbors_ = neighbors
        self.pruned_ = pruned
        if structure is None:
            self.__dict__.pop("_kernel_structure", None)
        else:
            self.__dict__["_kernel_structure"] = structure

    @property
    def scans_(self) -> bool:
        """Whether the default search scans every point exactly (see the attribute in the class docstring)."""
        return bool(self.default_evaluations_ > SCAN_FRACTION * self.n_points_)

    def scans_for(self, ef, budget=None):
        """Whether a search with these ``ef`` and ``budget`` is the exact scan: the default one (neither
        given) where :attr:`scans_`."""
        return ef is None and budget is None and self.scans_

    def _scan(self, queries, q_conformal, k):
        """``(ids, deltas, samples)`` of the exact scan of every stored point (:attr:`scans_`), ids reported as
        :meth:`search` reports them (input rows; ``-1`` and ``inf`` past the ``n`` points). A batch too small for
        Gram blocks reads the points' one-byte codes first (:mod:`hypann.geometry.screened_scan`; made by the
        first such batch and kept, ``d + 32`` bytes a point; none for memory-mapped points)."""
        n = self.n_points_
        m = queries.shape[0]
        rows, found = knn_delta_scan(queries, q_conformal, self.points_, self.conformal_, min(k, n),
                                     codes=ScanCodes.kept_by(self))
        ids = np.full((m, k), -1, dtype=np.int64)
        deltas = np.full((m, k), np.inf)
        ids[:, :rows.shape[1]] = rows
        deltas[:, :rows.shape[1]] = found
        if self.in_leaf_order_:
            rows_to_ids(ids, deltas, self.tree_order_)
        return ids, deltas, np.full(m, n, dtype=np.int64)

    @property
    def n_nodes_(self) -> int:
        """Nodes of the graph: the points, or the first rows of their groups of exact copies (:attr:`copy_groups_`)."""
        return int(self.neighbors_.shape[0])

    def points_in_input_order(self):
        """``(points, conformal)`` in input row order (new arrays when :attr:`in_leaf_order_`)."""
        self._check_fitted()
        if not self.in_leaf_order_:
            return self.points_, self.conformal_
        inverse = self._input_positions()
        return self.points_[inverse], self.conformal_[inverse]

    def conformal_in_input_order(self):
        """The ``conformal`` of :meth:`points_in_input_order` alone (without gathering the points)."""
        self._check_fitted()
        return self.conformal_[self._input_positions()] if self.in_leaf_order_ else self.conformal_

    def _input_positions(self):
        """Row of ``points_`` of every input row (:attr:`in_leaf_order_`: the inverse of ``tree_order_``)."""
        order = self.tree_order_
        n = order.shape[0]
        if order.min(initial=0) < 0 or order.max(initial=0) >= n or not np.all(np.bincount(order, minlength=n) == 1):
            raise ValueError("HyperbolicGraphIndex state 'tree_order' is not a permutation of the points: the file "
                             "is damaged (verify='full' checks it on load)")
        return inverse_permutation(order)

    def _structure(self):
        """The arrays and settings the search kernels take first, in their order (gathered on the first search
        after a build or a load and kept: scratch, not part of the state)."""
        kept = self.__dict__.get("_kernel_structure")
        if kept is None:
            # read-only views, whether the arrays are the build's own (writable) or a loaded file's (read-only):
            # numba compiles the search once per array type, and the kernels only read the structure
            base = (*map(read_only, (self.points_, self.conformal_, self.neighbors_, self.tree_pivots_,
                                      self.tree_thresholds_, self.tree_children_, self.tree_ranges_,
                                      self.tree_order_)),
                    self.in_leaf_order_, self.split_keys_, self.leaf_size, PIVOT_SEED_LEAVES * self.leaf_size,
                    read_only(self.copy_groups_),
                    read_only(upper_pivots(self.tree_pivots_, self.tree_children_, upper_levels(self.n_nodes_))))
            kept = self.__dict__["_kernel_structure"] = (*base, self._far_ratio(base))
        return kept

    def _far_ratio(self, structure):
        """The far queries' threshold (module docstring): ``FAR_RATIO``, or more where the indexed points
        themselves are often far by it: the ``FAR_QUANTILE`` quantile of ``d(q, r_1) / d(r_1, r_10)`` over
        ``CALIBRATION_SIZE`` nodes, each searched leave-one-out with a list of ``FAR_RANK`` without the stage
        (:func:`_far_ratios`; ``structure``: the kernels' first arguments, of which it takes the first 12).
        A function of the graph and the seed (not stored)."""
        m = self.n_nodes_
        if m <= FAR_RANK:
            return FAR_RATIO
        rng = np.random.default_rng([int(self.random_state) & 0xFFFFFFFFFFFFFFFF, 0xFA4])
        sample = np.sort(rng.choice(m, size=min(m, CALIBRATION_SIZE), replace=False)).astype(np.int64)
        marks = self._visited_marks()
        seen, tag0 = marks.take(sample.shape[0], 1)
        try:
            ratio = _far_ratios(*structure[:12], _NO_UPPER, sample, seen[0], tag0)
        finally:
            marks.give(seen, tag0 + sample.shape[0])
        ratio = ratio[np.isfinite(ratio)]
        return float(max(FAR_RATIO, np.quantile(ratio, FAR_QUANTILE))) if ratio.shape[0] else FAR_RATIO

    def _visited_marks(self):
        """The searches' visited marks (made on the first search; scratch, not part of the state)."""
        marks = self.__dict__.get("_marks")
        if marks is None:
            marks = self.__dict__.setdefault("_marks", VisitedMarks(self.n_nodes_))
        return marks

    def _run(self, queries, q_conformal, k, ef, budget, exclude, *, copies=True):
        """Search kernels on checked queries; ``copies=False``: each found node without its copies (the
        calibration's leave-one-out among the nodes)."""
        # float64 queries, also for the calibration's, which are float32 rows under float32 storage: the kernels
        # widen every coordinate to float64 anyway (the same bits), and one query type is one compilation (writable,
        # as the query row _far_ratios searches with)
        queries = np.ascontiguousarray(queries, dtype=np.float64)
        m = queries.shape[0]
        if budget is None and exclude is None and m <= SERIAL_MAX_QUERIES:  # the kernels only read them
            b, ex = _NO_BUDGETS[:m], _NO_EXCLUDES[:m]
        else:
            b = np.full(m, _NO_BUDGET if budget is None else budget, dtype=np.int64)
            ex = np.full(m, -1, dtype=np.int64) if exclude is None else np.ascontiguousarray(exclude, dtype=np.int64)
        structure = self._structure()
        if not copies:
            structure = (*structure[:-3], _NO_GROUPS, *structure[-2:])
        marks = self._visited_marks()
        # larger batches take the parallel kernel also on one thread, so that a build (the calibration's
        # batches) runs it whatever the thread count (first_use_kernels)
        serial = m <= SERIAL_MAX_QUERIES
        threads = 1 if serial else nb.get_num_threads()
        seen, tag0 = marks.take(m, threads)
        try:
            if serial:
                return _search_serial(*structure, queries, q_conformal, k, max(ef, k), b, ex, seen[0], tag0)
            n_chunks = max(1, min(m, 4 * threads))
            return _search(*structure, queries, q_conformal, k, max(ef, k), b, ex, n_chunks, seen, tag0)
        finally:
            marks.give(seen, tag0 + m)

    def search(self, queries, q_conformal, k, *, ef=None, budget=None, L=None) -> GraphSearchResult:
        """Best-first search with a list of ``ef`` entries from the tree leaf of each query (and from the
        entry tree's upper pivots when the walk ends far from the data: the module docstring).

        Parameters
        ----------
        queries : ndarray of shape (m, d)
        q_conformal : ndarray of shape (m,)
            Stored ``1-|q|^2`` of the queries.
        k : int
        ef : int, optional
            Search list size; ``max(ef, k)`` is used. Larger is slower and
            more accurate. Default: ``ef_``, or an exact scan of every point
            when :attr:`scans_` (and no ``budget``).
        budget : int, optional
            Hard limit on the distance evaluations per query.
        L : int, optional
            Deprecated alias of ``ef``.

        Returns
        -------
        GraphSearchResult
            ``(ids, deltas, samples)``, ids int64 (m, k), deltas ascending.
        """
        self._check_fitted()
        k = check_positive_int(k, "k")
        if L is not None:
            if ef is not None:
                raise ValueError(f"give ef or its deprecated alias L, not both (ef={ef!r}, L={L!r})")
            warnings.warn("L is deprecated for the graph search; use ef (the search list size)",
                          DeprecationWarning, stacklevel=2)
            ef = L
            name = "L"
        else:
            name = "ef"
        budget = None if budget is None else _check_budget(budget)
        scan = self.scans_for(ef, budget)
        ef = self.ef_ if ef is None else check_positive_int(ef, name)
        queries, q_conformal = check_stored_queries(queries, q_conformal, self.dim_)
        if scan:
            return GraphSearchResult(*self._scan(queries, q_conformal, k))
        ids, deltas, samples = self._run(queries, q_conformal, k, ef, budget, None)
        return GraphSearchResult(ids, deltas, samples)

    def query_order(self, queries, q_conformal):
        """The order in which to search a batch: grouped by the entry tree's first node of at most
        :data:`~hypann._runtime.ORDER_NODE_POINTS` points on each query's way down (the descent that
        seeds its search, :func:`~hypann.graph.partition_tree.first_node_starts`), in leaf order, with a
        stable sort.

        Consecutive queries then walk the same part of the graph, whose points the cache still holds;
        the answer of every query is the same in any order.

        Returns
        -------
        ndarray of shape (m,), int64
            A permutation of ``range(m)``: search ``queries[order]``.
        """
        self._check_fitted()
        queries, _ = check_stored_queries(queries, q_conformal, self.dim_)  # (the descent needs no conformal)
        keys = first_node_starts(self.tree_pivots_, self.tree_thresholds_, self.tree_children_, self.tree_ranges_,
                                 self.points_, queries, self.split_keys_, ORDER_NODE_POINTS)
        return np.argsort(keys, kind="stable")

    def search_coordinates(self, X, c, k, *, ef=None, model="poincare"):
        """:meth:`search` of one query given by its coordinates ``X`` (1, d) in curvature ``-c``, checked and
        searched in one compiled call; ``None`` when ``X`` is not a valid point.

        The one-query path of :meth:`hypann.HyperbolicIndex.search` (see
        :meth:`hypann.search.hyperbolic_kdtree.HyperbolicKDTree.search_coordinates`
        for ``X``, ``c``, ``k`` and ``model``). ``ef``: the search list size,
        default ``ef_``.
        """
        self._check_fitted()
        k, c = check_query_coordinates(X, self.dim_, k, c, model)
        ef = None if ef is None else check_positive_int(ef, "ef")
        found = self.one_query_function(c, model == "lorentz")(X, k, ef)
        return None if found is None else GraphSearchResult(*found)

    def one_query_function(self, c, lorentz):
        """``run(X, k, ef=None)``: :meth:`search_coordinates`'s ``(ids, deltas, samples)`` (or ``None``) for the
        curvature ``c`` and ``lorentz``, with the kernel's structure, the visited marks and the defaults looked
        up once. The caller checks the arguments: ``X`` a float64 or float32 array of shape (1, d), or (1, d+1)
        on the hyperboloid when ``lorentz``; ``c`` a finite float > 0; ``k`` and ``ef`` (default ``ef_``)
        positive ints. The one-query path of :meth:`hypann.HyperbolicIndex.search` keeps it for its build and
        calls it for every query. Only for callers that checked them: unchecked, the kernel could read outside
        its arrays."""
        self._check_fitted()
        structure = self._structure()
        marks = self._visited_marks()
        default_ef = self.ef_
        scans = self.scans_
        kernel = OneQueryKernel(_search_coordinates)  # every argument but X keeps its type

        def run(X, k, ef=None):
            if scans and ef is None:  # the default search is the exact scan (scans_for)
                query, q_conformal, worst = few_lorentz_points(X, c) if lorentz else few_points_conformal(X, c)
                return self._scan(query, q_conformal, k) if worst > 0.0 else None
            ids, deltas, samples = one_query_arrays(k)
            seen, tag = marks.take_one()
            try:
                valid = kernel(X, *structure, X, c, lorentz, max(default_ef if ef is None else ef, k), _NO_BUDGETS,
                               _NO_EXCLUDES, seen, tag, ids, deltas, samples)
            finally:
                marks.give_one(seen, tag)
            return (ids, deltas, samples) if valid else None

        return run

    # -- state ------------------------------------------------------------
    def __getstate__(self):
        state = dict(self.__dict__)
        state.pop("_marks", None)  # scratch of small searches
        state.pop("_kernel_structure", None)
        return state

    def to_arrays(self, *, include_points=True) -> dict:
        """The fitted index as a dict of arrays (for :func:`numpy.savez`); see :meth:`from_arrays`.

        ``include_points=False`` leaves out ``points`` and ``conformal`` (for
        an owner that saves them once itself and passes them to :meth:`from_arrays`).
        """
        self._check_fitted()
        points = {"points": self.points_, "conformal": self.conformal_} if include_points else {}
        return {
            **points,
            "neighbors": self.neighbors_,
            "tree_pivots": self.tree_pivots_,
            "tree_thresholds": self.tree_thresholds_,
            "tree_children": self.tree_children_,
            "tree_ranges": self.tree_ranges_,
            "tree_order": self.tree_order_,
            "settings": np.array([self.n_neighbors, self.max_degree, -1 if self.ef is None else self.ef,
                                  self.leaf_size, self.n_trees, self.max_rounds, self.random_state, self.ef_],
                                 dtype=np.int64),
            "recalls": np.array([self.target_recall, self.calibration_recall_]),
            **({_LEAF_ORDER: np.int64(1)} if self.in_leaf_order_ else {}),
            **({_SPLIT_KEYS: np.int64(1)} if self.split_keys_ else {}),
            **({_PRUNED: np.int64(1)} if self.pruned_ else {}),
            **({} if self.prune == "auto" else {_PRUNE_SETTING: np.int64(PRUNE_SETTINGS.index(self.prune))}),
            **({} if self.prune_comparison_ is None else
               {_PRUNE_COMPARISON: np.array(self.prune_comparison_, dtype=np.float64)}),
            **({_COPY_GROUPS: self.copy_groups_} if self.copy_groups_.shape[0] else {}),
            **({} if np.isnan(self.default_evaluations_) else
               {_DEFAULT_EVALUATIONS: np.float64(self.default_evaluations_)}),
        }

    @classmethod
    def from_arrays(cls, arrays, *, points=None, conformal=None, full=True):
        """Rebuild a fitted index from :meth:`to_arrays` output (or an ``np.load`` of it).

        ``points``/``conformal`` (validated, float64 or float32 / float64):
        the points to refer to when ``arrays`` leaves them out
        (``to_arrays(include_points=False)``); they are not copied.
        ``full=False``: check shapes and the partition tree (``O(n / leaf_size)``)
        but not the per-point ids (neighbour lists, leaf order), which the
        search kernel skips when out of range; nothing is read from them.
        """
        in_leaf_order = cls.state_in_leaf_order(arrays)
        if points is not None:
            if in_leaf_order:
                raise ValueError("this HyperbolicGraphIndex state holds its own points in leaf order: pass no "
                                 "points/conformal to from_arrays")
            arrays = {**arrays, "points": points, "conformal": conformal}
        missing = [name for name in _STATE if name not in arrays]
        if missing:
            raise ValueError(f"not a HyperbolicGraphIndex state: missing arrays {missing}")
        settings = np.asarray(arrays["settings"])
        if settings.shape != (8,):
            raise ValueError(f"settings must have shape (8,), got {settings.shape}")
        K, D, ef, leaf_size, n_trees, max_rounds, random_state, ef_ = (int(v) for v in settings)
        target, calib = (float(v) for v in np.asarray(arrays["recalls"]))
        index = cls(n_neighbors=K, max_degree=D, ef=None if ef < 0 else ef, target_recall=target,
                    leaf_size=leaf_size, n_trees=n_trees, max_rounds=max_rounds, prune=_stored_prune(arrays),
                    random_state=random_state)
        stored = np.asarray(arrays["points"])
        index.points_ = np.ascontiguousarray(stored, dtype=np.float32 if stored.dtype == np.float32 else np.float64)
        index.conformal_ = np.ascontiguousarray(arrays["conformal"], dtype=np.float64)
        index.neighbors_ = np.ascontiguousarray(arrays["neighbors"], dtype=np.int32)
        index.tree_pivots_ = np.ascontiguousarray(arrays["tree_pivots"], dtype=np.int64)
        index.tree_thresholds_ = np.ascontiguousarray(arrays["tree_thresholds"], dtype=np.float64)
        index.tree_children_ = np.ascontiguousarray(arrays["tree_children"], dtype=np.int64)
        index.tree_ranges_ = np.ascontiguousarray(arrays["tree_ranges"], dtype=np.int64)
        index.tree_order_ = np.ascontiguousarray(arrays["tree_order"], dtype=np.int64)
        index.in_leaf_order_ = in_leaf_order
        index.split_keys_ = state_flag(arrays, _SPLIT_KEYS, "HyperbolicGraphIndex")
        index.pruned_ = state_flag(arrays, _PRUNED, "HyperbolicGraphIndex")
        if _COPY_GROUPS in arrays:
            groups = np.asarray(arrays[_COPY_GROUPS])
            if groups.dtype.kind not in "iu" or groups.ndim != 1 or groups.shape[0] < 2:
                raise ValueError(f"HyperbolicGraphIndex state '{_COPY_GROUPS}' must be a 1-D integer array of at "
                                 f"least 2 entries, got dtype={groups.dtype}, shape={groups.shape}")
            if not in_leaf_order:
                raise ValueError(f"HyperbolicGraphIndex state '{_COPY_GROUPS}' needs the points in leaf order "
                                 f"('{_LEAF_ORDER}')")
            index.copy_groups_ = np.ascontiguousarray(groups, dtype=np.int64)
        if _PRUNE_COMPARISON in arrays:
            comparison = np.asarray(arrays[_PRUNE_COMPARISON])
            if (comparison.shape != (2,) or comparison.dtype.kind != "f"
                    or not np.all((comparison >= 0.0) & (comparison < np.inf))):
                raise ValueError(f"HyperbolicGraphIndex state '{_PRUNE_COMPARISON}' must be two finite floats >= 0, "
                                 f"got {comparison!r}")
            index.prune_comparison_ = (float(comparison[0]), float(comparison[1]))
        if _DEFAULT_EVALUATIONS in arrays:
            evaluations = np.asarray(arrays[_DEFAULT_EVALUATIONS])
            if evaluations.shape != () or evaluations.dtype.kind != "f" or not 0.0 <= evaluations < np.inf:
                raise ValueError(f"HyperbolicGraphIndex state '{_DEFAULT_EVALUATIONS}' must be a finite float >= 0, "
                                 f"got {evaluations!r}")
            index.default_evaluations_ = float(evaluations)
        index.ef_ = ef_
        index.calibration_recall_ = calib
        index.n_points_, index.dim_ = index.points_.shape
        _check_state(index, full=full)
        return index

    @staticmethod
    def state_in_leaf_order(arrays) -> bool:
        """Whether a stored state (:meth:`to_arrays`) holds its points in leaf order (``in_leaf_order_``)."""
        return state_flag(arrays, _LEAF_ORDER, "HyperbolicGraphIndex")

    @property
    def nbytes(self) -> int:
        """Memory of the graph and the entry tree (bytes), and of the points' codes of :meth:`_scan` once made,
        not counting the points (the owner's)."""
        if not hasattr(self, "neighbors_"):
            return 0
        return int(sum(a.nbytes for a in (self.neighbors_, self.tree_pivots_, self.tree_thresholds_,
                                            self.tree_children_, self.tree_ranges_, self.tree_order_,
                                            self.copy_groups_)) + ScanCodes.nbytes_of(self))

    def _check_fitted(self):
        if not hasattr(self, "neighbors_"):
            raise ValueError(f"this {type(self).__name__} is not built yet; call build(points, conformal) first")

    def __repr__(self):
        fitted = (f", n_points={self.n_points_}, dim={self.dim_}, ef_={self.ef_}, pruned_={self.pruned_}"
                  if hasattr(self, "neighbors_") else "")
        return (f"{type(self).__name__}(n_neighbors={self.n_neighbors}, max_degree={self.max_degree}, ef={self.ef}, "
                f"target_recall={self.target_recall}, leaf_size={self.leaf_size}, n_trees={self.n_trees}, "
                f"max_rounds={self.max_rounds}, prune={self.prune!r}, random_state={self.random_state}{fitted})")


def upper_levels(n_nodes):
    """Levels of the entry tree whose pivots a far query is offered: :data:`UPPER_LEVELS` up to
    :data:`UPPER_LEVELS_NODES` graph nodes, one more per doubling beyond (rounded), at most
    :data:`UPPER_LEVELS_MAX`. The long edges' sample stops growing at 1,024 points; the pivots keep
    covering the data (``docs/benchmarks.md``, "Queries far from the data: a second stage")."""
    extra = max(0, round(math.log2(max(n_nodes, 1) / UPPER_LEVELS_NODES)))
    return min(UPPER_LEVELS + extra, UPPER_LEVELS_MAX)


def _entry_tree(points, leaf_size, seed):
    """The partition tree whose leaves seed the searches (:func:`build_tree` with the build's seed and
    :func:`~hypann.graph.partition_tree.split_sums_for` its dimension)."""
    return build_tree(read_only(points), leaf_size, np.uint64(mix_seed(np.uint64(seed), 11, 0)),
                      split_sums_for(points.shape[1]))


def rows_to_ids(ids, deltas, order):
    """Replace every found row ``ids >= 0`` by ``order[row]``, in place; one that maps outside
    ``[0, len(order))`` (an order not read when its file was opened, ``verify="structure"``, may hold
    anything) becomes ``-1`` at ``inf``, as the search kernels report it."""
    found = ids >= 0
    ids[found] = order[ids[found]]
    damaged = found & ((ids < 0) | (ids >= order.shape[0]))
    ids[damaged] = -1
    deltas[damaged] = np.inf


def _gathered(points, conformal, perm, in_place):
    """``(points[perm], conformal[perm])``: the arrays themselves, reordered in place, with ``in_place``;
    new arrays otherwise."""
    if in_place:
        gather_points_in_place(points, conformal, perm)
        return points, conformal
    return points[perm], conformal[perm]


def _check_budget(budget):
    if isinstance(budget, bool) or not isinstance(budget, (int, np.integer)) or budget < 0:
        raise ValueError(f"budget must be None or a non-negative integer, got budget={budget!r}")
    return int(budget)


def _copies_equal_their_nodes(index, block=1 << 16):
    """Whether every row of each group of :attr:`~HyperbolicGraphIndex.copy_groups_` equals its node bit for bit
    (points and conformal factors; in blocks of rows)."""
    groups = index.copy_groups_
    m = groups.shape[0] - 1
    owner = np.repeat(np.arange(m), np.diff(groups))  # the node of rows m .. n-1
    points, conformal = index.points_, index.conformal_
    for lo in range(0, owner.shape[0], block):
        node = owner[lo:lo + block]
        rows = slice(m + lo, m + lo + node.shape[0])
        if not (np.array_equal(points[rows].view(np.uint8), points[node].view(np.uint8))
                and np.array_equal(conformal[rows].view(np.uint8), conformal[node].view(np.uint8))):
            return False
    return True


def _stored_prune(arrays):
    """The ``prune`` setting of a stored state (:data:`_PRUNE_SETTING`; absent: ``"auto"``)."""
    if _PRUNE_SETTING not in arrays:
        return "auto"
    code = np.asarray(arrays[_PRUNE_SETTING])
    if code.shape != () or code.dtype.kind not in "iu" or not 0 <= int(code) < len(PRUNE_SETTINGS):
        raise ValueError(f"HyperbolicGraphIndex state '{_PRUNE_SETTING}' must be an integer in "
                         f"[0, {len(PRUNE_SETTINGS)}), got {code!r}")
    return PRUNE_SETTINGS[int(code)]


def _check_state(index, *, full=True):
    """Shapes and id ranges of a restored index (a corrupt file must not crash a kernel).

    ``full=False`` leaves out the ``O(n)`` checks of the neighbour ids and the
    leaf order (the search skips ids out of range).
    """
    n = index.n_points_
    groups = index.copy_groups_
    m = groups.shape[0] - 1 if groups.shape[0] else n  # the graph's nodes
    nodes = "nodes" if groups.shape[0] else "n"
    n_nodes = index.tree_pivots_.shape[0]
    problems = []
    if index.conformal_.shape != (n,):
        problems.append(f"conformal has shape {index.conformal_.shape}, expected ({n},)")
    if groups.shape[0]:
        if not (1 <= m <= n and groups[0] == m and groups[-1] == n and (not full or np.all(np.diff(groups) >= 0))):
            problems.append(f"{_COPY_GROUPS} is not a partition of rows {m} .. {n} into {m} groups")
        elif full and index.conformal_.shape == (n,) and not _copies_equal_their_nodes(index):
            problems.append(f"{_COPY_GROUPS} names rows that are not copies of their node")
    if index.neighbors_.shape != (m, index.max_degree):
        problems.append(f"neighbors has shape {index.neighbors_.shape}, expected ({m}, {index.max_degree})")
    elif full and index.neighbors_.size and (index.neighbors_.min() < -1 or index.neighbors_.max() >= m):
        problems.append(f"neighbors holds ids outside [-1, {nodes})")
    if index.tree_order_.shape != (n,) or (full and not np.array_equal(np.sort(index.tree_order_), np.arange(n))):
        problems.append("tree_order is not a permutation of the points")
    if (index.tree_thresholds_.shape != (n_nodes,) or index.tree_children_.shape != (n_nodes, 2)
            or index.tree_ranges_.shape != (n_nodes, 2) or index.tree_pivots_.shape != (n_nodes, 2) or n_nodes < 1):
        problems.append("tree arrays have inconsistent shapes")
    else:
        ch = index.tree_children_
        internal = ch[:, 0] >= 0
        if (ch.min() < -1 or ch.max() >= n_nodes or np.any(ch[internal] <= np.flatnonzero(internal)[:, None])
                or np.any((ch[:, 0] < 0) != (ch[:, 1] < 0))):
            problems.append("tree_children is not a tree")
        piv = index.tree_pivots_[internal]
        if piv.size and (piv.min() < 0 or piv.max() >= m):
            problems.append(f"tree_pivots holds ids outside [0, {nodes})")
        r = index.tree_ranges_
        if r.size and (r.min() < 0 or r.max() > m or np.any(r[:, 0] > r[:, 1])):
            problems.append(f"tree_ranges outside [0, {nodes}]")
    if index.ef_ < 1:
        problems.append(f"ef_ must be >= 1, got {index.ef_}")
    if problems:
        raise ValueError("not a valid HyperbolicGraphIndex state: " + "; ".join(problems))
