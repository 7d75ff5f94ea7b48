"""Label priors from clusters of the public features (004, Algorithm 4)."""

import math
from typing import NamedTuple

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import pairwise_distances_argmin
from sklearn.preprocessing import StandardScaler

from ..mechanisms._prior import noisy_histogram
from ..mechanisms._validation import MIN_SHARE_EPSILON
from ..utils._random import simulation_generator

__all__ = [
    "FeatureClusters", "feature_clusters", "nearest_cluster", "cluster_priors", "cluster_prior_epsilon",
]

# Standardised features are clipped at this many standard deviations.
_CLIP_SDS = 3.0

# The cluster histograms never get more than this share of the budget.
_MAX_CLUSTER_PRIOR_SHARE = 0.5


def cluster_prior_epsilon(epsilon, n_samples, n_clusters, n_classes):
    """``prior_epsilon='auto'`` of the cluster prior: 000's rule on its cells.

    ``sqrt(n_clusters * n_classes / n)`` (000, Thm. 7, with the
    ``n_clusters * n_classes`` cells of the histograms as the domain), at
    most half of ``epsilon``: relative to the budget, so that it never
    exceeds it at small epsilon. Half is what small epsilons want: on
    digits, anes96 and fair-rating, a share of epsilon / 2 beat 1/4 and 1/10
    at every epsilon <= 0.3 (``benchmarks/bench_cluster_prior.py``). At least
    ``MIN_SHARE_EPSILON`` (half of the smallest epsilon): the histograms' law
    is built at ``law_epsilon`` of it, which refuses less (after its charge).
    """
    n_cells = min(int(n_clusters), int(n_samples)) * int(n_classes)
    share = min(math.sqrt(n_cells / n_samples), _MAX_CLUSTER_PRIOR_SHARE * float(epsilon))
    return max(share, MIN_SHARE_EPSILON)


class FeatureClusters(NamedTuple):
    """k-means centres in standardised feature units, with the features'
    mean and scale (all functions of the public features)."""

    centers: np.ndarray
    mean: np.ndarray
    scale: np.ndarray


def feature_clusters(X, n_clusters):
    """k-means cluster of each example, from the public features only (free).

    Features are standardised first (they are public), so that one feature
    on a large scale does not decide the clusters alone, and clipped at
    +-3 standard deviations, so that a nearly constant feature (a border
    pixel) whose rare values standardise to hundreds does not either
    (digits, two-stage cluster prior at epsilon 1: accuracy 0.63 standardised,
    0.70 clipped, 0.70 unscaled). Returns the cluster
    of each row and the :class:`FeatureClusters`, with which
    :func:`nearest_cluster` assigns new rows. k-means is seeded from the
    features alone, so nothing kept derives from the label-noise stream.
    """
    X = np.asarray(X, dtype=np.float64)
    n_clusters = min(int(n_clusters), X.shape[0])
    seed = int(simulation_generator("feature clusters", X, n_clusters).integers(2**31 - 1))
    kmeans = KMeans(n_clusters=n_clusters, n_init=3, random_state=seed)
    scaler = StandardScaler().fit(X)
    cluster_of = kmeans.fit_predict(np.clip(scaler.transform(X), -_CLIP_SDS, _CLIP_SDS))
    return cluster_of, FeatureClusters(
        kmeans.cluster_centers_.copy(), scaler.mean_.copy(), scaler.scale_.copy()
    )


def nearest_cluster(X, clusters):
    """Index of the nearest centre of each row (what ``KMeans.predict`` does
    on the standardised features)."""
    features = (np.asarray(X, dtype=np.float64) - clusters.mean) / clusters.scale
    return pairwise_distances_argmin(np.clip(features, -_CLIP_SDS, _CLIP_SDS), clusters.centers)


def cluster_priors(cluster_of, n_clusters, codes, n_classes, epsilon, rng):
    """epsilon-DP per-example priors: a noisy class histogram per cluster.

    Each example's label falls in exactly one cluster's histogram, and
    changing it moves one count out of one bin and into another (L1
    sensitivity 2), so discrete Laplace noise of scale 2 / epsilon on every
    count makes the set of histograms epsilon-DP (parallel composition over
    clusters). The caller charges ``epsilon``.

    Parameters
    ----------
    cluster_of : ndarray of int, shape (n_samples,)
        From :func:`feature_clusters`.
    n_clusters : int
    codes : ndarray of int, shape (n_samples,)
        Private class codes in ``range(n_classes)``.
    n_classes : int
    epsilon : float
    rng : numpy Generator

    Returns
    -------
    priors : ndarray of shape (n_samples, n_classes)
        The noisy normalised histogram of each example's cluster.
    histograms : ndarray of shape (n_clusters, n_classes)
        The noisy normalised histograms (safe to keep: they are DP).
    """
    histograms = np.stack(
        [noisy_histogram(codes[cluster_of == c], n_classes, epsilon, rng) for c in range(n_clusters)]
    )
    return histograms[cluster_of], histograms
