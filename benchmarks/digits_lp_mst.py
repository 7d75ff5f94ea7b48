"""Accuracy of RR vs RRWithPrior (1 and 2 stages, with and without reuse,
uniform or cluster prior) on scikit-learn's digits, LogisticRegression(C=0.1).

20 runs per cell: 5 stratified folds x 4 label randomizations; mean test
accuracy (true labels) with its standard error.

    PYTHONPATH=. python benchmarks/digits_lp_mst.py
"""

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import StratifiedKFold
from threadpoolctl import threadpool_limits

from skdp_label import LabelDPClassifier

CLUSTERS = dict(prior="clusters", n_clusters=10, prior_epsilon=0.1)
CONFIGS = {
    "RR": dict(mechanism="rr"),
    "RRWithPrior, 2 stages (reuse)": dict(n_stages=2),
    "RRWithPrior, 2 stages (no reuse)": dict(n_stages=2, reuse_labels=False),
    "RRWithPrior, cluster prior, 1 stage": dict(CLUSTERS),
    "RRWithPrior, cluster prior, 2 stages": dict(CLUSTERS, n_stages=2),
}


def main(epsilons=(1.0, 2.0), n_runs=20):
    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    folds = list(StratifiedKFold(5, shuffle=True, random_state=1).split(X, y))
    print(f"{'method':<38}" + "".join(f"{'eps=%g' % e:>16}" for e in epsilons))
    for name, params in CONFIGS.items():
        cells = []
        for eps in epsilons:
            scores = []
            for run in range(n_runs):
                train, test = folds[run % len(folds)]
                clf = LabelDPClassifier(LogisticRegression(C=0.1, max_iter=300), epsilon=eps,
                                        random_state=1000 + run, **params)
                scores.append(clf.fit(X[train], y[train]).score(X[test], y[test]))
            cells.append(f"{np.mean(scores):.3f} ± {np.std(scores) / np.sqrt(n_runs):.3f}")
        print(f"{name:<38}" + "".join(f"{c:>16}" for c in cells))


if __name__ == "__main__":
    with threadpool_limits(limits=1):
        main()
