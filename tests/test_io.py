"""Index files: round trip, atomic writes, corrupt and foreign files, a golden file."""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pytest

import hypann
from hypann import io as hio
from tests.conftest import ball_points

GOLDEN = os.path.join(os.path.dirname(__file__), "data", "golden_v1.hypann")


@pytest.mark.parametrize("version", [2, 3])
def test_round_trip(tmp_path, rng, version):
    X = ball_points(rng, 300, 4)
    Q = ball_points(rng, 10, 4)
    idx = hypann.HyperbolicIndex(algorithm="binary_search", oracle="kdtree:leaf_size=8", ratio=1.5, c=2.0, random_state=3).build(X / np.sqrt(2))
    path = tmp_path / "a.hypann"
    idx.save(path, format_version=version)
    meta = hypann.read_metadata(path)
    assert meta["format_version"] == version and meta["n"] == 300 and meta["d"] == 4 and meta["dtype"] == "float64"
    assert meta["algorithm"] == "binary_search" and meta["params"] == {"ratio": 1.5} and meta["c"] == 2.0
    back = hypann.load(path)
    r1, r2 = idx.search(Q / np.sqrt(2), 3), back.search(Q / np.sqrt(2), 3)
    np.testing.assert_array_equal(r1.indices, r2.indices)
    np.testing.assert_array_equal(r1.distances, r2.distances)
    assert not [p for p in os.listdir(tmp_path) if p.endswith(".tmp")]


def test_corrupt_and_foreign_files(tmp_path, rng):
    idx = hypann.HyperbolicIndex().build(ball_points(rng, 20, 2))
    path = tmp_path / "x.hypann"
    idx.save(path, format_version=2)
    raw = path.read_bytes()
    (tmp_path / "trunc").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(ValueError, match=r"not a hypann index file|corrupt"):
        hypann.load(tmp_path / "trunc")
    (tmp_path / "text").write_text("hello")
    with pytest.raises(ValueError, match=r"not a hypann index file"):
        hypann.load(tmp_path / "text")
    np.savez(tmp_path / "other.npz", a=np.zeros(3))
    with pytest.raises(ValueError, match=r"not a hypann index file \(expected an \.npz archive written by HyperbolicIndex\.save\): no 'header' array"):
        hypann.load(tmp_path / "other.npz")
    with pytest.raises(FileNotFoundError, match=r"no index file"):
        hypann.load(tmp_path / "missing")
    # tampered points -> checksum mismatch
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["points"] = arrays["points"] * 0.5
    np.savez(tmp_path / "tampered.npz", **arrays)
    with pytest.raises(ValueError, match=r"checksum"):
        hypann.load(tmp_path / "tampered.npz")
    # a future format version is refused with both versions named
    header = json.loads(bytes(arrays["header"]).decode())
    header["format_version"] = 99
    arrays["header"] = np.frombuffer(json.dumps(header).encode(), dtype=np.uint8)
    arrays["points"] = arrays["points"] * 2
    np.savez(tmp_path / "future.npz", **arrays)
    with pytest.raises(ValueError, match=r"format_version=99; this hypann .* reads format_version 1, 2 and 3; rebuild"):
        hypann.load(tmp_path / "future.npz")


@pytest.mark.parametrize("version", [2, 3])
def test_failed_write_leaves_no_file(tmp_path, rng, monkeypatch, version):
    idx = hypann.HyperbolicIndex().build(ball_points(rng, 20, 2))
    path = tmp_path / "y.hypann"
    if version == 2:
        def boom(*a, **k):
            raise OSError("disk full")

        monkeypatch.setattr(hio.np, "savez", boom)
    else:  # format 3: fail while writing the second array, after the header and the first array
        original, calls = hio._write_array, []

        def boom(fh, a):
            calls.append(1)
            if len(calls) == 2:
                raise OSError("disk full")
            return original(fh, a)

        monkeypatch.setattr(hio, "_write_array", boom)
    with pytest.raises(OSError, match="disk full"):
        idx.save(path, format_version=version)
    assert os.listdir(tmp_path) == []


def test_golden_file_still_reads():
    """A committed v1 index file: catches format drift."""
    idx = hypann.load(GOLDEN)
    meta = hypann.read_metadata(GOLDEN)
    assert meta["n"] == 64 and meta["d"] == 3 and meta["algorithm"] == "recentering"
    with np.load(GOLDEN.replace(".hypann", "_expected.npz")) as z:
        res = idx.search(z["queries"], 3)
        np.testing.assert_array_equal(res.indices, z["indices"])
        np.testing.assert_allclose(res.distances, z["distances"], rtol=1e-12)


def test_zip_structure_is_plain_npz(tmp_path, rng):
    idx = hypann.HyperbolicIndex().build(ball_points(rng, 10, 2))
    idx.save(tmp_path / "z", format_version=2)
    with zipfile.ZipFile(tmp_path / "z") as zf:
        assert {"header.npy", "points.npy"} <= set(zf.namelist())
