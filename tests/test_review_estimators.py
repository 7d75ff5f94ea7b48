"""Adversarial review of the estimator layer (LabelDPRegressor,
LabelDPClassifier, the study tool, privacy_report) against the five privacy
invariants, as whoever receives its outputs would attack it."""

import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.neighbors import KNeighborsRegressor

from skdp_label import BudgetAccountant, LabelDPClassifier, LabelDPRegressor
from skdp_label.mechanisms import Laplace, OptimalUnbiased, RandomizedResponse, RRWithPrior
from skdp_label.study import privacy_utility_study

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")

BOUNDS = (0.0, 10.0)


def _data(n=300, seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    # Strictly inside the bounds: min and max are label statistics, not the bounds.
    y = np.clip(X @ [1.0, 2.0, 0.5] + 5 + 0.3 * rng.normal(size=n), 0.7, 9.3)
    codes = np.digitize(X[:, 0] + 0.3 * X[:, 1], [-1.0, -0.2, 0.5, 1.2])
    return X, y, codes


def _spent_nothing(acc):
    assert acc.spent_epsilon == 0.0 and len(acc.ledger) == 0


# -- invariant 3: nothing exact about the labels in what leaves the labels party ---------

def _label_statistics(y):
    y = np.asarray(y, dtype=np.float64)
    return {"mean": y.mean(), "sum": y.sum(), "var": y.var(), "var (ddof=1)": y.var(ddof=1),
            "std": y.std(), "min": y.min(), "max": y.max(), "median": np.median(y)}


def _class_statistics(codes, n_classes):
    counts = np.bincount(codes, minlength=n_classes)
    return {"counts (float)": counts.astype(np.float64), "counts (int)": counts.astype(np.int64),
            "frequencies": counts / codes.size}


def _exact_values_in(blob, statistics, labels):
    found = [name for name, value in statistics.items()
             if np.atleast_1d(np.asarray(value)).tobytes() in blob]
    found += [f"raw labels ({dtype.__name__})" for dtype in (np.float64, np.int64)
              if np.asarray(labels).astype(dtype)[:16].tobytes() in blob]
    return found


@pytest.mark.parametrize("make", [
    lambda: LabelDPRegressor(Ridge(), "auto", 1.0, bounds=BOUNDS),
    lambda: LabelDPRegressor(KNeighborsRegressor(10), "rr-on-bins", 1.0, bounds=BOUNDS,
                             shrinkage="cv"),
    lambda: LabelDPRegressor(Ridge(), "laplace", 1.0, bounds=BOUNDS, shrinkage=0.5,
                             mechanism_params={"clip": False}, param_grid={"alpha": [0.1, 10]}),
], ids=["auto", "rr-on-bins-cv-guard", "laplace-grid"])
def test_fitted_regressors_pickles_reports_and_reprs_hold_no_label_statistic(make):
    X, y, _ = _data()
    est = make().fit(X, y)
    blob = pickle.dumps(est) + pickle.dumps(est.privacy_report())
    assert _exact_values_in(blob, _label_statistics(y), y) == []
    text = repr(est) + str(est.privacy_report())
    shown = [repr(float(v))[:8] for v in _label_statistics(y).values()]
    assert not [s for s in shown if len(s) == 8 and s in text]  # (0.7, the clip, is too short)


@pytest.mark.parametrize("params", [
    dict(mechanism="auto"),
    dict(mechanism="auto", epsilon=0.05, shrinkage="auto"),
    dict(mechanism="rr", majority_guard=True, shrinkage=0.3),
    dict(prior="clusters", n_clusters=4, n_stages=2),
    dict(prior="class-frequencies"),
], ids=["auto", "auto-small-eps", "rr-guard", "clusters", "class-frequencies"])
def test_fitted_classifiers_pickles_hold_no_class_count(params):
    X, _, codes = _data()
    est = LabelDPClassifier(LogisticRegression(), classes=range(5), **params).fit(X, codes)
    blob = pickle.dumps(est) + pickle.dumps(est.privacy_report())
    assert _exact_values_in(blob, _class_statistics(codes, 5), codes) == []


# -- invariant 2: the report, the fitted attribute and the ledger agree ----------------------

@pytest.mark.parametrize("make", [
    lambda acc: LabelDPRegressor(Ridge(), "auto", 0.7, bounds=BOUNDS, accountant=acc),
    lambda acc: LabelDPRegressor(Ridge(), "rr-on-bins", 0.7, bounds=BOUNDS, accountant=acc),
    lambda acc: LabelDPClassifier(LogisticRegression(), "auto", 0.7, classes=range(5),
                                  accountant=acc),
    # 90 % of one class (below): 'auto' chooses k = 1 (two histograms).
    lambda acc: LabelDPClassifier(LogisticRegression(), "auto", 0.31, classes=range(5),
                                  accountant=acc),
    lambda acc: LabelDPClassifier(LogisticRegression(), epsilon=0.7, classes=range(5),
                                  prior="clusters", n_clusters=3, n_stages=2, accountant=acc),
    lambda acc: LabelDPClassifier(LogisticRegression(), epsilon=0.7, classes=range(5),
                                  prior="class-frequencies", accountant=acc),
], ids=["reg-auto", "reg-rr-on-bins", "clf-auto", "clf-auto-k1", "clf-clusters", "clf-freqs"])
def test_report_attribute_and_ledger_agree_over_refits(make):
    X, y, codes = _data(n=400)
    acc = BudgetAccountant()
    est = make(acc)
    if est.epsilon == 0.31:
        codes = np.where(np.random.default_rng(3).random(400) < 0.9, 0, codes)
    target = codes if isinstance(est, LabelDPClassifier) else y
    for fits in (1, 2):
        est.fit(X, target)
        report = est.privacy_report()
        assert report.epsilon == pytest.approx(est.epsilon)  # the last fit
        assert est.epsilon_spent_ == pytest.approx(fits * est.epsilon)  # cumulative
        assert acc.spent_epsilon == pytest.approx(fits * est.epsilon)
        assert sum(row["n_labels"] for row in report.steps) >= 400
        if est.epsilon == 0.31:  # k = 1 in 1500 of 1500 fits
            assert est.plan_["k"] == 1 and est.stage_sizes_ == [0]


# -- invariant 1: no warning fires depending on the private labels ------------------------

class _Majority(ClassifierMixin, BaseEstimator):
    """Predicts the most frequent (noisy) class; validates nothing."""

    def fit(self, X, y):
        self.classes_, counts = np.unique(y, return_counts=True)
        self.majority_ = self.classes_[np.argmax(counts)]
        return self

    def predict(self, X):
        return np.full(len(X), self.majority_)


def test_classifier_warnings_do_not_depend_on_the_labels():
    # Same public inputs (X, classes, epsilon), two label vectors: the warnings a
    # fit emits must be the same. scikit-learn's check_classification_targets
    # warns when more than half of the rows hold distinct classes: a statistic
    # of the private labels (how many classes are present).
    # (The base estimator checks nothing: its own warnings would be about the
    # noisy labels, a post-processing.)
    X = np.random.default_rng(0).normal(size=(30, 3))
    messages = []
    for y in (np.arange(30) % 20, np.arange(30) % 2):
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            LabelDPClassifier(_Majority(), "rr", 1.0, classes=range(20), majority_guard=False,
                              proba_correction=None).fit(X, y)
        messages.append(sorted(str(w.message) for w in caught))
    assert messages[0] == messages[1] == []


class _Mean(RegressorMixin, BaseEstimator):
    """Predicts the mean (noisy) label; validates nothing."""

    def fit(self, X, y):
        self.mean_ = float(np.mean(y))
        return self

    def predict(self, X):
        return np.full(len(X), self.mean_)


@pytest.mark.parametrize("mechanism", ["laplace", "rr-on-bins", "unbiased", "auto"])
def test_regressor_warnings_do_not_depend_on_the_labels(mechanism):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 3))
    labels = [rng.uniform(0, 10, 200), np.zeros(200), np.r_[rng.uniform(0, 10, 190), [50.0] * 10]]
    messages = []
    for y in labels:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            LabelDPRegressor(_Mean(), mechanism, 0.5, bounds=BOUNDS, shrinkage=None,
                             mechanism_params={"out_of_bounds": "clip"}).fit(X, y)
        messages.append(sorted({str(w.message) for w in caught}))
    assert messages[0] == messages[1] == messages[2]


# -- invariants 2 and 5: refused before anything is spent -----------------------------------

@pytest.mark.parametrize("mechanism", [
    RandomizedResponse(classes=[0, 1]),
    RRWithPrior(classes=[0, 1]),
    RandomizedResponse(classes=[0, 1, 3]),
    RandomizedResponse(classes=[2, 1, 0]),  # same classes, another order: the columns would mix
])
def test_mechanism_instance_with_other_classes_is_refused_before_spending(mechanism):
    # Was: the estimator's classes were ignored, the labels charged, and the fit
    # then failed iff some label lay outside the instance's classes (a failure
    # after charging, and one that tells whether class 2 occurs).
    X = np.random.default_rng(1).normal(size=(100, 3))
    y = np.r_[np.zeros(50, int), np.ones(49, int), 2]
    acc = BudgetAccountant()
    est = LabelDPClassifier(LogisticRegression(), mechanism=mechanism, classes=[0, 1, 2],
                            accountant=acc)
    with pytest.raises(ValueError, match="classes"):
        est.fit(X, y)
    _spent_nothing(acc)
    with pytest.raises(ValueError, match="classes"):  # also with labels inside them
        est.fit(X, np.r_[np.zeros(50, int), np.ones(50, int)])
    _spent_nothing(acc)


def test_mechanism_instance_with_the_same_classes_is_accepted():
    X = np.random.default_rng(1).normal(size=(100, 3))
    y = (X[:, 0] > 0).astype(int)
    acc = BudgetAccountant()
    est = LabelDPClassifier(LogisticRegression(), mechanism=RandomizedResponse(classes=[0, 1]),
                            classes=np.array([0, 1]), accountant=acc).fit(X, y)
    assert acc.spent_epsilon == 1.0 and est.predict_proba(X[:3]).shape == (3, 2)


@pytest.mark.parametrize("mechanism", [
    Laplace(bounds=(0, 2)), OptimalUnbiased(bounds=(0, 2), resolution=1),
], ids=["laplace", "unbiased"])
def test_classifier_refuses_a_regression_mechanism_before_spending(mechanism):
    # Was: accepted; the labels were charged, then the noisy values (not classes)
    # failed to encode, with a message blaming the labels.
    X = np.random.default_rng(1).normal(size=(100, 3))
    y = np.random.default_rng(2).integers(0, 3, 100)
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="classification mechanism"):
        LabelDPClassifier(LogisticRegression(), mechanism=mechanism, classes=[0, 1, 2],
                          accountant=acc, proba_correction=None, majority_guard=False).fit(X, y)
    _spent_nothing(acc)


@pytest.mark.parametrize("flag", [True, False, np.True_])
def test_classifier_bool_shrinkage_is_refused_before_spending(flag):
    # shrinkage=True would silently mean a weight of 1 (predictions = the class
    # prior); LabelDPRegressor refuses bools already.
    X, _, codes = _data(n=80)
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="shrinkage"):
        LabelDPClassifier(LogisticRegression(), classes=range(5), shrinkage=flag,
                          accountant=acc).fit(X, codes)
    _spent_nothing(acc)


@pytest.mark.parametrize("make", [
    lambda acc: LabelDPRegressor(Ridge(), "laplace", bounds=BOUNDS, accountant=acc),
    lambda acc: LabelDPRegressor(Ridge(), "auto", bounds=BOUNDS, accountant=acc),
    lambda acc: LabelDPClassifier(LogisticRegression(), "auto", classes=range(5), accountant=acc),
])
def test_negative_sample_weights_are_refused_before_spending(make):
    # Was: accepted, charged, then Ridge failed on them (sqrt of a negative
    # weight) or the guards computed a negative standard error.
    X, y, codes = _data(n=100)
    acc = BudgetAccountant()
    est = make(acc)
    weights = np.r_[np.ones(99), -1.0]
    with pytest.raises(ValueError, match="negative"):
        est.fit(X, codes if isinstance(est, LabelDPClassifier) else y, sample_weight=weights)
    _spent_nothing(acc)


@pytest.mark.parametrize("params", [
    dict(epsilon=1.5e-9),  # the prior's half leaves the labels below MIN_EPSILON
    dict(epsilon=1.0, mechanism_params={"prior_epsilon": 1.0 - 1e-12}),
])
def test_regressor_comparison_of_candidates_never_fails_a_charged_fit(params):
    # Was: RR-on-Bins charged its noisy prior, then the estimator's comparison
    # with the unbiased randomizer (informational, post-processing) raised on an
    # epsilon below the floor: a fit that failed after spending.
    X, y, _ = _data(n=200)
    acc = BudgetAccountant()
    est = LabelDPRegressor(Ridge(), "rr-on-bins", bounds=BOUNDS, accountant=acc, **params)
    try:
        est.fit(X, y)
    except ValueError:  # refusing the split before anything is spent would do too
        _spent_nothing(acc)
    else:
        assert acc.spent_epsilon == pytest.approx(est.epsilon) == est.epsilon_spent_
        assert np.all(np.isfinite(est.predict(X[:5])))


@pytest.mark.parametrize("params, match", [
    (dict(epsilon=np.nan), "epsilon"), (dict(epsilon=np.inf), "epsilon"),
    (dict(epsilon=-1.0), "epsilon"), (dict(epsilon=True), "epsilon"), (dict(epsilon=0), "epsilon"),
    (dict(bounds=(np.nan, 1.0)), "bounds"), (dict(bounds=(0.0, np.inf)), "bounds"),
    (dict(bounds=(10.0, 0.0)), "bounds"), (dict(bounds=(False, True)), "bounds"),
    (dict(mechanism="auto", mechanism_params={"mean_epsilon": np.inf}), "mean_epsilon"),
    (dict(mechanism="auto", mechanism_params={"prior_epsilon": True}), "prior_epsilon"),
    (dict(shrinkage=np.nan), "shrinkage"), (dict(shrinkage=True), "shrinkage"),
    (dict(mechanism="rr-on-bins", mechanism_params={"prior": (np.arange(11.0), -np.ones(11))}),
     "prior"),
    (dict(random_state=True), "random_state"),
])
def test_bad_regressor_parameters_spend_nothing(params, match):
    X, y, _ = _data(n=60)
    acc = BudgetAccountant()
    kwargs = {"mechanism": "laplace", "bounds": BOUNDS, **params}
    with pytest.raises(ValueError, match=match):
        LabelDPRegressor(Ridge(), accountant=acc, **kwargs).fit(X, y)
    _spent_nothing(acc)


@pytest.mark.parametrize("params, match", [
    (dict(epsilon=np.nan), "epsilon"), (dict(classes=[0, 0, 1, 2, 3, 4]), "duplicates"),
    (dict(classes=[0.0, 1, 2, 3, np.nan]), "finite"),
    (dict(prior="class-frequencies", prior_epsilon=np.nan), "prior_epsilon"),
    (dict(prior="class-frequencies", prior_epsilon=True), "prior_epsilon"),
    (dict(prior="class-frequencies", prior_epsilon=1.0), "prior_epsilon"),
    (dict(n_stages=2, stage_split=[0.5, np.nan]), "stage_split"),
    (dict(prior_temperature=np.nan), "prior_temperature"), (dict(shrinkage=np.nan), "shrinkage"),
    (dict(mechanism="auto", prior="clusters"), "prior"),
    # classification_plan leaves the labels 5e-10 beside a 5e-10 histogram.
    (dict(prior="class-frequencies", epsilon=1e-9), "epsilon"),
])
def test_bad_classifier_parameters_spend_nothing(params, match):
    X, _, codes = _data(n=60)
    acc = BudgetAccountant()
    kwargs = {"classes": range(5), **params}
    with pytest.raises(ValueError, match=match):
        LabelDPClassifier(LogisticRegression(), accountant=acc, **kwargs).fit(X, codes)
    _spent_nothing(acc)


# -- invariant 2 in the study tool: the user's accountant is the one charged ---------------

def test_study_charges_the_templates_accountant():
    # Was: without accountant=, the study replaced the template's accountant by a
    # fresh unlimited one: a budget of 1 saw nothing of a study spending 8.
    X, y, _ = _data(n=80)
    acc = BudgetAccountant(epsilon=1.0)
    est = LabelDPRegressor(Ridge(), bounds=BOUNDS, accountant=acc)
    with pytest.raises(Exception, match="[Bb]udget"):
        privacy_utility_study(est, X, y, mechanisms=["laplace"], epsilons=[2.0], seeds=[0, 1],
                              progress=False)
    _spent_nothing(acc)
    roomy = BudgetAccountant(epsilon=10.0)
    table = privacy_utility_study(est.set_params(accountant=roomy), X, y, mechanisms=["laplace"],
                                  epsilons=[2.0], seeds=[0, 1], progress=False)
    assert roomy.spent_epsilon == pytest.approx(8.0)  # 2 fits + 2 DP constants
    assert table["epsilon_spent"].iloc[1:].tolist() == [2.0] * 4


def test_study_charges_a_mechanism_instances_accountant():
    X, y, _ = _data(n=80)
    acc = BudgetAccountant(epsilon=10.0)
    privacy_utility_study(LabelDPRegressor(Ridge(), bounds=BOUNDS), X, y,
                          mechanisms={"lap": Laplace(bounds=BOUNDS, accountant=acc)},
                          epsilons=[2.0], seeds=[0], progress=False)
    assert acc.spent_epsilon == pytest.approx(4.0)


def test_study_refuses_two_accountants_before_anything_runs():
    X, y, _ = _data(n=80)
    own, other = BudgetAccountant(), BudgetAccountant()
    est = LabelDPRegressor(Ridge(), bounds=BOUNDS, accountant=own)
    with pytest.raises(ValueError, match="accountant"):
        privacy_utility_study(est, X, y, mechanisms=["laplace"], epsilons=[2.0], seeds=[0],
                              accountant=other, progress=False)
    _spent_nothing(own)
    _spent_nothing(other)
    # The same accountant on both sides is one ledger: fine.
    privacy_utility_study(est, X, y, mechanisms=["laplace"], epsilons=[2.0], seeds=[0],
                          accountant=own, progress=False, references=False)
    assert own.spent_epsilon == pytest.approx(2.0)


@pytest.mark.parametrize("test_set, match", [
    (lambda X, y: (X[:20, :2], y[:20]), "features"),
    (lambda X, y: (np.full((20, 3), np.nan), y[:20]), "NaN"),
    (lambda X, y: (X[:20], np.full(20, np.nan)), "NaN"),
], ids=["features", "nan-features", "nan-labels"])
def test_study_refuses_a_bad_test_set_before_anything_runs(test_set, match):
    # Was: every row was fitted and charged, then failed its scoring.
    X, y, _ = _data(n=80)
    X_test, y_test = test_set(X, y)
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match=match):
        privacy_utility_study(LabelDPRegressor(Ridge(), bounds=BOUNDS), X, y, X_test=X_test,
                              y_test=y_test, mechanisms=["laplace"], epsilons=[1.0], seeds=[0],
                              accountant=acc, progress=False)
    _spent_nothing(acc)


def test_study_refuses_several_label_columns_before_anything_runs():
    # Was: each fit charged 2 epsilon (two labels per row) against a total checked
    # for 1, and the DP constant's mean of both columns was charged epsilon for a
    # release that changes by two labels per row.
    X, y, _ = _data(n=80)
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="one label column"):
        privacy_utility_study(LabelDPRegressor(Ridge(), bounds=BOUNDS), X, np.c_[y, 10 - y],
                              mechanisms=["laplace"], epsilons=[1.0], seeds=[0], accountant=acc,
                              progress=False)
    _spent_nothing(acc)


# -- invariant 4: fresh entropy, separate streams ---------------------------------------

def test_unseeded_auto_classifier_fits_draw_independent_histograms():
    X, _, codes = _data()
    est = LabelDPClassifier(LogisticRegression(), "auto", 0.5, classes=range(5))
    first = est.fit(X, codes).cluster_histograms_.copy()
    second = est.fit(X, codes).cluster_histograms_
    assert not np.array_equal(first, second)


def test_study_rows_get_distinct_streams(monkeypatch):
    # Every (mechanism, epsilon, seed) row is its own release: its own seed.
    import skdp_label.estimators._base as base

    seeds = []
    original = base.BaseLabelDPEstimator._fit_context

    def record(self, X):
        seeds.append(self.random_state)
        return original(self, X)

    monkeypatch.setattr(base.BaseLabelDPEstimator, "_fit_context", record)
    X, y, _ = _data(n=80)
    privacy_utility_study(LabelDPRegressor(Ridge(), bounds=BOUNDS), X, y,
                          mechanisms={"a": "laplace", "b": "laplace"}, epsilons=[1.0, 2.0],
                          seeds=[0, 1], progress=False, references=False)
    assert len(seeds) == 8 and len(set(seeds)) == 8 and None not in seeds


# -- invariant 2: an instance's accountant is not silently replaced ------------------------
@pytest.mark.parametrize("make", [
    lambda own, acc: LabelDPRegressor(Ridge(), Laplace(bounds=BOUNDS, accountant=own),
                                      bounds=BOUNDS, accountant=acc),
    lambda own, acc: LabelDPClassifier(LogisticRegression(),
                                       RandomizedResponse(classes=[0, 1], accountant=own),
                                       classes=[0, 1], accountant=acc),
])
def test_two_accountants_are_refused_before_spending(make):
    # Was: the estimator's accountant replaced the instance's, whose budget (0.5 here)
    # never saw the fit.
    X, y = np.random.default_rng(0).normal(size=(60, 2)), np.tile([0, 1], 30)
    own, other = BudgetAccountant(epsilon=0.5), BudgetAccountant()
    with pytest.raises(ValueError, match="another accountant"):
        make(own, other).fit(X, y)
    _spent_nothing(own)
    _spent_nothing(other)
    make(own, own).set_params(epsilon=0.25).fit(X, y)  # the same one twice: fine
    make(own, None).set_params(epsilon=0.25).fit(X, y)  # the instance's alone: charged to it
    assert own.spent_epsilon == pytest.approx(0.5)
