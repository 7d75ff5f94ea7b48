"""Sampling kernels: exact in the tails, fast in the bulk.

Every kernel draws its randomness from a numpy ``Generator`` passed in (a
fresh one per release) and holds no random state of its own. Randomness is
consumed as 53-bit *digits* (``rng.random() * 2**53``, an exact integer):
the digits d1, d2, ... are the base-2**53 expansion of an infinite-precision
uniform U = 0.d1 d2 ... in [0, 1), and kernels read only as many digits as a
decision needs. Three primitives make every sampler exact or nearly so in
its tails (see docs/sampling.md for the error analysis):

* :func:`bernoulli_exact` / :func:`_bernoulli_first`: ``U < q`` for a float
  ``q``, compared digit by digit with q's binary expansion. The probability
  is exactly ``q`` (the float), however small; ties, of probability 2**-53
  per digit, read further digits.
* :func:`uniform_index`: a uniform integer in ``[0, m)`` by rejection on a
  digit (exactly uniform).
* :func:`geometric`: P(G = g) = (1 - e^-lam) e^(-lam g) by inversion of a
  uniform with a full floating exponent (:func:`fine_uniform`), through
  super-blocks of about 2**10 values when ``lam`` is tiny; each value's
  probability is right to 1e-9 relative, up to the largest value whose
  probability is a normal float.
"""

import math

import numba
import numpy as np

from ._philox import begin_row
from ._interval import interval_cell
from ._intrinsics import float_bits, opaque, prefetch
from ._pcg64 import held_digit, held_int_digit, held_word, hold, release
from ._twin import MAX_DRAWS, kernel_for, would_compile

_DIGIT = 2.0**53  # one digit = the 53 random bits of rng.random()
_DIGIT_INT = 2**53
_HALF_DIGIT = 2.0**52
# Smallest decay rate sampled by direct inversion; below it the geometric is
# split into super-blocks of rate >= _LAM_MIN (coarse, by inversion) and an
# offset inside the super-block (fine, by a fresh uniform).
_LAM_MIN = 2.0**-10
# Largest super-block whose offset is drawn by inversion of one digit.
_MAX_INVERTED_OFFSETS = 4096.0
# fine_uniform stops once its value is >= 2**44 of its last digit's unit:
# a relative resolution of 2**-44 (and 1.002 digits on average).
_FINE_BITS = 2.0**44
# Smallest value of fine_uniform() (after 20 zero digits, probability
# 2**-1060), and so the largest -log of it.
_SMALLEST_UNIFORM = math.ldexp(1.0, -1074)
MAX_EXPONENTIAL = 1074 * math.log(2.0)


@numba.njit(cache=True, nogil=True, inline="always")
def _digit(rng):
    """A uniform integer in [0, 2**53) (a float holding it exactly)."""
    return rng.random() * _DIGIT


@numba.njit(cache=True, nogil=True)
def bernoulli_exact(q, rng):
    """True with probability exactly ``q`` (a float in [0, 1]).

    Compares fresh digits with the base-2**53 expansion of ``q``; scaling by
    2**53 and taking the integer part are exact in float64, and the
    expansion of a float ends after at most 21 digits.
    """
    if q >= 1.0:
        return True
    x = q
    while x > 0.0:
        x *= _DIGIT
        qd = np.floor(x)
        x -= qd
        d = _digit(rng)
        if d != qd:
            return d < qd
    return False  # U's expansion so far equals q's, which has ended: U >= q


@numba.njit(cache=True, nogil=True, inline="always")
def _bernoulli_first(d, qd, frac, rng):
    """``U < q`` given U's first digit ``d``, with ``qd + frac = q * 2**53``
    (``qd`` integer): decided by ``d`` unless it ties with ``qd``."""
    if d != qd:
        return d < qd
    return bernoulli_exact(frac, rng)


def split_probability(q, unit=_DIGIT):
    """(integer part, fraction) of ``q * unit``: the constants of
    :func:`_bernoulli_first` (both exact)."""
    t = float(q) * unit
    qd = math.floor(t)
    return float(qd), t - qd


@numba.njit(cache=True, nogil=True)
def uniform_index(m, rng):
    """A uniform integer in [0, m) (``m`` a float integer, 1 <= m <= 2**53).

    Rejection keeps it exactly uniform; a draw is rejected with probability
    below m / 2**53.
    """
    if m <= 1.0:
        return 0.0
    mi = np.int64(m)
    limit = _DIGIT_INT - _DIGIT_INT % mi  # integer arithmetic: fmod is slow
    while True:
        d = np.int64(_digit(rng))
        if d < limit:
            return float(d % mi)


@numba.njit(cache=True, nogil=True, inline="always")
def fine_uniform(rng):
    """A uniform in (0, 1) with a floating exponent and relative resolution
    2**-44: digits are read until the value is at least 2**44 units of the
    last digit, so tiny values keep their relative precision (one digit with
    probability 1 - 2**-9). The value is the lower end of its cell.
    """
    x = 0.0
    scale = 1.0
    for _ in range(20):  # 20 digits reach 2**-1060 (a 21st unit would underflow)
        scale *= 1.0 / _DIGIT
        x += _digit(rng) * scale
        if x >= _FINE_BITS * scale:
            return x
    return x if x > 0.0 else _SMALLEST_UNIFORM


@numba.njit(cache=True, nogil=True, inline="always")
def _minus_log1p_minus(x):
    """-log(1 - x) for 0 <= x <= 2**-9, by its series to x**8 / 8: the first
    omitted term is below 2**-72 x, far under the rounding error (libm's
    log1p costs several times more and this is the hot path of the fine
    grids)."""
    return x * (1.0 + x * (0.5 + x * (1.0 / 3.0 + x * (0.25 + x * (0.2 + x * (1.0 / 6.0 + x * (1.0 / 7.0 + x * 0.125)))))))


@numba.njit(cache=True, nogil=True, inline="always")
def geometric(lam, big_l, lam_l, one_minus_b_l, rng):
    """G >= 0 with P(G = g) = (1 - e^-lam) e^(-lam g).

    When ``big_l > 1`` (``lam < _LAM_MIN``): G = L S + i with the super-block
    S geometric of rate ``lam_l = L lam`` and the offset i in [0, L) a
    truncated geometric (``one_minus_b_l = 1 - e^-lam_l``), drawn by
    inversion of a fresh digit while L <= _MAX_INVERTED_OFFSETS (each
    offset then owns >= 2**40 digit values) and otherwise by a uniform
    offset accepted with an exact Bernoulli(e^(-lam i)) (probability
    >= e^-lam_l > 0.998). The constants come from :func:`geometric_constants`.
    """
    if big_l <= 1.0:
        return np.floor(-np.log(fine_uniform(rng)) / lam)
    s = np.floor(-np.log(fine_uniform(rng)) / lam_l)
    return s * big_l + superblock_offset(lam, big_l, one_minus_b_l, rng)


@numba.njit(cache=True, nogil=True, inline="always")
def superblock_offset(lam, big_l, one_minus_b_l, rng):
    """i in [0, L) with P(i) proportional to e^(-lam i): the offset of
    :func:`geometric` inside a super-block of ``big_l = L`` values."""
    if big_l <= _MAX_INVERTED_OFFSETS:
        i = np.floor(_minus_log1p_minus(_digit(rng) / _DIGIT * one_minus_b_l) / lam)
        if i > big_l - 1.0:
            i = big_l - 1.0
        return i
    while True:
        i = uniform_index(big_l, rng)
        if bernoulli_exact(np.exp(-lam * i), rng):
            return i


def geometric_constants(lam):
    """(lam, L, L lam, 1 - e^(-L lam)) for :func:`geometric`."""
    lam = float(lam)
    big_l = 1.0 if lam >= _LAM_MIN else float(math.ceil(_LAM_MIN / lam))
    if not big_l <= 2.0**52:
        # uniform_index draws offsets below 2**53 only (it would never return).
        raise ValueError(f"noise rate {lam:g} is below the exact sampler's floor of 2**-62.")
    lam_l = lam * big_l
    return lam, big_l, lam_l, -math.expm1(-lam_l)


def max_geometric(lam):
    """Largest value :func:`geometric` can return for rate ``lam``."""
    lam, big_l, lam_l, _ = geometric_constants(lam)
    return math.floor(MAX_EXPONENTIAL / lam_l) * big_l + big_l - 1


# -- staircase / discrete Laplace ------------------------------------------


def staircase_constants(lam, width, r):
    """Constants of :func:`staircase_draw` for the symmetric staircase.

    P(Z = z) = p0 w(|z|), w(k width + j) = b^k (j < r) or b^(k+1) (j >= r),
    b = e^-lam. A nonzero |Z| lies in block 0 (j >= 1: weight
    A0 = r - 1 + b (width - r)) or in a block k >= 1 (weight b M / (1 - b),
    M = r + b (width - r)). Every probability is formed from sums of
    positive terms (no cancellation), with 1 - b from expm1.
    """
    lam, width, r = float(lam), float(width), float(r)
    b = math.exp(-lam)
    one_minus_b = -math.expm1(-lam)
    block_mass = r + b * (width - r)
    block0 = (r - 1.0) + b * (width - r)
    nonzero = 2.0 * (block0 + b) / (2.0 * block_mass - one_minus_b)
    qd, frac = split_probability(nonzero, _HALF_DIGIT)  # compared with 52 bits (one bit is the sign)
    in_block0 = block0 * one_minus_b / (block0 * one_minus_b + b * block_mass)
    low0 = b * (width - r) / block0 if block0 > 0.0 else 0.0
    low = b * (width - r) / block_mass
    # A tuple of floats, not an array: passed by value, no reference
    # counting where a draw calls the shared (not inlined) bernoulli_exact
    # and uniform_index. The draw itself stays inlined into each kernel:
    # compiling it once and calling it halved the compile time of this
    # family but doubled the time per label of the continuous grids.
    return (*geometric_constants(lam), width, r, qd, frac, in_block0, low0, low)


@numba.njit(cache=True, nogil=True, inline="always")
def _staircase_block(c, rng, low_probability, first):
    """Offset j in a block: the low step [r, width) with probability
    ``low_probability``, else the high step [first, r)."""
    # The guards skip calls that would read no digit (the Laplace grids: one
    # value per step, no low step).
    width, r = c[4], c[5]
    if low_probability > 0.0 and bernoulli_exact(low_probability, rng):
        return r + uniform_index(width - r, rng)
    return first + (uniform_index(r - first, rng) if r - first > 1.0 else 0.0)


@numba.njit(cache=True, nogil=True, inline="always")
def _sign_and_nonzero(c, rng):
    """(negative, Z != 0) of a symmetric staircase draw from its first digit:
    the top bit is the sign, the other 52 bits start the exact
    Bernoulli(P(Z != 0))."""
    d = _digit(rng)
    negative = d >= _HALF_DIGIT
    if negative:
        d -= _HALF_DIGIT
    return negative, _bernoulli_first(d, c[6], c[7], rng)


@numba.njit(cache=True, nogil=True, inline="always")
def staircase_draw(c, rng):
    """One symmetric staircase variate (constants from :func:`staircase_constants`).

    The first digit's top bit is the sign and its other 52 bits start the
    exact Bernoulli(P(Z != 0)); a nonzero magnitude picks block 0 or a
    geometric block k >= 1 by exact Bernoulli draws, then its step and a
    uniform offset inside it.
    """
    negative, nonzero = _sign_and_nonzero(c, rng)
    if not nonzero:
        return 0.0
    width = c[4]
    if c[8] > 0.0 and bernoulli_exact(c[8], rng):
        m = _staircase_block(c, rng, c[9], 1.0)
    else:
        m = width + staircase_one_sided(c, rng)
    return -m if negative else m


def staircase_noise(rng, lam, width=1, r=1, size=None):
    """``size`` draws of symmetric discrete staircase noise (integers as floats).

    P(Z = z) = p0 * w(|z|) with w(k*width + j) = exp(-lam k) (j < r) or
    exp(-lam (k+1)) (r <= j < width); ``width = r = 1`` gives the discrete
    Laplace distribution P(Z = z) proportional to exp(-lam |z|). The decay
    is passed as the rate ``lam``: on fine grids lam is tiny and
    b = exp(-lam) would lose most of its precision.

    Parameters
    ----------
    rng : numpy.random.Generator
        Source of the digits (fresh for each release).
    lam : float > 0
        Privacy loss per block.
    width, r : int
        Block width and length of the high step.
    size : int

    Returns
    -------
    z : ndarray of float64 holding integers
    """
    c = staircase_constants(lam, width, r)
    if width == 1 and r == 1:
        # The discrete Laplace (noisy histograms: a few hundred draws, often
        # the only staircase draws of a fit) has its own small kernel, about
        # half the compile time of the general one; the same draws.
        out = np.empty(int(size), dtype=np.float64)
        kernel_for(_discrete_laplace, rng, out.shape[0], MAX_DRAWS)(rng, c, out)
        return out
    # The kernel of staircase_additive on zero labels (rint(0) + Z exactly):
    # one compiled kernel fewer, the same draws row by row.
    return staircase_additive(np.zeros(int(size)), rng, 1.0, c, False, 0.0, 0.0)


@numba.njit(cache=True, nogil=True)
def _discrete_laplace(rng, c, out):
    """:func:`staircase_draw` for ``width = r = 1``: no block 0 beyond zero
    and one step per block, so a nonzero magnitude is 1 + geometric."""
    for i in range(out.shape[0]):
        begin_row(rng, i)  # keyed releases: row i reads its own stream
        negative, nonzero = _sign_and_nonzero(c, rng)
        if nonzero:
            m = 1.0 + geometric(c[0], c[1], c[2], c[3], rng)
            out[i] = -m if negative else m
        else:
            out[i] = 0.0
    return out


def max_staircase_magnitude(lam, width):
    """Largest |Z| :func:`staircase_draw` can return (in units)."""
    return (2 + max_geometric(lam)) * int(width)


@numba.njit(cache=True, nogil=True, inline="always")
def _shift_on_grid(y, z, granularity, inv_granularity, clip, lo, hi):
    """(rint(y / g) + z) * g, clipped to [lo, hi] when ``clip``: an exact float.

    ``inv_granularity`` is 1 / g, exact because g is a (normal) power of two.
    """
    v = (np.rint(y * inv_granularity) + z) * granularity
    if clip:
        v = min(max(v, lo), hi)
    return v


def staircase_additive(y, rng, granularity, c, clip, lo, hi):
    """Labels rounded to the grid plus staircase noise in grid units, clipped.

    Fused in one pass: ``(rint(y / g) + Z) * g``, then clipped to [lo, hi]
    when ``clip``. Every output is an exact multiple of ``g``.
    """
    out = np.empty(y.shape[0], dtype=np.float64)
    kernel = kernel_for(_staircase_additive, rng, y.shape[0])
    kernel(y, rng, granularity, c, clip, lo, hi, out)
    return out


@numba.njit(cache=True, nogil=True)
def _staircase_additive(y, rng, granularity, c, clip, lo, hi, out):
    inv_granularity = 1.0 / granularity
    for i in range(y.shape[0]):
        begin_row(rng, i)  # keyed releases: row i reads its own stream
        out[i] = _shift_on_grid(y[i], staircase_draw(c, rng), granularity, inv_granularity, clip, lo, hi)
    return out


@numba.njit(cache=True, nogil=True, inline="always")
def staircase_one_sided(c, rng):
    """T >= 0 with P(T = m) proportional to w(m): a geometric number of
    blocks, then the step and an offset inside the block."""
    k = geometric(c[0], c[1], c[2], c[3], rng)
    return k * c[4] + _staircase_block(c, rng, c[10], 0.0)


def bulk_constants(m0, tail_probability, n_entries, cell=1, lam=0.0, squeeze=0):
    """Constants of :func:`staircase_additive_bulk` (``cell``: values per
    table entry, 1 for a table of values, 0 for a table of pieces of their
    own lengths; a table of cells, a power of two, also gives the rate
    ``lam`` and the ``squeeze`` of ``laplace_cell_table``):
    (qd, frac, bulk scale, m0, cell, 53 - log2(cell), squeeze, lam)."""
    qd, frac = split_probability(tail_probability)
    shift = 53 - (max(int(cell), 1).bit_length() - 1)
    if cell > 1 and 1 << (53 - shift) != cell:
        raise ValueError(f"a table's cells hold a power of two of values, not {cell}.")
    return np.array([qd, frac, n_entries / (_DIGIT - qd), float(m0), float(cell), float(shift),
                     float(squeeze), float(lam)])


def alias_records(prob, alias):
    """An alias table ``(prob, alias)`` packed for :func:`_alias_pick`: one
    24-byte record per cell j, (t_j, alias, j - alias) in floats, so that a
    pick reads one record (not two arrays) and converts no integer back to a
    float.

    The pick keeps j when v - j < prob[j] (v - j exact for v in [j, j + 1]),
    that is when v < j + prob[j] as reals, that is when v < t_j, the
    smallest float >= j + prob[j]: fl(j + prob[j]), or the next float up
    when that rounded down (its difference from j, exact, is below prob[j]).
    The same picks as the table, digit for digit."""
    j, threshold, other = _alias_thresholds(prob, alias)
    return np.ascontiguousarray(np.stack([threshold, other, j - other], axis=1).reshape(-1))


def _alias_thresholds(prob, alias):
    """(j, t_j, alias) of :func:`alias_records`, as float arrays."""
    prob = np.asarray(prob, dtype=np.float64)
    j = np.arange(prob.shape[0], dtype=np.float64)
    total = j + prob
    threshold = np.where(total - j < prob, np.nextafter(total, np.inf), total)
    return j, threshold, np.asarray(alias, dtype=np.float64)


def cell_records(prob, alias, cell):
    """The alias table ``(prob, alias)`` of a table of cells (entries
    t = -T, ..., T of :func:`staircase_additive_bulk`, ``cell = L`` values
    each) packed for :func:`_cell_pick`: one 40-byte record per entry j,
    (t_j, s(a), s(j) - s(a), g(a), g(j) - g(a)) with a = alias[j], t_j the
    threshold of :func:`alias_records`, g the entry's sign (-1, 0, 1) and s
    its first value, g(t) (1 + L (|t| - 1)) (0 for the cell of 0), so that
    a draw's value is s + g i for its offset i: no per-label arithmetic on
    the entry's index. Exact: every s and difference is an integer below
    2**53 in magnitude (``1 + L T <= 2**52`` is checked), and so is s + g i.
    The same entries as :func:`alias_records`, digit for digit."""
    j, threshold, other = _alias_thresholds(prob, alias)
    half = (j.shape[0] - 1) // 2
    cell = float(cell)
    if not 1.0 + cell * half <= 2.0**52:
        raise ValueError(f"a table of {half} cells of {cell:g} values exceeds 2**52 values.")
    t, t_other = j - half, other - half
    # + 0.0: the cell of 0's first value is +0.0, not sign(0) (1 - L) = -0.0.
    first = np.sign(t) * (1.0 + cell * (np.abs(t) - 1.0)) + 0.0
    first_other = np.sign(t_other) * (1.0 + cell * (np.abs(t_other) - 1.0)) + 0.0
    return np.ascontiguousarray(np.stack([
        threshold, first_other, first - first_other,
        np.sign(t_other), np.sign(t) - np.sign(t_other),
    ], axis=1).reshape(-1))


def envelope_records(prob, alias, cell, squeeze):
    """:func:`cell_records` of a Gaussian envelope's table
    (``gaussian_cell_table``) with two more columns, (k(a), k(j) - k(a)):
    k the slope of the entry's cell's linear squeeze (``squeeze[|t|]``, an
    integer below 2**53; ``squeeze[0]`` for the cell of 0), for
    :func:`_gaussian_additive`: 56 bytes a record, no second table read."""
    records = cell_records(prob, alias, cell).reshape(-1, 5)
    half = (records.shape[0] - 1) // 2
    j = np.arange(records.shape[0])
    other = np.asarray(alias, dtype=np.int64)
    least = np.asarray(squeeze, dtype=np.float64)[np.abs(j - half)]
    least_other = least[other]
    return np.ascontiguousarray(np.concatenate(
        [records, np.stack([least_other, least - least_other], axis=1)], axis=1,
    ).reshape(-1))


def piece_records(prob, alias, starts, sizes):
    """:func:`cell_records` of a table of *pieces* (entries of ``sizes[j]``
    equal-weight values from ``starts[j]``, ``staircase_cell_table``), for
    :func:`_staircase_additive_bulk`: one 56-byte record per entry j, (t_j,
    s(a), s(j) - s(a), u(a), u(j) - u(a), m(a), m(j) - m(a)) with a =
    alias[j], s the entry's first value, m its number of values and u =
    m / 2**53 when m is a power of two (the value is s + floor(e u) for a
    digit e: its top log2 m bits), 0 otherwise (the value is drawn on the
    rare path, :func:`_step_offset`, from m). Exact: the s and m are
    integers with |s| + m <= 2**52 (checked) and the u powers of two in
    [2**-53, 2**-1] (or 0), so every difference, every selected value and
    every s + offset is exact."""
    _, threshold, other = _alias_thresholds(prob, alias)
    starts = np.asarray(starts, dtype=np.int64)
    sizes = np.asarray(sizes, dtype=np.int64)
    if not (np.all(sizes >= 1) and np.all(np.abs(starts) + sizes <= 2**52)):
        raise ValueError("a table of pieces holds at least one value an entry, all below 2**52.")
    unit = np.where(sizes & (sizes - 1) == 0, sizes / _DIGIT, 0.0)
    a = other.astype(np.int64)
    columns = [threshold]
    for x in (starts.astype(np.float64), unit, sizes.astype(np.float64)):
        columns += [x[a], x - x[a]]
    return np.ascontiguousarray(np.stack(columns, axis=1).reshape(-1))


def staircase_additive_bulk(
    y, rng, granularity, c, bulk, prob, alias, clip, lo, hi, pieces=None, records=None,
):
    """:func:`staircase_additive` with the bulk from an alias table.

    An exact Bernoulli on the first digit sends a label to the tail
    |Z| >= m0 (the exact sampler: m0 plus a one-sided staircase, the block
    structure being memoryless); otherwise the same digit, uniform on the
    bulk's share of digits, is mapped through the alias table of
    -(m0 - 1), ..., m0 - 1 (constants ``bulk`` from :func:`bulk_constants`,
    table from ``staircase_alias_table``).

    A table of *cells* (``cell = L > 1``: the discrete Laplace on a fine grid,
    whose bulk has far too many values for a table) has entries
    t = -T, ..., T: t = 0 is the value 0 and t != 0 the values
    sign(t) (1 + L (|t| - 1) + i), i in [0, L) (L a power of two; m0 = 1 +
    L T). The offset i has the same law in every cell, P(i) proportional to
    e^(-lam i), drawn by rejection from one fresh digit: its top log2(L) bits
    are i (uniform), the others start the uniform of an exact
    Bernoulli(e^(-lam i)) that accepts it, at once when they lie below the
    ``squeeze`` (an integer below 2**(53 - log2 L) e^(-lam (L - 1)), the
    smallest acceptance); a rejected offset is drawn again from a fresh
    digit, the cell kept (the acceptance does not depend on the cell, so
    the cells' masses are the table's). The table from ``laplace_cell_table``.

    A table of *pieces* (``cell = 0``; ``pieces = (starts, sizes)``: the
    staircase on a fine grid, ``staircase_cell_table``) has entries of
    equal-weight values ``start, ..., start + m - 1``; the value is uniform
    inside the entry, from a fresh digit: its top log2(m) bits when m is a
    power of two (all entries but at most one a step), else exactly by
    rejection on a rare path (:func:`_step_offset`).

    ``records``: :func:`alias_records` of the table (:func:`cell_records`
    for a table of cells, :func:`piece_records` for one of pieces), if kept
    from an earlier call (packing a large table costs about as much as
    10,000 labels).
    """
    if records is None:
        cell = bulk[4]
        if cell == 0.0:
            records = piece_records(prob, alias, *pieces)
        else:
            records = cell_records(prob, alias, cell) if cell > 1.0 else alias_records(prob, alias)
    out = np.empty(y.shape[0], dtype=np.float64)
    kernel_for(_staircase_additive_bulk, rng, y.shape[0])(
        y, rng, granularity, c, bulk, records, clip, lo, hi, out)
    return out


@numba.njit(cache=True, nogil=True)
def _laplace_cell_offset(e, shift, lam, rng):
    """The offset of a cell of :func:`staircase_additive_bulk` whose first
    digit ``e`` (an int64) has acceptance bits not below the squeeze: the
    exact Bernoulli(e^(-lam i)) on them (``_bernoulli_first``: a tie reads
    on), and, while rejected, fresh digits. Not inlined (see
    :func:`_staircase_tail`)."""
    unit = np.int64(1) << shift
    while True:
        offset = e >> shift
        x = np.exp(-lam * float(offset)) * float(unit)
        xd = np.floor(x)
        if _bernoulli_first(float(e & (unit - 1)), xd, x - xd, rng):
            return offset
        e = np.int64(_digit(rng))


@numba.njit(cache=True, nogil=True, inline="always")
def _alias_pick(v, records):
    """The entry an alias table (:func:`alias_records`) picks for ``v``
    uniform on [0, k): cell j = floor(v), kept if v is below its threshold,
    else its alias (as a float)."""
    # An unsigned index (v >= 0): no negative-index wraparound on the loads.
    at = np.uint64(3) * np.uint64(min(np.int64(v), records.shape[0] // 3 - 1))
    # Selected by arithmetic on floats (exact integers): an integer or
    # boolean select lets LLVM turn it into a branch on the loaded
    # threshold, mispredicted about half the time (5x slower).
    return records[at + np.uint64(1)] + (v < records[at]) * records[at + np.uint64(2)]


@numba.njit(cache=True, nogil=True, inline="always")
def _cell_pick(v, records, stride):
    """(record offset, kept, first value, sign) of the entry a table of cells
    picks for ``v`` uniform on [0, 2T + 1), with ``stride`` floats a record
    (:func:`cell_records`: 5; :func:`envelope_records`: 7): as
    :func:`_alias_pick`, the same entry. A record's further columns pairs
    (x(a), x(j) - x(a)) are read as ``records[at + c] + kept * records[at +
    c + 1]``."""
    at = np.uint64(stride) * np.uint64(min(np.int64(v), records.shape[0] // stride - 1))
    keep = v < records[at]
    first = records[at + np.uint64(1)] + keep * records[at + np.uint64(2)]
    return at, keep, first, records[at + np.uint64(3)] + keep * records[at + np.uint64(4)]


@numba.njit(cache=True, nogil=True)
def _step_offset(e, m, rng):
    """A uniform integer in [0, m) (a float), for an entry of a table of
    pieces whose length ``m`` is not a power of two: ``e mod m`` for the
    digit ``e`` (a float) if it lies below the largest multiple of m (at
    most 2**53), else the same for fresh digits (probability below m / 2**53
    a digit): exactly uniform. The kernel calls it for digits e >= 2**53 - m
    only (the others are below that multiple: their residue inline). Not
    inlined (see :func:`_staircase_tail`)."""
    size = np.int64(m)
    limit = _DIGIT_INT - _DIGIT_INT % size
    while np.int64(e) >= limit:
        e = _digit(rng)
    return float(np.int64(e) % size)


@numba.njit(cache=True, nogil=True)
def _staircase_tail(d, qd, frac, c, m0, rng):
    """For a first digit ``d <= qd``: a draw of the tail |Z| >= m0 of
    :func:`staircase_additive_bulk` (m0 plus a one-sided staircase, then the
    sign) if U < q (:func:`_bernoulli_first`, the tie d = qd read on), else
    nan (the bulk). Not inlined: the rare path, kept out of the hot loop's
    registers and reference counting (see :func:`_rr_offset_rare`)."""
    if d < qd or bernoulli_exact(frac, rng):
        m = m0 + staircase_one_sided(c, rng)
        return -m if _digit(rng) >= _HALF_DIGIT else m
    return np.nan


@numba.njit(cache=True, nogil=True)
def _staircase_additive_bulk(y, rng, granularity, c, bulk, records, clip, lo, hi, out):
    qd, frac, scale, m0, cell = bulk[0], bulk[1], bulk[2], bulk[3], bulk[4]
    shift, squeeze, lam = np.int64(bulk[5]), np.int64(bulk[6]), bulk[7]  # a table of cells'
    bits_mask = (np.int64(1) << shift) - 1
    half = (records.shape[0] // 3 - 1) // 2  # entries -half, ..., half
    inv_granularity = 1.0 / granularity
    # The generator's state held in registers (see _pcg64.hold): released
    # around the rare calls that draw from rng themselves, and at the end.
    state = hold(rng)
    for i in range(y.shape[0]):
        begin_row(rng, i)  # keyed releases: row i reads its own stream
        d, state = held_digit(rng, state)
        z = np.nan  # the bulk, unless the tail
        if d <= qd:  # one compare on the hot path; the tie d = qd reads on
            release(rng, state)
            z = _staircase_tail(d, qd, frac, c, m0, rng)
            state = hold(rng)
        if z != z and cell == 0.0:  # a table of pieces (piece_records)
            at, keep, first, unit = _cell_pick((d - qd) * scale, records, 7)
            # Its value's digit: the top log2(m) bits of a power of two m.
            e, state = held_digit(rng, state)
            z = first + np.floor(e * unit)
            if unit == 0.0:  # another length (few draws; half at eps = 0.002)
                m = records[at + np.uint64(5)] + keep * records[at + np.uint64(6)]
                if e < _DIGIT - m:  # below the largest multiple of m: e mod m
                    z = first + float(np.int64(e) % np.int64(m))
                else:  # exactly, by rejection (rare)
                    release(rng, state)
                    z = first + _step_offset(e, m, rng)
                    state = hold(rng)
        elif z != z and cell > 1.0:
            # The cell's first value and sign from its record (cell_records).
            _, _, first, sign = _cell_pick((d - qd) * scale, records, 5)
            # The offset's digit is read for the cell of 0 too (and dropped:
            # sign 0): a read that depends on the cell picked made LLVM
            # select the generator's state on the table's load.
            e, state = held_int_digit(rng, state)
            offset = e >> shift
            if (e & bits_mask) >= squeeze:  # rare (about lam L): the exact test
                release(rng, state)
                offset = _laplace_cell_offset(e, shift, lam, rng)
                state = hold(rng)
            # Exact integers; the cell of 0 gives +0.0 (0 + 0 i, and the
            # record's sums x + (-x) round to +0.0). No branch on the sign
            # (a coin flip).
            z = first + sign * float(offset)
        elif z != z:
            z = _alias_pick((d - qd) * scale, records) - half
        out[i] = _shift_on_grid(y[i], z, granularity, inv_granularity, clip, lo, hi)
    release(rng, state)
    return out


def discrete_gaussian(rng, n, sigma, c):
    """Discrete Gaussian of scale ``sigma`` (Canonne, Kamath & Steinke 2020).

    Proposals are discrete Laplace of scale t = floor(sigma) + 1 (constants
    ``c`` for lam = 1/t); a proposal Y is accepted with probability
    exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)) by an exact Bernoulli, so far
    tails are accepted at their true (tiny) rate.
    """
    out = np.empty(int(n), dtype=np.float64)
    kernel_for(_discrete_gaussian, rng, out.shape[0], MAX_DRAWS)(rng, float(sigma), c, out)
    return out


@numba.njit(cache=True, nogil=True)
def _discrete_gaussian(rng, sigma, c, out):
    t = np.floor(sigma) + 1.0
    shift = sigma * sigma / t
    two_var = 2.0 * sigma * sigma
    for i in range(out.shape[0]):
        begin_row(rng, i)  # keyed releases: row i reads its own stream
        while True:
            y = staircase_draw(c, rng)
            gap = np.abs(y) - shift
            if bernoulli_exact(np.exp(-(gap * gap) / two_var), rng):
                out[i] = y
                break
    return out


def gaussian_additive(y, rng, granularity, table, clip, lo, hi, records=None):
    """Labels rounded to the grid plus discrete Gaussian noise in grid units,
    clipped (as :func:`staircase_additive`), drawn by rejection from the
    envelope of ``table`` (``gaussian_cell_table``): about two digits a label.
    ``records``: :func:`envelope_records` of the table, if kept from an
    earlier call (as for :func:`staircase_additive_bulk`)."""
    out = np.empty(y.shape[0], dtype=np.float64)
    kernel = kernel_for(_gaussian_additive, rng, y.shape[0])
    g, prob, alias, squeeze = table
    if records is None:
        records = envelope_records(prob, alias, g[4], squeeze)
    kernel(y, rng, granularity, g, records, clip, lo, hi, out)
    return out


@numba.njit(cache=True, nogil=True)
def _gaussian_tail(d, g, rng):
    """For a first digit ``d <= qd``: a proposal of the tail |Z| >= m0 of
    :func:`_gaussian_additive` if U < q (the tie d = qd read on), its value
    if accepted, inf if rejected; nan if not the tail (the bulk). Not
    inlined (see :func:`_staircase_tail`)."""
    if not (d < g[0] or bernoulli_exact(g[1], rng)):
        return np.nan
    extra = geometric(g[8], g[9], g[10], g[11], rng)
    negative = _digit(rng) >= _HALF_DIGIT
    if bernoulli_exact(np.exp(-(extra * extra) * g[7]), rng):
        return -(g[6] + extra) if negative else g[6] + extra
    return np.inf


@numba.njit(cache=True, nogil=True)
def _gaussian_cell_rare(t, offset, bits, m_first, inv_two_var, unit_f, zero_offsets, rng):
    """The proposal (cell ``t``, offset, acceptance ``bits``) of
    :func:`_gaussian_additive` whose bits are not below its cell's squeeze
    (in the cell of 0 all offsets but 0; it accepts those below
    ``zero_offsets``, L / K of ``gaussian_cell_table``): its value if accepted,
    inf if rejected. Not inlined (see :func:`_staircase_tail`): the
    exponential's call kept the hot loop's values in memory."""
    if t == 0.0:  # the value 0 under an envelope of K: accepted w.p. 1 / K
        return 0.0 if offset < zero_offsets else np.inf
    x = np.exp(-(offset * (2.0 * m_first + offset)) * inv_two_var) * unit_f
    xd = np.floor(x)
    if _bernoulli_first(float(bits), xd, x - xd, rng):
        return np.copysign(m_first + offset, t)
    return np.inf


@numba.njit(cache=True, nogil=True)
def _gaussian_additive(y, rng, granularity, g, records, clip, lo, hi, out):
    qd, scale, shift = g[0], g[2], np.int64(g[5])  # g[1]: the tail's
    inv_two_var, below = g[7], g[12]
    unit = np.int64(1) << shift
    unit_f = float(unit)
    inv_granularity = 1.0 / granularity
    state = hold(rng)  # in registers (see _staircase_additive_bulk)
    for i in range(y.shape[0]):
        begin_row(rng, i)  # keyed releases: row i reads its own stream
        while True:  # proposals until one is accepted
            d, state = held_digit(rng, state)
            if d <= qd:  # the tail |Z| >= m0 (rare), or a tie
                release(rng, state)
                z = _gaussian_tail(d, g, rng)
                state = hold(rng)
                if z == np.inf:  # rejected
                    continue
                if z == z:  # accepted (nan: the bulk)
                    break
            # The same digit picks a cell: its first value, sign and squeeze
            # from its record (envelope_records).
            at, keep, first, sign = _cell_pick((d - qd) * scale, records, 7)
            # One digit: its top log2(L) bits are the offset, the others start
            # the uniform of the acceptance Bernoulli (read on in a tie). Read
            # for cells of one value too (offset 0, accepted but with
            # probability ~1e-12 at once): a branch on L for them cost ~5%.
            e, state = held_int_digit(rng, state)
            offset = e >> shift
            bits = e & (unit - 1)
            # One rare branch: bits under the cell's linear squeeze accept
            # (gaussian_cell_table; in the cell of 0, slope 2**52, offset 0
            # only). Integers: exact below 2**53, and above it far above B.
            slope = records[at + np.uint64(5)] + keep * records[at + np.uint64(6)]
            if float(bits) + float(offset) * slope < below:
                z = first + sign * float(offset)
                break
            release(rng, state)
            # The rare path as for t = sign (it reads only t's sign and t == 0).
            z = _gaussian_cell_rare(sign, offset, bits, abs(first), inv_two_var, unit_f, g[13], rng)
            state = hold(rng)
            if z != np.inf:
                break
        out[i] = _shift_on_grid(y[i], z, granularity, inv_granularity, clip, lo, hi)
    release(rng, state)
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


# -- randomized response ------------------------------------------------------


def rr_flip_probability(n_classes, epsilon):
    """P(output != input) of k-ary RR: (k - 1) e^-eps / (1 + (k - 1) e^-eps).

    Computed directly, not as 1 - P(keep), which rounds to 0 at large eps.
    """
    e = (n_classes - 1) * math.exp(-float(epsilon))
    return e / (1.0 + e)


def rr_constants(n_classes, flip_probability):
    """Constants of :func:`rr_code_common` for k-ary RR with the given flip probability."""
    qd, frac = split_probability(flip_probability)
    m = float(n_classes - 1)
    limit = qd - math.fmod(qd, m) if m >= 1.0 else 0.0
    return np.array([qd, frac, limit, m])


@numba.njit(cache=True, nogil=True, inline="always")
def _residue(d, m):
    """``d mod m`` (an int64) for integers ``0 <= d < 2**53`` and ``m >= 1``
    held in floats: exactly ``np.int64(d) % np.int64(m)``, without the int64
    division (about half of k-ary RR's time per label). The float quotient
    d * (1 / m) is within 2 d / (m 2**53) < 1 of d / m (m >= 3; exact for
    m = 1, 2), so its truncation is off by at most one, which the integer
    remainder corrects; 1 / m is loop-invariant (hoisted out of a kernel's
    loop)."""
    return _residue_by(d, m, 1.0 / m)


@numba.njit(cache=True, nogil=True, inline="always")
def _residue_by(d, m, inv_m):
    """:func:`_residue` given ``inv_m = 1.0 / m``, for a kernel whose ``m``
    varies per label (a table of moduli and their inverses: no division).
    An int64, for index arithmetic."""
    mi = np.int64(m)
    r = np.int64(d) - np.int64(d * inv_m) * mi
    if r < 0:
        r += mi
    elif r >= mi:
        r -= mi
    return r


@numba.njit(cache=True, nogil=True, inline="always")
def _int_residue(e, m, inv_m):
    """``e mod m`` for int64 ``0 <= e < 2**53``, ``m >= 1``, ``inv_m = 1.0 /
    m``: :func:`_residue_by` on an int64 digit (RP-with-prior's grid: one
    conversion each way fewer), its corrections by masks. The float
    quotient's truncation is floor(e / m) or one off (see _residue_by), so
    ``e - q m`` lies in [-m, 2m) and one correction brings it into [0, m)."""
    r = e - np.int64(float(e) * inv_m) * m
    r += m & (r >> 63)  # r < 0: + m
    return r - (m & ~((r - m) >> 63))  # r >= m: - m


@numba.njit(cache=True, nogil=True, inline="always")
def _rr_rare(d, qd, limit):
    """Whether the first digit ``d`` lies in [limit, qd] (fewer than m + 1 of
    the 2**53 digit values), where the flip needs fresh digits. One test of a
    sign bit: a chained comparison is two branches, and the first (d < limit:
    a flip) is a coin flip at small epsilon."""
    di = np.int64(d)
    return ((di - np.int64(limit)) | (np.int64(qd) - di)) >= 0


@numba.njit(cache=True, nogil=True)
def _rr_offset_rare(d, qd, frac, m, rng):
    """:func:`_rr_offset` for a first digit in [limit, qd]. Not inlined (nor
    any helper that takes ``rng`` on the kernels' hot path): a helper inlined
    with ``rng`` and a branch keeps ``rng``'s reference count, two atomic
    operations on every label."""
    if d < qd:
        return np.int64(uniform_index(m, rng))
    if not bernoulli_exact(frac, rng):
        return np.int64(-1)
    return np.int64(uniform_index(m, rng))


@numba.njit(cache=True, nogil=True, inline="always")
def _rr_offset_common(d, limit, m):
    """:func:`_rr_offset` for a first digit outside [limit, qd]: d < limit
    (flip, to d mod m) or d > qd (keep, -1), a coin flip at small epsilon:
    selected by a mask, not a mispredicted branch. max(m, 1): one class
    (m = 0) never flips."""
    flip = opaque((np.int64(d) - np.int64(limit)) >> 63)  # -1 when d < limit
    return ((_residue(d, max(m, 1.0)) + 1) & flip) - 1


@numba.njit(cache=True, nogil=True, inline="always")
def _rr_offset(qd, frac, limit, m, rng):
    """-1 (keep) or the index in [0, m) of the replacing class among the m others.

    Flip is an exact Bernoulli. A flip decided by the first digit d < qd
    reuses d (uniform on [0, qd)) for the index when d < limit, a multiple
    of m; otherwise the index comes from fresh digits. Either way it is
    exactly uniform.
    """
    d = _digit(rng)
    if _rr_rare(d, qd, limit):
        return _rr_offset_rare(d, qd, frac, m, rng)
    return _rr_offset_common(d, limit, m)


@numba.njit(cache=True, nogil=True, inline="always")
def _shift_class(code, n_classes, offset):
    """The class ``offset + 1`` places after ``code`` (mod k; ``code`` itself
    for offset -1): < 2k, so minus k when >= k, by a mask."""
    out = code + 1 + offset
    return out - (n_classes & ~opaque((out - n_classes) >> 63))


@numba.njit(cache=True, nogil=True, inline="always")
def rr_code_common(code, n_classes, d, limit, m):
    """k-ary RR of one class code from the first digit ``d`` of its draw,
    valid unless ``_rr_rare(d, qd, limit)``; then :func:`rr_code_rare`.
    (Constants from :func:`rr_constants`, as scalars: numba's inlining of a
    helper that takes an array adds reference counting per label.) A kernel
    reads ``d`` and calls both itself::

        d = _digit(rng)
        j = rr_code_common(code, n_classes, d, limit, m)
        if _rr_rare(d, qd, limit):
            j = rr_code_rare(code, n_classes, d, qd, frac, m, rng)
    """
    return _shift_class(code, n_classes, _rr_offset_common(d, limit, m))


@numba.njit(cache=True, nogil=True)
def rr_code_rare(code, n_classes, d, qd, frac, m, rng):
    """k-ary RR of one class code whose first digit lies in [limit, qd]."""
    return _shift_class(code, n_classes, _rr_offset_rare(d, qd, frac, m, rng))


def randomized_response_contiguous(y, rng, lo, n_classes, c):
    """k-ary RR on labels that are the integers lo, ..., lo + k - 1 (validated).

    Returns noisy labels (not codes) in the dtype of ``y``.
    """
    # The kernel sees float64 or int64 labels: numba promotes int8 - int64 to
    # int64 where a twin's numpy scalars keep int8 against the Python int lo
    # (NEP 50: y - lo wrapped), and numba has no float16. uint64 classes beyond
    # int64 stay uint64 (uint64 - uint64 in both).
    if y.dtype.kind == "f":
        work = y.astype(np.float64, copy=False)
    elif lo + n_classes <= 2**63:
        work = y.astype(np.int64, copy=False)
    else:
        work = y
    out = np.empty_like(work)
    kernel = kernel_for(_randomized_response_contiguous, rng, work.shape[0])
    kernel(work, rng, lo, n_classes, c, out)
    return out.astype(y.dtype, copy=False)


@numba.njit(cache=True, nogil=True)
def _randomized_response_contiguous(y, rng, lo, n_classes, c, out):
    qd, frac, limit, m = c[0], c[1], c[2], c[3]
    for i in range(y.shape[0]):
        begin_row(rng, i)  # keyed releases: row i reads its own stream
        code = np.int64(y[i] - lo)
        d = _digit(rng)
        j = rr_code_common(code, n_classes, d, limit, m)
        if _rr_rare(d, qd, limit):
            j = rr_code_rare(code, n_classes, d, qd, frac, m, rng)
        out[i] = lo + j
    return out


def randomized_response_indices(codes, rng, n_classes, c):
    """k-ary randomized response on class codes."""
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    out = np.empty(codes.shape[0], dtype=np.int64)
    kernel = kernel_for(_randomized_response_indices, rng, codes.shape[0])
    kernel(codes, rng, n_classes, c, out)
    return out


@numba.njit(cache=True, nogil=True)
def _randomized_response_indices(codes, rng, n_classes, c, out):
    qd, frac, limit, m = c[0], c[1], c[2], c[3]
    for i in range(codes.shape[0]):
        begin_row(rng, i)  # keyed releases: row i reads its own stream
        d = _digit(rng)
        j = rr_code_common(codes[i], n_classes, d, limit, m)
        if _rr_rare(d, qd, limit):
            j = rr_code_rare(codes[i], n_classes, d, qd, frac, m, rng)
        out[i] = j
    return out


# -- any finite transition matrix ---------------------------------------------


def exponent_groups(matrix):
    """Tables of :func:`group_draw` (the exact tail of :func:`categorical_tables`):
    each row's outputs grouped by the binary exponent of their probability.

    In a group all probabilities lie in [2^e, 2^(e+1)). Groups are visited
    from the largest exponent down; at each, an exact Bernoulli decides
    between stopping (probability P_g / R_g) and moving on (R_(g+1) / R_g),
    R_g being the mass of groups g, g+1, ... summed from the smallest up.
    The smaller of the two is stored (negative: "move on"), so no
    probability is formed as 1 - (something close to 1). Zero entries are
    in no group and are never sampled.

    Returns
    -------
    order : ndarray of int64, shape (n_rows, n_out)
        Output indices of each row, group by group.
    cdf : ndarray of float64, shape (n_rows, n_out)
        Cumulative probabilities within each group, ending at exactly 1.
    group_end : ndarray of int64, shape (n_rows, n_groups)
        End position of each group in ``order``.
    group_q : ndarray of float64, shape (n_rows, n_groups)
        Stop probability (>= 0) or minus the move-on probability.
    n_groups : ndarray of int64, shape (n_rows,)
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    n_rows, n_out = matrix.shape
    exponents = np.frexp(matrix)[1]
    key = np.where(matrix > 0, -exponents, np.iinfo(np.int32).max)  # zeros last
    order = np.argsort(key, axis=1, kind="stable").astype(np.int64)
    n_groups = np.array([np.unique(key[i][matrix[i] > 0]).size for i in range(n_rows)], dtype=np.int64)
    width = max(int(n_groups.max()), 1)
    cdf = np.zeros((n_rows, n_out))
    group_end = np.zeros((n_rows, width), dtype=np.int64)
    group_q = np.zeros((n_rows, width))
    for i in range(n_rows):
        n_pos = int(np.count_nonzero(matrix[i] > 0))
        p = matrix[i, order[i, :n_pos]]
        ends = np.append(np.flatnonzero(np.diff(key[i, order[i, :n_pos]])) + 1, n_pos)
        starts = np.concatenate([[0], ends[:-1]])
        masses = np.array([p[s:e].sum() for s, e in zip(starts, ends)])
        remaining = np.cumsum(masses[::-1])[::-1]  # from the smallest group up
        for g, (s, e) in enumerate(zip(starts, ends)):
            cdf[i, s:e] = np.cumsum(p[s:e] / masses[g])
            cdf[i, e - 1] = 1.0
            stop = masses[g] / remaining[g]
            if g == ends.size - 1:
                group_q[i, g] = 1.0
            elif stop <= 0.5:
                group_q[i, g] = stop
            else:
                group_q[i, g] = -(remaining[g + 1] / remaining[g])
        group_end[i, : n_groups[i]] = ends
    return order, cdf, group_end, group_q, n_groups


@numba.njit(cache=True, nogil=True)
def group_draw(row, rng, order, cdf, group_end, group_q, n_groups):
    """One output of row ``row`` from the tables of :func:`exponent_groups`.

    A group is chosen by exact Bernoulli draws, then an output inside it by
    inverting the group's CDF with one digit (its probabilities differ by
    less than 2x, so each output owns at least 2**52 / n of the digit's
    values). Not inlined: the alias tables below send only their tail here.
    """
    g = 0
    while g < n_groups[row] - 1:
        q = group_q[row, g]
        if q >= 0.0:
            if bernoulli_exact(q, rng):
                break
        elif not bernoulli_exact(-q, rng):
            break
        g += 1
    lo = 0 if g == 0 else group_end[row, g - 1]
    hi = group_end[row, g] - 1
    v = _digit(rng) / _DIGIT
    while lo < hi:
        mid = (lo + hi) // 2
        if cdf[row, mid] > v:
            hi = mid
        else:
            lo = mid + 1
    return order[row, lo]


# -- alias tables with an exact tail: one digit per draw for any matrix ---------

# Entries below this never enter an alias table (they are sampled exactly by
# the exponent groups); the check in categorical_tables moves more out if needed.
_ALIAS_FLOOR = 2.0**-20
_ALIAS_RTOL = 1e-9


def _alias_with_tail(p, rtol):
    """(bulk mask, tail mass, prob, alias) of one row: the largest bulk whose
    alias table reproduces every bulk entry to ``rtol`` relative."""
    from ..mechanisms.classic._noise import alias_table, alias_table_probabilities

    bulk = p >= _ALIAS_FLOOR
    for _ in range(8):
        if not bulk.any():
            break
        tail = math.fsum(p[~bulk])
        prob, alias = alias_table(p[bulk])
        implied = alias_table_probabilities(prob, alias) * (1.0 - tail)
        # Digit quantisation: each cell boundary is off by at most a digit or
        # two of the ~2**53 / K digits a cell owns; a value owns its cell and
        # the parts of the n_in cells aliasing it.
        n_in = np.bincount(alias[prob < 1.0], minlength=prob.shape[0])
        bound = (np.abs(implied - p[bulk]) + 4.0 * (1.0 + n_in) / _DIGIT) / p[bulk]
        bad = bound > rtol
        if not bad.any():
            return bulk, tail, prob, alias
        bulk[np.flatnonzero(bulk)[bad]] = False
    return np.zeros_like(bulk), 1.0, np.ones(1), np.zeros(1, dtype=np.int64)


def categorical_tables(matrix, rtol=_ALIAS_RTOL):
    """Tables of :func:`categorical_codes` for a transition matrix.

    Each row's entries of at least 2**-20 (the *bulk*) go into a Walker alias
    table; the others (the *tail*, mass T) into :func:`exponent_groups`
    tables. A draw reads one digit: an exact Bernoulli(T) on it sends the
    label to the exact tail sampler, otherwise the same digit, uniform on
    the bulk's share of digits, picks a cell of the alias table. Every bulk
    entry's sampled probability is checked here to be within ``rtol``
    relative of the matrix (float error of the table plus digit
    quantisation); entries that fail move to the tail. Zero entries are in
    neither and are never produced.

    Returns a tuple of arrays (pass it whole to the kernels): ``heads`` of
    shape (n_rows, 4), each row's (tail digit threshold, its fraction, bulk
    scale, last cell), a few kilobytes that stay in the L1 cache; ``cells``
    of shape (n_rows, K, 2), one 16-byte int64 record per alias cell so that
    a draw touches one cache line of the (megabytes) table: the bit pattern
    of the cell's threshold (a float64 in [0, 1], compared as an integer,
    which orders non-negative floats as the floats) and ``own | alias <<
    32`` (:func:`unpack_cells` decodes them); then the
    :func:`exponent_groups` tables of the tails.
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    n_rows, n_out = matrix.shape
    rows = []
    for i in range(n_rows):
        p = matrix[i] / math.fsum(matrix[i])
        rows.append(_alias_with_tail(p, rtol))
    if n_out >= 2**31:
        raise ValueError("at most 2**31 - 1 outputs: a cell packs two output indices in 64 bits.")
    width = max(int(r[2].shape[0]) for r in rows)
    heads = np.zeros((n_rows, 4))
    cells = np.zeros((n_rows, width, 2), dtype=np.int64)
    cells[:, :, 0] = np.float64(1.0).view(np.int64)
    # The tail tables hold only each row's tail entries (columns tail_cols).
    smalls = []
    for i, (bulk, tail, _, _) in enumerate(rows):
        p = matrix[i]
        smalls.append(np.flatnonzero((p > 0) & ~bulk) if tail > 0.0 else np.zeros(0, np.int64))
    t_width = max(1, max(c.shape[0] for c in smalls))
    tail_rows = np.zeros((n_rows, t_width))
    tail_cols = np.zeros((n_rows, t_width), dtype=np.int64)
    for i, (bulk, tail, prob, alias) in enumerate(rows):
        outputs = np.flatnonzero(bulk)
        k = prob.shape[0]
        # Non-negative, and + 0.0: no -0.0, whose bit pattern compares as negative
        # (the kernel compares thresholds as integers; same outcomes as floats).
        cells[i, :k, 0] = (np.maximum(prob, 0.0) + 0.0).view(np.int64)
        if outputs.size:
            cells[i, :k, 1] = outputs | (outputs[alias] << 32)
        qd, frac = split_probability(tail)
        heads[i] = qd, frac, k / (_DIGIT - qd) if qd < _DIGIT else 0.0, k - 1
        small = smalls[i]
        if small.size:
            p = matrix[i] / math.fsum(matrix[i])
            tail_rows[i, : small.size] = p[small] / tail
            tail_cols[i, : small.size] = small
        else:
            tail_rows[i, 0] = 1.0  # never reached: Bernoulli(0)
    order, *groups = exponent_groups(tail_rows)
    order = np.take_along_axis(tail_cols, order, axis=1)  # positions -> output indices
    return (heads, cells, order, *groups)


def unpack_cells(cells):
    """(threshold, own output, alias output) of every cell of
    :func:`categorical_tables`' packed ``cells``."""
    return cells[..., 0].view(np.float64), cells[..., 1] & 0xFFFFFFFF, cells[..., 1] >> 32


_NO_TABLES = (
    np.zeros((1, 4)), np.zeros((1, 1, 2), np.int64),  # heads, cells
    np.zeros((1, 1), np.int64), np.ones((1, 1)), np.ones((1, 1), np.int64),  # order, cdf, ends
    np.ones((1, 1)), np.ones(1, np.int64),  # group_q, n_groups
)


_EMPTY_F = np.zeros(0)
# The rounding coin's first digit: the low bits of the row's draw's word.
_COIN_BITS = 11
_COIN_UNIT = 2.0**_COIN_BITS
_COIN_MASK = 2**_COIN_BITS - 1
# Labels per block of the two-pass alias draw (buffers of 16 bytes a label):
# enough loads in flight, buffers and prefetched lines well inside L1.
_BLOCK = 256
_EMPTY_I = np.zeros(0, dtype=np.int64)
_NO_GRID = np.zeros(3)  # the grid constants of a call with codes (not read)


@numba.njit(cache=True, nogil=True, inline="always")
def arithmetic_neighbours(v, a, inv_step, step, last, k):
    """(lo, values[lo], values[lo + 1]) for a label ``v`` in ``[a, last]``
    on an arithmetic grid of ``k`` points (:func:`arithmetic_grid`): the
    last ``lo <= k - 2`` with ``values[lo] <= v`` (``lo`` an integer held in
    a float64). The guess is ``lo`` or one off; ``a + g * step`` is
    ``values[g]``, bit for bit, for ``g <= k - 2``. Branch-free and in
    floats (scalars only: inlined without cost): a loop of it vectorises,
    and int64 <-> float64 conversions do not without AVX-512."""
    top = k - 2.0
    lo = min(np.floor((v - a) * inv_step), top)
    lo -= 1.0 if a + lo * step > v else 0.0
    lo += 1.0 if a + (lo + 1.0) * step <= v and lo < top else 0.0
    return lo, a + lo * step, (a + (lo + 1.0) * step if lo < top else last)


@numba.njit(cache=True, nogil=True, inline="always")
def rounding_probability(offset, gap):
    """The probability of rounding a label ``offset`` above its lower grid
    neighbour up to the upper one, ``gap`` above it: the float
    ``offset / gap``, in [0, 1] (``0 <= offset <= gap``, and rounding is
    monotone), 0 for an empty gap (repeated grid values). The kernel draws
    the coin with exactly this probability."""
    return offset / gap if gap > 0.0 else 0.0


@numba.njit(cache=True, nogil=True)
def _arithmetic_rounding(y, start, stop, par, last, k, lo_at, t_at):
    """The rounding pass of :func:`_discrete_rows_kernel` over one block on
    an arithmetic grid: each label's lower neighbour and its probability t of
    rounding up, times 2**11 (exact: the coin's scale). A function of its own
    (called once a block): inside the kernel, its vectorised loop slowed the
    kernel's other paths."""
    a, inv_step, step = par[0], par[1], par[2]
    # Unsigned indices: numba adds no negative-index wraparound, which kept
    # the loop from loading and storing whole vectors.
    first = np.uint64(start)
    for j in range(np.uint64(stop - start)):
        v = min(max(y[first + j], a), last)
        lo, v_lo, v_hi = arithmetic_neighbours(v, a, inv_step, step, last, k)
        # Through int32 (exact: lo < _MAX_ARITHMETIC_POINTS <= 2**31): a vector of
        # doubles converts to int32 in one instruction, to int64 only lane by
        # lane below AVX-512 (a fifth of the pass).
        lo_at[j] = np.int64(np.int32(lo))
        t_at[j] = rounding_probability(v - v_lo, v_hi - v_lo) * _COIN_UNIT


@numba.njit(cache=True, nogil=True)
def _categorical_tail_draw(row, d, qd, frac, rng, order, cdf, group_end, group_q, n_groups):
    """For a first digit ``d <= qd`` of :func:`_discrete_rows_kernel`'s table
    draw: an output of the row's tail if U < q (:func:`_bernoulli_first`, the
    tie d = qd read on), else -1 (the bulk). Not inlined: the rare path, out
    of the hot loop's registers (see :func:`_rr_offset_rare`)."""
    if d < qd or bernoulli_exact(frac, rng):
        return group_draw(row, rng, order, cdf, group_end, group_q, n_groups)
    return np.int64(-1)


def _discrete_rows_kernel(rows_from, draw_by):
    """The kernel of :func:`sample_rows` for one path.

    ``rows_from`` is ``'codes'`` (row codes given, or, when labels ``y``
    are, the index of each label's nearest point of the arithmetic grid
    ``values``: :func:`nearest_indices`, a block at a time), ``'grid'``
    (labels rounded onto a grid) or ``'pieces'`` (each label's end of its piece:
    ``values`` and ``right`` hold the pieces' ends, ``par`` their lookup
    from :func:`piece_lookup`, see :func:`sample_rows`); ``draw_by`` is ``'rr'`` (k-ary randomized
    response) or ``'tables'`` (a matrix's tables). They are constants of
    the closure (and of its numba cache key): numba prunes the paths a
    kernel cannot take before typing them, so a fit compiles only the path
    it samples with, and the hot loop tests nothing per label about its
    path. (Rounding with tables once ran a kernel deciding both per label:
    since the draws are inlined (:mod:`._pcg64`), pruned is ~10 % faster.)
    """

    @numba.njit(cache=True, nogil=True)
    def discrete_rows(
        codes, y, values, lower, par, right, rr, rng, outputs, out, ibuf, fbuf,
        heads, flat, width, order, cdf, group_end, group_q, n_groups,
    ):
        """Every finite-output sampler.

        The row of label i is ``codes[i]`` or the unbiased randomized
        rounding of ``y[i]`` onto the grid ``values`` (``lower``/``par`` from
        :func:`rounding_grid`; up with probability exactly the float t of
        :func:`rounding_probability`, by a coin on the low 11 bits of the
        word whose top 53 bits are the row's draw digit, see
        docs/sampling.md). The output index is
        drawn by k-ary randomized response (constants ``rr`` of
        :func:`rr_constants`), or from the row's alias table with the exact
        tail (:func:`categorical_tables`). ``out[i] = outputs[j]``. The
        steps are written out in the loop: numba's inlining of helpers that
        take arrays costs several times their work per label.
        """
        k = values.shape[0]
        n_buckets = lower.shape[0]
        nearest = rows_from == "codes" and y.shape[0] > 0  # rows from labels (sample_rows)
        u_width = np.uint64(width)
        if draw_by == "rr":
            rr_qd, rr_frac, rr_limit, rr_m = rr[0], rr[1], rr[2], rr[3]
            n_classes = np.int64(rr_m) + 1
        else:
            rr_qd = rr_frac = rr_limit = rr_m = 0.0
            n_classes = 0
        if draw_by == "interval":  # IntervalTables.constants, passed as rr
            iv_guide, iv_shift = np.uint64(rr[1]), np.int64(rr[2])
            iv_low, iv_top = np.int64(rr[3]), np.int64(rr[4])
        else:
            iv_guide, iv_shift, iv_low, iv_top = np.uint64(0), 0, 0, 0
        # Alias draws run in blocks of two passes: the first reads the random
        # source and the row headers, picks each label's cell and prefetches
        # it; the second reads the cells. A matrix with hundreds of outputs
        # has tables of megabytes, and waiting for one cache miss per label
        # was most of the cost. The random stream is read in the same order
        # as by a single pass.
        # Block buffers (allocated by the caller: fewer numpy calls to compile).
        cell_at = ibuf[0]  # cell's offset in flat, or -1 - output (tail)
        frac_bits = ibuf[1]  # bit pattern of the label's fraction in its cell
        n = out.shape[0]
        lo_at = ibuf[2]  # rounding: lower neighbour (or piece),
        # and the probability t of going up (to the piece's right end); on a
        # grid t 2**11 (a multiply taken out of the draw loop)
        t_at = fbuf[0]
        # The generator's state is held in registers (_pcg64.hold): a store to
        # the block buffers or the output would otherwise force a reload of it
        # from memory between draws. Released into rng around each helper that
        # draws from rng itself (the rare paths) and at the end.
        if rows_from == "grid" and k == 1:  # one point: no rounding pass, t = 0 (down)
            lo_at[:] = 0
            t_at[:] = 0.0
        s = hold(rng)
        for start in range(0, n, _BLOCK):
            stop = min(start + _BLOCK, n)
            if rows_from == "pieces":
                _piece_positions(y, start, stop, values, right, par, lo_at, t_at)
            elif rows_from == "codes" and nearest:  # nearest_indices' rows, a block at a time
                _nearest_arithmetic(
                    y[start:stop], par[0], par[1], par[2], values[k - 1], k, lo_at[: stop - start]
                )
            elif rows_from == "grid" and k > 1:
                # Randomized rounding (001 §3): from v_l up to v_h with probability
                # (v - v_l) / (v_h - v_l); labels outside the grid go to its ends.
                # The neighbours first, in a pass without randomness (a chain of
                # dependent loads the CPU overlaps across labels).
                if n_buckets == 0:
                    # An arithmetic grid (rounding_grid): the same neighbours and
                    # probabilities as the bucket lookup below, bit for bit.
                    _arithmetic_rounding(y, start, stop, par, values[k - 1], k, lo_at, t_at)
                else:
                    for i in range(start, stop):
                        v = min(max(y[i], values[0]), values[k - 1])
                        lo = lower[min(np.int64((v - par[0]) * par[1]), n_buckets - 1)]
                        lo += np.int64(values[lo + 1] <= v)
                        while lo < k - 2 and values[lo + 1] <= v:  # crowded buckets only
                            lo += 1
                        while lo > 0 and values[lo] > v:  # bucket index rounded up
                            lo -= 1
                        if lo > k - 2:
                            lo = k - 2
                        lo_at[i - start] = lo
                        t_at[i - start] = rounding_probability(
                            v - values[lo], values[lo + 1] - values[lo]) * _COIN_UNIT
            for i in range(start, stop):
                begin_row(rng, i)  # keyed releases: row i reads its own stream
                if rows_from == "codes":
                    row = lo_at[i - start] if nearest else codes[i]
                    digit, s = held_int_digit(rng, s)
                else:
                    # One word: its top 53 bits are the row's draw's digit (the
                    # digit rng.random() gives, but on MT19937), its low 11 bits the
                    # first binary digits b of the rounding coin's uniform,
                    # independent of them.
                    word, s = held_word(rng, s)
                    digit = np.int64(word >> np.uint64(11))
                    # Up (the upper neighbour, the piece's right end 2 p + 1) with
                    # probability exactly t: b < m = floor(t 2**11) up, b > m down,
                    # b = m (probability 2**-11) an exact Bernoulli of the fraction
                    # t 2**11 - m (exact in float64) on fresh digits, the state
                    # released around it. Branch-free but for the tie: the outcome
                    # is a coin flip. (The grid's pass stores t 2**11 already.)
                    scaled = t_at[i - start] * (_COIN_UNIT if rows_from == "pieces" else 1.0)
                    m = np.int64(scaled)
                    b = np.int64(word & np.uint64(_COIN_MASK))
                    row = lo_at[i - start] * (2 if rows_from == "pieces" else 1)
                    if b == m:
                        release(rng, s)
                        row += np.int64(bernoulli_exact(scaled - m, rng))
                        s = hold(rng)
                    else:
                        row -= (b - m) >> 63
                if draw_by == "rr":
                    d = float(digit)
                    j = rr_code_common(row, n_classes, d, rr_limit, rr_m)
                    if _rr_rare(d, rr_qd, rr_limit):
                        release(rng, s)
                        j = rr_code_rare(row, n_classes, d, rr_qd, rr_frac, rr_m, rng)
                        s = hold(rng)
                    out[i] = outputs[j]
                elif draw_by == "interval":
                    # A two-level matrix (_interval.py): the digit's position in
                    # the shared cells (their lookup in the second pass below).
                    r = np.uint64(row)
                    d = digit
                    j = -1
                    if d >= iv_top:  # maybe the row's exact tail, the top qd digits (rare)
                        flip = _DIGIT_INT - 1 - d  # a digit: U < q read on it, a tie read on
                        if flip <= heads[r, 0]:
                            release(rng, s)
                            j = _categorical_tail_draw(
                                row, float(flip), heads[r, 0], heads[r, 1], rng, order, cdf,
                                group_end, group_q, n_groups,
                            )
                            s = hold(rng)
                    # Low digits are their own positions; high ones are shifted into
                    # the row's window (a coin flip: a mask, not a branch). The shift
                    # is read from the float heads: the same load from the int64
                    # table cost ~25 % of the kernel's time (measured).
                    high = (iv_low - 1 - d) >> 63
                    cell_at[i - start] = d + (np.int64(heads[r, 2]) & high) if j < 0 else -1 - j
                else:
                    # Unsigned indices (rows, cells and outputs are >= 0): numba
                    # adds no negative-index wraparound to their loads.
                    r = np.uint64(row)
                    qd = heads[r, 0]
                    d = float(digit)
                    tail = -1
                    if d <= qd:  # the tail (rare), exactly; a tie d = qd reads on
                        release(rng, s)
                        tail = _categorical_tail_draw(
                            row, d, qd, heads[r, 1], rng, order, cdf, group_end, group_q, n_groups
                        )
                        s = hold(rng)
                    if tail >= 0:
                        cell_at[i - start] = -1 - tail
                    else:  # the same digit, uniform on the bulk's share, picks a cell
                        w = (d - qd) * heads[r, 2]  # >= 0
                        # The cell: floor(w) (w < K, up to rounding), at most the last
                        # cell; clamped as a float, converted once (the same c and
                        # fraction as min(int64(w), last): one conversion fewer).
                        cf = np.floor(min(w, heads[r, 3]))
                        c = np.int64(cf)
                        at = r * u_width + np.uint64(2 * c)
                        prefetch(flat, at)
                        cell_at[i - start] = np.int64(at)
                        frac_bits[i - start] = float_bits(w - cf)  # >= 0
            if draw_by == "tables":
                for i in range(start, stop):
                    at = cell_at[i - start]
                    if at < 0:
                        j = np.uint64(-1 - at)
                    else:
                        # Own output if frac < threshold, else the alias. Both are
                        # non-negative floats, so their bit patterns compare alike;
                        # the sign of the difference is a mask. (A float compare
                        # and select compiles to a branch, mispredicted on every
                        # other label.)
                        ua = np.uint64(at)
                        keep = (frac_bits[i - start] - flat[ua]) >> 63
                        pair = flat[ua + np.uint64(1)]
                        alias = pair >> 32
                        j = np.uint64(alias + (((pair & 0xFFFFFFFF) - alias) & keep))
                    out[np.uint64(i)] = outputs[j]  # unsigned: no wraparound
            if draw_by == "interval":
                for i in range(start, stop):
                    t = cell_at[i - start]
                    if t < 0:  # the tail's output
                        j = -1 - t
                    else:  # a cell (outputs holds the outputs twice: low, then high cells)
                        j = interval_cell(t, flat, iv_guide, iv_shift)
                    out[np.uint64(i)] = outputs[np.uint64(j)]
        release(rng, s)

    return discrete_rows


# Created at import, each compiled on first use: (rounding, use_rr) -> kernel.
_DISCRETE_ROWS = {
    (False, False): _discrete_rows_kernel("codes", "tables"),
    (False, True): _discrete_rows_kernel("codes", "rr"),
    (True, False): _discrete_rows_kernel("grid", "tables"),
    (True, True): _discrete_rows_kernel("grid", "rr"),
    ("pieces", False): _discrete_rows_kernel("pieces", "tables"),
    (False, "interval"): _discrete_rows_kernel("codes", "interval"),
    (True, "interval"): _discrete_rows_kernel("grid", "interval"),
}


def rounding_grid(values, buckets_per_value=4, arithmetic=True):
    """Tables of the O(1) rounding lookup for sorted grid ``values``:
    ``(values, lower, par)``.

    An *arithmetic* grid -- ``values[i]`` is the float ``a + i * step`` for
    every ``i <= k - 2`` (the last value is free: ``np.linspace`` sets it to
    the end point) -- has an empty ``lower`` and ``par = (a, 1 / step,
    step)``: the kernel finds a label's lower neighbour by arithmetic, the
    same neighbour with the same floats, bit for bit, as the table lookup
    (see :func:`arithmetic_grid`). Any other grid has, for each of
    equal-width buckets over its range, the last grid index at or below the
    bucket's start (at most k - 2), from which a label's lower neighbour is
    a step away (no binary search), and ``par = (start, buckets per unit, 0)``
    (also for an arithmetic grid with ``arithmetic=False``: tests and
    benchmarks compare the two).
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    k = values.shape[0]
    lo = float(values[0])
    step = arithmetic_grid(values) if arithmetic else None
    if step is not None:
        return values, _EMPTY_I, np.array([lo, 1.0 / step, step])
    span = float(values[-1]) - lo
    nb = max(1, buckets_per_value * k)
    inv_width = nb / span if span > 0 else 0.0
    if not math.isfinite(inv_width):
        # A subnormal span: (v - lo) * inf is nan or inf, an int64 of it a wild
        # index. Bucket 0 for every label; the kernel's walk finds the neighbour.
        inv_width = 0.0
    edges = lo + np.arange(nb) * (span / nb)
    lower = np.clip(np.searchsorted(values, edges, side="right") - 1, 0, max(k - 2, 0))
    return values, lower.astype(np.int64), np.array([lo, inv_width, 0.0])


# Most points of an arithmetic grid, and least step relative to its largest
# magnitude: the guess floor((v - a) / step) is then off by at most one.
_MAX_ARITHMETIC_POINTS = 2**30
_MIN_RELATIVE_STEP = 2.0**-30
_MIN_NORMAL = 2.0**-1022


def arithmetic_grid(values):
    """The step of an arithmetic grid (``values[i] == a + i * step`` in
    float64 for ``i <= k - 2``, ``values[k - 1] > values[k - 2]``), or None.

    The kernel's guess ``g = floor((v - a) * (1 / step))`` of the lower
    neighbour of a label ``v`` in ``[a, values[-1]]`` carries three
    roundings of relative size 2**-53 on a quotient below k, and each
    ``a + i * step`` is within ``ulp(max |values|)`` of the exact value:
    with k <= 2**30 points and ``step >= 2**-30 max |values|`` the guess is
    within 2**-20 of a step of the label's exact position on the grid, so it
    is the neighbour, or one off across a grid point, which the kernel's two
    compares (on the grid's own floats) correct.
    """
    values = np.asarray(values, dtype=np.float64)
    k = values.shape[0]
    if not (3 <= k <= _MAX_ARITHMETIC_POINTS and values[-1] > values[-2]):
        return None  # (two points: nothing to gain)
    a = float(values[0])
    scale = float(np.max(np.abs(values)))
    # The step of np.linspace (span / (k - 1)), or the first gap.
    for step in ((float(values[-1]) - a) / (k - 1), float(values[1]) - a):
        # A normal step (>= 2**-1022): 1 / step is finite and every rounding
        # above is relative (a subnormal step's are absolute: 1 / 5e-324 is inf).
        if (math.isfinite(step) and math.isfinite(scale) and step >= _MIN_NORMAL
                and step >= _MIN_RELATIVE_STEP * scale):
            inner = a + np.arange(k - 1, dtype=np.float64) * step  # a + i * step, as the kernel
            if np.array_equal(inner, values[:-1]):
                return step
    return None


def nearest_indices(values, y):
    """Index of the grid value nearest to each label (ties go up, labels
    outside the grid clipped to its ends), for an arithmetic grid
    (:func:`arithmetic_grid`); None for any other grid.

    The same indices, from the same float compares, as
    :func:`~skdp_label.mechanisms._prior.nearest_by_search`: the lower
    neighbour v_l of a label v is found by arithmetic as in the rounding of
    :func:`sample_rows`, and v_l wins when ``v - v_l < v_h - v``.
    """
    values = np.ascontiguousarray(values, dtype=np.float64)
    step = arithmetic_grid(values)
    if step is None:
        return None
    y = np.ascontiguousarray(y, dtype=np.float64)
    codes = np.empty(y.shape[0], dtype=np.int64)
    _nearest_arithmetic(y, float(values[0]), 1.0 / step, step, float(values[-1]), values.shape[0], codes)
    return codes


@numba.njit(cache=True, nogil=True)
def _nearest_arithmetic(y, a, inv_step, step, last, k, codes):
    for i in range(y.shape[0]):
        v = min(max(y[i], a), last)
        lo, v_lo, v_hi = arithmetic_neighbours(v, a, inv_step, step, last, k)
        # Through int32: see _arithmetic_rounding.
        codes[i] = np.int64(np.int32(lo + (1.0 if v_hi - v <= v - v_lo else 0.0)))


def sample_rows(rng, outputs, *, codes=None, y=None, grid=None, pieces=None, nearest=None,
                tables=None, rr=None, interval=None):
    """Randomized outputs, one per label, in one pass (see :func:`_discrete_rows_kernel`).

    Parameters
    ----------
    rng : Generator or KeyedRows
        The release's random source.
    outputs : ndarray of float64
        Output value of each output index.
    codes : ndarray of int, optional
        Row of each label; or
    y, grid : ndarray, tuple
        Labels rounded (randomized, unbiased) onto ``grid = rounding_grid(values)``; or
    y, nearest : ndarray
        Labels and an arithmetic grid (:func:`arithmetic_grid`; with
        ``tables``): the row of a label is the index of its nearest grid
        value, :func:`nearest_indices` (fused: no array of codes); or
    y, pieces : ndarray, tuple
        Labels on ``pieces = (left, right)`` (with ``tables``): the row of a
        label in piece ``p`` is ``2 p + 1`` (the right end) with probability
        ``t``, its position in the piece, else ``2 p``, by the rounding
        coin (exactly t) on the low bits of the row's draw's word, label by
        label (the rows of :func:`piece_rows`' law, not its digits).
    tables : tuple, optional
        :func:`categorical_tables` of the matrix; or
    rr : ndarray, optional
        :func:`rr_constants`: k-ary randomized response over the rows; or
    interval : IntervalTables, optional
        :func:`._interval.interval_tables` of a two-level matrix (with
        ``codes`` or ``y, grid``).

    Returns
    -------
    out : ndarray of float64
    """
    if interval is not None:
        if tables is not None or rr is not None or pieces is not None or nearest is not None:
            raise ValueError("interval tables go with codes or y, grid only")
        tables = (interval.heads, interval.table, *interval.tail)
        outputs = np.concatenate([outputs, outputs])  # of the low cells, then the high ones
    rounding, use_rr = codes is None, tables is None
    key = (rounding, use_rr if interval is None else "interval")
    if pieces is not None:
        if codes is not None or grid is not None or use_rr:
            raise ValueError("pieces go with labels y and tables only")
        key = ("pieces", False)
        left = np.ascontiguousarray(pieces[0], dtype=np.float64)
        right = np.ascontiguousarray(pieces[1], dtype=np.float64)
        left, par = piece_lookup(left, right)
        grid = (left, _EMPTY_I, par)
    elif nearest is not None:
        if codes is not None or grid is not None or use_rr:
            raise ValueError("nearest goes with labels y and tables only")
        key = (False, False)  # the codes' kernel, given labels instead
        grid = rounding_grid(nearest)
        if grid[1].shape[0]:
            raise ValueError("nearest rows need an arithmetic grid (arithmetic_grid)")
        right = _EMPTY_F
    else:
        right = _EMPTY_F
    if not rounding:
        codes = np.ascontiguousarray(codes, dtype=np.int64)
        y, grid, n = _EMPTY_F, (_EMPTY_F, _EMPTY_I, _NO_GRID), codes.shape[0]
    else:
        y = np.ascontiguousarray(y, dtype=np.float64)
        codes, n = _EMPTY_I, y.shape[0]
    if use_rr:
        tables = _NO_TABLES
        rr = np.ascontiguousarray(rr, dtype=np.float64)
    else:
        rr = _EMPTY_F if interval is None else interval.constants
    out = np.empty(n, dtype=np.float64)
    kernel_for(_DISCRETE_ROWS[key], rng, n)(*_rows_args(codes, y, grid, right, rr, rng, outputs,
                                                        out, tables))
    return out


def _rows_args(codes, y, grid, right, rr, rng, outputs, out, tables):
    """The arguments of a :func:`_discrete_rows_kernel` call."""
    outputs = np.ascontiguousarray(outputs, dtype=np.float64)
    heads, cells, *groups = tables
    width = 2 * cells.shape[1] if cells.ndim == 3 else 0  # (interval tables: flat already)
    return (codes, y, *grid, right, rr, rng, outputs, out, np.empty((3, _BLOCK), dtype=np.int64),
            np.empty((1, _BLOCK)), heads, cells.reshape(-1), width, *groups)


def nearest_rows_compiled():
    """Whether ``sample_rows(rng, outputs, y=..., nearest=..., tables=...)``
    runs compiled code without a compile: its kernel (the codes' kernel,
    given labels) is loaded or in numba's cache. Otherwise a caller samples
    the codes of ``nearest_domain_index`` (the same rows and digits), whose
    call compiles that kernel in the background while its twin runs: a
    first release does not interpret the nearest rows label by label."""
    return not would_compile(_DISCRETE_ROWS[False, False])


# Pieces up to which a label's piece is the count of three padded starts <= it
# (piece_lookup): a loop over the starts, vectorised for any count, cost
# about a quarter of the quantization family's sampling time at one piece.
_COUNTED_PIECES = 4


def piece_lookup(left, right):
    """``(left, par)`` for :func:`_piece_positions`: ``par = (a, 1 / step,
    step, right[-1], s1, s2, s3)``. Up to ``_COUNTED_PIECES`` pieces, ``s1,
    s2, s3`` are the starts ``left[1:]`` padded with +inf (the piece is the
    count of them <= the label: three compares, no loop) and ``1 / step`` is
    0; more pieces, contiguous (``right[p] == left[p + 1]``) and whose
    starts and last end are an arithmetic grid (:func:`arithmetic_grid`:
    MVU's), have its ``a, 1 / step, step``; otherwise all are 0 (count or
    bisect the starts)."""
    left = np.ascontiguousarray(left, dtype=np.float64)
    right = np.ascontiguousarray(right, dtype=np.float64)
    par = np.zeros(7)
    if left.shape[0] <= _COUNTED_PIECES:
        par[4:] = np.inf
        par[4 : 3 + left.shape[0]] = left[1:]
        return left, par
    step = arithmetic_grid(np.append(left, right[-1]))
    if step is not None and np.array_equal(right[:-1], left[1:]):  # contiguous (MVU's)
        par[:4] = left[0], 1.0 / step, step, right[-1]
    return left, par


@numba.njit(cache=True, nogil=True)
def _piece_positions(y, start, stop, left, right, par, pos_at, t_at):
    """Piece ``pos_at[i - start]`` of each label ``y[i]`` (the last whose
    start ``left[p]`` is <= it, clipped to the pieces) and its position
    ``t_at[i - start]`` in ``[left[p], right[p]]`` (0 on an empty piece), for
    ``start <= i < stop``; ``par`` from :func:`piece_lookup`. No randomness
    (a pass the CPU overlaps across labels), shared by :func:`piece_rows`
    and the ``'pieces'`` rows of :func:`sample_rows`."""
    m = left.shape[0]
    a, inv_step, step, last = par[0], par[1], par[2], par[3]
    # The ends of up to _COUNTED_PIECES pieces (repeated past the last: never picked).
    l0, l1, l2, l3 = left[0], left[min(1, m - 1)], left[min(2, m - 1)], left[min(3, m - 1)]
    r0, r1, r2, r3 = right[0], right[min(1, m - 1)], right[min(2, m - 1)], right[min(3, m - 1)]
    first = np.uint64(start)
    for i in range(first, np.uint64(stop)):  # unsigned: no wraparound (vector loads)
        x = y[i]
        if inv_step > 0.0:
            # Contiguous pieces on evenly spaced starts: the lower neighbour of x
            # on the grid of the starts and the last end (the same index as the
            # count, and the piece's ends, bit for bit; no loads).
            v = min(max(x, a), last)
            lo, a_pos, b_pos = arithmetic_neighbours(v, a, inv_step, step, last, m + 1)
            width = b_pos - a_pos
            t = (x - a_pos) / width if width > 0.0 else 0.0
            pos_at[i - first] = np.int64(np.int32(lo))  # through int32: see _arithmetic_rounding
            # + 0.0: no -0.0 (its bits compare as negative)
            t_at[i - first] = min(max(t, 0.0), 1.0) + 0.0
            continue
        elif m == 1:  # one piece (OPTM, ERM, randomized quantization)
            pos = 0
        elif m <= _COUNTED_PIECES:  # the padded starts after the first (piece_lookup)
            pos = np.int64(par[4] <= x) + np.int64(par[5] <= x) + np.int64(par[6] <= x)
            # left[pos] and right[pos] by selects among the hoisted ends (no
            # gather: the loop vectorises); the same floats.
            a_pos = l3 if pos == 3 else (l2 if pos == 2 else (l1 if pos == 1 else l0))
            b_pos = r3 if pos == 3 else (r2 if pos == 2 else (r1 if pos == 1 else r0))
            width = b_pos - a_pos
            t = (x - a_pos) / width if width > 0.0 else 0.0
            pos_at[i - first] = pos
            t_at[i - first] = min(max(t, 0.0), 1.0) + 0.0  # (see below)
            continue
        elif m <= 64:  # a branch-free count (SIMD) beats mispredicted bisection steps
            lo = 0  # the number of piece starts <= x
            for j in range(m):
                lo += np.int64(left[j] <= x)
            pos = min(max(lo - 1, 0), m - 1)
        else:
            lo, hi = 0, m
            while lo < hi:
                mid = (lo + hi) >> 1
                if left[mid] <= x:
                    lo = mid + 1
                else:
                    hi = mid
            pos = min(max(lo - 1, 0), m - 1)
        a_pos = left[pos]
        width = right[pos] - a_pos
        t = (x - a_pos) / width if width > 0.0 else 0.0
        pos_at[i - first] = pos
        # + 0.0: no -0.0 (its bits compare as negative)
        t_at[i - first] = min(max(t, 0.0), 1.0) + 0.0


@numba.njit(cache=True, nogil=True)
def _piece_rows(y, left, right, par, rng, rows):
    t = np.empty(y.shape[0])
    _piece_positions(y, 0, y.shape[0], left, right, par, rows, t)
    for i in range(y.shape[0]):
        begin_row(rng, i)  # keyed releases: row i reads its own stream
        u = rng.random()
        rows[i] = 2 * rows[i] - ((float_bits(u) - float_bits(t[i])) >> 63)  # + 1 when u < t


def piece_rows(y, left, right, rng):
    """Row ``2 p + e`` of each label: ``p`` the last piece whose start
    ``left[p]`` is <= the label (clipped to the pieces), ``e`` = 1 (the
    piece's right end) with probability ``t``, the label's position in
    ``[left[p], right[p]]`` (0 on an empty piece): one uniform per label,
    the same stream as ``uniforms(rng, n) < t``. The end rows' mixture is the
    affine interpolation inside the piece (randomized quantization, 002)."""
    y = np.ascontiguousarray(y, dtype=np.float64)
    rows = np.empty(y.shape[0], dtype=np.int64)
    right = np.ascontiguousarray(right, dtype=np.float64)
    left, par = piece_lookup(left, right)
    kernel_for(_piece_rows, rng, y.shape[0])(y, left, right, par, rng, rows)
    return rows


def categorical_codes(codes, rng, tables):
    """An output index for each row index ``codes[i]``, drawn from the matrix
    the ``tables`` (:func:`categorical_tables`) were built from."""
    _, own, alias = unpack_cells(tables[1])
    n_out = int(max(own.max(), alias.max(), tables[2].max())) + 1
    return sample_rows(rng, np.arange(n_out, dtype=np.float64), codes=codes, tables=tables).astype(np.int64)
