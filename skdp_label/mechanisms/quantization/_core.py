"""The randomized quantization mechanism of paper 002 (Alg. 1), exactly.

Bins ``B_0 < ... < B_{m-1}`` (0-based here) with ``B_0 < lo`` and
``B_{m-1} > hi``. A label ``x`` in cell ``j`` (``B_j <= x < B_{j+1}``)
picks a pair of bins ``(l, r)`` with ``l <= j < r`` from the cell's
*selection distribution* ``pi_j(l, r)``, then outputs ``B_l`` with
probability ``(B_r - x) / (B_r - B_l)`` and ``B_r`` otherwise (002 eq. 1), so
``E[M(x)] = x`` whatever ``pi``. The paper draws ``l`` and ``r``
independently (``pi_j(l, r) = q^L_j(l) q^R_j(r)``); a joint ``pi_j`` is the
same algorithm with a correlated draw, and makes every output probability
*linear* in the parameters, which is what lets OPTM be an exact LP.

Exact privacy loss (002 Lemma 2, made exact): on the part of a cell that
lies in ``[lo, hi]`` every output probability is affine in ``x``, so its
supremum and infimum over the cell are at the two ends; at a bin edge the
value (from the cell on the right) and the limit from the left differ (the
discontinuity of 002 Fig. 2), and both are kept. Two "end rows" per cell
therefore hold every extreme output probability, and the privacy loss is the
largest log-ratio within a column of that finite matrix.

Everything here is a pure function of public inputs.
"""

import math

import numpy as np
import scipy.sparse as sp

__all__ = [
    "Cells",
    "make_cells",
    "pair_index",
    "end_rows",
    "privacy_loss",
    "row_weights",
    "distribution_at",
    "product_selection",
    "rqm_selection",
    "erm_selection",
    "extreme_selection",
    "minimal_margin",
    "uniform_bins",
]

#: Loss functions of an output ``b`` for a label ``x``.
OBJECTIVES = ("mae", "squared")


def minimal_margin(lo, hi, epsilon):
    """Smallest distance of the outer bins beyond the bounds for epsilon-DP.

    The two outer bins alone (the most private member of the family) cost
    ``log((hi - lo + d) / d)`` when they lie ``d`` beyond the bounds.
    """
    return (hi - lo) / math.expm1(epsilon)


def uniform_bins(lo, hi, m, margin):
    """``m`` evenly spaced bins on ``[lo - margin, hi + margin]`` (002 §3.3)."""
    return np.linspace(lo - margin, hi + margin, m)


class Pieces:
    """Intervals ``[left, right]`` covering ``[lo, hi]`` on which the output
    distribution is affine in the label.

    A label belongs to the last piece whose ``left`` is <= it, so a label on
    a shared end point belongs to the piece on its right: the value at
    ``right`` of a piece can be a limit from the left (at a bin edge of the
    quantization mechanism).
    """

    def __init__(self, left, right, lo, hi):
        self.left = np.asarray(left, dtype=np.float64)
        self.right = np.asarray(right, dtype=np.float64)
        self.lo, self.hi = float(lo), float(hi)

    @property
    def size(self):
        return self.left.size

    def locate(self, x):
        """(piece of each ``x``, weight ``t`` of the piece's right end)."""
        pos = np.clip(np.searchsorted(self.left, x, side="right") - 1, 0, self.size - 1)
        a, b = self.left[pos], self.right[pos]
        width = b - a
        t = np.where(width > 0, (x - a) / np.where(width > 0, width, 1.0), 0.0)
        return pos, np.clip(t, 0.0, 1.0)


class Cells(Pieces):
    """The cells ``[B_j, B_{j+1})`` of ``bins`` that meet ``[lo, hi]``.

    ``index`` holds the cell number ``j`` of each active cell, ``left`` and
    ``right`` its end points ``max(B_j, lo)`` and ``min(B_{j+1}, hi)``.
    """

    def __init__(self, bins, lo, hi):
        self.bins = bins
        first = int(np.searchsorted(bins, lo, side="right")) - 1
        last = int(np.searchsorted(bins, hi, side="right")) - 1
        self.index = np.arange(first, last + 1)
        super().__init__(
            np.maximum(bins[self.index], lo), np.minimum(bins[self.index + 1], hi), lo, hi
        )


def make_cells(bins, lo, hi):
    """Validated :class:`Cells` (``bins`` strictly increasing, beyond the bounds)."""
    bins = np.asarray(bins, dtype=np.float64)
    if bins.ndim != 1 or bins.size < 2 or not np.all(np.isfinite(bins)):
        raise ValueError("bins must be a 1-D list of at least two finite numbers.")
    if np.any(np.diff(bins) <= 0):
        raise ValueError("bins must be strictly increasing.")
    if not (bins[0] < lo and bins[-1] > hi):
        raise ValueError(
            "the outer bins must lie strictly beyond the bounds (bins[0] < lo and bins[-1] > hi): "
            "an unbiased output needs a bin on each side of every label, and a bin on a bound "
            "makes the privacy loss infinite."
        )
    return Cells(bins, lo, hi)


def pair_index(cells):
    """(cell position, l, r) of every selectable pair, cell by cell."""
    m = cells.bins.size
    pos, left, right = [], [], []
    for c, j in enumerate(cells.index):
        l, r = np.meshgrid(np.arange(j + 1), np.arange(j + 1, m), indexing="ij")
        pos.append(np.full(l.size, c))
        left.append(l.ravel())
        right.append(r.ravel())
    return np.concatenate(pos), np.concatenate(left), np.concatenate(right)


def _pair_probabilities(bins, left, right, x):
    """(P(output B_l), P(output B_r)) of each pair at ``x`` (eq. 1).

    Both directly, not one as 1 minus the other: near a bound the small one
    would lose its relative precision to cancellation, and at large epsilon
    the privacy loss is a ratio of such small probabilities.
    """
    width = bins[right] - bins[left]
    return (bins[right] - x) / width, (x - bins[left]) / width


def end_operator(cells, pairs):
    """Sparse map from the pair probabilities to the end rows.

    Row ``(2 c + e) * m + i`` is the probability of output ``i`` at end ``e``
    (0: ``a``, 1: ``b``) of active cell ``c``.
    """
    pos, left, right = pairs
    m = cells.bins.size
    rows, cols, vals = [], [], []
    col = np.arange(pos.size)
    for e, ends in enumerate((cells.left, cells.right)):
        p_left, p_right = _pair_probabilities(cells.bins, left, right, ends[pos])
        base = (2 * pos + e) * m
        rows += [base + left, base + right]
        cols += [col, col]
        vals += [p_left, p_right]
    shape = (2 * cells.index.size * m, pos.size)
    return sp.csr_matrix(
        (np.concatenate(vals), (np.concatenate(rows), np.concatenate(cols))), shape=shape
    )


def end_rows(cells, pairs, pi):
    """Output distribution at both ends of every active cell, shape (2 c, m)."""
    m = cells.bins.size
    return (end_operator(cells, pairs) @ pi).reshape(-1, m)


def privacy_loss(rows):
    """Largest log-ratio of an output's probabilities over the rows.

    With the end rows of :func:`end_rows` this is the exact privacy loss of
    the mechanism on ``[lo, hi]`` (sup over labels, limits included): inf if
    an output has probability 0 somewhere and not everywhere.
    """
    rows = np.asarray(rows, dtype=np.float64)
    hi = rows.max(axis=0)
    lo = rows.min(axis=0)
    used = hi > 0
    if np.any(lo[used] <= 0):
        return math.inf
    if not np.any(used):
        return 0.0
    return float(np.max(np.log(hi[used]) - np.log(lo[used])))


def _loss(b, x, objective):
    return np.abs(b - x) if objective == "mae" else (b - x) ** 2


def row_weights(pieces, outputs, prior, objective):
    """Weights ``W`` with expected error ``sum(W * rows)`` under the prior.

    ``rows[2 c + e]`` is the output distribution at end ``e`` of piece ``c``;
    inside the piece the distribution is the affine interpolation of the two.
    The uniform prior (``prior=None``) is integrated exactly: each piece is
    split at the outputs inside it (the absolute error has a kink there) and
    the polynomial pieces (degree <= 3) get 3-node Gauss-Legendre. A discrete
    prior ``(values, probabilities)`` is summed point by point.
    """
    m = outputs.size
    weights = np.zeros((2 * pieces.size, m))
    if prior is None:
        nodes, wts = np.polynomial.legendre.leggauss(3)
        xs, ws, cs = [], [], []
        for c in range(pieces.size):
            a, b = pieces.left[c], pieces.right[c]
            if b <= a:
                continue
            cuts = np.unique(np.concatenate([[a, b], outputs[(outputs > a) & (outputs < b)]]))
            u, v = cuts[:-1, None], cuts[1:, None]
            xs.append(((u + v) / 2.0 + (v - u) / 2.0 * nodes).ravel())
            ws.append(((v - u) / 2.0 * wts).ravel() / (pieces.hi - pieces.lo))
            cs.append(np.full(xs[-1].size, c))
        x, w, pos = np.concatenate(xs), np.concatenate(ws), np.concatenate(cs)
        t = (x - pieces.left[pos]) / (pieces.right[pos] - pieces.left[pos])
    else:
        x, w = prior
        pos, t = pieces.locate(x)
    loss = _loss(outputs[None, :], x[:, None], objective) * w[:, None]
    np.add.at(weights, 2 * pos, (1.0 - t)[:, None] * loss)
    np.add.at(weights, 2 * pos + 1, t[:, None] * loss)
    return weights


def product_selection(cells, pairs, left_pmf, right_pmf):
    """``pi_j(l, r) = q^L_j(l) q^R_j(r)``: the paper's independent draws."""
    pos, left, right = pairs
    j = cells.index[pos]
    return left_pmf[j, left] * right_pmf[j, right]


def extreme_selection(cells, pairs):
    """Always the two outer bins: the most private member of the family."""
    _, left, right = pairs
    return ((left == 0) & (right == cells.bins.size - 1)).astype(np.float64)


def _normalise_rows(weights):
    total = weights.sum(axis=1, keepdims=True)
    return weights / np.where(total > 0, total, 1.0)


def rqm_selection(bins, q):
    """Left/right PMFs of RQM (Youn et al.; 002 §3.3): geometric, parameter q.

    Bins 0 and m-1 are always kept, each interior bin independently with
    probability ``q``; the label's nearest kept bin on each side is chosen.
    """
    m = bins.size
    left = np.zeros((m - 1, m))
    right = np.zeros((m - 1, m))
    for j in range(m - 1):
        dist = j - np.arange(1, j + 1)  # interior bins 1..j skipped before reaching l
        left[j, 1 : j + 1] = q * (1.0 - q) ** dist
        left[j, 0] = (1.0 - q) ** j
        dist = np.arange(j + 1, m - 1) - (j + 1)
        right[j, j + 1 : m - 1] = q * (1.0 - q) ** dist
        right[j, m - 1] = (1.0 - q) ** (m - 2 - j)
    return left, right


def erm_selection(bins, gamma):
    """Left/right PMFs of ERM (002 eq. 2): exponential in the distance to the cell.

    ``q_j(i) ~ exp(gamma (B_i - B_j) / (2 (B_j - B_0)))`` on the left and the
    mirror image on the right (the paper's ``q_{m-j}(m+1-i)`` for symmetric
    bins).
    """
    m = bins.size
    left = np.zeros((m - 1, m))
    right = np.zeros((m - 1, m))
    for j in range(m - 1):
        span = bins[j] - bins[0]
        score = gamma * (bins[: j + 1] - bins[j]) / (2.0 * span) if span > 0 else np.zeros(1)
        left[j, : j + 1] = np.exp(score - score.max())
        span = bins[m - 1] - bins[j + 1]
        score = (
            gamma * (bins[j + 1] - bins[j + 1 :]) / (2.0 * span) if span > 0 else np.zeros(1)
        )
        right[j, j + 1 :] = np.exp(score - score.max())
    return _normalise_rows(left), _normalise_rows(right)


def distribution_at(pieces, rows, x):
    """Exact output distribution ``p(x, .)`` of each label ``x`` in the bounds."""
    pos, t = pieces.locate(np.asarray(x, dtype=np.float64))
    return (1.0 - t)[:, None] * rows[2 * pos] + t[:, None] * rows[2 * pos + 1]


