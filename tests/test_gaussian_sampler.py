"""The discrete Gaussian's envelope sampler (``gaussian_cell_table`` and
``_kernels._sampling.gaussian_additive``).

* Its draws follow the discrete Gaussian pmf (chi-squared against the exact
  pmf, binned on fine grids), in the bulk and in the tail, whatever the cell
  width: one value a cell (small sigma), the default cells, and coarse cells
  covering 1.5 sigma, where a third of the proposals go to the tail and the
  in-cell rejection is far from 1.
* Mutations are caught: accepting every offset of a cell (a broken squeeze)
  or a tail proposal without its Bernoulli.
* The linear squeeze never accepts what the exact Bernoulli would reject.
* The value 0 under an envelope of K < L values keeps its probability (a
  mutant accepting offset 0 only is caught); too small a K for the alias
  table's bound falls back to the whole cell.
* The mechanism uses it on one label as on many, and a keyed release reads
  each row's own stream (the same output for a row alone or in a batch).
"""

import math

import numpy as np
import pytest

from _audit import chi_square_pvalue
from skdp_label._kernels import _sampling as S
from skdp_label.mechanisms import Gaussian
from skdp_label.mechanisms.classic._noise import gaussian_cell_table

N = 200_000


def _draw(sigma, table, n=N, seed=1):
    rng = np.random.default_rng(seed)
    return S.gaussian_additive(np.zeros(n), rng, 1.0, table, False, 0.0, 0.0)


def _pvalue(draws, sigma, n_bins=80, only=None):
    """Chi-square p-value of ``draws`` against the discrete Gaussian,
    binned into ``n_bins`` equal bins over +-``12 sigma`` (restricted to
    the magnitudes ``only`` selects, if given)."""
    span = int(math.ceil(12 * sigma)) + 2
    z = np.arange(-span, span + 1)
    p = np.exp(-(z * z) / (2.0 * sigma * sigma))
    if only is not None:
        keep = only(np.abs(z))
        z, p = z[keep], p[keep]
        draws = draws[only(np.abs(draws))]
    p /= p.sum()
    edges = np.linspace(z[0] - 0.5, z[-1] + 0.5, n_bins + 1)
    expected = np.bincount(np.digitize(z, edges), weights=p, minlength=n_bins + 2)
    return chi_square_pvalue(np.digitize(draws, edges), np.arange(n_bins + 2), expected)


CASES = [  # (sigma, cells_per_sigma, n_sigmas): cell width L, share of the tail
    (3.7, 32, 9.0),  # L = 1: one value a cell
    (200.0, 32, 9.0),  # L = 4
    (5000.0, 32, 9.0),  # L = 128
    (200.0, 2, 1.5),  # L = 64 over 1.5 sigma: ~1/3 of proposals in the tail
]


@pytest.mark.parametrize("sigma,cells_per_sigma,n_sigmas", CASES)
def test_draws_follow_the_discrete_gaussian(sigma, cells_per_sigma, n_sigmas):
    table = gaussian_cell_table(sigma, cells_per_sigma, n_sigmas)
    assert table is not None
    draws = _draw(sigma, table)
    assert np.all(draws == np.rint(draws))
    assert _pvalue(draws, sigma) > 1e-4


def test_tail_draws_follow_the_discrete_gaussian_beyond_m0():
    sigma = 200.0
    table = gaussian_cell_table(sigma, 2, 1.5)
    m0 = table[0][6]
    draws = _draw(sigma, table)
    tail = np.abs(draws) >= m0
    assert 0.05 < tail.mean() < 0.5  # the test reaches the tail often
    assert _pvalue(draws, sigma, n_bins=60, only=lambda m: m >= m0) > 1e-4
    assert _pvalue(draws, sigma, n_bins=60, only=lambda m: m < m0) > 1e-4


def test_a_squeeze_that_accepts_everything_is_caught():
    sigma = 200.0
    table = gaussian_cell_table(sigma, 2, 1.5)
    constants, prob, alias, squeeze = table
    broken = (constants, prob, alias, np.zeros_like(squeeze))  # slope 0: every b < B accepted
    assert _pvalue(_draw(sigma, broken), sigma) < 1e-6


def test_a_tail_without_its_bernoulli_is_caught():
    sigma = 200.0
    constants, *rest = gaussian_cell_table(sigma, 2, 1.5)
    broken = constants.copy()
    broken[7] = 0.0  # 1 / 2 sigma^2 = 0: e^0 = 1, every tail proposal accepted
    draws = _draw(sigma, (broken, *rest))
    # (The in-cell acceptance breaks too; the tail alone suffices to fail.)
    m0 = constants[6]
    assert _pvalue(draws, sigma, n_bins=60, only=lambda m: m >= m0) < 1e-6


@pytest.mark.parametrize("sigma", [3.7, 200.0, 5000.0, 7.6e5, 1e9])
def test_the_squeeze_is_below_every_acceptance_of_its_cell(sigma):
    """Bits b passing the linear squeeze (b + i k_t < B) have b + 1 at most
    the floor of the kernel's float acceptance u e^(-i (2 m_t + i) / 2
    sigma^2): the exact Bernoulli accepts them whatever the further digits;
    checked for every cell at offsets across [0, L) (all of them for small
    L). The cell of 0 passes offset 0 only. Not loose either: short of the
    acceptance by second-order terms only."""
    constants, prob, alias, squeeze = gaussian_cell_table(sigma)
    big_l, unit, inv_two_var = constants[4], 2.0 ** constants[5], constants[7]
    below = constants[12]
    assert below == math.floor(unit * (1 - 1e-12))
    n_cells = int(constants[3])
    assert squeeze.shape[0] == n_cells + 1
    m_first = 1.0 + big_l * np.arange(n_cells)
    k = squeeze[1:].astype(np.float64)
    if big_l == 1.0:
        return  # one value a cell: always accepted, no squeeze read
    offsets = np.unique(np.concatenate([np.arange(min(big_l, 512.0)),
                                        np.linspace(0, big_l - 1, 200).round()]))
    for offset in offsets:
        x = np.exp(-(offset * (2.0 * m_first + offset)) * inv_two_var) * unit  # the kernel's
        passing = below - offset * k  # b passes iff b < this (b >= 0 integer)
        assert np.all(passing <= np.floor(x))
        # Tight to second order: short of the acceptance by at most the
        # slope's rounding up, i (L - 1 - i) / 2 sigma^2, plus a^2 / 2.
        a = offset * (2.0 * m_first + offset) * inv_two_var
        slack = offset * (big_l - 1.0 - offset) * inv_two_var + a * a / 2 + 1e-11 + offset / unit
        assert np.all(np.floor(x) - passing <= slack * unit + 1.0)
    assert squeeze[0] * 1.0 >= unit  # the cell of 0: offset 0 only


def test_tables_exist_on_the_mechanisms_grids():
    for eps, delta, bounds in [(0.1, 1e-5, (0, 1)), (1.0, 1e-5, (0, 400)), (20.0, 1e-10, (-5, 5))]:
        mech = Gaussian(eps, delta=delta, bounds=bounds).fit([0.0])
        assert gaussian_cell_table(mech.sigma_units_) is not None


def _rows(keys):
    from skdp_label._kernels._philox import KeyedRows

    lo = np.asarray(keys, dtype=np.uint64) * np.uint64(7919)
    return KeyedRows(np.uint64(5), np.uint64(6), np.uint64(0), lo, lo + np.uint64(1))


def test_a_keyed_row_reads_its_own_stream():
    # Rejections read a variable number of digits: each row's output still
    # depends only on its own key (alone or in a batch, in any order).
    mech = Gaussian(1.0, bounds=(0.0, 10.0), clip=False).fit([0.0])
    y = np.linspace(0.0, 10.0, 2000)
    keys = np.arange(2000)
    batch = mech._randomize_column(y, _rows(keys))
    np.testing.assert_array_equal(batch, mech._randomize_column(y, _rows(keys)))
    for i in (0, 7, 1999):
        np.testing.assert_array_equal(mech._randomize_column(y[i : i + 1], _rows([i])), batch[i])
    back = mech._randomize_column(y[::-1], _rows(keys[::-1]))
    np.testing.assert_array_equal(back[::-1], batch)
    noise = (batch - np.rint(y / mech.granularity_) * mech.granularity_) / mech.sigma_
    assert 0.9 < noise.std() < 1.1


def test_the_value_zero_has_its_probability_under_an_envelope_below_the_cell():
    """The value 0's envelope K = min(L, zero_envelope) < L: its proposals are
    accepted when the offset is below L / K, probability 1 / K, so P(0) is
    the discrete Gaussian's (32 values a cell, K = 4: offsets 0-7 accepted).
    Mutation: a table whose constants say L / K = 1 (the kernel accepting
    offset 0 only, as for K = L) gives 0 an eighth of its probability."""
    sigma = 40.0
    table = gaussian_cell_table(sigma, 1, 9.0, zero_envelope=4)
    assert table[0][4] == 32 and table[0][13] == 8
    z = np.arange(-700, 701)
    p = np.exp(-(z * z) / (2.0 * sigma * sigma))
    p /= p.sum()
    draws = _draw(sigma, table)
    assert chi_square_pvalue(draws, z, p) > 1e-4
    zeros, expected = np.count_nonzero(draws == 0), N * p[700]
    assert abs(zeros - expected) < 5 * math.sqrt(expected)
    broken = table[0].copy()
    broken[13] = 1.0
    zeros = np.count_nonzero(_draw(sigma, (broken, *table[1:])) == 0)
    assert zeros < expected / 4


def test_the_value_zero_falls_back_to_a_full_cell_when_its_share_is_too_small():
    # sigma = 2**20 (L = 2**15): an envelope of 1 for the value 0 is below the
    # alias table's 1e-9 bound, so the whole cell is used (L / K = 1); 64 is not.
    sigma = 2.0**20
    assert gaussian_cell_table(sigma, zero_envelope=1)[0][13] == 1.0
    assert gaussian_cell_table(sigma)[0][13] == 2.0**15 / 64
