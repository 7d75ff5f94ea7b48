"""Classification mechanisms built on a prior: RR-Top-k and RRWithPrior (004)."""

from ._rr_top_k import RRTopK, RRWithPrior

__all__ = ["RRTopK", "RRWithPrior"]
