"""A third-party oracle registered with ``register_oracle`` survives save / load in a fresh process.

The file records the oracle class's import path (``oracle_class``); a process
that has not registered the name imports that module, registers the class and
searches; a process that cannot import it gets a ValueError naming the missing
``register_oracle`` call and the import path.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import hypann
from hypann import io as hio

HYPANN_SRC = os.path.dirname(os.path.dirname(os.path.abspath(hypann.__file__)))

ORACLE_MODULE = '''
from hypann.oracles.brute import BruteForceOracle


class MyOracle(BruteForceOracle):
    """Brute force under another name: exact."""

    name = "myoracle"
    exact = True
'''

BUILD = '''
import numpy as np, sys
import hypann
from hypann.oracles.registry import register_oracle
from myoracle_mod import MyOracle

register_oracle("myoracle", MyOracle)
X = np.random.default_rng(5).uniform(-0.5, 0.5, (200, 3))
index = hypann.HyperbolicIndex(algorithm="recentering", oracle="myoracle", random_state=1).build(X)
index.save(sys.argv[1])
res = index.search(X[:20], k=4)
np.savez(sys.argv[2], indices=res.indices, distances=res.distances)
'''

LOAD = '''
import numpy as np, sys
import hypann
index = hypann.HyperbolicIndex.load(sys.argv[1])
X = np.random.default_rng(5).uniform(-0.5, 0.5, (200, 3))
res = index.search(X[:20], k=4)
np.savez(sys.argv[2], indices=res.indices, distances=res.distances)
'''


def _run(script, args, extra_path):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([HYPANN_SRC, *extra_path])
    return subprocess.run([sys.executable, "-c", textwrap.dedent(script), *map(str, args)], env=env,
                          capture_output=True, text=True, timeout=300)


@pytest.fixture(scope="module")
def saved_custom(tmp_path_factory):
    folder = tmp_path_factory.mktemp("custom_oracle")
    moddir = folder / "mods"
    moddir.mkdir()
    (moddir / "myoracle_mod.py").write_text(ORACLE_MODULE)
    path, built = folder / "custom.hypann", folder / "built.npz"
    proc = _run(BUILD, [path, built], [str(moddir)])
    assert proc.returncode == 0, proc.stderr
    return folder, moddir, path, built


def test_file_records_the_oracle_class(saved_custom):
    _, _, path, _ = saved_custom
    header = hio.read_metadata(path)
    assert header["oracle"] == "myoracle"
    assert header["oracle_class"] == "myoracle_mod:MyOracle"


def test_builtin_oracle_records_no_class(tmp_path):
    X = np.random.default_rng(2).uniform(-0.5, 0.5, (50, 2))
    hypann.HyperbolicIndex(algorithm="recentering", oracle="brute").build(X).save(tmp_path / "b.hypann")
    assert "oracle_class" not in hio.read_metadata(tmp_path / "b.hypann")


def test_fresh_process_imports_registers_and_searches(saved_custom):
    folder, moddir, path, built = saved_custom
    out = folder / "loaded.npz"
    proc = _run(LOAD, [path, out], [str(moddir)])
    assert proc.returncode == 0, proc.stderr
    with np.load(built) as a, np.load(out) as b:
        np.testing.assert_array_equal(a["indices"], b["indices"])
        np.testing.assert_array_equal(a["distances"], b["distances"])


def test_fresh_process_without_the_module_gets_a_clear_error(saved_custom):
    folder, _, path, _ = saved_custom
    proc = _run(LOAD, [path, folder / "never.npz"], [])
    assert proc.returncode != 0
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("ValueError:"), proc.stderr
    assert 'register_oracle("myoracle", ...)' in last
    assert "'myoracle_mod:MyOracle'" in last
    assert "ModuleNotFoundError" in last


def _rewrite(src, dst, **changes):
    header, arrays = hio.read_raw(src)
    header.update(changes)
    header = {k: v for k, v in header.items() if v is not ...}
    hio.write_raw(dst, header, arrays)


@pytest.mark.parametrize(
    ("changes", "match"),
    [
        ({"oracle_class": "not a path"}, r"header field 'oracle_class' must be an import path 'module:QualName'"),
        ({"oracle_class": 3}, r"header field 'oracle_class' must be an import path"),
        ({"oracle_class": "json:loads"}, r"importing its class from 'json:loads' failed \(TypeError: .*not a subclass"),
        ({"oracle_class": "json:NoSuchThing"}, r"importing its class from 'json:NoSuchThing' failed \(ImportError"),
        ({"oracle_class": ...}, r"uses unknown oracle 'myoracle'.*does not record its class: call "
                                r"hypann\.oracles\.registry\.register_oracle\(\"myoracle\", \.\.\.\)"),
    ],
)
def test_bad_or_missing_oracle_class(saved_custom, tmp_path, changes, match):
    _, _, path, _ = saved_custom
    dst = tmp_path / "changed.hypann"
    _rewrite(path, dst, **changes)
    with pytest.raises(ValueError, match=match):
        hypann.HyperbolicIndex.load(dst)


def test_oracle_override_needs_no_import(saved_custom):
    _, _, path, _ = saved_custom
    index = hypann.HyperbolicIndex.load(path, oracle="brute")
    assert index.search(None, k=1).indices[:5, 0].tolist() == [0, 1, 2, 3, 4]
