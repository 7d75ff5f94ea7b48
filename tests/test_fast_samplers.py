"""The fused finite-output sampler (``_kernels._sampling.sample_rows``).

* ``categorical_tables``: the alias tables of each row's bulk and the exact
  exponent-group tables of its tail reproduce the matrix to 1e-9 relative in
  every positive entry, whatever its size; zeros are never produced.
* The sampler draws from those tables: chi-squared against the matrix, and
  scripted digits reach a 1e-300 entry through the tail.
* Randomized rounding inside the kernel (bucket lookup, branch-free) picks
  the same neighbours as the numpy reference and rounds up with the
  interpolation weight, on regular and crowded grids.
"""

import math

import numpy as np
import pytest
from scipy import stats

from _audit import chi_square_pvalue
from skdp_label._kernels import _sampling as S
from skdp_label.mechanisms.unbiased import randomized_rounding_indices
from test_numerics import DIGIT, _implied, residue_digits, scripted


# The compiled kernels, whatever the size (small calls would run the Python
# twins: bit-identical, tests/test_twins.py).
pytestmark = pytest.mark.usefixtures("compiled_kernels")


def implied_matrix(tables, n_out):
    """The distribution each row of ``tables`` samples from (up to digit
    quantisation, which the builder bounds)."""
    split = tables[0]
    cell_prob, cell_keep, cell_alias = S.unpack_cells(tables[1])
    n_rows = split.shape[0]
    out = np.zeros((n_rows, n_out))
    for i in range(n_rows):
        tail = (split[i, 0] + split[i, 1]) / DIGIT  # the exact Bernoulli's q
        k = int(split[i, 3]) + 1
        if tail < 1.0:
            np.add.at(out[i], cell_keep[i, :k], cell_prob[i, :k] / k * (1.0 - tail))
            np.add.at(out[i], cell_alias[i, :k], (1.0 - cell_prob[i, :k]) / k * (1.0 - tail))
        if tail > 0.0:
            # The exponent groups over the row's tail entries (columns order[i]).
            order, *groups = tables[2:]
            positions = np.arange(order.shape[1])[None, :].repeat(n_rows, axis=0)
            np.add.at(out[i], order[i], tail * _implied((positions, *groups), i))
    return out


def _matrix(seed):
    rng = np.random.default_rng(seed)
    logs = rng.uniform(-300, 0, size=(5, 14))
    matrix = 10.0**logs
    matrix[rng.random(matrix.shape) < 0.2] = 0.0
    matrix[:, :4] += rng.uniform(0.2, 1.0, size=(5, 4))  # a bulk in every row
    return matrix / matrix.sum(axis=1, keepdims=True)


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tables_reproduce_every_entry_to_1e_9(seed):
    matrix = _matrix(seed)
    tables = S.categorical_tables(matrix)
    implied = implied_matrix(tables, matrix.shape[1])
    positive = matrix > 0
    assert np.all(implied[~positive] == 0.0)  # zeros are never produced
    rel = np.abs(implied[positive] - matrix[positive]) / matrix[positive]
    assert rel.max() <= 1e-9
    # The tiny entries are in the tail (not the alias table): 2**-20 is the floor.
    split, (_, cell_keep, _) = tables[0], S.unpack_cells(tables[1])
    for i in range(matrix.shape[0]):
        k = int(split[i, 3]) + 1
        assert np.all(matrix[i, cell_keep[i, :k]] >= 2.0**-20)


def test_a_tight_tolerance_moves_entries_to_the_exact_tail():
    matrix = _matrix(3)
    loose, tight = S.categorical_tables(matrix), S.categorical_tables(matrix, rtol=1e-15)
    # Fewer cells pass the tight check; what is sampled is still the matrix.
    assert (tight[0][:, 3] <= loose[0][:, 3]).all()
    assert (tight[0][:, 0] >= loose[0][:, 0]).all() and (tight[0][:, 3] < loose[0][:, 3]).any()
    implied = implied_matrix(tight, matrix.shape[1])
    positive = matrix > 0
    assert np.max(np.abs(implied[positive] - matrix[positive]) / matrix[positive]) <= 1e-9


def test_sampler_matches_the_matrix():
    matrix = np.array([
        [0.5, 0.3, 0.15, 0.04, 0.01 - 2e-7, 1e-7, 1e-7],
        [0.01, 0.02, 0.03, 0.04, 0.4, 0.5, 0.0],
        [0.2, 0.2, 0.2, 0.2, 0.1, 0.05, 0.05],
    ])
    tables = S.categorical_tables(matrix)
    rng = np.random.default_rng(11)
    for row in range(matrix.shape[0]):
        draws = S.categorical_codes(np.full(80_000, row), rng, tables)
        nz = matrix[row] > 0
        assert chi_square_pvalue(draws, np.flatnonzero(nz), matrix[row][nz]) > 1e-4


def test_tail_reaches_a_1e_300_entry_and_the_bulk_the_rest():
    matrix = np.array([[1.0 - 1e-15, 1e-15, 1e-300, 0.0]])
    tables = S.categorical_tables(matrix)
    outputs = np.arange(4.0)
    # First digit 0 < 2**53 * (1e-15 + 1e-300): the tail. Then the tail's
    # exponent groups: leave the 1e-15 group (Bernoulli(1e-285): 19 zero
    # digits), and one digit inside the 1e-300 group.
    out = S.sample_rows(scripted([0] + [0] * 19 + [123]), outputs, codes=np.array([0]), tables=tables)
    assert out[0] == 2.0
    out = S.sample_rows(scripted([DIGIT - 1]), outputs, codes=np.array([0]), tables=tables)
    assert out[0] == 0.0
    # A mutated table without the tail (bulk only) never produces entry 2: the
    # tail split is what the scripted draw above goes through.
    heads = tables[0].copy()
    heads[:, :2] = 0.0
    broken = (heads, *tables[1:])
    out = S.sample_rows(scripted([0] + [0] * 19 + [123]), outputs, codes=np.array([0]), tables=broken)
    assert out[0] != 2.0


@pytest.mark.parametrize(
    "values",
    [np.arange(0.0, 41.0), np.array([0.0, 1e-9, 2e-9, 5.0, 5.000001, 100.0]), np.array([2.0, 3.0])],
)
def test_rounding_in_the_kernel_is_unbiased_and_picks_the_reference_neighbours(values):
    rng = np.random.default_rng(5)
    k = values.shape[0]
    probe = np.concatenate([
        values, (values[1:] + values[:-1]) / 2, values[0] + (values[-1] - values[0]) * rng.random(30),
        [values[0] - 1.0, values[-1] + 1.0],
    ])
    keep_all = S.rr_constants(k, 0.0)  # RR that never flips: the output is the rounded value
    grid = S.rounding_grid(values)
    n = 4000
    for y in probe:
        out = S.sample_rows(rng, values, y=np.full(n, y), grid=grid, rr=keep_all)
        ref = values[randomized_rounding_indices(values, np.full(n, y), rng.random(n))]
        assert set(np.unique(out)) <= set(np.unique(np.concatenate([ref, values[[0, -1]]])))
        clipped = min(max(y, values[0]), values[-1])
        hi = np.searchsorted(values, clipped, side="right")
        if hi == 0 or hi == k or values[hi - 1] == clipped:
            assert np.all(out == clipped)  # on a grid point or clipped: no randomness
            continue
        p_up = (clipped - values[hi - 1]) / (values[hi] - values[hi - 1])
        ups = int(np.sum(out == values[hi]))
        assert ups + int(np.sum(out == values[hi - 1])) == n
        assert stats.binomtest(ups, n, p_up).pvalue > 1e-4


# -- the blocked kernel draws what a label-by-label sampler draws --------------


def _word(rng):
    """The 64-bit word a rounding kernel reads for a label: a Generator's
    next output, a keyed row's next word."""
    if isinstance(rng, np.random.Generator):
        return int(rng.bit_generator.random_raw())
    return int(rng.next_word())


def _coin(word, t, rng):
    """Up with probability exactly ``t``: the word's low 11 bits b against
    m = floor(t 2**11), a tie read on (an exact Bernoulli of the fraction)."""
    scaled = t * 2048.0
    m = math.floor(scaled)
    b = word & 2047
    return b < m if b != m else S.bernoulli_exact(scaled - m, rng)


def _one_by_one(rng, outputs, tables, codes=None, y=None, values=None, pieces=None,
                flip_ends=False):
    """Reference: the alias-with-tail sampler label by label in Python, reading
    ``rng`` in the order of the single-pass algorithm (a rounding row's word,
    whose low 11 bits start the coin and whose top 53 are the digit, any tie
    digits of the coin, then any tail digits), with float compares.
    ``pieces``: the row is the piece's right end 2 p + 1 with probability t
    (Pieces.locate), the left end 2 p otherwise (``flip_ends``: the other way
    round, a mutation)."""
    from skdp_label.mechanisms.quantization._core import Pieces

    heads, cells, order, cdf, group_end, group_q, n_groups = tables
    prob, own, alias = S.unpack_cells(cells)
    n = codes.shape[0] if codes is not None else y.shape[0]
    out = np.empty(n)
    for i in range(n):
        if hasattr(rng, "begin_row"):
            rng.begin_row(i)
        if codes is not None:
            row = int(codes[i])
            d = rng.random() * DIGIT
        else:
            word = _word(rng)
            d = float(word >> 11)
            if pieces is not None:
                pos, t = Pieces(*pieces, 0.0, 0.0).locate(y[i : i + 1])
                row = 2 * int(pos[0]) + int(_coin(word, float(t[0]), rng) != flip_ends)
            else:
                v = min(max(y[i], values[0]), values[-1])
                lo = int(np.clip(np.searchsorted(values, v, side="right") - 1, 0, values.size - 2))
                t = (v - values[lo]) / (values[lo + 1] - values[lo])
                row = lo + int(_coin(word, t, rng))
        qd, frac, scale, last = heads[row]
        if d < qd or (d == qd and S.bernoulli_exact(frac, rng)):
            j = S.group_draw(row, rng, order, cdf, group_end, group_q, n_groups)
        else:
            w = (d - qd) * scale
            c = min(int(w), int(last))
            j = own[row, c] if w - c < prob[row, c] else alias[row, c]
        out[i] = outputs[j]
    return out


def _heavy_tail_matrix():
    """Rows with a bulk and ~2 % of tail mass spread over 20,000 entries
    below 2**-20, so tail draws fall inside blocks of bulk draws."""
    matrix = np.hstack([_matrix(4), np.full((5, 20_000), 9e-7)])
    return matrix / matrix.sum(axis=1, keepdims=True)


def _keyed(n):
    from skdp_label._kernels._philox import KeyedRows

    lo = np.arange(n, dtype=np.uint64) * np.uint64(7919)
    return KeyedRows(np.uint64(5), np.uint64(6), np.uint64(0), lo, lo + np.uint64(1))


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("n_pieces, even", [(1, False), (3, False), (4, False), (5, False),
                                             (70, False), (5, True), (15, True)])
def test_piece_rows_kernel_is_the_label_by_label_sampler(keyed, n_pieces, even):
    # The quantization family's path: each label's piece end by one uniform,
    # then its row's draw, label by label in one pass; 600 labels (blocks of
    # 256), labels on piece ends and outside the pieces, an empty piece
    # (t = 0); pieces found by three padded starts (<= 4), by counting the
    # starts (<= 64), by bisection (70) and by arithmetic on evenly spaced
    # ones (MVU's).
    matrix = _heavy_tail_matrix()
    gen = np.random.default_rng(n_pieces)
    edges = np.sort(gen.uniform(0.0, 10.0, n_pieces + 1))
    if even:
        edges = np.linspace(0.0, 10.0, n_pieces + 1)
    edges[0], edges[-1] = 0.0, 10.0
    left, right = edges[:-1].copy(), edges[1:].copy()
    if n_pieces > 2:
        right[1] = left[1]  # an empty piece
    if even:  # contiguous pieces only take the arithmetic lookup (it reads no ends)
        assert S.piece_lookup(left, right)[1][1] == 0.0
        right = edges[1:].copy()
        assert S.piece_lookup(left, right)[1][1] > 0.0
    rows = np.resize(matrix, (2 * n_pieces, matrix.shape[1]))
    tables = S.categorical_tables(rows, rtol=1e-12)
    outputs = np.arange(matrix.shape[1]) * 0.5 - 3.0
    n = 600
    y = gen.uniform(0.0, 10.0, n)
    y[: 2 * n_pieces + 4] = np.concatenate([left, right, [-1.0, -0.0, 10.5, 1e300]])
    source = (lambda: _keyed(n)) if keyed else (lambda: np.random.default_rng(99))
    got = S.sample_rows(source(), outputs, y=y, pieces=(left, right), tables=tables)
    ref = _one_by_one(source(), outputs, tables, y=y, pieces=(left, right))
    np.testing.assert_array_equal(got, ref)
    assert (~np.isin(got, outputs[:14])).sum() >= 3  # the tail path ran inside the blocks
    # Mutation: the ends swapped (right end when u >= t) is seen.
    flipped = _one_by_one(source(), outputs, tables, y=y, pieces=(left, right), flip_ends=True)
    assert not np.array_equal(flipped, got)


@pytest.mark.parametrize("keyed", [False, True])
@pytest.mark.parametrize("rounding", [False, True])
def test_blocked_kernel_is_the_label_by_label_sampler(keyed, rounding):
    # 600 labels: two full blocks of 256 and a partial one, ~12 tail draws
    # (rtol=1e-12 moves a few more entries to the tail).
    matrix = _heavy_tail_matrix()
    tables = S.categorical_tables(matrix, rtol=1e-12)
    assert 0.0 < tables[0][:, 0].min() / DIGIT < 0.5  # a tail in every row, and a bulk
    outputs = np.arange(matrix.shape[1]) * 0.5 - 3.0
    n = 600
    gen = np.random.default_rng(21)
    values = np.array([0.0, 1.0, 2.5, 3.0, 7.0])
    kwargs = {"y": gen.uniform(-1.0, 8.0, n)} if rounding else {"codes": gen.integers(0, 5, n)}
    source = (lambda: _keyed(n)) if keyed else (lambda: np.random.default_rng(99))
    grid = {"grid": S.rounding_grid(values)} if rounding else {}
    got = S.sample_rows(source(), outputs, tables=tables, **kwargs, **grid)
    ref = _one_by_one(source(), outputs, tables, values=values, **kwargs)
    np.testing.assert_array_equal(got, ref)
    tail = ~np.isin(got, outputs[:14])
    assert tail.sum() >= 3  # the tail path ran inside the blocks (fixed seeds and keys)
    # Mutation: swapping each cell's own and alias outputs changes the draws
    # (the comparison above sees the cell select).
    heads, cells, *rest = tables
    swapped = cells.copy()
    swapped[..., 1] = (cells[..., 1] >> 32) | ((cells[..., 1] & 0xFFFFFFFF) << 32)
    mutated = S.sample_rows(source(), outputs, tables=(heads, swapped, *rest), **kwargs, **grid)
    assert not np.array_equal(mutated, ref)


def test_cell_thresholds_compare_as_their_floats():
    # The kernel compares non-negative floats through their bit patterns; the
    # packed thresholds must be +0.0 or positive, never -0.0.
    tables = S.categorical_tables(_heavy_tail_matrix())
    prob, own, alias = S.unpack_cells(tables[1])
    assert np.all(tables[1][..., 0] >= 0) and np.all((prob >= 0) & (prob <= 1))
    assert np.all(np.signbit(prob) == False)  # noqa: E712
    x = np.concatenate([prob.ravel(), [0.0, 5e-324, 0.5, 1.0, 1.5]])
    a, b = np.meshgrid(x[:200], x[:200])
    np.testing.assert_array_equal(a.view(np.int64) < b.view(np.int64), a < b)


@pytest.mark.parametrize("starts, empty", [([0.0], None), ([0.0, 4.0], None),
                                           ([0.0, 2.5, 6.0], None), ([0.0, 2.5, 6.0], 1),
                                           ([0.0, 3.0, 5.0, 7.5], None), ([0.0, 3.0, 5.0, 7.5], 2),
                                           ([0.0, 1.0, 1.0, 7.5], None), ([0.0, 3.0, 3.0, 3.0], None)])
def test_few_pieces_ends_are_the_indexed_ends(starts, empty):
    # Up to four pieces, the pass selects a label's piece ends among hoisted
    # scalars (no indexed loads): the same pieces, positions and floats as
    # indexing left/right by the count of starts, with repeated starts and
    # empty pieces; labels on the ends and outside.
    left = np.array(starts)
    right = np.append(left[1:], 10.0)
    if empty is not None:
        right[empty] = left[empty]  # an empty piece (repeated starts make some too)
    left, par = S.piece_lookup(left, right)
    y = np.concatenate([np.random.default_rng(left.size).uniform(-1.0, 11.0, 997), left, right,
                        np.nextafter(left, -np.inf), [-0.0, 1e300, -1e300]])
    pos, t = np.empty(y.size, np.int64), np.empty(y.size)
    S._piece_positions(y, 0, y.size, left, right, par, pos, t)
    ref_pos = np.clip((left[None, :] <= y[:, None]).sum(axis=1) - 1, 0, left.size - 1)
    width = right[ref_pos] - left[ref_pos]
    with np.errstate(divide="ignore", invalid="ignore"):
        ref_t = np.where(width > 0.0, (y - left[ref_pos]) / width, 0.0)
    ref_t = np.clip(ref_t, 0.0, 1.0) + 0.0
    np.testing.assert_array_equal(pos, ref_pos)
    np.testing.assert_array_equal(t.view(np.int64), ref_t.view(np.int64))
    # Mutation: the ends of the piece after (a select one off) are seen.
    if left.size > 1 and empty is None and np.unique(left).size == left.size:
        shifted = np.minimum(ref_pos + 1, left.size - 1)
        w2 = right[shifted] - left[shifted]
        with np.errstate(divide="ignore", invalid="ignore"):
            wrong = np.clip(np.where(w2 > 0.0, (y - left[shifted]) / w2, 0.0), 0.0, 1.0) + 0.0
        assert not np.array_equal(wrong, t)


@pytest.mark.parametrize("n_pieces", [1, 2, 4, 5, 64, 65, 300, -15, -300])
@pytest.mark.parametrize("keyed", [False, True])
def test_piece_rows_is_the_vectorised_end_choice(n_pieces, keyed):
    # n_pieces < 0: |n_pieces| evenly spaced pieces (the arithmetic lookup).
    from skdp_label._kernels._philox import uniforms
    from skdp_label.mechanisms.quantization._core import Pieces

    rng = np.random.default_rng(abs(n_pieces))
    edges = np.sort(rng.uniform(0.0, 10.0, abs(n_pieces) + 1))
    even = n_pieces < 0
    if even:
        n_pieces = -n_pieces
        edges = np.linspace(0.0, 10.0, n_pieces + 1)
    edges[0], edges[-1] = 0.0, 10.0
    right = edges[1:].copy()
    if n_pieces > 2 and not even:
        right[1] = edges[1]  # an empty piece: t = 0
    assert (S.piece_lookup(edges[:-1], right)[1][1] > 0.0) == even
    pieces = Pieces(edges[:-1], right, 0.0, 10.0)
    y = np.concatenate([rng.uniform(0.0, 10.0, 2000), edges, [0.0, 10.0, -3.0, 12.0]])
    source = (lambda: _keyed(y.size)) if keyed else (lambda: np.random.default_rng(7))
    pos, t = pieces.locate(y)
    ref = 2 * pos + (uniforms(source(), y.size) < t)
    np.testing.assert_array_equal(S.piece_rows(y, pieces.left, pieces.right, source()), ref)


def test_residue_is_the_integer_modulo():
    """RR's ``d mod m`` by a float quotient (no int64 division) equals the
    integer modulo, compiled and in the twin, at the ends of the digit range
    and for divisors up to 2**53 - 1; mutation: dropping the correction step
    (the truncated quotient alone) is off by m on some of these digits."""
    import numba

    from skdp_label._kernels import _twin

    @numba.njit
    def residues(d, m, out):
        for i in range(d.shape[0]):
            out[i] = S._residue(d[i], m)

    gen = np.random.default_rng(0)
    wrong = 0
    for m in [1, 2, 3, 7, 99, 100, 255, 2**20 + 1, 2**40 - 3, 2**52 + 1, 2**53 - 1]:
        d = residue_digits(m, gen)
        expected = d.astype(np.int64) % np.int64(m)
        out = np.empty(d.shape[0], dtype=np.int64)
        residues(d, float(m), out)
        np.testing.assert_array_equal(out, expected)
        twin = [_twin.twin(S._residue)(x, float(m)) for x in d[:300]]
        np.testing.assert_array_equal(twin, expected[:300])
        wrong += np.count_nonzero(
            d.astype(np.int64) - (d * (1.0 / m)).astype(np.int64) * m != expected
        )
    assert wrong > 0


@pytest.mark.parametrize("kernel", ["indices", "contiguous"])
def test_rr_digits_around_the_fresh_digit_window(kernel):
    """k-ary RR's first digit d: d < limit flips to the class d mod m places
    on, limit <= d < qd flips by a fresh digit, d = qd reads the fraction
    (here 0: keep), d > qd keeps; scripted digits reach each case, in the
    compiled kernels (the hot path, by masks, and the rare helper)."""
    from test_numerics import scripted

    k = 4  # m = 3 other classes
    qd = float(3 * 10**15 + 2)  # limit = qd - (qd mod 3) = qd - 2
    c = np.array([qd, 0.0, qd - 2.0, 3.0])
    fresh = 3 * 10**14 + 1  # a fresh uniform_index(3) digit: 1 (accepted)
    cases = [  # (digits, expected class of label 1)
        ([0], 2), ([4], 3), ([qd - 3], 1 + 1 + int((qd - 3) % 3)),  # d < limit
        ([qd - 2, fresh], 3), ([qd - 1, fresh], 3),  # limit <= d < qd: fresh digit
        ([qd, 5], 1),  # d = qd, fraction 0: keep
        ([qd + 1], 1), ([2.0**53 - 1], 1),  # d > qd: keep
    ]
    for digits, expected in cases:
        expected %= k
        rng = scripted([int(d) for d in digits])
        if kernel == "indices":
            out = S._randomized_response_indices(
                np.array([1]), rng, k, c, np.empty(1, dtype=np.int64))
        else:
            out = S._randomized_response_contiguous(
                np.array([11]), rng, 10, k, c, np.empty(1, dtype=np.int64)) - 10
        assert out[0] == expected, (digits, out[0], expected)
