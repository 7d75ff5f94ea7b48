"""Sampling kernels. Each turns pre-drawn uniforms into mechanism outputs.

The uniforms come from a numpy ``Generator`` (seeded or OS entropy), so the
kernels hold no random state of their own; every kernel uses one uniform per
label and runs in a single pass.
"""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True, inline="always")
def _staircase_magnitude(v, c):
    """Largest m >= 1 with P(Z <= -m) > v for the staircase distribution.

    ``c`` holds the constants from :func:`_staircase_constants`. The
    one-sided weight of i = k*width + j is exp(-lam k) for j < r and
    exp(-lam (k+1)) otherwise.
    """
    lam, width, r, b, block_scale, p_zero, tail_offset = c[0], c[1], c[2], c[3], c[4], c[5], c[6]
    if v < 2.0**-54:
        v = 2.0**-54  # u = 0 has probability 2**-53: treat it as the smallest step
    # Block: largest k whose tail from the block start, p0 e^(-lam k) M / (1 - b), exceeds v.
    x = v * block_scale
    k = 0.0 if x >= 1.0 else np.floor(-np.log(x) / lam)
    if width == 1.0:
        return k if k >= 1.0 else 1.0  # discrete Laplace: a block is one integer
    # Within block k the remaining tail is piecewise linear in j.
    rest = v * np.exp(lam * k) / p_zero - tail_offset
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
    return m if m >= 1.0 else 1.0


@numba.njit(cache=True, nogil=True)
def _staircase_constants(lam, width, r):
    """(lam, width, r, b, (1-b)/(p0 M), p0, b M/(1-b), P(Z <= -1)) of the staircase."""
    one_minus_b = -np.expm1(-lam)
    b = np.exp(-lam)
    block_mass = r + b * (width - r)
    p_zero = one_minus_b / (2.0 * block_mass - one_minus_b)
    c = np.empty(8)
    c[0], c[1], c[2], c[3] = lam, width, r, b
    c[4] = one_minus_b / (p_zero * block_mass)
    c[5] = p_zero
    c[6] = b * block_mass / one_minus_b
    c[7] = (1.0 - p_zero) / 2.0
    return c


@numba.njit(cache=True, nogil=True, inline="always")
def _staircase_draw(ui, c):
    p_neg = c[7]
    if ui < p_neg:
        return -_staircase_magnitude(ui, c)
    if ui >= 1.0 - p_neg:
        return _staircase_magnitude(1.0 - ui, c)
    return 0.0


@numba.njit(cache=True, nogil=True)
def staircase_noise(u, lam, width, r):
    """Symmetric discrete staircase noise by inversion, one uniform each.

    P(Z = z) = p0 * w(|z|) with w(k*width + j) = exp(-lam k) (j < r) or
    exp(-lam (k+1)) (r <= j < width); ``width = r = 1`` gives the discrete
    Laplace distribution P(Z = z) proportional to exp(-lam |z|).

    The decay is passed as the rate ``lam``, not as b = exp(-lam): for the
    fine grids of continuous mechanisms lam is tiny and b would lose most
    of its precision (1 - b is computed with expm1).

    Parameters
    ----------
    u : ndarray of float64 in [0, 1)
    lam : float > 0
        Privacy loss per block (epsilon per block).
    width, r : float
        Block width and length of the high step (integers stored as floats).

    Returns
    -------
    z : ndarray of float64 holding integers
    """
    c = _staircase_constants(lam, width, r)
    out = np.empty(u.shape[0], dtype=np.float64)
    for i in range(u.shape[0]):
        out[i] = _staircase_draw(u[i], c)
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def _shift_on_grid(y, z, granularity, inv_granularity, clip, lo, hi):
    """(rint(y / g) + z) * g, clipped to [lo, hi] when ``clip``: an exact float.

    ``inv_granularity`` is 1 / g, exact because g is a power of two.
    """
    v = (np.rint(y * inv_granularity) + z) * granularity
    if clip:
        v = min(max(v, lo), hi)
    return v


@numba.njit(cache=True, nogil=True)
def staircase_additive(y, u, granularity, lam, width, r, clip, lo, hi):
    """Labels rounded to the grid plus staircase noise in grid units, clipped.

    Fused in one pass: ``(rint(y / g) + Z) * g``, then clipped to [lo, hi]
    when ``clip``. Every output is an exact multiple of ``g``.
    """
    c = _staircase_constants(lam, width, r)
    inv_granularity = 1.0 / granularity
    out = np.empty(y.shape[0], dtype=np.float64)
    for i in range(y.shape[0]):
        z = _staircase_draw(u[i], c)
        out[i] = _shift_on_grid(y[i], z, granularity, inv_granularity, clip, lo, hi)
    return out


@numba.njit(cache=True, nogil=True)
def staircase_additive_alias(y, u, granularity, z_first, below, above, prob, alias, c, clip, lo, hi):
    """:func:`staircase_additive` with the bulk of the noise from an alias table.

    A uniform in [below, above) is rescaled to [0, 1) and drawn through the
    alias table of the bulk (z_first, z_first + 1, ...): no loop, no
    logarithm. Uniforms in the two tails use the closed-form inversion
    (constants ``c``), which maps them to values outside the bulk.
    """
    k = prob.shape[0]
    scale = k / (above - below)
    inv_granularity = 1.0 / granularity
    out = np.empty(y.shape[0], dtype=np.float64)
    for i in range(y.shape[0]):
        ui = u[i]
        if ui < below or ui >= above:
            z = _staircase_draw(ui, c)
        else:
            v = (ui - below) * scale
            j = min(np.int64(v), k - 1)
            keep = np.int64(v - j < prob[j])  # branch-free select of j or alias[j]
            z = z_first + alias[j] + keep * (j - alias[j])
        out[i] = _shift_on_grid(y[i], z, granularity, inv_granularity, clip, lo, hi)
    return out


@numba.njit(cache=True, nogil=True)
def count_outside(y, lo, hi, integer):
    """How many labels are outside [lo, hi] (or, if ``integer``, not integers)."""
    bad = 0
    for i in range(y.shape[0]):
        v = y[i]
        if not (lo <= v <= hi) or (integer and v != np.floor(v)):
            bad += 1
    return bad


@numba.njit(cache=True, nogil=True)
def randomized_response_contiguous(y, u, lo, n_classes, p_keep):
    """k-ary RR on labels that are the integers lo, ..., lo + k - 1 (validated).

    Returns noisy labels (not codes) in the dtype of ``y``.
    """
    out = np.empty_like(y)
    # p_keep rounds to 1 at very large epsilon: no uniform then falls past it.
    scale = (n_classes - 1) / (1.0 - p_keep) if p_keep < 1.0 else 0.0
    for i in range(y.shape[0]):
        ui = u[i]
        if ui < p_keep:
            out[i] = y[i]
        else:
            j = np.int64((ui - p_keep) * scale)
            if j > n_classes - 2:
                j = n_classes - 2
            code = np.int64(y[i] - lo) + 1 + j  # < 2k: a subtraction, not a modulo
            if code >= n_classes:
                code -= n_classes
            out[i] = lo + code
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def rr_scale(n_classes, p_keep):
    """Factor turning a uniform in [p_keep, 1) into one of the other classes."""
    # p_keep rounds to 1 at very large epsilon: no uniform then falls past it.
    return (n_classes - 1) / (1.0 - p_keep) if n_classes > 1 and p_keep < 1.0 else 0.0


@numba.njit(cache=True, nogil=True, inline="always")
def rr_code(code, ui, n_classes, p_keep, scale):
    """k-ary RR of one class code with one uniform (``scale = rr_scale(...)``)."""
    if ui < p_keep or n_classes == 1:
        return code
    j = np.int64((ui - p_keep) * scale)
    if j > n_classes - 2:
        j = n_classes - 2
    out = code + 1 + j  # < 2k: a subtraction, not a modulo
    if out >= n_classes:
        out -= n_classes
    return out


@numba.njit(cache=True, nogil=True)
def randomized_response_indices(codes, u, n_classes, p_keep):
    """k-ary randomized response on class codes, one uniform each."""
    out = np.empty(codes.shape[0], dtype=np.int64)
    scale = rr_scale(n_classes, p_keep)
    for i in range(codes.shape[0]):
        out[i] = rr_code(codes[i], u[i], n_classes, p_keep, scale)
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
