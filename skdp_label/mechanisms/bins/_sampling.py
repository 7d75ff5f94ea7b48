"""Label -> bin lookup for RR-on-Bins sampling (one pass, O(1) per label).

Equivalent to ``bin_map[nearest_domain_index(values, y)]`` (nearest domain
value, ties going up, labels outside the domain clipped to its ends), but a
table of equal-width buckets over ``[values[0], values[-1]]`` replaces the
binary search: a bucket all of whose labels fall in one bin (nearly all of
them: the bin changes at most ``m - 1`` times along the domain) answers with
one read; the others start a short walk from the bucket's first domain value.
"""

import numba
import numpy as np

from ..._kernels._intrinsics import float_bits
from ..._kernels._pcg64 import held_digit, hold, release
from ..._kernels._philox import begin_row
from ..._kernels._sampling import _rr_rare, rr_code_common, rr_code_rare, rr_constants
from ..._kernels._twin import kernel_for

__all__ = ["BinLookup"]

_NO_OUTPUTS = np.zeros(0)


def _bins_kernel(sample):
    """The label -> bin loop; with ``sample``, RR-on-Bins in the same pass:
    bin -> k-ary RR over the bins (exact flip and uniform replacement,
    constants ``c``) -> output value.

    The lookup is written out in the loop, not an inlined helper: numba's
    inlining of a helper that takes arrays adds reference counting per label
    (several times the lookup's own work). ``sample`` is a constant of the
    closure: the lookup-only kernel never types ``rng``.
    """

    @numba.njit(cache=True, nogil=True)
    def kernel(y, values, bin_map, starts, pure, lo, inv_width, rng, outputs, c, out):
        k = values.shape[0]
        nb = starts.shape[0] - 1
        n_bins = outputs.shape[0]
        if sample:
            qd, frac, limit, m = c[0], c[1], c[2], c[3]
            # The generator's state held in registers (as in _sampling.sample_rows).
            s = hold(rng)
        for n in range(y.shape[0]):
            # Nearest domain value (ties up, clipped), then its bin.
            v = y[n]
            if v <= lo:
                bin_ = bin_map[0]
            elif v >= values[k - 1]:
                bin_ = bin_map[k - 1]
            else:
                bin_ = pure[min(np.int64((v - lo) * inv_width), nb - 1)]
                if bin_ < 0:
                    j = starts[min(np.int64((v - lo) * inv_width), nb - 1)]
                    # First j with values[j] >= v (the bucket start is within a
                    # step or two of it; the loops also absorb rounding of the
                    # bucket index). The first step is branch-free: whether it
                    # is needed is a coin flip.
                    j += np.int64(values[j] < v)
                    while values[j] < v:
                        j += 1
                    while j > 0 and values[j - 1] >= v:
                        j -= 1
                    # 0 < j < k; ties go up: j - 1 when v - values[j - 1] <
                    # values[j] - v, both >= 0, so compared as bit patterns (a
                    # mask, not a mispredicted branch). + 0.0: a domain value -0.0
                    # and a label 0.0 leave -0.0, whose bit pattern is negative.
                    below = (float_bits(v - values[j - 1]) - float_bits(values[j] - v + 0.0)) >> 63
                    bin_ = bin_map[j + below]
            if sample:
                begin_row(rng, n)  # keyed releases: row n reads its own stream
                d, s = held_digit(rng, s)
                j = rr_code_common(bin_, n_bins, d, limit, m)
                if _rr_rare(d, qd, limit):
                    release(rng, s)
                    j = rr_code_rare(bin_, n_bins, d, qd, frac, m, rng)
                    s = hold(rng)
                out[n] = outputs[j]
            else:
                out[n] = bin_
        if sample:
            release(rng, s)

    return kernel


_lookup = _bins_kernel(False)
_sample = _bins_kernel(True)


class BinLookup:
    """Maps labels to bin indices: nearest domain value, then its bin."""

    def __init__(self, values, bin_map, buckets_per_value=4):
        self.values = np.ascontiguousarray(values, dtype=np.float64)
        self.bin_map = np.ascontiguousarray(bin_map, dtype=np.int64)
        k = self.values.shape[0]
        self.lo = float(self.values[0])
        span = float(self.values[-1]) - self.lo
        nb = max(1, buckets_per_value * k)
        self.inv_width = nb / span if span > 0 else 0.0  # one value: all labels clip
        edges = self.lo + np.arange(nb + 1) * (span / nb)
        self.starts = np.searchsorted(self.values, edges).astype(np.int64)
        # pure[b]: the bin of every label in bucket b, or -1. Conservative: the
        # domain values nearest to the bucket's edges, widened by one on each
        # side (which absorbs the rounding of the bucket index), share a bin.
        # By search: the bucket edges are 4 k + 1 points, and a lookup table built
        # for them would build another (an endless recursion from k = 2,500).
        # Imported here: a background compiler imports this module for its
        # kernels, and .._prior brings scikit-learn (seconds).
        from .._prior import nearest_by_search

        near = nearest_by_search(self.values, edges)
        lo_idx = np.maximum(near[:-1] - 1, 0)
        hi_idx = np.minimum(near[1:] + 1, k - 1)
        changes = np.concatenate([[0], np.cumsum(self.bin_map[1:] != self.bin_map[:-1])])
        self.pure = np.where(
            changes[hi_idx] == changes[lo_idx], self.bin_map[lo_idx], -1
        ).astype(np.int64)
        if not np.isfinite(self.inv_width):
            # A subnormal span: (v - lo) * inf is inf, an int64 of it a wild
            # index. Bucket 0 for every label, searched from its start.
            self.inv_width = 0.0
            self.pure[:] = -1

    def _tables(self):
        return self.values, self.bin_map, self.starts, self.pure, self.lo, self.inv_width

    def __call__(self, y):
        """Bin index of each label."""
        y = np.ascontiguousarray(y, dtype=np.float64)
        codes = np.empty(y.shape[0], dtype=np.int64)
        # No random source (None): interpreted, or compiled in the background, as a sampler.
        kernel_for(_lookup, None, y.shape[0])(
            y, *self._tables(), None, _NO_OUTPUTS, _NO_OUTPUTS, codes
        )
        return codes

    def sample(self, y, rng, outputs, flip_probability):
        """Randomized outputs: RR over the bins that leaves the bin with
        probability ``flip_probability``, drawing from the Generator ``rng``."""
        y = np.ascontiguousarray(y, dtype=np.float64)
        out = np.empty(y.shape[0])
        outputs = np.ascontiguousarray(outputs, dtype=np.float64)
        c = rr_constants(outputs.shape[0], flip_probability)
        kernel_for(_sample, rng, y.shape[0])(y, *self._tables(), rng, outputs, c, out)
        return out
