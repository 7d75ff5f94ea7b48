"""Display objects draw what they hold, and explain a missing matplotlib."""

import sys

import numpy as np
import pytest
from sklearn.linear_model import LogisticRegression, Ridge

from skdp_label import BudgetAccountant, LabelDPClassifier, LabelDPRegressor
from skdp_label.mechanisms import Laplace, RandomizedResponse
from skdp_label.plotting import (
    JointDensityDisplay,
    PrivacyUtilityDisplay,
    TransitionMatrixDisplay,
)

mpl = pytest.importorskip("matplotlib")
mpl.use("Agg")
import matplotlib.pyplot as plt


@pytest.fixture(autouse=True)
def _close_figures():
    yield
    plt.close("all")


def test_transition_matrix_display_draws_the_matrix():
    rr = RandomizedResponse(epsilon=1.0, classes=[0, 1, 2]).fit([0, 1, 2, 2])
    disp = TransitionMatrixDisplay.from_mechanism(rr)
    np.testing.assert_allclose(disp.im_.get_array(), rr.transition_matrix_)
    assert "epsilon=1" in disp.ax_.get_title()
    assert disp.figure_ is disp.ax_.figure
    # log colouring: a DP matrix spans exactly epsilon / ln(10) decades per column
    disp = TransitionMatrixDisplay.from_mechanism(rr, log=True, colorbar=False)
    shown = np.asarray(disp.im_.get_array())
    np.testing.assert_allclose(shown.max(0) - shown.min(0), 1.0 / np.log(10))


def test_transition_matrix_display_refuses_continuous_and_unfitted():
    from sklearn.exceptions import NotFittedError

    with pytest.raises(NotFittedError):
        TransitionMatrixDisplay.from_mechanism(RandomizedResponse(classes=[0, 1]))
    lap = Laplace(epsilon=1.0, bounds=(0, 1)).fit([0.2, 0.5])
    with pytest.raises(ValueError, match="JointDensityDisplay"):
        TransitionMatrixDisplay.from_mechanism(lap)


def test_joint_density_counts_every_pair_once():
    rng = np.random.default_rng(0)  # simulated labels, not label noise
    y = rng.uniform(0, 10, 500)
    disp = JointDensityDisplay.from_labels(y, y, bins=10)
    assert disp.density.sum() == pytest.approx(1.0)
    # identical labels: all the mass is on the diagonal
    assert np.trace(disp.density) == pytest.approx(1.0)
    assert disp.mesh_.get_array().size == 100
    with pytest.raises(ValueError, match="same length"):
        JointDensityDisplay.from_labels(y, y[:-1])


def test_joint_density_from_mechanism_charges_one_release():
    acc = BudgetAccountant(epsilon=5.0)
    y = np.linspace(0, 10, 300)
    disp = JointDensityDisplay.from_mechanism(
        Laplace(epsilon=2.0, bounds=(0, 10), accountant=acc), y, bins=8
    )
    assert acc.spent_epsilon == pytest.approx(2.0)
    assert disp.density.sum() == pytest.approx(1.0)
    assert "Laplace" in disp.ax_.get_title()


def test_privacy_utility_display_scores_each_epsilon():
    rng = np.random.default_rng(1)  # simulated data
    X = rng.normal(size=(300, 2))
    y = np.clip(X @ [1.0, 0.5] + 2, 0, 4)
    acc = BudgetAccountant()
    est = LabelDPRegressor(Ridge(), mechanism="laplace", bounds=(0, 4), accountant=acc)
    disp = PrivacyUtilityDisplay.from_estimator(
        est,
        X,
        y,
        X,
        y,
        epsilons=[4.0, 0.5],
        n_repeats=2,
        baseline_estimator=Ridge(),
        scoring="neg_mean_squared_error",
    )
    np.testing.assert_array_equal(disp.epsilons, [0.5, 4.0])  # sorted
    assert disp.scores.shape == disp.scores_std.shape == (2,)
    assert acc.spent_epsilon == pytest.approx(2 * (0.5 + 4.0))  # every fit is charged
    assert disp.baseline >= disp.scores.max()  # noise-free model on its own train set
    np.testing.assert_array_equal(disp.line_.get_xdata(), [0.5, 4.0])
    assert disp.ax_.get_xscale() == "log"
    # a second estimator on the same axes, as RocCurveDisplay does
    Xc, yc = X, (y > 2).astype(int)
    clf = LabelDPClassifier(LogisticRegression(), mechanism="rr", classes=[0, 1])
    disp2 = PrivacyUtilityDisplay.from_estimator(
        clf, Xc, yc, Xc, yc, epsilons=[1.0], scoring="accuracy", ax=disp.ax_
    )
    assert disp2.ax_ is disp.ax_ and len(disp.ax_.lines) >= 3


def test_privacy_utility_display_validates_epsilons():
    est = LabelDPRegressor(Ridge(), mechanism="laplace", bounds=(0, 1))
    X, y = np.zeros((4, 1)), np.zeros(4)
    for bad in ([], [0.0], [1.0, np.nan]):
        with pytest.raises(ValueError, match="epsilons"):
            PrivacyUtilityDisplay.from_estimator(est, X, y, X, y, epsilons=bad, plot=False)


def test_missing_matplotlib_is_explained(monkeypatch):
    # None in sys.modules makes `import matplotlib.pyplot` raise ImportError.
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    rr = RandomizedResponse(epsilon=1.0, classes=[0, 1]).fit([0, 1])
    with pytest.raises(ImportError, match=r"skdp_label\[plot\]"):
        TransitionMatrixDisplay.from_mechanism(rr)
    # computing without drawing still works
    disp = JointDensityDisplay.from_labels([0.0, 1.0], [1.0, 0.0], bins=2, plot=False)
    assert disp.density.sum() == 1.0
