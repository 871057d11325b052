"""The exact batch scan through Gram blocks (hypann.geometry.gram_scan) equals the plain scan bit for bit."""

from __future__ import annotations

import contextlib

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypann
from hypann.datasets.families import make_family
from hypann.geometry import gram_scan
from hypann.geometry._kernels import conformal_factor
from tests.conftest import ball_points, brute_knn_delta, deep_clusters, points_at_norm

pytestmark = pytest.mark.kernels


def _inside_after_rounding(X, storage):
    """``X`` in ``storage``, rows pulled in (one float32 step at a time) until ``1-|x|^2 > 0`` as stored,
    as float32 storage requires of its input."""
    X = np.ascontiguousarray(X, dtype=storage)
    for _ in range(64):
        outside = ~(conformal_factor(X.astype(np.float64)) > 0.0)
        if not outside.any():
            return X
        X[outside] *= storage(1.0 - 2.0**-23)
    raise AssertionError("could not keep the rounded points inside the ball")


def _same_as_plain_scan(Q, X, k, *, storage=np.float64):
    X = _inside_after_rounding(X, storage)
    cx = conformal_factor(X.astype(np.float64))
    cq = conformal_factor(Q)
    want = brute_knn_delta(Q, cq, X, cx, k)
    ids, deltas, evaluated = gram_scan.gram_knn_delta(Q, cq, X, cx, k, return_evaluated=True)
    np.testing.assert_array_equal(ids, want[0])
    np.testing.assert_array_equal(deltas, want[1])
    np.testing.assert_array_equal(gram_scan.knn_delta_scan(Q, cq, X, cx, k)[0], want[0])
    _same_from_anywhere(Q, cq, X, cx, k, ids, deltas, evaluated)
    return evaluated


def _same_from_anywhere(Q, cq, X, cx, k, ids, deltas, evaluated):
    """The scan started at other points (``scan_from``: in, before and past every block) gives the same
    ids, ties, bits and exact evaluations."""
    n = len(X)
    rng = np.random.default_rng(len(Q) * 1009 + n)
    for scan_from in (rng.integers(-n - 3, 2 * n + 3, size=len(Q)), np.full(len(Q), n - 1)):
        got_i, got_d, got_e = gram_scan.gram_knn_delta(Q, cq, X, cx, k, return_evaluated=True, scan_from=scan_from)
        np.testing.assert_array_equal(got_i, ids)
        np.testing.assert_array_equal(got_d, deltas)
        np.testing.assert_array_equal(got_e, evaluated)


@pytest.fixture(scope="module")
def small_blocks():
    """Blocks of 3 queries and 7 points, so every test crosses many block edges."""
    saved = gram_scan.QUERY_BLOCK, gram_scan.POINT_BLOCK
    gram_scan.QUERY_BLOCK, gram_scan.POINT_BLOCK = 3, 7
    yield
    gram_scan.QUERY_BLOCK, gram_scan.POINT_BLOCK = saved


@settings(deadline=None, max_examples=60)
@given(n=st.integers(1, 60), m=st.integers(1, 12), d=st.integers(1, 40), k=st.integers(1, 12),
       seed=st.integers(0, 2**32 - 1), min_conformal=st.sampled_from([1e-2, 1e-8, 1e-15]),
       storage=st.sampled_from([np.float64, np.float32]))
def test_random_points_down_to_the_boundary(small_blocks, n, m, d, k, seed, min_conformal, storage):
    rng = np.random.default_rng(seed)
    X = ball_points(rng, n, d, min_conformal=min_conformal)
    Q = ball_points(rng, m, d, min_conformal=min_conformal)
    _same_as_plain_scan(Q, X, min(k, n), storage=storage)


@settings(deadline=None, max_examples=40)
@given(n=st.integers(2, 50), m=st.integers(1, 10), d=st.integers(1, 12), k=st.integers(1, 10),
       seed=st.integers(0, 2**32 - 1))
def test_duplicates_ties_and_queries_on_points(small_blocks, n, m, d, k, seed):
    """Exact copies (equal deltas: the lower index first) and queries equal to indexed points."""
    rng = np.random.default_rng(seed)
    base = ball_points(rng, max(1, n // 4), d, min_conformal=1e-6)
    X = base[rng.integers(len(base), size=n)]
    Q = np.vstack([X[rng.integers(n, size=m)], ball_points(rng, m, d, min_conformal=1e-6)])
    _same_as_plain_scan(Q, X, min(k, n))


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(2, 16), storage=st.sampled_from([np.float64, np.float32]))
def test_deep_clusters_near_the_boundary(small_blocks, seed, d, storage):
    """Clusters at hyperbolic norms 20-37 (1-|x|^2 down to 3e-16): the bounds widen, the answer does not
    (float32 points: pulled inside as stored, the products in float32)."""
    rng = np.random.default_rng(seed)
    X = deep_clusters(rng, 60, d)
    Q = deep_clusters(rng, 9, d)
    _same_as_plain_scan(Q, X, 10, storage=storage)


def _tight_cluster(rng, n, d, h, scale):
    """``n`` points within ``scale`` (Euclidean, 1e-14 to 1e-9) of one point at hyperbolic norm ``h``:
    their ``|q-x|^2`` lie far below the Gram product's rounding error, so only the bounds keep the
    answer exact."""
    centre = points_at_norm(rng.normal(size=(1, d)), np.array([h]))[0]
    offsets = rng.normal(size=(n, d)) * (scale * 10.0 ** rng.uniform(-5, 0, n))[:, None]
    inward = centre - offsets * np.sign(offsets @ centre)[:, None]  # move towards the inside
    return _inside_after_rounding(inward, np.float64)


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(1, 16), h=st.floats(5.0, 30.0),
       scale=st.sampled_from([1e-9, 1e-12]), storage=st.sampled_from([np.float64, np.float32]))
def test_tight_clusters_below_the_products_rounding(small_blocks, seed, d, h, scale, storage):
    """(Float32 points: the clusters' spreads up to 1e-6 and 1e-9, about and below float32's own spacing, so
    many points round to copies, and far below the float32 products' rounding at hyperbolic norm 5-30.)"""
    if storage is np.float32:
        scale *= 1e3
    rng = np.random.default_rng(seed)
    X = np.vstack([_tight_cluster(rng, 40, d, h, scale), ball_points(rng, 20, d)])
    Q = np.vstack([_tight_cluster(np.random.default_rng(seed), 6, d, h, scale), X[:3]])
    _same_as_plain_scan(Q, X, 10, storage=storage)


@settings(deadline=None, max_examples=25)
@given(seed=st.integers(0, 2**32 - 1), d=st.integers(1, 40), exponent=st.integers(-45, -36))
def test_float32_points_below_the_normal_range(small_blocks, seed, d, exponent):
    """Float32 points whose coordinates are about ``10^exponent`` (float32's subnormals start below 1.2e-38),
    and float64 queries among them that float32 cannot hold: the products underflow to nothing, and only the
    absolute floor of the bounds (``gram_floor``) keeps the screen from dropping the nearest points."""
    rng = np.random.default_rng(seed)
    X = (rng.standard_normal((50, d)) * 10.0**exponent).astype(np.float32)
    Q = np.vstack([rng.standard_normal((6, d)) * 10.0**exponent, X[:2].astype(np.float64) * (1 + 1e-9)])
    _same_as_plain_scan(Q, X, 10, storage=np.float32)


@pytest.mark.parametrize("storage", [np.float64, np.float32])
def test_points_on_one_sphere_and_at_the_origin(small_blocks, storage):
    """Every point at the same hyperbolic norm (near-ties everywhere), plus the origin."""
    rng = np.random.default_rng(3)
    X = np.vstack([points_at_norm(rng.normal(size=(80, 5)), np.full(80, 30.0)), np.zeros((1, 5))])
    Q = np.vstack([points_at_norm(rng.normal(size=(10, 5)), np.full(10, 30.0)), np.zeros((1, 5))])
    _same_as_plain_scan(Q, X, 10, storage=storage)


def test_the_screen_evaluates_few_points_on_clustered_data():
    """The point of the scan: on a mixture, a small part of the points gets an exact evaluation."""
    X = make_family("gaussian_mixture", 3000, 32, seed=0)
    evaluated = _same_as_plain_scan(X[:40].copy(), X[40:].copy(), 10)
    assert np.median(evaluated) < 0.1 * (len(X) - 40)


@pytest.mark.parametrize("k", [1, 10, 32])
def test_one_block_evaluates_about_k_points(monkeypatch, k):
    """Within a block the exact evaluations are decided on the block's final ``tau``, not the running one:
    about ``k`` per query in one block (deciding on the running ``tau`` evaluates every point that improves
    it, about ``k + k ln(n / k)``)."""
    rng = np.random.default_rng(7)
    X = ball_points(rng, 1024, 10, min_conformal=1e-2)
    Q = ball_points(rng, 64, 10, min_conformal=1e-2)
    monkeypatch.setattr(gram_scan, "POINT_BLOCK", len(X))  # (small_blocks, module-scoped, may be active)
    evaluated = _same_as_plain_scan(Q, X, k)
    assert evaluated.max() <= 2 * k + 2


def test_the_answer_does_not_depend_on_the_thread_count():
    rng = np.random.default_rng(5)
    X, Q = ball_points(rng, 500, 8), ball_points(rng, 40, 8)
    cx, cq = conformal_factor(X), conformal_factor(Q)
    threads = numba.get_num_threads()
    try:
        numba.set_num_threads(1)
        one = gram_scan.gram_knn_delta(Q, cq, X, cx, 7)
    finally:
        numba.set_num_threads(threads)
    two = gram_scan.gram_knn_delta(Q, cq, X, cx, 7)
    for a, b in zip(one, two):
        np.testing.assert_array_equal(a, b)


@contextlib.contextmanager
def _groups_of(name):
    """The group count of every call of ``gram_scan.<name>`` while the block runs (a list); the function and
    numba's thread count are restored after."""
    grouped, real, threads = [], getattr(gram_scan, name), numba.get_num_threads()
    setattr(gram_scan, name, lambda *a: (grouped.append(a[10]), real(*a))[1])
    try:
        yield grouped
    finally:
        numba.set_num_threads(threads)
        setattr(gram_scan, name, real)


def _points_with_copies(seed, n, m, d, storage, *, distinct):
    """``n`` points drawn from ``distinct`` ones (copies: ties everywhere), stored as ``storage``, and ``2 m``
    queries (``m`` of them copies of points); returns ``(X, Q, cx, cq)``."""
    rng = np.random.default_rng(seed)
    base = ball_points(rng, distinct, d, min_conformal=1e-8)
    X = _inside_after_rounding(base[rng.integers(len(base), size=n)], storage)
    Q = np.vstack([X[rng.integers(n, size=m)].astype(np.float64), ball_points(rng, m, d)])
    return X, Q, conformal_factor(X.astype(np.float64)), conformal_factor(Q)


@settings(deadline=None, max_examples=30)
@given(n=st.integers(1, 80), m=st.integers(1, 8), d=st.integers(1, 20), k=st.integers(1, 10),
       seed=st.integers(0, 2**32 - 1), storage=st.sampled_from([np.float64, np.float32]))
def test_point_groups_on_threads_equal_the_plain_scan(small_blocks, n, m, d, k, seed, storage):
    """The point blocks split into one group per thread (each with its own lists, merged in group
    order): the plain scan's ids, ties and bits on every thread count, with copies across groups."""
    X, Q, cx, cq = _points_with_copies(seed, n, m, d, storage, distinct=max(1, n // 3))
    k = min(k, n)
    want = brute_knn_delta(Q, cq, X, cx, k)
    with _groups_of("_scan_point_groups") as grouped:
        for threads in range(1, min(4, numba.config.NUMBA_NUM_THREADS) + 1):
            numba.set_num_threads(threads)
            grouped.clear()
            ids, deltas = gram_scan.gram_knn_delta(Q, cq, X, cx, k)
            np.testing.assert_array_equal(ids, want[0])
            np.testing.assert_array_equal(deltas, want[1])
            assert grouped == ([] if threads == 1 or n <= 7 else [min(threads, -(-n // 7))])
            ids, deltas = gram_scan.gram_knn_delta(Q, cq, X, cx, k, scan_from=np.arange(len(Q)) * 5 % (n + 2))
            np.testing.assert_array_equal(ids, want[0])
            np.testing.assert_array_equal(deltas, want[1])


@settings(deadline=None, max_examples=30)
@given(n=st.integers(1, 7), m=st.integers(1, 20), d=st.integers(1, 20), k=st.integers(1, 10),
       seed=st.integers(0, 2**32 - 1), storage=st.sampled_from([np.float64, np.float32]))
def test_query_groups_on_threads_equal_the_plain_scan(small_blocks, n, m, d, k, seed, storage):
    """One block of points and several of queries: the query blocks split into one group per thread
    (each group's rows of the lists its own): the plain scan's ids, ties, bits and evaluations on every
    thread count."""
    X, Q, cx, cq = _points_with_copies(seed, n, m, d, storage, distinct=max(1, n // 2))
    k = min(k, n)
    want = brute_knn_delta(Q, cq, X, cx, k)
    with _groups_of("_scan_query_groups") as grouped:
        numba.set_num_threads(1)
        *_, one_evaluated = gram_scan.gram_knn_delta(Q, cq, X, cx, k, return_evaluated=True)
        assert grouped == []
        for threads in range(2, min(4, numba.config.NUMBA_NUM_THREADS) + 1):
            numba.set_num_threads(threads)
            grouped.clear()
            ids, deltas, evaluated = gram_scan.gram_knn_delta(Q, cq, X, cx, k, return_evaluated=True)
            np.testing.assert_array_equal(ids, want[0])
            np.testing.assert_array_equal(deltas, want[1])
            np.testing.assert_array_equal(evaluated, one_evaluated)
            blocks = -(-len(Q) // 3)  # small_blocks: 3 queries a block
            assert grouped == ([] if blocks == 1 else [min(threads, blocks)])
            _same_from_anywhere(Q, cq, X, cx, k, ids, deltas, evaluated)


@settings(deadline=None, max_examples=80)
@given(k=st.integers(1, 40), offers=st.lists(st.one_of(st.floats(0.0, 1e6), st.sampled_from([0.5, 2.0, np.inf])),
                                            max_size=200))
def test_offered_bounds_keep_the_k_smallest_with_the_largest_first(k, offers):
    """``_offer_bound`` as the fold calls it (only bounds below ``ub[0]``): the heap holds the ``k`` smallest
    bounds offered (``inf`` while fewer), and ``ub[0]``, the fold's ``tau``, is their largest, after every
    offer; copies of a bound count once each."""
    ub = np.full(k, np.inf)
    for t, up in enumerate(offers):
        if up < ub[0]:
            gram_scan._offer_bound(ub, up)
        want = sorted(offers[:t + 1] + [np.inf] * k)[:k]
        assert sorted(ub) == want and ub[0] == want[-1]


def test_scan_from_of_the_wrong_shape_is_refused():
    rng = np.random.default_rng(0)
    X, Q = ball_points(rng, 20, 3), ball_points(rng, 5, 3)
    with pytest.raises(ValueError, match="scan_from"):
        gram_scan.gram_knn_delta(Q, conformal_factor(Q), X, conformal_factor(X), 3, scan_from=np.zeros(4))


def test_brute_search_answers_a_batch_exactly():
    rng = np.random.default_rng(8)
    X, Q = ball_points(rng, 700, 20, min_conformal=1e-10), ball_points(rng, 50, 20, min_conformal=1e-10)
    index = hypann.HyperbolicIndex(algorithm="brute").build(X)
    cx, cq = conformal_factor(X), conformal_factor(Q)
    want_ids, want_d = brute_knn_delta(Q, cq, X, cx, 5)
    got = index.search(Q, 5)
    np.testing.assert_array_equal(got.indices, want_ids)
    np.testing.assert_array_equal(got.distances, hypann.geometry.poincare.dist_from_delta(want_d))
