"""Adversarial checks of the constant-anchor, kernels-additive and
sampling-rows merges (noisy mean, Laplace cell tables, blocked row sampler)."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.linear_model import LinearRegression

from skdp_label import BudgetAccountant, LabelDPRegressor
from skdp_label.mechanisms import AutoRegression, RandomizedResponse, make_mechanism, mechanism_names
from skdp_label.mechanisms import _prior
from skdp_label.mechanisms._validation import check_class_labels
from skdp_label.release import KeyedRelease, privatize

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")

BOUNDS = (0.0, 10.0)


def _labels(n=400, seed=0):
    return np.random.default_rng(seed).uniform(*BOUNDS, n)


# -- the noisy mean (constant-anchor) ---------------------------------------------


@pytest.mark.parametrize("mean_epsilon", ["auto", 0.3])
def test_mean_budget_is_what_is_charged_and_ledger_is_epsilon(mean_epsilon):
    y = _labels()
    acc = BudgetAccountant()
    mech = AutoRegression(epsilon=1.0, bounds=BOUNDS, mean_epsilon=mean_epsilon,
                          accountant=acc, random_state=0)
    announced = mech.mean_budget(y.size)
    assert "spent epsilon=0," in repr(acc)  # reading the budget spends nothing
    mech.fit_transform(y)
    assert announced > 0 and mech.mean_epsilon_ == announced
    assert "spent epsilon=1," in repr(acc)
    assert [c["step"] for c in mech.charges_][0] == "noisy label mean"
    assert mech.charges_[0]["epsilon"] == announced
    assert sum(c["epsilon"] for c in mech.charges_) == pytest.approx(1.0, abs=1e-12)
    # A refit charges mean + histogram + labels again, exactly epsilon more.
    mech.fit_transform(y)
    assert "spent epsilon=2," in repr(acc)


def _refused(make, y, match):
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match=match):
        make(acc).fit(y)
    assert "spent epsilon=0," in repr(acc)


def test_mean_refusals_spend_nothing():
    y = _labels()

    def auto(**kw):
        return lambda acc: AutoRegression(epsilon=1.0, bounds=BOUNDS, accountant=acc,
                                          random_state=0, **kw)

    _refused(auto(mean_epsilon=0.3), np.r_[y, 10.5], "outside the declared range")
    _refused(auto(mean_epsilon=0.3), np.r_[y, np.nan], "NaN")
    _refused(auto(mean_epsilon=0.3), np.c_[y, y], "one label column")
    _refused(auto(mean_epsilon=1.0), y, "mean_epsilon must be in")
    _refused(auto(mean_epsilon="auto", prior_epsilon=5.0), y, "prior_epsilon")


@pytest.mark.parametrize("mean_epsilon", [None, 0.3])
def test_huge_bounds_refused_before_any_charge(mean_epsilon):
    # Regression: (-8e307, 8e307) passed check_bounds, then the histogram (and
    # the mean) were charged before RR-on-Bins hit a NaN bin cost / the mean's
    # variance overflowed: a failing fit that had spent epsilon.
    y = np.linspace(-1e307, 1e307, 300)
    _refused(lambda acc: AutoRegression(epsilon=1.0, bounds=(-8e307, 8e307),
                                        mean_epsilon=mean_epsilon, accountant=acc,
                                        random_state=0), y, "spans too much")


def test_noisy_mean_variance_bound_never_raises_on_huge_spans():
    mean, variance = _prior.noisy_mean(np.array([0.0, 1e307]), (-8e307, 8e307), 0.3,
                                       np.random.default_rng(0))
    assert not np.isnan(mean) and variance == np.inf


def test_keyed_release_with_a_mean_needs_the_pass_1_sum_before_spending(key):
    # The mean is noised from pass 1's sum (tests/test_keyed_release_mean.py): counts
    # merged without it are refused, and nothing is spent.
    acc = BudgetAccountant()
    release = KeyedRelease(AutoRegression(epsilon=1.0, bounds=BOUNDS, mean_epsilon=0.3), key,
                           "r", accountant=acc)
    counts = release.batch_counts(_labels(), np.arange(400))
    with pytest.raises(ValueError, match="pass the batch_sum of the same rows"):
        release.merge_counts(counts, 400)
    with pytest.raises(ValueError, match="pass 1 counted 0 labels"):
        release.fit(400)
    assert "spent epsilon=0," in repr(acc)


def test_mean_variance_is_public_and_nothing_exact_is_stored():
    a, b = _labels(seed=1), _labels(seed=2) ** 0.5
    fa = AutoRegression(epsilon=1.0, bounds=BOUNDS, mean_epsilon=0.5, random_state=0).fit(a)
    fb = AutoRegression(epsilon=1.0, bounds=BOUNDS, mean_epsilon=0.5, random_state=0).fit(b)
    # Depends on epsilon, n and the bounds only.
    assert fa.noisy_mean_variance_ == fb.noisy_mean_variance_
    blob = pickle.dumps(fa) + repr(fa).encode()
    exact = [a.mean(), a.sum(), a.mean() / 10 * 2**16 * a.size]
    for value in exact:
        assert np.float64(value).tobytes() not in blob
        assert repr(float(value)).encode() not in blob
    assert fa.noisy_mean_ != a.mean()


def test_noisy_mean_sensitivity_rounded_label_never_exceeds_the_top_unit(monkeypatch):
    # One label at hi, rounding always up, noise 0: the sum is exactly
    # MEAN_UNITS (a sum of MEAN_UNITS + 1 would break the sensitivity).
    monkeypatch.setattr(_prior, "staircase_noise", lambda *a, size=1, **k: np.zeros(size))

    class AlwaysUp:
        def random(self, n):
            return np.zeros(n)

    rng = np.random.default_rng(0)
    spans = [(0.0, 1.0), (-1e-300, 1e-300), (-8e307, 8e307), (0.1, 0.7), (3.0, 3.0 + 1e-9)]
    spans += [tuple(sorted(rng.normal(0, 10.0 ** rng.integers(-3, 6), 2))) for _ in range(300)]
    for lo, hi in spans:
        mean, _ = _prior.noisy_mean(np.array([hi, 2 * hi - lo]), (lo, hi), 1.0, AlwaysUp())
        assert mean <= hi + 1e-12 * (hi - lo), (lo, hi, mean)
        mean, _ = _prior.noisy_mean(np.array([lo, lo - (hi - lo)]), (lo, hi), 1.0, AlwaysUp())
        assert mean == lo or mean >= lo - 1e-12 * (hi - lo), (lo, hi, mean)


def test_noisy_mean_is_unbiased_for_the_clipped_labels(monkeypatch):
    monkeypatch.setattr(_prior, "staircase_noise", lambda *a, size=1, **k: np.zeros(size))
    y = np.array([0.3, 0.30001, 7.123456789, 11.0, -2.0])  # two clipped
    target = np.clip(y, *BOUNDS).mean()
    rng = np.random.default_rng(3)
    draws = [_prior.noisy_mean(y, BOUNDS, 1.0, rng)[0] for _ in range(4000)]
    # Rounding error per label <= 10 / 2**16; sd of the average of 4000 draws tiny.
    assert abs(np.mean(draws) - target) < 10 / 2**16 / 5


# -- additive kernels: no negative zero, no label-dependent sign of zero -----------


@pytest.mark.parametrize("name", ["laplace", "discrete-laplace", "staircase", "discrete-staircase"])
@pytest.mark.parametrize("epsilon", [1e-3, 1.0, 15.0])
def test_additive_outputs_never_negative_zero(name, epsilon):
    for zero in (0.0, -0.0):
        y = np.full(20_000, zero)
        out = make_mechanism(name, epsilon=epsilon, bounds=(-1.0, 1.0),
                             random_state=1).fit_transform(y)
        out = np.asarray(out, dtype=np.float64).ravel()
        assert not np.any((out == 0) & np.signbit(out))


# -- blocked row sampler: keyed rows at block edges --------------------------------


@pytest.mark.parametrize("name", ["rr", "rr-on-bins", "laplace", "discrete-laplace"])
@pytest.mark.parametrize("n", [1, 255, 256, 257, 513])
def test_keyed_rows_independent_of_block_boundaries(name, n, key):
    names = set(mechanism_names())
    if name not in names:
        pytest.skip(f"{name} not registered")
    if name in mechanism_names("classification"):
        kw, y = {"classes": np.arange(11)}, np.arange(n) % 11
    else:
        kw, y = {"bounds": BOUNDS}, (np.arange(n) * 7 % 11).astype(float)
    mech = make_mechanism(name, epsilon=1.0, **kw)
    full, _ = privatize(y, mech, key, "r1")
    # Each row alone (its own stream, block of one) gives the same value.
    again = KeyedRelease(mech, key, "r1")
    if again.needs_counts:
        again.add_counts(y, np.arange(n))
    again.fit(n)
    picks = np.unique(np.r_[0, n - 1, n // 2])
    for i in picks:
        np.testing.assert_array_equal(again.randomize(y[[i]], np.array([i])), full[[i]])
    # Rows in reverse order: the values follow the row ids, not positions.
    rev = np.arange(n)[::-1]
    np.testing.assert_array_equal(again.randomize(y[rev], rev), full[rev])


# -- class labels refused before spending -------------------------------------------


@pytest.mark.parametrize("bad", [np.nan, np.inf, 1e300, 1.5, -1.0, 11.0])
def test_check_class_labels_refuses(bad):
    y = np.r_[np.arange(11.0), bad]
    with pytest.raises(ValueError):
        check_class_labels(y, np.arange(11))
    acc = BudgetAccountant()
    with pytest.raises(ValueError):
        make_mechanism("rr", epsilon=1.0, classes=np.arange(11), accountant=acc,
                       random_state=0).fit_transform(y)
    assert "spent epsilon=0," in repr(acc)


def test_check_class_labels_accepts_negative_zero_and_refuses_objects():
    check_class_labels(np.array([-0.0, 1.0, 2.0]), np.arange(3))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        with pytest.raises((ValueError, TypeError)):
            check_class_labels(np.array([0, 1, object()], dtype=object), np.arange(3))
        # Mixed str/int objects: a ValueError naming the problem (invariant 5), not
        # numpy's TypeError from ordering a str among ints.
        with pytest.raises(ValueError, match="not among the 3 declared classes"):
            check_class_labels(np.array([0, 1, "2"], dtype=object), np.arange(3))
        with pytest.raises(ValueError, match="not among the 2 declared classes"):
            check_class_labels(np.array(["a", 1], dtype=object), np.array(["a", "b"], dtype=object))


def test_refit_without_mean_drops_the_stale_noisy_mean():
    y = _labels()
    mech = AutoRegression(epsilon=1.0, bounds=BOUNDS, mean_epsilon=0.3, random_state=0)
    mech.fit_transform(y)
    assert mech.noisy_mean_ is not None
    mech.set_params(mean_epsilon=None).fit_transform(y)
    assert mech.noisy_mean_ is None and mech.mean_epsilon_ == 0.0
    assert [c["step"] for c in mech.charges_] == ["noisy label histogram", "randomized labels"]
    assert sum(c["epsilon"] for c in mech.charges_) == pytest.approx(1.0, abs=1e-12)


@pytest.mark.parametrize("flag", [True, False])
def test_bool_budgets_are_refused_before_spending(flag):
    # epsilon=True is a slip, not a budget of 1: refused by the shared constraint.
    acc = BudgetAccountant()
    for est in (
        LabelDPRegressor(LinearRegression(), epsilon=flag, bounds=(0, 1), accountant=acc),
        RandomizedResponse(epsilon=flag, classes=[0, 1], accountant=acc),
        AutoRegression(epsilon=1.0, mean_epsilon=flag, bounds=(0, 1), accountant=acc),
    ):
        with pytest.raises(ValueError, match="not a bool"):
            est.fit(np.zeros((3, 1)), [0, 1, 0]) if hasattr(est, "base_estimator") else est.fit(
                [0.0, 1.0, 0.0])
    assert acc.spent_epsilon == 0


@pytest.mark.parametrize("params", [
    dict(epsilon=1e-20), dict(epsilon=1.0, mean_epsilon=1e-30), dict(epsilon=1.0, prior_epsilon=1e-25),
    # Accepted before the samplers' slack (2.1e-9) was taken from the laws: now too small.
    dict(epsilon=5e-8), dict(epsilon=1.0, prior_epsilon=2e-9),
])
def test_budgets_below_the_samplers_floor_are_refused_before_spending(params):
    # epsilon=1e-20 charged RR-on-Bins' histogram, then hung in its noise sampler.
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="at least 1e-07"):
        AutoRegression(bounds=(0, 1), accountant=acc, **params).fit(np.linspace(0, 1, 50))
    assert acc.spent_epsilon == 0


def test_noise_rate_below_the_floor_raises_instead_of_hanging():
    from skdp_label._kernels._sampling import geometric_constants, staircase_noise

    rng = np.random.default_rng(0)
    assert np.isfinite(staircase_noise(rng, 2.0**-62, 1, 1, size=3)).all()
    with pytest.raises(ValueError, match="floor"):
        geometric_constants(2.0**-64)


def test_mean_units_overflowing_span_is_refused_before_spending():
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="too narrow"):
        AutoRegression(epsilon=1.0, mean_epsilon="auto", bounds=(0.0, 1e-305),
                       accountant=acc).fit(np.zeros(20))
    assert acc.spent_epsilon == 0
