"""``algorithm="auto"``: exact whichever method it picks; the pick is measured, deterministic and saved."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypann
from hypann.datasets.families import make_family
from hypann.geometry import poincare as P
from hypann.search.auto import AutoSearch, default_scan_fraction
from tests.conftest import ball_points
from tests.test_exact_search import datasets, true_knn_dist


@settings(max_examples=40, deadline=None)
@given(data=datasets(), k_frac=st.floats(0.0, 1.0), scan_fraction=st.sampled_from([None, 1e-9, 1.0]))
def test_auto_equals_brute_force(data, k_frac, scan_fraction):
    X, Q = data
    k = max(1, int(round(k_frac * len(X))))
    index = hypann.HyperbolicIndex(algorithm="auto", random_state=0, scan_fraction=scan_fraction).build(X)
    if scan_fraction == 1e-9:
        assert index.algorithm_.choice_ == "brute"
    if scan_fraction == 1.0:
        assert index.algorithm_.choice_ == "hkdtree"
    res = index.search(Q, k)
    brute = hypann.HyperbolicIndex(algorithm="brute").build(X).search(Q, k)
    np.testing.assert_array_equal(res.distances, brute.distances)
    np.testing.assert_allclose(res.distances, true_knn_dist(X, Q, k), rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(P.dist(Q[:, None, :], X[res.indices]), res.distances, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("family, dim, expected", [
    ("gaussian_mixture", 10, "hkdtree"),
    ("hierarchical_tree", 10, "hkdtree"),
    ("hyperbolic_uniform", 10, "brute"),  # the tree examines ~25% of 4,000 points here
    ("hyperbolic_uniform", 64, "brute"),
])
def test_auto_choice_follows_the_measured_pruning(family, dim, expected):
    X = make_family(family, 4000, dim, seed=0)
    index = hypann.HyperbolicIndex(algorithm="auto", random_state=0).build(X)
    algo = index.algorithm_
    assert algo.choice_ == expected
    assert algo.threshold_ == pytest.approx(default_scan_fraction(dim))
    assert (algo.examined_fraction_ > algo.threshold_) == (expected == "brute")
    if expected == "hkdtree":
        assert algo.measured_ == 64  # the whole sample
    else:  # stopped once the running count exceeded the threshold for all 64 points
        assert 8 <= algo.measured_ < 64
        assert algo.examined_fraction_ * algo.measured_ > algo.threshold_ * 64
    assert f"chosen='{expected}'" in repr(index)
    if dim == 64:
        # every query examines every point: the sum passes 1/11 of 64 full scans (5.8) after the first 8
        assert (algo.measured_, algo.examined_fraction_) == (8, 1.0)
    text = index.describe()
    assert text.startswith(f"auto over 4000 points in {dim}-D; chose '{expected}': the kd-tree examined ")
    assert f"{algo.examined_fraction_:.2%}" in text


def test_auto_choice_is_deterministic_for_a_seed():
    X = make_family("hyperbolic_uniform", 3000, 10, seed=1)
    runs = [hypann.HyperbolicIndex(algorithm="auto", random_state=s, n_jobs=t).build(X).algorithm_
            for s, t in ((7, 1), (7, 2), (8, 1))]
    assert runs[0].examined_fraction_ == runs[1].examined_fraction_
    assert runs[0].choice_ == runs[1].choice_
    assert runs[0].examined_fraction_ != runs[2].examined_fraction_  # another sample, another measurement


@pytest.mark.parametrize("scan_fraction, choice", [(1.0, "hkdtree"), (1e-9, "brute")])
def test_auto_save_load_keeps_the_choice(tmp_path, scan_fraction, choice):
    rng = np.random.default_rng(2)
    X = ball_points(rng, 900, 4)
    index = hypann.HyperbolicIndex(algorithm="auto", random_state=3, scan_fraction=scan_fraction).build(X)
    assert index.algorithm_.choice_ == choice
    index.save(tmp_path / "a.hypann")
    loaded = hypann.HyperbolicIndex.load(tmp_path / "a.hypann")
    assert loaded.algorithm_.choice_ == choice
    assert loaded.describe() == index.describe()
    Q = ball_points(rng, 15, 4)
    np.testing.assert_array_equal(loaded.search(Q, 5).indices, index.search(Q, 5).indices)
    np.testing.assert_array_equal(loaded.search(Q, 5, budget=40).indices, index.search(Q, 5, budget=40).indices)


def test_auto_restore_refuses_a_bad_state():
    rng = np.random.default_rng(4)
    X = ball_points(rng, 200, 3)
    index = hypann.HyperbolicIndex(algorithm="auto", random_state=0, scan_fraction=1.0).build(X)
    conf = index.conformal_  # the stored (compensated) factors the tree's copy must match
    good = index.algorithm_.get_state()
    cases = [
        ({**good, "choice": np.int64(5)}, r"auto state 'choice' must be an integer code in \[0, 2\), got"),
        ({**good, "measurement": np.array([0.5, np.nan, 64.0])}, r"auto state 'measurement' must be two fractions"),
        ({**good, "measurement": np.array([0.5, 0.1, 201.0])}, r"and the number of sampled points \(1 to n\)"),
        ({k: v for k, v in good.items() if k != "choice"}, r"auto state must hold 'choice' and 'measurement'"),
        ({**good, "choice": np.int64(1)}, r"auto state for choice 'brute' holds unexpected arrays \['hkdtree\."),
    ]
    for state, match in cases:
        with pytest.raises(ValueError, match=match):
            AutoSearch().restore(X, conf, state, random_state=0)


@pytest.mark.parametrize("scan_fraction", [1.0, 1e-9])
def test_auto_range_search_and_updates(scan_fraction):
    rng = np.random.default_rng(5)
    X = ball_points(rng, 700, 3)
    Q = ball_points(rng, 6, 3)
    index = hypann.HyperbolicIndex(algorithm="auto", random_state=0, scan_fraction=scan_fraction).build(X)
    ref = hypann.HyperbolicIndex(algorithm="brute").build(X)
    got, want = index.search_radius(Q, 1.2), ref.search_radius(Q, 1.2)
    np.testing.assert_array_equal(got.offsets, want.offsets)
    np.testing.assert_array_equal(got.distances, want.distances)
    Y = ball_points(rng, 10, 3)
    index.remove(np.arange(0, 700, 5)).add(Y)
    live = np.concatenate([np.delete(X, np.arange(0, 700, 5), axis=0), Y])
    res = index.search(Q, 4)
    np.testing.assert_allclose(res.distances, true_knn_dist(live, Q, 4), rtol=1e-9, atol=1e-12)
    assert not np.any(np.isin(res.indices, np.arange(0, 700, 5)))


@pytest.mark.parametrize("dim", [1, 2, 10, 15, 16, 17, 100, 256])
def test_scan_threshold_and_leaf_size_by_dimension(dim):
    """Below 16 coordinates: leaves of 16 and r(d) = 1 + 44/sqrt(d); from 16 on: leaves of 48 and r = 11."""
    wide = dim >= 16
    expected = 1.0 / 11.0 if wide else 1.0 / (1.0 + 44.0 / np.sqrt(dim))
    assert default_scan_fraction(dim) == pytest.approx(expected, rel=1e-15)
    X = ball_points(np.random.default_rng(dim), 300, dim, min_conformal=1e-6)
    index = hypann.HyperbolicIndex(algorithm="auto", scan_fraction=1.0, random_state=0).build(X)
    assert index.algorithm_.chosen_.leaf_size_ == (48 if wide else 16)
    assert index.algorithm_.leaf_size is None
    # an explicit leaf size is used as given, whatever the dimension
    explicit = hypann.HyperbolicIndex(algorithm="auto", scan_fraction=1.0, leaf_size=5, random_state=0).build(X)
    assert explicit.algorithm_.chosen_.leaf_size_ == 5
    np.testing.assert_array_equal(index.search(X[:7], 4).distances, explicit.search(X[:7], 4).distances)
