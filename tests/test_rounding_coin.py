"""The rounding coin of ``sample_rows`` (grid and pieces rows), drawn from the
low 11 bits of the word whose top 53 bits are the row's draw digit.

* On scripted words, every value b of the coin's bits against m =
  floor(t 2**11) decides as it must (b < m up, b > m down), and the tie
  b = m reads an exact Bernoulli of the fraction t 2**11 - m on fresh
  digits: so P(up) is exactly the float t (checked in rational arithmetic
  over all 2048 values of b), at t = 0, t = 1, t 2**11 an integer, labels on
  grid points, -0.0 and labels outside the grid; the same in the Python
  twin, and no word read more or less than the decision needs.
* The tie's out-of-line draw runs with the held PCG64 state released: a
  kernel that skips the release (or the hold after it) is caught.
* The sampled law is the mechanism's mixture (1 - t) row_lo + t row_hi (the
  unbiased randomizers on the interval, alias and RR paths; the
  quantization family's pieces).
* Twin and kernel agree on every source; keyed rows do not depend on the
  batch split.
"""

import inspect
import math
import textwrap
import warnings
from fractions import Fraction

import numba
import numpy as np
import pytest

from _audit import chi_square_pvalue
from skdp_label import PrivacyLeakWarning
from skdp_label._kernels import _sampling as S
from skdp_label._kernels import _twin
from skdp_label._kernels._pcg64 import call_with_stream
from test_fast_samplers import _keyed
from test_numerics import _untemper

DIGIT = 2**53


# At most this many scripted draws a Generator (two of MT19937's 624 outputs each).
_MAX_SCRIPTED = 312


def _scripted(items):
    """A numpy Generator on MT19937 whose draws are the scripted ``items``:
    ``('w', word)`` for a kernel's word (``next_uint64``: two outputs, the
    high half first), ``('d', digit)`` for a ``random()`` digit (two outputs
    a, b with (a >> 5) 2**26 + (b >> 6) = digit), as test_numerics.scripted.
    A real Generator (no type of the tests' own: a kernel compiled for one
    would enter numba's cache, which other processes could not load)."""
    outputs = []
    for kind, value in items:
        if kind == "w":
            outputs += [value >> 32, value & 0xFFFFFFFF]
        else:
            outputs += [(value >> 26) << 5, (value & (2**26 - 1)) << 6]
    assert len(outputs) <= 2 * _MAX_SCRIPTED
    bit_generator = np.random.MT19937(0)  # its other key words: any
    key = np.array(bit_generator.state["state"]["key"], dtype=np.uint32)
    key[: len(outputs)] = [_untemper(o) for o in outputs]
    bit_generator.state = {"bit_generator": "MT19937", "state": {"key": key, "pos": 0}}
    return np.random.Generator(bit_generator)


def _run_scripted(kernel, mode, labels, y, grid, right, tables, outputs, codes=None):
    """The kernel's outputs for labels ``y`` (or rows ``codes``) whose draws
    are ``labels[i]`` (a list of items each), in calls of at most
    _MAX_SCRIPTED draws; each call must read exactly its labels' draws."""
    out, start = [], 0
    while start < len(labels):
        stop, count = start, 0
        while stop < len(labels) and count + len(labels[stop]) <= _MAX_SCRIPTED:
            count += len(labels[stop])
            stop += 1
        rng = _scripted([item for label in labels[start:stop] for item in label])
        if codes is None:
            out.append(_run(kernel, mode, rng, y[start:stop], grid, right, tables, outputs))
        else:
            out.append(_run(kernel, mode, rng, y, grid, right, tables, outputs, codes[start:stop]))
        assert rng.bit_generator.state["state"]["pos"] == 2 * count  # none skipped or read twice
        start = stop
    return np.concatenate(out)


def _tables_kernel(rows_from):
    return S._DISCRETE_ROWS["pieces" if rows_from == "pieces" else True, False]


def _run(kernel, mode, rng, y, grid, right, tables, outputs, codes=S._EMPTY_I):
    out = np.empty(max(y.shape[0], codes.shape[0]))
    args = S._rows_args(codes, y, grid, right, S._EMPTY_F, rng, outputs, out, tables)
    if mode == "twin":
        _twin.twin(kernel)(*args)
    elif mode == "stream":
        call_with_stream(kernel, rng, *args)
    else:
        kernel(*args)
    return out


def _identity_case(rows_from):
    """(grid, right, tables, outputs, positions): rows drawn with an identity
    matrix (the output is the row), and a function giving each label's
    (lower row, t) as the kernel must compute them."""
    if rows_from == "pieces":
        left, right = np.array([0.0, 1.0, 2.5, 6.0]), np.array([1.0, 2.5, 2.5, 7.0])
        left, par = S.piece_lookup(left, right)
        grid, n_rows = (left, S._EMPTY_I, par), 8

        def positions(v):
            p = min(max(int(np.searchsorted(left, v, side="right")) - 1, 0), 3)
            width = right[p] - left[p]
            t = min(max((v - left[p]) / width if width > 0.0 else 0.0, 0.0), 1.0) + 0.0
            return 2 * p, t
    else:
        values = np.arange(0.0, 5.0) if rows_from == "arithmetic" else np.array(
            [0.0, 1.0, 2.5, 3.0, 7.0])
        grid, right, n_rows = S.rounding_grid(values), S._EMPTY_F, values.shape[0]
        assert (grid[1].shape[0] == 0) == (rows_from == "arithmetic")

        def positions(v):
            v = min(max(v, values[0]), values[-1])
            lo = min(int(np.searchsorted(values, v, side="right")) - 1, values.shape[0] - 2)
            return lo, (v - values[lo]) / (values[lo + 1] - values[lo])
    tables = S.categorical_tables(np.eye(n_rows))
    return grid, right, tables, np.arange(n_rows, dtype=np.float64), positions


def _script(cases, positions, gen):
    """(labels, draws, expected rows): one label per (y, b choice, tie
    choice), its draws (a word, any tie digits). A tie's continuation digit
    lies just below ('below': up) or above ('above': down) the first digit
    of the fraction's expansion, or equals it and the next decides ('equal':
    up)."""
    labels, draws, expected = [], [], []
    for y, choice, tie in cases:
        lo, t = positions(y)
        scaled = t * 2048.0
        m = math.floor(scaled)
        b = {"m": m, "below": m - 1, "above": m + 1, "zero": 0, "top": 2047}[choice]
        if not 0 <= b <= 2047:
            continue
        labels.append(y)
        words = [("w", (int(gen.integers(1, DIGIT)) << 11) | b)]
        up = b < m
        if b == m and scaled > m:  # a tie on a positive fraction reads on
            x = (scaled - m) * 2.0**53
            first = math.floor(x)
            if tie == "below" and first > 0:
                words.append(("d", first - 1))
                up = True
            elif tie == "equal" and x > first and math.floor((x - first) * 2.0**53) > 0:
                words += [("d", first), ("d", math.floor((x - first) * 2.0**53) - 1)]
                up = True
            else:
                words.append(("d", first + 1))
                up = False
        draws.append(words)
        expected.append(lo + int(up))
    return np.array(labels), draws, np.array(expected, dtype=np.float64)


_ROWS_FROM = ["arithmetic", "buckets", "pieces"]


@pytest.mark.parametrize("rows_from", _ROWS_FROM)
@pytest.mark.parametrize("mode", ["compiled", "twin"])
def test_the_coin_decides_every_word_as_the_exact_bernoulli(rows_from, mode):
    grid, right, tables, outputs, positions = _identity_case(rows_from)
    gen = np.random.default_rng(3)
    ys = [0.0, -0.0, 1.0, 2.5, 3.0, 4.0, 7.0, 1.0 / 3.0, 0.5, 0.25 + 2.0**-20, 1.7, 2.9999,
          3.0000001, 6.123456789, 0.9999999999999999, 5e-324, -1.0, 8.0, 1e300]
    ys += list(gen.uniform(0.0, 7.0, 40))
    cases = [(y, choice, tie) for y in ys for choice in ("m", "below", "above", "zero", "top")
             for tie in ("below", "above", "equal")]
    y, draws, expected = _script(cases, positions, gen)
    out = _run_scripted(_tables_kernel(rows_from), mode, draws, y, grid, right, tables, outputs)
    np.testing.assert_array_equal(out, expected)
    ties = sum(1 for y_, c, _ in cases if c == "m" and positions(y_)[1] * 2048.0 % 1.0 > 0.0)
    assert ties >= 50  # ties on positive fractions were exercised


@pytest.mark.parametrize("rows_from", _ROWS_FROM)
@pytest.mark.parametrize("t_of", ["third", "integer", "zero", "one", "tiny", "random"])
def test_p_up_is_exactly_the_float_t_over_all_2048_coin_bits(rows_from, t_of):
    # One label per value b of the coin's 11 bits, its tie read on with a
    # digit below the fraction's first and then above it: P(up) = (number
    # of b < m) / 2**11 + P(tie) frac, in rational arithmetic, is t.
    grid, right, tables, outputs, positions = _identity_case(rows_from)
    # (1e300: clipped to the last grid point or piece end, t = 1)
    y0 = {"third": 1.0 / 3.0, "integer": 0.375, "zero": 0.0, "one": 1e300, "tiny": 2.0**-40,
          "random": 0.6180339887498949}[t_of]
    lo, t = positions(y0)
    gen = np.random.default_rng(8)
    scaled = t * 2048.0
    m = math.floor(scaled)
    frac = scaled - m
    for tie_up in (True, False):
        draws = []
        for b in range(2048):
            draws.append([("w", (int(gen.integers(1, DIGIT)) << 11) | b)])
            if b == m and frac > 0.0:
                first = math.floor(frac * 2.0**53)
                draws[-1].append(("d", (first - 1) if tie_up and first > 0 else (first + 1)))
        out = _run_scripted(_tables_kernel(rows_from), "compiled", draws, np.full(2048, y0), grid,
                            right, tables, outputs)
        ups = out - lo
        assert set(np.unique(ups)) <= {0.0, 1.0}
        decided = [int(ups[b]) for b in range(2048) if b != m]
        assert decided == [int(b < m) for b in range(2048) if b != m]
        if m < 2048:
            tie_went_up = bool(ups[m])
            assert tie_went_up == (tie_up and frac > 0.0 and math.floor(frac * 2.0**53) > 0)
        # The law: the tie goes up with probability frac (the exact Bernoulli
        # of its continuation, whose first digit the two scripts bracket).
        p_up = Fraction(sum(decided), 2048) + Fraction(frac) / 2048
        assert p_up == Fraction(t)
    assert {"zero": t == 0.0, "one": t == 1.0, "integer": frac == 0.0}.get(t_of, frac > 0.0)


def _kernel_source_mutant(kernel, old, new, rows_from, draw_by):
    """The rows kernel compiled from its source with ``old`` replaced by ``new``."""
    source = textwrap.dedent(inspect.getsource(kernel.py_func))
    assert source.count(old) == 1, old
    source = source.replace(old, new).replace("@numba.njit(cache=True, nogil=True)\n", "")
    namespace = dict(kernel.py_func.__globals__, rows_from=rows_from, draw_by=draw_by)
    exec(source, namespace)
    return numba.njit(nogil=True)(namespace[kernel.py_func.__name__])


# The tie's lines, as in the dedented source of the kernel (a nested function).
_TIE = """                if b == m:
                    release(rng, s)
                    row += np.int64(bernoulli_exact(scaled - m, rng))
                    s = hold(rng)
"""


@pytest.mark.parametrize("mode", ["compiled", "twin"])
def test_a_one_point_grid_reads_one_word_a_label_and_keeps_the_point(mode):
    # No rounding pass: every label is the grid's one point (t = 0), its
    # word's top bits the draw's digit; b = 0 ties with m = 0 on a fraction
    # of 0, which reads no digit.
    values = np.array([5.0])
    tables = S.categorical_tables(np.array([[0.25, 0.75]]))
    outputs = np.array([-1.0, 1.0])
    gen = np.random.default_rng(2)
    digits = gen.integers(0, DIGIT, 600)
    bits = np.concatenate([[0, 0, 2047], gen.integers(0, 2048, 597)])
    draws = [[("w", (int(d) << 11) | int(b))] for d, b in zip(digits, bits)]
    y = gen.uniform(-10.0, 10.0, 600)
    out = _run_scripted(_tables_kernel("grid"), mode, draws, y, S.rounding_grid(values),
                        S._EMPTY_F, tables, outputs)
    # The row-0 draw of each word's digit: the codes' kernel on rows 0 with those digits.
    ref = _run_scripted(S._DISCRETE_ROWS[False, False], mode, [[("d", int(d))] for d in digits],
                        S._EMPTY_F, (S._EMPTY_F, S._EMPTY_I, S._NO_GRID), S._EMPTY_F, tables,
                        outputs, codes=np.zeros(600, np.int64))
    np.testing.assert_array_equal(out, ref)


@pytest.mark.parametrize("mutation", ["none", "no release", "no hold"])
def test_the_tie_draws_with_the_state_released(mutation):
    # Ties (probability 2**-11) on 300,000 labels: ~150 out-of-line draws
    # from the stream. Through the inlined PCG64 stream, through numba's
    # Generator (no held state) and in the twin: the same outputs and final
    # state. A kernel that does not release the held state before the tie's
    # draw reads digits the stream already gave out (the word of the label
    # itself); one that does not hold it again after reads them again later.
    kernel = _tables_kernel("arithmetic")
    if mutation == "no release":
        kernel = _kernel_source_mutant(kernel, _TIE, _TIE.replace("release(rng, s)", "pass"),
                                       "grid", "tables")
    elif mutation == "no hold":
        kernel = _kernel_source_mutant(kernel, _TIE, _TIE.replace("s = hold(rng)", "pass"),
                                       "grid", "tables")
    grid, right, tables, outputs, _ = _identity_case("arithmetic")
    y = np.random.default_rng(2).uniform(0.0, 4.0, 300_000)
    runs = {}
    for mode in ("stream", "generator"):
        rng = np.random.default_rng(17)
        out = _run(kernel, mode, rng, y, grid, right, tables, outputs)
        runs[mode] = out, rng.bit_generator.state
    same = (np.array_equal(runs["stream"][0], runs["generator"][0])
            and runs["stream"][1] == runs["generator"][1])
    assert same == (mutation == "none")
    if mutation == "none":
        rng = np.random.default_rng(17)
        head = _run(_twin.twin(kernel), "compiled", rng, y[:3000], grid, right, tables, outputs)
        np.testing.assert_array_equal(head, runs["stream"][0][:3000])


def _fitted(name, **params):
    from skdp_label.mechanisms import get_mechanism_class

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        mech = get_mechanism_class(name)(epsilon=1.0, bounds=(0.0, 40.0), random_state=0, **params)
        return mech.fit(np.random.default_rng(0).uniform(0.0, 40.0, 5000))


def _mixture(mech, y0):
    """Output law of label ``y0``: the rows of its grid neighbours mixed by
    the rounding weight, or the quantization family's distribution."""
    if hasattr(mech, "output_distribution"):
        return mech.output_distribution(np.array([y0]))[0]
    values, matrix = mech.input_values_, mech.transition_matrix_
    lo = int(np.searchsorted(values, y0, side="right")) - 1
    t = (y0 - values[lo]) / (values[lo + 1] - values[lo])
    return (1.0 - t) * matrix[lo] + t * matrix[lo + 1]


@pytest.mark.parametrize("name, params, path", [
    ("unbiased", {"resolution": 1.0}, "interval"),
    ("unbiased", {"resolution": 1.0}, "alias"),
    ("bias-variance", {"resolution": 1.0}, None),
    ("debiased-rr", {"resolution": 1.0}, None),
    ("mvu", {"outputs": 4}, None),
    ("rqm", {}, None),
])
def test_the_sampled_law_is_the_mechanisms_mixture(name, params, path):
    mech = _fitted(name, **params)
    if path == "alias":  # the per-row alias tables instead of the interval sampler
        mech._interval_tables = lambda: None
    elif path == "interval":
        assert mech._interval_tables() is not None
    n = 120_000
    for y0 in (3.3, 27.77):
        law = _mixture(mech, y0)
        out = mech._randomize_column(np.full(n, y0), np.random.default_rng(int(y0 * 100)))
        assert chi_square_pvalue(out, mech.output_values_, law) > 1e-4


@pytest.mark.parametrize("rows_from", ["arithmetic", "pieces"])
def test_twin_and_kernel_agree_on_every_source(rows_from):
    kernel = _tables_kernel(rows_from)
    grid, right, tables, outputs, _ = _identity_case(rows_from)
    y = np.random.default_rng(4).uniform(-0.5, 7.5, 2500)
    for make in (lambda: np.random.default_rng(9), lambda: np.random.Generator(np.random.MT19937(9)),
                 lambda: np.random.Generator(np.random.Philox(9)), lambda: _keyed(y.shape[0])):
        results = []
        keyed = not isinstance(make(), np.random.Generator)
        for mode in ("compiled", "twin") + (() if keyed else ("stream",)):
            rng = make()
            out = _run(kernel, mode, rng, y, grid, right, tables, outputs)
            results.append((out.tobytes(), rng.random()))  # and the same next draw
        assert all(r == results[0] for r in results), make


@pytest.mark.parametrize("rows_from", _ROWS_FROM)
def test_keyed_rows_do_not_depend_on_the_batch_split(rows_from):
    from skdp_label._kernels._philox import KeyedRows

    kernel = _tables_kernel(rows_from)
    grid, right, tables, outputs, _ = _identity_case(rows_from)
    n = 1500
    y = np.random.default_rng(6).uniform(-0.5, 7.5, n)
    lo = np.arange(n, dtype=np.uint64) * np.uint64(7919)
    hi = lo + np.uint64(1)

    def keyed(rows):
        return KeyedRows(np.uint64(5), np.uint64(6), np.uint64(0), lo[rows], hi[rows])

    whole = _run(kernel, "compiled", keyed(slice(None)), y, grid, right, tables, outputs)
    parts = [_run(kernel, "compiled", keyed(slice(a, b)), y[a:b], grid, right, tables, outputs)
             for a, b in ((0, 1), (1, 300), (300, 301), (301, 1500))]
    np.testing.assert_array_equal(np.concatenate(parts), whole)
    # Reversed rows: each row's output moves with its key.
    order = np.arange(n)[::-1].copy()
    reversed_out = _run(kernel, "compiled", keyed(order), y[order], grid, right, tables, outputs)
    np.testing.assert_array_equal(reversed_out, whole[order])
