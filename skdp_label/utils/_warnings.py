"""Warnings attributed to the user's line, whatever the call depth."""

import os
import sys
import warnings

import joblib
import sklearn

# Frames in these packages are skipped: a warning about a fit points at the
# line that called fit (directly, or through a Pipeline or a search).
_INTERNAL = tuple(
    os.path.dirname(os.path.abspath(path)) + os.sep
    for path in (os.path.dirname(__file__), sklearn.__file__, joblib.__file__)
)


def warn_caller(message, category=UserWarning):
    """``warnings.warn`` at the first frame outside skdp_label, scikit-learn
    and joblib: a fixed ``stacklevel`` breaks whenever a wrapper (scikit-
    learn's ``_fit_context``, a decorator, a meta-estimator) adds a frame."""
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
