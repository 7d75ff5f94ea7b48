"""Meta-estimators that train scikit-learn models on label-DP labels."""

from ._classifier import LabelDPClassifier
from ._debiased_objective import DebiasedSoftmaxObjective
from ._debiased_sgd import DebiasedSGDClassifier
from ._noise_aware import backward_correct
from ._regressor import LabelDPRegressor
from ._tables import classification_table
from ._scorers import (
    debiased_accuracy,
    debiased_accuracy_scorer,
    unbiased_mse,
    unbiased_mse_scorer,
    unbiased_square_estimator,
)

__all__ = [
    "LabelDPClassifier",
    "LabelDPRegressor",
    "unbiased_mse",
    "unbiased_mse_scorer",
    "debiased_accuracy",
    "debiased_accuracy_scorer",
    "unbiased_square_estimator",
    "classification_table",
    "DebiasedSGDClassifier",
    "DebiasedSoftmaxObjective",
    "backward_correct",
]
