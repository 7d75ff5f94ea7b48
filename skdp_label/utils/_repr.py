"""``repr`` that always shows the privacy parameters.

scikit-learn's ``repr`` shows only parameters that differ from their
defaults, so ``LabelDPRegressor(Ridge(), mechanism='unbiased', epsilon=1.0)``
would print neither: logs and printed pipelines would hide the epsilon used.
"""

import inspect

from sklearn import get_config


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
