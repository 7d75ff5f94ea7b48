"""Randomized quantization mechanisms (paper 002) as label transformers."""

from __future__ import annotations

import functools
import math
from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils._param_validation import StrOptions

from ..._accountant import BudgetAccountant
from ..._kernels._sampling import categorical_tables, sample_rows
from ...utils._progress import VERBOSE_CONSTRAINT, VERBOSE_DOC, Progress, format_epsilon
from .._base import OUT_OF_BOUNDS_CONSTRAINT, BaseDiscreteMechanism
from .._registry import register_mechanism
from .._validation import NumberInterval, check_bounds, check_labels_in_bounds
from ._core import (
    OBJECTIVES,
    distribution_at,
    end_operator,
    erm_selection,
    make_cells,
    minimal_margin,
    pair_index,
    privacy_loss,
    product_selection,
    row_weights,
    rqm_selection,
    uniform_bins,
)
from ._solver import mvu_pieces, mvu_rows, optimize_positions, solve_mvu, solve_optm

__all__ = ["RandomizedQuantization", "RQM", "ERM", "OPTM", "MVU"]


def _check_prior(prior, lo, hi):
    """Public prior: None (uniform on the bounds) or (values, probabilities)."""
    if prior is None:
        return None
    try:
        values, probs = prior
    except (TypeError, ValueError):
        raise ValueError(
            "prior must be None (uniform) or a pair (values, probabilities)."
        ) from None
    values = np.asarray(values, dtype=np.float64).ravel()
    probs = np.asarray(probs, dtype=np.float64).ravel()
    if values.shape != probs.shape or values.size == 0:
        raise ValueError("prior values and probabilities must have the same non-zero length.")
    if not (np.all(np.isfinite(values)) and np.all(np.isfinite(probs))):
        raise ValueError("prior values and probabilities must be finite.")
    if np.any(probs < 0) or probs.sum() <= 0:
        raise ValueError("prior probabilities must be non-negative with a positive sum.")
    if values.min() < lo or values.max() > hi:
        raise ValueError("prior values must lie within the declared bounds.")
    return values, probs / probs.sum()


def _prior_key(prior):
    return None if prior is None else (tuple(prior[0].tolist()), tuple(prior[1].tolist()))


def _prior_from_key(key):
    return None if key is None else (np.array(key[0]), np.array(key[1]))


# What a law is checked against (BaseLabelMechanism._law_epsilon), for messages.
_LAW_BUDGET = "the epsilon its law may cost (epsilon less the samplers' slack, docs/sampling.md)"


class _QuantizationBase(BaseDiscreteMechanism):
    """Shared machinery: validation, end rows, exact loss, sampling.

    A fitted mechanism holds *pieces* of ``[lo, hi]`` and the output
    distribution at both ends of each piece (``_rows``); inside a piece the
    distribution is the affine interpolation, so a label picks one end with
    the interpolation weight and the end's distribution is sampled (exactly
    the mixture). Subclasses implement :meth:`_build`.
    """

    _parameter_constraints = {
        **BaseDiscreteMechanism._parameter_constraints,
        "bounds": [tuple, list, None],
        "prior": [tuple, list, None],
        "objective": [StrOptions(set(OBJECTIVES))],
        "out_of_bounds": OUT_OF_BOUNDS_CONSTRAINT,
    }
    # Probabilities down to e^-20 are represented faithfully by the sampler.
    _max_epsilon = 20.0

    def _public_bounds(self):
        return check_bounds(self.bounds, owner=type(self).__name__)

    def _label_range(self):
        return self._public_bounds()

    def _check_public_inputs(self):
        lo, hi = self._public_bounds()
        _check_prior(self.prior, lo, hi)
        self._check_family_inputs(lo, hi)

    def _check_family_inputs(self, lo, hi):
        """Validate the family's own parameters (raise ValueError)."""

    def _fit_mechanism(self, y):
        lo, hi = self._public_bounds()
        prior = _check_prior(self.prior, lo, hi)
        pieces, rows, outputs = self._build(lo, hi, prior, self._law_epsilon())
        loss = privacy_loss(rows)
        if not loss <= self._law_epsilon():  # the builders guarantee it; never sample otherwise
            raise RuntimeError(f"{type(self).__name__}: privacy loss {loss} exceeds {_LAW_BUDGET}")
        self.privacy_loss_ = loss
        self.output_values_ = outputs
        self._pieces = pieces
        self._rows = rows
        self._row_tables = categorical_tables(rows)  # exact-tail sampler tables (packed)
        self.expected_error_ = float(
            (row_weights(pieces, outputs, prior, self.objective) * rows).sum()
        )
        # Public evaluation grid for audits: every piece end and midpoint.
        mids = (pieces.left + pieces.right) / 2
        grid = np.unique(np.concatenate([pieces.left, pieces.right, mids]))
        self.input_values_ = grid
        self.transition_matrix_ = distribution_at(pieces, rows, grid)

    def output_distribution(self, x: ArrayLike) -> np.ndarray:
        """Exact output distribution of labels ``x`` (in the bounds).

        Parameters
        ----------
        x : array-like of shape (n,)
            Label values (public evaluation points, not private labels).

        Returns
        -------
        probabilities : ndarray of shape (n, n_outputs)
            ``P(M(x) = output_values_[i])``.
        """
        x = np.asarray(x, dtype=np.float64).ravel()
        check_labels_in_bounds(x, self._public_bounds())
        return distribution_at(self._pieces, self._rows, x)

    def _randomize_column(self, y, rng):
        # The distribution inside a piece is (1 - t) row_a + t row_b: pick the
        # end by a coin of probability t, then sample its row, label by label
        # in one pass (no row array), one word a label (docs/sampling.md).
        pieces = (self._pieces.left, self._pieces.right)
        return sample_rows(rng, self.output_values_, y=y, pieces=pieces, tables=self._tables())

    _PACKED_CACHES = ("_row_tables", *BaseDiscreteMechanism._PACKED_CACHES)

    def _tables(self):
        """The exact-tail sampler tables of ``_rows`` (packed at fit; rebuilt after
        unpickling, which leaves them out)."""
        if getattr(self, "_row_tables", None) is None:
            self._row_tables = categorical_tables(self._rows)
        return self._row_tables


_COMMON_DOC = """    bounds : tuple (lo, hi)
        Public label bounds; labels outside raise ValueError.
    prior : tuple (values, probabilities), optional
        Public prior the error is measured (and optimised) under; ``None``
        means uniform on the bounds. Nothing is spent on it.
    objective : {'squared', 'mae'}, default='squared'
        Error reported in ``expected_error_`` and minimised by the optimised
        mechanisms and margins: squared error (the variance, what matters
        for training with squared loss) or absolute error (002's measure).
    out_of_bounds : {'raise', 'clip'}, default='raise'
        Labels outside the declared bounds (or domain) raise ``ValueError``
        before anything is spent; ``'clip'`` clips them to the bounds first.
    accountant : BudgetAccountant, optional
        Charged with every release.
    random_state : None or int, default=None
        ``None``: fresh OS entropy for every release, nothing kept. An int
        makes releases reproducible and emits ``PrivacyLeakWarning``
        (docs/randomness.md). Generators are refused.
        ``None`` draws fresh OS entropy for every release.
"""

_COMMON_ATTRS = """    output_values_ : ndarray of shape (m,)
        The bins (possible outputs).
    privacy_loss_ : float
        Exact privacy loss: the largest log-ratio of an output's probability
        between two labels in the bounds, limits at the bin edges included.
    expected_error_ : float
        Expected error (``objective``) under the prior, exact.
    input_values_ : ndarray
        Public evaluation grid (piece ends and midpoints) for audits.
    transition_matrix_ : ndarray of shape (n_inputs, m)
        Exact output distribution at ``input_values_``.
    epsilon_spent_ : float
        Epsilon spent per label by this object so far.
"""


class _BinsMixin:
    """Alg. 1 on fixed bins with a joint selection ``pi``."""

    def _bins_rows(self, bins, lo, hi, pi_of):
        cells = make_cells(bins, lo, hi)
        pairs = pair_index(cells)
        pi = pi_of(cells, pairs)
        rows = (end_operator(cells, pairs) @ pi).reshape(-1, cells.bins.size)
        return cells, pairs, pi, rows

    def _set_selection(self, cells, pairs, pi):
        m = cells.bins.size
        selection = np.zeros((m - 1, m, m))
        selection[cells.index[pairs[0]], pairs[1], pairs[2]] = pi
        self.bins_ = cells.bins.copy()
        self.selection_ = selection


@register_mechanism("quantization", task="regression")
class RandomizedQuantization(_BinsMixin, _QuantizationBase):
    __doc__ = (
        """Unbiased randomized quantization on given bins (002 Alg. 1).

    A label ``x`` with ``B_j <= x < B_{j+1}`` picks a left bin ``l <= j`` and
    a right bin ``r > j`` from the selection distributions, then outputs
    ``B_l`` with probability ``(B_r - x) / (B_r - B_l)`` and ``B_r``
    otherwise, so ``E[M(x)] = x`` for every real label in the bounds. The
    privacy loss is computed exactly from the finite set of extreme output
    probabilities (002 Lemma 2: both ends of every cell, the limits at the
    bin edges included) and ``fit`` refuses selection distributions whose
    loss exceeds ``epsilon`` (before anything is spent).

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy cost of one label; must be >= the mechanism's exact loss.
    bins : array-like of shape (m,), optional
        Increasing bin values with ``bins[0] < lo`` and ``bins[-1] > hi``.
        ``None``: the two bins ``(hi - lo) / (e^eps - 1)`` beyond the bounds
        (the most accurate two-bin mechanism at this epsilon).
    selection : tuple (left, right) of arrays of shape (m - 1, m), optional
        ``left[j, l]`` is the probability of the left bin ``l`` (``l <= j``)
        and ``right[j, r]`` of the right bin ``r`` (``r > j``) for labels in
        ``[B_j, B_{j+1})``, drawn independently. Only rows of cells that meet
        the bounds are used. Not needed for two bins.
"""
        + _COMMON_DOC
        + """
    Attributes
    ----------
    bins_ : ndarray of shape (m,)
        The bins.
    selection_ : ndarray of shape (m - 1, m, m)
        ``selection_[j, l, r]``: probability of the pair ``(l, r)`` for labels
        in cell ``j`` (zero for cells outside the bounds).
"""
        + _COMMON_ATTRS
        + """
    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms import RandomizedQuantization
    >>> mech = RandomizedQuantization(1.0, bounds=(-1, 1), random_state=0).fit([0.0])
    >>> mech.output_values_.round(3)
    array([-2.164,  2.164])
    >>> bool(mech.privacy_loss_ <= 1.0)
    True
    >>> p = mech.output_distribution([0.3])
    >>> bool(np.isclose(p @ mech.output_values_, 0.3)[0])
    True
    """
    )

    _parameter_constraints = {
        **_QuantizationBase._parameter_constraints,
        "bins": ["array-like", None],
        "selection": [tuple, list, None],
    }

    def __init__(
        self, epsilon: float = 1.0, *, bounds: tuple[float, float] | None = None,
        bins: int | ArrayLike | None = None, selection: tuple | list | None = None,
        prior: tuple[ArrayLike, ArrayLike] | None = None, objective: str = "squared",
        out_of_bounds: str = "raise", accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.out_of_bounds = out_of_bounds
        self.bounds = bounds
        self.bins = bins
        self.selection = selection
        self.prior = prior
        self.objective = objective

    def _resolved_bins(self, lo, hi):
        if self.bins is None:
            # (1 + 1e-6): the loss log(1 + (hi - lo) / margin) stays below epsilon even
            # when the tiny margins of a large epsilon are rounded to the floats near hi.
            return uniform_bins(lo, hi, 2, minimal_margin(lo, hi, self._law_epsilon()) * (1 + 1e-6))
        return make_cells(self.bins, lo, hi).bins

    def _selection_arrays(self, m):
        if self.selection is None:
            if m != 2:
                raise ValueError(
                    f"RandomizedQuantization needs selection=(left, right) for {m} bins "
                    "(only two bins have a single possible selection)."
                )
            left = np.zeros((1, 2))
            right = np.zeros((1, 2))
            left[0, 0] = right[0, 1] = 1.0
            return left, right
        try:
            left, right = self.selection
        except (TypeError, ValueError):
            raise ValueError("selection must be a pair (left, right) of arrays.") from None
        out = []
        for name, arr, allowed in (
            ("left", left, np.tril(np.ones((m - 1, m)))),
            ("right", right, 1.0 - np.tril(np.ones((m - 1, m)))),
        ):
            arr = np.asarray(arr, dtype=np.float64)
            if arr.shape != (m - 1, m) or not np.all(np.isfinite(arr)) or np.any(arr < 0):
                raise ValueError(
                    f"selection {name} must be a non-negative array of shape ({m - 1}, {m})."
                )
            if np.any(arr * (1.0 - allowed) > 0):
                raise ValueError(
                    f"selection {name}[j] may only put mass on bins on the {name} of cell j "
                    "(left: l <= j, right: r > j)."
                )
            if np.any(np.abs(arr.sum(axis=1) - 1.0) > 1e-9):
                raise ValueError(f"each row of selection {name} must sum to 1.")
            out.append(arr / arr.sum(axis=1, keepdims=True))
        return out

    def _check_family_inputs(self, lo, hi):
        bins = self._resolved_bins(lo, hi)
        left, right = self._selection_arrays(bins.size)
        _, _, _, rows = self._bins_rows(
            bins, lo, hi, lambda c, p: product_selection(c, p, left, right)
        )
        loss = privacy_loss(rows)
        if not loss <= self._law_epsilon():
            raise ValueError(
                f"these bins and selection distributions cost epsilon = {loss:.10g} (exact privacy "
                f"loss) > {self._law_epsilon():.10g}, {_LAW_BUDGET}."
            )

    def _build(self, lo, hi, prior, epsilon):
        bins = self._resolved_bins(lo, hi)
        left, right = self._selection_arrays(bins.size)
        cells, pairs, pi, rows = self._bins_rows(
            bins, lo, hi, lambda c, p: product_selection(c, p, left, right)
        )
        self._set_selection(cells, pairs, pi)
        return cells, rows, cells.bins


# -- RQM and ERM: one-parameter families calibrated by the exact loss -------------
def _family_rows(kind, bins, lo, hi, theta, _layout=None):
    cells, pairs, ends = _layout or _family_layout(bins, lo, hi)
    make = rqm_selection if kind == "rqm" else erm_selection
    left, right = make(cells.bins, theta)
    pi = product_selection(cells, pairs, left, right)
    return cells, pairs, pi, (ends @ pi).reshape(-1, cells.bins.size)


def _family_layout(bins, lo, hi):
    cells = make_cells(bins, lo, hi)
    pairs = pair_index(cells)
    return cells, pairs, end_operator(cells, pairs)


def _calibrate(kind, bins, lo, hi, epsilon):
    """Largest parameter whose exact loss is <= epsilon (None if even 0 is not).

    RQM's q runs over [0, 1) (0: only the outer bins), ERM's gamma over
    [0, inf) (0: uniform selection); the loss grows with either, and the
    bisection keeps its lower end private whether or not it is monotone.
    """
    layout = _family_layout(bins, lo, hi)

    def loss(theta):
        return privacy_loss(_family_rows(kind, bins, lo, hi, theta, layout)[3])

    if not loss(0.0) <= epsilon:
        return None
    if kind == "rqm":
        low, high = 0.0, 1.0 - 1e-12
    else:
        low, high = 0.0, 1.0
        while loss(high) <= epsilon and high < 1e4:
            low, high = high, 2.0 * high
    if loss(high) <= epsilon:
        return high
    for _ in range(50):
        mid = (low + high) / 2.0
        if loss(mid) <= epsilon:
            low = mid
        else:
            high = mid
    return low


@functools.lru_cache(maxsize=256)
def _auto_margin(kind, m, lo, hi, epsilon, prior_key, objective):
    """Margin of evenly spaced bins minimising the calibrated family's error.

    Only public inputs enter (and the cache): bounds, m, epsilon, prior.
    """
    prior = _prior_from_key(prior_key)
    base = minimal_margin(lo, hi, epsilon)

    def error(s):
        bins = uniform_bins(lo, hi, m, base * math.exp(s))
        theta = _calibrate(kind, bins, lo, hi, epsilon)
        if theta is None:
            return 1e300
        cells, _, _, rows = _family_rows(kind, bins, lo, hi, theta)
        return float((row_weights(cells, cells.bins, prior, objective) * rows).sum())

    # Scan first (infeasible margins give 1e300), then refine around the best.
    grid = np.linspace(1e-6, math.log(64.0), 13)
    values = [error(s) for s in grid]
    i = int(np.argmin(values))
    if values[i] >= 1e300:
        return None
    from scipy.optimize import minimize_scalar

    lo_s, hi_s = grid[max(i - 1, 0)], grid[min(i + 1, grid.size - 1)]
    res = minimize_scalar(error, bounds=(lo_s, hi_s), method="bounded", options={"xatol": 1e-4})
    best = res.x if res.fun <= values[i] else grid[i]
    return base * math.exp(best)


class _FamilyBase(_BinsMixin, _QuantizationBase):
    """RQM / ERM: bins (evenly spaced, or given) and a calibrated parameter."""

    _kind = None
    _param = None

    _parameter_constraints = {
        **_QuantizationBase._parameter_constraints,
        "bins": [NumberInterval(Integral, 2, None, closed="left"), "array-like"],
        "margin": [StrOptions({"auto"}), NumberInterval(Real, 0, None, closed="neither")],
    }

    def _resolved_bins(self, lo, hi):
        if isinstance(self.bins, Integral):
            margin = self.margin
            if margin == "auto":
                margin = _auto_margin(
                    self._kind, int(self.bins), lo, hi, self._law_epsilon(),
                    _prior_key(_check_prior(self.prior, lo, hi)), self.objective,
                )
                if margin is None:
                    raise ValueError(
                        f"{type(self).__name__}: no evenly spaced {int(self.bins)} bins reach "
                        f"epsilon = {self._law_epsilon():g}."
                    )
            return uniform_bins(lo, hi, int(self.bins), float(margin))
        if self.margin != "auto":
            raise ValueError("margin only applies when bins is a number of bins.")
        return make_cells(self.bins, lo, hi).bins

    def _parameter(self, bins, lo, hi):
        value = getattr(self, self._param)
        eps = self._law_epsilon()
        if value == "auto":
            theta = _calibrate(self._kind, bins, lo, hi, eps)
            if theta is None:
                raise ValueError(
                    f"{type(self).__name__}: even {self._param} = 0 costs more than epsilon = "
                    f"{eps:g} with these bins; move the outer bins further out."
                )
            return theta
        loss = privacy_loss(_family_rows(self._kind, bins, lo, hi, float(value))[3])
        if not loss <= eps:
            raise ValueError(
                f"{type(self).__name__}: {self._param} = {float(value):g} costs epsilon = "
                f"{loss:.10g} (exact privacy loss) > {eps:.10g}, {_LAW_BUDGET}."
            )
        return float(value)

    def _check_family_inputs(self, lo, hi):
        self._parameter(self._resolved_bins(lo, hi), lo, hi)

    def _build(self, lo, hi, prior, epsilon):
        bins = self._resolved_bins(lo, hi)
        theta = self._parameter(bins, lo, hi)
        cells, pairs, pi, rows = _family_rows(self._kind, bins, lo, hi, theta)
        self._set_selection(cells, pairs, pi)
        setattr(self, self._param + "_", theta)
        return cells, rows, cells.bins


_FAMILY_PARAMS = """    bins : int or array-like, default=4
        Number of evenly spaced bins on ``[lo - margin, hi + margin]``
        (002 §3.3), or the bin values themselves.
    margin : float or 'auto', default='auto'
        How far the outer bins lie beyond the bounds; 'auto' minimises
        ``expected_error_`` (with the calibrated parameter) over it.
"""


@register_mechanism("rqm", task="regression")
class RQM(_FamilyBase):
    __doc__ = (
        """Randomized quantization mechanism of Youn et al. (002 §3.3).

    Alg. 1 with geometric selection distributions: the outer bins are always
    kept, each interior bin independently with probability ``q``, and the
    nearest kept bin on each side of the label is used. ``q='auto'`` takes
    the largest ``q`` whose *exact* privacy loss is at most ``epsilon``
    (Youn et al.'s bound, ``paper_bound``, is loose).

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy cost of one label.
"""
        + _FAMILY_PARAMS
        + """    q : float in [0, 1) or 'auto', default='auto'
        Keep probability of the interior bins; a given ``q`` must cost at
        most ``epsilon``.
"""
        + _COMMON_DOC
        + """
    Attributes
    ----------
    q_ : float
        The parameter used.
    bins_ : ndarray of shape (m,)
        The bins.
    selection_ : ndarray of shape (m - 1, m, m)
        Pair probabilities per cell (see :class:`RandomizedQuantization`).
"""
        + _COMMON_ATTRS
        + """
    Examples
    --------
    >>> from skdp_label.mechanisms import RQM
    >>> mech = RQM(1.0, bounds=(-1, 1), bins=[-2.7, -0.9, 0.9, 2.7]).fit([0.0])
    >>> bool(mech.privacy_loss_ <= 1.0 < RQM.paper_bound(mech.bins_, (-1, 1), mech.q_))
    True
    """
    )
    _kind, _param = "rqm", "q"

    _parameter_constraints = {
        **_FamilyBase._parameter_constraints,
        "q": [StrOptions({"auto"}), NumberInterval(Real, 0, 1, closed="left")],
    }

    def __init__(
        self, epsilon: float = 1.0, *, bounds: tuple[float, float] | None = None,
        bins: int | ArrayLike | None = 4, margin: float | str = "auto", q: float | str = "auto",
        prior: tuple[ArrayLike, ArrayLike] | None = None, objective: str = "squared",
        out_of_bounds: str = "raise", accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.out_of_bounds = out_of_bounds
        self.bounds = bounds
        self.bins = bins
        self.margin = margin
        self.q = q
        self.prior = prior
        self.objective = objective

    @staticmethod
    def paper_bound(bins: ArrayLike, bounds: tuple[float, float], q: float) -> float:
        """Youn et al.'s bound on RQM's loss as quoted by 002 (symmetric bounds).

        ``log(2 (1 - q)^2 (c + Delta) / Delta) + m log(1 / (1 - q))`` with
        ``c`` the half-width of the bounds and ``Delta`` the margin of the
        outer bins.
        """
        lo, hi = bounds
        c = (hi - lo) / 2.0
        delta = lo - bins[0]
        m = len(bins)
        return math.log(2.0 * (1.0 - q) ** 2 * (c + delta) / delta) + m * math.log(1.0 / (1.0 - q))


@register_mechanism("erm", task="regression")
class ERM(_FamilyBase):
    __doc__ = (
        """Exponential randomized mechanism (002 §3.3, eq. 2).

    Alg. 1 whose selection distributions weight a bin exponentially in its
    distance to the label's cell: ``q_j(i) ~ exp(gamma (B_i - B_j) / (2 (B_j -
    B_1)))`` on the left and the mirror image on the right. ``gamma='auto'``
    takes the largest ``gamma`` whose *exact* privacy loss is at most
    ``epsilon``. 002's Thm. 1 bound (``paper_bound``) is not used: it is
    loose for wide margins and *fails* for narrow ones (two bins at margin
    ``c / 10`` cost ``log 21 = 3.04`` while the bound says ``log 4.4 +
    gamma``), see docs/quantization.md.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy cost of one label.
"""
        + _FAMILY_PARAMS
        + """    gamma : float >= 0 or 'auto', default='auto'
        Sharpness of the selection; a given ``gamma`` must cost at most
        ``epsilon``.
"""
        + _COMMON_DOC
        + """
    Attributes
    ----------
    gamma_ : float
        The parameter used.
    bins_ : ndarray of shape (m,)
        The bins.
    selection_ : ndarray of shape (m - 1, m, m)
        Pair probabilities per cell (see :class:`RandomizedQuantization`).
"""
        + _COMMON_ATTRS
        + """
    Examples
    --------
    >>> from skdp_label.mechanisms import ERM
    >>> mech = ERM(1.5, bounds=(-1, 1), bins=[-2.7, -0.4, 0.4, 2.7]).fit([0.0])
    >>> bool(mech.privacy_loss_ <= 1.5 < ERM.paper_bound(mech.bins_, (-1, 1), mech.gamma_))
    True
    """
    )
    _kind, _param = "erm", "gamma"

    _parameter_constraints = {
        **_FamilyBase._parameter_constraints,
        "gamma": [StrOptions({"auto"}), NumberInterval(Real, 0, None, closed="left")],
    }

    def __init__(
        self, epsilon: float = 1.0, *, bounds: tuple[float, float] | None = None,
        bins: int | ArrayLike | None = 4, margin: float | str = "auto",
        gamma: float | str = "auto", prior: tuple[ArrayLike, ArrayLike] | None = None,
        objective: str = "squared", out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None, random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.out_of_bounds = out_of_bounds
        self.bounds = bounds
        self.bins = bins
        self.margin = margin
        self.gamma = gamma
        self.prior = prior
        self.objective = objective

    @staticmethod
    def paper_bound(bins: ArrayLike, bounds: tuple[float, float], gamma: float) -> float:
        """002 Thm. 1: ``gamma + log(2 m (c + Delta) / c)`` (symmetric bounds)."""
        lo, hi = bounds
        c = (hi - lo) / 2.0
        delta = lo - bins[0]
        return gamma + math.log(2.0 * len(bins) * (c + delta) / c)


# -- OPTM and MVU: linear programs ------------------------------------------------
@functools.lru_cache(maxsize=256)
def _optm_bins(m, lo, hi, epsilon, prior_key, objective):
    """Optimised bins for OPTM (public inputs only, cached)."""
    prior = _prior_from_key(prior_key)

    def error(bins):
        res = solve_optm(bins, lo, hi, epsilon, prior, objective)
        if res is None:
            return math.inf
        cells, _, _, rows, _ = res
        return float((row_weights(cells, cells.bins, prior, objective) * rows).sum())

    return optimize_positions(error, lo, hi, m, epsilon)


@functools.lru_cache(maxsize=256)
def _mvu_outputs(m, grid_size, lo, hi, epsilon, prior_key, objective):
    prior = _prior_from_key(prior_key)
    grid = np.linspace(lo, hi, grid_size)

    def error(outputs):
        matrix = solve_mvu(outputs, grid, lo, hi, epsilon, prior, objective)
        if matrix is None:
            return math.inf
        pieces = mvu_pieces(grid, lo, hi)
        return float((row_weights(pieces, outputs, prior, objective) * mvu_rows(matrix)).sum())

    return optimize_positions(error, lo, hi, m, epsilon)


@register_mechanism("optm", task="regression")
class OPTM(_BinsMixin, _QuantizationBase):
    __doc__ = (
        """Optimal randomized quantization (002 §4, Alg. 2), solved exactly.

    Among all mechanisms of Alg. 1 on the bins, the one with the smallest
    expected error under the public prior. The selection of the pair of
    bins may be any joint distribution per cell (the paper's independent
    left/right draws are a special case), which makes the output
    probabilities linear in the unknowns: the privacy constraints on the
    exact set of extreme probabilities (both ends of every cell) and the
    exact expected error (absolute or squared) form a linear program,
    solved with HiGHS. No linearisation bounds ``o_j(i), u_j(i)`` are
    grid-searched. The LP answer is then repaired (clipped, renormalised,
    mixed with the two outer bins by the smallest weight that brings the
    exact loss to ``epsilon``) so that solver tolerance never enters the
    guarantee; the mechanism is unbiased by construction.

    With ``bins`` a number, the bin positions are optimised for the prior
    and the objective (Nelder-Mead over the outer margins and the interior
    spacing; every gap freely for up to 6 bins) instead of hand-searched; a
    local search over about 100 LPs, cached by the public inputs.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy cost of one label.
    bins : int or array-like, default=4
        Number of bins to place optimally (2 to 16), or the bin values
        (increasing, the outer two strictly beyond the bounds; up to 64).
"""
        + _COMMON_DOC
        + VERBOSE_DOC
        + """
    Attributes
    ----------
    bins_ : ndarray of shape (m,)
        The bins.
    selection_ : ndarray of shape (m - 1, m, m)
        Optimal pair probabilities per cell.
    repair_weight_ : float
        Weight of the repair mixture (0 when the cleaned LP answer was
        exactly private already).
"""
        + _COMMON_ATTRS
        + """
    Examples
    --------
    >>> from skdp_label.mechanisms import OPTM
    >>> mech = OPTM(1.0, bounds=(-1, 1), bins=[-3, -0.5, 0.5, 3], objective='mae').fit([0.0])
    >>> round(mech.expected_error_, 3), bool(mech.privacy_loss_ <= 1.0)
    (1.852, True)
    """
    )

    _parameter_constraints = {
        **_QuantizationBase._parameter_constraints,
        # Placing more than 16 bins would take ~100 LPs of up to 43,000
        # variables: give the positions for m up to 64.
        "bins": [NumberInterval(Integral, 2, 16, closed="both"), "array-like"],
        "verbose": VERBOSE_CONSTRAINT,
    }

    def __init__(
        self, epsilon: float = 1.0, *, bounds: tuple[float, float] | None = None,
        bins: int | ArrayLike | None = 4, prior: tuple[ArrayLike, ArrayLike] | None = None,
        objective: str = "squared", out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None, random_state: int | None = None,
        verbose: int = 0,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.out_of_bounds = out_of_bounds
        self.verbose = verbose
        self.bounds = bounds
        self.bins = bins
        self.prior = prior
        self.objective = objective

    def _check_family_inputs(self, lo, hi):
        if not isinstance(self.bins, Integral):
            bins = make_cells(self.bins, lo, hi).bins
            if bins.size > 64:
                raise ValueError("OPTM supports at most 64 bins.")

    def _build(self, lo, hi, prior, epsilon):
        progress = Progress(self.verbose, type(self).__name__)
        if isinstance(self.bins, Integral):
            hits = _optm_bins.cache_info().hits
            what = f"placed {int(self.bins)} bins for epsilon {format_epsilon(epsilon)}"
            with progress.timed(what) as facts:
                # A copy: the cached array is shared by every mechanism with these inputs.
                bins = _optm_bins(
                    int(self.bins), lo, hi, epsilon, _prior_key(prior), self.objective
                ).copy()
                cached = _optm_bins.cache_info().hits > hits
                facts["from"] = "the cache" if cached else "a local search over LPs"
        else:
            bins = np.asarray(self.bins, dtype=np.float64)
        with progress.timed(f"solved the LP on {bins.size} bins") as facts:
            res = solve_optm(bins, lo, hi, epsilon, prior, self.objective)
            if res is not None:
                facts["repair weight"] = f"{res[4]:.1e}"
        if res is None:
            raise ValueError(
                f"OPTM: no mechanism on these bins is epsilon = {epsilon:g}-DP; move the outer "
                "bins further beyond the bounds (from (hi - lo) / (e^eps - 1) = "
                f"{minimal_margin(lo, hi, epsilon):.6g} on, the two outer bins alone are private)."
            )
        cells, pairs, pi, rows, weight = res
        self._set_selection(cells, pairs, pi)
        self.repair_weight_ = weight
        return cells, rows, cells.bins


@register_mechanism("mvu", task="regression")
class MVU(_QuantizationBase):
    __doc__ = (
        """Minimum-variance unbiased mechanism (Chaudhuri et al. 2022), the 002 baseline.

    Labels are randomly rounded (unbiasedly) onto an evenly spaced public
    grid of ``grid_size`` inputs over the bounds; each grid input is mapped
    to one of the ``outputs`` by an optimised probability matrix: rows with
    mean equal to their input, columns within a factor ``e^eps`` (an LP,
    HiGHS), minimising the exact expected error under the prior. The LP
    answer is repaired like OPTM's (means restored, mixed with the two outer
    outputs until the exact loss is at most ``epsilon``).

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy cost of one label.
    outputs : int or array-like, default=4
        Size of the output alphabet to place optimally, or the alphabet
        (increasing, the outer two strictly beyond the bounds).
    grid_size : int, default=16
        Number of input grid points (at least 2).
"""
        + _COMMON_DOC
        + """
    Attributes
    ----------
    probability_matrix_ : ndarray of shape (grid_size, m)
        Output distribution of each grid input.
"""
        + _COMMON_ATTRS.replace("The bins", "The output alphabet")
        + """
    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms import MVU
    >>> mech = MVU(1.0, bounds=(-1, 1), outputs=[-2.42, -1.69, 1.69, 2.42]).fit([0.0])
    >>> grid = np.linspace(-1, 1, 16)
    >>> bool(np.allclose(mech.probability_matrix_ @ mech.output_values_, grid))
    True
    """
    )

    _parameter_constraints = {
        **_QuantizationBase._parameter_constraints,
        "outputs": [NumberInterval(Integral, 2, 64, closed="both"), "array-like"],
        "grid_size": [NumberInterval(Integral, 2, 1024, closed="both")],
    }

    def __init__(
        self, epsilon: float = 1.0, *, bounds: tuple[float, float] | None = None,
        outputs: int | ArrayLike = 4, grid_size: int = 16,
        prior: tuple[ArrayLike, ArrayLike] | None = None, objective: str = "squared",
        out_of_bounds: str = "raise", accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.out_of_bounds = out_of_bounds
        self.bounds = bounds
        self.outputs = outputs
        self.grid_size = grid_size
        self.prior = prior
        self.objective = objective

    def _check_family_inputs(self, lo, hi):
        if not isinstance(self.outputs, Integral):
            make_cells(self.outputs, lo, hi)  # same rules as bins

    def _build(self, lo, hi, prior, epsilon):
        grid = np.linspace(lo, hi, int(self.grid_size))
        if isinstance(self.outputs, Integral):
            outputs = _mvu_outputs(
                int(self.outputs), int(self.grid_size), lo, hi, epsilon, _prior_key(prior),
                self.objective,
            ).copy()
        else:
            outputs = make_cells(self.outputs, lo, hi).bins
        matrix = solve_mvu(outputs, grid, lo, hi, epsilon, prior, self.objective)
        if matrix is None:
            raise ValueError(
                f"MVU: no unbiased epsilon = {epsilon:g}-DP matrix onto these outputs; move the "
                "outer outputs further beyond the bounds (from (hi - lo) / (e^eps - 1) = "
                f"{minimal_margin(lo, hi, epsilon):.6g} on, the two outer outputs alone are "
                "private)."
            )
        self.probability_matrix_ = matrix
        return mvu_pieces(grid, lo, hi), mvu_rows(matrix), outputs
