"""numpy's PCG64, inlined into the sampling kernels.

A kernel given a numpy ``Generator`` draws each digit through a call of the
bit generator's ``next_double`` pointer: a few nanoseconds a draw, and the
call forces the kernel's floating-point registers out to memory around it.
:class:`PCG64Stream` is the same generator, the same draws in the same
order, as a numba type whose ``random()`` compiles to a handful of inline
instructions (one 128-bit multiply and add, an xor and a rotation).

:func:`call_with_stream` runs a compiled kernel on a ``Generator`` backed by
numpy's ``PCG64`` (the library's release generators): it copies the
generator's state into a stream, runs the kernel on the stream, and writes
the advanced state back, so that the ``Generator`` ends exactly where it
would have ended had the kernel drawn from it directly. The state is written
back also when the kernel raises (the digits it read are spent, never
replayed), and the bit generator's lock is held throughout, so that no other
thread draws the same digits meanwhile. The stream lives for one call: it is
never stored, returned or pickled (it would reproduce the noise).

The generator (O'Neill 2014, PCG-XSL-RR 128/64, as numpy's ``pcg64.h``):
``s <- s * M + inc (mod 2**128)``, then the output ``rotr64(hi(s) ^ lo(s),
s >> 122)``; a double is ``(output >> 11) * 2**-53``. The tests check
draws, final states and whole kernels against numpy's, bit for bit.
"""

import numba
import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.runtime.nrtdynmod import _meminfo_struct_type
from numba.experimental import structref
from numba.extending import intrinsic, overload, overload_method

__all__ = ["PCG64Stream", "call_with_stream", "inlinable", "stream_type", "stream_words",
           "random_from", "digit_from"]

# numpy's PCG_DEFAULT_MULTIPLIER_128
_MULTIPLIER = (2549297995355413924 << 64) + 4865540595714422341
_MASK64 = (1 << 64) - 1


@intrinsic
def _pcg64_step(typingctx, stream):
    """Advance ``stream`` (a :data:`stream_type`) by one PCG64 step in
    place; the 64-bit output.

    The loads of the payload pointer and of the increment are marked
    ``invariant.load`` (neither changes while a stream lives), so that LLVM
    keeps them in registers across the kernel's stores: numba's own field
    accesses reload both after every store (any store may alias them), which
    put a memory round trip between consecutive draws of one label.
    """
    sig = types.uint64(stream)

    def codegen(context, builder, signature, args):
        slots, invariant = _stream_slots(context, builder, signature.args[0], args[0])
        hi, lo = (builder.load(slot) for slot in slots[:2])
        return _advance(builder, slots, invariant, hi, lo)[0]

    return sig, codegen


def _stream_slots(context, builder, stream_type_, stream):
    """Pointers to the (hi, lo, inc_hi, inc_lo) words of a stream's payload,
    and the ``invariant.load`` metadata: the payload pointer and the
    increment never change while a stream lives (see _pcg64_step)."""
    invariant = builder.module.add_metadata([])
    ref = cgutils.create_struct_proxy(stream_type_)(context, builder, value=stream)
    meminfo = builder.bitcast(ref.meminfo, _meminfo_struct_type.as_pointer())
    payload = builder.load(cgutils.gep(builder, meminfo, 0, 3))  # MemInfo.data
    payload.set_metadata("invariant.load", invariant)
    model = context.data_model_manager[stream_type_.get_data_type()]
    payload = builder.bitcast(payload, model.get_value_type().as_pointer())
    return [cgutils.gep_inbounds(builder, payload, 0, model.get_field_position(name))
            for name in ("hi", "lo", "inc_hi", "inc_lo")], invariant


def _advance(builder, slots, invariant, hi, lo):
    """One step from the state (hi, lo): stores the new state into its
    ``slots`` and returns (output, new hi, new lo)."""
    i64, i128 = ir.IntType(64), ir.IntType(128)
    inc_hi, inc_lo = (builder.load(slot) for slot in slots[2:])
    inc_hi.set_metadata("invariant.load", invariant)
    inc_lo.set_metadata("invariant.load", invariant)

    def joined(high, low):
        high = builder.shl(builder.zext(high, i128), ir.Constant(i128, 64))
        return builder.or_(high, builder.zext(low, i128))

    state = builder.add(builder.mul(joined(hi, lo), ir.Constant(i128, _MULTIPLIER)),
                        joined(inc_hi, inc_lo))
    high = builder.trunc(builder.lshr(state, ir.Constant(i128, 64)), i64)
    low = builder.trunc(state, i64)
    builder.store(high, slots[0])
    builder.store(low, slots[1])
    rotation = builder.trunc(builder.lshr(state, ir.Constant(i128, 122)), i64)
    folded = builder.xor(high, low)
    rotate_right = builder.module.declare_intrinsic(
        "llvm.fshr.i64", fnty=ir.FunctionType(i64, [i64, i64, i64]))
    return builder.call(rotate_right, [folded, folded, rotation]), high, low


@intrinsic
def _pcg64_words(typingctx, stream):
    """The (hi, lo) words of ``stream``'s state, as values."""
    sig = types.UniTuple(types.uint64, 2)(stream)

    def codegen(context, builder, signature, args):
        slots, _ = _stream_slots(context, builder, signature.args[0], args[0])
        words = [builder.load(slot) for slot in slots[:2]]
        return context.make_tuple(builder, signature.return_type, words)

    return sig, codegen


@intrinsic
def _pcg64_step_from(typingctx, stream, hi, lo):
    """One PCG64 step from the state (hi, lo) held in registers: (output,
    hi', lo'), the new state also stored into ``stream``'s payload (so that
    the payload is always current: written back by call_with_stream, also
    when a kernel raises), but never read back from it: a loop that carries
    (hi, lo) keeps the chain of steps in registers, where a reload after
    every store that may alias the payload (any array store) put a memory
    round trip into it."""
    sig = types.UniTuple(types.uint64, 3)(stream, types.uint64, types.uint64)

    def codegen(context, builder, signature, args):
        slots, invariant = _stream_slots(context, builder, signature.args[0], args[0])
        words = _advance(builder, slots, invariant, args[1], args[2])
        return context.make_tuple(builder, signature.return_type, list(words))

    return sig, codegen


class _PCG64StreamType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


# A StructRef, like _philox.KeyedRows: its numba type is named after its
# fields, the same in every process, so kernels compiled for it stay cached.
structref.register(_PCG64StreamType)
stream_type = _PCG64StreamType([
    ("hi", types.uint64), ("lo", types.uint64), ("inc_hi", types.uint64), ("inc_lo", types.uint64),
])


class PCG64Stream(structref.StructRefProxy):
    """A PCG64 state (128-bit state and increment) that compiled kernels
    draw from like a ``Generator`` (``random()``); see the module doc."""

    def __new__(cls, state, inc):
        return _new_stream(np.uint64(state >> 64), np.uint64(state & _MASK64),
                           np.uint64(inc >> 64), np.uint64(inc & _MASK64))

    @property
    def state(self):
        """The 128-bit state, as a Python int."""
        hi, lo = _words(self)
        return (int(hi) << 64) | int(lo)

    def random(self):
        """The next uniform double in [0, 1)."""
        return _call_random(self)


structref.define_boxing(_PCG64StreamType, PCG64Stream)


@numba.njit(cache=True, nogil=True)
def _new_stream(hi, lo, inc_hi, inc_lo):
    self = structref.new(stream_type)
    self.hi = hi
    self.lo = lo
    self.inc_hi = inc_hi
    self.inc_lo = inc_lo
    return self


# Not inline="always": numba would retype the body at every call site of
# every kernel (+0.2-0.8 s of a cold compile); LLVM inlines the compiled
# function anyway (the same sampling speed, benchmarks/bench_sampling.py).
@overload_method(_PCG64StreamType, "random")
def _random_method(self):
    def impl(self):
        return (_pcg64_step(self) >> np.uint64(11)) * (1.0 / 9007199254740992.0)

    return impl


@overload_method(_PCG64StreamType, "begin_row", inline="always")
def _begin_row_method(self, i):
    return lambda self, i: None  # one sequential stream, as a Generator's


@numba.njit(cache=True, nogil=True)
def _words(stream):
    return stream.hi, stream.lo


@numba.njit(cache=True, nogil=True)
def _call_random(stream):
    return stream.random()


def inlinable(rng):
    """Whether kernels draw from ``rng`` through a :class:`PCG64Stream`."""
    return isinstance(rng, np.random.Generator) and type(rng.bit_generator) is np.random.PCG64


def call_with_stream(kernel, rng, *args):
    """``kernel(*args)``, each ``rng`` among ``args`` replaced by a
    :class:`PCG64Stream` of its state when ``rng`` is a ``Generator`` on
    numpy's ``PCG64`` (else ``kernel(*args)`` as it is); ``rng`` ends in the
    state it would have reached drawing the kernel's digits itself, also
    when the kernel raises."""
    if not inlinable(rng):
        return kernel(*args)
    bit_generator = rng.bit_generator
    with bit_generator.lock:
        full_state = bit_generator.state
        words = full_state["state"]
        stream = PCG64Stream(words["state"], words["inc"])
        try:
            return kernel(*[stream if a is rng else a for a in args])
        finally:
            words["state"] = stream.state
            bit_generator.state = full_state


# -- the state in registers ---------------------------------------------------
# A kernel's hot loop may carry the stream's state as a value:
#
#     s = stream_words(rng)
#     for i in ...:
#         u, s = random_from(rng, s)      # the next uniform, the state after it
#         if rare:
#             x = helper(rng)               # draws from rng itself
#             s = stream_words(rng)         # so take the state up again
#
# The same draws as ``rng.random()`` in the same order (each step also
# stores the state into the stream, which stays current); for another source
# (a numpy Generator, keyed rows) ``s`` is a placeholder and
# ``random_from`` is ``rng.random()``. In Python (the kernels' twins) the
# same: the source draws, and the placeholder is None. Forgetting to take
# the state up after a helper drew would replay digits: the twins, which
# always draw from the source, would then differ from the kernel
# (tests/test_twins.py).


def stream_words(rng):
    """The state a kernel carries for ``rng`` (see above): None in Python."""
    return None


def random_from(rng, state):
    """``(rng.random(), state after it)`` (see above)."""
    return rng.random(), state


def digit_from(rng, state):
    """``(rng.random() * 2**53, state after it)``: the draw as a 53-bit
    digit (an exact integer in a float; one multiplication fewer)."""
    return rng.random() * 9007199254740992.0, state


@overload(stream_words, inline="always")
def _stream_words_overload(rng):
    if isinstance(rng, _PCG64StreamType):
        return lambda rng: _pcg64_words(rng)
    return lambda rng: (np.uint64(0), np.uint64(0))


@overload(random_from)
def _random_from_overload(rng, state):
    if isinstance(rng, _PCG64StreamType):
        def impl(rng, state):
            output, hi, lo = _pcg64_step_from(rng, state[0], state[1])
            return (output >> np.uint64(11)) * (1.0 / 9007199254740992.0), (hi, lo)

        return impl
    return lambda rng, state: (rng.random(), state)


@overload(digit_from)
def _digit_from_overload(rng, state):
    if isinstance(rng, _PCG64StreamType):
        def impl(rng, state):
            output, hi, lo = _pcg64_step_from(rng, state[0], state[1])
            return float(output >> np.uint64(11)), (hi, lo)

        return impl
    return lambda rng, state: (rng.random() * 9007199254740992.0, state)
