"""Files behave like files: permissions from the umask, symbolic links written through, atomic saves."""

from __future__ import annotations

import contextlib
import os
import stat

import numpy as np
import pytest

import hypann
from hypann import _files
from hypann._files import atomic_write, check_destination, current_umask
from tests.conftest import ball_points


@contextlib.contextmanager
def umask(mask):
    old = os.umask(mask)
    try:
        yield
    finally:
        os.umask(old)


def _mode(path):
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.fixture
def index(rng):
    return hypann.HyperbolicIndex(algorithm="hkdtree", leaf_size=4).build(ball_points(rng, 40, 2, min_conformal=1e-3))


def test_current_umask_reads_the_umask_without_changing_it():
    with umask(0o027):
        assert current_umask() == 0o027
        assert current_umask() == 0o027
    with umask(0o002):
        assert current_umask() == 0o002


@pytest.mark.parametrize(("mask", "mode"), [(0o022, 0o644), (0o027, 0o640), (0o077, 0o600), (0o002, 0o664)])
def test_saved_index_gets_the_mode_of_the_umask(tmp_path, index, mask, mode):
    with umask(mask):
        index.save(tmp_path / "i.hypann")
    assert _mode(tmp_path / "i.hypann") == mode


def test_replacing_a_file_keeps_its_mode(tmp_path, index):
    path = tmp_path / "i.hypann"
    path.write_bytes(b"old")
    os.chmod(path, 0o600)
    with umask(0o022):
        index.save(path)
    assert _mode(path) == 0o600
    assert hypann.load(path).n_points_ == 40


def test_symlink_is_written_through(tmp_path, index):
    (tmp_path / "store").mkdir()
    (tmp_path / "links").mkdir()
    target = tmp_path / "store" / "real.hypann"
    target.write_bytes(b"old content")
    link = tmp_path / "links" / "current.hypann"
    link.symlink_to(os.path.relpath(target, link.parent))  # relative link
    index.save(link)
    assert link.is_symlink() and os.readlink(link) == os.path.join("..", "store", "real.hypann")
    assert hypann.load(target).n_points_ == 40 and hypann.load(link).n_points_ == 40
    assert sorted(os.listdir(tmp_path / "store")) == ["real.hypann"]  # no temporary file left
    assert sorted(os.listdir(tmp_path / "links")) == ["current.hypann"]


def test_dangling_symlink_creates_its_target(tmp_path, index):
    link = tmp_path / "link.hypann"
    link.symlink_to(tmp_path / "target.hypann")
    index.save(link)
    assert link.is_symlink() and (tmp_path / "target.hypann").is_file()
    assert hypann.load(link).n_points_ == 40


def test_failing_save_leaves_the_old_file_and_no_temporary(tmp_path, index, monkeypatch):
    path = tmp_path / "i.hypann"
    index.save(path)
    before = path.read_bytes()

    def fail(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(hypann.io, "_write_array", fail)  # format 3: the writing of the arrays
    with pytest.raises(OSError, match="No space left on device"):
        index.save(path)
    assert path.read_bytes() == before
    assert os.listdir(tmp_path) == ["i.hypann"]


def test_interrupted_write_leaves_no_temporary(tmp_path):
    def interrupted(fh):
        fh.write(b"partial")
        raise KeyboardInterrupt

    with pytest.raises(KeyboardInterrupt):
        atomic_write(tmp_path / "f.bin", interrupted)
    assert os.listdir(tmp_path) == []


def test_missing_or_bad_destination_is_a_clear_error(tmp_path, index):
    with pytest.raises(FileNotFoundError, match=r"cannot write '.*i\.hypann': folder '.*nope' does not exist"):
        index.save(tmp_path / "nope" / "i.hypann")
    (tmp_path / "plain").write_text("x")
    with pytest.raises(FileNotFoundError, match=r"cannot write '.*i\.hypann': '.*plain' is not a folder"):
        index.save(tmp_path / "plain" / "i.hypann")
    with pytest.raises(IsADirectoryError, match=r"cannot write '.*': it is a directory"):
        index.save(tmp_path)
    with pytest.raises(ValueError, match=r"cannot write to an empty path"):
        atomic_write("", lambda fh: None)
    assert sorted(os.listdir(tmp_path)) == ["plain"]


def test_unwritable_folder_is_a_clear_error(tmp_path, index, monkeypatch):
    """Faked with os.access / mkstemp so that it also runs as root (root ignores permission bits)."""
    monkeypatch.setattr(_files.os, "access", lambda p, mode: False)
    with pytest.raises(PermissionError, match=r"cannot write '.*i\.hypann': no permission to create files in '.*'"):
        check_destination(tmp_path / "i.hypann")

    def denied(**kwargs):
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr(_files.tempfile, "mkstemp", denied)
    with pytest.raises(PermissionError, match=r"cannot write '.*i\.hypann': cannot create a file in '.*': Permission denied"):
        index.save(tmp_path / "i.hypann")
    assert os.listdir(tmp_path) == []


@pytest.mark.skipif(os.geteuid() == 0, reason="root may write into a read-only folder")
def test_unwritable_folder_for_real(tmp_path, index):
    (tmp_path / "ro").mkdir()
    os.chmod(tmp_path / "ro", 0o500)
    try:
        with pytest.raises(PermissionError, match=r"cannot write '.*i\.hypann': cannot create a file in"):
            index.save(tmp_path / "ro" / "i.hypann")
    finally:
        os.chmod(tmp_path / "ro", 0o700)


def test_text_mode_and_make_parents(tmp_path):
    path = tmp_path / "a" / "b" / "notes.md"
    with umask(0o022):
        atomic_write(path, lambda fh: fh.write("héllo\n"), text=True, make_parents=True)
    assert path.read_text(encoding="utf-8") == "héllo\n" and _mode(path) == 0o644


def test_dataset_cache_files_use_the_helper(tmp_path):
    from hypann.datasets.base import build_dataset, read_dataset, save_dataset

    ds = build_dataset("t", ball_points(np.random.default_rng(0), 30, 2, min_conformal=1e-2), n_queries=5, k=2)
    with umask(0o077):
        save_dataset(ds, tmp_path / "sub" / "d.npz")
    assert _mode(tmp_path / "sub" / "d.npz") == 0o600
    assert read_dataset(tmp_path / "sub" / "d.npz").train.shape == (25, 2)
    assert os.listdir(tmp_path / "sub") == ["d.npz"]
