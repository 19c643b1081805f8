"""Two LLVM primitives for numba kernels: a software prefetch and an atomic fetch-add.

They sit at the top of the package, below every stage (graph -> sampling -> partition -> nn ->
distributed -> inference -> train; tests/test_layering.py), like :mod:`gnnscale.files`: the feature
gather (graph), the samplers (sampling) and the aggregation kernels (nn) all prefetch, and a module may
only import from its own stage or a lower one.

Sampling is bound by memory latency: each destination costs a miss on ``indptr[v]`` and then
misses into its neighborhood in ``indices``, each depending on the one before. A loop over
destinations can issue the loads of destination ``i + d`` while it works on ``i``, so that the misses
of several destinations overlap instead of queueing one after another.
"""

from __future__ import annotations

from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.extending import intrinsic


@intrinsic
def prefetch(typingctx, array, index):
    """Hint the CPU to load ``array[index]`` into cache (read, high locality). No effect on results;
    ``index`` is not bounds-checked, which is safe: a prefetch never faults."""
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        ary = context.make_array(array_type)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, array_type, ary, [args[1]], wraparound=False)
        i8_ptr = builder.bitcast(ptr, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn_type = ir.FunctionType(ir.VoidType(), [i8_ptr.type, i32, i32, i32])
        fn = cgutils.get_or_insert_function(builder.module, fn_type, "llvm.prefetch.p0")
        builder.call(fn, [i8_ptr, i32(0), i32(3), i32(1)])  # read, keep in all cache levels, data cache
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def atomic_fetch_add(typingctx, array, index, value):
    """Atomically add ``value`` to ``array[index]`` and return the previous value.

    Threads of a parallel region use it to claim work pieces from a shared counter; which thread
    computes a piece never changes the result, so the output stays independent of the thread count.
    """
    sig = array.dtype(array, index, value)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        ary = context.make_array(array_type)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, array_type, ary, [args[1]], wraparound=False)
        val = context.cast(builder, args[2], signature.args[2], array_type.dtype)
        return builder.atomic_rmw("add", ptr, val, "seq_cst")

    return sig, codegen
