"""Rules tried, and not shipped, to lift LabelDPClassifier(mechanism='auto') to the
epsilon-DP majority class where it misses it (fair-rating at eps = 0.3, anes96 at
eps <= 0.3; docs/classification.md, "Against the epsilon-DP majority class").

Each variant changes one step of 'auto' in this process only (a patch of the
library's function, never shipped) and is compared with the shipped rule on the
same splits and noise seeds as ``bench_classification.py`` (paired differences,
mean ± standard error over the seeds):

* ``guard-se``: no change; for the fits with k = 2, prints the guard's standard
  error next to its floor sqrt(d (1/s^2 - 1) / n) (d: share of rows where the
  cross-fitted model and the constant disagree; s = 1 - 2p the signal of
  RR-Top-2: on such a row the unique unbiased estimate of the difference is
  ±1/s), to show it cannot be tighter.
* ``eb-shrinkage``: the corrected probabilities shrunk toward the histogram's
  posterior mean, lambda = v / (v + tau^2) with v and tau^2 from two models on
  disjoint halves of the noisy labels (empirical Bayes at the model level).
* ``guard-power``: k = 1 (no label randomized, the histograms' majority) when
  the guard's standard error for an uninformative model, sqrt(2(k-1)) /
  (k s_k sqrt(n_r)), exceeds that model's loss pi(1) - pi(S) / k on the
  posterior mean of the histogram.
* ``prior-matching``: the corrected probabilities reweighted per class
  (Saerens et al. 2002) so that their mean over the training rows equals the
  histogram's posterior mean.

* ``null-shrinkage``: the unprojected corrected probabilities shrunk toward the
  histogram's posterior mean (on S, the mass outside S split evenly, what the
  correction estimates there), p~ = pi + lambda (p^ - pi), with the
  James-Stein weight lambda = max(0, 1 - D0 / D): D the mean squared distance
  of the model's p^ from pi over the randomized rows, D0 the same spread
  (around its own mean) of the base estimator fitted on a random permutation
  of the same noisy labels (2 permutations, averaged): what label noise alone
  gives a model on these features. lambda = 0 is the limit lambda -> 0+: pi's
  top class, ties (a uniform pi) broken by the model.
* ``all-rows``: the histogram of 'auto' on all rows at a share w of epsilon
  (sequential composition; the labels of all rows get (1 - w) epsilon), w the
  shipped rule's row share (the same Laplace precision, no subset sampling
  error); k and the guard as shipped (k = 1: the labels are RR-Top-1, the
  constant is the histogram's top class, no second histogram).
* ``constant-ceiling``: the guard's constant (the histogram's top class) in every
  fit: what 'auto' would score if the guard always chose the constant.
* ``pooled-ceiling``: the same with the shipped constant (``constant_prior_``:
  the histogram pooled with the randomized rows' debiased frequencies; fits
  without it, k = 1 or plain RR, keep the shipped prediction). Its difference
  to ``constant-ceiling`` is what the pooling buys the constant.
* ``noise-limit``: for each split, ``--noise-seeds`` fits of 'auto' with other
  noise; accuracy of one fit (mean) against that of the average of their
  unprojected corrected probabilities (the model without the label noise's
  variance, for the plan's k; fits that chose k = 1 or the constant left out).

Every variant line also gives the epsilon-DP majority of ``bench_classification.py``
(same noise stream) and the variant's paired difference to it.

``rr-paired`` compares the shipped ``auto`` with plain RR (the benchmark's
``RR``) on the same split and ``random_state``, over ``--seeds`` splits times
``--noise-seeds`` noise seeds (``1000 * split + epsilon index + 100000 * r``),
and counts the k chosen and the guard's choices (a cell flagged below RR).

    PYTHONPATH=. python benchmarks/bench_classification_floor.py VARIANT \
        [--datasets fair-rating anes96 digits] [--epsilons 0.3 0.5 1 2] [--seeds 10]
        [--noise-seeds 1]

The figures of docs/classification.md ("Null-calibrated shrinkage") come from
``null-shrinkage``, ``constant-ceiling`` and ``noise-limit`` (``--noise-seeds 8``)
with ``--datasets fair-rating anes96 digits --epsilons 0.05 0.1 0.3 0.5 1``.
"""

import argparse
import math
import warnings

import numpy as np
from sklearn.model_selection import train_test_split
from sklearn.utils import _safe_indexing
from threadpoolctl import threadpool_limits

from _datasets import load_classification
from bench_classification import DP_MAJORITY, EPSILONS, model
from skdp_label import LabelDPClassifier
from skdp_label.estimators import _classifier
from skdp_label.estimators._noise_aware import (
    backward_correct,
    debiasing_scale,
    histogram_share,
    sampled_histogram_sd,
    shrink_histogram,
)
from skdp_label.utils import PrivacyLeakWarning
from skdp_label.study import _dp_majority
from skdp_label.utils._random import public_fingerprint, public_folds, release_generator

_state = {}


def _posterior(clf, eps):
    """The histogram's posterior mean of the class frequencies (as step 2 of 'auto')."""
    n_classes = clf.classes_.shape[0]
    sd = sampled_histogram_sd(eps, clf.histogram_sizes_[0], n_classes)
    return shrink_histogram(clf.cluster_histograms_[0], sd)


def _patch_guard_se():
    original = _classifier.cross_fitted_accuracies

    def spy(fit_predict, constant_class, noisy, in_top, eps, folds, sample_weight=None):
        disagree = np.zeros(noisy.shape[0], dtype=bool)

        def fp(train, test):
            pred = fit_predict(train, test)
            disagree[test] = pred != constant_class(train)
            return pred

        out = original(fp, constant_class, noisy, in_top, eps, folds, sample_weight)
        if int(in_top[0].sum()) == 2:  # the floor below holds for RR-Top-2 only
            _, s = debiasing_scale(2, eps)
            floor = math.sqrt(disagree.mean() * (1.0 / s**2 - 1.0) / noisy.shape[0])
            _state["guard"] = (out[2], floor)
        return out

    _classifier.cross_fitted_accuracies = spy


def _patch_halves():
    original = _classifier.LabelDPClassifier._guard

    def guard(self, X, noisy, masks, eps, routed, mech, rows, cv):
        out = original(self, X, noisy, masks, eps, routed, mech, rows, cv)
        Xr, nr, mr = _safe_indexing(X, rows), noisy[rows], masks[rows]
        train, test = public_folds("eb halves", Xr, 2)[0]
        _state["halves"] = [
            backward_correct(self._proba(self._fit_model(
                _safe_indexing(Xr, half), nr[half], None, {}, mech, cv), Xr), mr, eps)
            for half in (train, test)
        ]
        return out

    _classifier.LabelDPClassifier._guard = guard


def _patch_guard_power(enabled):
    original_k, original_plan = _classifier.robust_top_k, _classifier.LabelDPClassifier._plan

    def plan(self, n, n_classes):
        out = original_plan(self, n, n_classes)
        _state["n_r"] = n - out.get("histogram_rows", 0)
        return out

    def top_k(histogram, eps, sd):
        k = original_k(histogram, eps, sd)
        if k < 2 or not enabled[0]:
            return k
        post = np.sort(shrink_histogram(histogram, sd))[::-1]
        loss = post[0] - post[:k].sum() / k
        _, s = debiasing_scale(k, eps)
        se = math.sqrt(2.0 * (k - 1)) / (k * s * math.sqrt(_state["n_r"]))
        return 1 if se > loss else k

    _classifier.robust_top_k = top_k
    _classifier.LabelDPClassifier._plan = plan


def _patch_all_rows(enabled):
    """'auto' with its histogram on all rows at a share w of epsilon (sequential
    composition; the labels get (1 - w) epsilon), w the shipped row share."""
    original = _classifier.classification_plan

    def plan(epsilon, n_samples, n_classes):
        out = original(epsilon, n_samples, n_classes)
        if enabled[0] and out.get("histogram_rows"):
            share = histogram_share(epsilon, n_samples, n_classes)
            out = dict(out, prior_epsilon=share * float(epsilon), histogram_rows=0)
        return out

    _classifier.classification_plan = plan


def _eb_predict(clf, X_te, eps):
    prior = _posterior(clf, eps)
    pa, pb = (h - prior for h in _state["halves"])
    v = float(np.mean(np.sum((pa - pb) ** 2, axis=1))) / 4  # the full model: half the variance
    tau2 = max(0.0, float(np.mean(np.sum(pa * pb, axis=1))))
    lam = v / (v + tau2) if v + tau2 > 0 else 1.0
    return np.argmax((1 - lam) * clf.predict_proba(X_te) + lam * prior, axis=1)


def _matched_predict(clf, X_tr, X_te, eps, iters=200):
    p_train = clf.predict_proba(X_tr)
    active = p_train.sum(axis=0) > 0  # the classes of S
    target = _posterior(clf, eps)[active]
    target /= target.sum()
    p_active, w = p_train[:, active], np.ones(int(active.sum()))
    for _ in range(iters):
        q = p_active * w
        mean = (q / np.maximum(q.sum(axis=1, keepdims=True), 1e-12)).mean(axis=0)
        w = np.clip(w * target / np.maximum(mean, 1e-12), 1e-6, 1e6)
    weights = np.zeros(active.shape[0])
    weights[active] = w
    return np.argmax(clf.predict_proba(X_te) * weights, axis=1)


def _raw_corrected(clf, model_, X, mask, eps):
    """G_S^T q on S, before the simplex projection (columns of S only)."""
    q = np.where(mask, np.maximum(clf._proba(model_, X), 0.0), 0.0)
    q = q / np.maximum(q.sum(axis=1, keepdims=True), 1e-300)
    p, scale = debiasing_scale(int(mask.sum()), eps)
    return ((q - p) / scale)[:, mask]


def _patch_null_spread(n_permutations=2):
    original = _classifier.LabelDPClassifier._guard

    def guard(self, X, noisy, masks, eps, routed, mech, rows, cv):
        out = original(self, X, noisy, masks, eps, routed, mech, rows, cv)
        Xr, nr, mask = _safe_indexing(X, rows), noisy[rows], masks[rows][0]
        rng = np.random.default_rng(12345)  # a permutation of noisy labels: post-processing
        spreads = []
        for _ in range(n_permutations):
            null = self._fit_model(Xr, nr[rng.permutation(nr.shape[0])], None, {}, mech, cv)
            p0 = _raw_corrected(self, null, Xr, mask, eps)
            spreads.append(float(np.mean(np.sum((p0 - p0.mean(axis=0)) ** 2, axis=1))))
        _state.update(mask=mask, p_train=_raw_corrected(self, self.estimator_, Xr, mask, eps),
                      null_spread=float(np.mean(spreads)))
        return out

    _classifier.LabelDPClassifier._guard = guard


def _null_shrinkage_predict(clf, X_te, eps):
    mask = _state["mask"]
    post = _posterior(clf, eps)
    target = post[mask] + post[~mask].sum() / mask.sum()
    spread = float(np.mean(np.sum((_state["p_train"] - target) ** 2, axis=1)))
    lam = max(0.0, 1.0 - _state["null_spread"] / spread) if spread > 0 else 0.0
    _state.setdefault("lambdas", []).append(lam)
    p_te = _raw_corrected(clf, clf.estimator_, X_te, mask, eps)
    if lam == 0.0:  # pi's top class; ties (a uniform pi) broken by the model
        scores = np.where(np.isclose(target, target.max(), rtol=0, atol=1e-12), p_te, -np.inf)
    else:
        scores = target + lam * (p_te - target)
    return clf.classes_[np.flatnonzero(mask)[np.argmax(scores, axis=1)]]


def _noise_limit(name, eps, seed, X_tr, X_te, y_tr, y_te, classes, noise_seeds):
    """(mean accuracy of single fits, accuracy of their averaged probabilities)."""
    single, probs = [], []
    for r in range(noise_seeds):
        clf = LabelDPClassifier(model(), epsilon=eps, classes=classes, mechanism="auto",
                                random_state=1000 * seed + EPSILONS.index(eps) + 100000 * r
                                ).fit(X_tr, y_tr)
        if clf._constant_prior() is not None:
            continue
        mask = _classifier._masks_from_priors(clf.mechanism_, clf._class_priors(X_te[:1]))[0]
        full = np.zeros((X_te.shape[0], len(classes)))
        full[:, mask] = _raw_corrected(clf, clf.estimator_, X_te, mask, eps)
        full[:, ~mask] = -np.inf
        single.append(float(np.mean(clf.classes_[np.argmax(full, axis=1)] == y_te)))
        probs.append(np.where(mask, full, 0.0))
    if not probs:
        return None
    avg = np.mean(probs, axis=0)
    return float(np.mean(single)), float(np.mean(np.asarray(classes)[np.argmax(avg, axis=1)] == y_te))


def run(variant, name, epsilons, seeds, enabled, noise_seeds=1):
    X, y, classes = load_classification(name)
    for eps in epsilons:
        shipped, tried, notes, dp_constant = [], [], [], []
        for seed in seeds:
            X_tr, X_te, y_tr, y_te = train_test_split(
                X, y, test_size=0.2, stratify=y, random_state=seed)
            rng = release_generator(seed, public_fingerprint("bench", DP_MAJORITY, eps))
            dp_constant.append(float(np.mean(y_te == _dp_majority(y_tr, np.asarray(classes),
                                                                  eps, rng))))

            def fit(X_tr=X_tr, y_tr=y_tr, seed=seed):
                return LabelDPClassifier(model(), epsilon=eps, classes=classes, mechanism="auto",
                                         random_state=1000 * seed + EPSILONS.index(eps)
                                         ).fit(X_tr, y_tr)

            lambdas = _state.get("lambdas")
            _state.clear()
            if lambdas is not None:
                _state["lambdas"] = lambdas
            enabled[0] = False
            clf = fit()
            acc = float(np.mean(clf.predict(X_te) == y_te))
            shipped.append(acc)
            blended = clf.cluster_histograms_ is not None and clf._constant_prior() is None
            if variant in ("guard-power", "all-rows"):
                enabled[0] = True
                acc = float(np.mean(fit().predict(X_te) == y_te))
            elif variant == "eb-shrinkage" and blended:
                acc = float(np.mean(clf.classes_[_eb_predict(clf, X_te, eps)] == y_te))
            elif variant == "prior-matching" and blended:
                acc = float(np.mean(clf.classes_[_matched_predict(clf, X_tr, X_te, eps)] == y_te))
            elif variant == "guard-se" and "guard" in _state:
                notes.append(_state["guard"])
            elif variant == "null-shrinkage" and blended and "mask" in _state:
                acc = float(np.mean(_null_shrinkage_predict(clf, X_te, eps) == y_te))
            elif variant == "constant-ceiling" and clf.cluster_histograms_ is not None:
                acc = float(np.mean(clf.classes_[np.argmax(clf.cluster_histograms_[0])] == y_te))
            elif variant == "pooled-ceiling" and clf.constant_prior_ is not None:
                acc = float(np.mean(clf.classes_[np.argmax(clf.constant_prior_)] == y_te))
            elif variant == "noise-limit":
                limit = _noise_limit(name, eps, seed, X_tr, X_te, y_tr, y_te, classes, noise_seeds)
                if limit is not None:
                    notes.append(limit)
            tried.append(acc)
        diff = np.array(tried) - np.array(shipped)
        line = (f"{name} eps={eps:g}: auto {np.mean(shipped):.3f}, {variant} {np.mean(tried):.3f}, "
                f"difference {diff.mean():+.4f} ± {diff.std(ddof=1) / math.sqrt(diff.size):.4f}")
        to_dp = np.array(tried) - np.array(dp_constant)
        line += (f"; {DP_MAJORITY} {np.mean(dp_constant):.3f}, {variant} − it "
                 f"{to_dp.mean():+.4f} ± {to_dp.std(ddof=1) / math.sqrt(to_dp.size):.4f}")
        if "lambdas" in _state:
            line += f"; lambda {np.round(_state.pop('lambdas'), 2).tolist()}"
        if variant == "noise-limit" and notes:
            one, avg = np.array(notes).T
            gap = avg - one
            line += (f"; {len(notes)} splits: one fit {one.mean():.3f}, averaged {avg.mean():.3f} "
                     f"(+{gap.mean():.4f} ± {gap.std(ddof=1) / math.sqrt(gap.size):.4f})")
        elif notes:
            ratio = [se / floor for se, floor in notes if floor > 0]
            line += (f"; k = 2 fits: {len(notes)}, guard SE {np.mean([n[0] for n in notes]):.3f}, "
                     f"floor {np.mean([n[1] for n in notes]):.3f} (SE / floor {min(ratio):.3f}-"
                     f"{max(ratio):.3f})")
        print(line, flush=True)


def rr_paired(name, epsilons, seeds, noise_seeds):
    X, y, classes = load_classification(name)
    for eps in epsilons:
        diffs, ks, constant = [], [], 0
        for seed in seeds:
            X_tr, X_te, y_tr, y_te = train_test_split(
                X, y, test_size=0.2, stratify=y, random_state=seed)
            for r in range(noise_seeds):
                state = 1000 * seed + EPSILONS.index(eps) + 100000 * r
                rr, auto = (LabelDPClassifier(model(), epsilon=eps, classes=classes,
                                              random_state=state, **params).fit(X_tr, y_tr)
                            for params in (dict(mechanism="rr", proba_correction=None),
                                           dict(mechanism="auto")))
                diffs.append(np.mean(auto.predict(X_te) == y_te)
                             - np.mean(rr.predict(X_te) == y_te))
                ks.append(auto.plan_.get("k", len(classes)))
                guard = auto.majority_guard_
                constant += bool(guard) and guard["choice"] == "constant"
        diffs = np.array(diffs)
        values, counts = np.unique(ks, return_counts=True)
        print(f"{name} eps={eps:g}: auto - RR {diffs.mean():+.4f} ± "
              f"{diffs.std(ddof=1) / math.sqrt(diffs.size):.4f} ({diffs.size} fits); k: "
              f"{dict(zip(values.tolist(), counts.tolist()))}; guard chose the constant in "
              f"{constant}", flush=True)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("variant", choices=["guard-se", "eb-shrinkage", "guard-power",
                                            "prior-matching", "null-shrinkage",
                                            "constant-ceiling", "noise-limit", "rr-paired",
                                            "all-rows", "pooled-ceiling"])
    parser.add_argument("--datasets", nargs="+", default=["fair-rating", "anes96", "digits"])
    parser.add_argument("--epsilons", nargs="+", type=float, default=[0.3, 0.5, 1.0, 2.0])
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--noise-seeds", type=int, default=1)
    args = parser.parse_args()
    if args.variant == "rr-paired":
        for name in args.datasets:
            rr_paired(name, args.epsilons, range(args.seeds), args.noise_seeds)
        return
    enabled = [False]  # guard-power: the patched rule is on for the variant's fits only
    patch = {"guard-se": _patch_guard_se, "eb-shrinkage": _patch_halves,
             "guard-power": lambda: _patch_guard_power(enabled),
             "null-shrinkage": _patch_null_spread,
             "all-rows": lambda: _patch_all_rows(enabled)}.get(args.variant)
    if patch is not None:  # once per process
        patch()
    for name in args.datasets:
        run(args.variant, name, args.epsilons, range(args.seeds), enabled, args.noise_seeds)


if __name__ == "__main__":
    warnings.simplefilter("ignore", PrivacyLeakWarning)  # fixed seeds: a reproducible study
    with threadpool_limits(limits=1):
        main()
