"""Classes stay in the declared order: classes_, priors and probability columns."""

import numpy as np
import pandas as pd
import pytest
from sklearn.linear_model import LogisticRegression

from skdp_label import LabelDPClassifier
from skdp_label.mechanisms import RandomizedResponse, RRTopK, RRWithPrior
from skdp_label.mechanisms._validation import encode_classes

pytestmark = pytest.mark.filterwarnings("ignore::skdp_label.PrivacyLeakWarning")

ORDER = ["low", "medium", "high"]  # not alphabetical


def test_encode_classes_follows_the_declared_order():
    classes = np.array(ORDER)
    codes = encode_classes(np.array(["high", "low", "medium", "high"]), classes)
    np.testing.assert_array_equal(codes, [2, 0, 1, 2])
    # Integers out of order take the general path, not the contiguous shortcut.
    codes = encode_classes(np.array([3, 1, 2]), np.array([3, 2, 1]))
    np.testing.assert_array_equal(codes, [0, 2, 1])


def test_unknown_label_message_has_no_value_count_or_position():
    with pytest.raises(ValueError, match="not among the 3 declared classes") as info:
        encode_classes(np.array(["low", "extreme", "extreme"]), np.array(ORDER))
    assert "extreme" not in str(info.value) and "2" not in str(info.value)


@pytest.mark.parametrize("cls", [RandomizedResponse, RRWithPrior, RRTopK])
def test_mechanisms_keep_the_order_and_align_a_public_prior_with_it(cls):
    kw = {} if cls is RandomizedResponse else {"prior": [0.05, 0.05, 0.9]}
    mech = cls(epsilon=8.0, classes=ORDER, random_state=0, **kw).fit(np.array(ORDER))
    assert list(mech.input_values_) == ORDER
    if cls is not RandomizedResponse:
        # The prior puts its mass on "high", the third declared class.
        assert "high" in list(mech.top_k_)
    out = mech.transform(np.array(["high"] * 200))
    assert (out == "high").mean() > 0.9


def test_ordered_categorical_keeps_its_order_in_the_classifier():
    rng = np.random.default_rng(0)
    X = rng.normal(size=(300, 2))
    codes = np.digitize(X[:, 0], [-0.5, 0.5])
    y = pd.Series(pd.Categorical.from_codes(codes, categories=ORDER, ordered=True))
    clf = LabelDPClassifier(
        LogisticRegression(), "rr", epsilon=4.0, classes=y.cat.categories, random_state=0
    ).fit(X, y)
    assert clf.classes_.tolist() == ORDER
    proba = clf.predict_proba(X)
    np.testing.assert_array_equal(clf.classes_[proba.argmax(axis=1)], clf.predict(X))
    # Column 2 is "high": it rises with the feature that made the labels high.
    assert proba[X[:, 0] > 1, 2].mean() > proba[X[:, 0] < -1, 2].mean()


def test_class_label_count_is_the_same_on_both_paths():
    # Below 10^5 labels numpy counts, from 10^5 the compiled pass: the same
    # count for every dtype, NaN, infinities and non-integers included.
    from skdp_label._kernels._sampling import count_outside
    from skdp_label.mechanisms._validation import _count_non_classes

    rng = np.random.default_rng(3)
    base = rng.integers(-3, 9, 100_000)
    for y in [
        base, base.astype(np.int32), np.abs(base).astype(np.uint8), base.astype(np.float32),
        np.where(rng.random(base.size) < 0.01, base + 0.5, base).astype(np.float64),
        np.concatenate([base[:-3], [np.nan, np.inf, -np.inf]]),
    ]:
        for flat in (y, y[:1000]):
            expected = count_outside(flat, 0, 5, True)
            assert expected > 0
            assert _count_non_classes(flat, 0, 5) == expected
    assert _count_non_classes(np.arange(6.0), 0, 5) == 0
