"""Borrowed arrays (hypann._borrowed): the same data, shape and strides, and no memory block, also in their
views, so numba counts no references for them."""

from __future__ import annotations

import numba as nb
import numpy as np
import pytest
from numba.core import types
from numba.extending import intrinsic

from hypann._borrowed import borrowed

pytestmark = pytest.mark.kernels


@intrinsic
def _meminfo_address(typingctx, arr):
    """The address of an array's memory block (0: none), for these tests."""
    if not isinstance(arr, types.Array):
        return None

    def codegen(context, builder, signature, args):
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.ptrtoint(ary.meminfo, context.get_value_type(types.intp))

    return types.intp(arr), codegen


@nb.njit
def _blocks(a, i):
    """Memory block addresses of ``a``, of ``borrowed(a)``, of a row, a slice and a transpose of it."""
    b = borrowed(a)
    return (_meminfo_address(a), _meminfo_address(b), _meminfo_address(b[i]), _meminfo_address(b[1:]),
            _meminfo_address(b.T))


@nb.njit
def _describe(a):
    b = borrowed(a)
    return b.shape, b.strides, b.size, b.sum()


@nb.njit
def _fill_rows(a, ids, value):
    """Write ``value`` into rows ``ids`` of ``a`` through a borrowed view of it."""
    b = borrowed(a)
    for t in range(ids.shape[0]):
        row = b[ids[t]]
        row[:] = value


@nb.njit
def _branchy_row_sums(a, ids):
    """Row sums read through views in a loop with branches (the pattern of the graph walk)."""
    b = borrowed(a)
    total = 0.0
    for t in range(ids.shape[0]):
        row = b[ids[t]]
        if row[0] > 0.0:
            total += row.sum()
        elif ids[t] % 2:
            total -= row[row.shape[0] - 1]
    return total


def test_no_memory_block_in_a_borrowed_array_nor_in_its_views():
    a = np.arange(24.0).reshape(4, 6)
    own, *borrowed_blocks = _blocks(a, 2)
    assert own != 0
    assert borrowed_blocks == [0, 0, 0, 0]


@pytest.mark.parametrize("dtype", [np.float64, np.float32, np.int32, np.int64, np.bool_])
@pytest.mark.parametrize("make", [
    lambda x: x,  # C-contiguous
    lambda x: np.asfortranarray(x),
    lambda x: x[::2, 1::3],  # strided
    lambda x: x[1],  # 1-D row
    lambda x: x.reshape(2, 3, 20),  # 3-D
])
def test_same_data_shape_and_strides(dtype, make):
    a = make(np.arange(120).reshape(6, 20).astype(dtype))
    shape, strides, size, total = _describe(a)
    assert shape == a.shape and strides == a.strides and size == a.size
    assert total == a.sum()


def test_read_only_arrays_are_read():
    a = np.arange(12.0).reshape(3, 4)
    a.setflags(write=False)
    assert _describe(a)[3] == a.sum()


def test_writes_reach_the_original():
    a = np.zeros((5, 3))
    _fill_rows(a, np.array([1, 3]), 7.0)
    want = np.zeros((5, 3))
    want[[1, 3]] = 7.0
    np.testing.assert_array_equal(a, want)


def test_views_in_a_branchy_loop_read_the_same_values():
    rng = np.random.default_rng(0)
    a = rng.normal(size=(50, 7))
    ids = rng.integers(0, 50, size=400)
    want = 0.0
    for i in ids:
        if a[i, 0] > 0.0:
            want += a[i].sum()
        elif i % 2:
            want -= a[i, -1]
    assert _branchy_row_sums(a, ids) == pytest.approx(want, rel=1e-12)


def test_bounds_are_checked_on_borrowed_arrays_when_asked():
    checked = nb.njit(boundscheck=True)(lambda a, i: borrowed(a)[i, 0])
    a = np.ones((3, 2))
    assert checked(a, 2) == 1.0
    with pytest.raises(IndexError):
        checked(a, 3)
