"""Warnings about a fit point at the line that called it (issue: a decorator
on fit moved them into the library, where a fixed stacklevel pointed)."""

import warnings

import numpy as np
from sklearn.linear_model import Ridge
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler

from skdp_label import LabelDPRegressor
from skdp_label.mechanisms import Laplace
from skdp_label.utils import PrivacyLeakWarning


def _data():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(400, 3))
    return X, np.clip(50 + 10 * X[:, 0] + rng.normal(size=400), 0, 100)


def _recorded(call):
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call()
    return caught


def test_fit_warnings_point_at_the_callers_line():
    X, y = _data()
    est = LabelDPRegressor(Ridge(), mechanism="rr-on-bins", epsilon=4.0, bounds=(0, 100),
                           random_state=0)
    for call in (lambda: est.fit(X, y),  # direct
                 lambda: make_pipeline(StandardScaler(), est).fit(X, y)):  # through sklearn
        caught = _recorded(call)
        far = [w for w in caught if "chooses by this rule" in str(w.message)]
        leak = [w for w in caught if issubclass(w.category, PrivacyLeakWarning)]
        assert far and leak  # the far-from-best warning and the fixed-seed warning
        assert {w.filename for w in far + leak} == {__file__}


def test_mechanism_warning_points_at_the_callers_line():
    caught = _recorded(lambda: Laplace(epsilon=1.0, bounds=(0, 1), random_state=0)
                       .fit_transform(np.array([0.2, 0.5])))
    leak = [w for w in caught if issubclass(w.category, PrivacyLeakWarning)]
    assert leak and {w.filename for w in leak} == {__file__}
