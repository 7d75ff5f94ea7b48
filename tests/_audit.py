"""Shared helpers for exact and statistical privacy audits in tests."""

import numpy as np
from scipy import stats


def max_log_ratio(matrix):
    """Exact privacy loss of a transition matrix (rows: inputs, columns: outputs)."""
    matrix = np.asarray(matrix, dtype=np.float64)
    with np.errstate(divide="ignore"):
        logs = np.log(matrix)
    col_max = logs.max(axis=0)
    col_min = logs.min(axis=0)
    # A column that is 0 for one input and positive for another is infinite loss.
    spread = np.where(np.isneginf(col_max), 0.0, col_max - col_min)
    return float(spread.max())


def assert_exactly_private(matrix, epsilon, rtol=1e-9):
    matrix = np.asarray(matrix)
    assert np.all(matrix >= 0)
    np.testing.assert_allclose(matrix.sum(axis=1), 1.0, rtol=0, atol=1e-12)
    loss = max_log_ratio(matrix)
    assert loss <= epsilon * (1 + rtol), f"privacy loss {loss} > epsilon {epsilon}"


def chi_square_pvalue(samples, values, probabilities, min_expected=5.0):
    """p-value of a chi-square goodness-of-fit test, pooling small cells."""
    values = np.asarray(values)
    counts = np.array([(samples == v).sum() for v in values], dtype=float)
    assert counts.sum() == len(samples), "samples outside the declared outputs"
    expected = np.asarray(probabilities) * len(samples)
    order = np.argsort(expected)
    obs_pooled, exp_pooled = [], []
    acc_o = acc_e = 0.0
    for i in order:
        acc_o += counts[i]
        acc_e += expected[i]
        if acc_e >= min_expected:
            obs_pooled.append(acc_o)
            exp_pooled.append(acc_e)
            acc_o = acc_e = 0.0
    if acc_e > 0 and exp_pooled:
        obs_pooled[-1] += acc_o
        exp_pooled[-1] += acc_e
    if len(exp_pooled) < 2:
        return 1.0
    return stats.chisquare(obs_pooled, exp_pooled).pvalue
