"""The cache prefetch hints (hypann._prefetch): they compile for every array the kernels pass, change no
value, and reach the machine code."""

from __future__ import annotations

import platform

import numba as nb
import numpy as np
import pytest

from hypann._prefetch import prefetch_item, prefetch_row, prefetches_rows

pytestmark = pytest.mark.kernels


def _announce_then_sum(rows, items, ids):
    total = 0.0
    for t in range(ids.shape[0]):
        prefetch_row(rows, ids[t])
        prefetch_item(items, ids[t])
    for t in range(ids.shape[0]):
        total += rows[ids[t]].sum() + items[ids[t]]
    return total


_compiled = nb.njit(_announce_then_sum)  # not cached: its machine code is inspected below


@pytest.mark.parametrize("row_dtype", [np.float64, np.float32, np.int32, np.int64])
@pytest.mark.parametrize("dim", [1, 3, 10, 17, 100])
def test_values_unchanged(row_dtype, dim):
    rng = np.random.default_rng(dim)
    rows = rng.integers(-50, 50, size=(300, dim)).astype(row_dtype)
    items = rng.normal(size=300)
    ids = rng.integers(0, 300, size=40)
    want = sum(float(rows[i].sum()) + items[i] for i in ids)
    assert _compiled(rows, items, ids) == pytest.approx(want, rel=1e-12)


def test_ids_outside_the_arrays_do_not_fault():
    """A prefetch announces an address and never reads it: ids past the end (a damaged graph file opened
    without reading it) are harmless."""

    @nb.njit
    def announce(rows, items, ids):
        for t in range(ids.shape[0]):
            prefetch_row(rows, ids[t])
            prefetch_item(items, ids[t])
        return rows.shape[0]

    rows = np.zeros((10, 8))
    assert announce(rows, np.zeros(10), np.array([-5, 10, 1 << 40, -(1 << 40)], dtype=np.int64)) == 10


@pytest.mark.skipif(platform.machine().lower() not in ("x86_64", "amd64"), reason="x86 instruction names")
def test_the_hint_reaches_the_machine_code():
    rows = np.zeros((4, 100))
    _compiled(rows, np.zeros(4), np.arange(4))
    asm = "\n".join(_compiled.inspect_asm().values())
    assert "prefetcht0" in asm


@pytest.mark.parametrize(("dim", "dtype", "announced"), [(10, np.float64, False), (15, np.float64, False),
                                                         (16, np.float64, True), (100, np.float64, True),
                                                         (31, np.float32, False), (32, np.float32, True)])
def test_rows_are_announced_from_128_bytes(dim, dtype, announced):
    assert nb.njit(lambda a: prefetches_rows(a))(np.zeros((3, dim), dtype=dtype)) is announced
