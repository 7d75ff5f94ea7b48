"""skdp_label: scikit-learn tools for learning with label differential privacy."""

from ._accountant import BudgetAccountant, BudgetExceededError, LedgerUnavailableError
from ._report import PrivacyReport
from .estimators import LabelDPClassifier, LabelDPRegressor
from .utils import PrivacyLeakWarning

__version__ = "0.1.0.dev0"

__all__ = [
    "BudgetAccountant",
    "BudgetExceededError",
    "LabelDPClassifier",
    "LabelDPRegressor",
    "LedgerUnavailableError",
    "PrivacyLeakWarning",
    "PrivacyReport",
    "__version__",
]
