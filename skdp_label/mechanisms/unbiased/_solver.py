"""Minimum-variance unbiased epsilon-DP randomizer over a finite label set.

The problem (paper 001, Alg. 1 with a continuum of outputs): inputs
``y_1 < ... < y_k`` with prior ``p``; find output values and a transition
matrix ``M`` minimising ``sum_i p_i sum_j M_ij (z_j - y_i)^2`` subject to
rows summing to 1, ``sum_j M_ij z_j = y_i`` (unbiasedness) and
``max_i M_ij <= e^eps min_i M_ij`` for every output ``j`` (epsilon-DP).

Structure used here
-------------------
* The epsilon-DP columns form the cone ``{v >= 0 : max v <= e^eps min v}``
  whose extreme rays are the staircase vectors ``a_S = 1 + (e^eps - 1) 1_S``
  (001 Thm. 6, Kairouz et al.). An optimal mechanism uses rays whose set
  ``S`` of high entries is an *interval* of the sorted inputs (001 App. B,
  Claim 11), so a column is ``t * a_[l, r]`` at output ``z``.
* With ``s = t z`` the loss of a column is the perspective
  ``alpha s^2 / t - 2 beta s + gamma t`` (``alpha, beta, gamma`` the prior
  moments weighted by ``a``): jointly convex, and the constraints are linear
  in ``(t, s)``. The problem over all ``k (k + 1) / 2`` interval patterns is
  therefore a convex program with ``2k`` equality rows and no output grid.
* Its dual is: maximise ``sum u + sum w y`` over ``(u, w)`` subject to
  ``r_j(u, w) = min_z [reduced cost of pattern j at z] >= 0``, a concave
  quadratic in ``(u, w)``. A primal-dual interior-point method (weights
  ``t_j`` of all patterns and duals ``(u, w)``, Mehrotra's predictor-
  corrector with the curvature of ``r_j`` in its corrector) takes Newton
  steps in ``2k`` dimensions; sums over all interval patterns of
  ``d_j a_j a_j^T`` are 2-D prefix sums, so a step costs ``O(k^2)`` plus a
  ``2k x 2k`` Cholesky factorisation (ridge-stabilised when the matrix is
  singular to rounding error, as it becomes on degenerate problems).
* The patterns with ``t_j >> r_j`` are the optimal ones; Newton's method on
  the optimality conditions restricted to them (weights, duals, outputs
  ``z_j = argmin_z`` of each pattern's reduced cost) then converges to
  rounding error. Patterns left out are found by exact pricing (below) and
  added; patterns made redundant by ties get a non-positive weight and
  are dropped.
* Degenerate problems (labels a relative 1e-6 apart, many zero masses)
  make that Newton system singular and the support ambiguous. Then the
  outputs are held at the interior point's ``z_j`` and the weights come
  from an LP over every ray not yet ruled out (HiGHS; rows differenced so
  that an interval ray has three entries per block): the loss is
  second-order in the error of the outputs, so the certificate still
  closes. If it does not (e.g. epsilon >~ 15, where the reduced costs lose
  ``e^eps`` times the rounding), column generation with exact pricing from
  the LP's duals, started from those rays and debiased randomized
  response's (feasible for any prior), gives the mechanism and a valid,
  looser bound; nothing is raised.
* Certificate: for *any* duals ``(u, w)`` and any epsilon-DP unbiased
  mechanism (any staircase pattern, not only intervals; any output value)
  the loss is at least ``sum u + sum w y + min(0, min_{S, z} rc(S, z))``
  because the ray weights sum to at most 1. The minimum over all subsets
  ``S`` and real ``z`` is exact: for fixed ``z`` the best ``S`` is the set of
  inputs with negative per-input reduced cost, and between consecutive
  roots of those quadratics the reduced cost is one quadratic in ``z``.
  ``lower_bound`` reports it, so optimality is checked, not assumed.

Exactness of the returned mechanism: columns are exact rays ``t_j a_j``
(so the DP ratio is ``e^eps`` up to one rounding), and the weights and
first moments ``(t, s)`` get a final minimum-norm correction so that rows
sum to 1 and means equal the inputs to rounding error; the caller verifies
both (:func:`check_exact_mechanism`).
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import sparse
from scipy.linalg import cho_factor, cho_solve, lstsq
from scipy.optimize import linprog, nnls
from ...utils._repr import public_repr

__all__ = [
    "optimal_unbiased_continuous",
    "staircase_lower_bound",
    "debiased_rr_outputs",
    "feasible_output_set",
    "mechanism_loss",
    "check_exact_mechanism",
]


# ---------------------------------------------------------------------------
# Debiased randomized response and the feasible grid (001 Def. 23, Alg. 2)
# ---------------------------------------------------------------------------
def debiased_rr_outputs(values: ArrayLike, epsilon: float) -> np.ndarray:
    """Outputs Phi(y) of epsilon-debiased randomized response (001 Def. 23).

    ``Phi(y) = ((e^eps + k - 1) y - sum(Y)) / (e^eps - 1)``; randomized
    response over ``Phi(Y)`` is unbiased.
    """
    values = np.asarray(values, dtype=np.float64)
    k = values.size
    em1 = math.expm1(epsilon)
    # (e^eps + k - 1) y - sum Y = (e^eps - 1) y + sum_{y'} (y - y').
    return values + (k * values - values.sum()) / em1


def feasible_output_set(values: ArrayLike, epsilon: float, n_outputs: int) -> np.ndarray:
    """The grid of 001 Alg. 2 (``FeasibleOutputSet``).

    ``n_outputs`` evenly spaced points from the smallest to the largest
    output of epsilon-debiased RR on ``values``; by 001 Prop. 7 the LP of
    Alg. 1 on this grid is feasible.

    Examples
    --------
    >>> from skdp_label.mechanisms.unbiased import feasible_output_set
    >>> feasible_output_set([0.0, 1.0], 1.0, 3).round(3)
    array([-0.582,  0.5  ,  1.582])
    """
    if int(n_outputs) != n_outputs or n_outputs < 2:
        raise ValueError(f"n_outputs must be an integer >= 2, got {public_repr(n_outputs)}.")
    phi = debiased_rr_outputs(values, epsilon)
    return np.linspace(phi.min(), phi.max(), int(n_outputs))


# ---------------------------------------------------------------------------
# Interval-pattern sums
# ---------------------------------------------------------------------------
def _interval_sums(cum, k):
    """Matrix X[l, r] = sum of the vector over [l, r] from its prefix sums."""
    # cum has length k + 1 with cum[0] = 0.
    return cum[None, 1:] - cum[:k, None]


def _cover_sums(d):
    """For pattern weights d[l, r] (zero below the diagonal), return
    G[m, n] = sum over patterns [l, r] containing both m and n of d[l, r]."""
    # C[a, b] = sum_{l <= a, r >= b} d[l, r]
    c = np.cumsum(d, axis=0)
    c = np.cumsum(c[:, ::-1], axis=1)[:, ::-1]
    upper = np.triu(c)
    return upper + np.triu(c, 1).T


def _weighted_gram(d, e):
    """sum_j d_j a_j a_j^T over all interval patterns, a_j = 1 + e 1_[l, r]."""
    g = _cover_sums(d)
    v = np.diag(g).copy()
    total = d.sum()
    return total + e * (v[:, None] + v[None, :]) + e * e * g


def _weighted_sum(d, e):
    """sum_j d_j a_j over all interval patterns."""
    # Weight of the patterns covering m: those starting at or before m minus
    # those (starting and) ending before m -- O(k^2) once, no 2-D prefix sums.
    rows = d.sum(axis=1)
    cols = d.sum(axis=0)
    v = np.cumsum(rows) - np.concatenate([[0.0], np.cumsum(cols)[:-1]])
    return rows.sum() + e * v


class _Patterns:
    """Moments of all interval patterns for a normalised problem."""

    def __init__(self, y, p, e):
        k = y.size
        self.k, self.e = k, e
        self.mask = np.triu(np.ones((k, k), dtype=bool))
        z = np.zeros(1)
        cp = np.concatenate([z, np.cumsum(p)])
        cpy = np.concatenate([z, np.cumsum(p * y)])
        cpy2 = np.concatenate([z, np.cumsum(p * y * y)])
        # alpha = sum p a, beta = sum p y a, gamma = sum p y^2 a; p sums to 1.
        self.alpha = np.where(self.mask, 1.0 + e * _interval_sums(cp, k), 1.0)
        self.beta = np.where(self.mask, cpy[-1] + e * _interval_sums(cpy, k), 0.0)
        self.gamma = np.where(self.mask, cpy2[-1] + e * _interval_sums(cpy2, k), 1.0)

    def apply(self, x):
        """a_j^T x for every pattern (k x k, upper triangle meaningful)."""
        cx = np.concatenate([np.zeros(1), np.cumsum(x)])
        return cx[-1] + self.e * _interval_sums(cx, self.k)

    def reduced(self, u, w):
        """(r_j, m_j): min over z of each pattern's reduced cost, and argmin."""
        au = self.apply(u)
        aw = self.apply(w)
        b2 = 2.0 * self.beta + aw
        m = b2 / (2.0 * self.alpha)
        r = self.gamma - au - b2 * m / 2.0
        return r, m


def _max_step_quadratic(r, d1, d2):
    """Largest alpha in (0, 1] with r + alpha d1 + alpha^2 d2 / 2 > 0 for all
    entries (r > 0, d2 <= 0); returns 1.0 if the whole unit step is inside."""
    # Root of d2/2 a^2 + d1 a + r = 0 with a > 0 (concave, positive at 0).
    qa = 0.5 * d2
    disc = d1 * d1 - 4.0 * qa * r
    with np.errstate(divide="ignore", invalid="ignore"):
        quad_root = np.where(
            qa < 0, (-d1 - np.sqrt(np.maximum(disc, 0.0))) / (2.0 * qa), np.inf
        )
        lin_root = np.where(d1 < 0, -r / d1, np.inf)
    root = np.where(qa < 0, quad_root, lin_root)
    root = root[np.isfinite(root) & (root > 0)]
    return float(min(1.0, root.min())) if root.size else 1.0


def _ridge_cholesky(hess):
    """Solver for ``hess x = rhs`` by Cholesky, ridge-stabilised when needed.

    Near the optimum of a degenerate problem (nearly tied labels, zero prior
    masses) the Newton matrix is positive semi-definite to rounding error.
    A diagonal shift of ``delta`` times its largest diagonal entry, grown
    from 1e-14 until the factorisation succeeds, gives a regularised Newton
    step (Levenberg-Marquardt style): still a descent direction for the
    path, at the cost of one extra factorisation per shift, instead of a
    rank-revealing SVD at every step.
    """
    scale = float(np.max(np.abs(np.diag(hess)))) or 1.0
    diag = np.arange(hess.shape[0])
    shift = 0.0
    for delta in (0.0, 1e-14, 1e-12, 1e-10, 1e-8, 1e-6, 1e-4):
        if delta:
            hess[diag, diag] += delta * scale - shift
            shift = delta * scale
        try:
            factor = cho_factor(hess, check_finite=False)
        except np.linalg.LinAlgError:
            continue
        return lambda rhs: cho_solve(factor, rhs, check_finite=False)
    raise np.linalg.LinAlgError("Newton matrix is not positive definite")


def _primal_dual_path(y, p, e, *, tol, state=None, max_iter=200):
    """Primal-dual interior-point method over all interval patterns.

    Dual: maximise ``b . (u, w)`` subject to ``r_j(u, w) >= 0`` (the minimal
    reduced cost of pattern ``j``); primal: weights ``t_j >= 0`` with
    ``sum_j t_j g_j = b``, ``g_j = (a_j, m_j a_j)``. Newton steps on the
    perturbed complementarity ``t_j r_j = mu`` with Mehrotra's centring
    heuristic (its corrector includes the curvature of ``r_j`` in ``w``).
    ``state`` (returned) resumes the path with a tighter ``tol``.
    """
    k = y.size
    if state is not None:
        return _primal_dual_iterate(y, e, *state, tol=tol, max_iter=max_iter)
    pat = _Patterns(y, p, e)
    mask = pat.mask
    n_pat = int(mask.sum())
    # Scale of the optimal loss: that of the two-point mechanism of 001
    # Prop. 7 (outputs at the extreme debiased-RR values), an upper bound.
    phi = debiased_rr_outputs(y, math.log1p(e))
    lo, hi = phi.min(), phi.max()
    scale = float(p @ ((hi - y) * (y - lo))) + 1e-12
    # Strictly feasible dual start: w = 0 and u negative make every r_j > 0.
    u = np.full(k, -scale / k)
    w = np.zeros(k)
    r, m = pat.reduced(u, w)
    t = np.where(mask, (scale / n_pat) / np.where(mask, r, 1.0), 0.0)
    return _primal_dual_iterate(y, e, pat, u, w, t, tol=tol, max_iter=max_iter)


def _primal_dual_iterate(y, e, pat, u, w, t, *, tol, max_iter, penalty=None):
    """Mehrotra predictor-corrector steps on the duals ``(u, w)`` and weights ``t``.

    ``penalty=(diag, free)`` solves the bias-regularised problem of
    :mod:`._bias_variance` instead: only the rows ``free`` keep a mean row,
    whose target becomes ``y - w * diag`` (the dual gains
    ``-w @ (w * diag) / 2``, the Newton matrix ``diag`` on its w-block); the
    other rows have ``w = 0``. ``None``: every mean equals ``y`` (unbiased).
    """
    k = y.size
    mask = pat.mask
    n_pat = int(mask.sum())
    diag, free = (np.zeros(k), slice(None)) if penalty is None else penalty
    r, m = pat.reduced(u, w)
    best_merit, stalled = None, 0
    for _ in range(max_iter):
        resid = np.concatenate(
            [1.0 - _weighted_sum(t, e), (y - w * diag - _weighted_sum(t * m, e))[free]]
        )
        gap = float((t * np.where(mask, r, 0.0)).sum())
        dual = float(u.sum() + w @ y - 0.5 * (w @ (w * diag)))
        infeas = float(np.abs(resid).max())
        if gap <= tol * max(abs(dual), 1e-300) and infeas <= 1e-8:
            break
        # Stalled (degenerate problems: labels a hair apart): stop after 15
        # steps without halving the gap or the infeasibility.
        merit = (gap, infeas)
        if best_merit is None or merit[0] < 0.5 * best_merit[0] or merit[1] < 0.5 * best_merit[1]:
            best_merit, stalled = merit, 0
        else:
            stalled += 1
            if stalled >= 15:
                break
        d = np.where(mask, t / np.where(mask, r, 1.0), 0.0)
        h_uu = _weighted_gram(d, e)
        h_uw = _weighted_gram(d * m, e)[:, free]
        h_ww = _weighted_gram(d * m * m + t / (2.0 * pat.alpha), e)[free][:, free]
        h_ww[np.diag_indices(h_ww.shape[0])] += diag[free]
        try:
            solve = _ridge_cholesky(np.block([[h_uu, h_uw], [h_uw.T, h_ww]]))
        except np.linalg.LinAlgError:
            break  # keep the last interior point
        inv_r = np.where(mask, 1.0 / np.where(mask, r, 1.0), 0.0)

        def direction(mu, corr=0.0):
            # Complementarity t dr + r dt = mu - t r - corr (corr: second-order
            # terms predicted by the affine step, Mehrotra).
            # Right-hand side b - sum_j (mu / r_j) g_j = resid + sum (t - mu/r) g.
            target = (mu - corr) * inv_r
            c = t - target
            rhs = resid + np.concatenate([_weighted_sum(c, e), _weighted_sum(c * m, e)[free]])
            dl = solve(rhs)
            du, dw = dl[:k], np.zeros(k)
            dw[free] = dl[k:]
            adu = pat.apply(du)
            adw = pat.apply(dw)
            dr1 = -adu - m * adw  # first-order change of r
            dr2 = -(adw * adw) / (2.0 * pat.alpha)  # second derivative of r
            dt = target - t - d * dr1
            return du, dw, dt, dr1, dr2

        def step_lengths(dt, dr1, dr2):
            neg = mask & (dt < 0)
            a_p = min(1.0, float((-t[neg] / dt[neg]).min())) if neg.any() else 1.0
            a_d = _max_step_quadratic(r[mask], dr1[mask], dr2[mask])
            return a_p, a_d

        mu_now = gap / n_pat
        du, dw, dt, dr1, dr2 = direction(0.0)
        a_p, a_d = step_lengths(dt, dr1, dr2)
        r_aff = r + a_d * dr1 + 0.5 * a_d * a_d * dr2
        mu_aff = float(((t + a_p * dt) * np.where(mask, r_aff, 0.0)).sum()) / n_pat
        sigma = min(1.0, (mu_aff / mu_now) ** 3) if mu_now > 0 else 0.0
        corr = np.where(mask, dt * (dr1 + 0.5 * dr2) + 0.5 * t * dr2, 0.0)
        # Mehrotra's corrector helps far more often than not, but can stall
        # far from the path: keep whichever direction allows longer steps.
        best = None
        for c in (corr, 0.0):
            cand = direction(sigma * mu_now, c)
            lengths = step_lengths(*cand[2:])
            if best is None or min(lengths) > min(best[1]):
                best = (cand, lengths)
        (du, dw, dt, dr1, dr2), (a_p, a_d) = best
        a_p, a_d = 0.99 * a_p, 0.99 * a_d
        t_new = np.where(mask, t + a_p * dt, 0.0)
        u_new, w_new = u + a_d * du, w + a_d * dw
        r_new, m_new = pat.reduced(u_new, w_new)
        while np.any(r_new[mask] <= 0) and a_d > 1e-12:
            # Rounding at the boundary: shorten the dual step.
            a_d *= 0.5
            u_new, w_new = u + a_d * du, w + a_d * dw
            r_new, m_new = pat.reduced(u_new, w_new)
        if np.any(r_new[mask] <= 0):
            break  # keep the last interior point
        t, u, w, r, m = t_new, u_new, w_new, r_new, m_new
    return u, w, t, r, m, (pat, u, w, t)


def staircase_lower_bound(y, p, e, u, w, *, return_pattern=False):
    """Lower bound on the loss of every epsilon-DP unbiased mechanism.

    ``sum u + sum w y + min(0, min over all subsets S and real z of the
    reduced cost)``; the inner minimum is computed exactly (see the module
    docstring). ``e = e^eps - 1``. Works in the caller's units. With
    ``return_pattern`` also return the set ``S`` (boolean mask) attaining
    the minimum reduced cost.
    """
    a2 = p
    a1 = -(2.0 * p * y + w)
    a0 = p * y * y - u
    roots = []
    quad = a2 > 0
    disc = a1 * a1 - 4.0 * a2 * a0
    ok = quad & (disc > 0)
    sq = np.sqrt(np.where(ok, disc, 0.0))
    roots.append(((-a1 - sq) / (2.0 * np.where(quad, a2, 1.0)))[ok])
    roots.append(((-a1 + sq) / (2.0 * np.where(quad, a2, 1.0)))[ok])
    lin = (~quad) & (a1 != 0)
    roots.append((-a0 / np.where(lin, a1, 1.0))[lin])
    bps = np.unique(np.concatenate(roots))
    # A point inside every piece, plus the vertices of each piece's quadratic.
    if bps.size:
        width = max(1.0, float(bps[-1] - bps[0]))
        probes = np.concatenate(
            [[bps[0] - width], (bps[:-1] + bps[1:]) / 2.0, [bps[-1] + width]]
        )
        lows = np.concatenate([[-np.inf], bps])
        highs = np.concatenate([bps, [np.inf]])
    else:
        probes = np.zeros(1)
        lows, highs = np.array([-np.inf]), np.array([np.inf])
    f = a2[None, :] * probes[:, None] ** 2 + a1[None, :] * probes[:, None] + a0[None, :]
    weights = 1.0 + e * (f < 0)
    qa = weights @ a2
    qb = weights @ a1
    zs = np.clip(-qb / (2.0 * qa), lows, highs)
    cand = np.concatenate([zs, bps])
    f = a2[None, :] * cand[:, None] ** 2 + a1[None, :] * cand[:, None] + a0[None, :]
    rc = f.sum(axis=1) + e * np.minimum(f, 0.0).sum(axis=1)
    best = int(np.argmin(rc))
    bound = float(u.sum() + w @ y + min(0.0, rc[best]))
    if return_pattern:
        return bound, f[best] < 0
    return bound


def mechanism_loss(y, p, outputs, matrix):
    """E[(y_hat - y)^2] under the prior ``p``."""
    return float(p @ (matrix * (outputs[None, :] - y[:, None]) ** 2).sum(axis=1))


def check_exact_mechanism(y, outputs, matrix, epsilon, *, rtol=1e-9):
    """Raise if ``matrix`` is not epsilon-DP, stochastic and unbiased.

    DP: every column's max / min ratio is at most ``e^eps`` with log-ratio
    tolerance ``rtol * eps``. Rows sum to 1 within ``1e-12``. Means equal
    the inputs within ``rtol * (max y - min y)``.
    """
    if np.any(matrix < 0) or np.any(matrix.min(axis=0) <= 0):
        raise RuntimeError("transition matrix has a non-positive column entry")
    log_ratio = np.log(matrix.max(axis=0)) - np.log(matrix.min(axis=0))
    if log_ratio.max() > epsilon * (1.0 + rtol):
        raise RuntimeError(
            f"transition matrix is not epsilon-DP (log ratio {public_repr(log_ratio.max())})"
        )
    if np.abs(matrix.sum(axis=1) - 1.0).max() > 1e-12:
        raise RuntimeError("transition matrix rows do not sum to 1")
    span = float(y.max() - y.min()) if y.size > 1 else 1.0
    if np.abs(matrix @ outputs - y).max() > rtol * span:
        raise RuntimeError("transition matrix is not unbiased")


def _kkt_residual(y, e, a, alpha, beta, gamma, t, u, w):
    b2 = 2.0 * beta + w @ a
    z = b2 / (2.0 * alpha)
    res = np.concatenate([a @ t - 1.0, a @ (t * z) - y, gamma - u @ a - b2 * z / 2.0])
    return res, z


def _kkt_polish(y, p, e, cover, t, u, w, *, max_iter=10):
    """Newton's method on the optimality conditions for fixed patterns.

    Unknowns: weights ``t`` of the patterns (columns of ``cover``) and duals
    ``(u, w)``; each pattern's output is ``z_j = argmin_z`` of its reduced
    cost. Equations: rows sum to 1, means equal ``y``, and every kept
    pattern has zero minimal reduced cost (square: ``2k + m`` each). When
    the optimum is not unique (ties between patterns) the Jacobian is
    singular and minimum-norm steps are taken. Returns ``(t, z, u, w)``
    (``t`` may have non-positive entries) or None without convergence.
    """
    k, m = cover.shape
    a = 1.0 + e * cover
    alpha = p @ a
    beta = (p * y) @ a
    gamma = (p * y * y) @ a
    res, z = _kkt_residual(y, e, a, alpha, beta, gamma, t, u, w)
    size = float(np.abs(res).max())
    for _ in range(max_iter):
        if not np.isfinite(size) or size < 1e-15 * (1.0 + float(np.abs(z).max()) ** 2):
            break
        jac = np.zeros((2 * k + m, m + 2 * k))
        jac[:k, :m] = a
        jac[k : 2 * k, :m] = a * z[None, :]
        jac[k : 2 * k, m + k :] = (a * (t / (2.0 * alpha))[None, :]) @ a.T
        jac[2 * k :, m : m + k] = -a.T
        jac[2 * k :, m + k :] = -(a * z[None, :]).T
        new = None
        zmax = 1.0 + float(np.abs(z).max())
        near_floor = size < 1e-12 * (1.0 + e) * zmax * zmax
        for exact in (True, False):
            if not exact and near_floor:
                break  # only rounding is left: no point in a costly retry
            try:
                if exact:
                    step = np.linalg.solve(jac, -res)
                else:
                    step = lstsq(jac, -res, cond=1e-12, lapack_driver="gelsy")[0]
            except (np.linalg.LinAlgError, ValueError):
                continue
            cand = (t + step[:m], u + step[m : m + k], w + step[m + k :])
            res_c, z_c = _kkt_residual(y, e, a, alpha, beta, gamma, *cand)
            size_c = float(np.abs(res_c).max())
            if np.isfinite(size_c) and size_c < 0.5 * size:
                new = (cand, res_c, z_c, size_c)
                break
        if new is None:
            break
        (t, u, w), res, z, size = new
    # Primal rows are repaired exactly later; the reduced-cost rows carry
    # cancellation of order e * |z|^2 rounding, so they get that scale.
    primal = float(np.abs(res[: 2 * k]).max()) if np.isfinite(size) else np.inf
    dual = float(np.abs(res[2 * k :]).max()) if np.isfinite(size) else np.inf
    zmax = 1.0 + float(np.abs(z).max())
    if primal > 1e-9 * zmax or dual > 1e-9 * (1.0 + e) * zmax * zmax:
        return None
    return t, z, u, w


def _support_solution(y, p, e, u, w, t_all, r, mask):
    """Read the optimal patterns off an interior point and polish them."""
    k = y.size
    rows = np.arange(k)[:, None]
    for ratio in (1.0, 100.0):
        # Support patterns have t_j >> r_j (t ~ 1, r ~ mu); the others t << r.
        keep = mask & (t_all > ratio * r)
        if not keep.any():
            continue
        ls, rs = np.nonzero(keep)
        cover = (rows >= ls[None, :]) & (rows <= rs[None, :])
        found = _polish_positive(y, p, e, cover, t_all[keep], u, w)
        if found is not None:
            return found
    return None


def _min_norm_repair(a, y, t, s):
    """Smallest change of ray weights ``t`` and first moments ``s = t z``
    making rows sum to 1 and means equal ``y`` (both linear in ``(t, s)``)."""
    # In units of the high entries (a / max a) the Gram matrix is of order 1
    # at any epsilon; the correction is the same up to that factor.
    c = float(a.max())
    b = a / c
    gram = b @ b.T
    v = t * c
    v_fix = v + b.T @ np.linalg.lstsq(gram, 1.0 - b @ v, rcond=None)[0]
    sv_fix = s * c + b.T @ np.linalg.lstsq(gram, y - b @ (s * c), rcond=None)[0]
    return v_fix / c, sv_fix / c


def _fixed_output_lp(y, p, e, cover, z, *, duals=False):
    """Best weights of the given rays with their outputs held at ``z``.

    ``cover`` (k x n, boolean) holds each ray's set of high entries (any
    set: intervals, or patterns found by pricing).

    With the outputs fixed the problem is the LP ``min c . t`` over
    ``t >= 0`` with rows summing to 1 and means equal to ``y`` (``c_j`` the
    prior-weighted squared error of ray ``j`` at ``z_j``). It stays well
    posed when the optimum is degenerate (ties between rays, labels a hair
    apart) where Newton's method on the optimality conditions is singular.
    The rows are differenced (row ``i`` minus row ``i - 1``), so an
    interval ray ``1 + e 1_[l, r]`` has at most three entries per block,
    and the variables are the rays' high entries ``v = (1 + e) t`` so that
    the matrix stays of order 1 at any epsilon. Returns the indices of the
    rays with positive weight and their weights ``t``, re-solved exactly on
    that support, or None.
    """
    finite = np.isfinite(z)
    cover, z = cover[:, finite], z[finite]
    k, n = cover.shape
    if n == 0:
        return None
    a = 1.0 + e * cover
    cost = (p * y * y) @ a - 2.0 * ((p * y) @ a) * z + (p @ a) * z * z
    low = 1.0 / (1.0 + e)
    high = e * low
    # Row i minus row i - 1 of a ray is +-e where its pattern starts or
    # stops (once each for an interval; any pattern works).
    steps_i, steps_j = np.nonzero(np.diff(cover.astype(np.int8), axis=0))
    signs = np.diff(cover.astype(np.int8), axis=0)[steps_i, steps_j]
    cols = np.arange(n)
    row_idx, col_idx, vals = [], [], []
    for block, coef in ((0, np.ones(n)), (k, z)):
        row_idx += [np.full(n, block), block + 1 + steps_i]
        col_idx += [cols, steps_j]
        vals += [coef * (low + high * cover[0]), coef[steps_j] * high * signs]
    a_eq = sparse.csc_matrix(
        (np.concatenate(vals), (np.concatenate(row_idx), np.concatenate(col_idx))),
        shape=(2 * k, n),
    )
    b_eq = np.concatenate([[1.0], np.zeros(k - 1), [y[0]], np.diff(y)])
    for tol in (1e-9, 1e-7):  # HiGHS may give up at the tighter tolerance
        res = linprog(
            cost * low, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method="highs",
            options={"primal_feasibility_tolerance": tol, "dual_feasibility_tolerance": tol},
        )
        if res.status == 0:
            break
    else:
        return None
    v = res.x
    support = np.nonzero(v > 1e-13 * v.max())[0]
    # Exact weights on the support (rounding-level residual).
    target = np.concatenate([np.ones(k), y])
    for _ in range(4):
        # Non-negative least squares: a degenerate vertex may carry zero
        # weights, dropped (with rounding-level ones) before the repair.
        rays = np.vstack([a[:, support], a[:, support] * z[support][None, :]])
        t = lstsq(rays * low, target, cond=1e-14, lapack_driver="gelsy")[0] * low
        if np.any(t <= 0):  # NNLS (an active-set method) only when needed
            t = nnls(rays * low, target)[0] * low
        big = t > 1e-13 * t.max()
        support, t = support[big], t[big]
        # With the outputs held fixed that system may be consistent only to
        # the LP's tolerance; a minimum-norm move of (t, s = t z) closes it.
        t, s = _min_norm_repair(a[:, support], y, t, t * z[support])
        if np.all(t > 0):
            break
        support = support[t > 0]
    else:
        return None
    if duals:
        # Duals of the differenced rows -> duals of the original rows.
        lam = res.eqlin.marginals
        lam_u, lam_w = lam[:k], lam[k:]
        u = lam_u - np.append(lam_u[1:], 0.0)
        w = lam_w - np.append(lam_w[1:], 0.0)
        return np.nonzero(finite)[0][support], t, s / t, u, w
    return np.nonzero(finite)[0][support], t, s / t


def _candidate_rays(mask, t_all, r):
    """Rays the interior point has not ruled out (weight not negligible next
    to the reduced cost), at most the ``4k`` most promising ones."""
    ratio = np.where(mask, t_all / np.maximum(np.abs(r), 1e-300), 0.0)
    keep = ratio > 1e-9
    limit = 4 * mask.shape[0]
    if keep.sum() > limit:
        keep &= ratio >= np.partition(ratio.ravel(), -limit)[-limit]
    return keep


def _lp_support_solution(y, p, e, u, w, t_all, r, m, mask):
    """Optimal rays by the fixed-output LP when Newton's polish fails.

    Candidates are the rays the interior point has not yet ruled out
    (weight not negligible next to their reduced cost), each at the output
    that minimises its reduced cost; their loss is second-order in the
    error of those outputs, so the certificate still closes.
    """
    k = y.size
    rows = np.arange(k)[:, None]
    keep = _candidate_rays(mask, t_all, r)
    ls, rs = np.nonzero(keep)
    cover = (rows >= ls[None, :]) & (rows <= rs[None, :])
    return _lp_rays(y, p, e, cover, m[keep], u, w)


def _ray_loss(y, p, e, cover, t, z):
    """Loss of the mechanism with columns ``t_j (1 + e 1_{S_j})`` at ``z_j``."""
    a = 1.0 + e * cover
    return float(p @ ((a * t[None, :]) * (z[None, :] - y[:, None]) ** 2).sum(axis=1))


def _best_output(y, p, e, pattern, w):
    """Output minimising the reduced cost of the ray with high set ``pattern``."""
    a = 1.0 + e * pattern
    return float(a @ (2.0 * p * y + w)) / (2.0 * float(a @ p))


def _lp_rays(y, p, e, cover, z, u, w):
    """Fixed-output LP on the given rays, then Newton's polish if it works."""
    out = _fixed_output_lp(y, p, e, cover, z)
    if out is None:
        return None
    support, t, z = out
    cover = cover[:, support]
    polished = _polish_positive(y, p, e, cover, t, u, w)
    return polished if polished is not None else (cover, (t, z, u, w))


def _column_generation(y, p, e, cover, z, bound, slack, gap_tol, *, rounds=10):
    """Fixed-output LP with exact pricing: add the ray of least reduced cost
    (any pattern, its best output) under the LP's duals until the certified
    gap closes. Returns ``(gap, t, z, cover, bound)`` of the last LP."""
    best = None
    for _ in range(rounds):
        out = _fixed_output_lp(y, p, e, cover, z, duals=True)
        if out is None:
            break
        support, t, z_s, u, w = out
        lower, pattern = staircase_lower_bound(y, p, e, u, w, return_pattern=True)
        bound = max(bound, lower)
        cov_s = cover[:, support]
        loss = _ray_loss(y, p, e, cov_s, t, z_s)
        best = ((loss - bound - slack) / loss, t, z_s, cov_s, bound)
        if best[0] <= gap_tol:
            polished = _polish_positive(y, p, e, cov_s, t, u, w)
            if polished is not None:
                cov_p, (t_p, z_p, u_p, w_p) = polished
                loss_p = _ray_loss(y, p, e, cov_p, t_p, z_p)
                bound = max(bound, staircase_lower_bound(y, p, e, u_p, w_p))
                if loss_p <= loss:
                    best = ((loss_p - bound - slack) / loss_p, t_p, z_p, cov_p, bound)
            break
        cover = np.column_stack([cov_s, pattern])
        z = np.append(z_s, _best_output(y, p, e, pattern, w))
    return best


def _fallback_rays(y, p, e, state, best, bound, slack, gap_tol):
    """Column generation from every candidate ray; returns ``(best, bound)``.

    Candidates: the rays the interior point kept (at the outputs minimising
    their reduced cost), the best candidate so far, and debiased randomized
    response's singleton rays, which make the LP feasible for any prior.
    """
    k = y.size
    rows = np.arange(k)[:, None]
    rr_z = debiased_rr_outputs(y, math.log1p(e))
    covers, outputs = [np.eye(k, dtype=bool)], [rr_z]
    if state is not None:
        pat, u, w, t_all = state
        r, m = pat.reduced(u, w)
        keep = _candidate_rays(pat.mask, t_all, r)
        ls, rs = np.nonzero(keep)
        covers.append((rows >= ls[None, :]) & (rows <= rs[None, :]))
        outputs.append(m[keep])
    if best is not None:
        covers.append(best[3])
        outputs.append(best[2])
    found = _column_generation(
        y, p, e, np.hstack(covers), np.concatenate(outputs), bound, slack, gap_tol
    )
    if found is not None:
        bound = found[4]
        if best is None or found[0] < best[0]:
            best = found[:4]
    if best is None:
        # Debiased randomized response itself: singleton rays of weight
        # 1 / (e + k) at Phi(y), exactly unbiased for any prior.
        t = np.full(k, 1.0 / (e + k))
        cover = np.eye(k, dtype=bool)
        loss = _ray_loss(y, p, e, cover, t, rr_z)
        best = ((loss - bound - slack) / loss, t, rr_z, cover)
    return best, bound


def _polish_positive(y, p, e, cover, t, u, w):
    """Polish; drop patterns whose weight is not positive (ties) and repeat."""
    for _ in range(4):
        out = _kkt_polish(y, p, e, cover, t, u, w)
        if out is None:
            return None
        if np.all(out[0] > 0):
            return cover, out
        pos = out[0] > 0
        cover, t, u, w = cover[:, pos], out[0][pos], out[2], out[3]
    return None


def optimal_unbiased_continuous(values, prior, epsilon, *, tol=1e-8, gap_tol=1e-9):
    """Minimum-variance unbiased epsilon-DP randomizer, continuous outputs.

    Parameters
    ----------
    values : ndarray of shape (k,)
        Sorted distinct input labels.
    prior : ndarray of shape (k,)
        Prior probabilities (non-negative, summing to 1).
    epsilon : float
    tol : float
        Relative duality gap at which the interior-point path first stops;
        the optimal patterns are then read off and polished by Newton's
        method.
    gap_tol : float
        Accepted relative gap between the loss and the certified lower
        bound; otherwise the path is followed further (three rounds at
        most). A gap up to 1e-6 is accepted (degenerate problems with
        ties); beyond that the LP fallback of the module docstring gives
        an exact mechanism, never worse than debiased randomized response,
        and ``lower_bound`` stays valid but is not tight.

    Returns
    -------
    outputs : ndarray of shape (m,)
        Sorted output values (m <= about 2k).
    matrix : ndarray of shape (k, m)
        Transition matrix; each column an exact staircase ray.
    lower_bound : float
        Certified lower bound on the loss of every epsilon-DP unbiased
        randomizer for this prior (any outputs).
    """
    y = np.asarray(values, dtype=np.float64)
    p = np.asarray(prior, dtype=np.float64)
    k = y.size
    if k == 1:
        return y.copy(), np.ones((1, 1)), 0.0
    e = math.expm1(epsilon)
    center = 0.5 * (y[0] + y[-1])
    half = 0.5 * (y[-1] - y[0])
    yn = (y - center) / half
    # Rounding floor of the certificate: reduced costs are sums of terms
    # up to e^eps times the (normalised) squared range.
    slack = 1e-14 * (1.0 + e)
    state = None
    best = None  # (relative gap, t, z, cover, lower) of the best candidate
    bound = -np.inf  # best certified lower bound seen (any duals certify)
    for _ in range(3):
        try:
            u, w, t_all, r, m, state = _primal_dual_path(yn, p, e, tol=tol, state=state)
        except (np.linalg.LinAlgError, FloatingPointError, ValueError):
            break
        mask = state[0].mask
        bound = max(bound, staircase_lower_bound(yn, p, e, u, w))
        found = _support_solution(yn, p, e, u, w, t_all, r, mask)
        if found is None:
            found = _lp_support_solution(yn, p, e, u, w, t_all, r, m, mask)
        for _ in range(8 if found is not None else 0):
            cover, (t, z, u_s, w_s) = found
            lower, pattern = staircase_lower_bound(yn, p, e, u_s, w_s, return_pattern=True)
            # Any duals certify; with ties the polished ones may be worse
            # than the interior point's, so keep the better bound.
            bound = max(bound, lower)
            loss = _ray_loss(yn, p, e, cover, t, z)
            gap = (loss - bound - slack) / loss
            if best is None or gap < best[0]:
                best = (gap, t, z, cover)
            if gap <= gap_tol:
                break
            # A pattern is missing: add the one pricing found and polish again.
            cover = np.column_stack([cover, pattern])
            t0 = np.append(t, 1e-3 * t.mean())
            found = _polish_positive(yn, p, e, cover, t0, u_s, w_s)
            if found is None:
                z0 = np.append(z, _best_output(yn, p, e, pattern, w_s))
                found = _lp_rays(yn, p, e, cover, z0, u_s, w_s)
            if found is None:
                break
        if best is not None and best[0] <= gap_tol:
            break
        tol *= 1e-2
    if best is None or best[0] > 1e-6:
        # Not certified (degenerate or numerically extreme problems, e.g.
        # labels a hair apart at epsilon >~ 15): the fixed-output LP over the
        # rays the interior point kept plus debiased randomized response's
        # (which makes it feasible), at a fraction of the solver's time. The
        # bound reported stays a valid one, only not a tight one.
        best, bound = _fallback_rays(yn, p, e, state, best, bound, slack, gap_tol)
    _, t, z, cover = best
    lower = bound
    a = 1.0 + e * cover
    # Exact rebuild: columns are the staircase rays t_j a_j; a minimum-norm
    # correction of (t, s = t z) removes the last rounding residuals.
    t_fix, s_fix = _min_norm_repair(a, yn, t, t * z)
    if np.all(t_fix > 0):
        t, z = t_fix, s_fix / t_fix
    order = np.argsort(z)
    z, t, a = z[order], t[order], a[:, order]
    matrix = a * t[None, :]
    outputs = center + half * z
    return outputs, matrix, lower * half * half
