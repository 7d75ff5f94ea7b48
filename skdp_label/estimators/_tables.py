"""Accuracy table of the classification mechanisms on scikit-learn's digits."""

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from threadpoolctl import threadpool_limits

from .._accountant import BudgetAccountant
from ..utils._random import check_random_generator
from ._classifier import LabelDPClassifier

__all__ = ["classification_table", "CLASSIFICATION_METHODS"]

#: (name, stages, LabelDPClassifier parameters) of the compared methods.
CLASSIFICATION_METHODS = (
    ("RR", 1, dict(mechanism="rr")),
    ("RRWithPrior, cluster prior", 1, dict(prior="clusters", n_clusters=10, prior_epsilon=0.1)),
    ("RRWithPrior (LP-2ST)", 2, dict(n_stages=2)),
    (
        "RRWithPrior, cluster prior (LP-2ST)",
        2,
        dict(n_stages=2, prior="clusters", n_clusters=10, prior_epsilon=0.1),
    ),
)


def classification_table(epsilons=(0.5, 1.0, 2.0, 4.0), random_state=0, n_repeats=3):
    """Test accuracy of RR and RRWithPrior with 1 and 2 stages on digits.

    Each row trains ``LabelDPClassifier(LogisticRegression(C=0.1))`` on 70%
    of scikit-learn's digits (1257 images, 10 classes) with label-DP
    labels and reports its accuracy on the other 30% with true labels,
    averaged over ``n_repeats`` label randomizations (the split is fixed).
    Cluster priors: k-means with 10 clusters on the pixels and a
    discrete-Laplace histogram per cluster costing 0.1 of the budget
    (004, Alg. 4). Every fit is charged to an accountant, and the row's
    ``epsilon_spent`` is read back from it.

    Parameters
    ----------
    epsilons : sequence of float, default=(0.5, 1.0, 2.0, 4.0)
    random_state : int, default=0
        Seeds the split and the label noise.
    n_repeats : int, default=3

    Returns
    -------
    rows : list of dict
        Keys ``epsilon``, ``method``, ``stages``, ``accuracy`` (mean),
        ``accuracy_std``, ``epsilon_spent`` (per fit, from the accountant).

    Examples
    --------
    >>> from skdp_label.estimators import classification_table
    >>> rows = classification_table(epsilons=[2.0], n_repeats=1)
    >>> [(r["method"], r["stages"]) for r in rows][:2]
    [('RR', 1), ('RRWithPrior, cluster prior', 1)]
    >>> all(r["epsilon_spent"] == 2.0 for r in rows)
    True
    """
    X, y = load_digits(return_X_y=True)
    X_train, X_test, y_train, y_test = train_test_split(
        X / 16.0, y, test_size=0.3, stratify=y, random_state=random_state
    )
    rng = check_random_generator(random_state)
    seeds = rng.integers(2**31 - 1, size=n_repeats)
    rows = []
    with threadpool_limits(limits=1):  # small problems: threads only contend
        for epsilon in epsilons:
            for method, stages, params in CLASSIFICATION_METHODS:
                scores, spent = [], []
                for seed in seeds:
                    accountant = BudgetAccountant()
                    clf = LabelDPClassifier(
                        LogisticRegression(C=0.1, max_iter=300), epsilon=float(epsilon),
                        accountant=accountant, random_state=int(seed), **params,
                    ).fit(X_train, y_train)
                    scores.append(clf.score(X_test, y_test))
                    spent.append(accountant.spent_epsilon)
                rows.append(
                    dict(
                        epsilon=float(epsilon), method=method, stages=stages,
                        accuracy=float(np.mean(scores)), accuracy_std=float(np.std(scores)),
                        epsilon_spent=float(max(spent)),
                    )
                )
    return rows
