"""ShardedIndex on a local Ray cluster: exactness, shell routing, actor faults, files, the CLI.

One Ray cluster (2 CPUs) for the module; every index keeps to one actor
(several shards in it) because starting an actor process is the expensive step. The teardown shuts
Ray down and checks that no process started by the tests is left.
"""

from __future__ import annotations

import json
import os
import time
import warnings

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

ray = pytest.importorskip("ray")

import hypann  # noqa: E402
from hypann.apps import cli  # noqa: E402
from hypann._validation import check_points  # noqa: E402
from hypann.datasets import synthetic  # noqa: E402
from hypann.distributed import ShardedIndex, ShardUnavailableError  # noqa: E402
from hypann.eval.ground_truth import exact_knn  # noqa: E402
from hypann.geometry import poincare as P  # noqa: E402
from hypann.geometry.models import poincare_to_lorentz  # noqa: E402
from hypann.geometry.poincare import pairwise_dist  # noqa: E402
from tests.conftest import CountingTensor, ball_points  # noqa: E402


def _descendants(pid):
    """Live (non-zombie) descendant processes of ``pid``, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as fh:
                fields = fh.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


@pytest.fixture(scope="module")
def ray_cluster():
    if ray.is_initialized():
        pytest.skip("Ray is already initialized by someone else; these tests start and stop their own cluster")
    before = set(_descendants(os.getpid()))
    # compile (or load) the kd-tree kernels once here so that actors find them in numba's disk cache
    X = ball_points(np.random.default_rng(0), 50, 3)
    hypann.HyperbolicIndex(algorithm="hkdtree").build(X).search(X[:2], 2)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    actor_pids = []
    yield actor_pids
    ray.shutdown()
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        left = [p for p in set(_descendants(os.getpid())) - before] + [p for p in actor_pids if _alive(p)]
        if not left:
            break
        time.sleep(0.2)
    assert not left, f"processes left behind after ray.shutdown(): {left}"


def _kill(actor, timeout=60.0):
    """``ray.kill`` and wait until the actor is really gone (``ray.kill`` only starts the kill).

    Without the wait, calls already queued may still be served by the dying actor and a
    test that expects the *restart* path sees the old actor's answer instead.
    """
    ray.kill(actor)
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            ray.get(actor.pid.remote(), timeout=timeout)
        except ray.exceptions.RayActorError:
            return
        time.sleep(0.05)
    raise AssertionError("a killed Ray actor still answers")


def _track(index, ray_cluster):
    ray_cluster.extend(index.actor_pids())
    return index


def _family(name, n, d, seed):
    rng = np.random.default_rng(seed)
    if name == "uniform":
        dirs = rng.normal(size=(n, d))
        return dirs / np.linalg.norm(dirs, axis=1, keepdims=True) * rng.uniform(0, 1, (n, 1)) ** (1 / d) * 0.999
    if name == "boundary":
        return ball_points(rng, n, d, min_conformal=1e-12, radial_power=0.2)
    if name == "clustered":
        return synthetic.clustered(n, d, seed=seed, n_clusters=8)
    return synthetic.hierarchical_tree(n, d, seed=seed)


def _check_exact(res, single, X, Q, k, c=1.0):
    """Equal to the single index's result, and to float64 brute force over the points as stored."""
    np.testing.assert_array_equal(res.indices, single.indices)
    np.testing.assert_array_equal(res.distances, single.distances)
    _true_ids, true_dist = exact_knn(Q, X, k)
    np.testing.assert_allclose(res.distances, true_dist / np.sqrt(c), rtol=1e-12, atol=0)


@pytest.mark.parametrize(
    "family, d, model, c, partition, n_actors",
    [
        ("uniform", 3, "poincare", 1.0, "kd", 2),
        ("boundary", 5, "poincare", 0.5, "shells", 1),
        ("clustered", 8, "poincare", 1.0, "random", 1),
        ("tree", 10, "lorentz", 2.0, "kd", 1),
    ],
)
def test_sharded_search_equals_single_index(ray_cluster, family, d, model, c, partition, n_actors):
    pts = _family(family, 1550, d, seed=7)
    X, Q = pts[:1500], pts[1500:]
    X_in, Q_in = X / np.sqrt(c), Q / np.sqrt(c)
    if model == "lorentz":
        X_in, Q_in = poincare_to_lorentz(X_in, c=c), poincare_to_lorentz(Q_in, c=c)
    sharded = _track(ShardedIndex(4, partition=partition, n_actors=n_actors, model=model, c=c).build(X_in), ray_cluster)
    assert len(set(sharded.actor_pids())) == n_actors
    single = hypann.HyperbolicIndex(algorithm="hkdtree", model=model, c=c).build(X_in)
    Q_stored, _ = check_points(Q_in, model=model, c=c)  # as the index sees them (rescaled, converted)
    for k in (1, 10):
        res = sharded.search(Q_in, k)
        if model == "poincare" and c == 1.0:
            _check_exact(res, single.search(Q_in, k), single.points_, Q_stored, k, c)
        else:
            # the index keeps 1 - c|x|^2 from the caller's coordinates: compare with brute force on those
            # (tests/test_precision.py checks those distances against mpmath)
            np.testing.assert_array_equal(res.indices, single.search(Q_in, k).indices)
            np.testing.assert_array_equal(res.distances, single.search(Q_in, k).distances)
            if model == "poincare":
                ref = np.sort(pairwise_dist(Q_in, X_in, c=c), axis=1)[:, :k]
                np.testing.assert_allclose(res.distances, ref, rtol=1e-12, atol=0)
        visited = res.stats.extra["shards_visited"]
        assert visited.min() >= 1 and visited.max() <= 4
        assert (res.stats.samples > 0).all()
    sharded.close()


@pytest.fixture(scope="module")
def tree_index(ray_cluster):
    """Hierarchical data in 6 norm shells (one actor)."""
    pts = synthetic.hierarchical_tree(3100, 4, seed=3)
    X, Q = pts[:3000], pts[3000:]
    index = _track(ShardedIndex(6, partition="shells", n_actors=1).build(X), ray_cluster)
    yield index, X, Q
    index.close()


def test_routing_skips_shards_on_hierarchical_data(tree_index, ray_cluster):
    index, X, Q = tree_index
    assert index.nbytes > X.nbytes
    empty = index.search(np.empty((0, 4)), 3)
    assert empty.indices.shape == (0, 3) and empty.stats.extra["missing_shards"].shape == (0, 6)
    with pytest.raises(ValueError, match=r"Q has 3 dimensions \(Poincare\), but the index was built with 4"):
        index.search(Q[:, :3], 1)
    with pytest.raises(ValueError, match=r"k must be in \[1, 3000\]"):
        index.search(Q, 3001)
    with pytest.raises(ValueError, match=r"shards_per_round must be a positive integer or None, got shards_per_round=0"):
        index.search(Q, 1, shards_per_round=0)
    with pytest.raises(TypeError, match=r"allow_partial must be True or False, got 'yes'"):
        index.search(Q, 1, allow_partial="yes")
    single = hypann.HyperbolicIndex(algorithm="hkdtree").build(X)
    res = index.search(Q, 1)
    _check_exact(res, single.search(Q, 1), X, Q, 1)
    visited = res.stats.extra["shards_visited"]
    assert visited.mean() < 0.75 * 6, visited.mean()
    assert (visited < 6).mean() > 0.5
    assert not res.stats.extra["missing_shards"].any() and not res.stats.extra["shards_missing"].any()
    # two rounds: the same answer from more shards
    wide = index.search(Q, 1, shards_per_round=None)
    _check_exact(wide, single.search(Q, 1), X, Q, 1)
    assert (wide.stats.extra["shards_visited"] >= visited).all() and wide.stats.extra["shards_visited"].mean() > visited.mean()
    # compact kd cells: far fewer shards than norm shells, for k = 10 as well
    kd = _track(ShardedIndex(6, partition="kd", n_actors=1).build(X), ray_cluster)
    for k in (1, 10):
        res_kd, res_shells = kd.search(Q, k), index.search(Q, k)
        _check_exact(res_kd, single.search(Q, k), X, Q, k)
        assert res_kd.stats.extra["shards_visited"].mean() < 0.5 * res_shells.stats.extra["shards_visited"].mean()
    kd.close()


@settings(max_examples=6, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    k=st.sampled_from([1, 3, 10]),
    kind=st.sampled_from(["near", "ball", "data"]),
    per_round=st.sampled_from([1, 2, None]),
)
def test_shell_routing_never_misses_a_neighbour(tree_index, seed, k, kind, per_round):
    index, X, _ = tree_index
    rng = np.random.default_rng(seed)
    if kind == "near":  # queries next to data points, deep in the hierarchy
        Q = X[rng.integers(0, len(X), 20)] * (1 - 1e-7 * rng.uniform(0, 1, (20, 1)))
    elif kind == "ball":
        Q = ball_points(rng, 20, X.shape[1], min_conformal=1e-10)
    else:
        Q = X[rng.integers(0, len(X), 20)]
    res = index.search(Q, k, shards_per_round=per_round)
    _true_ids, true_dist = exact_knn(Q, X, k)
    np.testing.assert_allclose(res.distances, true_dist, rtol=1e-12, atol=0)


def test_killed_actor_is_restarted_from_memory_then_from_files(ray_cluster, tmp_path):
    pts = _family("boundary", 1240, 3, seed=5)
    X, Q = pts[:1200], pts[1200:]
    index = _track(ShardedIndex(3, partition="hash", n_actors=1, random_state=1).build(X), ray_cluster)
    truth = exact_knn(Q, X, 5)[1]
    np.testing.assert_allclose(index.search(Q, 5).distances, truth, rtol=1e-12)
    first_pid = index.actor_pids()[0]
    _kill(index.actors_[0])  # not saved yet: restored from the driver's object-store copy
    res = index.search(Q, 5)
    np.testing.assert_allclose(res.distances, truth, rtol=1e-12)
    assert res.stats.extra["shards_visited"].tolist() == [3] * len(Q)
    assert _track(index, ray_cluster).actor_pids()[0] != first_pid

    # saved: restored from the files. Shard 0's file is damaged, then the actor dies:
    # shards 1 and 2 come back from their files, shard 0 cannot
    index.save(tmp_path / "idx")
    manifest = json.loads((tmp_path / "idx" / "manifest.json").read_text())
    shard0 = tmp_path / "idx" / manifest["shards"][0]["file"]
    shard0_ids = hypann.load(shard0).ids_  # an ordinary index file whose ids are the global ones
    good = shard0.read_bytes()
    shard0.write_bytes(good[: len(good) // 2] + bytes([good[len(good) // 2] ^ 0xFF]) + good[len(good) // 2 + 1 :])
    _kill(index.actors_[0])
    with pytest.raises(ShardUnavailableError, match=r"shard 0 \(Ray actor 0\) could not be searched or restored: .*damaged") as info:
        index.search(Q, 5)
    assert info.value.shard == 0
    _track(index, ray_cluster)
    with pytest.warns(RuntimeWarning, match=r"shard\(s\) \[0\] could not be searched"):
        res = index.search(Q, 5, allow_partial=True)
    assert res.stats.extra["shards_missing"].tolist() == [1] * len(Q)
    assert res.stats.extra["missing_shards"][:, 0].all() and not res.stats.extra["missing_shards"][:, 1:].any()
    rest = np.setdiff1d(np.arange(len(X)), shard0_ids)
    rest_ids, rest_dist = exact_knn(Q, X[rest], 5)
    np.testing.assert_allclose(res.distances, rest_dist, rtol=1e-12)
    np.testing.assert_array_equal(res.indices, rest[rest_ids])
    # the file is repaired: the next search loads shard 0 into the live actor and is complete again
    shard0.write_bytes(good)
    res = index.search(Q, 5)
    np.testing.assert_allclose(res.distances, truth, rtol=1e-12)
    assert not res.stats.extra["shards_missing"].any()
    index.close()


def test_save_load_round_trip_and_damaged_files(tree_index, ray_cluster, tmp_path):
    index, X, Q = tree_index
    folder = tmp_path / "tree"
    index.save(folder)
    names = sorted(os.listdir(folder))
    assert names == ["manifest.json"] + [f"shard-{s:05d}.hypann" for s in range(6)]
    shard2 = hypann.load(folder / "shard-00002.hypann")  # an ordinary index file, global ids
    assert shard2.n_points_ == index.bounds_.sizes[2]
    res2 = shard2.search(Q, 3)
    np.testing.assert_allclose(res2.distances, P.dist(Q[:, None, :], X[res2.indices]), rtol=1e-12)
    loaded = _track(ShardedIndex.load(folder, n_actors=1), ray_cluster)
    a, b = index.search(Q, 7), loaded.search(Q, 7)
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.distances, b.distances)
    np.testing.assert_array_equal(a.stats.extra["shards_visited"], b.stats.extra["shards_visited"])
    loaded.close()
    index.save(folder)  # saving over a sharded index replaces it
    assert sorted(os.listdir(folder)) == names

    manifest_path = folder / "manifest.json"
    good = manifest_path.read_text()
    doc = json.loads(good)
    doc["shards"][1]["norm_max"] += 1.0  # still valid JSON, but not what was written
    manifest_path.write_text(json.dumps(doc))
    with pytest.raises(ValueError, match=r"manifest.json' is damaged: its contents do not match manifest_sha256"):
        ShardedIndex.load(folder)
    manifest_path.write_text(good[: len(good) // 2])
    with pytest.raises(ValueError, match=r"manifest.json' is damaged: not valid JSON"):
        ShardedIndex.load(folder)
    manifest_path.write_text(good)

    shard = folder / "shard-00004.hypann"
    raw = shard.read_bytes()
    shard.write_bytes(raw[:-100])
    with pytest.raises(ValueError, match=r"shard 4: file '.*shard-00004.hypann' is damaged \(sha256"):
        ShardedIndex.load(folder, n_actors=1)
    os.remove(shard)
    with pytest.raises(ValueError, match=r"shard 4: file 'shard-00004.hypann' listed in .* is missing"):
        ShardedIndex.load(folder, n_actors=1)
    with pytest.raises(ValueError, match=r"cannot save a sharded index to .*: it exists and is not an empty folder"):
        index.save(shard.with_name("manifest.json"))


def test_index_settings_in_params_are_not_taken_for_the_algorithms():
    """storage= and verbose= are HyperbolicIndex settings that ShardedIndex passes on; n_jobs is its own."""
    ShardedIndex(2, storage="float32", verbose=False)._check_settings()
    with pytest.raises(ValueError, match=r"bad settings for algorithm 'hkdtree': unknown option\(s\) \['width'\]"):
        ShardedIndex(2, algorithm="hkdtree", width=3)._check_settings()
    with pytest.raises(ValueError, match=r"a ShardedIndex sets its shards' threads with threads_per_actor=, "
                                         r"got n_jobs=2"):
        ShardedIndex(2, n_jobs=2)._check_settings()


def test_a_shard_that_fails_to_build_raises_the_shards_error(ray_cluster):
    """leaf_size=0 passes the driver's checks and fails in the actor's build: the ValueError comes back unwrapped."""
    index = ShardedIndex(2, n_actors=1, leaf_size=0)
    with pytest.raises(ValueError, match=r"^leaf_size must be a positive integer or None, got leaf_size=0$"):
        index.build(ball_points(np.random.default_rng(0), 40, 2))
    assert not hasattr(index, "actors_")  # the actors were stopped


def test_cli_builds_and_searches_a_sharded_index(ray_cluster, tmp_path, capsys):
    pts = _family("clustered", 620, 3, seed=2)
    np.save(tmp_path / "X.npy", pts[:600])
    np.save(tmp_path / "Q.npy", pts[600:])
    assert cli.main(["build", str(tmp_path / "X.npy"), "-o", str(tmp_path / "idx"), "--shards", "1"]) == 0
    assert "ShardedIndex(n_shards=1, partition='kd', algorithm='auto'" in capsys.readouterr().out
    assert cli.main(["search", str(tmp_path / "idx"), str(tmp_path / "Q.npy"), "-k", "3", "-o", str(tmp_path / "out.npz")]) == 0
    out = np.load(tmp_path / "out.npz")
    np.testing.assert_allclose(out["distances"], exact_knn(pts[600:], pts[:600], 3)[1], rtol=1e-12)
    assert "mean shards visited per query: 1.000 of 1" in capsys.readouterr().err


def test_float32_shards_are_checked_as_one_index(ray_cluster, tmp_path, capsys):
    """storage='float32' over shards builds (its routing bounds are those of the rounded points), answers as
    one float32 index, and the driver runs the single index's rounding check over all shards."""
    from hypann.rounding import Float32PrecisionWarning

    rng = np.random.default_rng(4)
    centres = rng.standard_normal((300, 4))
    centres *= np.sqrt(1.0 - 1e-10) / np.linalg.norm(centres, axis=1, keepdims=True)
    X = np.vstack([centres, centres + 1e-12 * rng.standard_normal(centres.shape)])  # pairs float32 merges
    with pytest.warns(Float32PrecisionWarning, match=r"of the 256 points nearest it"):
        index = ShardedIndex(3, n_actors=1, storage="float32").build(X)
    try:
        single = hypann.HyperbolicIndex(storage="float32")
        with pytest.warns(Float32PrecisionWarning):
            single.build(X)
        assert index.float32_rounding_ == single.float32_rounding_
        got, want = index.search(X[::7], 3), single.search(X[::7], 3)
        np.testing.assert_array_equal(got.distances, want.distances)
        assert got.float32_points and want.float32_points  # distances of the rounded points (SearchResult.recall)
    finally:
        index.close()
    calm = ball_points(rng, 400, 4, min_conformal=1e-3)
    with warnings.catch_warnings():
        warnings.simplefilter("error", Float32PrecisionWarning)
        tensor = CountingTensor(calm)
        quiet = ShardedIndex(2, n_actors=1, storage="float32").build(tensor)
    try:
        assert quiet.float32_rounding_.changed == 0
        assert tensor.copies == 1  # the float32 check reads the one copy again
    finally:
        quiet.close()
    plain = ShardedIndex(2, n_actors=1).build(calm)
    try:
        assert not hasattr(plain, "float32_rounding_")
    finally:
        plain.close()
    np.save(tmp_path / "X.npy", calm)
    assert cli.main(["build", str(tmp_path / "X.npy"), "-o", str(tmp_path / "idx"), "--shards", "2",
                     "--storage", "float32"]) == 0
    assert "storage='float32'" in capsys.readouterr().out
    loaded = ShardedIndex.load(tmp_path / "idx", n_actors=1)  # the manifest's bounds match the float32 shards
    try:
        want = hypann.HyperbolicIndex(storage="float32").build(calm).search(calm[:5], 2)
        np.testing.assert_array_equal(loaded.search(calm[:5], 2).distances, want.distances)
    finally:
        loaded.close()
