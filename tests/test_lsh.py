"""The paper's LSH oracle (hypann.oracles.lsh) as a Euclidean oracle on its own."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypann.metrics import id_recall as recall  # the paper's recall: true ids found / k
from hypann.oracles.brute import BruteForceOracle
from hypann.oracles.lsh import MAX_GRANULARITY, LSHOracle
from hypann.oracles.registry import make_oracle

# numba-kernel tests: `make test` runs them again under NUMBA_BOUNDSCHECK=1 (pytest -m kernels)
pytestmark = pytest.mark.kernels

DIM = 100


@pytest.fixture(scope="module")
def planted():
    """500 tight clusters of 10 points in 100-D; queries near 200 cluster centres.

    The 10 Euclidean nearest neighbours of a query are its cluster (checked).
    Cluster radius ~0.03, distance between centres ~0.7.
    """
    rng = np.random.default_rng(1)
    centres = rng.normal(size=(500, DIM)) * 0.05
    X = (centres[:, None, :] + rng.normal(size=(500, 10, DIM)) * 0.003).reshape(-1, DIM)
    Q = centres[:200] + rng.normal(size=(200, DIM)) * 0.003
    truth = BruteForceOracle().build(X).knn(Q, 10).indices
    assert np.all(truth // 10 == np.arange(200)[:, None])
    return X, Q, truth


def test_recall_rises_with_tables_and_multiprobe(planted):
    # Measured on this seed with granularity 40 (bucket width 0.05): recall@10
    # T=1,2,5,10 without probe 0.35, 0.60, 0.87, 0.98; with probe 0.74, 0.93, 1.0, 1.0;
    # at most ~10 distinct candidates per query out of 5000.
    X, Q, truth = planted
    rec = {}
    for probe in (0, 1):
        for tables in (1, 2, 5, 10):
            res = LSHOracle(tables=tables, bits=15, granularity=40.0, probe=probe).build(X).knn(Q, 10)
            rec[tables, probe] = recall(res.indices, truth)
            assert res.evaluations.mean() < 50
    for probe in (0, 1):
        seq = [rec[t, probe] for t in (1, 2, 5, 10)]
        assert seq == sorted(seq), (probe, seq)  # first T tables are shared: candidates only grow
    for tables in (1, 2, 5, 10):
        assert rec[tables, 1] >= rec[tables, 0]
    assert rec[1, 0] < 0.6
    assert rec[10, 0] - rec[1, 0] > 0.3
    assert rec[1, 1] - rec[1, 0] > 0.2
    assert rec[10, 1] >= 0.97


def test_results_are_exact_distances_sorted_and_distinct(planted):
    X, Q, _ = planted
    res = LSHOracle(granularity=20.0).build(X).knn(Q, 10)
    assert res.indices.dtype == np.int64 and res.sq_dist.dtype == np.float64
    for q, ids, d in zip(Q, res.indices, res.sq_dist):
        ok = ids >= 0
        assert len(set(ids[ok])) == ok.sum()
        np.testing.assert_allclose(d[ok], ((X[ids[ok]] - q) ** 2).sum(1), rtol=1e-14)  # numpy sums pairwise
        assert np.all(np.diff(d) >= 0)


def test_deterministic_for_a_seed_and_batch_independent(planted):
    X, Q, _ = planted
    a = LSHOracle(granularity=20.0, random_state=7).build(X)
    b = LSHOracle(granularity=20.0, random_state=7).build(X)
    ra, rb = a.knn(Q, 5), b.knn(Q, 5)
    np.testing.assert_array_equal(ra.indices, rb.indices)
    np.testing.assert_array_equal(ra.evaluations, rb.evaluations)
    single = np.vstack([a.knn(Q[i : i + 1], 5).indices for i in range(20)])
    np.testing.assert_array_equal(single, ra.indices[:20])
    c = LSHOracle(granularity=20.0, random_state=8).build(X)
    assert not np.array_equal(c.hyperplanes_, a.hyperplanes_)


def test_hyperplanes_are_unit_and_shared_across_shells():
    rng = np.random.default_rng(3)
    base = LSHOracle(granularity="auto", tables=3, bits=4, random_state=5)
    o1 = base.for_shell(2, 3.0).build(rng.normal(size=(50, 12)) * 0.01)
    o2 = base.for_shell(7, 3.0).build(rng.normal(size=(80, 12)) * 0.01)
    np.testing.assert_array_equal(o1.hyperplanes_, o2.hyperplanes_)
    np.testing.assert_allclose(np.linalg.norm(o1.hyperplanes_, axis=1), 1.0, rtol=1e-14)
    assert o1.hyperplanes_.shape == (12, 12)
    assert (o1.granularity_, o2.granularity_) == (9.0, 2187.0)
    # the first tables of a larger oracle are those of a smaller one
    big = LSHOracle(tables=5, bits=4, random_state=5).build(np.zeros((3, 12)))
    np.testing.assert_array_equal(big.hyperplanes_[:12], o1.hyperplanes_)


@pytest.mark.parametrize("width", [1.5, 3.0, 10.0])
def test_auto_granularity_rule(width):
    base = LSHOracle(granularity="auto", tables=2, bits=3)
    for i in range(1, 40):
        g = base.for_shell(i, width).granularity
        assert g == pytest.approx(min(width**i, 10000.0), rel=1e-12)
    assert base.for_shell(40, width).granularity == MAX_GRANULARITY
    lifted = LSHOracle(granularity="auto", tables=2, bits=3, max_granularity=1e12)
    for i in range(1, 40):
        assert lifted.for_shell(i, width).granularity == pytest.approx(min(width**i, 1e12), rel=1e-12)
    assert make_oracle(lifted.spec()).get_params() == lifted.get_params()
    with pytest.raises(ValueError, match="max_granularity"):
        LSHOracle(granularity="auto", max_granularity=0.0).for_shell(3, width)
    fixed = LSHOracle(granularity=12.5, tables=2, bits=3).for_shell(9, width)
    assert fixed.granularity == 12.5
    assert fixed.get_params() == LSHOracle(granularity=12.5, tables=2, bits=3).get_params()


def test_auto_needs_a_shell_and_shell_index_is_checked():
    with pytest.raises(ValueError, match="for_shell"):
        LSHOracle(granularity="auto").build(np.zeros((3, 2)))
    with pytest.raises(ValueError, match="shell_index must be an integer >= 1"):
        LSHOracle(granularity="auto").for_shell(0, 3.0)
    with pytest.raises(ValueError, match="width must be > 1"):
        LSHOracle(granularity="auto").for_shell(2, 1.0)


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"tables": 0}, "tables"),
        ({"bits": 2.5}, "bits"),
        ({"probe": 2}, "probe must be 0 or 1"),
        ({"granularity": -1.0}, "granularity"),
        ({"max_candidates": 0}, "max_candidates"),
        ({"random_state": None}, "random_state"),
    ],
)
def test_bad_settings_raise_naming_them(kwargs, match):
    with pytest.raises(ValueError, match=match):
        LSHOracle(**kwargs).build(np.zeros((3, 2)))


def test_padding_when_fewer_than_k_candidates():
    rng = np.random.default_rng(4)
    X = rng.normal(size=(30, 8)) * 0.01
    o = LSHOracle(granularity=MAX_GRANULARITY, tables=2, bits=8).build(X)
    far = np.full((1, 8), 0.3)
    res = o.knn(far, 5)
    np.testing.assert_array_equal(res.indices, -1)
    assert np.all(np.isinf(res.sq_dist)) and res.evaluations[0] == 0
    # a data point finds itself and possibly a few more; the rest is padded
    res = o.knn(X[:1], 5)
    assert res.indices[0, 0] == 0 and res.sq_dist[0, 0] == 0.0
    pad = res.indices[0] == -1
    assert pad.any() and np.all(np.isinf(res.sq_dist[0][pad]))
    assert np.all(pad[np.argmax(pad):])  # padding only at the end
    # k larger than the data set: the base class pads too
    assert LSHOracle(granularity=1.0).build(X).knn(X[:2], 40).indices.shape == (2, 40)


def test_max_candidates_caps_evaluations(planted):
    X, Q, _ = planted
    o = LSHOracle(granularity=5.0, max_candidates=25).build(X)
    res = o.knn(Q, 10)
    assert res.evaluations.max() <= 25
    assert np.all(res.evaluations == 25)  # buckets hold far more than 25 here
    uncapped = LSHOracle(granularity=5.0).build(X).knn(Q, 10)
    assert np.all(uncapped.evaluations > 25)


def test_near_certificates_are_valid(planted):
    X, Q, _ = planted
    rng = np.random.default_rng(5)
    o = LSHOracle(granularity=20.0, tables=3).build(X)
    best = o.knn(Q, 1)
    radius = np.sqrt(best.sq_dist[:, 0]) * rng.uniform(0.5, 1.5, len(Q))
    for eps in (0.0, 0.5):
        cert, evals = o.near(Q, radius, eps)
        hit = cert >= 0
        assert hit.any() and (~hit).any()
        d = np.sqrt(((X[cert[hit]] - Q[hit]) ** 2).sum(1))
        assert np.all(d <= (1 + eps) * radius[hit])
        # the probed candidates hold a point within (1+eps)R exactly when -1 is not returned
        np.testing.assert_array_equal(hit, np.sqrt(best.sq_dist[:, 0]) <= (1 + eps) * radius)
        assert np.all(evals <= best.evaluations) and np.all(evals >= hit)


@settings(max_examples=25, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    tables=st.integers(1, 4),
    bits=st.integers(1, 6),
    granularity=st.floats(0.5, 200.0),
    probe=st.sampled_from([0, 1]),
    offset=st.booleans(),
)
def test_spec_round_trip(seed, tables, bits, granularity, probe, offset):
    o = LSHOracle(tables=tables, bits=bits, granularity=granularity, probe=probe, offset=offset, random_state=seed)
    again = make_oracle(o.spec())
    assert isinstance(again, LSHOracle) and again.get_params() == o.get_params()
    X = np.random.default_rng(seed).normal(size=(40, 6)) * 0.1
    np.testing.assert_array_equal(o.build(X).knn(X[:5], 3).indices, again.build(X).knn(X[:5], 3).indices)


def test_spec_strings():
    o = make_oracle("lsh:tables=3,bits=4,granularity=auto")
    assert (o.tables, o.bits, o.granularity) == (3, 4, "auto")
    assert make_oracle(o.spec()).get_params() == o.get_params()
    with pytest.raises(ValueError, match="tabels"):
        make_oracle("lsh:tabels=3")


def test_single_hash_collision_rate_matches_datar():
    # One table of one unit vector r: pairs (x_i, y_i = x_i + c v_i) with random unit v_i
    # and x_i spread far (so their phase within a bucket is uniform) share a bucket with
    # probability E[max(0, 1 - |c r.v|/W)] (Datar et al.). The x_i are ~60 apart, so
    # y_i's nearest point is x_i and it is found exactly when the pair collides.
    rng = np.random.default_rng(6)
    n, dim, c, g = 20000, 20, 0.5, 8.0
    x = rng.normal(size=(n, dim)) * 10.0
    v = rng.normal(size=(n, dim))
    y = x + c * v / np.linalg.norm(v, axis=1, keepdims=True)
    res = LSHOracle(tables=1, bits=1, granularity=g, probe=0).build(x).knn(y, 1)
    hits = res.indices[:, 0] == np.arange(n)
    r = rng.normal(size=(400_000, dim))
    p = np.mean(np.maximum(0.0, 1.0 - np.abs(c * r[:, 0] / np.linalg.norm(r, axis=1)) / (2.0 / g)))
    sigma = np.sqrt(p * (1 - p) / n)
    assert abs(hits.mean() - p) < 4 * sigma, (hits.mean(), p)


def test_empty_point_set():
    o = LSHOracle(granularity=10.0).build(np.empty((0, 3)))
    res = o.knn(np.zeros((2, 3)), 3)
    np.testing.assert_array_equal(res.indices, -1)
    cert, _ = o.near(np.zeros((2, 3)), 1.0)
    np.testing.assert_array_equal(cert, -1)


def test_budget_caps_candidates_per_query():
    rng = np.random.default_rng(7)
    X = rng.normal(size=(3000, 20)) * 0.01
    Q = X[:40] + 1e-4 * rng.normal(size=(40, 20))
    oracle = LSHOracle(tables=5, bits=6, granularity=20.0, probe=1, random_state=0).build(X)
    free = oracle.knn(Q, 5)
    budget = np.arange(1, 41) * 3
    capped = oracle.knn(Q, 5, budget=budget)
    assert np.all(capped.evaluations <= np.minimum(budget, free.evaluations))
    assert np.all(capped.sq_dist[:, 0] >= free.sq_dist[:, 0])
