"""Figure for docs/quantization.md: the randomized quantization family compared.

Exact computations (no sampling), labels uniform on [-1, 1], m = 4 outputs,
every mechanism with its positions chosen automatically for the absolute
error (OPTM: optimised bins; MVU: optimised output alphabet, 16-point input
grid; RQM, ERM: evenly spaced bins with an optimised margin, parameter
calibrated to epsilon by the exact privacy loss):

* left: mean absolute error against epsilon (002 Table 1 / Fig. 3 setting);
* right: E|M(x) - x| against the label x at epsilon = 1.

Run: ``python docs/plot_quantization.py [output.png]`` (default: a file in a
temporary directory; the committed figure is docs/quantization_comparison.png).
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

from skdp_label.mechanisms import ERM, MVU, OPTM, RQM  # noqa: E402

BOUNDS = (-1.0, 1.0)
EPSILONS = (0.5, 0.75, 1.0, 1.5, 2.0, 3.0, 4.0)
MECHANISMS = {
    "OPTM (optimised bins)": lambda e: OPTM(e, bounds=BOUNDS, bins=4, objective="mae"),
    "MVU (MAE-optimal alphabet)": lambda e: MVU(e, bounds=BOUNDS, outputs=4, objective="mae"),
    "RQM (calibrated q)": lambda e: RQM(e, bounds=BOUNDS, bins=4, objective="mae"),
    "ERM (calibrated gamma)": lambda e: ERM(e, bounds=BOUNDS, bins=4, objective="mae"),
}


def conditional_mae(mech, x):
    p = mech.output_distribution(x)
    return (p * np.abs(mech.output_values_[None, :] - x[:, None])).sum(axis=1)


def main(path=None):
    path = Path(path) if path else Path(tempfile.mkdtemp()) / "quantization_comparison.png"
    fig, (ax_eps, ax_x) = plt.subplots(1, 2, figsize=(11, 4.2))
    x = np.linspace(*BOUNDS, 801)
    for (label, make), marker in zip(MECHANISMS.items(), "osv^"):
        maes = []
        for eps in EPSILONS:
            mech = make(eps).fit([0.0])
            assert mech.privacy_loss_ <= eps
            maes.append(mech.expected_error_)
            if eps == 1.0:
                ax_x.plot(x, conditional_mae(mech, x), label=label)
        ax_eps.plot(EPSILONS, maes, marker=marker, label=label)
    ax_eps.set_yscale("log")
    ax_eps.set_xlabel("epsilon")
    ax_eps.set_ylabel("E|M(X) - X|, X ~ U[-1, 1]")
    ax_eps.set_title("Mean absolute error, m = 4")
    ax_eps.legend(fontsize=8)
    ax_x.set_xlabel("label x")
    ax_x.set_ylabel("E|M(x) - x|")
    ax_x.set_title("Error per label, epsilon = 1")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(path)
    return path


if __name__ == "__main__":
    main(sys.argv[1] if len(sys.argv) > 1 else None)
