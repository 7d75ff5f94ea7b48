"""The default output grid (resolution='auto') against the old default, on real data.

Part 1 (default): for the four grid-based regression mechanisms (unbiased,
rr-on-bins, debiased-rr, exponential), on real datasets with public bounds
(benchmarks/_datasets.py), the test MSE of
``LabelDPRegressor(HistGradientBoostingRegressor())`` and the privatization
time (mechanism fit + randomization) with

* ``old``: the previous default grid -- step 1 label unit (``resolution=1``)
  for unbiased, rr-on-bins and debiased-rr, ``(hi - lo) / 100`` for the
  exponential mechanism (``resolution=None``);
* ``auto``: the new default (``resolution='auto'``, docs/grid.md).

The unbiased mechanism on a unit grid of more than ``--max-unit-points``
points (diamonds: 20,001) takes minutes to hours per fit: reported as skipped.

Part 2 (``--end-to-end``): privatization time of every registered regression
mechanism (defaults, epsilon = 1) as a share of a
``HistGradientBoostingRegressor`` fit on 10^6 x 20 synthetic rows.

Run::

    PYTHONPATH=$PWD python benchmarks/bench_grid_rule.py
    PYTHONPATH=$PWD python benchmarks/bench_grid_rule.py --end-to-end
"""

import argparse
import os
import sys
import time
import warnings

import numpy as np
from sklearn.ensemble import HistGradientBoostingRegressor
from sklearn.model_selection import train_test_split

sys.path.insert(0, os.path.dirname(__file__))

from _datasets import load_regression  # noqa: E402

from skdp_label import LabelDPRegressor  # noqa: E402
from skdp_label.mechanisms import get_mechanism_class, mechanism_names  # noqa: E402

MECHANISMS = ["unbiased", "rr-on-bins", "debiased-rr", "exponential"]
OLD_GRID = {"unbiased": 1.0, "rr-on-bins": 1.0, "debiased-rr": 1.0, "exponential": None}
# Parameters a mechanism needs beyond epsilon and bounds, for the end-to-end part.
# BiasVarianceRandomizer keeps the unit grid by default (1,001 points here: minutes per
# fit); it is measured on the same 'auto' grid as OptimalUnbiased.
EXTRA = {"gaussian": {"delta": 1e-6}, "bias-variance": {"grid_size": "auto"}}


def _timed(cls):
    """The mechanism class, recording how long its fit_transform takes."""

    class Timed(cls):
        def fit_transform(self, y, X=None):
            start = time.perf_counter()
            out = super().fit_transform(y, X)
            self.privatize_seconds_ = time.perf_counter() - start
            return out

    Timed.__name__ = cls.__name__
    return Timed


def _grid_points(bounds, resolution):
    lo, hi = bounds
    if resolution is None:
        return 101
    return int(np.floor((hi - lo) / resolution + 1e-9)) + 1


def _one_fit(cls, data, X, y, bounds, eps, params, seed):
    X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.25, random_state=seed)
    mech = cls(eps, bounds=bounds, **params)
    reg = LabelDPRegressor(
        HistGradientBoostingRegressor(random_state=seed), mechanism=mech, epsilon=eps,
        random_state=seed,
    )
    reg.fit(X_tr, y_tr)
    fitted = reg.mechanism_
    return {
        "n_train": len(y_tr),
        "grid_points": fitted.input_values_.size,
        "privatize_s": fitted.privatize_seconds_,
        "test_mse": float(np.mean((reg.predict(X_te) - y_te) ** 2)),
    }


def grid_study(datasets, mechanisms, epsilons, seeds, max_unit_points):
    print("dataset,n_train,mechanism,epsilon,grid,grid_points,seed,privatize_s,test_mse")
    rows = []
    for data in datasets:
        X, y, bounds = load_regression(data)
        for name in mechanisms:
            cls = _timed(get_mechanism_class(name))
            for eps in epsilons:
                for grid in ("old", "auto"):
                    params = {} if grid == "auto" else {"resolution": OLD_GRID[name]}
                    k = _grid_points(bounds, OLD_GRID[name])
                    if grid == "old" and name == "unbiased" and k > max_unit_points:
                        print(f"{data},,{name},{eps},{grid},{k},,skipped,skipped", flush=True)
                        continue
                    for seed in seeds:
                        row = {"dataset": data, "mechanism": name, "epsilon": eps, "grid": grid,
                               "seed": seed, **_one_fit(cls, data, X, y, bounds, eps, params, seed)}
                        rows.append(row)
                        print(
                            "{dataset},{n_train},{mechanism},{epsilon},{grid},{grid_points},{seed},"
                            "{privatize_s:.4f},{test_mse:.6g}".format(**row), flush=True,
                        )
    _summary(rows)


def _summary(rows):
    """Mean over seeds: MSE of the new default / MSE of the old, and the times."""
    print("\nsummary (means over seeds)")
    print("dataset,mechanism,epsilon,points_old,points_auto,mse_old,mse_auto,mse_ratio,"
          "privatize_s_old,privatize_s_auto")
    keys = sorted({(r["dataset"], r["mechanism"], r["epsilon"]) for r in rows})
    for key in keys:
        by = {g: [r for r in rows if (r["dataset"], r["mechanism"], r["epsilon"]) == key
                  and r["grid"] == g] for g in ("old", "auto")}
        if not by["auto"]:
            continue
        mean = {g: {f: np.mean([r[f] for r in by[g]]) if by[g] else float("nan")
                    for f in ("grid_points", "test_mse", "privatize_s")} for g in by}
        print(
            f"{key[0]},{key[1]},{key[2]},{mean['old']['grid_points']:.0f},"
            f"{mean['auto']['grid_points']:.0f},{mean['old']['test_mse']:.5g},"
            f"{mean['auto']['test_mse']:.5g},"
            f"{mean['auto']['test_mse'] / mean['old']['test_mse']:.3f},"
            f"{mean['old']['privatize_s']:.3f},{mean['auto']['privatize_s']:.3f}"
        )


def end_to_end(n_rows, n_features, epsilon, bounds, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n_rows, n_features)).astype(np.float32)
    lo, hi = bounds
    signal = X[:, :5] @ rng.normal(size=5) + np.sin(X[:, 5]) * 2 + X[:, 6] * X[:, 7]
    y = np.clip(lo + (hi - lo) * (0.5 + 0.1 * signal + 0.05 * rng.normal(size=n_rows)), lo, hi)
    start = time.perf_counter()
    HistGradientBoostingRegressor(random_state=seed).fit(X, y)
    base = time.perf_counter() - start
    print(f"HistGradientBoostingRegressor fit on {n_rows} x {n_features}: {base:.2f} s")
    print("mechanism,grid_points,privatize_s,share_of_hgbr_fit")
    y_int = np.rint(y)  # for the mechanisms of integer labels
    for name in mechanism_names("regression"):
        mech = get_mechanism_class(name)(epsilon, bounds=bounds, **EXTRA.get(name, {}))
        labels = y_int if getattr(mech, "_integer", False) else y
        mech.fit_transform(labels[:1000])  # first call: numba compilation / cache load, not counted
        start = time.perf_counter()
        mech.fit_transform(labels)
        seconds = time.perf_counter() - start
        points = mech.input_values_.size if hasattr(mech, "input_values_") else ""
        print(f"{name},{points},{seconds:.3f},{seconds / base:.2%}", flush=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--datasets", nargs="+",
                        default=["diabetes", "randhie", "fair", "diamonds"])
    parser.add_argument("--mechanisms", nargs="+", default=MECHANISMS)
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.1, 0.5, 1.0, 2.0, 4.0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--max-unit-points", type=int, default=400)
    parser.add_argument("--end-to-end", action="store_true")
    parser.add_argument("--rows", type=int, default=10**6)
    args = parser.parse_args()
    # Fixed seeds are what makes a benchmark reproducible; the warning says so for every fit.
    warnings.filterwarnings("ignore", message=".*fixed integer random_state.*")
    if args.end_to_end:
        end_to_end(args.rows, 20, 1.0, (0.0, 1000.0))
    else:
        grid_study(args.datasets, args.mechanisms, args.epsilons, args.seeds, args.max_unit_points)


if __name__ == "__main__":
    main()
