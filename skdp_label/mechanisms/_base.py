"""Base classes shared by every label mechanism.

A mechanism is a scikit-learn transformer of *labels*: ``fit(y)`` prepares
it (validates the public inputs, and for mechanisms that estimate a prior,
spends part of the budget on a noisy histogram), ``transform(y)`` returns
randomized labels and charges the budget, ``inverse_transform`` is the
identity so that a mechanism can serve as the ``transformer`` of
``TransformedTargetRegressor(..., check_inverse=False)``.

Privacy bookkeeping, done here once for all mechanisms:

* ``epsilon`` is the total epsilon one label costs when it is fitted on and
  randomized once (``fit_transform``).
* Every call to ``transform`` is a new release with fresh noise and is
  charged again (sequential composition): two noisy copies of a label are
  never handed out for the price of one.
* ``y`` may be 1-D or 2-D. Several columns are several labels of the same
  individual, each randomized independently, so a release of ``c`` columns
  costs ``c`` times the per-label epsilon.
* Labels are validated, and the spend is checked against the accountant,
  before anything is randomized.
"""

from __future__ import annotations

import threading
from abc import ABCMeta, abstractmethod
from numbers import Real
from typing import Any, Self

import numpy as np
import scipy.sparse as sp
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, TransformerMixin, _fit_context
from sklearn.utils._param_validation import StrOptions
from sklearn.utils.validation import check_is_fitted, validate_data

from .._accountant import BudgetAccountant
from .._report import PrivacyReport
from ..utils._random import (
    check_random_state,
    public_fingerprint,
    random_state_constraint,
    reproducible_fits,
    release_generator,
)
from ..utils._repr import PrivacyReprMixin, format_number
from ._validation import NUMPY_BELOW, EpsilonInterval, labels_within, law_epsilon, rr_law_epsilon

__all__ = ["BaseLabelMechanism", "BaseDiscreteMechanism", "OUT_OF_BOUNDS_CONSTRAINT", "OUT_OF_BOUNDS_DOC"]

# The ``out_of_bounds`` parameter of every regression mechanism: labels
# outside the declared bounds/domain raise ("raise", the default) or are
# clipped to them before randomizing ("clip", an explicit opt-in).
OUT_OF_BOUNDS_CONSTRAINT = [StrOptions({"raise", "clip"})]
# Docstring fragment (a format template: braces doubled).
OUT_OF_BOUNDS_DOC = """    out_of_bounds : {{'raise', 'clip'}}, default='raise'
        Labels outside the declared bounds (or domain) raise ``ValueError``
        before anything is spent; ``'clip'`` clips them to the bounds first.
"""

# Parameters a fitted mechanism may change without refitting: the source of
# future noise, and how much it prints. Everything else (epsilon, bounds,
# classes, prior, delta, the accountant, ...) is bound to what fit computed.
_UNBOUND_PARAMS = frozenset({"random_state", "out_of_bounds", "verbose"})
# Fitted attributes that count releases (they change with every charge); every
# other public fitted attribute is bound to the fit, like the parameters.
_USAGE_ATTRIBUTES = frozenset({"epsilon_spent_", "delta_spent_", "charges_"})
# Guards the read-modify-write of those counts (two threads charging one
# object must both be counted). Never held across the accountant's spend,
# which may wait on a file lock.
_COUNTS_LOCK = threading.Lock()


def _canonical(value):
    """A comparable form of a public parameter value (for the fit binding)."""
    if value is None or isinstance(value, (str, bool)):
        return value
    if isinstance(value, Real):
        return float(value)
    if isinstance(value, BudgetAccountant):
        return ("accountant", value.ledger_id)
    if isinstance(value, (list, tuple)) and len(value) <= 64:
        return (type(value).__name__,) + tuple(_canonical(v) for v in value)
    if isinstance(value, (list, tuple, np.ndarray)):
        value = np.asarray(value)  # memmaps and lists compare by content
    try:
        return ("hash", public_fingerprint(value))
    except Exception:  # e.g. a lambda loss: compare by identity
        return ("object", id(value))


def _equal_arrays(a, b):
    nan = a.dtype.kind in "fc" and b.dtype.kind in "fc"
    return a.shape == b.shape and a.dtype == b.dtype and np.array_equal(a, b, equal_nan=nan)


def _parameter_arrays(values):
    """The numpy arrays among parameter values (and in their tuples and lists)."""
    found = []
    for value in values:
        if isinstance(value, np.ndarray):
            found.append(value)
        elif isinstance(value, (list, tuple)):
            found.extend(_parameter_arrays(value))
    return found


def _same_fitted(bound, now):
    """Whether a fitted attribute is still what fit left (see ``_fitted_state``)."""
    if bound is now:
        return True
    if isinstance(bound, np.ndarray) or isinstance(now, np.ndarray):
        return False  # arrays are bound by identity (and read-only)
    if type(bound) is not type(now):
        return False
    if isinstance(bound, (Real, np.generic)):
        return bool(bound == now) or (bound != bound and now != now)  # NaN is NaN
    if isinstance(bound, (type(None), str, tuple)):
        return _canonical(bound) == _canonical(now)
    return False  # other objects are bound by identity


class BaseLabelMechanism(
    PrivacyReprMixin, TransformerMixin, BaseEstimator, metaclass=ABCMeta
):
    """Base class of label mechanisms (randomizers of private labels).

    Subclasses implement :meth:`_fit_mechanism` (everything that depends
    only on public inputs and, if any, on an accounted noisy statistic) and
    :meth:`_randomize_column` (sampling). They may extend
    :meth:`_check_label_values` to reject labels outside their declared
    domain, and :meth:`_check_public_inputs` to validate public parameters
    before anything is spent.

    Randomness (docs/randomness.md): every release gets its own generator
    from :func:`~skdp_label.utils.release_generator`, passed to the hooks and
    never stored. ``epsilon`` is capped at ``_max_epsilon``, above which the
    samplers cannot represent the mechanism's smallest probabilities.
    """

    _parameter_constraints: dict = {
        "epsilon": [EpsilonInterval()],
        "accountant": [BudgetAccountant, None],
        # Generators are listed so that check_random_state refuses them with a
        # message that says why.
        "random_state": random_state_constraint(),
    }

    #: numpy dtype the labels are converted to (None keeps their dtype).
    _label_dtype = np.float64
    #: Largest epsilon the samplers represent faithfully (continuous noise).
    _max_epsilon = 20.0
    #: Attributes holding tables packed for the sampling kernels (public, rebuilt
    #: on demand from the fitted mechanism): never pickled, nor taken from a
    #: pickle, where another version may have packed them in another layout,
    #: which the kernels would read as another noise law (a Gaussian pickled
    #: before its envelope records changed sampled 26x too little noise).
    _PACKED_CACHES = ()

    @abstractmethod
    def __init__(self, epsilon=1.0, *, accountant=None, random_state=None):
        self.epsilon = epsilon
        self.accountant = accountant
        self.random_state = random_state

    def __getstate__(self):
        return self._without_packed_caches(super().__getstate__())

    def __setstate__(self, state):
        super().__setstate__(self._without_packed_caches(state))
        # A pickle (or deepcopy) keeps which objects are shared, not numpy's
        # read-only flags: bind the fitted arrays again. A pickle made before
        # fits were bound is bound to what it holds.
        if vars(self).get("_fit_signature") is not None and "_fit_state" not in vars(self):
            self._fit_state = self._fitted_state()
        elif vars(self).get("_fit_state") is not None:
            self._rebind_fitted_arrays()

    def _without_packed_caches(self, state):
        return {k: v for k, v in state.items() if k not in self._PACKED_CACHES}

    # -- hooks ------------------------------------------------------------
    @abstractmethod
    def _fit_mechanism(self, y):
        """Compute the mechanism. ``y`` is the validated 2-D label array.

        Only public inputs may be used, or noisy statistics of ``y`` whose
        cost is charged with :meth:`_charge` first, drawn from a generator
        of :meth:`_release_generator`.
        """

    @abstractmethod
    def _randomize_column(self, y, rng):
        """Randomize one validated label column (1-D); return the outputs.

        ``rng`` is this release's generator: use it, never keep it.
        """

    def _check_label_values(self, y):
        """Reject labels outside the declared domain (raise ValueError)."""

    def _label_range(self):
        """Public ``(lo, hi)`` every label must lie in, or None.

        Regression mechanisms return their declared bounds (or the ends of
        their domain); :meth:`_validate_labels` then applies the one
        ``out_of_bounds`` policy of the library.
        """
        return None

    def _check_public_inputs(self):
        """Validate public parameters (raise ValueError) before any spend."""

    def _params_for_rows(self, n_rows):
        """Parameters a release of ``n_rows`` labels fixes from that public
        count, for fits that only see a placeholder (keyed releases)."""
        return {}

    def _law_epsilon(self, epsilon=None):
        """The epsilon this mechanism's law is built at, for a charged ``epsilon``
        (default: ``self.epsilon``): less the samplers' slack, so that what is
        sampled costs at most what is charged. Every sampler takes it: the
        tables' draws are within 1 +- SAMPLER_RTOL of the law, and even an exact
        Bernoulli draws a law whose parameter (randomized response's flip
        probability, from a rounded e^-epsilon) is a rounded float."""
        epsilon = float(self.epsilon) if epsilon is None else float(epsilon)
        what = f"{type(self).__name__}: the labels' epsilon"
        n_classes = self._randomized_response_size()
        if n_classes is None:
            return law_epsilon(epsilon, what=what)
        return rr_law_epsilon(epsilon, n_classes, what=what)

    def _randomized_response_size(self):
        """Number of outputs of a randomized response (k-ary RR, RR-Top-k,
        debiased RR), whose flip probability's rounding grows with it
        (``rr_law_epsilon``); None for the other laws."""
        return None

    def _release_cost(self):
        """(epsilon, delta) one label costs in ``transform``."""
        return float(self.epsilon), 0.0

    def _total_cost(self):
        """(epsilon, delta) one label costs in ``fit`` + ``transform``."""
        return float(self.epsilon), 0.0

    # -- randomness ---------------------------------------------------------
    def _release_generator(self, step, n_labels):
        """A fresh generator for one release of ``n_labels`` labels.

        With an integer seed the stream is a function of the seed and this
        public context only: the mechanism, its public parameters (epsilon,
        bounds, prior, ...), the step and the number of labels. A seeded
        release is reproducible, and two releases of one seed at another
        epsilon (a grid search over it) draw different noise: the same noise
        at two scales would let anyone solve for the label. Two seeded
        releases with the same context still share noise (docs/randomness.md).
        """
        context = ()
        if self.random_state is not None:  # fresh entropy needs no context (and no hashing)
            public = self._public_signature()
            public.pop("accountant", None)  # which ledger is charged does not make another release
            context = public_fingerprint(
                type(self).__name__, sorted(public.items()), step, int(n_labels)
            )
        return release_generator(self.random_state, context, owner=type(self).__name__)

    # -- parameters bound to the fit ------------------------------------------
    def _public_signature(self):
        return {
            name: _canonical(value)
            for name, value in self.get_params(deep=False).items()
            if name not in _UNBOUND_PARAMS
        }

    def _check_unchanged_since_fit(self):
        """Refuse to sample if a parameter changed after ``fit``.

        The mechanism samples from what ``fit`` computed (matrix, noise
        scale, prior); charging a new epsilon for it would misstate the cost.
        """
        fitted = getattr(self, "_fit_signature", None)
        if fitted is None:
            return
        current = self._public_signature()
        changed = sorted(k for k in set(fitted) | set(current) if fitted.get(k) != current.get(k))
        if changed:
            raise ValueError(
                f"{type(self).__name__}: parameter(s) {', '.join(changed)} changed since fit; the "
                "fitted mechanism was computed for the old values, so it would not cost what "
                "would be charged. Call fit again (or fit_transform) before transforming."
            )
        bound = getattr(self, "_fit_state", None)
        if bound is None:
            return
        now = vars(self)
        changed = sorted(k for k, v in bound.items() if k not in now or not _same_fitted(v, now[k]))
        if changed:
            raise ValueError(
                f"{type(self).__name__}: fitted attribute(s) {', '.join(changed)} changed since "
                "fit; epsilon was charged for the mechanism fit computed, so only that one is "
                "sampled. Call fit again (or fit_transform) before transforming."
            )

    def _fitted_state(self):
        """The public fitted attributes as fit left them, which
        :meth:`_check_unchanged_since_fit` compares with: arrays by identity
        (made read-only, so an in-place edit raises), scalars and tuples by
        value, other objects by identity. The release counts
        (``_USAGE_ATTRIBUTES``) are left out. An array that shares memory with
        a parameter's (``classes`` kept as given) is bound as a copy: the
        caller's own array stays writable (an edit of it changes the
        parameter, which the signature refuses)."""
        params = _parameter_arrays(self.get_params(deep=False).values())
        copies = {}  # attributes that were one array stay one array
        state = {}
        for name, value in list(vars(self).items()):
            if name.startswith("_") or not name.endswith("_") or name in _USAGE_ATTRIBUTES:
                continue
            if isinstance(value, np.ndarray):
                if any(np.may_share_memory(value, p) for p in params):
                    value = copies.setdefault(id(value), value.copy())
                    setattr(self, name, value)
                value.setflags(write=False)
            state[name] = value
        return state

    def _rebind_fitted_arrays(self):
        """After a load: bind the loaded arrays again. A pickle keeps shared
        objects shared, but not read-only flags, and joblib's pickler stores
        every array apart (two equal copies): an attribute equal to its bound
        copy becomes the bound array; one that differs stays refused."""
        for name, bound in self._fit_state.items():
            current = vars(self).get(name)
            if isinstance(bound, np.ndarray):
                if isinstance(current, np.ndarray) and _equal_arrays(bound, current):
                    self._fit_state[name] = bound = current
                bound.setflags(write=False)

    # -- label validation -------------------------------------------------
    def _validate_labels(self, y, *, reset):
        """Return (labels as a 2-D array, whether the input was 1-D)."""
        if y is None:
            raise ValueError(f"{type(self).__name__} needs the labels y; got None.")
        if sp.issparse(y):
            raise TypeError(
                f"{type(self).__name__} does not support sparse input: pass the labels as a dense array."
            )
        y_arr = np.asarray(y) if not hasattr(y, "iloc") else y
        one_d = getattr(y_arr, "ndim", 2) == 1
        if one_d and not reset and getattr(self, "n_features_in_", 1) != 1:
            raise ValueError(
                f"Expected {self.n_features_in_} label columns as in fit, got a 1-D array. "
                "Reshape your data to 2-D with one column per label."
            )
        if one_d:
            y_arr = np.asarray(y_arr).reshape(-1, 1)
        y2d = validate_data(
            self,
            y_arr,
            reset=reset,
            dtype=self._label_dtype,
            ensure_all_finite=False,
            ensure_min_samples=1,
        )
        label_range = self._label_range()
        if label_range is not None and y2d.dtype.kind == "f" and labels_within(y2d, *label_range):
            # Every label finite and in range, in one pass (a release's common case).
            self._check_label_values(y2d)
            return y2d, one_d
        # min and max propagate NaN and show infinities: two reductions, no
        # label-sized temporary; the extremes are compared and dropped.
        extremes = (y2d.min(), y2d.max()) if y2d.dtype.kind == "f" and y2d.size else None
        if extremes is not None and not np.all(np.isfinite(extremes)) or (
            y2d.dtype.kind == "c" and not np.all(np.isfinite(y2d))
        ):
            # No count or position: both are statistics of the private labels.
            raise ValueError(
                f"{type(self).__name__}: y contains NaN or infinite labels; labels must be "
                "finite numbers."
            )
        if label_range is not None:
            y2d = self._apply_out_of_bounds(y2d, label_range, extremes)
        self._check_label_values(y2d)
        return y2d, one_d

    def _apply_out_of_bounds(self, y2d, label_range, extremes=None):
        """The library's one policy for labels outside the public range."""
        lo, hi = label_range
        # Two reductions, no label-sized temporaries; the extremes are compared
        # and dropped, never stored or shown.
        if y2d.size and extremes is None:
            extremes = (y2d.min(), y2d.max())
        if y2d.size == 0 or (extremes[0] >= lo and extremes[1] <= hi):
            return y2d
        if getattr(self, "out_of_bounds", "raise") == "clip":
            return np.clip(y2d, lo, hi)
        raise ValueError(
            f"{type(self).__name__}: some labels lie outside the declared range "
            f"[{format_number(lo)}, {format_number(hi)}]. Declare bounds that contain every "
            "possible label (bounds are public knowledge, never computed from the labels), or "
            "pass out_of_bounds='clip' to clip labels to them before randomizing."
        )

    def _check_epsilon_cap(self):
        if float(self.epsilon) > self._max_epsilon:
            raise ValueError(
                f"{type(self).__name__}: epsilon={float(self.epsilon):g} exceeds this mechanism's cap "
                f"of {self._max_epsilon:g}. Above it the sampler cannot represent the smallest "
                "probabilities of the mechanism faithfully (and labels are released almost "
                "unchanged anyway); see docs/sampling.md."
            )

    # -- accounting -------------------------------------------------------
    def _charge(self, epsilon, delta, *, n_labels, step):
        """Check the budget and record a release, before any randomization.

        ``epsilon_spent_`` and ``delta_spent_`` are cumulative: everything
        this object has charged since it was constructed.
        """
        context = dict(getattr(self, "_ledger_context", None) or {})
        details = {**context, "mechanism": type(self).__name__, "step": step}
        # Counted before the ledger is written: an interrupt (KeyboardInterrupt,
        # SystemExit) after the write would otherwise leave this object's count
        # below the ledger's. An interrupted spend may over-count, never under-count.
        with _COUNTS_LOCK:
            before = {k: vars(self)[k] for k in ("epsilon_spent_", "delta_spent_") if k in vars(self)}
            counted = {"epsilon_spent_": before.get("epsilon_spent_", 0.0) + epsilon,
                       "delta_spent_": before.get("delta_spent_", 0.0) + delta}
            vars(self).update(counted)
        if self.accountant is not None:
            owner = f"{context['estimator']}: " if "estimator" in context else ""
            try:
                self.accountant.spend(
                    epsilon,
                    delta,
                    n_labels=n_labels,
                    description=f"{owner}{type(self).__name__}: {step}",
                    details=details,
                )
            except Exception:
                # A refusal (budget, ledger, bad argument) records nothing. The count
                # is restored exactly, unless another thread counted a spend on this
                # object meanwhile (the spend can wait on a file lock): then only this
                # call's cost is taken back, never the other's.
                with _COUNTS_LOCK:
                    for name, cost in (("epsilon_spent_", epsilon), ("delta_spent_", delta)):
                        if vars(self).get(name) is not counted[name]:
                            setattr(self, name, getattr(self, name, cost) - cost)
                        elif name in before:
                            setattr(self, name, before[name])
                        else:
                            delattr(self, name)
                raise
        # Costs and public context only (what privacy_report() shows).
        entry = {**details, "epsilon": float(epsilon), "delta": float(delta), "n_labels": int(n_labels)}
        with _COUNTS_LOCK:
            self.charges_ = [*getattr(self, "charges_", []), entry]

    # -- scikit-learn API ---------------------------------------------------
    @_fit_context(prefer_skip_nested_validation=True)
    def fit(self, y: ArrayLike, X: Any = None) -> Self:
        """Prepare the mechanism for labels ``y``.

        Parameters
        ----------
        y : array-like of shape (n_samples,) or (n_samples, n_columns)
            Private labels. Mechanisms that estimate a prior spend part of
            ``epsilon`` on a noisy histogram of them; the others only
            validate them.
        X : ignored
            Features are public and unused by label mechanisms.

        Returns
        -------
        self : object
        """
        check_random_state(self.random_state, owner=type(self).__name__)
        self._check_epsilon_cap()
        self._check_public_inputs()
        y2d, _ = self._validate_labels(y, reset=True)
        n_columns = y2d.shape[1]
        if self.accountant is not None:
            # Fail before spending anything if a full release cannot fit.
            eps, delta = self._total_cost()
            self.accountant.check(eps * n_columns, delta * n_columns)
        self._fit_signature = None
        self.__dict__.pop("charges_", None)  # charges_ lists this fit's charges, then its releases
        self._fit_state = None
        # A seeded mechanism's noise is replayed from its seed: its fit must
        # give the same distribution on any machine (no time budget decides).
        with reproducible_fits(self.random_state is not None):
            self._fit_mechanism(y2d)
        self._fit_signature = self._public_signature()
        self._fit_state = self._fitted_state()
        return self

    def transform(self, y: ArrayLike) -> np.ndarray:
        """Randomize labels: a new release, charged to the budget.

        Parameters
        ----------
        y : array-like of shape (n_samples,) or (n_samples, n_columns)
            Private labels, with as many columns as in ``fit``.

        Returns
        -------
        y_noisy : ndarray of the same shape as ``y``
            Randomized labels; each call draws fresh noise and costs the
            per-label epsilon again for every column.
        """
        check_is_fitted(self)
        self._check_unchanged_since_fit()
        check_random_state(self.random_state, owner=type(self).__name__)
        y2d, one_d = self._validate_labels(y, reset=False)
        eps, delta = self._release_cost()
        n_columns = y2d.shape[1]
        self._charge(
            eps * n_columns, delta * n_columns, n_labels=y2d.shape[0], step="randomized labels"
        )
        rng = self._release_generator("randomized labels", y2d.shape[0])
        columns = [self._randomize_column(y2d[:, j], rng) for j in range(n_columns)]
        out = np.column_stack(columns) if n_columns > 1 else columns[0].reshape(-1, 1)
        return out.ravel() if one_d else out

    def fit_transform(self, y: ArrayLike, X: Any = None) -> np.ndarray:
        """Fit on ``y`` and randomize it: one release costing ``epsilon``."""
        return self.fit(y, X).transform(y)

    def inverse_transform(self, y: ArrayLike) -> np.ndarray:
        """Identity: randomized labels are used on the label scale as they are."""
        check_is_fitted(self)
        return np.asarray(y)

    def privacy_report(self) -> PrivacyReport:
        """What this fitted mechanism charged, its public parameters and noise level.

        Returns
        -------
        report : PrivacyReport
            Costs of this fit and of the releases since (``steps``), epsilon
            and delta per label, public parameters, and the expected noise
            level from the public transition. Holds no labels or label
            statistics; printable and picklable.
        """
        from .._report import mechanism_report

        check_is_fitted(self)
        return mechanism_report(self, [self])

    def get_feature_names_out(self, input_features=None):
        from sklearn.utils.validation import _check_feature_names_in

        return _check_feature_names_in(self, input_features)

    def __sklearn_tags__(self):
        tags = super().__sklearn_tags__()
        tags.non_deterministic = True
        tags.requires_fit = True
        # Integer- and class-valued mechanisms take categorical labels.
        tags.input_tags.categorical = self._label_dtype is None or getattr(self, "_integer", False)
        return tags


class BaseDiscreteMechanism(BaseLabelMechanism):
    """Base class of mechanisms with a finite set of outputs.

    After ``fit`` they expose ``input_values_``, ``output_values_`` and
    ``transition_matrix_`` (rows: inputs, columns: outputs, rows sum to 1),
    the exact distribution ``transform`` samples from. The default sampler
    groups each row's outputs by the binary exponent of their probability,
    picks a group by exact Bernoulli draws and inverts the CDF inside it,
    so every positive entry is reachable (see docs/sampling.md).
    """

    def _encode_labels(self, y):
        """Row index in ``input_values_`` of each label (1-D)."""
        codes = np.searchsorted(self.input_values_, y)
        codes = np.clip(codes, 0, len(self.input_values_) - 1)
        if np.any(self.input_values_[codes] != y):
            raise ValueError("labels are not among the mechanism's input values.")
        return codes

    _max_epsilon = 30.0

    def _randomize_column(self, y, rng):
        outputs = self.output_values_
        if outputs.dtype.kind in "iuf" and np.all(np.abs(outputs) < 2.0**53):
            # Numeric outputs (exact as float64) come straight out of the kernel;
            # rows by nearest rounding onto an arithmetic grid are found in it
            # (the rows of _encode_labels, without an array of them).
            from .._kernels._sampling import nearest_rows_compiled, sample_rows

            grid = self._nearest_grid()
            if y.shape[0] < NUMPY_BELOW or not nearest_rows_compiled():
                # Small calls (interpreted), or a cold cache (the codes' call
                # compiles the kernel meanwhile): the codes of _encode_labels.
                grid = None
            rows = {"codes": self._encode_labels(y)} if grid is None else {"y": y, "nearest": grid}
            out = sample_rows(rng, outputs, **rows, tables=self._categorical_tables())
            return out if outputs.dtype == out.dtype else out.astype(outputs.dtype)
        return outputs[self._sample_codes(self._encode_labels(y), rng)]

    def _nearest_grid(self):
        """The grid when :meth:`_encode_labels` is ``nearest_domain_index`` on
        an arithmetic grid (``_prior.nearest_grid``), else None."""
        return None

    def _sample_codes(self, codes, rng):
        """Output index for each input index ``codes``, drawn from the matrix."""
        from .._kernels._sampling import categorical_codes

        return categorical_codes(codes, rng, self._categorical_tables())

    _PACKED_CACHES = ("_row_sampler",)

    def _check_unchanged_since_fit(self):
        super()._check_unchanged_since_fit()
        if "transition_matrix_" in vars(self):  # before anything is charged
            self._sampled_matrix()

    def _sampled_matrix(self):
        """``transition_matrix_``, checked against the inputs and outputs the
        kernels index with it: a matrix of another shape (set after fit) would
        make them read outside their arrays (memory into the release)."""
        matrix = self.transition_matrix_
        expected = (len(self.input_values_), len(self.output_values_))
        if np.shape(matrix) != expected:
            raise ValueError(
                f"{type(self).__name__}: transition_matrix_ has shape {np.shape(matrix)}; "
                f"it must be (len(input_values_), len(output_values_)) = {expected}. "
                "Set it only to a matrix of the fitted inputs and outputs, or fit again."
            )
        return matrix

    def _categorical_tables(self):
        """Sampler tables of the (public) matrix, rebuilt whenever it changes."""
        from .._kernels._sampling import categorical_tables

        return self._tables_of_matrix("_row_sampler", categorical_tables)

    def _tables_of_matrix(self, attribute, build):
        """``build(transition_matrix_)``, kept in ``attribute`` (one of
        ``_PACKED_CACHES``) and rebuilt whenever the matrix is another (a refit;
        a matrix set by hand is refused before this, by the fit's binding)."""
        matrix = self._sampled_matrix()
        cached = getattr(self, attribute, None)
        if cached is None or not (cached[0] is matrix or np.array_equal(cached[0], matrix)):
            cached = (matrix, build(matrix))
            setattr(self, attribute, cached)
        return cached[1]
