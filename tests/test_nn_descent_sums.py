"""NN-descent's rounds below 16 dimensions: the three ways of summing a ``delta`` make the same rows.

A round's chunk probes how early abandoned sums stop, then sums in full or abandons
(:func:`hypann.graph.knn_graph._refine`); which one it picks must change only its speed.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypann._runtime import read_only
from hypann.geometry._kernels import conformal_factor, delta_row_below, delta_row_below_counted
from hypann.graph import knn_graph
from tests.conftest import ball_points

pytestmark = pytest.mark.kernels  # also run under NUMBA_BOUNDSCHECK=1 (make test)


def _abandoned_by_hand(q, cq, x, cx, worst):
    """Plain-Python reference of an abandoned sum: ``(value, coordinates read)``, the terms added in
    coordinate order in float64 (``delta_row_below`` is itself the counted kernel's first value)."""
    den = cq * cx
    s = 0.0
    for j in range(len(q)):
        t = float(q[j]) - float(x[j])
        s += t * t
        if s > worst * den and s / den >= worst:
            return np.inf, j + 1
    return s / den, len(q)


@given(seed=st.integers(0, 2**32 - 1), d=st.integers(1, 15), min_conformal=st.sampled_from([1e-2, 1e-8, 1e-14]),
       scale=st.sampled_from([0.0, 0.5, 1.0, 2.0, 10.0]))
def test_counted_sum_is_delta_row_below(seed, d, min_conformal, scale):
    rng = np.random.default_rng(seed)
    pts = ball_points(rng, 40, d, min_conformal=min_conformal)
    conf = conformal_factor(pts)
    for i in range(0, 40, 2):
        q, x, cq, cx = pts[i], pts[i + 1], conf[i], conf[i + 1]
        full = float(np.sum((q - x) ** 2) / (cq * cx))
        worst = scale * full  # below, at and above the pair's delta; 0 abandons at the first nonzero term
        got, read = delta_row_below_counted(q, cq, x, cx, worst)
        want, want_read = _abandoned_by_hand(q, cq, x, cx, worst)
        assert got == want or (np.isnan(got) and np.isnan(want))
        assert delta_row_below(q, cq, x, cx, worst) == got and read == want_read
        assert 1 <= read <= d
        if got < np.inf:
            assert read == d


@given(s=st.floats(0.0, 1e30, allow_subnormal=True), den=st.floats(1e-300, 1.0),
       worst32=st.floats(0.0, float(np.finfo(np.float32).max), width=32), nudge=st.integers(-4, 4))
def test_full_sum_screen_rejects_only_what_cannot_enter(s, den, worst32, nudge):
    """``_full_sum_enters`` is False only where the float32 key of ``s / den`` is ``>= worst``: the row would
    reject it anyway. ``nudge`` moves ``s`` a few ulps around the screen's edge, where the proof is tight."""
    worst = float(worst32)
    edge = worst * den * knn_graph._ENTER_MARGIN
    if np.isfinite(edge) and edge > 0.0:
        s = float(edge)
        for _ in range(abs(nudge)):
            s = float(np.nextafter(s, np.inf if nudge > 0 else 0.0))
    enters = knn_graph._full_sum_enters(s, den, worst)
    if not enters:
        assert np.float32(s / den) >= np.float32(worst)
    assert knn_graph._full_sum_enters(s, den, np.inf)  # a row not full takes every candidate
    assert knn_graph._full_sum_enters(s, den, 0.0) or s / den > 0.0


def test_full_sum_screen_passes_what_enters():
    """Just below the screen's edge the candidate is still divided: a sum that the key would put under
    ``worst`` always passes (the screen only saves work)."""
    rng = np.random.default_rng(0)
    for _ in range(1000):
        den = float(10.0 ** rng.uniform(-290, 0))
        worst = float(np.float32(10.0 ** rng.uniform(-30, 30)))
        s = float(np.nextafter(worst * den, 0.0))  # s / den just under worst
        assert knn_graph._full_sum_enters(s, den, worst)
        assert not knn_graph._full_sum_enters(4.0 * worst * den, den, worst) or worst * den < 2.0 ** -1000


def _candidate_lists(rng, n, C):
    """Random candidate lists of ``n`` points (``-1`` padded, no point in its own list)."""
    lists = np.full((n, C), -1, dtype=np.int32)
    for p in range(n):
        length = int(rng.integers(0, C + 1))
        lists[p, :length] = rng.choice(np.setdiff1d(np.arange(n), [p]), length, replace=False)
    return lists


def _rows(rng, pts, conf, K):
    """Sorted float32-keyed rows of ``K`` random points each (some short), as NN-descent keeps them."""
    n = len(pts)
    row_d = np.full((n, K), np.inf, dtype=np.float32)
    row_i = np.full((n, K), -1, dtype=np.int32)
    row_f = np.zeros((n, K), dtype=np.bool_)
    for p in range(n):
        ids = rng.choice(np.setdiff1d(np.arange(n), [p]), int(rng.integers(K // 2, K + 1)), replace=False)
        keys = (np.sum((pts[ids] - pts[p]) ** 2, axis=1) / (conf[ids] * conf[p])).astype(np.float32)
        order = np.argsort(keys, kind="stable")
        row_d[p, :len(ids)] = keys[order]
        row_i[p, :len(ids)] = ids[order]
        row_f[p, :len(ids)] = rng.random(len(ids)) < 0.5
    return row_d, row_i, row_f


@pytest.mark.parametrize("storage", [np.float64, np.float32])
@pytest.mark.parametrize("d", [2, 5, 10, 15])
def test_every_kind_of_sum_makes_the_same_rows(storage, d):
    rng = np.random.default_rng(d)
    n, K, C = 300, 8, 6
    pts = ball_points(rng, n, d, min_conformal=1e-12)
    # the kernels' types as the library passes them (nn_descent): read-only views, int32 row numbers
    conf = read_only(conformal_factor(pts))
    points = read_only(np.ascontiguousarray(pts.astype(storage)))
    new_i, old_i = _candidate_lists(rng, n, C), _candidate_lists(rng, n, C)
    start = _rows(rng, pts, conf, K)
    results = []
    for row_fn in (knn_graph._probe_row, knn_graph._abandon_row, knn_graph._full_row):
        row_d, row_i, row_f = (a.copy() for a in start)
        seen = np.zeros(n, dtype=np.int32)
        reads = np.zeros(2, dtype=np.int64)
        extra = (np.empty(d),) if row_fn is knn_graph._full_row else ()  # its float64 copy of a point
        changed = [row_fn(np.int32(p), points, conf, new_i, old_i, row_d[p], row_i[p], row_f[p], seen, p + 1, reads,
                          *extra) for p in range(n)]
        results.append((row_d, row_i, row_f, changed, reads))
    for got in results[1:]:
        for a, b in zip(results[0][:4], got[:4]):
            np.testing.assert_array_equal(a, b)
    assert sum(results[0][3]) > 0  # rows changed
    probed = results[0][4]
    assert probed[1] > 0 and probed[1] <= probed[0] <= d * probed[1]
    assert not results[1][4].any() and not results[2][4].any()  # only the probe counts


@pytest.mark.parametrize("family", ["hyperbolic_uniform", "boundary_heavy"])
def test_a_round_makes_the_rows_of_abandoned_sums(family):
    """:func:`~hypann.graph.knn_graph._refine` over several chunks (each probed, then summing in full or not)
    makes the rows that abandoned sums alone make, in the same visit order."""
    from hypann.datasets.families import make_family

    n, K, C = 3 * knn_graph._CHUNK + 100, 10, 8
    pts = make_family(family, n, 10, seed=1)
    conf = read_only(conformal_factor(pts))
    points = read_only(pts)
    rng = np.random.default_rng(3)
    new_i, old_i = _candidate_lists(rng, n, C), _candidate_lists(rng, n, C)
    visit = rng.permutation(n).astype(np.int32)
    start = _rows(rng, pts, conf, K)
    row_d, row_i, row_f = (a.copy() for a in start)
    changed = knn_graph._refine(points, conf, new_i, old_i, row_d, row_i, row_f, visit,
                                knn_graph._thread_marks(n, np.int32), np.empty((0, 10), dtype=np.int8),
                                np.empty((0, 4)), knn_graph.SCREEN_KEPT)
    want_d, want_i, want_f = (a.copy() for a in start)
    seen = np.zeros(n, dtype=np.int32)
    reads = np.zeros(2, dtype=np.int64)
    want = sum(knn_graph._abandon_row(p, points, conf, new_i, old_i, want_d[p], want_i[p], want_f[p], seen,
                                      np.int64(p) + 1, reads) for p in visit)
    assert changed == want > 0
    np.testing.assert_array_equal(row_d, want_d)
    np.testing.assert_array_equal(row_i, want_i)
    np.testing.assert_array_equal(row_f, want_f)
