"""Exact k-NN scans by ``delta`` for batches of queries: a BLAS Gram product screens, ``delta_row`` decides.

:func:`hypann.geometry._kernels.brute_knn_delta` evaluates
``delta(q, x) = |q-x|^2 / ((1-|q|^2)(1-|x|^2))`` from explicit differences
for every pair, one dependent chain of additions per pair.
:func:`knn_delta_scan` returns the same ids and the same deltas, bit for
bit, but computes most pairs through the Gram matrix ``G = Q X^T`` of a block
of queries and a block of points (one BLAS ``dgemm``, float64; float32
points: ``sgemm``, below):

.. math::

    \\tilde s = |q|^2 + |x|^2 - 2\\, q \\cdot x ,
    \\qquad |\\tilde s - |q-x|^2| \\le e = 2 \\mu\\, (|q|^2 + |x|^2) ,

with ``mu = 2 (d + 16) u`` and ``u = 2^-53``. The forward error of each dot
product in any summation order is at most ``gamma_d = d u / (1 - d u)``
times the sum of the products' magnitudes (Higham, *Accuracy and Stability
of Numerical Algorithms*, 3.1), and ``|q . x| <= (|q|^2 + |x|^2) / 2``, so
``|s~ - |q-x|^2| <= (2 d + 4) u (|q|^2 + |x|^2)`` to first order: ``e``
holds it twice over. ``delta_row``'s own value (explicit differences, a
serial sum, one division) is within a factor ``1 +- gamma_{d+4}`` of the
exact ``|q-x|^2 / (c_q c_x)``. Hence

.. math::

    L = (\\tilde s - e)(1 - \\mu) / (c_q c_x) \\;\\le\\;
    \\texttt{delta\\_row}(q, x) \\;\\le\\;
    U = (\\tilde s + e)(1 + \\mu) / (c_q c_x)

(``mu`` also covers the few roundings of forming ``L`` and ``U``). The
points go in blocks, in index order. Each query keeps the ``k`` smallest
``U`` seen up to the end of the current block; their largest, ``tau``, is
at least the ``k``-th smallest ``delta_row`` among them, so at least the
final ``k``-th ``delta``. A point of the block with ``L > tau`` has
``delta_row > tau`` and cannot be among the ``k`` nearest (nor tie with
the ``k``-th); every other point gets its ``delta_row``, which is offered
to the top-k list in index order exactly as the full scan offers it. So the
result is the full scan's, ties included. Within a block the bounds may be
gathered starting anywhere (``scan_from``, a guess of where a query's nearest
points lie): the block's final ``tau`` is the same, and fewer bounds are
offered that later ones replace.

The screen removes all but at most about ``k`` points per query and block
(the block's points among the ``k`` nearest so far) plus the points within
the bounds' width of the ``k``-th: on the data families 16-27 of 20,000 (5
blocks), boundary-heavy 154-212. Deciding each point on the running ``tau``
instead evaluated every point that improved it: 49-90 and 184-256
(``docs/benchmarks.md``, "The exact scan through Gram blocks"). Near the
boundary the bounds widen (``e`` is an absolute error, divided by
``c_q c_x``), so more points are evaluated exactly; the answer does not
change. A ``nan`` or ``inf`` bound (a conformal factor below about
``1e-308``) makes the point be evaluated.

Float32 points (``storage="float32"``) are multiplied in float32
(``sgemm``, without a float64 copy of each block of points), each block of
queries rounded to float32 once. Rounding ``q`` moves ``q . x`` by at most
``u sum |q_i x_i| <= u (|q|^2 + |x|^2) / 2`` (``u = 2^-24``, float32's unit
roundoff), and the float32 product adds at most ``gamma_d`` times that sum,
so ``|s~ - |q-x|^2| <= (d + 2) u (|q|^2 + |x|^2)`` to first order (the norms
are still summed in float64, whose error is far smaller). So
``mu = (d + 16) u`` here: ``e = 2 (d + 16) u (|q|^2 + |x|^2)`` holds it twice
over, as with float64 products. Products and rounded coordinates can also
underflow: each of the ``2 d`` moves ``q . x`` by at most ``2^-150``, and
``e`` has an absolute floor ``d 2^-140`` (:func:`gram_floor`) that holds
them with room to spare. The bounds are 2^28 times wider than with float64
products, so more points are evaluated exactly (those within the wider
bounds of the ``k``-th); the answer is the same.

Threads: with several numba threads and several blocks of points, the
blocks are split into one contiguous group per thread (:func:`_scan_point_groups`),
each scanned with single-threaded BLAS and merged in group order, so ``n_jobs``
bounds both and no BLAS pool spins while numba's folds run (with BLAS and
numba taking turns on two threads, a batch had been slower than on one).
With one block of points and several blocks of queries, the query blocks are
split into one contiguous group per thread instead (:func:`_scan_query_groups`),
with the same result. With one thread, or one block of points and one of
queries, BLAS and the fold take turns on numba's threads.

The product replaces ``d`` dependent additions per pair by a blocked matrix
product, which pays off once a call holds enough queries; one query at a
time it is a matrix-vector product, bound by memory like the scan, and the
plain scan (four lanes and a screen from 16-D on) is faster.
``docs/benchmarks.md`` ("The exact scan through Gram blocks") has the
measured break-even per family and dimension. :func:`knn_delta_scan` takes
the product from ``m >= 4`` queries and ``m d >= 160`` (16 queries at 10-D,
5 at 32-D, 4 from 40-D on) and the plain scan below: on clustered data at
64-D and more the plain scan would be faster up to a few dozen queries, on
uniform data the product wins from 2-4 queries, and uniform-like data is
what ``algorithm="auto"`` scans.
"""

from __future__ import annotations

import functools
from concurrent.futures import ThreadPoolExecutor

import numba as nb
import numpy as np

from hypann._runtime import SERIAL_MAX_QUERIES, read_only
from hypann.geometry._kernels import (UNIT_ROUNDOFF, brute_knn_delta, brute_knn_delta_serial, brute_knn_delta_split,
                                      deltas_to_rows, insert_sorted, merge_in_block_order)
from hypann.geometry.screened_scan import screened_knn_delta

#: Smallest batch scanned through the Gram product (with :data:`GRAM_MIN_WORK`); see the module docstring.
GRAM_MIN_QUERIES = 4
#: Smallest ``queries x dimension`` of a batch scanned through the Gram product.
GRAM_MIN_WORK = 160
#: Smallest ``rows x dimension`` of a scan that a batch of fewer queries than threads splits
#: into blocks of rows (:func:`splits_rows`); a shorter scan runs one thread per query.
SPLIT_SCAN_MIN_WORK = 1 << 20
#: Blocks of rows per thread when a scan of fewer queries than threads is split (load balance:
#: rows stop early at different depths).
SPLIT_BLOCKS_PER_THREAD = 2
#: Queries per block (the rows of one ``dgemm``).
QUERY_BLOCK = 256
#: Points per block: a block of ``QUERY_BLOCK x POINT_BLOCK`` float64 products is 8 MB.
POINT_BLOCK = 4096
#: An absolute floor of ``e`` for float64 products: the error of products that underflow (at most ``d 2^-1074``).
_TINY = 1e-290
#: The unit roundoff of float32, ``2^-24``: the products' when the points are float32 (module docstring).
SINGLE_ROUNDOFF = 2.0**-24


def gram_margin(dim: int, single: bool = False) -> float:
    """The relative margin ``mu`` of the bounds (module docstring): ``2 (d + 16) u`` for float64 products,
    ``(d + 16) u`` with float32's ``u`` (:data:`SINGLE_ROUNDOFF`) for float32 products, whose norms are
    still summed in float64."""
    return (dim + 16) * SINGLE_ROUNDOFF if single else 2.0 * (dim + 16) * UNIT_ROUNDOFF


def gram_floor(dim: int, single: bool) -> float:
    """The absolute floor of ``e``: :data:`_TINY` for float64 products; ``d 2^-140`` for float32 ones, whose
    ``d`` products and ``d`` rounded query coordinates may each lose up to ``2^-150`` to underflow (module
    docstring)."""
    return dim * 2.0**-140 if single else _TINY


@functools.cache
def _blas_controller():
    from threadpoolctl import ThreadpoolController

    return ThreadpoolController()


@nb.njit(cache=True, inline="always")
def _offer_bound(ub, up):
    """Put ``up`` in place of the largest of the ``k`` smallest upper bounds so far, ``ub``, a max-heap
    (``ub[p] >= ub[2p + 1], ub[2p + 2]``: ``ub[0]`` is the largest), and sift it down to restore the heap.
    The caller offers only ``up < ub[0]``. The heap holds the same ``k`` values a sorted list would, in
    ``log2 k`` steps an offer instead of up to ``k`` shifts (the long edges' scan keeps 32 a point)."""
    k = ub.shape[0]
    p = 0
    while True:
        c = 2 * p + 1
        if c >= k:
            break
        if c + 1 < k and ub[c + 1] > ub[c]:
            c += 1
        if not ub[c] > up:
            break
        ub[p] = ub[c]
        p = c
    ub[p] = up


@nb.njit(cache=True, inline="always")
def _pair_bounds(qn_i, xn_j, g, inv_cx_j, e_factor, floor, up_factor, low_factor):
    """``(U, L)`` of one pair from its Gram product ``g = q . x`` (module docstring): ``s~ = |q|^2 + |x|^2 -
    2 g``, ``e = 2 mu (|q|^2 + |x|^2)`` (floored), ``U = (s~ + e) up_factor / c_x`` and ``L = (s~ - e)
    low_factor / c_x``, with ``up_factor = (1 + mu) / c_q`` and ``low_factor = (1 - mu) / c_q``."""
    s = qn_i + xn_j - 2.0 * g
    e = e_factor * (qn_i + xn_j) + floor
    return (s + e) * up_factor * inv_cx_j, (s - e) * low_factor * inv_cx_j


@nb.njit(cache=True, inline="always")
def _fold_row(i, G, Q, cq, qn, X, cx, xn, inv_cx, first, margin, floor, ub, out_d, out_i, evaluated, scan_from,
              bounds, picked):
    """Fold row ``i`` of the products ``G`` (query ``i`` x points ``first, first + 1, ...``) into its lists.

    ``ub[i]``: the ``k`` smallest upper bounds so far (a max-heap, :func:`_offer_bound`: ``tau``, their
    largest, is ``ub[i, 0]``); ``out_d[i]``/``out_i[i]``:
    the top-k by ``delta_row``; ``evaluated[i]`` counts the exact evaluations;
    ``scan_from[i]``: the point where the offers start (see below);
    ``bounds``: float64 scratch of shape ``(2, >= G.shape[1])``; ``picked``: int64 scratch of ``>= G.shape[1]``.

    Three passes over the block. The first computes every pair's upper and
    lower bound into ``bounds``, without a branch (numba's LLVM does not
    vectorize this loop: it stays scalar code). The second offers the upper
    bounds below the running ``tau`` to ``ub[i]``. The third evaluates, in
    index order, the points whose lower bound is not above the block's final
    ``tau``: it picks them first, then computes their ``delta_row`` values
    eight rows side by side (:func:`~hypann.geometry._kernels.deltas_to_rows`,
    each lane its row's sum in coordinate order: the same bits, without
    waiting on one chain of ``d`` additions at a time), then offers them to
    the top-k list in index order. That ``tau`` is still at least the final
    ``k``-th delta (module docstring), and it is the smallest the block
    offers: deciding on the running ``tau`` would evaluate every point that
    improves it (about ``k log(width / k)`` in a block) instead of about ``k``.

    The offers go round the block from the point ``scan_from[i]`` when it
    lies in the block (else from its first point): ``scan_from[i]`` to the
    block's end, then its start. The final ``tau`` is the ``k``-th smallest of
    the same bounds in any order, and the evaluations keep index order, so
    the lists and ``evaluated`` do not depend on ``scan_from``. Starting near
    the query's nearest points offers fewer bounds that later ones replace.
    """
    width = G.shape[1]
    k = ub.shape[1]
    e_factor = 2.0 * margin
    qi = qn[i]
    inv_cq = 1.0 / cq[i]
    up_factor = (1.0 + margin) * inv_cq
    low_factor = (1.0 - margin) * inv_cq
    g = G[i]
    ups = bounds[0]
    lows = bounds[1]
    for t in range(width):
        up, low = _pair_bounds(qi, xn[first + t], g[t], inv_cx[first + t], e_factor, floor, up_factor, low_factor)
        ups[t] = up
        lows[t] = low
    ubi = ub[i]
    tau = ubi[0]
    r0 = scan_from[i] - first
    if r0 < 0 or r0 >= width:
        r0 = 0
    for part in range(2):  # [r0, width), then [0, r0)
        for t in range(r0 if part == 0 else 0, width if part == 0 else r0):
            if ups[t] < tau:
                _offer_bound(ubi, ups[t])
                tau = ubi[0]
    n_picked = 0
    for t in range(width):
        if not lows[t] > tau:  # also for a nan bound
            picked[n_picked] = first + t
            n_picked += 1
    evaluated[i] += n_picked
    deltas = bounds[0]  # the upper bounds are spent
    deltas_to_rows(Q[i], cq[i], X, cx, picked[:n_picked], False, deltas)
    for t in range(n_picked):
        if deltas[t] < out_d[i, k - 1]:
            insert_sorted(out_d[i], out_i[i], deltas[t], picked[t])


#: Rows of a block that one parallel task folds (with one scratch of bounds).
_FOLD_CHUNK = 16


@nb.njit(cache=True, parallel=True)
def _fold_block(G, Q, cq, qn, X, cx, xn, inv_cx, first, margin, floor, ub, out_d, out_i, evaluated,
                scan_from):
    """:func:`_fold_row` of every query, in parallel (rows are independent: one query each)."""
    m, width = G.shape
    for c in nb.prange((m + _FOLD_CHUNK - 1) // _FOLD_CHUNK):
        bounds = np.empty((2, width))
        picked = np.empty(width, dtype=np.int64)
        for i in range(c * _FOLD_CHUNK, min(m, (c + 1) * _FOLD_CHUNK)):
            _fold_row(i, G, Q, cq, qn, X, cx, xn, inv_cx, first, margin, floor, ub, out_d, out_i, evaluated,
                      scan_from, bounds, picked)


@nb.njit(cache=True, nogil=True)
def _fold_block_serial(G, Q, cq, qn, X, cx, xn, inv_cx, first, margin, floor, ub, out_d, out_i, evaluated,
                       scan_from):
    """:func:`_fold_row` of every query on the calling thread, without the GIL (one task of
    :func:`gram_knn_delta`'s point groups)."""
    bounds = np.empty((2, G.shape[1]))
    picked = np.empty(G.shape[1], dtype=np.int64)
    for i in range(G.shape[0]):
        _fold_row(i, G, Q, cq, qn, X, cx, xn, inv_cx, first, margin, floor, ub, out_d, out_i, evaluated, scan_from,
                  bounds, picked)


def _squared_norms(rows):
    """``|x|^2`` of each row in float64 (any summation order: the bound allows it)."""
    rows = np.asarray(rows, dtype=np.float64)
    return np.einsum("ij,ij->i", rows, rows)


def _fold_point_blocks(Q, cq, qn, X, cx, xn, inv_cx, margin, floor, starts, out_i, out_d, evaluated, scan_from,
                       fold):
    """Products of every block of ``QUERY_BLOCK`` queries with the point blocks starting at ``starts``
    (in order), each folded by ``fold`` (:func:`_fold_block` or :func:`_fold_block_serial`) into the
    lists ``out_i``/``out_d`` (their ``k`` is the list length); ``scan_from``: see :func:`_fold_row`.
    Float32 points are multiplied in float32 (``sgemm``, the queries rounded to float32), others in
    float64 (``dgemm``); ``margin`` and ``floor`` must be those of the products' precision."""
    m, k = out_i.shape
    single = X.dtype == np.float32
    for a in range(0, m, QUERY_BLOCK):
        b = min(m, a + QUERY_BLOCK)
        qa = np.ascontiguousarray(Q[a:b], dtype=np.float64)
        factor = qa.astype(np.float32) if single else qa
        ub = np.full((b - a, k), np.inf)
        for s in starts:
            block = X[s:s + POINT_BLOCK]
            G = factor @ (block if single else np.asarray(block, dtype=np.float64)).T
            fold(G, qa, cq[a:b], qn[a:b], X, cx, xn, inv_cx, s, margin, floor, ub, out_d[a:b], out_i[a:b],
                 evaluated[a:b], scan_from[a:b])


def _on_threads(run, n_groups):
    """``run(g)`` for every group ``g < n_groups``, each on its own thread, with BLAS held to one thread (the
    groups' products and serial folds release the GIL); a task's exception is raised here."""
    with _blas_controller().limit(limits=1, user_api="blas"):
        with ThreadPoolExecutor(max_workers=n_groups) as pool:
            list(pool.map(run, range(n_groups)))


def _scan_point_groups(Q, cq, qn, X, cx, xn, inv_cx, margin, floor, starts, n_groups, out_i, out_d, evaluated,
                       scan_from):
    """:func:`gram_knn_delta`'s scan with the point blocks split into ``n_groups`` contiguous groups.

    Each group runs on its own thread: single-threaded BLAS products of its
    blocks and :func:`_fold_block_serial` into lists of its own (both release
    the GIL). A BLAS with many threads alternating with numba's parallel
    folds leaves each pool's threads spinning while the other works. The
    groups' lists are then offered in group order
    (:func:`~hypann.geometry._kernels.merge_in_block_order`): the ``k``
    smallest ``(delta, index)`` pairs, as in one scan in index order.
    Only ``evaluated`` depends on the grouping (each group's bounds start
    afresh).
    """
    m, k = out_i.shape
    bounds = np.linspace(0, len(starts), n_groups + 1).round().astype(int)
    part_i = np.full((n_groups, m, k), -1, dtype=np.int64)
    part_d = np.full((n_groups, m, k), np.inf)
    part_e = np.zeros((n_groups, m), dtype=np.int64)

    def run(g):
        _fold_point_blocks(Q, cq, qn, X, cx, xn, inv_cx, margin, floor, starts[bounds[g]:bounds[g + 1]], part_i[g],
                           part_d[g], part_e[g], scan_from, _fold_block_serial)

    _on_threads(run, n_groups)
    merge_in_block_order(np.ascontiguousarray(part_i.transpose(1, 0, 2)),
                         np.ascontiguousarray(part_d.transpose(1, 0, 2)), out_i, out_d)
    evaluated += part_e.sum(axis=0)


def _scan_query_groups(Q, cq, qn, X, cx, xn, inv_cx, margin, floor, starts, n_groups, out_i, out_d, evaluated,
                       scan_from):
    """:func:`gram_knn_delta`'s scan with the blocks of queries split into ``n_groups`` contiguous groups.

    For one block of points and several blocks of queries (a batch against
    at most :data:`POINT_BLOCK` points): each group runs on its own thread,
    single-threaded BLAS products and :func:`_fold_block_serial` into its own
    rows of the lists. Every query meets the same point blocks in the same
    order as in one scan, so the lists and ``evaluated`` are the same. (With
    BLAS and numba's folds taking turns on the threads instead, each pool spins
    while the other works: on 2 threads such a batch, 100,000 queries against
    1,024 points at 10-D, took 3.2x as long as on one: docs/benchmarks.md.)
    """
    m = Q.shape[0]
    blocks = -(-m // QUERY_BLOCK)
    bounds = [QUERY_BLOCK * b for b in np.linspace(0, blocks, n_groups + 1).round().astype(int)]
    bounds[-1] = m

    def run(g):
        a, b = bounds[g], bounds[g + 1]
        _fold_point_blocks(Q[a:b], cq[a:b], qn[a:b], X, cx, xn, inv_cx, margin, floor, starts, out_i[a:b], out_d[a:b],
                           evaluated[a:b], scan_from[a:b], _fold_block_serial)

    _on_threads(run, n_groups)


def gram_knn_delta(Q, cq, X, cx, k, *, return_evaluated=False, scan_from=None):
    """Exact ``k`` smallest ``delta`` of each query against every row of ``X``, via Gram blocks.

    Equal to :func:`hypann.geometry._kernels.brute_knn_delta` bit for bit
    (ids, deltas, tie order); see the module docstring.

    Parameters
    ----------
    Q : ndarray of shape (m, d), float64
    cq : ndarray of shape (m,)
        Stored conformal factors ``1-|q|^2``.
    X : ndarray of shape (n, d), float64 or float32
    cx : ndarray of shape (n,)
    k : int, ``1 <= k``
    return_evaluated : bool
        Also return the number of points evaluated exactly per query.
    scan_from : ndarray of shape (m,), int, optional
        Per query, a row of ``X`` near which its nearest points are expected (in
        index order); the screen's bounds start there (:func:`_fold_row`). Any
        values give the same result; good ones save work.

    Returns
    -------
    ids : ndarray of shape (m, k), int64
    deltas : ndarray of shape (m, k), float64
    """
    m, d = Q.shape
    n = X.shape[0]
    X, cx = read_only(X), read_only(cx)  # one compiled type of the folds, writable points or not
    out_i = np.full((m, k), -1, dtype=np.int64)
    out_d = np.full((m, k), np.inf)
    evaluated = np.zeros(m, dtype=np.int64)
    if m and n:
        single = X.dtype == np.float32  # float32 products (module docstring)
        margin = gram_margin(d, single)
        floor = gram_floor(d, single)
        qn = _squared_norms(Q)
        xn = np.concatenate([_squared_norms(X[s:s + POINT_BLOCK]) for s in range(0, n, POINT_BLOCK)])
        with np.errstate(divide="ignore"):
            inv_cx = 1.0 / np.asarray(cx, dtype=np.float64)
        starts = list(range(0, n, POINT_BLOCK))
        scan_from = np.zeros(m, dtype=np.int64) if scan_from is None else np.asarray(scan_from, dtype=np.int64)
        if scan_from.shape != (m,):
            raise ValueError(f"scan_from must hold one row per query, shape ({m},); got shape {scan_from.shape}")
        threads = nb.get_num_threads()
        n_groups = min(threads, len(starts))
        query_groups = min(threads, -(-m // QUERY_BLOCK))
        if n_groups > 1:
            _scan_point_groups(Q, cq, qn, X, cx, xn, inv_cx, margin, floor, starts, n_groups, out_i, out_d, evaluated,
                               scan_from)
        elif query_groups > 1:
            _scan_query_groups(Q, cq, qn, X, cx, xn, inv_cx, margin, floor, starts, query_groups, out_i, out_d,
                               evaluated, scan_from)
        else:  # BLAS's threads and the fold's, one after the other
            with _blas_controller().limit(limits=threads, user_api="blas"):
                _fold_point_blocks(Q, cq, qn, X, cx, xn, inv_cx, margin, floor, starts, out_i, out_d, evaluated,
                                   scan_from, _fold_block)
    if return_evaluated:
        return out_i, out_d, evaluated
    return out_i, out_d


def splits_rows(n, dim):
    """Whether a scan of ``n`` points of ``dim`` coordinates is long enough that fewer queries
    than threads split its rows among the threads (:data:`SPLIT_SCAN_MIN_WORK` values or more)."""
    return n * dim >= SPLIT_SCAN_MIN_WORK


def knn_delta_scan(Q, cq, X, cx, k, *, scan_from=None, codes=None):
    """Exact k-NN by ``delta`` of a batch: :func:`gram_knn_delta` from :data:`GRAM_MIN_QUERIES` queries and
    ``m d >= GRAM_MIN_WORK`` on, else the plain scan: split into blocks of rows on all of numba's
    threads when there are fewer queries than threads and the scan is long (:func:`splits_rows`),
    serial for one query on one thread, else one thread per query. The same result every way. The kernels
    get read-only views of the points (a structure's own, writable, or a loaded file's, read-only): one
    compiled type for both. ``scan_from``: where each query's screen starts in the Gram scan
    (:func:`gram_knn_delta`; the result is the same). ``codes``: optional
    :class:`~hypann.geometry.screened_scan.ScanCodes` of ``X``; the plain scan then reads them before the
    rows (:func:`~hypann.geometry.screened_scan.screened_knn_delta`, the same result)."""
    m, d = Q.shape
    if m >= GRAM_MIN_QUERIES and m * d >= GRAM_MIN_WORK:
        return gram_knn_delta(Q, cq, X, cx, k, scan_from=scan_from)
    coded = None if codes is None else codes.get(X, cx)  # kept for these arrays (not for views made per call)
    X, cx = read_only(X), read_only(cx)
    threads = nb.get_num_threads()
    n_blocks = SPLIT_BLOCKS_PER_THREAD * threads if m < threads and splits_rows(X.shape[0], d) else 0
    if coded is not None:
        return screened_knn_delta(Q, cq, X, cx, coded, k, n_blocks=n_blocks, serial=m <= SERIAL_MAX_QUERIES)
    if n_blocks:
        return brute_knn_delta_split(Q, cq, X, cx, k, n_blocks)
    return brute_knn_delta_serial(Q, cq, X, cx, k) if m <= SERIAL_MAX_QUERIES else brute_knn_delta(Q, cq, X, cx, k)
