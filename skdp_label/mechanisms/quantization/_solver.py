"""OPTM and MVU by linear programming (HiGHS), repaired to be exact.

Both LPs are solved for a slightly smaller epsilon, then *repaired* so that
solver slack never enters the guarantee: negative entries are clipped,
distributions renormalised (MVU: means restored), and the result is mixed
with the most private member of the family (the two outer outputs) by the
smallest weight that makes the exact privacy loss, recomputed from the end
rows, at most epsilon. Mixtures of unbiased mechanisms are unbiased, so the
repair keeps ``E[M(x)] = x``.
"""

import math

import numpy as np
import scipy.sparse as sp
from scipy.optimize import linprog, minimize

from ._core import (
    Pieces,
    end_operator,
    extreme_selection,
    make_cells,
    minimal_margin,
    pair_index,
    privacy_loss,
    row_weights,
)

__all__ = ["solve_optm", "solve_mvu", "optimize_positions", "mix_to_epsilon"]

# The LP is solved for epsilon * (1 - _LP_SLACK); the repair closes the rest,
# if needed with the answer for epsilon * (1 - _REPAIR_SLACK).
_LP_SLACK = 1e-7
_REPAIR_SLACK = 1e-3


def _dp_constraints(n_vars, end_matrix, n_rows, m, epsilon):
    """Rows ``P_e(i) <= U_i``, ``L_i <= P_e(i)``, ``U_i <= e^eps L_i``.

    ``end_matrix`` maps the ``n_vars`` mechanism variables to the ``n_rows x
    m`` end probabilities; U and L (m each) follow the mechanism variables.
    Two auxiliary variables per output keep the constraint count at
    ``O(rows x m)`` instead of ``O(rows^2 x m)``.
    """
    out = np.tile(np.arange(m), n_rows)
    sel = sp.csr_matrix((np.ones(n_rows * m), (np.arange(n_rows * m), out)), shape=(n_rows * m, m))
    zero = sp.csr_matrix((n_rows * m, m))
    eye = sp.identity(m, format="csr")
    a_ub = sp.vstack(
        [
            sp.hstack([end_matrix, -sel, zero]),
            sp.hstack([-end_matrix, zero, sel]),
            sp.hstack([sp.csr_matrix((m, n_vars)), eye, -math.exp(epsilon) * eye]),
        ],
        format="csc",
    )
    return a_ub, np.zeros(a_ub.shape[0])


def _linprog(cost, a_ub, b_ub, a_eq, b_eq):
    # HiGHS' interior point (with crossover) is about twice as fast as its
    # simplex on the large OPTM programs (m >~ 32); small ones take the default.
    method = "highs-ipm" if cost.size > 5000 else "highs"
    res = linprog(
        cost, A_ub=a_ub, b_ub=b_ub, A_eq=a_eq, b_eq=b_eq, bounds=(0, None), method=method
    )
    if res.status == 2:
        return None
    if res.status != 0:
        raise RuntimeError(f"HiGHS could not solve the LP: {res.message}")
    return res.x


def mix_to_epsilon(params, safe, loss_of, epsilon):
    """``(1 - w) params + w safe`` with the smallest ``w`` whose loss is <= epsilon.

    ``safe`` must have loss <= epsilon; for an output, the mixture's largest
    ratio lies between the two mechanisms' ratios, so ``w = 1`` always works
    and bisection finds the smallest working weight (to 2^-60).
    Returns (mixed parameters, w).
    """
    if loss_of(params) <= epsilon:
        return params, 0.0
    if not loss_of(safe) <= epsilon:
        raise RuntimeError("the repair target is not epsilon-DP")
    low, high = 0.0, 1.0
    for _ in range(60):
        mid = (low + high) / 2.0
        if loss_of((1.0 - mid) * params + mid * safe) <= epsilon:
            high = mid
        else:
            low = mid
    return (1.0 - high) * params + high * safe, high


def _repair(solve, safe, loss_of, epsilon):
    """Exactly epsilon-DP parameters from an LP solved for a smaller epsilon.

    ``solve(eps)`` returns cleaned (non-negative, normalised, unbiased)
    parameters of the LP solved for ``eps``, or None if infeasible. The answer
    for ``epsilon (1 - _LP_SLACK)`` is usually exactly private already;
    otherwise it is mixed with the answer for ``epsilon (1 - _REPAIR_SLACK)``
    (same support, ratios well inside the bound) or, failing that, with
    ``safe`` (the two outer outputs), by the smallest weight that works.
    Returns (parameters, mixing weight), or None if the LP is infeasible.
    """
    params = solve(epsilon * (1.0 - _LP_SLACK))
    if params is None:
        return None
    if loss_of(params) <= epsilon:
        return params, 0.0
    for target in (lambda: solve(epsilon * (1.0 - _REPAIR_SLACK)), lambda: safe):
        target = target()
        if target is not None and loss_of(target) <= epsilon:
            return mix_to_epsilon(params, target, loss_of, epsilon)
    raise RuntimeError("the LP answer is not epsilon-DP and could not be repaired")


def _scale(lo, hi):
    """Centre and half-width of the bounds: the LPs are solved on [-1, 1].

    Probabilities are invariant under an affine change of the label scale,
    and the map is monotone in floating point too (labels on a bin edge stay
    on it), so only the conditioning changes: costs of order 1 instead of
    ``(hi - lo)^2``, which HiGHS needs for wide bounds.
    """
    return (lo + hi) / 2.0, (hi - lo) / 2.0


def _normalised_cells(cells):
    centre, half = _scale(cells.lo, cells.hi)
    out = Pieces((cells.left - centre) / half, (cells.right - centre) / half, -1.0, 1.0)
    out.bins = (cells.bins - centre) / half
    out.index = cells.index
    return out


def _normalised_prior(prior, lo, hi):
    if prior is None:
        return None
    centre, half = _scale(lo, hi)
    return (prior[0] - centre) / half, prior[1]


def _normalise_groups(values, groups, n_groups):
    total = np.bincount(groups, weights=values, minlength=n_groups)
    return values / total[groups]


def solve_optm(bins, lo, hi, epsilon, prior, objective):
    """Optimal selection distributions for fixed bins (OPTM, 002 §4).

    Minimises the exact expected error under the prior over *joint*
    selection distributions ``pi_j(l, r)`` (the paper's independent draws are
    a subset), with the privacy constraint on the end rows (exact, no
    linearisation bounds to grid-search). Returns None if no member of the
    family is epsilon-DP with these bins, else (cells, pairs, pi, rows,
    repair weight).
    """
    cells = make_cells(bins, lo, hi)
    pairs = pair_index(cells)
    m, n_cells, n = cells.bins.size, cells.size, pairs[0].size
    unit = _normalised_cells(cells)
    ends = end_operator(unit, pairs)
    weights = row_weights(unit, unit.bins, _normalised_prior(prior, lo, hi), objective)
    cost = np.concatenate([ends.T @ weights.ravel(), np.zeros(2 * m)])
    a_eq = sp.csr_matrix(
        (np.ones(n), (pairs[0], np.arange(n))), shape=(n_cells, n + 2 * m)
    )

    def solve(eps):
        a_ub, b_ub = _dp_constraints(n, ends, 2 * n_cells, m, eps)
        x = _linprog(cost, a_ub, b_ub, a_eq, np.ones(n_cells))
        if x is None:
            return None
        # Selection probabilities: clip solver noise, renormalise per cell.
        return _normalise_groups(np.maximum(x[:n], 0.0), pairs[0], n_cells)

    def loss_of(p):
        return privacy_loss((ends @ p).reshape(-1, m))

    res = _repair(solve, extreme_selection(cells, pairs), loss_of, epsilon)
    if res is None:
        return None
    pi, weight = res
    return cells, pairs, pi, (ends @ pi).reshape(-1, m), weight


def mvu_pieces(grid, lo, hi):
    """Pieces between consecutive input grid points (randomized rounding)."""
    return Pieces(grid[:-1], grid[1:], lo, hi)


def mvu_rows(matrix):
    """End rows of the pieces from the grid's transition matrix."""
    k = matrix.shape[0]
    return matrix[np.repeat(np.arange(k - 1), 2) + np.tile([0, 1], k - 1)]


def _two_point(grid, outputs):
    """Unbiased matrix on the two outer outputs (the most private one)."""
    k, m = grid.size, outputs.size
    matrix = np.zeros((k, m))
    matrix[:, 0] = (outputs[-1] - grid) / (outputs[-1] - outputs[0])
    matrix[:, -1] = (grid - outputs[0]) / (outputs[-1] - outputs[0])  # not 1 - [:, 0]: precision
    return matrix


def solve_mvu(outputs, grid, lo, hi, epsilon, prior, objective):
    """Optimal unbiased matrix from the input grid to ``outputs`` (MVU).

    The LP of Chaudhuri et al. (2022) for a given output alphabet: rows sum
    to 1, row means equal the grid inputs, entries of a column within a
    factor e^eps; the objective is the exact expected error under the prior
    of labels randomly rounded onto the grid. Returns None if infeasible,
    else the repaired (k, m) matrix.
    """
    k, m = grid.size, outputs.size
    centre, half = _scale(lo, hi)
    grid, outputs = (grid - centre) / half, (outputs - centre) / half
    pieces = mvu_pieces(grid, -1.0, 1.0)
    w = row_weights(pieces, outputs, _normalised_prior(prior, lo, hi), objective)
    # Row 2c is grid point c, row 2c + 1 grid point c + 1.
    cost_matrix = np.zeros((k, m))
    np.add.at(cost_matrix, np.repeat(np.arange(k - 1), 2) + np.tile([0, 1], k - 1), w)
    n = k * m
    cost = np.concatenate([cost_matrix.ravel(), np.zeros(2 * m)])
    rows = np.repeat(np.arange(k), m)
    a_eq = sp.vstack(
        [
            sp.csr_matrix((np.ones(n), (rows, np.arange(n))), shape=(k, n + 2 * m)),
            sp.csr_matrix((np.tile(outputs, k), (rows, np.arange(n))), shape=(k, n + 2 * m)),
        ]
    )
    b_eq = np.concatenate([np.ones(k), grid])

    def solve(eps):
        a_ub, b_ub = _dp_constraints(n, sp.identity(n, format="csr"), k, m, eps)
        x = _linprog(cost, a_ub, b_ub, a_eq, b_eq)
        if x is None:
            return None
        matrix = np.maximum(x[:n], 0.0).reshape(k, m)
        matrix /= matrix.sum(axis=1, keepdims=True)
        return _restore_means(matrix, grid, outputs)

    res = _repair(solve, _two_point(grid, outputs), privacy_loss, epsilon)
    return None if res is None else res[0]


def _restore_means(matrix, grid, outputs):
    """Mix each row with a two-point row on the outer outputs to fix its mean.

    After clipping, a row's mean is off by solver tolerance; the smallest
    mixture with a distribution on ``{outputs[0], outputs[-1]}`` that puts
    it back on the grid value keeps the row a distribution.
    """
    mean = matrix @ outputs
    gap = grid - mean
    room = np.minimum(grid - outputs[0], outputs[-1] - grid)
    w = np.minimum(2.0 * np.abs(gap) / room, 1.0)
    fix = np.where(w > 0, grid + gap * (1.0 - w) / np.where(w > 0, w, 1.0), grid)
    fix = np.clip(fix, outputs[0], outputs[-1])
    two = np.zeros_like(matrix)
    two[:, 0] = (outputs[-1] - fix) / (outputs[-1] - outputs[0])
    two[:, -1] = (fix - outputs[0]) / (outputs[-1] - outputs[0])
    return (1.0 - w)[:, None] * matrix + w[:, None] * two


# -- positions of the bins / outputs -------------------------------------------
def _positions(theta, lo, hi, m, min_margin, free):
    """Increasing positions with the outer two beyond the bounds.

    ``theta[0], theta[1]``: log of the outer margins in units of the minimal
    one (minus 1), so every ``theta`` gives outer bins that are strictly
    private; margins are capped at ``max(8 (hi - lo), 4 x minimal)``.
    ``free``: the ``m - 1`` gaps are softmax weights (``theta[2:]``, the
    first fixed at 0); otherwise ``exp(theta[2])`` spreads evenly spaced
    interior positions from the centre (1: the outer ones on the bounds).
    """
    # Margins are capped: far outer bins with tiny probabilities can shave a
    # little absolute error but make the outputs heavy-tailed.
    cap = max(8.0 * (hi - lo), 4.0 * min_margin)
    first = lo - min(min_margin * (1.0 + math.exp(min(theta[0], 50.0))), cap)
    last = hi + min(min_margin * (1.0 + math.exp(min(theta[1], 50.0))), cap)
    if m == 2:
        return np.array([first, last])
    if free:
        logits = np.concatenate([[0.0], theta[2:]])
        gaps = np.exp(logits - logits.max())
        inner = first + (last - first) * np.cumsum(gaps)[: m - 2] / gaps.sum()
    else:
        centre, half = (lo + hi) / 2.0, (hi - lo) / 2.0
        spread = math.exp(theta[2])
        inner = centre + spread * half * np.linspace(-1.0, 1.0, m - 2)
        inner = np.clip(inner, first + 1e-9 * (last - first), last - 1e-9 * (last - first))
    return np.concatenate([[first], inner, [last]])


def _nelder_mead(fun, x0, step, max_evals):
    simplex = np.vstack([x0] + [x0 + step * e for e in np.eye(x0.size)])
    res = minimize(fun, x0, method="Nelder-Mead", options={
        "initial_simplex": simplex, "maxfev": max_evals, "xatol": 1e-3, "fatol": 1e-9,
    })
    return res.x, res.fun


# Nelder-Mead starts and evaluations per stage of the position search.
_N_STARTS, _EVALS = 1, 40


def optimize_positions(objective_of, lo, hi, m, epsilon, *, free_up_to=6):
    """Bin (or output) positions minimising ``objective_of(positions)``.

    002 grid-searches the bins by hand (and lists automatic tuning as future
    work); here a derivative-free search: a scan of the outer margin and the
    interior spread, then Nelder-Mead from the best point over three
    parameters (both outer margins, spread of evenly spaced interior bins),
    then, for ``m <= free_up_to``, over every gap.
    ``objective_of`` returns ``inf`` for infeasible positions. A local
    search: the result is good, not certified optimal.
    """
    min_margin = minimal_margin(lo, hi, epsilon)

    def run(theta, free=False):
        try:
            value = objective_of(_positions(theta, lo, hi, m, min_margin, free))
        except RuntimeError:  # the solver gave up on these positions: skip them
            return 1e300
        return value if np.isfinite(value) else 1e300

    # Scan symmetric margins and interior spreads, then refine from the best.
    scan = [np.array([s, s, w]) for s in np.linspace(-1.0, 5.0, 7) for w in (-1.5, -0.7, 0.0)]
    values = [run(t) for t in scan]
    theta, value = None, np.inf
    for i in np.argsort(values)[:_N_STARTS]:
        t, v = _nelder_mead(run, scan[i], 0.7, _EVALS)
        if v < value:
            theta, value = t, v
    best = _positions(theta, lo, hi, m, min_margin, False)
    if m <= 3 or m > free_up_to:
        return best
    gaps = np.diff(best)
    free0 = np.concatenate([theta[:2], np.log(gaps[1:] / gaps[0])])
    free_theta, free_value = _nelder_mead(lambda t: run(t, True), free0, 0.5, _EVALS)
    if free_value < value:
        return _positions(free_theta, lo, hi, m, min_margin, True)
    return best
