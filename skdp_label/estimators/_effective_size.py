"""How many noisy labels one prediction of a base estimator averages (n_eff).

Used by ``mechanism='auto'`` (docs/auto.md). Read off the estimator's public
hyper-parameters and the public shape of ``X``; never off the labels.
"""

from numbers import Integral, Real

from ..mechanisms.auto import default_effective_size

__all__ = ["effective_sample_size"]

# Linear models: every coefficient is fitted from all rows.
_LINEAR_MODULES = ("sklearn.linear_model",)


def _leaf_size(value, n_samples):
    if isinstance(value, Integral):
        return float(value)
    if isinstance(value, Real):  # a fraction of the rows (scikit-learn's convention)
        return float(value) * n_samples
    return None


def effective_sample_size(estimator, n_samples, n_features):
    """Labels one prediction of ``estimator`` averages over, from public facts.

    * a ``Pipeline`` (or any object with ``steps``): its last step;
    * k nearest neighbours: ``n_neighbors``;
    * trees, forests, (histogram) gradient boosting: ``min_samples_leaf``
      (a fraction is taken of ``n_samples``); a leaf averages at least that
      many labels, and boosting's shrinkage averages further, so this errs
      toward less averaging (toward RR-on-Bins);
    * scikit-learn linear models: ``n_samples / (n_features + 1)`` (each of
      the ``n_features + 1`` parameters is fitted from all rows);
    * anything else: ``sqrt(n_samples)``.

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
    steps = getattr(estimator, "steps", None)
    if steps:
        return effective_sample_size(steps[-1][1], n_samples, n_features)
    params = estimator.get_params(deep=False) if hasattr(estimator, "get_params") else {}
    size = None
    if "n_neighbors" in params and isinstance(params["n_neighbors"], Integral):
        size = float(params["n_neighbors"])
    elif "min_samples_leaf" in params:
        size = _leaf_size(params["min_samples_leaf"], n_samples)
    elif type(estimator).__module__.startswith(_LINEAR_MODULES):
        size = n_samples / (n_features + 1.0)
    if size is None:
        size = default_effective_size(n_samples)
    return float(min(max(size, 1.0), max(n_samples, 1)))
