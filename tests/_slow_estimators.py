"""A deliberately slow estimator for the study's time limit (importable by the
study's spawned worker: conftest puts tests/ on sys.path)."""

import time

import numpy as np
from sklearn.base import BaseEstimator, RegressorMixin
from sklearn.linear_model import Ridge


class SlowOnFractionalLabels(RegressorMixin, BaseEstimator):
    """Ridge that sleeps ``delay`` seconds when its labels are not all integers
    (e.g. Laplace-noised), and fits at once on integer labels."""

    def __init__(self, delay=120.0):
        self.delay = delay

    def fit(self, X, y):
        if np.any(np.asarray(y) != np.round(y)):
            time.sleep(self.delay)
        self.model_ = Ridge(alpha=0.1).fit(X, y)
        return self

    def predict(self, X):
        return self.model_.predict(X)
