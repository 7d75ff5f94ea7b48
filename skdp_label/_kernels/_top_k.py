"""Sampling kernels of RR-Top-k (004, Lemma 1): one top-k set for every
label (a public prior), or one per example."""

import math

import numba
import numpy as np

from ._philox import begin_row
from ._intrinsics import opaque
from ._sampling import (
    _DIGIT,
    _DIGIT_INT,
    _digit,
    _residue_by,
    _rr_offset,
    bernoulli_exact,
    split_probability,
    uniform_index,
)
from ._twin import kernel_for


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


def rr_top_k_set_constants(in_top, epsilon):
    """Tables of :func:`rr_top_k_set` for the top-k set ``in_top`` (a mask
    over the classes): each class's position in the set (k for a class
    outside it), and the constants ``[qd, frac, limit_in, limit_out]`` of
    the draw.

    RR-Top-k as a mixture: with probability ``u`` the output is a uniform
    member of the set, otherwise the label itself, where ``u`` is 1 for a
    label outside the set and ``k e^-eps / (1 + (k - 1) e^-eps)`` for one in
    it (then another member comes out with probability ``u / k = e^-eps /
    (1 + (k - 1) e^-eps)`` each, the label with ``1 - u + u / k = e^eps /
    (e^eps + k - 1)``: the rows of :func:`rr_top_k_matrix`). One digit ``d``
    decides both, for every label with the same modulus ``k``: ``d < u
    2**53`` (exactly: ``qd, frac = split_probability(u)``, a tie reads more
    digits) picks the uniform member, ``d mod k`` when ``d`` is below
    ``limit`` (a multiple of ``k``: ``limit_in = qd - qd mod k``,
    ``limit_out = 2**53 - 2**53 mod k``), else from fresh digits.
    """
    in_top = np.asarray(in_top, dtype=bool)
    k = int(in_top.sum())
    slot = np.full(in_top.shape[0], k, dtype=np.int64)
    slot[in_top] = np.arange(k)
    e = math.exp(-float(epsilon))
    qd, frac = split_probability(k * e / (1.0 + (k - 1) * e))
    constants = np.array([qd, frac, qd - math.fmod(qd, k), _DIGIT - math.fmod(_DIGIT, k)])
    return slot, constants


def rr_top_k_set(y, lo, slot, constants, values, rng):
    """RR-Top-k with one top-k set for every label (one digit a label).

    Parameters
    ----------
    y : ndarray of int64 or float64, shape (n,)
        Validated labels: ``y - lo`` is each label's class code (class
        codes themselves with ``lo = 0``).
    lo : int
    slot, constants : ndarray
        :func:`rr_top_k_set_constants`.
    values : ndarray of shape (k,)
        The output of each position in the set, in the dtype of the result.
    rng : Generator or KeyedRows
        The release's random source.

    Returns
    -------
    out : ndarray of the dtype of ``values``, shape (n,)
    """
    out = np.empty(y.shape[0], dtype=values.dtype)
    kernel_for(_rr_top_k_set, rng, y.shape[0])(
        y, lo, slot, constants, 1.0 / values.shape[0], values, rng, out
    )
    return out


@numba.njit(cache=True, nogil=True)
def _uniform_member_rare(pos, outside, d, qd, frac, k, rng):
    """:func:`_rr_top_k_set` for a first digit ``d`` in ``[limit, qd]``: the
    uniform member (from fresh digits) or the label's own position. Not
    inlined: a helper inlined with ``rng`` keeps its reference count, two
    atomic operations a label."""
    if outside or d < qd or bernoulli_exact(frac, rng):  # d == qd: a tie
        return np.int64(uniform_index(float(k), rng))
    return pos


@numba.njit(cache=True, nogil=True)
def _rr_top_k_set(y, lo, slot, constants, inv_k, values, rng, out):
    k = values.shape[0]
    qd, frac = constants[0], constants[1]
    limit_in, limit_out = np.int64(constants[2]), np.int64(constants[3])
    top_in = np.int64(qd)
    for i in range(y.shape[0]):
        begin_row(rng, i)  # keyed releases: row i reads its own stream
        pos = slot[np.int64(y[i] - lo)]
        # The label's case selected by masks, not branches (a coin flip when
        # the set holds about half the labels).
        outside = opaque((k - 1 - pos) >> 63)  # -1 outside the set
        limit = limit_in ^ ((limit_in ^ limit_out) & outside)
        top = top_in ^ ((top_in ^ _DIGIT_INT) & outside)  # u 2**53's integer part
        d = _digit(rng)
        di = np.int64(d)
        uniform = opaque((di - limit) >> 63)  # -1: d < limit, the member d mod k
        j = pos ^ ((pos ^ _residue_by(d, float(k), inv_k)) & uniform)
        if ((di - limit) | (top - di)) >= 0:  # limit <= d <= top: rare
            j = _uniform_member_rare(pos, outside, d, qd, frac, k, rng)
        out[i] = values[j]


__all__ = ["rr_top_k_indices", "rr_top_k_set", "rr_top_k_set_constants"]
