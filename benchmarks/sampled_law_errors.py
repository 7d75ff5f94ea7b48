"""Actual relative error of the per-row alias tables against the matrices they sample.

Run: python benchmarks/sampled_law_errors.py

For the matrix mechanisms of benchmarks/bench_sampling.py (fitted on its
public synthetic labels), recomputes the law each row's tables sample
(``implied_matrix`` of tests/test_fast_samplers.py: the alias cells, the
exact tail's exponent groups) and prints the largest and median relative
error over the positive entries. The builder guarantees at most 1e-9 (a
checked bound, docs/sampling.md); this shows how far below it the tables are.
"""

import math
import os
import sys
import warnings

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.join(HERE, "..", "tests")]

from bench_sampling import make_case  # noqa: E402
from test_fast_samplers import implied_matrix  # noqa: E402

from skdp_label._kernels._sampling import categorical_tables  # noqa: E402

NAMES = ["unbiased", "bias-variance", "exponential", "optm", "rqm", "mvu",
         "rr-with-prior-regression", "erm", "quantization"]


def main():
    warnings.simplefilter("ignore")
    for name in NAMES:
        mech, y = make_case(name, 1000, np.random.default_rng(0))
        mech.fit(y)
        matrix = np.asarray(mech.transition_matrix_, dtype=np.float64)
        matrix = matrix / np.array([math.fsum(row) for row in matrix])[:, None]
        law = implied_matrix(categorical_tables(matrix), matrix.shape[1])
        positive = matrix > 0
        rel = np.abs(law[positive] - matrix[positive]) / matrix[positive]
        print(f"{name:28s} max relative error {rel.max():.2e}   median {np.median(rel):.1e}")


if __name__ == "__main__":
    main()
