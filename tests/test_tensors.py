"""Tensors in: PyTorch tensors and geoopt ManifoldTensors (Poincare ball and Lorentz, any curvature)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

import hypann
from hypann.geometry.poincare import pairwise_dist
from tests.conftest import CountingTensor, ball_points

SRC = Path(__file__).resolve().parents[1] / "src"


class DLPackOnly:
    """An array that offers only the DLPack protocol (no ``__array__``)."""

    def __init__(self, arr):
        self._arr = arr

    def __dlpack__(self, **kwargs):
        return self._arr.__dlpack__(**kwargs)

    def __dlpack_device__(self):
        return self._arr.__dlpack_device__()


def test_dlpack_input_without_torch(rng):
    X = ball_points(rng, 50, 3)
    ref = hypann.HyperbolicIndex().build(X).search(X[:5], 3)
    res = hypann.HyperbolicIndex().build(DLPackOnly(X)).search(DLPackOnly(X[:5]), 3)
    np.testing.assert_array_equal(res.indices, ref.indices)
    np.testing.assert_array_equal(res.distances, ref.distances)


@pytest.mark.filterwarnings("ignore::hypann.Float32PrecisionWarning")
def test_tensor_is_copied_once_by_a_float32_build_and_add(rng):
    # the float32 check reads the caller's float64 points again: from the one copy, not a second
    X = ball_points(rng, 300, 3, min_conformal=1e-9)
    built = CountingTensor(X[:250])
    index = hypann.HyperbolicIndex(algorithm="hkdtree", storage="float32").build(built)
    assert built.copies == 1 and index.float32_rounding_ is not None
    added = CountingTensor(X[250:])
    index.add(added)
    assert added.copies == 1 and index.float32_rounding_.added
    ref = hypann.HyperbolicIndex(algorithm="hkdtree", storage="float32").build(X[:250]).add(X[250:])
    np.testing.assert_array_equal(index.search(X[:20], 5).indices, ref.search(X[:20], 5).indices)


def test_numpy_input_never_imports_torch():
    script = textwrap.dedent(
        """
        import sys
        import numpy as np
        import hypann
        from hypann.sklearn import HyperbolicNearestNeighbors
        X = 0.5 * np.random.default_rng(0).uniform(-1, 1, (40, 3)) / np.sqrt(3)
        hypann.HyperbolicIndex().build(X).search(X[:3], 2)
        HyperbolicNearestNeighbors(n_neighbors=2).fit(X).kneighbors()
        print("torch" in sys.modules, "geoopt" in sys.modules)
        """
    )
    pytest.importorskip("sklearn")
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(SRC)})
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.split() == ["False", "False"]


# -- PyTorch -------------------------------------------------------------------


def test_torch_tensors_in_numpy_results_out(rng):
    torch = pytest.importorskip("torch")
    X = ball_points(rng, 200, 4, min_conformal=1e-6)
    Q = ball_points(rng, 10, 4, min_conformal=1e-6)
    ref = hypann.HyperbolicIndex().build(X).search(Q, 5)
    # float64 with grad: the same answer bit for bit
    Xt = torch.tensor(X, requires_grad=True)
    res = hypann.HyperbolicIndex().build(Xt).search(torch.from_numpy(Q), 5)
    assert isinstance(res.indices, np.ndarray) and isinstance(res.distances, np.ndarray)
    np.testing.assert_array_equal(res.indices, ref.indices)
    np.testing.assert_array_equal(res.distances, ref.distances)
    # results convert back without a copy
    assert torch.from_numpy(res.indices).dtype == torch.int64
    # float32 / bfloat16 tensors are widened to float64 (the same as numpy float32 input)
    X32 = torch.tensor(X, dtype=torch.float32)
    r32 = hypann.HyperbolicIndex().build(X32).search(Q, 5)
    np.testing.assert_array_equal(r32.indices, hypann.HyperbolicIndex().build(X.astype(np.float32)).search(Q, 5).indices)
    inside = 0.5 * X  # bfloat16 rounds up to 2^-8 relative: stay clear of the boundary
    rbf = hypann.HyperbolicIndex().build(torch.tensor(inside, dtype=torch.bfloat16)).search(Q, 1)
    assert rbf.indices.shape == (10, 1)


def test_torch_tensor_is_copied_not_aliased(rng):
    torch = pytest.importorskip("torch")
    X = ball_points(rng, 60, 3, min_conformal=1e-6)
    Xt = torch.tensor(X)
    index = hypann.HyperbolicIndex(algorithm="brute").build(Xt)
    before = index.search(X[:4], 3)
    with torch.no_grad():
        Xt.mul_(0.1)  # e.g. an optimizer step on trained embeddings
    after = index.search(X[:4], 3)
    np.testing.assert_array_equal(before.indices, after.indices)
    np.testing.assert_array_equal(before.distances, after.distances)


def test_torch_tensor_bad_values_get_the_usual_errors():
    torch = pytest.importorskip("torch")
    with pytest.raises(ValueError, match=r"X row 1 is not strictly inside the Poincare ball"):
        hypann.HyperbolicIndex().build(torch.tensor([[0.0, 0.1], [0.9, 0.9]]))
    with pytest.raises(ValueError, match=r"X contains NaN or inf \(first at row 0"):
        hypann.HyperbolicIndex().build(torch.tensor([[float("nan"), 0.1]]))
    with pytest.raises(TypeError, match=r"X must have a real numeric dtype, got dtype=complex64"):
        hypann.HyperbolicIndex().build(torch.zeros((2, 2), dtype=torch.complex64))


def test_sklearn_estimator_takes_tensors(rng):
    torch = pytest.importorskip("torch")
    pytest.importorskip("sklearn")
    from hypann.sklearn import HyperbolicKNeighborsTransformer, HyperbolicNearestNeighbors

    X = ball_points(rng, 80, 3, min_conformal=1e-6)
    ref = HyperbolicNearestNeighbors(n_neighbors=3).fit(X).kneighbors(X[:5])
    nn = HyperbolicNearestNeighbors(n_neighbors=3).fit(torch.tensor(X, requires_grad=True))
    out = nn.kneighbors(torch.tensor(X[:5]))
    np.testing.assert_array_equal(out[1], ref[1])
    np.testing.assert_array_equal(out[0], ref[0])
    G = HyperbolicKNeighborsTransformer(n_neighbors=3).fit_transform(torch.tensor(X))
    assert G.shape == (80, 80) and G.nnz == 80 * 4


# -- geoopt ----------------------------------------------------------------------


def _geoopt():
    pytest.importorskip("torch")
    return pytest.importorskip("geoopt")


@pytest.mark.parametrize("c", [0.5, 1.0, 4.0])
def test_geoopt_poincare_ball_points_match_geoopt_distances(rng, c):
    geoopt = _geoopt()
    import torch

    ball = geoopt.PoincareBall(c=c)
    X = ball_points(rng, 120, 3, min_conformal=1e-2) / np.sqrt(c)  # geoopt clamps artanh at 1 - 1e-7
    Q = ball_points(rng, 6, 3, min_conformal=1e-2) / np.sqrt(c)
    Xt = geoopt.ManifoldTensor(torch.tensor(X), manifold=ball)
    Qt = geoopt.ManifoldTensor(torch.tensor(Q), manifold=ball)
    res = hypann.HyperbolicIndex(c=c).build(Xt).search(Qt, 4)
    # geoopt's own distance d_c(x, y) = 2/sqrt(c) artanh(sqrt(c) |(-x) (+)_c y|) on the returned pairs:
    # the same convention for c. geoopt is the less accurate one (float32 curvature, clamped
    # artanh; ~4e-6 relative against mpmath where hypann agrees to 1e-15), hence the loose rtol.
    theirs = ball.dist(Qt[:, None, :], Xt[res.indices]).detach().numpy()
    np.testing.assert_allclose(res.distances, theirs, rtol=2e-5)
    np.testing.assert_allclose(res.distances, np.sort(pairwise_dist(Q, X, c=c), axis=1)[:, :4], rtol=1e-9)


def test_geoopt_lorentz_points_use_curvature_one_over_k(rng):
    geoopt = _geoopt()
    import torch

    k = 0.5  # geoopt's Lorentz(k): -x0^2 + |xs|^2 = -k, i.e. curvature -1/k
    manifold = geoopt.Lorentz(k=k)
    spatial = torch.tensor(rng.normal(size=(100, 3)))
    X = geoopt.ManifoldTensor(manifold.projx(torch.cat([torch.zeros(100, 1, dtype=spatial.dtype), spatial], 1)),
                              manifold=manifold)
    res = hypann.HyperbolicIndex(model="lorentz", c=1 / k).build(X).search(X[:5], 3)
    assert res.indices[:, 0].tolist() == list(range(5))
    theirs = manifold.dist(X[:5, None, :], X[res.indices]).detach().numpy()
    np.testing.assert_allclose(res.distances[:, 1:], theirs[:, 1:], rtol=2e-5)


def test_geoopt_manifold_must_match_model_and_curvature(rng):
    geoopt = _geoopt()
    import torch

    X = torch.tensor(ball_points(rng, 20, 2, min_conformal=1e-3) / 2.0)
    on_ball = geoopt.ManifoldTensor(X, manifold=geoopt.PoincareBall(c=2.0))
    with pytest.raises(ValueError, match=r"X is a geoopt ManifoldTensor on PoincareBall.*model='poincare' with c=2, "
                                         r"but model='poincare', c=1.0 were given; pass model='poincare', c=2"):
        hypann.HyperbolicIndex().build(on_ball)
    with pytest.raises(ValueError, match=r"pass model='poincare', c=2"):
        hypann.HyperbolicIndex(model="lorentz", c=2.0).build(on_ball)
    index = hypann.HyperbolicIndex(c=2.0).build(on_ball)
    with pytest.raises(ValueError, match=r"Q is a geoopt ManifoldTensor on PoincareBall"):
        index.search(geoopt.ManifoldTensor(X, manifold=geoopt.PoincareBall(c=1.0)), 1)
    sphere = geoopt.ManifoldTensor(X, manifold=geoopt.Stereographic(k=1.0))
    with pytest.raises(ValueError, match=r"Stereographic\(k=1\), whose curvature k >= 0 is not hyperbolic"):
        hypann.HyperbolicIndex().build(sphere)
    pytest.importorskip("sklearn")
    from hypann.sklearn import HyperbolicNearestNeighbors

    with pytest.raises(ValueError, match=r"X is a geoopt ManifoldTensor on PoincareBall"):
        HyperbolicNearestNeighbors().fit(on_ball)
    nn = HyperbolicNearestNeighbors(n_neighbors=2, c=2.0).fit(on_ball)
    assert nn.kneighbors(on_ball[:3])[1][:, 0].tolist() == [0, 1, 2]
