"""Exact hyperbolic k-NN in the kd-tree (``HyperbolicKDTree.search_exact``) against brute force.

For each data set (``n`` points plus ``--queries`` held-out queries drawn from
the same generator and removed from the data) the script builds the tree once
and measures, single-threaded and in the same run:

* ``hkdtree``: :meth:`HyperbolicKDTree.search_exact` (k = 10, hyperbolic box
  pruning), its mean samples (points examined) per query;
* ``numba brute``: :func:`hypann.geometry._kernels.brute_knn_delta` (every
  point, explicit differences);
* ``numpy brute``: blocked float64 numpy from explicit differences
  (``(q - x)**2`` accumulated per coordinate, divided by the stored conformal
  factors, ``argpartition`` per block of 32 queries). It is slow, so it is
  timed on the first ``--numpy-queries`` queries; its queries/second is that
  subset's rate.

Times are medians over ``--repeats`` runs of the whole batch after one warm-up.
The tree's answers are checked against the numba brute force (bit-identical
``delta`` values). Data: ``hypann.datasets.synthetic.hierarchical_tree``
(tree-like, boundary-heavy) and ``clustered`` (wrapped normals), 10-D and 100-D.

Usage::

    NUMBA_NUM_THREADS=1 nice python benchmarks/hkdtree.py
    python benchmarks/hkdtree.py --n 20000 --queries 200 --repeats 1   # smoke run

Writes ``results/hkdtree.json`` and prints a markdown table.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import time  # noqa: E402

import numba  # noqa: E402
import numpy as np  # noqa: E402

from _common import markdown_table, median_time, write_json  # noqa: E402
from hypann.datasets import synthetic  # noqa: E402
from hypann.geometry._kernels import brute_knn_delta, conformal_factor  # noqa: E402
from hypann.search.hyperbolic_kdtree import HyperbolicKDTree  # noqa: E402

K = 10


def numpy_brute(Q, cq, X_T, cx, k, *, q_rows=32):
    """Blocked float64 brute force by ``delta`` from explicit differences.

    ``X_T`` is the data transposed, (d, n) C-contiguous; ``|q-x|^2`` is
    accumulated one coordinate at a time over a block of ``q_rows`` queries
    (the same summation order as the numba kernel, and 1-3x faster than a
    3-D ``einsum`` over the difference block).
    """
    m, d = Q.shape
    n = X_T.shape[1]
    ids = np.empty((m, k), dtype=np.int64)
    deltas = np.empty((m, k))
    acc = np.empty((q_rows, n))
    tmp = np.empty((q_rows, n))
    for s in range(0, m, q_rows):
        qb = Q[s : s + q_rows]
        b = len(qb)
        a, t = acc[:b], tmp[:b]
        a[:] = 0.0
        for j in range(d):
            np.subtract(qb[:, j, None], X_T[j][None, :], out=t)
            np.multiply(t, t, out=t)
            a += t
        a /= cq[s : s + b, None] * cx[None, :]
        part = np.argpartition(a, k - 1, axis=1)[:, :k]
        pd = np.take_along_axis(a, part, 1)
        order = np.argsort(pd, axis=1, kind="stable")
        ids[s : s + b] = np.take_along_axis(part, order, 1)
        deltas[s : s + b] = np.take_along_axis(pd, order, 1)
    return ids, deltas


def load(kind, n, dim, n_queries, seed):
    gen = synthetic.hierarchical_tree if kind == "tree" else synthetic.clustered
    A = gen(n + n_queries, dim, seed=seed)
    perm = np.random.default_rng(seed + 1).permutation(len(A))
    Q = np.ascontiguousarray(A[perm[:n_queries]])
    X = np.ascontiguousarray(A[perm[n_queries:]])
    return X, conformal_factor(X), Q, conformal_factor(Q)


def run_one(kind, dim, args):
    X, cx, Q, cq = load(kind, args.n, dim, args.queries, args.seed)
    m = len(Q)
    t0 = time.perf_counter()
    tree = HyperbolicKDTree(leaf_size=args.leaf_size).build(X, cx)
    build_s = time.perf_counter() - t0

    t_tree, res = median_time(lambda: tree.search_exact(Q, cq, K), repeats=args.repeats)
    t_nb, (ref_ids, ref_d) = median_time(lambda: brute_knn_delta(Q, cq, X, cx, K), repeats=args.repeats)
    mq = min(m, args.numpy_queries)
    X_T = np.ascontiguousarray(X.T)
    t_np, (np_ids, np_d) = median_time(
        lambda: numpy_brute(Q[:mq], cq[:mq], X_T, cx, K), repeats=args.repeats, warmup=0
    )
    exact = bool(np.array_equal(res.deltas, ref_d))
    np_agrees = bool(np.allclose(np_d, ref_d[:mq], rtol=1e-12, atol=0))
    qps_tree, qps_nb, qps_np = m / t_tree, m / t_nb, mq / t_np
    row = {
        "data": f"{kind} {dim}-D",
        "n": len(X),
        "queries": m,
        "build s": build_s,
        "hkdtree q/s": qps_tree,
        "numba brute q/s": qps_nb,
        "numpy brute q/s": qps_np,
        "x numba brute": qps_tree / qps_nb,
        "x numpy brute": qps_tree / qps_np,
        "samples/query": float(res.samples.mean()),
        "samples/n": float(res.samples.mean() / len(X)),
        "exact": exact,
    }
    extra = {
        "numpy_queries": mq,
        "numpy_brute_agrees": np_agrees,
        "samples_median": float(np.median(res.samples)),
        "samples_max": int(res.samples.max()),
        "n_nodes": tree.n_nodes_,
        "depth": tree.depth_,
        "tree_nbytes": tree.nbytes,
        "seconds": {"hkdtree": t_tree, "numba_brute": t_nb, "numpy_brute": t_np},
    }
    return row, extra


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--n", type=int, default=100_000)
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--numpy-queries", type=int, default=250)
    p.add_argument("--dims", type=int, nargs="+", default=[10, 100])
    p.add_argument("--data", nargs="+", default=["tree", "clustered"], choices=["tree", "clustered"])
    p.add_argument("--leaf-size", type=int, default=16)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)

    rows, extras = [], []
    for kind in args.data:
        for dim in args.dims:
            row, extra = run_one(kind, dim, args)
            rows.append(row)
            extras.append({**row, **extra})
            print(f"done: {row['data']}", flush=True)
    cols = [
        "data", "n", "build s", "hkdtree q/s", "numba brute q/s", "numpy brute q/s",
        "x numba brute", "x numpy brute", "samples/query", "samples/n", "exact",
    ]
    table = markdown_table(rows, cols)
    print(f"\nsearch_exact, k={K}, single thread (NUMBA_NUM_THREADS={numba.get_num_threads()}), "
          f"leaf_size={args.leaf_size}, medians of {args.repeats} runs\n")
    print(table)
    path = write_json(
        "hkdtree",
        {
            "params": {**vars(args), "k": K, "numba_threads": numba.get_num_threads()},
            "rows": extras,
            "table": table,
        },
    )
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
