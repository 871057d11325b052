"""Shared benchmark plumbing: timing by median, JSON with parameters and git SHA, tables."""

from __future__ import annotations

import json
import os
import platform
import subprocess
import sys

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, ROOT)

from _proc import status_bytes  # noqa: E402
from hypann.eval.timing import median_time  # noqa: E402  (re-exported for the scripts)

__all__ = ["ROOT", "WORDNET_POINTS", "PeakSampler", "boundary_rows", "family_arguments", "family_cases", "family_split", "git_sha",
           "machine", "markdown_table", "median_time", "status_bytes", "write_json"]


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


#: Points of the WordNet noun embeddings (``hypann.datasets.families.wordnet_nouns``): base + queries at most.
WORDNET_POINTS = 82_115


def family_cases(families, dims):
    """``(family, dim)`` for every family of the comma-separated ``families`` and every dimension of
    ``dims`` in which it exists (WordNet only in its own dimensions), dimension by dimension. An unknown
    family name ends the script with a one-line message naming it and the known ones."""
    from hypann.datasets.families import FAMILIES

    names = list(filter(None, families.split(",")))
    unknown = [name for name in names if name not in FAMILIES]
    if unknown:
        raise SystemExit(f"unknown families {', '.join(unknown)}; known: {', '.join(sorted(FAMILIES))}")
    for dim in (int(d) for d in dims.split(",")):
        for name in names:
            if FAMILIES[name].dims is None or dim in FAMILIES[name].dims:
                yield name, dim


def family_split(name, dim, args):
    """``(n, X, cx, Q, cq)``: ``--n`` base points and ``--queries`` held-out queries of one family
    (WordNet: at most 82,115 in all), with their conformal factors (float64)."""
    from hypann.datasets.base import holdout_split
    from hypann.datasets.families import make_family
    from hypann.geometry._kernels import conformal_factor

    n = min(args.n, WORDNET_POINTS - args.queries) if name == "wordnet_nouns" else args.n
    points = make_family(name, n + args.queries, dim, seed=args.seed)
    base_ids, query_ids = holdout_split(len(points), args.queries, seed=args.seed)
    X, Q = np.ascontiguousarray(points[base_ids]), np.ascontiguousarray(points[query_ids])
    return n, X, conformal_factor(X), Q, conformal_factor(Q)


#: Share of the queries, nearest the boundary, over which the boundary recall is taken (issue 11).
BOUNDARY_FRACTION = 0.1


def boundary_rows(q_conformal):
    """The rows of the :data:`BOUNDARY_FRACTION` of the queries (at least one) with the smallest ``1-|q|^2``
    (``q_conformal``), the boundary recall's queries."""
    n_boundary = max(1, int(round(BOUNDARY_FRACTION * len(q_conformal))))
    return np.argsort(q_conformal, kind="stable")[:n_boundary]


def markdown_table(rows, columns) -> str:
    def fmt(v):
        if isinstance(v, (float, np.floating)):
            return f"{v:.4g}"
        return "" if v is None else str(v)

    lines = ["| " + " | ".join(columns) + " |", "|" + "---|" * len(columns)]
    for r in rows:
        lines.append("| " + " | ".join(fmt(r.get(c, "")) for c in columns) + " |")
    return "\n".join(lines)


def report_rows(name, rows, columns, params):
    """Print the markdown table of ``rows`` (``columns``), write ``results/<name>.json`` with ``params``, the
    rows and the table, and print its path."""
    table = markdown_table(rows, columns)
    print(table)
    path = write_json(name, {"params": params, "rows": rows, "table": table})
    print(f"wrote {path}")


class PeakSampler:
    """Largest ``field`` of ``/proc/<this process>/status`` (``"RssAnon"``, ``"VmRSS"``; bytes) while the block runs.

    Sampled every ``interval`` seconds (default 2 ms) by a separate process
    (``_proc.py``), which has taken its first sample when the block starts: a
    thread of this process could not sample while a numba kernel runs, since
    the kernels hold the GIL, and the peak of a build is inside its kernels.
    ``ru_maxrss`` cannot be reset, and work before the block (generating the
    data) may already have peaked higher than the block itself. Linux only.
    """

    def __init__(self, field="VmRSS", interval=0.002):
        self.field = field
        self.interval = interval

    def __enter__(self):
        self.peak = status_bytes(self.field)
        self._proc = subprocess.Popen(
            [sys.executable, os.path.join(HERE, "_proc.py"), str(os.getpid()), self.field, str(self.interval)],
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self._proc.stdout.readline()  # "ready": the first sample is taken before the block starts
        return self

    def __exit__(self, *exc):
        out, _ = self._proc.communicate("")
        self.peak = max(self.peak, int(out.strip() or 0), status_bytes(self.field))
