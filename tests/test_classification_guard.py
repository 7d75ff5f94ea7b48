"""The rule of LabelDPClassifier(mechanism='auto') and its majority guard
(docs/classification.md, sections 4 and 5)."""

import math
import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.linear_model import LogisticRegression
from sklearn.tree import DecisionTreeClassifier

from _audit import assert_no_random_state
from skdp_label import BudgetAccountant, LabelDPClassifier
from skdp_label.estimators import _classifier
from skdp_label.estimators._majority_guard import (
    constant_in,
    cross_fitted_accuracies,
    debiased_hits,
    guard_folds,
    pooled_class_prior,
    prefers_constant,
)
from skdp_label.estimators._noise_aware import (
    classification_plan,
    histogram_noise_sd,
    histogram_rows,
    histogram_share,
    labels_frequency_se,
    sampled_histogram_sd,
    robust_top_k,
    shrink_histogram,
)
from skdp_label.mechanisms._prior import noisy_histogram
from skdp_label.mechanisms.classification._solver import optimal_k, rr_top_k_matrix
from skdp_label.utils import PrivacyLeakWarning

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.utils.PrivacyLeakWarning")


def _noise_features(n=3000, seed=0):
    """Features independent of a skewed label (60 % in class 0)."""
    rng = np.random.default_rng(seed)
    return rng.normal(size=(n, 4)), rng.choice(3, size=n, p=[0.6, 0.25, 0.15])


def _separable(n=2000, seed=0):
    """Three well separated Gaussian classes."""
    rng = np.random.default_rng(seed)
    y = rng.integers(0, 3, size=n)
    return rng.normal(size=(n, 2)) + 4.0 * np.eye(3)[y][:, :2] - 2.0 * (y == 2)[:, None], y


# -- the estimate ---------------------------------------------------------------------------
@pytest.mark.parametrize("epsilon", [0.1, 1.0, 5.0])
def test_debiased_hits_are_unbiased_exactly(epsilon):
    """E over the noisy label (exact sum over the transition) of the estimate is
    1{f = y} for a true label in the row's set S, and 1/k for one outside it,
    for every prediction f in S; a prediction outside S scores 0."""
    n_classes = 5
    for in_top in ([True] * 5, [True, False, True, True, False], [False, True, False, False, True]):
        in_top = np.array(in_top)
        k = int(in_top.sum())
        matrix = rr_top_k_matrix(in_top, epsilon)
        for y in range(n_classes):
            for f in range(n_classes):
                outputs = np.arange(n_classes)
                masks = np.tile(in_top, (n_classes, 1))
                hits = debiased_hits(outputs, np.full(n_classes, f), masks, epsilon)
                expected = float(matrix[y] @ hits)
                if not in_top[f]:
                    assert expected == 0.0
                elif in_top[y]:
                    assert expected == pytest.approx(float(f == y), abs=1e-12)
                else:
                    assert expected == pytest.approx(1.0 / k, abs=1e-12)
    # The naive noisy accuracy is biased: the estimate above is not that.
    matrix = rr_top_k_matrix(np.ones(n_classes, bool), epsilon)
    assert matrix[0, 0] < 1.0


def test_cross_fitted_estimates_track_true_accuracy():
    """Averaged over independent RR draws, the held-out estimates of a fixed
    predictor and of a constant match their true accuracies."""
    rng = np.random.default_rng(1)
    n, n_classes, epsilon = 4000, 3, 1.0
    y = rng.choice(n_classes, size=n, p=[0.5, 0.3, 0.2])
    prediction = np.where(rng.random(n) < 0.7, y, (y + 1) % n_classes)  # 70 % right
    matrix = rr_top_k_matrix(np.ones(n_classes, bool), epsilon)
    masks = np.ones((n, n_classes), bool)
    folds = np.array_split(np.arange(n), 3)
    model, constant = [], []
    for _ in range(40):
        noisy = (rng.random(n)[:, None] > np.cumsum(matrix[y], axis=1)).sum(axis=1)
        m, c, se = cross_fitted_accuracies(
            lambda train, test: prediction[test], lambda train: 0, noisy, masks, epsilon, folds)
        model.append(m)
        constant.append(c)
        assert se > 0
    # Each run's estimate has a standard error of about 0.02; 40 runs: 0.003.
    assert np.mean(model) == pytest.approx(np.mean(prediction == y), abs=0.02)
    assert np.mean(constant) == pytest.approx(np.mean(y == 0), abs=0.02)


def test_cross_fitted_estimates_follow_sample_weight():
    """Weights restrict the accuracies to what the weighted model is fitted
    for: zero weights drop rows exactly, integer weights equal repeating rows,
    and equal weights give the unweighted estimates."""
    rng = np.random.default_rng(2)
    n, n_classes, epsilon = 600, 3, 1.0
    y = rng.choice(n_classes, size=n)
    prediction = np.where(rng.random(n) < 0.5, y, (y + 1) % n_classes)
    masks = np.ones((n, n_classes), bool)
    noisy = rng.integers(0, n_classes, size=n)
    folds = np.array_split(np.arange(n), 3)

    def estimate(rows, weight=None):
        kept = [np.nonzero(np.isin(rows, f))[0] for f in folds]  # each row stays in its fold
        pred = prediction[rows]
        return cross_fitted_accuracies(lambda train, test: pred[test], lambda train: 0,
                                       noisy[rows], masks[rows], epsilon, kept, weight)

    everything = np.arange(n)
    unweighted = estimate(everything)
    assert estimate(everything, np.full(n, 2.5)) == pytest.approx(unweighted)
    weight = (everything % 4 != 0).astype(float)  # a quarter of the rows weigh nothing
    dropped = estimate(everything, weight)
    assert dropped[:2] == pytest.approx(estimate(everything[weight > 0])[:2])
    assert dropped[:2] != pytest.approx(unweighted[:2])
    repeats = everything % 3 + 1  # weight 1, 2, 3 = the row once, twice, three times
    repeated = estimate(np.repeat(everything, repeats))
    assert estimate(everything, repeats.astype(float))[:2] == pytest.approx(repeated[:2])


# -- the guard in LabelDPClassifier ----------------------------------------------------------
def test_failed_guard_keeps_the_release():
    """The guard runs after the charge: a fold fit that fails (6 neighbours
    on 5 rows) warns, keeps the model and the one charge, and the fit
    completes (a review found the fit raising with the budget spent)."""
    from sklearn.neighbors import KNeighborsClassifier

    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(8, 2)), np.array([0, 1] * 4)
    acc = BudgetAccountant(epsilon=5.0)
    # A fixed seed: with about 1.5 % of noise draws all six randomized labels are one
    # class, every fold model is then a constant and nothing fails (no warning).
    clf = LabelDPClassifier(KNeighborsClassifier(n_neighbors=6), "auto", 1.0, classes=[0, 1],
                            accountant=acc, random_state=0)
    with pytest.warns(UserWarning, match=r"majority guard failed \(ValueError\)"):
        clf.fit(X, y)
    assert clf.majority_guard_["choice"] == "model"
    assert clf.epsilon_spent_ == pytest.approx(1.0) == acc.spent_epsilon
    assert clf.predict(X).shape == (8,)


def test_pure_noise_features_give_the_constant_class():
    X, y = _noise_features()
    X_test, y_test = _noise_features(seed=1)
    clf = LabelDPClassifier(DecisionTreeClassifier(random_state=0), "rr", 1.0, classes=range(3),
                            majority_guard=True, random_state=0).fit(X, y)
    guard = clf.majority_guard_
    assert guard["choice"] == "constant"
    assert guard["constant_accuracy"] - guard["model_accuracy"] > guard["difference_se"]
    assert np.all(clf.predict(X_test) == 0)
    np.testing.assert_allclose(clf.predict_proba(X_test[:3]), np.tile(clf.class_prior_, (3, 1)))
    majority = np.mean(y_test == 0)
    assert np.mean(clf.predict(X_test) == y_test) >= majority
    # Without the guard the same noisy labels give a worse-than-constant tree.
    off = LabelDPClassifier(DecisionTreeClassifier(random_state=0), "rr", 1.0, classes=range(3),
                            majority_guard=False, random_state=0).fit(X, y)
    assert off.majority_guard_ is None
    assert np.mean(off.predict(X_test) == y_test) < majority - 0.1


def test_strong_signal_keeps_the_model():
    X, y = _separable()
    X_test, y_test = _separable(seed=1)
    for mechanism in ["auto", "rr"]:
        clf = LabelDPClassifier(LogisticRegression(), mechanism, 2.0, classes=range(3),
                                majority_guard=True, random_state=0).fit(X, y)
        assert clf.majority_guard_["choice"] == "model"
        assert clf.majority_guard_["model_accuracy"] > clf.majority_guard_["constant_accuracy"]
        assert np.mean(clf.predict(X_test) == y_test) > 0.9


def test_guard_defaults_on_for_auto_only():
    X, y = _separable(600)
    auto = LabelDPClassifier(LogisticRegression(), "auto", 1.0, classes=range(3), random_state=0)
    assert auto.fit(X, y).majority_guard_ is not None
    rr = LabelDPClassifier(LogisticRegression(), "rr", 1.0, classes=range(3), random_state=0)
    assert rr.fit(X, y).majority_guard_ is None


def test_guard_charges_nothing_more_and_keeps_nothing_private():
    X, y = _noise_features(1500)
    ledgers = []
    for guard in (False, True):
        acc = BudgetAccountant(epsilon=10.0)
        clf = LabelDPClassifier(DecisionTreeClassifier(random_state=0), "auto", 1.5,
                                classes=range(3), majority_guard=guard, accountant=acc,
                                random_state=3).fit(X, y)
        ledgers.append([(e.epsilon, e.delta) for e in acc.ledger])
        assert acc.spent_epsilon == pytest.approx(1.5) and clf.epsilon_spent_ == pytest.approx(1.5)
    assert ledgers[0] == ledgers[1]
    # The fitted guard holds only its summary, no fold predictions, no generator.
    assert set(clf.majority_guard_) == {
        "model_accuracy", "constant_accuracy", "difference_se", "n_folds", "choice"}
    clf = LabelDPClassifier(DecisionTreeClassifier(random_state=0), "auto", 1.5, classes=range(3),
                            accountant=BudgetAccountant()).fit(X, y)  # OS entropy
    assert clf.majority_guard_ is not None
    assert_no_random_state(clf)
    blob = pickle.dumps(clf)
    for dtype in (np.int64, np.int32, np.float64):
        assert y.astype(dtype).tobytes()[:240] not in blob


def test_folds_come_from_the_features_not_the_noise_seed(monkeypatch):
    X, y = _noise_features(900)
    seen = []

    def recording(X_, n_samples, *args):
        folds = guard_folds(X_, n_samples, *args)
        seen.append([f.copy() for f in folds])
        return folds

    monkeypatch.setattr(_classifier, "guard_folds", recording)
    for random_state in (0, 1, None):
        LabelDPClassifier(LogisticRegression(), "rr", 1.0, classes=range(3), majority_guard=True,
                          random_state=random_state).fit(X, y)
    assert len(seen) == 3
    for other in seen[1:]:
        for a, b in zip(seen[0], other):
            np.testing.assert_array_equal(a, b)
    folds = seen[0]
    assert sorted(np.concatenate(folds).tolist()) == list(range(900))  # a partition
    assert not np.array_equal(np.concatenate(folds), np.arange(900))  # shuffled
    other_X = [f.tolist() for f in guard_folds(X + 1.0, 900)]
    assert other_X != [f.tolist() for f in folds]  # a function of the features


def test_guard_decides_on_evidence_only():
    assert prefers_constant(0.3, 0.5, 0.1)
    assert not prefers_constant(0.3, 0.35, 0.1)  # within one standard error: keep the model
    assert not prefers_constant(0.5, 0.3, 0.1)


@pytest.mark.parametrize("params", [
    dict(mechanism="rr", majority_guard=True, n_stages=2),
    dict(mechanism="rr-with-prior", majority_guard=True, prior="clusters", n_clusters=3),
    dict(mechanism="auto", majority_guard="yes"),
    dict(mechanism="laplace", majority_guard=True),
])
def test_bad_guard_parameters_are_refused_before_spending(params):
    X, y = _separable(300)
    acc = BudgetAccountant()
    with pytest.raises(ValueError):
        LabelDPClassifier(LogisticRegression(), epsilon=1.0, classes=range(3), accountant=acc,
                          **params).fit(X, y)
    assert acc.ledger == []


# -- the rule ---------------------------------------------------------------------------------
def test_plan_uses_public_inputs_and_is_plain_rr_at_large_epsilon():
    assert classification_plan(np.log(3 * 5 + 1), 1000, 5)["mechanism"] == "rr"
    assert classification_plan(np.log(3 * 5 + 1) - 1e-9, 1000, 5)["mechanism"] == "rr-top-k"
    assert classification_plan(0.1, 1, 5)["mechanism"] == "rr"  # one row: nothing to split
    one = LabelDPClassifier(LogisticRegression(), "auto", 0.1, classes=range(3), random_state=0)
    assert one.fit(np.zeros((1, 2)), [2]).epsilon_spent_ == pytest.approx(0.1)
    X, y = _noise_features(800)
    est = LabelDPClassifier(LogisticRegression(), "auto", 1.5, classes=range(3), random_state=0)
    plan = est.fit_plan(800)
    assert est.prior_budget(800) == (1.5, 1.5)  # disjoint rows, each at the full epsilon
    assert plan["histogram_rows"] == histogram_rows(1.5, 800, 3)
    for labels in (y, np.zeros_like(y)):  # the row split does not look at the labels
        acc = BudgetAccountant()
        clf = clone(est).set_params(accountant=acc).fit(X, labels)
        assert clf.histogram_sizes_[0] == plan["histogram_rows"] == acc.ledger[0].n_labels
        assert clf.epsilon_spent_ == pytest.approx(1.5) == acc.spent_epsilon
    assert clf.plan_["k"] == 1 and clf.histogram_sizes_ == [plan["histogram_rows"],
                                                           800 - plan["histogram_rows"]]
    # No label was randomized: the report names no mechanism and no noise level of one.
    report = clf.privacy_report()
    assert report.mechanism == "class histogram: constant model" and report.noise == {}
    assert [row["n_labels"] for row in report.steps] == clf.histogram_sizes_
    assert report.epsilon == pytest.approx(1.5)


def test_balanced_histogram_gives_plain_rr_and_skew_gives_smaller_sets():
    for n_classes in (2, 5, 10):
        for epsilon in (0.01, 0.3, 2.0):
            assert robust_top_k(np.full(n_classes, 1.0 / n_classes), epsilon, 0.05) == n_classes
    # Noisy histograms of balanced classes: nearly always k = K (Lemma 1 on the raw
    # histogram drops classes for nothing most of the time).
    rng = np.random.default_rng(0)
    codes = np.repeat(np.arange(10), 144)
    sd = histogram_noise_sd(0.083, codes.size)
    ks = [robust_top_k(noisy_histogram(codes, 10, 0.083, rng), 0.5, sd) for _ in range(100)]
    raw = [int(optimal_k(noisy_histogram(codes, 10, 0.083, rng)[None], 0.5)[0]) for _ in range(100)]
    assert np.mean(np.array(ks) == 10) > 0.6 > np.mean(np.array(raw) == 10)
    # A histogram far above its noise is kept: the majority class alone at small epsilon.
    skewed = np.array([0.7, 0.1, 0.1, 0.1])
    np.testing.assert_allclose(shrink_histogram(skewed, 0.01), skewed, atol=1e-3)
    assert robust_top_k(skewed, 0.05, 0.01) == 1


def test_rule_is_monotone_in_epsilon_and_skew():
    rng = np.random.default_rng(2)
    for _ in range(20):
        histogram = rng.dirichlet(np.full(6, 0.7))
        ks = [robust_top_k(histogram, eps, 0.02) for eps in np.geomspace(0.01, 5, 25)]
        assert np.all(np.diff(ks) >= 0)  # more budget for the labels, larger sets
    # Shrinkage toward uniform keeps the order of the classes.
    histogram = rng.dirichlet(np.ones(6))
    assert np.array_equal(np.argsort(shrink_histogram(histogram, 0.05)), np.argsort(histogram))
    # Noisier histograms are trusted less: k never shrinks as the noise grows.
    skewed = np.array([0.5, 0.2, 0.1, 0.1, 0.1])
    ks = [robust_top_k(skewed, 0.3, sd) for sd in (0.0, 0.05, 0.2, 1.0)]
    assert np.all(np.diff(ks) >= 0) and ks[-1] == 5


def test_auto_uses_the_chosen_set_for_noise_and_correction():
    X, y = _noise_features(2000)
    clf = LabelDPClassifier(LogisticRegression(), "auto", 1.5, classes=range(3),
                            random_state=0).fit(X, y)
    m = clf.plan_["histogram_rows"]
    assert clf.plan_["mechanism"] == "RRTopK" and clf.plan_["k"] == clf.mechanism_.k >= 2
    assert clf.stage_k_ == [float(clf.plan_["k"])]
    # The histogram's rows have no noisy label and no part in training.
    assert clf.stage_sizes_ == [2000 - m] == clf.stage_train_sizes_
    expected = robust_top_k(clf.cluster_histograms_[0], 1.5, sampled_histogram_sd(1.5, m, 3))
    assert clf.plan_["k"] == expected
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        top = np.argsort(-clf.cluster_histograms_[0])[:expected]
        assert np.all(np.isin(clf.predict(X[:50]), top))


# -- the row split of 'auto' (step 1) ----------------------------------------------------------
def _signal(epsilon, n_classes):
    return (np.exp(epsilon) - 1.0) / (np.exp(epsilon) + n_classes - 1.0)


def test_sampled_histogram_sd_adds_the_subsets_sampling_error():
    """A histogram of m random rows estimates all rows' frequencies with the
    Laplace noise and the subset's own sampling error (both measured here)."""
    rng = np.random.default_rng(7)
    y = np.arange(1500) % 10  # balanced, as the formula assumes
    m, eps = 30, 2.0
    draws = [noisy_histogram(y[rng.permutation(1500)[:m]], 10, eps, rng)[0] for _ in range(3000)]
    assert np.std(draws) == pytest.approx(sampled_histogram_sd(eps, m, 10), rel=0.15)
    assert sampled_histogram_sd(eps, m, 10) > 1.3 * histogram_noise_sd(eps, m)


def test_histogram_share_follows_its_formula_and_limits():
    for n, n_classes in [(300, 2), (1437, 10), (5092, 5), (755, 7), (10**6, 50)]:
        grid = np.geomspace(1e-4, np.log(3 * n_classes + 1), 60)
        shares = np.array([histogram_share(e, n, n_classes) for e in grid])
        odds = np.sqrt(n_classes - 1) / (n_classes * _signal(grid, n_classes) * np.sqrt(n))
        np.testing.assert_allclose(shares / (1 - shares), odds, rtol=1e-9)
        assert np.all(np.diff(shares) < 0)  # more epsilon, more signal in the labels: fewer rows
        assert shares[0] > 0.9  # labels that are nearly pure noise: nearly all rows
        assert shares[-1] < 0.4 / np.sqrt(n_classes)  # labels with signal: a small share
        rows = [histogram_rows(e, n, n_classes) for e in grid]
        assert all(1 <= r <= n - 1 for r in rows) and rows == sorted(rows, reverse=True)
    # The odds are the standard error of a class frequency debiased from the labels.
    rng = np.random.default_rng(4)
    n, n_classes, epsilon = 2000, 5, 0.7
    p = np.exp(-epsilon) / (1 + (n_classes - 1) * np.exp(-epsilon))
    estimates = []
    for _ in range(400):
        y = rng.integers(0, n_classes, size=n)
        keep = rng.random(n) < 1 - n_classes * p
        noisy = np.where(keep, y, rng.integers(0, n_classes, size=n))  # RR: keep, else uniform
        estimates.append((np.mean(noisy == 0) - p) / (1 - n_classes * p))
    assert np.std(estimates) == pytest.approx(labels_frequency_se(epsilon, n, n_classes), rel=0.15)


def test_row_split_beats_the_budget_split_wherever_a_histogram_is_used():
    """The same histogram precision (eps * rows) costs the labels less as rows of
    its own than as a share of epsilon: (1 - w) s(eps)^2 >= s((1 - w) eps)^2 for
    every e^eps < 3K + 1, i.e. s(a)^2 / a increases there (docs, section 4)."""
    for n_classes in range(2, 60):
        eps = np.linspace(1e-3, np.log(3 * n_classes + 1), 40)[:, None]
        w = np.linspace(0.01, 0.99, 30)[None, :]
        rows = (1 - w) * _signal(eps, n_classes) ** 2
        budget = _signal((1 - w) * eps, n_classes) ** 2
        assert np.all(rows >= budget * (1 - 1e-12))


def test_rows_are_used_once_and_charged_once():
    """Every label goes to exactly one release (histogram or randomized labels),
    each at the full epsilon, in one disjoint group."""
    X, y = _noise_features(1200)
    seen = []
    real = _classifier.cluster_priors

    def recording(cluster_of, n_clusters, codes, *args):
        seen.append(np.bincount(codes, minlength=3))
        return real(cluster_of, n_clusters, codes, *args)

    import skdp_label.mechanisms.classification._rr_top_k as rr_top_k

    real_randomize = rr_top_k._BaseTopKMechanism.randomize

    def randomize(self, labels, priors):
        seen.append(np.bincount(np.asarray(labels), minlength=3))
        return real_randomize(self, labels, priors)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(_classifier, "cluster_priors", recording)
        mp.setattr(rr_top_k._BaseTopKMechanism, "randomize", randomize)
        for eps in (0.05, 1.5):  # k = 1 (two histograms) and k = 2 (histogram + labels)
            seen.clear()
            acc = BudgetAccountant()
            clf = LabelDPClassifier(LogisticRegression(), "auto", eps, classes=range(3),
                                    accountant=acc, random_state=1).fit(X, y)
            assert len(seen) == 2
            np.testing.assert_array_equal(seen[0] + seen[1], np.bincount(y))  # a partition
            assert [e.epsilon for e in acc.ledger] == pytest.approx([eps, eps])
            assert len({e.group for e in acc.ledger}) == 1
            assert acc.spent_epsilon == pytest.approx(eps) == clf.epsilon_spent_
            assert clf.privacy_report().epsilon == pytest.approx(eps)
        assert clf.plan_["k"] >= 2


def test_drops_classes_on_evidence_only():
    """Balanced classes, few histogram rows: the rule keeps all K classes far more
    often than Lemma 1 on the posterior mean alone (the mutant without the one
    standard deviation), which drops a class the model can then never predict."""
    rng = np.random.default_rng(5)
    kept, mutant = [], []
    for rows, eps in [(74, 1.0), (165, 0.5), (29, 2.0)]:  # digits' histogram rows
        codes, sd = np.arange(rows) % 10, histogram_noise_sd(eps, rows)
        for _ in range(300):
            histogram = noisy_histogram(codes, 10, eps, rng)
            kept.append(robust_top_k(histogram, eps, sd) == 10)
            mutant.append(optimal_k(shrink_histogram(histogram, sd)[None], eps)[0] == 10)
    # 900 draws each: standard errors about 0.01 (measured 0.95 and 0.89).
    assert np.mean(kept) > 0.92 > np.mean(mutant)


def test_named_class_prior_stays_a_budget_split():
    """Outside 'auto' the class histogram covers all rows at a share of epsilon and
    composes sequentially with the labels (a mutation putting it in the labels'
    disjoint group would charge max instead of the sum)."""
    X, y = _noise_features(900)
    acc = BudgetAccountant()
    clf = LabelDPClassifier(LogisticRegression(), "rr-with-prior", 1.0, classes=range(3),
                            prior="class-frequencies", prior_epsilon=0.3, n_stages=2,
                            accountant=acc, random_state=0).fit(X, y)
    assert clf.histogram_sizes_ == [900] and clf.prior_budget(900) == (0.3, pytest.approx(0.7))
    assert acc.ledger[0].group is None and acc.ledger[0].epsilon == pytest.approx(0.3)
    assert acc.spent_epsilon == pytest.approx(1.0) == clf.epsilon_spent_
    assert clf.privacy_report().epsilon == pytest.approx(1.0)


# -- the constant: the histogram pooled with the noisy labels ------------------------------
def _rr_top_k_labels(y, top, epsilon, rng):
    """RR-Top-k on the set ``top``: a label in it kept with probability
    e^eps / (e^eps + k - 1), else a uniform other member; one outside it uniform on it."""
    members = np.flatnonzero(top)
    k = members.shape[0]
    keep = rng.random(y.shape[0]) < math.exp(epsilon) / (math.exp(epsilon) + k - 1)
    inside = top[y]
    position = np.searchsorted(members, y)
    other = (position + rng.integers(1, k, size=y.shape[0])) % k  # a uniform other member
    out = np.where(keep, position, other)
    return members[np.where(inside, out, rng.integers(0, k, size=y.shape[0]))]


def test_pooled_class_prior_is_the_inverse_variance_mean():
    """Exact on a small case: on S the histogram and the labels' debiased
    frequencies (less the histogram's mass outside S over k) by inverse
    variance, outside S the histogram; then projected onto the simplex."""
    from skdp_label.estimators._noise_aware import debiased_targets, project_simplex

    histogram = np.array([0.45, 0.35, 0.15, 0.05])
    top = np.array([True, True, False, False])
    noisy = np.array([0, 0, 1, 0, 1, 0, 0, 1])
    masks = np.tile(top, (8, 1))
    labels = debiased_targets(noisy, masks, 0.7, 4).mean(axis=0) - 0.2 / 2
    var_l, var_h = labels_frequency_se(0.7, 8, 2) ** 2, 0.03 ** 2
    expected = histogram.copy()
    expected[:2] = (histogram[:2] * var_l + labels[:2] * var_h) / (var_l + var_h)
    got = pooled_class_prior(histogram, 0.03, noisy, masks, 0.7)
    np.testing.assert_allclose(got, project_simplex(expected)[0])
    assert got.sum() == pytest.approx(1.0)
    # k = 1, rows on different sets or no rows: the histogram, unchanged.
    for in_top in (np.tile([True, False, False, False], (8, 1)),
                   np.vstack([masks[:4], np.ones((4, 4), dtype=bool)]), masks[:0]):
        rows = in_top.shape[0]
        np.testing.assert_array_equal(
            pooled_class_prior(histogram, 0.03, noisy[:rows], in_top, 0.7), histogram)
    # The constant is the prior's top class within S, even where a class outside S is higher.
    assert constant_in(np.array([0.1, 0.2, 0.6, 0.1]), top) == 1


@pytest.mark.parametrize("top", [[True] * 4, [True, True, True, False]])
def test_pooled_class_prior_is_unbiased_and_beats_both_sources(top):
    """Statistical (400 draws; thresholds are several standard errors wide): with
    a histogram of the stated noise and RR-Top-k labels on S, the pooled
    frequencies on S are unbiased (the mass outside S removed) and vary less
    than either source alone."""
    from skdp_label.estimators._noise_aware import debiased_targets

    rng = np.random.default_rng(4)
    top = np.array(top)
    pi = np.array([0.4, 0.3, 0.2, 0.1])
    n, eps, sd = 1500, 0.8, 0.04
    y = rng.choice(4, size=n, p=pi)
    freq = np.bincount(y, minlength=4) / n  # the rows' own frequencies: what both estimate
    masks = np.tile(top, (n, 1))
    pooled, labels_only, histogram_only = [], [], []
    for _ in range(400):
        histogram = freq + rng.normal(scale=sd, size=4)
        noisy = _rr_top_k_labels(y, top, eps, rng)
        pooled.append(pooled_class_prior(histogram, sd, noisy, masks, eps))
        labels_only.append(debiased_targets(noisy, masks, eps, 4).mean(axis=0)
                           - histogram[~top].sum() / top.sum())
        histogram_only.append(histogram)
    pooled, labels_only, histogram_only = map(np.array, (pooled, labels_only, histogram_only))
    centred = pooled - pooled.mean(axis=1, keepdims=True)  # the projection's common shift
    target = freq - freq.mean()
    np.testing.assert_allclose(centred.mean(axis=0)[top], target[top], atol=0.01)
    assert np.all(pooled[:, top].std(axis=0) < 0.9 * labels_only[:, top].std(axis=0))
    assert np.all(pooled[:, top].std(axis=0) < 0.9 * histogram_only[:, top].std(axis=0))


def test_guard_constant_comes_from_charged_releases_only(monkeypatch):
    """The constant of 'auto' is the pooled prior of the histogram and the
    randomized rows' noisy labels: the true labels enter only through those
    releases (a spy sees what the pooling reads), nothing more is charged,
    and the fitted object keeps only the pooled noisy frequencies."""
    X, y = _noise_features(1500)
    seen = []
    original = _classifier.pooled_class_prior

    def spy(histogram, sd, noisy, in_top, eps):
        seen.append((np.array(histogram), float(sd), np.array(noisy), float(eps)))
        return original(histogram, sd, noisy, in_top, eps)

    monkeypatch.setattr(_classifier, "pooled_class_prior", spy)
    acc = BudgetAccountant(epsilon=10.0)
    clf = LabelDPClassifier(DecisionTreeClassifier(random_state=0), "auto", 0.5, classes=range(3),
                            accountant=acc, random_state=3).fit(X, y)
    assert clf.plan_["histogram_rows"] > 0 and clf.plan_["k"] >= 2
    assert acc.spent_epsilon == pytest.approx(0.5) and len(acc.ledger) == 2
    # 3 fold constants and the final one, all from the same histogram and public sd.
    assert len(seen) == 4
    m = clf.histogram_sizes_[0]
    for histogram, sd, noisy, eps in seen:
        np.testing.assert_array_equal(histogram, clf.cluster_histograms_[0])
        assert sd == pytest.approx(sampled_histogram_sd(0.5, m, 3)) and eps == 0.5
        assert noisy.shape[0] <= 1500 - m  # randomized rows only, never the histogram's
    final = seen[-1][2]
    assert final.shape[0] == 1500 - m
    # Holding the releases fixed, other true labels give the same constant: the
    # pooled prior is a function of the noisy labels and the histogram alone.
    masks = np.tile(_classifier._global_mask(clf.mechanism_), (final.shape[0], 1))
    np.testing.assert_array_equal(original(*seen[-1][:3], masks, 0.5), clf.constant_prior_)
    assert clf.majority_guard_["choice"] == "constant"
    np.testing.assert_allclose(clf.predict_proba(X[:2]), np.tile(clf.constant_prior_, (2, 1)))
    assert np.all(clf.predict(X[:5]) == np.argmax(clf.constant_prior_))
    # Kept: the pooled noisy frequencies, not the exact ones.
    exact = np.bincount(y, minlength=3) / y.shape[0]
    assert not np.allclose(clf.constant_prior_, exact, atol=1e-6)
    blob = pickle.dumps(clf)
    for values in (exact, np.bincount(y, minlength=3).astype(np.float64),
                   np.bincount(y, minlength=3)):
        assert values.tobytes() not in blob
