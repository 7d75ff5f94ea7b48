"""The unbiased solver's stages after the direct solve are bounded (issue 13).

The LP fallback and the merge ladder run within time budgets proportional
to the direct solve's time (``_solver._FALLBACK_BUDGET``). A stage cut short
returns the best candidate found before it, made exact like any other, and
the bound certified so far: the mechanism stays exactly epsilon-DP and
unbiased, and the bound stays a lower bound (checked here against the grid
LP of paper 001 and against the uncut solve's mechanism).
"""

import math
import pathlib
import sys
import warnings

import numpy as np
import pytest

from skdp_label.mechanisms.unbiased import _solver, debiased_rr_outputs
from skdp_label.mechanisms.unbiased._solver import (
    check_exact_mechanism,
    mechanism_loss,
    optimal_unbiased_continuous,
)
from _audit import assert_exactly_private
from test_unbiased_certify import _grid_lp_loss

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parents[1] / "benchmarks"))
from bench_unbiased_scaling import SWEEP_EPSILONS, irregular_prior, sweep_case  # noqa: E402


def _rr_loss(y, p, eps):
    """Loss of debiased randomized response (exact for any prior)."""
    k = y.size
    matrix = np.full((k, k), 1.0 / (math.exp(eps) + k - 1))
    np.fill_diagonal(matrix, math.exp(eps) / (math.exp(eps) + k - 1))
    return mechanism_loss(y, p, debiased_rr_outputs(y, eps), matrix)


def _checked_solve(y, p, eps, *, reference=True):
    """Solve; the mechanism is exactly eps-DP and unbiased, the bound below
    its loss and below the grid LP's (another feasible mechanism; with
    ``reference``), the loss not above debiased RR's. Returns
    ``(loss, lower)``."""
    outputs, matrix, lower = optimal_unbiased_continuous(y, p, eps)
    check_exact_mechanism(y, outputs, matrix, eps)  # unbiased, up to float64's floor
    assert_exactly_private(matrix, eps)
    loss = mechanism_loss(y, p, outputs, matrix)
    # A loss is measured up to the roundings of the outputs (z - y changes
    # by delta: the loss by at most 2 delta sqrt(loss)); labels far from zero
    # a hair apart make that the larger term.
    delta = 8.0 * np.finfo(np.float64).eps * float(np.abs(outputs).max())
    slack = float(p @ (y - p @ y) ** 2) * 1e-12 + 4.0 * delta * math.sqrt(loss) + 1e-300
    assert lower <= loss * (1 + 1e-12) + slack
    if reference:
        assert lower <= _grid_lp_loss(y, p, eps) * (1 + 1e-9) + slack
    assert loss <= _rr_loss(y, p, eps) * (1 + 1e-9) + slack
    return loss, lower


def test_hundreds_of_irregular_priors_never_raise_and_are_exact():
    # The scaling benchmark's generator (near-tied, heavy-tailed, integer and
    # clustered labels; zero masses, spikes) at every epsilon of its sweep,
    # up to the cap of 30, at small k: none raises; each mechanism is exact
    # and unbiased, each bound below the grid LP's loss (a reference HiGHS
    # solves at epsilon <= 8; at 15 and above it fails on some of these).
    rng = np.random.default_rng(1313)
    for _ in range(200):
        y, p = irregular_prior(rng, int(rng.integers(3, 10)))
        if y.size < 2:
            continue
        eps = float(rng.choice(SWEEP_EPSILONS))
        _checked_solve(y, p, eps, reference=eps <= 8.0)


def _no_budget(monkeypatch):
    """Every stage after the direct solve out of time from its start; the
    LP calls made after that are recorded (there must be none)."""
    monkeypatch.setattr(_solver, "_FALLBACK_BUDGET", {"lp": 0.0, "merge": 0.0})
    monkeypatch.setattr(_solver, "_MIN_BUDGET", 0.0)
    entered, late_lps = [], []
    fallback, linprog = _solver._fallback_rays, _solver.linprog

    def recorded_fallback(*args, **kwargs):
        entered.append(kwargs.get("deadline"))
        return fallback(*args, **kwargs)

    def recorded_linprog(*args, options=None, **kwargs):
        if entered:
            late_lps.append(options)
        return linprog(*args, options=options, **kwargs)

    monkeypatch.setattr(_solver, "_fallback_rays", recorded_fallback)
    monkeypatch.setattr(_solver, "linprog", recorded_linprog)
    return entered, late_lps


# Sweep priors at small k whose direct solve does not certify: they reach the
# LP fallback (17: heavy-tailed, k = 23, eps 22; 11: clustered, k = 35,
# eps 22) and the merge ladder (31: clustered, k = 21, eps 0.05).
@pytest.mark.parametrize("case", [17, 11, 31])
def test_cut_fallback_gives_an_exact_mechanism_and_a_valid_bound(case, monkeypatch):
    _, y, p, eps = sweep_case(case, (20, 300))
    full_loss, _ = _checked_solve(y, p, eps)
    entered, late_lps = _no_budget(monkeypatch)
    loss, lower = _checked_solve(y, p, eps)
    assert entered and entered[0] is not None  # the fallback ran, with a deadline
    assert not late_lps  # ... and no LP (nor merged solve) after it
    # The best candidate before the fallback: no better than the full solve,
    # and the bound certified by then is below the full solve's loss too.
    assert loss >= full_loss * (1 - 1e-9)
    assert lower <= full_loss * (1 + 1e-12)


def test_lp_out_of_time_is_not_retried(monkeypatch):
    # HiGHS stopped by its time limit (status 1): the LP gives no rays and
    # is not re-run at the looser tolerance (that would take the same time
    # again); a deadline already passed runs no LP at all.
    calls = []

    class OutOfTime:
        status, x = 1, None

    def stopped(*args, options=None, **kwargs):
        calls.append(options)
        return OutOfTime()

    y = np.array([-1.0, 0.0, 1.0])
    p = np.array([0.2, 0.5, 0.3])
    e = math.expm1(1.0)
    cover = np.eye(3, dtype=bool)
    z = debiased_rr_outputs(y, 1.0)
    assert _solver._fixed_output_lp(y, p, e, cover, z) is not None  # solvable
    monkeypatch.setattr(_solver, "linprog", stopped)
    future = _solver.time.perf_counter() + 60.0
    assert _solver._fixed_output_lp(y, p, e, cover, z, deadline=future) is None
    assert len(calls) == 1 and 0 < calls[0]["time_limit"] <= 60.0
    past = _solver.time.perf_counter() - 1.0
    assert _solver._fixed_output_lp(y, p, e, cover, z, deadline=past) is None
    assert len(calls) == 1


def test_stage_deadline_is_proportional_and_capped_by_the_outer_one(monkeypatch):
    monkeypatch.setattr(_solver, "_MIN_BUDGET", 0.5)
    now = _solver.time.perf_counter()
    lp = _solver._stage_deadline(10.0, "lp") - now
    merge = _solver._stage_deadline(10.0, "merge") - now
    assert 10.0 * _solver._FALLBACK_BUDGET["lp"] <= lp < 10.0 * _solver._FALLBACK_BUDGET["lp"] + 1
    assert merge >= 10.0 * _solver._FALLBACK_BUDGET["merge"]
    assert _solver._stage_deadline(1e-4, "lp") - now >= 0.5  # at least the minimum
    assert _solver._stage_deadline(10.0, "lp", outer=now + 1.0) <= now + 1.0


def test_unbiasedness_check_floor_is_float64_rounding_only():
    # Labels far from zero a hair apart (found by the test above: span 2.6e-5
    # at -861.9, epsilon 0.3) were refused as "not unbiased" by 1 rounding
    # of the outputs. The check allows a few roundings of the largest
    # output, no more: a bias of 1e-6 of the span is still caught.
    y = np.array([-861.87583322, -861.87582345, -861.87580761])
    p = np.array([0.86991589, 0.13008411, 0.0])
    outputs, matrix, _ = optimal_unbiased_continuous(y, p, 0.3)
    check_exact_mechanism(y, outputs, matrix, 0.3)
    biased = outputs + 1e-6 * (y[-1] - y[0])
    with pytest.raises(RuntimeError, match="not unbiased"):
        check_exact_mechanism(y, biased, matrix, 0.3)


# -- time budgets only where nothing replays the noise -----------------------------

class _JumpingClock:
    """A ``time`` module whose clock jumps an hour at every read: every
    wall-clock budget is spent at once."""

    def __init__(self):
        self.now = 0.0

    def perf_counter(self):
        self.now += 3600.0
        return self.now


def _fallback_lps(monkeypatch):
    """Count the HiGHS calls made once the LP fallback is entered."""
    entered, lps = [], []
    fallback, linprog = _solver._fallback_rays, _solver.linprog

    def recorded_fallback(*args, **kwargs):
        entered.append(kwargs.get("deadline"))
        return fallback(*args, **kwargs)

    def recorded_linprog(*args, **kwargs):
        if entered:
            lps.append(kwargs.get("options"))
        return linprog(*args, **kwargs)

    monkeypatch.setattr(_solver, "_fallback_rays", recorded_fallback)
    monkeypatch.setattr(_solver, "linprog", recorded_linprog)
    return entered, lps


def test_untimed_solve_does_not_depend_on_the_clock(monkeypatch):
    # Sweep case 17 reaches the LP fallback. With time budgets and a clock
    # that jumps, the fallback runs no LP (cut at once); without them, the
    # solve is the same as on a normal clock.
    _, y, p, eps = sweep_case(17, (20, 300))
    reference = optimal_unbiased_continuous(y, p, eps, time_budgets=False)
    monkeypatch.setattr(_solver, "time", _JumpingClock())
    # Budgets proportional to the (jumping) direct solve's time would grow
    # with the clock: zero budgets make every deadline pass at once.
    monkeypatch.setattr(_solver, "_FALLBACK_BUDGET", {"lp": 0.0, "merge": 0.0})
    monkeypatch.setattr(_solver, "_MIN_BUDGET", 0.0)
    entered, lps = _fallback_lps(monkeypatch)
    untimed = optimal_unbiased_continuous(y, p, eps, time_budgets=False)
    assert entered == [None] and lps  # no deadline, and the LPs ran
    for a, b in zip(reference, untimed):
        np.testing.assert_array_equal(a, b)
    entered.clear(), lps.clear()
    outputs, matrix, _ = optimal_unbiased_continuous(y, p, eps)  # timed
    assert entered and entered[0] is not None and not lps  # cut: the clock decided
    check_exact_mechanism(y, outputs, matrix, eps)  # ... and it is still exact


def _solver_budgets(monkeypatch):
    """The ``time_budgets`` of every continuous unbiased solve from now on."""
    from skdp_label.mechanisms.unbiased import _mechanisms

    seen = []
    solve = _mechanisms.optimal_unbiased_continuous

    def spy(*args, **kwargs):
        seen.append(kwargs.get("time_budgets", True))
        return solve(*args, **kwargs)

    monkeypatch.setattr(_mechanisms, "optimal_unbiased_continuous", spy)
    return seen


@pytest.mark.parametrize("how", ["seeded", "reproducible_fits", "keyed", "unseeded"])
def test_fits_whose_noise_is_replayed_have_no_time_budget(how, monkeypatch):
    # A seeded mechanism and a keyed release replay their noise from a seed or
    # key: a refit that sampled from another distribution (a budget cut by the
    # load) would share noise between two different releases. Their fits are
    # solved without time budgets; a fit with fresh entropy keeps them.
    from skdp_label.mechanisms import OptimalUnbiased
    from skdp_label.release import KeyedRelease, ReleaseKey
    from skdp_label.utils._random import reproducible_fits

    seen = _solver_budgets(monkeypatch)
    values = np.array([0.0, 1.0, 2.5, 4.0])
    prior = (values, np.array([0.4, 0.3, 0.2, 0.1]))
    y = np.array([0.0, 1.0, 2.5, 4.0, 1.0])
    mech = OptimalUnbiased(epsilon=1.0, prior=prior, random_state=0 if how == "seeded" else None)
    if how == "keyed":
        KeyedRelease(mech, ReleaseKey(b"\x05" * 32), "r").fit(y.size)
    elif how == "reproducible_fits":
        with reproducible_fits():
            mech.fit(y)
    else:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the seeded fit's PrivacyLeakWarning
            mech.fit(y)
    assert seen and all(budget == (how == "unseeded") for budget in seen)


def test_a_keyed_releases_budget_split_is_solved_without_time_budgets(monkeypatch):
    # Attack (review): AutoRegression's keyed release computes its budget split
    # (mean_budget compares the candidates, the unbiased solver among them) before
    # the mechanism's fit. A time-cut solve there would move the split, hence the
    # labels' epsilon, between two fits of one release id (charged once, same key
    # streams): every solve of the release's fit must run without budgets.
    from skdp_label.mechanisms import AutoRegression
    from skdp_label.release import ReleaseKey, privatize

    seen = _solver_budgets(monkeypatch)
    y = np.random.default_rng(0).uniform(0.0, 10.0, 300)
    mech = AutoRegression(0.5, bounds=(0.0, 10.0), mean_epsilon="auto")
    _, release = privatize(y, mech, ReleaseKey(b"\x07" * 32), "split")
    assert release.epsilon_split_["mean"] > 0  # the split did compare the candidates
    assert len(seen) >= 3 and not any(seen)
