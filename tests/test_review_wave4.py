"""Adversarial review of the changes merged after c862cc3 (wave 4).

* The PCG64 state held in a kernel's registers (``_pcg64.hold``): the
  additive kernels, on every path (bulk values, cells, steps, the Gaussian
  envelope, with their rare out-of-line draws frequent), read the same
  digits and leave the Generator in the same state whether they draw
  through the inlined stream, through numba's own Generator, through
  MT19937 or as Python twins; keyed rows the same compiled or twin; two
  threads on one Generator read consecutive blocks, never a digit twice.
* Packed cell records (``cell_records`` / ``envelope_records``): on tables
  at the extremes (cells of 2**30 and 2**35 values, up to the 2**52 limit)
  every entry, kept or aliased, gives the exact first value and sign of the
  entry ``alias_records`` picks; past the limit a ValueError; zeros of the
  Gaussian envelope are +0.0.
* The guard's pooled constant: predict's argmax lies in the randomized set
  S (it did not, by rounding, where a class outside S tied S's top); what
  is kept is noisy, reset on refit, and survives clone / pickle.
* The shifted MSE scorer of rank-deficient unbiased randomizers: score
  differences are the true MSE differences in exact expectation for random
  priors, random per-row predictions and labels *off* the grid (unbiased
  randomized rounding), and ``debiased_mean_bias_bound`` = 0 holds there.
"""

import pickle
import threading
import warnings

import numba
import numpy as np
import pytest
from sklearn.base import clone
from sklearn.tree import DecisionTreeClassifier

from _audit import assert_no_random_state
from skdp_label import LabelDPClassifier, PrivacyLeakWarning
from skdp_label._kernels import _sampling as S
from skdp_label._kernels import _twin
from skdp_label._kernels._pcg64 import call_with_stream
from skdp_label.estimators._calibration import debiased_mean_bias_bound, debiasing_function
from skdp_label.estimators._majority_guard import constant_in, pooled_class_prior
from skdp_label.estimators._scorers import _transition, unbiased_mse, unbiased_mse_scorer
from skdp_label.mechanisms import MVU, RQM, OptimalUnbiased, get_mechanism_class
from skdp_label.mechanisms.classic._noise import (
    gaussian_cell_table,
    laplace_cell_table,
    staircase_alias_table,
    staircase_cell_table,
)
from skdp_label.mechanisms.classification._solver import top_k_order
from test_fast_samplers import _keyed


def _bits(a):
    return np.asarray(a, dtype=np.float64).view(np.int64)


# -- 1. the held PCG64 state ---------------------------------------------------------------
def _bulk_args(kind):
    """(kernel, arguments after ``rng``) of an additive kernel whose rare paths
    (exact tails, out-of-line offsets, rejected proposals) run often."""
    if kind in ("values", "cells", "pieces", "pieces-rejecting"):
        if kind == "values":
            lam, width, r = 0.05, 1, 1
            m0, tail, prob, alias = staircase_alias_table(lam, width, r, min_probability=1e-3)
            cell, squeeze, records = 1, 0, S.alias_records(prob, alias)
        elif kind == "cells":
            lam, width, r = 2.0**-11, 1, 1
            m0, tail, prob, alias, cell, squeeze = laplace_cell_table(
                lam, min_probability=1e-4, rtol=1e-6)
            records = S.cell_records(prob, alias, cell)
        else:  # pieces of steps, 10% of the draws in entries of other lengths (rare path)
            lam, width, r = 0.8, 40, 12
            m0, tail, prob, alias, starts, sizes = staircase_cell_table(
                lam, width, r, min_probability=1e-2, piece_mass=2.0**-7)
            cell, squeeze = 0, 0
            if kind == "pieces-rejecting":
                # Entries of other lengths claim 3 * 2**50 values: a quarter of
                # their digits are rejected, so _step_offset draws fresh ones
                # (not a valid law: a test of the state's round trip).
                sizes = np.where(sizes & (sizes - 1) != 0, 3 * 2**50, sizes)
            records = S.piece_records(prob, alias, starts, sizes)
        bulk = S.bulk_constants(m0, tail, prob.shape[0], cell, lam, squeeze)
        assert tail > 1e-3
        return S._staircase_additive_bulk, (
            0.5, S.staircase_constants(lam, width, r), bulk, records, True, -40.0, 40.0)
    sigma, per_sigma, n_sigmas = {"gauss-1": (3.7, 32, 1.5), "gauss-64": (200.0, 2, 1.5)}[kind]
    g, prob, alias, squeeze = gaussian_cell_table(sigma, per_sigma, n_sigmas)
    return S._gaussian_additive, (
        0.5, g, S.envelope_records(prob, alias, g[4], squeeze), True, -3 * sigma, 3 * sigma)


_KINDS = ["values", "cells", "pieces", "pieces-rejecting", "gauss-1", "gauss-64"]


def _run(kernel, source, rng, y, args):
    out = np.empty(y.shape[0])
    if source == "stream":
        call_with_stream(kernel, rng, y, rng, *args, out)
    elif source == "twin":
        _twin.twin(kernel)(y, rng, *args, out)
    else:  # compiled on the Generator itself (numba's; the held state is a dummy)
        kernel(y, rng, *args, out)
    return out


@pytest.mark.parametrize("kind", _KINDS)
def test_held_kernels_read_the_same_digits_from_every_source(kind):
    kernel, args = _bulk_args(kind)
    y = np.random.default_rng(1).uniform(-50.0, 50.0, 6000)
    runs = {}
    for source in ("stream", "generator", "twin"):
        rng = np.random.default_rng(12)
        out = _run(kernel, source, rng, y, args)
        runs[source] = (out, rng.bit_generator.state, rng.random(3).tolist())
    ref_out, ref_state, ref_next = runs["twin"]
    for source in ("stream", "generator"):
        out, state, after = runs[source]
        assert np.array_equal(_bits(out), _bits(ref_out)), source
        assert state == ref_state and after == ref_next, source  # no digit skipped or reused
    # A PCG64 subclass is not inlined (numba's Generator draws through its pointer): the
    # same digits, the same final state.
    class Derived(np.random.PCG64):
        pass

    derived = np.random.Generator(Derived(12))
    out = call_with_stream(kernel, derived, y, derived, *args, np.empty(y.shape[0]))
    assert np.array_equal(_bits(out), _bits(ref_out))
    assert derived.bit_generator.state["state"] == ref_state["state"]
    # Another bit generator: compiled (drawing through numpy) and twin agree too.
    mt = [np.random.Generator(np.random.MT19937(12)) for _ in range(2)]
    a, b = _run(kernel, "generator", mt[0], y, args), _run(kernel, "twin", mt[1], y, args)
    assert np.array_equal(_bits(a), _bits(b))
    assert mt[0].random() == mt[1].random()


def _mutant(kernel, old, new):
    """``kernel`` compiled from its source with ``old`` replaced by ``new``."""
    import inspect
    import textwrap

    source = textwrap.dedent(inspect.getsource(kernel.py_func))
    assert source.count(old) == 1
    source = source.replace(old, new).replace("@numba.njit(cache=True, nogil=True)\n", "")
    namespace = dict(kernel.py_func.__globals__)
    exec(source, namespace)
    return numba.njit(nogil=True)(namespace[kernel.py_func.__name__])


@pytest.mark.parametrize("kind, old, new", [
    ("cells", "    release(rng, state)\n    return out", "    return out"),  # no final release
    ("cells", "                release(rng, state)\n                offset = _laplace",
     "                offset = _laplace"),  # the rare offset draws from a stale state
    ("gauss-64", "            release(rng, state)\n            # The rare path",
     "            # The rare path"),
    ("pieces-rejecting",
     "                    release(rng, state)\n                    z = first + _step_offset",
     "                    z = first + _step_offset"),  # the redraws from a stale state
    ("pieces-rejecting",
     "_step_offset(e, m, rng)\n                    state = hold(rng)",
     "_step_offset(e, m, rng)"),  # the held state replays the redraws
], ids=["final-release", "laplace-rare-offset", "gaussian-rare-acceptance", "pieces-rare-offset",
        "pieces-rare-offset-hold"])
def test_a_kernel_that_forgets_a_release_is_caught(kind, old, new):
    kernel, args = _bulk_args(kind)
    y = np.random.default_rng(1).uniform(-50.0, 50.0, 6000)
    ref = np.random.default_rng(12)
    expected = _run(kernel, "twin", ref, y, args)
    rng = np.random.default_rng(12)
    got = _run(_mutant(kernel, old, new), "stream", rng, y, args)
    # Caught by the comparisons of the test above: other values, or another final state.
    assert not (np.array_equal(_bits(got), _bits(expected))
                and rng.bit_generator.state == ref.bit_generator.state)


@pytest.mark.parametrize("kind", ["cells", "gauss-64"])
def test_held_kernels_on_keyed_rows_are_their_twins(kind):
    # A keyed source's held state is a dummy: each draw is the row stream's own.
    kernel, args = _bulk_args(kind)
    y = np.random.default_rng(2).uniform(-50.0, 50.0, 3000)
    compiled = _run(kernel, "generator", _keyed(3000), y, args)
    interpreted = _run(kernel, "twin", _keyed(3000), y, args)
    assert np.array_equal(_bits(compiled), _bits(interpreted))
    # Row i reads its own stream: a suffix of the rows, keyed as before, gives their values.
    from skdp_label._kernels._philox import KeyedRows

    lo = np.arange(3000, dtype=np.uint64)[1234:] * np.uint64(7919)
    suffix = KeyedRows(np.uint64(5), np.uint64(6), np.uint64(0), lo, lo + np.uint64(1))
    tail = _run(kernel, "generator", suffix, y[1234:], args)
    assert np.array_equal(_bits(tail), _bits(compiled[1234:]))


def test_threads_running_held_kernels_on_one_generator_read_consecutive_blocks():
    kernel, args = _bulk_args("cells")
    y = np.zeros(40_000)
    rng = np.random.default_rng(31)
    outs = [None, None]

    def work(slot):
        outs[slot] = _run(kernel, "stream", rng, y, args)

    threads = [threading.Thread(target=work, args=(i,)) for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    sequential = np.random.default_rng(31)
    first, second = (_run(kernel, "stream", sequential, y, args) for _ in range(2))
    # One ran entirely before the other (the bit generator's lock): no shared digit.
    assert ((np.array_equal(_bits(outs[0]), _bits(first))
             and np.array_equal(_bits(outs[1]), _bits(second)))
            or (np.array_equal(_bits(outs[1]), _bits(first))
                and np.array_equal(_bits(outs[0]), _bits(second))))
    assert rng.bit_generator.state == sequential.bit_generator.state


# -- 2. packed cell records ------------------------------------------------------------------
@numba.njit(cache=False)
def _picks(v, records, stride, offset, out):
    for i in range(v.shape[0]):
        _, _, first, sign = S._cell_pick(v[i], records, stride)
        out[i, 0], out[i, 1], out[i, 2] = first, sign, first + sign * offset


def _expected_entry_values(v, prob, alias, cell, offset):
    """Exact Python integers: the first value, sign and value at ``offset``
    of the entry the plain alias table picks for ``v``."""
    index = _twin.twin(S._alias_pick)
    records = S.alias_records(prob, alias)
    half = (prob.shape[0] - 1) // 2
    rows = []
    for x in v:
        t = int(index(float(x), records)) - half
        sign = (t > 0) - (t < 0)
        first = sign * (1 + cell * (abs(t) - 1)) if t else 0
        rows.append((first, sign, first + sign * offset))
    return rows


@pytest.mark.parametrize("cell, half", [(2**30, 2**17 - 1), (2**35, 2**17 - 1), (16, 3)])
def test_cell_records_are_exact_at_the_extremes(cell, half):
    rng = np.random.default_rng(7)
    n = 2 * half + 1
    prob = rng.random(n)
    prob[rng.integers(0, n, 50)] = 0.0  # always aliased
    prob[rng.integers(0, n, 50)] = 1.0  # always kept
    alias = rng.integers(0, n, n)
    alias[half] = 0  # the cell of 0 aliased to the most negative cell
    alias[rng.integers(0, n, 50)] = half  # cells aliased to the cell of 0
    records = S.cell_records(prob, alias, cell)
    # Probe every entry on its threshold's two sides and at its start (a sample of the
    # largest tables), plus the cell of 0 and its aliases.
    entries = np.unique(np.concatenate([rng.integers(0, n, 3000), [0, half, n - 1],
                                        np.flatnonzero(alias == half)[:20]]))
    threshold = records.reshape(-1, 5)[entries, 0]
    v = np.concatenate([entries.astype(np.float64), np.nextafter(threshold, -np.inf),
                        np.minimum(threshold, np.nextafter(entries + 1.0, -np.inf))])
    v = v[(v >= 0) & (v < n)]
    got = np.empty((v.shape[0], 3))
    _picks(v, records, 5, float(cell - 1), got)
    expected = _expected_entry_values(v, prob, alias, cell, cell - 1)
    for row, (first, sign, value) in zip(got, expected):
        assert (row[0], row[1], row[2]) == (first, sign, value)
        assert all(float(x) == x for x in (first, value))  # exact in float64
    zeros = got[got[:, 1] == 0.0]
    assert zeros.shape[0] > 0 and not np.signbit(zeros).any()  # +0.0, never -0.0
    # envelope_records: the same first columns, and each entry's squeeze slope.
    squeeze = rng.integers(1, 2**40, half + 1)
    squeeze[0] = 2**52  # the cell of 0's
    env = S.envelope_records(prob, alias, cell, squeeze).reshape(-1, 7)
    assert np.array_equal(_bits(env[:, :5]), _bits(records.reshape(-1, 5)))
    own = env[:, 5] + env[:, 6]
    assert np.array_equal(own, squeeze[np.abs(np.arange(n) - half)])


def test_cell_records_refuse_tables_past_two_to_the_52_values():
    prob, alias = np.ones(2**18 + 1), np.arange(2**18 + 1)
    S.cell_records(prob[:-2], alias[:-2], 2**35)  # 1 + 2**35 (2**17 - 1) <= 2**52
    with pytest.raises(ValueError, match=r"exceeds 2\*\*52 values"):
        S.cell_records(prob, alias, 2**35)  # 1 + 2**52
    with pytest.raises(ValueError, match=r"exceeds 2\*\*52 values"):
        S.envelope_records(prob, alias, 2**35, np.ones(2**17 + 1, dtype=np.int64))


@pytest.mark.parametrize("sigma", [3.7, 900.0])
def test_gaussian_envelope_zeros_are_positive(sigma):
    table = gaussian_cell_table(sigma)
    out = S.gaussian_additive(np.zeros(60_000), np.random.default_rng(4), 1.0, table, False,
                              0.0, 0.0)
    zeros = out[out == 0.0]
    assert zeros.shape[0] > 5 and not np.signbit(zeros).any()
    assert np.all(out == np.rint(out))


# -- 3. the guard's pooled constant ---------------------------------------------------------
def test_pooled_prior_keeps_its_top_class_inside_the_randomized_set():
    # Found by this review: a class outside S tying S's top in the histogram, and balanced
    # noisy labels on S, left S's pooled frequencies one rounding below it; predict (the
    # argmax of constant_prior_) then returned a class never randomized, while the guard
    # had scored constant_in's class in S.
    histogram = np.array([2.0, 4.0, 4.0, 4.0, 3.0]) / 17.0
    top = np.array([False, True, True, False, False])
    noisy = np.array([1, 1, 2, 2, 1, 2, 1, 2])
    prior = pooled_class_prior(histogram, 0.3, noisy, np.tile(top, (8, 1)), 1.0)
    assert np.argmax(prior) == constant_in(prior, top) == 1
    assert prior.sum() == pytest.approx(1.0) and np.all(prior >= 0.0)
    # Random small cases (ties are common on histograms of few rows).
    rng = np.random.default_rng(0)
    for _ in range(3000):
        n_classes = int(rng.integers(2, 6))
        counts = rng.integers(0, 6, n_classes).astype(np.float64)
        if counts.sum() == 0:
            continue
        histogram = counts / counts.sum()
        top = np.zeros(n_classes, dtype=bool)
        top[top_k_order(histogram)[0][: int(rng.integers(2, n_classes + 1))]] = True
        n = int(rng.integers(1, 30))
        noisy = rng.choice(np.flatnonzero(top), n)
        prior = pooled_class_prior(histogram, float(rng.choice([1e-3, 0.05, 0.3, 10.0])), noisy,
                                   np.tile(top, (n, 1)), float(rng.choice([0.01, 1.0, 20.0])))
        assert top[np.argmax(prior)] and np.argmax(prior) == constant_in(prior, top)
        assert prior.sum() == pytest.approx(1.0)


def _guard_data(n=900, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, 3))
    y = rng.choice(3, size=n, p=[0.45, 0.35, 0.2])  # features carry nothing
    return X, y


def test_guard_constant_is_noisy_reset_on_refit_and_survives_clone_and_pickle():
    X, y = _guard_data()
    clf = LabelDPClassifier(DecisionTreeClassifier(random_state=0), "auto", 0.5,
                            classes=range(3))
    priors = []
    for _ in range(8):  # k = 1 (no label randomized, no guard) is possible but rare here
        prior = clf.fit(X, y).constant_prior_
        if prior is not None:
            priors.append(prior)
            if len(priors) == 2:
                break
    # OS entropy: two fits on the same labels release different noise, so the constant
    # (a function of the releases only) differs; exact frequencies would not.
    assert not np.array_equal(priors[0], priors[1])
    assert_no_random_state(clf)
    restored = pickle.loads(pickle.dumps(clf))
    np.testing.assert_array_equal(restored.predict(X[:20]), clf.predict(X[:20]))
    np.testing.assert_array_equal(restored.predict_proba(X[:20]), clf.predict_proba(X[:20]))
    fresh = clone(clf)
    assert not hasattr(fresh, "constant_prior_")
    if clf.majority_guard_["choice"] == "constant":
        assert np.all(clf.predict(X[:5]) == np.argmax(clf.constant_prior_))
    clf.set_params(majority_guard=False).fit(X, y)
    assert clf.constant_prior_ is None and clf.majority_guard_ is None


@pytest.mark.parametrize("n", [2, 3, 7])
def test_guard_constant_on_a_handful_of_rows(n):
    X, y = _guard_data(n, seed=n)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        clf = LabelDPClassifier(DecisionTreeClassifier(random_state=0), "auto", 1.0,
                                classes=range(3)).fit(X, y)
    prior = clf.constant_prior_
    if prior is not None:
        assert np.all(np.isfinite(prior)) and prior.sum() == pytest.approx(1.0)
    assert set(clf.predict(X)) <= {0, 1, 2}


# -- 4. the shifted MSE scorer of rank-deficient unbiased randomizers ------------------------
class _Fixed:
    """A 'model' that predicts given values row by row."""

    def __init__(self, values):
        self.values = np.asarray(values, dtype=np.float64)

    def predict(self, X):
        return self.values[np.asarray(X, dtype=np.int64)[:, 0]]


def _rounding_weights(y, grid):
    """(lower index, P(upper)) of unbiased randomized rounding onto ``grid``."""
    upper = np.clip(np.searchsorted(grid, y, side="right"), 1, grid.size - 1)
    lower = upper - 1
    return lower, (y - grid[lower]) / (grid[upper] - grid[lower])


def _expected_scores(scorer, mech, y, predictions):
    """E[score] over unbiased rounding of ``y`` onto the inputs and the
    transition, per row, for a model predicting ``predictions`` (exact)."""
    matrix, inputs, outputs = _transition(mech)
    inputs = inputs.astype(np.float64)
    lower, up = _rounding_weights(y, inputs)
    row = (1.0 - up)[:, None] * matrix[lower] + up[:, None] * matrix[lower + 1]
    X = np.zeros((1, 1))
    per_output = np.array([[scorer(_Fixed([f]), X, [o]) for o in outputs] for f in predictions])
    return np.einsum("ij,ij->i", row, per_output)


def _optimal_unbiased(seed):
    rng = np.random.default_rng(seed)
    values = np.arange(7.0)
    mass = rng.dirichlet(np.ones(7))
    mass[rng.choice(7, 3, replace=False)] = 0.0  # labels of no mass: rank-deficient
    return OptimalUnbiased(1.0, bounds=(0.0, 6.0), prior=(values, mass / mass.sum()))


@pytest.mark.parametrize("make", [
    lambda: MVU(0.7, bounds=(0.0, 1.0)), lambda: RQM(1.3, bounds=(0.0, 5.0)),
    lambda: _optimal_unbiased(2), lambda: _optimal_unbiased(4), lambda: _optimal_unbiased(1),
], ids=["mvu", "rqm", "optimal-unbiased-rank-6", "optimal-unbiased-rank-4", "full-rank-control"])
def test_shifted_scores_rank_models_exactly_also_off_the_grid(make):
    mech = make().fit([0.0])
    matrix, inputs, _ = _transition(mech)
    lo, hi = float(inputs.min()), float(inputs.max())
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        scorer = unbiased_mse_scorer(mech)
    # The warning (scores shifted) exactly when the transition is rank-deficient.
    shifted = any("model selection stays unbiased" in str(w.message) for w in caught)
    assert shifted == (np.linalg.matrix_rank(matrix) < inputs.size)
    rng = np.random.default_rng(5)
    y = np.concatenate([inputs.astype(np.float64), rng.uniform(lo, hi, 20)])  # on and off grid
    model_a, model_b = rng.uniform(lo - 1, hi + 1, (2, y.size))
    diff = (_expected_scores(scorer, mech, y, model_a)
            - _expected_scores(scorer, mech, y, model_b))
    # -MSE(a) + MSE(b), row by row: the term the scorer is off by cancels, labels off the
    # grid included (randomized rounding is unbiased; the shift depends on y only).
    np.testing.assert_allclose(diff, (model_b - y) ** 2 - (model_a - y) ** 2, atol=1e-7)
    # The debiased label: unbiased off the grid too, so the bias bound 0 holds there.
    g = debiasing_function(mech)
    matrix, inputs, outputs = _transition(mech)
    lower, up = _rounding_weights(y, inputs.astype(np.float64))
    row = (1.0 - up)[:, None] * matrix[lower] + up[:, None] * matrix[lower + 1]
    np.testing.assert_allclose(row @ g(outputs.astype(np.float64)), y, atol=1e-9)
    assert debiased_mean_bias_bound(mech) == 0.0


@pytest.mark.parametrize("make", [
    lambda: MVU(0.7, bounds=(0.0, 1.0)), lambda: RQM(1.3, bounds=(0.0, 5.0)),
    lambda: get_mechanism_class("optm")(0.05, bounds=(0.0, 5.0)), lambda: _optimal_unbiased(4),
], ids=["mvu", "rqm", "optm", "optimal-unbiased"])
def test_off_grid_labels_are_debiased_without_bias(make):
    # What the bias bound 0 of these rank-deficient randomizers needs off the grid: the
    # debiased noisy label of a label between two grid points has its mean at the label
    # (statistical; 6 standard errors).
    mech = make().fit([0.0])
    assert debiased_mean_bias_bound(mech) == 0.0
    inputs = np.asarray(mech.input_values_, dtype=np.float64)
    y = 0.37 * inputs[1] + 0.63 * inputs[2]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        mech.set_params(random_state=3)
        noisy = mech.transform(np.full(200_000, y))
    g = debiasing_function(mech)(noisy)
    assert abs(g.mean() - y) < 6.0 * g.std() / np.sqrt(g.size)


# -- 5. packed tables in pickles --------------------------------------------------------------
def _old_layout_cache(mech):
    """The mechanism's packed-table cache as c862cc3 pickled it: the plain
    ``alias_records`` (3 floats an entry) of a table of cells, which the
    kernels of 4b29d15 on read as ``cell_records`` (5) / ``envelope_records`` (7)."""
    if hasattr(mech, "_cell_table"):
        sigma, table, _ = mech._cell_table
        mech._cell_table = (sigma, table, S.alias_records(table[1], table[2]))
    else:
        key, table, _ = mech._alias_table
        assert table[4] > 1  # a table of cells
        mech._alias_table = (key, table, S.alias_records(*table[2:4]))


@pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")
@pytest.mark.parametrize("name", ["gaussian", "laplace"])
def test_a_pickled_packed_table_is_never_read_with_another_layout(name, monkeypatch):
    # Found by this review: a Gaussian pickled by c862cc3 after a large release, loaded by
    # 4b29d15 and used for a new release, sampled noise of std 65 instead of 1,696 (the
    # stale 3-float records read 7 floats a record): far less noise than the epsilon
    # charged. Laplace: 3 times too much. The packed tables are public and cheap to
    # rebuild: they are never taken from a pickle.
    kwargs = {"delta": 1e-6} if name == "gaussian" else {}
    mech = get_mechanism_class(name)(epsilon=1.0, bounds=(0.0, 400.0), clip=False,
                                     random_state=1, **kwargs).fit([0.0])
    mech.transform(np.zeros(20_000))  # packs the table (from 10,000 labels)
    packed = mech._cell_table if name == "gaussian" else mech._alias_table
    # New pickles do not hold the tables (rebuilt, the same, on the next large release).
    fresh = pickle.loads(pickle.dumps(mech))
    assert not set(vars(fresh)) & {"_cell_table", "_alias_table"}
    fresh.transform(np.zeros(20_000))
    rebuilt = fresh._cell_table if name == "gaussian" else fresh._alias_table
    assert rebuilt[2].tobytes() == packed[2].tobytes()
    # An older pickle that holds them (its __getstate__: the plain __dict__) in the old layout.
    _old_layout_cache(mech)
    with monkeypatch.context() as m:
        m.setattr(type(mech), "__getstate__", lambda self: dict(vars(self)), raising=False)
        blob = pickle.dumps(mech)
    restored = pickle.loads(blob)
    noise = restored.transform(np.zeros(50_000))
    expected = restored._noise_summary()["noise_std"]
    assert abs(noise.std() / expected - 1.0) < 0.03  # 50,000 draws: about 0.5 % (Laplace 1 %)


def test_the_fallback_payload_accessor_draws_the_same_digits(monkeypatch):
    # numba without an importable MemInfo layout: the held-state intrinsics take the
    # payload through numba's own accessor (compiled fresh here), the same digits.
    from skdp_label._kernels import _pcg64

    monkeypatch.setattr(_pcg64, "_meminfo_struct_type", None)

    @numba.njit(nogil=True)
    def kernel(rng, out):
        state = _pcg64.hold(rng)
        for i in range(out.shape[0]):
            d, state = _pcg64.held_digit(rng, state)
            e, state = _pcg64.held_int_digit(rng, state)
            out[i, 0], out[i, 1] = d, float(e)
        _pcg64.release(rng, state)

    mine, reference = np.random.default_rng(8), np.random.default_rng(8)
    out = np.empty((300, 2))
    call_with_stream(kernel, mine, mine, out)
    expected = np.floor(reference.random(600) * 2.0**53).reshape(300, 2)
    np.testing.assert_array_equal(out, expected)
    assert mine.bit_generator.state == reference.bit_generator.state


# -- 6. exactness tolerances far from 0 ---------------------------------------------------------
_FAR = 1e9  # e.g. timestamps in seconds: labels far from 0 relative to their range


def _merging_bins(offset):
    # Six label values sharing two output distributions: biased, E[y~ | y] != y by up to
    # 2.4, and no g solves T g = y (rank 2 for 6).
    from skdp_label.mechanisms import RROnBins

    return RROnBins(0.5, prior=(offset + np.arange(6.0), np.full(6, 1 / 6))).fit([offset])


def test_a_biased_mechanism_far_from_zero_is_still_refused():
    # Found by this review: the residual accepted as rounding was 1e-8 times the labels'
    # *magnitude*; at 1e9 that is 10, so a g biased by 2.4 passed as exact: the MSE
    # scorer accepted the mechanism without a word and the bias bound became 0.
    near, far = _merging_bins(0.0), _merging_bins(_FAR)
    for mech in (near, far):
        with pytest.raises(ValueError, match="biased"):
            unbiased_mse_scorer(mech)
    assert debiased_mean_bias_bound(far) == debiased_mean_bias_bound(near) == 2.5
    # The group debiasing (E[d | y] = the group's mean) is the same, shifted.
    outputs = _transition(near)[2].astype(np.float64)
    np.testing.assert_allclose(debiasing_function(far)(outputs + _FAR) - _FAR,
                               debiasing_function(near)(outputs), atol=1e-5)


@pytest.mark.parametrize("make", [
    lambda lo: MVU(0.7, bounds=(lo, lo + 1.0)), lambda lo: RQM(1.3, bounds=(lo, lo + 5.0)),
], ids=["mvu", "rqm"])
def test_an_unbiased_mechanism_far_from_zero_is_still_accepted(make):
    # The tolerance is relative to the labels' spread, and the solve centred: exactly
    # unbiased randomizers far from 0 keep their exact g (and bias bound 0).
    mech = make(_FAR).fit([_FAR])
    matrix, inputs, outputs = _transition(mech)
    g = debiasing_function(mech)(outputs.astype(np.float64))
    np.testing.assert_allclose(matrix @ (g - _FAR), inputs - _FAR, atol=1e-6)
    assert debiased_mean_bias_bound(mech) == 0.0
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        unbiased_mse_scorer(mech)


def test_the_mse_estimate_keeps_its_digits_far_from_zero():
    # Found by this review: y_pred^2 - 2 y_pred g + h with labels near 1e9 computes squares
    # of 1e18 (an ulp is 128): OptimalUnbiased's estimate had expectation -59 and +59 for
    # true squared errors 0.09 and 0.49, so neither the scores nor their differences
    # between models meant anything. Centred on a public center, the digits stay.
    mech = get_mechanism_class("unbiased")(epsilon=1.0, bounds=(_FAR, _FAR + 1.0)).fit([_FAR])
    matrix, inputs, outputs = _transition(mech)
    for f in (_FAR + 0.3, _FAR - 2.0, _FAR + 7.5):
        per_output = np.array([unbiased_mse([o], [f], mech) for o in outputs])
        np.testing.assert_allclose(matrix @ per_output, (f - inputs) ** 2, atol=1e-5)
    # Additive noise: the estimate of one noisy label is (f - y~)^2 - Var exactly.
    laplace = get_mechanism_class("discrete-laplace")(
        epsilon=1.0, bounds=(_FAR, _FAR + 20.0), clip=False).fit([_FAR])
    variance = laplace._noise_summary()["noise_std"] ** 2
    for noisy, f in ((_FAR + 3.0, _FAR + 5.0), (_FAR - 40.0, _FAR + 12.0)):
        assert unbiased_mse([noisy], [f], laplace) == pytest.approx(
            (f - noisy) ** 2 - variance, abs=1e-5)
    # unbiased_square_estimator keeps its meaning: E[h(y~) | y] = y^2 (relative precision).
    from skdp_label.estimators import unbiased_square_estimator

    h = unbiased_square_estimator(mech)(outputs.astype(np.float64))
    np.testing.assert_allclose(matrix @ h, inputs**2, rtol=1e-12)


def test_the_debiased_labels_variance_keeps_its_digits_far_from_zero():
    # Found by this review: anchor_for's variance (E[d^2] - E[d]^2 on raw labels) was 64.25
    # near 1e9 for 1.17 near 0 (the regressor's guard then shrank by a wrong variance).
    from skdp_label.estimators._calibration import anchor_for

    make = get_mechanism_class("unbiased")
    near = make(epsilon=1.0, bounds=(0.0, 1.0)).fit([0.0])
    far = make(epsilon=1.0, bounds=(_FAR, _FAR + 1.0)).fit([_FAR])
    (a_near, v_near), (a_far, v_far) = (anchor_for(m, debiasing_function(m)) for m in (near, far))
    assert a_far - _FAR == pytest.approx(a_near) and v_near > 0.5
    assert v_far == pytest.approx(v_near, rel=1e-6)


def _discrete_laplace_on_cells():
    # lam = 1e-4: the bulk from a table of cells (L = 128), the clipped ends exact.
    return get_mechanism_class("discrete-laplace")(epsilon=0.5, bounds=(0, 4990)).fit([0])


@pytest.mark.parametrize("mutant", [False, True], ids=["records", "cells-twice-as-far"])
def test_discrete_laplace_on_cells_samples_its_transition(mutant, monkeypatch):
    # End to end through the mechanism (60,000 draws a label: the bulk path of cell_records),
    # against its exact clipped transition matrix (tests/_audit.py).
    from _audit import audit_sampler
    from skdp_label.mechanisms.classic import _additive

    if mutant:  # first values doubled: cells spaced 2L apart, with gaps
        def wide(prob, alias, cell):
            records = S.cell_records(prob, alias, cell).reshape(-1, 5).copy()
            records[:, 1:3] *= 2.0
            return records.reshape(-1)

        monkeypatch.setattr(_additive, "cell_records", wide)
    mech = _discrete_laplace_on_cells()
    if not mutant:
        audit_sampler(mech, labels=[0, 2495, 4990], n_per_label=60_000)
        assert mech._alias_table[1][4] == 128  # the table of cells ran
        return
    with pytest.raises(AssertionError, match="does not sample its transition_matrix_"):
        audit_sampler(mech, labels=[0, 2495, 4990], n_per_label=60_000)


@pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")
@pytest.mark.parametrize("name", sorted(__import__("skdp_label.mechanisms", fromlist=["x"])
                                        .mechanism_names()))
def test_no_mechanism_pickles_or_unpickles_its_packed_tables(name):
    # The rule above, for every mechanism (BaseLabelMechanism._PACKED_CACHES): the row
    # tables of the discrete mechanisms and quantization's are packed too.
    from skdp_label._warmup import _public_inputs

    kwargs, column = _public_inputs(name)
    mech = get_mechanism_class(name)(epsilon=1.0, random_state=3, **kwargs)
    mech.fit_transform(column)  # 20,000 labels: the bulk paths pack their tables
    # Every cache of packed tables the library keeps is declared (a mutant dropping one
    # from _PACKED_CACHES is caught here).
    packed = {"_row_sampler", "_row_tables", "_alias_table", "_cell_table",
              "_interval_sampler"} & set(vars(mech))
    assert packed <= set(type(mech)._PACKED_CACHES)
    fresh = pickle.loads(pickle.dumps(mech))
    assert not set(vars(fresh)) & set(type(mech)._PACKED_CACHES)
    # A pickle holding bogus tables (another version's layout) is not believed either.
    state = {**mech.__dict__, **{k: "another layout" for k in type(mech)._PACKED_CACHES}}
    planted = type(mech).__new__(type(mech))
    planted.__setstate__(state)
    assert not set(vars(planted)) & set(type(mech)._PACKED_CACHES)
    # Rebuilt on demand: the same release from the same seed.
    outputs = [m.set_params(random_state=4).transform(column) for m in (mech, fresh, planted)]
    for other in outputs[1:]:
        assert np.array_equal(np.asarray(other), np.asarray(outputs[0]))
