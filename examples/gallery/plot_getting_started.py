"""
Getting started: the two-party workflow on real data
====================================================

The *labels party* holds the private labels (here: disease progression of the
442 patients of scikit-learn's bundled diabetes data). The *model party* holds
the public features. The labels party randomizes the labels with an ε-label-DP
mechanism and hands over only the noisy labels; the model party trains any
scikit-learn model on them. Nothing else about the labels leaves the labels
party, and the accountant records what was spent.

The held-out score against *true* labels at the end is a simulation that only
the labels party could compute; it is what the privacy costs in accuracy.
"""

# %%
# The labels party: declare public bounds, randomize once
# -------------------------------------------------------
# Bounds are public knowledge (here: the scale of the progression score), never
# computed from the labels. ``OptimalUnbiased`` may spend a small part of ε
# on a noisy histogram (the prior); with only 309 training labels over the
# 36-value grid of ``resolution=10`` such a histogram would be mostly noise, so
# its ``prior_epsilon='auto'`` rule uses the public uniform prior and gives the
# whole ε to the labels (``mechanism.budget_split(309)`` shows it before
# anything is spent; docs/auto.md).
import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.linear_model import RidgeCV
from sklearn.metrics import r2_score
from sklearn.model_selection import train_test_split

from skdp_label import BudgetAccountant, LabelDPRegressor
from skdp_label.mechanisms import OptimalUnbiased

X, y = load_diabetes(return_X_y=True)
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.3, random_state=0)

accountant = BudgetAccountant(epsilon=4.0)
mechanism = OptimalUnbiased(epsilon=2.0, bounds=(0, 350), resolution=10, accountant=accountant)
y_noisy = mechanism.fit_transform(y_train)  # the only thing sent to the model party
print(accountant.summary())

# %%
# The model party: train on the noisy labels
# ------------------------------------------
# The noisy labels are unbiased, so a linear model fitted by least squares is
# unbiased too; it only needs more data than without noise.
model = RidgeCV(alphas=np.logspace(-3, 2, 11)).fit(X_train, y_noisy)
print(
    f"R^2 on held-out true labels, trained on noisy labels: "
    f"{r2_score(y_test, model.predict(X_test)):.3f}"
)
clean = RidgeCV(alphas=np.logspace(-3, 2, 11)).fit(X_train, y_train)
print(
    f"R^2 of the same model trained on the true labels:      "
    f"{r2_score(y_test, clean.predict(X_test)):.3f}"
)

# %%
# One object for both roles
# -------------------------
# When one party does both, ``LabelDPRegressor`` privatizes ``y`` inside ``fit``
# and trains any regressor on the noisy labels; the accountant sees the release.
reg = LabelDPRegressor(
    RidgeCV(alphas=np.logspace(-3, 2, 11)),
    mechanism="rr-on-bins",
    epsilon=2.0,
    bounds=(0, 350),
    mechanism_params={"resolution": 10},
    accountant=accountant,
)
reg.fit(X_train, y_train)
print(
    f"Ridge on RR-on-Bins labels (biased towards the prior), R^2: "
    f"{r2_score(y_test, reg.predict(X_test)):.3f}"
)
print(f"spent {accountant.spent_epsilon:g} of {accountant.epsilon:g}")

# %%
# What the noise looks like
# -------------------------
# Label against noisy label for the released labels: unbiased noise spreads
# widely around the diagonal but is centred on it.
from skdp_label.plotting import JointDensityDisplay

JointDensityDisplay.from_labels(
    y_train, y_noisy, bins=[20, 30], title="OptimalUnbiased, epsilon=2, diabetes"
)
