"""The command line, end to end on small files (tmp_path)."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys

import numpy as np
import pytest

from hypann import index as hypann_index
from hypann.apps.cli import main
from tests.conftest import ball_points

SRC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")


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


def test_threads_option_gives_identical_answers(tmp_path, rng, capsys, monkeypatch):
    """``--threads 1`` and ``--threads 2`` reach the kernels (build and search) and write the same neighbours."""
    np.save(tmp_path / "X.npy", ball_points(rng, 3000, 4, min_conformal=1e-9))
    np.save(tmp_path / "Q.npy", ball_points(rng, 300, 4, min_conformal=1e-9))
    seen = []
    real = hypann_index.numba_threads
    monkeypatch.setattr(hypann_index, "numba_threads", lambda n_jobs, **kw: (seen.append(n_jobs), real(n_jobs, **kw))[1])
    outputs = []
    for threads in ("1", "2"):
        idx, out = tmp_path / f"idx{threads}", tmp_path / f"out{threads}.npz"
        seen.clear()
        assert main(["build", str(tmp_path / "X.npy"), "-o", str(idx), "--threads", threads]) == 0
        assert main(["search", str(idx), str(tmp_path / "Q.npy"), "-k", "7", "--threads", threads, "-o", str(out)]) == 0
        assert seen and set(seen) == {int(threads)}
        with np.load(out) as z:
            outputs.append((z["indices"], z["distances"]))
    np.testing.assert_array_equal(outputs[0][0], outputs[1][0])
    np.testing.assert_array_equal(outputs[0][1], outputs[1][1])
    capsys.readouterr()


def test_storage_option_builds_a_float32_index(tmp_path, rng, capsys):
    np.save(tmp_path / "X.npy", ball_points(rng, 500, 4, min_conformal=1e-6))
    assert main(["build", str(tmp_path / "X.npy"), "-o", str(tmp_path / "idx"), "--storage", "float32"]) == 0
    assert hypann_index.HyperbolicIndex.load(tmp_path / "idx").storage == "float32"
    code, err = _run(["build", str(tmp_path / "X.npy"), "-o", str(tmp_path / "idx2"), "--storage", "float16"], capsys)
    assert code == 2 and "argument --storage: invalid choice: 'float16'" in err


def test_float32_rounding_warning_is_one_line(tmp_path, rng, capsys):
    """Points that float32 merges near the boundary: the build says so on one line and still succeeds."""
    centres = rng.standard_normal((200, 4))
    centres *= np.sqrt(1.0 - 1e-10) / np.linalg.norm(centres, axis=1, keepdims=True)
    np.save(tmp_path / "X.npy", np.vstack([centres, centres + 1e-12 * rng.standard_normal(centres.shape)]))
    code, err = _run(["build", str(tmp_path / "X.npy"), "-o", str(tmp_path / "idx"), "--storage", "float32"], capsys)
    assert code == 0 and (tmp_path / "idx").exists()
    lines = err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("hypann: warning: storage='float32' changes distances near the "
                                                   "boundary: of the 256 points nearest it")


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


# --------------------------------------------------------------------------- user errors: one line, no traceback


def _run(argv, capsys):
    """(exit status, stderr) of ``hypann argv`` run in-process; usage errors exit through SystemExit."""
    try:
        code = main([str(a) for a in argv])
    except SystemExit as exc:
        code = exc.code
    err = capsys.readouterr().err
    return code, err


def _one_error_line(err, pattern):
    assert "Traceback" not in err
    lines = err.splitlines()
    assert len(lines) == 1, err
    assert re.fullmatch(r"hypann: error: " + pattern, lines[0]), lines[0]


@pytest.fixture
def files(tmp_path, rng):
    np.save(tmp_path / "X.npy", ball_points(rng, 120, 3, min_conformal=1e-3))
    np.save(tmp_path / "Q.npy", ball_points(rng, 4, 3, min_conformal=1e-3))
    assert main(["build", str(tmp_path / "X.npy"), "-o", str(tmp_path / "idx"), "--algorithm", "brute"]) == 0
    return tmp_path


def _listing(folder):
    return sorted(os.listdir(folder))


USAGE_ERRORS = [
    # (argv with {d} for the folder, regex of the message)
    (["build", "{d}/missing.npy", "-o", "{d}/new"], r"cannot read points: no file at '.*missing\.npy'"),
    (["build", "{d}", "-o", "{d}/new"], r"cannot read points from '.*': it is a directory, expected a \.npy file"),
    (["build", "{d}/X.npy/under_a_file.npy", "-o", "{d}/new"], r"cannot read points from '.*under_a_file\.npy': Not a directory"),
    (["build", "{d}/idx", "-o", "{d}/new"], r"cannot read points from '.*idx': not a \.npy array file \(ValueError: it is a hypann index file; .*"),
    (["build", "{d}/X.npy", "-o", "{d}/no_such_folder/new"], r"cannot write '.*new': folder '.*no_such_folder' does not exist"),
    (["build", "{d}/X.npy", "-o", "{d}/X.npy/new"], r"cannot write '.*new': '.*X\.npy' is not a folder"),
    (["build", "{d}/X.npy", "-o", "{d}"], r"cannot write '.*': it is a directory"),
    (["build", "{d}/X.npy", "-o", "{d}/new", "--algorithm", "recentering", "--oracle", "nosuch"], r"unknown oracle 'nosuch'; expected one of .*"),
    (["build", "{d}/X.npy", "-o", "{d}/new", "--algorithm", "recentering", "--oracle", "kdtree:leaf_size"], r"bad setting 'leaf_size' in oracle spec 'kdtree:leaf_size': expected key=value"),
    (["build", "{d}/X.npy", "-o", "{d}/new", "--algorithm", "vamana", "--param", "R"], r"--param expects key=value, got 'R'"),
    (["build", "{d}/X.npy", "-o", "{d}/new", "--algorithm", "hkdtree", "--param", "leaf_size=0"], r"leaf_size must be a positive integer or None, got leaf_size=0"),
    (["build", "{d}/X.npy", "-o", "{d}/new", "--algorithm", "nosuch"], r"unknown algorithm 'nosuch'; expected one of .*"),
    (["search", "{d}/X.npy", "{d}/Q.npy"], r"'.*X\.npy' is not a hypann index file \(expected an \.npz archive written by HyperbolicIndex\.save\): .*"),
    (["search", "{d}/missing", "{d}/Q.npy"], r"no index file at '.*missing'"),
    (["search", "{d}/idx", "{d}/Q.npy", "-o", "{d}/no_such_folder/out.npz"], r"cannot write '.*out\.npz': folder '.*no_such_folder' does not exist"),
    (["search", "{d}/idx", "{d}/Q.npy", "--param", "L=3"], r"unknown option\(s\) \['L'\] for search with algorithm 'brute'; allowed: none"),
    (["info", "{d}"], r"'.*' is not a hypann index file \(expected .*\): it is a directory"),
]


@pytest.mark.parametrize(("argv", "pattern"), USAGE_ERRORS, ids=[" ".join(a[:1] + a[2:]) for a, _ in USAGE_ERRORS])
def test_user_errors_are_one_line_and_status_2(files, capsys, argv, pattern):
    before = _listing(files)
    code, err = _run([a.format(d=files) for a in argv], capsys)
    assert code == 2
    _one_error_line(err, pattern)
    assert _listing(files) == before  # nothing written, no temporary file


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["search", "{d}/idx", "{d}/Q.npy", "--batch-size", "0"], r"argument --batch-size: must be a positive integer, got '0' \(see 'hypann search --help'\)"),
        (["search", "{d}/idx", "{d}/Q.npy", "-k", "x"], r"argument -k: must be a positive integer, got 'x' \(see 'hypann search --help'\)"),
        (["search", "{d}/idx", "{d}/Q.npy", "--threads", "0"], r"argument --threads: must be a positive integer, got '0' \(see 'hypann search --help'\)"),
        (["build", "{d}/X.npy", "-o", "{d}/new", "--threads", "two"], r"argument --threads: must be a positive integer, got 'two' \(see 'hypann build --help'\)"),
        (["search", "{d}/idx"], r"the following arguments are required: queries \(see 'hypann search --help'\)"),
        (["frobnicate"], r"argument command: invalid choice: 'frobnicate' .*"),
    ],
)
def test_usage_errors_are_one_line_and_status_2(files, capsys, argv, pattern):
    code, err = _run([a.format(d=files) for a in argv], capsys)
    assert code == 2
    _one_error_line(err, pattern)


def test_oracle_library_error_is_a_message(files, capsys):
    pytest.importorskip("faiss")
    code, err = _run(["build", files / "X.npy", "-o", files / "new", "--algorithm", "recentering", "--oracle", "faiss:IVF1024,Flat"], capsys)
    assert code == 2
    _one_error_line(err, r"faiss cannot build 'IVF1024,Flat' on 120 points of dimension 3: .*Number of training points \(120\).*")
    assert not (files / "new").exists()


def test_damaged_index_is_a_message(files, capsys):
    raw = bytearray((files / "idx").read_bytes())
    raw[len(raw) // 2] ^= 0xFF
    (files / "damaged").write_bytes(bytes(raw))
    code, err = _run(["search", files / "damaged", files / "Q.npy"], capsys)
    assert code == 2
    _one_error_line(err, r"'.*damaged' is (a damaged hypann index file|not a hypann index file).*")


def test_failed_output_write_leaves_no_file(files, capsys, monkeypatch):
    def disk_full(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr("hypann.apps.cli.np.savez", disk_full)
    code, err = _run(["search", files / "idx", files / "Q.npy", "-o", files / "out.npz"], capsys)
    assert code == 1
    _one_error_line(err, r"\[Errno 28\] No space left on device")
    assert _listing(files) == ["Q.npy", "X.npy", "idx"]


@pytest.mark.skipif(os.geteuid() == 0, reason="root ignores file permissions (the under-a-regular-file cases cover the message)")
def test_permission_errors_are_messages(files, capsys):
    (files / "locked").mkdir()
    os.chmod(files / "locked", 0o500)
    os.chmod(files / "Q.npy", 0o000)
    try:
        code, err = _run(["build", files / "X.npy", "-o", files / "locked" / "new"], capsys)
        assert code == 1
        _one_error_line(err, r"cannot write '.*new': no permission to create files in '.*locked'")
        code, err = _run(["search", files / "idx", files / "Q.npy"], capsys)
        assert code == 1
        _one_error_line(err, r"cannot read queries from '.*Q\.npy': Permission denied")
    finally:
        os.chmod(files / "locked", 0o700)
        os.chmod(files / "Q.npy", 0o600)


def test_permission_errors_simulated(files, capsys, monkeypatch):
    """The same messages as above, under root too: the permission checks are faked."""
    import hypann._files
    import hypann.apps.cli

    real_access = os.access
    monkeypatch.setattr(hypann._files.os, "access", lambda p, mode: False if "locked" in str(p) else real_access(p, mode))
    (files / "locked").mkdir()
    code, err = _run(["build", files / "X.npy", "-o", files / "locked" / "new"], capsys)
    assert code == 1
    _one_error_line(err, r"cannot write '.*new': no permission to create files in '.*locked'")

    def denied(path, mode="r"):
        raise PermissionError(13, "Permission denied", str(path))

    monkeypatch.setattr(hypann.apps.cli, "open", denied, raising=False)
    code, err = _run(["search", files / "idx", files / "Q.npy"], capsys)
    assert code == 1
    _one_error_line(err, r"cannot read queries from '.*Q\.npy': Permission denied")
    assert _listing(files) == ["Q.npy", "X.npy", "idx", "locked"]


def _cli_subprocess(cmd, cwd):
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in (SRC, os.environ.get("PYTHONPATH")) if p))
    return subprocess.run(["bash", "-c", cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def test_closed_pipe_exits_quietly(tmp_path, rng):
    """``hypann search ... | head -1``: one line out, nothing on stderr, status 141 (SIGPIPE)."""
    np.save(tmp_path / "X.npy", ball_points(rng, 50, 3, min_conformal=1e-3))
    np.save(tmp_path / "Q.npy", ball_points(rng, 4000, 3, min_conformal=1e-3))  # ~500 kB of output > a pipe buffer
    assert main(["build", str(tmp_path / "X.npy"), "-o", str(tmp_path / "idx"), "--algorithm", "brute"]) == 0
    py = shlex.quote(sys.executable)
    proc = _cli_subprocess(
        f"{py} -m hypann.apps.cli search idx Q.npy 2>err.txt | head -1; echo \"status=${{PIPESTATUS[0]}}\" >&2", tmp_path
    )
    assert proc.stdout.count("\n") == 1 and proc.stdout.startswith("0\t")
    assert proc.stderr.strip() == "status=141"
    assert (tmp_path / "err.txt").read_text() == ""


def test_subprocess_error_has_no_traceback(tmp_path):
    proc = _cli_subprocess(f"{shlex.quote(sys.executable)} -m hypann.apps.cli search nothing.hypann q.npy", tmp_path)
    assert proc.returncode == 2
    assert proc.stderr == "hypann: error: no index file at 'nothing.hypann'\n"


def test_search_maps_its_queries_and_reports_a_damaged_or_bad_file(files, capsys):
    """``hypann search`` maps a .npy file of queries (each batch read when it is searched): the answer equals the
    library's, a file shorter than its header says is one line, and a bad query in a later batch writes nothing."""
    import hypann

    Q = np.load(files / "Q.npy")
    want = hypann.load(files / "idx").search(Q, 5)
    out = files / "out.npz"
    code, _ = _run(["search", files / "idx", files / "Q.npy", "-k", "5", "--batch-size", "3", "-o", out], capsys)
    assert code == 0
    with np.load(out) as z:
        np.testing.assert_array_equal(z["indices"], want.indices)
        np.testing.assert_array_equal(z["distances"], want.distances)
    (files / "short.npy").write_bytes((files / "Q.npy").read_bytes()[:-8])  # one value missing
    code, err = _run(["search", files / "idx", files / "short.npy"], capsys)
    assert code == 2
    _one_error_line(err, r"cannot read queries from '.*short\.npy': not a \.npy array file \(.*")
    bad = Q.copy()
    bad[3, 0] = np.nan  # in the second batch of 3
    np.save(files / "nan.npy", bad)
    before = _listing(files)
    code, err = _run(["search", files / "idx", files / "nan.npy", "--batch-size", "3", "-o", files / "nan.npz"], capsys)
    assert code == 2
    _one_error_line(err, r"Q contains NaN or inf \(first at row 0: .*\); in the batch of queries 3 to 3 of "
                         r"'.*nan\.npy', whose row 0 is row 3 of the file")
    assert _listing(files) == before
    code, err = _run(["search", files / "idx", files / "nan.npy", "--radius", "1", "--batch-size", "2"], capsys)
    assert code == 2
    _one_error_line(err, r"Q contains NaN or inf \(first at row 1: .*\); in the batch of queries 2 to 3 of "
                         r"'.*nan\.npy', whose row 0 is row 2 of the file")
    bad[3, 0], bad[1, 0] = Q[3, 0], np.nan  # in the first of two batches, whose rows are the file's
    np.save(files / "nan1.npy", bad)
    code, err = _run(["search", files / "idx", files / "nan1.npy", "--batch-size", "2"], capsys)
    assert code == 2
    _one_error_line(err, r"Q contains NaN or inf \(first at row 1: [^;]*")


def test_the_search_batch_opens_no_second_bar():
    from hypann.apps import cli

    assert hypann_index.PROGRESS_MIN_QUERIES >= cli.SEARCH_BATCH >= 512


# --------------------------------------------------------------------------- range search: --radius


def test_search_radius_matches_the_library(files, capsys):
    import hypann

    index = hypann.load(files / "idx")
    Q = np.load(files / "Q.npy")
    want = index.search_radius(Q, 11.0)
    assert want.indices.size > 0  # the radius finds points, so the comparison means something
    out = files / "range.npz"
    code, _ = _run(["search", files / "idx", files / "Q.npy", "--radius", "11", "--batch-size", "3", "-o", out], capsys)
    assert code == 0
    with np.load(out) as z:
        assert sorted(z.files) == ["distances", "indices", "offsets"]
        np.testing.assert_array_equal(z["offsets"], want.offsets)
        np.testing.assert_array_equal(z["indices"], want.indices)
        np.testing.assert_array_equal(z["distances"], want.distances)
    assert main(["search", str(files / "idx"), str(files / "Q.npy"), "--radius", "11"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(Q)
    for i, line in enumerate(lines):
        lo, hi = want.offsets[i], want.offsets[i + 1]
        expected = " ".join(f"{a}:{b:.6g}" for a, b in zip(want.indices[lo:hi], want.distances[lo:hi]))
        assert line == f"{i}\t{expected}"


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["--radius", "1", "-k", "3"], r"argument -k: not allowed with argument --radius \(see 'hypann search --help'\)"),
        (["--radius", "-1"], r"argument --radius: must be a finite number >= 0, got '-1' \(see 'hypann search --help'\)"),
        (["--radius", "nan"], r"argument --radius: must be a finite number >= 0, got 'nan' .*"),
        (["--radius", "1", "--budget", "5"], r"--budget does not apply to range search \(--radius 1\); drop it or use -k"),
        (["--radius", "1", "--param", "L=3"], r"--param does not apply to range search \(--radius 1\); drop it or use -k"),
    ],
)
def test_search_radius_usage_errors(files, capsys, argv, pattern):
    before = _listing(files)
    code, err = _run(["search", files / "idx", files / "Q.npy", *argv], capsys)
    assert code == 2
    _one_error_line(err, pattern)
    assert _listing(files) == before


def test_search_radius_on_a_sharded_folder_is_one_line(files, capsys):
    (files / "shards").mkdir()  # any folder is taken as a sharded index: refused before Ray is touched
    code, err = _run(["search", files / "shards", files / "Q.npy", "--radius", "1", "-o", files / "r.npz"], capsys)
    assert code == 2
    _one_error_line(err, r"'.*shards' is a sharded index folder, which has no range search \(--radius\); use -k, or search the single-file index")
    assert not (files / "r.npz").exists()
