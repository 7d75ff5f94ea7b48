"""RPWithPrior (paper 003) as pure functions: the interval, the grid mechanism.

Notation of 003. The prior is a step density over nodes ``n_0 < ... < n_k``
(cell ``i`` = ``[n_i, n_{i+1})`` holds mass ``p_i``). For an interval
``[A1, A2]`` and a half-window ``zeta``, eq. (3.4) maps a label ``y`` in the
interval to its window ``[y - zeta, y + zeta]`` with density ``1/gamma`` and
to the rest of ``[A1 - zeta, A2 + zeta]`` with density ``e^-eps / gamma``,
``gamma = 2 zeta + e^-eps (A2 - A1)``; labels outside the interval are first
projected onto it (eq. 3.6). Lemma 3.3: the probability that a label of the
prior lands in its window is

    F(A1, A2) = 2 zeta / gamma * mass(A1, A2),

which Algorithm 1 maximises.

Why the optimum sits on two nodes. On a cell pair ``A1 in [n_i, n_{i+1}]``,
``A2 in [n_j, n_{j+1}]`` the mass is affine in ``(A1, A2)`` and so is
``gamma``: F is linear-fractional there, hence quasi-linear, and its maximum
over the cell pair (a rectangle, or a triangle when ``i = j``) is at a
vertex. Lemma 3.5 shows the same thing from the other side: dF/dA1 changes
sign only with ``A2`` and dF/dA2 only with ``A1``, so the critical points
``(e1, e2)`` are saddles. :func:`optimal_interval` therefore maximises over
node pairs, ``max_{p <= q} (P_q - P_p) / (D + n_q - n_p)`` with the CDF
``P`` at the nodes and ``D = 2 zeta e^eps``, by Dinkelbach's method: each
step is one O(k) pass (a running minimum), and the steps increase the ratio
strictly through a finite set of pairs. :func:`algorithm1` is 003's
Algorithm 1 as written (O(k^2), corners and critical points), kept as the
reference the tests compare with, next to a brute-force grid search.

Exact privacy on a grid. Continuous uniform outputs would leak through the
floating-point pattern of the sampled values (as for additive noise), so the
mechanism is sampled on a public power-of-two grid of step ``g``: labels are
clipped to the interval and rounded to the grid unit ``u`` in ``[a1, a2]``,
the window is the ``2 w + 1`` units ``u - w .. u + w``, and the output is
one of the units ``a1 - w .. a2 + w``:

    P(o | u) = 1 / Gamma        if |o - u| <= w,
             = e^-eps / Gamma   otherwise,    Gamma = 2 w + 1 + e^-eps (a2 - a1).

Every row has the same two probability levels, so any two rows differ by a
factor ``e^eps`` at most: epsilon-DP by construction, for every real label
(its row is one of these). ``Gamma g = 2 (zeta + g / 2) + e^-eps (A2 - A1)``
is 003's ``gamma`` with the half-window widened by half a step, the
window's true width on the grid; Algorithm 1 runs with that half-window.
"""

import math

import numba
import numpy as np

from ..._kernels._intrinsics import opaque
from ..._kernels._pcg64 import held_digit, hold, release
from ..._kernels._philox import begin_row
from ..._kernels._sampling import (
    _DIGIT,
    _int_residue,
    bernoulli_exact,
    split_probability,
    uniform_index,
)
from ..._kernels._twin import kernel_for

__all__ = [
    "algorithm1",
    "auto_granularity",
    "auto_window",
    "grid_expected_loss",
    "grid_interval",
    "grid_matrix",
    "optimal_interval",
    "sample_grid",
    "sample_labels",
    "step_prior_nodes",
    "window_probability",
]


# -- the prior as a step density -------------------------------------------------
def step_prior_nodes(values, lo=None, hi=None):
    """Nodes of the step density of a prior over sorted ``values``.

    Each value owns the labels nearest to it (its histogram bin): cell edges
    are the midpoints between consecutive values; the outer edges are
    ``lo`` and ``hi`` (the public bounds) or, without them, the end values.
    """
    values = np.asarray(values, dtype=np.float64)
    mids = (values[1:] + values[:-1]) / 2.0
    first = values[0] if lo is None else float(lo)
    last = values[-1] if hi is None else float(hi)
    return np.concatenate([[first], mids, [last]])


def _node_cdf(probs):
    return np.concatenate([[0.0], np.cumsum(probs)])


def window_probability(nodes, probs, a1, a2, zeta, epsilon):
    """003's F(A1, A2): probability that a label of the prior lands in its window.

    ``mass(A1, A2)`` is the integral of the step density; ``-inf`` when
    ``A1 > A2`` (not an interval). Vectorised over ``a1``, ``a2``.
    """
    a1 = np.asarray(a1, dtype=np.float64)
    a2 = np.asarray(a2, dtype=np.float64)
    cdf = _node_cdf(probs)
    mass = np.interp(a2, nodes, cdf) - np.interp(a1, nodes, cdf)
    gamma = 2.0 * zeta + math.exp(-epsilon) * (a2 - a1)
    with np.errstate(invalid="ignore", divide="ignore"):
        f = 2.0 * zeta * mass / gamma
    return np.where(a1 <= a2, f, -np.inf)


def optimal_interval(nodes, probs, zeta, epsilon, max_iter=200):
    """The interval ``[A1, A2]`` maximising F over node pairs (Dinkelbach).

    Parameters
    ----------
    nodes : ndarray of shape (k + 1,)
        Increasing cell edges of the step prior.
    probs : ndarray of shape (k,)
        Cell masses (normalised).
    zeta : float
        Half-window, > 0.
    epsilon : float
        Budget of the randomization.

    Returns
    -------
    a1, a2 : float
        Two nodes, ``a1 <= a2``. Ties go to the pair found first.
    n_iter : int
        Dinkelbach steps taken (each one O(k)).

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms.rp_with_prior._interval import optimal_interval
    >>> nodes = np.array([0.0, 1.0, 2.0, 10.0])
    >>> optimal_interval(nodes, np.array([0.45, 0.45, 0.1]), zeta=0.5, epsilon=1.0)[:2]
    (0.0, 2.0)
    """
    nodes = np.asarray(nodes, dtype=np.float64)
    cdf = _node_cdf(np.asarray(probs, dtype=np.float64))
    d = 2.0 * zeta * math.exp(epsilon)  # gamma e^eps = D + (A2 - A1)
    p, q = 0, nodes.shape[0] - 1
    lam = (cdf[q] - cdf[p]) / (d + nodes[q] - nodes[p])
    for n_iter in range(1, max_iter + 1):
        b = cdf - lam * nodes
        run_min = np.minimum.accumulate(b)
        arg_min = _running_argmin(b)
        gain = b - run_min
        q_new = int(np.argmax(gain))
        p_new = int(arg_min[q_new])
        ratio = (cdf[q_new] - cdf[p_new]) / (d + nodes[q_new] - nodes[p_new])
        if not ratio > lam:
            break
        p, q, lam = p_new, q_new, ratio
    return float(nodes[p]), float(nodes[q]), n_iter


def _running_argmin(b):
    """Index of the running minimum of ``b`` (first occurrence)."""
    idx = np.arange(b.shape[0])
    is_new_min = np.concatenate([[True], b[1:] < np.minimum.accumulate(b)[:-1]])
    return np.maximum.accumulate(np.where(is_new_min, idx, 0))


def algorithm1(nodes, probs, zeta, epsilon):
    """003's Algorithm 1 as written: O(k^2) cell pairs, corners and (e1, e2).

    The reference for :func:`optimal_interval`. Two departures from the
    pseudo-code, both needed for it to do what its text says: ``f`` is also
    updated when the critical point ``(e1, e2)`` wins (line 24 forgets it),
    and the critical points are only used for ``i < j`` with
    ``alpha_i != alpha_j`` (Lemma 3.5's mass formula assumes two distinct
    cells; for ``i = j`` the denominators vanish).

    Returns
    -------
    a1, a2 : float
    """
    nodes = np.asarray(nodes, dtype=np.float64)
    probs = np.asarray(probs, dtype=np.float64)
    k = probs.shape[0]
    alpha = probs / np.diff(nodes)
    c = math.exp(-epsilon)

    def F(x1, x2):
        return float(window_probability(nodes, probs, x1, x2, zeta, epsilon))

    best, interval = 0.0, (float(nodes[0]), float(nodes[0]))

    def consider(x1, x2):
        nonlocal best, interval
        value = F(x1, x2)
        if best < value:
            best, interval = value, (float(x1), float(x2))

    for i in range(k):
        for j in range(i, k):
            for x1 in (nodes[i], nodes[i + 1]):
                for x2 in (nodes[j], nodes[j + 1]):
                    consider(x1, x2)
            if i == j or alpha[i] == alpha[j]:
                continue
            h = alpha[i] * nodes[i + 1] + np.sum(probs[i + 1 : j]) - alpha[j] * nodes[j]
            c1 = 2.0 * zeta * alpha[i] - c * h
            c2 = 2.0 * zeta * alpha[j] - c * h
            e1 = c2 / (c * (alpha[j] - alpha[i]))
            e2 = c1 / (c * (alpha[j] - alpha[i]))
            e2_inside = nodes[j] < e2 < nodes[j + 1]
            e1_inside = nodes[i] < e1 < nodes[i + 1]
            if e2_inside:
                consider(nodes[i], e2)
                consider(nodes[i + 1], e2)
            if e1_inside:
                consider(e1, nodes[j])
                consider(e1, nodes[j + 1])
            if e1_inside and e2_inside:
                consider(e1, e2)
    return interval


# -- the mechanism on the grid ------------------------------------------------------
def auto_granularity(lo, hi, steps=1024):
    """Power-of-two grid step with at least ``steps`` steps over ``[lo, hi]``.

    Also fine enough relative to the magnitude of the bounds that every
    grid value ``j * g`` is an exact float (at most 2^50 steps from 0).

    Examples
    --------
    >>> from skdp_label.mechanisms.rp_with_prior._interval import auto_granularity
    >>> auto_granularity(0.0, 350.0)
    0.25
    """
    span = float(hi) - float(lo)
    magnitude = max(abs(float(lo)), abs(float(hi)), span)
    exponent = math.floor(math.log2(span / steps))
    exponent = max(exponent, math.ceil(math.log2(magnitude)) - 50)
    return math.ldexp(1.0, exponent)


def grid_interval(a1, a2, zeta, granularity):
    """Grid units ``(u1, u2, w)`` of the interval ends and the half-window."""
    g = float(granularity)
    return int(np.rint(a1 / g)), int(np.rint(a2 / g)), int(np.rint(zeta / g))


def _levels(u1, u2, w, epsilon):
    """(window probability per output, rest probability per output, rest total)."""
    c = math.exp(-epsilon)
    gamma = (2 * w + 1) + c * (u2 - u1)
    return 1.0 / gamma, c / gamma, c * (u2 - u1) / gamma


def grid_matrix(u1, u2, w, epsilon):
    """Transition matrix of the grid mechanism.

    Rows: input units ``u1 .. u2``; columns: output units ``u1 - w .. u2 + w``.
    """
    inside, outside, _ = _levels(u1, u2, w, epsilon)
    rows = np.arange(u1, u2 + 1)[:, None]
    cols = np.arange(u1 - w, u2 + w + 1)[None, :]
    return np.where(np.abs(cols - rows) <= w, inside, outside)


def _sum_sq(lo, hi, c):
    """sum_{o = lo}^{hi} (o - c)^2 over integers (0 when empty); vectorised."""
    m = np.maximum(hi - lo + 1, 0).astype(np.float64)
    mid = (lo + hi) / 2.0
    return m * ((mid - c) ** 2 + (m * m - 1.0) / 12.0)


def _sum_abs(lo, hi, c):
    """sum_{o = lo}^{hi} |o - c| over integers (0 when empty); vectorised."""
    lo = np.asarray(lo, dtype=np.float64)
    hi = np.asarray(hi, dtype=np.float64)
    split = np.clip(np.floor(c), lo - 1, hi)  # o <= split lie below c

    def ramp(a, b, sign):  # sum over o in [a, b] of sign * (o - c)
        m = np.maximum(b - a + 1, 0)
        return sign * m * ((a + b) / 2.0 - c)

    return ramp(lo, split, -1.0) + ramp(split + 1, hi, 1.0)


def grid_expected_loss(values, probs, u1, u2, w, epsilon, granularity, loss="squared"):
    """E l(yhat, y) of the grid mechanism for labels ``y = values`` w.p. ``probs``.

    Exact, in closed form (no matrix): a label at ``v`` uses row
    ``u = clip(rint(v / g), u1, u2)``. ``loss`` is ``'squared'``
    (``(yhat - y)^2``) or ``'absolute'``.
    """
    g = float(granularity)
    values = np.asarray(values, dtype=np.float64)
    c = values / g
    u = np.clip(np.rint(c), u1, u2)
    inside, outside, _ = _levels(u1, u2, w, epsilon)
    total = _sum_sq if loss == "squared" else _sum_abs
    window = total(u - w, u + w, c)
    rest = total(u1 - w, u - w - 1, c) + total(u + w + 1, u2 + w, c)
    per_label = inside * window + outside * rest
    scale = g * g if loss == "squared" else g
    return float(np.dot(probs, per_label) * scale)


def auto_window(nodes, values, probs, epsilon, granularity, loss="squared", n_coarse=48):
    """Half-window ``w`` (grid units) minimising the expected loss, and its interval.

    For each candidate ``w`` the interval is :func:`optimal_interval` for the
    half-window ``(w + 1/2) g`` and the loss is :func:`grid_expected_loss`.
    Candidates: ``w = 0`` and ``n_coarse`` geometrically spaced values up to
    the span of the nodes, then every integer between the neighbours of the
    best one (a 512-point subset if there are more).

    Returns
    -------
    w : int
    interval : (float, float)
    loss : float
    """
    g = float(granularity)
    w_max = max(1, math.ceil((nodes[-1] - nodes[0]) / g))

    def evaluate(w):
        a1, a2, _ = optimal_interval(nodes, probs, (w + 0.5) * g, epsilon)
        u1, u2, _ = grid_interval(a1, a2, 0.0, g)
        return grid_expected_loss(values, probs, u1, u2, w, epsilon, g, loss), (a1, a2)

    coarse = np.unique(np.concatenate([[0], np.rint(np.geomspace(1, w_max, n_coarse))])).astype(int)
    results = {int(w): evaluate(int(w)) for w in coarse}
    best = min(results, key=lambda w: results[w][0])
    i = int(np.searchsorted(coarse, best))
    lo = int(coarse[max(i - 1, 0)])
    hi = int(coarse[min(i + 1, coarse.size - 1)])
    fine = np.arange(lo, hi + 1)
    if fine.size > 512:
        fine = np.unique(np.rint(np.linspace(lo, hi, 512)).astype(int))
    for w in fine:
        if int(w) not in results:
            results[int(w)] = evaluate(int(w))
    best = min(results, key=lambda w: (results[w][0], w))
    return best, results[best][1], results[best][0]


# -- sampling ------------------------------------------------------------------------
@numba.njit(cache=True, nogil=True)
def _sample_grid(y, inv_granularity, granularity, u1, u2, w, sizes, limits, inverses, qd, frac,
                 rng, out):
    # One digit d a label decides the part and the position in it:
    # d < qd is the rest, d > qd the window (d == qd: a tie, rare); given the
    # part, d (the rest) or d - qd - 1 (the window) is uniform on a range and
    # its residue mod the part's size is the position when it lies below the
    # part's limit (a multiple of the size), else fresh digits give it (rare).
    # The coin flips select by masks, not branches (mispredicted on about
    # every other label); per-part constants come from tables indexed by the
    # part: two constants selected per label were folded by LLVM into a
    # 64-bit division a label.
    top = np.int64(qd)
    n_window = 2 * w + 1
    s = hold(rng)  # the generator's state held in registers (see sample_rows)
    for i in range(y.shape[0]):
        begin_row(rng, i)
        # Row: clip to the interval (eq. 3.6), round to the grid (y * (1 / g)
        # is y / g for a power-of-two g; sample_labels divides for others).
        u = np.int64(min(max(np.rint(y[i] * inv_granularity), float(u1)), float(u2)))
        d, s = held_digit(rng, s)
        di = np.int64(d)
        rest = opaque((di - top) >> 63)  # -1: the rest (d < qd), 0: the window
        e = di - ((top + 1) & ~rest)
        part = -rest
        r = _int_residue(e, sizes[part], inverses[part])
        # One branch for both rare cases (``or`` compiles to two).
        if (e >= limits[part]) | (di == top):  # rare
            release(rng, s)
            r = _grid_rare(di == top, part, frac, sizes, rng)
            s = hold(rng)
            rest = opaque((r >> 63))  # the rare draw's part, in r's sign
            r = r ^ rest
        # The window: u - w + r. The rest: u1 - w + r below the window (r <
        # u - u1), else n_window units further (past the window).
        past = ~opaque((r - (u - u1)) >> 63)  # -1 when r >= u - u1
        unit = u - w + r + (((u1 - u) + (n_window & past)) & rest)
        out[i] = float(unit) * granularity
    release(rng, s)


@numba.njit(cache=True, nogil=True)
def _grid_rare(tie, part, frac, sizes, rng):
    """:func:`_sample_grid` where the first digit does not decide: on a tie
    with qd the fraction decides the part (``bernoulli_exact``), and the
    position is drawn from fresh digits (``uniform_index``). Returns the
    position, bit-inverted (``~r < 0``) for the rest. Not inlined: a helper
    inlined with ``rng`` keeps its reference count, two atomic operations a
    label."""
    if tie:
        part = np.int64(bernoulli_exact(frac, rng))
    r = np.int64(uniform_index(float(sizes[part]), rng))
    return ~r if part == 1 else r


def grid_parts(u1, u2, w, rest_total):
    """Constants of :func:`_sample_grid`: per part (0 the window, 1 the rest)
    its number of outputs (at least 1), the limit below which the part's
    uniform digit has an exactly uniform residue mod that number (its
    largest multiple in the digit's range), and its inverse; then ``qd,
    frac``, the integer part and fraction of ``rest_total * 2**53``.

    The rest's digit is uniform on ``[0, qd)``, the window's on ``[0,
    2**53 - qd - 1)``.

    Returns
    -------
    sizes, limits : ndarray of int64, shape (2,)
    inverses : ndarray of float64, shape (2,)
    qd, frac : float
    """
    qd, frac = split_probability(rest_total)
    sizes = np.array([2 * w + 1, max(u2 - u1, 1)], dtype=np.int64)
    spans = [max(_DIGIT - qd - 1.0, 0.0), qd]
    limits = np.array([s - math.fmod(s, m) for s, m in zip(spans, sizes.tolist())], dtype=np.int64)
    return sizes, limits, 1.0 / sizes, qd, frac


def inverse_step(granularity):
    """``1 / granularity`` where it is exact (a power-of-two step whose
    inverse is finite: then ``y * (1 / g)`` is ``y / g``), else 0."""
    g = float(granularity)
    return 1.0 / g if math.frexp(g)[0] == 0.5 and g >= 2.0**-1022 else 0.0


def sample_labels(y, granularity, u1, u2, w, epsilon, rng):
    """Noisy labels (output unit times ``granularity``) for labels ``y``,
    one release, in one pass: each label's unit ``clip(rint(y / granularity),
    u1, u2)``, then rest or window by an exact Bernoulli of the rest's total
    mass (exact for the float however small: large epsilon, wide windows),
    then an exactly uniform integer over the chosen part, row by row, both
    from one digit a label in the common case (:func:`_sample_grid`).
    """
    g = float(granularity)
    y = np.ascontiguousarray(y, dtype=np.float64)
    inv = inverse_step(g)
    if inv == 0.0:  # not a power of two (never a mechanism's grid): divide first
        y, inv = y / g, 1.0
    _, _, rest_total = _levels(u1, u2, w, epsilon)
    out = np.empty(y.shape[0])
    kernel_for(_sample_grid, rng, y.shape[0])(
        y, inv, g, np.int64(u1), np.int64(u2), np.int64(w),
        *grid_parts(u1, u2, w, float(rest_total)), rng, out,
    )
    return out


def sample_grid(units, u1, u2, w, epsilon, rng):
    """Output units for input units ``units`` (in ``[u1, u2]``), one release
    (:func:`sample_labels` on the unit grid)."""
    return sample_labels(units, 1.0, u1, u2, w, epsilon, rng).astype(np.int64)
