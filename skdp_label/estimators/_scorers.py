"""Scorers that never look at true labels: model selection on noisy labels.

Once labels are randomized, anything computed from the noisy labels and the
public features is post-processing and costs no budget. Tuning on the
noisy labels therefore needs scores whose *expectation* is the true-label
score. They exist for every mechanism whose noise is known and can be
inverted on its outputs:

* Regression. For a prediction f, (f - y)^2 = f^2 - 2 f y + y^2; with g
  and h such that E[g(y~) | y] = y and E[h(y~) | y] = y^2, the estimate
  f^2 - 2 f g(y~) + h(y~) is unbiased for (f - y)^2. For unclipped additive
  noise of variance s^2, g(y~) = y~ and h(y~) = y~^2 - s^2 (noisy MSE minus
  the noise variance). For a mechanism with a transition matrix T (rows:
  label values, columns: output values), g and h solve T g = y and
  T h = y^2 over its label values (g = the outputs themselves when the
  mechanism is unbiased). They exist when these systems are solvable, e.g.
  for invertible square transitions (exponential mechanism, RR-on-Bins
  and RRWithPrior-regression when every label value keeps its own output),
  and for the unbiased randomizers; they do not when two label values
  share one output distribution (bins merging labels, labels outside a
  top-k set) or the outputs are clipped continuous noise, and the
  estimators then raise ``ValueError``.
* Classification with a transition matrix T of full row rank (e.g.
  randomized response): with G such that T G = I, E[G[y~, f] | y] = 1{f = y},
  so averaging G[y~_i, f_i] estimates the true accuracy (debiased accuracy).

When E[g(y~) | y] = y holds exactly but no h does (the unbiased
randomizers whose transition has rank below its number of label values:
MVU, RQM, OptimalUnbiased fitted on a prior with labels of no mass), the
scorers use the least-squares h instead: E[h(y~) | y] = y^2 + s(y), and the
estimate is off by the mean of s over the rows, which does not depend on
the prediction. Differences between models, and hence model selection, stay
unbiased; the scorer says so in a warning. :func:`unbiased_mse` itself
still refuses: its value is claimed to be the true MSE.

Discrete mechanisms read a label as one of their label values
(``input_values_``): exactly when the labels lie on that grid (e.g. integer
labels with ``resolution=1``). Otherwise, mechanisms that round labels to
the nearest value make the estimate unbiased for the loss to the rounded
label, and those that round at random (the unbiased randomizers) keep
E[g(y~) | y] = y, so the estimate is off by a term that does not depend on
the prediction: differences between models, and hence model selection,
stay unbiased.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils.validation import check_is_fitted, column_or_1d

from ..mechanisms._base import BaseLabelMechanism
from ..mechanisms._validation import encode_classes
from ..mechanisms.classic._additive import BaseAdditiveMechanism, BaseStaircaseFamily, Gaussian
from ..mechanisms.classic._noise import staircase_moment
from ..utils._warnings import warn_caller

__all__ = [
    "unbiased_square_estimator",
    "unbiased_mse",
    "debiased_accuracy",
    "unbiased_mse_scorer",
    "debiased_accuracy_scorer",
    "noisy_label_scorer",
]

# Largest residual |T x - target| accepted, relative to the target's spread (_centred).
_SOLVE_RTOL = 1e-8


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


def _transition(mechanism):
    """``(T, input_values, output_values)`` of a fitted discrete mechanism,
    with columns of equal output value merged (a noisy label is a value, not
    a column)."""
    name = type(mechanism).__name__
    try:
        matrix = np.asarray(mechanism.transition_matrix_, dtype=np.float64)
        inputs = np.asarray(mechanism.input_values_)
        outputs = np.asarray(mechanism.output_values_)
    except (AttributeError, ValueError, TypeError):
        raise ValueError(
            f"{name} exposes neither its noise variance nor a transition matrix: its noise "
            "cannot be inverted."
        ) from None
    if matrix.ndim != 2 or matrix.shape != (inputs.shape[0], outputs.shape[0]):
        raise ValueError(f"{name}'s transition matrix does not match its input and output values.")
    values, column = np.unique(outputs, return_inverse=True)
    if values.shape[0] < outputs.shape[0]:
        merged = np.zeros((matrix.shape[0], values.shape[0]))
        np.add.at(merged.T, column, matrix.T)
        matrix, outputs = merged, values
    return matrix, inputs, outputs


def _solve_exactly(matrix, target):
    """``x`` with ``matrix @ x == target`` up to rounding, or None if none exists.

    Solved for the target less its mean, with the residual accepted relative to
    their difference (:func:`_centred`): the rows of a transition sum to 1, so
    a constant is solved exactly, and the mean added back."""
    center, centred, tolerance = _centred(np.asarray(target, dtype=np.float64))
    x, *_ = np.linalg.lstsq(matrix, centred, rcond=None)
    if not np.all(np.isfinite(x)) or np.max(np.abs(matrix @ x - centred)) > tolerance:
        return None
    return x + center


def _centred(target):
    """(its mean per column, the target less it, the residual accepted): _SOLVE_RTOL
    times the largest centred entry. Not times the target's magnitude: far from 0
    (labels near c = 1e9) that let a bias of up to 1e-8 c (10) pass as rounding."""
    center = target.mean(axis=0)
    centred = target - center
    return center, centred, _SOLVE_RTOL * float(np.abs(centred).max())


def _why_not_invertible(matrix):
    rank = np.linalg.matrix_rank(matrix)
    if rank < matrix.shape[0]:
        return f"has rank {rank} for {matrix.shape[0]} label values"
    return "is too ill-conditioned to invert"


def _not_invertible(name, what, matrix, prefix=""):
    why = _why_not_invertible(matrix)
    if why.startswith("has rank"):
        why += (" (the output distributions of some labels are mixtures of others', e.g. "
                "several labels share one, or they are affine in the label)")
    return ValueError(
        f"{prefix}no unbiased estimate of {what} exists from {name}'s outputs: its transition "
        f"matrix {why}."
    )


def _value_lookup(name, outputs, estimates):
    """Map noisy labels (values among ``outputs``) to ``estimates``."""
    order = np.argsort(outputs, kind="stable")
    sorted_outputs, sorted_estimates = outputs[order], estimates[order]

    def lookup(y_noisy):
        y_noisy = np.asarray(y_noisy, dtype=np.float64)
        idx = np.clip(np.searchsorted(sorted_outputs, y_noisy), 0, outputs.size - 1)
        if np.any(sorted_outputs[idx] != y_noisy):
            raise ValueError(f"noisy labels are not among {name}'s output values.")
        return sorted_estimates[idx]

    return lookup


def _moment_estimators(mechanism, *, shifted=False):
    """``(g, h)`` with E[g(y~) | y] = y and E[h(y~) | y] = y^2, or ValueError.

    ``shifted=True`` accepts, where no exact h exists, the least-squares h:
    E[h(y~) | y] = y^2 + s(y) with s independent of any prediction (module
    notes); g is exact either way."""
    center, g, h_centred = _centred_moment_estimators(mechanism, shifted=shifted)

    def h(y_noisy):  # (y - c)^2 + 2 c y - c^2
        return h_centred(y_noisy) + 2.0 * center * g(y_noisy) - center * center

    return g, h


def _centred_moment_estimators(mechanism, *, shifted=False):
    """``(c, g, h)`` with E[g(y~) | y] = y and E[h(y~) | y] = (y - c)^2 (up to
    s(y) if ``shifted``, as :func:`_moment_estimators`), c a public center of
    the labels: squares of labels far from 0 (1e9) would lose the MSE's digits
    in rounding (an ulp of 1e18 is 128)."""
    check_is_fitted(mechanism)
    name = type(mechanism).__name__
    if isinstance(mechanism, BaseAdditiveMechanism):
        if mechanism.clip and getattr(mechanism, "transition_matrix_", None) is not None:
            return _discrete_moment_estimators(mechanism, shifted)  # clipped integer noise
        if mechanism.clip:
            raise ValueError(
                f"{name}(clip=True) clips its outputs, which biases them, and its clipped "
                "noise has no known inverse; use clip=False for unbiased noisy labels."
            )
        if not isinstance(mechanism, (BaseStaircaseFamily, Gaussian)):
            raise ValueError(f"the noise variance of {name} is unknown.")
        variance = _additive_noise_variance(mechanism)
        center = 0.5 * (float(mechanism._bounds()[0]) + float(mechanism._bounds()[1]))
        return (
            center,
            lambda y_noisy: np.asarray(y_noisy, dtype=np.float64),
            lambda y_noisy: (np.asarray(y_noisy, dtype=np.float64) - center) ** 2 - variance,
        )
    return _discrete_moment_estimators(mechanism, shifted)


def _discrete_moment_estimators(mechanism, shifted=False):
    name = type(mechanism).__name__
    matrix, inputs, outputs = _transition(mechanism)
    inputs, outputs = inputs.astype(np.float64), outputs.astype(np.float64)
    center, centred, tolerance = _centred(inputs)
    if np.max(np.abs(matrix @ (outputs - center) - centred)) <= tolerance:
        g = outputs  # an unbiased mechanism: its outputs estimate the label
    else:
        g = _solve_exactly(matrix, inputs)
        if g is None:
            raise _not_invertible(
                name, "the label", matrix, prefix=f"{name} is biased (E[y~ | y] != y) and "
            )
    h = _solve_exactly(matrix, centred**2)
    if h is None and shifted:
        h, *_ = np.linalg.lstsq(matrix, centred**2, rcond=None)
    if h is None or not np.all(np.isfinite(h)):
        raise _not_invertible(name, "the squared label", matrix)
    return float(center), _value_lookup(name, outputs, g), _value_lookup(name, outputs, h)


def _has_exact_square_estimator(mechanism):
    try:
        _moment_estimators(mechanism)
    except ValueError:
        return False
    return True


def _debiasing_matrix(mechanism):
    """``(G, input_values, output_values)`` with ``T @ G = I``, or ValueError."""
    check_is_fitted(mechanism)
    name = type(mechanism).__name__
    matrix, inputs, outputs = _transition(mechanism)
    inverse = _solve_exactly(matrix, np.eye(matrix.shape[0]))
    if inverse is None:
        raise _not_invertible(name, "the accuracy", matrix)
    return inverse, inputs, outputs


def unbiased_square_estimator(mechanism: BaseLabelMechanism) -> Callable[[np.ndarray], np.ndarray]:
    """A function h with E[h(y~) | y] = y^2 for a fitted mechanism.

    Parameters
    ----------
    mechanism : fitted label mechanism
        An additive mechanism with ``clip=False``, or a discrete mechanism
        (``transition_matrix_``) for which ``T h = y^2`` is solvable over
        its label values (see the module notes).

    Returns
    -------
    h : callable
        Maps noisy labels to unbiased estimates of the squared true labels.

    Raises
    ------
    ValueError
        If no such estimator exists (clipped outputs, unknown noise, label
        values sharing one output distribution).

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms import Laplace
    >>> mech = Laplace(epsilon=1.0, bounds=(0.0, 1.0), clip=False).fit([0.5])
    >>> h = unbiased_square_estimator(mech)
    >>> round(float(h(np.array([0.0]))[0]), 3)  # 0 - 2 (b / eps)^2
    -2.0
    """
    return _moment_estimators(mechanism)[1]


def _squared_error_estimates(y_noisy, y_pred, estimators):
    center, g, h = estimators  # _centred_moment_estimators
    gap = y_pred - center
    return gap * gap - 2.0 * gap * (g(y_noisy) - center) + h(y_noisy)


def unbiased_mse(
    y_noisy: ArrayLike, y_pred: ArrayLike, mechanism: BaseLabelMechanism,
    sample_weight: ArrayLike | None = None,
) -> float:
    """Unbiased estimate of the true-label MSE from noisy labels.

    Parameters
    ----------
    y_noisy : array-like of shape (n_samples,)
        Labels randomized by ``mechanism``.
    y_pred : array-like of shape (n_samples,)
        Predictions (from a model that did not see ``y_noisy``'s true labels).
    mechanism : fitted label mechanism
        One for which an unbiased estimate exists (see the module notes).
    sample_weight : array-like, optional

    Returns
    -------
    mse : float
        Its expectation over the label noise is the true MSE (it may be
        negative on small samples).
    """
    return _mse_estimate(y_noisy, y_pred, _centred_moment_estimators(mechanism), sample_weight)


def _mse_estimate(y_noisy, y_pred, estimators, sample_weight):
    y_noisy = column_or_1d(y_noisy).astype(np.float64)
    y_pred = column_or_1d(y_pred).astype(np.float64)
    per_example = _squared_error_estimates(y_noisy, y_pred, estimators)
    return float(np.average(per_example, weights=sample_weight))


def shifted_mse(y_noisy, y_pred, mechanism, sample_weight=None):
    """Estimate of the true-label MSE up to a term that does not depend on
    ``y_pred`` (exact where :func:`unbiased_mse` exists; module notes)."""
    return _mse_estimate(
        y_noisy, y_pred, _centred_moment_estimators(mechanism, shifted=True), sample_weight
    )


def debiased_accuracy(
    y_noisy: ArrayLike, y_pred: ArrayLike, mechanism: BaseLabelMechanism,
    sample_weight: ArrayLike | None = None,
) -> float:
    """Unbiased estimate of the true-label accuracy from noisy labels.

    Uses G with T G = I for the mechanism's transition matrix T (of full
    row rank, e.g. square and invertible): E[G[y~, f] | y] = 1{f = y}.

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
    inverse, inputs, outputs = _debiasing_matrix(mechanism)
    noisy_codes = encode_classes(column_or_1d(y_noisy), outputs)
    pred_codes = encode_classes(column_or_1d(y_pred), inputs)
    return float(np.average(inverse[noisy_codes, pred_codes], weights=sample_weight))


class _NoisyLabelScorer:
    """Scorer ``(estimator, X, y_noisy)`` built on one of the estimates above.

    ``encoded=True`` scores class codes (positions in the mechanism's
    values), as LabelDPClassifier's base estimator predicts them."""

    def __init__(self, metric, mechanism, sign, encoded=False):
        self.metric = metric
        self.mechanism = mechanism
        self.sign = sign
        self.encoded = encoded

    def __call__(self, estimator, X, y_noisy, sample_weight=None):
        y_pred = estimator.predict(X)
        if self.encoded:
            values = np.asarray(self.mechanism.input_values_)
            y_noisy = np.asarray(self.mechanism.output_values_)[np.asarray(y_noisy, dtype=np.int64)]
            y_pred = values[np.asarray(y_pred, dtype=np.int64)]
        return self.sign * self.metric(y_noisy, y_pred, self.mechanism, sample_weight=sample_weight)

    def __repr__(self):
        return f"{self.metric.__name__}_scorer({type(self.mechanism).__name__})"


def unbiased_mse_scorer(mechanism: BaseLabelMechanism) -> Callable:
    """Scorer for model selection on noisy regression labels (no budget).

    Returns the negated :func:`unbiased_mse` (greater is better, like
    ``'neg_mean_squared_error'``), to pass as ``scoring=`` to
    ``GridSearchCV`` or ``cross_val_score`` fitted on the noisy labels.

    Parameters
    ----------
    mechanism : fitted label mechanism
        The one that produced the noisy labels; one whose outputs have an
        unbiased estimate of the label (see the module notes), else
        ``ValueError``. Where the squared label has none (an unbiased
        randomizer whose transition is rank-deficient), the scores are off
        by a term that does not depend on the model, with a warning.

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
    _moment_estimators(mechanism, shifted=True)  # fail now if no estimate exists
    if _has_exact_square_estimator(mechanism):
        return _NoisyLabelScorer(unbiased_mse, mechanism, -1.0)
    matrix = _transition(mechanism)[0]
    warn_caller(
        f"unbiased_mse_scorer: {type(mechanism).__name__}'s transition matrix "
        f"{_why_not_invertible(matrix)}, so no unbiased estimate of the squared label exists; "
        "the scores are the true-label MSE up to a term that does not depend on the model: "
        "model selection stays unbiased, the scores' values are not the MSE.",
        UserWarning,
    )
    return _NoisyLabelScorer(shifted_mse, mechanism, -1.0)


def debiased_accuracy_scorer(mechanism: BaseLabelMechanism) -> Callable:
    """Scorer for model selection on noisy class labels (no budget).

    Returns :func:`debiased_accuracy` as a scorer for ``GridSearchCV`` or
    ``cross_val_score`` fitted on the noisy labels.

    Parameters
    ----------
    mechanism : fitted classification mechanism with a transition matrix
        of full row rank (e.g. RandomizedResponse), else ``ValueError``.

    Returns
    -------
    scorer : callable
    """
    _debiasing_matrix(mechanism)  # fail now if the transition cannot be inverted
    return _NoisyLabelScorer(debiased_accuracy, mechanism, 1.0)


def noisy_label_scorer(mechanism, task, *, encoded=False):
    """The unbiased scorer for ``mechanism``'s noisy labels (``ValueError``
    if none exists): negated MSE for ``task='regression'``, accuracy for
    ``'classification'``."""
    if task == "regression":
        return unbiased_mse_scorer(mechanism)
    scorer = debiased_accuracy_scorer(mechanism)
    scorer.encoded = encoded
    return scorer
