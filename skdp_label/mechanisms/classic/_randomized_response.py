"""k-ary randomized response (Warner 1965; 000 Def. 27)."""

from __future__ import annotations

import math

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils.validation import check_is_fitted

from ..._accountant import BudgetAccountant
from ..._kernels._sampling import (
    randomized_response_contiguous,
    randomized_response_indices,
    rr_constants,
    rr_flip_probability,
)
from .._base import BaseDiscreteMechanism
from .._registry import register_mechanism
from .._validation import (
    check_class_labels,
    check_classes,
    contiguous_integer_classes,
    encode_classes,
)

__all__ = ["RandomizedResponse", "randomized_response_matrix"]


def randomized_response_matrix(n_classes, epsilon):
    """Transition matrix of k-ary RR: e^eps / (e^eps + k - 1) on the diagonal."""
    # exp(-eps) form avoids overflow at large epsilon.
    off = math.exp(-epsilon) / (1.0 + (n_classes - 1) * math.exp(-epsilon))
    keep = 1.0 / (1.0 + (n_classes - 1) * math.exp(-epsilon))
    matrix = np.full((n_classes, n_classes), off)
    np.fill_diagonal(matrix, keep)
    return matrix


@register_mechanism("rr", "randomized-response", task="classification")
class RandomizedResponse(BaseDiscreteMechanism):
    """k-ary randomized response over declared classes.

    Keeps the true class with probability e^eps / (e^eps + k - 1) and
    otherwise outputs one of the other k - 1 classes uniformly.

    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy cost of one label.
    classes : array-like
        The public list of classes (any sortable values, e.g. strings).
        Required: it is never read off the labels.
    accountant : BudgetAccountant, optional
        Charged with every release.
    random_state : None or int, default=None
        ``None``: fresh OS entropy for every release, nothing kept. An int
        makes releases reproducible and emits ``PrivacyLeakWarning``
        (docs/randomness.md). Generators are refused.

    Attributes
    ----------
    input_values_, output_values_ : ndarray of shape (k,)
        The classes, in their declared order.
    transition_matrix_ : ndarray of shape (k, k)
        Exact output distribution for each input class (built on access).
    epsilon_spent_ : float
        Epsilon spent per label by this object so far.

    Examples
    --------
    >>> from skdp_label.mechanisms import RandomizedResponse
    >>> rr = RandomizedResponse(epsilon=2.0, classes=["cat", "dog", "eel"], random_state=0)
    >>> rr.fit_transform(["cat", "dog", "dog", "eel"]).shape
    (4,)
    >>> round(float(rr.transition_matrix_[0, 0]), 4)  # e^2 / (e^2 + 2)
    0.787
    """

    _parameter_constraints = {
        **BaseDiscreteMechanism._parameter_constraints,
        "classes": ["array-like", None],
    }
    _label_dtype = None

    def __init__(
        self, epsilon: float = 1.0, *, classes: ArrayLike | None = None,
        accountant: BudgetAccountant | None = None, random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.classes = classes

    def _check_label_values(self, y):
        check_class_labels(y, check_classes(self.classes, owner=type(self).__name__))

    def _randomized_response_size(self):
        return len(self.classes)  # validated at fit, bound to it after

    def _fit_mechanism(self, y):
        classes = check_classes(self.classes)
        self.input_values_ = classes
        self.output_values_ = classes
        self._matrix_epsilon = self._law_epsilon()

    @property
    def transition_matrix_(self) -> np.ndarray:
        # Built on access, not stored: k² floats (3.2 GB for 20,000 classes)
        # that a fitted or pickled RR need not carry.
        check_is_fitted(self, "input_values_")
        return randomized_response_matrix(self.input_values_.shape[0], self._matrix_epsilon)

    def _randomize_column(self, y, rng):
        k = self.input_values_.shape[0]
        # The flip probability, not 1 - P(keep): an exact Bernoulli of it
        # keeps the off-diagonal mass right at any epsilon.
        c = rr_constants(k, rr_flip_probability(k, self._law_epsilon()))
        contiguous = contiguous_integer_classes(self.input_values_)
        if contiguous is not None and y.dtype.kind in "iuf":
            # Labels were validated: they are the integers lo..lo+k-1.
            return randomized_response_contiguous(y, rng, contiguous[0], k, c)
        codes = encode_classes(y, self.input_values_)
        noisy = self.output_values_[randomized_response_indices(codes, rng, k, c)]
        if y.dtype.kind in "iuf" and noisy.dtype.kind in "iuf":
            noisy = noisy.astype(y.dtype)  # numeric labels keep their dtype
        return noisy
