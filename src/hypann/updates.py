"""Points added to and removed from a built index, and user ids.

A :class:`~hypann.HyperbolicIndex` keeps its search structure (tree, graph,
oracle) as built. :class:`LiveSet` records what changed since:

* **rows**: the built points are rows ``0 .. n_built-1``; points added later
  are rows ``n_built ..``, held in an *added buffer* searched by its own
  exact kd-tree (rebuilt lazily after each :meth:`LiveSet.add`);
* **removed**: a flag per row. The kd-tree skips removed points inside its
  kernel; for other algorithms the structure is asked for
  ``k + (removed built rows)`` neighbours and the removed ones are dropped,
  so exact algorithms stay exact;
* **labels**: the user's int64 id of every row (by default the row number).
  While the ids are the row numbers no array is kept (``labels`` is then
  made on request); adding points with the next row numbers keeps it so, any
  other ids make the array real.

The answers of the structure and of the buffer are merged by ``delta``. When
the changes outgrow :data:`REBUILD_FRACTION` of the built points the index
rebuilds its structure over the live points (:meth:`HyperbolicIndex.compact`),
so searches never pay for a large buffer or many removed points.
"""

from __future__ import annotations

import numpy as np

from hypann.search.hyperbolic_kdtree import HyperbolicKDTree

__all__ = ["LiveSet", "REBUILD_FRACTION", "check_ids"]

#: Rebuild the structure when added + removed rows exceed this fraction of the built rows.
REBUILD_FRACTION = 0.25
#: ... but never for fewer changes than this (small indexes rebuild in no time anyway).
REBUILD_MIN_CHANGES = 64


def check_ids(ids, m, *, name="ids"):
    """User ids: ``m`` distinct integers ``>= 0`` as int64 (m,)."""
    arr = np.asarray(ids)
    if arr.dtype.kind not in "iu" or arr.ndim != 1:
        raise TypeError(f"{name} must be a 1-D array of integers, got dtype={arr.dtype}, shape={arr.shape}")
    if arr.shape[0] != m:
        raise ValueError(f"{name} must have one id per point: expected {m} ids, got {arr.shape[0]}")
    arr = arr.astype(np.int64)
    if m and arr.min() < 0:
        raise ValueError(f"{name} must be >= 0, got {int(arr.min())}")
    uniq, counts = np.unique(arr, return_counts=True)
    if np.any(counts > 1):
        raise ValueError(f"{name} must be distinct, got {int(uniq[counts > 1][0])} {int(counts.max())} times")
    return arr


class LiveSet:
    """Rows of an index: built + added, their labels and removal flags.

    Parameters
    ----------
    n_built : int
        Rows of the search structure.
    dim : int
    labels : ndarray of shape (n_built,), int64, optional
        User ids of the built rows (default: ``0 .. n_built-1``, kept as
        ``None`` -- no array -- until other ids appear).
    """

    def __init__(self, n_built, dim, labels=None):
        self.n_built = int(n_built)
        self.dim = int(dim)
        self._labels = labels  # None: the id of every row is its row number
        self.removed = np.zeros(n_built, dtype=bool)
        self.n_removed = 0  # kept with `removed`, so searches never count it (O(1) per search)
        self._identity = None  # cached `identity_labels` (None: not known yet)
        self.added_points = np.empty((0, dim))
        self.added_conformal = np.empty(0)
        self._tree = None
        self._sorted = None  # (labels sorted, row of each) for id lookups

    # -- state ---------------------------------------------------------------
    @property
    def n_rows(self) -> int:
        return self.n_built + self.added_points.shape[0]

    @property
    def n_live(self) -> int:
        return self.n_rows - self.n_removed

    @property
    def n_changes(self) -> int:
        return self.added_points.shape[0] + self.n_removed

    @property
    def labels(self) -> np.ndarray:
        """The id of every row, int64 (n_rows,); a new ``arange`` while the ids are the row numbers."""
        if self._labels is None:
            return np.arange(self.n_rows, dtype=np.int64)
        return self._labels

    @property
    def labels_nbytes(self) -> int:
        """Bytes held by the ids (0 while they are the row numbers)."""
        return 0 if self._labels is None else int(self._labels.nbytes)

    @property
    def identity_labels(self) -> bool:
        if self._labels is None:
            return True
        if self._identity is None:  # once per change of the labels, not per search
            self._identity = bool(np.array_equal(self._labels, np.arange(self.n_rows)))
        return self._identity

    def next_label(self) -> int:
        """One more than the largest id in use (0 for no rows)."""
        if self._labels is None:
            return self.n_rows
        return int(self._labels.max()) + 1 if self._labels.shape[0] else 0

    def live_label_mask(self, ids) -> np.ndarray:
        """Per id of ``ids`` (int64): whether it is the id of a live row."""
        ids = np.asarray(ids, dtype=np.int64)
        if self._labels is None:
            inside = (ids >= 0) & (ids < self.n_rows)
            return inside & ~self.removed[np.where(inside, ids, 0)]
        return np.isin(ids, self._labels[~self.removed])

    def labels_of(self, rows) -> np.ndarray:
        """Ids of ``rows`` (int64; ``-1`` stays ``-1``)."""
        rows = np.asarray(rows, dtype=np.int64)
        if self._labels is None:
            return rows
        return np.where(rows >= 0, self._labels[np.maximum(rows, 0)], -1)

    def needs_rebuild(self) -> bool:
        return self.n_changes > max(REBUILD_MIN_CHANGES, REBUILD_FRACTION * self.n_built)

    def rows_of(self, ids):
        """Rows holding the live ids ``ids``; raises ValueError naming unknown ones.

        Labels are distinct over all rows (live or removed), so each id names one row.
        """
        ids = np.asarray(ids, dtype=np.int64)
        if self._labels is None:  # the id is the row
            found = self.live_label_mask(ids)
            if not np.all(found):
                raise ValueError(f"no live point with id(s) {ids[~found][:5].tolist()} in the index")
            return ids
        if self._sorted is None:
            order = np.argsort(self.labels, kind="stable")
            self._sorted = (self.labels[order], order)
        keys, rows = self._sorted
        pos = np.minimum(np.searchsorted(keys, ids), len(keys) - 1)
        found = (keys[pos] == ids) & ~self.removed[rows[pos]]
        if not np.all(found):
            missing = ids[~found][:5].tolist()
            raise ValueError(f"no live point with id(s) {missing} in the index")
        return rows[pos]

    def has_removed_label(self, ids) -> bool:
        """Whether any of ``ids`` labels a removed row (re-adding it needs a rebuild first)."""
        removed = np.flatnonzero(self.removed) if self._labels is None else self._labels[self.removed]
        return bool(np.isin(removed, ids).any())

    # -- changes -------------------------------------------------------------
    def add(self, points, conformal, labels):
        labels = np.asarray(labels, dtype=np.int64)
        n_rows = self.n_rows
        if not (self._labels is None and np.array_equal(labels, np.arange(n_rows, n_rows + labels.shape[0]))):
            self._labels = np.concatenate([self.labels, labels])  # ids other than the row numbers: a real array
        self.added_points = np.vstack([self.added_points, points])
        self.added_conformal = np.concatenate([self.added_conformal, conformal])
        self.removed = np.concatenate([self.removed, np.zeros(len(labels), dtype=bool)])
        self._tree = None
        self._sorted = None
        self._identity = None

    def remove_rows(self, rows):
        self.removed[rows] = True
        self.n_removed = int(np.count_nonzero(self.removed))
        self._tree = None

    def live_rows(self, built_points, built_conformal):
        """Points, conformal factors and labels of every live row (for a rebuild)."""
        keep = ~self.removed
        points = np.vstack([built_points, self.added_points])[keep]
        conformal = np.concatenate([built_conformal, self.added_conformal])[keep]
        return np.ascontiguousarray(points), np.ascontiguousarray(conformal), self.labels[keep].copy()

    # -- the added buffer ----------------------------------------------------
    def _buffer(self):
        """kd-tree over the added rows (built on demand) and their removal flags."""
        if self._tree is None and self.added_points.shape[0]:
            self._tree = HyperbolicKDTree().build(self.added_points, self.added_conformal)
        return self._tree, self.removed[self.n_built:]

    def buffer_knn(self, queries, q_conformal, k, budget=None):
        """Exact k-NN among live added rows: ``(rows, deltas, samples)``."""
        tree, removed = self._buffer()
        m = queries.shape[0]
        live = int((~removed).sum()) if tree is not None else 0
        if live == 0:
            return np.full((m, 0), -1, np.int64), np.empty((m, 0)), np.zeros(m, np.int64)
        ids, deltas, samples = tree.search_exact(queries, q_conformal, min(k, live), budget, removed=removed)
        return np.where(ids >= 0, ids + self.n_built, -1), deltas, samples

    def buffer_radius(self, queries, q_conformal, limits):
        tree, removed = self._buffer()
        if tree is None:
            m = queries.shape[0]
            return np.zeros(m + 1, np.int64), np.empty(0, np.int64), np.empty(0)
        offsets, ids, deltas = tree.search_radius(queries, q_conformal, limits, removed=removed)
        return offsets, ids + self.n_built, deltas


def merge_knn(k, *parts):
    """Merge per-query candidate lists ``(rows, deltas)`` into the best ``k``: ``(rows, deltas)``.

    ``-1`` rows are dropped; ties keep the order of ``parts``. Pads with
    ``-1`` / ``inf`` when fewer than ``k`` candidates exist.
    """
    rows = np.hstack([p[0] for p in parts])
    deltas = np.hstack([p[1] for p in parts])
    deltas = np.where(rows >= 0, deltas, np.inf)
    order = np.argsort(deltas, axis=1, kind="stable")[:, :k]
    rows = np.take_along_axis(rows, order, 1)
    deltas = np.take_along_axis(deltas, order, 1)
    rows[~np.isfinite(deltas)] = -1
    if rows.shape[1] < k:
        m = rows.shape[0]
        rows = np.hstack([rows, np.full((m, k - rows.shape[1]), -1, np.int64)])
        deltas = np.hstack([deltas, np.full((m, k - deltas.shape[1]), np.inf)])
    return rows, deltas


def take_ragged(offsets, rows, *arrays):
    """Rows ``rows`` of a ragged result, in that order: ``(offsets, *arrays)`` whose row ``i`` is row
    ``rows[i]`` of ``offsets`` / ``arrays`` (the entries of a row keep their order)."""
    counts = np.diff(offsets)[rows]
    taken = np.zeros(len(rows) + 1, dtype=np.int64)
    np.cumsum(counts, out=taken[1:])
    # entry p of new row i is entry p - taken[i] + offsets[rows[i]] of the input
    gather = np.repeat(np.asarray(offsets)[:-1][rows] - taken[:-1], counts) + np.arange(taken[-1])
    return (taken, *(a[gather] for a in arrays))


def concat_ragged(*parts):
    """Ragged ``(offsets, rows, deltas)`` results of consecutive query pieces as one: the rows of
    ``parts[0]``, then those of ``parts[1]``, ... (one part: that part itself)."""
    if len(parts) == 1:
        return parts[0]
    counts = np.concatenate([np.diff(p[0]) for p in parts])
    offsets = np.zeros(counts.shape[0] + 1, dtype=np.int64)
    np.cumsum(counts, out=offsets[1:])
    return offsets, np.concatenate([p[1] for p in parts]), np.concatenate([p[2] for p in parts])


def merge_ragged(m, *parts):
    """Concatenate ragged ``(offsets, rows, deltas)`` results query by query, sorted by ``(delta, row)``."""
    owners = [np.repeat(np.arange(m), np.diff(p[0])) for p in parts]
    owner = np.concatenate(owners)
    rows = np.concatenate([p[1] for p in parts])
    deltas = np.concatenate([p[2] for p in parts])
    order = np.lexsort((rows, deltas, owner))
    offsets = np.zeros(m + 1, dtype=np.int64)
    np.cumsum(np.bincount(owner, minlength=m), out=offsets[1:])
    return offsets, rows[order], deltas[order]
