"""Kernels that hold the PCG64 state in registers (``_pcg64.hold``,
``held_digit``, ``release``): numpy's draws and final states bit for bit,
through helpers that draw from the source itself (the rare paths, with the
state released around them), and when a helper raises (the digits read are
spent); a kernel that forgets to release and hold again around such a
helper replays digits, and the comparisons catch it. The library's kernels that carry the state (the rows kernel of
``sample_rows`` on every path, RP-with-prior's grid sampler, RR-on-Bins)
give the same outputs and final state through the stream as through
numpy's own Generator and through their Python twins, with their rare
paths forced."""

import numba
import numpy as np
import pytest

from skdp_label._kernels import _sampling as S
from skdp_label._kernels import _twin
from skdp_label._kernels import _pcg64
from skdp_label._kernels._pcg64 import call_with_stream, held_digit, hold, release
from test_fast_samplers import _heavy_tail_matrix, _keyed


@numba.njit(nogil=True)
def _helper(rng, raise_at):
    """Draws two uniforms from ``rng`` itself (as a rare-path helper does)."""
    a = rng.random()
    if a < raise_at:
        raise ValueError("helper raised")
    return a + rng.random()


def _carrying_kernel(around_helper):
    @numba.njit(nogil=True)
    def kernel(rng, out, raise_at):
        s = hold(rng)
        for i in range(out.shape[0]):
            u, s = held_digit(rng, s)
            u *= 1.0 / 2.0**53
            d, s = held_digit(rng, s)
            x = u + d
            if u < 0.25:  # a "rare" path every fourth label: the helper draws
                if around_helper:
                    release(rng, s)
                x += _helper(rng, raise_at)
                if around_helper:
                    s = hold(rng)
            out[i] = x
        release(rng, s)

    return kernel


_CARRYING = _carrying_kernel(True)
_FORGETFUL = _carrying_kernel(False)  # the mutant: no release nor hold around the helper


def _reference(seed, n):
    """The kernel's outputs drawn from numpy's Generator in Python."""
    rng = np.random.default_rng(seed)
    out = np.empty(n)
    for i in range(n):
        u = rng.random()
        x = u + rng.random() * 2.0**53
        if u < 0.25:
            x += rng.random() + rng.random()
        out[i] = x
    return out, rng.bit_generator.state


@pytest.mark.parametrize("seed", [0, 7, 2**63 + 5])
def test_a_carried_state_reads_numpys_digits_through_helpers(seed):
    ref, ref_state = _reference(seed, 3000)
    for run in (lambda g, o: call_with_stream(_CARRYING, g, g, o, -1.0),  # the stream
                lambda g, o: _CARRYING(g, o, -1.0),  # numba's Generator
                lambda g, o: _twin.twin(_CARRYING)(g, o, -1.0)):  # Python
        rng, out = np.random.default_rng(seed), np.empty(3000)
        run(rng, out)
        assert np.array_equal(out, ref) and rng.bit_generator.state == ref_state


def test_forgetting_to_release_and_hold_around_a_helper_is_caught():
    # The mutant replays the digits its helper read: other outputs, another
    # final state (the stream is the only path where it differs: the twin and
    # numba's Generator always draw from the source).
    ref, ref_state = _reference(1, 3000)
    rng, out = np.random.default_rng(1), np.empty(3000)
    call_with_stream(_FORGETFUL, rng, rng, out, -1.0)
    assert not np.array_equal(out, ref)
    assert rng.bit_generator.state != ref_state
    twin_rng, twin_out = np.random.default_rng(1), np.empty(3000)
    _twin.twin(_FORGETFUL)(twin_rng, twin_out, -1.0)
    assert np.array_equal(twin_out, ref)  # so a twin comparison catches it too


def test_a_raising_helper_leaves_the_digits_read_spent():
    # The state is released before the helper: the generator ends past every
    # digit read before the error, then jumps (call_with_stream: a kernel that
    # raises may hold digits it never released).
    raise_at = 0.01
    reference = np.random.default_rng(4)
    drawn = 0
    while True:
        u = reference.random()
        reference.random()
        drawn += 1
        if u < 0.25:
            if reference.random() < raise_at:
                break
            reference.random()
    rng = np.random.default_rng(4)
    with pytest.raises(ValueError, match="helper raised"):
        call_with_stream(_CARRYING, rng, rng, np.empty(10 * drawn + 10), raise_at)
    reference.bit_generator.advance(_pcg64._JUMP_ON_ERROR)
    assert rng.bit_generator.state == reference.bit_generator.state


# -- the library's kernels -----------------------------------------------------


def _three_ways(kernel, args_for, n_state_checks=True):
    """Outputs and final states of ``kernel`` through the stream, numba's
    Generator and the twin, from one seed."""
    runs = []
    for how in ("stream", "generator", "twin"):
        rng = np.random.default_rng(21)
        args, out = args_for(rng)
        if how == "stream":
            call_with_stream(kernel, rng, *args)
        elif how == "generator":
            kernel(*args)
        else:
            _twin.twin(kernel)(*args)
        runs.append((out.copy(), rng.bit_generator.state))
    for out, state in runs[1:]:
        assert np.array_equal(out.view(np.int64), runs[0][0].view(np.int64))
        assert state == runs[0][1]
    return runs[0][0]


def _rows_args(key, n, y, outputs, grid, right, rr, tables, codes=S._EMPTY_I):
    kernel = S._DISCRETE_ROWS[key]

    def args_for(rng):
        out = np.empty(n)
        heads, cells, *groups = tables
        return (codes, y, *grid, right, rr, rng, outputs, out, np.empty((3, S._BLOCK), np.int64),
                np.empty((1, S._BLOCK)), heads, cells.reshape(-1), 2 * cells.shape[1],
                *groups), out

    return kernel, args_for


_GRID = np.linspace(-3.0, 5.0, 17)  # arithmetic


@pytest.mark.parametrize("path", ["grid", "grid-buckets", "codes", "nearest", "pieces"])
def test_rows_kernel_tables_paths_through_the_stream(path):
    # Heavy-tailed tables: the exact tail (a helper that draws) is reached.
    n = 700
    y = np.random.default_rng(3).uniform(-4.0, 6.0, n)
    matrix = _heavy_tail_matrix()
    outputs = np.arange(matrix.shape[1]) * 0.5 - 3.0
    right, codes = S._EMPTY_F, S._EMPTY_I
    if path == "pieces":
        left, right = _GRID[:-1].copy(), _GRID[1:].copy()
        left, par = S.piece_lookup(left, right)
        grid = (left, S._EMPTY_I, par)
        rows, key = 2 * left.size, ("pieces", False)
    else:
        grid = S.rounding_grid(_GRID, arithmetic=path != "grid-buckets")
        rows = _GRID.size
        key = {"grid": (True, False), "grid-buckets": (True, False), "codes": (False, False),
               "nearest": (False, False)}[path]  # nearest: the codes' kernel given labels
        if path == "codes":
            codes = np.random.default_rng(4).integers(0, rows, n)
            y = S._EMPTY_F
    tables = S.categorical_tables(np.resize(matrix, (rows, matrix.shape[1])), rtol=1e-12)
    kernel, args_for = _rows_args(key, n, y, outputs, grid, right, S._EMPTY_F, tables, codes)
    out = _three_ways(kernel, args_for)
    assert (~np.isin(out, outputs[:14])).sum() >= 3  # the exact tail was reached


@pytest.mark.parametrize("grid_kind", ["arithmetic", "buckets"])
def test_rows_kernel_rr_rare_path_through_the_stream(grid_kind):
    # RR constants whose "rare" band [limit, qd] holds an eighth of the digits
    # (not a valid RR: a way to send many labels down the helper that draws).
    n = 700
    y = np.random.default_rng(5).uniform(-4.0, 6.0, n)
    qd = 0.6 * 2.0**53
    rr = np.array([qd, 0.5, qd - 2.0**50, 16.0])
    grid = S.rounding_grid(_GRID, arithmetic=grid_kind == "arithmetic")
    kernel, args_for = _rows_args((True, True), n, y, _GRID.copy(), grid, S._EMPTY_F, rr,
                                  S._NO_TABLES)
    _three_ways(kernel, args_for)


def test_nearest_rows_are_nearest_indices_then_the_codes():
    # The fused nearest rows read the same digits as the codes of
    # nearest_indices sampled afterwards: the same outputs and state.
    y = np.random.default_rng(6).uniform(-4.0, 6.0, 30_000)
    y[:17] = _GRID  # grid points themselves, and ties halfway
    y[17:33] = (_GRID[:-1] + _GRID[1:]) / 2
    matrix = _heavy_tail_matrix()
    tables = S.categorical_tables(np.resize(matrix, (_GRID.size, matrix.shape[1])), rtol=1e-12)
    outputs = np.arange(matrix.shape[1]) * 0.5 - 3.0
    runs = []
    for kwargs in ({"y": y, "nearest": _GRID}, {"codes": S.nearest_indices(_GRID, y)}):
        rng = np.random.default_rng(8)
        runs.append((S.sample_rows(rng, outputs, tables=tables, **kwargs),
                     rng.bit_generator.state))
    assert np.array_equal(runs[0][0], runs[1][0]) and runs[0][1] == runs[1][1]
    with pytest.raises(ValueError, match="arithmetic"):
        S.sample_rows(np.random.default_rng(0), outputs, y=y, nearest=np.array([0.0, 1.0, 3.0, 4.0]),
                      tables=tables)


def test_nearest_rows_on_keyed_sources_are_the_codes_rows():
    y = np.random.default_rng(6).uniform(-4.0, 6.0, 600)
    matrix = _heavy_tail_matrix()
    tables = S.categorical_tables(np.resize(matrix, (_GRID.size, matrix.shape[1])), rtol=1e-12)
    outputs = np.arange(matrix.shape[1]) * 0.5 - 3.0
    fused = S.sample_rows(_keyed(600), outputs, y=y, nearest=_GRID, tables=tables)
    codes = S.sample_rows(_keyed(600), outputs, codes=S.nearest_indices(_GRID, y), tables=tables)
    assert np.array_equal(fused, codes)


@pytest.mark.parametrize("forced_rare", [True, False])
def test_rp_with_prior_grid_sampler_rare_path_through_the_stream(forced_rare):
    from skdp_label.mechanisms.rp_with_prior import _interval as I

    n = 2000
    y = np.random.default_rng(9).uniform(-2.0, 40.0, n)
    sizes, limits, inverses, qd, frac = I.grid_parts(0, 30, 3, 0.4)
    if forced_rare:
        # Limits an eighth of each part's digits below its span: many labels
        # take the helper that draws fresh digits (not a valid law: a test of
        # the state's round trip).
        limits = limits - np.int64(2**50)
    # else the real law, where the last labels hold the state to the end: the
    # kernel's final release is what writes their digits back (a mutant
    # without it ended at the last rare label's state only when forced).

    def args_for(rng):
        out = np.empty(n)
        return (y, 1.0, 1.0, np.int64(0), np.int64(30), np.int64(3), sizes, limits, inverses,
                qd, frac, rng, out), out

    _three_ways(I._sample_grid, args_for)


def test_rr_on_bins_rare_path_through_the_stream():
    from skdp_label.mechanisms.bins._sampling import BinLookup, _sample

    values = np.linspace(0.0, 10.0, 41)
    lookup = BinLookup(values, np.repeat(np.arange(8), [5, 5, 5, 5, 5, 5, 5, 6]))
    y = np.random.default_rng(10).uniform(-1.0, 11.0, 2000)
    outputs = np.arange(8) * 1.25
    qd = 0.6 * 2.0**53
    c = np.array([qd, 0.5, qd - 2.0**50, 7.0])  # a wide "rare" band, as above

    def args_for(rng):
        out = np.empty(y.shape[0])
        return (y, *lookup._tables(), rng, outputs, c, out), out

    _three_ways(_sample, args_for)
