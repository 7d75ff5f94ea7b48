"""Tables of the interval sampler: one digit a draw for two-level matrices.

The unbiased family's matrices (``OptimalUnbiased``, ``BiasVarianceRandomizer``)
have columns of two levels: column j is ``a_j`` in most rows and
``a_j + b_j`` (``b_j = (e^eps' - 1) a_j``) in a contiguous *window* of
columns of each row, with at most the window's two end cells in between:

    P(j | i) = a_j + b_j h_i(j),   h_i = 1 inside [l_i, r_i], in (0, 1] at its ends, 0 outside.

The low mass ``L = sum_j a_j`` is the same for every row. So one digit can
pick the output from tables shared by all rows (a few tens of kilobytes, in
the cache, where the per-row alias tables of :func:`._sampling.categorical_tables`
are megabytes): all probabilities are counted in *digit units* (2**-53), and
the cumulative sums of ``a`` (the low cells) then of ``b`` (the high cells)
are integer boundaries ``C`` of one array of ``2 n`` cells. A low digit
(``d < Ld``, ``Ld ~ L 2**53``) is its own position ``t = d``; a high digit is
shifted into the row's window, ``t = d + start_i``: the row's high digits are
a run of consecutive positions over its window, its end cells in part. The
top ``qd_i`` digits go to the row's exact tail. The cell of ``t`` is found
through a guide table (Chen and Asau: for each bucket of ``2**shift``
positions, the last cell starting at or before it and the next cell's start;
one compare, rarely a few steps). All of it is integer arithmetic on exact
integers, so the law a row samples is the count of positions each cell
receives: :func:`interval_law` computes it from the tables, and
:func:`interval_tables` keeps them only when every positive entry is within
``rtol`` (1e-9) relative of the matrix.

Entries the counting cannot meet (a tiny ``a_j``: a digit is 2**-53, an
entry of 1e-13 is a thousandth of one) go, with their whole column, to the
exact tail (the exponent groups of :func:`._sampling.exponent_groups`,
reached by an exact Bernoulli of the row's tail mass on the same digit, as
:func:`._sampling.categorical_tables` does), and so does the excess of a
row's high cells away from its window (a second run, e.g. one isolated high
cell). Nothing is approximated silently: a matrix without the structure, or
whose tail would be large, gets None (the generic per-row tables).
"""

import math

import numba
import numpy as np

__all__ = ["IntervalTables", "interval_cell", "interval_law", "interval_tables"]

_DIGIT_INT = 2**53
_RTOL = 1e-9
# An entry is in its row's window when it exceeds the column's low level by
# more than this (relative): below, the difference is float noise of the fit.
_WINDOW_RTOL = 1e-12
# Largest tail mass of a row (the exact tail draws are slow: a row drawing
# this often from it costs a few times more); more: None.
_MAX_TAIL = 2.0**-6
# Guide buckets per cell, about (a power of two of digits each).
_GUIDE_PER_CELL = 2
# Positions stay below 2**62 (int64 arithmetic in the kernel).
_MAX_POSITION = 2**62


class IntervalTables:
    """The tables of the ``'interval'`` draw of :func:`._sampling.sample_rows`
    (built by :func:`interval_tables`).

    Attributes
    ----------
    heads : ndarray of float64, shape (n_rows, 3)
        Per row: tail digit threshold ``qd`` (the top ``qd`` digits, read
        from the top: ``2**53 - 1 - d < qd``), its fraction, and the shift
        ``start`` of its high digits (``t = d + start`` for ``d >= Ld``), an
        integer held exactly in a float64.
    table : ndarray of int64
        The cells' boundaries ``C`` (``2 n_out + 1`` of them, then a sentinel)
        followed by the guide's records (for each bucket of ``2**shift``
        positions, the last cell starting at or before it and the next
        cell's start). Positions reach 2**62.
    constants : ndarray of float64
        ``(n_out, guide offset in table, guide shift, Ld, top)``: ``top`` is
        ``2**53 - 1`` minus the largest ``qd`` (digits below it reach no tail).
    tail : tuple
        :func:`._sampling.exponent_groups` tables of the rows' tails (output
        indices in ``order``).
    tail_mass : ndarray of float64, shape (n_rows,)
        Each row's tail mass.
    windows : ndarray of int64, shape (n_rows, 2)
        Each row's first and last window column (detected; for inspection).
    bound : ndarray of float64, shape (n_rows, n_out)
        Bound of |sampled - matrix| / matrix of each positive entry (0 where
        the matrix is 0), from :func:`interval_law`.
    """

    def __init__(self, heads, table, constants, tail, tail_mass, windows, bound=None):
        self.heads, self.table, self.constants = heads, table, constants
        self.tail, self.tail_mass, self.windows, self.bound = tail, tail_mass, windows, bound

    @property
    def n_out(self):
        return int(self.constants[0])

    @property
    def boundaries(self):
        return self.table[: 2 * self.n_out + 1]

    @property
    def guide(self):
        """The guide's records (first cell, next cell's start), one a bucket."""
        return self.table[int(self.constants[1]):].reshape(-1, 2)

    @property
    def starts(self):
        """Each row's shift of its high digits (``t = d + start``)."""
        return self.heads[:, 2].astype(np.int64)


@numba.njit(cache=True, nogil=True, inline="always")
def interval_cell(t, flat, guide_at, shift):
    """The cell of position ``t`` (:class:`IntervalTables`: ``flat`` its
    ``table``, ``guide_at`` and ``shift`` its constants): low cells are
    outputs ``0 .. n_out - 1``, high cells ``n_out .. 2 n_out - 1``.

    A guide record holds the last cell starting at or before its bucket and
    the start of the next cell: one load and a compare find the cell (a
    bucket with more boundaries, rare, steps on in a loop the branch
    predictor passes)."""
    at = guide_at + np.uint64(2 * (t >> shift))
    c = flat[at] + 1 + ((t - flat[at + np.uint64(1)]) >> 63)
    while flat[np.uint64(c + 1)] <= t:  # a bucket with more boundaries (rare)
        c += 1
    return c


def _tail_tables(tail_values, tail_mass):
    """Exponent-group tables of each row's tail entries ``tail_values``
    (output indices in ``order``)."""
    from ._sampling import exponent_groups

    n_rows = tail_values.shape[0]
    counts = np.count_nonzero(tail_values, axis=1)
    width = max(1, int(counts.max()))
    rows = np.zeros((n_rows, width))
    col_idx = np.zeros((n_rows, width), dtype=np.int64)
    for i in range(n_rows):
        cols = np.flatnonzero(tail_values[i])
        if cols.size:
            rows[i, : cols.size] = tail_values[i, cols] / tail_mass[i]
            col_idx[i, : cols.size] = cols
        else:
            rows[i, 0] = 1.0  # never reached: Bernoulli(0)
    order, *groups = exponent_groups(rows)
    return (np.take_along_axis(col_idx, order, axis=1), *groups)


def _boundaries(masses):
    """Integer cumulative boundaries (in digits) of ``masses`` (probabilities):
    rounded prefix sums (any rounding would do: the law is counted from them)."""
    prefix = np.concatenate([[0.0], np.cumsum(np.asarray(masses, np.longdouble) * _DIGIT_INT)])
    return np.rint(prefix).astype(np.int64)


def _windows(excess, p, tail_columns):
    """(first, last) window column of each row and the excess sampled by the
    rows' tails instead, or None when a row has no high entry.

    A row's high entries (above the column's low level, outside the tail
    columns) form runs among the columns outside the tail; the run of the
    largest excess is the window, any other run's excess goes to the row's
    tail (an isolated high cell away from the window: some bias-variance
    fits have one)."""
    high = (excess > _WINDOW_RTOL * p) & ~tail_columns
    kept = np.flatnonzero(~tail_columns)
    n_rows = p.shape[0]
    firsts, lasts = np.zeros(n_rows, np.int64), np.zeros(n_rows, np.int64)
    extra = np.zeros(p.shape)
    for i in range(n_rows):
        at = np.flatnonzero(high[i, kept])
        if at.size == 0:
            return None
        runs = np.split(kept[at], np.flatnonzero(np.diff(at) > 1) + 1)
        best = max(range(len(runs)), key=lambda k: math.fsum(excess[i, runs[k]]))
        firsts[i], lasts[i] = runs[best][0], runs[best][-1]
        for k, run in enumerate(runs):
            if k != best:
                extra[i, run] = excess[i, run]
    return firsts, lasts, extra


def _build(p, tail_columns):
    """IntervalTables of the row-normalised matrix ``p`` with the columns
    ``tail_columns`` in the exact tail, or None (see :func:`interval_tables`)."""
    from ._sampling import split_probability

    n_rows, n_out = p.shape
    low = np.where(tail_columns, 0.0, p.min(axis=0))
    excess = np.where(tail_columns, 0.0, p - low)
    windows = _windows(excess, p, tail_columns)
    if windows is None:
        return None
    firsts, lasts, extra = windows
    high = np.max(excess - extra, axis=0)
    tail_values = np.where(tail_columns, p, extra)
    tail_mass = np.array([math.fsum(row) for row in tail_values])
    if tail_mass.max() > _MAX_TAIL:
        return None
    c_low = _boundaries(low)
    ld = int(c_low[-1])
    c_high = _boundaries(high)
    if ld == 0 or ld + int(c_high[-1]) >= _MAX_POSITION:
        return None
    heads = np.zeros((n_rows, 3))
    for i in range(n_rows):
        qd, frac = split_probability(tail_mass[i])
        l, r = int(firsts[i]), int(lasts[i])
        n_high = _DIGIT_INT - int(qd) - ld  # digits (positions) of the high part
        width_l, width_r = int(c_high[l + 1] - c_high[l]), int(c_high[r + 1] - c_high[r])
        if l == r:
            start = int(c_high[l]) + (width_l - n_high) // 2
        else:
            # Ideal end pieces (digits); the mismatch of the total (rounding, a
            # row sum off 1: a few digits) is shared between them in proportion,
            # keeping the run inside the window's cells where it fits.
            left = (p[i, l] - low[l]) * _DIGIT_INT
            right = (p[i, r] - low[r]) * _DIGIT_INT
            interior = int(c_high[r] - c_high[l + 1])
            left += (n_high - (left + interior + right)) * left / (left + right)
            left = max(min(round(left), width_l, n_high - interior), n_high - interior - width_r, 0)
            start = int(c_high[l + 1]) - left
        # The run stays among the high cells (the kernel's cells end there).
        start = min(max(start, 0), int(c_high[-1]) - n_high)
        if start < 0:
            return None
        # A float64 (the kernel reads it from the heads): rounded down to one
        # beyond 2**53 (spacing 2, 4, ... digits, counted in the law).
        exact = np.float64(start)
        if int(exact) > start:
            exact = np.nextafter(exact, 0.0)
        # High digit ld + k is position ld + start + k: t = d + start.
        heads[i] = qd, frac, exact
    # Boundaries of all 2 n cells:
    boundaries = np.concatenate([c_low, ld + c_high[1:]])
    last = int(boundaries[-1])
    shift = max(0, int(last // (_GUIDE_PER_CELL * 2 * n_out)).bit_length())
    n_guide = (last >> shift) + 1
    buckets = np.arange(n_guide, dtype=np.int64) << shift
    # The last cell whose start is <= the bucket's start (cells of width 0
    # are skipped by the kernel's steps).
    guide = np.clip(np.searchsorted(boundaries, buckets, side="right") - 1, 0, 2 * n_out - 1)
    sentinel = np.iinfo(np.int64).max
    with_sentinel = np.append(boundaries, sentinel)
    records = np.stack([guide, with_sentinel[guide + 1]], axis=1).reshape(-1)
    table = np.concatenate([with_sentinel, records]).astype(np.int64)
    top = _DIGIT_INT - 1 - int(heads[:, 0].max())
    constants = np.array([n_out, boundaries.size + 1, shift, ld, top], dtype=np.float64)
    tables = IntervalTables(heads, table, constants, _tail_tables(tail_values, tail_mass),
                            tail_mass, np.stack([firsts, lasts], axis=1))
    return tables


def interval_law(tables):
    """(law, bound): the matrix the tables sample (rows sum to 1), counted
    exactly from them, and a bound of its error from the counting's own
    float rounding and the tail's exponent groups (absolute, per entry).

    Row i's digit ``d`` is its position ``t = d`` for ``d < Ld`` (the low
    cells), ``t = d + start_i`` for ``Ld <= d < 2**53 - qd_i`` (the high
    cells); the top ``qd_i`` digits go to the tail, with its exponent
    groups' law, and so does the next one (the tie) with probability
    ``frac_i``. A cell's probability is the count of its positions.
    """
    from ._sampling import _DIGIT

    heads = tables.heads
    n_rows, n_out = heads.shape[0], tables.n_out
    c = tables.boundaries
    ld = int(c[n_out])
    qd = heads[:, 0].astype(np.int64)
    frac = heads[:, 1]
    start = tables.starts
    # Low cells: positions [0, ld), the same for every row.
    counts = np.broadcast_to(np.diff(c[: n_out + 1]), (n_rows, n_out)).copy()
    # High cells: positions [t0, t1) (integers below 2**62).
    t0 = (ld + start)[:, None]
    t1 = (_DIGIT_INT - qd + start)[:, None]
    k = np.minimum(t1, c[None, n_out + 1:]) - np.maximum(t0, c[None, n_out:-1])
    counts += np.maximum(k, 0)
    law = counts.astype(np.float64) / _DIGIT  # exact to float rounding (2**-53 relative)
    # The tie digit (the last high one) keeps weight 1 - frac.
    last = np.searchsorted(c, t1[:, 0] - 1, side="right") - 1 - n_out
    law[np.arange(n_rows), last] -= frac / _DIGIT
    # The tail: mass (qd + frac) / 2**53, exactly, spread by its groups.
    order, cdf, group_end, group_q, n_groups = tables.tail
    tail_mass = (qd + frac) / _DIGIT
    weights = np.zeros((n_rows, n_out))
    for i in range(n_rows):
        if tail_mass[i] > 0.0:
            ends = group_end[i, : n_groups[i]]
            starts = np.concatenate([[0], ends[:-1]])
            pos = np.zeros(order.shape[1])
            for s, e in zip(starts, ends):
                pos[s:e] = np.diff(np.concatenate([[0.0], cdf[i, s:e]]))
            # Group masses: the stored stop/move-on probabilities, replayed.
            remaining = 1.0
            for g, (s, e) in enumerate(zip(starts, ends)):
                q = group_q[i, g]
                stop = 1.0 if g == n_groups[i] - 1 else (q if q >= 0.0 else 1.0 + q)
                pos[s:e] *= remaining * stop
                remaining *= 1.0 - stop
            np.add.at(weights[i], order[i, : pos.size], pos)
    law += weights * tail_mass[:, None]
    # Bound: float rounding of the count -> probability conversion and sums
    # (a few 2**-53 relative), the tail's groups ((G (n + 3) + 4 n) 2**-53
    # relative, docs/sampling.md; 1 - q of a move-on replayed above: as much).
    n_tail = max(1, order.shape[1])
    g_max = max(1, int(n_groups.max()))
    bound = law * (8.0 / _DIGIT) + weights * tail_mass[:, None] * (
        (2 * g_max * (n_tail + 3) + 4 * n_tail) / _DIGIT
    )
    return law, bound


def interval_tables(matrix, rtol=_RTOL):
    """:class:`IntervalTables` of a two-level transition matrix, or None.

    Detects the structure from the (public) matrix alone: each column's low
    level is its minimum over the rows; each row's entries above it must be
    contiguous among the columns outside the tail. The sampled law is then
    counted from the tables (:func:`interval_law`) and every positive entry
    must be within ``rtol`` relative of the row-normalised matrix, bound
    included; the columns of entries that fail go, whole, to the exact tail,
    and the tables are rebuilt (a few rounds). None when the structure is
    absent, a row's tail mass would exceed 2**-10, or an entry still fails.
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[1] < 2 or not np.all(np.isfinite(matrix)):
        return None
    if np.any(matrix < 0.0) or matrix.shape[1] >= 2**20:  # l | r << 32 exact in a float64
        return None
    p = matrix / np.array([math.fsum(row) for row in matrix])[:, None]
    tail_columns = np.zeros(p.shape[1], dtype=bool)
    for _ in range(8):
        tables = _build(p, tail_columns)
        if tables is None:
            return None
        law, bound = interval_law(tables)
        positive = p > 0.0
        if np.any(law[~positive] != 0.0):  # a zero entry sampled: never
            tail_columns |= np.any(~positive & (law != 0.0), axis=0)
            continue
        rel = np.zeros_like(p)
        rel[positive] = (np.abs(law - p) + bound)[positive] / p[positive]
        bad = np.any(rel > rtol, axis=0)
        if not bad.any():
            tables.bound = rel
            return tables
        tail_columns |= bad
    return None
