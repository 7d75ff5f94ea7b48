"""Random sources and the power-of-two grid used for continuous noise."""

import math
from numbers import Integral

import numpy as np

__all__ = ["check_random_generator", "power_of_two_grid"]


def check_random_generator(random_state):
    """Turn ``random_state`` into a numpy ``Generator``.

    ``None`` draws a fresh seed from the operating system's entropy source
    (never a global or time-based seed); an integer or ``SeedSequence`` gives
    a reproducible generator; a ``Generator`` is used as is. A legacy
    ``RandomState`` is accepted (scikit-learn passes them around) and seeds a
    new ``Generator`` from its stream.
    """
    if random_state is None:
        return np.random.default_rng(np.random.SeedSequence())
    if isinstance(random_state, np.random.Generator):
        return random_state
    if isinstance(random_state, (Integral, np.random.SeedSequence)):
        return np.random.default_rng(random_state)
    if isinstance(random_state, np.random.RandomState):
        return np.random.default_rng(random_state.randint(0, 2**63 - 1, dtype=np.int64))
    raise ValueError(
        f"random_state must be None, an int, a SeedSequence or a numpy Generator, "
        f"got {random_state!r}."
    )


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


def power_of_two_grid(noise_scale, label_magnitude):
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
