"""Wall-clock timing for benchmarks and the reproduction: the median of repeated runs."""

from __future__ import annotations

import time

import numpy as np

__all__ = ["median_time"]


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
