"""The shrinkage guard of LabelDPRegressor: a linear calibration toward the
constant predictor, fitted on the noisy labels only (docs/auto.md).

A model f trained on noisy labels can be worse than a constant: at small
epsilon it fits the noise. The guard predicts

    y_hat(x) = a + b * (f(x) - m)

where ``m`` is the mean of f's out-of-fold predictions, ``b`` the slope of
the least-squares regression of the debiased noisy labels d(y~) on those
predictions, shrunk for its own estimation noise and clipped to
``[0, MAX_SLOPE]`` (``b = 0``: the constant ``a``), and ``a`` an estimate of
the labels' mean from the noisy labels. Out-of-fold predictions do not
depend on the row's own noisy label, and ``E[d(y~) | y] = y``, so the
slope's numerator sum_i w_i d_i (f_i - m) has the expectation
sum_i w_i y_i (f_i - m): the true-label slope. Everything is a function of
the noisy labels and the public features: post-processing, no budget.

Pure functions here; the estimator (folds, fits, routing) calls them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from sklearn.model_selection import KFold

from ..utils._random import public_fingerprint, simulation_generator
from ._scorers import _moment_estimators, _solve_exactly, _transition, _value_lookup

__all__ = [
    "MAX_SLOPE",
    "LinearCalibration",
    "calibration_folds",
    "debiasing_function",
    "fit_calibration",
    "label_mean",
]

#: Largest slope kept. Above 1 it undoes the shrinkage of a biased
#: randomizer (RR-on-Bins maps labels toward the prior's mean, so a model of
#: its outputs is a shrunk model of the labels); 2 bounds how far a noisy
#: slope estimate can stretch the predictions (which are then clipped to
#: the public bounds anyway).
MAX_SLOPE = 2.0


@dataclass(frozen=True)
class LinearCalibration:
    """``y_hat = intercept + slope * f(x)`` and the figures behind it."""

    intercept: float
    slope: float
    raw_slope: float  # least-squares slope before shrinkage and clipping
    slope_se: float  # its standard error (heteroskedasticity-robust)


def debiasing_function(mechanism):
    """``d`` with ``E[d(y~) | y] = y`` when the mechanism can be inverted
    (``_moment_estimators``); otherwise, for a discrete mechanism whose
    label values share output distributions (RR-on-Bins merging labels into
    bins), ``E[d(y~) | y] = c(y)``, the prior-weighted mean of the label
    values sharing ``y``'s row of the transition matrix: the finest label the
    outputs can tell apart, debiased from the randomized response between
    those groups (under the mechanism's prior its mean is the label's). The
    noisy labels themselves when neither exists."""
    try:
        return _moment_estimators(mechanism)[0]
    except ValueError:
        pass
    try:
        matrix, inputs, outputs = _transition(mechanism)
    except ValueError:
        return _identity
    inputs = inputs.astype(np.float64)
    prior = getattr(mechanism, "prior_", None)
    prior = np.ones(inputs.size) if prior is None or np.shape(prior) != inputs.shape else prior
    _, group = np.unique(np.round(matrix, 12), axis=0, return_inverse=True)
    group = group.reshape(-1)
    mass = np.bincount(group, weights=prior) + 1e-300
    means = np.bincount(group, weights=prior * inputs) / mass
    # Label values of no prior mass: the plain mean of their group.
    plain = np.bincount(group, weights=inputs) / np.bincount(group)
    means = np.where(mass > 1e-300, means, plain)
    g = _solve_exactly(matrix, means[group])
    if g is None:
        return _identity
    return _value_lookup(type(mechanism).__name__, outputs.astype(np.float64), g)


def _identity(y_noisy):
    return np.asarray(y_noisy, dtype=np.float64)


def calibration_folds(X, n_splits):
    """Cross-fitting folds from the public features only.

    A shuffled ``KFold`` whose seed is a hash of ``X`` (its shape for sparse
    input), never of a label or of the label-noise seed: the folds are a
    public function of the features, and the same for every
    ``random_state``.
    """
    values = X.to_numpy() if hasattr(X, "to_numpy") else X
    n = values.shape[0]
    if hasattr(values, "tocsr"):
        context = ("calibration folds", n)
    else:
        context = public_fingerprint("calibration folds", np.ascontiguousarray(values))
    seed = int(simulation_generator(*context).integers(2**31 - 1))
    return list(KFold(n_splits, shuffle=True, random_state=seed).split(np.zeros((n, 1))))


def _weighted_mean(values, weights):
    return float(np.average(values, weights=weights))


def _means_and_covariance(a, b, weights):
    """Weighted means of ``a`` and ``b`` and the (sandwich) covariance
    matrix of those two means."""
    w = np.ones_like(a) if weights is None else weights
    total = w.sum()
    means = np.array([w @ a, w @ b]) / total
    centred = np.stack([a - means[0], b - means[1]])
    n = a.size
    correction = n / (n - 1.0) if n > 1 else 1.0
    return means, correction * (centred * w**2) @ centred.T / total**2


def label_mean(debiased, noisy, sample_weight=None):
    """The constant: a mix of the mean ``D`` of ``debiased`` (unbiased) and
    the mean ``Y`` of ``noisy`` (lower variance for bounded outputs, biased
    by ``beta`` for a biased randomizer), ``Y + w (D - Y)``.

    The weight minimising the expected squared error is
    ``w = (Var Y + beta^2 - Cov(Y, D)) / (beta^2 + Var(D - Y))``; the
    variances are estimated from the noisy labels and ``beta^2`` without
    bias by ``(D - Y)^2 - Var(D - Y)`` (at least 0), and ``w`` is clipped to
    ``[0, 1]``. For an unbiased mechanism ``D = Y``.
    """
    (mean_d, mean_y), cov = _means_and_covariance(debiased, noisy, sample_weight)
    var_diff = cov[0, 0] + cov[1, 1] - 2.0 * cov[0, 1]
    if not var_diff > 0:
        return float(mean_y if mean_d == mean_y else mean_d)
    bias2 = max((mean_d - mean_y) ** 2 - var_diff, 0.0)
    weight = (cov[1, 1] + bias2 - cov[0, 1]) / (bias2 + var_diff)
    return float(mean_y + np.clip(weight, 0.0, 1.0) * (mean_d - mean_y))


def fit_calibration(debiased, noisy, oof, sample_weight=None, max_slope=MAX_SLOPE):
    """Fit ``y_hat = a + b (f - m)`` on out-of-fold predictions ``oof``.

    Parameters
    ----------
    debiased : ndarray of shape (n,)
        ``d(y~)`` with ``E[d(y~) | y] = y`` (or the noisy labels themselves
        when the mechanism cannot be inverted).
    noisy : ndarray of shape (n,)
        The noisy labels (for the constant, see :func:`label_mean`).
    oof : ndarray of shape (n,)
        Out-of-fold predictions of the base estimator.
    sample_weight : ndarray of shape (n,), optional
    max_slope : float
        Upper clip of the slope.

    Returns
    -------
    LinearCalibration
        With ``intercept = a - b m`` (so that ``y_hat = intercept + slope f``).

    The slope is the least-squares ``b_raw`` times ``max(0, 1 - se^2 /
    b_raw^2)`` (the positive-part James-Stein factor: with an estimate of
    standard error ``se``, keeping ``c * b_raw`` has the least expected
    squared error at ``c = b^2 / (b^2 + se^2)``, estimated by that factor),
    then clipped to ``[0, max_slope]``. A slope within one standard error
    of 0 gives the constant.
    """
    debiased = np.asarray(debiased, dtype=np.float64)
    noisy = np.asarray(noisy, dtype=np.float64)
    oof = np.asarray(oof, dtype=np.float64)
    w = np.ones_like(oof) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    center = _weighted_mean(oof, w)
    spread = oof - center
    sxx = float(w @ spread**2)
    constant = label_mean(debiased, noisy, sample_weight)
    if not sxx > 0:  # constant out-of-fold predictions carry no slope
        return LinearCalibration(constant, 0.0, 0.0, float("inf"))
    raw = float(w @ (debiased * spread)) / sxx
    residual = debiased - _weighted_mean(debiased, w) - raw * spread
    n = oof.size
    correction = n / (n - 2.0) if n > 2 else 1.0
    se = float(np.sqrt(correction * float((w * spread) ** 2 @ residual**2)) / sxx)
    factor = max(0.0, 1.0 - se**2 / raw**2) if raw != 0 else 0.0
    slope = float(np.clip(raw * factor, 0.0, max_slope))
    return LinearCalibration(constant - slope * center, slope, raw, se)
