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

from .._prior import nearest_domain_index

__all__ = ["BinLookup"]


@numba.njit(cache=True, nogil=True)
def _bin_codes(y, values, bin_map, starts, pure, lo, inv_width):
    k = values.shape[0]
    nb = starts.shape[0] - 1
    hi = values[k - 1]
    out = np.empty(y.shape[0], dtype=np.int64)
    for n in range(y.shape[0]):
        v = y[n]
        if v <= lo:
            idx = 0
        elif v >= hi:
            idx = k - 1
        else:
            b = int((v - lo) * inv_width)
            if b > nb - 1:
                b = nb - 1
            if pure[b] >= 0:
                out[n] = pure[b]
                continue
            j = starts[b]
            # First j with values[j] >= v (the bucket start is within a step
            # or two of it; the loops also absorb rounding of b).
            while values[j] < v:
                j += 1
            while j > 0 and values[j - 1] >= v:
                j -= 1
            # 0 < j < k here; ties go up.
            idx = j - 1 if v - values[j - 1] < values[j] - v else j
        out[n] = bin_map[idx]
    return out


class BinLookup:
    """Maps labels to bin indices: nearest domain value, then its bin."""

    def __init__(self, values, bin_map, buckets_per_value=4):
        self.values = np.ascontiguousarray(values, dtype=np.float64)
        self.bin_map = np.ascontiguousarray(bin_map, dtype=np.int64)
        k = self.values.shape[0]
        self.lo = float(self.values[0])
        span = float(self.values[-1]) - self.lo
        nb = max(1, buckets_per_value * k)
        self.inv_width = nb / span if span > 0 else 0.0
        edges = self.lo + np.arange(nb + 1) * (span / nb)
        self.starts = np.searchsorted(self.values, edges).astype(np.int64)
        # pure[b]: the bin of every label in bucket b, or -1. Conservative: the
        # domain values nearest to the bucket's edges, widened by one on each
        # side (which absorbs the rounding of the bucket index), share a bin.
        near = nearest_domain_index(self.values, edges)
        lo_idx = np.maximum(near[:-1] - 1, 0)
        hi_idx = np.minimum(near[1:] + 1, k - 1)
        changes = np.concatenate([[0], np.cumsum(self.bin_map[1:] != self.bin_map[:-1])])
        self.pure = np.where(
            changes[hi_idx] == changes[lo_idx], self.bin_map[lo_idx], -1
        ).astype(np.int64)

    def __call__(self, y):
        y = np.ascontiguousarray(y, dtype=np.float64)
        if self.values.shape[0] == 1:
            return np.zeros(y.shape[0], dtype=np.int64) + self.bin_map[0]
        return _bin_codes(
            y, self.values, self.bin_map, self.starts, self.pure, self.lo, self.inv_width
        )
