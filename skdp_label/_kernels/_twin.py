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
* the intrinsics -> :func:`~._intrinsics.prefetch` does nothing,
  :func:`~._intrinsics.float_bits` is the IEEE-754 bit pattern (a Python
  int: the kernels only subtract patterns of non-negative floats, which
  cannot overflow int64, so the sign of the difference is the same);
* ``np`` -> numpy, but ``log`` and ``exp`` call the C library through
  ``math``, as numba's lowering of ``np.log`` / ``np.exp`` on a float64
  scalar does (``llvm.log.f64`` -> libm), while numpy's ufuncs may dispatch
  to their own SIMD loops (AVX-512) that can differ in the last bit; and
  ``floor`` / ``int64`` are the exact scalar operations on Python numbers.

The twin reads the same digits of the same ``Generator`` in the same order
and does the same float64 operations, so it returns the kernel's output bit
for bit (tests/test_twins.py checks it across the samplers' paths): which
outputs are reachable, and their probabilities, are the kernel's.
:func:`kernel_for` picks the twin for small calls on a numpy ``Generator``
in a process that has not yet loaded the compiled kernel.
"""

import math
import struct
import types

import numpy as np
from numba.core.dispatcher import Dispatcher
from numba.core.extending import _Intrinsic

from ._intrinsics import float_bits, prefetch
from ._philox import begin_row

__all__ = ["twin", "kernel_for", "MAX_DRAWS", "MAX_LABELS"]

# Calls up to these sizes run the twin while the process has not loaded the
# compiled kernel. Interpreted, a noise draw costs 1-4 us and a label 4-17 us
# (measured on the samplers: at most ~0.05-0.1 s a call), against ~1 s to
# compile a kernel in a fresh environment and 0.1-0.5 s to load it from a warm
# numba cache; past them the compiled kernel (~20-100 ns a label) wins.
MAX_DRAWS = 10_000  # noise draws (noisy histograms and sums)
MAX_LABELS = 5_000  # labels

_DOUBLE = struct.Struct("<d")
_INT64 = struct.Struct("<q")
_EXACT_FLOATS = 2.0**52  # from here on every float64 is an integer


def _float_bits(x):
    return _INT64.unpack(_DOUBLE.pack(x))[0]


def _prefetch(array, index):
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
    return math.log(x) if x > 0.0 else np.log(x)  # math raises at 0 and below


def _exp(x):
    return math.exp(x) if x < 709.0 else np.exp(x)  # math raises on overflow


class _Numpy:
    """``np`` inside a twin: numpy, with the scalar functions above."""

    floor = staticmethod(_floor)
    log = staticmethod(_log)
    exp = staticmethod(_exp)
    int64 = int  # truncation toward zero, as numba's float -> int64

    def __getattr__(self, name):
        return getattr(np, name)


_GLOBALS = {id(begin_row): _begin_row, id(prefetch): _prefetch, id(float_bits): _float_bits,
            id(np): _Numpy()}
_TWINS = {}


def _rebind(value):
    if isinstance(value, Dispatcher):
        return twin(value)
    if id(value) in _GLOBALS:
        return _GLOBALS[id(value)]
    if isinstance(value, _Intrinsic):
        raise TypeError(f"no Python twin for the numba intrinsic {value._name!r}")
    return value


def twin(kernel):
    """The Python twin of the jitted ``kernel`` (built once, then cached)."""
    if kernel in _TWINS:
        return _TWINS[kernel]
    func = kernel.py_func
    namespace = dict(func.__globals__)
    for name in func.__code__.co_names:
        if name in namespace:
            namespace[name] = _rebind(namespace[name])
    closure = func.__closure__
    if closure is not None:
        closure = tuple(types.CellType(_rebind(cell.cell_contents)) for cell in closure)
    twin_func = types.FunctionType(
        func.__code__, namespace, func.__name__, func.__defaults__, closure
    )
    twin_func.__doc__ = func.__doc__
    _TWINS[kernel] = twin_func
    return twin_func


def kernel_for(kernel, rng, n, max_n=MAX_LABELS):
    """``kernel``, or its twin for ``n <= max_n`` units of work (labels,
    draws) from a numpy ``Generator`` while this process has not loaded the
    compiled kernel (then it is the faster one). Keyed sources always run
    compiled: they are the labels party's bulk path."""
    if n <= max_n and isinstance(rng, np.random.Generator) and not kernel.overloads:
        return twin(kernel)
    return kernel
