"""Thread counts of numba kernels: ``numba_threads`` and ``threads_for`` set them per call and restore them;
handing freed heap back between build phases."""

import platform
import sys

import numba
import numpy as np
import pytest

import hypann
from hypann._runtime import numba_threads, release_freed_heap, threads_for
from tests.conftest import ball_points


def test_numba_threads_caps_at_the_work_and_restores():
    before = numba.get_num_threads()
    with numba_threads(None) as all_threads:
        assert all_threads == numba.config.NUMBA_NUM_THREADS == numba.get_num_threads()
    with numba_threads(None, work=1) as used:
        assert used == 1 == numba.get_num_threads()
    with numba_threads(1, work=5) as used:
        assert used == 1
    with numba_threads(None, work=0) as used:  # an empty batch still runs on one thread
        assert used == 1
    assert numba.get_num_threads() == before


def test_threads_for_never_raises_the_enclosing_count():
    before = numba.get_num_threads()
    with numba_threads(1):
        with threads_for(1000) as used:
            assert used == 1 == numba.get_num_threads()
        assert numba.get_num_threads() == 1
    with threads_for(1) as used:
        assert used == 1 == numba.get_num_threads()
    assert numba.get_num_threads() == before


def test_numba_threads_restores_after_an_error():
    before = numba.get_num_threads()
    with pytest.raises(RuntimeError, match="inside"):
        with numba_threads(None, work=1):
            raise RuntimeError("inside")
    assert numba.get_num_threads() == before


@pytest.mark.parametrize("algorithm", ["hkdtree", "graph", "brute"])
def test_one_query_per_call_equals_the_batch(algorithm):
    """Queries searched one per call (on one thread each) give the batch's answer."""
    rng = np.random.default_rng(5)
    X = ball_points(rng, 800, 6, min_conformal=1e-9)
    Q = ball_points(rng, 30, 6, min_conformal=1e-9)
    index = hypann.HyperbolicIndex(algorithm=algorithm, random_state=0, verbose=False).build(X)
    batch = index.search(Q, 5)
    for i in range(len(Q)):
        one = index.search(Q[i:i + 1], 5)
        np.testing.assert_array_equal(one.indices[0], batch.indices[i])
        np.testing.assert_array_equal(one.distances[0], batch.distances[i])


def test_release_freed_heap_trims_on_glibc_and_is_harmless_elsewhere():
    """It runs (and reports it) on glibc Linux; repeated calls, with live arrays around, change no data."""
    a = np.arange(1_000_000, dtype=np.float64)
    del a
    keep = np.arange(10_000, dtype=np.int64)
    ran = release_freed_heap()
    assert isinstance(ran, bool)
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert ran
    assert release_freed_heap() == ran
    assert np.array_equal(keep, np.arange(10_000, dtype=np.int64))
