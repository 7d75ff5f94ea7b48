"""LabelDPClassifier: label-DP training of any classifier, with RRWithPrior
and multi-stage training LP-MST (Ghazi et al. 2021, paper 004)."""

from numbers import Integral, Real

import numpy as np
import scipy.sparse as sp
from sklearn.base import ClassifierMixin, _fit_context
from sklearn.utils import _safe_indexing
from sklearn.utils._param_validation import Interval, StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_method_params, column_or_1d

from ..mechanisms._validation import check_classes, encode_classes
from ..mechanisms.classification._solver import temper
from ..utils._random import derive_random_state
from ._base import BaseLabelDPEstimator
from ._cluster_prior import cluster_prior_epsilon, cluster_priors, feature_clusters
from ._multistage import in_top_k, partition_stages, stage_fractions
from ..utils._repr import public_repr

__all__ = ["LabelDPClassifier"]


def _base_has(attr):
    def check(self):
        return hasattr(self.estimator_ if hasattr(self, "estimator_") else self.base_estimator, attr)

    return check


class LabelDPClassifier(ClassifierMixin, BaseLabelDPEstimator):
    """Classifier trained on label-differentially-private labels.

    ``fit`` randomizes every label exactly once and fits a clone of
    ``base_estimator`` on the noisy labels; the whole fit is
    ``epsilon``-label-DP and is charged ``epsilon`` (to ``accountant`` if
    given). With the default mechanism, RRWithPrior (004, Lemma 1), labels
    are randomized among the k classes a prior makes likeliest.

    Multi-stage training (LP-MST, 004 App. B): the examples are split at
    random into ``n_stages`` disjoint parts. Stage 1 randomizes its part
    with a uniform prior (i.e. randomized response) or a prior from
    feature clusters; stage t > 1 uses the previous stage's model's
    ``predict_proba`` (sharpened by ``prior_temperature``) as per-example
    priors. Each label is randomized once, in one stage, so the stages
    compose in parallel and the total is ``epsilon``. Stage t trains on its
    own noisy labels and on the earlier stages' noisy labels that lie in
    the previous model's top-k (k the rounded average k of stage t).

    Parameters
    ----------
    base_estimator : estimator
        Any scikit-learn classifier; multi-stage training needs
        ``predict_proba``. It is trained on class codes ``0 .. K-1``.
    mechanism : {'rr-with-prior', 'rr-top-k', 'rr'} or mechanism instance, \
            default='rr-with-prior'
        Label mechanism (a registered classification name, or an instance,
        which is cloned and given this estimator's ``epsilon``).
    epsilon : float, default=1.0
        Total privacy cost of one label per fit.
    n_stages : int, default=1
        Number of training stages.
    stage_split : None, float or sequence of float, default=None
        Shares of the examples per stage: ``None`` equal shares, a float the
        first stage's share (the rest split equally), or one share per stage.
    prior_temperature : float, default=1.0
        Temperature T of the learned priors: ``p ** (1 / T)`` renormalised
        (T < 1 sharpens, 004 App. E).
    classes : array-like
        The public list of classes. Required: the set of classes present in
        the labels is itself a statistic of the private labels.
    prior : {'uniform', 'clusters'}, default='uniform'
        Prior of the first stage. ``'clusters'`` runs k-means on the
        (public) features and spends ``prior_epsilon`` on a discrete-Laplace
        class histogram per cluster (004, Alg. 4); the labels then get
        ``epsilon - prior_epsilon``.
    n_clusters : int, default=20
        Clusters for ``prior='clusters'``.
    prior_epsilon : 'auto' or float, default='auto'
        Budget of the cluster histograms (less than ``epsilon``).
        ``'auto'``: ``sqrt(n_clusters * n_classes / n)``, at most half of
        ``epsilon`` (see :meth:`prior_budget`, readable before fit).
    reuse_labels : bool, default=True
        Whether later stages also train on earlier stages' filtered labels.
    accountant : BudgetAccountant, optional
        Charged with every release; shared by clones, so model selection is
        accounted.
    random_state : None or int, default=None
        Source of the label noise, the stage split and the clusters.
        ``None`` (the default, and the only private choice) draws fresh OS
        entropy for every fit and keeps none of it. An int makes fits
        reproducible (streams derived from the seed and the features) and emits :class:`~skdp_label.utils.PrivacyLeakWarning`.
        Generators are refused.

    Attributes
    ----------
    classes_ : ndarray of shape (n_classes,)
    estimator_ : estimator
        The last stage's base estimator.
    mechanism_ : label mechanism
        The last stage's mechanism; ``mechanisms_`` lists all stages'.
    epsilon_spent_ : float
        Epsilon spent per label by this object, cumulative over its fits
        (within a fit: prior plus stages, which compose in parallel).
    prior_epsilon_ : float
        Epsilon spent on the cluster prior (0 if none).
    stage_sizes_ : list of int
        Examples randomized in each stage.
    stage_k_ : list of float
        Average size of the top-k sets in each stage.
    stage_train_sizes_ : list of int
        Examples each stage's model was trained on (own plus reused).
    n_features_in_ : int

    Examples
    --------
    >>> from sklearn.datasets import load_digits
    >>> from sklearn.linear_model import LogisticRegression
    >>> from skdp_label import BudgetAccountant, LabelDPClassifier
    >>> X, y = load_digits(return_X_y=True)
    >>> acc = BudgetAccountant(epsilon=2.0)
    >>> clf = LabelDPClassifier(LogisticRegression(max_iter=200), epsilon=2.0, n_stages=2, classes=range(10),
    ...                         accountant=acc, random_state=0).fit(X / 16, y)
    >>> clf.classes_.tolist()
    [0, 1, 2, 3, 4, 5, 6, 7, 8, 9]
    >>> acc.spent_epsilon, clf.epsilon_spent_
    (2.0, 2.0)
    >>> bool(clf.stage_k_[1] < clf.stage_k_[0])  # stage 2 narrows the candidates
    True
    """

    _task = "classification"

    _parameter_constraints = {
        **BaseLabelDPEstimator._parameter_constraints,
        "n_stages": [Interval(Integral, 1, None, closed="left")],
        "stage_split": [Interval(Real, 0, 1, closed="neither"), "array-like", None],
        "prior_temperature": [Interval(Real, 0, None, closed="neither")],
        "classes": ["array-like", None],
        "prior": [StrOptions({"uniform", "clusters"})],
        "n_clusters": [Interval(Integral, 1, None, closed="left")],
        "prior_epsilon": [StrOptions({"auto"}), Interval(Real, 0, None, closed="neither")],
        "reuse_labels": ["boolean"],
    }

    def __init__(
        self,
        base_estimator,
        mechanism="rr-with-prior",
        epsilon=1.0,
        *,
        n_stages=1,
        stage_split=None,
        prior_temperature=1.0,
        classes=None,
        prior="uniform",
        n_clusters=20,
        prior_epsilon="auto",
        reuse_labels=True,
        accountant=None,
        random_state=None,
    ):
        self.base_estimator = base_estimator
        self.mechanism = mechanism
        self.epsilon = epsilon
        self.n_stages = n_stages
        self.stage_split = stage_split
        self.prior_temperature = prior_temperature
        self.classes = classes
        self.prior = prior
        self.n_clusters = n_clusters
        self.prior_epsilon = prior_epsilon
        self.reuse_labels = reuse_labels
        self.accountant = accountant
        self.random_state = random_state

    # -- helpers ---------------------------------------------------------------
    def _all_classes(self, model, proba):
        """Probabilities over all classes (classes the model never saw get 0)."""
        out = np.zeros((proba.shape[0], self.classes_.shape[0]))
        out[:, np.asarray(model.classes_, dtype=np.int64)] = proba
        return out

    def _proba(self, model, X):
        return self._all_classes(model, model.predict_proba(X))

    def _reusable(self, model, X, earlier, noisy_codes, ks):
        """Earlier stages' rows whose noisy label is in the previous model's
        top k, k the rounded mean k of the current stage (004 App. B)."""
        k = max(int(round(ks.mean())), 1)
        proba = self._proba(model, _safe_indexing(X, earlier))
        return earlier[in_top_k(proba, noisy_codes[earlier], k)]

    def _validate_targets(self, y):
        y = column_or_1d(y, warn=True)
        check_classification_targets(y)
        # The classes are a public input: the set of classes present in the
        # private labels is a label statistic and is never read off them.
        classes = check_classes(self.classes, owner=type(self).__name__)
        return y, classes, encode_classes(y, classes)

    def prior_budget(self, n_samples):
        """``(epsilon_prior, epsilon_labels)`` a fit on ``n_samples`` rows spends.

        Public (``epsilon``, ``n``, ``n_clusters``, ``classes``), so it can be
        read before anything is spent. ``epsilon_prior`` is 0 unless
        ``prior='clusters'``.

        Parameters
        ----------
        n_samples : int

        Returns
        -------
        epsilon_prior, epsilon_labels : float
        """
        eps_prior = self._check_budget_split(int(n_samples))
        return eps_prior, float(self.epsilon) - eps_prior

    def _check_budget_split(self, n_samples):
        if self.prior != "clusters":
            return 0.0
        if self.prior_epsilon == "auto":
            n_classes = len(check_classes(self.classes, owner=type(self).__name__))
            return cluster_prior_epsilon(self.epsilon, n_samples, self.n_clusters, n_classes)
        if not self.prior_epsilon < self.epsilon:
            raise ValueError(
                f"prior_epsilon={public_repr(self.prior_epsilon)} must be less than "
                f"epsilon={public_repr(self.epsilon)}."
            )
        return float(self.prior_epsilon)

    # -- fit -----------------------------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X, y, **fit_params):
        """Randomize each label once (charging ``epsilon``) and train.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
            Public features.
        y : array-like of shape (n_samples,)
            Private labels.
        **fit_params : dict
            Passed to ``base_estimator.fit`` (through metadata routing when
            it is enabled), restricted to each stage's rows.

        Returns
        -------
        self : object
        """
        # Everything that can fail is checked before any budget is spent.
        routed = self._check_inputs_before_spending(X, y, fit_params)
        if sp.issparse(X):
            X = X.tocsr()  # stages index rows
        elif not hasattr(X, "iloc"):
            X = np.asarray(X)
        y, classes, codes = self._validate_targets(y)
        self.classes_ = classes
        eps_prior = self._check_budget_split(codes.shape[0])
        eps_labels = float(self.epsilon) - eps_prior
        context = self._fit_context(X)
        # Local to this fit: the stage split, the clusters and their noisy
        # histograms. Never stored.
        rng = self._fit_generator(context)
        accountant = self.accountant
        if accountant is None and not isinstance(self.mechanism, str):
            accountant = getattr(self.mechanism, "accountant", None)
        n_stages = int(self.n_stages)
        parts = partition_stages(codes.shape[0], stage_fractions(n_stages, self.stage_split), rng)
        # The stages' mechanisms never charge the accountant themselves: this
        # estimator charges them as one disjoint group.
        mechanisms = [
            self._build_mechanism(
                eps_labels, derive_random_state(self.random_state, context + (stage + 1,)), None,
                classes=classes,
            ).set_params(accountant=None)
            for stage in range(n_stages)
        ]
        for stage, mech in enumerate(mechanisms):
            mech._ledger_context["stage"] = stage + 1
        needs_priors = n_stages > 1 or self.prior == "clusters"
        if needs_priors and not hasattr(mechanisms[0], "randomize"):
            raise ValueError(
                f"{type(mechanisms[0]).__name__} takes no per-example priors; multi-stage training "
                "and prior='clusters' need mechanism='rr-with-prior' or 'rr-top-k'."
            )
        if n_stages > 1 and not hasattr(self.base_estimator, "predict_proba"):
            raise ValueError("multi-stage training needs a base_estimator with predict_proba.")
        for mech in mechanisms:
            mech.fit(y[:1])  # validates the mechanism's public inputs, spends nothing
        stage_costs = [mech._total_cost() for mech in mechanisms]
        if accountant is not None:
            accountant.check(eps_prior + max(c[0] for c in stage_costs), max(c[1] for c in stage_costs))
        priors = None
        if self.prior == "clusters":
            cluster_of, n_clusters = feature_clusters(X, self.n_clusters, rng)  # public: free
            if accountant is not None:
                accountant.spend(
                    eps_prior, n_labels=codes.shape[0],
                    description=f"{type(self).__name__}: cluster prior histograms",
                    details={"estimator": type(self).__name__, "step": "cluster prior histograms"},
                )
            priors, self.cluster_histograms_ = cluster_priors(
                cluster_of, n_clusters, codes, classes.shape[0], eps_prior, rng
            )
        group = None
        if accountant is not None and n_stages > 1:
            group = accountant.disjoint_group(type(self).__name__)

        noisy_codes = np.full(codes.shape[0], -1, dtype=np.int64)
        model = None
        self.stage_k_, self.stage_train_sizes_ = [], []
        for stage, (rows, mech, cost) in enumerate(zip(parts, mechanisms, stage_costs)):
            X_rows = _safe_indexing(X, rows)
            if model is not None:
                stage_priors = temper(self._proba(model, X_rows), self.prior_temperature)
            else:
                stage_priors = None if priors is None else priors[rows]
            if accountant is not None:
                accountant.spend(
                    cost[0], cost[1], n_labels=rows.shape[0], group=group,
                    description=f"{type(self).__name__} stage {stage + 1}: {type(mech).__name__}",
                    details={"estimator": type(self).__name__, "mechanism": type(mech).__name__,
                             "step": "randomized labels", "stage": stage + 1},
                )
            mech.fit(y[rows])
            if stage_priors is None:
                noisy = mech.transform(y[rows])
                ks = np.full(rows.shape[0], getattr(mech, "k_", classes.shape[0]))
            else:
                noisy = mech.randomize(y[rows], stage_priors)
                ks = mech.choose_k(stage_priors)
            noisy_codes[rows] = encode_classes(noisy, classes)
            self.stage_k_.append(float(ks.mean()))
            train = rows
            if stage > 0 and self.reuse_labels:
                earlier = np.concatenate(parts[:stage])
                train = np.concatenate([self._reusable(model, X, earlier, noisy_codes, ks), rows])
            model = self._fit_base(
                _safe_indexing(X, train), noisy_codes[train], _check_method_params(X, routed, train)
            )
            self.stage_train_sizes_.append(int(train.shape[0]))

        self.estimator_ = model
        self.mechanisms_ = mechanisms
        self.mechanism_ = mechanisms[-1]
        self.prior_epsilon_ = eps_prior
        # Stages compose in parallel (disjoint rows); refits add up.
        self.epsilon_spent_ = getattr(self, "epsilon_spent_", 0.0) + eps_prior + max(
            float(m.epsilon_spent_) for m in mechanisms
        )
        self.stage_sizes_ = [int(r.shape[0]) for r in parts]
        return self

    def _report_parts(self):
        extra = []
        if self.prior_epsilon_ > 0:
            extra.append({
                "stage": None, "step": "cluster prior histograms", "epsilon": self.prior_epsilon_,
                "delta": 0.0, "n_labels": int(sum(self.stage_sizes_)),
            })
        # Stages randomize disjoint rows: they compose in parallel.
        return self.mechanisms_, extra, True

    # -- prediction -------------------------------------------------------------------
    def predict(self, X, **predict_params):
        """Predicted classes.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        **predict_params : dict
            Passed to ``estimator_.predict``.

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        codes = self._delegate("predict", X, predict_params)
        return self.classes_[np.asarray(codes, dtype=np.int64)]

    @available_if(_base_has("predict_proba"))
    def predict_proba(self, X, **predict_proba_params):
        """Class probabilities of the fitted base estimator.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        **predict_proba_params : dict
            Passed to ``estimator_.predict_proba``.

        Returns
        -------
        proba : ndarray of shape (n_samples, n_classes)
            Columns follow ``classes_``.
        """
        proba = self._delegate("predict_proba", X, predict_proba_params)
        return self._all_classes(self.estimator_, proba)

    def score(self, X, y, sample_weight=None):
        """Accuracy of the fitted model on labels ``y``.

        Scoring on true labels is not covered by the privacy guarantee (a
        :class:`~skdp_label.utils.PrivacyLeakWarning` says so once per
        estimator); to select models privately, score on noisy labels with
        :func:`~skdp_label.estimators.debiased_accuracy_scorer`.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        sample_weight : array-like of shape (n_samples,), optional

        Returns
        -------
        score : float
        """
        self._warn_true_label_scoring()
        return super().score(X, y, sample_weight=sample_weight)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.classifier_tags.poor_score = True
        tags.classifier_tags.multi_class = True
        return tags
