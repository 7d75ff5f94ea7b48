"""The default output grid of grid-based mechanisms (resolution='auto', docs/grid.md)."""

import math
import os

import numpy as np
import pytest

from skdp_label.mechanisms._validation import law_epsilon
from skdp_label.mechanisms import (
    DebiasedRR,
    ExponentialMechanism,
    OptimalUnbiased,
    RROnBins,
    auto_grid_points,
)
from skdp_label.mechanisms._grid_rule import (
    GRID_FAMILIES,
    MAX_POINTS,
    MIN_OUTPUT_POINTS,
    ROUNDING_SHARE,
    debiased_rr_mse,
    noise_points,
    prior_points,
    reference_loss,
)
from skdp_label.release import KeyedRelease, generate_key_file, load_key, mechanism_from_manifest

EPSILONS = [0.01, 0.05, 0.1, 0.3, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0, 8.0, 12.0, 20.0, 30.0]
COUNTS = [1, 10, 50, 300, 2_000, 10**5, 10**7]
MECHANISMS = {
    "unbiased": OptimalUnbiased,
    "debiased-rr": DebiasedRR,
    "bins": RROnBins,
    "exponential": ExponentialMechanism,
}


@pytest.mark.parametrize("family", GRID_FAMILIES)
def test_rule_is_monotone_in_epsilon_and_n_and_within_its_limits(family):
    table = np.array([[auto_grid_points(family, e, n) for n in COUNTS] for e in EPSILONS])
    assert table.min() >= 2 and table.max() <= MAX_POINTS[family]
    assert np.all(np.diff(table, axis=0) >= 0), "more epsilon never gives a coarser grid"
    assert np.all(np.diff(table, axis=1) >= 0), "more labels never give a coarser grid"
    no_prior = [auto_grid_points(family, e) for e in EPSILONS]
    assert np.all(np.diff(no_prior) >= 0)
    # Without a private prior the count plays no part; with one, it only caps.
    assert np.all(table <= np.array(no_prior)[:, None])
    # Enough labels: the prior does not cap at all.
    assert list(table[:, -1]) == no_prior


@pytest.mark.parametrize("family", ["unbiased", "bins", "exponential"])
def test_rounding_bound_holds_and_the_grid_is_never_finer_than_needed(family):
    rho = ROUNDING_SHARE[family]
    for eps in EPSILONS:
        k = noise_points(family, eps)
        ref = reference_loss(family, eps)
        step = 1.0 / (k - 1)
        assert step**2 / 4 <= rho * ref * (1 + 1e-9)
        if k > 2:  # one point fewer breaks the bound: never finer than needed
            coarser = 1.0 / (k - 2)
            assert coarser**2 / 4 > rho * ref
        chosen = auto_grid_points(family, eps)
        assert chosen == min(max(k, MIN_OUTPUT_POINTS.get(family, 2)), MAX_POINTS[family])


def test_unbiased_rule_is_the_documented_formula():
    for eps in EPSILONS:
        expected = min(max(math.ceil(20 * math.sinh(eps / 2)) + 1, 2), MAX_POINTS["unbiased"])
        assert auto_grid_points("unbiased", eps) == expected


def test_prior_cap_is_where_noise_meets_the_mean_count():
    # Auto prior_epsilon: eps1 = min(sqrt(k / n), eps / 2); mean count n / k >= 2 sqrt(2) / eps1.
    for n in [40, 300, 5000]:
        for eps in [0.1, 1.0, 4.0]:
            k = prior_points(n, eps)
            if k < 1:
                continue
            eps1 = min(math.sqrt(k / n), eps / 2)
            assert n / k >= 2 * math.sqrt(2) / eps1 * (1 - 1e-9)
            eps1_more = min(math.sqrt((k + 1) / n), eps / 2)
            assert n / (k + 1) < 2 * math.sqrt(2) / eps1_more
    assert prior_points(1000, 1.0, prior_epsilon=0.2) == math.floor(1000 * 0.2 / (2 * math.sqrt(2)))


@pytest.mark.parametrize("eps", [0.5, 1.0, 2.0, 4.0])
def test_unbiased_reference_is_a_lower_bound_on_the_optimum(eps):
    """The rule's reference (16 sinh^2(eps/2))^-1 (hi - lo)^2 bounds every unbiased
    randomizer's variance from below, whatever the prior (docs/grid.md)."""
    grid = np.linspace(0.0, 10.0, 21)
    bound = reference_loss("unbiased", eps) * 100.0
    priors = [
        np.ones(21),
        np.exp(-0.5 * ((grid - 5.0) / 0.5) ** 2),  # concentrated at the centre
        np.exp(-grid),
    ]
    for prior in priors:
        mech = OptimalUnbiased(eps, prior=(grid, prior / prior.sum())).fit([5.0])
        assert mech.noisy_label_loss_ >= bound
        assert mech.lower_bound_ >= bound * (1 - 1e-9)


@pytest.mark.parametrize("eps", [0.5, 1.0, 3.0])
@pytest.mark.parametrize("k", [2, 3, 6])
def test_debiased_rr_mse_matches_the_mechanism(eps, k):
    mech = DebiasedRR(eps, bounds=(0.0, 1.0), grid_size=k).fit([0.5])
    g, out, p = mech.input_values_, mech.output_values_, mech.transition_matrix_
    # Uniform labels rounded unbiasedly onto the grid: weight 1/(2(k-1)) at the ends.
    w = np.full(k, 1.0 / (k - 1))
    w[[0, -1]] /= 2
    mse = w @ np.einsum("ij,ij->i", p, (out[None, :] - g[:, None]) ** 2) + 1 / (6 * (k - 1) ** 2)
    assert float(debiased_rr_mse(k, law_epsilon(eps))) == pytest.approx(mse, rel=1e-9)


def test_debiased_rr_rule_minimises_its_error():
    ks = np.arange(2, MAX_POINTS["debiased-rr"] + 1)
    for eps in [0.1, 1.0, 4.0, 8.0]:
        chosen = auto_grid_points("debiased-rr", eps)
        assert debiased_rr_mse(chosen, eps) == pytest.approx(debiased_rr_mse(ks, eps).min())


@pytest.mark.parametrize("family", GRID_FAMILIES)
def test_default_grid_depends_only_on_public_inputs(family):
    """Same bounds, epsilon and n: the same grid, whatever the label values."""
    cls = MECHANISMS[family]
    rng = np.random.default_rng(0)
    spread = rng.uniform(0, 1000, size=400)
    concentrated = np.full(400, 3.0)
    grids = [cls(2.0, bounds=(0, 1000)).fit(y).input_values_ for y in (spread, concentrated)]
    np.testing.assert_array_equal(grids[0], grids[1])
    n = 400 if family in ("unbiased", "bins") else None  # a private prior reads the count
    assert grids[0].size == auto_grid_points(family, 2.0, n)
    np.testing.assert_array_equal(grids[0], np.linspace(0, 1000, grids[0].size))


@pytest.mark.parametrize("cls", [OptimalUnbiased, RROnBins])
def test_private_prior_grid_follows_the_number_of_rows(cls):
    few, many = np.full(40, 5.0), np.full(4000, 5.0)
    assert cls(4.0, bounds=(0, 10)).fit(few).input_values_.size == 5
    assert cls(4.0, bounds=(0, 10)).fit(many).input_values_.size == (
        auto_grid_points("unbiased" if cls is OptimalUnbiased else "bins", 4.0)
    )
    # Several label columns: the count is the number of rows (each column's labels).
    two = np.column_stack([few, few + 1])
    assert cls(4.0, bounds=(0, 10)).fit(two).input_values_.size == 5
    # An explicit prior_epsilon changes the cap the documented way.
    mech = cls(4.0, bounds=(0, 10), prior_epsilon=1.0).fit(few)
    assert mech.input_values_.size == max(2, prior_points(40, 4.0, prior_epsilon=1.0))


def test_explicit_grids_keep_their_old_meaning():
    assert OptimalUnbiased(1.0, bounds=(0, 1000), resolution=1)._domain()[0].size == 1001
    assert OptimalUnbiased(1.0, bounds=(0, 1000), resolution=None)._domain()[0].size == 1001
    assert OptimalUnbiased(1.0, bounds=(0, 1000))._domain()[0].size == 12
    assert RROnBins(1.0, bounds=(0, 50), resolution=1).fit([3.0]).input_values_.size == 51
    assert DebiasedRR(1.0, bounds=(0, 4), resolution=None).fit([3.0]).input_values_.size == 5
    assert DebiasedRR(1.0, bounds=(0, 4), grid_size=7).fit([3.0]).input_values_.size == 7
    old = ExponentialMechanism(1.0, bounds=(0, 10), resolution=None).fit([3.0])
    assert old.input_values_.size == 101
    assert ExponentialMechanism(1.0, bounds=(0, 10)).fit([3.0]).input_values_.size == 101
    assert ExponentialMechanism(30.0, bounds=(0, 10)).fit([3.0]).input_values_.size == 108
    # An explicit domain wins over the rule.
    for cls in MECHANISMS.values():
        mech = cls(1.0, bounds=(0, 10), domain=[0, 2.5, 10]).fit([2.5, 10.0])
        np.testing.assert_array_equal(mech.input_values_, [0, 2.5, 10])
    # grid_size='auto' is the same rule.
    a = OptimalUnbiased(2.0, bounds=(0, 9), grid_size="auto").fit(np.zeros(60))
    b = OptimalUnbiased(2.0, bounds=(0, 9)).fit(np.zeros(60))
    np.testing.assert_array_equal(a.input_values_, b.input_values_)
    with pytest.raises(ValueError, match="grid_size cannot be combined"):
        OptimalUnbiased(1.0, bounds=(0, 9), grid_size=5, resolution=0.5).fit([1.0])
    with pytest.raises(ValueError, match="resolution='auto'"):
        RROnBins(1.0).fit([1.0])  # the rule needs public bounds


@pytest.mark.parametrize("family", GRID_FAMILIES)
def test_privacy_report_shows_the_grid_size(family):
    mech = MECHANISMS[family](1.0, bounds=(0, 100)).fit(np.arange(101.0))
    report = mech.privacy_report()
    assert report.parameters["grid_points"] == mech.input_values_.size
    assert report.parameters["resolution"] == "auto"
    assert f"grid_points={mech.input_values_.size}" in str(report)


@pytest.mark.parametrize("cls", [OptimalUnbiased, RROnBins])
def test_keyed_release_grid_matches_in_memory_fit_and_is_batch_invariant(cls, tmp_path):
    path = os.path.join(tmp_path, "k.key")
    generate_key_file(path)
    key = load_key(path)
    y = np.random.default_rng(1).uniform(0, 60, size=700)
    rows = np.arange(y.size)
    mech = cls(3.0, bounds=(0, 60))
    expected = cls(3.0, bounds=(0, 60)).fit(y).input_values_
    whole = KeyedRelease(mech, key, "r")
    whole.add_counts(y, rows)
    whole.fit(y.size)
    batched = KeyedRelease(mech, key, "r")
    for part in np.array_split(rows, 4):
        batched.add_counts(y[part], part)
    batched.fit(y.size)
    for release in (whole, batched):
        np.testing.assert_array_equal(release.fitted_.input_values_, expected)
    np.testing.assert_array_equal(whole.fitted_.prior_, batched.fitted_.prior_)
    np.testing.assert_array_equal(whole.randomize(y, rows), batched.randomize(y, rows))
    rebuilt = mechanism_from_manifest(whole.manifest())
    np.testing.assert_array_equal(rebuilt.input_values_, expected)
