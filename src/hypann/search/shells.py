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

With the LSH oracle (:class:`~hypann.oracles.lsh.LSHOracle`)
----------------------------------------------------------------
Parameters from the data: when the LSH spec leaves ``tables``, ``bits`` or
``granularity`` to the data (its defaults ``"auto"``, ``"auto"``,
``"data"``), the build chooses them for all shells at once. Each shell
``b`` gets the scale :math:`\\sigma_b`, the median Euclidean distance of up to
64 of its points to their 10th nearest neighbour in the shell (a shell of at
most 10 points gets a single bucket), and the bucket width
:math:`W_b = \\alpha\\,\\sigma_b`. Then ``sample_size`` indexed points, drawn
with the oracle's ``random_state``, serve as queries: their 10 nearest
neighbours in *hyperbolic* distance are the pairs whose predicted recall
must reach ``target_recall``, the shells whose hyperbolic norms come within
their 10th distance are the shells they probe, and 2,048 random points of
those shells give the predicted points examined;
:func:`~hypann.oracles.lsh.choose_hash_parameters` picks
:math:`(\\alpha, m, T)`. The built tables are then searched with the sample;
while its recall is below ``target_recall`` (the model is an average over
random hyperplanes, the drawn ones may fall short), tables are added
(x1.5, at most 64). The choice is recorded in ``lsh_choice_``.

Compiled query loop: when every shell holds an LSH oracle (sharing its
hyperplanes, ``max_candidates=None``), ``recenter`` is False and no
``oracle_params`` are given, :meth:`SphericalShellSearch.search`
runs one compiled kernel per batch instead of the per-shell rounds above.
Each query is projected once; shells are visited in increasing order of the
lower bound :math:`\\ell_b = \\max(0, H_{b-1} - h_q, h_q - H_b)` on the
distance from ``q`` to any point of shell ``b`` (the Choose-Band order), and
the search stops at the first shell with :math:`\\ell_b` above the current
k-th distance (Check-Intersection). Every candidate of every probed bucket
is ranked by its *hyperbolic* ``delta`` rather than the shell's Euclidean
top-k, which removes the ``sqrt(w)`` loss of Theorem 3 for the points LSH
finds (so recentring is not needed for accuracy there). A query whose
buckets held fewer than ``k`` points scans whole shells in the same order
until it has ``k``. ``stats.extra["fraction_examined"]`` is ``samples / n``.
"""

from __future__ import annotations

import copy

import numba as nb
import numpy as np

from hypann._params import Param
from hypann._runtime import read_only
from hypann.geometry import _kernels
from hypann.geometry._kernels import delta_row, insert_sorted
from hypann.geometry.bands import (
    ball_meets_shell,
    covered_radius,
    hyperbolic_norm_from_conformal,
    shell_of,
    shell_radii,
)
from hypann.geometry.gram_scan import knn_delta_scan
from hypann.geometry.poincare import dist_from_delta, euclidean_ball_from_delta
from hypann.oracles.brute import BruteForceOracle
from hypann.oracles.lsh import (
    AUTO_ALPHAS,
    AUTO_FAR_SAMPLE,
    AUTO_MAX_TABLES,
    AUTO_SAMPLE_K,
    MAX_BUCKET_COORDINATE,
    LSHOracle,
    _find_bucket,
    _sample_distances,
    choose_hash_parameters,
)
from hypann.result import SearchStats
from hypann.search.base import SearchAlgorithm
from hypann.search.certify import enclosing_sq_radius, is_certified
from hypann.search.recentering import MAX_ROUNDS

# Points per shell whose 10th neighbour sets the shell's scale sigma_b.
SCALE_SAMPLE = 64
# Stream of the shell sample, apart from the LSH hyperplanes' (random_state, t).
_SHELL_SAMPLE_STREAM = 2**40 + 12
# Granularity of a shell too small to hash: one bucket.
_ONE_BUCKET = 1e-300
# Queries per block of the compiled loop (one bitmap per block).
_QUERY_BLOCK = 32


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
        With an LSH oracle it keeps the per-shell rounds instead of the
        compiled loop.

    Attributes
    ----------
    lsh_choice_ : dict or None
        With an LSH oracle whose settings come from the data: the chosen
        ``alpha``, ``bits``, ``tables``, the predicted ``recall`` and points
        ``examined`` per query (``fraction`` of n), ``shells_per_query`` and
        the ``sample_recall`` the built tables reached on the build sample.
    lsh_pack_ : dict or None
        The arrays of the compiled all-shell loop (None: per-shell rounds).
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
        members = [order[bounds[b - 1] : bounds[b]] for b in range(1, n + 1)]
        template = self._make_oracle(oracle) if isinstance(oracle, str) else oracle
        chosen = None
        self.lsh_choice_ = None
        if isinstance(template, LSHOracle) and template.needs_choice:
            (template.for_shell(1, w) if template.granularity == "auto" else template)._check_settings()
            chosen = self._choose_lsh(template, points, conformal, members, w)
        for b in range(1, n + 1):
            ids = members[b - 1]
            self.shell_ids_.append(ids)
            if ids.size == 0:
                self.oracles_.append(None)
                continue
            o = chosen[b - 1] if chosen is not None else self._shell_oracle(oracle, b, w)
            o.build(np.ascontiguousarray(points[ids]), copy=False)  # points[ids] is a fresh copy
            self.oracles_.append(o)
        self.lsh_pack_ = self._pack_lsh()
        if chosen is not None and template.tables == "auto" and self.lsh_pack_ is not None:
            self._add_tables_until_met(float(template.target_recall))

    def _choose_lsh(self, template, points, conformal, members, w):
        """Per-shell LSH oracles with fixed settings chosen from a sample (module docstring)."""
        n, dim = points.shape
        n_shells = len(members)
        rng = np.random.default_rng([int(template.random_state), _SHELL_SAMPLE_STREAM])
        k = min(AUTO_SAMPLE_K, n - 1)
        # scale sigma_b of each shell: inf for a shell too small to hash (one bucket)
        sigma = np.full(n_shells, np.inf)
        for b, ids in enumerate(members, start=1):
            if template.granularity != "data":  # a number, or the paper's per-shell rule
                sigma[b - 1] = 2.0 / template.for_shell(b, w).granularity
            elif ids.size > AUTO_SAMPLE_K:
                pts = points[ids]
                smp = pts[np.sort(rng.choice(ids.size, min(SCALE_SAMPLE, ids.size), replace=False))]
                near = np.sqrt(BruteForceOracle().build(pts, copy=False).knn(smp, AUTO_SAMPLE_K + 1).sq_dist[:, 1:])
                pos = near[near > 0]
                kth = near[:, -1][near[:, -1] > 0]
                sigma[b - 1] = float(np.median(kth)) if kth.size else (float(np.median(pos)) if pos.size else np.inf)
        alphas = AUTO_ALPHAS if template.granularity == "data" else (1.0,)
        shell = np.empty(n, dtype=np.int64)
        for b, ids in enumerate(members):
            shell[ids] = b
        if k >= 1:
            sid = np.sort(rng.choice(n, min(int(template.sample_size), n), replace=False))
            nn_ids, nn_d = knn_delta_scan(points[sid], conformal[sid], points, conformal, k + 1)
            # drop the sampled point itself (or, when duplicates pushed it out, the last)
            is_self = nn_ids == sid[:, None]
            drop = np.where(is_self.any(axis=1), np.argmax(is_self, axis=1), k)
            keep = np.ones_like(is_self)
            keep[np.arange(sid.size), drop] = False
            nn_ids = nn_ids[keep].reshape(sid.size, k)
            kth = dist_from_delta(nn_d[keep].reshape(sid.size, k)[:, -1])
            # shells each sampled query probes: lower bound on the distance <= its 10th distance
            h_q = hyperbolic_norm_from_conformal(conformal[sid])
            lb = np.maximum(np.maximum(self.radii_[None, :-1] - h_q[:, None], h_q[:, None] - self.radii_[None, 1:]), 0)
            nonempty = np.array([ids.size > 0 for ids in members])
            probed = (lb <= kth[:, None] * (1 + 1e-9)) & nonempty[None, :]
            near_s = np.linalg.norm(points[sid][:, None, :] - points[nn_ids], axis=2) / sigma[shell[nn_ids]]
            far_ids = rng.choice(n, min(n, AUTO_FAR_SAMPLE), replace=False)
            far_c = _sample_distances(points[sid], points[far_ids])
            mask = probed[:, shell[far_ids]]
            far_s = (far_c / sigma[shell[far_ids]][None, :])[mask]
            weight = np.full(far_s.size, n / far_ids.size / sid.size)
            choice = choose_hash_parameters(
                near_s.ravel(), far_s, weight, dim, float(template.target_recall),
                shells_per_query=float(probed.sum(axis=1).mean()), tables=template.tables, bits=template.bits,
                probe=int(template.probe), alphas=alphas,
            )
            choice["shells_per_query"] = float(probed.sum(axis=1).mean())
            self._lsh_sample = (sid, nn_d[keep].reshape(sid.size, k)[:, -1])
        else:
            choice = {"alpha": 1.0, "tables": 1, "bits": 1, "recall": 1.0, "examined": float(n), "shells_per_query": 1.0}
        if k < 1:
            self._lsh_sample = None
        choice["fraction"] = choice["examined"] / max(n, 1)
        self.lsh_choice_ = choice
        out = []
        for b in range(n_shells):
            g = 2.0 / (choice["alpha"] * sigma[b])
            g = _ONE_BUCKET if not np.isfinite(sigma[b]) else min(max(g, _ONE_BUCKET), MAX_BUCKET_COORDINATE)
            out.append(template.resolved(tables=choice["tables"], bits=choice["bits"], granularity=g))
        return out

    def _sample_recall(self):
        """Recall@10 (by distance) of the built tables on the build sample, each point's own id left out."""
        sid, kth = self._lsh_sample
        p = self.lsh_pack_
        k = AUTO_SAMPLE_K
        cap = np.full(sid.size, np.iinfo(np.int64).max, dtype=np.int64)
        q, cq = self.points_[sid], self.conformal_[sid]
        ids, deltas, _, _ = _shell_lsh_knn(
            q, cq, hyperbolic_norm_from_conformal(cq), read_only(self.points_), read_only(self.conformal_), self.radii_,
            p["shells"], p["scale"], p["R"], p["u"], p["mult"], p["slot_start"], p["slot_bits"], p["hkeys"],
            p["hbucket"], p["bstart"], p["bids"], p["first"], p["size"], k + 1, p["probe"], cap,
        )
        hits = (ids != sid[:, None]) & (ids >= 0) & (deltas <= kth[:, None] * (1 + 1e-9))
        return float(np.minimum(hits.sum(axis=1), k).mean() / k)

    def _add_tables_until_met(self, target):
        """Check the chosen tables on the build sample; while its recall is below
        ``target``, add tables (x1.5, at most 64): the first tables are kept, so
        this only adds candidates. The model of ``choose_hash_parameters`` is an
        average over random hyperplanes; with few tables the drawn ones can
        miss it."""
        choice = self.lsh_choice_
        if self._lsh_sample is None:
            return
        rec = self._sample_recall()
        while rec < target and choice["tables"] < AUTO_MAX_TABLES:
            choice["tables"] = min(AUTO_MAX_TABLES, choice["tables"] + max(1, choice["tables"] // 2))
            for b, o in enumerate(self.oracles_):
                if o is not None:
                    params = o.get_params()
                    self.oracles_[b] = o.resolved(tables=choice["tables"], bits=params["bits"],
                                                  granularity=params["granularity"])
                    self.oracles_[b].build(o._points, copy=False)
            self.lsh_pack_ = self._pack_lsh()
            rec = self._sample_recall()
        choice["sample_recall"] = rec

    def _pack_lsh(self):
        """One set of arrays over all shells for the compiled loop, or None.

        Only when every shell holds an :class:`LSHOracle` with the same
        hyperplanes and no candidate cap (``max_candidates`` None).
        """
        built = [(b, o) for b, o in enumerate(self.oracles_, start=1) if o is not None]
        if not built or any(type(o) is not LSHOracle for _, o in built):
            return None
        first = built[0][1]
        same = ("tables_", "bits_", "random_state", "offset", "probe")
        if any(getattr(o, a) != getattr(first, a) for _, o in built for a in same):
            return None
        if any(o.max_candidates is not None for _, o in built):
            return None
        T = first.tables_
        shells, scale, slot_start, slot_bits, starts, size = [], [], [], [], [], []
        hkeys, hbucket, bstart, bids = [], [], [], []
        h_base = b_base = i_base = 0
        for b, o in built:
            shells.append(b)
            scale.append(o._scale)
            slot_start.append(o._hoff[:-1] + h_base)
            slot_bits.append(o._hbits)
            hkeys.append(o._hkeys)
            hbucket.append(np.where(o._hbucket >= 0, o._hbucket + b_base, -1))
            bstart.append(o._bstart[:-1] + i_base)
            bids.append(self.shell_ids_[b - 1][o._bids])
            starts.append(i_base)  # table 0 of the shell lists each of its points once
            size.append(o.n_points_)
            h_base += o._hkeys.size
            b_base += o._bstart.size - 1
            i_base += o._bids.size
        bstart.append(np.array([i_base]))
        return {
            "shells": np.array(shells, dtype=np.int64),
            "scale": np.array(scale, dtype=np.float64),
            "slot_start": np.ascontiguousarray(np.array(slot_start, dtype=np.int64).reshape(len(built), T)),
            "slot_bits": np.ascontiguousarray(np.array(slot_bits, dtype=np.int64).reshape(len(built), T)),
            "hkeys": np.concatenate(hkeys).astype(np.uint64),
            "hbucket": np.concatenate(hbucket).astype(np.int64),
            "bstart": np.concatenate(bstart).astype(np.int64),
            "bids": np.concatenate(bids).astype(np.int64),
            "first": np.array(starts, dtype=np.int64),
            "size": np.array(size, dtype=np.int64),
            "R": first._R,
            "u": first._u,
            "mult": np.ascontiguousarray(first._mult),
            "probe": int(first.probe),
        }

    def _shell_oracle(self, oracle, shell, width):
        """An unbuilt oracle for one shell: a spec string gets the index's seed
        (the same for every shell, so LSH shares its hyperplanes across shells)."""
        o = self._make_oracle(oracle) if isinstance(oracle, str) else copy.deepcopy(oracle)
        if o.adapts_per_shell:
            o = o.for_shell(shell, width)
        return o

    @property
    def nbytes(self):
        pack = getattr(self, "lsh_pack_", None) or {}
        packed = sum(v.nbytes for key, v in pack.items() if isinstance(v, np.ndarray) and key not in ("R", "u", "mult"))
        return int(sum(o.nbytes for o in self.oracles_ if o is not None) + sum(i.nbytes for i in self.shell_ids_)
                   + packed)

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
        if getattr(self, "lsh_pack_", None) is not None and not self.recenter and not oracle_params:
            return self._search_compiled(queries, q_conformal, k, budget)
        return self._search_rounds(queries, q_conformal, k, budget=budget, oracle_params=oracle_params)

    def _search_compiled(self, queries, q_conformal, k, budget):
        """All shells of all queries in one compiled call (module docstring)."""
        p = self.lsh_pack_
        m = queries.shape[0]
        cap = np.full(m, np.iinfo(np.int64).max, dtype=np.int64) if budget is None else np.full(m, int(budget))
        h_q = hyperbolic_norm_from_conformal(q_conformal)
        ids, deltas, examined, probed = _shell_lsh_knn(
            # read-only views of the points, built (writable) or loaded (read-only): one compiled kernel
            np.ascontiguousarray(queries), q_conformal, h_q, read_only(self.points_), read_only(self.conformal_),
            self.radii_,
            p["shells"], p["scale"], p["R"], p["u"], p["mult"], p["slot_start"], p["slot_bits"], p["hkeys"],
            p["hbucket"], p["bstart"], p["bids"], p["first"], p["size"], int(k), p["probe"], cap,
        )
        stats = SearchStats.zeros(m, "shells_probed", "rechecks")
        stats.samples[:] = examined
        stats.oracle_calls[:] = probed
        stats.rounds[:] = probed
        stats.extra["shells_probed"][:] = probed
        stats.extra["fraction_examined"] = examined / max(self.points_.shape[0], 1)
        return ids, deltas, stats

    def _search_rounds(self, queries, q_conformal, k, *, budget=None, oracle_params=None):
        """The per-shell rounds (Algorithm 3), any oracle."""
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
        stats.extra["fraction_examined"] = stats.samples / max(self.points_.shape[0], 1)
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
        stats.extra["fraction_examined"] = stats.samples / max(self.points_.shape[0], 1)
        return best_ids, best_d, stats


@nb.njit(cache=True, inline="always")
def _examine(x, q, cq, X, cx, kd, ki, seen, marked, cnt, cap):
    """Examine candidate ``x`` for query ``q`` once: mark it in the bitmap ``seen`` and the list
    ``marked`` (``cnt`` ids so far), offer its ``delta`` to the sorted top-k ``(kd, ki)``.

    Returns ``(cnt, full)``, ``full`` when the query has examined ``cap`` distinct points. An id
    already marked costs nothing and changes nothing.
    """
    w = x >> 6
    bit = np.uint64(1) << np.uint64(x & 63)
    if seen[w] & bit:
        return cnt, False
    seen[w] |= bit
    marked[cnt] = x
    cnt += 1
    dl = delta_row(q, cq, X[x], cx[x])
    if dl < kd[kd.shape[0] - 1]:
        insert_sorted(kd, ki, dl, x)
    return cnt, cnt >= cap


@nb.njit(cache=True, parallel=True)
def _shell_lsh_knn(Q, cq, hq, X, cx, radii, shells, scale, R, u, mult, slot_start, slot_bits, hkeys, hbucket,
                   bstart, bids, first, size, k, probe, cap):
    """k nearest by hyperbolic ``delta`` over the LSH buckets of all shells (module docstring).

    ``shells`` (S,): the non-empty shells (1-based), with their ``scale``
    ``1/W`` and hash slots ``slot_start``/``slot_bits`` (S, T). Bucket ``c``
    holds the global ids ``bids[bstart[c]:bstart[c+1]]``. Query ``i`` stops
    after ``cap[i]`` distinct points. A query whose buckets held fewer than
    ``k`` points then scans whole shells (``bids[first[s]:first[s]+size[s]]``)
    in the same order until it has ``k``. Returns ``(ids (m, k), deltas (m, k),
    examined (m,), shells probed (m,))``. Buffers: per block of queries a
    bitmap of ``n`` bits and a list of the ids marked in it; a query marks
    each id at most once, so the list never exceeds ``n``.
    """
    m, d = Q.shape
    n = X.shape[0]
    S = shells.shape[0]
    T, bits = mult.shape
    H = T * bits
    out_d = np.full((m, k), np.inf)
    out_i = np.full((m, k), -1, dtype=np.int64)
    examined = np.zeros(m, dtype=np.int64)
    probed = np.zeros(m, dtype=np.int64)
    words = (n + 63) >> 6
    n_blocks = (m + _QUERY_BLOCK - 1) // _QUERY_BLOCK
    for blk in nb.prange(n_blocks):
        seen = np.zeros(words, dtype=np.uint64)
        marked = np.empty(n, dtype=np.int64)
        proj = np.empty(H)
        lb = np.empty(S)
        done = np.zeros(S, dtype=np.bool_)
        for qi in range(blk * _QUERY_BLOCK, min(m, (blk + 1) * _QUERY_BLOCK)):
            q = Q[qi]
            kd = out_d[qi]
            ki = out_i[qi]
            for r in range(H):
                acc = 0.0
                for j in range(d):
                    acc += R[r, j] * q[j]
                proj[r] = acc
            for s in range(S):
                b = shells[s]
                lb[s] = max(0.0, radii[b - 1] - hq[qi], hq[qi] - radii[b])
                done[s] = False
            cnt = 0
            full = False
            for _ in range(S):
                # next shell: smallest lower bound
                s_best = -1
                for s in range(S):
                    if not done[s] and (s_best < 0 or lb[s] < lb[s_best]):
                        s_best = s
                done[s_best] = True
                half = np.sinh(0.5 * lb[s_best])
                if half * half > kd[k - 1] * (1.0 + 1e-9):
                    break
                probed[qi] += 1
                sc = scale[s_best]
                for t in range(T):
                    key = np.uint64(0)
                    for j in range(bits):
                        c = np.int64(np.floor(proj[t * bits + j] * sc + u[t * bits + j]))
                        key += np.uint64(c) * mult[t, j]
                    n_probe = 1 + 2 * bits * probe
                    for pr in range(n_probe):
                        pk = key
                        if pr > 0:
                            jj = (pr - 1) >> 1
                            if (pr - 1) & 1:
                                pk = key + mult[t, jj]
                            else:
                                pk = key - mult[t, jj]
                        c_b = _find_bucket(hkeys, hbucket, slot_start[s_best, t], slot_bits[s_best, t], pk)
                        if c_b < 0:
                            continue
                        for pos in range(bstart[c_b], bstart[c_b + 1]):
                            cnt, full = _examine(bids[pos], q, cq[qi], X, cx, kd, ki, seen, marked, cnt, cap[qi])
                            if full:
                                break
                        if full:
                            break
                    if full:
                        break
                if full:
                    break
            if ki[k - 1] < 0 and not full:
                # fewer than k in the buckets: scan whole shells, nearest first
                for s in range(S):
                    done[s] = False
                for _ in range(S):
                    if ki[k - 1] >= 0 or full:
                        break
                    s_best = -1
                    for s in range(S):
                        if not done[s] and (s_best < 0 or lb[s] < lb[s_best]):
                            s_best = s
                    done[s_best] = True
                    for pos in range(first[s_best], first[s_best] + size[s_best]):
                        cnt, full = _examine(bids[pos], q, cq[qi], X, cx, kd, ki, seen, marked, cnt, cap[qi])
                        if full:
                            break
            examined[qi] = cnt
            for t in range(cnt):
                x = marked[t]
                seen[x >> 6] = np.uint64(0)
    return out_i, out_d, examined, probed
