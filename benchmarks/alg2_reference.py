"""Plain implementations of 000's Algorithm 2, for tests and benchmarks.

Written from the paper, independently of the library's solver:

* ``bin_loss_table`` fills ``L[r][i] = min_yhat sum_y p_y e^{eps [y in
  [y^r, y^i]]} l(yhat, y)`` by direct sums over all labels (weighted mean for
  the squared and Poisson losses, weighted median found by trying every label
  for the absolute loss, scipy's bounded scalar minimiser for a callable).
* ``alg2`` runs the dynamic program ``A[i][j] = min_r A[r][j-1] + L[r+1][i]``
  for every ``i`` and ``j`` (``O(k^3)``; the min over ``r`` vectorised with
  numpy) and returns ``min_d A[k][d] / (d - 1 + e^eps)`` with its bins.
* ``alg2_numba`` is the same triple loop compiled with numba (the L table for
  the squared loss by App. B's running sums), to separate the algorithmic
  gain from the compiler's in the benchmark.
"""

import math

import numba
import numpy as np


def _loss(loss):
    if callable(loss):
        return loss
    return {
        "squared": lambda yh, y: (yh - y) ** 2,
        "absolute": lambda yh, y: np.abs(yh - y),
        "poisson": lambda yh, y: yh - np.where(y == 0, 0.0, y * np.log(np.maximum(yh, 1e-300))),
    }[loss]


def bin_loss_table(values, probs, eps, loss):
    """L[r, i] (0-based, r <= i) and the minimising yhat, by direct sums."""
    values = np.asarray(values, float)
    probs = np.asarray(probs, float)
    k = values.size
    f = _loss(loss)
    L = np.full((k, k), np.inf)
    V = np.full((k, k), np.nan)
    for r in range(k):
        for i in range(r, k):
            w = probs * np.where((np.arange(k) >= r) & (np.arange(k) <= i), math.exp(eps), 1.0)
            if loss in ("squared", "poisson"):
                yhat = np.dot(w, values) / w.sum()
            elif loss == "absolute":
                objs = [np.dot(w, f(v, values)) for v in values]
                yhat = values[int(np.argmin(objs))]
            else:
                from scipy.optimize import minimize_scalar

                res = minimize_scalar(
                    lambda v: float(np.dot(w, f(v, values))),
                    bounds=(values[0], values[-1]),
                    method="bounded",
                    options={"xatol": 1e-12 * (values[-1] - values[0])},
                )
                yhat = res.x
            L[r, i] = np.dot(w, f(yhat, values))
            V[r, i] = yhat
    return L, V


def alg2_from_table(L, eps):
    """Algorithm 2's DP on a table L; returns (loss, bins as (r, i) pairs)."""
    k = L.shape[0]
    A = np.full((k + 1, k + 1), np.inf)
    arg = np.zeros((k + 1, k + 1), dtype=np.int64)
    A[0, 0] = 0.0
    for i in range(1, k + 1):
        for j in range(1, i + 1):
            # r = 0 .. i-1: A[r][j-1] + L[r+1][i] (1-based) = L[r, i-1] (0-based)
            cand = A[:i, j - 1] + L[:i, i - 1]
            r = int(np.argmin(cand))
            A[i, j] = cand[r]
            arg[i, j] = r
    d = np.arange(1, k + 1)
    ratios = A[k, 1:] / (d - 1 + math.exp(eps))
    best_d = int(np.argmin(ratios)) + 1
    bins = []
    i, j = k, best_d
    while j > 0:
        r = int(arg[i, j])
        bins.append((r, i - 1))
        i, j = r, j - 1
    return float(ratios[best_d - 1]), bins[::-1]


def alg2(values, probs, eps, loss="squared"):
    """Plain Algorithm 2: (optimal expected loss, bins, bin values)."""
    L, V = bin_loss_table(values, probs, eps, loss)
    value, bins = alg2_from_table(L, eps)
    return value, bins, np.array([V[r, i] for r, i in bins])


@numba.njit(cache=True)
def _alg2_squared_numba(values, probs, eps):
    k = values.shape[0]
    ee = math.exp(eps)
    # L[r][i] by App. B's running sums (uncentred, as in the paper).
    t0 = 0.0
    t1 = 0.0
    t2 = 0.0
    for t in range(k):
        t0 += probs[t]
        t1 += probs[t] * values[t]
        t2 += probs[t] * values[t] * values[t]
    L = np.empty((k, k))
    for r in range(k):
        w0, w1, w2 = t0, t1, t2
        for i in range(r, k):
            w0 += (ee - 1.0) * probs[i]
            w1 += (ee - 1.0) * probs[i] * values[i]
            w2 += (ee - 1.0) * probs[i] * values[i] * values[i]
            yhat = w1 / w0
            L[r, i] = w2 - 2.0 * w1 * yhat + w0 * yhat * yhat
    A = np.full((k + 1, k + 1), np.inf)
    A[0, 0] = 0.0
    for i in range(1, k + 1):
        for j in range(1, i + 1):
            best = np.inf
            for r in range(0, i):
                v = A[r, j - 1] + L[r, i - 1]
                if v < best:
                    best = v
            A[i, j] = best
    best = np.inf
    for d in range(1, k + 1):
        v = A[k, d] / (d - 1 + ee)
        if v < best:
            best = v
    return best


def alg2_numba(values, probs, eps):
    """Algorithm 2 for the squared loss as a compiled triple loop (loss only)."""
    return _alg2_squared_numba(np.asarray(values, float), np.asarray(probs, float), float(eps))
