"""``verbose``: a progress bar over chunks of a large search batch, with answers identical to one piece."""

from __future__ import annotations

import numpy as np
import pytest

import hypann
from hypann import index as index_module

M_QUERIES = 25_000


def _data():
    rng = np.random.default_rng(11)
    X = rng.uniform(-0.6, 0.6, (300, 2))
    Q = rng.uniform(-0.6, 0.6, (M_QUERIES, 2))
    return X, Q


def _count_pieces(monkeypatch):
    """Record the batch size of every ``_search_rows`` call."""
    sizes = []
    original = hypann.HyperbolicIndex._search_rows

    def spy(self, queries, *args, **kwargs):
        sizes.append(queries.shape[0])
        return original(self, queries, *args, **kwargs)

    monkeypatch.setattr(hypann.HyperbolicIndex, "_search_rows", spy)
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


class _Terminal:
    """A stderr stand-in that says it is a terminal (tqdm's ``disable=None`` then shows its bar)."""

    def __init__(self):
        self.text = ""

    def write(self, s):
        self.text += s

    def flush(self):
        pass

    def isatty(self):
        return True


def test_bar_is_shown_on_a_terminal_only_when_verbose(monkeypatch):
    X, Q = _data()
    term = _Terminal()
    monkeypatch.setattr("sys.stderr", term)
    hypann.HyperbolicIndex(algorithm="hkdtree", verbose=True).build(X).search(Q, k=1)
    assert f"{M_QUERIES}/{M_QUERIES}" in term.text
    term.text = ""
    hypann.HyperbolicIndex(algorithm="hkdtree", verbose=False).build(X).search(Q, k=1)
    hypann.HyperbolicIndex(algorithm="hkdtree", verbose=True).build(X).search(Q[:100], k=1)  # small batch
    assert term.text == ""
