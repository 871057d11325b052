"""Randomness is reproducible: ``random_state`` reaches every random choice, in any process."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import numpy as np
import pytest

import hypann
from tests.conftest import ball_points

SRC = pathlib.Path(hypann.__file__).resolve().parent

# (algorithm, oracle, build settings, search settings): every randomized path
CONFIGS = {
    "vamana": ("vamana", None, {"R": 6, "L": 8}, {"budget": 40}),
    "random_shells": ("random_shells", "lsh:granularity=auto", {}, {}),
    "shells_lsh": ("shells", "lsh:granularity=auto,bits=6", {}, {"budget": 60}),
    "recentering_lsh": ("recentering", "lsh:granularity=4.0,bits=4", {}, {"budget": 80}),
    "brute_budget": ("brute", None, {}, {"budget": 30}),
    "shells_hnswlib": ("shells", "hnswlib:M=4,ef=8", {}, {}),
}

SCRIPT = """
import hashlib, json, sys
import numpy as np
import hypann
from tests.test_reproducible import run_all
print(json.dumps(run_all()))
"""


def run_all(seed=7) -> dict:
    """sha256 of indices, distances and sample counts of every configuration."""
    rng = np.random.default_rng(0)
    X = ball_points(rng, 600, 5, min_conformal=1e-6)
    Q = ball_points(rng, 20, 5, min_conformal=1e-6)
    out = {}
    for name, (algorithm, oracle, build, search) in CONFIGS.items():
        if oracle and oracle.startswith("hnswlib"):
            try:
                import hnswlib  # noqa: F401
            except ImportError:
                continue
        res = hypann.HyperbolicIndex(algorithm=algorithm, oracle=oracle, random_state=seed, **build).build(X).search(
            Q, 4, **search)
        digest = __import__("hashlib").sha256()
        for arr in (res.indices, res.distances, *res.stats.as_dict().values()):
            digest.update(np.ascontiguousarray(arr).tobytes())
        out[name] = digest.hexdigest()
    return out


def test_same_seed_same_results_in_new_processes():
    here = run_all()
    env = dict(os.environ)
    root = str(pathlib.Path(__file__).resolve().parent.parent)
    env["PYTHONPATH"] = os.pathsep.join([str(SRC.parent), root, env.get("PYTHONPATH", "")])
    runs = [
        json.loads(subprocess.run([sys.executable, "-c", SCRIPT], cwd=root, env=env, capture_output=True, text=True,
                                  check=True).stdout.strip().splitlines()[-1])
        for _ in range(2)
    ]
    assert runs[0] == runs[1] == here
    assert len(here) >= len(CONFIGS) - 1


def test_different_seeds_give_different_random_choices():
    X = ball_points(np.random.default_rng(1), 300, 4, min_conformal=1e-6)

    def built(algorithm, seed, oracle=None):
        return hypann.HyperbolicIndex(algorithm=algorithm, oracle=oracle, random_state=seed).build(X).algorithm_

    assert not np.array_equal(built("vamana", 1).graph_.neighbors_, built("vamana", 2).graph_.neighbors_)
    np.testing.assert_array_equal(built("vamana", 1).graph_.neighbors_, built("vamana", 1).graph_.neighbors_)
    assert not np.array_equal(built("brute", 1)._perm, built("brute", 2)._perm)
    assert not np.array_equal(built("recentering", 1, "lsh").oracle_.hyperplanes_,
                              built("recentering", 2, "lsh").oracle_.hyperplanes_)
    assert built("random_shells", 1, "kdtree").query_seed_ != built("random_shells", 2, "kdtree").query_seed_


def test_index_seed_reaches_oracles_made_from_spec_strings():
    X = ball_points(np.random.default_rng(1), 300, 4, min_conformal=1e-6)
    idx = hypann.HyperbolicIndex(algorithm="shells", oracle="lsh:granularity=auto", random_state=5).build(X)
    shell_oracles = [o for o in idx.algorithm_.oracles_ if o is not None]
    assert len(shell_oracles) > 1 and {o.random_state for o in shell_oracles} == {5}
    # hyperplanes are shared across shells (the paper), and follow the seed
    np.testing.assert_array_equal(shell_oracles[0].hyperplanes_, shell_oracles[-1].hyperplanes_)
    other = hypann.HyperbolicIndex(algorithm="shells", oracle="lsh:granularity=auto", random_state=6).build(X)
    assert not np.array_equal(other.algorithm_.oracles_[-1].hyperplanes_, shell_oracles[-1].hyperplanes_)
    # a spec that sets its own seed keeps it; no index seed keeps the oracle's default
    own = hypann.HyperbolicIndex(algorithm="recentering", oracle="lsh:random_state=3", random_state=5).build(X)
    assert own.algorithm_.oracle_.random_state == 3
    assert hypann.HyperbolicIndex(algorithm="recentering", oracle="lsh").build(X).algorithm_.oracle_.random_state == 0


def test_query_time_randomness_is_fixed_per_index_and_settable_per_call():
    X = ball_points(np.random.default_rng(2), 400, 4, min_conformal=1e-8)
    Q = ball_points(np.random.default_rng(3), 30, 4, min_conformal=1e-8)
    idx = hypann.HyperbolicIndex(algorithm="random_shells", oracle="kdtree", random_state=1).build(X)
    first, again = idx.search(Q, 3), idx.search(Q, 3)  # no hidden generator state between calls
    np.testing.assert_array_equal(first.stats.samples, again.stats.samples)
    probes = {idx.search(Q, 3, random_state=s).stats.samples.tobytes() for s in range(4)}
    assert len(probes) > 1
    vam = hypann.HyperbolicIndex(algorithm="vamana", R=2, L=2, random_state=1).build(X)  # weak graph: restarts matter
    a, b = vam.search(Q, 3, budget=50), vam.search(Q, 3, budget=50)
    np.testing.assert_array_equal(a.indices, b.indices)
    assert any(not np.array_equal(vam.search(Q, 3, budget=50, random_state=s).indices, a.indices) for s in (11, 12, 13))


def test_vamana_restarts_follow_a_loaded_index(tmp_path):
    X = ball_points(np.random.default_rng(4), 300, 3, min_conformal=1e-6)
    Q = ball_points(np.random.default_rng(5), 10, 3, min_conformal=1e-6)
    idx = hypann.HyperbolicIndex(algorithm="vamana", random_state=9).build(X)
    idx.save(tmp_path / "v.hypann")
    back = hypann.load(tmp_path / "v.hypann")
    np.testing.assert_array_equal(back.search(Q, 3, budget=40).indices, idx.search(Q, 3, budget=40).indices)


# Library code draws only from generators it was given a seed for.
_SHARED_RNG = re.compile(
    r"np\.random\.(seed|rand|randn|randint|random|random_sample|choice|permutation|shuffle|normal|uniform|"
    r"standard_normal|RandomState)\b|default_rng\(\s*\)|^\s*import random\b|^\s*from random import",
    re.MULTILINE,
)


@pytest.mark.parametrize("path", sorted(p.relative_to(SRC).as_posix() for p in SRC.rglob("*.py")))
def test_no_shared_or_unseeded_generator_in_library_code(path):
    text = (SRC / path).read_text()
    code = "\n".join(line for line in text.splitlines() if not line.lstrip().startswith((">>>", "#")))
    assert not _SHARED_RNG.search(code), f"{path}: {_SHARED_RNG.search(code).group(0)!r}"
