"""Progress bars: ``hypann._progress`` (one bar per thread, nested tasks in its postfix) and where hypann uses it."""

from __future__ import annotations

import numpy as np
import pytest

import hypann
from hypann import _progress as progress
from hypann import index as index_module
from tests.conftest import FakeTerminal

M_QUERIES = 25_000


def _data():
    rng = np.random.default_rng(11)
    X = rng.uniform(-0.6, 0.6, (300, 2))
    Q = rng.uniform(-0.6, 0.6, (M_QUERIES, 2))
    return X, Q


def _count_pieces(monkeypatch):
    """Record the batch size of every ``_search_rows_in_order`` call (the pieces the search runs in)."""
    sizes = []
    original = hypann.HyperbolicIndex._search_rows_in_order

    def spy(self, queries, *args, **kwargs):
        sizes.append(queries.shape[0])
        return original(self, queries, *args, **kwargs)

    monkeypatch.setattr(hypann.HyperbolicIndex, "_search_rows_in_order", spy)
    return sizes


def test_verbose_chunks_give_identical_results(monkeypatch):
    X, Q = _data()
    quiet = hypann.HyperbolicIndex(algorithm="hkdtree", verbose=False).build(X)
    loud = hypann.HyperbolicIndex(algorithm="hkdtree", verbose=True).build(X)
    sizes = _count_pieces(monkeypatch)
    a = quiet.search(Q, k=3)
    assert sizes == [M_QUERIES]
    sizes.clear()
    b = loud.search(Q, k=3)
    assert sizes == [index_module.PROGRESS_CHUNK, index_module.PROGRESS_CHUNK, M_QUERIES - 2 * index_module.PROGRESS_CHUNK]
    np.testing.assert_array_equal(a.indices, b.indices)
    np.testing.assert_array_equal(a.distances, b.distances)
    for name, arr in a.stats.as_dict().items():
        np.testing.assert_array_equal(arr, b.stats.as_dict()[name], err_msg=name)


@pytest.mark.parametrize(("algorithm", "settings", "budget"), [
    ("vamana", {"R": 8, "L": 10}, None),  # per-query seeds from the row number: never chunked
    ("hkdtree", {}, 50),  # a budget: one piece
])
def test_row_dependent_searches_run_in_one_piece(monkeypatch, algorithm, settings, budget):
    X, Q = _data()
    index = hypann.HyperbolicIndex(algorithm=algorithm, random_state=0, **settings).build(X)
    sizes = _count_pieces(monkeypatch)
    index.search(Q, k=2, budget=budget)
    assert sizes == [M_QUERIES]


def test_verbose_is_a_process_setting(tmp_path):
    X, _ = _data()
    index = hypann.HyperbolicIndex(algorithm="hkdtree", verbose=False).build(X)
    assert index.get_params()["verbose"] is False
    index.save(tmp_path / "i.hypann")
    header = hypann.io.read_metadata(tmp_path / "i.hypann")
    assert "verbose" not in header["params"]
    loaded = hypann.HyperbolicIndex.load(tmp_path / "i.hypann", verbose=False)
    assert loaded.verbose is False
    assert hypann.HyperbolicIndex.load(tmp_path / "i.hypann").verbose is True
    np.testing.assert_array_equal(loaded.search(X[:5], k=2).indices, index.search(X[:5], k=2).indices)


def test_bar_is_shown_on_a_terminal_only_when_verbose(monkeypatch):
    X, Q = _data()
    term = FakeTerminal()
    monkeypatch.setattr("sys.stderr", term)
    hypann.HyperbolicIndex(algorithm="hkdtree", verbose=True).build(X).search(Q, k=1)
    assert f"{M_QUERIES}/{M_QUERIES}" in term.text
    term.text = ""
    hypann.HyperbolicIndex(algorithm="hkdtree", verbose=False).build(X).search(Q, k=1)
    hypann.HyperbolicIndex(algorithm="hkdtree", verbose=True).build(X).search(Q[:100], k=1)  # small batch
    assert term.text == ""


# ---------------------------------------------------------------- hypann._progress
def test_advance_without_a_task_does_nothing(monkeypatch):
    term = FakeTerminal()
    monkeypatch.setattr("sys.stderr", term)
    progress.advance(5, stage="nothing open")
    assert term.text == ""


def test_nested_tasks_draw_one_bar_and_report_in_its_postfix(monkeypatch):
    term = FakeTerminal()
    monkeypatch.setattr("sys.stderr", term)
    monkeypatch.setattr(progress, "_REDRAW_S", 0.0)
    created = []
    import tqdm.auto

    real = tqdm.auto.tqdm
    monkeypatch.setattr(tqdm.auto, "tqdm", lambda *a, **kw: created.append(kw["desc"]) or real(*a, **kw))
    with progress.task("outer", total=2, unit="part") as outer:
        with progress.task("inner", total=3) as inner:
            progress.advance(stage="step one")
            progress.advance(2)
        assert inner.done == 3 and outer.done == 0
        progress.advance()
    assert created == ["outer"]
    assert "inner 1/3 step one" in term.text and "inner 3/3" in term.text
    assert "1/2" in term.text


def test_disabled_or_short_tasks_draw_nothing(monkeypatch):
    term = FakeTerminal()
    monkeypatch.setattr("sys.stderr", term)
    with progress.task("off", total=3, enabled=False) as off:
        with progress.task("inner"):
            progress.advance(stage="dropped")
        progress.advance(3)
    assert off.done == 3
    with progress.task("short", total=3, delay=60.0):
        progress.advance(3)
    assert term.text == ""


def test_write_goes_above_a_drawn_bar_or_straight_to_stderr(monkeypatch):
    term = FakeTerminal()
    monkeypatch.setattr("sys.stderr", term)
    progress.write("no bar")
    assert term.text == "no bar\n"
    with progress.task("work", total=1):
        progress.write("a milestone")
        progress.advance()
    assert "a milestone\n" in term.text and "1/1" in term.text


def test_graph_build_reports_its_rounds(monkeypatch):
    term = FakeTerminal()
    monkeypatch.setattr("sys.stderr", term)
    monkeypatch.setattr(index_module, "BUILD_PROGRESS_DELAY", 0.0)
    monkeypatch.setattr(progress, "_REDRAW_S", 0.0)
    X = np.random.default_rng(3).uniform(-0.5, 0.5, (2000, 4))
    hypann.HyperbolicIndex(algorithm="graph", random_state=0).build(X)
    assert "build graph" in term.text and "nn-descent round 1" in term.text and "calibrating ef" in term.text
    term.text = ""
    hypann.HyperbolicIndex(algorithm="graph", random_state=0, verbose=False).build(X)
    assert term.text == ""


def test_dataset_preparation_shows_its_stages(monkeypatch):
    from hypann.datasets import registry

    term = FakeTerminal()
    monkeypatch.setattr("sys.stderr", term)
    monkeypatch.setattr(registry, "PREPARE_PROGRESS_DELAY", 0.0)
    monkeypatch.setattr(progress, "_REDRAW_S", 0.0)
    ds = registry.load("synthetic-tree-10d", n_queries=3, k=1, cache=False)
    assert ds.test.shape == (3, 10)
    assert "prepare synthetic-tree-10d" in term.text and "ground truth" in term.text
    term.text = ""
    registry.load("synthetic-tree-10d", n_queries=3, k=1, cache=False, verbose=False)
    assert term.text == ""


def test_reproduce_milestones_advance_the_bar(monkeypatch):
    from hypann.apps import reproduce

    term = FakeTerminal()
    monkeypatch.setattr("sys.stderr", term)
    monkeypatch.setattr(progress, "_REDRAW_S", 0.0)
    lines = []

    def fake(key, quick, seed, say):
        say(f"[{key}] built")
        say(f"[{key}] done")
        return {"key": key}

    monkeypatch.setattr(reproduce, "_run_dataset", fake)
    with progress.task("reproduce", total=1, unit="data set"):
        assert reproduce.run_dataset("10d", progress=lines.append) == {"key": "10d"}
    assert lines == ["[10d] built", "[10d] done"]
    assert "[10d] 2/? [10d] done" in term.text
