"""Tests of the randomized quantization family (paper 002)."""

import math

import numpy as np
import pytest

from skdp_label import BudgetAccountant
from skdp_label.estimators import LabelDPRegressor
from skdp_label.mechanisms import (
    ERM,
    MVU,
    OPTM,
    RQM,
    RandomizedQuantization,
    make_mechanism,
    mechanism_names,
)
from skdp_label.mechanisms._validation import SAMPLER_SLACK, law_epsilon
from skdp_label.mechanisms.quantization import _solver, minimal_margin
from skdp_label.mechanisms.quantization._core import (
    end_operator,
    erm_selection,
    make_cells,
    pair_index,
    privacy_loss,
    product_selection,
    rqm_selection,
    uniform_bins,
)

from _audit import (
    assert_exactly_private,
    assert_no_random_state,
    audit_copies_independent,
    audit_messages_have_no_labels,
    audit_sampler,
    max_log_ratio,
)

LO, HI = -1.0, 1.0


# -- an independent implementation of Alg. 1, for brute-force checks ------------------
def alg1_distribution(bins, left, right, x):
    """p(x, .) straight from 002 eq. (1) and the selection PMFs, label by label."""
    m = len(bins)
    out = np.zeros((len(x), m))
    for n, xv in enumerate(x):
        j = int(np.searchsorted(bins, xv, side="right")) - 1
        for l in range(j + 1):
            for r in range(j + 1, m):
                w = left[j, l] * right[j, r]
                p_left = (bins[r] - xv) / (bins[r] - bins[l])
                out[n, l] += w * p_left
                out[n, r] += w * (1.0 - p_left)
    return out


def brute_force_points(bins, lo=LO, hi=HI, n=400):
    """Dense labels plus both sides of every bin edge inside the bounds (the discontinuities)."""
    x = [np.linspace(lo, hi, n)]
    edges = bins[(bins > lo) & (bins <= hi)]
    tiny = 1e-10 * (hi - lo)
    x += [edges, edges - tiny]
    x = np.concatenate(x)
    return np.unique(x[(x >= lo) & (x <= hi)])


def random_bins(rng, m, eps, lo=LO, hi=HI):
    margin = minimal_margin(lo, hi, eps)
    first = lo - margin * (1 + rng.exponential(1.0))
    last = hi + margin * (1 + rng.exponential(1.0))
    inner = np.sort(rng.uniform(first, last, m - 2))
    return np.concatenate([[first], inner, [last]])


def random_selection(rng, m):
    left = np.tril(rng.gamma(0.5, size=(m - 1, m)) + 1e-3)
    right = np.triu(rng.gamma(0.5, size=(m - 1, m)) + 1e-3, k=1)
    return left / left.sum(1, keepdims=True), right / right.sum(1, keepdims=True)


def product_loss(bins, left, right, lo=LO, hi=HI):
    cells = make_cells(bins, lo, hi)
    pairs = pair_index(cells)
    pi = product_selection(cells, pairs, left, right)
    return privacy_loss((end_operator(cells, pairs) @ pi).reshape(-1, len(bins)))


# -- exact privacy loss ---------------------------------------------------------------
@pytest.mark.parametrize("seed", range(12))
def test_exact_loss_matches_brute_force_at_the_discontinuities(seed):
    rng = np.random.default_rng(seed)
    m = int(rng.integers(2, 8))
    bins = random_bins(rng, m, 1.0)
    left, right = random_selection(rng, m)
    loss = product_loss(bins, left, right)
    # The epsilon whose law_epsilon (less the samplers' slack) the loss just fits in.
    mech = RandomizedQuantization(
        loss * (1 + 1e-12) + SAMPLER_SLACK, bounds=(LO, HI), bins=bins, selection=(left, right)
    ).fit([0.0])
    assert mech.privacy_loss_ == pytest.approx(loss, rel=1e-12)
    x = brute_force_points(bins)
    reference = alg1_distribution(bins, left, right, x)
    np.testing.assert_allclose(mech.output_distribution(x), reference, rtol=1e-10, atol=1e-14)
    brute = max_log_ratio(reference)
    # Never below the brute force, and attained up to the 1e-10 step below the edges.
    assert brute <= mech.privacy_loss_ * (1 + 1e-9)
    assert brute >= mech.privacy_loss_ - 1e-6
    assert_exactly_private(mech.transition_matrix_, law_epsilon(mech.epsilon))


def test_limits_at_bin_edges_matter():
    """The largest output probability can be a limit from the left of a bin edge
    (the discontinuity of 002 Fig. 2): labels on attained points only underestimate
    the loss, the end rows do not."""
    rng = np.random.default_rng(24)  # a configuration found to show it
    m = int(rng.integers(3, 7))
    bins = random_bins(rng, m, 1.0)
    left, right = random_selection(rng, m)
    loss = product_loss(bins, left, right)
    attained = np.unique(np.concatenate([[LO, HI], bins[(bins > LO) & (bins < HI)]]))
    on_points = max_log_ratio(alg1_distribution(bins, left, right, attained))
    near_edges = max_log_ratio(alg1_distribution(bins, left, right, brute_force_points(bins)))
    assert on_points < loss - 0.1
    assert near_edges == pytest.approx(loss, abs=1e-6)


def test_selection_above_epsilon_is_refused_before_spending():
    rng = np.random.default_rng(3)
    bins = random_bins(rng, 5, 1.0)
    left, right = random_selection(rng, 5)
    loss = product_loss(bins, left, right)
    acc = BudgetAccountant(epsilon=100.0)
    mech = RandomizedQuantization(
        loss * (1 - 1e-6), bounds=(LO, HI), bins=bins, selection=(left, right), accountant=acc
    )
    with pytest.raises(ValueError, match="exact privacy loss"):
        mech.fit_transform([0.25, -0.5])
    assert acc.ledger == []


# -- RQM / ERM: calibration and the papers' bounds ------------------------------------------
@pytest.mark.parametrize(
    "cls, eps",
    # ERM's most private member (gamma = 0, uniform selection) costs more than
    # 1 on these bins: it starts higher.
    [(RQM, 0.5), (RQM, 1.0), (RQM, 3.0), (ERM, 2.0), (ERM, 3.0), (ERM, 6.0)],
)
def test_calibrated_families_cost_exactly_epsilon(cls, eps):
    # Interior bins inside the bounds: several cells, so the loss grows without
    # limit with q or gamma and the calibration can hit epsilon.
    margin = 6.0 * minimal_margin(LO, HI, eps)
    bins = [LO - margin, -0.5, 0.0, 0.5, HI + margin]
    mech = cls(eps, bounds=(LO, HI), bins=bins).fit([0.0])
    # Calibrated to the law's epsilon (less the samplers' slack), not the loose bound.
    eps_law = law_epsilon(eps)
    assert mech.privacy_loss_ <= eps_law
    assert mech.privacy_loss_ == pytest.approx(eps_law, rel=1e-9)
    x = brute_force_points(mech.bins_)
    assert max_log_ratio(mech.output_distribution(x)) <= eps_law * (1 + 1e-9)


def test_paper_bounds_are_upper_bounds_for_wide_margins():
    rng = np.random.default_rng(0)
    for _ in range(200):
        m = int(rng.integers(2, 12))
        margin = float(rng.uniform(0.5, 5.0))  # c = 1
        bins = uniform_bins(LO, HI, m, margin)
        gamma, q = float(rng.uniform(0, 20)), float(rng.uniform(0, 0.99))
        erm_bound = ERM.paper_bound(bins, (LO, HI), gamma)
        assert product_loss(bins, *erm_selection(bins, gamma)) <= erm_bound
        assert product_loss(bins, *rqm_selection(bins, q)) <= RQM.paper_bound(bins, (LO, HI), q)


def test_erm_theorem_1_fails_for_narrow_margins():
    """Two bins 0.1 beyond [-1, 1]: the only mechanism costs log(2.1 / 0.1) = log 21,
    above 002 Thm. 1's gamma + log(2 m (c + Delta) / c) = gamma + log 4.4 for gamma < 1.56."""
    bins = uniform_bins(LO, HI, 2, 0.1)
    exact = product_loss(bins, *erm_selection(bins, 1.0))
    assert exact == pytest.approx(math.log(21.0), rel=1e-12)
    assert exact > ERM.paper_bound(bins, (LO, HI), 1.0)
    # The calibrated mechanism charges the exact loss; a gamma the bound would allow is refused.
    with pytest.raises(ValueError, match="exact privacy loss|even gamma"):
        ERM(ERM.paper_bound(bins, (LO, HI), 1.0), bounds=(LO, HI), bins=bins, gamma=1.0).fit([0.0])


# -- OPTM and MVU ------------------------------------------------------------------------
@pytest.mark.parametrize("seed", range(6))
@pytest.mark.parametrize("objective", ["mae", "squared"])
def test_optm_beats_rqm_and_erm_on_the_same_bins(seed, objective):
    rng = np.random.default_rng(seed)
    eps = float(rng.uniform(0.5, 3.0))
    m = int(rng.integers(3, 7))
    # Wide enough that ERM's gamma = 0 (uniform selection) is private too.
    bins = uniform_bins(LO, HI, m, 10.0 * minimal_margin(LO, HI, eps))
    optm = OPTM(eps, bounds=(LO, HI), bins=bins, objective=objective).fit([0.0])
    assert optm.privacy_loss_ <= eps
    for cls in (RQM, ERM):
        other = cls(eps, bounds=(LO, HI), bins=bins, objective=objective).fit([0.0])
        assert optm.expected_error_ <= other.expected_error_ * (1 + 1e-6)


@pytest.mark.parametrize("seed", range(6))
def test_optm_and_mvu_are_exactly_private_and_unbiased(seed):
    rng = np.random.default_rng(100 + seed)
    eps = float(rng.choice([0.3, 1.0, 2.5, 6.0]))
    m = int(rng.integers(2, 9))
    bins = random_bins(rng, m, eps)
    prior = None if seed % 2 else (rng.uniform(LO, HI, 7), rng.gamma(1.0, size=7))
    for mech in (
        OPTM(eps, bounds=(LO, HI), bins=bins, prior=prior, objective="mae"),
        MVU(eps, bounds=(LO, HI), outputs=bins, grid_size=int(rng.integers(2, 12)), prior=prior),
    ):
        mech.fit([0.0])
        assert mech.privacy_loss_ <= eps
        x = np.concatenate([brute_force_points(bins), rng.uniform(LO, HI, 200)])
        p = mech.output_distribution(x)
        assert max_log_ratio(p) <= eps * (1 + 1e-9)
        assert np.all(p >= 0)
        np.testing.assert_allclose(p.sum(axis=1), 1.0, atol=1e-12)
        np.testing.assert_allclose(p @ mech.output_values_, x, atol=1e-12 * np.abs(bins).max())
        assert_exactly_private(mech.transition_matrix_, eps)


def test_repair_closes_solver_slack(monkeypatch):
    """Solve the LP for a *larger* epsilon: the repair must still deliver exact epsilon-DP."""
    monkeypatch.setattr(_solver, "_LP_SLACK", -1e-3)
    bins = np.array([-3.0, -0.5, 0.5, 3.0])
    res = _solver.solve_optm(bins, LO, HI, 1.0, None, "mae")
    cells, pairs, pi, rows, weight = res
    # The LP answer costs about 1.001; the repair mixes in just enough of a tighter answer.
    assert 0 < weight < 1
    assert privacy_loss(rows) <= 1.0
    assert privacy_loss(rows) == pytest.approx(1.0, rel=1e-9)
    ends = np.stack([cells.left, cells.right], axis=1).ravel()
    np.testing.assert_allclose(rows @ bins, ends, atol=1e-12)


def test_unbiased_at_bins_and_random_reals():
    rng = np.random.default_rng(5)
    bins = np.array([-2.5, -0.7, 0.1, 0.6, 2.8])
    for mech in (
        RQM(1.0, bounds=(LO, HI), bins=bins),
        ERM(2.0, bounds=(LO, HI), bins=bins),
        OPTM(1.0, bounds=(LO, HI), bins=bins),
        MVU(1.0, bounds=(LO, HI), outputs=bins, grid_size=5),
    ):
        mech.fit([0.0])
        x = np.concatenate([bins[(bins >= LO) & (bins <= HI)], [LO, HI], rng.uniform(LO, HI, 500)])
        np.testing.assert_allclose(mech.output_distribution(x) @ mech.output_values_, x, atol=1e-13)


def test_optimised_bins_beat_the_papers_hand_searched_bins():
    # 002 App. B, Table 4 (eps = 1): OPTM bins [-3, -0.5, 0.5, 3] found by grid search.
    hand = OPTM(1.0, bounds=(LO, HI), bins=[-3.0, -0.5, 0.5, 3.0], objective="mae").fit([0.0])
    auto = OPTM(1.0, bounds=(LO, HI), bins=4, objective="mae").fit([0.0])
    assert auto.expected_error_ <= hand.expected_error_
    assert auto.privacy_loss_ <= 1.0


def test_optimised_bins_follow_the_prior():
    values = np.linspace(LO, HI, 41)
    probs = np.exp(-0.5 * ((values - 0.5) / 0.1) ** 2)  # truncated Gaussian (002 Table 2)
    prior = (values, probs)
    fitted = OPTM(1.0, bounds=(LO, HI), bins=4, prior=prior, objective="mae").fit([0.0])
    # The bins optimised for the uniform prior, evaluated under this prior:
    uniform_bins_ = OPTM(1.0, bounds=(LO, HI), bins=4, objective="mae").fit([0.0]).bins_
    reference = OPTM(1.0, bounds=(LO, HI), bins=uniform_bins_, prior=prior, objective="mae")
    reference.fit([0.0])
    assert fitted.expected_error_ < reference.expected_error_


def test_large_m_is_exact():
    eps = 2.0
    bins = uniform_bins(LO, HI, 16, 2.0 * minimal_margin(LO, HI, eps))
    mech = OPTM(eps, bounds=(LO, HI), bins=bins).fit([0.0])
    assert mech.privacy_loss_ <= eps
    x = brute_force_points(bins, n=200)
    assert max_log_ratio(mech.output_distribution(x)) <= eps * (1 + 1e-9)


def test_bins_too_close_for_epsilon():
    margin = minimal_margin(LO, HI, 1.0)
    bins = [LO - 0.9 * margin, 0.0, HI + 0.9 * margin]
    acc = BudgetAccountant(epsilon=10.0)
    for mech in (
        OPTM(1.0, bounds=(LO, HI), bins=bins, accountant=acc),
        MVU(1.0, bounds=(LO, HI), outputs=bins, accountant=acc),
        RQM(1.0, bounds=(LO, HI), bins=bins, accountant=acc),
    ):
        with pytest.raises(ValueError, match="beyond the bounds|further out"):
            mech.fit_transform([0.5])
    assert acc.ledger == []


# -- sampling, randomness, accounting --------------------------------------------------------
@pytest.mark.parametrize(
    "make",
    [
        lambda: OPTM(1.0, bounds=(0, 10), bins=[-8.0, 2.0, 7.0, 19.0], objective="mae"),
        lambda: RQM(2.0, bounds=(0, 10), bins=5),
        lambda: MVU(1.5, bounds=(0, 10), outputs=[-9.0, 3.0, 6.0, 19.0], grid_size=4),
    ],
    ids=["optm", "rqm", "mvu"],
)
def test_sampler_matches_exact_distribution(make):
    mech = make().fit([1.0])
    audit_sampler(mech, n_per_label=20_000)


def continuous_label_pvalue(mech, x, n=40_000):
    """Chi-square p-value of ``transform`` on a label off the evaluation grid."""
    from scipy.stats import chisquare

    out = mech.transform(np.full(n, x))
    counts = np.array([(out == v).sum() for v in mech.output_values_])
    assert counts.sum() == n
    expected = mech.output_distribution([x])[0] * n
    assert np.all(counts[expected == 0] == 0)
    return chisquare(counts[expected > 0], expected[expected > 0]).pvalue


def test_continuous_labels_sampled_from_the_interpolated_distribution():
    mech = OPTM(1.0, bounds=(0, 10), bins=[-8.0, 2.0, 7.0, 19.0], objective="mae").fit([1.0])
    x = 4.321  # inside a cell, not on the evaluation grid
    assert x not in mech.input_values_
    assert continuous_label_pvalue(mech, x) > 1e-6


def test_mutation_sampler_ignoring_the_interpolation_is_flagged(monkeypatch):
    """A sampler that rounds labels to the nearer end of their piece (instead of
    picking an end with the interpolation weight) is unbiased on the grid but not
    between grid points: the continuous-label check must catch it."""
    from skdp_label._kernels._sampling import categorical_codes

    mech = OPTM(1.0, bounds=(0, 10), bins=[-8.0, 2.0, 7.0, 19.0], objective="mae").fit([1.0])

    def nearest_end(y, rng):
        pos, t = mech._pieces.locate(y)
        row = (2 * pos + (t > 0.5)).astype(np.int64)
        return mech.output_values_[categorical_codes(row, rng, mech._row_tables)]

    monkeypatch.setattr(mech, "_randomize_column", nearest_end)
    assert continuous_label_pvalue(mech, 4.321) < 1e-6


def test_no_random_state_and_independent_copies():
    mech = RQM(1.0, bounds=(0, 10), bins=[-12.0, 3.0, 7.0, 22.0]).fit([1.0])
    mech.transform([1.0, 2.0])
    assert_no_random_state(mech)
    y = np.repeat(mech.input_values_, 300)
    audit_copies_independent(mech, y)


def test_charges_every_release():
    acc = BudgetAccountant(epsilon=10.0)
    mech = OPTM(1.5, bounds=(0, 10), bins=[-8.0, 2.0, 7.0, 19.0], accountant=acc)
    mech.fit([1.0, 2.0])
    assert acc.ledger == []  # the prior is public: fit spends nothing
    mech.transform([1.0, 2.0])
    mech.transform([3.0])
    assert mech.epsilon_spent_ == pytest.approx(3.0)
    assert len(acc.ledger) == 2


def test_bad_inputs_raise_before_spending():
    acc = BudgetAccountant(epsilon=10.0)
    cases = [
        RandomizedQuantization(1.0, bounds=(LO, HI), bins=[-3.0, 0.0, 3.0], accountant=acc),
        RandomizedQuantization(1.0, bounds=(LO, HI), bins=[-3.0, 1.0, 3.0], accountant=acc,
                               selection=(np.eye(2, 3), np.eye(2, 3))),
        RandomizedQuantization(1.0, bounds=(LO, HI), bins=[-1.0, 3.0], accountant=acc),
        RandomizedQuantization(1.0, bounds=(LO, HI), bins=[3.0, -3.0], accountant=acc),
        OPTM(1.0, bounds=(LO, HI), bins=[-9.0, 0.0, 0.0, 9.0], accountant=acc),
        OPTM(1.0, bounds=(LO, HI), bins=4, prior=([0.0, 2.0], [0.5, 0.5]), accountant=acc),
        RQM(1.0, bounds=(LO, HI), bins=[-9.0, 0.0, 9.0], q=0.999, accountant=acc),
        ERM(1.0, bounds=(LO, HI), bins=[-9.0, 0.0, 9.0], margin=1.0, accountant=acc),
        MVU(1.0, bounds=None, accountant=acc),
    ]
    for mech in cases:
        with pytest.raises(ValueError):
            mech.fit_transform([0.3])
    assert acc.ledger == []


def test_labels_outside_bounds_rejected_without_quoting_them():
    acc = BudgetAccountant(epsilon=10.0)
    mech = OPTM(1.0, bounds=(0, 10), bins=[-8.0, 2.0, 7.0, 19.0], accountant=acc)
    labels = [3.14159, 12.71828]
    exc = audit_messages_have_no_labels(lambda: mech.fit_transform(labels), labels, public=[0, 10])
    assert isinstance(exc, ValueError)
    assert acc.ledger == []


def test_registered_and_usable_by_name():
    from sklearn.linear_model import LinearRegression

    for name, cls in [("quantization", RandomizedQuantization), ("rqm", RQM), ("erm", ERM),
                      ("optm", OPTM), ("mvu", MVU)]:
        assert name in mechanism_names("regression")
        mech = make_mechanism(name, task="regression", epsilon=2.0, bounds=(0, 10), domain=None)
        assert isinstance(mech, cls)
    rng = np.random.default_rng(0)
    X = rng.normal(size=(200, 2))
    y = np.clip(5 + 2 * X[:, 0] + rng.normal(size=200), 0, 10)
    model = LabelDPRegressor(LinearRegression(), "optm", 2.0, bounds=(0, 10),
                             mechanism_params={"bins": [-3.0, 3.0, 7.0, 13.0]})
    model.fit(X, y)
    assert model.predict(X).shape == (200,)


def test_large_epsilon_is_exact():
    """At epsilon = 20 the margins are ~1e-6 of the range: small probabilities must
    not be computed as 1 minus large ones, and bins near the bounds are rounded."""
    eps, bounds = 20.0, (0.0, 350.0)
    two = RandomizedQuantization(eps, bounds=bounds).fit([1.0])
    rqm = RQM(eps, bounds=bounds, bins=4).fit([1.0])
    optm = OPTM(eps, bounds=bounds, bins=rqm.bins_).fit([1.0])
    for mech in (two, rqm, optm):
        assert mech.privacy_loss_ <= eps
        x = brute_force_points(mech.output_values_, *bounds)
        p = mech.output_distribution(x)
        assert max_log_ratio(p) <= eps * (1 + 1e-9)
        np.testing.assert_allclose(p @ mech.output_values_, x, atol=1e-9)


@pytest.mark.parametrize("name", ["optm", "mvu", "rqm", "erm", "quantization"])
def test_small_batches_sample_like_the_kernel(name, monkeypatch):
    # A small batch runs the Python twin of the one-pass kernel (piece end,
    # then the row's draw): the same outputs, seed for seed, as compiled.
    from conftest import force_kernels

    y = np.random.default_rng(4).uniform(0.0, 10.0, 3000)
    kw = {"epsilon": 1.0, "bounds": (0.0, 10.0), "random_state": 5}
    if name == "mvu":
        kw["outputs"] = 4
    outs = []
    for use_twin in (True, False):
        with monkeypatch.context() as m:
            used = force_kernels(m, use_twin)
            outs.append(make_mechanism(name, **kw).fit_transform(y))
            assert "discrete_rows" in used
    np.testing.assert_array_equal(outs[0], outs[1])
    assert np.unique(outs[0]).size > 1
