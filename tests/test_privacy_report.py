"""privacy_report() and the ledger's public context: right costs, no labels."""

import json
import math
import pickle

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression, Ridge

from skdp_label import BudgetAccountant, LabelDPClassifier, LabelDPRegressor
from skdp_label._report import PrivacyReport
from skdp_label.mechanisms import (
    DiscreteLaplace,
    Gaussian,
    Laplace,
    RandomizedResponse,
    RROnBins,
    Staircase,
    get_mechanism_class,
    mechanism_names,
)
from sklearn.exceptions import NotFittedError

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")

# Labels with spellings that cannot occur by chance in a report.
LABELS = np.array([1.2345, 7.6543, 3.1415, 9.8765, 4.4321] * 20)


def _no_label_in(report):
    blob = pickle.dumps(report) + str(report).encode() + repr(report.to_dict()).encode()
    for value in np.unique(LABELS):
        for spelling in (repr(float(value)), f"{value:g}", str(value)):
            assert spelling.encode() not in blob, spelling


@pytest.mark.parametrize("name", mechanism_names("regression"))
def test_every_regression_mechanism_reports_its_cost_and_no_label(name):
    kw = {"outputs": 4} if name == "mvu" else {}
    # Seeded: the noise figures of a noisy-prior fit vary run to run, and one in
    # ~10**4 spelled a label by chance (bias-variance: worst_case_rms_error 7.65432...).
    mech = get_mechanism_class(name)(epsilon=1.5, bounds=(0, 10), random_state=0, **kw)
    y = np.rint(LABELS) if "discrete" in name else LABELS
    mech.fit_transform(y)
    report = mech.privacy_report()
    assert isinstance(report, PrivacyReport)
    assert report.epsilon == pytest.approx(1.5)
    assert sum(row["epsilon"] for row in report.steps) == pytest.approx(1.5)
    assert all(row["n_labels"] == LABELS.size for row in report.steps)
    assert "accountant" not in report.parameters and "random_state" not in report.parameters
    assert report.noise, "every regression mechanism states its noise level"
    _no_label_in(report)


def test_report_needs_a_fit():
    with pytest.raises(NotFittedError):
        Laplace(1.0, bounds=(0, 1)).privacy_report()


def test_a_second_release_is_reported_and_a_refit_starts_over():
    mech = Laplace(1.0, bounds=(0, 10)).fit(LABELS)
    mech.transform(LABELS)
    mech.transform(LABELS)
    assert mech.privacy_report().epsilon == pytest.approx(2.0)
    mech.fit(LABELS)
    assert mech.privacy_report().epsilon == 0.0  # fitted, nothing released yet


def test_noise_std_is_exact_for_laplace_and_gaussian():
    lap = Laplace(2.0, bounds=(0, 10)).fit(LABELS)
    # Laplace of scale b = 10 / 2 has std sqrt(2) b; the grid noise is within its step.
    assert lap.privacy_report().noise["noise_std"] == pytest.approx(math.sqrt(2) * 5, rel=1e-3)
    gauss = Gaussian(1.0, delta=1e-5, bounds=(0, 10)).fit(LABELS)
    assert gauss.privacy_report().noise["noise_std"] == pytest.approx(gauss.sigma_)


def test_discrete_noise_matches_the_transition_matrix():
    mech = DiscreteLaplace(1.0, bounds=(0, 6)).fit([3])
    noise = mech.privacy_report().noise
    T, v = mech.transition_matrix_, mech.output_values_.astype(float)
    # Clipping can only shrink the error: the unclipped std bounds the worst case.
    rms = np.sqrt((T * (v[None, :] - v[:, None]) ** 2).sum(axis=1)).max()
    assert rms <= noise["noise_std"] + 1e-12
    rr = RandomizedResponse(1.0, classes=["a", "b", "c"]).fit(["a"])
    change = rr.privacy_report().noise["max_change_probability"]
    assert change == pytest.approx(2 / (math.e + 2))


def test_regressor_report_splits_prior_and_labels():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(LABELS.size, 2))
    reg = LabelDPRegressor(Ridge(), "rr-on-bins", epsilon=2.0, bounds=(0, 10)).fit(X, LABELS)
    report = reg.privacy_report()
    steps = [row["step"] for row in report.steps]
    assert steps == ["noisy label histogram", "randomized labels"]
    assert report.epsilon == pytest.approx(2.0)
    assert report.owner == "LabelDPRegressor" and report.mechanism == "RROnBins"
    assert list(report.to_frame()["epsilon"]) == pytest.approx([r["epsilon"] for r in report.steps])
    _no_label_in(report)


def test_classifier_report_counts_stages_in_parallel():
    rng = np.random.default_rng(1)
    X = rng.normal(size=(300, 2))
    y = (X[:, 0] > 0).astype(int) + (X[:, 1] > 0)
    clf = LabelDPClassifier(
        LogisticRegression(), epsilon=1.0, n_stages=2, prior="clusters", n_clusters=4,
        classes=[0, 1, 2], random_state=0,
    ).fit(X, y)
    report = clf.privacy_report()
    assert [row["stage"] for row in report.steps] == [None, 1, 2]
    # The prior, then two stages on disjoint rows: epsilon is prior + one stage.
    assert report.epsilon == pytest.approx(1.0)
    assert "max_change_probability" in report.noise


def test_ledger_rows_name_estimator_mechanism_and_step():
    acc = BudgetAccountant()
    rng = np.random.default_rng(2)
    X = rng.normal(size=(LABELS.size, 2))
    LabelDPRegressor(Ridge(), "rr-on-bins", epsilon=1.0, bounds=(0, 10), accountant=acc).fit(X, LABELS)
    rows = acc.to_records()
    assert [(r["estimator"], r["mechanism"], r["step"]) for r in rows] == [
        ("LabelDPRegressor", "RROnBins", "noisy label histogram"),
        ("LabelDPRegressor", "RROnBins", "randomized labels"),
    ]
    assert all(r["description"].startswith("LabelDPRegressor: RROnBins") for r in rows)
    json.loads(acc.to_json())  # exportable


def test_persistent_ledger_keeps_details_and_reads_old_records(tmp_path):
    path = tmp_path / "ledger.jsonl"
    acc = BudgetAccountant(epsilon=5.0, ledger=path)
    RROnBins(1.0, bounds=(0, 10), accountant=acc).fit_transform(LABELS)
    acc.spend(0.5, n_labels=3, description="a record without details")
    again = BudgetAccountant(epsilon=5.0, ledger=path)
    rows = again.to_records()
    assert rows[0]["mechanism"] == "RROnBins" and rows[-1]["mechanism"] is None
    assert again.spent_epsilon == pytest.approx(1.5)


@pytest.mark.parametrize(
    "details",
    [{"label": 3.0}, {"step": [1, 2]}, "step", {"stage": True}],
    ids=["unknown key", "list value", "not a dict", "bool value"],
)
def test_spend_refuses_details_that_are_not_flat_public_context(details):
    acc = BudgetAccountant()
    with pytest.raises(ValueError, match="details"):
        acc.spend(1.0, n_labels=1, description="x", details=details)
    assert acc.spent_epsilon == 0.0


def test_report_survives_a_pickle_of_the_estimator():
    rng = np.random.default_rng(3)
    X = rng.normal(size=(LABELS.size, 2))
    reg = LabelDPRegressor(Ridge(), "staircase", epsilon=1.0, bounds=(0, 10)).fit(X, LABELS)
    clone = pickle.loads(pickle.dumps(reg))
    assert str(clone.privacy_report()) == str(reg.privacy_report())
    assert isinstance(Staircase(1.0, bounds=(0, 1)).fit([0.5]).privacy_report().noise["noise_std"], float)
