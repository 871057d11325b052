"""Thread counts of numba kernels: ``numba_threads`` and ``threads_for`` set them per call and restore them;
handing freed heap back between build phases; the one-line notice of a first compile."""

import os
import platform
import subprocess
import sys
import textwrap
from pathlib import Path

import numba
import numpy as np
import pytest

import hypann
from hypann._runtime import numba_threads, release_freed_heap, threads_for
from tests.conftest import ball_points

SRC = Path(__file__).resolve().parents[1] / "src"


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


def test_the_first_compile_notice_asks_about_kernels_the_build_runs():
    # a graph build never runs the kd-tree's kernels: asking about those said "compiling" on every run.
    # A fresh interpreter builds with each algorithm and reports which of its first_use_kernels ran.
    script = textwrap.dedent(
        """
        import sys
        import numpy as np
        import hypann
        from hypann import index as index_module
        asked = []
        index_module.notice_first_compile = lambda *kernels: asked.append(kernels)
        X = 0.5 * np.random.default_rng(0).uniform(-1, 1, (300, 3)) / np.sqrt(3)
        index = hypann.HyperbolicIndex(algorithm=sys.argv[1], n_jobs=int(sys.argv[2])).build(X)
        kernels = type(index.algorithm_).first_use_kernels
        print(asked == [kernels], len(kernels), all(len(kernel.signatures) > 0 for kernel in kernels))
        """
    )
    for algorithm, expected in [("auto", "True 1 True"), ("hkdtree", "True 1 True"), ("graph", "True 2 True"),
                                ("vamana", "True 2 True"), ("recentering", "True 0 True")]:
        # on one thread too: a kernel that only runs on several would be asked about (and announced) forever
        for n_jobs in (1, 2):
            proc = subprocess.run([sys.executable, "-c", script, algorithm, str(n_jobs)], capture_output=True,
                                  text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(SRC)})
            assert proc.returncode == 0, proc.stderr[-2000:]
            assert proc.stdout.strip() == expected, (algorithm, n_jobs, proc.stdout)


def test_the_first_compile_notice_is_logged_once_for_a_kernel_without_a_cache(monkeypatch):
    from hypann import _runtime

    X = ball_points(np.random.default_rng(0), 300, 3)
    hypann.HyperbolicIndex(algorithm="graph").build(X)  # compiles and caches its kernels, or loads them
    logged = []
    monkeypatch.setattr(_runtime, "_NOTICE_SHOWN", False)
    monkeypatch.setattr(_runtime.log, "warning", logged.append)
    hypann.HyperbolicIndex(algorithm="graph").build(X)
    assert logged == []  # cached now: no notice
    fresh = numba.njit(cache=True)(lambda x: x + 1)  # never compiled: no cache index yet
    _runtime.notice_first_compile(*hypann.graph.knn_graph.HyperbolicGraphIndex.first_use_kernels, fresh)
    _runtime.notice_first_compile(fresh)
    assert len(logged) == 1 and "compiling numba kernels" in logged[0]


def test_a_load_gives_no_first_compile_notice(monkeypatch, tmp_path):
    # a load runs none of the build's kernels: asking about them would print the line on every load
    from hypann import index as index_module

    hypann.HyperbolicIndex(algorithm="graph").build(ball_points(np.random.default_rng(0), 300, 3)).save(tmp_path / "g")
    asked = []
    monkeypatch.setattr(index_module, "notice_first_compile", lambda *kernels: asked.append(kernels))
    hypann.load(tmp_path / "g")
    assert asked == []
