"""Guard toward the trivial predictor: pure functions (docs/classification.md).

After training on RR-Top-k labels, a model is compared with the constant
predictor (one class for every row) by cross-fitting on the *noisy* labels:
each held-out fold is predicted by a model and a constant fitted on the other
folds, and both predictions are scored against the fold's noisy labels
through the known inverse transition of each row. Post-processing of the
noisy labels and the public features: no budget.

For a row randomized on the set S (k classes, keep probability
e^eps / (e^eps + k - 1)) and a prediction f in S, the estimate

    h(y~, f) = (1{y~ = f} - p) / (1 - k p),      p = 1 / (e^eps + k - 1),

is G_S[y~, f], so E[h | y] = 1{f = y} when y is in S, and 1 / k when y is
outside S (its output is uniform on S), whatever f in S. Every candidate here
predicts inside S (the corrected model puts no mass outside S, the constant is
the top class of the prior that chose S), so the bias is the same for both and
their difference is unbiased. Predictions outside S score 0.
"""

from __future__ import annotations

import numpy as np

from ..utils._random import public_folds
from ._noise_aware import debiased_targets, debiasing_scale, labels_frequency_se, project_simplex

__all__ = [
    "GUARD_FOLDS", "guard_folds", "debiased_hits", "cross_fitted_accuracies", "prefers_constant",
    "pooled_class_prior", "constant_in",
]

# Folds of the cross-fitting: public and fixed (each costs one fit of the base estimator).
GUARD_FOLDS = 3

# The constant replaces the model when its estimated advantage exceeds this many
# standard errors of the difference (one-sided ~84 %).
GUARD_STANDARD_ERRORS = 1.0


def prefers_constant(model_accuracy, constant_accuracy, difference_se):
    """Whether the guard predicts the constant: only on evidence.

    The estimates are unbiased but, at small epsilon, their difference has a
    standard error of the order of its size; a point decision is then a coin
    flip that throws away a model which beats the constant on balanced
    classes. The guard acts on evidence: the constant's advantage must exceed
    ``GUARD_STANDARD_ERRORS`` standard errors.
    """
    return constant_accuracy - model_accuracy > GUARD_STANDARD_ERRORS * difference_se


def guard_folds(X, n_samples, n_folds=GUARD_FOLDS):
    """Disjoint held-out index sets covering ``range(n_samples)``, from the
    public features only (:func:`~skdp_label.utils._random.public_folds`):
    they reveal nothing and do not depend on the noise seed; rows stored
    sorted by class still land in every fold."""
    return [test for _, test in public_folds("majority guard folds", X, n_folds)]


def debiased_hits(noisy_codes, pred_codes, in_top, epsilon):
    """Per-row unbiased estimates of 1{prediction = true label} (see module notes).

    Parameters
    ----------
    noisy_codes, pred_codes : ndarray of int, shape (n_samples,)
    in_top : ndarray of bool, shape (n_samples, n_classes)
        The set each label was randomized on.
    epsilon : float
        The epsilon the labels were randomized with.

    Returns
    -------
    hits : ndarray of shape (n_samples,)
    """
    noisy_codes = np.asarray(noisy_codes, dtype=np.int64)
    pred_codes = np.asarray(pred_codes, dtype=np.int64)
    in_top = np.asarray(in_top, dtype=bool)
    rows = np.arange(noisy_codes.shape[0])
    p, scale = debiasing_scale(in_top.sum(axis=1), epsilon)
    hits = ((noisy_codes == pred_codes) - p) / scale
    return np.where(in_top[rows, pred_codes], hits, 0.0)


def cross_fitted_accuracies(fit_predict, constant_class, noisy_codes, in_top, epsilon, folds,
                             sample_weight=None):
    """Held-out debiased accuracies of a model and of the constant predictor.

    Parameters
    ----------
    fit_predict : callable ``(train, test) -> predicted codes of test``
        Fits the model on the noisy labels of ``train`` only.
    constant_class : callable ``train -> int``
        The constant's class, from ``train``'s noisy labels (or a prior
        released separately).
    noisy_codes : ndarray of int, shape (n_samples,)
    in_top : ndarray of bool, shape (n_samples, n_classes)
    epsilon : float
    folds : list of ndarray
        From :func:`guard_folds`.
    sample_weight : ndarray of shape (n_samples,), optional
        Weights of the rows in both accuracies (the base estimator's
        ``sample_weight``), so that the guard compares what the weighted
        model is fitted for.

    Returns
    -------
    model_accuracy, constant_accuracy, difference_se : float
        Means over all rows of the held-out estimates, and the standard
        error of their difference. Fold predictions are not kept.
    """
    n_samples = noisy_codes.shape[0]
    difference = np.zeros(n_samples)
    model_hits = np.zeros(n_samples)
    for test in folds:
        train = np.setdiff1d(np.arange(n_samples), test, assume_unique=True)
        model = debiased_hits(noisy_codes[test], fit_predict(train, test), in_top[test], epsilon)
        constant = debiased_hits(
            noisy_codes[test], np.full(test.shape[0], constant_class(train)), in_top[test], epsilon)
        model_hits[test] = model
        difference[test] = model - constant
    w = np.ones(n_samples) if sample_weight is None else np.asarray(sample_weight, dtype=np.float64)
    total = float(w.sum())
    mean_difference = float(w @ difference) / total
    model_accuracy = float(w @ model_hits) / total
    # Standard error of a weighted mean of independent rows (equal weights:
    # the plain std / sqrt(n)).
    se = (float(np.sqrt(float((w * (difference - mean_difference)) @ (w * (difference - mean_difference)))))
          / total) if n_samples > 1 else float("inf")
    return model_accuracy, model_accuracy - mean_difference, se


def pooled_class_prior(histogram, histogram_sd, noisy_codes, in_top, epsilon):
    """The charged class histogram pooled with the noisy labels' class frequencies.

    Both are releases already charged (the histogram at its epsilon, the
    labels at theirs), so this is post-processing: no budget, and no true
    label is read. On the set S the labels were randomized on (one set for
    all rows), the debiased frequency of class c estimates pi_c + pi(not S) / k
    (a label outside S lands uniformly on S), so the histogram's mass outside
    S, divided by k, is subtracted; the two estimates are then averaged by
    inverse variance: the histogram's ``histogram_sd`` (public, from its
    epsilon and rows) and the labels' :func:`labels_frequency_se` (public,
    from epsilon, their rows and k). Outside S the histogram alone. Projected
    onto the simplex (order kept). Rows with different sets, k < 2 or no
    rows: the histogram unchanged.

    Parameters
    ----------
    histogram : ndarray of shape (n_classes,)
        The noisy class frequencies (charged).
    histogram_sd : float
        Standard deviation of one of its frequencies (public).
    noisy_codes : ndarray of int, shape (n_samples,)
    in_top : ndarray of bool, shape (n_samples, n_classes)
    epsilon : float
        The epsilon the labels were randomized with.

    Returns
    -------
    prior : ndarray of shape (n_classes,)
    """
    histogram = np.asarray(histogram, dtype=np.float64)
    in_top = np.asarray(in_top, dtype=bool)
    if in_top.shape[0] == 0 or not np.all(in_top == in_top[0]):
        return histogram.copy()
    top = in_top[0]
    k = int(top.sum())
    if k < 2:
        return histogram.copy()
    labels = debiased_targets(noisy_codes, in_top, epsilon, histogram.shape[0]).mean(axis=0)
    labels = labels - max(float(histogram[~top].sum()), 0.0) / k
    var_labels = labels_frequency_se(epsilon, in_top.shape[0], k) ** 2
    var_histogram = float(histogram_sd) ** 2
    pooled = histogram.copy()
    pooled[top] = ((histogram[top] * var_labels + labels[top] * var_histogram)
                   / (var_labels + var_histogram))
    prior = project_simplex(pooled)[0]
    # predict's argmax must be the class the guard scored (constant_in: in S). It is in
    # exact arithmetic (S is the histogram's top k, ties to the lower index, and pooling
    # keeps S's mass, so S's top is at least S's mean, at least any class outside S), but
    # where a class outside S ties S's top, rounding could put it above.
    best = constant_in(prior, top)
    prior[~top] = np.minimum(prior[~top], np.nextafter(prior[best], 0.0))
    return prior


def constant_in(prior, in_top):
    """The constant's class: the prior's top class within the set S (the guard's
    estimates are unbiased for predictions in S only)."""
    prior = np.asarray(prior, dtype=np.float64)
    top = np.asarray(in_top, dtype=bool)
    return int(np.argmax(np.where(top, prior, -np.inf)))
