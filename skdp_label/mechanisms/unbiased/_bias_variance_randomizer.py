"""The bias-regularised regression randomizer (paper 001, §6) as a mechanism."""

from __future__ import annotations

from numbers import Real

from numpy.typing import ArrayLike
from threadpoolctl import threadpool_limits

from ..._accountant import BudgetAccountant
from .._prior import BasePriorMechanism
from .._registry import register_mechanism
from .._validation import NumberInterval
from ..classic._randomized_response import randomized_response_matrix
from ._bias_variance import bias_and_variance, bias_variance_continuous
from ._mechanisms import _GRID_DOC, OptimalUnbiased, _UnbiasedRoundingMixin
from ._solver import check_exact_mechanism, debiased_rr_outputs, mechanism_loss
from ...utils._warnings import warn_caller

__all__ = ["BiasVarianceRandomizer"]


@register_mechanism("bias-variance", task="regression")
class BiasVarianceRandomizer(_UnbiasedRoundingMixin, BasePriorMechanism):
    __doc__ = (
        """Epsilon-DP label randomizer trading bias for variance (001 §6).

    For the prior ``p`` over the grid, the epsilon-DP randomizer (any real
    outputs) minimising

        E_p[Var(y_hat | y)] + bias_weight * E_p[(E[y_hat | y] - y)^2].

    A model trained on noisy labels averages their noise over the examples
    that shape each prediction, but keeps their bias: with ``n_eff`` such
    examples its error is about ``E[Var] / n_eff + E[bias^2]``, which is the
    objective above with ``bias_weight = n_eff`` (divided by ``n_eff``).
    ``bias_weight = 1`` is the squared noisy-label loss ``E[(y_hat - y)^2]``,
    minimised over all epsilon-DP randomizers by RR-on-Bins (paper 000), and
    this class then matches its loss; as ``bias_weight`` grows the optimum
    tends to the minimum-variance unbiased randomizer
    (:class:`OptimalUnbiased`). In between, bias falls and variance rises
    monotonically (docs/unbiased.md has the figure).

    Computed like :class:`OptimalUnbiased`: staircase columns whose high
    entries are an interval of the sorted labels, ray weights and first
    moments as variables (the bias penalty is a convex quadratic in them),
    a primal-dual interior-point method in ``2k`` dimensions, and Newton's
    method on the optimality conditions of the optimal rays. The sampled
    transition matrix is exact: columns are exact staircase rays, rows sum
    to 1 (both checked at fit time). Labels of zero prior mass get the
    interpolation of their neighbours' rows (still exactly epsilon-DP).

    Labels are rounded onto the public grid by unbiased randomized rounding
    (001 §3), so for a real label ``y`` between grid points ``v_l < v_h``,
    ``theta = (y - v_l) / (v_h - v_l)``, the bias is the linear
    interpolation ``(1 - theta) bias_[l] + theta bias_[h]`` of the grid
    points' biases and the variance is ``(1 - theta) variance_[l] +
    theta variance_[h] + theta (1 - theta) (m_h - m_l)^2`` (``m`` the grid
    points' means). Labels outside the grid are clipped to its ends.

    The prior is public (``prior=``, nothing spent) or a noisy histogram of
    the rounded labels bought with ``prior_epsilon`` (001 App. C), and the
    randomizer is built for the rest of ``epsilon``.

    Parameters
    ----------
    epsilon : float, default=1.0
        Total privacy cost of one label (prior estimate + randomization).
    bias_weight : float >= 1, default=100.0
        Weight ``lambda`` of the squared bias against the variance: about the
        number of noisy labels a downstream model averages per prediction.
        1 gives RR-on-Bins' loss; large values approach the unbiased
        randomizer.
    prior : tuple (values, probabilities), optional
        Public prior; its values are the grid and nothing is spent on it.
"""
        + _GRID_DOC
        + """    prior_epsilon : float or 'auto', default='auto'
        Budget of the private prior; 'auto' is ``sqrt(|Y| / n)`` capped at
        half of ``epsilon``.
    accountant : BudgetAccountant, optional
        Charged with the histogram and every release.
    random_state : None or int, default=None
        ``None``: fresh OS entropy for every release, nothing kept. An int
        makes releases reproducible and emits ``PrivacyLeakWarning``
        (docs/randomness.md). Generators are refused.

    Attributes
    ----------
    input_values_ : ndarray of shape (k,)
        The grid labels are rounded onto.
    output_values_ : ndarray of shape (m,)
        Sorted output values.
    transition_matrix_ : ndarray of shape (k, m)
        Exact output distribution of each grid label.
    bias_ : ndarray of shape (k,)
        ``E[y_hat | y] - y`` for each grid label (exact, from the matrix).
    variance_ : ndarray of shape (k,)
        ``Var(y_hat | y)`` for each grid label.
    objective_ : float
        ``E[variance_] + bias_weight * E[bias_^2]`` under ``prior_``.
    noisy_label_loss_ : float
        ``E[(y_hat - y)^2]`` under ``prior_``.
    lower_bound_ : float
        Certified lower bound on ``objective_`` over every epsilon-DP
        randomizer for ``prior_`` (any outputs); NaN after a fallback. With
        more than 30 grid labels and an optimum with few outputs it can be
        loose (docs/unbiased.md); the optimum is always certified over
        interval-staircase randomizers.
    prior_ : ndarray of shape (k,)
        The prior used (public, or the noisy histogram).
    prior_epsilon_ : float
        Epsilon spent on the prior (0 for a public prior).
    epsilon_spent_ : float
        Epsilon spent per label by this object so far.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms import BiasVarianceRandomizer
    >>> prior = ([0.0, 1.0, 2.0, 3.0], [0.4, 0.3, 0.2, 0.1])
    >>> mech = BiasVarianceRandomizer(epsilon=0.5, bias_weight=10.0, prior=prior,
    ...                               random_state=0).fit([0.0])
    >>> mech.transform([0.0, 3.0]).shape
    (2,)
    >>> loose = BiasVarianceRandomizer(epsilon=0.5, bias_weight=1.0, prior=prior).fit([0.0])
    >>> bool(np.abs(mech.bias_).max() < np.abs(loose.bias_).max())
    True
    """
    )

    # The unbiased solver's structure: the same floor (see OptimalUnbiased).
    _min_labels_epsilon = 1e-6

    _parameter_constraints = {
        **BasePriorMechanism._parameter_constraints,
        "bias_weight": [NumberInterval(Real, 1, None, closed="left")],
        "resolution": OptimalUnbiased._parameter_constraints["resolution"],
        "grid_size": OptimalUnbiased._parameter_constraints["grid_size"],
    }

    def __init__(
        self,
        epsilon: float = 1.0,
        *,
        bias_weight: float = 100.0,
        prior: tuple[ArrayLike, ArrayLike] | None = None,
        domain: ArrayLike | None = None,
        bounds: tuple[float, float] | None = None,
        resolution: float | str | None = None,
        grid_size: int | str | None = None,
        prior_epsilon: float | str = "auto",
        out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.bias_weight = bias_weight
        self.out_of_bounds = out_of_bounds
        self.prior = prior
        self.domain = domain
        self.bounds = bounds
        self.resolution = resolution
        self.grid_size = grid_size
        self.prior_epsilon = prior_epsilon

    def _build_mechanism(self, values, probs, epsilon):
        lam = float(self.bias_weight)
        lower = float("nan")
        # Small dense problems: BLAS threads only add overhead.
        with threadpool_limits(limits=1, user_api="blas"):
            try:
                outputs, matrix, _, lower, _ = bias_variance_continuous(values, probs, epsilon, lam)
                check_exact_mechanism(matrix @ outputs, outputs, matrix, epsilon)
            except RuntimeError as exc:
                # A private prior may have been charged: the fit must not
                # fail. Debiased RR is exactly epsilon-DP for any prior.
                warn_caller(
                    f"bias-variance solver failed ({exc}); using debiased randomized response "
                    "(exactly epsilon-DP and unbiased, larger variance).",
                    RuntimeWarning,
                )
                outputs = debiased_rr_outputs(values, epsilon)
                matrix = randomized_response_matrix(values.size, epsilon)
                lower = float("nan")
        # DP and row sums (the "labels" passed are the rows' own means, so
        # only privacy and stochasticity are checked here).
        check_exact_mechanism(matrix @ outputs, outputs, matrix, epsilon)
        self.output_values_ = outputs
        self.transition_matrix_ = matrix
        self.bias_, self.variance_ = bias_and_variance(values, outputs, matrix)
        self.objective_ = float(probs @ self.variance_ + lam * (probs @ self.bias_**2))
        self.noisy_label_loss_ = mechanism_loss(values, probs, outputs, matrix)
        self.lower_bound_ = lower
