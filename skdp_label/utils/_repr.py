"""``repr`` that always shows the privacy parameters, and public numbers
in messages.

scikit-learn's ``repr`` shows only parameters that differ from their
defaults, so ``LabelDPRegressor(Ridge(), mechanism='unbiased', epsilon=1.0)``
would print neither: logs and printed pipelines would hide the epsilon used.
"""

from __future__ import annotations

import functools
from numbers import Integral, Real
from typing import Any

import numpy as np

__all__ = ["PrivacyReprMixin", "format_number", "public_repr"]

# Longer sequences are summarised in messages (a domain can hold 10**7 values).
_MAX_ITEMS_SHOWN = 8


def format_number(x: Any) -> str:
    """A number as a user writes it: ``75``, ``0.5``, never ``np.float64(75.0)``."""
    if isinstance(x, (bool, np.bool_)):
        return str(bool(x))
    if isinstance(x, Integral):
        return str(int(x))
    if isinstance(x, Real):
        x = float(x)
        # Whole numbers print as integers (bounds (0, 10), not (0.0, 10.0)).
        return str(int(x)) if x.is_integer() and abs(x) < 2.0**53 else repr(x)
    return repr(x)


def public_repr(value: Any) -> str:
    """``repr`` of a *public* parameter value for messages, without numpy reprs.

    Numpy scalars print as Python numbers, arrays and sequences as lists
    (summarised past a few items). Only for public inputs (bounds, classes,
    epsilon): messages never show labels.
    """
    if isinstance(value, np.ndarray):
        value = value.tolist()
    if isinstance(value, (list, tuple)):
        items = [public_repr(v) for v in value[:_MAX_ITEMS_SHOWN]]
        if len(value) > _MAX_ITEMS_SHOWN:
            items.append(f"... ({len(value)} values)")
        if isinstance(value, tuple):
            return "(" + ", ".join(items) + ("," if len(value) == 1 else "") + ")"
        return "[" + ", ".join(items) + "]"
    if isinstance(value, (Real, np.generic)) and not isinstance(value, str):
        return format_number(value.item() if isinstance(value, np.generic) else value)
    return repr(value)


class PrivacyReprMixin:
    """Mixin: ``repr`` always names the parameters in ``_repr_always``.

    scikit-learn's printer lists the parameters that differ from their
    defaults (``_changed_params``), for the printed object and for every
    object nested in it (a Pipeline step, a GridSearchCV's estimator, a
    ``TransformedTargetRegressor``'s transformer). :func:`_install_repr_hook`
    makes that one function add ``_repr_always`` for objects that declare
    it, so epsilon and the mechanism are printed at every nesting level.
    """

    _repr_always = ("epsilon",)

    def __init_subclass__(cls, **kwargs):
        super().__init_subclass__(**kwargs)
        # Installed when a class uses it, not when skdp_label is imported:
        # scikit-learn takes a second or more to import.
        _install_repr_hook()


def _install_repr_hook():
    """Wrap scikit-learn's ``_changed_params`` once: objects with a
    ``_repr_always`` attribute always list those parameters; every other
    estimator prints exactly as before."""
    try:
        from sklearn.utils import _pprint

        changed_params = _pprint._changed_params
    except (ImportError, AttributeError):  # a private hook: tests/test_repr.py notices if it moves
        return
    if getattr(changed_params, "_shows_repr_always", False):
        return

    @functools.wraps(changed_params)
    def with_privacy_params(estimator):
        params = changed_params(estimator)
        always = getattr(type(estimator), "_repr_always", ())
        if always:
            current = estimator.get_params(deep=False)
            params.update({name: current[name] for name in always if name in current})
        return params

    with_privacy_params._shows_repr_always = True
    _pprint._changed_params = with_privacy_params
