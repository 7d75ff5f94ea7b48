"""Adversarial review of wave 5's merges (interval sampler, one-pass label
check, staircase pieces / Gaussian envelope, counting before the ledger write).

Each test attacks one merge against the privacy invariants or the exactness
model: matrices built to fool the interval sampler's structure detection get
None or tables whose law (recounted exactly, in Fractions) is the matrix; a
fitted mechanism whose matrix is replaced, pickled, copied or cloned samples
its current matrix, never stale tables; extreme epsilon and tiny grids;
labels the one-pass check sees at the edges of memory (first / last index,
F order, read-only, memory-mapped, -0.0, subnormals, non-native byte order)
are judged as the two reductions judge them, and nothing is charged when they
are refused; keyed releases of the new staircase / Gaussian tables at small
and large epsilon do not depend on the batch split; every refusal of a spend
leaves the mechanism's counts exactly as they were.
"""

import copy
import os
import pickle
import threading
import warnings

import numpy as np
import pytest
from _audit import audit_messages_have_no_labels
from sklearn.base import clone
from test_interval_sampler import _two_level, _worst_relative_error

from skdp_label import BudgetAccountant, BudgetExceededError, LedgerUnavailableError
from skdp_label._kernels._interval import interval_law, interval_tables
from skdp_label.mechanisms import (
    BiasVarianceRandomizer,
    OptimalUnbiased,
    make_mechanism,
)
from skdp_label.mechanisms._validation import NUMPY_BELOW, labels_within
from skdp_label.release import KeyedRelease, privatize

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")


# -- interval sampler: structure detection --------------------------------------------------


def _window_column(matrix, row):
    low = matrix.min(axis=0)
    window = np.flatnonzero(matrix[row] > low * (1 + 1e-9))
    return low, window[window.size // 2]


def _adversarial(kind):
    """A two-level matrix broken in one place, each time just past what the
    detection tolerates (or just inside it)."""
    m = _two_level(tiny_low=(3, 30) if kind.startswith("tail-") else ())
    low, k = _window_column(m, 5)
    if kind == "tiny-middle":  # a third level, a millionth above the low one, inside a window
        m[5, k] = low[k] * (1 + 1e-6)
    elif kind == "zero-in-window":
        m[5, k] = 0.0
    elif kind == "gap-1ulp":  # the window split by an entry one ulp above the low level
        m[5, k] = np.nextafter(low[k], 1.0)
    elif kind == "gap-2e-12":  # just above the window threshold (1e-12 relative)
        m[5, k] = low[k] * (1 + 2e-12)
    elif kind == "interior-1e-10":  # an interior high cell 1e-10 lower in one row
        m[5, k] -= 1e-10 * m[5, k]
    elif kind == "low-mass-differs":  # one row's low level lifted in one column
        m[3, 0] += 1e-7
    elif kind == "high-in-zero-column":  # a column zero everywhere but one row
        m[:, 0] = 0.0
        m[4, 0] = 0.02
    elif kind == "tail-middle":  # a third level in a tiny-low column (the exact tail's)
        m[5, 3] = 3e-13
    elif kind == "tail-zero":  # a tiny-low column with one zero entry
        m[7, 30] = 0.0
    return m / m.sum(axis=1, keepdims=True)


_KINDS = ["tiny-middle", "zero-in-window", "gap-1ulp", "gap-2e-12", "interior-1e-10",
          "low-mass-differs", "high-in-zero-column", "tail-middle", "tail-zero"]


@pytest.mark.parametrize("kind", _KINDS)
def test_a_broken_two_level_matrix_gets_none_or_its_exact_law(kind):
    matrix = _adversarial(kind)
    tables = interval_tables(matrix)
    if tables is not None:
        # Recounted in Fractions from the tables alone (independent of interval_law);
        # asserts too that no entry of probability 0 is sampled.
        assert _worst_relative_error(tables, matrix) <= 1e-9, kind


def test_the_adversarial_matrices_reach_the_sampler():
    # The attack above is only an attack if some broken matrices are accepted.
    accepted = [k for k in _KINDS if interval_tables(_adversarial(k)) is not None]
    assert {"tail-middle", "tail-zero"} <= set(accepted), accepted


# -- interval sampler: the fitted mechanism's cache -----------------------------------------

_Y = np.random.default_rng(0).uniform(0.0, 10.0, 20_000)


def _fit(cls=OptimalUnbiased, eps=1.0, seed=3):
    return cls(eps, bounds=(0, 10), resolution=1.0, random_state=seed).fit(_Y)


def test_a_matrix_set_after_fit_is_refused_and_the_fitted_one_cannot_be_edited():
    # The tables are a cache of the fitted matrix: a matrix set after fit (even
    # another two-level, epsilon-DP one) is refused before the charge, and the
    # fitted one is read-only, so the cache can never be stale.
    acc = BudgetAccountant()
    used = _fit().set_params(accountant=acc)
    used = used.fit(_Y)
    fitted = used.transition_matrix_
    before = used.transform(_Y)  # builds the interval tables of the eps = 1 matrix
    assert used._interval_tables() is not None
    with pytest.raises(ValueError, match="read-only"):
        fitted[0, 0] = 0.5
    spent = acc.spent_epsilon
    for other in (fitted[::-1, ::-1].copy(), fitted.copy() * 0 + 1.0 / fitted.shape[1]):
        used.transition_matrix_ = other
        with pytest.raises(ValueError, match=r"fitted attribute\(s\) transition_matrix_ changed"):
            used.transform(_Y)
        assert acc.spent_epsilon == spent
    used.transition_matrix_ = fitted.copy()  # equal, but not what fit bound: refused too
    with pytest.raises(ValueError, match="transition_matrix_ changed"):
        used.transform(_Y)
    used.transition_matrix_ = fitted
    np.testing.assert_array_equal(used.transform(_Y), before)


@pytest.mark.parametrize("how", ["pickle", "deepcopy", "clone"])
def test_copies_sample_the_same_release_and_carry_no_tables(how):
    mech = _fit(BiasVarianceRandomizer)
    expected = _fit(BiasVarianceRandomizer).transform(_Y)
    mech.transform(_Y)  # the cache exists on the original
    assert "_interval_sampler" in vars(mech)
    if how == "pickle":
        state = mech.__getstate__()
        assert "_interval_sampler" not in state and "_row_sampler" not in state
        twin = pickle.loads(pickle.dumps(mech))
    elif how == "deepcopy":
        twin = copy.deepcopy(mech)
    else:
        twin = clone(mech).fit(_Y)
    assert "_interval_sampler" not in vars(twin)
    np.testing.assert_array_equal(twin.transform(_Y), expected)


def test_stale_tables_smuggled_into_a_pickle_are_dropped():
    # A pickle from another version (or an attacker) carrying interval tables of another matrix.
    mech = _fit()
    foreign = _fit(eps=2.0)
    foreign.transform(_Y)
    state = {**mech.__dict__, "_interval_sampler": foreign._interval_sampler}
    loaded = OptimalUnbiased.__new__(OptimalUnbiased)
    loaded.__setstate__(state)
    assert "_interval_sampler" not in vars(loaded)
    np.testing.assert_array_equal(loaded.transform(_Y), _fit().transform(_Y))


@pytest.mark.filterwarnings("ignore:bias-variance solver failed:RuntimeWarning")
@pytest.mark.parametrize("cls", [OptimalUnbiased, BiasVarianceRandomizer])
@pytest.mark.parametrize("eps", [0.01, 20.0, 30.0])
@pytest.mark.parametrize("domain", [[0.0, 1.0], [0.0, 1.0, 2.0]])
def test_extreme_epsilon_on_tiny_grids(cls, eps, domain):
    mech = cls(eps, domain=domain, random_state=0).fit(np.array(domain * 10))
    matrix = mech.transition_matrix_
    tables = interval_tables(matrix)
    if tables is not None:
        assert _worst_relative_error(tables, matrix) <= 1e-9
    # The release samples row 0 of the matrix: a label equal to domain[0], 10^6 times.
    n = 1_000_000
    out = mech.transform(np.full(n, domain[0]))
    outputs = mech.output_values_
    assert np.isin(out, outputs).all()
    freq = np.array([np.count_nonzero(out == v) for v in outputs]) / n
    p = matrix[0] / matrix[0].sum()
    # 6 standard deviations (+ one label): a swapped or stale row is off by
    # ~eps / 2 = 0.005 at eps = 0.01 (10 sd) and by ~1 at large eps.
    assert np.all(np.abs(freq - p) <= 6 * np.sqrt(p * (1 - p) / n) + 1 / n), (freq, p)


# -- labels_within: the one-pass label check --------------------------------------------------


@pytest.fixture
def compiled_within():
    # The one-pass check's kernel compiled here (on a cold cache, releases below
    # the compile-here size take the two reductions: labels_within says False).
    from skdp_label._kernels._sampling import count_outside

    count_outside(np.zeros(1), 0.0, 1.0, False)


def _labels(shape=(NUMPY_BELOW + 5,), order="C"):
    n = int(np.prod(shape))
    return np.asarray(np.resize([3.0, 6.0, 8.0, 2.0], n).reshape(shape), order=order)


@pytest.mark.parametrize("bad", [np.nan, -np.inf, 10.000000000000002, -5e-324])
@pytest.mark.parametrize("where", [(0, 0), (-1, 0), (0, 1), (-1, -1)])
def test_f_ordered_two_column_labels_are_checked_everywhere(bad, where, compiled_within):
    y = _labels((NUMPY_BELOW, 2), order="F")
    assert y.flags.f_contiguous and not y.flags.c_contiguous
    assert labels_within(y, 0.0, 10.0)
    y[where] = bad
    assert not labels_within(y, 0.0, 10.0)


def test_read_only_and_memory_mapped_labels(tmp_path, compiled_within):
    y = _labels()
    y.setflags(write=False)
    assert labels_within(y, 0.0, 10.0)
    path = tmp_path / "labels.f8"
    bad = _labels()
    bad[-1] = np.nan
    bad.tofile(path)
    mapped = np.memmap(path, dtype=np.float64, mode="r")
    assert not labels_within(mapped, 0.0, 10.0)
    _labels().tofile(path)
    assert labels_within(np.memmap(path, dtype=np.float64, mode="r"), 0.0, 10.0)


def test_signed_zero_subnormals_and_the_bounds_themselves(compiled_within):
    y = _labels()
    y[0], y[-1] = -0.0, 10.0  # -0.0 == 0.0: inside [0, 10]; the bound itself: inside
    assert labels_within(y, 0.0, 10.0)
    y[0] = 5e-324  # a subnormal above 0: inside [0, 10], outside [1e-300, 10]
    assert labels_within(y, 0.0, 10.0)
    assert not labels_within(y, 1e-300, 10.0)
    y[0] = -5e-324  # below 0 by the smallest step
    assert not labels_within(y, 0.0, 10.0)


@pytest.mark.parametrize("bad", [np.nan, 13.37, np.nextafter(0.0, -1.0)])
def test_big_endian_labels_take_the_reductions_and_keep_the_policy(bad):
    acc = BudgetAccountant()
    mech = make_mechanism("laplace", epsilon=1.0, bounds=(0, 10), accountant=acc,
                          random_state=0).fit(_labels()[:20])
    mech.transform(_labels()[:20])
    spent, counted = acc.spent_epsilon, mech.epsilon_spent_
    y = _labels().astype(">f8")
    assert not labels_within(y, 0.0, 10.0)  # not applicable: the caller checks itself
    y[-1] = bad
    error = audit_messages_have_no_labels(lambda: mech.transform(y), [13.37], public=(0, 10))
    assert isinstance(error, ValueError)
    assert acc.spent_epsilon == spent and mech.epsilon_spent_ == counted


# -- staircase pieces / Gaussian envelope: keyed releases ---------------------------------------


@pytest.mark.parametrize("name", ["staircase", "gaussian", "optimal-unbiased", "bias-variance"])
@pytest.mark.parametrize("eps", [0.01, 10.0])
def test_keyed_releases_do_not_depend_on_the_batch_split(name, eps, key):
    n = 3000
    y = ((np.arange(n) * 7) % 11).astype(float)
    kw = {"delta": 1e-6} if name == "gaussian" else {}
    mech = make_mechanism(name, epsilon=eps, bounds=(0.0, 10.0), **kw)
    full, _ = privatize(y, mech, key, "r1")
    again = KeyedRelease(mech, key, "r1")
    parts = np.array_split(np.random.default_rng(1).permutation(n), 5)
    if again.needs_counts:
        for p in parts:
            again.add_counts(y[p], p)
    again.fit(n)
    batched = np.empty(n)
    for p in parts:
        batched[p] = again.randomize(y[p], p)
    np.testing.assert_array_equal(full, batched)
    assert not np.array_equal(full, privatize(y, mech, key, "r2")[0])


# -- _charge: refusals leave the counts exact ---------------------------------------------------


def test_a_refused_ledger_leaves_the_counts_exact(tmp_path):
    ledger = tmp_path / "ledger.jsonl"
    acc = BudgetAccountant(epsilon=10.0, ledger=ledger)
    mech = make_mechanism("laplace", epsilon=0.3, bounds=(0, 10), accountant=acc).fit(_Y[:50])
    mech.transform(_Y[:50])
    before = (mech.epsilon_spent_, mech.delta_spent_, list(mech.charges_))
    os.remove(ledger)
    with pytest.raises(LedgerUnavailableError):
        mech.transform(_Y[:50])
    assert (mech.epsilon_spent_, mech.delta_spent_, list(mech.charges_)) == before


@pytest.mark.parametrize("n_labels", [-1, 2.5, True])
def test_a_bad_label_count_leaves_the_counts_exact(n_labels):
    acc = BudgetAccountant()
    mech = make_mechanism("laplace", epsilon=0.3, bounds=(0, 10), accountant=acc).fit(_Y[:50])
    mech.transform(_Y[:50])
    before = (mech.epsilon_spent_, mech.delta_spent_, list(mech.charges_))
    with pytest.raises(ValueError, match="n_labels"):
        mech._charge(0.5, 0.0, n_labels=n_labels, step="labels")
    assert (mech.epsilon_spent_, mech.delta_spent_, list(mech.charges_)) == before
    assert acc.spent_epsilon == pytest.approx(0.3)


def test_budget_refusals_after_several_spends_keep_the_exact_sum():
    acc = BudgetAccountant(epsilon=1.0)
    mech = make_mechanism("laplace", epsilon=0.1, bounds=(0, 10), accountant=acc).fit(_Y[:50])
    for _ in range(8):
        mech.transform(_Y[:50])
    counted = mech.epsilon_spent_
    for _ in range(3):
        with pytest.raises(BudgetExceededError):
            mech._charge(0.5, 0.0, n_labels=50, step="labels")
    assert mech.epsilon_spent_ == counted  # bit for bit: restored, not subtracted
    assert counted == pytest.approx(acc.spent_epsilon)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        mech.transform(_Y[:50])  # what is left (0.2) is still spendable
    assert mech.epsilon_spent_ == pytest.approx(0.9) == pytest.approx(acc.spent_epsilon)


# -- staircase pieces at small epsilon; old-layout tables in a state ----------------------------


@pytest.mark.parametrize("eps", [0.005, 0.01, 0.02])
def test_small_epsilon_piece_tables_are_the_staircase_value_by_value(eps):
    # test_staircase_steps checks every entry's weight at eps 0.3-5; at small eps
    # (thousands of steps, most entries of other lengths or capped) the same check.
    from skdp_label.mechanisms import Staircase
    from skdp_label.mechanisms.classic._noise import (
        alias_table_probabilities,
        staircase_cell_table,
        staircase_pmf,
        staircase_tail,
    )

    mech = Staircase(eps, bounds=(0.0, 400.0)).fit([0.0])
    lam, width, r = mech._staircase(mech.sensitivity_units_)
    m0, tail, prob, alias, starts, sizes = staircase_cell_table(lam, width, r)
    np.testing.assert_allclose(tail, 2 * staircase_tail(np.array([m0]), lam, width, r)[0],
                               rtol=1e-12)
    implied = alias_table_probabilities(prob, alias) * (1.0 - tail)
    first = staircase_pmf(starts.astype(np.int64), lam, width, r)
    last = staircase_pmf((starts + sizes - 1).astype(np.int64), lam, width, r)
    np.testing.assert_array_equal(first, last)  # each entry inside one step
    np.testing.assert_allclose(implied / sizes, first, rtol=1e-9, atol=0)
    assert sizes.sum() == 2 * m0 - 1
    order = np.argsort(starts)
    np.testing.assert_array_equal(starts[order][1:], (starts + sizes)[order][:-1])


@pytest.mark.parametrize("name", ["staircase", "gaussian"])
def test_tables_of_another_layout_in_a_state_are_never_read(name):
    # A pickle made by another version (its packed tables in another layout):
    # simulated by packing garbage of the right shapes under the cache names.
    kw = {"delta": 1e-6} if name == "gaussian" else {}
    y = _Y[:20_000]  # the table path (from 10,000 labels)

    def fit():
        return make_mechanism(name, epsilon=0.01 if name == "staircase" else 1.0,
                              bounds=(0.0, 10.0), random_state=5, **kw).fit(y)

    used = fit()
    expected = used.transform(y)
    state = dict(used.__dict__)
    cached = [k for k in used._PACKED_CACHES if k in state]
    assert cached  # the release built its tables
    for k in cached:
        key, table, records = state[k]
        state[k] = (key, table, None if records is None else np.zeros_like(records))
    loaded = type(used).__new__(type(used))
    loaded.__setstate__(state)
    assert not any(k in vars(loaded) for k in cached)
    np.testing.assert_array_equal(loaded.transform(y), expected)
    assert not np.array_equal(expected, fit().set_params(random_state=6).transform(y))


class _SlowRefusal(BudgetAccountant):
    """Refuses a spend of 0.5 only after another thread has spent meanwhile."""

    def __init__(self):
        super().__init__()
        self.entered, self.proceed = threading.Event(), threading.Event()

    def spend(self, epsilon, *args, **kwargs):
        if epsilon == 0.5:
            self.entered.set()
            assert self.proceed.wait(10)
            raise BudgetExceededError("refused")
        return super().spend(epsilon, *args, **kwargs)


def test_a_refusal_does_not_erase_a_concurrent_spend():
    # Counting before the ledger write opened a window as long as the spend
    # (file lock, fsync): a refusal restoring the count it saw before would
    # erase a spend another thread made on the same object meanwhile (the
    # count below the ledger's: an under-count).
    acc = _SlowRefusal()
    mech = make_mechanism("laplace", epsilon=0.1, bounds=(0, 10), accountant=acc).fit(_Y[:50])
    mech.transform(_Y[:50])
    refused = []

    def refuse():
        try:
            mech._charge(0.5, 0.0, n_labels=50, step="labels")
        except BudgetExceededError:
            refused.append(True)

    worker = threading.Thread(target=refuse)
    worker.start()
    assert acc.entered.wait(10)
    mech.transform(_Y[:50])  # another spend on the same object while the refusal is pending
    acc.proceed.set()
    worker.join(10)
    assert refused == [True]
    assert acc.spent_epsilon == pytest.approx(0.2)
    assert mech.epsilon_spent_ == pytest.approx(acc.spent_epsilon)
    assert len(mech.charges_) == 2


# -- a matrix of another shape set after fit ----------------------------------------------------


@pytest.mark.parametrize("name", ["optimal-unbiased", "exponential", "rr-with-prior-regression"])
@pytest.mark.parametrize("shape", ["wide", "short"])
def test_a_matrix_of_another_shape_is_refused_before_anything_is_spent(name, shape):
    # The kernels index the outputs (and rows) with the matrix's tables without
    # bounds checks: a wider matrix set after fit released process memory as
    # labels (values like 2.3e-321) or crashed the interpreter.
    acc = BudgetAccountant()
    y = (np.arange(20_000) % 11).astype(float)
    mech = make_mechanism(name, epsilon=1.0, bounds=(0.0, 10.0), accountant=acc,
                          random_state=0).fit(y)
    matrix = mech.transition_matrix_
    mech.transition_matrix_ = (np.hstack([matrix, matrix]) / 2 if shape == "wide"
                               else matrix[:3])
    spent = acc.spent_epsilon
    with pytest.raises(ValueError, match=r"transition_matrix_ changed since fit"):
        mech.transform(y)
    # Without the fit's binding (a pickle of an earlier version), the shape
    # check still refuses before the kernels read past the arrays.
    del mech._fit_state
    with pytest.raises(ValueError, match=r"transition_matrix_ has shape"):
        mech.transform(y)
    assert acc.spent_epsilon == spent
    mech.transition_matrix_ = matrix  # the fitted matrix samples again
    assert np.isin(mech.transform(y), mech.output_values_).all()
