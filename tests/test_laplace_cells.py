"""The cell tables of the discrete Laplace on fine grids (the continuous
Laplace's bulk fast path) and the small noisy-histogram kernel."""

import numpy as np
import pytest
from scipy import stats

from skdp_label._kernels import _sampling as S
from skdp_label.mechanisms import Laplace
from skdp_label.mechanisms.classic._noise import (
    alias_table_probabilities,
    laplace_cell_table,
    staircase_pmf,
    staircase_tail,
)


@pytest.mark.parametrize("lam", [2.0**-12, 1.2207016348856996e-06, 2.0**-20])
def test_cell_table_is_the_laplace_bulk(lam):
    m0, tail, prob, alias, cell, squeeze = laplace_cell_table(lam)
    log_l = int(cell).bit_length() - 1
    assert cell == 2**log_l > 1 and 2.0**-7 < lam * cell <= 2.0**-6  # a power of two
    assert m0 == 1 + cell * ((prob.shape[0] - 1) // 2)
    assert prob.shape[0] < 2_200  # ~50 kB at most (24 bytes a cell): about the L1 cache
    np.testing.assert_allclose(tail, 2 * staircase_tail(np.array([m0]), lam, 1, 1)[0], rtol=1e-12)
    implied = alias_table_probabilities(prob, alias) * (1.0 - tail)
    half = (prob.shape[0] - 1) // 2
    assert implied[half] == pytest.approx(staircase_pmf(np.array([0]), lam, 1, 1)[0], rel=1e-9)
    for s in (0, 1, half // 2, half - 1):  # cells, summed value by value
        z = 1 + cell * s + np.arange(cell)
        exact = staircase_pmf(z, lam, 1, 1).sum()
        assert implied[half + 1 + s] == pytest.approx(exact, rel=1e-9)
        assert implied[half - 1 - s] == pytest.approx(exact, rel=1e-9)
    # The squeeze: below the smallest acceptance e^(-lam (L - 1)), scaled to the
    # offset digit's 53 - log2 L acceptance bits, and close to it.
    smallest = np.exp(-lam * (cell - 1)) * 2.0 ** (53 - log_l)
    assert isinstance(squeeze, int) and smallest * (1 - 1e-11) < squeeze < smallest


def test_no_cell_table_where_values_fit():
    assert laplace_cell_table(2.0**-10) is None  # one value per super-block
    assert laplace_cell_table(2.0**-12, rtol=1e-18) is None  # bound not met: exact sampler
    assert laplace_cell_table(1e-13) is None  # cells of 2**37 values: no table is built


def _binned_pvalue(noise, lam, width):
    """Chi-square of the noise in bins of ``width`` values (not a multiple of
    the cells) against the exact Laplace, the far bins pooled."""
    edges = np.arange(-40 * width, 40 * width + 1, width) + 0.5
    inner = np.histogram(noise, bins=edges)[0]
    counts = np.concatenate([[(noise < edges[0]).sum()], inner, [(noise > edges[-1]).sum()]])
    cdf_above = staircase_tail(np.ceil(edges).astype(np.int64), lam, 1, 1)  # P(Z >= edge)
    probs = np.concatenate([[1.0 - cdf_above[0]], -np.diff(cdf_above), [cdf_above[-1]]])
    expected = probs * noise.shape[0]
    assert expected.min() > 5
    return stats.chisquare(counts, expected).pvalue


def _cell_noise(lam, n, seed, cell_factor=1):
    m0, tail, prob, alias, cell, squeeze = laplace_cell_table(lam, min_probability=5e-5, rtol=1e-6)
    bulk = S.bulk_constants(m0, tail, prob.shape[0], cell * cell_factor, lam, squeeze // cell_factor)
    noise = S.staircase_additive_bulk(
        np.zeros(n), np.random.default_rng(seed), 1.0, S.staircase_constants(lam, 1, 1), bulk,
        prob, alias, False, 0.0, 0.0,
    )
    return noise, m0


def test_cell_sampler_matches_the_laplace_including_tails():
    lam = 2.0**-13  # L = 128 values per cell, scale 8192
    noise, m0 = _cell_noise(lam, 300_000, 3)
    assert np.all(noise == np.rint(noise))
    assert (np.abs(noise) >= m0).mean() > 0.003  # the exact tail ran too (~1,900 draws)
    assert _binned_pvalue(noise, lam, 333) > 1e-4
    assert abs((noise > 0).mean() - 0.5) < 0.01


def test_cell_sampler_audit_catches_wrong_cell_arithmetic():
    # Mutation: cells twice too wide (the sampler spreads the bulk too far).
    lam = 2.0**-13
    noise, _ = _cell_noise(lam, 300_000, 3, cell_factor=2)
    assert _binned_pvalue(noise, lam, 333) < 1e-6


def test_continuous_laplace_uses_cells_for_large_batches():
    mech = Laplace(1.0, bounds=(0.0, 400.0), clip=False, random_state=0).fit([0.0])
    out = mech.transform(np.full(20_000, 200.0))
    table = mech._alias_table[1]
    assert table is not None and table[4] > 1  # the cell table
    units = (out - 200.0) / mech.granularity_
    assert np.all(units == np.rint(units))  # exact grid points
    lam = mech._staircase(mech.sensitivity_units_)[0]
    scale = 1.0 / lam  # E|Z| in units is about 1/lam
    assert abs(np.abs(units).mean() / scale - 1.0) < 0.05


def test_noisy_histogram_kernel_draws_as_the_general_kernel():
    """The discrete-Laplace kernel of noisy histograms reads the same digits
    as the general staircase kernel: identical draws for one seed."""
    for lam in (0.5, 2.0**-12, 20.0):
        c = S.staircase_constants(lam, 1, 1)
        small = S.staircase_noise(np.random.default_rng(11), lam, 1, 1, size=2_000)
        general = S.staircase_additive(
            np.zeros(2_000), np.random.default_rng(11), 1.0, c, False, 0.0, 0.0
        )
        np.testing.assert_array_equal(small, general)
        assert not np.signbit(small[small == 0]).any()  # zeros are +0.0, as before


def test_bulk_constants_refuse_cells_of_other_sizes():
    # The kernel takes a cell's offset from a digit's top log2(L) bits.
    with pytest.raises(ValueError, match="power of two"):
        S.bulk_constants(10, 0.01, 5, cell=6)
    const = S.bulk_constants(1 + 64 * 3, 0.01, 7, cell=64, lam=2.0**-12, squeeze=5)
    assert const[4] == 64 and const[5] == 47 and const[6] == 5 and const[7] == 2.0**-12
