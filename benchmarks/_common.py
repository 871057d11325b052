"""Shared benchmark plumbing: timing by median, JSON with parameters and git SHA, tables."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import threading

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from hypann.eval.timing import median_time  # noqa: E402  (re-exported for the scripts)

__all__ = ["ROOT", "PeakSampler", "git_sha", "machine", "markdown_table", "median_time", "write_json"]


def git_sha() -> str:
    try:
        return subprocess.check_output(["git", "rev-parse", "HEAD"], cwd=ROOT, text=True).strip()
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def machine() -> dict:
    return {
        "python": platform.python_version(),
        "machine": platform.machine(),
        "cpus": os.cpu_count(),
        "numpy": np.__version__,
    }


def write_json(name, payload, *, out_dir=None):
    out_dir = out_dir or os.path.join(ROOT, "results")
    os.makedirs(out_dir, exist_ok=True)
    payload = {"benchmark": name, "git_sha": git_sha(), "machine": machine(), **payload}
    path = os.path.join(out_dir, f"{name}.json")
    tmp = path + ".tmp"
    with open(tmp, "w") as fh:
        json.dump(payload, fh, indent=2, default=lambda o: o.tolist() if hasattr(o, "tolist") else str(o))
    os.replace(tmp, path)
    return path


def family_arguments(ap, *, n, queries, brute_queries, repeats, repeats_help=None):
    """The options every benchmark over the data families of ``hypann.datasets.families`` takes:
    ``--n``, ``--queries``, ``--brute-queries``, ``--families``, ``--repeats`` and ``--seed``."""
    from hypann.datasets.families import FAMILIES

    ap.add_argument("--n", type=int, default=n, help="base points per family (WordNet: at most 82,115 - queries)")
    ap.add_argument("--queries", type=int, default=queries)
    ap.add_argument("--brute-queries", type=int, default=brute_queries, help="queries timed for numpy brute force")
    ap.add_argument("--families", default=",".join(FAMILIES))
    ap.add_argument("--repeats", type=int, default=repeats, help=repeats_help)
    ap.add_argument("--seed", type=int, default=0)


def markdown_table(rows, columns) -> str:
    def fmt(v):
        if isinstance(v, (float, np.floating)):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


class PeakSampler:
    """Largest value of ``measure()`` (a memory figure in bytes) seen while the ``with`` block runs.

    Sampled every 5 ms from a thread: ``ru_maxrss`` cannot be reset, and work before the block
    (generating the data) may already have peaked higher than the block itself.
    """

    def __init__(self, measure):
        self.measure = measure

    def __enter__(self):
        self.peak = self.measure()
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def _run(self):
        while not self._stop.wait(0.005):
            self.peak = max(self.peak, self.measure())

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, self.measure())
