"""Scorers that never see true labels: unbiasedness and model selection on data."""

import math
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import GridSearchCV, KFold

from skdp_label.estimators import (
    debiased_accuracy,
    debiased_accuracy_scorer,
    unbiased_mse,
    unbiased_mse_scorer,
    unbiased_square_estimator,
)
from skdp_label.mechanisms import (
    MVU,
    RQM,
    DebiasedRR,
    DiscreteLaplace,
    ExponentialMechanism,
    Gaussian,
    Laplace,
    OptimalUnbiased,
    RandomizedResponse,
    RPWithPrior,
    RROnBins,
    RRTopK,
    RRWithPrior,
    RRWithPriorRegression,
    Staircase,
)
from skdp_label.mechanisms._base import BaseDiscreteMechanism


class _DebiasedBinaryRR(BaseDiscreteMechanism):
    """Binary RR on {0, 1}, outputs rescaled so that E[y~ | y] = y (a test double
    for the discrete, transition-matrix path)."""

    def __init__(self, epsilon=1.0, *, accountant=None, random_state=None):
        super().__init__(epsilon, accountant=accountant, random_state=random_state)

    def _fit_mechanism(self, y):
        p = math.exp(self.epsilon) / (1 + math.exp(self.epsilon))
        self.input_values_ = np.array([0.0, 1.0])
        # Outputs deliberately unsorted: columns follow output_values_.
        self.output_values_ = np.array([p, -(1 - p)]) / (2 * p - 1)
        self.transition_matrix_ = np.array([[1 - p, p], [p, 1 - p]])


@pytest.mark.parametrize(
    "mech",
    [
        Laplace(1.0, bounds=(0.0, 1.0), clip=False),
        DiscreteLaplace(1.0, bounds=(0, 5), clip=False),
        Staircase(1.0, bounds=(0.0, 1.0), clip=False),
        Gaussian(1.0, bounds=(0.0, 1.0), clip=False),
    ],
    ids=lambda m: type(m).__name__,
)
def test_square_estimator_is_unbiased_for_additive_noise(mech):
    y = np.full(300_000, 1.0)
    mech = clone(mech).set_params(random_state=0)
    y_noisy = mech.fit_transform(y)
    h = unbiased_square_estimator(mech)(y_noisy)
    # E[h] = y^2 = 1 within 5 standard errors
    assert abs(h.mean() - 1.0) < 5 * h.std() / math.sqrt(y.size)
    # and the naive noisy square is off by the whole noise variance
    assert (y_noisy**2).mean() - 1.0 > 20 * h.std() / math.sqrt(y.size)


def test_square_estimator_exact_for_a_discrete_unbiased_mechanism():
    mech = _DebiasedBinaryRR(0.7).fit([0.0, 1.0])
    h = unbiased_square_estimator(mech)
    values = h(mech.output_values_)
    np.testing.assert_allclose(mech.transition_matrix_ @ values, [0.0, 1.0], atol=1e-12)
    np.testing.assert_allclose(h(mech.output_values_[::-1]), values[::-1])
    with pytest.raises(ValueError, match="output values"):
        h(np.array([0.5]))


@pytest.mark.parametrize(
    "mech, match",
    [
        (Laplace(1.0, bounds=(0.0, 1.0)), "clips its outputs"),
        (RROnBins(0.5, prior=(np.arange(6.0), np.full(6, 1 / 6))), "biased .* rank 2 for 6"),
    ],
    ids=["clipped-laplace", "merging-bins"],
)
def test_mechanisms_without_an_unbiased_estimate_are_refused(mech, match):
    mech.fit([0.0])
    with pytest.raises(ValueError, match=match):
        unbiased_mse_scorer(mech)


def test_debiased_accuracy_is_exact_in_expectation():
    rr = RandomizedResponse(1.0, classes=[0, 1, 2, 3]).fit([0])
    inverse = np.linalg.inv(rr.transition_matrix_)
    # E[G[y~, f] | y] = 1{f = y} for every (y, f): the estimate's expectation is the accuracy.
    np.testing.assert_allclose(rr.transition_matrix_ @ inverse, np.eye(4), atol=1e-12)
    top_k = RRTopK(1.0, classes=[0, 1, 2, 3], k=2).fit([0])
    with pytest.raises(ValueError, match="accuracy .* rank 2 for 4 label values"):
        debiased_accuracy([0, 1], [0, 1], top_k)


def _per_fold_scores(estimator, X, y_noisy, y_true, score_noisy, score_true, folds):
    noisy, true = [], []
    for train, test in folds:
        model = clone(estimator).fit(X[train], y_noisy[train])
        pred = model.predict(X[test])
        noisy.append(score_noisy(y_noisy[test], pred))
        true.append(score_true(y_true[test], pred))
    return np.mean(noisy), np.mean(true)


def test_regression_model_selection_on_noisy_labels_matches_true_labels():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(5000, 5))
    y = np.clip(X @ [1.5, -1.0, 0.5, 0.0, 2.0] + 5.0 + rng.normal(size=5000), 0.0, 10.0)
    mech = Laplace(4.0, bounds=(0.0, 10.0), clip=False, random_state=1)
    y_noisy = mech.fit_transform(y)  # the single release
    folds = list(KFold(4, shuffle=True, random_state=0).split(X))
    alphas = [0.01, 3000.0, 20000.0, 1e6]
    estimates, truths = [], []
    for alpha in alphas:
        est, true = _per_fold_scores(
            Ridge(alpha=alpha), X, y_noisy, y,
            lambda yn, p: unbiased_mse(yn, p, mech), lambda yt, p: np.mean((yt - p) ** 2), folds,
        )
        estimates.append(est)
        truths.append(true)
    assert np.argmin(estimates) == np.argmin(truths) == 0
    assert np.argsort(estimates).tolist() == np.argsort(truths).tolist()
    np.testing.assert_allclose(estimates, truths, atol=0.6)  # the level, not only the ranking
    # GridSearchCV with the scorer picks the same alpha without touching y.
    search = GridSearchCV(Ridge(), {"alpha": alphas}, cv=KFold(4, shuffle=True, random_state=0),
                          scoring=unbiased_mse_scorer(mech)).fit(X, y_noisy)
    assert search.best_params_["alpha"] == alphas[int(np.argmin(truths))]
    np.testing.assert_allclose(-search.cv_results_["mean_test_score"], estimates, rtol=1e-9)


def test_classification_model_selection_on_noisy_labels_matches_true_labels():
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    rr = RandomizedResponse(2.0, classes=np.arange(10), random_state=0)
    y_noisy = rr.fit_transform(y)
    cv = KFold(3, shuffle=True, random_state=0)
    Cs = [1e-4, 0.03, 3.0]
    estimates, truths = [], []
    for C in Cs:
        est, true = _per_fold_scores(
            LogisticRegression(C=C, max_iter=300), X, y_noisy, y,
            lambda yn, p: debiased_accuracy(yn, p, rr), lambda yt, p: np.mean(yt == p), cv.split(X),
        )
        estimates.append(est)
        truths.append(true)
    assert np.argmax(estimates) == np.argmax(truths)
    np.testing.assert_allclose(estimates, truths, atol=0.08)
    search = GridSearchCV(LogisticRegression(max_iter=300), {"C": Cs}, cv=cv,
                          scoring=debiased_accuracy_scorer(rr)).fit(X, y_noisy)
    assert search.best_params_["C"] == Cs[int(np.argmax(truths))]


_SIX = (np.arange(6.0), np.full(6, 1 / 6))
_SKEWED = (np.arange(6.0), np.array([0.5, 0.2, 0.1, 0.1, 0.05, 0.05]))


@pytest.mark.parametrize(
    "mech",
    [
        ExponentialMechanism(1.0, bounds=(0, 5), resolution=1.0),
        ExponentialMechanism(2.0, bounds=(0, 3), resolution=0.25),
        RROnBins(8.0, prior=_SIX),  # every label keeps its own bin
        RRWithPriorRegression(8.0, prior=_SIX),  # every label in the top-k set
        OptimalUnbiased(1.0, prior=_SKEWED),
        DebiasedRR(1.0, bounds=(0, 5)),
        RPWithPrior(1.0, bounds=(0, 5), prior=_SIX, granularity=1.0),
        _DebiasedBinaryRR(0.7),
        DiscreteLaplace(2.0, bounds=(0, 4)),  # clipped integer noise has a transition matrix
    ],
    ids=lambda m: f"{type(m).__name__}-{m.epsilon}",
)
def test_mse_estimate_is_exact_in_expectation_over_the_transition(mech):
    mech = clone(mech).fit([0.0])
    inputs = np.asarray(mech.input_values_, dtype=np.float64)
    outputs = np.asarray(mech.output_values_, dtype=np.float64)
    for f in (-3.0, 0.0, 1.7, 12.0):
        # Estimate of each possible noisy label (one per column, duplicates included),
        # averaged by the transition: the true squared error of every label value.
        per_output = [unbiased_mse([o], [f], mech) for o in outputs]
        expected = mech.transition_matrix_ @ np.asarray(per_output)
        np.testing.assert_allclose(expected, (f - inputs) ** 2, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize(
    "mech, match",
    [
        (RROnBins(0.5, prior=_SIX), "rank 2 for 6"),
        (RRWithPriorRegression(0.3, prior=_SKEWED), "rank 1 for 6"),
        (RQM(1.0, bounds=(0.0, 5.0)), "squared label"),
    ],
    ids=["rr-on-bins-merged", "rr-with-prior-top-k", "rqm"],
)
def test_regression_refusals_name_the_reason(mech, match):
    mech.fit([0.0])
    with pytest.raises(ValueError, match=match):
        unbiased_mse([0.0], [0.0], mech)


@pytest.mark.parametrize(
    "mech",
    [
        RandomizedResponse(1.0, classes=["a", "b", "c", "d"]),
        RRWithPrior(0.5, classes=[0, 1, 2]),  # uniform prior: k = all classes
        RRTopK(1.0, classes=[0, 1, 2], k=3),
    ],
    ids=lambda m: type(m).__name__,
)
def test_debiased_accuracy_is_exact_for_every_invertible_classification_mechanism(mech):
    classes = list(mech.classes)
    mech = clone(mech).fit(classes[:1])
    outputs = list(mech.output_values_)
    for i, true in enumerate(mech.input_values_):
        for pred in classes:
            per_output = [debiased_accuracy([o], [pred], mech) for o in outputs]
            assert mech.transition_matrix_[i] @ per_output == pytest.approx(float(pred == true))


def test_skewed_prior_rr_with_prior_is_refused():
    mech = RRWithPrior(0.5, classes=[0, 1, 2, 3], prior=[0.7, 0.1, 0.1, 0.1]).fit([0])
    with pytest.raises(ValueError, match="rank 1 for 4"):
        debiased_accuracy_scorer(mech)


class _MasslessMixtures(OptimalUnbiased):
    """OptimalUnbiased whose labels of no prior mass get mixtures of their
    massive neighbours' rows: still E[y~ | y] = y (the rows mix linearly in y)
    and epsilon-DP (each entry lies between its column's extremes), and of
    rank 5 for 8 labels. The solver may give such labels any unbiased rows
    (they weigh nothing in its loss): with some versions of numpy/scipy it
    gave exactly these mixtures, with others (numpy 2.4, scipy 1.17) rows of
    full rank, so the case under test is built here."""

    def _fit_mechanism(self, y):
        super()._fit_mechanism(y)
        rows = np.array(self.transition_matrix_, dtype=np.float64)
        for label, (lo, hi) in {1: (0, 2), 3: (2, 5), 4: (2, 5)}.items():
            w = (label - lo) / (hi - lo)
            rows[label] = (1.0 - w) * rows[lo] + w * rows[hi]
        self.transition_matrix_ = rows


def _rank_deficient_unbiased():
    # A prior with labels of no mass (1, 3 and 4), their rows mixtures of their
    # neighbours': E[y~ | y] = y with a rank-deficient matrix.
    values = np.arange(8.0)
    mass = np.array([0.3, 0.0, 0.2, 0.0, 0.0, 0.3, 0.1, 0.1])
    return _MasslessMixtures(1.0, bounds=(0.0, 7.0), prior=(values, mass))


@pytest.mark.parametrize(
    "make",
    [lambda: MVU(1.0, bounds=(0.0, 1.0)), lambda: RQM(1.0, bounds=(0.0, 5.0)),
     _rank_deficient_unbiased],
    ids=["mvu-affine-in-the-label", "rqm", "optimal-unbiased-massless-labels"],
)
def test_rank_deficient_unbiased_mechanisms_score_up_to_a_model_free_shift(make):
    mech = make().fit([0.0])
    matrix = np.asarray(mech.transition_matrix_, dtype=np.float64)
    inputs = np.asarray(mech.input_values_, dtype=np.float64)
    outputs = np.asarray(mech.output_values_, dtype=np.float64)
    assert np.linalg.matrix_rank(matrix) < inputs.size  # the case under test
    with pytest.raises(ValueError, match="squared label"):
        unbiased_mse([outputs[0]], [0.0], mech)  # still no unbiased MSE itself
    with pytest.warns(UserWarning, match=f"rank {np.linalg.matrix_rank(matrix)} for"):
        scorer = unbiased_mse_scorer(mech)

    class Constant:
        def __init__(self, value):
            self.value = value

        def predict(self, X):
            return np.full(len(X), self.value)

    X = np.zeros((1, 1))

    def expected_score(f):
        # The score of each possible noisy label, averaged by the transition: per label value.
        return matrix @ np.array([scorer(Constant(f), X, [o]) for o in outputs])

    base = expected_score(0.0)
    shift = -base - inputs**2  # E[score] = -(true squared error) - s(y)
    assert np.ptp(shift) > 1e-3  # a real shift: the absolute scores are not the MSE
    for f in (-2.0, 0.9, 3.3):
        # Differences between models are the true differences, label by label.
        np.testing.assert_allclose(
            expected_score(f) - base, inputs**2 - (f - inputs) ** 2, rtol=1e-7, atol=1e-7
        )


def test_the_shifted_scorer_needs_an_exactly_unbiased_label_estimate():
    # Mutation: outputs moved off E[y~ | y] = y by 1 % and a matrix of rank 1 (no g solves
    # T g = y): the model-free shift argument fails, so the scorer refuses.
    mech = _rank_deficient_unbiased().fit([0.0])
    mech.output_values_ = np.asarray(mech.output_values_) * 1.01
    mech.transition_matrix_ = np.tile(mech.transition_matrix_[:1], (8, 1))
    with pytest.raises(ValueError, match="biased"):
        unbiased_mse_scorer(mech)


def test_an_exact_square_estimate_scores_without_a_warning():
    mech = _DebiasedBinaryRR(0.7).fit([0.0, 1.0])
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        scorer = unbiased_mse_scorer(mech)
    assert scorer.metric is unbiased_mse
