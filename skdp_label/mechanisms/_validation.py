"""Checks on labels and public mechanism inputs (bounds, classes, domains)."""

import math
from numbers import Number, Real

import numpy as np

__all__ = ["check_bounds", "check_labels_in_bounds", "check_classes", "check_integer_labels"]

# Integer labels and bounds stay exact in float64 up to 2**53; at most 2**52
# keeps the span hi - lo exact too.
_MAX_EXACT_INTEGER = 2.0**52


def check_bounds(bounds, name="bounds", *, integer=False, owner=""):
    """Validate declared public bounds ``(lo, hi)`` and return them as floats."""
    where = f"{owner} " if owner else ""
    if bounds is None:
        raise ValueError(
            f"{where}needs public label bounds: pass {name}=(lo, hi). Bounds are a "
            "public input; they are never computed from the (private) labels."
        )
    try:
        lo, hi = bounds
    except (TypeError, ValueError):
        raise ValueError(f"{name} must be a pair (lo, hi), got {bounds!r}.") from None
    for v in (lo, hi):
        if not isinstance(v, Real) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"{name} must hold two finite numbers, got {bounds!r}.")
    if not lo < hi:
        raise ValueError(f"{name}=(lo, hi) needs lo < hi, got {bounds!r}.")
    span = float(hi) - float(lo)
    # A span that overflows or is subnormal makes grid steps, sensitivities
    # and score scales inf or imprecise: refuse it before anything is spent.
    if not (math.isfinite(span) and span >= np.finfo(float).tiny):
        raise ValueError(
            f"{name}=(lo, hi) must have a span hi - lo that is a positive normal finite "
            f"float64, got {bounds!r}; rescale the labels."
        )
    if integer:
        if lo != int(lo) or hi != int(hi):
            raise ValueError(f"{name} must be integers for an integer-valued mechanism, got {bounds!r}.")
        if max(abs(lo), abs(hi)) > _MAX_EXACT_INTEGER:
            raise ValueError(
                f"{name} of an integer-valued mechanism must be at most 2**52 in magnitude "
                f"(integers above are not exact in float64), got {bounds!r}."
            )
    return float(lo), float(hi)


def check_labels_in_bounds(y, bounds):
    """Raise if a label lies outside the declared bounds (before any noise).

    The message gives the count and the first position, never a value: the
    labels are private.
    """
    lo, hi = bounds
    bad = (y < lo) | (y > hi)
    if np.any(bad):
        raise ValueError(
            f"{int(bad.sum())} label(s) lie outside the declared bounds ({lo:g}, {hi:g}) "
            f"(first at position {int(np.flatnonzero(bad.ravel())[0])}). Clip them to the "
            "public bounds before randomizing, or declare wider bounds."
        )


def check_integer_labels(y):
    if np.any(y != np.round(y)):
        raise ValueError("This mechanism takes integer labels; got non-integer values.")


def check_classes(classes, owner=""):
    """Validate the declared public classes; return them sorted and unique."""
    where = f"{owner} " if owner else ""
    if classes is None:
        raise ValueError(
            f"{where}needs the public list of classes: pass classes=[...]. The classes "
            "are a public input; they are never taken from the (private) labels."
        )
    classes = np.asarray(classes)
    if classes.ndim != 1 or classes.shape[0] < 2:
        raise ValueError(f"classes must be a 1-D list of at least two values, got {classes!r}.")
    uniq = np.unique(classes)
    if uniq.shape[0] != classes.shape[0]:
        raise ValueError("classes must not contain duplicates.")
    if uniq.dtype.kind == "f" and not np.all(np.isfinite(uniq)):
        raise ValueError("classes must be finite.")
    return uniq


def encode_classes(y, classes):
    """Codes of ``y`` in the sorted ``classes``; raise on unknown labels."""
    if y.dtype == object:
        for value in y.ravel():
            if not isinstance(value, (str, Number, np.generic)):
                raise TypeError(
                    f"label argument must be a string or a number, got {type(value).__name__}."
                )
    if classes.dtype.kind in "iuf" and y.dtype.kind in "iuf":
        lo = classes[0]
        if classes.dtype.kind in "iu" and classes[-1] - lo == classes.shape[0] - 1:
            # Contiguous integer classes: codes by subtraction (the common case).
            codes = np.asarray(y, dtype=np.int64) - np.int64(lo)
            ok = (y == np.round(y)) & (codes >= 0) & (codes < classes.shape[0])
            if ok.all():
                return codes
    codes = np.searchsorted(classes, y)
    codes = np.clip(codes, 0, classes.shape[0] - 1)
    unknown = classes[codes] != y
    if np.any(unknown):
        # Count and position only: the offending value is a private label.
        raise ValueError(
            f"{int(unknown.sum())} label(s) are not among the {classes.shape[0]} declared "
            f"classes (first at position {int(np.flatnonzero(unknown.ravel())[0])})."
        )
    return codes.astype(np.int64)
