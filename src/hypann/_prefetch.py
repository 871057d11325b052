"""Cache prefetch hints for numba kernels (LLVM's ``llvm.prefetch``, ``prefetcht0`` on x86).

A graph walk reads the rows of points it has not seen yet, in an order the
hardware cannot guess: every row is a cache miss on data larger than the
cache. Announcing the rows of an entry's unvisited neighbours before
evaluating them lets those misses overlap (hnswlib does the same with
``_mm_prefetch``). A prefetch never faults and changes no value: an address
out of an array's range is harmless, and results are the same bit for bit.

:func:`prefetch_row` asks for every cache line of one row of a 2-D array;
:func:`prefetch_item` for the line holding one entry of a 1-D array.
"""

from __future__ import annotations

import numba as nb
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["prefetch_item", "prefetch_row", "prefetches_rows", "CACHE_LINE", "PREFETCH_MIN_ROW_BYTES"]

#: Bytes per cache line (x86-64 and most ARM cores); a row is asked for one line at a time.
CACHE_LINE = 64
#: Rows from which the graph walk announces the rows of every unvisited neighbour of an entry it expands
#: (:func:`prefetches_rows`): all of them announced on 10-D float64 rows (80 B) lost the walk as much as they
#: gained, and made its batches 1.37-1.55x slower once numba's reference counts were gone
#: (``docs/benchmarks.md``, "Cache prefetch hints in the graph walk"). Below it the walk announces one row
#: instead, the neighbour row of the next entry it will expand; the descent announces a node's child pivots at
#: every size.
PREFETCH_MIN_ROW_BYTES = 128


def _emit_prefetch(builder, ptr):
    """``llvm.prefetch(ptr, read, high locality, data cache)``, its name mangled by llvmlite's pointer type
    (``llvm.prefetch.p0i8`` with typed pointers, as LLVM 14 spells it; the LLVM 22 of llvmlite 0.50 accepts
    that name too: ``tests/test_prefetch.py`` finds the instruction). Only LLVM 22 was tried."""
    i32 = ir.IntType(32)
    i8p = ir.IntType(8).as_pointer()
    fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32]),
                                        "llvm.prefetch." + i8p.intrinsic_name)
    builder.call(fn, [builder.bitcast(ptr, i8p), i32(0), i32(3), i32(1)])


@intrinsic
def _prefetch_at(typingctx, arr, i, j):
    """Prefetch the line holding ``arr[i, j]`` of a 2-D array (``j`` ignored for a 1-D array, ``arr[i]``).
    No bounds check: the address is only announced, never read."""
    if not isinstance(arr, types.Array) or arr.ndim not in (1, 2):
        return None
    if not isinstance(i, types.Integer) or not isinstance(j, types.Integer):
        return None
    sig = types.void(arr, i, j)

    def codegen(context, builder, signature, args):
        aryty, ity, jty = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        idx = [context.cast(builder, args[1], ity, types.intp)]
        if aryty.ndim == 2:
            idx.append(context.cast(builder, args[2], jty, types.intp))
        _emit_prefetch(builder, cgutils.get_item_pointer(context, builder, aryty, ary, idx, wraparound=False))
        return context.get_dummy_value()

    return sig, codegen


@nb.njit(cache=True, inline="always")
def prefetches_rows(arr):
    """Whether a kernel announces rows of the 2-D ``arr`` before reading them: rows of at least
    :data:`PREFETCH_MIN_ROW_BYTES`."""
    return arr.shape[1] * arr.itemsize >= PREFETCH_MIN_ROW_BYTES


@nb.njit(cache=True, inline="always")
def prefetch_item(arr, i):
    """Announce a read of ``arr[i]`` (1-D)."""
    _prefetch_at(arr, i, 0)


@nb.njit(cache=True, inline="always")
def prefetch_row(arr, i):
    """Announce a read of row ``arr[i]`` of a 2-D array: one prefetch every :data:`CACHE_LINE` bytes of
    the row and one at its last entry (a row need not start at a line's start)."""
    step = max(1, CACHE_LINE // arr.itemsize)
    d = arr.shape[1]
    for j in range(0, d, step):
        _prefetch_at(arr, i, j)
    _prefetch_at(arr, i, d - 1)
