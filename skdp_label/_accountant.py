"""Privacy budget accounting for label-DP releases.

The accountant keeps a ledger of every release of randomized labels. Its
totals never under-count:

* releases compose sequentially (their epsilons and deltas add up), except
* releases recorded in one *disjoint group*, which library code opens only
  when it has itself split the rows into disjoint parts (parallel
  composition): a group costs the maximum of its entries. Group tokens are
  random (``uuid4``), so two groups never merge, whichever process, copy or
  unpickled accountant opened them.

The ledger lives in a JSON-lines file rather than in the Python object, so
that every copy of the accountant -- the ones scikit-learn's ``clone`` makes,
and the pickled ones joblib sends to worker processes -- writes to the same
ledger. Every read takes a file lock, and a spend holds an exclusive lock
while it reads the ledger, checks the budget and appends, so check and charge
are one atomic step across processes.

The file is either a private temporary journal, removed when the accountant
that created it is collected, or a persistent ledger at a path the user
chooses, which later sessions reopen. Either way the file starts with a
header record holding the budget and a random ledger id. The accountant
fails closed: when its file is gone, replaced or malformed, it refuses to
spend (:class:`LedgerUnavailableError`) rather than start over from a copy
that would forget earlier spends.
"""

from __future__ import annotations

import errno
import fcntl
import json
import math
import os
import tempfile
import uuid
import weakref
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from numbers import Integral, Real
from typing import TYPE_CHECKING, Any

from .utils._repr import public_repr

if TYPE_CHECKING:  # optional dependency: only named in hints
    from pandas import DataFrame

__all__ = ["BudgetAccountant", "BudgetExceededError", "LedgerEntry", "LedgerUnavailableError"]

# Slack for floating-point sums when comparing a spend against the budget: a
# spend that reaches the budget exactly must be allowed despite rounding.
_BUDGET_RTOL = 1e-12

_FORMAT = "skdp_label-ledger"
_FORMAT_VERSION = 1
_HEADER_KEYS = {"record", "format", "version", "ledger_id", "epsilon", "delta"}
_ENTRY_KEYS = {"record", "description", "n_labels", "epsilon", "delta", "group"}
# Keyed releases (skdp_label.release) also record their id and fingerprint, and the
# digest of the law they sample: on their release record, or (when the law is only
# known after the charge: a private prior) on a law record that follows it. Ledgers
# written before the digest existed have neither, and stay readable.
_RELEASE_KEYS = {"release_id", "release_fingerprint"}
_LAW_KEY = "release_law"
_LAW_RECORD_KEYS = {"record", "release_id", "release_fingerprint", _LAW_KEY}
# Optional public context of a release (strings or numbers only).
_DETAIL_KEYS = ("estimator", "mechanism", "step", "stage", "column")


class BudgetExceededError(RuntimeError):
    """Raised when a release would spend more than the remaining budget.

    Nothing has been randomized when this is raised.
    """


class LedgerUnavailableError(BudgetExceededError):
    """Raised when the accountant's ledger cannot be read or written.

    The ledger file is gone (for instance the process that owned a temporary
    journal has exited), was replaced by another file, or is malformed or
    truncated. The accountant then refuses every spend and every query of
    the totals instead of guessing: it never starts over from an old copy.
    It subclasses :class:`BudgetExceededError` so that code which stops when
    a release cannot be paid for stops here too. Nothing has been recorded
    or randomized when this is raised.
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
    release_id, release_fingerprint : str or None
        For keyed releases: the release id and a fingerprint of what it
        releases (mechanism, public parameters, rows). A retry of the same
        release is not charged again.
    release_law : str or None
        For keyed releases: the digest of the law the release samples (its
        fitted mechanism, :func:`skdp_label.release.law_digest`), recorded
        at its first fit; a retry whose refit samples another law is
        refused. None in ledgers written before the digest existed, and
        between a charge and its law record.
    details : dict or None
        Public context of the release, for readable reports: any of
        ``estimator``, ``mechanism``, ``step``, ``stage``, ``column``.
    """

    description: str
    n_labels: int
    epsilon: float
    delta: float
    group: str | None = None
    release_id: str | None = None
    release_fingerprint: str | None = None
    details: dict | None = None
    release_law: str | None = None


def _check_details(details):
    """Validate the public context of a release (None or a small flat dict)."""
    if details is None:
        return None
    if not isinstance(details, dict) or not set(details) <= set(_DETAIL_KEYS):
        raise ValueError(f"details must be a dict with keys among {', '.join(_DETAIL_KEYS)}.")
    for value in details.values():
        if not (value is None or isinstance(value, (str, int, float)) and not isinstance(value, bool)):
            raise ValueError("details values must be strings, numbers or None.")
    return dict(details)


def _check_cost(value, name):
    if not isinstance(value, Real) or isinstance(value, bool) or math.isnan(value):
        raise ValueError(f"{name} must be a real number, got {public_repr(value)}.")
    if value < 0:
        raise ValueError(f"{name} must be non-negative, got {public_repr(value)}.")
    return float(value)


# -- the file format ------------------------------------------------------
# Strict JSON has no infinity, and the default budget is infinite: write it
# as the string "inf" so that any JSON reader can read the ledger.
def _encode_number(x):
    return "inf" if x == math.inf else x


def _decode_number(x):
    if x == "inf":
        return math.inf
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not x >= 0:
        raise ValueError("not a non-negative number")
    return float(x)


def _dumps(record):
    return (json.dumps(record, allow_nan=False, sort_keys=True) + "\n").encode("utf-8")


def _header_line(ledger_id, epsilon, delta):
    return _dumps(
        {
            "record": "header",
            "format": _FORMAT,
            "version": _FORMAT_VERSION,
            "ledger_id": ledger_id,
            "epsilon": _encode_number(epsilon),
            "delta": _encode_number(delta),
        }
    )


def _entry_line(entry):
    record = asdict(entry)
    if entry.release_id is None:  # the format of ordinary releases is unchanged
        del record["release_id"], record["release_fingerprint"]
    if entry.release_law is None:  # nor that of a keyed release without its law
        del record[_LAW_KEY]
    if entry.details is None:
        del record["details"]
    record["record"] = "release"
    record["epsilon"] = _encode_number(entry.epsilon)
    record["delta"] = _encode_number(entry.delta)
    return _dumps(record)


def _law_line(release_id, fingerprint, law):
    """The law record of a keyed release charged before its law was known."""
    return _dumps({"record": _LAW_KEY, "release_id": release_id,
                   "release_fingerprint": fingerprint, _LAW_KEY: law})


def _recorded_law(entries, release_id):
    """The law recorded for ``release_id`` (None if none is)."""
    return next((e.release_law for e in entries
                 if e.release_id == release_id and e.release_law is not None), None)


def _check_release_law(entries, release_id, law):
    """Whether ``law`` must be recorded for ``release_id`` (no law is yet), or
    raise ``ValueError`` if the ledger holds another law for it.

    The message names the recorded digest only: a refused law is never shown,
    since with a private prior it hashes a noisy histogram that was not charged
    (the same id run over other labels)."""
    recorded = _recorded_law(entries, release_id)
    if recorded is None:
        return True
    if recorded != law:
        raise ValueError(
            f"release id {release_id!r} was first fitted to another law: the ledger records "
            f"the law digest {recorded[:16]}..., and this fit computed another. A keyed "
            "release's noise is a function of the key, the id and the rows, so sampling it "
            "through another mechanism would make a second, different release sharing the "
            "first one's noise, uncharged. The fit is a function of the public inputs, but not "
            "across environments: the library versions (numpy, scipy, skdp_label) or the "
            "machine differ from the first run's (or, with a private prior, the labels do). "
            "Resume with the environment of the first run, or release under a new release id "
            "(which is charged). Nothing was charged or randomized."
        )
    return False


def _parse_ledger(data, path):
    """Return (header dict, list of LedgerEntry) or raise LedgerUnavailableError.

    Anything unexpected fails closed: an accountant that silently skipped a
    line it cannot read would under-count.
    """

    def bad(why):
        return LedgerUnavailableError(
            f"The privacy ledger {path} is malformed ({why}); refusing to spend. "
            "Restore the file from a backup or start a new ledger at another path."
        )

    if not data:
        raise bad("the file is empty: no header record")
    if not data.endswith(b"\n"):
        raise bad("the last record is incomplete, the file was truncated")
    lines = data[:-1].split(b"\n")
    records = []
    for number, line in enumerate(lines, start=1):
        try:
            record = json.loads(line)
        except ValueError:
            raise bad(f"line {number} is not a JSON record") from None
        if not isinstance(record, dict):
            raise bad(f"line {number} is not a JSON object")
        records.append(record)

    header = records[0]
    if (
        set(header) != _HEADER_KEYS
        or header["record"] != "header"
        or header["format"] != _FORMAT
    ):
        raise bad("line 1 is not a skdp_label ledger header")
    if header["version"] != _FORMAT_VERSION:
        raise bad(f"unsupported ledger format version {header['version']!r}")
    try:
        budget = (_decode_number(header["epsilon"]), _decode_number(header["delta"]))
        ledger_id = uuid.UUID(hex=header["ledger_id"]).hex
    except (ValueError, TypeError, AttributeError):
        raise bad("line 1 has an invalid budget or ledger id") from None

    entries = []
    for number, record in enumerate(records[1:], start=2):
        try:
            if record.get("record") == _LAW_KEY:
                _attach_law(entries, record)
                continue
            keys = set(record) - {"details"}
            allowed = (_ENTRY_KEYS, _ENTRY_KEYS | _RELEASE_KEYS,
                       _ENTRY_KEYS | _RELEASE_KEYS | {_LAW_KEY})
            if keys not in allowed or record["record"] != "release":
                raise ValueError("not a release record")
            details = _check_details(record.get("details"))
            release_id = record.get("release_id")
            fingerprint = record.get("release_fingerprint")
            law = record.get(_LAW_KEY)
            if not all(v is None or isinstance(v, str) for v in (release_id, fingerprint, law)):
                raise ValueError("bad release id")
            n_labels, description, group = (
                record["n_labels"], record["description"], record["group"]
            )
            if isinstance(n_labels, bool) or not isinstance(n_labels, int) or n_labels < 0:
                raise ValueError("bad n_labels")
            if not isinstance(description, str) or not (group is None or isinstance(group, str)):
                raise ValueError("bad description or group")
            if law is not None and _recorded_law(entries, release_id) not in (None, law):
                # The accountant records one law an id: two are a damaged ledger, and
                # a retry checked against either could sample the other's noise.
                raise ValueError("a second law for a release")
            entries.append(
                LedgerEntry(
                    description,
                    n_labels,
                    _decode_number(record["epsilon"]),
                    _decode_number(record["delta"]),
                    group,
                    release_id,
                    fingerprint,
                    details,
                    law,
                )
            )
        except ValueError:
            raise bad(f"line {number} is not a valid release record") from None
    return {"ledger_id": ledger_id, "epsilon": budget[0], "delta": budget[1]}, entries


def _attach_law(entries, record):
    """Set a law record's digest on the keyed release it belongs to (in place).

    Only the accountant writes law records, after the release's charge and only
    while no law is recorded for it: anything else is a damaged ledger.
    """
    if set(record) != _LAW_RECORD_KEYS or not all(
            isinstance(record[k], str) for k in _LAW_RECORD_KEYS):
        raise ValueError("not a law record")
    release_id, law = record["release_id"], record[_LAW_KEY]
    for i, e in enumerate(entries):
        if e.release_id == release_id:
            if e.release_fingerprint != record["release_fingerprint"] or e.release_law is not None:
                raise ValueError("a law record of another release")
            entries[i] = replace(e, release_law=law)
            return
    raise ValueError("a law record before its release")


def _create_ledger_file(path, header):
    """Create ``path`` holding ``header``, atomically; False if it already exists.

    The header is written and synced to a private temporary file in the same
    directory, which is then hard-linked to ``path``: no process can ever see
    the ledger without its header, and of two processes creating the same
    ledger exactly one wins while the other opens the winner's file.
    """
    directory = os.path.dirname(path)
    fd, tmp = tempfile.mkstemp(prefix=".skdp_label_ledger_", suffix=".tmp", dir=directory)
    try:
        with os.fdopen(fd, "wb") as f:  # mkstemp creates the file with mode 0600
            f.write(header)
            f.flush()
            os.fsync(f.fileno())
        try:
            os.link(tmp, path)
        except FileExistsError:
            return False
        _fsync_directory(directory)
        return True
    finally:
        os.remove(tmp)


def _fsync_directory(directory):
    """Make a new directory entry durable (best effort: not every OS allows it)."""
    try:
        fd = os.open(directory, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def _remove_journal(path, owner_pid):
    # Forked children inherit the finalizer; only the creating process removes.
    if os.getpid() == owner_pid:
        try:
            os.remove(path)
        except OSError:
            pass


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
    ledger : str or path-like, optional
        Path of a persistent ledger file (JSON lines). If the file does not
        exist it is created with mode 0600 and a header holding this budget
        and a new ledger id. If it exists, this accountant continues it: it
        sees every earlier spend, by any process or session, and the budget
        given here must equal the one in the header (otherwise a
        ``ValueError`` is raised, so that a ledger is never reopened under a
        different budget by mistake). By default the ledger is a private
        temporary journal that lives as long as this accountant.

    Attributes
    ----------
    epsilon, delta : float
        The budget (read-only: it is recorded in the ledger file).
    spent_epsilon : float
        Epsilon spent so far (sequential composition across releases,
        maximum within a disjoint group).
    spent_delta : float
        Delta spent so far, composed the same way.
    remaining_epsilon, remaining_delta : float
        What is left of the budget.
    ledger : list of LedgerEntry
        Every release, in order.
    ledger_id : str
        Random id (uuid4 hex) of the ledger: the same for every copy and
        pickle of this accountant and for every accountant opened on the same
        persistent ledger file.

    Raises
    ------
    ValueError
        If the budget is invalid, or ``ledger`` names an existing ledger with
        a different budget, or a path that cannot hold a ledger.
    LedgerUnavailableError
        If ``ledger`` names a malformed or truncated file.

    Notes
    -----
    ``copy.copy``, ``copy.deepcopy`` and :func:`sklearn.base.clone` return the
    accountant itself, and a pickled copy writes to the same ledger file, so
    that model selection with cloned estimators, in this process or in joblib
    workers, is charged to one ledger. Pickles carry the path and ledger id,
    never a copy of the entries.

    Every spend holds an exclusive ``flock`` on the ledger file while it
    reads the ledger, checks the budget and appends (flushed and, for a
    persistent ledger, fsynced), so concurrent processes cannot both spend
    the last of a budget. Keep persistent ledgers on a local file system:
    ``flock`` is not reliable on every network file system.

    The accountant fails closed. A temporary journal is removed when the
    accountant that created it is garbage collected or its process exits;
    copies unpickled after that (or in another machine) cannot see the
    ledger, and every spend, check and total then raises
    :class:`LedgerUnavailableError`. So does any accountant whose ledger file
    was deleted, replaced by another ledger, or is malformed. Use a
    persistent ``ledger`` to spend from later sessions.

    Examples
    --------
    >>> from skdp_label import BudgetAccountant
    >>> acc = BudgetAccountant(epsilon=2.0)
    >>> acc.spend(1.5, n_labels=100, description="Laplace")
    True
    >>> acc.remaining_epsilon
    0.5
    >>> acc.spend(1.0, n_labels=100, description="Laplace")
    Traceback (most recent call last):
    ...
    skdp_label._accountant.BudgetExceededError: ...

    A persistent ledger outlives the process; a later session reopens it with
    the same budget and sees what was spent:

    >>> import os, tempfile
    >>> tmp = tempfile.TemporaryDirectory()
    >>> path = os.path.join(tmp.name, "budget.jsonl")
    >>> BudgetAccountant(epsilon=2.0, ledger=path).spend(
    ...     1.5, n_labels=100, description="Laplace")
    True
    >>> later = BudgetAccountant(epsilon=2.0, ledger=path)
    >>> later.spent_epsilon, later.remaining_epsilon
    (1.5, 0.5)
    >>> tmp.cleanup()
    """

    def __init__(
        self, epsilon: float = math.inf, delta: float = 0.0, *,
        ledger: str | os.PathLike[str] | None = None,
    ) -> None:
        if (
            not isinstance(epsilon, Real)
            or isinstance(epsilon, bool)
            or math.isnan(epsilon)
            or epsilon <= 0
        ):
            raise ValueError(f"epsilon must be a positive number, got {public_repr(epsilon)}.")
        if (
            not isinstance(delta, Real)
            or isinstance(delta, bool)
            or math.isnan(delta)
            or not 0 <= delta < 1
        ):
            raise ValueError(f"delta must be in [0, 1), got {public_repr(delta)}.")
        self._epsilon = float(epsilon)
        self._delta = float(delta)
        self._owner_pid = None
        self._finalizer = None
        if ledger is None:
            self._persistent = False
            self._ledger_id = uuid.uuid4().hex
            fd, self._path = tempfile.mkstemp(prefix="skdp_label_ledger_", suffix=".jsonl")
            try:
                with os.fdopen(fd, "wb") as f:  # mode 0600
                    f.write(_header_line(self._ledger_id, self._epsilon, self._delta))
            except BaseException:
                os.remove(self._path)
                raise
            self._owner_pid = os.getpid()
            self._finalizer = weakref.finalize(self, _remove_journal, self._path, self._owner_pid)
        else:
            self._persistent = True
            self._open_persistent(ledger)

    def _open_persistent(self, ledger):
        if not isinstance(ledger, (str, os.PathLike)):
            raise ValueError(f"ledger must be a file path or None, got {type(ledger).__name__}.")
        path = os.fsdecode(ledger)
        if not path:
            raise ValueError("ledger must be a file path or None, got an empty string.")
        # Absolute, so that a pickled copy in a worker with another cwd finds it.
        self._path = os.path.abspath(path)
        try:
            if not os.path.exists(self._path):
                new_id = uuid.uuid4().hex
                header = _header_line(new_id, self._epsilon, self._delta)
                _create_ledger_file(self._path, header)
            with open(self._path, "rb") as f:
                fcntl.flock(f, fcntl.LOCK_SH)
                header, _ = _parse_ledger(f.read(), self._path)
        except LedgerUnavailableError:
            raise
        except OSError as exc:
            if exc.errno in (errno.ENOENT, errno.EISDIR, errno.ENOTDIR, errno.EACCES, errno.EPERM):
                raise ValueError(
                    f"Cannot use {self._path} as a privacy ledger: {exc.strerror}."
                ) from None
            raise
        if (header["epsilon"], header["delta"]) != (self._epsilon, self._delta):
            raise ValueError(
                f"The privacy ledger {self._path} was created with the budget "
                f"epsilon={header['epsilon']:g}, delta={header['delta']:g}, but this accountant "
                f"was given epsilon={self._epsilon:g}, delta={self._delta:g}. A ledger's budget "
                "cannot change: pass the recorded budget, or use a new ledger path."
            )
        self._ledger_id = header["ledger_id"]

    # -- read-only identity -------------------------------------------------
    @property
    def epsilon(self) -> float:
        return self._epsilon

    @property
    def delta(self) -> float:
        return self._delta

    @property
    def ledger_id(self) -> str:
        return self._ledger_id

    # -- copies share the ledger ------------------------------------------
    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self

    def __getstate__(self):
        # Where the ledger is and which ledger it must be; never a snapshot of
        # the entries, which a loader could otherwise spend against afresh.
        return {
            "epsilon": self._epsilon,
            "delta": self._delta,
            "path": self._path,
            "ledger_id": self._ledger_id,
            "persistent": self._persistent,
        }

    def __setstate__(self, state):
        self._epsilon = state["epsilon"]
        self._delta = state["delta"]
        self._path = state["path"]
        # Pickles of older versions carry no ledger id: such a copy cannot
        # prove which ledger it belongs to, so it fails closed.
        self._ledger_id = state.get("ledger_id")
        self._persistent = state.get("persistent", False)
        # Only the creating accountant removes a temporary journal.
        self._owner_pid = None
        self._finalizer = None

    # -- the ledger file --------------------------------------------------
    def _unavailable(self, why):
        kind = "privacy ledger" if self._persistent else "temporary privacy journal"
        hint = (
            ""
            if self._persistent
            else " A temporary journal lives only as long as the accountant that created it; "
            "pass ledger=<path> to BudgetAccountant to keep a ledger across processes and sessions."
        )
        return LedgerUnavailableError(
            f"The {kind} {self._path} {why}: this accountant refuses to spend or report "
            f"totals rather than start over and forget earlier spends.{hint}"
        )

    @contextmanager
    def _open_ledger(self, *, exclusive):
        """Yield (file, entries) with the ledger file locked, after checking its identity."""
        if self._ledger_id is None:
            raise self._unavailable("was pickled by an older version without a ledger id")
        try:
            f = open(self._path, "r+b" if exclusive else "rb")
        except FileNotFoundError:
            raise self._unavailable("no longer exists") from None
        except OSError as exc:
            raise self._unavailable(f"cannot be opened ({exc.strerror})") from None
        with f:
            fcntl.flock(f, fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH)
            # The file may have been removed or replaced while we waited for
            # the lock: appending to an unlinked file would record nothing.
            opened = os.fstat(f.fileno())
            try:
                current = os.stat(self._path)
            except OSError:
                current = None
            if (
                opened.st_nlink == 0
                or current is None
                or (current.st_dev, current.st_ino) != (opened.st_dev, opened.st_ino)
            ):
                raise self._unavailable("no longer exists")
            header, entries = _parse_ledger(f.read(), self._path)
            if header["ledger_id"] != self._ledger_id or (header["epsilon"], header["delta"]) != (
                self._epsilon,
                self._delta,
            ):
                raise self._unavailable("now holds a different ledger")
            yield f, entries

    @property
    def ledger(self) -> list[LedgerEntry]:
        with self._open_ledger(exclusive=False) as (_, entries):
            return entries

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
    def spent_epsilon(self) -> float:
        return self._totals(self.ledger)[0]

    @property
    def spent_delta(self) -> float:
        return self._totals(self.ledger)[1]

    @property
    def remaining_epsilon(self) -> float:
        return max(self._epsilon - self.spent_epsilon, 0.0)

    @property
    def remaining_delta(self) -> float:
        return max(self._delta - self.spent_delta, 0.0)

    # -- charging ---------------------------------------------------------
    def _exceeds(self, eps, delta):
        return eps > self._epsilon * (1 + _BUDGET_RTOL) or delta > self._delta * (
            1 + _BUDGET_RTOL
        )

    def check(self, epsilon: float, delta: float = 0.0) -> None:
        """Raise :class:`BudgetExceededError` if a spend would not fit.

        Nothing is recorded.

        Raises
        ------
        BudgetExceededError
            If the spend would exceed the budget.
        LedgerUnavailableError
            If the ledger cannot be read (see the class notes).
        """
        epsilon = _check_cost(epsilon, "epsilon")
        delta = _check_cost(delta, "delta")
        spent_eps, spent_delta = self._totals(self.ledger)
        if self._exceeds(spent_eps + epsilon, spent_delta + delta):
            raise BudgetExceededError(
                f"Privacy budget exceeded: spending epsilon={epsilon:g}, delta={delta:g} "
                f"on top of epsilon={spent_eps:g}, delta={spent_delta:g} already spent "
                f"exceeds the budget epsilon={self._epsilon:g}, delta={self._delta:g}."
            )

    def spend(
        self, epsilon: float, delta: float = 0.0, *, n_labels: int, description: str,
        group: str | None = None, release: tuple[str, str] | None = None,
        details: dict[str, Any] | None = None, release_law: str | None = None,
    ) -> bool:
        """Record a release, or raise if it would exceed the budget.

        Reading the ledger, checking the budget and appending the entry are
        one step under an exclusive file lock.

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
        release : tuple (release_id, fingerprint), optional
            Keyed releases (:mod:`skdp_label.release`): their noise is a
            function of the key, the release id and the rows, so a retry of
            the same release hands out nothing new and is not charged again;
            the same id with another fingerprint is refused (``ValueError``),
            since it would reuse the noise on other labels or parameters.
        details : dict, optional
            Public context shown by :meth:`to_records` / :meth:`to_frame`:
            any of ``estimator``, ``mechanism``, ``step``, ``stage``,
            ``column`` (strings or numbers; never labels).
        release_law : str, optional
            With ``release``, when the law the release samples is known
            before the charge (no private statistic): its digest. Recorded
            with the charge; a retry is checked against the recorded law as
            in :meth:`record_release_law`, in the same locked step.

        Returns
        -------
        recorded : bool
            False for a keyed release that the ledger already holds.

        Raises
        ------
        BudgetExceededError
            If the spend would exceed the budget; nothing is recorded then.
        LedgerUnavailableError
            If the ledger cannot be read or written (see the class notes);
            nothing is recorded then.
        ValueError
            If the ledger holds ``release``'s id for another release, or
            for another law than ``release_law``; nothing is recorded then.
        """
        epsilon = _check_cost(epsilon, "epsilon")
        delta = _check_cost(delta, "delta")
        if not isinstance(n_labels, Integral) or isinstance(n_labels, bool) or n_labels < 0:
            raise ValueError(
                f"n_labels must be a non-negative integer, got {public_repr(n_labels)}."
            )
        if group is not None and not isinstance(group, str):
            raise ValueError(f"group must be a token from disjoint_group or None, got {group!r}.")
        release_id = fingerprint = None
        if release is not None:
            release_id, fingerprint = (str(v) for v in release)
        if release_law is not None and (release_id is None or not isinstance(release_law, str)):
            raise ValueError("release_law is the digest (a string) of a keyed release's law.")
        details = _check_details(details)
        entry = LedgerEntry(
            str(description), int(n_labels), epsilon, delta, group, release_id, fingerprint,
            details, release_law,
        )
        line = _entry_line(entry)
        with self._open_ledger(exclusive=True) as (f, entries):
            if release_id is not None:
                earlier = self._earlier_release(entries, release_id, fingerprint)
                if earlier:  # a retry of a release already charged: check its law
                    if release_law is not None and _check_release_law(
                            entries, release_id, release_law):
                        self._append(f, _law_line(release_id, fingerprint, release_law))
                    return False
            spent_eps, spent_delta = self._totals(entries)
            new_eps, new_delta = self._totals(entries + [entry])
            if self._exceeds(new_eps, new_delta):
                raise BudgetExceededError(
                    f"Privacy budget exceeded: {description} needs epsilon={epsilon:g}, "
                    f"delta={delta:g}, but epsilon={spent_eps:g}, delta={spent_delta:g} "
                    f"of the budget epsilon={self._epsilon:g}, delta={self._delta:g} are "
                    "already spent. No label was randomized."
                )
            self._append(f, line)
        return True

    @staticmethod
    def _earlier_release(entries, release_id, fingerprint):
        """The entries of ``release_id`` (a retry), or raise ``ValueError`` if
        the id names another release."""
        earlier = [e for e in entries if e.release_id == release_id]
        if any(e.release_fingerprint != fingerprint for e in earlier):
            raise ValueError(
                f"release id {release_id!r} is already in the ledger for a different "
                "release (mechanism, parameters or rows); a keyed release's noise is a "
                "function of its id, so reusing the id would reuse the noise. Choose a "
                "new release id."
            )
        return earlier

    def _append(self, f, line):
        """Append one record to the locked ledger ``f`` (synced if persistent)."""
        end = f.seek(0, os.SEEK_END)
        try:
            f.write(line)
            f.flush()
            if self._persistent:
                os.fsync(f.fileno())
        except OSError as exc:
            # A half-written record would make the ledger unreadable:
            # take it back, and report that nothing was recorded.
            try:
                f.truncate(end)
                f.flush()
            except OSError:
                pass
            raise self._unavailable(f"could not be written ({exc.strerror})") from None

    def record_release_law(self, release_id: str, fingerprint: str, law: str) -> bool:
        """Record (or check) the law a keyed release samples, before it samples.

        A keyed release's noise is a function of the key, its id and the rows,
        so every run of the release must draw it through the same mechanism.
        The first fit of a release id records the digest of its fitted
        mechanism; every later fit (a retry, a resumed run, a recomputed
        partition's driver) must give the same digest. A release whose entry
        holds no digest (a ledger of an earlier version, or a crash between the
        charge and this record) records it now.

        Parameters
        ----------
        release_id, fingerprint : str
            As passed to :meth:`spend` in ``release``; the release must have
            been charged.
        law : str
            The digest of the fitted mechanism
            (:func:`skdp_label.release.law_digest`).

        Returns
        -------
        recorded : bool
            True if the digest was written now, False if the ledger already
            held it.

        Raises
        ------
        ValueError
            If the release was not charged, or the ledger records another law
            for it (nothing is written then).
        LedgerUnavailableError
            If the ledger cannot be read or written.
        """
        if not all(isinstance(v, str) for v in (release_id, fingerprint, law)):
            raise ValueError("release_id, fingerprint and law must be strings.")
        with self._open_ledger(exclusive=True) as (f, entries):
            if not self._earlier_release(entries, release_id, fingerprint):
                raise ValueError(
                    f"release id {release_id!r} is not in the ledger: charge the release "
                    "(spend with release=...) before recording its law."
                )
            if not _check_release_law(entries, release_id, law):
                return False
            self._append(f, _law_line(release_id, fingerprint, law))
        return True

    def disjoint_group(self, description: str) -> str:
        """Open a group of releases over disjoint rows (parallel composition).

        The group costs the maximum of its entries. Only code that itself
        partitions the rows may use it; anything else composes sequentially.

        Returns
        -------
        group : str
            Token to pass as ``group`` to :meth:`spend`. It ends with a random
            uuid4, so tokens never collide, whichever process or copy of the
            accountant makes them.
        """
        return f"{description}#{uuid.uuid4().hex}"

    # -- display ----------------------------------------------------------
    def __repr__(self):
        where = f", ledger={self._path!r}" if self._persistent else ""
        try:
            spent_eps, spent_delta = self._totals(self.ledger)
            state = f"spent epsilon={spent_eps:g}, delta={spent_delta:g}"
        except Exception:  # repr must work even on an accountant that refuses to spend
            state = "ledger unavailable"
        return f"BudgetAccountant(epsilon={self._epsilon:g}, delta={self._delta:g}{where}; {state})"

    def to_records(self) -> list[dict[str, Any]]:
        """The ledger as a list of plain dicts, one per release.

        Returns
        -------
        records : list of dict
            Keys: ``release`` (1-based position), ``description``,
            ``estimator``, ``mechanism``, ``step``, ``stage``, ``column``
            (public context, None when not given),
            ``n_labels``, ``epsilon``, ``delta``, ``group`` (the disjoint
            group's name without its random suffix, or None), ``group_id``
            (the full token), ``release_id``, ``release_fingerprint`` and
            ``release_law`` (keyed releases). The ledger holds costs and
            public descriptions only, never labels.

        Examples
        --------
        >>> from skdp_label import BudgetAccountant
        >>> acc = BudgetAccountant(epsilon=2.0)
        >>> _ = acc.spend(0.5, n_labels=10, description="Laplace: randomized labels")
        >>> acc.to_records()[0]["epsilon"]
        0.5
        """
        records = []
        for i, e in enumerate(self.ledger, start=1):
            record = {"release": i, **asdict(e)}
            details = record.pop("details") or {}
            record.update({key: details.get(key) for key in _DETAIL_KEYS})
            record["group_id"] = e.group
            # A group token is "<name>#<uuid4 hex>": the uuid only keeps tokens unique.
            record["group"] = None if e.group is None else e.group.rsplit("#", 1)[0]
            records.append(record)
        return records

    def to_frame(self) -> DataFrame:
        """The ledger as a pandas DataFrame (one row per release).

        Returns
        -------
        frame : pandas.DataFrame
            Columns as the keys of :meth:`to_records`.
        """
        try:
            import pandas as pd
        except ImportError as exc:  # optional dependency
            raise ImportError(
                "BudgetAccountant.to_frame needs pandas (`pip install pandas`); "
                "to_records() and to_json() do not."
            ) from exc
        columns = ["release", "description", *_DETAIL_KEYS, "n_labels", "epsilon", "delta",
                   "group", "group_id", "release_id", "release_fingerprint", "release_law"]
        return pd.DataFrame(self.to_records(), columns=columns)

    def to_json(self, path: str | os.PathLike[str] | None = None) -> str | None:
        """The budget, the totals and the ledger as JSON.

        Parameters
        ----------
        path : str or path-like, default=None
            File to write; when None the JSON text is returned.

        Returns
        -------
        text : str or None
            The JSON document when ``path`` is None.
        """
        records = self.to_records()
        spent_eps, spent_delta = self._totals(self.ledger)
        document = {
            "budget": {"epsilon": _encode_number(self._epsilon),
                       "delta": _encode_number(self._delta)},
            "spent": {"epsilon": spent_eps, "delta": spent_delta},
            "releases": records,
        }
        text = json.dumps(document, indent=2, allow_nan=False)
        if path is None:
            return text
        with open(path, "w", encoding="utf-8") as f:
            f.write(text + "\n")
        return None

    def summary(self) -> str:
        """The ledger as a readable table."""
        entries = self.ledger
        spent_eps, spent_delta = self._totals(entries)
        lines = [f"{'release':<48} {'labels':>9} {'epsilon':>9} {'delta':>9}  group"]
        for e in entries:
            lines.append(
                f"{e.description[:48]:<48} {e.n_labels:>9d} {e.epsilon:>9.4g} "
                f"{e.delta:>9.3g}  {e.group or '-'}"
            )
        lines.append(f"{'total (composed)':<48} {'':>9} {spent_eps:>9.4g} {spent_delta:>9.3g}")
        lines.append(f"{'budget':<48} {'':>9} {self._epsilon:>9.4g} {self._delta:>9.3g}")
        return "\n".join(lines)
