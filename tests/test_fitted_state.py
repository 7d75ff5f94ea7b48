"""What fit computed is what transform samples: the fitted attributes are bound.

A release charges epsilon for the mechanism ``fit`` computed. Until this
rule, only the *parameters* were bound to the fit (docs/randomness.md, rule
5): a fitted attribute set or edited afterwards (a transition matrix, a
noise's sensitivity in grid units) was sampled as it was, at the fit's
charge, and an edit in place left the sampler's cached tables stale. Now
``fit`` binds every public fitted attribute (arrays by identity, made
read-only; scalars by value) and ``transform`` refuses, before the charge,
a mechanism whose attributes are no longer the fit's.
"""

import copy
import io
import pickle
import warnings

import joblib
import numpy as np
import pytest

from skdp_label import BudgetAccountant, PrivacyLeakWarning
from skdp_label._warmup import _public_inputs
from skdp_label.mechanisms import Laplace, get_mechanism_class, mechanism_names

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")


def _fitted(name, accountant=None, n=2_000):
    kwargs, column = _public_inputs(name)
    column = np.asarray(column)[:n]
    mech = get_mechanism_class(name)(epsilon=1.0, random_state=3, accountant=accountant, **kwargs)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        mech.fit(column)
    return mech, column


def _tampered(value):
    """Another value of the same kind (what an edit after fit would leave)."""
    if isinstance(value, np.ndarray):
        other = value.copy()
        flat = other.reshape(-1)
        if other.dtype.kind in "fc":
            flat[0] = flat[0] * 0.5 + 1.0
        elif other.dtype.kind in "iub":
            flat[0] = 1 - flat[0] if other.dtype.kind == "b" else flat[0] + 1
        else:
            flat[0] = flat[-1] if flat.size > 1 and flat[-1] != flat[0] else flat[0] * 2
        return other
    if value is None:
        return 0.0
    if isinstance(value, bool):
        return not value
    if isinstance(value, (int, float, np.integer, np.floating)):
        return type(value)(value * 2 + 1)
    if isinstance(value, str):
        return value + "x"
    if isinstance(value, tuple):
        return tuple(reversed(value)) + (0,)
    return copy.copy(value)  # an equal copy: bound by identity, so refused too


@pytest.mark.parametrize("name", sorted(mechanism_names()))
def test_every_fitted_attribute_is_bound_before_the_charge(name):
    acc = BudgetAccountant(delta=0.5)
    mech, y = _fitted(name, acc)
    bound = dict(mech._fit_state)
    assert bound, "fit binds its attributes"
    assert not {"epsilon_spent_", "delta_spent_", "charges_"} & set(bound)
    expected = mech.transform(y)
    spent = acc.spent_epsilon
    for attribute, value in bound.items():
        if isinstance(value, np.ndarray):
            assert not value.flags.writeable, attribute
            if value.size:
                first = (0,) * value.ndim
                with pytest.raises(ValueError, match="read-only"):
                    value[first] = value[first]
        setattr(mech, attribute, _tampered(value))
        with pytest.raises(ValueError, match=rf"fitted attribute\(s\) {attribute} changed since fit"):
            mech.transform(y)
        assert acc.spent_epsilon == spent, attribute  # refused before anything is charged
        delattr(mech, attribute)
        with pytest.raises(ValueError, match=rf"{attribute} changed since fit"):
            mech.transform(y)
        setattr(mech, attribute, value)
    np.testing.assert_array_equal(mech.transform(y), expected)  # the fit's own state samples


def _joblib_round_trip(mech, mmap_mode, tmp_path):
    path = tmp_path / "mech.joblib"
    joblib.dump(mech, path)
    return joblib.load(path, mmap_mode=mmap_mode)


@pytest.mark.parametrize("name", ["unbiased", "rr-on-bins", "laplace", "gaussian", "rr-top-k", "rqm"])
@pytest.mark.parametrize("how", ["pickle", "deepcopy", "joblib", "joblib-mmap"])
def test_copies_stay_bound_and_sample_the_same_release(name, how, tmp_path):
    mech, y = _fitted(name)
    expected = mech.transform(y)
    if how == "pickle":
        other = pickle.loads(pickle.dumps(mech))
    elif how == "deepcopy":
        other = copy.deepcopy(mech)
    else:  # joblib stores every array apart: the bound copy and the attribute are two arrays
        other = _joblib_round_trip(mech, "r" if how == "joblib-mmap" else None, tmp_path)
    np.testing.assert_array_equal(other.transform(y), expected)
    for attribute, value in other._fit_state.items():
        if isinstance(value, np.ndarray):
            assert getattr(other, attribute) is value  # bound again to the loaded array
            assert not value.flags.writeable
    arrays = [k for k, v in other._fit_state.items() if isinstance(v, np.ndarray) and v.size]
    if arrays:
        setattr(other, arrays[0], _tampered(getattr(other, arrays[0])))
        with pytest.raises(ValueError, match=f"{arrays[0]} changed since fit"):
            other.transform(y)


def test_a_tampered_pickle_is_refused():
    mech, y = _fitted("rr-on-bins")
    state = mech.__getstate__()
    state["transition_matrix_"] = np.full_like(state["transition_matrix_"], 0.0)
    np.fill_diagonal(state["transition_matrix_"][:, : state["transition_matrix_"].shape[0]], 1.0)
    loaded = type(mech).__new__(type(mech))
    loaded.__setstate__(state)
    with pytest.raises(ValueError, match="transition_matrix_ changed since fit"):
        loaded.transform(y)


def test_a_pickle_of_an_earlier_version_is_bound_to_what_it_holds():
    mech, y = _fitted("unbiased")
    expected = mech.transform(y)
    state = {k: v for k, v in mech.__getstate__().items() if k != "_fit_state"}
    old = type(mech).__new__(type(mech))
    old.__setstate__(state)
    assert old._fit_state and not old.transition_matrix_.flags.writeable
    np.testing.assert_array_equal(old.transform(y), expected)
    old.transition_matrix_ = old.transition_matrix_[::-1, ::-1].copy()
    with pytest.raises(ValueError, match="transition_matrix_ changed since fit"):
        old.transform(y)


def test_refit_rebinds_and_a_failed_fit_leaves_nothing_bound_to_sample():
    mech, y = _fitted("rr-on-bins")
    first = mech._fit_state["transition_matrix_"]
    mech.fit(y)
    assert mech._fit_state["transition_matrix_"] is not first
    assert mech._fit_state["transition_matrix_"] is mech.transition_matrix_
    mech.transform(y)


def test_the_attack_the_binding_stops():
    # Mutation: without the binding, a Laplace whose sensitivity in grid units is
    # edited after fit releases labels with a tiny fraction of the noise charged for.
    y = np.full(5_000, 5.0)
    mech = Laplace(1.0, bounds=(0.0, 10.0), clip=False, random_state=0).fit(y)
    honest = np.std(mech.transform(y) - y)
    mech.sensitivity_units_ = 1
    with pytest.raises(ValueError, match="sensitivity_units_ changed since fit"):
        mech.transform(y)
    mech._fit_state = None  # the check as it was before: attributes unbound
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        leaked = np.std(mech.transform(y) - y)
    assert leaked < honest / 100  # the edit would have removed almost all the noise


def test_parameters_and_counts_still_change_freely():
    mech, y = _fitted("laplace")
    mech.set_params(random_state=9)  # unbound parameter
    mech.transform(y)
    mech.transform(y)  # charges_ / epsilon_spent_ grow: not bound
    assert len(mech.charges_) >= 2
    buf = io.BytesIO()
    pickle.dump(mech, buf)
    assert pickle.loads(buf.getvalue()).transform(y).shape == y.shape
