"""
Bias against variance: RR-on-Bins, the optimal unbiased randomizer and others
=============================================================================

A noisy label ỹ of a label y has a *bias* E[ỹ | y] − y and a *variance*
Var[ỹ | y]; the expected squared error of a model trained on noisy labels
grows with both, but an average over many examples removes variance and keeps
bias. RR-on-Bins (000) minimises the noisy-label loss bias² + variance for a
prior, and pays for it in bias; the optimal unbiased randomizer (001) has zero
bias and the smallest variance among unbiased mechanisms.

For discrete mechanisms both are exact functions of the public transition
matrix, so nothing is sampled here.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np

from skdp_label.mechanisms import DebiasedRR, ExponentialMechanism, OptimalUnbiased, RROnBins

domain = np.arange(21.0)
weights = np.exp(-domain / 6.0)  # public prior: small labels are common
prior = (domain, weights / weights.sum())
y_fit = domain  # labels to fit on; with a public prior nothing is estimated


def bias_and_variance(mechanism):
    """Exact E[ỹ|y] − y and Var[ỹ|y] for every input value of a fitted mechanism."""
    matrix, out = mechanism.transition_matrix_, mechanism.output_values_
    mean = matrix @ out
    return mean - mechanism.input_values_, matrix @ out**2 - mean**2


def make(name, eps):
    return {
        "RR-on-Bins": RROnBins(epsilon=eps, prior=prior),
        "optimal unbiased": OptimalUnbiased(epsilon=eps, prior=prior),
        "debiased RR": DebiasedRR(epsilon=eps, domain=domain),
        "exponential": ExponentialMechanism(epsilon=eps, domain=domain),
    }[name].fit(y_fit)


names = ["RR-on-Bins", "optimal unbiased", "debiased RR", "exponential"]

# %%
# Per label, at ε = 2
# -------------------
fig, (ax_b, ax_s) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained")
for name in names:
    bias, var = bias_and_variance(make(name, 2.0))
    ax_b.plot(domain, bias, marker=".", label=name)
    ax_s.plot(domain, np.sqrt(var), marker=".", label=name)
ax_b.axhline(0, color="gray", lw=0.8)
ax_b.set(xlabel="label y", ylabel="bias  E[ỹ|y] − y", title="bias")
ax_s.set(xlabel="label y", ylabel="std  sqrt(Var[ỹ|y])", title="noise")
ax_b.legend()

# %%
# Averaged over the prior, across ε
# ---------------------------------
# The prior-weighted squared bias and variance. RR-on-Bins has the smallest sum
# at every ε; the unbiased mechanisms put all of it into variance.
epsilons = [0.5, 1.0, 2.0, 4.0, 8.0]
fig, ax = plt.subplots(figsize=(7, 4), layout="constrained")
for name in names:
    b2, v = [], []
    for eps in epsilons:
        bias, var = bias_and_variance(make(name, eps))
        b2.append(prior[1] @ bias**2)
        v.append(prior[1] @ var)
    (line,) = ax.plot(epsilons, np.add(b2, v), marker="o", label=f"{name}: bias² + variance")
    if max(b2) > 1e-9 * max(v):  # unbiased: bias² is floating-point round-off, not drawn
        ax.plot(epsilons, b2, ls=":", color=line.get_color())
    print(f"{name:>17}: bias^2 {np.round(b2, 2)}  variance {np.round(v, 2)}")
ax.set(
    xscale="log",
    yscale="log",
    xlabel="epsilon",
    ylabel="mean squared error of ỹ",
    title="solid: bias² + variance, dotted: bias² (zero for unbiased)",
)
ax.set_xticks(epsilons, [f"{e:g}" for e in epsilons])
ax.minorticks_off()
ax.legend(fontsize=8)
