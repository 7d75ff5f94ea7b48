"""The unbiased solver's working-set path (issue 13): coarse-to-fine rays,
column generation over all intervals, sparse differenced Newton systems.

Above ``_FULL_PATTERNS_MAX`` labels the interior point runs on a working set
of interval rays instead of all ``k (k + 1) / 2``; here that threshold is
lowered so that the path is checked at small ``k`` against the all-patterns
solver, 001's grid LP (HiGHS) and brute-force pricing.
"""

import math

import numpy as np
import pytest
from scipy import sparse

from skdp_label.mechanisms.unbiased import _solver
from skdp_label.mechanisms.unbiased._solver import (
    _differenced_cover,
    _min_norm_repair,
    _min_norm_repair_dense,
    _Patterns,
    _violated_intervals,
    check_exact_mechanism,
    mechanism_loss,
    optimal_unbiased_continuous,
)
from test_unbiased import _irregular_prior, _solve_and_check, random_prior, reference_grid_lp


def _solve(y, p, eps):
    outputs, matrix, lower = optimal_unbiased_continuous(y, p, eps)
    check_exact_mechanism(y, outputs, matrix, eps)
    return mechanism_loss(y, p, outputs, matrix), lower


@pytest.fixture
def working_set(monkeypatch):
    """Force the working-set path from 3 labels on."""
    monkeypatch.setattr(_solver, "_FULL_PATTERNS_MAX", 2)


@pytest.mark.parametrize("seed", range(6))
def test_working_set_matches_all_patterns_within_certified_gap(seed, monkeypatch):
    rng = np.random.default_rng(seed)
    k = int(rng.integers(10, 40))
    eps = float(rng.choice([0.3, 1.0, 3.0]))
    y, p = random_prior(rng, k, zeros=seed % 2 == 1)
    loss_all, lower_all = _solve(y, p, eps)
    monkeypatch.setattr(_solver, "_FULL_PATTERNS_MAX", 2)
    loss_ws, lower_ws = _solve(y, p, eps)
    # Each bound is valid for every mechanism, hence for the other's too;
    # both solutions are certified to 1e-9 here, so the losses agree.
    assert lower_ws <= loss_all * (1 + 1e-12)
    assert lower_all <= loss_ws * (1 + 1e-12)
    assert loss_ws - lower_ws <= 1e-9 * loss_ws
    assert loss_ws == pytest.approx(loss_all, rel=2e-9)


@pytest.mark.parametrize("k, eps, seed", [(5, 1.0, 0), (6, 0.5, 1), (5, 3.0, 2)])
def test_working_set_beats_grid_lp(k, eps, seed, working_set):
    # 001's LP on its feasible grid (HiGHS, dense reference): the continuous
    # optimum is never worse, and the certified bound is below both.
    rng = np.random.default_rng(seed)
    y, p = random_prior(rng, k, zeros=seed == 1)
    loss, lower = _solve(y, p, eps)
    lp = reference_grid_lp(y, p, _solver.feasible_output_set(y, eps, 40), eps)
    assert loss <= lp * (1 + 1e-9)
    assert lower <= loss * (1 + 1e-12)
    assert loss - lower <= 1e-9 * loss


def test_many_irregular_priors_on_the_working_set(working_set):
    # The irregular-prior sweep of test_unbiased (its first 40 priors, for
    # time) on the working-set path: exact, never worse than debiased RR,
    # valid bound (_solve_and_check), >= 90 % certified.
    rng = np.random.default_rng(2026)
    certified, n = 0, 40
    for _ in range(n):
        y, p = _irregular_prior(rng, int(rng.integers(3, 10)))
        loss, lower = _solve_and_check(y, p, float(rng.choice([0.05, 0.3, 1.0, 3.0, 8.0])))
        certified += loss - lower <= 1e-6 * loss
    assert certified >= 0.9 * n


@pytest.mark.parametrize("shape", ["uniform", "spiky", "irregular"])
def test_moderate_k_is_certified(shape):
    # k = 300 runs the real working-set path (default threshold).
    rng = np.random.default_rng(7)
    k = 300
    y = np.arange(k, dtype=float)
    if shape == "uniform":
        p = np.full(k, 1.0 / k)
    elif shape == "spiky":
        p = rng.gamma(0.3, size=k)
        p[[0, 100, 299]] += 0.2
        p /= p.sum()
    else:
        y, p = _irregular_prior(rng, k)
    loss, lower = _solve(y, p, 1.0)
    assert lower <= loss * (1 + 1e-12)
    assert loss - lower <= 1e-6 * loss


def test_pricing_finds_every_violated_interval():
    # Brute force: reduced costs of all intervals from _Patterns.
    rng = np.random.default_rng(3)
    k = 25
    y, p = random_prior(rng, k, zeros=True)
    e = math.expm1(1.0)
    u = rng.normal(size=k)
    w = rng.normal(size=k)
    red, _ = _Patterns(y, p, e).reduced(u, w)
    red = np.where(np.triu(np.ones((k, k), dtype=bool)), red, np.inf)
    threshold = float(np.quantile(red[np.isfinite(red)], 0.3))
    ls, rs, lowest = _violated_intervals(y, p, e, u, w, threshold, chunk=4 * k)  # 4 chunks
    assert lowest == pytest.approx(red.min(), rel=1e-12)
    got = set(zip(ls.tolist(), rs.tolist()))
    best_per_l = {(l, int(red[l].argmin())) for l in range(k) if red[l].min() < threshold}
    best_per_r = {(int(red[:, r].argmin()), r) for r in range(k) if red[:, r].min() < threshold}
    assert got == best_per_l | best_per_r
    assert all(red[l, r] < threshold for l, r in got)


def _poor_start(monkeypatch):
    """A prior solved on the full patterns, then the working-set path forced
    with a mutated coarse-to-fine start: only the singleton rays (debiased
    RR's support)."""
    rng = np.random.default_rng(11)
    y, p = random_prior(rng, 30)
    loss_all, _ = _solve(y, p, 1.0)
    monkeypatch.setattr(_solver, "_FULL_PATTERNS_MAX", 2)
    monkeypatch.setattr(_solver, "_initial_rays",
                        lambda y, p, e, **kw: (np.arange(y.size), np.arange(y.size)))
    return y, p, loss_all


def test_column_generation_recovers_from_a_poor_working_set(monkeypatch):
    y, p, loss_all = _poor_start(monkeypatch)
    loss, lower = _solve(y, p, 1.0)
    assert loss == pytest.approx(loss_all, rel=2e-9)
    assert loss - lower <= 1e-9 * loss


def test_without_column_generation_the_bound_stays_valid(monkeypatch):
    # The same poor start with pricing disabled (a broken solver): the
    # certificate (exact pricing over all staircase patterns) must stay a
    # valid bound, and the result exact and no better than the optimum.
    y, p, loss_all = _poor_start(monkeypatch)
    monkeypatch.setattr(_solver, "_violated_intervals",
                        lambda y, *a, **kw: (np.zeros(0, int), np.zeros(0, int), 0.0))
    loss, lower = _solve(y, p, 1.0)
    assert lower <= loss_all * (1 + 1e-12)
    assert loss >= loss_all * (1 - 1e-9)


def test_sparse_min_norm_repair_equals_dense(monkeypatch):
    rng = np.random.default_rng(5)
    k, m = 12, 30
    cover = np.zeros((k, m), dtype=bool)
    for j in range(m):
        lo = int(rng.integers(k))
        cover[lo : int(rng.integers(lo, k)) + 1, j] = True
    e = math.expm1(2.0)
    y = np.sort(rng.normal(size=k))
    t = rng.uniform(0.01, 0.1, size=m)
    s = t * rng.normal(size=m)
    a = 1.0 + e * cover
    monkeypatch.setattr(_solver, "_DENSE_MAX", 0)  # the sparse path
    t_s, s_s = _min_norm_repair(cover, e, y, t, s)
    t_d, s_d = _min_norm_repair_dense(a, y, t, s)
    np.testing.assert_allclose(t_s, t_d, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(s_s, s_d, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(a @ t_s, 1.0, atol=1e-13)
    np.testing.assert_allclose(a @ s_s, y, atol=1e-12)
    # The differenced rays are L a: cumulative sums give a back.
    np.testing.assert_allclose(np.cumsum(_differenced_cover(cover, e).toarray(), axis=0), a)
    assert sparse.issparse(_differenced_cover(cover, e))


@pytest.mark.parametrize("eps", [1e-3, 15.0, 25.0, 30.0])
@pytest.mark.parametrize("k", [151, 200])
def test_working_set_at_extreme_epsilon(k, eps):
    """At a large epsilon the coarse problem's support can fall below the
    keep threshold: the working set still starts non-empty and feasible (a
    review found ZeroDivisionError at k = 151..200, eps >= 25). At eps = 1e-3
    the fixed-output LP finish runs; HiGHS's presolve aborted the process
    there (heap corruption), so it runs without presolve."""
    y = np.linspace(0.0, 10.0, k)
    for p in (np.full(k, 1.0 / k), np.eye(k)[k // 3] * 0.9 + 0.1 / k):
        outputs, matrix, lower = optimal_unbiased_continuous(y, p, eps)
        check_exact_mechanism(y, outputs, matrix, eps)


def _clustered_prior(seed, k=24):
    """Labels in three tight clusters (gaps of 1e-3 inside a cluster, 1 to 3
    between clusters), gamma masses with some zeros: many rays priced in
    per column-generation round on the working set."""
    rng = np.random.default_rng(seed)
    centers = np.array([0.0, 1.0, 4.0])
    y = np.unique(centers[rng.integers(3, size=k)] + rng.uniform(0.0, 1e-3, size=k) * 10)
    p = rng.gamma(0.5, size=y.size)
    p[rng.random(y.size) < 0.2] = 0.0
    p[0] += 1e-3
    return y, p / p.sum()


def _count_warm_starts(monkeypatch):
    used = []
    warm = _solver._warm_start

    def spy(*args):
        out = warm(*args)
        used.append(out is not None)
        return out

    monkeypatch.setattr(_solver, "_warm_start", spy)
    return used


# Priors whose column generation needs a round after the coarse-to-fine
# start on the working-set path (most need none).
_RESUMED = [(2, 24, 1.0), (3, 60, 3.0)]


@pytest.mark.parametrize("seed, k, eps", _RESUMED)
def test_warm_start_matches_cold_start(seed, k, eps, working_set, monkeypatch):
    y, p = _clustered_prior(seed, k)
    monkeypatch.setattr(_solver, "_WARM_START", True)
    used = _count_warm_starts(monkeypatch)
    loss_warm, lower_warm = _solve(y, p, eps)
    assert any(used)  # column generation resumed from a warm start
    monkeypatch.setattr(_solver, "_WARM_START", False)
    used.clear()
    loss_cold, lower_cold = _solve(y, p, eps)
    assert not used
    # Same certificate for both: each bound holds for the other's mechanism,
    # both certified to 1e-9, so the losses agree to that.
    assert lower_warm <= loss_cold * (1 + 1e-12)
    assert lower_cold <= loss_warm * (1 + 1e-12)
    assert loss_warm - lower_warm <= 1e-9 * loss_warm
    assert loss_cold - lower_cold <= 1e-9 * loss_cold
    assert loss_warm == pytest.approx(loss_cold, rel=2e-9)


def test_warm_start_is_strictly_feasible_and_keeps_progress(working_set):
    # The first column-generation round of _ray_path by hand: solve on the
    # coarse-to-fine working set, price, grow it. The warm start must be
    # strictly inside the dual feasible region of the grown set (every
    # reduced cost > 0, weights > 0) with the weights on the central path
    # (t_j r_j equal), and keep a better dual objective than the cold start.
    y, p = _clustered_prior(0, 60)
    k, e = y.size, math.expm1(1.0)
    ls, rs = _solver._initial_rays(y, p, e, tol=1e-6, full_max=2)
    old = _solver._Rays(y, p, e, ls, rs)
    u, w, t, _, _, _ = _solver._primal_dual_iterate(
        y, e, old, *_solver._cold_start(y, p, e, old), tol=1e-8 * 8 / k, max_iter=200)
    new_l, new_r, lowest = _violated_intervals(y, p, e, u, w, -1e-8 * 8 / k * (u.sum() + w @ y))
    assert lowest < 0 and new_l.size
    ls2, rs2 = _solver._unique_rays(k, np.concatenate([ls, new_l]), np.concatenate([rs, new_r]))
    assert ls2.size > ls.size
    grown = _solver._Rays(y, p, e, ls2, rs2)
    start = _solver._warm_start(y, p, e, grown, old, u, w, t)
    assert start is not None
    u1, w1, t1 = start
    r1, _ = grown.reduced(u1, w1)
    assert np.all(r1 > 0) and np.all(t1 > 0)
    np.testing.assert_allclose(t1 * r1, np.median(t1 * r1), rtol=1e-12)
    u0, w0, _ = _solver._cold_start(y, p, e, grown)
    assert u1.sum() + w1 @ y > u0.sum() + w0 @ y


def test_a_bad_warm_start_still_reaches_the_optimum(working_set, monkeypatch):
    # Mutation: the warm start's weights scrambled over eight orders of
    # magnitude (far off the central path, primal far from feasible).
    # The interior point must still converge to the certified optimum.
    y, p = _clustered_prior(2, 24)
    loss_ref, _ = _solve(y, p, 1.0)
    rng = np.random.default_rng(0)
    warm = _solver._warm_start
    used = []

    def scrambled(*args):
        out = warm(*args)
        if out is None:
            return None
        used.append(True)
        u, w, t = out
        return u, w, 10.0 ** rng.uniform(-8, 0, size=t.size)

    monkeypatch.setattr(_solver, "_warm_start", scrambled)
    monkeypatch.setattr(_solver, "_WARM_START", True)
    loss, lower = _solve(y, p, 1.0)
    assert used
    assert loss == pytest.approx(loss_ref, rel=2e-9)
    assert loss - lower <= 1e-9 * loss
