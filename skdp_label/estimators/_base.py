"""What LabelDPRegressor and LabelDPClassifier share: the mechanism, checks
made before anything is spent, metadata routing and delegation."""

from __future__ import annotations

import functools
import inspect
from numbers import Integral

import numpy as np
import scipy.sparse as sp
from sklearn.base import BaseEstimator, MetaEstimatorMixin, clone
from sklearn.model_selection import GridSearchCV, ParameterGrid, check_cv
from sklearn.utils import Bunch, get_tags
from sklearn.utils._param_validation import HasMethods
from sklearn.utils.metadata_routing import (
    MetadataRouter,
    MethodMapping,
    _routing_enabled,
    process_routing,
)
from sklearn.utils.validation import (
    _check_sample_weight,
    _num_samples,
    check_array,
    check_consistent_length,
    check_is_fitted,
)

from .._accountant import BudgetAccountant
from .._report import PrivacyReport
from ..mechanisms._base import BaseLabelMechanism
from ..mechanisms._registry import make_mechanism
from ..mechanisms._validation import EpsilonInterval
from ..mechanisms.classic._additive import (
    BaseAdditiveMechanism,
    BaseStaircaseFamily,
    DiscreteLaplace,
    DiscreteStaircase,
    Gaussian,
)
from ..utils._random import (
    PrivacyLeakWarning,
    check_random_state,
    public_fingerprint,
    random_state_constraint,
    release_generator,
)
from ..utils._progress import VERBOSE_CONSTRAINT, Progress
from ..utils._repr import PrivacyReprMixin, public_repr
from ._scorers import noisy_label_scorer
from ..utils._warnings import warn_caller

__all__ = ["BaseLabelDPEstimator", "unfitted_on_failure"]


class _FitAttempt:
    """What one call to ``fit`` has charged so far (epsilon per label).

    The fit sets :attr:`charged`, a function of its local mechanisms, once
    it has them; it is read on success and on failure alike."""

    def __init__(self):
        self.charged = lambda: 0.0


def unfitted_on_failure(fit):
    """Decorate a label-DP ``fit``: a fit that raises leaves the estimator
    unfitted (no fitted attribute of an earlier fit survives), and the
    epsilon it had charged before failing is added to ``epsilon_spent_``
    and named in a note on the exception. ``fit`` receives the attempt's
    :class:`_FitAttempt` as ``self._attempt`` (removed when it returns)."""

    @functools.wraps(fit)
    def wrapper(self, *args, **kwargs):
        had_spent = hasattr(self, "epsilon_spent_")
        before = getattr(self, "epsilon_spent_", 0.0)
        self._attempt = attempt = _FitAttempt()
        try:
            fitted = fit(self, *args, **kwargs)
            self.epsilon_spent_ = before + attempt.charged()
            return fitted
        except BaseException as exc:
            charged = attempt.charged()
            for name in [k for k in vars(self) if k.endswith("_") and not k.startswith("__")]:
                delattr(self, name)
            if had_spent or charged:
                self.epsilon_spent_ = before + charged
            if charged:
                exc.add_note(
                    f"{type(self).__name__}.fit failed after charging epsilon={charged:g} per "
                    "label (recorded in the accountant's ledger, if one is attached); that "
                    "budget is spent. The estimator is left unfitted; epsilon_spent_ "
                    f"({self.epsilon_spent_:g}) includes the charge."
                )
            raise
        finally:
            del self._attempt

    return wrapper


class BaseLabelDPEstimator(PrivacyReprMixin, MetaEstimatorMixin, BaseEstimator):
    """Meta-estimator that randomizes ``y`` once in ``fit`` and trains a clone
    of ``base_estimator`` on the noisy labels."""

    _task = None  # 'regression' or 'classification'
    _repr_always = ("mechanism", "epsilon")  # never hidden as defaults

    _parameter_constraints = {
        "base_estimator": [HasMethods(["fit", "predict"])],
        "mechanism": [str, BaseLabelMechanism],
        "epsilon": [EpsilonInterval()],
        "accountant": [BudgetAccountant, None],
        "random_state": random_state_constraint(),
        "verbose": VERBOSE_CONSTRAINT,
        "param_grid": [dict, list, None],
        "cv": ["cv_object"],
    }

    # -- randomness --------------------------------------------------------------
    def _fit_context(self, X):
        """Public identity of a seeded fit: its features. Fits on different
        rows (other folds, the refit) get different noise streams; a refit on
        the same features reproduces the same fit. Only computed for integer
        seeds (it hashes the features)."""
        if self.random_state is None:
            return ()
        if hasattr(X, "to_numpy"):
            X = X.to_numpy()
        if not sp.issparse(X):
            X = np.ascontiguousarray(X)  # the values, not the container or memory layout
        return public_fingerprint(type(self).__name__, X)

    def _fit_generator(self, context):
        """Generator for this fit's own random choices (stage split, clusters,
        cluster histograms); local to ``fit``, never stored."""
        return release_generator(self.random_state, context + (0,), owner=type(self).__name__)

    # -- the mechanism ------------------------------------------------------
    def _build_mechanism(self, epsilon, random_state, accountant, **public):
        """A fresh mechanism: by registered name, or a clone of an instance.

        For an instance, the estimator's ``epsilon`` replaces the instance's
        (so that ``epsilon`` can be tuned like any parameter), and the
        estimator's ``accountant`` and ``random_state`` are used when given.
        ``random_state`` is None or an int (see :meth:`_fit_context`).
        """
        self._check_mechanism_params(public)
        if isinstance(self.mechanism, str):
            params = {k: v for k, v in public.items() if v is not None}
            params.update(getattr(self, "mechanism_params", None) or {})
            mech = make_mechanism(
                self.mechanism,
                task=self._task,
                epsilon=epsilon,
                accountant=accountant,
                random_state=random_state,
                **params,
            )
        else:
            mech = clone(self.mechanism)
            updates = {"epsilon": epsilon, "random_state": random_state}
            # Public inputs the instance leaves unset (e.g. classes) are filled in.
            own = mech.get_params(deep=False)
            updates.update({k: v for k, v in public.items() if k in own and own[k] is None})
            if accountant is not None:
                updates["accountant"] = accountant
            mech.set_params(**updates)
        # Named in the ledger rows the mechanism writes (public context).
        mech._ledger_context = {"estimator": type(self).__name__}
        # Slow solvers report their own progress at the estimator's verbosity.
        if self.verbose and not getattr(mech, "verbose", True):
            mech.set_params(verbose=self.verbose)
        return mech

    #: Mechanism parameters the estimator sets from its own parameters.
    _OWN_MECHANISM_PARAMS = ("epsilon", "accountant", "random_state", "bounds", "domain")
    #: Public inputs given both to the estimator and to a mechanism instance.
    _SHARED_PUBLIC_INPUTS = ("bounds", "domain", "classes")

    def _check_mechanism_params(self, public):
        """Refuse, before anything is spent, a parameter given in two places:
        ``mechanism_params`` with an instance, a ``mechanism_params`` key the
        estimator sets itself, or an instance's public input (bounds, domain,
        classes) that differs from the estimator's."""
        name = type(self).__name__
        params = getattr(self, "mechanism_params", None) or {}
        if isinstance(self.mechanism, str):
            taken = sorted(set(params) & set(self._OWN_MECHANISM_PARAMS))
            if taken:
                raise ValueError(
                    f"{name}: mechanism_params sets {', '.join(taken)}, which the estimator "
                    f"sets itself; pass {', '.join(f'{k}=' for k in taken)} to {name}."
                )
            return
        mech_name = type(self.mechanism).__name__
        if params:
            raise ValueError(
                f"{name}: mechanism_params ({', '.join(sorted(params))}) only applies to a "
                f"mechanism named by a string; set these parameters on the {mech_name} instance."
            )
        own = self.mechanism.get_params(deep=False)
        for key in self._SHARED_PUBLIC_INPUTS:
            mine, theirs = public.get(key), own.get(key)
            if mine is None or theirs is None:
                continue
            try:
                same = np.array_equal(np.asarray(mine), np.asarray(theirs))
            except Exception:  # noqa: BLE001 - incomparable values differ
                same = False
            if not same:
                raise ValueError(
                    f"{name}: the {mech_name} instance has {key}={public_repr(theirs)} but the "
                    f"estimator has {key}={public_repr(mine)}; give {key} in one place (or the "
                    "same value, in the same order, in both)."
                )

    def _progress(self):
        return Progress(self.verbose, type(self).__name__)

    # -- checks before any budget is spent -------------------------------------
    def _check_inputs_before_spending(self, X, y, fit_params):
        """Raise on anything the base estimator would reject about X, y's
        shape or the fit parameters, before the labels are randomized.

        Returns the fit parameters routed to the base estimator and the
        ``cv`` of ``param_grid``'s search (see :meth:`_check_model_selection`).
        """
        check_random_state(self.random_state, owner=type(self).__name__)
        if y is None:
            raise ValueError(f"{type(self).__name__} requires y to be passed, but the target y is None.")
        try:
            base_tags = get_tags(self.base_estimator)
        except Exception:  # a base estimator without tags: let it check X itself
            base_tags = None
        allow_nan = True if base_tags is None else base_tags.input_tags.allow_nan
        accept_sparse = True if base_tags is None else base_tags.input_tags.sparse
        check_array(
            X,
            accept_sparse=accept_sparse,
            dtype=None,
            ensure_all_finite=not allow_nan,
            ensure_2d=False,
            allow_nd=True,
            ensure_min_samples=1,
            input_name="X",
        )
        check_consistent_length(X, y)
        if hasattr(self.base_estimator, "_parameter_constraints"):
            # scikit-learn validates a base estimator's parameters in its fit: after the charge.
            self.base_estimator._validate_params()
        y_shape = getattr(y, "shape", None) or np.asarray(y).shape
        if len(y_shape) > 2:
            raise ValueError(f"y must be 1-D or 2-D, got an array with {len(y_shape)} dimensions.")
        if len(y_shape) == 2 and y_shape[1] > 1:
            multi_output = base_tags is not None and base_tags.target_tags.multi_output
            if self._task == "classification" or not multi_output:
                raise ValueError(
                    f"y has {y_shape[1]} columns, but {type(self.base_estimator).__name__} "
                    f"{'in LabelDPClassifier ' if self._task == 'classification' else ''}"
                    "takes one label column. Pass a 1-D y."
                )
        own = getattr(self.mechanism, "accountant", None)
        if own is not None and self.accountant is not None and own is not self.accountant:
            # The estimator's would replace it: the instance's budget would be bypassed.
            raise ValueError(
                f"{type(self).__name__}: the mechanism instance carries another accountant than "
                "accountant=; give one of them (the one whose budget should be charged)."
            )
        routed = self._routed("fit", fit_params)
        self._check_fit_params(X, routed)
        cv = self._check_model_selection(y_shape)
        return routed, cv

    def _check_fit_params(self, X, fit_params):
        """Lengths and sample weights of the routed fit parameters, and that
        the base estimator's fit accepts them."""
        signature = inspect.signature(self.base_estimator.fit).parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in signature.values())
        n_samples = _num_samples(X)
        for name, value in fit_params.items():
            if not takes_any and name not in signature:
                raise ValueError(
                    f"{type(self.base_estimator).__name__}.fit does not accept the fit "
                    f"parameter {name!r}."
                )
            if name == "sample_weight" and value is not None:
                _check_sample_weight(value, X)
                weights = np.asarray(value, dtype=np.float64)
                if not np.all(np.isfinite(weights)):
                    raise ValueError("sample_weight must be finite.")
                # Refused now rather than by the base estimator (Ridge) or the guards
                # (a negative standard error) after the labels are charged.
                if np.any(weights < 0):
                    raise ValueError("sample_weight must be non-negative; got negative weights.")
            elif hasattr(value, "__len__") and not isinstance(value, (str, dict)) and np.ndim(value) >= 1:
                if _num_samples(value) != n_samples:
                    raise ValueError(
                        f"fit parameter {name!r} has {_num_samples(value)} rows, X has {n_samples}."
                    )

    # -- scoring -------------------------------------------------------------------
    def _warn_true_label_scoring(self):
        if getattr(self, "_warned_true_label_score", False):
            return
        self._warned_true_label_score = True
        noisy = (
            "skdp_label.estimators.unbiased_mse_scorer"
            if self._task == "regression"
            else "skdp_label.estimators.debiased_accuracy_scorer"
        )
        warn_caller(
            f"{type(self).__name__}.score compares predictions with the labels it is given. If "
            "these are the private labels (e.g. GridSearchCV or cross_val_score with the default "
            "scoring), model selection reads true labels and is not covered by the label-DP "
            f"guarantee. Score on noisy labels instead, e.g. scoring={noisy.split('.')[-1]}(...) "
            f"from {noisy.rsplit('.', 1)[0]}.",
            PrivacyLeakWarning,
        )

    # -- metadata routing ---------------------------------------------------------
    def get_metadata_routing(self) -> MetadataRouter:
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

    # -- model selection on the noisy labels (param_grid) ----------------------
    def _check_model_selection(self, y_shape):
        """Refuse, before anything is spent, a ``param_grid`` that cannot be
        searched with an unbiased noisy-label scorer.

        Returns the ``cv`` the search uses (None without ``param_grid``): an
        iterable of splits (e.g. a generator, which a check would use up) is
        read once, here, into a list that the search then reuses."""
        if self.param_grid is None:
            return None
        name = type(self).__name__
        for params in ParameterGrid(self.param_grid):  # validates the grid's structure,
            candidate = clone(self.base_estimator).set_params(**params)  # the names
            if hasattr(candidate, "_validate_params"):  # and the values, where declared
                candidate._validate_params()
        cv = self.cv
        if cv is not None and not isinstance(cv, (Integral, str)) and not hasattr(cv, "split"):
            cv = self._read_splits(cv, y_shape[0])
        n_splits = check_cv(cv, classifier=self._task == "classification").get_n_splits()
        if n_splits > y_shape[0]:
            raise ValueError(
                f"{name}: cv has {n_splits} splits for {y_shape[0]} labels; param_grid needs "
                "at least as many labels as splits."
            )
        if len(y_shape) == 2 and y_shape[1] > 1:
            raise ValueError(f"{name}: param_grid scores one label column; y has {y_shape[1]}.")
        per_example_priors = getattr(self, "prior", "uniform") != "uniform" or (
            self._task == "classification" and self.mechanism == "auto"
        )
        if getattr(self, "n_stages", 1) > 1 or per_example_priors:
            raise ValueError(
                f"{name}: param_grid needs labels randomized by one transition matrix; "
                "multi-stage training, a private prior and mechanism='auto' randomize with "
                "per-example priors."
            )
        public = {k: getattr(self, k, None) for k in ("bounds", "domain", "classes")}
        mechanism = self._build_mechanism(float(self.epsilon), None, None, **public)
        continuous = isinstance(mechanism, BaseAdditiveMechanism) and not isinstance(
            mechanism, (DiscreteLaplace, DiscreteStaircase)
        )
        if continuous and (
            mechanism.clip or not isinstance(mechanism, (BaseStaircaseFamily, Gaussian))
        ):
            raise ValueError(
                f"{name}: param_grid needs an unbiased estimate of the loss from the noisy "
                f"labels, which {type(mechanism).__name__}'s continuous clipped outputs do not "
                "give; use mechanism_params={'clip': False} or a discrete mechanism."
            )
        return cv

    def _read_splits(self, cv, n_samples):
        """An iterable of (train, test) index arrays as a list, checked."""
        name = type(self).__name__
        try:
            splits = [(np.asarray(train), np.asarray(test)) for train, test in cv]
        except (TypeError, ValueError):
            raise ValueError(
                f"{name}: cv must be an int, a splitter or an iterable of (train, test) index "
                "arrays."
            ) from None
        if not splits:
            raise ValueError(
                f"{name}: cv yielded no splits (a generator is used up by the first fit: pass "
                "a list of splits to fit more than once)."
            )
        for train, test in splits:
            for rows in (train, test):
                # An empty or 2-D side would only fail in the search, after the charge.
                if (rows.ndim != 1 or not rows.size or rows.dtype.kind not in "iu"
                        or rows.min() < 0 or rows.max() >= n_samples):
                    raise ValueError(
                        f"{name}: cv's splits must be non-empty 1-D arrays of row indices in "
                        f"[0, {n_samples})."
                    )
        return splits

    def _fit_base(self, X, y_noisy, routed_fit_params, mechanism=None, cv=None):
        """Fit a clone of the base estimator on the noisy labels, choosing its
        parameters in ``param_grid`` by cross-validation (``cv``, from
        :meth:`_check_model_selection`) on the noisy labels with the unbiased
        scorer of ``mechanism`` (post-processing: no budget)."""
        self.best_params_ = self.cv_results_ = None
        if self.param_grid is not None:
            try:
                encoded = self._task == "classification"  # the base estimator sees class codes
                scorer = noisy_label_scorer(mechanism, self._task, encoded=encoded)
            except ValueError as exc:
                warn_caller(
                    f"{type(self).__name__}: param_grid ignored, the base estimator keeps its "
                    f"parameters, because {exc}",
                    UserWarning,
                )
            else:
                search = GridSearchCV(
                    clone(self.base_estimator), self.param_grid, scoring=scorer, cv=cv,
                    error_score="raise",
                )
                try:
                    search.fit(X, y_noisy, **routed_fit_params)
                except Exception as exc:  # noqa: BLE001 - the budget is spent: keep the release
                    warn_caller(
                        f"{type(self).__name__}: the search over param_grid failed "
                        f"({type(exc).__name__}); the base estimator keeps its parameters.",
                        UserWarning,
                    )
                else:
                    # Functions of the noisy labels and the public features only.
                    self.best_params_, self.cv_results_ = search.best_params_, search.cv_results_
                    return search.best_estimator_
        estimator = clone(self.base_estimator)
        estimator.fit(X, y_noisy, **routed_fit_params)
        return estimator

    # -- delegation ---------------------------------------------------------------
    def _delegate(self, method, X, params):
        """``estimator_.<method>(X, ...)`` with the method's routed metadata."""
        check_is_fitted(self)
        return getattr(self.estimator_, method)(X, **self._routed(method, params))

    def _report_parts(self):
        """(mechanisms, steps charged by the estimator itself, stages in parallel)."""
        return [self.mechanism_], (), False

    def privacy_report(self) -> PrivacyReport:
        """The privacy cost of the last fit, step by step, and the noise level.

        Returns
        -------
        report : PrivacyReport
            ``epsilon`` and ``delta`` per label of the last fit, one row per
            charged step (and stage), the mechanism's public parameters and
            its expected noise level. Holds no labels or label statistics.
        """
        from .._report import mechanism_report

        check_is_fitted(self)
        mechanisms, extra, parallel = self._report_parts()
        return mechanism_report(self, mechanisms, extra, parallel)

    @property
    def n_features_in_(self) -> int:
        """Number of features seen by the fitted base estimator."""
        check_is_fitted(self)
        return self.estimator_.n_features_in_

    @property
    def feature_names_in_(self) -> np.ndarray:
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
