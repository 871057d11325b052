"""The command line, end to end on small files (tmp_path)."""

from __future__ import annotations

import numpy as np
import pytest

from hypann.cli import main
from tests.conftest import ball_points


def test_build_search_info(tmp_path, rng, capsys):
    X = ball_points(rng, 200, 3)
    Q = ball_points(rng, 5, 3)
    np.save(tmp_path / "X.npy", X)
    np.save(tmp_path / "Q.npy", Q)
    idx = tmp_path / "idx.hypann"
    assert main(["build", str(tmp_path / "X.npy"), "-o", str(idx), "--algorithm", "recentering", "--oracle", "kdtree", "--seed", "1"]) == 0
    assert main(["search", str(idx), str(tmp_path / "Q.npy"), "-k", "3", "-o", str(tmp_path / "out.npz")]) == 0
    with np.load(tmp_path / "out.npz") as z:
        assert z["indices"].shape == (5, 3) and np.all(np.diff(z["distances"], axis=1) >= 0)
    assert main(["search", str(idx), str(tmp_path / "Q.npy"), "-k", "2"]) == 0
    out = capsys.readouterr().out
    assert out.count("\n") >= 5 and ":" in out
    assert main(["info", str(idx)]) == 0
    assert '"format": "hypann-index"' in capsys.readouterr().out


def test_errors_are_messages_not_tracebacks(tmp_path, capsys):
    np.save(tmp_path / "bad.npy", np.array([[2.0, 0.0]]))
    assert main(["build", str(tmp_path / "bad.npy"), "-o", str(tmp_path / "i")]) == 2
    assert "not strictly inside the Poincare ball" in capsys.readouterr().err
    assert not (tmp_path / "i").exists()
    (tmp_path / "junk").write_text("x")
    assert main(["info", str(tmp_path / "junk")]) == 2
    assert "not a hypann index file" in capsys.readouterr().err


def test_demo_quick(capsys):
    assert main(["demo", "--quick", "--queries", "50"]) == 0
    out = capsys.readouterr().out
    assert "Recentering + cKDTree (exact)" in out and "Spherical-Shell + LSH" in out and "numpy brute force" in out


def test_version_is_the_package_version(capsys):
    import hypann
    from importlib.metadata import version

    with pytest.raises(SystemExit) as exit_info:
        main(["--version"])
    assert exit_info.value.code == 0
    assert capsys.readouterr().out.strip() == f"hypann {version('hypann')}"
    assert hypann.__version__ == version("hypann")
