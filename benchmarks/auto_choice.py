"""``algorithm="auto"``'s choice between the kd-tree and the scan, against both timed on held-out queries.

For each family of :mod:`hypann.datasets.families` (and ``sphere``: points
uniform on one hyperbolic sphere of radius ``--sphere-radius``, every point at
the same norm, a kind of data the families do not have) and dimension,
``--n`` base points and ``--queries`` held-out queries, k = 10, one numba
thread. The script builds ``HyperbolicIndex(algorithm=...)`` with
``"hkdtree"``, ``"brute"`` (the scan) and ``"auto"``, and measures

* ``f``: the kd-tree's mean examined fraction on the held-out queries;
* ``tree_us`` / ``scan_us``: microseconds per query of one batch call, the
  three indexes timed round-robin (``--repeats`` passes, median each), each
  timed call after an untimed call of the same index;
* ``r = (tree_us / scan_us) / f``: the walk's cost per examined point in scan
  points, which sets where the scan starts to win (``f > 1/r``);
* ``auto``: what ``auto`` chose (and whether it timed), ``old_rule``: what the
  rule before the forty-third session would have chosen from auto's own
  measurement (``f > 1/(1 + 44/sqrt(d))`` below 16 coordinates, ``f > 1/11``
  from 16 on), and ``auto_vs_best``: auto's speed over the faster of the two;
* ``auto_build_s`` / ``count_only_build_s``: auto's build, and the same build
  with ``scan_fraction`` set to its default cut (the count decides alone, no
  timing), each the second of two builds.

Every index must give the same distances (all three are exact): checked bit for bit.

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/auto_choice.py --dims 10,16,32,64,100 --n 50000
    NUMBA_NUM_THREADS=1 python benchmarks/auto_choice.py --families sphere --dims 10 --n 50000

Writes ``results/auto_choice.json`` (``--out``) and prints a markdown table.
"""

from __future__ import annotations

import argparse
import time

import numba
import numpy as np

import hypann
from _common import family_split, report_rows
from hypann.datasets.families import FAMILIES
from hypann.search.auto import SCAN_FRACTION

K = 10
#: The rule before the forty-third session: r(d) = 1 + 44/sqrt(d) below 16 coordinates, 11 from 16 on.
OLD_COST_SCALE = 44.0
OLD_WIDE_COST = 11.0
OLD_WIDE_MIN_DIM = 16


def old_rule(f, dim):
    """The scan when the examined fraction ``f`` exceeded the old single cut of the dimension."""
    cost = OLD_WIDE_COST if dim >= OLD_WIDE_MIN_DIM else 1.0 + OLD_COST_SCALE / np.sqrt(dim)
    return "brute" if f > 1.0 / cost else "hkdtree"


def sphere(n, dim, radius, seed):
    """``n`` points uniform on the hyperbolic sphere of ``radius`` about the origin (Poincare ball, c = 1)."""
    v = np.random.default_rng([seed, 0x5E]).standard_normal((n, dim))
    v /= np.linalg.norm(v, axis=1, keepdims=True)
    return v * np.tanh(radius / 2.0)


def split(name, dim, args):
    """``(base, queries)`` of one case."""
    if name != "sphere":
        _, X, _, Q, _ = family_split(name, dim, args)
        return X, Q
    points = sphere(args.n + args.queries, dim, args.sphere_radius, args.seed)
    return points[:args.n], points[args.n:]


def measure_case(name, dim, args):
    base, queries = split(name, dim, args)
    n = len(base)
    indexes = {algo: hypann.HyperbolicIndex(algorithm=algo, n_jobs=1, random_state=args.seed,
                                            verbose=False).build(base)
               for algo in ("hkdtree", "brute")}
    # auto's build twice (the second one timed): as it is, and with the count alone deciding at the same cut
    # (a given scan_fraction times nothing), which is the build without the timing
    builds = {}
    for label, params in (("auto", {}), ("count_only", {"scan_fraction": SCAN_FRACTION})):
        for _ in range(2):
            t0 = time.perf_counter()
            index = hypann.HyperbolicIndex(algorithm="auto", n_jobs=1, random_state=args.seed, verbose=False,
                                           **params).build(base)
            builds[label] = time.perf_counter() - t0
        if label == "auto":
            indexes["auto"] = index
    times = {algo: [] for algo in indexes}
    results = {}
    for _ in range(args.repeats):
        for algo, index in indexes.items():
            index.search(queries, K)
            t0 = time.perf_counter()
            results[algo] = index.search(queries, K)
            times[algo].append(time.perf_counter() - t0)
    for algo, res in results.items():
        if not np.array_equal(res.distances, results["brute"].distances):
            raise AssertionError(f"{name} {dim}-D: {algo} answers differently from the scan (all are exact)")
    us = {algo: 1e6 * float(np.median(t)) / len(queries) for algo, t in times.items()}
    f = float(results["hkdtree"].stats.samples.mean()) / n
    auto = indexes["auto"].algorithm_
    old = old_rule(auto.examined_fraction_, dim)
    best = min(us["hkdtree"], us["brute"])
    return {"family": name, "dim": dim, "n": n, "f": f, "tree_us": us["hkdtree"], "scan_us": us["brute"],
            "tree_over_scan": us["hkdtree"] / us["brute"], "r": us["hkdtree"] / us["brute"] / f,
            "auto_f": auto.examined_fraction_, "auto": auto.choice_ + (" (timed)" if auto.timing_ else ""),
            "old_rule": old, "auto_us": us["auto"], "auto_vs_best": best / us["auto"], "old_vs_best": best / us[old],
            "auto_build_s": builds["auto"], "count_only_build_s": builds["count_only"]}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--families", default=",".join([*FAMILIES, "sphere"]), help="comma-separated family names")
    ap.add_argument("--dims", default="10,16,32,64,100")
    ap.add_argument("--n", type=int, default=50_000, help="base points per family (WordNet: at most 82,115 - queries)")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument("--sphere-radius", type=float, default=12.0, help="hyperbolic radius of the sphere family")
    ap.add_argument("--repeats", type=int, default=3, help="passes over the three indexes (median each)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="auto_choice", help="name of the results/<out>.json file")
    args = ap.parse_args(argv)
    numba.set_num_threads(1)
    rows = []
    for dim in (int(d) for d in args.dims.split(",")):
        for name in args.families.split(","):
            if name != "sphere" and FAMILIES[name].dims is not None and dim not in FAMILIES[name].dims:
                continue
            t0 = time.perf_counter()
            row = measure_case(name, dim, args)
            rows.append(row)
            print(f"{name} {dim}-D ({time.perf_counter() - t0:.0f}s): f={row['f']:.4f} tree/scan="
                  f"{row['tree_over_scan']:.3f} r={row['r']:.2f} auto={row['auto']} old={row['old_rule']} "
                  f"auto/best={row['auto_vs_best']:.2f} old/best={row['old_vs_best']:.2f}", flush=True)
    cols = ["family", "dim", "n", "f", "tree_us", "scan_us", "tree_over_scan", "r", "auto", "old_rule",
            "auto_vs_best", "old_vs_best", "auto_build_s", "count_only_build_s"]
    report_rows(args.out, rows, cols, {**vars(args), "k": K})


if __name__ == "__main__":
    main()
