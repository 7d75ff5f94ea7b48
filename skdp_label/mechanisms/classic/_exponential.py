"""Exponential mechanism over a public grid of label values (000 App. F)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from scipy import optimize
from sklearn.utils._param_validation import StrOptions
from numbers import Real

from ..._accountant import BudgetAccountant
from .._base import OUT_OF_BOUNDS_CONSTRAINT, BaseDiscreteMechanism
from .._grid_rule import auto_grid
from .._prior import declared_range, nearest_domain_index, nearest_grid, resolve_domain
from .._registry import register_mechanism
from .._validation import NumberInterval

__all__ = ["ExponentialMechanism", "exponential_matrix", "max_log_ratio"]


def exponential_matrix(values, beta):
    """P(o | y) proportional to exp(-beta |o - y|) over the grid ``values``."""
    logits = -beta * np.abs(values[None, :] - values[:, None])
    logits -= logits.max(axis=1, keepdims=True)
    matrix = np.exp(logits)
    return matrix / matrix.sum(axis=1, keepdims=True)


def max_log_ratio(matrix):
    """Privacy loss of a transition matrix: max over outputs and input pairs
    of log P(o | y) - log P(o | y'). Infinite if a column mixes 0 and > 0."""
    with np.errstate(divide="ignore"):
        logs = np.log(matrix)
    spread = logs.max(axis=0) - logs.min(axis=0)
    spread = np.where(np.isnan(spread), 0.0, spread)  # all-zero columns: -inf - -inf
    return float(spread.max())


@register_mechanism("exponential", task="regression")
class ExponentialMechanism(BaseDiscreteMechanism):
    """Exponential mechanism with score ``-|o - y|`` over a grid of labels.

    Outputs a grid value o with probability proportional to
    ``exp(-beta |o - y|)``. The textbook calibration ``beta = eps / (2 (hi - lo))``
    (McSherry & Talwar; 000 App. F) is epsilon-DP but loose; the default
    ``calibration='exact'`` takes the largest beta whose transition matrix
    has privacy loss exactly ``epsilon`` (computed, not bounded).

    Labels are first mapped to the nearest grid value (a per-label,
    data-independent step; a squared bias of at most ``step^2 / 4``). The
    default grid (``resolution='auto'``) has 101 evenly spaced points over
    ``bounds`` (fewer over-weight the end points, which are outputs too),
    more where the rounding bias would exceed 1% of the mechanism's smallest
    mean squared error at ``epsilon`` (108 at epsilon = 30; docs/grid.md).

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy cost of one label.
    bounds : tuple (lo, hi), optional
        Public label bounds; with ``resolution`` they define the grid.
    domain : array-like, optional
        Explicit public grid of output values (instead of bounds).
    resolution : 'auto', float or None, default='auto'
        Grid step on ``bounds``: ``'auto'`` sizes it from epsilon
        (:func:`~skdp_label.mechanisms.auto_grid_points`); ``None`` is
        ``(hi - lo) / 100`` (the default before the rule).
    calibration : {'exact', 'standard'}, default='exact'
        How beta is chosen from epsilon.
    out_of_bounds : {'raise', 'clip'}, default='raise'
        Labels outside the declared bounds (or domain) raise ``ValueError``
        before anything is spent; ``'clip'`` clips them to the bounds first.
    accountant : BudgetAccountant, optional
    random_state : None or int, default=None
        ``None``: fresh OS entropy for every release, nothing kept. An int
        makes releases reproducible and emits ``PrivacyLeakWarning``
        (docs/randomness.md). Generators are refused.

    Attributes
    ----------
    input_values_, output_values_ : ndarray
        The grid.
    transition_matrix_ : ndarray
        Exact output distribution for each grid input.
    beta_ : float
        Inverse temperature used.
    epsilon_spent_ : float

    Examples
    --------
    >>> from skdp_label.mechanisms import ExponentialMechanism
    >>> mech = ExponentialMechanism(epsilon=1.0, bounds=(0, 10), resolution=1.0).fit([3.0])
    >>> mech.transition_matrix_.shape
    (11, 11)
    """

    _parameter_constraints = {
        **BaseDiscreteMechanism._parameter_constraints,
        "bounds": [tuple, list, None],
        "domain": ["array-like", None],
        "resolution": [StrOptions({"auto"}), NumberInterval(Real, 0, None, closed="neither"), None],
        "out_of_bounds": OUT_OF_BOUNDS_CONSTRAINT,
        "calibration": [StrOptions({"exact", "standard"})],
    }
    _grid_family = "exponential"

    def __init__(
        self, epsilon: float = 1.0, *, bounds: tuple[float, float] | None = None,
        domain: ArrayLike | None = None, resolution: float | str | None = "auto",
        calibration: str = "exact", out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None, random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.out_of_bounds = out_of_bounds
        self.bounds = bounds
        self.domain = domain
        self.resolution = resolution
        self.calibration = calibration

    def _grid(self):
        resolution = self.resolution
        auto = isinstance(resolution, str)
        if self.domain is None and auto:
            owner = type(self).__name__
            return auto_grid(self.bounds, self._grid_family, float(self.epsilon), owner=owner)
        if self.domain is None and resolution is None and self.bounds is not None:
            lo, hi = self.bounds
            resolution = (hi - lo) / 100.0
        return resolve_domain(
            self.domain, self.bounds, None if auto else resolution, owner=type(self).__name__
        )

    def _label_range(self):
        return declared_range(self.bounds, self._grid, type(self).__name__)

    def _check_label_values(self, y):
        grid = self._grid()
        if grid.size > 1:
            # Public check, before anything is spent: beta ~ epsilon / span must
            # be finite or the matrix turns into NaN (inf * 0 on its diagonal).
            span = float(grid[-1] - grid[0])
            tiny = np.finfo(float).tiny
            if not (math.isfinite(span) and span >= tiny and math.isfinite(float(self.epsilon) / span)):
                raise ValueError(
                    f"{type(self).__name__}: the grid's span is not a positive normal float64 "
                    "or epsilon / span overflows; rescale the labels."
                )

    def _fit_mechanism(self, y):
        grid = self._grid()
        eps = self._law_epsilon()
        span = grid[-1] - grid[0]
        self.input_values_ = self.output_values_ = grid
        if grid.size == 1:
            self.beta_ = 0.0
        elif self.calibration == "standard":
            self.beta_ = eps / (2.0 * span)
        else:
            # The loss grows with beta; it is <= eps at eps / (2 span) (textbook
            # bound) and >= beta * span (the end-point column), so the answer is
            # in [eps / (2 span), eps / span].
            def excess(beta):
                return max_log_ratio(exponential_matrix(grid, beta)) - eps

            hi = eps / span
            if excess(hi) <= 0:
                beta = hi
            else:
                beta = optimize.brentq(excess, eps / (2.0 * span), hi, xtol=1e-15, rtol=1e-13)
            # Step down until the loss is within budget to float precision.
            while excess(beta) > 0:
                beta *= 1 - 1e-12
            self.beta_ = beta
        self.transition_matrix_ = exponential_matrix(grid, self.beta_)

    def _encode_labels(self, y):
        return nearest_domain_index(self.input_values_, y)

    def _nearest_grid(self):
        return nearest_grid(self.input_values_)
