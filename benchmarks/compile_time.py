"""First-use time of hypann: how long numba compiles the kernels of a build and a search on a cold cache.

numba compiles a kernel on its first call and caches the machine code on disk (``cache=True``), so
a new installation pays this once. For each workload of ``--workloads`` a fresh subprocess with an
empty ``NUMBA_CACHE_DIR`` builds an index of 2,000 points of 16 dimensions (``--dim``), searches a
batch and one query a call, and reports:

* ``seconds``: the workload's wall time (nearly all of it compilation);
* ``compile_s``: the time inside numba's compilations (its ``numba:compile`` events), and the
  kernels that took longest (their own time, without the kernels they call);
* ``reload_s`` (with ``--reload``): the time inside numba's compilations when the index, saved to a
  file and loaded again memory-mapped (``hypann.load(path, mmap=True)``: read-only arrays), searches
  the same batch and query. Kernels that take a loaded structure's arrays as a type of their own
  compile again here;
* ``literal``: how many compilations of hypann's kernels had an argument of a literal type
  (``Literal[int](0)``), and of which kernels: a constant passed to a kernel from another kernel
  compiles it once more for that constant. The library passes typed values (``np.int64(0)``)
  instead; this count should be 0.

Prints a markdown table and writes ``results/<--output>.json`` (default ``compile_time``).

Usage::

    python benchmarks/compile_time.py
    python benchmarks/compile_time.py --workloads graph-float32 --top 20
    python benchmarks/compile_time.py --workloads hkdtree,graph --reload
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

from _common import ROOT, markdown_table, write_json

#: workload name -> HyperbolicIndex keywords
WORKLOADS = {
    "auto": {},
    "hkdtree": {"algorithm": "hkdtree"},
    "graph": {"algorithm": "graph"},
    "graph-float32": {"algorithm": "graph", "storage": "float32"},
    "graph-exact": {"algorithm": "graph", "exact": True},
}

#: The child process: registers a listener of numba's compile events, runs the workload, prints JSON.
CHILD = r"""
import collections, json, sys, time
from numba.core import event

stack, own, literal = [], collections.Counter(), collections.Counter()

class Compiles(event.Listener):
    def on_start(self, ev):
        fn = ev.data["dispatcher"].py_func
        name = f"{fn.__module__}.{fn.__qualname__}"
        stack.append([name, time.perf_counter(), 0.0])
        if "Literal[" in str(ev.data.get("args")) and name.startswith("hypann."):
            literal[name] += 1

    def on_end(self, ev):
        name, t0, inner = stack.pop()
        spent = time.perf_counter() - t0
        own[name] += spent - inner
        if stack:
            stack[-1][2] += spent

event.register("numba:compile", Compiles())
import numpy as np, hypann

params, dim, reload = json.loads(sys.argv[1]), int(sys.argv[2]), sys.argv[3] == "1"
rng = np.random.default_rng(0)
X = rng.normal(size=(2000, dim))
X *= 0.9 / np.linalg.norm(X, axis=1, keepdims=True).max()
t0 = time.perf_counter()
index = hypann.HyperbolicIndex(random_state=0, verbose=False, **params).build(X)
index.search(X[:600], k=10)
index.search(X[:1], k=10)
seconds = time.perf_counter() - t0
first = collections.Counter(own)  # the build's and the searches' compilations
reload_s, reload_kernels = None, []
if reload:
    import os, tempfile
    with tempfile.TemporaryDirectory() as tmp:
        index.save(os.path.join(tmp, "index.hypann"))
        loaded = hypann.load(os.path.join(tmp, "index.hypann"), mmap=True)
        loaded.search(X[:600], k=10)
        loaded.search(X[:1], k=10)
        del loaded
    again = own - first
    reload_s, reload_kernels = sum(again.values()), again.most_common()
print(json.dumps({"seconds": seconds, "compile_s": sum(first.values()), "literal": sum(literal.values()),
                  "literal_kernels": sorted(literal), "kernels": first.most_common(), "reload_s": reload_s,
                  "reload_kernels": reload_kernels}))
"""


def run_workload(name, dim, reload=False):
    """One workload in a fresh process with an empty numba cache; its measurements."""
    with tempfile.TemporaryDirectory() as cache:
        env = {**os.environ, "NUMBA_CACHE_DIR": cache}
        out = subprocess.run([sys.executable, "-c", CHILD, json.dumps(WORKLOADS[name]), str(dim), str(int(reload))],
                             cwd=ROOT, env=env, capture_output=True, text=True, check=True)
    return {"workload": name, "dim": dim, **json.loads(out.stdout.strip().splitlines()[-1])}


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--dim", type=int, default=16)
    ap.add_argument("--top", type=int, default=5, help="kernels listed per workload, longest first")
    ap.add_argument("--reload", action="store_true",
                    help="then save the index, load it memory-mapped and search again (reload_s)")
    ap.add_argument("--output", default="compile_time")
    args = ap.parse_args(argv)
    rows = []
    for name in args.workloads.split(","):
        if name not in WORKLOADS:
            ap.error(f"unknown workload {name!r}; known: {', '.join(WORKLOADS)}")
        t0 = time.perf_counter()
        row = run_workload(name, args.dim, args.reload)
        rows.append(row)
        top = ", ".join(f"{k.rsplit('.', 1)[-1]} {s:.1f}" for k, s in row["kernels"][:args.top])
        print(f"{name:14s} {row['seconds']:7.1f} s  compiling {row['compile_s']:7.1f} s  literal {row['literal']}"
              f"  ({time.perf_counter() - t0:.0f} s with start-up)  longest: {top}", flush=True)
        if args.reload:
            again = ", ".join(f"{k.rsplit('.', 1)[-1]} {s:.1f}" for k, s in row["reload_kernels"][:args.top])
            print(f"{'':14s} loaded memory-mapped: compiling {row['reload_s']:.1f} s  {again}", flush=True)
        if row["literal_kernels"]:
            print(f"{'':14s} literal arguments: {', '.join(row['literal_kernels'])}", flush=True)
    print(markdown_table(rows, ["workload", "dim", "seconds", "compile_s", *(["reload_s"] if args.reload else []),
                                "literal"]))
    write_json(args.output, {"dim": args.dim, "rows": rows})


if __name__ == "__main__":
    main()
