"""Unbiased randomized quantization (paper 002).

:class:`RandomizedQuantization` is Alg. 1 on given bins and selection
distributions with its exact privacy loss; :class:`RQM` and :class:`ERM`
are its one-parameter special cases calibrated to epsilon by that loss;
:class:`OPTM` the optimal mechanism of the family by linear programming
(with optimised bins); :class:`MVU` the minimum-variance unbiased baseline.
"""

from ._core import minimal_margin, privacy_loss
from ._mechanisms import ERM, MVU, OPTM, RQM, RandomizedQuantization

__all__ = [
    "RandomizedQuantization",
    "RQM",
    "ERM",
    "OPTM",
    "MVU",
    "minimal_margin",
    "privacy_loss",
]
