"""Index files are untrusted input: every damaged file is a ValueError naming the file and the field.

Each case takes a valid file, damages one thing and rewrites the archive --
with the checksum recomputed (so that only the structural checks of
``validate_state`` / the header checks can catch it) unless the case is about
the checksum or the archive itself. Before these checks a damaged kd-tree
``end`` or Vamana ``medoid`` crashed the process on the first search and a
damaged ``start`` returned wrong neighbours. Run once with
``NUMBA_BOUNDSCHECK=1`` as well.
"""

from __future__ import annotations

import json
import re
import zipfile

import numpy as np
import pytest

import hypann
from hypann import io as hio
from hypann.graph.vamana import VamanaIndex
from hypann.search.hyperbolic_kdtree import HyperbolicKDTree

N, D = 60, 3
SETTINGS = {
    "hkdtree": {"leaf_size": 4},
    "auto": {"leaf_size": 4, "scan_fraction": 1.0},  # the default algorithm, here keeping the kd-tree
    "vamana": {"R": 6, "L": 8},
    "recentering": {},
    "shells": {"oracle": "lsh:tables=3,bits=6", "width": 3.0},
}


def _points():
    return np.random.default_rng(7).uniform(-0.5, 0.5, (N, D))


@pytest.fixture(scope="module")
def saved(tmp_path_factory):
    """For each algorithm: (path, header without sha256, arrays, the built index)."""
    out = {}
    folder = tmp_path_factory.mktemp("saved")
    for algo, params in [*SETTINGS.items(), ("labelled", None)]:
        if params is None:  # user ids: stored as 'labels'
            index = hypann.HyperbolicIndex(algorithm="hkdtree", leaf_size=4, random_state=3).build(_points()[:50])
            index.add(_points()[50:], ids=np.arange(1000, 1000 + N - 50))
        else:
            index = hypann.HyperbolicIndex(algorithm=algo, random_state=3, **params).build(_points())
        path = folder / f"{algo}.hypann"
        index.save(path, format_version=2)  # the .npz layout; format 3: tests/test_io_mmap.py
        with np.load(path) as z:
            arrays = {k: z[k] for k in z.files}
        header = json.loads(arrays.pop("header").tobytes())
        header.pop("sha256")
        out[algo] = (path, header, arrays, index)
    return out


def _write(path, header, arrays, *, checksum=True):
    header = dict(header)
    if checksum:
        header["sha256"] = hio.file_digest(header, arrays)
    with open(path, "wb") as fh:  # (np.savez would append ".npz" to a path)
        np.savez(fh, header=np.frombuffer(json.dumps(header).encode(), dtype=np.uint8), **arrays)


def _tree_nodes(arrays):
    left = arrays["state/left"]
    internal = np.flatnonzero(left >= 0)
    leaves = np.flatnonzero(left < 0)
    return internal, leaves


# --------------------------------------------------------------------------- damage


def _set(name, index, value):
    def damage(arrays, header):
        a = arrays[name].copy()
        a[index] = value
        arrays[name] = a

    return damage


def _replace(name, make):
    def damage(arrays, header):
        arrays[name] = make(arrays[name])

    return damage


def _header(field, value):
    def damage(arrays, header):
        header[field] = value

    return damage


def _tree(fn):
    """Damage computed from the tree's layout: ``fn(arrays, internal_nodes, leaves)``."""

    def damage(arrays, header):
        internal, leaves = _tree_nodes(arrays)
        fn(arrays, internal, leaves)

    return damage


def _tree_end_of_left_child(arrays, internal, leaves):
    a = arrays["state/end"].copy()
    a[arrays["state/left"][internal[-1]]] += 1  # a leaf range past its parent's: once an out-of-bounds read
    arrays["state/end"] = a


def _tree_start_of_left_child(arrays, internal, leaves):
    a = arrays["state/start"].copy()
    a[arrays["state/left"][internal[-1]]] += 1  # silently wrong neighbours before
    arrays["state/start"] = a


def _tree_cycle(arrays, internal, leaves):
    a = arrays["state/left"].copy()
    a[internal[-1]] = internal[0]  # points back up to the root
    arrays["state/left"] = a


def _tree_shared_child(arrays, internal, leaves):
    a = arrays["state/right"].copy()
    a[internal[-1]] = a[internal[-2]] if a[internal[-2]] > internal[-1] else arrays["state/left"][internal[-1]]
    arrays["state/right"] = a


def _tree_one_child(arrays, internal, leaves):
    a = arrays["state/right"].copy()
    a[internal[0]] = -1
    arrays["state/right"] = a


def _tree_lo_above_a_point(arrays, internal, leaves):
    lo, hi = arrays["state/lo"].copy(), arrays["state/hi"]
    leaf = leaves[0]
    lo[leaf, 0] = 0.5 * (lo[leaf, 0] + hi[leaf, 0])
    arrays["state/lo"] = lo


def _tree_hi_below_a_point(arrays, internal, leaves):
    lo, hi = arrays["state/lo"], arrays["state/hi"].copy()
    leaf = leaves[-1]
    hi[leaf, 1] = 0.5 * (lo[leaf, 1] + hi[leaf, 1])
    arrays["state/hi"] = hi


def _tree_root_box_too_small(arrays, internal, leaves):
    hi = arrays["state/hi"].copy()
    hi[0] -= 0.01
    arrays["state/hi"] = hi


def _tree_leaf_max_conformal_low(arrays, internal, leaves):
    mc = arrays["state/max_conformal"].copy()
    mc[leaves[1]] *= 0.5
    arrays["state/max_conformal"] = mc


def _tree_root_max_conformal_low(arrays, internal, leaves):
    mc = arrays["state/max_conformal"].copy()
    mc[0] *= 0.5
    arrays["state/max_conformal"] = mc


def _swap(name, i, j):
    def damage(arrays, header):
        a = arrays[name].copy()
        a[[i, j]] = a[[j, i]]
        arrays[name] = a

    return damage


def _drop(name):
    def damage(arrays, header):
        del arrays[name]

    return damage


def _add(name, value):
    def damage(arrays, header):
        arrays[name] = value

    return damage


def _vamana_gap(arrays, header):
    a = arrays["state/neighbors"].copy()
    row = int(np.flatnonzero((a >= 0).sum(axis=1) >= 3)[0])
    a[row, 1] = -1
    arrays["state/neighbors"] = a


def _vamana_duplicate(arrays, header):
    a = arrays["state/neighbors"].copy()
    row = int(np.flatnonzero((a >= 0).sum(axis=1) >= 2)[0])
    a[row, 1] = a[row, 0]
    arrays["state/neighbors"] = a


def _vamana_self_loop(arrays, header):
    a = arrays["state/neighbors"].copy()
    a[5, 0] = 5
    arrays["state/neighbors"] = a


def _settings(i, value):
    return _set("state/settings", i, value)


TREE_CASES = [
    # children: out of range, cycle, shared child, one child, wrong dtype / length
    ("left-out-of-range", _set("state/left", 0, 10_000), r"state 'left': child ids must be in \[-1, \d+\), got 10000"),
    ("left-below-minus-one", _set("state/left", 0, -7), r"state 'left': child ids must be in"),
    ("left-cycle", _tree(_tree_cycle), r"state 'left': child \d+ of node \d+ must have a larger id"),
    ("right-shared-child", _tree(_tree_shared_child), r"state 'left': node \d+ is a child of [02] nodes"),
    ("right-one-child", _tree(_tree_one_child), r"state 'right': node \d+ has left=\d+ and right=-1"),
    ("left-int32", _replace("state/left", lambda a: a.astype(np.int32)), r"state 'left': must have dtype int64, got int32"),
    ("right-short", _replace("state/right", lambda a: a[:-1]), r"state 'right': must have shape \(\d+,\), got"),
    ("left-2d", _replace("state/left", lambda a: a[:, None]), r"state 'left': must have shape"),
    # ranges
    ("end-of-left-child", _tree(_tree_end_of_left_child), r"state 'end': node \d+ covers"),
    ("start-of-left-child", _tree(_tree_start_of_left_child), r"state 'start': node \d+ covers"),
    ("root-end", _set("state/end", 0, N + 1), r"state 'end': the root must cover \[0, 60\)"),
    ("root-start", _set("state/start", 0, -1), r"state 'start': the root must cover \[0, 60\)"),
    ("start-float", _replace("state/start", lambda a: a.astype(np.float64)), r"state 'start': must have dtype int64"),
    # permutation and the point copy
    ("indices-out-of-range", _set("state/indices", 3, N), r"state 'indices': ids must be in \[0, 60\), got 60"),
    ("indices-negative", _set("state/indices", 3, -1), r"state 'indices': ids must be in"),
    ("indices-repeated", _set("state/indices", 3, 0), r"state 'indices': must be a permutation"),
    ("indices-swapped", _swap("state/indices", 2, 9), r"state 'points': .*permuted by 'indices'"),
    ("indices-short", _replace("state/indices", lambda a: a[:-1]), r"state 'indices': must have shape \(60,\)"),
    ("points-nudged", _set("state/points", (4, 1), 0.123456), r"state 'points': the tree's copy"),
    ("points-nan", _set("state/points", (4, 1), np.nan), r"state 'points': contains NaN"),
    ("points-short", _replace("state/points", lambda a: a[:-1]), r"state 'points': must have the shape of the index's"),
    ("conformal-nudged", _replace("state/conformal", lambda a: a * (1 - 1e-9)), r"state 'conformal': the tree's conformal"),
    ("conformal-negative", _set("state/conformal", 0, -0.5), r"state 'conformal': conformal factors 1-\|x\|\^2 must be in \(0, 1\]"),
    ("conformal-nan", _set("state/conformal", 0, np.nan), r"state 'conformal': conformal factors"),
    ("conformal-float32", _replace("state/conformal", lambda a: a.astype(np.float32)), r"state 'conformal': must have dtype float64"),
    # bounds
    ("lo-above-a-point", _tree(_tree_lo_above_a_point), r"state 'lo': the point at position \d+ lies outside"),
    ("hi-below-a-point", _tree(_tree_hi_below_a_point), r"state 'hi': the point at position \d+ lies outside"),
    ("root-box-too-small", _tree(_tree_root_box_too_small), r"state 'hi': the bound of node \d+ is not inside that of its parent 0"),
    ("lo-nan", _set("state/lo", (0, 0), np.nan), r"state 'lo': contains NaN or inf"),
    ("hi-inf", _set("state/hi", (1, 0), np.inf), r"state 'hi': contains NaN or inf"),
    ("lo-above-hi", _replace("state/lo", lambda a: a + 10.0), r"state 'hi': node 0 has lo > hi"),
    ("lo-wrong-dim", _replace("state/lo", lambda a: a[:, :2]), r"state 'lo': must have shape \(\d+, 3\)"),
    ("max-conformal-leaf", _tree(_tree_leaf_max_conformal_low), r"state 'max_conformal': the conformal factor of the point"),
    ("max-conformal-root", _tree(_tree_root_max_conformal_low), r"state 'max_conformal': the bound of node \d+ is not inside"),
    ("max-conformal-nan", _set("state/max_conformal", 2, np.nan), r"state 'max_conformal': contains NaN"),
    # leaf size and the set of arrays
    ("leaf-size-zero", _replace("state/leaf_size", lambda a: np.int64(0)), r"state 'leaf_size': must be >= 1, got 0"),
    ("leaf-size-vs-settings", _replace("state/leaf_size", lambda a: np.int64(5)), r"state 'leaf_size': the stored tree has leaf_size=5, the settings say leaf_size=4"),
    ("leaf-size-vector", _replace("state/leaf_size", lambda a: np.array([4])), r"state 'leaf_size': must have shape \(\)"),
    ("missing-array", _drop("state/lo"), r"not a HyperbolicKDTree state: missing arrays \['lo'\]"),
    ("unknown-array", _add("state/extra", np.zeros(3)), r"not a HyperbolicKDTree state: unknown arrays \['extra'\]"),
]

VAMANA_CASES = [
    ("neighbors-out-of-range", _set("state/neighbors", (3, 0), N + 5), r"state 'neighbors': ids must be in \[-1, 60\), got 65 in row 3"),
    ("neighbors-below-minus-one", _set("state/neighbors", (3, 0), -2), r"state 'neighbors': ids must be in"),
    ("neighbors-self-loop", _vamana_self_loop, r"state 'neighbors': row 5 lists the point itself"),
    ("neighbors-gap", _vamana_gap, r"state 'neighbors': row \d+ has a neighbour after -1 padding"),
    ("neighbors-duplicate", _vamana_duplicate, r"state 'neighbors': row \d+ lists the same neighbour twice"),
    ("neighbors-int64", _replace("state/neighbors", lambda a: a.astype(np.int64)), r"state 'neighbors': must have dtype int32"),
    ("neighbors-short", _replace("state/neighbors", lambda a: a[:-1]), r"state 'neighbors': must have shape \(60, 6\)"),
    ("neighbors-wide", _replace("state/neighbors", lambda a: np.pad(a, ((0, 0), (0, 1)), constant_values=-1)), r"state 'neighbors': must have shape \(60, 6\)"),
    ("medoid-out-of-range", _replace("state/medoid", lambda a: np.int64(N)), r"state 'medoid': the start point must be in \[0, 60\), got 60"),
    ("medoid-negative", _replace("state/medoid", lambda a: np.int64(-1)), r"state 'medoid': the start point must be in"),
    ("medoid-float", _replace("state/medoid", lambda a: np.float64(a)), r"state 'medoid': must have dtype int64"),
    ("settings-R", _settings(0, 7), r"state 'neighbors': must have shape \(60, 7\)"),
    ("settings-L-zero", _settings(1, 0), r"state 'settings': L must be >= 1, got L=0"),
    ("settings-L-vs-settings", _settings(1, 9), r"state 'settings': the stored graph has L=9, the settings say L=8"),
    ("settings-passes", _settings(2, 0), r"state 'settings': passes must be >= 1"),
    ("settings-seed", _settings(3, -4), r"state 'settings': random_state must be >= 0"),
    ("settings-short", _replace("state/settings", lambda a: a[:3]), r"state 'settings': must have shape \(4,\)"),
    ("alpha-nan", _replace("state/alpha", lambda a: np.float64(np.nan)), r"state 'alpha': must be a finite number >= 1, got nan"),
    ("alpha-small", _replace("state/alpha", lambda a: np.float64(0.5)), r"state 'alpha': must be a finite number >= 1"),
    ("alpha-vs-settings", _replace("state/alpha", lambda a: np.float64(2.0)), r"state 'alpha': the stored graph has alpha=2.0"),
    ("missing-array", _drop("state/medoid"), r"not a VamanaIndex state: missing arrays \['medoid'\]"),
]

# shells with LSH store no arrays (rebuilt on load from points, settings and seed): their settings are checked
SHELLS_CASES = [
    ("width-below-one", _header("params", {"width": 0.5}), r"damaged hypann index file: width must be > 1.0, got width=0.5"),
    ("width-nan", _header("params", {"width": float("nan")}), r"width must be a finite number"),
    ("n-shells-zero", _header("params", {"width": 3.0, "n_shells": 0}), r"n_shells must be a positive integer"),
    ("lsh-tables-zero", _header("oracle", "lsh:tables=0,bits=6"), r"tables must be a positive integer or 'auto', got tables=0"),
    ("lsh-unknown-setting", _header("oracle", "lsh:planes=3"), r"bad settings for oracle 'lsh'"),
    ("oracle-unknown", _header("oracle", "annoy"), r"unknown oracle 'annoy'"),
    ("stray-state", _add("state/tables", np.zeros(3)), r"algorithm 'shells' stores no state, but got arrays \['tables'\]"),
]

LABEL_CASES = [
    ("labels-repeated", _set("labels", 3, 1000), r"field 'labels' must hold 60 distinct int64 ids >= 0"),
    ("labels-negative", _set("labels", 3, -5), r"field 'labels' must hold 60 distinct int64 ids >= 0"),
    ("labels-int32", _replace("labels", lambda a: a.astype(np.int32)), r"field 'labels' must hold 60 distinct int64 ids >= 0, got int32"),
    ("labels-short", _replace("labels", lambda a: a[:-1]), r"field 'labels' must hold 60 distinct int64 ids >= 0, got int64 \(59,\)"),
]

# damage anywhere in the file, for every algorithm (recentering stores no state)
COMMON_CASES = [
    ("points-nan", _set("points", (2, 0), np.nan), r"'points': points contains NaN or inf"),
    ("points-outside-ball", _set("points", (2, 0), 1.5), r"'points': points row 2 is not strictly inside"),
    ("points-float32", _replace("points", lambda a: a.astype(np.float32)), r"'points' must be float64 of shape \(60, 3\)"),
    ("points-short", _replace("points", lambda a: a[:-1]), r"'points' must be float64 of shape \(60, 3\) as the header says, got float64 \(59, 3\)"),
    ("points-missing", _drop("points"), r"no 'points' array"),
    ("stray-array", _add("extra", np.zeros(2)), r"unexpected arrays \['extra'\]"),
    ("header-n-string", _header("n", "60"), r"header field 'n' must be an integer >= 1, got '60'"),
    ("header-n-bool", _header("n", True), r"header field 'n' must be an integer >= 1, got True"),
    ("header-d-missing", lambda arrays, header: header.pop("d"), r"header field 'd' must be an integer >= 1, got '<missing>'"),
    ("header-c-negative", _header("c", -1.0), r"header field 'c' must be a finite number > 0, got -1.0"),
    ("header-c-string", _header("c", "1"), r"header field 'c' must be a finite number > 0"),
    ("header-model", _header("model", "klein"), r"header field 'model' must be one of \('poincare', 'lorentz'\), got 'klein'"),
    ("header-dtype", _header("dtype", "float32"), r"header field 'dtype' must be 'float64'"),
    ("header-algorithm-type", _header("algorithm", ["hkdtree"]), r"header field 'algorithm' must be an algorithm name"),
    ("header-algorithm-unknown", _header("algorithm", "annoy"), r"stored settings: unknown algorithm 'annoy'"),
    ("header-params-list", _header("params", [1, 2]), r"header field 'params' must be a JSON object"),
    ("header-params-reserved", _header("params", {"c": 2.0}), r"header field 'params' must be settings other than \['c'\]"),
    ("header-params-unknown", _header("params", {"bogus": 1}), r"stored settings: bad settings for algorithm '\w+': .*bogus"),
    ("header-oracle-type", _header("oracle", 5), r"header field 'oracle' must be an oracle spec string or null, got 5"),
    ("header-random-state", _header("random_state", "x"), r"header field 'random_state' must be null or an integer"),
    ("header-random-state-negative", _header("random_state", -3), r"header field 'random_state' must be null or an integer"),
]

def _under_auto(damage):
    """``damage`` of a kd-tree file applied to the tree that ``algorithm="auto"`` keeps (``state/hkdtree.*``)."""
    own = ("state/choice", "state/measurement")

    def wrapped(arrays, header):
        inner = {("state/" + k[len("state/hkdtree."):] if k.startswith("state/hkdtree.") else k): v
                 for k, v in arrays.items()}
        damage(inner, header)
        arrays.clear()
        arrays.update({("state/hkdtree." + k[len("state/"):] if k.startswith("state/") and k not in own else k): v
                       for k, v in inner.items()})

    return wrapped


CASES = (
    [("hkdtree", *c) for c in TREE_CASES]
    + [("auto", name, _under_auto(damage), match) for name, damage, match in TREE_CASES]
    + [("vamana", *c) for c in VAMANA_CASES]
    + [("shells", *c) for c in SHELLS_CASES]
    + [("labelled", *c) for c in LABEL_CASES]
    + [(algo, *c) for algo in ("hkdtree", "auto", "vamana", "recentering", "shells") for c in COMMON_CASES]
)


@pytest.mark.parametrize(("algo", "case", "damage", "match"), CASES, ids=[f"{c[0]}-{c[1]}" for c in CASES])
def test_damaged_file_is_a_value_error_naming_the_field(saved, tmp_path, algo, case, damage, match):
    _, header, arrays, _ = saved[algo]
    header, arrays = json.loads(json.dumps(header)), dict(arrays)
    damage(arrays, header)
    path = tmp_path / "damaged.hypann"
    _write(path, header, arrays)  # checksum recomputed: only the structural checks can catch it
    with pytest.raises(ValueError, match=match) as info:
        hypann.load(path)
    assert repr(str(path)) in str(info.value)  # names the file


@pytest.mark.parametrize("algo", [*sorted(SETTINGS), "labelled"])
def test_rewrite_without_damage_loads_and_answers_the_same(saved, tmp_path, algo):
    """The control for the cases above: the rewrite itself is faithful."""
    _, header, arrays, index = saved[algo]
    path = tmp_path / "same.hypann"
    _write(path, header, dict(arrays))
    back = hypann.load(path)
    Q = _points()[:7] * 0.9
    want, got = index.search(Q, 4), back.search(Q, 4)
    np.testing.assert_array_equal(got.indices, want.indices)
    np.testing.assert_array_equal(got.distances, want.distances)


@pytest.mark.parametrize("algo", ["hkdtree", "vamana"])
def test_changed_value_with_the_old_checksum_is_caught_by_the_checksum(saved, tmp_path, algo):
    _, header, arrays, _ = saved[algo]
    arrays = dict(arrays)
    field = "state/max_conformal" if algo == "hkdtree" else "state/alpha"
    arrays[field] = arrays[field] * 1.0000001  # harmless to the structure, but not what was written
    header = dict(header, sha256=hio.file_digest(header, saved[algo][2]))
    _write(tmp_path / "x.hypann", header, arrays, checksum=False)
    with pytest.raises(ValueError, match=r"damaged hypann index file: checksum mismatch"):
        hypann.load(tmp_path / "x.hypann")
    header["n"] = 61  # the header is covered as well
    _write(tmp_path / "y.hypann", header, dict(saved[algo][2]), checksum=False)
    with pytest.raises(ValueError, match=r"checksum mismatch"):
        hypann.load(tmp_path / "y.hypann")


def _member_data_ranges(path):
    """Byte ranges of the stored data of every zip member (covered by its CRC-32)."""
    with zipfile.ZipFile(path) as zf:
        infos = zf.infolist()
    raw = path.read_bytes()
    out = []
    for info in infos:
        off = info.header_offset
        name_len = int.from_bytes(raw[off + 26 : off + 28], "little")
        extra_len = int.from_bytes(raw[off + 28 : off + 30], "little")
        data = off + 30 + name_len + extra_len
        out.append((data, data + info.compress_size))
    return out


@pytest.mark.parametrize("algo", ["hkdtree", "vamana"])
def test_random_byte_flips_are_value_errors(saved, tmp_path, algo):
    path = saved[algo][0]
    raw = path.read_bytes()
    rng = np.random.default_rng(11)
    ranges = _member_data_ranges(path)
    damaged = tmp_path / "flip.hypann"
    for _ in range(60):  # inside some array's bytes: the CRC, sha256 or npy header parser must object
        lo, hi = ranges[rng.integers(len(ranges))]
        pos = int(rng.integers(lo, hi))
        flipped = bytearray(raw)
        flipped[pos] ^= 1 << int(rng.integers(8))
        damaged.write_bytes(bytes(flipped))
        with pytest.raises(ValueError, match=r"damaged hypann index file|not a hypann index file"):
            hypann.load(damaged)
    want = hypann.load(path).search(_points()[:5], 3)
    for _ in range(60):  # anywhere (zip timestamps are not checked): an error, or the very same index
        pos = int(rng.integers(len(raw)))
        flipped = bytearray(raw)
        flipped[pos] ^= 1 << int(rng.integers(8))
        damaged.write_bytes(bytes(flipped))
        try:
            back = hypann.load(damaged)
        except ValueError as exc:
            assert "hypann index file" in str(exc)
            continue
        got = back.search(_points()[:5], 3)
        np.testing.assert_array_equal(got.indices, want.indices)
        np.testing.assert_array_equal(got.distances, want.distances)
    for cut in (0, 10, len(raw) // 3, len(raw) - 1):  # truncated
        damaged.write_bytes(raw[:cut])
        with pytest.raises(ValueError, match=r"damaged hypann index file|not a hypann index file"):
            hypann.load(damaged)


def test_standalone_from_arrays_validates_too(saved):
    """``from_arrays`` of the structures checks on its own, without the index's points."""
    tree = {k[len("state/"):]: v for k, v in saved["hkdtree"][2].items() if k.startswith("state/")}
    end = tree["end"].copy()
    end[1] += 1
    with pytest.raises(ValueError, match=r"HyperbolicKDTree state 'end'"):
        HyperbolicKDTree.from_arrays({**tree, "end": end})
    stored = saved["vamana"][2]
    graph = {k[len("state/"):]: v for k, v in stored.items() if k.startswith("state/")}
    with pytest.raises(ValueError, match=r"VamanaIndex state 'medoid'"):
        VamanaIndex.from_arrays({**graph, "medoid": np.int64(10**9)}, points=stored["points"],
                                conformal=stored["conformal"])
    with pytest.raises(TypeError, match=r"HyperbolicKDTree state must be a mapping"):
        HyperbolicKDTree.from_arrays([1, 2])


def test_non_index_files_say_what_was_expected(tmp_path):
    expected = r"is not a hypann index file \(expected an \.npz archive written by HyperbolicIndex\.save\)"
    np.save(tmp_path / "points.npy", np.zeros((3, 2)))
    with pytest.raises(ValueError, match=expected + r": it holds a single ndarray \(an \.npy file\?\)"):
        hypann.load(tmp_path / "points.npy")
    (tmp_path / "empty").write_bytes(b"")
    with pytest.raises(ValueError, match=expected + r": cannot read it as \.npz"):
        hypann.load(tmp_path / "empty")
    (tmp_path / "notes.txt").write_text("just some text\n")
    with pytest.raises(ValueError, match=expected):
        hypann.load(tmp_path / "notes.txt")
    with pytest.raises(ValueError, match=expected + r": it is a directory"):
        hypann.load(tmp_path)
    with zipfile.ZipFile(tmp_path / "other.zip", "w") as zf:
        zf.writestr("readme.txt", "hello")
    with pytest.raises(ValueError, match=expected + r": no 'header' array"):
        hypann.load(tmp_path / "other.zip")
    np.savez(tmp_path / "wrong_header.npz", header=np.frombuffer(b'{"format": "other"}', dtype=np.uint8))
    with pytest.raises(ValueError, match=expected + r": header format is 'other'"):
        hypann.read_metadata(tmp_path / "wrong_header.npz")
    np.savez(tmp_path / "float_header.npz", header=np.zeros(4))
    with pytest.raises(ValueError, match=expected + r": the header is not a uint8 vector"):
        hypann.load(tmp_path / "float_header.npz")
    np.savez(tmp_path / "bad_json.npz", header=np.frombuffer(b"{not json", dtype=np.uint8))
    with pytest.raises(ValueError, match=r"damaged hypann index file: the header is not UTF-8 JSON"):
        hypann.load(tmp_path / "bad_json.npz")


@pytest.mark.parametrize("algo", ["hkdtree", "vamana"])
def test_random_single_entry_changes_are_rejected_or_harmless(saved, tmp_path, algo):
    """Change one entry of one state array (checksum recomputed): either a ValueError naming a state
    field, or a structure that is still valid -- for the exact kd-tree that means the very same
    answers as brute force (e.g. a larger box only prunes less), for Vamana another graph whose
    answers are real points at their true distances."""
    _, header, arrays, _ = saved[algo]
    names = sorted(k for k in arrays if k.startswith("state/"))
    Q = _points()[::4] * 0.9
    everything = hypann.HyperbolicIndex(algorithm="brute").build(_points()).search(Q, N)
    true_dist = np.empty((len(Q), N))
    np.put_along_axis(true_dist, everything.indices, everything.distances, axis=1)
    rng = np.random.default_rng(23)
    path = tmp_path / "changed.hypann"
    rejected = 0
    for _ in range(150):
        changed = dict(arrays)
        name = names[rng.integers(len(names))]
        value = changed[name].copy()
        flat = value.reshape(-1)
        i = rng.integers(flat.size)
        if value.dtype.kind == "i":
            flat[i] += rng.choice([-2, -1, 1, 2, 5])
        else:
            flat[i] *= 1 + rng.choice([-1, 1]) * 10.0 ** rng.integers(-15, 0)
        changed[name] = value
        _write(path, header, changed)
        try:
            back = hypann.load(path)
        except ValueError as exc:
            assert re.search(r"damaged hypann index file: (HyperbolicKDTree|VamanaIndex) state '\w+'", str(exc))
            rejected += 1
            continue
        got = back.search(Q, 4)
        if algo == "hkdtree":
            np.testing.assert_array_equal(got.distances, everything.distances[:, :4])
        else:
            assert np.all((got.indices >= 0) & (got.indices < N))
            np.testing.assert_allclose(got.distances, np.take_along_axis(true_dist, got.indices, axis=1), rtol=1e-12)
    assert rejected > 50
