"""Adversarial review of the keyed / Dask noisy mean (mean_epsilon), the bool-refusing
budgets and the constant-only classifier report. Tests marked FIX failed before the fix
in skdp_label/release.py; the others document properties that hold."""

import json
import pickle

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression

from skdp_label import BudgetAccountant, LabelDPClassifier
from skdp_label._kernels._philox import KeyedRows
from skdp_label.mechanisms import AutoRegression, RROnBins, _prior
from skdp_label.mechanisms._validation import law_epsilon
from skdp_label.release import KeyedRelease, ReleaseKey, privatize

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.utils.PrivacyLeakWarning")

BOUNDS = (0.0, 10.0)
KEY = ReleaseKey(b"\x11" * 32)


def _labels(n=300, seed=0):
    return np.random.default_rng(seed).uniform(*BOUNDS, n)


def _auto(eps=0.5, **kw):
    return AutoRegression(eps, bounds=BOUNDS, **{"mean_epsilon": "auto", **kw})


# -- invariant 2 / 5: the mechanism's constraints hold in a keyed release ---------------------
@pytest.mark.parametrize("mech", [
    _auto(mean_epsilon=-0.5),  # FIX: charged 0.5, labels randomized at 0.77, prior at 0.23
    _auto(eps=2.0, mean_epsilon=True),  # FIX: a mean of epsilon 1
    _auto(mean_epsilon="garbage"),  # FIX: read as 'auto'
    AutoRegression(True, bounds=BOUNDS),  # FIX: a budget of 1 (the fit saw only the labels' share)
    RROnBins(True, bounds=BOUNDS),  # FIX
], ids=["negative-mean", "bool-mean", "str-mean", "bool-epsilon-auto", "bool-epsilon-rr-on-bins"])
def test_keyed_release_refuses_what_the_mechanism_refuses_before_spending(mech):
    acc = BudgetAccountant()
    y = _labels()
    with pytest.raises(ValueError, match="parameter of"):
        privatize(y, mech, KEY, "bad", accountant=acc)
    assert acc.ledger == []


def test_negative_mean_epsilon_through_the_cli_is_refused(tmp_path):
    # FIX: the CLI builds the mechanism without fitting it (--param mean_epsilon=-0.5).
    from skdp_label._cli import build_mechanism

    mech, _ = build_mechanism("auto", epsilon=0.5, bounds=BOUNDS, params=["mean_epsilon=-0.5"])
    with pytest.raises(ValueError, match="mean_epsilon"):
        KeyedRelease(mech, KEY, "cli")


# -- invariant 2 / 4: a failing fit leaves the release as it was -----------------------------
def test_a_failed_fit_leaves_the_release_unchanged_and_a_retry_is_the_same_release():
    # FIX: fit(n_rows=599) fixed n_eff = sqrt(599) on the release's mechanism before failing;
    # the retry was then another release (another fingerprint, another n_eff) under the same id.
    y, keys = _labels(), np.arange(300)
    acc = BudgetAccountant()
    release = KeyedRelease(_auto(), KEY, "retry", accountant=acc)
    release.add_counts(y, keys)
    with pytest.raises(ValueError, match="pass 1 counted 300 labels"):
        release.fit(299)
    assert release.mechanism.n_eff is None and acc.ledger == []
    release.fit(300)
    fresh_acc = BudgetAccountant()
    _, fresh = privatize(y, _auto(), KEY, "retry", accountant=fresh_acc)
    assert acc.ledger[0].release_fingerprint == fresh_acc.ledger[0].release_fingerprint
    assert release.fitted_.n_eff == fresh.fitted_.n_eff == pytest.approx(np.sqrt(300))
    assert release.noisy_mean_ == fresh.noisy_mean_
    assert release.epsilon_split_ == fresh.epsilon_split_
    assert np.array_equal(release.randomize(y, keys), fresh.randomize(y, keys))


@pytest.mark.parametrize("bad_sum", [float("nan"), 1.5, "12", -1, 65536 * 300 + 1])
def test_merge_counts_refuses_a_bad_sum_before_adding_anything(bad_sum):
    # FIX: a NaN sum raised after the counts were added; merging the batch again on retry
    # counted its rows twice in the private histogram (twice the charged sensitivity).
    y, keys = _labels(), np.arange(300)
    release = KeyedRelease(_auto(), KEY, "merge")
    counts, total = release.batch_counts(y, keys), release.batch_sum(y, keys)
    with pytest.raises(ValueError, match="pass the batch_sum of the same rows"):
        release.merge_counts(counts, 300, bad_sum)
    assert release._counts is None and release._n_counted == 0 and release._label_sum == 0
    release.merge_counts(counts, 300, total)
    release.fit(300)
    _, fresh = privatize(y, _auto(), KEY, "merge")
    assert release.noisy_mean_ == fresh.noisy_mean_
    assert np.array_equal(release.fitted_.prior_, fresh.fitted_.prior_)


def test_pass_1_misuse_is_refused_and_spends_nothing():
    acc = BudgetAccountant()
    plain = KeyedRelease(RROnBins(1.0, bounds=BOUNDS), KEY, "plain", accountant=acc)
    with pytest.raises(ValueError, match="releases no noisy mean"):
        plain.batch_sum(_labels(), np.arange(300))
    release = KeyedRelease(_auto(), KEY, "twice", accountant=acc)
    release.add_counts(_labels(), np.arange(300))
    with pytest.raises(ValueError, match="pass the batch_sum"):
        release.merge_counts(release.batch_counts(_labels(), np.arange(300)), 300)
    release.fit(300)
    assert len(acc.ledger) == 1
    with pytest.raises(ValueError, match="already fitted"):
        release.fit(300)
    with pytest.raises(ValueError, match="already fitted"):
        release.merge_counts(np.zeros(_prior.MEAN_UNITS // 2), 0, 0)
    assert len(acc.ledger) == 1 and acc.spent_epsilon == pytest.approx(0.5)


@pytest.mark.parametrize("y, bounds, match", [
    (np.array([1.0, np.nan, 2.0]), BOUNDS, "NaN"),
    (np.array([1.0, 11.0, 2.0]), BOUNDS, "outside the declared range"),
    (np.array([1.0, 2.0]), (0.0, -1.0), "lo < hi"),
    (np.array([1.0, 2.0]), (-1e307, 1e307), "span"),
    (np.array([]), BOUNDS, "0 sample|positive"),
])
def test_bad_input_spends_nothing_and_names_no_label(y, bounds, match):
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match=match) as err:
        privatize(y, AutoRegression(0.5, bounds=bounds, mean_epsilon=0.2), KEY, "bad",
                  accountant=acc)
    assert acc.ledger == [] and "11" not in str(err.value)


def test_clip_clips_before_the_sum():
    y = np.array([-5.0, 20.0, 5.0])
    release = KeyedRelease(_auto(out_of_bounds="clip"), KEY, "clip")
    keys = np.arange(3)
    assert release.batch_sum(y, keys) == release.batch_sum(np.array([0.0, 10.0, 5.0]), keys)


# -- the sum's sensitivity: one row moves it by at most MEAN_UNITS ------------------------------
@pytest.mark.parametrize("bounds", [(0.0, 10.0), (0.0, 49.0), (1 / 3, 5 / 7), (-3.0, 97.0),
                                    (-1e150, 1e150), (1.0, 1.0 + 2**-40), (0, 2**52)])
def test_each_row_adds_between_0_and_mean_units(bounds):
    lo, hi = bounds
    y = np.array([lo, hi, np.nextafter(hi, lo), np.nextafter(lo, hi), (lo + hi) / 2,
                  lo - 1e-3 * (hi - lo), hi + 1e-3 * (hi - lo)])  # the last two clipped
    for u in (0.0, np.nextafter(1.0, 0.0)):  # the extremes of a row's uniform
        parts = [_prior.rounded_label_sum(y[i:i + 1], bounds, np.array([u])) for i in range(y.size)]
        assert min(parts) >= 0 and max(parts) <= _prior.MEAN_UNITS
    assert _prior.rounded_label_sum([hi], bounds, [0.0]) == _prior.MEAN_UNITS
    assert _prior.rounded_label_sum([lo], bounds, [0.0]) == 0


def _noisy_mean_a18b15b(y, bounds, epsilon, rng):
    """noisy_mean as it was before the split into rounded_label_sum / noisy_mean_from_sum
    (git show a18b15b:skdp_label/mechanisms/_prior.py), the reference for bit-identity."""
    lo, hi = float(bounds[0]), float(bounds[1])
    n = int(np.size(y))
    scaled = (np.clip(np.asarray(y, dtype=np.float64).ravel(), lo, hi) - lo) * (
        _prior.MEAN_UNITS / (hi - lo) if hi > lo else 0.0)
    floor = np.floor(scaled)
    rounded = floor + (rng.random(n) < scaled - floor)
    noise = _prior.staircase_noise(rng, epsilon / _prior.MEAN_UNITS, 1, 1, size=1)
    total = float(rounded.sum()) + float(noise[0])
    unit = (hi - lo) / (_prior.MEAN_UNITS * n)
    with np.errstate(over="ignore"):
        variance = np.float64(unit) ** 2 * (_prior.mean_noise_variance(epsilon) + n / 4.0)
    return lo + unit * total, float(variance)


@pytest.mark.parametrize("seed", range(4))
def test_one_machine_noisy_mean_is_bit_identical_to_before_the_split(seed):
    rng = np.random.default_rng(seed)
    y = rng.uniform(-2, 12, 500)  # some clipped
    for bounds, eps in [(BOUNDS, 0.3), ((-1e150, 1e150), 2.0), ((0, 2**52), 0.01)]:
        new = _prior.noisy_mean(y, bounds, eps, np.random.default_rng([seed, 1]))
        # Since the samplers' slack, the noise's law is built at law_epsilon(eps).
        old = _noisy_mean_a18b15b(y, bounds, law_epsilon(eps), np.random.default_rng([seed, 1]))
        assert new == old


# -- invariant 4: independent noise per statistic and per release, reproduced by a retry -----
def test_the_mean_prior_and_row_noises_come_from_separate_streams():
    release = KeyedRelease(_auto(), KEY, "streams")
    other = KeyedRelease(_auto(), KEY, "streams-2")
    draws = {
        (rid, purpose): r._noise_generator(purpose).integers(0, 2**63, 8)
        for rid, r in (("a", release), ("b", other)) for purpose in ("mean", "prior")
    }
    flat = [tuple(v) for v in draws.values()]
    assert len(set(flat)) == 4  # no two (release, statistic) share their generator
    again = release._noise_generator("mean").integers(0, 2**63, 8)  # a retry: the same noise
    assert np.array_equal(again, draws["a", "mean"])
    # Per-row words of the labels' noise (stage 0), the histogram's (1 << 32) and the sum's
    # rounding (2 << 32): distinct streams for the same rows.
    keys = np.arange(64, dtype=np.uint64)
    zeros = np.zeros(64, dtype=np.uint64)
    words = [KeyedRows(*release._philox, np.uint64(s), keys, zeros).random_rows(64)
             for s in (0, 1 << 32, 2 << 32)]
    assert not np.allclose(words[0], words[2]) and not np.allclose(words[1], words[2])


def test_the_exact_sum_does_not_survive_fit_in_any_hand_off():
    y = _labels(seed=4)
    keys = np.arange(y.size)
    release = KeyedRelease(_auto(), KEY, "leak")
    exact = release.batch_sum(y, keys)
    release.add_counts(y, keys)
    assert release._label_sum == exact  # held by the labels party until fit
    release.fit(y.size)
    unit = (BOUNDS[1] - BOUNDS[0]) / (_prior.MEAN_UNITS * y.size)
    assert release._label_sum == 0 and release._counts is None
    blobs = [pickle.dumps(release.fitted_), pickle.dumps(release.fitted_.privacy_report())]
    text = json.dumps(release.manifest()) + repr(release.fitted_) + repr(vars(release.fitted_))
    for value in (float(exact), exact * unit, y.mean()):
        assert all(np.float64(value).tobytes() not in b for b in blobs)
        assert repr(value) not in text and f"{value:g}" not in text
    assert str(exact) not in text
    with pytest.raises(TypeError, match="never pickled"):
        pickle.dumps(release)  # the release itself holds the key: it never leaves


# -- Dask = in memory with ids, unsorted rows, several partitions -----------------------------
def test_dask_with_unsorted_ids_equals_the_in_memory_release(tmp_path):
    dd = pytest.importorskip("dask.dataframe")
    import pandas as pd

    from skdp_label import dask as skdp_dask
    from skdp_label.release import generate_key_file, id_row_keys, load_key

    path = tmp_path / "label.key"
    generate_key_file(path)
    rng = np.random.default_rng(2)
    y, ids = _labels(seed=2), rng.permutation(10**6)[:300]
    expected, memory = privatize(y, _auto(), load_key(path), "ids",
                                 row_keys=id_row_keys(load_key(path), ids))
    for parts in (1, 4):
        frame = dd.from_pandas(pd.DataFrame({"y": y, "id": ids}), npartitions=parts)
        noisy, release = skdp_dask.privatize(frame, _auto(), key_file=path, release_id="ids",
                                             label="y", id="id")
        out = noisy.compute()
        assert release.noisy_mean_ == memory.noisy_mean_
        assert np.array_equal(out.to_numpy(), expected[out.index.to_numpy()])
    twice = dd.concat([frame, frame])  # a repeated partition: duplicate ids, refused
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="duplicate ids"):
        skdp_dask.privatize(twice, _auto(), key_file=path, release_id="dup", label="y", id="id",
                            accountant=acc)
    assert acc.ledger == []


# -- the constant-only classifier's report ---------------------------------------------------
def test_constant_only_classifier_report_then_refit_names_the_mechanism():
    rng = np.random.default_rng(0)
    X, y = rng.normal(size=(800, 4)), np.zeros(800, dtype=int)  # one class: 'auto' picks k = 1
    acc = BudgetAccountant()
    clf = LabelDPClassifier(LogisticRegression(), "auto", 1.5, classes=range(3), random_state=0,
                            accountant=acc).fit(X, y)
    assert clf.plan_["k"] == 1
    report = clf.privacy_report()
    assert report.epsilon == pytest.approx(acc.spent_epsilon) == pytest.approx(1.5)
    assert pickle.loads(pickle.dumps(report)).epsilon == report.epsilon
    assert "RRTopK" not in str(report)
    clf.set_params(epsilon=5.0, accountant=None).fit(X, y)  # now labels are randomized
    assert clf.plan_.get("k") != 1
    assert clf.privacy_report().mechanism != "class histogram: constant model"


# -- the CLI: --param mean_epsilon=... ----------------------------------------------------------
def test_cli_releases_the_mean_like_memory_and_leaks_no_exact_sum(tmp_path, capsys):
    pa = pytest.importorskip("pyarrow")
    import pyarrow.parquet as pq

    from skdp_label.__main__ import main
    from skdp_label.release import load_key

    y = np.round(_labels(n=900, seed=9), 3)
    pq.write_table(pa.table({"value": y}), tmp_path / "in.parquet", row_group_size=250)
    assert main(["keygen", str(tmp_path / "label.key")]) == 0

    def run(mean, out):
        return main(["privatize", str(tmp_path / "in.parquet"), "--label", "value",
                     "--mechanism", "auto", "--epsilon", "0.5", "--bounds", "0", "10",
                     "--param", f"mean_epsilon={mean}", "--key-file", str(tmp_path / "label.key"),
                     "--release-id", out, "--output", str(tmp_path / out),
                     "--ledger", str(tmp_path / "budget.jsonl"), "--budget", "10",
                     "--batch-size", "200"])

    assert run(-0.5, "neg.parquet") != 0  # refused before any charge
    assert BudgetAccountant(10, ledger=tmp_path / "budget.jsonl").ledger == []
    assert not (tmp_path / "neg.parquet").exists()
    assert run("auto", "out.parquet") == 0
    manifest = json.loads((tmp_path / "out.parquet.manifest.json").read_text())
    _, memory = privatize(y, _auto(), load_key(tmp_path / "label.key"), "out.parquet")
    assert manifest["noisy_mean"]["value"] == memory.noisy_mean_
    assert manifest["epsilon_split"] == memory.epsilon_split_
    exact = KeyedRelease(_auto(), load_key(tmp_path / "label.key"), "out.parquet").batch_sum(
        y, np.arange(y.size))
    logs = capsys.readouterr()
    text = json.dumps(manifest) + logs.out + logs.err + (tmp_path / "budget.jsonl").read_text()
    assert str(exact) not in text and repr(y.mean()) not in text
