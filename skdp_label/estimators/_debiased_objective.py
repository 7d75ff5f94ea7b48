"""The debiased loss (004 eq. (17)) as a gradient-boosting objective."""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from ._noise_aware import noise_inverse, softmax

__all__ = ["DebiasedSoftmaxObjective"]


class DebiasedSoftmaxObjective:
    """Multi-class softmax objective on noisy labels, for ``XGBClassifier``.

    The debiased cross-entropy of 004 eq. (17) (and (7) for randomized
    response) with noisy label ỹ is sum_j G[ỹ, j] (logsumexp(z) - z_j),
    G the inverse of the mechanism's transition matrix on its outputs. Since
    E[G[ỹ] | y] = e_y, its gradient in the margins,

        grad = softmax(z) - G[ỹ],

    has the clean gradient as expectation over the label noise. The rows of
    G sum to 1, so its Hessian is the clean one, diag(p) - p p^T, which does
    not depend on the label and is positive semi-definite. Like XGBoost's own
    ``multi:softprob``, the diagonal bound ``2 p (1 - p)`` is used, floored
    at ``min_hessian`` (default 1e-6) so that it stays positive when a
    probability saturates: per example the debiased loss is unbounded below
    (G has negative entries), and a leaf whose summed targets leave the
    simplex drifts linearly; the floor, ``reg_lambda`` and ``max_delta_step``
    bound each step.

    Parameters
    ----------
    noise : fitted classification mechanism or array of shape (K, K)
        What produced the labels (see
        :class:`~skdp_label.estimators.DebiasedSGDClassifier`).
    classes : array-like of shape (K,), optional
        With a matrix: the classes in the order of its rows.
    min_hessian : float, default=1e-6

    Attributes
    ----------
    classes_ : ndarray of shape (K,)
        XGBoost is given class codes ``0 .. K-1`` in this order.

    Examples
    --------
    >>> import numpy as np
    >>> from xgboost import XGBClassifier
    >>> from skdp_label.mechanisms import RandomizedResponse
    >>> from skdp_label.estimators import DebiasedSoftmaxObjective
    >>> rng = np.random.default_rng(0)
    >>> X = rng.normal(size=(2000, 2))
    >>> y = np.argmax(X @ [[1, -1, 0], [0, 1, -1]], axis=1)  # 3 linearly separable classes
    >>> rr = RandomizedResponse(epsilon=1.0, classes=[0, 1, 2], random_state=0)
    >>> y_noisy = rr.fit_transform(y)
    >>> objective = DebiasedSoftmaxObjective(rr)
    >>> model = XGBClassifier(objective=objective, n_estimators=30, max_depth=2,
    ...                       max_delta_step=1.0).fit(X, y_noisy)
    >>> bool(np.mean(model.predict(X) == y) > 0.8)
    True
    """

    def __init__(
        self, noise: ArrayLike | Any, *, classes: ArrayLike | None = None,
        min_hessian: float = 1e-6,
    ) -> None:
        self.noise = noise
        self.classes = classes
        self.min_hessian = min_hessian
        self.classes_, self._inverse = noise_inverse(noise, classes)

    def __call__(self, labels: ArrayLike, margins: ArrayLike) -> tuple[np.ndarray, np.ndarray]:
        """(gradient, hessian) for XGBoost, both of shape (n_samples, K)."""
        codes = np.asarray(labels).astype(np.int64).ravel()
        margins = np.asarray(margins, dtype=np.float64).reshape(codes.shape[0], -1)
        proba = softmax(margins)
        grad = proba - self._inverse[codes]
        hess = np.maximum(2.0 * proba * (1.0 - proba), self.min_hessian)
        return grad, hess
