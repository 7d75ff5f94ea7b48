"""Predicted excess risk of a label randomizer for a model that averages.

A model that, at each point, averages about ``n_eff`` noisy labels of
similar examples (a leaf, ``k`` neighbours, a linear fit's
``n / n_features`` rows per parameter) predicts, for a true label ``y``,
roughly the mean of ``y_hat`` over those labels. Its excess squared risk
over the same model trained on the true labels is then about

    R(n_eff) = E_p[bias(y)^2] + E_p[Var(y_hat | y)] / n_eff,

with ``bias(y) = E[y_hat | y] - y``: bias does not average out, variance
does. Both terms are computed *exactly* from a mechanism's transition
matrix and output values under the prior ``p`` (public, or the charged noisy
histogram), so the rule costs no budget (docs/auto.md).
"""

from __future__ import annotations

import numpy as np
from numpy.typing import ArrayLike

__all__ = ["bias_and_variance", "predicted_risk"]


def bias_and_variance(
    input_values: ArrayLike, output_values: ArrayLike, matrix: ArrayLike,
) -> tuple[np.ndarray, np.ndarray]:
    """Exact ``E[y_hat | y] - y`` and ``Var(y_hat | y)`` for every input value.

    Parameters
    ----------
    input_values : ndarray of shape (k,)
    output_values : ndarray of shape (m,)
    matrix : ndarray of shape (k, m)
        Rows are the output distributions (rows sum to 1).

    Returns
    -------
    bias, variance : ndarray of shape (k,)
    """
    y = np.asarray(input_values, dtype=np.float64)
    z = np.asarray(output_values, dtype=np.float64)
    matrix = np.asarray(matrix, dtype=np.float64)
    mean = matrix @ z
    # Centred on each row's mean: no cancellation of large second moments.
    variance = np.einsum("ij,ij->i", matrix, (z[None, :] - mean[:, None]) ** 2)
    return mean - y, variance


def predicted_risk(
    input_values: ArrayLike, output_values: ArrayLike, matrix: ArrayLike, prior: ArrayLike,
    n_eff: float,
) -> tuple[float, float, float]:
    """``(E_p[bias^2], E_p[Var], E_p[bias^2] + E_p[Var] / n_eff)``.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.mechanisms.auto import predicted_risk
    >>> values = np.array([0.0, 1.0])
    >>> # a constant output 0.5: bias^2 0.25, no variance
    >>> predicted_risk(values, [0.5], np.ones((2, 1)), [0.5, 0.5], 10)
    (0.25, 0.0, 0.25)
    """
    prior = np.asarray(prior, dtype=np.float64)
    prior = prior / prior.sum()
    bias, variance = bias_and_variance(input_values, output_values, matrix)
    bias2 = float(prior @ bias**2)
    var = float(prior @ variance)
    return bias2, var, bias2 + var / float(n_eff)
