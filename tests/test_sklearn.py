"""The scikit-learn estimators: sklearn's own estimator checks, neighbour graphs, radius queries, pipelines."""

from __future__ import annotations

import pickle
import warnings

import numpy as np
import pytest

pytest.importorskip("sklearn")

from scipy import sparse  # noqa: E402
from sklearn.base import clone  # noqa: E402
from sklearn.cluster import DBSCAN  # noqa: E402
from sklearn.manifold import TSNE, Isomap  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.utils.estimator_checks import check_estimator  # noqa: E402
from threadpoolctl import threadpool_limits  # noqa: E402

from hypann.geometry.poincare import pairwise_dist  # noqa: E402
from hypann.index import DEFAULT_ALGORITHM, HyperbolicIndex  # noqa: E402
from hypann.sklearn import HyperbolicKNeighborsTransformer, HyperbolicNearestNeighbors  # noqa: E402
from tests.conftest import ball_points  # noqa: E402
from tests.test_exact_search import true_knn_dist  # noqa: E402

ESTIMATORS = [HyperbolicNearestNeighbors, HyperbolicKNeighborsTransformer]

# sklearn's generic checks fit on data such as 3 * uniform(0, 1)^d or N(0, 100^2): rows of norm
# >= 1, outside the unit ball. These checks fail for that reason alone (asserted below: each
# fails with the ball message, and every check passes once the ball is big enough to hold its data).
_BALL = "points must lie strictly inside the unit ball (c=1), and this check's data has rows of norm >= 1"
EXPECTED_FAILED_CHECKS = {
    name: _BALL
    for name in [
        "check_dict_unchanged",
        "check_dont_overwrite_parameters",
        "check_dtype_object",
        "check_estimators_dtypes",
        "check_estimators_fit_returns_self",
        "check_estimators_nan_inf",
        "check_estimators_overwrite_params",
        "check_estimators_pickle",
        "check_f_contiguous_array_estimator",
        "check_fit2d_1feature",
        "check_fit2d_1sample",
        "check_fit2d_predict1d",
        "check_fit_check_is_fitted",
        "check_fit_idempotent",
        "check_fit_score_takes_y",
        "check_methods_sample_order_invariance",
        "check_methods_subset_invariance",
        "check_n_features_in",
        "check_n_features_in_after_fitting",
        "check_pipeline_consistency",
        "check_positive_only_tag_during_fit",
        "check_readonly_memmap_input",
        # transformer checks
        "check_transformer_data_not_an_array",
        "check_transformer_general",
        "check_transformer_preserve_dtypes",
    ]
}
# Not run without SCIPY_ARRAY_API=1 (the estimators take numpy/torch input only).
_SKIPPED = {"check_array_api_input"}
# Curvature -c with c = 1e-6: the ball has radius 1000 and holds every dataset of sklearn's checks.
BIG_BALL_C = 1e-6


def _chain(exc):
    while exc is not None:
        yield str(exc)
        exc = exc.__cause__ or exc.__context__


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_sklearn_checks_all_pass_in_a_ball_that_holds_their_data(cls):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(cls(c=BIG_BALL_C), on_fail=None, on_skip=None)
    bad = [(r["check_name"], r["status"], repr(r["exception"])[:200]) for r in results
           if r["status"] != "passed" and r["check_name"] not in _SKIPPED]
    assert not bad
    assert sum(r["status"] == "passed" for r in results) >= 40


@pytest.mark.parametrize("cls", ESTIMATORS, ids=lambda c: c.__name__)
def test_sklearn_checks_of_the_default_estimator_fail_only_outside_the_ball(cls):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        results = check_estimator(cls(), expected_failed_checks=EXPECTED_FAILED_CHECKS, on_fail=None, on_skip=None)
    failed = [(r["check_name"], repr(r["exception"])[:200]) for r in results if r["status"] == "failed"]
    assert not failed
    for r in results:
        if r["status"] == "xfail":
            # expected to fail, and for the stated reason
            assert any("not strictly inside the Poincare ball" in text for text in _chain(r["exception"])), r
        elif r["check_name"] in EXPECTED_FAILED_CHECKS:
            pytest.fail(f"{r['check_name']} is listed as failing outside the ball but {r['status']}")
    assert sum(r["status"] == "passed" for r in results) >= 17


def test_default_algorithm_is_the_package_default():
    assert DEFAULT_ALGORITHM == "auto"
    assert HyperbolicIndex().algorithm == DEFAULT_ALGORITHM
    for cls in ESTIMATORS:
        assert cls().algorithm == DEFAULT_ALGORITHM
        X = ball_points(np.random.default_rng(0), 30, 2)
        assert cls(n_neighbors=2).fit(X).index_.algorithm == DEFAULT_ALGORITHM


def test_kneighbors_matches_brute_force(rng):
    X = ball_points(rng, 300, 4)
    Q = ball_points(rng, 20, 4)
    nn = HyperbolicNearestNeighbors(n_neighbors=4).fit(X)
    dist, ind = nn.kneighbors(Q)
    np.testing.assert_allclose(dist, true_knn_dist(X, Q, 4), rtol=1e-9)
    assert nn.kneighbors(Q, 2, return_distance=False).shape == (20, 2)
    assert nn.n_samples_fit_ == 300 and nn.n_features_in_ == 4


@pytest.mark.parametrize("cls", ESTIMATORS)
def test_n_jobs_reaches_the_index_and_does_not_change_answers(rng, cls):
    X = ball_points(rng, 2000, 5, min_conformal=1e-9)
    Q = ball_points(rng, 200, 5, min_conformal=1e-9)
    one = cls(n_neighbors=6, n_jobs=1).fit(X)
    two = cls(n_neighbors=6, n_jobs=2).fit(X)
    assert one.index_.n_jobs == 1 and two.index_.n_jobs == 2
    d1, i1 = one.kneighbors(Q)
    d2, i2 = two.kneighbors(Q)
    np.testing.assert_array_equal(i1, i2)
    np.testing.assert_array_equal(d1, d2)
    one.set_params(n_jobs=-1)  # read again at query time, as scikit-learn's estimators do
    one.kneighbors(Q[:3])
    assert one.index_.n_jobs == -1
    with pytest.raises(ValueError, match=r"n_jobs must be a positive integer, -1 or None \(all cores\), got n_jobs=0"):
        one.set_params(n_jobs=0).kneighbors(Q[:3])


def test_x_none_excludes_self(rng):
    X = ball_points(rng, 100, 3)
    dist, ind = HyperbolicNearestNeighbors(n_neighbors=3).fit(X).kneighbors()
    assert not np.any(ind == np.arange(100)[:, None])
    full = true_knn_dist(X, X, 4)[:, 1:]
    np.testing.assert_allclose(dist, full, rtol=1e-9, atol=1e-12)


def test_errors(rng):
    X = ball_points(rng, 5, 2)
    with pytest.raises(ValueError, match=r"not fitted yet"):
        HyperbolicNearestNeighbors().kneighbors(X)
    with pytest.raises(ValueError, match=r"n_neighbors must be in \[1, 4\] when X is None"):
        HyperbolicNearestNeighbors(n_neighbors=5).fit(X).kneighbors()
    with pytest.raises(ValueError, match=r"n_neighbors must be in \[1, 5\] \(the number of indexed points\)"):
        HyperbolicNearestNeighbors(n_neighbors=6).fit(X).kneighbors(X)
    with pytest.raises(TypeError, match=r"n_neighbors must be an integer, got float"):
        HyperbolicNearestNeighbors().fit(X).kneighbors(n_neighbors=2.0)
    with pytest.raises(ValueError, match=r"n_neighbors must be a positive integer, got n_neighbors=0"):
        HyperbolicNearestNeighbors(n_neighbors=0).fit(X)
    with pytest.raises(ValueError, match=r"radius must be >= 0.0, got radius=-1"):
        HyperbolicNearestNeighbors(radius=-1).fit(X)
    with pytest.raises(ValueError, match=r"unknown mode 'edges'; expected one of \['connectivity', 'distance'\]"):
        HyperbolicKNeighborsTransformer(mode="edges").fit(X)
    with pytest.raises(ValueError, match=r"unknown mode 'edges'"):
        HyperbolicNearestNeighbors(n_neighbors=2).fit(X).kneighbors_graph(mode="edges")
    with pytest.raises(TypeError, match=r"algorithm_params must be a dict or None, got list"):
        HyperbolicNearestNeighbors(algorithm_params=[1]).fit(X)
    with pytest.raises(ValueError, match=r"algorithm_params must not repeat the estimator's own parameters, got \['c'\]"):
        HyperbolicNearestNeighbors(algorithm_params={"c": 2.0}).fit(X)
    with pytest.raises(ValueError, match=r"model must be one of \('poincare', 'lorentz'\), got model='klein'"):
        HyperbolicNearestNeighbors(model="klein").fit(X)
    with pytest.raises(ValueError, match=r"X has 3 features, but HyperbolicNearestNeighbors is expecting 2"):
        HyperbolicNearestNeighbors(n_neighbors=2).fit(X).kneighbors(np.zeros((1, 3)))
    with pytest.raises(ValueError, match=r"X row 0 is not strictly inside the Poincare ball"):
        HyperbolicNearestNeighbors().fit(np.full((3, 2), 0.8))
    with pytest.raises(TypeError, match=r"Sparse data was passed for X, but dense data is required"):
        HyperbolicNearestNeighbors().fit(sparse.csr_matrix(X))


def test_clone_pickle_and_refit(rng):
    est = HyperbolicNearestNeighbors(n_neighbors=2, algorithm="shells", algorithm_params={"width": 2.0})
    assert clone(est).get_params()["algorithm_params"] == {"width": 2.0}
    X = ball_points(rng, 80, 3)
    Q = ball_points(rng, 10, 3)
    nn = HyperbolicNearestNeighbors(n_neighbors=3).fit(X)
    again = pickle.loads(pickle.dumps(nn))
    for a, b in zip(nn.kneighbors(Q), again.kneighbors(Q)):
        np.testing.assert_array_equal(a, b)
    before = nn.kneighbors(Q)
    assert nn.fit(X) is nn
    for a, b in zip(before, nn.kneighbors(Q)):
        np.testing.assert_array_equal(a, b)


def test_lorentz_and_curvature_x_none(rng):
    from hypann.geometry.models import poincare_to_lorentz

    c = 2.5
    P = ball_points(rng, 60, 3, min_conformal=1e-6) / np.sqrt(c)
    L = poincare_to_lorentz(P, c=c)
    nn = HyperbolicNearestNeighbors(n_neighbors=3, model="lorentz", c=c).fit(L)
    assert nn.n_features_in_ == 4
    dist, ind = nn.kneighbors()
    D = pairwise_dist(P, P, c=c)
    np.fill_diagonal(D, np.inf)
    np.testing.assert_allclose(dist, np.sort(D, axis=1)[:, :3], rtol=1e-7)
    # X=None searches the stored points, so it equals querying with the training input minus self
    dist_x, ind_x = nn.kneighbors(L, 4)
    assert np.all(ind_x[:, 0] == np.arange(60)) and np.all(dist_x[:, 0] == 0.0)
    np.testing.assert_array_equal(dist, dist_x[:, 1:])
    np.testing.assert_array_equal(ind, ind_x[:, 1:])
    with pytest.raises(ValueError, match=r"0 feature\(s\) \(shape=\(3, 0\)\) while a minimum of 2 is required"):
        HyperbolicNearestNeighbors(model="lorentz").fit(np.zeros((3, 0)))


def _dense_graph(D, k):
    """k nearest columns per row of a dense distance matrix, as a dense matrix of distances (0 elsewhere)."""
    order = np.argsort(D, axis=1, kind="stable")[:, :k]
    G = np.zeros_like(D)
    np.put_along_axis(G, order, np.take_along_axis(D, order, axis=1), axis=1)
    return G, order


@pytest.mark.parametrize("mode", ["connectivity", "distance"])
def test_kneighbors_graph_matches_brute_force(rng, mode):
    X = ball_points(rng, 120, 3)
    Q = ball_points(rng, 15, 3)
    nn = HyperbolicNearestNeighbors(n_neighbors=4).fit(X)
    A = nn.kneighbors_graph(Q, mode=mode)
    assert sparse.issparse(A) and A.format == "csr" and A.shape == (15, 120)
    assert np.all(np.diff(A.indptr) == 4)
    G, order = _dense_graph(pairwise_dist(Q, X), 4)
    assert np.array_equal(np.sort(A.indices.reshape(15, 4), axis=1), np.sort(order, axis=1))
    if mode == "distance":
        np.testing.assert_allclose(A.toarray(), G, rtol=1e-9)
    else:
        assert np.array_equal(A.toarray(), (G > 0).astype(float))
    # X=None: no self-loops, k neighbours per row
    A0 = nn.kneighbors_graph(n_neighbors=3, mode=mode)
    assert A0.shape == (120, 120) and np.all(np.diff(A0.indptr) == 3)
    assert A0.diagonal().sum() == 0 and not np.any(A0.indices.reshape(120, 3) == np.arange(120)[:, None])


def _truth_within(Q, X, r):
    D = pairwise_dist(Q, X)
    return [np.flatnonzero(D[i] <= r) for i in range(len(Q))], D


@pytest.mark.parametrize("settings", [dict(), dict(algorithm="brute"), dict(algorithm="recentering", oracle="kdtree")],
                         ids=["default", "brute", "recentering-kdtree"])
def test_radius_neighbors_matches_brute_force(rng, settings):
    X = ball_points(rng, 150, 3)
    Q = ball_points(rng, 12, 3)
    r = float(np.quantile(pairwise_dist(Q, X), 0.05))
    nn = HyperbolicNearestNeighbors(radius=r, **settings).fit(X)
    dist, ind = nn.radius_neighbors(Q)
    truth, D = _truth_within(Q, X, r)
    assert dist.dtype == object and ind.shape == (12,)
    for i in range(12):
        assert np.array_equal(np.sort(ind[i]), truth[i])
        np.testing.assert_allclose(dist[i], D[i, ind[i]], rtol=1e-9)
        assert np.all(np.diff(dist[i]) >= 0)  # always sorted
    only = nn.radius_neighbors(Q, radius=r / 2, return_distance=False)
    half, _ = _truth_within(Q, X, r / 2)
    assert all(np.array_equal(np.sort(only[i]), half[i]) for i in range(12))
    with pytest.raises(ValueError, match=r"return_distance must be True if sort_results is True"):
        nn.radius_neighbors(Q, return_distance=False, sort_results=True)
    with pytest.raises(ValueError, match=r"radius must be finite and >= 0, got radius=-0.5"):
        nn.radius_neighbors(Q, radius=-0.5)


def test_radius_neighbors_x_none_excludes_only_self(rng):
    X = ball_points(rng, 100, 2)
    X[1] = X[0]  # a duplicate stays a neighbour of its twin
    r = 0.5
    nn = HyperbolicNearestNeighbors(radius=r).fit(X)
    dist, ind = nn.radius_neighbors(sort_results=True)
    truth, D = _truth_within(X, X, r)
    for i in range(100):
        assert np.array_equal(np.sort(ind[i]), truth[i][truth[i] != i])
    assert 1 in ind[0] and 0 in ind[1]
    A = nn.radius_neighbors_graph(mode="distance")
    assert A.shape == (100, 100) and A.nnz == sum(len(t) - 1 for t in truth)
    np.testing.assert_allclose(A.toarray(), np.where((D <= r) & ~np.eye(100, dtype=bool), D, 0.0), rtol=1e-9, atol=1e-12)
    C = nn.radius_neighbors_graph(X[:5], radius=0.3)
    assert C.shape == (5, 100) and set(np.unique(C.data)) == {1.0}
    assert C.nnz == sum(len(t) for t in _truth_within(X[:5], X, 0.3)[0])


def test_radius_neighbors_needs_range_search(rng):
    X = ball_points(rng, 50, 2)
    nn = HyperbolicNearestNeighbors(algorithm="shells").fit(X)
    with pytest.raises(NotImplementedError, match=r"algorithm 'shells' has no range search; use algorithm='hkdtree'"):
        nn.radius_neighbors(X[:2], radius=0.1)


def test_sparse_interface_follows_sklearn_config(rng):
    import sklearn

    if "sparse_interface" not in sklearn.get_config():
        pytest.skip("this scikit-learn has no sparse_interface setting")
    X = ball_points(rng, 30, 2)
    nn = HyperbolicNearestNeighbors(n_neighbors=2).fit(X)
    with sklearn.config_context(sparse_interface="sparray"):
        assert isinstance(nn.kneighbors_graph(), sparse.csr_array)
    assert isinstance(nn.kneighbors_graph(), sparse.csr_matrix)


def test_transformer_follows_kneighbors_transformer_convention(rng):
    X = ball_points(rng, 90, 3)
    t = HyperbolicKNeighborsTransformer(n_neighbors=5)
    G = t.fit_transform(X)
    # mode="distance": n_neighbors + 1 per row, the sample itself first with an explicit 0
    assert G.shape == (90, 90) and np.all(np.diff(G.indptr) == 6)
    assert np.array_equal(G.indices.reshape(90, 6)[:, 0], np.arange(90))
    assert np.all(G.data.reshape(90, 6)[:, 0] == 0.0)
    dense, _ = _dense_graph(pairwise_dist(X, X), 6)
    np.testing.assert_allclose(G.toarray(), dense, rtol=1e-9, atol=1e-12)
    C = HyperbolicKNeighborsTransformer(mode="connectivity", n_neighbors=5).fit(X).transform(X[:7])
    assert C.shape == (7, 90) and np.all(np.diff(C.indptr) == 5)
    assert list(t.get_feature_names_out()[:2]) == ["hyperbolickneighborstransformer0", "hyperbolickneighborstransformer1"]


def _clusters(rng, n_per, centers_norm=0.8, spread=0.02):
    centers = rng.normal(size=(4, 3))
    centers *= centers_norm / np.linalg.norm(centers, axis=1)[:, None]
    return np.concatenate([c + spread * rng.normal(size=(n_per, 3)) for c in centers])


def test_pipeline_into_tsne_equals_tsne_on_exact_distances():
    X = _clusters(np.random.default_rng(0), 50)
    perplexity = 5
    tsne = dict(metric="precomputed", perplexity=perplexity, init="random", max_iter=250, random_state=0)
    with threadpool_limits(1):
        ours = make_pipeline(HyperbolicKNeighborsTransformer(n_neighbors=int(3 * perplexity + 1)),
                             TSNE(**tsne)).fit_transform(X)
        dense = TSNE(**tsne).fit_transform(pairwise_dist(X, X))
    assert ours.shape == (200, 2)
    np.testing.assert_allclose(ours, dense, rtol=1e-7, atol=1e-7)


def test_pipeline_into_isomap_equals_isomap_on_exact_distances():
    Y = 0.9 * np.random.default_rng(1).uniform(-1, 1, (200, 2)) / np.sqrt(2)
    ours = make_pipeline(HyperbolicKNeighborsTransformer(n_neighbors=10),
                         Isomap(metric="precomputed", n_neighbors=10, n_components=2)).fit_transform(Y)
    dense = Isomap(metric="precomputed", n_neighbors=10, n_components=2).fit_transform(pairwise_dist(Y, Y))
    np.testing.assert_allclose(np.abs(ours), np.abs(dense), rtol=1e-8, atol=1e-8)  # up to the sign of each axis


def test_pipeline_into_dbscan_equals_dbscan_on_exact_distances():
    X = _clusters(np.random.default_rng(0), 50)
    D = pairwise_dist(X, X)
    k = 20
    eps = 0.1
    assert eps < np.sort(D, axis=1)[:, k].min()  # the k-graph holds every eps-neighbourhood
    ours = make_pipeline(HyperbolicKNeighborsTransformer(n_neighbors=k),
                         DBSCAN(eps=eps, min_samples=5, metric="precomputed")).fit_predict(X)
    dense = DBSCAN(eps=eps, min_samples=5, metric="precomputed").fit_predict(D)
    assert np.array_equal(ours, dense)
    assert len(set(ours) - {-1}) >= 4
