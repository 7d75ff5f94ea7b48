"""Bias-regularised epsilon-DP regression randomizer (paper 001, §6).

The problem: inputs ``y_1 < ... < y_k`` with prior ``p``, a weight
``lam >= 1``; find output values and a transition matrix ``M`` minimising

    E_p[Var(y_hat | y)] + lam * E_p[(E[y_hat | y] - y)^2]

under epsilon-DP, outputs anywhere on the real line. Since
``E[(y_hat - y)^2 | y] = Var + bias^2`` the objective is
``E[(y_hat - y)^2] + c * E[bias^2]`` with ``c = lam - 1 >= 0``: ``lam = 1``
is the squared-loss objective RR-on-Bins solves optimally (paper 000),
``lam -> inf`` forces ``bias = 0``, the optimal unbiased randomizer
(:mod:`._solver`).

Structure (shared with :mod:`._solver`, whose building blocks are used)
-----------------------------------------------------------------------
* Columns are staircase rays ``t_j a_j`` at outputs ``z_j``,
  ``a_S = 1 + (e^eps - 1) 1_S`` with ``S`` an interval of the sorted inputs.
  001 App. B proves that intervals suffice for unbiased mechanisms; its
  Claims 12-13 keep every row's mean and lower ``E[(y_hat - y)^2]``, so
  they lower this objective too, but Claim 14 needs strictly increasing
  means, which biased optima need not have (ties: labels sharing a bin).
  The problem solved is therefore the one over interval rays, and the
  certificate below is over all rays (see "Certificate"). With
  ``s = t z`` the squared loss of a column is the perspective
  ``alpha s^2 / t - 2 beta s + gamma t``, and the row means
  ``m_i = sum_j a_j[i] s_j`` are linear in ``s``: the penalty
  ``c sum_i p_i (m_i - y_i)^2`` is a convex quadratic, and the whole problem
  is convex in ``(t, s)`` for ``lam >= 1``.
* Write the means as free variables ``m`` with the equality rows
  ``sum_j s_j a_j = m``. Minimising the Lagrangian over ``m`` gives
  ``m_i = y_i - w_i / (2 c p_i)`` and the dual

      maximise  sum u + w . y - sum_i w_i^2 / (4 c p_i)
      subject to  r_j(u, w) >= 0 for every pattern j,

  the unbiased dual (:mod:`._solver`) plus a concave quadratic. Inputs with
  ``p_i = 0`` (or ``c = 0``) have an unpenalised free mean, hence
  ``w_i = 0``; only the other ``w_i`` are unknowns. The primal-dual
  interior-point step of :mod:`._solver` applies unchanged except that the
  ``w`` block of the Newton matrix gains ``diag(1 / (2 c p_i))`` and the
  mean residual is measured against ``y - w / (2 c p)``.
* Certificate: for any ``(u, w)`` and any epsilon-DP mechanism (any
  staircase pattern, not only intervals; any outputs) the objective is at
  least ``staircase_lower_bound(y, p, e, u, w) - sum_i w_i^2 / (4 c p_i)``
  (the ray weights sum to at most 1, and the penalty's minimum over the
  means is the quadratic above); :func:`penalised_lower_bound`. ``w`` is
  unique (the optimal means are, the penalty being strictly convex in
  them) but, when the optimum has fewer rays than labels (few bins), the
  row prices ``u`` are not, and Newton's often leave a loose bound (in
  about half of random priors with 8-40 labels, by 0.01 % to over 100 %).
  For up to ``_MAX_PRICES_LP`` labels the best prices for the unique ``w``
  are then found by an LP semi-infinite in ``z`` (:func:`_best_prices`):
  on 30 random priors with 8-30 labels it certified 27 to rounding error
  and the others within 0.25 %, so interval rays were globally optimal
  there. For more labels the bound can stay loose (by up to 190 % on 10
  priors with 31-39 labels); the solution is always certified
  over interval rays (the interior point's dual value).
* The optimal patterns are read off the interior point (``t_j >> r_j``)
  and Newton's method on the optimality conditions for those patterns
  (weights, duals, outputs) polishes them; patterns found missing by the
  exact pricing of the certificate are added.

Exactness: columns are exact rays (DP ratio ``e^eps`` up to one rounding)
and a final minimum-norm correction of the weights makes rows sum to 1 to
rounding error; the caller checks both.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import sparse
from scipy.linalg import lstsq
from scipy.optimize import linprog

from ._solver import (
    _cold_start,
    _drop_nonpositive,
    _Patterns,
    _primal_dual_iterate,
    staircase_lower_bound,
)

__all__ = [
    "bias_variance_continuous",
    "bias_and_variance",
    "penalised_lower_bound",
    "BiasVarianceSolution",
]


def bias_and_variance(
    values: ArrayLike, outputs: ArrayLike, matrix: ArrayLike,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``E[y_hat | y] - y`` and ``Var(y_hat | y)`` of each input value.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms.unbiased import bias_and_variance
    >>> bias, var = bias_and_variance(np.array([0.0, 1.0]), np.array([0.0, 1.0]),
    ...                               np.array([[0.75, 0.25], [0.25, 0.75]]))
    >>> bias.tolist(), var.tolist()
    ([0.25, -0.25], [0.1875, 0.1875])
    """
    values = np.asarray(values, dtype=np.float64)
    outputs = np.asarray(outputs, dtype=np.float64)
    matrix = np.asarray(matrix, dtype=np.float64)
    means = matrix @ outputs
    # Centred second moment: no cancellation of large E[y_hat^2] and mean^2.
    var = (matrix * (outputs[None, :] - means[:, None]) ** 2).sum(axis=1)
    return means - values, var


def _free_means(p, c):
    """Rows whose mean is penalised (dual ``w_i`` free); the others have w_i = 0."""
    return (p > 0) & (c > 0)


def _penalty_diag(p, c):
    """``1 / (2 c p_i)`` on penalised rows, 0 elsewhere."""
    free = _free_means(p, c)
    out = np.zeros_like(p)
    out[free] = 0.5 / (c * p[free])
    return out


def penalised_lower_bound(y, p, e, c, u, w):
    """Lower bound on ``E[(y_hat - y)^2] + c E[bias^2]`` of every eps-DP mechanism.

    Valid for any duals ``(u, w)`` with ``w_i = 0`` where ``c p_i = 0``
    (otherwise the bound is ``-inf``). ``e = e^eps - 1``.
    """
    free = _free_means(p, c)
    if np.any(w[~free] != 0):
        return -math.inf
    return staircase_lower_bound(y, p, e, u, w) - 0.5 * float(w @ (w * _penalty_diag(p, c)))


class BiasVarianceSolution:
    """Normalised problem and pattern moments of one prior, reusable across ``lam``.

    Holds ``_Patterns`` (the interval-pattern moments, ``O(k^2)``), which do
    not depend on ``lam``; pass it back as ``state=`` to solve the same
    prior and epsilon for another ``lam``. (Warm-starting the interior
    point from another ``lam``'s path was tried and measured slower than a
    cold start: the central path moves far when ``lam`` changes.)
    """

    def __init__(self, y, p, e):
        self.y, self.p, self.e = y, p, e
        self.patterns = _Patterns(y, p, e)


def _dual_value(y, u, w, diag):
    return float(u.sum() + w @ y - 0.5 * (w @ (w * diag)))


def _interior_point(state, c, u, w, t, *, tol, max_iter=200):
    """Primal-dual path of the penalised problem (see the module docstring):
    the unbiased solver's Newton steps with the penalty's diagonal on the
    free means. Returns ``(u, w, t, r)``."""
    diag = _penalty_diag(state.p, c)
    u, w, t, r, _, _ = _primal_dual_iterate(
        state.y, state.e, state.patterns, u, w, t, tol=tol, max_iter=max_iter,
        penalty=(diag, np.flatnonzero(_free_means(state.p, c))),
    )
    return u, w, t, r




def _kkt(y, p, c, a, alpha, beta, gamma, t, u, w):
    """Optimality residuals for fixed patterns ``a`` (k x m) and outputs z."""
    free = _free_means(p, c)
    diag = _penalty_diag(p, c)
    b2 = 2.0 * beta + w @ a
    z = b2 / (2.0 * alpha)
    res = np.concatenate([
        a @ t - 1.0,
        (a @ (t * z) - y + w * diag)[free],
        gamma - u @ a - b2 * z / 2.0,
    ])
    return res, z


def _kkt_polish(y, p, c, cover, e, t, u, w, *, max_iter=12):
    """Newton's method on the optimality conditions for the patterns ``cover``.

    Unknowns: weights ``t``, duals ``u`` and the free ``w``; equations: rows
    sum to 1, penalised means ``m_i = y_i - w_i / (2 c p_i)``, and zero
    minimal reduced cost of every kept pattern (square). Returns
    ``(t, z, u, w)`` or None without convergence.
    """
    k, n = cover.shape
    free = _free_means(p, c)
    fi = np.flatnonzero(free)
    nf = fi.size
    diag = _penalty_diag(p, c)
    a = 1.0 + e * cover
    alpha, beta, gamma = p @ a, (p * y) @ a, (p * y * y) @ a
    res, z = _kkt(y, p, c, a, alpha, beta, gamma, t, u, w)
    size = float(np.abs(res).max())
    for _ in range(max_iter):
        zmax = 1.0 + float(np.abs(z).max())
        if not np.isfinite(size) or size < 1e-15 * zmax * zmax * (1.0 + e):
            break
        af = a[fi]
        jac = np.zeros((k + nf + n, n + k + nf))
        jac[:k, :n] = a
        jac[k : k + nf, :n] = af * z[None, :]
        jac[k : k + nf, n + k :] = (af * (t / (2.0 * alpha))[None, :]) @ af.T + np.diag(diag[fi])
        jac[k + nf :, n : n + k] = -a.T
        jac[k + nf :, n + k :] = -(af * z[None, :]).T
        new = None
        for exact in (True, False):
            try:
                if exact:
                    step = np.linalg.solve(jac, -res)
                else:
                    step = lstsq(jac, -res, cond=1e-12, lapack_driver="gelsy")[0]
            except (np.linalg.LinAlgError, ValueError):
                continue
            w_c = w.copy()
            w_c[fi] += step[n + k :]
            cand = (t + step[:n], u + step[n : n + k], w_c)
            res_c, z_c = _kkt(y, p, c, a, alpha, beta, gamma, *cand)
            size_c = float(np.abs(res_c).max())
            if np.isfinite(size_c) and size_c < 0.5 * size:
                new = (cand, res_c, z_c, size_c)
                break
        if new is None:
            break
        (t, u, w), res, z, size = new
    zmax = 1.0 + float(np.abs(z).max())
    if not np.isfinite(size) or size > 1e-9 * (1.0 + e) * zmax * zmax:
        return None
    return t, z, u, w


def _polish_positive(y, p, c, cover, e, t, u, w):
    """Polish; drop patterns whose weight is not positive (ties) and repeat."""
    def polish(cover, t, u, w):
        return _kkt_polish(y, p, c, cover, e, t, u, w)

    return _drop_nonpositive(polish, cover, t, u, w)


# Above this many labels the certificate's price LP (about 200 k rows) costs
# more than the solve itself; the bound is then the Newton duals' own.
_MAX_PRICES_LP = 30


def _prices_lp(y, p, e, w, zs):
    """Best row prices ``u`` for fixed ``w``, dual feasible at every ``z`` in ``zs``.

    For fixed ``z`` every pattern's reduced cost is nonnegative iff
    ``G(z) = sum_i g_i + e sum_i min(g_i, 0) >= 0`` with
    ``g_i = p_i (z - y_i)^2 - w_i z - u_i`` (the worst pattern holds the
    inputs with ``g_i < 0``); with auxiliaries ``h_{z,i} <= min(g_i, 0)``
    this is linear: ``h_{z,i} + u_i <= c_i(z)``, ``h <= 0``,
    ``sum u - e sum_i h_{z,i} <= sum_i c_i(z)``. Maximise ``sum u``. All
    patterns are constrained at once for each ``z`` (cutting planes over
    patterns stall on the large optimal face). Returns ``u`` or None.
    """
    k, nz = y.size, zs.size
    cz = p[None, :] * (zs[:, None] - y[None, :]) ** 2 - w[None, :] * zs[:, None]
    nh = nz * k
    ra = np.arange(nh)
    rb = nh + np.repeat(np.arange(nz), k)
    u_cols = np.tile(np.arange(k), nz)
    rows = np.concatenate([ra, ra, rb, rb])
    cols = np.concatenate([k + ra, u_cols, u_cols, k + ra])
    vals = np.concatenate([np.ones(2 * nh), np.ones(nh), np.full(nh, -e)])
    a_ub = sparse.csr_matrix((vals, (rows, cols)), shape=(nh + nz, k + nh))
    res = linprog(
        np.concatenate([-np.ones(k), np.zeros(nh)]), A_ub=a_ub,
        b_ub=np.concatenate([cz.ravel(), cz.sum(axis=1)]),
        bounds=[(None, None)] * k + [(None, 0.0)] * nh, method="highs",
    )
    return res.x[:k] if res.status == 0 else None


def _best_prices(y, p, e, c, w, outputs, *, n_grid=60, rounds=6):
    """Row prices ``u`` certifying the optimum over all patterns, for fixed ``w``.

    When the optimum uses fewer rays than labels (typical for small ``lam``
    or epsilon: few bins, as in RR-on-Bins), the prices of the row sums are
    not unique and Newton's need not be feasible for the non-interval
    patterns, which spoils the certificate. ``w`` is unique (the optimal
    means are: the penalty is strictly convex in them), so the best ``u``
    solves an LP semi-infinite in ``z``: :func:`_prices_lp` on a grid of
    outputs (the optimum's own, midpoints, an even grid), refined at the
    output where exact pricing finds the worst violation. Returns the
    ``u`` with the best bound, or None.
    """
    span = float(outputs.max() - outputs.min()) + 1e-12
    zs = np.unique(np.concatenate([
        outputs, 0.5 * (outputs[1:] + outputs[:-1]),
        np.linspace(outputs.min() - 0.5 * span, outputs.max() + 0.5 * span, n_grid),
    ]))
    best, best_bound = None, -math.inf
    for _ in range(rounds):
        u = _prices_lp(y, p, e, w, zs)
        if u is None:
            break
        bound, pattern = staircase_lower_bound(y, p, e, u, w, return_pattern=True)
        if bound > best_bound:
            best, best_bound = u, bound
        if bound >= float(u.sum() + w @ y):
            break  # no pattern has a negative reduced cost: exact
        a = 1.0 + e * pattern
        z_worst = ((2.0 * p * y + w) @ a) / (2.0 * (p @ a))
        zs = np.union1d(zs, z_worst + span * np.array([-1e-3, 0.0, 1e-3]))
    return best


def _objective(y, p, c, cover, e, t, z):
    a = 1.0 + e * cover
    mse = float(p @ ((a * t[None, :]) * (z[None, :] - y[:, None]) ** 2).sum(axis=1))
    bias = a @ (t * z) - y
    return mse + c * float(p @ (bias * bias))


def bias_variance_continuous(values, prior, epsilon, bias_weight, *, state=None,
                             tol=1e-8, gap_tol=1e-9):
    """Optimal epsilon-DP randomizer for ``E[Var] + bias_weight * E[bias^2]``.

    Parameters
    ----------
    values : ndarray of shape (k,)
        Sorted distinct input labels.
    prior : ndarray of shape (k,)
        Prior probabilities (non-negative, summing to 1).
    epsilon : float
    bias_weight : float >= 1
        ``lam``: 1 is the squared loss (RR-on-Bins' optimum), large values
        approach the optimal unbiased randomizer.
    state : BiasVarianceSolution, optional
        From an earlier call on the same ``values, prior, epsilon`` (as
        returned): reuses the pattern moments. A mismatching state is
        ignored.
    tol, gap_tol : float
        Relative duality gap where the interior-point path first stops, and
        accepted relative gap between objective and certified lower bound
        (up to 1e-6 when the path cannot go further, else RuntimeError).

    Returns
    -------
    outputs : ndarray of shape (m,)
        Sorted output values.
    matrix : ndarray of shape (k, m)
        Transition matrix; each column an exact staircase ray.
    objective : float
        ``E_p[Var] + bias_weight * E_p[bias^2]`` of ``matrix``.
    lower_bound : float
        Certified lower bound on that objective over every epsilon-DP
        randomizer (any outputs).
    state : BiasVarianceSolution
        For solving the same prior at other ``bias_weight``.
    """
    y = np.asarray(values, dtype=np.float64)
    p = np.asarray(prior, dtype=np.float64)
    lam = float(bias_weight)
    if not lam >= 1.0:
        raise ValueError("bias_weight must be >= 1 (the problem is not convex below 1).")
    support = np.flatnonzero(p > 0)
    if support.size == 1:
        # All mass on one label: output it always; objective 0 (the other
        # rows' bias carries no weight).
        return y[support].copy(), np.ones((y.size, 1)), 0.0, 0.0, None
    # Labels of zero prior mass add nothing to the objective, so the problem
    # on the support is a relaxation with the same optimum; their rows are
    # filled in afterwards (_extend_rows). Solving on the support also keeps
    # the duals determined (a zero-mass row's price is otherwise arbitrary,
    # which spoils the certificate).
    args = (y[support], p[support], epsilon, lam - 1.0)
    outputs, matrix_s, lower, state = _solve_support(*args, state, tol, gap_tol)
    matrix = _extend_rows(y, support, matrix_s)
    bias, var = bias_and_variance(y, outputs, matrix)
    objective = float(p @ var + lam * (p @ (bias * bias)))
    return outputs, matrix, objective, lower, state


def _extend_rows(y, support, matrix_s):
    """Rows of the zero-mass labels: interpolate the neighbouring support rows.

    A convex combination of two rows is a distribution whose entries stay
    between each column's smallest and largest entry, so the matrix stays
    epsilon-DP; weights linear in ``y`` make ``E[y_hat | y]`` interpolate the
    neighbours' means (outside the support: the end row is copied).
    """
    ys = y[support]
    hi = np.clip(np.searchsorted(ys, y, side="right"), 1, ys.size - 1)
    lo = hi - 1
    theta = np.clip((y - ys[lo]) / (ys[hi] - ys[lo]), 0.0, 1.0)[:, None]
    matrix = (1.0 - theta) * matrix_s[lo] + theta * matrix_s[hi]
    matrix[support] = matrix_s  # the support rows exactly as solved
    return matrix


def _solve_support(y, p, epsilon, c, state, tol, gap_tol):
    """The solver proper, for a prior with ``p > 0`` everywhere (k >= 2)."""
    k = y.size
    e = math.expm1(epsilon)
    center = 0.5 * (y[0] + y[-1])
    half = 0.5 * (y[-1] - y[0])
    yn = (y - center) / half
    if not (isinstance(state, BiasVarianceSolution) and state.e == e
            and np.array_equal(state.y, yn) and np.array_equal(state.p, p)):
        state = BiasVarianceSolution(yn, p, e)
    slack = 1e-14 * (1.0 + e)
    rows = np.arange(k)[:, None]
    mask = state.patterns.mask
    best = None  # (objective, t, z, cover) of the best polished solution
    lower = -math.inf  # best certified bound (any duals certify)
    priced = False
    u, w, t_all = _cold_start(state.y, state.p, state.e, state.patterns)
    while True:
        u, w, t_all, r = _interior_point(state, c, u, w, t_all, tol=tol)
        # The interior point is dual feasible for every interval pattern:
        # its dual value bounds all interval-ray mechanisms (the problem
        # solved); the certificate over all mechanisms is computed below.
        interval_bound = _dual_value(yn, u, w, _penalty_diag(p, c))
        lower = max(lower, penalised_lower_bound(yn, p, e, c, u, w))
        found = None
        for ratio in (1.0, 100.0):
            keep = mask & (t_all > ratio * r)
            if not keep.any():
                continue
            ls, rs = np.nonzero(keep)
            cover = (rows >= ls[None, :]) & (rows <= rs[None, :])
            found = _polish_positive(yn, p, c, cover, e, t_all[keep], u, w)
            if found is not None:
                break
        for _ in range(3 if found is not None else 0):
            cover, (t, z, u_s, w_s) = found
            obj = _objective(yn, p, c, cover, e, t, z)
            if best is None or obj < best[0]:
                best = (obj, t, z, cover)
            lower = max(lower, penalised_lower_bound(yn, p, e, c, u_s, w_s))
            if best[0] - lower - slack > gap_tol * best[0] and not priced and k <= _MAX_PRICES_LP:
                priced = True  # an LP of ~ 200 k rows: once per solve, small k only
                # Non-unique prices: the best ones for these means (w).
                u_lp = _best_prices(yn, p, e, c, w_s, z)
                if u_lp is not None:
                    lower = max(lower, penalised_lower_bound(yn, p, e, c, u_lp, w_s))
            if best[0] - lower - slack <= gap_tol * best[0]:
                break
            # Pricing found a better pattern for these duals: try it.
            _, pattern = staircase_lower_bound(yn, p, e, u_s, w_s, return_pattern=True)
            cover = np.column_stack([cover, pattern])
            found = _polish_positive(yn, p, c, cover, e, np.append(t, 1e-3 * t.mean()), u_s, w_s)
            if found is None:
                break
        if best is not None:
            gap = (best[0] - max(lower, interval_bound) - slack) / max(best[0], 1e-300)
            if gap <= gap_tol:
                break
        if tol < 1e-15:
            if best is not None and gap <= 1e-6:
                break
            raise RuntimeError("bias-variance solver did not converge")
        tol *= 1e-2
    _, t, z, cover = best
    a = 1.0 + e * cover
    # Exact rebuild: columns are rays t_j a_j at z_j; a minimum-norm
    # correction of t (outputs fixed) makes rows sum to 1.
    t_fix = t + a.T @ np.linalg.lstsq(a @ a.T, 1.0 - a @ t, rcond=None)[0]
    if np.all(t_fix > 0):
        t = t_fix
    order = np.argsort(z)
    z, t, a = z[order], t[order], a[:, order]
    matrix = a * t[None, :]
    return center + half * z, matrix, lower * half * half, state
