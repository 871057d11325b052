"""The paper's LSH oracle: p-stable random projections, T tables of m hyperplanes.

Wu & Charikar (section "Approximate nearest neighbors for high dimensional
hyperbolic embeddings") use the random-projection scheme of Datar et al.
(2004) as the Euclidean oracle of every spherical shell. This module
implements it as an approximate :class:`~hypann.oracles.base.EuclideanOracle`.

The hash
--------
Each of the ``T`` tables (``tables``) owns ``m`` (``bits``) random unit
vectors :math:`r_{t,1}, \\dots, r_{t,m}` drawn uniformly from the unit sphere
(normalised Gaussian vectors). With granularity :math:`g` the segment
:math:`(-1, 1)`, which holds every projection of a point of the unit ball, is
cut into :math:`g` equal segments of width :math:`W = 2/g`, and a point
:math:`x` gets in table :math:`t` the key

.. math::

    h_t(x) = \\Big(\\Big\\lfloor \\frac{r_{t,j} \\cdot x}{W} + u_{t,j}
    \\Big\\rfloor\\Big)_{j=1..m}, \\qquad W = \\frac{2}{g},

with :math:`u_{t,j}` uniform in :math:`[0, 1)` when ``offset=True`` (the
default) and :math:`u = 0` otherwise. The paper writes the hash as
:math:`r \\cdot x / g` without an offset and with :math:`g` "the number of
equi-width segments of (-1, 1)"; we read it as the bucket index of that
segmentation, i.e. ``offset=False`` is the paper's literal hash.

Relation with Datar et al.: their hash is :math:`\\lfloor (a \\cdot x + b)/w
\\rfloor` with :math:`a` a Gaussian (2-stable) vector and :math:`b` uniform in
:math:`[0, w)`. Ours is the same with :math:`b = u W` and a *unit* vector in
place of :math:`a`. Since :math:`a = |a|\\, r` with :math:`|a| \\approx \\sqrt d`
in high dimension, a bucket width :math:`W` on unit vectors corresponds to
Datar's :math:`w \\approx W \\sqrt{d}`: a pair at distance :math:`c` has a
projected difference of standard deviation about :math:`c/\\sqrt{d}` (exactly
Gaussian only for Gaussian :math:`a`; for unit vectors it is the marginal of
the uniform sphere, Gaussian as :math:`d \\to \\infty`). Datar's collision
analysis (:math:`p(c) = \\int_0^w \\frac1c f(t/c)(1 - t/w)\\,dt`) needs the
random offset; without it the bucket boundaries sit at fixed places
(:math:`0, \\pm W, \\dots`), which is harmless for far-from-origin data but
biases points whose projections straddle 0.

Keys, buckets, probes
---------------------
The ``m`` integer coordinates of a key are mixed into one ``uint64`` by a
random linear hash :math:`\\sum_j c_j a_{t,j} \\bmod 2^{64}` (odd random
multipliers :math:`a_{t,j}`; a false merge of two buckets has probability
about :math:`2^{-64}` per pair and only adds candidates). Each table is stored
CSR-style: sorted unique keys, bucket start offsets and point ids; a probe
finds its bucket through an open-addressing index of the keys (Fibonacci
hashing, load at most 1/2; 2-4x faster than binary search for the lookups
in our measurements). Multi-probe (``probe=1``, the paper's "buckets within
distance 1 of the query bucket") visits, per table, the query's bucket and the
:math:`2m` buckets whose key differs by :math:`\\pm 1` in exactly one
coordinate: :math:`1 + 2m` probes per table, :math:`T(1 + 2m)` in all
(``probe=0``: :math:`T`). Mixing is linear, so a neighbour key is
``key +- a_{t,j}``. Probes run in the order: all query buckets first, then the
neighbour buckets by increasing distance of the query's projection to the
shared bucket boundary (the query-directed order of multi-probe LSH) when
the order matters: with ``max_candidates`` and for decision queries, which
stop early. Without a cap every probed candidate is examined and the order
only affects which of two points at exactly equal distance is kept.

Candidates from all probes are deduplicated (a per-query bitmap of ``n``
bits, cleared per query: ``n/64`` words), their exact
float64 squared distances computed from explicit differences, and the ``k``
nearest returned; fewer than ``k`` found are padded with ``-1`` / ``inf``.
``evaluations`` is the number of distinct candidates whose distance was
computed.

Shells
------
The random vectors, offsets and multipliers depend only on
``(random_state, dim, tables, bits)``, so oracles built for different shells
with the same settings share them (the paper: "the hyperplanes used for the
LSH tables of each partition are the same"). Table ``t`` draws from its own
stream seeded by ``(random_state, t)``, so the first ``T`` tables of a
``T' > T`` oracle are those of the ``T`` oracle. :meth:`LSHOracle.for_shell`
applies the paper's granularity rule :math:`g = \\min(w^i, 10000)` (the cap is
``max_granularity``) for shell
:math:`i` (points with :math:`w^{i-1} \\le 1/(1-\\|x\\|^2) \\le w^i`), whose
bucket width :math:`2 w^{-i}` follows the scale :math:`1-\\|x\\|^2` of
Euclidean distances between hyperbolic neighbours in that shell.

Parameters derived from the data
--------------------------------
``tables="auto"``, ``bits="auto"`` and ``granularity="data"`` (the defaults)
are chosen at build time from a sample, by :func:`choose_hash_parameters`.
A pair at Euclidean distance :math:`c` projects onto a random unit vector
as :math:`c\\,|r_1|`, with :math:`r_1^2 \\sim \\mathrm{Beta}(1/2, (d-1)/2)`
(the first coordinate of a uniform unit vector). With the random offset, one
hash puts the pair in the same bucket with probability
:math:`p_0(s) = \\mathrm E\\,\\max(0, 1 - s|r_1|)` and in adjacent buckets
(a multi-probe hit) with probability :math:`p_1(s) = \\mathrm E\\,\\mathrm{tri}(s|r_1|)`
(:math:`\\mathrm{tri}(t) = t` on [0, 1], :math:`2 - t` on [1, 2], 0 beyond),
where :math:`s = c / W`. A table of :math:`m` independent hashes then
catches the pair with probability

.. math::

    P(s) = p_0^m + \\mathrm{probe}\\cdot m\\, p_1\\, p_0^{m-1},

and :math:`T` tables with :math:`1 - (1 - P)^T`. The bucket width is
:math:`W = \\alpha\\,\\sigma`, with :math:`\\sigma` the median Euclidean distance
of a sampled point to its ``sample_k``-th nearest neighbour. Over a grid of
:math:`(\\alpha, m)` the smallest :math:`T` whose predicted recall (the mean
of :math:`1 - (1-P)^T` over the sampled neighbour pairs) reaches
``target_recall`` is taken, and of those settings the one with the lowest
predicted cost per query,

.. math::

    \\sum_{x} \\big(1 - (1 - P(s_x))^T\\big)
    \\;+\\; c_{look}\\, S\\, T\\, (1 + 2m\\cdot\\mathrm{probe}) \\;+\\; T m,

(expected points examined, estimated on a random sample of points; bucket
lookups, :math:`S` the shells probed per query, 1 for a lone oracle, and
:data:`LOOKUP_COST` the measured cost of a lookup in point evaluations;
the projections). :class:`~hypann.search.shells.SphericalShellSearch` makes
the same choice across its shells, with one :math:`\\sigma` per shell and
the neighbours taken in hyperbolic distance. The choice depends only on the
points and ``random_state``.

References
----------
M. Datar, N. Immorlica, P. Indyk, V. Mirrokni, *Locality-sensitive hashing
scheme based on p-stable distributions*, SoCG 2004.
Q. Lv, W. Josephson, Z. Wang, M. Charikar, K. Li, *Multi-probe LSH*, VLDB 2007.
Wu & Charikar, *Nearest Neighbor Search for Hyperbolic Embeddings*, section 5.
"""

from __future__ import annotations

from numbers import Integral

import numba as nb
import numpy as np

from hypann._params import Param
from hypann._validation import check_real
from hypann.geometry._kernels import insert_sorted, sq_dist_row
from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle
from hypann.oracles.brute import BruteForceOracle

__all__ = ["LSHOracle", "MAX_GRANULARITY", "choose_hash_parameters"]

#: Cap of the paper's per-shell granularity rule ``g = min(w**i, 10000)``.
MAX_GRANULARITY = 10000.0

# Largest granularity accepted: bucket coordinates r.x * g/2 + u stay below
# 2**52, where float64 still holds every integer (and int64 keys cannot wrap).
MAX_BUCKET_COORDINATE = 2.0**52

#: Cost of one bucket lookup (key, hash slot, bucket bounds) in point
#: evaluations, used by :func:`choose_hash_parameters` (measured: a lookup
#: costs about as much as two 10-D distance evaluations).
LOOKUP_COST = 2.0

#: Grids searched by :func:`choose_hash_parameters`.
AUTO_ALPHAS = tuple(float(2.0 ** (i / 2.0)) for i in range(-2, 9))  # W / sigma from 0.5 to 16
AUTO_MAX_BITS = 16
AUTO_MAX_TABLES = 64

# Bin edges of the distances compressed by _compress.
_COMPRESS_EDGES = np.geomspace(1e-6, 1e6, 1025)

# Quantile nodes of |r_1| and the s grid of the tabulated collision probabilities.
_N_NODES = 256
_S_GRID = np.concatenate([[0.0], np.geomspace(1e-4, 1e5, 1024)])

#: Neighbours per sampled point in the "auto"/"data" choice (recall@10).
AUTO_SAMPLE_K = 10
#: Random points whose distances to the sample estimate the points examined.
AUTO_FAR_SAMPLE = 2048
# Stream of the sample, apart from the hyperplanes' streams (random_state, t).
_SAMPLE_STREAM = 2**40 + 11

# 2^64 / golden ratio, odd: multiplier of the Fibonacci hashing of bucket keys.
_FIB = np.uint64(0x9E3779B97F4A7C15)

# Hyperplanes projected at once per row in the projection kernel (independent
# sums, each in the same j order: results do not depend on the batch).
_PROJ_BLOCK = 4


@nb.njit(cache=True, parallel=True)
def _project(X, R):
    """``X @ R.T`` with a fixed summation order (bit-identical per row)."""
    n, d = X.shape
    h = R.shape[0]
    out = np.empty((n, h))
    hb = h - h % _PROJ_BLOCK
    for i in nb.prange(n):
        x = X[i]
        for r in range(0, hb, _PROJ_BLOCK):
            s0 = 0.0
            s1 = 0.0
            s2 = 0.0
            s3 = 0.0
            for j in range(d):
                v = x[j]
                s0 += R[r, j] * v
                s1 += R[r + 1, j] * v
                s2 += R[r + 2, j] * v
                s3 += R[r + 3, j] * v
            out[i, r] = s0
            out[i, r + 1] = s1
            out[i, r + 2] = s2
            out[i, r + 3] = s3
        for r in range(hb, h):
            s = 0.0
            for j in range(d):
                s += R[r, j] * x[j]
            out[i, r] = s
    return out


@nb.njit(cache=True, inline="always")
def _slot(key, bits):
    """Fibonacci hashing: the top ``bits`` bits of ``key * 2^64/phi``."""
    return np.int64((key * _FIB) >> np.uint64(64 - bits))


@nb.njit(cache=True)
def _build_slots(bkeys, toff):
    """Open-addressing index (load <= 1/2, linear probing) of each table's bucket keys."""
    T = toff.shape[0] - 1
    hoff = np.zeros(T + 1, dtype=np.int64)
    hbits = np.zeros(T, dtype=np.int64)
    for t in range(T):
        cap = 2
        bits = 1
        while cap < 2 * (toff[t + 1] - toff[t]):
            cap <<= 1
            bits += 1
        hbits[t] = bits
        hoff[t + 1] = hoff[t] + cap
    hkeys = np.zeros(hoff[T], dtype=np.uint64)
    hbucket = np.full(hoff[T], -1, dtype=np.int64)
    for t in range(T):
        mask = (np.int64(1) << hbits[t]) - 1
        for b in range(toff[t], toff[t + 1]):
            pos = _slot(bkeys[b], hbits[t])
            while hbucket[hoff[t] + pos] >= 0:
                pos = (pos + 1) & mask
            hkeys[hoff[t] + pos] = bkeys[b]
            hbucket[hoff[t] + pos] = b
    return hkeys, hbucket, hoff, hbits


@nb.njit(cache=True, inline="always")
def _find_bucket(hkeys, hbucket, start, bits, key):
    """Bucket id of ``key`` in the table whose slots begin at ``start``, or -1."""
    mask = (np.int64(1) << bits) - 1
    pos = _slot(key, bits)
    while True:
        b = hbucket[start + pos]
        if b < 0 or hkeys[start + pos] == key:
            return b
        pos = (pos + 1) & mask


@nb.njit(cache=True, parallel=True)
def _collect(Q, X, pkeys, ptab, hoff, hbits, hkeys, hbucket, bstart, bids, k, max_cand, stop_sq):
    """Probe buckets, deduplicate, keep the k nearest by exact squared distance.

    ``pkeys``/``ptab`` (m, P): probe keys and their tables in probe order.
    Stops query ``i`` after ``max_cand[i]`` distinct candidates, or as soon as its
    best squared distance is ``<= stop_sq[i]`` (decision queries). Returns
    ``(ids (m, k), sq (m, k), evaluations (m,))`` (kernel contract:
    :mod:`hypann.geometry._kernels`).
    """
    m = Q.shape[0]
    n = X.shape[0]
    P = pkeys.shape[1]
    out_d = np.full((m, k), np.inf)
    out_i = np.full((m, k), -1, dtype=np.int64)
    evals = np.zeros(m, dtype=np.int64)
    words = (n + 63) >> 6
    for qi in nb.prange(m):
        seen = np.zeros(words, dtype=np.uint64)
        q = Q[qi]
        kd = out_d[qi]
        ki = out_i[qi]
        cnt = 0
        done = False
        for p in range(P):
            t = ptab[qi, p]
            b = _find_bucket(hkeys, hbucket, hoff[t], hbits[t], pkeys[qi, p])
            if b < 0:
                continue
            for s in range(bstart[b], bstart[b + 1]):
                j = bids[s]
                w = j >> 6
                bit = np.uint64(1) << np.uint64(j & 63)
                if seen[w] & bit:
                    continue
                seen[w] |= bit
                cnt += 1
                d = sq_dist_row(q, X[j])
                if d < kd[k - 1]:
                    insert_sorted(kd, ki, d, j)
                if cnt >= max_cand[qi] or kd[0] <= stop_sq[qi]:
                    done = True
                    break
            if done:
                break
        evals[qi] = cnt
    return out_i, out_d, evals


def _collision_tables(dim):
    """``p_0(s)``, ``p_1(s)`` on :data:`_S_GRID` for unit projections in ``dim`` dimensions."""
    if dim <= 1:
        a = np.ones(_N_NODES)
    else:
        from scipy.stats import beta

        a = np.sqrt(beta.ppf((np.arange(_N_NODES) + 0.5) / _N_NODES, 0.5, (dim - 1) / 2.0))
    t = _S_GRID[:, None] * a[None, :]  # projected difference in bucket widths
    p0 = np.maximum(0.0, 1.0 - t).mean(axis=1)
    p1 = np.where(t <= 1.0, t, np.maximum(0.0, 2.0 - t)).mean(axis=1)
    return p0, p1


def _collision(s, table):
    """Interpolate a collision table at distances ``s`` (in bucket widths); 0 beyond the grid."""
    return np.interp(s, _S_GRID, table, right=0.0)


def _compress(s, weight):
    """Distances binned on a log scale (2.7% wide bins, 1e-6..1e6; zero and beyond kept apart):
    ``(representative distances, summed weights)`` of the non-empty bins."""
    s = np.asarray(s, dtype=np.float64)
    weight = np.broadcast_to(np.asarray(weight, dtype=np.float64), s.shape)
    edges = np.log(_COMPRESS_EDGES)
    with np.errstate(divide="ignore"):
        pos = np.searchsorted(edges, np.log(s))  # 0: below 1e-6 (incl. 0), len(edges): beyond 1e6
    sums = np.bincount(pos, weights=weight, minlength=edges.size + 1)
    centres = np.concatenate([[0.0], np.exp((edges[:-1] + edges[1:]) / 2), [np.inf]])
    keep = sums > 0
    return centres[keep], sums[keep]


def choose_hash_parameters(near_s, far_s, far_weight, dim, target_recall, *, shells_per_query=1.0,
                           tables="auto", bits="auto", probe=1, alphas=AUTO_ALPHAS):
    """Bucket-width factor, hash length and table count from sampled distances.

    Parameters
    ----------
    near_s : ndarray
        Distances of sampled (query, true neighbour) pairs, each divided by
        the scale :math:`\\sigma` its bucket width is a multiple of.
    far_s, far_weight : ndarray
        Distances (same units) from the sampled queries to a random sample
        of the points they would search, and how many points each stands for
        per query (so that ``far_weight.sum()`` is the points per query).
    dim : int
        Dimension (the distribution of ``|r_1|``).
    target_recall : float
        Wanted mean probability of finding a sampled neighbour.
    shells_per_query : float
        Mean number of tables sets (shells) a query probes.
    tables, bits : int or "auto"
        Fixed values are kept; "auto" is searched (1..64, 1..16).
    probe : {0, 1}
        Multi-probe setting (fixed).
    alphas : sequence of float
        Candidate bucket widths ``W = alpha * sigma``.
        Distances are binned on a log scale (bins 2.7% wide) first, so the
        grid search costs the same for any sample size.

    Returns
    -------
    dict
        ``alpha``, ``tables``, ``bits``, ``recall`` (predicted) and
        ``examined`` (predicted points examined per query). Of the settings
        whose predicted recall reaches ``target_recall``, the one of least
        predicted cost (module docstring); when none does, the one of
        highest predicted recall.
    """
    p0_tab, p1_tab = _collision_tables(int(dim))
    near_s, near_w = _compress(near_s, 1.0)
    far_s, far_weight = _compress(far_s, far_weight)
    near_w = near_w / max(near_w.sum(), 1.0)
    bit_grid = np.arange(1, AUTO_MAX_BITS + 1) if bits == "auto" else np.array([int(bits)])
    table_grid = np.arange(1, AUTO_MAX_TABLES + 1) if tables == "auto" else np.array([int(tables)])
    best, best_key = None, None
    for alpha in alphas:
        n0, n1 = _collision(near_s / alpha, p0_tab), _collision(near_s / alpha, p1_tab)
        f0, f1 = _collision(far_s / alpha, p0_tab), _collision(far_s / alpha, p1_tab)
        for m in bit_grid:
            pn = n0**m + probe * m * n1 * n0 ** (m - 1)
            miss = 1.0 - np.minimum(pn, 1.0)
            recall = 1.0 - (miss[None, :] ** table_grid[:, None]) @ near_w if near_s.size else np.ones(table_grid.size)
            ok = np.flatnonzero(recall >= target_recall)
            i = ok[0] if ok.size else int(np.argmax(recall))
            T = int(table_grid[i])
            pf = np.minimum(f0**m + probe * m * f1 * f0 ** (m - 1), 1.0)
            examined = float(np.sum(far_weight * (1.0 - (1.0 - pf) ** T)))
            cost = examined + LOOKUP_COST * shells_per_query * T * (1 + 2 * m * probe) + T * m
            key = (0 if ok.size else 1, cost if ok.size else -recall[i], cost)
            if best_key is None or key < best_key:
                best_key = key
                best = {"alpha": float(alpha), "tables": T, "bits": int(m), "recall": float(recall[i]),
                        "examined": examined}
    return best


def _sample_distances(A, B):
    """Euclidean distances (len(A), len(B)) by the expanded form ``|a|^2 + |b|^2 - 2 a.b``
    (one matrix product, no (len(A), len(B), d) array). Only for the cost model of the
    "auto" choice, where a relative error near ``1e-8`` of the largest norm is harmless."""
    sq = (A * A).sum(axis=1)[:, None] + (B * B).sum(axis=1)[None, :] - 2.0 * (A @ B.T)
    return np.sqrt(np.maximum(sq, 0.0))


def _positive_median(kth, near, far):
    """Median of the positive k-th neighbour distances; falls back to any positive
    neighbour distance, then any positive distance, then 1 (all points equal)."""
    for values in (kth, near.ravel(), far):
        pos = values[values > 0]
        if pos.size:
            return float(np.median(pos))
    return 1.0


class LSHOracle(EuclideanOracle):
    """p-stable LSH with multi-probe and exact float64 re-ranking (the paper's oracle).

    Parameters
    ----------
    tables : int or "auto", default "auto"
        Number of hash tables ``T``; "auto": the fewest that reach
        ``target_recall`` on a sample (module docstring, at most 64).
    bits : int or "auto", default "auto"
        Random unit vectors (projections) per table ``m``; "auto": chosen
        with ``tables`` (at most 16).
    granularity : float, "data" or "auto", default "data"
        ``g``: the segment (-1, 1) is cut into ``g`` buckets of width
        ``W = 2/g``. ``"data"``: ``W = alpha * sigma`` with ``sigma`` the
        median distance of a sampled point to its 10th nearest neighbour and
        ``alpha`` chosen with ``tables`` and ``bits`` (module docstring).
        ``"auto"`` defers to :meth:`for_shell`, which applies the
        paper's ``g = min(w**i, 10000)``; an ``"auto"`` oracle cannot be built
        directly.
    probe : {0, 1}, default 1
        1: also probe the ``2m`` buckets at distance 1 (``+-1`` in one key
        coordinate) in every table; 0: the query's buckets only.
    max_candidates : int or None, default None
        Stop a query after this many distinct candidates (probe order: query
        buckets first, then neighbours nearest the query's projection).
    offset : bool, default True
        Random offset ``u`` in ``floor(r.x/W + u)`` as in Datar et al.;
        ``False`` is the paper's literal hash.
    max_granularity : float, default 10000
        Cap of the ``"auto"`` rule ``g = min(w**i, max_granularity)``; 10,000
        is the paper's. Data reaching ``1-|x|^2`` far below ``1e-4`` (deep
        combinatorial embeddings) need a higher cap: with it, buckets in the
        deep shells are too coarse and a sample budget is spent on them
        (``docs/reproduction.md``: on WordNet 100-D, 1-NN recall at budget
        1,000 goes from 0.80 to 0.99 with ``max_granularity=1e12``).
    random_state : int, default 0
        Seed of the hyperplanes; the same seed gives the same hyperplanes for
        every shell (hence an int, not None or a Generator). It also draws
        the sample of the "auto"/"data" choice.
    target_recall : float, default 0.96
        Predicted recall@10 on the sample that the "auto"/"data" choice aims
        at (0 < target_recall < 1); unused when all three are fixed.
    sample_size : int, default 256
        Sampled points (pseudo-queries) of the "auto"/"data" choice.

    Attributes
    ----------
    hyperplanes_ : ndarray of shape (tables * bits, dim)
        The random unit vectors, table ``t`` in rows ``t*bits:(t+1)*bits``.
    granularity_ : float
        The granularity ``g`` in use (bucket width ``2/g``).
    tables_, bits_ : int
        The table count and hash length in use.
    choice_ : dict or None
        What the "auto"/"data" choice predicted (``alpha``, ``tables``,
        ``bits``, ``recall``, ``examined`` points per query); None when all
        three settings were fixed.

    Notes
    -----
    Exact re-ranking needs the points: the oracle keeps its own copy of the
    array passed to :meth:`build` (the index's search algorithms hand over
    their own arrays with ``copy=False``); :attr:`nbytes` counts the index
    structure only.
    """

    name = "lsh"
    exact = False
    counts_evaluations = True
    supports_budget = True
    supports_decision = True
    thread_safe = True
    adapts_per_shell = True  # for_shell: granularity="auto" -> the shell's bucket width
    build_settings = (
        Param("tables", "int", "auto", "number of hash tables T; 'auto': the fewest that reach target_recall on a "
              "sample", low=1, extra=("auto",), what="a positive integer or 'auto'"),
        Param("bits", "int", "auto", "random unit vectors (projections) per table m; 'auto': chosen with tables",
              low=1, extra=("auto",), what="a positive integer or 'auto'"),
        Param("granularity", "float", "data", "g: buckets of width 2/g; 'data': width from sampled 10th-neighbour "
              "distances; 'auto': the paper's g = min(w**i, max_granularity) per shell", low=0.0,
              high=MAX_BUCKET_COORDINATE, low_open=True, extra=("data", "auto"), what="a number > 0, 'data' or 'auto'"),
        Param("probe", "int", 1, "1: also probe the 2m buckets at distance 1; 0: the query's buckets only",
              choices=(0, 1)),
        Param("max_candidates", "int", None, "stop a query after this many distinct candidates", low=1,
              none_ok=True),
        Param("offset", "bool", True, "random offset u in floor(r.x/W + u) (False: the paper's literal hash)"),
        Param("random_state", "seed", 0, "seed of the hyperplanes (the same for every shell)"),
        Param("max_granularity", "float", MAX_GRANULARITY, "cap of the 'auto' granularity rule", low=0.0,
              high=MAX_BUCKET_COORDINATE, low_open=True),
        Param("target_recall", "float", 0.96, "predicted recall@10 on the sample that the 'auto'/'data' choice aims at",
              low=0.0, high=1.0, low_open=True, high_open=True),
        Param("sample_size", "int", 256, "sampled points (pseudo-queries) of the 'auto'/'data' choice", low=1),
    )

    def __init__(
        self,
        *,
        tables: int | str = "auto",
        bits: int | str = "auto",
        granularity: float | str = "data",
        probe: int = 1,
        max_candidates: int | None = None,
        offset: bool = True,
        random_state: int = 0,
        max_granularity: float = MAX_GRANULARITY,
        target_recall: float = 0.96,
        sample_size: int = 256,
    ):
        self.tables = tables
        self.bits = bits
        self.granularity = granularity
        self.probe = probe
        self.max_candidates = max_candidates
        self.offset = offset
        self.random_state = random_state
        self.max_granularity = max_granularity
        self.target_recall = target_recall
        self.sample_size = sample_size

    # -- settings ---------------------------------------------------------
    def _check_settings(self):
        """The declared checks of every setting (``build_settings``), then ``granularity="auto"``,
        which only :meth:`for_shell` resolves."""
        super()._check_settings()
        if self.granularity == "auto":
            raise ValueError(
                "granularity='auto' is resolved per shell: call for_shell(shell_index, width) "
                "first, or pass a number"
            )

    def for_shell(self, shell_index: int, width: float) -> LSHOracle:
        """An unbuilt copy for shell ``shell_index`` of a partition of width ``w``.

        With ``granularity="auto"`` the copy gets the paper's rule

        .. math:: g_i = \\min(w^i, g_{max}),

        with :math:`g_{max}` = ``max_granularity`` (the paper's 10,000),

        for shell :math:`i \\ge 1` holding :math:`w^{i-1} \\le 1/(1-\\|x\\|^2) \\le w^i`
        (bucket width :math:`2 w^{-i}`, proportional to the shell's
        :math:`1-\\|x\\|^2`); with a fixed granularity it is a plain copy. All
        other settings, hence the hyperplanes, are shared.
        """
        if isinstance(shell_index, bool) or not isinstance(shell_index, Integral) or shell_index < 1:
            raise ValueError(f"shell_index must be an integer >= 1 (shells count from 1), got {shell_index!r}")
        width = check_real(width, "width", low=1.0, low_open=True)
        cap = check_real(self.max_granularity, "max_granularity", low=0.0, low_open=True)
        params = self.get_params()
        if self.granularity == "auto":
            # log-space comparison avoids overflow of width**shell_index
            if shell_index * np.log(width) >= np.log(cap):
                params["granularity"] = float(cap)
            else:
                params["granularity"] = float(width**shell_index)
        return type(self)(**params)

    @property
    def needs_choice(self) -> bool:
        """Whether ``tables``, ``bits`` or ``granularity`` is left to the data ("auto"/"data")."""
        return self.tables == "auto" or self.bits == "auto" or self.granularity == "data"

    def resolved(self, *, tables: int, bits: int, granularity: float) -> LSHOracle:
        """An unbuilt copy with fixed ``tables``, ``bits`` and ``granularity`` (other settings shared)."""
        params = self.get_params()
        params.update(tables=int(tables), bits=int(bits), granularity=float(granularity))
        return type(self)(**params)

    def spec(self) -> str:
        p = self.get_params()
        g = p["granularity"]
        p["granularity"] = g if isinstance(g, str) else repr(float(g))
        return "lsh:" + ",".join(f"{key}={value}" for key, value in p.items())

    # -- random functions -------------------------------------------------
    def _hash_functions(self, dim):
        """Unit vectors (T*m, d), offsets (T*m,), odd uint64 multipliers (T, m)."""
        T, m = self.tables_, self.bits_
        R = np.empty((T * m, dim))
        u = np.zeros(T * m)
        mult = np.empty((T, m), dtype=np.uint64)
        for t in range(T):
            rng = np.random.default_rng([int(self.random_state), t])
            R[t * m : (t + 1) * m] = rng.standard_normal((m, dim))
            ut = rng.random(m)
            if self.offset:
                u[t * m : (t + 1) * m] = ut
            mult[t] = rng.integers(0, 2**64 - 1, size=m, dtype=np.uint64, endpoint=True) | np.uint64(1)
        norms = np.linalg.norm(R, axis=1, keepdims=True)
        R /= norms
        return R, u, mult

    def _coordinates(self, X):
        """Real-valued bucket coordinates ``r.x/W + u``, shape (n, T*m)."""
        return _project(X, self._R) * self._scale + self._u

    def _keys(self, coords_int):
        """Mix integer coordinates (n, T*m) into uint64 keys (n, T), wrapping mod 2**64."""
        n = coords_int.shape[0]
        c = coords_int.astype(np.int64).view(np.uint64).reshape(n, self.tables_, self.bits_)
        return (c * self._mult[None]).sum(axis=2, dtype=np.uint64)

    # -- protocol ---------------------------------------------------------
    def _choose(self, points):
        """Fixed ``(tables, bits, granularity)`` for ``points`` from a sample (module docstring)."""
        n, dim = points.shape
        rng = np.random.default_rng([int(self.random_state), _SAMPLE_STREAM])
        k = min(AUTO_SAMPLE_K, n - 1)
        if k < 1:  # one point or none: one bucket holds everything
            return {"alpha": 1.0, "tables": 1, "bits": 1, "recall": 1.0, "examined": float(n)}, 1.0
        sample = points[np.sort(rng.choice(n, min(self.sample_size, n), replace=False))]
        # Euclidean k-NN of the sample (itself dropped: column 0 is at distance 0)
        near = np.sqrt(BruteForceOracle().build(points, copy=False).knn(sample, k + 1).sq_dist[:, 1:])
        far_ids = rng.choice(n, min(n, AUTO_FAR_SAMPLE), replace=False)
        far = _sample_distances(sample, points[far_ids]).ravel()
        if self.granularity == "data":
            sigma = _positive_median(near[:, -1], near, far)
            alphas = AUTO_ALPHAS
        else:
            sigma, alphas = 2.0 / float(self.granularity), (1.0,)
        choice = choose_hash_parameters(
            near.ravel() / sigma, far / sigma, np.full(far.size, n / far_ids.size / sample.shape[0]), dim,
            float(self.target_recall), tables=self.tables, bits=self.bits, probe=int(self.probe), alphas=alphas,
        )
        return choice, 2.0 / (choice["alpha"] * sigma)

    def _build(self, points):
        self._check_settings()
        n = points.shape[0]
        self.choice_ = None
        granularity = self.granularity
        self.tables_, self.bits_ = self.tables, self.bits
        if self.needs_choice:
            self.choice_, granularity = self._choose(points)
            self.tables_, self.bits_ = self.choice_["tables"], self.choice_["bits"]
            granularity = min(granularity, MAX_BUCKET_COORDINATE)
        T = self.tables_
        self._points = points
        self._scale = float(granularity) / 2.0  # 1 / W
        self._R, self._u, self._mult = self._hash_functions(points.shape[1])
        self.hyperplanes_ = self._R
        self.granularity_ = float(granularity)
        keys = self._keys(np.floor(self._coordinates(points))) if n else np.empty((0, T), np.uint64)
        bkeys, bstart, bids, toff = [], [], np.empty(T * n, dtype=np.int64), [0]
        for t in range(T):
            order = np.argsort(keys[:, t], kind="stable")
            sk = keys[order, t]
            first = np.ones(n, dtype=bool)
            first[1:] = sk[1:] != sk[:-1]
            starts = np.flatnonzero(first)
            bkeys.append(sk[starts])
            bstart.append(starts + t * n)
            bids[t * n : (t + 1) * n] = order
            toff.append(toff[-1] + len(starts))
        bstart.append(np.array([T * n]))
        self._bkeys = np.concatenate(bkeys).astype(np.uint64)
        self._bstart = np.concatenate(bstart).astype(np.int64)
        self._bids = bids
        self._toff = np.asarray(toff, dtype=np.int64)
        self._hkeys, self._hbucket, self._hoff, self._hbits = _build_slots(self._bkeys, self._toff)

    def _probes(self, queries, ordered):
        """Probe keys and tables (m, P); neighbour probes query-directed when ``ordered``."""
        mq = queries.shape[0]
        T, m = self.tables_, self.bits_
        coords = self._coordinates(queries)
        base = np.floor(coords)
        keys = self._keys(base)  # (mq, T)
        tab = np.broadcast_to(np.arange(T, dtype=np.int64), (mq, T))
        if self.probe == 0:
            return np.ascontiguousarray(keys), np.ascontiguousarray(tab)
        mult = self._mult[None]
        nkeys = np.stack([keys[:, :, None] - mult, keys[:, :, None] + mult], axis=3).reshape(mq, -1)
        ntab = np.broadcast_to(np.arange(T, dtype=np.int64)[None, :, None, None], (mq, T, m, 2)).reshape(mq, -1)
        if ordered:
            # neighbour -1 is `frac` (in bucket widths) away from the query, neighbour +1 is `1 - frac`
            frac = (coords - base).reshape(mq, T, m)
            score = np.stack([frac, 1.0 - frac], axis=3).reshape(mq, -1)
            order = np.argsort(score, axis=1, kind="stable")
            nkeys = np.take_along_axis(nkeys, order, 1)
            ntab = np.take_along_axis(ntab, order, 1)
        return (
            np.ascontiguousarray(np.hstack([keys, nkeys])),
            np.ascontiguousarray(np.hstack([tab, ntab])),
        )

    def _run(self, queries, k, stop_sq, ordered, budget=None):
        pkeys, ptab = self._probes(queries, ordered)
        cap = np.full(queries.shape[0], np.iinfo(np.int64).max, dtype=np.int64)
        if self.max_candidates is not None:
            cap[:] = self.max_candidates
        if budget is not None:
            cap = np.minimum(cap, np.maximum(budget, 1))
        return _collect(
            queries, self._points, pkeys, ptab, self._hoff, self._hbits, self._hkeys, self._hbucket,
            self._bstart, self._bids,
            k, cap, stop_sq,
        )

    def _knn(self, queries, k, budget=None):
        """k nearest candidates; ``budget`` (m,) caps the candidates examined per query."""
        mq = queries.shape[0]
        if k == 0 or self.n_points_ == 0:
            return EuclideanNeighbors(np.empty((mq, 0)), np.empty((mq, 0), np.int64), np.zeros(mq, np.int64))
        ordered = self.max_candidates is not None or budget is not None
        i, d, ev = self._run(queries, k, np.full(mq, -1.0), ordered, budget)
        return EuclideanNeighbors(d, i, ev)

    def _near(self, queries, radius, eps, budget=None):
        """(1+eps, R) decision query over the probed buckets.

        Returns the first candidate found within ``(1+eps) * radius`` (the
        search stops there) or -1, and the number of distinct candidates
        examined (at most ``budget[i]`` when a budget is given). A -1 is not
        a proof that no point lies within ``radius``: LSH may miss it.
        """
        mq = queries.shape[0]
        if self.n_points_ == 0:
            return np.full(mq, -1, np.int64), np.zeros(mq, np.int64)
        stop = ((1.0 + eps) * radius) ** 2
        i, d, ev = self._run(queries, 1, np.ascontiguousarray(stop, dtype=np.float64), True, budget)
        cert = np.where(d[:, 0] <= stop, i[:, 0], -1)
        return cert, ev

    @property
    def nbytes(self):
        arrays = (self._bkeys, self._bstart, self._bids, self._toff, self._hkeys, self._hbucket, self._R,
                  self._u, self._mult)
        return int(sum(a.nbytes for a in arrays))
