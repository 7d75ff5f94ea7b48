"""Sampling kernel of RR-Top-k with one top-k set per example (004, Lemma 1)."""

import numba
import numpy as np

from ._philox import begin_row
from ._sampling import _DIGIT, _rr_offset, uniform_index


@numba.njit(cache=True, nogil=True)
def _rr_top_k(codes, order, ks, rng, exp_neg_epsilon):
    out = np.empty(codes.shape[0], dtype=np.int64)
    for i in range(codes.shape[0]):
        begin_row(rng, i)  # keyed releases: row i reads its own stream
        k = ks[i]
        pos = -1
        for j in range(k):
            if order[i, j] == codes[i]:
                pos = j
                break
        if pos < 0:  # outside the set: a uniform member of it
            out[i] = order[i, np.int64(uniform_index(float(k), rng))]
            continue
        # Flip with probability (k-1) e^-eps / (1 + (k-1) e^-eps), formed
        # directly (1 - P(keep) rounds to 0 at large eps).
        e = (k - 1) * exp_neg_epsilon
        t = e / (1.0 + e) * _DIGIT
        qd = np.floor(t)
        m = float(k - 1)
        limit = qd - float(np.int64(qd) % (k - 1)) if k > 1 else 0.0
        j = _rr_offset(qd, t - qd, limit, m, rng)
        if j < 0:
            out[i] = codes[i]
            continue
        if j >= pos:  # skip the true label's position
            j += 1
        out[i] = order[i, j]
    return out


def rr_top_k_indices(codes, order, ks, rng, exp_neg_epsilon):
    """RR-Top-k on class codes.

    Row ``i``'s top-k set is ``order[i, :ks[i]]``. A label in the set is kept
    with probability e^eps / (e^eps + k - 1) and otherwise replaced by one of
    the k - 1 other members uniformly; a label outside the set becomes a
    uniform member of the set (never a class outside it). The flip is an
    exact Bernoulli and the replacement exactly uniform (see
    :mod:`._sampling`), so the tails match the matrix at any epsilon.

    Parameters
    ----------
    codes : ndarray of int64, shape (n,)
    order : ndarray of int64, shape (n, n_classes)
        Classes of each row by decreasing prior.
    ks : ndarray of int64, shape (n,)
    rng : numpy.random.Generator
        The release's generator.
    exp_neg_epsilon : float
        ``exp(-epsilon)``.

    Returns
    -------
    out : ndarray of int64, shape (n,)
    """
    codes = np.ascontiguousarray(codes, dtype=np.int64)
    order = np.ascontiguousarray(order, dtype=np.int64)
    ks = np.ascontiguousarray(ks, dtype=np.int64)
    return _rr_top_k(codes, order, ks, rng, float(exp_neg_epsilon))


__all__ = ["rr_top_k_indices"]
