"""The budget accountant: composition, budget errors, clone, workers, persistent ledgers."""

import copy
import gc
import json
import math
import os
import pickle
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest
from joblib import Parallel, delayed
from sklearn.base import clone
from sklearn.compose import TransformedTargetRegressor
from sklearn.linear_model import Ridge
from sklearn.model_selection import GridSearchCV, cross_val_score

from skdp_label import BudgetAccountant, BudgetExceededError, LedgerUnavailableError
from skdp_label.mechanisms import Laplace, RandomizedResponse


def test_sequential_composition_and_ledger():
    acc = BudgetAccountant(epsilon=3.0)
    acc.spend(1.0, n_labels=10, description="a")
    acc.spend(0.5, n_labels=20, description="b")
    assert acc.spent_epsilon == pytest.approx(1.5)
    assert acc.remaining_epsilon == pytest.approx(1.5)
    assert [e.description for e in acc.ledger] == ["a", "b"]
    assert [e.n_labels for e in acc.ledger] == [10, 20]
    assert "total" in acc.summary()


def test_disjoint_group_costs_its_maximum():
    acc = BudgetAccountant()
    group = acc.disjoint_group("stages")
    acc.spend(1.0, n_labels=5, description="stage 1", group=group)
    acc.spend(0.7, n_labels=5, description="stage 2", group=group)
    acc.spend(0.2, n_labels=10, description="other")
    assert acc.spent_epsilon == pytest.approx(1.2)


def test_exceeding_spend_raises_and_records_nothing():
    acc = BudgetAccountant(epsilon=1.0)
    acc.spend(0.8, n_labels=1, description="a")
    with pytest.raises(BudgetExceededError):
        acc.spend(0.3, n_labels=1, description="b")
    assert len(acc.ledger) == 1
    acc.spend(0.2, n_labels=1, description="exactly the rest")  # reaching the budget is fine
    assert acc.remaining_epsilon == pytest.approx(0.0)


def test_delta_budget():
    acc = BudgetAccountant(epsilon=10.0)  # delta budget 0
    with pytest.raises(BudgetExceededError):
        acc.spend(0.1, 1e-6, n_labels=1, description="gaussian")


@pytest.mark.parametrize("bad", [0, -1.0, float("nan")])
def test_invalid_budget(bad):
    with pytest.raises(ValueError):
        BudgetAccountant(epsilon=bad)


def test_copies_share_the_ledger():
    acc = BudgetAccountant()
    assert copy.copy(acc) is acc and copy.deepcopy(acc) is acc
    mech = Laplace(1.0, bounds=(0, 1), accountant=acc)
    cloned = clone(mech)
    assert cloned.accountant is acc
    restored = pickle.loads(pickle.dumps(acc))
    restored.spend(0.25, n_labels=3, description="from a pickled copy")
    assert acc.spent_epsilon == pytest.approx(0.25)


def test_mechanism_over_budget_raises_before_randomizing():
    acc = BudgetAccountant(epsilon=1.5)
    mech = Laplace(1.0, bounds=(0, 1), accountant=acc)
    mech.fit_transform(np.zeros(5))
    sampled = []
    mech._randomize_column = lambda y, rng: sampled.append(y)  # spy on the sampler
    with pytest.raises(BudgetExceededError):
        mech.transform(np.zeros(5))
    assert sampled == []  # no noise was drawn
    assert acc.spent_epsilon == pytest.approx(1.0)
    with pytest.raises(BudgetExceededError):  # fit of a fresh mechanism refuses early too
        Laplace(1.0, bounds=(0, 1), accountant=acc).fit(np.zeros(5))


def test_mechanism_refused_by_the_accountant_keeps_its_count():
    acc = BudgetAccountant(epsilon=1.5)
    mech = Laplace(1.0, bounds=(0, 1), accountant=acc).fit(np.zeros(5))
    mech.transform(np.zeros(5))
    with pytest.raises(BudgetExceededError):
        mech.transform(np.zeros(5))
    assert mech.epsilon_spent_ == pytest.approx(acc.spent_epsilon) == pytest.approx(1.0)
    fresh = Laplace(1.0, bounds=(0, 1), accountant=acc)
    with pytest.raises(BudgetExceededError):
        fresh._charge(1.0, 0.0, n_labels=5, step="labels")
    assert not hasattr(fresh, "epsilon_spent_") and not hasattr(fresh, "delta_spent_")


class _InterruptedAfterWriting(BudgetAccountant):
    """An accountant interrupted (Ctrl-C) right after its ledger recorded the spend."""

    def spend(self, *args, **kwargs):
        super().spend(*args, **kwargs)
        raise KeyboardInterrupt


def test_interrupt_after_the_ledger_write_never_under_counts():
    # Attack (carried over from review): the ledger is written, then an interrupt lands
    # before the mechanism updates its own count; epsilon_spent_ must not fall below
    # what the ledger holds (a fit that is retried would otherwise look cheaper).
    acc = _InterruptedAfterWriting()
    mech = RandomizedResponse(0.7, classes=[0, 1], accountant=acc).fit(np.zeros(4, int))
    with pytest.raises(KeyboardInterrupt):
        mech.transform(np.zeros(4, int))
    assert acc.spent_epsilon == pytest.approx(0.7)
    assert mech.epsilon_spent_ >= acc.spent_epsilon


def _ttr_search(acc, n_jobs):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(60, 3))
    y = np.clip(X @ [1.0, -1.0, 0.5] + rng.normal(size=60), -5, 5)
    model = TransformedTargetRegressor(
        regressor=Ridge(),
        transformer=Laplace(bounds=(-5.0, 5.0), accountant=acc, random_state=0),
        check_inverse=False,
    )
    grid = {"transformer__epsilon": [0.5, 1.0, 2.0]}
    search = GridSearchCV(model, grid, cv=3, n_jobs=n_jobs).fit(X, y)
    return search


@pytest.mark.parametrize("n_jobs", [1, 2])
def test_grid_search_is_fully_charged(n_jobs):
    acc = BudgetAccountant()
    search = _ttr_search(acc, n_jobs)
    # 3 epsilons x 3 folds, each fold re-privatizes its training labels, plus the refit.
    expected = 3 * (0.5 + 1.0 + 2.0) + search.best_params_["transformer__epsilon"]
    assert acc.spent_epsilon == pytest.approx(expected)
    assert len(acc.ledger) == 10


def test_cross_val_score_is_fully_charged():
    acc = BudgetAccountant()
    rng = np.random.default_rng(1)
    X = rng.normal(size=(40, 2))
    y = rng.integers(0, 3, size=40)
    from sklearn.linear_model import LogisticRegression

    model = TransformedTargetRegressor(
        regressor=LogisticRegression(),
        transformer=RandomizedResponse(0.5, classes=[0, 1, 2], accountant=acc),
        check_inverse=False,
    )
    cross_val_score(model, X, y, cv=4)
    assert acc.spent_epsilon == pytest.approx(4 * 0.5)


# -- tokens, copies and pickles ------------------------------------------------
def test_disjoint_groups_of_unpickled_copies_never_merge():
    # A multi-stage fit opens a group and charges its stages to it. Twenty fits,
    # each through its own unpickled copy (as joblib workers do), are twenty
    # separate groups: the ledger must charge 20x, not the max over merged groups.
    acc = BudgetAccountant()
    blob = pickle.dumps(acc)
    tokens = []
    for _ in range(20):
        copy_ = pickle.loads(blob)  # collected before the next one: its address is reused
        group = copy_.disjoint_group("LabelDPClassifier")
        copy_.spend(1.0, n_labels=50, description="stage 1", group=group)
        copy_.spend(1.0, n_labels=50, description="stage 2", group=group)
        tokens.append(group)
        del copy_
    assert len(set(tokens)) == 20
    assert acc.spent_epsilon == 20.0
    assert len(acc.ledger) == 40


def test_pickle_carries_no_snapshot_of_the_ledger():
    acc = BudgetAccountant(epsilon=5.0)
    acc.spend(1.0, n_labels=7, description="release-described-as-xyzzy")
    blob = pickle.dumps(acc)
    assert b"xyzzy" not in blob
    restored = pickle.loads(blob)
    assert restored.ledger_id == acc.ledger_id == copy.deepcopy(acc).ledger_id
    assert restored.ledger == acc.ledger
    assert BudgetAccountant().ledger_id != acc.ledger_id


def test_temporary_journal_is_private_and_removed_with_its_owner():
    acc = BudgetAccountant(epsilon=3.0)
    path = acc._path
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    restored = pickle.loads(pickle.dumps(acc))
    restored.spend(1.0, n_labels=1, description="while the owner lives")
    del acc
    gc.collect()
    assert not os.path.exists(path)
    # The copy fails closed instead of starting a fresh journal of its own.
    with pytest.raises(LedgerUnavailableError, match="no longer exists"):
        restored.spend(0.5, n_labels=1, description="after the owner is gone")
    with pytest.raises(BudgetExceededError):  # callers that stop on "cannot spend" stop too
        restored.check(0.1)
    for name in ["spent_epsilon", "spent_delta", "remaining_epsilon", "remaining_delta", "ledger"]:
        with pytest.raises(LedgerUnavailableError):
            getattr(restored, name)
    assert "ledger unavailable" in repr(restored)
    assert not os.path.exists(path)


def test_pickle_of_an_older_version_fails_closed():
    # Older pickles carried a snapshot of the entries and no ledger id: such a
    # copy cannot show which ledger it belongs to, so it must not spend.
    acc = BudgetAccountant(epsilon=2.0)
    old = BudgetAccountant.__new__(BudgetAccountant)
    old.__setstate__({"epsilon": 2.0, "delta": 0.0, "path": acc._path, "entries": []})
    with pytest.raises(LedgerUnavailableError, match="older version"):
        old.spend(1.0, n_labels=1, description="a")
    assert acc.ledger == []


# -- subprocesses ----------------------------------------------------------------
_REPO = str(Path(__file__).resolve().parents[1])


def _python(code, *args):
    """Start ``python -c code args`` with this checkout importable."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(p for p in [_REPO, env.get("PYTHONPATH")] if p)
    return subprocess.Popen(
        [sys.executable, "-c", code, *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
    )


def _finish(proc):
    out, err = proc.communicate(timeout=120)
    assert proc.returncode == 0, err
    return out.split()


_SPEND_AT_GO = """
import os, sys, time
from skdp_label import BudgetAccountant, BudgetExceededError
path, go = sys.argv[1], sys.argv[2]
print("ready", flush=True)
while not os.path.exists(go):  # start together, so that the two spends race
    time.sleep(0.001)
acc = BudgetAccountant(epsilon=1.0, ledger=path)
try:
    acc.spend(0.75, n_labels=10, description=f"release by {os.getpid()}")
    print("spent")
except BudgetExceededError:
    print("refused")
"""


def test_persistent_ledger_shared_by_two_processes(tmp_path):
    # Both processes create or open the same new ledger and spend 0.75 of a
    # budget of 1 at once: exactly one may succeed.
    path, go = tmp_path / "budget.jsonl", tmp_path / "go"
    procs = [_python(_SPEND_AT_GO, str(path), str(go)) for _ in range(2)]
    for proc in procs:
        assert proc.stdout.readline().strip() == "ready"
    go.touch()
    assert sorted(_finish(proc)[0] for proc in procs) == ["refused", "spent"]
    acc = BudgetAccountant(epsilon=1.0, ledger=path)
    assert len(acc.ledger) == 1 and acc.spent_epsilon == 0.75
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600


_SAVE_AND_EXIT = """
import pickle, sys
from skdp_label import BudgetAccountant
acc = BudgetAccountant(epsilon=3.0)
acc.spend(2.0, n_labels=10, description="before saving")
with open(sys.argv[1], "wb") as f:
    pickle.dump(acc, f)
print(acc._path)
"""

_LOAD_AND_SPEND = """
import pickle, sys
from skdp_label import LedgerUnavailableError
with open(sys.argv[1], "rb") as f:
    acc = pickle.load(f)
attempts = {
    "spend": lambda: acc.spend(1.0, n_labels=10, description="after loading"),
    "check": lambda: acc.check(1.0),
    "spent_epsilon": lambda: acc.spent_epsilon,
    "remaining_epsilon": lambda: acc.remaining_epsilon,
}
for name, attempt in attempts.items():
    try:
        attempt()
        print(name + ":ok")
    except LedgerUnavailableError:
        print(name + ":refused")
print("repr:" + ("unavailable" if "ledger unavailable" in repr(acc) else "available"))
"""


def test_reloaded_accountant_refuses_once_its_owner_has_exited(tmp_path):
    pickled = tmp_path / "accountant.pkl"
    (journal,) = _finish(_python(_SAVE_AND_EXIT, str(pickled)))
    assert not os.path.exists(journal)  # removed when the owner exited
    loaders = [_python(_LOAD_AND_SPEND, str(pickled)) for _ in range(2)]
    expected = [
        "spend:refused",
        "check:refused",
        "spent_epsilon:refused",
        "remaining_epsilon:refused",
        "repr:unavailable",
    ]
    for loader in loaders:
        assert _finish(loader) == expected
    assert not os.path.exists(journal)  # and nobody recreated it


def _spend_from_worker(acc, barrier_dir, n_rounds):
    """Spend ``n_rounds`` times a sequential release and a two-stage group."""
    # Wait for the other worker, so that the two really spend concurrently
    # (the deadline only guards against a hang).
    me = f"{os.getpid()}-{threading.get_ident()}"
    open(os.path.join(barrier_dir, me), "w").close()
    deadline = time.monotonic() + 120
    while len(os.listdir(barrier_dir)) < 2:
        if time.monotonic() > deadline:
            raise RuntimeError("the other worker never started")
        time.sleep(0.001)
    tokens = []
    for _ in range(n_rounds):
        acc.spend(0.125, n_labels=3, description="sequential")
        group = acc.disjoint_group("two stages")
        acc.spend(0.25, n_labels=5, description="stage 1", group=group)
        acc.spend(0.25, n_labels=5, description="stage 2", group=group)
        tokens.append(group)
    return me, tokens


@pytest.mark.parametrize(
    "backend, persistent", [("loky", False), ("loky", True), ("threading", False)]
)
def test_concurrent_workers_sum_exactly(tmp_path, backend, persistent):
    ledger = tmp_path / "budget.jsonl" if persistent else None
    acc = BudgetAccountant(epsilon=1000.0, ledger=ledger)
    barrier = tmp_path / "barrier"
    barrier.mkdir()
    n_rounds = 20
    results = Parallel(n_jobs=2, backend=backend)(
        delayed(_spend_from_worker)(acc, str(barrier), n_rounds) for _ in range(2)
    )
    workers = {me for me, _ in results}
    tokens = [t for _, ts in results for t in ts]
    assert len(workers) == 2
    assert len(set(tokens)) == 2 * n_rounds
    # Binary fractions: the exact sum is representable, so compare exactly.
    assert acc.spent_epsilon == 2 * n_rounds * (0.125 + 0.25)
    assert len(acc.ledger) == 2 * n_rounds * 3


# -- persistent ledgers ----------------------------------------------------------
def test_persistent_ledger_is_continued_by_a_new_accountant(tmp_path):
    path = tmp_path / "budget.jsonl"
    first = BudgetAccountant(epsilon=3.0, delta=1e-6, ledger=path)
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    group = first.disjoint_group("stages")
    first.spend(1.0, 1e-7, n_labels=4, description="stage 1", group=group)
    first.spend(0.5, n_labels=4, description="stage 2", group=group)
    first.spend(0.25, n_labels=8, description="other")
    ledger_id = first.ledger_id
    del first
    gc.collect()
    assert path.exists()  # a persistent ledger outlives its accountant

    later = BudgetAccountant(epsilon=3.0, delta=1e-6, ledger=str(path))
    assert later.ledger_id == ledger_id
    assert [e.description for e in later.ledger] == ["stage 1", "stage 2", "other"]
    assert later.spent_epsilon == pytest.approx(1.25)
    assert later.spent_delta == pytest.approx(1e-7)
    later.spend(1.75, n_labels=1, description="the rest")
    with pytest.raises(BudgetExceededError):
        pickle.loads(pickle.dumps(later)).spend(0.01, n_labels=1, description="too much")
    assert repr(later).endswith("spent epsilon=3, delta=1e-07)")
    # The file is plain JSON lines, readable by any tool: a header, then releases.
    records = [json.loads(line) for line in path.read_text().splitlines()]
    assert [r["record"] for r in records] == ["header"] + ["release"] * 4
    assert records[0]["ledger_id"] == ledger_id and records[0]["epsilon"] == 3.0


def test_persistent_ledger_budget_must_match(tmp_path):
    path = tmp_path / "budget.jsonl"
    BudgetAccountant(epsilon=3.0, ledger=path).spend(1.0, n_labels=1, description="a")
    before = path.read_bytes()
    for epsilon, delta in [(4.0, 0.0), (3.0, 1e-5), (math.inf, 0.0)]:
        with pytest.raises(ValueError, match="budget"):
            BudgetAccountant(epsilon, delta, ledger=path)
    assert path.read_bytes() == before
    # An infinite budget is recorded as the string "inf" and read back.
    unlimited = tmp_path / "unlimited.jsonl"
    BudgetAccountant(ledger=unlimited)
    assert BudgetAccountant(ledger=unlimited).epsilon == math.inf
    with pytest.raises(ValueError, match="budget"):
        BudgetAccountant(epsilon=1.0, ledger=unlimited)


def test_bad_ledger_path(tmp_path):
    with pytest.raises(ValueError, match="ledger"):
        BudgetAccountant(ledger=tmp_path / "no such directory" / "budget.jsonl")
    with pytest.raises(ValueError, match="ledger"):
        BudgetAccountant(ledger=tmp_path)  # a directory
    with pytest.raises(ValueError, match="ledger"):
        BudgetAccountant(ledger=3)


def _truncate_last_record(path):
    data = path.read_bytes()
    path.write_bytes(data[:-7])


def _drop_header(path):
    path.write_bytes(b"".join(path.read_bytes().splitlines(keepends=True)[1:]))


def _garble_middle(path):
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(2, b"{not json\n")
    path.write_bytes(b"".join(lines))


def _negative_spend(path):
    lines = path.read_bytes().splitlines(keepends=True)
    record = json.loads(lines[1])
    record["epsilon"] = -1.0
    lines[1] = (json.dumps(record) + "\n").encode()
    path.write_bytes(b"".join(lines))


@pytest.mark.parametrize(
    "damage",
    [
        _truncate_last_record,
        _drop_header,
        _garble_middle,
        _negative_spend,
        lambda p: p.write_bytes(b""),
    ],
    ids=["truncated", "no header", "garbled line", "negative spend", "empty"],
)
def test_malformed_ledger_fails_closed(tmp_path, damage):
    path = tmp_path / "budget.jsonl"
    acc = BudgetAccountant(epsilon=3.0, ledger=path)
    acc.spend(1.0, n_labels=1, description="a")
    acc.spend(1.0, n_labels=1, description="b")
    damage(path)
    damaged = path.read_bytes()
    with pytest.raises(LedgerUnavailableError, match="malformed"):
        BudgetAccountant(epsilon=3.0, ledger=path)
    with pytest.raises(LedgerUnavailableError, match="malformed"):
        acc.spend(0.5, n_labels=1, description="c")
    with pytest.raises(LedgerUnavailableError):
        acc.check(0.5)
    with pytest.raises(LedgerUnavailableError):
        acc.spent_epsilon
    assert "ledger unavailable" in repr(acc)
    assert path.read_bytes() == damaged  # nothing appended to a ledger it cannot read


def test_persistent_ledger_deleted_or_replaced_fails_closed(tmp_path):
    path = tmp_path / "budget.jsonl"
    acc = BudgetAccountant(epsilon=3.0, ledger=path)
    copy_ = pickle.loads(pickle.dumps(acc))
    acc.spend(1.0, n_labels=1, description="a")
    path.unlink()
    with pytest.raises(LedgerUnavailableError, match="no longer exists"):
        copy_.spend(1.0, n_labels=1, description="b")
    assert not path.exists()  # a copy never recreates a lost ledger
    # A new ledger at the same path is another ledger: the old copies refuse it.
    BudgetAccountant(epsilon=3.0, ledger=path)
    with pytest.raises(LedgerUnavailableError, match="different ledger"):
        copy_.spend(1.0, n_labels=1, description="c")
