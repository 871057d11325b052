"""Combinatorial (Sarkar / de Sa et al.) embedding of a rooted tree in the Poincare ball.

Sarkar's construction [1]_, generalised to ``d`` dimensions by de Sa, Gu, Re
and Sala [2]_: the root sits at the origin; a node ``x`` whose edge to its
parent arrives from the unit direction ``b`` (the tangent at ``x`` of the
geodesic back to the parent) gets its ``k`` children at hyperbolic distance
``tau`` along ``k`` of the ``k+1`` directions of a set of well-separated unit
vectors whose remaining direction is ``b`` itself. This is Sarkar's step
"reflect ``x`` to the origin, place the children on a circle maximally
separated from the parent, reflect back", written with Mobius maps instead of
circle inversions.

Directions
----------
Spread sets (:func:`spread_directions`, cached per size): ``m`` equally
spaced on the circle for ``d = 2`` (Sarkar's construction); a regular simplex
for ``m <= d`` (pairwise angle ``arccos(-1/(m-1)) > 90`` degrees); the
cross-polytope ``+-e_i`` for ``m <= 2d`` (90 degrees); beyond that the leading
rows of a set of the next power-of-two size spread by annealed repulsion (a
soft max-min-angle objective: 84.8 degrees for 508 directions in 100-D, where
random directions reach 64). de Sa et al. use the codewords of a simplex code
on the hypercube for the same purpose (also ~90 degrees).

Two ways to use them at a node with ``k`` children, selected by
``sibling_angle``:

* ``sibling_angle=None`` -- de Sa et al. literally: a spread set of ``k+1``
  directions, one of which is turned onto the parent direction. In high
  dimensions every child then leaves at ~90 degrees to the way back, so a
  path down the tree turns by ~90 degrees at every node.
* ``sibling_angle=60`` (default) -- "cone" sets: the children lie in a cone
  around the direction opposite to the parent, ``cos(a) (-b) + sin(a) s_j``
  with ``s_j`` a spread set orthogonal to ``b`` and the half-angle ``a`` as
  small as keeps siblings ``sibling_angle`` apart (a single child continues
  straight on). The parent direction is still a used direction and the
  children avoid it by at least ``180 - a >= 90`` degrees. Because precision
  forces a small ``tau`` (below), the per-node losses matter: on the WordNet
  noun tree (82,115 nodes, depth 18) in 100-D with ``tau = 30/18``, the mean
  relative error of sampled tree distances is 0.109 with cones and 0.304 with
  de Sa's spread sets (0.144 / 0.105 / 0.086 for sibling angles 75 / 60 / 45,
  the worst-case distortion rising from 1.24 over 1.47 to 1.87).

All sets are turned by one seeded random rotation, and at each node a
Householder reflection maps the set's parent slot onto ``b``.

Placement, numerically
----------------------
In the frame where ``x`` is the origin, the differential of ``z -> x (+) z``
at 0 is ``(1-|x|^2) I``: Euclidean directions at ``x`` are hyperbolic
directions and no rotation is involved. A child is therefore
``y = x (+) v`` with ``v = tanh(tau/2) u``, and with ``s = v + |v|^2 x``,
``D = 1 + 2<x,v> + |x|^2 |v|^2``:

.. math::

    y - x = \\frac{(1-\\|x\\|^2)\\, s}{D}, \\qquad
    1-\\|y\\|^2 = \\frac{(1-\\|x\\|^2)(1-\\|v\\|^2)}{D}, \\qquad
    b_y \\propto -\\big((1-\\|v\\|^2)\\, s + \\|s\\|^2\\, y\\big),

the last being the direction of ``(-y) (+) x`` (the parent seen from ``y``)
with the common factor ``(1-|x|^2)^2/D^2`` removed. Nothing is formed by
subtracting nearby points, so the back-direction ``b_y`` is exact to a few
ulps however close ``y`` is to the boundary; ``1-|x|^2`` is recomputed from
the stored float64 coordinates with compensated arithmetic at every level, so
every stored child lies at distance ``tau`` from its *stored* parent.

Where precision ends
--------------------
A float64 coordinate near 1 has spacing ``1.1e-16``, so a point at hyperbolic
norm ``h`` (``1-|x|^2 ~ 4 e^{-h}``) is placed with an error of about
``1e-16 e^{h}/2`` hyperbolic units: ~1e-7 at ``h = 20``, ~5e-4 at
``h = 30``, ~0.1 at ``h = 35``; beyond ~37 neighbouring nodes become
indistinguishable. The default scale keeps every node within
``max_norm = 30`` (``1-|x|^2 >= ~4e-13``), where placement errors are still
below 1e-3 of an edge.

Choosing the scale ``tau``
--------------------------
Let ``theta`` be the smallest angle between two directions used at any node.
Any geodesic between points in two cones of half-angle ``theta/2`` around
different directions passes within ``-log tan(theta/4)`` of the apex, so each
turn of a tree path loses at most

.. math::

    \\nu = -2 \\log \\tan(\\theta / 4)

of length, and ``tau = (1+epsilon)/epsilon * nu`` gives distortion at most
``1 + epsilon`` (Sarkar's bound; in 2-D ``theta = 2 pi/deg_max`` and this is
de Sa et al.'s ``tau = (1+epsilon)/epsilon * 2 log(deg_max/(pi/2))`` up to
the small-angle approximation ``tan t ~ t``). Precision caps ``tau``: a node at
depth ``l`` has hyperbolic norm at most ``tau * l``, so
``tau <= max_norm / max_depth`` keeps the whole tree inside the representable
range. By default ``tau`` is that cap (the lowest distortion float64 can
hold); with ``epsilon`` it is ``min(tau_epsilon, cap)``.

References
----------
.. [1] R. Sarkar, "Low distortion Delaunay embedding of trees in hyperbolic
   plane", Graph Drawing 2011.
.. [2] C. De Sa, A. Gu, C. Re, F. Sala, "Representation tradeoffs for
   hyperbolic embeddings", ICML 2018 (arXiv:1804.03329), section 3.
"""

from __future__ import annotations

import functools
import logging

import numba as nb
import numpy as np

from hypann._validation import check_positive_int, check_real, check_seed
from hypann.datasets.synthetic import _levels
from hypann.geometry import _kernels
from hypann.geometry._kernels import _conformal_row
from hypann.geometry.poincare import dist0, dist_from_delta

__all__ = ["combinatorial_embedding", "spread_directions", "sarkar_tau", "tree_distortion", "tree_distances"]

logger = logging.getLogger(__name__)

# Default precision budget: largest hyperbolic norm a node may reach. At norm
# 30 float64 places a point to ~5e-4 hyperbolic units (see module docstring).
DEFAULT_MAX_NORM = 30.0

# Default smallest angle (degrees) between sibling directions in the "cone"
# direction sets; measured on the WordNet noun tree in 100-D (module docstring).
DEFAULT_SIBLING_ANGLE = 60.0

# Iterations of the annealed repulsion that spreads more than 2*dim directions;
# the minimum angle is within 0.2 degrees of its 200-iteration value at 60.
_REPULSION_ITERATIONS = 60
# Inverse temperature of the soft max-min objective, annealed from low to high.
_REPULSION_BETA = (5.0, 50.0)


def _simplex(m, dim):
    if m == 1:
        out = np.zeros((1, dim))
        out[0, 0] = 1.0
        return out
    e = np.eye(m) - 1.0 / m
    e /= np.linalg.norm(e, axis=1, keepdims=True)
    out = np.zeros((m, dim))
    out[:, :m] = e
    return out


def _cross_polytope(m, dim):
    out = np.zeros((m, dim))
    i = np.arange(m)
    out[i, i // 2] = np.where(i % 2 == 0, 1.0, -1.0)
    return out


def _repulsion(m, dim, rng):
    p = rng.standard_normal((m, dim))
    p /= np.linalg.norm(p, axis=1, keepdims=True)
    lo, hi = _REPULSION_BETA
    for t in range(_REPULSION_ITERATIONS):
        frac = t / _REPULSION_ITERATIONS
        g = p @ p.T
        np.fill_diagonal(g, -2.0)
        w = np.exp((lo + (hi - lo) * frac) * (g - 1.0))
        grad = w @ p
        grad -= np.einsum("ij,ij->i", grad, p)[:, None] * p
        norm = np.linalg.norm(grad, axis=1, keepdims=True)
        p -= (0.5 * (1.0 - frac)) * grad / np.where(norm > 0.0, norm, 1.0)
        p /= np.linalg.norm(p, axis=1, keepdims=True)
    return p


@functools.lru_cache(maxsize=8)
def _large_set(m, dim, seed):
    """Repulsion-spread set of ``m`` vectors and the min-angle cosine of each prefix."""
    out = _repulsion(m, dim, np.random.default_rng([seed, m, dim]))
    g = out @ out.T
    g[np.tril_indices(m)] = -1.0
    # prefix_cos[j] = largest cosine among the first j rows (j >= 2)
    prefix_cos = np.concatenate([[-1.0], np.maximum.accumulate(g.max(axis=0))])
    out.setflags(write=False)
    prefix_cos.setflags(write=False)
    return out, prefix_cos


def _bucket(m):
    """Size of the repulsion set whose leading rows serve ``m`` directions."""
    return 1 << int(np.ceil(np.log2(m)))


def spread_directions(m, dim, *, seed=0):
    """``m`` well-separated unit vectors in ``dim`` dimensions (deterministic).

    Parameters
    ----------
    m : int
        Number of directions, ``>= 1``.
    dim : int
        Dimension, ``>= 2``.
    seed : int, default 0
        Seed of the repulsion used for ``m > 2 dim`` (no effect otherwise).

    Returns
    -------
    ndarray of shape (m, dim)
        Unit rows: ``m`` equally spaced on the circle for ``dim = 2``; a
        regular simplex for ``m <= dim``; the cross-polytope for
        ``m <= 2 dim``; otherwise the leading ``m`` rows of a set of the next
        power of two of vectors spread by annealed repulsion (one set per
        size and dimension, cached), so that few repulsions serve many ``m``.
    """
    m = check_positive_int(m, "m")
    dim = check_positive_int(dim, "dim")
    if dim < 2:
        raise ValueError(f"dim must be >= 2, got dim={dim}")
    seed = check_seed(seed, "seed", allow_none=False)
    if dim == 2:
        ang = 2.0 * np.pi * np.arange(m) / m
        return np.c_[np.cos(ang), np.sin(ang)]
    if m <= dim:
        return _simplex(m, dim)
    if m <= 2 * dim:
        return _cross_polytope(m, dim)
    return np.array(_large_set(_bucket(m), dim, int(seed))[0][:m])


def _min_angle(s):
    if s.shape[0] < 2:
        return np.pi
    g = s @ s.T
    np.fill_diagonal(g, -1.0)
    return float(np.arccos(np.clip(g.max(), -1.0, 1.0)))


def _spread_min_angle(m, dim, *, seed=0):
    """Minimum pairwise angle of :func:`spread_directions` (closed form where known)."""
    if m < 2:
        return np.pi
    if dim == 2:
        return 2.0 * np.pi / m
    if m <= dim:
        return float(np.arccos(-1.0 / (m - 1)))
    if m <= 2 * dim:
        return np.pi / 2.0
    return float(np.arccos(np.clip(_large_set(_bucket(m), dim, int(seed))[1][m], -1.0, 1.0)))


def sarkar_tau(epsilon, min_angle):
    """Scale for distortion ``1 + epsilon`` given the smallest angle between directions.

    .. math::

        \\tau = \\frac{1+\\epsilon}{\\epsilon}\\,\\nu, \\qquad
        \\nu = -2\\log\\tan\\frac{\\theta_{\\min}}{4}

    Parameters
    ----------
    epsilon : float
        Target distortion minus one, ``> 0``.
    min_angle : float
        Smallest angle (radians) between two directions used at a node.
    """
    epsilon = check_real(epsilon, "epsilon", low=0.0, low_open=True)
    min_angle = check_real(min_angle, "min_angle", low=0.0, high=np.pi, low_open=True)
    nu = -2.0 * np.log(np.tan(min_angle / 4.0))
    return (1.0 + epsilon) / epsilon * nu


def _check_parents(parents):
    parents = np.asarray(parents)
    if parents.ndim != 1 or parents.dtype.kind not in "iu" or parents.size == 0:
        raise ValueError(
            f"parents must be a non-empty 1-D integer array, got shape {parents.shape} dtype {parents.dtype}"
        )
    return parents.astype(np.int64)


def _children_table(parents):
    """Children counts and each node's slot among its parent's children (by id)."""
    n = parents.size
    has_parent = parents >= 0
    counts = np.bincount(parents[has_parent], minlength=n)
    order = np.flatnonzero(has_parent)
    order = order[np.argsort(parents[order], kind="stable")]
    slot = np.zeros(n, dtype=np.int64)
    start = np.concatenate([[0], np.cumsum(counts)])[:-1]
    slot[order] = np.arange(order.size) - start[parents[order]]
    return counts, slot


def _cone_set(k, dim, sibling_angle, seed):
    """Parent slot ``-a`` plus ``k`` children in a cone around ``a``.

    Children are ``cos(alpha) a + sin(alpha) s_j`` with ``s_j`` a spread set
    orthogonal to ``a``; ``alpha`` is the smallest angle that keeps siblings at
    least ``sibling_angle`` apart (``cos theta = cos^2 alpha + sin^2 alpha
    cos theta_s``), or 90 degrees if even that does not reach it.
    """
    out = np.zeros((k + 1, dim))
    out[0, -1] = -1.0
    if k == 1:
        out[1, -1] = 1.0
        return out
    s = spread_directions(k, dim - 1, seed=seed)
    cos_s = np.cos(_spread_min_angle(k, dim - 1, seed=seed))
    sin2 = min(1.0, (1.0 - np.cos(sibling_angle)) / (1.0 - cos_s))
    out[1:, :-1] = np.sqrt(sin2) * s
    out[1:, -1] = np.sqrt(1.0 - sin2)
    return out


def _direction_sets(counts, parents, root, dim, sibling_angle, seed):
    """Stack of direction sets: one per children count, parent slot first.

    Returns ``(table, offset, root_offset)``: the set of a non-root node with
    ``k`` children is ``table[offset[k] : offset[k] + k + 1]`` (row 0 is the
    parent slot); the root's ``k`` directions start at ``root_offset``.
    """
    rng = np.random.default_rng(seed)
    q, r = np.linalg.qr(rng.standard_normal((dim, dim)))
    rotation = q * np.sign(np.diag(r))  # Haar-random orthogonal matrix
    ks = np.unique(counts[(counts > 0) & (parents >= 0)])
    k_root = int(counts[root])
    cone = sibling_angle is not None and dim >= 3
    blocks = [spread_directions(max(k_root, 1), dim, seed=seed)]
    offset = np.zeros(int(ks.max()) + 1 if ks.size else 1, dtype=np.int64)
    total = blocks[0].shape[0]
    for k in ks.tolist():
        if cone:
            block = _cone_set(k, dim, sibling_angle, seed)
        else:
            block = spread_directions(k + 1, dim, seed=seed)
        offset[k] = total
        blocks.append(block)
        total += block.shape[0]
    return np.vstack(blocks) @ rotation, offset, 0


def _min_used_angle(table, offset, counts, root):
    """Smallest angle between two directions of any set used (for ``epsilon``)."""
    theta = _min_angle(table[: max(int(counts[root]), 1)])
    for k in np.flatnonzero(offset > 0).tolist():
        theta = min(theta, _min_angle(table[offset[k] : offset[k] + k + 1]))
    return theta


@nb.njit(cache=True, parallel=True)
def _place_level(points, back, kids, par, table, rows, first_rows, r_v, c_v):
    """Place ``kids`` at distance ``2 artanh(r_v)`` from their parents (one level).

    ``rows[t]`` is the table row of kid ``t``'s direction in its parent's
    canonical set, ``first_rows[t]`` that set's parent slot (``-1`` for the
    root's children, whose set is used as is). Writes ``points`` and ``back``
    rows of the kids only; parents are read, so the level is race-free.
    """
    dim = points.shape[1]
    for t in nb.prange(kids.shape[0]):
        i = kids[t]
        p = par[t]
        x = points[p]
        cx = _conformal_row(x)
        u = table[rows[t]].copy()
        f = first_rows[t]
        if f >= 0:
            # Householder reflection taking the set's parent slot onto back[p]
            w = table[f] - back[p]
            wn = np.sqrt(np.dot(w, w))
            if wn > 0.0:
                w /= wn
                u -= 2.0 * np.dot(w, u) * w
        vv = r_v * r_v
        xv = r_v * np.dot(x, u)
        den = 1.0 + 2.0 * xv + (1.0 - cx) * vv
        scale = cx / den
        sv = np.empty(dim)
        for j in range(dim):
            sv[j] = r_v * u[j] + vv * x[j]
        ss = np.dot(sv, sv)
        y = points[i]
        for j in range(dim):
            y[j] = x[j] + scale * sv[j]
        b = back[i]
        bn = 0.0
        for j in range(dim):
            b[j] = c_v * sv[j] + ss * y[j]
            bn += b[j] * b[j]
        bn = np.sqrt(bn)
        for j in range(dim):
            b[j] = -b[j] / bn


def combinatorial_embedding(
    parents,
    dim=100,
    *,
    tau=None,
    epsilon=None,
    max_norm=DEFAULT_MAX_NORM,
    sibling_angle=DEFAULT_SIBLING_ANGLE,
    seed=0,
):
    """Embed a rooted tree in the Poincare ball with the construction of de Sa et al.

    Every edge has hyperbolic length ``tau``; children of a node leave it in
    well-separated directions that avoid the direction back to its parent
    (see the module docstring for directions, numerics and the scale).

    Parameters
    ----------
    parents : array_like of int, shape (n,)
        Parent of each node, ``-1`` for the single root.
    dim : int, default 100
        Dimension of the ball, ``>= 2``.
    tau : float, optional
        Edge length. Default: ``max_norm / max_depth``, or, with ``epsilon``,
        ``min(sarkar_tau(epsilon, theta_min), max_norm / max_depth)``.
    epsilon : float, optional
        Target distortion ``1 + epsilon`` for the default ``tau``; a warning
        is logged when precision (``max_norm``) does not allow it.
    max_norm : float, default 30.0
        Precision budget: the largest hyperbolic norm the default ``tau`` may
        give a node.
    sibling_angle : float or None, default 60.0
        Degrees. A number places the children of a node in a cone opposite
        the parent direction, as narrow as keeps siblings this far apart
        ("cone" sets); ``None`` uses de Sa et al.'s max-min spread set of
        ``k+1`` directions containing the parent direction ("spread" sets).
        In 2-D both are Sarkar's equally spaced circle.
    seed : int, default 0
        Seeds the rotation of the direction sets and the repulsion.

    Returns
    -------
    points : ndarray of shape (n, dim), float64, strictly inside the ball

    Notes
    -----
    Runs level by level, each level one parallel numba pass over its nodes:
    1.4-1.8 s for the 82,115-node WordNet noun tree in 100-D on a shared
    2-core machine, 6-7 s the first time in a process (spreading the 256- and
    512-vector direction sets).
    """
    parents = _check_parents(parents)
    dim = check_positive_int(dim, "dim")
    if dim < 2:
        raise ValueError(f"dim must be >= 2, got dim={dim}")
    max_norm = check_real(max_norm, "max_norm", low=0.0, low_open=True)
    seed = check_seed(seed, "seed", allow_none=False)
    epsilon = check_real(epsilon, "epsilon", low=0.0, low_open=True, allow_none=True)
    if sibling_angle is not None:
        sibling_angle = np.radians(check_real(sibling_angle, "sibling_angle", low=0.0, high=180.0, low_open=True))
    depth = _levels(parents)
    n = parents.size
    root = int(np.flatnonzero(parents < 0)[0])
    max_depth = int(depth.max())
    counts, slot = _children_table(parents)
    table, offset, root_offset = _direction_sets(counts, parents, root, dim, sibling_angle, seed)

    cap = max_norm / max(max_depth, 1)
    if tau is None:
        tau = cap
        if epsilon is not None:
            theta = _min_used_angle(table, offset, counts, root)
            wanted = sarkar_tau(epsilon, theta)
            if wanted > cap:
                logger.warning(
                    "epsilon=%g needs tau=%.3g (min angle %.1f deg) but max_norm=%g at depth %d "
                    "allows only tau=%.3g; using %.3g",
                    epsilon, wanted, np.degrees(theta), max_norm, max_depth, cap, cap,
                )
            tau = min(wanted, cap)
    else:
        tau = check_real(tau, "tau", low=0.0, low_open=True)
    logger.info("combinatorial embedding: n=%d depth=%d dim=%d tau=%.4g", n, max_depth, dim, tau)

    points = np.zeros((n, dim))
    back = np.zeros((n, dim))  # unit direction from each node towards its parent
    r_v = float(np.tanh(tau / 2.0))
    c_v = float(1.0 / np.cosh(tau / 2.0) ** 2)
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(max_depth + 2))
    for lev in range(1, max_depth + 1):
        kids = np.ascontiguousarray(order[bounds[lev] : bounds[lev + 1]])
        par = parents[kids]
        if lev == 1:
            rows = root_offset + slot[kids]
            first = np.full(kids.size, -1, dtype=np.int64)
        else:
            first = offset[counts[par]]
            rows = first + 1 + slot[kids]
        _place_level(points, back, kids, par, table, rows, first, r_v, c_v)
    return points


def tree_distances(parents, i, j):
    """Number of edges on the tree path between nodes ``i[t]`` and ``j[t]``.

    Vectorised lowest-common-ancestor search by lifting both ends; cost
    ``O(len(i) * depth)``.
    """
    parents = _check_parents(parents)
    depth = _levels(parents)
    a = np.asarray(i, dtype=np.int64).copy()
    b = np.asarray(j, dtype=np.int64).copy()
    da, db = depth[a], depth[b]
    swap = da < db
    a[swap], b[swap] = b[swap], a[swap].copy()
    total = np.abs(da - db)
    diff = total.copy()
    while np.any(diff > 0):
        step = diff > 0
        a[step] = parents[a[step]]
        diff[step] -= 1
    while np.any(a != b):
        step = a != b
        a[step] = parents[a[step]]
        b[step] = parents[b[step]]
        total[step] += 2
    return total


def tree_distortion(points, parents, *, tau=None, n_pairs=10_000, seed=0):
    """Compare hyperbolic distances with ``tau`` times tree distances on random pairs.

    .. math::

        \\text{relative error}(i, j) = \\frac{|d_H(x_i, x_j) - \\tau\\, d_T(i, j)|}{\\tau\\, d_T(i, j)}

    Parameters
    ----------
    points : ndarray of shape (n, d)
        Embedded nodes.
    parents : array_like of int, shape (n,)
        The tree (``-1`` for the root).
    tau : float, optional
        Edge scale; default: the median hyperbolic length of the tree's edges
        (exactly the construction's ``tau`` for :func:`combinatorial_embedding`).
    n_pairs : int, default 10000
        Number of random pairs ``i != j`` (uniform, with replacement).
    seed : int, default 0

    Returns
    -------
    dict
        ``tau``, ``n_pairs``, ``mean_relative_error``, ``median_relative_error``,
        ``max_relative_error``, ``mean_ratio`` (mean of ``d_H / (tau d_T)``),
        ``worst_case_distortion`` (max ratio / min ratio over the pairs, de Sa
        et al.'s ``d_wc``), ``edge_length_spread`` (max/min edge length),
        ``max_hyperbolic_norm`` and ``conformal_quantiles`` (``1-|x|^2`` at
        quantiles 0, 0.001, 0.01, 0.1, 0.5 and 1, keyed by quantile).
    """
    parents = _check_parents(parents)
    points = np.ascontiguousarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[0] != parents.size:
        raise ValueError(f"points must have shape ({parents.size}, d), got {points.shape}")
    n_pairs = check_positive_int(n_pairs, "n_pairs")
    n = parents.size
    if n < 2:
        raise ValueError("tree_distortion needs at least 2 nodes")
    conf = _kernels.conformal_factor(points)
    child = np.flatnonzero(parents >= 0)
    edge = dist_from_delta(
        _pair_delta(points, conf, child, parents[child])
    )
    if tau is None:
        tau = float(np.median(edge))
    else:
        tau = check_real(tau, "tau", low=0.0, low_open=True)
    rng = np.random.default_rng(check_seed(seed, "seed", allow_none=False))
    i = rng.integers(0, n, size=n_pairs)
    j = (i + rng.integers(1, n, size=n_pairs)) % n  # j != i
    d_tree = tau * tree_distances(parents, i, j)
    d_hyp = dist_from_delta(_pair_delta(points, conf, i, j))
    ratio = d_hyp / d_tree
    rel = np.abs(ratio - 1.0)
    qs = (0.0, 0.001, 0.01, 0.1, 0.5, 1.0)
    return {
        "tau": tau,
        "n_pairs": n_pairs,
        "mean_relative_error": float(rel.mean()),
        "median_relative_error": float(np.median(rel)),
        "max_relative_error": float(rel.max()),
        "mean_ratio": float(ratio.mean()),
        "worst_case_distortion": float(ratio.max() / ratio.min()),
        "edge_length_spread": float(edge.max() / edge.min()),
        "max_hyperbolic_norm": float(dist0(points, cx=conf).max()),
        "conformal_quantiles": {q: float(v) for q, v in zip(qs, np.quantile(conf, qs))},
    }


def _pair_delta(points, conf, i, j):
    diff = points[i] - points[j]
    return np.einsum("ij,ij->i", diff, diff) / (conf[i] * conf[j])
