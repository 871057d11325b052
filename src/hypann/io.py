"""Index files: a versioned ``.npz`` with a JSON header, written atomically.

Layout (a zip archive readable with ``numpy.load(path, allow_pickle=False)``):

``header``
    uint8 array holding UTF-8 JSON: ``format`` ("hypann-index"),
    ``format_version``, ``hypann_version``, ``model``, ``c``, ``dtype``,
    ``n``, ``d``, ``algorithm``, ``params``, ``oracle`` (spec string),
    ``random_state``, ``points_sha256``.
``points``
    (n, d) float64 unit-curvature Poincare points.
``state/<name>``
    optional arrays of the search structure (graph, tree), so that loading
    does not rebuild it; without them the structure is rebuilt
    deterministically from the points and the seed.

A file is written to a temporary name in the target folder and moved into
place with ``os.replace``: a crash never leaves a half-written index. A file
that is not such an archive, has another format version, or whose points do
not match their checksum raises ``ValueError``.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
import zipfile

import numpy as np

import hypann
from hypann.geometry import _kernels

FORMAT = "hypann-index"
FORMAT_VERSION = 1


def _sha256(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).view(np.uint8)).hexdigest()


def save_index(index, path) -> None:
    path = os.fspath(path)
    params = index.get_params()
    params.pop("n_jobs", None)  # a runtime setting of this process, not of the file (load(path, n_jobs=...))
    header = {
        "format": FORMAT,
        "format_version": FORMAT_VERSION,
        "hypann_version": hypann.__version__,
        "model": params.pop("model"),
        "c": params.pop("c"),
        "dtype": "float64",
        "n": int(index.n_points_),
        "d": int(index.dim_),
        "algorithm": params.pop("algorithm"),
        "oracle": params.pop("oracle"),
        "random_state": params.pop("random_state"),
        "params": params,
        "points_sha256": _sha256(index.points_),
    }
    try:
        header_bytes = json.dumps(header).encode()
    except TypeError as exc:
        raise ValueError(f"index settings are not JSON-serializable, cannot save: {exc}") from None
    arrays = {"header": np.frombuffer(header_bytes, dtype=np.uint8), "points": index.points_}
    if not index._plain_labels:
        arrays["labels"] = index.live_.labels
    for name, arr in index.algorithm_.get_state().items():
        arrays[f"state/{name}"] = np.asarray(arr)
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=".hypann-", suffix=".tmp", dir=folder)
    try:
        with os.fdopen(fd, "wb") as fh:
            np.savez(fh, **arrays)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _open(path):
    path = os.fspath(path)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"no index file at {path!r}")
    try:
        return np.load(path, allow_pickle=False)
    except (OSError, ValueError, zipfile.BadZipFile, EOFError) as exc:
        raise ValueError(f"{path!r} is not a hypann index file (cannot read it as npz: {exc})") from None


def _header(z, path):
    try:
        header = json.loads(bytes(z["header"]).decode())
    except (KeyError, ValueError, UnicodeDecodeError, zipfile.BadZipFile, OSError, EOFError) as exc:
        raise ValueError(f"{path!r} is not a hypann index file (missing or corrupt header: {exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        raise ValueError(f"{path!r} is not a hypann index file (format={header.get('format') if isinstance(header, dict) else None!r})")
    if header.get("format_version") != FORMAT_VERSION:
        raise ValueError(
            f"{path!r} has index format_version={header.get('format_version')!r}; this hypann "
            f"({hypann.__version__}) reads format_version={FORMAT_VERSION}"
        )
    return header


def read_metadata(path) -> dict:
    """The JSON header of an index file, without loading its arrays."""
    with _open(path) as z:
        return _header(z, path)


def load_index(path, **overrides):
    from hypann.index import HyperbolicIndex

    with _open(path) as z:
        header = _header(z, path)
        try:
            points = np.ascontiguousarray(z["points"], dtype=np.float64)
            state = {k[len("state/"):]: z[k] for k in z.files if k.startswith("state/")}
            labels = np.asarray(z["labels"]) if "labels" in z.files else None
        except (KeyError, ValueError, zipfile.BadZipFile, OSError, EOFError) as exc:
            raise ValueError(f"{path!r} is a corrupt hypann index file: {exc}") from None
    if points.shape != (header["n"], header["d"]) or _sha256(points) != header["points_sha256"]:
        raise ValueError(f"{path!r} is a corrupt hypann index file: points do not match the header checksum")
    settings = {
        "algorithm": header["algorithm"],
        "oracle": header["oracle"],
        "model": header["model"],
        "c": header["c"],
        "random_state": header["random_state"],
        **header["params"],
    }
    if labels is not None:
        if labels.dtype != np.int64 or labels.shape != (points.shape[0],) or labels.min(initial=0) < 0 or (
            np.unique(labels).size != labels.size
        ):
            raise ValueError(f"{path!r} is a corrupt hypann index file: field 'labels' must hold {points.shape[0]} "
                             f"distinct int64 ids >= 0")
    settings.update(overrides)
    index = HyperbolicIndex(**settings)
    index._check_settings()
    conformal = _kernels.conformal_factor(points)
    rebuild = any(name != "n_jobs" for name in overrides)  # changed settings: stored state no longer applies
    return index._build_validated(points, conformal, state=None if rebuild else state, labels=labels)
