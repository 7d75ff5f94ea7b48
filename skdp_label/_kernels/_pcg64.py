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
from numba.experimental import structref
from numba.extending import intrinsic, overload_method
from numba.np.random.generator_core import next_uint64  # a bit generator's word, in numba

try:  # numba's MemInfo layout, to mark the payload pointer's load invariant
    from numba.core.runtime.nrtdynmod import _meminfo_struct_type
except ImportError:  # pragma: no cover - a numba without it: its own (slower) accessor
    _meminfo_struct_type = None

__all__ = ["PCG64Stream", "call_with_stream", "inlinable", "stream_type", "hold", "held_digit",
           "held_int_digit", "held_word", "release"]

# numpy's PCG_DEFAULT_MULTIPLIER_128
_MULTIPLIER = (2549297995355413924 << 64) + 4865540595714422341
_MASK64 = (1 << 64) - 1
# Steps a Generator jumps after a kernel raised (call_with_stream): more than
# any call draws (a call draws at most a few digits per label).
_JUMP_ON_ERROR = 1 << 80


def _payload_slots(context, builder, stream_ty, stream):
    """Pointers to the (hi, lo, inc_hi, inc_lo) words of a stream's payload,
    and the ``invariant.load`` metadata (the payload pointer is loaded with
    it: it never changes while a stream lives)."""
    invariant = builder.module.add_metadata([])
    ref = cgutils.create_struct_proxy(stream_ty)(context, builder, value=stream)
    if _meminfo_struct_type is None:
        payload = context.nrt.meminfo_data(builder, ref.meminfo)
    else:
        meminfo = builder.bitcast(ref.meminfo, _meminfo_struct_type.as_pointer())
        payload = builder.load(cgutils.gep(builder, meminfo, 0, 3))  # MemInfo.data
        payload.set_metadata("invariant.load", invariant)
    model = context.data_model_manager[stream_ty.get_data_type()]
    payload = builder.bitcast(payload, model.get_value_type().as_pointer())
    slots = [cgutils.gep_inbounds(builder, payload, 0, model.get_field_position(name))
             for name in ("hi", "lo", "inc_hi", "inc_lo")]
    return slots, invariant


def _increment(builder, slots, invariant):
    """The increment's two words, loaded as invariant (never written after
    :func:`_new_stream`)."""
    words = [builder.load(slot) for slot in slots[2:]]
    for word in words:
        word.set_metadata("invariant.load", invariant)
    return words


def _pcg64_next(builder, hi, lo, inc_hi, inc_lo):
    """(new hi, new lo, 64-bit output) of one PCG64 step from the words."""
    i64, i128 = ir.IntType(64), ir.IntType(128)

    def joined(high, low):
        high = builder.shl(builder.zext(high, i128), ir.Constant(i128, 64))
        return builder.or_(high, builder.zext(low, i128))

    state = builder.add(builder.mul(joined(hi, lo), ir.Constant(i128, _MULTIPLIER)),
                        joined(inc_hi, inc_lo))
    high = builder.trunc(builder.lshr(state, ir.Constant(i128, 64)), i64)
    low = builder.trunc(state, i64)
    rotation = builder.trunc(builder.lshr(state, ir.Constant(i128, 122)), i64)
    folded = builder.xor(high, low)
    rotate_right = builder.module.declare_intrinsic(
        "llvm.fshr.i64", fnty=ir.FunctionType(i64, [i64, i64, i64]))
    return high, low, builder.call(rotate_right, [folded, folded, rotation])


@intrinsic
def _pcg64_step(typingctx, stream):
    """Advance ``stream`` (a :data:`stream_type`) by one PCG64 step in
    place; the 64-bit output.

    The loads of the payload pointer and of the increment are marked
    ``invariant.load`` (neither changes while a stream lives), so that LLVM
    keeps them in registers across the kernel's stores: numba's own field
    accesses reload both after every store (any store may alias them), which
    put a memory round trip between consecutive draws of one label. Only
    ``hi`` and ``lo`` are ever written after :func:`_new_stream` (tested
    with a stream made and drawn from in one compiled function).
    """
    sig = types.uint64(stream)

    def codegen(context, builder, signature, args):
        slots, invariant = _payload_slots(context, builder, signature.args[0], args[0])
        hi, lo = builder.load(slots[0]), builder.load(slots[1])
        high, low, output = _pcg64_next(builder, hi, lo, *_increment(builder, slots, invariant))
        builder.store(high, slots[0])
        builder.store(low, slots[1])
        return output

    return sig, codegen


_WORDS = types.UniTuple(types.uint64, 2)


# -- a state held in a kernel's registers --------------------------------------
#
# A kernel's loop that draws through ``rng.random()`` stores the state into
# the stream's memory at every draw and loads it back at the next: LLVM
# cannot keep it in registers because any store of the loop (the output's)
# may alias the stream. A kernel may instead *hold* the state in a local
# variable (``state = hold(rng)``), draw from it (``d, state =
# held_digit(rng, state)``: the same digits as ``_digit(rng)``, in the same
# order) and *release* it into ``rng`` (``release(rng, state)``) before any
# call that draws from ``rng`` itself (then ``state = hold(rng)`` again) and
# at the end. Between a hold and its release the kernel's own code should not
# raise: the digits drawn since the hold are not written back (the rare paths
# that may raise are out-of-line calls, made with the state released); if it
# does, call_with_stream makes the Generator jump far past them, so they are
# never drawn again either way. For any other source
# (a numpy Generator, keyed rows) the held state is a dummy and the draws go
# to ``rng.random()``. The Python twins bind these four to the same draws
# from ``rng`` (``_twin``). They are intrinsics, not overloads: a stream's
# draw is a few LLVM instructions, without a numba compilation of its own
# (four overloads added ~0.3 s to each kernel's cold compile).


def _other_source(context, builder, signature, args, impl):
    """Codegen of a held-state intrinsic for a source that is not a stream:
    ``impl`` (Python) compiled for ``signature``."""
    return context.compile_internal(builder, impl, signature, args)


@intrinsic
def hold(typingctx, rng):
    """The state of ``rng`` for :func:`held_digit`: a stream's (hi, lo) words
    (a dummy 0 for another source)."""
    if rng != stream_type:
        return types.intp(rng), lambda context, builder, sig, args: context.get_constant(
            types.intp, 0)

    def codegen(context, builder, signature, args):
        slots, _ = _payload_slots(context, builder, signature.args[0], args[0])
        return context.make_tuple(builder, _WORDS, [builder.load(slots[0]), builder.load(slots[1])])

    return _WORDS(rng), codegen


@intrinsic
def release(typingctx, rng, state):
    """Write a held state back into ``rng`` (nothing for another source)."""
    if rng != stream_type:
        return types.void(rng, state), lambda context, builder, sig, args: context.get_dummy_value()

    def codegen(context, builder, signature, args):
        slots, _ = _payload_slots(context, builder, signature.args[0], args[0])
        for k in range(2):
            builder.store(builder.extract_value(args[1], k), slots[k])
        return context.get_dummy_value()

    return types.void(rng, state), codegen


def _held_step(context, builder, signature, args):
    """(64-bit output, next held state) of one PCG64 step from the held
    state ``args[1]`` of the stream ``args[0]``."""
    slots, invariant = _payload_slots(context, builder, signature.args[0], args[0])
    hi, lo = (builder.extract_value(args[1], k) for k in range(2))
    high, low, output = _pcg64_next(builder, hi, lo, *_increment(builder, slots, invariant))
    return output, context.make_tuple(builder, _WORDS, [high, low])


def _held_draw(rng, state, digit_type):
    """Signature and codegen of a draw of one digit (``digit_type``: float64
    or int64) from a held state."""
    sig = types.Tuple((digit_type, state))(rng, state)
    as_float = digit_type == types.float64
    if rng != stream_type:
        if as_float:
            def impl(rng, state):
                return rng.random() * 9007199254740992.0, state
        else:
            def impl(rng, state):
                return np.int64(rng.random() * 9007199254740992.0), state
        return sig, lambda context, builder, sig, args: _other_source(
            context, builder, sig, args, impl)

    def codegen(context, builder, signature, args):
        output, words = _held_step(context, builder, signature, args)
        # The output's top 53 bits: rng.random()'s digit, (output >> 11) *
        # 2**-53 * 2**53 exactly; as a float through a signed conversion (one
        # instruction; x86 has no unsigned one below AVX-512), exact below 2**53.
        digit = builder.lshr(output, ir.Constant(ir.IntType(64), 11))
        if as_float:
            digit = builder.sitofp(digit, ir.DoubleType())
        return context.make_tuple(builder, signature.return_type, [digit, words])

    return sig, codegen


@intrinsic
def held_digit(typingctx, rng, state):
    """(digit, next state): ``rng.random() * 2**53`` drawn from a held state."""
    return _held_draw(rng, state, types.float64)


@intrinsic
def held_int_digit(typingctx, rng, state):
    """(digit, next state): :func:`held_digit`'s digit as an int64."""
    return _held_draw(rng, state, types.int64)


@intrinsic
def held_word(typingctx, rng, state):
    """(word, next state): the whole 64-bit output word (uint64) of the draw
    :func:`held_digit` would make, whose top 53 bits are that digit.

    A stream's word is PCG64's output. Any other source gives a word of 64
    independent uniform bits, drawn once: a numpy ``Generator``'s
    ``next_uint64`` (for PCG64, PCG64DXSM, Philox and SFC64 the word whose
    top 53 bits ``random()`` returns: the same digit, the same state after;
    ``Generator.integers(0, 2**64, dtype=np.uint64)`` in Python, which the
    twins call), a keyed source's ``next_word()`` (whose top 53 bits are its
    ``random()``). The word's low 11 bits are independent of its top 53: a
    kernel may spend them on a decision of its own (the rounding coin of
    :func:`~._sampling.sample_rows`) and the digit on another.
    """
    sig = types.Tuple((types.uint64, state))(rng, state)
    if rng != stream_type:
        if isinstance(rng, types.NumPyRandomGeneratorType):
            def impl(rng, state):
                return next_uint64(rng.bit_generator), state
        else:
            def impl(rng, state):
                return rng.next_word(), state
        return sig, lambda context, builder, sig, args: _other_source(
            context, builder, sig, args, impl)

    def codegen(context, builder, signature, args):
        output, words = _held_step(context, builder, signature, args)
        return context.make_tuple(builder, signature.return_type, [output, words])

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
    state it would have reached drawing the kernel's digits itself.

    When the kernel raises, it may have drawn from a held state (:func:`hold`)
    that was never released into the stream: ``rng`` then jumps
    :data:`_JUMP_ON_ERROR` steps past the stream's state, beyond any digit
    one call can read, so that no digit is ever drawn twice, whatever the
    kernel's hold discipline."""
    if not inlinable(rng):
        return kernel(*args)
    bit_generator = rng.bit_generator
    with bit_generator.lock:
        full_state = bit_generator.state
        words = full_state["state"]
        stream = PCG64Stream(words["state"], words["inc"])
        completed = False
        try:
            result = kernel(*[stream if a is rng else a for a in args])
            completed = True
            return result
        finally:
            words["state"] = stream.state
            bit_generator.state = full_state
            if not completed:
                bit_generator.advance(_JUMP_ON_ERROR)
