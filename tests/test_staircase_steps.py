"""The piece tables of the staircase on fine grids (the continuous
``Staircase``'s bulk fast path, ``staircase_cell_table``): every entry is a
piece of a step, equal-weight values, drawn uniformly inside: from a digit's
top bits for a power of two of values, by rejection for the one entry a
step may have of another length.

* The table reproduces every value's probability to 1e-9 relative and its
  tail is the exact mass beyond m0 (checked value by value at the
  mechanism's own grid, ~8e5 values a block); its entries are pieces of at
  least the piece mass or whole steps, at most one a step not a power of
  two, few enough for the caches.
* Draws match the exact staircase pmf, bulk and tail (chi-squared, with a
  table cut early so that the exact tail runs often).
* Mutations are caught: steps one value too long, or block 1's high steps
  with block 0's weight (an off-by-one in the block power).
"""

import inspect
import math

import numba
import numpy as np
import pytest

from _audit import chi_square_pvalue
from test_numerics import residue_digits
from skdp_label._kernels import _sampling as S
from skdp_label.mechanisms import Staircase
from skdp_label.mechanisms.classic._noise import (
    alias_table,
    alias_table_probabilities,
    staircase_cell_table,
    staircase_pmf,
    staircase_tail,
)


@pytest.mark.parametrize("eps", [0.3, 1.0, 5.0])
def test_step_table_is_the_staircase_bulk(eps):
    mech = Staircase(eps, bounds=(0.0, 400.0)).fit([0.0])
    lam, width, r = mech._staircase(mech.sensitivity_units_)
    m0, tail, prob, alias, starts, sizes = staircase_cell_table(lam, width, r)
    assert m0 % width == 0 and m0 >= 2 * width
    np.testing.assert_allclose(tail, 2 * staircase_tail(np.array([m0]), lam, width, r)[0], rtol=1e-12)
    implied = alias_table_probabilities(prob, alias) * (1.0 - tail)
    for j in range(prob.shape[0]):
        ends = np.array([starts[j], starts[j] + sizes[j] - 1])
        exact = staircase_pmf(ends, lam, width, r)
        assert exact[0] == exact[1]  # one weight a step
        assert implied[j] / sizes[j] == pytest.approx(exact[0], rel=1e-9)
    # The pieces tile -(m0 - 1), ..., m0 - 1 exactly: sizes add up, no overlap.
    assert sizes.sum() == 2 * m0 - 1
    order = np.argsort(starts)
    np.testing.assert_array_equal(starts[order][1:], (starts + sizes)[order][:-1])
    assert starts.min() == -(m0 - 1)
    # Few entries (the table stays in the caches: 56 bytes an entry), each a
    # piece of at least 2**-20 of the mass or a whole step (the far blocks'),
    # and few of a length other than a power of two (the kernel's rare path:
    # under 0.2% of the draws).
    assert prob.shape[0] <= 2000
    steps = staircase_cell_table(lam, width, r, piece_mass=2.0)  # whole steps: one entry each
    step_of = np.searchsorted(steps[4], starts, sorter=np.argsort(steps[4]), side="right") - 1
    step_of = np.argsort(steps[4])[step_of]
    whole = sizes == steps[5][step_of]
    assert np.all((implied >= 2.0**-20 * (1 - 1e-9)) | whole)
    other = sizes & (sizes - 1) != 0
    assert np.bincount(step_of[other], minlength=steps[4].shape[0]).max() <= 1
    assert implied[other].sum() < 2e-3
    assert other.sum() < prob.shape[0] / 2  # most entries are powers of two


@pytest.mark.parametrize("eps", [0.01, 0.02])
def test_small_epsilon_tables_keep_the_rare_path_rare(eps):
    # Thousands of steps (blocks decay slowly): a cap of 4,096 entries left
    # half of the draws at eps = 0.01 in entries of other lengths (the rare
    # path, twice the time); 16,384 keeps them under 1%, still tiling exactly.
    mech = Staircase(eps, bounds=(0.0, 400.0)).fit([0.0])
    m0, tail, prob, alias, starts, sizes = staircase_cell_table(
        *mech._staircase(mech.sensitivity_units_))
    assert prob.shape[0] <= 16384 and sizes.sum() == 2 * m0 - 1
    other = sizes & (sizes - 1) != 0
    assert alias_table_probabilities(prob, alias)[other].sum() < 0.01


def test_tiny_epsilon_tables_keep_whole_steps():
    # eps = 0.002: pieces would leave 57% of the mass in entries of other
    # lengths (the kernel's branch on them a coin flip): whole steps instead,
    # the same table as with pieces too heavy to cut (piece_mass 2).
    mech = Staircase(0.002, bounds=(0.0, 400.0)).fit([0.0])
    args = mech._staircase(mech.sensitivity_units_)
    table = staircase_cell_table(*args)
    whole = staircase_cell_table(*args, piece_mass=2.0)
    for a, b in zip(table, whole):
        np.testing.assert_array_equal(a, b)
    assert np.count_nonzero(table[5] & (table[5] - 1)) > 0.9 * table[5].shape[0]


SMALL = (0.7, 40, 13)  # lam, width, r: values up to a few hundred, pmf testable value by value


def _step_noise(n, seed, table, lam=SMALL[0], width=SMALL[1], r=SMALL[2]):
    m0, tail, prob, alias, starts, sizes = table
    return S.staircase_additive_bulk(
        np.zeros(n), np.random.default_rng(seed), 1.0, S.staircase_constants(lam, width, r),
        S.bulk_constants(m0, tail, prob.shape[0], cell=0), prob, alias, False, 0.0, 0.0,
        pieces=(starts, sizes),
    )


def _pvalue(noise, lam=SMALL[0], width=SMALL[1], r=SMALL[2]):
    z = np.arange(-2500, 2501)
    p = staircase_pmf(z, lam, width, r)
    assert p.sum() > 1 - 1e-12
    assert np.all(np.abs(noise) <= 2500)
    return chi_square_pvalue(noise, z, p / p.sum())


@pytest.mark.parametrize("piece_mass", [2.0**-20, 2.0**-6])
def test_step_sampler_matches_the_staircase_including_tails(piece_mass):
    # 3 blocks: a fat tail; pieces of single values up, or (2**-6) with
    # entries of other lengths drawn on the rare path, 30% of the draws.
    table = staircase_cell_table(*SMALL, min_probability=0.03, piece_mass=piece_mass)
    other = table[5] & (table[5] - 1) != 0
    assert other.any() == (piece_mass > 2.0**-20)
    noise = _step_noise(200_000, 4, table)
    assert np.all(noise == np.rint(noise))
    assert (np.abs(noise) >= table[0]).mean() > 0.05  # the exact tail ran too
    assert _pvalue(noise) > 1e-4


def test_step_sampler_audit_catches_wrong_steps():
    m0, tail, prob, alias, starts, sizes = staircase_cell_table(*SMALL, min_probability=0.03)
    longer = _step_noise(200_000, 4, (m0, tail, prob, alias, starts, sizes + 1))
    assert _pvalue(longer) < 1e-6
    # Off by one in the block power: block 1's high steps (both signs, all
    # their pieces) get block 0's weight.
    width, r = SMALL[1], SMALL[2]
    high = [j for j in range(sizes.shape[0])
            if width <= starts[j] < width + r or -(width + r - 1) <= starts[j] <= -width]
    assert sizes[high].sum() == 2 * r
    masses = alias_table_probabilities(prob, alias)
    masses[high] *= math.exp(SMALL[0])
    broken = _step_noise(200_000, 4, (m0, tail, *alias_table(masses), starts, sizes))
    assert _pvalue(broken) < 1e-6


def test_no_step_table_without_blocks_beyond_the_first():
    assert staircase_cell_table(5.0, 40, 13, min_probability=0.5) is None
    assert staircase_cell_table(0.7, 40, 13, rtol=1e-18) is None  # bound not met: exact sampler


def test_staircase_mechanism_uses_the_steps_and_keeps_its_noise_law():
    mech = Staircase(1.0, bounds=(0.0, 1.0), clip=False).fit([0.0])
    noise = mech.transform(np.zeros(50_000)) / mech.granularity_
    assert mech._alias_table[1][-1] is not None  # the step table was built and used
    lam, width, r = mech._staircase(mech.sensitivity_units_)
    # P(|Z| in block k) = block mass: compare the block counts with the exact law.
    blocks = np.minimum(np.abs(noise) // width, 6).astype(np.int64)
    edges = np.arange(7) * width
    tails = staircase_tail(edges, lam, width, r) * 2
    tails[0] = 1.0
    p = np.append(-np.diff(tails), tails[-1])
    assert chi_square_pvalue(blocks, np.arange(7), p) > 1e-4
    assert math.isclose((noise > 0).mean(), 0.5, abs_tol=0.01)


@numba.njit
def _seven_column_picks(v, records, out):
    """Through the kernels' reads (compiled): for each v, the picked entry's
    first value, fourth column pair and sixth column pair of 7-column records
    (:func:`S.piece_records`: start, m / 2**53, m; :func:`S.envelope_records`:
    first value, sign, squeeze slope)."""
    for i in range(v.shape[0]):
        at, keep, first, fourth = S._cell_pick(v[i], records, 7)
        out[i, 0], out[i, 1] = first, fourth
        out[i, 2] = records[at + np.uint64(5)] + keep * records[at + np.uint64(6)]


def test_step_offset_is_the_integer_modulo_below_the_largest_multiple():
    """The rare path's value inside an entry of m values, m not a power of
    two (:func:`S._step_offset`): ``e mod m`` for a digit below the largest
    multiple of m in 2**53 (the ends of the range, around multiples of m),
    compiled and in the twin, for lengths up to 2**52 + 1 and the mechanism's
    own; a digit at or above it reads fresh digits until one is below (the
    first used: exactly uniform). Mutation: the modulo of a rejected digit
    (no rejection) is caught."""
    import numba

    from skdp_label._kernels import _twin
    from test_numerics import digits_used, scripted

    @numba.njit
    def offsets(d, m, rng, out):
        for i in range(d.shape[0]):
            out[i] = S._step_offset(d[i], m, rng)  # rng never read: every digit kept

    source = inspect.getsource(S._step_offset.py_func)
    assert source.count("while np.int64(e) >= limit:") == 1
    namespace = dict(vars(S))
    source = source.replace("@numba.njit(cache=True, nogil=True)\n", "")  # interpreted
    exec(source.replace("while np.int64(e) >= limit:", "while False:"), namespace)
    mutant = namespace["_step_offset"]
    mech = Staircase(1.0, bounds=(0.0, 400.0)).fit([0.0])
    *_, sizes = staircase_cell_table(*mech._staircase(mech.sensitivity_units_))
    own = [int(m) for m in np.unique(sizes[sizes & (sizes - 1) != 0])[:3]]
    assert own
    gen = np.random.default_rng(0)
    for m in [3, 7, 99, 255, 2**20 + 1, *own, 2**40 - 3, 2**52 + 1]:
        limit = 2**53 - 2**53 % m
        d = residue_digits(m, gen)
        d = d[d < limit]
        out = np.empty(d.shape[0])
        src = np.random.default_rng(1)
        offsets(d, float(m), src, out)
        assert src.bit_generator.state == np.random.default_rng(1).bit_generator.state
        np.testing.assert_array_equal(out, d.astype(np.int64) % np.int64(m))
        twin = [_twin.twin(S._step_offset)(x, float(m), src) for x in d[:300]]
        np.testing.assert_array_equal(twin, out[:300])
        for kernel in (S._step_offset, _twin.twin(S._step_offset), mutant):
            src = scripted([limit, 2**53 - 1, 12346])
            got = kernel(float(src.random() * 2**53), float(m), src)
            # the two rejected, then 12346 (the mutant: limit mod m = 0 at once)
            caught = got != 12346 % m or digits_used(src) != 3
            assert caught == (kernel is mutant)


def test_piece_records_select_each_entrys_start_unit_and_length():
    """:func:`S.piece_records` gives, through the kernel's reads (compiled),
    for every float around every threshold of the mechanism's own tables,
    the picked entry's first value, m / 2**53 (0 when m is not a power of
    two) and m, bit for bit, the entry being the one :func:`S._alias_pick`
    picks; an entry's value s + floor(e m / 2**53) is s plus the digit's top
    log2 m bits. Mutation: records whose differences were rounded (float32)
    are caught."""
    import numba

    from skdp_label._kernels import _twin

    wrong = 0
    for eps in (0.3, 5.0):
        mech = Staircase(eps, bounds=(0.0, 400.0)).fit([0.0])
        _, _, prob, alias, starts, sizes = staircase_cell_table(
            *mech._staircase(mech.sensitivity_units_))
        _, _, v = _pick_probes(prob, np.random.default_rng(8))
        j = np.array([_twin.twin(S._alias_pick)(x, S.alias_records(prob, alias)) for x in v])
        j = j.astype(np.int64)
        power = sizes[j] & (sizes[j] - 1) == 0
        expected = np.stack([starts[j], np.where(power, sizes[j] / 2.0**53, 0.0), sizes[j]], 1)
        records = S.piece_records(prob, alias, starts, sizes)
        out = np.empty((v.shape[0], 3))
        _seven_column_picks(v, records, out)
        np.testing.assert_array_equal(out, expected.astype(np.float64))
        e = np.random.default_rng(9).integers(0, 2**53, v.shape[0])
        top = e >> (53 - np.log2(np.where(power, sizes[j], 1)).astype(np.int64))
        value = out[:, 0] + np.floor(e.astype(np.float64) * out[:, 1])
        np.testing.assert_array_equal(value[power], (starts[j] + top)[power])
        _seven_column_picks(v, records.astype(np.float32).astype(np.float64), out)
        wrong += np.count_nonzero(out != expected)
    assert wrong > 0
    with pytest.raises(ValueError, match="2\\*\\*52"):
        S.piece_records(np.ones(2), np.arange(2), np.array([0, 2**52 - 1]), np.array([1, 2]))


@pytest.mark.parametrize("table", ["values", "pieces"])
@pytest.mark.parametrize("compiled", [True, False])
def test_bulk_first_digit_around_the_tail_threshold(table, compiled):
    """The bulk kernel's first digit d against the tail threshold qd (the
    rare path is a separate helper that returns nan for the bulk): d < qd is
    the tail (|z| >= m0), d = qd reads the tie digit (below the fraction's
    digit: tail; above: the bulk at the table's first cell, using only those
    two digits for a value table), d = qd + 1 is the bulk; compiled and in
    the twin, the same digits and values."""
    from skdp_label._kernels import _twin
    from skdp_label.mechanisms.classic._noise import staircase_alias_table
    from test_numerics import digits_used, scripted

    lam, width, r = (0.05, 1, 1) if table == "values" else (0.8, 40, 12)
    if table == "values":
        m0, tail, prob, alias = staircase_alias_table(lam, width, r)
        records = S.alias_records(prob, alias)
    else:
        m0, tail, prob, alias, starts, sizes = staircase_cell_table(
            lam, width, r, min_probability=1e-4
        )
        records = S.piece_records(prob, alias, starts, sizes)
    bulk = S.bulk_constants(m0, tail, prob.shape[0], 1 if table == "values" else 0)
    qd, frac = int(bulk[0]), bulk[1]
    tie = math.floor(frac * 2**53)
    assert qd > 0 and tie > 0
    first = (np.int64(alias[0]) if prob[0] <= 0.0 else 0) - (prob.shape[0] - 1) // 2
    kernel = S._staircase_additive_bulk if compiled else _twin.twin(S._staircase_additive_bulk)
    c = S.staircase_constants(lam, width, r)
    for digits, in_tail in [
        ([qd - 1], True), ([qd, tie - 1], True), ([qd, tie + 1], False), ([qd + 1], False),
    ]:
        src = scripted(digits + [12345] * 40)
        out = np.empty(1)
        kernel(np.zeros(1), src, 1.0, c, bulk, records, False, 0.0, 0.0, out)
        assert (abs(out[0]) >= m0) == in_tail, digits
        if table == "values" and digits == [qd, tie + 1]:
            assert out[0] == first and digits_used(src) == 2
        if table == "values" and digits == [qd + 1]:
            assert digits_used(src) == 1


def _pick_probes(prob, gen):
    """(j, j + prob[j], points v in [0, k]): every float around every
    threshold and cell edge of an alias table, and random points."""
    k = prob.shape[0]
    j = np.arange(k, dtype=np.float64)
    total = j + prob
    v = np.concatenate([
        j, np.nextafter(j + 1.0, 0.0), total, np.nextafter(total, np.inf),
        np.nextafter(total, -np.inf), j + gen.random(k), [float(k)],
    ])
    return j, total, v[(v >= 0.0) & (v <= k)]


def test_alias_records_pick_as_the_table():
    """The packed records' threshold t_j (the smallest float >= j + prob[j])
    picks exactly what the table's ``v - j < prob[j]`` does, compiled and in
    the twin, at every float around every threshold and cell edge (random
    tables, and one with thresholds 1, 0 and a rounding leftover above 1).
    Mutation: the rounded sum fl(j + prob[j]) as the threshold differs where
    it rounded down."""
    import numba

    from skdp_label._kernels import _twin
    from skdp_label.mechanisms.classic._noise import alias_table

    @numba.njit
    def picks(v, records, out):
        for i in range(v.shape[0]):
            out[i] = S._alias_pick(v[i], records)

    gen = np.random.default_rng(5)
    tables = [alias_table(gen.random(k) ** 3) for k in (3, 50, 3000)]
    tables.append((np.array([1.0, 0.0, 1.0 + 2**-52, 0.3]), np.array([0, 3, 2, 0])))
    mutant_wrong = 0
    for prob, alias in tables:
        k = prob.shape[0]
        j, total, v = _pick_probes(prob, gen)
        cell = np.minimum(v.astype(np.int64), k - 1)
        keep = v - cell < prob[cell]
        expected = np.where(keep, cell, alias[cell]).astype(np.float64)
        records = S.alias_records(prob, alias)
        out = np.empty(v.shape[0])
        picks(v, records, out)
        np.testing.assert_array_equal(out, expected)
        twin = [_twin.twin(S._alias_pick)(x, records) for x in v[:400]]
        np.testing.assert_array_equal(twin, expected[:400])
        mutant = np.where(v < total[cell], cell, alias[cell])
        mutant_wrong += np.count_nonzero(mutant != expected)
    assert mutant_wrong > 0


def test_cell_records_pick_the_entries_of_the_alias_records():
    """:func:`S.cell_records` (a table of cells: each entry's first value and
    sign in place of its index) picks, compiled and in the twin, the entry
    :func:`S._alias_pick` picks on :func:`S.alias_records`, at every float
    around every threshold and cell edge, as (first value, sign) of entry
    t = j - T: (sign(t) (1 + L (|t| - 1)), sign(t)), +0.0 for the cell of 0
    (bit for bit); values near 2**52 stay exact; a table beyond 2**52
    values is refused. Mutation: records whose differences were rounded
    (float32) are caught."""
    import numba

    from skdp_label._kernels import _twin
    from skdp_label.mechanisms.classic._noise import alias_table

    @numba.njit
    def picks(v, records, first, sign):
        for i in range(v.shape[0]):
            _, _, first[i], sign[i] = S._cell_pick(v[i], records, 5)

    gen = np.random.default_rng(6)
    cases = [(alias_table(gen.random(k) ** 3), cell)
             for k, cell in ((3, 2), (51, 8192), (3001, 2**20))]
    # 1 + L T = 3 * 2**50 + 1: first values +-(2**51 + 1), differences up to 2**52 + 2.
    prob = np.array([0.5, 0.25, 1.0, 0.75, 1.0, 0.1, 0.6])
    cases.append(((prob, np.array([6, 5, 2, 0, 4, 0, 0])), 2.0**50))
    mutant_wrong = 0
    for (prob, alias), cell in cases:
        k = prob.shape[0]
        half = (k - 1) // 2
        j, total, v = _pick_probes(prob, gen)
        index_records = S.alias_records(prob, alias)
        t = np.array([_twin.twin(S._alias_pick)(x, index_records) for x in v]) - half
        expected_first = np.where(t == 0, 0.0, np.sign(t) * (1.0 + cell * (np.abs(t) - 1.0)))
        records = S.cell_records(prob, alias, cell)
        first, sign = np.empty(v.shape[0]), np.empty(v.shape[0])
        picks(v, records, first, sign)
        np.testing.assert_array_equal(first.view(np.int64), expected_first.view(np.int64))
        expected_sign = np.sign(t).astype(np.float64)
        np.testing.assert_array_equal(sign.view(np.int64), expected_sign.view(np.int64))
        twin = [_twin.twin(S._cell_pick)(x, records, 5)[2:] for x in v[:400]]
        np.testing.assert_array_equal(np.array(twin), np.stack([first, sign], 1)[:400])
        mutant = records.astype(np.float32).astype(np.float64)
        picks(v, mutant, first, sign)
        mutant_wrong += np.count_nonzero(first != expected_first)
    assert mutant_wrong > 0
    with pytest.raises(ValueError, match="2\\*\\*52"):
        S.cell_records(np.ones(3), np.arange(3), 2.0**52)


def test_envelope_records_pick_the_squeeze_of_the_picked_cell():
    """:func:`S.envelope_records` (the Gaussian envelope's records) gives,
    through the kernel's reads (compiled), the first value and sign of
    :func:`S.cell_records` and the squeeze of the picked entry's cell,
    ``squeeze[|t|]`` (the slope of its linear squeeze; ``squeeze[0]`` for
    the cell of 0), at every float around every threshold. Mutation:
    records holding the alias's squeeze only are caught."""
    import numba

    from skdp_label._kernels import _twin
    from skdp_label.mechanisms.classic._noise import gaussian_cell_table

    wrong = 0
    for sigma in (40.0, 5000.0):
        g, prob, alias, squeeze = gaussian_cell_table(sigma)
        k = prob.shape[0]
        half = (k - 1) // 2
        _, _, v = _pick_probes(prob, np.random.default_rng(7))
        t = np.array([_twin.twin(S._alias_pick)(x, S.alias_records(prob, alias)) for x in v]) - half
        records = S.envelope_records(prob, alias, g[4], squeeze)
        out = np.empty((v.shape[0], 3))
        _seven_column_picks(v, records, out)
        expected = squeeze[np.abs(t).astype(np.int64)].astype(np.float64)
        np.testing.assert_array_equal(out[:, 2], expected)
        cell_out = np.empty((v.shape[0], 2))
        for i, x in enumerate(v):
            cell_out[i] = _twin.twin(S._cell_pick)(x, S.cell_records(prob, alias, g[4]), 5)[2:]
        np.testing.assert_array_equal(out[:, :2], cell_out)
        mutant = records.reshape(-1, 7).copy()
        mutant[:, 6] = 0.0
        _seven_column_picks(v, np.ascontiguousarray(mutant.reshape(-1)), out)
        wrong += np.count_nonzero(out[:, 2] != expected)
    assert wrong > 0
