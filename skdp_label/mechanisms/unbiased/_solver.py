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
* The optimal patterns form a monotone path of about ``2k`` intervals.
  Above ``_FULL_PATTERNS_MAX`` labels the interior point runs on a working
  set: the support of the problem with neighbouring labels merged
  (recursively), widened by one label at each end, then column generation
  (all intervals priced under the duals, violated ones added). With the
  rows differenced an interval ray has three non-zero entries, so the
  Newton matrix of a working set is sparse (SuperLU), and so are the
  polish and the repair below.
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
  looser bound; nothing is raised. Then also the problem with near-tied
  labels merged (clusters 1e-10 to 1e-4 of the range wide stall the
  interior point) is solved at a few merge levels and lifted back
  exactly; the least loss is kept. A stalled path (rows or means still
  violated when it stops) is neither resumed nor extended by column
  generation: both were measured to stall again at the same point, and
  took 95 % of the time on such priors. When neither the polish nor the LP
  gives rays, the interior point's own weights, made exact, are a candidate
  (regular priors at epsilon >~ 15 stop just short of feasibility; their
  fallback LP took minutes). The merge ladder stops at a level keeping
  over half the labels that does not beat a nearly feasible direct path.
  The LP fallback and the merge ladder run within wall-clock budgets of
  one and two times the direct solve's time (at least 1 s each): cut
  short, they return the best candidate found before, made exact like any
  other, and the bound certified so far (valid, less tight). Fits whose
  noise is replayed from a seed or a key (``time_budgets=False``:
  :func:`skdp_label.utils._random.reproducible_fits`) have no clock: their
  fallback LPs run HiGHS's interior point without crossover for at most
  ``_LP_IPM_ITERATIONS`` iterations (its dual simplex and crossover were
  measured to loop for minutes on near-tied labels), so that a refit
  samples from the same distribution whatever the load. Both kinds of fit
  give the merge ladder a deterministic work budget (``_LADDER_WORK``).
* Merge bound: averaging the rows of any mechanism over groups of
  neighbouring labels gives a mechanism of the merged problem whose loss
  is larger by the within-group variance, so a merged problem's certified
  bound minus that variance bounds the original one (clustered labels).
* Repair: an approximately feasible candidate is made exact by scaling its
  rays, one column filling the rows, and a small share of the two-point
  mechanism of 001 Prop. 7 fixing the means (:func:`_two_point_repair`),
  whose variance does not grow with k as debiased randomized response's
  does; the one of least loss is kept.
* Certificate: for *any* duals ``(u, w)`` and any epsilon-DP unbiased
  mechanism (any staircase pattern, not only intervals; any output value)
  the loss is at least ``sum u + sum w y + k / (k + e) min(0, min_{S, z} rc(S, z))``
  because the ray weights sum to at most ``k / (k + e)`` (the rows sum to
  1 and every ray has a high entry: :func:`_weight_mass`). The minimum over all subsets
  ``S`` and real ``z`` is exact: for fixed ``z`` the best ``S`` is the set of
  inputs with negative per-input reduced cost, and between consecutive
  roots of those quadratics the reduced cost is one quadratic in ``z``
  (a sweep over the sorted roots, ``O(k log k)``). The bound is concave in
  the duals, so the best scaling ``theta (u, w)``, ``0 <= theta <= 1``, is
  found by golden section (inexact duals at a large epsilon).
* Certificate tolerance: a solution is *certified* when the relative gap
  ``(loss - bound) / loss`` is at most ``gap_tol`` plus ``slack / loss``,
  ``slack = 1e-14 e^eps k / (k + e)`` (labels scaled to ``[-1, 1]``; the
  rounding of reduced costs, sums of terms up to ``e^eps``, weighted like
  the violation term). At epsilon >~ 15 on irregular priors the loss is
  ``e^-eps``-small against duals of order 1 and float64 may not resolve a
  relative gap at all; ``lower_bound`` is valid either way and reports it,
  so optimality is checked, not assumed.

Exactness of the returned mechanism: columns are exact rays ``t_j a_j``
(so the DP ratio is ``e^eps`` up to one rounding), and the weights and
first moments ``(t, s)`` get a final minimum-norm correction so that rows
sum to 1 and means equal the inputs to rounding error; when that fails
(a support too small to be unbiased), the residual is absorbed by debiased
randomized response's singleton rays, mixed in with the least loss
(:func:`_mix_with_rr`). The caller verifies both
(:func:`check_exact_mechanism`).
"""

from __future__ import annotations

import math
import time
import warnings
from functools import partial

import numpy as np
from numpy.typing import ArrayLike
from scipy import sparse
from scipy.linalg import cho_factor, cho_solve, lstsq
from scipy.optimize import OptimizeWarning, linprog, nnls
from scipy.sparse.csgraph import structural_rank
from scipy.sparse.linalg import splu
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

    def rays(self):
        """``(ls, rs)``: first and last high entry of each pattern, in the
        order of the 1-D arrays (``x[mask]`` for the k x k ones)."""
        return np.nonzero(self.mask)

    def weighted_sum(self, c):
        """sum_j c_j a_j over all interval patterns."""
        return _weighted_sum(c, self.e)

    def newton_solver(self, d_uu, d_uw, d_ww, diag, free):
        """Solver of the interior point's Newton system in ``(u, w[free])``:
        ``sum_j a_j a_j^T (x) [[d_uu, d_uw], [d_uw, d_ww]]_j`` plus ``diag``
        on the w-block (dense, ``2k x 2k``, from 2-D prefix sums)."""
        e = self.e
        h_uu = _weighted_gram(d_uu, e)
        h_uw = _weighted_gram(d_uw, e)[:, free]
        h_ww = _weighted_gram(d_ww, e)[free][:, free]
        h_ww[np.diag_indices(h_ww.shape[0])] += diag[free]
        return _ridge_cholesky(np.block([[h_uu, h_uw], [h_uw.T, h_ww]]))

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


# Up to this size, linear systems of the polish and the repair are solved
# densely (LAPACK): faster than a sparse factorisation for small problems.
_DENSE_MAX = 600
# Largest polish Jacobian (2k + m) given a dense minimum-norm retry when it
# is singular (degenerate problems); larger ones go to the fixed-output LP,
# measured 5-10x faster with the same loss on near-tied priors at k >= 250.
_LSTSQ_MAX = 400


def _sparse_lu(mat, **options):
    """SuperLU factorisation of a sparse square matrix; RuntimeError if it
    is singular to rounding (SuperLU's own solve must never see a zero
    pivot: it reports illegal BLAS arguments and can crash)."""
    mat = sparse.csc_matrix(mat)
    if structural_rank(mat) < mat.shape[0]:
        raise RuntimeError("structurally singular matrix")
    lu = splu(mat, **options)
    pivots = np.abs(lu.U.diagonal())
    if pivots.size and not (pivots.min() > 1e-14 * pivots.max()):
        raise RuntimeError("singular matrix")
    return lu


def _differenced_rays(k, e, ls, rs):
    """Sparse ``k x m`` matrix of the differenced rays ``L a_j`` (row ``i``
    minus row ``i - 1``) of ``a_j = 1 + e 1_[l_j, r_j]``: ``1 + e [l_j = 0]``
    in row 0, ``e`` in row ``l_j >= 1``, ``-e`` in row ``r_j + 1 <= k - 1``."""
    m = ls.size
    cols = np.arange(m)
    start = ls >= 1
    stop = rs + 1 <= k - 1
    rows = np.concatenate([np.zeros(m, dtype=np.int64), ls[start], rs[stop] + 1])
    vals = np.concatenate(
        [1.0 + e * (ls == 0), np.full(int(start.sum()), e), np.full(int(stop.sum()), -e)]
    )
    cols = np.concatenate([cols, cols[start], cols[stop]])
    return sparse.csc_matrix((vals, (rows, cols)), shape=(k, m))


def _difference(x):
    """``L x``: each entry minus the one before (the first kept)."""
    return np.diff(x, prepend=0.0)


def _difference_t(x):
    """``L^T x``: each entry minus the one after (the last kept)."""
    return x - np.append(x[1:], 0.0)


class _Rays(_Patterns):
    """Moments of a working set of interval patterns ``[ls_j, rs_j]``.

    Same interface as :class:`_Patterns` on 1-D arrays over the working set.
    The Newton matrix ``sum_j a_j a_j^T (x) C_j`` is dense, but with the
    rows differenced (``L a_j`` has at most three entries) it is sparse:
    ``(L (x) I) H (L (x) I)^T = sum_j (L a_j)(L a_j)^T (x) C_j``, factorised
    by SuperLU in ``O(nnz)`` rather than ``O(k^3)``.
    """

    def __init__(self, y, p, e, ls, rs):
        k = y.size
        self.k, self.e = k, e
        self.ls, self.rs = ls, rs
        self.mask = np.ones(ls.size, dtype=bool)
        z = np.zeros(1)
        self.alpha, self.beta, self.gamma = (
            c[-1] + e * (c[rs + 1] - c[ls])
            for c in (np.concatenate([z, np.cumsum(v)]) for v in (p, p * y, p * y * y))
        )
        self.diff = _differenced_rays(k, e, ls, rs)

    def rays(self):
        return self.ls, self.rs

    def apply(self, x):
        cx = np.concatenate([np.zeros(1), np.cumsum(x)])
        return cx[-1] + self.e * (cx[self.rs + 1] - cx[self.ls])

    def weighted_sum(self, c):
        k = self.k
        delta = np.bincount(self.ls, c, k + 1) - np.bincount(self.rs + 1, c, k + 1)
        return c.sum() + self.e * np.cumsum(delta)[:k]

    def newton_solver(self, d_uu, d_uw, d_ww, diag, free):
        if np.any(diag):
            raise NotImplementedError("the penalised problem uses _Patterns")
        v = self.diff
        blocks = [[v @ sparse.diags(c) @ v.T for c in row] for row in
                  ((d_uu, d_uw), (d_uw, d_ww))]
        hess = sparse.bmat(blocks, format="csc")
        scale = float(np.abs(hess.diagonal()).max()) or 1.0
        k = self.k
        for delta in (0.0, 1e-14, 1e-12, 1e-10, 1e-8, 1e-6, 1e-4):
            mat = hess + sparse.identity(2 * k, format="csc") * (delta * scale) if delta else hess
            try:
                lu = _sparse_lu(mat, permc_spec="MMD_AT_PLUS_A", diag_pivot_thresh=0.0,
                                options={"SymmetricMode": True})
            except RuntimeError:
                continue
            probe = lu.solve(np.ones(2 * k))
            if np.all(np.isfinite(probe)):
                break
        else:
            raise np.linalg.LinAlgError("Newton matrix is singular")

        def solve(rhs):
            out = lu.solve(np.concatenate([_difference(rhs[:k]), _difference(rhs[k:])]))
            return np.concatenate([_difference_t(out[:k]), _difference_t(out[k:])])

        return solve


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


# Above this many labels the interior point runs on a working set of rays
# (coarse-to-fine start, column generation) instead of all k (k + 1) / 2.
_FULL_PATTERNS_MAX = 150
# Whether column-generation rounds resume the interior point from the last
# one (:func:`_warm_start`) instead of the cold start. Off: measured on
# irregular priors at k 300-900, it saved under 10 % of the time (the
# coarse-to-fine working set rarely needs a round) and the path it takes
# certified some priors less tightly (one at 1e-8 instead of 1e-13).
_WARM_START = False


def _cold_start(y, p, e, pat):
    """Strictly feasible dual start (``w = 0``, ``u < 0``: every ``r_j > 0``)
    and weights on the central path, at the scale of the optimal loss."""
    k = y.size
    mask = pat.mask
    # Scale of the optimal loss: that of the two-point mechanism of 001
    # Prop. 7 (outputs at the extreme debiased-RR values), an upper bound.
    phi = debiased_rr_outputs(y, math.log1p(e))
    scale = float(p @ ((phi.max() - y) * (y - phi.min()))) + 1e-12
    u = np.full(k, -scale / k)
    w = np.zeros(k)
    r, _ = pat.reduced(u, w)
    t = np.where(mask, (scale / mask.sum()) / np.where(mask, r, 1.0), 0.0)
    return u, w, t


def _primal_dual_path(y, p, e, *, tol, state=None, max_iter=200, full_max=None):
    """Primal-dual interior-point method over the interval patterns.

    Dual: maximise ``b . (u, w)`` subject to ``r_j(u, w) >= 0`` (the minimal
    reduced cost of pattern ``j``); primal: weights ``t_j >= 0`` with
    ``sum_j t_j g_j = b``, ``g_j = (a_j, m_j a_j)``. Newton steps on the
    perturbed complementarity ``t_j r_j = mu`` with Mehrotra's centring
    heuristic (its corrector includes the curvature of ``r_j`` in ``w``).
    ``state`` (returned) resumes the path with a tighter ``tol``.

    Up to ``full_max`` labels the path runs over all ``k (k + 1) / 2``
    patterns. Beyond, over a working set (:func:`_ray_path`): the optimal
    patterns form a monotone path from ``[0, 0]`` to ``[k-1, k-1]`` (about
    ``2k`` of them), found by coarse-to-fine and column generation; the
    returned arrays are then 1-D over the working set (``state[0].rays()``).
    """
    full_max = _FULL_PATTERNS_MAX if full_max is None else full_max
    if state is None and y.size > full_max:
        return _ray_path(y, p, e, None, tol=tol, max_iter=max_iter, full_max=full_max)
    if state is None:
        pat = _Patterns(y, p, e)
        return _primal_dual_iterate(y, e, pat, *_cold_start(y, p, e, pat), tol=tol,
                                    max_iter=max_iter)
    if isinstance(state[0], _Rays):
        return _ray_path(y, p, e, state, tol=tol, max_iter=max_iter, full_max=full_max)
    return _primal_dual_iterate(y, e, *state, tol=tol, max_iter=max_iter)


def _coarse_problem(y, p):
    """Pairs of neighbouring labels merged (mass summed, label the mean
    under the prior, or the midpoint when both masses are 0)."""
    k = y.size
    idx = np.arange(0, k, 2)
    mass = np.add.reduceat(p, idx)
    first = np.add.reduceat(p * y, idx)
    mid = np.add.reduceat(y, idx) / np.diff(np.append(idx, k))
    yc = np.where(mass > 0, first / np.where(mass > 0, mass, 1.0), mid)
    return yc, mass


def _initial_rays(y, p, e, *, tol, full_max):
    """Working set for ``k > full_max`` labels: the support of the problem
    with neighbouring labels merged (solved the same way, recursively),
    each coarse pattern ``[l, r]`` -> fine ``[2l + a, 2r + 1 + b]``,
    ``a, b`` in ``{-1, 0, 1}``."""
    k = y.size
    yc, pc = _coarse_problem(y, p)
    # Strictly increasing coarse labels (merged means of increasing pairs are).
    u, w, t, r, _, state = _primal_dual_path(yc, pc, e, tol=tol, full_max=full_max)
    lc, rc = state[0].rays()
    t, r = _on_rays(state[0], t, r)
    keep = t > 1e-3 * r
    if not keep.any():  # e.g. at a large epsilon: keep the heaviest coarse rays
        keep = t >= t.max()
    lc, rc = lc[keep], rc[keep]
    # (Measured: two shifts per end need several more column-generation
    # rounds, each a restart of the path, and are slower.)
    shifts = np.array([-1, 0, 1])
    ls, rs = np.broadcast_arrays(
        2 * lc[:, None, None] + shifts[None, :, None],
        2 * rc[:, None, None] + 1 + shifts[None, None, :],
    )
    ls, rs = ls.ravel(), rs.ravel()
    ls, rs = np.clip(ls, 0, k - 1), np.clip(rs, 0, k - 1)
    ok = ls <= rs
    # The singletons make the working set feasible whatever the coarse
    # support (column generation adds what is missing).
    singles = np.arange(k)
    return _unique_rays(k, np.concatenate([ls[ok], singles]), np.concatenate([rs[ok], singles]))


def _on_rays(pat, *arrays):
    """Per-pattern arrays as 1-D arrays in the order of ``pat.rays()``."""
    return [x[pat.mask] if x.ndim == 2 else x for x in arrays]


def _unique_rays(k, ls, rs):
    code = np.unique(ls.astype(np.int64) * k + rs)
    return code // k, code % k


def _violated_intervals(y, p, e, u, w, threshold, *, chunk=1 << 22):
    """Interval patterns with minimal reduced cost below ``threshold``: for
    every first label the best last one and vice versa (at most ``2k``),
    priced over all ``k (k + 1) / 2`` intervals in chunks of rows."""
    k = y.size
    z = np.zeros(1)
    cum = [np.concatenate([z, np.cumsum(v)]) for v in (p, p * y, p * y * y, u, w)]
    best_l = np.full(k, np.inf)
    arg_l = np.zeros(k, dtype=np.int64)
    best_r = np.full(k, np.inf)
    arg_r = np.zeros(k, dtype=np.int64)
    step = max(1, chunk // k)
    rr = np.arange(k)
    for l0 in range(0, k, step):
        ls = np.arange(l0, min(k, l0 + step))
        alpha, beta, gamma, au, aw = (
            c[-1] + e * (c[None, 1:] - c[ls, None]) for c in cum
        )
        b2 = 2.0 * beta + aw
        red = gamma - au - b2 * b2 / (4.0 * alpha)
        red[rr[None, :] < ls[:, None]] = np.inf
        j = red.argmin(axis=1)
        best_l[ls] = red[np.arange(ls.size), j]
        arg_l[ls] = j
        i = red.argmin(axis=0)
        v = red[i, rr]
        better = v < best_r
        best_r[better], arg_r[better] = v[better], ls[i[better]]
    hit_l = best_l < threshold
    hit_r = best_r < threshold
    ls = np.concatenate([np.nonzero(hit_l)[0], arg_r[hit_r]])
    rs = np.concatenate([arg_l[hit_l], np.nonzero(hit_r)[0]])
    return ls, rs, float(min(best_l.min(), best_r.min()))


def _ray_path(y, p, e, state, *, tol, max_iter, full_max, rounds=30):
    """Interior point on a working set of interval patterns, with column
    generation: price every interval under the duals, add the violated
    ones and resume the path from a point pulled back into the dual
    feasible region (:func:`_warm_start`; cold when the new rays are far
    from feasible), repeat until none is left (reduced costs >= -tol times
    the dual objective)."""
    k = y.size
    # The stopping rule bounds the total gap sum_j t_j r_j: on a working set
    # of m rays rather than all k (k + 1) / 2, the same tol would leave each
    # t_j r_j larger and the support less distinct from the rest.
    tol = tol * min(1.0, 8.0 / k)
    if state is None:
        ls, rs = _initial_rays(y, p, e, tol=1e-6, full_max=full_max)
        pat = _Rays(y, p, e, ls, rs)
        out = _primal_dual_iterate(y, e, pat, *_cold_start(y, p, e, pat), tol=tol,
                                   max_iter=max_iter)
    else:
        out = _primal_dual_iterate(y, e, *state, tol=tol, max_iter=max_iter)
    last_infeas = np.inf
    for _ in range(rounds):
        u, w, t, r, m, state = out
        pat = state[0]
        infeas = _path_infeasibility(y, pat, t, m)
        if _STOP_STALLED and infeas > _PATH_INFEASIBILITY and infeas > 0.5 * last_infeas:
            # Stalled twice without halving the infeasibility (near-tied
            # labels): each round prices new rays under the stalled duals
            # and the cold restart stalls again, measured 23 rounds, 35 s of
            # 46 s at k = 436 (case 137), with nothing read off at the end.
            # (Stopping at the first stalled round lost 0.1 % of the loss
            # at epsilon 15, case 190: there the infeasibility, near 1e-8,
            # still moves.)
            break
        last_infeas = infeas if infeas > _PATH_INFEASIBILITY else np.inf
        dual = abs(float(u.sum() + w @ y))
        new_l, new_r, _ = _violated_intervals(y, p, e, u, w, -tol * max(dual, 1e-300))
        if new_l.size == 0:
            break
        ls, rs = _unique_rays(k, np.concatenate([pat.ls, new_l]), np.concatenate([pat.rs, new_r]))
        if ls.size == pat.ls.size:
            break
        new_pat = _Rays(y, p, e, ls, rs)
        start = _warm_start(y, p, e, new_pat, pat, u, w, t) if _WARM_START else None
        if start is None:
            start = _cold_start(y, p, e, new_pat)
        out = _primal_dual_iterate(y, e, new_pat, *start, tol=tol, max_iter=max_iter)
    return out


def _warm_start(y, p, e, pat, old, u, w, t):
    """Interior start on the grown working set ``pat`` from the last point
    ``(u, w, t)`` on ``old`` (its rays are a subset of ``pat``'s).

    The new rays have negative reduced costs under ``(u, w)``. Each ``r_j``
    is concave in the duals (a minimum over ``z`` of affine functions), so on
    the segment to the cold start ``(u0, w0)`` (where every ``r_j > 0``)
    ``r_j >= (1 - theta) r_j(u, w) + theta r_j(u0, w0)``: the smallest
    ``theta`` making that positive for every ray (with a margin) gives a
    strictly feasible dual point that keeps most of the progress when the
    violation is small. The weights start on the central path
    (``t_j r_j = mu``). None when no useful
    warm start exists (``theta >= 1/2``): the caller starts cold.
    """
    u0, w0, _ = _cold_start(y, p, e, pat)
    r_star, _ = pat.reduced(u, w)
    r_cold, _ = pat.reduced(u0, w0)
    if not (np.all(np.isfinite(r_star)) and np.all(r_cold > 0)):
        return None
    # r_j >= (1 - theta) r*_j + theta r0_j >= theta r0_j / 2 wherever r*_j < 0.
    need = np.where(r_star < 0, -r_star / (0.5 * r_cold - r_star), 0.0)
    theta = max(float(need.max()), 1e-3)
    while theta < 0.5:
        u1, w1 = (1.0 - theta) * u + theta * u0, (1.0 - theta) * w + theta * w0
        r1, _ = pat.reduced(u1, w1)
        if np.all(r1 > 0):
            break
        theta *= 2.0  # rounding at the boundary
    else:
        return None
    k = y.size
    codes = old.ls.astype(np.int64) * k + old.rs
    where = np.searchsorted(pat.ls.astype(np.int64) * k + pat.rs, codes)
    t1 = np.zeros(pat.ls.size)
    t1[where] = t
    mu = float((t1[where] * r1[where]).sum()) / where.size
    # Weights on the central path (t_j r_j = mu for every ray) at the scale
    # of the old rays' complementarity: keeping the old weights (support
    # rays' large t against their now larger r) was measured to end the
    # path where reading off the support and the polish fail (priors that
    # certify from the cold start did not).
    mu = float(np.median(np.maximum(t1, mu / r1) * r1))
    return u1, w1, mu / r1


# The interior point stops when the rows and means are met to this (and
# the gap to ``tol``); a path that ends above it has stalled.
_PATH_INFEASIBILITY = 1e-8
_STOP_STALLED = True


def _path_infeasibility(y, pat, t, m):
    """Largest violation of the rows or means by an (unbiased) interior
    point's weights ``t`` at outputs ``m``."""
    resid = np.concatenate([1.0 - pat.weighted_sum(t), y - pat.weighted_sum(t * m)])
    return float(np.abs(resid).max())


def _path_stalled(y, pat, t, m):
    """Whether an interior point stopped with the rows or means violated by
    more than ``_PATH_INFEASIBILITY``: by the stall rule, not converged.
    Near-tied labels (clusters 1e-10 to 1e-6 of the range wide) do this:
    the gap closes, the infeasibility stays at 1e-7 to 1e-5, and resuming
    the path at a tighter ``tol`` or from more rays ends at the same point."""
    return not _path_infeasibility(y, pat, t, m) <= _PATH_INFEASIBILITY


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
            [1.0 - pat.weighted_sum(t), (y - w * diag - pat.weighted_sum(t * m))[free]]
        )
        gap = float((t * np.where(mask, r, 0.0)).sum())
        dual = float(u.sum() + w @ y - 0.5 * (w @ (w * diag)))
        infeas = float(np.abs(resid).max())
        if gap <= tol * max(abs(dual), 1e-300) and infeas <= _PATH_INFEASIBILITY:
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
        try:
            solve = pat.newton_solver(d, d * m, d * m * m + t / (2.0 * pat.alpha), diag, free)
        except np.linalg.LinAlgError:
            break  # keep the last interior point
        inv_r = np.where(mask, 1.0 / np.where(mask, r, 1.0), 0.0)

        def direction(mu, corr=0.0):
            # Complementarity t dr + r dt = mu - t r - corr (corr: second-order
            # terms predicted by the affine step, Mehrotra).
            # Right-hand side b - sum_j (mu / r_j) g_j = resid + sum (t - mu/r) g.
            target = (mu - corr) * inv_r
            c = t - target
            rhs = resid + np.concatenate([pat.weighted_sum(c), pat.weighted_sum(c * m)[free]])
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
    # Each input's reduced cost f_i(z) = a2 z^2 + a1 z + a0 is negative on
    # one interval (lo_i, hi_i) (possibly empty or unbounded): between the
    # roots of a quadratic, on one side of a linear one's root.
    quad = a2 > 0
    disc = a1 * a1 - 4.0 * a2 * a0
    ok = quad & (disc > 0)
    sq = np.sqrt(np.where(ok, disc, 0.0))
    den = 2.0 * np.where(quad, a2, 1.0)
    lin = (~quad) & (a1 != 0)
    root = -a0 / np.where(lin, a1, 1.0)
    lo = np.where(ok, (-a1 - sq) / den, np.where(lin & (a1 < 0), root, -np.inf))
    hi = np.where(ok, (-a1 + sq) / den, np.where(lin & (a1 > 0), root, np.inf))
    ever = ok | lin | ((~quad) & (a1 == 0) & (a0 < 0))
    bps = np.unique(np.concatenate([lo[ever & np.isfinite(lo)], hi[ever & np.isfinite(hi)]]))
    lows = np.concatenate([[-np.inf], bps])
    highs = np.concatenate([bps, [np.inf]])
    # Sweep over the pieces between consecutive roots: on each, the set of
    # negative inputs is fixed and the reduced cost is one quadratic whose
    # coefficients are prefix sums over the inputs entering and leaving.
    first = np.searchsorted(bps, lo[ever], side="left") + np.isfinite(lo[ever])
    last = np.where(np.isfinite(hi[ever]), np.searchsorted(bps, hi[ever], side="left"), bps.size)
    coef = np.stack([a2[ever], a1[ever], a0[ever]], axis=1)
    acc = np.zeros((bps.size + 2, 3))
    np.add.at(acc, first, coef)
    np.add.at(acc, last + 1, -coef)
    neg = np.cumsum(acc, axis=0)[: bps.size + 1]
    qa, qb, qc = (np.array([a2.sum(), a1.sum(), a0.sum()])[None, :] + e * neg).T
    with np.errstate(divide="ignore", invalid="ignore"):
        vertex = np.where(qa > 0, -qb / (2.0 * qa), np.where(qb > 0, -np.inf, np.inf))
    zs = np.clip(vertex, lows, highs)
    zs = np.where(np.isfinite(zs), zs, np.where(np.isfinite(lows), lows, highs))
    zs = np.where(np.isfinite(zs), zs, 0.0)  # no root at all: one piece
    approx = qa * zs * zs + qb * zs + qc
    # The best pieces by the swept coefficients, re-evaluated input by input
    # (the sums cancel at large |z|); the bound uses the direct values.
    top = np.argsort(approx)[:8]
    cand = zs[top]
    f = a2[None, :] * cand[:, None] ** 2 + a1[None, :] * cand[:, None] + a0[None, :]
    rc = f.sum(axis=1) + e * np.minimum(f, 0.0).sum(axis=1)
    best = int(np.argmin(rc))
    bound = float(u.sum() + w @ y + min(0.0, rc[best]) * _weight_mass(y.size, e))
    if return_pattern:
        return bound, f[best] < 0
    return bound


def _weight_mass(k, e):
    """Largest total weight ``sum_j t_j`` of the rays of any epsilon-DP
    mechanism on ``k`` labels: ``k / (k + e)``.

    Every column is a non-negative combination of rays ``1 + e 1_S`` with
    ``S`` non-empty (the constant ray is the one with ``S`` all labels, up
    to scale); summing the ``k`` rows (each sums to 1) gives
    ``sum_j t_j (k + e |S_j|) = k``, so ``sum_j t_j <= k / (k + e)``. The
    certificate's violation term ``min(0, min rc)`` is weighted by it
    rather than by 1: at epsilon 15 and k = 800 that divides the
    rounding-level violation of inexact duals by 4,000.
    """
    return k / (k + e)


def _scaled_dual_bound(y, p, e, u, w, *, evals=24):
    """Best :func:`staircase_lower_bound` over the scaled duals ``theta (u, w)``,
    ``0 <= theta <= 1`` (golden-section search).

    The bound is concave in the duals (a linear term plus a minimum of
    affine functions), so concave in ``theta``; ``theta = 0`` gives the
    trivial bound 0. Inexact duals (an LP's at its tolerance, a stalled
    interior point's) have reduced costs far below 0, most at a large
    epsilon where they are ``e^eps`` times the duals' error; shrinking them
    trades the dual objective against that violation.
    """
    def f(theta):
        return staircase_lower_bound(y, p, e, theta * u, theta * w)

    lo, hi = 0.0, 1.0
    best = max(0.0, f(1.0))
    g = 0.5 * (math.sqrt(5.0) - 1.0)
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = f(a), f(b)
    for _ in range(evals):
        if fa < fb:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = f(b)
        else:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = f(a)
    return max(best, fa, fb)


def mechanism_loss(y, p, outputs, matrix):
    """E[(y_hat - y)^2] under the prior ``p``."""
    return float(p @ (matrix * (outputs[None, :] - y[:, None]) ** 2).sum(axis=1))


#: Log-ratio tolerance (relative, absolute) of :func:`check_exact_mechanism`'s DP
#: check: the fits' float rounding (1.3e-14 relative measured; the logarithms' own
#: ~1e-16 absolute at tiny epsilon), far inside the margin of the samplers' slack
#: (SAMPLER_SLACK - ln((1 + eta) / (1 - eta)) = 1e-10; 3e-11 at the cap, 30).
_LOSS_RTOL, _LOSS_ATOL = 1e-12, 1e-13


def check_exact_mechanism(y, outputs, matrix, epsilon, *, rtol=1e-9):
    """Raise if ``matrix`` is not epsilon-DP, stochastic and unbiased.

    DP: every column's max / min ratio is at most ``e^eps`` with log-ratio
    tolerance ``1e-12 * eps + 1e-13`` (``epsilon`` is the law's, less the
    samplers' slack: the tolerance must stay inside its margin). Rows sum to 1 within ``1e-12``. Means equal
    the inputs within ``rtol * (max y - min y)``, or within a few roundings
    of the largest output: labels far from zero and a hair apart (span
    2.6e-5 at -861.9) cannot be matched closer in float64.
    """
    if np.any(matrix < 0) or np.any(matrix.min(axis=0) <= 0):
        raise RuntimeError("transition matrix has a non-positive column entry")
    log_ratio = np.log(matrix.max(axis=0)) - np.log(matrix.min(axis=0))
    if log_ratio.max() > epsilon * (1.0 + _LOSS_RTOL) + _LOSS_ATOL:
        raise RuntimeError(
            f"transition matrix is not epsilon-DP (log ratio {public_repr(log_ratio.max())})"
        )
    if np.abs(matrix.sum(axis=1) - 1.0).max() > 1e-12:
        raise RuntimeError("transition matrix rows do not sum to 1")
    span = float(y.max() - y.min()) if y.size > 1 else 1.0
    floor = 8.0 * np.finfo(np.float64).eps * float(np.abs(outputs).max())
    if np.abs(matrix @ outputs - y).max() > max(rtol * span, floor):
        raise RuntimeError("transition matrix is not unbiased")


def _differenced_cover(cover, e):
    """Sparse ``L a`` (row ``i`` minus row ``i - 1``) of the rays
    ``a_j = 1 + e 1_{S_j}`` with high sets ``cover`` (k x m, boolean): an
    entry per boundary of ``S_j`` (three for an interval) plus row 0."""
    k, m = cover.shape
    steps = np.diff(cover.astype(np.int8), axis=0)
    rows, cols = np.nonzero(steps)
    vals = e * steps[rows, cols].astype(np.float64)
    return sparse.csc_matrix(
        (np.concatenate([1.0 + e * cover[0], vals]),
         (np.concatenate([np.zeros(m, dtype=np.int64), rows + 1]),
          np.concatenate([np.arange(m), cols]))),
        shape=(k, m),
    )


def _suffix_sum(x):
    """``L^{-T} x``: sums of each entry and all after it."""
    return np.cumsum(x[::-1])[::-1]


class _RayProducts:
    """``a @ x`` and ``a.T @ x`` for rays ``a = 1 + e cover`` through the
    sparse differenced rays (``a = L^{-1} V``), without the dense ``a``."""

    def __init__(self, cover, e):
        self.v = _differenced_cover(cover, e)
        self.vt = self.v.T.tocsr()

    def dot(self, x):
        return np.cumsum(self.v @ x)

    def tdot(self, x):
        return self.vt @ _suffix_sum(x)


def _kkt_residual(y, rp, alpha, beta, gamma, t, u, w):
    b2 = 2.0 * beta + rp.tdot(w)
    z = b2 / (2.0 * alpha)
    res = np.concatenate([rp.dot(t) - 1.0, rp.dot(t * z) - y, gamma - rp.tdot(u) - b2 * z / 2.0])
    return res, z


def _kkt_polish(y, p, e, cover, t, u, w, *, max_iter=10):
    """Newton's method on the optimality conditions for fixed patterns.

    Unknowns: weights ``t`` of the patterns (columns of ``cover``) and duals
    ``(u, w)``; each pattern's output is ``z_j = argmin_z`` of its reduced
    cost. Equations: rows sum to 1, means equal ``y``, and every kept
    pattern has zero minimal reduced cost (square: ``2k + m`` each). With
    the rows differenced and the duals in the transposed coordinates
    (``u = L^T u'``) the Jacobian is sparse (LU by SuperLU). When the
    optimum is not unique (ties between patterns) it is singular and, for
    small problems, minimum-norm steps are taken. Returns ``(t, z, u, w)``
    (``t`` may have non-positive entries) or None without convergence.
    """
    k, m = cover.shape
    rp = _RayProducts(cover, e)
    small = m + 2 * k <= _DENSE_MAX
    v, vt = (rp.v.toarray(), None) if small else (rp.v, rp.vt)
    alpha, beta, gamma = rp.tdot(p), rp.tdot(p * y), rp.tdot(p * y * y)
    res, z = _kkt_residual(y, rp, alpha, beta, gamma, t, u, w)
    size = float(np.abs(res).max())
    for _ in range(max_iter):
        if not np.isfinite(size) or size < 1e-15 * (1.0 + float(np.abs(z).max()) ** 2):
            break
        if small:  # dense blocks: scipy.sparse's overhead dominates here
            jac = np.block([
                [v, np.zeros((k, 2 * k))],
                [v * z, np.zeros((k, k)), (v * (t / (2.0 * alpha))) @ v.T],
                [np.zeros((m, m)), -v.T, -(z[:, None] * v.T)],
            ])
        else:
            jac = sparse.bmat([
                [v, None, None],
                [v @ sparse.diags(z), None, v @ sparse.diags(t / (2.0 * alpha)) @ vt],
                [None, -vt, -(sparse.diags(z) @ vt)],
            ], format="csc")
        rhs = -np.concatenate([_difference(res[:k]), _difference(res[k : 2 * k]), res[2 * k :]])
        new = None
        zmax = 1.0 + float(np.abs(z).max())
        near_floor = size < 1e-12 * (1.0 + e) * zmax * zmax
        for exact in (True, False):
            if not exact and (near_floor or m + 2 * k > _LSTSQ_MAX):
                break  # only rounding is left, or too large for a dense retry
            try:
                if exact and small:
                    step = np.linalg.solve(jac, rhs)
                elif exact:
                    step = _sparse_lu(jac).solve(rhs)
                else:
                    dense = jac if small else jac.toarray()
                    step = lstsq(dense, rhs, cond=1e-12, lapack_driver="gelsy")[0]
            except (np.linalg.LinAlgError, ValueError, RuntimeError):
                continue
            cand = (t + step[:m], u + _difference_t(step[m : m + k]),
                    w + _difference_t(step[m + k :]))
            res_c, z_c = _kkt_residual(y, rp, alpha, beta, gamma, *cand)
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


def _interval_cover(k, ls, rs):
    """``k x m`` boolean high sets of the interval patterns ``[ls_j, rs_j]``."""
    rows = np.arange(k)[:, None]
    return (rows >= ls[None, :]) & (rows <= rs[None, :])


def _support_solution(y, p, e, u, w, ls, rs, t_all, r):
    """Read the optimal patterns off an interior point and polish them
    (per-pattern arrays 1-D, in the order of ``ls, rs``)."""
    k = y.size
    for ratio in (1.0, 100.0):
        # Support patterns have t_j >> r_j (t ~ 1, r ~ mu); the others t << r.
        keep = t_all > ratio * r
        if not keep.any():
            continue
        cover = _interval_cover(k, ls[keep], rs[keep])
        found = _polish_positive(y, p, e, cover, t_all[keep], u, w)
        if found is not None:
            return found
    return None


def _min_norm_repair(cover, e, y, t, s):
    """Smallest change of ray weights ``t`` and first moments ``s = t z``
    making rows sum to 1 and means equal ``y`` (both linear in ``(t, s)``).

    The rays ``a = 1 + e cover`` are handled differenced (``a = L^{-1} V``,
    ``V`` sparse): the minimum-norm change of ``t`` for a row residual
    ``res`` is ``V^T (V V^T)^{-1} L res``, one sparse factorisation for both
    rows; a second pass removes what rounding leaves. In units of the high
    entries (``V / (1 + e)``) the matrix is of order 1 at any epsilon.
    Falls back to dense least squares when ``V V^T`` is singular.
    """
    if cover.shape[1] <= _DENSE_MAX:
        return _min_norm_repair_dense(1.0 + e * cover, y, t, s)
    rp = _RayProducts(cover, e)
    unit = rp.v / (1.0 + e)
    try:
        lu = _sparse_lu(unit @ unit.T)
        solve = lu.solve
        if not np.all(np.isfinite(solve(np.ones(cover.shape[0])))):
            raise RuntimeError
    except RuntimeError:
        return _min_norm_repair_dense(1.0 + e * cover, y, t, s)
    unit_t = unit.T.tocsr()
    for _ in range(2):
        t = t + unit_t @ solve(_difference(1.0 - rp.dot(t))) / (1.0 + e)
        s = s + unit_t @ solve(_difference(y - rp.dot(s))) / (1.0 + e)
    return t, s


def _min_norm_repair_dense(a, y, t, s):
    """:func:`_min_norm_repair` by dense least squares (singular cases)."""
    # In units of the high entries (a / max a) the Gram matrix is of order 1
    # at any epsilon; the correction is the same up to that factor.
    c = float(a.max())
    b = a / c
    gram = b @ b.T
    v = t * c
    v_fix = v + b.T @ np.linalg.lstsq(gram, 1.0 - b @ v, rcond=None)[0]
    sv_fix = s * c + b.T @ np.linalg.lstsq(gram, y - b @ (s * c), rcond=None)[0]
    return v_fix / c, sv_fix / c


def _feasibility_residual(cover, e, y, t, s):
    """Largest violation of rows summing to 1 and means equal to ``y`` by the
    rays ``t_j (1 + e 1_{S_j})`` with first moments ``s``."""
    rp = _RayProducts(cover, e)
    return max(float(np.abs(1.0 - rp.dot(t)).max()), float(np.abs(y - rp.dot(s)).max()))


def _singleton_moments(y, p, e):
    """``(alpha, beta, gamma)`` of the singleton rays ``1 + e 1_{i}``."""
    return 1.0 + e * p, float(p @ y) + e * p * y, float(p @ (y * y)) + e * p * y * y


def _mix_with_rr(y, p, e, cover, t, s):
    """Exactly feasible rays from approximately feasible ones ``(t, s)``.

    The singleton rays ``1 + e 1_{i}`` form the invertible matrix
    ``B = e I + 1 1^T`` (``B^{-1} x = (x - sum x / (e + k)) / e``), so any
    residual of the rows and means is absorbed exactly by singleton rays:
    ``(1 - lam) (t, s)`` on the given rays plus ``lam`` times debiased
    randomized response (weights ``1 / (e + k)`` at ``Phi(y)``, exactly
    unbiased for any prior) plus ``(1 - lam) B^{-1}`` of the residuals.
    Every column stays an exact staircase ray; ``lam`` (from a log grid) is
    the one of least loss among those leaving every singleton weight
    positive (``lam = 1``, debiased randomized response, always does).
    Returns ``(cover, t, z)`` with the singletons appended.
    """
    k = y.size
    rp = _RayProducts(cover, e)
    rho, eta = 1.0 - rp.dot(t), y - rp.dot(s)

    def b_inv(x):
        return (x - x.sum() / (e + k)) / e

    tc, sc = b_inv(rho), b_inv(eta)
    rr_t = 1.0 / (e + k)
    rr_s = debiased_rr_outputs(y, math.log1p(e)) * rr_t
    alpha, beta, gamma = rp.tdot(p), rp.tdot(p * y), rp.tdot(p * y * y)
    with np.errstate(divide="ignore", invalid="ignore"):
        cand_loss = float(np.sum(alpha * s * s / t - 2.0 * beta * s + gamma * t))
    al1, be1, ga1 = _singleton_moments(y, p, e)
    best = None
    for lam in np.append(np.logspace(-15, -0.05, 60), 1.0):
        st = lam * rr_t + (1.0 - lam) * tc
        if not np.all(st > 1e-3 * lam * rr_t):
            continue
        ss = lam * rr_s + (1.0 - lam) * sc
        singles = float(np.sum(al1 * ss * ss / st - 2.0 * be1 * ss + ga1 * st))
        loss = (1.0 - lam) * cand_loss + singles
        if np.isfinite(loss) and (best is None or loss < best[0]):
            best = (loss, lam, st, ss)
    _, lam, st, ss = best
    keep = np.ones(t.size, dtype=bool) if lam < 1.0 else np.zeros(t.size, dtype=bool)
    t_all = np.concatenate([(1.0 - lam) * t[keep], st])
    z_all = np.concatenate([s[keep] / t[keep], ss / st])
    return np.column_stack([cover[:, keep], np.eye(k, dtype=bool)]), t_all, z_all


def _column_rays(q, e):
    """Staircase rays summing to the column ``q`` (max / min <= 1 + e):
    ``(cover, t)`` with ``sum_j t_j (1 + e 1_{S_j}) = q`` up to rounding.

    The level sets ``S_l = {q >= theta_l}`` of the distinct values
    ``theta_0 < theta_1 < ...`` carry ``(theta_l - theta_{l-1}) / e``
    each, and what is left of ``q``'s minimum, ``theta_0 - (max q - min q) / e``
    (non-negative by the ratio), the constant ray (``S`` all labels)."""
    levels = np.unique(q)
    cover = q[:, None] >= levels[None, 1:]
    t = np.diff(levels) / e
    rest = max(0.0, levels[0] - (levels[-1] - levels[0]) / e)
    return (np.column_stack([cover, np.ones((q.size, 1), dtype=bool)]),
            np.append(t, rest / (1.0 + e)))


def _two_point_repair(y, p, e, cover, t, z):
    """Exactly feasible rays from approximately feasible ones (positive
    weights), without debiased randomized response's variance.

    Rows: the rays are scaled by ``a = e / ((1 + e) max s - min s)``
    (``s`` their row sums) and one column ``1 - a s`` is added, which is
    epsilon-DP by that choice of ``a``; its output is its least-loss one.
    Means: a share ``lam`` of the two-point mechanism of 001 Prop. 7 with
    outputs ``-Z, Z`` (``P(Z | i) = (1 + m_i / Z) / 2``, epsilon-DP for any
    ``|m_i| <= Z e / (e + 2)``) and ``m_i = (y_i - (1 - lam) mean_i) / lam``
    makes every mean exact. Its loss is at most ``(Z + 1)^2`` per row for
    labels in ``[-1, 1]``, whatever ``k``: debiased randomized response's
    grows like ``(k / e)^2`` (sweep case 18, k = 516, epsilon 3: 1,100x the
    certified bound with it). ``(lam, Z)`` of least loss on a log grid.
    Columns are returned as exact rays (:func:`_column_rays`). None when
    no choice keeps every entry valid.
    """
    rp = _RayProducts(cover, e)
    rows = rp.dot(t)
    scale = e / ((1.0 + e) * float(rows.max()) - float(rows.min()))
    t = t * scale
    cols_cover, cols_t, cols_z = [cover], [t], [z]
    extra = 1.0 - scale * rows
    if extra.max() > 0:
        z_x = float(p @ (extra * y)) / max(float(p @ extra), 1e-300)
        cov_x, t_x = _column_rays(np.maximum(extra, 0.0), e)
        cols_cover.append(cov_x)
        cols_t.append(t_x)
        cols_z.append(np.full(t_x.size, z_x))
    cover, t, z = (np.column_stack(cols_cover), np.concatenate(cols_t),
                   np.concatenate(cols_z))
    rp = _RayProducts(cover, e)
    means = rp.dot(t * z)
    base = _ray_loss(y, p, e, cover, t, z)
    reach = e / (e + 2.0)
    best = None
    for big in 1.0 / reach * np.array([1.05, 1.2, 1.5, 2.0, 3.0, 5.0]):
        # Two-point loss per row: q (Z - y)^2 + (1 - q) (Z + y)^2 with
        # q = (1 + m / Z) / 2, i.e. Z^2 - 2 m y + y^2.
        need = np.abs(y - means)
        room = big * reach - np.abs(means)
        lam_min = float(np.max(need / np.maximum(room, 1e-300))) if need.max() > 0 else 0.0
        for lam in np.unique(np.concatenate([[lam_min * (1.0 + 1e-9)],
                                             np.logspace(-15, 0, 31)])):
            if lam < lam_min * (1.0 + 1e-9) or lam <= 0 or lam > 1:
                continue
            m = (y - (1.0 - lam) * means) / lam
            if np.abs(m).max() > big * reach:
                continue
            loss = (1.0 - lam) * base + lam * float(p @ (big * big - 2.0 * m * y + y * y))
            if best is None or loss < best[0]:
                best = (loss, lam, big, m)
    if best is None:
        return None
    _, lam, big, m = best
    q = 0.5 * (1.0 + m / big)
    out_cover, out_t, out_z = [cover], [(1.0 - lam) * t], [z]
    for col, out in ((q, big), (1.0 - q, -big)):
        cov_c, t_c = _column_rays(col, e)
        out_cover.append(cov_c)
        out_t.append(lam * t_c)
        out_z.append(np.full(t_c.size, out))
    cover, t, z = (np.column_stack(out_cover), np.concatenate(out_t), np.concatenate(out_z))
    keep = t > 0
    return cover[:, keep], t[keep], z[keep]


def _exact_rays(y, p, e, cover, t, z):
    """Rays ``(cover, t, z)`` corrected so that rows sum to 1 and means equal
    ``y`` to rounding error: the minimum-norm correction of ``(t, s = t z)``
    when it keeps every weight positive and closes the residual, otherwise
    :func:`_mix_with_rr` (the support may be too small to be unbiased, e.g.
    an LP vertex whose tiny weights were cut at epsilon >~ 15)."""
    s = t * z
    scale = 1.0 + float(np.abs(y).max())
    if np.all(t > 0) and _feasibility_residual(cover, e, y, t, s) <= 1e-13 * scale:
        return cover, t, z  # already exact (e.g. repaired before): outputs kept
    t_fix, s_fix = _min_norm_repair(cover, e, y, t, s)
    if np.all(t_fix > 0):
        t, s = t_fix, s_fix
        if _feasibility_residual(cover, e, y, t, s) <= 1e-13 * scale:
            return cover, t, s / t
    elif not np.all(t > 0):
        pos = t > 0
        cover, t, s = cover[:, pos], t[pos], s[pos]
    mixed = _mix_with_rr(y, p, e, cover, t, s)
    if not t.size:
        return mixed
    two_point = _two_point_repair(y, p, e, cover, t, s / t)
    if two_point is not None:
        cov2, t2, z2 = two_point
        if _feasibility_residual(cov2, e, y, t2, t2 * z2) > 1e-13 * scale:
            # A minimum-norm pass removes the rounding of the new columns
            # (it moves their outputs apart: kept only when needed).
            t_fix, s_fix = _min_norm_repair(cov2, e, y, t2, t2 * z2)
            t2, z2 = t_fix, s_fix / np.where(t_fix > 0, t_fix, 1.0)
        if (np.all(t2 > 0) and _feasibility_residual(cov2, e, y, t2, t2 * z2) <= 1e-13 * scale
                and _ray_loss(y, p, e, cov2, t2, z2) < _ray_loss(y, p, e, *mixed)):
            return cov2, t2, z2
    return mixed


def _fixed_output_lp(y, p, e, cover, z, *, duals=False, deadline=None, interior=False):
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
    that support, or None (also when HiGHS has not finished by ``deadline``,
    a :func:`time.perf_counter` time).

    ``interior=True`` (the fallbacks of fits that must reproduce, which
    have no wall-clock budget): HiGHS's interior point without crossover,
    at most ``_LP_IPM_ITERATIONS`` iterations, a budget in its own
    deterministic units. Its dual simplex was measured to loop on
    numerical trouble without counting iterations (near-tied labels,
    k = 807, epsilon 15: 2,000 iterations in 0.2 s, 4,000 not reached in
    120 s), and so was the crossover; the interior point took 23
    iterations, 0.4 s. Its weights are interior (not a vertex): the rays
    above ``1e-9`` of the largest are returned as they are, made exact
    later like any candidate (:func:`_exact_rays`).
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
        # No presolve: HiGHS's presolve (scipy 1.17) aborted the process
        # (heap corruption) on some of these LPs at the tight tolerances.
        options = {"primal_feasibility_tolerance": tol, "dual_feasibility_tolerance": tol,
                   "presolve": False}
        if deadline is not None:
            options["time_limit"] = deadline - time.perf_counter()
            if options["time_limit"] <= 0:
                return None
        if interior:
            options.update(maxiter=_LP_IPM_ITERATIONS, run_crossover="off")
        with warnings.catch_warnings():
            # run_crossover is passed to HiGHS verbatim (scipy warns that it
            # does not know it).
            warnings.simplefilter("ignore", OptimizeWarning)
            res = linprog(cost * low, A_eq=a_eq, b_eq=b_eq, bounds=(0, None),
                          method="highs-ipm" if interior else "highs", options=options)
        if res.status in (0, 1):  # solved, or out of time / iterations (no retry)
            break
    if res.status != 0:
        return None
    v = res.x
    if interior:
        support = np.nonzero(v > 1e-9 * v.max())[0]
        t, s = v[support] * low, v[support] * low * z[support]
    else:
        support = np.nonzero(v > 1e-13 * v.max())[0]
        support, t, s = _exact_on_support(y, e, cover, z, a, low, support)
        if support is None:
            return None
    if duals:
        # Duals of the differenced rows -> duals of the original rows.
        lam = res.eqlin.marginals
        lam_u, lam_w = lam[:k], lam[k:]
        u = lam_u - np.append(lam_u[1:], 0.0)
        w = lam_w - np.append(lam_w[1:], 0.0)
        return np.nonzero(finite)[0][support], t, s / t, u, w
    return np.nonzero(finite)[0][support], t, s / t


def _exact_on_support(y, e, cover, z, a, low, support):
    """Weights of an LP vertex's rays re-solved exactly on its support
    (rounding-level residual): ``(support, t, s)``, or None's."""
    k = y.size
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
        t, s = _min_norm_repair(cover[:, support], e, y, t, t * z[support])
        if np.all(t > 0):
            break
        support = support[t > 0]
    else:
        return None, None, None
    return support, t, s


def _candidate_rays(k, t_all, r):
    """Rays the interior point has not ruled out (weight not negligible next
    to the reduced cost), at most the ``4k`` most promising ones."""
    ratio = t_all / np.maximum(np.abs(r), 1e-300)
    keep = ratio > 1e-9
    limit = 4 * k
    if keep.sum() > limit:
        keep &= ratio >= np.partition(ratio, -limit)[-limit]
    return keep


# Whether a round whose optimal patterns could not be read off (polish and
# LP failed) keeps the interior point's own weights as a candidate.
_READ_OFF_PATH = True


def _read_off_certified(loss, bound, slack, gap_tol):
    """Whether a candidate read off a path is certified: within ``gap_tol``
    of the bound up to the rounding ``slack``, and within 1e-5 without it
    (at epsilon >~ 25 the slack exceeds the loss: the read-off then skipped
    a fallback that was 1e-6 better, sweep case 15)."""
    return (loss - bound - slack) / loss <= gap_tol and (loss - bound) / loss <= 1e-5


def _interior_point_rays(y, p, e, ls, rs, t_all, r, m):
    """The interior point's weights on the rays it has not ruled out, at
    the outputs minimising their reduced costs, made exactly feasible
    (:func:`_exact_rays`): ``(cover, t, z)``. Its loss is about the path's
    primal objective, within the path's gap and infeasibility of the
    optimum. None when no ray is left (e.g. non-finite outputs)."""
    keep = _candidate_rays(y.size, t_all, r) & np.isfinite(m) & (t_all > 0)
    if not keep.any():
        return None
    cover = _interval_cover(y.size, ls[keep], rs[keep])
    return _exact_rays(y, p, e, cover, t_all[keep], m[keep])


def _lp_support_solution(y, p, e, u, w, ls, rs, t_all, r, m, interior=False):
    """Optimal rays by the fixed-output LP when Newton's polish fails.

    Candidates are the rays the interior point has not yet ruled out
    (weight not negligible next to their reduced cost), each at the output
    that minimises its reduced cost; their loss is second-order in the
    error of those outputs, so the certificate still closes.
    """
    keep = _candidate_rays(y.size, t_all, r)
    cover = _interval_cover(y.size, ls[keep], rs[keep])
    return _lp_rays(y, p, e, cover, m[keep], u, w, interior=interior)


def _ray_loss(y, p, e, cover, t, z):
    """Loss of the mechanism with columns ``t_j (1 + e 1_{S_j})`` at ``z_j``
    (in blocks of columns: no dense k x m temporaries for large k)."""
    total = np.zeros(y.size)
    step = max(1, (1 << 20) // max(1, y.size))
    for j in range(0, t.size, step):
        cols = slice(j, j + step)
        a = 1.0 + e * cover[:, cols]
        total += ((a * t[None, cols]) * (z[None, cols] - y[:, None]) ** 2).sum(axis=1)
    return float(p @ total)


def _best_output(y, p, e, pattern, w):
    """Output minimising the reduced cost of the ray with high set ``pattern``."""
    a = 1.0 + e * pattern
    return float(a @ (2.0 * p * y + w)) / (2.0 * float(a @ p))


def _lp_rays(y, p, e, cover, z, u, w, interior=False):
    """Fixed-output LP on the given rays, then Newton's polish if it works."""
    out = _fixed_output_lp(y, p, e, cover, z, interior=interior)
    if out is None:
        return None
    support, t, z = out
    cover = cover[:, support]
    polished = _polish_positive(y, p, e, cover, t, u, w)
    return polished if polished is not None else (cover, (t, z, u, w))


def _column_generation(y, p, e, cover, z, bound, slack, gap_tol, *, rounds=10, deadline=None,
                       interior=False):
    """Fixed-output LP with exact pricing: add the ray of least reduced cost
    (any pattern, its best output) under the LP's duals until the certified
    gap closes or ``deadline`` passes. Returns ``(gap, t, z, cover, bound)``
    of the last LP that finished, or None."""
    best = None
    for _ in range(rounds):
        out = _fixed_output_lp(y, p, e, cover, z, duals=True, deadline=deadline,
                               interior=interior)
        if out is None:
            break
        support, t, z_s, u, w = out
        lower, pattern = staircase_lower_bound(y, p, e, u, w, return_pattern=True)
        bound = max(bound, lower)
        cov_s = cover[:, support]
        loss = _ray_loss(y, p, e, cov_s, t, z_s)
        best = ((loss - bound - slack) / loss, t, z_s, cov_s, bound)
        if best[0] <= gap_tol and interior:
            # An interior point's support is not a vertex's: the polish's
            # Jacobian is singular and large (its structural-rank check took
            # 119 s, sweep case 36 with --reproducible).
            break
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
    if best is not None and best[0] > gap_tol:  # the LP's duals are inexact
        bound = max(bound, _scaled_dual_bound(y, p, e, u, w))
        loss = _ray_loss(y, p, e, best[3], best[1], best[2])
        best = ((loss - bound - slack) / loss,) + best[1:4] + (bound,)
    return best


def _fallback_rays(y, p, e, state, best, bound, slack, gap_tol, deadline=None, interior=False):
    """Column generation from every candidate ray; returns ``(best, bound)``.

    Candidates: the rays the interior point kept (at the outputs minimising
    their reduced cost), the best candidate so far, and debiased randomized
    response's singleton rays, which make the LP feasible for any prior.
    An LP unfinished at ``deadline`` is dropped: ``best`` stays the best
    candidate found before (debiased randomized response when there is
    none), ``bound`` the best bound certified so far.
    """
    k = y.size
    rr_z = debiased_rr_outputs(y, math.log1p(e))
    covers, outputs = [np.eye(k, dtype=bool)], [rr_z]
    if state is not None:
        pat, u, w, t_all = state
        ls, rs = pat.rays()
        t_all, r, m = _on_rays(pat, t_all, *pat.reduced(u, w))
        keep = _candidate_rays(k, t_all, r)
        covers.append(_interval_cover(k, ls[keep], rs[keep]))
        outputs.append(m[keep])
    if best is not None:
        covers.append(best[3])
        outputs.append(best[2])
    found = _column_generation(
        y, p, e, np.hstack(covers), np.concatenate(outputs), bound, slack, gap_tol,
        deadline=deadline, interior=interior,
    )
    if found is not None:
        bound = found[4]
        # By loss: the gaps may be relative to different bounds, and with a
        # negative bound a larger loss has the smaller relative gap.
        if best is None or (_ray_loss(y, p, e, found[3], found[1], found[2])
                            < _ray_loss(y, p, e, best[3], best[1], best[2])):
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
    return _drop_nonpositive(partial(_kkt_polish, y, p, e), cover, t, u, w)


def _drop_nonpositive(polish, cover, t, u, w):
    """``polish(cover, t, u, w) -> (t, z, u, w) or None`` repeated with the
    patterns of non-positive weight (ties) dropped; ``(cover, out)``."""
    for _ in range(4):
        out = polish(cover, t, u, w)
        if out is None:
            return None
        if np.all(out[0] > 0):
            return cover, out
        pos = out[0] > 0
        cover, t, u, w = cover[:, pos], out[0][pos], out[2], out[3]
    return None


def _solve_normalized(yn, p, e, *, tol, gap_tol, merge=True, deadline=None, timed=True,
                      lp_interior=False):
    """Core of :func:`optimal_unbiased_continuous` on labels in ``[-1, 1]``:
    ``(best, bound)`` with ``best = (relative gap, t, z, cover)``.

    The stages after the direct solve (the LP fallback, the merge ladder)
    get time budgets in proportion to the direct solve's time (see
    :data:`_FALLBACK_BUDGET`); ``deadline`` (a :func:`time.perf_counter`
    time, from an enclosing merge ladder) caps them further. ``timed=False``:
    no budget (the result is then a function of the inputs only).
    ``lp_interior``: every LP on HiGHS's interior point (the merged solves
    of an untimed ladder: a level's dual simplex looped for 110 s, sweep
    case 36 with ``--reproducible``)."""
    started = time.perf_counter()
    tol_start = tol
    # Rounding floor of the certificate: reduced costs are sums of terms
    # up to e^eps times the (normalised) squared range.
    # (Weighted like the violation term it bounds: :func:`_weight_mass`.)
    slack = 1e-14 * (1.0 + e) * _weight_mass(yn.size, e)
    state = None
    best = None  # (relative gap, t, z, cover, lower) of the best candidate
    bound = -np.inf  # best certified lower bound seen (any duals certify)
    path_infeas = np.inf  # rows/means violation where the last path stopped
    read_off = None  # (loss, t, z, cover) read off a path (see below)
    for _ in range(3):
        try:
            u, w, t_all, r, m, state = _primal_dual_path(yn, p, e, tol=tol, state=state)
        except (np.linalg.LinAlgError, FloatingPointError, ValueError, ZeroDivisionError):
            break
        path_infeas = _path_infeasibility(yn, state[0], t_all, m)
        path_stalled = not path_infeas <= _PATH_INFEASIBILITY
        ls, rs = state[0].rays()
        t_all, r, m = _on_rays(state[0], t_all, r, m)
        bound = max(bound, _scaled_dual_bound(yn, p, e, u, w))
        found = _support_solution(yn, p, e, u, w, ls, rs, t_all, r)
        if found is None:
            found = _lp_support_solution(yn, p, e, u, w, ls, rs, t_all, r, m,
                                         interior=lp_interior)
        if found is None and _READ_OFF_PATH:
            # Neither the polish nor the LP gave rays: the interior point's
            # own weights, made exact, are a candidate at about the path's
            # primal objective (a census-like prior at k = 807, epsilon 15:
            # gap 4e-6 in 0.04 s, where the fallback's LP took minutes).
            # Kept apart from ``best``: the fallback's LP already has its
            # rays (twice, they slowed it down 30 %, cases 46, 94).
            rays = _interior_point_rays(yn, p, e, ls, rs, t_all, r, m)
            loss = _ray_loss(yn, p, e, *rays) if rays is not None else np.nan
            if np.isfinite(loss) and (read_off is None or loss < read_off[0]):
                read_off = (loss, rays[1], rays[2], rays[0])
            if read_off is not None and _read_off_certified(read_off[0], bound, slack, gap_tol):
                break
        if _STOP_STALLED and found is None and best is None and path_stalled:
            # Nothing read off a stalled path: the next rounds resume it and
            # were measured to stall at the same point (no candidate, the
            # same bound); the fallback and the merged solves take over.
            break
        stalled = 0
        for _ in range(8 if found is not None else 0):
            cover, (t, z, u_s, w_s) = found
            lower, pattern = staircase_lower_bound(yn, p, e, u_s, w_s, return_pattern=True)
            # Any duals certify; with ties the polished ones may be worse
            # than the interior point's, so keep the better bound.
            bound = max(bound, lower)
            loss = _ray_loss(yn, p, e, cover, t, z)
            gap = (loss - bound - slack) / loss
            # Two rounds without halving the gap: the priced pattern is
            # dropped again by the polish (non-unique duals on degenerate
            # problems), measured to repeat up to the last round; the next
            # interior-point round gives other duals.
            stalled = stalled + 1 if best is not None and gap > 0.5 * best[0] else 0
            if best is None or gap < best[0]:
                best = (gap, t, z, cover)
            if gap <= gap_tol or stalled >= 2:
                break
            # A pattern is missing: add the one pricing found and polish again.
            cover = np.column_stack([cover, pattern])
            t0 = np.append(t, 1e-3 * t.mean())
            found = _polish_positive(yn, p, e, cover, t0, u_s, w_s)
            if found is None:
                z0 = np.append(z, _best_output(yn, p, e, pattern, w_s))
                found = _lp_rays(yn, p, e, cover, z0, u_s, w_s, interior=lp_interior)
            if found is None:
                break
        if best is not None and best[0] <= gap_tol:
            break
        tol *= 1e-2
    direct = time.perf_counter() - started  # the direct solve's time, the budgets' unit
    read_certified = read_off is not None and _read_off_certified(read_off[0], bound, slack, 1e-6)
    if (best is None or best[0] > 1e-6) and not read_certified:
        # Not certified (degenerate or numerically extreme problems, e.g.
        # labels a hair apart at epsilon >~ 15): the fixed-output LP over the
        # rays the interior point kept plus debiased randomized response's
        # (which makes it feasible), at a fraction of the solver's time. The
        # bound reported stays a valid one, only not a tight one.
        best, bound = _fallback_rays(yn, p, e, state, best, bound, slack, gap_tol,
                                     deadline=_stage_deadline(direct, "lp", deadline, timed),
                                     interior=not timed)
    if read_off is not None and (
        best is None or _ray_loss(yn, p, e, best[3], best[1], best[2]) > read_off[0]
    ):
        best = ((read_off[0] - bound - slack) / read_off[0],) + read_off[1:]
    if merge and best[0] > 1e-6:
        ladder_deadline = _stage_deadline(direct, "merge", deadline, timed)
        loss_now = _ray_loss(yn, p, e, best[3], best[1], best[2])
        tried = {1, yn.size}
        ladder_work = 0.0
        clusters_helped = False
        helped = False  # some level cut the loss
        improving = True  # the last level cut the loss by 10 % or more

        def fine(n_groups):
            # A level keeping over half the labels: about a direct solve.
            return 2 * n_groups > yn.size and yn.size > _FULL_PATTERNS_MAX

        for merge_tol in _MERGE_TOLS:
            # Coarse to fine: the coarse levels are the small (fast) problems.
            # Stop at a 1 % gap. A level keeping over half the labels costs
            # about a direct solve (measured 20-40 s at k = 538-636 where it
            # stalls like it) and is tried only when no level merging
            # clusters helped: it is for a few near-tied pairs (case 2).
            if ((loss_now - bound) <= _LADDER_GAP * loss_now or (helped and not improving)
                    or ladder_deadline is not None and time.perf_counter() >= ladder_deadline):
                break
            n_groups = int(np.sum(np.diff(yn) > merge_tol)) + 1
            if n_groups in tried or (clusters_helped and fine(n_groups)):
                continue
            # Deterministic work budget (no clock: the same levels run on any
            # load): a level costs about (n_groups / k)^2 direct solves.
            level_work = (n_groups / yn.size) ** 2
            if ladder_work + level_work > _LADDER_WORK:
                break
            ladder_work += level_work
            tried.add(n_groups)
            merged = _merged_labels_solution(yn, p, e, merge_tol, tol=tol_start, gap_tol=gap_tol,
                                             deadline=ladder_deadline, timed=timed)
            if merged is None:
                continue
            m_t, m_z, m_cover, m_bound = merged
            bound = max(bound, m_bound)
            loss_m = _ray_loss(yn, p, e, m_cover, m_t, m_z)
            # Finer levels cost more and gained less (case 190, k = 807:
            # 6 %, 0.1 % at 14 s, 19 s): continue while a level gains 10 %,
            # and after the first cheap level that gains at all (from a
            # direct solve read off a stalled path, case 16 stopped there
            # 0.35 % above the next level; after a fine one, case 21 spent
            # 7 s on a level that gained nothing).
            improving = (not helped and not fine(n_groups)) or loss_m < 0.9 * loss_now
            helped = helped or loss_m < loss_now
            if (_STOP_FINE_LEVELS and fine(n_groups) and not loss_m < loss_now
                    and path_infeas <= _NEAR_FEASIBLE):
                # A level keeping most labels that does not beat a direct
                # solve whose path stopped nearly feasible: the finer levels
                # are closer copies of that problem at a direct solve's cost
                # each (case 190, k = 807, path at 4.5e-8: 414 groups 7 %
                # worse, then 750 and 800 groups 0.1 % worse and 0.009 %
                # better, 45 of 70 s). From a path stalled further away
                # (case 2: 8e-7) the finest level still gained 0.25 %.
                break
            if loss_m < loss_now:
                best, loss_now = (None, m_t, m_z, m_cover), loss_m
                clusters_helped = clusters_helped or 2 * n_groups <= yn.size
        best = ((loss_now - bound - slack) / loss_now,) + best[1:]
    return best, bound


# Time budgets of the stages after the direct solve, in units of the direct
# solve's own time, at least ``_MIN_BUDGET`` seconds each: the LP fallback's
# HiGHS runs stop there (near-tied labels at k = 807, epsilon 15: its first
# LP ran for minutes after a 9 s direct solve; HiGHS took 8 ms an iteration
# on it), and the merge ladder starts no level after its budget. What is
# returned is then the best candidate found before, made exact like any
# other, with the bound certified so far (valid, less tight). The budgets
# are wall-clock time (HiGHS's ``time_limit``): on a loaded machine a prior
# that hits one may get a different, equally exact, mechanism.
_FALLBACK_BUDGET = {"lp": 1.0, "merge": 2.0}
# Iterations of HiGHS's interior point in an LP of the fallbacks when there
# is no wall-clock budget (``interior=True`` in :func:`_fixed_output_lp`):
# a deterministic budget (it converged in 20-40 on the sweep's LPs).
_LP_IPM_ITERATIONS = 100
_MIN_BUDGET = 1.0


def _stage_deadline(direct, stage, outer=None, timed=True):
    """Deadline of a stage starting now, after a direct solve of ``direct`` s
    (None: no deadline, when not ``timed``)."""
    if not timed:
        return None
    own = time.perf_counter() + max(_MIN_BUDGET, _FALLBACK_BUDGET[stage] * direct)
    return own if outer is None else min(own, outer)


# The merge ladder stops at this certified relative gap. It was 1e-2 when
# the bound came from the merged duals split over the labels (loose); with
# the merge bound (:func:`_merged_labels_solution`) a level certifies to
# about its within-group variance, and the next, finer level usually
# closes the gap further (sweep case 69: a 1e-2 stop left 2.8e-7 more loss
# than the resumed path).
_LADDER_GAP = 1e-6
# Work budget of the merge ladder, in direct solves: a level of ``n`` groups
# counts ``(n / k)^2`` (the solver's time grows about like k^2). The same
# for every fit; unseeded fits also have the wall-clock budget above.
_LADDER_WORK = 1.0
# Whether the merge ladder stops at the first level keeping over half the
# labels that does not cut the loss (see :func:`_solve_normalized`).
_STOP_FINE_LEVELS = True
# ... when the direct path stopped with the rows and means violated by at
# most this (barely stalled).
_NEAR_FEASIBLE = 1e-7
# When the direct solve does not certify, labels closer than each of these
# (in units of the half range) are merged in turn (:func:`_merged_labels_solution`)
# and the solution of least loss is kept: clustered priors (labels 1e-10 to
# 1e-6 apart) stall the interior point; with the clusters merged their loss
# was measured 0.1-1 % below the grid LP's, 70-380x below the stalled one.
_MERGE_TOLS = (1e-4, 1e-5, 1e-6, 1e-7, 1e-8)


def _merged_labels_solution(yn, p, e, merge_tol, *, tol, gap_tol, deadline=None, timed=True):
    """Solution with labels a hair apart merged, lifted back exactly.

    Near-tied labels (relative 1e-10 apart in clustered priors) make the
    optimality conditions singular and the interior point stalls far from
    the optimum. Merged (mass summed, label the mean under the prior), the
    problem is well posed; each merged row is copied to its labels, which
    leaves a bias below ``merge_tol``, absorbed exactly by
    :func:`_exact_rays` (tiny weight moved to debiased RR's rays). The
    merged duals, split over each group in proportion to the masses, are
    valid duals of the original problem (any duals certify). Returns
    ``(t, z, cover, bound)`` or None when no labels are that close.
    Its LPs stop at ``deadline`` (the merged problem's own interior point
    runs to its end: it is smaller than the direct one).
    """
    k = yn.size
    starts = np.concatenate([[0], np.nonzero(np.diff(yn) > merge_tol)[0] + 1])
    if starts.size == k or starts.size < 2:
        return None
    group = np.repeat(np.arange(starts.size), np.diff(np.append(starts, k)))
    mass = np.add.reduceat(p, starts)
    size = np.diff(np.append(starts, k))
    ym = np.where(mass > 0, np.add.reduceat(p * yn, starts) / np.where(mass > 0, mass, 1.0),
                  np.add.reduceat(yn, starts) / size)
    (_, t, z, cover), merged_bound = _solve_normalized(ym, mass, e, tol=tol, gap_tol=gap_tol,
                                                       merge=False, deadline=deadline, timed=timed,
                                                       lp_interior=not timed)
    # Any mechanism of the original problem, its rows averaged over each
    # group (weights p_i / mass), is an epsilon-DP unbiased mechanism of the
    # merged one (a convex combination of rows keeps every column's ratio)
    # whose loss is larger by the within-group variance: the merged bound
    # minus that variance bounds the original problem (sweep case 33,
    # clustered, k = 329, epsilon 0.3: 1.2317e7, the split duals 1.23e7 only
    # after a tight lift; at 1e-6 of the range the within-group variance is
    # 1e-13 of the loss).
    within = float(p @ (yn - ym[group]) ** 2)
    bound = merged_bound - within
    out = _fixed_output_lp(ym, mass, e, cover, z, duals=True, deadline=deadline,
                           interior=not timed)
    if out is not None:
        support, t_lp, _, u, w = out
        # (Not after the interior point: no vertex, see _column_generation.)
        polished = None if not timed else _polish_positive(ym, mass, e, cover[:, support], t_lp,
                                                           u, w)
        for uu, ww in [(u, w)] + ([polished[1][2:]] if polished is not None else []):
            share = np.where(mass[group] > 0, p / np.where(mass > 0, mass, 1.0)[group],
                             1.0 / size[group])
            bound = max(bound, _scaled_dual_bound(yn, p, e, uu[group] * share, ww[group] * share))
    cover, t, z = _exact_rays(yn, p, e, cover[group], t, z)
    return t, z, cover, bound


def optimal_unbiased_continuous(values, prior, epsilon, *, tol=1e-8, gap_tol=1e-9,
                                time_budgets=True):
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
    time_budgets : bool, default=True
        Run those fallbacks within wall-clock budgets proportional to the
        direct solve's time: then on a loaded machine a prior that needs
        them may get another (equally exact) mechanism with a looser bound.
        False: no clock, the result is a function of the inputs only
        (what seeded and keyed releases need:
        :func:`skdp_label.utils._random.reproducible_fits`); the fallbacks
        then have deterministic budgets (HiGHS's interior point for at most
        ``_LP_IPM_ITERATIONS`` iterations, the merge ladder's work budget).

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
    best, bound = _solve_normalized(yn, p, e, tol=tol, gap_tol=gap_tol, timed=time_budgets)
    _, t, z, cover = best
    lower = bound
    # Exact rebuild: columns are the staircase rays t_j a_j; a minimum-norm
    # correction of (t, s = t z) removes the last rounding residuals.
    cover, t, z = _exact_rays(yn, p, e, cover, t, z)
    order = np.argsort(z)
    z, t, cover = z[order], t[order], cover[:, order]
    # Column j is t_j a_j = t_j (1 + e 1_S): (1 + e) t_j on S, t_j elsewhere
    # (the same floats, without a dense k x m ray matrix besides it).
    matrix = np.where(cover, (1.0 + e) * t[None, :], t[None, :])
    outputs, matrix = merge_equal_outputs(center + half * z, matrix)
    return outputs, matrix, lower * half * half


def merge_equal_outputs(outputs, matrix):
    """Columns of equal (sorted) ``outputs`` summed into one.

    Rays at one output (a column of the two-point repair split into rays,
    :func:`_column_rays`), or at two outputs that ``center + half * z``
    rounds to one float, are one output of the mechanism: their sum stays
    in the epsilon-DP cone (convex), the matrix keeps about 2k columns, and
    ``output_values_`` has no duplicates.
    """
    if np.any(outputs[1:] == outputs[:-1]):
        outputs, first = np.unique(outputs, return_index=True)
        matrix = np.add.reduceat(matrix, first, axis=1)
    return outputs, matrix
