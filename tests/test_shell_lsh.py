"""Shell + LSH with parameters from the data, and the compiled all-shell query loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypann
from hypann.datasets.base import holdout_split
from hypann.datasets.families import FAMILIES, make_family
from hypann.eval.numpy_brute import numpy_brute_knn
from hypann.metrics import recall
from hypann.oracles.brute import BruteForceOracle
from hypann.oracles.lsh import LSHOracle, choose_hash_parameters
from tests.test_exact_search import datasets, true_knn_dist

# numba-kernel tests: `make test` runs them again under NUMBA_BOUNDSCHECK=1 (pytest -m kernels)
pytestmark = pytest.mark.kernels

N_SMALL, N_QUERIES = 5000, 200


def _family(name, seed=0):
    pts = make_family(name, N_SMALL + N_QUERIES, 10, seed=seed)
    base, query = holdout_split(len(pts), N_QUERIES, seed=seed)
    return pts[base], pts[query]


@pytest.mark.parametrize("family", FAMILIES)
def test_recall_at_defaults_on_every_family(family):
    """Defaults (``oracle="lsh"``: tables/bits "auto", granularity "data", target 0.96).

    Measured at 5,000 points, 200 held-out queries (recall@10 by distance):
    tree 0.994, mixture 0.985, uniform 0.968, boundary 0.972, duplicates 0.967,
    WordNet 0.971; the threshold leaves a margin for other seeds.
    """
    X, Q = _family(family)
    idx = hypann.HyperbolicIndex(algorithm="shells", oracle="lsh", random_state=0).build(X)
    res = idx.search(Q, 10)
    _, true_d = numpy_brute_knn(Q, X, 10)
    assert recall(res.distances, true_d, 10) >= 0.93
    choice = idx.algorithm_.lsh_choice_
    assert choice["sample_recall"] >= 0.95  # tables were added until the build sample met the target
    frac = res.stats.extra["fraction_examined"]
    np.testing.assert_array_equal(frac, res.stats.samples / len(X))
    assert frac.mean() < 0.5  # never a disguised scan


def test_same_seed_same_answer_and_other_seed_other_tables():
    X, Q = _family("gaussian_mixture", seed=3)
    a = hypann.HyperbolicIndex(algorithm="shells", oracle="lsh", random_state=7).build(X)
    b = hypann.HyperbolicIndex(algorithm="shells", oracle="lsh", random_state=7).build(X)
    ra, rb = a.search(Q, 10), b.search(Q, 10)
    np.testing.assert_array_equal(ra.indices, rb.indices)
    np.testing.assert_array_equal(ra.distances, rb.distances)
    np.testing.assert_array_equal(ra.stats.samples, rb.stats.samples)
    assert a.algorithm_.lsh_choice_ == b.algorithm_.lsh_choice_
    for key in ("scale", "bids", "hkeys", "R"):
        np.testing.assert_array_equal(a.algorithm_.lsh_pack_[key], b.algorithm_.lsh_pack_[key])
    c = hypann.HyperbolicIndex(algorithm="shells", oracle="lsh", random_state=8).build(X)
    assert not np.array_equal(a.algorithm_.lsh_pack_["R"], c.algorithm_.lsh_pack_["R"])
    # batch independence of the compiled loop: one query at a time gives the same rows
    single = np.vstack([a.search(Q[i : i + 1], 10).indices for i in range(5)])
    np.testing.assert_array_equal(single, ra.indices[:5])


@pytest.mark.parametrize("width", [1.5, 3.0, 10.0])
@settings(max_examples=40, deadline=None)
@given(data=datasets(), k=st.sampled_from([1, 5, 10]))
def test_compiled_loop_with_one_bucket_per_shell_is_exact(data, k, width):
    """With a bucket wider than the ball every probed shell is scanned: the
    shell order and the Check-Intersection stop of the compiled loop must then
    give the float64 k-NN."""
    X, Q = data
    k = min(k, len(X))
    spec = "lsh:tables=1,bits=1,granularity=1e-12"
    idx = hypann.HyperbolicIndex(algorithm="shells", oracle=spec, width=width).build(X)
    assert idx.algorithm_.lsh_pack_ is not None
    res = idx.search(Q, k)
    np.testing.assert_allclose(res.distances, true_knn_dist(X, Q, k), rtol=1e-9, atol=1e-12)
    assert np.all(res.stats.samples <= len(X))


@pytest.mark.parametrize("width", [1.5, 3.0])
@settings(max_examples=25, deadline=None)
@given(data=datasets(), k=st.sampled_from([1, 5]))
def test_recentred_shells_with_lsh_data_tables_stay_exact_with_exact_oracle(data, k, width):
    """recenter=True keeps the rounds path (never the compiled loop); with an
    exact oracle it is exact, whatever the LSH defaults became."""
    X, Q = data
    k = min(k, len(X))
    idx = hypann.HyperbolicIndex(algorithm="shells", oracle="brute", width=width, recenter=True).build(X)
    assert idx.algorithm_.lsh_pack_ is None
    res = idx.search(Q, k)
    np.testing.assert_allclose(res.distances, true_knn_dist(X, Q, k), rtol=1e-9, atol=1e-12)


def test_budget_is_a_hard_limit_in_the_compiled_loop():
    X, Q = _family("hierarchical_tree")
    idx = hypann.HyperbolicIndex(algorithm="shells", oracle="lsh", random_state=0).build(X)
    free = idx.search(Q, 10)
    capped = idx.search(Q, 10, budget=20)
    assert np.all(capped.stats.samples <= 20)
    assert capped.stats.samples.mean() < free.stats.samples.mean()
    np.testing.assert_array_equal(capped.stats.extra["fraction_examined"], capped.stats.samples / len(X))


def test_rounds_path_reports_the_fraction_too():
    X, Q = _family("boundary_heavy")
    idx = hypann.HyperbolicIndex(algorithm="shells", oracle="kdtree").build(X)
    res = idx.search(Q[:20], 10)
    np.testing.assert_array_equal(res.stats.extra["fraction_examined"], res.stats.samples / len(X))


def test_compiled_loop_finds_at_least_what_the_rounds_find():
    """Same tables: the compiled loop ranks every candidate by hyperbolic
    distance, the rounds keep each shell's Euclidean top-k only."""
    X, Q = _family("gaussian_mixture")
    idx = hypann.HyperbolicIndex(algorithm="shells", oracle="lsh", random_state=0).build(X)
    alg = idx.algorithm_
    cq = hypann.geometry.poincare.conformal_factor(Q)
    _, d_fast, _ = alg.search(Q, cq, 10)
    _, d_rounds, _ = alg._search_rounds(Q, cq, 10)
    _, true_d = numpy_brute_knn(Q, X, 10)
    from hypann.geometry.poincare import dist_from_delta

    assert recall(dist_from_delta(d_fast), true_d, 10) >= recall(dist_from_delta(d_rounds), true_d, 10)


@pytest.mark.parametrize(
    "spec, match",
    [
        ("lsh:target_recall=1.0", r"target_recall must be < 1.0, got target_recall=1.0"),
        ("lsh:target_recall=0", r"target_recall must be > 0.0, got target_recall=0"),
        ("lsh:tables=many", r"tables must be a positive integer or 'auto', got tables='many'"),
        ("lsh:bits=0", r"bits must be a positive integer or 'auto', got bits=0"),
        ("lsh:granularity=fine", r"granularity must be a number > 0, 'data' or 'auto', got granularity='fine'"),
        ("lsh:sample_size=0", r"sample_size must be a positive integer, got sample_size=0"),
    ],
)
def test_bad_adaptive_settings_raise_naming_them(spec, match):
    X, _ = _family("hierarchical_tree")
    with pytest.raises(ValueError, match=match):
        hypann.HyperbolicIndex(algorithm="shells", oracle=spec).build(X[:300])
    with pytest.raises(ValueError, match=match):
        hypann.HyperbolicIndex(algorithm="recentering", oracle=spec).build(X[:300])


def test_lone_oracle_meets_its_predicted_recall():
    """The standalone oracle's choice (Euclidean neighbours, one table set)."""
    rng = np.random.default_rng(5)
    X = rng.normal(size=(8000, 10)) * 0.1
    Q = rng.normal(size=(300, 10)) * 0.1
    o = LSHOracle(random_state=2).build(X)
    assert o.choice_["recall"] >= 0.95
    res = o.knn(Q, 10)
    truth = BruteForceOracle().build(X).knn(Q, 10)
    found = np.mean(res.sq_dist <= truth.sq_dist[:, -1:] * (1 + 1e-12))
    assert found >= 0.92
    # predicted and measured examined points agree within 20%
    assert abs(res.evaluations.mean() - o.choice_["examined"]) < 0.2 * o.choice_["examined"]
    assert o.spec().startswith("lsh:tables=auto,bits=auto,granularity=data")


def test_chooser_prefers_fewer_points_and_honours_fixed_settings():
    near = np.full(100, 0.5)
    far = np.full(1000, 5.0)
    w = np.full(1000, 1.0)
    free = choose_hash_parameters(near, far, w, 10, 0.95)
    assert free["recall"] >= 0.95
    fixed = choose_hash_parameters(near, far, w, 10, 0.95, tables=3, bits=2, alphas=(1.0,))
    assert (fixed["tables"], fixed["bits"], fixed["alpha"]) == (3, 2, 1.0)
    # a target no setting reaches: the most accurate setting is returned
    hard = choose_hash_parameters(np.full(10, 1e6), far, w, 10, 0.99, tables=1, bits=1, alphas=(1.0,))
    assert hard["recall"] < 0.99 and hard["tables"] == 1
