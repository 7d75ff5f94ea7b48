"""RR-Top-k and RRWithPrior: choice of k, exact privacy audit, sampler."""

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from skdp_label import BudgetAccountant
from skdp_label.mechanisms import RandomizedResponse, RRTopK, RRWithPrior, make_mechanism
from skdp_label.mechanisms.classic._exponential import max_log_ratio
from skdp_label.mechanisms.classic._randomized_response import randomized_response_matrix
from skdp_label.mechanisms.classification._solver import (
    optimal_k,
    rr_top_k_matrix,
    temper,
    top_k_order,
)


def _random_priors(rng, n, n_classes):
    """Priors from flat to very peaked, with ties and zeros mixed in."""
    alpha = rng.choice([0.05, 0.3, 1.0, 5.0], size=n)
    priors = np.stack([rng.dirichlet(np.full(n_classes, a)) for a in alpha])
    priors[::7, :2] = priors[::7, :1]  # ties
    priors[::5, -1] = 0.0
    return priors


def _brute_force_best(prior, epsilon):
    """Best P(correct) over every subset of classes, and the smallest size reaching it."""
    n_classes = prior.size
    best_value, best_size = -1.0, None
    for size in range(1, n_classes + 1):
        keep = math.exp(epsilon) / (math.exp(epsilon) + size - 1)
        value = max(sum(prior[list(s)]) for s in itertools.combinations(range(n_classes), size)) * keep
        if value > best_value * (1 + 1e-12):
            best_value, best_size = value, size
    return best_value, best_size


@pytest.mark.parametrize("epsilon", [0.1, 0.5, 1.0, 2.0, 4.0])
def test_optimal_k_matches_exhaustive_search(epsilon):
    rng = np.random.default_rng(int(epsilon * 10))
    priors = _random_priors(rng, 60, 6)
    ks = optimal_k(priors, epsilon)
    seen = set()
    for prior, k in zip(priors, ks):
        value, size = _brute_force_best(prior, epsilon)
        ours = np.sort(prior)[::-1][:k].sum() * math.exp(epsilon) / (math.exp(epsilon) + k - 1)
        assert ours == pytest.approx(value, rel=1e-12)
        assert k == size
        seen.add(int(k))
    # The cases exercise interior choices of k, where an off-by-one would show.
    if epsilon <= 2.0:
        assert seen & {2, 3, 4, 5}


def test_off_by_one_reference_choice_differs():
    """The public reference's choice (top k+1 over 1 + (k-1)e^-eps) is not the optimum."""
    prior = np.array([0.5, 0.3, 0.2])
    eps = 1.0
    ks = np.arange(1, 4)
    sums = np.cumsum(np.sort(prior)[::-1])
    reference = np.argmax(np.append(sums[1:], sums[-1]) / (1 + (ks - 1) * math.exp(-eps))) + 1
    assert optimal_k(prior[None], eps)[0] == _brute_force_best(prior, eps)[1]
    assert reference != optimal_k(prior[None], eps)[0]


@pytest.mark.parametrize("epsilon", [0.05, 1.0, 3.0, 30.0])
def test_per_prior_transition_matrices_are_exactly_epsilon_dp(epsilon):
    rng = np.random.default_rng(3)
    priors = _random_priors(rng, 200, 7)
    ks = optimal_k(priors, epsilon)
    order = top_k_order(priors)
    for k, row_order in zip(ks, order):
        in_top = np.zeros(7, dtype=bool)
        in_top[row_order[:k]] = True
        matrix = rr_top_k_matrix(in_top, epsilon)
        np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=1e-12)
        assert np.all(matrix[:, ~in_top] == 0)  # never a class outside the top k
        with np.errstate(divide="ignore", invalid="ignore"):  # all-zero columns
            loss = max_log_ratio(matrix)
        assert loss <= epsilon * (1 + 1e-9)
        if k > 1:  # the bound is attained: no budget is wasted
            assert loss == pytest.approx(epsilon, rel=1e-9)


def test_uniform_prior_is_randomized_response():
    mech = RRWithPrior(epsilon=1.3, classes=list("abcde")).fit(list("ab"))
    assert mech.k_ == 5
    np.testing.assert_allclose(mech.transition_matrix_, randomized_response_matrix(5, 1.3), rtol=1e-12)


@pytest.mark.parametrize("true_class", [1, 0])  # inside and outside the top-k set
def test_per_example_sampler_matches_matrix(true_class):
    prior = np.array([0.05, 0.4, 0.35, 0.15, 0.05])
    eps = 1.0
    mech = RRWithPrior(epsilon=eps, classes=np.arange(5), random_state=11).fit([0])
    n = 40_000
    out = mech.randomize(np.full(n, true_class), np.tile(prior, (n, 1)))
    k = optimal_k(prior[None], eps)[0]
    assert 1 < k < 5
    in_top = np.zeros(5, dtype=bool)
    in_top[top_k_order(prior)[0, :k]] = True
    expected = rr_top_k_matrix(in_top, eps)[true_class] * n
    counts = np.bincount(out, minlength=5)
    assert np.all(counts[expected == 0] == 0)
    keep = expected > 0
    assert stats.chisquare(counts[keep], expected[keep]).pvalue > 1e-4


def test_transform_with_public_prior_matches_matrix():
    mech = RRTopK(epsilon=0.7, classes=[10, 20, 30, 40], k=3, prior=[0.1, 0.2, 0.3, 0.4], random_state=2)
    y = np.repeat([10, 40], 20_000)
    out = mech.fit_transform(y)
    assert mech.top_k_.tolist() == [20, 30, 40]
    for j, cls in enumerate([10, 40]):
        row = mech.transition_matrix_[[0, 3][j]]
        counts = np.array([(out[y == cls] == c).sum() for c in [10, 20, 30, 40]])
        keep = row > 0
        assert np.all(counts[~keep] == 0)
        assert stats.chisquare(counts[keep], row[keep] * 20_000).pvalue > 1e-4


def test_outputs_always_in_each_rows_top_k_and_strings_work():
    rng = np.random.default_rng(0)
    classes = np.array(["ant", "bee", "cat", "dog", "eel", "fox"])
    priors = _random_priors(rng, 3000, 6)
    y = rng.choice(classes, size=3000)
    mech = RRWithPrior(epsilon=0.8, classes=classes, random_state=1)
    out = mech.randomize(y, priors)
    ks = mech.choose_k(priors)
    order = top_k_order(priors)
    codes = np.searchsorted(classes, out)
    assert all(c in o[:k] for c, o, k in zip(codes, order, ks))


def test_randomize_charges_once_and_rejects_bad_priors_before_spending():
    acc = BudgetAccountant(epsilon=1.0)
    mech = RRWithPrior(epsilon=1.0, classes=[0, 1, 2], accountant=acc, random_state=0)
    good = np.full((4, 3), 1 / 3)
    for bad in [good[:3], good[:, :2], np.where(good > 0, np.nan, 0), -good, np.zeros((4, 3))]:
        with pytest.raises(ValueError):
            mech.randomize([0, 1, 2, 0], bad)
    with pytest.raises(ValueError, match="not among the .*declared classes"):
        mech.randomize([0, 1, 5, 0], good)
    assert acc.ledger == []
    mech.randomize([0, 1, 2, 0], good)
    assert acc.spent_epsilon == pytest.approx(1.0)
    assert mech.epsilon_spent_ == pytest.approx(1.0)


def test_top_k_k_too_large_and_missing_classes():
    with pytest.raises(ValueError, match="exceeds"):
        RRTopK(classes=[0, 1], k=3).fit([0])
    with pytest.raises(ValueError, match="classes"):
        RRWithPrior().fit([0, 1])


def test_registry_names():
    assert isinstance(make_mechanism("rr-with-prior", task="classification", classes=[0, 1]), RRWithPrior)
    assert isinstance(make_mechanism("rr-top-k", task="classification", classes=[0, 1]), RRTopK)
    assert isinstance(make_mechanism("rr", task="classification", classes=[0, 1]), RandomizedResponse)


def test_temper_is_power_normalised():
    p = np.array([[0.6, 0.3, 0.1, 0.0], [0.0, 0.0, 0.0, 0.0]])
    out = temper(p, 0.5)
    expected = p[0] ** 2 / (p[0] ** 2).sum()
    np.testing.assert_allclose(out[0], expected, rtol=1e-12)
    np.testing.assert_allclose(out[1], 0.25)
    np.testing.assert_allclose(temper(np.array([[1e-300, 1e-310]]), 0.01).sum(), 1.0)
