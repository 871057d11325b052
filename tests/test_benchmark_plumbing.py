"""The memory-peak sampler of ``benchmarks/_common.py``, on which the docs' build-peak figures rest."""

import os
import sys

import numba
import numpy as np
import pytest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks"))

from _common import PeakSampler  # noqa: E402

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/status"), reason="PeakSampler reads /proc (Linux)")

MB = 1 << 20


@numba.njit
def _touch_and_free(n_bytes, seconds):
    """Allocate and write ``n_bytes``, keep them for about ``seconds`` while holding the GIL, then free them."""
    a = np.ones(n_bytes // 8)
    total = 0.0
    t = 0
    # busy work long enough for the sampler to look (no clock in nopython mode: a fixed amount of work)
    while t < seconds * 2e8:
        total += a[t % a.shape[0]]
        t += 1
    return total


def test_peak_inside_a_kernel_that_holds_the_gil_is_seen():
    """A 200 MB array that lives only inside a numba call (GIL held) must show up in the peak.

    A sampling thread in the measuring process could not run during that call and would
    miss it; the sampler's separate process does not.
    """
    _touch_and_free(8 * 1024, 0.0)  # compile first
    with PeakSampler("RssAnon") as sampler:
        before = sampler.peak
        _touch_and_free(200 * MB, 0.5)
    assert sampler.peak - before >= 150 * MB


def test_nothing_allocated_gives_a_peak_near_the_start():
    with PeakSampler("VmRSS") as sampler:
        before = sampler.peak
    assert 0 <= sampler.peak - before < 50 * MB
