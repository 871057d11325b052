"""Shared fixtures and generators for hypann tests."""

from __future__ import annotations

import os

import numpy as np
import pytest
from hypothesis import HealthCheck, settings

settings.register_profile(
    "hypann", deadline=None, max_examples=40, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
# CI (CI=true) draws the same examples on every run, so that a submission's verdict does not depend on the
# draw; local runs draw new ones each time, and benchmarks/fuzz.py searches with seeds of its own.
settings.register_profile("hypann-ci", parent=settings.get_profile("hypann"), derandomize=True, database=None)
settings.load_profile("hypann-ci" if os.environ.get("CI") else "hypann")


@pytest.fixture
def rng():
    return np.random.default_rng(12345)


def without_far_stage(monkeypatch):
    """Graph indexes built from now on (until ``monkeypatch`` is undone) search without the second stage for
    queries far from the data: no upper pivots (:mod:`hypann.graph.knn_graph`)."""
    from hypann.graph import knn_graph

    monkeypatch.setattr(knn_graph, "upper_pivots", lambda pivots, children, levels: np.empty(0, dtype=np.int64))


def brute_knn_delta(Q, cq, X, cx, k):
    """The float64 scan (:func:`hypann.geometry._kernels.brute_knn_delta`) with the points as the library
    passes them (:func:`hypann.geometry.gram_scan.knn_delta_scan`): read-only views. A test's writable points
    would make numba compile the kernel for a second type."""
    from hypann._runtime import read_only
    from hypann.geometry import _kernels

    return _kernels.brute_knn_delta(Q, cq, read_only(X), read_only(cx), k)


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


def points_at_norm(directions, h):
    """Points along ``directions`` at hyperbolic norm ``h`` (up to ~37), strictly inside the ball.

    ``|x| = tanh(h/2)`` is formed by numpy's correctly rounded ``tanh``; where
    rounding the coordinates pushes ``|x|`` to 1 or beyond, the point is
    pulled in by one ulp at a time (a relative ``2^-53``) until the
    compensated ``1-|x|^2`` is positive. At ``h = 37``, ``1-|x|^2 ~ 3e-16``.
    """
    from hypann.geometry._kernels import conformal_factor

    directions = np.asarray(directions, dtype=np.float64)
    directions = directions / np.linalg.norm(directions, axis=1, keepdims=True)
    x = directions * np.tanh(np.asarray(h, dtype=np.float64) / 2.0)[:, None]
    for _ in range(16):
        outside = ~(conformal_factor(x) > 0.0)
        if not outside.any():
            return x
        x[outside] *= 1.0 - 2.0**-53
    raise AssertionError("could not place points inside the ball")


def deep_clusters(rng, n, d, *, h_min=20.0, h_max=37.0, n_clusters=4):
    """Clusters near the boundary: hyperbolic norms ``h_min..h_max``, neighbours very close.

    Each cluster sits at its own norm (the first at ``h_max``); a point moves
    from it by a relative spread ``s`` between ``1e-3`` and ``3`` in
    hyperbolic distance, radially and tangentially (a tangential move of
    ``s e^{-h}`` in the direction is a hyperbolic move of about ``s``).
    Points a few ulps apart, duplicates and exact ties all occur.
    """
    centres = rng.normal(size=(n_clusters, d))
    centres /= np.linalg.norm(centres, axis=1, keepdims=True)
    h_c = rng.uniform(h_min, h_max, n_clusters)
    h_c[0] = h_max
    label = rng.integers(0, n_clusters, n)
    spread = 10.0 ** rng.uniform(-3, 0.5, n)
    h = np.minimum(h_c[label] + spread * rng.uniform(-1, 1, n), h_max)
    directions = centres[label] + (np.exp(-h) * spread)[:, None] * rng.normal(size=(n, d))
    return points_at_norm(directions, h)


class FakeTerminal:
    """A stderr stand-in that says it is a terminal (tqdm's ``disable=None`` then shows its bar)."""

    def __init__(self):
        self.text = ""

    def write(self, s):
        self.text += s

    def flush(self):
        pass

    def isatty(self):
        return True


class CountingTensor:
    """A duck-typed tensor (what ``to_numpy`` recognises as one, without torch) that counts its copies to numpy."""

    dtype = "torch.float64"

    def __init__(self, arr):
        self._arr = arr
        self.copies = 0

    def detach(self):
        return self

    def cpu(self):
        return self

    def numpy(self):
        self.copies += 1
        return self._arr
