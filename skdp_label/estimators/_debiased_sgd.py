"""LP-RR-SGD (004, App. F, Alg. 5): a softmax classifier trained by SGD on
unbiased gradients from randomized-response labels."""

from __future__ import annotations

from numbers import Integral, Real
from typing import Any, Self

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassifierMixin, _fit_context
from sklearn.utils.multiclass import check_classification_targets
from sklearn.utils.validation import (
    check_consistent_length,
    check_is_fitted,
    column_or_1d,
    validate_data,
)

from ..mechanisms._validation import NumberInterval, encode_classes
from ..utils._random import (
    check_random_state,
    post_processing_generator,
    random_state_constraint,
)
from ._noise_aware import noise_inverse, softmax

__all__ = ["DebiasedSGDClassifier", "debiased_gradient"]


def debiased_gradient(coef, intercept, X, targets, alpha=0.0):
    """Mean gradient of softmax cross-entropy with debiased targets.

    For one example with logits z = x W + b and target row t (for a clean
    label the one-hot e_y, for a noisy label ỹ the row G[ỹ] of the inverse
    transition), the loss sum_j t_j (logsumexp(z) - z_j) has gradient
    x^T (softmax(z) - t) in W (rows of G sum to 1). It is linear in t, so
    with t = G[ỹ] its expectation over the noise is the clean gradient; for
    randomized response this is 004 eq. (7).

    Parameters
    ----------
    coef : ndarray of shape (n_features, n_classes)
    intercept : ndarray of shape (n_classes,)
    X : ndarray of shape (n_samples, n_features)
    targets : ndarray of shape (n_samples, n_classes)
    alpha : float, default=0.0
        L2 penalty (alpha / 2) ||W||^2.

    Returns
    -------
    grad_coef, grad_intercept : ndarrays
    """
    residual = softmax(X @ coef + intercept) - targets
    n = X.shape[0]
    return X.T @ residual / n + alpha * coef, residual.mean(axis=0)


class DebiasedSGDClassifier(ClassifierMixin, BaseEstimator):
    """Softmax regression trained by SGD on debiased noisy labels (LP-RR-SGD).

    Each noisy label ỹ is replaced by the row G[ỹ] of the inverse of the
    mechanism's transition matrix, an unbiased estimate of the one-hot true
    label, so every stochastic gradient is an unbiased estimate of the
    gradient on the true labels (004, Alg. 5, eq. (7) for randomized
    response, eq. (17) for RR-Top-k). The labels must already be private:
    this estimator spends no budget (post-processing).

    Standalone, pass the fitted mechanism that produced the labels (or its
    transition matrix) as ``noise``. As the ``base_estimator`` of
    :class:`~skdp_label.LabelDPClassifier` it receives per-example debiased
    targets from the meta-estimator (which knows each row's top-k set, also
    with per-example priors and multi-stage training); ``noise`` is then
    left ``None``.

    Parameters
    ----------
    noise : fitted classification mechanism, array of shape (K, K) or None, \
            default=None
        The noise of the labels: a mechanism with a square
        ``transition_matrix_`` (its ``output_values_`` are the classes) or a
        transition matrix (rows: true classes in the order of ``classes``).
        ``None``: the labels are clean (classes from ``classes`` or, if not
        given, from the labels), or targets come through ``fit``'s
        ``noise_targets``.
    classes : array-like of shape (K,), optional
        The classes, for a matrix or ``noise=None``.
    alpha : float, default=1e-4
        L2 penalty.
    eta0 : float, default=0.5
        Step size at step t: ``eta0 / sqrt(t)`` (Theorem 9's schedule).
    batch_size : int, default=32
        Examples per step (the mean of unbiased gradients is unbiased).
    max_iter : int, default=30
        Epochs of ``fit``; ``partial_fit`` makes one.
    max_norm : float, optional
        Radius of the ball W that the weights are projected onto after
        every step (the projection of Alg. 5); ``None``: no projection.
    random_state : None or int, default=None
        Order of the examples in each epoch. The labels are already private,
        so this is not label noise (an int emits no warning). ``None`` draws
        fresh OS entropy for every ``fit`` / ``partial_fit``. Generators are
        refused: nothing that replays a stream is kept in the estimator.

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
    coef_ : ndarray of shape (n_features, K)
    intercept_ : ndarray of shape (K,)
    t_ : int
        SGD steps taken.
    n_iter_ : int
        Epochs run by the last ``fit``.
    n_features_in_ : int

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms import RandomizedResponse
    >>> from skdp_label.estimators import DebiasedSGDClassifier
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(3000, 2))
    >>> y = np.argmax(X @ [[1, -1, 0], [0, 1, -1]], axis=1)  # 3 linearly separable classes
    >>> rr = RandomizedResponse(epsilon=1.0, classes=[0, 1, 2], random_state=0)
    >>> y_noisy = rr.fit_transform(y)  # the only release of y
    >>> clf = DebiasedSGDClassifier(rr, random_state=0).fit(X, y_noisy)
    >>> bool(clf.score(X, y) > 0.8)
    True
    """

    _noise_aware = True

    _parameter_constraints = {
        "noise": ["array-like", None, object],
        "classes": ["array-like", None],
        "alpha": [NumberInterval(Real, 0, None, closed="left")],
        "eta0": [NumberInterval(Real, 0, None, closed="neither")],
        "batch_size": [NumberInterval(Integral, 1, None, closed="left")],
        "max_iter": [NumberInterval(Integral, 1, None, closed="left")],
        "max_norm": [NumberInterval(Real, 0, None, closed="neither"), None],
        # Generators are listed so that fit refuses them with a message that says why.
        "random_state": random_state_constraint(),
    }

    def __init__(self, noise: ArrayLike | Any = None, *, classes: ArrayLike | None = None,
                 alpha: float = 1e-4, eta0: float = 0.5, batch_size: int = 32,
                 max_iter: int = 30, max_norm: float | None = None,
                 random_state: int | None = None) -> None:
        self.noise = noise
        self.classes = classes
        self.alpha = alpha
        self.eta0 = eta0
        self.batch_size = batch_size
        self.max_iter = max_iter
        self.max_norm = max_norm
        self.random_state = random_state

    def _targets(self, y, noise_targets, reset):
        """Debiased target rows for the labels (and ``classes_`` on reset)."""
        y = column_or_1d(y, warn=True)
        if noise_targets is not None:
            targets = np.asarray(noise_targets, dtype=np.float64)
            if targets.ndim != 2 or targets.shape[0] != y.shape[0]:
                raise ValueError("noise_targets must have shape (n_samples, n_classes).")
            if reset:
                self.classes_ = np.arange(targets.shape[1])
            elif targets.shape[1] != self.classes_.shape[0]:
                raise ValueError(f"noise_targets must have {self.classes_.shape[0]} columns.")
            return targets
        check_classification_targets(y)
        if self.noise is None and self.classes is None:
            # Clean (or already private) labels and no declared classes: the
            # labels' own classes, as any scikit-learn classifier.
            classes = np.unique(y)
            inverse = np.eye(classes.shape[0])
        else:
            classes, inverse = noise_inverse(self.noise, self.classes)
        if reset:
            self.classes_ = classes
        return inverse[encode_classes(y, self.classes_)]

    def _epoch(self, X, targets, rng):
        order = rng.permutation(X.shape[0])
        for start in range(0, X.shape[0], self.batch_size):
            batch = order[start:start + self.batch_size]
            self.t_ += 1
            step = self.eta0 / np.sqrt(self.t_)
            g_coef, g_intercept = debiased_gradient(
                self.coef_, self.intercept_, X[batch], targets[batch], self.alpha)
            self.coef_ -= step * g_coef
            self.intercept_ -= step * g_intercept
            if self.max_norm is not None:
                norm = np.sqrt(np.sum(self.coef_**2) + np.sum(self.intercept_**2))
                if norm > self.max_norm:
                    self.coef_ *= self.max_norm / norm
                    self.intercept_ *= self.max_norm / norm

    def _start(self, n_features):
        self.coef_ = np.zeros((n_features, self.classes_.shape[0]))
        self.intercept_ = np.zeros(self.classes_.shape[0])
        self.t_ = 0

    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, X: ArrayLike, y: ArrayLike, noise_targets: ArrayLike | None = None) -> Self:
        """Train from scratch for ``max_iter`` epochs.

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
            Noisy labels (from ``noise``).
        noise_targets : array-like of shape (n_samples, K), optional
            Debiased target rows, given instead of ``noise`` (this is how
            :class:`~skdp_label.LabelDPClassifier` passes per-example noise);
            ``y`` then holds class codes ``0 .. K-1``.

        Returns
        -------
        self : object
        """
        X = validate_data(self, X, reset=True, dtype=np.float64)
        check_consistent_length(X, y)
        targets = self._targets(y, noise_targets, reset=True)
        self._start(X.shape[1])
        rng = self._order_generator()  # local: never stored
        for _ in range(self.max_iter):
            self._epoch(X, targets, rng)
        self.n_iter_ = int(self.max_iter)
        return self

    def partial_fit(
        self, X: ArrayLike, y: ArrayLike, classes: ArrayLike | None = None,
        noise_targets: ArrayLike | None = None,
    ) -> Self:
        """One epoch of SGD on a batch of noisy labels (streaming).

        Parameters
        ----------
        X : array-like of shape (n_samples, n_features)
        y : array-like of shape (n_samples,)
        classes : ignored
            The classes come from ``noise`` (or ``classes``); accepted for
            scikit-learn compatibility.
        noise_targets : array-like of shape (n_samples, K), optional

        Returns
        -------
        self : object
        """
        first = not hasattr(self, "coef_")
        if first:
            self._validate_params()
        rng = self._order_generator()  # local: never stored
        X = validate_data(self, X, reset=first, dtype=np.float64)
        check_consistent_length(X, y)
        targets = self._targets(y, noise_targets, reset=first)
        if first:
            self._start(X.shape[1])
        self._epoch(X, targets, rng)
        return self

    def _order_generator(self):
        """The example order's generator for one call to fit / partial_fit,
        from :mod:`skdp_label.utils._random`; a seeded stream is separated by
        the steps taken so far, so successive ``partial_fit`` calls visit the
        examples in different orders."""
        return post_processing_generator(self.random_state, (getattr(self, "t_", 0),))

    def _validate_params(self):
        super()._validate_params()
        # Also as LabelDPClassifier's base estimator, before anything is spent.
        check_random_state(self.random_state, owner=type(self).__name__)

    def _logits(self, X):
        check_is_fitted(self)
        X = validate_data(self, X, reset=False, dtype=np.float64)
        return X @ self.coef_ + self.intercept_

    def decision_function(self, X: ArrayLike) -> np.ndarray:
        """Logits x W + b, shape (n_samples, K); for two classes the
        difference of the second and first logit (scikit-learn convention)."""
        logits = self._logits(X)
        return logits[:, 1] - logits[:, 0] if logits.shape[1] == 2 else logits

    def predict_proba(self, X: ArrayLike) -> np.ndarray:
        """Softmax of the logits: estimates of P(y | x) for the *true* labels."""
        return softmax(self._logits(X))

    def predict(self, X: ArrayLike) -> np.ndarray:
        """The class of largest probability."""
        codes = np.argmax(self._logits(X), axis=1)
        return self.classes_[codes]
