"""Fuzz every algorithm/oracle pair on adversarial inputs.

Cases come from ``tests/fuzz_data.py`` (generators, float64 brute-force ground truth, checks)
and run in a worker subprocess (``tests/fuzz_worker.py``), so a segfault in a numba kernel
fails the case that caused it instead of killing pytest. Exact pairs must match brute force
(ties may swap ids); every pair must return valid, distinct ids with their true distances,
ascending. ``benchmarks/fuzz.py`` runs the same cases by the thousand.

``KNOWN_FAILURES`` lists the failures that are open bugs elsewhere; a test whose only failures
match them is reported as xfail (with the cases), any other failure fails it. Delete an entry
when its bug is fixed.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from tests.fuzz_data import (
    DIMS,
    EXACT_PAIRS,
    GENERATORS,
    LARGE_BATCH,
    PAIR_NAMES,
    PAIRS,
    PARAM_CHOICES,
    check_answer,
    describe,
    distance_from_delta,
    make_case_data,
    sample_cases,
    true_deltas,
)
from tests.fuzz_worker import CaseRunner

#: (pair regex, status, problem regex, why): open bugs the fuzzer finds, reported as xfail.
KNOWN_FAILURES = [
]

#: Pairs whose code is numba kernels; their tests also run under NUMBA_BOUNDSCHECK=1 (marker ``kernels``).
KERNEL_PAIRS = ["brute", "hkdtree", "vamana", "recentering/hkdtree", "recentering/lsh"]


def _known(case, result):
    """The KNOWN_FAILURES entry explaining every problem of a failed case, or None."""
    for pair_re, status, problem_re, why in KNOWN_FAILURES:
        if (re.fullmatch(pair_re, case["pair"]) and result["status"] == status
                and all(re.search(problem_re, p) for p in result["problems"])):
            return why
    return None


def _report(failures):
    return "\n".join(f"{r['status']}: {describe(c)}\n    " + "\n    ".join(r["problems"][:3]) for c, r in failures)


def assert_cases_pass(runner, cases):
    """Run ``cases``; fail on any unexplained failure, xfail when all failures are known bugs."""
    failures = [(case, result) for case in cases if (result := runner.run(case))["status"] != "ok"]
    unknown = [(c, r) for c, r in failures if _known(c, r) is None]
    assert not unknown, f"{len(unknown)} of {len(cases)} cases failed:\n{_report(unknown)}"
    if failures:
        reasons = sorted({_known(c, r) for c, r in failures})
        pytest.xfail(f"known bugs ({'; '.join(reasons)}):\n{_report(failures)}")


@pytest.fixture(scope="module")
def runner():
    with CaseRunner(timeout=300) as r:  # 300 s without a finished compilation (tests/fuzz_worker.py)
        yield r


# ----------------------------------------------------------------------------- seeded cases
# Six small cases per pair (n <= 300, d <= 32), pairs and generators cycling evenly.
SEEDED = sample_cases(20260609, 6 * len(PAIR_NAMES), max_n=300, max_d=32, max_k=300)


@pytest.mark.parametrize(
    "pair", [pytest.param(p, marks=pytest.mark.kernels) if p in KERNEL_PAIRS else p for p in PAIR_NAMES]
)
def test_seeded_small_cases(runner, pair):
    cases = [c for c in SEEDED if c["pair"] == pair]
    assert len(cases) == 6
    assert_cases_pass(runner, cases)


def test_seeded_cases_cover_every_generator_and_tiny_sets():
    assert {c["generator"] for c in SEEDED} == set(GENERATORS)
    assert {c["n"] for c in SEEDED} >= {1, 2, 3}
    assert any(c["k"] == c["n"] > 3 for c in SEEDED)
    assert any(c["budget"] is not None for c in SEEDED)


# ----------------------------------------------------------------------------- large shapes
def _case(pair, generator, n, d, **extra):
    return {"pair": pair, "generator": generator, "n": n, "d": d, "k": 10, "m": 5, "seed": 0, "params": {},
            "budget": None, **extra}


# 20,000 points where a kd-tree of height ~11 and k up to 100 meet deep stacks and heaps:
# (20000, 20) uniform in the cube scaled by 0.9/sqrt(d) with queries X[:5] (seed 0, a former
# crash reproducer), and (20000, 16) uniform in the ball of radius 0.5. The cases with
# LARGE_BATCH + 18 queries are searched in the structure's order (hypann._runtime.searched_in_order).
LARGE = [
    _case("hkdtree", "boundary_heavy", 20000, 20, m=LARGE_BATCH + 18),
    _case("graph+exact", "tangent_clusters", 20000, 16, m=LARGE_BATCH + 18, k=30),
    _case("auto", "duplicates", 20000, 8, m=LARGE_BATCH + 18, seed=2),
    _case("hkdtree", "scaled_cube", 20000, 20, queries="first_points"),
    _case("hkdtree", "half_ball", 20000, 16),
    _case("hkdtree", "scaled_cube", 20000, 16, k=100, seed=1),
    _case("hkdtree", "boundary_heavy", 20000, 20, params={"leaf_size": 1}),
    _case("recentering/hkdtree", "half_ball", 20000, 16),
    _case("recentering/kdtree", "scaled_cube", 20000, 20, queries="first_points"),
    _case("shells+recenter/kdtree", "tangent_clusters", 20000, 16),
    _case("brute", "scaled_cube", 20000, 20),
]


@pytest.mark.kernels
@pytest.mark.parametrize("case", LARGE, ids=lambda c: f"{c['pair']}-{c['generator']}-{c['n']}x{c['d']}-k{c['k']}")
def test_large_shapes_match_brute_force(runner, case):
    assert_cases_pass(runner, [case])


# Cases `benchmarks/fuzz.py --seed 9` found failing (hnswlib refused batches in which its graph
# reached fewer than k points: all-identical points, a lattice; fixed in d60d6a8).
FORMER_FUZZ_FAILURES = [
    {"pair": "shells/hnswlib", "generator": "all_identical", "n": 8745, "d": 3, "k": 1644, "m": 6,
     "seed": 1227709380, "params": {"width": 10.0}, "budget": None, "n_jobs": 1},
    {"pair": "shells+recenter/hnswlib", "generator": "axis_lattice", "n": 12311, "d": 2, "k": 1657, "m": 4,
     "seed": 1687739592, "params": {"width": 1.5}, "budget": None, "n_jobs": 1},
]


@pytest.mark.parametrize("case", FORMER_FUZZ_FAILURES, ids=lambda c: f"{c['pair']}-{c['generator']}")
def test_former_fuzz_failures_pass(runner, case):
    pytest.importorskip("hnswlib")
    assert_cases_pass(runner, [case])


# ----------------------------------------------------------------------------- hypothesis
@st.composite
def cases(draw, pairs):
    """A random case: any generator, n in [1, 200], d <= 64, k in [1, n], settings of the pair, n_jobs."""
    pair = draw(st.sampled_from(pairs))
    n = draw(st.one_of(st.integers(1, 3), st.integers(4, 200)))
    d = draw(st.sampled_from([d for d in DIMS if d <= 64]))
    k = draw(st.one_of(st.just(1), st.just(n), st.integers(1, n)))
    choices = PARAM_CHOICES.get(PAIRS[pair][0], {})
    return {
        "pair": pair,
        "generator": draw(st.sampled_from(sorted(GENERATORS))),
        "n": n, "d": d, "k": k,
        "m": draw(st.integers(1, 6)),
        "seed": draw(st.integers(0, 2**31 - 1)),
        "params": {name: draw(st.sampled_from(values)) for name, values in choices.items()},
        "budget": draw(st.one_of(st.none(), st.integers(k, 4 * k))) if pair not in EXACT_PAIRS else None,
        "n_jobs": draw(st.sampled_from([None, 1, 2])),
    }


# No shrinking: a crash costs a worker restart per shrink step, and every case prints its seed.
# Derandomized: CI runs the same cases every time; benchmarks/fuzz.py --seed explores further.
FUZZ_SETTINGS = settings(max_examples=40, deadline=None, derandomize=True,
                         phases=[Phase.explicit, Phase.generate], suppress_health_check=[HealthCheck.too_slow])


@FUZZ_SETTINGS
@given(case=cases(EXACT_PAIRS))
def test_exact_pairs_equal_brute_force(runner, case):
    result = runner.run(case)
    assert result["status"] == "ok" or _known(case, result), _report([(case, result)])


@FUZZ_SETTINGS
@given(case=cases(PAIR_NAMES))
def test_every_pair_returns_valid_answers(runner, case):
    result = runner.run(case)
    assert result["status"] == "ok" or _known(case, result), _report([(case, result)])


# ----------------------------------------------------------------------------- the checker itself
def test_checker_catches_wrong_invalid_and_crash(runner):
    """The checks can fail: a wrong neighbour, a -1, a repeated id and a killed worker are all reported."""
    case = _case("brute", "uniform_hyperbolic_ball", 50, 3, k=3)
    X, Q = make_case_data(case)
    order = np.argsort(true_deltas(Q, X), axis=1)
    good = order[:, :3]
    dist = distance_from_delta(true_deltas(Q, X, good))
    assert check_answer(X, Q, 3, good, dist, exact=True) == []
    skipped = order[:, [0, 1, 3]]  # misses the third neighbour
    kinds = {kind for kind, _ in check_answer(X, Q, 3, skipped, distance_from_delta(true_deltas(Q, X, skipped)), exact=True)}
    assert kinds == {"wrong"}
    padded = good.copy()
    padded[:, 2] = -1
    assert any("ids outside" in msg for _, msg in check_answer(X, Q, 3, padded, dist, exact=False))
    repeated = good.copy()
    repeated[:, 2] = repeated[:, 1]
    assert any("repeated ids" in msg for _, msg in check_answer(X, Q, 3, repeated, dist, exact=False))
    assert any("reported distance" in msg for _, msg in check_answer(X, Q, 3, good, dist * (1 + 1e-6), exact=False))
    crashed = runner.run({**case, "pair": "__segfault__"})
    assert crashed["status"] == "crash"
    assert re.search(r"signal SIGSEGV", crashed["problems"][0])
    assert runner.run(case)["status"] == "ok"  # a fresh worker takes the next case


def test_timeout_counts_time_without_compiling():
    """A case that sleeps past the timeout is a timeout; one that takes as long but keeps finishing numba
    compilations (a cold cache) is not, and the lines that come together (a heartbeat, the result) are all read."""
    with CaseRunner(timeout=3.0) as r:  # each pause and its compilation within 3 s, with 1.5 s to spare
        slow = {"pair": "__slow_compiles__", "params": {"compiles": 3, "pause": 1.5}}
        assert r.run(slow)["status"] == "ok"  # 4.5 s and more: three pauses, three compilations
        hung = r.run({"pair": "__slow_compiles__", "params": {"compiles": 0, "pause": 60.0}})
        assert hung["status"] == "timeout"
        assert hung["problems"][0] == "no answer after 3 s"
        assert r.run(slow)["status"] == "ok"  # a fresh worker after the killed one
        assert r.starts == 2


# ----------------------------------------------------------------------------- the boundscheck run
@pytest.mark.kernels
@pytest.mark.skipif(os.environ.get("NUMBA_BOUNDSCHECK") != "1", reason="only in the NUMBA_BOUNDSCHECK=1 run of `make test`")
def test_boundscheck_run_compiles_checked_kernels():
    """The kernels of the boundscheck run really check: an out-of-range read raises.

    numba's cache key does not include NUMBA_BOUNDSCHECK, so a run that found kernels compiled
    without checks in the cache would load them and check nothing; `make test` points
    NUMBA_CACHE_DIR at an empty directory for that run. (Inside a ``prange`` body numba 0.68
    does not raise even then: the failing iteration is dropped silently, which the output
    checks above catch as a wrong or invalid answer.)
    """
    from hypann.geometry._kernels import sq_dist_row

    with pytest.raises(IndexError, match="index is out of bounds"):
        sq_dist_row(np.zeros(8), np.zeros(3))
