"""Borrowed arrays for numba kernels: ``borrowed(arr)`` is ``arr`` without a reference count.

numba gives every array value a share of its memory block: an atomic
increment when a variable or a view (such as the row ``points[u]``) takes it,
an atomic decrement when it dies. LLVM removes the pairs it can prove
balanced, but not in loops whose values pass through branches and helpers
inlined by numba, such as a graph walk that evaluates the rows of the
neighbours it has not seen. There the two atomic instructions were the
hottest of a profile of the graph search (``perf``, a scratch run), and
among the hottest of the kd-tree's; without them both search faster
(``docs/benchmarks.md``, "Search loops without reference counts"). The graph
build's row kernels (NN-descent's rows, the search graph's, the pruning's, the long edges') borrow
theirs too: from 64-D on, builds take 0.67-0.83 of their time without the counts ("The graph
build's row kernels without reference counts").

:func:`borrowed` returns the same array (data, shape, strides) with no memory
block (a ``NULL`` meminfo, which numba's increments and decrements skip).
Views, rows and slices of it are borrowed too. A borrowed array is valid as long as someone else holds the
original, so a kernel borrows **only its own arguments**, whose caller holds
them for the whole call, never an array it allocates (numba releases a
variable after its last use, which would free the data under the borrowed
view), and never lets a borrowed array leave it (return or store it).
"""

from __future__ import annotations

from numba.core import types
from numba.extending import intrinsic

__all__ = ["borrowed"]


@intrinsic
def borrowed(typingctx, arr):
    """``arr`` as a borrowed array of the same type (module docstring)."""
    if not isinstance(arr, types.Array):
        return None
    sig = arr(arr)

    def codegen(context, builder, signature, args):
        aryty = signature.args[0]
        src = context.make_array(aryty)(context, builder, args[0])
        out = context.make_array(aryty)(context, builder)
        context.populate_array(out, data=src.data, shape=src.shape, strides=src.strides, itemsize=src.itemsize,
                               meminfo=None)
        return out._getvalue()

    return sig, codegen
