"""Named data sets: ``hypann.datasets.load("synthetic-tree-10d")`` and friends.

Every name maps to a generator of the full point set; :func:`load` withholds
``n_queries`` of the points as queries, computes exact ground truth and caches
the result (see :mod:`hypann.datasets.base`). Synthetic sets generate
``100,000 + n_queries`` points so that exactly 100,000 remain to be indexed.
WordNet sets need :mod:`hypann.datasets.wordnet` (imported only when such a
set is loaded) and its shipped data.
"""

from __future__ import annotations

import hashlib
import logging
from dataclasses import dataclass
from typing import Callable

import numpy as np

from hypann import _progress as progress
from hypann._validation import check_bool, check_positive_int, check_seed
from hypann.datasets.base import Dataset, build_dataset, cached_dataset
from hypann.settings import DEFAULT_EVAL_K

__all__ = ["load", "list_datasets", "load_points"]

logger = logging.getLogger(__name__)

# Base points of every synthetic data set (queries are generated on top).
SYNTHETIC_BASE_SIZE = 100_000
#: Preparing a data set shows a progress bar (on a terminal) once it has taken
#: this many seconds.
PREPARE_PROGRESS_DELAY = 1.0


@dataclass(frozen=True)
class _Spec:
    description: str
    # prepare(n_queries, seed) -> (params, make): ``params`` identifies the
    # point set (JSON-able, hashed into the cache key) and is cheap to obtain;
    # ``make() -> (points, extra_metadata)`` does the expensive generation.
    prepare: Callable


def _synthetic(kind, dim):
    def prepare(n_queries, seed):
        params = {"generator": kind, "n": SYNTHETIC_BASE_SIZE + n_queries, "dim": dim, "seed": seed}

        def make():
            from hypann.datasets import synthetic

            fn = synthetic.hierarchical_tree if kind == "hierarchical_tree" else synthetic.clustered
            return fn(params["n"], dim, seed=seed), {}

        return params, make

    return prepare


def _digest(arr):
    return hashlib.sha256(np.ascontiguousarray(arr).tobytes()).hexdigest()[:16]


def _wordnet_trained(dim):
    def prepare(n_queries, seed):
        from hypann.datasets.wordnet import load_noun_embedding

        points, _names, meta = load_noun_embedding(dim=dim)
        params = {"source": f"wordnet-nouns-poincare-{dim}d", "points_sha256": _digest(points)}
        return params, lambda: (points, {"embedding": meta})

    return prepare


def _wordnet_combinatorial(dim, root=None):
    def prepare(n_queries, seed):
        from hypann.datasets.wordnet import noun_hierarchy

        hierarchy = noun_hierarchy()
        if root is not None:
            hierarchy = hierarchy.subtree(root)
        parents = np.asarray(hierarchy.spanning_tree_parents())
        params = {
            "source": "wordnet-nouns-spanning-tree" + (f"-{root}" if root else ""),
            "parents_sha256": _digest(parents),
            "dim": dim,
            "construction": "combinatorial_embedding defaults",
        }

        def make():
            from hypann.datasets.combinatorial import combinatorial_embedding, tree_distortion

            points = combinatorial_embedding(parents, dim)
            report = tree_distortion(points, parents, n_pairs=10_000, seed=0)
            report["conformal_quantiles"] = {str(q): v for q, v in report["conformal_quantiles"].items()}
            return points, {"distortion": report}

        return params, make

    return prepare


def _registry():
    specs = {}
    for dim in (10, 100):
        specs[f"synthetic-tree-{dim}d"] = _Spec(
            f"random tree embedded in the Poincare ball, {SYNTHETIC_BASE_SIZE:,} base points, {dim}-D, "
            "1-|x|^2 down to ~1e-8 (hypann.datasets.synthetic.hierarchical_tree)",
            _synthetic("hierarchical_tree", dim),
        )
        specs[f"synthetic-clustered-{dim}d"] = _Spec(
            f"100 wrapped normal clusters, {SYNTHETIC_BASE_SIZE:,} base points, {dim}-D "
            "(hypann.datasets.synthetic.clustered)",
            _synthetic("clustered", dim),
        )
    specs["wordnet-nouns-10d"] = _Spec(
        "WordNet 3.0 nouns (82,115 synsets), shipped 10-D Poincare embedding trained on the hypernym closure",
        _wordnet_trained(10),
    )
    specs["wordnet-nouns-100d"] = _Spec(
        "WordNet 3.0 noun spanning tree (82,115 synsets), 100-D combinatorial construction of de Sa et al.",
        _wordnet_combinatorial(100),
    )
    return specs


_SPECS = _registry()


def list_datasets():
    """Names and one-line descriptions of the data sets :func:`load` knows.

    Returns
    -------
    list of (str, str)
    """
    return [(name, spec.description) for name, spec in _SPECS.items()]


def load_points(name, *, seed=0):
    """The full point set of a named data set, without queries, ground truth or cache.

    Synthetic sets have ``100,000`` points here (no queries generated on top).

    Parameters
    ----------
    name : str
        One of :func:`list_datasets`.
    seed : int, default 0
        Seed of the generator (synthetic sets).

    Returns
    -------
    points : ndarray of shape (n, d), float64
    """
    if name not in _SPECS:
        raise ValueError(f"unknown data set {name!r}; available: {', '.join(_SPECS)}")
    _params, make = _SPECS[name].prepare(0, int(seed))
    points, _extra = make()
    return np.ascontiguousarray(points, dtype=np.float64)


def load(name, *, n_queries=1000, k=DEFAULT_EVAL_K, seed=0, cache=True, verbose=True) -> Dataset:
    """Load (generate or read from the cache) a named data set.

    Parameters
    ----------
    name : str
        One of :func:`list_datasets`.
    n_queries : int, default 1000
        Points withheld from the base as queries.
    k : int, default :data:`hypann.settings.DEFAULT_EVAL_K` (10)
        Exact neighbours per query in the ground truth.
    seed : int, default 0
        Seed of the generator (synthetic sets) and of the query sample.
    cache : bool, default True
        Read and write the on-disk cache (``$HYPANN_CACHE`` or
        ``~/.cache/hypann``).
    verbose : bool, default True
        Show a progress bar (tqdm, on stderr, only when it is a terminal)
        while a data set that is not cached is prepared and that takes more
        than a couple of seconds.

    Returns
    -------
    Dataset

    Examples
    --------
    >>> import hypann.datasets
    >>> ds = hypann.datasets.load("synthetic-tree-10d")  # doctest: +SKIP
    >>> ds.train.shape, ds.test.shape, ds.neighbors.shape  # doctest: +SKIP
    ((100000, 10), (1000, 10), (1000, 10))
    """
    if name not in _SPECS:
        raise ValueError(f"unknown data set {name!r}; available: {', '.join(_SPECS)}")
    n_queries = check_positive_int(n_queries, "n_queries")
    k = check_positive_int(k, "k")
    seed = check_seed(seed, "seed", allow_none=False)
    cache = check_bool(cache, "cache")
    verbose = check_bool(verbose, "verbose")
    spec = _SPECS[name]
    params, make = spec.prepare(n_queries, int(seed))
    params = {**params, "n_queries": n_queries, "k": k, "seed": int(seed)}

    def build():
        with progress.task(f"prepare {name}", enabled=verbose, delay=PREPARE_PROGRESS_DELAY):
            progress.advance(stage="points")
            points, extra = make()
            logger.info("building data set %s: %d points, %d queries, k=%d", name, points.shape[0], n_queries, k)
            progress.advance(stage="ground truth")
            meta = {"description": spec.description, "params": params, **extra}
            return build_dataset(name, points, n_queries=n_queries, k=k, seed=int(seed), metadata=meta)

    return cached_dataset(name, params, build, cache=cache)
