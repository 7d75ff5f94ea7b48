"""scikit-learn's estimator checks over every mechanism in the library."""

import numpy as np
from sklearn.utils.estimator_checks import parametrize_with_checks

import skdp_label.mechanisms as mechanisms

# Checks that cannot hold for a label randomizer, with the reason.
_COMMON_EXPECTED_FAILURES = {
    "check_fit_score_takes_y": (
        "mechanisms transform labels: their first argument is y and the optional second one "
        "is the (ignored) features X"
    ),
    "check_transformer_general": (
        "the check calls fit_transform(X, y=y); the labels are the first argument, so y is "
        "given twice"
    ),
    "check_transformer_data_not_an_array": "same as check_transformer_general",
    "check_dict_unchanged": (
        "every transform is a new release and adds its cost to epsilon_spent_ by design"
    ),
    "check_fit1d": "1-D labels are the normal input of a label mechanism",
}


def _instances():
    """One configured instance per mechanism class exported by the library.

    Check data are real numbers of moderate size (categorical mechanisms get
    non-negative integers), so the public bounds / classes cover them.
    """
    config = {
        "RandomizedResponse": {"classes": np.arange(-1000, 1001)},
        "DiscreteLaplace": {"bounds": (-1000, 1000)},
        "DiscreteStaircase": {"bounds": (-1000, 1000)},
    }
    out = []
    for name in mechanisms.__all__:
        cls = getattr(mechanisms, name)
        if name.startswith("Base") or not isinstance(cls, type):
            continue
        params = config.get(name)
        if params is None:
            params = _default_config(cls)
        out.append(cls(**params))
    return out


def _default_config(cls):
    import inspect

    accepted = inspect.signature(cls.__init__).parameters
    params = {}
    if "bounds" in accepted:
        params["bounds"] = (-1000.0, 1000.0)
    if "resolution" in accepted:
        params["resolution"] = 10.0
    if "classes" in accepted:
        params["classes"] = np.arange(-1000, 1001)
    return params


def _expected_failed_checks(estimator):
    expected = dict(_COMMON_EXPECTED_FAILURES)
    if estimator.__sklearn_tags__().input_tags.categorical:
        # Categorical check data are 2-D integer columns; the 1-D check does not reach us.
        del expected["check_fit1d"]
    expected.update(getattr(estimator, "_expected_failed_checks", lambda: {})())
    return expected


@parametrize_with_checks(_instances(), expected_failed_checks=_expected_failed_checks)
def test_sklearn_compatible(estimator, check):
    check(estimator)


def test_every_mechanism_is_checked():
    names = {type(e).__name__ for e in _instances()}
    exported = {
        n for n in mechanisms.__all__ if not n.startswith("Base") and isinstance(getattr(mechanisms, n), type)
    }
    assert names == exported
