"""Keyed, idempotent releases (skdp_label.release): the labels party's core."""

import copy
import json
import os
import pickle
import stat
import subprocess
import sys

import numpy as np
import pytest

from skdp_label import BudgetAccountant
from skdp_label._kernels._philox import KeyedRows, philox4x64
from skdp_label.mechanisms import make_mechanism, mechanism_names
from skdp_label.release import (
    KeyedRelease,
    generate_key_file,
    id_row_keys,
    load_key,
    mechanism_from_manifest,
    privatize,
)

from _audit import assert_no_random_state


def _mechanism(name, eps=1.0):
    kw = {"epsilon": eps}
    if name in mechanism_names("classification"):
        kw["classes"] = np.arange(11)
    else:
        kw["bounds"] = (0, 10)
    if name in ("optm", "mvu", "rqm", "erm", "quantization"):
        kw["bounds"] = (0.0, 10.0)
    return make_mechanism(name, **kw)


def test_philox_matches_numpy_word_for_word():
    key = np.array([0x0123456789ABCDEF, 0xFEDCBA9876543210], dtype=np.uint64)
    for counter in [(0, 0, 0, 0), (5, 7, 11, 13), (2**64 - 1, 3, 0, 2**63)]:
        bg = np.random.Philox(key=key, counter=np.array(counter, dtype=np.uint64))
        expected = bg.random_raw(4)  # numpy increments the counter first
        c = np.array(counter, dtype=np.uint64)
        c0 = c[0] + np.uint64(1)
        carry = np.uint64(1) if c0 == 0 else np.uint64(0)
        got = philox4x64(c0, c[1] + carry, c[2], c[3], key[0], key[1])
        np.testing.assert_array_equal(np.array(got, dtype=np.uint64), expected)


_CACHED_KEYED_KERNEL = """
import numpy as np
from skdp_label._kernels._philox import KeyedRows, _call_random_rows
rows = KeyedRows(1, 2, 0, np.arange(3, dtype=np.uint64), np.zeros(3, dtype=np.uint64))
rows.random_rows(3)
stats = _call_random_rows.stats
print(sum(stats.cache_hits.values()), sum(stats.cache_misses.values()))
"""


def test_keyed_kernels_are_cached_across_processes(tmp_path):
    # A kernel taking the keyed source compiles once, then loads from the
    # numba cache in a new process (a jitclass source, whose numba type is
    # named after an id(), missed the cache in every process).
    env = dict(os.environ, NUMBA_CACHE_DIR=str(tmp_path))
    repo = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    env["PYTHONPATH"] = os.pathsep.join([repo, env.get("PYTHONPATH", "")])
    runs = [
        subprocess.run([sys.executable, "-c", _CACHED_KEYED_KERNEL], env=env, capture_output=True,
                       text=True, check=True).stdout.split()
        for _ in range(2)
    ]
    assert runs == [["0", "1"], ["1", "0"]]  # (hits, misses): compiled, then loaded


def test_key_file_is_private_and_never_overwritten_or_pickled(tmp_path):
    path = tmp_path / "k"
    generate_key_file(path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    with pytest.raises(FileExistsError):
        generate_key_file(path)
    key = load_key(path)
    assert "secret" in repr(key) and open(path, "rb").read().hex() not in repr(key)
    with pytest.raises(TypeError):
        pickle.dumps(key)
    os.chmod(path, 0o644)
    with pytest.raises(ValueError, match="chmod 600"):
        load_key(path)
    with pytest.raises(ValueError, match="does not exist"):
        load_key(tmp_path / "missing")


@pytest.mark.parametrize("name", sorted(mechanism_names()))
def test_every_mechanism_is_batch_invariant_and_idempotent(name, key):
    n = 600
    y = (np.arange(n) * 7) % 11
    y = y.astype(float) if name not in mechanism_names("classification") else y
    mech = _mechanism(name)
    full, release = privatize(y, mech, key, "r1")
    parts = np.array_split(np.arange(n), 4)
    again = KeyedRelease(mech, key, "r1")
    if again.needs_counts:
        for p in parts:
            again.add_counts(y[p], p)
    again.fit(n)
    batched = np.concatenate([again.randomize(y[p], p) for p in parts])
    np.testing.assert_array_equal(full, batched)
    # A retried batch reproduces its rows exactly.
    np.testing.assert_array_equal(again.randomize(y[parts[2]], parts[2]), full[parts[2]])
    other, _ = privatize(y, mech, key, "r2")
    assert not np.array_equal(full, other)  # another release id: other noise
    assert_no_random_state(release.fitted_)


def test_rows_are_keyed_not_positioned(key):
    """With id keys, a row's noise follows the row, whatever the order."""
    y = np.arange(500) % 11
    ids = np.arange(10_000, 10_500)
    mech = _mechanism("rr", 0.5)
    out, _ = privatize(y, mech, key, "ids", row_keys=id_row_keys(key, ids))
    order = np.random.default_rng(0).permutation(500)
    shuffled, _ = privatize(y[order], mech, key, "ids", row_keys=id_row_keys(key, ids[order]))
    np.testing.assert_array_equal(shuffled, out[order])
    strings, _ = privatize(y, mech, key, "ids", row_keys=np.array([f"u{i}" for i in ids]))
    assert strings.shape == out.shape


def test_keyed_rows_are_independent_across_rows_and_stages():
    lo = np.arange(200_000, dtype=np.uint64)
    src = KeyedRows(np.uint64(1), np.uint64(2), np.uint64(0), lo, np.zeros_like(lo))
    first = src.random_rows(lo.size)
    second = src.random_rows(lo.size)  # the next sampling step of the same rows
    assert abs(np.corrcoef(first, second)[0, 1]) < 0.01
    assert abs(first.mean() - 0.5) < 0.005 and abs(np.corrcoef(first[:-1], first[1:])[0, 1]) < 0.01


def test_charged_once_per_release_id_and_refused_for_another_release(key, tmp_path):
    acc = BudgetAccountant(epsilon=2.5, ledger=tmp_path / "budget.jsonl")
    y = np.arange(300) % 11.0
    mech = _mechanism("rr-on-bins", 1.0)
    out1, rel = privatize(y, mech, key, "q4", accountant=acc)
    out2, rel2 = privatize(y, mech, key, "q4", accountant=acc)  # a retry: free
    np.testing.assert_array_equal(out1, out2)
    assert acc.spent_epsilon == pytest.approx(1.0) and rel.charged_ and not rel2.charged_
    with pytest.raises(ValueError, match="already in the ledger"):
        privatize(y, _mechanism("rr-on-bins", 2.0), key, "q4", accountant=acc)
    privatize(y, mech, key, "q5", accountant=acc)
    assert acc.spent_epsilon == pytest.approx(2.0)
    with pytest.raises(Exception, match="budget"):
        privatize(y, mech, key, "q6", accountant=acc)
    assert acc.spent_epsilon == pytest.approx(2.0)


def test_failing_release_spends_nothing(key):
    acc = BudgetAccountant()
    with pytest.raises(ValueError):
        privatize(np.array([1.0, 99.0]), _mechanism("laplace"), key, "bad", accountant=acc)
    with pytest.raises(ValueError):
        privatize(np.arange(5.0), _mechanism("laplace", 50.0), key, "cap", accountant=acc)
    assert acc.ledger == []


def test_manifest_is_the_hand_off(key, tmp_path):
    y = np.arange(2000) % 11.0
    # The unit grid: the exact histogram below is over the 11 integer labels.
    mech = make_mechanism("rr-on-bins", epsilon=2.0, bounds=(0, 10), resolution=1)
    out, release = privatize(y, mech, key, "m1")
    manifest = release.manifest()
    text = json.dumps(manifest)  # JSON-serialisable as it is
    assert json.loads(text)["release_id"] == "m1"
    secret = open(tmp_path / "label.key", "rb").read()
    assert secret.hex() not in text and "seed" not in text.lower()
    exact = np.bincount(y.astype(int), minlength=11) / y.size
    assert not np.allclose(manifest["params"]["prior"][1], exact, atol=1e-12)  # noisy, not exact
    assert manifest["epsilon"] == 2.0 and sum(manifest["epsilon_split"].values()) == pytest.approx(2.0)
    rebuilt = mechanism_from_manifest(manifest)
    np.testing.assert_allclose(rebuilt.transition_matrix_, release.fitted_.transition_matrix_)
    np.testing.assert_allclose(rebuilt.output_values_, release.fitted_.output_values_)


def test_keyed_auto_release_assumes_the_same_n_eff_as_in_memory(key):
    # A keyed release fits on a placeholder: 'auto' must still take n_eff's
    # default from the (public) row count, as a fit on the labels does.
    n = 900
    y = ((np.arange(n) * 7) % 11).astype(float)
    mech = _mechanism("auto")
    _, release = privatize(y, mech, key, "auto-n-eff")
    in_memory = _mechanism("auto").fit(y)
    assert release.fitted_.n_eff_ == in_memory.n_eff_ == pytest.approx(np.sqrt(n))
    assert mech.n_eff is None  # the caller's mechanism is not modified


def test_keyed_random_source_holds_its_key_out_of_reach():
    # KeyedRows carries a release's Philox key: no pickle or copy of it, and no
    # attribute or repr that shows the key to Python.
    key = 0x0123456789ABCDEF
    rows = KeyedRows(np.uint64(key), np.uint64(7), np.uint64(0), np.arange(3, dtype=np.uint64),
                     np.zeros(3, dtype=np.uint64))
    for attack in (pickle.dumps, copy.deepcopy, copy.copy):
        with pytest.raises(TypeError):
            attack(rows)
    assert not {"k0", "k1", "stage", "row_lo", "row_hi", "buf"} & set(dir(rows))
    assert str(key) not in repr(rows) and hex(key)[2:] not in repr(rows).lower()
