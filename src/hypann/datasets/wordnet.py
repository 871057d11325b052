"""WordNet hypernym hierarchies, their transitive closure, and the shipped noun data.

The noun (or verb) hierarchy of WordNet 3.0 is read from a folder of WordNet
database files (Debian's ``wordnet-base`` installs them in
``/usr/share/wordnet``) with NLTK's ``WordNetCorpusReader``; nothing is
downloaded. A synset's parents are its hypernyms and its instance hypernyms,
as in Nickel & Kiela's ``wordnet/transitive_closure.py`` [1]_.

A :class:`Hierarchy` holds the synset names and the *direct* (child, parent)
edges; :meth:`Hierarchy.closure` derives the (descendant, ancestor) pairs of
the transitive closure. For the nouns this gives 82,115 synsets, 84,427 direct
edges and 743,241 closure pairs. Nickel & Kiela's script reports 743,086
pairs: it follows only ``hypernyms()`` upward from a synset and adds the
``instance_hypernyms()`` of instance synsets only, so the 155 pairs that go
through one of the 11 *instance* synsets that also have ordinary hyponyms
(e.g. ``alabama.n.01`` -hypernym-> ``south.n.01`` -instance hypernym->
``geographical_area.n.01``) are missing there; their set is therefore not
transitively closed. :func:`read_nickel_kiela_noun_closure`
reproduces their 743,086 pairs exactly for comparison.

The package ships the noun names and direct edges (0.7 MB, compressed), so
:func:`noun_hierarchy` works without ``wordnet-base``, together with a trained
10-dimensional Poincare embedding (:func:`load_noun_embedding`, reproduced by
:func:`train_wordnet_nouns`). WordNet's licence is in ``data/WORDNET_LICENSE``.

References
----------
.. [1] M. Nickel and D. Kiela, "Poincare embeddings for learning hierarchical
   representations", NeurIPS 2017; https://github.com/facebookresearch/poincare-embeddings
.. [2] Princeton University, "WordNet 3.0", 2006.
"""

from __future__ import annotations

import contextlib
import functools
import gzip
import hashlib
import io
import logging
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numba as nb
import numpy as np

from hypann._files import atomic_write
from hypann._validation import check_choice, check_positive_int

__all__ = [
    "Hierarchy",
    "read_hierarchy",
    "read_nickel_kiela_noun_closure",
    "noun_hierarchy",
    "write_noun_data",
    "load_noun_embedding",
    "train_wordnet_nouns",
    "WORDNET_DIR",
]

logger = logging.getLogger(__name__)

#: Where Debian's ``wordnet-base`` installs the WordNet 3.0 database files.
WORDNET_DIR = "/usr/share/wordnet"

#: Parts of speech with a hypernym hierarchy in WordNet.
POS = ("n", "v")

DATA_DIR = Path(__file__).resolve().parent / "data"
NOUN_NAMES_FILE = "wordnet_nouns_names.txt.gz"
NOUN_EDGES_FILE = "wordnet_nouns_edges.npz"
NOUN_EMBEDDING_FILES = {10: "wordnet_nouns_poincare10d.npz"}

#: Version of the shipped data files' layout (bump when the fields change).
FORMAT_VERSION = 1
# epochs of the shipped 10-D embedding (``train_wordnet_nouns`` default reproduces it)
SHIPPED_EPOCHS = 1627

# Lexicographer file names of WordNet 3.0 (lexnames(5WN)). Debian's
# wordnet-base does not ship the ``lexnames`` file that NLTK's reader opens, so
# the reader is given this table instead. Only ``Synset.lexname()`` uses it.
_LEXNAMES = (
    "adj.all adj.pert adv.all noun.Tops noun.act noun.animal noun.artifact "
    "noun.attribute noun.body noun.cognition noun.communication noun.event "
    "noun.feeling noun.food noun.group noun.location noun.motive noun.object "
    "noun.person noun.phenomenon noun.plant noun.possession noun.process "
    "noun.quantity noun.relation noun.shape noun.state noun.substance noun.time "
    "verb.body verb.change verb.cognition verb.communication verb.competition "
    "verb.consumption verb.contact verb.creation verb.emotion verb.motion "
    "verb.perception verb.social verb.stative verb.weather adj.ppl"
).split()
_LEXNAME_CATEGORY = {"adj": 3, "adv": 4, "noun": 1, "verb": 2}

# Files the reader needs for the hypernym hierarchies.
_REQUIRED_FILES = ("data.noun", "data.verb", "index.noun", "index.verb", "data.adj")


# --------------------------------------------------------------------------
# closure and spanning-tree kernels
# --------------------------------------------------------------------------


@nb.njit(cache=True)
def _closure_kernel(n, indptr, parents):
    """(descendant, ancestor) pairs by a graph search upward from every node.

    A search per node, with a stamp array instead of a visited set, costs
    about (closure size) x (mean number of parents); it needs no topological
    order, so a cycle in the data cannot make it loop (a node is never its own
    ancestor in the output).
    """
    stamp = np.full(n, -1, np.int64)
    stack = np.empty(max(n, 1), np.int64)
    cap = max(16, 4 * indptr[n])
    out = np.empty((cap, 2), np.int64)
    m = 0
    for u in range(n):
        stamp[u] = u
        stack[0] = u
        top = 1
        while top > 0:
            top -= 1
            a = stack[top]
            if a != u:  # u itself only seeds the walk
                if m == cap:
                    cap *= 2
                    grown = np.empty((cap, 2), np.int64)
                    grown[:m] = out[:m]
                    out = grown
                out[m, 0] = u
                out[m, 1] = a
                m += 1
            for k in range(indptr[a], indptr[a + 1]):
                p = parents[k]
                if stamp[p] != u:
                    stamp[p] = u
                    stack[top] = p
                    top += 1
    return out[:m]


@nb.njit(cache=True)
def _bfs_parents(n, indptr, children, sources):
    """Breadth-first spanning forest: parent of each node, -1 for sources."""
    parent = np.full(n, -2, np.int64)
    queue = np.empty(max(n, 1), np.int64)
    head = 0
    tail = 0
    for s in sources:
        if parent[s] == -2:
            parent[s] = -1
            queue[tail] = s
            tail += 1
    while head < tail:
        a = queue[head]
        head += 1
        for k in range(indptr[a], indptr[a + 1]):
            c = children[k]
            if parent[c] == -2:
                parent[c] = a
                queue[tail] = c
                tail += 1
    return parent


def _csr(n, rows, cols):
    """CSR arrays (indptr, cols sorted within each row) for pairs (row, col)."""
    order = np.lexsort((cols, rows))
    indptr = np.zeros(n + 1, dtype=np.int64)
    np.cumsum(np.bincount(rows, minlength=n), out=indptr[1:])
    return indptr, np.ascontiguousarray(cols[order], dtype=np.int64)


# --------------------------------------------------------------------------
# Hierarchy
# --------------------------------------------------------------------------


@dataclass(frozen=True, eq=False)
class Hierarchy:
    """A hypernym hierarchy: synset names and direct (child, parent) edges.

    Parameters
    ----------
    names : list of str
        Synset names (``"mammal.n.01"``); node ``i`` is ``names[i]``.
    edges : ndarray of shape (n_edges, 2), int64
        Direct hypernym edges ``(child, parent)``, unique, sorted.

    Notes
    -----
    WordNet's hypernym graphs are DAGs: a synset can have several parents
    (e.g. an instance hypernym and a hypernym). :meth:`closure` would also
    terminate on a cycle (a node is never listed as its own ancestor);
    :meth:`spanning_tree_parents` raises then. Both are computed once and
    cached.
    """

    names: list
    edges: np.ndarray
    _cache: dict = field(default_factory=dict, init=False, repr=False, compare=False)

    def __post_init__(self):
        names = list(self.names)
        edges = np.asarray(self.edges)
        if edges.size == 0:
            edges = edges.reshape(0, 2)
        if edges.ndim != 2 or edges.shape[1] != 2:
            raise ValueError(f"edges must have shape (n_edges, 2), got {edges.shape}")
        if edges.dtype.kind not in "iu":
            raise ValueError(f"edges must be integers, got dtype={edges.dtype}")
        edges = edges.astype(np.int64)
        n = len(names)
        if len(set(names)) != n:
            raise ValueError(f"names must be unique, got {n - len(set(names))} duplicate(s)")
        if edges.size and (edges.min() < 0 or edges.max() >= n):
            raise ValueError(f"edges refer to node ids outside [0, {n}): min {edges.min()}, max {edges.max()}")
        if np.any(edges[:, 0] == edges[:, 1]):
            raise ValueError("edges contain a self-loop (child == parent)")
        edges = np.unique(edges, axis=0)  # sorted by (child, parent), deduplicated
        edges.setflags(write=False)
        object.__setattr__(self, "names", names)
        object.__setattr__(self, "edges", edges)

    @property
    def n_nodes(self) -> int:
        """Number of synsets."""
        return len(self.names)

    @property
    def root_ids(self) -> np.ndarray:
        """Ids of the nodes without a parent (``entity.n.01`` for the nouns), ascending."""
        has_parent = np.zeros(self.n_nodes, dtype=bool)
        has_parent[self.edges[:, 0]] = True
        return np.flatnonzero(~has_parent).astype(np.int64)

    def index(self, name: str) -> int:
        """Node id of the synset ``name``; ``ValueError`` if absent."""
        lookup = self._cache.get("index")
        if lookup is None:
            lookup = {s: i for i, s in enumerate(self.names)}
            self._cache["index"] = lookup
        try:
            return lookup[name]
        except KeyError:
            raise ValueError(f"unknown synset {name!r}: not a node of this hierarchy") from None

    def closure(self) -> np.ndarray:
        """Transitive closure as (descendant, ancestor) pairs.

        Returns
        -------
        ndarray of shape (n_pairs, 2), int64
            Every pair ``(u, a)`` such that ``a`` is reachable from ``u`` by
            one or more child -> parent edges, sorted by ``(u, a)``; read-only.
        """
        out = self._cache.get("closure")
        if out is None:
            n = self.n_nodes
            indptr, parents = _csr(n, self.edges[:, 0], self.edges[:, 1])
            pairs = _closure_kernel(n, indptr, parents)
            out = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))]
            out.setflags(write=False)
            self._cache["closure"] = out
        return out

    def spanning_tree_parents(self) -> np.ndarray:
        """Parent of each node in a breadth-first spanning tree from the roots.

        The search starts from all :attr:`root_ids` in ascending order and
        visits children in ascending id order, so the result is deterministic:
        each node's parent is the parent through which breadth-first search
        first reaches it (one with the fewest edges to a root).

        Returns
        -------
        ndarray of shape (n_nodes,), int64
            ``-1`` for roots.
        """
        out = self._cache.get("tree")
        if out is None:
            n = self.n_nodes
            indptr, children = _csr(n, self.edges[:, 1], self.edges[:, 0])
            out = _bfs_parents(n, indptr, children, self.root_ids)
            if np.any(out == -2):  # only possible if the graph has a cycle
                bad = self.names[int(np.flatnonzero(out == -2)[0])]
                raise ValueError(f"hierarchy has nodes unreachable from a root (a cycle?), e.g. {bad!r}")
            out.setflags(write=False)
            self._cache["tree"] = out
        return out

    def subtree(self, root: str) -> Hierarchy:
        """The hierarchy below ``root``: ``root``, all its descendants, their edges.

        Node ids are renumbered in the order of :attr:`names` (kept sorted).
        Because the node set is closed under descendants, the closure of the
        subtree equals the full closure restricted to it.
        """
        r = self.index(root)
        n = self.n_nodes
        indptr, children = _csr(n, self.edges[:, 1], self.edges[:, 0])
        reached = _bfs_parents(n, indptr, children, np.array([r], dtype=np.int64)) != -2
        keep = np.flatnonzero(reached)
        new_id = np.full(n, -1, dtype=np.int64)
        new_id[keep] = np.arange(keep.size)
        inside = reached[self.edges[:, 0]] & reached[self.edges[:, 1]]
        edges = new_id[self.edges[inside]]
        return Hierarchy([self.names[i] for i in keep], edges)

    def __repr__(self):
        return (
            f"Hierarchy(n_nodes={self.n_nodes}, n_edges={len(self.edges)}, "
            f"roots={[self.names[i] for i in self.root_ids[:3]]}{'...' if len(self.root_ids) > 3 else ''})"
        )


# --------------------------------------------------------------------------
# reading the WordNet database
# --------------------------------------------------------------------------


def _reader_class():
    from nltk.corpus.reader.wordnet import WordNetCorpusReader

    class _LocalWordNetReader(WordNetCorpusReader):
        """NLTK's reader for a plain folder of WordNet 3.0 database files.

        Two additions make it work offline on Debian's ``wordnet-base``: the
        missing ``lexnames`` file is served from :data:`_LEXNAMES`, and the
        mapping to NLTK's own downloaded WordNet (used only by the
        multilingual functions) is skipped instead of looked up.
        """

        def open(self, file):
            if file == "lexnames":
                lines = (
                    f"{i:02d}\t{name}\t{_LEXNAME_CATEGORY[name.split('.')[0]]}\n"
                    for i, name in enumerate(_LEXNAMES)
                )
                return io.StringIO("".join(lines))
            return super().open(file)

        def map_wn(self, version="wordnet"):
            return None

    return _LocalWordNetReader


@contextlib.contextmanager
def _wordnet_reader(wordnet_dir):
    """Open the WordNet database in ``wordnet_dir`` (read everything inside the block).

    Recent NLTK versions only open files under their data path, so the folder
    is added to ``nltk.data.path`` for the duration of the block.
    """
    folder = Path(wordnet_dir)
    missing = [f for f in _REQUIRED_FILES if not (folder / f).is_file()]
    if missing:
        raise FileNotFoundError(
            f"no WordNet 3.0 database in wordnet_dir={str(wordnet_dir)!r} (missing {missing}); "
            "install Debian's wordnet-base (apt-get install wordnet-base) or use "
            "hypann.datasets.wordnet.noun_hierarchy(), which reads the data shipped with hypann"
        )
    import nltk.data

    entry = str(folder.resolve())
    added = entry not in nltk.data.path
    if added:
        nltk.data.path.append(entry)
    try:
        with warnings.catch_warnings():
            # "The multilingual functions are not available with this Wordnet version"
            warnings.simplefilter("ignore", UserWarning)
            reader = _reader_class()(entry, None)
        yield reader
    finally:
        if added:
            nltk.data.path.remove(entry)


def read_hierarchy(pos: str = "n", root: str | None = None, wordnet_dir: str = WORDNET_DIR) -> Hierarchy:
    """Read the hypernym hierarchy of WordNet from its database files.

    Parameters
    ----------
    pos : {"n", "v"}
        Nouns or verbs (adjectives and adverbs have no hypernyms). The
        database is read once per process and cached.
    root : str, optional
        Keep only this synset and its descendants, e.g. ``"mammal.n.01"``.
    wordnet_dir : str
        Folder with the WordNet 3.0 database files (``data.noun``, ...).

    Returns
    -------
    Hierarchy
        Names sorted alphabetically; edges ``(child, parent)`` for every
        hypernym and instance hypernym.

    Raises
    ------
    ValueError
        Unknown ``pos`` or ``root``.
    FileNotFoundError
        ``wordnet_dir`` does not hold the database.

    Examples
    --------
    >>> h = read_hierarchy("n", root="mammal.n.01")  # doctest: +SKIP
    >>> h.n_nodes, len(h.closure())                   # doctest: +SKIP
    (1182, 6542)
    """
    check_choice(pos, "pos", POS)
    if root is not None:
        if not isinstance(root, str) or root.count(".") < 2 or root.rsplit(".", 2)[1] != pos:
            raise ValueError(
                f"unknown root synset {root!r} for pos={pos!r}: expected a synset name "
                f"like 'mammal.n.01' (word.{pos}.NN)"
            )
    names, edges = _read_database(pos, str(Path(wordnet_dir).resolve()))
    hierarchy = Hierarchy(list(names), edges)
    if root is not None:
        try:
            hierarchy.index(root)
        except ValueError:
            raise ValueError(f"unknown root synset {root!r}: not a synset of pos={pos!r} in {wordnet_dir}") from None
        hierarchy = hierarchy.subtree(root)
    return hierarchy


@functools.lru_cache(maxsize=4)
def _read_database(pos, wordnet_dir):
    """Sorted synset names and (child, parent) edges of one part of speech (cached per process)."""
    t0 = time.perf_counter()
    with _wordnet_reader(wordnet_dir) as reader:
        synsets = list(reader.all_synsets(pos))
        names = sorted(s.name() for s in synsets)
        ids = {name: i for i, name in enumerate(names)}
        pairs = [
            (ids[s.name()], ids[h.name()])
            for s in synsets
            for h in s.hypernyms() + s.instance_hypernyms()
        ]
    edges = np.array(pairs, dtype=np.int64).reshape(-1, 2)
    edges.setflags(write=False)
    logger.info(
        "read WordNet %s hierarchy: %d synsets, %d edges in %.1f s",
        pos, len(names), len(edges), time.perf_counter() - t0,
    )
    return tuple(names), edges


def read_nickel_kiela_noun_closure(wordnet_dir: str = WORDNET_DIR) -> np.ndarray:
    """The noun closure exactly as Nickel & Kiela's ``transitive_closure.py`` builds it.

    For every noun synset, its ``hypernyms()`` closure; for every instance
    synset, its ``instance_hypernyms()`` closure and their ``hypernyms()``
    closures. This gives 743,086 pairs, 155 fewer than
    ``read_hierarchy("n").closure()`` (see the module notes); provided to
    compare with published results.

    Returns
    -------
    ndarray of shape (743086, 2), int64
        (descendant, ancestor) pairs in the node ids of ``read_hierarchy("n")``,
        sorted.
    """
    with _wordnet_reader(wordnet_dir) as reader:
        synsets = list(reader.all_synsets("n"))
        names = sorted(s.name() for s in synsets)
        ids = {name: i for i, name in enumerate(names)}
        pairs = set()
        for s in synsets:
            u = ids[s.name()]
            pairs.update((u, ids[h.name()]) for h in s.closure(lambda x: x.hypernyms()))
            for inst in s.instance_hyponyms():
                i = ids[inst.name()]
                for h in inst.closure(lambda x: x.instance_hypernyms()):
                    pairs.add((i, ids[h.name()]))
                    pairs.update((i, ids[g.name()]) for g in h.closure(lambda x: x.hypernyms()))
    out = np.array(sorted(pairs), dtype=np.int64).reshape(-1, 2)
    return out


# --------------------------------------------------------------------------
# shipped data
# --------------------------------------------------------------------------


def _names_digest(names) -> str:
    """SHA-256 of the names joined by newlines (identifies a node order)."""
    return hashlib.sha256("\n".join(names).encode("utf-8")).hexdigest()


def _atomic_write(path: Path, write):
    """Call ``write(fileobj)`` on a temporary file, then move it to ``path`` (see :mod:`hypann._files`)."""
    atomic_write(path, write, make_parents=True)


def write_noun_data(hierarchy: Hierarchy, directory=DATA_DIR) -> None:
    """Write the compact noun data files (names + direct edges) into ``directory``.

    ``wordnet_nouns_names.txt.gz`` holds one synset name per line (gzip with a
    fixed timestamp, so the bytes are reproducible); ``wordnet_nouns_edges.npz``
    holds the int32 direct edges, the names' SHA-256 and ``format_version``.
    """
    directory = Path(directory)
    text = ("\n".join(hierarchy.names) + "\n").encode("utf-8")

    def write_names(f):
        with gzip.GzipFile(filename="", mode="wb", fileobj=f, mtime=0, compresslevel=9) as gz:
            gz.write(text)

    def write_edges(f):
        np.savez_compressed(
            f,
            edges=hierarchy.edges.astype(np.int32),
            names_sha256=np.array(_names_digest(hierarchy.names)),
            n_nodes=np.int64(hierarchy.n_nodes),
            format_version=np.int64(FORMAT_VERSION),
            source=np.array("WordNet 3.0 nouns (Princeton University); see WORDNET_LICENSE"),
        )

    _atomic_write(directory / NOUN_NAMES_FILE, write_names)
    _atomic_write(directory / NOUN_EDGES_FILE, write_edges)


def _read_names(path: Path) -> list:
    with gzip.open(path, "rt", encoding="utf-8") as f:
        return f.read().splitlines()


def noun_hierarchy(directory=DATA_DIR) -> Hierarchy:
    """The WordNet 3.0 noun hierarchy shipped with hypann (no ``wordnet-base`` needed).

    Returns
    -------
    Hierarchy
        82,115 synsets and 84,427 direct edges; ``closure()`` has 743,241 pairs.
    """
    directory = Path(directory)
    names = _read_names(directory / NOUN_NAMES_FILE)
    with np.load(directory / NOUN_EDGES_FILE) as data:
        version = int(data["format_version"])
        if version != FORMAT_VERSION:
            raise ValueError(
                f"{NOUN_EDGES_FILE} has format_version={version}, this hypann reads {FORMAT_VERSION}"
            )
        if str(data["names_sha256"]) != _names_digest(names) or int(data["n_nodes"]) != len(names):
            raise ValueError(f"{NOUN_EDGES_FILE} does not match {NOUN_NAMES_FILE} (names hash differs)")
        edges = data["edges"].astype(np.int64)
    return Hierarchy(names, edges)


def load_noun_embedding(dim: int = 10, directory=DATA_DIR):
    """The shipped Poincare embedding of the WordNet nouns.

    Parameters
    ----------
    dim : int
        Embedding dimension; only 10 is shipped.

    Returns
    -------
    points : ndarray of shape (82115, dim), float64
        Row ``i`` embeds ``names[i]``; all strictly inside the unit ball.
    names : list of str
        Synset names, the order of :func:`noun_hierarchy`.
    metadata : dict
        Training settings (``epochs``, ``lr``, ``negatives``, ``burn_in``,
        ``seed``, ... and ``settings``, the arguments of
        :func:`train_wordnet_nouns` that reproduce the file), ``wall_time_s``,
        ``losses`` per epoch, reconstruction ``mean_rank``/``map`` (closure
        taken as undirected) and ``mean_rank_directed``/``map_directed``
        (Nickel & Kiela's and gensim's convention, the one behind published
        numbers), ``hypann_version``, ``format_version``.
    """
    if dim not in NOUN_EMBEDDING_FILES:
        raise ValueError(
            f"no shipped noun embedding with dim={dim!r}; available: {sorted(NOUN_EMBEDDING_FILES)} "
            "(train another with hypann.datasets.wordnet.train_wordnet_nouns)"
        )
    directory = Path(directory)
    points, metadata = _read_embedding(directory / NOUN_EMBEDDING_FILES[dim])
    names = _read_names(directory / NOUN_NAMES_FILE)
    if metadata["names_sha256"] != _names_digest(names):
        raise ValueError(
            f"{NOUN_EMBEDDING_FILES[dim]} was trained on a different node order than {NOUN_NAMES_FILE}"
        )
    if points.shape != (len(names), dim):
        raise ValueError(f"{NOUN_EMBEDDING_FILES[dim]} holds points of shape {points.shape}, "
                         f"expected ({len(names)}, {dim})")
    return points, names, metadata


def _read_embedding(path: Path):
    import json

    with np.load(path) as data:
        version = int(data["format_version"])
        if version != FORMAT_VERSION:
            raise ValueError(f"{path.name} has format_version={version}, this hypann reads {FORMAT_VERSION}")
        points = np.ascontiguousarray(data["points"], dtype=np.float64)
        metadata = json.loads(str(data["metadata"]))
    return points, metadata


def _write_embedding(path: Path, points: np.ndarray, metadata: dict) -> None:
    import json

    def write(f):
        np.savez_compressed(
            f,
            points=np.ascontiguousarray(points, dtype=np.float64),
            metadata=np.array(json.dumps(metadata, sort_keys=True)),
            format_version=np.int64(FORMAT_VERSION),
        )

    _atomic_write(Path(path), write)


# --------------------------------------------------------------------------
# training the shipped embedding
# --------------------------------------------------------------------------

def train_wordnet_nouns(
    output,
    *,
    dim: int = 10,
    epochs: int = SHIPPED_EPOCHS,
    lr: float = 0.3,
    negatives: int = 10,
    burn_in: int = 10,
    burn_in_lr_scale: float = 0.1,
    burn_in_power: float = 0.75,
    batch_size: int = 1,
    seed: int = 0,
    max_seconds: float | None = None,
    checkpoint=None,
    checkpoint_every: int = 10,
    evaluate: bool = True,
    eval_nodes: int | None = None,
    hierarchy: Hierarchy | None = None,
):
    """Train a Poincare embedding of the noun closure and save it like the shipped file.

    Deterministic given the settings and ``seed`` (single-threaded trainer):
    calling it with the settings and ``epochs`` recorded in the shipped
    ``wordnet_nouns_poincare10d.npz`` reproduces its points bit for bit (the
    wall time in the metadata differs).

    Parameters
    ----------
    output : path
        Destination ``.npz`` (written atomically).
    dim, epochs, lr, negatives, burn_in, burn_in_lr_scale, burn_in_power, batch_size, seed
        See :func:`hypann.embed.train_poincare`; ``epochs`` counts the burn-in.
    max_seconds : float, optional
        Stop after the first epoch that ends past this wall-clock budget; the
        metadata then records the epochs done (a run with ``epochs`` set to
        that number gives the same points).
    checkpoint : path, optional
        Save the points every ``checkpoint_every`` epochs here, and resume
        from it if it exists (it must come from the same settings; ``epochs``
        may differ).
    evaluate : bool
        Compute the reconstruction mean rank and MAP (symmetric and directed)
        for the metadata; on all 82,115 nodes this takes minutes.
    eval_nodes : int, optional
        Evaluate on a seeded sample of this many nodes instead of all.
    hierarchy : Hierarchy, optional
        Defaults to :func:`noun_hierarchy`.

    Returns
    -------
    dict
        The metadata written to ``output``.
    """
    from hypann._version import __version__
    from hypann.embed.poincare_train import train_poincare
    from hypann.eval.reconstruction import reconstruction_metrics

    dim = check_positive_int(dim, "dim")
    epochs = check_positive_int(epochs, "epochs")
    checkpoint_every = check_positive_int(checkpoint_every, "checkpoint_every")
    if hierarchy is None:
        hierarchy = noun_hierarchy()
    closure = hierarchy.closure()
    names_sha = _names_digest(hierarchy.names)
    # everything that determines the trajectory (the total number of epochs does not)
    settings = dict(
        dim=dim, lr=float(lr), negatives=negatives, burn_in=burn_in,
        burn_in_lr_scale=float(burn_in_lr_scale), burn_in_power=float(burn_in_power),
        batch_size=batch_size, seed=seed, init_range=1e-3,
    )

    init, start_epoch, losses, elapsed = None, 0, [], 0.0
    if checkpoint is not None and Path(checkpoint).exists():
        points, meta = _read_embedding(Path(checkpoint))
        if meta.get("settings") != settings or meta.get("names_sha256") != names_sha:
            raise ValueError(
                f"checkpoint {checkpoint} was written with other settings: {meta.get('settings')} "
                f"(now {settings})"
            )
        start_epoch = min(int(meta["epochs_done"]), epochs)
        init, losses, elapsed = points, list(meta["losses"])[:start_epoch], float(meta["wall_time_s"])
        logger.info("resuming from %s at epoch %d", checkpoint, start_epoch)

    t_start = time.perf_counter() - elapsed

    def save_checkpoint(done, points):
        meta = dict(settings=settings, names_sha256=names_sha, epochs_done=done, losses=losses,
                    wall_time_s=time.perf_counter() - t_start, format_version=FORMAT_VERSION)
        _write_embedding(Path(checkpoint), points, meta)

    def on_epoch(epoch, points, loss):
        losses.append(float(loss))
        done = epoch + 1
        spent = time.perf_counter() - t_start
        logger.info("epoch %d/%d loss %.5f elapsed %.1f s", done, epochs, loss, spent)
        stop = max_seconds is not None and spent >= max_seconds
        if checkpoint is not None and (done % checkpoint_every == 0 or done == epochs or stop):
            save_checkpoint(done, points)
        return stop

    if start_epoch < epochs:
        points = train_poincare(
            closure, n_nodes=hierarchy.n_nodes, dim=dim, epochs=epochs, lr=lr, negatives=negatives,
            burn_in=burn_in, burn_in_lr_scale=burn_in_lr_scale, burn_in_power=burn_in_power,
            batch_size=batch_size, seed=seed, init=init, start_epoch=start_epoch, callback=on_epoch,
        ).points
    else:
        points = init
    wall = time.perf_counter() - t_start
    metadata = dict(
        settings=settings,
        epochs=len(losses),
        lr=float(lr),
        negatives=negatives,
        burn_in=burn_in,
        burn_in_lr_scale=float(burn_in_lr_scale),
        burn_in_power=float(burn_in_power),
        batch_size=batch_size,
        seed=seed,
        wall_time_s=round(wall, 1),
        final_loss=losses[-1] if losses else None,
        losses=[round(x, 6) for x in losses],
        n_nodes=hierarchy.n_nodes,
        n_closure_pairs=int(len(closure)),
        names_sha256=names_sha,
        hypann_version=__version__,
        format_version=FORMAT_VERSION,
        data="WordNet 3.0 nouns, closure of hypernyms + instance hypernyms",
    )
    if evaluate:
        sample = None
        if eval_nodes is not None:
            rng = np.random.default_rng(seed)
            sample = np.sort(rng.choice(hierarchy.n_nodes, size=min(eval_nodes, hierarchy.n_nodes), replace=False))
        t_eval = time.perf_counter()
        sym = reconstruction_metrics(points, closure, nodes=sample)
        directed = reconstruction_metrics(points, closure, symmetric=False, nodes=sample)
        metadata.update(
            mean_rank=sym["mean_rank"], map=sym["map"],
            mean_rank_directed=directed["mean_rank"], map_directed=directed["map"],
            eval_nodes=sym["n_nodes"], eval_time_s=round(time.perf_counter() - t_eval, 1),
        )
        logger.info("reconstruction: %s", {k: metadata[k] for k in ("mean_rank", "map", "mean_rank_directed", "map_directed")})
    _write_embedding(Path(output), points, metadata)
    return metadata
