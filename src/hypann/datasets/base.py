"""Benchmark data sets: base points, held-out queries and exact ground truth, cached on disk.

A :class:`Dataset` follows ann-benchmarks and faiss' ``contrib.datasets``:
``train`` (the indexed base points), ``test`` (queries), ``neighbors`` and
``distances`` (exact k nearest neighbours of every query in ``train``), plus a
JSON-serialisable ``metadata`` dict. As in Wu & Charikar's experiments the
queries are *withheld* from the data: :func:`holdout_split` samples query ids
from the generated points and removes them from the base.

Data sets are cached as ``.npz`` files under :func:`cache_dir`
(``$HYPANN_CACHE``, default ``~/.cache/hypann``), named by a key that hashes
the name, every generation parameter, the seed and :data:`FORMAT_VERSION`.
Files are written atomically (:func:`hypann._files.atomic_write`: temporary
file in the same folder, then ``os.replace``); a file that cannot be read or
does not match its key is rebuilt, never trusted.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from hypann._files import atomic_write
from hypann.settings import DEFAULT_EVAL_K
from hypann._validation import check_k, check_positive_int
from hypann.search.ground_truth import exact_knn

__all__ = [
    "Dataset",
    "FORMAT_VERSION",
    "cache_dir",
    "cache_path",
    "holdout_split",
    "build_dataset",
    "save_dataset",
    "read_dataset",
    "cached_dataset",
]

logger = logging.getLogger(__name__)

# Version of the on-disk layout *and* of the generators' output: bump it when
# either changes so that old cache files are rebuilt rather than reused.
FORMAT_VERSION = 1

_ARRAYS = ("train", "test", "neighbors", "distances", "train_ids", "test_ids")


@dataclass(frozen=True, repr=False)
class Dataset:
    """Base points, withheld queries and their exact hyperbolic neighbours.

    Attributes
    ----------
    name : str
    train : ndarray of shape (n, d), float64
        Points to index (unit Poincare ball).
    test : ndarray of shape (m, d), float64
        Queries, not contained in ``train``.
    neighbors : ndarray of shape (m, k), int64
        Row indices into ``train`` of each query's exact k nearest
        neighbours, ascending distance, ties by lower index.
    distances : ndarray of shape (m, k), float64
        Their hyperbolic distances (unit curvature).
    train_ids, test_ids : ndarray of int64
        Positions of the train and test rows in the generated point set
        (e.g. WordNet synset ids).
    metadata : dict
        Name, parameters, seed, source information (JSON-serialisable).
    """

    name: str
    train: np.ndarray
    test: np.ndarray
    neighbors: np.ndarray
    distances: np.ndarray
    train_ids: np.ndarray
    test_ids: np.ndarray
    metadata: dict = field(default_factory=dict)

    @property
    def k(self) -> int:
        """Number of ground-truth neighbours per query."""
        return int(self.neighbors.shape[1])

    @property
    def dim(self) -> int:
        return int(self.train.shape[1])

    def __repr__(self):
        return (
            f"Dataset({self.name!r}, train={self.train.shape[0]}x{self.dim}, "
            f"test={self.test.shape[0]}, k={self.k})"
        )


def cache_dir() -> Path:
    """Folder of cached data sets: ``$HYPANN_CACHE`` or ``~/.cache/hypann``."""
    env = os.environ.get("HYPANN_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "hypann"


def _key(name, params):
    blob = json.dumps({"name": name, "params": params, "format_version": FORMAT_VERSION}, sort_keys=True)
    return hashlib.sha256(blob.encode()).hexdigest()[:20]


def cache_path(name, params) -> Path:
    """Cache file of data set ``name`` generated with ``params`` (a JSON-able dict)."""
    return cache_dir() / f"{name}-{_key(name, params)}.npz"


def holdout_split(n_points, n_queries, *, seed=0):
    """Sample ``n_queries`` query ids out of ``n_points`` and return the rest as base.

    Returns
    -------
    train_ids : ndarray of shape (n_points - n_queries,), int64, ascending
    test_ids : ndarray of shape (n_queries,), int64, in sampled order
    """
    n_points = check_positive_int(n_points, "n_points")
    n_queries = check_positive_int(n_queries, "n_queries")
    if n_queries >= n_points:
        raise ValueError(
            f"n_queries must be smaller than the number of points ({n_points}) so that some remain "
            f"to be indexed, got n_queries={n_queries}"
        )
    rng = np.random.default_rng(seed)
    test_ids = rng.choice(n_points, size=n_queries, replace=False).astype(np.int64)
    mask = np.ones(n_points, dtype=bool)
    mask[test_ids] = False
    return np.flatnonzero(mask).astype(np.int64), test_ids


def build_dataset(name, points, *, n_queries=1000, k=DEFAULT_EVAL_K, seed=0, metadata=None):
    """Split ``points`` into base and withheld queries and compute exact ground truth.

    Parameters
    ----------
    name : str
    points : ndarray of shape (N, d)
        All generated points (unit Poincare ball).
    n_queries : int, default 1000
        Queries withheld from the base.
    k : int, default :data:`hypann.settings.DEFAULT_EVAL_K` (10)
        Ground-truth neighbours per query.
    seed : int, default 0
        Seed of the query sample.
    metadata : dict, optional
        Extra JSON-serialisable information to store.

    Returns
    -------
    Dataset
    """
    points = np.ascontiguousarray(points, dtype=np.float64)
    train_ids, test_ids = holdout_split(points.shape[0], n_queries, seed=seed)
    train = points[train_ids]
    test = points[test_ids]
    k = check_k(k, train.shape[0])
    neighbors, distances = exact_knn(test, train, k)
    meta = {"name": name, "n_queries": int(n_queries), "k": int(k), "seed": int(seed)}
    meta.update(metadata or {})
    return Dataset(name, train, test, neighbors, distances, train_ids, test_ids, meta)


def _atomic_savez(path: Path, arrays: dict):
    atomic_write(path, lambda f: np.savez(f, **arrays), make_parents=True)


def save_dataset(dataset: Dataset, path, *, key=""):
    """Write ``dataset`` to ``path`` (``.npz``) atomically; ``key`` is stored for checking."""
    arrays = {a: getattr(dataset, a) for a in _ARRAYS}
    arrays["name"] = np.array(dataset.name)
    arrays["metadata"] = np.array(json.dumps(dataset.metadata, sort_keys=True))
    arrays["format_version"] = np.array(FORMAT_VERSION)
    arrays["key"] = np.array(key)
    _atomic_savez(Path(path), arrays)


def read_dataset(path, *, key=None) -> Dataset:
    """Read a data set written by :func:`save_dataset`.

    Raises
    ------
    ValueError
        If the file is unreadable, has another format version, a different
        ``key`` (when given) or inconsistent shapes.
    """
    path = Path(path)
    try:
        with np.load(path, allow_pickle=False) as data:
            version = int(data["format_version"])
            if version != FORMAT_VERSION:
                raise ValueError(f"format_version={version}, this hypann reads {FORMAT_VERSION}")
            if key is not None and str(data["key"]) != key:
                raise ValueError(f"cache key {str(data['key'])!r} does not match the expected {key!r}")
            arrays = {a: np.array(data[a]) for a in _ARRAYS}
            name = str(data["name"])
            metadata = json.loads(str(data["metadata"]))
    except ValueError as exc:
        raise ValueError(f"cannot use data set file {path}: {exc}") from exc
    except Exception as exc:  # zip/npz corruption surfaces as many types
        raise ValueError(f"cannot read data set file {path}: {type(exc).__name__}: {exc}") from exc
    m, k = arrays["neighbors"].shape if arrays["neighbors"].ndim == 2 else (-1, -1)
    ok = (
        arrays["train"].ndim == 2
        and arrays["test"].ndim == 2
        and arrays["train"].shape[1] == arrays["test"].shape[1]
        and m == arrays["test"].shape[0]
        and arrays["distances"].shape == (m, k)
        and arrays["train_ids"].shape == (arrays["train"].shape[0],)
        and arrays["test_ids"].shape == (m,)
    )
    if not ok:
        raise ValueError(f"cannot use data set file {path}: inconsistent array shapes")
    return Dataset(name, metadata=metadata, **arrays)


def cached_dataset(name, params, build, *, cache=True) -> Dataset:
    """Return the cached data set for ``(name, params)`` or build and cache it.

    Parameters
    ----------
    name : str
    params : dict
        Everything the result depends on (JSON-serialisable); hashed into
        the file name together with :data:`FORMAT_VERSION`.
    build : callable
        ``build() -> Dataset``, called on a cache miss.
    cache : bool, default True
        ``False`` neither reads nor writes the cache.
    """
    if not cache:
        return build()
    path = cache_path(name, params)
    key = _key(name, params)
    if path.exists():
        try:
            ds = read_dataset(path, key=key)
            logger.debug("data set %s read from %s", name, path)
            return ds
        except ValueError as exc:
            logger.warning("rebuilding data set %s: %s", name, exc)
    ds = build()
    try:
        save_dataset(ds, path, key=key)
        logger.info("data set %s cached in %s", name, path)
    except OSError as exc:  # a read-only home must not break loading
        logger.warning("could not cache data set %s in %s: %s", name, path, exc)
    return ds
