"""Dataset objects, held-out queries, on-disk cache and the named registry."""

import numpy as np
import pytest

import hypann.datasets
import hypann.datasets.registry as registry
from hypann.datasets.base import (
    FORMAT_VERSION,
    build_dataset,
    cache_path,
    cached_dataset,
    holdout_split,
    read_dataset,
    save_dataset,
)
from hypann.datasets.synthetic import clustered, random_tree_parents
from hypann.eval.ground_truth import exact_knn


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("HYPANN_CACHE", str(tmp_path))
    return tmp_path


@pytest.fixture
def small_synthetic(monkeypatch):
    monkeypatch.setattr(registry, "SYNTHETIC_BASE_SIZE", 1500)


def test_holdout_split_disjoint_and_deterministic():
    train, test = holdout_split(100, 7, seed=3)
    assert train.size == 93 and test.size == 7
    assert np.intersect1d(train, test).size == 0
    np.testing.assert_array_equal(np.sort(np.r_[train, test]), np.arange(100))
    np.testing.assert_array_equal(test, holdout_split(100, 7, seed=3)[1])
    with pytest.raises(ValueError, match="n_queries must be smaller"):
        holdout_split(5, 5)


def test_build_dataset_ground_truth():
    X = clustered(600, 4, seed=0, n_clusters=4)
    ds = build_dataset("toy", X, n_queries=25, k=5, seed=1, metadata={"extra": 1})
    assert ds.train.shape == (575, 4) and ds.test.shape == (25, 4) and ds.k == 5
    np.testing.assert_array_equal(ds.train, X[ds.train_ids])
    np.testing.assert_array_equal(ds.test, X[ds.test_ids])
    ids, dist = exact_knn(ds.test, ds.train, 5)
    np.testing.assert_array_equal(ds.neighbors, ids)
    np.testing.assert_array_equal(ds.distances, dist)
    assert np.all(ds.distances[:, 0] > 0)  # queries were withheld (points are distinct)
    assert ds.metadata["extra"] == 1 and ds.metadata["k"] == 5


def test_save_read_roundtrip(tmp_path):
    ds = build_dataset("toy", clustered(300, 3, seed=2, n_clusters=3), n_queries=10, k=3)
    path = tmp_path / "toy.npz"
    save_dataset(ds, path, key="abc")
    back = read_dataset(path, key="abc")
    for a in ("train", "test", "neighbors", "distances", "train_ids", "test_ids"):
        np.testing.assert_array_equal(getattr(back, a), getattr(ds, a))
    assert back.metadata == ds.metadata and back.name == "toy"
    with pytest.raises(ValueError, match="does not match"):
        read_dataset(path, key="other")
    assert not list(tmp_path.glob("*.tmp"))  # atomic write left no temporary file


def test_cached_dataset_reuses_and_rebuilds_corrupt(cache):
    calls = []

    def build():
        calls.append(1)
        return build_dataset("toy", clustered(200, 3, seed=len(calls), n_clusters=2), n_queries=5, k=2)

    params = {"a": 1}
    first = cached_dataset("toy", params, build)
    second = cached_dataset("toy", params, build)
    assert len(calls) == 1
    np.testing.assert_array_equal(first.train, second.train)

    path = cache_path("toy", params)
    path.write_bytes(b"not an npz file")
    third = cached_dataset("toy", params, build)
    assert len(calls) == 2 and third.train.shape == (195, 3)
    read_dataset(path)  # the corrupt file was replaced by a readable one

    cached_dataset("toy", {"a": 2}, build)  # other params: other file
    assert len(calls) == 3 and len(list(cache.glob("toy-*.npz"))) == 2


def test_cache_key_includes_format_version(cache, monkeypatch):
    p1 = cache_path("toy", {"a": 1})
    monkeypatch.setattr("hypann.datasets.base.FORMAT_VERSION", FORMAT_VERSION + 1)
    assert cache_path("toy", {"a": 1}) != p1


def test_registry_load_synthetic(cache, small_synthetic):
    ds = hypann.datasets.load("synthetic-tree-10d", n_queries=30, k=4, seed=1)
    assert ds.train.shape == (1500, 10) and ds.test.shape == (30, 10) and ds.k == 4
    assert ds.metadata["params"]["generator"] == "hierarchical_tree"
    again = hypann.datasets.load("synthetic-tree-10d", n_queries=30, k=4, seed=1)
    np.testing.assert_array_equal(ds.neighbors, again.neighbors)
    other = hypann.datasets.load("synthetic-tree-10d", n_queries=30, k=4, seed=2, cache=False)
    assert not np.array_equal(ds.train, other.train)
    ds = hypann.datasets.load("synthetic-clustered-100d", n_queries=10, k=3)
    assert ds.train.shape == (1500, 100)


class _FakeHierarchy:
    def __init__(self, parents):
        self._parents = parents

    def spanning_tree_parents(self):
        return self._parents


def test_registry_wordnet_loaders_are_lazy_and_use_wordnet_module(cache, monkeypatch):
    import hypann.datasets.wordnet as wordnet

    parents = random_tree_parents(300, branching=(2, 4), seed=0)
    monkeypatch.setattr(wordnet, "noun_hierarchy", lambda: _FakeHierarchy(parents))
    ds = hypann.datasets.load("wordnet-nouns-100d", n_queries=20, k=3)
    assert ds.train.shape == (280, 100)
    assert ds.metadata["distortion"]["max_hyperbolic_norm"] <= 30.0 + 1e-6

    points = clustered(400, 10, seed=5, n_clusters=3)
    monkeypatch.setattr(wordnet, "load_noun_embedding", lambda dim: (points, ["x"] * 400, {"epochs": 1}))
    ds = hypann.datasets.load("wordnet-nouns-10d", n_queries=20, k=3)
    np.testing.assert_array_equal(ds.test, points[ds.test_ids])
    assert ds.metadata["embedding"] == {"epochs": 1}


def test_unknown_name_and_bad_arguments():
    with pytest.raises(ValueError, match="available: synthetic-tree-10d"):
        hypann.datasets.load("imagenet")
    with pytest.raises(ValueError, match="n_queries must be a positive integer"):
        hypann.datasets.load("synthetic-tree-10d", n_queries=0)
    names = [n for n, _ in hypann.datasets.list_datasets()]
    assert {"synthetic-tree-10d", "synthetic-tree-100d", "wordnet-nouns-10d", "wordnet-nouns-100d"} <= set(names)
