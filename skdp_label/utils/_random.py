"""Where label noise comes from: the one place that makes random generators.

The randomness model (docs/randomness.md):

* Every release (a ``transform``, a noisy histogram, one stage of a
  multi-stage fit) asks :func:`release_generator` for a new Generator, uses
  it, and drops it. No fitted object stores a Generator, BitGenerator,
  SeedSequence or seed drawn from entropy, so pickles and copies hold
  nothing that reproduces past or future noise, and copies draw
  independent noise.
* ``random_state=None`` reads fresh OS entropy at release time.
* An integer ``random_state`` is for reproducible experiments: streams are
  derived from the seed and public context (features, release counter), so
  different fits in one model-selection run do not reuse one stream; it
  emits :class:`PrivacyLeakWarning` since the seed is readable.

This module also holds the power-of-two grid of continuous noise.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import math
from numbers import Integral
from typing import Any

import numpy as np
from ._warnings import warn_caller

__all__ = [
    "reproducible_fits",
    "fits_must_reproduce",
    "PrivacyLeakWarning",
    "check_random_state",
    "release_generator",
    "post_processing_generator",
    "derive_random_state",
    "simulation_generator",
    "public_folds",
    "public_fingerprint",
    "power_of_two_grid",
]


class PrivacyLeakWarning(UserWarning):
    """A configuration or use that weakens the label-DP guarantee.

    Raised, for example, when labels are randomized with a fixed integer
    ``random_state`` (anyone who knows the seed can reproduce the noise and
    subtract it), or when a label-DP estimator is scored on true labels
    during model selection.
    """


# Types that hold (or reproduce) a random stream: never accepted as a
# parameter, because a fitted object holding one lets its receiver replay the
# noise (rewind a PCG64 and subtract).
_STREAM_TYPES = (
    np.random.Generator,
    np.random.RandomState,
    np.random.BitGenerator,
    np.random.SeedSequence,
)


def random_state_constraint() -> list[Any]:
    """``_parameter_constraints`` entry of ``random_state``.

    Stream types are admitted by the constraint only so that
    :func:`check_random_state` can refuse them with a message that says why.
    """
    from ..mechanisms._validation import NumberInterval  # not a bool either

    return [NumberInterval(Integral, 0, None, closed="left"), None, *_STREAM_TYPES]


def check_random_state(random_state: int | None, owner: str = "random_state") -> int | None:
    """Validate a ``random_state`` parameter: ``None`` or an int in [0, 2**128).

    Generators, ``RandomState`` and ``SeedSequence`` objects are refused: the
    estimator stores its parameters, so a pickle of it would carry the
    stream that produced the noise.
    """
    if random_state is None:
        return None
    if isinstance(random_state, _STREAM_TYPES):
        raise ValueError(
            f"{owner}: random_state must be None (fresh OS entropy for every release) or a "
            f"non-negative int; a {type(random_state).__name__} is refused because an "
            "estimator that stores it lets anyone holding the estimator replay the label noise."
        )
    if isinstance(random_state, Integral) and not isinstance(random_state, bool):
        if 0 <= random_state < _MAX_SEED:
            return int(random_state)
        if random_state >= _MAX_SEED:
            raise ValueError(
                f"{owner}: random_state must be below 2**128; a larger seed's high words "
                "would read as the stream keys that separate releases (numpy's SeedSequence), "
                "so two different releases could share noise."
            )
    raise ValueError(
        f"{owner}: random_state must be None or a non-negative int, got a "
        f"{type(random_state).__name__}."
    )


# SeedSequence pads an entropy of up to 4 words to 4 before appending the spawn key:
# below 2**128, (seed, context) -> stream is one-to-one; above, seed s + (w << 128)
# with context c is seed s with context (w, *c).
_MAX_SEED = 2**128


def public_fingerprint(*parts: Any) -> tuple[int, ...]:
    """A tuple of 32-bit words identifying public context (never labels).

    Used to separate the noise streams of releases made with one integer
    seed: e.g. the public features of a fit, a release counter, a step name.
    """
    import joblib  # not at import: it takes a few tenths of a second

    digest = hashlib.blake2b(joblib.hash(parts).encode(), digest_size=16).digest()
    return tuple(int.from_bytes(digest[i : i + 4], "little") for i in range(0, 16, 4))


def _warn_fixed_seed(owner):
    warn_caller(
        f"{owner} randomizes private labels with a fixed integer random_state: anyone who "
        "knows the seed (it is stored in the estimator's parameters) can reproduce the noise "
        "and recover the labels. Use random_state=None for real releases; fixed seeds are for "
        "tests and reproducible experiments.",
        PrivacyLeakWarning,
    )


def release_generator(
    random_state: int | None, context: tuple = (), owner: str = "A mechanism"
) -> np.random.Generator:
    """The numpy Generator for one release. Callers must not store it.

    ``None`` draws fresh OS entropy (``SeedSequence()`` reads 128 bits from
    ``secrets``) and forgets it when the release returns. An integer seed
    gives a reproducible stream, separated from the streams of other
    releases by ``context`` (a tuple of non-negative ints identifying the
    release from public information), and emits :class:`PrivacyLeakWarning`.
    """
    seed = check_random_state(random_state)
    if seed is not None:
        _warn_fixed_seed(owner)
    return _seeded_generator(seed, tuple(context))


def post_processing_generator(random_state: int | None, context: tuple = ()) -> np.random.Generator:
    """A numpy Generator for random choices on labels that are already
    private (e.g. the order in which an SGD visits noisy labels), never for
    label noise. Callers must not store it.

    ``None`` draws fresh OS entropy; an integer seed gives a reproducible
    stream separated by ``context`` (non-negative ints). It emits no
    :class:`PrivacyLeakWarning`: what it randomizes is post-processing.
    """
    # The tag keeps these streams apart from every release's under one seed:
    # an example order that replayed label noise would reveal it.
    return _seeded_generator(check_random_state(random_state), (_POST_PROCESSING, *context))


# First spawn_key word of every post-processing stream (b"post"), so that its
# keys never equal a release's context, whatever words the caller gives.
_POST_PROCESSING = 0x74736F70


def _seeded_generator(seed, spawn_key):
    """Fresh OS entropy for ``None``; else the stream of ``seed`` and ``spawn_key``."""
    if seed is None:
        return np.random.Generator(np.random.PCG64(np.random.SeedSequence()))
    return np.random.Generator(
        np.random.PCG64(np.random.SeedSequence(entropy=seed, spawn_key=spawn_key))
    )


def simulation_generator(*context):
    """A deterministic generator for simulations on *public* inputs only,
    never for label noise: synthetic labels drawn to measure a public
    property (e.g. how many labels a model averages, docs/auto.md). Seeded by
    the public ``context`` (hashed), so the measurement is a reproducible
    function of public facts and reveals nothing."""
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(public_fingerprint(*context))))


def public_folds(purpose: str, X: Any, n_splits: int) -> list[tuple[np.ndarray, np.ndarray]]:
    """``(train, test)`` index pairs of a shuffled K-fold split of the rows of
    ``X``, from the public features only (e.g. the cross-fitting of the
    guards toward the trivial predictor).

    Seeded by a hash of ``purpose`` and ``X`` (of its shape for sparse input),
    never by a label or the label-noise seed: the folds are a public function
    of the features, the same for every ``random_state``, and reveal nothing.
    """
    from scipy import sparse
    from sklearn.model_selection import KFold
    from sklearn.utils.validation import _num_samples

    n_rows = _num_samples(X)
    if sparse.issparse(X):
        features = X.shape
    else:
        features = np.ascontiguousarray(X.to_numpy() if hasattr(X, "to_numpy") else np.asarray(X))
    seed = int(simulation_generator(purpose, features, int(n_splits)).integers(2**31 - 1))
    return list(KFold(int(n_splits), shuffle=True, random_state=seed).split(np.zeros((n_rows, 1))))


def derive_random_state(random_state: int | None, context: tuple = ()) -> int | None:
    """``random_state`` for a sub-step: ``None`` stays ``None`` (fresh entropy
    at the sub-step's own release time), an int becomes a new int derived from
    it and the public ``context``, so that different sub-steps never share a
    stream."""
    seed = check_random_state(random_state)
    if seed is None:
        return None
    words = np.random.SeedSequence(entropy=seed, spawn_key=tuple(context)).generate_state(2)
    return int(words[0]) | (int(words[1]) << 32)


# Bits of resolution the grid keeps below the noise scale: 2**20 steps per
# noise scale make the rounding of the label cost one step of sensitivity
# (~1e-6 of it). The samplers are exact in the tails at any resolution
# (docs/sampling.md), so this only trades utility against range.
_BITS_BELOW_SCALE = 20
# Bits below the largest label magnitude, so that label / granularity stays
# an exact integer in float64 (under 2**53).
_BITS_BELOW_MAGNITUDE = 50
# Normal float64 exponents: a power-of-two step 2**e and its inverse are
# both normal and finite for _MIN_EXPONENT <= e <= _MAX_EXPONENT.
_MIN_EXPONENT = -1022
_MAX_EXPONENT = 1022


def power_of_two_grid(noise_scale: float, label_magnitude: float) -> float:
    """Granularity (a power of two) of the grid continuous noise lives on.

    Continuous mechanisms round the label to this grid and add *integer*
    noise times the granularity (Google's differential-privacy libraries do
    the same), so every output is an exact float and the bit pattern of the
    output cannot reveal the label (Mironov 2012). The rounding moves a label
    by at most half a grid step, so the sensitivity in grid units grows by
    one step, which the mechanisms account for.

    Raises
    ------
    ValueError
        If the noise scale or the label magnitude is not a finite float
        (positive and normal for the scale), or if the step or its inverse
        would not be a normal finite float: a subnormal step has an infinite
        inverse and would turn every output into a function of the label.
    """
    tiny = np.finfo(float).tiny
    if not (math.isfinite(noise_scale) and noise_scale >= tiny):
        raise ValueError(
            f"the noise scale (span / epsilon) must be a positive normal finite float, got "
            f"{noise_scale!r}; rescale the bounds."
        )
    if not (math.isfinite(label_magnitude) and label_magnitude >= 0):
        raise ValueError(f"the bounds' magnitude must be finite, got {label_magnitude!r}.")
    exponent = max(
        math.ceil(math.log2(noise_scale)) - _BITS_BELOW_SCALE,
        math.ceil(math.log2(max(label_magnitude, tiny))) - _BITS_BELOW_MAGNITUDE,
    )
    if not _MIN_EXPONENT <= exponent <= _MAX_EXPONENT:
        raise ValueError(
            f"the grid step 2**{exponent} for a noise scale of {noise_scale:g} is not a normal "
            "float64 (its inverse would overflow); rescale the labels so that the bounds' span "
            "is within about 1e-290 .. 1e300."
        )
    return math.ldexp(1.0, exponent)


# Whether the fits made now must be deterministic functions of their public
# inputs (see reproducible_fits).
_REPRODUCIBLE_FITS = contextvars.ContextVar("skdp_label_reproducible_fits", default=False)


@contextlib.contextmanager
def reproducible_fits(when: bool = True):
    """Within this context (when ``when``), a mechanism's fit must compute
    the same distribution from the same public inputs on any machine and
    under any load: no wall-clock limit may change what is sampled.

    Entered by the fit of a seeded mechanism (``random_state`` an int) and
    by keyed releases (:mod:`skdp_label.release`): their noise is replayed
    from a seed or key, so two fits of one release that sampled from two
    distributions would share noise between two different releases (and a
    keyed release is charged once per id). A fit with fresh OS entropy may
    let a solver stop a slow stage on a time budget instead.
    """
    token = _REPRODUCIBLE_FITS.set(True) if when else None
    try:
        yield
    finally:
        if token is not None:
            _REPRODUCIBLE_FITS.reset(token)


def fits_must_reproduce() -> bool:
    """Whether the current fit is inside :func:`reproducible_fits`."""
    return _REPRODUCIBLE_FITS.get()
