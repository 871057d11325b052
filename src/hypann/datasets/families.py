"""Independent data families for measuring search on data nobody tuned for.

Every family is a function ``(n, dim, *, seed) -> points`` returning an
``(n, dim)`` float64 array strictly inside the unit Poincare ball (curvature
``-1``), deterministic for a seed; :data:`FAMILIES` names them and
:func:`make_family` calls one by name. They differ in the ways that break
approximate search:

================== ==========================================================
``hierarchical_tree``  random tree laid out in the ball (hypann's demo data,
                       :func:`hypann.datasets.synthetic.hierarchical_tree`):
                       tree-like, 85% of the points with ``1-|x|^2 < 1e-5``.
``gaussian_mixture``   10 to 1,000 wrapped normal clusters of uneven sizes
                       and spreads, centres at hyperbolic norms 0.5 to 12:
                       many separated dense regions.
``hyperbolic_uniform`` uniform in the hyperbolic ball of radius 10: no
                       structure at all, nearly every point within ~0.3 of
                       the boundary sphere ``h = 10`` (``1-|x|^2 ~ 2e-4``).
``boundary_heavy``     tight clusters at hyperbolic norms 12 to 24: almost all
                       ``1-|x|^2`` below ``1e-4``, down to ``~1e-10``.
``duplicates``         a Gaussian mixture in which every distinct point is
                       repeated about 8 times (exact copies, groups up to ~25
                       points): ties and zero distances.
``wordnet_nouns``      the WordNet 3.0 nouns (82,115 synsets) through the data
                       set registry: the trained 10-D embedding
                       (``"wordnet-nouns-10d"``, 79% of the points on one norm
                       sphere) for ``dim=10`` and the 100-D combinatorial
                       construction (``"wordnet-nouns-100d"``) for
                       ``dim=100``; ``n`` rows drawn without replacement.
================== ==========================================================

Points are placed by the exponential map of :mod:`hypann.datasets.synthetic`
(``exp_x(t u) = x (+) tanh(t/2) u``), which carries the conformal factor
``1-|x|^2`` along in closed form instead of forming it by cancellation; points
at hyperbolic norm ``h`` from the origin are ``tanh(h/2) u`` with
``1-|x|^2 = 1/cosh^2(h/2)``. Families return points only: users take the
conformal factor of the *stored* (rounded) coordinates with the compensated
kernel (:func:`hypann.geometry._kernels.conformal_factor`). It differs from
the closed form of the ideal point by the rounding of the coordinates, an
absolute ``~1e-15`` (tested): the generated distribution is right to that
precision, and every later computation sees the stored points exactly.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Callable

import numpy as np

from hypann._validation import check_positive_int, check_real
from hypann.datasets import synthetic
from hypann.datasets.synthetic import _check_dim, _check_range, _exp_map, _normal, _row_norms, _unit_rows
from hypann.geometry.poincare import conformal_factor, dist0

__all__ = [
    "FAMILIES",
    "make_family",
    "hierarchical_tree",
    "gaussian_mixture",
    "hyperbolic_uniform",
    "boundary_heavy",
    "duplicates",
    "wordnet_nouns",
    "far_queries",
]

# Range of the number of clusters of a mixture when not given (log-uniform).
MIXTURE_CLUSTERS = (10, 1000)
# Mean number of copies of each distinct point in ``duplicates``.
DUPLICATE_COPIES = 8
# Grid points of the numerical inverse CDF of the hyperbolic radius.
_RADIUS_GRID = 8193


def _check_seed(seed):
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise ValueError(f"seed must be an integer, got seed={seed!r}")
    return int(seed)


def hierarchical_tree(n, dim, *, seed=0):
    """Random tree in the ball: :func:`hypann.datasets.synthetic.hierarchical_tree` with its defaults.

    Parameters
    ----------
    n : int
    dim : int, ``>= 2``
    seed : int, default 0

    Returns
    -------
    points : ndarray of shape (n, dim), float64
    """
    return synthetic.hierarchical_tree(n, dim, seed=_check_seed(seed))


def _log_uniform(rng, lo, hi, size):
    return np.exp(rng.uniform(np.log(lo), np.log(hi), size=size))


def _wrapped_normal_mixture(rng, n, dim, n_clusters, spread, center_norm):
    """Points of a mixture of wrapped normals with per-cluster spreads and Dirichlet weights.

    Returns ``(points, conformal, label)``; ``conformal`` is the closed-form
    ``1-|x|^2`` and ``label`` the cluster of each point.
    """
    h = rng.uniform(center_norm[0], center_norm[1], size=n_clusters)
    centers = np.tanh(h / 2.0)[:, None] * _unit_rows(rng.standard_normal((n_clusters, dim)))
    center_conf = 1.0 / np.cosh(h / 2.0) ** 2
    spreads = _log_uniform(rng, spread[0], spread[1], n_clusters)
    weights = rng.dirichlet(np.ones(n_clusters))
    label = rng.choice(n_clusters, size=n, p=weights)
    v = _normal(rng, (n, dim))
    length = _row_norms(v)
    v /= np.where(length > 0.0, length, 1.0)[:, None]
    points, conf = _exp_map(centers[label], center_conf[label], v, length * (spreads[label] / np.sqrt(dim)))
    return points, conf, label


def _n_clusters(rng, n_clusters):
    if n_clusters is None:
        lo, hi = MIXTURE_CLUSTERS
        return int(round(_log_uniform(rng, lo, hi, None)))
    return check_positive_int(n_clusters, "n_clusters")


def gaussian_mixture(n, dim, *, seed=0, n_clusters=None, spread=(0.1, 2.0), center_norm=(0.5, 12.0),
                     return_labels=False):
    """Mixture of wrapped normal clusters of varying size, spread and distance from the origin.

    Cluster ``j`` has a centre ``mu_j`` in a uniformly random direction at a
    hyperbolic norm uniform in ``center_norm``, a spread ``s_j`` log-uniform
    in ``spread`` and a weight from a flat Dirichlet distribution (so cluster
    sizes vary by orders of magnitude). A point of cluster ``j`` is

    .. math::

        x = \\exp_{\\mu_j}(v), \\qquad v \\sim N\\!\\left(0, \\frac{s_j^2}{d} I_d\\right)

    in the tangent space at ``mu_j`` (transported from the origin; the
    wrapped normal of Nagano et al.), so ``d(x, mu_j) ~ s_j`` in any
    dimension.

    Parameters
    ----------
    n : int
    dim : int, ``>= 2``
    seed : int, default 0
    n_clusters : int, optional
        Default: log-uniform in ``[10, 1000]``, drawn from the seed.
    spread : tuple of float, default (0.1, 2.0)
        Range of the per-cluster spreads (hyperbolic lengths).
    center_norm : tuple of float, default (0.5, 12.0)
        Range of the centres' hyperbolic norms.
    return_labels : bool, default False
        Also return the cluster of each point.

    Returns
    -------
    points : ndarray of shape (n, dim), float64
    labels : ndarray of shape (n,), int64
        Only with ``return_labels``.
    """
    n = check_positive_int(n, "n")
    dim = _check_dim(dim)
    rng = np.random.default_rng(_check_seed(seed))
    k = _n_clusters(rng, n_clusters)
    s_lo, s_hi = _check_range(spread, "spread", low=0.0)
    if s_lo <= 0.0:
        raise ValueError(f"spread must be a pair of positive numbers, got spread={spread!r}")
    h_range = _check_range(center_norm, "center_norm", low=0.0)
    points, _, labels = _wrapped_normal_mixture(rng, n, dim, k, (s_lo, s_hi), h_range)
    return (points, labels) if return_labels else points


def _hyperbolic_radius_quantiles(u, dim, radius):
    """Inverse CDF of the hyperbolic norm of a uniform point of the ball of ``radius``.

    The density of the norm ``r`` is proportional to ``sinh(r)^(dim-1)``;
    the CDF is integrated in log space on a fine grid (trapezoids, scaled by
    the largest value so nothing overflows) and inverted by interpolation.
    """
    r = np.linspace(0.0, radius, _RADIUS_GRID)
    with np.errstate(divide="ignore"):
        log_density = (dim - 1) * np.log(np.sinh(r))
    log_density -= log_density[-1]
    density = np.exp(log_density)
    cdf = np.concatenate([[0.0], np.cumsum(0.5 * (density[1:] + density[:-1]) * np.diff(r))])
    cdf /= cdf[-1]
    return np.interp(u, cdf, r)


def hyperbolic_uniform(n, dim, *, seed=0, radius=10.0):
    """Uniform points of the hyperbolic ball of radius ``radius`` around the origin.

    The hyperbolic volume element is ``sinh(r)^(d-1) dr du``, so the norm
    ``r`` has density ``proportional to sinh(r)^(d-1)`` on ``[0, radius]``
    (mass concentrated within ``~1/(d-1)`` of the boundary sphere) and the
    direction ``u`` is uniform; the point is ``tanh(r/2) u`` with
    ``1-|x|^2 = 1/cosh^2(r/2)``.

    Parameters
    ----------
    n : int
    dim : int, ``>= 2``
    seed : int, default 0
    radius : float, default 10.0
        Hyperbolic radius (``1-|x|^2 ~ 4 e^{-radius}`` at the boundary sphere).

    Returns
    -------
    points : ndarray of shape (n, dim), float64
    """
    n = check_positive_int(n, "n")
    dim = _check_dim(dim)
    radius = check_real(radius, "radius", low=0.0, high=36.0, low_open=True)
    rng = np.random.default_rng(_check_seed(seed))
    r = _hyperbolic_radius_quantiles(rng.random(n), dim, radius)
    u = _unit_rows(rng.standard_normal((n, dim)))
    return np.tanh(r / 2.0)[:, None] * u


def boundary_heavy(n, dim, *, seed=0, n_clusters=None, spread=(0.01, 1.0), center_norm=(12.0, 24.0),
                   return_labels=False):
    """Tight wrapped normal clusters far out: most ``1-|x|^2`` below ``1e-4``.

    :func:`gaussian_mixture` with centres at hyperbolic norms 12 to 24
    (``1-|x|^2`` of the centres from ``2.5e-5`` down to ``1.5e-10``) and
    spreads 0.01 to 1. Neighbours then differ in the 5th to 10th significant
    digit of their coordinates: the family checks that search keeps float64
    precision where the conformal factor is tiny.

    Parameters
    ----------
    n : int
    dim : int, ``>= 2``
    seed : int, default 0
    n_clusters, spread, center_norm, return_labels
        As in :func:`gaussian_mixture`.

    Returns
    -------
    points : ndarray of shape (n, dim), float64
    """
    return gaussian_mixture(n, dim, seed=seed, n_clusters=n_clusters, spread=spread, center_norm=center_norm,
                            return_labels=return_labels)


def duplicates(n, dim, *, seed=0, copies=DUPLICATE_COPIES):
    """A Gaussian mixture whose points come in groups of exact copies.

    ``max(1, n // copies)`` distinct points are drawn from
    :func:`gaussian_mixture`; each of the ``n`` rows is a uniformly random
    one of them (so a distinct point has a Poisson(``copies``) number of
    copies; with the default many groups are larger than ``k = 10``).

    Parameters
    ----------
    n : int
    dim : int, ``>= 2``
    seed : int, default 0
    copies : int, default 8
        Mean group size.

    Returns
    -------
    points : ndarray of shape (n, dim), float64
    """
    n = check_positive_int(n, "n")
    copies = check_positive_int(copies, "copies")
    seed = _check_seed(seed)
    distinct = gaussian_mixture(max(1, n // copies), dim, seed=seed)
    pick = np.random.default_rng([seed, 1]).integers(0, distinct.shape[0], size=n)
    return distinct[pick]


@functools.lru_cache(maxsize=2)
def _wordnet_points(dim):
    from hypann.datasets.registry import load_points

    points = load_points(f"wordnet-nouns-{dim}d")
    points.setflags(write=False)
    return points


WORDNET_DIMS = (10, 100)


def wordnet_nouns(n, dim, *, seed=0):
    """``n`` WordNet noun points drawn without replacement, from the data set registry.

    ``dim=10``: the shipped trained embedding (``"wordnet-nouns-10d"``);
    ``dim=100``: the combinatorial construction of de Sa et al. on the noun
    spanning tree (``"wordnet-nouns-100d"``). Both have 82,115 points; the
    full sets are kept in memory after the first call.

    Parameters
    ----------
    n : int, ``<= 82115``
    dim : {10, 100}
    seed : int, default 0
        Seed of the row sample (rows keep their registry order).

    Returns
    -------
    points : ndarray of shape (n, dim), float64
    """
    n = check_positive_int(n, "n")
    if dim not in WORDNET_DIMS or isinstance(dim, bool):
        raise ValueError(f"wordnet_nouns has dim in {WORDNET_DIMS} only, got dim={dim!r}")
    points = _wordnet_points(int(dim))
    total = points.shape[0]
    if n > total:
        raise ValueError(f"wordnet_nouns has {total} points, got n={n}")
    rows = np.sort(np.random.default_rng(_check_seed(seed)).choice(total, size=n, replace=False))
    return np.array(points[rows])


@dataclass(frozen=True)
class Family:
    """One entry of :data:`FAMILIES`.

    Attributes
    ----------
    generate : callable
        ``generate(n, dim, *, seed) -> points``.
    description : str
    dims : tuple of int or None
        The dimensions the family exists in (``None``: any ``dim >= 2``).
    """

    generate: Callable
    description: str
    dims: tuple | None = None


FAMILIES = {
    "hierarchical_tree": Family(hierarchical_tree, "random tree in the ball, 85% of points with 1-|x|^2 < 1e-5"),
    "gaussian_mixture": Family(gaussian_mixture, "10-1,000 wrapped normal clusters, varying sizes/spreads/radii"),
    "hyperbolic_uniform": Family(hyperbolic_uniform, "uniform in the hyperbolic ball of radius 10"),
    "boundary_heavy": Family(boundary_heavy, "tight clusters at hyperbolic norms 12-24 (1-|x|^2 < 1e-4)"),
    "duplicates": Family(duplicates, "Gaussian mixture, every point repeated ~8 times exactly"),
    "wordnet_nouns": Family(wordnet_nouns, "WordNet nouns: trained 10-D / combinatorial 100-D embedding",
                            WORDNET_DIMS),
}


def far_queries(points, m, *, seed=0, norms=None):
    """Queries far from ``points``: uniform random directions, at the points' hyperbolic norms or in a range.

    Held-out points of a family lie among its points. These do not: their
    directions ignore where the data are, so most of them are far from every
    point, as queries of another kind than the data are (text against image
    embeddings, new directions). The nearest points of such a query are the
    points furthest out towards it, spread over several clusters
    (``docs/benchmarks.md``, "Queries far from the data").

    Parameters
    ----------
    points : array_like of shape (n, dim)
        Unit-ball points (curvature ``-1``), e.g. a family's.
    m : int
        Number of queries.
    seed : int, default 0
    norms : (float, float) or None, default None
        ``None``: each query's hyperbolic norm is that of a point drawn at
        random from ``points`` (``2 asinh(|x| / sqrt(1-|x|^2))``, accurate at the
        boundary). ``(lo, hi)``: uniform in that range of hyperbolic norms,
        ``0 <= lo <= hi <= 36`` (e.g. ``(1, 4)``: nearer the origin than
        most data, as text embeddings are in MERU).

    Returns
    -------
    queries : ndarray of shape (m, dim), float64, strictly inside the unit ball
    """
    points = np.asarray(points, dtype=np.float64)
    if points.ndim != 2 or points.shape[0] == 0:
        raise ValueError(f"points must be a non-empty (n, dim) array, got shape {points.shape}")
    conformal = conformal_factor(points)
    if not (np.all(np.isfinite(points)) and np.all(conformal > 0.0)):
        raise ValueError("points must be finite and strictly inside the unit ball (|x| < 1)")
    m = check_positive_int(m, "m")
    dim = _check_dim(points.shape[1])
    rng = np.random.default_rng(_check_seed(seed))
    if norms is None:
        rows = rng.integers(0, points.shape[0], m)
        h = dist0(points[rows], cx=conformal[rows])
    else:
        if not isinstance(norms, (tuple, list)) or len(norms) != 2:
            raise ValueError(f"norms must be None or a pair (lo, hi) of hyperbolic norms, got {norms!r}")
        lo, hi = (check_real(v, name, low=0.0, high=36.0) for v, name in zip(norms, ("norms[0]", "norms[1]")))
        if lo > hi:
            raise ValueError(f"norms must be (lo, hi) with lo <= hi, got {norms!r}")
        h = rng.uniform(lo, hi, m)
    return np.tanh(h / 2.0)[:, None] * _unit_rows(rng.standard_normal((m, dim)))


def make_family(name, n, dim, seed=0):
    """Points of the family ``name`` (a key of :data:`FAMILIES`).

    Parameters
    ----------
    name : str
    n : int
    dim : int
    seed : int, default 0

    Returns
    -------
    points : ndarray of shape (n, dim), float64, strictly inside the unit ball

    Examples
    --------
    >>> from hypann.datasets.families import make_family
    >>> make_family("gaussian_mixture", 1000, 10, seed=1).shape
    (1000, 10)
    """
    family = FAMILIES.get(name)
    if family is None:
        raise ValueError(f"unknown family {name!r}; expected one of {sorted(FAMILIES)}")
    return family.generate(n, dim, seed=seed)
