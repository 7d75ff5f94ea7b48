"""
The accountant's ledger: where the budget goes
==============================================

One ``BudgetAccountant`` is shared by every mechanism and estimator of a
project. Each release is a ledger entry; sequential releases add up, and the
accountant refuses (``BudgetExceededError``) a release that would exceed the
budget *before* anything is randomized. Here a project privatizes the diabetes
labels for a first model, runs a two-step mechanism (noisy prior, then labels),
trains a multi-stage classifier, and finally tries one release too many.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.linear_model import LogisticRegression, Ridge

from skdp_label import BudgetAccountant, BudgetExceededError, LabelDPClassifier, LabelDPRegressor
from skdp_label.mechanisms import Laplace

X, y = load_diabetes(return_X_y=True)
acc = BudgetAccountant(epsilon=6.0)

Laplace(epsilon=1.0, bounds=(0, 350), accountant=acc).fit_transform(y)
LabelDPRegressor(
    Ridge(),
    mechanism="rr-on-bins",
    epsilon=2.0,
    bounds=(0, 350),
    mechanism_params={"resolution": 10},
    accountant=acc,
).fit(X, y)
# A public threshold turns progression into classes; LP-MST spends per stage.
y_class = np.digitize(y, [100, 200])
LabelDPClassifier(
    LogisticRegression(),
    mechanism="rr-with-prior",
    epsilon=2.0,
    classes=[0, 1, 2],
    n_stages=2,
    accountant=acc,
).fit(X, y_class)
try:
    Laplace(epsilon=2.0, bounds=(0, 350), accountant=acc).fit_transform(y)
except BudgetExceededError as exc:
    print("refused:", exc)
print(acc.summary())

# %%
# The ledger as a table
# ---------------------
# ``to_frame()`` (pandas), ``to_records()`` and ``to_json(path)`` export it;
# the ledger holds costs and public descriptions only, never labels.
acc.to_frame()[["description", "n_labels", "epsilon", "group"]]

# %%
# The ledger as a chart
# ---------------------
# Sequential releases add up; the stages of the multi-stage classifier use
# disjoint halves of the rows (one *disjoint group*), so the group costs the
# maximum of its entries, not their sum: they are drawn side by side.
entries = acc.ledger
fig, ax = plt.subplots(figsize=(8, 0.5 * len(entries) + 1.5), layout="constrained")
total, group_start = 0.0, {}
for i, e in enumerate(entries):
    if e.group is None:
        start, total = total, total + e.epsilon
    else:
        start = group_start.setdefault(e.group, total)
        total = max(total, start + e.epsilon)
    ax.barh(i, e.epsilon, left=start, color="tab:orange" if e.group else "tab:blue")
ax.axvline(acc.epsilon, color="tab:red", ls="--", label=f"budget epsilon = {acc.epsilon:g}")
ax.axvline(acc.spent_epsilon, color="gray", ls=":", label=f"spent = {acc.spent_epsilon:g}")
ax.set_yticks(range(len(entries)), [e.description for e in entries])
ax.invert_yaxis()
ax.set_xlabel("cumulative epsilon")
ax.legend(loc="upper right")
