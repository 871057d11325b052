"""``hypann search`` at several ``--batch-size`` values: the whole command, as a user runs it.

For each family of :mod:`hypann.datasets.families` and dimension, ``--n`` base
points and ``--queries`` held-out queries (``_common.family_split``) are
written as ``.npy`` files to a temporary folder; ``hypann build`` indexes the
base points once with the default algorithm (``--build-threads``), and
``hypann search ... -k 10 --threads T --batch-size B -o out.npz`` runs for
every ``B`` of ``--batch-sizes``, round-robin over ``--repeats`` passes. Each
run is a subprocess timed by wall clock (loading the index and the queries
included); the median per batch size is reported, with the speed-up of each
over the first. Every batch size must write the same ids and distances.

A batch of at least 512 queries and one per 128 indexed points is searched in
the index's order (``hypann._runtime.searched_in_order``): on a large index
small batches miss it.

Prints a markdown table and writes ``results/cli_batch_size_n<N>_d<dims>.json``.

Usage::

    python benchmarks/cli_batch_size.py            # 1,000,000 points, 10-D, tree and mixture
    python benchmarks/cli_batch_size.py --n 100000 --queries 20000 --batch-sizes 1000,10000,20000
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

import numpy as np

from _common import family_arguments, family_cases, family_split, markdown_table, write_json

K = 10


def hypann_command(*args):
    """The ``hypann`` command line with this interpreter (the library on its ``sys.path``)."""
    return [sys.executable, "-m", "hypann.apps.cli", *map(str, args)]


def timed_run(argv, env):
    """Wall-clock seconds of one subprocess; raises with its stderr if it fails."""
    t = time.perf_counter()
    proc = subprocess.run(argv, env=env, capture_output=True, text=True)
    seconds = time.perf_counter() - t
    if proc.returncode != 0:
        raise RuntimeError(f"{' '.join(argv)} failed ({proc.returncode}): {proc.stderr.strip()}")
    return seconds


def run_case(name, dim, args, folder, env):
    n, X, _, Q, _ = family_split(name, dim, args)
    points, queries, index = (os.path.join(folder, f"{name}_{dim}{end}") for end in ("_X.npy", "_Q.npy", ".hypann"))
    np.save(points, X)
    np.save(queries, Q)
    del X, Q
    build_s = timed_run(hypann_command("build", points, "-o", index, "--threads", args.build_threads), env)
    times = {b: [] for b in args.batch_list}
    answers = {}
    for _ in range(args.repeats):
        for b in args.batch_list:
            out = os.path.join(folder, f"out_{b}.npz")
            times[b].append(timed_run(hypann_command("search", index, queries, "-k", K, "--threads", args.threads,
                                                     "--batch-size", b, "-o", out), env))
            with np.load(out) as z:
                answers[b] = (z["indices"], z["distances"])
    first = args.batch_list[0]
    for b in args.batch_list[1:]:
        if not all(np.array_equal(x, y) for x, y in zip(answers[first], answers[b])):
            raise AssertionError(f"{name} {dim}-D: --batch-size {b} answers differently from {first}")
    rows = []
    for b in args.batch_list:
        median = float(np.median(times[b]))
        row = {"family": name, "dim": dim, "n": n, "queries": args.queries, "batch_size": b, "median_s": median,
               "speedup_vs_first": float(np.median(times[first])) / median, "runs_s": times[b], "build_s": build_s}
        print(f"{name:18s} {dim:3d}-D n={n} --batch-size {b:7d}: median {median:8.2f} s "
              f"(runs {', '.join(f'{t:.2f}' for t in times[b])}) = {row['speedup_vs_first']:.2f}x", flush=True)
        rows.append(row)
    for path in (points, queries, index):
        os.remove(path)
    return rows


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    family_arguments(ap, n=1_000_000, queries=100_000, brute_queries=0, repeats=3)
    ap.set_defaults(families="hierarchical_tree,gaussian_mixture")
    ap.add_argument("--dims", default="10")
    ap.add_argument("--batch-sizes", default="1000,10000", help="values of --batch-size, comma-separated")
    ap.add_argument("--threads", type=int, default=1, help="--threads of hypann search")
    ap.add_argument("--build-threads", type=int, default=2, help="--threads of hypann build")
    args = ap.parse_args(argv)
    args.batch_list = [int(b) for b in args.batch_sizes.split(",") if b]
    env = dict(os.environ)
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    rows = []
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="hypann_cli_batch_") as folder:
        for name, dim in family_cases(args.families, args.dims):
            rows += run_case(name, dim, args, folder, env)
    print(markdown_table(rows, ["family", "dim", "n", "queries", "batch_size", "median_s", "speedup_vs_first"]))
    write_json(f"cli_batch_size_n{args.n}_d{args.dims.replace(',', '-')}",
               {"args": vars(args), "seconds": time.perf_counter() - t0, "rows": rows})


if __name__ == "__main__":
    main()
