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
