"""A block of squared differences summed in 2-wide vectors (a numba intrinsic).

numba runs LLVM without its SLP vectorizer (``NUMBA_SLP_VECTORIZE`` is 0 by
default, and a library cannot change that process-wide setting for its users),
so independent scalar sums compile to scalar code. :func:`block_square_sum`
emits the vector operations directly. For the :data:`LANE_BLOCK` coordinates
``j .. j + 15`` it forms the pairs

    ``v_s = ((q_{j+2s} - x_{j+2s})^2, (q_{j+2s+1} - x_{j+2s+1})^2)``,  ``s = 0 .. 7``,

each difference and square in float64 (float32 coordinates are widened
first), adds them as a balanced tree ``((v_0 + v_1) + (v_2 + v_3)) + ((v_4 +
v_5) + (v_6 + v_7))`` and returns the sum of the two lanes: a fixed
summation tree of depth 4, without fused multiply-add or reassociation, so the
same inputs always give the same bits.

Two lanes, not four or eight: in a one-off timing on this project's machine the
4- and 8-wide forms made the scans slower when rows come from memory and most
are abandoned after their first block, while the 2-wide form was not; 2-wide
(SSE2 / NEON) operations are also available on every 64-bit x86 and Arm CPU.

Contiguous rows are read with one 2-wide load per array and step; rows with
other strides with two scalar loads. When numba checks bounds (``boundscheck``
or ``NUMBA_BOUNDSCHECK=1``) the first and the last index of the block are
checked, as indexed reads would be.
"""

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

#: coordinates one call of :func:`block_square_sum` adds
LANE_BLOCK = 16
#: depth of :func:`block_square_sum`'s summation tree (three vector levels and the two lanes' sum)
BLOCK_SUM_DEPTH = 4
_WIDTH = 2
_FLOATS = (types.float32, types.float64)


def _load_pair(context, builder, aryty, ary, first):
    """The coordinates ``first`` and ``first + 1`` of a 1-D array as a ``<2 x double>``."""
    element = context.get_data_type(aryty.dtype)
    wide = ir.VectorType(element, _WIDTH)
    ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [first])
    if aryty.layout in "CF":
        vec = builder.load(builder.bitcast(ptr, wide.as_pointer()), align=context.get_abi_sizeof(element))
    else:
        second = cgutils.get_item_pointer(context, builder, aryty, ary, [builder.add(first, first.type(1))])
        vec = ir.Constant(wide, ir.Undefined)
        for lane, lane_ptr in enumerate((ptr, second)):
            vec = builder.insert_element(vec, builder.load(lane_ptr), ir.IntType(32)(lane))
    if aryty.dtype == types.float32:
        vec = builder.fpext(vec, ir.VectorType(ir.DoubleType(), _WIDTH))
    return vec


def _is_float_vector(ty):
    return isinstance(ty, types.Array) and ty.ndim == 1 and ty.dtype in _FLOATS


@intrinsic
def block_square_sum(typingctx, q, x, j):
    """``sum_{i=j}^{j+15} (q_i - x_i)^2`` in the fixed tree of the module docstring (float64).

    ``q`` and ``x`` are 1-D float32 or float64 arrays, ``j`` an integer; the
    caller keeps ``0 <= j`` and ``j + LANE_BLOCK <= len(q), len(x)`` (checked
    only when numba checks bounds).
    """
    if not (_is_float_vector(q) and _is_float_vector(x) and isinstance(j, types.Integer)):
        return None
    sig = types.float64(q, x, j)

    def codegen(context, builder, signature, args):
        q_ty, x_ty, j_ty = signature.args
        first = context.cast(builder, args[2], j_ty, types.intp)
        arrays = [(ty, context.make_array(ty)(context, builder, value)) for ty, value in zip((q_ty, x_ty), args)]
        if context.enable_boundscheck:
            last = builder.add(first, first.type(LANE_BLOCK - 1))
            for ty, ary in arrays:
                for index in (first, last):
                    cgutils.get_item_pointer(context, builder, ty, ary, [index], boundscheck=True)
        level = []
        for step in range(LANE_BLOCK // _WIDTH):
            at = builder.add(first, first.type(_WIDTH * step))
            qv, xv = (_load_pair(context, builder, ty, ary, at) for ty, ary in arrays)
            diff = builder.fsub(qv, xv)
            level.append(builder.fmul(diff, diff))
        while len(level) > 1:
            level = [builder.fadd(level[i], level[i + 1]) for i in range(0, len(level), 2)]
        lanes = [builder.extract_element(level[0], ir.IntType(32)(lane)) for lane in range(_WIDTH)]
        return builder.fadd(lanes[0], lanes[1])

    return sig, codegen
