"""Every Euclidean oracle does what its declared capabilities say.

One test suite for every oracle, built in and third-party alike: the flags of
:class:`hypann.oracles.base.EuclideanOracle` (``exact``, ``counts_evaluations``,
``supports_budget``, ``supports_radius``, ``supports_decision``,
``thread_safe``, ``uses_conformal``, ``supports_tracking``,
``adapts_per_shell``) are checked against numpy brute force on one data set. To
run it on your own oracle, add a factory to :data:`ORACLES` (as
:class:`ScanOracle`, the example at the top, is added).
"""

from __future__ import annotations

import threading

import numpy as np
import pytest

from hypann.oracles.base import EuclideanNeighbors, EuclideanOracle
from hypann.oracles.registry import make_oracle, register_oracle
from hypann.search.hyperbolic_kdtree import HyperbolicKDTreeOracle  # noqa: F401 - registers "hkdtree"

# --------------------------------------------------------------------------- an example third-party oracle


class ScanOracle(EuclideanOracle):
    """A user's oracle in a few lines: exact numpy scan with radius queries, stateless queries."""

    name = "scan-example"
    exact = True
    supports_radius = True
    thread_safe = True

    def _build(self, points):
        self._points = points

    def _sq(self, queries):
        diff = queries[:, None, :] - self._points[None, :, :]
        return np.einsum("mnd,mnd->mn", diff, diff)

    def _knn(self, queries, k):
        sq = self._sq(queries)
        order = np.argsort(sq, axis=1, kind="stable")[:, :k]
        return EuclideanNeighbors(np.take_along_axis(sq, order, 1), order.astype(np.int64))

    def _radius(self, queries, radii):
        hits = self._sq(queries) <= (radii * radii)[:, None]
        offsets = np.concatenate([[0], np.cumsum(hits.sum(axis=1))]).astype(np.int64)
        return offsets, np.nonzero(hits)[1].astype(np.int64)


register_oracle("scan-example", ScanOracle)


def _needs(module):
    return pytest.mark.skipif(not _importable(module), reason=f"{module} is not installed")


def _importable(module):
    try:
        __import__(module)
    except ImportError:
        return False
    return True


# spec -> marks; every oracle hypann ships, in an exact and an approximate setting where both exist
ORACLES = [
    pytest.param("brute", id="brute"),
    pytest.param("kdtree", id="kdtree"),
    pytest.param("hkdtree", id="hkdtree"),
    pytest.param("lsh:tables=4,bits=6,granularity=4,random_state=3", id="lsh"),
    pytest.param("faiss:Flat", id="faiss-flat", marks=_needs("faiss")),
    pytest.param("faiss:HNSW16", id="faiss-hnsw", marks=_needs("faiss")),
    pytest.param("hnswlib:M=8,ef=32,random_state=3", id="hnswlib", marks=_needs("hnswlib")),
    pytest.param("scan-example", id="custom"),
]

N, D, M, K = 400, 5, 24, 7


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(2024)
    X = rng.normal(size=(N, D))
    X *= (0.9 * rng.random(N) ** (1 / D) / np.linalg.norm(X, axis=1))[:, None]  # inside the unit ball (hkdtree)
    Q = rng.normal(size=(M, D)) * 0.3
    sq = np.einsum("mnd,mnd->mn", Q[:, None, :] - X[None], Q[:, None, :] - X[None])
    return X, Q, sq


@pytest.fixture(scope="module", params=ORACLES)
def oracle(request, data):
    return make_oracle(request.param).build(data[0])


def test_capabilities_are_declared_booleans(oracle):
    caps = oracle.capabilities()
    assert list(caps) == list(EuclideanOracle.CAPABILITIES)
    for name in EuclideanOracle.CAPABILITIES:
        declared = getattr(type(oracle), name)
        assert isinstance(declared, bool), f"{type(oracle).__name__}.{name} must be a bool class attribute"
        assert isinstance(getattr(oracle, name), bool)


def test_spec_recreates_the_oracle(oracle):
    assert make_oracle(oracle.spec()).spec() == oracle.spec()


def test_knn_contract(oracle, data):
    X, Q, sq = data
    res = oracle.knn(Q, K)
    assert res.indices.shape == res.sq_dist.shape == (M, K)
    assert res.indices.dtype == np.int64 and res.sq_dist.dtype == np.float64
    assert np.all(np.diff(res.sq_dist, axis=1) >= 0), "squared distances must be ascending"
    found = res.indices >= 0
    assert np.all(found), "400 points and k=7: every slot must be filled"
    # the reported distance is the float64 distance of the reported point
    np.testing.assert_allclose(res.sq_dist, np.take_along_axis(sq, res.indices, 1), rtol=1e-12)
    assert all(len(set(row)) == K for row in res.indices.tolist()), "an id returned twice"
    if oracle.counts_evaluations:
        assert res.evaluations is not None and res.evaluations.shape == (M,)
        assert np.all(res.evaluations >= K)
    # asking for more than n pads with -1 / inf
    big = oracle.knn(Q[:2], N + 3)
    assert np.all(big.indices[:, N:] == -1) and np.all(np.isinf(big.sq_dist[:, N:]))


def test_exact_oracles_equal_numpy_brute_force(oracle, data):
    X, Q, sq = data
    if not oracle.exact:
        res = oracle.knn(Q, K)
        truth = np.sort(sq, axis=1)[:, :K]
        assert np.all(res.sq_dist >= truth * (1 - 1e-12)), "an approximate answer closer than the truth"
        return
    res = oracle.knn(Q, K)
    order = np.argsort(sq, axis=1, kind="stable")[:, :K]
    np.testing.assert_array_equal(res.indices, order)
    np.testing.assert_allclose(res.sq_dist, np.take_along_axis(sq, order, 1), rtol=1e-12)


def test_radius_returns_every_point_within_r(oracle, data):
    X, Q, sq = data
    # radii halfway between the 10th and 11th nearest squared distances: no point near the boundary
    s = np.sort(sq, axis=1)
    radii = np.sqrt((s[:, 9] + s[:, 10]) / 2)
    if not oracle.supports_radius:
        with pytest.raises(NotImplementedError, match=rf"oracle '{oracle.name}' has no radius query"):
            oracle.radius(Q, radii)
        return
    offsets, ids = oracle.radius(Q, radii)
    assert offsets.shape == (M + 1,) and offsets[0] == 0
    for i in range(M):
        got = np.sort(ids[offsets[i]:offsets[i + 1]])
        np.testing.assert_array_equal(got, np.flatnonzero(sq[i] <= radii[i] ** 2))


@pytest.mark.parametrize("budget", [1, 5, 40])
def test_budget_is_a_hard_limit(oracle, data, budget):
    X, Q, sq = data
    per_row = np.full(M, budget)
    per_row[::3] = max(1, budget // 2)  # different budgets per row
    res = oracle.knn(Q, K, budget=per_row)
    assert res.indices.shape == (M, K)
    if oracle.supports_budget:
        assert oracle.counts_evaluations, "a budget is counted in evaluations"
        assert np.all(res.evaluations <= per_row), f"evaluations {res.evaluations} exceed the budget {per_row}"
    elif not oracle.counts_evaluations:
        # charged by the candidates handed back: never more than the budget
        assert np.all((res.indices >= 0).sum(axis=1) <= per_row)
    if oracle.exact and not oracle.supports_budget:
        # the prefix of an exact answer stays exact
        full = oracle.knn(Q, K)
        keep = res.indices >= 0
        np.testing.assert_array_equal(res.indices[keep], full.indices[keep])


def test_decision_query_is_sound_and_exact_ones_complete(oracle, data):
    X, Q, sq = data
    nearest = np.sqrt(sq.min(axis=1))
    eps = 0.5
    for radius in (nearest * 0.5, nearest * 1.01):
        cert, _ = oracle.near(Q, radius, eps)
        assert cert.shape == (M,)
        got = cert >= 0
        # sound: a certificate is a point within (1 + eps) r
        assert np.all(sq[got, cert[got]] <= ((1 + eps) * radius[got]) ** 2 * (1 + 1e-12))
        if oracle.exact:
            # complete: some point within r -> a certificate
            assert np.array_equal(got | ~(nearest <= radius), np.ones(M, bool))
    if not oracle.supports_decision:
        assert "_near" not in vars(type(oracle)), "a _near hook must be declared with supports_decision = True"


def test_thread_safe_oracles_answer_alike_from_four_threads(oracle, data):
    if not oracle.thread_safe:
        pytest.skip(f"{oracle.name} does not declare thread_safe")
    X, Q, sq = data
    expected = oracle.knn(Q, K)
    results, errors = [None] * 4, []
    barrier = threading.Barrier(4)

    def work(t):
        try:
            barrier.wait()
            out = []
            for _ in range(5):
                out.append(oracle.knn(Q, K))
            results[t] = out
        except Exception as exc:  # noqa: BLE001 - reported below
            errors.append(exc)

    threads = [threading.Thread(target=work, args=(t,)) for t in range(4)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    assert not errors, errors
    for out in results:
        for res in out:
            np.testing.assert_array_equal(res.indices, expected.indices)
            np.testing.assert_array_equal(res.sq_dist, expected.sq_dist)


def test_build_with_conformal_answers_as_build(oracle, data):
    """``uses_conformal`` oracles keep the stored factors; every oracle answers alike either way."""
    X, Q, sq = data
    again = make_oracle(oracle.spec()).build_with_conformal(X.copy(), (1.0 - np.einsum("ij,ij->i", X, X)))
    a, b = oracle.knn(Q, K), again.knn(Q, K)
    if oracle.exact:
        np.testing.assert_array_equal(a.sq_dist, b.sq_dist)
    assert a.indices.shape == b.indices.shape == (M, K)


def _tracking_specs():
    from hypann.oracles.registry import _resolve

    return [p for p in ORACLES if _resolve(p.values[0].partition(":")[0]).supports_tracking]


@pytest.mark.parametrize("spec", _tracking_specs())
def test_tracking_knn_is_the_euclidean_knn_plus_the_hyperbolic_best(spec, data):
    """Oracles declaring ``supports_tracking``: ``knn_tracking`` is ``knn`` plus the exact
    ``delta`` top-k of the examined points."""
    X, Q, sq = data
    oracle = make_oracle(spec).build(X)
    Qs = 0.5 * Q / np.maximum(1.0, np.linalg.norm(Q, axis=1))[:, None]  # queries inside the ball
    cq = 1.0 - np.einsum("ij,ij->i", Qs, Qs)
    res = oracle.knn_tracking(Qs, K, Qs, cq)
    plain = oracle.knn(Qs, K)
    np.testing.assert_array_equal(res.euclid_sq, plain.sq_dist)
    cx = 1.0 - np.einsum("ij,ij->i", X, X)
    delta = np.einsum("mnd,mnd->mn", Qs[:, None] - X[None], Qs[:, None] - X[None]) / (cq[:, None] * cx[None])
    # the hyperbolic best of the examined points is never better than the true best, and is exact
    np.testing.assert_allclose(res.hyp_delta, np.take_along_axis(delta, res.hyp_ids, 1), rtol=1e-12)
    assert np.all(res.hyp_delta[:, 0] >= delta.min(axis=1) * (1 - 1e-12))


def test_for_shell_gives_an_unbuilt_oracle_of_the_same_kind(oracle):
    shell = oracle.for_shell(3, 3.0)
    assert type(shell) is type(oracle) and shell is not oracle
    assert not hasattr(shell, "n_points_"), "for_shell returns an unbuilt oracle"
    if not oracle.adapts_per_shell:
        assert shell.spec() == oracle.spec()


def test_every_builtin_oracle_is_in_the_conformance_list():
    from hypann.oracles.registry import _BUILTIN

    covered = {p.values[0].partition(":")[0] for p in ORACLES}
    assert set(_BUILTIN) <= covered


# --------------------------------------------------------------------------- the protocol itself


def test_declaring_a_capability_without_its_method_is_refused():
    with pytest.raises(TypeError, match=r"RadiusLess declares supports_radius = True but does not implement _radius"):
        class RadiusLess(EuclideanOracle):  # noqa: F841
            supports_radius = True
    with pytest.raises(TypeError, match=r"Untracked declares supports_tracking = True but does not implement "
                                         r"knn_tracking"):
        class Untracked(EuclideanOracle):  # noqa: F841
            supports_tracking = True


def test_a_custom_oracle_without_declared_settings_gets_them_from_its_signature():
    class Sized(ScanOracle):
        def __init__(self, *, size=3):
            self.size = size

    assert [p.name for p in Sized.build_settings] == ["size"]
    assert Sized.from_spec_args("size=5").size == 5
    with pytest.raises(ValueError, match=r"bad settings for oracle 'scan-example' in spec 'scan-example:width=5': "
                                         r"unknown option\(s\) \['width'\]; allowed: \['size'\]"):
        Sized.from_spec_args("width=5")


def test_undeclared_decision_hook_is_deprecated_but_used():
    with pytest.warns(DeprecationWarning, match=r"OldStyle defines _near without declaring supports_decision"):
        class OldStyle(ScanOracle):
            def _near(self, queries, radius, eps):
                return np.zeros(len(queries), dtype=np.int64), None

    assert OldStyle.supports_decision is True
    o = OldStyle().build(np.zeros((3, 2)))
    np.testing.assert_array_equal(o.near(np.ones((2, 2)), 0.1)[0], [0, 0])


def test_a_registered_class_must_be_an_euclidean_oracle():
    class NotAnOracle:
        pass

    register_oracle("not-an-oracle", NotAnOracle)
    try:
        with pytest.raises(TypeError, match=r"oracle 'not-an-oracle' is registered to .*NotAnOracle.*, not a subclass "
                                            r"of hypann.oracles.base.EuclideanOracle"):
            make_oracle("not-an-oracle")
    finally:
        from hypann.oracles.registry import _REGISTRY

        del _REGISTRY["not-an-oracle"]
