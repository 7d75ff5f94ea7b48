"""Privacy budget accounting for label-DP releases.

The accountant keeps a ledger of every release of randomized labels. Its
totals never under-count:

* releases compose sequentially (their epsilons and deltas add up), except
* releases recorded in one *disjoint group*, which library code opens only
  when it has itself split the rows into disjoint parts (parallel
  composition): a group costs the maximum of its entries.

The ledger lives in a small journal file rather than in the Python object,
so that every copy of the accountant -- the ones scikit-learn's ``clone``
makes, and the pickled ones joblib sends to worker processes in
``GridSearchCV(n_jobs=2)`` -- writes to the same ledger. Writes take an
exclusive file lock, so the budget check and the charge are one atomic step
across processes.
"""

import fcntl
import json
import math
import os
import tempfile
import threading
import weakref
from dataclasses import dataclass
from numbers import Real

__all__ = ["BudgetAccountant", "BudgetExceededError", "LedgerEntry"]

# Slack for floating-point sums when comparing a spend against the budget: a
# spend that reaches the budget exactly must be allowed despite rounding.
_BUDGET_RTOL = 1e-12


class BudgetExceededError(RuntimeError):
    """Raised when a release would spend more than the remaining budget.

    Nothing has been randomized when this is raised.
    """


@dataclass(frozen=True)
class LedgerEntry:
    """One release of randomized labels.

    Attributes
    ----------
    description : str
        What was released (mechanism and step).
    n_labels : int
        How many labels the release randomized.
    epsilon, delta : float
        The privacy cost of the release for each label it covers.
    group : str or None
        Disjoint group of the release, or None for a sequential release.
    """

    description: str
    n_labels: int
    epsilon: float
    delta: float
    group: str | None = None


def _check_cost(value, name):
    if not isinstance(value, Real) or isinstance(value, bool) or math.isnan(value):
        raise ValueError(f"{name} must be a real number, got {value!r}.")
    if value < 0:
        raise ValueError(f"{name} must be non-negative, got {value!r}.")
    return float(value)


class BudgetAccountant:
    """Ledger of the privacy budget spent on a set of labels.

    Pass one accountant to every mechanism or estimator that touches the same
    labels; each release is charged before any label is randomized, and a
    release that would exceed the budget raises :class:`BudgetExceededError`.

    Parameters
    ----------
    epsilon : float, default=inf
        Total epsilon budget.
    delta : float, default=0
        Total delta budget.

    Attributes
    ----------
    spent_epsilon : float
        Epsilon spent so far (sequential composition across releases,
        maximum within a disjoint group).
    spent_delta : float
        Delta spent so far, composed the same way.
    remaining_epsilon : float
        ``epsilon - spent_epsilon``.
    ledger : list of LedgerEntry
        Every release, in order.

    Notes
    -----
    ``copy.copy``, ``copy.deepcopy`` and :func:`sklearn.base.clone` return the
    accountant itself, and a pickled copy writes to the same journal file, so
    that model selection with cloned estimators, in this process or in joblib
    workers on this machine, is charged to this ledger.

    Examples
    --------
    >>> from skdp_label import BudgetAccountant
    >>> acc = BudgetAccountant(epsilon=2.0)
    >>> acc.spend(1.5, n_labels=100, description="Laplace")
    >>> acc.remaining_epsilon
    0.5
    >>> acc.spend(1.0, n_labels=100, description="Laplace")
    Traceback (most recent call last):
    ...
    skdp_label._accountant.BudgetExceededError: ...
    """

    def __init__(self, epsilon=math.inf, delta=0.0):
        if not isinstance(epsilon, Real) or math.isnan(epsilon) or epsilon <= 0:
            raise ValueError(f"epsilon must be a positive number, got {epsilon!r}.")
        if not isinstance(delta, Real) or math.isnan(delta) or not 0 <= delta < 1:
            raise ValueError(f"delta must be in [0, 1), got {delta!r}.")
        self.epsilon = float(epsilon)
        self.delta = float(delta)
        self._lock = threading.Lock()
        fd, self._path = tempfile.mkstemp(prefix="skdp_label_ledger_", suffix=".jsonl")
        os.close(fd)
        self._owner_pid = os.getpid()
        self._finalizer = weakref.finalize(self, _remove_journal, self._path, self._owner_pid)
        self._group_counter = 0

    # -- copies share the ledger ------------------------------------------
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        return {
            "epsilon": self.epsilon,
            "delta": self.delta,
            "path": self._path,
            "entries": [e.__dict__ for e in self.ledger],
        }

    def __setstate__(self, state):
        self.epsilon = state["epsilon"]
        self.delta = state["delta"]
        self._lock = threading.Lock()
        self._group_counter = 0
        self._path = state["path"]
        self._owner_pid = None
        self._finalizer = None
        if not os.path.exists(self._path):
            # The process that created the journal is gone (e.g. the
            # accountant was saved and loaded later): start a journal of our
            # own that carries the entries over, so nothing is forgotten.
            fd, self._path = tempfile.mkstemp(prefix="skdp_label_ledger_", suffix=".jsonl")
            with os.fdopen(fd, "w") as f:
                for entry in state["entries"]:
                    f.write(json.dumps(entry) + "\n")
            self._owner_pid = os.getpid()
            self._finalizer = weakref.finalize(
                self, _remove_journal, self._path, self._owner_pid
            )

    # -- reading ----------------------------------------------------------
    def _read_entries(self, f):
        f.seek(0)
        return [LedgerEntry(**json.loads(line)) for line in f if line.strip()]

    def _locked(self, mode):
        """Open the journal with an exclusive lock (released on close)."""
        f = open(self._path, mode)
        fcntl.flock(f, fcntl.LOCK_EX)
        return f

    @property
    def ledger(self):
        with self._lock, self._locked("r") as f:
            return self._read_entries(f)

    @staticmethod
    def _totals(entries):
        eps = delta = 0.0
        groups = {}
        for e in entries:
            if e.group is None:
                eps += e.epsilon
                delta += e.delta
            else:
                g_eps, g_delta = groups.get(e.group, (0.0, 0.0))
                groups[e.group] = (max(g_eps, e.epsilon), max(g_delta, e.delta))
        for g_eps, g_delta in groups.values():
            eps += g_eps
            delta += g_delta
        return eps, delta

    @property
    def spent_epsilon(self):
        return self._totals(self.ledger)[0]

    @property
    def spent_delta(self):
        return self._totals(self.ledger)[1]

    @property
    def remaining_epsilon(self):
        return max(self.epsilon - self.spent_epsilon, 0.0)

    @property
    def remaining_delta(self):
        return max(self.delta - self.spent_delta, 0.0)

    # -- charging ---------------------------------------------------------
    def _exceeds(self, eps, delta):
        return eps > self.epsilon * (1 + _BUDGET_RTOL) or delta > self.delta * (
            1 + _BUDGET_RTOL
        )

    def check(self, epsilon, delta=0.0):
        """Raise :class:`BudgetExceededError` if a spend would not fit.

        Nothing is recorded.
        """
        epsilon = _check_cost(epsilon, "epsilon")
        delta = _check_cost(delta, "delta")
        spent_eps, spent_delta = self._totals(self.ledger)
        if self._exceeds(spent_eps + epsilon, spent_delta + delta):
            raise BudgetExceededError(
                f"Privacy budget exceeded: spending epsilon={epsilon:g}, delta={delta:g} "
                f"on top of epsilon={spent_eps:g}, delta={spent_delta:g} already spent "
                f"exceeds the budget epsilon={self.epsilon:g}, delta={self.delta:g}."
            )

    def spend(self, epsilon, delta=0.0, *, n_labels, description, group=None):
        """Record a release, or raise if it would exceed the budget.

        Parameters
        ----------
        epsilon, delta : float
            Cost of the release for each label it covers.
        n_labels : int
            Number of labels released.
        description : str
            What is released.
        group : str, optional
            Token from :meth:`disjoint_group`. Only library code that has
            split the rows into disjoint parts passes it.

        Raises
        ------
        BudgetExceededError
            If the spend would exceed the budget; nothing is recorded then.
        """
        epsilon = _check_cost(epsilon, "epsilon")
        delta = _check_cost(delta, "delta")
        entry = LedgerEntry(str(description), int(n_labels), epsilon, delta, group)
        with self._lock, self._locked("r+") as f:
            entries = self._read_entries(f)
            spent_eps, spent_delta = self._totals(entries)
            new_eps, new_delta = self._totals(entries + [entry])
            if self._exceeds(new_eps, new_delta):
                raise BudgetExceededError(
                    f"Privacy budget exceeded: {description} needs epsilon={epsilon:g}, "
                    f"delta={delta:g}, but epsilon={spent_eps:g}, delta={spent_delta:g} "
                    f"of the budget epsilon={self.epsilon:g}, delta={self.delta:g} are "
                    "already spent. No label was randomized."
                )
            f.seek(0, os.SEEK_END)
            f.write(json.dumps(entry.__dict__) + "\n")

    def disjoint_group(self, description):
        """Open a group of releases over disjoint rows (parallel composition).

        The group costs the maximum of its entries. Only code that itself
        partitions the rows may use it; anything else composes sequentially.

        Returns
        -------
        group : str
            Token to pass as ``group`` to :meth:`spend`.
        """
        with self._lock:
            self._group_counter += 1
            return f"{description}#{os.getpid()}-{id(self)}-{self._group_counter}"

    # -- display ----------------------------------------------------------
    def __repr__(self):
        return (
            f"BudgetAccountant(epsilon={self.epsilon:g}, delta={self.delta:g}; "
            f"spent epsilon={self.spent_epsilon:g}, delta={self.spent_delta:g})"
        )

    def summary(self):
        """The ledger as a readable table."""
        lines = [f"{'release':<48} {'labels':>9} {'epsilon':>9} {'delta':>9}  group"]
        for e in self.ledger:
            lines.append(
                f"{e.description[:48]:<48} {e.n_labels:>9d} {e.epsilon:>9.4g} "
                f"{e.delta:>9.3g}  {e.group or '-'}"
            )
        lines.append(
            f"{'total (composed)':<48} {'':>9} {self.spent_epsilon:>9.4g} "
            f"{self.spent_delta:>9.3g}"
        )
        lines.append(f"{'budget':<48} {'':>9} {self.epsilon:>9.4g} {self.delta:>9.3g}")
        return "\n".join(lines)


def _remove_journal(path, owner_pid):
    if os.getpid() == owner_pid:
        try:
            os.remove(path)
        except OSError:
            pass
