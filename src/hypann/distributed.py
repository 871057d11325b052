"""A hyperbolic index sharded over Ray actors: :class:`ShardedIndex`.

The points are split into shards; each shard is an ordinary
:class:`hypann.HyperbolicIndex` living in a Ray actor, built in parallel.
A search fans a batch of queries out to the shards that can hold an answer
and merges the per-shard top-k exactly (ids are global row numbers of the
indexed array). Ray is an optional dependency (``pip install hypann[ray]``):
it is imported only when a :class:`ShardedIndex` is built or loaded, so
``import hypann`` never needs it.

Partitions
----------
``"kd"`` (default)
    The top levels of a kd-tree: recursive cuts at the count quantile of the
    widest coordinate. Shards are compact cells, so few of them meet a
    query's ball: on the shipped hierarchical data sets 5-30x fewer than with
    shells at 64 shards (measured, ``docs/distributed.md``).
``"shells"``
    The paper's partition by hyperbolic norm (Wu & Charikar, Spherical-Shell-
    Partition): shard ``s`` holds the points with norms ``d(0, x)`` in an
    interval ``[a_s, b_s]``, i.e. a spherical shell around the origin. The
    boundaries are norm quantiles (equal-count shells) instead of the paper's
    fixed conformal width ``w``, so that shards are balanced even when most
    points share one radius (hierarchical embeddings). A shell surrounds the
    origin, so a query's ball meets most shells when neighbour distances are
    large against the spread of norms (WordNet 10-D: 98-99 % of them).
``"random"``
    A seeded random permutation cut into equal parts.
``"hash"``
    Shard ``splitmix64(id ^ seed) mod n_shards``: a point's shard follows from
    its id alone (for streaming builds); shards are balanced in expectation.

Routing and why it never misses a neighbour
-------------------------------------------
For every shard the driver keeps the norm range ``[a_s, b_s]``, the
coordinate bounding box and the largest conformal factor ``1 - |x|^2`` of its
points (:class:`ShardBounds`), which give a lower bound ``L_s(q)`` on
``d(q, x)`` over the shard: the larger of

* the norm gap ``max(a_s - h_q, h_q - b_s, 0)`` with ``h_q = d(0, q)``: by the
  triangle inequality through the origin ``|d(0,q) - d(0,x)| <= d(q,x)``, the
  ball ``B_H(q, r)`` meets the shell only if ``a_s <= h_q + r`` and
  ``b_s >= h_q - r`` (the paper's Check-Intersection);
* the box bound of the hyperbolic kd-tree, ``2 asinh(sqrt(mindist(q, box)^2 /
  ((1 - |q|^2) max(1 - |x|^2))))``.

With ``"shells"`` and ``"kd"`` partitions a query is searched in rounds:

1. the shards with the smallest ``L_s(q)`` until they hold at least ``k``
   points; merging them gives ``k`` real candidates, so the ``k``-th
   candidate distance ``r_k`` bounds the true ``k``-th distance ``D_k``;
2. then, round after round, the unvisited shards with ``L_s(q) <= r_k``
   (``shards_per_round`` of them, smallest bound first, or all), with ``r_k``
   re-derived from the merged candidates after each round; the query is
   finished when no unvisited shard passes.

``r_k`` only shrinks and always bounds ``D_k``, and every true neighbour
``y`` has ``L_s(q) <= d(q, y) <= D_k <= r_k`` for its shard ``s``, which
therefore passes in every round until it is visited, so it is visited before
the query finishes. With exact per-shard searches the merged top-k is the
exact global top-k. The test is padded by a relative ``1e-9``
(:data:`hypann.geometry.bands.INTERSECT_RTOL`) while norms, bounds and
distances carry relative errors of a few ulps, so rounding can only add
visits. One shard per round visits the fewest shards (the ball shrinks
between visits, as in the paper's Algorithm 3); ``shards_per_round=None``
needs only two rounds. Random and hash partitions visit every shard in one
round.

Merging and ties
----------------
Per-shard answers are merged by the surrogate ``delta`` (the quantity every
hypann search ranks by) and then by global id, so distances are bitwise
those of a single :class:`~hypann.HyperbolicIndex` over all points. Points at
exactly equal distance may come back as different (equally correct) ids.

Faults
------
The driver remembers where each shard comes from: its data in the Ray
object store (after :meth:`ShardedIndex.build`) or its files (after
:meth:`ShardedIndex.save` / :meth:`ShardedIndex.load`). When an actor has
died, the next search starts a new one, reloads its shards and repeats the
calls. A shard that cannot be restored fails the search with
:class:`ShardUnavailableError` naming it, unless ``allow_partial=True``;
then ``stats.extra["shards_missing"]`` counts, and
``stats.extra["missing_shards"]`` (queries x shards, bool) shows, the shards
each query needed but could not search, and a ``RuntimeWarning`` names them.

Files
-----
``save(dir)`` writes one ordinary index file per shard, ``shard-NNNNN.hypann``
(:meth:`HyperbolicIndex.save`: that shard's unit-curvature Poincare points,
its search structure and its points' global ids, ascending), then
``manifest.json``: format, version, settings, per shard the file name, its
sha256, the point count and the routing bounds, and a sha256 of the manifest itself.
Files are written into a fresh folder that replaces ``dir`` only when
complete. ``load`` checks the manifest, then each actor checks its files'
checksums and reports its shard's size and norm bounds, which must match the
manifest.
"""

from __future__ import annotations

import hashlib
import inspect
import json
import logging
import os
import shutil
import tempfile
import warnings
from dataclasses import dataclass

import numpy as np

from hypann import _validation as V
from hypann import rounding
from hypann._runtime import numba_threads
from hypann._version import __version__
from hypann.geometry.bands import INTERSECT_RTOL
from hypann.geometry.poincare import dist0, dist_from_delta
from hypann.index import HyperbolicIndex, check_search_options
from hypann.result import SearchResult, SearchStats
from hypann.search.registry import make_algorithm
from hypann.settings import DEFAULT_K

__all__ = ["ShardedIndex", "ShardUnavailableError", "ShardNotLoadedError", "read_manifest", "is_sharded_index"]

log = logging.getLogger(__name__)

PARTITIONS = ("kd", "shells", "random", "hash")
ROUTED_PARTITIONS = ("kd", "shells")
MANIFEST = "manifest.json"
FORMAT = "hypann-sharded-index"
FORMAT_VERSION = 1
DEFAULT_ALGORITHM = "hkdtree"
_HASH_CHUNK = 1 << 20
# Agreement required between a shard's norm bounds in the manifest and those
# its actor recomputes (far above rounding, far below the routing padding's use).
_BOUNDS_RTOL = 1e-12


class ShardNotLoadedError(LookupError):
    """Raised inside an actor asked for a shard it does not hold (its restore failed earlier)."""


class ShardUnavailableError(RuntimeError):
    """A shard needed by a search could not be searched or restored (its number is ``shard``)."""

    def __init__(self, message, shard):
        super().__init__(message)
        self.shard = shard


# --------------------------------------------------------------------------- Ray plumbing
def _import_ray():
    try:
        import ray
    except ImportError:
        raise ImportError("ShardedIndex needs Ray, an optional dependency: pip install 'hypann[ray]'") from None
    return ray


def _connect(address):
    """Ray, initialized: the running connection, else ``ray.init(address=address)``.

    ``address=None`` lets Ray find a running cluster (``RAY_ADDRESS`` or a
    local ``ray start``) and otherwise start a local one.
    """
    ray = _import_ray()
    if not ray.is_initialized():
        ray.init(address=address, include_dashboard=False, log_to_driver=False)
    elif address is not None:
        log.info("Ray is already initialized; using that connection instead of address=%r", address)
    return ray


def _actor_died_errors(ray):
    return (ray.exceptions.RayActorError,)


def _unwrap(ray, exc):
    """The user-facing exception inside a Ray task error (ValueError, TypeError, ...), else ``exc``."""
    cause = getattr(exc, "cause", None)
    if isinstance(exc, ray.exceptions.RayTaskError) and isinstance(cause, Exception):
        return cause
    return exc


def _file_sha256(path):
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(_HASH_CHUNK), b""):
            h.update(block)
    return h.hexdigest()


#: Settings of :class:`HyperbolicIndex` itself (not of its algorithm) that a ShardedIndex's ``**params`` may hold.
_INDEX_SETTINGS = frozenset(name for name, p in inspect.signature(HyperbolicIndex).parameters.items()
                            if p.kind is not inspect.Parameter.VAR_KEYWORD)


class _ShardHost:
    """Body of a Ray actor that hosts one or more shards.

    Each shard is a :class:`HyperbolicIndex` over unit-curvature Poincare
    points (the driver converts model and curvature once) whose ids are the
    global ids of its points, ascending, so that a shard's rows are in global
    id order.
    """

    def __init__(self, threads):
        self.threads = threads  # numba threads of every shard's build and search (n_jobs; None: all cores)
        self.shards = {}

    def pid(self):
        return os.getpid()

    def _shard(self, shard):
        try:
            return self.shards[shard]
        except KeyError:
            raise ShardNotLoadedError(f"shard {shard} is not loaded in this Ray actor (pid {os.getpid()})") from None

    def summary(self, shard):
        index = self._shard(shard)
        points, conformal = index.points_, index.conformal_  # gathered once when the structure holds them
        norms = dist0(points, cx=conformal)
        ids = index.ids_
        return {
            "n": int(index.n_points_),
            "d": int(index.dim_),
            "norm_min": float(norms.min()),
            "norm_max": float(norms.max()),
            "box_lo": points.min(axis=0).tolist(),
            "box_hi": points.max(axis=0).tolist(),
            "conformal_max": float(conformal.max()),
            "id_min": int(ids[0]),
            "id_max": int(ids[-1]),
            "nbytes": int(index.nbytes),
        }

    def build(self, shard, points, conformal, ids, settings):
        index = HyperbolicIndex(**settings, n_jobs=self.threads)
        index._check_settings()
        # Ray hands over read-only views of its object store; writable copies keep
        # numba on the same (cached) specializations as in any other process.
        points, _ = V.check_points(np.array(points), name="X")
        # the driver's conformal factors were taken from the caller's own coordinates
        # (curvature c, Lorentz): more precise than a recomputation from the rescaled points
        conformal = np.array(conformal, dtype=np.float64)
        self.shards[shard] = index._build_validated(points, conformal, labels=np.array(ids, dtype=np.int64))
        return self.summary(shard)

    def load(self, shard, path, sha256):
        if not os.path.isfile(path):
            raise FileNotFoundError(f"shard {shard}: file {path!r} is missing")
        got = _file_sha256(path)
        if got != sha256:
            raise ValueError(f"shard {shard}: file {path!r} is damaged (sha256 {got[:16]}... but the manifest says {sha256[:16]}...)")
        index = HyperbolicIndex.load(path, n_jobs=self.threads)
        ids = index.ids_
        if index.live_.n_changes or ids.size != index.points_.shape[0] or (ids.size > 1 and not np.all(np.diff(ids) > 0)):
            raise ValueError(f"shard {shard}: {path!r} is not a shard file (its ids are not the ascending global ids of its points)")
        self.shards[shard] = index
        return self.summary(shard)

    def save(self, shard, folder):
        index = self._shard(shard)
        path = os.path.join(folder, f"shard-{shard:05d}.hypann")
        index.save(path)
        return {"file": os.path.basename(path), "sha256": _file_sha256(path)}

    def search(self, shard, queries, q_conformal, k, budget, query_params):
        """Top-``min(k, n_shard)`` of the shard, padded to ``k``: ``(global ids, deltas, stats dict)``."""
        index = self._shard(shard)
        queries, q_conformal = np.array(queries), np.array(q_conformal)  # writable, see build
        m = queries.shape[0]
        k_local = min(k, index.n_points_)
        with numba_threads(index.n_jobs, work=m):
            rows, deltas, stats = index._search_rows(queries, q_conformal, k_local, budget, query_params)
        ids = index._labels_of(np.asarray(rows, dtype=np.int64))
        out_ids = np.full((m, k), -1, dtype=np.int64)
        out_d = np.full((m, k), np.inf)
        out_ids[:, :k_local] = ids
        out_d[:, :k_local] = np.where(ids >= 0, deltas, np.inf)
        return out_ids, out_d, stats.as_dict()


# --------------------------------------------------------------------------- routing (pure)
@dataclass
class ShardBounds:
    """What the driver knows of each shard's points, for routing (arrays over shards ``s``).

    Attributes
    ----------
    sizes : ndarray of int64, (S,)
    norm_min, norm_max : ndarray, (S,)
        Smallest and largest hyperbolic norm ``d(0, x)`` (unit curvature).
    box_lo, box_hi : ndarray, (S, d)
        Coordinate-wise bounding box of the (unit-curvature Poincare) points.
    conformal_max : ndarray, (S,)
        Largest ``1 - |x|^2`` (the point nearest the origin).
    """

    sizes: np.ndarray
    norm_min: np.ndarray
    norm_max: np.ndarray
    box_lo: np.ndarray
    box_hi: np.ndarray
    conformal_max: np.ndarray

    @classmethod
    def of_parts(cls, points, conformal, norms, parts):
        return cls(
            sizes=np.array([p.size for p in parts], dtype=np.int64),
            norm_min=np.array([norms[p].min() for p in parts]),
            norm_max=np.array([norms[p].max() for p in parts]),
            box_lo=np.array([points[p].min(axis=0) for p in parts]),
            box_hi=np.array([points[p].max(axis=0) for p in parts]),
            conformal_max=np.array([conformal[p].max() for p in parts]),
        )

    def entry(self, s) -> dict:
        """Shard ``s`` as JSON-able numbers (floats round-trip exactly through JSON)."""
        return {"n": int(self.sizes[s]), "norm_min": float(self.norm_min[s]), "norm_max": float(self.norm_max[s]),
                "box_lo": self.box_lo[s].tolist(), "box_hi": self.box_hi[s].tolist(),
                "conformal_max": float(self.conformal_max[s])}

    @classmethod
    def from_entries(cls, entries, d):
        box = lambda key: np.array([e[key] for e in entries], dtype=np.float64).reshape(len(entries), d)  # noqa: E731
        return cls(
            sizes=np.array([e["n"] for e in entries], dtype=np.int64),
            norm_min=np.array([e["norm_min"] for e in entries], dtype=np.float64),
            norm_max=np.array([e["norm_max"] for e in entries], dtype=np.float64),
            box_lo=box("box_lo"),
            box_hi=box("box_hi"),
            conformal_max=np.array([e["conformal_max"] for e in entries], dtype=np.float64),
        )

    def lower_bounds(self, queries, q_conformal, h_q):
        """Lower bounds ``L[i, s] <= d(q_i, x)`` for every point ``x`` of shard ``s``, (m, S).

        The larger of two bounds:

        * norm gap (triangle inequality through the origin):
          ``d(q, x) >= |h_q - d(0, x)| >= max(norm_min - h_q, h_q - norm_max, 0)``;
        * box bound (the hyperbolic kd-tree's): ``|q - x| >= mindist(q, box)``
          and ``1 - |x|^2 <= conformal_max``, so
          ``delta(q, x) >= mindist^2 / ((1 - |q|^2) conformal_max)`` and
          ``d = 2 asinh(sqrt(delta))`` is increasing in ``delta``.
        """
        gap = np.maximum(np.maximum(self.norm_min[None, :] - h_q[:, None], h_q[:, None] - self.norm_max[None, :]), 0.0)
        box = np.empty_like(gap)
        for s in range(len(self.sizes)):
            outside = queries - np.clip(queries, self.box_lo[s], self.box_hi[s])
            box[:, s] = np.einsum("ij,ij->i", outside, outside)
        box = dist_from_delta(box / (q_conformal[:, None] * self.conformal_max[None, :]))
        return np.maximum(gap, box)


def may_hold(lower, r_k, h_q):
    """Can a shard hold a point within ``r_k`` of the query? ``lower <= r_k`` with rounding slack, (m, S).

    The slack ``INTERSECT_RTOL * (1 + h_q + r_k)`` (relative 1e-9) is far above
    the few-ulp relative errors of computed norms, bounds and distances, so
    rounding can only make this True more often. ``r_k = inf`` admits all.
    """
    r = np.asarray(r_k, dtype=np.float64)[:, None]
    h = np.asarray(h_q, dtype=np.float64)[:, None]
    return lower <= r + INTERSECT_RTOL * (1.0 + h + np.where(np.isfinite(r), r, 0.0))


def first_round_shards(lower, sizes, k):
    """Round 1 of routing: per query, the shards with the smallest lower bound until they hold ``>= k`` points.

    Returns a boolean (m, S) plan; ties by shard number. A shard is taken
    while the shards before it hold fewer than ``k`` points, so the plan
    holds at least ``k`` points when ``k <= sum(sizes)``.
    """
    order = np.argsort(lower, axis=1, kind="stable")
    sizes = np.asarray(sizes, dtype=np.int64)
    before = np.cumsum(sizes[order], axis=1) - sizes[order]
    plan = np.zeros(lower.shape, dtype=bool)
    np.put_along_axis(plan, order, before < k, axis=1)
    return plan


def next_round_shards(lower, r_k, h_q, visited, per_round=None):
    """A later round of routing: per query, the next unvisited shards that may hold a point within ``r_k``.

    Of the unvisited shards passing :func:`may_hold`, the ``per_round`` with
    the smallest lower bound (all of them when ``per_round`` is None). An
    all-False row means the query is finished.
    """
    candidates = may_hold(lower, r_k, h_q) & ~visited
    if per_round is None or not candidates.any():
        return candidates
    order = np.argsort(lower, axis=1, kind="stable")
    in_order = np.take_along_axis(candidates, order, axis=1)
    take = in_order & (np.cumsum(in_order, axis=1) <= per_round)
    plan = np.zeros_like(candidates)
    np.put_along_axis(plan, order, take, axis=1)
    return plan


def _splitmix64(x):
    z = x.astype(np.uint64) + np.uint64(0x9E3779B97F4A7C15)
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def _kd_split(points, ids, n_shards, out):
    """Cut ``ids`` along the coordinate of widest spread into ``n_shards`` cells of proportional size."""
    if n_shards == 1:
        out.append(ids)
        return
    sub = points[ids]
    axis = int(np.argmax(sub.max(axis=0) - sub.min(axis=0)))
    left = n_shards // 2
    cut = (ids.size * left) // n_shards
    order = ids[np.argsort(sub[:, axis], kind="stable")]
    _kd_split(points, order[:cut], left, out)
    _kd_split(points, order[cut:], n_shards - left, out)


def assign_shards(norms, n_shards, partition, seed=None, points=None):
    """Global ids of each shard (ascending int64 arrays) for ``partition``.

    ``"shells"``: ids sorted by hyperbolic norm (stable) cut into ``n_shards``
    contiguous runs of equal size (+-1); ``"kd"``: recursive cuts of the
    (unit-curvature Poincare) ``points`` at the count quantile of the widest
    coordinate, like the top of a kd-tree, sizes equal up to +-1 per level;
    ``"random"``: a seeded permutation cut into equal runs; ``"hash"``:
    ``splitmix64(id ^ seed) mod n_shards``.
    """
    n = len(norms)
    if partition == "shells":
        parts = np.array_split(np.argsort(norms, kind="stable"), n_shards)
    elif partition == "kd":
        parts = []
        _kd_split(np.asarray(points), np.arange(n), n_shards, parts)
    elif partition == "random":
        parts = np.array_split(np.random.default_rng(seed).permutation(n), n_shards)
    else:
        key = np.arange(n, dtype=np.uint64) ^ np.uint64(0 if seed is None else seed)
        shard = (_splitmix64(key) % np.uint64(n_shards)).astype(np.int64)
        parts = [np.flatnonzero(shard == s) for s in range(n_shards)]
        empty = [s for s, p in enumerate(parts) if p.size == 0]
        if empty:
            raise ValueError(
                f"partition='hash' left shard(s) {empty} empty ({n} points in n_shards={n_shards}); "
                f"use fewer shards or partition='random'"
            )
    return [np.sort(p).astype(np.int64) for p in parts]


# --------------------------------------------------------------------------- manifest
def _canonical(body):
    return json.dumps(body, sort_keys=True, separators=(",", ":")).encode()


def is_sharded_index(path) -> bool:
    """True when ``path`` is a folder with a sharded-index manifest."""
    return os.path.isdir(path) and os.path.isfile(os.path.join(path, MANIFEST))


def read_manifest(path) -> dict:
    """The checked manifest of a sharded index folder (``ValueError`` when damaged)."""
    path = os.fspath(path)
    mpath = os.path.join(path, MANIFEST)
    if not os.path.isfile(mpath):
        raise FileNotFoundError(f"no sharded index at {path!r}: {MANIFEST} is missing")
    try:
        with open(mpath, "rb") as fh:
            doc = json.loads(fh.read().decode())
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ValueError(f"{mpath!r} is damaged: not valid JSON ({exc})") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT:
        raise ValueError(f"{mpath!r} is not a hypann sharded-index manifest (format={doc.get('format') if isinstance(doc, dict) else None!r})")
    if doc.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{mpath!r} has format_version={doc.get('format_version')!r}; this hypann ({__version__}) "
            f"reads format_version={FORMAT_VERSION}"
        )
    body = {key: value for key, value in doc.items() if key != "manifest_sha256"}
    if doc.get("manifest_sha256") != hashlib.sha256(_canonical(body)).hexdigest():
        raise ValueError(f"{mpath!r} is damaged: its contents do not match manifest_sha256")
    try:
        shards = doc["shards"]
        n, d = int(doc["n"]), int(doc["d"])
        ok = isinstance(shards, list) and len(shards) >= 1 and sum(int(s["n"]) for s in shards) == n and d >= 1
        for s in shards:
            for key in ("file", "sha256"):
                if not isinstance(s[key], str) or os.path.basename(s[key]) != s[key]:
                    ok = False
            ok = ok and int(s["n"]) >= 1 and float(s["norm_min"]) <= float(s["norm_max"])
            lo, hi = np.asarray(s["box_lo"], dtype=np.float64), np.asarray(s["box_hi"], dtype=np.float64)
            ok = ok and lo.shape == hi.shape == (d,) and bool(np.all(lo <= hi)) and 0.0 < float(s["conformal_max"]) <= 1.0
        ok = ok and doc["partition"] in PARTITIONS
    except (KeyError, TypeError, ValueError) as exc:
        raise ValueError(f"{mpath!r} is damaged: missing or malformed field ({exc!r})") from None
    if not ok:
        raise ValueError(f"{mpath!r} is damaged: shard entries are inconsistent (counts, file names or routing bounds)")
    return doc


# --------------------------------------------------------------------------- the index
class ShardedIndex:
    """Exact (or approximate) hyperbolic k-NN over shards held by Ray actors.

    Configure, then :meth:`build` (or :meth:`load`), then :meth:`search`;
    :meth:`save` writes one ordinary index file per shard plus a manifest.
    See the module docstring for the partition, the routing proof and the
    file layout.

    Parameters
    ----------
    n_shards : int, default 4
        Number of shards (``<= n_points``).
    partition : {"kd", "shells", "random", "hash"}, default "kd"
        How points are assigned to shards. ``"kd"`` (compact cells) and
        ``"shells"`` (by hyperbolic norm, the paper's) let a query skip the
        shards its search ball cannot reach, kd far better on hierarchical
        data; ``"random"`` and ``"hash"`` visit all.
    algorithm : str, default "hkdtree"
        Per-shard algorithm (any :class:`~hypann.HyperbolicIndex` algorithm);
        with an exact one the result equals a single index's.
    oracle : str, optional
        Oracle spec for algorithms that use one.
    model, c, random_state, **params
        As for :class:`~hypann.HyperbolicIndex` (``params`` go to every shard).
        With ``storage="float32"`` the build runs the single index's float32
        check (:mod:`hypann.rounding`) over the whole sharded index, in the
        driver, and warns in the same way (``float32_rounding_``).
    address : str, optional
        Ray cluster address for ``ray.init(address=...)`` when Ray is not
        initialized yet; ``None`` finds a running cluster or starts a local
        one. An existing ``ray.init`` connection is always used as is.
    n_actors : int, optional
        Actors to spread the shards over (round robin); default one per shard.
    actor_options : dict, optional
        Ray actor options (``num_cpus``, ``memory``, ``resources``, ...).
        Default: Ray's (an actor reserves no CPU while it runs).
    threads_per_actor : int or None, default 1
        numba threads of each actor's builds and searches (the shards'
        ``n_jobs``; ``None``: all cores of its node).

    Attributes
    ----------
    n_points_, dim_ : int
    bounds_ : ShardBounds
        Per-shard sizes, hyperbolic norm ranges, bounding boxes and largest
        conformal factors, from which queries are routed.
    float32_rounding_ : RoundingReport or None
        Only with ``storage="float32"``: see :class:`~hypann.HyperbolicIndex`.

    Examples
    --------
    >>> from hypann.distributed import ShardedIndex          # doctest: +SKIP
    >>> index = ShardedIndex(n_shards=8).build(X)            # doctest: +SKIP
    >>> res = index.search(Q, k=10)                          # doctest: +SKIP
    >>> res.stats.extra["shards_visited"].mean()             # doctest: +SKIP
    """

    def __init__(
        self,
        n_shards=4,
        *,
        partition="kd",
        algorithm=DEFAULT_ALGORITHM,
        oracle=None,
        model="poincare",
        c=1.0,
        random_state=None,
        address=None,
        n_actors=None,
        actor_options=None,
        threads_per_actor=1,
        **params,
    ):
        self.n_shards = n_shards
        self.partition = partition
        self.algorithm = algorithm
        self.oracle = oracle
        self.model = model
        self.c = c
        self.random_state = random_state
        self.address = address
        self.n_actors = n_actors
        self.actor_options = actor_options
        self.threads_per_actor = threads_per_actor
        self.params = params

    # -- settings ----------------------------------------------------------
    def _shard_settings(self):
        return {"algorithm": self.algorithm, "oracle": self.oracle, "model": "poincare", "c": 1.0,
                "random_state": self.random_state, **self.params}

    def _check_settings(self):
        V.check_positive_int(self.n_shards, "n_shards")
        V.check_choice(self.partition, "partition", PARTITIONS)
        V.check_model(self.model)
        V.check_curvature(self.c)
        V.check_positive_int(self.n_actors, "n_actors", allow_none=True)
        V.check_positive_int(self.threads_per_actor, "threads_per_actor", allow_none=True)
        if self.oracle is not None and not isinstance(self.oracle, str):
            raise TypeError(f"oracle must be a spec string or None for a ShardedIndex, got {type(self.oracle).__name__}")
        if self.actor_options is not None and not isinstance(self.actor_options, dict):
            raise TypeError(f"actor_options must be a dict or None, got {type(self.actor_options).__name__}")
        if self.address is not None and not isinstance(self.address, str):
            raise TypeError(f"address must be a string or None, got {type(self.address).__name__}")
        if "n_jobs" in self.params:
            raise ValueError(f"a ShardedIndex sets its shards' threads with threads_per_actor=, got "
                             f"n_jobs={self.params['n_jobs']!r}")
        # the same checks a HyperbolicIndex makes, before any actor starts; the index's own settings among
        # params (storage=, verbose=) are not the algorithm's
        HyperbolicIndex(**self._shard_settings())._check_settings()
        make_algorithm(self.algorithm, {k: v for k, v in self.params.items() if k not in _INDEX_SETTINGS})

    # -- actors --------------------------------------------------------------
    def _start_actors(self, n_shards):
        ray = _connect(self.address)
        self._ray = ray
        n_actors = min(self.n_actors or n_shards, n_shards)
        self.actor_of_ = np.arange(n_shards) % n_actors
        self._host_class = ray.remote(_ShardHost)
        self.actors_ = [self._new_actor() for _ in range(n_actors)]
        self._generation = [0] * n_actors
        return ray

    def _new_actor(self):
        cls = self._host_class
        if self.actor_options:
            cls = cls.options(**self.actor_options)
        return cls.remote(self.threads_per_actor)

    def _actor(self, shard):
        return self.actors_[self.actor_of_[shard]]

    def _get(self, refs):
        """``ray.get`` with the user's exception (ValueError, ...) re-raised unwrapped."""
        try:
            return self._ray.get(refs)
        except self._ray.exceptions.RayTaskError as exc:
            raise _unwrap(self._ray, exc) from None

    def _load_shard_call(self, actor, shard):
        src = self._sources[shard]
        if src[0] == "memory":
            return actor.build.remote(shard, src[1], src[3], src[2], self._shard_settings())
        folder, entry = src[1], src[2]
        return actor.load.remote(shard, os.path.join(folder, entry["file"]), entry["sha256"])

    def _check_summary(self, shard, summary):
        """The shard an actor holds must be the one the driver routes to (count, ids, norms, box)."""
        expected = self.bounds_.entry(shard)
        # recomputed in the actor: equal up to the order of a float sum
        close = all(np.allclose(summary[key], expected[key], rtol=_BOUNDS_RTOL, atol=_BOUNDS_RTOL)
                    for key in ("norm_min", "norm_max", "box_lo", "box_hi", "conformal_max"))
        if summary["n"] != expected["n"] or summary["d"] != self.dim_ or not close or not (
                0 <= summary["id_min"] <= summary["id_max"] < self.n_points_):
            raise ValueError(
                f"shard {shard} does not match its routing bounds (the manifest's, after load): "
                f"n={summary['n']} (expected {expected['n']}), "
                f"d={summary['d']}, norms [{summary['norm_min']!r}, {summary['norm_max']!r}] (expected "
                f"[{expected['norm_min']!r}, {expected['norm_max']!r}]), ids {summary['id_min']}..{summary['id_max']} "
                f"of {self.n_points_}, bounding box and conformal_max {'match' if close else 'differ'}"
            )

    def _restore(self, actor, shards):
        """Load ``shards`` into ``actor`` from their sources; returns ``{shard: error}`` for those that failed."""
        calls = {int(s): self._load_shard_call(actor, int(s)) for s in shards}
        failed = {}
        for s, ref in calls.items():
            try:
                self._check_summary(s, self._get(ref))
            except (ValueError, OSError, *_actor_died_errors(self._ray)) as exc:
                failed[s] = exc
        return failed

    def _reload_shard(self, shard):
        """Load one shard into its (live) actor again; the error, or None."""
        return self._restore(self._actor(shard), [shard]).get(shard)

    def _restart_actor(self, a):
        """Replace actor ``a`` by a new one and reload its shards; returns ``{shard: error}`` for shards that failed."""
        ray = self._ray
        old = self.actors_[a]
        try:
            ray.kill(old)
        except Exception:  # already gone  # noqa: BLE001
            pass
        self.actors_[a] = actor = self._new_actor()
        self._generation[a] += 1
        shards = np.flatnonzero(self.actor_of_ == a)
        failed = self._restore(actor, shards)
        log.warning("restarted Ray actor %d (shards %s)%s", a, shards.tolist(), f"; failed: {sorted(failed)}" if failed else "")
        return failed

    # -- building -----------------------------------------------------------
    def build(self, X):
        """Partition ``X`` (n, d) (or (n, d+1) on the hyperboloid) and build every shard in parallel; returns self."""
        self._check_settings()
        X = V.numpy_input(X, name="X", model=self.model, c=self.c)  # read again by the float32 check
        points, conformal = V.check_points(X, name="X", model=self.model, c=self.c)
        n, d = points.shape
        if self.n_shards > n:
            raise ValueError(f"n_shards must be <= the number of points ({n}), got n_shards={self.n_shards}")
        # the routing bounds are those of the points as the shards store them (float32 storage: rounded there,
        # with the factors of the float64 points; a rounded point may even lie on or past the boundary)
        stored = rounding.as_stored(points) if self.params.get("storage") == "float32" else points
        norms = dist0(stored, cx=conformal)
        parts = assign_shards(norms, self.n_shards, self.partition, self.random_state, points=stored)
        self.close()
        ray = self._start_actors(len(parts))
        self.n_points_, self.dim_ = n, d
        self.bounds_ = ShardBounds.of_parts(stored, conformal, norms, parts)
        try:
            self._sources = [("memory", ray.put(np.ascontiguousarray(points[p])), ray.put(p),
                              ray.put(np.ascontiguousarray(conformal[p]))) for p in parts]
            refs = [self._load_shard_call(self._actor(s), s) for s in range(len(parts))]
            for s, summary in enumerate(self._get(refs)):
                self._check_summary(s, summary)
        except BaseException:
            self.close()
            raise
        self._check_float32_rounding(X, points, conformal)
        log.debug("built %r", self)
        return self

    def _check_float32_rounding(self, X, points, conformal):
        """With ``storage="float32"``: :meth:`HyperbolicIndex.build`'s check (:mod:`hypann.rounding`) over all
        shards, from the driver's float64 unit-ball ``points``; sets ``float32_rounding_`` and warns."""
        if self.params.get("storage") != "float32":
            return
        self.float32_rounding_ = None
        if rounding.nothing_to_check(X, self.model, self.c, self.n_points_):
            return
        changes = rounding.built_changes(lambda rows: (points[rows], conformal[rows]),
                                         lambda queries, q_conformal, k: self._search_validated(queries, q_conformal, k,
                                                                                                None, {}, False, 1),
                                         c=self.c)
        self.float32_rounding_ = rounding.check(conformal, changes, stacklevel=4)  # warns from build

    def _check_fitted(self):
        if not hasattr(self, "actors_"):
            raise ValueError("this ShardedIndex is not built yet: call build(X) or ShardedIndex.load(dir) first")

    # -- searching ----------------------------------------------------------
    def search(self, Q, k=DEFAULT_K, *, budget=None, allow_partial=False, shards_per_round=1, oracle_params=None,
               **query_params) -> SearchResult:
        """The ``k`` nearest indexed points of each query, over all shards.

        Parameters
        ----------
        Q : array_like of shape (m, d)
            Queries in the index's model and curvature.
        k : int, default :data:`hypann.settings.DEFAULT_K` (1)
            Neighbours per query, ``1 <= k <= n_points``.
        budget : int, optional
            Sample budget per query *per shard searched*.
        allow_partial : bool, default False
            When a needed shard cannot be searched or restored, return the
            answer of the other shards (``stats.extra["shards_missing"]`` > 0
            for the affected queries) instead of raising
            :class:`ShardUnavailableError`.
        shards_per_round : int or None, default 1
            Routing after the first round (``"shells"`` and ``"kd"``): each
            query visits this many more shards per round (smallest lower
            bound first), re-deriving its ball from the merged k-th distance
            in between; ``None`` visits all shards the first round's ball may
            reach in one second round (fewer rounds, more shards). The answer
            is the same.
        oracle_params, **query_params
            As for :meth:`hypann.HyperbolicIndex.search`, passed to every shard.

        Returns
        -------
        SearchResult
            As a single index's; per-shard counters are summed, and
            ``stats.extra`` adds ``shards_visited`` (shards searched per
            query), ``shards_missing`` and ``missing_shards`` (m, n_shards).
        """
        self._check_fitted()
        k = V.check_k(k, self.n_points_)
        budget, query_params = check_search_options(self.algorithm, budget, oracle_params, query_params)
        if not isinstance(allow_partial, bool):
            raise TypeError(f"allow_partial must be True or False, got {allow_partial!r}")
        shards_per_round = V.check_positive_int(shards_per_round, "shards_per_round", allow_none=True)
        queries, q_conf = V.check_points(Q, name="Q", model=self.model, c=self.c, dim=self.dim_, allow_empty=True)
        return self._search_validated(queries, q_conf, k, budget, query_params, allow_partial, shards_per_round)

    def _search_validated(self, queries, q_conf, k, budget, query_params, allow_partial, shards_per_round):
        """:meth:`search` of validated unit-ball queries with their conformal factors (settings checked)."""
        m, n_shards = queries.shape[0], len(self.bounds_.sizes)
        stats = SearchStats.zeros(m, "shards_visited", "shards_missing")
        stats.extra["missing_shards"] = np.zeros((m, n_shards), dtype=bool)
        best_ids = np.full((m, k), -1, dtype=np.int64)
        best_d = np.full((m, k), np.inf)
        if m:
            if self.partition in ROUTED_PARTITIONS:
                h_q = dist0(queries, cx=q_conf)
                lower = self.bounds_.lower_bounds(queries, q_conf, h_q)
                plan = first_round_shards(lower, self.bounds_.sizes, k)
                visited = plan.copy()
                while plan.any():
                    self._run_round(plan, queries, q_conf, k, budget, query_params, best_ids, best_d, stats, allow_partial)
                    plan = next_round_shards(lower, dist_from_delta(best_d[:, k - 1]), h_q, visited, shards_per_round)
                    visited |= plan
            else:
                plan = np.ones((m, n_shards), dtype=bool)
                self._run_round(plan, queries, q_conf, k, budget, query_params, best_ids, best_d, stats, allow_partial)
        missing = stats.extra["missing_shards"]
        stats.extra["shards_missing"] = missing.sum(axis=1).astype(np.int64)
        if missing.any():
            warnings.warn(
                f"allow_partial=True: shard(s) {np.flatnonzero(missing.any(axis=0)).tolist()} could not be searched; "
                f"{int(missing.any(axis=1).sum())} of {m} queries may miss neighbours",
                RuntimeWarning,
                stacklevel=3,
            )
        distances = dist_from_delta(best_d) / np.sqrt(self.c)
        distances[best_ids < 0] = np.inf
        return SearchResult(best_ids, distances, stats, self.params.get("storage") == "float32")

    def _run_round(self, plan, queries, q_conf, k, budget, query_params, best_ids, best_d, stats, allow_partial):
        """Search every shard of ``plan`` (m, S) for its rows in parallel, then merge into the top-k in place."""
        ray = self._ray
        died = _actor_died_errors(ray)
        pending = {int(s): np.flatnonzero(plan[:, s]) for s in np.flatnonzero(plan.any(axis=0))}  # shard -> query rows
        refs = {}

        def submit(s):
            rows = pending[s]
            a = int(self.actor_of_[s])
            refs[s] = (self._generation[a], self.actors_[a].search.remote(s, queries[rows], q_conf[rows], k, budget, query_params))

        for s in pending:
            submit(s)
        results = {}
        unrecoverable = {}
        for s in list(pending):
            for attempt in range(2):
                generation, ref = refs[s]
                try:
                    results[s] = self._get(ref)
                    break
                except (*died, ShardNotLoadedError) as exc:
                    if attempt == 1:
                        unrecoverable[s] = exc
                        break
                    a = int(self.actor_of_[s])
                    if isinstance(exc, ShardNotLoadedError):
                        error = self._reload_shard(s)
                        if error is not None:
                            unrecoverable[s] = error
                    elif self._generation[a] == generation:  # nobody restarted it since this call went out
                        for f, error in self._restart_actor(a).items():
                            unrecoverable.setdefault(f, error)
                    if s in unrecoverable:
                        break
                    submit(s)
            if s in unrecoverable:
                exc = unrecoverable[s]
                if not allow_partial:
                    raise ShardUnavailableError(
                        f"shard {s} (Ray actor {int(self.actor_of_[s])}) could not be searched or restored: "
                        f"{type(exc).__name__}: {exc}. Pass allow_partial=True to get the other shards' answer.",
                        shard=s,
                    ) from exc
                stats.extra["missing_shards"][pending[s], s] = True
        for s, (ids, deltas, shard_stats) in results.items():
            rows = pending[s]
            self._merge(rows, ids, deltas, best_ids, best_d, k)
            stats.oracle_calls[rows] += shard_stats["oracle_calls"]
            stats.samples[rows] += shard_stats["samples"]
            stats.rounds[rows] += shard_stats["rounds"]
            stats.extra["shards_visited"][rows] += 1
            for name, arr in shard_stats.items():
                if name in ("oracle_calls", "samples", "rounds"):
                    continue
                stats.extra.setdefault(name, np.zeros(len(best_ids), dtype=np.asarray(arr).dtype))[rows] += arr

    @staticmethod
    def _merge(rows, ids, deltas, best_ids, best_d, k):
        """Exact merge: the ``k`` smallest ``(delta, id)`` of the current best and the new candidates."""
        all_ids = np.concatenate([best_ids[rows], ids], axis=1)
        all_d = np.concatenate([best_d[rows], deltas], axis=1)
        order = np.lexsort((np.where(all_ids < 0, np.iinfo(np.int64).max, all_ids), all_d), axis=1)[:, :k]
        best_ids[rows] = np.take_along_axis(all_ids, order, axis=1)
        best_d[rows] = np.take_along_axis(all_d, order, axis=1)

    # -- persistence --------------------------------------------------------
    def save(self, path):
        """Write the shards and a manifest into the folder ``path`` (see the module docstring).

        The actors write their shard files themselves, so ``path`` must be
        on a file system they share with the driver (always true for a
        local cluster). ``path`` may not exist, be empty or hold a sharded
        index (replaced); anything else raises ``ValueError``. Afterwards
        dead actors are restored from these files and the driver's copies
        of the shard data in the object store are released.
        """
        self._check_fitted()
        path = os.path.abspath(os.fspath(path))
        if os.path.exists(path) and not (os.path.isdir(path) and (not os.listdir(path) or is_sharded_index(path))):
            raise ValueError(f"cannot save a sharded index to {path!r}: it exists and is not an empty folder or a sharded index")
        parent = os.path.dirname(path)
        os.makedirs(parent, exist_ok=True)
        tmp = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", suffix=".tmp", dir=parent)
        try:
            refs = [self._actor(s).save.remote(s, tmp) for s in range(len(self.bounds_.sizes))]
            entries = self._get(refs)
            body = self._manifest_body(entries)
            doc = {**body, "manifest_sha256": hashlib.sha256(_canonical(body)).hexdigest()}
            with open(os.path.join(tmp, MANIFEST), "w") as fh:
                json.dump(doc, fh, indent=1, sort_keys=True)
            if os.path.exists(path):
                old = tempfile.mkdtemp(prefix=f".{os.path.basename(path)}.", suffix=".old", dir=parent)
                os.rmdir(old)
                os.replace(path, old)
                os.replace(tmp, path)
                shutil.rmtree(old, ignore_errors=True)
            else:
                os.replace(tmp, path)
        except BaseException:
            shutil.rmtree(tmp, ignore_errors=True)
            raise
        self._sources = [("file", path, entry) for entry in body["shards"]]

    def _manifest_body(self, entries):
        params = self.get_params()
        shards = []
        for s, entry in enumerate(entries):
            shards.append({**entry, **self.bounds_.entry(s)})
        return {
            "format": FORMAT,
            "format_version": FORMAT_VERSION,
            "hypann_version": __version__,
            "n": int(self.n_points_),
            "d": int(self.dim_),
            "partition": params["partition"],
            "model": params["model"],
            "c": params["c"],
            "algorithm": params["algorithm"],
            "oracle": params["oracle"],
            "random_state": params["random_state"],
            "params": self.params,
            "shards": shards,
        }

    @classmethod
    def load(cls, path, *, address=None, n_actors=None, actor_options=None, threads_per_actor=1):
        """Start actors that load the shards of a folder written by :meth:`save`.

        Raises ``ValueError`` naming the file when the manifest or a shard file
        is damaged (checksums) or a shard does not match the manifest.
        """
        path = os.path.abspath(os.fspath(path))
        doc = read_manifest(path)
        index = cls(
            len(doc["shards"]), partition=doc["partition"], algorithm=doc["algorithm"], oracle=doc["oracle"],
            model=doc["model"], c=doc["c"], random_state=doc["random_state"], address=address, n_actors=n_actors,
            actor_options=actor_options, threads_per_actor=threads_per_actor, **doc["params"],
        )
        index._check_settings()
        for s, entry in enumerate(doc["shards"]):
            if not os.path.isfile(os.path.join(path, entry["file"])):
                raise ValueError(f"shard {s}: file {entry['file']!r} listed in {os.path.join(path, MANIFEST)!r} is missing")
        index.n_points_, index.dim_ = int(doc["n"]), int(doc["d"])
        index.bounds_ = ShardBounds.from_entries(doc["shards"], index.dim_)
        index._sources = [("file", path, entry) for entry in doc["shards"]]
        index._start_actors(len(doc["shards"]))
        try:
            refs = [index._load_shard_call(index._actor(s), s) for s in range(len(doc["shards"]))]
            for s, summary in enumerate(index._get(refs)):
                index._check_summary(s, summary)
        except BaseException:
            index.close()
            raise
        return index

    # -- lifetime and introspection ------------------------------------------
    def close(self):
        """Stop the actors (the Ray cluster itself keeps running)."""
        actors = getattr(self, "actors_", None)
        if actors is None:
            return
        for actor in actors:
            try:
                self._ray.kill(actor)
            except Exception:  # already gone  # noqa: BLE001
                pass
        del self.actors_
        self._sources = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def actor_pids(self):
        """Process ids of the actors (one per actor, in actor order)."""
        self._check_fitted()
        return self._get([a.pid.remote() for a in self.actors_])

    @property
    def nbytes(self) -> int:
        """Bytes the shards hold in their actors (points, conformal factors, search structures, ids)."""
        self._check_fitted()
        refs = [self._actor(s).summary.remote(s) for s in range(len(self.bounds_.sizes))]
        return int(sum(r["nbytes"] for r in self._get(refs)))

    def get_params(self) -> dict:
        return {
            "n_shards": self.n_shards,
            "partition": self.partition,
            "algorithm": self.algorithm,
            "oracle": self.oracle,
            "model": self.model,
            "c": self.c,
            "random_state": self.random_state,
            **self.params,
        }

    def __repr__(self):
        parts = ", ".join(f"{k}={v!r}" for k, v in self.get_params().items() if v is not None)
        fitted = f", n_points={self.n_points_}, dim={self.dim_}, actors={len(self.actors_)}" if hasattr(self, "actors_") else ""
        return f"ShardedIndex({parts}{fitted})"
