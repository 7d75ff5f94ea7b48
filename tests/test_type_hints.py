"""Type hints on the public API resolve at run time: no type checker is
needed to trust them, and none names something undefined."""

import inspect
import typing

import pytest

import skdp_label
from skdp_label import estimators, plotting, release, study
from skdp_label.mechanisms import (
    auto, auto_grid_points, get_mechanism_class, mechanism_names, unbiased,
)
from skdp_label.utils import _progress, _random, _repr

# Names that the hints take from optional dependencies (imported only for
# type checkers); supplied here so that everything else must resolve.
pd = pytest.importorskip("pandas")
mpl_axes = pytest.importorskip("matplotlib.axes")
OPTIONAL = {"DataFrame": pd.DataFrame, "Axes": mpl_axes.Axes}

# Where mechanisms are hinted.
HINTED_FAMILIES = ("classic._additive", "classic._randomized_response", "classification",
                   "rp_with_prior", "quantization", "unbiased", "bins", "classic._exponential",
                   "auto")


def _public_callables(obj):
    for name, member in inspect.getmembers(obj):
        if name.startswith("_") and name != "__init__":
            continue
        if isinstance(inspect.getattr_static(obj, name, None), property):
            yield name, inspect.getattr_static(obj, name).fget
        elif inspect.isfunction(member) or inspect.ismethod(member):
            yield name, member


def _own_public_callables(obj):
    # Estimators inherit scikit-learn's (unhinted) methods: check only ours.
    for name, func in _public_callables(obj):
        if getattr(func, "__module__", "").startswith("skdp_label"):
            yield name, func


def _hinted_mechanisms():
    for name in mechanism_names():
        cls = get_mechanism_class(name)
        if any(f".{family}" in cls.__module__ for family in HINTED_FAMILIES):
            yield cls


def _check(func, where):
    hints = typing.get_type_hints(func, localns=OPTIONAL)
    params = [p for p in inspect.signature(func).parameters if p not in ("self", "cls")]
    missing = [p for p in params if p not in hints]
    assert not missing, f"{where}: parameters without hints: {missing}"
    assert "return" in hints, f"{where}: no return hint"


@pytest.mark.parametrize("cls", list(_hinted_mechanisms()), ids=lambda c: c.__name__)
def test_mechanism_init_and_public_methods_are_hinted_and_resolve(cls):
    _check(cls.__init__, f"{cls.__name__}.__init__")
    for name in ("fit", "transform", "fit_transform", "inverse_transform", "privacy_report"):
        _check(getattr(cls, name), f"{cls.__name__}.{name}")
    hints = typing.get_type_hints(cls.__init__)
    assert hints["epsilon"] is float and hints["return"] is type(None)


@pytest.mark.parametrize(
    "obj",
    [skdp_label.BudgetAccountant, release.KeyedRelease, release.ReleaseKey,
     plotting.TransitionMatrixDisplay, plotting.JointDensityDisplay,
     plotting.PrivacyUtilityDisplay, _progress.Progress],
    ids=lambda o: o.__name__,
)
def test_public_classes_are_hinted_and_resolve(obj):
    for name, func in _public_callables(obj):
        _check(func, f"{obj.__name__}.{name}")


@pytest.mark.parametrize(
    "func",
    [release.generate_key_file, release.load_key, release.id_row_keys,
     release.mechanism_from_manifest, release.privatize, _random.check_random_state,
     _random.release_generator, _random.derive_random_state, _random.public_fingerprint,
     _random.power_of_two_grid, _repr.format_number, _repr.public_repr,
     _progress.progress_bar, _progress.format_epsilon],
    ids=lambda f: f.__name__,
)
def test_public_functions_are_hinted_and_resolve(func):
    _check(func, func.__name__)


@pytest.mark.parametrize(
    "cls",
    [estimators.LabelDPRegressor, estimators.LabelDPClassifier,
     estimators.DebiasedSGDClassifier, estimators.DebiasedSoftmaxObjective],
    ids=lambda c: c.__name__,
)
def test_estimators_are_hinted_and_resolve(cls):
    checked = [name for name, func in _own_public_callables(cls)]
    assert "__init__" in checked
    for name, func in _own_public_callables(cls):
        _check(func, f"{cls.__name__}.{name}")


@pytest.mark.parametrize(
    "func",
    [getattr(estimators, name) for name in estimators.__all__
     if inspect.isfunction(getattr(estimators, name))]
    + [getattr(module, name) for module in (unbiased, auto) for name in module.__all__
       if inspect.isfunction(getattr(module, name))]
    + [auto_grid_points, study.privacy_utility_study, study.plot_study],
    ids=lambda f: f"{f.__module__.rsplit('.', 1)[-1]}.{f.__name__}",
)
def test_estimator_and_mechanism_functions_are_hinted_and_resolve(func):
    _check(func, f"{func.__module__}.{func.__name__}")


def test_dask_privatize_is_hinted_and_resolves():
    dask_module = pytest.importorskip("skdp_label.dask")
    _check(dask_module.privatize, "skdp_label.dask.privatize")


def test_optional_names_are_the_only_unresolved_ones():
    # Without the optional names, exactly the hints that use them fail.
    with pytest.raises(NameError, match="DataFrame"):
        typing.get_type_hints(skdp_label.BudgetAccountant.to_frame)
    with pytest.raises(NameError, match="Axes"):
        typing.get_type_hints(plotting.TransitionMatrixDisplay.plot)
    typing.get_type_hints(skdp_label.BudgetAccountant.spend)  # no optional name: resolves
