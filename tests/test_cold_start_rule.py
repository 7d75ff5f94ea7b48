"""Deterministic kernels interpreted for a cold start (``_twin.call_exact``).

* RR-on-Bins' solver kernels (the penalised-partition DP and the partition
  cost, compiled with numpy's error model) run interpreted return the
  compiled solution bit for bit: bin starts, bin values and the optimal
  ratio, for every loss (squared, absolute, Poisson, a callable), with and
  without the coarse grid.
* Where the interpreted kernel raises (a division by zero numba carries as
  inf), call_exact reruns the call compiled and returns the compiled
  result; the sampling twins still refuse numpy's error model.
* A deliberately wrong bin cost in the interpreted path is caught by the
  same comparison (mutation).
* The caps are those of kernel_for: interpreted while the bin costs stay
  within the allowance, compiled after.
"""

import math

import numba
import numpy as np
import pytest

from skdp_label._kernels import _twin
from skdp_label.mechanisms.bins import _solver as B


def _same(a, b):
    return np.array_equal(np.asarray(a, np.float64).view(np.int64),
                          np.asarray(b, np.float64).view(np.int64))


def _interpreted(kernel, n, max_n, *args):
    with np.errstate(all="raise", under="ignore"):  # no fallback: the twin must run through
        return _twin.twin(kernel, raising=True)(*args)


def _compiled(kernel, n, max_n, *args):
    return kernel(*args)


def _solve(monkeypatch, call, ys, ps, epsilon, loss, coarse):
    with monkeypatch.context() as m:
        m.setattr(B, "call_exact", call)
        return B.solve_support(ys, ps, epsilon, loss, coarse=coarse)


def _prior(seed, k):
    rng = np.random.default_rng(seed)
    ys = np.sort(rng.choice(np.arange(1, 4 * k), k, replace=False)).astype(np.float64)
    return ys, rng.random(k) ** 3 + 1e-3


@pytest.mark.parametrize("loss", ["squared", "absolute", "poisson",
                                  lambda yhat, y: np.abs(yhat - y) ** 1.5])
@pytest.mark.parametrize("k, coarse, epsilon", [(40, 512, 1.0), (70, 16, 0.3), (9, 512, 6.0)])
def test_solver_twins_are_the_kernels(monkeypatch, loss, k, coarse, epsilon):
    ys, ps = _prior(k, k)
    got = _solve(monkeypatch, _interpreted, ys, ps, epsilon, loss, coarse)
    ref = _solve(monkeypatch, _compiled, ys, ps, epsilon, loss, coarse)
    assert np.array_equal(got.starts, ref.starts) and _same(got.values, ref.values)
    assert _same(got.ratio, ref.ratio) and got.n_iter == ref.n_iter
    assert 1 < ref.starts.shape[0] < k  # a nontrivial partition


def test_a_wrong_bin_cost_is_caught(monkeypatch):
    ys, ps = _prior(1, 40)
    ref = _solve(monkeypatch, _compiled, ys, ps, 1.0, "squared", 512)
    cost = B._cost

    def perturbed(*args):
        c, j = cost(*args)
        return c * (1.0 + 2.0**-40), j

    monkeypatch.setattr(_twin, "_TWINS", {})  # twins copy their globals when built
    monkeypatch.setattr(B, "_cost", perturbed)
    got = _solve(monkeypatch, _interpreted, ys, ps, 1.0, "squared", 512)
    assert not _same(got.ratio, ref.ratio)


@numba.njit(error_model="numpy")
def _ratio(x, out):
    for i in range(x.shape[0]):
        out[i] = 1.0 / x[i]
    return out[0]


def test_call_exact_reruns_compiled_where_python_raises(monkeypatch):
    monkeypatch.setattr(_twin, "in_numba_cache", lambda kernel: False)
    with pytest.raises(TypeError, match="no exact Python twin"):
        _twin.twin(_ratio)  # a sampling twin: refused
    kernel = numba.njit(error_model="numpy")(_ratio.py_func)
    out = np.full(3, 7.0)
    assert _twin.call_exact(kernel, 3, 10, np.array([2.0, 4.0, 8.0]), out) == 0.5
    assert not kernel.overloads and _same(out, [0.5, 0.25, 0.125])  # interpreted
    out = np.full(3, 7.0)
    first = _twin.call_exact(kernel, 3, 10, np.array([2.0, 0.0, -0.0]), out)
    assert kernel.overloads  # Python raised at 1 / 0.0: compiled
    assert first == 0.5 and _same(out, [0.5, math.inf, -math.inf])


@pytest.mark.parametrize("in_cache", [True, False])
def test_call_exact_interprets_within_the_caps(monkeypatch, in_cache):
    monkeypatch.setattr(_twin, "in_numba_cache", lambda kernel: in_cache)
    cap = 10 if in_cache else 10 * _twin.COLD_SCALE
    kernel = numba.njit(error_model="numpy")(_ratio.py_func)
    x, out = np.ones(2), np.empty(2)
    _twin.call_exact(kernel, cap, 10, x, out)
    assert not kernel.overloads
    _twin.call_exact(kernel, 1, 10, x, out)
    assert kernel.overloads  # cap + 1 bin costs: compiled


def test_rr_on_bins_of_a_small_prior_compiles_no_solver_kernel(monkeypatch):
    # 51 labels: ~4,000 bin costs, within the allowance even with a warm cache.
    monkeypatch.setattr(_twin, "_INTERPRETED", {})
    monkeypatch.setattr(_twin, "in_numba_cache", lambda kernel: True)
    monkeypatch.setattr(_twin, "_IN_CACHE", {})
    fresh = B._loss_kernels(1)  # not compiled by the other tests
    monkeypatch.setattr(B, "_LOSS_KERNELS", (None, fresh, None, None))
    ys, ps = _prior(2, 51)
    calls = []

    def counting(kernel, n, max_n, *args):
        calls.append((kernel, n))
        return _twin.call_exact(kernel, n, max_n, *args)

    with monkeypatch.context() as m:
        m.setattr(B, "call_exact", counting)
        B.solve_support(ys, ps, 1.0, "absolute")
    kernels = {kernel for kernel, _ in calls}
    assert kernels == set(fresh) and not any(kernel.overloads for kernel in fresh)
    assert sum(n for _, n in calls) <= B._MAX_COSTS
    assert all(_twin._INTERPRETED[kernel] > 0 for kernel in kernels)
