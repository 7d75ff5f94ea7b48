"""Figure for docs/unbiased.md: how bias and variance move with the bias weight.

Exact computations (no sampling) from the transition matrices of
``BiasVarianceRandomizer`` on the census-like 52-week prior of
benchmarks/bench_unbiased.py (integer labels 1..52), epsilon = 1:

* left: E_p[bias^2] and E_p[Var] against the bias weight lambda, with
  RR-on-Bins (lambda = 1) and the optimal unbiased randomizer (lambda -> inf)
  as references;
* middle: E[y_hat | y] against y for a few lambda;
* right: E[Var] / n + E[bias^2], the error of an average of n noisy labels,
  against n, for a few lambda: each lambda is best near n = lambda.

Run: ``python docs/plot_bias_variance.py [output.png]`` (default: a file in
a temporary directory; the committed figure is docs/bias_variance.png).
Prints the numbers behind the left panel.
"""

import sys
import tempfile
import time
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_unbiased import census_prior  # noqa: E402

from skdp_label.mechanisms import OptimalUnbiased, RROnBins  # noqa: E402
from skdp_label.mechanisms.unbiased import bias_and_variance  # noqa: E402
from skdp_label.mechanisms.unbiased._bias_variance import bias_variance_continuous  # noqa: E402


def main(path=None, epsilon=1.0):
    y, p = census_prior()
    weights = np.geomspace(1.0, 1e5, 21)
    bias2, var, means = [], [], {}
    state = None
    t0 = time.perf_counter()
    for lam in weights:
        outputs, matrix, _, _, state = bias_variance_continuous(y, p, epsilon, lam, state=state)
        bias, v = bias_and_variance(y, outputs, matrix)
        bias2.append(float(p @ bias**2))
        var.append(float(p @ v))
        means[lam] = y + bias
    elapsed = time.perf_counter() - t0
    bins = RROnBins(epsilon=epsilon, prior=(y, p)).fit([1.0])
    b_bias, b_var = bias_and_variance(y, bins.output_values_, bins.transition_matrix_)
    unb = OptimalUnbiased(epsilon=epsilon, prior=(y, p)).fit([1.0])
    print(f"{len(weights)} weights solved in {elapsed:.1f} s (k = {y.size})")
    print("lambda      E[bias^2]     E[Var]")
    for lam, b2, v in zip(weights, bias2, var):
        print(f"{lam:9.3g} {b2:12.4g} {v:12.5g}")
    print(f"RR-on-Bins: E[bias^2] = {p @ b_bias**2:.4g}, E[Var] = {p @ b_var:.5g}")
    print(f"optimal unbiased: E[Var] = {unb.noisy_label_loss_:.5g}")

    fig, axes = plt.subplots(1, 3, figsize=(15, 4.4))
    ax = axes[0]
    ax.loglog(weights, bias2, "o-", label="E[bias²]")
    ax.loglog(weights, var, "s-", label="E[Var]")
    ax.axhline(unb.noisy_label_loss_, color="C1", ls=":", label="Var of optimal unbiased")
    ax.plot([1.0], [p @ b_bias**2], "kx", ms=10, label="RR-on-Bins (λ = 1)")
    ax.plot([1.0], [p @ b_var], "kx", ms=10)
    ax.set_xlabel("bias weight λ")
    ax.set_title(f"bias falls, variance rises (ε = {epsilon:g})")
    ax.legend(fontsize=8)

    ax = axes[1]
    ax.plot(y, y, "k--", lw=1, label="unbiased")
    for lam in (1.0, 10.0, 100.0, 1e4):
        key = weights[np.argmin(np.abs(np.log(weights / lam)))]
        ax.plot(y, means[key], label=f"λ = {key:.3g}")
    ax.set_xlabel("label y (weeks)")
    ax.set_ylabel("E[ŷ | y]")
    ax.set_title("conditional mean of the noisy label")
    ax.legend(fontsize=8)

    ax = axes[2]
    n = np.geomspace(1, 1e5, 200)
    for lam in (1.0, 10.0, 100.0, 1e3, 1e4):
        i = int(np.argmin(np.abs(np.log(weights / lam))))
        ax.loglog(n, var[i] / n + bias2[i], label=f"λ = {weights[i]:.3g}")
    ax.loglog(n, unb.noisy_label_loss_ / n, "k:", label="optimal unbiased")
    ax.set_xlabel("labels averaged, n")
    ax.set_ylabel("E[Var] / n + E[bias²]")
    ax.set_title("error of an average of n noisy labels")
    ax.legend(fontsize=8)
    fig.tight_layout()
    if path is None:
        path = Path(tempfile.mkdtemp()) / "bias_variance.png"
    fig.savefig(path, dpi=110)
    print(f"wrote {path}")
    return path


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
