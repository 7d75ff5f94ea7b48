"""RR-Top-k and the choice of k in RRWithPrior (004, Lemma 1): pure functions.

For a prior p over K classes and k <= K, let Y_k be the k classes of largest
prior mass. RR-Top-k outputs a label of Y_k only, so a prior-dependent but
label-independent set; the probability of outputting the true label is

    P(correct) = (sum of the k largest masses) * e^eps / (e^eps + k - 1),

and RRWithPrior takes the k maximising it (the smallest such k on ties).
"""

import math

import numpy as np

__all__ = ["top_k_order", "optimal_k", "rr_top_k_matrix", "temper", "keep_probability"]


def keep_probability(k, epsilon):
    """e^eps / (e^eps + k - 1), written to avoid overflow at large epsilon."""
    return 1.0 / (1.0 + (np.asarray(k, dtype=np.float64) - 1.0) * math.exp(-epsilon))


def top_k_order(priors):
    """Classes of each row by decreasing prior mass (ties: lower index first)."""
    priors = np.atleast_2d(np.asarray(priors, dtype=np.float64))
    return np.argsort(-priors, axis=1, kind="stable")


def optimal_k(priors, epsilon, order=None):
    """The k of RRWithPrior for each row of ``priors`` (004, Lemma 1).

    Maximises (sum of the k largest masses) * e^eps / (e^eps + k - 1) over
    k = 1, ..., K; the smallest maximiser wins ties. Rows need not be
    normalised (the maximiser does not depend on the scale).

    Parameters
    ----------
    priors : array-like of shape (n_samples, n_classes)
    epsilon : float
    order : ndarray of shape (n_samples, n_classes), optional
        :func:`top_k_order` of ``priors``, if already computed.

    Returns
    -------
    k : ndarray of int64, shape (n_samples,)

    Examples
    --------
    >>> from skdp_label.mechanisms.classification._solver import optimal_k
    >>> optimal_k([[0.7, 0.2, 0.1], [1/3, 1/3, 1/3]], epsilon=1.0).tolist()
    [1, 3]
    """
    priors = np.atleast_2d(np.asarray(priors, dtype=np.float64))
    if order is None:
        masses = -np.sort(-priors, axis=1)
    else:
        masses = np.take_along_axis(priors, order, axis=1)
    top_sums = np.cumsum(masses, axis=1)
    ks = np.arange(1, priors.shape[1] + 1)
    value = top_sums * keep_probability(ks, epsilon)[None, :]
    # Rounding must not turn a tie into a strict win for a larger k.
    best = value.max(axis=1, keepdims=True)
    near = value >= best * (1.0 - 1e-12)
    return (np.argmax(near, axis=1) + 1).astype(np.int64)


def rr_top_k_matrix(in_top, epsilon):
    """Exact transition matrix of RR-Top-k for a top-k set given as a mask.

    Rows are true classes, columns outputs. A class in the set keeps itself
    with probability e^eps / (e^eps + k - 1) and goes to each other member
    with 1 / (e^eps + k - 1); a class outside goes to each member with 1/k.

    Examples
    --------
    >>> from skdp_label.mechanisms.classification._solver import rr_top_k_matrix
    >>> rr_top_k_matrix([True, True, False], 0.0).tolist()
    [[0.5, 0.5, 0.0], [0.5, 0.5, 0.0], [0.5, 0.5, 0.0]]
    """
    in_top = np.asarray(in_top, dtype=bool)
    k = int(in_top.sum())
    if k < 1:
        raise ValueError("the top-k set must hold at least one class.")
    keep = float(keep_probability(k, epsilon))
    # e^-eps * keep, not (1 - keep) / (k - 1), which cancels at large epsilon.
    other = math.exp(-epsilon) * keep
    matrix = np.zeros((in_top.size, in_top.size))
    matrix[np.ix_(in_top, in_top)] = other
    members = np.flatnonzero(in_top)
    matrix[members, members] = keep
    matrix[np.ix_(~in_top, in_top)] = 1.0 / k
    return matrix


def temper(probabilities, temperature):
    """p^(1/T), renormalised per row (004 App. E: softmax of logits / T).

    Computed in log space so that small probabilities and small
    temperatures neither underflow to an all-zero row nor overflow.
    """
    probabilities = np.atleast_2d(np.asarray(probabilities, dtype=np.float64))
    with np.errstate(divide="ignore"):
        logs = np.log(np.maximum(probabilities, 0.0)) / float(temperature)
    top = logs.max(axis=1, keepdims=True)
    # An all-zero row carries no information: it becomes uniform.
    with np.errstate(invalid="ignore"):
        logs = np.where(np.isfinite(top), logs - top, 0.0)
    weights = np.exp(logs)
    return weights / weights.sum(axis=1, keepdims=True)
