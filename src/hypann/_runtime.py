"""Process-level runtime settings: numba threads per call, the first-compile notice, freed heap.

``numba_threads(n_jobs)`` sets the number of threads numba's parallel kernels
use for the calling thread only (numba keeps it per thread), so concurrent
searches with different ``n_jobs`` do not interfere. Every kernel of hypann
gives the same answer for any thread count: the parallel loops run over
queries (or points) and each iteration is independent.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
from contextlib import contextmanager
from numbers import Integral

import numpy as np

log = logging.getLogger("hypann")

_NOTICE_SHOWN = False

#: Batches of at most this many queries run the serial twin of a search kernel:
#: a ``prange`` kernel costs a thread-pool launch (microseconds, or a wait for a
#: busy core) that a single query does not repay.
SERIAL_MAX_QUERIES = 1

#: A batch is searched in the order of its structure (``query_order`` of the
#: kd-tree and the graph: queries that read the same points follow each other
#: while those points are in the cache) when it has at least this many
#: queries ...
ORDERED_MIN_QUERIES = 512
#: ... and at least one query per this many indexed points (below, few queries
#: share a region of the structure, and finding the order costs more than it
#: saves): :func:`searched_in_order`.
ORDERED_POINTS_PER_QUERY = 128
#: The order groups the queries by the first node of at most this many points
#: on their way down the structure's tree.
ORDER_NODE_POINTS = 1024


#: A batch searched in its structure's order is gathered in that order piece by piece, each piece's
#: float64 query rows and k-NN answers (int64 ids and float64 deltas) at most this many bytes
#: (:func:`ordered_piece_rows`): the copies a large batch needs beside its answer stay bounded.
ORDERED_PIECE_BYTES = 64 << 20


def ordered_piece_rows(d, k=0):
    """Queries per piece of a batch of ``d``-coordinate queries searched in its structure's order for ``k``
    neighbours (range search: 0): ``ORDERED_PIECE_BYTES // (8 d + 16 k)``, at least ``ORDERED_MIN_QUERIES``."""
    return max(ORDERED_MIN_QUERIES, ORDERED_PIECE_BYTES // (8 * d + 16 * k))


def searched_in_order(m, n):
    """Whether a batch of ``m`` queries over ``n`` indexed points is searched in its structure's order:
    ``m >= ORDERED_MIN_QUERIES`` and ``m * ORDERED_POINTS_PER_QUERY >= n``."""
    return m >= ORDERED_MIN_QUERIES and m * ORDERED_POINTS_PER_QUERY >= n


def read_only(a):
    """A read-only view of the array ``a`` (no copy).

    Structures hand their arrays to their kernels as such views, whether the arrays are a build's own
    (writable) or a loaded file's (read-only): numba compiles a kernel once per array type, and the
    kernels only read them.
    """
    view = a.view()
    view.flags.writeable = False
    return view


def filled(shape, value, dtype=np.float64):
    """A new array of ``shape`` holding ``value``: ``np.full`` by ``empty`` + ``fill``.

    The same array; for the few entries of a one-query call the two numpy
    calls cost less than ``np.full``'s generic casting copy.
    """
    out = np.empty(shape, dtype=dtype)
    out.fill(value)
    return out


def one_query_arrays(k):
    """Uninitialised ``(ids, deltas, samples)`` of one query: (1, k) int64, (1, k) float64, (1,) int64.

    The answer arrays of a one-query kernel (``search_coordinates``), which
    fills them: three ``np.empty`` here cost less than three arrays returned
    (boxed) from compiled code.
    """
    return np.empty((1, k), dtype=np.int64), np.empty((1, k)), np.empty(1, dtype=np.int64)


class OneQueryKernel:
    """Repeated one-query calls of a numba kernel whose arguments keep their numba types from call to call,
    but for the query ``X``: each call after the first of a kind of ``X`` skips the dispatcher's matching of
    the argument types.

    A call through the dispatcher first matches the numba types of all
    its arguments to a compiled signature, a cost that grows with their
    number (26 for the graph's kernel), paid on every call. Without it a
    public one-query call took 0.6-1.9 microseconds less
    (``benchmarks/single_query_overhead.py --dispatcher``; ``docs/benchmarks.md``,
    "The kernel's compiled code without numba's dispatcher"). The compiled code of one
    signature (numba's ``overloads[signature].entry_point``) takes the
    arguments without that matching; it converts scalars by value and
    rejects an array of another dtype, but it does not check an array's
    dimensions or layout. So it is kept per kind of ``X`` (:meth:`key`:
    everything numba's type of an ndarray depends on) and called only
    with a ``X`` of that kind; the caller guarantees that the other
    arguments keep their types (the same arrays of a structure, fresh
    arrays of fixed dtype and shape rank, ints, floats, bools). Where numba
    does not expose the compiled code the dispatcher is called: the same
    answers.
    """

    def __init__(self, kernel):
        self.kernel = kernel
        self._compiled = {}

    @staticmethod
    def key(X):
        """What numba's type of the plain ndarray ``X`` is made of: its dtype, its dimensions and its flags
        (``flags.num``: among them the C- and F-contiguity that make the layout, and whether it is
        writeable)."""
        return X.dtype, X.ndim, X.flags.num

    def __call__(self, X, *args):
        """``kernel(*args)`` where ``X`` is one of ``args`` (the query, a plain ndarray)."""
        key = self.key(X)
        call = self._compiled.get(key)
        if call is not None:
            return call(*args)
        found = self.kernel(*args)  # compiles or loads the signature
        self._compiled[key] = self._entry_point(args)
        return found

    def _entry_point(self, args):
        """The compiled code the dispatcher ran for ``args``, or the dispatcher."""
        try:
            signature = tuple(self.kernel.typeof_pyval(a) for a in args)
            return self.kernel.overloads[signature].entry_point
        except (AttributeError, KeyError, TypeError, ValueError):
            return self.kernel


@functools.cache
def _malloc_trim():
    """glibc's ``malloc_trim`` as a ctypes function, or ``None`` where the C library has none."""
    name = ctypes.util.find_library("c")
    try:
        trim = ctypes.CDLL(name).malloc_trim if name else None
    except (OSError, AttributeError):
        return None
    if trim is not None:
        trim.argtypes = [ctypes.c_size_t]
        trim.restype = ctypes.c_int
    return trim


def release_freed_heap():
    """Hand heap memory freed by earlier phases back to the system (glibc ``malloc_trim(0)``; elsewhere nothing).

    glibc serves allocations below its (dynamically raised, up to 32 MB)
    mmap threshold from heaps that it shrinks only from the top, so the
    arrays a build frees between phases can stay resident and count into the
    next phase's peak. Builds call this between phases. Returns whether a
    trim ran.
    """
    trim = _malloc_trim()
    if trim is None:
        return False
    trim(0)
    return True


def check_n_jobs(n_jobs, *, name="n_jobs"):
    """``None`` or ``-1`` (all cores) or a positive int; returns the thread count to use."""
    import numba

    limit = numba.config.NUMBA_NUM_THREADS
    if n_jobs is None or (not isinstance(n_jobs, bool) and isinstance(n_jobs, Integral) and n_jobs == -1):
        return limit
    if isinstance(n_jobs, bool) or not isinstance(n_jobs, Integral) or n_jobs < 1:
        raise ValueError(f"{name} must be a positive integer, -1 or None (all cores), got {name}={n_jobs!r}")
    return min(int(n_jobs), limit)


@contextmanager
def numba_threads(n_jobs, *, work=None):
    """Run the enclosed numba kernels on ``n_jobs`` threads (see :func:`check_n_jobs`).

    ``work``: the number of independent items (queries, rows) the enclosed
    kernels split among threads; the thread count is capped at it. A
    parallel kernel waits for every thread it starts, so a one-query call
    on two threads waits for a second thread with nothing to do, which
    costs milliseconds when the other core is busy.
    """
    import numba

    threads = check_n_jobs(n_jobs)
    if work is not None:
        threads = max(1, min(threads, int(work)))
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        yield threads
    finally:
        numba.set_num_threads(before)


@contextmanager
def threads_for(work):
    """Cap the calling thread's numba threads at ``work`` items for the enclosed kernels.

    Keeps the thread count an enclosing :func:`numba_threads` chose when that
    is smaller; see there for why small inputs run on fewer threads.
    """
    import numba

    before = numba.get_num_threads()
    threads = max(1, min(before, int(work)))
    if threads == before:
        yield threads
        return
    numba.set_num_threads(threads)
    try:
        yield threads
    finally:
        numba.set_num_threads(before)


def notice_first_compile(*dispatchers):
    """Log one line (once per process) when a numba kernel has no on-disk cache yet.

    The message goes through the ``hypann`` logger at WARNING level, which
    Python prints to stderr when the application configured no logging;
    silence it with ``logging.getLogger("hypann").setLevel(logging.ERROR)``.
    """
    global _NOTICE_SHOWN
    if _NOTICE_SHOWN:
        return
    for dispatcher in dispatchers:
        try:  # numba's cache layout is private: no notice rather than an error
            index_path = dispatcher._cache._cache_file._index_path
        except AttributeError:
            return
        if not os.path.exists(index_path):
            _NOTICE_SHOWN = True
            log.warning("hypann: compiling numba kernels for first use (up to a few minutes, once; cached on disk)")
            return


class VisitedMarks:
    """Reusable ``seen`` marks for searches over ``n`` points: blocks of int32 rows, one row per thread.

    A search marks point ``u`` as visited by ``seen[row, u] = tag``, with a
    tag no earlier search on that row used, so a block is zeroed when it is
    made and again only when its int32 tags run out (every ~2 billion
    queries): a search costs what it visits, not an ``O(n)`` fill per query
    or per chunk of queries. Each caller takes a block for its search and
    gives it back, so concurrent searches never share one: the free blocks
    of each height sit in a list, and ``list.pop`` and ``list.append`` are
    atomic (the GIL; a per-object lock in free-threaded Python), so no block
    is handed out twice without a lock of our own (whose two uses were a
    visible part of a one-query call). The blocks kept are those in use at
    the same time: ``4 rows n`` bytes each (``rows``: the caller's threads).
    """

    #: largest tag an int32 row holds
    TAG_MAX = np.iinfo(np.int32).max

    def __init__(self, n):
        self.n = int(n)
        self._free = {1: []}  # rows -> [(block, first unused tag), ...]; one row: take_one's too

    def take(self, count, rows=1):
        """``(seen, first_tag)``: a ``(rows, n)`` block and ``count`` consecutive tags unused on every row."""
        if not 0 <= count < self.TAG_MAX:
            raise ValueError(f"count must be in [0, {self.TAG_MAX}), got {count}")
        try:
            seen, first = self._free[rows].pop()
        except (KeyError, IndexError):  # no block of this height yet, or all are in use
            return np.zeros((rows, self.n), dtype=np.int32), 1
        if first + count > self.TAG_MAX:  # tags used up: start over on a cleared block
            seen[:] = 0
            first = 1
        return seen, first

    def give(self, seen, next_tag):
        """Return ``seen``; ``next_tag``: the first tag its last search did not use."""
        self._free.setdefault(seen.shape[0], []).append((seen, int(next_tag)))

    def take_one(self):
        """``take(1)`` without its argument check: ``(seen, tag)``, a ``(1, n)`` block and a tag unused on it
        (one query's search; give it back with :meth:`give_one`)."""
        try:
            seen, tag = self._free[1].pop()
        except IndexError:
            return np.zeros((1, self.n), dtype=np.int32), 1
        if tag >= self.TAG_MAX:  # tags used up (as in take(1)): start over on a cleared block
            seen[:] = 0
            tag = 1
        return seen, tag

    def give_one(self, seen, tag):
        """Return a block of :meth:`take_one` whose search used ``tag``."""
        self._free[1].append((seen, tag + 1))
