"""LabelDPClassifier: label-DP training of any classifier, with RRWithPrior
and multi-stage training LP-MST (Ghazi et al. 2021, paper 004)."""

from __future__ import annotations

import warnings
from numbers import Integral, Real
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike
import scipy.sparse as sp
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context, clone
from sklearn.dummy import DummyClassifier
from sklearn.utils import _safe_indexing
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.metaestimators import available_if
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import _check_method_params, check_is_fitted, column_or_1d

from .._accountant import BudgetAccountant
from ..mechanisms._base import BaseLabelMechanism
from ..mechanisms._registry import make_mechanism
from ..mechanisms._validation import (
    MIN_EPSILON,
    EpsilonInterval,
    NumberInterval,
    check_classes,
    encode_classes,
)
from ..mechanisms.classic._randomized_response import RandomizedResponse
from ..mechanisms.classification._rr_top_k import RRTopK, RRWithPrior
from ..mechanisms.classification._solver import temper, top_k_order
from ..utils._random import derive_random_state
from ._base import BaseLabelDPEstimator, unfitted_on_failure
from ._cluster_prior import cluster_prior_epsilon, cluster_priors, feature_clusters, nearest_cluster
from ._majority_guard import (
    GUARD_FOLDS,
    constant_in,
    cross_fitted_accuracies,
    guard_folds,
    pooled_class_prior,
    prefers_constant,
)
from ._multistage import in_top_k, partition_stages, stage_fractions
from ._noise_aware import (
    backward_correct,
    class_prior_epsilon,
    classification_plan,
    debiased_frequencies,
    debiased_targets,
    effective_sample_size,
    histogram_noise_sd,
    robust_top_k,
    sampled_histogram_sd,
    shrinkage_weight,
)
from ..utils._progress import format_epsilon
from ..utils._repr import public_repr
from ..utils._warnings import warn_caller

__all__ = ["LabelDPClassifier"]

# Ledger step of each private prior.
_PRIOR_STEP = {"clusters": "cluster prior histograms", "class-frequencies": "class histogram prior"}


def _is_noise_aware(estimator):
    """Base estimators that train on debiased targets themselves."""
    return bool(getattr(estimator, "_noise_aware", False))


def _is_rr_top_k(mechanism):
    """RR and RR-Top-k: their noise on the top-k set is known in closed form."""
    return isinstance(mechanism, (RandomizedResponse, RRTopK, RRWithPrior))


def _global_mask(mechanism):
    """The top-k set of a mechanism without per-example priors."""
    return np.asarray(mechanism.transition_matrix_).sum(axis=0) > 0


def _masks_from_priors(mechanism, priors):
    """The top-k set of each row for per-example priors (as ``randomize``)."""
    priors = np.asarray(priors, dtype=np.float64)
    order = top_k_order(priors)
    ks = mechanism.choose_k(priors)
    masks = np.zeros(priors.shape, dtype=bool)
    rank_in_set = np.arange(priors.shape[1])[None, :] < ks[:, None]
    masks[np.arange(priors.shape[0])[:, None], order] = rank_in_set
    return masks


class _ChargedRelease:
    """A release the estimator charged itself, as :func:`mechanism_report` reads it."""

    #: What the report calls the release when it is the last one (no mechanism ran after it).
    report_name = "class histogram: constant model"

    def __init__(self, charges):
        self.charges_ = charges

    def get_params(self, deep=False):
        return {}


def _num_rows(X):
    return X.shape[0] if hasattr(X, "shape") else len(X)


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
    mechanism : {'rr-with-prior', 'rr-top-k', 'rr', 'auto'} or mechanism instance, \
            default='rr-with-prior'
        Label mechanism (a registered classification name, or an instance
        of one, which is cloned and given this estimator's ``epsilon``; its
        ``classes``, if set, must be ``classes``, in order). ``'auto'``
        follows the documented rule (docs/classification.md): plain
        randomized response when a prior cannot pay for itself (decided from
        epsilon, n and K before spending), else a private class histogram of
        a public random subset of the rows at the full epsilon (share
        ``w / (1 - w) = sqrt(K - 1) / (K s sqrt(n))``, s the RR signal; see
        :meth:`fit_plan`) and RR-Top-k at the full epsilon on the other
        rows, on the histogram's top k classes, k chosen from the noisy
        histogram on evidence only (k = K on balanced classes; k = 1: the
        other rows go to a second histogram and the model is its top
        class); see ``plan_``.
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
    prior : {'uniform', 'clusters', 'class-frequencies'}, default='uniform'
        Prior of the first stage. ``'clusters'`` runs k-means on the
        (public) features and spends ``prior_epsilon`` on a discrete-Laplace
        class histogram per cluster (004, Alg. 4); ``'class-frequencies'``
        spends it on one histogram of all the labels. The labels then get
        ``epsilon - prior_epsilon``.
    n_clusters : int, default=20
        Clusters for ``prior='clusters'``.
    prior_epsilon : 'auto' or float, default='auto'
        Budget of the prior histograms (less than ``epsilon``). ``'auto'``
        (000's rule on the histograms' cells, at most half of ``epsilon``):
        ``sqrt(n_clusters * K / n)`` for ``'clusters'``, ``sqrt(K / n)`` for
        ``'class-frequencies'`` (see :meth:`prior_budget`, readable before fit).
    reuse_labels : bool, default=True
        Whether later stages also train on earlier stages' filtered labels.
    proba_correction : {'backward'} or None, default='backward'
        ``'backward'``: ``predict_proba`` maps the base estimator's
        probabilities of the noisy labels to probabilities of the true labels
        through the known transition of the last stage, on each row's top-k
        set (the set the row's prior gives: global for a uniform or public
        prior, per cluster, or from the previous stage's model), then projects
        onto the simplex; ``predict`` is their argmax. Free post-processing.
        Ignored for base estimators without ``predict_proba`` and for
        noise-aware ones (they model the true labels already).
    shrinkage : 'auto', float in [0, 1] or None, default=None
        Weight of the class prior in the corrected probabilities (needs
        ``proba_correction``). The prior is the private class histogram of
        the ``'clusters'`` / ``'class-frequencies'`` priors, else the debiased
        class frequencies of the first stage's noisy labels (free). ``'auto'``:
        K^2 / (K^2 + n_e), n_e the effective number of clean labels behind the
        model (docs/classification.md).
    majority_guard : 'auto' or bool, default='auto'
        Guard toward the trivial predictor (free post-processing of the noisy
        labels): 3-fold cross-fitting on the noisy labels (folds from the
        public features only) estimates, without bias, the held-out accuracy
        of the model and of the constant predictor (the majority class of
        the private class histogram, else of the debiased noisy labels)
        through the known transition of each row; when the model does not
        beat the constant by more than one standard error of the estimated
        difference, ``predict`` returns the constant class and
        ``predict_proba`` the class prior. Costs 3 extra fits of
        ``base_estimator``. ``'auto'``: on for ``mechanism='auto'``, off
        otherwise. Needs one stage and RR-Top-k noise on one set for all
        rows (no ``prior='clusters'``).
    param_grid : dict or list of dicts, optional
        Parameters of ``base_estimator`` to choose by ``GridSearchCV`` on the
        noisy labels with :func:`~skdp_label.estimators.debiased_accuracy_scorer`
        of the fitted mechanism (no true label, no extra budget), then refit
        on all noisy labels. One stage and a uniform prior only.
    cv : int, cross-validation generator or iterable, optional
        Splitting of the noisy labels for ``param_grid`` (``GridSearchCV``'s).
    accountant : BudgetAccountant, optional
        Charged with every release; shared by clones, so model selection is
        accounted.
    random_state : None or int, default=None
        Source of the label noise, the stage split and the clusters.
        ``None`` (the default, and the only private choice) draws fresh OS
        entropy for every fit and keeps none of it. An int makes fits
        reproducible (streams derived from the seed and the features) and emits :class:`~skdp_label.utils.PrivacyLeakWarning`.
        Generators are refused.
    verbose : int, default=0
        Print epsilon per step, stage sizes and timings (public facts only;
        never labels or seeds), with a progress bar over the stages (if
        tqdm is installed). 0 is silent.

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
        Epsilon spent on the prior histograms (0 if none). With
        ``mechanism='auto'`` the histogram has rows of its own
        (``histogram_sizes_``), so this is ``epsilon``, in parallel with the
        labels.
    histogram_sizes_ : list of int
        Rows of each prior histogram release (``'auto'``: its own rows, and
        the other rows' second histogram when k = 1).
    plan_ : dict
        The mechanism, prior, prior budget and stages used (what
        ``mechanism='auto'`` chose; with its class histogram, also
        ``histogram_rows`` and ``k``, the size of the top-k set chosen from
        it).
    cluster_histograms_ : ndarray of shape (n_clusters, n_classes) or None
        The private prior histograms (epsilon-DP; one row for
        ``'class-frequencies'``).
    cluster_centers_ : FeatureClusters or None
        k-means centres of the standardised public features, with their mean
        and scale (``prior='clusters'``).
    class_prior_ : ndarray of shape (n_classes,) or None
        Debiased class frequencies of the noisy labels (when ``shrinkage``
        is set and there is no prior histogram).
    shrinkage_ : float
        Weight of the class prior in ``predict_proba``.
    majority_guard_ : dict or None
        The guard's cross-fitted estimates from the noisy labels:
        ``model_accuracy``, ``constant_accuracy``, ``difference_se`` (standard
        error of their difference), ``n_folds`` and ``choice`` (``'model'`` or
        ``'constant'``); None when the guard is off.
    constant_prior_ : ndarray of shape (n_classes,) or None
        With the guard and a class histogram: the constant's class prior,
        the histogram pooled with the noisy labels' debiased frequencies by
        inverse variance (post-processing of the two charged releases;
        :func:`~skdp_label.estimators._majority_guard.pooled_class_prior`).
        What ``predict_proba`` returns when the guard chose the constant.
    prior_estimator_ : estimator or None
        The previous stage's model (multi-stage training with
        ``proba_correction``): its priors give the last stage's top-k sets.
    stage_sizes_ : list of int
        Examples randomized in each stage.
    stage_k_ : list of float
        Average size of the top-k sets in each stage.
    stage_train_sizes_ : list of int
        Examples each stage's model was trained on (own plus reused).
    best_params_ : dict or None
        Parameters chosen in ``param_grid`` (None without one).
    cv_results_ : dict or None
        ``GridSearchCV.cv_results_`` of that choice: scores on noisy labels.
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
        "n_stages": [NumberInterval(Integral, 1, None, closed="left")],
        "stage_split": [NumberInterval(Real, 0, 1, closed="neither"), "array-like", None],
        "prior_temperature": [NumberInterval(Real, 0, None, closed="neither")],
        "classes": ["array-like", None],
        "prior": [StrOptions({"uniform", "clusters", "class-frequencies"})],
        "n_clusters": [NumberInterval(Integral, 1, None, closed="left")],
        "prior_epsilon": [StrOptions({"auto"}), EpsilonInterval()],
        "reuse_labels": ["boolean"],
        "proba_correction": [StrOptions({"backward"}), None],
        "shrinkage": [StrOptions({"auto"}), NumberInterval(Real, 0, 1, closed="both"), None],
        "majority_guard": [StrOptions({"auto"}), "boolean"],
    }

    def __init__(
        self,
        base_estimator: BaseEstimator,
        mechanism: str | BaseLabelMechanism = "rr-with-prior",
        epsilon: float = 1.0,
        *,
        n_stages: int = 1,
        stage_split: float | ArrayLike | None = None,
        prior_temperature: float = 1.0,
        classes: ArrayLike | None = None,
        prior: str = "uniform",
        n_clusters: int = 20,
        prior_epsilon: float | str = "auto",
        reuse_labels: bool = True,
        proba_correction: str | None = "backward",
        shrinkage: float | str | None = None,
        majority_guard: bool | str = "auto",
        param_grid: dict | list | None = None,
        cv: int | Any = None,
        accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
        verbose: int = 0,
    ) -> None:
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
        self.proba_correction = proba_correction
        self.shrinkage = shrinkage
        self.majority_guard = majority_guard
        self.param_grid = param_grid
        self.cv = cv
        self.accountant = accountant
        self.random_state = random_state
        self.verbose = verbose

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
        top k, k the rounded mean k of the current stage (004 App. B), and
        that top-k set of each kept row."""
        k = max(int(round(ks.mean())), 1)
        proba = self._proba(model, _safe_indexing(X, earlier))
        keep = in_top_k(proba, noisy_codes[earlier], k)
        sets = np.zeros(proba.shape, dtype=bool)
        np.put_along_axis(sets, top_k_order(proba)[:, :k], True, axis=1)
        return earlier[keep], sets[keep]

    def _validate_targets(self, y):
        y = column_or_1d(y, warn=True)
        with warnings.catch_warnings():
            # scikit-learn warns when more than half of the rows hold distinct
            # classes: a count of the classes present in the private labels.
            warnings.filterwarnings("ignore", "The number of unique classes", UserWarning)
            check_classification_targets(y)
        # The classes are a public input: the set of classes present in the
        # private labels is a label statistic and is never read off them.
        classes = check_classes(self.classes, owner=type(self).__name__)
        return y, classes, encode_classes(y, classes)

    def prior_budget(self, n_samples: int) -> tuple[float, float]:
        """``(epsilon_prior, epsilon_labels)`` a fit on ``n_samples`` rows spends.

        Public (``epsilon``, ``n``, ``n_clusters``, ``classes``, ``mechanism``),
        so it can be read before anything is spent. ``epsilon_prior`` is 0 for
        the uniform prior. With ``mechanism='auto'`` the class histogram has
        rows of its own (:meth:`fit_plan` says how many), so both are
        ``epsilon``, on disjoint rows.

        Parameters
        ----------
        n_samples : int

        Returns
        -------
        epsilon_prior, epsilon_labels : float
        """
        plan = self.fit_plan(n_samples)
        eps_prior = plan["prior_epsilon"]
        if plan.get("histogram_rows"):
            return eps_prior, float(self.epsilon)
        return eps_prior, float(self.epsilon) - eps_prior

    def fit_plan(self, n_samples: int) -> dict:
        """What a fit on ``n_samples`` rows will spend, before anything is spent.

        Public inputs only. ``mechanism='auto'``: ``histogram_rows`` rows
        (a public random subset) give a class histogram at the full epsilon
        and the others are randomized (docs/classification.md, section 4);
        the size k of the top-k set is chosen after the histogram is
        charged (``plan_['k']``).

        Parameters
        ----------
        n_samples : int

        Returns
        -------
        plan : dict
            ``mechanism``, ``prior``, ``prior_epsilon``, ``n_stages`` (and
            ``histogram_rows`` for ``'auto'``).
        """
        n_classes = len(check_classes(self.classes, owner=type(self).__name__))
        return dict(self._plan(int(n_samples), n_classes))

    def _plan(self, n_samples, n_classes):
        """Mechanism, prior, prior budget and stages of this fit (public).

        ``mechanism='auto'`` takes them from :func:`classification_plan`
        (public inputs only); otherwise they are the parameters.
        """
        if self.mechanism == "auto":
            if self.prior != "uniform" or self.n_stages != 1:
                raise ValueError(
                    "mechanism='auto' chooses the prior and the number of stages itself; leave "
                    "prior and n_stages at their defaults, or name a mechanism to set them."
                )
            return classification_plan(float(self.epsilon), n_samples, n_classes)
        eps_prior = 0.0
        if self.prior != "uniform":
            eps_prior = self.prior_epsilon
            if eps_prior == "auto" and self.prior == "clusters":
                eps_prior = cluster_prior_epsilon(
                    float(self.epsilon), n_samples, self.n_clusters, n_classes
                )
            elif eps_prior == "auto":
                eps_prior = class_prior_epsilon(float(self.epsilon), n_samples, n_classes)
            if not eps_prior < self.epsilon:
                raise ValueError(
                    f"prior_epsilon={public_repr(self.prior_epsilon)} must be less than "
                    f"epsilon={public_repr(self.epsilon)}."
                )
            if not float(self.epsilon) - float(eps_prior) >= MIN_EPSILON:
                # Else the labels' mechanism refuses its epsilon, naming a budget the
                # caller never gave.
                raise ValueError(
                    f"{type(self).__name__}: epsilon={public_repr(self.epsilon)} less the "
                    f"prior's {float(eps_prior):.3g} leaves the labels "
                    f"{float(self.epsilon) - float(eps_prior):.3g}, below {MIN_EPSILON:g}, the "
                    "smallest epsilon a mechanism takes; use prior='uniform', a smaller "
                    "prior_epsilon or a larger epsilon."
                )
        return {"mechanism": self.mechanism, "prior": self.prior,
                "prior_epsilon": float(eps_prior), "n_stages": int(self.n_stages)}

    def _make_mechanism(self, plan, epsilon, random_state, classes):
        if self.mechanism != "auto":
            # An instance's own classes must be the declared ones, in their order (checked
            # by _build_mechanism): the codes, masks and probability columns follow it.
            mech = self._build_mechanism(epsilon, random_state, None, classes=classes)
            if "classes" not in mech.get_params(deep=False):
                # Its outputs would not be classes: found after the charge.
                raise ValueError(
                    f"LabelDPClassifier needs a classification mechanism (one that takes "
                    f"classes: 'rr', 'rr-top-k', 'rr-with-prior'); got {type(mech).__name__}."
                )
            return mech
        mech = make_mechanism(plan["mechanism"], task=self._task, epsilon=epsilon,
                              random_state=random_state, classes=classes)
        mech._ledger_context = {"estimator": type(self).__name__}
        return mech

    def _check_noise_options(self, mechanisms):
        """The correction options need the noise to be RR-Top-k (known T)."""
        uses_noise = (self.proba_correction is not None or self.shrinkage is not None
                      or _is_noise_aware(self.base_estimator))
        if self.shrinkage is not None:
            if self.proba_correction is None:
                raise ValueError("shrinkage acts on corrected probabilities: it needs "
                                 "proba_correction='backward'.")
            if not hasattr(self.base_estimator, "predict_proba"):
                raise ValueError("shrinkage needs a base_estimator with predict_proba.")
        if self._guards():
            if self.n_stages != 1 or self.prior == "clusters":
                raise ValueError(
                    "majority_guard needs one stage and one noise set for all rows: set "
                    "n_stages=1 and a prior other than 'clusters', or majority_guard=False."
                )
            uses_noise = True
        if uses_noise:
            for mech in mechanisms:
                if not _is_rr_top_k(mech):
                    raise ValueError(
                        f"{type(mech).__name__}'s transition is not RR-Top-k: proba_correction, "
                        "shrinkage, majority_guard and noise-aware base estimators need mechanism "
                        "'rr', 'rr-top-k' or 'rr-with-prior' (or set proba_correction=None, "
                        "majority_guard=False)."
                    )

    def _stage_masks(self, mech, priors, n_rows):
        """The top-k set each row of a stage is randomized on (public: from the
        priors, which never depend on the row's own label)."""
        n_classes = self.classes_.shape[0]
        if priors is None:
            return np.broadcast_to(_global_mask(mech), (n_rows, n_classes))
        return _masks_from_priors(mech, priors)

    def _fit_model(self, X, codes, targets, fit_params, mechanism, cv):
        """Fit a clone of the base estimator on noisy codes.

        Noise-aware base estimators also get the debiased targets (rows of
        the inverse transition, 004 eq. (7)/(17)); if the noisy labels hold
        a single class (e.g. RRWithPrior chose k = 1), a base estimator
        could not be fitted, and the constant predictor is what the labels say.
        """
        if _is_noise_aware(self.base_estimator):
            estimator = clone(self.base_estimator)
            return estimator.fit(X, codes, noise_targets=targets, **fit_params)
        if np.unique(codes).shape[0] < 2:
            return DummyClassifier(strategy="prior").fit(X, codes)
        return self._fit_base(X, codes, fit_params, mechanism, cv)

    # -- fit -----------------------------------------------------------------------
    @unfitted_on_failure
    @_fit_context(prefer_skip_nested_validation=False)
    def fit(self, X: ArrayLike, y: ArrayLike, **fit_params: Any) -> Self:
        """Randomize each label once (charging ``epsilon``) and train.

        A fit that raises leaves the estimator unfitted; the epsilon it had
        charged before failing is spent, counted in ``epsilon_spent_`` and
        named in a note on the exception.

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
        routed, cv = self._check_inputs_before_spending(X, y, fit_params)
        if isinstance(cv, list) and self._guards():
            # Explicit splits index all the rows; the guard's fold models search subsets.
            raise ValueError(
                f"{type(self).__name__}: cv given as explicit (train, test) splits indexes all "
                "the rows, but the majority guard's fold models search subsets of them; pass "
                "cv as an int or a splitter, or set majority_guard=False."
            )
        if sp.issparse(X):
            X = X.tocsr()  # stages index rows
        elif not hasattr(X, "iloc"):
            X = np.asarray(X)
        y, classes, codes = self._validate_targets(y)
        self.classes_ = classes
        n_classes = classes.shape[0]
        plan = self._plan(codes.shape[0], n_classes)
        eps_prior = plan["prior_epsilon"]
        # mechanism='auto': the histogram has rows of its own (parallel composition),
        # so the labels keep the full epsilon.
        n_histogram = plan.get("histogram_rows", 0)
        eps_labels = float(self.epsilon) if n_histogram else float(self.epsilon) - eps_prior
        context = self._fit_context(X)
        # Local to this fit: the stage split, the clusters and their noisy
        # histograms. Never stored.
        rng = self._fit_generator(context)
        accountant = self.accountant
        if accountant is None and not isinstance(self.mechanism, str):
            accountant = getattr(self.mechanism, "accountant", None)
        n_stages = plan["n_stages"]
        parts = partition_stages(codes.shape[0], stage_fractions(n_stages, self.stage_split), rng)
        histogram_rows = np.arange(0)
        if n_histogram:  # one stage: a public random subset of it gives the histogram
            histogram_rows, parts = parts[0][:n_histogram], [parts[0][n_histogram:]]
        if self.param_grid is not None:  # one stage (_check_model_selection): all the rows,
            parts = [np.sort(parts[0])]  # in the order the search's cv (row indices) refers to
        # The stages' mechanisms never charge the accountant themselves: this
        # estimator charges them as one disjoint group.
        mechanisms = [
            self._make_mechanism(
                plan, eps_labels, derive_random_state(self.random_state, context + (stage + 1,)),
                classes,
            ).set_params(accountant=None)
            for stage in range(n_stages)
        ]
        for stage, mech in enumerate(mechanisms):
            mech._ledger_context["stage"] = stage + 1
        needs_priors = n_stages > 1 or plan["prior"] != "uniform"
        if needs_priors and not hasattr(mechanisms[0], "randomize"):
            raise ValueError(
                f"{type(mechanisms[0]).__name__} takes no per-example priors; multi-stage training "
                "and a prior other than 'uniform' need mechanism='rr-with-prior' or 'rr-top-k'."
            )
        if n_stages > 1 and not hasattr(self.base_estimator, "predict_proba"):
            raise ValueError("multi-stage training needs a base_estimator with predict_proba.")
        for mech in mechanisms:
            mech.fit(y[:1])  # validates the mechanism's public inputs, spends nothing
        self._check_noise_options(mechanisms)
        stage_costs = [mech._total_cost() for mech in mechanisms]
        eps_stages = max(c[0] for c in stage_costs)
        eps_total = max(eps_prior, eps_stages) if n_histogram else eps_prior + eps_stages
        if accountant is not None:
            accountant.check(eps_total, max(c[1] for c in stage_costs))
        progress = self._progress()
        progress(
            f"{n_stages} stage(s) of {[int(r.shape[0]) for r in parts]} examples, "
            f"{type(mechanisms[0]).__name__} at epsilon {format_epsilon(eps_labels)} per label"
        )
        priors = None
        self.cluster_centers_ = self.cluster_histograms_ = None
        self.histogram_sizes_ = []
        stages_charged = []

        def charged():  # stages (and the histogram's own rows) compose in parallel
            eps_histogram = eps_prior if self.histogram_sizes_ else 0.0
            eps_stages = max(stages_charged, default=0.0)
            return (max(eps_histogram, eps_stages) if n_histogram
                    else eps_histogram + eps_stages)

        self._attempt.charged = charged
        group = None
        if accountant is not None and (n_stages > 1 or n_histogram):
            group = accountant.disjoint_group(type(self).__name__)
        if plan["prior"] != "uniform":
            if plan["prior"] == "clusters":
                cluster_of, centers = feature_clusters(X, self.n_clusters)  # public: free
            else:  # one histogram of all the labels (or of the histogram's own rows)
                cluster_of, centers = np.zeros(codes.shape[0], dtype=np.int64), None
            prior_rows = histogram_rows if n_histogram else np.arange(codes.shape[0])
            # On all rows the histogram composes sequentially with the labels; only on
            # rows of its own ('auto') does it join their disjoint group.
            self._charge_histogram(accountant, eps_prior, prior_rows.shape[0], plan["prior"],
                                   group if n_histogram else None)
            n_clusters = 1 if centers is None else centers.centers.shape[0]
            priors, self.cluster_histograms_ = cluster_priors(
                cluster_of[prior_rows], n_clusters, codes[prior_rows], n_classes, eps_prior, rng
            )
            if n_histogram:  # every labelled row gets the one histogram
                priors = np.broadcast_to(self.cluster_histograms_[0], (codes.shape[0], n_classes))
            self.cluster_centers_ = centers
            if self.mechanism == "auto":  # step 2 of the rule: k from the charged histogram
                # On rows of its own the histogram also carries their sampling error.
                noise_sd = (sampled_histogram_sd(eps_prior, n_histogram, n_classes)
                            if n_histogram else histogram_noise_sd(eps_prior, codes.shape[0]))
                plan["k"] = robust_top_k(self.cluster_histograms_[0], eps_labels, noise_sd)
                for mech in mechanisms:
                    mech.set_params(k=plan["k"])
                if n_histogram and plan["k"] == 1:
                    # RR-Top-1 labels would all be the top class and carry nothing: the
                    # other rows go to a second histogram (same epsilon, disjoint rows).
                    self._charge_histogram(accountant, eps_prior, parts[0].shape[0],
                                           plan["prior"], group)
                    second = cluster_priors(np.zeros(parts[0].shape[0], dtype=np.int64), 1,
                                            codes[parts[0]], n_classes, eps_prior, rng)[1][0]
                    self.cluster_histograms_ = (
                        (n_histogram * self.cluster_histograms_[0] + parts[0].shape[0] * second)
                        / codes.shape[0])[None, :]
            progress(
                f"cluster prior: noisy class histograms of {n_clusters} clusters, epsilon "
                f"{format_epsilon(eps_prior)}"
                if centers is not None
                else f"class prior: one noisy class histogram, epsilon {format_epsilon(eps_prior)}"
            )

        noisy_codes = np.full(codes.shape[0], -1, dtype=np.int64)
        masks = np.zeros((codes.shape[0], n_classes), dtype=bool)
        model = previous = None
        self.stage_k_, self.stage_train_sizes_ = [], []
        # k = 1 on the histogram's own rows: no label is randomized, the model is its top class.
        constant_only = bool(n_histogram) and plan.get("k") == 1
        stage_plan = [] if constant_only else list(zip(parts, mechanisms, stage_costs))
        stages = progress.stages(enumerate(stage_plan), total=len(stage_plan),
                                 desc=type(self).__name__)
        for stage, (rows, mech, cost) in stages:
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
            stages_charged.append(float(cost[0]))
            mech.fit(y[rows])
            if stage_priors is None:
                noisy = mech.transform(y[rows])
                ks = np.full(rows.shape[0], getattr(mech, "k_", n_classes))
            else:
                noisy = mech.randomize(y[rows], stage_priors)
                ks = mech.choose_k(stage_priors)
            noisy_codes[rows] = encode_classes(noisy, classes)
            if _is_rr_top_k(mech):
                masks[rows] = self._stage_masks(mech, stage_priors, rows.shape[0])
            self.stage_k_.append(float(ks.mean()))
            train = rows
            if stage > 0 and self.reuse_labels:
                earlier = np.concatenate(parts[:stage])
                reused, filter_sets = self._reusable(model, X, earlier, noisy_codes, ks)
                # RR-Top-k on S conditioned on landing in the filter's set F is
                # RR-Top-k on S & F (same epsilon): reused rows are debiased so.
                train = np.concatenate([reused, rows])
                train_masks = np.concatenate([masks[reused] & filter_sets, masks[rows]])
            else:
                train_masks = masks[train]
            targets = None
            if _is_noise_aware(self.base_estimator):
                targets = debiased_targets(noisy_codes[train], train_masks, eps_labels, n_classes)
            with progress.timed(
                f"stage {stage + 1}/{n_stages}: epsilon {format_epsilon(cost[0])} on "
                f"{rows.shape[0]} labels, mean k {self.stage_k_[-1]:.2f}; trained "
                f"{type(self.base_estimator).__name__} on {train.shape[0]} examples"
            ):
                previous, model = model, self._fit_model(
                    _safe_indexing(X, train), noisy_codes[train], targets,
                    _check_method_params(X, routed, train), mech, cv,
                )
            self.stage_train_sizes_.append(int(train.shape[0]))

        if constant_only:
            top = int(np.argmax(self.cluster_histograms_[0]))
            model = DummyClassifier(strategy="prior").fit(X, np.full(codes.shape[0], top))
            self.stage_k_, self.stage_train_sizes_ = [1.0], [0]
        self.estimator_ = model
        self.mechanisms_ = mechanisms
        self.mechanism_ = mechanisms[-1]
        self.prior_epsilon_ = eps_prior
        self.plan_ = dict(plan, mechanism=type(mechanisms[-1]).__name__)
        # The previous stage's model gives the last stage's priors, hence the
        # noise sets that the correction needs at prediction time.
        self.prior_estimator_ = previous if self.proba_correction is not None else None
        self.majority_guard_ = self.constant_prior_ = None
        if self._guards() and not constant_only:
            try:
                self.majority_guard_ = self._guard(
                    X, noisy_codes, masks, eps_labels, routed, mechanisms[0], parts[0], cv)
            except Exception as exc:  # noqa: BLE001 - the budget is spent: keep the release
                warn_caller(
                    f"{type(self).__name__}: the majority guard failed ({type(exc).__name__}); "
                    "the model predicts.",
                    UserWarning,
                )
                self.majority_guard_ = {"model_accuracy": None, "constant_accuracy": None,
                                        "difference_se": None, "n_folds": GUARD_FOLDS,
                                        "choice": "model"}
            if self.cluster_histograms_ is not None:  # the constant of all charged releases
                self.constant_prior_ = pooled_class_prior(
                    self.cluster_histograms_[0], self._histogram_sd(), noisy_codes[parts[0]],
                    masks[parts[0]], eps_labels)
            progress(
                f"majority guard: the {self.majority_guard_['choice']} predicts (cross-fitted "
                "accuracy estimates from the noisy labels)"
            )
        self.class_prior_, self.shrinkage_ = None, 0.0
        if not constant_only:
            self._fit_shrinkage(noisy_codes, masks, parts, train_masks, eps_labels)
        self.stage_sizes_ = [0] if constant_only else [int(r.shape[0]) for r in parts]
        return self

    def _fit_shrinkage(self, noisy_codes, masks, parts, train_masks, eps_labels):
        """The class prior and its weight in predictions (post-processing).

        The prior is the private class histogram when there is one (it is
        epsilon-DP and charged), else the debiased class frequencies of the
        first stage's noisy labels (free). The weight follows
        :func:`shrinkage_weight` from the final model's effective sample size.
        """
        self.class_prior_ = None
        self.shrinkage_ = 0.0
        if self.shrinkage is None and self.majority_guard_ is None:
            return
        if self.cluster_histograms_ is None:
            first = parts[0]
            self.class_prior_ = debiased_frequencies(
                noisy_codes[first], masks[first], eps_labels, self.classes_.shape[0])
        if self.shrinkage is None:
            return
        if self.shrinkage == "auto":
            n_eff = effective_sample_size(train_masks, eps_labels, train_masks.shape[0])
            self.shrinkage_ = shrinkage_weight(n_eff, self.classes_.shape[0])
        else:
            self.shrinkage_ = float(self.shrinkage)

    def _charge_histogram(self, accountant, epsilon, n_labels, prior, group):
        """Charge one prior histogram release (before it is drawn)."""
        if accountant is not None:
            accountant.spend(
                epsilon, n_labels=n_labels, group=group,
                description=f"{type(self).__name__}: {_PRIOR_STEP[prior]}",
                details={"estimator": type(self).__name__, "step": _PRIOR_STEP[prior]},
            )
        self.histogram_sizes_.append(int(n_labels))

    def _guards(self):
        """Whether the majority guard runs (``'auto'``: for mechanism='auto')."""
        if self.majority_guard == "auto":
            return isinstance(self.mechanism, str) and self.mechanism == "auto"
        return bool(self.majority_guard)

    def _model_codes(self, model, X, masks, epsilon):
        """What ``predict`` returns for a model, given each row's noise set
        (without shrinkage)."""
        if (self.proba_correction is not None and hasattr(model, "predict_proba")
                and not _is_noise_aware(model)):
            return np.argmax(backward_correct(self._proba(model, X), masks, epsilon), axis=1)
        return np.asarray(model.predict(X), dtype=np.int64)

    def _guard(self, X, noisy_codes, masks, epsilon, routed, mech, rows, cv):
        """Cross-fitted model vs constant on the noisy labels (free; docs/classification.md).

        The constant is the private histogram's top class when there is one
        (a separate, charged release), else the top class of the debiased
        frequencies of the training folds' noisy labels. Only the two means
        and the standard error of their difference are kept. ``rows`` are the
        randomized rows (not the histogram's own).
        """
        if rows.shape[0] < masks.shape[0]:
            X, routed = _safe_indexing(X, rows), _check_method_params(X, routed, rows)
            noisy_codes, masks = noisy_codes[rows], masks[rows]
        n_samples, n_classes = masks.shape
        if n_samples < 2 * GUARD_FOLDS:  # too few rows to hold any out: keep the model
            return {"model_accuracy": None, "constant_accuracy": None, "difference_se": None,
                    "n_folds": GUARD_FOLDS, "choice": "model"}
        histogram = None if self.cluster_histograms_ is None else self.cluster_histograms_[0]
        noise_aware = _is_noise_aware(self.base_estimator)

        def fit_predict(train, test):
            targets = (debiased_targets(noisy_codes[train], masks[train], epsilon, n_classes)
                       if noise_aware else None)
            model = self._fit_model(_safe_indexing(X, train), noisy_codes[train], targets,
                                    _check_method_params(X, routed, train), mech, cv)
            return self._model_codes(model, _safe_indexing(X, test), masks[test], epsilon)

        def constant_class(train):
            if histogram is not None:  # pooled with the training folds' noisy labels (free)
                return constant_in(pooled_class_prior(
                    histogram, self._histogram_sd(), noisy_codes[train], masks[train], epsilon),
                    masks[train][0])
            return int(np.argmax(debiased_frequencies(
                noisy_codes[train], masks[train], epsilon, n_classes)))

        # The fold fits must not replace the final model's search results.
        kept = getattr(self, "best_params_", None), getattr(self, "cv_results_", None)
        model_acc, constant_acc, se = cross_fitted_accuracies(
            fit_predict, constant_class, noisy_codes, masks, epsilon, guard_folds(X, n_samples),
            routed.get("sample_weight"))
        self.best_params_, self.cv_results_ = kept
        return {"model_accuracy": model_acc, "constant_accuracy": constant_acc,
                "difference_se": se, "n_folds": GUARD_FOLDS,
                "choice": "constant" if prefers_constant(model_acc, constant_acc, se) else "model"}

    def _histogram_sd(self):
        """Standard deviation of one frequency of the class histogram (public): on rows
        of its own ('auto') with their sampling error, else on all rows."""
        eps, rows = self.prior_epsilon_, self.histogram_sizes_[0]
        if self.plan_.get("histogram_rows"):
            return sampled_histogram_sd(eps, rows, self.classes_.shape[0])
        return histogram_noise_sd(eps, rows)

    def _constant_prior(self):
        """The class prior when the guard chose the constant predictor, or when
        'auto' chose k = 1 (no label randomized), else None."""
        if self.plan_.get("histogram_rows") and self.plan_.get("k") == 1:
            return self.cluster_histograms_[0]
        if self.majority_guard_ is None or self.majority_guard_["choice"] != "constant":
            return None
        if self.cluster_histograms_ is not None:
            return self.constant_prior_
        return self.class_prior_

    def _class_priors(self, X):
        """Per-row priors the final stage randomized with (None: uniform)."""
        if self.prior_estimator_ is not None:
            return temper(self._proba(self.prior_estimator_, X), self.prior_temperature)
        if self.cluster_histograms_ is None:
            return None
        if self.cluster_centers_ is None:
            return np.broadcast_to(self.cluster_histograms_[0], (_num_rows(X), len(self.classes_)))
        return self.cluster_histograms_[nearest_cluster(X, self.cluster_centers_)]

    def _report_parts(self):
        if self.plan_.get("histogram_rows"):
            # 'auto': the histograms have rows of their own, in parallel with the labels.
            step = _PRIOR_STEP[self.plan_["prior"]]
            histograms = [_ChargedRelease([{"stage": None, "step": step, "delta": 0.0,
                                            "epsilon": self.prior_epsilon_, "n_labels": n}])
                          for n in self.histogram_sizes_]
            if self.stage_sizes_ == [0]:
                # k = 1: no label was randomized, the model is the pooled histogram's top class.
                return histograms, [], True
            return [*histograms, *self.mechanisms_], [], True
        extra = []
        if self.prior_epsilon_ > 0:
            extra.append({
                "stage": None, "step": _PRIOR_STEP[self.plan_["prior"]], "epsilon": self.prior_epsilon_,
                "delta": 0.0, "n_labels": int(sum(self.stage_sizes_)),
            })
        # Stages randomize disjoint rows: they compose in parallel.
        return self.mechanisms_, extra, True

    # -- prediction -------------------------------------------------------------------
    def _corrects(self):
        """Whether predictions go through the noise correction."""
        return (self.proba_correction is not None or self.shrinkage is not None) and hasattr(
            self.estimator_, "predict_proba")

    def predict(self, X: ArrayLike, **predict_params: Any) -> np.ndarray:
        """Predicted classes.

        The argmax of :meth:`predict_proba` when ``proba_correction`` or
        ``shrinkage`` is set (and the base estimator has ``predict_proba``),
        else the base estimator's prediction.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        **predict_params : dict
            Passed to ``estimator_.predict`` (or ``predict_proba``).

        Returns
        -------
        y_pred : ndarray of shape (n_samples,)
        """
        check_is_fitted(self)
        constant = self._constant_prior()
        if constant is not None:
            codes = np.full(_num_rows(X), np.argmax(constant))
        elif self._corrects():
            codes = np.argmax(self.predict_proba(X, **predict_params), axis=1)
        else:
            codes = self._delegate("predict", X, predict_params)
        return self.classes_[np.asarray(codes, dtype=np.int64)]

    @available_if(_base_has("predict_proba"))
    def predict_proba(self, X: ArrayLike, **predict_proba_params: Any) -> np.ndarray:
        """Class probabilities, corrected for the label noise if asked.

        With ``proba_correction='backward'`` the base estimator's
        probabilities of the *noisy* labels are mapped to probabilities of
        the true labels through the mechanism's transition on each row's
        top-k set (:func:`~skdp_label.estimators.backward_correct`); with
        ``shrinkage``, they are then mixed with the class prior:
        ``(1 - shrinkage_) * p + shrinkage_ * class prior``. A noise-aware
        base estimator already models the true labels and is not corrected.

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
        check_is_fitted(self)
        constant = self._constant_prior()
        if constant is not None:
            return np.tile(constant, (_num_rows(X), 1))
        proba = self._all_classes(
            self.estimator_, self._delegate("predict_proba", X, predict_proba_params))
        if self.proba_correction is not None and not _is_noise_aware(self.estimator_):
            mech = self.mechanism_
            priors = self._class_priors(X)
            masks = _global_mask(mech) if priors is None else _masks_from_priors(mech, priors)
            proba = backward_correct(proba, masks, float(mech.epsilon))
        if self.shrinkage_ > 0:
            if self.cluster_histograms_ is None:
                prior = self.class_prior_
            elif self.cluster_centers_ is None:
                prior = self.cluster_histograms_[0]
            else:
                prior = self.cluster_histograms_[nearest_cluster(X, self.cluster_centers_)]
            proba = (1.0 - self.shrinkage_) * proba + self.shrinkage_ * prior
        return proba

    def score(self, X: ArrayLike, y: ArrayLike, sample_weight: ArrayLike | None = None) -> float:
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
