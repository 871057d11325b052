"""Input checks at the public boundary: all user-facing error text lives here.

Everything that enters hypann from a user (index build/search, the CLI,
datasets) goes through :func:`check_points` once and comes out as float64,
C-contiguous Poincare points of unit curvature, in an array hypann owns (never
a view of the caller's memory), together with their conformal factors
``1 - |x|^2``. Arrays of a search structure read back from a file are
untrusted too: ``validate_state`` of each structure checks them with the
``check_state_*`` helpers below. Private code trusts its arguments.

Parameters are checked where they are used, at build / fit / search time
(constructors only store them), by the ``check_*`` helpers below. A value of
the wrong type raises :class:`ParameterTypeError` (a ``TypeError`` that is
also a ``ValueError``); a value of the right type out of range raises
``ValueError``. Every message names the parameter, the bad value and what is
allowed. Booleans must be real booleans: the string ``"no"`` is not False.
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np

from hypann._runtime import SERIAL_MAX_QUERIES, threads_for
from hypann.geometry import _kernels

MODELS = ("poincare", "lorentz")


class ParameterTypeError(TypeError, ValueError):
    """A parameter of the wrong type (``"no"`` for a bool, ``2.0`` for an int, ...).

    A ``TypeError`` that is also a ``ValueError``, so that code catching
    either for bad settings keeps working (scikit-learn does the same).
    """


def _is_int(value):
    if type(value) is int:  # the common case, without the abstract-class check
        return True
    return isinstance(value, Integral) and not isinstance(value, (bool, np.bool_))


def _is_real(value):
    if type(value) is float or type(value) is int:
        return True
    return isinstance(value, Real) and not isinstance(value, (bool, np.bool_))
def _is_torch_tensor(x):
    # duck-typed so that torch is never imported here (geoopt's ManifoldTensor is a torch.Tensor)
    return hasattr(x, "detach") and hasattr(x, "cpu") and hasattr(x, "numpy") and not isinstance(x, np.ndarray)


def tensor_manifold(x):
    """``(model, c)`` of a geoopt ``ManifoldTensor`` on a hyperbolic manifold, else ``None``.

    geoopt's ``PoincareBall(c)`` (and ``Stereographic(k)`` with ``k < 0``,
    ``c = -k``) holds points with ``|x| < 1/sqrt(c)``: ``model="poincare"``.
    geoopt's ``Lorentz(k)`` holds points with ``-x0^2 + |xs|^2 = -k``, so its
    curvature is ``-1/k``: ``model="lorentz"``, ``c = 1/k``. Other manifolds
    (and plain tensors) carry no hyperbolic model: ``None``. geoopt is not
    imported; the manifold is recognised by its class names.
    """
    manifold = getattr(x, "manifold", None)
    if manifold is None or not _is_torch_tensor(x):
        return None
    kinds = {cls.__name__ for cls in type(manifold).__mro__}
    if "Lorentz" in kinds:
        return "lorentz", 1.0 / float(manifold.k)
    if "Stereographic" in kinds:
        k = float(manifold.k)
        if k >= 0:
            raise ValueError(
                f"points lie on the geoopt manifold {type(manifold).__name__}(k={k:g}), whose curvature "
                f"k >= 0 is not hyperbolic; hypann needs a PoincareBall, Stereographic(k<0) or Lorentz manifold"
            )
        return "poincare", -k
    return None


def check_tensor_manifold(x, *, name, model, c):
    """Reject a geoopt ``ManifoldTensor`` whose manifold disagrees with ``model`` / ``c`` (no silent rescale)."""
    found = tensor_manifold(x)
    if found is None:
        return
    t_model, t_c = found
    if t_model != model or not np.isclose(t_c, c, rtol=1e-6, atol=0.0):
        raise ValueError(
            f"{name} is a geoopt ManifoldTensor on {x.manifold!r}, i.e. model={t_model!r} with c={t_c:.9g}, "
            f"but model={model!r}, c={c!r} were given; pass model={t_model!r}, c={t_c:.9g}"
        )


def to_numpy(x):
    """A PyTorch tensor (any device, with or without grad) or a DLPack-only array -> numpy; others unchanged.

    Tensors are copied into a new array (never a view of the caller's, possibly
    trainable, parameters); ``bfloat16`` is widened to float32 first, as numpy
    has no such type. torch is not imported.
    """
    if _is_torch_tensor(x):
        t = x.detach().cpu()
        if str(t.dtype) == "torch.bfloat16":
            t = t.float()
        if hasattr(t, "resolve_conj"):
            t = t.resolve_conj().resolve_neg()
        return np.array(t.numpy(), copy=True)
    if not isinstance(x, np.ndarray) and not hasattr(x, "__array__") and hasattr(x, "__dlpack__"):
        return np.from_dlpack(x)
    return x


def numpy_input(x, *, name, model, c):
    """``x`` for a caller that reads it more than once: a tensor has its manifold checked
    (:func:`check_tensor_manifold`) and is copied to numpy here, once (:func:`to_numpy`); other input
    comes back as given (an array or a memory map is not copied)."""
    check_tensor_manifold(x, name=name, model=model, c=c)
    return to_numpy(x)


def _to_array(x, name):
    try:
        arr = np.asarray(to_numpy(x))
    except ValueError as exc:  # ragged nested lists
        raise ValueError(f"{name} must be a 2-D array of equal-length rows, got ragged input ({exc})") from None
    except Exception as exc:  # pragma: no cover - exotic containers
        raise TypeError(f"{name} must be array-like, got {type(x).__name__}") from exc
    if arr.dtype == object:
        raise TypeError(f"{name} must be a numeric array, got dtype=object (ragged or mixed input?)")
    if arr.dtype.kind not in "fiu":
        raise TypeError(f"{name} must have a real numeric dtype, got dtype={arr.dtype}")
    return arr


def check_model(model):
    if not isinstance(model, str) or model not in MODELS:
        raise ValueError(f"model must be one of {MODELS}, got model={model!r}")
    return model


def check_curvature(c):
    if not _is_real(c):
        raise ParameterTypeError(f"curvature c must be a finite number > 0, got c={c!r}")
    try:
        value = float(c)
    except OverflowError:  # an int beyond float range
        value = math.inf
    if not math.isfinite(value) or value <= 0:
        raise ValueError(f"curvature c must be a finite number > 0, got c={c!r}")
    return value


_FAST_DTYPES = (np.dtype(np.float64), np.dtype(np.float32))


def plain_rows(x, *, model="poincare", dim=None, max_rows=SERIAL_MAX_QUERIES):
    """Whether ``x`` is 1 to ``max_rows`` rows of ``model`` (Poincare rows of ``dim`` coordinates when given,
    hyperboloid rows of ``dim + 1``) in a float64 or float32 numpy array: the input the serial fast paths
    take (the input check's ``few_points_conformal`` / ``few_lorentz_points`` and the one-query kernels);
    anything else goes through the full checks."""
    extra = model == "lorentz"
    return (type(x) is np.ndarray and x.ndim == 2 and 0 < x.shape[0] <= max_rows and x.shape[1] > extra
            and x.dtype in _FAST_DTYPES and (extra or model == "poincare")
            and (dim is None or x.shape[1] == dim + extra))


def _reject_outside(name, outside, norms, what):
    bad = int(np.flatnonzero(outside)[0])
    raise ValueError(
        f"{name} row {bad} is not strictly inside the Poincare ball: {what} = {float(norms[bad])!r} >= 1 "
        f"({int(outside.sum())} such rows). hypann rejects rather than clips; "
        f"project your points first if that is intended."
    )


def check_points(x, *, name="X", model="poincare", c=1.0, dim=None, allow_empty=False):
    """Validate points and return ``(points, conformal)`` in the unit Poincare ball.

    Curvature ``-c`` is mapped to the unit ball by ``x -> sqrt(c) x``, but the
    conformal factor is taken from the caller's own coordinates first, in
    double-double arithmetic (rescaling first would round the coordinates and
    lose ``log10(1/(1-c|x|^2))`` digits of it):

    .. math::

        \\lambda = 1 - c\\|x\\|^2 \\ \\text{(Poincare input)}, \\qquad
        \\lambda = \\frac{2}{1 + \\sqrt{1 + c\\|x_s\\|^2}} \\ \\text{(Lorentz input)},

    the latter being ``1 - c|p|^2`` of ``p = x_s / (1 + sqrt(c) x0)`` with
    ``x0`` implied by ``x_s`` (see
    :func:`hypann.geometry.models.lorentz_to_poincare`). ``lambda`` is the
    stored conformal factor of the unit-curvature point ``sqrt(c) x`` (resp.
    ``sqrt(c) p = sqrt(c) lambda x_s / 2``), whose coordinates are rounded once.

    Parameters
    ----------
    x : array_like of shape (n, d) (or (n, d+1) for ``model="lorentz"``)
        numpy array, nested sequence, PyTorch tensor (copied to the CPU) or
        geoopt ``ManifoldTensor`` (whose manifold must match ``model`` and ``c``).
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
        A new array (never the caller's memory, even for float64 input).
    conformal : ndarray of shape (n,), ``1 - |x|^2`` (compensated)
    """
    check_model(model)
    c = check_curvature(c)
    if plain_rows(x, model=model, dim=dim):
        # a query or two: one serial kernel; anything it finds wrong is reported by the full checks below
        few = _kernels.few_lorentz_points if model == "lorentz" else _kernels.few_points_conformal
        points, conformal, worst = few(x, c)
        if worst > 0.0:
            return points, conformal
    check_tensor_manifold(x, name=name, model=model, c=c)
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
    # a copy in every case: the index must own its points (the caller may edit theirs)
    arr = np.array(arr, dtype=np.float64, order="C", copy=True)
    finite = np.isfinite(arr).all(axis=1)
    if not finite.all():
        bad = int(np.flatnonzero(~finite)[0])
        raise ValueError(f"{name} contains NaN or inf (first at row {bad}: {arr[bad][:4].tolist()}...)")
    if dim is not None and arr.shape[1] - (model == "lorentz") != dim:
        raise ValueError(
            f"{name} has {arr.shape[1] - (model == 'lorentz')} dimensions (Poincare), but the index was built with {dim}"
        )
    if arr.shape[0] == 0:
        return np.empty((0, arr.shape[1] - (model == "lorentz"))), np.empty(0)
    if model == "lorentz":
        # -x0^2 + |xs|^2 = -1/c, checked relative to the size of the terms (the one-query kernels
        # compute the same per row, so a query's point and factor have the same bits on either path)
        with threads_for(arr.shape[0]):
            points, conformal, resid, on_sheet = _kernels.lorentz_points(arr, c)
        off = ~on_sheet
        if off.any():
            bad = int(np.flatnonzero(off)[0])
            raise ValueError(
                f"{name} row {bad} is not on the upper sheet of the hyperboloid "
                f"-x0^2 + |xs|^2 = -1/c (c={c}): x0={arr[bad, 0]!r}, relative residual {resid[bad]:.3g}"
            )
    elif c != 1.0:
        with threads_for(arr.shape[0]):
            conformal = _kernels.conformal_factor_curved(arr, c)
        points = arr * np.sqrt(c)
    else:
        with threads_for(arr.shape[0]):
            conformal = _kernels.conformal_factor(arr)
        points = arr
    outside = ~(conformal > 0.0)
    if outside.any():
        _reject_outside(name, outside, np.sqrt(c) * np.linalg.norm(arr, axis=1), "|x|*sqrt(c)")
    if points is not arr:
        # the rounded unit-curvature coordinates must stay in the open ball too
        # (they leave it only where 1-c|x|^2 is below float64 resolution, ~1e-16)
        with threads_for(points.shape[0]):
            rounded = ~(_kernels.conformal_factor(points) > 0.0)
        if rounded.any():
            bad = int(np.flatnonzero(rounded)[0])
            raise ValueError(
                f"{name} row {bad} is too far from the origin for float64: its conformal factor 1-c|x|^2 is "
                f"{conformal[bad]:.3g} and its unit-curvature Poincare coordinates round onto the boundary "
                f"({int(rounded.sum())} such rows); float64 places points up to hyperbolic norm ~37 "
                f"(sqrt(c) times the distance from the origin)"
            )
    return points, conformal


def check_int(value, name, *, low=None, high=None, allow_none=False, extra=()):
    """An integer (``numbers.Integral``, not bool) in ``[low, high]``, or one of ``extra``."""
    if value is None and allow_none:
        return None
    parts = []
    if low is not None and high is not None:
        parts.append(f"an integer in [{low}, {high}]")
    elif low is not None:
        parts.append(f"an integer >= {low}")
    elif high is not None:
        parts.append(f"an integer <= {high}")
    else:
        parts.append("an integer")
    parts += [repr(e) for e in extra]
    if allow_none:
        parts.append("None")
    allowed = " or ".join(parts)
    if not _is_int(value):
        raise ParameterTypeError(f"{name} must be {allowed}, got {name}={value!r} ({type(value).__name__})")
    if value in extra:
        return int(value)
    if (low is not None and value < low) or (high is not None and value > high):
        raise ValueError(f"{name} must be {allowed}, got {name}={value!r}")
    return int(value)


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
    if _is_int(value) and value >= 1:
        return int(value)
    msg = f"{name} must be a positive integer{' or None' if allow_none else ''}, got {name}={value!r}"
    if not _is_int(value):
        raise ParameterTypeError(f"{msg} ({type(value).__name__})")
    raise ValueError(msg)


def check_real(value, name, *, low=None, high=None, low_open=False, high_open=False, allow_none=False):
    """A finite real number (not bool) in the given range."""
    if value is None and allow_none:
        return None
    if not _is_real(value):
        raise ParameterTypeError(f"{name} must be a finite number, got {name}={value!r} ({type(value).__name__})")
    if not np.isfinite(value):
        raise ValueError(f"{name} must be a finite number, got {name}={value!r}")
    if low is not None and (value < low or (low_open and value == low)):
        op = ">" if low_open else ">="
        raise ValueError(f"{name} must be {op} {low}, got {name}={value!r}")
    if high is not None and (value > high or (high_open and value == high)):
        op = "<" if high_open else "<="
        raise ValueError(f"{name} must be {op} {high}, got {name}={value!r}")
    return float(value)


def check_bool(value, name):
    """A real boolean (``bool`` or ``numpy.bool_``); strings such as ``"no"`` are refused."""
    if not isinstance(value, (bool, np.bool_)):
        hint = " (a string is not a boolean: write true/false in spec strings)" if isinstance(value, str) else ""
        raise ParameterTypeError(f"{name} must be True or False, got {name}={value!r}{hint}")
    return bool(value)


def check_seed(value, name="random_state", *, allow_none=True):
    """A seed for :func:`numpy.random.default_rng`: an integer ``>= 0`` (or None when allowed)."""
    if value is None and allow_none:
        return None
    allowed = "a non-negative integer" + (" or None" if allow_none else "")
    if not _is_int(value):
        raise ParameterTypeError(f"{name} must be {allowed}, got {name}={value!r} ({type(value).__name__})")
    if value < 0:
        raise ValueError(f"{name} must be {allowed}, got {name}={value!r}")
    return int(value)


def check_str(value, name, *, what="a string"):
    if not isinstance(value, str) or not value.strip():
        raise ParameterTypeError(f"{name} must be {what}, got {name}={value!r}")
    return value


def check_k(k, n, *, name="k"):
    if not _is_int(k):
        raise ParameterTypeError(f"{name} must be an integer, got {type(k).__name__} ({k!r})")
    if not 1 <= k <= n:
        raise ValueError(f"{name} must be in [1, {n}] (the number of indexed points), got {name}={k}")
    return int(k)


def check_choice(value, name, choices):
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"unknown {name} {value!r}; expected one of {sorted(choices)}")
    return value


def reject_unknown(params, allowed, where):
    unknown = sorted(set(params) - set(allowed))
    if unknown:
        raise ValueError(
            f"unknown option(s) {unknown} for {where}; allowed: {sorted(allowed) or 'none'}"
        )


def check_stored_points(points, conformal, *, allow_float32=False):
    """Float64 ``points`` (n, d), ``n >= 1``, already validated, and their stored ``conformal`` (n,).

    For index structures that take the conformal factors ``1-|x|^2`` computed
    once by the caller instead of recomputing them. With ``allow_float32``,
    float32 points stay float32 (float32 storage, see :class:`hypann.HyperbolicIndex`).
    """
    keep = allow_float32 and np.asarray(points).dtype == np.float32
    points = np.ascontiguousarray(points, dtype=np.float32 if keep else np.float64)
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


def check_query_coordinates(X, dim, k, c, model="poincare"):
    """``(k, c)`` checked for a one-query kernel (``search_coordinates`` of the search structures), which
    takes the query's raw coordinates ``X``: a float64 or float32 numpy array of shape (1, ``dim``), or
    (1, ``dim + 1``) for ``model="lorentz"``.

    ``X`` is checked for its type, shape and dtype only: the kernel itself
    checks that the row is a valid point (``few_points_conformal``,
    ``few_lorentz_points``).
    """
    check_model(model)
    if not plain_rows(X, model=model, dim=dim, max_rows=1):
        shape = getattr(X, "shape", None)
        raise ValueError(f"X must be a float64 or float32 numpy array of shape (1, {dim + (model == 'lorentz')}) "
                         f"for model={model!r}, got {type(X).__name__} of shape {shape} and dtype "
                         f"{getattr(X, 'dtype', None)}")
    return check_positive_int(k, "k"), check_curvature(c)


# --------------------------------------------------------------------------- stored state
# Arrays read back from a file (``from_arrays`` of the search structures) are
# untrusted: these helpers check names, dtypes and shapes before any kernel sees
# them, with messages that name the structure and the field.


def state_error(owner, field, message):
    """``ValueError`` for a bad field of a stored structure: ``"<owner> state '<field>': <message>"``."""
    return ValueError(f"{owner} state {field!r}: {message}")


def check_state_fields(arrays, fields, owner):
    """Require exactly the array names ``fields`` in the mapping ``arrays``."""
    try:
        names = set(arrays.keys())
    except AttributeError:
        raise TypeError(f"{owner} state must be a mapping of array names to arrays, got {type(arrays).__name__}") from None
    missing = [name for name in fields if name not in names]
    if missing:
        raise ValueError(f"not a {owner} state: missing arrays {missing}")
    unknown = sorted(str(name) for name in names - set(fields))
    if unknown:
        raise ValueError(f"not a {owner} state: unknown arrays {unknown} (expected {list(fields)})")


def check_state_array(arrays, field, dtype, shape, owner):
    """``arrays[field]`` as a C-contiguous array of exactly ``dtype`` and ``shape``.

    ``shape`` is a tuple whose entries are sizes or ``None`` (any size); ``()``
    asks for a scalar. No conversion: a stored int32 where int64 is expected is
    an error, not a silent cast.
    """
    arr = np.asarray(arrays[field])
    want = np.dtype(dtype)
    if arr.dtype != want:
        raise state_error(owner, field, f"must have dtype {want}, got {arr.dtype}")
    if arr.ndim != len(shape) or any(s is not None and a != s for a, s in zip(arr.shape, shape)):
        text = "(" + ", ".join("*" if s is None else str(s) for s in shape) + ("," if len(shape) == 1 else "") + ")"
        raise state_error(owner, field, f"must have shape {text}, got {arr.shape}")
    return np.ascontiguousarray(arr) if arr.ndim else arr.copy()  # (ascontiguousarray makes 0-d 1-d)


def state_flag(arrays, field, owner):
    """Whether the optional flag ``field`` of a stored state is set: absent is ``False``, the integer 1
    (a scalar) ``True``, anything else a ``ValueError`` naming ``owner`` and ``field``."""
    if field not in arrays:
        return False
    flag = np.asarray(arrays[field])
    if flag.shape != () or flag.dtype.kind not in "iu" or int(flag) != 1:
        raise ValueError(f"{owner} state {field!r} must be the integer 1 when present, got {flag!r}")
    return True


def first_bad(mask):
    """Index (int, or tuple for n-D) of the first True entry of ``mask``."""
    flat = int(np.flatnonzero(np.asarray(mask).ravel())[0])
    idx = np.unravel_index(flat, np.shape(mask))
    return int(idx[0]) if len(idx) == 1 else tuple(int(i) for i in idx)


def common_length(arrays, fields):
    """The most frequent first-axis length among ``arrays[f]`` for ``f`` in ``fields``.

    Used to size a stored structure so that the one array whose length
    disagrees with the others is the one the error names. Scalars count as
    length -1; ties go to the earlier field.
    """
    lengths = [np.shape(arrays[f])[0] if np.ndim(arrays[f]) else -1 for f in fields]
    return max(lengths, key=lambda v: (lengths.count(v), -lengths.index(v)))
