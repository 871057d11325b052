"""Bad input gets a clear ValueError/TypeError naming the problem."""

from __future__ import annotations

import numpy as np
import pytest

import hypann
from tests.conftest import ball_points


@pytest.fixture
def index(rng):
    return hypann.HyperbolicIndex().build(ball_points(rng, 50, 3))


@pytest.mark.parametrize(
    "X, exc, msg",
    [
        (np.array([[0.5, 0.5], [0.8, 0.7]]), ValueError, r"row 1 is not strictly inside the Poincare ball"),
        (np.array([[1.0, 0.0]]), ValueError, r"row 0 is not strictly inside"),
        (np.array([[0.1, np.nan]]), ValueError, r"NaN or inf \(first at row 0"),
        (np.array([[0.1, np.inf]]), ValueError, r"NaN or inf"),
        (np.zeros(3), ValueError, r"2-D array .* got ndim=1"),
        (np.zeros((0, 3)), ValueError, r"X is empty"),
        (np.array([["a", "b"]]), TypeError, r"real numeric dtype, got dtype=<U1"),
        (np.array([[1 + 0j, 0]]), TypeError, r"real numeric dtype"),
        ([[0.1, 0.2], [0.3]], ValueError, r"X must be a 2-D array of equal-length rows, got ragged input"),
    ],
)
def test_bad_points(X, exc, msg):
    with pytest.raises(exc, match=msg):
        hypann.HyperbolicIndex().build(X)


def test_norm_just_below_one_is_accepted():
    x = np.array([[1 - 1e-15, 0.0]])
    hypann.HyperbolicIndex(algorithm="brute").build(x)


@pytest.mark.parametrize("k, exc, msg", [(0, ValueError, r"k must be in \[1, 50\] \(the number of indexed points\), got k=0"), (51, ValueError, r"got k=51"), (2.0, TypeError, r"k must be an integer"), (True, TypeError, r"integer")])
def test_bad_k(index, k, exc, msg):
    with pytest.raises(exc, match=msg):
        index.search(np.zeros((1, 3)), k)


def test_dimension_mismatch(index):
    with pytest.raises(ValueError, match=r"Q has 4 dimensions \(Poincare\), but the index was built with 3"):
        index.search(np.zeros((2, 4)), 1)


def test_unknown_algorithm_oracle_option():
    X = np.zeros((3, 2))
    with pytest.raises(ValueError, match=r"unknown algorithm 'nope'"):
        hypann.HyperbolicIndex(algorithm="nope").build(X)
    with pytest.raises(ValueError, match=r"unknown oracle 'nope'"):
        hypann.HyperbolicIndex(algorithm="recentering", oracle="nope").build(X)
    with pytest.raises(ValueError, match=r"bad settings for algorithm 'auto'"):
        hypann.HyperbolicIndex(bogus=1).build(X)
    with pytest.raises(ValueError, match=r"bad settings for oracle 'kdtree'"):
        hypann.HyperbolicIndex(algorithm="recentering", oracle="kdtree:bogus=1").build(X)
    with pytest.raises(ValueError, match=r"bad setting 'x' in oracle spec"):
        hypann.HyperbolicIndex(algorithm="recentering", oracle="kdtree:x").build(X)
    with pytest.raises(ValueError, match=r"algorithm 'auto' does not use an oracle.*algorithm='recentering'"):
        hypann.HyperbolicIndex(oracle="kdtree").build(X)
    with pytest.raises(ValueError, match=r"does not use an oracle"):
        hypann.HyperbolicIndex(algorithm="brute", oracle="kdtree").build(X)
    with pytest.raises(ValueError, match=r"model must be one of"):
        hypann.HyperbolicIndex(model="klein").build(X)
    with pytest.raises(ValueError, match=r"curvature c must be a finite number > 0, got c=-1"):
        hypann.HyperbolicIndex(c=-1).build(X)


def test_unknown_query_option_and_budget(index):
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['ef'\]"):
        index.search(np.zeros((1, 3)), 1, ef=3)
    with pytest.raises(ValueError, match=r"budget must be a positive integer or None, got budget=0"):
        index.search(np.zeros((1, 3)), 1, budget=0)


def test_not_built():
    with pytest.raises(ValueError, match=r"not built yet"):
        hypann.HyperbolicIndex().search(np.zeros((1, 2)), 1)


def test_lorentz_off_hyperboloid():
    with pytest.raises(ValueError, match=r"row 0 is not on the upper sheet of the hyperboloid"):
        hypann.HyperbolicIndex(model="lorentz").build(np.array([[1.0, 0.5, 0.0]]))


def test_empty_query_batch_and_input_types(index, rng):
    res = index.search(np.zeros((0, 3)), 2)
    assert res.indices.shape == (0, 2) and res.indices.dtype == np.int64
    # lists, float32 and int input are accepted and converted to float64
    X = ball_points(rng, 20, 3, min_conformal=1e-3).astype(np.float32)
    r1 = hypann.HyperbolicIndex().build(X).search(X[:2].tolist(), 1)
    assert r1.indices[:, 0].tolist() == [0, 1]
    hypann.HyperbolicIndex().build(np.zeros((4, 2), dtype=np.int32))


def test_input_is_not_modified(rng):
    X = ball_points(rng, 30, 3)
    before = X.copy()
    hypann.HyperbolicIndex(c=2.0).build(X / 2).search(X[:3] / 2, 2)
    np.testing.assert_array_equal(X, before)


def test_result_contract(index, rng):
    res = index.search(ball_points(rng, 5, 3), 4)
    assert res.indices.dtype == np.int64 and res.distances.dtype == np.float64
    assert np.all(np.diff(res.distances, axis=1) >= 0)
    assert set(res.stats.as_dict()) >= {"oracle_calls", "samples", "rounds"}
    assert "HyperbolicIndex(" in repr(index) and "n_points=50" in repr(index)


def test_oracle_params_per_call(rng):
    pytest.importorskip("hnswlib")
    X = ball_points(rng, 2000, 8, min_conformal=1e-4)
    Q = ball_points(rng, 30, 8, min_conformal=1e-4)
    idx = hypann.HyperbolicIndex(algorithm="shells", oracle="hnswlib:M=4,ef=4", random_state=0).build(X)
    lo = idx.search(Q, 10, oracle_params={"ef": 4})
    hi = idx.search(Q, 10, oracle_params={"ef": 400})
    exact = hypann.HyperbolicIndex(algorithm="brute").build(X).search(Q, 10)
    assert hi.recall(exact.distances) >= lo.recall(exact.distances)
    np.testing.assert_array_equal(idx.search(Q, 10).indices, lo.indices)  # the setting did not stick
    with pytest.raises(ValueError, match=r"unknown option\(s\) \['nprobe'\] for oracle 'hnswlib'"):
        idx.search(Q, 1, oracle_params={"nprobe": 2})
    with pytest.raises(ValueError, match=r"does not use an oracle"):
        hypann.HyperbolicIndex(algorithm="brute").build(X).search(Q, 1, oracle_params={"ef": 2})
    with pytest.raises(TypeError, match=r"oracle_params must be a dict"):
        idx.search(Q, 1, oracle_params=[("ef", 2)])


def test_import_hypann_is_lazy_and_gives_the_subpackages():
    # `import hypann` must not load numba/scipy (kept fast); the tour's names resolve on use.
    import subprocess
    import sys

    code = (
        "import sys, hypann; assert 'numba' not in sys.modules and 'scipy' not in sys.modules, sorted(sys.modules); "
        "hypann.datasets.list_datasets; hypann.HyperbolicIndex; hypann.sklearn.HyperbolicNearestNeighbors; "
        "print(hypann.__version__)"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    with pytest.raises(AttributeError, match=r"module 'hypann' has no attribute 'nope'"):
        hypann.nope
