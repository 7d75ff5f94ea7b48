"""The default output grid of grid-based mechanisms (``resolution='auto'``).

A grid of ``k`` evenly spaced points over the public bounds, ``k`` chosen
from public inputs only -- the bounds' span, ``epsilon`` and the number of
labels ``n`` -- never from label values. The derivation is in docs/grid.md:

* rounding: a step ``D`` adds at most ``D^2 / 4`` to each label's error
  (unbiased randomized rounding: variance; nearest rounding: squared bias).
  ``k`` is the fewest points keeping ``D^2 / 4`` below a share ``rho`` of a
  reference loss of the mechanism at ``epsilon`` (for the unbiased family a
  proven lower bound on every unbiased epsilon-DP randomizer, any prior);
* debiased RR, whose own variance grows with ``k``, takes the ``k``
  minimising its exact mean squared error (rounding included) on labels
  spread evenly over the bounds;
* private prior: a noisy histogram over ``k`` bins from ``n`` labels at
  ``epsilon_1`` has per-bin noise of standard deviation ``2 sqrt(2) /
  epsilon_1`` against ``n / k`` labels a bin: ``k`` is capped where the two
  meet (more bins only add noise and, with ``prior_epsilon='auto'``, take
  budget from the labels);
* the exponential mechanism, whose outputs are the grid, keeps at least
  101 points (its discrete outputs over-weight the end points);
* a cap per family keeps the fit well under a second at any bounds.
"""

from __future__ import annotations

import math
from functools import lru_cache

import numpy as np

from ._validation import check_bounds

__all__ = [
    "GRID_FAMILIES",
    "auto_grid",
    "auto_grid_points",
    "noise_points",
    "prior_points",
    "reference_loss",
    "debiased_rr_mse",
]

#: Share of the reference loss that rounding may add, per family.
ROUNDING_SHARE = {"unbiased": 0.01, "bins": 0.0025, "exponential": 0.01}
#: Most grid points the rule gives: fit time (one core, shared machine, 2026-11):
#: OptimalUnbiased 0.5-1.2 s at k = 101 (2-5 s at 201), RR-on-Bins 0.04 s at 2001,
#: the exponential mechanism 0.03 s at 401, debiased RR ~1 ms at 1001.
MAX_POINTS = {"unbiased": 101, "debiased-rr": 1001, "bins": 2001, "exponential": 401}
GRID_FAMILIES = tuple(MAX_POINTS)
MIN_POINTS = 2
#: Fewest points of a family whose outputs are the grid itself: the exponential
#: mechanism's discrete outputs over-weight the two end points, which adds about
#: 0.9 / k to its mean squared error on labels spread over the bounds (measured
#: exactly for eps <= 4, docs/grid.md); 101 points keep that under 1%.
MIN_OUTPUT_POINTS = {"exponential": 101}


def reference_loss(family, epsilon):
    """Reference loss of a family at ``epsilon``, in units of ``(hi - lo)^2``.

    * ``'unbiased'``: ``1 / (16 sinh^2(eps / 2))``, a lower bound on
      ``E (y_hat - y)^2`` of every unbiased epsilon-DP randomizer, for any
      prior (docs/grid.md).
    * ``'bins'``: the loss of RR on ``m`` equal bins for labels spread
      evenly over the bounds, at the best ``m``.
    * ``'exponential'``: ``E (o - y)^2`` of the continuous exponential
      mechanism at its largest inverse temperature ``eps / (hi - lo)`` for
      the label at the centre, where it is smallest.
    """
    eps = float(epsilon)
    if family == "unbiased":
        return 1.0 / (16.0 * math.sinh(eps / 2.0) ** 2)
    if family == "bins":
        return _equal_bins_loss(eps)
    if family == "exponential":
        a = 0.5 * eps  # beta * half span
        if a < 1e-4:
            return 1.0 / 12.0
        # E u^2 for u on [-1/2, 1/2] with density ~ exp(-eps |u|), a = eps / 2.
        num = 2.0 - math.exp(-a) * (a * a + 2.0 * a + 2.0)
        return num / (-math.expm1(-a)) / (eps * eps)
    raise ValueError(f"unknown grid family {family!r}.")


@lru_cache(maxsize=256)
def _equal_bins_loss(epsilon):
    # RR over m equal bins of [0, 1], outputs at the bin centres, uniform
    # labels: within-bin 1/(12 m^2); a flip to bin j costs (c_j - y)^2, whose
    # mean over i != j is ((m^2 - 1)/(6m) + (m - 1)/(12 m^2)) / (m - 1).
    m = np.arange(1, 400_001, dtype=np.float64)
    flips = (m * m - 1.0) / (6.0 * m) + (m - 1.0) / (12.0 * m * m)
    loss = 1.0 / (12.0 * m * m) + flips / (math.exp(min(epsilon, 700.0)) + m - 1.0)
    return float(loss.min())


def noise_points(family, epsilon):
    """Fewest points with ``D^2 / 4 <= rho * reference_loss`` (``D`` = step / span)."""
    rho = ROUNDING_SHARE[family]
    steps = 1.0 / (2.0 * math.sqrt(rho * reference_loss(family, epsilon)))
    return int(math.ceil(steps * (1.0 - 1e-12))) + 1


def debiased_rr_mse(k, epsilon):
    """Exact mean squared error of debiased RR on ``k`` grid points, units of span^2.

    Labels uniform on the bounds, unbiasedly rounded onto the grid (mean
    rounding variance ``D^2 / 6``), then k-ary RR and the debiasing map
    ``Phi`` (001 Def. 23). ``k`` may be an array.
    """
    k = np.asarray(k, dtype=np.float64)
    e = math.exp(min(float(epsilon), 700.0))
    em1 = math.expm1(float(epsilon))
    total = e + k - 1.0
    a2 = (total / em1) ** 2
    # Grid g_i = i / (k - 1); rounded uniform labels put 1/(2(k-1)) on each end, 1/(k-1) inside.
    s1 = k / 2.0
    s2 = k * (2.0 * k - 1.0) / (6.0 * (k - 1.0))
    # E over the rounded label g of Var(g_J | g) = E g_J^2 - (E g_J)^2, with
    # E g_J = ((e - 1) g + s1) / total and E g_J^2 = ((e - 1) g^2 + s2) / total;
    # the rounded label has mean 1/2 and E g^2 = 1/3 + 1/(6 (k - 1)^2).
    m1, m2 = 0.5, 1.0 / 3.0 + 1.0 / (6.0 * (k - 1.0) ** 2)
    e_sq = ((e - 1.0) * m2 + s2) / total
    sq_mean = ((e - 1.0) ** 2 * m2 + 2.0 * (e - 1.0) * s1 * m1 + s1 * s1) / total**2
    return a2 * (e_sq - sq_mean) + 1.0 / (6.0 * (k - 1.0) ** 2)


@lru_cache(maxsize=256)
def _debiased_rr_points(epsilon):
    k = np.arange(2, MAX_POINTS["debiased-rr"] + 1)
    return int(k[np.argmin(debiased_rr_mse(k, epsilon))])


def prior_points(n_labels, epsilon, prior_epsilon="auto"):
    """Most bins a private prior of ``n_labels`` labels resolves.

    Per-bin noise ``2 sqrt(2) / epsilon_1`` (discrete Laplace of scale
    ``2 / epsilon_1``) at most the mean count ``n / k``: ``k <= n epsilon_1 /
    (2 sqrt(2))``; with ``prior_epsilon='auto'`` (``epsilon_1 = min(sqrt(k /
    n), epsilon / 2)``) that is ``k <= min(n / 8, n epsilon / (4 sqrt(2)))``.
    """
    n = float(n_labels)
    if prior_epsilon == "auto":
        bound = n * min(1.0 / 8.0, float(epsilon) / (4.0 * math.sqrt(2.0)))
    else:
        bound = n * float(prior_epsilon) / (2.0 * math.sqrt(2.0))
    return int(math.floor(bound * (1.0 + 1e-12)))


def auto_grid_points(
    family: str, epsilon: float, n_labels: int | None = None, prior_epsilon: float | str = "auto",
) -> int:
    """Number of grid points ``resolution='auto'`` gives (docs/grid.md).

    Parameters
    ----------
    family : {'unbiased', 'debiased-rr', 'bins', 'exponential'}
        ``OptimalUnbiased``, ``DebiasedRR``, ``RROnBins``,
        ``ExponentialMechanism``.
    epsilon : float
        The mechanism's total epsilon.
    n_labels : int, optional
        Number of labels the private prior is estimated from (a public
        count); ``None`` when there is no private prior.
    prior_epsilon : 'auto' or float, default='auto'
        The mechanism's ``prior_epsilon``.

    Returns
    -------
    k : int
        Between 2 and ``MAX_POINTS[family]``.

    Examples
    --------
    >>> from skdp_label.mechanisms import auto_grid_points
    >>> auto_grid_points("unbiased", 1.0), auto_grid_points("unbiased", 1.0, n_labels=40)
    (12, 5)
    """
    if family == "debiased-rr":
        k = _debiased_rr_points(float(epsilon))
    else:
        k = max(noise_points(family, epsilon), MIN_OUTPUT_POINTS.get(family, MIN_POINTS))
        k = min(k, MAX_POINTS[family])
    if n_labels is not None:
        k = min(k, prior_points(n_labels, epsilon, prior_epsilon))
    return max(int(k), MIN_POINTS)


def auto_grid(bounds, family, epsilon, n_labels=None, prior_epsilon="auto", owner="A mechanism"):
    """The ``resolution='auto'`` grid: :func:`auto_grid_points` points over ``bounds``."""
    lo, hi = check_bounds(bounds, owner=f"{owner} with resolution='auto'")
    return np.linspace(lo, hi, auto_grid_points(family, epsilon, n_labels, prior_epsilon))
