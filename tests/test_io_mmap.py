"""Format-3 index files: aligned arrays, ``load(path, mmap=True)``, and the same untrusted-file guarantees.

The damage table of ``tests/test_io_corrupt.py`` runs again on format 3 (with
``verify="full"``, the default without ``mmap``); the structural part of it
also with ``mmap=True, verify="structure"``. Then damage to the container
itself: the header, its checksum, array offsets out of the file, misaligned
or overlapping arrays, truncation. Run once with ``NUMBA_BOUNDSCHECK=1``.
"""

from __future__ import annotations

import json
import mmap

import numpy as np
import pytest

import hypann
from hypann import io as hio
from tests.test_io_corrupt import COMMON_CASES, N, SETTINGS, TREE_CASES, _points

pytestmark = pytest.mark.kernels  # also run under NUMBA_BOUNDSCHECK=1 (make test-boundscheck)

# TREE_CASES whose message differs in format 3, where the tree's copy of the points is the only one
# (io checks state/points and state/conformal as the points of the index before the tree sees them)
V3_TREE_MESSAGES = {
    "points-nudged": r"'state/conformal' does not match the stored points \(row 4\)",
    "points-nan": r"'state/points': contains NaN or inf \(first at row 4\)",
    "points-short": r"'state/points' must be float64 of shape \(60, 3\) as the header says, got float64 \(59, 3\)",
    "conformal-nudged": r"'state/conformal' does not match the stored points",
    "conformal-negative": r"'state/conformal': conformal factors 1-\|x\|\^2 must be in \(0, 1\], got -0.5 at row 0",
    "conformal-nan": r"'state/conformal': conformal factors 1-\|x\|\^2 must be in \(0, 1\]",
    "conformal-float32": r"'state/conformal' must be float64 of shape \(60,\)",
    # swapping two ids of the only copy is another valid index (of the same points under other ids)
    "indices-swapped": None,
}
# with verify="structure" (mmap) these are still caught: what keeps the kernels inside their arrays
STRUCTURAL = ("left-", "right-", "end-of", "start-of", "root-end", "root-start", "start-float", "indices-short",
              "points-short", "conformal-float32", "lo-wrong-dim", "leaf-size", "missing-array", "unknown-array")


@pytest.fixture(scope="module")
def saved3(tmp_path_factory):
    """For each algorithm: (path, header without sha256/arrays, arrays, the built index), format 3."""
    out = {}
    folder = tmp_path_factory.mktemp("saved3")
    for algo, params in [*SETTINGS.items(), ("labelled", None), ("f32", None)]:
        if algo == "labelled":
            index = hypann.HyperbolicIndex(algorithm="hkdtree", leaf_size=4, random_state=3).build(_points()[:50])
            index.add(_points()[50:], ids=np.arange(1000, 1000 + N - 50))
        elif algo == "f32":
            index = hypann.HyperbolicIndex(algorithm="hkdtree", leaf_size=4, storage="float32").build(_points())
        else:
            index = hypann.HyperbolicIndex(algorithm=algo, random_state=3, **params).build(_points())
        path = folder / f"{algo}.hypann"
        index.save(path)
        header, arrays = hio.read_raw(path)
        out[algo] = (path, header, arrays, index)
    return out


def _same_answers(a, b):
    Q = _points()[:9] * 0.9
    ra, rb = a.search(Q, 4), b.search(Q, 4)
    np.testing.assert_array_equal(ra.indices, rb.indices)
    np.testing.assert_array_equal(ra.distances, rb.distances)


# --------------------------------------------------------------------------- round trips


@pytest.mark.parametrize("algo", [*sorted(SETTINGS), "labelled", "f32"])
@pytest.mark.parametrize("mmap_mode", [False, True])
def test_format3_round_trip_same_answers(saved3, algo, mmap_mode):
    path, _, _, index = saved3[algo]
    back = hypann.load(path, mmap=mmap_mode)
    _same_answers(index, back)
    meta = hypann.read_metadata(path)
    assert meta["format_version"] == 3 and meta["dtype"] == ("float32" if algo == "f32" else "float64")
    for name, entry in meta["arrays"].items():
        assert entry["offset"] % 64 == 0, name


def test_hkdtree_file_stores_the_points_once(saved3):
    names = set(hypann.read_metadata(saved3["hkdtree"][0])["arrays"])
    assert "points" not in names and "conformal" not in names
    assert {"state/points", "state/conformal", "state/indices"} <= names
    names = set(hypann.read_metadata(saved3["vamana"][0])["arrays"])
    assert {"points", "conformal", "state/neighbors"} <= names  # Vamana refers to the index's points
    assert "state/points" not in names and "state/conformal" not in names


def _maps_file(arr):
    """Whether ``arr``'s memory is a memory map (following ``.base`` and memoryviews)."""
    obj = arr
    for _ in range(8):
        obj = obj.obj if isinstance(obj, memoryview) else getattr(obj, "base", None)
        if isinstance(obj, mmap.mmap):
            return True
        if obj is None:
            return False
    return False


def test_mmap_load_maps_instead_of_reading(tmp_path):
    X = np.random.default_rng(1).uniform(-0.5, 0.5, (5000, 8)) / np.sqrt(8)
    Q = X[:50] * 0.97
    for storage in ("float64", "float32"):
        index = hypann.HyperbolicIndex(algorithm="hkdtree", storage=storage).build(X)
        index.save(tmp_path / "m.hypann")
        back = hypann.load(tmp_path / "m.hypann", mmap=True)
        tree = back.algorithm_.tree_
        for name in ("points_", "conformal_", "lo_", "hi_", "left_"):
            arr = getattr(tree, name)
            assert not arr.flags.writeable and _maps_file(arr), name
            assert arr.ctypes.data % 64 == 0, name
        a, b = index.search(Q, 10), back.search(Q, 10)
        np.testing.assert_array_equal(a.indices, b.indices)
        np.testing.assert_array_equal(a.distances, b.distances)
        ra, rb = index.search_radius(Q[:5], 1.5), back.search_radius(Q[:5], 1.5)
        np.testing.assert_array_equal(ra.indices, rb.indices)
        np.testing.assert_array_equal(ra.distances, rb.distances)
        np.testing.assert_array_equal(back.search(None, 1).indices[:, 0], index.search(None, 1).indices[:, 0])
        # changing a mapped index works on copies; saving over the mapped file itself is atomic
        back.add(X[:3] * 0.5)
        back.save(tmp_path / "m.hypann")
        again = hypann.load(tmp_path / "m.hypann", mmap=True)
        assert again.n_points_ == 5003
        np.testing.assert_array_equal(again.search(Q, 10).distances, back.search(Q, 10).distances)


def test_load_options_are_checked(saved3, tmp_path):
    path = saved3["hkdtree"][0]
    with pytest.raises(ValueError, match=r"verify must be one of \('full', 'structure'\) or None, got verify='lazy'"):
        hypann.load(path, verify="lazy")
    with pytest.raises(TypeError, match=r"mmap must be True or False, got mmap='yes'"):
        hypann.load(path, mmap="yes")
    saved3["hkdtree"][3].save(tmp_path / "v2.hypann", format_version=2)
    with pytest.raises(ValueError, match=r"cannot be memory-mapped: it is not a hypann index file of format 3 .*save "
                                         r"it again"):
        hypann.load(tmp_path / "v2.hypann", mmap=True)
    _same_answers(hypann.load(tmp_path / "v2.hypann"), saved3["hkdtree"][3])
    with pytest.raises(ValueError, match=r"format_version=2 stores float64 points only; this index has "
                                         r"storage='float32'"):
        saved3["f32"][3].save(tmp_path / "f.hypann", format_version=2)
    with pytest.raises(ValueError, match=r"format_version must be 2 or 3, got format_version=4"):
        saved3["f32"][3].save(tmp_path / "f.hypann", format_version=4)
    assert hypann.verify_file(path)["n"] == N


# --------------------------------------------------------------------------- the damage table, format 3


def _v3_cases():
    cases = []
    for name, damage, match in TREE_CASES:
        match = V3_TREE_MESSAGES.get(name, match)
        if match is not None:
            cases.append(("hkdtree", name, damage, match))
    for name, damage, match in COMMON_CASES:
        if name.startswith("header-") and name != "header-dtype":
            cases.append(("hkdtree", name, damage, match))
        elif not name.startswith("header-"):
            cases.append(("vamana", name, damage, match.replace("'points': points row 2", "'points': row 2")
                          .replace(r"'points': points contains NaN or inf", r"'points': contains NaN or inf")))
    cases.append(("hkdtree", "header-dtype", lambda arrays, header: header.update(dtype="float32"),
                  r"'state/points' must be float32 of shape \(60, 3\) as the header says, got float64"))
    cases.append(("hkdtree", "header-dtype-16", lambda arrays, header: header.update(dtype="float16"),
                  r"header field 'dtype' must be 'float64' or 'float32', got 'float16'"))
    cases.append(("f32", "f32-points-moved", lambda arrays, header: arrays["state/points"].__setitem__((3, 0), 0.4),
                  r"'state/conformal' does not match the stored points \(row 3\)"))
    return cases


V3_CASES = _v3_cases()


@pytest.mark.parametrize(("algo", "case", "damage", "match"), V3_CASES, ids=[f"{c[0]}-{c[1]}" for c in V3_CASES])
def test_format3_damaged_file_is_a_value_error_naming_the_field(saved3, tmp_path, algo, case, damage, match):
    _, header, arrays, _ = saved3[algo]
    header, arrays = json.loads(json.dumps(header)), {k: np.array(v) for k, v in arrays.items()}
    damage(arrays, header)
    path = tmp_path / "damaged.hypann"
    hio.write_raw(path, header, arrays)  # checksums recomputed: only the checks of the values can catch it
    with pytest.raises(ValueError, match=match) as info:
        hypann.load(path)
    assert repr(str(path)) in str(info.value)


STRUCTURAL_CASES = [c for c in V3_CASES if c[0] == "hkdtree" and c[1].startswith(STRUCTURAL)]


@pytest.mark.parametrize(("algo", "case", "damage", "match"), STRUCTURAL_CASES,
                         ids=[f"{c[0]}-{c[1]}" for c in STRUCTURAL_CASES])
def test_format3_structural_damage_is_caught_by_mmap_structure_checks(saved3, tmp_path, algo, case, damage, match):
    _, header, arrays, _ = saved3[algo]
    header, arrays = json.loads(json.dumps(header)), {k: np.array(v) for k, v in arrays.items()}
    damage(arrays, header)
    path = tmp_path / "damaged.hypann"
    hio.write_raw(path, header, arrays)
    with pytest.raises(ValueError, match=match) as info:
        hypann.load(path, mmap=True)
    assert repr(str(path)) in str(info.value)


def test_structure_mode_misses_value_damage_but_full_catches_it(saved3, tmp_path):
    """What verify="structure" does not promise: an edited point loads (no crash, other answers)."""
    path = saved3["hkdtree"][0]
    raw = bytearray(path.read_bytes())
    header, data_start, _ = hio._v3_header(str(path))
    entry = header["arrays"]["state/points"]
    pos = data_start + entry["offset"] + 8 * 7  # one coordinate, changed in place: its sha256 no longer matches
    raw[pos:pos + 8] = np.float64(0.01).tobytes()
    (tmp_path / "edited.hypann").write_bytes(bytes(raw))
    index = hypann.load(tmp_path / "edited.hypann", mmap=True)
    index.search(_points()[:5], 3)  # runs; the answers are for the edited file
    with pytest.raises(ValueError, match=r"checksum mismatch in array 'state/points'"):
        hypann.load(tmp_path / "edited.hypann")
    with pytest.raises(ValueError, match=r"checksum mismatch in array 'state/points'"):
        hypann.load(tmp_path / "edited.hypann", mmap=True, verify="full")


# --------------------------------------------------------------------------- the container


def _rewrite(raw, change, *, checksum=True):
    """``raw`` (a format-3 file) with its header changed by ``change(header)``; the data section moves along."""
    length = int.from_bytes(raw[16:24], "little")
    header = json.loads(raw[24:24 + length])
    data = raw[-(-(24 + length) // 64) * 64:]
    change(header)
    if checksum:
        header["sha256"] = hio.file_digest(header, {})
    text = json.dumps(header).encode()
    pad = -(-(24 + len(text)) // 64) * 64 - 24 - len(text)
    return hio.MAGIC + len(text).to_bytes(8, "little") + text + b"\0" * pad + data


def _entry(name, **changes):
    def change(header):
        header["arrays"][name].update(changes)

    return change


def _end_of_file(header):
    size = max(e["offset"] + 1 for e in header["arrays"].values())
    header["arrays"]["state/lo"]["offset"] = -(-size // 64) * 64 + 6400


def _overlap(header):
    header["arrays"]["state/hi"]["offset"] = header["arrays"]["state/lo"]["offset"]


CONTAINER_CASES = [
    ("offset-past-end", _end_of_file, r"array 'state/lo': its bytes \[\d+, \d+\) run past the end of the file"),
    ("offset-misaligned", _entry("state/lo", offset=70), r"array 'state/lo': offset 70 is not a multiple of 64"),
    ("offset-negative", _entry("state/lo", offset=-64), r"array 'state/lo': offset must be an integer >= 0"),
    ("offset-string", _entry("state/lo", offset="0"), r"array 'state/lo': offset must be an integer >= 0, got '0'"),
    ("overlap", _overlap, r"array 'state/(hi|lo)' overlaps array 'state/(hi|lo)'"),
    ("dtype-object", _entry("state/left", dtype="|O"), r"array 'state/left': dtype must be one of"),
    ("dtype-big-endian", _entry("state/left", dtype=">i8"), r"array 'state/left': dtype must be one of"),
    ("shape-3d", _entry("state/left", shape=[1, 2, 3]), r"array 'state/left': shape must be a list of at most 2"),
    ("shape-negative", _entry("state/left", shape=[-1]), r"array 'state/left': shape must be a list"),
    ("shape-larger", _entry("state/points", shape=[6000, 3]), r"array 'state/points': its bytes .* run past the end"),
    ("shape-smaller", _entry("state/points", shape=[59, 3]), r"'state/points' must be float64 of shape \(60, 3\)"),
    ("entry-extra-key", _entry("state/left", extra=1), r"array 'state/left': entry must have exactly"),
    ("sha-missing", _entry("state/left", sha256=None), r"array 'state/left': sha256 must be a SHA-256"),
    ("arrays-list", lambda h: h.update(arrays=[]), r"header field 'arrays' must be a JSON object, got list"),
    ("stray-array", lambda h: h["arrays"].update(extra=dict(h["arrays"]["state/left"], shape=[0])),
     r"unexpected arrays \['extra'\]"),
    ("no-state-points", lambda h: h["arrays"].pop("state/points"), r"no 'state/points' array \(nor a top-level"),
    ("version-2", lambda h: h.update(format_version=2), r"header field 'format_version' must be 3 in a file of this "
                                                        r"layout, got 2"),
    ("header-n", lambda h: h.update(n=0), r"header field 'n' must be an integer >= 1, got 0"),
]


@pytest.mark.parametrize(("case", "change", "match"), CONTAINER_CASES, ids=[c[0] for c in CONTAINER_CASES])
@pytest.mark.parametrize("mmap_mode", [False, True])
def test_format3_container_damage(saved3, tmp_path, case, change, match, mmap_mode):
    path = tmp_path / "c.hypann"
    path.write_bytes(_rewrite(saved3["hkdtree"][0].read_bytes(), change))
    with pytest.raises(ValueError, match=match) as info:
        hypann.load(path, mmap=mmap_mode)
    assert repr(str(path)) in str(info.value)


def test_format3_header_changes_need_the_header_checksum(saved3, tmp_path):
    raw = saved3["hkdtree"][0].read_bytes()
    path = tmp_path / "h.hypann"
    path.write_bytes(_rewrite(raw, lambda h: h.update(random_state=99), checksum=False))
    for kw in ({}, {"mmap": True}):
        with pytest.raises(ValueError, match=r"damaged hypann index file: header checksum mismatch"):
            hypann.load(path, **kw)
    with pytest.raises(ValueError, match=r"header checksum mismatch"):
        hypann.read_metadata(path)
    path.write_bytes(raw[:16] + (10**12).to_bytes(8, "little") + raw[24:])
    with pytest.raises(ValueError, match=r"header length 1000000000000 exceeds the file"):
        hypann.load(path)
    length = int.from_bytes(raw[16:24], "little")
    path.write_bytes(raw[:24] + b"\xff" + raw[25:])
    with pytest.raises(ValueError, match=r"damaged hypann index file: the header is not UTF-8 JSON"):
        hypann.load(path, mmap=True)
    assert length > 100


@pytest.mark.parametrize("mmap_mode", [False, True])
def test_format3_truncated_and_flipped_files(saved3, tmp_path, mmap_mode):
    path = saved3["hkdtree"][0]
    raw = path.read_bytes()
    damaged = tmp_path / "t.hypann"
    for cut in (17, 30, 300, len(raw) // 2, len(raw) - 1):
        damaged.write_bytes(raw[:cut])
        with pytest.raises(ValueError, match=r"damaged hypann index file: .*(exceeds the file|past the end|ends inside)"):
            hypann.load(damaged, mmap=mmap_mode)
    want = hypann.load(path).search(_points()[:5], 3)
    rng = np.random.default_rng(5)
    for _ in range(60):  # anywhere: an error, or the same index (a flip in the zero padding changes nothing)
        pos = int(rng.integers(len(raw)))
        flipped = bytearray(raw)
        flipped[pos] ^= 1 << int(rng.integers(8))
        damaged.write_bytes(bytes(flipped))
        try:
            back = hypann.load(damaged, mmap=mmap_mode, verify="full")
        except ValueError as exc:
            assert "hypann index file" in str(exc)
            continue
        got = back.search(_points()[:5], 3)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.distances, want.distances)


@pytest.mark.parametrize("algo", ["auto", "hkdtree"])
def test_mmap_structure_load_reads_no_point_of_a_tree_index(tmp_path, algo):
    """verify="structure" skips the per-point checks also behind algorithm="auto" (the default).

    A point mirrored out of its leaf's box, checksums recomputed: the structural
    load does not look at it (it would have to read every point), the full one
    does.
    """
    params = {"scan_fraction": 1.0} if algo == "auto" else {}  # auto: keep the kd-tree
    index = hypann.HyperbolicIndex(algorithm=algo, leaf_size=4, **params).build(_points())
    index.save(tmp_path / "a.hypann")
    header, arrays = hio.read_raw(tmp_path / "a.hypann")
    name = "hkdtree.points" if algo == "auto" else "points"
    arrays = {k: np.array(v) for k, v in arrays.items()}
    assert f"state/{name}" in arrays
    arrays[f"state/{name}"][0, 0] *= -1.0  # same norm (the conformal factor still matches), other box
    hio.write_raw(tmp_path / "moved.hypann", header, arrays)
    hypann.load(tmp_path / "moved.hypann", mmap=True).search(_points()[:3], 2)
    with pytest.raises(ValueError, match=r"state '(lo|hi)': the point at position 0 lies outside the box"):
        hypann.load(tmp_path / "moved.hypann", mmap=True, verify="full")


@pytest.mark.parametrize("exact", [False, True])
def test_mmap_structure_load_of_a_graph_reads_no_neighbour_id_and_survives_bad_ones(tmp_path, exact):
    """verify="structure" does not read the graph's per-point ids; the search skips ids out of range.

    Neighbour ids and leaf order set out of range (checksums recomputed): the
    structural load opens the file and searches without reading outside the
    arrays (the kernel tests also run under NUMBA_BOUNDSCHECK=1), and every
    returned id is a real row; the full load names the damage.
    """
    X = _points()
    index = hypann.HyperbolicIndex(algorithm="graph", exact=exact, random_state=0).build(X)
    index.save(tmp_path / "g.hypann")
    header, arrays = hio.read_raw(tmp_path / "g.hypann")
    arrays = {k: np.array(v) for k, v in arrays.items()}
    nbrs, order = arrays["state/neighbors"], arrays["state/tree_order"]
    nbrs[::3, :4] = N + 7
    nbrs[1, 0] = np.iinfo(np.int32).max
    hio.write_raw(tmp_path / "bad-ids.hypann", header, arrays)
    first = order[:5].copy()  # exact=False: the input rows of the graph's first five rows (leaf order)
    order[:5] = [-3, N, N + 100, -1, 2**40]
    hio.write_raw(tmp_path / "bad.hypann", header, arrays)
    for name in ("bad-ids", "bad"):
        loaded = hypann.load(tmp_path / f"{name}.hypann", mmap=True)
        if name == "bad" and not exact:
            # the leaf order maps the graph's rows to input rows: a damaged entry cannot be
            # answered, and the search says so instead of returning a wrong row
            with pytest.raises(ValueError, match=r"'tree_order' is not a permutation of the points: the file is "
                                                 r"damaged \(verify='full' checks it on load\)"):
                loaded.search(X[first], 4)
            continue
        got = loaded.search(X[:20], 4)
        assert got.indices.min() >= 0 and got.indices.max() < N
        if exact:  # the tree re-checks the graph's answer: still brute force's
            ref = hypann.HyperbolicIndex(algorithm="brute").build(X).search(X[:20], 4)
            np.testing.assert_array_equal(got.distances, ref.distances)
    with pytest.raises(ValueError, match=r"neighbors holds ids outside \[-1, n\); tree_order is not a permutation"):
        hypann.load(tmp_path / "bad.hypann", verify="full")
