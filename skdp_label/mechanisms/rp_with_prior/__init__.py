"""RPWithPrior (paper 003) and RRWithPrior as a regression baseline (000 App. G)."""

from ._mechanisms import RPWithPrior, RRWithPriorRegression

__all__ = ["RPWithPrior", "RRWithPriorRegression"]
