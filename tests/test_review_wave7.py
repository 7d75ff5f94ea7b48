"""Adversarial review of retry5 (a keyed retry's law digest) and coin5 (the rounding
coin from the draw word's spare bits), as merged. Each test is an attack; the ones that
broke the merge are fixed alongside."""

import json
import pickle

import numpy as np
import pytest

from skdp_label import BudgetAccountant
from skdp_label._accountant import LedgerUnavailableError
from skdp_label.mechanisms import (
    DebiasedRR,
    OptimalUnbiased,
    RandomizedResponse,
    RandomizedQuantization,
    RROnBins,
    RRTopK,
)
from skdp_label.mechanisms import _base, make_mechanism, mechanism_names
from skdp_label.release import KeyedRelease, law_digest, mechanism_from_manifest, privatize

REFUSED = r"(?s)first fitted to another law"
N = 600


def _classes_labels(n=N):
    return np.random.default_rng(0).integers(0, 5, size=n)


# Mechanisms whose sampler reads a law epsilon or flip probability that no public fitted
# attribute holds (built on access, or private): another library version computing
# another one (as rr_law_epsilon's rounding changed in fb60853) samples another law.
RR_FAMILY = {
    "rr": (lambda: RandomizedResponse(1.0, classes=np.arange(5)), _classes_labels),
    "rr-top-k": (lambda: RRTopK(1.0, classes=np.arange(5), prior=np.arange(1.0, 6.0)),
                 _classes_labels),
    "debiased-rr": (lambda: DebiasedRR(1.0, bounds=(0, 4), resolution=1.0),
                    lambda: _classes_labels().astype(float)),
    "rr-on-bins": (lambda: RROnBins(1.0, bounds=(0, 4), resolution=1.0,
                                    prior=(np.arange(5.0), np.full(5, 0.2))),
                   lambda: _classes_labels().astype(float)),
}


def _another_rr_rounding(monkeypatch, shrink=0.9):
    """Another library version: the randomized responses' law epsilon rounds lower
    (still epsilon-DP, another law)."""
    rr_law = _base.rr_law_epsilon
    monkeypatch.setattr(_base, "rr_law_epsilon",
                        lambda epsilon, n, **kw: shrink * rr_law(epsilon, n, **kw))


@pytest.mark.parametrize("case", sorted(RR_FAMILY))
def test_a_retry_whose_rr_law_epsilon_differs_is_refused(case, key, tmp_path, monkeypatch):
    make, labels = RR_FAMILY[case]
    y = labels()
    acc = BudgetAccountant(10, ledger=tmp_path / "budget.jsonl")
    first, release = privatize(y, make(), key, "r1", accountant=acc)
    recorded = (tmp_path / "budget.jsonl").read_bytes()
    with monkeypatch.context() as m:
        _another_rr_rounding(m)
        refit = make().fit(y)
        assert law_digest(refit) != release.law_digest_  # the digest sees the sampled law
        with pytest.raises(ValueError, match=REFUSED):
            privatize(y, make(), key, "r1", accountant=acc)
    assert (tmp_path / "budget.jsonl").read_bytes() == recorded
    again, _ = privatize(y, make(), key, "r1", accountant=acc)
    np.testing.assert_array_equal(again, first)



@pytest.mark.parametrize("name", mechanism_names())
def test_the_platform_rebuild_and_a_pickle_have_the_law_digest(name, key, tmp_path):
    # The digest now hashes private sampler attributes and the law epsilon: the
    # manifest's rebuild and a worker's unpickled copy (packed caches left out) must
    # still hash to the recorded digest (no false refusal of a worker or the platform).
    if name in mechanism_names("classification"):
        mech = make_mechanism(name, epsilon=1.0, classes=np.arange(5))
        y = _classes_labels()
    else:
        mech = make_mechanism(name, epsilon=1.0, bounds=(0.0, 4.0))
        y = _classes_labels().astype(float)
    _, release = privatize(y, mech, key, "r1")
    manifest = json.loads(json.dumps(release.manifest()))
    assert law_digest(mechanism_from_manifest(manifest)) == release.law_digest_
    assert law_digest(pickle.loads(pickle.dumps(release.fitted_))) == release.law_digest_


def test_integer_classes_of_another_width_are_the_same_law(key, tmp_path):
    # The fingerprint takes classes by value, so the retry is the same release; the
    # digest hashed int32 classes (numpy 1's default integer on Windows) apart from
    # int64 ones and refused it as "another environment".
    y = _classes_labels()
    acc = BudgetAccountant(10, ledger=tmp_path / "budget.jsonl")
    first, _ = privatize(y, RandomizedResponse(1.0, classes=np.arange(5)), key, "r1",
                         accountant=acc)
    for classes in (np.arange(5, dtype=np.int32), np.arange(5).astype(">i8")):
        again, retry = privatize(y, RandomizedResponse(1.0, classes=classes), key, "r1",
                                 accountant=acc)
        np.testing.assert_array_equal(again, first)
        assert not retry.charged_
    assert acc.spent_epsilon == pytest.approx(1.0)
    # Values still count: other classes are another law.
    assert law_digest(RandomizedResponse(1.0, classes=np.arange(1, 6)).fit(y + 1)) != \
        law_digest(RandomizedResponse(1.0, classes=np.arange(5)).fit(y))



def _public_unbiased():
    return OptimalUnbiased(1.0, bounds=(0, 4), prior=(np.arange(5.0), np.full(5, 0.2)))


@pytest.mark.parametrize("how", ["law on a second release record", "law record then another"])
def test_a_ledger_with_two_laws_for_one_release_fails_closed(how, key, tmp_path):
    # The accountant writes one law an id. A ledger holding two (edited, or merged from
    # two files) parsed, and a retry was checked against the first only: it must fail
    # closed, as any damaged ledger does.
    ledger = tmp_path / "budget.jsonl"
    y = _classes_labels().astype(float)
    privatize(y, _public_unbiased(), key, "r1", accountant=BudgetAccountant(10, ledger=ledger))
    lines = ledger.read_text().splitlines()
    release = json.loads(lines[-1])
    other = dict(release, release_law="0" * 64)
    if how == "law record then another":
        law = release.pop("release_law")
        lines[-1] = json.dumps(release)
        lines.append(json.dumps({"record": "release_law", "release_id": "r1",
                                 "release_fingerprint": release["release_fingerprint"],
                                 "release_law": law}))
    lines.append(json.dumps(other))
    ledger.write_text("\n".join(lines) + "\n")
    with pytest.raises(LedgerUnavailableError, match="malformed"):
        BudgetAccountant(10, ledger=ledger)
    # The same record again (its own law) is not a second law: still readable.
    lines[-1] = json.dumps(dict(other, release_law=law if how != "law on a second release record"
                                else json.loads(lines[-2])["release_law"]))
    ledger.write_text("\n".join(lines) + "\n")
    BudgetAccountant(10, ledger=ledger)


# -- coin5: the rounding coin from the draw word's low 11 bits ---------------------------

from conftest import force_kernels  # noqa: E402
from skdp_label._kernels._sampling import categorical_tables, rounding_grid, sample_rows  # noqa: E402

SOURCES = {
    "pcg64": lambda s: np.random.Generator(np.random.PCG64(s)),
    "pcg64dxsm": lambda s: np.random.Generator(np.random.PCG64DXSM(s)),
    "mt19937": lambda s: np.random.Generator(np.random.MT19937(s)),
    "philox": lambda s: np.random.Generator(np.random.Philox(s)),
    "sfc64": lambda s: np.random.Generator(np.random.SFC64(s)),
}


@pytest.mark.parametrize("source", sorted(SOURCES))
@pytest.mark.parametrize("arithmetic", [True, False])
def test_labels_on_the_grid_never_move_and_twin_matches_kernel(source, arithmetic, monkeypatch):
    # t = 0 (a grid point: down, even on a tie b = m = 0, whose exact Bernoulli of 0
    # reads no digit) and t = 1 (the last point: up from k - 2): an identity matrix
    # returns every label; labels between points land on a neighbour. Twin and
    # compiled kernel read the same words on every source and leave it in one state.
    values = np.array([0.0, 0.5, 1.0, 1.5, 2.0]) if arithmetic else np.array(
        [0.0, 0.3, 1.0, 1.7, 2.0])
    grid = rounding_grid(values, arithmetic=arithmetic)
    tables = categorical_tables(np.eye(values.size))
    on = np.tile(values, 4000)
    between = np.random.default_rng(1).uniform(0, 2, 20000)
    runs = []
    for use_twin in (False, True):
        with monkeypatch.context() as m:
            force_kernels(m, use_twin)
            rng = SOURCES[source](5)
            a = sample_rows(rng, values, y=on, grid=grid, tables=tables)
            b = sample_rows(rng, values, y=between, grid=grid, tables=tables)
            runs.append((a, b, rng.random()))
    a, b, after = runs[0]
    np.testing.assert_array_equal(a, on)
    lo = values[np.searchsorted(values, between, side="right") - 1]
    hi = values[np.minimum(np.searchsorted(values, between, side="right"), values.size - 1)]
    assert np.all((b == lo) | (b == hi))
    for twin_a, twin_b, twin_after in runs[1:]:
        np.testing.assert_array_equal(twin_a, a)
        np.testing.assert_array_equal(twin_b, b)
        assert twin_after == after



@pytest.mark.parametrize("make", [
    lambda: DebiasedRR(1.0, bounds=(0, 4), resolution=0.5),  # grid rounding, RR draw
    lambda: RandomizedQuantization(1.0, bounds=(0.0, 4.0)),  # pieces, table draw
], ids=["grid", "pieces"])
def test_keyed_rounding_rows_are_the_same_under_any_batch_split(make, key, monkeypatch):
    # A keyed row reads its own stream: its word (digit and coin) and a tie's fresh
    # digits come from that row only, so any split of the rows into batches, and the
    # twin or the compiled kernel, give the same noisy labels. Ties (b = m, one row in
    # 2**11) are made frequent by labels whose t 2**11 is an integer plus a fraction.
    n = 40000
    rng = np.random.default_rng(3)
    y = np.where(rng.random(n) < 0.5, rng.uniform(0, 4, n),
                 np.floor(rng.uniform(0, 4, n) * 2) / 2 + 0.3 / 2048)
    release = KeyedRelease(make(), key, "split")
    release.fit(n)
    whole = release.randomize(y, np.arange(n))
    cuts = [0, 1, 257, 2048, 2049, 5000, 33333, n]
    for use_twin in (False, True):
        with monkeypatch.context() as m:
            force_kernels(m, use_twin)
            parts = [release.randomize(y[a:b], np.arange(a, b)) for a, b in zip(cuts, cuts[1:])]
        np.testing.assert_array_equal(np.concatenate(parts), whole)
    # Rows keyed by position: a permutation of the batch moves each row's output with it.
    order = rng.permutation(n)
    np.testing.assert_array_equal(release.randomize(y[order], order), whole[order])


@pytest.mark.parametrize("make", [
    lambda: DebiasedRR(1.0, bounds=(0, 4), resolution=0.5, out_of_bounds="clip"),
    lambda: RandomizedQuantization(1.0, bounds=(0.0, 4.0), out_of_bounds="clip"),
], ids=["grid", "pieces"])
def test_keyed_rounding_refuses_non_finite_labels_and_signed_zero_is_zero(make, key):
    # NaN and infinities would reach the coin as t = NaN (int64(NaN) is undefined):
    # validation stops them, even with clipping; -0.0 at a grid start 0.0 (t = -0.0,
    # the tie's exact Bernoulli of -0.0: never up) samples exactly what 0.0 does.
    n = 4000
    release = KeyedRelease(make(), key, "edges")
    release.fit(n)
    for bad in (np.nan, np.inf, -np.inf):
        y = np.full(n, 1.0)
        y[n // 2] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            release.randomize(y, np.arange(n))
    rows = np.arange(n)
    np.testing.assert_array_equal(release.randomize(np.full(n, -0.0), rows),
                                  release.randomize(np.zeros(n), rows))
    np.testing.assert_array_equal(release.randomize(np.full(n, 1e308), rows),
                                  release.randomize(np.full(n, 4.0), rows))


@pytest.mark.parametrize("source", sorted(SOURCES))
def test_which_sources_word_carries_random_digit(source):
    # docs/sampling.md: the word's top 53 bits are random()'s digit on PCG64, PCG64DXSM,
    # Philox and SFC64, not on MT19937 (next_uint64 joins two 32-bit outputs; random()
    # takes 27 and 26 bits of two). Either way the word is one next_uint64 (the twin's
    # integers(0, 2**64) reads exactly one) of 64 uniform bits.
    words = SOURCES[source](11).integers(0, 2**64, size=64, dtype=np.uint64, endpoint=False)
    digits = (SOURCES[source](11).random(64) * 2.0**53).astype(np.uint64)
    same = np.array_equal(words >> np.uint64(11), digits)
    assert same == (source != "mt19937")
    if source == "mt19937":
        # random()'s digit of two 32-bit outputs a, b: (a >> 5) 2**26 + (b >> 6).
        a, b = words >> np.uint64(32), words & np.uint64(2**32 - 1)
        np.testing.assert_array_equal(
            (a >> np.uint64(5)) * np.uint64(2**26) + (b >> np.uint64(6)), digits)



@pytest.mark.parametrize("edit", ["flip probability", "quantizer rows"])
def test_a_worker_does_not_serve_a_stale_digest_after_a_private_edit(edit, key):
    # A worker hashes a broadcast mechanism once per bound state (_received_law); the
    # private sampler parameters are not in the bound state, and an in-place edit of a
    # private array keeps its id: the digest must be recomputed, and the edit refused.
    y = _classes_labels().astype(float)
    make = RR_FAMILY["rr-on-bins"][0] if edit == "flip probability" else (
        lambda: RandomizedQuantization(1.0, bounds=(0.0, 4.0)))
    _, release = privatize(y, make(), key, "r1")
    fitted, law = release.fitted_, release.law_digest_
    KeyedRelease.for_workers(fitted, key, "r1", law=law)  # cached
    if edit == "flip probability":
        fitted._flip_probability = fitted._flip_probability / 2
    else:
        fitted._rows[[0, 1]] = fitted._rows[[1, 0]]  # same id, another law
    with pytest.raises(ValueError, match="this worker received"):
        KeyedRelease.for_workers(fitted, key, "r1", law=law)
