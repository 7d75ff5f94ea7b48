"""skdp_label: scikit-learn tools for learning with label differential privacy."""

import os as _os

from ._accountant import BudgetAccountant, BudgetExceededError, LedgerUnavailableError
from ._report import PrivacyReport
from .utils import PrivacyLeakWarning

if _os.environ.get("NUMBA_DISABLE_JIT", "0").strip() not in ("", "0"):
    # Refused here already (skdp_label._kernels checks numba's own config
    # when the samplers are imported): the estimators are imported lazily.
    from . import _kernels  # noqa: F401  (raises the ImportError)

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

# Imported on first use (PEP 562): the estimators bring numba and most of
# scikit-learn, seconds that `import skdp_label` alone need not pay.
_LAZY = {"LabelDPClassifier": "estimators", "LabelDPRegressor": "estimators"}


def __getattr__(name):
    if name in _LAZY:
        import importlib

        value = getattr(importlib.import_module(f".{_LAZY[name]}", __name__), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__():
    return sorted(set(globals()) | set(_LAZY))
