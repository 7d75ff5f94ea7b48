"""Design questions left by the adversarial review of the estimator layer:
failed refits, conflicting mechanism parameters, bools for numbers, the
generator of DebiasedSGDClassifier, one-shot cv iterables and the study's
non-private row. Each test attacks the estimator as its user or receiver."""

import numpy as np
import pytest
from _audit import assert_no_random_state
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin
from sklearn.exceptions import NotFittedError
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import KFold

from skdp_label import BudgetAccountant, LabelDPClassifier, LabelDPRegressor
from skdp_label.estimators import DebiasedSGDClassifier
from skdp_label.mechanisms import Laplace, RROnBins
from skdp_label.utils import PrivacyLeakWarning

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")

BOUNDS = (0.0, 10.0)


def _data(n=120, seed=3):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = np.clip(X @ [1.0, 2.0, 0.5] + 5, 0.5, 9.5)
    codes = np.digitize(X[:, 0], [-0.5, 0.5])
    return X, y, codes


def _spent_nothing(acc):
    assert acc.spent_epsilon == 0.0 and len(acc.ledger) == 0


def _fitted_attributes(est):
    return sorted(k for k in vars(est) if k.endswith("_") and not k.startswith("__"))


# -- 1. a failed (re)fit: unfitted, and the epsilon it charged is visible ---------------------

class _FailsOnFit(BaseEstimator):
    """Fits like Ridge / LogisticRegression until ``fail`` is set."""

    def __init__(self, fail=False, classifier=False):
        self.fail = fail
        self.classifier = classifier

    def fit(self, X, y):
        if self.fail:
            raise RuntimeError("the base estimator failed")
        self.model_ = (LogisticRegression() if self.classifier else Ridge()).fit(X, y)
        return self

    def predict(self, X):
        return self.model_.predict(X)

    def predict_proba(self, X):
        return self.model_.predict_proba(X)

    @property
    def classes_(self):
        return self.model_.classes_


class _FailingRegressor(RegressorMixin, _FailsOnFit):
    pass


class _FailingClassifier(ClassifierMixin, _FailsOnFit):
    pass


_MAKERS = {
    "regressor-laplace": lambda acc: LabelDPRegressor(
        _FailingRegressor(), "laplace", 1.0, bounds=BOUNDS, accountant=acc),
    # n_eff given: no measuring fit (on synthetic labels) that would fail before the charge.
    "regressor-auto": lambda acc: LabelDPRegressor(
        _FailingRegressor(), "auto", 1.0, bounds=BOUNDS, accountant=acc,
        mechanism_params={"n_eff": 20.0}),
    "classifier-rr": lambda acc: LabelDPClassifier(
        _FailingClassifier(classifier=True), "rr", 1.0, classes=range(3), accountant=acc),
    "classifier-two-stages": lambda acc: LabelDPClassifier(
        _FailingClassifier(classifier=True), epsilon=1.0, n_stages=2, classes=range(3),
        accountant=acc),
}


def _fit(est, X, y, codes):
    return est.fit(X, codes if isinstance(est, LabelDPClassifier) else y)


@pytest.mark.parametrize("name", list(_MAKERS))
def test_failed_refit_leaves_the_estimator_unfitted_and_shows_the_epsilon_it_spent(name):
    # Was: after a refit whose base estimator raised (after the charge), the
    # estimator still predicted with the previous fit's model and epsilon_spent_
    # showed the previous total, although the ledger held the new charge.
    X, y, codes = _data()
    acc = BudgetAccountant()
    est = _fit(_MAKERS[name](acc), X, y, codes)
    assert est.epsilon_spent_ == pytest.approx(acc.spent_epsilon)
    first = acc.spent_epsilon
    est.set_params(base_estimator__fail=True)
    with pytest.raises(RuntimeError, match="base estimator failed") as info:
        _fit(est, X, y, codes)
    # The new charge is in the ledger, in epsilon_spent_ and in the error's note.
    assert acc.spent_epsilon == pytest.approx(2 * first)
    assert est.epsilon_spent_ == pytest.approx(acc.spent_epsilon)
    note = " ".join(getattr(info.value, "__notes__", []))
    assert f"epsilon={first:g}" in note and "spent" in note and "unfitted" in note
    # Nothing of the earlier fit survives: not fitted, nothing to predict with.
    assert _fitted_attributes(est) == ["epsilon_spent_"]
    for method in ("predict", "privacy_report"):
        with pytest.raises(NotFittedError):
            getattr(est, method)(*([X[:2]] if method == "predict" else []))
    # A successful refit starts from there and keeps counting.
    est.set_params(base_estimator__fail=False)
    _fit(est, X, y, codes)
    assert est.epsilon_spent_ == pytest.approx(acc.spent_epsilon) == pytest.approx(3 * first)
    assert est.predict(X[:2]).shape == (2,)


@pytest.mark.parametrize("name", ["regressor-laplace", "classifier-rr"])
def test_failed_first_fit_without_accountant_counts_its_charge(name):
    X, y, codes = _data()
    est = _MAKERS[name](None).set_params(base_estimator__fail=True)
    with pytest.raises(RuntimeError) as info:
        _fit(est, X, y, codes)
    assert est.epsilon_spent_ == 1.0
    assert "epsilon=1 " in " ".join(info.value.__notes__)
    with pytest.raises(NotFittedError):
        est.predict(X[:2])


@pytest.mark.parametrize("name", ["regressor-laplace", "classifier-rr"])
def test_refit_refused_before_spending_leaves_no_stale_model_and_no_note(name):
    X, y, codes = _data()
    acc = BudgetAccountant()
    est = _fit(_MAKERS[name](acc), X, y, codes)
    spent, entries = acc.spent_epsilon, len(acc.ledger)
    with pytest.raises(ValueError) as info:  # sample weights of the wrong length
        est.fit(X, codes if isinstance(est, LabelDPClassifier) else y, sample_weight=np.ones(3))
    assert not getattr(info.value, "__notes__", None)
    assert acc.spent_epsilon == spent and len(acc.ledger) == entries  # nothing spent
    assert est.epsilon_spent_ == spent and _fitted_attributes(est) == ["epsilon_spent_"]


# -- 2. a parameter given in two places is refused, not silently resolved ---------------------

@pytest.mark.parametrize("kwargs, match", [
    # Was: the instance's bounds silently won over the estimator's.
    (dict(mechanism=Laplace(bounds=(0, 20)), bounds=BOUNDS), "bounds"),
    (dict(mechanism=Laplace(bounds=(0, 10)), bounds=(0, 9.5)), "bounds"),
    (dict(mechanism=RROnBins(domain=np.arange(11.0)), domain=np.arange(0.0, 11.0, 2.0)),
     "domain"),
    # Was: mechanism_params were silently ignored with an instance.
    (dict(mechanism=Laplace(), bounds=BOUNDS, mechanism_params={"clip": False}),
     "mechanism_params"),
    # Was: a TypeError from make_mechanism (multiple values for 'epsilon').
    (dict(mechanism="laplace", bounds=BOUNDS, mechanism_params={"epsilon": 2.0}), "epsilon"),
    (dict(mechanism="laplace", bounds=BOUNDS, mechanism_params={"bounds": (0, 20)}), "bounds"),
    (dict(mechanism="laplace", mechanism_params={"bounds": (0, 20), "random_state": 0},
          bounds=BOUNDS), "random_state"),
], ids=["bounds-wider", "bounds-narrower", "domain", "params-with-instance", "epsilon-in-params",
        "bounds-in-params", "random-state-in-params"])
def test_a_mechanism_parameter_given_twice_is_refused_before_spending(kwargs, match):
    X, y, _ = _data()
    acc = BudgetAccountant()
    est = LabelDPRegressor(Ridge(), accountant=acc, **kwargs)
    with pytest.raises(ValueError, match=match):
        est.fit(X, y)
    _spent_nothing(acc)


@pytest.mark.parametrize("mechanism, kwargs", [
    (Laplace(bounds=(0, 10)), dict(bounds=[0.0, 10.0])),  # the same bounds, another type
    (Laplace(bounds=(0, 10)), {}),  # the instance's bounds alone
    (Laplace(), dict(bounds=BOUNDS)),  # the estimator's bounds fill the instance's
])
def test_a_mechanism_parameter_given_once_or_equal_is_accepted(mechanism, kwargs):
    X, y, _ = _data()
    acc = BudgetAccountant()
    est = LabelDPRegressor(Ridge(), mechanism, accountant=acc, **kwargs).fit(X, y)
    assert tuple(est.mechanism_.bounds) == (0, 10) and acc.spent_epsilon == 1.0


# -- 3. a bool is not a number --------------------------------------------------------------

@pytest.mark.parametrize("params", [
    dict(n_stages=True), dict(n_clusters=True, prior="clusters"), dict(prior_temperature=True),
    dict(n_stages=np.True_), dict(stage_split=True, n_stages=2), dict(shrinkage=True),
])
def test_classifier_bool_numbers_are_refused_before_spending(params):
    # Was: n_stages=True ran one stage, n_clusters=True one cluster,
    # prior_temperature=True a temperature of 1, all charged.
    X, _, codes = _data()
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match=list(params)[0]):
        LabelDPClassifier(LogisticRegression(), classes=range(3), accountant=acc,
                          **params).fit(X, codes)
    _spent_nothing(acc)


def _package_classes_with_constraints():
    import importlib
    import inspect
    import pkgutil

    import skdp_label

    found = {}
    for info in pkgutil.walk_packages(skdp_label.__path__, "skdp_label."):
        if "._kernels" in info.name or info.name.endswith(("__main__", "_cli", "dask")):
            continue
        module = importlib.import_module(info.name)
        for _, cls in inspect.getmembers(module, inspect.isclass):
            if (cls.__module__.startswith("skdp_label.") and "_parameter_constraints" in vars(cls)
                    and not inspect.isabstract(cls)):
                found[f"{cls.__module__}.{cls.__name__}"] = cls
    return found


def _number_parameters(cls):
    from sklearn.utils._param_validation import Interval

    return [name for name, constraints in cls._parameter_constraints.items()
            if any(isinstance(c, Interval) for c in constraints)]


def _instance(cls):
    import inspect

    required = {name: (LogisticRegression() if "Classifier" in cls.__name__ else Ridge())
                for name, p in inspect.signature(cls.__init__).parameters.items()
                if p.default is inspect.Parameter.empty and name == "base_estimator"}
    return cls(**required)


def test_no_number_parameter_of_the_package_takes_a_bool():
    # Was: scikit-learn's Interval takes True as 1 (a bool is an Integral); every
    # Integral / Real parameter of the package's estimators and mechanisms did.
    from sklearn.utils._param_validation import InvalidParameterError

    classes = _package_classes_with_constraints()
    assert len(classes) > 20  # the scan found the package's estimators and mechanisms
    taken = []
    for name, cls in classes.items():
        for param in set(_number_parameters(cls)) & set(cls._get_param_names()):
            for flag in (True, np.False_):
                est = _instance(cls).set_params(**{param: flag})
                try:
                    est._validate_params()
                except InvalidParameterError as exc:
                    assert param in str(exc) and isinstance(exc, ValueError)
                else:
                    taken.append(f"{name}.{param}={flag!r}")
    assert taken == [], taken


# -- 4. DebiasedSGDClassifier: its generator comes from utils/_random.py and is never kept ---

@pytest.mark.parametrize("random_state", [None, 0])
def test_debiased_sgd_pickle_holds_no_generator(random_state):
    # Was: a RandomState was accepted as random_state and kept as a parameter, and
    # the order's generator was made by scikit-learn, outside utils/_random.py.
    X, _, codes = _data()
    clf = DebiasedSGDClassifier(classes=range(3), random_state=random_state, max_iter=2)
    clf.fit(X, codes).partial_fit(X, codes)
    assert_no_random_state(clf)  # attributes, parameters, its pickle and the unpickled copy
    meta = LabelDPClassifier(DebiasedSGDClassifier(max_iter=2, random_state=random_state),
                             "rr", classes=range(3)).fit(X, codes)
    assert_no_random_state(meta)


@pytest.mark.parametrize("stream", [np.random.RandomState(0), np.random.default_rng(0),
                                    np.random.SeedSequence(0)], ids=lambda s: type(s).__name__)
def test_debiased_sgd_refuses_a_generator_before_spending(stream):
    X, _, codes = _data()
    with pytest.raises(ValueError, match="random_state"):
        DebiasedSGDClassifier(classes=range(3), random_state=stream).fit(X, codes)
    with pytest.raises(ValueError, match="random_state"):
        DebiasedSGDClassifier(classes=range(3), random_state=stream).partial_fit(X, codes)
    acc = BudgetAccountant()  # as a base estimator: refused before the labels are charged
    with pytest.raises(ValueError, match="random_state"):
        LabelDPClassifier(DebiasedSGDClassifier(random_state=stream), "rr", classes=range(3),
                          accountant=acc).fit(X, codes)
    _spent_nothing(acc)


def test_debiased_sgd_seeded_order_is_reproducible_and_partial_fits_differ():
    # Was: every partial_fit call reseeded a RandomState: the same order each call.
    X, _, codes = _data()
    orders = []

    class Recording(DebiasedSGDClassifier):
        def _epoch(self, X, targets, rng):
            orders.append(rng.permutation(X.shape[0]))
            super()._epoch(X, targets, rng)

    def run(seed, calls):
        clf = Recording(classes=range(3), random_state=seed)
        for _ in range(calls):
            clf.partial_fit(X, codes)
        return clf.coef_.copy()

    np.testing.assert_array_equal(run(5, 2), run(5, 2))  # reproducible with a seed
    assert np.array_equal(orders[0], orders[2]) and np.array_equal(orders[1], orders[3])
    assert not np.array_equal(orders[0], orders[1])  # successive calls: other orders
    orders.clear()
    run(None, 1), run(None, 1)
    assert not np.array_equal(orders[0], orders[1])  # None: fresh entropy


def test_a_base_estimators_bad_parameter_is_refused_before_spending():
    # Was: Ridge(alpha=-1) was validated by Ridge.fit, after the labels were charged.
    X, y, _ = _data()
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="alpha"):
        LabelDPRegressor(Ridge(alpha=-1.0), "laplace", bounds=BOUNDS, accountant=acc).fit(X, y)
    _spent_nothing(acc)


# -- 5. a one-shot cv is read once, before anything is spent, and the search reuses it -------

_GRID = {"alpha": [0.01, 100.0]}


def _grid_regressor(cv, acc):
    return LabelDPRegressor(Ridge(), "laplace", 1.0, bounds=BOUNDS, accountant=acc,
                            mechanism_params={"clip": False}, param_grid=_GRID, cv=cv)


@pytest.mark.parametrize("as_iterable", [
    lambda X: (split for split in KFold(3).split(X)),  # a generator
    lambda X: iter(list(KFold(3).split(X))),  # an iterator
], ids=["generator", "iterator"])
def test_a_generator_of_splits_is_searched_not_used_up_by_the_check(as_iterable):
    # Was: the pre-spend check read the generator; the search after the charge saw no
    # split, failed, and was ignored with a warning (the base estimator kept alpha=1).
    import warnings

    X, y, _ = _data()
    acc = BudgetAccountant()
    with warnings.catch_warnings():
        warnings.filterwarnings("error", message=".*param_grid", category=UserWarning)
        est = _grid_regressor(as_iterable(X), acc).fit(X, y)
    assert est.best_params_ is not None and est.best_params_["alpha"] in _GRID["alpha"]
    assert len([k for k in est.cv_results_ if k.startswith("split")
                and k.endswith("_test_score")]) == 3
    assert acc.spent_epsilon == 1.0
    # A second fit finds the generator used up: refused before spending.
    with pytest.raises(ValueError, match="no splits"):
        est.fit(X, y)
    assert acc.spent_epsilon == 1.0 and len(acc.ledger) == 1


@pytest.mark.parametrize("splits, match", [
    ([(np.arange(50), np.arange(50, 130))], r"\[0, 120\)"),  # rows beyond X
    ([(np.arange(60), np.arange(-5, 0))], r"\[0, 120\)"),  # negative rows
    ([np.arange(10)], "iterable of"),  # not (train, test) pairs
    # Review: these failed in the search after the charge (a warning, alpha kept).
    ([(np.arange(0), np.arange(120)), (np.arange(60), np.arange(60, 120))], "non-empty"),
    ([(np.arange(120), np.arange(0)), (np.arange(60), np.arange(60, 120))], "non-empty"),
    ([(np.arange(60).reshape(30, 2), np.arange(60, 120))], "1-D"),
], ids=["beyond", "negative", "not-pairs", "empty-train", "empty-test", "2-d"])
def test_bad_splits_are_refused_before_spending(splits, match):
    # Was: charged, then the search failed on the indices and was ignored with a warning.
    X, y, _ = _data()
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match=match):
        _grid_regressor(splits, acc).fit(X, y)
    _spent_nothing(acc)


def test_a_seeded_splitter_is_drawn_from_once_by_the_search_only():
    # The pre-spend check must not draw from a splitter's RandomState: the search then
    # sees the splits the user's splitter gives on its first use.
    X, y, _ = _data()
    state, twin = np.random.RandomState(7), np.random.RandomState(7)
    list(KFold(3, shuffle=True, random_state=twin).split(X))  # the twin draws one split
    acc = BudgetAccountant()
    est = _grid_regressor(KFold(3, shuffle=True, random_state=state), acc).fit(X, y)
    assert est.best_params_ is not None
    # The search drew once: the user's generator now stands where the twin does.
    np.testing.assert_array_equal(state.get_state()[1], twin.get_state()[1])


# -- 6. the study's non-private reference row says that it is not private --------------------

def test_study_marks_the_non_private_row_and_the_ledger_holds_only_private_releases():
    # Was: the non-private row differed from the dp-constant rows only by its name
    # (both reference=True); nothing in a row said "not label-DP".
    from skdp_label.study import DP_CONSTANT, NON_PRIVATE, privacy_utility_study

    X, y, _ = _data()
    acc = BudgetAccountant()
    table = privacy_utility_study(LabelDPRegressor(Ridge(), bounds=BOUNDS), X, y,
                                  mechanisms=["laplace"], epsilons=[1.0], seeds=[0],
                                  accountant=acc, progress=False)
    rows = table.to_dict("records") if hasattr(table, "to_dict") else table
    flags = {row["method"]: row["private"] for row in rows}
    assert flags == {NON_PRIVATE: False, "laplace": True, DP_CONSTANT: True}
    non_private = next(row for row in rows if row["method"] == NON_PRIVATE)
    assert non_private["epsilon_spent"] == np.inf and non_private["reference"]
    # Every ledger entry is a private row's release; the reference wrote none.
    assert len(acc.ledger) == 2 and acc.spent_epsilon == 2.0
    assert sum(row["epsilon_spent"] for row in rows if row["private"]) == 2.0


def test_post_processing_streams_are_not_release_streams():
    # An SGD's example order drawn from a label-noise stream of the same seed
    # would let whoever sees the order replay the noise.
    from skdp_label.utils._random import post_processing_generator, release_generator

    for context in [(), (0,), (3, 1), (12345, 0, 7, 9)]:
        with pytest.warns(PrivacyLeakWarning):
            noise = release_generator(11, context).random(16)
        order = post_processing_generator(11, context).random(16)
        assert not np.any(noise == order)
    # still reproducible, and separated by the context
    a = post_processing_generator(11, (1,)).random(4)
    assert np.array_equal(a, post_processing_generator(11, (1,)).random(4))
    assert not np.array_equal(a, post_processing_generator(11, (2,)).random(4))


def test_a_seed_cannot_spell_another_seeds_stream_keys():
    # Attack (review): numpy's SeedSequence pads an entropy of up to 4 words and appends
    # the spawn key, so seed s + (w << 128) with context c was seed s with context
    # (w, *c): a huge seed replayed another release's noise, or the example order of a
    # post-processing stream (its tag word included). Seeds from 2**128 on are refused.
    from skdp_label.utils._random import (
        _POST_PROCESSING,
        check_random_state,
        derive_random_state,
        post_processing_generator,
        release_generator,
    )

    for spelled, context in [(5 + (_POST_PROCESSING << 128), (3,)), (5 + (7 << 128), ())]:
        with pytest.raises(ValueError, match="below 2\\*\\*128"):
            release_generator(spelled, context)
        with pytest.raises(ValueError, match="below 2\\*\\*128"):
            derive_random_state(spelled, context)
    with pytest.raises(ValueError, match="below 2\\*\\*128"):
        LabelDPRegressor(Ridge(), "laplace", bounds=BOUNDS, random_state=2**128).fit(
            *_data()[:2])
    assert check_random_state(2**128 - 1) == 2**128 - 1  # the largest seed still works
    with pytest.warns(PrivacyLeakWarning):
        top = release_generator(2**128 - 1, (3,)).random(8)
    assert not np.any(top == post_processing_generator(2**128 - 1, (3,)).random(8))


class _Interruptible(LogisticRegression):
    """LogisticRegression whose fit raises ``exc`` when it is set."""

    def __init__(self, exc=None, C=1.0):
        self.exc = exc
        super().__init__(C=C)

    def fit(self, X, y, **kwargs):
        if self.exc is not None:
            raise self.exc
        return super().fit(X, y, **kwargs)


@pytest.mark.parametrize("exc", [RuntimeError("stage model"), KeyboardInterrupt()],
                         ids=["error", "interrupt"])
@pytest.mark.parametrize("kwargs", [
    dict(n_stages=2, prior="class-frequencies"),  # histogram, then stages: sequential
    dict(n_stages=3, prior="clusters", n_clusters=2),
    dict(mechanism="auto"),  # the histogram on rows of its own: parallel
], ids=["histogram-stages", "clusters-stages", "auto"])
def test_a_failed_refit_counts_histogram_and_stages_as_the_ledger_does(kwargs, exc):
    # Attack (review): the failed fit's count is the classifier's own closure over the
    # histogram and stage charges; it must equal what the accountant recorded, also
    # for a KeyboardInterrupt (a BaseException) in a stage's model.
    X, _, codes = _data(n=400)
    acc = BudgetAccountant()
    est = LabelDPClassifier(_Interruptible(), epsilon=2.0, classes=range(3), accountant=acc,
                            **kwargs).fit(X, codes)
    assert est.epsilon_spent_ == pytest.approx(acc.spent_epsilon)
    est.set_params(base_estimator__exc=exc)
    with pytest.raises(type(exc)) as info:
        est.fit(X, codes)
    assert acc.spent_epsilon == pytest.approx(4.0)
    assert est.epsilon_spent_ == pytest.approx(acc.spent_epsilon)
    assert "epsilon=2 " in " ".join(info.value.__notes__)
    assert _fitted_attributes(est) == ["epsilon_spent_"] and "_attempt" not in vars(est)


class _RecordsRows(LogisticRegression):
    """LogisticRegression that records the row ids (column 0 of X) of every fit."""

    fits = []

    def fit(self, X, y, **kwargs):
        type(self).fits.append(np.sort(np.asarray(X)[:, 0]).astype(int))
        return super().fit(X, y, **kwargs)


def test_the_classifiers_search_applies_the_users_splits_to_the_users_rows():
    # Attack (review): LabelDPClassifier trained its one stage on a random permutation
    # of the rows, so a cv given as row indices (a time or group split) was applied to
    # shuffled rows: the search trained on rows the user had put in the test fold.
    X, _, codes = _data()
    X = np.column_stack([np.arange(X.shape[0]), X])
    half = X.shape[0] // 2
    splits = [(np.arange(half), np.arange(half, 2 * half)),
              (np.arange(half, 2 * half), np.arange(half))]
    _RecordsRows.fits = []
    LabelDPClassifier(_RecordsRows(), "rr", 2.0, classes=range(3), param_grid={"C": [0.1, 1.0]},
                      cv=splits).fit(X, codes)
    # The search's first two fits are its two splits' training folds, as given.
    for fitted, (train, _) in zip(_RecordsRows.fits[:2], splits):
        np.testing.assert_array_equal(fitted, train)


def test_explicit_splits_with_the_majority_guard_are_refused_before_spending():
    # Was: the guard's fold models ran the search with splits indexing all the
    # rows on subsets of them: IndexError, warned three times, and the guard
    # compared a model with its base parameters, after the charge.
    X, _, codes = _data()
    n = codes.shape[0]
    splits = [(np.arange(0, n // 2), np.arange(n // 2, n)),
              (np.arange(n // 2, n), np.arange(0, n // 2))]
    acc = BudgetAccountant()
    est = LabelDPClassifier(LogisticRegression(), classes=range(3), param_grid={"C": [0.1, 1.0]},
                            cv=splits, accountant=acc, mechanism="rr", majority_guard=True)
    with pytest.raises(ValueError, match="explicit"):
        est.fit(X, codes)
    assert acc.spent_epsilon == 0 and not acc.ledger
    # an int cv runs
    est.set_params(cv=2).fit(X, codes)
    assert acc.spent_epsilon > 0
