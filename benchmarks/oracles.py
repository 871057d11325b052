"""Euclidean oracles alone: recall@10 and queries/second on 100-D hierarchical data.

Every oracle of :mod:`hypann.oracles` answers the *Euclidean* 10-NN question
on the same points (no hyperbolic search): brute force, cKDTree, the paper's
LSH at a few settings, faiss (Flat, HNSW, IVF) and hnswlib. Ground truth is
exact float64 brute force from explicit differences (``|q-x|^2`` formed
coordinate by coordinate; the points live near the boundary of the ball,
where ``|q|^2 + |x|^2 - 2 q.x`` cancels). Recall@10 is counted against the
true 10-th distance (ties do not matter). Single thread everywhere; query
times are medians over ``--repeats`` runs of the whole batch.

A second table looks at the LSH granularity inside spherical shells
(``w = 3``): for each populated shell, queries that fall in it search the
shell's points with granularity ``g`` = the paper's ``min(3^i, 10000)``,
the uncapped ``3^i``, ``3^i / 10`` and ``3^i / 100``, and we report the
recall@1 and recall@10 of the within-shell Euclidean 10-NN and the mean
number of candidates examined.

Usage::

    NUMBA_NUM_THREADS=1 nice python benchmarks/oracles.py            # 100k x 100-D
    python benchmarks/oracles.py --n 20000 --queries 200 --quick     # smoke run

Writes ``results/oracles.json`` (parameters, git SHA, every row) and prints
markdown tables (also saved to ``results/oracles.md``).
"""

from __future__ import annotations

import os

for _var in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS", "NUMBA_NUM_THREADS"):
    os.environ.setdefault(_var, "1")

import argparse  # noqa: E402
import json  # noqa: E402
import platform  # noqa: E402
import time  # noqa: E402
from pathlib import Path  # noqa: E402

import numpy as np  # noqa: E402
from _common import git_sha, markdown_table, median_time  # noqa: E402

from hypann.datasets.synthetic import hierarchical_tree  # noqa: E402
from hypann.eval.metrics import recall  # noqa: E402
from hypann.geometry import _kernels  # noqa: E402
from hypann.geometry.bands import shell_of  # noqa: E402
from hypann.oracles.lsh import LSHOracle  # noqa: E402
from hypann.oracles.registry import make_oracle  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
K = 10


def load_data(n, dim, n_queries, seed):
    """``n`` data points and ``n_queries`` held-out queries from one hierarchical tree."""
    X = hierarchical_tree(n + n_queries, dim, seed=seed)
    source = "hypann.datasets.synthetic.hierarchical_tree"
    perm = np.random.default_rng(seed + 1).permutation(len(X))
    Q = np.ascontiguousarray(X[perm[:n_queries]])
    D = np.ascontiguousarray(X[np.sort(perm[n_queries:])])
    return D, Q, source


def exact_euclidean_knn(Q, D, k):
    """Exact float64 squared distances and ids by explicit differences (numba, no BLAS)."""
    ids, sq = _kernels.brute_knn_delta(Q, np.ones(len(Q)), D, np.ones(len(D)), k)
    return ids, sq


def run_oracle(spec, D, Q, true_sq, repeats, deep):
    oracle = make_oracle(spec)
    t0 = time.perf_counter()
    oracle.build(D)
    build_s = time.perf_counter() - t0
    oracle.knn(Q[: min(10, len(Q))], K)  # warm-up (numba compile, lazy init)
    query_s, res = median_time(lambda: oracle.knn(Q, K), repeats=repeats, warmup=0)
    row = {
        "oracle": oracle.spec(),
        "exact": bool(oracle.exact),
        "recall@10": recall(res.sq_dist, true_sq, K),
        "recall@10_deepest10%": recall(res.sq_dist[deep], true_sq[deep], K),
        "qps": len(Q) / query_s,
        "query_s": query_s,
        "build_s": build_s,
        "nbytes": int(oracle.nbytes),
        "mean_evaluations": None if res.evaluations is None else float(np.mean(res.evaluations)),
    }
    return row


def shell_table(D, Q, repeats, *, width=3.0, min_points=1000, min_queries=10):
    """Recall of LSH inside each shell for several granularities (see module docstring)."""
    cd = _kernels.conformal_factor(D)
    cq = _kernels.conformal_factor(Q)
    sd = shell_of(cd, width)
    sq = shell_of(cq, width)
    rows = []
    for i in np.unique(sd):
        pts = np.flatnonzero(sd == i)
        qs = np.flatnonzero(sq == i)
        if len(pts) < min_points or len(qs) < min_queries:
            continue
        Ds, Qs = np.ascontiguousarray(D[pts]), np.ascontiguousarray(Q[qs])
        _, true_sq = exact_euclidean_knn(Qs, Ds, K)
        nn = np.sqrt(true_sq[:, 0])
        nn10 = np.sqrt(true_sq[:, K - 1])
        base = LSH_AUTO.for_shell(int(i), width)
        choices = {
            "paper min(w^i,1e4)": base.granularity,
            "w^i": width**i,
            "w^i / 10": width**i / 10,
            "w^i / 100": width**i / 100,
        }
        for label, g in choices.items():
            o = LSHOracle(**{**base.get_params(), "granularity": float(g)}).build(Ds)
            o.knn(Qs[:2], K)
            qt, res = median_time(lambda o=o: o.knn(Qs, K), repeats=repeats, warmup=0)
            rows.append(
                {
                    "shell": int(i),
                    "points": int(len(pts)),
                    "queries": int(len(qs)),
                    "median_nn1_dist": float(np.median(nn)),
                    "median_nn10_dist": float(np.median(nn10)),
                    # bucket width 2/g over the typical projected 10-th NN distance |x-y|/sqrt(d)
                    "bucket_over_projected_nn10": float((2.0 / g) / (np.median(nn10) / np.sqrt(D.shape[1]))),
                    "granularity_rule": label,
                    "granularity": float(g),
                    "recall@1": recall(res.sq_dist, true_sq, 1),
                    "recall@10": recall(res.sq_dist, true_sq, K),
                    "mean_evaluations": float(np.mean(res.evaluations)),
                    "qps": len(Qs) / qt,
                }
            )
    return rows


LSH_AUTO = LSHOracle(tables=5, bits=15, granularity="auto", probe=1)


def oracle_specs(quick):
    specs = ["brute", "kdtree"]
    lsh = [
        "lsh:tables=5,bits=15,granularity=10000.0,probe=1",
        "lsh:tables=5,bits=15,granularity=100000.0,probe=0",
        "lsh:tables=5,bits=15,granularity=100000.0,probe=1",
        "lsh:tables=10,bits=15,granularity=100000.0,probe=1",
        "lsh:tables=5,bits=15,granularity=1000000.0,probe=1",
        "lsh:tables=5,bits=15,granularity=10000.0,probe=1,max_candidates=50",
        "lsh:tables=5,bits=15,granularity=30000.0,probe=1",
    ]
    faiss = ["faiss:Flat", "faiss:HNSW32;efSearch=16", "faiss:HNSW32;efSearch=64", "faiss:HNSW32;efSearch=256",
             "faiss:IVF1024,Flat;nprobe=8", "faiss:IVF1024,Flat;nprobe=32"]
    hnsw = ["hnswlib:M=16,ef_construction=200,ef=16", "hnswlib:M=16,ef_construction=200,ef=64",
            "hnswlib:M=16,ef_construction=200,ef=256"]
    if quick:
        return specs + lsh[:3] + faiss[:2] + hnsw[1:2]
    return specs + lsh + faiss + hnsw


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--dim", type=int, default=100)
    ap.add_argument("--queries", type=int, default=1000)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="fewer oracle settings")
    ap.add_argument("--out", type=Path, default=ROOT / "results" / "oracles.json")
    args = ap.parse_args(argv)

    try:
        import faiss

        faiss.omp_set_num_threads(1)
    except ImportError:
        pass
    D, Q, source = load_data(args.n, args.dim, args.queries, args.seed)
    exact_euclidean_knn(Q[:2], D[:100], K)  # compile
    truth_s, (true_ids, true_sq) = median_time(lambda: exact_euclidean_knn(Q, D, K), repeats=1, warmup=0)

    # the 10% of queries nearest the boundary (smallest 1-|q|^2), where float32 oracles struggle
    deep = np.argsort(_kernels.conformal_factor(Q))[: max(1, len(Q) // 10)]
    rows = []
    for spec in oracle_specs(args.quick):
        try:
            row = run_oracle(spec, D, Q, true_sq, args.repeats, deep)
        except ImportError as exc:
            print(f"skipping {spec}: {exc}")
            continue
        rows.append(row)
        print(f"{row['oracle']:70s} recall@10={row['recall@10']:.4f} qps={row['qps']:.1f} build={row['build_s']:.1f}s",
              flush=True)
    brute_qps = next(r["qps"] for r in rows if r["oracle"] == "brute")
    for r in rows:
        r["speedup_vs_brute"] = r["qps"] / brute_qps
    shells = shell_table(D, Q, args.repeats)

    table1 = markdown_table(rows, ["oracle", "exact", "recall@10", "recall@10_deepest10%", "qps", "speedup_vs_brute",
                             "build_s",
                             "nbytes", "mean_evaluations"])
    table2 = markdown_table(shells, ["shell", "points", "queries", "median_nn1_dist", "median_nn10_dist", "granularity_rule",
                               "granularity", "bucket_over_projected_nn10", "recall@1", "recall@10",
                               "mean_evaluations", "qps"])
    header = (f"Euclidean 10-NN, {len(D)} points x {args.dim}-D ({source}, seed {args.seed}), "
              f"{len(Q)} held-out queries, single thread, median of {args.repeats} runs. "
              f"Exact float64 explicit-difference brute force (ground truth): {len(Q) / truth_s:.1f} q/s.\n\n")
    title2 = "LSH inside shells (w = 3; T=5, m=15, probe=1; within-shell Euclidean 10-NN)"
    text = header + table1 + f"\n\n{title2}:\n\n" + table2 + "\n"
    print("\n" + text)

    args.out.parent.mkdir(parents=True, exist_ok=True)
    payload = {
        "benchmark": "oracles",
        "git_sha": git_sha(),
        "params": {"n": len(D), "dim": args.dim, "queries": len(Q), "k": K, "repeats": args.repeats,
                   "seed": args.seed, "data": source, "threads": 1},
        "machine": {"python": platform.python_version(), "numpy": np.__version__, "cpu": platform.processor(),
                    "cores": os.cpu_count(), "loadavg_at_end": os.getloadavg()},
        "ground_truth_qps": len(Q) / truth_s,
        "oracles": rows,
        "lsh_shells": shells,
    }
    tmp = args.out.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(payload, indent=2))
    os.replace(tmp, args.out)
    args.out.with_suffix(".md").write_text(text)


if __name__ == "__main__":
    main()
