"""The additive samplers' kernels restructured for speed read the digits of
their plain forms: the staircase bulk kernel (the offset digit read for
every bulk label, the offset of a cell by rejection) against a reference
written label by label, and the Gaussian envelope kernel (one rare branch
for the squeeze, the exponential outlined) against its loop as before."""

import inspect
import math

import numpy as np
import pytest

from skdp_label._kernels import _sampling as S
from skdp_label._kernels import _twin
from skdp_label.mechanisms.classic._noise import (
    gaussian_cell_table,
    laplace_cell_table,
    staircase_alias_table,
    staircase_cell_table,
)
from test_numerics import DIGIT, digits_used, scripted


def _cell_offset(rng, lam, log_l, squeeze):
    """The offset i in [0, L) of a cell, P(i) proportional to e^(-lam i):
    uniform from a digit's top log2 L bits, accepted when the other bits
    (and any further digits) are below e^(-lam i), at once below the squeeze;
    rejected: a fresh digit."""
    digit, first = _twin.twin(S._digit), _twin.twin(S._bernoulli_first)
    unit = 2 ** (53 - log_l)
    while True:
        e = int(digit(rng))
        offset, bits = e // unit, e % unit
        if bits < squeeze:
            return offset
        x = math.exp(-lam * offset) * unit
        if first(float(bits), float(math.floor(x)), x - math.floor(x), rng):
            return offset


def _one_pass_bulk(y, rng, granularity, c, bulk, records, pieces, clip, lo, hi):
    """:func:`S._staircase_additive_bulk` written as one pass, label by label,
    from the twins of its helpers (the order of digits the kernel must keep);
    ``pieces``: (starts, sizes) of a table of pieces, whose entry index
    ``records`` (:func:`S.alias_records`) picks: a power of two of values
    from the offset digit's top bits, any other length by rejection."""
    digit, pick, tail = _twin.twin(S._digit), _twin.twin(S._alias_pick), _twin.twin(S._staircase_tail)
    shift = _twin.twin(S._shift_on_grid)
    qd, frac, scale, m0, cell, _, squeeze, lam = (float(b) for b in bulk)
    half = (records.shape[0] // 3 - 1) // 2
    out = np.empty(y.shape[0])
    for i in range(y.shape[0]):
        d = digit(rng)
        z = math.nan
        if d <= qd:
            z = tail(d, qd, frac, c, m0, rng)
        if z != z:
            v = (d - qd) * scale
            if pieces is not None:
                j = int(pick(v, records))
                start, size = int(pieces[0][j]), int(pieces[1][j])
                e = int(digit(rng))
                if size & (size - 1) == 0:
                    z = float(start + e // (2**53 // size))
                else:
                    while e >= 2**53 - 2**53 % size:
                        e = int(digit(rng))
                    z = float(start + e % size)
            else:
                t = pick(v, records) - half
                z = t
                if cell > 1.0:  # read for t = 0 too
                    offset = _cell_offset(rng, lam, int(cell).bit_length() - 1, squeeze)
                    z = math.copysign(1.0 + cell * (abs(t) - 1.0) + offset, t) if t != 0.0 else 0.0
        out[i] = shift(float(y[i]), z, granularity, 1.0 / granularity, clip, lo, hi)
    return out


def _bulk_case(kind, reference=False):
    """(constants, bulk, records) of a table with many tail labels, for each
    kind of table; ``reference``: the table's :func:`S.alias_records` (of
    entry indices) also for tables of cells and of pieces, whose kernel
    reads :func:`S.cell_records` / :func:`S.piece_records` (entries' first
    values and signs or lengths), and the (starts, sizes) of the pieces."""
    pieces = None
    if kind == "values":
        lam, width, r = 0.05, 1, 1
        m0, tail, prob, alias = staircase_alias_table(lam, width, r, min_probability=1e-3)
        cell, squeeze = 1, 0
    elif kind == "cells":
        lam, width, r = 2.0**-11, 1, 1  # P(0) about 2.4e-4: a few zeros in 20,000 labels
        m0, tail, prob, alias, cell, squeeze = laplace_cell_table(lam, min_probability=1e-4, rtol=1e-6)
    else:
        # Pieces of at least 2**-7 of the mass: entries of 2**k values and 10
        # of another length (10% of the draws: the rare path runs often).
        lam, width, r = 0.8, 40, 12
        m0, tail, prob, alias, *pieces = staircase_cell_table(
            lam, width, r, min_probability=1e-2, piece_mass=2.0**-7)
        assert np.count_nonzero(pieces[1] & (pieces[1] - 1)) >= 10
        cell, squeeze = 0, 0
    bulk = S.bulk_constants(m0, tail, prob.shape[0], cell, lam, squeeze)
    assert tail > 0.001  # the exact tail runs inside the blocks
    if reference:
        return S.staircase_constants(lam, width, r), bulk, S.alias_records(prob, alias), pieces
    if cell > 1:
        records = S.cell_records(prob, alias, cell)
    elif cell == 0:
        records = S.piece_records(prob, alias, *pieces)
    else:
        records = S.alias_records(prob, alias)
    return S.staircase_constants(lam, width, r), bulk, records


@pytest.mark.parametrize("kind", ["values", "cells", "pieces"])
def test_bulk_kernel_reads_the_digits_of_one_pass(kind):
    # 20,000 labels: tails, ties, (cells) zeros and (pieces) entries of
    # lengths other than a power of two among them.
    case = _bulk_case(kind)
    y = np.random.default_rng(1).uniform(-50.0, 50.0, 20_000)
    args = (0.5, *_bulk_case(kind, reference=True), True, -40.0, 40.0)
    got = np.empty(y.shape[0])
    S._staircase_additive_bulk(y, np.random.default_rng(5), args[0], *case, True, -40.0, 40.0, got)
    ref = _one_pass_bulk(y, np.random.default_rng(5), *args)
    np.testing.assert_array_equal(got.view(np.int64), ref.view(np.int64))
    if kind == "cells":
        raw = np.empty(y.shape[0])
        S._staircase_additive_bulk(np.zeros_like(y), np.random.default_rng(5), 1.0, *case, False,
                                   0.0, 0.0, raw)
        assert 0 < np.count_nonzero(raw == 0.0) < 50 and not np.signbit(raw[raw == 0.0]).any()


def _digit_of_zero_cell(bulk, records):
    """A first digit that the cell table sends to its cell of 0."""
    qd, scale = bulk[0], bulk[2]
    half = (records.shape[0] // 3 - 1) // 2
    pick = _twin.twin(S._alias_pick)
    for d in qd + 1.0 + np.floor(np.arange(0.0, 1.0, 1 / 64) / scale + half / scale):
        if pick((d - qd) * scale, records) == half:
            return d
    raise AssertionError("no digit picks the cell of 0")


def _mutant_cell_records(prob, alias, cell):
    """:func:`S.cell_records` with the sign of an entry taken as copysign(1, t)
    (the cell of 0 signed +1, as if it were the first positive cell): its
    draws would come out as values of that cell instead of 0."""
    source = inspect.getsource(S.cell_records)
    assert source.count("np.sign(") == 5
    namespace = dict(vars(S), _copysign_one=lambda t: np.copysign(1.0, t))
    exec(source.replace("np.sign(", "_copysign_one("), namespace)
    return namespace["cell_records"](prob, alias, cell)


@pytest.mark.parametrize("kernel", ["compiled", "twin", "mutant"])
def test_the_cell_of_zero_reads_its_offset_digit_and_gives_zero(kernel):
    c, bulk, index_records, _ = _bulk_case("cells", reference=True)
    d = _digit_of_zero_cell(bulk, index_records)
    lam, cell = bulk[7], bulk[4]
    _, _, prob, alias, _, _ = laplace_cell_table(lam, min_probability=1e-4, rtol=1e-6)
    records = (_mutant_cell_records if kernel == "mutant" else S.cell_records)(prob, alias, cell)
    run = _twin.twin(S._staircase_additive_bulk) if kernel == "twin" else S._staircase_additive_bulk
    # Label 0: the cell of 0 (its offset digit read and dropped); label 1:
    # the next digit, far in the bulk (the first cell of the positive side).
    src = scripted([d, 7, bulk[0] + (index_records.shape[0] // 3 // 2 + 1.5) / bulk[2], 0, 0, 0])
    out = np.empty(2)
    run(np.zeros(2), src, 1.0, c, bulk, records, False, 0.0, 0.0, out)
    assert digits_used(src) == 4
    if kernel == "mutant":
        assert out[0] != 0.0  # caught
        return
    assert out[0] == 0.0 and not np.signbit(out[0])
    assert 1.0 <= out[1] <= bulk[4]  # the first positive cell


def _one_pass_gaussian(y, rng, granularity, g, records, squeeze, clip, lo, hi):
    """:func:`S._gaussian_additive` as before its restructuring (one loop, the
    squeeze and the exponential inline), from the twins of its helpers."""
    digit, pick = _twin.twin(S._digit), _twin.twin(S._alias_pick)
    tail, first = _twin.twin(S._gaussian_tail), _twin.twin(S._bernoulli_first)
    shift_on_grid = _twin.twin(S._shift_on_grid)
    qd, scale, half, cell, shift = g[0], g[2], g[3], g[4], int(g[5])
    unit = 1 << shift
    out = np.empty(y.shape[0])
    for i in range(y.shape[0]):
        while True:
            d = digit(rng)
            if d <= qd:
                z = tail(d, g, rng)
                if z == math.inf:
                    continue
                if z == z:
                    break
            t = pick((d - qd) * scale, records) - half
            e = int(digit(rng))  # also for cells of one value (offset 0)
            offset = e >> shift
            if t == 0.0:
                if offset < g[13]:  # L / K
                    z = 0.0
                    break
                continue
            m_first = 1.0 + cell * (abs(t) - 1.0)
            bits = e & (unit - 1)
            if bits + offset * int(squeeze[int(abs(t))]) >= int(g[12]):  # the linear squeeze
                x = math.exp(-(offset * (2.0 * m_first + offset)) * g[7]) * float(unit)
                xd = math.floor(x)
                if not first(float(bits), float(xd), x - xd, rng):
                    continue
            z = math.copysign(m_first + offset, t)
            break
        out[i] = shift_on_grid(float(y[i]), z, granularity, 1.0 / granularity, clip, lo, hi)
    return out


@pytest.mark.parametrize("sigma", [3.0, 40.0, 5000.0])
def test_gaussian_kernel_reads_the_digits_of_the_plain_loop(sigma):
    g, prob, alias, squeeze = gaussian_cell_table(sigma)
    records = S.alias_records(prob, alias)
    y = np.random.default_rng(2).uniform(-30.0, 30.0, 5_000)
    got = np.empty(y.shape[0])
    S._gaussian_additive(y, np.random.default_rng(8), 0.25, g,
                         S.envelope_records(prob, alias, g[4], squeeze), True, -20.0, 20.0, got)
    ref = _one_pass_gaussian(y, np.random.default_rng(8), 0.25, g, records, squeeze, True, -20.0, 20.0)
    np.testing.assert_array_equal(got.view(np.int64), ref.view(np.int64))


def test_gaussian_rare_branch_rejects_and_accepts_as_the_squeeze_says():
    # The cell of 0 (L = 128 values, envelope K = 64) accepts the offsets
    # below L / K = 2; a far cell's bits above its linear squeeze go through
    # the exact Bernoulli of the exponential.
    g, prob, alias, squeeze = gaussian_cell_table(5000.0)
    assert g[4] == 128 and g[13] == 2
    rare = S._gaussian_cell_rare
    shift = int(g[5])
    unit_f = float(2**shift)
    for offset, value in [(0, 0.0), (1, 0.0), (2, math.inf), (3, math.inf)]:
        assert rare(0.0, offset, 5, 1.0, g[7], unit_f, g[13], np.random.default_rng(0)) == value
    t = float(len(squeeze) - 1)
    m_first = 1.0 + g[4] * (t - 1.0)
    offset = int(g[4]) - 1
    accept = math.exp(-(offset * (2.0 * m_first + offset)) * g[7])
    low, high = int(accept * unit_f) - 1, int(accept * unit_f) + 1
    assert low + offset * squeeze[int(t)] >= g[12]  # the branch the squeeze sends here
    rng = np.random.default_rng(0)
    assert rare(-t, offset, low, m_first, g[7], unit_f, g[13], rng) == -(m_first + offset)
    assert rare(t, offset, high, m_first, g[7], unit_f, g[13], rng) == math.inf
    assert DIGIT == 2.0**53


def _offset_counts(lam, log_l, squeeze, n, seed):
    """Counts of the offsets of n draws of the bulk kernel from a table of
    three equal cells (t = -1, 0, 1; no tail): |z| - 1 for t != 0."""
    from skdp_label.mechanisms.classic._noise import alias_table

    prob, alias = alias_table(np.ones(3) / 3)
    bulk = S.bulk_constants(1 + 2**log_l, 0.0, 3, 2**log_l, lam, squeeze)
    out = np.empty(n)
    S._staircase_additive_bulk(np.zeros(n), np.random.default_rng(seed), 1.0,
                               S.staircase_constants(lam, 1, 1), bulk,
                               S.cell_records(prob, alias, 2**log_l), False, 0.0, 0.0, out)
    z = np.abs(out[out != 0.0]) - 1.0
    assert np.all(z == np.rint(z)) and z.min() >= 0 and z.max() < 2**log_l
    return np.bincount(z.astype(np.int64), minlength=2**log_l)


@pytest.mark.parametrize("mutant", [False, True])
def test_cell_offsets_follow_the_exact_tilt(mutant):
    """A cell of 64 values tilted by e^(-lam i) with lam L = 1/2 (the tables
    use lam L <= 2**-6; a steep tilt exercises the exact Bernoulli on most
    draws): chi-square against P(i) proportional to e^(-lam i). Mutation: a
    squeeze that accepts every offset (uniform offsets) is caught."""
    from scipy import stats

    lam, log_l = 1.0 / 128.0, 6
    unit = 2 ** (53 - log_l)
    squeeze = unit if mutant else math.floor(math.exp(-lam * 63) * unit * (1 - 1e-12))
    counts = _offset_counts(lam, log_l, squeeze, 120_000, 4)
    p = np.exp(-lam * np.arange(64))
    p /= p.sum()
    pvalue = stats.chisquare(counts, p * counts.sum()).pvalue
    assert (pvalue < 1e-6) if mutant else (pvalue > 1e-4)
