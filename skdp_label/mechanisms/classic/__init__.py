"""Classic label mechanisms: randomized response and additive baselines."""

from ._additive import DiscreteLaplace, DiscreteStaircase, Gaussian, Laplace, Staircase
from ._exponential import ExponentialMechanism
from ._randomized_response import RandomizedResponse

__all__ = [
    "RandomizedResponse",
    "Laplace",
    "DiscreteLaplace",
    "Staircase",
    "DiscreteStaircase",
    "Gaussian",
    "ExponentialMechanism",
]
