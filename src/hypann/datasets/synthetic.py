"""Seeded synthetic hyperbolic data sets: random trees and wrapped-normal clusters.

Two generators of Poincare-ball points, both float64, deterministic for a seed
and vectorized per tree level (100,000 tree nodes take ~0.1 s in 10-D and
1-2.5 s in 100-D on a shared 2-core machine, mostly random numbers and memory):

* :func:`hierarchical_tree` -- a random rooted tree laid out in the ball, each
  node at hyperbolic distance about ``edge_length`` from its parent, so that
  the deepest nodes reach ``1-|x|^2 ~ 1e-8`` (hyperbolic norm ~ 19-20). This is
  the default demo data of hypann (tree-like, boundary-heavy, as hyperbolic
  embeddings of hierarchies are).
* :func:`clustered` -- a mixture of wrapped normal distributions (Nagano et
  al. 2019; Mathieu et al. 2019): isotropic Gaussian tangent vectors pushed to
  random cluster centres with the exponential map.

Every point is placed with the exponential map written as a Mobius addition

.. math::

    \\exp_x(t\\,u) = x \\oplus \\big(\\tanh(t/2)\\,u\\big), \\qquad
    x \\oplus y = \\frac{(1 + 2\\langle x, y\\rangle + \\|y\\|^2)\\,x + (1-\\|x\\|^2)\\,y}
                      {1 + 2\\langle x, y\\rangle + \\|x\\|^2\\|y\\|^2},

for a unit direction ``u`` (whose Euclidean direction at ``x`` is also its
hyperbolic direction, the ball being conformal) and a hyperbolic length ``t``:
``d(x, x \\oplus y) = 2 artanh |y| = t`` exactly. The conformal factor of the
result is carried along in closed form,

.. math::

    1 - \\|x \\oplus y\\|^2 = \\frac{(1-\\|x\\|^2)(1-\\|y\\|^2)}
                                  {1 + 2\\langle x, y\\rangle + \\|x\\|^2\\|y\\|^2},

with ``1-|y|^2 = 1/cosh^2(t/2)``, so no ``1-|x|^2`` is ever formed by
cancellation. The denominator is at least ``(1-|x||y|)^2 > 0``.

References
----------
Nagano, Yamaguchi, Fujita, Koyama, *A Wrapped Normal Distribution on
Hyperbolic Space for Gradient-Based Learning*, ICML 2019.
Ungar, *Analytic Hyperbolic Geometry* (Mobius addition).
"""

from __future__ import annotations

import logging
from numbers import Integral

import numpy as np

from hypann._validation import check_positive_int, check_real, check_seed

__all__ = ["random_tree_parents", "embed_tree", "hierarchical_tree", "clustered"]

logger = logging.getLogger(__name__)


def _mobius_add(x, cx, y, cy):
    """Mobius addition ``x (+) y`` row-wise, with the conformal factor of the result.

    ``cx = 1-|x|^2`` and ``cy = 1-|y|^2`` are given (exact or compensated);
    returns ``(z, cz)``. Private: arguments are trusted.
    """
    xy = np.einsum("ij,ij->i", x, y)
    yy = 1.0 - cy
    xx = 1.0 - cx
    den = 1.0 + 2.0 * xy + xx * yy
    a = (1.0 + 2.0 * xy + yy) / den
    b = cx / den
    z = x * a[:, None]
    z += y * b[:, None]
    cz = cx * cy / den
    return z, cz


def _exp_map(x, cx, u, length):
    """``exp_x(length * u)`` for unit directions ``u`` (rows) and hyperbolic lengths."""
    half = 0.5 * np.asarray(length, dtype=np.float64)
    r = np.tanh(half)
    cy = 1.0 / np.cosh(half) ** 2
    return _mobius_add(x, cx, r[:, None] * u, cy)


def _normal(rng, shape):
    """Standard normal directions, drawn in float32 (twice as fast) and widened.

    Only used for random directions, whose distribution float32 resolves far
    beyond what matters; the geometry itself is computed in float64.
    """
    return rng.standard_normal(shape, dtype=np.float32).astype(np.float64)


def _row_norms(g):
    return np.sqrt(np.einsum("ij,ij->i", g, g))


def _unit_rows(g):
    g /= _row_norms(g)[:, None]
    return g


def _check_dim(dim):
    dim = check_positive_int(dim, "dim")
    if dim < 2:
        raise ValueError(f"dim must be >= 2 for a hyperbolic data set, got dim={dim}")
    return dim


def _check_range(value, name, *, low, integer=False):
    try:
        lo, hi = value
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (low, high), got {name}={value!r}") from None
    kind = Integral if integer else (int, float, np.floating, np.integer)
    for v in (lo, hi):
        if isinstance(v, bool) or not isinstance(v, kind) or not np.isfinite(v):
            what = "integers" if integer else "finite numbers"
            raise ValueError(f"{name} must be a pair of {what}, got {name}={value!r}")
    if not low <= lo <= hi:
        raise ValueError(f"{name} must satisfy {low} <= low <= high, got {name}={value!r}")
    return lo, hi


def random_tree_parents(n, *, branching=(2, 5), seed=0):
    """Parent array of a random rooted tree with ``n`` nodes in breadth-first order.

    Level by level, every node of the current level gets a number of children
    drawn uniformly from ``branching`` (inclusive); levels are added until
    ``n`` nodes exist, and the last level is a uniformly random subset of the
    children it would have had (so every level but the last is complete).

    Parameters
    ----------
    n : int
        Number of nodes (internal nodes and leaves), ``>= 1``.
    branching : tuple of int, default (2, 5)
        Inclusive range of the number of children per node, ``1 <= low <= high``.
    seed : int, default 0
        Seed of ``np.random.default_rng``.

    Returns
    -------
    parents : ndarray of shape (n,), int64
        ``parents[0] = -1`` (the root); ``parents[i] < i`` for ``i > 0``.
    """
    n = check_positive_int(n, "n")
    lo, hi = _check_range(branching, "branching", low=1, integer=True)
    rng = np.random.default_rng(check_seed(seed, "seed", allow_none=False))
    return _random_tree_parents(n, int(lo), int(hi), rng)


def _random_tree_parents(n, lo, hi, rng):
    parents = [np.array([-1], dtype=np.int64)]
    level = np.array([0], dtype=np.int64)
    total = 1
    while total < n:
        counts = rng.integers(lo, hi + 1, size=level.size)
        child_parents = np.repeat(level, counts)
        need = n - total
        if child_parents.size > need:
            keep = np.sort(rng.choice(child_parents.size, size=need, replace=False))
            child_parents = child_parents[keep]
        parents.append(child_parents)
        level = np.arange(total, total + child_parents.size, dtype=np.int64)
        total += child_parents.size
    return np.concatenate(parents)


def _levels(parents):
    """Depth of every node and the order grouping nodes level by level.

    Works for any parent array (one root, ``-1``); raises on cycles or more
    than one root.
    """
    n = parents.size
    roots = np.flatnonzero(parents < 0)
    if roots.size != 1:
        raise ValueError(f"parents must describe a tree with exactly one root (-1), found {roots.size} roots")
    if np.any(parents >= n):
        bad = int(np.flatnonzero(parents >= n)[0])
        raise ValueError(f"parents[{bad}] = {int(parents[bad])} is not a node id (n={n})")
    depth = np.full(n, -1, dtype=np.int64)
    depth[roots[0]] = 0
    frontier_depth = 0
    unresolved = parents >= 0
    while unresolved.any():
        idx = np.flatnonzero(unresolved)
        ready = depth[parents[idx]] == frontier_depth
        if not ready.any():
            raise ValueError("parents contains a cycle or nodes unreachable from the root")
        depth[idx[ready]] = frontier_depth + 1
        unresolved[idx[ready]] = False
        frontier_depth += 1
    return depth


def embed_tree(
    parents,
    dim,
    *,
    edge_length=2.0,
    edge_noise=0.25,
    outward=(0.0, 1.0),
    jitter=0.05,
    seed=0,
):
    """Lay a rooted tree out in the Poincare ball with random outward directions.

    The root sits at the origin. A child of a node ``x`` is placed at
    ``exp_x(t u)``: ``t = edge_length * U(1-edge_noise, 1+edge_noise)`` and the
    unit direction ``u = cos(a) r + sin(a) w``, with ``r = x/|x|`` the radial
    (away from the origin) direction at ``x``, ``w`` a uniformly random unit
    vector orthogonal to ``r`` and ``cos(a)`` uniform in ``outward``. Children
    of the root go in uniformly random directions. The angle law does not
    depend on ``dim``, so a tree has the same norm profile in 2-D and 100-D.
    A node at hyperbolic norm ``h`` puts its children near norm
    ``h + log(cosh t + sinh t cos a)`` (law of cosines, large ``h``).

    Finally every node is moved by ``exp_x(jitter * v)`` with ``v`` a standard
    normal tangent vector scaled by ``1/sqrt(dim)`` (so its length is about
    ``jitter``), after its children were placed: internal nodes do not sit
    exactly at the fork of the geodesics to their children, and points are
    distinct even for repeated directions.

    Parameters
    ----------
    parents : array_like of int, shape (n,)
        Parent of each node, ``-1`` for the single root.
    dim : int
        Dimension of the ball, ``>= 2``.
    edge_length : float, default 2.0
        Mean hyperbolic edge length.
    edge_noise : float, default 0.25
        Relative half-width of the uniform edge-length noise, in ``[0, 1)``.
    outward : tuple of float, default (0.0, 1.0)
        Range of ``cos(a)`` between a child's direction and the radial
        direction, in ``[-1, 1]``; ``(0, 1)`` samples a hemisphere-like cone
        pointing away from the origin.
    jitter : float, default 0.05
        Hyperbolic size of the final per-node perturbation (0 disables it).
    seed : int, default 0

    Returns
    -------
    points : ndarray of shape (n, dim), float64
    """
    parents = np.asarray(parents)
    if parents.ndim != 1 or parents.dtype.kind not in "iu":
        raise ValueError(f"parents must be a 1-D integer array, got shape {parents.shape} dtype {parents.dtype}")
    parents = parents.astype(np.int64)
    dim = _check_dim(dim)
    edge_length = check_real(edge_length, "edge_length", low=0.0, low_open=True)
    edge_noise = check_real(edge_noise, "edge_noise", low=0.0, high=0.999)
    cos_lo, cos_hi = _check_range(outward, "outward", low=-1.0)
    if cos_hi > 1.0:
        raise ValueError(f"outward must lie in [-1, 1], got outward={outward!r}")
    jitter = check_real(jitter, "jitter", low=0.0)
    rng = np.random.default_rng(check_seed(seed, "seed", allow_none=False))

    depth = _levels(parents)
    n = parents.size
    points = np.zeros((n, dim))
    conf = np.ones(n)
    order = np.argsort(depth, kind="stable")
    bounds = np.searchsorted(depth[order], np.arange(depth.max() + 2))
    for lev in range(1, depth.max() + 1):
        nodes = order[bounds[lev] : bounds[lev + 1]]
        par = parents[nodes]
        x = points[par]
        cx = conf[par]
        g = _normal(rng, (nodes.size, dim))
        if lev == 1:
            u = _unit_rows(g)
        else:
            r = x / _row_norms(x)[:, None]
            g -= np.einsum("ij,ij->i", g, r)[:, None] * r
            w = _unit_rows(g)
            cos_a = rng.uniform(cos_lo, cos_hi, size=nodes.size)
            w *= np.sqrt(1.0 - cos_a * cos_a)[:, None]
            r *= cos_a[:, None]
            u = w + r
        t = edge_length * rng.uniform(1.0 - edge_noise, 1.0 + edge_noise, size=nodes.size)
        points[nodes], conf[nodes] = _exp_map(x, cx, u, t)
    if jitter > 0.0:
        v = _normal(rng, (n, dim))
        length = _row_norms(v)
        v /= np.where(length > 0.0, length, 1.0)[:, None]
        points, conf = _exp_map(points, conf, v, length * (jitter / np.sqrt(dim)))
    logger.debug("embedded tree: n=%d depth=%d min 1-|x|^2=%.3g", n, depth.max(), conf.min())
    return points


def hierarchical_tree(
    n=100_000,
    dim=10,
    *,
    seed=0,
    branching=(2, 5),
    edge_length=2.0,
    edge_noise=0.25,
    outward=(0.0, 1.0),
    jitter=0.05,
):
    """Random tree embedded in the Poincare ball: hypann's hierarchical test data.

    :func:`random_tree_parents` (``n`` nodes, uniform branching) laid out by
    :func:`embed_tree`; all nodes (root, internal nodes and leaves) are
    returned in breadth-first order, root first.

    Norm distribution with the defaults (``n = 100,000``; measured for seeds
    0-2 at 2-D, 10-D and 100-D, which agree because directions are drawn with
    a dimension-free angle law): 9 full levels (1, 5, 16, 62, 221, 792, 2802,
    9852, 34397 nodes for seed 0) plus a partial 10th (51852); the mean
    hyperbolic norm grows by about 1.7 per level (1.9, 3.8, 5.6, ..., 15.8);
    the median point is at hyperbolic norm ~14.8 (``1-|x|^2 ~ 1.5e-6``),
    about 85% of the points have ``1-|x|^2 < 1e-5``, 99% have
    ``1-|x|^2 < 5e-4``, and the deepest reach ``min(1-|x|^2)`` between
    ``8e-9`` and ``2e-8`` (hyperbolic norm 19.1-20.1); tests pin
    ``[3e-9, 5e-8]``. Smaller ``n`` gives fewer levels and shallower points.
    At these norms float64 places a point to ~1e-8 relative accuracy in
    hyperbolic terms.

    Parameters
    ----------
    n : int, default 100000
        Number of points.
    dim : int, default 10
        Dimension, ``>= 2``.
    seed : int, default 0
        Seed of ``np.random.default_rng``; equal seeds give identical arrays.
    branching : tuple of int, default (2, 5)
        Inclusive range of children per node.
    edge_length, edge_noise, outward, jitter
        Layout settings, see :func:`embed_tree`.

    Returns
    -------
    points : ndarray of shape (n, dim), float64, strictly inside the unit ball

    Examples
    --------
    >>> from hypann.datasets.synthetic import hierarchical_tree
    >>> X = hierarchical_tree(1000, 10, seed=1)
    >>> X.shape
    (1000, 10)
    """
    n = check_positive_int(n, "n")
    _check_dim(dim)
    lo, hi = _check_range(branching, "branching", low=1, integer=True)
    rng = np.random.default_rng(check_seed(seed, "seed", allow_none=False))
    parents = _random_tree_parents(n, int(lo), int(hi), rng)
    layout_seed = int(rng.integers(2**63 - 1))
    return embed_tree(
        parents,
        dim,
        edge_length=edge_length,
        edge_noise=edge_noise,
        outward=outward,
        jitter=jitter,
        seed=layout_seed,
    )


def clustered(
    n=100_000,
    dim=10,
    *,
    seed=0,
    n_clusters=100,
    spread=1.0,
    center_norm=(1.0, 10.0),
):
    """Mixture of wrapped normal clusters in the Poincare ball.

    Cluster centres ``mu_j`` lie in uniformly random directions at hyperbolic
    norms uniform in ``center_norm``. Each point picks a cluster uniformly and
    is ``exp_mu(v)`` with ``v ~ N(0, (spread^2/dim) I)`` in the tangent space
    (parallel-transported from the origin, which is what ``mu (+) exp_0(v)``
    computes), so its hyperbolic distance to the centre is about ``spread``
    in any dimension: the wrapped normal distribution of Nagano et al.

    Norm distribution with the defaults (seed 0): median hyperbolic norm
    ~6.7, maximum ~11.4 in 10-D and ~10.7 in 100-D (``max(center_norm)`` plus
    about ``1.5 spread``), so ``min(1-|x|^2)`` is about ``5e-5`` to ``9e-5``.

    Parameters
    ----------
    n : int, default 100000
        Number of points.
    dim : int, default 10
        Dimension, ``>= 2``.
    seed : int, default 0
        Seed of ``np.random.default_rng``.
    n_clusters : int, default 100
        Number of wrapped normal components.
    spread : float, default 1.0
        Typical hyperbolic distance of a point to its centre (RMS of ``|v|``).
    center_norm : tuple of float, default (1.0, 10.0)
        Range of the centres' hyperbolic norms.

    Returns
    -------
    points : ndarray of shape (n, dim), float64, strictly inside the unit ball
    """
    n = check_positive_int(n, "n")
    dim = _check_dim(dim)
    n_clusters = check_positive_int(n_clusters, "n_clusters")
    spread = check_real(spread, "spread", low=0.0, low_open=True)
    h_lo, h_hi = _check_range(center_norm, "center_norm", low=0.0)
    rng = np.random.default_rng(check_seed(seed, "seed", allow_none=False))

    h = rng.uniform(h_lo, h_hi, size=n_clusters)
    centers = np.tanh(h / 2.0)[:, None] * _unit_rows(rng.standard_normal((n_clusters, dim)))
    center_conf = 1.0 / np.cosh(h / 2.0) ** 2
    label = rng.integers(0, n_clusters, size=n)
    v = _normal(rng, (n, dim))
    length = _row_norms(v)
    v /= np.where(length > 0.0, length, 1.0)[:, None]
    points, conf = _exp_map(centers[label], center_conf[label], v, length * (spread / np.sqrt(dim)))
    logger.debug("clustered: n=%d min 1-|x|^2=%.3g", n, conf.min())
    return points
