"""A software prefetch usable inside ``numba.njit`` code.

The learners' store updates and the ann index's candidate stage are bound by the latency of
random memory accesses (NOTES.md: ~35-40 ns each). Issuing the loads of the next few entries
before they are needed overlaps those latencies; LLVM's ``llvm.prefetch`` intrinsic is a hint with no semantic effect, so the
results are bit-identical with or without it.
"""

from __future__ import annotations

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic


def _prefetch_codegen(last_byte_too):
    def codegen(context, builder, signature, args):
        aryty, _ = signature.args
        ary = context.make_array(aryty)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, aryty, ary, [args[1]], wraparound=False)
        i8p = ir.IntType(8).as_pointer()
        i32 = ir.IntType(32)
        fnty = ir.FunctionType(ir.VoidType(), [i8p, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fnty, "llvm.prefetch.p0")
        first = builder.bitcast(ptr, i8p)
        builder.call(fn, [first, i32(0), i32(3), i32(1)])
        size = context.get_abi_sizeof(context.get_data_type(aryty.dtype))
        if last_byte_too and 64 % size != 0:  # (an item of 8 bytes never straddles two lines)
            builder.call(fn, [builder.gep(first, [ir.IntType(64)(size - 1)]), i32(0), i32(3), i32(1)])
        return context.get_dummy_value()

    return codegen


@intrinsic
def prefetch(typingctx, arr, index):
    """Hint the CPU to load ``arr[index]`` into cache (read, high temporal locality)."""
    if not isinstance(arr, types.Array) or not isinstance(index, types.Integer):
        return None
    return types.void(arr, index), _prefetch_codegen(False)


@intrinsic
def prefetch_item(typingctx, arr, index):
    """Like :func:`prefetch`, for the first and the last byte of ``arr[index]``: an item of 12 or
    20 bytes (a packed record) can straddle two cache lines (one of 4, 8, 16 ... bytes cannot;
    its one line is loaded)."""
    if not isinstance(arr, types.Array) or not isinstance(index, types.Integer):
        return None
    return types.void(arr, index), _prefetch_codegen(True)
