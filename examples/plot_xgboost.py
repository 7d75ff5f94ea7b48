"""XGBoost on label-DP labels: Poisson regression of counts.

Counts (e.g. visits per user) are the private labels; the features are
public. ``LabelDPRegressor`` randomizes the counts once with the discrete
Laplace or discrete staircase mechanism over the public range ``0..30``
(integer outputs, so ``objective='count:poisson'`` still gets non-negative
integer labels) and trains ``xgboost.XGBRegressor`` on them. Clipping the
noisy counts into 0..30 biases them towards the middle of the range at
small epsilon, which is what the error at epsilon <= 2 mostly reflects.

Run from the repository root::

    python examples/plot_xgboost.py            # prints a table (PYTHONPATH=. if not installed)
    python examples/plot_xgboost.py --plot [out.png]   # also saves the figure
                                                       # (default: a temporary directory)
"""

import sys

import numpy as np
from sklearn.metrics import mean_poisson_deviance, mean_squared_error
from sklearn.model_selection import train_test_split

from skdp_label import BudgetAccountant, LabelDPRegressor
from skdp_label.mechanisms import mechanism_names

try:
    import xgboost
except ImportError:  # optional dependency
    sys.exit("This example needs xgboost: pip install xgboost-cpu")

rng = np.random.default_rng(0)
n = 20_000
X = rng.normal(size=(n, 4))
rate = np.exp(1.2 + 0.6 * X[:, 0] - 0.4 * X[:, 1] + 0.3 * X[:, 2] * X[:, 3])
y = np.minimum(rng.poisson(rate), 30)  # public bounds: 0..30
X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.25, random_state=0)

accountant = BudgetAccountant()  # one ledger for every model trained below


def model():
    return xgboost.XGBRegressor(objective="count:poisson", n_estimators=200, max_depth=3,
                                learning_rate=0.05, n_jobs=1)


rows = []
baseline = model().fit(X_train, y_train).predict(X_test)
rows.append(("non-private", "-", mean_squared_error(y_test, baseline),
             mean_poisson_deviance(y_test, baseline)))
# RR-on-Bins (outputs are non-negative bin values) joins when it is available.
MECHANISMS = [m for m in ["rr-on-bins", "discrete-laplace", "discrete-staircase"]
              if m in mechanism_names("regression")]
for mechanism in MECHANISMS:
    for epsilon in [0.5, 1.0, 2.0, 4.0, 8.0]:
        reg = LabelDPRegressor(model(), mechanism, epsilon, bounds=(0, 30),
                               accountant=accountant).fit(X_train, y_train)  # fresh OS entropy
        pred = reg.predict(X_test)
        rows.append((mechanism, epsilon, mean_squared_error(y_test, pred),
                     mean_poisson_deviance(y_test, pred)))

print(f"{'mechanism':<20} {'epsilon':>8} {'test MSE':>10} {'Poisson dev.':>13}")
for mechanism, epsilon, mse, dev in rows:
    print(f"{mechanism:<20} {epsilon!s:>8} {mse:>10.3f} {dev:>13.3f}")
print(f"\nlabels released {len(accountant.ledger)} times; sequential total "
      f"epsilon = {accountant.spent_epsilon:g} (each model is epsilon-label-DP on its own)")

if "--plot" in sys.argv:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(5, 3.5))
    for mechanism in MECHANISMS:
        pts = [(e, m) for name, e, m, _ in rows if name == mechanism]
        ax.plot(*zip(*pts), marker="o", label=mechanism)
    ax.axhline(rows[0][2], color="k", ls="--", label="non-private")
    ax.set(xscale="log", xlabel="epsilon", ylabel="test MSE", title="XGBoost count:poisson")
    ax.legend()
    fig.tight_layout()
    import tempfile
    from pathlib import Path

    # Only to a path the user passes, or a temporary directory: never into the checkout.
    args = sys.argv[sys.argv.index("--plot") + 1:]
    out = Path(args[0]) if args else Path(tempfile.mkdtemp()) / "plot_xgboost.png"
    fig.savefig(out, dpi=120)
    print(f"saved {out}")
