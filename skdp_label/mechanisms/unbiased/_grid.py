"""Paper 001's Alg. 1 on a fixed output grid, and unbiased randomized rounding.

The grid LP is solved in compact form with HiGHS: one auxiliary variable
``lo_j`` per output with ``lo_j <= M_ij <= e^eps lo_j`` (2k rows per output
instead of the k(k-1) pairwise DP rows of the textbook LP). The solver's
answer is then made exact: each column is decomposed into staircase rays
(entries ``c`` or ``e^eps c``), which are DP by construction, and the ray
weights are corrected by a minimum-norm solve so that rows sum to 1 and
means equal the inputs to rounding error; outputs stay on the grid.
"""

from __future__ import annotations

import math

import numpy as np
from scipy import sparse
from scipy.optimize import linprog

__all__ = ["optimal_unbiased_grid", "randomized_rounding_indices", "staircase_rays"]


def randomized_rounding_indices(values: np.ndarray, y: np.ndarray, u: np.ndarray) -> np.ndarray:
    """Unbiased randomized rounding of ``y`` onto sorted ``values`` (001 §3).

    A label between consecutive values ``v_l <= y <= v_h`` goes to ``v_h``
    with probability ``(y - v_l) / (v_h - v_l)`` (when ``u`` is below it),
    else to ``v_l``, so ``E[v] = y``; labels on a grid point stay there.
    Labels outside ``[values[0], values[-1]]`` go to the nearest end point.
    ``u`` holds one uniform in [0, 1) per label. Returns indices. (Releases
    fuse this step with the sampler: ``skdp_label._kernels._sampling.sample_rows``.)
    """
    n = values.shape[0]
    if n == 1:
        return np.zeros(y.shape[0], dtype=np.int64)
    hi = np.clip(np.searchsorted(values, y, side="right"), 1, n - 1)
    lo = hi - 1
    frac = np.clip((y - values[lo]) / (values[hi] - values[lo]), 0.0, 1.0)
    return np.where(u < frac, hi, lo).astype(np.int64)


def staircase_rays(column, e):
    """Decompose a DP column into staircase rays ``c (1 + e 1_S)``.

    With the entries sorted decreasingly, ray ``r`` (the top ``r`` inputs)
    gets ``(v_(r) - v_(r+1)) / e``, and the flat ray the rest of the
    smallest entry (clipped at 0: a column the LP left marginally outside
    the cone is pulled into it). Returns (masks of shape (n_rays, k),
    weights).
    """
    k = column.shape[0]
    order = np.argsort(-column)
    v = column[order]
    steps = (v[:-1] - v[1:]) / e
    flat = max(v[-1] - steps.sum(), 0.0)
    masks = np.zeros((k, k), dtype=bool)
    for r in range(1, k):
        masks[r, order[:r]] = True
    weights = np.concatenate([[flat], steps])
    keep = weights > 0
    return masks[keep], weights[keep]


def _grid_lp(y, p, z, e):
    """Compact-form LP of 001 Alg. 1 on outputs ``z``; returns M (k x n)."""
    k, n = y.size, z.size
    nm = k * n
    cost = np.concatenate([(p[:, None] * (z[None, :] - y[:, None]) ** 2).ravel(), np.zeros(n)])
    rows = np.repeat(np.arange(k), n)
    cols = np.arange(nm)
    a_eq = sparse.vstack(
        [
            sparse.csr_matrix((np.ones(nm), (rows, cols)), shape=(k, nm + n)),
            sparse.csr_matrix((np.tile(z, k), (rows, cols)), shape=(k, nm + n)),
        ]
    )
    b_eq = np.concatenate([np.ones(k), y])
    out_of = np.tile(np.arange(n), k)  # output index of each M entry
    r = np.arange(nm)
    upper = sparse.csr_matrix(
        (np.concatenate([np.ones(nm), np.full(nm, -(e + 1.0))]),
         (np.concatenate([r, r]), np.concatenate([cols, nm + out_of]))),
        shape=(nm, nm + n),
    )
    lower = sparse.csr_matrix(
        (np.concatenate([-np.ones(nm), np.ones(nm)]),
         (np.concatenate([r, r]), np.concatenate([cols, nm + out_of]))),
        shape=(nm, nm + n),
    )
    res = linprog(
        cost, A_ub=sparse.vstack([upper, lower]).tocsc(), b_ub=np.zeros(2 * nm),
        A_eq=a_eq.tocsc(), b_eq=b_eq, bounds=(0, None), method="highs",
    )
    if res.status != 0:
        raise RuntimeError(f"grid LP failed: {res.message}")
    return res.x[:nm].reshape(k, n)


def optimal_unbiased_grid(values, prior, epsilon, grid):
    """Optimal unbiased epsilon-DP randomizer with outputs in ``grid``.

    Returns (outputs, matrix): the grid points used and an exactly DP,
    exactly unbiased transition matrix (see the module docstring).
    """
    y = np.asarray(values, dtype=np.float64)
    p = np.asarray(prior, dtype=np.float64)
    e = math.expm1(epsilon)
    center = 0.5 * (y[0] + y[-1])
    half = 0.5 * (y[-1] - y[0]) if y.size > 1 else 1.0
    yn = (y - center) / half
    grid = np.asarray(grid, dtype=np.float64)
    zn = (grid - center) / half
    matrix = _grid_lp(yn, p, zn, e)
    # Rebuild every used column from exact staircase rays.
    masks, weights, where = [], [], []
    for j in np.nonzero(matrix.max(axis=0) > 1e-12)[0]:
        m_j, w_j = staircase_rays(matrix[:, j], e)
        masks.append(m_j)
        weights.append(w_j)
        where.append(np.full(w_j.size, j))
    masks = np.concatenate(masks).T  # k x n_rays
    weights = np.concatenate(weights)
    where = np.concatenate(where)
    a = 1.0 + e * masks
    constraints = np.vstack([a, a * zn[where][None, :]])
    target = np.concatenate([np.ones(y.size), yn])
    big = weights > 1e-9 * weights.max()
    sub = constraints[:, big]
    for _ in range(2):
        resid = target - constraints @ weights
        weights[big] += sub.T @ np.linalg.lstsq(sub @ sub.T, resid, rcond=None)[0]
    if np.any(weights < 0):
        raise RuntimeError("grid LP repair left a negative ray weight")
    used = np.unique(where)
    out = np.zeros((y.size, used.size))
    np.add.at(out.T, np.searchsorted(used, where), (a * weights[None, :]).T)
    return grid[used], out
