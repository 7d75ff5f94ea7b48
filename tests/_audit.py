"""Shared helpers for exact and statistical privacy audits in tests.

Every auditor here is meant to be able to fail: ``tests/test_audit_mutations.py``
feeds each one deliberately broken mechanisms next to a correct control.

* Exact: :func:`max_log_ratio`, :func:`assert_exactly_private` (a transition
  matrix is epsilon-DP).
* Random state: :func:`find_random_state`, :func:`pickle_random_state_refs`,
  :func:`assert_no_random_state` (nothing reachable from a fitted object can
  reproduce its noise).
* Statistical, each with a false-alarm probability of at most ``alpha``:
  :func:`audit_sampler` (``transform`` samples ``transition_matrix_``, tails
  included), :func:`audit_copies_independent` (copies and repeated releases
  draw independent noise), :func:`audit_prior_is_noisy` (a private prior is
  really noisy).
* :func:`audit_messages_have_no_labels`: errors, warnings and log records of a
  failing call quote no private label; :func:`audit_output_has_no_labels`:
  the same for what a successful call prints (``verbose``), warns or logs
  (its mutants are in ``tests/test_verbose.py``).
"""

import contextlib
import copy
import functools
import io
import logging
import math
import numbers
import pickle
import pickletools
import random
import re
import sys
import types
import warnings
from collections import deque
from collections.abc import Mapping

import numpy as np
from scipy import stats

from skdp_label.mechanisms._prior import nearest_domain_index


# -- exact privacy of a transition matrix -------------------------------------
def max_log_ratio(matrix):
    """Exact privacy loss of a transition matrix (rows: inputs, columns: outputs)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    with np.errstate(divide="ignore"):
        logs = np.log(matrix)
    col_max = logs.max(axis=0)
    col_min = logs.min(axis=0)
    # A column that is 0 for one input and positive for another is infinite loss.
    spread = np.where(np.isneginf(col_max), 0.0, col_max - col_min)
    return float(spread.max())


def assert_exactly_private(matrix, epsilon, rtol=1e-9):
    matrix = np.asarray(matrix)
    assert np.all(matrix >= 0)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    loss = max_log_ratio(matrix)
    assert loss <= epsilon * (1 + rtol), f"privacy loss {loss} > epsilon {epsilon}"


def _pooled_chi_square(counts, expected, min_expected=5.0):
    """p-value of a chi-square test of ``counts`` against ``expected``.

    Cells are pooled from the smallest expectation up until each pooled cell
    expects at least ``min_expected``, so a sampler that starves the tail
    shows up as a starved pooled cell.
    """
    counts = np.asarray(counts, dtype=float)
    expected = np.asarray(expected, dtype=float)
    order = np.argsort(expected)
    obs_pooled, exp_pooled = [], []
    acc_o = acc_e = 0.0
    for i in order:
        acc_o += counts[i]
        acc_e += expected[i]
        if acc_e >= min_expected:
            obs_pooled.append(acc_o)
            exp_pooled.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 and exp_pooled:
        obs_pooled[-1] += acc_o
        exp_pooled[-1] += acc_e
    if len(exp_pooled) < 2:
        return 1.0
    return stats.chisquare(obs_pooled, exp_pooled).pvalue


def chi_square_pvalue(samples, values, probabilities, min_expected=5.0):
    """p-value of a chi-square goodness-of-fit test, pooling small cells."""
    values = np.asarray(values)
    counts = np.array([(samples == v).sum() for v in values], dtype=float)
    assert counts.sum() == len(samples), "samples outside the declared outputs"
    return _pooled_chi_square(counts, np.asarray(probabilities) * len(samples), min_expected)


def _fail_if(findings, headline):
    """Raise AssertionError listing ``findings`` under ``headline``, if any."""
    if findings:
        listed = "\n  ".join(findings)
        raise AssertionError(f"{headline} ({len(findings)} finding(s)):\n  {listed}")


# -- random state reachable from an object ------------------------------------
#: Objects that hold or reproduce a random stream.
RANDOM_STATE_TYPES = (
    np.random.Generator,
    np.random.BitGenerator,
    np.random.bit_generator.ISeedSequence,
    np.random.RandomState,
    random.Random,
)

# Leaves: scalars and text cannot hold a stream.
_LEAF_TYPES = (
    type(None), bool, numbers.Number, str, bytes, bytearray, np.generic, range, type(Ellipsis)
)

# Packages whose functions' globals are not followed: they are large, hold no
# fitted state, and following them would walk most of the interpreter.
_LIBRARY_PACKAGES = frozenset(
    {"numpy", "scipy", "sklearn", "numba", "joblib", "threadpoolctl", "pandas", "pytest", "_pytest"}
) | frozenset(getattr(sys, "stdlib_module_names", ()))


def _is_library(module_name):
    return (module_name or "builtins").partition(".")[0] in _LIBRARY_PACKAGES


def _serialized_state_kind(value):
    """Name of the saved generator state ``value`` is, or None.

    A stored ``bit_generator.state`` dict, ``RandomState.get_state()`` tuple
    or ``random.getstate()`` tuple replays the stream as well as the object.
    """
    if isinstance(value, Mapping):
        if "bit_generator" in value and "state" in value:
            return "saved bit_generator.state"
    elif isinstance(value, tuple):
        if len(value) == 5 and isinstance(value[0], str) and value[0] == "MT19937":
            return "saved RandomState.get_state()"
        if (
            len(value) == 3
            and isinstance(value[0], int)
            and value[0] == 3
            and isinstance(value[1], tuple)
            and len(value[1]) == 625
        ):
            return "saved random.getstate()"
    return None


def _code_names(code):
    """Global names a code object (and the code nested in it) reads."""
    names = set(code.co_names)
    for const in code.co_consts:
        if isinstance(const, types.CodeType):
            names |= _code_names(const)
    return names


_NOT_CLASS_DATA = (
    types.FunctionType, staticmethod, classmethod, property, type, types.ModuleType
)


def _class_data(cls):
    """Class-level data attributes (no routines, descriptors or dunders)."""
    for klass in cls.__mro__:
        if klass is object or klass.__module__ == "builtins":
            continue
        for name, value in vars(klass).items():
            if name.startswith("__") or isinstance(value, _NOT_CLASS_DATA):
                continue
            if hasattr(type(value), "__get__"):  # any other descriptor
                continue
            yield klass, name, value


def _children(value, path):
    """(child, path) pairs one step down the object graph from ``value``."""
    if isinstance(value, Mapping):
        for key, item in list(value.items()):
            yield key, f"{path}<key {key!r}>"
            yield item, f"{path}[{key!r}]"
    elif isinstance(value, (list, tuple, deque)):
        for i, item in enumerate(list(value)):
            yield item, f"{path}[{i}]"
    elif isinstance(value, (set, frozenset)):
        for item in list(value):
            yield item, f"{path}<set item>"
    elif isinstance(value, np.ndarray):
        if value.dtype.names:  # structured: fields may hold objects
            for name in value.dtype.names:
                yield value[name], f"{path}[{name!r}]"
        elif value.dtype == object:
            for index, item in np.ndenumerate(value):
                yield item, f"{path}[{', '.join(map(str, index))}]"
        return  # numeric arrays hold no objects

    if isinstance(value, functools.partial):
        yield value.func, f"{path}.func"
        for i, arg in enumerate(value.args):
            yield arg, f"{path}.args[{i}]"
        for key, arg in value.keywords.items():
            yield arg, f"{path}.keywords[{key!r}]"
    if isinstance(value, types.FunctionType):
        for name, cell in zip(value.__code__.co_freevars, value.__closure__ or ()):
            try:
                yield cell.cell_contents, f"{path}.<closure {name}>"
            except ValueError:  # an empty cell
                pass
        yield value.__defaults__, f"{path}.__defaults__"
        yield value.__kwdefaults__, f"{path}.__kwdefaults__"
        if not _is_library(value.__module__):
            # Globals the function reads: a module-level generator it draws from.
            for name in sorted(_code_names(value.__code__)):
                if name in value.__globals__:
                    yield value.__globals__[name], f"{path}.__globals__[{name!r}]"
    # Bound methods, builtin methods of a Generator (``rng.random``), ...
    owner = getattr(value, "__self__", None) if callable(value) else None
    if owner is not None and not isinstance(owner, types.ModuleType):
        yield owner, f"{path}.__self__"
    if isinstance(value, types.MethodType):
        yield value.__func__, f"{path}.__func__"

    # Instances: __dict__, __slots__, class-level data, scikit-learn params.
    try:
        attributes = object.__getattribute__(value, "__dict__")
    except (AttributeError, TypeError):
        attributes = None
    if isinstance(attributes, Mapping):
        for name, item in list(attributes.items()):
            yield item, f"{path}.{name}"
    cls = type(value)
    for klass in cls.__mro__:
        slots = vars(klass).get("__slots__", ())
        for name in (slots,) if isinstance(slots, str) else slots:
            if name in ("__dict__", "__weakref__"):
                continue
            try:
                yield getattr(value, name), f"{path}.{name}"
            except AttributeError:  # an unset slot
                pass
    if not _is_library(cls.__module__):
        for klass, name, item in _class_data(cls):
            yield item, f"{path}<class {klass.__name__}>.{name}"
    get_params = getattr(value, "get_params", None)
    if callable(get_params):
        try:
            params = get_params(deep=True)
        except Exception:  # not a scikit-learn estimator after all
            params = None
        if isinstance(params, Mapping):
            for key, item in params.items():
                yield item, f"{path}.get_params()[{key!r}]"


def _walk_random_state(obj, root):
    """Yield (path, description) of every random state reachable from ``obj``."""
    seen = set()
    stack = [(obj, root)]
    while stack:
        value, path = stack.pop()
        if isinstance(value, RANDOM_STATE_TYPES):
            yield path, type(value).__name__
            continue  # reported at every path, explored never
        if isinstance(value, _LEAF_TYPES) or isinstance(value, (type, types.ModuleType)):
            continue
        kind = _serialized_state_kind(value)
        if kind is not None:
            yield path, kind
            continue
        if id(value) in seen:
            continue
        seen.add(id(value))
        if type(value).__module__.partition(".")[0] == "numba":
            continue  # compiled dispatchers: no fitted state, huge graphs
        # Reversed so that the walk is depth-first in attribute order.
        stack.extend(reversed(list(_children(value, path))))


def find_random_state(obj, root=None):
    """Paths of every random state reachable from ``obj``.

    Walks instance ``__dict__`` and ``__slots__``, class-level data of
    non-library classes, lists, tuples, dicts (keys and values), sets, numpy
    object and structured arrays, ``get_params(deep=True)``,
    ``functools.partial`` objects, closures, defaults and read globals of
    functions, and the owners of bound methods (``rng.random``), so nested
    estimators, scorers and callables are covered. Flags numpy
    ``Generator``, ``BitGenerator``, ``SeedSequence``, ``RandomState``,
    ``random.Random`` and saved generator states (``bit_generator.state``
    dicts, ``get_state()`` / ``getstate()`` tuples).

    Parameters
    ----------
    obj : object
        Typically a fitted mechanism or estimator.
    root : str, optional
        Name the paths start with; default the type name of ``obj``.

    Returns
    -------
    paths : list of str
        One entry per path to a random state (an object reached by two paths
        is listed twice), e.g. ``'RandomizedResponse._rng'``; empty if none.
    """
    root = type(obj).__name__ if root is None else root
    return [path for path, _ in _walk_random_state(obj, root)]


# Modules whose classes and functions build random state when unpickled.
_RANDOM_MODULES = ("numpy.random", "random", "_random")

_STRING_OPS = frozenset(
    {
        "SHORT_BINUNICODE", "BINUNICODE", "BINUNICODE8", "UNICODE",
        "STRING", "BINSTRING", "SHORT_BINSTRING",
    }
)
_GET_OPS = frozenset({"GET", "BINGET", "LONG_BINGET"})
_PUT_OPS = frozenset({"PUT", "BINPUT", "LONG_BINPUT"})


def _pickle_globals(data):
    """Every (module, name) a pickle imports, via GLOBAL or STACK_GLOBAL."""
    found = []
    memo = {}
    recent = []  # values pushed by the last opcodes: str, or None for anything else
    for opcode, arg, _ in pickletools.genops(data):
        name = opcode.name
        if name == "GLOBAL":
            module, _, attr = arg.partition(" ")
            found.append((module, attr))
        elif name == "STACK_GLOBAL":
            # Its operands are the two strings pushed (or fetched from the memo) just before.
            module, attr = recent[-2:] if len(recent) >= 2 else (None, None)
            found.append((module, attr))
        if name in _STRING_OPS:
            recent.append(arg)
        elif name in _GET_OPS:
            recent.append(memo.get(arg))
        elif name == "MEMOIZE":
            memo[len(memo)] = recent[-1] if recent else None
        elif name in _PUT_OPS:
            memo[arg] = recent[-1] if recent else None
        elif name == "FRAME":
            pass  # framing only: it may fall between the two operands
        else:
            recent.append(None)
        del recent[:-2]
    return found


def pickle_random_state_refs(obj, protocol=pickle.HIGHEST_PROTOCOL):
    """References to random-state classes and functions in ``pickle.dumps(obj)``.

    Scans the opcodes (nothing is unpickled) for GLOBAL / STACK_GLOBAL
    imports from ``numpy.random`` or ``random``: they reveal generator state
    even when it hides behind a custom ``__reduce__`` that the attribute walk
    of :func:`find_random_state` cannot see.

    Parameters
    ----------
    obj : object
        Must be picklable (AssertionError otherwise: an object that cannot be
        pickled cannot be audited this way).
    protocol : int, optional
        Pickle protocol; protocols < 4 use GLOBAL, later ones STACK_GLOBAL.

    Returns
    -------
    refs : list of str
        Dotted names such as ``'numpy.random._pickle.__generator_ctor'``,
        each listed once, in pickle order; empty if none.
    """
    try:
        data = pickle.dumps(obj, protocol=protocol)
    except Exception as exc:
        raise AssertionError(
            f"{type(obj).__name__} cannot be pickled, so its pickle cannot be audited: {exc!r}"
        ) from exc
    refs = []
    for module, attr in _pickle_globals(data):
        if module is None:
            refs.append(f"<unresolved STACK_GLOBAL>.{attr}")
        elif any(module == m or module.startswith(m + ".") for m in _RANDOM_MODULES):
            refs.append(f"{module}.{attr}")
    return list(dict.fromkeys(refs))


def assert_no_random_state(obj, root=None):
    """Raise AssertionError if any random state is reachable from ``obj``.

    Runs :func:`find_random_state` on ``obj`` and on a pickle round-trip copy
    of it (state a ``__setstate__`` rebuilds), and
    :func:`pickle_random_state_refs` on its pickle. An object that cannot be
    pickled fails too: its pickle could not be audited.
    """
    root = type(obj).__name__ if root is None else root
    findings = [f"{path} ({kind})" for path, kind in _walk_random_state(obj, root)]
    findings += [f"pickle imports {ref}" for ref in pickle_random_state_refs(obj)]
    clone = pickle.loads(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL))
    findings += [
        f"unpickled copy: {path} ({kind})" for path, kind in _walk_random_state(clone, root)
    ]
    _fail_if(findings, f"random state reachable from {root}")


# -- statistical audits of fitted discrete mechanisms ----------------------------
def _row_index(mechanism, labels):
    """Row of ``transition_matrix_`` of each label (labels must be input values)."""
    rows = {value: i for i, value in enumerate(np.asarray(mechanism.input_values_).tolist())}
    labels = np.asarray(labels)
    try:
        return np.array([rows[value] for value in labels.tolist()], dtype=np.int64)
    except KeyError:
        raise ValueError("the audited labels must be among the mechanism's input_values_") from None


def _bernstein_halfwidth(variance, log_term):
    """t with 2 exp(-t^2 / (2 (variance + t / 3))) = alpha, log_term = log(2 / alpha).

    Bernstein's inequality for a sum of independent variables in [0, 1] with
    total variance ``variance``: |sum - mean| exceeds t with probability at
    most alpha, whatever the sample size.
    """
    return log_term / 3.0 + math.sqrt((log_term / 3.0) ** 2 + 2.0 * variance * log_term)


def audit_sampler(mechanism, labels=None, n_per_label=20_000, alpha=1e-7):
    """Check that ``transform`` samples exactly ``transition_matrix_``, tails included.

    For each audited input value, ``n_per_label`` copies of it are randomized
    in one release and compared with its row of the matrix three ways:

    * support: every output is one of ``output_values_`` and has positive
      probability in the row (a float artifact or an impossible output is a
      finding whatever its frequency);
    * a chi-square test with cells pooled from the smallest expectation up,
      at level ``alpha / (2 m)`` for ``m`` audited rows;
    * tail coverage: every output expected at least
      ``T = log(2 m k / alpha)`` times (``k`` outputs) must be observed. A
      correct sampler misses such an output with probability at most
      ``exp(-T)``, so the union over the ``m k`` cells stays below
      ``alpha / 2``; a sampler that never emits rare outputs is flagged
      however small their total mass.

    Parameters
    ----------
    mechanism : fitted discrete mechanism
        Exposes ``input_values_``, ``output_values_`` and
        ``transition_matrix_``; randomized with ``transform`` (which charges
        its accountant, if any).
    labels : array-like, optional
        Input values to audit (default: all ``input_values_``).
    n_per_label : int
        Draws per audited input.
    alpha : float
        Probability that a correct sampler is flagged (the whole audit).

    Returns
    -------
    pvalues : dict
        Chi-square p-value per audited row index.

    Raises
    ------
    AssertionError
        Listing every finding.
    """
    matrix = np.asarray(mechanism.transition_matrix_, dtype=np.float64)
    inputs = np.asarray(mechanism.input_values_)
    outputs = np.asarray(mechanism.output_values_)
    labels = inputs if labels is None else np.asarray(labels, dtype=inputs.dtype)
    rows = _row_index(mechanism, labels)
    column = {value: j for j, value in enumerate(outputs.tolist())}
    m, k = len(rows), outputs.shape[0]
    chi_level = alpha / (2 * m)
    must_see = math.log(2 * m * k / alpha)
    findings, pvalues = [], {}
    for label, row in zip(labels, rows):
        samples = np.asarray(mechanism.transform(np.repeat(label, n_per_label)))
        values, counts = np.unique(samples, return_counts=True)
        observed = np.zeros(k)
        outside = []
        for value, count in zip(values.tolist(), counts):
            j = column.get(value)
            if j is None or matrix[row, j] == 0:
                outside.append((value, int(count)))
            else:
                observed[j] = count
        where = f"row {row} (input_values_[{row}])"
        if outside:
            shown = ", ".join(f"{v!r} x{c}" for v, c in outside[:5])
            findings.append(
                f"{where}: {sum(c for _, c in outside)} output(s) outside the row's support "
                f"(not in output_values_ or of probability 0): {shown}"
            )
        expected = matrix[row] * n_per_label
        # Outputs outside the support are reported above; the fit test is on the rest.
        inside = observed.sum()
        p = _pooled_chi_square(observed, matrix[row] * inside) if inside else 0.0
        pvalues[int(row)] = p
        if p < chi_level:
            z = np.abs(observed - expected) / np.sqrt(np.maximum(expected, 1.0))
            detail = ", ".join(
                f"output_values_[{j}]: observed {int(observed[j])}, expected {expected[j]:.1f}"
                for j in np.argsort(-z)[:3]
            )
            findings.append(f"{where}: chi-square p = {p:.3g} < {chi_level:.3g} ({detail})")
        missing = np.flatnonzero((expected >= must_see) & (observed == 0))
        if missing.size:
            detail = ", ".join(
                f"output_values_[{j}] (expected {expected[j]:.1f})" for j in missing[:8]
            )
            findings.append(
                f"{where}: {missing.size} output(s) never observed although each is expected "
                f">= {must_see:.1f} times: {detail}"
            )
    _fail_if(findings, f"{type(mechanism).__name__} does not sample its transition_matrix_")
    return pvalues


def _same_label_triples(y):
    """Rows grouped in threes (i, j, l) sharing a label; leftovers dropped."""
    _, inverse = np.unique(y, return_inverse=True)
    triples = []
    for code in np.unique(inverse):
        rows = np.flatnonzero(inverse == code)
        usable = rows[: rows.shape[0] // 3 * 3]
        triples.append(usable.reshape(-1, 3))
    return np.concatenate(triples) if triples else np.empty((0, 3), dtype=np.int64)


def audit_copies_independent(mechanism, y, alpha=1e-7):
    """Check that copies and repeated releases of a fitted mechanism draw independent noise.

    A deepcopy and a pickle round-trip copy are made first; then the
    original randomizes ``y`` twice and each copy once. For every pair
    ``(a, b)`` of these four releases, the number of rows where ``a`` and
    ``b`` agree must match independent draws (two-sided, at level
    ``alpha / 6`` per pair). A copy replaying a stored generator or seed
    agrees on every row; antithetic or otherwise coupled noise agrees too
    rarely.

    * With a ``transition_matrix_``, row ``i`` agrees with probability
      ``q_i = sum_j P[y_i, j]**2`` and Bernstein's inequality bounds the
      deviation of the count from ``sum q_i``.
    * Without one (continuous mechanisms), rows sharing a label are taken in
      threes ``(i, j, l)``: ``a_i == b_i`` is compared with the reference
      ``a_j == b_l``, which has the same distribution when releases are
      independent and rows with one label are exchangeable; Hoeffding's
      inequality bounds the difference of the two counts.

    Parameters
    ----------
    mechanism : fitted mechanism
        Fitted with ``random_state=None`` (an int seed is *meant* to
        reproduce). Its accountant, if any, is charged for four releases.
    y : array-like of shape (n_samples,)
        Labels: among ``input_values_`` for a discrete mechanism; for the
        others, few distinct values repeated many times (every value's
        count beyond a multiple of 3 is unused).
    alpha : float
        Probability that independent releases are flagged.

    Returns
    -------
    agreement : dict
        Observed agreement rate per pair, and the ``'expected'`` rate.

    Raises
    ------
    AssertionError
        Listing every pair whose agreement is out of bounds.
    """
    y = np.asarray(y)
    n_pairs = 6
    log_term = math.log(2 * n_pairs / alpha)
    matrix = getattr(mechanism, "transition_matrix_", None)
    if matrix is not None:
        q = np.sum(np.asarray(matrix, dtype=np.float64)[_row_index(mechanism, y)] ** 2, axis=1)
        tested = np.arange(y.shape[0])
        halfwidth = _bernstein_halfwidth(np.sum(q * (1 - q)), log_term)
    else:
        triples = _same_label_triples(y)
        tested = triples[:, 0]
        # Each triple adds an independent difference in [-1, 1] of mean 0.
        halfwidth = math.sqrt(2.0 * triples.shape[0] * log_term)
    n = tested.shape[0]
    # Copies first, so that they hold whatever state the original starts from.
    deep = copy.deepcopy(mechanism)
    unpickled = pickle.loads(pickle.dumps(mechanism))
    releases = {
        "first release": mechanism.transform(y),
        "second release": mechanism.transform(y),
        "deepcopy": deep.transform(y),
        "pickled copy": unpickled.transform(y),
    }
    releases = {name: np.asarray(out) for name, out in releases.items()}
    names = list(releases)
    agreement, findings = {}, []
    for i, a in enumerate(names):
        for b in names[i + 1 :]:
            agree = int(np.sum(releases[a][tested] == releases[b][tested]))
            if matrix is not None:
                expected = float(q.sum())
            else:
                expected = float(np.sum(releases[a][triples[:, 1]] == releases[b][triples[:, 2]]))
            agreement[f"{a} vs {b}"] = agree / n
            agreement.setdefault("expected", expected / n)
            if abs(agree - expected) > halfwidth:
                findings.append(
                    f"{a} vs {b}: outputs agree on {agree}/{n} rows ({agree / n:.3f}); "
                    f"independent draws agree on {expected / n:.3f} +- {halfwidth / n:.3f}"
                )
    _fail_if(findings, f"releases of {type(mechanism).__name__} share noise")
    return agreement


def audit_prior_is_noisy(make_mechanism, y, n_fits=4):
    """Check that a privately estimated prior is noisy, and freshly so at each fit.

    Fits ``make_mechanism()`` ``n_fits`` times on ``y`` and flags

    * a prior that varies by less than half a label between all fits (in
      counts: ``prior_ * n_labels``): noise missing, or replayed from a seed;
    * any fit whose prior is within half a label of the exact empirical
      histogram of ``y`` over ``input_values_`` (labels mapped to the nearest
      domain value).

    A correct discrete-Laplace histogram of scale ``2 / eps1`` over ``k``
    well-populated bins hits the exact counts with probability about
    ``tanh(eps1 / 4) ** k`` per fit, and repeats itself with probability at
    most about ``(sum_z p(z)^2) ** k``; choose ``y`` so that every domain
    value holds many labels, and ``k`` and ``prior_epsilon`` so that these are
    negligible (e.g. ``k = 10``, ``eps1 = 0.5``: below 1e-9).

    Parameters
    ----------
    make_mechanism : callable
        Returns a new unfitted prior-based mechanism with ``random_state=None``
        and no public prior.
    y : array-like
        Labels.
    n_fits : int
        Number of independent fits.

    Returns
    -------
    priors : ndarray of shape (n_fits, k)

    Raises
    ------
    ValueError
        If the mechanism did not estimate a prior (``prior_epsilon_ == 0``).
    AssertionError
        Listing the findings.
    """
    y = np.asarray(y, dtype=np.float64)
    fits = [make_mechanism().fit(y) for _ in range(n_fits)]
    name = type(fits[0]).__name__
    if not all(fit.prior_epsilon_ > 0 for fit in fits):
        raise ValueError(f"{name} used a public prior (prior_epsilon_ == 0): nothing to audit")
    values = fits[0].input_values_
    codes = nearest_domain_index(values, y.ravel())
    n_labels = codes.shape[0]
    exact = np.bincount(codes, minlength=values.shape[0]) / n_labels
    priors = np.array([fit.prior_ for fit in fits], dtype=np.float64)
    findings = []
    spread = (priors.max(axis=0) - priors.min(axis=0)) * n_labels
    if spread.max() < 0.5:
        findings.append(
            f"prior_ varies by at most {spread.max():.3g} labels per bin over {n_fits} independent "
            "fits: its noise is missing or replayed"
        )
    distance = np.abs(priors - exact).max(axis=1) * n_labels
    for i in np.flatnonzero(distance < 0.5):
        findings.append(
            f"fit {i}: prior_ is within {distance[i]:.3g} labels per bin of the exact label "
            "histogram"
        )
    _fail_if(findings, f"{name}'s prior is not a fresh noisy histogram")
    return priors


# -- private labels in messages -------------------------------------------------
def _label_forms(value):
    """The ways a message could spell ``value``: repr, str, :g and float forms."""
    forms = {repr(value), str(value)}
    if isinstance(value, (numbers.Number, np.number)) and not isinstance(value, (bool, np.bool_)):
        number = float(value)
        forms |= {
            f"{value:g}",
            repr(number),
            np.format_float_positional(number, trim="-"),
            np.format_float_scientific(number, trim="-"),
        }
    return sorted(form for form in forms if form)


def _distinct(values):
    return list(dict.fromkeys(np.asarray(list(values), dtype=object).ravel().tolist()))


def _label_pattern(form):
    # A whole token: 3.7 must not match inside 13.75, nor 'cat' inside 'category';
    # a sentence's full stop after the value still counts.
    return re.compile(r"(?<![\w.])" + re.escape(form) + r"(?!\w|\.\d)")


class _LogCapture(logging.Handler):
    def __init__(self):
        super().__init__(level=logging.DEBUG)
        self.records = []

    def emit(self, record):
        self.records.append(record)


def audit_messages_have_no_labels(call, labels, public=()):
    """Run a call that must fail; flag any private label its messages quote.

    Searches the exception's message and arguments, its notes, every chained
    cause / context (printed in tracebacks), and the warnings and log
    records emitted during the call, for each label written as ``repr``,
    ``str``, ``:g``, and numpy's positional and scientific forms, as whole
    tokens. Pass labels whose spellings cannot occur by chance (not 0 or 1,
    which count things in any message).

    Parameters
    ----------
    call : callable
        Called with no arguments; must raise.
    labels : iterable
        The private label values the call received.
    public : iterable, optional
        Public values a message may name (declared classes, bounds): a label
        spelled like one of them is not searched for, since a message naming
        the declared classes cannot be told from one quoting that label.

    Returns
    -------
    error : Exception
        What the call raised, for further checks on its type and message.

    Raises
    ------
    AssertionError
        If the call does not raise, or a label is quoted anywhere.
    """
    handler = _LogCapture()
    root_logger = logging.getLogger()
    old_level = root_logger.level
    root_logger.addHandler(handler)
    root_logger.setLevel(logging.DEBUG)
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            try:
                call()
            except Exception as exc:  # the failure under audit
                error = exc
            else:
                error = None
    finally:
        root_logger.removeHandler(handler)
        root_logger.setLevel(old_level)
    if error is None:
        raise AssertionError("the audited call did not raise; there is no error message to audit")
    texts = []
    seen, exc = set(), error
    chain = [error]
    while chain:
        exc = chain.pop()
        if exc is None or id(exc) in seen:
            continue
        seen.add(id(exc))
        where = "error" if exc is error else f"chained {type(exc).__name__}"
        message = f"{type(exc).__name__}: {exc}"
        texts.append((where, message))
        # Arguments a custom __str__ leaves out of the message.
        texts += [
            (f"{where} argument", repr(arg))
            for arg in exc.args
            if str(arg) not in message and repr(arg) not in message
        ]
        texts += [(f"{where} note", str(note)) for note in getattr(exc, "__notes__", ())]
        chain += [exc.__cause__, exc.__context__]
    texts += [(f"warning {w.category.__name__}", str(w.message)) for w in caught]
    texts += [(f"log record {r.name}", r.getMessage()) for r in handler.records]
    _fail_if(_quoted_labels(texts, labels, public), "messages quote private labels")
    return error


def _quoted_labels(texts, labels, public):
    """Findings: each (where, text) that spells one of ``labels``."""
    public_forms = {form for value in _distinct(public) for form in _label_forms(value)}
    findings = []
    for value in _distinct(labels):
        forms = [form for form in _label_forms(value) if form not in public_forms]
        for where, text in texts:
            # One finding per label and text: its first spelling found.
            form = next((f for f in forms if _label_pattern(f).search(text)), None)
            if form is not None:
                findings.append(f"{where} quotes a private label as {form!r}: {text!r}")
    return findings


def audit_output_has_no_labels(call, labels, public=()):
    """Run a call that must succeed; flag any private value its output quotes.

    The counterpart of :func:`audit_messages_have_no_labels` for what a
    successful call prints (``verbose`` output, progress bars), warns or
    logs: stdout, stderr, warnings and log records are searched for each of
    ``labels`` (private label values, or exact label statistics such as a
    mean or class counts) in the same spellings.

    Returns
    -------
    output : str
        Everything printed to stdout and stderr, for further checks.
    """
    handler = _LogCapture()
    root_logger = logging.getLogger()
    old_level = root_logger.level
    root_logger.addHandler(handler)
    root_logger.setLevel(logging.DEBUG)
    out, err = io.StringIO(), io.StringIO()
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(out), \
                contextlib.redirect_stderr(err):
            warnings.simplefilter("always")
            call()
    finally:
        root_logger.removeHandler(handler)
        root_logger.setLevel(old_level)
    texts = [("stdout", out.getvalue()), ("stderr", err.getvalue())]
    texts += [(f"warning {w.category.__name__}", str(w.message)) for w in caught]
    texts += [(f"log record {r.name}", r.getMessage()) for r in handler.records]
    _fail_if(_quoted_labels(texts, labels, public), "output quotes private values")
    return out.getvalue() + err.getvalue()
