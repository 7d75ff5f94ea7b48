"""Privacy–utility tables of the study tool on real data (benchmarks/_datasets.py).

For each dataset: ``privacy_utility_study`` with HistGradientBoosting, an 80/20
split, mechanisms × ε × 3 seeds, the non-private model and the ε-DP constant as
references. Regression prints the test MSE as a multiple of the non-private
model's (mean over seeds); classification prints the test accuracy. Scores use
the true test labels (a labels-party study of public data).

    PYTHONPATH=$PWD python benchmarks/bench_study.py diabetes fair fair-rating
"""

import sys
import warnings

from _datasets import CLASSIFICATION, load_classification, load_regression
from sklearn.ensemble import HistGradientBoostingClassifier, HistGradientBoostingRegressor

from skdp_label import LabelDPClassifier, LabelDPRegressor
from skdp_label.study import DP_CONSTANT, NON_PRIVATE, privacy_utility_study

EPSILONS = [0.05, 0.1, 0.3, 1.0, 2.0, 4.0, 8.0]
SEEDS = [0, 1, 2]


# Grid step of the prior-based mechanisms: about 40-60 label values per dataset, so
# that the unbiased solver stays fast (public: from the bounds only).
RESOLUTION = {"diabetes": 8.0, "fair": 1.0, "randhie": 1.0, "diamonds": 400.0}


def regression(name):
    X, y, bounds = load_regression(name)
    est = LabelDPRegressor(HistGradientBoostingRegressor(max_iter=50, random_state=0),
                           bounds=bounds, mechanism_params={"resolution": RESOLUTION[name]})
    table = privacy_utility_study(
        est, X, y, mechanisms=["laplace", "rr-on-bins", "unbiased"], epsilons=EPSILONS,
        seeds=SEEDS, test_size=0.2, scoring="neg_mean_squared_error", time_limit=600,
        progress=False,
    )
    reference = -table.loc[table["method"] == NON_PRIVATE, "score"].iloc[0]
    ok = table[(table["status"] == "ok") & (table["method"] != NON_PRIVATE)]
    ratio = (-ok.pivot_table(index="epsilon", columns="method", values="score") / reference)
    print(f"\n{name}: n={len(y)}, bounds={bounds}, non-private test MSE={reference:.4g}")
    print("test MSE / non-private test MSE (mean over seeds)")
    print(ratio.round(2).to_string())
    print("rows not ok:", (table["status"] != "ok").sum())


def classification(name):
    X, y, classes = load_classification(name)
    est = LabelDPClassifier(HistGradientBoostingClassifier(max_iter=50, random_state=0),
                            classes=classes)
    table = privacy_utility_study(
        est, X, y, mechanisms={"rr": "rr", "rr-with-prior": "rr-with-prior"},
        epsilons=EPSILONS, seeds=SEEDS, test_size=0.2, time_limit=600, progress=False,
    )
    ok = table[table["status"] == "ok"]
    print(f"\n{name}: n={len(y)}, {len(classes)} classes")
    print("non-private accuracy:", round(ok.loc[ok["method"] == NON_PRIVATE, "score"].iloc[0], 3))
    acc = ok[ok["method"] != NON_PRIVATE].pivot_table(index="epsilon", columns="method",
                                                       values="score")
    print("test accuracy (mean over seeds)")
    print(acc.round(3).to_string())
    print("rows not ok:", (table["status"] != "ok").sum(), "| reference:", DP_CONSTANT)


if __name__ == "__main__":
    warnings.simplefilter("ignore")
    for dataset in sys.argv[1:] or ["diabetes"]:
        (classification if dataset in CLASSIFICATION else regression)(dataset)
