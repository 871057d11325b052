"""faiss and hnswlib adapters (hypann.oracles.faiss, hypann.oracles.hnswlib)."""

import sys

import numpy as np
import pytest

from hypann.metrics import id_recall as recall  # the paper's recall: true ids found / k
from hypann.oracles.brute import BruteForceOracle
from hypann.oracles.faiss import FaissOracle
from hypann.oracles.hnswlib import HnswlibOracle
from hypann.oracles.registry import make_oracle

faiss = pytest.importorskip("faiss")
pytest.importorskip("hnswlib")


@pytest.fixture(scope="module", autouse=True)
def single_thread():
    before = faiss.omp_get_max_threads()
    faiss.omp_set_num_threads(1)
    yield
    faiss.omp_set_num_threads(before)


@pytest.fixture(scope="module")
def easy():
    """4000 points from 100 Gaussian clusters in 32-D; queries near data points."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(100, 32))
    X = centres[rng.integers(0, 100, 4000)] + rng.normal(size=(4000, 32)) * 0.3
    Q = X[:200] + rng.normal(size=(200, 32)) * 0.05
    return X, Q, BruteForceOracle().build(X).knn(Q, 10)


def test_flat_equals_brute_force(easy):
    X, Q, truth = easy
    o = make_oracle("faiss:Flat").build(X)
    assert o.exact
    res = o.knn(Q, 10)
    np.testing.assert_array_equal(res.indices, truth.indices)
    np.testing.assert_allclose(res.sq_dist, truth.sq_dist, rtol=1e-13)  # float64 re-rank
    assert res.sq_dist.dtype == np.float64 and res.indices.dtype == np.int64


@pytest.mark.parametrize("spec", ["faiss:HNSW32", "faiss:HNSW16;ef=32", "hnswlib", "hnswlib:M=8,ef=16"])
def test_hnsw_recall_on_easy_data(easy, spec):
    # measured: 0.999-1.0 for all four
    X, Q, truth = easy
    o = make_oracle(spec).build(X)
    assert not o.exact
    res = o.knn(Q, 10)
    assert recall(res.indices, truth.indices) > 0.9
    assert np.all(np.diff(res.sq_dist, axis=1) >= 0)


def test_ivf_trains_and_full_nprobe_is_exhaustive(easy):
    X, Q, truth = easy
    o = make_oracle("faiss:IVF16,Flat;nprobe=16").build(X)
    assert (o.factory, o.nprobe, o.exact) == ("IVF16,Flat", 16, False)
    np.testing.assert_array_equal(o.knn(Q, 10).indices, truth.indices)


def test_padding_and_k_larger_than_n():
    X = np.random.default_rng(1).normal(size=(5, 4))
    for spec in ("faiss:Flat", "faiss:HNSW8", "hnswlib:M=4"):
        res = make_oracle(spec).build(X).knn(X[:2], 8)
        assert res.indices.shape == (2, 8)
        np.testing.assert_array_equal(np.sort(res.indices[:, :5], axis=1), [np.arange(5)] * 2)
        assert np.all(res.indices[:, 5:] == -1) and np.all(np.isinf(res.sq_dist[:, 5:]))


@pytest.mark.parametrize(
    "spec", ["faiss:Flat", "faiss:HNSW32", "faiss:IVF8,Flat;nprobe=4", "faiss:HNSW16;ef=40",
             "hnswlib:M=12,ef_construction=100,ef=20,random_state=3,num_threads=1"]
)
def test_spec_round_trip(spec):
    o = make_oracle(spec)
    assert make_oracle(o.spec()).spec() == o.spec()
    assert vars(make_oracle(o.spec())) == vars(o)


def test_ef_is_the_search_list_size_and_old_spellings_are_deprecated():
    assert make_oracle("faiss:HNSW32;ef=64").ef == 64
    with pytest.warns(DeprecationWarning, match=r"efSearch is deprecated in faiss spec 'HNSW32;efSearch=64'; use ef"):
        assert make_oracle("faiss:HNSW32;efSearch=64").ef == 64
    with pytest.warns(DeprecationWarning, match=r"ef_search is deprecated for faiss spec .*; use ef"):
        assert make_oracle("faiss:HNSW32;ef_search=64").ef == 64
    with pytest.warns(DeprecationWarning, match=r"ef_search is deprecated for FaissOracle; use ef"):
        assert FaissOracle(ef_search=32).ef == 32
    with pytest.warns(DeprecationWarning, match=r"FaissOracle.ef_search is deprecated; use ef"):
        assert FaissOracle(ef=16).ef_search == 16
    with pytest.raises(ValueError, match=r"give ef or its deprecated alias ef_search, not both \(ef=8, ef_search=9\)"):
        FaissOracle(ef=8, ef_search=9)
    assert make_oracle("faiss").factory == "HNSW32"


@pytest.mark.parametrize(
    "spec, match",
    [
        ("faiss:HNSW32;foo=3", "unknown faiss query setting 'foo'"),
        ("faiss:HNSW32;nprobe", "bad setting 'nprobe'"),
        ("faiss:;nprobe=3", "empty faiss factory"),
        ("hnswlib:Mx=3", "Mx"),
    ],
)
def test_spec_errors_name_the_bad_piece(spec, match):
    with pytest.raises(ValueError, match=match):
        make_oracle(spec)


@pytest.mark.parametrize(
    "spec, match",
    [
        ("faiss:Foo12", "cannot parse factory 'Foo12'"),
        ("faiss:HNSW32;nprobe=4", "nprobe=4 does not apply to factory 'HNSW32'"),
        ("faiss:HNSW32;ef=0", r"ef must be a positive integer or None, got ef=0"),
        ("hnswlib:M=1", r"M must be an integer >= 2, got M=1"),
    ],
)
def test_build_errors_name_the_bad_piece(spec, match):
    with pytest.raises(ValueError, match=match):
        make_oracle(spec).build(np.zeros((20, 4)))


def test_import_error_names_the_extra(monkeypatch):
    monkeypatch.setitem(sys.modules, "faiss", None)
    with pytest.raises(ImportError, match=r"pip install hypann\[faiss\]"):
        FaissOracle()
    with pytest.raises(ImportError, match=r"pip install hypann\[faiss\]"):
        make_oracle("faiss:Flat")
    monkeypatch.setitem(sys.modules, "hnswlib", None)
    with pytest.raises(ImportError, match=r"pip install hypann\[hnswlib\]"):
        HnswlibOracle()


def test_hnswlib_is_deterministic_single_thread(easy):
    X, Q, _ = easy
    a = HnswlibOracle(M=8, ef=10).build(X[:1000]).knn(Q, 5)
    b = HnswlibOracle(M=8, ef=10).build(X[:1000]).knn(Q, 5)
    np.testing.assert_array_equal(a.indices, b.indices)


def _all_distinct_and_true(res, Q, X, k):
    assert res.indices.shape == (len(Q), k)
    for row in res.indices:
        assert np.unique(row).size == k and row.min() >= 0
    np.testing.assert_array_equal(res.sq_dist, np.einsum("mkd,mkd->mk", Q[:, None] - X[res.indices],
                                                          Q[:, None] - X[res.indices]))
    assert np.all(np.diff(res.sq_dist, axis=1) >= 0)


def test_hnswlib_answers_when_its_graph_reaches_fewer_than_k_points():
    """hnswlib refuses a batch in which a search found fewer than k points (here: 5,000 copies of one point)."""
    import hnswlib

    X = np.tile([[0.1, -0.2, 0.05]], (5000, 1))
    Q = np.array([[0.1, -0.2, 0.05], [0.0, 0.0, 0.0], [0.3, 0.3, 0.3]])
    raw = hnswlib.Index(space="l2", dim=3)
    raw.init_index(max_elements=5000, M=16, ef_construction=200, random_seed=100)
    raw.add_items(X.astype(np.float32), np.arange(5000), num_threads=1)
    raw.set_ef(1600)
    with pytest.raises(RuntimeError, match="Cannot return the results"):  # what the oracle has to handle
        raw.knn_query(Q.astype(np.float32), k=1600)
    _all_distinct_and_true(HnswlibOracle().build(X).knn(Q, 1600), Q, X, 1600)


def test_hnswlib_rows_that_stay_short_get_a_float64_scan(easy):
    """A row that fails alone too is answered by an exact scan; the others keep hnswlib's answer."""
    X, Q, truth = easy
    Q = Q[:6]
    oracle = HnswlibOracle().build(X)
    real = oracle._index

    class Refusing:  # hnswlib's behaviour for batches and for query 2 alone
        def set_ef(self, ef):
            real.set_ef(ef)

        def knn_query(self, x, k, num_threads=1):
            if len(x) > 1 or np.array_equal(x[0], Q[2].astype(np.float32)):
                raise RuntimeError("Cannot return the results in a contiguous 2D array. Probably ef or M is too small")
            return real.knn_query(x, k=k, num_threads=num_threads)

    oracle._index = Refusing()
    res = oracle.knn(Q, 10)
    _all_distinct_and_true(res, Q, X, 10)
    exact = BruteForceOracle().build(X).knn(Q[2:3], 10)
    np.testing.assert_array_equal(res.indices[2], exact.indices[0])
    oracle._index = real
    alone = oracle.knn(Q[[0, 1, 3, 4, 5]], 10)
    np.testing.assert_array_equal(res.indices[[0, 1, 3, 4, 5]], alone.indices)


def test_hnswlib_other_errors_are_not_swallowed(easy):
    X, Q, _ = easy
    oracle = HnswlibOracle().build(X)

    class Broken:
        def set_ef(self, ef):
            pass

        def knn_query(self, x, k, num_threads=1):
            raise RuntimeError("something else")

    oracle._index = Broken()
    with pytest.raises(RuntimeError, match="something else"):
        oracle.knn(Q[:3], 5)
