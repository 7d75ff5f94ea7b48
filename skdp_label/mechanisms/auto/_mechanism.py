"""mechanism='auto': the randomizer of least predicted excess risk (docs/auto.md)."""

from __future__ import annotations

import math
from collections.abc import Callable
from numbers import Integral, Real

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils._param_validation import StrOptions

from ..._accountant import BudgetAccountant
from .._base import BaseLabelMechanism
from .._prior import MEAN_UNITS, BasePriorMechanism, noisy_mean, resolve_domain
from .._registry import register_mechanism
from .._validation import (
    MIN_SHARE_EPSILON,
    EpsilonInterval,
    NumberInterval,
    check_bounds,
    check_squared_span,
)
from ..bins import RROnBins
from ..unbiased import BiasVarianceRandomizer, OptimalUnbiased
from ..unbiased._mechanisms import auto_grid_size
from ._risk import predicted_risk
from ...utils._warnings import warn_caller

__all__ = ["AutoRegression", "AUTO_CANDIDATES", "DEFAULT_AUTO_CANDIDATES", "register_auto_candidate",
           "compare_candidates", "mean_share_rule",
           "default_effective_size"]

# Grid of the shared prior when only bounds are declared: the unbiased
# randomizer's automatic size, but never coarser than 33 points (RR-on-Bins
# rounds labels to the nearest point; 33 points keep that rounding error
# below 1/4000 of (hi - lo)^2, negligible next to any epsilon <= 8's noise).
_MIN_AUTO_POINTS = 33


def _rr_on_bins(values, probs, epsilon, n_eff):
    return RROnBins(epsilon, prior=(values, probs)).fit(values[:1])


def _unbiased(values, probs, epsilon, n_eff):
    return OptimalUnbiased(epsilon, prior=(values, probs)).fit(values[:1])


def _bias_variance(values, probs, epsilon, n_eff):
    # With lam = n_eff its objective E Var + lam E bias^2 *is* n_eff times
    # the predicted risk: the optimum of the rule, between the other two.
    weight = max(1.0, float(n_eff))
    return BiasVarianceRandomizer(epsilon, prior=(values, probs), bias_weight=weight).fit(values[:1])


#: Candidates of ``mechanism='auto'``: name -> ``build(values, probs,
#: epsilon, n_eff)`` returning a mechanism fitted on the *public* prior
#: ``(values, probs)`` (nothing charged: ``fit`` sees only a domain value).
#: Listed from the simplest: a candidate is chosen only when it predicts a
#: risk lower than every earlier one's by more than a relative 1e-6.
AUTO_CANDIDATES = {"rr-on-bins": _rr_on_bins, "unbiased": _unbiased, "bias-variance": _bias_variance}

#: What ``candidates=None`` compares. 'bias-variance' optimises the predicted
#: risk by construction, so it is chosen whenever it is a candidate; on real
#: data that trusts the n_eff estimate too far (bench_auto.py: 5-30 % worse
#: than RR-on-Bins on diabetes and randhie, up to 9x on fair), so it is
#: opt-in (``candidates=[..., 'bias-variance']``) until the risk model is.
DEFAULT_AUTO_CANDIDATES = ("rr-on-bins", "unbiased")

# Relative improvement a later candidate needs over an earlier one.
_TIE_TOLERANCE = 1e-6


def register_auto_candidate(
    name: str, build: Callable[[np.ndarray, np.ndarray, float, float], BaseLabelMechanism],
) -> None:
    """Add a candidate to ``mechanism='auto'`` (see :data:`AUTO_CANDIDATES`)."""
    AUTO_CANDIDATES[name] = build


def default_effective_size(n_labels: int) -> float:
    """``sqrt(n)``: the averaging size assumed when nothing better is known."""
    return max(1.0, math.sqrt(n_labels))


def compare_candidates(
    values: ArrayLike, probs: ArrayLike, epsilon: float, n_eff: float,
    names: list[str] | tuple[str, ...] | None = None,
    fitted: dict[str, BaseLabelMechanism] | None = None,
) -> tuple[dict[str, dict[str, float]], dict[str, BaseLabelMechanism]]:
    """Predicted risks of candidate mechanisms, built for a public prior.

    Parameters
    ----------
    values, probs : ndarray of shape (k,)
        Public (or charged noisy) prior.
    epsilon : float
        Epsilon the labels are randomized with.
    n_eff : float
        Labels a prediction averages over.
    names : list of str, optional
        Candidates to build (default: every entry of :data:`AUTO_CANDIDATES`).
    fitted : dict, optional
        Mechanisms already fitted for this prior, by name (not rebuilt).

    Returns
    -------
    risks : dict
        name -> ``{'bias2', 'variance', 'risk'}`` (label units squared).
    mechanisms : dict
        name -> the fitted candidate.
    """
    names = list(DEFAULT_AUTO_CANDIDATES) if names is None else list(names)
    mechanisms = dict(fitted or {})
    risks = {}
    for name in names:
        if name not in mechanisms:
            try:
                mechanisms[name] = AUTO_CANDIDATES[name](values, probs, epsilon, n_eff)
            # A solver failure, or a candidate refusing this epsilon (the unbiased
            # randomizer below 1e-6), leaves the other candidates.
            except (RuntimeError, ValueError) as exc:
                warn_caller(f"auto: candidate {name!r} failed ({exc}); skipped.", RuntimeWarning)
                continue
        mech = mechanisms[name]
        bias2, var, risk = predicted_risk(
            mech.input_values_, mech.output_values_, mech.transition_matrix_, probs, n_eff
        )
        risks[name] = {"bias2": bias2, "variance": var, "risk": risk}
    return risks, mechanisms


#: Largest share of epsilon ``mean_epsilon='auto'`` gives the mean: the
#: labels keep at least a twentieth (the mean's error is then at most
#: 1/0.95^2 = 1.11 times that of a mean spending all of epsilon).
_MAX_MEAN_SHARE = 0.95
#: Smallest share: the rule measures the mean's error against the uniform
#: prior's variance (hi - lo)^2 / 12, which overstates that of concentrated
#: labels (12x on randhie, 60x on fair), so its interior optimum can leave
#: the mean too noisy to set the level; a tenth (the unbiased randomizer's
#: prior cap) keeps its variance near a tenth of a percent of randhie's label
#: variance at n = 16,000, epsilon = 0.3 (docs/auto.md).
_MIN_MEAN_SHARE = 0.1


def mean_share_rule(epsilon: float, n_labels: int, lost_fraction: float) -> float:
    """Share of ``epsilon`` ``mean_epsilon='auto'`` spends on the noisy mean.

    From public quantities only (docs/auto.md): ``lost_fraction`` is
    ``rho``, the least predicted excess risk of the candidates at the full
    ``epsilon`` over the prior's variance, both under the public uniform
    prior over the grid (the share of the label variance a model averaging
    ``n_eff`` noisy labels is predicted to lose to the noise). Spending a
    share ``s`` on the mean leaves ``(1 - s) epsilon`` to the labels, which
    scales the lost fraction to ``rho_s = min(rho / (1 - s)^2, 1)`` (noise
    variance grows like ``1 / epsilon^2``). With ``G`` the (unknown,
    private) fraction of the variance a model can explain, the guarded
    predictor's squared error, in units of the label variance, is about
    ``min(1, 1 - G + rho_s) + e(s)``: the better of the constant and the
    model, both off by the error ``e(s)`` of the level, at most the mean's,
    ``2 (hi - lo)^2 / (n s epsilon)^2`` over the uniform prior's variance
    ``(hi - lo)^2 / 12``: ``e(s) = 24 / (n s epsilon)^2``. Averaged over ``G``
    uniform on ``[0, 1]`` (nothing is known of it before spending) this is
    ``1 - (1 - rho_s)^2 / 2 + e(s)``, minimised over ``s`` in
    ``[0.1, 0.95]`` on a fine geometric grid. Where learning is hopeless
    (``rho`` near 1: small epsilon) nearly all of epsilon buys the mean;
    where it is not, the floor of a tenth (the interior optimum, a few
    percent, assumes the uniform prior's variance; see ``_MIN_MEAN_SHARE``).
    """
    shares = np.geomspace(_MIN_MEAN_SHARE, _MAX_MEAN_SHARE, 600)
    lost = np.minimum(float(lost_fraction) / (1.0 - shares) ** 2, 1.0)
    mean_error = 24.0 / (float(n_labels) * shares * float(epsilon)) ** 2
    return float(shares[np.argmin(mean_error - 0.5 * (1.0 - lost) ** 2)])


def prior_variance(values, probs):
    """Variance of the prior (public, or the charged noisy histogram)."""
    probs = np.asarray(probs, dtype=np.float64) / np.sum(probs)
    mean = probs @ values
    return float(probs @ (values - mean) ** 2)


@register_mechanism("auto", task="regression")
class AutoRegression(BasePriorMechanism):
    """The regression randomizer of least predicted excess risk (docs/auto.md).

    ``fit`` spends ``prior_epsilon`` once on a noisy histogram of the labels
    over a public grid (as RR-on-Bins does), builds every candidate
    (RR-on-Bins and the optimal unbiased randomizer) for that noisy prior
    with the rest of the budget, and keeps the one minimising

        E_p[bias(y)^2] + E_p[Var(y_hat | y)] / n_eff,

    the excess squared risk of a model that averages about ``n_eff`` noisy
    labels, computed exactly from each candidate's transition matrix under
    the noisy prior. The choice is a post-processing of the charged prior
    and public inputs: it costs nothing more, and only the chosen mechanism
    randomizes the labels. ``epsilon`` is the total, as for the others.

    Parameters
    ----------
    epsilon : float, default=1.0
        Total privacy cost of one label (prior estimate included).
    n_eff : float, optional
        Labels each prediction of the downstream model averages over.
        ``None``: ``sqrt(n)``. :class:`~skdp_label.LabelDPRegressor` sets it
        from its base estimator (docs/auto.md).
    candidates : list of str, optional
        Names in :data:`AUTO_CANDIDATES` (default: :data:`DEFAULT_AUTO_CANDIDATES`,
        RR-on-Bins and the unbiased randomizer; 'bias-variance' is opt-in).
    prior : tuple (values, probabilities), optional
        Public prior (nothing is spent on it).
    domain : array-like, optional
        Public label values of the prior's grid.
    bounds : tuple (lo, hi), optional
        Public label bounds.
    resolution : float, optional
        Grid step from ``bounds[0]`` (instead of ``grid_size``).
    grid_size : int or 'auto', default='auto'
        Evenly spaced grid points over ``bounds`` (used when neither
        ``domain`` nor ``resolution`` is given); ``'auto'``: the unbiased
        randomizer's :func:`~skdp_label.mechanisms.unbiased.auto_grid_size`,
        at least 33.
    prior_epsilon : 'auto' or float, default='auto'
        Budget of the private prior; ``'auto'``: 000's ``sqrt(|Y| / n)``,
        at most half of ``epsilon`` (the choice needs the prior's shape).
    mean_epsilon : None, 'auto' or float, default=None
        Budget of a noisy mean of the labels clipped to the public range
        (:func:`~skdp_label.mechanisms._prior.noisy_mean`: exact integer
        noise, unbiased), spent first, before the histogram and the labels
        share the rest: the level of :class:`~skdp_label.LabelDPRegressor`'s
        guard toward the constant (docs/auto.md). ``None`` or 0: no mean.
        ``'auto'`` (what ``LabelDPRegressor`` sets when its guard is on):
        :func:`mean_share_rule` of epsilon, from public quantities; read it
        before spending with :meth:`mean_budget`. A float must lie in ``[0,
        epsilon)``. Keyed releases (:mod:`skdp_label.release`) sum the labels in
        their pass 1 and noise the sum once (the release's ``noisy_mean_``).
    out_of_bounds : {'raise', 'clip'}, default='raise'
        Labels outside the bounds raise before anything is spent, or are
        clipped to them.
    accountant : BudgetAccountant, optional
        Charged with the mean, the histogram and every release.
    random_state : None or int, default=None
        As for every mechanism (docs/randomness.md).

    Attributes
    ----------
    selected_ : str
        Name of the chosen candidate.
    selected_mechanism_ : label mechanism
        The chosen candidate, fitted on the noisy prior (it samples).
    predicted_risks_ : dict
        Candidate name -> ``{'bias2', 'variance', 'risk'}`` under ``prior_``.
    n_eff_ : float
        The ``n_eff`` used.
    input_values_, output_values_, transition_matrix_ : ndarray
        Those of the chosen candidate.
    prior_ : ndarray
        The noisy (or public) prior.
    prior_epsilon_ : float
        Epsilon spent on the prior's histogram.
    mean_epsilon_ : float
        Epsilon spent on the noisy mean (0 without one).
    noisy_mean_ : float or None
        The noisy mean of the clipped labels (None without one): a noisy
        value only, unbiased, not clipped.
    noisy_mean_variance_ : float or None
        Its variance, bounded from public quantities (epsilon, n, bounds).
    epsilon_spent_ : float
        Epsilon spent per label so far.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms import AutoRegression
    >>> prior = (np.arange(11.0), np.ones(11))
    >>> AutoRegression(0.05, n_eff=20, prior=prior).fit([0.0]).selected_
    'rr-on-bins'
    >>> AutoRegression(8.0, n_eff=20, prior=prior).fit([0.0]).selected_
    'unbiased'
    """

    _parameter_constraints = {
        **BasePriorMechanism._parameter_constraints,
        "n_eff": [NumberInterval(Real, 1, None, closed="left"), None],
        "candidates": [list, tuple, None],
        "grid_size": [NumberInterval(Integral, 2, None, closed="left"), StrOptions({"auto"})],
        "mean_epsilon": [StrOptions({"auto"}), EpsilonInterval("left"), None],
    }

    def __init__(
        self,
        epsilon: float = 1.0,
        *,
        n_eff: float | None = None,
        candidates: list[str] | tuple[str, ...] | None = None,
        prior: tuple[ArrayLike, ArrayLike] | None = None,
        domain: ArrayLike | None = None,
        bounds: tuple[float, float] | None = None,
        resolution: float | None = None,
        grid_size: int | str = "auto",
        prior_epsilon: float | str = "auto",
        mean_epsilon: float | str | None = None,
        out_of_bounds: str = "raise",
        accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.n_eff = n_eff
        self.candidates = candidates
        self.prior = prior
        self.domain = domain
        self.bounds = bounds
        self.resolution = resolution
        self.grid_size = grid_size
        self.prior_epsilon = prior_epsilon
        self.mean_epsilon = mean_epsilon
        self.out_of_bounds = out_of_bounds

    def _candidate_names(self):
        names = list(DEFAULT_AUTO_CANDIDATES) if self.candidates is None else list(self.candidates)
        unknown = [n for n in names if n not in AUTO_CANDIDATES]
        if not names or unknown:
            raise ValueError(
                f"candidates must be a non-empty list of {sorted(AUTO_CANDIDATES)}; got "
                f"{', '.join(map(repr, unknown)) or 'none'}."
            )
        return names

    def _check_public_inputs(self):
        self._candidate_names()
        if self.bounds is not None:
            # Variances on the range (risks, bin costs, the mean's) must be finite:
            # found past the charges otherwise (a NaN bin cost, an overflow).
            lo, hi = check_bounds(self.bounds, owner="AutoRegression")
            check_squared_span(lo, hi, "AutoRegression")
            if self.mean_epsilon not in (None, 0) and 0 < hi - lo and not math.isfinite(
                    MEAN_UNITS / (hi - lo)):
                # The mean's units per label would overflow: a sum of inf/NaN, after its charge.
                raise ValueError(
                    f"AutoRegression: the label range ({lo:g}, {hi:g}) is too narrow for the "
                    "noisy mean's integer units; rescale the labels or use mean_epsilon=None."
                )

    def _params_for_rows(self, n_rows):
        # A keyed release fits on a placeholder: n_eff's default needs the row
        # count (the release noises the mean itself, from its pass-1 sum).
        return {"n_eff": default_effective_size(n_rows)} if self.n_eff is None else {}

    # -- the noisy mean: a budget of its own, spent first (docs/auto.md) -----------
    def mean_budget(self, n_labels: int) -> float:
        """Epsilon a fit on ``n_labels`` labels spends on the noisy mean.

        Public (``epsilon``, ``n``, the bounds, ``n_eff``, the candidates'
        predicted risks under the public -- or uniform -- prior), so it can
        be read before anything is spent; :meth:`budget_split` shares the
        rest between the histogram and the labels.

        Parameters
        ----------
        n_labels : int
            Number of labels the mechanism will be fitted on.

        Returns
        -------
        float
        """
        epsilon = float(self.epsilon)
        if self.mean_epsilon is None:
            return 0.0
        if isinstance(self.mean_epsilon, str):
            values, probs = self._domain(n_labels=int(n_labels))
            probs = np.full(values.size, 1.0 / values.size) if probs is None else probs
            n_eff = self.n_eff if self.n_eff is not None else default_effective_size(n_labels)
            risks, _ = compare_candidates(values, probs, epsilon, n_eff, self._candidate_names())
            var = prior_variance(values, probs)
            lost = min(r["risk"] for r in risks.values()) / var if risks and var > 0 else 1.0
            # Both shares at least MIN_SHARE_EPSILON (law_epsilon): the rest first
            # (epsilon >= 2 of them), and a smaller mean share is not spent at all.
            eps_mean = min(mean_share_rule(epsilon, int(n_labels), lost) * epsilon,
                           epsilon - MIN_SHARE_EPSILON)
            # The rest is computed as epsilon - eps_mean, which rounds: below
            # MIN_SHARE_EPSILON for a third of the epsilons under 1e-6 (refused).
            while eps_mean > 0 and epsilon - eps_mean < MIN_SHARE_EPSILON:
                eps_mean = math.nextafter(eps_mean, 0.0)
            return eps_mean if eps_mean >= MIN_SHARE_EPSILON else 0.0
        eps_mean = float(self.mean_epsilon)
        if not epsilon - eps_mean >= MIN_SHARE_EPSILON:
            raise ValueError(
                f"AutoRegression: mean_epsilon must be in [0, epsilon={epsilon:g}) and leave the "
                f"labels at least {MIN_SHARE_EPSILON:g} (the smallest budget a sampled law is "
                f"built at); got {eps_mean:g}."
            )
        return eps_mean

    def budget_split(self, n_labels):
        """``(epsilon_1, epsilon_2)`` of the histogram and the labels: the
        rule of :class:`~skdp_label.mechanisms.RROnBins` applied to what
        :meth:`mean_budget` leaves (``epsilon`` minus the mean's)."""
        return self._histogram_split(float(self.epsilon) - self.mean_budget(n_labels), n_labels)

    def _fit_prior(self, y, epsilon=None):
        n_labels = y.shape[0]
        eps_mean = self.mean_budget(n_labels)
        rest = float(self.epsilon) - eps_mean
        self._histogram_split(rest, n_labels)  # refuses a bad prior_epsilon before any charge
        if eps_mean > 0 and y.shape[1] != 1:
            raise ValueError(
                f"AutoRegression: the noisy mean is of one label column; y has {y.shape[1]} "
                "(use mean_epsilon=None)."
            )
        self.mean_epsilon_ = eps_mean
        self.noisy_mean_ = self.noisy_mean_variance_ = None
        if eps_mean > 0:
            self._charge(eps_mean, 0.0, n_labels=n_labels, step="noisy label mean")
            rng = self._release_generator("noisy label mean", n_labels)
            self.noisy_mean_, self.noisy_mean_variance_ = noisy_mean(
                y[:, 0], self._label_range(), eps_mean, rng)
        return super()._fit_prior(y, rest)

    def _law_epsilon(self, epsilon=None):
        # The candidates are mechanisms fitted at the labels' epsilon: each
        # builds its law at its own law_epsilon (the slack taken once, there).
        return float(self.epsilon) if epsilon is None else float(epsilon)

    def _check_unchanged_since_fit(self):
        super()._check_unchanged_since_fit()
        # The chosen candidate samples (_randomize_column): its own parameters
        # and fitted attributes are bound too, not only which object it is.
        selected = vars(self).get("selected_mechanism_")
        if selected is not None:
            try:
                selected._check_unchanged_since_fit()
            except ValueError as exc:
                raise ValueError(f"{type(self).__name__}.selected_mechanism_: {exc}") from None

    def _release_cost(self):
        # The same operations as budget_split's: the ledger adds up to epsilon.
        return float(self.epsilon) - self.mean_epsilon_ - self.prior_epsilon_, 0.0

    def _domain(self, n_labels=None):
        # The candidates are compared on one grid that depends on epsilon and
        # the bounds only (not on n), so keyed releases count on it directly.
        if self.prior is not None or self.domain is not None or self.resolution is not None:
            return super()._domain(n_labels=n_labels)
        owner = f"{type(self).__name__} given no prior and no domain"
        lo, hi = check_bounds(self.bounds, owner=owner)
        if self.grid_size == "auto":
            n = max(auto_grid_size(float(self.epsilon)), _MIN_AUTO_POINTS)
        else:
            n = int(self.grid_size)
        return resolve_domain(np.linspace(lo, hi, n), (lo, hi)), None

    def _build_mechanism(self, values, probs, epsilon):
        n_labels = getattr(self, "_n_labels", 1)
        n_eff = self.n_eff if self.n_eff is not None else default_effective_size(n_labels)
        self.n_eff_ = float(n_eff)
        risks, mechanisms = compare_candidates(
            values, probs, epsilon, self.n_eff_, self._candidate_names()
        )
        if not risks:
            raise RuntimeError("every candidate of mechanism='auto' failed")
        # Near-ties go to the first (simplest) candidate listed.
        least = min(r["risk"] for r in risks.values())
        best = next(n for n in risks if risks[n]["risk"] <= least * (1.0 + _TIE_TOLERANCE))
        chosen = mechanisms[best]
        self.selected_ = best
        self.selected_mechanism_ = chosen
        self.predicted_risks_ = risks
        self.input_values_ = chosen.input_values_
        self.output_values_ = chosen.output_values_
        self.transition_matrix_ = chosen.transition_matrix_

    def _fit_mechanism(self, y):
        self._n_labels = y.shape[0]  # public: the number of rows
        super()._fit_mechanism(y)
        # The chosen candidate's grid (equal to the prior's) is what samples.
        self.input_values_ = self.selected_mechanism_.input_values_

    def _randomize_column(self, y, rng):
        # The chosen mechanism's own label encoding (nearest point for
        # RR-on-Bins, unbiased randomized rounding for the unbiased one) and
        # sampler, with this release's generator.
        return self.selected_mechanism_._randomize_column(y, rng)

    def _selection_summary(self):
        """Public figures of the choice, for privacy_report()."""
        var = prior_variance(self.input_values_, self.prior_)
        out = {"selected": self.selected_, "n_eff": self.n_eff_}
        for name, r in self.predicted_risks_.items():
            ratio = r["risk"] / var if var > 0 else float("nan")
            out[f"{name} predicted risk / prior variance"] = ratio
        return out
