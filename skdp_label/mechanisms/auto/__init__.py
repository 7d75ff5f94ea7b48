"""``mechanism='auto'``: choose the regression randomizer by predicted risk."""

from ._mechanism import (
    AUTO_CANDIDATES,
    DEFAULT_AUTO_CANDIDATES,
    AutoRegression,
    compare_candidates,
    default_effective_size,
    register_auto_candidate,
)
from ._risk import bias_and_variance, predicted_risk

__all__ = [
    "AutoRegression",
    "AUTO_CANDIDATES",
    "DEFAULT_AUTO_CANDIDATES",
    "register_auto_candidate",
    "compare_candidates",
    "default_effective_size",
    "bias_and_variance",
    "predicted_risk",
]
