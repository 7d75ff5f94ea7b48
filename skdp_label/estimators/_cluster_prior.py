"""Label priors from clusters of the public features (004, Algorithm 4)."""

import numpy as np
from sklearn.cluster import KMeans

from ..mechanisms._prior import noisy_histogram

__all__ = ["cluster_priors"]


def cluster_priors(X, codes, n_classes, n_clusters, epsilon, rng):
    """epsilon-DP per-example priors: k-means on X, noisy class histogram per cluster.

    The features are public, so the clustering is free. Each example's
    label falls in exactly one cluster's histogram, and changing it moves
    one count out of one bin and into another (L1 sensitivity 2), so
    discrete Laplace noise of scale 2 / epsilon on every count makes the
    set of histograms epsilon-DP (parallel composition over clusters).

    Parameters
    ----------
    X : array-like of shape (n_samples, n_features)
        Public features.
    codes : ndarray of int, shape (n_samples,)
        Private class codes in ``range(n_classes)``.
    n_classes, n_clusters : int
    epsilon : float
        Budget of the histograms (the caller charges it).
    rng : numpy Generator

    Returns
    -------
    priors : ndarray of shape (n_samples, n_classes)
        The noisy normalised histogram of each example's cluster.
    cluster_of : ndarray of int, shape (n_samples,)
    histograms : ndarray of shape (n_clusters, n_classes)
        The noisy normalised histograms (safe to keep: they are DP).
    """
    n_clusters = min(int(n_clusters), len(codes))
    kmeans = KMeans(n_clusters=n_clusters, n_init=3, random_state=int(rng.integers(2**31 - 1)))
    cluster_of = kmeans.fit_predict(np.asarray(X, dtype=np.float64))
    histograms = np.stack(
        [noisy_histogram(codes[cluster_of == c], n_classes, epsilon, rng) for c in range(n_clusters)]
    )
    return histograms[cluster_of], cluster_of, histograms
