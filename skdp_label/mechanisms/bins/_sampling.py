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

from ..._kernels._sampling import rr_code, rr_scale
from .._prior import nearest_domain_index

__all__ = ["BinLookup"]


@numba.njit(cache=True, nogil=True)
def _lookup(y, values, bin_map, starts, pure, lo, inv_width, u, outputs, p_keep, codes, out):
    """Bins of the labels ``y`` into ``codes``; or, when ``outputs`` is not
    empty, RR-on-Bins samples into ``out``: bin -> k-ary RR over the bins with
    the uniform ``u[n]`` -> output value (one pass)."""
    k = values.shape[0]
    nb = starts.shape[0] - 1
    hi = values[k - 1]
    sample = outputs.shape[0] > 0
    n_bins = outputs.shape[0]
    scale = rr_scale(n_bins, p_keep)
    for n in range(y.shape[0]):
        v = y[n]
        if v <= lo:
            bin_ = bin_map[0]
        elif v >= hi:
            bin_ = bin_map[k - 1]
        else:
            b = int((v - lo) * inv_width)
            if b > nb - 1:
                b = nb - 1
            bin_ = pure[b]
            if bin_ < 0:
                j = starts[b]
                # First j with values[j] >= v (the bucket start is within a
                # step or two of it; the loops also absorb rounding of b).
                while values[j] < v:
                    j += 1
                while j > 0 and values[j - 1] >= v:
                    j -= 1
                # 0 < j < k here; ties go up.
                bin_ = bin_map[j - 1] if v - values[j - 1] < values[j] - v else bin_map[j]
        if sample:
            out[n] = outputs[rr_code(bin_, u[n], n_bins, p_keep, scale)]
        else:
            codes[n] = bin_


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
        near = nearest_domain_index(self.values, edges)
        lo_idx = np.maximum(near[:-1] - 1, 0)
        hi_idx = np.minimum(near[1:] + 1, k - 1)
        changes = np.concatenate([[0], np.cumsum(self.bin_map[1:] != self.bin_map[:-1])])
        self.pure = np.where(
            changes[hi_idx] == changes[lo_idx], self.bin_map[lo_idx], -1
        ).astype(np.int64)

    def _tables(self):
        return self.values, self.bin_map, self.starts, self.pure, self.lo, self.inv_width

    def __call__(self, y):
        """Bin index of each label."""
        y = np.ascontiguousarray(y, dtype=np.float64)
        codes = np.empty(y.shape[0], dtype=np.int64)
        none = np.empty(0)
        _lookup(y, *self._tables(), none, none, 0.0, codes, none)
        return codes

    def sample(self, y, u, outputs, p_keep):
        """Randomized outputs: RR with keep probability ``p_keep`` over the
        bins, one uniform ``u`` per label."""
        y = np.ascontiguousarray(y, dtype=np.float64)
        out = np.empty(y.shape[0])
        outputs = np.ascontiguousarray(outputs, dtype=np.float64)
        u = np.ascontiguousarray(u, dtype=np.float64)
        _lookup(y, *self._tables(), u, outputs, p_keep, np.empty(0, dtype=np.int64), out)
        return out
