"""Exact copies among stored points: which rows are the same point, bit for bit.

Rows ``i`` and ``j`` are *copies* when their stored coordinates and their
stored conformal factors ``1 - |x|^2`` are equal bit for bit. Every distance
from a query to them is then the same number, so a search structure can hold
one *node* per group and report the whole group when it finds the node
(:class:`hypann.graph.knn_graph.HyperbolicGraphIndex` does). ``0.0`` and
``-0.0`` are different bits, so two rows that differ only in the sign of a zero
stay two nodes (a missed saving, never a wrong answer).

The rows are hashed (splitmix64 over their bits), sorted by hash, and rows of
equal hash compared bit for bit, so a hash collision never joins two points.
Time ``O(n d)`` plus a sort of ``n`` hashes; memory ``O(n)``.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from hypann.graph.partition_tree import splitmix64

__all__ = ["copy_leaders"]


@nb.njit(cache=True, parallel=True)
def _row_hashes(bits, conf_bits):
    """splitmix64 hash of each row of ``bits`` (n, w) and its ``conf_bits`` (n,) entry."""
    n, w = bits.shape
    out = np.empty(n, dtype=np.uint64)
    for i in nb.prange(n):
        _, h = splitmix64(np.uint64(conf_bits[i]))
        for j in range(w):
            _, h = splitmix64(h ^ np.uint64(bits[i, j]))
        out[i] = h
    return out


@nb.njit(cache=True, inline="always")
def _same_row(bits, conf_bits, i, j):
    if conf_bits[i] != conf_bits[j]:
        return False
    for t in range(bits.shape[1]):
        if bits[i, t] != bits[j, t]:
            return False
    return True


@nb.njit(cache=True)
def _leaders(bits, conf_bits, hashes, by_hash):
    """``leader[i]``: the smallest row equal to row ``i`` (``by_hash``: the rows by hash, rows of one hash in
    increasing order). Each row is compared with the groups already met among the rows of its hash, so a
    run of ``r`` rows with ``g`` different points costs at most ``r g`` comparisons (``g = 1`` without a
    hash collision)."""
    n = by_hash.shape[0]
    leader = np.empty(n, dtype=np.int64)
    found = np.empty(n, dtype=np.int64)  # the groups of the current run, by their first row
    s = 0
    while s < n:
        h = hashes[by_hash[s]]
        n_found = 0
        e = s
        while e < n and hashes[by_hash[e]] == h:
            i = by_hash[e]
            leader[i] = i
            for t in range(n_found):
                if _same_row(bits, conf_bits, i, found[t]):
                    leader[i] = found[t]
                    break
            if leader[i] == i:
                found[n_found] = i  # at most e - s + 1 <= n groups per run
                n_found += 1
            e += 1
        s = e
    return leader


def copy_leaders(points, conformal):
    """For each row, the smallest row that is the same stored point (itself when it has no earlier copy).

    Parameters
    ----------
    points : ndarray of shape (n, d), float64 or float32
    conformal : ndarray of shape (n,), float64

    Returns
    -------
    ndarray of shape (n,), int64
        ``leader[i] <= i``; ``leader[i] == i`` exactly for the first row of
        each group of copies. Rows ``i, j`` have the same leader if and only
        if ``points[i]`` and ``points[j]`` and ``conformal[i]`` and
        ``conformal[j]`` are equal bit for bit.
    """
    points = np.ascontiguousarray(points)
    if points.dtype not in (np.float32, np.float64) or points.ndim != 2:
        raise TypeError(f"points must be a 2-D float32 or float64 array, got {points.dtype} {points.shape}")
    conformal = np.ascontiguousarray(conformal, dtype=np.float64)
    if conformal.shape != points.shape[:1]:
        raise ValueError(f"conformal must have shape ({points.shape[0]},), got {conformal.shape}")
    bits = points.view(np.uint32 if points.dtype == np.float32 else np.uint64)
    conf_bits = conformal.view(np.uint64)
    hashes = _row_hashes(bits, conf_bits)
    by_hash = np.argsort(hashes, kind="stable")
    return _leaders(bits, conf_bits, hashes, by_hash)
