"""What is sampled is epsilon-DP for the epsilon charged (docs/sampling.md, first section).

Non-exact samplers (per-row alias tables, interval tables, the additive noise's
alias tables) draw each output within 1 +- SAMPLER_RTOL of the law; laws are
built at ``law_epsilon(epsilon)`` = epsilon - SAMPLER_SLACK so that the law the
tables *actually* sample costs at most the epsilon charged. These tests rebuild
that sampled law from the tables (with the tables' own error bounds: digit
quantisation, counting and float rounding) and check, in exact rational
arithmetic against a 300-bit lower bound of e^epsilon, that every ratio of two
rows' probabilities of an output is at most e^epsilon. With the slack set to 0
(main's laws, built at epsilon and tight) the same checks fail.

Rebuilt here: per-row alias tables (matrix mechanisms), interval tables
(two-level matrices), the quantization family's end rows, the discrete
additive noise's bulk alias table and the continuous Laplace's cells. Not
rebuilt (covered by the 1 +- SAMPLER_RTOL bound their builders check): the
continuous Staircase's pieces, the Gaussian's envelope, the geometric tails.
"""

import math
import os
import sys
import warnings
from fractions import Fraction

import mpmath
import numpy as np
import pytest

from skdp_label._kernels import _sampling as S
from skdp_label._kernels._interval import interval_law
from skdp_label.mechanisms import (
    ERM,
    MVU,
    OPTM,
    RQM,
    AutoRegression,
    BiasVarianceRandomizer,
    DiscreteLaplace,
    DiscreteStaircase,
    ExponentialMechanism,
    OptimalUnbiased,
    RandomizedQuantization,
    RRWithPriorRegression,
)
from skdp_label.mechanisms import _prior, _validation
from skdp_label.mechanisms._validation import SAMPLER_RTOL, SAMPLER_SLACK, law_epsilon
from skdp_label.mechanisms.classic._noise import alias_table_probabilities, staircase_alias_table

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _audit import max_log_ratio  # noqa: E402
from test_fast_samplers import implied_matrix  # noqa: E402

_DIGIT = 2.0**53
_ULP = 2.0**-52


def exp_lower(epsilon):
    """A rational lower bound of e^epsilon (300-bit exp, less a margin of its error)."""
    with mpmath.workprec(300):
        man, exp = mpmath.exp(mpmath.mpf(float(epsilon))).man_exp
    return Fraction(int(man)) * Fraction(2) ** int(exp) * (1 - Fraction(1, 2**280))


def worst_ratio(upper, lower):
    """max over columns of max_i upper[i, j] / min_i lower[i, j], exactly
    (Fractions of the floats): the sampled law's worst likelihood ratio when
    each entry lies in [lower, upper]. A column positive in some rows and 0
    in others is an infinite ratio."""
    worst = Fraction(0)
    for j in range(upper.shape[1]):
        hi, lo = upper[:, j].max(), lower[:, j].min()
        if hi == 0.0:
            continue
        if not lo > 0.0:
            return math.inf
        worst = max(worst, Fraction(float(hi)) / Fraction(float(lo)))
    return worst


def bracket(law, absolute):
    """(upper, lower) floats enclosing ``law +- absolute`` (rounded outwards)."""
    up = np.nextafter(law + absolute, np.inf)
    lo = np.nextafter(np.maximum(law - absolute, 0.0), -np.inf)
    return up, np.where(law > 0, lo, 0.0)


def alias_sampled_law(tables, n_out):
    """(upper, lower) of the law per-row alias tables sample: ``implied_matrix``
    (cells and exact tail), plus each bulk entry's digit quantisation
    4 (1 + n_j) / 2**53 (n_j cells alias it), the tail's groups'
    (G (n + 3) + 4 n) 2**-53 relative and the float rounding of the sum."""
    law = implied_matrix(tables, n_out)
    split = tables[0]
    _, cell_keep, cell_alias = S.unpack_cells(tables[1])
    cell_prob = S.unpack_cells(tables[1])[0]
    absolute = np.zeros_like(law)
    for i in range(law.shape[0]):
        k = int(split[i, 3]) + 1
        aliased = np.bincount(cell_alias[i, :k][cell_prob[i, :k] < 1.0], minlength=n_out)
        kept = np.bincount(cell_keep[i, :k], minlength=n_out)
        in_bulk = (aliased + kept) > 0
        absolute[i] = np.where(in_bulk, 4.0 * (1.0 + aliased) / _DIGIT, 0.0)
    groups = 64  # at most as many exponent groups as float exponents used: far above any row's
    absolute += law * ((groups * (n_out + 3) + 4 * n_out) / _DIGIT + 64 * _ULP)
    return bracket(law, absolute)


def interval_sampled_law(tables):
    law, bound = interval_law(tables)
    return bracket(law, bound + law * 64 * _ULP)


def assert_sampled_epsilon_dp(upper, lower, epsilon):
    ratio = worst_ratio(upper, lower)
    assert ratio <= exp_lower(epsilon), (
        f"the sampled law's loss {math.log(ratio):.17g} exceeds epsilon {epsilon!r} by "
        f"{math.log(ratio) - epsilon:.3g}")


# -- the discrete matrix mechanisms, each sampled through its own tables ----------------
def _fit(mech, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return mech.fit(np.asarray(y, dtype=np.float64))


_PRIOR = (np.arange(0.0, 21.0), np.r_[np.full(6, 5.0), np.ones(15)] / 45.0)

MATRIX_CASES = {
    "exponential": lambda eps: ExponentialMechanism(eps, bounds=(0, 20), resolution=1.0),
    "exponential-standard": lambda eps: ExponentialMechanism(
        eps, bounds=(0, 20), resolution=1.0, calibration="standard"),
    "unbiased": lambda eps: OptimalUnbiased(eps, prior=_PRIOR),
    "unbiased-grid": lambda eps: OptimalUnbiased(eps, bounds=(0, 10), grid_size=11, prior_epsilon=0.1 * eps),
    "bias-variance": lambda eps: BiasVarianceRandomizer(eps, prior=_PRIOR, bias_weight=10.0),
    "rr-with-prior-regression": lambda eps: RRWithPriorRegression(eps, prior=_PRIOR),
    "auto": lambda eps: AutoRegression(eps, prior=_PRIOR, candidates=["unbiased"]),
}

QUANTIZATION_CASES = {
    "quantization": lambda eps: RandomizedQuantization(eps, bounds=(0, 1)),
    "rqm": lambda eps: RQM(eps, bounds=(0, 1), bins=4),
    "erm": lambda eps: ERM(eps, bounds=(0, 1), bins=4),
    "optm": lambda eps: OPTM(eps, bounds=(0, 1), bins=4),
    "mvu": lambda eps: MVU(eps, bounds=(0, 1), outputs=4),
}


def matrix_sampled_law(mech):
    """(upper, lower, law): the law a fitted matrix mechanism's tables sample."""
    if hasattr(mech, "_tables"):  # quantization: the pieces' end rows are what is sampled
        rows = mech._rows
        return (*alias_sampled_law(mech._tables(), rows.shape[1]), rows)
    matrix = np.asarray(mech.transition_matrix_)
    owner = getattr(mech, "selected_mechanism_", mech)
    interval = owner._interval_tables() if hasattr(owner, "_interval_tables") else None
    if interval is not None:
        return (*interval_sampled_law(interval), matrix)
    return (*alias_sampled_law(owner._categorical_tables(), matrix.shape[1]), matrix)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
@pytest.mark.parametrize("name", sorted(MATRIX_CASES) + sorted(QUANTIZATION_CASES))
def test_matrix_mechanisms_sample_an_epsilon_dp_law(name, epsilon):
    build = {**MATRIX_CASES, **QUANTIZATION_CASES}[name]
    mech = _fit(build(epsilon), [1.0] if name not in QUANTIZATION_CASES else [0.5])
    upper, lower, law = matrix_sampled_law(mech)
    assert_sampled_epsilon_dp(upper, lower, epsilon)
    # The law itself is built at law_epsilon (auto: its candidate's), to the fit's float
    # rounding (1e-12 relative: far below the slack, 4e-9 of epsilon here).
    assert max_log_ratio(law) <= law_epsilon(epsilon) * (1 + 1e-12)


@pytest.mark.parametrize("name", ["unbiased", "exponential", "rr-with-prior-regression", "rqm"])
def test_the_sampled_law_fails_when_built_at_epsilon(name, monkeypatch):
    # Mutation: main's laws (slack 0) are tight at epsilon (ratios e^epsilon), and
    # the tables' rounding takes the sampled law past it: interval tables
    # (unbiased), per-row alias tables, the quantization's end rows.
    monkeypatch.setattr(_validation, "SAMPLER_SLACK", 0.0)
    build = {**MATRIX_CASES, **QUANTIZATION_CASES}[name]
    mech = _fit(build(2.0), [0.5] if name in QUANTIZATION_CASES else [1.0])
    upper, lower, _ = matrix_sampled_law(mech)
    with pytest.raises(AssertionError, match="exceeds epsilon"):
        assert_sampled_epsilon_dp(upper, lower, 2.0)


# -- additive noise: the alias table of the bulk, shifted by the sensitivity ------------
def additive_bulk_law(lam, width, r):
    """(upper, lower) of the pmf the fast path's alias table samples on the bulk
    ``-(m0 - 1), ..., m0 - 1`` (digit quantisation and float rounding included)."""
    m0, tail, prob, alias = staircase_alias_table(lam, width, r)
    implied = alias_table_probabilities(prob, alias) * (1.0 - tail)
    aliased = np.bincount(alias[prob < 1.0], minlength=prob.shape[0])
    return bracket(implied, 4.0 * (1.0 + aliased) / _DIGIT + implied * 64 * _ULP)


def shift_ratio(upper, lower, shift):
    """Worst p(z) / p(z + d) over the bulk, |d| <= shift (neighbouring labels)."""
    worst = Fraction(0)
    for d in range(1, shift + 1):
        for a, b in ((upper[:-d], lower[d:]), (upper[d:], lower[:-d])):
            j = int(np.argmax(a / b))
            worst = max(worst, Fraction(float(a[j])) / Fraction(float(b[j])))
    return worst


ADDITIVE_CASES = {
    "discrete-laplace": lambda eps: DiscreteLaplace(eps, bounds=(0, 3)),
    "discrete-staircase": lambda eps: DiscreteStaircase(eps, bounds=(0, 4)),
}


def _additive_ratio(mech):
    lam, width, r = mech._staircase(mech.sensitivity_units_)
    upper, lower = additive_bulk_law(lam, width, r)
    # A float ratio can pick a near-worst pair; check the exact worst of each shift.
    return shift_ratio(upper, lower, mech.sensitivity_units_)


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
@pytest.mark.parametrize("name", sorted(ADDITIVE_CASES))
def test_additive_noise_tables_are_epsilon_dp(name, epsilon):
    mech = _fit(ADDITIVE_CASES[name](epsilon), [1.0])
    ratio = _additive_ratio(mech)
    assert ratio <= exp_lower(epsilon), f"loss {math.log(ratio) - epsilon:.3g} over epsilon"
    # The clipped mechanism's exact matrix is built at law_epsilon.
    assert max_log_ratio(mech.transition_matrix_) <= law_epsilon(epsilon) * (1 + 1e-12)


def exp_upper(x):
    """A rational upper bound of e^x for a rational x (300-bit exp, plus a margin)."""
    with mpmath.workprec(300):
        man, exp = mpmath.exp(mpmath.mpf(x.numerator) / x.denominator).man_exp
    return Fraction(int(man)) * Fraction(2) ** int(exp) * (1 + Fraction(1, 2**280))


def laplace_cells_ratio(mech):
    """Bound of the continuous Laplace's sampled p(z) / p(z + d), |d| <= the
    sensitivity, on its table of cells: the offset inside a cell is exact
    (rejection), so a value's sampled probability is its law's times its
    cell's rho = sampled cell mass / law cell mass; the law's ratio is at
    most e^(lam s), the cells' at most max rho / min rho."""
    from skdp_label.mechanisms.classic._noise import _p_zero, laplace_cell_table

    lam, _, _ = mech._staircase(mech.sensitivity_units_)
    _, tail, prob, alias, cell, _ = laplace_cell_table(lam)
    assert cell > 1  # a table of cells, not of values
    # The law's cell masses, as the builder forms them (a few ulps of their own).
    n_cells = (prob.shape[0] - 1) // 2
    p0 = _p_zero(lam, 1, 1)
    first = p0 * math.exp(-lam) * math.expm1(-lam * cell) / math.expm1(-lam)
    cells = first * np.exp(-lam * cell * np.arange(n_cells, dtype=np.float64))
    masses = np.concatenate([cells[::-1], [p0], cells])
    implied = alias_table_probabilities(prob, alias) * (1.0 - tail)
    aliased = np.bincount(alias[prob < 1.0], minlength=prob.shape[0])
    upper, lower = bracket(implied, 4.0 * (1.0 + aliased) / _DIGIT + implied * 64 * _ULP)
    rho_up = upper / masses * (1 + 64 * _ULP)
    rho_lo = lower / masses * (1 - 64 * _ULP)
    spread = Fraction(float(rho_up.max())) / Fraction(float(rho_lo.min()))
    return exp_upper(Fraction(lam) * mech.sensitivity_units_) * spread


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_laplace_cell_table_is_epsilon_dp(epsilon):
    from skdp_label.mechanisms import Laplace

    mech = _fit(Laplace(epsilon, bounds=(0.0, 400.0)), [1.0])
    assert laplace_cells_ratio(mech) <= exp_lower(epsilon)


def test_laplace_cell_table_fails_when_built_at_epsilon(monkeypatch):
    from skdp_label.mechanisms import Laplace

    monkeypatch.setattr(_validation, "SAMPLER_SLACK", 0.0)
    mech = _fit(Laplace(2.0, bounds=(0.0, 400.0)), [1.0])
    assert laplace_cells_ratio(mech) > exp_lower(2.0)


def test_additive_tables_fail_when_built_at_epsilon(monkeypatch):
    monkeypatch.setattr(_validation, "SAMPLER_SLACK", 0.0)
    mech = _fit(ADDITIVE_CASES["discrete-laplace"](2.0), [1.0])
    assert _additive_ratio(mech) > exp_lower(2.0)


# -- the slack and its floor ------------------------------------------------------------
def test_slack_covers_the_samplers_relative_error():
    eta = mpmath.mpf(SAMPLER_RTOL)
    with mpmath.workprec(200):
        assert mpmath.log((1 + eta) / (1 - eta)) < mpmath.mpf(SAMPLER_SLACK) - mpmath.mpf(5e-11)
    # The kernels check their tables against the same eta (never a looser one).
    from skdp_label._kernels import _interval

    assert S._ALIAS_RTOL <= SAMPLER_RTOL and _interval._RTOL <= SAMPLER_RTOL
    import inspect

    from skdp_label.mechanisms.classic import _noise

    for table in (_noise.staircase_alias_table, _noise.laplace_cell_table,
                  _noise.staircase_cell_table, _noise.gaussian_cell_table):
        assert inspect.signature(table).parameters["rtol"].default <= SAMPLER_RTOL


def test_law_epsilon_refuses_a_share_too_small():
    assert law_epsilon(1.0) == 1.0 - SAMPLER_SLACK
    assert law_epsilon(1.0, draws=2) == 1.0 - 2 * SAMPLER_SLACK
    assert _validation.SAMPLER_SLACK <= 0.021 * _validation.MIN_EPSILON
    for tiny in (0.0, 1e-9, _validation.MIN_SHARE_EPSILON * (1 - 1e-12), -1.0, math.nan):
        with pytest.raises(ValueError, match="smallest budget a sampled law"):
            law_epsilon(tiny, what="the prior's epsilon")


# -- every component that builds a law from a share of epsilon -------------------------
def test_noisy_histogram_noise_is_built_two_slacks_below_its_epsilon():
    # A changed label moves two counts: each count's rate is (epsilon - 2 tau) / 2.
    counts = np.array([5.0, 0.0, 12.0, 3.0])
    got = _prior.noisy_histogram_from_counts(counts, 0.3, np.random.default_rng(1))
    noise = S.staircase_noise(np.random.default_rng(1), (0.3 - 2 * SAMPLER_SLACK) / 2, 1, 1, size=4)
    noisy = _prior.norm_sub(counts + noise)
    np.testing.assert_array_equal(got, noisy / noisy.sum())


def test_gaussian_law_is_built_below_epsilon_and_delta():
    from skdp_label.mechanisms import Gaussian
    from skdp_label.mechanisms.classic._noise import gaussian_sigma

    mech = _fit(Gaussian(1.0, delta=1e-5, bounds=(0.0, 1.0)), [0.5])
    expected = gaussian_sigma(law_epsilon(1.0), 1e-5 * (1 - SAMPLER_RTOL), float(mech.sensitivity_units_))
    assert mech.sigma_units_ == expected
    assert mech.sigma_units_ > gaussian_sigma(1.0, 1e-5, float(mech.sensitivity_units_))


def test_every_sampler_takes_the_slack():
    # Exact samplers too: their law's parameter is a rounded float (below).
    from skdp_label.mechanisms import (
        DebiasedRR,
        Laplace,
        RandomizedResponse,
        RPWithPrior,
        RROnBins,
        RRTopK,
        RRWithPrior,
    )

    for mech in (RandomizedResponse(1.0, classes=[0, 1]), RRTopK(1.0, classes=[0, 1, 2], k=2),
                 RRWithPrior(1.0, classes=[0, 1]), DebiasedRR(1.0, bounds=(0, 2)),
                 RROnBins(1.0, prior=_PRIOR), RPWithPrior(1.0, prior=_PRIOR),
                 Laplace(1.0, bounds=(0, 1)), ExponentialMechanism(1.0, bounds=(0, 1)),
                 OptimalUnbiased(1.0, prior=_PRIOR), RQM(1.0, bounds=(0, 1))):
        assert mech._law_epsilon() == 1.0 - SAMPLER_SLACK, type(mech).__name__
    # RR-on-Bins' matrix is tight at its law's epsilon, below the epsilon charged.
    loss = max_log_ratio(_fit(RROnBins(1.0, prior=_PRIOR), [1.0]).transition_matrix_)
    assert law_epsilon(1.0) - 1e-12 < loss <= law_epsilon(1.0) + 1e-15


def _rr_excess(k, epsilon, built_at):
    """Exact ratio of k-ary RR's sampled law (an exact Bernoulli of the float
    flip probability p, then exactly uniform among the k - 1 others) over
    e^epsilon: P(keep) (k - 1) / p against a lower bound of e^epsilon."""
    p = Fraction(S.rr_flip_probability(k, built_at))
    ratio = max((1 - p) * (k - 1) / p, p / ((1 - p) * (k - 1)))
    return ratio / exp_lower(epsilon)


_RR_CASES = [(k, eps) for k in (2, 3, 10, 100, 1000, 10**5)
             for eps in (1e-7, 1e-3, 0.1, 0.7, 1.0, 3.0, 8.0, 15.0, 22.0, 30.0)]


def test_randomized_response_samples_at_most_the_epsilon_charged():
    # The flip probability p = (k-1) e^-eps / (1 + (k-1) e^-eps) is a float: built
    # at epsilon itself its exact Bernoulli's law can cost a few ulps more than
    # epsilon; built at law_epsilon(epsilon) it never does.
    for k, eps in _RR_CASES:
        assert _rr_excess(k, eps, law_epsilon(eps)) <= 1, (k, eps)
    # Mutation: without the slack (the law at epsilon) some cases exceed.
    over = [(k, eps) for k, eps in _RR_CASES if _rr_excess(k, eps, eps) > 1]
    assert over, "no case where the rounded flip probability costs more than epsilon"


def test_a_rule_share_too_small_for_a_law_is_not_spent():
    from skdp_label.mechanisms._validation import MIN_SHARE_EPSILON

    def tiny(epsilon, n, size):
        return MIN_SHARE_EPSILON / 2

    assert _prior.split_epsilon(1.0, "auto", 100, 10, tiny) == (0.0, 1.0)
    # The rule may not leave the labels less than the floor either: the uniform prior.
    assert _prior.split_epsilon(1e-7, "auto", 100, 10, lambda e, n, s: e - 1e-8) == (0.0, 1e-7)


def test_a_labels_share_too_small_for_a_law_is_refused_before_spending():
    from skdp_label import BudgetAccountant

    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="labels' share of epsilon"):
        OptimalUnbiased(1.0, bounds=(0, 10), grid_size=11, prior_epsilon=1.0 - 2e-8,
                        accountant=acc).fit(np.linspace(0, 10, 50))
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="mean_epsilon must be in"):
        AutoRegression(1.0, bounds=(0, 1), mean_epsilon=1.0 - 2e-8, accountant=acc).fit(
            np.linspace(0, 1, 50))
    assert acc.spent_epsilon == 0.0


def test_the_smallest_epsilon_splits_into_shares_a_law_can_be_built_at():
    from skdp_label import BudgetAccountant
    from skdp_label.mechanisms._validation import MIN_EPSILON, MIN_SHARE_EPSILON

    acc = BudgetAccountant()
    mech = AutoRegression(MIN_EPSILON, bounds=(0, 1), mean_epsilon="auto", accountant=acc)
    mech.fit_transform(np.linspace(0, 1, 400))
    shares = [e["epsilon"] for e in mech.charges_]
    assert all(s >= MIN_SHARE_EPSILON for s in shares)
    assert acc.spent_epsilon == pytest.approx(MIN_EPSILON, rel=1e-12)


def test_the_classifiers_prior_rules_never_pick_a_share_too_small_for_a_law():
    from skdp_label.estimators._cluster_prior import cluster_prior_epsilon
    from skdp_label.estimators._noise_aware import class_prior_epsilon
    from skdp_label.mechanisms._validation import MIN_EPSILON, MIN_SHARE_EPSILON

    huge = 10**18  # sqrt(K / n) far below the floor: the floor, still at most half of epsilon
    assert class_prior_epsilon(MIN_EPSILON, huge, 3) == MIN_SHARE_EPSILON
    assert cluster_prior_epsilon(MIN_EPSILON, huge, 4, 3) == MIN_SHARE_EPSILON
    assert law_epsilon(class_prior_epsilon(MIN_EPSILON, huge, 3), draws=2) > 0
    assert class_prior_epsilon(1.0, 100, 4) == 0.2  # unchanged where it matters
