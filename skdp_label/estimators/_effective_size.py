"""How many noisy labels one prediction of a base estimator averages (n_eff).

Used by ``mechanism='auto'`` (docs/auto.md). Read off the estimator's public
hyper-parameters, or measured on the public features with synthetic labels;
never on the labels.
"""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, clone

from ..mechanisms.auto import default_effective_size
from ..utils._random import public_fingerprint, simulation_generator

__all__ = ["effective_sample_size", "simulated_effective_size"]

# Linear models: every coefficient is fitted from all rows.
_LINEAR_MODULES = ("sklearn.linear_model",)


def _leaf_size(value, n_samples):
    if isinstance(value, Integral):
        return float(value)
    if isinstance(value, Real):  # a fraction of the rows (scikit-learn's convention)
        return float(value) * n_samples
    return None


def simulated_effective_size(estimator, X):
    """``1 / mean(prediction^2)`` of ``estimator`` fitted on pure noise.

    A clone is fitted on the public features ``X`` with synthetic labels of
    unit variance drawn independently of everything private (from a
    generator seeded by the public shape and content of ``X``), and its
    in-sample predictions' mean square is the variance a unit of label noise
    leaves in a prediction: ``1 / n_eff`` by definition. Costs one fit of
    the base estimator and no budget.

    Parameters
    ----------
    estimator : estimator
        Unfitted regressor (cloned).
    X : array-like of shape (n_samples, n_features)
        Public features.

    Returns
    -------
    n_eff : float
        In ``[1, n_samples]``.
    """
    n = X.shape[0]
    values = X.to_numpy() if hasattr(X, "to_numpy") else X
    sparse = hasattr(values, "tocsr")
    context = (n,) if sparse else public_fingerprint("effective sample size", values)
    noise = simulation_generator(*context).standard_normal(n)
    model = clone(estimator)
    # An unseeded estimator (a random forest) is seeded from the same public
    # context: n_eff, a parameter of the mechanism and so of its seeded noise
    # stream, is then one function of X (a seeded release reproduces).
    params = model.get_params()
    unseeded = [k for k, v in params.items() if k.endswith("random_state") and v is None]
    if unseeded:
        seed = int(simulation_generator(*context, "estimator").integers(2**31))
        model.set_params(**dict.fromkeys(unseeded, seed))
    prediction = np.asarray(model.fit(X, noise).predict(X), dtype=np.float64)
    mean_square = float(np.mean(prediction**2))
    return float(min(max(1.0 / mean_square, 1.0), n)) if mean_square > 0 else float(n)


def effective_sample_size(
    estimator: BaseEstimator, n_samples: int, n_features: int, X: ArrayLike | None = None,
) -> float:
    """Labels one prediction of ``estimator`` averages over, from public facts.

    * a ``Pipeline`` (or any object with ``steps``): its last step's rule
      (the simulation, when used, runs the whole pipeline);
    * k nearest neighbours: ``n_neighbors``;
    * scikit-learn linear models: ``n_samples / (n_features + 1)`` (each of
      the ``n_features + 1`` parameters is fitted from all rows);
    * anything else, when the public features ``X`` are given: measured by
      :func:`simulated_effective_size` (one extra fit on synthetic labels);
      without ``X``: ``min_samples_leaf`` of trees and boosting (a fraction
      taken of ``n_samples``), else ``sqrt(n_samples)``. Boosting overfits
      more than its leaf size suggests (on 353 diabetes rows
      ``HistGradientBoostingRegressor`` averages about 4 labels, not 20),
      which is why the measurement is preferred.

    The result is clipped to ``[1, n_samples]``.

    Examples
    --------
    >>> from sklearn.neighbors import KNeighborsRegressor
    >>> from sklearn.linear_model import Ridge
    >>> from skdp_label.estimators import effective_sample_size
    >>> effective_sample_size(KNeighborsRegressor(n_neighbors=15), 1000, 8)
    15.0
    >>> effective_sample_size(Ridge(), 1000, 9)
    100.0
    """
    last = estimator
    while getattr(last, "steps", None):
        last = last.steps[-1][1]
    params = last.get_params(deep=False) if hasattr(last, "get_params") else {}
    size = None
    if "n_neighbors" in params and isinstance(params["n_neighbors"], Integral):
        size = float(params["n_neighbors"])
    elif type(last).__module__.startswith(_LINEAR_MODULES):
        size = n_samples / (n_features + 1.0)
    elif X is not None:
        size = simulated_effective_size(estimator, X)
    elif "min_samples_leaf" in params:
        size = _leaf_size(params["min_samples_leaf"], n_samples)
    if size is None:
        size = default_effective_size(n_samples)
    return float(min(max(size, 1.0), max(n_samples, 1)))
