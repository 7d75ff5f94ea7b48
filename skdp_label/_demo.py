"""The demo: privacy-utility table of every mechanism on a bundled dataset.

Regression -- diabetes (scikit-learn's bundled regression set, 442
patients): the label is a disease-progression score, an integer that the
dataset documents as lying in 25..346; the demo declares the public bounds
(0, 350) -- from the dataset's documentation, never from the labels.
``LabelDPRegressor`` privatizes the training labels with each mechanism at
each epsilon and trains RidgeCV on them; the table shows the test RMSE
against true test labels (the usual research protocol), next to the
non-private model.

Classification -- digits: RR against RRWithPrior with one and two stages
(and with a cluster prior), see
:func:`skdp_label.estimators.classification_table`.
"""

import time
import warnings

import numpy as np
from sklearn.datasets import load_diabetes
from sklearn.linear_model import RidgeCV
from sklearn.metrics import mean_squared_error
from sklearn.model_selection import train_test_split

from .estimators import LabelDPRegressor, classification_table
from .mechanisms import mechanism_names
from .utils import PrivacyLeakWarning

BOUNDS = (0, 350)
EPSILONS = (0.5, 1.0, 2.0, 4.0, 8.0)


def _regression_data(random_state):
    X, y = load_diabetes(return_X_y=True)
    return train_test_split(X, y, test_size=0.3, random_state=random_state)


def regression_table(epsilons=EPSILONS, n_repeats=5, random_state=0):
    """Test RMSE of RidgeCV trained on labels privatized by each mechanism.

    Returns
    -------
    rows : list of (name, list of mean RMSE per epsilon)
    baseline : float
        RMSE of the model trained on the true labels.
    """
    rng = np.random.default_rng(random_state)
    seeds = rng.integers(0, 2**31, size=n_repeats)
    names = mechanism_names("regression")
    results = {name: np.zeros((n_repeats, len(epsilons))) for name in names}
    baseline = []
    # A reproducible study on public data: fixed seeds are the point here.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)
        _fill_regression_results(results, baseline, seeds, names, epsilons)
    rows = [(name, results[name].mean(axis=0).tolist()) for name in names]
    return rows, float(np.mean(baseline))


def _fill_regression_results(results, baseline, seeds, names, epsilons):
    for rep, seed in enumerate(seeds):
        X_tr, X_te, y_tr, y_te = _regression_data(int(seed))
        model = RidgeCV(alphas=np.logspace(-3, 3, 13))
        baseline.append(mean_squared_error(y_te, model.fit(X_tr, y_tr).predict(X_te)) ** 0.5)
        for name in names:
            for j, eps in enumerate(epsilons):
                private = LabelDPRegressor(
                    model, name, eps, bounds=BOUNDS,
                    # Grid- and prior-based mechanisms work on a public grid of step 5
                    # (71 values): with n = 309 training labels a finer domain leaves
                    # the private prior mostly noise.
                    mechanism_params={"resolution": 5.0},
                    random_state=int(seed) + j,
                )
                pred = private.fit(X_tr, y_tr).predict(X_te)
                results[name][rep, j] = mean_squared_error(y_te, pred) ** 0.5


def format_table(title, header, rows, baseline_label, baseline, fmt=".2f"):
    width = max(len(baseline_label), *(len(name) for name, _ in rows)) + 2
    lines = [title, "", f"{'mechanism':<{width}}" + "".join(f"{h:>10}" for h in header)]
    lines.append("-" * len(lines[-1]))
    for name, values in rows:
        lines.append(f"{name:<{width}}" + "".join(f"{v:>10{fmt}}" for v in values))
    lines.append(f"{baseline_label:<{width}}" + f"{baseline:>10{fmt}}" * len(header))
    return "\n".join(lines)


def run_demo(n_repeats=5, random_state=0, out=print):
    start = time.perf_counter()
    rows, baseline = regression_table(EPSILONS, n_repeats, random_state)
    out(
        format_table(
            "Regression -- diabetes (scikit-learn), RidgeCV on privatized labels; "
            f"test RMSE, mean of {n_repeats} splits (public label bounds {BOUNDS})",
            [f"eps={e:g}" for e in EPSILONS],
            rows,
            "non-private",
            baseline,
        )
    )
    class_eps = (0.5, 1.0, 2.0, 4.0)
    rows, baseline = classification_table(class_eps, random_state=random_state, n_repeats=min(n_repeats, 3))
    out("")
    out(
        format_table(
            "Classification -- digits (scikit-learn), LogisticRegression on privatized labels; "
            "test accuracy",
            [f"eps={e:g}" for e in class_eps],
            rows,
            "non-private",
            baseline,
            fmt=".3f",
        )
    )
    out(f"\n({time.perf_counter() - start:.1f} s)")
