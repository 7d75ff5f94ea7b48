"""Utility of RPWithPrior (paper 003) against the library's other regression mechanisms.

Run from the repository root (statsmodels is needed for the second dataset:
``pip install statsmodels``; it is not a dependency of skdp_label):

    OMP_NUM_THREADS=2 python benchmarks/bench_rp_with_prior.py [--quick] [--repeats R]

Two real regression datasets that ship inside PyPI packages:

* **diabetes** (scikit-learn, 442 patients): disease progression one year
  after baseline. Public bounds ``(25, 346)``: the range scikit-learn's
  documentation of the dataset gives ("Targets: integer 25 - 346").
* **randhie** (statsmodels, RAND Health Insurance Experiment, 20,190
  person-years): ``mdvis``, the number of outpatient visits to a doctor in a
  year. Public bounds ``(0, 52)``: a count, capped at one visit a week, a
  cap chosen from what the label means (the documentation gives no range).
  Training labels above the cap are clipped before privatization (a public
  per-label step); test MSE is against the true, unclipped test labels.

For each epsilon in {0.1, 0.5, 1, 2, 4}, each mechanism privatizes the
training labels (80 %, a new random split per repeat) and
HistGradientBoostingRegressor is trained on them; the table gives the test
MSE (mean +- standard deviation over repeats) and, below it, the MSE of the
noisy training labels themselves. Prior-based mechanisms (RR-on-Bins,
unbiased, RPWithPrior, RRWithPrior) estimate their prior privately from the
same labels with the library's two-step split (``prior_epsilon='auto'``,
counted in epsilon) over a public grid: step 5 for diabetes, 1 for randhie.
RPWithPrior uses ``zeta='auto'``.
"""

import argparse
import os
import pathlib
import sys
import time
import warnings

os.environ.setdefault("OMP_NUM_THREADS", "2")
ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402
from sklearn.datasets import load_diabetes  # noqa: E402
from sklearn.ensemble import HistGradientBoostingRegressor  # noqa: E402
from sklearn.metrics import mean_squared_error  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402

from skdp_label.mechanisms import make_mechanism  # noqa: E402
from skdp_label.utils import PrivacyLeakWarning  # noqa: E402

EPSILONS = [0.1, 0.5, 1.0, 2.0, 4.0]
MECHANISMS = [
    ("laplace", "Laplace"),
    ("staircase", "staircase"),
    ("rr-on-bins", "RR-on-Bins"),
    ("unbiased", "unbiased"),
    ("rr-with-prior-regression", "RRWithPrior"),
    ("rp-with-prior", "RPWithPrior"),
]


def load_diabetes_data():
    X, y = load_diabetes(return_X_y=True)
    return X, y.astype(float), (25.0, 346.0), 5.0


def load_randhie_data():
    from statsmodels.datasets import randhie

    data = randhie.load_pandas()
    return data.exog.to_numpy(float), data.endog.to_numpy(float), (0.0, 52.0), 1.0


DATASETS = {"diabetes": load_diabetes_data, "randhie": load_randhie_data}


def model():
    return HistGradientBoostingRegressor(max_iter=200, early_stopping=False, random_state=0)


def run(name, repeats, epsilons, seed=0):
    X, y, bounds, resolution = DATASETS[name]()
    rng = np.random.default_rng(seed)
    test_mse = {m: np.zeros((repeats, len(epsilons))) for m, _ in MECHANISMS}
    label_mse = {m: np.zeros((repeats, len(epsilons))) for m, _ in MECHANISMS}
    baseline = []
    for rep in range(repeats):
        X_tr, X_te, y_tr, y_te = train_test_split(
            X, y, test_size=0.2, random_state=int(rng.integers(2**31))
        )
        y_pub = np.clip(y_tr, *bounds)  # public per-label step, before privatization
        baseline.append(mean_squared_error(y_te, model().fit(X_tr, y_tr).predict(X_te)))
        for mech_name, _ in MECHANISMS:
            for j, eps in enumerate(epsilons):
                mech = make_mechanism(
                    mech_name,
                    epsilon=eps,
                    bounds=bounds,
                    resolution=resolution,
                    random_state=int(rng.integers(2**31)),
                )
                noisy = mech.fit_transform(y_pub)
                label_mse[mech_name][rep, j] = mean_squared_error(y_tr, noisy)
                pred = model().fit(X_tr, noisy).predict(X_te)
                test_mse[mech_name][rep, j] = mean_squared_error(y_te, pred)
    return test_mse, label_mse, float(np.mean(baseline)), float(np.std(baseline)), len(y)


def format_table(title, results, epsilons, baseline=None):
    head = "| mechanism | " + " | ".join(f"eps={e:g}" for e in epsilons) + " |"
    lines = [f"**{title}**", "", head, "|" + " --- |" * (len(epsilons) + 1)]
    for mech_name, label in MECHANISMS:
        r = results[mech_name]
        best = [min(results[m][:, j].mean() for m, _ in MECHANISMS) for j in range(len(epsilons))]
        cells = []
        for j in range(len(epsilons)):
            cell = f"{r[:, j].mean():.4g} ± {r[:, j].std():.2g}"
            cells.append(f"**{cell}**" if r[:, j].mean() == best[j] else cell)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    if baseline is not None:
        lines.append(
            "| non-private | "
            + " | ".join(f"{baseline[0]:.4g} ± {baseline[1]:.2g}" for _ in epsilons)
            + " |"
        )
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--quick", action="store_true", help="2 repeats, diabetes only")
    parser.add_argument("--datasets", nargs="+", default=list(DATASETS))
    args = parser.parse_args(argv)
    repeats = 2 if args.quick else args.repeats
    names = ["diabetes"] if args.quick else args.datasets
    warnings.simplefilter("ignore", PrivacyLeakWarning)  # seeded on purpose: a reproducible study
    for name in names:
        start = time.perf_counter()
        test_mse, label_mse, base_mean, base_std, n = run(name, repeats, EPSILONS)
        print(
            format_table(
                f"{name} (n = {n}): test MSE of HistGradientBoosting, {repeats} splits",
                test_mse,
                EPSILONS,
                (base_mean, base_std),
            )
        )
        print()
        print(format_table(f"{name}: MSE of the noisy training labels", label_mse, EPSILONS))
        print(f"\n({time.perf_counter() - start:.0f} s)\n", flush=True)


if __name__ == "__main__":
    main()
