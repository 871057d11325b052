"""Shared fixtures and generators for hypann tests."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "hypann", deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
settings.load_profile("hypann")

# Per-dtype tolerances, defined once (hypann computes in float64 only).
RTOL = {np.float64: 1e-12}


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def ball_points(rng, n, d, *, min_conformal=1e-12, radial_power=0.2):
    """Points in the unit ball whose conformal factor ``1-|x|^2`` spans down to ``min_conformal``.

    Radii are drawn so that ``log(1-|x|^2)`` is spread between 0 and
    ``log(min_conformal)`` (many points very near the boundary).
    """
    dirs = rng.normal(size=(n, d))
    dirs /= np.linalg.norm(dirs, axis=1, keepdims=True)
    log_lam = np.log(min_conformal) * rng.uniform(0, 1, n) ** radial_power
    lam = np.exp(log_lam)
    r = np.sqrt(1.0 - lam)
    return dirs * r[:, None]
