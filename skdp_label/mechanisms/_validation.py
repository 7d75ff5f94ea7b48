"""Checks on labels and public mechanism inputs (bounds, classes, domains)."""

import math
from numbers import Number, Real

import numpy as np
from sklearn.utils._param_validation import Interval

from .._kernels._sampling import count_outside
from .._kernels._twin import would_compile
from ..utils._repr import format_number, public_repr

__all__ = [
    "NumberInterval",
    "EpsilonInterval",
    "MIN_EPSILON",
    "MIN_SHARE_EPSILON",
    "SAMPLER_RTOL",
    "SAMPLER_SLACK",
    "law_epsilon",
    "rr_law_epsilon",
    "check_bounds",
    "check_labels_in_bounds",
    "check_squared_span",
    "check_classes",
    "check_class_labels",
    "check_integer_labels",
    "contiguous_integer_classes",
    "encode_classes",
]

#: eta: every non-exact sampler (per-row alias tables, interval tables, the cell and
#: piece tables of the additive noise, the geometric by a logarithm) draws each output
#: with a probability within a factor 1 +- eta of its law, checked when its tables are
#: built (``_kernels``: ``_ALIAS_RTOL``, ``_interval._RTOL``; docs/sampling.md).
SAMPLER_RTOL = 1e-9

#: tau: the epsilon a non-exact sampler can add to its law's. A ratio of two sampled
#: probabilities is within (1 + eta) / (1 - eta) of the law's, so the sampled law loses
#: at most ln((1 + eta) / (1 - eta)) = 2 eta + 2 eta**3 / 3 + ... = 2.0000000000000000007e-9
#: more than the law; the margin (1e-10, i.e. 5e-11 relative on each probability) covers
#: what the bounds above leave out: the float rounding of an exponential in an exact
#: acceptance (Gaussian: ~|arg| 2**-53), of a flip probability, of a table's own check.
#: Laws are built at ``law_epsilon(epsilon)``, epsilon less tau per noisy draw a
#: changed label moves, so what is sampled is epsilon-DP for the epsilon charged.
SAMPLER_SLACK = 2.1e-9

#: Smallest positive budget (epsilon, prior_epsilon, mean_epsilon) accepted: far below
#: any useful one, and large enough that the samplers' slack is a small part of it
#: (tau <= 2.1 %), and of the shares (prior, mean, labels) a budget is split into.
MIN_EPSILON = 1e-7

#: Smallest share of a budget a non-exact law is built at (a prior's, a mean's or the
#: labels' part of ``epsilon``; half of :data:`MIN_EPSILON`): tau is then at most 4.2 %
#: of it (8.4 % for a histogram, whose changed label moves two noisy counts). The
#: budget-splitting rules drop a smaller prior or mean share (nothing is spent on it),
#: and a smaller share left to the labels is refused before anything is spent.
MIN_SHARE_EPSILON = MIN_EPSILON / 2


def law_epsilon(epsilon, draws=1, *, what="epsilon"):
    """The epsilon a law sampled by a non-exact sampler is built at.

    ``epsilon - draws * SAMPLER_SLACK``: ``draws`` is the number of noisy
    draws one changed label moves (1 for a label's own output, 2 for a
    histogram, where it leaves one count for another). The sampled law is
    then ``epsilon``-DP; ``epsilon`` is what is charged.

    Raises
    ------
    ValueError
        When ``epsilon`` is below :data:`MIN_SHARE_EPSILON` (``what`` names
        it): the slack would be a large part of it, or all of it.
    """
    epsilon = float(epsilon)
    if not epsilon >= MIN_SHARE_EPSILON:
        raise ValueError(
            f"{what} = {epsilon:.3g} is below {MIN_SHARE_EPSILON:g}, the smallest budget a "
            f"sampled law is built at (the samplers' slack, {draws * SAMPLER_SLACK:.2g}, would "
            "be a large part of it); give it a larger share of a larger epsilon."
        )
    return epsilon - draws * SAMPLER_SLACK


def rr_law_epsilon(epsilon, n_classes, *, what="epsilon"):
    """:func:`law_epsilon` of a randomized response over ``n_classes`` outputs
    (k-ary RR, RR-Top-k with k up to ``n_classes``, debiased RR).

    Their samplers are exact, but for the flip probability ``f`` (or the
    top-k set's mixing weight), a float within 8 units in the last place
    (``2**-53``) of its formula. The loss ratio ``(k - 1) (1 - f) / f`` moves
    with it by a factor ``1 / (1 - f) = 1 + (k - 1) e^-epsilon``: its log by
    at most ``16 * 2**-53 * (1 + (k - 1) e^-epsilon)`` (twice the bound).
    Below about 1.2 million classes that is within :data:`SAMPLER_SLACK` and
    the law is built at ``law_epsilon(epsilon)``; above, at ``epsilon`` less
    the bound, taken at ``epsilon / 2`` (the bound grows as the law's epsilon
    falls), and refused if the bound exceeds ``epsilon / 2``.

    Raises
    ------
    ValueError
        As :func:`law_epsilon`, or when the classes are too many for
        ``epsilon`` (the rounding would be a large part of it).
    """
    law = law_epsilon(epsilon, what=what)
    epsilon = float(epsilon)
    rounding = 16 * 2.0**-53 * (1.0 + (int(n_classes) - 1) * math.exp(-epsilon / 2))
    if rounding <= SAMPLER_SLACK:
        return law
    if not rounding <= epsilon / 2:
        raise ValueError(
            f"{what} = {epsilon:.3g} is too small for {int(n_classes)} classes: the float "
            f"rounding of the flip probability could cost {rounding:.2g} more than charged; "
            "use a larger epsilon or fewer classes."
        )
    return epsilon - rounding


class NumberInterval(Interval):
    """scikit-learn's ``Interval`` without bools: ``n_stages=True`` or
    ``shrinkage=True`` is a slip, not the number 1 (a bool is an ``Integral``
    to ``numbers``, so ``Interval`` takes it)."""

    def is_satisfied_by(self, val):
        return not isinstance(val, (bool, np.bool_)) and super().is_satisfied_by(val)

    def __str__(self):
        return f"{super().__str__()} (not a bool)"


class EpsilonInterval(NumberInterval):
    """``_parameter_constraints`` entry of a privacy budget: a real number in the
    interval, never a bool (``epsilon=True`` is a slip, not a budget of 1), and,
    unless 0, at least :data:`MIN_EPSILON` (``1e-30`` would hang a noise
    sampler after the charge)."""

    def __init__(self, closed="neither"):
        super().__init__(Real, 0, None, closed=closed)

    def is_satisfied_by(self, val):
        return super().is_satisfied_by(val) and (val == 0 or val >= MIN_EPSILON)

    def __str__(self):
        zero = "0 or " if self.closed == "left" else ""
        return f"{zero}a real number (not a bool) of at least {MIN_EPSILON:g}"


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
        raise ValueError(f"{name} must be a pair (lo, hi), got {public_repr(bounds)}.") from None
    for v in (lo, hi):
        if not isinstance(v, Real) or isinstance(v, bool) or not math.isfinite(v):
            raise ValueError(f"{name} must hold two finite numbers, got {public_repr(bounds)}.")
    if not lo < hi:
        raise ValueError(f"{name}=(lo, hi) needs lo < hi, got {public_repr(bounds)}.")
    span = float(hi) - float(lo)
    # A span that overflows or is subnormal makes grid steps, sensitivities
    # and score scales inf or imprecise: refuse it before anything is spent.
    if not (math.isfinite(span) and span >= np.finfo(float).tiny):
        raise ValueError(
            f"{name}=(lo, hi) must have a span hi - lo that is a positive normal finite "
            f"float64, got {public_repr(bounds)}; rescale the labels."
        )
    if integer:
        if lo != int(lo) or hi != int(hi):
            raise ValueError(f"{name} must be integers for an integer-valued mechanism, got {public_repr(bounds)}.")
        if max(abs(lo), abs(hi)) > _MAX_EXACT_INTEGER:
            raise ValueError(
                f"{name} of an integer-valued mechanism must be at most 2**52 in magnitude "
                f"(integers above are not exact in float64), got {public_repr(bounds)}."
            )
    # + 0.0: a declared -0.0 would make clipped outputs -0.0 beside +0.0 ones.
    return float(lo) + 0.0, float(hi) + 0.0


#: Largest label span whose squared error terms (bin costs, variances, risks)
#: stay finite float64 with room for sums of a thousand of them.
MAX_SQUARED_SPAN = math.sqrt(np.finfo(np.float64).max / 1e3)


def check_squared_span(lo, hi, owner):
    """Refuse a public range too wide for squared errors on it (before any
    spend): mechanisms that optimise a squared loss or compare variances
    would meet inf/NaN only after charging a private prior."""
    if float(hi) - float(lo) > MAX_SQUARED_SPAN:
        raise ValueError(
            f"{owner}: the label range ({float(lo):g}, {float(hi):g}) spans too much for "
            "squared errors on it to be finite float64; rescale the labels."
        )


def check_labels_in_bounds(y, bounds):
    """Raise if a value lies outside the declared bounds.

    The message gives no value, count or position (labels are private).
    """
    lo, hi = bounds
    if np.any((y < lo) | (y > hi)):
        raise ValueError(
            f"some values lie outside the declared bounds ({format_number(lo)}, "
            f"{format_number(hi)}); declare wider bounds or clip them first."
        )


def check_integer_labels(y, chunk=1 << 16):
    # In cache-sized chunks: no label-sized temporaries.
    flat = np.ravel(y)
    for start in range(0, flat.shape[0], chunk):
        part = flat[start : start + chunk]
        if np.any(part != np.rint(part)):
            raise ValueError("This mechanism takes integer labels; got non-integer values.")


def check_classes(classes, owner=""):
    """Validate the declared public classes; return them in the declared order.

    The order is the user's (an ordered categorical keeps its order): it is
    the order of ``classes_``, of a public ``prior`` and of probability columns.
    """
    where = f"{owner} " if owner else ""
    if classes is None:
        raise ValueError(
            f"{where}needs the public list of classes: pass classes=[...]. The classes "
            "are a public input; they are never taken from the (private) labels."
        )
    classes = np.asarray(classes)
    if classes.ndim != 1 or classes.shape[0] < 2:
        raise ValueError(
            f"classes must be a 1-D list of at least two values, got {public_repr(classes)}."
        )
    uniq = np.unique(classes)
    if uniq.shape[0] != classes.shape[0]:
        raise ValueError("classes must not contain duplicates.")
    if uniq.dtype.kind == "f" and not np.all(np.isfinite(uniq)):
        raise ValueError("classes must be finite.")
    return classes


def contiguous_integer_classes(classes):
    """(lo, k) if ``classes`` are the integers lo, lo+1, ..., lo+k-1 in this order."""
    if classes.dtype.kind not in "iu":
        return None
    lo, k = int(classes[0]), classes.shape[0]
    if np.array_equal(classes, np.arange(lo, lo + k)):
        return lo, k
    return None


# Below this many labels, per-label passes that have a numpy equivalent run in
# numpy: a few ms, less than compiling their kernel in a fresh environment
# (0.2-0.4 s each); from it, the kernels (one pass, no temporaries), unless
# the kernel would compile (the label check: numpy then, at any size).
NUMPY_BELOW = 100_000


def _count_non_classes(flat, lo, hi):
    """How many labels of ``flat`` are not integers in [lo, hi] (see
    :data:`NUMPY_BELOW`)."""
    if flat.shape[0] >= NUMPY_BELOW and not would_compile(count_outside):
        return count_outside(flat, lo, hi, True)
    bad = (flat < lo) | (flat > hi)
    if flat.dtype.kind == "f":
        bad |= flat != np.floor(flat)  # NaN too
    return int(np.count_nonzero(bad))


def labels_within(y, lo, hi):
    """True if every label of the float array ``y`` is finite and in the
    finite range ``[lo, hi]``, found in one pass (:func:`count_outside`: NaN
    is outside) for a contiguous release of at least :data:`NUMPY_BELOW`
    labels; False when some label is not, or when the pass does not apply
    (small or strided arrays, infinite bounds, a kernel that would compile
    for a release below the size that compiles its kernels here): the
    caller then runs its own checks, which say what is wrong. Only ``count
    == 0`` is looked at: the count is a statistic of the labels, never kept
    or shown."""
    if not (y.size >= NUMPY_BELOW and y.dtype == np.float64
            and (y.flags.c_contiguous or y.flags.f_contiguous)
            and math.isfinite(lo) and math.isfinite(hi)):
        return False
    from .._kernels._background import compiles_here

    if would_compile(count_outside) and not compiles_here(y.size):
        # A cold cache, and a release whose sampler runs interpreted while
        # compilers fill the cache: the two reductions. A compiler of its own
        # competed with the release's for the cores (the first fits' wall
        # time up to 2x at 10**5 labels) to save ~1 ms. Releases that compile
        # their kernels here compile this one too (~0.25 s).
        return False
    return count_outside(y.ravel(order="K"), float(lo), float(hi), False) == 0


def check_class_labels(y, classes):
    """Raise ValueError unless every label of ``y`` is one of ``classes``
    (one pass, no allocation, for contiguous integer classes)."""
    flat = np.ravel(y)
    contiguous = contiguous_integer_classes(classes)
    if contiguous is not None and flat.dtype.kind in "iuf":
        lo, k = contiguous
        if not _count_non_classes(flat, lo, lo + k - 1):
            return  # the common case
    encode_classes(flat, classes)  # raises with details


def encode_classes(y, classes):
    """Codes of ``y`` in ``classes`` (declared order); raise on unknown labels."""
    if y.dtype == object:
        for value in y.ravel():
            if not isinstance(value, (str, Number, np.generic)):
                raise TypeError(
                    f"label argument must be a string or a number, got {type(value).__name__}."
                )
    contiguous = contiguous_integer_classes(classes)
    if contiguous is not None and y.dtype.kind in "iuf":
        # Contiguous integer classes (the common case): checked in one pass
        # without temporaries, then codes by subtraction (one allocation).
        lo, k = contiguous
        if not _count_non_classes(np.ravel(y), lo, lo + k - 1):
            codes = np.array(y, dtype=np.int64)
            # Modulo 2**64 (uint64 classes from 2**63 on wrap in int64): exact,
            # as y - lo lies in [0, k).
            codes -= np.int64(lo - (1 << 64) if lo >= 1 << 63 else lo)
            return codes
    order = np.argsort(classes, kind="stable")
    sorted_classes = classes[order]
    try:
        position = np.clip(np.searchsorted(sorted_classes, y), 0, classes.shape[0] - 1)
        unknown = np.any(sorted_classes[position] != y)
    except TypeError:  # labels of a type the classes cannot be ordered with ('2' among ints)
        unknown = True
    if unknown:
        # Neither the value, nor a count, nor a position: all are label statistics.
        raise ValueError(
            f"some labels are not among the {classes.shape[0]} declared classes; declare "
            "every possible class (classes are public knowledge, never read from the labels)."
        )
    return order[position].astype(np.int64)
