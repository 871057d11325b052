"""What ``storage="float32"`` changes in the answers, against float64 storage of the same points.

A float32 index is exact for its *stored* points (float32 coordinates, float64
``1-|x|^2``; ``tests/test_storage.py``). This script measures how far that is
from the exact answer for the original float64 points, per data family of
:mod:`hypann.datasets.families` (``--n`` points, ``--queries`` held-out
queries from the same family, k = 10):

* ``recall@10``: share of the exact float64 10 nearest that the float32
  index returns;
* ``kth ratio max``: the largest (over queries) true float64 distance of the
  float32 answer's 10th neighbour divided by the true 10th distance -- how
  much farther the worst answer is, in the true metric;
* ``dist rel err median / max``: relative error of the distances the
  float32 index reports against the true float64 distances of the same ids;
* ``collapsed``: share of points whose float32 coordinates equal another
  point's while their float64 coordinates differ;
* ``max norm``: the largest hyperbolic norm in the data (float32 resolution
  near the boundary is ``~6e-8`` in ``|x|``, i.e. ``1-|x|^2`` is rounded at
  ``~1e-7``, hyperbolic norm ~16);
* ``check changed``, ``check max change`` and ``warns``: the build's own check (:mod:`hypann.rounding`):
  how many of the points it checked (up to 256, those nearest the boundary)
  had the distance to their nearest neighbour changed by more than 10 % by
  the rounding, the largest such change (``check max change``), and whether
  the build warned (``Float32PrecisionWarning``).

Usage::

    PYTHONPATH=src nice python benchmarks/float32_precision.py [--n 20000 --queries 500]

Writes ``results/float32_precision_n<n>.json`` and prints a markdown table.
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import warnings  # noqa: E402

import numpy as np  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _common import markdown_table, write_json  # noqa: E402


def measure(name, X, Q, k=10):
    import hypann
    from hypann.geometry.poincare import dist, dist0

    exact = hypann.HyperbolicIndex(n_jobs=1).build(X).search(Q, k)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", hypann.Float32PrecisionWarning)
        f32_index = hypann.HyperbolicIndex(storage="float32", n_jobs=1).build(X)
    warned = any(issubclass(w.category, hypann.Float32PrecisionWarning) for w in caught)
    check = f32_index.float32_rounding_
    f32 = f32_index.search(Q, k)
    true_of_f32 = dist(Q[:, None, :], X[f32.indices])  # true float64 distances of the float32 answers
    recall = np.mean([len(set(a) & set(b)) / k for a, b in zip(exact.indices.tolist(), f32.indices.tolist())])
    kth = exact.distances[:, -1]
    ratio = np.where(kth > 0, np.max(true_of_f32, axis=1) / np.where(kth > 0, kth, 1.0), 1.0)
    rel = np.abs(f32.distances - true_of_f32) / np.maximum(true_of_f32, 1e-300)
    rel = rel[true_of_f32 > 0]
    x32 = X.astype(np.float32)
    _, first32 = np.unique(x32, axis=0, return_index=True)
    _, first64 = np.unique(X, axis=0, return_index=True)
    collapsed = (len(first64) - len(first32)) / len(X)
    return {"data": name, "n": len(X), "d": X.shape[1], "max_norm": float(dist0(X).max()),
            "min_conformal": float(np.min(1.0 - np.einsum("ij,ij->i", X, X))),
            "recall_at_10": float(recall), "kth_ratio_max": float(ratio.max()),
            "dist_rel_err_median": float(np.median(rel)) if rel.size else 0.0,
            "dist_rel_err_max": float(rel.max()) if rel.size else 0.0, "collapsed": float(collapsed),
            "check_changed": f"{check.changed}/{check.sampled}", "check_max_change": check.max_change,
            "warns": warned}


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--queries", type=int, default=500)
    args = ap.parse_args()

    from hypann.datasets import families

    rows = []
    for d in (10, 100):
        for fam in ("hierarchical_tree", "gaussian_mixture", "hyperbolic_uniform", "boundary_heavy", "duplicates",
                    "wordnet_nouns"):
            try:
                data = getattr(families, fam)(args.n + args.queries, d, seed=1)
            except ValueError as exc:  # a data set of fixed size (the WordNet nouns) smaller than asked: skipped
                print(f"skipped {fam} {d}-D: {exc}", file=sys.stderr, flush=True)
                continue
            data = np.asarray(getattr(data, "points", data), dtype=np.float64)
            rng = np.random.default_rng(0)
            perm = rng.permutation(len(data))
            Q, X = data[perm[: args.queries]], data[perm[args.queries :]]
            rows.append(measure(f"{fam}", X, Q))
            print(rows[-1], file=sys.stderr, flush=True)
    cols = ["data", "d", "n", "max_norm", "min_conformal", "recall_at_10", "kth_ratio_max", "dist_rel_err_median",
            "dist_rel_err_max", "collapsed", "check_changed", "check_max_change", "warns"]
    print(markdown_table(rows, cols))
    print("\nwrote", write_json(f"float32_precision_n{args.n}", {"params": vars(args), "rows": rows}))


if __name__ == "__main__":
    main()
