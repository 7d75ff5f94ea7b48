"""``repr`` that always shows the privacy parameters.

scikit-learn's ``repr`` shows only parameters that differ from their
defaults, so ``LabelDPRegressor(Ridge(), mechanism='unbiased', epsilon=1.0)``
would print neither: logs and printed pipelines would hide the epsilon used.
"""

import inspect
from numbers import Integral, Real

import numpy as np
from sklearn import get_config

__all__ = ["PrivacyReprMixin", "format_number", "public_repr"]

# Longer sequences are summarised in messages (a domain can hold 10**7 values).
_MAX_ITEMS_SHOWN = 8


def format_number(x):
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


def public_repr(value):
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

    The parameters scikit-learn hides (default values) are inserted first.
    Overriding ``__repr__`` also takes the class out of scikit-learn's pretty
    printer dispatch, so nested estimators (in a Pipeline, a GridSearchCV)
    are printed through this method too.
    """

    _repr_always = ("epsilon",)

    def __repr__(self, N_CHAR_MAX=700):
        text = super().__repr__(N_CHAR_MAX=N_CHAR_MAX)
        if not get_config()["print_changed_only"]:
            return text  # every parameter is shown already
        head = f"{type(self).__name__}("
        if not text.startswith(head):
            return text
        params = self.get_params(deep=False)
        defaults = {
            name: p.default for name, p in inspect.signature(type(self).__init__).parameters.items()
        }
        # Hidden by scikit-learn exactly when the value prints like its default.
        hidden = [
            name
            for name in self._repr_always
            if name in params
            and defaults.get(name, inspect.Parameter.empty) is not inspect.Parameter.empty
            and repr(params[name]) == repr(defaults[name])
        ]
        if not hidden:
            return text
        shown = ", ".join(f"{name}={params[name]!r}" for name in hidden)
        rest = text[len(head) :]
        return head + shown + ("" if rest.startswith(")") else ", ") + rest
