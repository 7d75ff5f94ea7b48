"""Unbiased label randomizers for regression (paper 001)."""

from __future__ import annotations

from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils._param_validation import StrOptions
from threadpoolctl import threadpool_limits

from ..._accountant import BudgetAccountant
from ..._kernels._interval import interval_tables
from ..._kernels._philox import uniforms
from ..._kernels._sampling import rounding_grid, rr_constants, rr_flip_probability, sample_rows
from ...utils._progress import VERBOSE_CONSTRAINT, VERBOSE_DOC, Progress, format_epsilon
from ...utils._random import fits_must_reproduce
from .._base import OUT_OF_BOUNDS_CONSTRAINT, OUT_OF_BOUNDS_DOC, BaseDiscreteMechanism
from .._grid_rule import auto_grid, auto_grid_points
from .._prior import BasePriorMechanism, resolve_domain, small_share_rule
from .._registry import register_mechanism
from .._validation import NumberInterval, check_bounds
from ..classic._randomized_response import randomized_response_matrix
from ._grid import optimal_unbiased_grid, randomized_rounding_indices
from ._solver import (
    check_exact_mechanism,
    debiased_rr_outputs,
    feasible_output_set,
    mechanism_loss,
    optimal_unbiased_continuous,
)
from ...utils._warnings import warn_caller

__all__ = ["OptimalUnbiased", "DebiasedRR", "auto_grid_size"]


def auto_grid_size(
    epsilon: float, n_labels: int | None = None, prior_epsilon: float | str = "auto",
) -> int:
    """Number of grid points ``OptimalUnbiased``'s ``'auto'`` grid has.

    ``ceil(20 sinh(eps / 2)) + 1`` points, capped at 101 (fit time) and at
    what a private prior of ``n_labels`` labels resolves: randomized
    rounding onto a grid of step ``D`` adds at most ``D^2 / 4`` to the
    variance, here at most 1/100 of ``(hi - lo)^2 / (16 sinh^2(eps / 2))``,
    a lower bound on the variance of every unbiased epsilon-DP randomizer
    (docs/grid.md). The ``OptimalUnbiased`` case of
    :func:`~skdp_label.mechanisms.auto_grid_points`.

    Examples
    --------
    >>> from skdp_label.mechanisms.unbiased import auto_grid_size
    >>> auto_grid_size(1.0), auto_grid_size(4.0), auto_grid_size(4.0, n_labels=200)
    (12, 74, 25)
    """
    return auto_grid_points("unbiased", epsilon, n_labels, prior_epsilon)


class _UnbiasedRoundingMixin:
    """Public grid from the declared inputs; labels enter by randomized rounding."""

    #: The 'auto' rule of the unbiased family (docs/grid.md), unless a class sets its own.
    _grid_family = "unbiased"

    def _auto_grid(self):
        if getattr(self, "prior", None) is not None or self.domain is not None:
            return False
        if self.grid_size is not None:
            return isinstance(self.grid_size, str)
        return isinstance(self.resolution, str) and self.resolution == "auto"

    def _grid(self, n_labels=None):
        """The grid; an 'auto' grid of a private prior is capped by ``n_labels``."""
        owner = type(self).__name__
        resolution = None if isinstance(self.resolution, str) else self.resolution
        if self.grid_size is not None and (self.domain is not None or resolution is not None):
            raise ValueError("grid_size cannot be combined with domain or resolution.")
        if self._auto_grid():
            private_prior = isinstance(self, BasePriorMechanism)  # no public prior here
            return auto_grid(
                self.bounds, self._grid_family, float(self.epsilon),
                n_labels if private_prior else None, getattr(self, "prior_epsilon", "auto"), owner,
            )
        if self.grid_size is not None:
            lo, hi = check_bounds(self.bounds, owner=f"{owner} with grid_size")
            return np.linspace(lo, hi, int(self.grid_size))
        return resolve_domain(self.domain, self.bounds, resolution, owner=owner)

    def _domain(self, n_labels=None):
        # A public prior's values are the grid; else the declared grid.
        if getattr(self, "prior", None) is not None:
            return super()._domain()
        return self._grid(n_labels), None

    def _label_range(self):
        # Randomized rounding is unbiased only inside the grid (or a public
        # prior's support): its ends, not wider bounds, are the range.
        values = self._domain()[0]
        return float(values[0]), float(values[-1])

    def _histogram_codes(self, y, rng, values):
        return randomized_rounding_indices(values, y, uniforms(rng, y.shape[0]))

    def _randomize_column(self, y, rng):
        # Unbiased randomized rounding (001 §3) (E[grid value] = y for y inside
        # the grid), then the grid value's row of the matrix: one fused pass,
        # one word of the release's generator per label (the coin and the
        # draw: docs/sampling.md).
        grid = rounding_grid(self.input_values_)
        interval = self._interval_tables()
        if interval is not None:  # a two-level matrix: tables shared by all rows
            return sample_rows(rng, self.output_values_, y=y, grid=grid, interval=interval)
        return sample_rows(rng, self.output_values_, y=y, grid=grid, tables=self._categorical_tables())

    _PACKED_CACHES = ("_interval_sampler", *BaseDiscreteMechanism._PACKED_CACHES)

    def _interval_tables(self):
        """:func:`interval_tables` of the (public) matrix, or None; rebuilt
        whenever the matrix changes."""
        return self._tables_of_matrix("_interval_sampler", interval_tables)


_GRID_DOC = """    domain : array-like, optional
        Public finite label domain (the grid labels are rounded onto).
    bounds : tuple (lo, hi), optional
        Public label bounds; with ``resolution`` or ``grid_size`` they
        define the grid.
    resolution : 'auto', float or None
        ``'auto'`` (the default of ``OptimalUnbiased`` and ``DebiasedRR``):
        evenly spaced points over ``bounds``, as many as
        epsilon (and the number of labels, for a private prior) can use
        (:func:`~skdp_label.mechanisms.auto_grid_points`, docs/grid.md). A
        number: the grid step from ``bounds[0]`` (``bounds[1]`` is always
        included); ``None``: a step of 1 (the unit grid).
    grid_size : int or 'auto', optional
        Number of evenly spaced grid points over ``bounds`` instead of a
        ``resolution``; ``'auto'`` is the same as ``resolution='auto'``.
""" + OUT_OF_BOUNDS_DOC.format()


@register_mechanism("unbiased", "optimal-unbiased", task="regression")
class OptimalUnbiased(_UnbiasedRoundingMixin, BasePriorMechanism):
    __doc__ = (
        """Minimum-variance unbiased epsilon-DP label randomizer (paper 001).

    Among all epsilon-DP randomizers with ``E[y_hat | y] = y`` for every
    label, the one minimising ``E[(y_hat - y)^2]`` under the prior (001
    Alg. 1). By default the output values are optimised over the whole real
    line, not a grid: an interior-point method over staircase columns
    (001 Thm. 6) followed by Newton's method on the optimality conditions,
    with a certified lower bound (``lower_bound_``) over every epsilon-DP
    unbiased randomizer, so the result is never worse than the LP of 001 on
    any output grid. ``outputs=n`` solves 001's LP on the ``n``-point grid of
    Alg. 2 instead.

    The transition matrix sampled from is exact: each column is a staircase
    ray (entries ``c`` or ``e^eps c``), rows sum to 1 and means equal the
    labels up to float rounding; both are verified at fit time.

    Labels are unbiasedly rounded onto the public grid first (001 §3), so
    ``E[y_hat] = y`` for every real label inside the grid's range; labels
    outside it are clipped to its ends. Without a public ``prior``, a
    Laplace-noised histogram of the rounded labels over the grid spends
    ``prior_epsilon`` (001 App. C, Alg. 3) and the randomizer is built for
    the rest, ``epsilon - prior_epsilon`` (including the grid of Alg. 2: the
    paper's Alg. 3 writes epsilon_1 there, a typo).

    The default grid (``resolution='auto'``) has ``ceil(20 sinh(eps / 2)) + 1``
    evenly spaced points over ``bounds`` (:func:`auto_grid_size`): rounding
    then adds at most 1% of the variance any unbiased epsilon-DP randomizer
    has; at most 101 points (fit time) and at most what the private prior
    resolves from ``n`` labels (``n / 8``, fewer at small epsilon). Pass
    ``resolution=1`` for the unit grid (docs/grid.md).

    Parameters
    ----------
    epsilon : float, default=1.0
        Total privacy cost of one label (prior estimate + randomization).
    prior : tuple (values, probabilities), optional
        Public prior; its values are the grid and nothing is spent on it.
"""
        + _GRID_DOC
        + """    outputs : 'continuous' or int >= 2, default='continuous'
        Optimise the output values freely, or use the ``outputs``-point
        grid of 001 Alg. 2 (``FeasibleOutputSet``) and its LP.
    prior_epsilon : float or 'auto', default='auto'
        Budget of the private prior; 'auto' is ``sqrt(|Y| / n)`` capped at
        a tenth of ``epsilon``, or nothing (the public uniform prior over
        the grid) when that histogram would be mostly noise
        (:func:`~skdp_label.mechanisms._prior.small_share_rule`; see
        :meth:`budget_split` and docs/auto.md).
    accountant : BudgetAccountant, optional
        Charged with the histogram and every release.
    random_state : None or int, default=None
        ``None``: fresh OS entropy for every release, nothing kept. An int
        makes releases reproducible and emits ``PrivacyLeakWarning``
        (docs/randomness.md). Generators are refused.
""" + VERBOSE_DOC + """
    Attributes
    ----------
    input_values_ : ndarray of shape (k,)
        The grid labels are rounded onto.
    output_values_ : ndarray of shape (m,)
        Sorted output values (at most about ``2k``).
    transition_matrix_ : ndarray of shape (k, m)
        Exact output distribution of each grid label.
    prior_ : ndarray of shape (k,)
        The prior used (public, or the noisy histogram).
    noisy_label_loss_ : float
        ``E[(y_hat - y)^2]`` under ``prior_`` for labels on the grid.
    lower_bound_ : float
        Certified lower bound on that loss for every epsilon-DP unbiased
        randomizer (continuous outputs only; NaN for a grid).
    prior_epsilon_ : float
        Epsilon spent on the prior (0 for a public prior).
    epsilon_spent_ : float
        Epsilon spent per label by this object so far.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms import OptimalUnbiased
    >>> prior = ([0.0, 1.0, 2.0], [0.3, 0.5, 0.2])
    >>> mech = OptimalUnbiased(epsilon=1.0, prior=prior, random_state=0).fit([0.0])
    >>> bool(np.allclose(mech.transition_matrix_ @ mech.output_values_, [0.0, 1.0, 2.0]))
    True
    >>> bool(mech.lower_bound_ <= mech.noisy_label_loss_ <= mech.lower_bound_ * (1 + 1e-9))
    True
    """
    )

    _parameter_constraints = {
        **BasePriorMechanism._parameter_constraints,
        "resolution": [StrOptions({"auto"}), NumberInterval(Real, 0, None, closed="neither"), None],
        "grid_size": [NumberInterval(Integral, 2, None, closed="left"), StrOptions({"auto"}), None],
        "outputs": [StrOptions({"continuous"}), NumberInterval(Integral, 2, None, closed="left")],
        "verbose": VERBOSE_CONSTRAINT,
    }
    _grid_family = "unbiased"

    def __init__(
        self,
        epsilon: float = 1.0,
        *,
        prior: tuple[ArrayLike, ArrayLike] | None = None,
        domain: ArrayLike | None = None,
        bounds: tuple[float, float] | None = None,
        resolution: float | str | None = "auto",
        grid_size: int | str | None = None,
        outputs: str = "continuous",
        prior_epsilon: float | str = "auto",
        out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
        verbose: int = 0,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.out_of_bounds = out_of_bounds
        self.verbose = verbose
        self.prior = prior
        self.domain = domain
        self.bounds = bounds
        self.resolution = resolution
        self.grid_size = grid_size
        self.outputs = outputs
        self.prior_epsilon = prior_epsilon

    # Its variance depends little on the prior: a small share, or none.
    _prior_epsilon_rule = staticmethod(small_share_rule)
    # Below it the solver's exactness checks fail on float rounding (log ratios
    # of 1 + 1e-9) after a noisy prior was charged; noise of range / 1e-6 is
    # no release anyway.
    _min_labels_epsilon = 1e-6

    def _debiased_rr_fallback(self, values, epsilon, exc):
        """Last resort, exact by construction: debiased randomized response.

        A private prior has been charged by now, so the fit must not fail:
        this mechanism is unbiased and epsilon-DP for any prior (only its
        variance is worse than the optimum).
        """
        warn_caller(
            f"the optimal solver failed ({exc}); using debiased randomized response, which is "
            "exactly unbiased and epsilon-DP but has a larger variance.",
            RuntimeWarning,
        )
        return debiased_rr_outputs(values, epsilon), randomized_response_matrix(values.size, epsilon)

    def _build_mechanism(self, values, probs, epsilon):
        progress = Progress(self.verbose, type(self).__name__)
        progress(
            f"prior: {'public' if self.prior_epsilon_ == 0 else 'noisy histogram'}, epsilon "
            f"{format_epsilon(self.prior_epsilon_)}; randomizer epsilon {format_epsilon(epsilon)} "
            f"on {values.size} grid points"
        )
        # Small dense problems: BLAS threads only add overhead.
        with threadpool_limits(limits=1, user_api="blas"), progress.timed("solved") as facts:
            lower = float("nan")
            if self.outputs == "continuous":
                facts["with"] = "the continuous solver"
                try:
                    outputs, matrix, lower = optimal_unbiased_continuous(
                        values, probs, epsilon, time_budgets=not fits_must_reproduce()
                    )
                    check_exact_mechanism(values, outputs, matrix, epsilon)
                except RuntimeError as exc:
                    # Not expected: the solver repairs its output exactly and
                    # has its own fallbacks (issue 13: no prior of the scaling
                    # benchmark's sweep, epsilon up to the cap, gets here). The
                    # grid LP this used to try took minutes at |Y| in the hundreds.
                    facts["with"] = "the fallback debiased randomized response"
                    outputs, matrix = self._debiased_rr_fallback(values, epsilon, exc)
            else:
                facts["with"] = f"the LP on {self.outputs} output points"
                grid = feasible_output_set(values, epsilon, self.outputs)
                try:
                    outputs, matrix = optimal_unbiased_grid(values, probs, epsilon, grid)
                    check_exact_mechanism(values, outputs, matrix, epsilon)
                except RuntimeError as exc:
                    facts["with"] = "the fallback debiased randomized response"
                    outputs, matrix = self._debiased_rr_fallback(values, epsilon, exc)
            facts["outputs"] = outputs.size
        check_exact_mechanism(values, outputs, matrix, epsilon)
        self.output_values_ = outputs
        self.transition_matrix_ = matrix
        self.noisy_label_loss_ = mechanism_loss(values, probs, outputs, matrix)
        self.lower_bound_ = lower
        if lower > 0:
            # Relative gap of the certificate: a fact about the (public or
            # charged noisy) prior's solution, not about the labels.
            progress(f"certified within {(self.noisy_label_loss_ - lower) / lower:.1e} of optimal")


@register_mechanism("debiased-rr", task="regression")
class DebiasedRR(_UnbiasedRoundingMixin, BaseDiscreteMechanism):
    __doc__ = (
        """Debiased randomized response (001 Def. 23): unbiased, epsilon-DP.

    k-ary randomized response over the grid, each label ``y`` replaced by
    ``Phi(y) = ((e^eps + k - 1) y - sum(grid)) / (e^eps - 1)`` so that
    ``E[y_hat | y] = y``. Labels are unbiasedly rounded onto the grid first
    (001 §3). It needs no prior; its variance grows with the grid size, so
    the default grid (``resolution='auto'``) has the number of points that
    minimises its exact mean squared error, rounding included, for labels
    spread over the bounds (2 or 3 points up to epsilon = 2; docs/grid.md).

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy cost of one label.
"""
        + _GRID_DOC
        + """    accountant : BudgetAccountant, optional
        Charged with every release.
    random_state : None or int, default=None
        ``None``: fresh OS entropy for every release, nothing kept. An int
        makes releases reproducible and emits ``PrivacyLeakWarning``
        (docs/randomness.md). Generators are refused.

    Attributes
    ----------
    input_values_ : ndarray of shape (k,)
        The grid.
    output_values_ : ndarray of shape (k,)
        ``Phi`` of the grid.
    transition_matrix_ : ndarray of shape (k, k)
        The randomized response matrix.
    epsilon_spent_ : float
        Epsilon spent per label by this object so far.

    Examples
    --------
    >>> from skdp_label.mechanisms import DebiasedRR
    >>> mech = DebiasedRR(epsilon=1.0, bounds=(0, 2), random_state=0).fit([1.0])
    >>> mech.output_values_.round(3)
    array([-1.746,  1.   ,  3.746])
    """
    )

    _parameter_constraints = {
        **BaseDiscreteMechanism._parameter_constraints,
        "domain": ["array-like", None],
        "bounds": [tuple, list, None],
        "resolution": [StrOptions({"auto"}), NumberInterval(Real, 0, None, closed="neither"), None],
        "grid_size": [NumberInterval(Integral, 2, None, closed="left"), StrOptions({"auto"}), None],
        "out_of_bounds": OUT_OF_BOUNDS_CONSTRAINT,
    }
    _grid_family = "debiased-rr"

    def __init__(
        self, epsilon: float = 1.0, *, domain: ArrayLike | None = None,
        bounds: tuple[float, float] | None = None, resolution: float | str | None = "auto",
        grid_size: int | str | None = None, out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None, random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.out_of_bounds = out_of_bounds
        self.domain = domain
        self.bounds = bounds
        self.resolution = resolution
        self.grid_size = grid_size

    def _randomized_response_size(self):
        grid = vars(self).get("input_values_")  # the fitted grid, else the one fit builds
        return len(self._grid() if grid is None else grid)

    def _fit_mechanism(self, y):
        values = self._grid()
        self.input_values_ = values
        epsilon = self._law_epsilon()
        self.output_values_ = debiased_rr_outputs(values, epsilon)
        self.transition_matrix_ = randomized_response_matrix(values.size, epsilon)

    def _randomize_column(self, y, rng):
        # Rounding, then k-ary RR over the grid (exact flip, uniform
        # replacement): O(1) per label and no k x k tables.
        k = self.input_values_.shape[0]
        c = rr_constants(k, rr_flip_probability(k, self._law_epsilon()))
        return sample_rows(rng, self.output_values_, y=y, grid=rounding_grid(self.input_values_), rr=c)
