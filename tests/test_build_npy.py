"""Building from a ``.npy`` path or a memmap without a second copy of the points."""

from __future__ import annotations

import numpy as np
import pytest

import hypann
import hypann.index as hindex
from hypann.apps.cli import _load_array
from hypann.geometry._kernels import conformal_factor
from hypann.search.hyperbolic_kdtree import HyperbolicKDTree
from tests.conftest import ball_points

pytestmark = pytest.mark.kernels


def _data(seed=0, n=400, d=4):
    return np.ascontiguousarray(ball_points(np.random.default_rng(seed), n, d))


@pytest.mark.parametrize("storage", ["float64", "float32"])
@pytest.mark.parametrize("algorithm", ["auto", "hkdtree", "brute"])
def test_build_from_npy_path_in_blocks_equals_build_from_array(tmp_path, monkeypatch, storage, algorithm):
    X = _data()
    np.save(tmp_path / "X.npy", X)
    want = hypann.HyperbolicIndex(algorithm=algorithm, storage=storage).build(X)
    monkeypatch.setattr(hindex, "_STORAGE_BLOCK", 64)  # several blocks at this size
    for source in (tmp_path / "X.npy", str(tmp_path / "X.npy"), np.load(tmp_path / "X.npy", mmap_mode="r")):
        got = hypann.HyperbolicIndex(algorithm=algorithm, storage=storage).build(source)
        assert got.points_.dtype == np.dtype(storage)
        np.testing.assert_array_equal(got.points_, want.points_)
        np.testing.assert_array_equal(got.conformal_, want.conformal_)
        a, b = got.search(X[:30] * 0.99, 5), want.search(X[:30] * 0.99, 5)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.distances, b.distances)
    np.testing.assert_array_equal(np.load(tmp_path / "X.npy"), X)  # the file is only read


@pytest.mark.parametrize("model, c", [("lorentz", 0.37), ("poincare", 2.0)])
def test_build_in_blocks_converts_like_one_call(tmp_path, monkeypatch, model, c):
    X = _data(1, 300, 5) / np.sqrt(c)
    if model == "lorentz":
        X = hypann.geometry.models.poincare_to_lorentz(X * np.sqrt(c)) / np.sqrt(c)
    want = hypann.HyperbolicIndex(algorithm="hkdtree", model=model, c=c).build(X)
    np.save(tmp_path / "X.npy", X)
    monkeypatch.setattr(hindex, "_STORAGE_BLOCK", 50)
    got = hypann.HyperbolicIndex(algorithm="hkdtree", model=model, c=c).build(tmp_path / "X.npy")
    np.testing.assert_array_equal(got.points_, want.points_)
    np.testing.assert_array_equal(got.conformal_, want.conformal_)


def test_bad_row_in_a_later_block_names_its_row(tmp_path, monkeypatch):
    X = _data(2, 300, 3)
    X[217] = [0.9, 0.9, 0.9]
    np.save(tmp_path / "X.npy", X)
    monkeypatch.setattr(hindex, "_STORAGE_BLOCK", 64)
    with pytest.raises(ValueError, match=r"X row 217 .*not strictly inside the Poincare ball"):
        hypann.HyperbolicIndex().build(tmp_path / "X.npy")


def test_tree_takes_over_an_owned_array_in_place():
    X = _data(3, 500, 6)
    cx = conformal_factor(X)
    Q = X[:20] * 0.98
    cq = conformal_factor(Q)
    copy = HyperbolicKDTree(leaf_size=8).build(X, cx)
    np.testing.assert_array_equal(X, _data(3, 500, 6))  # the default build leaves its input alone
    mine, mine_c = X.copy(), cx.copy()
    taken = HyperbolicKDTree(leaf_size=8).build(mine, mine_c, in_place=True)
    # no second copy: read-only views of the caller's arrays
    assert taken.points_.base is mine and taken.conformal_.base is mine_c
    assert not taken.points_.flags.writeable and not taken.conformal_.flags.writeable
    np.testing.assert_array_equal(mine, X[taken.indices_])  # now in tree order
    np.testing.assert_array_equal(mine_c, cx[taken.indices_])
    for name in ("indices_", "lo_", "hi_", "left_", "start_", "max_conformal_"):
        np.testing.assert_array_equal(getattr(taken, name), getattr(copy, name))
    a, b = taken.search_exact(Q, cq, 7), copy.search_exact(Q, cq, 7)
    np.testing.assert_array_equal(a.ids, b.ids)
    np.testing.assert_array_equal(a.deltas, b.deltas)
    # a read-only array is copied, not changed
    ro, ro_c = X.copy(), cx.copy()
    ro.flags.writeable = False
    kept = HyperbolicKDTree(leaf_size=8).build(ro, ro_c, in_place=True)
    assert kept.points_ is not ro
    np.testing.assert_array_equal(ro, X)


def test_auto_choosing_the_scan_gives_back_the_input_order():
    X = _data(4, 300, 3)
    index = hypann.HyperbolicIndex(scan_fraction=1e-9).build(X)  # every measurement exceeds it: brute
    assert index.algorithm_.choice_ == "brute"
    np.testing.assert_array_equal(index.points_, X)
    np.testing.assert_array_equal(index.search(X[:10], 1).indices[:, 0], np.arange(10))


@pytest.mark.parametrize(
    "make, match",
    [
        (lambda p: None, r"X: cannot read '.*missing\.npy' as a \.npy file of points \(FileNotFoundError"),
        (lambda p: p.mkdir(), r"X: cannot read '.*' as a \.npy file of points \((IsADirectoryError|OSError)"),
        (lambda p: p.write_text("1 2 3\n"), r"X: cannot read '.*' as a \.npy file of points \(ValueError"),
        (lambda p: np.save(p, np.array([{"a": 1}], dtype=object)),
         r"X: cannot read '.*' as a \.npy file of points \(ValueError: .*Python objects"),
        (lambda p: np.save(p, np.zeros(5)), r"X: '.*' must hold a 2-D array of real numbers \(n_points, n_dims\), "
                                           r"got dtype=float64, shape=\(5,\)"),
        (lambda p: np.save(p, np.zeros((5, 2), dtype=complex)),
         r"X: '.*' must hold a 2-D array of real numbers .*got dtype=complex128, shape=\(5, 2\)"),
        (lambda p: np.save(p, np.zeros((5, 2), dtype=bool)), r"got dtype=bool, shape=\(5, 2\)"),
    ],
    ids=["missing", "directory", "text", "pickled-objects", "1-d", "complex", "bool"],
)
def test_bad_npy_path_is_a_value_error_naming_x(tmp_path, make, match):
    path = tmp_path / "missing.npy"
    make(path)
    with pytest.raises(ValueError, match=match):
        hypann.HyperbolicIndex().build(path)


def test_npz_archive_and_index_file_are_refused(tmp_path):
    np.savez(tmp_path / "a.npz", X=_data())
    with pytest.raises(ValueError, match=r"X: '.*a\.npz' is a \.npz archive, not a \.npy file of points"):
        hypann.HyperbolicIndex().build(tmp_path / "a.npz")
    hypann.HyperbolicIndex().build(_data()).save(tmp_path / "i.hypann")
    with pytest.raises(ValueError, match=r"X: cannot read '.*i\.hypann' as a \.npy file of points"):
        hypann.HyperbolicIndex().build(tmp_path / "i.hypann")


def test_cli_maps_a_npy_file(tmp_path):
    X = _data()
    np.save(tmp_path / "X.npy", X)
    arr = _load_array(str(tmp_path / "X.npy"), "points", mmap=True)
    assert isinstance(arr, np.memmap) and not arr.flags.writeable
    np.testing.assert_array_equal(arr, X)
    np.savez(tmp_path / "X.npz", X=X)
    np.testing.assert_array_equal(_load_array(str(tmp_path / "X.npz"), "points", mmap=True), X)
