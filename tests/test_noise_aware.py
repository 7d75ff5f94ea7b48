"""Noise-aware classification: backward correction, debiased targets and
gradients (LP-RR-SGD, the XGBoost objective), shrinkage, mechanism='auto'."""

import math
import pickle

import numpy as np
import pytest
from sklearn.base import BaseEstimator, ClassifierMixin
from sklearn.dummy import DummyClassifier
from sklearn.linear_model import LogisticRegression
from sklearn.utils.estimator_checks import parametrize_with_checks

from skdp_label import BudgetAccountant, LabelDPClassifier
from skdp_label.estimators import DebiasedSGDClassifier, DebiasedSoftmaxObjective
from skdp_label.estimators._cluster_prior import nearest_cluster
from skdp_label.estimators._debiased_sgd import debiased_gradient
from skdp_label.estimators._noise_aware import (
    backward_correct,
    classification_plan,
    debiased_targets,
    inverse_transition,
    project_simplex,
    softmax,
)
from skdp_label.mechanisms import RandomizedResponse
from skdp_label.mechanisms.classic._randomized_response import randomized_response_matrix
from skdp_label.mechanisms.classification._solver import rr_top_k_matrix

EPSILONS = [0.05, 0.5, 2.0, 8.0]


def _random_masks(rng, n, K):
    masks = rng.random((n, K)) < 0.6
    masks[np.arange(n), rng.integers(K, size=n)] = True  # at least one class per set
    return masks


def _linear_data(n=3000, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 2))
    return X, np.argmax(X @ [[1.0, -1.0, 0.0], [0.0, 1.0, -1.0]], axis=1)


def _skewed_data(n=3000, seed=0):
    """Weak features, one class holding 60% of the labels."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = rng.choice(4, size=n, p=[0.6, 0.2, 0.15, 0.05])
    X[:, 0] += 0.3 * y
    return X, y


# -- pure functions ---------------------------------------------------------------------
def test_project_simplex_satisfies_the_kkt_conditions():
    rng = np.random.default_rng(0)
    v = rng.normal(scale=3.0, size=(200, 6))
    x = project_simplex(v)
    assert np.allclose(x.sum(axis=1), 1.0) and np.all(x >= 0)
    # x = max(v - tau, 0): v - x is one constant tau on the support, v <= tau off it.
    for vi, xi in zip(v, x):
        tau = (vi - xi)[xi > 0]
        assert np.ptp(tau) < 1e-12 and np.all(vi[xi == 0] <= tau[0] + 1e-12)
    assert np.array_equal(np.argmax(x, axis=1), np.argmax(v, axis=1))
    inside = rng.dirichlet(np.ones(6), size=5)
    np.testing.assert_allclose(project_simplex(inside), inside, atol=1e-15)


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_backward_correction_recovers_true_probabilities(epsilon):
    """An exact model of P(y~|x) = T^T P(y|x) is mapped back to P(y|x): for
    randomized response (one T), and for per-row top-k sets (P on the set)."""
    rng = np.random.default_rng(1)
    K, n = 6, 50
    P = rng.dirichlet(np.ones(K), size=n)
    Q = P @ randomized_response_matrix(K, epsilon)
    np.testing.assert_allclose(backward_correct(Q, np.ones(K, bool), epsilon), P, atol=1e-8)
    masks = _random_masks(rng, n, K)
    P = np.where(masks, rng.dirichlet(np.ones(K), size=n), 0.0)
    P /= P.sum(axis=1, keepdims=True)
    Q = np.stack([p @ rr_top_k_matrix(m, epsilon) for p, m in zip(P, masks)])
    np.testing.assert_allclose(backward_correct(Q, masks, epsilon), P, atol=1e-8)
    # Not the identity: the noisy probabilities are flatter than the true ones.
    assert np.abs(Q - P).max() > 1e-3


@pytest.mark.parametrize("epsilon", EPSILONS)
def test_debiased_targets_are_unbiased(epsilon):
    """E[G[y~] | y] = e_y exactly for y in the top-k set, and G is the inverse
    of T on the set (004 eq. (17)); for RR it is eq. (7)'s weights."""
    K = 5
    for mask in [np.ones(K, bool), np.array([1, 0, 1, 1, 0], bool), np.eye(K, dtype=bool)[2]]:
        T = rr_top_k_matrix(mask, epsilon)
        outputs = np.flatnonzero(mask)
        G = debiased_targets(outputs, mask, epsilon, K)  # one row per possible output
        expectation = T[:, outputs] @ G
        np.testing.assert_allclose(expectation[mask], np.eye(K)[mask], atol=1e-9)
        np.testing.assert_allclose(G, inverse_transition(T)[outputs], atol=1e-9)
        np.testing.assert_allclose(G.sum(axis=1), 1.0)
    e = math.exp(epsilon)
    eq7 = (e + K - 1) / (e - 1) * (np.eye(K) - 1.0 / (e + K - 1))
    np.testing.assert_allclose(debiased_targets(np.arange(K), np.ones(K, bool), epsilon, K), eq7,
                               rtol=1e-9, atol=1e-9)


@pytest.mark.parametrize("epsilon", [0.1, 1.0, 4.0])
def test_lp_rr_sgd_gradient_is_unbiased(epsilon):
    """The exact expectation over the RR outputs of LP-RR-SGD's gradient is
    the clean-label gradient; the naive gradient on noisy labels is not."""
    rng = np.random.default_rng(2)
    K, d = 4, 3
    W, b, x = rng.normal(size=(d, K)), rng.normal(size=K), rng.normal(size=(1, d))
    T = randomized_response_matrix(K, epsilon)
    G = inverse_transition(T)
    e = math.exp(epsilon)
    for y in range(K):
        clean = debiased_gradient(W, b, x, np.eye(K)[[y]], alpha=0.1)
        expected = [
            sum(T[y, j] * debiased_gradient(W, b, x, G[[j]], alpha=0.1)[i] for j in range(K))
            for i in range(2)
        ]
        naive = sum(T[y, j] * debiased_gradient(W, b, x, np.eye(K)[[j]])[0] for j in range(K))
        np.testing.assert_allclose(expected[0], clean[0], atol=1e-12)
        np.testing.assert_allclose(expected[1], clean[1], atol=1e-12)
        assert np.abs(naive - debiased_gradient(W, b, x, np.eye(K)[[y]])[0]).max() > 1e-3
        # 004 eq. (7), written out for one noisy label j.
        g = [debiased_gradient(W, b, x, np.eye(K)[[k]])[0] for k in range(K)]
        j = (y + 1) % K
        eq7 = (e + K - 1) / (e - 1) * (g[j] - sum(g) / (e + K - 1))
        np.testing.assert_allclose(debiased_gradient(W, b, x, G[[j]])[0], eq7, atol=1e-9)


def test_xgboost_objective_expected_gradient_and_positive_hessian():
    rng = np.random.default_rng(3)
    K, n, epsilon = 3, 6, 0.7
    mask = np.array([True, True, True])
    T = rr_top_k_matrix(mask, epsilon)
    objective = DebiasedSoftmaxObjective(T)
    margins = rng.normal(scale=3.0, size=(n, K))
    p = softmax(margins)
    for y in range(K):
        expected = sum(T[y, j] * objective(np.full(n, j), margins)[0] for j in range(K))
        np.testing.assert_allclose(expected, p - np.eye(K)[y], atol=1e-12)
        hess = objective(np.full(n, y), margins)[1]
        assert np.all(hess > 0) and np.array_equal(hess, objective(np.zeros(n), margins)[1])
    saturated = np.array([[60.0, -60.0, 0.0]])
    assert objective(np.array([1]), saturated)[1].min() == pytest.approx(1e-6)


def test_xgboost_trains_on_noisy_labels_with_the_objective():
    xgboost = pytest.importorskip("xgboost")
    X, y = _linear_data(1500)
    rr = RandomizedResponse(epsilon=1.0, classes=[0, 1, 2], random_state=0)
    y_noisy = rr.fit_transform(y)
    model = xgboost.XGBClassifier(objective=DebiasedSoftmaxObjective(rr), n_estimators=30,
                                  max_depth=2, max_delta_step=1.0, n_jobs=1).fit(X, y_noisy)
    proba = model.predict_proba(X)
    assert np.allclose(proba.sum(axis=1), 1.0, atol=1e-5)
    assert np.mean(model.predict(X) == y) > 0.85


# -- LP-RR-SGD ----------------------------------------------------------------------------
def test_debiased_sgd_standalone_fit_and_partial_fit():
    X, y = _linear_data()
    classes = np.array(["a", "b", "c"])
    rr = RandomizedResponse(epsilon=1.0, classes=classes, random_state=0)
    y_noisy = rr.fit_transform(classes[y])
    clf = DebiasedSGDClassifier(rr, random_state=0).fit(X, y_noisy)
    assert list(clf.classes_) == ["a", "b", "c"] and clf.t_ > 0
    assert np.mean(clf.predict(X) == classes[y]) > 0.85
    stream = DebiasedSGDClassifier(rr.transition_matrix_, classes=classes, random_state=0)
    for _ in range(5):
        for chunk in np.array_split(np.arange(len(y)), 6):
            stream.partial_fit(X[chunk], y_noisy[chunk])
    assert np.mean(stream.predict(X) == classes[y]) > 0.85
    np.testing.assert_allclose(stream.predict_proba(X[:4]).sum(axis=1), 1.0)
    with pytest.raises(ValueError, match="rows summing to 1"):
        DebiasedSGDClassifier(np.ones((3, 3))).fit(X, y)


@parametrize_with_checks([DebiasedSGDClassifier(max_iter=5, random_state=0)])
def test_debiased_sgd_is_a_scikit_learn_classifier(estimator, check):
    check(estimator)


@pytest.mark.parametrize("params", [dict(mechanism="rr"), dict(mechanism="auto"),
                                    dict(n_stages=2)])
def test_debiased_sgd_as_base_of_label_dp_classifier(params):
    X, y = _linear_data()
    acc = BudgetAccountant(epsilon=2.0)
    clf = LabelDPClassifier(DebiasedSGDClassifier(random_state=0), epsilon=2.0, classes=[0, 1, 2],
                            accountant=acc, random_state=0, **params).fit(X, y)
    assert acc.spent_epsilon == pytest.approx(2.0)
    assert isinstance(clf.estimator_, DebiasedSGDClassifier)
    assert np.mean(clf.predict(X) == y) > 0.85


# -- LabelDPClassifier ----------------------------------------------------------------------
class _ExactNoisyModel(ClassifierMixin, BaseEstimator):
    """Ignores the labels; predict_proba is the exact P(y~|x) = T^T softmax(x W)."""

    def __init__(self, weights=None, transition=None):
        self.weights = weights
        self.transition = transition

    def fit(self, X, y):
        self.classes_ = np.arange(np.shape(self.weights)[1])
        self.n_features_in_ = np.shape(X)[1]
        return self

    def predict_proba(self, X):
        return softmax(np.asarray(X) @ self.weights) @ self.transition

    def predict(self, X):
        return np.argmax(self.predict_proba(X), axis=1)


@pytest.mark.parametrize("epsilon", [0.3, 1.0, 4.0])
def test_classifier_correction_recovers_true_probabilities(epsilon):
    X, y = _linear_data(300)
    W = np.array([[2.0, -1.0, 0.0], [0.0, 1.0, -2.0]])
    base = _ExactNoisyModel(W, randomized_response_matrix(3, epsilon))
    clf = LabelDPClassifier(base, "rr", epsilon, classes=[0, 1, 2], random_state=0).fit(X, y)
    np.testing.assert_allclose(clf.predict_proba(X), softmax(X @ W), atol=1e-8)
    np.testing.assert_array_equal(clf.predict(X), np.argmax(X @ W, axis=1))
    raw = LabelDPClassifier(base, "rr", epsilon, classes=[0, 1, 2], proba_correction=None,
                            random_state=0).fit(X, y)
    assert np.abs(raw.predict_proba(X) - softmax(X @ W)).max() > 0.01  # uncorrected differs


def test_classifier_correction_uses_each_rows_top_k_set():
    """Cluster priors and multi-stage training: each row is corrected with
    the set its own prior gives (the cluster's histogram, or the previous
    stage's model), as the last stage randomized."""
    X, y = _skewed_data(2000)
    # (epsilon 2 for the clusters: their noisy histograms are peaked enough at
    # epsilon 1 that every row's set is the top class alone.)
    for params in [dict(prior="clusters", n_clusters=5, prior_epsilon=0.1, epsilon=2.0),
                   dict(n_stages=2, epsilon=1.0)]:
        clf = LabelDPClassifier(LogisticRegression(), classes=range(4),
                                random_state=0, **params).fit(X, y)
        raw = clf._all_classes(clf.estimator_, clf.estimator_.predict_proba(X))
        mech = clf.mechanism_
        if clf.cluster_centers_ is not None:
            priors = clf.cluster_histograms_[nearest_cluster(X, clf.cluster_centers_)]
        else:
            priors = clf._proba(clf.prior_estimator_, X)
        ks = mech.choose_k(priors)
        order = np.argsort(-priors, axis=1, kind="stable")
        masks = np.zeros(priors.shape, bool)
        for i, k in enumerate(ks):
            masks[i, order[i, :k]] = True
        assert 1 < ks.mean() < 4  # the sets differ from all classes
        np.testing.assert_allclose(clf.predict_proba(X), backward_correct(raw, masks, mech.epsilon))
        assert np.all(clf.predict_proba(X)[~masks] == 0)


def test_shrinkage_mixes_in_the_class_prior():
    X, y = _skewed_data()
    full = LabelDPClassifier(LogisticRegression(), "rr", 1.0, classes=range(4), shrinkage=1.0,
                             random_state=0).fit(X, y)
    prior = full.class_prior_
    assert np.isclose(prior.sum(), 1.0) and np.all(prior >= 0)
    np.testing.assert_allclose(full.predict_proba(X[:5]), np.tile(prior, (5, 1)))
    auto = LabelDPClassifier(LogisticRegression(), "rr", 0.2, classes=range(4), shrinkage="auto",
                             random_state=0).fit(X, y)
    big = LabelDPClassifier(LogisticRegression(), "rr", 6.0, classes=range(4), shrinkage="auto",
                            random_state=0).fit(X, y)
    assert 0 < big.shrinkage_ < auto.shrinkage_ < 1  # more weight on the prior at small epsilon


def test_auto_plan_accounting_and_majority_fallback():
    X, y = _skewed_data()
    acc = BudgetAccountant(epsilon=0.05)
    clf = LabelDPClassifier(LogisticRegression(), "auto", 0.05, classes=range(4), accountant=acc,
                            random_state=0).fit(X, y)
    plan = classification_plan(0.05, len(y), 4)
    m = plan["histogram_rows"]
    assert clf.plan_["prior_epsilon"] == plan["prior_epsilon"] == pytest.approx(0.05)
    # k = 1: RR-Top-1 labels would carry nothing, so the rows left go to a second
    # histogram; both at the full epsilon on disjoint rows (one group: the fit costs 0.05).
    assert [(e.epsilon, e.n_labels) for e in acc.ledger] == [(0.05, m), (0.05, len(y) - m)]
    assert len({e.group for e in acc.ledger}) == 1 and acc.ledger[0].group is not None
    assert acc.spent_epsilon == pytest.approx(0.05) and clf.epsilon_spent_ == pytest.approx(0.05)
    report = clf.privacy_report()
    assert report.epsilon == pytest.approx(0.05)
    assert [row["n_labels"] for row in report.steps] == [m, len(y) - m]
    assert clf.stage_k_ == [1.0] and isinstance(clf.estimator_, DummyClassifier)
    assert np.all(clf.predict(X) == 0)
    pooled = clf.cluster_histograms_[0]
    np.testing.assert_allclose(clf.predict_proba(X[:2]), np.tile(pooled, (2, 1)))
    big = LabelDPClassifier(LogisticRegression(), "auto", 4.0, classes=range(4),
                            random_state=0).fit(X, y)
    assert big.plan_["mechanism"] == "RandomizedResponse" and big.prior_epsilon_ == 0.0
    blob = pickle.dumps(clf)
    assert y.astype(np.int64).tobytes()[:400] not in blob


def test_noise_options_fail_before_spending():
    X, y = _skewed_data(300)
    acc = BudgetAccountant()
    bad = [
        dict(mechanism="auto", n_stages=2),
        dict(mechanism="auto", prior="clusters"),
        dict(shrinkage="auto", proba_correction=None),
        dict(prior="class-frequencies", prior_epsilon=2.0),
    ]
    for params in bad:
        with pytest.raises(ValueError):
            LabelDPClassifier(LogisticRegression(), epsilon=1.0, classes=range(4), accountant=acc,
                              **params).fit(X, y)
    assert acc.ledger == []


class _TargetRecorder(DebiasedSGDClassifier):
    """Keeps the debiased targets LabelDPClassifier passes (test only)."""

    def fit(self, X, y, noise_targets=None):
        type(self).seen.append((np.asarray(y), np.asarray(noise_targets)))
        return super().fit(X, y, noise_targets=noise_targets)


def test_targets_use_the_set_each_label_was_randomized_on():
    """Every row's target is G_S[y~] for a set S holding y~ (reused rows of
    multi-stage training: the first set intersected with the reuse filter's)."""
    from skdp_label.estimators._noise_aware import debiasing_scale

    X, y = _skewed_data(1500)
    _TargetRecorder.seen = []
    clf = LabelDPClassifier(_TargetRecorder(max_iter=2), epsilon=1.5, n_stages=2, classes=range(4),
                            prior="clusters", n_clusters=4, prior_epsilon=0.3,
                            random_state=0).fit(X, y)
    assert len(_TargetRecorder.seen) == 2
    for codes, targets in _TargetRecorder.seen:
        k = np.count_nonzero(targets, axis=1)
        p, scale = debiasing_scale(k, 1.2)
        np.testing.assert_allclose(targets.sum(axis=1), 1.0)
        np.testing.assert_allclose(targets[np.arange(len(codes)), codes], (1 - p) / scale)
    n_reused = len(_TargetRecorder.seen[1][0]) - clf.stage_sizes_[1]
    assert n_reused > 0
    # Reused rows (first in the stage-2 training set) lie in the filter's top-k set.
    filter_k = round(clf.stage_k_[1])
    assert np.count_nonzero(_TargetRecorder.seen[1][1][:n_reused], axis=1).max() <= filter_k
