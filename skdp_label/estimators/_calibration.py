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

__all__ = ["MAX_SLOPE", "LinearCalibration", "calibration_folds", "fit_calibration", "label_mean"]

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


def _mean_and_variance_of_mean(values, weights):
    """Weighted mean and the (sandwich) variance of that mean."""
    w = np.ones_like(values) if weights is None else weights
    total = w.sum()
    mean = float(w @ values / total)
    n = values.size
    correction = n / (n - 1.0) if n > 1 else 1.0
    return mean, float(correction * (w**2) @ (values - mean) ** 2 / total**2)


def label_mean(debiased, noisy, sample_weight=None):
    """The constant: the mean of ``debiased`` (unbiased) or of ``noisy``
    (lower variance for bounded outputs, biased for a biased randomizer),
    whichever has the smaller estimated mean squared error.

    ``MSE(mean d) = Var(mean d)``; ``MSE(mean y~) = bias^2 + Var(mean y~)``
    with ``bias^2`` estimated without bias by ``(mean y~ - mean d)^2 -
    Var(mean y~ - mean d)``. Both are functions of the noisy labels.
    """
    mean_d, var_d = _mean_and_variance_of_mean(debiased, sample_weight)
    mean_y, var_y = _mean_and_variance_of_mean(noisy, sample_weight)
    _, var_diff = _mean_and_variance_of_mean(noisy - debiased, sample_weight)
    mse_noisy = max((mean_y - mean_d) ** 2 - var_diff, 0.0) + var_y
    return mean_y if mse_noisy < var_d else mean_d


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
