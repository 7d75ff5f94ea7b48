"""Two threads charging one mechanism are both counted (charges_, epsilon_spent_)."""

import sys
import threading

import pytest

from skdp_label.mechanisms import Laplace
from skdp_label.mechanisms import _base


def _charge_from_threads(mech, n_threads=6, per_thread=150):
    def work():
        for _ in range(per_thread):
            mech._charge(0.5, 0.0, n_labels=1, step="randomized labels")

    old = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)  # switch threads as often as possible: races show
    try:
        threads = [threading.Thread(target=work) for _ in range(n_threads)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
    finally:
        sys.setswitchinterval(old)
    return n_threads * per_thread


def test_concurrent_charges_are_all_counted():
    mech = Laplace(1.0, bounds=(0.0, 1.0)).fit([0.0])
    n = _charge_from_threads(mech)
    assert len(mech.charges_) == n
    assert mech.epsilon_spent_ == pytest.approx(0.5 * n, rel=0, abs=0)


def test_the_counts_lock_is_the_one_charge_uses(monkeypatch):
    # Mutation guard: charge must take the module's lock (a charge that skips it
    # could lose entries; the race itself is too rare to assert on every run).
    taken = []

    class Spy:
        def __enter__(self):
            taken.append(True)

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(_base, "_COUNTS_LOCK", Spy())
    mech = Laplace(1.0, bounds=(0.0, 1.0)).fit([0.0])
    mech._charge(0.5, 0.0, n_labels=1, step="randomized labels")
    assert len(taken) == 2  # the counts, then charges_
