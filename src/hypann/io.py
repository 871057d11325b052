"""Index files: a versioned ``.npz`` with a JSON header and a checksum, written atomically.

Layout (a zip archive readable with ``numpy.load(path, allow_pickle=False)``):

``header``
    uint8 array holding UTF-8 JSON: ``format`` ("hypann-index"),
    ``format_version``, ``hypann_version``, ``model``, ``c``, ``dtype``,
    ``n``, ``d``, ``algorithm``, ``params``, ``oracle`` (spec string),
    ``random_state`` and ``sha256``; for an oracle that is not built into
    hypann (one added with :func:`~hypann.oracles.registry.register_oracle`)
    also ``oracle_class``, the ``"module:QualName"`` import path of its class.
    Loading a file whose oracle name is not registered imports that module
    (and only it), checks the class is an
    :class:`~hypann.oracles.base.EuclideanOracle` and registers it under the
    spec's name.
``points``
    (n, d) float64 unit-curvature Poincare points.
``labels``
    optional (n,) int64 user ids of the points (distinct, ``>= 0``); absent
    when the ids are the row numbers.
``conformal``
    (n,) float64 stored conformal factors ``1-|x|^2``. They were taken from
    the caller's own coordinates (curvature ``c``, or the Lorentz model) and
    cannot be recomputed from ``points`` to the same precision. Files without
    them recompute them from ``points``.
``state/<name>``
    optional arrays of the search structure (graph, tree), so that loading
    does not rebuild it; without them the structure is rebuilt
    deterministically from the points and the seed.

``sha256`` (format version 2) is the SHA-256 of the header without that
field (JSON with sorted keys) followed by every other array in name order,
each as its name, dtype, shape and bytes: any change to the file after it was
written is detected. Version-1 files (checksum over the points only) are
still read.

An index file is untrusted input. Loading checks, before any search kernel
sees the data: the archive (a file that is not one, or is truncated or has a
flipped byte, is refused), the checksum, every header field (type and
range), the points (finite, inside the ball, shape ``(n, d)``) and -- since a
file can be rewritten with a matching checksum -- every array of the stored
structure (``validate_state`` of :class:`~hypann.search.hyperbolic_kdtree.HyperbolicKDTree`
and :class:`~hypann.graph.vamana.VamanaIndex`). Every such problem raises
``ValueError`` naming the file and the field; a missing file raises
``FileNotFoundError`` and an unreadable one the ``OSError`` of the system.

Files are written through :func:`hypann._files.atomic_write`: to a temporary
file in the destination folder, then moved into place, so a crash never
leaves a half-written index, a symbolic link is written through and a new
file gets the permissions of the umask.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import re
from numbers import Integral

import numpy as np

from hypann import _validation as V
from hypann._files import atomic_write
from hypann._version import __version__
from hypann.oracles import registry as oracle_registry
from hypann.search.registry import make_algorithm

FORMAT = "hypann-index"
FORMAT_VERSION = 2
# Versions this hypann reads: 1 (checksum over the points only) and 2.
READABLE_VERSIONS = (1, 2)

# "package.module:Outer.Class": dotted identifiers on both sides of one colon.
_IMPORT_PATH = re.compile(r"[A-Za-z_]\w*(\.[A-Za-z_]\w*)*:[A-Za-z_]\w*(\.[A-Za-z_]\w*)*")

_EXPECTED = "expected an .npz archive written by HyperbolicIndex.save"


def _sha256(a: np.ndarray) -> str:
    """Version-1 checksum: SHA-256 of the bytes of ``a``."""
    return hashlib.sha256(np.ascontiguousarray(a).view(np.uint8)).hexdigest()


def file_digest(header: dict, arrays: dict) -> str:
    """SHA-256 of ``header`` (without its ``sha256`` field) and of every array.

    The header is hashed as JSON with sorted keys; then, in name order, each
    array's name, dtype string, shape and raw bytes (C order), separated so
    that no two different files hash the same bytes.
    """
    h = hashlib.sha256()
    meta = {k: v for k, v in header.items() if k != "sha256"}
    h.update(json.dumps(meta, sort_keys=True, separators=(",", ":")).encode())
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        h.update(f"\0{name}\0{a.dtype.str}\0{a.shape}\0".encode())
        h.update(np.ascontiguousarray(a).reshape(-1).view(np.uint8))
    return h.hexdigest()


def save_index(index, path) -> None:
    """Write a built :class:`~hypann.HyperbolicIndex` to ``path`` (see the module docstring)."""
    params = index.get_params()
    params.pop("n_jobs", None)  # a runtime setting of this process, not of the file (load(path, n_jobs=...))
    params.pop("verbose", None)  # likewise (load(path, verbose=False))
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "hypann_version": __version__,
        "model": params.pop("model"),
        "c": params.pop("c"),
        "dtype": "float64",
        "n": int(index.n_points_),
        "d": int(index.dim_),
        "algorithm": params.pop("algorithm"),
        "oracle": params.pop("oracle"),
        "random_state": params.pop("random_state"),
        "params": params,
    }
    if header["oracle"] is not None and index.oracle is not None:
        oracle_class = oracle_registry.class_import_path(index.oracle)
        if oracle_class is not None and _IMPORT_PATH.fullmatch(oracle_class):  # third-party: where its class lives
            header["oracle_class"] = oracle_class
    arrays = {"points": np.asarray(index.points_), "conformal": np.asarray(index.conformal_)}
    if not index._plain_labels:
        arrays["labels"] = np.asarray(index.live_.labels)
    for name, arr in index.algorithm_.get_state().items():
        arrays[f"state/{name}"] = np.asarray(arr)
    try:
        header["sha256"] = file_digest(header, arrays)
        header_bytes = json.dumps(header).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"index settings are not JSON-serializable, cannot save: {exc}") from None
    arrays["header"] = np.frombuffer(header_bytes, dtype=np.uint8)
    atomic_write(path, lambda fh: np.savez(fh, **arrays))


# --------------------------------------------------------------------------- reading


def _not_index(path, why):
    return ValueError(f"{path!r} is not a hypann index file ({_EXPECTED}): {why}")


def _corrupt(path, why):
    return ValueError(f"{path!r} is a damaged hypann index file: {why}")


@contextlib.contextmanager
def _open(path):
    """The archive at ``path`` as an open ``NpzFile`` (members are read on access)."""
    if os.path.isdir(path):
        raise _not_index(path, "it is a directory")
    if not os.path.exists(path):
        raise FileNotFoundError(f"no index file at {path!r}")
    with open(path, "rb") as fh:  # OSError (permission, ...) propagates with the path
        try:
            z = np.load(fh, allow_pickle=False)
        except Exception as exc:  # noqa: BLE001 - any parse failure of untrusted bytes
            raise _not_index(path, f"cannot read it as .npz ({type(exc).__name__}: {exc})") from None
        if not isinstance(z, np.lib.npyio.NpzFile):
            raise _not_index(path, f"it holds a single {type(z).__name__} (an .npy file?)")
        with z:
            yield z


def _read_array(z, name, path):
    try:
        return z[name]
    except Exception as exc:  # noqa: BLE001 - truncated data, CRC error, bad npy header, ...
        raise _corrupt(path, f"cannot read array {name!r} ({type(exc).__name__}: {exc})") from None


def _parse_header(z, path) -> dict:
    if "header" not in z.files:
        raise _not_index(path, f"no 'header' array (found {sorted(z.files)[:8]})")
    raw = _read_array(z, "header", path)
    if raw.dtype != np.uint8 or raw.ndim != 1:
        raise _not_index(path, f"the header is not a uint8 vector (dtype={raw.dtype}, shape={raw.shape})")
    try:
        header = json.loads(raw.tobytes().decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _corrupt(path, f"the header is not UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        got = header.get("format") if isinstance(header, dict) else type(header).__name__
        raise _not_index(path, f"header format is {got!r}, not {FORMAT!r}")
    version = header.get("format_version")
    if version not in READABLE_VERSIONS or isinstance(version, bool):
        raise ValueError(
            f"{path!r} has index format_version={version!r}; this hypann ({__version__}) reads "
            f"format_version={FORMAT_VERSION}" + (" and 1" if 1 in READABLE_VERSIONS else "")
            + "; rebuild the index with this version (HyperbolicIndex(...).build(X).save(path))"
        )
    _check_header_fields(header, path)
    return header


def _check_header_fields(header, path):
    """Types and ranges of every header field: a bad one is a ``ValueError`` naming it."""

    def bad(field, what):
        value = header.get(field, "<missing>")
        return _corrupt(path, f"header field {field!r} must be {what}, got {value!r}")

    def is_int(v):
        return isinstance(v, Integral) and not isinstance(v, bool)

    for field in ("n", "d"):
        if not is_int(header.get(field)) or header[field] < 1:
            raise bad(field, "an integer >= 1")
    if header.get("model") not in V.MODELS:
        raise bad("model", f"one of {V.MODELS}")
    try:
        V.check_curvature(header.get("c"))
    except ValueError:
        raise bad("c", "a finite number > 0") from None
    if header.get("dtype") != "float64":
        raise bad("dtype", "'float64'")
    if not isinstance(header.get("algorithm"), str):
        raise bad("algorithm", "an algorithm name (string)")
    params = header.get("params")
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise bad("params", "a JSON object of algorithm settings")
    reserved = sorted({"algorithm", "oracle", "model", "c", "random_state", "n_jobs", "verbose"} & set(params))
    if reserved:
        raise bad("params", f"settings other than {reserved} (those are separate header fields)")
    if header.get("oracle") is not None and not isinstance(header.get("oracle"), str):
        raise bad("oracle", "an oracle spec string or null")
    if "oracle_class" in header:
        oc = header["oracle_class"]
        if not isinstance(header.get("oracle"), str):
            raise bad("oracle", "an oracle spec string when 'oracle_class' is given")
        if not (isinstance(oc, str) and _IMPORT_PATH.fullmatch(oc)):
            raise bad("oracle_class", "an import path 'module:QualName' of the oracle class")
    rs = header.get("random_state")
    if rs is not None and not (is_int(rs) and rs >= 0):
        raise bad("random_state", "null or an integer >= 0")
    if not isinstance(header.get("hypann_version", ""), str):
        raise bad("hypann_version", "a version string")
    if header["format_version"] >= 2 and not (isinstance(header.get("sha256"), str) and len(header["sha256"]) == 64):
        raise bad("sha256", "a SHA-256 hex digest")
    if header["format_version"] == 1 and not isinstance(header.get("points_sha256"), str):
        raise bad("points_sha256", "a SHA-256 hex digest")


def read_metadata(path) -> dict:
    """The JSON header of an index file (its fields checked), without loading its arrays.

    The checksum is not verified here (that needs every array); :func:`load_index` does.
    """
    path = os.fspath(path)
    with _open(path) as z:
        return _parse_header(z, path)


def _read_checked(path):
    """Header, points, labels (or None) and state arrays of the file at ``path``, checksum and points verified."""
    with _open(path) as z:
        header = _parse_header(z, path)
        unknown = [k for k in z.files if k not in ("header", "points", "conformal", "labels") and not k.startswith("state/")]
        if unknown:
            raise _corrupt(path, f"unexpected arrays {unknown[:8]}")
        if "points" not in z.files:
            raise _corrupt(path, "no 'points' array")
        arrays = {k: _read_array(z, k, path) for k in z.files if k != "header"}
    if header["format_version"] >= 2:
        if file_digest(header, arrays) != header["sha256"]:
            raise _corrupt(path, "checksum mismatch: the file was modified or damaged after it was written")
    points = arrays.pop("points")
    if points.dtype != np.float64 or points.shape != (header["n"], header["d"]):
        raise _corrupt(path, f"'points' must be float64 of shape ({header['n']}, {header['d']}) as the header "
                             f"says, got {points.dtype} {points.shape}")
    if header["format_version"] == 1 and _sha256(points) != header["points_sha256"]:
        raise _corrupt(path, "points do not match the header checksum")
    try:
        points, conformal = V.check_points(points, name="points")
    except (ValueError, TypeError) as exc:
        raise _corrupt(path, f"'points': {exc}") from None
    stored_conformal = arrays.pop("conformal", None)
    if stored_conformal is not None:
        # taken from the caller's own coordinates (curvature c, Lorentz): more precise than a recomputation
        if stored_conformal.dtype != np.float64 or stored_conformal.shape != (points.shape[0],) or not np.all(
            (stored_conformal > 0) & (stored_conformal <= 1)
        ):
            raise _corrupt(path, f"'conformal' must be float64 of shape ({points.shape[0]},) in (0, 1], got "
                                 f"{stored_conformal.dtype} {stored_conformal.shape}")
        # it must describe these points: 1-|x|^2 recomputed agrees up to the rounding of the coordinates
        slack = 8 * np.finfo(np.float64).eps * (1.0 + np.abs(1.0 - conformal)) + 8 * np.finfo(np.float64).eps
        if np.any(np.abs(stored_conformal - conformal) > slack + 1e-12 * conformal):
            raise _corrupt(path, "'conformal' does not match the stored points")
        conformal = np.ascontiguousarray(stored_conformal)
    labels = arrays.pop("labels", None)
    if labels is not None:
        n = points.shape[0]
        if labels.dtype != np.int64 or labels.shape != (n,) or labels.min(initial=0) < 0 or (
            np.unique(labels).size != n
        ):
            raise _corrupt(path, f"field 'labels' must hold {n} distinct int64 ids >= 0, got {labels.dtype} "
                                 f"{labels.shape}")
    state = {k[len("state/"):]: v for k, v in arrays.items()}
    return header, points, conformal, labels, state


def _register_stored_oracle(header, path):
    """Make the file's oracle name usable: import and register its recorded class if it is unknown here.

    Only the module named in ``oracle_class`` is imported; the class must be
    an :class:`~hypann.oracles.base.EuclideanOracle`. A name that is already
    registered is left as it is.
    """
    spec = header.get("oracle")
    if not isinstance(spec, str):
        return
    name = oracle_registry.spec_name(spec)
    if oracle_registry.is_registered(name):
        return
    call = f'hypann.oracles.registry.register_oracle("{name}", ...)'
    oracle_class = header.get("oracle_class")
    if oracle_class is None:
        raise ValueError(
            f"{path!r} uses unknown oracle {name!r} (spec {spec!r}; registered here: "
            f"{oracle_registry.available_oracles()}) and the file does not record its class: call {call} "
            f"before loading"
        )
    try:
        cls = oracle_registry.import_oracle_class(oracle_class)
    except Exception as exc:  # noqa: BLE001 - any failure of the import (missing module, error inside it)
        raise ValueError(
            f"{path!r} uses unknown oracle {name!r} (spec {spec!r}), not registered in this process, and "
            f"importing its class from {oracle_class!r} failed ({type(exc).__name__}: {exc}): call {call} "
            f"before loading, or put the module of {oracle_class!r} on sys.path"
        ) from None
    oracle_registry.register_oracle(name, cls)


def load_index(index_class, path, **overrides):
    """Read an index written by :func:`save_index`; ``overrides`` replace stored settings.

    ``index_class`` is :class:`~hypann.HyperbolicIndex` (or a subclass), passed in by
    :meth:`HyperbolicIndex.load <hypann.HyperbolicIndex.load>`: this module is below
    ``hypann.index`` and does not import it. With overrides other than ``n_jobs`` and
    ``verbose`` the search structure is rebuilt from the stored points (the stored one was
    built with other settings).
    """
    HyperbolicIndex = index_class

    path = os.fspath(path)
    header, points, conformal, labels, state = _read_checked(path)
    if "oracle" not in overrides:  # a replaced oracle need not be importable
        _register_stored_oracle(header, path)
    settings = {
        "algorithm": header["algorithm"],
        "oracle": header["oracle"],
        "model": header["model"],
        "c": header["c"],
        "random_state": header["random_state"],
        **header["params"],
    }
    try:
        stored = HyperbolicIndex(**settings)
        stored._check_settings()
        make_algorithm(stored.algorithm, stored.params)
    except (ValueError, TypeError) as exc:
        raise _corrupt(path, f"stored settings: {exc}") from None
    if any(name not in ("n_jobs", "verbose") for name in overrides):  # changed settings: the stored state no longer applies
        settings.update(overrides)
        index = HyperbolicIndex(**settings)
        index._check_settings()
        return index._build_validated(points, conformal, labels=labels)
    if overrides:
        stored = HyperbolicIndex(**settings, **overrides)
        stored._check_settings()
    try:
        return stored._build_validated(points, conformal, state=state, labels=labels)
    except (ValueError, TypeError) as exc:
        raise _corrupt(path, str(exc)) from None
