"""LabelDPRegressor(shrinkage=...): the guard toward the constant predictor
(docs/auto.md), a post-processing of the noisy labels."""

import itertools
import pickle
import warnings

import numpy as np
import pytest
import scipy.sparse
from sklearn.linear_model import Ridge
from sklearn.metrics import r2_score
from sklearn.neighbors import KNeighborsRegressor

from _audit import assert_no_random_state
from skdp_label import BudgetAccountant, LabelDPRegressor
from skdp_label.estimators._calibration import (
    anchor_for,
    combined_mean,
    debiasing_function,
    fit_calibration,
    shrunk_mean,
)
from skdp_label.estimators._scorers import _transition
from skdp_label.mechanisms import AutoRegression, OptimalUnbiased, RROnBins
from skdp_label.mechanisms import _prior
from skdp_label.mechanisms._prior import MEAN_UNITS, mean_noise_variance, noisy_mean
from skdp_label.mechanisms.auto import _mechanism as auto_module
from skdp_label.utils import PrivacyLeakWarning
from skdp_label.utils._random import public_folds

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.utils.PrivacyLeakWarning")

BOUNDS = (0.0, 10.0)


def _signal_data(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.clip(5.0 + 2.0 * X[:, 0] + X[:, 1], *BOUNDS)
    return X, y


def _noise_data(n=600, seed=1):
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 3)), rng.uniform(*BOUNDS, size=n)


class RecordingRidge(Ridge):
    """A Ridge that records, for every fit, its alpha, the rows it saw (by
    their first feature) and the length of its sample weights."""

    fits = []

    def fit(self, X, y, sample_weight=None):
        rows = tuple(np.round(np.asarray(X)[:, 0], 12))
        weights = None if sample_weight is None else len(sample_weight)
        RecordingRidge.fits.append((self.alpha, rows, weights))
        return super().fit(X, y, sample_weight=sample_weight)


@pytest.fixture
def recorder():
    RecordingRidge.fits = []
    yield RecordingRidge
    RecordingRidge.fits = []


# -- behaviour -------------------------------------------------------------------
def test_pure_noise_features_give_a_constant():
    # A 3-nearest-neighbour model fits the unbiased randomizer's label noise;
    # its out-of-fold predictions carry no signal, so the guard keeps (nearly)
    # the constant. ('auto' itself often releases one or two bins here, which
    # leave the model nothing to fit: checked at the end.)
    X, y = _noise_data()
    X_test = np.random.default_rng(2).normal(size=(300, 3))
    reg = LabelDPRegressor(KNeighborsRegressor(n_neighbors=3), "unbiased", 1.0, bounds=BOUNDS,
                           shrinkage="cv", random_state=0).fit(X, y)
    guarded = reg.predict(X_test)
    unguarded = np.clip(reg.estimator_.predict(X_test), *BOUNDS)
    assert reg.shrinkage_slope_ < 0.2
    assert guarded.std() < 0.2 * unguarded.std()
    # and its test MSE is no worse than the unguarded model's (true labels: uniform noise)
    y_test = np.random.default_rng(3).uniform(*BOUNDS, size=300)
    assert np.mean((guarded - y_test) ** 2) < np.mean((unguarded - y_test) ** 2)
    # score() scores what predict returns (the guarded, clipped predictions)
    with pytest.warns(UserWarning, match="compares predictions"):
        score = reg.score(X_test, y_test)
    assert score == pytest.approx(r2_score(y_test, guarded))
    assert score > r2_score(y_test, unguarded)
    auto = LabelDPRegressor(KNeighborsRegressor(n_neighbors=3), "auto", 1.0, bounds=BOUNDS,
                            random_state=0).fit(X, y)
    assert auto.predict(X_test).std() < 0.05 * (BOUNDS[1] - BOUNDS[0])


def test_strong_signal_keeps_the_model():
    X, y = _signal_data()
    X_test, y_test = _signal_data(500, seed=5)
    reg = LabelDPRegressor(Ridge(), "auto", 4.0, bounds=BOUNDS, random_state=0).fit(X, y)
    assert 0.8 < reg.shrinkage_slope_ < 1.25
    unguarded = np.clip(reg.estimator_.predict(X_test), *BOUNDS)

    def r2(pred):
        return 1 - np.mean((pred - y_test) ** 2) / np.var(y_test)

    assert r2(reg.predict(X_test)) > 0.8
    assert r2(reg.predict(X_test)) >= r2(unguarded) - 0.02


def test_default_is_on_for_auto_only():
    X, y = _signal_data(300)
    explicit = LabelDPRegressor(Ridge(), "unbiased", 2.0, bounds=BOUNDS, random_state=0).fit(X, y)
    assert (explicit.shrinkage_slope_, explicit.shrinkage_intercept_) == (1.0, 0.0)
    np.testing.assert_array_equal(
        explicit.predict(X), np.clip(explicit.estimator_.predict(X), *BOUNDS))
    forced = LabelDPRegressor(Ridge(), "unbiased", 2.0, bounds=BOUNDS, random_state=0,
                              shrinkage="cv").fit(X, y)
    assert forced.shrinkage_slope_ != 1.0
    off = LabelDPRegressor(Ridge(), "auto", 2.0, bounds=BOUNDS, random_state=0,
                           shrinkage=None).fit(X, y)
    assert (off.shrinkage_slope_, off.shrinkage_intercept_) == (1.0, 0.0)


def test_fixed_weight_mixes_model_and_constant():
    X, y = _signal_data(300)
    common = dict(bounds=BOUNDS, random_state=0, clip_predictions=False)
    model = LabelDPRegressor(Ridge(), "unbiased", 2.0, shrinkage=0.0, **common).fit(X, y)
    np.testing.assert_allclose(model.predict(X), model.estimator_.predict(X))
    constant = LabelDPRegressor(Ridge(), "unbiased", 2.0, shrinkage=1.0, **common).fit(X, y)
    assert np.ptp(constant.predict(X)) == 0.0
    half = LabelDPRegressor(Ridge(), "unbiased", 2.0, shrinkage=0.5, **common).fit(X, y)
    np.testing.assert_allclose(
        half.predict(X), 0.5 * half.estimator_.predict(X) + half.shrinkage_intercept_)
    assert half.shrinkage_intercept_ == pytest.approx(0.5 * constant.predict(X[:1])[0])


# -- the statistics ----------------------------------------------------------------
def _exact_expected_raw_slope(mechanism, labels, oof, use_debiasing=True):
    """E[raw slope] over every combination of the mechanism's outputs."""
    matrix, inputs, outputs = _transition(mechanism)
    rows = [int(np.flatnonzero(inputs == label)[0]) for label in labels]
    debias = debiasing_function(mechanism) if use_debiasing else np.asarray
    expected = 0.0
    for combo in itertools.product(range(outputs.size), repeat=len(labels)):
        prob = np.prod([matrix[r, c] for r, c in zip(rows, combo)])
        noisy = outputs[list(combo)].astype(np.float64)
        expected += prob * fit_calibration(debias(noisy), oof, anchor=0.0).raw_slope
    return expected


ORACLE_OOF = np.array([1.0, 4.0, 2.5])  # fixed out-of-fold predictions


@pytest.mark.parametrize("epsilon", [0.5, 2.0])
def test_slope_numerator_is_unbiased_for_an_invertible_mechanism(epsilon):
    values = np.arange(5.0)
    mech = OptimalUnbiased(epsilon, prior=(values, np.ones(5))).fit(values[:1])
    labels = np.array([0.0, 4.0, 3.0])
    truth = fit_calibration(labels, ORACLE_OOF, 0.0).raw_slope
    assert _exact_expected_raw_slope(mech, labels, ORACLE_OOF) == pytest.approx(truth, rel=1e-9)


def test_slope_is_unbiased_for_rr_on_bins_bin_means():
    # RR-on-Bins merging labels: E[d | y] is the prior mean of y's bin.
    values = np.arange(6.0)
    prior = np.array([0.4, 0.3, 0.1, 0.1, 0.05, 0.05])
    mech = RROnBins(0.5, prior=(values, prior)).fit(values[:1])
    matrix, inputs, _ = _transition(mech)
    _, group = np.unique(np.round(matrix, 12), axis=0, return_inverse=True)
    group = group.reshape(-1)
    assert np.unique(group).size < values.size  # bins merge labels
    bin_mean = np.array([
        np.average(values[group == g], weights=prior[group == g]) for g in group])
    labels = np.array([0.0, 5.0, 2.0])
    binned = bin_mean[labels.astype(int)]
    truth = fit_calibration(binned, ORACLE_OOF, 0.0).raw_slope
    assert _exact_expected_raw_slope(mech, labels, ORACLE_OOF) == pytest.approx(truth, rel=1e-9)
    # Mutation: the noisy labels themselves are shrunk toward the prior mean.
    raw = _exact_expected_raw_slope(mech, labels, ORACLE_OOF, use_debiasing=False)
    assert abs(raw - truth) > 0.05 * abs(truth)


def test_slope_shrinks_with_its_standard_error():
    rng = np.random.default_rng(0)
    oof = rng.normal(size=400)
    signal = 3.0 + oof
    exact = fit_calibration(signal, oof, anchor=float(signal.mean()))
    assert exact.slope == pytest.approx(1.0) and exact.intercept == pytest.approx(3.0)
    noisy = signal + rng.normal(scale=200.0, size=400)  # se ~ 10 >> 1
    weak = fit_calibration(noisy, oof, anchor=3.0)
    assert weak.slope_se > 5 and 0.0 <= weak.slope <= 2.0
    assert weak.slope < abs(weak.raw_slope)


def test_constant_shrinks_a_noisy_mean_toward_the_anchor():
    rng = np.random.default_rng(0)
    truth = rng.uniform(0, 10, size=2000)  # mean ~5
    very_noisy = truth + rng.normal(scale=300.0, size=2000)  # sd of the mean ~7
    assert abs(shrunk_mean(very_noisy, anchor=5.2) - 5.2) < abs(very_noisy.mean() - 5.2) / 3
    precise = truth + rng.normal(scale=1.0, size=2000)  # sd of the mean ~0.07
    assert shrunk_mean(precise, anchor=9.0) == pytest.approx(precise.mean(), abs=0.01)
    # the model's variance counts when the sample under-represents rare outputs
    assert abs(shrunk_mean(precise, 9.0, model_variance=1e6) - 9.0) < 0.5


def test_model_variance_is_the_debiased_labels_variance_under_the_prior():
    values = np.arange(5.0)
    prior = np.array([0.1, 0.2, 0.4, 0.2, 0.1])
    mech = OptimalUnbiased(1.0, prior=(values, prior)).fit(values[:1])
    matrix, inputs, outputs = _transition(mech)
    anchor, variance = anchor_for(mech, debiasing_function(mech))
    assert anchor == pytest.approx(prior @ values)
    joint = prior[:, None] * matrix  # P(y, y~)
    mean = joint.sum(axis=0) @ outputs
    assert variance == pytest.approx(joint.sum(axis=0) @ (outputs - mean) ** 2, rel=1e-9)


# -- privacy -----------------------------------------------------------------------
def test_no_extra_epsilon_is_charged():
    """The guard moves a share of epsilon to the noisy mean; the total is
    epsilon with or without it, and without the mean the guard is free."""
    X, y = _signal_data(400)
    ledgers = {}
    for shrinkage, params in [("cv", None), (None, None), ("cv", {"mean_epsilon": None})]:
        acc = BudgetAccountant(epsilon=10.0)
        LabelDPRegressor(Ridge(), "auto", 1.0, bounds=BOUNDS, accountant=acc,
                         shrinkage=shrinkage, mechanism_params=params).fit(X, y)
        assert acc.spent_epsilon == pytest.approx(1.0, rel=1e-12)
        ledgers[shrinkage, params is None] = [(e.details["step"], e.epsilon) for e in acc.ledger]
    assert [step for step, _ in ledgers["cv", True]] == [
        "noisy label mean", "noisy label histogram", "randomized labels"]
    assert [step for step, _ in ledgers[None, True]] == [
        "noisy label histogram", "randomized labels"]
    assert ledgers["cv", False] == ledgers[None, True]  # no mean: the guard spends nothing
    # An instance keeps its own choice (0: off); None is filled in by the guard.
    for mean_epsilon, rows in [(0.0, 2), (None, 3)]:
        acc = BudgetAccountant()
        LabelDPRegressor(Ridge(), AutoRegression(bounds=BOUNDS, mean_epsilon=mean_epsilon), 1.0,
                         accountant=acc).fit(X, y)
        assert len(acc.ledger) == rows


def test_fitted_guard_keeps_no_rows_and_no_random_state():
    X, y = _signal_data(400)
    reg = LabelDPRegressor(Ridge(), "auto", 1.0, bounds=BOUNDS, random_state=0).fit(X, y)
    assert reg.shrinkage_slope_ != 1.0  # the guard ran
    assert_no_random_state(reg)
    for name, value in vars(reg).items():
        assert np.size(value) < X.shape[0] or name == "base_estimator", name
    restored = pickle.loads(pickle.dumps(reg))
    np.testing.assert_array_equal(restored.predict(X[:5]), reg.predict(X[:5]))


def test_folds_come_from_the_features_only(recorder):
    X, y = _signal_data(300)
    folds = []
    for random_state, labels in [(0, y), (1, y), (None, BOUNDS[1] - y)]:
        recorder.fits = []
        LabelDPRegressor(recorder(), "auto", 1.0, bounds=BOUNDS, random_state=random_state).fit(
            X, labels)
        # the fits on the public features and the full noisy labels have all rows
        folds.append(sorted(rows for _, rows, _ in recorder.fits if len(rows) < X.shape[0]))
    assert len(folds[0]) == 3
    assert folds[0] == folds[1] == folds[2]
    same = [test for _, test in public_folds("calibration folds", X, 3)]
    assert [test.tolist() for _, test in public_folds("calibration folds", X, 3)] == [t.tolist() for t in same]
    assert any(t.tolist() != list(range(t[0], t[0] + t.size)) for t in same)  # shuffled


def test_fold_fits_get_the_searched_parameters_and_weights(recorder):
    X, y = _signal_data(300)
    weights = np.linspace(0.5, 1.5, X.shape[0])
    reg = LabelDPRegressor(recorder(), "unbiased", 4.0, bounds=BOUNDS, random_state=0,
                           param_grid={"alpha": [0.01, 1e6]}, cv=2, shrinkage="cv")
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg.fit(X, y, sample_weight=weights)
    assert reg.best_params_ == {"alpha": 0.01}
    fold_fits = recorder.fits[-3:]  # after the search and its refit
    assert all(alpha == 0.01 for alpha, _, _ in fold_fits)
    assert all(n_weights == len(rows) < X.shape[0] for _, rows, n_weights in fold_fits)
    assert 0.5 < reg.shrinkage_slope_ < 1.5


@pytest.mark.parametrize("kind", ["pandas", "coo", "bsr", "list"])
def test_cross_fitting_takes_every_input_kind(kind):
    X, y = _signal_data(300)
    if kind == "pandas":
        pd = pytest.importorskip("pandas")
        X = pd.DataFrame(X, columns=["a", "b", "c"], index=np.arange(300) * 7)
    elif kind in ("coo", "bsr"):
        X = getattr(scipy.sparse, f"{kind}_matrix")(X)
    else:
        X = X.tolist()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a failed cross-fitting warns
        warnings.simplefilter("ignore", PrivacyLeakWarning)  # the seed: not flaky
        reg = LabelDPRegressor(Ridge(), "auto", 2.0, bounds=BOUNDS, random_state=0).fit(X, y)
    assert 0.5 < reg.shrinkage_slope_ < 1.5
    assert reg.predict(X).shape == (300,)
    assert reg.n_eff_ == 300 / 4  # Ridge: n / (3 features + 1), whatever the container


def test_verbose_reports_the_cross_fitting(capsys):
    X, y = _signal_data(300)
    LabelDPRegressor(Ridge(), "auto", 2.0, bounds=BOUNDS, verbose=1).fit(X, y)
    out = capsys.readouterr().out
    assert "cross-fitted 3 folds" in out and "shrinkage: slope" in out


# -- bad input, before anything is spent ----------------------------------------------
@pytest.mark.parametrize("shrinkage", ["bogus", 1.5, -0.1, [0.5], True, False])
def test_bad_shrinkage_is_refused_before_spending(shrinkage):
    X, y = _signal_data(100)
    acc = BudgetAccountant(epsilon=5.0)
    with pytest.raises(ValueError, match="shrinkage"):  # InvalidParameterError is one
        LabelDPRegressor(Ridge(), "auto", 1.0, bounds=BOUNDS, accountant=acc,
                         shrinkage=shrinkage).fit(X, y)
    assert acc.spent_epsilon == 0.0


def test_guard_refuses_what_it_cannot_calibrate_before_spending():
    X, y = _signal_data(100)
    acc = BudgetAccountant(epsilon=5.0)
    with pytest.raises(ValueError, match="needs at least 6 rows"):
        LabelDPRegressor(Ridge(), "unbiased", 1.0, bounds=BOUNDS, accountant=acc,
                         shrinkage="cv").fit(X[:5], y[:5])
    with pytest.raises(ValueError, match="one label column"):
        LabelDPRegressor(Ridge(), "laplace", 1.0, bounds=BOUNDS, accountant=acc,
                         shrinkage=0.5).fit(X, np.column_stack([y, y]))
    assert acc.spent_epsilon == 0.0
    # 'auto' steps aside on a tiny sample instead of failing
    reg = LabelDPRegressor(Ridge(), "auto", 1.0, bounds=BOUNDS).fit(X[:5], y[:5])
    assert reg.shrinkage_slope_ == 1.0


class FullRowsOnlyRidge(Ridge):
    """Fails on any subset of the 300 rows (as a fold fit would)."""

    def fit(self, X, y, sample_weight=None):
        if len(X) < 300:
            raise ValueError("too few rows")
        return super().fit(X, y, sample_weight=sample_weight)


def test_failed_cross_fitting_keeps_the_release_unshrunk():
    X, y = _signal_data(300)
    acc = BudgetAccountant(epsilon=5.0)
    reg = LabelDPRegressor(FullRowsOnlyRidge(), "auto", 1.0, bounds=BOUNDS, accountant=acc)
    with pytest.warns(UserWarning, match=r"shrinkage='cv'\) failed"):
        reg.fit(X, y)
    assert (reg.shrinkage_slope_, reg.shrinkage_intercept_) == (1.0, 0.0)
    assert acc.spent_epsilon == pytest.approx(1.0)  # spent once, the release is kept


# -- the noisy mean behind the constant's level (mean_epsilon) --------------------------
def test_noisy_mean_is_charged_once_at_its_share_before_anything_else():
    y = _signal_data(600)[1]
    for mean_epsilon in [0.3, "auto"]:
        acc = BudgetAccountant()
        mech = AutoRegression(1.0, bounds=BOUNDS, grid_size=11, n_eff=20, accountant=acc,
                              mean_epsilon=mean_epsilon)
        share, split = mech.mean_budget(y.size), mech.budget_split(y.size)  # read before fit
        mech.fit_transform(y)
        rows = [(e.details["step"], e.epsilon) for e in acc.ledger]
        assert rows == [("noisy label mean", share), ("noisy label histogram", split[0]),
                        ("randomized labels", split[1])]
        assert share + sum(split) == pytest.approx(1.0, rel=1e-12)
        assert acc.spent_epsilon == pytest.approx(1.0, rel=1e-12)
        assert mech.mean_epsilon_ == share and mech.prior_epsilon_ == split[0]
    assert rows[0][1] != 0.3  # 'auto' computed its own share
    # Without it, the mechanism is unchanged (no mean, no row).
    plain = AutoRegression(1.0, bounds=BOUNDS, grid_size=11).fit(y)
    assert plain.mean_epsilon_ == 0.0 and plain.noisy_mean_ is None


def test_regressor_reads_the_public_share_before_spending():
    X, y = _signal_data(600)
    acc = BudgetAccountant()
    reg = LabelDPRegressor(KNeighborsRegressor(15), "auto", 0.2, bounds=BOUNDS, accountant=acc,
                           random_state=0).fit(X, y)
    expected = AutoRegression(0.2, bounds=BOUNDS, n_eff=reg.n_eff_, mean_epsilon="auto")
    assert acc.ledger[0].epsilon == expected.mean_budget(y.size) == reg.mechanism_.mean_epsilon_
    assert acc.ledger[0].details["step"] == "noisy label mean"


def test_sample_weights_spend_no_mean():
    """The noisy mean is an unweighted sum; with sample weights the guard's
    means are weighted, so no mean is bought: two ledger rows, total epsilon."""
    X, y = _signal_data(400)
    acc = BudgetAccountant()
    weights = np.random.default_rng(1).uniform(0.5, 2.0, y.size)
    reg = LabelDPRegressor(Ridge(), "auto", 1.0, bounds=BOUNDS, accountant=acc,
                           random_state=0).fit(X, y, sample_weight=weights)
    assert [e.details["step"] for e in acc.ledger] == ["noisy label histogram", "randomized labels"]
    assert acc.spent_epsilon == pytest.approx(1.0, rel=1e-12)
    assert reg.mechanism_.noisy_mean_ is None


def test_share_rule_follows_the_lost_fraction_and_minimises_its_objective():
    # Learning hopeless (rho ~ 1): nearly all of epsilon buys the mean; learning
    # easy (rho ~ 0) with many labels: the floor of a tenth.
    assert auto_module.mean_share_rule(0.05, 5000, 0.999) == pytest.approx(0.95)
    assert auto_module.mean_share_rule(2.0, 5000, 0.01) == pytest.approx(0.1)
    shares = np.linspace(0.1, 0.95, 200_001)  # brute force on a fine linear grid
    for eps, n, rho in [(0.3, 16000, 0.35), (2.0, 353, 0.48), (1.0, 5000, 0.56),
                        (0.5, 353, 0.93), (0.2, 353, 0.5)]:
        def objective(s):
            lost = np.minimum(rho / (1 - s) ** 2, 1.0)
            return 24.0 / (n * s * eps) ** 2 - 0.5 * (1 - lost) ** 2
        best = objective(shares).min()
        assert objective(auto_module.mean_share_rule(eps, n, rho)) <= best + 1e-4 * abs(best)


def test_noisy_mean_noise_variance_is_exact():
    # Discrete Laplace of rate r: P(z) ~ exp(-r |z|); variance by direct summation.
    for rate in [0.5, 1.0, 3.0]:
        z = np.arange(-400, 401, dtype=np.float64)
        p = np.exp(-rate * np.abs(z))
        assert mean_noise_variance(rate * MEAN_UNITS) == pytest.approx(p @ z**2 / p.sum(), rel=1e-9)


def test_noisy_mean_is_unbiased(monkeypatch):
    """4000 draws on fixed labels (some outside the bounds: clipped): the
    average is within 5 standard errors of the clipped labels' mean (a false
    failure has probability < 1e-6 for a normal average; the seeds are fixed),
    and the spread matches the public variance bound (noise + at most n / 4
    units of rounding)."""
    y = np.random.default_rng(3).uniform(-1.0, 11.0, size=500)
    truth = np.clip(y, *BOUNDS).mean()
    draws = [noisy_mean(y, BOUNDS, 2.0, np.random.default_rng(seed)) for seed in range(4000)]
    values = np.array([d[0] for d in draws])
    bound = draws[0][1]
    assert abs(values.mean() - truth) < 5 * np.sqrt(bound / values.size)
    noise_only = mean_noise_variance(2.0) * (10.0 / (MEAN_UNITS * y.size)) ** 2
    assert 0.9 * noise_only < values.var() < 1.1 * bound
    # The randomized rounding alone (noise switched off) is unbiased too, tested
    # at its own, 10^4 times finer, precision: at most n / 4 units of variance.
    monkeypatch.setattr(_prior, "staircase_noise", lambda rng, lam, w, r, size: np.zeros(size))
    rounded = np.array([noisy_mean(y, BOUNDS, 2.0, np.random.default_rng(seed))[0]
                        for seed in range(2000)])
    rounding_bound = (y.size / 4.0) * (10.0 / (MEAN_UNITS * y.size)) ** 2
    assert abs(rounded.mean() - truth) < 5 * np.sqrt(rounding_bound / rounded.size)
    assert rounded.var() <= rounding_bound
    # Nearest rounding instead (the mutation this catches) is off by ~1e-6.
    units = np.rint((np.clip(y, *BOUNDS) - BOUNDS[0]) * MEAN_UNITS / 10.0)
    nearest = units.mean() * 10.0 / MEAN_UNITS
    assert abs(nearest - truth) > 5 * np.sqrt(rounding_bound / rounded.size)


def test_combined_constant_has_less_variance_than_either():
    # The formula: unbiased weights summing to 1, variance below both.
    for variance, direct_variance in [(1.0, 1.0), (0.01, 4.0), (9.0, 0.1)]:
        value, combined = combined_mean(0.0, variance, (1.0, direct_variance))
        weight = variance / (variance + direct_variance)
        assert value == pytest.approx(weight) and combined < min(variance, direct_variance)
    # In distribution: two independent unbiased means of 5 (variances 1 and 4).
    rng = np.random.default_rng(0)
    d, m = 5 + rng.normal(size=20000), 5 + 2 * rng.normal(size=20000)
    mixed = np.array([combined_mean(a, 1.0, (b, 4.0))[0] for a, b in zip(d, m)])
    assert abs(mixed.mean() - 5) < 5 * np.sqrt(0.8 / mixed.size)
    assert mixed.var() < 0.85 * min(d.var(), m.var())  # 0.8 expected
    # Through the guard: a precise direct mean moves a useless noisy one onto it.
    truth = rng.uniform(0, 10, size=2000)
    very_noisy = truth + rng.normal(scale=300.0, size=2000)
    assert shrunk_mean(very_noisy, 2.0, direct=(truth.mean(), 1e-4)) == pytest.approx(
        truth.mean(), abs=0.05)


def _mean_is_noisy(mech, y):
    """The attack: is the released mean further from the exact clipped mean
    than a thousandth of its noise scale (probability ~1e-3 by chance)?"""
    lo, hi = BOUNDS
    exact = np.clip(y, lo, hi).mean()
    scale = (hi - lo) / (y.size * mech.mean_epsilon_)
    return abs(mech.noisy_mean_ - exact) > 1e-3 * scale


def test_pickles_hold_no_exact_mean_and_the_mean_is_noisy():
    X, y = _signal_data(600)
    reg = LabelDPRegressor(Ridge(), "auto", 0.5, bounds=BOUNDS, random_state=4).fit(X, y)
    mech = reg.mechanism_
    assert mech.mean_epsilon_ > 0 and _mean_is_noisy(mech, y)
    blob = pickle.dumps(reg)
    for exact in [y.mean(), np.clip(y, *BOUNDS).mean(), y.sum()]:
        assert np.float64(exact).tobytes() not in blob
        assert repr(float(exact)).encode() not in blob
    assert_no_random_state(reg)


def test_mean_without_noise_is_caught(monkeypatch):
    """Mutation: the noisy mean's integer noise replaced by zeros."""
    X, y = _signal_data(600)
    monkeypatch.setattr(_prior, "staircase_noise", lambda rng, lam, w, r, size: np.zeros(size))
    reg = LabelDPRegressor(Ridge(), "auto", 0.5, bounds=BOUNDS, random_state=4).fit(X, y)
    assert not _mean_is_noisy(reg.mechanism_, y)


@pytest.mark.parametrize("params, match", [
    ({"mean_epsilon": 1.0}, "mean_epsilon must be in"),
    ({"mean_epsilon": 3.0}, "mean_epsilon must be in"),
    ({"mean_epsilon": -0.1}, "mean_epsilon"),
    ({"mean_epsilon": "bogus"}, "mean_epsilon"),
    ({"mean_epsilon": 0.5, "prior_epsilon": 0.5}, "prior_epsilon must be in"),
])
def test_bad_mean_shares_are_refused_before_spending(params, match):
    X, y = _signal_data(300)
    acc = BudgetAccountant(epsilon=5.0)
    with pytest.raises(ValueError, match=match):
        AutoRegression(1.0, bounds=BOUNDS, accountant=acc, **params).fit(y)
    with pytest.raises(ValueError, match=match):
        LabelDPRegressor(Ridge(), "auto", 1.0, bounds=BOUNDS, accountant=acc,
                         mechanism_params=params).fit(X, y)
    assert acc.spent_epsilon == 0.0 and acc.ledger == []


def test_mean_of_several_columns_and_keyed_releases_are_refused_before_spending(tmp_path):
    y = _signal_data(300)[1]
    acc = BudgetAccountant(epsilon=5.0)
    with pytest.raises(ValueError, match="one label column"):
        AutoRegression(1.0, bounds=BOUNDS, accountant=acc, mean_epsilon=0.2).fit(
            np.column_stack([y, y]))
    from skdp_label.release import KeyedRelease, generate_key_file, load_key

    generate_key_file(tmp_path / "label.key")
    # A keyed release sums the labels in the pass that counts the private prior: with a
    # public prior it has no such pass, and refuses the mean (tests/test_keyed_release_mean.py).
    prior = (np.linspace(*BOUNDS, 5), np.ones(5))
    with pytest.raises(ValueError, match="with a public prior use mean_epsilon=None"):
        KeyedRelease(AutoRegression(1.0, prior=prior, mean_epsilon="auto"),
                     load_key(tmp_path / "label.key"), "mean", accountant=acc)
    assert acc.spent_epsilon == 0.0 and acc.ledger == []
