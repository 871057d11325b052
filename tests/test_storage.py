"""``storage="float32"``: exact k-NN and range search for the *stored* points, one copy of the points.

The stored representation of a point is its float32 coordinates (converted
exactly to float64) with the float64 conformal factor ``1-|x|^2`` taken from
the caller's float64 coordinates. The reference is float64 brute force in
numpy over exactly that representation: the k returned must be the k
smallest ``delta`` (ties allowed) and every distance must match.
"""

from __future__ import annotations

import warnings

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

import hypann
from hypann.geometry._kernels import conformal_factor
from tests.conftest import ball_points, deep_clusters

pytestmark = [
    pytest.mark.kernels,  # also run under NUMBA_BOUNDSCHECK=1 (make test-boundscheck)
    # most tests here store points up to 1-|x|^2 ~ 1e-12 in float32 on purpose; the tests of the
    # warning itself see it through pytest.warns / catch_warnings
    pytest.mark.filterwarnings("ignore::hypann.rounding.Float32PrecisionWarning"),
]

RTOL = 1e-12


def _stored(X):
    """The float32 index's representation of ``X``: float32 coordinates, float64 conformal factors."""
    return X.astype(np.float32).astype(np.float64), conformal_factor(X)


def _reference_dist(Q, X):
    """Distances from every query to every stored point of a float32 index, float64 numpy (m, n)."""
    pts, cx = _stored(X)
    diff = Q[:, None, :] - pts[None, :, :]
    delta = np.einsum("mnd,mnd->mn", diff, diff) / (conformal_factor(Q)[:, None] * cx[None, :])
    return 2.0 * np.arcsinh(np.sqrt(delta))


def _assert_exact_knn(res, ref, k):
    """Sorted distances equal the k smallest of ``ref``; each returned id is at its returned distance."""
    want = np.sort(ref, axis=1)[:, :k]
    np.testing.assert_allclose(res.distances, want, rtol=RTOL, atol=1e-300)
    np.testing.assert_allclose(np.take_along_axis(ref, res.indices, axis=1), res.distances, rtol=RTOL, atol=1e-300)
    assert all(len(set(row)) == k for row in res.indices.tolist())


def _data(seed, n, d, min_exp, deep_fraction):
    """Points with ``1-|x|^2`` down to ``10^-min_exp`` plus a share in clusters at hyperbolic norm 10-30."""
    rng = np.random.default_rng(seed)
    n_deep = int(n * deep_fraction)
    parts = [ball_points(rng, n - n_deep, d, min_conformal=10.0**-min_exp)]
    if n_deep:
        parts.append(deep_clusters(rng, n_deep, d, h_min=10.0, h_max=30.0, n_clusters=3))
    X = np.vstack(parts)
    Q = np.vstack([X[rng.choice(n, 4, replace=False)], ball_points(rng, 4, d, min_conformal=10.0**-min_exp),
                   deep_clusters(rng, 3, d, h_min=10.0, h_max=30.0, n_clusters=1), np.zeros((1, d))])
    return X, Q


@given(
    seed=st.integers(0, 2**32 - 1),
    n=st.integers(20, 400),
    d=st.sampled_from([2, 3, 7, 16]),
    min_exp=st.sampled_from([2, 6, 12]),
    deep_fraction=st.sampled_from([0.0, 0.3, 1.0]),
    k=st.integers(1, 12),
    leaf_size=st.sampled_from([1, 4, 16]),
)
def test_float32_hkdtree_is_exact_for_the_stored_points(seed, n, d, min_exp, deep_fraction, k, leaf_size):
    X, Q = _data(seed, n, d, min_exp, deep_fraction)
    index = hypann.HyperbolicIndex(storage="float32", leaf_size=leaf_size).build(X)
    _assert_exact_knn(index.search(Q, k), _reference_dist(Q, X), k)


@given(seed=st.integers(0, 2**32 - 1), n=st.integers(20, 300), d=st.sampled_from([2, 5, 12]),
       min_exp=st.sampled_from([3, 12]), deep_fraction=st.sampled_from([0.0, 0.5]), k=st.integers(1, 8))
def test_float32_brute_is_exact_for_the_stored_points(seed, n, d, min_exp, deep_fraction, k):
    X, Q = _data(seed, n, d, min_exp, deep_fraction)
    index = hypann.HyperbolicIndex(algorithm="brute", storage="float32").build(X)
    _assert_exact_knn(index.search(Q, k), _reference_dist(Q, X), k)


@pytest.mark.parametrize(("scan_fraction", "choice"), [(1.0, "hkdtree"), (1e-9, "brute")])
@pytest.mark.parametrize("storage", ["float64", "float32"])
def test_auto_keeps_one_copy_and_round_trips(tmp_path, scan_fraction, choice, storage):
    """``algorithm="auto"`` (the default): the kd-tree it keeps holds the only copy of the points;
    either choice saves, loads (mmap or not) and answers as the method it chose."""
    X, Q = _data(3, 2000, 5, 10, 0.3)
    index = hypann.HyperbolicIndex(storage=storage, scan_fraction=scan_fraction, random_state=0).build(X)
    assert index.algorithm_.choice_ == choice
    assert (index._points is None) == (choice == "hkdtree")
    same = hypann.HyperbolicIndex(algorithm=choice, storage=storage).build(X)
    want = same.search(Q, 7)
    got = index.search(Q, 7)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.distances, want.distances)
    np.testing.assert_array_equal(index.points_, same.points_)
    index.save(tmp_path / "auto.hypann")
    for mmap in (False, True):
        loaded = hypann.load(tmp_path / "auto.hypann", mmap=mmap)
        assert loaded.algorithm_.choice_ == choice and f"chose {choice!r}" in loaded.describe()
        again = loaded.search(Q, 7)
        np.testing.assert_array_equal(again.indices, want.indices)
        np.testing.assert_array_equal(again.distances, want.distances)


@pytest.mark.parametrize("algorithm", ["hkdtree", "brute"])
def test_float32_range_search_is_exact_for_the_stored_points(algorithm):
    X, Q = _data(5, 500, 4, 12, 0.3)
    ref = _reference_dist(Q, X)
    index = hypann.HyperbolicIndex(algorithm=algorithm, storage="float32", **(
        {"leaf_size": 4} if algorithm == "hkdtree" else {})).build(X)
    for r in (0.5, 3.0, 12.0):
        hits = index.search_radius(Q, r)
        for i in range(len(Q)):
            ids, dists = hits[i]
            want = np.flatnonzero(ref[i] <= r)
            # points within r*(1 +- 1e-12) of the query may fall either way
            assert set(want[ref[i, want] < r * (1 - 1e-12)]) <= set(ids.tolist()) <= set(want.tolist()) | set(
                np.flatnonzero(ref[i] <= r * (1 + 1e-12)).tolist())
            np.testing.assert_allclose(dists, ref[i, ids], rtol=RTOL)


def test_float32_storage_keeps_one_float32_copy():
    X, _ = _data(1, 3000, 6, 8, 0.2)
    index = hypann.HyperbolicIndex(algorithm="hkdtree", storage="float32").build(X)
    tree = index.algorithm_.tree_
    assert index._points is None and index._conformal is None  # the tree's permuted copy is the only one
    assert tree.points_.dtype == np.float32 and tree.lo_.dtype == np.float32 and tree.hi_.dtype == np.float32
    assert tree.conformal_.dtype == np.float64 and tree.max_conformal_.dtype == np.float64
    np.testing.assert_array_equal(index.points_, X.astype(np.float32))
    np.testing.assert_array_equal(index.conformal_, conformal_factor(X))  # from the caller's float64 coordinates
    f64 = hypann.HyperbolicIndex(algorithm="hkdtree").build(X)
    assert f64._points is None and f64.algorithm_.tree_.points_.dtype == np.float64
    saved = f64.nbytes - index.nbytes
    n_nodes = tree.n_nodes_
    assert saved == X.size * 4 + 2 * n_nodes * X.shape[1] * 4  # points and boxes at half the size, nothing else
    # every stored point finds itself at distance 0 -- or a point that float32 made identical to it
    # (the clusters at hyperbolic norm 10-30 collapse: their points differ by less than float32 resolves)
    res = index.search(None, 1)
    np.testing.assert_array_equal(res.distances[:, 0], 0.0)
    stored = X.astype(np.float32)
    np.testing.assert_array_equal(stored[res.indices[:, 0]], stored)
    assert np.mean(res.indices[:, 0] == np.arange(len(X))) > 0.75


def test_float32_matches_float64_when_the_data_are_float32():
    """float32 input loses nothing: both storages give the same answers."""
    X, Q = _data(2, 800, 5, 6, 0.0)
    X = X.astype(np.float32)
    a = hypann.HyperbolicIndex(storage="float32").build(X).search(Q, 6)
    b = hypann.HyperbolicIndex(storage="float64").build(X).search(Q, 6)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.distances, b.distances)


@pytest.mark.parametrize(("model", "c"), [("poincare", 2.0), ("lorentz", 1.0)])
def test_float32_other_models_and_curvatures(model, c):
    from hypann.geometry.models import poincare_to_lorentz

    X, Q = _data(3, 400, 4, 8, 0.0)
    if model == "lorentz":
        Xin, Qin = poincare_to_lorentz(X), poincare_to_lorentz(Q)
    else:
        Xin, Qin = X / np.sqrt(c), Q / np.sqrt(c)
    f32 = hypann.HyperbolicIndex(model=model, c=c, storage="float32", leaf_size=4).build(Xin)
    f64 = hypann.HyperbolicIndex(model=model, c=c, algorithm="brute").build(Xin)
    # the stored conformal factors are float64 ones from the caller's coordinates
    np.testing.assert_array_equal(f32.conformal_, f64.conformal_)
    np.testing.assert_array_equal(f32.points_, f64.points_.astype(np.float32))
    res = f32.search(Qin, 5)
    ref = hypann.HyperbolicIndex(model=model, c=c, algorithm="brute", storage="float32").build(Xin).search(Qin, 5)
    np.testing.assert_allclose(res.distances, ref.distances, rtol=RTOL)


def test_float32_add_remove_compact_save():
    X, Q = _data(4, 600, 3, 10, 0.2)
    index = hypann.HyperbolicIndex(storage="float32", leaf_size=4).build(X[:500])
    index.add(X[500:])
    index.remove([3, 7, 550])
    keep = np.setdiff1d(np.arange(600), [3, 7, 550])
    ref = _reference_dist(Q, X)[:, keep]
    res = index.search(Q, 5)
    np.testing.assert_allclose(res.distances, np.sort(ref, axis=1)[:, :5], rtol=RTOL)
    index.compact()
    res2 = index.search(Q, 5)
    np.testing.assert_allclose(res2.distances, res.distances, rtol=RTOL)
    np.testing.assert_array_equal(res2.indices, res.indices)


def test_build_from_memmap_in_blocks(tmp_path, monkeypatch):
    """float32 storage converts a memmap block by block (no float64 copy); same index as from an array."""
    import hypann.index as hindex

    monkeypatch.setattr(hindex, "_STORAGE_BLOCK", 64)
    X, Q = _data(6, 1000, 4, 12, 0.2)
    np.save(tmp_path / "X.npy", X)
    mm = np.load(tmp_path / "X.npy", mmap_mode="r")
    a = hypann.HyperbolicIndex(storage="float32").build(mm)
    b = hypann.HyperbolicIndex(storage="float32").build(X)
    np.testing.assert_array_equal(a.points_, b.points_)
    np.testing.assert_array_equal(a.conformal_, b.conformal_)
    np.testing.assert_array_equal(a.search(Q, 4).indices, b.search(Q, 4).indices)
    bad = X.copy()
    bad[777] = 2.0 * bad[777] / np.linalg.norm(bad[777])
    np.save(tmp_path / "bad.npy", bad)
    with pytest.raises(ValueError, match=r"X row 777 is not strictly inside"):
        hypann.HyperbolicIndex(storage="float32").build(np.load(tmp_path / "bad.npy", mmap_mode="r"))


@pytest.mark.parametrize("algorithm", ["vamana", "recentering", "shells"])
def test_float32_unsupported_algorithms_say_what_is_supported(algorithm):
    with pytest.raises(ValueError, match=r"storage='float32' is supported by the algorithms 'auto', 'hkdtree', 'brute', 'graph' .*"
                                         rf"got algorithm='{algorithm}'; use storage='float64'"):
        hypann.HyperbolicIndex(algorithm=algorithm, storage="float32").build(np.zeros((5, 2)))


# --------------------------------------------------------------------------- the float32 rounding check


def _merged_by_float32(rng, n, d):
    """Pairs of distinct float64 points that round to one float32 point, far out (``1-|x|^2`` about 1e-10)."""
    centres = ball_points(rng, n // 2, d, min_conformal=1e-10)
    centres *= np.sqrt(1.0 - 1e-10) / np.linalg.norm(centres, axis=1, keepdims=True)
    twins = centres + 1e-12 * rng.standard_normal(centres.shape)  # far below float32's resolution at |x| ~ 1
    return np.vstack([centres, twins])


def test_float32_storage_warns_when_rounding_merges_points_near_the_boundary(monkeypatch):
    from hypann import rounding
    from hypann.rounding import CHANGED_RELATIVE, Float32PrecisionWarning

    X = _merged_by_float32(np.random.default_rng(0), 400, 5)
    assert len(np.unique(X.astype(np.float32), axis=0)) < len(np.unique(X, axis=0))  # float32 merges points
    for algorithm in ("auto", "graph", "brute"):
        sampled = 256
        if algorithm == "brute":  # a scan examines every point: the check stops after its first 32 searches
            monkeypatch.setattr(rounding, "MIN_WORK", 0)
            sampled = 32
        with pytest.warns(Float32PrecisionWarning, match=r"storage='float32' changes distances near the boundary: "
                                                          rf"of the {sampled} points nearest it .*build with "
                                                          r"storage='float64'"):
            index = hypann.HyperbolicIndex(algorithm=algorithm, storage="float32").build(X)
        report = index.float32_rounding_
        assert report.sampled == sampled and report.harmful
        assert report.changed > 0.5 * report.sampled and report.median_change > CHANGED_RELATIVE
        assert report.min_conformal == pytest.approx(conformal_factor(X).min(), rel=1e-9)


def test_float32_storage_does_not_warn_away_from_the_boundary_or_on_float32_input():
    from hypann.geometry.models import poincare_to_lorentz
    from hypann.rounding import Float32PrecisionWarning

    rng = np.random.default_rng(1)
    X = ball_points(rng, 2000, 6, min_conformal=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Float32PrecisionWarning)
        index = hypann.HyperbolicIndex(storage="float32").build(X)
        report = index.float32_rounding_
        assert report.changed == 0 and not report.harmful and report.max_change < 1e-4
        # float32 input at c = 1 is stored as it is: nothing to check
        assert hypann.HyperbolicIndex(storage="float32").build(X.astype(np.float32)).float32_rounding_ is None
        assert hypann.HyperbolicIndex(storage="float32").build(X[:1]).float32_rounding_ is None
        # at another curvature it is scaled to the unit ball and rounded again: checked; so is float32
        # input on the hyperboloid, which is mapped to the ball
        X3 = (X / np.sqrt(3.0)).astype(np.float32)
        assert hypann.HyperbolicIndex(storage="float32", c=3.0).build(X3).float32_rounding_.sampled == 256
        L32 = poincare_to_lorentz(X).astype(np.float32)
        assert hypann.HyperbolicIndex(storage="float32", model="lorentz").build(L32).float32_rounding_.sampled == 256
    assert not hasattr(hypann.HyperbolicIndex().build(X[:50]), "float32_rounding_")


@pytest.mark.parametrize(("model", "c"), [("poincare", 2.0), ("lorentz", 1.0)])
def test_float32_rounding_check_in_other_models_and_curvatures(model, c):
    from hypann.geometry.models import poincare_to_lorentz
    from hypann.rounding import Float32PrecisionWarning

    X = _merged_by_float32(np.random.default_rng(2), 300, 4)
    Xin = poincare_to_lorentz(X) / np.sqrt(c) if model == "lorentz" else X / np.sqrt(c)
    with pytest.warns(Float32PrecisionWarning):
        index = hypann.HyperbolicIndex(model=model, c=c, storage="float32").build(Xin)
    assert index.float32_rounding_.harmful


def test_relative_change_of_pairs():
    from hypann.rounding import boundary_sample, relative_change, rounding_report

    x = np.array([[0.5, 0.0], [0.1, 0.2], [0.3, 0.3], [0.0, 0.0]])
    y = np.array([[0.5, 0.0], [0.1, 0.25], [0.3, 0.31], [0.0, 0.0]])
    cx, cy = conformal_factor(x), conformal_factor(y)
    d64 = hypann.geometry.poincare.dist(x, y)
    stored = np.array([0.0, d64[1], 0.0, 1.0])  # duplicates stay; exact; merged; apart from a duplicate
    change = relative_change(stored, x, cx, y, cy)
    np.testing.assert_array_equal(change, [0.0, 0.0, 1.0, np.inf])
    np.testing.assert_allclose(relative_change(1.5 * d64[1:2], x[1:2], cx[1:2], y[1:2], cy[1:2]), [0.5], rtol=1e-12)
    # in curvature -c the float64 distance is the unit-ball one over sqrt(c)
    np.testing.assert_allclose(relative_change(d64[1:2] / 2.0, x[1:2], cx[1:2], y[1:2], cy[1:2], c=4.0), [0.0],
                               atol=1e-15)
    report = rounding_report(change, 0.25)
    assert (report.sampled, report.changed, report.max_change) == (4, 2, np.inf) and report.harmful
    np.testing.assert_array_equal(boundary_sample(np.array([0.5, 0.1, 0.9, 0.2]), 2), [1, 3])
    np.testing.assert_array_equal(boundary_sample(np.array([0.5, 0.1]), 5), [0, 1])


def test_float32_storage_checks_the_points_it_adds():
    """add() to a float32 index: points that rounding merges near the boundary warn (as added points), the
    report replaces the build's; calm points do not warn; float32 input in the unit ball is not checked
    (the report stays)."""
    from hypann.rounding import Float32PrecisionWarning, added_changes

    rng = np.random.default_rng(5)
    calm = ball_points(rng, 600, 5, min_conformal=1e-3)
    merged = _merged_by_float32(rng, 400, 5)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Float32PrecisionWarning)
        index = hypann.HyperbolicIndex(storage="float32").build(calm)
        index.add(ball_points(rng, 50, 5, min_conformal=1e-3))
        assert index.float32_rounding_.added and index.float32_rounding_.changed == 0
        before = index.float32_rounding_
        index.add(ball_points(rng, 50, 5, min_conformal=1e-3).astype(np.float32))  # float32: stored as given
        assert index.float32_rounding_ is before  # nothing checked: the report stays
    index = hypann.HyperbolicIndex(storage="float32").build(calm)
    with pytest.warns(Float32PrecisionWarning, match=r"of the 256 added points nearest it"):
        index.add(merged)
    report = index.float32_rounding_
    assert report.added and report.harmful and report.changed > 0.5 * report.sampled
    # a neighbour that the exact point does not have among its 3 nearest: the order changed, change inf
    def search(queries, q_conformal, k):  # the rounded point's 2 nearest are ids 5, 6; the exact one's 7, 8, 9
        found = np.tile([5, 6] if k == 2 else [7, 8, 9], (len(queries), 1))
        return hypann.SearchResult(found, np.ones(found.shape), hypann.SearchStats.zeros(len(queries)))

    change, _ = added_changes(calm[:3], conformal_factor(calm[:3]), np.array([0, 1, 2]), search)(np.arange(3))
    np.testing.assert_array_equal(change, np.inf)


@pytest.mark.parametrize(("algorithm", "params"), [("hkdtree", {}), ("auto", {}), ("graph", {}),
                                                   ("graph", {"exact": True})])
def test_conformal_factors_of_an_index_that_holds_the_points(algorithm, params):
    """``index.conformal_`` of an algorithm that keeps the only (reordered) copy of the points comes from
    ``conformal_in_input_order()`` (no gathered points): the factors of ``points_in_input_order()``, in
    row order, equal to the stored representation's."""
    X = deep_clusters(np.random.default_rng(4), 600, 5)
    index = hypann.HyperbolicIndex(algorithm=algorithm, storage="float32", random_state=0, **params).build(X)
    algo = index.algorithm_
    assert algo.owns_points
    gathered = algo.points_in_input_order()[1]
    np.testing.assert_array_equal(algo.conformal_in_input_order(), gathered)
    np.testing.assert_array_equal(index.conformal_, gathered)
    np.testing.assert_array_equal(index.conformal_, _stored(X)[1])


@pytest.mark.parametrize("algorithm", ["hkdtree", "graph"])
def test_the_points_and_their_factors_are_gathered_once(algorithm, monkeypatch):
    """The index reads the points and their factors from an algorithm that owns them in one gather
    (``points_in_input_order``): a search of the indexed points themselves, a search after a removal and
    the rebuild of ``compact`` never gather the factors a second time (``conformal_in_input_order``)."""
    X = deep_clusters(np.random.default_rng(5), 400, 4)
    index = hypann.HyperbolicIndex(algorithm=algorithm, random_state=0).build(X)
    expected = index.search(None, 3)
    calls = []

    def gather_again():
        calls.append(1)
        raise AssertionError("the conformal factors were gathered a second time")

    monkeypatch.setattr(index.algorithm_, "conformal_in_input_order", gather_again)
    found = index.search(None, 3)
    np.testing.assert_array_equal(found.indices, expected.indices)
    np.testing.assert_array_equal(found.distances, expected.distances)
    index.remove([0, 1])
    after = index.search(None, 3)
    assert after.indices.shape == (398, 3) and not np.isin(after.indices, [0, 1]).any()
    index.compact()
    assert index.n_points_ == 398 and not calls


def test_float32_answers_say_so_and_recall_is_counted_on_the_float64_points():
    """An answer of float32 storage (k-NN or range) says that its distances are those of the rounded points:
    ``SearchResult.recall`` with them undercounts (and warns), ``distances_of_ids`` gives the float64 distances
    of the same ids."""
    from hypann.datasets.synthetic import clustered
    from hypann.eval import distances_of_ids, exact_knn, recall
    from hypann.result import Float32PrecisionWarning

    X = clustered(3000, 6, seed=0, n_clusters=20)
    Q = clustered(100, 6, seed=100, n_clusters=20)
    _, true_d = exact_knn(Q, X, 10)
    f64 = hypann.HyperbolicIndex().build(X)
    f32 = hypann.HyperbolicIndex(storage="float32").build(X)
    for index, flag in ((f64, False), (f32, True)):
        for rows in (Q, Q[:1], Q[:0]):  # a batch, the one-query path, no query
            assert index.search(rows, 10).float32_points is flag
        assert index.search_radius(Q[:5], 1.0).float32_points is flag
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert f64.search(Q, 10).recall(true_d) == 1.0
    res = f32.search(Q, 10)
    with pytest.warns(Float32PrecisionWarning, match=r"distances_of_ids\(Q, X, res.indices\)"):
        reported = res.recall(true_d)
    assert reported < 1.0  # found neighbours whose rounded distance misses the threshold of 1e-9
    assert recall(distances_of_ids(Q, X, res.indices), true_d) == 1.0
