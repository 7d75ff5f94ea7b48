"""Exact and statistical privacy audits of the classic mechanisms."""

import math

import numpy as np
import pytest
from scipy import stats

from _audit import assert_exactly_private, chi_square_pvalue, max_log_ratio
from skdp_label.mechanisms import (
    DiscreteLaplace,
    DiscreteStaircase,
    ExponentialMechanism,
    Gaussian,
    Laplace,
    RandomizedResponse,
    Staircase,
)
from skdp_label.mechanisms.classic._noise import (
    gaussian_delta,
    optimal_discrete_staircase_r,
    optimal_staircase_gamma,
    staircase_moment,
    staircase_pmf,
)

CONFIG_RNG = np.random.default_rng(20261121)


def _random_discrete_mechanisms(n):
    """Random configurations of every discrete mechanism."""
    out = []
    for _ in range(n):
        eps = float(np.exp(CONFIG_RNG.uniform(np.log(0.05), np.log(8))))
        k = int(CONFIG_RNG.integers(2, 12))
        lo = int(CONFIG_RNG.integers(-50, 50))
        out.append(RandomizedResponse(eps, classes=np.arange(k) * 3 + 1))
        out.append(DiscreteLaplace(eps, bounds=(lo, lo + k)))
        out.append(DiscreteStaircase(eps, bounds=(lo, lo + k)))
        out.append(ExponentialMechanism(eps, bounds=(lo, lo + k), resolution=0.5))
        out.append(ExponentialMechanism(eps, bounds=(lo, lo + k), resolution=1.0, calibration="standard"))
    return out


@pytest.mark.parametrize("mechanism", _random_discrete_mechanisms(12), ids=repr)
def test_transition_matrix_is_exactly_private(mechanism):
    lo = mechanism.classes[0] if isinstance(mechanism, RandomizedResponse) else mechanism.bounds[0]
    mechanism.fit([lo])
    matrix = mechanism.transition_matrix_
    assert matrix.shape == (len(mechanism.input_values_), len(mechanism.output_values_))
    assert_exactly_private(matrix, mechanism.epsilon)


@pytest.mark.parametrize("eps", [0.1, 1.0, 5.0])
def test_exact_calibration_of_exponential_mechanism_is_tight(eps):
    exact = ExponentialMechanism(eps, bounds=(0, 20), resolution=1.0).fit([0])
    standard = ExponentialMechanism(eps, bounds=(0, 20), resolution=1.0, calibration="standard").fit([0])
    assert max_log_ratio(exact.transition_matrix_) == pytest.approx(eps, rel=1e-6)
    assert max_log_ratio(standard.transition_matrix_) < eps
    assert exact.beta_ > standard.beta_


@pytest.mark.parametrize(
    "mechanism",
    [
        RandomizedResponse(0.7, classes=["a", "b", "c", "d"]),
        DiscreteLaplace(0.5, bounds=(0, 6)),
        DiscreteStaircase(2.0, bounds=(0, 6)),
        ExponentialMechanism(1.0, bounds=(0, 3), resolution=0.5),
    ],
    ids=lambda m: type(m).__name__,
)
def test_sampler_agrees_with_transition_matrix(mechanism):
    mechanism.set_params(random_state=12345)
    inputs = mechanism.classes if isinstance(mechanism, RandomizedResponse) else [mechanism.bounds[0]]
    mechanism.fit(np.asarray(inputs[:1]))
    n = 40_000
    for row in [0, len(mechanism.input_values_) // 2, len(mechanism.input_values_) - 1]:
        y = np.repeat(mechanism.input_values_[row], n)
        samples = mechanism.transform(y)
        p = chi_square_pvalue(samples, mechanism.output_values_, mechanism.transition_matrix_[row])
        assert p > 1e-4, (row, p)


def _grid_noise(mechanism, y_value, n):
    """Noise in grid units that the mechanism added to a fixed label."""
    y = np.full(n, y_value)
    out = mechanism.transform(y)
    g = mechanism.granularity_
    units = out / g
    assert np.all(units == np.round(units)), "outputs must lie exactly on the power-of-two grid"
    return units - np.rint(y_value / g)


@pytest.mark.parametrize("cls", [Laplace, Staircase])
@pytest.mark.parametrize("eps", [0.2, 1.0, 4.0])
def test_continuous_staircase_family_density_ratio(cls, eps):
    mech = cls(eps, bounds=(-3.0, 7.0), clip=False).fit([0.0])
    d = mech.sensitivity_units_
    # The noise pmf is exactly epsilon-DP for every shift up to the sensitivity:
    # check every shift pattern over a span covering several blocks.
    z = np.arange(-4 * d, 4 * d + 1, max(d // 997, 1))
    log_p = np.log(mech.noise_pmf(z))
    for shift in [1, d // 3, d - 1, d]:
        ratio = np.abs(log_p - np.log(mech.noise_pmf(z + shift)))
        assert ratio.max() <= eps * (1 + 1e-9)


@pytest.mark.parametrize("eps", [0.3, 2.0])
def test_laplace_noise_is_laplace_distributed(eps):
    mech = Laplace(eps, bounds=(0.0, 10.0), clip=False, random_state=3).fit([1.0])
    noise = _grid_noise(mech, 1.2345, 20_000) * mech.granularity_
    scale = mech.sensitivity_units_ * mech.granularity_ / eps
    assert stats.kstest(noise, stats.laplace(scale=scale).cdf).pvalue > 1e-4


def test_staircase_noise_matches_its_distribution():
    eps = 1.5
    mech = Staircase(eps, bounds=(0.0, 1.0), clip=False, random_state=4).fit([0.5])
    d = mech.sensitivity_units_
    noise = _grid_noise(mech, 0.5, 20_000) / d  # in units of the sensitivity
    gamma = mech.gamma_
    b = math.exp(-eps)

    def cdf(x):  # continuous staircase CDF (000 Def. 25) with Delta = 1
        x = np.asarray(x, dtype=float)
        a = (1 - b) / (2 * (gamma + b * (1 - gamma)))
        m = np.abs(x)
        k = np.floor(m)
        frac = m - k
        head = (1 - b**k) / (1 - b) * (gamma + b * (1 - gamma))
        within = np.minimum(frac, gamma) + b * np.maximum(frac - gamma, 0)
        half = a * (head + b**k * within)
        return 0.5 + np.sign(x) * half

    assert stats.kstest(noise, cdf).pvalue > 1e-4


def test_gaussian_noise_and_privacy():
    eps, delta = 1.0, 1e-6
    mech = Gaussian(eps, delta=delta, bounds=(0.0, 2.0), clip=False, random_state=5).fit([0.0])
    # The calibration is the exact analytic one for the sensitivity in grid units.
    assert gaussian_delta(mech.sigma_units_, mech.sensitivity_units_, eps) <= delta
    assert gaussian_delta(mech.sigma_units_ * 0.999, mech.sensitivity_units_, eps) > delta
    noise = _grid_noise(mech, 0.7, 20_000) * mech.granularity_
    assert stats.kstest(noise, stats.norm(scale=mech.sigma_).cdf).pvalue > 1e-4
    assert mech.delta_spent_ == pytest.approx(delta)


@pytest.mark.parametrize("eps", [0.1, 0.5, 1.0, 3.0])
@pytest.mark.parametrize("loss,power", [("squared", 2), ("absolute", 1)])
def test_optimal_staircase_gamma_minimises_the_cost(eps, loss, power):
    width = 4000
    r = np.arange(1, width + 1)
    costs = staircase_moment(eps, width, r, power)
    gamma = optimal_staircase_gamma(eps, loss)
    best = costs.min()
    assert costs[int(round(gamma * width)) - 1] <= best * (1 + 1e-5)


@pytest.mark.parametrize("eps", [0.3, 2.0])
def test_discrete_staircase_r_against_brute_force(eps):
    width = 9
    z = np.arange(-4000, 4001)
    brute = [np.sum(z.astype(float) ** 2 * staircase_pmf(z, eps, width, r)) for r in range(1, width + 1)]
    assert optimal_discrete_staircase_r(eps, width) == int(np.argmin(brute)) + 1
    np.testing.assert_allclose(
        staircase_moment(eps, width, np.arange(1, width + 1), 2), brute, rtol=1e-9
    )


def test_clipping_keeps_outputs_in_bounds():
    y = np.linspace(0, 1, 1000)
    for cls in (Laplace, Staircase, Gaussian):
        out = cls(0.1, bounds=(0.0, 1.0), random_state=0).fit_transform(y)
        assert out.min() >= 0.0 and out.max() <= 1.0
        assert out.min() == 0.0  # at eps=0.1 clipping certainly bites


@pytest.mark.parametrize(
    "lam,width,r", [(1 / 400, 1, 1), (0.05, 1, 1), (1.0, 7, 3), (0.3, 50, 50), (3.0, 1, 1)]
)
def test_alias_table_is_the_staircase_bulk(lam, width, r):
    """The alias table samples exactly the staircase pmf on its bulk, and the
    tail probability is the mass beyond it."""
    from skdp_label.mechanisms.classic._noise import (
        alias_table_probabilities,
        staircase_alias_table,
        staircase_tail,
    )

    m0, tail, prob, alias = staircase_alias_table(lam, width, r)
    z = np.arange(1 - m0, m0)
    assert prob.shape[0] == z.shape[0]
    bulk = staircase_pmf(z, lam, width, r)
    np.testing.assert_allclose(tail, 2 * staircase_tail(np.array([m0]), lam, width, r)[0], rtol=1e-12)
    np.testing.assert_allclose(1.0 - tail, bulk.sum(), rtol=1e-12)
    implied = alias_table_probabilities(prob, alias) * (1.0 - tail)
    np.testing.assert_allclose(implied, bulk, rtol=1e-9)


@pytest.mark.parametrize("lam,width,r", [(0.5, 1, 1), (1.0, 4, 2)])
def test_alias_sampler_matches_pmf_including_tails(lam, width, r):
    from skdp_label._kernels._sampling import bulk_constants, staircase_additive_bulk, staircase_constants
    from skdp_label.mechanisms.classic._noise import staircase_alias_table

    # A coarse bulk (min_probability 1e-3) so that a fair share of draws hits the tails.
    m0, tail, prob, alias = staircase_alias_table(lam, width, r, min_probability=1e-3, rtol=1e-6)
    n = 400_000
    noise = staircase_additive_bulk(
        np.zeros(n), np.random.default_rng(1), 1.0, staircase_constants(lam, width, r),
        bulk_constants(m0, tail, prob.shape[0]), prob, alias, False, 0.0, 0.0,
    ).astype(np.int64)
    assert (np.abs(noise) >= m0).mean() > 0.001  # the tails were exercised
    values = np.arange(noise.min(), noise.max() + 1)
    pmf = staircase_pmf(values, lam, width, r)
    assert chi_square_pvalue(noise, values, pmf / pmf.sum()) > 1e-4


def test_unclipped_discrete_laplace_matches_pmf_including_tails():
    mech = DiscreteLaplace(2.0, bounds=(0, 3), clip=False, random_state=8).fit([0])
    noise = mech.transform(np.zeros(300_000)).astype(np.int64)
    values = np.arange(noise.min(), noise.max() + 1)
    assert chi_square_pvalue(noise, values, mech.noise_pmf(values) / mech.noise_pmf(values).sum()) > 1e-4
