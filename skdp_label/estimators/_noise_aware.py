"""Noise-aware learning from RR-Top-k labels (004, App. F and G): pure functions.

Every classification mechanism of the library is RR-Top-k on a set S of k
classes (k = K for randomized response): a label in S is kept with
probability e^eps / (e^eps + k - 1) and otherwise moved to another member of
S; a label outside S goes to a uniform member of S. On S its transition
matrix is T_S = p ((e^eps - 1) I + 1 1^T) with p = 1 / (e^eps + k - 1), whose
inverse is

    G_S = (I - p 1 1^T) / (1 - k p),      1 - k p = (e^eps - 1) / (e^eps + k - 1).

Three uses of G, all post-processing of the noisy labels (free):

* **Debiased targets** (004 eq. (7) and (17)): the row G[y~] of the noisy
  label y~ satisfies E[G[y~] | y] = e_y for y in S. For any loss that is
  linear in the one-hot label (cross-entropy, squared loss), the loss and its
  gradient with G[y~] in place of e_y are unbiased; rows sum to 1, so for
  softmax cross-entropy the gradient in the logits is softmax(z) - G[y~] and
  the Hessian does not depend on the label.
* **Backward correction of probabilities**: a model of P(y~ | x) equals
  T^T P(y | x); on S, P(y | x) = G_S^T P(y~ | x), then projected onto the
  probability simplex.
* **Debiased class frequencies**: the mean of G[y~_i] estimates the class
  frequencies without bias.
"""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike

from ..mechanisms._validation import MIN_SHARE_EPSILON
from ..mechanisms.classification._solver import keep_probability

__all__ = [
    "debiasing_scale",
    "debiased_targets",
    "backward_correct",
    "project_simplex",
    "debiased_frequencies",
    "effective_sample_size",
    "shrinkage_weight",
    "inverse_transition",
    "noise_inverse",
    "softmax",
    "class_prior_epsilon",
    "classification_plan",
    "histogram_rows",
    "histogram_share",
    "labels_frequency_se",
    "histogram_noise_sd",
    "sampled_histogram_sd",
    "robust_top_k",
    "shrink_histogram",
]


def debiasing_scale(k, epsilon):
    """(p, 1 - k p) of RR-Top-k: p = 1 / (e^eps + k - 1), in overflow-safe form."""
    k = np.asarray(k, dtype=np.float64)
    e = math.exp(-epsilon)
    p = e / (1.0 + (k - 1.0) * e)
    return p, -math.expm1(-epsilon) / (1.0 + (k - 1.0) * e)


def _masks(in_top, n_rows, n_classes):
    in_top = np.asarray(in_top, dtype=bool)
    if in_top.ndim == 1:
        in_top = np.broadcast_to(in_top, (n_rows, n_classes))
    if in_top.shape != (n_rows, n_classes):
        raise ValueError(f"in_top must have shape ({n_rows}, {n_classes}), got {in_top.shape}.")
    return in_top


def debiased_targets(noisy_codes, in_top, epsilon, n_classes):
    """Rows G[y~_i] of the inverse transition: unbiased one-hot targets.

    Parameters
    ----------
    noisy_codes : ndarray of int, shape (n_samples,)
        Noisy class codes (each in its row's top-k set).
    in_top : ndarray of bool, shape (n_classes,) or (n_samples, n_classes)
        The top-k set each label was randomized on (one for all rows, or one
        per row).
    epsilon : float
        The epsilon the labels were randomized with.
    n_classes : int

    Returns
    -------
    targets : ndarray of shape (n_samples, n_classes)
        Rows sum to 1; entries are negative off the noisy class. For a true
        label y in the row's set, E[targets_i | y] = e_y.
    """
    codes = np.asarray(noisy_codes, dtype=np.int64)
    masks = _masks(in_top, codes.shape[0], n_classes)
    p, scale = debiasing_scale(masks.sum(axis=1), epsilon)
    targets = -(p / scale)[:, None] * masks
    targets[np.arange(codes.shape[0]), codes] += 1.0 / scale
    return targets


def project_simplex(values):
    """Euclidean projection of each row onto the probability simplex.

    The sort-based algorithm (Held et al. 1974; Duchi et al. 2008): the
    result is max(v - tau, 0) with tau chosen so that the row sums to 1. It
    keeps the order of the entries, so it never changes an argmax.
    """
    v = np.atleast_2d(np.asarray(values, dtype=np.float64))
    u = -np.sort(-v, axis=1)
    cumulative = np.cumsum(u, axis=1) - 1.0
    ranks = np.arange(1, v.shape[1] + 1)
    support = u - cumulative / ranks > 0
    rho = v.shape[1] - np.argmax(support[:, ::-1], axis=1)  # last index where true
    tau = cumulative[np.arange(v.shape[0]), rho - 1] / rho
    return np.maximum(v - tau[:, None], 0.0)


def backward_correct(
    noisy_proba: ArrayLike, in_top: ArrayLike | None, epsilon: float,
) -> np.ndarray:
    """P(y | x) from a model of P(y~ | x) through the known RR-Top-k noise.

    On the set S (per row or global), P(y~ | x)_S = T_S^T P(y | x)_S when the
    true class lies in S, so P(y | x)_S = G_S^T P(y~ | x)_S, i.e.
    (q_S - p q(S)) / (1 - k p). Classes outside S get 0: the noise carries no
    information about them (they are never output), and the prior that chose
    S ranked them below the members of S. The model's mass outside S (if any)
    is dropped and q_S renormalised first; the result is projected onto the
    simplex (Euclidean), which keeps the order of the classes in S.

    Parameters
    ----------
    noisy_proba : ndarray of shape (n_samples, n_classes)
        A model's probabilities of the noisy labels.
    in_top : ndarray of bool, shape (n_classes,) or (n_samples, n_classes)
    epsilon : float

    Returns
    -------
    proba : ndarray of shape (n_samples, n_classes)
    """
    q = np.asarray(noisy_proba, dtype=np.float64)
    masks = _masks(in_top, q.shape[0], q.shape[1])
    q = np.where(masks, np.maximum(q, 0.0), 0.0)
    mass = q.sum(axis=1, keepdims=True)
    k = masks.sum(axis=1, keepdims=True)
    # A row with no mass on its set carries nothing: uniform on the set.
    q = np.where(mass > 0, q / np.where(mass > 0, mass, 1.0), masks / k)
    p, scale = debiasing_scale(k, epsilon)
    corrected = (q - p) / scale
    # Entries below (min on S) - 1 always project to 0: the simplex
    # projection of the row is then that of its restriction to S.
    floor = np.where(masks, corrected, np.inf).min(axis=1, keepdims=True) - 2.0
    return np.where(masks, project_simplex(np.where(masks, corrected, floor)), 0.0)


def debiased_frequencies(noisy_codes, in_top, epsilon, n_classes):
    """Unbiased class frequencies from noisy labels, projected onto the simplex."""
    targets = debiased_targets(noisy_codes, in_top, epsilon, n_classes)
    return project_simplex(targets.mean(axis=0))[0]


def effective_sample_size(in_top, epsilon, n_samples):
    """n_e = sum_i (1 - k_i p_i)^2 over rows with k_i >= 2.

    A debiased RR-Top-k label has (1 - k p)^-2 times the variance of a clean
    one-hot label, so n noisy labels carry about as much information as n_e
    clean ones. Rows with k = 1 carry none (the output is fixed).
    """
    k = np.asarray(in_top, dtype=bool).sum(axis=-1)
    k = np.broadcast_to(k, (n_samples,)) if np.ndim(k) == 0 else k
    _, scale = debiasing_scale(k, epsilon)
    return float(np.sum(np.where(k >= 2, scale**2, 0.0)))


def shrinkage_weight(n_effective, n_classes):
    """lambda = K^2 / (K^2 + n_e): weight of the class prior in predictions.

    A Dirichlet prior with K pseudo-counts (one per class, in the prior's
    shape) against the labels a model's local estimate rests on. A flexible
    model resolves about K regions of the feature space (one per class), so
    each rests on about n_e / K effective labels: lambda = K / (K + n_e / K).
    Public inputs only (epsilon, k, n, K); see docs/estimators.md.
    """
    k2 = float(n_classes) ** 2
    return k2 / (k2 + float(n_effective))


def inverse_transition(matrix):
    """G with G[y~] the debiased target of output y~ for any transition matrix.

    On the support S of the outputs (columns with positive mass) G_S is the
    inverse of T restricted to S x S; outputs never produced get the
    identity row. Raises if T_S is singular (no unbiased target exists).
    """
    matrix = np.asarray(matrix, dtype=np.float64)
    if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
        raise ValueError(f"a transition matrix must be square, got shape {matrix.shape}.")
    support = matrix.sum(axis=0) > 0
    block = matrix[np.ix_(support, support)]
    if np.linalg.cond(block) > 1e12:
        raise ValueError(
            "the transition matrix is singular on its outputs: no debiased loss exists.")
    inverse = np.eye(matrix.shape[0])
    inverse[np.ix_(support, support)] = np.linalg.inv(block)
    return inverse


def class_prior_epsilon(epsilon, n_samples, n_classes):
    """Budget of a private class histogram: min(sqrt(K / n), epsilon / 2).

    000's rule for the prior of RR-on-Bins (Thm. 7), relative to epsilon: the
    histogram's error (discrete Laplace of scale 2 / eps_1 on n counts) and
    the labels' loss from a smaller budget balance at eps_1 ~ sqrt(K / n);
    the cap keeps at least half of the budget for the labels. At least
    ``MIN_SHARE_EPSILON`` (half of the smallest epsilon): the histogram's law
    is built at ``law_epsilon`` of it, which refuses less (after its charge).
    """
    share = min(math.sqrt(float(n_classes) / float(n_samples)), 0.5 * float(epsilon))
    return max(share, MIN_SHARE_EPSILON)


def histogram_noise_sd(prior_epsilon, n_samples):
    """Standard deviation of one class frequency of the private histogram.

    Each count gets discrete Laplace noise of scale 2 / eps_1 (variance
    about 8 / eps_1^2); the frequencies divide by about n. Public.
    """
    return 2.0 * math.sqrt(2.0) / (float(prior_epsilon) * float(n_samples))


def sampled_histogram_sd(prior_epsilon, n_rows, n_classes):
    """Standard deviation of one class frequency of a histogram of a random
    subset of ``n_rows`` rows, as an estimate of the frequencies of all rows.

    The discrete Laplace noise (:func:`histogram_noise_sd`) plus the subset's
    sampling error, about (K - 1) / (K^2 m) per class near balanced classes
    (public). On m rows at epsilon the sampling term dominates once
    m > 8 K^2 / ((K - 1) eps^2): at digits' eps = 2, from 22 rows.
    """
    sampling = (n_classes - 1.0) / (float(n_classes) ** 2 * float(n_rows))
    return math.sqrt(histogram_noise_sd(prior_epsilon, n_rows) ** 2 + sampling)


def _posterior(histogram, noise_sd):
    """(posterior mean, shrinkage weight B) of :func:`shrink_histogram`."""
    x = np.asarray(histogram, dtype=np.float64)
    n_classes, var = x.shape[0], float(noise_sd) ** 2
    center = 1.0 / n_classes
    spread = float(np.mean((x - center) ** 2))
    # The spread of pure noise has mean var (K - 1) / K and standard deviation
    # var sqrt(2 (K - 1)) / K: the skew is counted one standard error low.
    noise_spread = var * (n_classes - 1 + math.sqrt(2.0 * (n_classes - 1))) / n_classes
    tau2 = max(0.0, spread - noise_spread)
    weight = tau2 / (tau2 + var) if tau2 > 0 else 0.0
    return center + weight * (x - center), weight


def shrink_histogram(histogram, noise_sd):
    """Posterior mean of the class frequencies given their noisy histogram.

    Empirical Bayes (James-Stein): the K true frequencies are taken as
    exchangeable draws around 1 / K with variance tau^2, each observed with
    noise of variance sd^2; the posterior mean is 1 / K + B (x - 1 / K) with
    B = tau^2 / (tau^2 + sd^2), and tau^2 is estimated from the spread of the
    noisy frequencies less what noise alone gives, one standard error low
    (on evidence, as the guard): max(0, mean((x - 1/K)^2) - sd^2 (K - 1 +
    sqrt(2 (K - 1))) / K) (under pure noise the spread is sd^2 chi^2_{K-1} / K,
    so B > 0 in about one draw in six). Balanced
    classes whose differences are all noise come back near uniform; a
    skewed histogram far above its noise is kept. Post-processing of the
    histogram and public inputs.
    """
    return _posterior(histogram, noise_sd)[0]


def robust_top_k(histogram, label_epsilon, noise_sd):
    """Size k of the top-k set for a noisy class histogram (step 2 of 'auto').

    RRWithPrior's rule (004, Lemma 1) maximises (top-k mass) * e^eps /
    (e^eps + k - 1), the probability that a noisy label is correct. At small
    epsilon that objective is nearly flat in k for balanced classes (about
    1 / K for every k), so on the raw noisy histogram the noise decides k,
    down to k = 1 (a constant) on balanced data. Here the objective is
    evaluated on the posterior of the frequencies (:func:`shrink_histogram`;
    the top-k set is that of the noisy histogram, whose order shrinkage
    keeps), and classes are dropped **on evidence only**, as the majority
    guard decides: k = K (plain randomized response, nothing dropped, its
    value exact) unless a smaller k beats it by more than one posterior
    standard deviation of its value (the mass left out has posterior
    variance B sd^2 per class; the masses sum to 1, so min(K - k, k)
    classes' worth). Among the k that do, the posterior mean decides (ties:
    the smallest). A class the model can never predict again costs its whole
    mass, while the gain of a smaller set is often only a slightly higher
    keep probability.
    """
    x = np.asarray(histogram, dtype=np.float64)
    n_classes = x.shape[0]
    mean, weight = _posterior(x, noise_sd)
    masses = mean[np.argsort(-x, kind="stable")]
    ks = np.arange(1, n_classes + 1)
    keep = keep_probability(ks, label_epsilon)
    value = np.clip(np.cumsum(masses), 0.0, 1.0) * keep
    value_sd = float(noise_sd) * np.sqrt(weight * np.minimum(n_classes - ks, ks)) * keep
    on_evidence = value - value_sd > keep[-1]
    on_evidence[-1] = True
    value = np.where(on_evidence, value, -np.inf)
    near = value >= value.max() * (1.0 - 1e-12)
    return int(ks[np.argmax(near)])


def labels_frequency_se(epsilon, n_samples, n_classes):
    """Standard error of one class frequency debiased from n RR labels at epsilon.

    Near balanced frequencies (1 / K each) a noisy label equals a class with
    probability about 1 / K, and debiasing divides by the RR signal
    s = 1 - K p = (e^eps - 1) / (e^eps + K - 1): the frequency the labels
    themselves give has standard error sqrt(K - 1) / (K s sqrt(n)). Public.
    """
    _, signal = debiasing_scale(n_classes, epsilon)
    return math.sqrt(n_classes - 1.0) / (n_classes * float(signal) * math.sqrt(n_samples))


def histogram_share(epsilon, n_samples, n_classes):
    """Share w of the rows whose labels go to the class histogram (step 1 of 'auto').

    The histogram and the randomized labels use disjoint rows, each at the full
    epsilon (parallel composition). Its odds are the standard error with which
    the labels would give the class frequencies themselves
    (:func:`labels_frequency_se`):

        w / (1 - w) = sqrt(K - 1) / (K s(eps) sqrt(n)).

    Where the labels carry signal the share is small (about 1 / sqrt(K n_e),
    n_e = n s^2 the labels' effective clean count: 2 % of digits' rows at
    eps = 2); where they are nearly pure noise (tiny eps) it tends to 1: the
    class frequencies, hence the majority class, are what can be learned.
    Decreasing in epsilon; public (docs/classification.md).
    """
    odds = labels_frequency_se(epsilon, n_samples, n_classes)
    return odds / (1.0 + odds)


def histogram_rows(epsilon, n_samples, n_classes):
    """Rows of the class histogram: round(w n), at least 1, leaving at least 1."""
    if n_samples < 2:
        return 0
    m = int(round(histogram_share(epsilon, n_samples, n_classes) * n_samples))
    return min(max(m, 1), n_samples - 1)


def classification_plan(epsilon, n_samples, n_classes):
    """What ``LabelDPClassifier(mechanism='auto')`` does, from public inputs.

    Step 1, before anything is spent: plain randomized response at the full
    epsilon when e^eps >= 3K + 1: a prior can only make RR-Top-k drop a
    class whose mass is below 1 / (e^eps + K - 1) (dropping it must beat the
    higher keep probability of the smaller set), here under a quarter of the
    uniform mass 1 / K: too little to gain for the rows the prior takes.

    Otherwise a public random subset of ``histogram_rows(epsilon, n, K)``
    rows gives a class histogram at the full epsilon, and the other rows'
    labels are randomized by RR-Top-k at the full epsilon (disjoint rows:
    the fit costs epsilon). k is chosen after the histogram is charged by
    :func:`robust_top_k` (step 2): k = K (plain RR) on balanced classes,
    k = 1 (the histogram's majority class) when the labels are too weak to
    beat it; with k = 1 the labels would carry nothing, so the other rows
    go to a second histogram instead.

    Returns
    -------
    plan : dict
        ``mechanism``, ``prior``, ``prior_epsilon`` (the histogram's epsilon,
        on its own rows), ``histogram_rows`` and ``n_stages``.

    Examples
    --------
    >>> from skdp_label.estimators._noise_aware import classification_plan
    >>> classification_plan(8.0, 1000, 5)["mechanism"]
    'rr'
    >>> plan = classification_plan(0.5, 1000, 10)
    >>> plan["mechanism"], plan["prior"], plan["prior_epsilon"], plan["histogram_rows"]
    ('rr-top-k', 'class-frequencies', 0.5, 135)
    """
    if float(epsilon) >= math.log(3.0 * n_classes + 1.0) or n_samples < 2:  # no rows to split
        return {"mechanism": "rr", "prior": "uniform", "prior_epsilon": 0.0, "histogram_rows": 0,
                "n_stages": 1}
    return {
        "mechanism": "rr-top-k",
        "prior": "class-frequencies",
        "prior_epsilon": float(epsilon),
        "histogram_rows": histogram_rows(epsilon, n_samples, n_classes),
        "n_stages": 1,
    }


def noise_inverse(noise, classes=None):
    """(classes, G) for a fitted classification mechanism or a transition matrix.

    ``noise`` is a fitted mechanism with a square ``transition_matrix_`` over
    its ``output_values_`` (RR, RR-Top-k, RRWithPrior with a public prior), or
    a (K, K) matrix whose rows are the true classes in the order of
    ``classes`` (default ``0 .. K-1``); ``None`` means clean labels. G's row
    y~ is the debiased target of the noisy label y~ (:func:`inverse_transition`).
    """
    if noise is None:
        if classes is None:
            raise ValueError("without a noise model, classes must be given.")
        classes = np.asarray(classes)
        return classes, np.eye(classes.shape[0])
    if hasattr(noise, "transition_matrix_"):
        matrix = np.asarray(noise.transition_matrix_, dtype=np.float64)
        if not np.array_equal(noise.input_values_, noise.output_values_):
            raise ValueError(f"{type(noise).__name__} has no square transition over its classes.")
        classes = np.asarray(noise.output_values_)
    else:
        matrix = np.asarray(noise, dtype=np.float64)
        if matrix.ndim != 2 or matrix.shape[0] != matrix.shape[1]:
            raise ValueError("noise must be a fitted mechanism or a square transition matrix.")
        if not (np.all(matrix >= 0) and np.allclose(matrix.sum(axis=1), 1.0, atol=1e-9)):
            raise ValueError("a transition matrix must have non-negative rows summing to 1.")
        classes = np.arange(matrix.shape[0]) if classes is None else np.asarray(classes)
        if classes.shape != (matrix.shape[0],):
            raise ValueError(f"classes must list {matrix.shape[0]} classes, one per row of noise.")
    return classes, inverse_transition(matrix)


def softmax(logits):
    """Row-wise softmax, shifted for stability."""
    z = np.asarray(logits, dtype=np.float64)
    z = np.exp(z - z.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)
