"""Tests of RPWithPrior (paper 003) and RRWithPrior for regression (000 App. G).

Algorithm 1 against brute force, exact privacy of the grid mechanism in
every case of 003's (3.4)/(3.6), the sampler against ``transition_matrix_``,
the two-step accounting, RR-on-Bins' optimality as a cross-check, and
mutation tests: the public code's mistakes (prior from raw labels, label
range from the data, full epsilon spent twice) must fail the audits.
Test-side randomness has fixed seeds; mechanisms draw from OS entropy unless
a test needs a reproducible fit.
"""

import math
import types

import numpy as np
import pytest
from _audit import (
    assert_exactly_private,
    assert_no_random_state,
    audit_copies_independent,
    audit_messages_have_no_labels,
    audit_prior_is_noisy,
    audit_sampler,
    chi_square_pvalue,
    max_log_ratio,
)

from skdp_label import BudgetAccountant
from skdp_label.estimators import LabelDPRegressor
from skdp_label.mechanisms import (
    RPWithPrior,
    RROnBins,
    RRWithPrior,
    RRWithPriorRegression,
    make_mechanism,
    mechanism_names,
)
from skdp_label.mechanisms._validation import law_epsilon
from skdp_label.mechanisms._prior import nearest_domain_index
from skdp_label.mechanisms.rp_with_prior._interval import (
    sample_grid,
    algorithm1,
    auto_window,
    grid_expected_loss,
    grid_interval,
    optimal_interval,
    step_prior_nodes,
    window_probability,
)

EPSILONS = [0.1, 0.5, 1.0, 2.0, 4.0, 8.0]


def random_step_prior(rng):
    k = int(rng.integers(2, 12))
    nodes = np.sort(rng.choice(np.arange(0, 200), size=k + 1, replace=False)) / 10.0
    return nodes, rng.dirichlet(np.full(k, 0.5))


def small_prior():
    """A skewed public prior on 0..4 (multiples of the test grid step)."""
    return np.arange(5.0), np.array([0.35, 0.3, 0.2, 0.1, 0.05])


# -- Algorithm 1 -------------------------------------------------------------------
def test_algorithm1_and_fast_solver_equal_brute_force():
    rng = np.random.default_rng(0)
    for _ in range(150):
        nodes, probs = random_step_prior(rng)
        zeta = float(rng.choice([0.05, 0.3, 1.0, 3.0, 10.0]))
        eps = float(rng.choice(EPSILONS))
        a1, a2, _ = optimal_interval(nodes, probs, zeta, eps)
        fast = float(window_probability(nodes, probs, a1, a2, zeta, eps))
        paper = float(
            window_probability(nodes, probs, *algorithm1(nodes, probs, zeta, eps), zeta, eps)
        )
        # Every (A1, A2) of a fine grid reaching past the support, nodes included.
        grid = np.unique(np.concatenate([nodes, np.linspace(nodes[0] - 1, nodes[-1] + 1, 241)]))
        brute = window_probability(nodes, probs, *np.meshgrid(grid, grid, indexing="ij"), zeta, eps)
        assert brute.max() <= fast * (1 + 1e-12)
        assert fast == pytest.approx(brute.max(), rel=1e-12)
        assert paper == pytest.approx(fast, rel=1e-12)
        assert a1 in nodes and a2 in nodes and a1 <= a2


def test_critical_points_never_beat_the_corners():
    # Lemma 3.5's e1 and e2 (Alg. 1, lines 9-21): wherever one lies inside its
    # cell, F at it (with the other end at a node) stays below the best
    # corner of the cell pair, as quasi-linearity says.
    rng = np.random.default_rng(12)
    inside = 0
    for _ in range(300):
        nodes, probs = random_step_prior(rng)
        zeta, eps = float(rng.choice([0.05, 0.3, 1.0, 3.0])), float(rng.choice(EPSILONS))
        alpha, c = probs / np.diff(nodes), math.exp(-eps)
        for i in range(probs.size):
            for j in range(i + 1, probs.size):
                if alpha[i] == alpha[j]:
                    continue
                h = alpha[i] * nodes[i + 1] + probs[i + 1 : j].sum() - alpha[j] * nodes[j]
                e1 = (2 * zeta * alpha[j] - c * h) / (c * (alpha[j] - alpha[i]))
                e2 = (2 * zeta * alpha[i] - c * h) / (c * (alpha[j] - alpha[i]))
                ends1, ends2 = nodes[[i, i + 1]], nodes[[j, j + 1]]
                best = window_probability(
                    nodes, probs, ends1[:, None], ends2[None, :], zeta, eps
                ).max()
                candidates = []
                if ends1[0] < e1 < ends1[1]:
                    candidates += [(e1, ends2[0]), (e1, ends2[1])]
                if ends2[0] < e2 < ends2[1]:
                    candidates += [(ends1[0], e2), (ends1[1], e2)]
                inside += bool(candidates)
                for a1, a2 in candidates:
                    assert float(window_probability(nodes, probs, a1, a2, zeta, eps)) <= best * (
                        1 + 1e-12
                    )
    assert inside >= 100  # the check was exercised


def test_fast_solver_scales_to_large_priors():
    rng = np.random.default_rng(1)
    k = 200_000
    nodes = np.cumsum(rng.uniform(0.5, 1.5, k + 1))
    probs = rng.dirichlet(np.full(k, 0.3))
    a1, a2, n_iter = optimal_interval(nodes, probs, 30.0, 1.0)
    assert n_iter < 20
    # Optimal against every interval sharing one of its ends (an O(k) check).
    f = float(window_probability(nodes, probs, a1, a2, 30.0, 1.0))
    assert window_probability(nodes, probs, a1, nodes, 30.0, 1.0).max() <= f * (1 + 1e-12)
    assert window_probability(nodes, probs, nodes, a2, 30.0, 1.0).max() <= f * (1 + 1e-12)


def test_step_prior_nodes_are_the_histogram_bins():
    values = np.array([0.5, 1.5, 2.5])
    np.testing.assert_array_equal(step_prior_nodes(values, 0.0, 3.0), [0, 1, 2, 3])
    np.testing.assert_array_equal(step_prior_nodes(values), [0.5, 1, 2, 2.5])
    # The noisy histogram's bins (nearest value) are exactly these cells.
    y = np.linspace(0, 3, 301)[:-1]
    np.testing.assert_array_equal(nearest_domain_index(values, y), np.floor(y).astype(int))


# -- exact privacy on the grid -------------------------------------------------------
def fitted(eps=1.0, zeta=0.5, g=0.25, prior=None, **kw):
    values, probs = small_prior() if prior is None else prior
    return RPWithPrior(
        eps, prior=(values, probs), zeta=zeta, granularity=g, bounds=(0, 4), **kw
    ).fit([0.0])


@pytest.mark.parametrize("eps", EPSILONS)
@pytest.mark.parametrize("zeta", [0.1, 0.5, 1.25])
def test_grid_mechanism_is_exactly_private_in_every_case(eps, zeta):
    mech = fitted(eps, zeta)
    matrix = mech.transition_matrix_
    g, w = mech.granularity_, round(mech.zeta_ / mech.granularity_)
    assert_exactly_private(matrix, eps)
    assert max_log_ratio(matrix) == pytest.approx(eps, rel=1e-9)  # tight: not over-noised
    # Labels of every case: inside, at both ends of [A1, A2], outside it, and
    # outside the bounds; each uses the row of its clipped, rounded value.
    a1, a2 = mech.interval_
    cases = np.array([a1, a2, (a1 + a2) / 2, a1 - 0.3, a2 + 0.3, -5.0, 9.0, a1 + 0.1])
    rows = mech._encode_labels(cases)
    units = np.clip(np.rint(cases / g), a1 / g, a2 / g)
    np.testing.assert_array_equal(mech.input_values_[rows], units * g)
    # Each row is (3.4) on the grid: 1/Gamma in the window, e^-eps/Gamma on
    # the rest of [A1 - zeta, A2 + zeta], nothing elsewhere (no other outputs).
    outputs = mech.output_values_
    assert outputs[0] == pytest.approx(mech.input_values_[0] - mech.zeta_)
    assert outputs[-1] == pytest.approx(mech.input_values_[-1] + mech.zeta_)
    n_in = mech.input_values_.size
    gamma = (2 * w + 1) + math.exp(-eps) * (n_in - 1)
    for r in rows:
        in_window = np.abs(outputs - mech.input_values_[r]) <= mech.zeta_ + g / 4
        assert in_window.sum() == 2 * w + 1
        np.testing.assert_allclose(
            matrix[r], np.where(in_window, 1, math.exp(-eps)) / gamma, rtol=1e-12
        )
    # Any two labels, whatever their case: ratio at most e^eps.
    block = matrix[rows]
    ratio = block[:, None, :] / block[None, :, :]
    assert ratio.max() <= math.exp(eps) * (1 + 1e-12)


def test_labels_outside_the_interval_are_sampled_from_the_end_rows():
    mech = RPWithPrior(
        1.0, prior=small_prior(), zeta=0.5, granularity=0.25, bounds=(0, 4), out_of_bounds="clip"
    ).fit([0.0])
    a1, a2 = mech.interval_
    assert a2 < 4  # the interval leaves part of the bounds out
    outputs, matrix = mech.output_values_, mech.transition_matrix_
    for label, row in [(a2 + 0.6, -1), (7.5, -1), (a1 - 2.0, 0)]:
        samples = mech.transform(np.full(40_000, label))
        assert chi_square_pvalue(samples, outputs, matrix[row]) > 1e-6


def test_sampler_matches_transition_matrix():
    audit_sampler(fitted(1.0, 0.5), n_per_label=20_000)
    audit_sampler(fitted(6.0, 0.25), n_per_label=20_000)  # rare rest outputs


def test_rare_rest_outputs_have_their_exact_frequency():
    """At eps = 6 the rest of the grid is rare; the exact Bernoulli keeps its
    mass right (a single 53-bit uniform would quantise it)."""
    from scipy import stats

    from skdp_label.mechanisms.rp_with_prior._interval import _levels

    mech = fitted(6.0, 0.25)
    u1, u2, w = mech._u1, mech._u2, mech._w
    units = np.full(400_000, (u1 + u2) // 2, dtype=np.int64)
    out = sample_grid(units, u1, u2, w, 6.0, np.random.default_rng(2))
    rest = int((np.abs(out - units) > w).sum())
    assert stats.binomtest(rest, units.size, _levels(u1, u2, w, 6.0)[2]).pvalue > 1e-6


def test_outputs_are_exact_grid_floats_and_large_grids_have_no_matrix():
    rng = np.random.default_rng(3)
    y = rng.uniform(0, 350, 5000)
    mech = RPWithPrior(1.0, bounds=(0, 350), resolution=5.0)
    out = mech.fit_transform(y)
    g = mech.granularity_
    assert (350 / g) >= 1024 and math.frexp(g)[0] == 0.5
    np.testing.assert_array_equal(out / g, np.rint(out / g))
    assert (
        out.min() >= mech.interval_[0] - mech.zeta_ - g
        and out.max() <= mech.interval_[1] + mech.zeta_ + g
    )
    fine = RPWithPrior(1.0, prior=small_prior(), zeta=1.0, granularity=2.0**-10).fit([0.0])
    with pytest.raises(AttributeError, match="coarse grids"):
        _ = fine.transition_matrix_
    assert fine.transform([1.0, 2.0]).shape == (2,)


# -- loss, zeta='auto', and RR-on-Bins as a yardstick -------------------------------------
def test_closed_form_loss_equals_the_matrix():
    rng = np.random.default_rng(4)
    values = np.sort(rng.uniform(0, 4, 7))  # off the grid: rounding counts
    probs = rng.dirichlet(np.ones(7))
    for loss in ["squared", "absolute"]:
        mech = RPWithPrior(1.5, prior=(values, probs), zeta=0.5, granularity=0.125, loss=loss).fit(
            [1.0]
        )
        rows = mech._encode_labels(values)
        f = (lambda d: d**2) if loss == "squared" else np.abs
        by_matrix = np.sum(
            probs[:, None]
            * mech.transition_matrix_[rows]
            * f(mech.output_values_[None, :] - values[:, None])
        )
        assert mech.noisy_label_loss_ == pytest.approx(by_matrix, rel=1e-10)


@pytest.mark.parametrize("loss", ["squared", "absolute"])
def test_auto_zeta_is_the_exhaustive_minimiser(loss):
    values, probs = small_prior()
    nodes = step_prior_nodes(values, 0.0, 4.0)
    g = 0.125
    for eps in [0.5, 2.0, 6.0]:
        w, _interval, best = auto_window(nodes, values, probs, eps, g, loss)
        losses = []
        for v in range(int(4 / g) + 1):  # every half-window up to the span
            a1, a2, _ = optimal_interval(nodes, probs, (v + 0.5) * g, eps)
            u1, u2, _ = grid_interval(a1, a2, 0.0, g)
            losses.append(grid_expected_loss(values, probs, u1, u2, v, eps, g, loss))
        assert best == pytest.approx(min(losses), rel=1e-12)
        mech = RPWithPrior(eps, prior=(values, probs), granularity=g, loss=loss).fit([0.0])
        assert mech.zeta_ == w * g and mech.noisy_label_loss_ == pytest.approx(best)


@pytest.mark.parametrize("eps", EPSILONS)
def test_rr_on_bins_is_never_worse_for_a_known_prior(eps):
    # RR-on-Bins is optimal over all eps-DP mechanisms on the domain (000,
    # Thm. 5); RPWithPrior restricted to the domain's labels is one of them.
    rng = np.random.default_rng(5)
    for _ in range(3):
        values = np.sort(rng.choice(np.arange(0, 60), 12, replace=False)) * 0.5
        probs = rng.dirichlet(np.full(12, 0.7))
        rr = RROnBins(eps, prior=(values, probs)).fit(values[:1])
        for zeta in ["auto", 0.5, 4.0]:
            rp = RPWithPrior(eps, prior=(values, probs), zeta=zeta, granularity=0.5).fit(values[:1])
            assert rr.noisy_label_loss_ <= rp.noisy_label_loss_ * (1 + 1e-9)
        rrp = RRWithPriorRegression(eps, prior=(values, probs)).fit(values[:1])
        assert rr.noisy_label_loss_ <= rrp.noisy_label_loss_ * (1 + 1e-9)


# -- the private prior and the accounting ---------------------------------------------------
def prior_view(mech):
    """The fitted prior seen by ``audit_prior_is_noisy`` (its domain is the bins)."""
    return types.SimpleNamespace(
        input_values_=mech.prior_values_, prior_=mech.prior_, prior_epsilon_=mech.prior_epsilon_
    )


class _PriorView:
    def __init__(self, make):
        self.make = make

    def fit(self, y):
        return prior_view(self.make().fit(y))


def bin_labels(rng):
    """Labels filling 10 bins of (0, 10) with many labels each."""
    return rng.uniform(0, 10, 4000)


def test_private_prior_is_a_fresh_noisy_histogram():
    y = bin_labels(np.random.default_rng(6))
    audit_prior_is_noisy(
        lambda: _PriorView(lambda: RPWithPrior(2.0, bounds=(0, 10), n_bins=10, prior_epsilon=0.5)),
        y,
    )
    audit_prior_is_noisy(
        lambda: RRWithPriorRegression(2.0, bounds=(0, 10), resolution=1.0, prior_epsilon=0.5), y
    )


def audit_two_step_accounting(mech, y):
    """Fit and release once; the ledger must hold eps1 (histogram) + eps2
    (labels) = epsilon, and the sampled matrix must cost no more than eps2."""
    acc = BudgetAccountant()
    mech.set_params(accountant=acc)
    mech.fit_transform(y)
    findings = []
    spent = [entry.epsilon for entry in acc.ledger]
    if len(spent) != 2 or not math.isclose(sum(spent), mech.epsilon, rel_tol=1e-12):
        findings.append(f"ledger {spent} does not split epsilon={mech.epsilon} in two")
    elif not math.isclose(spent[0], mech.prior_epsilon_, rel_tol=1e-12):
        findings.append(f"histogram charged {spent[0]}, prior_epsilon_ is {mech.prior_epsilon_}")
    elif max_log_ratio(mech.transition_matrix_) > spent[1] * (1 + 1e-9):
        findings.append(
            f"labels randomized at loss {max_log_ratio(mech.transition_matrix_):.4g} > charged {spent[1]:.4g}"
        )
    assert not findings, "; ".join(findings)


def rp_small(**kw):
    return RPWithPrior(2.0, bounds=(0, 4), n_bins=8, granularity=0.25, **kw)


def test_two_step_accounting():
    y = np.random.default_rng(7).uniform(0, 4, 500)
    for prior_epsilon in ["auto", 0.3]:
        audit_two_step_accounting(rp_small(prior_epsilon=prior_epsilon), y)
        audit_two_step_accounting(
            RRWithPriorRegression(2.0, bounds=(0, 4), resolution=0.5, prior_epsilon=prior_epsilon),
            y,
        )
    mech = rp_small()
    mech.fit(y)
    assert mech.prior_epsilon_ == pytest.approx(math.sqrt(8 / 500))  # 000 Thm. 7, as RR-on-Bins


@pytest.mark.parametrize(
    "params",
    [
        {"granularity": 0.3},  # not a power of two
        {"n_bins": 8, "resolution": 0.5},
        {"bounds": None},
        {"prior": ([0.0, 9.0], [0.5, 0.5])},  # outside the bounds
        {"prior": ([1.0], [1.0])},  # one value: no interval
        {"granularity": 2.0**-30},  # too many grid values
    ],
)
def test_bad_public_inputs_spend_nothing(params):
    acc = BudgetAccountant()
    kw = {"bounds": (0, 4), "accountant": acc, **params}
    with pytest.raises(ValueError):
        RPWithPrior(1.0, **kw).fit([1.0, 2.0])
    assert acc.ledger == []


def test_messages_quote_no_label():
    labels = [1.2345, 2.71828]
    audit_messages_have_no_labels(
        lambda: RPWithPrior(1.0, bounds=(0, 4), granularity=0.3).fit(labels), labels, public=[0, 4]
    )
    mech = RPWithPrior(1.0, bounds=(0, 4)).fit(labels)
    audit_messages_have_no_labels(
        lambda: mech.transform([[1.2345, 2.71828]]), labels, public=[0, 4]
    )


def test_no_random_state_and_independent_copies():
    mech = fitted(1.0, 0.5)
    assert_no_random_state(mech)
    audit_copies_independent(mech, np.repeat(mech.input_values_, 300))
    rrp = RRWithPriorRegression(1.0, bounds=(0, 4), resolution=0.5).fit([1.0, 2.0])
    assert_no_random_state(rrp)
    audit_copies_independent(rrp, np.repeat(rrp.input_values_, 300))


# -- mutation tests: the public code's mistakes ------------------------------------------
class RawPriorRP(RPWithPrior):
    """003's public code: the "private" histogram is the raw one (charged or not)."""

    def _fit_mechanism(self, y):
        values, _ = self._domain()
        self.prior_epsilon_ = 0.5 * float(self.epsilon)
        codes = nearest_domain_index(values, y.ravel())
        self.prior_values_ = values
        self.prior_ = np.bincount(codes, minlength=values.size) / codes.size
        self._build_mechanism(values, self.prior_, float(self.epsilon) - self.prior_epsilon_)


class DataRangeRP(RPWithPrior):
    """003's public code: the label range (the prior's support) from the data."""

    def _nodes(self, values):
        lo, hi = getattr(self, "_data_lo", None), getattr(self, "_data_hi", None)
        return step_prior_nodes(values, lo, hi)

    def _fit_mechanism(self, y):
        self._data_lo, self._data_hi = float(y.min()), float(y.max())
        super()._fit_mechanism(y)


class FullBudgetTwiceRP(RPWithPrior):
    """003's public code (one version): eps on the prior, and eps again on the labels."""

    def _build_mechanism(self, prior_values, prior_probabilities, epsilon):
        super()._build_mechanism(prior_values, prior_probabilities, float(self.epsilon))


def release_privacy_loss(fit_a, fit_b, y_a, y_b):
    """Exact privacy loss of one release of all rows, between two fits.

    Rows are randomized independently, so the worst-case log-ratio of the
    whole release is the sum over rows of each row's worst log-ratio (in the
    worse direction); a row whose outputs one fit can produce and the other
    cannot makes it infinite.
    """
    outputs = np.union1d(fit_a.output_values_, fit_b.output_values_)

    def rows(fit, y):
        dist = np.zeros((len(y), outputs.size))
        cols = np.searchsorted(outputs, fit.output_values_)
        dist[:, cols] = fit.transition_matrix_[fit._encode_labels(np.asarray(y, dtype=float))]
        return dist

    pa, pb = rows(fit_a, y_a), rows(fit_b, y_b)
    with np.errstate(divide="ignore", invalid="ignore"):
        log_ratio = np.log(pa) - np.log(pb)
    both_zero = (pa == 0) & (pb == 0)
    log_ratio = np.where(both_zero, 0.0, log_ratio)
    return max(log_ratio.max(axis=1).sum(), (-log_ratio).max(axis=1).sum())


def test_release_loss_of_neighbouring_datasets():
    # One label changes (2.0 -> 3.75); a public prior; the whole release of
    # the correct mechanism costs epsilon, the data-range mutant's does not.
    y = np.array([0.5, 1.0, 2.0, 1.5, 2.5])
    y2 = y.copy()
    y2[2] = 3.75
    prior = (np.arange(0.5, 4.0, 1.0), np.array([0.3, 0.4, 0.2, 0.1]))
    for cls, broken in [(RPWithPrior, False), (DataRangeRP, True)]:
        kw = {"prior": prior, "bounds": (0, 4), "zeta": 0.5, "granularity": 0.25}
        loss = release_privacy_loss(cls(1.0, **kw).fit(y), cls(1.0, **kw).fit(y2), y, y2)
        if broken:
            assert loss > 1.0 + 1e-6, "the audit missed a label range taken from the data"
        else:
            assert loss == pytest.approx(1.0, rel=1e-9)


def test_mutant_raw_prior_fails_the_prior_audit():
    y = bin_labels(np.random.default_rng(8))
    with pytest.raises(AssertionError, match="not a fresh noisy histogram"):
        audit_prior_is_noisy(
            lambda: _PriorView(lambda: RawPriorRP(2.0, bounds=(0, 10), n_bins=10)), y
        )


def test_mutant_full_budget_twice_fails_the_accounting_audit():
    y = np.random.default_rng(9).uniform(0, 4, 500)
    with pytest.raises(AssertionError, match="randomized at loss"):
        audit_two_step_accounting(
            FullBudgetTwiceRP(2.0, bounds=(0, 4), n_bins=8, granularity=0.25), y
        )


# -- RRWithPrior for regression ------------------------------------------------------------
@pytest.mark.parametrize("eps", EPSILONS)
def test_rr_with_prior_regression_is_the_classification_mechanism(eps):
    rng = np.random.default_rng(10)
    values = np.arange(0.0, 52.0)
    probs = rng.dirichlet(np.full(52, 0.3))
    mech = RRWithPriorRegression(eps, prior=(values, probs)).fit([0.0])
    # Both laws are built at law_epsilon (less the samplers' slack).
    clf = RRWithPrior(eps, classes=values, prior=probs).fit([0.0])
    assert mech.k_ == clf.k_
    np.testing.assert_array_equal(mech.output_values_, clf.top_k_)
    np.testing.assert_array_equal(
        mech.transition_matrix_, clf.transition_matrix_[:, np.isin(values, clf.top_k_)]
    )
    assert_exactly_private(mech.transition_matrix_, law_epsilon(eps))


def test_rr_with_prior_regression_sampler():
    mech = RRWithPriorRegression(1.0, prior=small_prior(), out_of_bounds="clip").fit([0.0])
    audit_sampler(mech, n_per_label=20_000)
    # Off-domain labels go to the nearest value (clipped at the ends when asked).
    out = mech.transform(np.full(20_000, 7.2))
    assert chi_square_pvalue(out, mech.output_values_, mech.transition_matrix_[-1]) > 1e-6


# -- the estimator ------------------------------------------------------------------------
@pytest.mark.parametrize("name", ["rp-with-prior", "rr-with-prior-regression"])
def test_usable_by_name_in_label_dp_regressor(name):
    from sklearn.linear_model import Ridge

    assert name in mechanism_names("regression")
    rng = np.random.default_rng(11)
    X = rng.normal(size=(400, 3))
    y = np.clip(20 + 5 * X[:, 0] + rng.normal(size=400), 0, 40)
    acc = BudgetAccountant()
    model = LabelDPRegressor(
        Ridge(), name, 2.0, bounds=(0, 40), accountant=acc, mechanism_params={"resolution": 2.0}
    ).fit(X, y)
    assert model.predict(X).shape == (400,)
    assert sum(e.epsilon for e in acc.ledger) == pytest.approx(2.0)
    assert isinstance(
        make_mechanism(name, epsilon=1.0, bounds=(0, 4)), (RPWithPrior, RRWithPriorRegression)
    )


class ContinuousRP(RPWithPrior):
    """003 as written: uniform floating-point outputs in the window / the rest."""

    def _randomize_column(self, y, rng):
        g = self.granularity_
        a1, a2 = self._u1 * g, self._u2 * g
        y = np.clip(y, a1, a2)
        rest = rng.random(y.shape[0]) >= self.window_probability_
        window = y + rng.uniform(-self.zeta_, self.zeta_, y.shape[0])
        # The rest: uniform on [A1 - zeta, A2 + zeta] minus the window.
        r = rng.uniform(0, a2 - a1, y.shape[0])
        far = np.where(r < y - a1, a1 - self.zeta_ + r, y + self.zeta_ + (r - (y - a1)))
        return np.where(rest, far, window)


def test_mutant_continuous_outputs_fail_the_sampler_audit():
    with pytest.raises(AssertionError, match="outside the row's support"):
        audit_sampler(
            ContinuousRP(1.0, prior=small_prior(), zeta=0.5, granularity=0.25).fit([0.0]),
            n_per_label=200,
        )


def _grid_reference(y, g, u1, u2, w, rest_total, rng):
    """The grid mechanism's one-digit draw written plainly (branches, ``%``,
    the twins of ``bernoulli_exact`` and ``uniform_index``): d < qd the
    rest, d > qd the window, a tie by the fraction; the position is the
    part's uniform digit (d, or d - qd - 1) mod its size below the range's
    largest multiple of it, else from fresh digits."""
    from skdp_label._kernels._sampling import bernoulli_exact, uniform_index
    from skdp_label._kernels._twin import twin

    bernoulli, uniform = twin(bernoulli_exact), twin(uniform_index)
    digit = 2**53
    t = rest_total * digit
    qd, frac = math.floor(t), t - math.floor(t)
    out = []
    for v in y:
        u = int(min(max(np.rint(v / g), u1), u2))
        d = int(rng.random() * digit)
        e = None
        if d < qd:
            rest, e, span = True, d, qd
        elif d > qd:
            rest, e, span = False, d - qd - 1, digit - qd - 1
        else:
            rest = bernoulli(frac, rng)
        m = max(u2 - u1, 1) if rest else 2 * w + 1
        r = e % m if e is not None and e < span - span % m else int(uniform(float(m), rng))
        if rest:
            unit = u1 - w + r if r < u - u1 else u + w + 1 + (r - (u - u1))
        else:
            unit = u - w + r
        out.append(float(unit) * g)
    return np.array(out)


def _grid_kernel(y, g, u1, u2, w, rest_total, rng, parts=None, use_twin=False):
    """The compiled kernel (or its twin) as ``sample_labels`` calls it."""
    from skdp_label._kernels._twin import twin
    from skdp_label.mechanisms.rp_with_prior._interval import _sample_grid, grid_parts, inverse_step

    y, inv = np.asarray(y, dtype=float), inverse_step(g)
    if inv == 0.0:
        y, inv = y / g, 1.0
    out = np.empty(len(y))
    kernel = twin(_sample_grid) if use_twin else _sample_grid
    kernel(y, inv, g, np.int64(u1), np.int64(u2), np.int64(w),
           *(grid_parts(u1, u2, w, rest_total) if parts is None else parts), rng, out)
    return out


@pytest.mark.parametrize(
    "u1, u2, w, rest_total",
    [(0, 10, 0, 0.3), (0, 10, 3, 0.0), (0, 10, 3, 1.0), (5, 6, 2, 0.5), (5, 5, 0, 0.2),
     (0, 1000, 7, 1e-300), (-50, 50, 100, 0.999999), (0, 3, 1, 0.5), (0, 7, 2, 0.7)],
)
def test_grid_sampler_reads_the_digits_of_its_reference(u1, u2, w, rest_total):
    """The compiled sampler and its twin (masks, the residue by a
    multiplication, constants from a table) return, digit for digit, the
    plain one-digit draw: on random labels, including the parts that are
    never or always chosen (rest mass 0 or 1) and one-value parts, then on
    scripted first digits in every rare region (a tie with qd, the rest's
    digits in [limit, qd), the window's above its limit), which read more
    digits. Labels are rounded to the grid by a multiplication with the
    inverse step (power-of-two steps) or a division (others): the same units
    as ``rint(y / g)`` either way."""
    from skdp_label.mechanisms.rp_with_prior._interval import grid_parts, inverse_step
    from test_numerics import digits_used, scripted

    g = {0: 1.0, 1: 0.25, 2: 0.3}[(u1 + u2 + w) % 3]  # 0.3: not a power of two
    assert (inverse_step(g) > 0) == (g != 0.3)
    y = np.random.default_rng(0).uniform(u1 - 3, u2 + 3, 2000) * g
    expected = _grid_reference(y, g, u1, u2, w, rest_total, np.random.default_rng(1))
    for use_twin in (False, True):
        out = _grid_kernel(y, g, u1, u2, w, rest_total, np.random.default_rng(1), use_twin=use_twin)
        np.testing.assert_array_equal(out, expected)
    _, limits, _, qd, _ = grid_parts(u1, u2, w, rest_total)
    qd = int(qd)
    firsts = {qd, int(limits[1]), qd - 1, 2**53 - 1, qd + 1 + int(limits[0])}
    for first in sorted(d for d in firsts if 0 <= d < 2**53):
        digits = [first, 2**52 + 12345, 777, 2**40]
        ref_rng, rng = scripted(digits), scripted(digits)
        ref = _grid_reference(y[:1], g, u1, u2, w, rest_total, ref_rng)
        np.testing.assert_array_equal(_grid_kernel(y[:1], g, u1, u2, w, rest_total, rng), ref)
        assert digits_used(rng) == digits_used(ref_rng)


def test_grid_reference_comparison_catches_wrong_limits():
    """Mutations: a rest limit one part size too high takes the residue of
    digits in [limit, qd) (that must read fresh ones), a window limit one
    too low reads fresh digits for the last digit whose residue is uniform
    (e = limit - 1): scripted first digits catch both."""
    from skdp_label.mechanisms.rp_with_prior._interval import grid_parts
    from test_numerics import digits_used, scripted

    u1, u2, w, rest_total = 0, 7, 2, 0.7
    sizes, limits, inverses, qd, frac = grid_parts(u1, u2, w, rest_total)
    assert limits[1] < qd  # a rare region in the rest
    qd, window_limit = int(qd), int(limits[0])
    assert qd + window_limit < 2**53  # the window's last digit with a uniform residue
    for row, change, first in [(1, 7, int(limits[1])), (0, -1, qd + window_limit)]:
        mutant = limits.copy()
        mutant[row] += change
        mutant = (sizes, mutant, inverses, qd, frac)
        right, wrong = scripted([first, 2**52 + 5, 9]), scripted([first, 2**52 + 5, 9])
        _grid_kernel([3.0], 1.0, u1, u2, w, rest_total, right)
        _grid_kernel([3.0], 1.0, u1, u2, w, rest_total, wrong, parts=mutant)
        assert digits_used(right) != digits_used(wrong)


def test_int_residue_is_the_integer_modulo():
    """The sampler's position ``e mod m`` (an int64 digit, a float quotient by
    the table's ``1 / m``, corrections by masks) equals the integer modulo,
    compiled and in the twin, at the ends of the digit range and around
    multiples of m, for part sizes from 1 to 2**53 - 1. Mutation: without the
    upward correction (r < 0: + m) some digits come out negative."""
    import numba

    from skdp_label._kernels import _twin
    from skdp_label.mechanisms.rp_with_prior._interval import _int_residue
    from test_numerics import residue_digits

    @numba.njit
    def residues(d, m, inv_m, out):
        for i in range(d.shape[0]):
            out[i] = _int_residue(d[i], m, inv_m)

    gen = np.random.default_rng(0)
    caught = 0
    for m in [1, 2, 3, 7, 99, 1517, 2**20 + 1, 2**40 - 3, 2**52 + 1, 2**53 - 1]:
        d = residue_digits(m, gen).astype(np.int64)
        expected = d % np.int64(m)
        out = np.empty(d.shape[0], dtype=np.int64)
        residues(d, np.int64(m), 1.0 / m, out)
        np.testing.assert_array_equal(out, expected)
        twin = [_twin.twin(_int_residue)(int(x), m, 1.0 / m) for x in d[:300]]
        np.testing.assert_array_equal(twin, expected[:300])
        # The mutant: the truncated quotient and the downward correction only.
        r = d - (d.astype(np.float64) * (1.0 / m)).astype(np.int64) * m
        r = r - (m & ~((r - m) >> 63))
        caught += int(np.any(r != expected))
    assert caught > 0
