"""LabelDPRegressor / LabelDPClassifier: privatize once, delegate, account."""

import pickle

import numpy as np
from sklearn.base import clone
import pytest
from sklearn import config_context
from sklearn.datasets import load_digits
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.model_selection import GridSearchCV, KFold, cross_val_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skdp_label import BudgetAccountant, LabelDPClassifier, LabelDPRegressor
from skdp_label.mechanisms import Laplace, RRWithPrior, mechanism_names

# The digits classes, declared as the public class list (never read off y).
DIGIT_CLASSES = np.arange(10)


@pytest.fixture
def regression_data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    y = np.clip(X @ [1.0, 2.0, -1.0] + 5.0, 0.0, 10.0)
    return X, y


@pytest.fixture(scope="module")
def digits():
    X, y = load_digits(return_X_y=True)
    return X / 16.0, y


# -- LabelDPRegressor ----------------------------------------------------------------------
def test_regressor_fits_clone_on_noisy_labels_and_charges_once(regression_data):
    X, y = regression_data
    acc = BudgetAccountant(epsilon=5.0)
    base = Ridge(alpha=0.5)
    reg = LabelDPRegressor(base, "laplace", 1.5, bounds=(0, 10), accountant=acc, random_state=3).fit(X, y)
    # The mechanism got a seed derived from the estimator's seed and the features
    # (never a Generator); the same mechanism alone with that seed gives the same labels.
    assert isinstance(reg.mechanism_.random_state, int) and reg.mechanism_.random_state != 3
    y_noisy = Laplace(1.5, bounds=(0, 10), random_state=reg.mechanism_.random_state).fit_transform(y)
    np.testing.assert_allclose(reg.estimator_.coef_, Ridge(alpha=0.5).fit(X, y_noisy).coef_)
    assert not hasattr(base, "coef_")  # the base estimator is cloned, not fitted
    assert isinstance(reg.mechanism_, Laplace) and reg.epsilon_spent_ == pytest.approx(1.5)
    assert acc.spent_epsilon == pytest.approx(1.5) and len(acc.ledger) == 1
    np.testing.assert_allclose(reg.predict(X[:5]), reg.estimator_.predict(X[:5]))
    assert reg.score(X, y) == pytest.approx(reg.estimator_.score(X, y))
    assert reg.n_features_in_ == 3


@pytest.mark.parametrize("name", ["laplace", "discrete-laplace", "staircase", "exponential"])
def test_regressor_mechanisms_by_name(name, regression_data):
    X, y = regression_data
    y = np.round(y)
    reg = LabelDPRegressor(LinearRegression(), name, 2.0, bounds=(0, 10), random_state=0).fit(X, y)
    assert reg.mechanism_.epsilon == 2.0 and reg.epsilon_spent_ == pytest.approx(2.0)
    assert np.corrcoef(reg.predict(X), y)[0, 1] > 0.5


@pytest.mark.skipif("unbiased" not in mechanism_names("regression"), reason="'unbiased' not merged yet")
def test_regressor_default_mechanism(regression_data):
    X, y = regression_data
    reg = LabelDPRegressor(LinearRegression(), bounds=(0, 10), random_state=0).fit(X, np.round(y))
    assert reg.epsilon_spent_ == pytest.approx(1.0)


def test_unknown_mechanism_and_bad_input_spend_nothing(regression_data):
    X, y = regression_data
    acc = BudgetAccountant(epsilon=10.0)

    def fit(X_, y_, **params):
        kw = dict(mechanism="laplace", bounds=(0, 10), accountant=acc, random_state=0)
        kw.update(params)
        return LabelDPRegressor(LinearRegression(), **kw).fit(X_, y_)

    with pytest.raises(ValueError, match="Unknown regression mechanism 'no-such'"):
        fit(X, y, mechanism="no-such")
    with pytest.raises(ValueError, match="Unknown regression mechanism 'rr'"):
        fit(X, y, mechanism="rr")  # a classification mechanism
    y_nan = y.copy()
    y_nan[3] = np.nan
    X_nan = X.copy()
    X_nan[0, 0] = np.nan
    for bad in [
        lambda: fit(X, y_nan),
        lambda: fit(X_nan, y),
        lambda: fit(X[:10], y),
        lambda: fit(X[:0], y[:0]),
        lambda: fit(X, y + 20),  # outside the public bounds
        lambda: fit(X, y, bounds=None),
        lambda: fit(X, y, epsilon=0.0),
        lambda: fit(X, y, epsilon=-1.0),
    ]:
        with pytest.raises(ValueError):
            bad()
    assert acc.ledger == []


def test_mechanism_instance_is_cloned_with_estimator_epsilon(regression_data):
    X, y = regression_data
    acc = BudgetAccountant()
    mech = Laplace(epsilon=9.0, bounds=(0, 10), clip=False)
    reg = LabelDPRegressor(Ridge(), mech, 0.5, accountant=acc, random_state=0).fit(X, y)
    assert reg.mechanism_ is not mech and not hasattr(mech, "epsilon_spent_")
    assert reg.mechanism_.epsilon == 0.5 and reg.mechanism_.clip is False
    assert acc.spent_epsilon == pytest.approx(0.5)


def test_sample_weight_reaches_base_estimator(regression_data):
    X, y = regression_data
    w = np.linspace(0.1, 3.0, len(y))
    kw = dict(mechanism="laplace", epsilon=1.0, bounds=(0, 10), random_state=1)
    weighted = LabelDPRegressor(Ridge(), **kw).fit(X, y, sample_weight=w)
    y_noisy = Laplace(1.0, bounds=(0, 10), random_state=weighted.mechanism_.random_state).fit_transform(y)
    np.testing.assert_allclose(weighted.estimator_.coef_, Ridge().fit(X, y_noisy, sample_weight=w).coef_)
    assert not np.allclose(weighted.estimator_.coef_, Ridge().fit(X, y_noisy).coef_)
    with config_context(enable_metadata_routing=True):
        routed = LabelDPRegressor(Ridge().set_fit_request(sample_weight=True), **kw)
        np.testing.assert_allclose(routed.fit(X, y, sample_weight=w).estimator_.coef_, weighted.estimator_.coef_)
        with pytest.raises(Exception, match="sample_weight"):
            LabelDPRegressor(Ridge(), **kw).fit(X, y, sample_weight=w)


def test_regressor_in_pipelines_and_with_gradient_boosting(regression_data):
    X, y = regression_data
    kw = dict(mechanism="laplace", epsilon=2.0, bounds=(0, 10), random_state=0)
    outer = make_pipeline(StandardScaler(), LabelDPRegressor(Ridge(), **kw))
    inner = LabelDPRegressor(make_pipeline(StandardScaler(), Ridge()), **kw).fit(X, y)
    # A seeded fit is a function of the seed and the features it is given.
    np.testing.assert_allclose(clone(outer).fit(X, y).predict(X), outer.fit(X, y).predict(X))
    assert np.corrcoef(outer.predict(X), inner.predict(X))[0, 1] > 0.8
    hgb = LabelDPRegressor(HistGradientBoostingRegressor(max_iter=30), **kw).fit(X, y)
    assert hgb.score(X, y) > 0.3


def _expected_search_spend(eps_values, n_other, n_splits, refit_eps):
    return sum(eps_values) * n_other * n_splits + refit_eps


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_grid_search_is_accounted(regression_data, n_jobs):
    X, y = regression_data
    acc = BudgetAccountant()
    reg = LabelDPRegressor(Ridge(), "laplace", bounds=(0, 10), accountant=acc, random_state=0)
    grid = {
        "epsilon": [0.5, 2.0],
        "mechanism": ["laplace", "staircase"],
        "base_estimator__alpha": [0.1, 10.0],
    }
    search = GridSearchCV(reg, grid, cv=3, n_jobs=n_jobs).fit(X, y)
    expected = _expected_search_spend([0.5, 2.0], 4, 3, search.best_params_["epsilon"])
    assert acc.spent_epsilon == pytest.approx(expected)
    assert len(acc.ledger) == 2 * 4 * 3 + 1
    cross_val_score(reg, X, y, cv=4)
    assert acc.spent_epsilon == pytest.approx(expected + 4 * 1.0)


def test_fitted_objects_keep_no_labels(regression_data, digits):
    X, y = regression_data
    y = y + np.random.default_rng(5).uniform(0, 1e-6, size=y.shape)  # distinctive bytes
    reg = LabelDPRegressor(Ridge(), "laplace", bounds=(0, 11), random_state=0).fit(X, y)
    blob = pickle.dumps(reg)
    assert all(y[i : i + 2].tobytes() not in blob for i in range(0, len(y), 40))
    Xd, yd = digits
    clf = LabelDPClassifier(LogisticRegression(C=0.1), n_stages=2, random_state=0, classes=DIGIT_CLASSES).fit(Xd[:400], yd[:400])
    blob = pickle.dumps(clf)
    assert yd[:400].astype(np.int64).tobytes() not in blob
    assert yd[:400].astype(np.int64).tobytes()[:800] not in blob


def test_xgboost_poisson_with_discrete_mechanism():
    xgboost = pytest.importorskip("xgboost")
    rng = np.random.default_rng(0)
    X = rng.normal(size=(3000, 2))
    y = np.minimum(rng.poisson(np.exp(1.0 + 0.8 * X[:, 0])), 30)
    acc = BudgetAccountant(epsilon=2.0)
    reg = LabelDPRegressor(
        xgboost.XGBRegressor(objective="count:poisson", n_estimators=30, max_depth=2, n_jobs=1),
        "discrete-laplace", 2.0, bounds=(0, 30), accountant=acc, random_state=0,
    ).fit(X, y)
    pred = reg.predict(X)
    assert np.all(pred > 0)
    assert np.corrcoef(pred, X[:, 0])[0, 1] > 0.5  # the trend survives the noise
    assert acc.spent_epsilon == pytest.approx(2.0)


# -- LabelDPClassifier ---------------------------------------------------------------------
def test_classifier_contract_with_string_labels(digits):
    X, y = digits
    names = np.array(["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine"])
    clf = LabelDPClassifier(LogisticRegression(C=0.1), epsilon=4.0, random_state=0, classes=names).fit(X, names[y])
    assert clf.classes_.tolist() == names.tolist()  # declared order, not sorted
    proba = clf.predict_proba(X[:50])
    assert proba.shape == (50, 10)
    np.testing.assert_allclose(proba.sum(axis=1), 1.0)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(axis=1)], clf.predict(X[:50]))
    assert clf.score(X, names[y]) > 0.8
    assert not hasattr(LabelDPClassifier(Ridge(), classes=DIGIT_CLASSES), "predict_proba")


def test_declared_classes_and_unknown_label(digits):
    X, y = digits
    clf = LabelDPClassifier(LogisticRegression(C=0.1), classes=np.arange(12), random_state=0).fit(X, y)
    assert clf.predict_proba(X[:3]).shape == (3, 12)
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="not among the .*declared classes"):
        LabelDPClassifier(LogisticRegression(), classes=np.arange(5), accountant=acc).fit(X, y)
    assert acc.ledger == []


def test_multistage_accounting_is_parallel(digits):
    X, y = digits
    acc = BudgetAccountant(epsilon=1.0)
    clf = LabelDPClassifier(
        LogisticRegression(C=0.1), epsilon=1.0, n_stages=3, accountant=acc, random_state=0, classes=DIGIT_CLASSES).fit(X, y)
    assert acc.spent_epsilon == pytest.approx(1.0) and clf.epsilon_spent_ == pytest.approx(1.0)
    entries = acc.ledger
    assert len(entries) == 3 and len({e.group for e in entries}) == 1 and entries[0].group
    assert sum(e.n_labels for e in entries) == len(y) == sum(clf.stage_sizes_)
    assert [m.epsilon_spent_ for m in clf.mechanisms_] == [1.0, 1.0, 1.0]
    assert clf.stage_k_[0] == 10 and clf.stage_k_[2] < 10
    # A second fit composes sequentially: the budget of 1 is exhausted.
    with pytest.raises(Exception, match="budget"):
        clf.fit(X, y)


def test_cluster_prior_accounting(digits):
    X, y = digits
    acc = BudgetAccountant(epsilon=2.0)
    clf = LabelDPClassifier(
        LogisticRegression(C=0.1), epsilon=2.0, n_stages=2, prior="clusters", n_clusters=10,
        prior_epsilon=0.2, accountant=acc, random_state=0, classes=DIGIT_CLASSES).fit(X, y)
    assert acc.spent_epsilon == pytest.approx(2.0)
    assert [e.epsilon for e in acc.ledger] == pytest.approx([0.2, 1.8, 1.8])
    assert clf.prior_epsilon_ == 0.2 and clf.mechanism_.epsilon == pytest.approx(1.8)
    assert clf.cluster_histograms_.shape == (10, 10)
    assert clf.stage_k_[0] < 10  # the cluster prior already narrows stage 1


def test_reuse_filter_and_stage_split(digits):
    X, y = digits
    kw = dict(epsilon=1.0, n_stages=2, stage_split=0.6, random_state=0)
    reuse = LabelDPClassifier(LogisticRegression(C=0.1), **kw, classes=DIGIT_CLASSES).fit(X, y)
    fresh = LabelDPClassifier(LogisticRegression(C=0.1), reuse_labels=False, **kw, classes=DIGIT_CLASSES).fit(X, y)
    n1, n2 = reuse.stage_sizes_
    assert abs(n1 - 0.6 * len(y)) <= 1 and n1 + n2 == len(y)
    assert fresh.stage_train_sizes_ == [n1, n2]
    assert n2 < reuse.stage_train_sizes_[1] < n1 + n2  # some, not all, stage-1 labels kept


def test_classifier_bad_configurations_spend_nothing(digits):
    X, y = digits
    acc = BudgetAccountant()
    bad = [
        dict(mechanism="rr", n_stages=2),
        dict(mechanism="rr", prior="clusters"),
        dict(prior="clusters", prior_epsilon=1.0),
        dict(n_stages=2, stage_split=[0.5, 0.3, 0.2]),
        dict(mechanism="laplace"),
    ]
    for params in bad:
        with pytest.raises(ValueError):
            LabelDPClassifier(LogisticRegression(), accountant=acc, **params, classes=DIGIT_CLASSES).fit(X, y)
    with pytest.raises(ValueError, match="predict_proba"):
        LabelDPClassifier(Ridge(), n_stages=2, accountant=acc, classes=DIGIT_CLASSES).fit(X, y)
    with pytest.raises(ValueError, match="public list of classes"):
        LabelDPClassifier(LogisticRegression(), accountant=acc).fit(X, y)  # never read off y
    assert acc.ledger == []


def test_classifier_sample_weight_per_stage(digits):
    X, y = digits
    seen = []

    class Spy(LogisticRegression):
        def fit(self, X, y, sample_weight=None):
            seen.append((len(y), None if sample_weight is None else len(sample_weight)))
            return super().fit(X, y, sample_weight=sample_weight)

    clf = LabelDPClassifier(Spy(C=0.1), n_stages=2, random_state=0, classes=DIGIT_CLASSES)
    clf.fit(X, y, sample_weight=np.ones(len(y)))
    assert [n for n, _ in seen] == clf.stage_train_sizes_
    assert all(n == m for n, m in seen)
    seen.clear()
    with config_context(enable_metadata_routing=True):
        routed = LabelDPClassifier(Spy(C=0.1).set_fit_request(sample_weight=True), n_stages=2, random_state=0, classes=DIGIT_CLASSES)
        routed.fit(X, y, sample_weight=np.ones(len(y)))
        assert [m for _, m in seen] == routed.stage_train_sizes_


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_classifier_grid_search_accounting(digits, n_jobs):
    X, y = digits
    X, y = X[:600], y[:600]
    acc = BudgetAccountant()
    clf = LabelDPClassifier(LogisticRegression(C=0.1), accountant=acc, random_state=0, classes=DIGIT_CLASSES)
    grid = {"epsilon": [1.0, 3.0], "n_stages": [1, 2], "mechanism": ["rr", "rr-with-prior"]}
    grid = [dict(grid, mechanism=["rr-with-prior"]), {"epsilon": [1.0, 3.0], "mechanism": ["rr"]}]
    search = GridSearchCV(clf, grid, cv=2, n_jobs=n_jobs).fit(X, y)
    expected = (1.0 + 3.0) * 2 * 2 + (1.0 + 3.0) * 2 + search.best_params_["epsilon"]
    assert acc.spent_epsilon == pytest.approx(expected)


def test_two_stage_beats_one_stage_rr_on_digits(digits):
    """004's claim on a small scale: RRWithPrior with two stages (stage 1 from a
    cluster prior, stage 2 from stage 1's model) beats plain RR at epsilon = 1."""
    X, y = digits
    folds = list(KFold(3, shuffle=True, random_state=0).split(X))

    def accuracy(**params):
        scores = []
        for seed, (train, test) in enumerate(folds):
            clf = LabelDPClassifier(LogisticRegression(C=0.1, max_iter=300), epsilon=1.0,
                                    random_state=seed, **params, classes=DIGIT_CLASSES)
            scores.append(clf.fit(X[train], y[train]).score(X[test], y[test]))
        return np.mean(scores)

    rr = accuracy(mechanism="rr")
    two_stage = accuracy(n_stages=2, prior="clusters", n_clusters=10, prior_epsilon=0.1)
    assert two_stage > rr + 0.05



def test_prior_temperature_sharpens_stage_priors(digits):
    X, y = digits
    kw = dict(epsilon=2.0, n_stages=2, random_state=0)
    flat = LabelDPClassifier(LogisticRegression(C=0.1), prior_temperature=2.0, **kw, classes=DIGIT_CLASSES).fit(X, y)
    sharp = LabelDPClassifier(LogisticRegression(C=0.1), prior_temperature=0.25, **kw, classes=DIGIT_CLASSES).fit(X, y)
    assert flat.stage_k_[0] == sharp.stage_k_[0] == 10  # same stage 1
    assert sharp.stage_k_[1] < flat.stage_k_[1]


def test_public_prior_instance_and_its_accountant(digits):
    X, y = digits
    acc = BudgetAccountant(epsilon=1.0)
    prior = np.full(10, 0.01)
    prior[[3, 8]] = 0.45  # RRWithPrior keeps only classes 3 and 8 at epsilon 1
    mech = RRWithPrior(epsilon=5.0, prior=prior, accountant=acc)
    clf = LabelDPClassifier(LogisticRegression(C=0.1), mech, epsilon=1.0, random_state=0, classes=DIGIT_CLASSES).fit(X, y)
    assert clf.mechanism_.k_ == 2 and clf.mechanism_.epsilon == 1.0
    assert set(np.unique(clf.predict(X))) <= {3, 8}
    assert acc.spent_epsilon == pytest.approx(1.0)  # the instance's accountant was charged


def test_stage_split_validation():
    from skdp_label.estimators._multistage import partition_stages, stage_fractions

    np.testing.assert_allclose(stage_fractions(3, None), [1 / 3] * 3)
    np.testing.assert_allclose(stage_fractions(3, 0.5), [0.5, 0.25, 0.25])
    np.testing.assert_allclose(stage_fractions(2, [3, 1]), [0.75, 0.25])
    for n_stages, split in [(1, 0.5), (2, [1.0]), (2, [1.0, -1.0]), (2, [1.0, np.nan])]:
        with pytest.raises(ValueError):
            stage_fractions(n_stages, split)
    parts = partition_stages(10, stage_fractions(3, None), np.random.default_rng(0))
    assert sorted(np.concatenate(parts).tolist()) == list(range(10))
    assert [len(p) for p in parts] == [4, 3, 3]
    with pytest.raises(ValueError, match="too few"):
        partition_stages(2, stage_fractions(3, None), np.random.default_rng(0))
