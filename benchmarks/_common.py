"""Shared benchmark plumbing: timing by median, JSON with parameters and git SHA, tables."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)


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


def median_time(fn, *, repeats=3, warmup=1):
    """Run ``fn`` ``warmup`` times untimed, then ``repeats`` times; return (median seconds, last result)."""
    out = None
    for _ in range(warmup):
        out = fn()
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return float(np.median(times)), out


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


def markdown_table(rows, columns) -> str:
    def fmt(v):
        if isinstance(v, (float, np.floating)):
            return f"{v:.4g}"
        return str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def recall_by_distance(found_d, true_d, k):
    """Mean recall@k counted by distance threshold (ties near the boundary do not matter)."""
    thresh = true_d[:, k - 1 : k] * (1 + 1e-9) + 1e-300
    return float(np.mean(np.sum(found_d[:, :k] <= thresh, axis=1) / k))
