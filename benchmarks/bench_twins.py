"""Cost of the Python twins of the sampling kernels at their size thresholds.

Run: OMP_NUM_THREADS=1 python benchmarks/bench_twins.py

For each path a small call may interpret (``skdp_label._kernels._twin``), the
CPU seconds of one call at the threshold size (``MAX_DRAWS`` noise draws or
``MAX_LABELS`` labels) through the twin, and through the compiled kernel once
it is loaded; the first compiled call (compiling, or loading from the numba
cache; kernels share callees, so later paths pay less) is timed separately.
The twin pays per label every call; the compiled kernel pays its compile
(cold cache) or its load (warm cache) once a process. On a shared machine
only ratios measured in one run mean much.
"""

import sys
import time

import numpy as np

from skdp_label._kernels import _sampling as S
from skdp_label._kernels import _twin
from skdp_label.mechanisms.bins._sampling import BinLookup
from skdp_label.mechanisms.rp_with_prior._interval import sample_labels


_USE_TWIN = [True]


def _pick(kernel, *args):
    return _twin.twin(kernel) if _USE_TWIN[0] else kernel


def _install():
    """Route every module's ``kernel_for`` through ``_USE_TWIN``, whatever the size."""
    for module in list(sys.modules.values()):
        if getattr(module, "kernel_for", None) is _twin.kernel_for and module is not _twin:
            module.kernel_for = _pick


def _paths():
    nd, nl = _twin.MAX_DRAWS, _twin.MAX_LABELS
    gen = np.random.default_rng(0)
    y = gen.uniform(0.0, 50.0, nl)
    values = np.linspace(0.0, 50.0, 51)
    matrix = gen.random((51, 51)) ** 4
    tables = S.categorical_tables(matrix / matrix.sum(axis=1, keepdims=True))
    grid = S.rounding_grid(values)
    codes = gen.integers(0, 51, nl)
    rr = S.rr_constants(51, 0.7)
    bins = BinLookup(values, np.arange(51) // 5)
    stairs = S.staircase_constants(0.2, 5, 3)
    return [
        ("discrete Laplace, rate 1", nd, lambda r: S.staircase_noise(r, 1.0, 1, 1, size=nd)),
        ("discrete Laplace, rate 2**-12", nd,
         lambda r: S.staircase_noise(r, 2.0**-12, 1, 1, size=nd)),
        ("staircase (width 5)", nl,
         lambda r: S.staircase_additive(y, r, 1.0, stairs, True, 0.0, 50.0)),
        ("rows: codes, tables", nl, lambda r: S.sample_rows(r, values, codes=codes, tables=tables)),
        ("rows: codes, RR", nl, lambda r: S.sample_rows(r, values, codes=codes, rr=rr)),
        ("rows: rounding, tables", nl,
         lambda r: S.sample_rows(r, values, y=y, grid=grid, tables=tables)),
        ("rows: rounding, RR", nl, lambda r: S.sample_rows(r, values, y=y, grid=grid, rr=rr)),
        ("RR on integers", nl, lambda r: S.randomized_response_contiguous(codes, r, 0, 51, rr)),
        ("RR-on-Bins", nl, lambda r: bins.sample(y, r, np.arange(11.0), 0.5)),
        ("RP-with-prior", nl, lambda r: sample_labels(y, 1.0, 5, 45, 3, 1.0, r)),
    ]


def _cpu(f):
    t = time.process_time()
    f(np.random.default_rng(1))
    return time.process_time() - t


def main():
    print(f"MAX_DRAWS = {_twin.MAX_DRAWS}, MAX_LABELS = {_twin.MAX_LABELS}; CPU seconds a call")
    print(f"{'path':<32}{'size':>7}{'twin':>9}{'us/unit':>9}{'first compiled':>16}{'compiled':>10}")
    _install()
    for name, size, call in _paths():
        _USE_TWIN[0] = True
        twin = min(_cpu(call) for _ in range(3))
        _USE_TWIN[0] = False
        first = _cpu(call)
        compiled = min(_cpu(call) for _ in range(3))
        print(f"{name:<32}{size:>7}{twin:>9.3f}{twin / size * 1e6:>9.2f}"
              f"{first:>16.3f}{compiled:>10.4f}")


if __name__ == "__main__":
    main()
