"""param_grid: the meta-estimators choose their base estimator's capacity on
the noisy labels (unbiased scorers, no true label, no extra budget)."""

import warnings

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import KFold
from sklearn.tree import DecisionTreeClassifier, DecisionTreeRegressor

from skdp_label import BudgetAccountant, LabelDPClassifier, LabelDPRegressor
from skdp_label.utils import PrivacyLeakWarning

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.utils.PrivacyLeakWarning")


def _regression(n=1500, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.uniform(size=(n, 3))
    y = np.clip(5 * X[:, 0] + 2 * np.sin(6 * X[:, 1]) + 0.3 * rng.normal(size=n), -3, 8)
    return X, y


_DEPTHS = {"max_depth": [1, 2, 3, 5, 8]}


def _fit_regressor(epsilon, accountant=None):
    X, y = _regression()
    return LabelDPRegressor(
        DecisionTreeRegressor(random_state=0), mechanism="laplace", epsilon=epsilon,
        bounds=(-3, 8), mechanism_params={"clip": False}, param_grid=_DEPTHS,
        cv=KFold(4, shuffle=True, random_state=0), accountant=accountant, random_state=0,
    ).fit(X, y)


def test_regressor_chooses_simpler_trees_at_small_epsilon():
    # Fixed seeds: deterministic. At eps=0.1 the Laplace noise (std ~ 150) drowns
    # everything but the main trend; at eps=20 the sine needs depth.
    small, large = _fit_regressor(0.1), _fit_regressor(20.0)
    assert small.best_params_["max_depth"] == 1
    assert large.best_params_["max_depth"] >= 3
    assert small.estimator_.get_depth() == 1  # the refit uses the chosen parameters
    assert len(small.cv_results_["mean_test_score"]) == 5  # scores on noisy labels


def test_classifier_chooses_shallower_trees_at_small_epsilon():
    X, _ = _regression()
    y = (np.sin(6 * X[:, 0]) + X[:, 1] > 0.5).astype(int) + (X[:, 2] > 0.5)
    classes = np.array(["low", "mid", "high"])
    chosen = {}
    for eps in (0.5, 8.0):
        clf = LabelDPClassifier(
            DecisionTreeClassifier(random_state=0), mechanism="rr", epsilon=eps, classes=classes,
            param_grid=_DEPTHS, cv=KFold(4, shuffle=True, random_state=0), random_state=0,
        ).fit(X, classes[y])
        chosen[eps] = clf.best_params_["max_depth"]
        assert set(clf.predict(X[:20])) <= set(classes)  # classes, not codes
    assert chosen[0.5] < chosen[8.0]


def test_model_selection_is_charged_exactly_once_per_fit():
    acc = BudgetAccountant(epsilon=10.0)
    reg = _fit_regressor(1.0, accountant=acc)
    assert acc.spent_epsilon == pytest.approx(1.0)
    assert len(acc.ledger) == 1  # the one release; the grid search costs nothing
    assert reg.epsilon_spent_ == pytest.approx(1.0)


def test_without_param_grid_nothing_changes():
    X, y = _regression(300)
    reg = LabelDPRegressor(DecisionTreeRegressor(max_depth=2), mechanism="laplace",
                           bounds=(-3, 8), random_state=0).fit(X, y)
    assert reg.best_params_ is None and reg.cv_results_ is None
    assert reg.estimator_.get_depth() == 2


@pytest.mark.parametrize(
    "params, match",
    [
        (dict(mechanism_params=None), "clipped outputs"),  # clip=True by default
        (dict(param_grid={"no_such_parameter": [1]}), "no_such_parameter"),
    ],
)
def test_refusals_spend_nothing(params, match):
    X, y = _regression(200)
    acc = BudgetAccountant(epsilon=5.0)
    kwargs = dict(mechanism="laplace", mechanism_params={"clip": False},
                  param_grid={"max_depth": [1, 2]}, bounds=(-3, 8), accountant=acc)
    kwargs.update(params)
    with pytest.raises(ValueError, match=match):
        LabelDPRegressor(DecisionTreeRegressor(), **kwargs).fit(X, y)
    assert acc.spent_epsilon == 0 and len(acc.ledger) == 0


@pytest.mark.parametrize(
    "options",
    [
        {"n_stages": 2},
        # A private prior randomizes with other priors than the fitted mechanism's
        # transition: its scorer would be wrong.
        {"prior": "class-frequencies"},
        {"prior": "clusters", "n_clusters": 3},
        {"mechanism": "auto"},
    ],
)
def test_classifier_with_per_example_priors_refuses_param_grid_before_spending(options):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 3)), rng.integers(0, 3, size=200)
    acc = BudgetAccountant(epsilon=5.0)
    clf = LabelDPClassifier(LogisticRegression(), classes=[0, 1, 2],
                            param_grid={"C": [0.1, 1.0]}, accountant=acc, **options)
    with pytest.raises(ValueError, match="per-example priors"):
        clf.fit(X, y)
    assert len(acc.ledger) == 0


def test_non_invertible_fitted_mechanism_warns_and_keeps_the_base_parameters():
    X, y = _regression(400)
    # RR-on-Bins at small epsilon merges labels into few bins: no unbiased MSE estimate.
    reg = LabelDPRegressor(
        DecisionTreeRegressor(max_depth=3), mechanism="rr-on-bins", epsilon=0.3,
        bounds=(-3, 8), param_grid={"max_depth": [1, 8]}, random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        with pytest.warns(UserWarning, match="param_grid ignored"):
            reg.fit(X, np.round(y))
    assert reg.best_params_ is None and reg.estimator_.get_depth() <= 3


def test_an_unbiased_mechanism_without_a_square_estimate_still_tunes():
    X, y = _regression(600)
    # MVU's outputs are unbiased but its transition is affine in the label: the scores are
    # the MSE up to a term no model changes, which is enough to choose between models.
    reg = LabelDPRegressor(
        DecisionTreeRegressor(random_state=0), mechanism="mvu", epsilon=4.0, bounds=(-3, 8),
        param_grid={"max_depth": [1, 6]}, random_state=0,
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        with pytest.warns(UserWarning, match="model selection stays unbiased"):
            reg.fit(X, y)
    assert reg.best_params_ is not None
    assert np.all(np.isfinite(reg.cv_results_["mean_test_score"]))


@pytest.mark.parametrize(
    "make",
    [
        # A value the base estimator refuses (set_params alone accepts it).
        lambda acc: LabelDPClassifier(LogisticRegression(), mechanism="rr", classes=[0, 1, 2],
                                      param_grid={"C": [-1.0]}, accountant=acc),
        # More folds than labels.
        lambda acc: LabelDPRegressor(DecisionTreeRegressor(), mechanism="discrete-laplace",
                                     bounds=(0, 10), param_grid={"max_depth": [1, 2]}, cv=10_000,
                                     accountant=acc),
    ],
    ids=["bad-value", "too-many-folds"],
)
def test_bad_param_grid_or_cv_is_refused_before_spending(make):
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(200, 3)), rng.integers(0, 3, size=200)
    acc = BudgetAccountant(epsilon=5.0)
    with pytest.raises(ValueError):
        make(acc).fit(X, y)
    assert len(acc.ledger) == 0
