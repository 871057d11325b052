"""Fuzz inputs for every algorithm/oracle pair, an independent float64 ground truth and the output checks.

Used by ``tests/test_fuzz.py`` (CI-sized cases) and ``benchmarks/fuzz.py`` (thousands of cases).
A *case* is a plain JSON-able dict, so a case that fails can be re-run from its printed form::

    {"pair": "hkdtree", "generator": "scaled_cube", "n": 20000, "d": 20, "k": 10,
     "m": 5, "seed": 0, "params": {}, "budget": None, "n_jobs": None}

The data and queries of a case are a function of ``(generator, n, d, m, seed)`` only
(:func:`make_case_data`). :func:`run_case` builds the index, searches and checks the answer
in the current process; ``tests/fuzz_worker.py`` runs cases in a subprocess so that a
segfault in a numba kernel is reported as a failure of that case.

Ground truth
------------
Written here from the definition, independent of the library's search code: for every query
``q`` and point ``x``

.. math::

    \\delta(q, x) = \\frac{\\|q - x\\|^2}{(1 - \\|q\\|^2)(1 - \\|x\\|^2)},
    \\qquad d(q, x) = 2 \\operatorname{asinh} \\sqrt{\\delta(q, x)},

with ``q - x`` formed explicitly in float64 and ``1 - |x|^2`` from the compensated
:func:`hypann.geometry._kernels.conformal_factor` (the only library routine used: a wrong
conformal factor would make every point fail validation or every distance wrong, which the
geometry tests pin against 60-digit arithmetic).

Checks
------
Every pair, exact or not: ids of shape ``(m, k)`` in ``[0, n)`` (no ``-1`` since ``k <= n``),
distinct within a row, reported distances ascending and equal (``rtol=1e-9``) to the true
distances of the reported ids. Exact pairs (and no ``budget``) additionally: the sorted true
deltas of the reported ids equal the ``k`` smallest true deltas (``rtol=1e-9``), so ids may
swap among equal distances.
"""

from __future__ import annotations

import math
import time
import traceback

import numpy as np

from hypann._runtime import ORDERED_MIN_QUERIES
from hypann.geometry._kernels import conformal_factor
from hypann.geometry.poincare import norm_at_dist0

# --------------------------------------------------------------------------- pairs

#: Oracle specs used with the oracle-based algorithms; ``True``: the oracle is exact.
ORACLES = {
    "brute": True,
    "kdtree": True,
    "hkdtree": True,
    "faiss:Flat": True,
    "lsh": False,
    "faiss:HNSW32": False,
    "hnswlib": False,
}


def _make_pairs():
    """Every algorithm/oracle pair: name -> (algorithm, oracle spec or None, fixed params, exact)."""
    pairs = {
        "brute": ("brute", None, {}, True),
        "hkdtree": ("hkdtree", None, {}, True),
        "auto": ("auto", None, {}, True),
        "graph": ("graph", None, {}, False),
        "graph+exact": ("graph", None, {"exact": True}, True),
        # float32 storage: the case's points are rounded to float32 first (see make_index_points),
        # so float64 brute force over them is the exact answer
        "hkdtree/float32": ("hkdtree", None, {"storage": "float32"}, True),
        "auto/float32": ("auto", None, {"storage": "float32"}, True),
        "vamana": ("vamana", None, {}, False),
    }
    for oracle, exact in ORACLES.items():
        pairs[f"recentering/{oracle}"] = ("recentering", oracle, {}, exact)
        pairs[f"binary_search/{oracle}"] = ("binary_search", oracle, {}, False)
        pairs[f"shells/{oracle}"] = ("shells", oracle, {"recenter": False}, False)
        pairs[f"shells+recenter/{oracle}"] = ("shells", oracle, {"recenter": True}, exact)
        pairs[f"random_shells/{oracle}"] = ("random_shells", oracle, {"recenter": False}, False)
        pairs[f"random_shells+recenter/{oracle}"] = ("random_shells", oracle, {"recenter": True}, False)
    return pairs


PAIRS = _make_pairs()
PAIR_NAMES = list(PAIRS)
EXACT_PAIRS = [name for name, (_, _, _, exact) in PAIRS.items() if exact]

#: Build settings drawn per case (on top of the pair's fixed ones), per algorithm.
PARAM_CHOICES = {
    "hkdtree": {"leaf_size": [1, 2, 16, 64]},
    "auto": {"leaf_size": [1, 16], "scan_fraction": [None, 1e-9, 1.0]},  # 1e-9 forces the scan, 1.0 the tree
    "graph": {"n_neighbors": [2, 8, 24], "max_degree": [24, 40]},
    "vamana": {"R": [2, 4, 10], "L": [2, 10, 30], "alpha": [1.0, 1.5]},
    "binary_search": {"ratio": [1.01, 1.1, 2.0]},
    "shells": {"width": [1.5, 3.0, 10.0]},
    "random_shells": {"width": [1.5, 3.0, 10.0]},
}

# --------------------------------------------------------------------------- generators
# Every generator has the signature (rng, n, d) -> float64 array (n, d) strictly inside the
# unit ball; they are deterministic functions of the generator's random draws.


def _directions(rng, n, d):
    g = rng.normal(size=(n, d))
    norms = np.linalg.norm(g, axis=1, keepdims=True)
    g[norms[:, 0] == 0.0] = np.eye(d)[0]  # probability zero, but never divide by 0
    return g / np.maximum(norms, 1e-300)


def _inside(X):
    """Shrink the (rare) rows whose rounded coordinates reach the boundary until ``1-|x|^2 > 0``."""
    X = np.ascontiguousarray(X, dtype=np.float64)
    for _ in range(60):
        bad = ~(conformal_factor(X) > 0.0)
        if not bad.any():
            return X
        X[bad] *= 1.0 - 1e-15
    raise AssertionError("could not move points strictly inside the ball")


def exp0(v):
    """Exponential map at the origin of the unit Poincare ball, row-wise.

    .. math:: \\exp_0(v) = \\tanh(\\|v\\|/2)\\,\\frac{v}{\\|v\\|}

    (``v`` measured in the hyperbolic metric: ``d(0, exp_0(v)) = |v|``); the radial part is
    :func:`hypann.geometry.poincare.norm_at_dist0`.
    """
    v = np.asarray(v, dtype=np.float64)
    length = np.linalg.norm(v, axis=1, keepdims=True)
    scale = np.divide(norm_at_dist0(length), length, out=np.full_like(length, 0.5), where=length > 0)
    return _inside(v * scale)


def uniform_euclidean_ball(rng, n, d, radius=None):
    """Uniform in the Euclidean ball of radius ``radius`` (drawn from (0.1, 0.999) when None).

    Radius ``r U^{1/d}``: in high ``d`` nearly every point is near the sphere of radius ``r``.
    """
    if radius is None:
        radius = float(rng.choice([0.1, 0.5, 0.9, 0.999]))
    r = radius * rng.uniform(0.0, 1.0, n) ** (1.0 / d)
    return _inside(_directions(rng, n, d) * r[:, None])


def _hyperbolic_radii(rng, n, d, R):
    """Hyperbolic norms of uniform points of the hyperbolic ball ``B_H(0, R)``.

    The volume element is proportional to :math:`\\sinh(r)^{d-1}\\,dr`; its CDF is tabulated on a
    fine grid in log space (no overflow for large ``R`` or ``d``) and inverted by interpolation.
    """
    r = np.linspace(0.0, R, 20001)[1:]
    log_density = (d - 1) * (r + np.log1p(-np.exp(-2.0 * r)) - math.log(2.0))
    density = np.exp(log_density - log_density.max())
    cdf = np.concatenate([[0.0], np.cumsum((density[1:] + density[:-1]) * 0.5)])
    cdf /= cdf[-1]
    return np.interp(rng.uniform(0.0, 1.0, n), cdf, r)


def uniform_hyperbolic_ball(rng, n, d, R=None):
    """Uniform in the hyperbolic ball of radius ``R`` about the origin: most points near its boundary."""
    if R is None:
        R = float(rng.choice([1.0, 4.0, 10.0, 20.0, 28.0]))
    h = _hyperbolic_radii(rng, n, d, R)
    return exp0(_directions(rng, n, d) * h[:, None])


def boundary_heavy(rng, n, d, low=1e-12, high=1e-4):
    """``1-|x|^2`` log-uniform in ``[low, high]``: every point very near the unit sphere."""
    lam = np.exp(rng.uniform(math.log(low), math.log(high), n))
    return _inside(_directions(rng, n, d) * np.sqrt(1.0 - lam)[:, None])


def tangent_clusters(rng, n, d):
    """Gaussian clusters in the tangent space at 0, mapped into the ball by :func:`exp0`.

    1-8 clusters; centres at hyperbolic norms up to 25, spreads from 1e-7 (clusters of nearly
    coincident points near the boundary) to 2.
    """
    n_clusters = int(rng.integers(1, 9))
    norms = rng.choice([0.0, 0.5, 3.0, 10.0, 25.0], n_clusters)
    centres = _directions(rng, n_clusters, d) * norms[:, None]
    spreads = rng.choice([1e-7, 1e-3, 0.1, 2.0], n_clusters)
    label = rng.integers(0, n_clusters, n)
    v = centres[label] + spreads[label, None] * rng.normal(size=(n, d)) / math.sqrt(d)
    return exp0(v)


def duplicates(rng, n, d):
    """Points drawn with replacement from a few base points: many exact duplicates."""
    base = uniform_hyperbolic_ball(rng, max(1, n // 5), d, R=float(rng.choice([2.0, 15.0])))
    return np.ascontiguousarray(base[rng.integers(0, len(base), n)])


def all_identical(rng, n, d):
    """``n`` copies of one point (the origin, an inner point or one 1e-10 from the boundary)."""
    kind = int(rng.integers(0, 3))
    if kind == 0:
        point = np.zeros((1, d))
    elif kind == 1:
        point = uniform_euclidean_ball(rng, 1, d, radius=0.8)
    else:
        point = boundary_heavy(rng, 1, d, low=1e-10, high=1e-10)
    return np.repeat(point, n, axis=0)


def line(rng, n, d):
    """Points on a Euclidean chord of the ball: through the origin (a geodesic) or offset from it."""
    u = _directions(rng, 1, d)[0]
    offset = np.zeros(d) if rng.uniform() < 0.5 else 0.6 * _directions(rng, 1, d)[0]
    # chord {offset + t u}: |offset + t u| < 1 for t between the two roots
    b = offset @ u
    disc = math.sqrt(max(b * b - (offset @ offset - 1.0), 0.0))
    t = rng.uniform(-b - disc, -b + disc, n) * (1.0 - 1e-9)
    return _inside(offset[None, :] + t[:, None] * u[None, :])


def subspace(rng, n, d):
    """Points in a random linear subspace of dimension 1-3 (boundary-heavy within it)."""
    s = int(min(d, rng.integers(1, 4)))
    basis, _ = np.linalg.qr(rng.normal(size=(d, s)))
    coords = boundary_heavy(rng, n, s, low=1e-9, high=0.5)
    return _inside(coords @ basis.T)


def axis_lattice(rng, n, d):
    """Only the first 1-3 coordinates non-zero, on a coarse lattice: many exactly tied distances."""
    s = int(min(d, rng.integers(1, 4)))
    X = np.zeros((n, d))
    X[:, :s] = rng.integers(-3, 4, (n, s)) * (0.9 / (3.0 * math.sqrt(s)))
    return _inside(X)


def scaled_cube(rng, n, d):
    """``0.9 * U(-1, 1)^d / sqrt(d)``: inside the ball, corners near norm 0.9 (a former crash reproducer)."""
    return _inside(0.9 * rng.uniform(-1.0, 1.0, (n, d)) / math.sqrt(d))


def half_ball(rng, n, d):
    """Uniform in the Euclidean ball of radius 0.5 (far from the boundary, many points per leaf box)."""
    return uniform_euclidean_ball(rng, n, d, radius=0.5)


GENERATORS = {
    "uniform_euclidean_ball": uniform_euclidean_ball,
    "uniform_hyperbolic_ball": uniform_hyperbolic_ball,
    "boundary_heavy": boundary_heavy,
    "tangent_clusters": tangent_clusters,
    "duplicates": duplicates,
    "all_identical": all_identical,
    "line": line,
    "subspace": subspace,
    "axis_lattice": axis_lattice,
    "scaled_cube": scaled_cube,
    "half_ball": half_ball,
}


def make_case_data(case):
    """Points ``X`` (n, d) and queries ``Q`` (m, d) of a case, from its generator and seed.

    Queries (``case["queries"]``): ``"mixed"`` (default) rotates through copies of data points,
    fresh points of the same generator, the origin and a point with ``1-|q|^2 = 1e-12``;
    ``"first_points"`` takes ``X[:m]`` (queries that are data points, as in a former crash reproducer).
    """
    n, d, m = int(case["n"]), int(case["d"]), int(case["m"])
    rng = np.random.default_rng(int(case["seed"]))
    generate = GENERATORS[case["generator"]]
    X = generate(rng, n, d)
    if case.get("queries", "mixed") == "first_points":
        return np.ascontiguousarray(X), np.ascontiguousarray(X[:m])
    fresh = generate(rng, m, d)
    special = [X[rng.integers(0, n)], None, np.zeros(d), boundary_heavy(rng, 1, d, low=1e-12, high=1e-12)[0]]
    Q = np.empty((m, d))
    for i in range(m):
        pick = special[i % 4]
        Q[i] = fresh[i] if pick is None else pick
    return np.ascontiguousarray(X), Q


# --------------------------------------------------------------------------- ground truth


def true_deltas(Q, X, ids=None):
    """Float64 brute-force ``delta`` from explicit differences (module docstring).

    Returns the (m, n) matrix, or with ``ids`` (m, k) the (m, k) deltas of those points.
    """
    cq = conformal_factor(np.ascontiguousarray(Q))
    cx = conformal_factor(np.ascontiguousarray(X))
    rows = []
    for i in range(Q.shape[0]):
        sel = slice(None) if ids is None else ids[i]
        diff = X[sel] - Q[i]
        rows.append(np.einsum("ij,ij->i", diff, diff) / (cq[i] * cx[sel]))
    return np.array(rows).reshape(Q.shape[0], -1)


def distance_from_delta(delta):
    """``2 asinh(sqrt(delta))``."""
    return 2.0 * np.arcsinh(np.sqrt(delta))


RTOL = 1e-9


def check_answer(X, Q, k, ids, distances, *, exact, budgeted=False):
    """Problems with a search answer (empty list: the answer is correct).

    Returns
    -------
    list of (kind, message)
        ``kind`` is ``"invalid"`` for malformed output (any pair) and ``"wrong"`` for an exact
        pair whose distances are not the true k smallest.
    """
    n, m = X.shape[0], Q.shape[0]
    ids = np.asarray(ids)
    distances = np.asarray(distances)
    if ids.shape != (m, k) or distances.shape != (m, k):
        return [("invalid", f"output shapes {ids.shape} / {distances.shape}, expected ({m}, {k})")]
    if not np.issubdtype(ids.dtype, np.integer):
        return [("invalid", f"ids have dtype {ids.dtype}, expected an integer type")]
    problems = []
    for i in range(m):
        row = ids[i]
        if budgeted and (row < 0).any():
            # under a budget a search may stop with fewer than k points: -1 / inf padding at the end only
            found = int(np.sum(row >= 0))
            if not ((row[found:] == -1).all() and np.isinf(distances[i, found:]).all()):
                problems.append(("invalid", f"query {i}: -1 padding not at the end: {row.tolist()[:20]}"))
                continue
            row = row[:found]
            if found == 0:
                continue
            dist_i = distances[i, :found]
        else:
            dist_i = distances[i]
        if ((row < 0) | (row >= n)).any():
            problems.append(("invalid", f"query {i}: ids outside [0, {n}): {row[(row < 0) | (row >= n)][:5].tolist()}"))
            continue
        if np.unique(row).size != row.size:
            problems.append(("invalid", f"query {i}: repeated ids {row.tolist()[:20]}"))
        if not np.all(np.diff(dist_i) >= 0.0):
            problems.append(("invalid", f"query {i}: distances not ascending {dist_i[:10].tolist()}"))
        got = true_deltas(Q[i : i + 1], X, row[None, :])[0]
        want_dist = distance_from_delta(got)
        if not np.allclose(dist_i, want_dist, rtol=RTOL, atol=0.0):
            j = int(np.argmax(~np.isclose(dist_i, want_dist, rtol=RTOL, atol=0.0)))
            problems.append(
                ("invalid", f"query {i}: reported distance {dist_i[j]!r} of id {row[j]} at rank {j}, "
                 f"true {want_dist[j]!r}")
            )
        if exact:
            best = np.partition(true_deltas(Q[i : i + 1], X)[0], k - 1)[:k]
            best.sort()
            got_sorted = np.sort(got)
            if not np.allclose(got_sorted, best, rtol=RTOL, atol=0.0):
                j = int(np.argmax(~np.isclose(got_sorted, best, rtol=RTOL, atol=0.0)))
                problems.append(
                    ("wrong", f"query {i}: rank {j} has delta {got_sorted[j]!r}, true {best[j]!r} "
                     f"(distance {distance_from_delta(got_sorted[j])!r} vs {distance_from_delta(best[j])!r})")
                )
    return problems


# --------------------------------------------------------------------------- running one case


def float32_points(X):
    """``X`` rounded to float32 (as float64 values), rows that rounding pushed onto or past the
    boundary pulled back inside in float32 steps: points that float32 storage holds exactly."""
    Y = np.asarray(X, dtype=np.float32).copy()
    for _ in range(200):
        bad = ~(conformal_factor(Y.astype(np.float64)) > 0.0)
        if not bad.any():
            break
        Y[bad] *= np.float32(1 - 2.0**-20)
    return Y.astype(np.float64)


def case_is_exact(case):
    return PAIRS[case["pair"]][3] and case.get("budget") is None


def build_index(case, X):
    import hypann

    algorithm, oracle, fixed, _ = PAIRS[case["pair"]]
    params = {**fixed, **case.get("params", {})}
    return hypann.HyperbolicIndex(algorithm=algorithm, oracle=oracle, random_state=int(case["seed"]),
                                  n_jobs=case.get("n_jobs"), **params).build(X)


def run_case(case):
    """Build, search and check one case in this process.

    Returns
    -------
    dict
        ``status``: ``"ok"``, ``"wrong"`` (an exact pair's answer is not exact), ``"invalid"``
        (malformed output) or ``"error"`` (an exception on valid input); ``problems``: messages;
        ``seconds``: build + search time.
    """
    X, Q = make_case_data(case)
    if PAIRS[case["pair"]][2].get("storage") == "float32":
        X = float32_points(X)
    start = time.perf_counter()
    try:
        index = build_index(case, X)
        res = index.search(Q, int(case["k"]), budget=case.get("budget"))
    except Exception as exc:  # an exception on valid input is a failure of the case
        tb = traceback.format_exception(type(exc), exc, exc.__traceback__)
        return {"status": "error", "problems": [f"{type(exc).__name__}: {exc}", "".join(tb[-3:])],
                "seconds": time.perf_counter() - start}
    seconds = time.perf_counter() - start
    problems = check_answer(X, Q, int(case["k"]), res.indices, res.distances, exact=case_is_exact(case),
                            budgeted=case.get("budget") is not None)
    kinds = {kind for kind, _ in problems}
    status = "wrong" if "wrong" in kinds else ("invalid" if kinds else "ok")
    return {"status": status, "problems": [msg for _, msg in problems][:8], "seconds": seconds}


# --------------------------------------------------------------------------- sampling cases

DIMS = [2, 3, 4, 5, 8, 16, 20, 32, 64, 128]
#: The fewest queries of a large batch (:func:`sample_case`): the smallest batch the index reorders.
LARGE_BATCH = ORDERED_MIN_QUERIES


def sample_case(rng, *, pair=None, generator=None, max_n=50_000, max_d=128, max_k=2000, large_batches=0.0):
    """One random case: pair, generator, ``n`` (tiny, or log-uniform up to ``max_n``), ``d``, ``k``.

    ``k`` is 1, ``n`` (when ``n <= max_k``) or log-uniform in ``[1, min(n, max_k)]``; one case in
    ten gets a sample ``budget`` in ``[k, 4k]`` (then even exact pairs are only checked for
    validity); ``n_jobs`` (numba threads) is None, 1 or 2. ``m`` (queries) is 1 to 6, or, in a
    share ``large_batches`` of the cases, :data:`LARGE_BATCH` to ``LARGE_BATCH + 63``: a batch that
    the index searches in its structure's order (up to 65,536 points,
    :func:`hypann._runtime.searched_in_order`). That share is drawn from the case's own seed, not
    from ``rng``, so the other fields of a seed's cases do not depend on it.
    """
    pair = pair or str(rng.choice(PAIR_NAMES))
    generator = generator or str(rng.choice(list(GENERATORS)))
    if rng.uniform() < 0.15:
        n = int(rng.integers(1, 4))
    else:
        n = int(round(math.exp(rng.uniform(math.log(4), math.log(max(max_n, 4))))))
    dims = [d for d in DIMS if d <= max_d]
    # high dimensions only on smaller sets (the cost is n * d)
    d = int(rng.choice([d for d in dims if n * d <= max(max_n, 4) * 32] or dims[:1]))
    u = rng.uniform()
    cap = min(n, max_k)
    if u < 0.2:
        k = 1
    elif u < 0.3 and n <= max_k:
        k = n
    else:
        k = int(min(cap, round(math.exp(rng.uniform(0.0, math.log(cap))))))
    algorithm = PAIRS[pair][0]
    params = {name: values[int(rng.integers(len(values)))] for name, values in PARAM_CHOICES.get(algorithm, {}).items()}
    budget = int(rng.integers(k, 4 * k + 1)) if rng.uniform() < 0.1 else None
    n_jobs = [None, 1, 2][int(rng.integers(3))]
    m = int(rng.integers(1, 7))
    seed = int(rng.integers(2**31))
    if large_batches and np.random.default_rng([seed, 1]).uniform() < large_batches:
        m = LARGE_BATCH + seed % 64
    return {
        "pair": pair, "generator": generator, "n": n, "d": d, "k": k, "m": m,
        "seed": seed, "params": params, "budget": budget, "n_jobs": n_jobs,
    }


def sample_cases(seed, count, *, pairs=None, **limits):
    """``count`` cases; the pairs (default all) and generators cycle so each is covered evenly."""
    rng = np.random.default_rng(seed)
    pairs = PAIR_NAMES if pairs is None else list(pairs)
    gens = list(GENERATORS)
    cases = []
    for i in range(count):
        pair = pairs[i % len(pairs)]
        generator = gens[(i // len(pairs) + i) % len(gens)]
        cases.append(sample_case(rng, pair=pair, generator=generator, **limits))
    return cases


def describe(case):
    """One line that reproduces a case."""
    return (f"pair={case['pair']} generator={case['generator']} n={case['n']} d={case['d']} k={case['k']} "
            f"m={case['m']} seed={case['seed']} params={case.get('params', {})} budget={case.get('budget')}"
            + "".join(f" {key}={case[key]}" for key in ("n_jobs", "queries") if case.get(key) is not None))
