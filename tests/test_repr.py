"""repr always shows the privacy parameters, even at their default values."""

import re

import pytest
import sklearn
from sklearn.linear_model import LogisticRegression, Ridge

from skdp_label import LabelDPClassifier, LabelDPRegressor
from skdp_label.mechanisms import Laplace, RandomizedResponse, mechanism_names
from skdp_label.mechanisms._registry import get_mechanism_class


@pytest.mark.parametrize("name", mechanism_names())
def test_every_mechanism_repr_shows_epsilon_at_its_default(name):
    cls = get_mechanism_class(name)
    text = repr(cls())
    assert text.startswith(f"{cls.__name__}(epsilon=1.0")
    assert len(re.findall(r"\bepsilon=", text)) == 1  # once, not duplicated


def test_changed_epsilon_is_shown_once_in_sklearn_order():
    assert repr(Laplace(epsilon=2.0, bounds=(0, 1))) == "Laplace(bounds=(0, 1), epsilon=2.0)"


@pytest.mark.parametrize(
    "est, mechanism",
    [
        (LabelDPRegressor(Ridge(), bounds=(0, 400)), "'unbiased'"),
        (LabelDPRegressor(Ridge(), mechanism="unbiased", epsilon=1.0), "'unbiased'"),
        (LabelDPClassifier(LogisticRegression(), classes=[0, 1]), None),
    ],
)
def test_meta_estimator_repr_shows_mechanism_and_epsilon(est, mechanism):
    text = repr(est)
    assert len(re.findall(r"\bepsilon=", text)) == 1
    assert len(re.findall(r"\bmechanism=", text)) == 1
    if mechanism:
        assert f"mechanism={mechanism}" in text


def test_print_changed_only_false_is_left_alone():
    with sklearn.config_context(print_changed_only=False):
        text = repr(RandomizedResponse(classes=[0, 1]))
    assert len(re.findall(r"\bepsilon=", text)) == 1
    assert "accountant=None" in text  # scikit-learn's full listing, unchanged


def test_ledger_exports_records_frame_and_json(tmp_path):
    import json

    import numpy as np

    from skdp_label import BudgetAccountant

    acc = BudgetAccountant(epsilon=5.0)
    Laplace(epsilon=1.0, bounds=(0, 10), accountant=acc).fit_transform(np.linspace(0, 10, 20))
    group = acc.disjoint_group("stages")
    acc.spend(0.5, n_labels=10, description="stage 1", group=group)
    acc.spend(0.75, n_labels=10, description="stage 2", group=group)
    records = acc.to_records()
    assert [r["release"] for r in records] == [1, 2, 3]
    assert [r["epsilon"] for r in records] == [1.0, 0.5, 0.75]
    assert records[0]["group"] is None
    assert records[1]["group"] == "stages" and records[1]["group_id"] == group

    doc = json.loads(acc.to_json())
    assert doc["spent"]["epsilon"] == pytest.approx(acc.spent_epsilon) == pytest.approx(1.75)
    assert doc["budget"]["epsilon"] == 5.0 and len(doc["releases"]) == 3
    acc.to_json(tmp_path / "ledger.json")
    assert json.loads((tmp_path / "ledger.json").read_text()) == doc
    assert json.loads(BudgetAccountant().to_json())["budget"]["epsilon"] == "inf"

    pd = pytest.importorskip("pandas")
    frame = acc.to_frame()
    assert isinstance(frame, pd.DataFrame) and list(frame["epsilon"]) == [1.0, 0.5, 0.75]


# -- nested objects: a printed Pipeline / GridSearchCV shows epsilon too ----------
def _nested_cases():
    from sklearn.compose import TransformedTargetRegressor
    from sklearn.model_selection import GridSearchCV
    from sklearn.pipeline import Pipeline

    meta = Pipeline([("m", LabelDPRegressor(Ridge()))])
    ttr = Pipeline([("t", TransformedTargetRegressor(
        regressor=Ridge(), transformer=Laplace(bounds=(0, 1)), check_inverse=False
    ))])
    with_instance = Pipeline([("m", LabelDPRegressor(Ridge(), mechanism=Laplace(bounds=(0, 1))))])
    return {
        "meta-estimator in a Pipeline": (meta, 1, ["mechanism='unbiased'"]),
        "meta-estimator in a GridSearchCV": (
            GridSearchCV(meta, {"m__base_estimator__alpha": [1.0]}), 1, ["mechanism='unbiased'"]
        ),
        "mechanism in a TransformedTargetRegressor": (
            ttr, 1, ["Laplace(bounds=(0, 1), epsilon=1.0)"]
        ),
        "mechanism in a GridSearchCV": (GridSearchCV(ttr, {}), 1, ["epsilon=1.0"]),
        "mechanism instance in a meta-estimator": (
            with_instance, 2, ["Laplace(bounds=(0, 1), epsilon"]
        ),
    }


@pytest.mark.parametrize("print_changed_only", [True, False])
@pytest.mark.parametrize("case", list(_nested_cases()), ids=str)
def test_nested_estimators_show_epsilon_and_mechanism(case, print_changed_only):
    est, n_private, fragments = _nested_cases()[case]
    with sklearn.config_context(print_changed_only=print_changed_only):
        text = " ".join(repr(est).split())  # the pretty printer's line breaks
    # Every private object prints its epsilon (and a meta-estimator its mechanism), once each.
    assert len(re.findall(r"\bepsilon=", text)) == n_private
    if "meta" in case:
        assert len(re.findall(r"\bmechanism=", text)) == 1
    for fragment in fragments:
        if print_changed_only:
            assert fragment in text
    # Other estimators keep scikit-learn's changed-only listing.
    if print_changed_only:
        assert "Ridge()" in text and "alpha=" not in text.split("param_grid")[0]
    else:
        assert "alpha=1.0" in text


def test_epsilon_changed_in_a_nested_mechanism_is_shown_with_its_value():
    from sklearn.pipeline import Pipeline

    est = Pipeline([("m", LabelDPRegressor(Ridge(), epsilon=0.25, mechanism="laplace"))])
    text = " ".join(repr(est).split())
    assert "epsilon=0.25" in text and "mechanism='laplace'" in text
    assert len(re.findall(r"\bepsilon=", text)) == 1
