"""Benchmark of the optimal unbiased randomizer (issue 4, paper 001 App. G.3).

Times, on one core (BLAS limited to one thread), ``OptimalUnbiased.fit``
with a public prior (continuous outputs: interior point + Newton polish +
exactness checks) against 001's LP (Alg. 1) in compact form solved by
scipy's HiGHS on the FeasibleOutputSet grid (Alg. 2) of 52 / 416 / 1,664
points, and reports how the continuous solver's time grows with |Y| and
epsilon.

Priors (synthetic; no data set is downloaded):

* census-like, |Y| = 52 (weeks worked, 1..52): 40% of the mass at 52,
  spikes at 50, 48, 40, 26, 12, 44, 30, 20 and a smooth bump around 30 weeks
  carrying 35% of the mass;
* Criteo-like, |Y| = 401 (values 0..400): a heavy-tailed, decreasing
  density ``exp(-y / 50) (1 + 0.5 sin^2(y / 3))`` with three times the mass
  at 0, and the same shape rescaled for the other sizes.

Run: ``python benchmarks/bench_unbiased.py`` (``--quick`` skips the
1,664-point LP, which takes minutes).
"""

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # run from a checkout

from skdp_label.mechanisms import OptimalUnbiased
from skdp_label.mechanisms.unbiased import feasible_output_set
from skdp_label.mechanisms.unbiased._grid import _grid_lp
from skdp_label.mechanisms.unbiased._solver import mechanism_loss


def census_prior():
    y = np.arange(1, 53, dtype=float)
    bump = np.exp(-(((y - 30) / 18) ** 2)) * 0.3 + 0.1
    p = bump / bump.sum() * 0.35
    spikes = {52: 0.40, 50: 0.05, 48: 0.05, 40: 0.06, 26: 0.03, 12: 0.02, 44: 0.02, 30: 0.01, 20: 0.01}
    for week, mass in spikes.items():
        p[week - 1] += mass
    return y, p / p.sum()


def criteo_like_prior(k):
    y = np.arange(k, dtype=float)
    p = np.exp(-y / (k / 8)) * (1 + 0.5 * np.sin(y / 3) ** 2)
    p[0] *= 3
    return y, p / p.sum()


def time_continuous(y, p, eps, repeats=3):
    best = math.inf
    for _ in range(repeats):
        t0 = time.perf_counter()
        mech = OptimalUnbiased(epsilon=eps, prior=(y, p), random_state=0).fit(y[:1])
        best = min(best, time.perf_counter() - t0)
    return best, mech


def time_grid_lp(y, p, eps, n):
    grid = feasible_output_set(y, eps, n)
    center, half = 0.5 * (y[0] + y[-1]), 0.5 * (y[-1] - y[0])
    t0 = time.perf_counter()
    matrix = _grid_lp((y - center) / half, p, (grid - center) / half, math.expm1(eps))
    elapsed = time.perf_counter() - t0
    return elapsed, mechanism_loss(y, p, grid, matrix)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="skip the 1,664-point LP")
    args = parser.parse_args()
    with threadpool_limits(limits=1):
        OptimalUnbiased(epsilon=1.0, prior=([0.0, 1.0], [0.5, 0.5])).fit([0.0])  # warm-up

        y, p = census_prior()
        print("Census-like prior, |Y| = 52, epsilon = 1 (one core)")
        print(f"{'method':<34}{'outputs':>8}{'time (s)':>11}{'noisy label loss':>20}")
        t_cont, mech = time_continuous(y, p, 1.0)
        print(f"{'continuous (this library)':<34}{mech.output_values_.size:>8}{t_cont:>11.3f}"
              f"{mech.noisy_label_loss_:>20.6f}")
        print(f"{'  certified lower bound':<34}{'':>8}{'':>11}{mech.lower_bound_:>20.6f}")
        sizes = [52, 416] + ([] if args.quick else [1664])
        lp_times = {}
        for n in sizes:
            elapsed, loss = time_grid_lp(y, p, 1.0, n)
            lp_times[n] = elapsed
            print(f"{f'grid LP, compact form, HiGHS':<34}{n:>8}{elapsed:>11.3f}{loss:>20.6f}")
        print(f"speed-up over the 416-point LP: {lp_times[416] / t_cont:.0f}x")
        print()

        print("Time (s) of the continuous solver by |Y| and epsilon (Criteo-like prior shape)")
        epsilons = [0.1, 0.5, 1.0, 2.0, 4.0, 8.0]
        print(f"{'|Y|':>5}" + "".join(f"{f'eps={e:g}':>11}" for e in epsilons))
        for k in [26, 52, 101, 201, 401]:
            yk, pk = criteo_like_prior(k)
            row = []
            for eps in epsilons:
                elapsed, _ = time_continuous(yk, pk, eps, repeats=1 if k > 101 else 3)
                row.append(elapsed)
            print(f"{k:>5}" + "".join(f"{t:>11.3f}" for t in row))


if __name__ == "__main__":
    main()
