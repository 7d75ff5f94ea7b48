"""Timing and certificate tightness of BiasVarianceRandomizer (001 §6).

1. Fit time on the census-like 52-week prior (bench_unbiased.py) for a few
   epsilon and bias weights, next to OptimalUnbiased and RROnBins in the same
   run (best of 3, one BLAS thread), with the certified relative gap
   ``1 - lower_bound_ / objective_`` and the number of outputs.
2. Certificate on 40 random priors with 8-39 labels (seed 5): how many are
   certified to 1e-8, the largest gap and solve time, for <= 30 labels (where
   the price LP runs) and above.

Run: ``python benchmarks/bench_bias_variance.py`` (a few minutes at most).
"""

import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_unbiased import census_prior  # noqa: E402

from skdp_label.mechanisms import BiasVarianceRandomizer, OptimalUnbiased, RROnBins  # noqa: E402
from skdp_label.mechanisms.unbiased._bias_variance import bias_variance_continuous  # noqa: E402


def best_of(fit, repeats=3):
    best = np.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        fit()
        best = min(best, time.perf_counter() - t0)
    return best


def timing_table():
    y, p = census_prior()
    for eps in (0.3, 1.0, 4.0):
        t_unb = best_of(lambda: OptimalUnbiased(epsilon=eps, prior=(y, p)).fit([1.0]))
        t_bins = best_of(lambda: RROnBins(epsilon=eps, prior=(y, p)).fit([1.0]))
        row = [f"eps={eps:g}: unbiased {t_unb:.3f}s, rr-on-bins {t_bins:.3f}s"]
        for lam in (1.0, 10.0, 100.0, 1e4):
            def fit():
                return BiasVarianceRandomizer(epsilon=eps, bias_weight=lam, prior=(y, p)).fit([1.0])
            t = best_of(fit)
            m = fit()
            gap = 1 - m.lower_bound_ / m.objective_
            row.append(f"lam={lam:g}: {t:.3f}s gap {gap:.1e} outputs {m.output_values_.size}")
        print("\n   ".join(row))


def certificate_scan():
    rng = np.random.default_rng(5)
    gaps, times, ks = [], [], []
    for _ in range(40):
        k = int(rng.integers(8, 40))
        eps = float(rng.choice([0.3, 1.0, 3.0]))
        lam = float(rng.choice([1.5, 3, 10, 100]))
        y = np.sort(rng.choice(np.arange(0, 80), size=k, replace=False)).astype(float)
        p = rng.gamma(1.0, size=k)
        p /= p.sum()
        t0 = time.perf_counter()
        _, _, obj, low, _ = bias_variance_continuous(y, p, eps, lam)
        times.append(time.perf_counter() - t0)
        gaps.append(1 - low / obj)
        ks.append(k)
    gaps, times, ks = map(np.array, (gaps, times, ks))
    for name, sel in (("<= 30 labels", ks <= 30), ("> 30 labels", ks > 30)):
        print(f"{name}: {sel.sum()} priors, certified to 1e-8: {(gaps[sel] <= 1e-8).sum()}, "
              f"max gap {gaps[sel].max():.2g}, median time {np.median(times[sel]):.2f}s, "
              f"max {times[sel].max():.2f}s")


if __name__ == "__main__":
    with threadpool_limits(limits=1, user_api="blas"):
        timing_table()
        certificate_scan()
