"""Index files: versioned, with a JSON header and checksums, written atomically.

Format version 3 (written by this hypann) is a flat file whose arrays are
stored uncompressed and 64-byte aligned, so that ``load(path, mmap=True)``
maps them read-only instead of reading them:

``magic``
    16 bytes, :data:`MAGIC`.
``header length``
    8 bytes, little-endian unsigned: the length ``L`` of the header.
``header``
    ``L`` bytes of UTF-8 JSON: the fields listed below for version 2
    (``dtype`` is the ``storage`` of the index, ``"float64"`` or
    ``"float32"``), plus ``arrays``: for every array its ``dtype``
    (little-endian numpy type string), ``shape``, ``offset`` (from the start
    of the data, a multiple of 64) and ``sha256`` (of its bytes, C order);
    and ``sha256``, the SHA-256 of the header itself without that field (JSON
    with sorted keys), which therefore covers every array through its digest.
``data``
    Starts at the first multiple of 64 after the header; the arrays at their
    offsets, zero padding in between.

The arrays are those of version 2 below, except that a search structure that
keeps the points itself (the kd-tree of ``"hkdtree"``, in tree order) stores
them only once, as ``state/points`` and ``state/conformal``: there are no
top-level ``points`` and ``conformal`` then. With ``storage="float32"`` the
points are float32 (the conformal factors stay float64).

Checking a version-3 file (``verify=`` of :func:`load_index`):

``"full"`` (the default without ``mmap``)
    the header checksum, every array's SHA-256 (read from the file in chunks,
    so a memory map is not paged in), and every value as for version 2 below.
    A file edited with recomputed checksums is still caught by the checks of
    the values (points inside the ball, the tree's boxes, ...).
``"structure"`` (the default with ``mmap=True``)
    the header checksum and header fields, and, without reading the
    per-point arrays: every array's dtype, shape, alignment and extent within
    the file, and the search structure's shape (``validate_state`` with
    ``full=False``: tree children, ranges and ``max_conformal``, all
    ``O(n / leaf_size)``; the graph's neighbour lists and leaf order are not
    read, since its search skips ids out of range). Enough that no kernel
    reads or writes out of bounds, whatever the file holds; not enough to rule out wrong answers
    from a damaged or edited file. Opening a 10-million-point file this way
    takes a fraction of a second; call ``load(path, verify="full")`` (or
    :func:`hypann.verify_file`) on a file you do not trust.

Version 2 (still read; ``save_index(..., format_version=2)`` writes it for
float64 indexes) is an ``.npz`` zip archive readable with
``numpy.load(path, allow_pickle=False)``:

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
import mmap
import os
import re
from numbers import Integral

import numpy as np

from hypann import _validation as V
from hypann._files import atomic_write
from hypann._version import __version__
from hypann.geometry import _kernels
from hypann.oracles import registry as oracle_registry
from hypann.search.registry import make_algorithm

FORMAT = "hypann-index"
FORMAT_VERSION = 3
# Versions this hypann reads: 1 (checksum over the points only), 2 (.npz) and 3 (flat, aligned, mappable).
READABLE_VERSIONS = (1, 2, 3)
#: First 16 bytes of a format-3 file.
MAGIC = b"\x93HYPANN-INDEX\x00\x03\x00"
#: Alignment of every array of a format-3 file (bytes).
ALIGN = 64
#: Largest header a format-3 file may declare (bytes).
MAX_HEADER = 1 << 26
#: dtypes an array of a format-3 file may have.
_V3_DTYPES = ("<f8", "<f4", "<i8", "<i4", "|u1", "|b1")
#: Values of ``verify=``.
VERIFY_MODES = ("full", "structure")
#: Bytes read at a time when hashing arrays of a file.
_HASH_CHUNK = 1 << 24

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


def save_index(index, path, *, format_version=FORMAT_VERSION) -> None:
    """Write a built :class:`~hypann.HyperbolicIndex` to ``path`` (see the module docstring).

    ``format_version=2`` writes the older ``.npz`` layout (float64 storage only),
    for readers with an older hypann.
    """
    if format_version not in (2, 3) or isinstance(format_version, bool):
        raise ValueError(f"format_version must be 2 or 3, got format_version={format_version!r}")
    if format_version == 2 and index.storage != "float64":
        raise ValueError(f"format_version=2 stores float64 points only; this index has storage={index.storage!r} "
                         f"(save it with format_version=3)")
    params = index.get_params()
    params.pop("n_jobs", None)  # a runtime setting of this process, not of the file (load(path, n_jobs=...))
    params.pop("verbose", None)  # likewise (load(path, verbose=False))
    header = {
        "format": FORMAT,
        "format_version": format_version,
        "hypann_version": __version__,
        "model": params.pop("model"),
        "c": params.pop("c"),
        "dtype": params.pop("storage"),
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
    state = {f"state/{name}": np.asarray(arr) for name, arr in index.algorithm_.get_state().items()}
    if format_version == 3 and getattr(index.algorithm_, "owns_points", False):
        arrays = {}  # the structure's copy (state/points, state/conformal) is the only one
    else:
        arrays = {"points": np.asarray(index.points_), "conformal": np.asarray(index.conformal_)}
    if not index.live_.identity_labels:  # row-number ids are not written (nor kept in memory)
        arrays["labels"] = np.asarray(index.live_.labels)
    arrays.update(state)
    if format_version == 3:
        _save_v3(header, arrays, path)
        return
    try:
        header["sha256"] = file_digest(header, arrays)
        header_bytes = json.dumps(header).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"index settings are not JSON-serializable, cannot save: {exc}") from None
    arrays["header"] = np.frombuffer(header_bytes, dtype=np.uint8)
    atomic_write(path, lambda fh: np.savez(fh, **arrays))


def _aligned(offset: int) -> int:
    return -(-offset // ALIGN) * ALIGN


def _array_bytes(a: np.ndarray) -> memoryview:
    """The bytes of ``a`` in C order, little-endian (no copy for a C-contiguous little-endian array)."""
    a = np.ascontiguousarray(a)
    if a.dtype.byteorder == ">":
        a = a.astype(a.dtype.newbyteorder("<"))
    return memoryview(a.reshape(-1).view(np.uint8))


def _write_array(fh, a) -> int:
    """Write the bytes of ``a`` (C order, little-endian) to ``fh``; returns their number."""
    data = _array_bytes(a)
    fh.write(data)
    return data.nbytes


def _save_v3(header, arrays, path):
    """Write a format-3 file (see the module docstring) through :func:`atomic_write`."""
    table = {}
    offset = 0
    for name in sorted(arrays):
        a = np.asarray(arrays[name])
        if a.dtype.str not in _V3_DTYPES and a.dtype.newbyteorder("<").str not in _V3_DTYPES:
            raise ValueError(f"cannot save array {name!r} of dtype {a.dtype} (allowed: {_V3_DTYPES})")
        offset = _aligned(offset)
        table[name] = {"dtype": a.dtype.newbyteorder("<").str if a.dtype.byteorder == ">" else a.dtype.str,
                       "shape": list(a.shape), "offset": offset,
                       "sha256": hashlib.sha256(_array_bytes(a)).hexdigest()}
        offset += a.nbytes
    header = dict(header, arrays=table)
    try:
        header["sha256"] = file_digest(header, {})
        header_bytes = json.dumps(header).encode()
    except (TypeError, ValueError) as exc:
        raise ValueError(f"index settings are not JSON-serializable, cannot save: {exc}") from None
    data_start = _aligned(len(MAGIC) + 8 + len(header_bytes))

    def write(fh):
        fh.write(MAGIC)
        fh.write(len(header_bytes).to_bytes(8, "little"))
        fh.write(header_bytes)
        pos = len(MAGIC) + 8 + len(header_bytes)
        for name in sorted(arrays):
            target = data_start + table[name]["offset"]
            fh.write(b"\0" * (target - pos))
            pos = target + _write_array(fh, np.asarray(arrays[name]))

    atomic_write(path, write)


def _is_v3(path) -> bool:
    """Whether the file at ``path`` starts with :data:`MAGIC`."""
    if os.path.isdir(path):
        return False
    if not os.path.exists(path):
        raise FileNotFoundError(f"no index file at {path!r}")
    with open(path, "rb") as fh:
        return fh.read(len(MAGIC)) == MAGIC


def _v3_header(path):
    """``(header, data_start, file_size)`` of a format-3 file, header checksum and array table checked."""
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        head = fh.read(len(MAGIC) + 8)
        if len(head) < len(MAGIC) + 8:
            raise _corrupt(path, f"the file ends inside the header length ({size} bytes)")
        length = int.from_bytes(head[len(MAGIC):], "little")
        if length > min(MAX_HEADER, size - len(head)):
            raise _corrupt(path, f"header length {length} exceeds the file ({size} bytes) or {MAX_HEADER} bytes: "
                                 "the file is truncated or damaged")
        raw = fh.read(length)
    try:
        header = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise _corrupt(path, f"the header is not UTF-8 JSON ({exc})") from None
    if not isinstance(header, dict) or header.get("format") != FORMAT:
        got = header.get("format") if isinstance(header, dict) else type(header).__name__
        raise _not_index(path, f"header format is {got!r}, not {FORMAT!r}")
    if header.get("format_version") != 3 or isinstance(header.get("format_version"), bool):
        raise _corrupt(path, f"header field 'format_version' must be 3 in a file of this layout, got "
                             f"{header.get('format_version')!r}")
    _check_header_fields(header, path)
    if file_digest(header, {}) != header["sha256"]:
        raise _corrupt(path, "header checksum mismatch: the header was modified or damaged after it was written")
    data_start = _aligned(len(MAGIC) + 8 + length)
    _check_array_table(header, data_start, size, path)
    return header, data_start, size


def _check_array_table(header, data_start, size, path):
    """Every entry of ``arrays``: known dtype, shape, aligned offset, inside the file, no overlaps."""
    table = header.get("arrays")
    if not isinstance(table, dict):
        raise _corrupt(path, f"header field 'arrays' must be a JSON object, got {type(table).__name__}")
    extents = []
    for name, entry in table.items():
        where = f"array {name!r}"
        if not (isinstance(entry, dict) and set(entry) == {"dtype", "shape", "offset", "sha256"}):
            raise _corrupt(path, f"{where}: entry must have exactly dtype, shape, offset and sha256, got {entry!r}")
        if entry["dtype"] not in _V3_DTYPES:
            raise _corrupt(path, f"{where}: dtype must be one of {_V3_DTYPES}, got {entry['dtype']!r}")
        shape = entry["shape"]
        if not (isinstance(shape, list) and len(shape) <= 2
                and all(isinstance(v, Integral) and not isinstance(v, bool) and v >= 0 for v in shape)):
            raise _corrupt(path, f"{where}: shape must be a list of at most 2 integers >= 0, got {shape!r}")
        offset = entry["offset"]
        if not (isinstance(offset, Integral) and not isinstance(offset, bool) and offset >= 0):
            raise _corrupt(path, f"{where}: offset must be an integer >= 0, got {offset!r}")
        if offset % ALIGN:
            raise _corrupt(path, f"{where}: offset {offset} is not a multiple of {ALIGN} (misaligned)")
        if not (isinstance(entry["sha256"], str) and len(entry["sha256"]) == 64):
            raise _corrupt(path, f"{where}: sha256 must be a SHA-256 hex digest")
        nbytes = int(np.prod(shape, dtype=object)) * np.dtype(entry["dtype"]).itemsize
        end = data_start + offset + nbytes
        if end > size:
            raise _corrupt(path, f"{where}: its bytes [{data_start + offset}, {end}) run past the end of the file "
                                 f"({size} bytes): the file is truncated or the offset is damaged")
        extents.append((offset, offset + nbytes, name))
    extents.sort()
    for (_, end, first), (begin, _, second) in zip(extents, extents[1:]):
        if begin < end:
            raise _corrupt(path, f"array {second!r} overlaps array {first!r}")


def _v3_arrays(path, header, data_start, mmap_mode):
    """The arrays of a format-3 file: read into memory, or read-only views of one memory map."""
    table = header["arrays"]
    out = {}
    if mmap_mode:
        with open(path, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            if size == 0:
                return {name: np.zeros(entry["shape"], dtype=entry["dtype"]) for name, entry in table.items()}
            mm = mmap.mmap(fh.fileno(), 0, access=mmap.ACCESS_READ)
        for name, entry in table.items():
            dtype = np.dtype(entry["dtype"])
            count = int(np.prod(entry["shape"], dtype=np.int64))
            out[name] = np.frombuffer(mm, dtype=dtype, count=count, offset=data_start + entry["offset"]).reshape(
                entry["shape"])
        return out
    with open(path, "rb") as fh:
        for name, entry in table.items():
            a = np.empty(entry["shape"], dtype=entry["dtype"])
            fh.seek(data_start + entry["offset"])
            got = fh.readinto(memoryview(a.reshape(-1).view(np.uint8)))
            if got != a.nbytes:
                raise _corrupt(path, f"array {name!r}: the file ends inside its bytes (truncated)")
            out[name] = a
    return out


def _verify_v3_arrays(path, header, data_start, arrays, from_file):
    """Every array's SHA-256 against the header (by reading the file in chunks when ``from_file``)."""
    for name in sorted(header["arrays"]):
        entry = header["arrays"][name]
        h = hashlib.sha256()
        if from_file:
            left = arrays[name].nbytes
            with open(path, "rb") as fh:
                fh.seek(data_start + entry["offset"])
                while left:
                    chunk = fh.read(min(left, _HASH_CHUNK))
                    if not chunk:
                        raise _corrupt(path, f"array {name!r}: the file ends inside its bytes (truncated)")
                    h.update(chunk)
                    left -= len(chunk)
        else:
            h.update(_array_bytes(arrays[name]))
        if h.hexdigest() != entry["sha256"]:
            raise _corrupt(path, f"checksum mismatch in array {name!r}: the file was modified or damaged after "
                                 "it was written")


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
            f"format_version {', '.join(map(str, READABLE_VERSIONS[:-1]))} and {READABLE_VERSIONS[-1]}"
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
    if header["format_version"] >= 3:
        if header.get("dtype") not in ("float64", "float32"):
            raise bad("dtype", "'float64' or 'float32'")
    elif header.get("dtype") != "float64":
        raise bad("dtype", "'float64'")
    if not isinstance(header.get("algorithm"), str):
        raise bad("algorithm", "an algorithm name (string)")
    params = header.get("params")
    if not isinstance(params, dict) or not all(isinstance(k, str) for k in params):
        raise bad("params", "a JSON object of algorithm settings")
    reserved = sorted({"algorithm", "oracle", "model", "c", "random_state", "n_jobs", "verbose", "storage"}
                      & set(params))
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

    Format 2: the checksum is not verified here (that needs every array);
    :func:`load_index` does. Format 3: the header's own checksum is.
    """
    path = os.fspath(path)
    if _is_v3(path):
        return _v3_header(path)[0]
    with _open(path) as z:
        return _parse_header(z, path)


def _read_checked_v3(path, mmap_mode, verify):
    """:func:`_read_checked` of a format-3 file; ``points``/``conformal`` are None when the state holds them."""
    header, data_start, _ = _v3_header(path)
    names = list(header["arrays"])
    unknown = [k for k in names if k not in ("points", "conformal", "labels") and not k.startswith("state/")]
    if unknown:
        raise _corrupt(path, f"unexpected arrays {sorted(unknown)[:8]}")
    owned = "points" not in names and "conformal" not in names
    pts_field, conf_field = "points", "conformal"
    if owned:  # the structure holds them: state/points, or state/<part>.points for a composite (algorithm="auto")
        held = [k[: -len("points")] for k in names if re.fullmatch(r"state/(\w+\.)?points", k)]
        pts_field, conf_field = (held[0] + "points", held[0] + "conformal") if len(held) == 1 else (
            "state/points", "state/conformal")
    for field in (pts_field, conf_field):
        if field not in names:
            raise _corrupt(path, f"no {field!r} array" + (" (nor a top-level 'points')" if owned else ""))
    n, d, storage = header["n"], header["d"], header["dtype"]
    for field, dtype, shape in ((pts_field, np.dtype(storage), [n, d]), (conf_field, np.dtype(np.float64), [n])):
        entry = header["arrays"][field]
        if np.dtype(entry["dtype"]) != dtype or entry["shape"] != shape:
            raise _corrupt(path, f"{field!r} must be {dtype} of shape {tuple(shape)} as the header says, got "
                                 f"{np.dtype(entry['dtype'])} {tuple(entry['shape'])}")
    arrays = _v3_arrays(path, header, data_start, mmap_mode)
    if verify == "full":
        _verify_v3_arrays(path, header, data_start, arrays, from_file=mmap_mode)
        _check_point_values(path, pts_field, conf_field, arrays[pts_field], arrays[conf_field], storage)
    labels = arrays.pop("labels", None)
    if labels is not None:
        if labels.dtype != np.int64 or labels.shape != (n,) or (verify == "full" and (
                labels.min(initial=0) < 0 or np.unique(labels).size != n)):
            raise _corrupt(path, f"field 'labels' must hold {n} distinct int64 ids >= 0, got {labels.dtype} "
                                 f"{labels.shape}")
    points = None if owned else arrays.pop("points")
    conformal = None if owned else arrays.pop("conformal")
    state = {k[len("state/"):]: v for k, v in arrays.items()}
    return header, points, conformal, labels, state


def _check_point_values(path, pts_field, conf_field, pts, conf, storage):
    """Stored points finite (inside the ball for float64), conformal factors in (0, 1] and matching them.

    In blocks of rows, so a memory-mapped file is not copied. For float32
    storage the stored factor came from the caller's float64 coordinates:
    rounding them to float32 changes ``|x|^2`` by at most ``~1.2e-7 |x|^2``,
    the slack allowed (and such a point may even round onto the boundary).
    """
    eps = np.finfo(np.float64).eps
    block = 1 << 16
    for s in range(0, pts.shape[0], block):
        x = np.asarray(pts[s : s + block], dtype=np.float64)
        c = np.asarray(conf[s : s + block])
        finite = np.isfinite(x).all(axis=1)
        if not finite.all():
            raise _corrupt(path, f"{pts_field!r}: contains NaN or inf (first at row {s + V.first_bad(~finite)})")
        ok = (c > 0.0) & (c <= 1.0)
        if not ok.all():
            t = V.first_bad(~ok)
            raise _corrupt(path, f"{conf_field!r}: conformal factors 1-|x|^2 must be in (0, 1], got {float(c[t])!r} at "
                                 f"row {s + t}")
        recomputed = _kernels.conformal_factor(np.ascontiguousarray(x))
        if storage == "float64":
            outside = ~(recomputed > 0.0)
            if outside.any():
                raise _corrupt(path, f"{pts_field!r}: row {s + V.first_bad(outside)} is not strictly inside the "
                                     "unit ball")
            slack = 8 * eps * (1.0 + np.abs(1.0 - recomputed)) + 8 * eps + 1e-12 * recomputed
        else:
            slack = 2.5e-7 * (1.0 - recomputed + 2 * eps) + 8 * eps
        off = np.abs(c - recomputed) > slack
        if off.any():
            raise _corrupt(path, f"{conf_field!r} does not match the stored points (row {s + V.first_bad(off)})")


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


def load_index(index_class, path, *, mmap=False, verify=None, **overrides):
    """Read an index written by :func:`save_index`; ``overrides`` replace stored settings.

    ``index_class`` is :class:`~hypann.HyperbolicIndex` (or a subclass), passed in by
    :meth:`HyperbolicIndex.load <hypann.HyperbolicIndex.load>`: this module is below
    ``hypann.index`` and does not import it. With overrides other than ``n_jobs`` and
    ``verbose`` the search structure is rebuilt from the stored points (the stored one was
    built with other settings).

    Parameters
    ----------
    index_class : type
    path : str or os.PathLike
    mmap : bool, default False
        Map the arrays of a format-3 file read-only instead of reading them:
        opening costs only the checks of ``verify``, and searches page in
        what they touch (the answers are identical). Format 1 and 2 files
        cannot be mapped (load them without ``mmap`` and save them again).
    verify : {"full", "structure"}, optional
        How much of a format-3 file is checked (see the module docstring);
        default ``"full"``, and ``"structure"`` with ``mmap=True``. Format 1
        and 2 files are always checked in full.
    """
    HyperbolicIndex = index_class

    path = os.fspath(path)
    V.check_bool(mmap, "mmap")
    if verify is None:
        verify = "structure" if mmap else "full"
    if not isinstance(verify, str) or verify not in VERIFY_MODES:
        raise ValueError(f"verify must be one of {VERIFY_MODES} or None, got verify={verify!r}")
    if _is_v3(path):
        header, points, conformal, labels, state = _read_checked_v3(path, mmap, verify)
    elif mmap:
        raise ValueError(f"{path!r} cannot be memory-mapped: it is not a hypann index file of format 3 (an older "
                         f".npz index file, or a damaged or foreign file); load it without mmap=True and save it "
                         f"again to get a mappable file")
    else:
        verify = "full"
        header, points, conformal, labels, state = _read_checked(path)
    if "oracle" not in overrides:  # a replaced oracle need not be importable
        _register_stored_oracle(header, path)
    settings = {
        "algorithm": header["algorithm"],
        "oracle": header["oracle"],
        "model": header["model"],
        "c": header["c"],
        "random_state": header["random_state"],
        "storage": header["dtype"],
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
        if points is None:  # only the stored structure holds them
            try:
                restored = stored._build_validated(None, None, state=state, full_check=verify == "full")
                points, conformal = restored.points_, restored.conformal_
            except (ValueError, TypeError) as exc:
                raise _corrupt(path, str(exc)) from None
        return index._build_validated(np.array(points), np.array(conformal), labels=labels)
    if overrides:
        stored = HyperbolicIndex(**settings, **overrides)
        stored._check_settings()
    try:
        return stored._build_validated(points, conformal, state=state, labels=labels, full_check=verify == "full")
    except (ValueError, TypeError) as exc:
        raise _corrupt(path, str(exc)) from None


def read_raw(path):
    """``(header, arrays)`` of a format-3 file as stored: only the layout is checked, not the contents.

    For tools and tests that rewrite files (:func:`write_raw`); the header
    comes without its ``sha256`` and ``arrays`` fields.
    """
    path = os.fspath(path)
    size = os.path.getsize(path)
    with open(path, "rb") as fh:
        if fh.read(len(MAGIC)) != MAGIC:
            raise _not_index(path, "it does not start with the format-3 magic bytes")
        length = int.from_bytes(fh.read(8), "little")
        header = json.loads(fh.read(length).decode("utf-8"))
    data_start = _aligned(len(MAGIC) + 8 + length)
    _check_array_table(header, data_start, size, path)
    arrays = {name: np.array(a) for name, a in _v3_arrays(path, header, data_start, False).items()}
    header = {k: v for k, v in header.items() if k not in ("sha256", "arrays")}
    return header, arrays


def write_raw(path, header, arrays) -> None:
    """Write ``header`` (without ``sha256``/``arrays``) and ``arrays`` as a format-3 file, checksums computed."""
    _save_v3({k: v for k, v in header.items() if k not in ("sha256", "arrays")}, arrays, path)
