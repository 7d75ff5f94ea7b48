"""
A privacy–utility study with reference rows
===========================================

:func:`skdp_label.study.privacy_utility_study` runs a grid of mechanisms × ε ×
seeds for one estimator and returns a tidy table, one row per fit, with two
reference rows that say what the scores mean:

* ``non-private``: the same model trained on the true labels;
* ``dp-constant``: a constant predictor, the ε-DP mean of the training labels
  within the public bounds (charged ε as its own release). At small ε a
  mechanism whose curve meets this one has learned nothing but the mean.

The test scores use the **true** test labels: a study is a research tool of
the labels party, about data it owns (here scikit-learn's public diabetes data,
whose documentation gives the label range 25–346).
"""

# %%
import matplotlib.pyplot as plt
from sklearn.datasets import load_diabetes
from sklearn.linear_model import Ridge

from skdp_label import BudgetAccountant, LabelDPRegressor
from skdp_label.study import plot_study, privacy_utility_study

X, y = load_diabetes(return_X_y=True)
# One grid step for the mechanisms that take one (laplace ignores it).
estimator = LabelDPRegressor(Ridge(alpha=0.1), bounds=(25, 346), mechanism_params={"resolution": 8})
accountant = BudgetAccountant()  # records every release of the study
table = privacy_utility_study(
    estimator,
    X,
    y,
    mechanisms={
        "laplace": "laplace",
        "rr-on-bins": "rr-on-bins",
        "unbiased": "unbiased",
    },
    epsilons=[0.1, 0.5, 1.0, 2.0, 4.0, 8.0],
    seeds=[0, 1, 2],
    scoring="r2",
    accountant=accountant,
    progress=False,
)
print(table.head(8).to_string())

# %%
# Mean R² over the seeds, next to the references. Every private row spent
# exactly its ε (read from the ledger), the non-private one is not private.
summary = table.pivot_table(index="epsilon", columns="method", values="score", aggfunc="mean")
print(summary.round(3).to_string())
print("epsilon spent by the whole study:", round(accountant.spent_epsilon, 3))

# %%
# The curves: one per mechanism (band: ± one standard deviation over the
# seeds), the ε-DP constant dashed, the non-private model as a line.
fig, ax = plt.subplots(figsize=(7, 4.5), layout="constrained")
plot_study(table, ax=ax, score_name="test R² (true labels)")
ax.set_ylim(-1.0, 0.6)
plt.show()
