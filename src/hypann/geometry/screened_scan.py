"""Exact k-NN scans of a few queries that read the points' one-byte codes before their rows.

A scan of one query (or a few: fewer than a Gram block pays for,
:mod:`hypann.geometry.gram_scan`) evaluates every row of the points.
From :data:`SCANNED_CODES_MIN_DIM` coordinates on, with the points' codes at
hand (:func:`~hypann.geometry.screen_codes.screen_codes`, ``d + 32`` bytes a
point), each row is first tested by
:func:`~hypann.geometry.screen_codes.screen_rejects` against the query's
current ``k``-th key: a row whose computed ``delta`` is proved ``>=`` that key
could not enter the list (the plain scan offers a row only when it is
strictly below it), so it is skipped unread. The rows that pass are
offered as :func:`~hypann.geometry._kernels._brute_row` offers them, in row
order, so the answer is the plain scan's bit for bit, ties included.

The codes are ``d + 32`` bytes against ``4 d`` (float32) or ``8 d`` (float64)
bytes of row, and their test is one float32 sum of ``d`` terms that the
compiler may vectorize. On points spread over the ball, where the plain
scan's early abandon (after 16 coordinates) rarely stops a sum, one 100-D
query over 100,000 points was 2.4-2.6x faster with them (MERU-like 256-D
points: 3.9-5.2x); on clustered data in the cache, where the plain scan
already stops most sums early, 0.92-1.34x (mostly 1.03-1.2x); with the
points read from memory, 2.0-3.0x on every set measured
(``benchmarks/screened_scan.py``; ``docs/benchmarks.md``, "A few queries'
scan reads one-byte codes first").

Splitting and threads as in the plain scan
(:func:`~hypann.geometry._kernels.brute_knn_delta_split`): fewer queries than
threads split the rows into blocks, each block keeps its own list, and the
lists are merged in block order; otherwise one thread per query. The same
answer every way.
"""

from __future__ import annotations

import mmap

import numba as nb
import numpy as np

from hypann.geometry._kernels import (LANES_MIN_DIM, block_lists, block_rows, delta_lanes_below, insert_sorted,
                                      lanes_shrink, merged_block_lists)
from hypann.geometry.screen_codes import SCREEN_MAX_DIM, screen_codes, screen_margin, screen_rejects

__all__ = ["SCANNED_CODES_MIN_DIM", "ScanCodes", "memory_mapped", "screened_knn_delta"]

#: Coordinates from which a scan of few queries reads the points' codes first (from which the plain scan
#: screens its rows over lanes, :data:`~hypann.geometry._kernels.LANES_MIN_DIM`; up to
#: :data:`~hypann.geometry.screen_codes.SCREEN_MAX_DIM`).
SCANNED_CODES_MIN_DIM = LANES_MIN_DIM
# The attribute under which a structure keeps its codes (ScanCodes.kept_by, nbytes_of, drop_from).
_KEPT_AS = "_scan_codes"


def memory_mapped(a) -> bool:
    """Whether the array ``a`` reads its data through a memory map (a :class:`numpy.memmap`, or a view of a
    buffer of a :class:`mmap.mmap`, as ``hypann.load(path, mmap=True)`` makes them)."""
    while isinstance(a, np.ndarray):
        if isinstance(a, np.memmap):
            return True
        a = a.base
    if isinstance(a, memoryview):
        a = a.obj
    return isinstance(a, mmap.mmap)


class ScanCodes:
    """The one-byte codes of a structure's points for its scans of few queries, made on first use.

    ``get(points, conformal)`` returns ``(codes, info)`` of exactly those arrays (the same objects as at the
    first call, else made again), or ``None``: outside ``SCANNED_CODES_MIN_DIM .. SCREEN_MAX_DIM``
    coordinates, and for points read through a memory map (:func:`memory_mapped`), which were mapped so as
    not to be held in memory. A structure that only answers large batches never makes them: they cost
    ``d + 32`` bytes a point (:attr:`nbytes`). Not pickled (:meth:`__getstate__`): made again from the
    points. A structure keeps its own (:meth:`kept_by`) and drops it with the points it was made for (a new
    build, :meth:`drop_from`).
    """

    def __init__(self):
        self._made = None

    @staticmethod
    def kept_by(owner):
        """The :class:`ScanCodes` that ``owner`` keeps (as ``_scan_codes``), made empty on first use."""
        kept = owner.__dict__.get(_KEPT_AS)
        if kept is None:
            kept = owner.__dict__.setdefault(_KEPT_AS, ScanCodes())
        return kept

    @staticmethod
    def nbytes_of(owner) -> int:
        """Bytes of the codes ``owner`` keeps (0 when it keeps none: nothing is made to say so)."""
        kept = owner.__dict__.get(_KEPT_AS)
        return 0 if kept is None else kept.nbytes

    @staticmethod
    def drop_from(owner):
        """Drop the codes ``owner`` keeps, if any (a new build: they and the points they hold are stale)."""
        owner.__dict__.pop(_KEPT_AS, None)

    @property
    def nbytes(self) -> int:
        """Bytes of the codes made (0 before)."""
        made = self._made
        return 0 if made is None else int(made[2][0].nbytes + made[2][1].nbytes)

    def get(self, points, conformal):
        made = self._made
        if made is not None and made[0] is points and made[1] is conformal:
            return made[2]
        if not SCANNED_CODES_MIN_DIM <= points.shape[1] <= SCREEN_MAX_DIM or memory_mapped(points):
            return None
        codes = screen_codes(points, conformal)
        self._made = (points, conformal, codes)  # one assignment: a concurrent search sees the old or the new
        return codes

    def __getstate__(self):
        return {"_made": None}

    def __deepcopy__(self, memo):
        return ScanCodes()


@nb.njit(cache=True)
def _screened_row(q, cq, X, cx, codes, info, kd, ki):
    """Scan every row of ``X`` (codes ``codes``, ``info``) into the sorted top-k list ``kd``/``ki`` of one
    query, skipping the rows the codes prove out of it; the list of
    :func:`~hypann.geometry._kernels._brute_row` (``d >= LANES_MIN_DIM``)."""
    k = kd.shape[0]
    d = q.shape[0]
    shrink = lanes_shrink(d)
    eta = screen_margin(d)
    qf = np.empty(d, dtype=np.float32)
    for j in range(d):
        qf[j] = np.float32(q[j])
    for j in range(X.shape[0]):
        if screen_rejects(qf, cq, codes, info, j, kd[k - 1], eta):
            continue
        v = delta_lanes_below(q, cq, X[j], cx[j], kd[k - 1], shrink)
        if v < kd[k - 1]:
            insert_sorted(kd, ki, v, j)


@nb.njit(cache=True)
def _screened_serial(Q, cq, X, cx, codes, info, k):
    """:func:`screened_knn_delta` on the calling thread."""
    m = Q.shape[0]
    ids = np.full((m, k), -1, dtype=np.int64)
    ds = np.full((m, k), np.inf)
    for i in range(m):
        _screened_row(Q[i], cq[i], X, cx, codes, info, ds[i], ids[i])
    return ids, ds


@nb.njit(cache=True, parallel=True)
def _screened_parallel(Q, cq, X, cx, codes, info, k):
    """:func:`screened_knn_delta`, one thread per query."""
    m = Q.shape[0]
    ids = np.full((m, k), -1, dtype=np.int64)
    ds = np.full((m, k), np.inf)
    for i in nb.prange(m):
        _screened_row(Q[i], cq[i], X, cx, codes, info, ds[i], ids[i])
    return ids, ds


@nb.njit(cache=True, parallel=True)
def _screened_split(Q, cq, X, cx, codes, info, k, n_blocks):
    """:func:`screened_knn_delta` with each query's rows split into ``n_blocks`` blocks scanned in parallel,
    their lists merged in block order (as :func:`~hypann.geometry._kernels.brute_knn_delta_split` merges
    them: the list of one scan in row order)."""
    step, part_i, part_d = block_lists(Q.shape[0], X.shape[0], n_blocks, k)
    for t in nb.prange(part_i.shape[0]):
        lo, hi = block_rows(t, n_blocks, step, X.shape[0])
        _screened_row(Q[t // n_blocks], cq[t // n_blocks], X[lo:hi], cx[lo:hi], codes[lo:hi], info[lo:hi],
                      part_d[t], part_i[t])
    return merged_block_lists(part_i, part_d, n_blocks, step)


def screened_knn_delta(Q, cq, X, cx, codes, k, *, n_blocks=0, serial=False):
    """Exact ``k`` smallest ``delta`` of each query against every row of ``X``, the rows that the codes
    ``codes = (codes, info)`` of ``X`` (:func:`~hypann.geometry.screen_codes.screen_codes`) prove out of a
    query's list left unread: ``(ids, deltas)`` (m, k), equal to
    :func:`~hypann.geometry._kernels.brute_knn_delta`'s bit for bit.

    ``X`` has at least :data:`SCANNED_CODES_MIN_DIM` coordinates. ``n_blocks > 0`` splits each query's
    rows into that many blocks scanned on numba's threads; else ``serial`` scans the queries one after
    the other on the calling thread, and otherwise each query runs on a thread of its own.
    """
    codes, info = codes
    if n_blocks > 0:
        return _screened_split(Q, cq, X, cx, codes, info, k, n_blocks)
    if serial:
        return _screened_serial(Q, cq, X, cx, codes, info, k)
    return _screened_parallel(Q, cq, X, cx, codes, info, k)
