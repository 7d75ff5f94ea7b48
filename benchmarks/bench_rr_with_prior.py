"""Speed of RRWithPrior with per-example priors and of the meta-estimators.

Run from the repository root::

    PYTHONPATH=. python benchmarks/bench_rr_with_prior.py
"""

import numpy as np
from sklearn.datasets import load_digits
from sklearn.linear_model import LogisticRegression, Ridge
from threadpoolctl import threadpool_limits

from bench_sampling import best_time  # sibling script (benchmarks/ is on sys.path)

from skdp_label import LabelDPClassifier, LabelDPRegressor
from skdp_label.mechanisms import RRWithPrior
from skdp_label.mechanisms.classification._solver import optimal_k


def best_of(fn, repeats=3):
    return best_time(fn, repeats)


def main():
    rng = np.random.default_rng(0)
    RRWithPrior(1.0, classes=[0, 1]).randomize([0, 1], np.full((2, 2), 0.5))  # JIT warm-up
    print("RRWithPrior.randomize with per-example priors (choose k, sort, sample)")
    print(f"{'n':>9} {'classes':>8} {'choose k [s]':>13} {'randomize [s]':>14} {'labels/s':>12}")
    for n_classes in [10, 100]:
        for n in [10_000, 100_000, 1_000_000]:
            if n * n_classes > 2e7:
                continue
            priors = rng.dirichlet(np.full(n_classes, 0.3), size=n)
            y = rng.integers(n_classes, size=n)
            mech = RRWithPrior(1.0, classes=np.arange(n_classes), random_state=0)
            t_k = best_of(lambda: optimal_k(priors, 1.0))
            t_r = best_of(lambda: mech.randomize(y, priors))
            print(f"{n:>9} {n_classes:>8} {t_k:>13.4f} {t_r:>14.4f} {n / t_r:>12.3g}")

    X, y = load_digits(return_X_y=True)
    X = X / 16.0
    print("\nLabelDPClassifier on digits (1797 x 64), LogisticRegression(C=0.1), fit time")
    print(f"{'model':<38} {'fit [s]':>8}")
    rows = [
        ("LogisticRegression alone", lambda: LogisticRegression(C=0.1, max_iter=300).fit(X, y)),
        ("LabelDPClassifier, RR", lambda: LabelDPClassifier(
            LogisticRegression(C=0.1, max_iter=300), "rr", random_state=0).fit(X, y)),
        ("LabelDPClassifier, 2 stages", lambda: LabelDPClassifier(
            LogisticRegression(C=0.1, max_iter=300), n_stages=2, random_state=0).fit(X, y)),
        ("LabelDPClassifier, clusters + 2 stages", lambda: LabelDPClassifier(
            LogisticRegression(C=0.1, max_iter=300), n_stages=2, prior="clusters",
            n_clusters=10, random_state=0).fit(X, y)),
    ]
    for name, fn in rows:
        print(f"{name:<38} {best_of(fn):>8.3f}")

    Xr = rng.normal(size=(200_000, 10))
    yr = np.clip(Xr @ rng.normal(size=10) + 5, 0, 10)
    print("\nLabelDPRegressor(Ridge) on 200000 x 10, fit time")
    print(f"{'model':<38} {'fit [s]':>8}")
    print(f"{'Ridge alone':<38} {best_of(lambda: Ridge().fit(Xr, yr)):>8.3f}")
    for name in ["laplace", "staircase"]:
        fit = lambda: LabelDPRegressor(Ridge(), name, bounds=(0, 10), random_state=0).fit(Xr, yr)  # noqa: E731
        print(f"{'LabelDPRegressor, ' + name:<38} {best_of(fit):>8.3f}")


if __name__ == "__main__":
    with threadpool_limits(limits=1):
        main()
