"""Counter-based randomness for keyed releases (Philox4x64-10).

A keyed release makes the noise of each row a pure function of a secret
key, a release id and the row's key: rerunning any part of the release
(a retried Dask task, a resumed file) reproduces exactly the same noisy
labels, whatever the batch or partition boundaries. Philox (Salmon et al.,
SC'11) is a keyed bijection of a 256-bit counter; numpy ships the same
function as ``np.random.Philox``, and the tests check this implementation
against it word for word.

:class:`KeyedRows` is a random source for the sampling kernels: it offers
``random()`` like a numpy ``Generator`` and ``begin_row(i)``, which the
kernels call at the start of row ``i`` (:func:`begin_row`, a no-op for a
``Generator``). Row ``i`` reads the stream
``Philox(key)(word, row_key_lo[i], stage, row_key_hi[i])`` for
``word = 1, 2, ...``: as many words as its sampler needs, independent of
every other row. ``stage`` separates the draws of successive sampling steps
of one row (e.g. randomized rounding, then the mechanism).
"""

import numba
import numpy as np
from numba import types
from numba.experimental import structref
from numba.extending import overload, overload_method

__all__ = ["philox4x64", "KeyedRows", "begin_row", "uniforms"]

_M0 = np.uint64(0xD2E7470EE14C6C93)
_M1 = np.uint64(0xCA5A826395121157)
_W0 = np.uint64(0x9E3779B97F4A7C15)
_W1 = np.uint64(0xBB67AE8584CAA73B)
_MASK32 = np.uint64(0xFFFFFFFF)
_S32 = np.uint64(32)
_S11 = np.uint64(11)


@numba.njit(cache=True, nogil=True, inline="always")
def _mulhilo(a, b):
    """(high, low) 64-bit words of the 128-bit product a * b."""
    a_lo, a_hi = a & _MASK32, a >> _S32
    b_lo, b_hi = b & _MASK32, b >> _S32
    p0, p1, p2, p3 = a_lo * b_lo, a_lo * b_hi, a_hi * b_lo, a_hi * b_hi
    mid = (p0 >> _S32) + (p1 & _MASK32) + (p2 & _MASK32)
    return p3 + (p1 >> _S32) + (p2 >> _S32) + (mid >> _S32), a * b


@numba.njit(cache=True, nogil=True)
def philox4x64(c0, c1, c2, c3, k0, k1):
    """Philox4x64 with 10 rounds: four 64-bit words of counter (c0..c3) under
    key (k0, k1); identical to numpy's ``Philox``."""
    for _ in range(10):
        hi0, lo0 = _mulhilo(_M0, c0)
        hi1, lo1 = _mulhilo(_M1, c2)
        c0, c1, c2, c3 = hi1 ^ c1 ^ k0, lo1, hi0 ^ c3 ^ k1, lo0
        k0 = k0 + _W0
        k1 = k1 + _W1
    return c0, c1, c2, c3


class _KeyedRowsType(types.StructRef):
    def preprocess_fields(self, fields):
        return tuple((name, types.unliteral(typ)) for name, typ in fields)


# A StructRef, not a jitclass: a jitclass type is named after the id() of its
# class object, new in every process, so a kernel taking one missed the numba
# cache in every process (every keyed release recompiled, and the cache grew by
# one entry a process); a StructRef type is named after its fields.
structref.register(_KeyedRowsType)
_KEYED_ROWS = _KeyedRowsType(
    [
        ("k0", types.uint64),
        ("k1", types.uint64),
        ("stage", types.uint64),
        ("row_lo", types.uint64[::1]),
        ("row_hi", types.uint64[::1]),
        ("c1", types.uint64),
        ("c3", types.uint64),
        ("word", types.uint64),
        ("buf", types.uint64[::1]),
        ("pos", types.int64),
        ("last_row", types.int64),
    ]
)


class KeyedRows(structref.StructRefProxy):
    """Per-row Philox streams for one batch of rows (see the module doc).

    Parameters
    ----------
    k0, k1 : uint64
        The release's Philox key (derived from the secret key and the
        release id; never stored in a fitted object).
    stage : uint64
        Sampling step; each step of a row reads its own stream.
    row_lo, row_hi : ndarray of uint64
        The 128-bit key of each row of the batch, in batch order.
    """

    def __new__(cls, k0, k1, stage, row_lo, row_hi):
        row_lo = np.require(row_lo, np.uint64, ["C", "W"])
        row_hi = np.require(row_hi, np.uint64, ["C", "W"])
        return _new_keyed_rows(np.uint64(k0), np.uint64(k1), np.uint64(stage), row_lo, row_hi)

    def begin_row(self, i):
        """Start reading row ``i``'s stream from its first word; a row
        visited again reads its next sampling step's stream."""
        _call_begin_row(self, i)

    def random(self):
        """A uniform double in [0, 1) from the next 53 bits, as numpy does."""
        return _call_random(self)

    def next_word(self):
        """The next 64-bit word of the current row's stream (``random()``'s
        digit is its top 53 bits)."""
        return _call_next_word(self)

    def random_rows(self, n):
        """One uniform for each of the first ``n`` rows (a sampling step)."""
        return _call_random_rows(self, n)


structref.define_boxing(_KeyedRowsType, KeyedRows)


@numba.njit(cache=True, nogil=True)
def _new_keyed_rows(k0, k1, stage, row_lo, row_hi):
    self = structref.new(_KEYED_ROWS)
    self.k0 = k0
    self.k1 = k1
    self.stage = stage
    self.row_lo = row_lo
    self.row_hi = row_hi
    self.c1 = row_lo[0] if row_lo.shape[0] else np.uint64(0)
    self.c3 = row_hi[0] if row_hi.shape[0] else np.uint64(0)
    self.word = np.uint64(0)
    self.buf = np.zeros(4, dtype=np.uint64)
    self.pos = 4
    self.last_row = -1
    return self


@overload_method(_KeyedRowsType, "begin_row")
def _begin_row_method(self, i):
    def impl(self, i):
        # Kernels visit rows in increasing order; a pass that starts again at
        # or before the last row visited is the row's next sampling step and
        # reads the next stage's stream, never the same words twice.
        if i <= self.last_row:
            self.stage += np.uint64(1)
        self.last_row = i
        self.c1 = self.row_lo[i]
        self.c3 = self.row_hi[i]
        self.word = np.uint64(0)
        self.pos = 4

    return impl


@overload_method(_KeyedRowsType, "next_word")
def _next_word_method(self):
    def impl(self):
        if self.pos == 4:
            self.word += np.uint64(1)
            a, b, c, d = philox4x64(self.word, self.c1, self.stage, self.c3, self.k0, self.k1)
            self.buf[0] = a
            self.buf[1] = b
            self.buf[2] = c
            self.buf[3] = d
            self.pos = 0
        w = self.buf[self.pos]
        self.pos += 1
        return w

    return impl


@overload_method(_KeyedRowsType, "random")
def _random_method(self):
    # A uniform double in [0, 1) from the next 53 bits, as numpy does.
    return lambda self: (self.next_word() >> _S11) * (1.0 / 9007199254740992.0)


@overload_method(_KeyedRowsType, "random_rows")
def _random_rows_method(self, n):
    def impl(self, n):
        out = np.empty(n)
        for i in range(n):
            self.begin_row(i)
            out[i] = self.random()
        return out

    return impl


# The methods from Python (tests, and uniforms() of a keyed release).
@numba.njit(cache=True, nogil=True)
def _call_begin_row(rows, i):
    rows.begin_row(i)


@numba.njit(cache=True, nogil=True)
def _call_random(rows):
    return rows.random()


@numba.njit(cache=True, nogil=True)
def _call_next_word(rows):
    return rows.next_word()


@numba.njit(cache=True, nogil=True)
def _call_random_rows(rows, n):
    return rows.random_rows(n)


def begin_row(rng, i):
    """Mark the start of row ``i`` in a sampling kernel (numba only)."""
    raise NotImplementedError("begin_row is only callable from numba-compiled kernels")


@overload(begin_row, inline="always")
def _begin_row_overload(rng, i):
    if isinstance(rng, types.NumPyRandomGeneratorType):
        return lambda rng, i: None  # a sequential stream: nothing to do
    return lambda rng, i: rng.begin_row(i)


def uniforms(rng, n):
    """``n`` uniforms in [0, 1) for a vectorised sampling step: one per row
    from a keyed source, or the next ``n`` of a Generator."""
    if isinstance(rng, np.random.Generator):
        return rng.random(n)
    return rng.random_rows(n)
