"""Batch and one-query search time of hypann's algorithms per data family, with a fingerprint of the answers.

For each family of :mod:`hypann.datasets.families` and dimension: ``--n`` base
points and ``--queries`` held-out queries (same generator), k = 10, one numba
thread; for each algorithm of ``--algorithms`` (default ``hkdtree,graph``, at
their defaults) built by ``HyperbolicIndex(..., n_jobs=1, random_state=0)`` with ``--storage``
(default ``float64``):

* ``batch_us``: the median over ``--repeats`` of one call with every query,
  per query;
* ``single_us``: the median of ``--single`` calls with one query each
  (``search(Q[i:i+1], 10)``, the one-query path);
* ``answer``: the first 8 hex digits of a SHA-1 of the batch answer's ids and
  distances.

Meant to compare two versions of the library on the same machine: run it from
each checkout (``PYTHONPATH=src``), alternately; the fingerprints say whether
the answers are the same bit for bit. Prints a markdown table and writes
``results/<--output>.json`` (default ``search_speed``).

Usage::

    NUMBA_NUM_THREADS=1 python benchmarks/search_speed.py --dims 10,100
    NUMBA_NUM_THREADS=1 python benchmarks/search_speed.py --families gaussian_mixture --dims 10 --output mixture
"""

from __future__ import annotations

import argparse
import hashlib
import time

import numba
import numpy as np

import hypann
from _common import family_arguments, family_cases, family_split, markdown_table, median_time, write_json

K = 10


def answer_fingerprint(result) -> str:
    """First 8 hex digits of the SHA-1 of a result's ids and distances."""
    data = np.ascontiguousarray(result.indices).tobytes() + np.ascontiguousarray(result.distances).tobytes()
    return hashlib.sha1(data).hexdigest()[:8]


def run_case(name, dim, algorithm, args):
    n, X, _, Q, _ = family_split(name, dim, args)
    index = hypann.HyperbolicIndex(algorithm=algorithm, n_jobs=1, random_state=0, storage=args.storage).build(X)
    batch_s, result = median_time(lambda: index.search(Q, K), repeats=args.repeats, warmup=1)  # warm: compile
    single = []
    for i in range(min(args.single, len(Q))):
        q = Q[i:i + 1]
        t0 = time.perf_counter()
        index.search(q, K)
        single.append(time.perf_counter() - t0)
    return {"family": name, "dim": dim, "n": n, "algorithm": algorithm, "storage": args.storage,
            "batch_us": 1e6 * batch_s / len(Q), "single_us": 1e6 * float(np.median(single)),
            "answer": answer_fingerprint(result)}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    family_arguments(ap, n=100_000, queries=1_000, brute_queries=0, repeats=3)
    ap.add_argument("--dims", default="10,100")
    ap.add_argument("--algorithms", default="hkdtree,graph")
    ap.add_argument("--single", type=int, default=300, help="one-query calls timed per case")
    ap.add_argument("--storage", default="float64", choices=("float64", "float32"),
                    help="the indexes' storage (HyperbolicIndex(storage=...))")
    ap.add_argument("--output", default="search_speed")
    args = ap.parse_args(argv)
    numba.set_num_threads(1)
    rows = []
    t0 = time.perf_counter()
    for name, dim in family_cases(args.families, args.dims):
        for algorithm in args.algorithms.split(","):
            row = run_case(name, dim, algorithm, args)
            print(f"{name:18s} {dim:3d}-D {algorithm:8s} batch {row['batch_us']:9.2f} us/q  single "
                  f"{row['single_us']:9.2f} us  answer {row['answer']}", flush=True)
            rows.append(row)
    print(markdown_table(rows, ["family", "dim", "n", "algorithm", "storage", "batch_us", "single_us", "answer"]))
    write_json(args.output, {"args": vars(args), "seconds": time.perf_counter() - t0, "rows": rows})


if __name__ == "__main__":
    main()
