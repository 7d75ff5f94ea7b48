"""Optimal bins of RR-on-Bins (paper 000, Algorithm 2), exact and fast.

Notation. Labels ``y_1 < ... < y_K`` with prior masses ``p_t > 0`` (labels of
zero mass are left out of the optimisation, see :func:`optimal_bins`),
``lam = e^eps - 1``. RR-on-Bins with ``m`` bins ``S_1, ..., S_m`` (intervals
of the sorted labels) and bin values ``b_1, ..., b_m`` keeps ``Phi(y)`` with
probability ``e^eps / (e^eps + m - 1)`` and outputs each other bin value with
probability ``1 / (e^eps + m - 1)``, so its expected loss is

    L = sum_j [F(b_j) + lam * G_j(b_j)] / (lam + m),
    F(b) = sum_t p_t l(b, y_t),   G_j(b) = sum_{t in S_j} p_t l(b, y_t).

The cost of a bin, ``c(S) = min_b F(b) + lam * G_S(b)``, does not depend on
``m``: it is the ``L[r][i]`` of Algorithm 2, and ``A[k][m]`` is the least
total cost of ``m`` bins. Algorithm 2 fills ``A`` for every ``m``, which is
``O(k^3)``. We minimise the ratio ``N(P) / (lam + |P|)`` over partitions
``P`` directly by Dinkelbach's method: for a trial value ``t``,

    Q(t) = min_P  sum_{S in P} (c(S) - t)  -  t * lam

is a one-dimensional dynamic program over the sorted labels with no bound on
the number of bins (``O(k^2)``, no ``m`` dimension). ``Q`` is concave and
decreasing, the optimal loss is its root, and the iteration
``t <- N(P_t) / (lam + |P_t|)`` strictly decreases ``t`` until ``Q(t) = 0``;
as there are finitely many partitions it stops, exactly, after a few steps
(superlinear convergence). The result is the optimum of Algorithm 2 over all
numbers of bins: no bound on the number of bins is used, and there is no
loop over ``m``. For more than 512 labels the iteration first runs on
partitions with edges on a grid of 512 positions (cheap), so that the exact
iteration starts close to the optimum and usually needs two full dynamic
programs: one that reaches the optimum and one that proves it
(``Q(t) = 0``). Each full program is ``O(k^2)`` bin costs at worst, each
``O(1)`` (amortised ``O(1)`` for the weighted median of the absolute loss).

Pruning (exact): ``c`` grows with the bin (``G_S`` is a sum of non-negative
terms), so while scanning the left end ``r`` of the last bin from right to
left, once ``min(E[0..r-1]) + c([r, i)) - t`` reaches the best value found,
no longer bin can do better and the scan stops.

Why not Knuth / divide-and-conquer / SMAWK per number of bins: those need
the quadrangle inequality ``c(a,c) + c(b,d) <= c(a,d) + c(b,c)``, which this
cost does *not* satisfy (the ``F`` term couples every bin to the whole prior;
on random priors of 4 to 8 labels it fails in about 9% of the quadruples for
the squared loss, by up to 64% of ``c(a,d)``), so they would not be exact.

Numerics. Bin statistics come from prefix sums of *centred* labels
(``z = y - mean``), accumulated with Neumaier compensation, and every cost is
written so that no large terms cancel: the squared cost is
``Var + lam * V_S + lam w / (1 + lam w) * (m_S - mu)^2`` with ``V_S`` the
within-bin sum of squares; the Poisson cost uses the deviance (it differs
from ``b - y log b`` by a function of ``y`` alone, so the optimum is the same)
in its Bregman form with ``log1p``-based series.
"""

import math

import numba
import numpy as np
from numba import types
from numba.extending import overload

from ..._kernels._twin import call_exact, twin

__all__ = ["optimal_bins", "solve_support", "BinSolution", "LOSS_CODES", "expected_loss"]

LOSS_CODES = {"squared": 0, "absolute": 1, "poisson": 2}
_GENERIC = 3
_MAX_ITER = 200
# Bin costs the solver's kernels evaluate interpreted (call_exact: the same
# float operations, ~3-9 us each) before they compile: a dynamic program over
# G positions counts G (G + 1) / 2, an upper bound on the costs it evaluates.
# RR-on-Bins over 51 labels needs ~4,000 (0.01-0.04 s); with a cold numba
# cache the allowance is COLD_SCALE times larger (at most ~0.5 s against
# ~1.5 s to compile both kernels).
_MAX_COSTS = 10_000


# --------------------------------------------------------------------------
# numerically careful elementary functions
# --------------------------------------------------------------------------
# Series coefficients near 0 (|x| < 1e-2, 12 terms: error below 1e-26 x^2):
# x - log1p(x) = sum_{n>=2} (-1)^n x^n / n,
# (1 + x) log1p(x) - x = sum_{n>=2} (-1)^n x^n / (n (n - 1)).
_PHI_COEF = np.array([(-1.0) ** n / n for n in range(2, 14)])
_PSI_COEF = np.array([(-1.0) ** n / (n * (n - 1)) for n in range(2, 14)])


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _series(coef, x):
    acc = coef[coef.shape[0] - 1]
    for n in range(coef.shape[0] - 2, -1, -1):
        acc = acc * x + coef[n]
    return acc * x * x


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _phi_log1p(x):
    """(x - log1p(x), log1p(x)) for x >= -1, the first without cancellation."""
    if abs(x) < 1e-2:
        s = _series(_PHI_COEF, x)
        return s, x - s
    lg = math.log1p(x)
    return x - lg, lg


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _psi(x):
    """(1 + x) log(1 + x) - x, x >= -1, without cancellation near 0."""
    if x <= -1.0:
        return 1.0
    if abs(x) < 1e-2:
        return _series(_PSI_COEF, x)
    return (1.0 + x) * math.log1p(x) - x


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _psi_array(x):
    out = np.empty(x.shape[0])
    for i in range(x.shape[0]):
        out[i] = _psi(x[i])
    return out


@numba.njit(cache=True, nogil=True, error_model="numpy")
def _compensated_prefix(x):
    """Prefix sums [0, x0, x0 + x1, ...] with Neumaier compensation."""
    out = np.empty(x.shape[0] + 1)
    s = 0.0
    comp = 0.0
    out[0] = 0.0
    for i in range(x.shape[0]):
        v = x[i]
        t = s + v
        if abs(s) >= abs(v):
            comp += (s - t) + v
        else:
            comp += (v - t) + s
        s = t
        out[i + 1] = s + comp
    return out


# Below this many values the prefix sums run interpreted: the same floating-point
# operations in the same order (about 10 ms at 4,096), and no kernel to compile in a
# first fit.
_INTERPRETED_PREFIX = 4096


def _prefix_sums(x):
    """:func:`_compensated_prefix` of the float64 array ``x``."""
    x = np.ascontiguousarray(x, dtype=np.float64)
    if x.shape[0] < _INTERPRETED_PREFIX:
        return _compensated_prefix.py_func(x)
    return _compensated_prefix(x)


# --------------------------------------------------------------------------
# bin costs c([r, i)) for the built-in losses, O(1) each
# --------------------------------------------------------------------------
# Arrays: P, Z1, Z2 prefix sums (length K + 1) of p, p*z, and p*z^2 (squared)
# or p*h_c(y) (Poisson); z the centred labels; Fv the global loss F at each
# label (absolute). par = [ptot, mu_c, const, centre].


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _cost_squared(r, i, lam, P, Z1, Z2, par):
    w = P[i] - P[r]
    if w <= 0.0:
        # Mass below the resolution of the prefix sums: the bin adds nothing.
        return par[2]
    s1 = Z1[i] - Z1[r]
    m = s1 / w
    within = Z2[i] - Z2[r] - s1 * m
    if within < 0.0:
        within = 0.0
    d = m - par[1]
    return par[2] + lam * within + (par[0] * lam * w) / (par[0] + lam * w) * d * d


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _cost_poisson(r, i, lam, P, Z1, Z2, par):
    # Deviance, with h_c(y) = y log(y / c) - (y - c) (prefix sums in Z2):
    #   F_dev(v)   = H_all + ptot c phi(x) - ptot mu_c log1p(x),
    #   G_dev,S(v) = H_S + w (c phi(x) - (m_S - c) log1p(x)),   x = (v - c) / c,
    # phi(x) = x - log1p(x): every term is of the order of the deviance itself
    # (no large terms cancel), and one log1p serves both.
    ptot = par[0]
    mu_c = par[1]
    c = par[3]
    w = P[i] - P[r]
    s1 = Z1[i] - Z1[r]
    if w <= 0.0:  # mass below the resolution of the prefix sums
        w = 0.0
        s1 = 0.0
        dm = 0.0
    else:
        dm = s1 / w  # m_S - c
    dv = (ptot * mu_c + lam * s1) / (ptot + lam * w)  # v - c
    phi, lg = _phi_log1p(dv / c)
    bin_term = (Z2[i] - Z2[r]) + w * (c * phi - dm * lg)
    if bin_term < 0.0:
        bin_term = 0.0
    return par[2] + ptot * (c * phi - mu_c * lg) + lam * bin_term


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _abs_cum(j, r, i, lam, P):
    """Weight of labels <= y_j under weights p_t (1 + lam [t in [r, i)])."""
    a = j + 1
    if a < r:
        a = r
    if a > i:
        a = i
    return P[j + 1] + lam * (P[a] - P[r])


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _abs_median(r, i, j, lam, P):
    """Weighted median index, starting the search at ``j`` (amortised O(1))."""
    K = P.shape[0] - 1
    half = 0.5 * (P[K] + lam * (P[i] - P[r]))
    while j < K - 1 and _abs_cum(j, r, i, lam, P) < half:
        j += 1
    while j > 0 and _abs_cum(j - 1, r, i, lam, P) >= half:
        j -= 1
    return j


@numba.njit(cache=True, nogil=True, error_model="numpy", inline="always")
def _abs_value_at(j, r, i, lam, P, Z1, z, Fv):
    a = j + 1
    if a < r:
        a = r
    if a > i:
        a = i
    zj = z[j]
    g = zj * (P[a] - P[r]) - (Z1[a] - Z1[r]) + (Z1[i] - Z1[a]) - zj * (P[i] - P[a])
    return Fv[j] + lam * g


# --------------------------------------------------------------------------
# the penalised partition DP (inner step of Dinkelbach)
# --------------------------------------------------------------------------
def _cost(code, r, i, j, lam, P, Z1, Z2, z, Fv, par, cmat):
    """(cost of bin [r, i), updated median pointer) for the loss ``code``.

    In the kernels, ``code`` is a compile-time constant and the overload
    below picks one impl while typing; in their Python twins (call_exact)
    this function runs the same impl interpreted.
    """
    if code == 0:
        return twin(_cost_squared, raising=True)(r, i, lam, P, Z1, Z2, par), j
    if code == 1:
        j = twin(_abs_median, raising=True)(r, i, j, lam, P)
        return twin(_abs_value_at, raising=True)(j, r, i, lam, P, Z1, z, Fv), j
    if code == 2:
        return twin(_cost_poisson, raising=True)(r, i, lam, P, Z1, Z2, par), j
    return cmat[r, i], j


@overload(_cost, inline="always", prefer_literal=True)
def _cost_overload(code, r, i, j, lam, P, Z1, Z2, z, Fv, par, cmat):
    # Resolved while typing, from the literal ``code``: a kernel types and
    # compiles only its own loss's cost (a runtime dispatch compiled all four
    # into every kernel: two thirds of RR-on-Bins' cold start).
    if not isinstance(code, types.IntegerLiteral):
        return None
    loss = code.literal_value
    if loss == 0:
        def impl(code, r, i, j, lam, P, Z1, Z2, z, Fv, par, cmat):
            return _cost_squared(r, i, lam, P, Z1, Z2, par), j
    elif loss == 1:
        def impl(code, r, i, j, lam, P, Z1, Z2, z, Fv, par, cmat):
            j = _abs_median(r, i, j, lam, P)
            return _abs_value_at(j, r, i, lam, P, Z1, z, Fv), j
    elif loss == 2:
        def impl(code, r, i, j, lam, P, Z1, Z2, z, Fv, par, cmat):
            return _cost_poisson(r, i, lam, P, Z1, Z2, par), j
    else:
        def impl(code, r, i, j, lam, P, Z1, Z2, z, Fv, par, cmat):
            return cmat[r, i], j
    return impl


def _loss_kernels(code):
    """(dynamic program, partition cost and bin values) of the loss ``code``.

    ``code`` is a constant of the closures (their numba cache key includes
    it): each loss's kernels compile on the first fit that uses that loss,
    with no branch on the loss inside the loops (a runtime branch in the DP
    makes it 20 times slower).
    """

    @numba.njit(cache=True, nogil=True, error_model="numpy")
    def penalized_partition(t, lam, P, Z1, Z2, z, Fv, par, cmat, prune, pos, prev):
        """min over partitions of sum (c(S) - t); fills ``prev`` (bin starts).

        Bins may start and end only at the label positions ``pos`` (increasing,
        from 0 to K): ``pos = arange(K + 1)`` is the exact problem, a subset a
        coarse one. ``prev[a]`` is the index in ``pos`` where the last bin of the
        best partition of ``[0, pos[a])`` starts.

        Returns the minimum. ``prune`` may be used only when c grows with the bin.
        """
        G = pos.shape[0] - 1
        E = np.empty(G + 1)
        pmin = np.empty(G + 1)  # pmin[b] = min(E[0..b])
        E[0] = 0.0
        pmin[0] = 0.0
        j = 0
        for a in range(1, G + 1):
            i = pos[a]
            best = np.inf
            arg = a - 1
            for b in range(a - 1, -1, -1):
                c, j = _cost(code, pos[b], i, j, lam, P, Z1, Z2, z, Fv, par, cmat)
                val = E[b] + c - t
                if val < best:
                    best = val
                    arg = b
                if prune and b > 0 and pmin[b - 1] + c - t >= best:
                    break
            E[a] = best
            prev[a] = arg
            pmin[a] = best if best < pmin[a - 1] else pmin[a - 1]
        return E[G]

    @numba.njit(cache=True, nogil=True, error_model="numpy")
    def partition_cost(starts, lam, P, Z1, Z2, z, Fv, par, cmat, centre_values, values):
        """Sum of the bin costs of the partition with bin starts ``starts``;
        fills ``values`` with each bin's optimal value: the weighted mean
        (squared, Poisson) or weighted median (absolute) under weights
        p_t (1 + lam [t in bin]). One kernel for both: a compiled function
        costs a fixed share of a cold start."""
        K = P.shape[0] - 1
        total = 0.0
        j = 0
        for b in range(starts.shape[0]):
            r = starts[b]
            i = starts[b + 1] if b + 1 < starts.shape[0] else K
            c, j = _cost(code, r, i, j, lam, P, Z1, Z2, z, Fv, par, cmat)
            total += c
            if code == 1:
                values[b] = centre_values[j]  # the median _cost has just found
            else:
                w = P[i] - P[r]
                s1 = Z1[i] - Z1[r]
                values[b] = par[3] + (par[0] * par[1] + lam * s1) / (par[0] + lam * w)
        return total

    return penalized_partition, partition_cost


# Created at import, compiled on first use (per loss).
_LOSS_KERNELS = tuple(_loss_kernels(code) for code in (0, 1, 2, _GENERIC))


def _starts_from_prev(prev):
    K = prev.shape[0] - 1
    starts = []
    i = K
    while i > 0:
        i = int(prev[i])
        starts.append(i)
    return np.array(starts[::-1], dtype=np.int64)


# --------------------------------------------------------------------------
# preparation of the prefix sums
# --------------------------------------------------------------------------
class _Problem:
    """Prefix sums and constants of one (labels, prior, loss) problem."""

    def __init__(self, ys, ps, code):
        self.code = code
        self.ys = ys
        K = ys.shape[0]
        ptot = float(ps.sum())
        # Centre: the prior mean, refined once (two-pass).
        c = float(np.dot(ps, ys) / ptot)
        c += float(np.dot(ps, ys - c) / ptot)
        z = ys - c
        # Non-decreasing, so that no bin gets a negative mass from rounding.
        P = np.maximum.accumulate(_prefix_sums(ps))
        Z1 = _prefix_sums(ps * z)
        mu_c = Z1[K] / ptot
        empty = np.zeros(0)
        self.z = z
        self.Z2 = empty
        self.Fv = empty
        if code == 0:
            self.Z2 = _prefix_sums(ps * z * z)
            const = float(np.dot(ps, (z - mu_c) ** 2))
        elif code == 2:
            if c <= 0.0:
                raise ValueError("the Poisson loss needs a prior with positive mean.")
            h = c * call_exact(_psi_array, K, _MAX_COSTS, z / c)
            self.Z2 = _prefix_sums(ps * h)
            const = float(self.Z2[K])
        elif code == 1:
            # F at each label, sum_t p_t |y_j - y_t|, by a stable recurrence.
            gaps = np.diff(ys)
            Fv = np.empty(K)
            Fv[0] = float(np.dot(ps, ys - ys[0]))
            Fv[1:] = Fv[0] + np.cumsum(gaps * (2.0 * P[1:K] - ptot))
            self.Fv = Fv
            const = 0.0
        else:
            const = 0.0
        self.P = P
        self.Z1 = Z1
        self.par = np.array([ptot, mu_c, const, c])

    def args(self, lam, cmat):
        return (lam, self.P, self.Z1, self.Z2, self.z, self.Fv, self.par, cmat)


# --------------------------------------------------------------------------
# generic convex loss: bin costs by vectorised golden-section search
# --------------------------------------------------------------------------
_GOLDEN = (math.sqrt(5.0) - 1.0) / 2.0


def _generic_costs(ys, ps, lam, loss, chunk_elems=2_000_000):
    """Cost matrix C[r, i] (and minimisers) of every bin [r, i) for a callable.

    Each bin's objective F(b) + lam * G(b) is convex; golden-section search on
    [y_1, y_K] (where Assumption 4 puts the minimum) down to a 1e-12 relative
    bracket, then the best of the bracket midpoint and the labels next to it.
    """
    K = ys.shape[0]
    rr, ii = np.triu_indices(K + 1, k=1)
    cmat = np.full((K + 1, K + 1), np.inf)
    vmat = np.full((K + 1, K + 1), np.nan)
    step = max(1, chunk_elems // K)
    lo0, hi0 = float(ys[0]), float(ys[-1])

    def objective(v, r, i):
        vals = np.asarray(loss(v[:, None], ys[None, :]), dtype=np.float64) * ps
        cs = np.concatenate([np.zeros((v.shape[0], 1)), np.cumsum(vals, axis=1)], axis=1)
        rows = np.arange(v.shape[0])
        return cs[:, K] + lam * (cs[rows, i] - cs[rows, r])

    n_iter = int(math.ceil(math.log(1e-12) / math.log(_GOLDEN)))
    for s in range(0, rr.shape[0], step):
        r, i = rr[s : s + step], ii[s : s + step]
        lo = np.full(r.shape[0], lo0)
        hi = np.full(r.shape[0], hi0)
        x1 = hi - _GOLDEN * (hi - lo)
        x2 = lo + _GOLDEN * (hi - lo)
        f1, f2 = objective(x1, r, i), objective(x2, r, i)
        for _ in range(n_iter):
            left = f1 <= f2
            hi = np.where(left, x2, hi)
            lo = np.where(left, lo, x1)
            x2n = np.where(left, x1, lo + _GOLDEN * (hi - lo))
            x1n = np.where(left, hi - _GOLDEN * (hi - lo), x2)
            f2n = np.where(left, f1, np.nan)
            f1n = np.where(left, np.nan, f2)
            need1, need2 = left, ~left
            if need1.any():
                f1n[need1] = objective(x1n[need1], r[need1], i[need1])
            if need2.any():
                f2n[need2] = objective(x2n[need2], r[need2], i[need2])
            x1, x2, f1, f2 = x1n, x2n, f1n, f2n
        mid = 0.5 * (lo + hi)
        k_lo = np.clip(np.searchsorted(ys, mid) - 1, 0, K - 1)
        k_hi = np.clip(k_lo + 1, 0, K - 1)
        cands = [mid, ys[k_lo], ys[k_hi]]
        vals = np.stack([objective(v, r, i) for v in cands])
        best = np.argmin(vals, axis=0)
        cmat[r, i] = vals[best, np.arange(r.shape[0])]
        vmat[r, i] = np.stack(cands)[best, np.arange(r.shape[0])]
    return cmat, vmat


# --------------------------------------------------------------------------
# driver
# --------------------------------------------------------------------------
class BinSolution:
    """Optimal RR-on-Bins over the support of a prior.

    Attributes
    ----------
    starts : ndarray of int
        Index (into the support labels) where each bin starts.
    values : ndarray
        Value of each bin, increasing.
    ratio : float
        The optimum of the ratio the solver minimises: the expected loss for
        the squared and absolute losses and a callable, the expected Poisson
        *deviance* for ``'poisson'``.
    n_iter : int
        Dinkelbach steps (dynamic programs solved).
    """

    def __init__(self, starts, values, ratio, n_iter):
        self.starts = starts
        self.values = values
        self.ratio = ratio
        self.n_iter = n_iter


def solve_support(ys, ps, epsilon, loss="squared", coarse=512):
    """Optimal bins for labels ``ys`` (sorted, distinct) with masses ``ps > 0``.

    ``loss`` is ``'squared'``, ``'absolute'``, ``'poisson'`` or a callable
    ``loss(yhat, y)`` (numpy broadcasting) convex in ``yhat``. For more than
    ``coarse`` labels, Dinkelbach first runs on partitions whose bin edges lie
    on a grid of ``coarse`` positions (cheap), which gives a starting value
    close to the optimum; the exact iteration then usually needs two full
    dynamic programs (one to reach the optimum, one to prove it).
    """
    ys = np.ascontiguousarray(ys, dtype=np.float64)
    ps = np.ascontiguousarray(ps, dtype=np.float64)
    K = ys.shape[0]
    lam = math.expm1(epsilon)
    code = LOSS_CODES.get(loss, _GENERIC) if isinstance(loss, str) else _GENERIC
    prob = _Problem(ys, ps, code)
    if code == _GENERIC:
        cmat, vmat = _generic_costs(ys, ps, lam, loss)
    else:
        cmat = np.zeros((0, 0))
    args = prob.args(lam, cmat)
    prune = code != _GENERIC
    penalized_partition, partition_cost = _LOSS_KERNELS[code]

    def ratio_of(starts, values=None):
        if values is None:
            values = np.empty(starts.shape[0])
        total = call_exact(partition_cost, starts.shape[0], _MAX_COSTS, starts, *args, ys, values)
        return total / (lam + starts.shape[0])

    # Start from the better of one bin and one bin per label.
    candidates = [np.zeros(1, dtype=np.int64), np.arange(K, dtype=np.int64)]
    ratios = [ratio_of(s) for s in candidates]
    if any(math.isnan(r) for r in ratios):
        raise FloatingPointError("RR-on-Bins: a bin cost evaluated to NaN.")
    best = int(np.argmin(ratios))
    state = [candidates[best], ratios[best], 0]

    def dinkelbach(pos):
        prev = np.zeros(pos.shape[0], dtype=np.int64)
        for _ in range(_MAX_ITER):
            state[2] += 1
            g = pos.shape[0] - 1
            call_exact(penalized_partition, g * (g + 1) // 2, _MAX_COSTS,
                       state[1], *args, prune, pos, prev)
            new_starts = pos[_starts_from_prev(prev)]
            new_t = ratio_of(new_starts)
            if math.isnan(new_t):
                raise FloatingPointError("RR-on-Bins: a bin cost evaluated to NaN.")
            if not new_t < state[1] - 4e-16 * abs(state[1]):
                return
            state[0], state[1] = new_starts, new_t

    if K > coarse:
        dinkelbach(np.unique(np.linspace(0, K, coarse + 1).round().astype(np.int64)))
    dinkelbach(np.arange(K + 1, dtype=np.int64))
    starts, t, n_iter = state
    if code == _GENERIC:
        ends = np.append(starts[1:], K)
        values = vmat[starts, ends]
    else:
        values = np.empty(starts.shape[0])
        ratio_of(starts, values)
    return BinSolution(starts, values, float(t), n_iter)


def _loss_function(loss):
    if callable(loss):
        return loss
    if loss == "squared":
        return lambda yhat, y: (yhat - y) ** 2
    if loss == "absolute":
        return lambda yhat, y: np.abs(yhat - y)
    if loss == "poisson":
        return _poisson_loss
    raise ValueError(f"unknown loss {loss!r}")


def _poisson_loss(yhat, y):
    """yhat - y log(yhat), with 0 log 0 = 0."""
    yhat, y = np.broadcast_arrays(np.asarray(yhat, float), np.asarray(y, float))
    with np.errstate(divide="ignore", invalid="ignore"):
        out = yhat - np.where(y == 0, 0.0, y * np.log(yhat))
    return out


def optimal_bins(values, probs, epsilon, loss="squared"):
    """Optimal RR-on-Bins (000, Thm. 5 / Alg. 2) for a prior over ``values``.

    Parameters
    ----------
    values : ndarray of shape (k,)
        Sorted, distinct label values.
    probs : ndarray of shape (k,)
        Prior masses (non-negative, positive sum).
    epsilon : float
    loss : {'squared', 'absolute', 'poisson'} or callable

    Returns
    -------
    bin_values : ndarray of shape (m,)
        Output values, increasing.
    bin_map : ndarray of int of shape (k,)
        Bin index of every value. Values of zero prior mass do not affect the
        loss; they go to the bin whose value has the least loss for them.
    solution : BinSolution
    """
    values = np.asarray(values, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    support = np.flatnonzero(probs > 0)
    ys = values[support]
    ps = probs[support] / probs[support].sum()
    sol = solve_support(ys, ps, epsilon, loss) if ys.size > 1 else None
    if sol is None:
        # One label carries all the mass: one bin, at the loss minimiser.
        bin_values = _single_label_value(ys[0], values, loss)
        sol = BinSolution(np.zeros(1, dtype=np.int64), bin_values, 0.0, 0)
    bin_values = sol.values
    bin_map = _nearest_bins(values, bin_values, _loss_function(loss))
    ends = np.append(sol.starts[1:], ys.size)
    bin_map[support] = np.repeat(np.arange(sol.starts.size), ends - sol.starts)
    return bin_values, bin_map, sol


def _single_label_value(y0, values, loss):
    if isinstance(loss, str):
        return np.array([y0])
    # A callable's minimiser of l(., y0) on [min, max] of the domain.
    from scipy.optimize import minimize_scalar

    f = _loss_function(loss)
    lo, hi = float(values[0]), float(values[-1])
    if lo == hi:
        return np.array([y0])
    res = minimize_scalar(
        lambda v: float(f(np.array([v]), np.array([y0]))[0]),
        bounds=(lo, hi),
        method="bounded",
        options={"xatol": 1e-12 * max(1.0, hi - lo)},
    )
    cand = np.array([res.x, y0])
    return cand[[int(np.argmin(f(cand, np.array([y0, y0]))))]]


def _nearest_bins(values, bin_values, f):
    """Bin whose value has the least loss, among the two neighbours of y.

    For losses with l(., y) decreasing below y and increasing above it
    (Assumption 4), the least-loss value among sorted bin values is one of the
    two around y.
    """
    m = bin_values.shape[0]
    hi = np.clip(np.searchsorted(bin_values, values), 0, m - 1)
    lo = np.clip(hi - 1, 0, m - 1)
    with np.errstate(divide="ignore", invalid="ignore"):
        l_lo = np.asarray(f(bin_values[lo], values), dtype=np.float64)
        l_hi = np.asarray(f(bin_values[hi], values), dtype=np.float64)
    l_lo = np.where(np.isnan(l_lo), np.inf, l_lo)
    l_hi = np.where(np.isnan(l_hi), np.inf, l_hi)
    return np.where(l_hi < l_lo, hi, lo).astype(np.int64)


def expected_loss(values, probs, bin_values, matrix, loss):
    """E l(yhat, y) for y ~ probs and yhat ~ matrix[y] over bin_values.

    Terms with zero prior mass or zero probability are skipped (so that, for
    the Poisson loss, 0 * log 0 never produces NaN).
    """
    f = _loss_function(loss)
    rows = np.flatnonzero(probs > 0)
    with np.errstate(divide="ignore", invalid="ignore"):
        table = np.asarray(f(bin_values[None, :], values[rows, None]), dtype=np.float64)
    weights = probs[rows, None] * matrix[rows]
    table = np.where(weights > 0, table, 0.0)
    return float(np.sum(weights * table))
