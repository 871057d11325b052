"""Geometry: distance identities, high-precision agreement, recentred balls, models."""

from __future__ import annotations

import mpmath
import numba as nb
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypann._runtime import read_only
from hypann.geometry import _kernels, models, poincare as P
from hypann.geometry._vector_lanes import (BLOCK_SUM_DEPTH, LANE_BLOCK, NARROW_LANES, ROW_LANES, add_row_squares4,
                                          add_row_squares8, block_square_sum, narrow_square_sums,
                                          split_square_block_sums, split_square_sums)
from tests.conftest import ball_points

mpmath.mp.dps = 60


def mp_dist(x, y):
    """Reference Poincare distance in 60-digit arithmetic on the same float64 inputs."""
    x = [mpmath.mpf(float(v)) for v in x]
    y = [mpmath.mpf(float(v)) for v in y]
    sx = sum(v * v for v in x)
    sy = sum(v * v for v in y)
    sd = sum((a - b) ** 2 for a, b in zip(x, y))
    return mpmath.acosh(1 + 2 * sd / ((1 - sx) * (1 - sy)))


def point_at_hyperbolic_norm(rng, d, h):
    v = rng.normal(size=d)
    return v / np.linalg.norm(v) * np.tanh(h / 2)


def test_conformal_factor_matches_high_precision(rng):
    x = ball_points(rng, 200, 10, min_conformal=1e-15)
    got = P.conformal_factor(x)
    ref = np.array([float(1 - sum(mpmath.mpf(float(v)) ** 2 for v in row)) for row in x])
    np.testing.assert_allclose(got, ref, rtol=1e-14)
    np.testing.assert_allclose(_kernels.conformal_factor(x), got, rtol=0, atol=0)
    # the naive form loses digits near the boundary
    naive = 1 - np.einsum("ij,ij->i", x, x)
    assert np.max(np.abs(naive - ref) / ref) > 1e-6


@pytest.mark.parametrize("h", [0.5, 5.0, 15.0, 30.0])
def test_distance_matches_mpmath_up_to_norm_30(rng, h):
    errs = []
    for _ in range(20):
        x = point_at_hyperbolic_norm(rng, 10, h)
        for y in (
            point_at_hyperbolic_norm(rng, 10, h * rng.uniform(0.5, 1.0)),
            x * (1 - 1e-14 * rng.uniform()),  # very close point near the boundary
            x + 1e-9 * rng.normal(size=10) * np.tanh(h / 2) * 1e-3,
        ):
            if P.conformal_factor(y) <= 0:
                continue
            ref = mp_dist(x, y)
            if ref == 0:
                continue
            errs.append(abs(float((mpmath.mpf(float(P.dist(x, y))) - ref) / ref)))
    assert max(errs) < 1e-9


def test_matrix_product_form_would_fail_where_ours_holds(rng):
    # close points near the boundary: |x|^2 + |y|^2 - 2 x.y cancels
    x = point_at_hyperbolic_norm(rng, 10, 25.0)
    y = x * (1 - 3e-13)
    ref = mp_dist(x, y)
    ours = P.dist(x, y)
    assert abs(ours - float(ref)) / float(ref) < 1e-9
    sq = x @ x + y @ y - 2 * x @ y
    naive = np.arccosh(1 + 2 * max(sq, 0) / ((1 - x @ x) * (1 - y @ y)))
    assert abs(naive - float(ref)) / float(ref) > 1e-3


finite = st.floats(-1, 1, allow_nan=False)


@st.composite
def ball_vectors(draw, d=4, count=3):
    pts = []
    for _ in range(count):
        v = np.array(draw(st.lists(finite, min_size=d, max_size=d)))
        nrm = np.linalg.norm(v)
        shrink = draw(st.sampled_from([0.0, 0.5, 0.99, 1 - 1e-6, 1 - 1e-12]))
        if nrm > 0:
            v = v / nrm * shrink if shrink > 0 else v * 0.3 / nrm
        pts.append(v)
    return pts


@given(ball_vectors())
def test_symmetry_and_triangle_inequality(pts):
    x, y, z = pts
    dxy, dyx = P.dist(x, y), P.dist(y, x)
    assert dxy == pytest.approx(dyx, rel=1e-12, abs=1e-12)
    assert P.dist(x, x) == 0.0
    assert P.dist(x, z) <= P.dist(x, y) + P.dist(y, z) + 1e-9 * (1 + P.dist(x, z))


def test_dist_from_delta_equals_arccosh_form(rng):
    x, y = ball_points(rng, 2, 6, min_conformal=1e-3)
    d1 = P.dist(x, y)
    d2 = np.arccosh(1 + 2 * np.sum((x - y) ** 2) / ((1 - x @ x) * (1 - y @ y)))
    assert d1 == pytest.approx(d2, rel=1e-12)
    assert P.delta_from_dist(d1) == pytest.approx(P.delta(x, y), rel=1e-12)


@pytest.mark.parametrize("c", [1.0, 0.3, 4.0, 1])
def test_dist_from_delta_is_the_formula_bit_for_bit(rng, c):
    """The in-place computation gives the formula's bits for arrays of any shape and for scalars."""
    d = np.concatenate([rng.random(50) * 10.0 ** rng.integers(-30, 30, 50), [0.0, np.inf, 1e300, 5e-324]])
    for arr in (d, d.reshape(2, -1), d[::3], d[d < 1e30].astype(np.float32)):
        before = arr.copy()
        got = P.dist_from_delta(arr, c=c)
        want = 2.0 * np.arcsinh(np.sqrt(np.asarray(arr, dtype=np.float64))) / np.sqrt(c)
        assert got.dtype == np.float64 and got.shape == arr.shape
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(arr, before)  # the input is not overwritten
    for scalar in (0.25, np.float64(3.0), 7):
        got = P.dist_from_delta(scalar, c=c)
        assert np.ndim(got) == 0 and got == 2.0 * np.arcsinh(np.sqrt(float(scalar))) / np.sqrt(c)
    assert P.dist_from_delta([[0.5, 2.0]], c=c).shape == (1, 2)


def test_dist0_and_curvature(rng):
    x = point_at_hyperbolic_norm(rng, 5, 12.0)
    assert P.dist0(x) == pytest.approx(12.0, rel=1e-10)
    assert P.dist(np.zeros(5), x) == pytest.approx(12.0, rel=1e-10)
    # curvature -c: ball of radius 1/sqrt(c), distances scale by 1/sqrt(c)
    c = 4.0
    a, b = ball_points(rng, 2, 5, min_conformal=1e-6) / np.sqrt(c)
    assert P.dist(a, b, c=c) == pytest.approx(P.dist(a * 2, b * 2) / 2, rel=1e-12)
    assert P.norm_at_dist0(P.dist0(a, c=c), c=c) == pytest.approx(np.linalg.norm(a), rel=1e-12)


@pytest.mark.parametrize("h_q", [0.0, 0.3, 4.0, 20.0, 28.0])
@pytest.mark.parametrize("r", [1e-6, 0.5, 3.0, 25.0])
def test_euclidean_ball_boundary_is_at_hyperbolic_distance_r(rng, h_q, r):
    q = point_at_hyperbolic_norm(rng, 6, h_q) if h_q > 0 else np.zeros(6)
    center, radius = P.euclidean_ball(q, r)
    # Boundary points centre + radius*u are only representable in float64 to
    # ~1e-16 absolute; compare with a tolerance that reflects that.
    rtol = 1e-9 + 1e-14 / radius
    dirs = rng.normal(size=(64, 6))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    boundary = center + radius * dirs
    lam = P.conformal_factor(boundary)
    ok = lam > 0
    # and a point near the unit sphere has its 1-|x|^2 known only to ~1e-16
    rtol += 1e-15 / lam[ok].min() / r
    d = P.dist(q[None, :], boundary[ok])
    if rtol > 0.1:
        pytest.skip(f"ball radius {radius:.1e} is below float64 resolution around its centre")
    np.testing.assert_allclose(d, r, rtol=rtol)


def test_euclidean_ball_equals_paper_midpoint_construction(rng):
    # Appendix A: centre = (t1 q + t2 q)/2 with t|q| = tanh((d(0,q) +- r)/2)
    q = point_at_hyperbolic_norm(rng, 3, 2.0)
    r = 1.3
    outer, inner = P.ray_points(q, r)
    u = q / np.linalg.norm(q)
    center, radius = P.euclidean_ball(q, r)
    np.testing.assert_allclose(center, (outer + inner) / 2 * u, rtol=1e-12)
    assert radius == pytest.approx((outer - inner) / 2, rel=1e-12)
    # q = 0: centre 0, radius tanh(r/2)
    c0, r0 = P.euclidean_ball(np.zeros(3), r)
    np.testing.assert_array_equal(c0, 0)
    assert r0 == pytest.approx(np.tanh(r / 2), rel=1e-12)


def test_ray_points_contains_origin(rng):
    q = point_at_hyperbolic_norm(rng, 3, 1.0)
    outer, inner = P.ray_points(q, 2.0)
    assert inner < 0 < outer < 1
    assert P.dist0(outer * q / np.linalg.norm(q)) == pytest.approx(3.0, rel=1e-12)


def test_model_round_trips(rng):
    p = ball_points(rng, 50, 7, min_conformal=1e-10)
    x = models.poincare_to_lorentz(p)
    np.testing.assert_allclose(models.minkowski_inner(x, x) / (x[:, 0] ** 2), -1 / x[:, 0] ** 2, atol=1e-6)
    np.testing.assert_allclose(models.lorentz_to_poincare(x), p, rtol=1e-12, atol=1e-15)
    k = models.poincare_to_klein(p)
    np.testing.assert_allclose(models.klein_to_poincare(k), p, rtol=1e-6, atol=1e-12)
    # distances agree with the hyperboloid formula away from the boundary
    a = ball_points(rng, 2, 7, min_conformal=0.1)
    la = models.poincare_to_lorentz(a)
    ref = np.arccosh(-models.minkowski_inner(la[0], la[1]))
    assert models.lorentz_dist(la[0], la[1]) == pytest.approx(ref, rel=1e-10)
    assert P.dist(a[0], a[1]) == pytest.approx(ref, rel=1e-10)
    # curvature c on the hyperboloid -x0^2+|xs|^2 = -1/c
    c = 2.5
    pc = a / np.sqrt(c)
    lc = models.poincare_to_lorentz(pc, c=c)
    np.testing.assert_allclose(c * models.minkowski_inner(lc, lc), -1, rtol=1e-10)
    np.testing.assert_allclose(models.lorentz_to_poincare(lc, c=c), pc, rtol=1e-12)


def test_kernels_match_numpy_reference(rng):
    Q = ball_points(rng, 30, 8)
    X = ball_points(rng, 300, 8)
    cq, cx = P.conformal_factor(Q), P.conformal_factor(X)
    ids, ds = _kernels.brute_knn_delta(Q, cq, read_only(X), read_only(cx), 5)
    full = P.pairwise_delta(Q, X)
    ref_ids = np.argsort(full, axis=1, kind="stable")[:, :5]
    np.testing.assert_allclose(ds, np.take_along_axis(full, ref_ids, 1), rtol=1e-13)
    np.testing.assert_array_equal(ids, ref_ids)


@pytest.mark.kernels
@given(st.integers(1, 40), st.integers(0, 2**32 - 1), st.sampled_from([np.float64, np.float32]),
       st.floats(0.0, 2.0))
def test_delta_row_below_is_delta_row_or_proves_it_is_not_below(d, seed, dtype, where):
    """Finite: delta_row's value bit for bit; inf: delta_row is >= the given worst key."""
    rng = np.random.default_rng(seed)
    q, x = ball_points(rng, 2, d, min_conformal=1e-12 if dtype == np.float64 else 1e-5)  # float32: still inside
    x = x.astype(dtype)
    cq = _kernels.conformal_factor(q[None, :])[0]
    cx = _kernels.conformal_factor(x.astype(np.float64)[None, :])[0]
    full = _kernels.delta_row(q, cq, x, cx)
    for worst in (full * where, full, np.nextafter(full, np.inf), np.inf, 0.0):
        got = _kernels.delta_row_below(q, cq, x, cx, worst)
        if np.isinf(got):
            assert full >= worst
        else:
            assert got == full
    assert _kernels.delta_row_below(q, cq, x, cx, np.inf) == full


def _rows_below(q, cq, X, cx, ids, worst):
    """:func:`_kernels.delta4_below` of the four rows ``ids``."""
    rows = [a for u in ids for a in (X[u], cx[u])]
    return np.array(_kernels.delta4_below(q, cq, *rows, worst))


@pytest.mark.kernels
@given(st.integers(1, 70), st.integers(0, 2**32 - 1), st.sampled_from([np.float64, np.float32]),
       st.floats(0.0, 2.0))
def test_rows_below_are_delta_row_or_prove_they_are_not_below_for_each_row(d, seed, dtype, where):
    """delta4_below: each row's value is delta_row's bits, or inf only when it is >= worst."""
    rng = np.random.default_rng(seed)
    q = ball_points(rng, 1, d, min_conformal=1e-12)[0]
    X = ball_points(rng, 20, d, min_conformal=1e-12 if dtype == np.float64 else 1e-5).astype(dtype)
    cq = _kernels.conformal_factor(q[None, :])[0]
    cx = _kernels.conformal_factor(X.astype(np.float64))
    ids = rng.choice(20, 4, replace=False)
    full = np.array([_kernels.delta_row(q, cq, X[u], cx[u]) for u in ids])
    for worst in (np.median(full) * where, full.min(), full.max(), np.nextafter(full.max(), np.inf), np.inf, 0.0):
        got = _rows_below(q, cq, X, cx, ids, worst)
        for r in range(4):
            if np.isinf(got[r]):
                assert full[r] >= worst
            else:
                assert got[r] == full[r]
    np.testing.assert_array_equal(_rows_below(q, cq, X, cx, ids, np.inf), full)


@pytest.mark.kernels
@given(st.integers(1, 130), st.integers(0, 2**32 - 1), st.sampled_from([np.float64, np.float32]))
def test_sq_dist_pair_is_two_sq_dist_rows_bit_for_bit(d, seed, dtype):
    """The tree descents' side test must see the build's values: any other order of the sums
    could send an indexed point to another leaf."""
    rng = np.random.default_rng(seed)
    q, _, a, _ = _mixed_scale_pair(rng, d, dtype)  # differences over ten orders of magnitude: order matters
    b = ball_points(rng, 1, d, min_conformal=1e-12 if dtype == np.float64 else 1e-5)[0].astype(dtype)
    got = _kernels.sq_dist_pair(q, a, b)
    assert got == (_kernels.sq_dist_row(q, a), _kernels.sq_dist_row(q, b))
    assert _kernels.sq_dist_pair(a, q, q) == (_kernels.sq_dist_row(a, q),) * 2


def _mixed_scale_row(rng, q, dtype):
    """A row whose coordinate differences from ``q`` span ten orders of magnitude (so sums of their
    squares in different orders round differently), well inside the ball when ``q`` is."""
    d = q.shape[0]
    return (q + rng.choice([-1.0, 1.0], d) * 10.0 ** rng.uniform(-10, -1, d) / np.sqrt(d)).astype(dtype)


def _strided(x):
    """``x`` as a column of a 2-D array: the same values, not contiguous (numpy calls one value contiguous)."""
    column = np.stack([-x, x], axis=1)[:, 1]
    assert column.size < 2 or not column.flags.c_contiguous
    return column


def _mixed_scale_pair(rng, d, dtype):
    """A query and a :func:`_mixed_scale_row` of it, both well inside the ball."""
    q = ball_points(rng, 1, d, min_conformal=1e-3)[0] * 0.5
    x = _mixed_scale_row(rng, q, dtype)
    cq = _kernels.conformal_factor(q[None, :])[0]
    cx = _kernels.conformal_factor(x.astype(np.float64)[None, :])[0]
    return q, cq, x, cx


@pytest.mark.kernels
@given(st.integers(1, 300), st.integers(0, 2**32 - 1), st.sampled_from([np.float64, np.float32]),
       st.floats(0.0, 2.0), st.booleans())
def test_delta_lanes_below_is_delta_row_or_proves_it_is_not_below(d, seed, dtype, where, mixed):
    """Finite: delta_row's value bit for bit; inf: delta_row is >= the given worst key. In particular
    a worst key one ulp above delta_row never abandons the row, whatever the lanes' rounding."""
    rng = np.random.default_rng(seed)
    if mixed:
        q, cq, x, cx = _mixed_scale_pair(rng, d, dtype)
    else:
        q, x = ball_points(rng, 2, d, min_conformal=1e-12 if dtype == np.float64 else 1e-5)
        x = x.astype(dtype)
        cq = _kernels.conformal_factor(q[None, :])[0]
        cx = _kernels.conformal_factor(x.astype(np.float64)[None, :])[0]
    shrink = _kernels.lanes_shrink(d)
    full = _kernels.delta_row(q, cq, x, cx)
    for worst in (full * where, full, np.nextafter(full, np.inf), np.inf, 0.0):
        got = _kernels.delta_lanes_below(q, cq, x, cx, worst, shrink)
        if np.isinf(got):
            assert full >= worst
        else:
            assert got == full
    assert _kernels.delta_lanes_below(q, cq, x, cx, np.nextafter(full, np.inf), shrink) == full


@nb.njit
def _block_square_sum(q, x, j):
    return block_square_sum(q, x, j)


@nb.njit(boundscheck=True)
def _block_square_sum_checked(q, x, j):
    return block_square_sum(q, x, j)


def _block_square_sum_reference(q, x, j):
    """The tree of block_square_sum in Python floats (IEEE double): pairs of squares, summed pairwise
    over three levels, then the two lanes."""
    diff = [float(q[i]) - float(x[i]) for i in range(j, j + LANE_BLOCK)]
    t = [v * v for v in diff]  # a product, as the kernel's: Python's v ** 2 calls pow, off by an ulp at times
    level = [(t[s], t[s + 1]) for s in range(0, LANE_BLOCK, 2)]
    while len(level) > 1:
        level = [(a[0] + b[0], a[1] + b[1]) for a, b in zip(level[::2], level[1::2])]
    return level[0][0] + level[0][1]


@pytest.mark.kernels
def test_block_square_sum_on_a_row_where_pow_is_not_a_product():
    """The case hypothesis found against a reference that squared with Python's ``** 2`` (``pow``, one ulp
    off for this difference); the references square with a product, as the kernels do."""
    v = 4.404886352622067e-05
    assert v ** 2 != v * v
    q, _, x, _ = _mixed_scale_pair(np.random.default_rng(4294967295), 78, np.float64)
    assert v in [float(q[i]) - float(x[i]) for i in range(LANE_BLOCK)]
    assert _block_square_sum(q, x, 0) == _block_square_sum_reference(q, x, 0)


@pytest.mark.kernels
@given(st.integers(LANE_BLOCK, 90), st.integers(0, 2**32 - 1), st.sampled_from([np.float64, np.float32]),
       st.booleans(), st.data())
def test_block_square_sum_is_its_fixed_tree_bit_for_bit(d, seed, dtype, strided, data):
    """The 2-wide vector block sum gives the bits of its documented summation tree, for float32 and
    float64 rows, contiguous or strided (a column of a 2-D array), at any offset."""
    rng = np.random.default_rng(seed)
    q, _, x, _ = _mixed_scale_pair(rng, d, dtype)  # differences over ten orders of magnitude: order matters
    if strided:
        q, x = _strided(q), _strided(x)
    j = data.draw(st.integers(0, d - LANE_BLOCK))
    assert _block_square_sum(q, x, j) == _block_square_sum_reference(q, x, j)
    assert BLOCK_SUM_DEPTH == 4 and LANE_BLOCK == 16  # the depth lanes_shrink's bound counts


def test_block_square_sum_tree_is_not_the_sequential_order():
    """The reference tree is a real constraint: on mixed-scale rows the sequential sum of the same
    terms rounds differently in many cases (so the bit-for-bit test above can fail)."""
    rng = np.random.default_rng(2)
    differ = 0
    for _ in range(200):
        q, _, x, _ = _mixed_scale_pair(rng, LANE_BLOCK, np.float64)
        differ += _block_square_sum(q, x, 0) != _kernels.sq_dist_row(q, x)
    assert differ > 20


def test_block_square_sum_checks_bounds_when_numba_does():
    q = np.zeros(20)
    assert _block_square_sum_checked(q, q, 4) == 0.0
    for j in (5, -1):
        with pytest.raises(IndexError):
            _block_square_sum_checked(q, q, j)


def _sequential_sums(q, rows, start, stop, sums):
    """``sums[r] + sum_{i=start}^{stop-1} (q_i - x_r[i])^2`` for each row, term after term in Python floats."""
    want = []
    for x, s in zip(rows, sums):
        s = float(s)
        for i in range(start, stop):
            v = float(q[i]) - float(x[i])
            s += v * v  # a product, as the kernels' (not pow)
        want.append(s)
    return tuple(want)


@nb.njit
def _add_row_squares4(q, x0, x1, x2, x3, start, stop, sums):
    return add_row_squares4(q, x0, x1, x2, x3, start, stop, sums[0], sums[1], sums[2], sums[3])


@nb.njit(boundscheck=True)
def _add_row_squares4_checked(q, x, start, stop):
    return add_row_squares4(q, x, x, x, x, start, stop, 0.0, 0.0, 0.0, 0.0)


@pytest.mark.kernels
@given(st.integers(1, 90), st.integers(0, 2**32 - 1), st.lists(st.sampled_from([np.float64, np.float32]),
       min_size=4, max_size=4), st.booleans(), st.data())
def test_add_row_squares4_is_four_sequential_sums_bit_for_bit(d, seed, dtypes, strided, data):
    """Each of the four vector lanes is its row's sum in order, as the scalar loop (Python floats)
    gives it: rows of float32 or float64 in any mix, contiguous or strided, any start and stop."""
    rng = np.random.default_rng(seed)
    q = ball_points(rng, 1, d, min_conformal=1e-3)[0] * 0.5
    rows = [_mixed_scale_row(rng, q, dt) for dt in dtypes]
    if strided:
        rows[1] = _strided(rows[1])
    start = data.draw(st.integers(0, d))
    stop = data.draw(st.integers(start, d))
    sums = rng.uniform(0.0, 1.0, 4)
    assert _add_row_squares4(q, *rows, start, stop, sums) == _sequential_sums(q, rows, start, stop, sums)


@nb.njit
def _add_row_squares8(q, rows, start, stop, sums):
    return add_row_squares8(q, rows, start, stop, sums)


@nb.njit(boundscheck=True)
def _add_row_squares8_checked(q, x, start, stop):
    return add_row_squares8(q, (x, x, x, x, x, x, x, x), start, stop, (0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0))


@pytest.mark.kernels
@given(st.integers(1, 90), st.integers(0, 2**32 - 1), st.sampled_from([np.float64, np.float32]), st.booleans(),
       st.data())
def test_add_row_squares8_is_eight_sequential_sums_bit_for_bit(d, seed, dtype, strided, data):
    """Each of the eight lanes (two 4-wide vectors) is its row's sum in order, as the scalar loop
    (Python floats) gives it: float32 or float64 rows, contiguous or strided, any start and stop."""
    rng = np.random.default_rng(seed)
    q = ball_points(rng, 1, d, min_conformal=1e-3)[0] * 0.5
    rows = [_mixed_scale_row(rng, q, dtype) for _ in range(8)]
    if strided:
        rows = [_strided(x) for x in rows]
    start = data.draw(st.integers(0, d))
    stop = data.draw(st.integers(start, d))
    sums = tuple(float(s) for s in rng.uniform(0.0, 1.0, 8))
    assert _add_row_squares8(q, tuple(rows), start, stop, sums) == _sequential_sums(q, rows, start, stop, sums)


@pytest.mark.parametrize("checked, rows", [(_add_row_squares4_checked, 4), (_add_row_squares8_checked, 8)])
def test_add_row_squares_check_bounds_when_numba_does(checked, rows):
    q = np.zeros(8)
    assert checked(q, q, 0, 8) == (0.0,) * rows
    for start, stop in ((0, 9), (-1, 3)):
        with pytest.raises(IndexError):
            checked(q, q, start, stop)


def _split_sum_reference(q, x):
    """``|q - x|^2`` as :func:`_kernels.sq_dist_split` documents it, in Python floats: lane ``l`` adds the terms
    ``i = l (mod 4)`` of the whole blocks of four in order, ``(l0 + l1) + (l2 + l3)``, then the last ``d % 4``
    terms in order."""
    d = q.shape[0]
    whole = d - d % ROW_LANES
    lanes = [0.0] * ROW_LANES
    for i in range(whole):
        v = float(q[i]) - float(x[i])
        lanes[i % ROW_LANES] += v * v  # a product, as the kernels' (not pow)
    s = (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])
    for i in range(whole, d):
        v = float(q[i]) - float(x[i])
        s += v * v
    return s


@nb.njit
def _split_square_sums8(q, rows, stop):
    return split_square_sums(q, rows, stop)


@nb.njit(boundscheck=True)
def _split_square_sums_checked(q, x, stop):
    return split_square_sums(q, (x, x), stop)


@pytest.mark.kernels
@given(st.integers(1, 110), st.integers(0, 2**32 - 1), st.sampled_from([np.float64, np.float32]), st.booleans())
def test_split_sums_are_their_lanes_bit_for_bit(d, seed, dtype, strided):
    """split_square_sums (eight rows), sq_dist8_split, sq_dist_split, sq_dist_pair_split and sq_dist8 with split
    give the bits of the documented lanes, for float32 or float64 rows, contiguous or strided (a column of a
    2-D array), and are within a few units of the last place of sq_dist_row; sq_dist8 without split is
    sq_dist_row's bits."""
    rng = np.random.default_rng(seed)
    q = ball_points(rng, 1, d, min_conformal=1e-3)[0] * 0.5
    rows = [_mixed_scale_row(rng, q, dtype) for _ in range(8)]
    if strided:
        rows = [_strided(x) for x in rows]
    want = [_split_sum_reference(q, x) for x in rows]
    whole = d - d % ROW_LANES
    assert _split_square_sums8(q, tuple(rows), whole) == tuple(_split_sum_reference(q[:whole], x[:whole]) for x in rows)
    assert _kernels.sq_dist8_split(q, tuple(rows)) == tuple(want)
    assert [_kernels.sq_dist_split(q, x) for x in rows] == want
    assert _kernels.sq_dist_pair_split(q, rows[0], rows[1]) == (want[0], want[1])
    assert _kernels.sq_dist8(q, tuple(rows), True) == tuple(want)
    assert _kernels.sq_dist8(q, tuple(rows), False) == tuple(_kernels.sq_dist_row(q, x) for x in rows)
    np.testing.assert_allclose(want, [_kernels.sq_dist_row(q, x) for x in rows], rtol=1e-13)


def _narrow_sum_reference(q, x):
    """``|q - x|^2`` as :func:`narrow_square_sums` documents it, in numpy float32 scalars (each operation
    rounded to float32): lane ``l`` adds the terms ``i = l (mod 8)`` of the whole blocks of eight in order,
    ``((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7))``, then the last ``d % 8`` terms in order."""
    q = np.asarray(q, dtype=np.float32)
    x = np.asarray(x, dtype=np.float32)
    d = q.shape[0]
    whole = d - d % NARROW_LANES
    lanes = [np.float32(0.0)] * NARROW_LANES
    for i in range(whole):
        v = q[i] - x[i]
        lanes[i % NARROW_LANES] = lanes[i % NARROW_LANES] + v * v
    s = ((lanes[0] + lanes[1]) + (lanes[2] + lanes[3])) + ((lanes[4] + lanes[5]) + (lanes[6] + lanes[7]))
    for i in range(whole, d):
        v = q[i] - x[i]
        s = s + v * v
    assert s.dtype == np.float32
    return s


@nb.njit
def _narrow_square_sums8(q, rows):
    return narrow_square_sums(q, rows)


@nb.njit(boundscheck=True)
def _narrow_square_sums_checked(q, x):
    return narrow_square_sums(q, (x, x))


@pytest.mark.kernels
@given(st.integers(1, 270), st.integers(0, 2**32 - 1), st.booleans(), st.booleans())
def test_narrow_sums_are_their_float32_lanes_bit_for_bit(d, seed, strided, copies):
    """narrow_square_sums (eight float32 rows, and one) gives the bits of the documented float32 lanes, for
    contiguous or strided rows (a column of a 2-D array), exact copies of the query included (sum 0), and
    is within (d / 8 + 13) 2^-24 of the float64 sum of the same float32 coordinates, relatively;
    deltas_to_rows with split divides those sums in float64, eight rows at a time or one by one."""
    rng = np.random.default_rng(seed)
    q = (ball_points(rng, 1, d, min_conformal=1e-3)[0] * 0.5).astype(np.float32)
    rows = [_mixed_scale_row(rng, q.astype(np.float64), np.float32) for _ in range(8)]
    if copies:
        rows[3] = q.copy()
    if strided:
        rows = [_strided(x) for x in rows]
        q = _strided(q)
    want = tuple(_narrow_sum_reference(q, x) for x in rows)
    got = _narrow_square_sums8(q, tuple(rows))
    assert tuple(np.float32(g) for g in got) == want
    assert [np.float32(_narrow_square_sums8(q, (x,))[0]) for x in rows] == list(want)
    exact = [_kernels.sq_dist_row(q.astype(np.float64), x.astype(np.float64)) for x in rows]
    bound = (d / NARROW_LANES + 13) * 2.0**-24
    for g, e in zip(want, exact):
        assert abs(float(g) - e) <= bound * e
    if copies:
        assert want[3] == 0.0
    points = np.ascontiguousarray(np.stack(rows + rows[:3]))  # eight rows, then three one by one
    conf = rng.uniform(1e-9, 1.0, points.shape[0])
    ids = np.arange(points.shape[0], dtype=np.int32)
    out = np.empty(points.shape[0])
    cq = 0.7
    _narrow_deltas(np.ascontiguousarray(q), cq, points, conf, ids, out)
    want_rows = list(want) + list(want[:3])
    assert out.tolist() == [float(np.float64(w) / (cq * c)) for w, c in zip(want_rows, conf)]


@nb.njit
def _narrow_deltas(q, cq, points, conf, ids, out):
    _kernels.deltas_to_rows(q, cq, points, conf, ids, True, out)


@pytest.mark.kernels
def test_split_deltas_sum_float32_points_in_float32_and_float64_points_over_four_lanes():
    """deltas_to_rows with split (NN-descent's keys): a float32 query and points sum in float32
    (narrow_square_sums' lanes), float64 ones over four float64 lanes (sq_dist_split's bits), eight rows at a
    time and then one by one."""
    rng = np.random.default_rng(5)
    X = ball_points(rng, 20, 37, min_conformal=1e-6)
    cx = _kernels.conformal_factor(X)
    ids = rng.integers(0, 20, 13).astype(np.int32)
    for dtype in (np.float32, np.float64):
        P = np.ascontiguousarray(X.astype(dtype))
        got = np.empty(13)
        _narrow_deltas(P[4], cx[4], P, cx, ids, got)
        if dtype == np.float32:
            sums = [np.float64(_narrow_sum_reference(P[4], P[v])) for v in ids]
        else:
            sums = [_split_sum_reference(P[4], P[v]) for v in ids]
        assert got.tolist() == [float(s_ / (cx[4] * cx[v])) for s_, v in zip(sums, ids)]


@pytest.mark.kernels
@given(st.integers(1, 130), st.integers(0, 2**32 - 1), st.sampled_from(["float64", "float32", "mixed"]))
def test_deltas_to_rows_are_delta_row_bit_for_bit_at_every_length(d, seed, precision):
    """deltas_to_rows without split gives delta_row's bits for 0 to 19 rows (groups of eight, a last group
    of two to seven filled up with copies of its last row, a last single row), ids repeated and out of
    order; float64 or float32 query and points, or a float64 query against float32 points (the Gram scan's
    evaluations). Nothing past the ids' end is written."""
    rng = np.random.default_rng(seed)
    X = ball_points(rng, 12, d, min_conformal=1e-6)
    cx = _kernels.conformal_factor(X)
    points = np.ascontiguousarray(X.astype(np.float64 if precision == "float64" else np.float32))
    q = X[0] * 0.5 if precision != "float32" else (X[0] * 0.5).astype(np.float32)
    cq = float(_kernels.conformal_factor(np.asarray(q, dtype=np.float64)[None, :])[0])
    for m in range(20):
        ids = rng.integers(0, 12, m).astype(np.int64)
        got = np.full(m + 3, -1.0)
        _kernels.deltas_to_rows(q, cq, points, cx, ids, False, got)
        assert got[:m].tolist() == [_kernels.delta_row(q, cq, points[v], cx[v]) for v in ids]
        assert got[m:].tolist() == [-1.0] * 3


def test_narrow_sums_check_bounds_when_numba_does():
    q = np.zeros(16, dtype=np.float32)
    assert _narrow_square_sums_checked(q, q) == (0.0, 0.0)
    with pytest.raises(IndexError):
        _narrow_square_sums_checked(q, q[:8])
    with pytest.raises(IndexError):
        _narrow_square_sums_checked(q, q[:12])


def test_split_sums_check_bounds_when_numba_does():
    q = np.zeros(8)
    assert _split_square_sums_checked(q, q, 8) == (0.0, 0.0)
    with pytest.raises(IndexError):
        _split_square_sums_checked(q, q, 12)


def _lanes_reference(q, x, start, stop):
    """The terms ``start <= i < stop`` of ``|q - x|^2`` in four lanes (lane ``l``: ``i = start + l (mod 4)``, in
    order), ``(l0 + l1) + (l2 + l3)``, in Python floats."""
    lanes = [0.0] * ROW_LANES
    for i in range(start, stop):
        v = float(q[i]) - float(x[i])
        lanes[(i - start) % ROW_LANES] += v * v
    return (lanes[0] + lanes[1]) + (lanes[2] + lanes[3])


def _split_blocks_reference(q, x):
    """``|q - x|^2`` as :func:`_kernels.delta4_split_below` documents its sum: blocks of ``SPLIT_STRIDE``
    coordinates (the last one shorter) up to ``d - d % 4``, each in four lanes, added in order; then the
    last ``d % 4`` terms in order."""
    d = q.shape[0]
    whole = d - d % ROW_LANES
    s = 0.0
    for start in range(0, whole, _kernels.SPLIT_STRIDE):
        s += _lanes_reference(q, x, start, min(start + _kernels.SPLIT_STRIDE, whole))
    for i in range(whole, d):
        v = float(q[i]) - float(x[i])
        s += v * v
    return s


@nb.njit
def _split_block_sums4(q, rows, start, stop):
    return split_square_block_sums(q, rows, start, stop)


@nb.njit(boundscheck=True)
def _split_block_sums_checked(q, x, start, stop):
    return split_square_block_sums(q, (x,), start, stop)


@pytest.mark.kernels
@given(st.integers(1, 110), st.integers(0, 2**32 - 1), st.sampled_from([np.float64, np.float32]), st.booleans(),
       st.data())
def test_split_block_sums_are_their_lanes_bit_for_bit(d, seed, dtype, strided, data):
    """split_square_block_sums: each row's terms start .. stop - 1 in the documented lanes, for float32 or
    float64 rows, contiguous or strided; from 0 it is split_square_sums."""
    rng = np.random.default_rng(seed)
    q = ball_points(rng, 1, d, min_conformal=1e-3)[0] * 0.5
    rows = [_mixed_scale_row(rng, q, dtype) for _ in range(4)]
    if strided:
        rows = [_strided(x) for x in rows]
    start = data.draw(st.integers(0, d))
    stop = start + ROW_LANES * data.draw(st.integers(0, (d - start) // ROW_LANES))
    got = _split_block_sums4(q, tuple(rows), start, stop)
    assert got == tuple(_lanes_reference(q, x, start, stop) for x in rows)
    whole = d - d % ROW_LANES
    assert _split_block_sums4(q, tuple(rows), 0, whole) == _split_square_sums8(q, tuple(rows), whole)


def test_split_block_sums_check_bounds_when_numba_does():
    q = np.zeros(8)
    assert _split_block_sums_checked(q, q, 4, 8) == (0.0,)
    for start, stop in ((4, 12), (-4, 0)):
        with pytest.raises(IndexError):
            _split_block_sums_checked(q, q, start, stop)


@pytest.mark.kernels
@given(st.integers(1, 130), st.integers(0, 2**32 - 1), st.sampled_from([np.float64, np.float32]),
       st.floats(0.0, 2.0), st.booleans())
def test_split_deltas_are_their_blocks_or_prove_they_are_not_below(d, seed, dtype, where, mixed):
    """delta4_split_below and delta_split_below: each finite value is the documented block sum over
    ``c_q c_x`` bit for bit (the same for a row alone and in a group of four), ``inf`` only when that
    value is ``>= worst``; within a few units of the last place of delta_row."""
    rng = np.random.default_rng(seed)
    q = ball_points(rng, 1, d, min_conformal=1e-12)[0]
    if mixed:
        X = np.stack([_mixed_scale_row(rng, q * 0.5, dtype) for _ in range(4)])
        q = q * 0.5
    else:
        X = ball_points(rng, 4, d, min_conformal=1e-12 if dtype == np.float64 else 1e-5).astype(dtype)
    cq = _kernels.conformal_factor(q[None, :])[0]
    cx = _kernels.conformal_factor(X.astype(np.float64))
    want = np.array([_split_blocks_reference(q, x) / (cq * c) for x, c in zip(X, cx)])
    np.testing.assert_allclose(want, [_kernels.delta_row(q, cq, x, c) for x, c in zip(X, cx)], rtol=1e-13)
    rows = [a for x, c in zip(X, cx) for a in (x, c)]
    for worst in (np.median(want) * where, want.min(), want.max(), np.nextafter(want.max(), np.inf), np.inf, 0.0):
        four = _kernels.delta4_split_below(q, cq, *rows, worst)
        for r in range(4):
            one = _kernels.delta_split_below(q, cq, X[r], cx[r], worst)
            for got in (four[r], one):
                if np.isinf(got):
                    assert want[r] >= worst
                else:
                    assert got == want[r]
    assert _kernels.delta4_split_below(q, cq, *rows, np.inf) == tuple(want)
    assert [_kernels.delta_split_below(q, cq, x, c, np.inf) for x, c in zip(X, cx)] == list(want)
    # a row finished after a group's early stop (rare: only a prefix on the screen's rounding edge takes it)
    whole = d - d % ROW_LANES
    for first in range(0, whole + 1, _kernels.SPLIT_STRIDE):
        prefix = 0.0
        for start in range(0, first, _kernels.SPLIT_STRIDE):
            prefix += _lanes_reference(q, X[0], start, min(start + _kernels.SPLIT_STRIDE, whole))
        assert _kernels._split_rest(q, X[0], prefix, first) == _split_blocks_reference(q, X[0])


def test_split_sum_is_not_the_sequential_order():
    """The lanes are a real constraint: on mixed-scale rows the sequential sum rounds differently in many
    cases (so the bit-for-bit test above can fail)."""
    rng = np.random.default_rng(3)
    differ = 0
    for _ in range(200):
        q, _, x, _ = _mixed_scale_pair(rng, 40, np.float64)
        differ += _kernels.sq_dist_split(q, x) != _kernels.sq_dist_row(q, x)
    assert differ > 20


def test_delta_lanes_below_needs_its_shrink_factor():
    """The lanes' sum exceeds the sequential one on some rows: without the shrink factor such a row
    would be abandoned against a worst key one ulp above its true delta (so the test above can fail)."""
    rng = np.random.default_rng(1)
    wrongly_abandoned = 0
    for _ in range(2000):
        d = int(rng.integers(16, 200))
        q, cq, x, cx = _mixed_scale_pair(rng, d, np.float64)
        full = _kernels.delta_row(q, cq, x, cx)
        worst = np.nextafter(full, np.inf)
        assert _kernels.delta_lanes_below(q, cq, x, cx, worst, _kernels.lanes_shrink(d)) == full
        wrongly_abandoned += np.isinf(_kernels.delta_lanes_below(q, cq, x, cx, worst, 1.0))
    assert wrongly_abandoned > 0


@pytest.mark.kernels
@given(n=st.integers(1, 200), d=st.integers(1, 70), k=st.integers(1, 12), seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from([np.float64, np.float32]), dup=st.integers(0, 30))
def test_brute_scan_equals_offering_every_delta_row_in_order(n, d, k, seed, dtype, dup):
    """The scan (four lanes and a screen from LANES_MIN_DIM on) returns what offering each row's
    delta_row in row order gives: the same ids, ties to the lower row, and the same bits."""
    rng = np.random.default_rng(seed)
    X = ball_points(rng, n, d, min_conformal=1e-12 if dtype == np.float64 else 1e-5)
    X[rng.integers(0, n, min(dup, n))] = X[rng.integers(0, n, min(dup, n))]  # exact duplicates: ties
    X = X.astype(dtype)
    cx = _kernels.conformal_factor(X.astype(np.float64))
    Q = np.concatenate([ball_points(rng, 3, d), X[:2].astype(np.float64)])
    cq = _kernels.conformal_factor(Q)
    full = np.array([[_kernels.delta_row(q, c, X[j], cx[j]) for j in range(n)] for q, c in zip(Q, cq)])
    ref_ids = np.argsort(full, axis=1, kind="stable")[:, :k]
    ref_d = np.take_along_axis(full, ref_ids, 1)
    for scan in (_kernels.brute_knn_delta_serial, _kernels.brute_knn_delta):
        ids, ds = scan(Q, cq, read_only(X), read_only(cx), k)
        np.testing.assert_array_equal(ids[:, :min(k, n)], ref_ids)
        np.testing.assert_array_equal(ds[:, :min(k, n)], ref_d)
        assert np.all(ids[:, n:] == -1) and np.all(np.isinf(ds[:, n:]))


@pytest.mark.kernels
@given(n=st.integers(1, 150), d=st.integers(1, 70), seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from([np.float64, np.float32]))
def test_brute_range_scan_keeps_exactly_the_rows_with_delta_row_at_most_the_limit(n, d, seed, dtype):
    """Count and fill passes (screened from LANES_MIN_DIM on) against ``delta_row <= limit``, with
    limits equal to a row's delta (a tie at the limit is kept) and one ulp below it."""
    rng = np.random.default_rng(seed)
    X = ball_points(rng, n, d, min_conformal=1e-12 if dtype == np.float64 else 1e-5).astype(dtype)
    cx = _kernels.conformal_factor(X.astype(np.float64))
    Q = np.concatenate([ball_points(rng, 2, d), X[:1].astype(np.float64)])
    cq = _kernels.conformal_factor(Q)
    full = np.array([[_kernels.delta_row(q, c, X[j], cx[j]) for j in range(n)] for q, c in zip(Q, cq)])
    for pick in (0.0, 0.3, 1.0):
        at = np.quantile(full, pick, axis=1, method="nearest")
        for limits in (at, np.nextafter(at, -np.inf), np.full(len(Q), np.inf), np.zeros(len(Q))):
            limits = np.ascontiguousarray(limits)
            counts = _kernels.brute_range_count(Q, cq, X, cx, limits)
            want = [np.flatnonzero(full[i] <= limits[i]) for i in range(len(Q))]
            assert counts.tolist() == [len(w) for w in want]
            offsets = np.concatenate([[0], np.cumsum(counts)])
            ids = np.empty(offsets[-1], dtype=np.int64)
            deltas = np.empty(offsets[-1])
            _kernels.brute_range_fill(Q, cq, X, cx, limits, offsets, ids, deltas)
            for i in range(len(Q)):
                np.testing.assert_array_equal(ids[offsets[i]:offsets[i + 1]], want[i])
                np.testing.assert_array_equal(deltas[offsets[i]:offsets[i + 1]], full[i, want[i]])


@pytest.mark.kernels
@given(n=st.integers(0, 40), d=st.integers(1, 5), seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from([np.float64, np.float32, np.int32]))
def test_gather_rows_in_place_equals_fancy_indexing(n, d, seed, dtype):
    rng = np.random.default_rng(seed)
    rows = (rng.normal(size=(n, d)) * 100).astype(dtype)
    conformal = rng.uniform(size=n)
    perm = rng.permutation(n)
    want_rows, want_conformal = rows[perm], conformal[perm]
    _kernels.gather_points_in_place(rows, conformal, perm)
    np.testing.assert_array_equal(rows, want_rows)
    np.testing.assert_array_equal(conformal, want_conformal)
