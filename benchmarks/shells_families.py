"""Shell + LSH at its defaults on every 10-D data family: recall@10, speed, fraction examined.

For each family of :mod:`hypann.datasets.families` (10-D), ``n`` base points
and ``queries`` held-out queries (same generator), k = 10, one numba thread:

* ``shells+lsh`` -- ``HyperbolicIndex(algorithm="shells", oracle="lsh")``
  at its defaults (tables, bits and bucket widths chosen from the data for
  ``target_recall=0.96``; the compiled all-shell loop), timed through
  ``index.search``; the ``note`` gives the chosen setting;
* ``shells+lsh rounds`` -- the same built tables, searched by the per-shell
  rounds (``_search_rounds``: one oracle call per shell, each shell's
  Euclidean top-k) instead of the compiled loop, timed at the algorithm
  level, as is the compiled loop in the ``note`` of this row, so the two are
  comparable: does the compiled loop pay?
* ``hkdtree`` -- the exact kd-tree, for its fraction of points examined;
* with ``--variants``: the defaults with ``recenter=True`` (per-shell rounds
  with recentring), and the paper's LSH (5 tables x 15, ``granularity=auto``)
  with and without ``recenter=True``.

Speed is a multiple of float64 numpy brute force
(:func:`hypann.eval.numpy_brute.numpy_brute_knn`) on ``--brute-queries``
queries, timed in the same round-robin as the methods (median of
``--repeats``). Recall@10 counts returned points within the true 10th
distance (ties at duplicates count). ``fraction`` is the mean of
``stats.extra["fraction_examined"]`` (``stats.samples / n``).

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/shells_families.py --n 20000
    NUMBA_NUM_THREADS=1 python benchmarks/shells_families.py --dim 100 --queries 300 \
        --brute-queries 50 --families gaussian_mixture,hierarchical_tree --variants
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import hypann
from _common import WORDNET_POINTS, family_arguments, markdown_table, write_json
from hypann.datasets.base import holdout_split
from hypann.datasets.families import FAMILIES, make_family
from hypann.eval.numpy_brute import numpy_brute_knn
from hypann.geometry.poincare import conformal_factor

K = 10
PAPER_LSH = "lsh:tables=5,bits=15,granularity=auto,probe=1"
VARIANTS = [
    ("defaults, recenter=True", {"oracle": "lsh", "recenter": True}),
    ("paper lsh", {"oracle": PAPER_LSH}),
    ("paper lsh, recenter=True", {"oracle": PAPER_LSH, "recenter": True}),
]


def run_case(name, args, progress):
    dim = args.dim
    n = args.n
    if name == "wordnet_nouns":
        n = min(n, WORDNET_POINTS - args.queries)
    points = make_family(name, n + args.queries, dim, seed=args.seed)
    base_ids, query_ids = holdout_split(len(points), args.queries, seed=args.seed)
    base, queries = points[base_ids], points[query_ids]
    cq = conformal_factor(queries)
    _, true_d = numpy_brute_knn(queries, base, K)
    thresh = true_d[:, K - 1 : K] * (1 + 1e-12)
    nb = min(args.brute_queries, args.queries)

    t0 = time.perf_counter()
    lsh = hypann.HyperbolicIndex(algorithm="shells", oracle="lsh", random_state=args.seed, n_jobs=1).build(base)
    lsh_build = time.perf_counter() - t0
    t0 = time.perf_counter()
    tree = hypann.HyperbolicIndex(algorithm="hkdtree", random_state=args.seed, n_jobs=1).build(base)
    tree_build = time.perf_counter() - t0
    alg = lsh.algorithm_
    lsh.search(queries[:4], K)
    tree.search(queries[:4], K)
    alg._search_rounds(queries[:4], cq[:4], K)

    variants = []
    if args.variants:
        for label, settings in VARIANTS:
            t0 = time.perf_counter()
            index = hypann.HyperbolicIndex(algorithm="shells", random_state=args.seed, n_jobs=1, **settings).build(base)
            variants.append((label, index, time.perf_counter() - t0))
            index.search(queries[:4], K)
    runs = {
        "brute": lambda: numpy_brute_knn(queries[:nb], base, K),
        "shells+lsh": lambda: lsh.search(queries, K),
        "compiled (alg level)": lambda: alg.search(queries, cq, K),
        "shells+lsh rounds": lambda: alg._search_rounds(queries, cq, K),
        "hkdtree": lambda: tree.search(queries, K),
    }
    for label, index, _ in variants:
        runs[label] = (lambda index: lambda: index.search(queries, K))(index)
    times = {key: [] for key in runs}
    out = {}
    for _ in range(args.repeats):  # round-robin: the methods share the machine's load alike
        for key, fn in runs.items():
            t0 = time.perf_counter()
            out[key] = fn()
            times[key].append(time.perf_counter() - t0)
    med = {key: float(np.median(v)) for key, v in times.items()}
    brute_qps = nb / med["brute"]
    case = {"family": name, "dim": dim, "n": len(base), "numpy_brute_qps": brute_qps}

    def row(method, dist, stats, seconds, build_s, note=""):
        frac = stats.extra.get("fraction_examined", stats.samples / len(base))
        r = {**case, "method": method, "recall_at_10": float(np.mean(np.sum(dist <= thresh, axis=1)) / K),
             "speedup": len(queries) / seconds / brute_qps, "fraction": float(np.mean(frac)),
             "mean_samples": float(stats.samples.mean()), "build_s": build_s, "note": note}
        progress(f"{name:18s} {method:18s} recall {r['recall_at_10']:.4f} {r['speedup']:7.1f}x numpy brute  "
                 f"fraction {r['fraction']:.4f}  build {build_s:5.2f}s  {note}")
        return r

    ch = alg.lsh_choice_
    note = (f"W=alpha*sigma_b, alpha={ch['alpha']:.3g}, m={ch['bits']}, T={ch['tables']}; predicted recall "
            f"{ch['recall']:.3f}, build-sample recall {ch['sample_recall']:.3f}; "
            f"{float(np.mean(out['shells+lsh'].stats.extra['shells_probed'])):.1f} shells/query")
    res = out["shells+lsh"]
    rows = [row("shells+lsh", res.distances, res.stats, med["shells+lsh"], lsh_build, note)]
    from hypann.geometry.poincare import dist_from_delta

    _, d_rounds, st_rounds = out["shells+lsh rounds"]
    ratio = med["shells+lsh rounds"] / med["compiled (alg level)"]
    rows.append(row("shells+lsh rounds", dist_from_delta(d_rounds), st_rounds, med["shells+lsh rounds"], lsh_build,
                    f"compiled loop {ratio:.1f}x faster on the same tables"))
    res = out["hkdtree"]
    rows.append(row("hkdtree (exact)", res.distances, res.stats, med["hkdtree"], tree_build))
    for label, index, build_s in variants:
        res = out[label]
        rows.append(row(label, res.distances, res.stats, med[label], build_s))
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    family_arguments(ap, n=20_000, queries=1000, brute_queries=200, repeats=3,
                     repeats_help="round-robin timings per method (median kept)")
    ap.add_argument("--dim", type=int, default=10)
    ap.add_argument("--variants", action="store_true", help="also recenter=True and the paper's LSH constants")
    ap.add_argument("--out", default=None, help="name of the results/<out>.json file (default shells_families_<dim>d)")
    args = ap.parse_args(argv)

    def progress(msg):
        print(msg, flush=True)

    rows = []
    t_start = time.perf_counter()
    for name in args.families.split(","):
        family = FAMILIES[name]
        if family.dims is not None and args.dim not in family.dims:
            continue
        rows += run_case(name, args, progress)
    columns = ["family", "dim", "n", "method", "recall_at_10", "speedup", "fraction", "build_s", "note"]
    print(markdown_table(rows, columns))
    path = write_json(args.out or f"shells_families_{args.dim}d", {"args": vars(args), "rows": rows, "seconds": time.perf_counter() - t_start})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
