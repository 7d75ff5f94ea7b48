"""The labels party: privatize a label column once, hand it over, train elsewhere.

A common label-DP setting: one party (say, an advertiser) holds a sensitive
label per user (a purchase amount, a conversion), another party (the
platform) holds the features and trains the models. The label holder:

1. randomizes the label column once with a mechanism over *public* bounds,
   charging the budget to its accountant;
2. hands over only the noisy column and the mechanism's *public
   parameters* (name, epsilon, bounds, ...) as JSON -- not a pickle of the
   fitted mechanism: a pickle is an object graph the receiver has to trust,
   and it is the wrong contract even though skdp_label's fitted objects hold
   no labels and no random state (docs/randomness.md).

The platform rebuilds the mechanism from those public parameters (fitting
it on a placeholder label costs nothing: its noise scale depends only on
public inputs), then trains and tunes anything it likes on the noisy
labels: every step is post-processing, free of further privacy cost. It
tunes with ``unbiased_mse_scorer``, which needs the mechanism's noise
variance, not the true labels.

Run from the repository root (``PYTHONPATH=.`` if the package is not
installed)::

    python examples/labels_party.py
"""

import json
import tempfile
from pathlib import Path

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.model_selection import GridSearchCV

from skdp_label import BudgetAccountant
from skdp_label.estimators import unbiased_mse_scorer
from skdp_label.mechanisms import Laplace, make_mechanism

workdir = Path(tempfile.mkdtemp(prefix="labels_party_"))
rng = np.random.default_rng(0)
n = 30_000
user_id = np.arange(n)
X = rng.normal(size=(n, 6))  # the platform's features
purchase = np.clip(20 + 8 * X[:, 0] + 5 * np.sin(2 * X[:, 1]) + rng.normal(0, 3, n), 0, 50)

# -- The labels party -------------------------------------------------------------------------
accountant = BudgetAccountant(epsilon=4.0)
mechanism = Laplace(epsilon=4.0, bounds=(0.0, 50.0), clip=False, accountant=accountant,
                    random_state=None)  # OS entropy: the noise is never reproducible
noisy = mechanism.fit_transform(purchase)
np.savetxt(workdir / "noisy_labels.csv", np.column_stack([user_id, noisy]),
           delimiter=",", header="user_id,noisy_purchase", comments="")
# The ledger and the random source stay with the labels party: only public parameters leave.
public = {k: v for k, v in mechanism.get_params().items() if k not in ("accountant", "random_state")}
(workdir / "mechanism.json").write_text(json.dumps({"mechanism": "laplace", "params": public}))
print("labels party: released one noisy column;")
print(accountant.summary())

# -- The platform ---------------------------------------------------------------------------------
table = np.loadtxt(workdir / "noisy_labels.csv", delimiter=",", skiprows=1)
y_noisy = table[np.argsort(table[:, 0]), 1]  # align with the platform's user ids
spec = json.loads((workdir / "mechanism.json").read_text())
mech = make_mechanism(spec["mechanism"], task="regression", **spec["params"]).fit([0.0])  # public only
search = GridSearchCV(
    HistGradientBoostingRegressor(),
    {"max_depth": [2, 4, None], "learning_rate": [0.03, 0.1], "max_iter": [100]},
    scoring=unbiased_mse_scorer(mech), cv=3,
).fit(X, y_noisy)
best = search.best_index_
print(f"\nplatform: best parameters {search.best_params_}, estimated true MSE "
      f"{-search.best_score_:.1f} (fold-to-fold std {search.cv_results_['std_test_score'][best]:.1f})")

# Only the simulation knows the truth; the platform never sees it.
X_new = rng.normal(size=(5000, 6))
truth = np.clip(20 + 8 * X_new[:, 0] + 5 * np.sin(2 * X_new[:, 1]) + rng.normal(0, 3, 5000), 0, 50)
pred = search.predict(X_new)
print(f"true MSE on fresh users: {np.mean((pred - truth) ** 2):.2f} "
      f"(noise-free optimum about 9; noise variance of the released labels "
      f"{2 * (50 / 4) ** 2:.0f})")
