"""LabelDPRegressor: train any regressor on labels randomized once in fit."""

from __future__ import annotations

from numbers import Real
from typing import Any, Self

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, RegressorMixin, _fit_context, clone
from sklearn.metrics import r2_score
from sklearn.utils import _safe_indexing
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import (
    _check_method_params,
    _num_features,
    _num_samples,
    check_is_fitted,
)

from .._accountant import BudgetAccountant
from ..mechanisms._base import BaseLabelMechanism
from ..mechanisms._validation import NumberInterval
from ..mechanisms.auto._mechanism import compare_candidates, prior_variance
from ..utils._random import derive_random_state, public_folds
from ._base import BaseLabelDPEstimator, unfitted_on_failure
from ._calibration import (
    LinearCalibration,
    anchor_for,
    debiased_mean_bias_bound,
    debiasing_function,
    direct_mean,
    fit_calibration,
    shrunk_mean,
)
from ._effective_size import effective_sample_size
from ..utils._warnings import warn_caller

__all__ = ["LabelDPRegressor"]


class LabelDPRegressor(RegressorMixin, BaseLabelDPEstimator):
    """Regressor trained on label-differentially-private labels.

    ``fit`` randomizes ``y`` once with a label mechanism, which charges
    ``epsilon`` per label (to ``accountant`` if given), and fits a clone of
    ``base_estimator`` on ``(X, y_noisy)``. The fitted model is a
    post-processing of the noisy labels and the public features, so it is
    ``epsilon``-label-DP. Each call to ``fit`` (e.g. every fold and the refit
    of ``GridSearchCV``) randomizes again and is charged again.

    Parameters
    ----------
    base_estimator : estimator
        Any scikit-learn regressor (or Pipeline, XGBoost model, ...).
    mechanism : str or label mechanism, default='unbiased'
        ``'auto'`` chooses between RR-on-Bins and the unbiased randomizer
        (the bias-regularised randomizer is an opt-in third candidate)
        by their predicted excess risk for this ``epsilon``, ``n`` and base
        estimator (docs/auto.md; its prior is charged once). Otherwise a
        registered regression mechanism name (see
        ``skdp_label.mechanisms.mechanism_names('regression')``, e.g.
        ``'laplace'``, ``'discrete-laplace'``, ``'staircase'``,
        ``'exponential'``) built with ``epsilon``, ``bounds``, ``domain``,
        ``accountant``, ``random_state`` and ``mechanism_params``; or a
        mechanism instance, which is cloned, and whose ``epsilon`` is
        replaced by this estimator's (an instance with an accountant of its
        own is charged there; a different ``accountant`` is refused). An
        instance's ``bounds`` / ``domain``, when set, must equal the
        estimator's when those are set too (a ``ValueError`` before anything
        is spent); unset ones are filled in from the estimator's.
    epsilon : float, default=1.0
        Privacy cost of one label per fit.
    bounds : tuple (lo, hi), optional
        Public label bounds, passed to the mechanism.
    domain : array-like, optional
        Public finite label domain, passed to mechanisms that take one.
    mechanism_params : dict, optional
        Further constructor arguments of a mechanism named by a string
        (refused with an instance: set them on it; and refused for
        ``epsilon``, ``accountant``, ``random_state``, ``bounds`` and
        ``domain``, which are this estimator's parameters). For
        ``'auto'``, ``{'n_eff': ...}`` overrides the number of noisy labels
        one prediction is taken to average (by default read off the base
        estimator: see :func:`~skdp_label.estimators.effective_sample_size`).
    param_grid : dict or list of dicts, optional
        Parameters of ``base_estimator`` to choose by ``GridSearchCV`` on the
        noisy labels with :func:`~skdp_label.estimators.unbiased_mse_scorer`
        of the fitted mechanism (no true label, no extra budget), then refit
        on all noisy labels: at small epsilon it picks simpler models. The
        mechanism must admit an unbiased MSE estimate (refused before
        anything is spent when it cannot, e.g. clipped continuous noise;
        warned and ignored after fit when its noisy prior makes it
        non-invertible, e.g. RR-on-Bins merging labels).
    cv : int, cross-validation generator or iterable, optional
        Splitting of the noisy labels for ``param_grid`` (``GridSearchCV``'s).
    accountant : BudgetAccountant, optional
        Charged with every randomization; shared by clones, so model
        selection is accounted.
    random_state : None or int, default=None
        Source of the label noise. ``None`` (the default, and the only
        private choice) draws fresh OS entropy for every fit and keeps none
        of it. An int makes fits reproducible for experiments: the noise of
        a fit is derived from the seed and the features (so folds and the
        refit of a model selection never share a stream), and a
        :class:`~skdp_label.utils.PrivacyLeakWarning` is emitted because the
        seed is readable from the estimator. Generators are refused. The
        base estimator keeps its own ``random_state``.
    verbose : int, default=0
        Print the mechanism, epsilon per step and timings (public facts
        only; never labels or seeds), and let a slow solver report its own
        progress. 0 is silent.
    clip_predictions : bool, default=True
        Clip predictions to the public label range (the declared bounds, or
        the mechanism's domain): a free post-processing, since no true label
        lies outside it, that keeps a model trained on noisy labels (which
        do lie far outside) from predicting there. ``False`` returns the base
        estimator's raw predictions (e.g. to study the noisy model itself).
    shrinkage : 'auto', 'cv', float in [0, 1] or None, default='auto'
        Guard toward the constant predictor, a post-processing of the noisy
        labels (no budget of its own; docs/auto.md). ``'cv'``: predictions are
        ``a + b (f(x) - m)`` with ``f`` the fitted base estimator, ``b`` the
        least-squares slope of the debiased noisy labels on out-of-fold
        predictions of 3 clones of ``f`` (3 extra fits, on folds made from
        the public features only; after ``param_grid``'s search, with its
        chosen parameters), shrunk by its standard error and clipped to
        ``[0, 2]``, and ``a`` the debiased labels' mean shrunk toward the
        mechanism's prior mean: where the model fits the noise, the
        predictor falls back to (nearly) the constant. With
        ``mechanism='auto'`` the guard also sets the mechanism's
        ``mean_epsilon='auto'``: a public share of ``epsilon`` (most of it
        where learning is hopeless, a tenth elsewhere) buys a noisy
        mean of the clipped labels, combined with the debiased mean by
        inverse-variance weighting for ``a``, not shrunk (``mechanism_params=
        {'mean_epsilon': None}`` turns it off). A float ``s``
        predicts ``(1 - s) f(x) + s a`` (no extra fit). ``'auto'``: ``'cv'``
        for ``mechanism='auto'`` (skipped for multi-output ``y`` or fewer
        than 6 rows), else None. None: the base estimator's predictions.

    Attributes
    ----------
    mechanism_ : label mechanism
        The fitted mechanism (holds no labels).
    estimator_ : estimator
        The base estimator fitted on the noisy labels.
    epsilon_spent_ : float
        Epsilon spent per label by this object, cumulative over all its
        fits (each fit randomizes again and is charged again).
    best_params_ : dict or None
        Parameters chosen in ``param_grid`` (None without one).
    cv_results_ : dict or None
        ``GridSearchCV.cv_results_`` of that choice: scores on noisy labels.
    n_features_in_ : int
        Number of features seen by the base estimator.
    prediction_bounds_ : tuple (lo, hi) or None
        Public range predictions are clipped to (None: not clipped).
    n_eff_ : float
        Noisy labels one prediction is taken to average (docs/auto.md).
    predicted_risks_ : dict
        For prior-based mechanisms ('auto', 'unbiased', 'rr-on-bins'):
        candidate name -> predicted ``bias2``, ``variance`` and ``risk``
        under the mechanism's (public or charged noisy) prior.
    shrinkage_slope_ : float
        Slope ``b`` of the guard (1.0 without one): predictions are
        ``shrinkage_intercept_ + shrinkage_slope_ * f(x)``, then clipped.
    shrinkage_intercept_ : float
        Its intercept (0.0 without one). Both are statistics of the noisy
        labels (post-processing); no fold, prediction or label is kept.

    See Also
    --------
    LabelDPClassifier : the classification counterpart.
    skdp_label.estimators.unbiased_mse_scorer : model selection on noisy labels.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from skdp_label import LabelDPRegressor, BudgetAccountant
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(500, 3))
    >>> y = np.clip(X @ [1.0, 2.0, 0.5] + 5, 0, 10)
    >>> acc = BudgetAccountant(epsilon=2.0)
    >>> reg = LabelDPRegressor(Ridge(), mechanism="laplace", epsilon=1.0,
    ...                        bounds=(0, 10), accountant=acc, random_state=0)
    >>> reg.fit(X, y).epsilon_spent_
    1.0
    >>> acc.spent_epsilon
    1.0
    >>> reg.predict(X[:2]).shape
    (2,)
    """

    _task = "regression"

    _parameter_constraints = {
        **BaseLabelDPEstimator._parameter_constraints,
        "bounds": [tuple, list, None],
        "domain": ["array-like", None],
        "mechanism_params": [dict, None],
        "clip_predictions": ["boolean"],
        "shrinkage": [
            StrOptions({"auto", "cv"}), NumberInterval(Real, 0, 1, closed="both"), None
        ],
    }

    #: Folds of the cross-fitting behind ``shrinkage='cv'`` (public, docs/auto.md).
    _SHRINKAGE_FOLDS = 3

    #: Warn when the chosen mechanism's predicted risk exceeds the best
    #: candidate's by this factor.
    _far_from_best = 2.0

    def __init__(
        self,
        base_estimator: BaseEstimator,
        mechanism: str | BaseLabelMechanism = "unbiased",
        epsilon: float = 1.0,
        *,
        bounds: tuple[float, float] | None = None,
        domain: ArrayLike | None = None,
        mechanism_params: dict | None = None,
        param_grid: dict | list | None = None,
        cv: int | Any = None,
        accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
        verbose: int = 0,
        clip_predictions: bool = True,
        shrinkage: str | float | None = "auto",
    ) -> None:
        self.base_estimator = base_estimator
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.bounds = bounds
        self.domain = domain
        self.mechanism_params = mechanism_params
        self.param_grid = param_grid
        self.cv = cv
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose
        self.clip_predictions = clip_predictions
        self.shrinkage = shrinkage

    @unfitted_on_failure
    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X: ArrayLike, y: ArrayLike, **fit_params: Any) -> Self:
        """Randomize ``y`` once (charging ``epsilon``) and fit the base estimator.

        A fit that raises leaves the estimator unfitted; the epsilon it had
        charged before failing is spent, counted in ``epsilon_spent_`` and
        named in a note on the exception.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Public features.
        y : array-like of shape (n_samples,) or (n_samples, n_outputs)
            Private labels.
        **fit_params : dict
            Passed to ``base_estimator.fit`` (through metadata routing when
            it is enabled), e.g. ``sample_weight``.

        Returns
        -------
        self : object
        """
        # Everything that can fail is checked before any budget is spent.
        routed, cv = self._check_inputs_before_spending(X, y, fit_params)
        n_samples = _num_samples(X)
        shrinkage = self._resolve_shrinkage(y, n_samples)
        # 'auto' measures n_eff on the public features (one fit on synthetic
        # labels, before anything is spent) unless it is given; the warning
        # of the other prior mechanisms uses the hyper-parameter rules only.
        measure = self._is_auto() and "n_eff" not in (self.mechanism_params or {}) and getattr(
            self.mechanism, "n_eff", None) is None
        try:  # a list of rows has no shape (it counted one feature)
            n_features = _num_features(X)
        except TypeError:  # 1-D X: the base estimator says what it accepts
            n_features = 1
        n_eff = effective_sample_size(
            self.base_estimator, n_samples, n_features, X if measure else None
        )
        mechanism = self._build_mechanism(
            float(self.epsilon),
            derive_random_state(self.random_state, self._fit_context(X)),
            self.accountant,
            bounds=self.bounds,
            domain=self.domain,
            n_eff=n_eff,
            # The guard's level: 'auto' spends a public share of epsilon on a
            # noisy mean of the labels (docs/auto.md), unless told otherwise.
            # Not with sample weights: the guard's means are weighted, and a
            # weighted noisy sum would need a public bound on the weights.
            mean_epsilon=(
                "auto" if shrinkage is not None and self._is_auto()
                and routed.get("sample_weight") is None else None
            ),
        )
        self._attempt.charged = lambda: float(getattr(mechanism, "epsilon_spent_", 0.0))
        mechanism.fit(y)
        self.n_eff_ = float(getattr(mechanism, "n_eff_", n_eff))
        self.predicted_risks_ = self._predicted_risks(mechanism, n_samples)
        y_noisy = mechanism.transform(y)
        # No timing of the step that reads the labels: only public facts.
        progress = self._progress()
        progress.charges(getattr(mechanism, "charges_", ()))
        with progress.timed(f"fitted {type(self.base_estimator).__name__} on the noisy labels"):
            self.estimator_ = self._fit_base(X, y_noisy, routed, mechanism, cv)
        self._fit_shrinkage(shrinkage, X, y_noisy, routed, mechanism, progress)
        self.mechanism_ = mechanism
        self.prediction_bounds_ = mechanism._label_range() if self.clip_predictions else None
        return self

    def predict(self, X: ArrayLike, **predict_params: Any) -> np.ndarray:
        """Predict with the fitted base estimator.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        **predict_params : dict
            Passed to ``estimator_.predict``.

        Returns
        -------
        y_pred : ndarray
        """
        y_pred = self._delegate("predict", X, predict_params)
        if self.shrinkage_slope_ != 1.0 or self.shrinkage_intercept_ != 0.0:
            y_pred = self.shrinkage_intercept_ + self.shrinkage_slope_ * np.asarray(
                y_pred, dtype=np.float64)
        if self.prediction_bounds_ is None:
            return y_pred
        return np.clip(y_pred, *self.prediction_bounds_)

    # -- the shrinkage guard (docs/auto.md) -------------------------------------
    def _resolve_shrinkage(self, y, n_samples):
        """'cv', a fixed weight, or None; checked before anything is spent."""
        shrinkage = self.shrinkage  # never a bool (NumberInterval): True is not s = 1
        if shrinkage is None or shrinkage == "auto" and not self._is_auto():
            return None
        y_shape = getattr(y, "shape", None) or np.asarray(y).shape
        multi_output = len(y_shape) == 2 and y_shape[1] > 1
        if shrinkage == "auto":
            # 'auto' steps aside where cross-fitting cannot run.
            return None if multi_output or n_samples < 2 * self._SHRINKAGE_FOLDS else "cv"
        name = type(self).__name__
        if multi_output:
            raise ValueError(
                f"{name}: shrinkage={shrinkage!r} calibrates one label column; y has "
                f"{y_shape[1]} (use shrinkage=None)."
            )
        if shrinkage == "cv" and n_samples < 2 * self._SHRINKAGE_FOLDS:
            raise ValueError(
                f"{name}: shrinkage='cv' cross-fits {self._SHRINKAGE_FOLDS} folds and needs at "
                f"least {2 * self._SHRINKAGE_FOLDS} rows; got n_samples={n_samples}."
            )
        return shrinkage

    def _fit_shrinkage(self, shrinkage, X, y_noisy, routed, mechanism, progress):
        """Set ``shrinkage_intercept_`` and ``shrinkage_slope_`` (post-processing:
        no budget). The budget is spent by now, so a failure warns and keeps
        the release unshrunk. Nothing row-level is kept."""
        self.shrinkage_intercept_, self.shrinkage_slope_ = 0.0, 1.0
        if shrinkage is None:
            return
        try:
            calibration = self._calibration(shrinkage, X, y_noisy, routed, mechanism, progress)
        except Exception as exc:  # noqa: BLE001 - the budget is spent: keep the release
            warn_caller(
                f"{type(self).__name__}: the guard toward the constant "
                f"(shrinkage={shrinkage!r}) failed ({type(exc).__name__}); predictions are not "
                "shrunk.",
                UserWarning,
            )
            return
        self.shrinkage_intercept_ = float(calibration.intercept)
        self.shrinkage_slope_ = float(calibration.slope)
        progress(
            f"shrinkage: slope {calibration.slope:.3g} (least squares {calibration.raw_slope:.3g} "
            f"+- {calibration.slope_se:.3g}) toward the constant"
        )

    def _calibration(self, shrinkage, X, y_noisy, routed, mechanism, progress):
        """The guard's :class:`LinearCalibration`; the out-of-fold predictions
        and debiased labels stay local."""
        noisy = np.asarray(y_noisy, dtype=np.float64).reshape(-1)
        debias = debiasing_function(mechanism)
        debiased = debias(noisy)
        anchor, model_variance = anchor_for(mechanism, debias)
        direct = direct_mean(mechanism)
        # Where bins merge labels, the debiased mean is off by up to a bin's width.
        bias_bound = 0.0 if direct is None else debiased_mean_bias_bound(mechanism)
        weight = routed.get("sample_weight")
        weight = None if weight is None else np.asarray(weight, dtype=np.float64)
        if shrinkage == "cv":
            with progress.timed(f"cross-fitted {self._SHRINKAGE_FOLDS} folds for shrinkage='cv'"):
                oof = self._out_of_fold_predictions(X, y_noisy, routed)
            return fit_calibration(debiased, oof, anchor, model_variance, weight, direct=direct,
                                   bias_bound=bias_bound)
        # A fixed weight of the constant: (1 - s) f(x) + s a, as LabelDPClassifier's.
        constant = shrunk_mean(debiased, anchor, model_variance, weight, direct=direct,
                               bias_bound=bias_bound)
        slope = 1.0 - float(shrinkage)
        return LinearCalibration(float(shrinkage) * constant, slope, slope, 0.0)

    def _out_of_fold_predictions(self, X, y_noisy, routed):
        """Predictions of clones of the fitted base estimator (parameters
        chosen by ``param_grid`` included) on folds they were not fitted on;
        the folds come from the public features only."""
        oof = np.empty(_num_samples(X), dtype=np.float64)
        y_noisy = np.asarray(y_noisy)
        if sp.issparse(X):
            X = X.tocsr()  # row-indexable, whatever the format the base estimator took
        elif not hasattr(X, "iloc") and not isinstance(X, np.ndarray):
            X = np.asarray(X)  # lists and other array-likes
        for train, test in public_folds("calibration folds", X, self._SHRINKAGE_FOLDS):
            params = _check_method_params(X, routed, indices=train)
            model = clone(self.estimator_).fit(
                _safe_indexing(X, train), y_noisy[train], **params)
            oof[test] = np.asarray(
                model.predict(_safe_indexing(X, test)), dtype=np.float64).reshape(-1)
        return oof

    # -- the choice of mechanism (docs/auto.md) -----------------------------------
    def _is_auto(self):
        if isinstance(self.mechanism, str):
            return self.mechanism == "auto"
        return type(self.mechanism).__name__ == "AutoRegression"

    _CANDIDATE_NAMES = {"OptimalUnbiased": "unbiased", "RROnBins": "rr-on-bins"}
    _COMPARE_UP_TO = {"rr-on-bins": 4096, "unbiased": 256}

    def _predicted_risks(self, mechanism, n_samples):
        """Predicted risks of the candidates under the fitted mechanism's
        prior (public or charged: a free post-processing), and a warning when
        the chosen mechanism is far from the best. ``{}`` for mechanisms
        without a prior."""
        own = getattr(mechanism, "predicted_risks_", None)
        if own is not None:  # mechanism='auto' compared them already
            return own
        name = self._CANDIDATE_NAMES.get(type(mechanism).__name__)
        if name is None or getattr(mechanism, "loss", "squared") != "squared":
            return {}
        values, prior = mechanism.input_values_, mechanism.prior_
        # Alternatives whose solve stays small next to the fit (the unbiased
        # solver is slow on large grids; RR-on-Bins is not).
        names = [n for n, limit in self._COMPARE_UP_TO.items() if n == name or values.size <= limit]
        if len(names) < 2:
            return {}
        eps_labels = float(mechanism.epsilon) - mechanism.prior_epsilon_
        try:
            risks, _ = compare_candidates(
                values, prior, eps_labels, self.n_eff_, names, fitted={name: mechanism}
            )
        except ValueError:  # e.g. an alternative refuses eps_labels: the prior is spent by now,
            return {}  # and this comparison is only advice
        best = min(risks, key=lambda k: risks[k]["risk"])
        var = prior_variance(values, prior)
        if var > 0 and risks[name]["risk"] > self._far_from_best * risks[best]["risk"]:
            warn_caller(
                f"{type(self).__name__}: at epsilon={float(self.epsilon):g} with "
                f"{n_samples} labels, {name!r} adds noise of variance "
                f"{risks[name]['variance'] / var:.3g} times the prior's variance and bias^2 "
                f"{risks[name]['bias2'] / var:.2g} times; for a model averaging about "
                f"{self.n_eff_:.3g} labels its predicted excess risk is "
                f"{risks[name]['risk'] / var:.3g} "
                f"times the prior's variance, against {risks[best]['risk'] / var:.3g} with "
                f"{best!r}. mechanism='auto' chooses by this rule (docs/auto.md).",
                UserWarning,
            )
        return risks

    def score(self, X: ArrayLike, y: ArrayLike, **score_params: Any) -> float:
        """Score of the fitted base estimator on (true) labels ``y``.

        Evaluating on true labels is not covered by the privacy guarantee;
        to select models privately, score on noisy labels with
        :func:`~skdp_label.estimators.unbiased_mse_scorer`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        **score_params : dict
            Passed to ``estimator_.score`` (e.g. ``sample_weight``).

        Returns
        -------
        score : float
        """
        check_is_fitted(self)
        self._warn_true_label_scoring()
        routed = self._routed("score", score_params)
        if self.prediction_bounds_ is None and self.shrinkage_slope_ == 1.0 and (
                self.shrinkage_intercept_ == 0.0):
            return self.estimator_.score(X, y, **routed)
        # R^2 of the clipped predictions (what predict returns).
        return r2_score(y, self.predict(X), sample_weight=routed.get("sample_weight"))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Label noise at the default epsilon makes scores on tiny test sets poor.
        tags.regressor_tags.poor_score = True
        return tags
