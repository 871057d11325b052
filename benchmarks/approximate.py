"""Approximate hyperbolic k-NN in 100-D: hypann's shells against the peers and brute force.

Issue 3's benchmark. On ``hierarchical_tree(n + queries, dim, seed=0)`` (or
``clustered``) with ``--queries`` held-out queries (``holdout_split``) and
k = 10, all single-threaded and in the same run:

* **hypann** ``HyperbolicIndex(algorithm="shells", oracle=SPEC, width=W)``
  for SPEC among the paper's LSH at several settings, ``faiss:HNSW32``,
  ``hnswlib:M=16`` and ``kdtree`` (exact oracle), and the exact
  ``algorithm="recentering", oracle="kdtree"``. Each index is built once;
  query-time settings are swept: the sample ``budget`` of
  :meth:`HyperbolicIndex.search`, and the HNSW ``ef`` of the shell oracles
  (``oracle_params``).
* **peers** (:mod:`peers`): usearch HNSW with a numba Poincare metric,
  pynndescent with a numba Poincare callable, hnswlib L2 + exact re-rank of
  ``C`` candidates, faiss ``IndexFlatIP`` on the Lorentz lift.
* **numpy brute force** (:func:`hypann.eval.numpy_brute.numpy_brute_knn`,
  float64, explicit differences) timed on the first ``--brute-queries``
  queries: every speed-up is ``queries/s`` over its ``queries/s``.

Quality is scored on exact float64 distances recomputed for the returned ids
against an exact float64 scan (numba, explicit differences): recall@1 and
recall@10 by distance threshold, and the pointwise approximation ratios
``d(q, n_j) / d(q, n*_j)`` (mean over all ranks, mean of the per-query max,
overall max). Query times are medians of ``--repeats`` runs of the whole
batch after one untimed warm-up. For hypann, the mean oracle calls, samples
(points examined) and shells probed per query come from ``res.stats``; for
one setting per oracle the share of search time spent inside the shell
oracles' ``knn`` is measured too (``oracle_time_share``).

Usage::

    NUMBA_NUM_THREADS=1 nice python benchmarks/approximate.py            # 100k x 100-D, ~15-25 min
    python benchmarks/approximate.py --quick                             # 20k, 200 queries, < 2 min
    python benchmarks/approximate.py --quick --peers-only                # the peers alone
    python benchmarks/approximate.py --data clustered --dim 10 --n 50000

Writes ``results/approximate.json`` (every row, parameters, git SHA),
``results/approximate.md`` (the table) and ``results/approximate.png``
(recall@10 against queries/second, log x, one line per method).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import sys  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402

import peers  # noqa: E402
from _common import ROOT, markdown_table, median_time, write_json  # noqa: E402
from hypann import HyperbolicIndex  # noqa: E402
from hypann.apps.demo import holdout_split  # noqa: E402
from hypann.eval.numpy_brute import numpy_brute_knn  # noqa: E402

K = 10
PAPER_LSH = "lsh:tables=5,bits=15,granularity=auto,probe=1"


# ---------------------------------------------------------------------------
# configurations
# ---------------------------------------------------------------------------
def hypann_configs(quick):
    """``(algorithm, oracle, build params, sweep)``; ``sweep`` is a list of query settings.

    A query setting is a dict of :meth:`HyperbolicIndex.search` keywords plus
    the optional ``"oracle_ef"`` (the shell oracles' per-call HNSW ``ef``).
    """
    none = [{}]
    budgets = [{"budget": b} for b in (100, 300)] + none
    efs = [{"oracle_ef": e} for e in (10, 32, 128)]
    if quick:
        return [
            ("shells", PAPER_LSH, {"width": 3}, none),
            ("shells", "lsh:tables=5,bits=15,granularity=1000.0,probe=1", {"width": 3}, budgets),
            ("shells", "hnswlib:M=16", {"width": 3}, [{"oracle_ef": e} for e in (10, 64)]),
            ("shells", "faiss:HNSW32", {"width": 3}, none),
            ("shells", "kdtree", {"width": 3}, none),
            ("recentering", "kdtree", {}, none),
            ("hkdtree", None, {}, none),
        ]
    return [
        ("shells", PAPER_LSH, {"width": 3}, none),
        ("shells", PAPER_LSH, {"width": 2}, none),
        ("shells", "lsh:tables=5,bits=15,granularity=auto,probe=0", {"width": 3}, none),
        ("shells", "lsh:tables=10,bits=15,granularity=auto,probe=1", {"width": 3}, none),
        ("shells", "lsh:tables=5,bits=10,granularity=auto,probe=1", {"width": 3}, none),
        ("shells", "lsh:tables=5,bits=15,granularity=1000.0,probe=1", {"width": 3}, budgets),
        ("shells", "lsh:tables=5,bits=15,granularity=300.0,probe=1", {"width": 3}, budgets),
        ("shells", "hnswlib:M=16", {"width": 3}, efs),
        ("shells", "faiss:HNSW32", {"width": 3}, efs),
        ("shells", "kdtree", {"width": 3}, none),
        ("shells", "kdtree", {"width": 2}, none),
        ("shells", PAPER_LSH, {"width": 3, "recenter": True}, none),
        ("shells", "hnswlib:M=16", {"width": 3, "recenter": True}, [{"oracle_ef": e} for e in (10, 32)]),
        ("recentering", "kdtree", {}, none),
        ("vamana", None, {"R": 20, "L": 40}, [{"L": L} for L in (10, 40, 160)]),
        ("hkdtree", None, {}, none),
    ]


def peer_settings(quick):
    """Keyword arguments of each ``peers.run_*`` function."""
    if quick:
        return {
            "usearch": {"expansions": (10, 32, 128)},
            "pynndescent": {"epsilons": (0.0, 0.2)},
            "hnswlib": {"sweep": ((10, (32,)), (100, (100,)), (300, (300,)))},
        }
    return {
        "usearch": {"expansions": (10, 16, 32, 64, 128)},
        "pynndescent": {"epsilons": (0.0, 0.1, 0.3, 1.0, 3.0)},
        "hnswlib": {"sweep": ((10, (16, 64)), (100, (100, 200)), (300, (300, 600)), (1000, (1000,)))},
    }


# ---------------------------------------------------------------------------
# hypann runs
# ---------------------------------------------------------------------------
def oracle_time_share(index, queries, k, **search_kw):
    """Fraction of one search's wall time spent inside the shell oracles' ``knn``."""
    oracles = [o for o in getattr(index.algorithm_, "oracles_", ()) if o is not None]
    if not oracles:
        return None
    spent = [0.0]

    def wrap(o):
        inner = o.knn

        def timed(*a, **kw):
            t0 = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                spent[0] += time.perf_counter() - t0

        return timed

    for o in oracles:
        o.knn = wrap(o)
    try:
        t0 = time.perf_counter()
        index.search(queries, k, **search_kw)
        total = time.perf_counter() - t0
    finally:
        for o in oracles:
            del o.knn  # back to the class method
    return spent[0] / total


def hypann_label(algorithm, oracle, params):
    extra = ",".join(f"{k}={v}" for k, v in params.items())
    return f"hypann {algorithm}" + (f"({extra})" if extra else "") + (f" + {oracle}" if oracle else "")


def run_hypann(problem, algorithm, oracle, params, sweep, *, repeats, progress):
    t0 = time.perf_counter()
    index = HyperbolicIndex(algorithm=algorithm, oracle=oracle, random_state=0, **params).build(problem.base)
    build_s = time.perf_counter() - t0
    label = hypann_label(algorithm, oracle, params)
    rows = []
    for setting in sweep:
        search_kw = {key: v for key, v in setting.items() if key != "oracle_ef"}
        if "oracle_ef" in setting:
            name = "ef_search" if oracle.startswith("faiss") else "ef"
            search_kw["oracle_params"] = {name: int(setting["oracle_ef"])}
        query_s, res = median_time(lambda kw=search_kw: index.search(problem.queries, problem.k, **kw),
                                   repeats=repeats)
        _, dist = peers.exact_neighbours(problem, res.indices)
        if not np.allclose(dist, np.sort(res.distances, axis=1), rtol=1e-9, atol=0.0, equal_nan=True):
            progress(f"  warning: hypann distances differ from the recomputed ones for {label} {setting}")
        summary = res.stats.summary()
        row = {
            "method": label,
            "params": {"algorithm": algorithm, "oracle": oracle, **params, **setting},
            **peers.score(problem, dist),
            "queries_per_s": len(problem.queries) / query_s,
            "query_s": query_s,
            "build_s": build_s,
            "index_bytes": int(index.nbytes),
            "mean_oracle_calls": summary["oracle_calls"]["mean"],
            "mean_samples": summary["samples"]["mean"],
            "max_samples": summary["samples"]["max"],
            "mean_shells_probed": summary.get("shells_probed", {}).get("mean"),
            "max_shells_probed": summary.get("shells_probed", {}).get("max"),
        }
        if setting is sweep[-1]:
            row["oracle_time_share"] = oracle_time_share(index, problem.queries, problem.k, **search_kw)
        rows.append(row)
        progress(f"  {label:70s} {str(setting):20s} recall@{problem.k}={row['recall_at_k']:.4f} "
                 f"q/s={row['queries_per_s']:.1f} shells={row['mean_shells_probed']} samples={row['mean_samples']:.1f}")
    if hasattr(index.algorithm_, "shell_sizes"):
        sizes = index.algorithm_.shell_sizes()
        for r in rows:
            r["shell_sizes"] = sizes.tolist()
    return rows


# ---------------------------------------------------------------------------
# output
# ---------------------------------------------------------------------------
def make_plot(rows, brute_qps, path, title):
    """Recall@k against queries/second, log x; left the full range, right recall >= 0.9."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(16, 7))
    methods = list(dict.fromkeys(r["method"] for r in rows))
    for ax, low in zip(axes, (0.0, 0.9)):
        for i, m in enumerate(methods):
            pts = sorted((r["queries_per_s"], r["recall_at_k"]) for r in rows if r["method"] == m)
            style = "-o" if m.startswith("hypann") else "--s"
            ax.plot([p[0] for p in pts], [p[1] for p in pts], style, ms=4, label=m, color=plt.cm.tab20(i % 20))
        for mult, name, ls in ((1, "numpy brute", "-"), (50, "50x brute", ":")):
            ax.axvline(mult * brute_qps, color="k" if mult == 1 else "grey", lw=0.8, ls=ls)
            ax.text(mult * brute_qps, low + 0.01 * (1.02 - low), " " + name, fontsize=8, color="grey")
        ax.axhline(0.95, color="grey", lw=0.8, ls=":")
        ax.set_xscale("log")
        ax.set_xlabel("queries / second (single thread, batch of all queries)")
        ax.set_ylabel(f"recall@{K}")
        ax.set_ylim(low, 1.005 if low else 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_title(title, fontsize=10)
    axes[1].set_title("zoom: recall >= 0.9", fontsize=10)
    axes[1].legend(fontsize=6.5, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def replot(json_path):
    """Redraw the PNG next to a JSON written by this script (no measuring)."""
    import json

    with open(json_path) as fh:
        data = json.load(fh)
    p = data["params"]
    png = os.path.splitext(json_path)[0] + ".png"
    make_plot(data["rows"], data["brute_queries_per_s"], png,
              f"{p['data']} {p['n']} x {p['dim']}-D, k={p['k']}: recall@{p['k']} vs queries/s (single thread)")
    return png


def fmt_params(p):
    return ",".join(f"{k}={v}" for k, v in p.items() if k not in ("algorithm", "oracle"))


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="20k points, 200 queries, fewer settings")
    ap.add_argument("--n", type=int, default=None, help="indexed points (default 100000, quick 20000)")
    ap.add_argument("--queries", type=int, default=None, help="held-out queries (default 1000, quick 200)")
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--data", choices=("tree", "clustered"), default="tree")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--brute-queries", type=int, default=100, help="queries timed for numpy brute force")
    ap.add_argument("--peers", default=None,
                    help="comma-separated peers (usearch,pynndescent,hnswlib,faiss); default all, "
                         "quick: all but pynndescent (its first compile takes ~35-80 s)")
    ap.add_argument("--peers-only", action="store_true", help="skip the hypann configurations")
    ap.add_argument("--no-peers", action="store_true", help="skip the peers")
    ap.add_argument("--out", default=os.path.join(ROOT, "results"))
    ap.add_argument("--replot", metavar="JSON", help="only redraw the plot of an earlier run's JSON")
    args = ap.parse_args(argv)
    if args.replot:
        print(f"wrote {replot(args.replot)}")
        return
    n = args.n or (20_000 if args.quick else 100_000)
    nq = args.queries or (200 if args.quick else 1000)
    if args.peers is None:
        names = ("usearch", "hnswlib", "faiss") if args.quick else tuple(peers.PEERS)
    else:
        names = tuple(s.strip() for s in args.peers.split(",") if s.strip())
        unknown = set(names) - set(peers.PEERS)
        if unknown:
            ap.error(f"unknown peers {sorted(unknown)}; expected some of {sorted(peers.PEERS)}")
    if args.no_peers:
        names = ()

    def progress(msg):
        print(msg, flush=True)

    t_start = time.perf_counter()
    try:
        import faiss

        faiss.omp_set_num_threads(1)
    except ImportError:
        pass

    # data -----------------------------------------------------------------
    from hypann.datasets import synthetic

    gen = synthetic.hierarchical_tree if args.data == "tree" else synthetic.clustered
    points = gen(n + nq, args.dim, seed=args.seed)
    base, queries = holdout_split(points, nq, args.seed)
    problem = peers.make_problem(base, queries, K)
    progress(f"data {args.data} {base.shape} + {len(queries)} queries; min 1-|x|^2 = {problem.base_conformal.min():.3g}; "
             f"exact numba scan {len(queries) / problem.truth_s:.1f} q/s")

    # numpy brute force ------------------------------------------------------
    nb = min(args.brute_queries, nq)
    brute_s, (b_ids, b_d) = median_time(lambda: numpy_brute_knn(queries[:nb], base, K),
                                        repeats=1 if not args.quick else 3, warmup=0)
    brute_qps = nb / brute_s
    brute_recall = peers.score(peers.Problem(base, queries[:nb], problem.base_conformal,
                                             problem.query_conformal[:nb], K, problem.true_ids[:nb],
                                             problem.true_distances[:nb], 0.0), b_d)
    rows = [{"method": "numpy brute force (float64)", "params": {"queries_timed": nb}, **brute_recall,
             "queries_per_s": brute_qps, "query_s": brute_s, "build_s": 0.0,
             "index_bytes": int(base.nbytes + problem.base_conformal.nbytes)}]
    progress(f"numpy brute force: {brute_qps:.2f} q/s on {nb} queries, recall@{K}={brute_recall['recall_at_k']:.4f}")

    # peers ------------------------------------------------------------------
    if names:
        rows += peers.run_peers(problem, names=names, settings=peer_settings(args.quick), repeats=args.repeats,
                                progress=progress)

    # hypann -----------------------------------------------------------------
    if not args.peers_only:
        for algorithm, oracle, params, sweep in hypann_configs(args.quick):
            t0 = time.perf_counter()
            try:
                rows += run_hypann(problem, algorithm, oracle, params, sweep, repeats=args.repeats,
                                   progress=progress)
            except ImportError as exc:  # optional oracle library missing
                progress(f"skipping {algorithm} + {oracle}: {exc}")
                continue
            progress(f"{hypann_label(algorithm, oracle, params)}: {time.perf_counter() - t0:.1f}s")

    for r in rows:
        r["speedup_vs_brute"] = r["queries_per_s"] / brute_qps
        r["setting"] = fmt_params(r["params"])

    # report -----------------------------------------------------------------
    columns = ["method", "setting", "recall_at_1", "recall_at_k", "mean_ratio", "mean_max_ratio", "max_ratio",
               "missing", "queries_per_s", "speedup_vs_brute", "build_s", "index_bytes", "mean_oracle_calls",
               "mean_samples", "mean_shells_probed", "oracle_time_share"]
    header = (f"{args.data} {n} x {args.dim}-D (seed {args.seed}), {nq} held-out queries, k={K}, single thread, "
              f"median of {args.repeats} batch runs; numpy brute force {brute_qps:.2f} q/s "
              f"(timed on {nb} queries); shared 2-core machine.\n\n")
    shown = [{c: ("" if r.get(c) is None else r.get(c)) for c in columns} for r in rows]
    table = markdown_table(shown, columns).replace("recall_at_k", f"recall_at_{K}")
    print("\n" + header + table)
    os.makedirs(args.out, exist_ok=True)
    name = "approximate" if (args.data, args.dim) == ("tree", 100) else f"approximate_{args.data}{args.dim}d"
    name += "_quick" if args.quick else ""
    payload = {
        "params": {"n": n, "dim": args.dim, "queries": nq, "k": K, "data": args.data, "seed": args.seed,
                   "repeats": args.repeats, "brute_queries": nb, "threads": 1, "quick": args.quick,
                   "command": " ".join([os.path.basename(sys.executable)] + sys.argv)},
        "brute_queries_per_s": brute_qps,
        "truth_scan_queries_per_s": len(queries) / problem.truth_s,
        "min_conformal": float(problem.base_conformal.min()),
        "rows": rows,
        "wall_s": time.perf_counter() - t_start,
    }
    path = write_json(name, payload, out_dir=args.out)
    with open(os.path.join(args.out, f"{name}.md"), "w") as fh:
        fh.write(header + table + "\n")
    make_plot(rows, brute_qps, os.path.join(args.out, f"{name}.png"),
              f"{args.data} {n} x {args.dim}-D, k={K}: recall@{K} vs queries/s (single thread)")
    progress(f"wrote {path} and {name}.png in {time.perf_counter() - t_start:.0f}s")


if __name__ == "__main__":
    main()
