"""Tests of the independent data families (hypann.datasets.families)."""

from __future__ import annotations

import numpy as np
import pytest

import hypann.datasets.families as families
from hypann.datasets.families import FAMILIES, make_family
from hypann.datasets.synthetic import _check_range
from hypann.geometry._kernels import conformal_factor
from hypann.geometry.poincare import dist0
from tests.conftest import brute_knn_delta

SYNTHETIC = [name for name, fam in FAMILIES.items() if fam.dims is None]


@pytest.mark.parametrize("name", SYNTHETIC)
@pytest.mark.parametrize("dim", [2, 10, 100])
def test_synthetic_families_are_inside_the_ball_and_seeded(name, dim):
    X = make_family(name, 1500, dim, seed=3)
    assert X.shape == (1500, dim) and X.dtype == np.float64
    assert np.all(np.isfinite(X))
    assert np.all(conformal_factor(X) > 0.0)
    np.testing.assert_array_equal(X, make_family(name, 1500, dim, seed=3))
    assert not np.array_equal(X, make_family(name, 1500, dim, seed=4))


def test_gaussian_mixture_conformal_closed_form_matches_compensated_kernel():
    rng = np.random.default_rng(0)
    points, conf, label = families._wrapped_normal_mixture(rng, 2000, 10, 50, (0.01, 1.0), (12.0, 24.0))
    # the closed form is for the ideal point; rounding the coordinates moves 1-|x|^2 by ~1e-15
    np.testing.assert_allclose(conf, conformal_factor(points), rtol=1e-9, atol=2e-15)
    assert conf.min() < 1e-9
    assert label.shape == (2000,) and label.max() < 50


def test_gaussian_mixture_has_clusters_of_uneven_size():
    rng = np.random.default_rng(1)
    _, _, label = families._wrapped_normal_mixture(rng, 20_000, 10, 100, (0.1, 2.0), (0.5, 12.0))
    sizes = np.bincount(label, minlength=100)
    assert sizes.max() > 5 * np.median(sizes)


def test_mixture_labels_match_the_points():
    X, labels = families.gaussian_mixture(3000, 10, seed=4, return_labels=True)
    np.testing.assert_array_equal(X, families.gaussian_mixture(3000, 10, seed=4))
    assert labels.shape == (3000,) and labels.dtype.kind == "i"
    # clusters are separated: a point's nearest other point is mostly in its own cluster
    cx = conformal_factor(X)
    ids, _ = brute_knn_delta(X, cx, X, cx, 2)
    assert np.mean(labels[ids[:, 1]] == labels) > 0.9


def test_default_cluster_count_is_log_uniform_in_range():
    counts = [families._n_clusters(np.random.default_rng(s), None) for s in range(200)]
    assert min(counts) >= 10 and max(counts) <= 1000
    assert min(counts) < 30 and max(counts) > 300  # spans the range, not a fixed value


def test_hyperbolic_uniform_norm_law():
    # Uniform in the hyperbolic ball: P(r <= s) = int_0^s sinh^(d-1) / int_0^R sinh^(d-1).
    dim, radius = 3, 4.0
    X = families.hyperbolic_uniform(40_000, dim, seed=2, radius=radius)
    r = dist0(X)
    assert r.max() <= radius * (1 + 1e-9)
    grid = np.linspace(0, radius, 20001)
    dens = np.sinh(grid) ** (dim - 1)
    cdf = np.cumsum(dens) / dens.sum()
    for s in (1.5, 3.0, 3.8):
        want = np.interp(s, grid, cdf)
        assert abs(np.mean(r <= s) - want) < 0.01
    # 100-D: nearly everything within 0.1 of the boundary sphere
    r100 = dist0(families.hyperbolic_uniform(5000, 100, seed=2))
    assert np.mean(r100 > 9.9) > 0.99


def test_boundary_heavy_is_boundary_heavy():
    for dim in (10, 100):
        c = conformal_factor(families.boundary_heavy(5000, dim, seed=0))
        assert np.mean(c < 1e-4) > 0.9
        assert c.min() > 0.0


def test_duplicates_have_many_exact_copies():
    X = families.duplicates(4000, 10, seed=1)
    _, counts = np.unique(X, axis=0, return_counts=True)
    assert len(counts) <= 4000 // 8
    assert np.mean(counts >= 2) > 0.9 and counts.max() > 10


def test_wordnet_family_samples_the_registry_points(monkeypatch):
    full = np.random.default_rng(0).uniform(-0.3, 0.3, (500, 10))
    calls = []

    def fake_load_points(name, seed=0):
        calls.append(name)
        return full.copy()

    import hypann.datasets.registry as registry

    monkeypatch.setattr(registry, "load_points", fake_load_points)
    families._wordnet_points.cache_clear()
    try:
        X = families.wordnet_nouns(100, 10, seed=5)
        assert calls == ["wordnet-nouns-10d"]
        rows = [int(np.flatnonzero((full == x).all(axis=1))[0]) for x in X]
        assert len(set(rows)) == 100 and rows == sorted(rows)
        np.testing.assert_array_equal(X, families.wordnet_nouns(100, 10, seed=5))
        with pytest.raises(ValueError, match=r"wordnet_nouns has 500 points, got n=501"):
            families.wordnet_nouns(501, 10)
    finally:
        families._wordnet_points.cache_clear()


def test_wordnet_family_shipped_embedding():
    X = make_family("wordnet_nouns", 2000, 10, seed=0)
    assert X.shape == (2000, 10)
    c = conformal_factor(X)
    assert np.all(c > 0.0) and np.mean(c <= c.min() * 1.001) > 0.5  # most points on one norm sphere


def test_errors_name_the_bad_value():
    with pytest.raises(ValueError, match=r"unknown family 'trees'; expected one of \['boundary_heavy'"):
        make_family("trees", 10, 10)
    with pytest.raises(ValueError, match=r"wordnet_nouns has dim in \(10, 100\) only, got dim=3"):
        make_family("wordnet_nouns", 10, 3)
    with pytest.raises(ValueError, match=r"dim must be >= 2 for a hyperbolic data set, got dim=1"):
        make_family("gaussian_mixture", 10, 1)
    with pytest.raises(ValueError, match=r"n must be a positive integer, got n=0"):
        make_family("hyperbolic_uniform", 0, 5)
    with pytest.raises(ValueError, match=r"seed must be an integer, got seed=1.5"):
        make_family("duplicates", 10, 5, seed=1.5)
    with pytest.raises(ValueError, match=r"radius must be <= 36.0, got radius=50"):
        families.hyperbolic_uniform(10, 5, radius=50)
    with pytest.raises(ValueError, match=r"spread must be a pair of positive numbers, got spread=\(0, 1\)"):
        families.gaussian_mixture(10, 5, spread=(0, 1))
    with pytest.raises(ValueError, match=r"n_clusters must be a positive integer, got n_clusters=0"):
        families.gaussian_mixture(10, 5, n_clusters=0)
    assert _check_range((1, 2), "x", low=0) == (1, 2)


def test_far_queries_take_the_data_norms_or_a_range_and_random_directions():
    X = make_family("boundary_heavy", 2000, 10, seed=0)
    Q = families.far_queries(X, 500, seed=1)
    assert Q.shape == (500, 10) and np.all(conformal_factor(Q) > 0.0)
    np.testing.assert_array_equal(Q, families.far_queries(X, 500, seed=1))
    h, hx = dist0(Q), dist0(X)
    assert hx.min() - 1e-6 <= h.min() and h.max() <= hx.max() + 1e-6  # norms drawn from the data's
    low = families.far_queries(X, 500, seed=1, norms=(1.0, 4.0))
    assert np.all((dist0(low) >= 1.0 - 1e-9) & (dist0(low) <= 4.0 + 1e-9))
    # directions ignore the data: far from every point, unlike held-out points of the family
    cx = conformal_factor(X)
    _, far = brute_knn_delta(Q, conformal_factor(Q), X, cx, 1)
    _, near = brute_knn_delta(X[:500], cx[:500], X[500:], cx[500:], 1)
    assert np.median(far) > 100 * np.median(near)


@pytest.mark.parametrize("kwargs, match", [
    ({"m": 0}, "m"), ({"m": 5, "norms": (4.0, 1.0)}, "lo <= hi"), ({"m": 5, "norms": (1.0,)}, "pair"),
    ({"m": 5, "norms": (1.0, 40.0)}, "norms\\[1\\]"), ({"m": 5, "seed": 1.5}, "seed"),
])
def test_far_queries_errors_name_the_bad_value(kwargs, match):
    X = make_family("gaussian_mixture", 100, 4, seed=0)
    with pytest.raises(ValueError, match=match):
        families.far_queries(X, **kwargs)
    with pytest.raises(ValueError, match="points"):
        families.far_queries(np.zeros((0, 3)), 3)
    for bad in (np.full((2, 3), np.nan), np.array([[1.0, 0.0, 0.0]])):
        with pytest.raises(ValueError, match="inside the unit ball"):
            families.far_queries(bad, 3)
