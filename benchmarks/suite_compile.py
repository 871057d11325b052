"""Where the test suite's time goes to numba: compile time per kernel and per test, as a pytest plugin.

On a fresh clone (an empty numba cache) most of the suite's time is numba compiling kernels, once
per kernel and per type of its arguments. Loaded as a pytest plugin, this module listens to numba's
compile events (``numba:compile``) in the pytest process and records, per kernel, the time inside
its compilations without the kernels compiled within them (its own time), how many compilations it
had and their argument types (with the test that compiled each first); and per test, the time its compilations took. Compilations in
subprocesses the tests start (the fuzz worker, the CLI, Ray's workers) are not seen; a kernel they
compiled is loaded from the cache here.

Run the suite with it, then report (``--compare``: a second file, e.g. of the library before a
change, side by side)::

    NUMBA_CACHE_DIR=$(mktemp -d) PYTHONPATH=benchmarks python -m pytest -p suite_compile -p no:cacheprovider
    python benchmarks/suite_compile.py results/suite_compile.json --top 30
    python benchmarks/suite_compile.py results/suite_compile.json --compare results/suite_compile_before.json

``SUITE_COMPILE_OUT`` names the file the plugin writes (default ``results/suite_compile.json``).
A kernel with several compilations of the same dtypes differs in another part of its types: the
report abbreviates each array argument as dtype, dimensions, layout and ``R`` (read-only) or ``W``.
"""

from __future__ import annotations

import argparse
import collections
import json
import os
import re
import time
from pathlib import Path

OUT_DEFAULT = Path(__file__).resolve().parent.parent / "results" / "suite_compile.json"

_stack: list = []
_own: collections.Counter = collections.Counter()
_count: collections.Counter = collections.Counter()
_signatures: dict = collections.defaultdict(dict)  # kernel -> {argument types: the test that compiled them}
_per_test: collections.Counter = collections.Counter()
_current = ["<collection>"]


def _listen():
    from numba.core import event

    class Compiles(event.Listener):
        def on_start(self, ev):
            _stack.append([time.perf_counter(), 0.0])

        def on_end(self, ev):
            t0, inner = _stack.pop()
            spent = time.perf_counter() - t0
            fn = getattr(ev.data.get("dispatcher"), "py_func", None)
            name = f"{fn.__module__}.{fn.__qualname__}" if fn is not None else str(ev.data.get("dispatcher"))
            _own[name] += spent - inner
            _count[name] += 1
            _signatures[name].setdefault(str(ev.data.get("args")), _current[0])
            if _stack:
                _stack[-1][1] += spent
            else:
                _per_test[_current[0]] += spent

    event.register("numba:compile", Compiles())


def pytest_configure(config):
    _listen()


def pytest_runtest_logstart(nodeid, location):
    _current[0] = nodeid


def pytest_runtest_logfinish(nodeid, location):
    _current[0] = "<between tests>"


def pytest_sessionfinish(session, exitstatus):
    out = Path(os.environ.get("SUITE_COMPILE_OUT", OUT_DEFAULT))
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"own_s": _own, "compilations": _count,
                               "signatures": _signatures,
                               "per_test_s": _per_test}, indent=1))


def abbreviated(signature):
    """``Array(float64, 2, 'C', True, aligned=True)`` as ``float64 2C R`` (``W``: writable)."""
    return re.sub(r"Array\((\w+), (\d), '(\w)', (True|False), aligned=True\)",
                  lambda m: f"{m.group(1)} {m.group(2)}{m.group(3)} {'R' if m.group(4) == 'True' else 'W'}", signature)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("file", help="the plugin's JSON file")
    ap.add_argument("--compare", help="a second file (e.g. the library before a change): its figures beside")
    ap.add_argument("--top", type=int, default=25, help="kernels and tests listed, longest first")
    ap.add_argument("--signatures", action="store_true", help="list every compiled signature of the kernels shown")
    args = ap.parse_args(argv)
    now = json.loads(Path(args.file).read_text())
    then = json.loads(Path(args.compare).read_text()) if args.compare else None
    total = sum(now["own_s"].values())
    print(f"compiling in the pytest process: {total:.1f} s in {sum(now['compilations'].values())} compilations"
          + (f" (compared: {sum(then['own_s'].values()):.1f} s in {sum(then['compilations'].values())})"
             if then else ""))
    print()
    head = "| kernel | own seconds | compilations |" + (" compared: seconds | compilations |" if then else "")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    kernels = sorted(now["own_s"], key=lambda k: -now["own_s"][k])[:args.top]
    for k in kernels:
        row = f"| `{k}` | {now['own_s'][k]:.1f} | {now['compilations'][k]} |"
        if then:
            row += f" {then['own_s'].get(k, 0.0):.1f} | {then['compilations'].get(k, 0)} |"
        print(row)
        if args.signatures:
            for s, test in now["signatures"][k].items():
                print(f"|   {abbreviated(s)}, first in `{test}` | | |" + (" | |" if then else ""))
    print()
    print("| test | compiling, seconds |")
    print("|---|---|")
    for t in sorted(now["per_test_s"], key=lambda t: -now["per_test_s"][t])[:args.top]:
        print(f"| `{t}` | {now['per_test_s'][t]:.1f} |")


if __name__ == "__main__":
    main()
