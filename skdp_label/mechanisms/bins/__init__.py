"""RR-on-Bins: randomized response over optimal bins of the label domain (000)."""

from ._rr_on_bins import RROnBins

__all__ = ["RROnBins"]
