"""Reconstruction quality of a graph embedding: mean rank and MAP (Nickel & Kiela 2017).

For every node ``u`` with neighbours ``N(u)`` in a relation (the transitive
closure of a hierarchy), each true neighbour ``v`` is ranked by Poincare
distance among the nodes that are *not* neighbours of ``u``:

.. math::

    \\operatorname{rank}_u(v) = 1 + \\big|\\{w \\notin N(u) \\cup \\{u\\} :
        d(u, w) < d(u, v)\\}\\big|,

the mean rank averages this over all pairs ``(u, v)``, and MAP averages over
nodes ``u`` the average precision of ranking all other nodes by distance to
``u``. With the neighbours sorted by distance, ``v_1, ..., v_k``, the ``i``-th
one sits at position ``i + rank_u(v_i) - 1`` of that list, so

.. math::

    \\operatorname{AP}(u) = \\frac{1}{k} \\sum_{i=1}^{k}
        \\frac{i}{i + \\operatorname{rank}_u(v_i) - 1}.

A perfect embedding has mean rank 1 and MAP 1. Ties: a non-neighbour at
exactly the distance of a neighbour does not count as closer.

``symmetric=True`` (default) treats the closure as undirected, so ``N(u)``
holds both the ancestors and the descendants of ``u``. Nickel & Kiela's
published code and gensim's ``ReconstructionEvaluation`` rank only the pairs
as given, ``(descendant, ancestor)``: each node's ancestors among its
non-ancestors (``symmetric=False``); roots are then not evaluated.

Distances are compared through the monotone surrogate
``|x_u - x_w|^2 / (1-|x_w|^2)`` (the factor ``1-|x_u|^2`` is common to all
``w``), with the stored compensated conformal factors.
"""

from __future__ import annotations

import numba as nb
import numpy as np

from hypann._validation import check_points

__all__ = ["reconstruction_metrics"]


@nb.njit(cache=True, parallel=True)
def _reconstruction_kernel(X, cx, indptr, nbrs, nodes, n_chunks):
    n, d = X.shape
    m = nodes.shape[0]
    rank_sum = np.zeros(m)
    ap = np.zeros(m)
    chunk = (m + n_chunks - 1) // n_chunks
    for c in nb.prange(n_chunks):
        is_nbr = np.zeros(n, np.bool_)
        lo = c * chunk
        hi = min(m, lo + chunk)
        for t in range(lo, hi):
            u = nodes[t]
            k = indptr[u + 1] - indptr[u]
            if k == 0:
                continue
            xu = X[u]
            pos = np.empty(k)
            for j in range(k):
                v = nbrs[indptr[u] + j]
                is_nbr[v] = True
                s = 0.0
                for a in range(d):
                    diff = xu[a] - X[v, a]
                    s += diff * diff
                pos[j] = s / cx[v]
            is_nbr[u] = True
            pos.sort()
            top = pos[k - 1]
            closer = np.zeros(k + 1, np.int64)
            for w in range(n):
                if is_nbr[w]:
                    continue
                # partial sums only grow: stop once w is farther than every neighbour
                bound = top * cx[w]
                s = 0.0
                far = False
                for a in range(d):
                    diff = xu[a] - X[w, a]
                    s += diff * diff
                    if s > bound:
                        far = True
                        break
                if far:
                    continue
                dw = s / cx[w]
                # first neighbour strictly farther than w
                left = 0
                right = k
                while left < right:
                    mid = (left + right) // 2
                    if pos[mid] > dw:
                        right = mid
                    else:
                        left = mid + 1
                closer[left] += 1
            acc = 0
            rs = 0.0
            prec = 0.0
            for j in range(k):
                acc += closer[j]
                rs += 1.0 + acc
                prec += (j + 1.0) / (j + 1.0 + acc)
            rank_sum[t] = rs
            ap[t] = prec / k
            for j in range(k):
                is_nbr[nbrs[indptr[u] + j]] = False
            is_nbr[u] = False
    return rank_sum, ap


def _neighbour_lists(n, pairs, symmetric):
    rows = pairs[:, 0]
    cols = pairs[:, 1]
    if symmetric:
        rows, cols = np.concatenate([rows, cols]), np.concatenate([cols, rows])
    keep = rows != cols
    both = np.unique(np.stack([rows[keep], cols[keep]], axis=1), axis=0)
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(both[:, 0], minlength=n), out=indptr[1:])
    return indptr, np.ascontiguousarray(both[:, 1], dtype=np.int64)


def reconstruction_metrics(points, closure_edges, *, symmetric=True, nodes=None, n_chunks=None, per_node=False):
    """Mean rank and mean average precision of a Poincare embedding of a relation.

    Parameters
    ----------
    points : array_like of shape (n, d)
        Embedding, strictly inside the unit ball; row ``i`` is node ``i``.
    closure_edges : array_like of shape (n_pairs, 2), int
        Related pairs, e.g. (descendant, ancestor) of a transitive closure.
    symmetric : bool, default True
        Treat the pairs as undirected (``N(u)`` = ancestors and descendants).
        ``False`` ranks, for each ``u``, only the ``v`` with ``(u, v)`` given,
        as Nickel & Kiela's code and gensim do.
    nodes : array_like of int, optional
        Evaluate only these nodes ``u`` (e.g. a random sample); all by default.
    n_chunks : int, optional
        Work units for the parallel loop (default: ``4 * numba threads``).
    per_node : bool, default False
        Also return the evaluated ``nodes`` and, per node, its neighbour count
        ``degree``, its ``rank_sum`` (sum of the ranks of its neighbours) and
        its ``average_precision``: where the mean rank comes from.

    Returns
    -------
    dict
        ``mean_rank`` (mean over evaluated pairs), ``map`` (mean over evaluated
        nodes), ``n_nodes`` and ``n_pairs`` evaluated. Nodes without neighbours
        are skipped.

    Examples
    --------
    >>> import numpy as np
    >>> pts = np.array([[0.0, 0.0], [0.5, 0.0], [-0.5, 0.0]])
    >>> reconstruction_metrics(pts, [[1, 0], [2, 0]])
    {'mean_rank': 1.0, 'map': 1.0, 'n_nodes': 3, 'n_pairs': 4}
    """
    X, cx = check_points(points, name="points")
    n = X.shape[0]
    pairs = np.asarray(closure_edges)
    if pairs.size == 0:
        pairs = pairs.reshape(0, 2)
    if pairs.ndim != 2 or pairs.shape[1] != 2 or pairs.dtype.kind not in "iu":
        raise ValueError(
            f"closure_edges must be an integer array of shape (n_pairs, 2), got shape {pairs.shape} "
            f"dtype {pairs.dtype}"
        )
    pairs = pairs.astype(np.int64)
    if pairs.size and (pairs.min() < 0 or pairs.max() >= n):
        raise ValueError(
            f"closure_edges refer to nodes outside [0, {n}): min {pairs.min()}, max {pairs.max()}"
        )
    indptr, nbrs = _neighbour_lists(n, pairs, bool(symmetric))
    if nodes is None:
        nodes = np.arange(n, dtype=np.int64)
    else:
        nodes = np.unique(np.asarray(nodes, dtype=np.int64))
        if nodes.size and (nodes[0] < 0 or nodes[-1] >= n):
            raise ValueError(f"nodes must be in [0, {n}), got min {nodes[0]}, max {nodes[-1]}")
    degree = np.diff(indptr)[nodes]
    nodes = nodes[degree > 0]
    degree = degree[degree > 0]
    if nodes.size == 0:
        raise ValueError("no evaluated node has a neighbour in closure_edges")
    if n_chunks is None:
        n_chunks = 4 * nb.get_num_threads()
    n_chunks = int(max(1, min(n_chunks, nodes.size)))
    rank_sum, ap = _reconstruction_kernel(X, cx, indptr, nbrs, nodes, n_chunks)
    out = {
        "mean_rank": float(rank_sum.sum() / degree.sum()),
        "map": float(ap.mean()),
        "n_nodes": int(nodes.size),
        "n_pairs": int(degree.sum()),
    }
    if per_node:
        out.update(nodes=nodes, degree=degree, rank_sum=rank_sum, average_precision=ap)
    return out
