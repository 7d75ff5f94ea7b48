"""How good a constant can 'auto' offer at small epsilon? (docs/auto.md)

At small epsilon the guarded ``LabelDPRegressor(mechanism='auto')`` is (nearly)
a constant: the mean of the mechanism's noisy prior (a norm-sub histogram over
the grid at ``prior_epsilon_``). This compares, as test MSE over the
non-private HistGradientBoosting model's, that constant with a Laplace mean of
the training labels at the same ``prior_epsilon_`` (and at half of it), and
with the exact training mean: what a mechanism that spent its prior budget on
a mean would give. Only the mechanism is fitted (no model on noisy labels).

Run: ``python benchmarks/bench_auto_constant.py [--datasets ...] [--seeds 3]
[--draws 5]``.
"""

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _datasets import load_regression  # noqa: E402
from sklearn.ensemble import HistGradientBoostingRegressor  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from skdp_label.mechanisms import AutoRegression  # noqa: E402

EPSILONS = [0.05, 0.1, 0.3, 0.5, 1.0, 2.0]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["diabetes", "randhie", "fair"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--draws", type=int, default=5)
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    rows = []
    for dataset in args.datasets:
        X, y, (lo, hi) = load_regression(dataset)
        for seed in range(args.seeds):
            X_train, X_test, y_train, y_test = train_test_split(
                X, y, test_size=0.2, random_state=seed)
            model = HistGradientBoostingRegressor(random_state=seed).fit(X_train, y_train)
            exact = np.mean((model.predict(X_test) - y_test) ** 2)
            rng = np.random.default_rng(50 + seed)  # the references' own noise

            def ratio(constant):
                return float(np.mean((y_test - constant) ** 2) / exact)

            for eps in EPSILONS:
                for draw in range(args.draws):
                    mech = AutoRegression(eps, bounds=(lo, hi), n_eff=10,
                                          random_state=100 * draw + seed).fit(y_train)
                    eps1 = mech.prior_epsilon_
                    scale = (hi - lo) / (y_train.size * eps1)
                    rows.append({
                        "dataset": dataset, "epsilon": eps, "prior_epsilon": eps1,
                        "noisy prior's mean": ratio(mech.prior_ @ mech.input_values_
                                                    / mech.prior_.sum()),
                        "Laplace mean at eps1": ratio(np.clip(
                            y_train.mean() + rng.laplace(0, scale), lo, hi)),
                        "Laplace mean at eps1/2": ratio(np.clip(
                            y_train.mean() + rng.laplace(0, 2 * scale), lo, hi)),
                        "exact mean": ratio(y_train.mean()),
                    })
    table = pd.DataFrame(rows).groupby(["dataset", "epsilon"], sort=False).mean()
    with pd.option_context("display.width", 200):
        print(table.round(3).to_string())


if __name__ == "__main__":
    main()
