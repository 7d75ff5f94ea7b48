"""One bad-input policy for labels, for every regression mechanism.

Labels outside the declared bounds (or domain) raise ``ValueError`` by
default, before anything is charged; ``out_of_bounds='clip'`` clips them to
the bounds first. NaN and inf are reported as a label problem. No message
quotes a label, a count or a position of offending labels.
"""

import warnings

import numpy as np
import pytest
from sklearn.linear_model import Ridge

from skdp_label import BudgetAccountant, LabelDPRegressor
from skdp_label.mechanisms import get_mechanism_class, mechanism_names

from _audit import audit_messages_have_no_labels

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")

REGRESSION = mechanism_names("regression")
# Integer bounds suit every family (the discrete ones need integer labels).
BOUNDS = (0, 10)
EXTRA = {"mvu": {"outputs": 4}}
# Labels whose spelling cannot occur by chance in a message; 13 and -7 are outside.
INSIDE = np.array([3.0, 6.0, 8.0, 2.0] * 5)
OUTSIDE = np.array([3.0, 13.0, 8.0, -7.0] * 5)


def make(name, **kw):
    return get_mechanism_class(name)(epsilon=1.0, bounds=BOUNDS, **EXTRA.get(name, {}), **kw)


def test_every_regression_mechanism_has_the_parameter():
    for name in REGRESSION:
        params = make(name).get_params()
        assert params["out_of_bounds"] == "raise", name


@pytest.mark.parametrize("name", REGRESSION)
def test_outside_labels_raise_before_anything_is_spent(name):
    acc = BudgetAccountant()
    mech = make(name, accountant=acc)
    error = audit_messages_have_no_labels(lambda: mech.fit(OUTSIDE), OUTSIDE, public=BOUNDS)
    assert isinstance(error, ValueError)
    assert "outside the declared range [0, 10]" in str(error)
    assert "out_of_bounds='clip'" in str(error)
    # Neither a count nor a position of the offending labels: both are label statistics.
    assert "2" not in str(error).replace(type(mech).__name__, "")
    assert acc.spent_epsilon == 0.0
    assert not hasattr(mech, "epsilon_spent_")


@pytest.mark.parametrize("name", REGRESSION)
def test_transform_applies_the_same_policy(name):
    acc = BudgetAccountant(delta=0.5)  # the Gaussian mechanism spends delta too
    mech = make(name, accountant=acc).fit(INSIDE)
    spent = acc.spent_epsilon
    with pytest.raises(ValueError, match="outside the declared range"):
        mech.transform(OUTSIDE)
    assert acc.spent_epsilon == spent


@pytest.mark.parametrize("name", REGRESSION)
def test_clip_randomizes_the_clipped_labels(name):
    # Same seed, same public context: clipping first is exactly what 'clip' does.
    clipped = make(name, out_of_bounds="clip", random_state=3).fit_transform(OUTSIDE)
    reference = make(name, random_state=3).fit_transform(np.clip(OUTSIDE, *BOUNDS))
    np.testing.assert_array_equal(clipped, reference)


@pytest.mark.parametrize("name", REGRESSION)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf])
def test_nan_and_inf_are_a_label_problem(name, bad):
    y = INSIDE.copy()
    y[5] = bad
    for policy in ("raise", "clip"):  # clipping never turns NaN or inf into a label
        acc = BudgetAccountant()
        with pytest.raises(ValueError, match="y contains NaN or infinite labels") as info:
            make(name, out_of_bounds=policy, accountant=acc).fit(y)
        assert "position" not in str(info.value)
        assert acc.spent_epsilon == 0.0


@pytest.mark.parametrize("name", ["unbiased", "rr-on-bins", "laplace"])
def test_policy_may_change_after_fit(name):
    # The policy decides which labels are accepted, not what a release costs.
    mech = make(name).fit(INSIDE)
    mech.set_params(out_of_bounds="clip")
    assert mech.transform(OUTSIDE).shape == OUTSIDE.shape


def test_bad_policy_is_refused_before_spending():
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="out_of_bounds"):
        make("laplace", out_of_bounds="ignore", accountant=acc).fit(INSIDE)
    assert acc.spent_epsilon == 0.0


def test_unbiased_range_is_the_public_prior_support_not_wider_bounds():
    # Randomized rounding is unbiased only inside the grid: a label between
    # the prior's last value and the bounds would be rounded with bias.
    prior = (np.array([2.0, 4.0, 6.0]), np.array([0.2, 0.5, 0.3]))
    mech = get_mechanism_class("unbiased")(epsilon=1.0, prior=prior, bounds=BOUNDS)
    with pytest.raises(ValueError, match=r"range \[2, 6\]"):
        mech.fit([3.0, 7.0])


def test_regressor_passes_the_policy_through_mechanism_params():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    y = X[:, 0] * 4 + 5  # some labels fall outside (0, 10)
    assert y.min() < 0 or y.max() > 10
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="out_of_bounds='clip'"):
        LabelDPRegressor(Ridge(), "laplace", bounds=BOUNDS, accountant=acc).fit(X, y)
    assert acc.spent_epsilon == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg = LabelDPRegressor(
            Ridge(), "laplace", bounds=BOUNDS, mechanism_params={"out_of_bounds": "clip"}, accountant=acc
        ).fit(X, y)
    assert reg.mechanism_.out_of_bounds == "clip"
    assert acc.spent_epsilon == 1.0


# -- releases of at least NUMPY_BELOW labels: one pass (labels_within) -----------------


def _large(bad_at=None, bad=None):
    from skdp_label.mechanisms._validation import NUMPY_BELOW

    y = np.resize(INSIDE, NUMPY_BELOW + 3)
    if bad_at is not None:
        y[bad_at] = bad
    return y


def _compiled_within():
    # The one-pass check's kernel compiled here (else a background compiler may
    # still be filling the cache, and the two reductions run instead).
    from skdp_label._kernels._sampling import count_outside

    count_outside(np.zeros(1), 0.0, 1.0, False)


@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 13.0, -7.0, np.nextafter(10.0, 11.0)])
@pytest.mark.parametrize("where", [0, -1, 54_321])
def test_labels_within_is_true_only_for_finite_labels_in_range(bad, where):
    from skdp_label.mechanisms._validation import labels_within

    _compiled_within()
    assert labels_within(_large(), *BOUNDS)
    assert labels_within(_large().reshape(-1, 1), *BOUNDS)  # a column, as _validate_labels has it
    assert not labels_within(_large(where, bad), *BOUNDS)
    # Not applicable (False: the caller checks itself): small, strided, infinite bounds.
    assert not labels_within(INSIDE, *BOUNDS)
    assert not labels_within(np.repeat(_large(), 2)[::2], *BOUNDS)
    assert not labels_within(_large(), -np.inf, np.inf)


@pytest.mark.parametrize("name", ["rqm", "mvu", "debiased-rr", "exponential", "laplace"])
def test_large_releases_keep_the_policy(name, monkeypatch):
    import skdp_label.mechanisms._base as base

    _compiled_within()
    passes = []
    within = base.labels_within
    monkeypatch.setattr(base, "labels_within", lambda *a: passes.append(within(*a)) or passes[-1])
    acc = BudgetAccountant()
    mech = make(name, accountant=acc, random_state=0).fit(INSIDE)
    passes.clear()
    assert mech.transform(_large()).shape == _large().shape
    assert passes == [True]  # the one-pass check ran and accepted the labels
    for bad in (np.nan, np.inf, 13.0):
        spent = acc.spent_epsilon
        message = "NaN or infinite" if bad != 13.0 else "outside the declared range"
        with pytest.raises(ValueError, match=message):
            mech.transform(_large(-1, bad))
        assert acc.spent_epsilon == spent
    # 'clip' still clips: the same release as the clipped labels (same seed, context).
    mech.set_params(out_of_bounds="clip")
    y = _large(7, 13.0)
    np.testing.assert_array_equal(mech.transform(y), mech.transform(np.clip(y, *BOUNDS)))


@pytest.mark.parametrize("compile_here", [False, True])
def test_a_cold_label_check_starts_no_compiler_of_its_own(monkeypatch, compile_here):
    # A compiler process for the check competed with the release's own compilers
    # for the cores (cold first fits up to 2x slower in wall time at 10**5 labels).
    # Cold and below the size that compiles here: the two reductions, no compiler;
    # from that size on the check's kernel runs (compiled here, like the sampler's).
    import skdp_label._kernels._background as background
    import skdp_label.mechanisms._validation as validation

    monkeypatch.setattr(validation, "would_compile", lambda kernel: True)
    monkeypatch.setattr(background, "compiles_here", lambda n: compile_here)
    launched, counted = [], []
    monkeypatch.setattr(background, "_launch", lambda *a: launched.append(a))
    monkeypatch.setattr(validation, "count_outside", lambda *a: counted.append(a) or 0)
    assert validation.labels_within(_large(), *BOUNDS) is compile_here
    assert launched == []
    assert len(counted) == int(compile_here)
