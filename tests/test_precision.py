"""Curvature c != 1 and Lorentz input keep full precision (60-digit mpmath reference).

Points are placed at *unit-curvature* hyperbolic norm ``h`` up to 30, i.e.
``1 - c|x|^2 ~ 4 exp(-h)`` down to ~4e-13, for every curvature in ``CURVATURES``.
The reference is computed in 60-digit arithmetic on the caller's own float64
coordinates. Pairs are well separated in direction (the index stores points
rescaled by ``sqrt(c)``, rounded once; README "Numerical limits" gives the limit
this sets on very close pairs near the boundary).
"""

from __future__ import annotations

import mpmath
import numpy as np
import pytest

import hypann
from hypann.geometry import _kernels, models, poincare as P

CURVATURES = [0.01, 0.5, 1.0, 2.0, 10.0]
DIGITS = 60
RTOL = 1e-12


def mp_conformal(x, c):
    """``1 - c|x|^2`` of a float64 row, in 60 digits."""
    with mpmath.workdps(DIGITS):
        return 1 - mpmath.mpf(float(c)) * sum(mpmath.mpf(float(v)) ** 2 for v in x)


def mp_dist(x, y, c):
    """Poincare distance at curvature -c of two float64 rows, in 60 digits.

    ``d = (2/sqrt(c)) asinh(sqrt(c |x-y|^2 / ((1-c|x|^2)(1-c|y|^2))))``.
    """
    with mpmath.workdps(DIGITS):
        cc = mpmath.mpf(float(c))
        sd = sum((mpmath.mpf(float(a)) - mpmath.mpf(float(b))) ** 2 for a, b in zip(x, y))
        return 2 / mpmath.sqrt(cc) * mpmath.asinh(mpmath.sqrt(cc * sd / (mp_conformal(x, c) * mp_conformal(y, c))))


def mp_lorentz_image(x, c):
    """Exact ball image ``xs / (1 + sqrt(c) x0)`` of a float64 Lorentz row (mp numbers).

    The point is the one of the hyperboloid with spatial part ``xs``
    (``sqrt(c) x0 = sqrt(1 + c|xs|^2)``), as hypann reads a row.
    """
    with mpmath.workdps(DIGITS):
        xs = [mpmath.mpf(float(v)) for v in x[1:]]
        den = 1 + mpmath.sqrt(1 + mpmath.mpf(float(c)) * sum(v * v for v in xs))
        return [v / den for v in xs]


def mp_lorentz_dist(x, y, c):
    with mpmath.workdps(DIGITS):
        cc = mpmath.mpf(float(c))
        p, q = mp_lorentz_image(x, c), mp_lorentz_image(y, c)
        lp = 1 - cc * sum(v * v for v in p)
        lq = 1 - cc * sum(v * v for v in q)
        sd = sum((a - b) ** 2 for a, b in zip(p, q))
        return 2 / mpmath.sqrt(cc) * mpmath.asinh(mpmath.sqrt(cc * sd / (lp * lq)))


def rel_err(got, ref):
    with mpmath.workdps(DIGITS):
        return float(abs((mpmath.mpf(float(got)) - ref) / ref))


def poincare_points(rng, n, d, c, h_low, h_high):
    """Caller coordinates at curvature c with unit-curvature hyperbolic norms in [h_low, h_high]."""
    u = rng.normal(size=(n, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    h = rng.uniform(h_low, h_high, n)
    return u * (np.tanh(h / 2) / np.sqrt(c))[:, None]


def lorentz_points(rng, n, d, c, h_low, h_high):
    """Rows (x0, xs) on -x0^2 + |xs|^2 = -1/c at unit-curvature hyperbolic norms in [h_low, h_high]."""
    u = rng.normal(size=(n, d))
    u /= np.linalg.norm(u, axis=1, keepdims=True)
    h = rng.uniform(h_low, h_high, n)
    return np.c_[np.cosh(h), u * np.sinh(h)[:, None]] / np.sqrt(c)


# ----------------------------------------------------------------- geometry
@pytest.mark.parametrize("c", CURVATURES)
def test_conformal_factor_of_caller_coordinates(c):
    rng = np.random.default_rng(1)
    X = poincare_points(rng, 60, 6, c, 0.0, 30.0)
    ref = np.array([float(mp_conformal(x, c)) for x in X])
    np.testing.assert_allclose(P.conformal_factor(X, c=c), ref, rtol=1e-14)
    np.testing.assert_allclose(_kernels.conformal_factor_curved(X, c), ref, rtol=1e-14)
    if c != 1.0:  # rescaling first (the old way) loses log10(1/lambda) digits
        rescaled_first = _kernels.conformal_factor(X * np.sqrt(c))
        assert np.max(np.abs(rescaled_first - ref) / ref) > 1e-6


@pytest.mark.parametrize("c", CURVATURES)
def test_geometry_distance_at_curvature_c(c):
    rng = np.random.default_rng(2)
    X = poincare_points(rng, 25, 5, c, 0.0, 30.0)
    Y = np.vstack([poincare_points(rng, 25, 5, c, 0.0, 30.0),
                   X * (1 - 1e-14)])  # very close pairs near the boundary too (caller coordinates)
    X = np.vstack([X, X])
    got = P.dist(X, Y, c=c)
    errs = [rel_err(g, mp_dist(x, y, c)) for g, x, y in zip(got, X, Y)]
    assert max(errs) < RTOL


@pytest.mark.parametrize("c", CURVATURES)
def test_lorentz_conformal_factor_and_distance(c):
    rng = np.random.default_rng(3)
    L = lorentz_points(rng, 40, 5, c, 0.0, 30.0)
    with mpmath.workdps(DIGITS):
        ref = [1 - mpmath.mpf(float(c)) * sum(v * v for v in mp_lorentz_image(x, c)) for x in L]
    got = models.lorentz_conformal_factor(L, c=c)
    assert max(rel_err(g, r) for g, r in zip(got, ref)) < 1e-14
    # the ball point's own conformal factor would lose digits at the boundary
    naive = P.conformal_factor(models.lorentz_to_poincare(L, c=c), c=c)
    assert max(rel_err(g, r) for g, r in zip(naive, ref)) > 1e-6
    d = models.lorentz_dist(L[:20], L[20:], c=c)
    assert max(rel_err(g, mp_lorentz_dist(x, y, c)) for g, x, y in zip(d, L[:20], L[20:])) < RTOL


# ----------------------------------------------------------------- the index
@pytest.mark.parametrize("c", CURVATURES)
@pytest.mark.parametrize("algorithm", ["brute", "hkdtree", "recentering"])
def test_index_distances_match_mpmath_poincare(c, algorithm):
    rng = np.random.default_rng(4)
    X = np.vstack([poincare_points(rng, 150, 5, c, 20.0, 30.0), poincare_points(rng, 50, 5, c, 0.0, 20.0)])
    Q = poincare_points(rng, 8, 5, c, 25.0, 30.0)
    res = hypann.HyperbolicIndex(algorithm=algorithm, c=c).build(X).search(Q, 4)
    errs = [rel_err(res.distances[i, j], mp_dist(Q[i], X[res.indices[i, j]], c))
            for i in range(len(Q)) for j in range(4)]
    assert max(errs) < RTOL
    # and they are the k nearest: brute force on the caller's coordinates
    full = P.pairwise_dist(Q, X, c=c)
    np.testing.assert_allclose(res.distances, np.sort(full, axis=1)[:, :4], rtol=RTOL)


@pytest.mark.parametrize("c", CURVATURES)
def test_index_distances_match_mpmath_lorentz(c):
    rng = np.random.default_rng(5)
    X = lorentz_points(rng, 200, 5, c, 0.0, 30.0)
    Q = lorentz_points(rng, 8, 5, c, 25.0, 30.0)
    res = hypann.HyperbolicIndex(algorithm="brute", model="lorentz", c=c).build(X).search(Q, 4)
    errs = [rel_err(res.distances[i, j], mp_lorentz_dist(Q[i], X[res.indices[i, j]], c))
            for i in range(len(Q)) for j in range(4)]
    assert max(errs) < RTOL


def test_stored_conformal_survives_save_and_load(tmp_path):
    rng = np.random.default_rng(6)
    c = 2.0
    X = poincare_points(rng, 100, 4, c, 25.0, 30.0)
    Q = poincare_points(rng, 5, 4, c, 25.0, 30.0)
    idx = hypann.HyperbolicIndex(c=c).build(X)
    idx.save(tmp_path / "a.hypann")
    back = hypann.load(tmp_path / "a.hypann")
    np.testing.assert_array_equal(back.conformal_, idx.conformal_)
    np.testing.assert_array_equal(back.search(Q, 3).distances, idx.search(Q, 3).distances)


def test_sklearn_training_neighbours_keep_precision():
    from hypann.sklearn import HyperbolicNearestNeighbors

    rng = np.random.default_rng(7)
    c = 0.5
    X = poincare_points(rng, 80, 4, c, 25.0, 30.0)
    dist, ind = HyperbolicNearestNeighbors(n_neighbors=2, c=c).fit(X).kneighbors()
    errs = [rel_err(dist[i, j], mp_dist(X[i], X[ind[i, j]], c)) for i in range(0, 80, 8) for j in range(2)]
    assert max(errs) < RTOL


@pytest.mark.parametrize("c", [0.5, 2.0])
def test_rounded_lorentz_rows_give_the_conformal_factor_of_the_true_point(c):
    """A float64 row is the true point rounded: off the hyperboloid by ~1e-16 c x0^2.

    Reading the point from ``xs`` (hypann) gives the true ``1 - c|p|^2`` to a
    few ulps; mixing ``x0`` and ``xs`` in ``xs / (1 + sqrt(c) x0)`` would be
    off by ~1e-16 sqrt(c) x0 relative (~1e-4 at hyperbolic norm 30).
    """
    from hypann._validation import check_points

    rng = np.random.default_rng(8)
    errs, mixed_errs = [], []
    with mpmath.workdps(DIGITS):
        cc = mpmath.mpf(c)
        for _ in range(20):
            h = mpmath.mpf(float(rng.uniform(25, 30)))
            u = rng.normal(size=4)
            u = [mpmath.mpf(float(v)) for v in u / np.linalg.norm(u)]
            norm_u = mpmath.sqrt(sum(v * v for v in u))
            true = [mpmath.cosh(h) / mpmath.sqrt(cc)] + [v / norm_u * mpmath.sinh(h) / mpmath.sqrt(cc) for v in u]
            row = np.array([float(v) for v in true])  # correctly rounded coordinates
            true_conformal = 2 / (1 + mpmath.cosh(h))
            _, conformal = check_points(row[None, :], model="lorentz", c=c)
            errs.append(rel_err(conformal[0], true_conformal))
            den = 1 + mpmath.sqrt(cc) * mpmath.mpf(float(row[0]))
            mixed = 1 - cc * sum((mpmath.mpf(float(v)) / den) ** 2 for v in row[1:])
            mixed_errs.append(float(abs(mixed / true_conformal - 1)))
    assert max(errs) < 1e-14
    assert max(mixed_errs) > 1e-7


@pytest.mark.parametrize("model", ["poincare", "lorentz"])
def test_points_beyond_float64_are_refused_not_rounded_onto_the_boundary(model):
    h, c = 38.0, 2.0
    if model == "lorentz":
        X = np.array([[np.cosh(h), np.sinh(h), 0.0]]) / np.sqrt(c)
    else:  # 1 - c|x|^2 > 0 for the caller's float64 row, but sqrt(c) x rounds to norm 1
        X = np.array([[0.7071067811865475, 0.0]])  # 1 - 2 x^2 = 1.8e-16, sqrt(2) x rounds to 1.0
        assert P.conformal_factor(X, c=c)[0] > 0 and X[0, 0] * np.sqrt(c) == 1.0
    with pytest.raises(ValueError, match=r"X row 0 is too far from the origin for float64: its conformal factor"):
        hypann.HyperbolicIndex(model=model, c=c).build(X)
