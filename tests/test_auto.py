"""``algorithm="auto"``: exact whichever method it picks; the pick is measured (counted, and timed where the count
leaves it open), deterministic outside the timed band, and saved."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypann
from hypann.datasets.families import make_family
from hypann.geometry import poincare as P
from hypann.search import auto as auto_module
from hypann.search.auto import SCAN_FRACTION, TREE_FRACTION, AutoSearch
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
    ("gaussian_mixture", 10, "hkdtree"),  # the tree examines ~3% of 4,000 points: below 1/16, no timing
    ("hierarchical_tree", 10, "hkdtree"),
    ("hyperbolic_uniform", 10, "brute"),  # ~67% on the first 8 sampled points: above 0.4
    ("hyperbolic_uniform", 64, "brute"),
])
def test_auto_choice_follows_the_counted_pruning(family, dim, expected):
    X = make_family(family, 4000, dim, seed=0)
    index = hypann.HyperbolicIndex(algorithm="auto", random_state=0).build(X)
    algo = index.algorithm_
    assert algo.choice_ == expected and algo.timing_ is None
    assert algo.threshold_ == SCAN_FRACTION
    if expected == "hkdtree":
        assert algo.measured_ == 64 and algo.examined_fraction_ <= TREE_FRACTION  # the whole sample
    else:  # stopped after the first step of 8 whose running mean exceeded the threshold
        assert algo.measured_ == 8 and algo.examined_fraction_ > SCAN_FRACTION
    assert f"chosen='{expected}'" in repr(index)
    if dim == 64:
        assert algo.examined_fraction_ == 1.0  # every query examines every point
    text = index.describe()
    assert text.startswith(f"auto over 4000 points in {dim}-D; chose '{expected}': the kd-tree examined ")
    assert f"{algo.examined_fraction_:.2%}" in text
    assert ("> scan threshold 40.00%" if expected == "brute" else "<= kd-tree threshold 6.25%") in text


@pytest.mark.parametrize("tree_s, scan_s, expected", [(1.0, 2.0, "hkdtree"), (2.0, 1.0, "brute")])
def test_auto_times_both_where_the_count_leaves_it_open(monkeypatch, tmp_path, tree_s, scan_s, expected):
    """A 16-D mixture of 4,000 points: the tree examines ~11% of them, in the band (1/16, 0.4], so the faster
    on the sample is kept (the timing replaced here, so that both outcomes are tested whatever the machine)."""
    X = make_family("gaussian_mixture", 4000, 16, seed=0)
    calls = []

    def timing(tree, queries, q_conformal, k):
        calls.append((queries.shape, k))
        return tree_s, scan_s

    monkeypatch.setattr(auto_module, "_time_tree_and_scan", timing)
    index = hypann.HyperbolicIndex(algorithm="auto", random_state=0).build(X)
    algo = index.algorithm_
    assert calls == [((64, 16), 11)] and algo.measured_ == 64
    assert TREE_FRACTION < algo.examined_fraction_ <= SCAN_FRACTION
    assert algo.choice_ == expected and algo.timing_ == (tree_s, scan_s)
    assert (f"(between 6.25% and 40.00%: timed on them, kd-tree {1e3 * tree_s:.3g} ms, scan {1e3 * scan_s:.3g} ms)"
            in index.describe())
    Q = make_family("gaussian_mixture", 30, 16, seed=1)
    brute = hypann.HyperbolicIndex(algorithm="brute").build(X).search(Q, 7)
    np.testing.assert_array_equal(index.search(Q, 7).distances, brute.distances)
    index.save(tmp_path / "a.hypann")  # the timing is part of the saved choice
    loaded = hypann.HyperbolicIndex.load(tmp_path / "a.hypann")
    assert loaded.algorithm_.timing_ == (tree_s, scan_s) and loaded.describe() == index.describe()
    # a given scan_fraction: the count alone decides, no timing
    fixed = hypann.HyperbolicIndex(algorithm="auto", random_state=0, scan_fraction=0.05).build(X).algorithm_
    assert fixed.choice_ == "brute" and fixed.timing_ is None and len(calls) == 1


def test_auto_timing_measures_both_candidates():
    """The real timing on one thread: two positive times, and the choice is the faster of them."""
    X = make_family("gaussian_mixture", 4000, 16, seed=0)
    algo = hypann.HyperbolicIndex(algorithm="auto", random_state=0, n_jobs=2).build(X).algorithm_
    tree_s, scan_s = algo.timing_
    assert 0 < tree_s < 10 and 0 < scan_s < 10
    assert algo.choice_ == ("brute" if scan_s < tree_s else "hkdtree")


def test_auto_choice_is_deterministic_for_a_seed():
    X = make_family("hyperbolic_uniform", 3000, 10, seed=1)
    runs = [hypann.HyperbolicIndex(algorithm="auto", random_state=s, n_jobs=t).build(X).algorithm_
            for s, t in ((7, 1), (7, 2), (8, 1))]
    assert (runs[0].examined_fraction_, runs[0].measured_) == (runs[1].examined_fraction_, runs[1].measured_)
    if runs[0].timing_ is None:  # the count decided (a timed choice may differ between runs)
        assert runs[1].timing_ is None and runs[0].choice_ == runs[1].choice_
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
        ({**good, "timing": np.array([0.1, np.inf])}, r"auto state 'timing' must be two finite seconds >= 0, got"),
        ({**good, "timing": np.array([0.1])}, r"auto state 'timing' must be two finite seconds"),
        ({**good, "timing": np.array([1, 2])}, r"auto state 'timing' must be two finite seconds"),
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
def test_leaf_size_by_dimension(dim):
    """Below 16 coordinates: leaves of 16; from 16 on: leaves of 48."""
    wide = dim >= 16
    X = ball_points(np.random.default_rng(dim), 300, dim, min_conformal=1e-6)
    index = hypann.HyperbolicIndex(algorithm="auto", scan_fraction=1.0, random_state=0).build(X)
    assert index.algorithm_.chosen_.leaf_size_ == (48 if wide else 16)
    assert index.algorithm_.leaf_size is None
    # an explicit leaf size is used as given, whatever the dimension
    explicit = hypann.HyperbolicIndex(algorithm="auto", scan_fraction=1.0, leaf_size=5, random_state=0).build(X)
    assert explicit.algorithm_.chosen_.leaf_size_ == 5
    np.testing.assert_array_equal(index.search(X[:7], 4).distances, explicit.search(X[:7], 4).distances)
