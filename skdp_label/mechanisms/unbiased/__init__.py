"""Unbiased label randomizers (paper 001).

:class:`OptimalUnbiased` is the minimum-variance unbiased epsilon-DP
randomizer with continuous outputs (or 001's LP on a grid),
:class:`BiasVarianceRandomizer` the randomizer trading bias for variance
between RR-on-Bins and it (001 §6),
:class:`DebiasedRR` the debiased randomized response of 001 Def. 23, and
:func:`feasible_output_set` the output grid of 001 Alg. 2.
"""

from ._bias_variance import bias_and_variance
from ._bias_variance_randomizer import BiasVarianceRandomizer
from ._grid import randomized_rounding_indices
from ._mechanisms import DebiasedRR, OptimalUnbiased, auto_grid_size
from ._solver import debiased_rr_outputs, feasible_output_set

__all__ = [
    "OptimalUnbiased",
    "BiasVarianceRandomizer",
    "bias_and_variance",
    "DebiasedRR",
    "feasible_output_set",
    "debiased_rr_outputs",
    "randomized_rounding_indices",
    "auto_grid_size",
]
