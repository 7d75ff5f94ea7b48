"""Label mechanisms: scikit-learn transformers that randomize labels.

Every mechanism is exported here and listed in ``__all__``; estimators
select them by name through :func:`get_mechanism_class`.
"""

from ._base import BaseDiscreteMechanism, BaseLabelMechanism
from ._prior import BasePriorMechanism
from ._registry import get_mechanism_class, make_mechanism, mechanism_names
from .bins import RROnBins
from .classification import RRTopK, RRWithPrior
from .classic import (
    DiscreteLaplace,
    DiscreteStaircase,
    ExponentialMechanism,
    Gaussian,
    Laplace,
    RandomizedResponse,
    Staircase,
)
from .quantization import ERM, MVU, OPTM, RQM, RandomizedQuantization
from .rp_with_prior import RPWithPrior, RRWithPriorRegression
from .unbiased import BiasVarianceRandomizer, DebiasedRR, OptimalUnbiased

__all__ = [
    "RandomizedResponse",
    "RRTopK",
    "RRWithPrior",
    "Laplace",
    "DiscreteLaplace",
    "Staircase",
    "DiscreteStaircase",
    "Gaussian",
    "ExponentialMechanism",
    "RROnBins",
    "OptimalUnbiased",
    "BiasVarianceRandomizer",
    "DebiasedRR",
    "RandomizedQuantization",
    "RQM",
    "ERM",
    "OPTM",
    "MVU",
    "RPWithPrior",
    "RRWithPriorRegression",
    "BaseLabelMechanism",
    "BaseDiscreteMechanism",
    "BasePriorMechanism",
    "get_mechanism_class",
    "make_mechanism",
    "mechanism_names",
]
