"""Hyperbolic geometry: pure float64 functions (Poincare ball, Lorentz, Klein, bands)."""

from hypann.geometry import models, poincare
from hypann.geometry.models import (
    klein_to_poincare,
    lorentz_dist,
    lorentz_to_poincare,
    minkowski_inner,
    poincare_to_klein,
    poincare_to_lorentz,
)
from hypann.geometry.poincare import (
    conformal_factor,
    delta,
    dist,
    dist0,
    dist_from_delta,
    delta_from_dist,
    euclidean_ball,
    euclidean_ball_from_delta,
    pairwise_delta,
    pairwise_dist,
    ray_points,
)

__all__ = [
    "models",
    "poincare",
    "conformal_factor",
    "delta",
    "dist",
    "dist0",
    "dist_from_delta",
    "delta_from_dist",
    "euclidean_ball",
    "euclidean_ball_from_delta",
    "pairwise_delta",
    "pairwise_dist",
    "ray_points",
    "klein_to_poincare",
    "lorentz_dist",
    "lorentz_to_poincare",
    "minkowski_inner",
    "poincare_to_klein",
    "poincare_to_lorentz",
]
