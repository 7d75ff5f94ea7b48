"""Numba kernels: the hot loops of sampling and optimisation (private)."""

import numba

if numba.config.DISABLE_JIT:
    # With the JIT off, numba hands back the plain functions: the kernels'
    # intrinsics and overloads (float_bits, begin_row, ...) then fail when
    # called, which is after a mechanism has charged its budget.
    raise ImportError(
        "skdp_label needs numba's JIT, but NUMBA_DISABLE_JIT is set: its samplers rely on "
        "compiled intrinsics, and a fit would fail only after spending privacy budget. "
        "Unset NUMBA_DISABLE_JIT."
    )
