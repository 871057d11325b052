"""One query per call: the serial kernels, the input check's fast path and the reused visited marks.

A batch of at most ``SERIAL_MAX_QUERIES`` queries runs serial twins of the
search kernels, checks its rows with one serial kernel, and (for the graph)
marks visited points in a reused array instead of a fresh ``O(n)`` one. None
of that may change an answer: every test compares with the batch path, bit
for bit, or with the full input checks' error.
"""

from __future__ import annotations

import copy
import pickle
from concurrent.futures import ThreadPoolExecutor

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import hypann
from hypann import _validation as V
from hypann._runtime import SERIAL_MAX_QUERIES, OneQueryKernel, VisitedMarks, read_only
from hypann.geometry import _kernels
from hypann.search.hyperbolic_kdtree import HyperbolicKDTree
from tests.conftest import ball_points

# numba-kernel tests: `make test` runs them again under NUMBA_BOUNDSCHECK=1 (pytest -m kernels)
pytestmark = pytest.mark.kernels

CONFIGS = [
    dict(algorithm="hkdtree"),
    dict(algorithm="graph"),
    dict(algorithm="graph", exact=True),
    dict(algorithm="brute"),
    dict(algorithm="auto"),
    dict(algorithm="hkdtree", storage="float32"),
    dict(algorithm="graph", exact=True, storage="float32"),
    dict(algorithm="graph", c=0.3),
]


def test_a_single_query_is_a_small_batch():
    assert SERIAL_MAX_QUERIES >= 1


def _same(one, batch, i):
    np.testing.assert_array_equal(one.indices[0], batch.indices[i])
    np.testing.assert_array_equal(one.distances[0], batch.distances[i])
    np.testing.assert_array_equal(one.stats.samples[0], batch.stats.samples[i])


@pytest.fixture(scope="module")
def data():
    rng = np.random.default_rng(21)
    X = ball_points(rng, 1500, 5, min_conformal=1e-10)
    Q = ball_points(rng, 40, 5, min_conformal=1e-10)
    return X, Q


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_one_query_per_call_equals_the_batch(data, config):
    X, Q = data
    config = dict(config)
    c = config.pop("c", 1.0)
    index = hypann.HyperbolicIndex(c=c, random_state=0, verbose=False, **config).build(X / np.sqrt(c))
    Qc = Q / np.sqrt(c)
    for kw in (dict(k=7), dict(k=3, budget=60)):
        batch = index.search(Qc, **kw)
        for i in range(len(Q)):
            _same(index.search(Qc[i:i + 1], **kw), batch, i)
    if config["algorithm"] != "graph" or config.get("exact"):  # exact methods: brute force's answer
        ref = hypann.HyperbolicIndex(algorithm="brute", c=c).build(X / np.sqrt(c)).search(Qc, 7)
        np.testing.assert_array_equal(index.search(Qc[:1], 7).indices[0], ref.indices[0])


def test_one_query_per_call_after_adding_and_removing(data):
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm="graph", exact=True, random_state=0, verbose=False).build(X[:1200])
    index.add(X[1200:])
    index.remove(np.arange(0, 1500, 7))
    batch = index.search(Q, 5)
    for i in range(len(Q)):
        _same(index.search(Q[i:i + 1], 5), batch, i)


def test_graph_reuses_its_visited_marks_without_mixing_queries(data):
    """Hundreds of one-query calls on one reused array, then concurrent calls from 8 threads."""
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm="graph", random_state=0, verbose=False).build(X)
    batch = index.search(Q, 10)
    for _ in range(5):
        for i in range(len(Q)):
            _same(index.search(Q[i:i + 1], 10), batch, i)
    with ThreadPoolExecutor(8) as pool:
        got = list(pool.map(lambda i: index.search(Q[i:i + 1], 10), list(range(len(Q))) * 4))
    for j, one in enumerate(got):
        _same(one, batch, j % len(Q))
    again = pickle.loads(pickle.dumps(index))  # the marks are scratch, not part of the state
    _same(again.search(Q[:1], 10), batch, 0)


def test_visited_marks_hand_out_fresh_tags():
    marks = VisitedMarks(5)
    seen, tag = marks.take(1)
    assert seen.shape == (1, 5) and seen.dtype == np.int32 and not seen.any() and tag == 1
    seen[0, 2] = 3
    marks.give(seen, 4)
    again, tag = marks.take(2)
    assert again is seen and tag == 4
    other, tag_other = marks.take(1)  # the first is taken: a new block
    assert other is not seen and tag_other == 1
    wide, tag_wide = marks.take(3, rows=2)  # a block of another height is never handed out for this one
    assert wide.shape == (2, 5) and tag_wide == 1
    marks.give(wide, 9)
    marks.give(again, VisitedMarks.TAG_MAX - 1)
    cleared, tag = marks.take(2)  # tags TAG_MAX - 1 and TAG_MAX would not both fit: start over
    assert cleared is seen and tag == 1 and not cleared.any()
    assert marks.take(1, rows=2) == (wide, 9)
    with pytest.raises(ValueError, match=r"count must be in \[0, 2147483647\), got -1"):
        marks.take(-1)


def test_visited_marks_take_one_shares_the_blocks_of_take_and_their_tags():
    """The one-query path's take_one / give_one: the blocks of one row that take(count) hands out, the
    tag after the last one used, and a cleared block when the tags run out, as take(1) does."""
    marks = VisitedMarks(4)
    seen, tag = marks.take_one()
    assert seen.shape == (1, 4) and seen.dtype == np.int32 and tag == 1
    seen[0, 1] = 1
    marks.give_one(seen, tag)
    again, tag = marks.take(3)  # a batch of three continues after the one query's tag
    assert again is seen and tag == 2
    marks.give(again, tag + 3)
    assert marks.take_one() == (seen, 5)
    marks.give_one(seen, VisitedMarks.TAG_MAX - 1)  # its next tag is TAG_MAX: used up, as for take(1)
    cleared, tag = marks.take_one()
    assert cleared is seen and tag == 1 and not cleared.any()
    other, tag_other = marks.take_one()  # the only block is taken: a new one
    assert other is not seen and tag_other == 1


@pytest.mark.parametrize("batch_rows", [1, 40])
def test_graph_search_restarts_the_tags_when_they_run_out(data, batch_rows):
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm="graph", random_state=0, verbose=False).build(X)
    batch = index.search(Q, 10)
    graph = index.algorithm_.graph_
    for stack in graph._marks._free.values():  # as if every tag had been used on every point
        for seen, _ in stack:
            seen[:] = VisitedMarks.TAG_MAX
        stack[:] = [(seen, VisitedMarks.TAG_MAX) for seen, _ in stack]
    assert graph._marks._free
    got = index.search(Q[:batch_rows], 10)
    for i in range(batch_rows):
        _same(index.search(Q[i:i + 1], 10), batch, i)
        np.testing.assert_array_equal(got.indices[i], batch.indices[i])


def test_graph_batches_on_any_thread_count_share_no_marks(data):
    X, Q = data
    index = hypann.HyperbolicIndex(algorithm="graph", random_state=0, verbose=False).build(X)
    reference = index.search(Q, 10)
    for n_jobs in (1, 2, 1, 2):
        index.n_jobs = n_jobs
        for part in (Q[:3], Q[:17], Q):
            got = index.search(part, 10)
            np.testing.assert_array_equal(got.indices, reference.indices[:len(part)])
            np.testing.assert_array_equal(got.distances, reference.distances[:len(part)])


# --- the input check's fast path ---------------------------------------------------------------

def _full_check(row, **kw):
    """The full checks' answer for ``row``: as the second row of a batch too large for the fast path."""
    rows = np.repeat(row[None, :], SERIAL_MAX_QUERIES + 1, axis=0)
    points, conformal = V.check_points(rows, **kw)
    return points[-1:], conformal[-1:]


def _row(model, d, hyperbolic_norm, c, dtype, seed):
    """A point at ``hyperbolic_norm`` from the origin in curvature ``-c``, in the ball or on the
    hyperboloid (``model``), as ``dtype``."""
    from hypann.geometry.models import poincare_to_lorentz

    rng = np.random.default_rng(seed)
    u = rng.normal(size=d)
    u /= np.linalg.norm(u)
    x = np.tanh(hyperbolic_norm / 2.0) * u / np.sqrt(c)
    return (poincare_to_lorentz(x, c=c) if model == "lorentz" else x).astype(dtype)


@pytest.mark.parametrize("model", ["poincare", "lorentz"])
@settings(max_examples=150, deadline=None)
@given(
    st.integers(1, 12),
    st.floats(0.0, 37.0),
    st.sampled_from([1.0, 0.25, 3.7]),
    st.sampled_from([np.float64, np.float32]),
    st.integers(0, 2**32 - 1),
)
def test_fast_check_equals_the_full_check(model, d, hyperbolic_norm, c, dtype, seed):
    """Bit for bit, from the origin to hyperbolic norm 37 (``1-c|x|^2`` down to ~1e-16), in the ball or on
    the hyperboloid: the one-row kernel's point and factor are the full check's, or both refuse the row
    with the same message."""
    x = _row(model, d, hyperbolic_norm, c, dtype, seed)
    try:
        full = _full_check(x, model=model, c=c)
    except ValueError as exc:  # rounded onto the boundary: the fast path must report the same
        with pytest.raises(ValueError, match=str(exc)[:40].replace("(", r"\(").replace("[", r"\[")):
            V.check_points(x[None, :], model=model, c=c)
        return
    fast = V.check_points(x[None, :], model=model, c=c)
    np.testing.assert_array_equal(fast[0], full[0])
    np.testing.assert_array_equal(fast[1], full[1])
    assert fast[0].shape == (1, d) and fast[0].dtype == np.float64 and fast[0].flags.c_contiguous
    assert not np.shares_memory(fast[0], x)


def test_fast_check_takes_a_strided_row_and_copies_it():
    X = np.random.default_rng(3).uniform(-0.3, 0.3, (4, 6))
    row = X[1:2, ::2]
    points, conformal = V.check_points(row)
    np.testing.assert_array_equal(points, np.ascontiguousarray(row))
    np.testing.assert_array_equal(conformal, _kernels.conformal_factor(np.ascontiguousarray(row)))
    points[0, 0] = 0.5
    assert X[1, 0] != 0.5


@pytest.mark.parametrize("row, message", [
    ([0.1, np.nan, 0.2], r"Q contains NaN or inf \(first at row 0"),
    ([0.1, np.inf, 0.2], r"Q contains NaN or inf \(first at row 0"),
    ([0.6, 0.6, 0.6], r"Q row 0 is not strictly inside the Poincare ball"),
    ([1.0, 0.0, 0.0], r"Q row 0 is not strictly inside the Poincare ball"),
    ([1e150, 0.0, 0.0], r"Q row 0 is not strictly inside the Poincare ball"),
])
def test_one_bad_query_gets_the_full_checks_error(row, message):
    index = hypann.HyperbolicIndex(algorithm="hkdtree").build(np.random.default_rng(0).uniform(-0.3, 0.3, (50, 3)))
    with pytest.raises(ValueError, match=message):
        index.search(np.array([row]), 1)
    with pytest.raises(ValueError, match=r"Q has 2 dimensions \(Poincare\), but the index was built with 3"):
        index.search(np.array([[0.1, 0.2]]), 1)


def test_a_query_that_rounds_onto_the_boundary_is_refused_by_the_fast_path():
    c = 2.0
    index = hypann.HyperbolicIndex(algorithm="hkdtree", c=c).build(np.array([[0.1, 0.2], [0.3, -0.1]]))
    q = np.array([[0.7071067811865475, 0.0]])  # 1 - 2 x^2 = 1.8e-16 > 0, but sqrt(2) x rounds to 1.0
    assert _kernels.conformal_factor_curved(q, c)[0] > 0 and q[0, 0] * np.sqrt(c) == 1.0
    with pytest.raises(ValueError, match=r"Q row 0 is too far from the origin for float64: its conformal factor"):
        index.search(q, 1)


# --- the kd-tree's seeds by position ----------------------------------------------------------

def test_seed_rows_equal_seed_ids(data):
    X, Q = data
    conformal = _kernels.conformal_factor(X)
    tree = HyperbolicKDTree(leaf_size=8).build(X.copy(), conformal.copy())
    qc = _kernels.conformal_factor(Q)
    rng = np.random.default_rng(4)
    rows = rng.integers(-1, len(X), size=(len(Q), 6))
    rows[:, 1] = rows[:, 0]  # a repeated seed counts once
    ids = np.where(rows >= 0, tree.indices_[np.maximum(rows, 0)], -1)
    by_rows = tree.search_exact(Q, qc, 4, seed_rows=rows)
    by_ids = tree.search_exact(Q, qc, 4, seed_ids=ids)
    plain = tree.search_exact(Q, qc, 4)
    np.testing.assert_array_equal(by_rows.ids, by_ids.ids)
    np.testing.assert_array_equal(by_rows.deltas, by_ids.deltas)
    np.testing.assert_array_equal(by_rows.deltas, plain.deltas)
    with pytest.raises(ValueError, match="give seed_ids or seed_rows, not both"):
        tree.search_exact(Q, qc, 4, seed_ids=ids, seed_rows=rows)
    with pytest.raises(ValueError, match=r"seed_rows must be an integer array of shape \(40, s\)"):
        tree.search_exact(Q, qc, 4, seed_rows=rows[:3])


def test_one_query_per_call_counts_rounds_like_the_batch(data):
    X, Q = data
    for config in (dict(algorithm="graph"), dict(algorithm="graph", exact=True), dict(algorithm="hkdtree")):
        index = hypann.HyperbolicIndex(random_state=0, verbose=False, **config).build(X)
        batch = index.search(Q, 5).stats
        for i in range(3):
            one = index.search(Q[i:i + 1], 5).stats
            assert one.rounds.dtype == one.oracle_calls.dtype == np.int64
            assert one.rounds[0] == batch.rounds[i] and one.oracle_calls[0] == batch.oracle_calls[i]


def test_graph_one_query_calls_leave_the_shared_no_budget_rows_alone(data):
    """A one-query graph search without budget passes module-level rows to the kernel; it must only read them.

    Both of the graph's one-query calls pass them: ``search`` (checked queries) and
    ``search_coordinates`` (the index's one-query path)."""
    from hypann.graph import knn_graph

    X, Q = data
    index = hypann.HyperbolicIndex(algorithm="graph", random_state=0, verbose=False).build(X)
    graph = index.algorithm_.graph_
    q_conformal = _kernels.conformal_factor(Q)
    for i in range(len(Q)):
        graph.search(Q[i:i + 1], q_conformal[i:i + 1], 5)
        graph.search_coordinates(Q[i:i + 1], 1.0, 5)
    graph.search(Q[:1], q_conformal[:1], 5, budget=30)
    assert np.all(knn_graph._NO_BUDGETS == np.iinfo(np.int64).max)
    assert np.all(knn_graph._NO_EXCLUDES == -1)


@pytest.mark.parametrize("ids, expected", [
    (np.zeros((0, 3), dtype=np.int64), False),
    (np.arange(12, dtype=np.int64).reshape(3, 4), False),
    (np.array([[0, 1, -1]], dtype=np.int64), True),
    (np.arange(-3, 9, dtype=np.int64).reshape(3, 4)[:, 1::2], True),  # strided: -2 in row 0
    (np.arange(-3, 9, dtype=np.int64).reshape(3, 4)[1:, ::2], False),  # strided, row 0 left out
    (np.array([5, -(2 ** 62)], dtype=np.int64), True),
    (np.array([[7, -2]], dtype=np.int32), True),
])
def test_any_negative(ids, expected):
    assert _kernels.any_negative(ids) is expected
    assert expected == bool(ids.size and ids.min() < 0)


@given(n=st.integers(1, 300), d=st.sampled_from([3, 10, 16, 40]), k=st.integers(1, 12), m=st.integers(1, 3),
       n_blocks=st.integers(1, 9), dup=st.integers(0, 40), seed=st.integers(0, 2**32 - 1),
       dtype=st.sampled_from([np.float64, np.float32]))
@settings(max_examples=60)
def test_split_scan_equals_the_scan_in_row_order(n, d, k, m, n_blocks, dup, seed, dtype):
    """Rows split into blocks (some empty, some shorter than k) and merged in block order: the same
    ids, tie order and bits as one scan in row order."""
    rng = np.random.default_rng(seed)
    X = ball_points(rng, n, d, min_conformal=1e-10 if dtype == np.float64 else 1e-5)
    X[rng.integers(0, n, min(dup, n))] = X[rng.integers(0, n, min(dup, n))]  # exact duplicates: ties
    X = X.astype(dtype)
    cx = _kernels.conformal_factor(X.astype(np.float64))
    Q = np.concatenate([ball_points(rng, m - 1, d), X[:1].astype(np.float64)])
    cq = _kernels.conformal_factor(Q)
    X, cx = read_only(X), read_only(cx)  # as the library passes them: one compiled type
    want = _kernels.brute_knn_delta_serial(Q, cq, X, cx, k)
    got = _kernels.brute_knn_delta_split(Q, cq, X, cx, k, n_blocks)
    np.testing.assert_array_equal(got[0], want[0])
    np.testing.assert_array_equal(got[1], want[1])


def test_one_query_on_two_threads_splits_a_long_scan(monkeypatch):
    """A one-query call of a long enough scan runs the split kernel on the index's threads and
    answers as on one thread; an index with n_jobs=1 keeps the serial scan."""
    import numba

    from hypann.geometry import gram_scan

    if numba.config.NUMBA_NUM_THREADS < 2:
        pytest.skip("needs two numba threads")
    rng = np.random.default_rng(5)
    n = gram_scan.SPLIT_SCAN_MIN_WORK // 20 + 7
    X = ball_points(rng, n, 20, min_conformal=1e-8)
    X[100:400] = X[:300]  # ties
    Q = np.concatenate([ball_points(rng, 3, 20), X[:2]])
    calls = []
    real = gram_scan.screened_knn_delta  # from 16-D on the scan reads the points' codes first

    def recorded(*args, n_blocks, **kwargs):
        calls.append(n_blocks)
        return real(*args, n_blocks=n_blocks, **kwargs)

    monkeypatch.setattr(gram_scan, "screened_knn_delta", recorded)
    answers = {}
    for n_jobs in (1, 2):
        index = hypann.HyperbolicIndex(algorithm="brute", n_jobs=n_jobs, verbose=False).build(X)
        calls.clear()
        answers[n_jobs] = [index.search(Q[i:i + 1], 9) for i in range(len(Q))] + [index.search(Q[:2], 9)]
        # one query a call on two threads: split; two queries on two threads: one thread per query
        assert len(calls) == len(Q) + 1
        assert sum(blocks > 0 for blocks in calls) == (0 if n_jobs == 1 else len(Q))
    for one, two in zip(answers[1], answers[2]):
        np.testing.assert_array_equal(one.indices, two.indices)
        np.testing.assert_array_equal(one.distances, two.distances)


# --- the one-query path: check and search in one compiled call ----------------------------------

FAST_CONFIGS = [
    dict(algorithm="graph"),
    dict(algorithm="hkdtree"),
    dict(algorithm="auto", scan_fraction=1.0),  # the kd-tree whatever it examines
    dict(algorithm="graph", storage="float32"),
    dict(algorithm="hkdtree", storage="float32"),
]


def _without_checked_path(index):
    """Make the algorithm's checked search fail: a one-query call that still answers took the fast path."""
    def refuse(*args, **kwargs):
        raise AssertionError("the checked path was taken")

    index.algorithm_.search = refuse


@pytest.mark.parametrize("config", FAST_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_one_plain_query_takes_the_compiled_path_and_answers_as_the_batch(data, config):
    X, Q = data
    index = hypann.HyperbolicIndex(random_state=0, verbose=False, **config).build(X)
    Q32 = (0.99 * Q).astype(np.float32)  # a float32 query: its rounded values (inside the ball)
    batches = {(k, dtype): index.search(Q32 if dtype == np.float32 else Q, k) for k in (1, 6)
               for dtype in (np.float64, np.float32)}
    by_ef = index.search(Q, 6, ef=48) if config["algorithm"] == "graph" else None
    if config["algorithm"] == "auto":
        assert index.algorithm_.choice_ == "hkdtree"
    _without_checked_path(index)
    for i in range(len(Q)):
        for (k, dtype), batch in batches.items():
            one = index.search((Q32 if dtype == np.float32 else Q)[i:i + 1], k)
            _same(one, batch, i)
            np.testing.assert_array_equal(one.stats.rounds, batch.stats.rounds[i:i + 1])
            np.testing.assert_array_equal(one.stats.oracle_calls, batch.stats.oracle_calls[i:i + 1])
        if by_ef is not None:
            _same(index.search(Q[i:i + 1], 6, ef=48), by_ef, i)
        for k in (np.int64(6), np.int32(6), np.uint8(6)):  # a numpy integer k takes the path too
            _same(index.search(Q[i:i + 1], k), batches[6, np.float64], i)


def _rows_of_every_kind(Q, i):
    """Row ``i`` of ``Q`` as arrays of every kind numba types apart: C-contiguous, strided, read-only,
    float32 (its rounded values) and strided float32, each a (1, d) array of the same values but float32."""
    wide = np.zeros((len(Q), 2 * Q.shape[1]))
    wide[:, ::2] = Q
    frozen = Q[i:i + 1].copy()
    frozen.flags.writeable = False
    wide32 = wide.astype(np.float32)
    return {"C": Q[i:i + 1], "strided": wide[i:i + 1, ::2], "read-only": frozen,
            "float32": Q[i:i + 1].astype(np.float32), "strided float32": wide32[i:i + 1, ::2]}


@pytest.mark.parametrize("config", FAST_CONFIGS[:2], ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_one_query_rows_of_every_layout_in_turn_answer_as_the_batch(data, config):
    """The one-query function calls the kernel's compiled code of a signature without the dispatcher
    (:class:`hypann._runtime.OneQueryKernel`), which does not check an array's layout: each kind of query
    row keeps its own, so rows of every kind in turn (a strided row after a contiguous one, ...) answer
    as the batch does."""
    X, Q = data
    Q = 0.99 * Q  # its float32 rounding stays inside the ball
    index = hypann.HyperbolicIndex(random_state=0, verbose=False, **config).build(X)
    Q32 = Q.astype(np.float32).astype(np.float64)
    batch, batch32 = index.search(Q, 6), index.search(Q32, 6)
    _without_checked_path(index)
    for i in range(len(Q)):
        for kind, row in _rows_of_every_kind(Q, i).items():
            _same(index.search(row, 6), batch32 if "float32" in kind else batch, i)
    kernel = next(cell.cell_contents for cell in index._one_query[3].__closure__
                  if isinstance(cell.cell_contents, OneQueryKernel))
    assert len(kernel._compiled) == 5  # a compiled function for each kind
    assert all(call is not kernel.kernel for call in kernel._compiled.values())  # none is the dispatcher


def test_one_query_kernel_calls_the_dispatcher_where_numba_has_no_compiled_code():
    """Without numba's compiled code at hand (another numba), :class:`OneQueryKernel` calls the dispatcher."""
    calls = []

    def kernel(X, scale):
        calls.append(X)
        return float(X.sum()) * scale

    kept = OneQueryKernel(kernel)
    X = np.ones((1, 3))
    assert kept(X, X, 2.0) == 6.0 and kept(X, X, 3.0) == 9.0
    assert len(calls) == 2 and list(kept._compiled.values()) == [kernel]


def _one_query_is_the_batch_row(index, Q):
    """Row 3 of a batch of ``Q[:6]``, searched alone, is the batch's row, through the compiled path."""
    batch = index.search(Q[:6], 5)
    _without_checked_path(index)
    try:
        _same(index.search(Q[3:4], 5), batch, 3)
    finally:
        del index.algorithm_.search  # the class's method again


@pytest.mark.parametrize("config", FAST_CONFIGS[:2], ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_the_kept_one_query_function_follows_the_build_and_the_settings(data, config):
    """The index keeps the algorithm's one-query function: after a new build, a compaction, a new ``c`` or
    a pickle / deep copy, a one-query answer is still the batch's row of the index as it is then."""
    X, Q = data
    index = hypann.HyperbolicIndex(random_state=0, verbose=False, **config).build(X)
    _one_query_is_the_batch_row(index, Q)  # makes and keeps the function
    index.build(X[:700])
    _one_query_is_the_batch_row(index, Q)
    assert index.search(Q[3:4], 5).indices.max() < 700
    index.add(Q[:2] * 0.5)
    index.compact()  # a new structure over 702 points
    _one_query_is_the_batch_row(index, Q)
    index.c = 4.0  # the same stored points, distances in another curvature
    _one_query_is_the_batch_row(index, Q / 2.0)
    for twin in (pickle.loads(pickle.dumps(index)), copy.deepcopy(index)):
        assert "_one_query" not in vars(twin)
        _one_query_is_the_batch_row(twin, Q / 2.0)
    first, second = index.search(Q[3:4] / 2.0, 5), index.search(Q[4:5] / 2.0, 5)
    for name, counts in first.stats.as_dict().items():  # each answer's own counters: a caller may change them
        assert not np.shares_memory(counts, second.stats.as_dict()[name]), name
    first.stats.rounds[0] = 7
    first.stats.oracle_calls[0] = 7
    third = index.search(Q[5:6] / 2.0, 5)
    assert third.stats.rounds[0] == 1 and third.stats.oracle_calls[0] == 0


def test_the_checked_path_answers_what_the_fast_path_does_not_take(data):
    """Graph with exact=True, brute force, a budget, a list, a numpy bool k, two rows, points added: each
    still answers (through the checked path) as its batch, or reports what is wrong. A Lorentz query (the
    compiled path since it takes hyperboloid rows) answers as its batch too."""
    X, Q = data
    for config in (dict(algorithm="graph", exact=True), dict(algorithm="brute")):
        index = hypann.HyperbolicIndex(random_state=0, verbose=False, **config).build(X)
        assert index.algorithm_.search_coordinates(Q[:1], 1.0, 3) is None
        batch = index.search(Q, 3)
        _same(index.search(Q[2:3], 3), batch, 2)
    index = hypann.HyperbolicIndex(algorithm="hkdtree", verbose=False).build(X)
    batch = index.search(Q, 4)
    _same(index.search(Q[2:3].tolist(), 4), batch, 2)
    with pytest.raises(TypeError, match="k must be an integer"):
        index.search(Q[2:3], np.bool_(True))
    two = index.search(Q[2:4], 4)
    np.testing.assert_array_equal(two.indices, batch.indices[2:4])
    _same(index.search(Q[2:3], 4, budget=10 ** 6), batch, 2)
    index.add(Q[:1])
    assert index.search(Q[:1], 1).indices[0, 0] == len(X)  # the added point itself
    lorentz = hypann.HyperbolicIndex(algorithm="hkdtree", model="lorentz", verbose=False).build(
        hypann.geometry.poincare_to_lorentz(X))
    got = lorentz.search(hypann.geometry.poincare_to_lorentz(Q[2:3]), 4)
    np.testing.assert_array_equal(got.indices[0], batch.indices[2])


@settings(max_examples=80, deadline=None)
@given(
    st.floats(0.0, 37.0),
    st.sampled_from([1.0, 0.25, 3.7]),
    st.sampled_from([np.float64, np.float32]),
    st.sampled_from(["graph", "hkdtree"]),
    st.integers(1, 9),
    st.integers(0, 2**32 - 1),
)
def test_one_query_near_the_boundary_answers_as_the_checked_path(hyperbolic_norm, c, dtype, algorithm, k, seed):
    """From the origin to hyperbolic norm 37, any curvature and query dtype: the fast path's answer (or
    error) is the checked path's, bit for bit; the checked path is a batch of the query twice."""
    index = _boundary_index(algorithm, c)
    rng = np.random.default_rng(seed)
    u = rng.normal(size=5)
    u /= np.linalg.norm(u)
    q = (np.tanh(hyperbolic_norm / 2.0) * u / np.sqrt(c)).astype(dtype)[None, :]
    try:
        checked = index.search(np.repeat(q, 2, axis=0), k)
    except ValueError as exc:  # rounded onto the boundary: the one-query call reports the same
        with pytest.raises(ValueError, match=str(exc)[:40].replace("(", r"\(").replace("[", r"\[")):
            index.search(q, k)
        return
    _same(index.search(q, k), checked, 0)


_BOUNDARY_INDEXES = {}


def _boundary_index(algorithm, c):
    """An index over points from the origin to 1 - |x|^2 ~ 1e-12 (built once per algorithm and curvature)."""
    key = (algorithm, c)
    if key not in _BOUNDARY_INDEXES:
        X = ball_points(np.random.default_rng(8), 800, 5, min_conformal=1e-12)
        _BOUNDARY_INDEXES[key] = hypann.HyperbolicIndex(algorithm=algorithm, c=c, random_state=0,
                                                         verbose=False).build(X / np.sqrt(c))
    return _BOUNDARY_INDEXES[key]


def test_a_graph_row_short_of_k_points_is_completed_by_the_checked_path():
    """A graph whose search list cannot reach k points: the one-query call gives the batch's full row."""
    rng = np.random.default_rng(2)
    X = ball_points(rng, 40, 3)
    index = hypann.HyperbolicIndex(algorithm="graph", ef=1, n_neighbors=1, max_degree=1, random_state=0,
                                   verbose=False).build(X)
    found = index.algorithm_.search_coordinates(X[:1], 1.0, 40)
    assert found is not None and (found[0] < 0).any()  # the compiled search came back short
    batch = index.search(X[:3], 40)
    assert (batch.indices >= 0).all()
    _same(index.search(X[:1], 40), batch, 0)


def test_one_query_settings_errors_are_the_checked_paths():
    index = hypann.HyperbolicIndex(algorithm="graph", random_state=0, verbose=False).build(
        np.random.default_rng(0).uniform(-0.3, 0.3, (60, 3)))
    q = np.array([[0.1, 0.0, 0.2]])
    with pytest.raises(ValueError, match="ef must be"):
        index.search(q, 2, ef=0)
    with pytest.raises(ValueError, match="nprobe"):
        index.search(q, 2, nprobe=3)
    with pytest.raises(ValueError, match=r"k must be"):
        index.search(q, 61)
    with pytest.raises(ValueError, match=r"Q contains NaN or inf"):  # the query's problem first, as in a batch
        index.search(np.array([[0.1, np.nan, 0.2]]), 2, ef=0)
    with pytest.warns(DeprecationWarning, match="L is deprecated"):
        one = index.search(q, 2, L=32)
    _same(one, index.search(np.repeat(q, 2, axis=0), 2, ef=32), 0)


def test_one_query_settings_checked_once_are_still_checked_by_type_and_alias():
    """The one-query path keeps the checked form of each setting it met: a value equal to a kept one
    but of another type (``True == 1``) is still checked, an alias still warns on every call, and an
    unhashable value takes the checked path."""
    index = hypann.HyperbolicIndex(algorithm="graph", random_state=0, verbose=False).build(
        np.random.default_rng(0).uniform(-0.3, 0.3, (60, 3)))
    q = np.array([[0.1, 0.0, 0.2]])
    for _ in range(2):
        _same(index.search(q, 2, ef=1), index.search(np.repeat(q, 2, axis=0), 2, ef=1), 0)
        with pytest.raises(TypeError, match="ef must be a positive integer"):
            index.search(q, 2, ef=True)
        with pytest.raises(TypeError, match="ef must be a positive integer"):
            index.search(q, 2, ef=1.0)
        with pytest.warns(DeprecationWarning, match="L is deprecated"):
            index.search(q, 2, L=32)
        with pytest.raises(TypeError, match="ef must be a positive integer"):
            index.search(q, 2, ef=[1])
    assert len(index._checked_query_params) == 1  # ef=1 only


def test_the_structures_one_query_calls_check_their_arguments(data):
    """``search_coordinates`` of the kd-tree and the graph, called directly: a wrong shape, dtype, ``k``
    or ``ef`` is an error before any kernel runs, a row outside the ball gives ``None``."""
    from hypann.graph import HyperbolicGraphIndex

    X, Q = data
    conformal = _kernels.conformal_factor(X)
    tree = HyperbolicKDTree(leaf_size=8).build(X.copy(), conformal.copy())
    graph = HyperbolicGraphIndex(random_state=0).build(X.copy(), conformal.copy())
    for structure in (tree, graph):
        found = structure.search_coordinates(Q[:1], 1.0, 4)
        assert found.ids.shape == (1, 4) and (found.ids >= 0).all()
        for bad in (Q[:2], Q[:1, :3], Q[0], Q[:1].astype(np.float16), Q[:1].tolist(), np.zeros((1, 7))):
            with pytest.raises(ValueError, match=r"X must be a float64 or float32 numpy array of shape \(1, 5\)"):
                structure.search_coordinates(bad, 1.0, 4)
        with pytest.raises(ValueError, match="k must be"):
            structure.search_coordinates(Q[:1], 1.0, 0)
        with pytest.raises(ValueError, match="curvature c must be"):
            structure.search_coordinates(Q[:1], -1.0, 4)
        assert structure.search_coordinates(np.full((1, 5), 0.5), 1.0, 4) is None
        assert structure.search_coordinates(np.array([[0.1, np.nan, 0, 0, 0]]), 1.0, 4) is None
    with pytest.raises(ValueError, match="ef must be"):
        graph.search_coordinates(Q[:1], 1.0, 4, ef=0)


# --- hyperboloid rows: the same one-query path -------------------------------------------------

def test_lorentz_kernels_agree_with_the_numpy_formulas():
    """``lorentz_points`` against :mod:`hypann.geometry.models` (numpy, another summation order): a few ulps."""
    from hypann.geometry.models import lorentz_conformal_factor, lorentz_to_poincare, poincare_to_lorentz

    rng = np.random.default_rng(5)
    for c in (1.0, 0.3, 4.0):
        X = poincare_to_lorentz(ball_points(rng, 300, 6, min_conformal=1e-14) / np.sqrt(c), c=c)
        points, conformal, residual, _ = _kernels.lorentz_points(X, c)
        np.testing.assert_allclose(conformal, lorentz_conformal_factor(X, c=c), rtol=4e-15, atol=0)  # a few ulps
        np.testing.assert_allclose(points, np.sqrt(c) * lorentz_to_poincare(X, c=c), rtol=1e-14, atol=1e-300)
        assert all(_kernels.on_upper_sheet(x0, r) for x0, r in zip(X[:, 0], residual))
        few = _kernels.few_lorentz_points(X[:3], c)
        np.testing.assert_array_equal(few[0], points[:3])
        np.testing.assert_array_equal(few[1], conformal[:3])
        assert few[2] > 0
    bad = np.array([[np.nan, 0.0, 0.0], [-1.0, 0.0, 0.0], [1.0, 0.5, 0.0], [np.inf, 0.0, 0.0], [2.0, np.inf, 1.0]])
    residual = _kernels.lorentz_points(bad, 1.0)[2]
    assert not any(_kernels.on_upper_sheet(row[0], r) for row, r in zip(bad, residual))
    for row in bad:
        assert _kernels.few_lorentz_points(row[None, :], 1.0)[2] == -np.inf


LORENTZ_CONFIGS = [
    dict(algorithm="graph"),
    dict(algorithm="hkdtree"),
    dict(algorithm="auto", scan_fraction=1.0),
    dict(algorithm="graph", storage="float32", c=0.5),
    dict(algorithm="hkdtree", storage="float32", c=2.0),
]


@pytest.mark.parametrize("config", LORENTZ_CONFIGS, ids=lambda c: ",".join(f"{k}={v}" for k, v in c.items()))
def test_one_lorentz_query_takes_the_compiled_path_and_answers_as_the_batch(data, config):
    from hypann.geometry.models import poincare_to_lorentz

    X, Q = data
    c = config.get("c", 1.0)
    index = hypann.HyperbolicIndex(model="lorentz", random_state=0, verbose=False, **config).build(
        poincare_to_lorentz(X / np.sqrt(c), c=c))
    LQ = poincare_to_lorentz(Q / np.sqrt(c), c=c)
    LQ32 = poincare_to_lorentz(0.99 * Q / np.sqrt(c), c=c).astype(np.float32)
    batches = {(k, name): index.search(rows, k) for k in (1, 6) for name, rows in (("f64", LQ), ("f32", LQ32))}
    _without_checked_path(index)
    for i in range(len(Q)):
        for (k, name), batch in batches.items():
            rows = LQ if name == "f64" else LQ32
            _same(index.search(rows[i:i + 1], k), batch, i)


@pytest.mark.parametrize("row, message", [
    ([1.0, 0.5, 0.0, 0.0], r"Q row 0 is not on the upper sheet of the hyperboloid"),
    ([-1.0, 0.0, 0.0, 0.0], r"Q row 0 is not on the upper sheet of the hyperboloid"),
    ([np.nan, 0.0, 0.0, 0.0], r"Q contains NaN or inf \(first at row 0"),
    ([1.0, np.inf, 0.0, 0.0], r"Q contains NaN or inf \(first at row 0"),
])
def test_one_bad_lorentz_query_gets_the_full_checks_error(row, message):
    from hypann.geometry.models import poincare_to_lorentz

    X = poincare_to_lorentz(np.random.default_rng(0).uniform(-0.3, 0.3, (50, 3)))
    for algorithm in ("hkdtree", "graph"):
        index = hypann.HyperbolicIndex(algorithm=algorithm, model="lorentz", verbose=False).build(X)
        with pytest.raises(ValueError, match=message):
            index.search(np.array([row]), 1)
        assert index.algorithm_.search_coordinates(np.array([row]), 1.0, 1, model="lorentz") is None
        with pytest.raises(ValueError, match=r"Q has 2 dimensions \(Poincare\), but the index was built with 3"):
            index.search(np.array([[1.0, 0.1, 0.2]]), 1)


def test_the_structures_one_query_calls_check_hyperboloid_rows(data):
    from hypann.geometry.models import poincare_to_lorentz
    from hypann.graph import HyperbolicGraphIndex

    X, Q = data
    conformal = _kernels.conformal_factor(X)
    tree = HyperbolicKDTree(leaf_size=8).build(X.copy(), conformal.copy())
    graph = HyperbolicGraphIndex(random_state=0).build(X.copy(), conformal.copy())
    LQ = poincare_to_lorentz(Q[:1])
    points, conformal_q = _kernels.lorentz_points(LQ, 1.0)[:2]  # the input check's point and factor
    for structure, batch in ((tree, tree.search_exact), (graph, graph.search)):
        found = structure.search_coordinates(LQ, 1.0, 4, model="lorentz")
        same = batch(points, conformal_q, 4)
        np.testing.assert_array_equal(found.ids, same.ids)
        np.testing.assert_array_equal(found.deltas, same.deltas)
        with pytest.raises(ValueError, match=r"X must be a float64 or float32 numpy array of shape \(1, 6\) for "
                                             r"model='lorentz', got ndarray of shape \(1, 5\)"):
            structure.search_coordinates(Q[:1], 1.0, 4, model="lorentz")
        with pytest.raises(ValueError, match="model must be one of"):
            structure.search_coordinates(LQ, 1.0, 4, model="klein")
