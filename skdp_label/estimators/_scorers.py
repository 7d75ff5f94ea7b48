"""Scorers that never look at true labels: model selection on noisy labels.

Once labels are randomized, anything computed from the noisy labels and the
public features is post-processing and costs no budget. Tuning on the
noisy labels therefore needs scores whose *expectation* is the true-label
score:

* Regression with an unbiased mechanism (E[y~ | y] = y): for a prediction
  f, E[(f - y~)^2 | y] = (f - y)^2 + Var(y~ | y). With h such that
  E[h(y~) | y] = y^2, the estimate f^2 - 2 f y~ + h(y~) is unbiased for
  (f - y)^2. For additive noise of variance s^2, h(y~) = y~^2 - s^2 (noisy
  MSE minus the noise variance); for a discrete mechanism h solves
  T h = y^2 with T its transition matrix.
* Classification with an invertible transition matrix T (e.g. randomized
  response): with G = T^-1, E[G[y~, f] | y] = 1{f = y}, so averaging
  G[y~_i, f_i] estimates the true accuracy (debiased accuracy).
"""

import math

import numpy as np
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ..mechanisms._validation import encode_classes
from ..mechanisms.classic._additive import BaseAdditiveMechanism, BaseStaircaseFamily, Gaussian
from ..mechanisms.classic._noise import staircase_moment

__all__ = [
    "unbiased_square_estimator",
    "unbiased_mse",
    "debiased_accuracy",
    "unbiased_mse_scorer",
    "debiased_accuracy_scorer",
]

_UNBIASED_RTOL = 1e-8


def _additive_noise_variance(mechanism):
    """Variance of an unclipped additive mechanism's noise (label scale)."""
    g = mechanism.granularity_
    if isinstance(mechanism, Gaussian):
        return float(mechanism.sigma_) ** 2
    lam, width, r = mechanism._staircase(mechanism.sensitivity_units_)
    if width == 1:
        # Discrete Laplace, P(Z = z) ~ exp(-lam |z|): E[Z^2] = 2b / (1 - b)^2 with
        # b = exp(-lam), in closed form (lam may be ~2^-20: too many terms to sum).
        return 2.0 * math.exp(-lam) / math.expm1(-lam) ** 2 * g * g
    return float(np.ravel(staircase_moment(lam, width, r, 2))[0]) * g * g


def unbiased_square_estimator(mechanism):
    """A function h with E[h(y~) | y] = y^2 for a fitted unbiased mechanism.

    Parameters
    ----------
    mechanism : fitted label mechanism
        An additive mechanism with ``clip=False``, or a discrete mechanism
        (``transition_matrix_``) whose outputs average to the input.

    Returns
    -------
    h : callable
        Maps noisy labels to unbiased estimates of the squared true labels.

    Raises
    ------
    ValueError
        If the mechanism is biased (e.g. clipped outputs) or its noise is
        unknown.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms import Laplace
    >>> mech = Laplace(epsilon=1.0, bounds=(0.0, 1.0), clip=False).fit([0.5])
    >>> h = unbiased_square_estimator(mech)
    >>> round(float(h(np.array([0.0]))[0]), 3)  # 0 - 2 (b / eps)^2
    -2.0
    """
    check_is_fitted(mechanism)
    name = type(mechanism).__name__
    if isinstance(mechanism, BaseAdditiveMechanism):
        if mechanism.clip:
            raise ValueError(
                f"{name}(clip=True) clips its outputs, which biases them; use clip=False for "
                "unbiased noisy labels."
            )
        if not isinstance(mechanism, (BaseStaircaseFamily, Gaussian)):
            raise ValueError(f"the noise variance of {name} is unknown.")
        variance = _additive_noise_variance(mechanism)
        return lambda y_noisy: np.asarray(y_noisy, dtype=np.float64) ** 2 - variance
    try:
        matrix = np.asarray(mechanism.transition_matrix_, dtype=np.float64)
        inputs = np.asarray(mechanism.input_values_, dtype=np.float64)
        outputs = np.asarray(mechanism.output_values_, dtype=np.float64)
    except (AttributeError, ValueError, TypeError):
        raise ValueError(
            f"{name} exposes neither its noise variance nor a numeric transition matrix."
        ) from None
    scale = max(float(np.abs(inputs).max()), 1.0)
    if np.max(np.abs(matrix @ outputs - inputs)) > _UNBIASED_RTOL * scale:
        raise ValueError(f"{name} is biased (E[y~ | y] != y); no unbiased MSE estimate exists.")
    h, *_ = np.linalg.lstsq(matrix, inputs**2, rcond=None)
    if np.max(np.abs(matrix @ h - inputs**2)) > 1e-6 * scale**2:
        raise ValueError(f"no unbiased estimator of y^2 exists for {name}'s outputs.")

    order = np.argsort(outputs, kind="stable")
    sorted_outputs, sorted_h = outputs[order], h[order]

    def estimate(y_noisy):
        y_noisy = np.asarray(y_noisy, dtype=np.float64)
        idx = np.clip(np.searchsorted(sorted_outputs, y_noisy), 0, outputs.size - 1)
        if np.any(sorted_outputs[idx] != y_noisy):
            raise ValueError(f"noisy labels are not among {name}'s output values.")
        return sorted_h[idx]

    return estimate


def unbiased_mse(y_noisy, y_pred, mechanism, sample_weight=None):
    """Unbiased estimate of the true-label MSE from noisy labels.

    Parameters
    ----------
    y_noisy : array-like of shape (n_samples,)
        Labels randomized by ``mechanism``.
    y_pred : array-like of shape (n_samples,)
        Predictions (from a model that did not see ``y_noisy``'s true labels).
    mechanism : fitted unbiased label mechanism
    sample_weight : array-like, optional

    Returns
    -------
    mse : float
        Its expectation over the label noise is the true MSE (it may be
        negative on small samples).
    """
    y_noisy = column_or_1d(y_noisy).astype(np.float64)
    y_pred = column_or_1d(y_pred).astype(np.float64)
    h = unbiased_square_estimator(mechanism)
    per_example = y_pred**2 - 2.0 * y_pred * y_noisy + h(y_noisy)
    return float(np.average(per_example, weights=sample_weight))


def debiased_accuracy(y_noisy, y_pred, mechanism, sample_weight=None):
    """Unbiased estimate of the true-label accuracy from noisy labels.

    Uses G = T^-1 for the mechanism's square transition matrix T (over the
    same classes in and out): E[G[y~, f] | y] = 1{f = y}.

    Parameters
    ----------
    y_noisy : array-like of shape (n_samples,)
    y_pred : array-like of shape (n_samples,)
    mechanism : fitted classification mechanism (e.g. RandomizedResponse)
    sample_weight : array-like, optional

    Returns
    -------
    accuracy : float

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms import RandomizedResponse
    >>> rr = RandomizedResponse(epsilon=1.0, classes=[0, 1, 2], random_state=0)
    >>> y = np.repeat([0, 1, 2], 20_000)
    >>> y_noisy = rr.fit_transform(y)
    >>> bool(abs(debiased_accuracy(y_noisy, y, rr) - 1.0) < 0.03)  # a perfect predictor
    True
    """
    check_is_fitted(mechanism)
    name = type(mechanism).__name__
    matrix = np.asarray(getattr(mechanism, "transition_matrix_", None), dtype=np.float64)
    values = mechanism.input_values_
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1] or not np.array_equal(
        values, mechanism.output_values_
    ):
        raise ValueError(f"{name} has no square transition matrix over its classes.")
    if np.linalg.cond(matrix) > 1e12:
        raise ValueError(f"{name}'s transition matrix is singular: accuracy cannot be debiased.")
    inverse = np.linalg.inv(matrix)
    noisy_codes = encode_classes(column_or_1d(y_noisy), values)
    pred_codes = encode_classes(column_or_1d(y_pred), values)
    return float(np.average(inverse[noisy_codes, pred_codes], weights=sample_weight))


class _NoisyLabelScorer:
    """Scorer ``(estimator, X, y_noisy)`` built on one of the estimates above."""

    def __init__(self, metric, mechanism, sign):
        self.metric = metric
        self.mechanism = mechanism
        self.sign = sign

    def __call__(self, estimator, X, y_noisy, sample_weight=None):
        y_pred = estimator.predict(X)
        return self.sign * self.metric(y_noisy, y_pred, self.mechanism, sample_weight=sample_weight)

    def __repr__(self):
        return f"{self.metric.__name__}_scorer({type(self.mechanism).__name__})"


def unbiased_mse_scorer(mechanism):
    """Scorer for model selection on noisy regression labels (no budget).

    Returns the negated :func:`unbiased_mse` (greater is better, like
    ``'neg_mean_squared_error'``), to pass as ``scoring=`` to
    ``GridSearchCV`` or ``cross_val_score`` fitted on the noisy labels.

    Parameters
    ----------
    mechanism : fitted unbiased label mechanism
        The one that produced the noisy labels.

    Returns
    -------
    scorer : callable

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from sklearn.model_selection import GridSearchCV
    >>> from skdp_label.mechanisms import Laplace
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(size=(2000, 2))
    >>> y = X @ [3.0, 1.0]
    >>> mech = Laplace(epsilon=2.0, bounds=(0.0, 4.0), clip=False, random_state=0)
    >>> y_noisy = mech.fit_transform(y)  # the only release of y
    >>> search = GridSearchCV(Ridge(), {"alpha": [0.1, 1e4]},
    ...                       scoring=unbiased_mse_scorer(mech)).fit(X, y_noisy)
    >>> search.best_params_
    {'alpha': 0.1}
    """
    check_is_fitted(mechanism)
    unbiased_square_estimator(mechanism)  # fail now if the mechanism is biased
    return _NoisyLabelScorer(unbiased_mse, mechanism, -1.0)


def debiased_accuracy_scorer(mechanism):
    """Scorer for model selection on noisy class labels (no budget).

    Returns :func:`debiased_accuracy` as a scorer for ``GridSearchCV`` or
    ``cross_val_score`` fitted on the noisy labels.

    Parameters
    ----------
    mechanism : fitted classification mechanism with an invertible
        transition matrix (e.g. RandomizedResponse).

    Returns
    -------
    scorer : callable
    """
    return _NoisyLabelScorer(debiased_accuracy, mechanism, 1.0)
