"""The interval sampler of two-level matrices (skdp_label/_kernels/_interval.py).

Its law is recomputed here from the tables in exact rational arithmetic (the
positions each cell receives, the tie digit, the tail's exponent groups) and
checked within 1e-9 relative of the matrix for every positive entry, on real
OptimalUnbiased / BiasVarianceRandomizer fits and on synthetic two-level
matrices with tiny end fractions, tiny low levels and an isolated high cell
(the exact tail). Tables with a window shifted by a cell or a perturbed low
mass are caught by the same check; matrices without the structure get None.
The compiled kernel is checked against the matrix (chi-square), against its
Python twin and through the PCG64 stream bit for bit, on keyed rows, and a
kernel that forgets to release or hold the state around the tail is caught.
"""

import inspect
import math
import textwrap
import warnings
from fractions import Fraction

import numba
import numpy as np
import pytest
from _audit import _pooled_chi_square, audit_sampler
from test_carried_state import _three_ways
from test_fast_samplers import _keyed

from skdp_label import PrivacyLeakWarning
from skdp_label._kernels import _sampling as S
from skdp_label._kernels import _twin
from skdp_label._kernels._interval import interval_cell, interval_law, interval_tables
from skdp_label._kernels._pcg64 import call_with_stream
from skdp_label.mechanisms import BiasVarianceRandomizer, OptimalUnbiased

_D = 2**53


def _exact_law(tables):
    """The sampled matrix as Fractions, from the tables alone: row i's digit
    d is position t = d for d < Ld (low cells), t = d + start for
    Ld <= d < 2**53 - qd (high cells), the last of them (the tie) with weight
    1 - frac; the top qd digits (and the tie with probability frac) go to the
    tail's exponent groups. Cell c [C_c, C_(c+1)) -> output c mod n_out."""
    n_out = tables.n_out
    c = [int(x) for x in tables.boundaries]
    ld = c[n_out]
    order, cdf, group_end, group_q, n_groups = tables.tail
    law = []
    for i, ((qd, frac, _), start) in enumerate(zip(tables.heads.tolist(), tables.starts.tolist())):
        qd = int(qd)
        frac = Fraction(frac)
        row = [Fraction(0)] * n_out
        for cell in range(n_out):  # low positions [0, ld)
            row[cell] += c[cell + 1] - c[cell]
        t0, t1 = ld + start, _D - qd + start
        for cell in range(n_out, 2 * n_out):
            row[cell - n_out] += max(0, min(t1, c[cell + 1]) - max(t0, c[cell]))
            if c[cell] <= t1 - 1 < c[cell + 1]:
                row[cell - n_out] -= frac  # the tie digit, sent to the tail with probability frac
        row = [x / _D for x in row]
        tail = (qd + frac) / _D
        if tail:
            remaining = Fraction(1)
            ends = group_end[i, : n_groups[i]].tolist()
            for g, end in enumerate(ends):
                q = Fraction(group_q[i, g])
                stop = 1 if g == len(ends) - 1 else (q if q >= 0 else 1 + q)
                begin = 0 if g == 0 else ends[g - 1]
                previous = Fraction(0)
                for k in range(begin, end):
                    row[order[i, k]] += tail * remaining * stop * (Fraction(cdf[i, k]) - previous)
                    previous = Fraction(cdf[i, k])
                remaining *= 1 - stop
        law.append(row)
    return law


def _worst_relative_error(tables, matrix):
    law = _exact_law(tables)
    worst = Fraction(0)
    for i, row in enumerate(matrix):
        total = math.fsum(row)
        for j, m in enumerate(row.tolist()):
            target = Fraction(m) / Fraction(total)
            if m == 0.0:
                assert law[i][j] == 0, "an entry of probability 0 is sampled"
            else:
                worst = max(worst, abs(law[i][j] - target) / target)
    return float(worst)


def _two_level(n_rows=12, n_out=40, epsilon=1.0, seed=0, tiny_low=(), tiny_ends=False,
               isolated=False):
    """A two-level matrix P(j | i) = a_j + b_j h_i(j): rows' windows of equal
    mass in the cumulative of b, starting further right row by row."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 1.5, n_out)
    a[list(tiny_low)] = 1e-13
    if isolated:
        a[-1] = 0.5  # its high cell: ~1.3 % of a row's mass
    b = math.expm1(epsilon) * a
    cum = np.concatenate([[0.0], np.cumsum(b)])
    width = 0.4 * cum[-1]
    starts = np.linspace(0.0, cum[-1] - width, n_rows)
    if tiny_ends:  # windows starting (ending) a hair before (after) a cell's start
        inner = cum[1:-1][(cum[1:-1] > starts[1]) & (cum[1:-1] < starts[-2])]
        starts[1:-1] = inner[np.linspace(0, inner.size - 1, n_rows - 2).astype(int)]
        starts[1:-1:2] -= 1e-10 * b.min()
        starts[2:-1:2] += 1e-10 * b.min()
    matrix = np.empty((n_rows, n_out))
    for i, s in enumerate(starts):
        w = width
        extra = np.zeros(n_out)
        if isolated and i == 0:  # a high cell far from the window (its excess: the tail)
            w -= b[-1]
            extra[-1] = b[-1]
        overlap = np.clip(np.minimum(cum[1:], s + w) - np.maximum(cum[:-1], s), 0.0, None)
        matrix[i] = a + overlap + extra
    return matrix / matrix.sum(axis=1, keepdims=True)


def _fit(cls, epsilon, resolution, n=5000):
    y = np.random.default_rng(0).uniform(0.0, 40.0, n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        return cls(epsilon=epsilon, bounds=(0, 40), resolution=resolution, random_state=0).fit(y)


# -- the law ------------------------------------------------------------------------------------


@pytest.mark.parametrize("cls", [OptimalUnbiased, BiasVarianceRandomizer])
@pytest.mark.parametrize("epsilon", [0.05, 1.0, 8.0])
@pytest.mark.parametrize("resolution", [1.0, 4.0])
def test_the_law_of_real_fits_is_their_matrix(cls, epsilon, resolution):
    mech = _fit(cls, epsilon, resolution)
    tables = interval_tables(mech.transition_matrix_)
    assert tables is not None  # these fits are two-level
    worst = _worst_relative_error(tables, mech.transition_matrix_)
    assert worst <= 1e-9
    assert np.max(tables.bound) <= 1e-9
    # The builder's own count (floats) agrees with the exact one.
    law, bound = interval_law(tables)
    exact = np.array([[float(x) for x in row] for row in _exact_law(tables)])
    assert np.all(np.abs(law - exact) <= bound + 4 * np.abs(exact) / _D)


@pytest.mark.parametrize("kind", ["plain", "tiny-ends", "tiny-low", "isolated", "eps-8"])
def test_the_law_of_synthetic_two_level_matrices_is_their_matrix(kind):
    kwargs = {"plain": {}, "tiny-ends": {"tiny_ends": True}, "tiny-low": {"tiny_low": (3, 17, 18)},
              "isolated": {"isolated": True}, "eps-8": {"epsilon": 8.0, "n_out": 60}}[kind]
    matrix = _two_level(**kwargs)
    tables = interval_tables(matrix)
    assert tables is not None
    assert _worst_relative_error(tables, matrix) <= 1e-9
    if kind == "tiny-low":  # 1e-13 entries: the exact tail's (a digit is 1.1e-16)
        assert np.all(tables.tail_mass > 0.0)
    if kind == "isolated":  # row 0's far high cell is in its tail, the window is the rest
        assert tables.tail_mass[0] > 1e-3 and np.all(tables.tail_mass[1:] == 0.0)
        assert tables.windows[0, 1] < matrix.shape[1] - 2
    if kind == "tiny-ends":  # end cells a hair above their low level
        excess = (matrix - matrix.min(axis=0)) / matrix
        assert np.sum((excess > 0) & (excess < 1e-8)) >= 4


@pytest.mark.parametrize("mutation", ["window-shifted", "low-mass", "guide"])
def test_a_wrong_table_is_caught(mutation):
    matrix = _two_level()
    tables = interval_tables(matrix)
    assert _worst_relative_error(tables, matrix) <= 1e-9
    if mutation == "window-shifted":  # row 5's run moved one cell right
        i = 5
        cells = tables.boundaries
        start = int(tables.starts[i])
        cell = int(np.searchsorted(cells, start + int(cells[tables.n_out]), side="right")) - 1
        tables.heads[i, 2] += float(cells[cell + 1] - cells[cell])
        assert _worst_relative_error(tables, matrix) > 1e-3
        assert np.max(np.abs(interval_law(tables)[0] - matrix) / matrix) > 1e-3
    elif mutation == "low-mass":  # L perturbed by 1e-7: low and high parts off
        tables.constants[3] += 1e-7 * _D
        tables.table[tables.n_out:2 * tables.n_out + 1] += int(1e-7 * _D)
        assert _worst_relative_error(tables, matrix) > 1e-8
    else:  # a guide record pointing a cell too far: positions found in the wrong cell
        guide = tables.guide
        k = guide.shape[0] // 2
        guide[k, 0] += 2
        t = np.arange(k << int(tables.constants[2]), (k + 1) << int(tables.constants[2]),
                      2**35, dtype=np.int64)
        assert not np.array_equal(_cells_of(tables, t), _searched(tables, t))


@numba.njit(cache=False)
def _cells(t, flat, guide_at, shift, out):
    for i in range(t.shape[0]):
        out[i] = interval_cell(t[i], flat, guide_at, shift)


def _cells_of(tables, t):
    out = np.empty(t.shape[0], np.int64)
    _cells(t, tables.table, np.uint64(tables.constants[1]), np.int64(tables.constants[2]), out)
    return out


def _searched(tables, t):
    return np.searchsorted(tables.boundaries, t, side="right") - 1


@pytest.mark.parametrize("kind", ["real", "tiny-low"])
def test_the_guide_finds_the_cell_of_every_position(kind):
    matrix = (_fit(OptimalUnbiased, 1.0, 1.0).transition_matrix_ if kind == "real"
              else _two_level(tiny_low=(3, 17, 18)))
    tables = interval_tables(matrix)
    c = tables.boundaries
    # Every boundary, one either side, bucket starts and random positions.
    buckets = np.arange(tables.guide.shape[0], dtype=np.int64) << int(tables.constants[2])
    t = np.concatenate([c[:-1], c[1:] - 1, c[1:-1] - 1, buckets, buckets + 1,
                        np.random.default_rng(1).integers(0, c[-1], 20_000)])
    t = t[(t >= 0) & (t < c[-1])]
    assert np.array_equal(_cells_of(tables, t), _searched(tables, t))


@pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")
def test_matrices_without_the_structure_get_none():
    matrix = _two_level()
    # A third level in a column (a window's interior cell at half its excess).
    three = matrix.copy()
    j = 20
    rows = np.flatnonzero(three[:, j] > three[:, j].min() * 1.5)
    three[rows[len(rows) // 2], j] = three[:, j].min() + 0.5 * (three[:, j].max() - three[:, j].min())
    three /= three.sum(axis=1, keepdims=True)
    assert interval_tables(three) is None
    # Two windows of comparable mass in a row (not a stray cell): not contiguous.
    split = matrix.copy()
    row = split[6]
    high = np.flatnonzero(row > split.min(axis=0) * 1.5)
    middle = high[len(high) // 3: 2 * len(high) // 3]
    moved = math.fsum(row[middle] - split.min(axis=0)[middle])
    row[middle] = split.min(axis=0)[middle]
    far = np.setdiff1d(np.arange(split.shape[1]), high)[:len(middle)]
    row[far] += moved / len(far)
    assert interval_tables(split) is None
    # Any matrix: none.
    assert interval_tables(np.random.default_rng(0).dirichlet(np.ones(30), 8)) is None
    # A real fit that is not two-level: row 0 has a second run of 12 % of the
    # mass. (A fine grid's solution, at resolution 0.25, had columns of many
    # levels with other numpy/scipy versions; with numpy 2.4 / scipy 1.17 it is
    # two-level, and its tables must then give its law.)
    fine = _fit(OptimalUnbiased, 1.0, 0.25)
    tables = interval_tables(fine.transition_matrix_)
    if tables is not None:
        law, _ = interval_law(tables)
        np.testing.assert_allclose(law, fine.transition_matrix_, rtol=1e-9, atol=0)
    two_runs = _fit(OptimalUnbiased, 8.0, 1.0, n=3000)
    assert interval_tables(two_runs.transition_matrix_) is None
    two_runs.transform(np.linspace(0, 40, 50))
    assert two_runs._interval_sampler[1] is None and two_runs._row_sampler is not None


# -- the compiled sampler -------------------------------------------------------------------------


def test_the_compiled_sampler_draws_the_matrix():
    # 300,000 labels over 12 rows (25,000 a row) of a matrix with a tail and tiny
    # end fractions; per-row chi-square (cells pooled from the smallest up to an
    # expectation of 5) at level 1e-6 / 12: a correct sampler fails with
    # probability below 1e-6, a wrong window or low mass (above) moves
    # thousands of draws.
    matrix = _two_level(isolated=True, tiny_ends=True, seed=3)
    tables = interval_tables(matrix)
    codes = np.repeat(np.arange(matrix.shape[0]), 25_000)
    out = S.sample_rows(np.random.default_rng(5), np.arange(matrix.shape[1], dtype=float),
                        codes=codes, interval=tables).astype(np.int64)
    for i in range(matrix.shape[0]):
        counts = np.bincount(out[codes == i], minlength=matrix.shape[1])
        assert np.all(counts[matrix[i] == 0] == 0)
        assert _pooled_chi_square(counts, matrix[i] * 25_000) > 1e-6 / 12
    assert np.count_nonzero(out[codes == 0] == matrix.shape[1] - 1) > 100  # the tail's cell


@pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")
def test_the_mechanisms_sample_their_matrix_through_it():
    mech = _fit(OptimalUnbiased, 1.0, 4.0)
    audit_sampler(mech, labels=mech.input_values_[[0, 5, 10]], n_per_label=40_000)
    assert mech._interval_sampler[1] is not None  # the interval tables sampled
    assert "_interval_sampler" in type(mech)._PACKED_CACHES
    bv = _fit(BiasVarianceRandomizer, 1.0, 4.0)
    audit_sampler(bv, labels=bv.input_values_[[0, 5, 10]], n_per_label=40_000)
    assert bv._interval_sampler[1] is not None


def _args(key, tables, outputs, n, y, grid, codes):
    """Arguments of the rows kernel for the interval draw (as sample_rows)."""
    def args_for(rng):
        out = np.empty(n)
        return S._rows_args(codes, y, grid, S._EMPTY_F, tables.constants, rng,
                            np.concatenate([outputs, outputs]), out,
                            (tables.heads, tables.table, *tables.tail)), out

    return S._DISCRETE_ROWS[key], args_for


def _case(path, n=3000):
    matrix = _two_level(n_rows=17, isolated=True, seed=4)
    tables = interval_tables(matrix)
    outputs = np.arange(matrix.shape[1]) * 0.5 - 3.0
    values = np.linspace(-3.0, 5.0, 17)
    rng = np.random.default_rng(3)
    # Half the labels in row 0, whose tail (~1.3 %) is then drawn ~20 times.
    if path == "codes":
        codes = rng.integers(0, 17, n)
        codes[::2] = 0
        return (False, "interval"), tables, outputs, n, S._EMPTY_F, (
            S._EMPTY_F, S._EMPTY_I, S._NO_GRID), codes
    y = rng.uniform(-4.0, 6.0, n)
    y[:17] = values
    y[18::2] = values[0]
    grid = S.rounding_grid(values, arithmetic=path == "grid")
    return (True, "interval"), tables, outputs, n, y, grid, S._EMPTY_I


def _twin_run(kernel, args_for):
    """(output bits, final state) of the kernel's twin from seed 21."""
    rng = np.random.default_rng(21)
    args, out = args_for(rng)
    _twin.twin(kernel)(*args)
    return out.view(np.int64).copy(), rng.bit_generator.state


@pytest.mark.parametrize("path", ["codes", "grid", "grid-buckets"])
def test_twin_stream_and_generator_agree_bit_for_bit(path):
    key, tables, outputs, n, y, grid, codes = _case(path)
    kernel, args_for = _args(key, tables, outputs, n, y, grid, codes)
    out = _three_ways(kernel, args_for)  # the stream, numba's Generator and the twin agree
    # The tail was drawn: more digits read than one a label (and one a rounding).
    _, state = _twin_run(kernel, args_for)
    plain = np.random.default_rng(21)
    plain.random(n * (1 if path == "codes" else 2))
    assert state != plain.bit_generator.state
    # sample_rows runs this kernel: the same outputs from the same seed.
    kwargs = {"codes": codes} if path == "codes" else {"y": y, "grid": grid}
    same = S.sample_rows(np.random.default_rng(21), outputs, interval=tables, **kwargs)
    assert np.array_equal(same.view(np.int64), out.view(np.int64))


def test_keyed_rows_read_their_own_streams():
    key, tables, outputs, n, y, grid, codes = _case("grid")
    kernel, args_for = _args(key, tables, outputs, n, y, grid, codes)
    (args, out) = args_for(_keyed(n))
    kernel(*args)
    (targs, tout) = args_for(_keyed(n))
    _twin.twin(kernel)(*targs)
    assert np.array_equal(out.view(np.int64), tout.view(np.int64))
    # A suffix of the rows, keyed as before, gives their outputs.
    from skdp_label._kernels._philox import KeyedRows

    lo = np.arange(n, dtype=np.uint64)[1234:] * np.uint64(7919)
    suffix = KeyedRows(np.uint64(5), np.uint64(6), np.uint64(0), lo, lo + np.uint64(1))
    _, tail_args_for = _args(key, tables, outputs, n - 1234, y[1234:], grid, codes)
    (sargs, sout) = tail_args_for(suffix)
    kernel(*sargs)
    assert np.array_equal(sout.view(np.int64), out[1234:].view(np.int64))


def _mutant(kernel, old, new):
    """The rows kernel compiled from its source with ``old`` replaced by ``new``
    (its closure's path constants as globals)."""
    source = inspect.getsource(kernel.py_func)  # as indented in _sampling.py
    assert source.count(old) == 1
    source = textwrap.dedent(source.replace(old, new))
    source = source.replace("@numba.njit(cache=True, nogil=True)\n", "")
    namespace = dict(kernel.py_func.__globals__)
    code = kernel.py_func.__code__
    namespace.update(zip(code.co_freevars, (c.cell_contents for c in kernel.py_func.__closure__)))
    exec(source, namespace)  # noqa: S102 (our own kernel source, mutated)
    return numba.njit(nogil=True)(namespace[kernel.py_func.__name__])


@pytest.mark.parametrize("old, new", [
    ("                            release(rng, s)\n                            j = _categorical_tail",
     "                            j = _categorical_tail"),  # the tail draws from a stale state
    ("                            )\n                            s = hold(rng)\n",
     "                            )\n"),  # no hold after the tail: its digits are read again
], ids=["no-release-before-tail", "no-hold-after-tail"])
def test_a_kernel_that_forgets_to_release_or_hold_is_caught(old, new):
    key, tables, outputs, n, y, grid, codes = _case("grid")
    kernel, args_for = _args(key, tables, outputs, n, y, grid, codes)
    bits, state = _twin_run(kernel, args_for)
    rng = np.random.default_rng(21)
    args, out = args_for(rng)
    call_with_stream(_mutant(kernel, old, new), rng, *args)
    assert not (np.array_equal(out.view(np.int64), bits) and rng.bit_generator.state == state)
