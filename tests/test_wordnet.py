"""WordNet hierarchy: closure, spanning tree, subtrees, shipped data, database reader."""

from __future__ import annotations

import os
from itertools import product

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from hypann.datasets import wordnet
from hypann.datasets.wordnet import Hierarchy, load_noun_embedding, noun_hierarchy, read_hierarchy

HAVE_WORDNET = os.path.isfile(os.path.join(wordnet.WORDNET_DIR, "data.noun"))
needs_wordnet = pytest.mark.skipif(not HAVE_WORDNET, reason="Debian's wordnet-base is not installed")

# Hand-made DAG:            a
#                          / \
#                         b   c
#                        / \ /
#                       d   e        e has two parents (b and c)
#                           |
#                           f
DAG_NAMES = ["a", "b", "c", "d", "e", "f"]
A, B, C, D, E, F = range(6)
DAG_EDGES = [(B, A), (C, A), (D, B), (E, B), (E, C), (F, E)]


def _as_set(pairs):
    return {tuple(p) for p in np.asarray(pairs).tolist()}


def test_closure_of_hand_made_dag():
    h = Hierarchy(DAG_NAMES, np.array(DAG_EDGES))
    expected = {
        (B, A), (C, A),
        (D, B), (D, A),
        (E, B), (E, C), (E, A),
        (F, E), (F, B), (F, C), (F, A),
    }
    closure = h.closure()
    assert _as_set(closure) == expected
    assert len(closure) == len(expected)  # no duplicates
    assert closure.dtype == np.int64 and closure.shape[1] == 2
    assert np.array_equal(closure, np.unique(closure, axis=0))  # sorted by (descendant, ancestor)


def test_spanning_tree_and_roots_of_hand_made_dag():
    h = Hierarchy(DAG_NAMES, np.array(DAG_EDGES))
    assert h.root_ids.tolist() == [A]
    # BFS from a reaches b, c, then d, e from b (b comes before c), then f.
    assert h.spanning_tree_parents().tolist() == [-1, A, A, B, B, E]


def test_subtree_of_hand_made_dag():
    h = Hierarchy(DAG_NAMES, np.array(DAG_EDGES))
    sub = h.subtree("c")
    assert sub.names == ["c", "e", "f"]
    assert _as_set(sub.edges) == {(1, 0), (2, 1)}
    assert sub.root_ids.tolist() == [0]
    # closure of the subtree == full closure restricted to it
    keep = {h.index(s) for s in sub.names}
    full = {(sub.index(h.names[u]), sub.index(h.names[a])) for u, a in _as_set(h.closure()) if u in keep and a in keep}
    assert _as_set(sub.closure()) == full


def test_edges_deduplicated_and_sorted():
    h = Hierarchy(["x", "y", "z"], np.array([[2, 0], [1, 0], [2, 0], [2, 1]]))
    assert h.edges.tolist() == [[1, 0], [2, 0], [2, 1]]
    assert not h.edges.flags.writeable


@given(n=st.integers(1, 30), data=st.data())
def test_closure_matches_reachability(n, data):
    # random DAG: edges only from higher to lower ids
    pairs = data.draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(0, n - 1)), max_size=3 * n))
    edges = np.array([(max(u, v), min(u, v)) for u, v in pairs if u != v], dtype=np.int64).reshape(-1, 2)
    h = Hierarchy([str(i) for i in range(n)], edges)
    reach = np.zeros((n, n), dtype=bool)
    reach[edges[:, 0], edges[:, 1]] = True
    for k, i, j in product(range(n), repeat=3):  # Floyd-Warshall order: k outermost
        if reach[i, k] and reach[k, j]:
            reach[i, j] = True
    assert _as_set(h.closure()) == set(zip(*np.nonzero(reach)))
    parents = h.spanning_tree_parents()
    roots = set(h.root_ids.tolist())
    for v in range(n):
        assert (parents[v] == -1) == (v in roots)
        if parents[v] >= 0:
            assert reach[v, parents[v]] and (v, parents[v]) in _as_set(edges)


@pytest.mark.parametrize(
    "names, edges, match",
    [
        (["a", "b"], np.array([[0, 2]]), r"outside \[0, 2\)"),
        (["a", "b"], np.array([[1, 1]]), "self-loop"),
        (["a", "b"], np.array([0, 1]), r"shape \(n_edges, 2\)"),
        (["a", "b"], np.array([[0.0, 1.0]]), "integers"),
        (["a", "a"], np.array([[0, 1]]), "names must be unique"),
    ],
)
def test_bad_hierarchy(names, edges, match):
    with pytest.raises(ValueError, match=match):
        Hierarchy(names, edges)


def test_unknown_synset_name():
    h = Hierarchy(DAG_NAMES, np.array(DAG_EDGES))
    with pytest.raises(ValueError, match="'zebra.n.01'"):
        h.subtree("zebra.n.01")


# --------------------------------------------------------------------- shipped data


@pytest.fixture
def no_wordnet(monkeypatch, tmp_path):
    """Make any use of the WordNet database fail, as on a machine without wordnet-base."""
    monkeypatch.setattr(wordnet, "WORDNET_DIR", str(tmp_path / "absent"))

    def refuse(*args, **kwargs):
        raise AssertionError("the WordNet database was opened")

    monkeypatch.setattr(wordnet, "_wordnet_reader", refuse)


@pytest.fixture(scope="module")
def shipped():
    return noun_hierarchy()


def test_noun_hierarchy_without_wordnet_base(no_wordnet):
    h = noun_hierarchy()
    assert h.n_nodes == 82115
    assert len(h.edges) == 84427
    assert [h.names[i] for i in h.root_ids] == ["entity.n.01"]
    assert h.names == sorted(h.names)


def test_noun_closure_counts(shipped):
    closure = shipped.closure()
    assert len(closure) == 743241
    # every noun is below entity.n.01
    entity = shipped.index("entity.n.01")
    assert np.count_nonzero(closure[:, 1] == entity) == shipped.n_nodes - 1
    parents = shipped.spanning_tree_parents()
    assert np.count_nonzero(parents == -1) == 1
    assert parents[shipped.index("mammal.n.01")] == shipped.index("vertebrate.n.01")


def test_mammal_subtree_of_shipped_data(shipped):
    m = shipped.subtree("mammal.n.01")
    assert (m.n_nodes, len(m.closure())) == (1182, 6542)
    assert [m.names[i] for i in m.root_ids] == ["mammal.n.01"]


def test_load_noun_embedding_without_wordnet_base(no_wordnet, shipped):
    points, names, meta = load_noun_embedding()
    assert points.shape == (82115, 10) and points.dtype == np.float64
    assert names == shipped.names
    assert np.all(np.linalg.norm(points, axis=1) < 1.0)
    for key in ("epochs", "lr", "negatives", "burn_in", "seed", "wall_time_s", "mean_rank", "map",
                "hypann_version", "format_version"):
        assert key in meta
    assert meta["format_version"] == wordnet.FORMAT_VERSION


def test_load_noun_embedding_bad_dim():
    with pytest.raises(ValueError, match="dim=7"):
        load_noun_embedding(dim=7)


def test_shipped_files_round_trip(shipped, tmp_path):
    wordnet.write_noun_data(shipped, tmp_path)
    again = noun_hierarchy(tmp_path)
    assert again.names == shipped.names and np.array_equal(again.edges, shipped.edges)
    for name in (wordnet.NOUN_NAMES_FILE, wordnet.NOUN_EDGES_FILE):  # byte-reproducible
        assert (tmp_path / name).read_bytes() == (wordnet.DATA_DIR / name).read_bytes()


def test_corrupt_names_file_detected(shipped, tmp_path):
    wordnet.write_noun_data(shipped, tmp_path)
    other = Hierarchy(shipped.names[:-1] + ["zzz.n.99"], shipped.edges)
    import gzip

    with gzip.open(tmp_path / wordnet.NOUN_NAMES_FILE, "wt") as f:
        f.write("\n".join(other.names) + "\n")
    with pytest.raises(ValueError, match="names hash differs"):
        noun_hierarchy(tmp_path)


def test_train_wordnet_nouns_writes_reproducible_file(tmp_path):
    tree = Hierarchy(DAG_NAMES, np.array(DAG_EDGES))
    kw = dict(dim=3, epochs=12, burn_in=2, hierarchy=tree, lr=0.3)
    meta = wordnet.train_wordnet_nouns(tmp_path / "a.npz", **kw)
    pts, meta_read = wordnet._read_embedding(tmp_path / "a.npz")
    assert meta_read == meta
    assert pts.shape == (6, 3) and meta["epochs"] == 12 and 1.0 <= meta["mean_rank"]
    # resumable through a checkpoint, and bit-identical to an uninterrupted run
    wordnet.train_wordnet_nouns(tmp_path / "b.npz", **{**kw, "epochs": 5}, checkpoint=tmp_path / "ck.npz",
                                checkpoint_every=5, evaluate=False)
    wordnet.train_wordnet_nouns(tmp_path / "b.npz", **kw, checkpoint=tmp_path / "ck.npz", evaluate=False)
    pts_b, meta_b = wordnet._read_embedding(tmp_path / "b.npz")
    assert np.array_equal(pts, pts_b) and meta_b["epochs"] == 12
    with pytest.raises(ValueError, match="other settings"):
        wordnet.train_wordnet_nouns(tmp_path / "c.npz", **{**kw, "lr": 0.5}, checkpoint=tmp_path / "ck.npz")


# --------------------------------------------------------------------- database


def test_unknown_pos():
    with pytest.raises(ValueError, match="'a'"):
        read_hierarchy(pos="a")


@pytest.mark.parametrize("root", ["mammal.v.01", "notaword", 17])
def test_malformed_root(root):
    with pytest.raises(ValueError, match="unknown root synset"):
        read_hierarchy("n", root=root)


def test_missing_database(tmp_path):
    with pytest.raises(FileNotFoundError, match="wordnet-base"):
        read_hierarchy("n", wordnet_dir=str(tmp_path))


@pytest.fixture(scope="module")
def database_nouns():
    return read_hierarchy("n")


@needs_wordnet
def test_database_matches_shipped_data(database_nouns, shipped):
    assert database_nouns.names == shipped.names
    assert np.array_equal(database_nouns.edges, shipped.edges)
    assert np.array_equal(database_nouns.closure(), shipped.closure())


@needs_wordnet
def test_unknown_root_in_database():
    with pytest.raises(ValueError, match="'unicorn.n.07'"):
        read_hierarchy("n", root="unicorn.n.07")


@needs_wordnet
def test_database_subtree_and_verbs():
    m = read_hierarchy("n", root="mammal.n.01")
    assert (m.n_nodes, len(m.edges), len(m.closure())) == (1182, 1182, 6542)
    v = read_hierarchy("v")
    assert (v.n_nodes, len(v.edges), len(v.root_ids), len(v.closure())) == (13767, 13239, 559, 35079)


@needs_wordnet
@pytest.mark.slow
def test_nickel_kiela_closure_is_ours_minus_155_pairs(database_nouns):
    theirs = wordnet.read_nickel_kiela_noun_closure()
    ours = database_nouns.closure()
    assert len(theirs) == 743086
    missing = _as_set(ours) - _as_set(theirs)
    assert len(missing) == 155 and _as_set(theirs) <= _as_set(ours)
    names = database_nouns.names
    assert (names.index("alabama.n.01"), names.index("geographical_area.n.01")) in missing
