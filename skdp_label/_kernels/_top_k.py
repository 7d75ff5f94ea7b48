"""Sampling kernel of RR-Top-k with one top-k set per example (004, Lemma 1)."""

import numba
import numpy as np


@numba.njit(cache=True, nogil=True)
def rr_top_k_indices(codes, order, ks, u, exp_neg_epsilon):
    """RR-Top-k on class codes, one uniform each.

    Row ``i``'s top-k set is ``order[i, :ks[i]]``. A label in the set is kept
    with probability e^eps / (e^eps + k - 1) and otherwise replaced by one of
    the k - 1 other members uniformly; a label outside the set becomes a
    uniform member of the set (never a class outside it).

    Parameters
    ----------
    codes : ndarray of int64, shape (n,)
    order : ndarray of int64, shape (n, n_classes)
        Classes of each row by decreasing prior.
    ks : ndarray of int64, shape (n,)
    u : ndarray of float64 in [0, 1), shape (n,)
    exp_neg_epsilon : float
        ``exp(-epsilon)``.

    Returns
    -------
    out : ndarray of int64, shape (n,)
    """
    out = np.empty(codes.shape[0], dtype=np.int64)
    for i in range(codes.shape[0]):
        k = ks[i]
        pos = -1
        for j in range(k):
            if order[i, j] == codes[i]:
                pos = j
                break
        ui = u[i]
        if pos < 0:
            j = int(ui * k)
            if j > k - 1:
                j = k - 1
            out[i] = order[i, j]
            continue
        p_keep = 1.0 / (1.0 + (k - 1) * exp_neg_epsilon)
        if k == 1 or ui < p_keep:
            out[i] = codes[i]
            continue
        j = int((ui - p_keep) / (1.0 - p_keep) * (k - 1))
        if j > k - 2:
            j = k - 2
        if j >= pos:  # skip the true label's position
            j += 1
        out[i] = order[i, j]
    return out
