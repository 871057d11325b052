"""add / remove / user ids on HyperbolicIndex, against brute force on the live set."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypann
from hypann.geometry.poincare import pairwise_dist
from hypann.updates import REBUILD_MIN_CHANGES
from tests.conftest import ball_points

EXACT = [
    dict(algorithm="hkdtree"),
    dict(algorithm="brute"),
    dict(algorithm="recentering", oracle="kdtree"),
]


class LiveModel:
    """The reference: a dict id -> point, searched by brute force."""

    def __init__(self):
        self.points = {}

    def knn_dist(self, Q, k):
        ids = np.array(sorted(self.points))
        X = np.array([self.points[i] for i in ids])
        D = pairwise_dist(Q, X)
        return np.sort(D, axis=1)[:, :k], ids, D


def _check(index, model, Q, k):
    res = index.search(Q, k=k)
    ref, ids, D = model.knn_dist(Q, k)
    np.testing.assert_allclose(res.distances, ref, rtol=1e-10, atol=1e-12)
    live = set(ids.tolist())
    pos = {int(v): t for t, v in enumerate(ids)}
    for row, dist in zip(res.indices, res.distances):
        assert set(row.tolist()) <= live  # removed ids never come back
        assert len(set(row.tolist())) == k
    # each returned id has the reported distance
    got = np.array([[D[q, pos[int(i)]] for i in row] for q, row in enumerate(res.indices)])
    np.testing.assert_allclose(got, res.distances, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("settings_", EXACT, ids=lambda s: "-".join(s.values()))
@settings(max_examples=15)
@given(seed=st.integers(0, 2**31), steps=st.lists(st.sampled_from(["add", "remove", "search"]), min_size=3, max_size=12))
def test_interleaved_add_remove_search_equals_brute_force(settings_, seed, steps):
    rng = np.random.default_rng(seed)
    X = ball_points(rng, 60, 3, min_conformal=1e-9)
    index = hypann.HyperbolicIndex(**settings_).build(X)  # ids 0..59
    model = LiveModel()
    index.remove(np.arange(0))  # removing nothing is a no-op
    for i, x in enumerate(X):
        model.points[i] = x
    next_id = 10_000
    Q = ball_points(rng, 6, 3)
    for step in steps:
        if step == "add":
            m = int(rng.integers(1, 30))
            Y = ball_points(rng, m, 3, min_conformal=1e-9)
            new = np.arange(next_id, next_id + m) if rng.random() < 0.5 else None
            before = set(index.ids_.tolist())
            index.add(Y, ids=new)
            added = sorted(set(index.ids_.tolist()) - before)
            assert len(added) == m
            if new is not None:
                assert added == new.tolist()
            for i, y in zip(added, Y):
                model.points[i] = y
            next_id += m
        elif step == "remove" and len(model.points) > 12:
            gone = rng.choice(sorted(model.points), int(rng.integers(1, 8)), replace=False)
            index.remove(gone)
            for i in gone:
                del model.points[int(i)]
        assert sorted(index.ids_.tolist()) == sorted(model.points)
        assert index.n_points_ == len(model.points)
        _check(index, model, Q, min(5, len(model.points)))
    # range search sees the same live set
    r = 1.5
    rng_res = index.search_radius(Q, r)
    _, ids_sorted, D = model.knn_dist(Q, 1)
    for q in range(len(Q)):
        expect = set(ids_sorted[D[q] <= r].tolist())
        assert set(rng_res[q][0].tolist()) == expect


def test_user_ids_survive_save_and_load(tmp_path):
    rng = np.random.default_rng(1)
    X = ball_points(rng, 100, 4)
    index = hypann.HyperbolicIndex().build(X)
    index.add(ball_points(rng, 10, 4), ids=np.arange(500, 510))
    index.remove([3, 501])
    before = index.search(X[:5], k=4)
    index.save(tmp_path / "i.hypann")
    loaded = hypann.load(tmp_path / "i.hypann")
    after = loaded.search(X[:5], k=4)
    np.testing.assert_array_equal(before.indices, after.indices)
    np.testing.assert_allclose(before.distances, after.distances, rtol=1e-12)
    assert 3 not in loaded.ids_ and 501 not in loaded.ids_ and 509 in loaded.ids_


def test_compaction_keeps_answers_and_ids():
    rng = np.random.default_rng(2)
    X = ball_points(rng, 200, 3)
    index = hypann.HyperbolicIndex().build(X)
    index.add(ball_points(rng, REBUILD_MIN_CHANGES + 100, 3))  # over the threshold: rebuilt
    assert index.live_.n_changes == 0 and index.n_points_ == 200 + REBUILD_MIN_CHANGES + 100
    index.remove(np.arange(0, 200, 2))
    res = index.search(X[1:10:2], k=1)
    np.testing.assert_array_equal(res.indices[:, 0], np.arange(1, 10, 2))


@pytest.mark.parametrize(
    "call, err, match",
    [
        (lambda ix: ix.remove([99999]), ValueError, r"no live point with id\(s\) \[99999\]"),
        (lambda ix: ix.remove([1.5]), TypeError, r"ids must be integers"),
        (lambda ix: ix.add(np.full((1, 3), 0.1), ids=[0]), ValueError, r"ids already in the index: \[0\]"),
        (lambda ix: ix.add(np.full((2, 3), 0.1), ids=[7000, 7000]), ValueError, r"ids must be distinct"),
        (lambda ix: ix.add(np.full((1, 3), 0.1), ids=[-4]), ValueError, r"ids must be >= 0"),
        (lambda ix: ix.add(np.full((2, 3), 0.1), ids=[70000]), ValueError, r"expected 2 ids, got 1"),
        (lambda ix: ix.add(np.full((1, 2), 0.1)), ValueError, r"has 2 dimensions"),
        (lambda ix: ix.add(np.full((1, 3), 0.9)), ValueError, r"not strictly inside the Poincare ball"),
        (lambda ix: ix.remove(np.arange(20)), ValueError, r"cannot remove all 20 points"),
    ],
)
def test_add_remove_errors(call, err, match):
    index = hypann.HyperbolicIndex().build(ball_points(np.random.default_rng(0), 20, 3))
    with pytest.raises(err, match=match):
        call(index)


def test_removed_point_is_not_returned_by_any_algorithm_even_approximate():
    rng = np.random.default_rng(4)
    X = ball_points(rng, 300, 3)
    for settings_ in (dict(algorithm="vamana"), dict(algorithm="shells", oracle="lsh")):
        index = hypann.HyperbolicIndex(**settings_, random_state=0).build(X)
        index.remove([0, 1, 2])
        res = index.search(X[:3], k=5)
        assert not np.isin(res.indices, [0, 1, 2]).any()
        assert np.all(res.indices >= 0)


def test_row_number_ids_are_not_kept_in_memory_nor_written(tmp_path):
    """Plain row-number ids hold no array (in memory or in the file) until other ids appear."""
    from hypann.io import read_raw, write_raw

    rng = np.random.default_rng(11)
    X = ball_points(rng, 300, 3)
    index = hypann.HyperbolicIndex(algorithm="hkdtree").build(X)
    assert index.live_._labels is None and index.live_.labels_nbytes == 0
    np.testing.assert_array_equal(index.ids_, np.arange(300))
    index.add(ball_points(rng, 5, 3))  # default ids: the next row numbers, still no array
    assert index.live_._labels is None
    index.remove([2, 301])
    assert index.live_._labels is None
    np.testing.assert_array_equal(index.ids_, np.setdiff1d(np.arange(305), [2, 301]))
    assert index.search(X[[0, 1, 3]], k=1).indices[:, 0].tolist() == [0, 1, 3]
    assert 2 not in index.search(X[2:3], k=5).indices
    with pytest.raises(ValueError, match=r"no live point with id\(s\) \[2, 305, -1\]"):
        index.remove([2, 305, -1])
    with pytest.raises(ValueError, match=r"ids already in the index: \[304\]"):
        index.add(np.full((1, 3), 0.1), ids=[304])
    index.add(np.full((1, 3), 0.1), ids=[1000])  # an id other than the next row: a real array
    assert index.live_._labels is not None and index.live_.labels_nbytes == 8 * 306
    assert index.search(np.full((1, 3), 0.1), k=1).indices[0, 0] == 1000

    plain = hypann.HyperbolicIndex(algorithm="hkdtree").build(X)
    plain.save(tmp_path / "plain.hypann")
    header, arrays = read_raw(tmp_path / "plain.hypann")
    assert "labels" not in arrays
    # a file that stores the row numbers as explicit ids (as files did before) still loads, same answers
    write_raw(tmp_path / "explicit.hypann", header, {**arrays, "labels": np.arange(300, dtype=np.int64)})
    for path in ("plain.hypann", "explicit.hypann"):
        for mmap in (False, True):
            back = hypann.load(tmp_path / path, mmap=mmap)
            got = back.search(X[:20], k=3)
            np.testing.assert_array_equal(got.indices, plain.search(X[:20], k=3).indices)
            np.testing.assert_array_equal(back.ids_, np.arange(300))
