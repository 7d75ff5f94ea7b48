"""Two LLVM operations numba does not expose, for the sampling kernels.

* :func:`prefetch` (``llvm.prefetch``): kernels that pick table entries at
  random compute a block of addresses first, prefetch them, and read them
  afterwards, so the cache misses overlap instead of stalling one label at
  a time. A prefetch changes no value, only when memory arrives.
* :func:`float_bits`: the bit pattern of a float64 as an int64. Non-negative
  floats compare as their bit patterns do, so ``(float_bits(a) -
  float_bits(b)) >> 63`` is -1 exactly when ``a < b``: a mask. A float
  compare feeding a select compiles to a branch, mispredicted on every
  other label when the outcome is a coin flip.
* :func:`opaque`: an int64 returned unchanged through an empty inline
  assembly block, so that LLVM cannot see that a mask ``x >> 63`` is 0 or
  -1: otherwise it rewrites ``n & mask`` as a select, which its x86 backend
  may turn back into a (mispredicted) branch.
"""

from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

__all__ = ["prefetch", "float_bits", "opaque"]


@intrinsic
def prefetch(typingctx, array, index):
    """Start loading ``array[index]`` (a 1-D array) into every cache level
    (a read; no effect on any value)."""
    sig = types.void(array, index)

    def codegen(context, builder, signature, args):
        array_type = signature.args[0]
        arr = context.make_array(array_type)(context, builder, args[0])
        ptr = cgutils.get_item_pointer(context, builder, array_type, arr, [args[1]])
        byte_ptr = builder.bitcast(ptr, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(
            builder.module, ir.FunctionType(ir.VoidType(), [byte_ptr.type, i32, i32, i32]),
            "llvm.prefetch.p0",
        )
        # (address, read = 0, locality = 3: keep in all levels, data cache = 1)
        builder.call(fn, [byte_ptr, ir.Constant(i32, 0), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


@intrinsic
def float_bits(typingctx, x):
    """The IEEE-754 bit pattern of the float64 ``x``, as an int64."""
    sig = types.int64(types.float64)

    def codegen(context, builder, signature, args):
        return builder.bitcast(args[0], ir.IntType(64))

    return sig, codegen


@intrinsic
def opaque(typingctx, x):
    """The int64 ``x`` itself, which the optimizer cannot look through."""
    sig = types.int64(types.int64)

    def codegen(context, builder, signature, args):
        i64 = ir.IntType(64)
        identity = ir.InlineAsm(ir.FunctionType(i64, [i64]), "", "=r,0")
        return builder.call(identity, [args[0]])

    return sig, codegen
