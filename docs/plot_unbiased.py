"""Figure for docs/unbiased.md: bias and variance of label randomizers.

Exact computations (no sampling) on the census-like 52-week prior of
benchmarks/bench_unbiased.py, for integer labels 1..52:

* left: E[y_hat | y] against y at epsilon = 1 -- clipped additive noise
  pulls labels towards the middle, unbiased randomizers do not;
* right: noisy label loss E[(y_hat - y)^2] under the prior against epsilon,
  split by marker into unbiased (filled) and biased (hollow) randomizers.

Run: ``python docs/plot_unbiased.py [output.png]`` (default: a file in a
temporary directory; the committed figure is docs/unbiased_tradeoff.png).
"""

import math
import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

from bench_unbiased import census_prior  # noqa: E402

from skdp_label.mechanisms import (  # noqa: E402
    DebiasedRR,
    DiscreteLaplace,
    DiscreteStaircase,
    OptimalUnbiased,
    RROnBins,
)
from skdp_label.mechanisms.classic._noise import staircase_moment  # noqa: E402


def matrix_stats(mech, p):
    """(E[y_hat | y], E[(y_hat - y)^2] under p) from the exact matrix."""
    y, z, m = mech.input_values_, mech.output_values_, mech.transition_matrix_
    return m @ z, float(p @ (m * (z[None, :] - y[:, None]) ** 2).sum(axis=1))


def unclipped_loss(mech):
    """Variance of the (unbiased) unclipped discrete noise."""
    lam, width, r = mech._staircase(mech.sensitivity_units_)
    return float(np.ravel(staircase_moment(lam, width, r, 2))[0])


def main(path=None):
    y, p = census_prior()
    bounds = (1, 52)
    epsilons = np.array([0.25, 0.5, 1.0, 2.0, 4.0, 8.0])
    curves = {
        "optimal unbiased": [],
        "debiased RR": [],
        "Laplace (unclipped)": [],
        "staircase (unclipped)": [],
        "Laplace (clipped)": [],
        "staircase (clipped)": [],
        "RR-on-Bins": [],
    }
    means = {}
    for eps in epsilons:
        opt = OptimalUnbiased(epsilon=eps, prior=(y, p)).fit([1.0])
        dbrr = DebiasedRR(epsilon=eps, bounds=bounds).fit([1.0])
        lap = DiscreteLaplace(epsilon=eps, bounds=bounds).fit([1.0])
        stair = DiscreteStaircase(epsilon=eps, bounds=bounds).fit([1.0])
        bins = RROnBins(epsilon=eps, prior=(y, p)).fit([1.0])
        for name, mech in [("optimal unbiased", opt), ("debiased RR", dbrr),
                           ("Laplace (clipped)", lap), ("staircase (clipped)", stair),
                           ("RR-on-Bins", bins)]:
            mean, loss = matrix_stats(mech, p)
            curves[name].append(loss)
            if eps == 1.0:
                means[name] = mean
        curves["Laplace (unclipped)"].append(unclipped_loss(lap))
        curves["staircase (unclipped)"].append(unclipped_loss(stair))

    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    left.plot(y, y, color="black", lw=1, label="y (unbiased)")
    left.plot(y, means["Laplace (clipped)"], label="Laplace (clipped)")
    left.plot(y, means["staircase (clipped)"], label="staircase (clipped)")
    left.plot(y, means["RR-on-Bins"], drawstyle="steps-mid", label="RR-on-Bins")
    left.plot(y, means["optimal unbiased"], ls="--", label="optimal unbiased")
    left.set_xlabel("true label y (weeks)")
    left.set_ylabel("E[noisy label | y]")
    left.set_title("Bias at epsilon = 1")
    left.legend(fontsize=8)

    for name, losses in curves.items():
        biased = name.endswith("(clipped)") or name == "RR-on-Bins"
        right.plot(epsilons, losses, marker="o", mfc="none" if biased else None,
                   ls=":" if biased else "-", label=name)
    right.set_xscale("log")
    right.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    right.minorticks_off()
    right.set_yscale("log")
    right.set_xlabel("epsilon")
    right.set_ylabel("noisy label loss E[(noisy - y)^2]")
    right.set_title("Noise under the census-like prior")
    right.legend(fontsize=8)
    fig.tight_layout()
    # Never into the checkout unless asked: the committed figure is regenerated on purpose.
    out = Path(path) if path else Path(tempfile.mkdtemp()) / "unbiased_tradeoff.png"
    fig.savefig(out, dpi=120)
    for name, losses in curves.items():
        print(f"{name:<24}" + " ".join(f"{v:12.2f}" for v in losses))
    print(f"wrote {out}")


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
