"""RR-Top-k and RRWithPrior: choice of k, exact privacy audit, sampler."""

import itertools
import math

import numpy as np
import pytest
from _audit import audit_sampler
from scipy import stats

from skdp_label.mechanisms._validation import law_epsilon
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
    np.testing.assert_allclose(mech.transition_matrix_, randomized_response_matrix(5, law_epsilon(1.3)), rtol=1e-12)


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


# -- the sampler of transform: one top-k set for every label ----------------------


def _top_k_reference(codes, in_top, epsilon, rng):
    """RR-Top-k as the mixture of :func:`rr_top_k_set_constants`, written
    plainly (branches, ``%``, the twins of ``bernoulli_exact`` and
    ``uniform_index``): the position in the set of each output."""
    from skdp_label._kernels._sampling import bernoulli_exact, uniform_index
    from skdp_label._kernels._twin import twin

    bernoulli, uniform = twin(bernoulli_exact), twin(uniform_index)
    members = np.flatnonzero(in_top).tolist()
    k = len(members)
    e = math.exp(-epsilon)
    t = k * e / (1.0 + (k - 1) * e) * DIGIT
    qd, frac = math.floor(t), t - math.floor(t)
    out = []
    for c in codes.tolist():
        d = int(rng.random() * DIGIT)
        inside = c in members
        top = qd if inside else DIGIT  # P(a uniform member): u, or 1 outside the set
        if d < top or (d == top and bernoulli(frac, rng)):
            limit = top - top % k
            out.append(d % k if d < limit else int(uniform(float(k), rng)))
        else:
            out.append(members.index(c))
    return np.array(out)


def _top_k_kernel(codes, in_top, epsilon, rng, use_twin=False, constants=None):
    from skdp_label._kernels._top_k import _rr_top_k_set, rr_top_k_set_constants
    from skdp_label._kernels._twin import twin

    slot, c = rr_top_k_set_constants(in_top, epsilon)
    k = int(np.sum(in_top))
    out = np.empty(codes.shape[0], dtype=np.int64)
    kernel = twin(_rr_top_k_set) if use_twin else _rr_top_k_set
    kernel(codes, 0, slot, c if constants is None else constants, 1.0 / k, np.arange(k), rng, out)
    return out


DIGIT = 2**53
_SETS = {
    "3 of 7": np.isin(np.arange(7), [1, 4, 6]),
    "1 of 5": np.isin(np.arange(5), [2]),
    "all 6": np.ones(6, dtype=bool),
    "6 of 9": np.isin(np.arange(9), [0, 1, 2, 3, 5, 8]),  # 2**53 mod 6 = 2: a rare region outside
}


@pytest.mark.parametrize("epsilon", [1e-9, 0.3, 2.0, 36.9])
@pytest.mark.parametrize("name", list(_SETS))
def test_top_k_set_sampler_reads_the_digits_of_its_reference(name, epsilon):
    """The kernel (cases selected by masks, the residue by a multiplication)
    and its Python twin give, digit for digit, the plain mixture: random
    labels, then scripted digits in every rare region (a tie with u 2**53,
    the digits between the limits and u 2**53 inside the set, the top of
    the digit range outside it), where more digits are read."""
    from skdp_label._kernels._top_k import rr_top_k_set_constants
    from test_numerics import digits_used, scripted

    in_top = _SETS[name]
    n_classes = in_top.size
    codes = np.random.default_rng(3).integers(0, n_classes, 3000)
    expected = _top_k_reference(codes, in_top, epsilon, np.random.default_rng(4))
    for use_twin in (False, True):
        got = _top_k_kernel(codes, in_top, epsilon, np.random.default_rng(4), use_twin)
        np.testing.assert_array_equal(got, expected)
    _, (qd, _, limit_in, limit_out) = rr_top_k_set_constants(in_top, epsilon)
    inside, outside = int(np.flatnonzero(in_top)[0]), np.flatnonzero(~in_top)
    firsts = [(inside, int(limit_in)), (inside, int(qd)), (inside, max(int(qd) - 1, 0))]
    firsts += [(int(c), d) for c in outside[:1] for d in (int(limit_out), DIGIT - 1)]
    for code, first in firsts:
        digits = [first, 12345, 2**52 + 7, 99, 5]
        ref_rng, rng = scripted(digits), scripted(digits)
        ref = _top_k_reference(np.array([code]), in_top, epsilon, ref_rng)
        assert _top_k_kernel(np.array([code]), in_top, epsilon, rng)[0] == ref[0]
        assert digits_used(rng) == digits_used(ref_rng)


def test_top_k_set_reference_comparison_catches_a_wrong_limit():
    """Mutation: a limit one modulus too high takes the residue of digits
    that must read fresh ones (the rare region); the scripted digits of the
    test above catch it."""
    from skdp_label._kernels._top_k import rr_top_k_set_constants
    from test_numerics import digits_used, scripted

    in_top = _SETS["3 of 7"]
    _, c = rr_top_k_set_constants(in_top, 0.3)
    assert c[2] < c[0]  # a rare region inside the set
    mutant = c.copy()
    mutant[2] += 3
    code, digits = np.array([1]), [int(c[2]), 12345, 2**52 + 7]
    right, wrong = scripted(digits), scripted(digits)
    _top_k_kernel(code, in_top, 0.3, right)
    _top_k_kernel(code, in_top, 0.3, wrong, constants=mutant)
    assert digits_used(right) == 2 and digits_used(wrong) == 1


def test_top_k_set_reference_comparison_catches_a_wrong_mask(monkeypatch):
    """Mutation: the twin with the masks' opaque() returning 0 (no label ever
    takes the uniform member), on labels in the set."""
    from skdp_label._kernels import _twin
    from skdp_label._kernels._intrinsics import opaque

    in_top = _SETS["3 of 7"]
    codes = np.random.default_rng(3).choice(np.flatnonzero(in_top), 500)
    expected = _top_k_reference(codes, in_top, 0.3, np.random.default_rng(4))
    monkeypatch.setattr(_twin, "_TWINS", {})
    monkeypatch.setitem(_twin._GLOBALS, id(opaque), lambda x: 0)
    got = _top_k_kernel(codes, in_top, 0.3, np.random.default_rng(4), use_twin=True)
    assert not np.array_equal(got, expected)


@pytest.mark.parametrize("epsilon", [0.4, 9.0])
@pytest.mark.parametrize(
    "classes, labels",
    [
        (np.arange(-2, 4), None),  # contiguous integers: coded in the kernel
        (np.array([30, 10, 20, 0, 50, 40]), None),  # integers in a declared order
        (np.array(["ant", "bee", "cat", "dog", "eel", "fox"]), None),  # strings
        (np.arange(6), np.arange(6, dtype=np.float32)),  # float labels of integer classes
    ],
    ids=["contiguous", "declared-order", "strings", "float-labels"],
)
def test_transform_samples_the_transition_matrix(classes, labels, epsilon):
    """transform's one-digit sampler against transition_matrix_ (support,
    chi-square, every output expected often enough observed), inside and
    outside the top-k set; the output dtype is the labels'."""
    prior = [0.05, 0.3, 0.1, 0.25, 0.2, 0.1]
    for mech in (RRTopK(epsilon, classes=classes, k=3, prior=prior),
                 RRWithPrior(epsilon, classes=classes, prior=prior)):
        mech.fit(classes[:1])
        assert 1 < mech.k_ < 6 or epsilon > 5
        audit_sampler(mech, labels=None if labels is None else classes, n_per_label=6000)
        if labels is not None:
            out = mech.transform(labels)
            assert out.dtype == labels.dtype and set(out.tolist()) <= set(mech.top_k_.tolist())
