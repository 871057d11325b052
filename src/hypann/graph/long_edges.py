"""Long edges of the search graph: a few diverse links to far points, for queries far from the data.

A k-NN graph links each point to points around it only. A query drawn from
the data starts in its own region (the entry tree's leaf) and its neighbours
are a few hops away. A query *far* from the data is different: in hyperbolic
geometry its nearest points are the data points furthest out towards it,
which lie in several clusters at once, and the k-NN graph has no edge
between those clusters. A walk that starts in the wrong cluster stops there.
Queries of another kind than the data are like that: text queries against
image embeddings (MERU), or probes in new directions. On 20,000 points of
the boundary-heavy family (10-D), queries in random directions at the
data's norms (:func:`~hypann.datasets.families.far_queries`) got recall@10
0.18 at the calibrated ``ef`` without these edges and 0.56 with them, held-out
points 1.000 either way; on the 100-D mixture 0.47 and 0.90
(``docs/benchmarks.md``, "Queries far from the data").

This module adds to each point at most :data:`N_LONG` edges chosen the way
HNSW's and Vamana's neighbour selection choose them (relative-neighbourhood
pruning, ``alpha = 1``), over candidates that reach further than the k-NN
row:

* **Candidates of ``p``:** its k-NN row and its :data:`SAMPLE_NEIGHBORS`
  nearest points among a random sample of ``min(n // SAMPLE_STRIDE,
  SAMPLE_MAX)`` points (exact, :func:`~hypann.geometry.gram_scan.knn_delta_scan`),
  in increasing ``delta(p, v)`` (ties: smaller id first).
* **Pruning:** a candidate ``v`` is kept unless a kept ``h`` is nearer to it
  than ``p`` is, ``delta(h, v) < delta(p, v)`` (``delta`` is increasing in the
  distance, so this is the distance test); at most :data:`KEEP` are kept.
* **The long edges of ``p``** are its kept candidates that are not in its k-NN
  row, the nearest :data:`N_LONG`.

Sample points behind a point's own neighbours are dominated by them, so the
edges go where the k-NN row does not reach: from the rims of clusters to the
clusters around them. The pruning is the one that made Vamana collapse here
(:mod:`hypann.graph.knn_graph`), but there it cut the neighbour lists
themselves; these edges are added in front of the k-NN rows, which are not
pruned (a full row of ``max_degree`` loses its farthest entries, as with the
bridges).

The sample is drawn from the build's seed, and every row is computed from
the points, the rows and the sample alone in parallel blocks, so the edges
do not depend on the number of threads. Work: ``n * min(n / 16, 1024)``
deltas for the sample's neighbours (Gram blocks) and at most ``(K +
SAMPLE_NEIGHBORS) * KEEP`` per point for the pruning.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from hypann._borrowed import borrowed
from hypann._runtime import read_only
from hypann.geometry._kernels import delta4_split_below, delta_row, delta_split_below, deltas_to_rows, holds
from hypann.geometry.gram_scan import knn_delta_scan
from hypann.graph.partition_tree import split_sums_for

__all__ = ["long_edges", "sample_size", "N_LONG"]

#: Long edges per point, at most.
N_LONG = 4
#: Candidates of a point among the sample: its nearest this many sample points.
SAMPLE_NEIGHBORS = 32
#: The sample holds one point in this many ...
SAMPLE_STRIDE = 16
#: ... and at most this many points (its nearest points cost ``n`` times this many deltas).
SAMPLE_MAX = 1024
#: Below this many sample points no long edges are made (the sample would hold no far points).
SAMPLE_MIN = 16
#: A point's pruning stops after keeping this many candidates (k-NN and sample alike).
KEEP = 16
# Points whose sample neighbours are found and pruned at a time (their lists: 16 * SAMPLE_NEIGHBORS B a point).
_BLOCK = 1 << 15
# Points per parallel chunk of the pruning (a chunk's work does not depend on the thread count).
_CHUNK = 1024


def sample_size(n) -> int:
    """Points in the sample of ``n`` points: ``min(n // SAMPLE_STRIDE, SAMPLE_MAX)``, or 0 below :data:`SAMPLE_MIN`."""
    m = min(n // SAMPLE_STRIDE, SAMPLE_MAX)
    return m if m >= SAMPLE_MIN else 0


def long_edges(points, conf, row_i, seed):
    """The long edges of every point (see the module docstring).

    Parameters
    ----------
    points : ndarray of shape (n, d), float64 or float32
    conf : ndarray of shape (n,)
        Their conformal factors ``1-|x|^2``.
    row_i : ndarray of shape (n, K), int
        The k-NN rows (ids of ``points``, ``-1`` padded at the end).
    seed : int
        Seed of the sample.

    Returns
    -------
    ndarray of shape (n, N_LONG), same dtype as ``row_i``, ``-1`` padded; ``(n, 0)`` when the sample is too
    small (:func:`sample_size`).
    """
    points, conf = read_only(points), read_only(conf)  # one compiled type of the kernels, writable input or not
    n = points.shape[0]
    m = sample_size(n)
    if m == 0:
        return np.full((n, 0), -1, dtype=row_i.dtype)
    sample = np.sort(np.random.default_rng([int(seed), 0x10E]).choice(n, m, replace=False))
    s_points = points[sample]  # float32 points stay float32: float32 Gram products (gram_scan)
    s_conf = np.ascontiguousarray(conf[sample], dtype=np.float64)
    c = min(SAMPLE_NEIGHBORS, m)
    out = np.empty((n, N_LONG), dtype=row_i.dtype)
    for lo in range(0, n, _BLOCK):
        hi = min(n, lo + _BLOCK)
        # each point's screen starts at the sample points around its own row (points nearby in a build's
        # leaf order are near each other): fewer bounds replaced later, the same neighbours
        scan_from = (np.searchsorted(sample, np.arange(lo, hi)) - c // 2) % m
        # the block as queries: float64 copies (writable, as a search's queries: one compiled type of the scan)
        near, near_d = knn_delta_scan(np.array(points[lo:hi], dtype=np.float64),
                                      np.array(conf[lo:hi], dtype=np.float64), s_points, s_conf, c,
                                      scan_from=scan_from)
        _long_rows(points, conf, row_i, lo, sample, near, near_d, out)
        del near, near_d
    return out


@nb.njit(cache=True, parallel=True)
def _long_rows(points, conf, row_i, lo, sample, near, near_d, out):
    """Rows ``lo .. lo + len(near) - 1`` of the long edges into ``out`` (parallel chunks, own rows only).

    ``near[t]`` (positions in ``sample``) and ``near_d[t]``: the nearest sample points of point ``lo + t`` and
    their deltas, ascending (``-1`` / ``inf`` padded).
    """
    K = row_i.shape[1]
    c = near.shape[1]
    m = near.shape[0]
    n_chunks = (m + _CHUNK - 1) // _CHUNK
    for ch in nb.prange(n_chunks):
        cand_i = np.empty(K + c, dtype=np.int64)
        cand_d = np.empty(K + c)
        from_sample = np.empty(K + c, dtype=np.bool_)
        kept = np.empty(KEEP, dtype=np.int64)
        row_buf = np.empty(K, dtype=np.int64)
        row_d = np.empty(K)
        for t in range(ch * _CHUNK, min(m, (ch + 1) * _CHUNK)):
            _long_row(lo + t, points, conf, row_i[lo + t], sample, near[t], near_d[t], cand_i, cand_d, from_sample,
                      kept, row_buf, row_d, out[lo + t])


@nb.njit(cache=True)
def _long_row(p, points, conf, row, sample, near, near_d, cand_i, cand_d, from_sample, kept, row_buf, row_d, out):
    """The long edges of point ``p`` into ``out`` (``-1`` padded).

    ``row``: its k-NN row; ``near``/``near_d``: its nearest sample points (positions in ``sample``) and their
    deltas. Buffers: ``cand_i``, ``cand_d``, ``from_sample`` of ``len(row) + len(near)`` entries (every candidate
    once), ``kept`` of :data:`KEEP`, ``row_buf`` and ``row_d`` of ``len(row)``.

    The k-NN row's deltas are eight sums side by side (:func:`~hypann.geometry._kernels.deltas_to_rows`:
    :func:`delta_row`'s bits). A candidate is dominated when a kept point is nearer to it: below
    :data:`~hypann.graph.partition_tree.SPLIT_SUMS_MIN_DIM` coordinates tested one kept point at a time in
    :func:`~hypann.geometry._kernels.sq_dist_row`'s order, from there on by :func:`_dominated_split` (four at
    a time is no faster at 10-D): :func:`dominated`. A kept exact copy of ``p`` (``delta`` 0) is not tested: it
    ties with ``p`` on every candidate, and the rule's ``<`` keeps what it ties with (the split sums could
    break that tie by a rounding). Summing every ``delta(p, v)`` split instead made this phase 20-50% slower
    at 100-D.
    """
    # the arrays are the caller's: their views here need no reference counts (hypann._borrowed)
    points, conf, row, sample, near, near_d = borrowed(points), borrowed(conf), borrowed(row), borrowed(sample), \
        borrowed(near), borrowed(near_d)
    cand_i, cand_d, from_sample, kept, row_buf, row_d, out = borrowed(cand_i), borrowed(cand_d), \
        borrowed(from_sample), borrowed(kept), borrowed(row_buf), borrowed(row_d), borrowed(out)
    q = points[p]
    cq = conf[p]
    split = split_sums_for(q.shape[0])
    m = 0
    n_row = 0
    for t in range(row.shape[0]):
        v = row[t]
        if v < 0:
            break
        if v != p and not holds(row_buf, n_row, v):
            row_buf[n_row] = v
            n_row += 1
    deltas_to_rows(q, cq, points, conf, row_buf[:n_row], False, row_d)  # eight side by side: delta_row's bits
    for t in range(n_row):
        m = _insert(cand_i, cand_d, from_sample, m, row_buf[t], row_d[t], False)
    for t in range(near.shape[0]):
        s = near[t]
        if s < 0:
            break
        v = sample[s]  # a row of [0, n): drawn by long_edges
        if v == p or holds(cand_i, m, v):
            continue
        m = _insert(cand_i, cand_d, from_sample, m, v, near_d[t], True)
    # the edges are the first kept candidates from the sample: the pruning stops when out is full, after the
    # last candidate from the sample, or at KEEP kept candidates (the same edges as pruning all m)
    last = m - 1
    while last >= 0 and not from_sample[last]:
        last -= 1
    n_kept = 0  # the kept candidates that can dominate: kept[:n_kept]
    n_taken = 0  # all kept candidates, exact copies of p included
    n_out = 0
    for j in range(last + 1):
        v = cand_i[j]
        if dominated(points, conf, kept, n_kept, v, cand_d[j], split):
            continue
        # an exact copy u of p (delta 0) has delta(u, v) = delta(p, v) for every v and dominates none; left out
        # of the test, since from 16-D on its split sums could differ from cand_d's delta_row bits by a rounding
        if cand_d[j] > 0.0:
            kept[n_kept] = v
            n_kept += 1
        n_taken += 1
        if from_sample[j] and n_out < out.shape[0]:
            out[n_out] = v
            n_out += 1
        if n_taken == KEEP or n_out >= out.shape[0]:
            break
    for t in range(n_out, out.shape[0]):
        out[t] = -1


@nb.njit(cache=True, inline="always")
def dominated(points, conf, kept, n_kept, v, dv, split):
    """Whether one of the points ``kept[:n_kept]`` is nearer to ``v`` than ``delta(p, v) = dv``: the
    relative-neighbourhood rule of the long edges, and of the pruned search graph
    (:func:`hypann.graph.knn_graph.relative_neighbourhood_rows`). ``split`` (from
    :data:`~hypann.graph.partition_tree.SPLIT_SUMS_MIN_DIM` coordinates on): by :func:`_dominated_split`;
    otherwise one kept point at a time by :func:`delta_row` (its bits).
    """
    if split:
        return _dominated_split(points, conf, kept, n_kept, v, dv)
    for h in range(n_kept):
        u = kept[h]
        # the full sum: abandoning it once a prefix proves it >= delta(p, v) decides the same and
        # was slower (the test at every coordinate; as in knn_graph._refine_row)
        if delta_row(points[u], conf[u], points[v], conf[v]) < dv:
            return True
    return False


@nb.njit(cache=True, inline="always")
def _dominated_split(points, conf, kept, n_kept, v, dv):
    """Whether one of the points ``kept[:n_kept]`` is nearer to ``v`` than ``delta(p, v) = dv``, from
    :data:`~hypann.graph.partition_tree.SPLIT_SUMS_MIN_DIM` coordinates on.

    The sums are split over four lanes, four kept points at a time
    (:func:`~hypann.geometry._kernels.delta4_split_below`; each abandoned once a prefix proves it ``>= dv``):
    twice as fast at 100-D as :func:`~hypann.geometry._kernels.delta_row_below` one at a time. They are
    within a few units of the last place of ``delta_row``, so a kept point within that of ``dv`` may decide
    either way, always the same way for the same points.
    """
    x = points[v]
    cv = conf[v]
    h = 0
    while h + 4 <= n_kept:
        u0, u1, u2, u3 = kept[h], kept[h + 1], kept[h + 2], kept[h + 3]
        d0, d1, d2, d3 = delta4_split_below(x, cv, points[u0], conf[u0], points[u1], conf[u1], points[u2],
                                            conf[u2], points[u3], conf[u3], dv)
        if d0 < dv or d1 < dv or d2 < dv or d3 < dv:
            return True
        h += 4
    for h in range(h, n_kept):
        u = kept[h]
        if delta_split_below(x, cv, points[u], conf[u], dv) < dv:
            return True
    return False


@nb.njit(cache=True, inline="always")
def _insert(cand_i, cand_d, from_sample, m, v, d, sampled):
    """Insert candidate ``v`` at ``delta = d`` into the first ``m`` entries, kept in increasing ``(d, v)``;
    returns ``m + 1``."""
    t = m
    while t > 0 and (cand_d[t - 1] > d or (cand_d[t - 1] == d and cand_i[t - 1] > v)):
        cand_i[t] = cand_i[t - 1]
        cand_d[t] = cand_d[t - 1]
        from_sample[t] = from_sample[t - 1]
        t -= 1
    cand_i[t] = v
    cand_d[t] = d
    from_sample[t] = sampled
    return m + 1
