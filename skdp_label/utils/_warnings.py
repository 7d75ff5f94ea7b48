"""Warnings attributed to the user's line, whatever the call depth."""

import importlib.util
import os
import sys
import warnings


def _package_dir(name):
    # Found, not imported: importing scikit-learn takes a second or more.
    spec = importlib.util.find_spec(name)
    return os.path.dirname(os.path.abspath(spec.origin)) + os.sep


# Frames in these packages are skipped: a warning about a fit points at the
# line that called fit (directly, or through a Pipeline or a search).
_INTERNAL = (
    os.path.dirname(os.path.abspath(os.path.dirname(__file__))) + os.sep,
    _package_dir("sklearn"),
    _package_dir("joblib"),
)


def warn_caller(message, category=UserWarning):
    """``warnings.warn`` at the first frame outside skdp_label, scikit-learn
    and joblib: a fixed ``stacklevel`` breaks whenever a wrapper (scikit-
    learn's ``_fit_context``, a decorator, a meta-estimator) adds a frame."""
    frame, level = sys._getframe(1), 2
    while frame is not None and frame.f_code.co_filename.startswith(_INTERNAL):
        frame, level = frame.f_back, level + 1
    warnings.warn(message, category, stacklevel=level)
