"""Throughput of the classic samplers against numpy drawing uniforms.

Run: python benchmarks/bench_sampling.py [--n 10000000] [--repeats 5]

Times, on one core, randomizing n labels with k-ary randomized response over
100 classes and with the discrete Laplace mechanism (plus the continuous
Laplace and staircase on their power-of-two grids, and the exponential
mechanism through the generic matrix sampler), and reports each as a
multiple of ``Generator.random(n)``. Best of several runs; includes label
validation and encoding, i.e. the full ``transform`` call. The samplers are
exact in their tails (docs/sampling.md): most labels need one 53-bit digit,
the continuous grids about three and a logarithm.
"""

import argparse
import os
import time

os.environ.setdefault("NUMBA_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from skdp_label.mechanisms import (  # noqa: E402
    DiscreteLaplace,
    DiscreteStaircase,
    ExponentialMechanism,
    Laplace,
    RandomizedResponse,
    Staircase,
)


def best_time(fn, repeats):
    times = []
    for _ in range(repeats):
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    return min(times)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    n = args.n
    rng = np.random.default_rng(0)
    y_classes = rng.integers(0, 100, size=n)
    y_int = rng.integers(0, 401, size=n).astype(np.float64)
    y_real = rng.uniform(0, 400, size=n)

    cases = {
        "RR, 100 classes": (RandomizedResponse(1.0, classes=np.arange(100), random_state=0), y_classes),
        "DiscreteLaplace, 0..400": (DiscreteLaplace(1.0, bounds=(0, 400), random_state=0), y_int),
        "DiscreteStaircase, 0..400": (DiscreteStaircase(1.0, bounds=(0, 400), random_state=0), y_int),
        "Laplace (grid), [0, 400]": (Laplace(1.0, bounds=(0.0, 400.0), random_state=0), y_real),
        "Staircase (grid), [0, 400]": (Staircase(1.0, bounds=(0.0, 400.0), random_state=0), y_real),
        "Exponential, 0..400 step 4": (
            ExponentialMechanism(1.0, bounds=(0.0, 400.0), resolution=4.0, random_state=0),
            np.round(y_int / 4) * 4,
        ),
    }
    gen = np.random.default_rng(1)
    base = best_time(lambda: gen.random(n), args.repeats)
    print(f"n = {n:,} labels, best of {args.repeats}, one thread")
    print(f"{'sampler':<30}{'seconds':>10}{'labels/s':>14}{'x uniforms':>12}")
    print(f"{'numpy Generator.random(n)':<30}{base:>10.3f}{n / base:>14.3g}{1.0:>12.2f}")
    for name, (mech, y) in cases.items():
        mech.fit(y[:10])
        mech.transform(y[:10])  # compile numba kernels outside the timing
        t = best_time(lambda: mech.transform(y), args.repeats)
        print(f"{name:<30}{t:>10.3f}{n / t:>14.3g}{t / base:>12.2f}")


if __name__ == "__main__":
    main()
