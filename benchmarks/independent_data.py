"""hypann's defaults on data made by generators that are not in :mod:`hypann.datasets`.

The data families of ``hypann.datasets.families`` are the ones the defaults
were chosen on. This script checks the defaults on six other kinds of data,
each made here by a process of its own (Poincare ball, curvature 1):

* ``rays``: points along 50 geodesics from the origin (hyperbolic radius
  uniform in [0, 20], angular noise 1e-6), 10-D;
* ``sphere``: every point at hyperbolic radius 12, directions uniform, 10-D;
* ``lowrank``: a 3-D Gaussian mixture (20 clusters) embedded in 64-D by a
  random orthonormal map, then put on the ball by the exponential map at the
  origin;
* ``meru_like``: 256-D directions with per-coordinate scales in [0.2, 1],
  hyperbolic norms uniform in [1, 3] (image-text embeddings such as MERU
  concentrate there);
* ``tree2d``: a random recursive tree in 2-D, each child 0.5-2 farther out
  than its parent (radius up to 25, ``1-|x|^2`` down to ~1e-11) at a random
  angle around its parent's;
* ``near_duplicates``: 1,000 centres at hyperbolic radius 2-14, every point a
  centre scaled by ``1 - |g| 1e-13`` (g standard normal): groups of points
  1e-13 apart, 10-D.

For each, ``--n`` base points and ``--queries`` held-out queries from the same
generator; ``HyperbolicIndex()`` (``auto``), ``"hkdtree"`` and ``"graph"``
at their defaults (``--unpruned``: also the graph with ``prune="never"``), on
``NUMBA_NUM_THREADS`` threads. Per method:

* ``exact``: every returned distance equal, within 1e-12 relative, to float64
  numpy brute force's distance at the same rank
  (:func:`hypann.eval.numpy_brute.numpy_brute_knn`);
* ``recall`` and ``boundary_recall``: recall@10 by distance over all queries
  and over the 10% nearest the boundary;
* ``speedup``: batch queries per second over numpy brute force's (timed on
  ``--brute-queries`` queries in the same run);
* ``build_s`` and ``describe``: what the index chose.

Usage::

    NUMBA_NUM_THREADS=2 python benchmarks/independent_data.py --n 50000 --queries 1000

Writes ``results/independent_data.json`` (``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import hypann
from _common import boundary_rows, report_rows
from hypann.eval.numpy_brute import numpy_brute_knn
from hypann.geometry.poincare import conformal_factor
from hypann.metrics import recall_per_query

K = 10
#: (label, HyperbolicIndex settings): the defaults, and the graph unpruned (``--unpruned``)
METHODS = (("auto", {"algorithm": "auto"}), ("hkdtree", {"algorithm": "hkdtree"}), ("graph", {"algorithm": "graph"}))
UNPRUNED = ("graph, prune=never", {"algorithm": "graph", "prune": "never"})


def _on_ball(directions, radius):
    """Points at hyperbolic ``radius`` along ``directions`` (rows, any length): ``tanh(r/2) v/|v|``."""
    unit = directions / np.linalg.norm(directions, axis=1, keepdims=True)
    return unit * np.tanh(np.asarray(radius) / 2.0)[:, None]


def rays(n, rng):
    axes = rng.standard_normal((50, 10))
    return _on_ball(axes[rng.integers(0, 50, n)] + 1e-6 * rng.standard_normal((n, 10)), rng.uniform(0, 20, n))


def sphere(n, rng):
    return _on_ball(rng.standard_normal((n, 10)), np.full(n, 12.0))


def lowrank(n, rng):
    basis = np.linalg.qr(rng.standard_normal((64, 3)))[0]
    centres = 3.0 * rng.standard_normal((20, 3))
    z = centres[rng.integers(0, 20, n)] + rng.standard_normal((n, 3)) * rng.uniform(0.05, 0.5, n)[:, None]
    tangent = z @ basis.T
    return _on_ball(tangent, np.linalg.norm(tangent, axis=1))


def meru_like(n, rng):
    return _on_ball(rng.standard_normal((n, 256)) * rng.uniform(0.2, 1.0, 256), rng.uniform(1.0, 3.0, n))


def tree2d(n, rng):
    angle = np.zeros(n)
    radius = np.zeros(n)
    for i in range(1, n):
        parent = int(rng.integers(max(0, i - 2000), i)) if rng.random() < 0.7 else int(rng.integers(0, i))
        angle[i] = angle[parent] + rng.normal(0.0, 0.5 * np.exp(-radius[parent] / 2.0))
        radius[i] = min(radius[parent] + rng.uniform(0.5, 2.0), 25.0)
    return _on_ball(np.stack([np.cos(angle), np.sin(angle)], axis=1), radius)


def near_duplicates(n, rng):
    centres = _on_ball(rng.standard_normal((1000, 10)), rng.uniform(2.0, 14.0, 1000))
    return centres[rng.integers(0, 1000, n)] * (1.0 - 1e-13 * np.abs(rng.standard_normal((n, 1))))


GENERATORS = {"rays": rays, "sphere": sphere, "lowrank": lowrank, "meru_like": meru_like, "tree2d": tree2d,
              "near_duplicates": near_duplicates}


def generator_dim(name):
    """The dimension of the generator ``name``'s points (from two of them)."""
    return GENERATORS[name](2, np.random.default_rng(0)).shape[1]


def generate_split(name, n, n_queries, seed):
    """``n`` base points and ``n_queries`` held-out queries of the generator ``name``, shuffled together (the
    generator's own seed: ``[seed, its position in GENERATORS]``)."""
    rng = np.random.default_rng([seed, list(GENERATORS).index(name)])
    points = GENERATORS[name](n + n_queries, rng)
    points = points[rng.permutation(len(points))]
    if not np.all(np.linalg.norm(points, axis=1) < 1.0):
        raise AssertionError(f"{name}: a generated point is not inside the ball")
    return points[:n], points[n:]


def measure(name, args):
    base, queries = generate_split(name, args.n, args.queries, args.seed)
    _, true_d = numpy_brute_knn(queries, base, K)
    t0 = time.perf_counter()
    numpy_brute_knn(queries[:args.brute_queries], base, K)
    brute_qps = args.brute_queries / (time.perf_counter() - t0)
    boundary = boundary_rows(conformal_factor(queries))
    rows = []
    for method, settings in METHODS + ((UNPRUNED,) if args.unpruned else ()):
        t0 = time.perf_counter()
        index = hypann.HyperbolicIndex(**settings, random_state=args.seed, verbose=False).build(base)
        build_s = time.perf_counter() - t0
        index.search(queries, K)  # warm
        t0 = time.perf_counter()
        found = index.search(queries, K)
        qps = len(queries) / (time.perf_counter() - t0)
        per_query = recall_per_query(found.distances, true_d, K, epsilon=1e-9)
        rel = np.abs(found.distances - true_d) / np.maximum(true_d, np.finfo(float).tiny)
        rows.append({"data": name, "dim": base.shape[1], "n": len(base), "method": method,
                     "exact": bool(np.all((rel <= 1e-12) | (np.abs(found.distances - true_d) <= 1e-300))),
                     "recall": float(per_query.mean()), "boundary_recall": float(per_query[boundary].mean()),
                     "speedup": qps / brute_qps, "build_s": build_s,
                     "describe": index.describe().split("; ", 1)[-1]})
        r = rows[-1]
        print(f"{name} {r['dim']}-D {method}: exact={r['exact']} recall={r['recall']:.4f} "
              f"boundary={r['boundary_recall']:.4f} {r['speedup']:.1f}x brute, build {build_s:.1f}s | "
              f"{r['describe'][:100]}", flush=True)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default=",".join(GENERATORS), help="comma-separated generators")
    ap.add_argument("--n", type=int, default=50_000)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--brute-queries", type=int, default=100)
    ap.add_argument("--unpruned", action="store_true", help="also the graph with prune='never'")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="independent_data", help="name of the results/<out>.json file")
    args = ap.parse_args(argv)
    rows = []
    for name in args.data.split(","):
        rows += measure(name, args)
    cols = ["data", "dim", "n", "method", "exact", "recall", "boundary_recall", "speedup", "build_s", "describe"]
    report_rows(args.out, rows, cols, {**vars(args), "k": K})


if __name__ == "__main__":
    main()
