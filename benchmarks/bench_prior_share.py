"""How much of epsilon should each prior-based regression mechanism spend on its prior?

For RR-on-Bins, the unbiased randomizer and 'auto' (HistGradientBoosting,
80/20 splits, real datasets with public bounds), test MSE on true labels for
prior budgets: a public uniform prior (``share 0``, nothing spent), fixed
shares of epsilon, and the mechanism's own ``prior_epsilon='auto'`` rule
(000's ``sqrt(|Y| / n)`` at most epsilon / 2 for RR-on-Bins; for the unbiased
randomizer at most epsilon / 10, or 0 when the histogram would be mostly noise).
Grids as in ``bench_auto.py``. The numbers behind the ``prior_epsilon='auto'``
rules of docs/auto.md.

Run: ``python benchmarks/bench_prior_share.py [--datasets ...] [--seeds 3]``.
"""

import argparse
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_auto import UNBIASED_GRID, RESOLUTION, private_mse, split  # noqa: E402

SHARES = [0.0, 0.05, 0.1, 0.25, "auto"]


def grid(mechanism, dataset, bounds):
    lo, hi = bounds
    if mechanism == "unbiased":
        return np.linspace(lo, hi, UNBIASED_GRID)
    if mechanism == "rr-on-bins":
        step = RESOLUTION.get(dataset, 1.0)
        return np.arange(lo, hi + step / 2, step)
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["diabetes", "randhie", "fair"])
    parser.add_argument("--mechanisms", nargs="+", default=["unbiased", "rr-on-bins"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.1, 0.3, 1.0, 4.0])
    parser.add_argument("--out", default=None)
    args = parser.parse_args()
    rows = []
    for dataset in args.datasets:
        for seed in range(args.seeds):
            data = split(dataset, seed)
            for mech in args.mechanisms:
                values = grid(mech, dataset, data[4])
                for eps in args.epsilons:
                    for share in SHARES:
                        if share == 0.0:
                            if values is None:
                                continue
                            # A public uniform prior over the same grid: nothing spent.
                            extra = {"prior": (values, np.ones(values.size)), "bounds": None,
                                     "grid_size": None, "resolution": None}
                        elif share == "auto":  # the mechanism's own prior_epsilon='auto' rule
                            extra = {}
                        else:
                            extra = {"prior_epsilon": share * eps}
                        mse, _ = private_mse(data, dataset, mech, eps, seed, **extra)
                        rows.append({"dataset": dataset, "seed": seed, "mechanism": mech,
                                     "epsilon": eps, "share": str(share), "mse": mse})
                print(dataset, seed, mech, flush=True)
    import pandas as pd

    frame = pd.DataFrame(rows)
    if args.out:
        frame.to_csv(args.out, index=False)
    table = frame.groupby(["dataset", "mechanism", "epsilon", "share"])["mse"].mean().unstack("share")
    table = table.div(table.min(axis=1), axis=0)
    print("\nmean test MSE / best share's, per dataset, mechanism and epsilon")
    print(table.round(3).to_string())


if __name__ == "__main__":
    main()
