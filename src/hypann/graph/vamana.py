"""Vamana (DiskANN) proximity graph with the Poincare distance: the paper's baseline.

Kept with the paper's defaults for comparison. It collapses on clustered and
real hyperbolic data (recall@10 0.29 on a Gaussian mixture 10-D, 0.70 on the
WordNet nouns; RobustPrune keeps only edges towards central points): use
``algorithm="graph"`` (:mod:`hypann.graph.knn_graph`, where the measurements
are) for approximate search.

Subramanya et al. (2019) build a directed graph of out-degree at most ``R``
by two passes over the points in random order; for each point ``p`` they run a
greedy search for ``p`` from a fixed start (the medoid) with list size ``L``,
then *RobustPrune* the visited set into at most ``R`` out-neighbours, and add
reverse edges (pruning a neighbour again when its degree exceeds ``R``).
RobustPrune keeps the nearest candidate ``p*`` and discards every candidate
``p'`` with

.. math::

    \\alpha \\, d(p^*, p') \\le d(p, p'),

so ``alpha > 1`` keeps longer edges. Here ``d`` is the Poincare distance
``d = 2 asinh(sqrt(delta))`` (``alpha`` multiplies the distance, not
``delta``); everything else ranks by the monotone surrogate
``delta = |x-y|^2 / ((1-|x|^2)(1-|y|^2))`` computed from the stored conformal
factors. The first pass uses ``alpha = 1`` and the remaining passes the given
``alpha``, as in the paper (a single pass uses ``alpha`` directly).

Choices the papers leave open
-----------------------------
* **Start point.** The hyperbolic medoid of a sample: the point that
  minimises the sum of Poincare distances to ``min(n, 256)`` random points
  (a sum of ``delta`` would be ruled by the farthest points, which are
  exponentially far). On tree-like data this is a point near the root.
* **Initial graph.** Each point gets ``min(R, n-1)`` distinct random
  out-neighbours (not itself).
* **Build order.** Sequential (one point at a time), so the graph is a pure
  function of ``random_state``; DiskANN's parallel batch build changes the
  graph with the thread schedule.

Search and sample budget (Wu & Charikar, section 6)
---------------------------------------------------
A greedy search keeps the ``max(L, k)`` best points seen and repeatedly
expands the best unexpanded one. Every distance evaluated is one *sample*.
With a ``budget``, when a greedy search converges before the budget is used,
a new greedy search starts from a uniformly random point not yet evaluated,
and so on until the budget is used (the paper's protocol); the ``k`` best
points over all rounds are returned. Distances already evaluated for the
query are remembered and not counted again in later rounds. The budget is a
hard limit: evaluation stops at exactly ``budget`` samples, possibly in the
middle of a neighbour list (``samples <= budget`` always, no overshoot).
Without a budget a single greedy search from the medoid is run.

Random restarts draw from a per-query generator seeded by
``(random_state, query row)``, so results do not depend on threading.

References
----------
Subramanya, Devvrit, Kadekodi, Krishnaswamy, Simhadri, *DiskANN: Fast
Accurate Billion-point Nearest Neighbor Search on a Single Node*, NeurIPS 2019.
Wu & Charikar, *Nearest Neighbor Search for Hyperbolic Embeddings*, section 6.
"""

from __future__ import annotations

import logging
import warnings
from typing import NamedTuple

import numba as nb
import numpy as np

from hypann._runtime import read_only
from hypann._validation import (
    check_positive_int,
    check_real,
    check_seed,
    check_state_array,
    check_state_fields,
    check_stored_points,
    check_stored_queries,
    first_bad,
    state_error,
)
from hypann.geometry._kernels import delta_row, insert_sorted
from hypann.graph.partition_tree import splitmix64 as _splitmix64

__all__ = ["VamanaIndex", "GraphSearchResult"]

logger = logging.getLogger(__name__)

# Points sampled to choose the medoid start point.
MEDOID_SAMPLE = 256
# Per-query budget meaning "no budget" inside the kernels.
_NO_BUDGET = np.iinfo(np.int64).max
# Random draws tried before scanning for a not-yet-evaluated restart point.
_RESTART_DRAWS = 64
# Arrays that make up a fitted index (see ``to_arrays``).
_STATE = ("points", "conformal", "neighbors", "medoid")


class GraphSearchResult(NamedTuple):
    """Answer of :meth:`VamanaIndex.search` and :meth:`HyperbolicGraphIndex.search` (a 3-tuple).

    Attributes
    ----------
    ids : ndarray of shape (m, k), int64
        Ids of the best points found, ``-1`` pad.
    deltas : ndarray of shape (m, k)
        Their ``delta``, ascending, ``inf`` pad.
    samples : ndarray of shape (m,), int64
        Distance evaluations per query.
    """

    ids: np.ndarray
    deltas: np.ndarray
    samples: np.ndarray


# --------------------------------------------------------------------------- helpers


@nb.njit(cache=True, inline="always")
def _dist_from_delta(dl):
    return 2.0 * np.arcsinh(np.sqrt(dl))


@nb.njit(cache=True, parallel=True)
def _medoid(points, conf, sample):
    """Index of the point minimising the sum of Poincare distances to ``sample``."""
    n = points.shape[0]
    total = np.empty(n)
    for i in nb.prange(n):
        s = 0.0
        for t in range(sample.shape[0]):
            j = sample[t]
            s += _dist_from_delta(delta_row(points[i], conf[i], points[j], conf[j]))
        total[i] = s
    return np.argmin(total)


@nb.njit(cache=True)
def _random_graph(n, R, uniforms):
    """``min(R, n-1)`` distinct random out-neighbours per point (Floyd's sampling)."""
    deg = min(R, n - 1)
    nbrs = np.full((n, R), -1, dtype=np.int32)
    degree = np.full(n, deg, dtype=np.int32)
    pool = n - 1  # candidates 0..n-2, shifted past i
    for i in range(n):
        cnt = 0
        for jj in range(pool - deg, pool):
            t = int(uniforms[i, cnt] * (jj + 1))
            if t > jj:
                t = jj
            dup = False
            for s in range(cnt):
                if nbrs[i, s] == t:
                    dup = True
                    break
            nbrs[i, cnt] = jj if dup else t
            cnt += 1
        for s in range(deg):
            if nbrs[i, s] >= i:
                nbrs[i, s] += 1
    return nbrs, degree


@nb.njit(cache=True, inline="always")
def _list_offer(lst_d, lst_i, lst_e, size, L, d, u):
    """Offer ``u`` at ``delta`` ``d`` to the sorted search list of at most ``L`` entries.

    The list holds ``size`` entries ascending by ``lst_d``, with ``lst_e``
    marking the expanded ones. Returns the new size and the position where
    ``u`` was inserted (unexpanded), or -1 when it did not make the list.
    """
    if size == L and d >= lst_d[size - 1]:
        return size, -1
    pos = size if size < L else L - 1
    while pos > 0 and lst_d[pos - 1] > d:
        lst_d[pos] = lst_d[pos - 1]
        lst_i[pos] = lst_i[pos - 1]
        lst_e[pos] = lst_e[pos - 1]
        pos -= 1
    lst_d[pos] = d
    lst_i[pos] = u
    lst_e[pos] = False
    return (size + 1 if size < L else size), pos


@nb.njit(cache=True, inline="always")
def _query_delta(u, q, cq, points, conf, evaluated, memo, qtag, best_d, best_i, cnt):
    """``delta(q, u)`` for a query: computed once per query (``memo``, tagged ``qtag`` in
    ``evaluated``), counted in ``cnt`` and offered to the sorted top-k ``best_d``/``best_i``.
    Returns ``(delta, cnt)``."""
    if evaluated[u] != qtag:
        evaluated[u] = qtag
        memo[u] = delta_row(q, cq, points[u], conf[u])
        cnt += 1
        if memo[u] < best_d[best_d.shape[0] - 1]:
            insert_sorted(best_d, best_i, memo[u], u)
    return memo[u], cnt


@nb.njit(cache=True, inline="always")
def _greedy(points, conf, nbrs, degree, q, cq, start, L, in_round, rtag, lst_d, lst_i, lst_e, build,
            memo, evaluated, qtag, cnt, limit, best_d, best_i, visited):
    """One greedy search for ``q`` from ``start`` with a sorted list of ``L`` entries.

    The one search loop of the build and of queries. ``in_round[u] == rtag``
    marks the points offered in this search. ``build``: every offered
    point's ``delta`` is computed and the expanded points are written to
    ``visited`` (grown when full). Otherwise (a query) a point's ``delta`` is
    computed once per query (``memo``, valid where ``evaluated == qtag``, so
    restarts reuse it), counted in ``cnt``, the search stops at ``cnt ==
    limit``, and each evaluated point is offered to the running top-k
    ``best_d``/``best_i``. Returns ``(cnt, n_vis, visited)``.
    """
    for t in range(L):
        lst_d[t] = np.inf
        lst_i[t] = -1
        lst_e[t] = False
    in_round[start] = rtag
    if build:
        d_start = delta_row(q, cq, points[start], conf[start])
    else:
        d_start, cnt = _query_delta(start, q, cq, points, conf, evaluated, memo, qtag, best_d, best_i, cnt)
    lst_d[0] = d_start
    lst_i[0] = start
    size = 1
    n_vis = 0
    cur = 0
    while cur < size and cnt < limit:
        p = lst_i[cur]
        lst_e[cur] = True
        if build:
            if n_vis == visited.shape[0]:
                grown = np.empty(2 * visited.shape[0], dtype=visited.dtype)
                grown[:n_vis] = visited[:n_vis]
                visited = grown
            visited[n_vis] = p
            n_vis += 1
        low = size
        for s in range(degree[p]):
            u = nbrs[p, s]
            if u < 0:
                break
            if in_round[u] == rtag:
                continue
            if build:
                du = delta_row(q, cq, points[u], conf[u])
            else:
                if evaluated[u] != qtag and cnt >= limit:
                    break
                du, cnt = _query_delta(u, q, cq, points, conf, evaluated, memo, qtag, best_d, best_i, cnt)
            in_round[u] = rtag
            size, pos = _list_offer(lst_d, lst_i, lst_e, size, L, du, u)
            if 0 <= pos < low:
                low = pos
        cur = low if low <= cur else cur + 1
        while cur < size and lst_e[cur]:
            cur += 1
    return cnt, n_vis, visited


@nb.njit(cache=True)
def _robust_prune(p, cand, n_cand, points, conf, alpha, R, mark, tag, out_row):
    """RobustPrune(p, cand, alpha, R) into ``out_row``; returns the new degree.

    ``cand`` may contain ``p`` and repeated ids (both dropped).
    """
    ids = np.empty(n_cand, dtype=np.int64)
    dl = np.empty(n_cand)
    c = 0
    for t in range(n_cand):
        u = cand[t]
        if u == p or u < 0 or mark[u] == tag:
            continue
        mark[u] = tag
        ids[c] = u
        dl[c] = delta_row(points[p], conf[p], points[u], conf[u])
        c += 1
    order = np.argsort(dl[:c], kind="mergesort")
    alive = np.ones(c, dtype=np.bool_)
    dist_p = np.empty(c)
    for t in range(c):
        dist_p[t] = _dist_from_delta(dl[order[t]])
    deg = 0
    for a in range(c):
        if not alive[a]:
            continue
        ps = ids[order[a]]
        out_row[deg] = ps
        deg += 1
        if deg == R:
            break
        for b in range(a + 1, c):
            if alive[b]:
                u = ids[order[b]]
                d_su = _dist_from_delta(delta_row(points[ps], conf[ps], points[u], conf[u]))
                if alpha * d_su <= dist_p[b]:
                    alive[b] = False
    for t in range(deg, out_row.shape[0]):
        out_row[t] = -1
    return deg


@nb.njit(cache=True)
def _build_graph(points, conf, nbrs, degree, medoid, L, R, alphas, orders):
    """Vamana passes over ``orders[pass]`` with ``alphas[pass]``; edits the graph in place."""
    n = points.shape[0]
    seen = np.zeros(n, dtype=np.int64)
    mark = np.zeros(n, dtype=np.int64)
    tag = 0
    mtag = 0
    lst_d = np.empty(L)
    lst_i = np.empty(L, dtype=np.int64)
    lst_e = np.empty(L, dtype=np.bool_)
    visited = np.empty(4 * L + 16, dtype=np.int64)
    cand = np.empty(R + 1, dtype=np.int64)
    no_memo = np.empty(0)
    no_tags = np.empty(0, dtype=np.int64)
    for ps in range(orders.shape[0]):
        alpha = alphas[ps]
        for t in range(n):
            p = orders[ps, t]
            tag += 1
            _, n_vis, visited = _greedy(points, conf, nbrs, degree, points[p], conf[p], medoid, L, seen, tag,
                                        lst_d, lst_i, lst_e, True, no_memo, no_tags, 0, 0, _NO_BUDGET, no_memo,
                                        no_tags, visited)
            need = n_vis + R
            if cand.shape[0] < need:
                cand = np.empty(2 * need, dtype=np.int64)
            for s in range(n_vis):
                cand[s] = visited[s]
            for s in range(degree[p]):
                cand[n_vis + s] = nbrs[p, s]
            mtag += 1
            degree[p] = _robust_prune(p, cand, n_vis + degree[p], points, conf, alpha, R, mark, mtag, nbrs[p])
            for s in range(degree[p]):
                j = nbrs[p, s]
                present = False
                for r in range(degree[j]):
                    if nbrs[j, r] == p:
                        present = True
                        break
                if present:
                    continue
                if degree[j] < R:
                    nbrs[j, degree[j]] = p
                    degree[j] += 1
                else:
                    for r in range(R):
                        cand[r] = nbrs[j, r]
                    cand[R] = p
                    mtag += 1
                    degree[j] = _robust_prune(j, cand, R + 1, points, conf, alpha, R, mark, mtag, nbrs[j])
    return nbrs, degree


@nb.njit(cache=True, parallel=True)
def _search(points, conf, nbrs, medoid, queries, q_conf, k, L, budget, seed, n_chunks):
    """Greedy search (:func:`_greedy`) with restarts under a budget (see module docstring)."""
    m = queries.shape[0]
    n = points.shape[0]
    degree = np.full(n, nbrs.shape[1], dtype=np.int64)  # rows end at the first -1
    out_d = np.full((m, k), np.inf)
    out_i = np.full((m, k), -1, dtype=np.int64)
    samples = np.zeros(m, dtype=np.int64)
    per = (m + n_chunks - 1) // n_chunks
    for ch in nb.prange(n_chunks):
        evaluated = np.zeros(n, dtype=np.int64)  # query tag when memo holds its delta
        in_round = np.zeros(n, dtype=np.int64)  # round tag when seen in this round
        memo = np.empty(n)
        lst_d = np.empty(L)
        lst_i = np.empty(L, dtype=np.int64)
        lst_e = np.empty(L, dtype=np.bool_)
        no_visits = np.empty(0, dtype=np.int64)
        qtag = 0
        rtag = 0
        for i in range(ch * per, min(m, (ch + 1) * per)):
            limit = budget[i]
            qtag += 1
            state = seed ^ (np.uint64(i) * np.uint64(0xD1B54A32D192ED03))
            cnt = 0
            start = np.int64(medoid)
            while cnt < limit:
                rtag += 1
                cnt, _, _ = _greedy(points, conf, nbrs, degree, queries[i], q_conf[i], start, L, in_round, rtag,
                                    lst_d, lst_i, lst_e, False, memo, evaluated, qtag, cnt, limit, out_d[i],
                                    out_i[i], no_visits)
                if limit == _NO_BUDGET or cnt >= limit or cnt >= n:
                    break
                # --- restart from a random point not evaluated yet
                start = np.int64(-1)
                for _ in range(_RESTART_DRAWS):
                    state, z = _splitmix64(state)
                    cand = np.int64(z % np.uint64(n))
                    if evaluated[cand] != qtag:
                        start = cand
                        break
                if start < 0:
                    state, z = _splitmix64(state)
                    off = np.int64(z % np.uint64(n))
                    for t in range(n):
                        cand = (off + t) % n
                        if evaluated[cand] != qtag:
                            start = cand
                            break
                if start < 0:
                    break
            samples[i] = cnt
    return out_i, out_d, samples


# --------------------------------------------------------------------------- index


class VamanaIndex:
    """Vamana graph over Poincare points, searched greedily by ``delta``.

    Parameters
    ----------
    R : int, default 10
        Largest out-degree (the paper: 10 for 10-D, 20 for 100-D).
    L : int, default 10
        List size of the greedy searches during the build, and the default
        list size of :meth:`search` (the paper: 10 for 10-D, 40 for 100-D).
    alpha : float, default 1.5
        RobustPrune parameter, ``>= 1``, applied to the Poincare distance.
    passes : int, default 2
        Build passes; the first uses ``alpha = 1`` when there are several.
    random_state : int, default 0
        Seed of the initial graph, the pass orders and the medoid sample.

    Attributes
    ----------
    neighbors_ : ndarray of shape (n, R), int32
        Out-neighbours of each point, ``-1`` padded.
    medoid_ : int
        Start point of every search.

    Examples
    --------
    >>> import numpy as np
    >>> from hypann.geometry._kernels import conformal_factor
    >>> X = np.random.default_rng(0).uniform(-0.5, 0.5, (500, 3))
    >>> index = VamanaIndex(R=8, L=20).build(X, conformal_factor(X))
    >>> ids, deltas, samples = index.search(X[:2], conformal_factor(X[:2]), 1)
    >>> ids[:, 0].tolist()
    [0, 1]
    """

    #: kernels every build runs (their on-disk cache shows whether a first build compiles)
    first_use_kernels = (_medoid, _build_graph)

    def __init__(self, *, R: int = 10, L: int = 10, alpha: float = 1.5, passes: int = 2, random_state: int = 0):
        self.R = R
        self.L = L
        self.alpha = alpha
        self.passes = passes
        self.random_state = random_state

    def build(self, points, conformal):
        """Build the graph on validated float64 ``points`` (n, d) with their stored ``conformal``.

        Returns
        -------
        self
        """
        R = check_positive_int(self.R, "R")
        L = check_positive_int(self.L, "L")
        passes = check_positive_int(self.passes, "passes")
        alpha = check_real(self.alpha, "alpha", low=1.0)
        check_seed(self.random_state, "random_state", allow_none=False)
        points, conformal = check_stored_points(points, conformal)
        n = points.shape[0]
        rng = np.random.default_rng(self.random_state)
        nbrs, degree = _random_graph(n, R, rng.random((n, R)))
        sample = rng.choice(n, size=min(n, MEDOID_SAMPLE), replace=False).astype(np.int64)
        medoid = int(_medoid(points, conformal, sample))
        orders = np.stack([rng.permutation(n) for _ in range(passes)]).astype(np.int64)
        alphas = np.full(passes, alpha)
        if passes > 1:
            alphas[0] = 1.0
        nbrs, degree = _build_graph(points, conformal, nbrs, degree, medoid, L, R, alphas, orders)
        self.points_ = points
        self.conformal_ = conformal
        self.neighbors_ = nbrs
        self.medoid_ = medoid
        self.n_points_, self.dim_ = points.shape
        logger.debug("Vamana built: n=%d, R=%d, L=%d, mean degree %.2f", n, R, L, degree.mean())
        return self

    def to_arrays(self, *, include_points=True) -> dict:
        """The fitted index as a dict of arrays (for :func:`numpy.savez`); see :meth:`from_arrays`.

        ``include_points=False`` leaves out ``points`` and ``conformal`` (the
        owner saves them once and hands them back to :meth:`from_arrays`).
        """
        self._check_fitted()
        own = {"points": self.points_, "conformal": self.conformal_} if include_points else {}
        return {
            **own,
            "neighbors": self.neighbors_,
            "medoid": np.int64(self.medoid_),
            "settings": np.array([self.R, self.L, self.passes, self.random_state], dtype=np.int64),
            "alpha": np.float64(self.alpha),
        }

    @classmethod
    def from_arrays(cls, arrays, *, points=None, conformal=None):
        """Rebuild a fitted index from :meth:`to_arrays` output (or an ``np.load`` of it).

        The arrays are untrusted (e.g. read from a file): they go through
        :meth:`validate_state` first, so a damaged state raises ``ValueError``
        naming the field instead of crashing or answering wrongly.

        Parameters
        ----------
        arrays : mapping of str to ndarray
        points, conformal : ndarray, optional
            The index's points and conformal factors. When ``arrays`` holds its
            own copy (files written before the graph shared the index's
            points), that copy must equal them; when it holds none
            (``to_arrays(include_points=False)``), the graph refers to these.
        """
        try:
            has_points = "points" in arrays or "conformal" in arrays
        except TypeError:
            has_points = True  # not a mapping: validate_state says so
        if not has_points:
            if points is None or conformal is None:
                raise ValueError("VamanaIndex state holds no points: give the index's points and conformal factors")
            arrays = {**arrays, "points": np.asarray(points), "conformal": np.asarray(conformal)}
            points = conformal = None  # the values are checked once, below, not compared with themselves
        arrays = cls.validate_state(arrays, points=points, conformal=conformal)
        R, L, passes, random_state = (int(v) for v in arrays["settings"])
        index = cls(R=R, L=L, alpha=float(arrays["alpha"]), passes=passes, random_state=random_state)
        index.points_ = arrays["points"]
        index.conformal_ = arrays["conformal"]
        index.neighbors_ = arrays["neighbors"]
        index.medoid_ = int(arrays["medoid"])
        index.n_points_, index.dim_ = index.points_.shape
        return index

    @staticmethod
    def validate_state(arrays, *, points=None, conformal=None) -> dict:
        """Check a stored graph completely; returns its arrays (C-contiguous, exact dtypes).

        Checked (every failure is a ``ValueError`` naming the field): exactly
        the names of :meth:`to_arrays`; ``points`` (n, d) float64 finite,
        ``conformal`` (n,) float64 in ``(0, 1]`` (equal to ``points`` /
        ``conformal`` when those are given); ``settings`` int64
        ``[R, L, passes, random_state]`` with ``R, L, passes >= 1`` and
        ``random_state >= 0``; ``alpha`` a finite float64 ``>= 1``;
        ``neighbors`` int32 of shape (n, R) with ids in ``[-1, n)``, no point
        its own neighbour, no id twice in a row and ``-1`` only as padding at
        the end of a row (what :meth:`build` produces); ``medoid`` an int64 in
        ``[0, n)``.
        """
        owner = "VamanaIndex"
        check_state_fields(arrays, (*_STATE, "settings", "alpha"), owner)

        def get(field, dtype, shape):
            return check_state_array(arrays, field, dtype, shape, owner)

        def bad(field, message):
            return state_error(owner, field, message)

        pts = get("points", np.float64, (None, None))
        n, d = pts.shape
        if n < 1 or d < 1:
            raise bad("points", f"must hold at least one point of at least one dimension, got shape {pts.shape}")
        if points is not None and np.shape(points) != (n, d):
            raise bad("points", f"must have the shape of the index's points {np.shape(points)}, got {pts.shape}")
        if not np.isfinite(pts).all():
            raise bad("points", f"contains NaN or inf (first at {first_bad(~np.isfinite(pts))})")
        conf = get("conformal", np.float64, (n,))
        if not np.all((conf > 0.0) & (conf <= 1.0)):
            t = first_bad(~((conf > 0.0) & (conf <= 1.0)))
            raise bad("conformal", f"conformal factors 1-|x|^2 must be in (0, 1], got {conf[t]!r} at row {t}")
        if points is not None:
            if not np.array_equal(pts, np.asarray(points)):
                raise bad("points", "the graph's copy of the points differs from the index's points")
        if conformal is not None and not np.array_equal(conf, np.asarray(conformal)):
            raise bad("conformal", "the graph's conformal factors differ from those of the index's points")
        settings = get("settings", np.int64, (4,))
        for name, value in zip(("R", "L", "passes"), settings[:3]):
            if value < 1:
                raise bad("settings", f"{name} must be >= 1, got {name}={int(value)}")
        if settings[3] < 0:
            raise bad("settings", f"random_state must be >= 0, got random_state={int(settings[3])}")
        alpha = get("alpha", np.float64, ())
        if not (np.isfinite(alpha) and alpha >= 1.0):
            raise bad("alpha", f"must be a finite number >= 1, got {float(alpha)!r}")
        R = int(settings[0])
        nbrs = get("neighbors", np.int32, (n, R))
        out = (nbrs < -1) | (nbrs >= n)
        if out.any():
            i, s = first_bad(out)
            raise bad("neighbors", f"ids must be in [-1, {n}), got {int(nbrs[i, s])} in row {i}")
        loops = nbrs == np.arange(n, dtype=np.int32)[:, None]
        if loops.any():
            i, _ = first_bad(loops)
            raise bad("neighbors", f"row {i} lists the point itself as a neighbour")
        valid = nbrs >= 0
        gap = ~valid[:, :-1] & valid[:, 1:]
        if gap.any():
            i, _ = first_bad(gap)
            raise bad("neighbors", f"row {i} has a neighbour after -1 padding (padding must end a row)")
        ordered = np.sort(nbrs, axis=1)
        dup = (ordered[:, 1:] == ordered[:, :-1]) & (ordered[:, 1:] >= 0)
        if dup.any():
            i, _ = first_bad(dup)
            raise bad("neighbors", f"row {i} lists the same neighbour twice")
        medoid = get("medoid", np.int64, ())
        if not 0 <= medoid < n:
            raise bad("medoid", f"the start point must be in [0, {n}), got {int(medoid)}")
        return {"points": pts, "conformal": conf, "neighbors": nbrs, "medoid": medoid, "settings": settings,
                "alpha": alpha}

    @property
    def nbytes(self) -> int:
        """Memory of the graph (bytes), not counting the points."""
        return int(self.neighbors_.nbytes) if hasattr(self, "neighbors_") else 0

    def _check_fitted(self):
        if not hasattr(self, "neighbors_"):
            raise ValueError(f"this {type(self).__name__} is not built yet; call build(points, conformal) first")

    def search(self, queries, q_conformal, k, *, ef=None, budget=None, random_state=0, L=None) -> GraphSearchResult:
        """Greedy search from the medoid; with a budget, random restarts until it is used.

        Parameters
        ----------
        queries : ndarray of shape (m, d)
        q_conformal : ndarray of shape (m,)
            Stored ``1-|q|^2`` of the queries.
        k : int
        ef : int, optional
            Search list size; ``max(ef, k)`` is used. Default: the build's
            list size ``L``.
        budget : None, int or ndarray of shape (m,)
            Distance evaluations allowed per query (hard limit). ``None``: one
            greedy search.
        random_state : int, default 0
            Seed of the restart points.
        L : int, optional
            Deprecated alias of ``ef``.

        Returns
        -------
        GraphSearchResult
            ``(ids, deltas, samples)``, ids int64 (m, k), deltas ascending.
        """
        self._check_fitted()
        k = check_positive_int(k, "k")
        if L is not None:
            if ef is not None:
                raise ValueError(f"give ef or its deprecated alias L, not both (ef={ef!r}, L={L!r})")
            warnings.warn("L is deprecated for the Vamana search; use ef (the search list size)",
                          DeprecationWarning, stacklevel=2)
            ef, name = L, "L"
        else:
            name = "ef"
        ef = self.L if ef is None else ef
        list_size = max(check_positive_int(ef, name), k)
        queries, q_conformal = check_stored_queries(queries, q_conformal, self.dim_)
        m = queries.shape[0]
        if budget is None:
            b = np.full(m, _NO_BUDGET, dtype=np.int64)
        else:
            b = np.asarray(budget)
            if b.ndim > 1 or (b.ndim == 1 and b.shape[0] != m) or b.dtype.kind not in "iu":
                raise ValueError(
                    f"budget must be None, an integer or an integer array of shape ({m},), got {budget!r}"
                )
            b = np.empty(m, dtype=np.int64)  # fresh writable array: one numba signature
            b[:] = np.maximum(np.asarray(budget), 0)
        seed = np.uint64(check_seed(random_state, "random_state", allow_none=False) & 0xFFFFFFFFFFFFFFFF)
        n_chunks = max(1, min(m, 4 * nb.get_num_threads()))
        # read-only views of the graph, built (writable) or loaded (read-only): one compiled search
        ids, deltas, samples = _search(
            read_only(self.points_), read_only(self.conformal_), read_only(self.neighbors_), self.medoid_, queries,
            q_conformal, k, list_size, b, seed, n_chunks,
        )
        return GraphSearchResult(ids, deltas, samples)

    def __repr__(self):
        fitted = f", n_points={self.n_points_}, dim={self.dim_}" if hasattr(self, "neighbors_") else ""
        return (
            f"{type(self).__name__}(R={self.R}, L={self.L}, alpha={self.alpha}, passes={self.passes}, "
            f"random_state={self.random_state}{fitted})"
        )
