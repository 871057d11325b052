"""One-byte codes screening NN-descent's candidates: the bound holds, and a screened round makes the same rows.

:func:`hypann.geometry.screen_codes.screen_rejects` may only leave out a candidate whose computed ``delta``
(the keys of NN-descent's batched rounds, :func:`~hypann.geometry._kernels.deltas_to_rows` with split
sums) is ``>=`` the row's worst key; :func:`hypann.graph.knn_graph._refine` with codes must then make the
rows, flags and insertion counts it makes without them.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from hypann._runtime import read_only
from hypann.geometry._kernels import conformal_factor, delta_row, deltas_to_rows
from hypann.geometry.screen_codes import SCREEN_MAX_DIM, screen_codes, screen_margin, screen_rejects
from hypann.graph import knn_graph
from tests.conftest import ball_points
from tests.test_nn_descent_sums import _candidate_lists, _rows

pytestmark = pytest.mark.kernels  # also run under NUMBA_BOUNDSCHECK=1 (make test)


def _points(rng, n, d, kind, storage):
    """``n`` points of one adversarial kind, stored as ``storage``, and their float64 conformal factors."""
    if kind == "boundary":
        pts = ball_points(rng, n, d, min_conformal=1e-14)
    elif kind == "clustered":  # tight clusters near the boundary: neighbours far closer than the codes' step
        centres = ball_points(rng, 4, d, min_conformal=1e-6)
        pts = centres[rng.integers(0, 4, n)] * (1 - 1e-7) + rng.normal(scale=1e-7, size=(n, d))
    elif kind == "tiny":  # coordinates far below float32's normal range, and the origin
        pts = rng.normal(size=(n, d)) * 10.0 ** rng.uniform(-45, -30, (n, 1))
        pts[0] = 0.0
    else:  # "spread": a coordinate or two dominate, the others are small
        pts = ball_points(rng, n, d, min_conformal=1e-3) * rng.uniform(0.01, 1, (1, d))
    # float32 storage rounds the coordinates and keeps the input's conformal factors (as the index does);
    # read-only views, as nn_descent hands them to its kernels (one compiled type)
    return read_only(np.ascontiguousarray(pts.astype(storage))), read_only(conformal_factor(pts))


def test_codes_bound_each_point():
    rng = np.random.default_rng(0)
    for kind in ("boundary", "clustered", "tiny", "spread"):
        for storage in (np.float64, np.float32):
            pts, conf = _points(rng, 200, 40, kind, storage)
            codes, info = screen_codes(pts, conf)
            assert codes.dtype == np.int8 and codes.shape == pts.shape and info.shape == (200, 4)
            coded = info[:, :1] * codes.astype(np.float64)
            err = np.linalg.norm(pts.astype(np.float64) - coded, axis=1)
            assert np.all(err <= info[:, 1]) and np.all(info[:, 1] < 1.0)
            assert np.all(np.abs(codes) <= 127)
            np.testing.assert_array_equal(info[:, 2], conf)
    with pytest.raises(ValueError, match="at most"):
        screen_codes(np.zeros((1, SCREEN_MAX_DIM + 1)), np.ones(1))


@settings(max_examples=40, deadline=None)
@given(seed=st.integers(0, 2**32 - 1), d=st.sampled_from([16, 17, 40, 100, 257]),
       kind=st.sampled_from(["boundary", "clustered", "tiny", "spread"]), single=st.booleans())
def test_the_screen_rejects_only_what_the_row_would(seed, d, kind, single):
    """For every pair and a worst key just above, at and below its computed ``delta`` (one float32 step
    apart), a rejection means the key is ``>=`` the worst: the row would have rejected it too."""
    rng = np.random.default_rng(seed)
    storage = np.float32 if single else np.float64
    m = 24
    pts, conf = _points(rng, m, d, kind, storage)
    codes, info = screen_codes(pts, conf)
    eta = screen_margin(d)
    ids = np.arange(m, dtype=np.int32)
    keys = np.empty(m)
    for p in range(m):
        qf = pts[p].astype(np.float32)
        deltas_to_rows(pts[p], conf[p], pts, conf, ids, True, keys)
        for v in range(m):
            if v == p:
                continue
            key = np.float32(min(keys[v], float(np.finfo(np.float32).max)))
            exact = delta_row(pts[p].astype(np.float64), conf[p], pts[v].astype(np.float64), conf[v])
            for worst in (key, np.nextafter(key, np.float32(np.inf)), np.nextafter(key, np.float32(0)),
                          np.float32(exact), np.float32(0.5) * key):
                if screen_rejects(qf, conf[p], codes, info, v, np.float64(worst), eta):
                    assert key >= worst
                    assert exact >= worst * (1 - 1e-4)


def test_the_screen_rejects_far_candidates():
    """Not a screen that never rejects: far apart points, a worst key a tenth of their delta."""
    rng = np.random.default_rng(1)
    pts, conf = _points(rng, 100, 100, "spread", np.float32)
    codes, info = screen_codes(pts, conf)
    keys = np.empty(100)
    deltas_to_rows(pts[0], conf[0], pts, conf, np.arange(100, dtype=np.int32), True, keys)
    rejected = sum(screen_rejects(pts[0], conf[0], codes, info, v, 0.1 * keys[v], screen_margin(100))
                   for v in range(1, 100))
    assert rejected >= 90


def _true_rows(pts, conf, K):
    """Each point's ``K`` nearest by ``delta`` (from Gram products: a starting state, not exact) as NN-descent's
    float32-keyed rows, every entry old."""
    x = pts.astype(np.float64)
    norms = (x * x).sum(axis=1)
    sq = np.maximum(norms[:, None] + norms[None, :] - 2.0 * (x @ x.T), 0.0) / np.outer(conf, conf)
    np.fill_diagonal(sq, np.inf)
    ids = np.argsort(sq, axis=1, kind="stable")[:, :K].astype(np.int32)
    return (np.take_along_axis(sq, ids, axis=1).astype(np.float32), ids, np.zeros(ids.shape, dtype=np.bool_))


@pytest.mark.parametrize("storage", [np.float64, np.float32])
@pytest.mark.parametrize("d,kind", [(16, "boundary"), (40, "clustered"), (100, "spread"), (100, "tiny")])
def test_a_screened_round_makes_the_same_rows(storage, d, kind):
    """Whole rounds over several chunks, with the codes (screening every window, or as the library decides)
    and without them: the same rows, flags and insertions, from random rows and from rows of each point's
    nearest points (where the screen leaves out the most)."""
    rng = np.random.default_rng(d)
    n, K, C = 2 * knn_graph._CHUNK + 100, 10, 8
    pts, conf = _points(rng, n, d, kind, storage)
    new_i, old_i = _candidate_lists(rng, n, C), _candidate_lists(rng, n, C)
    visit = rng.permutation(n).astype(np.int32)
    codes, info = screen_codes(pts, conf)
    none = (np.empty((0, d), dtype=np.int8), np.empty((0, 4)))
    changes = []
    for start in (_rows(rng, pts.astype(np.float64), conf, K), _true_rows(pts, conf, K)):
        results = []
        for (c, i), kept in ((none, knn_graph.SCREEN_KEPT), ((codes, info), 1.0),
                             ((codes, info), knn_graph.SCREEN_KEPT)):
            row_d, row_i, row_f = (a.copy() for a in start)
            changed = knn_graph._refine(pts, conf, new_i, old_i, row_d, row_i, row_f, visit,
                                        knn_graph._thread_marks(n, np.int32), c, i, kept)
            results.append((changed, row_d, row_i, row_f))
        for got in results[1:]:
            assert got[0] == results[0][0]
            for a, b in zip(results[0][1:], got[1:]):
                np.testing.assert_array_equal(a, b)
        changes.append(results[0][0])
    assert changes[0] > 0  # the random rows improve: the screen had rows to keep unchanged


@pytest.mark.parametrize("storage", [np.float64, np.float32])
def test_the_screened_row_leaves_out_most_candidates_of_a_near_final_row(storage):
    """One point's pull step with codes: the same row as without, and on spread data with its true nearest
    in the row, most candidates are screened out (``kept`` counts them)."""
    rng = np.random.default_rng(5)
    n, K, C, d = 400, 10, 8, 100
    pts, conf = _points(rng, n, d, "spread", storage)
    new_i, old_i = _candidate_lists(rng, n, C), _candidate_lists(rng, n, C)
    codes, info = screen_codes(pts, conf)
    want = tuple(a.copy() for a in _true_rows(pts, conf, K))
    got = tuple(a.copy() for a in want)
    cand = np.empty(3 * C * C, dtype=np.int32)
    cand_d = np.empty(3 * C * C)
    kept = np.zeros(2, dtype=np.int64)
    seen = np.zeros(n, dtype=np.int32)
    seen2 = np.zeros(n, dtype=np.int32)
    for p in range(n):
        row = np.int32(p)  # the row number's type as _refine passes it
        a = knn_graph._refine_row_screened(row, pts, conf, new_i, old_i, got[0][p], got[1][p], got[2][p], seen, p + 1,
                                           cand, cand_d, codes, info, screen_margin(d),
                                           np.empty(d, dtype=np.float32), kept)
        b = knn_graph._refine_row_batched(row, pts, conf, new_i, old_i, want[0][p], want[1][p], want[2][p], seen2,
                                          p + 1, cand, cand_d)
        assert a == b
    for x, y in zip(got, want):
        np.testing.assert_array_equal(x, y)
    assert 0 < kept[1] and kept[0] < 0.5 * kept[1]
