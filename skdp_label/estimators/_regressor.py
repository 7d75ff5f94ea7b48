"""LabelDPRegressor: train any regressor on labels randomized once in fit."""

from sklearn.base import RegressorMixin, _fit_context
from sklearn.utils.validation import check_is_fitted

from ..utils._random import derive_random_state
from ._base import BaseLabelDPEstimator

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
        A registered regression mechanism name (see
        ``skdp_label.mechanisms.mechanism_names('regression')``, e.g.
        ``'laplace'``, ``'discrete-laplace'``, ``'staircase'``,
        ``'exponential'``) built with ``epsilon``, ``bounds``, ``domain``,
        ``accountant``, ``random_state`` and ``mechanism_params``; or a
        mechanism instance, which is cloned, and whose ``epsilon`` is
        replaced by this estimator's (its ``accountant`` too, when given).
    epsilon : float, default=1.0
        Privacy cost of one label per fit.
    bounds : tuple (lo, hi), optional
        Public label bounds, passed to the mechanism.
    domain : array-like, optional
        Public finite label domain, passed to mechanisms that take one.
    mechanism_params : dict, optional
        Further constructor arguments of the mechanism (by name only).
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
    }

    def __init__(
        self,
        base_estimator,
        mechanism="unbiased",
        epsilon=1.0,
        *,
        bounds=None,
        domain=None,
        mechanism_params=None,
        param_grid=None,
        cv=None,
        accountant=None,
        random_state=None,
        verbose=0,
    ):
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

    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y, **fit_params):
        """Randomize ``y`` once (charging ``epsilon``) and fit the base estimator.

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
        routed = self._check_inputs_before_spending(X, y, fit_params)
        mechanism = self._build_mechanism(
            float(self.epsilon),
            derive_random_state(self.random_state, self._fit_context(X)),
            self.accountant,
            bounds=self.bounds,
            domain=self.domain,
        )
        y_noisy = mechanism.fit_transform(y)
        # No timing of the step that reads the labels: only public facts.
        progress = self._progress()
        progress.charges(getattr(mechanism, "charges_", ()))
        with progress.timed(f"fitted {type(self.base_estimator).__name__} on the noisy labels"):
            self.estimator_ = self._fit_base(X, y_noisy, routed, mechanism)
        self.mechanism_ = mechanism
        self.epsilon_spent_ = getattr(self, "epsilon_spent_", 0.0) + float(mechanism.epsilon_spent_)
        return self

    def predict(self, X, **predict_params):
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
        return self._delegate("predict", X, predict_params)

    def score(self, X, y, **score_params):
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
        return self.estimator_.score(X, y, **self._routed("score", score_params))

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        # Label noise at the default epsilon makes scores on tiny test sets poor.
        tags.regressor_tags.poor_score = True
        return tags
