"""Label priors from clusters of the public features (004, Algorithm 4)."""

import numpy as np
from sklearn.cluster import KMeans
from sklearn.metrics import pairwise_distances_argmin

from ..mechanisms._prior import noisy_histogram

__all__ = ["feature_clusters", "nearest_cluster", "cluster_priors"]


def feature_clusters(X, n_clusters, rng):
    """k-means cluster of each example, from the public features only (free).

    Returns the cluster of each row and the cluster centres (public: a
    function of the features), with which :func:`nearest_cluster` assigns new
    rows. The fitted KMeans is not returned: its ``random_state`` was drawn
    from this fit's generator.
    """
    n_clusters = min(int(n_clusters), X.shape[0])
    kmeans = KMeans(n_clusters=n_clusters, n_init=3, random_state=int(rng.integers(2**31 - 1)))
    cluster_of = kmeans.fit_predict(np.asarray(X, dtype=np.float64))
    return cluster_of, kmeans.cluster_centers_.copy()


def nearest_cluster(X, centers):
    """Index of the nearest centre of each row (what ``KMeans.predict`` does)."""
    return pairwise_distances_argmin(np.asarray(X, dtype=np.float64), centers)


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
