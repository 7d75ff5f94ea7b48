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


# Bits of resolution the grid keeps below the noise scale. The sampler
# computes a noise value of up to ~40 * 2**20 grid steps in float64 with an
# absolute error near 1e-8 steps, so each grid point's probability is right
# to ~1e-8 relative; 2**40 steps would leave errors of ~1% per point. The
# grid costs utility only through one extra step of sensitivity (~1e-6).
_BITS_BELOW_SCALE = 20
# Bits below the largest label magnitude, so that label / granularity stays
# an exact integer in float64 (under 2**53).
_BITS_BELOW_MAGNITUDE = 50


def power_of_two_grid(noise_scale, label_magnitude):
    """Granularity (a power of two) of the grid continuous noise lives on.

    Continuous mechanisms round the label to this grid and add *integer*
    noise times the granularity (Google's differential-privacy libraries do
    the same), so every output is an exact float and the bit pattern of the
    output cannot reveal the label (Mironov 2012). The rounding moves a label
    by at most half a grid step, so the sensitivity in grid units grows by
    one step, which the mechanisms account for.
    """
    exponent = max(
        math.ceil(math.log2(noise_scale)) - _BITS_BELOW_SCALE,
        math.ceil(math.log2(max(label_magnitude, np.finfo(float).tiny))) - _BITS_BELOW_MAGNITUDE,
    )
    return math.ldexp(1.0, exponent)
