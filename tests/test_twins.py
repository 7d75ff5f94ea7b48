"""Python twins of the sampling kernels (``_kernels._twin``).

* The scalar bindings of a twin (``log``, ``exp``, ``floor``) give the bits
  numba's compiled ``np.log`` / ``np.exp`` / ``np.floor`` give, over many
  arguments (subnormals, ties, signed zeros).
* Each kernel a small call may interpret (discrete Laplace, staircase,
  the four finite-output kernels) returns the compiled kernel's output bit
  for bit from the same seed, and leaves the Generator in the same state
  (the same digits were read): across rates (the super-block paths of
  ``geometric`` below 2**-10, by inversion and by rejection), staircase
  widths, heavy-tailed tables whose exact tail is reached, rounding grids,
  and scripted digits that tie with the probabilities (read further).
* Deliberately wrong bindings (a perturbed log, a rounding floor, swapped
  own/alias cells) are caught by the same comparisons.
* The bulk staircase kernel (alias tables of values, cells, steps; from
  10,000 labels) too, and a wrong binding in it is caught.
* The caps (ski rental): COLD_SCALE times more interpreted work when the
  kernel is not in numba's cache, then a cold kernel compiles in the
  background (tests/test_background.py); in_numba_cache reads that cache.
* Public paths: seeded fits through the twins equal seeded fits through
  the compiled kernels; keyed sources and large calls never use a twin.
"""

import math

import numba
import numpy as np
import pytest

from skdp_label._kernels import _sampling as S
from skdp_label._kernels import _twin
from skdp_label._kernels._pcg64 import call_with_stream, held_int_digit, held_word, hold, release
from skdp_label._warmup import _public_inputs
from skdp_label.mechanisms import get_mechanism_class, mechanism_names
from conftest import force_kernels
from test_fast_samplers import _heavy_tail_matrix, _keyed
from test_numerics import DIGIT, digits_used, scripted


def _same(a, b):
    return np.array_equal(np.asarray(a).view(np.int64), np.asarray(b).view(np.int64))


def _state(rng):
    return rng.bit_generator.state["state"]


@numba.njit
def _numba_scalars(x, out):
    for i in range(x.shape[0]):
        out[0, i] = np.log(x[i])
        out[1, i] = np.exp(-x[i])
        out[2, i] = np.floor(x[i] * 3.7 - 1.0)


@numba.njit
def _held_words(rng, out):
    # Words and digits interleaved, as the rounding rows read them (a word,
    # then a digit of a tie or an exact tail).
    s = hold(rng)
    for i in range(out.shape[0]):
        w, s = held_word(rng, s)
        d, s = held_int_digit(rng, s)
        out[i, 0] = w
        out[i, 1] = np.uint64(d)
    release(rng, s)


@pytest.mark.parametrize("source", ["pcg64", "mt19937", "philox", "sfc64", "pcg64-subclass",
                                    "keyed"])
def test_held_word_twin_reads_the_compiled_words(source):
    # The word of held_word: PCG64's output through the inlined stream,
    # numba's next_uint64 of any other bit generator, a keyed row's next
    # word; the twin reads the same words and digits, and leaves the source
    # in the same state. For PCG64, Philox and SFC64 the word's top 53 bits
    # are random()'s digit.
    class Derived(np.random.PCG64):
        pass

    bit_generators = {"pcg64": np.random.PCG64, "mt19937": np.random.MT19937,
                      "philox": np.random.Philox, "sfc64": np.random.SFC64,
                      "pcg64-subclass": Derived}

    def make():
        if source == "keyed":
            rows = _keyed(1)
            rows.begin_row(0)
            return rows
        return np.random.Generator(bit_generators[source](31))

    runs = []
    for how in ("compiled", "twin"):
        rng, out = make(), np.empty((300, 2), dtype=np.uint64)
        if how == "twin":
            _twin.twin(_held_words)(rng, out)
        elif source == "keyed":
            _held_words(rng, out)
        else:
            call_with_stream(_held_words, rng, rng, out)
        runs.append((out, rng.random()))
    assert np.array_equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    if source in ("pcg64", "philox", "sfc64", "pcg64-subclass"):
        reference = make()
        digits = (reference.random(600) * DIGIT).astype(np.uint64)
        assert np.array_equal(runs[0][0][:, 0] >> np.uint64(11), digits[0::2])
        assert np.array_equal(runs[0][0][:, 1], digits[1::2])


def test_scalar_bindings_are_the_compiled_ones():
    rng = np.random.default_rng(0)
    x = np.concatenate([
        rng.random(20_000), rng.random(5_000) * 745.0, np.ldexp(rng.random(5_000), -1070),
        1.0 - rng.random(2_000) * 1e-12, np.arange(-10, 10) / 3.7,
        [0.0, -0.0, 5e-324, 1.0, 2.0**60, -709.5, -710.0, -1e300, math.inf, -math.inf, math.nan],
    ])
    compiled = np.empty((3, x.shape[0]))
    _numba_scalars(x, compiled)
    ours = np.array([
        [_twin._log(v) for v in x.tolist()],
        [_twin._exp(-v) for v in x.tolist()],
        [_twin._floor(v * 3.7 - 1.0) for v in x.tolist()],
    ])
    nan = np.isnan(compiled)
    assert np.array_equal(np.isnan(ours), nan) and np.all(nan[0][x < 0])  # log(x < 0)
    assert _same(ours[~nan], compiled[~nan])
    for v in [-0.0, 0.0, -0.5, 0.5, -2.0**52 - 2, 2.0**53, math.inf, -math.inf]:
        assert _same(_twin._floor(v), np.floor(v))


def _laplace(kernel, seed, lam, n):
    rng = np.random.default_rng(seed)
    out = np.empty(n)
    kernel(rng, S.staircase_constants(lam, 1, 1), out)
    return out, _state(rng)


# 5: mostly zeros; 1 and 0.05: inversion; 2**-12: super-blocks with the
# offset by inversion; 1e-7: super-blocks of more than 4096 values (uniform
# offset, accepted by an exact Bernoulli of exp).
@pytest.mark.parametrize("lam", [5.0, 1.0, 0.05, 2.0**-12, 1e-7])
def test_discrete_laplace_twin_is_the_kernel(lam):
    got, state = _laplace(_twin.twin(S._discrete_laplace), 3, lam, 3000)
    ref, ref_state = _laplace(S._discrete_laplace, 3, lam, 3000)
    assert _same(got, ref) and state == ref_state
    assert np.unique(ref).size > (2 if lam > 2 else 10)


@pytest.mark.parametrize(
    "lam, width, r", [(1.0, 3, 2), (0.01, 40, 7), (2.0**-14, 5, 5), (0.5, 1, 1)]
)
@pytest.mark.parametrize("clip", [False, True])
def test_staircase_twin_is_the_kernel(lam, width, r, clip):
    y = np.random.default_rng(1).normal(size=2000) * 60.0
    c = S.staircase_constants(lam, width, r)
    outs = []
    for kernel in (_twin.twin(S._staircase_additive), S._staircase_additive):
        rng, out = np.random.default_rng(4), np.empty(y.shape[0])
        kernel(y, rng, 0.25, c, clip, -100.0, 100.0, out)
        outs.append((out, _state(rng)))
    assert _same(outs[0][0], outs[1][0]) and outs[0][1] == outs[1][1]


# Gaussian envelopes of one value a cell (3) and of 16 (900); the proposal
# sampler (discrete Laplace proposals, exact acceptance) at both scales.
@pytest.mark.parametrize("sigma", [3.0, 900.0])
def test_gaussian_twins_are_the_kernels(sigma):
    from skdp_label.mechanisms.classic._noise import gaussian_cell_table

    table = gaussian_cell_table(sigma)
    y = np.random.default_rng(2).normal(size=1500) * 2.0 * sigma
    c = S.staircase_constants(1.0 / (math.floor(sigma) + 1.0), 1, 1)
    runs = []
    for pick in (_twin.twin, lambda kernel: kernel):
        rng, out, noise = np.random.default_rng(6), np.empty(y.shape[0]), np.empty(300)
        g, prob, alias, squeeze = table
        pick(S._gaussian_additive)(
            y, rng, 0.5, g, S.envelope_records(prob, alias, g[4], squeeze), True, -3.0 * sigma,
            3.0 * sigma, out,
        )
        pick(S._discrete_gaussian)(rng, sigma, c, noise)
        runs.append((out, noise, _state(rng)))
    assert table[0][4] == (16.0 if sigma > 100 else 1.0)
    assert _same(runs[0][0], runs[1][0]) and _same(runs[0][1], runs[1][1])
    assert runs[0][2] == runs[1][2]


_VALUES = np.array([0.0, 1.0, 2.5, 3.0, 7.0])


# An evenly spaced grid: rounding_grid's arithmetic lookup (no bucket table).
_EVEN_VALUES = np.linspace(-0.5, 7.0, 5)


def _rows_call(rounding, use_rr, n, values=_VALUES):
    """Arguments of the finite-output kernel (rounding, use_rr), as
    sample_rows builds them, for heavy-tailed tables (rtol=1e-12)."""
    matrix = _heavy_tail_matrix()
    gen = np.random.default_rng(21)
    kwargs = {"y": gen.uniform(-1.0, 8.0, n), "grid": S.rounding_grid(values)} if rounding else {
        "codes": gen.integers(0, 5, n)}
    if rounding:  # labels on the grid points and one float either side of them
        kwargs["y"][: 3 * values.size] = np.concatenate(
            [values, np.nextafter(values, -np.inf), np.nextafter(values, np.inf)])
    if use_rr:
        kwargs["rr"] = S.rr_constants(5, 0.6)
        outputs = values
    else:
        kwargs["tables"] = S.categorical_tables(matrix, rtol=1e-12)
        outputs = np.arange(matrix.shape[1]) * 0.5 - 3.0
    return outputs, kwargs


def _sample(monkeypatch, use_twin, rng, outputs, kwargs):
    with monkeypatch.context() as m:
        force_kernels(m, use_twin)
        return S.sample_rows(rng, outputs, **kwargs)


@pytest.mark.parametrize("ends", [_VALUES, np.linspace(-0.5, 7.0, 8)])
def test_piece_rows_twin_is_the_kernel(monkeypatch, ends):
    # The 'pieces' rows of sample_rows (the quantization family): labels on
    # piece ends, heavy-tailed tables; pieces found by counting (with an empty
    # piece, t = 0) and, 7 contiguous evenly spaced ones, by arithmetic.
    outputs, _ = _rows_call(False, False, 600)
    left, right = ends[:-1].copy(), ends[1:].copy()
    if left.size != 7:
        right[2] = left[2]  # an empty piece
    assert (S.piece_lookup(left, right)[1][1] > 0.0) == (left.size == 7)
    y = np.random.default_rng(3).uniform(-1.0, 8.0, 600)
    y[: 2 * left.size] = np.concatenate([left, right])
    matrix = _heavy_tail_matrix()
    tables = S.categorical_tables(np.resize(matrix, (2 * left.size, matrix.shape[1])), rtol=1e-12)
    kwargs = {"y": y, "pieces": (left, right), "tables": tables}
    runs = []
    for use_twin in (True, False):
        rng = np.random.default_rng(99)
        runs.append((_sample(monkeypatch, use_twin, rng, outputs, kwargs), _state(rng)))
    assert _same(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    assert (~np.isin(runs[1][0], outputs[:14])).sum() >= 3  # the exact tail was reached


@pytest.mark.parametrize("rounding, values", [(False, _VALUES), (True, _VALUES), (True, _EVEN_VALUES)])
@pytest.mark.parametrize("use_rr", [False, True])
def test_finite_output_twin_is_the_kernel(monkeypatch, rounding, values, use_rr):
    # 600 labels: two full blocks of 256 and a partial one.
    outputs, kwargs = _rows_call(rounding, use_rr, 600, values)
    if rounding:  # both lookups of rounding_grid
        assert (kwargs["grid"][1].size == 0) == (values is _EVEN_VALUES)
    runs = []
    for use_twin in (True, False):
        rng = np.random.default_rng(99)
        runs.append((_sample(monkeypatch, use_twin, rng, outputs, kwargs), _state(rng)))
    assert _same(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    if not use_rr:
        assert (~np.isin(runs[1][0], outputs[:14])).sum() >= 3  # the exact tail was reached


def _tie_scripts(c, n):
    """Digit scripts around the staircase's first-digit threshold ``c[6]``
    (the same digit with the sign bit set, one off, the fraction's digit):
    ties with the Bernoulli(P(Z != 0)) read further digits."""
    qd, frac = int(c[6]), c[7]
    frac_digit = int(frac * DIGIT)
    rng = np.random.default_rng(8)
    choices = [qd, qd + 2**52, qd - 1, qd + 1, frac_digit, frac_digit + 1, 0, DIGIT - 1]
    return [[choices[j] if j < len(choices) else int(rng.integers(DIGIT))
             for j in rng.integers(0, len(choices) + 3, 300)] for _ in range(n)]


@pytest.mark.parametrize("lam, width, r", [(0.7, 1, 1), (0.3, 4, 2)])
def test_twins_read_the_same_digits_on_ties(lam, width, r):
    c = S.staircase_constants(lam, width, r)
    y = np.zeros(40)
    for script in _tie_scripts(c, 5):
        runs = []
        for kernel in (_twin.twin(S._staircase_additive), S._staircase_additive):
            rng, out = scripted(script), np.empty(y.shape[0])
            kernel(y, rng, 1.0, c, False, 0.0, 0.0, out)
            runs.append((out, digits_used(rng)))
        assert _same(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]


# -- mutations: a wrong binding is caught --------------------------------------


class _PerturbedLog(_twin._Numpy):
    log = staticmethod(lambda x: math.log(x) * (1.0 + 2.0**-20))


class _RoundingFloor(_twin._Numpy):
    floor = staticmethod(lambda x: float(math.floor(x + 0.5)))


def _mutate(monkeypatch, original, mutant):
    monkeypatch.setattr(_twin, "_TWINS", {})
    monkeypatch.setitem(_twin._GLOBALS, id(original), mutant)


# A log off by 1e-6 relative moves a geometric of mean ~1000 across an
# integer in ~1e-3 of the draws.
@pytest.mark.parametrize("mutant", [_PerturbedLog(), _RoundingFloor()])
def test_a_wrong_scalar_binding_is_caught(monkeypatch, mutant):
    ref, _ = _laplace(S._discrete_laplace, 3, 2.0**-12, 3000)
    _mutate(monkeypatch, np, mutant)
    got, _ = _laplace(_twin.twin(S._discrete_laplace), 3, 2.0**-12, 3000)
    assert not _same(got, ref)


def test_a_wrong_float_bits_is_caught(monkeypatch):
    # Bit patterns compared the other way round: each cell's own and alias
    # outputs swap.
    outputs, kwargs = _rows_call(False, False, 600)
    ref = _sample(monkeypatch, False, np.random.default_rng(99), outputs, kwargs)
    _mutate(monkeypatch, S.float_bits, lambda x: -_twin._float_bits(x))
    got = _sample(monkeypatch, True, np.random.default_rng(99), outputs, kwargs)
    assert not _same(got, ref)


# -- public paths --------------------------------------------------------------


def _kernel_of(x):
    return x + 1.0


def _runs_compiled(picked, kernel, rng):
    """Whether ``picked`` is ``kernel`` compiled, drawing from ``rng`` through
    an inlined copy of its PCG64 (``_kernels._pcg64``)."""
    from skdp_label._kernels._pcg64 import call_with_stream

    return picked.func is call_with_stream and picked.args == (kernel, rng)


def _compiles(picked, kernel, in_cache, rng):
    """Whether ``picked`` runs ``kernel`` compiled: at once (a warm cache: a
    load), or once compiled in the background, meanwhile its twin
    (a cold cache: ``_kernels._background``)."""
    from skdp_label._kernels._background import run_while_compiling

    if in_cache:
        return _runs_compiled(picked, kernel, rng)
    return picked.func is run_while_compiling and picked.args == (kernel,)


@pytest.mark.parametrize("in_cache", [True, False])
def test_kernel_for_interprets_a_bounded_amount_of_generator_work(monkeypatch, in_cache):
    # The cap is the caller's with the kernel in numba's cache (loading is
    # cheap), COLD_SCALE times more when it would compile.
    monkeypatch.setattr(_twin, "in_numba_cache", lambda kernel: in_cache)
    cap = 10 if in_cache else 10 * _twin.COLD_SCALE
    rng = np.random.default_rng(0)
    kernel = numba.njit(_kernel_of)
    assert _twin.kernel_for(kernel, rng, cap - 4, 10) is _twin.twin(kernel)
    assert _twin.kernel_for(kernel, rng, 4, 10) is _twin.twin(kernel)
    assert _compiles(_twin.kernel_for(kernel, rng, 1, 10), kernel, in_cache, rng)  # cap reached
    assert _twin.twin(kernel)(1.0) == kernel(1.0) == 2.0
    other = numba.njit(_kernel_of)
    assert _compiles(_twin.kernel_for(other, rng, cap + 1, 10), other, in_cache, rng)  # a large call
    assert _twin.kernel_for(other, _keyed(3), 1, 10) is other  # keyed: compiled
    assert _twin.kernel_for(other, rng, 1, 10) is _twin.twin(other)
    other(1.0)
    # compiled in this process now
    assert _runs_compiled(_twin.kernel_for(other, rng, 1, 10), other, rng)
    mt = np.random.Generator(np.random.MT19937(0))
    assert _twin.kernel_for(other, mt, 1, 10) is other  # not PCG64: draws through numpy


def test_in_numba_cache_is_whether_a_load_would_find_the_kernel(monkeypatch, tmp_path):
    monkeypatch.setattr(numba.config, "CACHE_DIR", str(tmp_path))  # read when caching is enabled
    first = numba.njit(cache=True)(_kernel_of)
    assert not _twin.in_numba_cache(first)
    first(1.0)  # compiles and writes the cache
    assert _twin.in_numba_cache(first)
    assert _twin.in_numba_cache(numba.njit(cache=True)(_kernel_of))  # a new process's view
    assert not _twin.in_numba_cache(numba.njit(_kernel_of))  # never cached


def test_the_cold_caps_cover_a_warm_up_fit():
    # Ski rental: a fresh environment interprets the 20,000 labels of
    # ``skdp-label warmup`` (bench_cold_start) instead of compiling, and the
    # interpreted work stays below a compile (~1 s) at the worst measured
    # 17 us a label and 4 us a draw.
    from skdp_label import _warmup

    cold_labels = _twin.COLD_SCALE * _twin.MAX_LABELS
    assert _warmup._N_LABELS <= cold_labels and cold_labels * 17e-6 < 0.6
    assert _twin.COLD_SCALE * _twin.MAX_DRAWS * 4e-6 < 0.6
    assert _twin.MAX_LABELS * 17e-6 < 0.1 and _twin.MAX_DRAWS * 4e-6 < 0.1  # ~ a load


# The three alias tables of the bulk staircase kernel (from 10,000 labels):
# super-block cells (Laplace), steps (staircase), values (discrete Laplace).
_BULK = [("laplace", 8192), ("staircase", 0), ("discrete-laplace", 1)]


def _bulk_fit(monkeypatch, name, use_twin):
    y = np.random.default_rng(3).uniform(0.0, 50.0, 10_000)
    if name.startswith("discrete"):
        y = np.rint(y)
    with monkeypatch.context() as m:
        used = force_kernels(m, use_twin)
        mech = get_mechanism_class(name)(epsilon=1.0, bounds=(0, 50), random_state=7)
        out = mech.fit_transform(y)
    assert not np.array_equal(out, y)
    return out, mech, used


@pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")
@pytest.mark.parametrize("name, cell", _BULK)
def test_bulk_staircase_twin_is_the_kernel(monkeypatch, name, cell):
    got, mech, used = _bulk_fit(monkeypatch, name, True)
    ref, _, _ = _bulk_fit(monkeypatch, name, False)
    table = mech._alias_table[1]
    assert "_staircase_additive_bulk" in used and table[4] == cell
    assert (table[6] is not None) == (name == "staircase")  # the table of pieces
    assert _same(got, ref)
    assert _twin.kernel_for(S._staircase_additive_bulk, _keyed(3), 1) is S._staircase_additive_bulk


class _RoundingInt64(_twin._Numpy):
    # A float rounded to the nearest integer, not truncated: the cell a
    # digit picks (its record's index) is one off for about half the digits.
    int64 = staticmethod(lambda x: int(round(x)) if isinstance(x, float) else int(x))


@pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")
def test_a_wrong_binding_in_the_bulk_twin_is_caught(monkeypatch):
    ref, _, _ = _bulk_fit(monkeypatch, "laplace", False)
    _mutate(monkeypatch, np, _RoundingInt64())
    got, _, _ = _bulk_fit(monkeypatch, "laplace", True)
    assert not _same(got, ref)


def test_a_twin_refuses_an_unknown_intrinsic():
    from numba.extending import intrinsic

    @intrinsic
    def unknown(typingctx, x):  # pragma: no cover - never compiled
        raise NotImplementedError

    @numba.njit
    def kernel(x):
        return unknown(x)

    with pytest.raises(TypeError, match="unknown"):
        _twin.twin(kernel)


@pytest.mark.parametrize("options", [{"fastmath": True}, {"error_model": "numpy"}])
def test_a_twin_refuses_float_semantics_python_does_not_have(options):
    kernel = numba.njit(**options)(lambda x: x / 3.0)
    with pytest.raises(TypeError, match="no exact Python twin"):
        _twin.twin(kernel)


def test_a_twin_refuses_an_unbound_transcendental_function():
    # numpy's log1p may differ from the C library's in the last bit.
    @numba.njit
    def kernel(x):
        return np.log1p(x)

    with pytest.raises(AttributeError, match="log1p"):
        _twin.twin(kernel)(0.5)


# Every mechanism, on the warm-up's public inputs (bounds (0, 50) or five
# classes; 400 labels); and RR on classes that are not contiguous integers.
@pytest.mark.parametrize("name, classes", [(name, None) for name in mechanism_names()] + [
    ("rr", np.arange(0, 10, 2))])
def test_seeded_fits_are_the_same_through_twins(monkeypatch, name, classes):
    kwargs, y = _public_inputs(name)
    y = y[:400].copy()
    if "bounds" in kwargs and kwargs["bounds"][0] == 0:
        y[::7] = -0.0  # signed zeros at the grid start (np.clip of rint passes them on)
    if classes is not None:
        kwargs, y = {"classes": classes}, 2 * y
    outs = []
    for use_twin in (True, False):
        with monkeypatch.context() as m:
            used = force_kernels(m, use_twin)
            mech = get_mechanism_class(name)(epsilon=1.0, random_state=5, **kwargs)
            outs.append(mech.fit_transform(y))
    assert used  # every mechanism samples through kernel_for
    assert _same(outs[0], outs[1])
    assert not np.array_equal(outs[0], y)
