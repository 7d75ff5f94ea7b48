"""Adversarial review of wave 6: fitted state bound to the fit, laws built
below the charged epsilon, tests adapted to numpy 2.4 / scipy 1.17.

Each test is an attack. Those that broke the library were fixed (the test
says how); those that held stay as regression tests.
"""

import copy
import math
import pickle
import warnings
from fractions import Fraction

import numpy as np
import pytest

from skdp_label import BudgetAccountant
from skdp_label._kernels._sampling import rr_flip_probability
from skdp_label._warmup import _public_inputs
from skdp_label.mechanisms import (
    AutoRegression,
    RandomizedResponse,
    RRTopK,
    RRWithPrior,
    get_mechanism_class,
    mechanism_names,
)
from skdp_label.mechanisms._validation import MIN_SHARE_EPSILON, law_epsilon, rr_law_epsilon
from skdp_label.release import KeyedRelease, ReleaseKey

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")


def _fitted(name, n=2_000, **extra):
    kwargs, column = _public_inputs(name)
    column = np.asarray(column)[:n]
    mech = get_mechanism_class(name)(epsilon=1.0, random_state=3, **{**kwargs, **extra})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mech.fit(column)
    return mech, column


def _auto(accountant=None):
    y = np.random.default_rng(0).uniform(0, 1, 2_000)
    return AutoRegression(epsilon=1.0, bounds=(0, 1), random_state=0, accountant=accountant).fit(y), y


# -- 1. fitted state bound to the fit -------------------------------------------------


def _identity_matrix(mech):
    """A matrix that outputs each label's nearest output: the labels themselves
    (near enough), released at the fit's charge. What a tamper could sample."""
    inputs, outputs = mech.input_values_, mech.output_values_
    matrix = np.zeros((inputs.size, outputs.size))
    matrix[np.arange(inputs.size), np.abs(inputs[:, None] - outputs[None, :]).argmin(axis=1)] = 1.0
    return matrix


@pytest.mark.parametrize("tamper", ["matrix", "epsilon", "inputs"])
def test_auto_refuses_a_tampered_selected_mechanism_before_the_charge(tamper):
    # BROKE: AutoRegression samples with selected_mechanism_._randomize_column, but
    # bound only which object selected_mechanism_ is; its own fitted attributes and
    # parameters could change after fit (an identity matrix sampled at epsilon = 1:
    # the labels in clear). Fixed: AutoRegression._check_unchanged_since_fit checks
    # the selected mechanism's binding too.
    acc = BudgetAccountant()
    auto, y = _auto(acc)
    selected = auto.selected_mechanism_
    if tamper == "matrix":
        selected.transition_matrix_ = _identity_matrix(selected)
    elif tamper == "epsilon":
        selected.set_params(epsilon=30.0)
    else:
        selected.input_values_ = selected.input_values_.copy()
    spent = acc.spent_epsilon
    with pytest.raises(ValueError, match=r"AutoRegression\.selected_mechanism_: .*changed since fit"):
        auto.transform(y)
    assert acc.spent_epsilon == spent  # refused before the charge


def test_auto_nested_binding_survives_pickle_and_deepcopy():
    # Held (with the fix above): a loaded copy binds the nested mechanism's arrays again.
    auto, y = _auto()
    for clone in (pickle.loads(pickle.dumps(auto)), copy.deepcopy(auto)):
        clone.transform(y)  # unchanged: samples
        selected = clone.selected_mechanism_
        assert not selected.transition_matrix_.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            selected.transition_matrix_[0, 0] = 1.0
        selected.transition_matrix_ = _identity_matrix(selected)
        with pytest.raises(ValueError, match="selected_mechanism_"):
            clone.transform(y)


def test_keyed_release_of_auto_refuses_a_tampered_selected_mechanism():
    # release.py's randomize calls mech._check_unchanged_since_fit: with the fix
    # it reaches the selected mechanism too (no edit of release.py needed).
    y = np.random.default_rng(1).uniform(0, 1, 500)
    release = KeyedRelease(AutoRegression(1.0, bounds=(0, 1)), ReleaseKey(b"k" * 32), "r6")
    release.add_counts(y, np.arange(y.size))
    release.fit(n_rows=y.size)
    release.randomize(y[:10], np.arange(10))
    selected = release.fitted_.selected_mechanism_
    selected.transition_matrix_ = _identity_matrix(selected)
    with pytest.raises(ValueError, match="selected_mechanism_"):
        release.randomize(y[:10], np.arange(10))


def test_fit_leaves_the_callers_parameter_arrays_writable():
    # BROKE: fit made every public fitted array read-only, and RandomizedResponse's
    # input_values_ *is* the caller's classes array: fit froze the caller's own
    # array (a side effect on a parameter). Fixed: _fitted_state binds a copy of
    # an array that shares memory with a parameter.
    classes = np.array([0, 1, 2, 3])
    for cls in (RandomizedResponse, RRTopK, RRWithPrior):
        mech = cls(epsilon=1.0, classes=classes, random_state=0).fit([0, 1, 2])
        assert classes.flags.writeable, cls.__name__
        assert not np.may_share_memory(mech.input_values_, classes)
        assert not mech.input_values_.flags.writeable
        assert mech.input_values_ is mech.output_values_  # one array stays one array
        mech.transform([0, 1])
        # An edit of the caller's array changes the parameter: refused, as before.
        classes[0] = 7
        with pytest.raises(ValueError, match="parameter"):
            mech.transform([1, 2])
        classes[0] = 0
        mech.transform([1, 2])


def test_old_pickle_of_a_mechanism_given_a_parameter_array_is_bound_on_load():
    # A pickle made before fits were bound holds no _fit_state: it is bound on load,
    # and the copy rule keeps the loaded parameter writable.
    mech = RandomizedResponse(epsilon=1.0, classes=np.array([0, 1, 2]), random_state=0).fit([0, 1])
    state = mech.__getstate__()
    del state["_fit_state"]
    old = RandomizedResponse.__new__(RandomizedResponse)
    old.__setstate__(state)
    assert old.classes.flags.writeable and not old.input_values_.flags.writeable
    old.input_values_ = np.array([0, 1, 5])
    with pytest.raises(ValueError, match="input_values_"):
        old.transform([0, 1])


def _reachable_arrays(obj, path, seen, out):
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        out.append((path, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _reachable_arrays(v, f"{path}[{k!r}]", seen, out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _reachable_arrays(v, f"{path}[{i}]", seen, out)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        for k, v in vars(obj).items():
            _reachable_arrays(v, f"{path}.{k}", seen, out)


@pytest.mark.parametrize("name", sorted(mechanism_names()))
def test_no_bound_array_shares_memory_with_a_reachable_writable_array(name):
    # Held: setflags(write=False) on a view leaves its base writable. No bound
    # array is a view of an array reachable from the mechanism (its parameters,
    # private tables, nested objects) that is still writable.
    mech, _ = _fitted(name)
    out = []
    _reachable_arrays(mech, "mech", set(), out)
    for attribute, bound in mech._fit_state.items():
        if not isinstance(bound, np.ndarray):
            continue
        for path, other in out:
            if other is not bound and other.flags.writeable:
                assert not np.may_share_memory(bound, other), (attribute, path)


# -- 2. laws built below the charged epsilon ------------------------------------------


def _exact_log(fraction):
    """ln of a positive Fraction, to far better than the slacks (1e-9)."""
    shift = fraction.numerator.bit_length() - fraction.denominator.bit_length()
    scaled = fraction / Fraction(2) ** shift  # within [1/2, 2]: float is exact enough
    return math.log(float(scaled)) + shift * math.log(2.0)


def _rr_sampled_epsilons(k, law):
    """The epsilons of the laws the RR kernels sample, from their float constants:
    k-ary RR and RR-Top-k per example (flip probability f, exact Bernoulli, exact
    uniform replacement) and RR-Top-k with one set (mixing weight u)."""
    f = Fraction(rr_flip_probability(k, law))
    e = math.exp(-law)
    u = Fraction(k * e / (1.0 + (k - 1) * e))  # rr_top_k_set_constants' weight
    ratios = [(1 - f) * (k - 1) / f, k / u - (k - 1), 1 / u]
    return [abs(_exact_log(r)) for r in ratios]


# (k, epsilon) where the law built at law_epsilon(epsilon) was sampled above epsilon.
_RR_BROKEN = [(44_491_838, 0.01), (51_723_289, 1e-6), (69_903_306, 3e-7), (77_286_133, 1e-5)]


@pytest.mark.parametrize("k, epsilon", _RR_BROKEN)
def test_randomized_response_over_many_classes_samples_within_the_charge(k, epsilon):
    # BROKE: the RR kernels are exact samplers of a float flip probability f, within a
    # few ulps of its formula; the loss ratio (k-1)(1-f)/f amplifies f's rounding by
    # 1/(1-f) = 1 + (k-1) e^-eps, about k at small epsilon. From about 4e7 classes the
    # sampled law's epsilon exceeded the charged one by up to 3e-8 (> SAMPLER_SLACK).
    # Fixed: rr_law_epsilon builds such laws at epsilon less a bound of that rounding.
    assert max(_rr_sampled_epsilons(k, law_epsilon(epsilon))) > epsilon  # the break
    assert max(_rr_sampled_epsilons(k, rr_law_epsilon(epsilon, k))) <= epsilon


def test_rr_law_epsilon_holds_over_a_scan_and_is_law_epsilon_below_a_million_classes():
    epsilons = [1e-7, 1e-6, 1e-4, 1e-2, 0.5, 1.0, 5.0, 20.0, 30.0]
    for k in np.unique(np.geomspace(2, 2.0**52, 160).astype(np.int64)).tolist():
        for epsilon in epsilons:
            try:
                law = rr_law_epsilon(epsilon, k)
            except ValueError as exc:  # refused (before anything is spent: fit calls it)
                assert "too small for" in str(exc) and k > 1e7
                continue
            assert law <= law_epsilon(epsilon)
            assert max(_rr_sampled_epsilons(k, law)) <= epsilon, (k, epsilon)
            if k <= 1_000_000:  # unchanged there: no seeded output moves
                assert law == law_epsilon(epsilon)


def test_randomized_response_mechanisms_build_their_law_at_rr_law_epsilon():
    # The wiring: each RR-family mechanism's law (the sampler's constants) uses it.
    # 2e6 classes: where rr_law_epsilon differs from law_epsilon at small epsilon.
    k, epsilon = 2_000_000, 1e-6
    assert rr_law_epsilon(epsilon, k) < law_epsilon(epsilon)
    classes = np.arange(k)
    for cls in (RandomizedResponse, RRTopK, RRWithPrior):
        acc = BudgetAccountant()
        mech = cls(epsilon=epsilon, classes=classes, accountant=acc, random_state=0).fit([0, 1])
        assert mech._law_epsilon() == rr_law_epsilon(epsilon, k), cls.__name__
        assert mech._matrix_epsilon == rr_law_epsilon(epsilon, k)
        mech.transform(np.array([0, 5, 7]))
        assert acc.spent_epsilon == pytest.approx(epsilon)  # charged epsilon, not the law's
    debiased = get_mechanism_class("debiased-rr")(epsilon=1.0, bounds=(0, 1), grid_size=7).fit([0.5])
    assert debiased._randomized_response_size() == 7
    assert debiased._law_epsilon() == rr_law_epsilon(1.0, 7) == law_epsilon(1.0)


def test_rr_law_epsilon_refuses_more_classes_than_epsilon_can_carry():
    with pytest.raises(ValueError, match="too small for 100000000 classes"):
        rr_law_epsilon(1e-7, 100_000_000, what="RandomizedResponse: the labels' epsilon")
    with pytest.raises(ValueError, match="below"):  # and law_epsilon's own floor
        rr_law_epsilon(1e-8, 3)


# epsilons under 1e-6 whose 'auto' mean share left the labels epsilon - eps_mean, rounded
# below MIN_SHARE_EPSILON (a third of those tried).
_MEAN_ROUNDED = [6.732655185893088e-07, 9.214800195499495e-07, 7.565469048855985e-07]


@pytest.mark.filterwarnings("ignore:auto. candidate:RuntimeWarning")
@pytest.mark.parametrize("epsilon", _MEAN_ROUNDED)
def test_auto_mean_share_leaves_the_labels_their_minimum_after_rounding(epsilon):
    # BROKE: mean_budget gave the mean min(rule, epsilon - MIN_SHARE_EPSILON); the rest,
    # computed as epsilon - eps_mean, rounded below MIN_SHARE_EPSILON and the fit (and a
    # keyed release) was refused, before spending, for a valid epsilon. Fixed: the mean's
    # share steps down until the rest is at least MIN_SHARE_EPSILON.
    y = np.random.default_rng(2).uniform(0, 1, 3_000)
    acc = BudgetAccountant()
    mech = AutoRegression(epsilon=epsilon, bounds=(0, 1), mean_epsilon="auto", accountant=acc,
                          random_state=0)
    eps_mean = mech.mean_budget(y.size)
    assert eps_mean > 0 and epsilon - eps_mean >= MIN_SHARE_EPSILON
    prior, labels = mech.budget_split(y.size)
    assert prior + labels == epsilon - eps_mean
    mech.fit_transform(y)
    assert acc.spent_epsilon == pytest.approx(epsilon, rel=1e-12)


@pytest.mark.filterwarnings("ignore:auto. candidate:RuntimeWarning")
def test_auto_mean_share_over_small_epsilons_never_refuses():
    rng = np.random.default_rng(0)
    for epsilon in rng.uniform(1e-7, 1e-6, 300).tolist() + [1e-7, 1e-6]:
        mech = AutoRegression(epsilon=epsilon, bounds=(0, 1), mean_epsilon="auto")
        eps_mean = mech.mean_budget(5_000)
        assert epsilon - eps_mean >= MIN_SHARE_EPSILON
        mech.budget_split(5_000)  # raised for a third of them


@pytest.mark.parametrize("kwargs", [{"prior": "class-frequencies"}, {"prior": "clusters"},
                                    {"prior": "class-frequencies", "prior_epsilon": 1e-7}])
def test_classifier_with_a_prior_at_the_smallest_epsilon_is_refused_by_name(kwargs):
    # Held for privacy (refused before spending), but the message named a budget the
    # caller never gave ("epsilon parameter of RRWithPrior ... got 5e-08"): the prior's
    # share leaves the labels less than MIN_EPSILON below epsilon = 2e-7. Fixed: the
    # classifier's plan refuses it, naming epsilon, the prior's share and the labels'.
    from sklearn.linear_model import LogisticRegression

    from skdp_label.estimators import LabelDPClassifier

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(300, 2)), rng.integers(0, 3, 300)
    epsilon = 1.5e-7 if "prior_epsilon" in kwargs else 1e-7
    acc = BudgetAccountant()
    clf = LabelDPClassifier(LogisticRegression(), epsilon=epsilon, classes=[0, 1, 2],
                            accountant=acc, random_state=0, **kwargs)
    with pytest.raises(ValueError, match=r"LabelDPClassifier: epsilon=.* leaves the labels 5e-08"):
        clf.fit(X, y)
    assert acc.spent_epsilon == 0.0
    with pytest.raises(ValueError, match="leaves the labels"):
        clf.prior_budget(300)  # public, before anything is spent


@pytest.mark.xfail(strict=True, reason=(
    "release.py (not this helper's file): the keyed release's dry run sets the mechanism's "
    "epsilon to the labels' share, which its parameter constraint refuses below MIN_EPSILON "
    "(1e-7), though fit on one machine builds that share's law (down to MIN_SHARE_EPSILON). "
    "Refused before the charge (no privacy loss), but a configuration fit accepts is not "
    "releasable keyed: the release and fit disagree on the smallest split."))
@pytest.mark.filterwarnings("ignore:auto. candidate:RuntimeWarning")
@pytest.mark.parametrize("mechanism", [
    lambda: AutoRegression(1e-7, bounds=(0, 1), mean_epsilon="auto"),
    lambda: AutoRegression(1.5e-7, bounds=(0, 1), mean_epsilon=1e-7),
])
def test_keyed_release_accepts_the_splits_fit_accepts(mechanism):
    y = np.random.default_rng(3).uniform(0, 1, 3_000)
    fitted = mechanism().fit(y)  # one machine: accepted
    assert fitted.mean_epsilon_ > 0
    acc = BudgetAccountant()
    release = KeyedRelease(mechanism(), ReleaseKey(b"m" * 32), "r6-split", accountant=acc)
    release.add_counts(y, np.arange(y.size))
    try:
        release.fit(n_rows=y.size)
    finally:
        assert acc.spent_epsilon in (0.0, pytest.approx(float(mechanism().epsilon)))
    assert release.epsilon_split_["labels"] < 1e-7


def test_study_refuses_an_epsilon_its_dp_constant_could_not_build_before_spending():
    # Held: the study's epsilon-DP constant spends epsilon and then builds the noisy
    # mean at law_epsilon(epsilon), which refuses below MIN_SHARE_EPSILON (a spend then
    # a failure). The study validates every epsilon (>= MIN_EPSILON) before any fit.
    from sklearn.linear_model import Ridge

    from skdp_label import LabelDPRegressor
    from skdp_label.study import privacy_utility_study

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(80, 2)), rng.uniform(0, 1, 80)
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="epsilons must be"):
        privacy_utility_study(LabelDPRegressor(Ridge(), bounds=(0, 1)), X, y, mechanisms=["laplace"],
                              epsilons=[1.0, 3e-8], seeds=[0], accountant=acc, progress=False)
    assert acc.spent_epsilon == 0.0
