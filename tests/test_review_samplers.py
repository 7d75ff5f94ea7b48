"""Adversarial review of the new samplers (Gaussian envelope, staircase steps,
KeyedRows as a StructRef, numpy paths below NUMPY_BELOW).

* A keyed row of a staircase-family mechanism (Laplace, DiscreteLaplace,
  Staircase, DiscreteStaircase) gets the same noise whatever the size of its
  batch: the bulk table used to start at 10,000 labels, so a row released in
  a batch of 3 and in a batch of 10,000 under the same release id got two
  independent noises (a regression test of the fix). Different release ids
  differ.
* The Gaussian envelope sampler: every value's probability, computed from the
  table the kernel reads (alias masses, in-cell acceptance, tail geometric and
  its Bernoulli), is proportional to the discrete Gaussian's to 1e-9 relative,
  at the value 0, in every cell, at m0 - 1, m0 and deep in the tail; on a
  small table every value is drawn at its own rate (chi-squared value
  by value, so a skipped value would fail).
* The Gaussian mechanism at extreme epsilon, delta and bounds: outputs finite,
  on the grid, within the bounds, never -0.0; a sigma below one grid step
  falls back to the exact sampler and still reaches the neighbours.
* The cached ``_cell_table`` is a function of public quantities only: the
  same bytes for two fits on different labels, equal to a table rebuilt from
  ``sigma_units_``; no random state in the (pickled) object.
* The numpy paths below NUMPY_BELOW give what the kernels give: nearest
  domain value (ties at float midpoints, out of domain), the class-label
  check (NaN, inf, fractions), the interpreted prefix sums.
"""

import math
import pickle
import warnings

import numpy as np
import pytest

from _audit import assert_no_random_state, chi_square_pvalue
from skdp_label._kernels import _sampling as S
from skdp_label._kernels._philox import KeyedRows
from skdp_label.mechanisms import (
    DiscreteLaplace,
    DiscreteStaircase,
    Gaussian,
    Laplace,
    Staircase,
    make_mechanism,
)
from skdp_label.mechanisms.classic._noise import alias_table_probabilities, gaussian_cell_table
from skdp_label.release import privatize


# -- keyed staircase rows: independent of the batch size ----------------------------------

STAIRCASE_FAMILY = [
    lambda: Laplace(1.0, bounds=(0.0, 1.0)),
    lambda: Staircase(1.0, bounds=(0.0, 1.0)),
    lambda: DiscreteLaplace(0.5, bounds=(0, 1000)),
    lambda: DiscreteStaircase(0.5, bounds=(0, 1000)),
]


@pytest.mark.parametrize(
    "make", STAIRCASE_FAMILY, ids=["laplace", "staircase", "dlaplace", "dstaircase"]
)
def test_keyed_staircase_row_does_not_depend_on_its_batch_size(key, make):
    n = 10_000  # the bulk table's threshold for a Generator
    y = np.rint(np.linspace(0.0, 1000.0, n)) / (1000.0 if make()._integer is False else 1.0)
    ids = np.arange(n)
    big, release = privatize(y, make(), key, "r1", row_keys=ids)
    pick = np.array([0, 1, 2, n // 2, n - 1])
    np.testing.assert_array_equal(release.randomize(y[pick], ids[pick]), big[pick])
    alone, _ = privatize(y[pick], make(), key, "r1", row_keys=ids[pick])
    np.testing.assert_array_equal(alone, big[pick])
    np.testing.assert_array_equal(release.randomize(y[::-1], ids[::-1])[::-1], big)
    other, _ = privatize(y, make(), key, "r2", row_keys=ids)
    assert np.mean(other == big) < 0.9  # a new release id draws new noise


def test_keyed_gaussian_row_does_not_depend_on_its_batch_size(key):
    y = np.linspace(0.0, 1.0, 3000)
    ids = np.arange(3000)
    mech = Gaussian(1.0, bounds=(0.0, 1.0), clip=False)
    big, release = privatize(y, mech, key, "g", row_keys=ids)
    np.testing.assert_array_equal(release.randomize(y[7:8], ids[7:8]), big[7:8])
    other, _ = privatize(y, Gaussian(1.0, bounds=(0.0, 1.0), clip=False), key, "g2", row_keys=ids)
    assert not np.any(other == big)  # continuous-like noise: no shared value


# -- the Gaussian envelope: each value's probability from the table -----------------------


def _log_weight(table, z):
    """log of the unnormalised probability with which one proposal of the
    kernel ends on ``z`` (the accepted law is proportional to it)."""
    constants, prob, alias, _ = table
    tail = (constants[0] + constants[1]) / 2.0**53  # the exact Bernoulli's probability
    n_cells, big_l, m0, inv_two_var = int(constants[3]), constants[4], constants[6], constants[7]
    rate = constants[8]
    cells = alias_table_probabilities(prob, alias) * (1.0 - tail)
    m = np.abs(z).astype(np.float64)
    out = np.empty(m.shape)
    zero, bulk, far = m == 0, (m > 0) & (m < m0), m >= m0
    out[zero] = np.log(cells[n_cells] * constants[13] / big_l)  # offsets below L / K
    t = np.floor((m[bulk] - 1.0) / big_l) + 1.0
    m_first = 1.0 + big_l * (t - 1.0)
    offset = m[bulk] - m_first
    out[bulk] = np.log(cells[n_cells + t.astype(np.int64)] / big_l) + np.log(
        np.exp(-(offset * (2.0 * m_first + offset)) * inv_two_var)
    )
    g = m[far] - m0
    out[far] = (
        np.log(tail / 2.0) + np.log(-math.expm1(-rate)) - rate * g - g * g * inv_two_var
    )
    return out


@pytest.mark.parametrize(
    "sigma,args",
    [(0.9, ()), (3.7, ()), (200.0, ()), (200.0, (2, 1.5)), (2.0**20, ()), (7.3e5, (4, 3.0))],
)
def test_every_value_has_the_discrete_gaussian_probability(sigma, args):
    table = gaussian_cell_table(sigma, *args)
    assert table is not None
    constants = table[0]
    big_l, m0 = int(constants[4]), int(constants[6])
    # 0, both ends and the middle of every cell, m0 - 1, m0, and the tail.
    starts = 1 + big_l * np.arange(int(constants[3]))
    z = np.unique(np.concatenate([
        [0, 1, m0 - 1, m0, m0 + 1], starts, starts + big_l - 1, starts + big_l // 2,
        m0 + np.unique(np.geomspace(1, 6 * sigma, 200).astype(np.int64)),
    ]))
    z = np.concatenate([z, -z[z > 0]])
    log_ratio = _log_weight(table, z) + (z.astype(np.float64) ** 2) * constants[7]
    # The same constant (the normaliser) for every value: 1e-9 relative plus
    # the rounding of the exponentials (|log w| up to ~20 here).
    assert np.ptp(log_ratio) < 2e-9


def test_small_table_draws_every_value_at_its_rate():
    sigma = 12.0
    table = gaussian_cell_table(sigma, 3, 1.0)  # L = 4 values a cell, tail from m0 = 17
    assert table[0][4] == 4.0 and table[0][6] == 17.0
    rng = np.random.default_rng(11)
    draws = S.gaussian_additive(np.zeros(300_000), rng, 1.0, table, False, 0.0, 0.0)
    z = np.arange(-100, 101)
    p = np.exp(-(z * z) / (2 * sigma * sigma))
    p /= p.sum()
    assert np.all(np.abs(draws) <= 100)  # P(|Z| > 100 = 8.3 sigma) ~ 1e-16
    counts = np.array([(draws == v).sum() for v in (0, 16, -16, 17, -17, 1, -1, 4, 5)])
    assert np.all(counts > 0)  # the value 0, the last bulk value and m0 all occur
    # Value by value (no bins): a value the sampler skipped would fail.
    assert chi_square_pvalue(draws, z, p) > 1e-4


# -- the Gaussian mechanism at the edges ----------------------------------------------------


def _assert_valid_outputs(mech, out, clip=True):
    lo, hi = mech._bounds()
    assert np.all(np.isfinite(out))
    assert not np.any((out == 0) & np.signbit(out))  # no -0.0
    on_grid = np.rint(out / mech.granularity_) * mech.granularity_ == out
    if clip:  # the output set: grid points inside the bounds, and the bounds
        assert np.all((out >= lo) & (out <= hi))
        on_grid |= (out == lo) | (out == hi)
    assert np.all(on_grid)


@pytest.mark.parametrize(
    "eps,delta,bounds",
    [
        (1e-3, 1e-5, (0.0, 1.0)),
        (20.0, 1e-5, (0.0, 1.0)),
        (20.0, 0.5, (-1.0, 1.0)),
        (0.5, 1e-300, (-1e6, 1e6)),
        (1.0, 1e-5, (-3.0, -1.0)),
    ],
)
def test_gaussian_outputs_at_extreme_settings(eps, delta, bounds):
    lo, hi = bounds
    y = np.array([lo, hi, lo, (lo + hi) / 2, hi] * 400)
    mech = Gaussian(eps, delta=delta, bounds=bounds, random_state=3).fit(y[:1])
    assert mech._randomize_column(y[:1], np.random.default_rng(0)).shape == (1,)  # one label
    assert gaussian_cell_table(mech.sigma_units_) is not None  # the envelope, not the fallback
    _assert_valid_outputs(mech, mech.transform(y))
    free = Gaussian(eps, delta=delta, bounds=bounds, clip=False, random_state=3).fit(y[:1])
    out = free.transform(y)
    _assert_valid_outputs(free, out, clip=False)
    noise = (out - np.rint(y / free.granularity_) * free.granularity_) / free.sigma_
    assert 0.9 < noise.std() < 1.1


def test_gaussian_sigma_below_a_grid_step_falls_back_and_reaches_neighbours():
    # Labels near 2**50 force a grid step of 1/4: sigma is about one step.
    lo = 2.0**50
    mech = Gaussian(20.0, delta=0.5, bounds=(lo, lo + 0.25), clip=False, random_state=0).fit([lo])
    sigma = mech.sigma_units_
    assert sigma < 1.0
    assert gaussian_cell_table(sigma) is None  # bound not met: the exact CKS sampler
    out = mech.transform(np.full(20_000, lo))
    _assert_valid_outputs(mech, out, clip=False)
    units = (out - lo) / mech.granularity_
    p1 = math.exp(-1 / (2 * sigma * sigma))
    share = 2 * p1 / (1 + 2 * p1 + 2 * p1**4)  # P(|Z| = 1), the rest is ~1e-5 or less
    assert abs(np.mean(np.abs(units) == 1) - share) < 6 * math.sqrt(share / 20_000) + 1e-4


def test_gaussian_cell_table_is_public_and_the_object_holds_no_random_state():
    y1 = np.linspace(0.0, 1.0, 50)
    y2 = np.full(50, 0.25)
    mechs = []
    for y in (y1, y2):
        mech = Gaussian(1.0, bounds=(0.0, 1.0), random_state=0).fit(y)
        mech.transform(y)
        restored = pickle.loads(pickle.dumps(mech))
        assert not hasattr(restored, "_cell_table")  # never pickled (rebuilt when needed)
        mechs.append(mech)
        assert_no_random_state(restored)
    (s1, t1, r1), (s2, t2, r2) = (m._cell_table for m in mechs)  # sigma, table, packed records
    assert s1 == s2 == mechs[0].sigma_units_
    rebuilt = gaussian_cell_table(mechs[0].sigma_units_)
    for a, b, c in zip(t1, t2, rebuilt):
        assert a.tobytes() == b.tobytes() == c.tobytes()
    packed = S.envelope_records(rebuilt[1], rebuilt[2], rebuilt[0][4], rebuilt[3])
    assert r1.tobytes() == r2.tobytes() == packed.tobytes()
    assert all(isinstance(a, np.ndarray) and a.dtype.kind in "fi" for a in t1)
    for mech in mechs:
        assert_no_random_state(mech)


# -- numpy paths below NUMPY_BELOW vs the kernels --------------------------------------------


def test_nearest_domain_value_by_search_matches_the_bucket_kernel():
    from skdp_label.mechanisms._prior import nearest_by_search
    from skdp_label.mechanisms.bins._sampling import BinLookup

    rng = np.random.default_rng(2)
    for values in (np.array([0.0, 0.1, 0.3, 0.7, 1.0]), np.sort(rng.uniform(-5, 5, 300)),
                   np.linspace(-1.0, 1.0, 33) ** 3):
        mids = (values[:-1] + values[1:]) / 2
        y = np.concatenate([
            mids, np.nextafter(mids, np.inf), np.nextafter(mids, -np.inf), values,
            [values[0] - 1.0, values[-1] + 1.0, -np.inf, np.inf], rng.uniform(-6, 6, 2000),
        ])
        kernel = BinLookup(values, np.arange(len(values)))(y)
        np.testing.assert_array_equal(nearest_by_search(values, y), kernel)


def test_class_check_numpy_path_matches_the_kernel():
    from skdp_label.mechanisms._validation import _count_non_classes

    y = np.array([0.0, 1.0, 2.0, 2.5, -1.0, 3.0, np.nan, np.inf, -np.inf, -0.0, 1e300, 2.0 - 1e-16])
    for arr in (y, y[[0, 1, 2, 9]], np.array([0, 1, 2, 3, -1], dtype=np.int64),
                np.array([0, 1, 2, 7], dtype=np.uint8)):
        assert _count_non_classes(arr, 0, 2) == S.count_outside(arr, 0, 2, True)


def test_interpreted_prefix_sums_match_the_compiled_ones():
    from skdp_label.mechanisms.bins import _solver

    rng = np.random.default_rng(4)
    x = rng.uniform(0, 1, 4000) * 10.0 ** rng.integers(-30, 30, 4000)
    x = np.concatenate([x, [1e300, -1e300]])
    compiled = _solver._compensated_prefix(x)
    np.testing.assert_array_equal(_solver._prefix_sums(x), compiled)
    np.testing.assert_array_equal(_solver._compensated_prefix.py_func(x), compiled)


# -- a declared bound -0.0 ---------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    ["gaussian", "laplace", "staircase", "discrete-laplace", "discrete-staircase", "exponential"],
)
@pytest.mark.parametrize("bounds", [(-0.0, 10.0), (-10.0, -0.0)])
def test_a_negative_zero_bound_gives_no_negative_zero_output(name, bounds):
    # Clipped outputs (and a domain from linspace) took the declared -0.0:
    # two zeros of different sign, outside the declared output set.
    y = np.rint(np.linspace(bounds[0], bounds[1], 3000))
    mech = make_mechanism(name, epsilon=1.0, bounds=bounds, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the fixed-seed warning
        out = mech.fit_transform(y)
    assert np.any(out == 0)
    assert not np.any((out == 0) & np.signbit(out))


def test_gaussian_on_a_tiny_span_with_a_tiny_delta_fits():
    # The grid's sigma came from a root finder with an absolute tolerance
    # of 1e-14 of the span: on a span of 1e-290 it raised RuntimeError
    # ("failed to converge") instead of fitting.
    from skdp_label import BudgetAccountant

    acc = BudgetAccountant(5.0, 1e-3)
    mech = Gaussian(1.0, delta=1e-300, bounds=(0.0, 1e-290), accountant=acc, random_state=0)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out = mech.fit_transform(np.array([0.0, 1e-290, 5e-291]))
    assert gaussian_cell_table(mech.sigma_units_) is not None
    assert np.all((out >= 0.0) & (out <= 1e-290))
    assert mech.sigma_ == pytest.approx(1e-290 * Gaussian(1.0, delta=1e-300, bounds=(0.0, 1.0)).fit(
        [0.0]).sigma_, rel=1e-6)


def test_the_exactness_check_catches_a_cell_off_by_a_millionth():
    # Mutation of test_every_value_has_the_discrete_gaussian_probability:
    # one cell's mass 1 + 1e-6 times too large must be seen.
    from skdp_label.mechanisms.classic._noise import alias_table

    constants, prob, alias, squeeze = gaussian_cell_table(200.0)
    masses = alias_table_probabilities(prob, alias)
    masses[int(constants[3]) + 5] *= 1 + 1e-6
    broken = (constants, *alias_table(masses), squeeze)
    z = np.arange(0, int(constants[6]) + 50)
    log_ratio = _log_weight(broken, z) + (z.astype(np.float64) ** 2) * constants[7]
    assert np.ptp(log_ratio) > 5e-7


# -- the staircase family's tables at extreme epsilon -------------------------------------------


@pytest.mark.parametrize(
    "make",
    [
        lambda: Staircase(0.01, bounds=(0.0, 1.0)),
        lambda: Staircase(12.0, bounds=(0.0, 1.0)),
        lambda: Laplace(0.01, bounds=(0.0, 1.0)),
        lambda: Laplace(20.0, bounds=(0.0, 1.0)),
        lambda: DiscreteStaircase(1e-3, bounds=(0, 1000)),
        lambda: DiscreteStaircase(2.0, bounds=(0, 1000)),
        lambda: DiscreteLaplace(1e-3, bounds=(0, 5)),
        lambda: DiscreteLaplace(30.0, bounds=(0, 5)),
    ],
    ids=["st-0.01", "st-12", "lap-0.01", "lap-20", "dst-1e-3", "dst-2", "dlap-1e-3", "dlap-30"],
)
def test_staircase_family_table_is_exact_at_extreme_epsilon(make):
    from skdp_label.mechanisms.classic._noise import staircase_pmf, staircase_tail

    mech = make().fit([0])
    out = mech._randomize_column(np.zeros(10_000), np.random.default_rng(0))
    _assert_valid_outputs(mech, out)
    lam, width, r = mech._staircase(mech.sensitivity_units_)
    table = mech._alias_table[1]
    if table is None:  # the exact sampler everywhere (its own tests)
        return
    m0, tail, prob, alias, cell, squeeze, pieces = table
    exact_tail = 2 * staircase_tail(np.array([m0]), lam, width, r)[0]
    np.testing.assert_allclose(tail, exact_tail, rtol=1e-9)
    implied = alias_table_probabilities(prob, alias) * (1.0 - tail)
    half = (prob.shape[0] - 1) // 2
    if pieces is not None:  # entries are pieces of steps, of equal-weight values
        starts, sizes = pieces
        exact = staircase_pmf(starts, lam, width, r) * sizes
        assert sizes.sum() == 2 * m0 - 1
    elif cell > 1:  # entries are cells of the discrete Laplace: 0, then L values a cell
        t = np.arange(-half, half + 1)
        first = 1 + cell * (np.abs(t) - 1)
        exact = np.where(
            t == 0, staircase_pmf(np.zeros(1), lam, 1, 1)[0],
            staircase_tail(first, lam, 1, 1) - staircase_tail(first + cell, lam, 1, 1),
        )
        assert m0 == 1 + cell * half
    else:  # entries are values -(m0 - 1), ..., m0 - 1
        exact = staircase_pmf(np.arange(-half, half + 1), lam, width, r)
        assert half == m0 - 1
    np.testing.assert_allclose(implied, exact, rtol=1e-9)


@pytest.mark.parametrize("n", [99_999, 100_000])
@pytest.mark.parametrize("bad", [2.5, np.nan, 11.0, -1.0])
def test_a_non_class_label_is_refused_on_both_sides_of_numpy_below(n, bad):
    from skdp_label import BudgetAccountant

    y = np.arange(n, dtype=np.float64) % 11
    y[n // 2] = bad
    acc = BudgetAccountant(5.0)
    mech = make_mechanism("rr", epsilon=1.0, classes=np.arange(11), accountant=acc)
    with pytest.raises(ValueError):
        mech.fit_transform(y)
    assert acc.spent_epsilon == 0.0 and acc.ledger == []  # nothing spent


def test_envelope_tables_are_exact_or_absent_over_sigma():
    # Every sigma from a third of a unit to 2**21 units: either no table
    # (the exact sampler) or a table whose values all have the right
    # probability (the bound is checked when the table is built).
    built = 0
    for sigma in np.geomspace(0.3, 2.0**21, 40):
        table = gaussian_cell_table(sigma)
        if table is None:
            assert sigma < 3.0  # the mechanism's sigmas (~2**20 units) always get one
            continue
        built += 1
        c = table[0]
        big_l, m0 = int(c[4]), int(c[6])
        starts = 1 + big_l * np.arange(int(c[3]))
        z = np.unique(np.concatenate([[0, m0 - 1, m0, m0 + 7], starts, starts + big_l - 1]))
        log_ratio = _log_weight(table, z) + (z.astype(np.float64) ** 2) * c[7]
        assert np.ptp(log_ratio) < 2e-9
    assert built >= 35


@pytest.mark.parametrize("name", ["gaussian", "laplace", "staircase", "discrete-laplace"])
def test_negative_zero_labels_give_no_negative_zero_output(name):
    y = np.full(20_000, -0.0)
    mech = make_mechanism(name, epsilon=3.0, bounds=(0, 1), clip=False)
    out = mech.fit(y[:1])._randomize_column(y, np.random.default_rng(1))
    assert not np.any((out == 0) & np.signbit(out))
    # Zero noise is rare on the continuous grids: the kernels on coarse
    # noise (the envelope with one value a cell, and the exact sampler).
    rng = np.random.default_rng(2)
    for out in (
        S.gaussian_additive(y, rng, 1.0, gaussian_cell_table(3.7), False, 0.0, 0.0),
        S.gaussian_additive(y, rng, 1.0, gaussian_cell_table(40.0, 8, 2.0), False, 0.0, 0.0),
        S.discrete_gaussian(rng, y.shape[0], 0.8, S.staircase_constants(1.0, 1, 1)) + y,  # t = 1
    ):
        assert np.mean(out == 0) > 0.005
        assert not np.any((out == 0) & np.signbit(out))


def test_staircase_cached_tables_are_public():
    tables = []
    for y in (np.zeros(20_000), np.linspace(0.0, 1.0, 20_000)):
        mech = Staircase(0.5, bounds=(0.0, 1.0), random_state=0).fit(y[:5])
        mech._randomize_column(y, np.random.default_rng(0))
        restored = pickle.loads(pickle.dumps(mech))
        assert_no_random_state(restored)
        assert not hasattr(restored, "_alias_table")  # never pickled (rebuilt when needed)
        tables.append(mech._alias_table)
    (k1, t1, r1), (k2, t2, r2) = tables  # key, tables, their packed records
    assert k1 == k2
    for a, b in zip((*t1, r1), (*t2, r2)):
        assert (a is None and b is None) or np.asarray(a).tobytes() == np.asarray(b).tobytes()


# -- KeyedRows (a StructRef) reads numpy's Philox streams -----------------------------------------


def _numpy_row_stream(k0, k1, stage, lo, hi, n):
    bits = np.random.Philox(
        key=np.array([k0, k1], dtype=np.uint64),
        counter=np.array([0, lo, stage, hi], dtype=np.uint64),
    )
    return (bits.random_raw(n) >> np.uint64(11)).astype(np.float64) * 2.0**-53


def test_keyed_rows_read_numpy_philox_streams_row_by_row_and_stage_by_stage():
    k0, k1 = 0x9E3779B97F4A7C15, 0xD1B54A32D192ED03
    lo = np.array([3, 2**64 - 1, 0, 77], dtype=np.uint64)
    hi = np.array([5, 1, 2**63, 0], dtype=np.uint64)
    rows = KeyedRows(np.uint64(k0), np.uint64(k1), np.uint64(9), lo, hi)
    for stage in (9, 10):  # a second pass over the rows reads the next stage
        for i in range(4):
            rows.begin_row(i)
            got = [rows.random() for _ in range(6)]  # across a 4-word block
            np.testing.assert_array_equal(got, _numpy_row_stream(k0, k1, stage, lo[i], hi[i], 6))
    first = KeyedRows(np.uint64(k0), np.uint64(k1), np.uint64(0), lo, hi).random_rows(4)
    expected = [_numpy_row_stream(k0, k1, 0, lo[i], hi[i], 1)[0] for i in range(4)]
    np.testing.assert_array_equal(first, expected)


def test_gaussian_cell_table_follows_a_refit():
    mech = Gaussian(1.0, bounds=(0.0, 1.0)).fit([0.0])
    mech._randomize_column(np.zeros(3), np.random.default_rng(0))
    old = mech._cell_table
    mech.set_params(epsilon=4.0).fit([0.0])
    mech._randomize_column(np.zeros(3), np.random.default_rng(0))
    assert mech._cell_table[0] == mech.sigma_units_ != old[0]
    for a, b in zip(mech._cell_table[1], gaussian_cell_table(mech.sigma_units_)):
        assert a.tobytes() == b.tobytes()


@pytest.mark.parametrize("lam,width,r", [(0.7, 40, 1), (0.7, 40, 40), (0.05, 7, 6), (3.0, 2, 1)])
def test_step_tables_tile_and_are_exact_at_the_extreme_step_lengths(lam, width, r):
    from skdp_label.mechanisms.classic._noise import (
        staircase_cell_table, staircase_pmf, staircase_tail,
    )

    # r = 1 puts single values in their own steps: where one is too small
    # for the 1e-9 bound the table is refused (the exact sampler instead);
    # then check the looser table at its own bound.
    rtol = 1e-9
    table = staircase_cell_table(lam, width, r)
    if table is None:
        rtol = 1e-7
        table = staircase_cell_table(lam, width, r, rtol=rtol)
    assert table is not None
    m0, tail, prob, alias, starts, sizes = table
    assert np.all(sizes > 0)
    order = np.argsort(starts)
    assert starts[order][0] == -(m0 - 1) and (starts + sizes)[order][-1] == m0
    np.testing.assert_array_equal(starts[order][1:], (starts + sizes)[order][:-1])
    lo_w = staircase_pmf(starts, lam, width, r)
    np.testing.assert_array_equal(lo_w, staircase_pmf(starts + sizes - 1, lam, width, r))
    implied = alias_table_probabilities(prob, alias) * (1.0 - tail)
    np.testing.assert_allclose(implied, lo_w * sizes, rtol=rtol)
    exact_tail = 2 * staircase_tail(np.array([m0]), lam, width, r)[0]
    np.testing.assert_allclose(tail, exact_tail, rtol=rtol)
    # The kernel reaches both ends of the bulk and m0 (a fat tail: few blocks).
    small = staircase_cell_table(lam, width, r, min_probability=0.02)
    if small is not None:
        m0, tail, prob, alias, starts, sizes = small
        z = S.staircase_additive_bulk(
            np.zeros(200_000), np.random.default_rng(3), 1.0, S.staircase_constants(lam, width, r),
            S.bulk_constants(m0, tail, prob.shape[0], cell=0), prob, alias, False, 0.0, 0.0,
            pieces=(starts, sizes),
        )
        support = np.arange(-(m0 + 3 * width), m0 + 3 * width + 1)
        p = staircase_pmf(support, lam, width, r)
        for v in (0, m0 - 1, -(m0 - 1), m0, -m0):
            expected = p[support == v][0] * 200_000
            if expected > 50:
                assert np.sum(z == v) > expected / 3


class _Digits:
    """A numpy-like source whose random() returns the given 53-bit digits."""

    def __init__(self, digits):
        self.digits = list(digits)

    def random(self):
        return self.digits.pop(0) / 2.0**53


def _rr_by_the_definition(code, k, d, qd, frac, limit, m, rng):
    """k-ary RR of one code from its first digit d (the pre-rewrite rr_code)."""
    from skdp_label._kernels._sampling import bernoulli_exact, uniform_index
    from skdp_label._kernels._twin import twin

    if d < qd:
        j = int(d) % int(m) if d < limit else int(twin(uniform_index)(m, rng))
    elif d > qd or not twin(bernoulli_exact)(frac, rng):
        return code
    else:
        j = int(twin(uniform_index)(m, rng))
    out = code + 1 + j
    return out - k if out >= k else out


@pytest.mark.parametrize("k", [1, 2, 3, 4, 7, 1000, 2**31 + 5, 2**40 + 3])
def test_rr_common_and_rare_paths_are_rr_at_every_edge_digit(k):
    # Review of the branch-free k-ary RR (rr_code_common / _rr_rare / rr_code_rare,
    # _residue's float quotient, _shift_class's masks): at the digits where a mask or
    # a quotient could be off by one (0, the top, limit +- 1, qd +- 1, multiples of m)
    # it gives the class the plain definition gives, for every flip probability
    # (none, tiny, one digit wide, around 1/2, nearly 1). Through the twins, which
    # tests/test_twins.py holds bit-identical to the kernels.
    from skdp_label._kernels import _sampling as S
    from skdp_label._kernels._twin import twin

    common, rare, is_rare = twin(S.rr_code_common), twin(S.rr_code_rare), twin(S._rr_rare)
    for q in [0.0, 1e-300, 3 * 2.0**-53, 0.3, 0.5, 0.999999, 1 - 2.0**-53]:
        qd, frac, limit, m = S.rr_constants(k, q)
        edges = {0, 1, 2**53 - 1, qd, qd - 1, qd + 1, limit, limit - 1, limit + 1,
                 m, m - 1, 2 * m, 2 * m - 1}
        for d in sorted(float(e) for e in edges if 0 <= e < 2**53):
            for code in {0, k // 2, k - 1}:
                fresh = [12345.0, 2**52 + 7.0, 999.0, 5.0] * 3
                got = common(code, k, d, limit, m)
                if is_rare(d, qd, limit):
                    got = rare(code, k, d, qd, frac, m, _Digits(fresh))
                want = _rr_by_the_definition(code, k, d, qd, frac, limit, m, _Digits(fresh))
                assert got == want, (k, q, d, code)
