"""Spherical-Shell-HyperbolicNN (Wu & Charikar, Algorithms 3, 5-8): approximate k-NN with any oracle.

The data are split into shells of multiplicative width ``w`` by conformal
factor (:mod:`hypann.geometry.bands`, Spherical-Shell-Partition). Within one
shell ``1-|x|^2`` varies by at most a factor ``w``, so the Euclidean nearest
point of a shell is a hyperbolic ``sqrt(w)``-approximation there; each shell
holds its own Euclidean oracle (any oracle of the protocol; empty shells hold
none and cost nothing).

Deterministic search (Algorithm 3): probe the query's shell, then the shells
above and below in Choose-Band order (Algorithm 7: the side that maximizes
the radius of the hyperbolic ball around ``q`` covered by the probed shells),
until Check-Intersection (Algorithm 6) rules out both next shells for the
ball through the current k-th best. Theorem 3: with a (1+eps)-approximate
oracle every answer satisfies ``d(q, n_H) <= sqrt(w) (1+eps) d(q, n*)``,
pointwise for each rank in the k-NN generalization.

Randomized search (Algorithm 8): shells in a uniformly random order; the
first is probed fully, every later shell ``b`` first gets a (1+eps, R)
near-neighbour decision query with

.. math::

    R^2 = \\frac{\\delta_D\\,(1-\\|q\\|^2)}{w^{b}\\,(1+\\epsilon)^2},\\qquad
    \\delta_D = \\frac{\\cosh D - 1}{2},

(``D`` the current k-th best distance) and is probed fully only on a "yes",
which certifies a strictly closer point in that shell. Lemma: ``O(ln N)``
full probes in expectation over ``N`` shells (reported as
``stats.extra["full_probes"]``).

Beyond the paper (``recenter=True``): inside every probed shell, hypann also
runs the Recentering step on that shell's oracle, asking for the Euclidean
neighbours of the centre of the ball through the current k-th best until the
top-k stops changing. The appendix remarks that this makes the shell search
exact: a point strictly inside the final k-th ball lies in a probed shell and
strictly inside the (larger or equal) ball that shell was last recentred on,
so the shell's recentering would have found it. With an exact oracle the
result is exact; with an approximate one it is markedly more accurate.
In float64 "would have found it" needs the rounding-safe certificate of
:mod:`hypann.search.certify`: with an exact oracle the recentring calls ask
for ``k + 1`` neighbours, and a shell's recentring stops only once a call
proves that it returned every point of the shell with ``delta`` below the
k-th best, asking for ``2(k+1)``, ``4(k+1)``, ... neighbours when the top-k
stopped changing without that proof (``stats.extra["rechecks"]``). The
result then equals float64 brute force (ties in ``delta`` may be broken
differently) at any norm.

Budget: ``samples <= budget`` per query, exactly, with every built-in
oracle, for both variants (decision calls included): each call is given
the samples the query has left (see
:meth:`~hypann.oracles.base.EuclideanOracle.knn`). A third-party oracle
that counts its evaluations but cannot stop early may overshoot by the
evaluations of its last call.

Batching: each round every unfinished query picks one shell; queries are
grouped by shell and each shell's oracle is called once per round.
"""

from __future__ import annotations

import copy

import numpy as np

from hypann._params import Param
from hypann.geometry import _kernels
from hypann.geometry.bands import (
    ball_meets_shell,
    covered_radius,
    hyperbolic_norm_from_conformal,
    shell_of,
    shell_radii,
)
from hypann.geometry.poincare import dist_from_delta, euclidean_ball_from_delta
from hypann.result import SearchStats
from hypann.search.base import SearchAlgorithm
from hypann.search.certify import enclosing_sq_radius, is_certified
from hypann.search.recentering import MAX_ROUNDS


class SphericalShellSearch(SearchAlgorithm):
    """``sqrt(width)``-approximate k-NN over shells, each with its own oracle.

    Parameters
    ----------
    width : float, default 3.0
        Multiplicative shell width ``w > 1`` (paper: 3). Smaller is more
        accurate (bound ``sqrt(w)``) and probes more shells.
    n_shells : int, optional
        Number of shells (paper: 25 "for extra tolerance"); default: just
        enough for the data's largest norm. Points beyond raise ValueError.
    eps : float, default 0.0
        The oracle's approximation ``eps`` used in the randomized variant's
        decision radius.
    recenter : bool, default False
        Recentre inside each probed shell (exact with an exact oracle).
    """

    name = "shells"
    randomized = False
    build_settings = (
        Param("width", "float", 3.0, "multiplicative shell width w > 1 (approximation sqrt(w))", low=1.0, low_open=True),
        Param("n_shells", "int", None, "number of shells (default: enough for the data's largest norm)", low=1,
              none_ok=True),
        Param("eps", "float", 0.0, "the oracle's approximation eps in the decision radius", low=0.0),
        Param("recenter", "bool", False, "recentre inside each probed shell (exact with an exact oracle)"),
    )

    def __init__(self, *, width: float = 3.0, n_shells: int | None = None, eps: float = 0.0, recenter: bool = False):
        self.width = width
        self.n_shells = n_shells
        self.eps = eps
        self.recenter = recenter

    # ------------------------------------------------------------------ build
    def _build(self, points, conformal, oracle):
        w = float(self.width)
        shell = shell_of(conformal, w)
        needed = int(shell.max())
        n = needed if self.n_shells is None else int(self.n_shells)
        if needed > n:
            raise ValueError(
                f"points reach shell {needed} (1/(1-|x|^2) up to {1 / conformal.min():.3g}) but n_shells={n}; "
                f"raise n_shells or leave it None"
            )
        self.n_shells_ = n
        self.min_conformal_ = float(conformal.min())
        self.radii_ = shell_radii(n, w)
        self.shell_ids_ = []  # per shell: global ids of its points
        self.oracles_ = []
        order = np.argsort(shell, kind="stable")
        bounds = np.searchsorted(shell[order], np.arange(1, n + 2))
        for b in range(1, n + 1):
            ids = order[bounds[b - 1] : bounds[b]]
            self.shell_ids_.append(ids)
            if ids.size == 0:
                self.oracles_.append(None)
                continue
            o = self._shell_oracle(oracle, b, w)
            o.build(np.ascontiguousarray(points[ids]), copy=False)  # points[ids] is a fresh copy
            self.oracles_.append(o)

    def _shell_oracle(self, oracle, shell, width):
        """An unbuilt oracle for one shell: a spec string gets the index's seed
        (the same for every shell, so LSH shares its hyperplanes across shells)."""
        o = self._make_oracle(oracle) if isinstance(oracle, str) else copy.deepcopy(oracle)
        if o.adapts_per_shell:
            o = o.for_shell(shell, width)
        return o

    @property
    def nbytes(self):
        return int(sum(o.nbytes for o in self.oracles_ if o is not None) + sum(i.nbytes for i in self.shell_ids_))

    def shell_sizes(self):
        return np.array([len(i) for i in self.shell_ids_])

    # ------------------------------------------------------------ one probe
    def _probe(self, b, rows, queries, q_conformal, k, best_ids, best_d, stats, budget=None, oracle_params=None):
        """Full probe of shell ``b`` for query rows ``rows``: merge its k Euclidean NN.

        With ``recenter``, then ask for the neighbours of the centre of the
        ball through the k-th best until the top-k stops changing (with an
        exact oracle: until a call is certified, see the module docstring).
        """
        oracle = self.oracles_[b - 1]
        if oracle is None:
            return
        stats.extra["shells_probed"][rows] += 1
        certify = self.recenter and bool(oracle.exact)
        shell_ids = self.shell_ids_[b - 1]
        dim = queries.shape[1]
        centers = queries[rows]
        d_call = np.zeros(rows.size)  # delta the centres come from (0: q itself)
        kreq = np.full(rows.size, k, dtype=np.int64)  # k+1 when recentring with an exact oracle
        recheck = np.zeros(rows.size, dtype=bool)
        for rnd in range(MAX_ROUNDS):
            remaining = None if budget is None else np.maximum(budget - stats.samples[rows], 1)
            width = int(kreq.max())
            ids = np.full((rows.size, width), -1, dtype=np.int64)
            last_sq = np.empty(rows.size)
            samples = np.empty(rows.size, dtype=np.int64)
            for kv in np.unique(kreq):
                sel = np.flatnonzero(kreq == kv)
                rem = None if remaining is None else remaining[sel]
                res = oracle.knn(centers[sel], int(kv), budget=rem, **(oracle_params or {}))
                local = res.indices
                ids[sel, : local.shape[1]] = np.where(local >= 0, shell_ids[np.maximum(local, 0)], -1)
                last_sq[sel] = res.sq_dist[:, -1]
                samples[sel] = res.evaluations if res.evaluations is not None else np.sum(local >= 0, axis=1)
            cand_d = _kernels.delta_to_candidates(queries[rows], q_conformal[rows], self.points_, self.conformal_, ids)
            sub_ids, sub_d = best_ids[rows], best_d[rows]
            changed = _kernels.merge_topk(sub_ids, sub_d, ids, cand_d)
            best_ids[rows], best_d[rows] = sub_ids, sub_d
            stats.oracle_calls[rows] += 1
            stats.samples[rows] += samples
            stats.extra["rechecks"][rows] += recheck
            if not self.recenter:
                break
            # continue where a k-th best exists and the top-k changed; the first
            # call was centred on q itself, which proves nothing: always recentre once
            kth = sub_d[:, k - 1]
            keep = np.isfinite(kth) & (kth > 0)
            recheck[:] = False
            if certify:
                radius_sq = enclosing_sq_radius(
                    np.linalg.norm(queries[rows], axis=1), q_conformal[rows], d_call, kth, dim, self.min_conformal_
                )
                proven = is_certified(last_sq, radius_sq, dim) | (kreq >= shell_ids.size)
                widen = keep & ~proven & ~changed & (rnd > 0)
                kreq[widen] = np.minimum(2 * kreq[widen], max(shell_ids.size, k + 1))
                kreq = np.maximum(kreq, k + 1)
                recheck[widen] = True
                keep &= ~proven
            elif rnd > 0:
                keep &= changed
            if budget is not None:
                keep &= stats.samples[rows] < budget
            rows, kreq, recheck = rows[keep], kreq[keep], recheck[keep]
            if rows.size == 0:
                break
            d_call = best_d[rows, k - 1]
            centers, _ = euclidean_ball_from_delta(queries[rows], d_call, cq=q_conformal[rows])
            centers = np.ascontiguousarray(centers)

    # ------------------------------------------------------- deterministic
    def search(self, queries, q_conformal, k, *, budget=None, oracle_params=None):
        m = queries.shape[0]
        n = self.n_shells_
        stats = SearchStats.zeros(m, "shells_probed", "rechecks")
        best_ids = np.full((m, k), -1, dtype=np.int64)
        best_d = np.full((m, k), np.inf)
        h_q = hyperbolic_norm_from_conformal(q_conformal)
        home = shell_of(q_conformal, self.width)  # may exceed n: then no data there
        # a query beyond the last shell starts "above" the data and walks down
        lo, hi = np.minimum(home, n + 1), home.copy()
        self._probe_grouped(home, np.arange(m), queries, q_conformal, k, best_ids, best_d, stats, budget, oracle_params)
        stats.rounds += 1
        active = np.ones(m, dtype=bool)
        while True:
            if budget is not None:
                active &= stats.samples < budget
            act = np.flatnonzero(active)
            if act.size == 0:
                break
            r = dist_from_delta(best_d[act, k - 1])  # inf until k candidates are known
            hq = h_q[act]
            up = hi[act] + 1
            down = lo[act] - 1
            up_ok = (up <= n) & ball_meets_shell(hq, r, up, self.radii_)
            down_ok = (down >= 1) & ball_meets_shell(hq, r, down, self.radii_)
            done = ~(up_ok | down_ok)
            active[act[done]] = False
            go = ~done
            if not go.any():
                break
            # Choose-Band: the side whose addition covers the larger ball around q.
            rad_up = np.where(up_ok, covered_radius(hq, lo[act], up, self.radii_), -np.inf)
            rad_down = np.where(down_ok, covered_radius(hq, down, hi[act], self.radii_), -np.inf)
            pick_up = go & (rad_up >= rad_down)
            pick_down = go & ~pick_up
            chosen = np.where(pick_up, up, down)
            hi[act[pick_up]] = up[pick_up]
            lo[act[pick_down]] = down[pick_down]
            self._probe_grouped(chosen[go], act[go], queries, q_conformal, k, best_ids, best_d, stats, budget, oracle_params)
            stats.rounds[act[go]] += 1
        return best_ids, best_d, stats

    def _probe_grouped(self, shells, rows, queries, q_conformal, k, best_ids, best_d, stats, budget=None, oracle_params=None):
        for b in np.unique(shells):
            if 1 <= b <= self.n_shells_:
                self._probe(int(b), rows[shells == b], queries, q_conformal, k, best_ids, best_d, stats, budget, oracle_params)


class RandomizedShellSearch(SphericalShellSearch):
    """Randomized-Spherical-Shell-HyperbolicNN (Algorithm 8) with a decision oracle.

    Shells are visited in a random order per query (non-empty shells only:
    an empty shell can hold no closer point). The order is drawn per call
    from the query-time ``random_state`` (int >= 0) or, by default, from a
    seed fixed at build time from the index's ``random_state``: repeated
    calls with the same queries give the same answer.
    """

    name = "random_shells"
    randomized = True
    query_settings = (
        Param("random_state", "seed", None, "seed of this call's random choices (default: fixed at build time)",
              none_ok=True),
    )

    def _build(self, points, conformal, oracle):
        super()._build(points, conformal, oracle)
        self.query_seed_ = int(self.rng_.integers(2**63 - 1))

    def search(self, queries, q_conformal, k, *, budget=None, random_state=None, oracle_params=None):
        m = queries.shape[0]
        rng = np.random.default_rng(self._query_seed(random_state))
        stats = SearchStats.zeros(m, "shells_probed", "decision_calls", "full_probes", "rechecks")
        best_ids = np.full((m, k), -1, dtype=np.int64)
        best_d = np.full((m, k), np.inf)
        nonempty = np.array([b + 1 for b, o in enumerate(self.oracles_) if o is not None])
        order = np.argsort(rng.random((m, len(nonempty))), axis=1)
        perm = nonempty[order]  # (m, N) shell per query per round
        w = float(self.width)
        for t in range(perm.shape[1]):
            rows_all = np.arange(m)
            if budget is not None:
                rows_all = rows_all[stats.samples < budget]
            if rows_all.size == 0:
                break
            shells_t = perm[rows_all, t]
            full = np.zeros(rows_all.size, dtype=bool)
            have_k = np.isfinite(best_d[rows_all, k - 1])
            full[~have_k] = True  # dist_H = inf: probe fully
            for b in np.unique(shells_t[have_k]):
                sel = have_k & (shells_t == b)
                rows = rows_all[sel]
                # R^2 = delta_D * (1-|q|^2) / (w^b (1+eps)^2)
                radius = np.sqrt(best_d[rows, k - 1] * q_conformal[rows] / (w ** float(b))) / (1.0 + self.eps)
                rem = None if budget is None else budget - stats.samples[rows]
                cert, evals = self.oracles_[b - 1].near(queries[rows], radius, self.eps, budget=rem)
                stats.oracle_calls[rows] += 1
                stats.extra["decision_calls"][rows] += 1
                stats.samples[rows] += evals if evals is not None else 1
                full[np.flatnonzero(sel)[cert >= 0]] = True
            if budget is not None:  # a decision call may have used up the budget
                full &= stats.samples[rows_all] < budget
            rows_full = rows_all[full]
            stats.extra["full_probes"][rows_full] += 1
            self._probe_grouped(shells_t[full], rows_full, queries, q_conformal, k, best_ids, best_d, stats, budget, oracle_params)
            stats.rounds[rows_all] += 1
        return best_ids, best_d, stats
