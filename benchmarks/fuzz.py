"""Fuzz every algorithm/oracle pair on thousands of random adversarial cases.

Each case draws a pair (cycling through all of them), a generator (uniform in the Euclidean
or the hyperbolic ball, boundary-heavy, tangent-space clusters, duplicates, all-identical,
lines, subspaces, lattices and the two shapes that once crashed the kd-tree), ``n`` from 1 to ``--max-n``,
``d`` from 2 to 128, ``k`` from 1 to ``n``, the pair's settings and sometimes a sample
budget (see ``tests/fuzz_data.py``). Cases run one after another in worker subprocesses
(``tests/fuzz_worker.py``): a segfault or abort counts as a crash of its case and a fresh
worker takes the next one; a case running longer than ``--timeout`` counts as a timeout.

Checks (float64 brute force from explicit differences, independent of the search code):
exact pairs must return the true ``k`` smallest distances (ids may swap among ties);
every pair must return ``k`` distinct ids in ``[0, n)`` with their true distances,
ascending. An exception on these valid inputs is an error.

Usage::

    python benchmarks/fuzz.py                       # 10,000 cases, n up to 50,000
    python benchmarks/fuzz.py --cases 2000 --max-n 20000 --json results/fuzz.json
    python benchmarks/fuzz.py --pairs hkdtree,vamana --cases 500

Prints a table per pair (cases, crashes, timeouts, errors, wrong exact answers, invalid
outputs) and every failing case in a form that reproduces it, writes JSON (default
``results/fuzz.json``) and exits with status 1 if any case failed in any way.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import sys
import threading
import time

from _common import ROOT, git_sha, machine, markdown_table

sys.path.insert(0, ROOT)  # the fuzz cases live in tests/

from tests.fuzz_data import GENERATORS, PAIR_NAMES, PAIRS, describe, sample_cases  # noqa: E402
from tests.fuzz_worker import CaseRunner  # noqa: E402

COLUMNS = ["pair", "exact", "cases", "crashes", "timeouts", "errors", "wrong exact", "invalid", "seconds"]
STATUS_COLUMN = {"crash": "crashes", "timeout": "timeouts", "error": "errors", "wrong": "wrong exact",
                 "invalid": "invalid"}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--cases", type=int, default=10_000, help="number of random cases (default 10000)")
    p.add_argument("--seed", type=int, default=0, help="seed of the case sampler (default 0)")
    p.add_argument("--max-n", type=int, default=50_000, help="largest number of points (default 50000)")
    p.add_argument("--max-d", type=int, default=128, help="largest dimension (default 128)")
    p.add_argument("--max-k", type=int, default=2000, help="largest k (default 2000; k = n only up to this)")
    p.add_argument("--large-batches", type=float, default=0.05,
                   help="share of cases with a batch of 512-575 queries, searched in the structure's order "
                        "(default 0.05)")
    p.add_argument("--pairs", default=None, help=f"comma-separated subset of the pairs (default all {len(PAIR_NAMES)})")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds per case before it is a hang (default 600)")
    p.add_argument("--workers", type=int, default=1, help="worker subprocesses in parallel (default 1)")
    p.add_argument("--json", default=os.path.join(ROOT, "results", "fuzz.json"), help="JSON output path")
    args = p.parse_args(argv)
    for name in ("cases", "max_n", "max_d", "max_k", "workers"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}")
    if args.max_d < 2:
        p.error(f"--max-d must be >= 2, got {args.max_d}")
    if not 0.0 <= args.large_batches <= 1.0:
        p.error(f"--large-batches must be in [0, 1], got {args.large_batches}")
    if args.pairs is not None:
        unknown = sorted(set(args.pairs.split(",")) - set(PAIR_NAMES))
        if unknown:
            p.error(f"unknown pairs {unknown}; expected some of {PAIR_NAMES}")
    return args


def run_all(cases, *, workers, timeout):
    """Results of ``cases`` (same order), run by ``workers`` threads each driving one worker process."""
    results = [None] * len(cases)
    todo = iter(range(len(cases)))
    lock = threading.Lock()
    done = [0]
    start = time.perf_counter()

    def drive():
        with CaseRunner(timeout=timeout) as runner:
            while True:
                with lock:
                    i = next(todo, None)
                if i is None:
                    return
                results[i] = runner.run(cases[i])
                with lock:
                    done[0] += 1
                    if results[i]["status"] != "ok":
                        print(f"  {results[i]['status']}: {describe(cases[i])}\n      {results[i]['problems'][0][:300]}",
                              flush=True)
                    if done[0] % 100 == 0:
                        print(f"{done[0]}/{len(cases)} cases, {time.perf_counter() - start:.0f} s", flush=True)

    threads = [threading.Thread(target=drive) for _ in range(workers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results


def summarize(cases, results):
    rows = {}
    for case, res in zip(cases, results):
        row = rows.setdefault(case["pair"], {"pair": case["pair"], "exact": PAIRS[case["pair"]][3], "cases": 0,
                                             **{c: 0 for c in STATUS_COLUMN.values()}, "seconds": 0.0})
        row["cases"] += 1
        if res["status"] in STATUS_COLUMN:
            row[STATUS_COLUMN[res["status"]]] += 1
        if res["seconds"] == res["seconds"]:  # not NaN (crashes)
            row["seconds"] += res["seconds"]
    ordered = [rows[p] for p in PAIR_NAMES if p in rows]
    total = {"pair": "total", "exact": None, "cases": len(cases),
             **{c: sum(r[c] for r in ordered) for c in STATUS_COLUMN.values()},
             "seconds": sum(r["seconds"] for r in ordered)}
    return ordered, total


def main(argv=None):
    args = parse_args(argv)
    limits = {"max_n": args.max_n, "max_d": args.max_d, "max_k": args.max_k, "large_batches": args.large_batches}
    pairs = None if args.pairs is None else args.pairs.split(",")
    cases = sample_cases(args.seed, args.cases, pairs=pairs, **limits)
    print(f"{len(cases)} cases over {len({c['pair'] for c in cases})} pairs and {len(GENERATORS)} generators, "
          f"n <= {args.max_n}, d <= {args.max_d}, seed {args.seed}", flush=True)
    start = time.perf_counter()
    results = run_all(cases, workers=args.workers, timeout=args.timeout)
    wall = time.perf_counter() - start
    rows, total = summarize(cases, results)
    print()
    print(markdown_table(rows + [total], COLUMNS))
    failures = [{"case": c, "result": r} for c, r in zip(cases, results) if r["status"] != "ok"]
    by_status = collections.Counter(f["result"]["status"] for f in failures)
    print(f"\n{len(cases)} cases in {wall:.0f} s: {len(failures)} failed {dict(by_status)}")
    payload = {
        "benchmark": "fuzz", "git_sha": git_sha(), "machine": machine(),
        "params": {**vars(args), "json": None}, "wall_seconds": wall,
        "pairs": rows, "total": total, "failures": failures,
    }
    os.makedirs(os.path.dirname(os.path.abspath(args.json)), exist_ok=True)
    tmp = args.json + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(payload, fh, indent=1)
    os.replace(tmp, args.json)
    print(f"wrote {args.json}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
