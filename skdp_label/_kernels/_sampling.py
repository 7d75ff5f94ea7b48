"""Sampling kernels. Each turns pre-drawn uniforms into mechanism outputs.

The uniforms come from a numpy ``Generator`` (seeded or OS entropy), so the
kernels hold no random state of their own; every kernel uses one uniform per
label and runs in a single pass.
"""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def _staircase_magnitude(v, log_b, b, width, r, p_zero, block_mass):
    """Largest m >= 1 with P(Z <= -m) > v for the staircase distribution.

    ``p_zero`` is P(Z = 0); the one-sided weight of i = k*width + j is
    b**k for j < r and b**(k+1) otherwise.
    """
    # Block: largest K with the tail from block K on, p0 * b^K * M / (1-b), above v.
    x = v * (1.0 - b) / (p_zero * block_mass)
    if x >= 1.0:
        k = 0
    else:
        k = int(np.floor(np.log(x) / log_b))
    # Within block k: the remaining tail is a piecewise-linear function of j.
    rest = v / (p_zero * b**k) - b * block_mass / (1.0 - b)
    upper = b * (width - r)
    if rest < upper:
        j = np.ceil(width - rest / b) - 1.0
    else:
        j = np.ceil(r + upper - rest) - 1.0
    if j < 0.0:
        j = 0.0
    if j > width - 1.0:
        j = width - 1.0
    m = k * width + j
    if m < 1.0:
        m = 1.0
    return m


@numba.njit(cache=True, nogil=True)
def staircase_noise(u, b, width, r):
    """Symmetric discrete staircase noise by inversion, one uniform each.

    P(Z = z) = p0 * w(|z|) with w(k*width + j) = b**k (j < r) or b**(k+1)
    (r <= j < width); ``width = r = 1`` gives the discrete Laplace
    distribution P(Z = z) proportional to b**|z|.

    Parameters
    ----------
    u : ndarray of float64 in [0, 1)
    b : float in (0, 1)
        Decay per block, ``exp(-epsilon_per_block)``.
    width, r : float
        Block width and length of the high step (integers stored as floats).

    Returns
    -------
    z : ndarray of float64 holding integers
    """
    block_mass = r + b * (width - r)
    p_zero = (1.0 - b) / (2.0 * block_mass - (1.0 - b))
    p_neg = (1.0 - p_zero) / 2.0  # P(Z <= -1)
    log_b = np.log(b)
    out = np.empty(u.shape[0], dtype=np.float64)
    for i in range(u.shape[0]):
        ui = u[i]
        if ui < p_neg:
            out[i] = -_staircase_magnitude(ui, log_b, b, width, r, p_zero, block_mass)
        elif ui >= 1.0 - p_neg:
            v = 1.0 - ui
            if v <= 0.0:
                v = 1e-300
            out[i] = _staircase_magnitude(v, log_b, b, width, r, p_zero, block_mass)
        else:
            out[i] = 0.0
    return out


@numba.njit(cache=True, nogil=True)
def randomized_response_indices(codes, u, n_classes, p_keep):
    """k-ary randomized response on class codes, one uniform each."""
    out = np.empty(codes.shape[0], dtype=np.int64)
    # p_keep rounds to 1 at very large epsilon: no uniform then falls past it.
    scale = (n_classes - 1) / (1.0 - p_keep) if n_classes > 1 and p_keep < 1.0 else 0.0
    for i in range(codes.shape[0]):
        ui = u[i]
        if ui < p_keep or n_classes == 1:
            out[i] = codes[i]
        else:
            j = int((ui - p_keep) * scale)
            if j > n_classes - 2:
                j = n_classes - 2
            out[i] = (codes[i] + 1 + j) % n_classes
    return out


@numba.njit(cache=True, nogil=True)
def categorical_rows(codes, u, cdf):
    """Draw column j of row ``codes[i]`` by inverting the row's CDF.

    ``cdf`` is the row-wise cumulative transition matrix with the last column
    set to exactly 1.
    """
    n_out = cdf.shape[1]
    out = np.empty(codes.shape[0], dtype=np.int64)
    for i in range(codes.shape[0]):
        row = cdf[codes[i]]
        ui = u[i]
        lo, hi = 0, n_out - 1
        while lo < hi:
            mid = (lo + hi) // 2
            if row[mid] > ui:
                hi = mid
            else:
                lo = mid + 1
        out[i] = lo
    return out
