"""Exact hyperbolic k-NN by brute force (numba, parallel over queries; batches screened through a BLAS Gram
product, :mod:`hypann.geometry.gram_scan`): the ground truth."""

from __future__ import annotations

import numpy as np

from hypann._runtime import filled
from hypann.geometry import _kernels
from hypann.geometry.gram_scan import knn_delta_scan, splits_rows
from hypann.geometry.screened_scan import ScanCodes
from hypann.result import SearchStats
from hypann.search.base import SearchAlgorithm, sort_ragged


class BruteForceSearch(SearchAlgorithm):
    """Scan every point, rank by ``delta`` (direct differences, stored conformal factors).

    A batch of enough queries (:func:`hypann.geometry.gram_scan.knn_delta_scan`:
    16 at 10-D, 4 from 40-D on) is scanned through Gram blocks: rigorous
    bounds from a BLAS product leave out the points that cannot be among the
    ``k`` nearest and the others get the exact ``delta``, so the answer is the
    plain scan's bit for bit, 1.3-2.5x faster at 10-D and 3-9x at 32-100-D in
    batches of 256 (``benchmarks/exact_scan.py``).

    A batch too small for Gram blocks reads one-byte codes of the points before their rows from 16
    coordinates on (:mod:`hypann.geometry.screened_scan`; the same answer): made by the first such batch
    and kept, ``d + 32`` bytes a point (counted in :attr:`nbytes`; not saved, made again after a load; none
    for memory-mapped points).

    A batch of fewer queries than threads splits a scan of at least
    :data:`~hypann.geometry.gram_scan.SPLIT_SCAN_MIN_WORK` values into blocks
    of rows scanned on all threads (one query on all cores), with the same
    answer.

    Budget: with a sample ``budget`` < n, scans only the first ``budget``
    points of a fixed random permutation drawn at build time (a uniform
    random sample, the same for every call) and reports exactly ``budget``
    samples: a hard limit with no allowance. The answer is then the exact
    k-NN within that sample.
    """

    name = "brute"
    uses_oracle = False

    def _build(self, points, conformal, oracle):
        self._perm = self.rng_.permutation(points.shape[0])
        ScanCodes.drop_from(self)  # codes of an earlier build's points (and those points)

    def _splits_rows(self):
        """A scan long enough that fewer queries than threads split its rows among the threads."""
        return splits_rows(*self.points_.shape)

    @property
    def serial_small_batches(self):
        """One query runs serially unless its scan is split among threads (:meth:`_splits_rows`)."""
        return not self._splits_rows()

    def search_work(self, m):
        return None if self._splits_rows() else m

    def search(self, queries, q_conformal, k, *, budget=None):
        n = self.points_.shape[0]
        if budget is not None and budget < n:
            sub = np.sort(self._perm[: max(budget, 1)])
            ids, deltas = knn_delta_scan(queries, q_conformal, self.points_[sub], self.conformal_[sub], k)
            ids = np.where(ids >= 0, sub[np.maximum(ids, 0)], -1)
            scanned = len(sub)
        else:
            ids, deltas = knn_delta_scan(queries, q_conformal, self.points_, self.conformal_, k,
                                         codes=ScanCodes.kept_by(self))
            scanned = n
        return ids, deltas, SearchStats.without_oracle(filled(queries.shape[0], scanned, np.int64), 1)

    @property
    def nbytes(self) -> int:
        """Bytes of the points' codes for small batches, once made (the points are the owner's)."""
        return ScanCodes.nbytes_of(self)

    supports_radius = True

    def search_radius(self, queries, q_conformal, delta_limits):
        counts = _kernels.brute_range_count(queries, q_conformal, self.points_, self.conformal_, delta_limits)
        offsets = np.zeros(queries.shape[0] + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        ids = np.empty(offsets[-1], dtype=np.int64)
        deltas = np.empty(offsets[-1])
        _kernels.brute_range_fill(queries, q_conformal, self.points_, self.conformal_, delta_limits, offsets, ids,
                                  deltas)
        return sort_ragged(offsets, ids, deltas)
