"""mechanism='auto' against RR-on-Bins, the unbiased randomizer and references (issue 12).

For each real regression dataset of ``_datasets.py`` (public bounds), each
epsilon and seed: an 80/20 split, ``HistGradientBoostingRegressor`` trained
on the labels randomized by ``LabelDPRegressor`` with ``mechanism='auto'``,
``'rr-on-bins'`` and ``'unbiased'``; the test MSE on the *true* test labels.
References: the same model on the true labels (non-private), and the
epsilon-DP constant predictor (the mean of the training labels by the
Laplace mechanism within the public bounds at epsilon, clipped to them).

Every mechanism uses its library defaults (grid sized by bounds, epsilon and n,
prior budget rule, predictions clipped to the bounds). Each is fitted once with
``shrinkage='cv'`` (the guard toward the constant, on by default for 'auto'):
the guarded predictions are ``predict``, the unguarded ones the base
estimator's own predictions clipped to the bounds (the guard is a
post-processing, so both come from the same noisy labels). Columns ``<mech>``
are unguarded, ``<mech>+g`` guarded; 'auto+g' is ``LabelDPRegressor``'s default
for ``mechanism='auto'``.

Run: ``python benchmarks/bench_auto.py [--datasets diabetes randhie fair]
[--seeds 3] [--epsilons ...] [--mechanisms auto ...] [--out auto.csv]``;
prints one table per dataset (MSE / the non-private model's MSE) and whether
'auto+g' is within 5 % of the better of (unguarded) RR-on-Bins and unbiased,
and no worse than the DP constant. The constant's noise for a seed does not
depend on which epsilons are run (one draw per epsilon of ``EPSILONS``, in
order), so a restricted run reproduces the full run's cells.

``--paired`` prints, per (dataset, epsilon), 'auto+g' / DP constant with a
paired standard error over seeds (delta method on the per-seed MSEs), and
the same ratio against the constant's *expected* MSE over its own Laplace
noise (computed per split, so the reference adds no noise of its own).
E.g. the cells of the full run where 'auto+g' was above the constant:
``--datasets diabetes --epsilons 0.05 0.3 1 --mechanisms auto --seeds 20
--paired``.
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np
import pandas as pd

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _datasets import load_regression  # noqa: E402
from sklearn.ensemble import HistGradientBoostingRegressor  # noqa: E402
from sklearn.metrics import mean_squared_error  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from skdp_label import LabelDPRegressor  # noqa: E402

EPSILONS = [0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 4.0, 8.0]
MECHANISMS = ["auto", "rr-on-bins", "unbiased"]
COLUMNS = ["auto+g", "auto", "rr-on-bins", "rr-on-bins+g", "unbiased", "unbiased+g", "dp-constant"]


def split(name, seed):
    X, y, bounds = load_regression(name)
    X_train, X_test, y_train, y_test = train_test_split(X, y, test_size=0.2, random_state=seed)
    return X_train, X_test, y_train, y_test, bounds


def dp_constant_mse(y_train, y_test, bounds, epsilon, unit_noise):
    """Test MSE of the epsilon-DP mean (Laplace, sensitivity (hi - lo) / n),
    for standard Laplace draw(s) ``unit_noise`` (an array gives one MSE each)."""
    lo, hi = bounds
    noisy_mean = y_train.mean() + unit_noise * (hi - lo) / (y_train.size * epsilon)
    constant = np.clip(noisy_mean, lo, hi)
    # MSE of a constant c: (c - mean)^2 + the test labels' variance.
    return (constant - y_test.mean()) ** 2 + y_test.var()


def constant_noise(seed, epsilons):
    """Standard Laplace draws of the reference, by epsilon: one per epsilon of
    ``EPSILONS`` in order (as the full run draws them), then the others."""
    rng = np.random.default_rng(1000 + seed)  # the reference's own noise
    order = EPSILONS + [e for e in epsilons if e not in EPSILONS]
    return {eps: rng.laplace() for eps in order}


#: Standard Laplace quantiles: the reference's expected MSE over its noise.
_LAPLACE_GRID = np.random.default_rng(0).laplace(size=200_000)


def private_mse(data, dataset, mechanism, epsilon, seed, base=None, **extra):
    """(guarded test MSE, unguarded test MSE, fitted estimator) of one private fit."""
    X_train, X_test, y_train, y_test, bounds = data
    reg = LabelDPRegressor(
        base or HistGradientBoostingRegressor(random_state=seed), mechanism, epsilon, bounds=bounds,
        mechanism_params=extra or None, random_state=seed, shrinkage="cv",
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        reg.fit(X_train, y_train)
    unguarded = np.clip(reg.estimator_.predict(X_test), *bounds)
    return (mean_squared_error(y_test, reg.predict(X_test)),
            mean_squared_error(y_test, unguarded), reg)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["diabetes", "randhie", "fair"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epsilons", nargs="+", type=float, default=EPSILONS)
    parser.add_argument("--mechanisms", nargs="+", default=MECHANISMS, choices=MECHANISMS,
                        help="private fits to run ('auto' is always run)")
    parser.add_argument("--paired", action="store_true",
                        help="print auto+g / DP constant per cell with a paired standard error")
    parser.add_argument("--out", default=None, help="CSV of every fit")
    args = parser.parse_args()
    mechanisms = ["auto"] + [m for m in args.mechanisms if m != "auto"]
    rows = []
    for dataset in args.datasets:
        for seed in range(args.seeds):
            data = split(dataset, seed)
            X_train, X_test, y_train, y_test, bounds = data
            base = HistGradientBoostingRegressor(random_state=seed).fit(X_train, y_train)
            exact = mean_squared_error(y_test, base.predict(X_test))
            noise = constant_noise(seed, args.epsilons)
            for eps in args.epsilons:
                row = {"dataset": dataset, "seed": seed, "epsilon": eps, "non-private": exact,
                       "dp-constant": float(
                           dp_constant_mse(y_train, y_test, bounds, eps, noise[eps])),
                       "dp-constant E": float(np.mean(
                           dp_constant_mse(y_train, y_test, bounds, eps, _LAPLACE_GRID)))}
                for mech in mechanisms:
                    t0 = time.perf_counter()
                    row[f"{mech}+g"], row[mech], reg = private_mse(data, dataset, mech, eps, seed)
                    row[f"{mech} s"] = time.perf_counter() - t0
                    row[f"{mech} slope"] = reg.shrinkage_slope_
                    if mech == "auto":
                        row["selected"] = reg.mechanism_.selected_
                        row["auto mean eps"] = reg.mechanism_.mean_epsilon_
                        # The public variance bound of the guard's mean (0 without
                        # one) and the reference's Laplace variance (before clipping).
                        row["auto mean var"] = reg.mechanism_.noisy_mean_variance_ or 0.0
                        row["dp-constant var"] = 2 * (
                            (bounds[1] - bounds[0]) / (y_train.size * eps)) ** 2
                rows.append(row)
                print(dataset, seed, eps, row["selected"],
                      {k: round(row[k] / exact, 3) for k in COLUMNS if k in row},
                      {k: round(row[f"{k} slope"], 2) for k in mechanisms},
                      flush=True)
    frame = pd.DataFrame(rows)
    if args.out:
        frame.to_csv(args.out, index=False)
    if len(mechanisms) == len(MECHANISMS):
        summarise(frame)
    if args.paired:
        paired(frame)


def paired(frame):
    """auto+g / DP constant per cell, with a paired standard error over seeds."""
    out = []
    for (dataset, eps), part in frame.groupby(["dataset", "epsilon"], sort=False):
        a = part["auto+g"].to_numpy()
        k = a.size
        cell = {"dataset": dataset, "epsilon": eps, "seeds": k,
                "auto mean eps / eps": part["auto mean eps"].mean() / eps,
                "auto slope": part["auto slope"].mean(),
                # What a constant at the guard's mean loses to the reference in
                # expectation: the difference of their noise variances.
                "expected gap": (part["auto mean var"] - part["dp-constant var"]).mean()
                / part["dp-constant E"].mean()}
        for ref in ["dp-constant", "dp-constant E"]:
            c = part[ref].to_numpy()
            ratio = a.mean() / c.mean()
            # Delta method: Var(mean a / mean c) ~ Var(a - r c) / (k mean(c)^2).
            se = np.std(a - ratio * c, ddof=1) / (np.sqrt(k) * c.mean()) if k > 1 else np.nan
            cell[f"auto+g / {ref}"] = ratio
            cell[f"se ({ref})"] = se
        out.append(cell)
    with pd.option_context("display.width", 200):
        print("\nauto+g / DP constant, paired over seeds (E: the constant's expected MSE over "
              "its noise; expected gap: excess variance of the guard's mean over the "
              "reference's, / the constant's expected MSE)")
        print(pd.DataFrame(out).round(4).to_string(index=False))


def summarise(frame):
    cols = COLUMNS
    for dataset, part in frame.groupby("dataset", sort=False):
        mean = part.groupby("epsilon")[cols + ["non-private"]].mean()
        table = mean[cols].div(mean["non-private"], axis=0)
        table["best of two"] = table[["rr-on-bins", "unbiased"]].min(axis=1)
        table["auto+g / best"] = table["auto+g"] / table["best of two"]
        table["auto+g / const"] = table["auto+g"] / table["dp-constant"]
        table["auto slope"] = part.groupby("epsilon")["auto slope"].mean()
        table["selected"] = part.groupby("epsilon")["selected"].agg(
            lambda s: "/".join(sorted(set(s))))
        print(f"\n{dataset}: mean test MSE over seeds / non-private MSE "
              f"({mean['non-private'].iloc[0]:.4g})")
        with pd.option_context("display.width", 200):
            print(table.round(3).to_string())
        within = table["auto+g / best"] <= 1.05
        better = table["auto+g / best"] < 1.0
        no_worse = table["auto+g / const"] <= 1.0
        print(f"auto+g within 5 % of the better at {int(within.sum())}/{len(within)} epsilons, "
              f"strictly better at {int(better.sum())}, <= DP constant at {int(no_worse.sum())}, "
              f"within 5 % and <= DP constant at {int((within & no_worse).sum())}")


if __name__ == "__main__":
    main()
