"""Euclidean oracle on hnswlib's HNSW graph (``pip install hypann[hnswlib]``).

hnswlib works in float32 with space ``"l2"``, whose "distances" are squared
Euclidean distances. The graph chooses the ``k`` neighbours in float32; this
oracle recomputes their squared distances in float64 from explicit
differences and re-sorts them. Build settings (``M``, ``ef_construction``)
are kept apart from the query setting ``ef`` (raised to ``k`` when smaller,
as hnswlib requires ``ef >= k``).

Short rows: hnswlib raises for a whole batch when one query's search
reaches fewer than ``k`` points, which happens when its graph has lost
elements (many exact duplicates, ``k`` a large part of ``n``; hnswlib
issues #244, #373). The oracle then asks each row alone and answers a row
that still falls short by a float64 scan of all points.

Threads: hnswlib's ``ef`` is a setting of the whole index (``set_ef``), not
of one query, so every query holds a per-oracle lock from ``set_ef`` to the
end of ``knn_query``: concurrent searches from several Python threads with
different ``ef`` (or ``k``) each get their own setting, at the price of
running one at a time.
"""

from __future__ import annotations

import threading

import numpy as np

from hypann._params import Param
from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle, rerank_float64
from hypann.oracles.brute import _brute_sq_knn


def _found_too_few(exc):
    """Whether ``exc`` is hnswlib's refusal of a batch in which a search reached fewer than ``k`` points."""
    return "Cannot return the results" in str(exc)


def _import_hnswlib():
    try:
        import hnswlib
    except ImportError:
        raise ImportError("the 'hnswlib' oracle needs the hnswlib library: pip install hypann[hnswlib]") from None
    return hnswlib


class HnswlibOracle(EuclideanOracle):
    """hnswlib ``Index(space="l2")``.

    Parameters
    ----------
    M : int, default 16
        Graph degree, ``>= 2`` (hnswlib: reasonable range 2-100; its level
        law ``1/log(M)`` is undefined at 1).
    ef_construction : int, default 200
        Candidate list size while building.
    ef : int, default 64
        Candidate list size per query (``max(ef, k)`` is used).
    random_state : int, default 100
        hnswlib's ``random_seed`` (level assignment).
    num_threads : int, default 1
        Threads for build and queries (``-1``: all cores). With 1 the graph is
        deterministic for a seed; more threads insert in a racy order.
    """

    name = "hnswlib"
    exact = False
    thread_safe = True  # knn_query under a lock (module docstring)

    build_settings = (
        Param("M", "int", 16, "graph degree (hnswlib: reasonable range 2-100)", low=2),
        Param("ef_construction", "int", 200, "candidate list size while building", low=1),
        Param("ef", "int", 64, "default candidate list size per query (max(ef, k) is used)", low=1),
        Param("random_state", "seed", 100, "hnswlib's random_seed (level assignment)"),
        Param("num_threads", "int", 1, "threads for build and queries (-1: all cores)", low=1, extra=(-1,)),
    )
    query_settings = (
        Param("ef", "int", None, "candidate list size of this call (default: the build's ef)", low=1, none_ok=True),
    )

    def __init__(self, *, M: int = 16, ef_construction: int = 200, ef: int = 64, random_state: int = 100,
                 num_threads: int = 1):
        _import_hnswlib()
        self.M = M
        self.ef_construction = ef_construction
        self.ef = ef
        self.random_state = random_state
        self.num_threads = num_threads

    def spec(self) -> str:
        return (f"hnswlib:M={self.M},ef_construction={self.ef_construction},ef={self.ef},"
                f"random_state={self.random_state},num_threads={self.num_threads}")

    def _build(self, points):
        hnswlib = _import_hnswlib()
        n, d = points.shape
        index = hnswlib.Index(space="l2", dim=d)
        index.init_index(max_elements=max(n, 1), M=self.M, ef_construction=self.ef_construction,
                         random_seed=self.random_state)
        if n:
            index.add_items(np.ascontiguousarray(points, dtype=np.float32), np.arange(n), num_threads=self.num_threads)
        self._index = index
        self._points = points
        self._lock = threading.Lock()

    def __getstate__(self):
        state = dict(vars(self))
        state.pop("_lock", None)  # locks do not pickle or deep-copy; a copy gets its own
        return state

    def __setstate__(self, state):
        vars(self).update(state)
        if "_index" in state:
            self._lock = threading.Lock()

    def _knn(self, queries, k, ef=None):
        if k == 0:
            return EuclideanNeighbors(np.empty((len(queries), 0)), np.empty((len(queries), 0), np.int64))
        ef = self.ef if ef is None else ef  # checked by knn (query_settings)
        x32 = np.ascontiguousarray(queries, dtype=np.float32)
        with self._lock:  # ef is index-global in hnswlib
            self._index.set_ef(max(ef, k))
            try:
                labels, _ = self._index.knn_query(x32, k=k, num_threads=self.num_threads)
            except RuntimeError as exc:
                if not _found_too_few(exc):
                    raise
                labels = self._rows_one_at_a_time(queries, x32, k)
        sq, ids = rerank_float64(queries, self._points, labels.astype(np.int64))
        return EuclideanNeighbors(sq, ids)

    def _rows_one_at_a_time(self, queries, x32, k):
        """Labels ``(m, k)`` when a batch found fewer than ``k`` points for some row.

        hnswlib refuses a whole batch when one query's search reaches fewer
        than ``k`` points (a graph that lost elements, e.g. on many exact
        duplicates). Each row is asked again alone; the rows that still fall
        short get their ``k`` nearest by the brute-force oracle's float64 scan
        of all points: an exact answer, which an approximate oracle may always
        give.
        """
        m = x32.shape[0]
        labels = np.empty((m, k), dtype=np.int64)
        short = []
        for i in range(m):
            try:
                labels[i] = self._index.knn_query(x32[i:i + 1], k=k, num_threads=1)[0][0]
            except RuntimeError as exc:
                if not _found_too_few(exc):
                    raise
                short.append(i)
        if short:
            n = self._points.shape[0]
            every = np.full(len(short), n, dtype=np.int64)  # no budget: each row scans all points
            labels[short] = _brute_sq_knn(np.ascontiguousarray(queries[short]), self._points, np.arange(n), every,
                                          k)[0]
        return labels

    @property
    def nbytes(self):
        # float32 vectors + level-0 links (M0 = 2M ids of 4 bytes + a count) per point
        return int(self.n_points_ * (4 * self.dim_ + 4 * (2 * self.M + 1) + 8))
