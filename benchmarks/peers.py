"""The peers of hypann, run fairly on the same hyperbolic k-NN problem.

Each ``run_*`` function builds one peer once per build setting, sweeps its
query-time setting and returns one row (a dict) per setting::

    {"method", "params", "recall_at_1", "recall_at_k", "mean_ratio",
     "mean_max_ratio", "max_ratio", "queries_per_s", "query_s", "build_s",
     "index_bytes", ...}

How each peer is set up:

* **usearch** (HNSW) with the Poincare surrogate compiled by numba as a C
  callback (``usearch.index.CompiledMetric`` over a ``numba.cfunc`` of kind
  ``ArrayArray``). Points are stored in float64 (``dtype="f64"`` explicitly)
  as ``(x, 1-|x|^2)`` so the metric never forms a norm; it returns, as the
  float32 usearch requires,

  .. math::

      \\delta(x, y) = \\frac{\\|x-y\\|^2}{(1-\\|x\\|^2)(1-\\|y\\|^2)},

  a monotone surrogate of :math:`d = 2\\operatorname{asinh}\\sqrt\\delta`
  (float32 keeps a relative precision of ``6e-8`` on ``delta``, finer than on
  ``d``). Sweep ``expansion_search``.
* **pynndescent** (``NNDescent``) with a numba-jitted Poincare callable (it
  has no built-in ``"poincare"``) on the same ``(x, 1-|x|^2)`` rows.
  pynndescent casts the data to float32: the coordinates lose digits near the
  boundary, the stored conformal factor keeps its relative precision. Its
  first compile for a new metric is slow, so a warm-up on tiny data runs
  first and is reported apart (``warmup_compile_s``). Sweep ``epsilon``.
* **hnswlib** (float32, space ``"l2"``) on the Poincare coordinates, asked
  for ``C`` candidates that are re-ranked by exact float64 hyperbolic
  ``delta``; sweep ``ef`` for ``C`` in (10, 100, 300).
* **faiss** ``IndexFlatIP`` on the Lorentz lift, queried with the time
  coordinate negated: :math:`\\langle(-q_0, q_s), (x_0, x_s)\\rangle =
  -\\cosh d(q, x)`, exact in exact arithmetic, broken by float32 near the
  boundary (terms up to ``4/((1-|q|^2)(1-|x|^2))``). One setting.

Every peer is single-threaded (``threads=1``, ``n_jobs=1``,
``set_num_threads(1)``, ``omp_set_num_threads(1)``; run the caller with
``NUMBA_NUM_THREADS=1``). Query times are medians over ``repeats`` runs of the
whole batch after one untimed warm-up. Quality is measured on *exact float64
distances recomputed for the returned ids* (never the peer's own float32
distances): recall@k by distance threshold against the float64 ground truth
(:func:`hypann.eval.metrics.recall`) and the pointwise approximation ratios
``d(q, n_j) / d(q, n*_j)`` of :func:`hypann.eval.metrics.approximation_ratios`.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from _common import median_time
from hypann._runtime import read_only
from hypann.eval import distances_of_ids
from hypann.eval.metrics import approximation_ratios, recall
from hypann.geometry import _kernels
from hypann.geometry.poincare import dist_from_delta

# The query settings swept by default (build settings are keyword arguments).
USEARCH_EXPANSIONS = (16, 32, 64, 128, 256)
PYNND_EPSILONS = (0.0, 0.1, 0.2, 0.4, 0.8)
HNSWLIB_SWEEP = ((10, (16, 64, 256)), (100, (100, 200, 400)), (300, (300, 600)))


# ---------------------------------------------------------------------------
# the problem and its scoring
# ---------------------------------------------------------------------------
@dataclass
class Problem:
    """One k-NN problem with its exact float64 answer.

    Attributes
    ----------
    base, queries : ndarray (n, d), (m, d) float64 Poincare points
    base_conformal, query_conformal : ndarray (n,), (m,)
        Compensated ``1-|x|^2``.
    k : int
    true_ids : ndarray (m, k) int64
    true_distances : ndarray (m, k) float64, ascending
    truth_s : float
        Seconds the exact numba scan took (single thread if NUMBA_NUM_THREADS=1).
    """

    base: np.ndarray
    queries: np.ndarray
    base_conformal: np.ndarray
    query_conformal: np.ndarray
    k: int
    true_ids: np.ndarray
    true_distances: np.ndarray
    truth_s: float

    @property
    def dim(self) -> int:
        return self.base.shape[1]

    def lifted(self, dtype=np.float64):
        """Rows ``(x, 1-|x|^2)`` of the base and the queries (shape (., d+1))."""
        b = np.hstack([self.base, self.base_conformal[:, None]]).astype(dtype)
        q = np.hstack([self.queries, self.query_conformal[:, None]]).astype(dtype)
        return np.ascontiguousarray(b), np.ascontiguousarray(q)


def make_problem(base, queries, k) -> Problem:
    """Ground truth by exact float64 scan (explicit differences, ranks by ``delta``)."""
    base = np.ascontiguousarray(base, dtype=np.float64)
    queries = np.ascontiguousarray(queries, dtype=np.float64)
    cx = _kernels.conformal_factor(base)
    cq = _kernels.conformal_factor(queries)
    points, conf = read_only(base), read_only(cx)  # the types the library's scans compile the kernel for
    _kernels.brute_knn_delta(queries[:1], cq[:1], points[:50], conf[:50], 1)  # compile outside the timing
    t0 = time.perf_counter()
    ids, deltas = _kernels.brute_knn_delta(queries, cq, points, conf, k)
    truth_s = time.perf_counter() - t0
    return Problem(base, queries, cx, cq, int(k), ids, dist_from_delta(deltas), truth_s)


def exact_neighbours(problem: Problem, ids):
    """Exact float64 distances of the returned ids (:func:`hypann.eval.distances_of_ids`), rows re-sorted
    ascending.

    Ids out of range and repeated ids within a row become ``-1`` / ``inf``
    (a peer cannot score twice with one point).
    """
    ids = np.array(ids, dtype=np.int64, copy=True)
    ids[(ids < 0) | (ids >= len(problem.base))] = -1
    dist = distances_of_ids(problem.queries, problem.base, ids)
    order = np.argsort(dist, axis=1, kind="stable")
    ids = np.take_along_axis(ids, order, 1)
    dist = np.take_along_axis(dist, order, 1)
    ids[np.isinf(dist)] = -1  # the repeats distances_of_ids left out
    return ids, dist


def score(problem: Problem, found_distances) -> dict:
    """Recall@1, recall@k and approximation ratios of exact found distances (m, >=k).

    Ratios are taken over the slots that hold a point (``missing`` is the
    fraction of the ``m*k`` slots left empty, e.g. an LSH probe that found
    fewer than k candidates; empty slots count as misses in the recalls).
    """
    k = problem.k
    found = np.asarray(found_distances, dtype=np.float64)
    if found.shape[1] < k:
        found = np.hstack([found, np.full((len(found), k - found.shape[1]), np.inf)])
    ratios = approximation_ratios(found[:, :k], problem.true_distances, k).ratios
    ok = np.isfinite(found[:, :k])
    with np.errstate(invalid="ignore"):
        per_query_max = np.where(ok, ratios, -np.inf).max(axis=1)
    has_any = ok.any(axis=1)
    return {
        "recall_at_1": recall(found, problem.true_distances, 1),
        "recall_at_k": recall(found, problem.true_distances, k),
        "mean_ratio": float(ratios[ok].mean()) if ok.any() else float("nan"),
        "mean_max_ratio": float(per_query_max[has_any].mean()) if has_any.any() else float("nan"),
        "max_ratio": float(ratios[ok].max()) if ok.any() else float("nan"),
        "missing": float(1.0 - ok.mean()),
    }


def _row(problem, method, params, ids, query_s, build_s, index_bytes, **extra):
    _, dist = exact_neighbours(problem, ids)
    row = {"method": method, "params": params, **score(problem, dist),
           "queries_per_s": len(problem.queries) / query_s, "query_s": query_s,
           "build_s": build_s, "index_bytes": index_bytes}
    row.update(extra)
    return row


def _top_k(problem, cand):
    """Exact float64 re-rank of candidate ids (m, C): the k smallest ``delta``."""
    k = problem.k
    deltas = _kernels.delta_to_candidates(problem.queries, problem.query_conformal, problem.base,
                                          problem.base_conformal, cand)
    if cand.shape[1] > k:
        part = np.argpartition(deltas, k - 1, axis=1)[:, :k]
        cand = np.take_along_axis(cand, part, 1)
        deltas = np.take_along_axis(deltas, part, 1)
    order = np.argsort(deltas, axis=1, kind="stable")
    return np.take_along_axis(cand, order, 1)


# ---------------------------------------------------------------------------
# usearch
# ---------------------------------------------------------------------------
def usearch_poincare_metric(dim):
    """A usearch ``CompiledMetric`` computing ``delta`` on float64 rows ``(x, 1-|x|^2)``.

    Returns ``(metric, cfunc)``; keep the ``cfunc`` alive as long as the index.
    """
    from numba import carray, cfunc, types
    from usearch.index import CompiledMetric, MetricKind, MetricSignature

    ndim = dim + 1

    @cfunc(types.float32(types.CPointer(types.float64), types.CPointer(types.float64)))
    def poincare_delta(a, b):
        x = carray(a, ndim)
        y = carray(b, ndim)
        s = 0.0
        for j in range(dim):
            t = x[j] - y[j]
            s += t * t
        return s / (x[dim] * y[dim])

    metric = CompiledMetric(pointer=poincare_delta.address, kind=MetricKind.L2sq,
                            signature=MetricSignature.ArrayArray)
    return metric, poincare_delta


def usearch_ids(index, queries, k):
    """The ``k`` nearest keys of each query in a usearch ``index`` (one thread), ``-1`` past its found count."""
    found = index.search(queries, k, threads=1)
    keys = np.asarray(found.keys).astype(np.int64)
    keys[np.arange(k)[None, :] >= np.asarray(found.counts)[:, None]] = -1
    return keys


def run_usearch(problem, *, connectivity=16, expansion_add=128, expansions=USEARCH_EXPANSIONS, repeats=3):
    """usearch HNSW with the numba Poincare metric, float64 storage, one thread."""
    from usearch.index import Index

    base, queries = problem.lifted(np.float64)
    t0 = time.perf_counter()
    metric, keep_alive = usearch_poincare_metric(problem.dim)
    compile_s = time.perf_counter() - t0
    index = Index(ndim=problem.dim + 1, metric=metric, dtype="f64", connectivity=connectivity,
                  expansion_add=expansion_add)
    if str(index.dtype).lower() not in ("f64", "scalarkind.f64"):
        raise RuntimeError(f"usearch stores {index.dtype}, expected f64")
    t0 = time.perf_counter()
    index.add(np.arange(len(base), dtype=np.uint64), base, threads=1)
    build_s = time.perf_counter() - t0
    rows = []
    for ef in expansions:
        index.expansion_search = int(ef)

        query_s, ids = median_time(lambda: usearch_ids(index, queries, problem.k), repeats=repeats)
        rows.append(_row(problem, "usearch HNSW + numba Poincare (f64)",
                         {"connectivity": connectivity, "expansion_add": expansion_add, "expansion_search": ef},
                         ids, query_s, build_s, int(index.memory_usage), metric_compile_s=compile_s))
    del keep_alive
    return rows


# ---------------------------------------------------------------------------
# pynndescent
# ---------------------------------------------------------------------------
def _pynnd_metric():
    import numba

    @numba.njit
    def poincare_delta(x, y):
        """``|x-y|^2 / (x[-1] y[-1])`` on rows ``(x, 1-|x|^2)``, accumulated in float64."""
        d = x.shape[0] - 1
        s = 0.0
        for j in range(d):
            t = np.float64(x[j]) - np.float64(y[j])
            s += t * t
        return s / (np.float64(x[d]) * np.float64(y[d]))

    return poincare_delta


_PYNND_METRIC = None


def _pynnd_split_points(dim):
    """Points above which pynndescent's forest (0.7) splits a node breadth-first, in kernels of their own
    that a smaller warm-up never compiles: its ``LOCAL_SUBTREE_BYTES`` over a float32 row of ``dim + 1``
    values; 0 for a pynndescent without that forest."""
    try:
        from pynndescent.hybrid_forest import LOCAL_SUBTREE_BYTES
    except ImportError:
        return 0
    return LOCAL_SUBTREE_BYTES // (4 * (dim + 1))


def pynndescent_warmup(dim, *, n=None, seed=0):
    """Compile pynndescent's pipeline for the Poincare metric on small data; returns seconds.

    ``n`` (default: 300, or more than :func:`_pynnd_split_points`, about 24,000 at 10-D) points, so
    that the forest's breadth-first splits compile here and not inside the first timed build (with an
    empty numba cache, a 100,000-point build after the 300-point warm-up compiled them).
    """
    global _PYNND_METRIC
    from pynndescent import NNDescent

    if _PYNND_METRIC is None:
        _PYNND_METRIC = _pynnd_metric()
    if n is None:
        n = max(300, _pynnd_split_points(dim) + 100)
    rng = np.random.default_rng(seed)
    x = rng.uniform(-1, 1, (n, dim)) * (0.5 / np.sqrt(dim))
    lifted = np.hstack([x, (1.0 - np.einsum("ij,ij->i", x, x))[:, None]])
    t0 = time.perf_counter()
    idx = NNDescent(lifted, metric=_PYNND_METRIC, n_neighbors=10, random_state=0, n_jobs=1)
    idx.prepare()
    idx.query(lifted[:5], k=5, epsilon=0.1)
    return time.perf_counter() - t0


def run_pynndescent(problem, *, n_neighbors=30, epsilons=PYNND_EPSILONS, repeats=3):
    """pynndescent ``NNDescent`` with the numba Poincare callable (data cast to float32)."""
    from pynndescent import NNDescent

    warmup_s = pynndescent_warmup(problem.dim)
    base, queries = problem.lifted(np.float64)  # pynndescent casts to float32 itself
    t0 = time.perf_counter()
    index = NNDescent(base, metric=_PYNND_METRIC, n_neighbors=n_neighbors, random_state=0, n_jobs=1)
    build_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    index.prepare()
    prepare_s = time.perf_counter() - t0
    nbytes = _pynnd_bytes(index)
    rows = []
    for eps in epsilons:
        query_s, (ids, _) = median_time(lambda eps=eps: index.query(queries, k=problem.k, epsilon=eps),
                                        repeats=repeats)
        rows.append(_row(problem, "pynndescent + numba Poincare (f32 data)",
                         {"n_neighbors": n_neighbors, "epsilon": eps}, ids, query_s, build_s + prepare_s, nbytes,
                         warmup_compile_s=warmup_s, construct_s=build_s, prepare_s=prepare_s))
    return rows


def _pynnd_bytes(index):
    """Raw data + search graph + search trees (pynndescent keeps them in private attributes)."""
    total = 0
    try:
        total += index._raw_data.nbytes
        g = index._search_graph
        total += g.data.nbytes + g.indices.nbytes + g.indptr.nbytes
        for tree in index._search_forest:
            for a in (tree.hyperplanes, tree.offsets, tree.children, tree.indices):
                total += a.nbytes
    except AttributeError:
        return None
    return int(total)


# ---------------------------------------------------------------------------
# hnswlib + exact re-rank
# ---------------------------------------------------------------------------
def run_hnswlib_rerank(problem, *, M=16, ef_construction=200, sweep=HNSWLIB_SWEEP, repeats=3):
    """hnswlib L2 on float32 Poincare coordinates, top-``C`` re-ranked by exact float64 ``delta``."""
    import hnswlib

    x32 = np.ascontiguousarray(problem.base, dtype=np.float32)
    q32 = np.ascontiguousarray(problem.queries, dtype=np.float32)
    t0 = time.perf_counter()
    index = hnswlib.Index(space="l2", dim=problem.dim)
    index.init_index(max_elements=len(x32), M=M, ef_construction=ef_construction, random_seed=100)
    index.set_num_threads(1)
    index.add_items(x32, np.arange(len(x32)), num_threads=1)
    build_s = time.perf_counter() - t0
    nbytes = int(index.index_file_size()) + problem.base.nbytes + problem.base_conformal.nbytes
    rows = []
    for C, efs in sweep:
        for ef in efs:
            ef = max(int(ef), C)

            def query(C=C, ef=ef):
                index.set_ef(ef)
                labels, _ = index.knn_query(q32, k=C, num_threads=1)
                return _top_k(problem, labels.astype(np.int64))

            query_s, ids = median_time(query, repeats=repeats)
            rows.append(_row(problem, "hnswlib L2 (f32) + f64 re-rank", {"M": M, "ef_construction": ef_construction,
                                                                        "candidates": C, "ef": ef},
                             ids, query_s, build_s, nbytes))
    return rows


# ---------------------------------------------------------------------------
# faiss on the Lorentz lift
# ---------------------------------------------------------------------------
def lorentz_lift(points, conformal):
    """Hyperboloid coordinates ``((1+|x|^2)/(1-|x|^2), 2x/(1-|x|^2))`` from the stored conformal factor."""
    x0 = (2.0 - conformal) / conformal
    return np.hstack([x0[:, None], 2.0 * points / conformal[:, None]])


def run_faiss_lorentz(problem, *, repeats=3):
    """faiss ``IndexFlatIP`` on the Lorentz lift in float32 (queries with ``-x0``)."""
    import faiss

    faiss.omp_set_num_threads(1)
    xb = np.ascontiguousarray(lorentz_lift(problem.base, problem.base_conformal), dtype=np.float32)
    xq = lorentz_lift(problem.queries, problem.query_conformal)
    xq[:, 0] = -xq[:, 0]
    xq = np.ascontiguousarray(xq, dtype=np.float32)
    t0 = time.perf_counter()
    index = faiss.IndexFlatIP(xb.shape[1])
    index.add(xb)
    build_s = time.perf_counter() - t0
    query_s, (_, ids) = median_time(lambda: index.search(xq, problem.k), repeats=repeats)
    return [_row(problem, "faiss IndexFlatIP on Lorentz lift (f32)", {}, ids, query_s, build_s, int(xb.nbytes))]


PEERS = {
    "usearch": run_usearch,
    "pynndescent": run_pynndescent,
    "hnswlib": run_hnswlib_rerank,
    "faiss": run_faiss_lorentz,
}


def run_peers(problem, *, names=tuple(PEERS), settings=None, repeats=3, progress=print):
    """Run the named peers; ``settings`` maps a peer name to keyword arguments of its function.

    A peer whose library is missing is skipped with a message.
    """
    settings = settings or {}
    rows = []
    for name in names:
        t0 = time.perf_counter()
        try:
            got = PEERS[name](problem, repeats=repeats, **settings.get(name, {}))
        except ImportError as exc:
            progress(f"skipping {name}: {exc}")
            continue
        for r in got:
            progress(f"  {r['method']:45s} {str(r['params']):90s} recall@{problem.k}={r['recall_at_k']:.4f} "
                     f"q/s={r['queries_per_s']:.1f}")
        progress(f"{name}: {time.perf_counter() - t0:.1f}s")
        rows.extend(got)
    return rows
