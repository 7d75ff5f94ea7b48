"""Adversarial review of wave 6: fitted state bound to the fit, laws built
below the charged epsilon, tests adapted to numpy 2.4 / scipy 1.17.

Each test is an attack. Those that broke the library were fixed (the test
says how); those that held stay as regression tests.
"""

import copy
import pickle
import warnings

import numpy as np
import pytest

from skdp_label import BudgetAccountant
from skdp_label._warmup import _public_inputs
from skdp_label.mechanisms import (
    AutoRegression,
    RandomizedResponse,
    RRTopK,
    RRWithPrior,
    get_mechanism_class,
    mechanism_names,
)
from skdp_label.release import KeyedRelease, ReleaseKey

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")


def _fitted(name, n=2_000, **extra):
    kwargs, column = _public_inputs(name)
    column = np.asarray(column)[:n]
    mech = get_mechanism_class(name)(epsilon=1.0, random_state=3, **{**kwargs, **extra})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mech.fit(column)
    return mech, column


def _auto(accountant=None):
    y = np.random.default_rng(0).uniform(0, 1, 2_000)
    return AutoRegression(epsilon=1.0, bounds=(0, 1), random_state=0, accountant=accountant).fit(y), y


# -- 1. fitted state bound to the fit -------------------------------------------------


def _identity_matrix(mech):
    """A matrix that outputs each label's nearest output: the labels themselves
    (near enough), released at the fit's charge. What a tamper could sample."""
    inputs, outputs = mech.input_values_, mech.output_values_
    matrix = np.zeros((inputs.size, outputs.size))
    matrix[np.arange(inputs.size), np.abs(inputs[:, None] - outputs[None, :]).argmin(axis=1)] = 1.0
    return matrix


@pytest.mark.parametrize("tamper", ["matrix", "epsilon", "inputs"])
def test_auto_refuses_a_tampered_selected_mechanism_before_the_charge(tamper):
    # BROKE: AutoRegression samples with selected_mechanism_._randomize_column, but
    # bound only which object selected_mechanism_ is; its own fitted attributes and
    # parameters could change after fit (an identity matrix sampled at epsilon = 1:
    # the labels in clear). Fixed: AutoRegression._check_unchanged_since_fit checks
    # the selected mechanism's binding too.
    acc = BudgetAccountant()
    auto, y = _auto(acc)
    selected = auto.selected_mechanism_
    if tamper == "matrix":
        selected.transition_matrix_ = _identity_matrix(selected)
    elif tamper == "epsilon":
        selected.set_params(epsilon=30.0)
    else:
        selected.input_values_ = selected.input_values_.copy()
    spent = acc.spent_epsilon
    with pytest.raises(ValueError, match=r"AutoRegression\.selected_mechanism_: .*changed since fit"):
        auto.transform(y)
    assert acc.spent_epsilon == spent  # refused before the charge


def test_auto_nested_binding_survives_pickle_and_deepcopy():
    # Held (with the fix above): a loaded copy binds the nested mechanism's arrays again.
    auto, y = _auto()
    for clone in (pickle.loads(pickle.dumps(auto)), copy.deepcopy(auto)):
        clone.transform(y)  # unchanged: samples
        selected = clone.selected_mechanism_
        assert not selected.transition_matrix_.flags.writeable
        with pytest.raises(ValueError, match="read-only"):
            selected.transition_matrix_[0, 0] = 1.0
        selected.transition_matrix_ = _identity_matrix(selected)
        with pytest.raises(ValueError, match="selected_mechanism_"):
            clone.transform(y)


def test_keyed_release_of_auto_refuses_a_tampered_selected_mechanism():
    # release.py's randomize calls mech._check_unchanged_since_fit: with the fix
    # it reaches the selected mechanism too (no edit of release.py needed).
    y = np.random.default_rng(1).uniform(0, 1, 500)
    release = KeyedRelease(AutoRegression(1.0, bounds=(0, 1)), ReleaseKey(b"k" * 32), "r6")
    release.add_counts(y, np.arange(y.size))
    release.fit(n_rows=y.size)
    release.randomize(y[:10], np.arange(10))
    selected = release.fitted_.selected_mechanism_
    selected.transition_matrix_ = _identity_matrix(selected)
    with pytest.raises(ValueError, match="selected_mechanism_"):
        release.randomize(y[:10], np.arange(10))


def test_fit_leaves_the_callers_parameter_arrays_writable():
    # BROKE: fit made every public fitted array read-only, and RandomizedResponse's
    # input_values_ *is* the caller's classes array: fit froze the caller's own
    # array (a side effect on a parameter). Fixed: _fitted_state binds a copy of
    # an array that shares memory with a parameter.
    classes = np.array([0, 1, 2, 3])
    for cls in (RandomizedResponse, RRTopK, RRWithPrior):
        mech = cls(epsilon=1.0, classes=classes, random_state=0).fit([0, 1, 2])
        assert classes.flags.writeable, cls.__name__
        assert not np.may_share_memory(mech.input_values_, classes)
        assert not mech.input_values_.flags.writeable
        assert mech.input_values_ is mech.output_values_  # one array stays one array
        mech.transform([0, 1])
        # An edit of the caller's array changes the parameter: refused, as before.
        classes[0] = 7
        with pytest.raises(ValueError, match="parameter"):
            mech.transform([1, 2])
        classes[0] = 0
        mech.transform([1, 2])


def test_old_pickle_of_a_mechanism_given_a_parameter_array_is_bound_on_load():
    # A pickle made before fits were bound holds no _fit_state: it is bound on load,
    # and the copy rule keeps the loaded parameter writable.
    mech = RandomizedResponse(epsilon=1.0, classes=np.array([0, 1, 2]), random_state=0).fit([0, 1])
    state = mech.__getstate__()
    del state["_fit_state"]
    old = RandomizedResponse.__new__(RandomizedResponse)
    old.__setstate__(state)
    assert old.classes.flags.writeable and not old.input_values_.flags.writeable
    old.input_values_ = np.array([0, 1, 5])
    with pytest.raises(ValueError, match="input_values_"):
        old.transform([0, 1])


def _reachable_arrays(obj, path, seen, out):
    if id(obj) in seen:
        return
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        out.append((path, obj))
    elif isinstance(obj, dict):
        for k, v in obj.items():
            _reachable_arrays(v, f"{path}[{k!r}]", seen, out)
    elif isinstance(obj, (list, tuple)):
        for i, v in enumerate(obj):
            _reachable_arrays(v, f"{path}[{i}]", seen, out)
    elif hasattr(obj, "__dict__") and not isinstance(obj, type):
        for k, v in vars(obj).items():
            _reachable_arrays(v, f"{path}.{k}", seen, out)


@pytest.mark.parametrize("name", sorted(mechanism_names()))
def test_no_bound_array_shares_memory_with_a_reachable_writable_array(name):
    # Held: setflags(write=False) on a view leaves its base writable. No bound
    # array is a view of an array reachable from the mechanism (its parameters,
    # private tables, nested objects) that is still writable.
    mech, _ = _fitted(name)
    out = []
    _reachable_arrays(mech, "mech", set(), out)
    for attribute, bound in mech._fit_state.items():
        if not isinstance(bound, np.ndarray):
            continue
        for path, other in out:
            if other is not bound and other.flags.writeable:
                assert not np.may_share_memory(bound, other), (attribute, path)
