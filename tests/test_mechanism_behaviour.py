"""Behaviour every mechanism shares: validation, accounting, randomness."""

import numpy as np
import pytest

from skdp_label import BudgetAccountant
from skdp_label.mechanisms import (
    DiscreteLaplace,
    DiscreteStaircase,
    ExponentialMechanism,
    Gaussian,
    Laplace,
    RandomizedResponse,
    Staircase,
    make_mechanism,
    mechanism_names,
)

REAL = [
    lambda **kw: Laplace(bounds=(0.0, 10.0), **kw),
    lambda **kw: Staircase(bounds=(0.0, 10.0), **kw),
    lambda **kw: Gaussian(bounds=(0.0, 10.0), **kw),
    lambda **kw: ExponentialMechanism(bounds=(0.0, 10.0), **kw),
    lambda **kw: DiscreteLaplace(bounds=(0, 10), **kw),
    lambda **kw: DiscreteStaircase(bounds=(0, 10), **kw),
    lambda **kw: RandomizedResponse(classes=np.arange(11), **kw),
]
IDS = ["Laplace", "Staircase", "Gaussian", "Exponential", "DiscreteLaplace", "DiscreteStaircase", "RR"]


@pytest.mark.parametrize("make", REAL, ids=IDS)
@pytest.mark.parametrize(
    "bad",
    [
        [1.0, np.nan],
        [1.0, np.inf],
        [1.0, 11.0],
        [-1.0, 2.0],
        [],
        np.ones((2, 2, 2)),
        ["a", "b"],
    ],
    ids=["nan", "inf", "above", "below", "empty", "3d", "strings"],
)
def test_bad_labels_rejected_before_anything_is_spent(make, bad, monkeypatch):
    acc = BudgetAccountant(delta=0.5)  # room for the Gaussian's delta
    mech = make(accountant=acc)
    with pytest.raises(ValueError):
        mech.fit_transform(bad)
    assert acc.ledger == []
    # Same through transform on a fitted mechanism: nothing charged, no noise drawn.
    mech.fit([1, 2])
    drawn = []
    monkeypatch.setattr(mech, "_release_generator", lambda *args: drawn.append(args))
    with pytest.raises(ValueError):
        mech.transform(bad)
    assert acc.ledger == [] and drawn == []


@pytest.mark.parametrize("make", REAL, ids=IDS)
@pytest.mark.parametrize("eps", [0.0, -1.0, np.nan, "1"])
def test_bad_epsilon(make, eps):
    acc = BudgetAccountant(delta=0.5)
    with pytest.raises((ValueError, TypeError)):
        make(epsilon=eps, accountant=acc).fit([1.0])
    assert acc.ledger == []


@pytest.mark.parametrize(
    "mech",
    [Laplace(), Staircase(bounds=(3, 1)), DiscreteLaplace(bounds=(0.5, 2)), RandomizedResponse(), Gaussian(bounds=(0, np.inf))],
    ids=["no bounds", "reversed", "non-integer", "no classes", "infinite"],
)
def test_public_inputs_are_required(mech):
    with pytest.raises(ValueError, match="bounds|classes"):
        mech.fit([1.0])


def test_integer_mechanisms_reject_non_integers():
    with pytest.raises(ValueError, match="integer"):
        DiscreteLaplace(bounds=(0, 10)).fit([1.5])


@pytest.mark.parametrize("make", REAL, ids=IDS)
def test_each_transform_is_charged(make):
    acc = BudgetAccountant(delta=0.5)  # room for the Gaussian's delta
    mech = make(epsilon=0.5, accountant=acc, random_state=0)
    y = np.array([1, 2, 3, 4])
    first = mech.fit_transform(y)
    assert mech.epsilon_spent_ == pytest.approx(0.5)
    second = mech.transform(y)
    assert mech.epsilon_spent_ == pytest.approx(1.0)
    assert acc.spent_epsilon == pytest.approx(1.0)
    assert first.shape == second.shape == y.shape


def test_several_columns_cost_epsilon_each():
    acc = BudgetAccountant()
    mech = Laplace(0.5, bounds=(0, 1), accountant=acc, random_state=0)
    out = mech.fit_transform(np.full((7, 3), 0.5))
    assert out.shape == (7, 3)
    assert mech.epsilon_spent_ == pytest.approx(1.5)
    assert acc.spent_epsilon == pytest.approx(1.5)
    # Columns get independent noise.
    assert not np.allclose(out[:, 0], out[:, 1])


def test_two_d_column_in_two_d_column_out():
    out = Laplace(1.0, bounds=(0, 1), random_state=0).fit_transform(np.full((5, 1), 0.3))
    assert out.shape == (5, 1)


def test_random_state():
    y = np.linspace(0, 1, 50)
    a = Laplace(1.0, bounds=(0, 1), random_state=7).fit_transform(y)
    b = Laplace(1.0, bounds=(0, 1), random_state=7).fit_transform(y)
    np.testing.assert_array_equal(a, b)
    c = Laplace(1.0, bounds=(0, 1)).fit_transform(y)
    d = Laplace(1.0, bounds=(0, 1)).fit_transform(y)
    assert not np.array_equal(c, d)  # OS entropy: two draws differ


def test_inverse_transform_is_identity():
    mech = Laplace(1.0, bounds=(0, 1)).fit([0.5])
    y = np.array([0.1, 0.7])
    np.testing.assert_array_equal(mech.inverse_transform(y), y)


def test_string_classes():
    rr = RandomizedResponse(1.0, classes=["b", "a", "c"], random_state=0)
    out = rr.fit_transform(np.array(["a", "b", "c", "a"]))
    assert set(out) <= {"a", "b", "c"}
    assert list(rr.input_values_) == ["b", "a", "c"]  # the declared order


def test_fitted_objects_keep_no_labels():
    y = np.array([0.123456, 0.654321, 0.777777])  # off every public grid
    for mech in [Laplace(1.0, bounds=(0, 1)), ExponentialMechanism(1.0, bounds=(0, 1)), Gaussian(bounds=(0, 1))]:
        mech.fit_transform(y)
        for value in vars(mech).values():
            if isinstance(value, np.ndarray) and value.dtype.kind == "f":
                assert not np.isin(y, value).any()


def test_registry_names():
    names = mechanism_names("regression")
    for name in ["laplace", "discrete-laplace", "staircase", "discrete-staircase", "gaussian", "exponential"]:
        assert name in names
    assert "rr" in mechanism_names("classification")
    mech = make_mechanism("staircase", epsilon=2.0, bounds=(0, 1), classes=None)
    assert isinstance(mech, Staircase) and mech.epsilon == 2.0
    with pytest.raises(ValueError, match="Unknown"):
        make_mechanism("no-such-mechanism")
