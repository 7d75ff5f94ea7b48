"""Mechanisms optimised for a prior over a finite public label domain.

RR-on-Bins and the optimal unbiased randomizer both compute a mechanism
from a prior over a finite label domain. The prior is either public
(``prior=(values, probabilities)``, no budget spent) or estimated privately:
a histogram of the labels over the *public* domain plus discrete Laplace
noise of scale ``2 / epsilon_1`` (paper 000, Algorithm 4; a changed label
moves one count out of one bin and into another, so the L1 sensitivity is
2), the rest ``epsilon_2 = epsilon - epsilon_1`` randomizing the labels
(000, Algorithm 3). This module holds that shared machinery.
"""

import math
from abc import abstractmethod
from numbers import Real

import numpy as np
from sklearn.utils._param_validation import StrOptions

from .._kernels._sampling import staircase_noise
from ._base import OUT_OF_BOUNDS_CONSTRAINT, BaseDiscreteMechanism
from ._grid_rule import auto_grid
from ._validation import (
    MIN_SHARE_EPSILON,
    NUMPY_BELOW,
    EpsilonInterval,
    NumberInterval,
    check_bounds,
    law_epsilon,
)
from ..utils._repr import public_repr

__all__ = [
    "BasePriorMechanism",
    "resolve_domain",
    "split_epsilon",
    "sqrt_rule",
    "small_share_rule",
    "noisy_histogram",
    "noisy_histogram_from_counts",
    "noisy_mean",
    "norm_sub",
    "nearest_domain_index",
    "declared_range",
]

# 'auto' never gives the prior more than this share of the budget.
_MAX_PRIOR_SHARE = 0.5


def resolve_domain(domain=None, bounds=None, resolution=None, owner="A mechanism"):
    """The finite public label domain, sorted, from the declared inputs.

    ``domain`` lists the values explicitly; otherwise ``bounds=(lo, hi)``
    with ``resolution`` gives the grid ``lo, lo + resolution, ..., hi``
    (``hi`` included). ``resolution=None`` with bounds means a step of 1
    (integer labels).
    """
    if domain is not None:
        values = np.asarray(domain, dtype=np.float64).ravel()
        if values.size < 1 or not np.all(np.isfinite(values)):
            raise ValueError("domain must be a non-empty list of finite numbers.")
        values = np.unique(values)
        if bounds is not None:
            lo, hi = check_bounds(bounds)
            if values[0] < lo or values[-1] > hi:
                raise ValueError("domain values lie outside the declared bounds.")
        return values
    lo, hi = check_bounds(bounds, owner=f"{owner} given no domain")
    step = 1.0 if resolution is None else float(resolution)
    n_steps = math.floor((hi - lo) / step + 1e-9)
    if n_steps + 1 > 10_000_000:
        raise ValueError(f"bounds / resolution give {n_steps + 1} values; at most 10^7 are supported.")
    values = lo + step * np.arange(n_steps + 1, dtype=np.float64)
    if values[-1] < hi - 1e-9 * step:
        values = np.append(values, hi)
    return values


def declared_range(bounds, domain_values, owner):
    """Public ``(lo, hi)`` the labels must lie in (the ``out_of_bounds`` check).

    The declared bounds when given, else the ends of the declared domain
    (``domain_values()``, called only then); labels between domain values are
    rounded to the domain by the mechanism, labels outside this range are
    the caller's policy (raise or clip).
    """
    if bounds is not None:
        return check_bounds(bounds, owner=owner)
    values = domain_values()
    return float(values[0]), float(values[-1])


def nearest_domain_index(values, y):
    """Index of the domain value nearest to each label (ties go up).

    Labels below or above the domain map to its end points: out-of-domain
    labels are clipped into it, a per-label step that needs no budget.
    """
    if np.ndim(y) == 1 and np.shape(y)[0] >= NUMPY_BELOW and len(values) > 1:
        # Releases: one pass by arithmetic on an evenly spaced grid, else over
        # a bucket table (no binary search, no temporaries); the same indices.
        from .._kernels._background import compiling_elsewhere
        from .._kernels._sampling import _nearest_arithmetic, arithmetic_grid, nearest_indices
        from .bins._sampling import BinLookup

        if arithmetic_grid(values) is not None and compiling_elsewhere(
            _nearest_arithmetic, *_NEAREST_CALL_TYPES
        ):  # a cold cache: the search below while a compiler compiles the kernel
            return nearest_by_search(values, y)
        codes = nearest_indices(values, y)
        return BinLookup(values, np.arange(len(values)))(y) if codes is None else codes
    return nearest_by_search(values, y)


def nearest_grid(values):
    """``values`` if :func:`nearest_domain_index` on them is the nearest
    point of an arithmetic grid (which ``sample_rows(nearest=...)`` finds
    label by label), else None."""
    from .._kernels._sampling import arithmetic_grid

    return values if arithmetic_grid(values) is not None else None


# The types of nearest_indices' kernel call (y, a, 1 / step, step, last, k, codes).
_NEAREST_CALL_TYPES = (np.empty(0), 0.0, 0.0, 0.0, 0.0, 0, np.empty(0, dtype=np.int64))


def nearest_by_search(values, y):
    """:func:`nearest_domain_index` by binary search (numpy only)."""
    idx = np.searchsorted(values, y)
    idx = np.clip(idx, 1, len(values) - 1) if len(values) > 1 else np.zeros_like(idx)
    if len(values) > 1:
        left = values[idx - 1]
        right = values[idx]
        idx = np.where(y - left < right - y, idx - 1, idx)
    return idx.astype(np.int64)


def split_epsilon(epsilon, prior_epsilon, n_labels, domain_size, rule=None):
    """Budget for the prior (epsilon_1) and for the labels (epsilon_2).

    ``'auto'`` applies ``rule(epsilon, n_labels, domain_size)`` (by default
    :func:`sqrt_rule`, 000's). A rule may return 0: no histogram, the public
    uniform prior over the domain.
    """
    if prior_epsilon == "auto":
        eps1 = (rule or sqrt_rule)(epsilon, n_labels, domain_size)
        if eps1 < MIN_SHARE_EPSILON or epsilon - eps1 < MIN_SHARE_EPSILON:
            # A share too small to build a sampled law at (law_epsilon): the rule's
            # no-spend path, the public uniform prior.
            eps1 = 0.0
    else:
        eps1 = float(prior_epsilon)
        if not 0 < eps1 < epsilon:
            raise ValueError(
                f"prior_epsilon must be in (0, epsilon={epsilon:g}) when the prior is "
                f"estimated from the labels; got {public_repr(prior_epsilon)}."
            )
    if epsilon - eps1 < MIN_SHARE_EPSILON:
        raise ValueError(
            f"the labels' share of epsilon, {epsilon - eps1:.3g} (epsilon={epsilon:g} less "
            f"prior_epsilon={eps1:g}), is below {MIN_SHARE_EPSILON:g}, the smallest budget a "
            "sampled law is built at; give the labels a larger share (a smaller prior_epsilon)."
        )
    return eps1, epsilon - eps1


def sqrt_rule(epsilon, n_labels, domain_size):
    """000 (Thm. 7): epsilon_1 = sqrt(|Y| / n), at most half of ``epsilon``."""
    return min(math.sqrt(domain_size / n_labels), _MAX_PRIOR_SHARE * epsilon)


# The unbiased randomizer's prior gets at most this share of the budget.
_SMALL_PRIOR_SHARE = 0.1


def small_share_rule(epsilon, n_labels, domain_size):
    """For mechanisms whose noise depends little on the prior (the unbiased
    randomizer): ``min(sqrt(|Y| / n), epsilon / 10)``, and 0 (the public
    uniform prior, nothing spent) when that buys a histogram whose noise
    exceeds the mean count per value: discrete Laplace of scale
    ``2 / epsilon_1`` has standard deviation about ``2 sqrt(2) / epsilon_1``,
    against ``n / |Y|`` labels per value (docs/auto.md, measured in
    ``benchmarks/bench_prior_share.py``).
    """
    eps1 = min(math.sqrt(domain_size / n_labels), _SMALL_PRIOR_SHARE * epsilon)
    return eps1 if eps1 * n_labels >= 2.0 * math.sqrt(2.0) * domain_size else 0.0


def noisy_histogram(codes, n_bins, epsilon, rng):
    """epsilon-DP normalised histogram over a public domain (000, Alg. 4).

    Counts get integer (discrete Laplace) noise of scale 2 / epsilon, so no
    floating-point artifact exists to leak; negative counts become 0, and an
    all-zero histogram (possible at tiny n) becomes uniform.
    """
    return noisy_histogram_from_counts(np.bincount(codes, minlength=n_bins), epsilon, rng)


def noisy_histogram_from_counts(counts, epsilon, rng):
    """:func:`noisy_histogram` of exact counts (e.g. summed over batches)."""
    counts = np.asarray(counts, dtype=np.float64)
    n_bins = counts.shape[0]
    # A changed label moves two counts, each drawn within 1 +- SAMPLER_RTOL of
    # its law: the law is built at epsilon less twice the samplers' slack.
    rate = law_epsilon(epsilon, draws=2, what="the noisy histogram's epsilon") / 2.0
    noise = staircase_noise(rng, rate, 1, 1, size=n_bins)
    noisy = norm_sub(counts + noise)
    total = noisy.sum()
    if total <= 0:
        return np.full(n_bins, 1.0 / n_bins)
    return noisy / total


#: Resolution of :func:`noisy_mean`'s integer sum: labels are rounded to
#: ``MEAN_UNITS`` steps over the public range (a step is 1.5e-5 of the range).
MEAN_UNITS = 2**16


def noisy_mean(y, bounds, epsilon, rng):
    """epsilon-DP mean of labels clipped to the public ``bounds``, and its variance.

    Each label is clipped to ``[lo, hi]`` and rounded to one of ``MEAN_UNITS``
    steps over that range *at random* (up with probability equal to its
    fractional part: the rounded value's expectation is the label), so the
    sum ``S`` is an integer that one changed label moves by at most
    ``MEAN_UNITS``; discrete Laplace noise of rate ``epsilon / MEAN_UNITS``
    (the library's exact integer sampler, no floating-point artifact)
    makes ``S`` epsilon-DP. The mean ``lo + (hi - lo) (S + Z) / (MEAN_UNITS n)``
    is unbiased for the clipped labels' mean (``n`` is public in label DP:
    the features party knows the rows). Its variance is bounded from public
    quantities only: the noise's exact variance ``1 / (2 sinh^2(rate / 2))``
    plus at most ``n / 4`` from the rounding, in units of ``(hi - lo) /
    (MEAN_UNITS n)``.

    Parameters
    ----------
    y : ndarray of shape (n,)
    bounds : tuple (lo, hi)
        Public label range.
    epsilon : float > 0
        Charged by the caller before this is called.
    rng : numpy.random.Generator
        This release's generator (not kept).

    Returns
    -------
    mean, variance : float
        The noisy mean (not clipped: clipping would bias it) and the public
        bound on its variance.
    """
    n = int(np.size(y))
    return noisy_mean_from_sum(rounded_label_sum(y, bounds, rng.random(n)), n, bounds,
                               epsilon, rng)


def rounded_label_sum(y, bounds, u):
    """The integer sum :func:`noisy_mean` noises: each label clipped to the
    public ``bounds`` and rounded at random to one of ``MEAN_UNITS`` steps
    over them (up when its uniform in ``u`` is below its fractional part).
    Sums of batches add up (a keyed release draws ``u`` from each row's
    own stream, so batch boundaries do not matter). Exact: never released."""
    lo, hi = float(bounds[0]), float(bounds[1])
    scaled = (np.clip(np.asarray(y, dtype=np.float64).ravel(), lo, hi) - lo) * (
        MEAN_UNITS / (hi - lo) if hi > lo else 0.0)
    floor = np.floor(scaled)
    return int((floor + (np.asarray(u) < scaled - floor)).astype(np.int64).sum())


def noisy_mean_from_sum(total, n, bounds, epsilon, rng):
    """:func:`noisy_mean` of ``n`` labels whose :func:`rounded_label_sum` is
    ``total``: discrete Laplace noise of rate ``epsilon / MEAN_UNITS`` drawn
    from ``rng``; returns ``(mean, variance bound)``."""
    lo, hi = float(bounds[0]), float(bounds[1])
    n = int(n)
    epsilon = law_epsilon(epsilon, what="the noisy mean's epsilon")  # the law's (docs/sampling.md)
    noise = staircase_noise(rng, epsilon / MEAN_UNITS, 1, 1, size=1)
    total = float(total) + float(noise[0])
    unit = (hi - lo) / (MEAN_UNITS * n)
    # numpy floats: a span near the float64 limit gives an infinite variance
    # bound (the mean then gets no weight), never an OverflowError after the charge.
    with np.errstate(over="ignore"):
        variance = np.float64(unit) ** 2 * (mean_noise_variance(epsilon) + n / 4.0)
    return lo + unit * total, float(variance)


def mean_noise_variance(epsilon):
    """Variance of :func:`noisy_mean`'s integer noise (discrete Laplace of
    rate ``epsilon / MEAN_UNITS``): ``1 / (2 sinh^2(rate / 2))``, about
    ``2 (MEAN_UNITS / epsilon)^2``."""
    return 0.5 / math.sinh(0.5 * epsilon / MEAN_UNITS) ** 2


def norm_sub(noisy_counts):
    """Non-negative counts with the noisy total: ``max(c - delta, 0)``.

    Clipping negative noisy counts at 0 alone inflates every empty value by
    about half the noise scale, which on a sparse histogram (a heavy-tailed
    label over a wide grid, a small epsilon) moves much of the prior's mass
    onto values no label has. Subtracting the one ``delta >= 0`` that brings
    the clipped total back to the noisy total (an unbiased estimate of
    ``n``) removes that mass ("norm-sub", Wang et al. 2020); where every
    noisy count is positive, ``delta = 0``. A post-processing of the noisy
    counts: free.
    """
    target = noisy_counts.sum()
    clipped = np.maximum(noisy_counts, 0.0)
    if target <= 0 or clipped.sum() <= target:
        return clipped
    # Water-filling on the sorted positive counts: the largest r values
    # stay, each reduced by delta = (sum of them - target) / r.
    top = np.sort(clipped[clipped > 0])[::-1]
    deltas = (np.cumsum(top) - target) / np.arange(1, top.size + 1)
    r = int(np.nonzero(top > deltas)[0][-1])
    return np.maximum(noisy_counts - max(deltas[r], 0.0), 0.0)


class BasePriorMechanism(BaseDiscreteMechanism):
    """Base of mechanisms computed from a prior over a finite label domain.

    Subclasses implement :meth:`_build_mechanism`, which receives the prior
    (values and probabilities, public or noisy) and the epsilon left for
    randomizing labels, and sets ``output_values_`` and
    ``transition_matrix_`` (plus any attributes of its own).

    Fitted attributes set here: ``input_values_`` (the domain),
    ``prior_`` (probabilities aligned with ``input_values_``),
    ``prior_epsilon_`` (0 for a public prior), ``epsilon_spent_``.

    Subclasses that set ``_grid_family`` accept ``resolution='auto'``: the
    grid over ``bounds`` then comes from
    :func:`~skdp_label.mechanisms.auto_grid_points` (public
    bounds, epsilon and, for a private prior, the number of labels).
    """

    #: Family of the ``resolution='auto'`` rule (docs/grid.md); None: no 'auto'.
    _grid_family = None

    _parameter_constraints = {
        **BaseDiscreteMechanism._parameter_constraints,
        "prior": [tuple, list, None],
        "domain": ["array-like", None],
        "bounds": [tuple, list, None],
        "resolution": [NumberInterval(Real, 0, None, closed="neither"), None],
        "prior_epsilon": [StrOptions({"auto"}), EpsilonInterval()],
        "out_of_bounds": OUT_OF_BOUNDS_CONSTRAINT,
    }

    @abstractmethod
    def _build_mechanism(self, prior_values, prior_probabilities, epsilon):
        """Set ``output_values_`` and ``transition_matrix_`` for ``epsilon``."""

    def _auto_grid(self):
        """Whether the grid comes from the ``'auto'`` rule (no prior, no domain)."""
        return (
            self._grid_family is not None and self.prior is None and self.domain is None
            and isinstance(self.resolution, str) and self.resolution == "auto"
        )

    def _grid_depends_on_n(self):
        """Whether the grid depends on the number of labels (an 'auto' grid
        whose size is capped by what the private prior resolves)."""
        return self.prior is None and self._auto_grid()

    def _domain(self, n_labels=None):
        """(values, public probabilities or None).

        ``n_labels`` is the public number of labels the private prior will be
        estimated from; an ``'auto'`` grid is capped by it (``None``: no cap,
        the grid for unlimited labels -- same end points).
        """
        if self.prior is not None:
            try:
                values, probs = self.prior
            except (TypeError, ValueError):
                raise ValueError("prior must be a pair (values, probabilities).") from None
            values = np.asarray(values, dtype=np.float64).ravel()
            probs = np.asarray(probs, dtype=np.float64).ravel()
            if values.shape != probs.shape or values.size == 0:
                raise ValueError("prior values and probabilities must have the same length.")
            if not (np.all(np.isfinite(values)) and np.all(np.isfinite(probs))):
                raise ValueError("prior values and probabilities must be finite.")
            if np.any(probs < 0) or probs.sum() <= 0:
                raise ValueError("prior probabilities must be non-negative with a positive sum.")
            if np.unique(values).size != values.size:
                raise ValueError("prior values must be distinct.")
            order = np.argsort(values)
            return values[order], probs[order] / probs.sum()
        if self._auto_grid():
            owner = type(self).__name__
            grid = auto_grid(
                self.bounds, self._grid_family, float(self.epsilon), n_labels, self.prior_epsilon,
                owner,
            )
            return grid, None
        return resolve_domain(
            self.domain, self.bounds, self.resolution, owner=f"{type(self).__name__} given no prior and"
        ), None

    def _label_range(self):
        return declared_range(self.bounds, lambda: self._domain()[0], type(self).__name__)

    def _encode_labels(self, y):
        return nearest_domain_index(self.input_values_, y)

    def _histogram_codes(self, y, rng, values):
        """Index in the domain ``values`` of each label, for the noisy histogram."""
        return nearest_domain_index(values, y)

    #: ``prior_epsilon='auto'``'s rule ``(epsilon, n, |Y|) -> epsilon_1``.
    _prior_epsilon_rule = staticmethod(sqrt_rule)

    def budget_split(self, n_labels):
        """``(epsilon_1, epsilon_2)`` a fit on ``n_labels`` labels will spend.

        Public (``epsilon``, ``n``, the declared domain, ``prior_epsilon``),
        so it can be read before anything is spent: ``epsilon_1`` buys the
        noisy label histogram (0 for a public prior, or when the rule chooses
        the uniform prior), ``epsilon_2`` randomizes the labels.

        Parameters
        ----------
        n_labels : int
            Number of labels (rows) the mechanism will be fitted on.

        Returns
        -------
        epsilon_1, epsilon_2 : float
        """
        return self._histogram_split(float(self.epsilon), n_labels)

    def _histogram_split(self, epsilon, n_labels):
        """:meth:`budget_split` of a budget ``epsilon`` (a subclass may
        spend part of its ``epsilon`` on something else first)."""
        values, public_probs = self._domain(n_labels=int(n_labels))
        if public_probs is not None:
            return 0.0, epsilon
        return split_epsilon(
            epsilon, self.prior_epsilon, int(n_labels), values.size, self._prior_epsilon_rule
        )

    def _total_cost(self):
        return float(self.epsilon), 0.0

    def _release_cost(self):
        return float(self.epsilon) - self.prior_epsilon_, 0.0

    #: Smallest budget the labels' randomizer is computed for (a solver may
    #: need more than the library's floor on epsilon).
    _min_labels_epsilon = 0.0

    def _check_labels_epsilon(self, eps_labels):
        if eps_labels < self._min_labels_epsilon:
            raise ValueError(
                f"{type(self).__name__}: the labels would get epsilon {eps_labels:.3g} (after the "
                f"prior's share), below the {self._min_labels_epsilon:g} this mechanism is "
                "computed for; give the labels more of the budget (a smaller prior_epsilon)."
            )

    def _fit_prior(self, y, epsilon=None):
        """(domain values, prior probabilities, epsilon left for the labels).

        A public prior is free; otherwise epsilon_1 is charged, then the noisy
        histogram is drawn from a generator of its own. ``epsilon``: the
        budget of prior and labels (default: all of ``self.epsilon``).
        """
        epsilon = float(self.epsilon) if epsilon is None else epsilon
        values, public_probs = self._domain(n_labels=y.shape[0])
        if public_probs is not None:
            self._check_labels_epsilon(epsilon)
            self.prior_epsilon_ = 0.0
            return values, public_probs, epsilon
        eps1, eps_labels = split_epsilon(
            epsilon, self.prior_epsilon, y.shape[0], values.size, self._prior_epsilon_rule
        )
        self._check_labels_epsilon(eps_labels)  # before the histogram is charged
        self.prior_epsilon_ = eps1
        if eps1 == 0.0:  # the rule chose the public uniform prior: nothing spent
            return values, np.full(values.size, 1.0 / values.size), eps_labels
        n_columns = y.shape[1]
        # Every column's histogram is a release of that column's labels.
        self._charge(eps1 * n_columns, 0.0, n_labels=y.shape[0], step="noisy label histogram")
        rng = self._release_generator("noisy label histogram", y.shape[0])
        codes = self._histogram_codes(y.ravel(), rng, values)
        # Pooled over columns: one row changes at most n_columns labels, each
        # costing eps1, which is what was charged above.
        return values, noisy_histogram(codes, values.size, eps1, rng), eps_labels

    def _fit_mechanism(self, y):
        values, self.prior_, eps_labels = self._fit_prior(y)
        self.input_values_ = values
        self._build_mechanism(values, self.prior_, self._law_epsilon(eps_labels))
