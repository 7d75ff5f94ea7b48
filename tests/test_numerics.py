"""Numeric safety of the samplers (issue 8, item 7).

* Unsafe numerics (non-finite bounds, spans or grid steps that are not
  normal floats, noise ranges that overflow) are refused with a ValueError
  before anything is spent, and the message quotes no label.
* Epsilon caps: 30 for discrete mechanisms, 20 for continuous noise.
* Up to the caps every output of positive probability is reachable. The
  primitives are tested on chosen digits (a Generator whose next digits are
  set, see ``scripted``), and the tail and
  bulk stages are chi-squared against their exact distributions.
"""

import math
from fractions import Fraction

import numpy as np
import numba
import pytest
from scipy import stats

from _audit import chi_square_pvalue
from skdp_label import BudgetAccountant
from skdp_label._kernels import _sampling as S
from skdp_label._kernels._top_k import rr_top_k_indices
from skdp_label.mechanisms import (
    DebiasedRR,
    DiscreteLaplace,
    DiscreteStaircase,
    ExponentialMechanism,
    Gaussian,
    Laplace,
    RandomizedResponse,
    RROnBins,
    Staircase,
)
from skdp_label.mechanisms._base import BaseLabelMechanism
from skdp_label.mechanisms.classic._noise import staircase_pmf, staircase_tail
from skdp_label.utils._random import power_of_two_grid

# The compiled kernels, whatever the size (small calls would run the Python
# twins: bit-identical, tests/test_twins.py).
pytestmark = pytest.mark.usefixtures("compiled_kernels")

DIGIT = 2**53


_M32 = 0xFFFFFFFF


def _untemper(y):
    """Inverse of MT19937's output tempering."""
    y ^= y >> 18
    y ^= (y << 15) & 0xEFC60000
    r = y
    for _ in range(5):
        r = y ^ ((r << 7) & 0x9D2C5680)
    y = r & _M32
    r = y
    for _ in range(3):
        r = y ^ (r >> 11)
    return r & _M32


def scripted(digits):
    """A numpy Generator whose next ``random()`` calls return d / 2**53 for the
    chosen digits d (at most 312 of them).

    MT19937 outputs its state words (tempered) one by one until it has used
    all 624, and a double is (a >> 5) 2**26 + (b >> 6) of two outputs: set
    the words to the untempered digit halves. The kernels run unchanged (a
    real Generator), so this checks the compiled code that releases use.
    """
    words = []
    for d in digits:
        d = int(d)
        words += [(d >> 26) << 5, (d & (2**26 - 1)) << 6]
    assert len(words) <= 624
    bit_generator = np.random.MT19937(0)
    state = bit_generator.state
    key = np.array(state["state"]["key"], dtype=np.uint32)
    key[: len(words)] = [_untemper(w) for w in words]
    state["state"]["key"], state["state"]["pos"] = key, 0
    bit_generator.state = state
    return np.random.Generator(bit_generator)


def residue_digits(m, gen):
    """Digits d in [0, 2**53) to check ``d mod m`` on (as floats): the ends of
    the range, around m, random ones, and one either side of multiples of m."""
    d = np.concatenate([
        [0, 1, m - 1, m, m + 1, 2 * m - 1, 2**53 - 1, 2**53 - 2, 2**53 - m],
        gen.integers(0, 2**53, 2000),
        (gen.integers(0, 2**53 // m, 2000) * m + gen.choice([-1, 0, 1], 2000)),
    ])
    return d[(d >= 0) & (d < 2**53)].astype(np.float64)


def digits_used(rng):
    """Digits a scripted Generator has given out."""
    return rng.bit_generator.state["state"]["pos"] // 2


# Loops in numba: calling a kernel from Python costs microseconds a draw.
@numba.njit
def _bernoullis(q, rng, n):
    return sum([S.bernoulli_exact(q, rng) for _ in range(n)])


@numba.njit
def _geometrics(c, rng, n):
    return np.array([S.geometric(c[0], c[1], c[2], c[3], rng) for _ in range(n)])


@numba.njit
def _one_sided(c, rng, n):
    return np.array([S.staircase_one_sided(c, rng) for _ in range(n)])


# -- unsafe numerics are refused before anything is spent --------------------

LABEL = 3.7e-306  # a label whose value must not appear in any message

UNSAFE = [
    (Laplace, (0.0, 1e-310), [0.0], "span"),  # subnormal span
    (Laplace, (0.0, 1e-305), [LABEL], "grid step"),  # normal span, subnormal step: 1/g = inf
    (Staircase, (0.0, 1e-305), [LABEL], "grid step"),
    (Gaussian, (0.0, 1e-305), [LABEL], "grid step"),
    (Laplace, (-1e308, 1e308), [0.0], "span"),  # hi - lo overflows
    (Laplace, (0.0, 1e308), [1.5e300], "noise range"),
    (Staircase, (0.0, 1e308), [1.5e300], "noise range"),
    (Laplace, (0.0, math.inf), [1.0], "finite"),
    (Laplace, (math.nan, 1.0), [0.5], "finite"),
    (DiscreteLaplace, (0, 2**60), [7.0], "2\\*\\*52"),
    (DiscreteStaircase, (-(2**60), 0), [-7.0], "2\\*\\*52"),
    (ExponentialMechanism, (0.0, 1e-310), [0.0], "span"),
    (RROnBins, (0.0, math.inf), [1.0], "finite"),
    (RROnBins, (-1e308, 1e308), [1.0], "span"),
    # Finite span, infinite squared bin costs: failed after charging the prior.
    (RROnBins, (-8e307, 8e307), [1.0], "squared errors"),
    (RROnBins, (-1e160, 1e160), [1.0], "squared errors"),
    (DebiasedRR, (-1e308, 1e308), [1.0], "span"),
]


@pytest.mark.parametrize("cls,bounds,y,match", UNSAFE, ids=lambda v: repr(v))
def test_unsafe_numerics_refused_before_spending(cls, bounds, y, match):
    accountant = BudgetAccountant(epsilon=100.0, delta=1e-3)
    kwargs = {"grid_size": 5} if cls is DebiasedRR else {}
    mech = cls(1.0, bounds=bounds, accountant=accountant, **kwargs)
    with pytest.raises(ValueError, match=match) as err:
        mech.fit_transform(np.array(y))
    assert accountant.spent_epsilon == 0.0
    assert repr(LABEL) not in str(err.value) and "1.5e+300" not in str(err.value)


@pytest.mark.parametrize("cls", [Laplace, Staircase, Gaussian])
@pytest.mark.parametrize("eps", [0.01, 1.0, 20.0])
@pytest.mark.parametrize("bounds", [(0.0, 1e-290), (1.0, 1.0 + 2**-40), (-1e290, 1e290), (1e15, 1e15 + 1)])
def test_accepted_extremes_give_normal_grid_and_finite_outputs(cls, eps, bounds):
    mech = cls(eps, bounds=bounds, clip=False, random_state=0).fit([bounds[0]])
    g = mech.granularity_
    assert g >= np.finfo(float).tiny and math.isfinite(1.0 / g)
    out = mech.transform(np.full(2000, bounds[1]))
    assert np.all(np.isfinite(out))
    assert np.all(out / g == np.round(out / g))  # still on the grid


def test_power_of_two_grid_refuses_non_normal_steps():
    assert power_of_two_grid(1e-300, 0.0) >= np.finfo(float).tiny
    for scale, magnitude in [(1e-310, 0.0), (1e-305, 1e-305), (math.inf, 1.0), (math.nan, 1.0), (1.0, math.inf)]:
        with pytest.raises(ValueError):
            power_of_two_grid(scale, magnitude)


# -- epsilon caps ---------------------------------------------------------------

CAPS = [
    (RandomizedResponse, {"classes": [0, 1]}, 30.0),
    (DiscreteLaplace, {"bounds": (0, 1)}, 30.0),
    (DiscreteStaircase, {"bounds": (0, 3)}, 30.0),
    (ExponentialMechanism, {"bounds": (0, 2), "resolution": 1.0}, 30.0),
    (Laplace, {"bounds": (0.0, 1.0)}, 20.0),
    (Staircase, {"bounds": (0.0, 1.0)}, 20.0),
    (Gaussian, {"bounds": (0.0, 1.0)}, 20.0),
]


@pytest.mark.parametrize("cls,kwargs,cap", CAPS, ids=lambda v: getattr(v, "__name__", ""))
def test_epsilon_caps(cls, kwargs, cap):
    if not hasattr(BaseLabelMechanism, "_max_epsilon"):
        assert cls.__dict__.get("_max_epsilon", cap) == cap  # the discrete ones declare 30
        pytest.skip("the base class does not enforce _max_epsilon yet")
    assert cls._max_epsilon == cap
    y = np.array([0.0])
    cls(cap, random_state=0, **kwargs).fit_transform(y)  # at the cap: fine
    accountant = BudgetAccountant(epsilon=1000.0)
    with pytest.raises(ValueError, match="epsilon"):
        cls(cap * 1.05, accountant=accountant, **kwargs).fit_transform(y)
    assert accountant.spent_epsilon == 0.0


# -- exact Bernoulli -------------------------------------------------------------


def _reference_bernoulli(q, digits):
    """U < q for U = 0.d1 d2 ... (base 2**53), decided with exact rationals.
    Returns (result, digits read)."""
    q = Fraction(q)
    lower = Fraction(0)
    for i, d in enumerate(digits, start=1):
        lower += Fraction(int(d), DIGIT**i)
        if lower + Fraction(1, DIGIT**i) <= q:
            return True, i
        if lower >= q:
            return False, i
    raise AssertionError("undecided")


def _expansion(q, n):
    """First n base-2**53 digits of the float q."""
    x, out = Fraction(q), []
    for _ in range(n):
        x *= DIGIT
        out.append(int(x))
        x -= int(x)
    return out


QS = [0.3, 0.5, 1.0 - 2**-53, 2**-53, 3 * 2.0**-70, 1e-17, 9.43e-17, 1e-300, 5e-324, 0.0, 1.0]


@pytest.mark.parametrize("q", QS)
def test_exact_bernoulli_against_rational_reference(q):
    rng = np.random.default_rng(7)
    expansion = _expansion(q, 22)
    for trial in range(60):
        # Scripts that follow q's expansion for t digits, then deviate (or not).
        t = int(rng.integers(0, 21))
        digits = expansion[:t]
        nxt = expansion[t]
        choice = rng.integers(0, 3)
        digits.append(max(nxt - 1, 0) if choice == 0 else min(nxt + 1, DIGIT - 1) if choice == 1 else nxt)
        digits += [int(v) for v in rng.integers(0, DIGIT, size=25, dtype=np.uint64)]
        src = scripted(digits)
        got = S.bernoulli_exact(q, src)
        if q >= 1.0:
            assert got and digits_used(src) == 0
            continue
        if q == 0.0:
            assert not got and digits_used(src) == 0
            continue
        want, used = _reference_bernoulli(q, digits)
        assert got == want and digits_used(src) == used, (q, t, choice)


@pytest.mark.parametrize("q", [0.3, 0.01, 1.0 / 3.0])
def test_exact_bernoulli_frequency(q):
    rng = np.random.default_rng(11)
    n = 100_000
    hits = int(_bernoullis(q, rng, n))
    assert stats.binomtest(hits, n, q).pvalue > 1e-4


def test_uniform_index_is_uniform_and_rejects_the_top():
    m = 3.0
    # 2**53 mod 3 = 2: the top two digits are rejected, the next is used.
    src = scripted([DIGIT - 1, DIGIT - 2, 7])
    assert S.uniform_index(m, src) == 7 % 3 and digits_used(src) == 3
    rng = np.random.default_rng(2)
    draws = np.array([S.uniform_index(7.0, rng) for _ in range(7_000)])
    assert chi_square_pvalue(draws, np.arange(7.0), np.full(7, 1 / 7)) > 1e-4


def test_fine_uniform_keeps_relative_precision():
    # A first digit below 2**44 reads a second one: the value keeps ~53 bits.
    src = scripted([5, 2**52 + 3])
    x = S.fine_uniform(src)
    assert digits_used(src) == 2
    assert x == pytest.approx((5 + (2**52 + 3) / DIGIT) / DIGIT, rel=2**-52)
    src = scripted([0] * 20)
    assert S.fine_uniform(src) == 5e-324  # the all-zero script ends at the smallest float


# -- randomized response family: the old eps >= 37 failure ------------------------


def test_rr_kernel_flips_at_eps_beyond_old_failure():
    # At eps = 36.9, P(keep) rounds to 1: a 53-bit uniform could never flip.
    q = S.rr_flip_probability(2, 36.9)
    assert 0.0 < q < 2.0**-53
    c = S.rr_constants(2, q)
    # U < q needs U's first digit 0 (q * 2**53 < 1) and then a small one.
    second = int(np.floor(c[1] * DIGIT))
    flip = S.randomized_response_indices(np.array([0]), scripted([0, second - 1]), 2, c)
    keep = S.randomized_response_indices(np.array([0]), scripted([0, second + 1]), 2, c)
    assert flip[0] == 1 and keep[0] == 0
    # Top-k kernel, label in the top-3 set: same exact flip.
    order = np.array([[2, 0, 1]])
    e = math.exp(-36.9)
    q3 = 2 * e / (1 + 2 * e)
    second = int(np.floor((q3 * DIGIT - math.floor(q3 * DIGIT)) * DIGIT))
    out = rr_top_k_indices(np.array([2]), order, np.array([3]), scripted([0, second - 1, 5]), e)
    assert out[0] in (0, 1)


@pytest.mark.parametrize(
    "make",
    [
        lambda: RandomizedResponse(30.0, classes=[0, 1]).fit([0]),
        lambda: DebiasedRR(30.0, bounds=(0, 1), grid_size=2).fit([0.0]),
        lambda: RROnBins(30.0, prior=([0.0, 1.0], [0.5, 0.5])).fit([0.0]),
    ],
    ids=["RandomizedResponse", "DebiasedRR", "RROnBins"],
)
def test_rr_mechanisms_reach_the_flip_at_the_cap(make):
    mech = make()
    y = np.array([mech.input_values_[0]])
    # First digit 0 < floor(q 2**53) (q ~ 9.4e-14): a flip, to the one other output.
    flipped = mech._randomize_column(y, scripted([0, 0, 0]))
    kept = mech._randomize_column(y, scripted([DIGIT - 1]))
    assert flipped[0] != kept[0]
    assert kept[0] == mech.output_values_[np.argmax(mech.transition_matrix_[0])]


def test_rr_replacement_is_uniform_over_the_other_classes():
    k = 6
    c = S.rr_constants(k, 0.9)
    codes = S.randomized_response_indices(np.full(120_000, 2), np.random.default_rng(3), k, c)
    expected = np.full(k, 0.9 / (k - 1))
    expected[2] = 0.1
    assert chi_square_pvalue(codes, np.arange(k), expected) > 1e-4


# -- staircase family: bulk and tail stages ----------------------------------------


@pytest.mark.parametrize("lam", [2.0**-20, 2.0**-12, 0.3, 5.0])
def test_geometric_stage_matches_its_distribution(lam):
    """Both paths of the geometric (direct inversion, and super-blocks plus a
    truncated geometric offset for tiny rates) against exact bin masses."""
    const = S.geometric_constants(lam)
    rng = np.random.default_rng(4)
    n = 100_000
    draws = _geometrics(np.array(const), rng, n)
    # Bins by quantiles of the exact law, out to probability 1e-4, plus one
    # bin straddling a super-block boundary.
    edges = np.unique(np.floor(-np.log(np.array([1.0, 0.7, 0.4, 0.2, 0.05, 0.01, 1e-3, 1e-4])) / lam))
    edges = np.unique(np.concatenate([edges, [const[1] - 1, const[1] + 1]])) if const[1] > 1 else edges
    cdf = -np.expm1(-lam * edges)  # P(G < e)
    probs = np.diff(np.append(cdf, 1.0))
    idx = np.searchsorted(edges, draws, side="right") - 1
    assert chi_square_pvalue(idx, np.arange(edges.size), probs) > 1e-4


@pytest.mark.parametrize("lam,width,r", [(0.7, 1, 1), (1.2, 5, 2), (0.4, 4, 4), (2.0**-20, 1, 1)])
def test_one_sided_tail_stage_matches_conditional_pmf(lam, width, r):
    """The tail stage alone: T >= 0 with P(T) proportional to w(T)."""
    c = S.staircase_constants(lam, width, r)
    rng = np.random.default_rng(5)
    draws = _one_sided(c, rng, 60_000)
    if lam < 1e-3:  # too many values: compare block counts instead
        assert stats.kstest(draws, stats.geom(-math.expm1(-lam), loc=-1).cdf).pvalue > 1e-4
        return
    top = int(np.quantile(draws, 0.999)) + 1  # values 0 .. top - 1, then "top or more"
    pmf = staircase_pmf(np.arange(top), lam, width, r)  # p0 w(m)
    rest = staircase_tail(np.array([top]), lam, width, r)  # p0 * sum of w(m), m >= top
    total = (1.0 + pmf[0]) / 2.0  # p0 * sum of w(m), m >= 0
    probs = np.append(pmf, rest) / total
    assert chi_square_pvalue(np.minimum(draws, top), np.arange(top + 1), probs) > 1e-4


def _fine_digits(x):
    """Digits making fine_uniform() return (about) x > 2**-62."""
    d1 = math.floor(x * DIGIT)
    if d1 >= 2**44:
        return [d1]
    return [d1, math.floor((x * DIGIT - d1) * DIGIT)]


def test_laplace_at_the_cap_reaches_every_grid_point_near_the_far_bound():
    """The audit's case: from y = lo, the last grid points before hi. At
    eps = 25 a 53-bit uniform missed 2/3 of them; the cap is 20, and at 20
    each is produced by some digit sequence."""
    mech = Laplace(20.0, bounds=(0.0, 1.0), clip=False).fit([0.0])
    lam, width, r = mech._staircase(mech.sensitivity_units_)
    _, big_l, lam_l, omb_l = S.geometric_constants(lam)
    units = mech.sensitivity_units_
    for m in range(units - 200, units + 1):
        # Z = +m = 1 + L S + i: sign/nonzero digit 0, the super-block S from a
        # fine uniform, the offset i from one digit (mid-cell values).
        s, i = divmod(m - 1, int(big_l))
        x = math.exp(-(s + 0.5) * lam_l)
        v = -math.expm1(-lam * (i + 0.5)) / omb_l
        digits = [0, *_fine_digits(x), math.floor(v * DIGIT)]
        out = mech._randomize_column(np.zeros(1), scripted(digits))
        assert out[0] / mech.granularity_ == m


def test_staircase_draw_reaches_nonzero_at_discrete_cap():
    mech = DiscreteLaplace(30.0, bounds=(0, 1), clip=False).fit([0])
    c = S.staircase_constants(*mech._staircase(mech.sensitivity_units_))
    assert 0 < c[6] < 2**20  # P(Z != 0) ~ 1.9e-13: a few thousand first digits
    # Sign digit: negative half; nonzero: 52-bit remainder 0; geometric: X ~ 1 -> block 1.
    z = S.staircase_draw(c, scripted([2**52, DIGIT - 1]))
    assert z == -1.0
    z = S.staircase_draw(c, scripted([2**52 + int(c[6]) + 1]))
    assert z == 0.0


def test_bulk_and_tail_paths_together_match_the_pmf():
    """The alias bulk plus the exact tail, on a coarse bulk that sends ~1% of
    draws to the tail, against the full pmf."""
    from skdp_label.mechanisms.classic._noise import staircase_alias_table

    lam, width, r = 0.6, 3, 2
    m0, tail, prob, alias = staircase_alias_table(lam, width, r, min_probability=3e-3, rtol=1e-3)
    noise = S.staircase_additive_bulk(
        np.zeros(200_000), np.random.default_rng(6), 1.0, S.staircase_constants(lam, width, r),
        S.bulk_constants(m0, tail, prob.shape[0]), prob, alias, False, 0.0, 0.0,
    )
    assert 0.003 < (np.abs(noise) >= m0).mean() < 0.1
    values = np.arange(noise.min(), noise.max() + 1)
    pmf = staircase_pmf(values.astype(np.int64), lam, width, r)
    assert chi_square_pvalue(noise, values, pmf / pmf.sum()) > 1e-4


def test_alias_fast_path_only_with_a_verified_bound():
    from skdp_label.mechanisms.classic._noise import alias_table_probabilities, staircase_alias_table

    for lam, width, r in [(1 / 400, 1, 1), (1.0, 400, 167), (30.0, 1, 1), (2.0**-20, 1, 1)]:
        table = staircase_alias_table(lam, width, r)
        if table is None:
            continue
        m0, tail, prob, alias = table
        pmf = staircase_pmf(np.arange(1 - m0, m0), lam, width, r)
        implied = alias_table_probabilities(prob, alias) * (1 - tail)
        np.testing.assert_allclose(implied, pmf, rtol=1e-9)


# -- any finite matrix: grouped by binary exponent -------------------------------


def _implied(tables, row):
    order, cdf, group_end, group_q, n_groups = tables
    out = np.zeros(order.shape[1])
    reach = 1.0
    for g in range(n_groups[row]):
        q = group_q[row, g]
        stop = 1.0 if g == n_groups[row] - 1 else (q if q >= 0 else 1.0 - (-q))
        lo = 0 if g == 0 else group_end[row, g - 1]
        hi = group_end[row, g]
        within = np.diff(np.concatenate([[0.0], cdf[row, lo:hi]]))
        out[order[row, lo:hi]] = reach * stop * within
        reach *= 1.0 - stop if q >= 0 else -q
    return out


def test_exponent_groups_reproduce_the_matrix():
    rng = np.random.default_rng(8)
    logs = rng.uniform(-300, 0, size=(6, 12))
    matrix = 10.0**logs
    matrix[rng.random(matrix.shape) < 0.2] = 0.0
    matrix[:, 0] += 1.0  # a dominant entry per row
    matrix /= matrix.sum(axis=1, keepdims=True)
    tables = S.exponent_groups(matrix)
    for row in range(matrix.shape[0]):
        np.testing.assert_allclose(_implied(tables, row), matrix[row], rtol=1e-12, atol=0)


def _tail_only_tables(matrix):
    # rtol = 0: no entry passes the alias table's error check, so every draw
    # goes (after one digit for the Bernoulli(1) of the tail) to group_draw.
    tables = S.categorical_tables(matrix, rtol=0.0)
    assert np.all(tables[0][:, 0] == DIGIT)  # the tail's digit threshold: all of them
    return tables


def test_group_draw_reaches_a_1e_300_entry():
    matrix = np.array([[1.0 - 1e-15, 1e-15, 1e-300, 0.0]])
    tables = _tail_only_tables(matrix)
    # A digit for the tail Bernoulli(1); then move on from the dominant group
    # (Bernoulli(1e-15): first digit 0), then from the 1e-15 group
    # (Bernoulli(1e-285): 18 zero digits), then any digit.
    picked = S.categorical_codes(np.array([0]), scripted([7] + [0] + [0] * 19 + [123]), tables)
    assert picked[0] == 2
    picked = S.categorical_codes(np.array([0]), scripted([7, DIGIT - 1, 5]), tables)
    assert picked[0] == 0


def test_group_draw_matches_the_matrix():
    matrix = np.array([[0.5, 0.3, 0.15, 0.04, 0.01, 0.0], [0.01, 0.02, 0.03, 0.04, 0.4, 0.5]])
    tables = _tail_only_tables(matrix)
    rng = np.random.default_rng(9)
    for row in range(2):
        draws = S.categorical_codes(np.full(60_000, row), rng, tables)
        nz = matrix[row] > 0
        assert chi_square_pvalue(draws, np.flatnonzero(nz), matrix[row][nz]) > 1e-4


def test_discrete_gaussian_far_tail_is_accepted_exactly():
    # The acceptance probability of a proposal at ~10 sigma is ~e^-50 < 2**-53:
    # a 53-bit uniform rejected it always; the exact Bernoulli accepts it with
    # that probability, i.e. when the digits fall below it.
    sigma = 3.0
    t = math.floor(sigma) + 1.0
    c = S.staircase_constants(1.0 / t, 1, 1)
    # Proposal: positive, nonzero, block 1 + geometric -> choose |Y| = 31 (~10 sigma).
    x = math.exp(-30.5 / t)  # geometric 30: |Y| = 1 + 30
    accept = math.exp(-((31 - sigma**2 / t) ** 2) / (2 * sigma**2))
    expansion = _expansion(accept, 3)
    digits = [0, *_fine_digits(x), *expansion[:1], max(expansion[1] - 1, 0)]
    out = S.discrete_gaussian(scripted(digits), 1, sigma, c)
    assert out[0] == 31.0


def test_long_super_blocks_use_the_exact_rejection_offset():
    lam = 2.0**-30  # L = 2**20 offsets: beyond one digit's inversion
    const = S.geometric_constants(lam)
    assert const[1] > S._MAX_INVERTED_OFFSETS
    draws = _geometrics(np.array(const), np.random.default_rng(12), 50_000)
    offsets = np.mod(draws, const[1]) / const[1]  # ~uniform, tilted by e^-(lam L u)
    tilt = const[2]
    cdf = lambda u: -np.expm1(-tilt * np.clip(u, 0, 1)) / -math.expm1(-tilt)  # noqa: E731
    assert stats.kstest(offsets, cdf).pvalue > 1e-4


def test_integer_span_beyond_the_exact_grid_is_refused():
    accountant = BudgetAccountant(epsilon=10.0)
    with pytest.raises(ValueError, match="noise range"):
        DiscreteLaplace(1.0, bounds=(0, 2**50), accountant=accountant).fit_transform(np.array([3.0]))
    assert accountant.spent_epsilon == 0.0
    DiscreteLaplace(1.0, bounds=(0, 2**30), random_state=0).fit_transform(np.array([3.0]))  # fine
