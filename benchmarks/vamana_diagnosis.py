"""Why Vamana collapses on clustered and WordNet data: measurements behind hypann.graph.knn_graph.

For each data set, build the paper's Vamana (``R=10, L=10, alpha=1.5``, two
passes) and report:

* recall@10 of the search from the medoid for list sizes ``L`` 10 to 1000;
* the fraction of points reachable from the medoid (BFS on the directed graph)
  and of the queries' true neighbours among them;
* the fraction of points with no in-edge, the mean out-degree;
* recall@10 when the search starts at each query's true nearest neighbour
  (``L=40``): the quality of the local graph alone;
* for the mixtures, with the cluster labels: the clusters entirely
  unreachable from the medoid and the recall of queries by whether their
  cluster is reachable.

Usage::

    NUMBA_NUM_THREADS=2 python benchmarks/vamana_diagnosis.py --n 20000
"""

from __future__ import annotations

import argparse

import numpy as np
import scipy.sparse as sp
from scipy.sparse.csgraph import breadth_first_order

import _common  # noqa: F401  (puts the repository on sys.path)
from hypann.datasets.families import gaussian_mixture, make_family
from hypann.geometry._kernels import brute_knn_delta, conformal_factor
from hypann.graph.vamana import VamanaIndex, _greedy

CASES = (("gaussian_mixture", 10), ("gaussian_mixture", 100), ("wordnet_nouns", 10), ("hierarchical_tree", 10))


def _hits(found_d, true_d):
    return np.sum(found_d[:, :10] <= true_d[:, 9:10] * (1 + 1e-12), axis=1) / 10


def diagnose(name, dim, n, n_queries=500, seed=0):
    labels = None
    if name == "gaussian_mixture":
        X, labels = gaussian_mixture(n + n_queries, dim, seed=seed, return_labels=True)
    else:
        X = make_family(name, n + n_queries, dim, seed=seed)
    perm = np.random.default_rng(seed + 1).permutation(len(X))
    qi, xi = perm[:n_queries], perm[n_queries:]
    Q, X = np.ascontiguousarray(X[qi]), np.ascontiguousarray(X[xi])
    cq, cx = conformal_factor(Q), conformal_factor(X)
    true_i, true_d = brute_knn_delta(Q, cq, X, cx, 10)
    index = VamanaIndex(R=10, L=10, alpha=1.5, passes=2, random_state=seed).build(X, cx)
    row = {"data": f"{name} {dim}-D", "n": n}
    for L in (10, 40, 100, 300, 1000):
        row[f"recall L={L}"] = float(_hits(index.search(Q, cq, 10, L=L).deltas, true_d).mean())
    nbrs = index.neighbors_
    deg = (nbrs >= 0).sum(axis=1)
    src = np.repeat(np.arange(n), deg)
    dst = nbrs[nbrs >= 0]
    graph = sp.csr_matrix((np.ones(dst.size), (src, dst)), shape=(n, n))
    reached = np.zeros(n, dtype=bool)
    reached[breadth_first_order(graph, index.medoid_, directed=True, return_predecessors=False)] = True
    row["reachable from medoid"] = float(reached.mean())
    row["true neighbours reachable"] = float(reached[true_i].mean())
    row["in-degree 0"] = float(np.mean(np.bincount(dst, minlength=n) == 0))
    row["mean out-degree"] = float(deg.mean())
    # the local graph alone: start at the true nearest neighbour
    L = 40
    seen = np.zeros(n, dtype=np.int64)
    lst_d, lst_i, lst_e = np.empty(L), np.empty(L, dtype=np.int64), np.empty(L, dtype=np.bool_)
    visited = np.empty(256, dtype=np.int64)
    degree = deg.astype(np.int32)
    local = []
    for i in range(n_queries):
        _greedy(X, cx, nbrs, degree, Q[i], cq[i], true_i[i, 0], L, seen, i + 1, lst_d, lst_i, lst_e, visited)
        local.append(np.sum(lst_d[:10] <= true_d[i, 9] * (1 + 1e-12)) / 10)
    row["recall from true NN (L=40)"] = float(np.mean(local))
    if labels is not None:
        lab_x, lab_q = labels[xi], labels[qi]
        sizes = np.bincount(lab_x, minlength=labels.max() + 1)
        frac = np.bincount(lab_x, weights=reached, minlength=sizes.size) / np.maximum(sizes, 1)
        present = sizes > 0
        row["clusters"] = int(present.sum())
        row["clusters unreachable"] = float(np.mean(frac[present] < 0.01))
        per_query = _hits(index.search(Q, cq, 10, L=10).deltas, true_d)
        ok = frac[lab_q] > 0.99
        bad = frac[lab_q] < 0.01
        row["recall L=10, cluster reachable"] = float(per_query[ok].mean()) if ok.any() else float("nan")
        row["recall L=10, cluster unreachable"] = float(per_query[bad].mean()) if bad.any() else float("nan")
    return row


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20_000)
    args = parser.parse_args()
    for name, dim in CASES:
        row = diagnose(name, dim, args.n)
        print(" | ".join(f"{k}: {v:.3f}" if isinstance(v, float) else f"{k}: {v}" for k, v in row.items()), flush=True)


if __name__ == "__main__":
    main()
