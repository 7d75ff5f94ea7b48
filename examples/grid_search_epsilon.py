"""Model selection with label DP: what it costs, and how to make it free.

Part 1 -- re-privatize in every fit. ``GridSearchCV`` over ``epsilon``, the
mechanism and a base-estimator parameter; every fold and the final refit
randomize the labels again, and a shared ``BudgetAccountant`` (clones and
joblib workers write to the same ledger) shows the true total: sequential
composition over the overlapping rows. Scoring the folds with *true*
labels (GridSearchCV's default scoring) is a further use of the labels that
no accountant covers: skdp_label warns about it (``PrivacyLeakWarning``),
and Part 2 shows the safe pattern. Every fit draws fresh OS entropy
(``random_state=None``), so no two folds share noise.

Part 2 -- privatize once, tune on the noisy labels. Every later step only
post-processes the noisy labels, so the whole search costs the epsilon of
the single release. The scorers never look at true labels:
``unbiased_mse_scorer`` (noisy MSE minus the known noise variance, an
unbiased estimate of the true MSE for unbiased mechanisms) and
``debiased_accuracy_scorer`` for randomized response. The table compares
their estimates with the true-label scores computed on the same folds.

Run from the repository root (``PYTHONPATH=.`` if the package is not
installed)::

    python examples/grid_search_epsilon.py
"""

import warnings

import numpy as np
from sklearn.base import clone
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.model_selection import GridSearchCV, KFold

from skdp_label import BudgetAccountant, LabelDPRegressor, PrivacyLeakWarning
from skdp_label.estimators import (
    debiased_accuracy,
    debiased_accuracy_scorer,
    unbiased_mse,
    unbiased_mse_scorer,
)
from skdp_label.mechanisms import Laplace, RandomizedResponse

rng = np.random.default_rng(0)
X = rng.normal(size=(5000, 5))
y = np.clip(X @ [1.5, -1.0, 0.5, 0.0, 2.0] + 5.0 + rng.normal(size=5000), 0.0, 10.0)

# -- Part 1: every fit re-privatizes -----------------------------------------------------
accountant = BudgetAccountant()
search = GridSearchCV(
    LabelDPRegressor(Ridge(), "laplace", bounds=(0.0, 10.0), accountant=accountant),
    {"epsilon": [0.5, 1.0, 2.0], "mechanism": ["laplace", "staircase"],
     "base_estimator__alpha": [0.1, 100.0]},
    cv=3, n_jobs=2,
)
with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always", PrivacyLeakWarning)
    search.fit(X, y)  # default scoring: R^2 on the *true* labels of each fold
if any(issubclass(w.category, PrivacyLeakWarning) for w in caught):
    print("(PrivacyLeakWarning: the folds were scored on true labels -- see Part 2)")
print("Part 1: GridSearchCV with LabelDPRegressor (3 epsilons x 2 mechanisms x 2 alphas, 3 folds)")
print(f"  best parameters: {search.best_params_}")
print(f"  releases of the labels: {len(accountant.ledger)} (36 fold fits + 1 refit)")
print(f"  total epsilon spent:    {accountant.spent_epsilon:g}  "
      "(3 folds x 2 x 2 x (0.5 + 1 + 2) + refit)")

# -- Part 2: privatize once, tune for free ---------------------------------------------------
print("\nPart 2: privatize once (Laplace, epsilon=4, unbiased: clip=False), tune on noisy labels")
accountant = BudgetAccountant(epsilon=4.0)
mech = Laplace(4.0, bounds=(0.0, 10.0), clip=False, accountant=accountant)  # OS entropy
y_noisy = mech.fit_transform(y)
folds = list(KFold(4, shuffle=True, random_state=0).split(X))
print(f"  {'alpha':>8} {'noisy MSE':>10} {'unbiased est.':>14} {'true MSE':>9}")
for alpha in [0.01, 3000.0, 20000.0, 1e6]:
    noisy, estimate, true = [], [], []
    for train, test in folds:
        pred = Ridge(alpha=alpha).fit(X[train], y_noisy[train]).predict(X[test])
        noisy.append(np.mean((y_noisy[test] - pred) ** 2))
        estimate.append(unbiased_mse(y_noisy[test], pred, mech))
        true.append(np.mean((y[test] - pred) ** 2))  # for this printout only
    print(f"  {alpha:>8g} {np.mean(noisy):>10.3f} {np.mean(estimate):>14.3f} {np.mean(true):>9.3f}")
search = GridSearchCV(Ridge(), {"alpha": [0.01, 3000.0, 20000.0, 1e6]}, cv=KFold(4, shuffle=True, random_state=0),
                      scoring=unbiased_mse_scorer(mech)).fit(X, y_noisy)
print(f"  GridSearchCV(scoring=unbiased_mse_scorer) picks alpha={search.best_params_['alpha']:g}; "
      f"total epsilon spent: {accountant.spent_epsilon:g}")

print("\nClassification: digits, randomized response at epsilon=2, tune C on noisy labels")
Xd, yd = load_digits(return_X_y=True)
Xd = Xd / 16.0
rr = RandomizedResponse(2.0, classes=np.arange(10))
yd_noisy = rr.fit_transform(yd)
cv = KFold(3, shuffle=True, random_state=0)
print(f"  {'C':>8} {'noisy acc.':>10} {'debiased est.':>14} {'true acc.':>9}")
for C in [1e-4, 0.03, 3.0]:
    noisy, estimate, true = [], [], []
    for train, test in cv.split(Xd):
        model = clone(LogisticRegression(C=C, max_iter=300)).fit(Xd[train], yd_noisy[train])
        pred = model.predict(Xd[test])
        noisy.append(np.mean(pred == yd_noisy[test]))
        estimate.append(debiased_accuracy(yd_noisy[test], pred, rr))
        true.append(np.mean(pred == yd[test]))  # for this printout only
    print(f"  {C:>8g} {np.mean(noisy):>10.3f} {np.mean(estimate):>14.3f} {np.mean(true):>9.3f}")
search = GridSearchCV(LogisticRegression(max_iter=300), {"C": [1e-4, 0.03, 3.0]}, cv=cv,
                      scoring=debiased_accuracy_scorer(rr)).fit(Xd, yd_noisy)
print(f"  GridSearchCV(scoring=debiased_accuracy_scorer) picks C={search.best_params_['C']:g}")
