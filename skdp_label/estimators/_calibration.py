"""The shrinkage guard of LabelDPRegressor: a linear calibration toward the
constant predictor, fitted on the noisy labels only (docs/auto.md).

A model f trained on noisy labels can be worse than a constant: at small
epsilon it fits the noise. The guard predicts

    y_hat(x) = a + b * (f(x) - m)

where ``m`` is the mean of f's out-of-fold predictions, ``b`` the slope of
the least-squares regression of the debiased noisy labels d(y~) on those
predictions, shrunk for its own estimation noise and clipped to
``[0, MAX_SLOPE]`` (``b = 0``: the constant ``a``), and ``a`` an estimate of
the labels' mean. Out-of-fold predictions do not depend on the row's own
noisy label, and ``E[d(y~) | y] = y``, so the slope's numerator
sum_i w_i d_i (f_i - m) has the expectation sum_i w_i y_i (f_i - m): that of
the true-label slope (of the binned labels when bins merge labels, see
:func:`debiasing_function`). Everything is a function of
the noisy labels and the public features: post-processing, no budget.

Pure functions here; the estimator (folds, fits, routing) calls them.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._scorers import _moment_estimators, _solve_exactly, _transition, _value_lookup

__all__ = [
    "MAX_SLOPE",
    "LinearCalibration",
    "debiasing_function",
    "anchor_for",
    "debiased_mean_bias_bound",
    "direct_mean",
    "fit_calibration",
    "shrunk_mean",
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
        return _moment_estimators(mechanism, shifted=True)[0]  # g is exact either way
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


def _weighted_mean(values, weights):
    return float(np.average(values, weights=weights))


def anchor_for(mechanism, debias):
    """The point the constant shrinks toward, and the variance of one
    debiased label predicted by the mechanism.

    The anchor is the mean of the mechanism's prior (public, or a noisy
    histogram already charged: its noise is independent of the label
    noise), else the middle of the public label range. The variance is
    ``E_p[Var(d | y)] + Var_p(E[d | y])`` under that prior, exact from the
    transition matrix (0 when there is none): heavy-tailed debiased labels
    (rare outputs of huge debiased value) make the sample variance
    unreliable, so the larger of the two is used.
    """
    lo, hi = mechanism._label_range()
    anchor = 0.5 * (float(lo) + float(hi))
    try:
        matrix, inputs, outputs = _transition(mechanism)
    except ValueError:
        return anchor, 0.0
    prior = getattr(mechanism, "prior_", None)
    if prior is None or np.shape(prior) != inputs.shape or not np.sum(prior) > 0:
        return anchor, 0.0
    prior = np.asarray(prior, dtype=np.float64) / np.sum(prior)
    mean = float(prior @ inputs.astype(np.float64))
    # Moments of d less the prior's mean: far from 0 (labels near 1e9) the raw squares
    # would lose the variance in rounding (an ulp of 1e18 is 128).
    g = debias(outputs.astype(np.float64)) - mean
    conditional_mean = matrix @ g
    spread = matrix @ g**2 - conditional_mean**2
    center = prior @ conditional_mean
    variance = prior @ spread + prior @ (conditional_mean - center) ** 2
    return mean, float(max(variance, 0.0))


def direct_mean(mechanism):
    """``(M, Var M)``: the mechanism's charged noisy mean of the labels and
    its public variance (``mean_epsilon`` of ``mechanism='auto'``), or None."""
    value = getattr(mechanism, "noisy_mean_", None)
    if value is None:
        return None
    return float(value), float(mechanism.noisy_mean_variance_)


def debiased_mean_bias_bound(mechanism):
    """A public bound on ``|E[mean of d(y~)] - mean of y|``.

    0 when :func:`debiasing_function` inverts the mechanism
    (``E[d(y~) | y] = y``). Where labels share output distributions
    (RR-on-Bins' bins), ``E[d | y] = c(y)``, a mean of the label values of
    ``y``'s group under the noisy prior, which the histogram's noise moves
    anywhere within the group: the bound is the widest group's range plus
    half the largest grid step (labels are rounded to the grid first). The
    whole label range when the mechanism has no transition.
    """
    try:
        _moment_estimators(mechanism, shifted=True)  # an exact g: E[g(y~) | y] = y
        return 0.0
    except ValueError:
        pass
    lo, hi = mechanism._label_range()
    try:
        matrix, inputs, _ = _transition(mechanism)
    except ValueError:
        return float(hi) - float(lo)
    inputs = inputs.astype(np.float64)
    _, group = np.unique(np.round(matrix, 12), axis=0, return_inverse=True)
    group = group.reshape(-1)
    widths = [np.ptp(inputs[group == g]) for g in np.unique(group)]
    step = float(np.max(np.diff(inputs))) if inputs.size > 1 else 0.0
    return float(max(widths)) + 0.5 * step


def combined_mean(mean, variance, direct):
    """Inverse-variance weighting of two independent unbiased means:
    ``(mean, variance)`` and ``direct = (M, Var M)`` (or None: unchanged).
    The combination is unbiased with variance ``1 / (1 / V + 1 / Var M)``,
    below both."""
    if direct is None:
        return mean, variance
    value, direct_variance = direct
    if not direct_variance > 0:
        return value, direct_variance
    weight = variance / (variance + direct_variance)  # of the direct mean
    return mean + weight * (value - mean), variance * direct_variance / (variance + direct_variance)


def shrunk_mean(debiased, anchor, model_variance=0.0, sample_weight=None, direct=None,
                bias_bound=0.0):
    """The constant: the mean ``D`` of ``debiased`` shrunk toward ``anchor``,
    ``A + w (D - A)``.

    With ``direct = (M, Var M)``, a charged noisy mean of the labels
    (:func:`direct_mean`), the constant is instead ``D`` combined with it by
    :func:`combined_mean` (independent noises; ``M`` unbiased, ``D`` with a
    squared error of its variance plus its squared bias, estimated by
    ``max((D - M)^2 - V - Var M, 0)`` and at most ``bias_bound^2``, see
    :func:`debiased_mean_bias_bound`), not shrunk toward the anchor.

    Without it, ``D`` is unbiased with variance ``V`` (the larger of the sample estimate
    and ``model_variance``, over the effective number of rows); the anchor's
    error ``(A - mu)^2`` is estimated without bias by ``(D - A)^2 - V`` (the
    anchor is independent of the label noise), at least 0, and
    ``w = est / (est + V)`` minimises the expected squared error of the mix
    (a positive-part James-Stein rule). At a small epsilon, where ``V`` is
    large, the constant is the anchor; where the noisy labels pin the mean
    down, it is their mean.
    """
    debiased = np.asarray(debiased, dtype=np.float64)
    w = np.ones_like(debiased) if sample_weight is None else np.asarray(sample_weight, float)
    total = w.sum()
    mean = float(w @ debiased / total)
    n = debiased.size
    sample_variance = float(w @ (debiased - mean) ** 2 / total) * (n / (n - 1.0) if n > 1 else 1.0)
    variance = max(sample_variance, float(model_variance)) * float(w @ w) / total**2
    if direct is not None:
        # With a charged mean the constant is the combination, unshrunk: the
        # anchor (the noisy histogram's mean, at a small share of epsilon) is
        # far noisier, and the estimate of its error below too.
        # D's squared bias, estimated without bias by (D - M)^2 - V - Var M
        # (M is unbiased and independent), at least 0 and at most the bound.
        excess = (mean - direct[0]) ** 2 - variance - direct[1]
        bias2 = min(max(excess, 0.0), float(bias_bound) ** 2)
        return combined_mean(mean, variance + bias2, direct)[0]
    anchor_error = max((mean - anchor) ** 2 - variance, 0.0)
    if not anchor_error + variance > 0:
        return mean
    return float(anchor + anchor_error / (anchor_error + variance) * (mean - anchor))


def fit_calibration(debiased, oof, anchor, model_variance=0.0, sample_weight=None,
                    max_slope=MAX_SLOPE, direct=None, bias_bound=0.0):
    """Fit ``y_hat = a + b (f - m)`` on out-of-fold predictions ``oof``.

    Parameters
    ----------
    debiased : ndarray of shape (n,)
        ``d(y~)`` from :func:`debiasing_function`: ``E[d(y~) | y] = y``, or
        the bin's mean, or the noisy labels themselves.
    oof : ndarray of shape (n,)
        Out-of-fold predictions of the base estimator.
    anchor, model_variance : float
        For the constant (:func:`shrunk_mean`, :func:`anchor_for`).
    direct : tuple (M, Var M), optional
        A charged noisy mean of the labels (:func:`direct_mean`), combined
        into the constant.
    bias_bound : float
        Bound on the debiased mean's bias (:func:`debiased_mean_bias_bound`).
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
    oof = np.asarray(oof, dtype=np.float64)
    w = np.ones_like(oof) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    center = _weighted_mean(oof, w)
    spread = oof - center
    sxx = float(w @ spread**2)
    constant = shrunk_mean(debiased, anchor, model_variance, sample_weight, direct, bias_bound)
    if not sxx > 0:  # constant out-of-fold predictions carry no slope
        return LinearCalibration(constant, 0.0, 0.0, float("inf"))
    raw = float(w @ (debiased * spread)) / sxx
    residual = debiased - _weighted_mean(debiased, w) - raw * spread
    n = oof.size
    correction = n / (n - 2.0) if n > 2 else 1.0
    se = float(np.sqrt(correction * float((w * spread) ** 2 @ residual**2)) / sxx)
    factor = max(0.0, 1.0 - se**2 / raw**2) if raw != 0 else 0.0
    slope = float(np.clip(raw * factor, 0.0, max_slope)) + 0.0  # never -0.0
    return LinearCalibration(constant - slope * center, slope, raw, se)
