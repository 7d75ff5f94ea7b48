"""Noise distributions of the additive mechanisms (pure functions).

The symmetric discrete staircase distribution with decay rate ``lam``
(b = exp(-lam)), block ``width`` and high-step length ``r`` (000 Def. 24;
Geng & Viswanath 2014):

    P(Z = z) = p0 * w(|z|),  w(k * width + j) = b**k (j < r), b**(k + 1) (j >= r),
    p0 = (1 - b) / (2 (r + b (width - r)) - (1 - b)).

``width = r = 1`` is the discrete Laplace distribution P(Z = z) ∝ b**|z|.
Functions take ``lam`` rather than ``b``: on fine grids lam is ~1e-13 and
b = exp(-lam) would carry a relative error of ~1e-3 in 1 - b.
"""

import math

import numpy as np
from scipy import optimize, special

from ..._kernels._sampling import (
    geometric_constants, max_geometric, max_staircase_magnitude, split_probability,
)
from .._validation import SAMPLER_RTOL

__all__ = [
    "staircase_pmf",
    "staircase_tail",
    "staircase_moment",
    "staircase_alias_table",
    "laplace_cell_table",
    "alias_table",
    "alias_table_probabilities",
    "optimal_staircase_gamma",
    "optimal_discrete_staircase_r",
    "gaussian_sigma",
    "gaussian_delta",
]


def _p_zero(lam, width, r):
    one_minus_b = -math.expm1(-lam)
    return one_minus_b / (2.0 * (r + math.exp(-lam) * (width - r)) - one_minus_b)


def staircase_pmf(z, lam, width, r):
    """P(Z = z) for integer array ``z``."""
    m = np.abs(np.asarray(z, dtype=np.int64))
    k, j = np.divmod(m, int(width))
    return _p_zero(lam, width, r) * np.exp(-lam * (k + (j >= r)))


def staircase_variance(lam, width, r):
    """Var(Z) of the discrete staircase noise, in closed form over the blocks.

    With z = k w + j (block k, offset j) and q = e^-lam, P(Z = z) is
    p0 q^(k + [j >= r]); summing the geometric series in k leaves one sum
    over the w offsets (the distribution is symmetric, so E[Z] = 0).
    """
    q = math.exp(-lam)
    width = int(width)
    s0 = 1.0 / -math.expm1(-lam)
    s1 = q * s0 * s0
    s2 = q * (1.0 + q) * s0**3
    j = np.arange(width, dtype=np.float64)
    weight = np.where(j < r, 1.0, q)
    second = np.sum(weight * (width**2 * s2 + 2.0 * width * j * s1 + j**2 * s0))
    return float(2.0 * _p_zero(lam, width, r) * second)


def staircase_tail(m, lam, width, r):
    """P(Z >= m) for integer array ``m`` (any sign)."""
    m = np.asarray(m, dtype=np.int64)
    width = int(width)
    b = math.exp(-lam)
    block_mass = r + b * (width - r)
    p0 = _p_zero(lam, width, r)

    def upper(mm):  # P(Z >= mm) for mm >= 1
        k, j = np.divmod(mm, width)
        within = np.where(j < r, (r - j) + b * (width - r), b * (width - j))
        return p0 * np.exp(-lam * k) * (within + b * block_mass / -math.expm1(-lam))

    pos = m >= 1
    return np.where(pos, upper(np.maximum(m, 1)), 1.0 - upper(np.maximum(1 - m, 1)))


def alias_table(probabilities):
    """Walker/Vose alias table: draw i = floor(v K), keep i if frac < prob[i], else alias[i].

    Returns ``(prob, alias)``. The table is exact up to float rounding: the
    implied probabilities (see :func:`alias_table_probabilities`) match the
    input to ~1e-16 absolute.
    """
    p = np.asarray(probabilities, dtype=np.float64)
    k = p.shape[0]
    scaled = p * (k / p.sum())
    prob = np.ones(k)
    alias = np.arange(k, dtype=np.int64)
    small = [i for i in range(k) if scaled[i] < 1.0]
    large = [i for i in range(k) if scaled[i] >= 1.0]
    while small and large:
        s, g = small.pop(), large.pop()
        prob[s] = scaled[s]
        alias[s] = g
        scaled[g] = (scaled[g] + scaled[s]) - 1.0
        (small if scaled[g] < 1.0 else large).append(g)
    # Leftovers are 1 up to rounding.
    return prob, alias


def alias_table_probabilities(prob, alias):
    """The distribution an alias table samples from (for tests)."""
    k = prob.shape[0]
    implied = prob.copy()
    np.add.at(implied, alias, 1.0 - prob)
    return implied / k


def staircase_alias_table(lam, width, r, min_probability=1e-5, max_entries=1 << 18, rtol=SAMPLER_RTOL):
    """Alias table of the bulk of the staircase distribution, for the fast path
    of :func:`skdp_label._kernels._sampling.staircase_additive_bulk`.

    The bulk is the values |z| < m0 of whole blocks whose probability is at
    least ``min_probability``; the tail |z| >= m0 (probability
    ``tail_probability``) is drawn by the exact sampler. The fast path maps
    one 53-bit digit into the table, so each bulk value's probability is off
    by at most 4 (1 + number of cells aliasing it) / 2**53 from digit
    quantisation, plus the table's own float error. Both are bounded here;
    returns None (use the exact sampler everywhere) when the bound exceeds
    ``rtol`` relative, or when the bulk would exceed ``max_entries``.

    Returns
    -------
    m0 : int
        First magnitude of the tail.
    tail_probability : float
        P(|Z| >= m0) = 2 p0 b^n M / (1 - b), n = m0 / width.
    prob, alias : ndarray
        The alias table of z = -(m0 - 1), ..., m0 - 1.
    """
    p0 = _p_zero(lam, width, r)
    if p0 < min_probability:
        return None
    # Blocks decay by e^-lam; the bulk is the whole blocks whose low step
    # (b times the block's high step) is still above the floor.
    n_blocks = math.floor(math.log(p0 / min_probability) / lam) + (1 if r == width else 0)
    if n_blocks < 1:
        return None
    m0 = n_blocks * int(width)
    if 2 * m0 - 1 > max_entries:
        return None
    z = np.arange(-(m0 - 1), m0, dtype=np.int64)
    pmf = staircase_pmf(z, lam, width, r)
    block_mass = r + math.exp(-lam) * (width - r)
    tail_probability = 2.0 * p0 * math.exp(-lam * n_blocks) * block_mass / -math.expm1(-lam)
    prob, alias = alias_table(pmf)
    # Error bound of the fast path, relative to each bulk value's probability.
    if not _alias_error_bound(prob, alias, pmf, 1.0 - tail_probability) <= rtol:
        return None
    return m0, tail_probability, prob, alias


def _alias_error_bound(prob, alias, target, share=1.0):
    """Largest relative error of the probabilities an alias table samples,
    drawn from one digit spread over ``share`` of the digit values, against
    ``target``: the table's float error plus digit quantisation, at most
    4 (1 + n_j) / 2**53 for an entry aliased by n_j cells."""
    implied = alias_table_probabilities(prob, alias) * share
    n_in = np.bincount(alias[prob < 1.0], minlength=prob.shape[0])
    return float(np.max((np.abs(implied - target) + 4.0 * (1.0 + n_in) / 2.0**53) / target))


# Cells of a power-of-two L values with lam L about 2**-6: the smallest
# acceptance of an offset is e^(-lam (L - 1)) > 0.984, and the cells from the
# densest down to 2e-6 are ~1,000-2,000 (tables of 25-50 kB, about L1). At
# most 2**30 values a cell: 23 bits of the offset's digit start its
# acceptance (exact either way: a tie reads on).
_CELL_RATE = 2.0**-6
_MAX_CELL = 2**30


def laplace_cell_table(lam, min_probability=2e-6, max_entries=1 << 18, rtol=SAMPLER_RTOL):
    """Alias table of the bulk of the discrete Laplace on a fine grid, by cells.

    For ``lam < 2**-10`` (the continuous Laplace's grids) the bulk has far
    too many values for :func:`staircase_alias_table`; the table holds
    *cells* instead: 0, and for each sign the cells s = 0, 1, ..., T - 1 of
    ``L`` values 1 + L s + i (``L`` the power of two with lam L in
    (2**-7, 2**-6]), as long as a cell's probability is at least
    ``min_probability``. The offset i inside a cell has the same law in
    every cell, P(i) proportional to e^(-lam i), sampled exactly by rejection
    (:func:`skdp_label._kernels._sampling.staircase_additive_bulk`). Returns
    None when ``lam >= 2**-10``, when the error bound of a cell's
    probability (digit quantisation and float error, as in
    :func:`staircase_alias_table`) exceeds ``rtol`` relative, or when a cell
    would exceed 2**30 values.

    Returns
    -------
    m0 : int
        First magnitude of the tail, 1 + L T.
    tail_probability : float
        P(|Z| >= m0) = 2 p0 b^m0 / (1 - b).
    prob, alias : ndarray
        The alias table of the cells t = -T, ..., T.
    cell : int
        L, the values per cell.
    squeeze : int
        An integer below 2**(53 - log2 L) e^(-lam (L - 1)): offsets whose
        acceptance bits lie below it are accepted without the exponential.
    """
    lam = float(lam)
    if not lam < 2.0**-10:
        return None
    log_l = math.floor(math.log2(_CELL_RATE / lam))
    big_l = 2**log_l
    if big_l > _MAX_CELL:
        return None
    lam_l = lam * big_l
    p0 = _p_zero(lam, 1, 1)
    # Cell s holds p0 b^(1 + L s) (1 - b^L) / (1 - b): positive terms, 1 - b by expm1.
    first = p0 * math.exp(-lam) * math.expm1(-lam_l) / math.expm1(-lam)
    n_cells = min(math.floor(math.log(first / min_probability) / lam_l) + 1, (max_entries - 1) // 2)
    if n_cells < 1:
        return None
    cells = first * np.exp(-lam_l * np.arange(n_cells, dtype=np.float64))
    masses = np.concatenate([cells[::-1], [p0], cells])
    m0 = 1 + big_l * n_cells
    tail_probability = 2.0 * p0 * math.exp(-lam * m0) / -math.expm1(-lam)
    prob, alias = alias_table(masses)
    if not _alias_error_bound(prob, alias, masses, 1.0 - tail_probability) <= rtol:
        return None
    # (1 - 1e-12): below the kernel's e^(-lam i) for every i < L whatever
    # the last bit of either exponential.
    unit = 2.0 ** (53 - log_l)
    squeeze = math.floor(math.exp(-lam * (big_l - 1)) * unit * (1.0 - 1e-12))
    return m0, tail_probability, prob, alias, big_l, squeeze


# A table of pieces whose entries of other lengths than a power of two hold
# more of the mass is cut into whole steps instead: half of the draws there
# (eps = 0.002: thousands of steps, too many for pieces) made the kernel's
# branch on the entry's kind a coin flip, 1.6x slower than whole steps.
_MAX_OTHER_SHARE = 0.1


def staircase_cell_table(
    lam, width, r, min_probability=2e-6, max_entries=1 << 18, rtol=SAMPLER_RTOL, piece_mass=2.0**-20,
    max_pieces=16384,
):
    """Alias table of the bulk of the staircase distribution by *pieces of
    steps*, for the fine grids of the continuous staircase (``width`` ~ 2**20
    eps values a block: far too many values for :func:`staircase_alias_table`).

    Every value of a step has the same probability: the centre -(r - 1), ...,
    r - 1 (block 0's high step, both signs, and 0), and for each sign block
    0's low step and, for blocks k = 1, ..., K - 1, their high and low steps,
    as long as a block has at least ``min_probability``. The tail |z| >= m0 =
    K width (probability 2 p0 b^K M / (1 - b)) is the exact sampler's. Each
    step is cut into entries of equal-weight values (:func:`_step_pieces`):
    pieces of a power of two of values, whose value the kernel reads from a
    digit's top bits (a shift: no division, no rejection), each of mass at
    least ``piece_mass``, and at most one entry of any other length per step
    (its low values: drawn exactly by rejection, on a rare path). Returns
    None when the table's error bound (digit quantisation and float error, as
    in :func:`staircase_alias_table`) exceeds ``rtol`` relative (after
    retrying with coarser pieces), or when it would have more than
    ``max_entries`` entries or no block beyond 0. Pieces are made coarser
    (``piece_mass`` times 4) while there would be more than ``max_pieces``
    entries (56 bytes an entry: at most 917 kB, reached only for eps below
    ~0.01, whose many blocks made 3,127 whole steps already; fewer entries
    there left half of the draws to the rare path), and the steps are left
    whole when the entries of other lengths would hold more than a tenth of
    the mass (eps below ~0.004).

    Returns
    -------
    m0 : int
    tail_probability : float
    prob, alias : ndarray
        The alias table of the entries.
    starts, sizes : ndarray of int64
        First value and number of values of each entry.
    """
    width, r = int(width), int(r)
    p0 = _p_zero(lam, width, r)
    b = math.exp(-lam)
    block_mass = r + b * (width - r)
    n_blocks = min(
        math.floor(math.log(p0 * block_mass / min_probability) / lam) + 1, (max_entries - 1) // 4
    )
    if n_blocks < 2:
        return None
    starts, sizes, weights = [-(r - 1)], [2 * r - 1], [p0]
    for k in range(n_blocks):
        steps = [(k * width + r, width - r, k + 1)]  # the low step (weight b^(k+1))
        if k > 0:
            steps.append((k * width, r, k))  # the high step (weight b^k)
        for first, size, power in steps:
            if size > 0:
                weight = p0 * math.exp(-lam * power)
                starts += [first, -(first + size - 1)]
                sizes += [size, size]
                weights += [weight, weight]
    m0 = n_blocks * width
    tail_probability = 2.0 * p0 * math.exp(-lam * n_blocks) * block_mass / -math.expm1(-lam)
    starts, sizes, weights = np.array(starts), np.array(sizes), np.array(weights)
    while True:
        table = _step_pieces(starts, sizes, weights, piece_mass)
        piece_starts, piece_sizes, masses = table
        other = masses[piece_sizes & (piece_sizes - 1) != 0].sum()
        if piece_mass < 1.0 and other > _MAX_OTHER_SHARE * masses.sum():
            piece_mass = 4.0  # whole steps: every draw's residue, a predictable branch
            continue
        if piece_starts.shape[0] <= max_pieces or piece_mass >= 1.0:
            if piece_starts.shape[0] > max_entries:
                return None
            prob, alias = alias_table(masses)
            if _alias_error_bound(prob, alias, masses, 1.0 - tail_probability) <= rtol:
                return m0, tail_probability, prob, alias, piece_starts, piece_sizes
            if piece_mass >= 1.0:  # whole steps (no pieces) do not meet it either
                return None
        piece_mass *= 4.0


def _step_pieces(starts, sizes, weights, piece_mass):
    """The steps (first value, number of values, weight of a value) cut into
    entries: for a step of m values of weight w, f the least integer with
    w 2**f >= ``piece_mass``, its low values (m mod 2**f, if any) and 2**f
    more make one entry of another length than a power of two (the whole
    step if m < 2**(f + 1)), and the rest, a multiple of 2**f, is a piece
    of 2**k values for each of its bits k: every entry has mass >=
    ``piece_mass`` or is a whole step, and a step has at most one entry of
    another length, of mass below 4 ``piece_mass``. (starts, sizes,
    masses)."""
    out_starts, out_sizes, out_masses = [], [], []
    for first, m, w in zip(starts.tolist(), sizes.tolist(), weights.tolist()):
        f = 0
        while w * 2.0**f < piece_mass and 1 << f <= m:
            f += 1
        low = m & ((1 << f) - 1)
        lengths = []
        if low or m < 1 << f:
            lengths.append(min(m, low + (1 << f)))
        rest = m - lengths[0] if lengths else m
        lengths += [1 << k for k in range(rest.bit_length()) if rest >> k & 1]
        for length in lengths:
            out_starts.append(first)
            out_sizes.append(length)
            out_masses.append(w * length)
            first += length
    return (np.array(out_starts, dtype=np.int64), np.array(out_sizes, dtype=np.int64),
            np.array(out_masses))


def gaussian_cell_table(
    sigma, cells_per_sigma=32, n_sigmas=9.0, min_probability=2e-6, max_entries=1 << 18, rtol=SAMPLER_RTOL,
    zero_envelope=64,
):
    """Envelope tables of the discrete Gaussian P(Z = z) proportional to
    e^(-z^2 / (2 sigma^2)), for :func:`skdp_label._kernels._sampling.gaussian_additive`.

    Rejection from a piecewise-constant envelope: cells of ``L`` values (a
    power of two, about sigma / ``cells_per_sigma``; 1 for small sigma), the
    value 0 (envelope K = min(L, ``zero_envelope``), accepted when the
    offset is below L / K: probability exactly 1 / K) and for each sign
    the cells t = 1, ..., T of magnitudes
    m = 1 + L (t - 1) + i, i < L, covering about ``n_sigmas`` sigma. Cell t's
    envelope is L e^(-m_t^2 / 2 sigma^2) (its first value's weight, m_t =
    1 + L (t - 1)); a proposal picks a cell by an alias table, an offset i
    uniformly, and is accepted with an exact Bernoulli of
    e^(-i (2 m_t + i) / 2 sigma^2) = w(m) / w(m_t): the accepted value has
    probability proportional to w(m) exactly (up to the table's error and
    the float rounding of the exponential). Magnitudes m >= m0 = 1 + L T
    (the tail) are proposed as m0 + G, G geometric of rate m0 / sigma^2 (the
    tangent of m^2 / 2 sigma^2 at m0, so w(m0) e^(-G m0 / sigma^2) is an
    envelope) and accepted with probability e^(-G^2 / 2 sigma^2). A rejected
    proposal starts over.

    Returns None when the alias table's error bound (digit quantisation and
    float error, as in :func:`staircase_alias_table`) exceeds ``rtol``
    relative, or when the tail could propose magnitudes beyond those of the
    Canonne-Kamath-Steinke sampler (whose range the mechanism checked).

    Returns
    -------
    constants : ndarray of float64
        (tail digit threshold, its fraction, bulk scale, T, L, 53 - log2 L,
        m0, 1 / 2 sigma^2, the four :func:`geometric_constants` of the tail,
        the squeeze's bound B = floor(u (1 - 1e-12)), u = 2**(53 - log2 L),
        and L / K, the offsets the value 0 accepts).
    prob, alias : ndarray
        The alias table of the cells t = -T, ..., T.
    squeeze : ndarray of int64
        A linear squeeze: for |t| = 1, ..., T the slope k_t = ceil(u (2 m_t +
        L - 1) / 2 sigma^2 (1 + 1e-12)) (0 when L = 1), and 2**52 for the cell of 0 (entry
        0): a proposal of offset i whose acceptance bits b (the offset
        digit's low 53 - log2 L bits) satisfy b + i k_t < B is accepted
        without computing the exponential. Exactly when the exact Bernoulli
        would accept: 1 - a <= e^-a, so b + 1 <= B - i k_t <= u (1 - 1e-12)
        (1 - i (2 m_t + i) / 2 sigma^2) lies below the kernel's float u
        e^(-i (2 m_t + i) / 2 sigma^2) (the margin 1e-12 covers its
        rounding), and b + 1 <= floor(that): the uniform U (b plus further
        digits, in units of u) lies below the acceptance. In the cell of 0
        only the offset 0 passes (always accepted there). Most of a cell's
        proposals that the exact Bernoulli accepts pass: the rare path runs
        for the rejected ones (~1%) and a few more (e^-a - 1 + a <= a^2 / 2).
    """
    sigma = float(sigma)
    two_var = 2.0 * sigma * sigma
    log_l = max(0, min(20, math.floor(math.log2(max(sigma / cells_per_sigma, 1.0)))))
    big_l = 2**log_l
    n_cells = min(math.ceil(n_sigmas * sigma / big_l) + 1, (max_entries - 1) // 2)
    m_first = 1.0 + big_l * np.arange(n_cells, dtype=np.float64)  # m_t of t = 1, ..., T
    cells = big_l * np.exp(-(m_first * m_first) / two_var)
    n_cells = max(1, int(np.count_nonzero(cells >= min_probability * (big_l + 2.0 * cells.sum()))))
    m_first, cells = m_first[:n_cells], cells[:n_cells]
    m0 = 1 + big_l * n_cells
    tail_rate = m0 / (sigma * sigma)
    t_const = geometric_constants(tail_rate)
    ckst = 1.0 / (math.floor(sigma) + 1.0)  # the CKS proposal's range, checked at fit
    if m0 + max_geometric(tail_rate) > max_staircase_magnitude(ckst, 1):
        return None
    tail_side = math.exp(-(m0 * m0) / two_var) / -math.expm1(-tail_rate)
    # The value 0 gets a cell of envelope L too, accepted when the offset is 0
    # (probability exactly 1 / L): alone, its share would be too small for the
    # alias table's digit quantisation on fine grids.
    # The value 0 gets an envelope of K = min(L, zero_envelope), accepted when
    # the offset is below L / K (probability exactly 1 / K): alone, its share
    # would be too small for the alias table's digit quantisation on fine
    # grids; with all of L, its proposals (~1% of all) would be rejected
    # (and drawn again) almost always. If K's share is too small for the
    # bound, L (the largest share) is tried.
    for envelope in dict.fromkeys([min(big_l, int(zero_envelope)), big_l]):
        masses = np.concatenate([cells[::-1], [float(envelope)], cells])
        total = math.fsum(masses) + 2.0 * tail_side
        tail = 2.0 * tail_side / total
        prob, alias = alias_table(masses)
        if _alias_error_bound(prob, alias, masses / total, 1.0 - tail) <= rtol:
            break
    else:
        return None
    qd, frac = split_probability(tail)
    unit = 2.0 ** (53 - log_l)
    inv_two_var = 1.0 / two_var
    slope = np.ceil(unit * (2.0 * m_first + (big_l - 1.0)) * inv_two_var * (1.0 + 1e-12))
    slope *= big_l > 1  # cells of one value: the offset is 0, the acceptance 1
    squeeze = np.concatenate([[2.0**52], slope]).astype(np.int64)
    constants = np.array([
        qd, frac, prob.shape[0] / (2.0**53 - qd), float(n_cells), float(big_l), float(53 - log_l),
        float(m0), inv_two_var, *t_const, float(math.floor(unit * (1.0 - 1e-12))),
        float(big_l // envelope),
    ])
    return constants, prob, alias, squeeze


def staircase_moment(lam, width, r, power, tol=1e-16):
    """E|Z|**power (power 1 or 2) of the staircase distribution, exactly summed.

    ``r`` may be an array (one moment per value). The sum over blocks stops
    once the remaining geometric tail is below ``tol`` relative.
    """
    r = np.asarray(r, dtype=np.float64)
    b = math.exp(-lam)
    n_blocks = int(math.ceil(-math.log(tol) / lam)) + 1
    k = np.arange(n_blocks, dtype=np.float64)[:, None]

    def power_sum(lo, hi):  # sum of i**power for integers lo <= i < hi
        if power == 1:
            return (hi * (hi - 1) - lo * (lo - 1)) / 2.0
        return ((hi - 1) * hi * (2 * hi - 1) - (lo - 1) * lo * (2 * lo - 1)) / 6.0

    start = k * width
    high = power_sum(start, start + r)
    low = power_sum(start + r, start + width)
    total = np.sum(b**k * (high + b * low), axis=0)
    one_minus_b = -math.expm1(-lam)
    return 2.0 * one_minus_b / (2.0 * (r + b * (width - r)) - one_minus_b) * total


def optimal_staircase_gamma(epsilon, loss="squared"):
    """Optimal gamma of the continuous staircase (Geng & Viswanath 2014).

    ``'absolute'``: 1 / (1 + e^(eps/2)); ``'squared'``: their closed form
    for the second moment.
    """
    b = math.exp(-epsilon)
    if loss == "absolute":
        return 1.0 / (1.0 + math.exp(epsilon / 2.0))
    c = (b - 2 * b**2 + 2 * b**4 - b**5) ** (1.0 / 3.0)
    return -b / (1.0 - b) + c / (2.0 ** (1.0 / 3.0) * (1.0 - b) ** 2)


def optimal_discrete_staircase_r(epsilon, width, loss="squared"):
    """Integer r in [1, width] minimising E|Z| or E[Z^2] of the staircase."""
    power = 2 if loss == "squared" else 1
    width = int(width)
    if width <= 20_000:
        candidates = np.arange(1, width + 1)
    else:
        # The cost is unimodal in r near gamma* width: search a window there.
        centre = int(round(optimal_staircase_gamma(epsilon, loss) * width))
        candidates = np.unique(np.clip(np.arange(centre - 50, centre + 51), 1, width))
    costs = staircase_moment(epsilon, width, candidates, power)
    return int(candidates[int(np.argmin(costs))])


def gaussian_delta(sigma, sensitivity, epsilon):
    """Exact delta of the Gaussian mechanism (Balle & Wang 2018, Thm. 8)."""
    a = sensitivity / (2.0 * sigma)
    c = epsilon * sigma / sensitivity
    return special.ndtr(a - c) - math.exp(epsilon + special.log_ndtr(-a - c))


def gaussian_sigma(epsilon, delta, sensitivity):
    """Smallest sigma giving (epsilon, delta)-DP (analytic Gaussian mechanism)."""
    lo, hi = 1e-6 * sensitivity, sensitivity
    while gaussian_delta(hi, sensitivity, epsilon) > delta:
        hi *= 2.0
    return optimize.brentq(
        lambda s: gaussian_delta(s, sensitivity, epsilon) - delta, lo, hi, xtol=1e-14 * hi, rtol=1e-14
    ) * (1 + 1e-12)
