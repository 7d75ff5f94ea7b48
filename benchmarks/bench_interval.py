"""The rows kernel on a two-level matrix: interval tables vs per-row alias tables.

Run: python benchmarks/bench_interval.py [--n 10000000] [--repeats 8] [--name unbiased]

Fits the mechanism of ``bench_sampling.py`` (``unbiased``, ``bias-variance``
or ``auto``: epsilon = 1, a 401-point grid on [0, 400]) and times, in one
process and in alternation, ``sample_rows`` on the same labels with the
mechanism's interval tables (``_kernels/_interval.py``) and with its per-row
alias tables (``categorical_tables``, the path before), against
``Generator.random(n)``: thread CPU time, best of ``repeats``. No label
validation (``bench_sampling.py`` adds ~0.3x for it). Also prints the
tables' sizes and the largest relative error bound of the sampled law.
"""

import argparse
import sys
import time
import warnings
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from bench_sampling import make_case

from skdp_label._kernels._sampling import rounding_grid, sample_rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--n", type=int, default=10_000_000)
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--name", default="unbiased", choices=["unbiased", "bias-variance", "auto"])
    args = parser.parse_args()
    warnings.simplefilter("ignore")
    mech, y = make_case(args.name, 100_000, np.random.default_rng(0))
    mech.fit(y)
    mech = getattr(mech, "selected_mechanism_", mech)
    interval = mech._interval_tables()
    if interval is None:
        print(f"{args.name}: this fit's matrix is not two-level (per-row tables only)")
        return
    tables = mech._categorical_tables()
    print(f"{args.name}: matrix {mech.transition_matrix_.shape}, interval tables "
          f"{interval.heads.nbytes + interval.table.nbytes:,} B (largest relative bound "
          f"{interval.bound.max():.1e}), per-row tables {tables[0].nbytes + tables[1].nbytes:,} B")
    labels = np.random.default_rng(2).uniform(0, 400, args.n)
    grid = rounding_grid(mech.input_values_)
    calls = {
        "interval": lambda: sample_rows(np.random.default_rng(3), mech.output_values_, y=labels,
                                        grid=grid, interval=interval),
        "per-row tables": lambda: sample_rows(np.random.default_rng(3), mech.output_values_,
                                              y=labels, grid=grid, tables=tables),
        "uniforms": lambda: np.random.default_rng(3).random(args.n),
    }
    for call in calls.values():
        call()  # compile
    best = dict.fromkeys(calls, float("inf"))
    for _ in range(args.repeats):
        for name, call in calls.items():
            start = time.thread_time()
            call()
            best[name] = min(best[name], time.thread_time() - start)
    for name, seconds in best.items():
        print(f"{name:<16}{seconds:>8.3f} s{seconds / best['uniforms']:>8.2f}x uniforms")


if __name__ == "__main__":
    main()
