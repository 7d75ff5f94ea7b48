"""Privacy–utility studies: mechanisms × epsilon × seeds, with reference rows.

:func:`privacy_utility_study` fits a label-DP estimator for every mechanism,
budget and seed of a grid, scores each fit on a test set and returns one
tidy row per fit, next to two reference rows that say what the numbers
mean: the non-private model, and a constant predictor from an epsilon-DP
statistic of the labels (their mean for regression, the majority class for
classification). At small epsilon a mechanism that "wins" may only be
predicting that constant; without it in the table, that looks like
learning. :func:`plot_study` draws the privacy–utility curves.

.. warning::
   A study is a research tool of the labels party: it scores every fit on
   the TRUE test labels, fits the non-private reference on the true
   training labels, and uses fixed seeds, so its table and figures are
   statistics of the private labels. Run it on data you own (or public
   data) and do not release its outputs as if they were label-DP.
"""

from __future__ import annotations

import math
import multiprocessing
import time
import traceback
import warnings
from collections.abc import Callable
from numbers import Integral, Real
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, ClassifierMixin, RegressorMixin, clone
from sklearn.metrics import check_scoring
from sklearn.model_selection import GridSearchCV, train_test_split
from sklearn.utils import get_tags
from sklearn.utils.validation import check_array, check_consistent_length

from ._accountant import BudgetAccountant
from .estimators._base import BaseLabelDPEstimator
from .mechanisms._base import BaseLabelMechanism
from .mechanisms._prior import noisy_histogram, noisy_mean
from .mechanisms._validation import MIN_EPSILON, encode_classes
from .plotting import PrivacyUtilityDisplay
from .utils._random import (
    PrivacyLeakWarning,
    derive_random_state,
    public_fingerprint,
    release_generator,
)

if TYPE_CHECKING:  # optional dependency: only named in hints
    from matplotlib.axes import Axes
    from pandas import DataFrame

__all__ = ["privacy_utility_study", "plot_study", "NON_PRIVATE", "DP_CONSTANT"]

#: ``method`` of the reference rows.
NON_PRIVATE = "non-private"
DP_CONSTANT = "dp-constant"

#: Columns of the table, in order.
COLUMNS = (
    "method", "reference", "private", "epsilon", "seed", "score", "fit_time", "epsilon_spent",
    "status", "error",
)

# -- reference predictors ------------------------------------------------------
class _ConstantRegressor(RegressorMixin, BaseEstimator):
    """Predicts one public (or epsilon-DP) value."""

    def __init__(self, constant=0.0):
        self.constant = constant

    def fit(self, X, y):
        return self

    def predict(self, X):
        return np.full(len(X), self.constant, dtype=np.float64)


class _ConstantClassifier(ClassifierMixin, BaseEstimator):
    """Predicts one class."""

    def __init__(self, constant=None, classes=None):
        self.constant = constant
        self.classes = classes

    def fit(self, X, y):
        return self

    def predict(self, X):
        return np.full(len(X), self.constant, dtype=np.asarray(self.classes).dtype)


def _dp_mean(y, bounds, epsilon, rng):
    """epsilon-DP mean of labels in public ``bounds`` (label-replacement DP):
    the library's :func:`~skdp_label.mechanisms._prior.noisy_mean` (exact
    integer noise on a randomized-rounded sum), clipped to the bounds (a
    constant predictor may be biased; its level must be a valid label)."""
    mean, _ = noisy_mean(np.asarray(y, dtype=np.float64), bounds, epsilon, rng)
    return float(np.clip(mean, bounds[0], bounds[1]))


def _dp_majority(y, classes, epsilon, rng):
    """epsilon-DP majority class: the mode of a noisy class histogram."""
    codes = encode_classes(np.asarray(y), classes)
    return classes[int(np.argmax(noisy_histogram(codes, classes.shape[0], epsilon, rng)))]


# -- running fits with a time limit ---------------------------------------------
def _run_fit(task, data):
    """Fit and score one estimator; the result holds numbers and a message."""
    estimator, scoring = task
    X_train, y_train, X_test, y_test = data
    with warnings.catch_warnings():
        # Fixed seeds and true-label scores are what a study is (see the module note).
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        start = time.perf_counter()
        try:
            estimator.fit(X_train, y_train)
            fit_time = time.perf_counter() - start
            score = float(check_scoring(estimator, scoring=scoring)(estimator, X_test, y_test))
        except Exception as exc:  # one failed row must not end a long study
            return {"status": "error", "error": f"{type(exc).__name__}: {exc}",
                    "fit_time": time.perf_counter() - start}
    return {"status": "ok", "score": score, "fit_time": fit_time}


def _serve(conn, data):
    """Worker loop: run the tasks it receives until told to stop."""
    conn.send("ready")
    while True:
        task = conn.recv()
        if task is None:
            return
        try:
            result = _run_fit(task, data)
        except BaseException:  # noqa: BLE001 - report, never die silently
            result = {"status": "error", "error": traceback.format_exc(limit=1)}
        conn.send(result)


class _Runner:
    """Runs fits in a worker process killed at ``time_limit`` seconds.

    The worker comes from a fork server or is spawned (a plain fork is
    unsafe once OpenMP or BLAS threads exist); it receives the data once
    and serves fits until one exceeds the limit; that worker is then
    killed (the fit really stops) and a fresh one serves the next fit.
    Without a time limit, fits run in this process.
    """

    def __init__(self, time_limit, data):
        self.time_limit = time_limit
        self.data = data
        self._process = self._conn = None

    def _start(self):
        if "forkserver" in multiprocessing.get_all_start_methods():
            # Forked from a clean server that has imported this module once:
            # a fresh worker then starts in milliseconds.
            ctx = multiprocessing.get_context("forkserver")
            ctx.set_forkserver_preload([__name__])
        else:
            ctx = multiprocessing.get_context("spawn")
        self._conn, child = ctx.Pipe()
        self._process = ctx.Process(target=_serve, args=(child, self.data), daemon=True)
        self._process.start()
        child.close()
        self._conn.recv()  # imports and data loading are not part of the time limit

    def _stop(self, kill):
        if self._process is None:
            return
        if kill:
            self._process.kill()
        else:
            try:
                self._conn.send(None)
            except OSError:
                self._process.kill()
        self._process.join()
        self._conn.close()
        self._process = self._conn = None

    def run(self, task):
        if self.time_limit is None:
            return _run_fit(task, self.data)
        if self._process is None:
            self._start()
        self._conn.send(task)
        try:
            if self._conn.poll(self.time_limit):
                return self._conn.recv()
        except (EOFError, OSError):
            code = self._process.exitcode
            self._stop(kill=True)
            return {"status": "error", "error": f"the worker process died (exit code {code})"}
        self._stop(kill=True)
        limit = f"{self.time_limit:g}"
        return {"status": "timeout", "error": f"fit exceeded the time limit of {limit} s"}

    def close(self):
        self._stop(kill=False)


# -- validation -------------------------------------------------------------------
def _check_list(values, name, check):
    if isinstance(values, (str, bytes)) or not hasattr(values, "__len__") or len(values) == 0:
        raise ValueError(f"{name} must be a non-empty list.")
    checked = [check(v) for v in values]
    if name != "mechanisms" and len(set(checked)) != len(checked):
        # A repeated seed or epsilon would repeat a release with the same noise.
        raise ValueError(f"{name} must be distinct.")
    return checked


def _check_epsilon(value):
    if isinstance(value, bool) or not isinstance(value, Real) or not MIN_EPSILON <= value < math.inf:
        raise ValueError(
            f"epsilons must be finite numbers of at least {MIN_EPSILON:g}; got {value!r}.")
    return float(value)


def _check_seed(value):
    if isinstance(value, bool) or not isinstance(value, Integral) or value < 0:
        raise ValueError(f"seeds must be non-negative integers; got {value!r}.")
    return int(value)


def _mechanism_labels(mechanisms):
    if isinstance(mechanisms, dict):
        items = list(mechanisms.items())
    else:
        items = [
            (m if isinstance(m, str) else type(m).__name__, m)
            for m in _check_list(mechanisms, "mechanisms", lambda m: m)
        ]
    if not items:
        raise ValueError("mechanisms must name at least one mechanism.")
    labels = [label for label, _ in items]
    if len(set(labels)) != len(labels) or {NON_PRIVATE, DP_CONSTANT} & set(labels):
        raise ValueError(
            f"mechanism labels must be unique and differ from {NON_PRIVATE!r} and "
            f"{DP_CONSTANT!r}; pass a dict {{label: mechanism}} to name them."
        )
    return items


def _study_accountant(accountant, estimator, items):
    """The one accountant every row is charged to: ``accountant``, else the one
    the template or the mechanism instances carry (the study must not bypass
    their budget), else a fresh unlimited one."""
    attached = [estimator.accountant] + [getattr(m, "accountant", None) for _, m in items]
    ledgers = {a.ledger_id: a for a in attached if isinstance(a, BudgetAccountant)}
    if accountant is not None:
        ledgers.pop(accountant.ledger_id, None)
    if len(ledgers) > (1 if accountant is None else 0):
        raise ValueError(
            "the study charges every fit to one accountant, but the estimator or its "
            "mechanisms carry another one, whose budget would be bypassed; pass that "
            "accountant as accountant= (or remove it from them)."
        )
    if accountant is None:
        accountant = next(iter(ledgers.values()), None)
    return BudgetAccountant() if accountant is None else accountant


def _check_test_set(estimator, X_train, X_test, y_test):
    """A given test set's shape and values, before anything runs: a bad one
    would fail the scoring of every row after its fit was charged."""
    allow_nan = get_tags(estimator).input_tags.allow_nan
    kwargs = dict(accept_sparse=True, dtype=None, ensure_2d=False, allow_nd=True)
    train = check_array(X_train, ensure_all_finite=False, **kwargs)
    test = check_array(X_test, ensure_all_finite=not allow_nan, input_name="X_test", **kwargs)
    if train.shape[1:] != test.shape[1:]:
        raise ValueError(
            f"X_test has {test.shape[1:]} features per row, X has {train.shape[1:]}.")
    y_test = np.asarray(y_test)
    numeric = y_test.dtype.kind in "fc"
    if estimator._task == "regression" or numeric:  # finite numbers (no value is quoted)
        check_array(y_test, ensure_2d=False, dtype=None if numeric else np.float64,
                    input_name="y_test")


def _public_range(estimator):
    """Public (lo, hi) of a regression estimator's labels, for the DP mean."""
    if estimator.bounds is not None:
        lo, hi = (float(v) for v in estimator.bounds)
    elif estimator.domain is not None:
        domain = np.asarray(estimator.domain, dtype=np.float64)
        lo, hi = float(domain.min()), float(domain.max())
    else:
        raise ValueError(
            "the epsilon-DP constant reference needs public label bounds: give the estimator "
            "bounds=(lo, hi) (or a domain)."
        )
    if not (np.isfinite(lo) and np.isfinite(hi) and lo < hi):
        raise ValueError("the estimator's bounds must be finite with lo < hi.")
    return lo, hi


def _check_configuration(estimator, X, y):
    """Every check a fit makes before it spends, without spending: returns
    the public inputs of its mechanism."""
    estimator._validate_params()
    estimator._check_inputs_before_spending(X, y, {})
    if estimator._task == "classification":
        y, classes, _ = estimator._validate_targets(y)
        plan = estimator._plan(y.shape[0], classes.shape[0])  # checks the budget split
        mechanism = estimator._make_mechanism(plan, float(estimator.epsilon), None, classes)
    else:
        mechanism = estimator._build_mechanism(
            float(estimator.epsilon), None, None, bounds=estimator.bounds, domain=estimator.domain
        )
    mechanism._validate_params()
    mechanism._check_epsilon_cap()
    mechanism._check_public_inputs()
    mechanism._validate_labels(y, reset=True)  # labels outside the bounds raise here


def _progress_bar(total, enabled):
    if not enabled:
        return None
    try:
        from tqdm.auto import tqdm
    except ImportError:  # optional: no bar without tqdm
        return None
    return tqdm(total=total, desc="privacy-utility study", unit="fit")


def _as_table(rows):
    try:
        import pandas as pd
    except ImportError:
        return rows
    return pd.DataFrame(rows, columns=list(COLUMNS)).astype({"seed": "Int64"})


def _records(table):
    return table.to_dict("records") if hasattr(table, "to_dict") else list(table)


# -- the study ----------------------------------------------------------------------
def privacy_utility_study(
    estimator: BaseEstimator,
    X: ArrayLike,
    y: ArrayLike,
    *,
    mechanisms: list[str | BaseLabelMechanism] | dict[str, BaseLabelMechanism],
    epsilons: ArrayLike,
    seeds: list[int] | tuple[int, ...] = (0, 1, 2),
    X_test: ArrayLike | None = None,
    y_test: ArrayLike | None = None,
    test_size: float = 0.25,
    split_random_state: int | None = 0,
    scoring: str | Callable | None = None,
    time_limit: float | None = None,
    accountant: BudgetAccountant | None = None,
    references: bool = True,
    progress: bool = True,
) -> DataFrame | list[dict]:
    """Fit a label-DP estimator for every mechanism × epsilon × seed and
    score it, next to a non-private and an epsilon-DP constant reference.

    .. warning::
       Scores are computed on the TRUE test labels and the non-private
       reference is fitted on the true training labels: this is a research
       tool for the labels party, about data it owns (or public data). Its
       table and figures are statistics of the private labels; do not
       release them as label-DP outputs.

    Parameters
    ----------
    estimator : LabelDPRegressor or LabelDPClassifier
        Unfitted template. For each row a clone gets the row's
        ``mechanism``, ``epsilon``, the study's ``accountant`` and a seed.
        A regressor needs public ``bounds`` (or a ``domain``), a classifier
        its ``classes``: the epsilon-DP constant is computed within them.
    X, y : array-like
        Features and labels. Split into training and test parts unless
        ``X_test`` and ``y_test`` are given.
    mechanisms : list of (str or mechanism) or dict {label: mechanism}
        Mechanisms to compare (registered names or instances).
    epsilons : list of float
        Budgets per label of one fit.
    seeds : list of int, default=(0, 1, 2)
        One fit per seed. Each (mechanism, epsilon, seed) gets its own noise
        stream, derived from the seed and the row's public description, so
        rows never share noise and a study is reproducible. Fixed seeds are
        what a study needs and what a release must never use.
    X_test, y_test : array-like, optional
        Given test set (then ``X, y`` are all training data).
    test_size : float, default=0.25
        Test share of ``train_test_split`` when no test set is given.
    split_random_state : int, default=0
        Seed of that split (the same for every row).
    scoring : str or callable, optional
        scikit-learn scoring on the test set; ``None`` uses the estimator's
        ``score`` (R² for regression, accuracy for classification).
    time_limit : float, optional
        Seconds per row (fit and scoring). A row that exceeds it is
        recorded with ``status='timeout'``: it runs in a worker process,
        which is killed (the fit really stops; whatever it charged before
        is in ``epsilon_spent``). ``None`` runs fits in this process. As
        with any ``multiprocessing`` code, a script that sets it must guard
        its entry point with ``if __name__ == "__main__":``, and the
        estimator must be importable by the worker (not defined in
        ``__main__``).
    accountant : BudgetAccountant, optional
        Charged with every release of the study (each fit and each
        epsilon-DP constant, as its own release); by default the
        accountant of ``estimator`` or of the mechanism instances, else a
        fresh unlimited one. Another accountant attached to them is refused
        (its budget would be bypassed). The whole study is checked against
        it before anything runs.
    references : bool, default=True
        Whether to add the reference rows: ``'non-private'`` (the base
        estimator fitted on the true labels, tuned over the estimator's
        ``param_grid`` if it has one; epsilon and ``epsilon_spent``
        infinite; one row) and ``'dp-constant'`` (for each epsilon and seed,
        a constant predictor from the epsilon-DP mean of the training labels
        within the public bounds, or the epsilon-DP majority class; charged
        epsilon).
    progress : bool, default=True
        Show a tqdm progress bar (when tqdm is installed).

    Returns
    -------
    table : pandas.DataFrame or list of dict
        One row per fit (a DataFrame when pandas is installed), with
        columns ``method`` (mechanism label or reference name),
        ``reference`` (bool), ``private`` (False only for the
        ``'non-private'`` row: the labels party's own reference, fitted on
        the true labels, never a label-DP result; it is not a release, so
        the ledger holds no entry for it), ``epsilon``, ``seed``, ``score`` (NaN unless
        ``status='ok'``), ``fit_time`` (seconds), ``epsilon_spent`` (read
        from the accountant's ledger around the row), ``status`` (``'ok'``,
        ``'timeout'`` or ``'error'``) and ``error`` (message or None).

    Raises
    ------
    ValueError
        On invalid inputs or any configuration a fit would refuse, before
        anything is fitted or spent.

    See Also
    --------
    plot_study : draw the table's privacy–utility curves.

    Examples
    --------
    >>> from sklearn.datasets import load_diabetes
    >>> from sklearn.linear_model import Ridge
    >>> from skdp_label import LabelDPRegressor
    >>> from skdp_label.study import privacy_utility_study
    >>> X, y = load_diabetes(return_X_y=True)
    >>> est = LabelDPRegressor(Ridge(alpha=0.1), bounds=(25, 346))
    >>> table = privacy_utility_study(est, X, y, mechanisms=["laplace", "rr-on-bins"],
    ...                               epsilons=[0.5, 4.0], seeds=[0, 1], progress=False)
    >>> table.shape
    (13, 10)
    >>> sorted(set(table["method"]))
    ['dp-constant', 'laplace', 'non-private', 'rr-on-bins']
    >>> table.loc[table["method"] == "laplace", "epsilon_spent"].tolist()
    [0.5, 0.5, 4.0, 4.0]
    """
    if not isinstance(estimator, BaseLabelDPEstimator):
        raise ValueError(
            "estimator must be a LabelDPRegressor or LabelDPClassifier (unfitted template); "
            f"got {type(estimator).__name__}."
        )
    items = _mechanism_labels(mechanisms)
    epsilons = _check_list(epsilons, "epsilons", _check_epsilon)
    seeds = _check_list(seeds, "seeds", _check_seed)
    if time_limit is not None and (
        isinstance(time_limit, bool) or not isinstance(time_limit, Real) or not time_limit > 0
    ):
        raise ValueError(
            f"time_limit must be a positive number of seconds or None; got {time_limit!r}."
        )
    if accountant is not None and not isinstance(accountant, BudgetAccountant):
        raise ValueError("accountant must be a BudgetAccountant or None.")
    accountant = _study_accountant(accountant, estimator, items)
    if (X_test is None) != (y_test is None):
        raise ValueError("give both X_test and y_test, or neither.")
    check_consistent_length(X, y)
    if np.ndim(y) > 1 and np.shape(y)[1] > 1:
        # Each row's labels would all be released: k times epsilon per fit, and the
        # DP constant's mean of all the columns would be charged for one.
        raise ValueError(
            f"privacy_utility_study compares fits on one label column; y has {np.shape(y)[1]}.")
    if X_test is None:
        X_train, X_test, y_train, y_test = train_test_split(
            X, y, test_size=test_size, random_state=split_random_state
        )
    else:
        check_consistent_length(X_test, y_test)
        X_train, y_train = X, y
        _check_test_set(estimator, X_train, X_test, y_test)
    y_train = np.asarray(y_train)

    regression = estimator._task == "regression"
    if references:
        if regression:
            value_range = _public_range(estimator)
        else:
            classes = estimator._validate_targets(y_train)[1]
    configurations = []
    for label, mechanism in items:
        for eps in epsilons:
            template = clone(estimator).set_params(mechanism=mechanism, epsilon=eps)
            _check_configuration(template, X_train, y_train)
            configurations.append((label, eps, template.set_params(accountant=accountant)))
    check_scoring(estimator, scoring=scoring)
    n_fits = len(configurations) * len(seeds)
    total = sum(eps for _, eps, _ in configurations) * len(seeds)
    if references:
        total += sum(epsilons) * len(seeds)
    accountant.check(total)  # the whole study fits, or nothing runs

    rows = []
    bar = _progress_bar(n_fits + (1 + len(epsilons) * len(seeds)) * bool(references), progress)
    runner = _Runner(time_limit, (X_train, y_train, X_test, y_test))

    def spent_since(n_entries):
        # This row's own ledger entries, composed as the accountant does.
        return accountant._totals(accountant.ledger[n_entries:])[0]

    def add(method, eps, seed, result, spent):
        rows.append({
            "method": method, "reference": method in (NON_PRIVATE, DP_CONSTANT),
            # The non-private reference reads the true labels: not a release, no ledger entry.
            "private": method != NON_PRIVATE,
            "epsilon": eps, "seed": seed, "score": result.get("score", math.nan),
            "fit_time": result.get("fit_time", math.nan), "epsilon_spent": spent,
            "status": result["status"], "error": result.get("error"),
        })
        if bar is not None:
            bar.update()

    try:
        if references:
            base = clone(estimator.base_estimator)
            if estimator.param_grid is not None:  # tuned as the private fits are, on true labels
                base = GridSearchCV(base, estimator.param_grid, cv=estimator.cv)
            add(NON_PRIVATE, math.inf, None, runner.run((base, scoring)), math.inf)
        for label, eps, template in configurations:
            for seed in seeds:
                context = public_fingerprint("privacy_utility_study", label, eps)
                est = clone(template).set_params(random_state=derive_random_state(seed, context))
                before = len(accountant.ledger)
                result = runner.run((est, scoring))
                add(label, eps, seed, result, spent_since(before))
        if references:
            for eps in epsilons:
                for seed in seeds:
                    before = len(accountant.ledger)
                    accountant.spend(
                        eps, n_labels=int(y_train.shape[0]),
                        description="privacy_utility_study: epsilon-DP constant predictor",
                        details={"estimator": "privacy_utility_study", "step": DP_CONSTANT},
                    )
                    context = public_fingerprint("privacy_utility_study", DP_CONSTANT, eps)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore", PrivacyLeakWarning)
                        rng = release_generator(seed, context, owner="privacy_utility_study")
                    if regression:
                        model = _ConstantRegressor(_dp_mean(y_train, value_range, eps, rng))
                    else:
                        majority = _dp_majority(y_train, classes, eps, rng)
                        model = _ConstantClassifier(majority, classes)
                    del rng  # never kept
                    result = _run_fit((model, scoring), runner.data)
                    add(DP_CONSTANT, eps, seed, result, spent_since(before))
    finally:
        runner.close()
        if bar is not None:
            bar.close()
    return _as_table(rows)


def plot_study(
    table: DataFrame | list[dict], *, ax: Axes | None = None, references: bool = True,
    score_name: str = "score",
) -> dict[str, PrivacyUtilityDisplay]:
    """Draw the privacy–utility curves of a study's table on one axes.

    One curve per mechanism (mean score over the seeds of the rows with
    ``status='ok'``, with a ± one standard deviation band), the
    epsilon-DP constant as a dashed curve and the non-private model as a
    horizontal line, all through
    :class:`~skdp_label.plotting.PrivacyUtilityDisplay`. The figure shows
    true-label test scores: see the warning of :func:`privacy_utility_study`.

    Parameters
    ----------
    table : pandas.DataFrame or list of dict
        Output of :func:`privacy_utility_study`.
    ax : matplotlib Axes, optional
        Axes to draw on; a new figure is created when None.
    references : bool, default=True
        Whether to draw the reference rows.
    score_name : str, default="score"
        Label of the y axis.

    Returns
    -------
    displays : dict
        ``{method: PrivacyUtilityDisplay}``, in the table's order.
    """
    from .plotting import PrivacyUtilityDisplay

    records = _records(table)
    methods = list(dict.fromkeys(
        r["method"] for r in records if r["method"] != NON_PRIVATE
        and (references or r["method"] != DP_CONSTANT)
    ))
    displays = {}
    for i, method in enumerate(methods):
        style = {"ls": "--", "color": "gray", "marker": "s"} if method == DP_CONSTANT else {}
        displays[method] = PrivacyUtilityDisplay.from_study(
            records, method, baseline=references and i == 0, score_name=score_name, ax=ax,
            **style,
        )
        ax = displays[method].ax_
    return displays
