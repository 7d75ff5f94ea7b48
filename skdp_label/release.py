"""Keyed, idempotent releases of a stored label column (the labels party).

A :class:`KeyedRelease` privatizes one label column once, in batches, with
noise that is a pure function of a secret key, a release id and each row's
key (its position, or an id column): rerunning any part of the release -- a
retried Dask task, a resumed file -- reproduces exactly the same noisy
labels, so retries cost nothing extra, and batch or partition boundaries do
not matter. Two releases with different ids draw independent noise and are
both charged; the ledger refuses a second, different release under one id.

The secret key lives in a key file (:func:`generate_key_file`, 32 bytes of
OS entropy, mode 0600) that stays with the labels party. It is never stored
in a fitted object, a manifest, a pickle or a message: the platform receives
the noisy column and the release :meth:`~KeyedRelease.manifest`.

How the noise is derived (docs/labels_party.md):

* the release's Philox key is HMAC-SHA256(secret, "philox" | release id);
* a row's 128-bit key is its position, or a keyed hash of its id
  (Philox of the integer id, BLAKE2b of other ids) with the top bit set so
  that id keys never meet position keys;
* row ``i`` reads ``Philox(release key)(word, row_lo, stage, row_hi)``
  (:class:`skdp_label._kernels._philox.KeyedRows`), as many words as its
  sampler needs;
* the private prior of prior-based mechanisms (two passes: exact counts
  summed over batches, then noised once) uses a Generator keyed by
  HMAC(secret, "prior" | release id). A grid sized by the row count
  (``resolution='auto'``) is unknown in pass 1: the counts are kept on a
  fine public grid of 16,385 points over the bounds and added onto the
  grid's nearest points in :meth:`KeyedRelease.fit`, so batches and the
  in-memory path give the same grid and the same prior.
* a noisy mean of the labels (``mean_epsilon`` of ``mechanism='auto'``):
  pass 1 also sums the labels clipped to the bounds and rounded at random
  (:func:`~skdp_label.mechanisms._prior.rounded_label_sum`, each row's
  uniform from its own keyed stream, so retries reproduce the sum); the sum
  is noised once in :meth:`KeyedRelease.fit`, after the charge, with a
  Generator keyed by HMAC(secret, "mean" | release id). Only the noisy mean
  and its epsilon reach the manifest.

* the law: a retry refits the mechanism, and a refit in another environment
  (library versions, machine) can compute another one. The first fit of a
  release id records :func:`law_digest` of its fitted mechanism in the
  ledger, before any label is randomized, and every later fit of the id
  must give the same digest (``ValueError`` otherwise): the same keyed noise
  is never sampled through two laws.

Labels are never hashed or used as key material.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import math
import os
import secrets
import stat
import weakref
from numbers import Integral, Real
from typing import Any

import numba
import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import clone

from . import __name__ as _package
from ._accountant import BudgetAccountant
from ._kernels._philox import KeyedRows, philox4x64
from .mechanisms._base import BaseDiscreteMechanism, BaseLabelMechanism
from .mechanisms._prior import (
    MEAN_UNITS,
    BasePriorMechanism,
    nearest_domain_index,
    noisy_histogram_from_counts,
    noisy_mean_from_sum,
    rounded_label_sum,
)
from .mechanisms._registry import get_mechanism_class
from .mechanisms._validation import check_bounds, check_classes
from .utils._random import reproducible_fits

__all__ = [
    "ReleaseKey",
    "generate_key_file",
    "load_key",
    "KeyedRelease",
    "privatize",
    "mechanism_from_manifest",
    "law_digest",
]

_KEY_BYTES = 32
# Row keys as two uint64 words per row (what id_row_keys returns).
RowKeys = tuple[np.ndarray, np.ndarray]
_ID_FLAG = np.uint64(1 << 63)
# Pass-1 counts of a grid sized by the row count (resolution='auto') are kept
# on this many evenly spaced points over the bounds, at least 8 per point of
# any auto grid; fit adds them onto the grid once the row count is known.
_COUNT_POINTS = (1 << 14) + 1
# Largest transition matrix written into a manifest (8 MB of floats, tens of
# MB of JSON); a larger one is rebuilt from the parameters.
_MAX_MANIFEST_ENTRIES = 1_000_000


class ReleaseKey:
    """The labels party's secret key. Never printed, pickled or copied out.

    Obtain it with :func:`load_key`.
    """

    __slots__ = ("_secret",)

    def __init__(self, secret: bytes) -> None:
        if not isinstance(secret, bytes) or len(secret) != _KEY_BYTES:
            raise ValueError(f"a release key is {_KEY_BYTES} bytes.")
        self._secret = secret

    def _derive(self, purpose, release_id=""):
        return hmac.new(self._secret, f"{purpose}\x00{release_id}".encode(), hashlib.sha256).digest()

    def __repr__(self):
        return "ReleaseKey(<secret>)"

    def __reduce__(self):
        raise TypeError("a ReleaseKey is never pickled: it must stay with the labels party.")

    def __copy__(self):
        return self

    def __deepcopy__(self, memo):
        return self


def generate_key_file(path: str | os.PathLike[str]) -> None:
    """Create a new key file: 32 bytes of OS entropy, readable by the owner only.

    Parameters
    ----------
    path : str or path-like
        Where to write it. An existing file is never overwritten.

    Raises
    ------
    FileExistsError
        If ``path`` exists.
    """
    fd = os.open(os.fspath(path), os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(secrets.token_bytes(_KEY_BYTES))
        f.flush()
        os.fsync(f.fileno())


def load_key(path: str | os.PathLike[str]) -> ReleaseKey:
    """Read a key file made by :func:`generate_key_file`.

    Raises ``ValueError`` (before anything is spent) if the file is missing,
    has the wrong size, or can be read by other users.
    """
    path = os.fspath(path)
    try:
        info = os.stat(path)
    except FileNotFoundError:
        raise ValueError(f"key file {path} does not exist; create one with `skdp-label keygen`.") from None
    if info.st_mode & (stat.S_IRWXG | stat.S_IRWXO):
        raise ValueError(f"key file {path} is accessible to other users; run `chmod 600 {path}`.")
    with open(path, "rb") as f:
        secret = f.read(_KEY_BYTES + 1)
    if len(secret) != _KEY_BYTES:
        raise ValueError(f"key file {path} does not hold a {_KEY_BYTES}-byte key.")
    return ReleaseKey(secret)


# -- row keys -----------------------------------------------------------------------
@numba.njit(cache=True, nogil=True)
def _hash_integer_ids(ids, k0, k1):
    lo = np.empty(ids.shape[0], dtype=np.uint64)
    hi = np.empty(ids.shape[0], dtype=np.uint64)
    for i in range(ids.shape[0]):
        a, b, _, _ = philox4x64(np.uint64(ids[i]), np.uint64(0), np.uint64(0), np.uint64(0), k0, k1)
        lo[i] = a
        hi[i] = b | np.uint64(1 << 63)
    return lo, hi


def _words(digest):
    return np.uint64(int.from_bytes(digest[:8], "little")), np.uint64(int.from_bytes(digest[8:16], "little"))


def _row_keys(key, row_keys, n):
    """(row_lo, row_hi) uint64 arrays for ``n`` rows."""
    row_keys = np.asarray(row_keys)
    if row_keys.shape != (n,):
        raise ValueError(f"row_keys must hold one key per label ({n}), got shape {row_keys.shape}.")
    if row_keys.dtype.kind in "iu":
        if row_keys.dtype.kind == "i" and n and row_keys.min() < 0:
            raise ValueError("integer row keys (positions or ids) must be non-negative.")
        return row_keys.astype(np.uint64), np.zeros(n, dtype=np.uint64)
    # Other ids (strings, ...): a keyed 128-bit hash, in the id half of the key space.
    id_key = key._derive("row-id")
    lo, hi = np.empty(n, dtype=np.uint64), np.empty(n, dtype=np.uint64)
    for i, value in enumerate(row_keys.tolist()):
        digest = hashlib.blake2b(repr(value).encode(), key=id_key, digest_size=16).digest()
        lo[i], hi[i] = _words(digest)
    return lo, hi | _ID_FLAG


def id_row_keys(key: ReleaseKey, ids: ArrayLike) -> RowKeys:
    """Row keys for an id column: integer ids keep their identity through a
    keyed Philox hash (fast), others through keyed BLAKE2b. The result is
    independent of the rows' order."""
    ids = np.asarray(ids)
    if ids.dtype.kind in "iu":
        k0, k1 = _words(key._derive("row-id"))
        return _hash_integer_ids(ids.astype(np.int64).view(np.uint64), k0, k1)
    return _row_keys(key, ids.astype(object), ids.shape[0])


# -- the release --------------------------------------------------------------------
def _public_params(mechanism):
    # verbose only changes what is printed: not part of the release's identity.
    return {
        k: v
        for k, v in mechanism.get_params(deep=False).items()
        if k not in ("accountant", "random_state", "verbose")
    }


def _jsonable(value):
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if isinstance(value, np.generic):
        return value.item()
    if isinstance(value, Real) and not math.isfinite(value):
        return str(value)
    return value


# Prefix of what a law digest hashes: a new encoding gets a new prefix.
_LAW_FORMAT = b"skdp_label.law/1"


def law_digest(mechanism: BaseLabelMechanism) -> str:
    """SHA-256 (hex) of the law a fitted mechanism samples.

    It hashes the mechanism's class, its public parameters (as the manifest
    carries them) and every public attribute its ``fit`` bound
    (``_fit_state``: transition matrix, inputs and outputs, noise scales, a
    noisy prior, ...; a nested fitted mechanism is hashed the same way):
    numeric arrays by dtype, shape and bytes, arrays of text or objects by
    shape and items, scalars by type and ``repr``. Those are public inputs
    and charged noisy statistics only, never labels, key material or
    generator state. It also hashes what the samplers read beside that state:
    a randomized response's law epsilon and flip probability (computed by
    library code, so another version can round them otherwise) and the
    private attributes fit binds for the samplers. Two fits with the same
    digest computed the same mechanism, whatever the library versions or
    machine (the samplers' code and the tables it packs from those are not
    hashed). A keyed release
    records the digest at its first fit, and a retry whose refit gives
    another one is refused (docs/labels_party.md).

    Raises
    ------
    ValueError
        If the mechanism is not fitted, or its fitted attributes changed
        since its fit (it would not sample what ``fit`` computed).
    """
    h = hashlib.sha256(_LAW_FORMAT)
    _hash_law(h, mechanism)
    return h.hexdigest()


# Digests of the fitted mechanisms this process received (a Dask worker gets the broadcast
# mechanism once and randomizes many partitions with it), with the parameters and bound
# state they were computed from: reused while the parameters are equal, the state is
# the same objects (fitted arrays are bound by identity and read-only) and the private
# sampler parameters hash alike, else recomputed.
_RECEIVED_LAWS = weakref.WeakKeyDictionary()


def _received_law(fitted):
    """:func:`law_digest` of ``fitted``, hashed once per bound state in this process."""
    fitted._check_unchanged_since_fit()
    state = getattr(fitted, "_fit_state", None)
    # The private sampler parameters are hashed on every call (a few scalars and small
    # arrays, which fit leaves writable): an edit of one is never served a stale digest.
    private = hashlib.sha256()
    _hash_sampled_parameters(private, fitted)
    bound = (id(state), fitted._public_signature(),
             tuple((k, id(v)) for k, v in (state or {}).items()), private.digest())
    try:
        cached = _RECEIVED_LAWS.get(fitted)
    except TypeError:  # not weakly referable: hash every time
        return law_digest(fitted)
    if cached is not None and cached[0] == bound:
        return cached[1]
    law = law_digest(fitted)
    _RECEIVED_LAWS[fitted] = (bound, law)
    return law


def _hash_law(h, mechanism):
    state = getattr(mechanism, "_fit_state", None)
    if state is None:
        raise ValueError(f"{type(mechanism).__name__} is not fitted: it samples no law yet.")
    mechanism._check_unchanged_since_fit()  # the bound state is what it samples
    _hash_token(h, b"M", type(mechanism).__name__.encode())
    # The parameters as the manifest carries them (a list of classes samples what an
    # array does); the fitted state exactly.
    _hash_value(h, _jsonable(_public_params(mechanism)))
    _hash_value(h, dict(state))
    _hash_sampled_parameters(h, mechanism)


# Private attributes fit binds and the samplers read directly (not through a public
# fitted attribute): RR-on-Bins' flip probability, RR-Top-k's top set, RP-with-prior's
# grid window and law epsilon, a quantizer's rows.
_SAMPLED_PRIVATE = ("_flip_probability", "_in_top", "_u1", "_u2", "_w", "_eps_labels", "_rows")


def _hash_sampled_parameters(h, mechanism):
    """Hash what the samplers read besides the public fitted state.

    A randomized response (k-ary RR, RR-Top-k, debiased RR) builds its matrix on
    access or samples its flip probability from the law epsilon computed now
    (``_law_epsilon``, whose rounding is library code): another library version
    rounding it otherwise samples another law from the same public state, so the
    law epsilon and flip probability are hashed, as are the private attributes
    the samplers read (``_SAMPLED_PRIVATE``). Mechanisms with neither hash
    nothing here (their digests are unchanged)."""
    from ._kernels._sampling import rr_flip_probability

    own = vars(mechanism)
    private = {name: own[name] for name in _SAMPLED_PRIVATE if name in own}
    pieces = own.get("_pieces")
    if pieces is not None:
        private["_pieces"] = (pieces.left, pieces.right)
    n_classes = mechanism._randomized_response_size()
    if n_classes is not None:
        epsilon = float(mechanism._law_epsilon())
        private["rr"] = (int(n_classes), epsilon, float(rr_flip_probability(n_classes, epsilon)))
    if private:
        _hash_token(h, b"P", b"")
        _hash_value(h, private)


def _hash_token(h, tag, payload):
    # Tagged and length-prefixed: no two different values feed the same bytes.
    h.update(tag + len(payload).to_bytes(8, "little") + payload)


def _hash_value(h, value):
    if isinstance(value, BaseLabelMechanism):
        _hash_law(h, value)
    elif isinstance(value, np.ndarray):
        shape = repr(value.shape).encode()
        if value.dtype.kind in "OSU":  # pointers or padded text: hash the items
            _hash_token(h, b"O", shape)
            for item in value.ravel().tolist():
                _hash_value(h, item)
        else:  # little-endian bytes whatever the machine's order
            dtype = value.dtype.newbyteorder("<")
            if dtype.kind in "iu":
                # Integers by value (as the fingerprint takes them): int32 classes
                # (numpy 1's default on Windows) sample what int64 ones do.
                dtype = np.dtype(dtype.kind + "8").newbyteorder("<")
            a = np.ascontiguousarray(value, dtype=dtype)
            _hash_token(h, b"A", a.dtype.str.encode() + b"|" + shape)
            _hash_token(h, b"B", a.tobytes())
    elif isinstance(value, np.generic):  # np.float64(x) samples what x does
        item = value.item()
        if isinstance(item, np.generic):
            raise ValueError(f"a law digest cannot hash a {type(value).__name__}.")
        _hash_value(h, item)
    elif value is None or isinstance(value, (bool, int, float, complex, str, bytes)):
        _hash_token(h, b"S", f"{type(value).__name__}:{value!r}".encode())
    elif isinstance(value, (list, tuple)):
        _hash_token(h, b"L", f"{type(value).__name__}:{len(value)}".encode())
        for item in value:
            _hash_value(h, item)
    elif isinstance(value, dict):
        _hash_token(h, b"D", str(len(value)).encode())
        for k in sorted(value, key=repr):
            _hash_value(h, k)
            _hash_value(h, value[k])
    else:  # fail closed: a law that cannot be hashed cannot be checked on a retry
        raise ValueError(
            f"a law digest cannot hash a fitted {type(value).__name__}; the keyed release "
            "cannot check that a retry samples the law it was charged for."
        )


def _wants_mean(mechanism):
    """Whether the (unfitted) mechanism spends part of epsilon on a noisy mean."""
    value = getattr(mechanism, "mean_epsilon", None)
    return value is not None and not (isinstance(value, Real) and value == 0)


def _placeholder(mechanism):
    """One public label the mechanism accepts (to fit it on public inputs only)."""
    for attr in ("classes",):
        if getattr(mechanism, attr, None) is not None:
            return check_classes(mechanism.classes)[:1]
    if isinstance(mechanism, BasePriorMechanism):
        return mechanism._domain()[0][:1]
    bounds = getattr(mechanism, "bounds", None)
    lo, _ = check_bounds(bounds, owner=type(mechanism).__name__)
    return np.array([lo])


class KeyedRelease:
    """One release of one label column, with keyed per-row noise.

    Parameters
    ----------
    mechanism : label mechanism
        Unfitted, configured from public inputs. It is cloned; its own
        ``accountant`` and ``random_state`` are ignored (the release charges
        once, and its noise comes from the key).
    key : ReleaseKey
        From :func:`load_key`.
    release_id : str
        Names this release. A retry uses the same id; a new release of any
        column needs a new id.
    accountant : BudgetAccountant, optional
        Charged once per release id (a retry is free), before any noisy
        label exists.

    Examples
    --------
    >>> import numpy as np, tempfile, os
    >>> from skdp_label.mechanisms import RROnBins
    >>> from skdp_label.release import KeyedRelease, generate_key_file, load_key
    >>> path = os.path.join(tempfile.mkdtemp(), "label.key")
    >>> generate_key_file(path)
    >>> key = load_key(path)
    >>> y = np.arange(1000) % 11.0
    >>> release = KeyedRelease(RROnBins(1.0, bounds=(0, 10)), key, "2026-11-q4")
    >>> for batch in np.array_split(np.arange(1000), 3):   # pass 1: counts
    ...     release.add_counts(y[batch], batch)
    >>> release.fit(n_rows=1000)
    >>> a = release.randomize(y, np.arange(1000))
    >>> b = np.concatenate([release.randomize(y[s], s) for s in np.array_split(np.arange(1000), 7)])
    >>> bool(np.array_equal(a, b))   # batch boundaries do not matter
    True
    """

    def __init__(
        self, mechanism: BaseLabelMechanism, key: ReleaseKey, release_id: str, *,
        accountant: BudgetAccountant | None = None,
    ) -> None:
        if not isinstance(mechanism, BaseLabelMechanism):
            raise ValueError(f"mechanism must be a label mechanism, got {type(mechanism).__name__}.")
        if not isinstance(key, ReleaseKey):
            raise ValueError("key must be a ReleaseKey from skdp_label.release.load_key.")
        if not isinstance(release_id, str) or not release_id.strip():
            raise ValueError("release_id must be a non-empty string.")
        if accountant is not None and not isinstance(accountant, BudgetAccountant):
            raise ValueError("accountant must be a BudgetAccountant or None.")
        self.mechanism = clone(mechanism).set_params(accountant=None, random_state=None)
        # The mechanism's own constraints (epsilon, prior_epsilon, mean_epsilon...): its
        # fit only ever sees the labels' share, so they would not be checked otherwise.
        self.mechanism._validate_params()
        if _wants_mean(mechanism) and not (
                isinstance(mechanism, BasePriorMechanism) and mechanism.prior is None):
            raise ValueError(
                f"{type(mechanism).__name__}: a keyed release sums the labels for the noisy mean "
                "in the pass that counts the private prior; with a public prior use "
                "mean_epsilon=None."
            )
        self.release_id = release_id
        self.accountant = accountant
        self._key = key
        self._philox = _words(key._derive("philox", release_id))
        self._counts = None
        self._label_sum = 0
        self._n_counted = 0
        self.fitted_ = None
        self.law_digest_ = None
        self.ledger_entries_ = []

    # -- pass 1 --------------------------------------------------------------------
    @property
    def needs_counts(self) -> bool:
        """Whether the mechanism estimates a private prior (two passes)."""
        return isinstance(self.mechanism, BasePriorMechanism) and self.mechanism.prior is None

    def _noise_generator(self, purpose):
        """The generator of one statistic's noise (the prior, the mean): keyed by
        the secret, ``purpose`` and the release id, so a retried release redraws
        the same noise and no two releases or statistics share it. Never stored."""
        seed = np.frombuffer(self._key._derive(purpose, self.release_id)[:16], dtype=np.uint64)
        return np.random.Generator(np.random.Philox(key=seed.copy()))

    @property
    def needs_sum(self) -> bool:
        """Whether pass 1 also sums the labels (a noisy mean, ``mean_epsilon``)."""
        return _wants_mean(self.mechanism)

    def check_batch(self, y_batch: ArrayLike) -> None:
        """Validate a batch of labels (NaN, bounds, classes) without counting.

        A streaming release runs this over every batch *before* :meth:`fit`
        charges anything (pass 1), so bad labels never cost budget.
        """
        self._check_batch(y_batch)

    def _check_batch(self, y):
        y2d, _ = clone(self.mechanism)._validate_labels(y, reset=True)
        if y2d.shape[1] != 1:
            raise ValueError("a keyed release privatizes one label column; pass a 1-D array.")
        return y2d[:, 0]

    def add_counts(self, y_batch: ArrayLike, row_keys: RowKeys | ArrayLike) -> None:
        """Pass 1: add a batch's exact counts over the public domain.

        The counts stay in this object (with the labels party); only their
        noisy version, drawn once in :meth:`fit`, is ever used.
        """
        if not self.needs_counts:
            raise ValueError(f"{type(self.mechanism).__name__} with a public prior needs no counts.")
        if self.fitted_ is not None:
            raise ValueError("the release is already fitted; counts must come before fit.")
        counts = self.batch_counts(y_batch, row_keys)
        label_sum = self.batch_sum(y_batch, row_keys) if self.needs_sum else None
        self.merge_counts(counts, int(counts.sum()), label_sum)

    def batch_counts(self, y_batch: ArrayLike, row_keys: RowKeys | ArrayLike) -> np.ndarray:
        """Pass 1 on a worker: a batch's exact counts, not accumulated here.

        Sum them on the labels party's side and pass the total to
        :meth:`merge_counts` of the release that will be fitted.
        """
        if not self.needs_counts:
            raise ValueError(f"{type(self.mechanism).__name__} with a public prior needs no counts.")
        y = self._check_batch(y_batch)
        lo, hi = self._row_pairs(row_keys, y.shape[0])
        values = self._count_values()
        rows = KeyedRows(*self._philox, np.uint64(1 << 32), lo, hi)  # a stage range of its own
        return np.bincount(self.mechanism._histogram_codes(y, rows, values), minlength=values.size)

    def batch_sum(self, y_batch: ArrayLike, row_keys: RowKeys | ArrayLike) -> int:
        """Pass 1 on a worker: a batch's exact rounded label sum (for the
        noisy mean, :attr:`needs_sum`), not accumulated here.

        Each label's rounding reads its row's own keyed stream (a stage range
        of its own), so a retried batch gives the same sum. Sum the batches'
        on the labels party's side and pass the total to :meth:`merge_counts`.
        """
        if not self.needs_sum:
            raise ValueError(f"{type(self.mechanism).__name__} releases no noisy mean.")
        y = self._check_batch(y_batch)
        lo, hi = self._row_pairs(row_keys, y.shape[0])
        rows = KeyedRows(*self._philox, np.uint64(2 << 32), lo, hi)  # a stage range of its own
        return rounded_label_sum(y, self.mechanism._label_range(), rows.random_rows(y.shape[0]))

    def merge_counts(self, counts: ArrayLike, n_labels: int, label_sum: int | None = None) -> None:
        """Add exact counts computed by :meth:`batch_counts` elsewhere (and,
        for a noisy mean, the :meth:`batch_sum` of the same rows)."""
        if self.fitted_ is not None:
            raise ValueError("the release is already fitted; counts must come before fit.")
        counts = np.asarray(counts, dtype=np.int64)
        if counts.shape != (self._count_values().size,) or np.any(counts < 0):
            raise ValueError("counts must be non-negative, one per domain value.")
        n_labels = int(n_labels)
        if self.needs_sum:
            # Checked before anything is added: a half-merged batch, merged again on
            # retry, would count its rows twice (twice the histogram's sensitivity).
            if not (isinstance(label_sum, (Integral, np.integer))
                    and 0 <= label_sum <= MEAN_UNITS * n_labels):
                raise ValueError(
                    f"{type(self.mechanism).__name__} releases a noisy mean: pass the batch_sum "
                    f"of the same rows (an integer in [0, {MEAN_UNITS} * n_labels])."
                )
        self._counts = counts if self._counts is None else self._counts + counts
        self._label_sum += int(label_sum) if self.needs_sum else 0
        self._n_counted += n_labels

    def _count_values(self):
        """Public values pass 1 counts labels on: the domain, or for a grid
        sized by the row count, a fine grid over the bounds."""
        mech = self.mechanism
        if mech._grid_depends_on_n():
            lo, hi = check_bounds(mech.bounds, owner=type(mech).__name__)
            return np.linspace(lo, hi, _COUNT_POINTS)
        return mech._domain()[0]

    def _grid_counts(self, values):
        """Pass-1 counts on the grid ``values`` (each counted point to its nearest)."""
        if not self.mechanism._grid_depends_on_n():
            return self._counts
        target = nearest_domain_index(values, self._count_values())
        return np.bincount(target, weights=self._counts, minlength=values.size).astype(np.int64)

    @classmethod
    def for_workers(
        cls, fitted: BaseLabelMechanism, key: ReleaseKey, release_id: str, *, law: str
    ) -> KeyedRelease:
        """The randomizing side of a release fitted (and charged) elsewhere:
        the workers of a cluster each rebuild it from the broadcast fitted
        mechanism and their own copy of the key file.

        ``law`` is the :attr:`law_digest_` of the release fitted on the
        driver (the one its ledger records): a worker refuses
        (``ValueError``) a mechanism that samples another law.
        """
        received = _received_law(fitted)
        if received != law:
            raise ValueError(
                f"release {release_id!r}: the fitted mechanism this worker received samples "
                f"the law {received[:16]}..., not the law {str(law)[:16]}... the driver fitted "
                "and recorded (was it modified, or loaded by another library version?). "
                "Refusing to randomize; rerun the release from the driver."
            )
        release = cls(fitted, key, release_id)
        release.fitted_ = fitted
        release.law_digest_ = received
        return release

    def _row_pairs(self, row_keys, n):
        if isinstance(row_keys, tuple) and len(row_keys) == 2:
            lo, hi = (np.ascontiguousarray(a, dtype=np.uint64) for a in row_keys)
            if lo.shape != (n,) or hi.shape != (n,):
                raise ValueError(f"row keys must hold one key per label ({n}).")
            return lo, hi
        return _row_keys(self._key, row_keys, n)

    # -- the charge and the mechanism ---------------------------------------------------
    def _fingerprint(self, n_rows, mechanism=None):
        mechanism = self.mechanism if mechanism is None else mechanism
        public = json.dumps(_jsonable(_public_params(mechanism)), sort_keys=True, default=repr)
        text = f"{type(mechanism).__name__}|{public}|{n_rows}"
        return hashlib.sha256(text.encode()).hexdigest()

    def fit(self, n_rows: int) -> None:
        """Charge the release (once per id) and fit the mechanism.

        Parameters
        ----------
        n_rows : int
            Number of labels the release covers (for a private prior, the
            number counted in pass 1).

        Raises
        ------
        ValueError
            Before anything is randomized: bad inputs (before the charge),
            the release id held by the ledger for another release, or a
            retry whose refit samples another law than the ledger recorded
            at the id's first fit (another library version or machine; with
            a private prior, also other labels). Resume with the first run's
            environment, or use a new release id (charged).
        """
        # A refit of this release (its id charged once) must sample from the same
        # distribution: the budget split and the solves below run without time budgets.
        with reproducible_fits():
            self._fit(n_rows)

    def _fit(self, n_rows):
        if self.fitted_ is not None:
            raise ValueError("the release is already fitted.")
        n_rows = int(n_rows)
        if n_rows < 1:
            raise ValueError("n_rows must be positive.")
        # Worked on a copy, kept only once fitted: a fit that fails (a wrong n_rows)
        # leaves the release as it was, so a retry is the same release.
        mech = clone(self.mechanism)
        mech._validate_params()
        # Public parameters a mechanism derives from the row count (e.g. 'auto''s
        # n_eff), fixed here so the release, its fingerprint and manifest carry them.
        mech.set_params(**mech._params_for_rows(n_rows))
        mech._check_epsilon_cap()
        mech._check_public_inputs()
        epsilon = float(mech.epsilon)
        split = None
        if self.needs_counts:
            if self._counts is None or self._n_counted != n_rows:
                raise ValueError(
                    f"pass 1 counted {self._n_counted} labels, but n_rows={n_rows}; add the counts "
                    "of every batch before fit."
                )
            values = mech._domain(n_labels=n_rows)[0]
            if self.needs_sum:  # spent first, as in the one-machine fit
                # One reading of the mean's share: the three add up to the epsilon charged.
                eps_mean = mech.mean_budget(n_rows)
                eps1, eps2 = mech._histogram_split(epsilon - eps_mean, n_rows)
                split = {"mean": eps_mean, "prior": eps1, "labels": eps2}
            else:
                eps1, eps2 = mech.budget_split(n_rows)  # the mechanism's own rule
                split = {"prior": eps1, "labels": eps2}
        placeholder = _placeholder(mech)
        # A dry run on public inputs only (no accountant, no labels): whatever
        # would make the real fit fail is found before anything is charged.
        trial = clone(mech)
        # The mean is noised here, not by the mechanism: its fit spends nothing on one.
        no_mean = {"mean_epsilon": None} if self.needs_sum else {}
        if split is not None:
            trial.set_params(prior=(values, np.full(values.size, 1.0 / values.size)),
                             epsilon=split["labels"], **no_mean)
        trial.fit(placeholder)
        delta = trial._total_cost()[1]
        # Public inputs only: the dry run already is the mechanism (no second solve),
        # and its law is known before the charge, which records (or checks) it.
        law = law_digest(trial) if split is None else None
        fingerprint = self._fingerprint(n_rows, mech)
        recorded = False
        if self.accountant is not None:
            recorded = self.accountant.spend(
                epsilon, delta, n_labels=n_rows,
                description=f"keyed release {self.release_id}: {type(mech).__name__}" + (
                    f" (noisy label mean: epsilon={split['mean']:.6g})"
                    if split is not None and "mean" in split else ""),
                release=(self.release_id, fingerprint), release_law=law,
                details={"mechanism": type(mech).__name__, "step": "keyed release"},
            )
        noisy_mean = None
        if split is None:
            mech = trial
        else:
            noisy = (
                noisy_histogram_from_counts(self._grid_counts(values), split["prior"],
                                            self._noise_generator("prior"))
                if split["prior"] > 0
                else np.full(values.size, 1.0 / values.size)  # the rule chose the public uniform prior
            )
            if self.needs_sum:
                noisy_mean = noisy_mean_from_sum(self._label_sum, n_rows, mech._label_range(),
                                                 split["mean"], self._noise_generator("mean"))
            # The noisy prior is now a public input: the labels get epsilon_2.
            mech.set_params(prior=(values, noisy), epsilon=split["labels"], **no_mean)
            self._counts = None  # exact counts and sum are not kept past this point
            self._label_sum = 0
            mech.fit(placeholder)
            # The law depends on the charged noisy prior: recorded (or checked against
            # the first fit's) now, before any label is randomized.
            law = law_digest(mech)
            if self.accountant is not None:
                self.accountant.record_release_law(self.release_id, fingerprint, law)
        if self.accountant is not None:
            self.ledger_entries_ = [
                e.__dict__ for e in self.accountant.ledger if e.release_id == self.release_id
            ]
            self.charged_ = bool(recorded)
        self.law_digest_ = law
        # The noisy mean is the release's (the mechanism's own budget is the labels').
        self.mean_epsilon_ = split.get("mean", 0.0) if split is not None else 0.0
        self.noisy_mean_, self.noisy_mean_variance_ = noisy_mean or (None, None)
        self.epsilon_ = epsilon
        self.epsilon_split_ = split
        self.n_rows_ = n_rows
        self.mechanism = self.fitted_ = mech
        return None

    # -- pass 2 --------------------------------------------------------------------
    def randomize(self, y_batch: ArrayLike, row_keys: RowKeys | ArrayLike) -> np.ndarray:
        """Noisy labels of a batch; no charge (the release was charged in fit).

        Parameters
        ----------
        y_batch : array-like of shape (n,)
        row_keys : array-like of int of shape (n,), or a pair (lo, hi)
            Positions, or :func:`id_row_keys` of an id column.
        """
        if self.fitted_ is None:
            raise ValueError("call fit (after pass 1 for prior-based mechanisms) before randomize.")
        mech = self.fitted_
        mech._check_unchanged_since_fit()
        y2d, _ = mech._validate_labels(np.asarray(y_batch).reshape(-1, 1), reset=False)
        lo, hi = self._row_pairs(row_keys, y2d.shape[0])
        if y2d.shape[0] == 0:
            return np.empty(0)
        return mech._randomize_column(y2d[:, 0], KeyedRows(*self._philox, np.uint64(0), lo, hi))

    # -- what the platform receives ------------------------------------------------------
    def manifest(self) -> dict[str, Any]:
        """What the platform receives instead of a pickle (JSON-serialisable).

        Library version, mechanism and public parameters, epsilon and its
        split, delta, rows, the :func:`law_digest` of the fitted mechanism,
        this release's ledger entries and the noise description the platform
        needs to train and tune (transition matrix or noise variance). No
        key, seed or label statistic.
        """
        if self.fitted_ is None:
            raise ValueError("fit the release first.")
        from . import __version__
        from .mechanisms._registry import _CANONICAL, _REGISTRY

        mech = self.fitted_
        name = next(
            (n for n, (cls, _) in sorted(_REGISTRY.items()) if cls is type(mech) and n in _CANONICAL),
            type(mech).__name__,
        )
        params = _public_params(mech)
        out = {
            "format": "skdp_label.release/1",
            "library": _package,
            "version": __version__,
            "release_id": self.release_id,
            "mechanism": name,
            "params": _jsonable(params),
            "epsilon": self.epsilon_,
            "epsilon_split": self.epsilon_split_,
            "delta": float(mech._total_cost()[1]),
            "n_rows": self.n_rows_,
            "law_digest": self.law_digest_,
            "ledger_entries": _jsonable(self.ledger_entries_),
        }
        if self.noisy_mean_ is not None:
            out["noisy_mean"] = {"epsilon": self.mean_epsilon_, "value": self.noisy_mean_,
                                 "variance": self.noisy_mean_variance_}
        if isinstance(mech, BaseDiscreteMechanism):
            try:
                out["input_values"] = _jsonable(mech.input_values_)
                out["output_values"] = _jsonable(mech.output_values_)
                if mech.input_values_.size * mech.output_values_.size <= _MAX_MANIFEST_ENTRIES:
                    out["transition_matrix"] = _jsonable(mech.transition_matrix_)
            except (AttributeError, ValueError):
                pass  # too large to build: the parameters rebuild it
        return out


def mechanism_from_manifest(manifest: dict[str, Any]) -> BaseLabelMechanism:
    """The platform side: a fitted mechanism rebuilt from a manifest's public
    parameters (fitting spends nothing: every input is public), for the
    noisy-label scorers and debiasing helpers."""
    if manifest.get("format") != "skdp_label.release/1":
        raise ValueError("not a skdp_label release manifest.")
    cls = get_mechanism_class(manifest["mechanism"])
    params = dict(manifest["params"])
    for k, v in params.items():
        if isinstance(v, str) and v in ("inf", "-inf", "nan"):
            params[k] = float(v)
        if k in ("bounds",) and isinstance(v, list):
            params[k] = tuple(v)
        if k == "prior" and isinstance(v, list):
            # (values, probabilities) of a regression prior; a classification
            # prior (RR-Top-k, RR-with-prior) is one list of probabilities.
            pair = len(v) == 2 and all(isinstance(p, list) for p in v)
            params[k] = (tuple(np.asarray(p, dtype=float) for p in v) if pair
                         else np.asarray(v, dtype=float))
    mech = cls(**params)
    with reproducible_fits():  # the distribution the labels party sampled from
        mech.fit(_placeholder(mech))
    return mech


def privatize(
    y: ArrayLike, mechanism: BaseLabelMechanism, key: ReleaseKey, release_id: str, *,
    row_keys: RowKeys | ArrayLike | None = None, accountant: BudgetAccountant | None = None,
) -> tuple[np.ndarray, KeyedRelease]:
    """In-memory keyed release of a label column: the same noisy labels as
    the CLI and the Dask path for the same key, release id and rows.

    Returns
    -------
    y_noisy : ndarray
    release : KeyedRelease
        Fitted; ``release.manifest()`` is the hand-off.
    """
    y = np.asarray(y)
    keys = np.arange(y.shape[0], dtype=np.int64) if row_keys is None else row_keys
    release = KeyedRelease(mechanism, key, release_id, accountant=accountant)
    if release.needs_counts:
        release.add_counts(y, keys)  # validates too
    else:
        release.check_batch(y)
    release.fit(y.shape[0])
    return release.randomize(y, keys), release
