"""Scans of few queries that read the points' one-byte codes first (hypann.geometry.screened_scan) equal the
plain scan bit for bit; the structures that scan keep the codes for their points."""

from __future__ import annotations

import copy
import pickle

import numba
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypann
from hypann._runtime import read_only
from hypann.geometry import gram_scan
from hypann.geometry._kernels import conformal_factor
from hypann.geometry.screen_codes import screen_codes
from hypann.geometry.screened_scan import SCANNED_CODES_MIN_DIM, ScanCodes, memory_mapped, screened_knn_delta
from tests.conftest import ball_points, brute_knn_delta
from tests.test_gram_scan import _inside_after_rounding

pytestmark = pytest.mark.kernels


def _points(seed, n, d, kind, storage):
    """``n`` points of ``d`` coordinates stored as ``storage``: spread down to ``1-|x|^2 = 1e-12``, tight
    clusters (neighbours closer than a code step), or clusters with exact copies."""
    rng = np.random.default_rng(seed)
    if kind == "spread":
        X = ball_points(rng, n, d, min_conformal=1e-12)
    else:
        centres = ball_points(rng, 3, d, min_conformal=1e-6) * 0.999
        X = centres[rng.integers(0, 3, n)] * (1.0 - 1e-7 * rng.uniform(0, 1, (n, 1)))
        X += rng.normal(scale=1e-7, size=X.shape) * (conformal_factor(X)[:, None] > 1e-5)
        if kind == "copies":
            X[n // 2:] = X[: n - n // 2]
    return _inside_after_rounding(X, storage)


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**31 - 1), n=st.integers(1, 300), d=st.sampled_from([16, 17, 40, 100]),
       m=st.integers(1, 3), k=st.integers(1, 12), kind=st.sampled_from(["spread", "clusters", "copies"]),
       storage=st.sampled_from([np.float64, np.float32]), n_blocks=st.sampled_from([0, 2, 5]),
       serial=st.booleans())
def test_the_screened_scan_is_the_plain_scan(seed, n, d, m, k, kind, storage, n_blocks, serial):
    X = _points(seed, n, d, kind, storage)
    cx = conformal_factor(X.astype(np.float64))
    rng = np.random.default_rng(seed + 1)
    Q = np.concatenate([ball_points(rng, m - 1, d, min_conformal=1e-12), X[:1].astype(np.float64)])
    cq = conformal_factor(Q)
    want = brute_knn_delta(Q, cq, X, cx, k)
    # read-only views, as the library passes them: one compiled type per kernel
    ids, deltas = screened_knn_delta(Q, cq, read_only(X), read_only(cx), screen_codes(X, cx), k, n_blocks=n_blocks,
                                     serial=serial)
    np.testing.assert_array_equal(ids, want[0])
    np.testing.assert_array_equal(deltas, want[1])


@pytest.mark.parametrize("threads", [1, 2])
def test_knn_delta_scan_reads_the_codes_of_few_queries_only(threads, monkeypatch):
    rng = np.random.default_rng(2)
    X = ball_points(rng, 3000, 24)
    cx = conformal_factor(X)
    Q = ball_points(rng, 40, 24)
    cq = conformal_factor(Q)
    codes = ScanCodes()
    calls = []
    real = gram_scan.screened_knn_delta
    monkeypatch.setattr(gram_scan, "screened_knn_delta", lambda *a, **kw: calls.append(len(a[0])) or real(*a, **kw))
    before = numba.get_num_threads()
    numba.set_num_threads(threads)
    try:
        for m in (1, 2, 3, 40):
            got = gram_scan.knn_delta_scan(Q[:m], cq[:m], X, cx, 7, codes=codes)
            want = brute_knn_delta(Q[:m], cq[:m], X, cx, 7)
            np.testing.assert_array_equal(got[0], want[0])
            np.testing.assert_array_equal(got[1], want[1])
    finally:
        numba.set_num_threads(before)
    assert calls == [1, 2, 3]  # 40 queries: Gram blocks
    made = codes.get(X, cx)
    assert made is codes.get(X, cx)  # made once for these arrays


def test_scan_codes_follow_their_arrays_and_are_not_pickled():
    rng = np.random.default_rng(3)
    X = ball_points(rng, 50, SCANNED_CODES_MIN_DIM)
    cx = conformal_factor(X)
    codes = ScanCodes()
    first = codes.get(X, cx)
    assert first is codes.get(X, cx)
    Y = X * 0.5
    second = codes.get(Y, conformal_factor(Y))
    assert second is not first
    np.testing.assert_array_equal(second[0], screen_codes(Y, conformal_factor(Y))[0])
    assert ScanCodes().get(X[:, :SCANNED_CODES_MIN_DIM - 1], cx) is None  # too few coordinates
    for twin in (pickle.loads(pickle.dumps(codes)), copy.deepcopy(codes)):
        assert twin._made is None


@pytest.mark.parametrize("config", [dict(algorithm="brute"), dict(algorithm="brute", storage="float32"),
                                    dict(algorithm="brute", c=0.3), dict(algorithm="auto", scan_fraction=1e-9)],
                         ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_one_query_scans_answer_as_the_batch_and_keep_their_codes(config):
    rng = np.random.default_rng(4)
    X = ball_points(rng, 2000, 32, min_conformal=1e-8)
    Q = 0.99 * ball_points(rng, 12, 32, min_conformal=1e-8)
    index = hypann.HyperbolicIndex(random_state=0, verbose=False, **config).build(X)
    batch = index.search(Q, 8)  # Gram blocks
    for i in range(len(Q)):
        one = index.search(Q[i:i + 1], 8)
        np.testing.assert_array_equal(one.indices[0], batch.indices[i])
        np.testing.assert_array_equal(one.distances[0], batch.distances[i])
    brute = index.algorithm_ if config["algorithm"] == "brute" else index.algorithm_.chosen_
    made = brute._scan_codes._made
    assert made is not None and made[0] is brute.points_
    twin = pickle.loads(pickle.dumps(index))
    np.testing.assert_array_equal(twin.search(Q[:1], 8).indices, batch.indices[:1])


@pytest.mark.parametrize("algorithm", ["brute", "graph"])
def test_the_codes_count_in_nbytes_and_memory_mapped_points_get_none(algorithm, tmp_path):
    """The codes a one-query scan makes count in the index's ``nbytes``; an index loaded with ``mmap=True``
    makes none (its points were mapped so as not to be held in memory) and answers the same."""
    rng = np.random.default_rng(6)
    X = ball_points(rng, 1500, 20, min_conformal=1e-6)
    Q = 0.99 * ball_points(rng, 3, 20, min_conformal=1e-6)
    index = hypann.HyperbolicIndex(algorithm=algorithm, random_state=0, verbose=False).build(X)
    structure = index.algorithm_ if algorithm == "brute" else index.algorithm_.graph_
    if algorithm == "graph":
        structure.__dict__["default_evaluations_"] = len(X)  # make its default search the scan (scans_)
        assert structure.scans_
    index.save(tmp_path / "i.hypann")
    before = index.nbytes
    want = index.search(Q[:1], 5)
    assert index.nbytes == before + 1500 * (20 + 32)
    mapped = hypann.load(tmp_path / "i.hypann", mmap=True)
    loaded = mapped.algorithm_ if algorithm == "brute" else mapped.algorithm_.graph_
    if algorithm == "graph":
        loaded.__dict__["default_evaluations_"] = len(X)
    got = mapped.search(Q[:1], 5)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.distances, want.distances)
    assert memory_mapped(loaded.points_) and loaded._scan_codes._made is None


def test_threads_that_make_the_codes_at_once_get_the_plain_answers():
    """Eight Python threads send one query each to a fresh index at once: those that find no codes make
    them (perhaps several at a time); every answer is the batch's."""
    from concurrent.futures import ThreadPoolExecutor

    rng = np.random.default_rng(7)
    X = ball_points(rng, 3000, 24, min_conformal=1e-6)
    Q = 0.99 * ball_points(rng, 32, 24, min_conformal=1e-6)
    index = hypann.HyperbolicIndex(algorithm="brute", verbose=False).build(X)
    want = index.search(Q, 6)
    assert index.algorithm_._scan_codes._made is None  # a batch of Gram blocks makes no codes
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: index.search(Q[i:i + 1], 6), range(len(Q))))
    for i, one in enumerate(got):
        np.testing.assert_array_equal(one.indices[0], want.indices[i])
        np.testing.assert_array_equal(one.distances[0], want.distances[i])
    assert index.algorithm_._scan_codes._made is not None


@pytest.mark.parametrize("algorithm", ["brute", "graph"])
def test_a_new_build_drops_the_codes_of_the_old_points(algorithm):
    rng = np.random.default_rng(8)
    X = ball_points(rng, 1200, 20, min_conformal=1e-6)
    index = hypann.HyperbolicIndex(algorithm=algorithm, random_state=0, verbose=False).build(X)
    structure = index.algorithm_ if algorithm == "brute" else index.algorithm_.graph_
    if algorithm == "graph":
        structure._scan(X[:1], conformal_factor(X[:1]), 3)  # its default search walks here
    else:
        index.search(X[:1], 3)
    assert structure._scan_codes.nbytes == 1200 * (20 + 32)
    Y = X[:700] * 0.9
    structure.build(Y, conformal_factor(Y))
    assert "_scan_codes" not in vars(structure)
