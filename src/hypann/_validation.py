"""Input checks at the public boundary: all user-facing error text lives here.

Everything that enters hypann from a user (index build/search, the CLI,
datasets) goes through :func:`check_points` once and comes out as float64,
C-contiguous Poincare points of unit curvature together with their conformal
factors ``1 - |x|^2``. Private code trusts its arguments.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np

from hypann.geometry import _kernels
from hypann.geometry.models import lorentz_to_poincare

MODELS = ("poincare", "lorentz")

# Relative tolerance on the Lorentz constraint -x0^2 + |xs|^2 = -1/c: points
# further off than this are not on the hyperboloid (a likely unit mix-up).
LORENTZ_CONSTRAINT_RTOL = 1e-6


def _to_array(x, name):
    if hasattr(x, "detach") and hasattr(x, "cpu"):  # torch tensor, no import
        x = x.detach().cpu().numpy()
    try:
        arr = np.asarray(x)
    except Exception as exc:  # pragma: no cover - exotic containers
        raise TypeError(f"{name} must be array-like, got {type(x).__name__}") from exc
    if arr.dtype == object:
        raise TypeError(f"{name} must be a numeric array, got dtype=object (ragged or mixed input?)")
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must have a real numeric dtype, got dtype={arr.dtype}")
    return arr


def check_model(model):
    if model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got model={model!r}")
    return model


def check_curvature(c):
    if isinstance(c, bool) or not isinstance(c, Real) or not np.isfinite(c) or c <= 0:
        raise ValueError(f"curvature c must be a finite number > 0, got c={c!r}")
    return float(c)


def check_points(x, *, name="X", model="poincare", c=1.0, dim=None, allow_empty=False):
    """Validate points and return ``(points, conformal)`` in the unit Poincare ball.

    Parameters
    ----------
    x : array_like of shape (n, d) (or (n, d+1) for ``model="lorentz"``)
    name : str
        Name used in error messages.
    model : {"poincare", "lorentz"}
    c : float
        Curvature magnitude of the input; points are rescaled to ``c = 1``.
    dim : int, optional
        Required Poincare dimension (e.g. the index's) for queries.
    allow_empty : bool
        Accept zero rows.

    Returns
    -------
    points : ndarray of shape (n, d), float64, C-contiguous
    conformal : ndarray of shape (n,), ``1 - |x|^2`` (compensated)
    """
    check_model(model)
    c = check_curvature(c)
    arr = _to_array(x, name)
    if arr.ndim != 2:
        raise ValueError(
            f"{name} must be a 2-D array of shape (n_points, n_dims), got ndim={arr.ndim} "
            f"with shape {arr.shape}"
        )
    if arr.shape[0] == 0 and not allow_empty:
        raise ValueError(f"{name} is empty: got shape {arr.shape}, need at least one point")
    min_cols = 2 if model == "lorentz" else 1
    if arr.shape[1] < min_cols:
        raise ValueError(f"{name} must have at least {min_cols} column(s) for model={model!r}, got shape {arr.shape}")
    arr = np.ascontiguousarray(arr, dtype=np.float64)
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise ValueError(f"{name} contains NaN or inf (first at row {bad}: {arr[bad][:4].tolist()}...)")
    if model == "lorentz":
        x0 = arr[:, 0]
        spatial = np.einsum("ij,ij->i", arr[:, 1:], arr[:, 1:])
        # -x0^2 + |xs|^2 = -1/c, checked relative to the size of the terms.
        resid = np.abs(c * (x0 * x0 - spatial) - 1.0) / np.maximum(1.0, c * x0 * x0)
        off = (x0 <= 0) | (resid > LORENTZ_CONSTRAINT_RTOL)
        if off.any():
            bad = int(np.flatnonzero(off)[0])
            raise ValueError(
                f"{name} row {bad} is not on the upper sheet of the hyperboloid "
                f"-x0^2 + |xs|^2 = -1/c (c={c}): x0={x0[bad]!r}, relative residual {resid[bad]:.3g}"
            )
        arr = np.ascontiguousarray(lorentz_to_poincare(arr, c=c))
    if c != 1.0:
        arr = arr * np.sqrt(c)
    if dim is not None and arr.shape[1] != dim:
        raise ValueError(
            f"{name} has {arr.shape[1]} dimensions (Poincare), but the index was built with {dim}"
        )
    conformal = _kernels.conformal_factor(arr) if arr.shape[0] else np.empty(0)
    outside = ~(conformal > 0.0)
    if outside.any():
        bad = int(np.flatnonzero(outside)[0])
        norm = float(np.linalg.norm(arr[bad]))
        raise ValueError(
            f"{name} row {bad} is not strictly inside the Poincare ball: |x|*sqrt(c) = {norm!r} >= 1 "
            f"({int(outside.sum())} such rows). hypann rejects rather than clips; "
            f"project your points first if that is intended."
        )
    return arr, conformal


def check_k(k, n, *, name="k"):
    if isinstance(k, bool) or not isinstance(k, Integral):
        raise TypeError(f"{name} must be an integer, got {type(k).__name__} ({k!r})")
    if not 1 <= k <= n:
        raise ValueError(f"{name} must be in [1, {n}] (the number of indexed points), got {name}={k}")
    return int(k)


def check_radius(r, m, *, name="r"):
    """A search radius: a finite number ``>= 0`` or an array of ``m`` of them; returns float64 (m,)."""
    if isinstance(r, bool):
        raise TypeError(f"{name} must be a number or an array of numbers, got {r!r}")
    try:
        arr = np.asarray(r, dtype=np.float64)
    except (TypeError, ValueError):
        raise TypeError(f"{name} must be a number or an array of numbers, got {type(r).__name__}") from None
    if arr.ndim > 1 or (arr.ndim == 1 and arr.shape[0] != m):
        raise ValueError(f"{name} must be a scalar or have shape ({m},) (one radius per query), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)) or np.any(arr < 0):
        raise ValueError(f"{name} must be finite and >= 0, got {name}={r!r}")
    return np.ascontiguousarray(np.broadcast_to(arr, (m,)))


def check_positive_int(value, name, *, allow_none=False):
    if value is None and allow_none:
        return None
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 1:
        raise ValueError(f"{name} must be a positive integer{' or None' if allow_none else ''}, got {name}={value!r}")
    return int(value)


def check_real(value, name, *, low=None, high=None, low_open=False):
    if isinstance(value, bool) or not isinstance(value, Real) or not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {name}={value!r}")
    if low is not None and (value < low or (low_open and value == low)):
        op = ">" if low_open else ">="
        raise ValueError(f"{name} must be {op} {low}, got {name}={value!r}")
    if high is not None and value > high:
        raise ValueError(f"{name} must be <= {high}, got {name}={value!r}")
    return float(value)


def check_choice(value, name, choices):
    if value not in choices:
        raise ValueError(f"unknown {name} {value!r}; expected one of {sorted(choices)}")
    return value


def reject_unknown(params, allowed, where):
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for {where}; allowed: {sorted(allowed) or 'none'}"
        )


def check_stored_points(points, conformal):
    """Float64 ``points`` (n, d), ``n >= 1``, already validated, and their stored ``conformal`` (n,).

    For index structures that take the conformal factors ``1-|x|^2`` computed
    once by the caller instead of recomputing them.
    """
    points = np.ascontiguousarray(points, dtype=np.float64)
    conformal = np.ascontiguousarray(conformal, dtype=np.float64)
    if points.ndim != 2 or points.shape[0] == 0:
        raise ValueError(f"points must be a non-empty 2-D array, got shape {points.shape}")
    if conformal.shape != (points.shape[0],):
        raise ValueError(f"conformal must have shape ({points.shape[0]},) to match points, got {conformal.shape}")
    return points, conformal


def check_stored_queries(queries, q_conformal, dim):
    """Float64 ``queries`` (m, dim) and their stored ``q_conformal`` (m,)."""
    queries = np.ascontiguousarray(queries, dtype=np.float64)
    if queries.ndim != 2 or queries.shape[1] != dim:
        raise ValueError(f"queries must have shape (m, {dim}), got {queries.shape}")
    q_conformal = np.ascontiguousarray(q_conformal, dtype=np.float64)
    if q_conformal.shape != (queries.shape[0],):
        raise ValueError(f"q_conformal must have shape ({queries.shape[0]},), got {q_conformal.shape}")
    return queries, q_conformal
