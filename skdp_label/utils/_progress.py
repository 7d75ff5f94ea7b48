"""``verbose`` messages and progress bars, with public facts only.

What ``verbose`` prints ends up in logs and notebooks, which leave the
labels party: callers pass only public facts (epsilon per step, the
mechanism and the solver path taken, solver times, grid and stage sizes),
never labels, label statistics or seeds. Numbers are formatted as
Python numbers (no numpy reprs).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from typing import Any

from ._repr import format_number

__all__ = ["VERBOSE_CONSTRAINT", "VERBOSE_DOC", "Progress", "format_epsilon", "progress_bar"]

#: ``_parameter_constraints`` entry of ``verbose``: an int >= 0 (or a bool),
#: scikit-learn's "verbose" constraint.
VERBOSE_CONSTRAINT = ["verbose"]

#: numpydoc entry of the ``verbose`` parameter.
VERBOSE_DOC = """    verbose : int, default=0
        Print progress (public facts only: epsilon per step, solver path
        and time, sizes; never labels or seeds). 0 is silent.
"""


def format_epsilon(value: float) -> str:
    """An epsilon in a message: 4 significant digits (``1``, ``0.1915``);
    ``privacy_report()`` has the exact values."""
    return format_number(float(f"{float(value):.4g}"))


def progress_bar(
    iterable: Iterable | None = None, *, total: int | None = None, desc: str = "",
    enabled: bool = True, **kwargs: Any,
) -> Any:
    """A tqdm bar on stderr, or None when disabled or tqdm is not installed
    (the bar is a convenience: tqdm is optional)."""
    if not enabled:
        return None
    try:
        from tqdm import tqdm
    except ImportError:
        return None
    return tqdm(iterable, total=total, desc=desc, file=sys.stderr, **kwargs)


def _write(line: str) -> None:
    try:
        from tqdm import tqdm
    except ImportError:
        print(line, flush=True)
    else:
        tqdm.write(line, file=sys.stdout)  # above any open bar, not through it


class Progress:
    """The ``verbose`` output of one object: ``progress(message)`` prints
    ``[Owner] message`` when ``verbose >= level``.

    Parameters
    ----------
    verbose : int
        The object's ``verbose`` parameter.
    owner : str
        Name printed before each message (the class name).
    """

    def __init__(self, verbose: int, owner: str) -> None:
        self.verbose = int(verbose)
        self.owner = owner

    def __bool__(self) -> bool:
        return self.verbose > 0

    def __call__(self, message: str, *, level: int = 1) -> None:
        if self.verbose >= level:
            _write(f"[{self.owner}] {message}")

    @contextmanager
    def timed(self, what: str, *, level: int = 1) -> Iterator[dict]:
        """Time the block; print ``what ... in 0.12 s`` after it, followed by
        the public facts the block puts in the yielded dict."""
        facts: dict = {}
        start = time.perf_counter()
        yield facts
        if self.verbose >= level:
            extra = "".join(f", {key} {value}" for key, value in facts.items())
            self(f"{what} in {time.perf_counter() - start:.2f} s{extra}", level=level)

    def stages(self, iterable: Iterable, *, total: int, desc: str) -> Iterable:
        """``iterable`` with a progress bar when verbose (and tqdm installed)."""
        bar = progress_bar(iterable, total=total, desc=desc, enabled=self.verbose > 0)
        return iterable if bar is None else bar

    def charges(self, charges: Iterable[dict], *, level: int = 1) -> None:
        """One line per charge of a mechanism's ``charges_`` (costs and
        public context only)."""
        for charge in charges:
            delta = f", delta {charge['delta']:.3g}" if charge.get("delta") else ""
            self(
                f"{charge.get('mechanism', 'mechanism')} {charge.get('step', 'release')}: epsilon "
                f"{format_epsilon(charge['epsilon'])}{delta} on {charge['n_labels']} labels",
                level=level,
            )
