"""RR-Top-k and RRWithPrior (Ghazi et al. 2021, paper 004, Lemma 1)."""

from __future__ import annotations

import math
from numbers import Integral

import numpy as np
from numpy.typing import ArrayLike
from sklearn.utils.validation import check_is_fitted

from ..._accountant import BudgetAccountant
from ..._kernels._top_k import rr_top_k_indices, rr_top_k_set, rr_top_k_set_constants
from .._base import BaseDiscreteMechanism
from .._registry import register_mechanism
from .._validation import (
    NumberInterval,
    check_class_labels,
    check_classes,
    contiguous_integer_classes,
    encode_classes,
)
from ._solver import optimal_k, rr_top_k_matrix, top_k_order

__all__ = ["RRTopK", "RRWithPrior"]

_COMMON_PARAMETERS = """
    Parameters
    ----------
    epsilon : float, default=1.0
        Privacy cost of one label.
    classes : array-like
        The public list of classes (any sortable values, e.g. strings).
        Required: it is never read off the labels.
{extra}    prior : array-like of shape (n_classes,), optional
        Public prior over ``classes`` (in their declared order) used by
        ``transform``; ``None`` is uniform. Per-example priors go to
        :meth:`randomize`. A prior must not be computed from the labels
        being randomized unless its cost is accounted separately.
    accountant : BudgetAccountant, optional
        Charged with every release.
    random_state : None or int, default=None
        ``None``: fresh OS entropy for every release, nothing kept. An int
        makes releases reproducible and emits ``PrivacyLeakWarning``
        (docs/randomness.md). Generators are refused.

    Attributes
    ----------
    input_values_, output_values_ : ndarray of shape (n_classes,)
        The classes, in their declared order.
    k_ : int
        Size of the top-k set for the public ``prior``.
    top_k_ : ndarray of shape (k,)
        The top-k classes for the public ``prior``.
    transition_matrix_ : ndarray of shape (n_classes, n_classes)
        Exact output distribution of ``transform`` for each input class
        (built on access).
    epsilon_spent_ : float
        Epsilon spent per label by this object so far.
"""


class _BaseTopKMechanism(BaseDiscreteMechanism):
    """RR-Top-k with a top-k set per prior; subclasses choose k."""

    _parameter_constraints = {
        **BaseDiscreteMechanism._parameter_constraints,
        "classes": ["array-like", None],
        "prior": ["array-like", None],
    }
    _label_dtype = None

    def _choose_k(self, priors, order=None):
        """k for each row of ``priors`` (validated, shape (n, n_classes));
        ``order`` is their :func:`top_k_order` if already known."""
        raise NotImplementedError

    def _classes(self):
        return check_classes(self.classes, owner=type(self).__name__)

    def _check_label_values(self, y):
        check_class_labels(y, self._classes())

    def _randomized_response_size(self):
        return len(self.classes)  # validated at fit, bound to it after; k <= classes

    def _encode_labels(self, y):
        return encode_classes(y, self.input_values_)

    def _check_priors(self, priors, n_rows, n_classes=None):
        if n_classes is None:
            n_classes = self.input_values_.shape[0]
        priors = np.asarray(priors, dtype=np.float64)
        if priors.ndim == 1 and n_rows is None:
            priors = priors.reshape(1, -1)
        if priors.ndim != 2 or priors.shape[1] != n_classes or (
            n_rows is not None and priors.shape[0] != n_rows
        ):
            want = f"({'n_samples' if n_rows is None else n_rows}, {n_classes})"
            raise ValueError(f"priors must have shape {want}, got {priors.shape}.")
        if not np.all(np.isfinite(priors)) or np.any(priors < 0):
            raise ValueError("priors must be finite and non-negative.")
        if np.any(priors.sum(axis=1) <= 0):
            raise ValueError("every prior must have a positive total mass.")
        return priors / priors.sum(axis=1, keepdims=True)

    def _fit_mechanism(self, y):
        classes = self._classes()
        prior = np.ones(classes.shape[0]) if self.prior is None else self.prior
        # Checked before any fitted attribute changes: a refit that fails
        # leaves the previous fit whole (classes, top-k set and matrix agree).
        prior = self._check_priors(prior, None, classes.shape[0])
        k = int(self._choose_k(prior)[0])
        order = top_k_order(prior)[0]
        in_top = np.zeros(classes.shape[0], dtype=bool)
        in_top[order[:k]] = True
        self.input_values_ = self.output_values_ = classes
        self.k_ = k
        self.top_k_ = classes[np.sort(order[:k])]
        self._in_top = in_top
        self._matrix_epsilon = self._law_epsilon()

    @property
    def transition_matrix_(self) -> np.ndarray:
        # Built on access, not stored: k² floats that a fitted or pickled
        # mechanism over many classes need not carry.
        check_is_fitted(self, "input_values_")
        return rr_top_k_matrix(self._in_top, self._matrix_epsilon)

    def choose_k(self, priors: ArrayLike) -> np.ndarray:
        """Size of the top-k set for each prior (public computation, free).

        Parameters
        ----------
        priors : array-like of shape (n_samples, n_classes)

        Returns
        -------
        k : ndarray of int64, shape (n_samples,)
        """
        check_is_fitted(self)
        return self._choose_k(self._check_priors(priors, None))

    def randomize(self, y: ArrayLike, priors: ArrayLike) -> np.ndarray:
        """Randomize each label with RR-Top-k for its own prior: one release.

        Fits the mechanism first if needed. Costs ``epsilon`` per label,
        charged before any label is randomized.

        Parameters
        ----------
        y : array-like of shape (n_samples,)
            Private labels among ``classes``.
        priors : array-like of shape (n_samples, n_classes)
            One prior per example over the sorted ``classes``; it must not
            depend on the example's own label (e.g. a model trained on
            other examples, or a noisy histogram whose cost is accounted).

        Returns
        -------
        y_noisy : ndarray of shape (n_samples,)
        """
        if not hasattr(self, "input_values_"):
            self.fit(y)
        self._check_unchanged_since_fit()
        y2d, one_d = self._validate_labels(y, reset=False)
        if not one_d or y2d.shape[1] != 1:
            raise ValueError("randomize takes a 1-D array of labels.")
        priors = self._check_priors(priors, y2d.shape[0])
        codes = self._encode_labels(y2d[:, 0])
        order = top_k_order(priors)
        ks = self._choose_k(priors, order)
        eps, delta = self._release_cost()
        self._charge(eps, delta, n_labels=codes.shape[0], step="randomized labels (per-example priors)")
        rng = self._release_generator("randomized labels (per-example priors)", codes.shape[0])
        picked = rr_top_k_indices(codes, order, ks, rng, math.exp(-self._law_epsilon()))
        return self._as_label_dtype(self.output_values_[picked], y2d)

    def _as_label_dtype(self, noisy, y):
        """Numeric labels keep their dtype (as in RandomizedResponse)."""
        if y.dtype.kind in "iuf" and noisy.dtype.kind in "iuf":
            return noisy.astype(y.dtype, copy=False)
        return noisy

    def _randomize_column(self, y, rng):
        # RR-Top-k directly (one digit a label), not the generic sampler of
        # the matrix: the same distribution, transition_matrix_.
        slot, constants = rr_top_k_set_constants(self._in_top, self._law_epsilon())
        top = self.output_values_[self._in_top]
        contiguous = contiguous_integer_classes(self.input_values_)
        if contiguous is not None and y.dtype.kind in "iuf" and (
            -(2**63) <= contiguous[0] and contiguous[0] + contiguous[1] <= 2**63
        ):
            # Labels were validated: they are the integers lo..lo+k-1, coded
            # by a subtraction in the kernel (no codes array).
            work = np.ascontiguousarray(y, dtype=np.float64 if y.dtype.kind == "f" else np.int64)
            noisy = rr_top_k_set(work, contiguous[0], slot, constants, top.astype(work.dtype), rng)
        else:
            codes = encode_classes(y, self.input_values_)
            noisy = top[rr_top_k_set(codes, 0, slot, constants, np.arange(top.shape[0]), rng)]
        return self._as_label_dtype(noisy, y)


@register_mechanism("rr-top-k", task="classification")
class RRTopK(_BaseTopKMechanism):
    __doc__ = (
        """RR-Top-k: randomized response restricted to the k likeliest classes.

    Given a prior, let Y_k be its k classes of largest mass. A label in Y_k
    is kept with probability e^eps / (e^eps + k - 1), otherwise replaced by
    another member of Y_k uniformly; a label outside Y_k becomes a uniform
    member of Y_k. The output is always in Y_k, which depends on the prior
    only, so the mechanism is epsilon-DP (004, Lemma 1). With ``k`` equal to
    the number of classes it is plain randomized response.
"""
        + _COMMON_PARAMETERS.format(
            extra="""    k : int, optional
        Size of the top-k set; ``None`` means all classes.
"""
        )
        + """
    Examples
    --------
    >>> from skdp_label.mechanisms import RRTopK
    >>> mech = RRTopK(epsilon=1.0, classes=[0, 1, 2, 3], k=2, prior=[0.1, 0.5, 0.3, 0.1])
    >>> mech.fit([0, 1]).top_k_.tolist()
    [1, 2]
    >>> mech.transition_matrix_[0].round(3).tolist()  # class 0 is outside the top 2
    [0.0, 0.5, 0.5, 0.0]
    """
    )

    _parameter_constraints = {
        **_BaseTopKMechanism._parameter_constraints,
        "k": [NumberInterval(Integral, 1, None, closed="left"), None],
    }

    def __init__(
        self, epsilon: float = 1.0, *, classes: ArrayLike | None = None, k: int | None = None,
        prior: ArrayLike | None = None, accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.classes = classes
        self.k = k
        self.prior = prior

    def _choose_k(self, priors, order=None):
        n_classes = priors.shape[1]
        if self.k is not None and self.k > n_classes:
            raise ValueError(f"k={self.k} exceeds the number of classes ({n_classes}).")
        return np.full(priors.shape[0], n_classes if self.k is None else int(self.k), dtype=np.int64)


@register_mechanism("rr-with-prior", task="classification")
class RRWithPrior(_BaseTopKMechanism):
    __doc__ = (
        """RRWithPrior: RR-Top-k with the k that a prior makes best (004, Lemma 1).

    For each prior, k maximises (sum of the k largest prior masses) *
    e^eps / (e^eps + k - 1), the probability that the output is the true
    label if labels follow the prior; then RR-Top-k runs on those k classes.
    A uniform prior gives k = n_classes, i.e. plain randomized response.
    Per-example priors (e.g. a model trained on earlier stages of
    multi-stage training) go to :meth:`randomize`.
"""
        + _COMMON_PARAMETERS.format(extra="")
        + """
    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms import RRWithPrior
    >>> mech = RRWithPrior(epsilon=1.0, classes=["a", "b", "c"], random_state=0)
    >>> priors = np.array([[0.9, 0.05, 0.05], [0.45, 0.45, 0.1]])
    >>> mech.fit(["a", "b"]).choose_k(priors).tolist()
    [1, 2]
    >>> str(mech.randomize(["c", "a"], priors)[0])  # k = 1: always the top class
    'a'
    """
    )

    def __init__(
        self, epsilon: float = 1.0, *, classes: ArrayLike | None = None,
        prior: ArrayLike | None = None, accountant: BudgetAccountant | None = None,
        random_state: int | None = None,
    ) -> None:
        super().__init__(epsilon, accountant=accountant, random_state=random_state)
        self.classes = classes
        self.prior = prior

    def _choose_k(self, priors, order=None):
        return optimal_k(priors, self._law_epsilon(), order)
