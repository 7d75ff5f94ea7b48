"""Classification accuracy across epsilon: plain RR vs the noise-aware options
of LabelDPClassifier vs the majority-class baseline (issue 12).

For each dataset of ``benchmarks/_datasets.py`` (digits, fair-rating, anes96),
epsilon in {0.05, ..., 8} and 3 seeds (80/20 stratified split and label
noise both vary with the seed), trains ``LabelDPClassifier`` around a
standardised LogisticRegression and reports the mean test accuracy on the
*true* test labels:

* ``RR``: mechanism='rr', the base model's argmax (the library's plain RR).
* ``RR + shrinkage``: the same noisy labels' model, backward-corrected and
  shrunk toward the debiased class frequencies (``shrinkage='auto'``).
* ``clusters``: prior='clusters' (10 k-means clusters, prior_epsilon='auto'),
  RRWithPrior, uncorrected.
* ``clusters + correction``: the same, backward-corrected per cluster.
* ``auto``: mechanism='auto' (plain RR, or a private class histogram and
  RR-Top-k on its robust top k; majority guard on), corrected.
* ``auto, no guard``: the same with ``majority_guard=False`` (the rule alone).
* ``auto (before)``: an earlier rule (RR when e^eps >= 3K + 1, else a
  histogram on all rows at a share of epsilon and RRWithPrior's Lemma-1 k),
  emulated with
  ``mechanism='rr-with-prior', prior='class-frequencies'``: same noise streams.
* ``RR + guard``: mechanism='rr' with ``majority_guard=True``.
* ``auto + shrinkage``: mechanism='auto', shrinkage='auto'.
* ``RR, LP-RR-SGD``: mechanism='rr' with ``DebiasedSGDClassifier`` (004
  Alg. 5) as the base model, on features standardised beforehand.
* ``majority`` (the true training labels' majority class, not private),
  ``ε-DP majority`` (the top class of a discrete-Laplace histogram of *all*
  training rows at the full epsilon: the best a constant predictor can be
  under epsilon-DP, the classification counterpart of the regression
  benchmarks' epsilon-DP constant; the study tool's ``'dp-constant'`` row,
  ``skdp_label.study._dp_majority``) and ``non-private`` (the model on true
  labels), as references.

    PYTHONPATH=. python benchmarks/bench_classification.py [--datasets digits fair-rating]
        [--methods RR auto ...] [--seeds 3]

The default ``--methods`` are RR, auto, auto without guard and RR + guard;
``--methods all`` runs every method above. After each table the script lists
the cells where a method is below RR, the majority class or the epsilon-DP
majority class by more than one standard error of the per-seed (paired)
differences.
"""

import argparse
import math
import time
import warnings

import numpy as np
from sklearn.linear_model import LogisticRegression
from sklearn.model_selection import train_test_split
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler
from threadpoolctl import threadpool_limits

from _datasets import load_classification
from skdp_label import LabelDPClassifier
from skdp_label.estimators import DebiasedSGDClassifier
from skdp_label.study import _dp_majority
from skdp_label.utils import PrivacyLeakWarning
from skdp_label.utils._random import public_fingerprint, release_generator

EPSILONS = (0.05, 0.1, 0.3, 0.5, 1.0, 2.0, 4.0, 8.0)
CLUSTERS = dict(prior="clusters", n_clusters=10, prior_epsilon="auto")
METHODS = {
    "RR": dict(mechanism="rr", proba_correction=None),
    "RR + shrinkage": dict(mechanism="rr", shrinkage="auto"),
    "clusters": dict(CLUSTERS, proba_correction=None),
    "clusters + correction": dict(CLUSTERS),
    "auto": dict(mechanism="auto"),
    "auto, no guard": dict(mechanism="auto", majority_guard=False),
    "auto (before)": "previous rule",
    "RR + guard": dict(mechanism="rr", majority_guard=True),
    "auto + shrinkage": dict(mechanism="auto", shrinkage="auto"),
    "RR, LP-RR-SGD": dict(mechanism="rr"),
}
DEFAULT_METHODS = ("RR", "auto", "auto, no guard", "RR + guard")
DP_MAJORITY = "ε-DP majority"


def previous_auto(eps, n_classes):
    """The rule of 'auto' before the majority guard: RR when e^eps >= 3K + 1,
    else a class histogram (sqrt(K / n), at most eps / 2) and RRWithPrior."""
    if eps >= math.log(3 * n_classes + 1):
        return dict(mechanism="rr")
    return dict(mechanism="rr-with-prior", prior="class-frequencies", prior_epsilon="auto")


def model():
    return make_pipeline(StandardScaler(), LogisticRegression(max_iter=500))


def run(name, seeds=(0, 1, 2), epsilons=EPSILONS, methods=DEFAULT_METHODS):
    X, y, classes = load_classification(name)
    table = {m: np.zeros((len(seeds), len(epsilons))) for m in methods}
    table["majority"] = np.zeros((len(seeds), len(epsilons)))
    table[DP_MAJORITY] = np.zeros((len(seeds), len(epsilons)))
    refs = {"majority": [], "non-private": []}
    for s, seed in enumerate(seeds):
        X_tr, X_te, y_tr, y_te = train_test_split(
            X, y, test_size=0.2, stratify=y, random_state=seed)
        values, counts = np.unique(y_tr, return_counts=True)
        refs["majority"].append(float(np.mean(y_te == values[np.argmax(counts)])))
        table["majority"][s] = refs["majority"][-1]
        refs["non-private"].append(float(model().fit(X_tr, y_tr).score(X_te, y_te)))
        scaler = StandardScaler().fit(X_tr)  # public features
        for e, eps in enumerate(epsilons):
            # Its own noise stream (not shared with any fit's histogram).
            rng = release_generator(seed, public_fingerprint("bench", DP_MAJORITY, eps))
            dp_class = _dp_majority(y_tr, np.asarray(classes), eps, rng)
            table[DP_MAJORITY][s, e] = np.mean(y_te == dp_class)
            for method in methods:
                params = METHODS[method]
                if params == "previous rule":
                    params = previous_auto(eps, len(classes))
                sgd = method.endswith("SGD")
                base = DebiasedSGDClassifier(alpha=1e-3, random_state=seed) if sgd else model()
                clf = LabelDPClassifier(base, epsilon=eps, classes=classes,
                                        random_state=1000 * seed + e, **params)
                Xa, Xb = (scaler.transform(X_tr), scaler.transform(X_te)) if sgd else (X_tr, X_te)
                table[method][s, e] = np.mean(clf.fit(Xa, y_tr).predict(Xb) == y_te)
    return table, {k: float(np.mean(v)) for k, v in refs.items()}, len(y)


def _sem(scores):
    """Standard error of the mean over seeds (axis 0)."""
    return scores.std(axis=0, ddof=1) / np.sqrt(scores.shape[0])


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--datasets", nargs="+", default=["digits", "fair-rating", "anes96"])
    parser.add_argument("--methods", nargs="+", default=list(DEFAULT_METHODS))
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args()
    methods = list(METHODS) if args.methods == ["all"] else args.methods
    for name in args.datasets:
        start = time.perf_counter()
        table, refs, n = run(name, seeds=tuple(range(args.seeds)), methods=methods)
        print(f"\n### {name} (n = {n}; majority {refs['majority']:.3f}, "
              f"non-private {refs['non-private']:.3f}; {time.perf_counter() - start:.0f} s)\n")
        print("| method | " + " | ".join(f"ε={e:g}" for e in EPSILONS) + " |")
        print("|---" * (len(EPSILONS) + 1) + "|")
        majority = table.pop("majority")
        dp_majority = table.pop(DP_MAJORITY)
        for method, scores in [*table.items(), (DP_MAJORITY, dp_majority)]:
            means, sems = scores.mean(axis=0), _sem(scores)
            cells = " | ".join(f"{m:.3f}±{s:.3f}" for m, s in zip(means, sems))
            print(f"| {method} | {cells} |")
        print("| majority | " + " | ".join(f"{refs['majority']:.3f}" for _ in EPSILONS) + " |")
        # Paired by seed (same split): a cell misses when the method is below the
        # reference by more than one standard error of the per-seed differences.
        print()
        for method, scores in table.items():
            misses = []
            for ref_name, ref in (("RR", table.get("RR")), ("majority", majority),
                                  (DP_MAJORITY, dp_majority)):
                if ref is None or ref is scores:
                    continue
                diff = scores - ref
                below = diff.mean(axis=0) < -_sem(diff)
                misses.append(f"below {ref_name} at eps = "
                              f"{[float(e) for e in np.asarray(EPSILONS)[below]]}")
            print(f"- {method}: " + "; ".join(misses))
        # The paired differences themselves (mean ± standard error over the seeds).
        print()
        for method, scores in table.items():
            for ref_name, ref in (("RR", table.get("RR")), (DP_MAJORITY, dp_majority)):
                if ref is None or ref is scores:
                    continue
                diff = scores - ref
                cells = " | ".join(
                    f"{m:+.3f}±{s:.3f}" for m, s in zip(diff.mean(axis=0), _sem(diff)))
                print(f"| {method} − {ref_name} | {cells} |")


if __name__ == "__main__":
    warnings.simplefilter("ignore", PrivacyLeakWarning)  # fixed seeds: a reproducible study
    with threadpool_limits(limits=1):
        main()
