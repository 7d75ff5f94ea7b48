"""A keyed retry samples the law its release was charged for.

A keyed release's noise is a function of (key, release id, row key), and a retry refits
its mechanism. The fit is a function of the public inputs, but not across environments
(numpy / scipy / machine: commit ff3c190), so a retry could sample the same keyed digits
through another matrix: a second, uncharged release sharing the first one's noise. The
ledger records the digest of the law at the first fit (``law_digest``), and a refit with
another digest is refused before anything is randomized.

"Another environment" is emulated by making the solvers answer for a slightly smaller
epsilon: still an epsilon-DP (and, for OptimalUnbiased, unbiased) mechanism, as another
numpy or scipy could compute (RR-on-bins: other bins, randomized at epsilon), but another
law.
"""

import copy
import json
import pickle

import numpy as np
import pytest

from skdp_label import BudgetAccountant
from skdp_label import _accountant
from skdp_label import release as release_module
from skdp_label._accountant import LedgerUnavailableError
from skdp_label.mechanisms import OptimalUnbiased, RROnBins, make_mechanism, mechanism_names
from skdp_label.mechanisms.bins import _rr_on_bins
from skdp_label.mechanisms.unbiased import _mechanisms as _unbiased
from skdp_label.release import (
    KeyedRelease,
    law_digest,
    mechanism_from_manifest,
    privatize,
)

N = 2000
REFUSED = r"(?s)first fitted to another law.*environment of the first run.*new release id"


def _labels(n=N):
    return np.round(np.random.default_rng(0).beta(2, 5, size=n) * 10)


# (mechanism, which path): a public-input law known before the charge, and two laws that
# depend on the charged noisy prior (recorded right after the charge).
CASES = {
    "unbiased-public-prior": lambda: OptimalUnbiased(
        1.0, bounds=(0, 10), prior=(np.arange(11.0), np.full(11, 1 / 11))),
    "unbiased-private-prior": lambda: OptimalUnbiased(1.0, bounds=(0, 10), resolution=1.0),
    "rr-on-bins-private-prior": lambda: RROnBins(1.0, bounds=(0, 10), resolution=1.0),
}


def _another_environment(monkeypatch, shrink=0.9):
    """From now on the solvers answer for ``shrink * epsilon``: another law, still DP."""
    solve = _unbiased.optimal_unbiased_continuous
    monkeypatch.setattr(_unbiased, "optimal_unbiased_continuous",
                        lambda values, probs, epsilon, **kw: solve(values, probs, shrink * epsilon,
                                                                   **kw))
    bins = _rr_on_bins.optimal_bins  # RR-on-bins' solver: other bins, still RR at epsilon
    monkeypatch.setattr(_rr_on_bins, "optimal_bins",
                        lambda values, probs, epsilon, loss: bins(values, probs, shrink * epsilon,
                                                                  loss))


def _count_randomizations(monkeypatch, cls, calls, check=None):
    randomize = cls._randomize_column

    def counted(self, y, rng):
        calls.append(y.shape[0])
        if check is not None:
            check()
        return randomize(self, y, rng)

    monkeypatch.setattr(cls, "_randomize_column", counted)


@pytest.fixture
def ledger(tmp_path):
    return tmp_path / "budget.jsonl"


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_retry_refitting_another_law_is_refused_before_anything_is_randomized(
        case, key, ledger, monkeypatch):
    y = _labels()
    acc = BudgetAccountant(10, ledger=ledger)
    first, release = privatize(y, CASES[case](), key, "r1", accountant=acc)
    (entry,) = acc.ledger
    assert entry.release_law == release.law_digest_ == law_digest(release.fitted_)
    recorded = ledger.read_bytes()

    calls = []
    _count_randomizations(monkeypatch, type(release.fitted_), calls)
    with monkeypatch.context() as m:
        _another_environment(m)
        with pytest.raises(ValueError, match=REFUSED):
            privatize(y, CASES[case](), key, "r1", accountant=acc)
        assert calls == []  # nothing randomized
        assert ledger.read_bytes() == recorded  # nothing charged, nothing recorded
        # What the message advises: a new release id is another release, charged.
        privatize(y, CASES[case](), key, "r2", accountant=acc)
        assert acc.spent_epsilon == pytest.approx(2.0)

    # Back in the first run's environment: the retry is the same release, free.
    calls.clear()
    again, retry = privatize(y, CASES[case](), key, "r1", accountant=acc)
    np.testing.assert_array_equal(again, first)
    assert retry.law_digest_ == release.law_digest_ and not retry.charged_
    assert acc.spent_epsilon == pytest.approx(2.0) and calls == [N]


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_law_is_durable_before_the_first_label_is_randomized(case, key, ledger, monkeypatch):
    acc = BudgetAccountant(10, ledger=ledger)
    seen = []

    def law_on_disk():  # a new accountant: what another process would read
        (entry,) = BudgetAccountant(10, ledger=ledger).ledger
        seen.append(entry.release_law)

    calls = []
    _count_randomizations(monkeypatch, type(CASES[case]()), calls, law_on_disk)
    _, release = privatize(_labels(), CASES[case](), key, "r1", accountant=acc)
    assert calls and seen == [release.law_digest_] * len(calls)
    # A public-input law is written with the charge (one record); a law of the noisy
    # prior in a law record right after it.
    records = [json.loads(line)["record"] for line in ledger.read_text().splitlines()]
    assert records == ["header", "release"] + (["release_law"] if "private" in case else [])


def _strip_laws(ledger):
    """Rewrite a ledger as an earlier version wrote it (no law digests)."""
    lines = []
    for line in ledger.read_text().splitlines():
        record = json.loads(line)
        if record["record"] == "release_law":
            continue
        record.pop("release_law", None)
        lines.append(json.dumps(record, sort_keys=True))
    ledger.write_text("\n".join(lines) + "\n")


@pytest.mark.parametrize("case", ["unbiased-public-prior", "rr-on-bins-private-prior"])
def test_a_ledger_without_a_law_records_it_at_the_next_fit(case, key, ledger, monkeypatch):
    y = _labels()
    first, release = privatize(y, CASES[case](), key, "r1",
                               accountant=BudgetAccountant(10, ledger=ledger))
    _strip_laws(ledger)
    (entry,) = BudgetAccountant(10, ledger=ledger).ledger  # an old ledger stays readable
    assert entry.release_law is None and "release_law" not in ledger.read_text()

    acc = BudgetAccountant(10, ledger=ledger)
    again, retry = privatize(y, CASES[case](), key, "r1", accountant=acc)
    np.testing.assert_array_equal(again, first)
    assert not retry.charged_ and acc.spent_epsilon == pytest.approx(1.0)
    (entry,) = acc.ledger
    assert entry.release_law == release.law_digest_  # recorded at this fit
    assert retry.manifest()["ledger_entries"][0]["release_law"] == release.law_digest_

    # From now on the law is checked.
    _another_environment(monkeypatch)
    with pytest.raises(ValueError, match=REFUSED):
        privatize(y, CASES[case](), key, "r1", accountant=acc)


def test_a_crash_between_the_charge_and_the_law_records_it_at_the_retry(key, ledger, monkeypatch):
    y = _labels()
    acc = BudgetAccountant(10, ledger=ledger)
    with monkeypatch.context() as m:
        def crash(*args, **kwargs):
            raise OSError("killed")

        m.setattr(BudgetAccountant, "record_release_law", crash)
        with pytest.raises(OSError):
            privatize(y, CASES["unbiased-private-prior"](), key, "r1", accountant=acc)
    (entry,) = acc.ledger
    assert entry.release_law is None  # charged, law not yet recorded
    again, retry = privatize(y, CASES["unbiased-private-prior"](), key, "r1", accountant=acc)
    expected, _ = privatize(y, CASES["unbiased-private-prior"](), key, "r1")  # no ledger
    np.testing.assert_array_equal(again, expected)
    assert acc.ledger[0].release_law == retry.law_digest_ and acc.spent_epsilon == 1.0


def test_the_law_of_a_private_prior_depends_on_the_labels(key, ledger, monkeypatch):
    # Another label column under the same id (a misuse the fingerprint cannot see):
    # its noisy prior, hence its law, differs, and the ledger refuses it -- without
    # showing that law's digest, a hash of an uncharged noisy histogram.
    acc = BudgetAccountant(10, ledger=ledger)
    _, first = privatize(_labels(), CASES["unbiased-private-prior"](), key, "r1", accountant=acc)
    other = np.round(np.random.default_rng(1).uniform(0, 10, size=N))
    laws = []
    digest = release_module.law_digest
    monkeypatch.setattr(release_module, "law_digest", lambda m: laws.append(digest(m)) or laws[-1])
    with pytest.raises(ValueError, match=REFUSED) as refused:
        privatize(other, CASES["unbiased-private-prior"](), key, "r1", accountant=acc)
    (refused_law,) = [law for law in laws if law != first.law_digest_]
    assert first.law_digest_[:16] in str(refused.value)
    assert refused_law[:8] not in str(refused.value)


@pytest.mark.parametrize("case", sorted(CASES))
def test_the_manifest_carries_the_law_and_the_platform_can_check_its_rebuild(case, key, ledger):
    _, release = privatize(_labels(), CASES[case](), key, "r1",
                           accountant=BudgetAccountant(10, ledger=ledger))
    manifest = json.loads(json.dumps(release.manifest()))
    assert manifest["law_digest"] == release.law_digest_ == law_digest(release.fitted_)
    assert manifest["ledger_entries"][0]["release_law"] == manifest["law_digest"]
    # In the labels party's environment, the platform's rebuild samples that law.
    assert law_digest(mechanism_from_manifest(manifest)) == manifest["law_digest"]
    # Without a ledger the manifest still names the law.
    _, unledgered = privatize(_labels(), CASES[case](), key, "r1")
    assert unledgered.manifest()["law_digest"] == manifest["law_digest"]


def _mechanism(name):
    if name in mechanism_names("classification"):
        return make_mechanism(name, epsilon=1.0, classes=np.array(["a", "b", "c"], dtype=object))
    return make_mechanism(name, epsilon=1.0, bounds=(0.0, 10.0))


@pytest.mark.parametrize("name", sorted(mechanism_names()))
def test_the_digest_is_the_law_across_pickles_copies_and_refits(name, key):
    classification = name in mechanism_names("classification")
    y = np.array(["a", "b", "c"] * 200, dtype=object) if classification else _labels(600)
    _, release = privatize(y, _mechanism(name), key, "r1")
    fitted = release.fitted_
    digest = law_digest(fitted)
    assert len(digest) == 64 and int(digest, 16) >= 0
    assert law_digest(pickle.loads(pickle.dumps(fitted))) == digest
    assert law_digest(copy.deepcopy(fitted)) == digest
    _, refit = privatize(y, _mechanism(name), key, "r1")  # a retry: the same law
    assert refit.law_digest_ == digest
    if refit.epsilon_split_ is None:  # public inputs only: the id and the key are not in the law
        _, renamed = privatize(y, _mechanism(name), key, "r2")
        assert renamed.law_digest_ == digest
    _, other = privatize(y, _mechanism(name).set_params(epsilon=0.5), key, "r3")
    assert law_digest(other.fitted_) != digest


def test_the_digest_refuses_what_it_cannot_vouch_for(key):
    with pytest.raises(ValueError, match="not fitted"):
        law_digest(OptimalUnbiased(1.0, bounds=(0, 10)))
    _, release = privatize(_labels(), CASES["unbiased-public-prior"](), key, "r1")
    fitted = copy.deepcopy(release.fitted_)
    fitted.transition_matrix_ = fitted.transition_matrix_.copy()  # set after fit
    with pytest.raises(ValueError, match="changed since fit"):
        law_digest(fitted)
    fitted = copy.deepcopy(release.fitted_)
    fitted._fit_state = dict(fitted._fit_state, extra_=object())
    fitted.extra_ = fitted._fit_state["extra_"]
    with pytest.raises(ValueError, match="cannot hash"):  # fails closed
        law_digest(fitted)


MUTANTS = {
    # The digest sees nothing of the law.
    "digest-blind": lambda m: m.setattr(release_module, "law_digest", lambda mech: "0" * 64),
    # The ledger records the law but never compares it.
    "ledger-never-compares": lambda m: m.setattr(_accountant, "_check_release_law",
                                                 lambda entries, release_id, law: False),
}


@pytest.mark.parametrize("mutant", sorted(MUTANTS))
@pytest.mark.parametrize("case", ["unbiased-public-prior", "rr-on-bins-private-prior"])
def test_a_mutant_without_the_check_releases_the_same_digits_through_another_law(
        mutant, case, key, ledger, monkeypatch):
    # What the check prevents, shown by disabling it: the retry is not charged and
    # gives other noisy labels for the same rows (the same keyed digits, another law).
    MUTANTS[mutant](monkeypatch)
    y = _labels()
    acc = BudgetAccountant(10, ledger=ledger)
    first, _ = privatize(y, CASES[case](), key, "r1", accountant=acc)
    _another_environment(monkeypatch)
    second, retry = privatize(y, CASES[case](), key, "r1", accountant=acc)
    assert not retry.charged_ and acc.spent_epsilon == pytest.approx(1.0)
    assert np.mean(first != second) > 0.01


# -- the accountant --------------------------------------------------------------------
def test_the_accountant_records_a_law_once_and_refuses_another(ledger):
    acc = BudgetAccountant(10, ledger=ledger)
    with pytest.raises(ValueError, match="not in the ledger"):
        acc.record_release_law("r1", "fp", "law-a")
    with pytest.raises(ValueError, match="release_law"):
        acc.spend(1.0, n_labels=3, description="x", release_law="law-a")
    assert acc.spend(1.0, n_labels=3, description="x", release=("r1", "fp"))
    assert acc.record_release_law("r1", "fp", "law-a")
    assert not acc.record_release_law("r1", "fp", "law-a")
    before = ledger.read_bytes()
    with pytest.raises(ValueError, match=REFUSED):
        acc.record_release_law("r1", "fp", "law-b")
    with pytest.raises(ValueError, match=REFUSED):
        acc.spend(1.0, n_labels=3, description="x", release=("r1", "fp"), release_law="law-b")
    with pytest.raises(ValueError, match="different release"):
        acc.record_release_law("r1", "other-fp", "law-a")
    assert ledger.read_bytes() == before
    assert not acc.spend(1.0, n_labels=3, description="x", release=("r1", "fp"),
                         release_law="law-a")
    # A release whose law is known before the charge: one record holds both.
    assert acc.spend(1.0, n_labels=3, description="y", release=("r2", "fp2"), release_law="law-c")
    assert len(ledger.read_text().splitlines()) == 4  # header, r1, r1's law, r2
    records = acc.to_records()
    assert [r["release_law"] for r in records] == ["law-a", "law-c"]
    assert acc.spent_epsilon == pytest.approx(2.0)
    pytest.importorskip("pandas")
    assert list(acc.to_frame()["release_law"]) == ["law-a", "law-c"]


@pytest.mark.parametrize("bad", [
    {"release_id": "r9", "release_fingerprint": "fp", "release_law": "l"},  # before its release
    {"release_id": "r1", "release_fingerprint": "fp2", "release_law": "l"},  # another release
    {"release_id": "r1", "release_fingerprint": "fp", "release_law": 7},
    {"release_id": "r1", "release_fingerprint": "fp", "release_law": "l", "extra": 1},
])
def test_a_damaged_law_record_fails_closed(bad, ledger):
    acc = BudgetAccountant(10, ledger=ledger)
    acc.spend(1.0, n_labels=3, description="x", release=("r1", "fp"))
    with open(ledger, "a") as f:
        f.write(json.dumps({"record": "release_law", **bad}) + "\n")
    with pytest.raises(LedgerUnavailableError, match="line 3"):
        acc.spent_epsilon


def test_a_second_law_record_for_one_release_fails_closed(ledger):
    acc = BudgetAccountant(10, ledger=ledger)
    acc.spend(1.0, n_labels=3, description="x", release=("r1", "fp"), release_law="a")
    with open(ledger, "a") as f:
        f.write(json.dumps({"record": "release_law", "release_id": "r1",
                            "release_fingerprint": "fp", "release_law": "b"}) + "\n")
    with pytest.raises(LedgerUnavailableError, match="line 3"):
        acc.ledger


# -- Dask: the workers randomize the law the driver recorded ---------------------------------
def test_a_worker_refuses_a_mechanism_of_another_law(key, tmp_path, monkeypatch):
    dask = pytest.importorskip("dask")
    da = pytest.importorskip("dask.array")
    from skdp_label.dask import privatize as dask_privatize
    from skdp_label.release import load_key

    key_file = tmp_path / "label.key"  # the key fixture's file
    y = _labels()
    acc = BudgetAccountant(10, ledger=tmp_path / "budget.jsonl")
    with dask.config.set(scheduler="synchronous"):
        noisy, release = dask_privatize(
            da.from_array(y, chunks=700), CASES["rr-on-bins-private-prior"](), key_file=key_file,
            release_id="r1", accountant=acc)
        expected, _ = privatize(y, CASES["rr-on-bins-private-prior"](), load_key(key_file), "r1")
        np.testing.assert_array_equal(noisy.compute(), expected)
        assert acc.ledger[0].release_law == release.law_digest_

        # The object the workers receive is changed into a consistently bound mechanism of
        # another law (as a worker with another library could load it).
        with monkeypatch.context() as m:
            _another_environment(m)
            other = KeyedRelease(CASES["rr-on-bins-private-prior"](), load_key(key_file), "x")
            other.add_counts(y, np.arange(N))
            other.fit(N)
        assert other.law_digest_ != release.law_digest_
        vars(release.fitted_).update(copy.deepcopy(vars(other.fitted_)))
        calls = []
        _count_randomizations(monkeypatch, RROnBins, calls)
        with pytest.raises(ValueError, match="this worker received samples the law"):
            noisy.compute()
        assert calls == []

    with pytest.raises(ValueError, match="this worker received"):
        KeyedRelease.for_workers(other.fitted_, key, "r1", law=release.law_digest_)
    worker = KeyedRelease.for_workers(other.fitted_, key, "r1", law=other.law_digest_)
    assert worker.law_digest_ == other.law_digest_


# -- the command line ---------------------------------------------------------------------
def test_cli_round_trip_records_checks_and_refuses(tmp_path, monkeypatch, capsys):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from skdp_label.__main__ import main

    pq.write_table(pa.table({"value": _labels()}), tmp_path / "in.parquet")
    assert main(["keygen", str(tmp_path / "label.key")]) == 0

    def run(output):
        return main(["privatize", str(tmp_path / "in.parquet"), "--label", "value",
                     "--mechanism", "unbiased", "--epsilon", "1", "--bounds", "0", "10",
                     "--grid-step", "1", "--key-file", str(tmp_path / "label.key"),
                     "--release-id", "r1", "--ledger", str(tmp_path / "budget.jsonl"),
                     "--budget", "10", "--output", str(tmp_path / output)])

    assert run("out.parquet") == 0
    manifest = json.loads((tmp_path / "out.parquet.manifest.json").read_text())
    (entry,) = BudgetAccountant(10, ledger=tmp_path / "budget.jsonl").ledger
    assert manifest["law_digest"] == entry.release_law
    assert law_digest(mechanism_from_manifest(manifest)) == manifest["law_digest"]
    recorded = (tmp_path / "budget.jsonl").read_bytes()

    capsys.readouterr()
    assert run("again.parquet") == 0  # a rerun in the same environment: identical, free
    assert (tmp_path / "again.parquet").read_bytes() == (tmp_path / "out.parquet").read_bytes()
    err = capsys.readouterr().err
    assert f"rerun charged nothing (its law digest {entry.release_law[:12]}" in err

    _another_environment(monkeypatch)
    assert run("other.parquet") == 2
    err = capsys.readouterr().err
    assert "first fitted to another law" in err and "new release id" in err
    assert not (tmp_path / "other.parquet").exists()
    assert not (tmp_path / "other.parquet.manifest.json").exists()
    assert (tmp_path / "budget.jsonl").read_bytes() == recorded


def test_a_worker_hashes_a_broadcast_mechanism_once_and_again_after_any_change(key, monkeypatch):
    _, release = privatize(_labels(), CASES["unbiased-public-prior"](), key, "r1")
    fitted, law = release.fitted_, release.law_digest_
    hashed = []
    digest = release_module.law_digest
    monkeypatch.setattr(release_module, "law_digest", lambda m: hashed.append(1) or digest(m))
    for _ in range(3):  # many partitions, one hash
        KeyedRelease.for_workers(fitted, key, "r1", law=law)
    assert len(hashed) == 1
    # A parameter changed together with its fit signature (so the fit's own check passes)
    # is hashed again, and refused.
    fitted.set_params(epsilon=0.5)
    fitted._fit_signature = fitted._public_signature()
    with pytest.raises(ValueError, match="this worker received"):
        KeyedRelease.for_workers(fitted, key, "r1", law=law)
    assert len(hashed) == 2
