"""What LabelDPRegressor and LabelDPClassifier share: the mechanism, checks
made before anything is spent, metadata routing and delegation."""

from numbers import Real

import numpy as np
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.utils import Bunch, get_tags
from sklearn.utils._param_validation import HasMethods, Interval
from sklearn.utils.metadata_routing import (
    MetadataRouter,
    MethodMapping,
    _routing_enabled,
    process_routing,
)
from sklearn.utils.validation import check_array, check_consistent_length, check_is_fitted

from .._accountant import BudgetAccountant
from ..mechanisms._base import BaseLabelMechanism
from ..mechanisms._registry import make_mechanism

__all__ = ["BaseLabelDPEstimator"]


class BaseLabelDPEstimator(MetaEstimatorMixin, BaseEstimator):
    """Meta-estimator that randomizes ``y`` once in ``fit`` and trains a clone
    of ``base_estimator`` on the noisy labels."""

    _task = None  # 'regression' or 'classification'

    _parameter_constraints = {
        "base_estimator": [HasMethods(["fit", "predict"])],
        "mechanism": [str, BaseLabelMechanism],
        "epsilon": [Interval(Real, 0, None, closed="neither")],
        "accountant": [BudgetAccountant, None],
        "random_state": ["random_state", np.random.Generator],
    }

    # -- the mechanism ------------------------------------------------------
    def _build_mechanism(self, epsilon, rng, accountant, **public):
        """A fresh mechanism: by registered name, or a clone of an instance.

        For an instance, the estimator's ``epsilon`` replaces the instance's
        (so that ``epsilon`` can be tuned like any parameter), and the
        estimator's ``accountant`` and random source are used when given.
        """
        if isinstance(self.mechanism, str):
            params = {k: v for k, v in public.items() if v is not None}
            params.update(getattr(self, "mechanism_params", None) or {})
            return make_mechanism(
                self.mechanism,
                task=self._task,
                epsilon=epsilon,
                accountant=accountant,
                random_state=rng,
                **params,
            )
        mech = clone(self.mechanism)
        updates = {"epsilon": epsilon, "random_state": rng}
        # Public inputs the instance leaves unset (e.g. classes) are filled in.
        own = mech.get_params(deep=False)
        updates.update({k: v for k, v in public.items() if k in own and own[k] is None})
        if accountant is not None:
            updates["accountant"] = accountant
        return mech.set_params(**updates)

    # -- checks before any budget is spent -------------------------------------
    def _check_inputs_before_spending(self, X, y):
        """Raise on bad X (empty, wrong length, NaN if the base refuses NaN)
        before the labels are randomized."""
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        try:
            allow_nan = get_tags(self.base_estimator).input_tags.allow_nan
        except Exception:  # a base estimator without tags: let it check NaN itself
            allow_nan = True
        check_array(
            X,
            accept_sparse=True,
            dtype=None,
            ensure_all_finite=not allow_nan,
            ensure_2d=False,
            allow_nd=True,
            ensure_min_samples=1,
            input_name="X",
        )
        check_consistent_length(X, y)

    # -- metadata routing ---------------------------------------------------------
    def get_metadata_routing(self):
        """Metadata routing: fit, predict and score metadata (e.g.
        ``sample_weight``) go to ``base_estimator``.

        Returns
        -------
        routing : MetadataRouter
        """
        return MetadataRouter(owner=self).add(
            estimator=self.base_estimator,
            method_mapping=MethodMapping()
            .add(caller="fit", callee="fit")
            .add(caller="predict", callee="predict")
            .add(caller="predict_proba", callee="predict_proba")
            .add(caller="score", callee="score"),
        )

    def _routed(self, method, params):
        if _routing_enabled():
            return process_routing(self, method, **params).estimator[method]
        return Bunch(**params)

    def _fit_base(self, X, y_noisy, routed_fit_params):
        estimator = clone(self.base_estimator)
        estimator.fit(X, y_noisy, **routed_fit_params)
        return estimator

    # -- delegation ---------------------------------------------------------------
    def _delegate(self, method, X, params):
        """``estimator_.<method>(X, ...)`` with the method's routed metadata."""
        check_is_fitted(self)
        return getattr(self.estimator_, method)(X, **self._routed(method, params))

    @property
    def n_features_in_(self):
        """Number of features seen by the fitted base estimator."""
        check_is_fitted(self)
        return self.estimator_.n_features_in_

    @property
    def feature_names_in_(self):
        """Feature names seen by the fitted base estimator."""
        check_is_fitted(self)
        return self.estimator_.feature_names_in_

    def __sklearn_is_fitted__(self):
        return hasattr(self, "estimator_")

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = True
        try:
            base = get_tags(self.base_estimator)
        except Exception:
            return tags
        tags.input_tags.allow_nan = base.input_tags.allow_nan
        tags.input_tags.sparse = base.input_tags.sparse
        tags.input_tags.string = base.input_tags.string
        tags.target_tags.multi_output = base.target_tags.multi_output
        return tags
