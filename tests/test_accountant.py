"""The budget accountant: composition, budget errors, clone and workers."""

import copy
import pickle

import numpy as np
import pytest
from sklearn.base import clone
from sklearn.compose import TransformedTargetRegressor
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, cross_val_score

from skdp_label import BudgetAccountant, BudgetExceededError
from skdp_label.mechanisms import Laplace, RandomizedResponse


def test_sequential_composition_and_ledger():
    acc = BudgetAccountant(epsilon=3.0)
    acc.spend(1.0, n_labels=10, description="a")
    acc.spend(0.5, n_labels=20, description="b")
    assert acc.spent_epsilon == pytest.approx(1.5)
    assert acc.remaining_epsilon == pytest.approx(1.5)
    assert [e.description for e in acc.ledger] == ["a", "b"]
    assert [e.n_labels for e in acc.ledger] == [10, 20]
    assert "total" in acc.summary()


def test_disjoint_group_costs_its_maximum():
    acc = BudgetAccountant()
    group = acc.disjoint_group("stages")
    acc.spend(1.0, n_labels=5, description="stage 1", group=group)
    acc.spend(0.7, n_labels=5, description="stage 2", group=group)
    acc.spend(0.2, n_labels=10, description="other")
    assert acc.spent_epsilon == pytest.approx(1.2)


def test_exceeding_spend_raises_and_records_nothing():
    acc = BudgetAccountant(epsilon=1.0)
    acc.spend(0.8, n_labels=1, description="a")
    with pytest.raises(BudgetExceededError):
        acc.spend(0.3, n_labels=1, description="b")
    assert len(acc.ledger) == 1
    acc.spend(0.2, n_labels=1, description="exactly the rest")  # reaching the budget is fine
    assert acc.remaining_epsilon == pytest.approx(0.0)


def test_delta_budget():
    acc = BudgetAccountant(epsilon=10.0)  # delta budget 0
    with pytest.raises(BudgetExceededError):
        acc.spend(0.1, 1e-6, n_labels=1, description="gaussian")


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_invalid_budget(bad):
    with pytest.raises(ValueError):
        BudgetAccountant(epsilon=bad)


def test_copies_share_the_ledger():
    acc = BudgetAccountant()
    assert copy.copy(acc) is acc and copy.deepcopy(acc) is acc
    mech = Laplace(1.0, bounds=(0, 1), accountant=acc)
    cloned = clone(mech)
    assert cloned.accountant is acc
    restored = pickle.loads(pickle.dumps(acc))
    restored.spend(0.25, n_labels=3, description="from a pickled copy")
    assert acc.spent_epsilon == pytest.approx(0.25)


def test_mechanism_over_budget_raises_before_randomizing():
    acc = BudgetAccountant(epsilon=1.5)
    mech = Laplace(1.0, bounds=(0, 1), accountant=acc, random_state=0)
    mech.fit_transform(np.zeros(5))
    state_before = mech._rng.bit_generator.state
    with pytest.raises(BudgetExceededError):
        mech.transform(np.zeros(5))
    assert mech._rng.bit_generator.state == state_before  # no noise was drawn
    assert acc.spent_epsilon == pytest.approx(1.0)
    with pytest.raises(BudgetExceededError):  # fit of a fresh mechanism refuses early too
        Laplace(1.0, bounds=(0, 1), accountant=acc).fit(np.zeros(5))


def _ttr_search(acc, n_jobs):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = np.clip(X @ [1.0, -1.0, 0.5] + rng.normal(size=60), -5, 5)
    model = TransformedTargetRegressor(
        regressor=Ridge(),
        transformer=Laplace(bounds=(-5.0, 5.0), accountant=acc, random_state=0),
        check_inverse=False,
    )
    grid = {"transformer__epsilon": [0.5, 1.0, 2.0]}
    search = GridSearchCV(model, grid, cv=3, n_jobs=n_jobs).fit(X, y)
    return search


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_grid_search_is_fully_charged(n_jobs):
    acc = BudgetAccountant()
    search = _ttr_search(acc, n_jobs)
    # 3 epsilons x 3 folds, each fold re-privatizes its training labels, plus the refit.
    expected = 3 * (0.5 + 1.0 + 2.0) + search.best_params_["transformer__epsilon"]
    assert acc.spent_epsilon == pytest.approx(expected)
    assert len(acc.ledger) == 10


def test_cross_val_score_is_fully_charged():
    acc = BudgetAccountant()
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 2))
    y = rng.integers(0, 3, size=40)
    from sklearn.linear_model import LogisticRegression

    model = TransformedTargetRegressor(
        regressor=LogisticRegression(),
        transformer=RandomizedResponse(0.5, classes=[0, 1, 2], accountant=acc),
        check_inverse=False,
    )
    cross_val_score(model, X, y, cv=4)
    assert acc.spent_epsilon == pytest.approx(4 * 0.5)
