"""Additive noise on bounded labels: Laplace, staircase, Gaussian.

Discrete variants add integer noise to integer labels. Continuous variants
never sample floating-point noise: the label is rounded to a power-of-two
grid of step ``g`` and integer noise is added in grid units (see
:func:`skdp_label.utils._random.power_of_two_grid`); rounding moves labels
by at most half a step, so the noise is calibrated for the sensitivity
``floor((hi - lo) / g) + 1`` in grid units. Outputs are exact floats.

The Laplace and staircase variants are all the discrete staircase
distribution of :mod:`._noise` with different ``(b, width, r)``; one sampler
and one exact pmf serve the four of them.

With ``clip=True`` (default, as in 000 App. F) outputs are clipped back into
the bounds, a post-processing step; ``clip=False`` keeps the noise unbiased
(the additive unbiased baselines of 001).
"""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils._param_validation import StrOptions

from ..._accountant import BudgetAccountant
from ..._kernels._sampling import (
    alias_records,
    cell_records,
    discrete_gaussian,
    envelope_records,
    piece_records,
    gaussian_additive,
    max_staircase_magnitude,
    bulk_constants,
    staircase_additive,
    staircase_additive_bulk,
    staircase_constants,
    staircase_noise,
)
from ...utils._random import power_of_two_grid
from .._base import OUT_OF_BOUNDS_CONSTRAINT, OUT_OF_BOUNDS_DOC, BaseLabelMechanism
from .._registry import register_mechanism
from .._validation import SAMPLER_RTOL, NumberInterval, check_bounds, check_integer_labels
from ._noise import (
    gaussian_cell_table,
    gaussian_sigma,
    laplace_cell_table,
    optimal_discrete_staircase_r,
    optimal_staircase_gamma,
    staircase_alias_table,
    staircase_cell_table,
    staircase_pmf,
    staircase_tail,
    staircase_variance,
)

__all__ = ["Laplace", "DiscreteLaplace", "Staircase", "DiscreteStaircase", "Gaussian"]

_PARAMETERS_DOC = """
    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy cost of one label.
    bounds : tuple (lo, hi)
        Public label bounds; the sensitivity is ``hi - lo``. Required: bounds
        are never computed from the labels.
    clip : bool, default=True
        Clip outputs into the bounds (post-processing, 000 App. F).
""" + OUT_OF_BOUNDS_DOC + """{extra}    accountant : BudgetAccountant, optional
        Charged with every release.
    random_state : None or int, default=None
        ``None``: fresh OS entropy for every release, nothing kept. An int
        makes releases reproducible and emits ``PrivacyLeakWarning``
        (docs/randomness.md). Generators are refused.
"""

_CONTINUOUS_ATTRIBUTES_DOC = """
    Attributes
    ----------
    granularity_ : float
        Grid step (a power of two) the outputs lie on.
    sensitivity_units_ : int
        Sensitivity in grid units that the noise is calibrated for.
    epsilon_spent_ : float
        Epsilon spent per label by this object so far.
"""

_DISCRETE_ATTRIBUTES_DOC = """
    Attributes
    ----------
    input_values_ : ndarray
        The integers ``lo, ..., hi``.
    output_values_, transition_matrix_ : ndarray
        With ``clip=True``: the outputs and the exact transition matrix,
        built on access (it has ``(hi - lo + 1)**2`` entries). Unclipped
        outputs are unbounded and have none.
    epsilon_spent_ : float
        Epsilon spent per label by this object so far.
"""


_CONTINUOUS_NOTES_DOC = """
    Notes
    -----
    ``epsilon`` is capped at 20, as for all continuous noise (``fit``
    refuses more): the noise is then under 5% of the span and the label is
    all but released. Bounds whose span, grid step (or its inverse) or
    noise range is not a normal finite float are refused before anything is
    spent. Up to the cap every grid point is reachable and each one's
    probability is right to 1e-9 relative (docs/sampling.md).
"""

_DISCRETE_NOTES_DOC = """
    Notes
    -----
    ``epsilon`` is capped at 30 (``fit`` refuses more): a label is then
    released unchanged with probability 1 - 2e-13 anyway. Up to the cap the
    sampler reaches every output of positive probability, each right to
    1e-9 relative (docs/sampling.md). Bounds must be integers of magnitude
    at most 2**52.
"""


class BaseAdditiveMechanism(BaseLabelMechanism):
    """Base of additive mechanisms on declared ``bounds``.

    Subclasses give :meth:`_noise_scale` (sets the grid) and
    :meth:`_noise_units` (integer noise for a sensitivity in grid units);
    ``_integer`` says whether labels and noise live on the integers.
    """

    _parameter_constraints = {
        **BaseLabelMechanism._parameter_constraints,
        "bounds": [tuple, list, None],
        "clip": ["boolean"],
        "out_of_bounds": OUT_OF_BOUNDS_CONSTRAINT,
    }
    _integer = False
    # Tables packed for the kernels on a large release (public, rebuilt from epsilon).
    _PACKED_CACHES = ("_alias_table", "_cell_table")

    def _bounds(self):
        return check_bounds(self.bounds, integer=self._integer, owner=type(self).__name__)

    def _label_range(self):
        return self._bounds()

    def _check_label_values(self, y):
        if self._integer:
            check_integer_labels(y.ravel())

    def _noise_scale(self, sensitivity):
        return sensitivity / float(self.epsilon)

    def _noise_units(self, n, sensitivity_units, rng):
        raise NotImplementedError

    def _noise_decay(self, sensitivity_units):
        """(lam, width) of the blocks of the noise sampler, for its range."""
        raise NotImplementedError

    def _fit_mechanism(self, y):
        lo, hi = self._bounds()
        sensitivity = hi - lo
        if self._integer:
            self.granularity_ = 1.0
            self.sensitivity_units_ = int(sensitivity)
        else:
            self.granularity_ = power_of_two_grid(
                self._noise_scale(sensitivity), max(abs(lo), abs(hi), sensitivity)
            )
            self.sensitivity_units_ = math.floor(sensitivity / self.granularity_) + 1
        self._check_noise_range()

    def _check_noise_range(self):
        """Refuse a configuration whose outputs could overflow or lose exactness.

        Outputs are (label units + Z) * g with |Z| at most what the sampler
        can draw. Past 2**53 units the sum is no longer an exact integer, and
        past float64's range it becomes inf (or, clipped, a bound) whatever
        the label: refuse instead.
        """
        lo, hi = self._bounds()
        g = self.granularity_
        lam, width = self._noise_decay(self.sensitivity_units_)
        units = max(abs(lo), abs(hi)) / g + 1.0 + max_staircase_magnitude(lam, width)
        if not (units <= 2.0**53 and math.isfinite(units * g) and units * g <= np.finfo(float).max / 2):
            raise ValueError(
                f"{type(self).__name__}: with bounds={self.bounds!r} and epsilon={self.epsilon!r} "
                "the noise range overflows float64 (or its integer grid); rescale the labels to a "
                "smaller range or raise epsilon."
            )

    def _randomize_column(self, y, rng):
        g = self.granularity_
        units = np.rint(y / g)
        noisy = (units + self._noise_units(y.shape[0], self.sensitivity_units_, rng)) * g
        if self.clip:
            noisy = np.clip(noisy, *self._bounds())
        return noisy


class BaseStaircaseFamily(BaseAdditiveMechanism):
    """Additive mechanisms whose noise is a discrete staircase distribution."""

    def _staircase(self, sensitivity_units):
        """(lam, width, r) of the noise for a sensitivity in grid units."""
        raise NotImplementedError

    def _noise_decay(self, sensitivity_units):
        # Staircases: epsilon per block of width the sensitivity.
        return self._law_epsilon(), sensitivity_units

    def _noise_units(self, n, sensitivity_units, rng):
        lam, width, r = self._staircase(sensitivity_units)
        return staircase_noise(rng, lam, width, r, size=n)

    def _randomize_column(self, y, rng):
        lam, width, r = self._staircase(self.sensitivity_units_)
        lo, hi = self._bounds()
        constants = staircase_constants(lam, width, r)
        # Worth building the table from 10,000 labels. A keyed release always
        # uses it: a row's noise must not depend on its batch's size.
        if y.shape[0] >= 10_000 or not isinstance(rng, np.random.Generator):
            key = (lam, width, r)
            cached = getattr(self, "_alias_table", None)
            if cached is None or cached[0] != key:  # rebuilt after a refit
                # (m0, tail, prob, alias, values a cell, squeeze, pieces)
                table = staircase_alias_table(lam, width, r)
                if table is not None:
                    table = (*table, 1, 0, None)
                elif width == 1 and r == 1:  # a fine grid: a table of cells
                    table = laplace_cell_table(lam)
                    table = None if table is None else (*table, None)
                else:  # a fine grid: a table of pieces of steps
                    table = staircase_cell_table(lam, width, r)
                    if table is not None:
                        *head, starts, sizes = table
                        table = (*head, 0, 0, (starts, sizes))
                # Packed for the kernel once (public, like the table).
                if table is None:
                    records = None
                elif table[4] == 0:  # a table of pieces
                    records = piece_records(*table[2:4], *table[6])
                elif table[4] > 1:  # a table of cells
                    records = cell_records(*table[2:5])
                else:
                    records = alias_records(*table[2:4])
                cached = self._alias_table = (key, table, records)
            _, table, records = cached
            if table is not None:
                m0, tail, prob, alias, cell, squeeze, pieces = table
                return staircase_additive_bulk(
                    y, rng, self.granularity_, constants,
                    bulk_constants(m0, tail, prob.shape[0], cell, lam, squeeze), prob, alias,
                    bool(self.clip), lo, hi, pieces, records=records,
                )
        return staircase_additive(y, rng, self.granularity_, constants, bool(self.clip), lo, hi)

    # Exact distribution of the clipped integer mechanisms.
    @property
    def input_values_(self) -> np.ndarray:
        if not self._integer:
            raise AttributeError("continuous labels have no finite input set.")
        lo, hi = self._bounds()
        return np.arange(lo, hi + 1)

    @property
    def output_values_(self) -> np.ndarray:
        if not self.clip:
            raise AttributeError("unclipped outputs are unbounded: no finite output set.")
        return self.input_values_

    @property
    def transition_matrix_(self) -> np.ndarray:
        values = self.output_values_
        if values.size > 5000:
            raise ValueError(f"a transition matrix of {values.size}^2 entries is too large to build.")
        lam, width, r = self._staircase(self.sensitivity_units_)
        ints = values.astype(np.int64)
        matrix = staircase_pmf(ints[None, :] - ints[:, None], lam, width, r)
        # Clipping piles each tail onto an end point: P(Z <= lo - y), P(Z >= hi - y).
        matrix[:, 0] = staircase_tail(ints - ints[0], lam, width, r)
        matrix[:, -1] = staircase_tail(ints[-1] - ints, lam, width, r)
        return matrix

    def noise_pmf(self, z: ArrayLike) -> np.ndarray:
        """P(noise = z) in grid units (after ``fit``)."""
        return staircase_pmf(z, *self._staircase(self.sensitivity_units_))

    def _noise_summary(self):
        # Exact standard deviation of the (unclipped) noise, in label units.
        var_units = staircase_variance(*self._staircase(self.sensitivity_units_))
        return {"noise_std": math.sqrt(var_units) * self.granularity_, "clipped": bool(self.clip)}


class _LaplaceFamily(BaseStaircaseFamily):
    def _noise_decay(self, sensitivity_units):
        return self._law_epsilon() / sensitivity_units, 1

    def _staircase(self, sensitivity_units):
        return self._law_epsilon() / sensitivity_units, 1, 1


@register_mechanism("laplace", task="regression")
class Laplace(_LaplaceFamily):
    __doc__ = (
        """Laplace mechanism for real labels in declared bounds (000 Def. 23).

    Adds noise of scale ``(hi - lo) / epsilon``, sampled as a discrete
    Laplace on a power-of-two grid (calibrated for the extra rounding step)
    so that no floating-point artifact reveals the label.
"""
        + _PARAMETERS_DOC.format(extra="")
        + _CONTINUOUS_ATTRIBUTES_DOC
        + _CONTINUOUS_NOTES_DOC
        + """
    Examples
    --------
    >>> from skdp_label.mechanisms import Laplace
    >>> mech = Laplace(epsilon=1.0, bounds=(0.0, 10.0), random_state=0)
    >>> y_noisy = mech.fit_transform([1.0, 5.5, 9.0])
    >>> bool(((y_noisy >= 0) & (y_noisy <= 10)).all())
    True
    """
    )

    def __init__(
        self, epsilon: float = 1.0, *, bounds: tuple[float, float] | None = None,
        clip: bool = True, out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None, random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.bounds = bounds
        self.clip = clip
        self.out_of_bounds = out_of_bounds


@register_mechanism("discrete-laplace", "geometric", task="regression")
class DiscreteLaplace(_LaplaceFamily):
    __doc__ = (
        """Discrete Laplace (geometric) mechanism for integer labels (000 Def. 22).

    Adds integer noise with P(Z = z) proportional to ``exp(-epsilon |z| / (hi - lo))``.
"""
        + _PARAMETERS_DOC.format(extra="")
        + _DISCRETE_ATTRIBUTES_DOC
        + _DISCRETE_NOTES_DOC
        + """
    Examples
    --------
    >>> from skdp_label.mechanisms import DiscreteLaplace
    >>> mech = DiscreteLaplace(epsilon=1.0, bounds=(0, 4), random_state=0).fit([0, 1])
    >>> mech.transition_matrix_.shape
    (5, 5)
    """
    )
    _integer = True
    _max_epsilon = 30.0  # discrete noise (BaseLabelMechanism's default of 20 is for continuous)

    def __init__(
        self, epsilon: float = 1.0, *, bounds: tuple[float, float] | None = None,
        clip: bool = True, out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None, random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.bounds = bounds
        self.clip = clip
        self.out_of_bounds = out_of_bounds


_STAIRCASE_LOSS_DOC = """    loss : {'squared', 'absolute'}, default='squared'
        Noise cost the staircase shape is optimised for (Geng & Viswanath).
"""


@register_mechanism("staircase", task="regression")
class Staircase(BaseStaircaseFamily):
    __doc__ = (
        """Continuous staircase mechanism (000 Def. 25; Geng & Viswanath 2014).

    The optimal noise-adding mechanism for a given cost: a geometric mixture
    of uniform steps of width ``hi - lo``, the first ``gamma`` of each step
    e^eps times likelier. ``gamma`` is the optimum for ``loss`` unless given.
    Sampled on a power-of-two grid as a discrete staircase.
"""
        + _PARAMETERS_DOC.format(
            extra=_STAIRCASE_LOSS_DOC
            + """    gamma : float in (0, 1), optional
        Override the optimal step fraction.
"""
        )
        + _CONTINUOUS_ATTRIBUTES_DOC
        + """    gamma_ : float
        Step fraction used.
"""
        + _CONTINUOUS_NOTES_DOC
        + """
    Examples
    --------
    >>> from skdp_label.mechanisms import Staircase
    >>> mech = Staircase(epsilon=2.0, bounds=(0.0, 1.0), random_state=0).fit([0.5])
    >>> round(mech.gamma_, 3)  # optimal for squared loss at epsilon = 2
    0.335
    """
    )
    _parameter_constraints = {
        **BaseStaircaseFamily._parameter_constraints,
        "loss": [StrOptions({"squared", "absolute"})],
        "gamma": [NumberInterval(Real, 0, 1, closed="neither"), None],
    }

    def __init__(
        self, epsilon: float = 1.0, *, bounds: tuple[float, float] | None = None,
        clip: bool = True, out_of_bounds: str = "raise", loss: str = "squared",
        gamma: float | None = None, accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.bounds = bounds
        self.clip = clip
        self.out_of_bounds = out_of_bounds
        self.loss = loss
        self.gamma = gamma

    def _fit_mechanism(self, y):
        super()._fit_mechanism(y)
        self.gamma_ = (
            optimal_staircase_gamma(float(self.epsilon), self.loss) if self.gamma is None else float(self.gamma)
        )

    def _staircase(self, sensitivity_units):
        r = min(max(1, round(self.gamma_ * sensitivity_units)), sensitivity_units)
        return self._law_epsilon(), sensitivity_units, r


@register_mechanism("discrete-staircase", task="regression")
class DiscreteStaircase(BaseStaircaseFamily):
    __doc__ = (
        """Discrete staircase mechanism for integer labels (000 Def. 24).

    Noise P(Z = z) = a(r) e^(-k eps) on the first ``r`` integers of each block
    of width ``hi - lo`` and e^-eps times that on the rest; ``r`` minimises
    the expected ``loss`` exactly unless given.
"""
        + _PARAMETERS_DOC.format(
            extra=_STAIRCASE_LOSS_DOC
            + """    r : int, optional
        Override the optimal high-step length (1 <= r <= hi - lo).
"""
        )
        + _DISCRETE_ATTRIBUTES_DOC
        + """    r_ : int
        High-step length used.
"""
        + _DISCRETE_NOTES_DOC
        + """
    Examples
    --------
    >>> from skdp_label.mechanisms import DiscreteStaircase
    >>> mech = DiscreteStaircase(epsilon=1.0, bounds=(0, 10), random_state=0).fit([3])
    >>> 1 <= mech.r_ <= 10
    True
    """
    )
    _integer = True
    _max_epsilon = 30.0  # discrete noise (BaseLabelMechanism's default of 20 is for continuous)
    _parameter_constraints = {
        **BaseStaircaseFamily._parameter_constraints,
        "loss": [StrOptions({"squared", "absolute"})],
        "r": [NumberInterval(Integral, 1, None, closed="left"), None],
    }

    def __init__(
        self, epsilon: float = 1.0, *, bounds: tuple[float, float] | None = None,
        clip: bool = True, out_of_bounds: str = "raise", loss: str = "squared",
        r: int | None = None, accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.bounds = bounds
        self.clip = clip
        self.out_of_bounds = out_of_bounds
        self.loss = loss
        self.r = r

    def _fit_mechanism(self, y):
        super()._fit_mechanism(y)
        width = self.sensitivity_units_
        if self.r is None:
            self.r_ = optimal_discrete_staircase_r(float(self.epsilon), width, self.loss)
        elif self.r > width:
            raise ValueError(f"r must be at most hi - lo = {width}, got {self.r}.")
        else:
            self.r_ = int(self.r)

    def _staircase(self, sensitivity_units):
        return self._law_epsilon(), sensitivity_units, self.r_


@register_mechanism("gaussian", task="regression")
class Gaussian(BaseAdditiveMechanism):
    __doc__ = (
        """Gaussian mechanism, (epsilon, delta)-DP (a baseline in 003).

    sigma is the smallest giving (epsilon, delta)-DP for sensitivity
    ``hi - lo`` (analytic Gaussian mechanism, Balle & Wang 2018). Noise is a
    discrete Gaussian on a power-of-two grid (Canonne, Kamath & Steinke
    2020), sampled by rejection from a discrete Laplace; with sigma about
    2^20 grid steps its privacy curve is that of the continuous Gaussian to
    far below float precision.
"""
        + _PARAMETERS_DOC.format(
            extra="""    delta : float in (0, 1), default=1e-5
        Privacy parameter delta of one label.
"""
        )
        + _CONTINUOUS_ATTRIBUTES_DOC
        + """    sigma_ : float
        Noise standard deviation on the label scale.
    delta_spent_ : float
        Delta spent per label by this object so far.
"""
        + _CONTINUOUS_NOTES_DOC
        + """
    Examples
    --------
    >>> from skdp_label.mechanisms import Gaussian
    >>> mech = Gaussian(epsilon=1.0, delta=1e-5, bounds=(0.0, 1.0), random_state=0).fit([0.2])
    >>> round(mech.sigma_, 2)
    3.73
    """
    )
    _parameter_constraints = {
        **BaseAdditiveMechanism._parameter_constraints,
        "delta": [NumberInterval(Real, 0, 1, closed="neither")],
    }

    def __init__(
        self, epsilon: float = 1.0, *, delta: float = 1e-5,
        bounds: tuple[float, float] | None = None, clip: bool = True, out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None, random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.delta = delta
        self.bounds = bounds
        self.clip = clip
        self.out_of_bounds = out_of_bounds

    def _noise_summary(self):
        return {"noise_std": float(self.sigma_), "clipped": bool(self.clip)}

    def _release_cost(self):
        return float(self.epsilon), float(self.delta)

    _total_cost = _release_cost

    def _noise_scale(self, sensitivity):
        # Only sets the grid. sigma is proportional to the sensitivity: solved
        # at 1 and scaled (the root finder fails on spans like 1e-290).
        return sensitivity * gaussian_sigma(float(self.epsilon), float(self.delta), 1.0)

    def _law_sigma(self, sensitivity_units):
        """sigma (grid units) of the law sampled: (epsilon, delta)-DP as sampled.

        Sampled probabilities are within 1 +- SAMPLER_RTOL of the law's, so a law
        that is (epsilon', delta')-DP is sampled (epsilon' + tau, delta' (1 +
        SAMPLER_RTOL))-DP: it is built at epsilon less the slack and at
        delta (1 - SAMPLER_RTOL) (delta (1 - eta^2) <= delta once sampled).
        """
        delta = float(self.delta) * (1.0 - SAMPLER_RTOL)
        return gaussian_sigma(self._law_epsilon(), delta, float(sensitivity_units))

    def _fit_mechanism(self, y):
        super()._fit_mechanism(y)
        self.sigma_units_ = self._law_sigma(self.sensitivity_units_)
        self.sigma_ = self.sigma_units_ * self.granularity_

    def _noise_decay(self, sensitivity_units):
        # Proposals are discrete Laplace of scale t = floor(sigma) + 1.
        sigma = self._law_sigma(sensitivity_units)
        return 1.0 / (math.floor(sigma) + 1.0), 1

    def _noise_units(self, n, sensitivity_units, rng):
        # Canonne-Kamath-Steinke: propose discrete Laplace of scale t, accept
        # with probability exp(-(|Y| - sigma^2/t)^2 / (2 sigma^2)) (exactly).
        sigma = self.sigma_units_
        t = math.floor(sigma) + 1.0
        return discrete_gaussian(rng, n, sigma, staircase_constants(1.0 / t, 1, 1))

    def _randomize_column(self, y, rng):
        # The envelope sampler (about two digits a label; the proposals above
        # take ~20x longer), fused with the rounding and the clip.
        sigma = self.sigma_units_
        cached = getattr(self, "_cell_table", None)
        if cached is None or cached[0] != sigma:  # rebuilt after a refit
            table = gaussian_cell_table(sigma)
            # Packed for the kernel once (public, like the table).
            records = None if table is None else envelope_records(
                table[1], table[2], table[0][4], table[3])
            cached = self._cell_table = (sigma, table, records)
        _, table, records = cached
        if table is None:
            return super()._randomize_column(y, rng)
        lo, hi = self._bounds()
        return gaussian_additive(y, rng, self.granularity_, table, bool(self.clip), lo, hi, records)
