"""RR-on-Bins: the optimal label randomizer for regression (paper 000)."""

from __future__ import annotations

import math

from numbers import Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils._param_validation import StrOptions

from ..._accountant import BudgetAccountant
from ..._kernels._sampling import rr_flip_probability
from .._prior import BasePriorMechanism, nearest_domain_index
from .._registry import register_mechanism
from .._validation import NumberInterval, check_squared_span
from ._sampling import BinLookup
from ._solver import expected_loss, optimal_bins

__all__ = ["RROnBins", "rr_on_bins_matrix"]


def rr_on_bins_matrix(bin_map, n_bins, epsilon):
    """Transition matrix of RR-on-Bins (000, Alg. 1).

    Row ``y`` puts ``e^eps / (e^eps + m - 1)`` on bin ``bin_map[y]`` and
    ``1 / (e^eps + m - 1)`` on every other bin.
    """
    # exp(-eps) form: no overflow at large epsilon.
    e = math.exp(-epsilon)
    keep = 1.0 / (1.0 + (n_bins - 1) * e)
    matrix = np.full((bin_map.shape[0], n_bins), e * keep)
    matrix[np.arange(bin_map.shape[0]), bin_map] = keep
    return matrix


@register_mechanism("rr-on-bins", task="regression")
class RROnBins(BasePriorMechanism):
    """Randomized response on bins, with the optimal bins for a prior.

    The label domain is split into ``m`` intervals (bins), each with an
    output value; a label is mapped to its bin's value ``Phi(y)``, kept with
    probability ``e^eps / (e^eps + m - 1)`` and otherwise replaced by one of
    the other ``m - 1`` bin values uniformly (000, Alg. 1). The bins and
    their values minimise the expected loss ``E l(yhat, y)`` under the prior;
    this is the optimal epsilon-DP label randomizer for the prior, over all
    mechanisms (000, Thm. 5). The bins are computed exactly (the optimum of
    000's Algorithm 2 over every number of bins) by a Dinkelbach iteration
    over a one-dimensional dynamic program; see ``bins/_solver.py``.

    The prior is public (``prior=(values, probabilities)``, no budget spent)
    or estimated privately (000, Alg. 3): ``prior_epsilon`` of the budget
    buys a discrete-Laplace histogram of the labels over the public domain
    (``domain=`` values, or a grid over ``bounds=(lo, hi)``), the rest
    randomizes the labels. ``epsilon`` is always the total.

    By default (``resolution='auto'``) the grid has as many evenly spaced
    points as ``epsilon`` and the number of labels can use (docs/grid.md):
    enough that rounding adds at most 1/400 of the loss RR-on-Bins has on
    labels spread over the bounds, no more than the private prior resolves
    from ``n`` labels (``n / 8``, fewer at small epsilon), at most 2001.

    Labels are first rounded to the nearest domain value (a squared bias of
    at most ``step^2 / 4`` per label); labels outside the domain are clipped
    to its end points (a per-label step that needs no budget). The domain,
    bounds and grid are public inputs: they are never read off the labels.

    Parameters
    ----------
    epsilon : float, default=1.0
        Total privacy cost of one label (prior estimate included).
    loss : {'squared', 'absolute', 'poisson'} or callable, default='squared'
        Loss the bins minimise. ``'squared'``: ``(yhat - y)**2`` (bin values
        are weighted means); ``'absolute'``: ``|yhat - y|`` (weighted medians,
        000 App. B); ``'poisson'``: ``yhat - y log(yhat)`` (labels >= 0). A
        callable ``loss(yhat, y)`` must broadcast over numpy arrays and be
        convex in ``yhat`` with its minimum at ``yhat = y`` (000, Assumption
        4); its bins are found by golden-section search per bin, which costs
        ``O(k^3)`` loss evaluations (fine for a few hundred labels).
    prior : tuple (values, probabilities), optional
        Public prior over the label domain. When given, no budget is spent on
        it and its values are the domain.
    domain : array-like, optional
        Public label values (when the prior is estimated).
    bounds : tuple (lo, hi), optional
        Public label range; with ``resolution`` it gives the grid (when
        ``domain`` is not given).
    resolution : 'auto', float or None, default='auto'
        Grid step on ``bounds``: ``'auto'`` sizes the grid from epsilon and
        the number of labels (:func:`~skdp_label.mechanisms.auto_grid_points`);
        a number is the step ``lo, lo + resolution, ..., hi``; ``None`` a
        step of 1 (the unit grid).
    prior_epsilon : 'auto' or float, default='auto'
        Budget of the private prior. ``'auto'``: ``sqrt(|Y| / n)`` (000,
        Thm. 7), at most half of ``epsilon``.
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
    input_values_ : ndarray of shape (k,)
        The label domain, sorted (with ``resolution='auto'``, the grid the
        rule chose; ``privacy_report()`` shows its size).
    output_values_ : ndarray of shape (m,)
        The bin values, increasing.
    bin_map_ : ndarray of int of shape (k,)
        Bin of each domain value: ``output_values_[bin_map_]`` is ``Phi``.
        Domain values of zero prior mass go to the bin of least loss.
    transition_matrix_ : ndarray of shape (k, m)
        Exact output distribution for each domain value.
    n_bins_ : int
        ``m``.
    prior_ : ndarray of shape (k,)
        The prior used (public, or the noisy histogram).
    prior_epsilon_ : float
        Epsilon spent on the prior (0 for a public prior).
    noisy_label_loss_ : float
        ``E l(yhat, y)`` for ``y ~ prior_``: ``E (yhat - y)**2`` (no 1/2),
        ``E |yhat - y|``, ``E [yhat - y log yhat]`` or the callable's.
    epsilon_spent_ : float
        Epsilon spent per label so far (prior plus releases).

    Examples
    --------
    >>> from skdp_label.mechanisms import RROnBins
    >>> mech = RROnBins(epsilon=1.0, prior=([0, 1, 2, 3, 10], [0.3, 0.3, 0.2, 0.1, 0.1]),
    ...                 random_state=0)
    >>> mech.fit_transform([0, 1, 3, 10]).shape
    (4,)
    >>> mech.output_values_.round(3)
    array([1.349, 3.151])
    >>> mech.bin_map_
    array([0, 0, 0, 1, 1])
    >>> round(mech.noisy_label_loss_, 3)
    7.25
    """

    _parameter_constraints = {
        **BasePriorMechanism._parameter_constraints,
        "resolution": [StrOptions({"auto"}), NumberInterval(Real, 0, None, closed="neither"), None],
        "loss": [StrOptions({"squared", "absolute", "poisson"}), callable],
    }
    _grid_family = "bins"

    def __init__(
        self,
        epsilon: float = 1.0,
        *,
        loss: str = "squared",
        prior: tuple[ArrayLike, ArrayLike] | None = None,
        domain: ArrayLike | None = None,
        bounds: tuple[float, float] | None = None,
        resolution: float | str | None = "auto",
        prior_epsilon: float | str = "auto",
        out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.out_of_bounds = out_of_bounds
        self.loss = loss
        self.prior = prior
        self.domain = domain
        self.bounds = bounds
        self.resolution = resolution
        self.prior_epsilon = prior_epsilon

    def _domain(self, n_labels=None):
        # Checked here, before any budget is spent on the prior.
        values, probs = super()._domain(n_labels)
        check_squared_span(values[0], values[-1], type(self).__name__)
        if self.loss == "poisson" and values[0] < 0:
            raise ValueError(
                "loss='poisson' needs non-negative labels; the domain starts at "
                f"{values[0]:g}."
            )
        if callable(self.loss):
            picks = np.linspace(0, values.size - 1, min(values.size, 20)).astype(int)
            probe = values[np.unique(picks)]
            with np.errstate(all="ignore"):
                out = np.asarray(self.loss(probe[:, None], probe[None, :]), dtype=np.float64)
            if out.shape != (probe.size, probe.size) or np.isnan(out).any():
                raise ValueError(
                    "a callable loss must map numpy arrays (yhat, y) to an array of their "
                    "broadcast shape, without NaN."
                )
        return values, probs

    def _randomized_response_size(self):
        # k-ary RR over the bins, at most one a domain value: the domain's size
        # bounds the flip probability's rounding (rr_law_epsilon). Set before
        # the law's epsilon is taken (BasePriorMechanism._fit_mechanism).
        values = vars(self).get("input_values_")
        return None if values is None else len(values)

    def _build_mechanism(self, prior_values, prior_probabilities, epsilon):
        bin_values, bin_map, _ = optimal_bins(prior_values, prior_probabilities, epsilon, self.loss)
        self.output_values_ = bin_values
        self.bin_map_ = bin_map
        self.n_bins_ = int(bin_values.shape[0])
        self.transition_matrix_ = rr_on_bins_matrix(bin_map, self.n_bins_, epsilon)
        self._flip_probability = rr_flip_probability(self.n_bins_, epsilon)
        self._lookup = BinLookup(prior_values, bin_map)
        self.noisy_label_loss_ = expected_loss(
            prior_values, prior_probabilities, bin_values, self.transition_matrix_, self.loss
        )

    def _encode_labels(self, y):
        # Nearest domain value (ties up, clipped): the histogram of the private
        # prior encodes every label.
        return nearest_domain_index(self.input_values_, y)

    def _randomize_column(self, y, rng):
        # Label -> nearest domain value -> its bin -> k-ary RR over the bins.
        return self._lookup.sample(y, rng, self.output_values_, self._flip_probability)
