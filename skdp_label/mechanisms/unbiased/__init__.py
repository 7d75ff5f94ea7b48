"""Unbiased label randomizers (paper 001).

:class:`OptimalUnbiased` is the minimum-variance unbiased epsilon-DP
randomizer with continuous outputs (or 001's LP on a grid),
:class:`DebiasedRR` the debiased randomized response of 001 Def. 23, and
:func:`feasible_output_set` the output grid of 001 Alg. 2.
"""

from ._grid import randomized_rounding_indices
from ._mechanisms import DebiasedRR, OptimalUnbiased, auto_grid_size
from ._solver import debiased_rr_outputs, feasible_output_set

__all__ = [
    "OptimalUnbiased",
    "DebiasedRR",
    "feasible_output_set",
    "debiased_rr_outputs",
    "randomized_rounding_indices",
    "auto_grid_size",
]
