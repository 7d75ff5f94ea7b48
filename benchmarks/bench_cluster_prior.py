"""Budget share of LabelDPClassifier's cluster prior (prior='clusters'), on real data.

Test accuracy on true labels of LogisticRegression (scaled features) trained
by ``LabelDPClassifier(mechanism='rr-with-prior', prior='clusters')`` for
prior budgets ``share * epsilon`` and the ``'auto'`` rule
(``sqrt(n_clusters * |Y| / n)``, at most epsilon / 4), with plain randomized
response and the majority class as references; 80/20 splits.

Run: ``python benchmarks/bench_cluster_prior.py [--seeds 3]``.
"""

import argparse
import sys
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from _datasets import load_classification  # noqa: E402
from sklearn.linear_model import LogisticRegression  # noqa: E402
from sklearn.model_selection import train_test_split  # noqa: E402
from sklearn.pipeline import make_pipeline  # noqa: E402
from sklearn.preprocessing import StandardScaler  # noqa: E402

from skdp_label import LabelDPClassifier  # noqa: E402

SHARES = [0.1, 0.25, 0.5, "auto"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--datasets", nargs="+", default=["fair-rating", "anes96", "digits"])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.05, 0.1, 0.3, 1.0, 2.0])
    args = parser.parse_args()
    rows = []
    for dataset in args.datasets:
        X, y, classes = load_classification(dataset)
        for seed in range(args.seeds):
            X_tr, X_te, y_tr, y_te = train_test_split(X, y, test_size=0.2, random_state=seed)
            majority = np.mean(y_te == np.bincount(np.searchsorted(classes, y_tr)).argmax() + classes[0])
            base = make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))
            for eps in args.epsilons:
                row = {"dataset": dataset, "seed": seed, "epsilon": eps, "majority": majority}
                for share in ["rr", *SHARES]:
                    kw = {"mechanism": "rr", "prior": "uniform"} if share == "rr" else {
                        "mechanism": "rr-with-prior", "prior": "clusters",
                        "prior_epsilon": share if share == "auto" else share * eps}
                    clf = LabelDPClassifier(base, epsilon=eps, classes=classes, random_state=seed, **kw)
                    with warnings.catch_warnings():
                        warnings.simplefilter("ignore")
                        clf.fit(X_tr, y_tr)
                        row[str(share)] = float(np.mean(clf.predict(X_te) == y_te))
                    if share == "auto":
                        row["auto eps1"] = clf.prior_epsilon_
                rows.append(row)
            print(dataset, seed, flush=True)
    import pandas as pd

    frame = pd.DataFrame(rows)
    cols = ["majority", "rr", *map(str, SHARES), "auto eps1"]
    print("\nmean test accuracy (true labels) over seeds")
    print(frame.groupby(["dataset", "epsilon"])[cols].mean().round(3).to_string())


if __name__ == "__main__":
    main()
