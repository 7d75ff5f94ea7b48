"""RPWithPrior (paper 003) and RRWithPrior on a regression domain (000 App. G)."""

from __future__ import annotations

import math
from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils._param_validation import StrOptions

from ..._accountant import BudgetAccountant
from ...utils._repr import public_repr
from .._prior import BasePriorMechanism, nearest_grid
from .._registry import register_mechanism
from .._validation import NumberInterval, check_bounds
from ..bins._solver import expected_loss
from ..classification._solver import optimal_k, rr_top_k_matrix, top_k_order
from ._interval import (
    auto_granularity,
    auto_window,
    grid_expected_loss,
    grid_interval,
    grid_matrix,
    optimal_interval,
    sample_labels,
    step_prior_nodes,
)

__all__ = ["RPWithPrior", "RRWithPriorRegression"]

# Prior bins over the bounds when neither domain nor resolution is given.
_DEFAULT_N_BINS = 32
# transition_matrix_ (and the value arrays) are built on access up to this size.
_MAX_MATRIX_ENTRIES = 4_000_000
_MAX_GRID_VALUES = 10_000_000


@register_mechanism("rp-with-prior", task="regression")
class RPWithPrior(BasePriorMechanism):
    """RPWithPrior: uniform noise around the label on a prior-chosen interval (paper 003).

    From a prior, 003's Algorithm 1 picks the interval ``[A1, A2]``
    maximising the probability that a label lands in its window (Lemma 3.3,
    3.5). A label is clipped to the interval (eq. 3.6) and mapped uniformly
    into its window ``[y - zeta, y + zeta]`` with probability ``P_win``, and
    uniformly onto the rest of ``[A1 - zeta, A2 + zeta]`` otherwise, the
    window being ``e^eps`` times denser (eq. 3.4).

    Exact epsilon-DP by construction: outputs lie on a public power-of-two
    grid of step ``granularity_`` and the mechanism *on that grid* is what
    is sampled (labels rounded to the grid; the window holds ``2 w + 1``
    grid values, ``zeta_ = w * granularity_``). Every row of the grid
    mechanism takes two values, ``1 / Gamma`` and ``e^-eps / Gamma``, so the
    privacy loss is exactly ``eps`` whatever the interval; the sampler draws
    the window/rest choice with an exact Bernoulli and the position with an
    exactly uniform integer. The interval is found in O(k) per Dinkelbach
    step over node pairs (the optimum of 003's Lemma 3.5 is always at two
    nodes; see ``rp_with_prior/_interval.py``), not 003's O(k^2).

    The prior is public (``prior=(values, probabilities)``, no budget spent)
    or estimated privately as for RR-on-Bins (000 Alg. 3/4; *not* 003's
    public code, which histograms the raw labels over their observed range):
    ``prior_epsilon`` of the budget buys a discrete-Laplace histogram over
    public bins (``n_bins`` equal bins over ``bounds``, or ``domain`` /
    ``resolution`` as their centres), the rest randomizes the labels.
    ``epsilon`` is always the total. The prior is read as a step density:
    each prior value's mass is spread over the labels nearest to it.

    Labels outside the interval, including any outside the bounds, are
    clipped to it (eq. 3.6, a per-label step that needs no budget).

    Parameters
    ----------
    epsilon : float, default=1.0
        Total privacy cost of one label (prior estimate included).
    zeta : float or 'auto', default='auto'
        Half-width of the window (003's zeta), rounded to the grid. ``'auto'``
        takes the one minimising ``loss`` under the prior (a
        one-dimensional search over the grid; 003 tunes it by hand).
    loss : {'squared', 'absolute'}, default='squared'
        Loss of ``zeta='auto'`` and of ``noisy_label_loss_``.
    prior : tuple (values, probabilities), optional
        Public prior. When given, no budget is spent on it; its step density
        spans ``bounds`` if given (which must contain the values), else the
        values' range.
    domain : array-like, optional
        Public bin centres of the private prior.
    bounds : tuple (lo, hi), optional
        Public label range. Required without a ``prior``; never read off
        the labels.
    resolution : float, optional
        Bin width of the private prior: centres ``lo, lo + resolution, ...,
        hi`` (the end bins are half bins).
    n_bins : int, optional
        Number of equal bins of the private prior over ``bounds`` (default 32
        when neither ``domain`` nor ``resolution`` is given).
    prior_epsilon : 'auto' or float, default='auto'
        Budget of the private prior. ``'auto'``: ``sqrt(n_bins / n)`` (000,
        Thm. 7), at most half of ``epsilon``.
    granularity : float or 'auto', default='auto'
        Grid step, a power of two. ``'auto'``: at least 1024 steps over the
        prior's range (``bounds``).
    out_of_bounds : {'raise', 'clip'}, default='raise'
        Labels outside the declared bounds (or domain) raise ``ValueError``
        before anything is spent; ``'clip'`` clips them to the bounds first.
    accountant : BudgetAccountant, optional
        Charged with the histogram and with every release.
    random_state : None or int, default=None
        ``None``: fresh OS entropy for every release, nothing kept. An int
        makes releases reproducible and emits ``PrivacyLeakWarning``
        (docs/randomness.md). Generators are refused.

    Attributes
    ----------
    interval_ : tuple (A1, A2)
        The interval of Algorithm 1 (two nodes of the step prior), before
        rounding to the grid.
    zeta_ : float
        The half-window used, a multiple of ``granularity_``.
    granularity_ : float
        The grid step.
    window_probability_ : float
        Probability that a label is mapped into its window.
    input_values_ : ndarray
        Grid values of ``[A1, A2]``: the rows of the mechanism (every label
        is clipped and rounded to one of them).
    output_values_ : ndarray
        Grid values of ``[A1 - zeta_, A2 + zeta_]``.
    transition_matrix_ : ndarray
        Exact output distribution of each input value, built on access
        (small grids only: it has ``len(input_values_) * len(output_values_)``
        entries).
    prior_values_ : ndarray of shape (k,)
        Values (bin centres) of the prior.
    prior_ : ndarray of shape (k,)
        The prior used (public, or the noisy histogram), over ``prior_values_``.
    prior_epsilon_ : float
        Epsilon spent on the prior (0 for a public prior).
    noisy_label_loss_ : float
        ``E l(yhat, y)`` for ``y`` at ``prior_values_`` with probabilities
        ``prior_``, exact for the grid mechanism.
    epsilon_spent_ : float
        Epsilon spent per label so far (prior plus releases).

    Examples
    --------
    >>> from skdp_label.mechanisms import RPWithPrior
    >>> mech = RPWithPrior(epsilon=2.0, prior=([0, 1, 2, 3, 10], [0.3, 0.3, 0.2, 0.1, 0.1]),
    ...                    zeta=0.5, granularity=0.25, random_state=0)
    >>> mech.fit_transform([0.0, 1.3, 2.0, 10.0]).shape
    (4,)
    >>> mech.interval_, mech.zeta_
    ((0.0, 2.5), 0.5)
    >>> mech.output_values_[[0, -1]].tolist()
    [-0.5, 3.0]
    >>> round(mech.window_probability_, 3)
    0.787
    """

    _exact_sampler = True  # an exact Bernoulli of the rest's mass, exactly uniform positions
    _parameter_constraints = {
        **BasePriorMechanism._parameter_constraints,
        "zeta": [StrOptions({"auto"}), NumberInterval(Real, 0, None, closed="neither")],
        "loss": [StrOptions({"squared", "absolute"})],
        "n_bins": [NumberInterval(Integral, 2, None, closed="left"), None],
        "granularity": [StrOptions({"auto"}), NumberInterval(Real, 0, None, closed="neither")],
    }

    def __init__(
        self, epsilon: float = 1.0, *, zeta: float | str = "auto", loss: str = "squared",
        prior: tuple[ArrayLike, ArrayLike] | None = None, domain: ArrayLike | None = None,
        bounds: tuple[float, float] | None = None, resolution: float | None = None,
        n_bins: int | None = None, prior_epsilon: float | str = "auto",
        granularity: float | str = "auto", out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None, random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.out_of_bounds = out_of_bounds
        self.zeta = zeta
        self.loss = loss
        self.prior = prior
        self.domain = domain
        self.bounds = bounds
        self.resolution = resolution
        self.n_bins = n_bins
        self.prior_epsilon = prior_epsilon
        self.granularity = granularity

    # -- public inputs -------------------------------------------------------
    def _domain(self, n_labels=None):
        if self.n_bins is not None and (
            self.prior is not None or self.domain is not None or self.resolution is not None
        ):
            raise ValueError("n_bins cannot be combined with prior, domain or resolution.")
        if self.prior is None and self.domain is None and self.resolution is None:
            lo, hi = check_bounds(self.bounds, owner=f"{type(self).__name__} given no prior")
            n = _DEFAULT_N_BINS if self.n_bins is None else int(self.n_bins)
            width = (hi - lo) / n
            return lo + width * (np.arange(n) + 0.5), None
        values, probs = super()._domain(n_labels)
        if self.prior is not None and self.bounds is not None:
            lo, hi = check_bounds(self.bounds)
            if values[0] < lo or values[-1] > hi:
                raise ValueError("prior values lie outside the declared bounds.")
        return values, probs

    def _nodes(self, values):
        if values.size < 2:
            raise ValueError(f"{type(self).__name__} needs a prior over at least two values.")
        lo = hi = None
        if self.bounds is not None:
            lo, hi = check_bounds(self.bounds)
        return step_prior_nodes(values, lo, hi)

    def _granularity(self, nodes):
        if self.granularity == "auto":
            return auto_granularity(nodes[0], nodes[-1])
        g = float(self.granularity)
        if math.frexp(g)[0] != 0.5:
            raise ValueError(
                "granularity must be a power of two (the grid must hold exact floats); "
                f"got {public_repr(g)}."
            )
        if (nodes[-1] - nodes[0]) / g > _MAX_GRID_VALUES:
            raise ValueError(
                f"granularity={public_repr(g)} gives more than {_MAX_GRID_VALUES} grid values over the "
                "prior's range; choose a coarser grid."
            )
        return g

    def _check_public_inputs(self):
        values, _ = self._domain()
        self._granularity(self._nodes(values))

    # -- fit -------------------------------------------------------------------
    def _fit_mechanism(self, y):
        # The rows of this mechanism are its output grid (built on access), not
        # the prior's bins: keep the bins apart.
        self.prior_values_, self.prior_, eps_labels = self._fit_prior(y)
        self._build_mechanism(self.prior_values_, self.prior_, eps_labels)

    def _build_mechanism(self, prior_values, prior_probabilities, epsilon):
        nodes = self._nodes(prior_values)
        g = self._granularity(nodes)
        if self.zeta == "auto":
            w, interval, _ = auto_window(
                nodes, prior_values, prior_probabilities, epsilon, g, self.loss
            )
        else:
            w = int(np.rint(float(self.zeta) / g))
            a1, a2, _ = optimal_interval(nodes, prior_probabilities, (w + 0.5) * g, epsilon)
            interval = (a1, a2)
        u1, u2, _ = grid_interval(interval[0], interval[1], 0.0, g)
        self._u1, self._u2, self._w, self._eps_labels = u1, u2, w, float(epsilon)
        self.interval_ = interval
        self.granularity_ = g
        self.zeta_ = w * g
        c = math.exp(-epsilon)
        self.window_probability_ = (2 * w + 1) / ((2 * w + 1) + c * (u2 - u1))
        self.noisy_label_loss_ = grid_expected_loss(
            prior_values, prior_probabilities, u1, u2, w, epsilon, g, self.loss
        )

    # -- the grid mechanism -------------------------------------------------------
    def _grid_values(self, lo_unit, hi_unit):
        if hi_unit - lo_unit + 1 > _MAX_GRID_VALUES:
            raise AttributeError(f"the grid has more than {_MAX_GRID_VALUES} values.")
        return np.arange(lo_unit, hi_unit + 1, dtype=np.float64) * self.granularity_

    @property
    def input_values_(self) -> np.ndarray:
        return self._grid_values(self._u1, self._u2)

    @property
    def output_values_(self) -> np.ndarray:
        return self._grid_values(self._u1 - self._w, self._u2 + self._w)

    @property
    def transition_matrix_(self) -> np.ndarray:
        n_in = self._u2 - self._u1 + 1
        n_out = n_in + 2 * self._w
        if n_in * n_out > _MAX_MATRIX_ENTRIES:
            # AttributeError: code asking getattr(mech, 'transition_matrix_', None)
            # then treats the mechanism as continuous.
            raise AttributeError(
                f"transition_matrix_ would have {n_in} x {n_out} entries (more than "
                f"{_MAX_MATRIX_ENTRIES}); it is only built on coarse grids (larger granularity)."
            )
        return grid_matrix(self._u1, self._u2, self._w, self._eps_labels)

    def _encode_labels(self, y):
        # Row index: clip to the interval (eq. 3.6), round to the grid.
        units = np.clip(
            np.rint(np.asarray(y, dtype=np.float64) / self.granularity_), self._u1, self._u2
        )
        return units.astype(np.int64) - self._u1

    def _randomize_column(self, y, rng):
        # _encode_labels, the sampler and unit -> value in one pass.
        return sample_labels(
            y, self.granularity_, self._u1, self._u2, self._w, self._eps_labels, rng
        )


@register_mechanism("rr-with-prior-regression", task="regression")
class RRWithPriorRegression(BasePriorMechanism):
    """RRWithPrior on a regression label domain (000 App. G).

    The classification mechanism of 004 (Lemma 1) with every value of a
    public label domain as a class: the prior's ``k`` likeliest values form
    the output set, ``k`` maximising the probability of outputting the true
    label, ``(mass of the top k) * e^eps / (e^eps + k - 1)``; a label in the
    set is kept with probability ``e^eps / (e^eps + k - 1)``, otherwise
    replaced by another member uniformly; a label outside it becomes a
    uniform member. The distance between values is ignored, which is why
    RR-on-Bins, built for regression losses, does better (000, Table 2);
    this is the baseline of that comparison, with the same prior:
    public, or the same private two-step histogram as RR-on-Bins.

    Labels are rounded to the nearest domain value (labels outside the
    domain are clipped to its ends).

    Parameters
    ----------
    epsilon : float, default=1.0
        Total privacy cost of one label (prior estimate included).
    prior : tuple (values, probabilities), optional
        Public prior over the label domain (no budget spent).
    domain : array-like, optional
        Public label values (when the prior is estimated).
    bounds : tuple (lo, hi), optional
        Public label range; with ``resolution`` (default 1) the domain is
        ``lo, lo + resolution, ..., hi``.
    resolution : float, optional
        Grid step on ``bounds``.
    prior_epsilon : 'auto' or float, default='auto'
        Budget of the private prior (``sqrt(|Y| / n)``, at most half).
    out_of_bounds : {'raise', 'clip'}, default='raise'
        Labels outside the declared bounds (or domain) raise ``ValueError``
        before anything is spent; ``'clip'`` clips them to the bounds first.
    accountant : BudgetAccountant, optional
        Charged with the histogram and with every release.
    random_state : None or int, default=None
        ``None``: fresh OS entropy for every release, nothing kept. An int
        makes releases reproducible and emits ``PrivacyLeakWarning``
        (docs/randomness.md). Generators are refused.

    Attributes
    ----------
    input_values_ : ndarray of shape (n_values,)
        The label domain.
    output_values_ : ndarray of shape (k,)
        The top-k values, increasing.
    k_ : int
        Size of the output set.
    transition_matrix_ : ndarray of shape (n_values, k)
        Exact output distribution of each domain value.
    prior_ : ndarray of shape (n_values,)
        The prior used (public, or the noisy histogram).
    prior_epsilon_ : float
        Epsilon spent on the prior (0 for a public prior).
    noisy_label_loss_ : float
        ``E (yhat - y)^2`` for ``y ~ prior_``.
    epsilon_spent_ : float
        Epsilon spent per label so far.

    Examples
    --------
    >>> from skdp_label.mechanisms import RRWithPriorRegression
    >>> mech = RRWithPriorRegression(1.0, prior=([0, 1, 2, 3, 10], [0.4, 0.3, 0.2, 0.05, 0.05]),
    ...                              random_state=0)
    >>> mech.fit_transform([0, 1, 3, 10]).shape
    (4,)
    >>> mech.output_values_.tolist()
    [0.0, 1.0, 2.0]
    """

    def __init__(
        self, epsilon: float = 1.0, *, prior: tuple[ArrayLike, ArrayLike] | None = None,
        domain: ArrayLike | None = None, bounds: tuple[float, float] | None = None,
        resolution: float | None = None, prior_epsilon: float | str = "auto",
        out_of_bounds: str = "raise", accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.out_of_bounds = out_of_bounds
        self.prior = prior
        self.domain = domain
        self.bounds = bounds
        self.resolution = resolution
        self.prior_epsilon = prior_epsilon

    def _nearest_grid(self):
        # Rows by nearest_domain_index (BasePriorMechanism._encode_labels).
        return nearest_grid(self.input_values_)

    def _build_mechanism(self, prior_values, prior_probabilities, epsilon):
        order = top_k_order(prior_probabilities)
        k = int(optimal_k(prior_probabilities[None, :], epsilon, order)[0])
        in_top = np.zeros(prior_values.shape[0], dtype=bool)
        in_top[order[0, :k]] = True
        # Columns outside the top k are zero in every row: drop them.
        self.transition_matrix_ = rr_top_k_matrix(in_top, epsilon)[:, in_top]
        self.output_values_ = prior_values[in_top]
        self.k_ = k
        self.noisy_label_loss_ = expected_loss(
            prior_values,
            prior_probabilities,
            self.output_values_,
            self.transition_matrix_,
            "squared",
        )
