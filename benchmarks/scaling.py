"""How build time, memory and query cost grow with n and d: the scaling curves of hypann.

Every configuration (method, dimension, n, storage) runs in a fresh subprocess, so that its
resident memory is its own. The subprocess generates the data (``--family``, default the Gaussian
mixture of :mod:`hypann.datasets.families`; Lorentz rows of curvature ``--lorentz-c`` for the
``lorentz`` rows), builds the index on all cores, and measures

* ``build_s``: build seconds (all cores) and, with ``--threads-check``, on one thread;
* ``index_mb``: ``index.nbytes``; ``rss_index_mb``: resident memory after the build minus the
  resident memory before it with the data generated (what the index holds beyond the caller's
  array); ``peak_build_mb``: peak resident memory during the build minus that baseline;
* ``file_mb`` and, when :func:`hypann.load` takes ``mmap=True``, ``mmap_open_s`` and
  ``mmap_rss_mb`` (resident memory added by opening the file) and ``mmap_first_query_s`` (after the
  read-only kernel variant was compiled on a small memory-mapped file, ``mmap_small_first_query_s``);
* ``batch_qps``: queries per second, one batch of ``--queries`` queries, median of ``--repeats``;
  ``single_qps``: one query per call (``--single`` calls, median time per call);
* ``speedup_2v1``: with ``--threads-check``, batch search with all cores over one thread;
* ``recall``: recall@k against float64 brute force (:func:`hypann.eval.ground_truth.exact_knn`)
  over the first ``--recall-queries`` queries; ``ef``: for the graph, the search list size its
  build calibrated.

The driver prints a markdown table, fits the slope of log(time) and log(memory) against log(n)
per method and dimension, and writes ``results/scaling_<tag>.json`` (``results/scaling.json``
without a tag) with its log-log plots beside it (``..._time.png``, ``..._memory.png``). Only
``--combine`` draws the plots of ``docs/scaling.md``, ``docs/scaling_time.png`` and
``docs/scaling_memory.png``, so a run of a few configurations leaves them alone.

Usage::

    python benchmarks/scaling.py --quick                       # 10^4 and 10^5 (a few minutes)
    python benchmarks/scaling.py --sizes10 1e4 1e5 1e6 1e7 --sizes100 1e4 1e5 1e6 --lorentz256 1e6
    python benchmarks/scaling.py --combine results/scaling_a.json results/scaling_b.json --tag all
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from _common import ROOT, PeakSampler, markdown_table, median_time, status_bytes, write_json  # noqa: E402

MB = 1 << 20


def rss_bytes():
    """Current resident memory of this process (``VmRSS``, what :class:`PeakSampler` samples)."""
    return status_bytes("VmRSS")


# ----------------------------------------------------------------- one configuration (child)
def make_data(family, model, n, d, n_queries, c, seed):
    from hypann.datasets.families import make_family

    if model == "lorentz":  # Lorentz rows of curvature -c: clustered directions at hyperbolic norms 1-12
        rng = np.random.default_rng(seed)
        m = n + n_queries
        centres = rng.normal(size=(64, d))
        centres /= np.linalg.norm(centres, axis=1, keepdims=True)
        rows = np.empty((m, d + 1))
        for start in range(0, m, 100_000):  # in chunks: no full-size temporaries
            stop = min(m, start + 100_000)
            u = centres[rng.integers(64, size=stop - start)] + rng.normal(scale=0.6 / np.sqrt(d), size=(stop - start, d))
            u /= np.linalg.norm(u, axis=1, keepdims=True)
            h = rng.uniform(1.0, 12.0, stop - start)
            rows[start:stop, 0] = np.cosh(h) / np.sqrt(c)
            rows[start:stop, 1:] = u * (np.sinh(h) / np.sqrt(c))[:, None]
        return rows[:n], rows[n:]
    points = make_family(family, n + n_queries, d, seed=seed)
    return points[:n], points[n:]


def run_one(cfg):
    import hypann
    from hypann.eval.ground_truth import exact_knn

    model = cfg["model"]
    c = cfg["c"] if model == "lorentz" else 1.0
    X, Q = make_data(cfg["family"], model, cfg["n"], cfg["d"], cfg["queries"], c, cfg["seed"])
    settings = dict(algorithm=cfg["method"], model=model, c=c, random_state=0, verbose=False)
    if cfg["storage"] != "float64":
        settings["storage"] = cfg["storage"]
    # compile outside the measurement, on a small copy (kept: saved below to compile the memory-mapped variant)
    small = hypann.HyperbolicIndex(**settings).build(X[:2000])
    small.search(Q[:10], cfg["k"])
    base = rss_bytes()
    with PeakSampler("VmRSS") as sampler:
        t0 = time.perf_counter()
        index = hypann.HyperbolicIndex(**settings).build(X)
        out = dict(cfg, build_s=time.perf_counter() - t0)
    out["peak_build_mb"] = (sampler.peak - base) / MB
    out["rss_index_mb"] = (rss_bytes() - base) / MB
    out["index_mb"] = index.nbytes / MB
    graph = getattr(index.algorithm_, "graph_", None)
    if graph is not None:
        out["ef"] = int(graph.ef_)  # the search list size the build calibrated
    out["raw_float32_mb"] = X.shape[0] * (X.shape[1] - (model == "lorentz")) * 4 / MB
    k = cfg["k"]
    index.search(Q[:10], k)
    out["batch_qps"] = len(Q) / median_time(lambda index=index: index.search(Q, k), repeats=cfg["repeats"], warmup=0)[0]
    singles = Q[: cfg["single"]]
    out["single_qps"] = 1.0 / np.median([median_time(lambda q=q, index=index: index.search(q[None, :], k), repeats=1,
                                                     warmup=0)[0] for q in singles])
    if cfg["threads_check"]:
        one = hypann.HyperbolicIndex(**settings, n_jobs=1)
        t0 = time.perf_counter()
        one.build(X)
        out["build_1thread_s"] = time.perf_counter() - t0
        t_one = median_time(lambda: one.search(Q, k), repeats=cfg["repeats"], warmup=0)[0]
        out["speedup_2v1"] = out["batch_qps"] * t_one / len(Q)
        out["build_speedup_2v1"] = out["build_1thread_s"] / out["build_s"]
        del one
    r = cfg["recall_queries"]
    found = index.search(Q[:r], k).indices
    q, x, cq, cx = _in_ball(Q[:r], X, model, c)
    truth = exact_knn(q, x, k, q_conformal=cq, x_conformal=cx)[0]
    del x
    out["recall"] = float(np.mean([len(np.intersect1d(a, b)) / k for a, b in zip(found, truth)]))
    with tempfile.TemporaryDirectory(dir=cfg["tmp"]) as tmp:
        path = os.path.join(tmp, "index.hypann")
        index.save(path)
        out["file_mb"] = os.path.getsize(path) / MB
        expected = index.search(Q[:100], k)
        del index
        has_mmap = "mmap" in inspect.signature(hypann.HyperbolicIndex.load).parameters
        if has_mmap:
            # a memory-mapped index has read-only arrays, for which numba compiles (once, cached on
            # disk) a variant of the search kernels: do that on a small file first, so that the
            # first query below measures paging in, not compiling
            small_path = os.path.join(tmp, "small.hypann")
            small.save(small_path)
            t0 = time.perf_counter()
            hypann.load(small_path, mmap=True).search(Q[:1], k)
            out["mmap_small_first_query_s"] = time.perf_counter() - t0
        before = rss_bytes()
        if has_mmap:
            t0 = time.perf_counter()
            mapped = hypann.load(path, mmap=True)
            out["mmap_open_s"] = time.perf_counter() - t0
            out["mmap_rss_mb"] = (rss_bytes() - before) / MB
            t0 = time.perf_counter()
            first = mapped.search(Q[:1], k)
            out["mmap_first_query_s"] = time.perf_counter() - t0
            again = mapped.search(Q[:100], k)
            out["mmap_identical"] = bool(np.array_equal(again.indices, expected.indices)
                                         and np.array_equal(again.distances, expected.distances)
                                         and first.indices.shape == (1, k))
            del mapped
    return out


def _in_ball(Q, X, model, c):
    """Unit-curvature Poincare images with their conformal factors, for the brute-force truth."""
    from hypann._validation import check_points

    q, cq = check_points(Q, name="Q", model=model, c=c)
    x, cx = check_points(X, name="X", model=model, c=c)
    return q, x, cq, cx


# ----------------------------------------------------------------- driver
def slope(ns, values):
    ns, values = np.asarray(ns, float), np.asarray(values, float)
    ok = values > 0
    if ok.sum() < 2:
        return float("nan")
    return float(np.polyfit(np.log(ns[ok]), np.log(values[ok]), 1)[0])


def plot(rows, out_dir, prefix):
    """Log-log plots of build seconds and resident index memory against n: ``<out_dir>/<prefix>time.png`` and
    ``<out_dir>/<prefix>memory.png``."""
    if not rows:
        return
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return
    for what, ylabel, fname in (("build_s", "build seconds", f"{prefix}time.png"),
                                ("rss_index_mb", "index resident MB", f"{prefix}memory.png")):
        fig, ax = plt.subplots(figsize=(6, 4))
        groups = {}
        for r in rows:
            groups.setdefault((r["method"], r["model"], r["d"], r["storage"]), []).append(r)
        for (method, model, d, storage), rs in sorted(groups.items()):
            rs = sorted(rs, key=lambda r: r["n"])
            ax.loglog([r["n"] for r in rs], [max(r[what], 1e-3) for r in rs], "o-",
                      label=f"{method} {model} {d}-D {storage}")
        ax.set_xlabel("n (points)")
        ax.set_ylabel(ylabel)
        ax.legend(fontsize=7)
        ax.grid(True, which="both", alpha=0.3)
        fig.tight_layout()
        fig.savefig(os.path.join(out_dir, fname), dpi=110)
        plt.close(fig)


def report(rows, name, args, *, docs_plots=False):
    """Print the table and the fitted slopes of ``rows``, write ``results/<name>.json`` and its plots
    (``results/<name>_time.png``, ``results/<name>_memory.png``; with ``docs_plots`` the docs' own,
    ``docs/scaling_time.png`` and ``docs/scaling_memory.png``)."""
    good = [r for r in rows if "error" not in r]
    slopes = []
    for key in sorted({(r["method"], r["model"], r["d"], r["storage"]) for r in good}):
        rs = sorted((r for r in good if (r["method"], r["model"], r["d"], r["storage"]) == key), key=lambda r: r["n"])
        ns = [r["n"] for r in rs]
        slopes.append({"method": key[0], "model": key[1], "d": key[2], "storage": key[3],
                       "sizes": " ".join(f"{n:.0e}" for n in ns),
                       "build slope": slope(ns, [r["build_s"] for r in rs]),
                       "memory slope": slope(ns, [r["rss_index_mb"] for r in rs]),
                       "1/batch q/s slope": slope(ns, [1 / r["batch_qps"] for r in rs])})
    columns = ["method", "model", "d", "n", "storage", "build_s", "index_mb", "rss_index_mb", "peak_build_mb",
               "raw_float32_mb", "file_mb", "batch_qps", "single_qps", "recall", "ef", "mmap_open_s", "mmap_rss_mb",
               "mmap_first_query_s", "speedup_2v1", "build_speedup_2v1"]
    good.sort(key=lambda r: (r["model"], r["d"], r["method"], r["storage"], r["n"]))
    print()
    print(markdown_table(good, [c for c in columns if any(c in r for r in good)]))
    print()
    print(markdown_table(slopes, ["method", "model", "d", "storage", "sizes", "build slope", "memory slope",
                                  "1/batch q/s slope"]))
    write_json(name, {"args": args, "rows": rows, "slopes": slopes})
    if docs_plots:
        plot(good, os.path.join(ROOT, "docs"), "scaling_")
    else:
        plot(good, os.path.join(ROOT, "results"), f"{name}_")


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--one", help=argparse.SUPPRESS)  # a JSON configuration: run it and print the result
    p.add_argument("--quick", action="store_true", help="10^4 and 10^5 points only")
    p.add_argument("--sizes10", type=float, nargs="*", default=[1e4, 1e5, 1e6, 1e7])
    p.add_argument("--sizes100", type=float, nargs="*", default=[1e4, 1e5, 1e6])
    p.add_argument("--lorentz256", type=float, nargs="*", default=[1e6])
    p.add_argument("--lorentz-c", type=float, default=0.37)
    p.add_argument("--methods", nargs="+", default=["hkdtree", "graph"])
    p.add_argument("--graph-max-n", type=float, default=1e6, help="largest n built with the graph method")
    p.add_argument("--storages", nargs="+", default=["float64"])
    p.add_argument("--family", default="gaussian_mixture")
    p.add_argument("--queries", type=int, default=1000)
    p.add_argument("--single", type=int, default=200)
    p.add_argument("--recall-queries", type=int, default=100)
    p.add_argument("-k", type=int, default=10)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads-check", action="store_true", help="also build and search with one thread")
    p.add_argument("--tmp", default=None, help="folder for the saved index files")
    p.add_argument("--tag", default="")
    p.add_argument("--combine", nargs="+", metavar="JSON",
                   help="run nothing: report the rows of these earlier results (later files replace earlier rows "
                        "of the same method, model, d, n and storage) as results/scaling_<tag>.json and the plots")
    args = p.parse_args(argv)
    if args.combine:
        merged = {}
        for path in args.combine:
            with open(path) as fh:
                earlier = json.load(fh)
            for r in earlier["rows"]:
                if "error" not in r:
                    merged[(r["method"], r["model"], r["d"], r["n"], r["storage"])] = dict(
                        r, source=os.path.basename(path), source_git_sha=earlier.get("git_sha"))
        report(list(merged.values()), "scaling" + (f"_{args.tag}" if args.tag else "_combined"), vars(args),
               docs_plots=True)
        return 0
    if args.one:
        print("RESULT " + json.dumps(run_one(json.loads(args.one))), flush=True)
        return 0
    if args.quick:
        args.sizes10, args.sizes100, args.lorentz256 = [1e4, 1e5], [1e4, 1e5], [1e4]
    plan = []
    for model, d, sizes in (("poincare", 10, args.sizes10), ("poincare", 100, args.sizes100),
                            ("lorentz", 256, args.lorentz256)):
        for n in sizes:
            for method in args.methods:
                if method == "graph" and n > args.graph_max_n:
                    continue
                for storage in args.storages:
                    plan.append(dict(method=method, model=model, d=d, n=int(n), storage=storage, family=args.family,
                                     c=args.lorentz_c, queries=args.queries, single=args.single, k=args.k,
                                     repeats=args.repeats, recall_queries=args.recall_queries,
                                     threads_check=args.threads_check, tmp=args.tmp, seed=0))
    rows = []
    for cfg in plan:
        t0 = time.perf_counter()
        proc = subprocess.run([sys.executable, __file__, "--one", json.dumps(cfg)], capture_output=True, text=True)
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
        if proc.returncode != 0 or not line:
            err = (proc.stderr.strip().splitlines() or ["no output"])[-1]
            print(f"FAILED {cfg['method']} {cfg['model']} {cfg['d']}-D n={cfg['n']}: {err}", flush=True)
            rows.append(dict(cfg, error=err))
            continue
        row = json.loads(line[0][len("RESULT "):])
        rows.append(row)
        print(f"{row['method']:8s} {row['model']:8s} {row['d']:4d}-D n={row['n']:>10,d} {row['storage']}: "
              f"build {row['build_s']:.1f}s, index {row['rss_index_mb']:.0f} MB resident "
              f"({row['index_mb']:.0f} MB nbytes), batch {row['batch_qps']:.0f} q/s, recall {row['recall']:.3f} "
              f"[{time.perf_counter() - t0:.0f}s]", flush=True)
    report(rows, "scaling" + (f"_{args.tag}" if args.tag else ""), vars(args))
    return 0


if __name__ == "__main__":
    sys.exit(main())
