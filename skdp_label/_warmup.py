"""``skdp-label warmup``: compile the numba kernels once, ahead of the first fit.

Every sampler and solver kernel is compiled with ``cache=True``: the first
process that uses a kernel compiles it (up to ~6 s for the first fit of a
mechanism on a fresh install) and writes the machine code next to the module
(or to ``NUMBA_CACHE_DIR``); later processes load it in milliseconds. Warming
up fits each mechanism on a small *public* synthetic column (no real labels,
nothing charged to any accountant) so that the users' first fit does not pay
the compilation.
"""

from __future__ import annotations

import time
import warnings

import numpy as np

from .mechanisms import get_mechanism_class, mechanism_names
from .mechanisms._validation import NUMPY_BELOW

__all__ = ["warm_up"]

# Enough labels to reach the bulk sampling paths (alias tables from 10**4 labels).
_N_LABELS = 20_000


def _public_inputs(name):
    """Constructor arguments and a synthetic public column for ``name``."""
    rng = np.random.default_rng(0)  # synthetic data only: no labels are involved
    if name in mechanism_names("classification"):
        kwargs = {"classes": np.arange(5)}
        if name in ("rr-top-k", "rr-with-prior"):
            kwargs["prior"] = np.array([0.4, 0.3, 0.15, 0.1, 0.05])
        return kwargs, rng.integers(0, 5, _N_LABELS)
    kwargs = {"bounds": (0, 50)}
    if name == "mvu":
        kwargs["outputs"] = 4
    return kwargs, rng.integers(0, 51, _N_LABELS).astype(np.float64)


def warm_up(names=None, *, progress=None):
    """Compile (and cache) the kernels the named mechanisms use.

    Parameters
    ----------
    names : list of str, optional
        Registered mechanism names; all of them by default.
    progress : callable, optional
        Called with ``(name, seconds)`` after each mechanism.

    Returns
    -------
    seconds : dict
        Wall time per mechanism (compilation, or loading from the cache when
        it is warm already).
    """
    names = list(mechanism_names()) if not names else list(names)
    for name in names:
        get_mechanism_class(name)  # unknown names fail before any work
    seconds = {}
    for name in names:
        kwargs, column = _public_inputs(name)
        start = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            mech = get_mechanism_class(name)(epsilon=1.0, **kwargs)
            mech.fit_transform(column)
            mech.fit_transform(column[:10])  # the small-batch paths
            # The one-pass kernels of large batches (smaller ones run in numpy).
            mech.fit_transform(np.resize(column, NUMPY_BELOW))
        seconds[name] = time.perf_counter() - start
        if progress is not None:
            progress(name, seconds[name])
    return seconds
