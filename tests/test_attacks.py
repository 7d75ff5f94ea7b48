"""Attacks on the privacy promise, written as the adversary would run them.

Whoever receives a fitted estimator, a pickle, a copy, or an error message is
the attacker here. Each test is one attack from the privacy-hardening audit
(issue 8) or one found while fixing it; the auditors in ``_audit.py`` are
themselves tested against deliberately broken mechanisms in
``test_audit_mutations.py``.
"""

import copy
import pickle
import warnings

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.linear_model import LinearRegression, LogisticRegression, Ridge
from sklearn.model_selection import GridSearchCV
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skdp_label import BudgetAccountant, LabelDPClassifier, LabelDPRegressor, PrivacyLeakWarning
from skdp_label.mechanisms import (
    AutoRegression,
    DebiasedRR,
    DiscreteLaplace,
    DiscreteStaircase,
    ExponentialMechanism,
    Gaussian,
    Laplace,
    OptimalUnbiased,
    RandomizedResponse,
    RROnBins,
    RRTopK,
    RRWithPrior,
    Staircase,
)

from _audit import assert_no_random_state, audit_copies_independent, audit_messages_have_no_labels

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")

# Every mechanism, on labels 0..10, configured from public inputs only.
MECHANISMS = {
    "rr": lambda **kw: RandomizedResponse(classes=np.arange(11), **kw),
    "rr-top-k": lambda **kw: RRTopK(classes=np.arange(11), k=3, prior=np.arange(1, 12), **kw),
    "rr-with-prior": lambda **kw: RRWithPrior(classes=np.arange(11), prior=np.arange(1, 12), **kw),
    "laplace": lambda **kw: Laplace(bounds=(0.0, 10.0), **kw),
    "discrete-laplace": lambda **kw: DiscreteLaplace(bounds=(0, 10), **kw),
    "staircase": lambda **kw: Staircase(bounds=(0.0, 10.0), **kw),
    "discrete-staircase": lambda **kw: DiscreteStaircase(bounds=(0, 10), **kw),
    "gaussian": lambda **kw: Gaussian(bounds=(0.0, 10.0), **kw),
    # Unit grids: the auditors need the labels on the grid.
    "exponential": lambda **kw: ExponentialMechanism(bounds=(0.0, 10.0), resolution=1, **kw),
    "rr-on-bins": lambda **kw: RROnBins(bounds=(0, 10), **kw),
    "rr-on-bins-public-prior": lambda **kw: RROnBins(prior=(np.arange(11), np.ones(11)), **kw),
    "unbiased": lambda **kw: OptimalUnbiased(bounds=(0, 10), resolution=1, **kw),
    "debiased-rr": lambda **kw: DebiasedRR(bounds=(0, 10), **kw),
    "auto": lambda **kw: AutoRegression(bounds=(0, 10), grid_size=11, **kw),
}
LABELS = np.tile(np.arange(11), 60)


def _estimators():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    y_reg = np.clip(np.rint(X @ [2.0, 1.0, 0.0] + 5), 0, 10)
    y_cls = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0).astype(int)
    regs = {
        f"regressor-{name}": LabelDPRegressor(Ridge(), name, 1.0, bounds=(0, 10))
        for name in ["unbiased", "laplace", "rr-on-bins", "exponential", "gaussian", "auto"]
    }
    clfs = {
        "classifier-rr": LabelDPClassifier(LogisticRegression(), "rr", 1.0, classes=[0, 1, 2]),
        "classifier-2-stages": LabelDPClassifier(LogisticRegression(), epsilon=1.0, n_stages=2, classes=[0, 1, 2]),
        "classifier-cluster-prior": LabelDPClassifier(
            LogisticRegression(), epsilon=1.0, prior="clusters", n_clusters=4, n_stages=2, classes=[0, 1, 2]
        ),
        "classifier-auto-shrinkage": LabelDPClassifier(
            LogisticRegression(), "auto", 1.0, shrinkage="auto", classes=[0, 1, 2]
        ),
    }
    return X, y_reg, y_cls, regs, clfs


# -- 1. no fitted object, pickle or copy lets anyone replay the noise ---------------------------
@pytest.mark.parametrize("random_state", [None, 7])
@pytest.mark.parametrize("name", sorted(MECHANISMS))
def test_fitted_mechanisms_hold_no_random_state(name, random_state):
    mech = MECHANISMS[name](epsilon=1.0, random_state=random_state, accountant=BudgetAccountant(delta=0.5))
    mech.fit_transform(LABELS)
    assert_no_random_state(mech)
    assert_no_random_state(copy.deepcopy(mech))


@pytest.mark.parametrize("random_state", [None, 7])
def test_fitted_estimators_hold_no_random_state(random_state):
    X, y_reg, y_cls, regs, clfs = _estimators()
    for est in regs.values():
        est.set_params(random_state=random_state).fit(X, y_reg)
        assert_no_random_state(est)
    for est in clfs.values():
        est.set_params(random_state=random_state).fit(X, y_cls)
        assert_no_random_state(est)


@pytest.mark.parametrize("make", [
    lambda rs: RandomizedResponse(classes=[0, 1], random_state=rs),
    lambda rs: LabelDPRegressor(Ridge(), "laplace", bounds=(0, 1), random_state=rs),
    lambda rs: LabelDPClassifier(LogisticRegression(), classes=[0, 1], random_state=rs),
])
@pytest.mark.parametrize("stream", [
    np.random.default_rng(0), np.random.RandomState(0), np.random.SeedSequence(0), np.random.PCG64(0),
])
def test_random_streams_are_refused_as_random_state(make, stream):
    """A Generator parameter would be pickled with the estimator (after the draws)."""
    acc = BudgetAccountant()
    est = make(stream).set_params(accountant=acc)
    X, y = np.zeros((20, 1)), np.tile([0, 1], 10)
    with pytest.raises(ValueError, match="random_state"):
        est.fit(y) if hasattr(est, "transform") else est.fit(X, y)
    assert acc.ledger == []


# -- 2. copies and releases never share noise -------------------------------------------------------
@pytest.mark.parametrize("name", ["rr", "rr-on-bins-public-prior", "unbiased", "exponential", "laplace", "auto"])
def test_copies_draw_independent_noise(name):
    """Two copies transforming two halves of a column in parallel used to draw
    identical uniforms: RR at eps 0.1 gave away the XOR of the labels."""
    mech = MECHANISMS[name](epsilon=0.5).fit(LABELS)
    audit_copies_independent(mech, np.tile(np.arange(11), 300))


def test_rr_copies_agree_like_independent_draws():
    y = np.zeros(20_000, dtype=int)
    mech = RandomizedResponse(0.1, classes=np.arange(2)).fit(y)
    a, b = pickle.loads(pickle.dumps(mech)).transform(y), copy.deepcopy(mech).transform(y)
    p = mech.transition_matrix_[0, 0]
    expected = p**2 + (1 - p) ** 2  # ~0.5 at eps 0.1; a replayed stream gives 1
    assert abs(np.mean(a == b) - expected) < 0.02


def test_seeded_fits_on_different_rows_use_different_streams():
    """With an int seed, folds (different rows) must not reuse one stream:
    rows at the same position in two folds would get the same noise."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(600, 2))
    y = np.zeros(300)
    reg = LabelDPRegressor(LinearRegression(), "rr-on-bins", 0.5, bounds=(0, 10), random_state=0)
    fold_a, fold_b = clone(reg).fit(X[:300], y), clone(reg).fit(X[300:], y)
    assert fold_a.mechanism_.random_state != fold_b.mechanism_.random_state
    noisy_a = clone(fold_a.mechanism_).fit_transform(y)
    noisy_b = clone(fold_b.mechanism_).fit_transform(y)
    assert np.mean(noisy_a == noisy_b) < 0.9
    # ... while the same fit is reproducible.
    again = clone(reg).fit(X[:300], y)
    assert again.mechanism_.random_state == fold_a.mechanism_.random_state


@pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")
def test_one_seed_at_two_epsilons_draws_independent_noise():
    """A grid search over epsilon with one integer seed released the same
    noise at two scales: y + b1 Z and y + b2 Z give y exactly. The stream now
    depends on the public parameters; the same release is still reproducible."""
    y = np.full(4000, 0.5)

    def noise(eps, **params):
        mech = Laplace(eps, bounds=params.pop("bounds", (0, 1)), random_state=7, **params)
        return mech.fit_transform(y).ravel() - 0.5

    a = noise(1.0)
    assert np.array_equal(a, noise(1.0))  # the same release: reproducible
    for other in (noise(2.0), noise(1.0, bounds=(0, 2))):
        assert abs(np.corrcoef(a, other)[0, 1]) < 0.1  # a shared stream gives ~1
    # The accountant charged is not part of the release: the same stream.
    assert np.array_equal(a, noise(1.0, accountant=BudgetAccountant()))
    # Mutation: the pre-fix context (mechanism, step, n only) shares the stream.
    from skdp_label.utils._random import public_fingerprint, release_generator

    def old_context(step, n):
        return release_generator(7, public_fingerprint("Laplace", step, int(n)))

    m1, m2 = Laplace(1.0, bounds=(0, 1)), Laplace(2.0, bounds=(0, 1))
    m1._release_generator = m2._release_generator = old_context
    b1 = m1.fit_transform(y).ravel() - 0.5
    b2 = m2.fit_transform(y).ravel() - 0.5
    assert np.corrcoef(b1, b2)[0, 1] > 0.9


def test_fixed_seed_warns_and_none_does_not():
    with pytest.warns(PrivacyLeakWarning, match="fixed integer random_state"):
        Laplace(1.0, bounds=(0, 1), random_state=3).fit_transform([0.5])
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        Laplace(1.0, bounds=(0, 1)).fit_transform([0.5])


def test_entropy_releases_differ():
    mech = Laplace(1.0, bounds=(0.0, 1.0)).fit([0.5])
    assert not np.array_equal(mech.transform(np.zeros(50)), mech.transform(np.zeros(50)))


# -- 3. the epsilon charged is the epsilon sampled ------------------------------------------------------
_CHANGES = {
    "rr": {"epsilon": 0.01},
    "laplace": {"epsilon": 0.01, "bounds": (0.0, 100.0), "clip": False},
    "gaussian": {"epsilon": 0.01, "delta": 1e-9},
    "exponential": {"epsilon": 0.01, "bounds": (0.0, 20.0)},
    "rr-on-bins": {"epsilon": 0.01, "bounds": (0, 20), "prior_epsilon": 0.001},
    "rr-on-bins-public-prior": {"prior": (np.arange(11), np.arange(1.0, 12.0))},
    "debiased-rr": {"epsilon": 0.01, "grid_size": 4},
    "auto": {"epsilon": 0.01, "n_eff": 1e6, "candidates": ["unbiased"]},
    "rr-top-k": {"k": 2, "prior": np.arange(11, 0, -1)},
}


@pytest.mark.parametrize("name", sorted(_CHANGES))
def test_set_params_after_fit_refuses_to_sample(name):
    """RR fitted at eps 20, set to 0.01, used to be charged 0.01 and release
    every label unchanged."""
    acc = BudgetAccountant(delta=0.5)
    mech = MECHANISMS[name](epsilon=20.0, accountant=acc).fit(LABELS)
    spent = acc.spent_epsilon
    for param, value in _CHANGES[name].items():
        changed = copy.deepcopy(mech)
        changed.set_params(**{param: value})
        with pytest.raises(ValueError, match=f"{param}.*changed since fit"):
            changed.transform(LABELS)
    assert acc.spent_epsilon == spent
    # Changing only the random source is fine; refitting accepts the new values.
    mech.set_params(random_state=5).transform(LABELS)
    mech.set_params(**_CHANGES[name]).fit_transform(LABELS)


def test_swapping_the_accountant_after_fit_refuses():
    """The prior was charged to the first accountant; a second one would see
    only the release."""
    first, second = BudgetAccountant(), BudgetAccountant()
    mech = RROnBins(1.0, bounds=(0, 10), accountant=first).fit(LABELS)
    mech.set_params(accountant=second)
    with pytest.raises(ValueError, match="accountant"):
        mech.transform(LABELS)
    assert second.ledger == []


def test_per_example_priors_after_set_params_refuse():
    mech = RRWithPrior(20.0, classes=[0, 1, 2]).fit([0])
    mech.set_params(epsilon=0.01)
    with pytest.raises(ValueError, match="epsilon"):
        mech.randomize([0, 1], np.ones((2, 3)))


def test_epsilon_spent_is_cumulative_everywhere():
    mech = Laplace(1.0, bounds=(0, 1))
    mech.fit_transform([0.5])
    mech.fit_transform([0.5])
    mech.transform([0.5])
    assert mech.epsilon_spent_ == pytest.approx(3.0)
    X, y_reg, y_cls, regs, clfs = _estimators()
    reg, clf = regs["regressor-laplace"], clfs["classifier-2-stages"]
    for _ in range(2):
        reg.fit(X, y_reg)
        clf.fit(X, y_cls)
    assert reg.epsilon_spent_ == pytest.approx(2.0)
    assert clf.epsilon_spent_ == pytest.approx(2.0)  # stages in parallel, fits in sequence
    assert clone(reg).get_params()["epsilon"] == 1.0 and not hasattr(clone(reg), "epsilon_spent_")


# -- 4. the accountant through model selection ---------------------------------------------------------
@pytest.mark.parametrize("n_jobs", [1, 2])
def test_multistage_fits_in_parallel_workers_charge_the_sum(n_jobs):
    """Colliding disjoint-group tokens charged 20 two-stage fits 11-13, not 20."""
    X, _, y_cls, _, _ = _estimators()
    acc = BudgetAccountant()
    search = GridSearchCV(
        LabelDPClassifier(LogisticRegression(), epsilon=1.0, n_stages=2, classes=[0, 1, 2], accountant=acc),
        {"prior_temperature": [0.5, 1.0, 2.0, 3.0, 4.0]}, cv=3, n_jobs=n_jobs,
        scoring="accuracy",
    ).fit(X, y_cls)
    assert search.n_splits_ == 3
    assert acc.spent_epsilon == pytest.approx(5 * 3 + 1)  # 15 fold fits + refit, each eps 1
    groups = {e.group for e in acc.ledger}
    assert len(groups) == 16


# -- 5. a fit that fails spends nothing ------------------------------------------------------------------
def _reg(acc, base=None, mechanism="rr-on-bins", **kw):
    return LabelDPRegressor(base or Ridge(), mechanism, 1.0, bounds=(0, 10), accountant=acc, **kw)


@pytest.mark.parametrize("mechanism", ["rr-on-bins", "auto"])
@pytest.mark.parametrize("case", [
    "nan-X", "two-column-y", "sample-weight-length", "sample-weight-nan", "unknown-fit-param",
    "sparse-X-unsupported", "3d-y", "epsilon-above-cap", "bounds-missing",
])
def test_regressor_fails_before_spending(case, mechanism):
    acc = BudgetAccountant()
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(50, 2)), rng.integers(0, 11, 50).astype(float)
    fit_params, est = {}, _reg(acc, mechanism=mechanism)
    if case == "nan-X":
        X[3, 1] = np.nan
    elif case == "two-column-y":
        est, y = _reg(acc, HistGradientBoostingRegressor(), mechanism), np.column_stack([y, y])
    elif case == "sample-weight-length":
        fit_params = {"sample_weight": np.ones(49)}
    elif case == "sample-weight-nan":
        fit_params = {"sample_weight": np.r_[np.ones(49), np.nan]}
    elif case == "unknown-fit-param":
        fit_params = {"monotonic_cst": [1, 0]}
    elif case == "sparse-X-unsupported":
        import scipy.sparse as sp

        est, X = _reg(acc, HistGradientBoostingRegressor(), mechanism), sp.csr_matrix(X)
    elif case == "3d-y":
        y = y.reshape(50, 1, 1)
    elif case == "epsilon-above-cap":
        est.set_params(epsilon=1e3)
    elif case == "bounds-missing":
        est.set_params(bounds=None)
    with pytest.raises((ValueError, TypeError)):
        est.fit(X, y, **fit_params)
    assert acc.ledger == []


@pytest.mark.parametrize("case", ["two-column-y", "unknown-class", "no-predict-proba", "sample-weight-length"])
def test_classifier_fails_before_spending(case):
    from sklearn.svm import LinearSVC

    acc = BudgetAccountant()
    X, _, y, _, _ = _estimators()
    kw = dict(epsilon=1.0, classes=[0, 1, 2], accountant=acc, n_stages=2)
    est, fit_params = LabelDPClassifier(LogisticRegression(), **kw), {}
    if case == "two-column-y":
        y = np.column_stack([y, y])
    elif case == "unknown-class":
        y = y.copy()
        y[5] = 7
    elif case == "no-predict-proba":
        est = LabelDPClassifier(LinearSVC(), **kw)
    elif case == "sample-weight-length":
        fit_params = {"sample_weight": np.ones(3)}
    with pytest.raises(ValueError):
        est.fit(X, y, **fit_params)
    assert acc.ledger == []


def test_unbiased_solver_failure_after_private_prior_still_releases_exactly(monkeypatch):
    """The prior's epsilon was charged: the fit must not fail afterwards, and
    what it samples from is still exactly DP and unbiased."""
    from skdp_label.mechanisms.unbiased import _mechanisms

    def fail(*args, **kwargs):
        raise RuntimeError("simulated numerical failure")

    monkeypatch.setattr(_mechanisms, "optimal_unbiased_continuous", fail)
    monkeypatch.setattr(_mechanisms, "optimal_unbiased_grid", fail)
    acc = BudgetAccountant()
    mech = OptimalUnbiased(2.0, bounds=(0, 10), accountant=acc)
    with pytest.warns(RuntimeWarning, match="debiased randomized response"):
        out = mech.fit_transform(LABELS)
    assert acc.spent_epsilon == pytest.approx(2.0) and out.shape == LABELS.shape
    matrix = mech.transition_matrix_
    np.testing.assert_allclose(matrix @ mech.output_values_, mech.input_values_, atol=1e-9)
    log = np.log(matrix)
    assert (log.max(axis=0) - log.min(axis=0)).max() <= 2.0 - mech.prior_epsilon_ + 1e-9


# -- 6. errors name the problem, never a label ---------------------------------------------------------------
@pytest.mark.parametrize("call", [
    lambda y: Laplace(1.0, bounds=(0, 10)).fit_transform(y),
    lambda y: DiscreteLaplace(1.0, bounds=(0, 10)).fit_transform(y),
    lambda y: ExponentialMechanism(1.0, bounds=(0, 10)).fit_transform(y),
    lambda y: RandomizedResponse(1.0, classes=np.arange(11)).fit_transform(y),
    lambda y: RRWithPrior(1.0, classes=np.arange(11)).fit_transform(y),
    lambda y: LabelDPClassifier(LogisticRegression(), classes=np.arange(11)).fit(np.zeros((len(y), 1)), y),
])
def test_error_messages_quote_no_label(call):
    y = np.array([3.0, 17.123456, 4.0, -2.5, 9.0])  # out of the declared bounds / classes
    audit_messages_have_no_labels(lambda: call(y), [17.123456, -2.5], public=np.arange(11))


# -- 7. scoring on true labels -------------------------------------------------------------------------------
def test_true_label_scoring_warns_once_per_estimator():
    X, y_reg, _, regs, _ = _estimators()
    reg = regs["regressor-laplace"].fit(X, y_reg)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        reg.score(X, y_reg)
        reg.score(X, y_reg)
    leaks = [w for w in caught if issubclass(w.category, PrivacyLeakWarning)]
    assert len(leaks) == 1 and "unbiased_mse_scorer" in str(leaks[0].message)


def test_default_grid_search_scoring_warns():
    X, y_reg, _, regs, _ = _estimators()
    with pytest.warns(PrivacyLeakWarning, match="true labels|private labels"):
        GridSearchCV(make_pipeline(StandardScaler(), regs["regressor-laplace"]),
                     {"labeldpregressor__epsilon": [1.0, 2.0]}, cv=2).fit(X, y_reg)
