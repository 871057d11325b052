"""Exact Euclidean oracle on :class:`scipy.spatial.cKDTree`."""

from __future__ import annotations

import numpy as np
from scipy.spatial import cKDTree

from hypann._params import Param
from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle


class KDTreeOracle(EuclideanOracle):
    """scipy ``cKDTree``: exact, fast in low dimension, weak pruning at 100-D.

    Parameters
    ----------
    leaf_size : int, default 16
        ``leafsize`` of the tree.
    workers : int, default 1
        Threads per batch query (``-1``: all cores). Benchmarks use 1.
    """

    name = "kdtree"
    exact = True
    thread_safe = True  # scipy's cKDTree.query only reads the tree
    build_settings = (
        Param("leaf_size", "int", 16, "leafsize of the scipy tree", low=1),
        Param("workers", "int", 1, "threads per batch query (-1: all cores)", low=1, extra=(-1,)),
    )

    def __init__(self, *, leaf_size: int = 16, workers: int = 1):
        self.leaf_size = leaf_size
        self.workers = workers

    def _build(self, points):
        self._tree = cKDTree(points, leafsize=self.leaf_size, balanced_tree=False, compact_nodes=False)

    def _knn(self, queries, k):
        d, i = self._tree.query(queries, k=k, workers=self.workers)
        d = np.asarray(d, dtype=np.float64).reshape(len(queries), k)
        i = np.asarray(i, dtype=np.int64).reshape(len(queries), k)
        i[i >= self.n_points_] = -1
        return EuclideanNeighbors(d * d, i)

    supports_radius = True

    def _radius(self, queries, radii):
        hits = self._tree.query_ball_point(queries, radii, workers=self.workers)
        counts = np.fromiter((len(h) for h in hits), dtype=np.int64, count=len(hits))
        offsets = np.zeros(len(hits) + 1, dtype=np.int64)
        np.cumsum(counts, out=offsets[1:])
        ids = np.fromiter((j for h in hits for j in h), dtype=np.int64, count=int(offsets[-1]))
        return offsets, ids

    @property
    def nbytes(self):
        t = self._tree
        return int(t.data.nbytes + t.indices.nbytes + 64 * t.size)

    def spec(self):
        return f"kdtree:leaf_size={self.leaf_size}"
