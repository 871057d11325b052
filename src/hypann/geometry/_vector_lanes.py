"""Sums of squared differences in 2-wide (and 4- and 8-wide) vectors (numba intrinsics).

numba runs LLVM without its SLP vectorizer (``NUMBA_SLP_VECTORIZE`` is 0 by
default, and a library cannot change that process-wide setting for its users),
so independent scalar sums compile to scalar code. The intrinsics here emit
the vector operations directly, each difference and square in float64 (float32
coordinates are widened first; :func:`narrow_square_sums` alone stays in
float32), without fused multiply-add or reassociation:

* :func:`block_square_sum`, one row: for the :data:`LANE_BLOCK` coordinates
  ``j .. j + 15`` it forms the pairs

      ``v_s = ((q_{j+2s} - x_{j+2s})^2, (q_{j+2s+1} - x_{j+2s+1})^2)``,  ``s = 0 .. 7``,

  adds them as a balanced tree ``((v_0 + v_1) + (v_2 + v_3)) + ((v_4 + v_5) +
  (v_6 + v_7))`` and returns the sum of the two lanes: a fixed summation tree
  of depth :data:`BLOCK_SUM_DEPTH`, so the same inputs always give the same bits
  (the screen of a scan, whose bound counts that depth);
* :func:`add_row_squares4`, four rows: each row's sum runs coordinate after
  coordinate, as the scalar loop does, so each lane has that loop's bits
  (exact ``delta`` values of four rows at once);
* :func:`add_row_squares8`, eight rows as two 4-wide vectors, each lane again
  its row's sum in order (the exact deltas of the graph's search rows and the
  partition trees' keys, eight rows at a time);
* :func:`split_square_sums`, any number of rows, each split over four lanes of
  its own 4-wide vector (coordinate ``i`` in lane ``i mod 4``), read with one
  load per four coordinates: not the scalar loop's order, but fixed by the
  inputs (NN-descent's candidates and seeding trees from 16-D on);
* :func:`split_square_block_sums`, the same lanes over coordinates ``start ..
  stop - 1`` only: one block of a sum tested between blocks (the graph walk's
  deltas from 16-D on);
* :func:`narrow_square_sums`, float32 rows only, each split over eight lanes of
  its own 8-wide float32 vector and summed in float32 (no widening): NN-descent's
  candidates from 16-D on when the points are stored in float32.

Two lanes in the first two, not four or eight: in a one-off timing on this
project's machine the 4- and 8-wide forms of :func:`block_square_sum` made the
scans slower when rows come from memory and most are abandoned after their
first block, while the 2-wide form was not; 2-wide (SSE2 / NEON) operations are
also available on every 64-bit x86 and Arm CPU.

Contiguous rows are read by :func:`block_square_sum` with one 2-wide load per
array and step, other strides with two scalar loads. When numba checks bounds
(``boundscheck`` or ``NUMBA_BOUNDSCHECK=1``) the indices are checked, as
indexed reads would be: the first and the last of a block, every index of
:func:`add_row_squares4`, the first and the last of each step of
:func:`split_square_sums` and :func:`split_square_block_sums` (which read
contiguous rows with one 4-wide load per step, other strides element by element),
of each 8-wide step of :func:`narrow_square_sums` and every index of its last
``d % 8`` terms.
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


def _load_element(context, builder, aryty, ary, index):
    """``a[index]`` of a 1-D array in its own dtype (bounds checked when numba checks them)."""
    return builder.load(cgutils.get_item_pointer(context, builder, aryty, ary, [index],
                                                 boundscheck=context.enable_boundscheck))


def _load_double(context, builder, aryty, ary, index):
    """``float64(a[index])`` of a 1-D array (bounds checked when numba checks them)."""
    value = _load_element(context, builder, aryty, ary, index)
    return builder.fpext(value, ir.DoubleType()) if aryty.dtype == types.float32 else value


def _gather(context, builder, arrays, index):
    """``(float64(a[index]) for a in arrays)`` of 1-D arrays as a ``<len(arrays) x double>``.

    Arrays that are all float32 are read as a ``<len x float>`` widened at
    once; any other mix element by element.
    """
    all_float32 = all(ty.dtype == types.float32 for ty, _ in arrays)
    load = _load_element if all_float32 else _load_double
    vec = ir.Constant(ir.VectorType(ir.FloatType() if all_float32 else ir.DoubleType(), len(arrays)), ir.Undefined)
    for lane, (ty, ary) in enumerate(arrays):
        vec = builder.insert_element(vec, load(context, builder, ty, ary, index), ir.IntType(32)(lane))
    return builder.fpext(vec, ir.VectorType(ir.DoubleType(), len(arrays))) if all_float32 else vec


def _row_squares(context, builder, q_array, arrays, begin, end, initial, width):
    """The codegen of :func:`add_row_squares4` and :func:`add_row_squares8`: ``initial[r] + sum_{i=begin}^{end-1}
    (q_i - x_r[i])^2`` for each row array ``x_r`` of ``arrays``, the rows in groups of ``width`` lanes of one
    vector, each lane's sum term after term. Returns the float64 sums (a list, in row order)."""
    double = ir.VectorType(ir.DoubleType(), width)
    lanes = [ir.IntType(32)(lane) for lane in range(width)]
    groups = [arrays[g:g + width] for g in range(0, len(arrays), width)]
    accumulators = []
    for g in range(len(groups)):
        vec = ir.Constant(double, ir.Undefined)
        for lane in range(width):
            vec = builder.insert_element(vec, initial[g * width + lane], lanes[lane])
        accumulators.append(cgutils.alloca_once_value(builder, vec))
    with cgutils.for_range(builder, end, start=begin) as loop:
        qi = _load_double(context, builder, *q_array, loop.index)
        splat = ir.Constant(double, ir.Undefined)
        for lane in lanes:
            splat = builder.insert_element(splat, qi, lane)
        for group, acc in zip(groups, accumulators):
            diff = builder.fsub(splat, _gather(context, builder, group, loop.index))
            builder.store(builder.fadd(builder.load(acc), builder.fmul(diff, diff)), acc)
    out = []
    for acc in accumulators:
        vec = builder.load(acc)
        out.extend(builder.extract_element(vec, lane) for lane in lanes)
    return out


def _load_run(context, builder, aryty, ary, first, width, widen=True):
    """``float64(a[first]), ..., float64(a[first + width - 1])`` of a 1-D array as a ``<width x double>``: one
    load when the array is contiguous, else one per element. When numba checks bounds, the first and the
    last index are checked. With ``widen=False`` the values keep the array's type."""
    last = builder.add(first, first.type(width - 1))
    if context.enable_boundscheck:
        for index in (first, last):
            cgutils.get_item_pointer(context, builder, aryty, ary, [index], boundscheck=True)
    element = context.get_data_type(aryty.dtype)
    wide = ir.VectorType(element, width)
    if aryty.layout in "CF":
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [first])
        vec = builder.load(builder.bitcast(ptr, wide.as_pointer()), align=context.get_abi_sizeof(element))
    else:
        vec = ir.Constant(wide, ir.Undefined)
        for lane in range(width):
            at = builder.add(first, first.type(lane))
            value = builder.load(cgutils.get_item_pointer(context, builder, aryty, ary, [at]))
            vec = builder.insert_element(vec, value, ir.IntType(32)(lane))
    if widen and aryty.dtype == types.float32:
        vec = builder.fpext(vec, ir.VectorType(ir.DoubleType(), width))
    return vec


#: lanes of each row's sum in :func:`split_square_sums`
ROW_LANES = 4


def _split_sums_codegen(context, builder, q_ty, rows_ty, q_value, rows_value, begin, end):
    """The codegen of :func:`split_square_sums` and :func:`split_square_block_sums`: for each row of the tuple
    ``rows_value``, the terms ``begin <= i < end`` (``end - begin`` a multiple of :data:`ROW_LANES`) in four
    lanes of a 4-wide vector, lane ``l`` adding the terms ``i = begin + l (mod 4)`` in order, and the row's
    sum ``(l_0 + l_1) + (l_2 + l_3)``. Returns the float64 sums (a list, in row order)."""
    q_array = context.make_array(q_ty)(context, builder, q_value)
    arrays = [context.make_array(rows_ty.dtype)(context, builder, value)
              for value in cgutils.unpack_tuple(builder, rows_value)]
    zero = ir.Constant(ir.VectorType(ir.DoubleType(), ROW_LANES), [0.0] * ROW_LANES)
    accumulators = [cgutils.alloca_once_value(builder, zero) for _ in arrays]
    steps = builder.sdiv(builder.sub(end, begin), end.type(ROW_LANES))
    with cgutils.for_range(builder, steps) as loop:
        first = builder.add(begin, builder.mul(loop.index, end.type(ROW_LANES)))
        qv = _load_run(context, builder, q_ty, q_array, first, ROW_LANES)
        for ary, acc in zip(arrays, accumulators):
            diff = builder.fsub(qv, _load_run(context, builder, rows_ty.dtype, ary, first, ROW_LANES))
            builder.store(builder.fadd(builder.load(acc), builder.fmul(diff, diff)), acc)
    out = []
    for acc in accumulators:
        vec = builder.load(acc)
        lanes = [builder.extract_element(vec, ir.IntType(32)(lane)) for lane in range(ROW_LANES)]
        out.append(builder.fadd(builder.fadd(lanes[0], lanes[1]), builder.fadd(lanes[2], lanes[3])))
    return out


def _split_sums_args(q, rows, *bounds):
    """Whether :func:`split_square_sums`' or :func:`split_square_block_sums`' arguments have their types."""
    return (_is_float_vector(q) and isinstance(rows, types.UniTuple) and _is_float_vector(rows.dtype)
            and all(isinstance(bound, types.Integer) for bound in bounds))


@intrinsic
def split_square_sums(typingctx, q, rows, stop):
    """``sum_{i < stop} (q_i - x_r[i])^2`` of each row ``x_r`` of the tuple ``rows`` (1-D arrays of one type),
    each split over four lanes: lane ``l`` adds the terms ``i = l (mod 4)`` in order, and the row's sum
    is ``(l_0 + l_1) + (l_2 + l_3)``. The caller keeps ``stop`` a multiple of :data:`ROW_LANES`.

    One row's four lanes are one 4-wide vector, which adds four consecutive coordinates with one load
    from each array, and the rows' vectors are independent chains that run side by side. A row's sum
    is not one chain of additions in coordinate order (as in :func:`add_row_squares8`), so it differs
    from :func:`~hypann.geometry._kernels.sq_dist_row`'s in the last bits, but it is fixed by the
    inputs (the same operations per lane on any CPU; without 4-wide vectors LLVM splits them in two).
    For NN-descent's rounds, whose keys are float32 anyway, and the partition trees from 16-D on,
    whose descents sum the same way.
    """
    if not _split_sums_args(q, rows, stop):
        return None
    sig = types.UniTuple(types.float64, rows.count)(q, rows, stop)

    def codegen(context, builder, signature, args):
        q_ty, rows_ty, stop_ty = signature.args
        end = context.cast(builder, args[2], stop_ty, types.intp)
        out = _split_sums_codegen(context, builder, q_ty, rows_ty, args[0], args[1], end.type(0), end)
        return context.make_tuple(builder, signature.return_type, out)

    return sig, codegen


@intrinsic
def split_square_block_sums(typingctx, q, rows, start, stop):
    """:func:`split_square_sums` of the terms ``start <= i < stop`` only (``stop - start`` a multiple of
    :data:`ROW_LANES`; lane ``l`` adds the terms ``i = start + l (mod 4)``): one block of a sum that is
    tested between blocks (:func:`~hypann.geometry._kernels.delta4_split_below`)."""
    if not _split_sums_args(q, rows, start, stop):
        return None
    sig = types.UniTuple(types.float64, rows.count)(q, rows, start, stop)

    def codegen(context, builder, signature, args):
        q_ty, rows_ty, start_ty, stop_ty = signature.args
        begin = context.cast(builder, args[2], start_ty, types.intp)
        end = context.cast(builder, args[3], stop_ty, types.intp)
        out = _split_sums_codegen(context, builder, q_ty, rows_ty, args[0], args[1], begin, end)
        return context.make_tuple(builder, signature.return_type, out)

    return sig, codegen


@intrinsic
def add_row_squares4(typingctx, q, x0, x1, x2, x3, start, stop, s0, s1, s2, s3):
    """``s_r + sum_{i=start}^{stop-1} (q_i - x_r[i])^2`` for the four rows ``r = 0..3``, each sum in order.

    Row ``r``'s sum adds its terms one after the other, exactly as the loop
    ``for i in range(start, stop): s_r += (float64(q[i]) - float64(x_r[i]))**2``
    does: the same operations in the same order, hence the same bits. The
    four sums run as two 2-wide vectors (rows 0 and 1, rows 2 and 3), which
    halves the instructions of four scalar chains.
    """
    rows = (x0, x1, x2, x3)
    if not (_is_float_vector(q) and all(_is_float_vector(x) for x in rows)):
        return None
    if not (isinstance(start, types.Integer) and isinstance(stop, types.Integer)):
        return None
    sums = (s0, s1, s2, s3)
    if not all(isinstance(s, types.Float) for s in sums):
        return None
    sig = types.UniTuple(types.float64, 4)(q, *rows, start, stop, *sums)

    def codegen(context, builder, signature, args):
        tys = signature.args
        arrays = [(ty, context.make_array(ty)(context, builder, value)) for ty, value in zip(tys[:5], args[:5])]
        begin = context.cast(builder, args[5], tys[5], types.intp)
        end = context.cast(builder, args[6], tys[6], types.intp)
        initial = [context.cast(builder, args[7 + r], tys[7 + r], types.float64) for r in range(4)]
        out = _row_squares(context, builder, arrays[0], arrays[1:], begin, end, initial, _WIDTH)
        return context.make_tuple(builder, signature.return_type, out)

    return sig, codegen


#: width of the vectors of :func:`add_row_squares8`
_WIDTH8 = 4


@intrinsic
def add_row_squares8(typingctx, q, rows, start, stop, sums):
    """:func:`add_row_squares4` of eight rows (a tuple of eight 1-D arrays of one type, and of eight sums).

    Each row's sum adds its terms one after the other, as the scalar loop
    does (the same bits); the eight sums run as two 4-wide vectors. With eight
    rows twice as many sums share each wait on a chain of additions as in
    :func:`add_row_squares4`. For the exact deltas of the graph build (its
    search rows, the initial rows below 16-D) and the partition trees' keys
    below 16-D; NN-descent's candidates and the trees from 16-D on use
    :func:`split_square_sums`
    (docs/benchmarks.md).
    On a CPU without 4-wide vectors LLVM splits each into two 2-wide ones (the
    same operations per lane, so the same bits).
    """
    if not (_is_float_vector(q) and isinstance(rows, types.UniTuple) and rows.count == 8
            and _is_float_vector(rows.dtype)):
        return None
    if not (isinstance(start, types.Integer) and isinstance(stop, types.Integer)):
        return None
    if not (isinstance(sums, types.UniTuple) and sums.count == 8 and isinstance(sums.dtype, types.Float)):
        return None
    sig = types.UniTuple(types.float64, 8)(q, rows, start, stop, sums)

    def codegen(context, builder, signature, args):
        q_ty, rows_ty, start_ty, stop_ty, sums_ty = signature.args
        q_array = (q_ty, context.make_array(q_ty)(context, builder, args[0]))
        arrays = [(rows_ty.dtype, context.make_array(rows_ty.dtype)(context, builder, value))
                  for value in cgutils.unpack_tuple(builder, args[1])]
        initial = [context.cast(builder, value, sums_ty.dtype, types.float64)
                   for value in cgutils.unpack_tuple(builder, args[4])]
        begin = context.cast(builder, args[2], start_ty, types.intp)
        end = context.cast(builder, args[3], stop_ty, types.intp)
        out = _row_squares(context, builder, q_array, arrays, begin, end, initial, _WIDTH8)
        return context.make_tuple(builder, signature.return_type, out)

    return sig, codegen


#: lanes of each row's sum in :func:`narrow_square_sums`
NARROW_LANES = 8


@intrinsic
def narrow_square_sums(typingctx, q, rows):
    """``|q - x_r|^2`` of each float32 row ``x_r`` of the tuple ``rows`` (each as long as ``q``), in float32.

    The first ``w = d - d % 8`` coordinates in eight lanes of an 8-wide float32 vector per row (lane ``l``
    adds the terms ``i = l (mod 8)`` in order, each difference and square rounded to float32, no fused
    multiply-add), the row's sum ``((l_0 + l_1) + (l_2 + l_3)) + ((l_4 + l_5) + (l_6 + l_7))``, then the
    terms ``w <= i < d`` added one by one, all in float32. ``q`` is float32 too.

    Half the bytes per vector and no widening, against :func:`split_square_sums`'s float64 lanes: for
    NN-descent's candidates when the points are stored in float32, whose keys are float32 anyway. The
    sum is a tree of depth at most ``d / 8 + 10`` over non-negative terms, each within ``2 u`` of its
    exact value (``u = 2^-24``: the difference and the square are rounded once each; a difference of two
    values within a factor 2 of each other is exact), so it is within about ``(d / 8 + 13) u`` of the
    exact sum of the float32 coordinates' squared differences, relatively: a ``delta``'s float32 key
    moves by at most a few tens of units in the last place at 100-D, and no term cancels another. Fixed
    by the inputs, like :func:`split_square_sums` (the same operations per lane on any CPU; without
    8-wide vectors LLVM splits them).
    """
    if not (isinstance(q, types.Array) and q.ndim == 1 and q.dtype == types.float32):
        return None
    if not (isinstance(rows, types.UniTuple) and isinstance(rows.dtype, types.Array) and rows.dtype.ndim == 1
            and rows.dtype.dtype == types.float32):
        return None
    sig = types.UniTuple(types.float32, rows.count)(q, rows)

    def codegen(context, builder, signature, args):
        q_ty, rows_ty = signature.args
        q_array = context.make_array(q_ty)(context, builder, args[0])
        arrays = [context.make_array(rows_ty.dtype)(context, builder, value)
                  for value in cgutils.unpack_tuple(builder, args[1])]
        d = builder.extract_value(q_array.shape, 0)
        zero = ir.Constant(ir.VectorType(ir.FloatType(), NARROW_LANES), [0.0] * NARROW_LANES)
        accumulators = [cgutils.alloca_once_value(builder, zero) for _ in arrays]
        steps = builder.sdiv(d, d.type(NARROW_LANES))
        with cgutils.for_range(builder, steps) as loop:
            first = builder.mul(loop.index, d.type(NARROW_LANES))
            qv = _load_run(context, builder, q_ty, q_array, first, NARROW_LANES, widen=False)
            for ary, acc in zip(arrays, accumulators):
                xv = _load_run(context, builder, rows_ty.dtype, ary, first, NARROW_LANES, widen=False)
                diff = builder.fsub(qv, xv)
                builder.store(builder.fadd(builder.load(acc), builder.fmul(diff, diff)), acc)
        sums = []
        for acc in accumulators:
            vec = builder.load(acc)
            level = [builder.extract_element(vec, ir.IntType(32)(lane)) for lane in range(NARROW_LANES)]
            while len(level) > 1:
                level = [builder.fadd(level[i], level[i + 1]) for i in range(0, len(level), 2)]
            sums.append(cgutils.alloca_once_value(builder, level[0]))
        whole = builder.mul(steps, d.type(NARROW_LANES))
        with cgutils.for_range(builder, d, start=whole) as loop:
            qi = _load_element(context, builder, q_ty, q_array, loop.index)
            for ary, acc in zip(arrays, sums):
                diff = builder.fsub(qi, _load_element(context, builder, rows_ty.dtype, ary, loop.index))
                builder.store(builder.fadd(builder.load(acc), builder.fmul(diff, diff)), acc)
        out = [builder.load(acc) for acc in sums]
        return context.make_tuple(builder, signature.return_type, out)

    return sig, codegen
