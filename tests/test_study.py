"""privacy_utility_study: the table, its reference rows, time limits, seeds,
the budget of every row, and nothing spent when the study is refused."""

import math
import multiprocessing
import sys

import numpy as np
import pytest
from sklearn.datasets import load_diabetes, load_digits
from sklearn.linear_model import LogisticRegression, Ridge

from skdp_label import BudgetAccountant, BudgetExceededError, LabelDPClassifier, LabelDPRegressor
from skdp_label.mechanisms import ExponentialMechanism
from skdp_label.study import COLUMNS, DP_CONSTANT, NON_PRIVATE, plot_study, privacy_utility_study

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.utils.PrivacyLeakWarning")

BOUNDS = (25.0, 346.0)


@pytest.fixture(scope="module")
def diabetes():
    return load_diabetes(return_X_y=True)


def _regressor(**params):
    return LabelDPRegressor(Ridge(alpha=0.1), bounds=BOUNDS, **params)


@pytest.fixture(scope="module")
def study(diabetes):
    X, y = diabetes
    acc = BudgetAccountant()
    table = privacy_utility_study(
        _regressor(), X, y, mechanisms=["laplace", "rr-on-bins"], epsilons=[0.1, 2.0],
        seeds=[0, 1, 2], accountant=acc, progress=False,
    )
    return table, acc


def test_table_has_one_row_per_fit_and_the_reference_rows(study):
    table, _ = study
    assert list(table.columns) == list(COLUMNS)
    # 1 non-private + 2 mechanisms x 2 eps x 3 seeds + 2 eps x 3 seeds of the DP constant
    assert len(table) == 1 + 12 + 6
    assert (table["status"] == "ok").all()
    counts = table.groupby("method").size().to_dict()
    assert counts == {"laplace": 6, "rr-on-bins": 6, DP_CONSTANT: 6, NON_PRIVATE: 1}
    assert table.loc[table["reference"], "method"].isin([NON_PRIVATE, DP_CONSTANT]).all()
    non_private = table[table["method"] == NON_PRIVATE].iloc[0]
    assert non_private["score"] > 0.3  # Ridge on this diabetes split: R^2 = 0.37
    # A constant has R^2 <= ~0 on the test set; an eps-DP constant is no better.
    assert (table.loc[table["method"] == DP_CONSTANT, "score"] < 0.05).all()


def test_every_row_spends_its_epsilon_and_the_ledger_agrees(study):
    table, acc = study
    private = table[table["method"] != NON_PRIVATE]
    np.testing.assert_allclose(private["epsilon_spent"], private["epsilon"], rtol=1e-12)
    assert math.isinf(table.loc[table["method"] == NON_PRIVATE, "epsilon_spent"].iloc[0])
    assert acc.spent_epsilon == pytest.approx(private["epsilon"].sum())
    # The releases: one per Laplace fit and per DP constant, two per RR-on-Bins fit
    # (its noisy prior histogram, then the labels).
    assert len(acc.ledger) == 6 + 6 + 2 * 6
    steps = [r["step"] for r in acc.to_records()]
    assert steps.count(DP_CONSTANT) == 6


def test_seeds_give_distinct_noise_and_reproduce(study, diabetes):
    table, _ = study
    for (_, eps), group in table[~table["reference"]].groupby(["method", "epsilon"]):
        assert group["score"].nunique() == 3  # three seeds, three different noise draws
    dp = table[table["method"] == DP_CONSTANT]
    assert dp.groupby("epsilon")["score"].nunique().min() == 3
    X, y = diabetes
    again = privacy_utility_study(
        _regressor(), X, y, mechanisms=["laplace"], epsilons=[2.0], seeds=[1],
        references=False, progress=False,
    )
    first = table[(table["method"] == "laplace") & (table["epsilon"] == 2.0) & (table["seed"] == 1)]
    assert again["score"].iloc[0] == first["score"].iloc[0]


def test_timed_out_fits_are_recorded_and_really_stopped(diabetes):
    from _slow_estimators import SlowOnFractionalLabels

    X, y = diabetes
    # Children of earlier tests in this worker process (e.g. a Dask cluster) may remain.
    children_before = set(multiprocessing.active_children())
    # The exponential mechanism on the grid 25, 132, 239, 346 (integer outputs, a 4x4
    # matrix: a fast fit). Warm the numba cache here so that the worker only loads it.
    grid = {"resolution": 107.0}
    ExponentialMechanism(2.0, bounds=BOUNDS, **grid).fit_transform(y)
    acc = BudgetAccountant()
    est = LabelDPRegressor(SlowOnFractionalLabels(), bounds=BOUNDS, mechanism_params=grid)
    table = privacy_utility_study(
        est, X, y, mechanisms=["laplace", "exponential"], epsilons=[2.0], seeds=[0],
        time_limit=8.0, accountant=acc, progress=False,
    )
    status = dict(zip(table["method"], table["status"]))
    # Laplace labels are fractional: the fit sleeps 120 s and is stopped at 8 s; the
    # next row runs in a fresh worker.
    assert status == {NON_PRIVATE: "ok", "laplace": "timeout", "exponential": "ok",
                      DP_CONSTANT: "ok"}
    row = table[table["method"] == "laplace"].iloc[0]
    assert math.isnan(row["score"]) and "time limit" in row["error"]
    assert row["epsilon_spent"] == 2.0  # charged before the labels were randomized
    # The worker was killed, not left running.
    assert set(multiprocessing.active_children()) <= children_before


@pytest.mark.parametrize(
    "kwargs, error",
    [
        (dict(mechanisms=["no-such-mechanism"]), ValueError),
        (dict(epsilons=[1.0, -1.0]), ValueError),
        (dict(epsilons=[1.0, 30.0]), ValueError),  # above the mechanisms' epsilon cap
        (dict(seeds=[0, -1]), ValueError),
        (dict(seeds=[1, 1]), ValueError),  # the same noise twice
        (dict(time_limit=0), ValueError),
        (dict(bounds=(25.0, 100.0)), ValueError),  # labels outside the declared bounds
        (dict(bounds=None), ValueError),  # no public bounds for the DP constant
        (dict(budget=3.0), BudgetExceededError),  # the whole study does not fit
    ],
)
def test_refused_studies_fit_and_spend_nothing(diabetes, kwargs, error):
    X, y = diabetes
    acc = BudgetAccountant(epsilon=kwargs.pop("budget", math.inf))
    est = LabelDPRegressor(Ridge(), bounds=kwargs.pop("bounds", BOUNDS),
                           mechanism_params={"out_of_bounds": "raise"})
    args = dict(mechanisms=["laplace", "unbiased"], epsilons=[1.0], seeds=[0, 1])
    args.update(kwargs)
    with pytest.raises(error):
        privacy_utility_study(est, X, y, accountant=acc, progress=False, **args)
    assert len(acc.ledger) == 0


def test_classification_study_has_an_epsilon_dp_majority_reference():
    X, y = load_digits(return_X_y=True)
    X, y = X[:600] / 16, y[:600]
    clf = LabelDPClassifier(LogisticRegression(max_iter=200), classes=list(range(10)))
    table = privacy_utility_study(clf, X, y, mechanisms=["rr"], epsilons=[0.5, 4.0], seeds=[0, 1],
                                  progress=False)
    assert (table["status"] == "ok").all()
    dp = table[table["method"] == DP_CONSTANT]
    assert (dp["score"] < 0.2).all()  # one class of ten, roughly balanced
    rr = table[table["method"] == "rr"].groupby("epsilon")["score"].mean()
    assert rr[4.0] > rr[0.5] and rr[4.0] > 0.7


def test_list_of_dicts_without_pandas(study, monkeypatch):
    from skdp_label import study as study_module

    rows = study[0].to_dict("records")
    monkeypatch.setitem(sys.modules, "pandas", None)  # pandas is optional
    assert study_module._as_table(rows) is rows


def test_plot_study_draws_every_method_through_privacy_utility_display(study):
    mpl = pytest.importorskip("matplotlib")
    mpl.use("Agg")
    import matplotlib.pyplot as plt

    table, _ = study
    displays = plot_study(table)
    assert list(displays) == ["laplace", "rr-on-bins", DP_CONSTANT]
    laplace = displays["laplace"]
    expected = table[table["method"] == "laplace"].groupby("epsilon")["score"].mean()
    np.testing.assert_allclose(laplace.scores, expected.to_numpy())
    np.testing.assert_allclose(laplace.epsilons, [0.1, 2.0])
    non_private = table.loc[table["method"] == NON_PRIVATE, "score"].iloc[0]
    assert laplace.baseline == pytest.approx(non_private)
    ax = laplace.ax_
    assert all(d.ax_ is ax for d in displays.values())  # one axes for the whole study
    labels = ax.get_legend_handles_labels()[1]
    assert labels.count("non-private") == 1 and DP_CONSTANT in labels
    plt.close("all")


def test_dp_mean_noise_has_the_calibrated_scale():
    # One label moves the sum of units by at most MEAN_UNITS: discrete Laplace
    # noise exp(-eps |z| / MEAN_UNITS) on the sum, variance 1 / (2 sinh^2(lam / 2))
    # in sum units (labels on the unit grid: no rounding noise). A mis-scaled
    # noise (e.g. per-label instead of per-sum) is off by orders of magnitude;
    # the 10% margin is ~6 standard errors at 20,000 draws.
    from skdp_label.mechanisms._prior import MEAN_UNITS
    from skdp_label.study import _dp_mean

    y = np.full(100, 5.0)  # mean 5 in bounds (0, 10): far from the clipping at 0 and 10
    rng = np.random.default_rng(0)
    draws = np.array([_dp_mean(y, (0.0, 10.0), 1.0, rng) for _ in range(20_000)])
    lam = 1.0 / MEAN_UNITS
    sum_variance = 0.5 / np.sinh(lam / 2) ** 2  # discrete Laplace, in units of the sum
    expected = sum_variance * (10.0 / MEAN_UNITS / 100) ** 2
    assert draws.mean() == pytest.approx(5.0, abs=0.05)
    assert draws.var() == pytest.approx(expected, rel=0.1)


def test_progress_bar_is_optional(monkeypatch):
    from skdp_label.study import _progress_bar

    bar = _progress_bar(3, True)
    assert bar is not None and bar.total == 3
    bar.close()
    assert _progress_bar(3, False) is None
    monkeypatch.setitem(sys.modules, "tqdm.auto", None)  # tqdm not installed
    assert _progress_bar(3, True) is None


def test_classification_dp_constant_is_the_charged_majority_of_a_full_epsilon_histogram():
    """The classification reference is the top class of a noisy histogram of all the
    training rows at the full epsilon (the best constant under epsilon-DP): on skewed
    labels at a large epsilon it is the majority class, and each (epsilon, seed) row
    is its own charged release of epsilon on every training row."""
    rng = np.random.default_rng(3)
    X = rng.normal(size=(400, 3))
    y = rng.choice(np.array(["a", "b", "c"]), size=400, p=[0.6, 0.3, 0.1])
    acc = BudgetAccountant()
    clf = LabelDPClassifier(LogisticRegression(), classes=["a", "b", "c"])
    table = privacy_utility_study(clf, X[:300], y[:300], X_test=X[300:], y_test=y[300:],
                                  mechanisms=["rr"], epsilons=[0.5, 8.0], seeds=[0, 1],
                                  accountant=acc, progress=False)
    dp = table[table["method"] == DP_CONSTANT]
    assert len(dp) == 4
    np.testing.assert_allclose(dp["epsilon_spent"], dp["epsilon"], rtol=1e-12)
    at_large = dp[dp["epsilon"] == 8.0]["score"]
    np.testing.assert_allclose(at_large, np.mean(y[300:] == "a"))
    steps = [r for r in acc.to_records() if r["step"] == DP_CONSTANT]
    assert len(steps) == 4 and all(r["n_labels"] == 300 for r in steps)
