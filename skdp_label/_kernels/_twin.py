"""Python twins of the sampling kernels: each kernel's own source, interpreted.

Compiling a kernel the first time a fresh environment uses it costs about a
second (numba's typing and lowering, not LLVM), while the small draws of a
fit (a noisy histogram's few hundred counts, a few thousand labels) take
milliseconds even in CPython. :func:`twin` runs a kernel's Python source
(``dispatcher.py_func``, the very code numba compiles) with its globals
rebound to pure-Python equivalents:

* every jitted callee -> its own twin (recursively);
* :func:`~._philox.begin_row` -> what its overload does (nothing for a numpy
  ``Generator``, ``rng.begin_row(i)`` otherwise);
* the held state of :mod:`._pcg64` (``hold``, ``held_digit``,
  ``held_int_digit``, ``held_word``, ``release``) -> draws from ``rng``
  itself, as those intrinsics do for any source but a stream (a word: PCG64's
  ``random_raw()``, the stream's output; another bit generator's
  ``next_uint64``, as the compiled kernel reads it);
* the intrinsics -> :func:`~._intrinsics.prefetch` does nothing,
  :func:`~._intrinsics.float_bits` is the IEEE-754 bit pattern (a Python
  int: the kernels only subtract patterns of non-negative floats, which
  cannot overflow int64, so the sign of the difference is the same),
  :func:`~._intrinsics.opaque` is the identity;
* ``np`` -> numpy, but ``log`` and ``exp`` call the C library through
  ``math``, as numba's lowering of ``np.log`` / ``np.exp`` on a float64
  scalar does (``llvm.log.f64`` -> libm), while numpy's ufuncs may dispatch
  to their own SIMD loops (AVX-512) that can differ in the last bit; and
  ``floor`` / ``int64`` / ``uint64`` (of non-negative indices) are the exact
  scalar operations on Python numbers.

The twin reads the same digits of the same ``Generator`` in the same order
and does the same float64 operations, so it returns the kernel's output bit
for bit (tests/test_twins.py checks it across the samplers' paths): which
outputs are reachable, and their probabilities, are the kernel's.
:func:`kernel_for` picks the twin for small calls on a numpy ``Generator``
in a process that has not yet loaded the compiled kernel, up to a total
amount of interpreted work per kernel (a ski rental: larger when numba's
cache does not hold the kernel); :func:`call_exact` runs a kernel that draws
no random digits (a solver's) the same way, even one compiled with numpy's
error model, since where CPython raises it reruns the call compiled.
"""

import functools
import math
import struct
import types

import numpy as np
from numba.core.dispatcher import Dispatcher
from numba.core.extending import _Intrinsic

from ._intrinsics import float_bits, opaque, prefetch
from ._pcg64 import (call_with_stream, held_digit, held_int_digit, held_word, hold, inlinable,
                     release)
from ._philox import begin_row

__all__ = ["twin", "kernel_for", "call_exact", "would_compile", "MAX_DRAWS", "MAX_LABELS",
           "COLD_SCALE"]

# Ski rental: a process interprets a kernel (rents) until the interpreted work
# would have paid for the compiled kernel (buys), then compiles it; the rule
# depends only on the public sizes of the calls and on the numba cache, never
# on the labels. Rent: a noise draw costs 2-4 us interpreted and a label 2-17 us
# (benchmarks/bench_twins.py: 1.6-8.3 us a label on the samplers' paths, up
# to ~17 us with many exact-tail draws). Price: ~1 s to compile a kernel with
# its callees in a fresh environment (0.35-1.6 s each in bench_twins, later
# kernels sharing callees), but ~0.3 s to load a process's first kernel from a
# warm numba cache and ~0.01 s each other. So a kernel whose compiled code is
# in the cache gets the caps below (MAX_* units: at most 0.04-0.09 s of
# interpreting, like a load), and one that would compile gets COLD_SCALE
# times as many (30,000 labels: at most ~0.5 s, below the compile it saves;
# the 20,000 labels of ``skdp-label warmup`` run interpreted).
MAX_DRAWS = 10_000  # noise draws (noisy histograms and sums), warm cache
MAX_LABELS = 5_000  # labels, warm cache
COLD_SCALE = 6  # the caps' factor for a kernel that is not in the numba cache

_DOUBLE = struct.Struct("<d")
_INT64 = struct.Struct("<q")
_EXACT_FLOATS = 2.0**52  # from here on every float64 is an integer


def _float_bits(x):
    return _INT64.unpack(_DOUBLE.pack(x))[0]


def _prefetch(array, index):
    return None


def _opaque(x):
    return x


def _hold(rng):
    return None


def _held_digit(rng, state):
    return rng.random() * 9007199254740992.0, state


def _held_int_digit(rng, state):
    return int(rng.random() * 9007199254740992.0), state


def _held_word(rng, state):
    # The compiled kernel's word (_pcg64.held_word): PCG64's output (through a
    # stream), a Generator's next_uint64, a keyed source's next word.
    if isinstance(rng, np.random.Generator):
        bit_generator = rng.bit_generator
        if type(bit_generator) is np.random.PCG64:
            return bit_generator.random_raw(), state  # PCG64's next_raw is next_uint64 (faster)
        # numpy draws a full-range uint64 by one next_uint64 of the bit generator
        return int(rng.integers(0, 2**64, dtype=np.uint64)), state
    return int(rng.next_word()), state


def _release(rng, state):
    return None


def _begin_row(rng, i):
    if not isinstance(rng, np.random.Generator):
        rng.begin_row(i)


def _floor(x):
    # math.floor returns an int and raises on inf; large floats, zeros
    # (keeping -0.0) and nan are their own floor.
    if x != 0.0 and abs(x) < _EXACT_FLOATS:
        return float(math.floor(x))
    return x


def _log(x):
    # math raises where the C library returns -inf (at 0) or nan (below).
    if x > 0.0 or x != x:
        return math.log(x)
    return -math.inf if x == 0.0 else math.nan


def _exp(x):
    try:
        return math.exp(x)
    except OverflowError:  # the C library returns inf
        return math.inf


# numpy functions whose scalar results may differ in the last bit from the C
# library's (numba's) on some CPUs: a twin must bind them through math first.
_NOT_BOUND = frozenset(
    "log1p expm1 log2 log10 exp2 power sin cos tan arcsin arccos arctan arctan2 sinh cosh "
    "tanh arcsinh arccosh arctanh hypot cbrt".split()
)


class _Numpy:
    """``np`` inside a twin: numpy, with the scalar functions above; the
    other transcendental functions are refused (see _NOT_BOUND)."""

    floor = staticmethod(_floor)
    log = staticmethod(_log)
    exp = staticmethod(_exp)
    int64 = int  # truncation toward zero, as numba's float -> int64
    int32 = int  # the same, for the indices below 2**31 the kernels convert through int32
    # The kernels convert only non-negative int64 indices to uint64 (no
    # wraparound arithmetic): the same value as a Python int, which CPython
    # indexes and multiplies several times faster than a numpy scalar.
    uint64 = int

    def __getattr__(self, name):
        if name in _NOT_BOUND:
            raise AttributeError(f"no exact twin of np.{name}: bind it in _twin._Numpy")
        return getattr(np, name)


_GLOBALS = {id(begin_row): _begin_row, id(prefetch): _prefetch, id(float_bits): _float_bits,
            id(opaque): _opaque, id(np): _Numpy(), id(hold): _hold, id(held_digit): _held_digit,
            id(held_int_digit): _held_int_digit, id(held_word): _held_word, id(release): _release}
_TWINS = {}
_INTERPRETED = {}  # kernel -> units of work its twin has done in this process
_IN_CACHE = {}  # kernel -> whether the numba cache held its code at its first call


def _rebind(value, raising):
    if isinstance(value, Dispatcher):
        return twin(value, raising=raising)
    if id(value) in _GLOBALS:
        return _GLOBALS[id(value)]
    if isinstance(value, _Intrinsic):
        raise TypeError(f"no Python twin for the numba intrinsic {value._name!r}")
    return value


def twin(kernel, *, raising=False):
    """The Python twin of the jitted ``kernel`` (built once, then cached).

    ``raising=True`` admits kernels compiled with numpy's error model, for
    :func:`call_exact` only: where CPython raises (a division by zero,
    ``log1p(-1)``) numba carries an inf or a nan, and the caller reruns the
    call compiled.
    """
    if (kernel, raising) in _TWINS:
        return _TWINS[kernel, raising]
    options = kernel.targetoptions
    if options.get("fastmath") or (options.get("error_model") == "numpy" and not raising):
        # Reassociated float operations, or inf/nan where Python raises on a
        # division by zero: CPython would not compute the same values.
        raise TypeError(f"no exact Python twin of {kernel.py_func.__name__!r}: "
                        f"compiled with {options}")
    func = kernel.py_func
    namespace = dict(func.__globals__)
    for name in func.__code__.co_names:
        if name in namespace:
            namespace[name] = _rebind(namespace[name], raising)
    closure = func.__closure__
    if closure is not None:
        closure = tuple(types.CellType(_rebind(cell.cell_contents, raising)) for cell in closure)
    twin_func = types.FunctionType(
        func.__code__, namespace, func.__name__, func.__defaults__, closure
    )
    twin_func.__doc__ = func.__doc__
    _TWINS[kernel, raising] = twin_func
    return twin_func


def in_numba_cache(kernel):
    """Whether numba's on-disk cache holds compiled code of ``kernel`` (this
    source, closure, numba version and CPU: what a load would find) for some
    signature; False for a kernel without ``cache=True``, True if numba's
    cache cannot be read (then the smaller caps: those of a warm cache)."""
    cache = getattr(kernel, "_cache", None)
    index = getattr(cache, "_cache_file", None)
    if index is None:  # numba.core.caching.NullCache: never cached
        return False
    try:
        # An index key is (signature, machine, code and closure hashes).
        mine = cache._index_key(None, kernel.targetctx.codegen())[1:]
        return any(key[1:] == mine for key in index._load_index())
    except Exception:  # another numba's layout, an unreadable file
        return True


def would_compile(kernel):
    """Whether calling ``kernel`` now would compile it: not loaded in this
    process, and not in numba's cache (asked once a process)."""
    if kernel.overloads:
        return False
    if kernel not in _IN_CACHE:
        _IN_CACHE[kernel] = in_numba_cache(kernel)
    return not _IN_CACHE[kernel]


def _interpret(kernel, n, max_n):
    """Whether a call of ``n`` units runs ``kernel``'s twin (and counts them)."""
    if kernel.overloads:  # compiled or loaded in this process already
        return False
    if kernel not in _IN_CACHE:  # asked once a process: loading fills it
        _IN_CACHE[kernel] = in_numba_cache(kernel)
    spent = _INTERPRETED.get(kernel, 0) + n
    if spent <= (max_n if _IN_CACHE[kernel] else COLD_SCALE * max_n):
        _INTERPRETED[kernel] = spent
        return True
    return False


def kernel_for(kernel, rng, n, max_n=MAX_LABELS):
    """``kernel``, or its twin for a call of ``n`` units of work (labels,
    draws) from a numpy ``Generator`` (or ``rng=None``: a kernel that draws
    no random digits, like a lookup), while this process has not loaded the
    compiled kernel and has interpreted at most ``max_n`` units of it in all
    (``COLD_SCALE * max_n`` when numba's cache does not hold the kernel: then
    the compiled kernel costs a compilation, not a load).

    The total is what bounds the cost (rent until the rent paid reaches the
    price): a process that keeps making small calls compiles (or loads) the
    kernel after interpreting for at most about what that costs, instead of
    interpreting for ever. Keyed sources always run compiled: they are the
    labels party's bulk path. Twin and kernel return the same bits, so the
    choice changes only the time. A compiled kernel draws from a ``Generator``
    on PCG64 through an inlined copy of it (:mod:`._pcg64`), the same digits. Past the caps, a kernel that would compile
    compiles in another process while its twin runs
    (:func:`._background.run_while_compiling`).
    """
    if rng is None or isinstance(rng, np.random.Generator):
        if _interpret(kernel, n, max_n):
            return twin(kernel)
        if not kernel.overloads and not _IN_CACHE.get(kernel, True):
            # A large call of a kernel that would compile: in another process,
            # while the twin runs here (the same bits).
            from ._background import run_while_compiling

            return functools.partial(run_while_compiling, kernel)
        if inlinable(rng):
            return functools.partial(call_with_stream, kernel, rng)
    return kernel


def call_exact(kernel, n, max_n, *args):
    """``kernel(*args)`` for a kernel that draws no random digits (a solver's),
    through its twin under the caps of :func:`kernel_for`.

    Such a kernel may use numpy's error model: the twin runs with numpy's
    floating-point errors raised (but underflow, which rounds the same in
    both), and where CPython or numpy raises (a division by zero, an
    overflow, an invalid operation) the compiled kernel reruns the call from
    the start. The result is the kernel's either way;
    ``kernel`` must write every element of its output arrays it ever writes.
    """
    if _interpret(kernel, n, max_n):
        try:
            with np.errstate(all="raise", under="ignore"):
                return twin(kernel, raising=True)(*args)
        except (ArithmeticError, ValueError):  # the kernel gives inf or nan here
            pass
    return kernel(*args)
