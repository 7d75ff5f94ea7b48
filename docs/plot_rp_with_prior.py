"""Figure for docs/rp_with_prior.md: noisy-label distributions for one prior.

Exact computations from the transition matrices (no sampling). Public prior:
a skewed count prior over the integers 0..50 (geometric-like, the shape of
doctor-visit counts), bounds (0, 50).

* Three panels at epsilon = 1: the distribution of the noisy label for the
  labels y = 2, 10 and 30, under RPWithPrior (zeta='auto'), RR-on-Bins and
  the optimal unbiased randomizer, as the probability of each unit-width
  cell [j - 1/2, j + 1/2) (RPWithPrior's outputs are on a grid of step 1/4);
  the prior is shaded behind.
* Fourth panel: the noisy label loss E[(y_hat - y)^2] under the prior
  against epsilon for the three, and RRWithPrior on the same domain.

Run: ``python docs/plot_rp_with_prior.py [PATH]`` (default: a file in a
temporary directory; the docs' copy is docs/rp_with_prior.png).
"""

import sys
import tempfile
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from skdp_label.mechanisms import (  # noqa: E402
    OptimalUnbiased,
    RPWithPrior,
    RROnBins,
    RRWithPriorRegression,
)

LABELS = (2, 10, 30)


def count_prior():
    values = np.arange(51.0)
    probs = 0.12 * 0.86**values + 0.004
    return values, probs / probs.sum()


def mechanisms(eps, prior):
    return {
        "RPWithPrior": RPWithPrior(eps, prior=prior, bounds=(0, 50), granularity=0.25),
        "RR-on-Bins": RROnBins(eps, prior=prior),
        "optimal unbiased": OptimalUnbiased(eps, prior=prior),
        "RRWithPrior": RRWithPriorRegression(eps, prior=prior),
    }


def cell_distribution(mech, label, edges):
    """P(y_hat in each unit cell) for one label, from the exact matrix."""
    row = mech.transition_matrix_[mech._encode_labels(np.array([float(label)]))[0]]
    return np.histogram(mech.output_values_, bins=edges, weights=row)[0]


def main(path=None):
    if path is None:
        path = Path(tempfile.mkdtemp()) / "rp_with_prior.png"
    prior = count_prior()
    fitted = {name: m.fit([0.0]) for name, m in mechanisms(1.0, prior).items()}
    lo = min(fitted[n].output_values_.min() for n in fitted)
    hi = max(fitted[n].output_values_.max() for n in fitted)
    edges = np.arange(np.floor(lo) - 0.5, np.ceil(hi) + 1.5)
    centres = (edges[:-1] + edges[1:]) / 2
    fig, axes = plt.subplots(1, 4, figsize=(18, 3.8))
    styles = (("tab:blue", "-", 2.4), ("tab:orange", "--", 1.6), ("tab:green", "-", 1.0))
    for ax, name in zip(axes, ("RPWithPrior", "RR-on-Bins", "optimal unbiased")):
        ax.bar(prior[0], prior[1], width=1.0, color="0.85", label="prior")
        for label, (color, ls, lw) in zip(LABELS, styles):
            dist = cell_distribution(fitted[name], label, edges)
            ax.step(centres, dist, where="mid", color=color, ls=ls, lw=lw, label=f"y = {label}")
            ax.axvline(label, color=color, lw=0.6, ls=":")
        ax.set_title(f"{name}, eps = 1")
        ax.set_xlabel("noisy label (unit cells)")
        out = fitted[name].output_values_
        ax.set_xlim(min(out.min(), -5) - 2, max(out.max(), 52) + 2)
    axes[0].set_ylabel("probability")
    axes[0].legend(fontsize=8)
    m = fitted["RPWithPrior"]
    axes[0].text(
        0.98,
        0.6,
        f"[A1, A2] = [{m.interval_[0]:g}, {m.interval_[1]:g}]\nzeta = {m.zeta_:g}",
        transform=axes[0].transAxes,
        ha="right",
        fontsize=8,
    )
    epsilons = np.array([0.25, 0.5, 1.0, 2.0, 4.0, 8.0])
    losses = {name: [] for name in fitted}
    for eps in epsilons:
        for name, mech in mechanisms(eps, prior).items():
            losses[name].append(mech.fit([0.0]).noisy_label_loss_)
    for name, values in losses.items():
        axes[3].loglog(epsilons, values, marker="o", label=name)
    axes[3].set_xticks(epsilons, [f"{e:g}" for e in epsilons])
    axes[3].minorticks_off()
    axes[3].set_xlabel("epsilon")
    axes[3].set_ylabel("E[(y_hat - y)^2] under the prior")
    axes[3].set_title("noisy label loss")
    axes[3].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    print(path)
    for name, values in losses.items():
        print(f"{name:>17}: " + "  ".join(f"{v:9.2f}" for v in values))
    return path


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
