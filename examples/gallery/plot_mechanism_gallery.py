"""
Mechanism gallery: what each mechanism does to a label
=======================================================

Every mechanism is a randomized map from a label to a noisy label. For the
discrete mechanisms this map is a public *transition matrix* (row: label, column:
noisy label, rows sum to one); for the others we show the *joint density* of
label and noisy label over simulated labels, the picture of 000 Fig. 2 and
001 Fig. 3. Each panel is drawn at two values of ε.

The labels are public simulated data on the domain 0, 1, ..., 20 with a skewed
prior, given to the prior-based mechanisms as a *public* prior, so nothing here
is estimated from private data.
"""

# %%
import matplotlib.pyplot as plt
import numpy as np

from skdp_label.mechanisms import (
    DebiasedRR,
    ExponentialMechanism,
    Gaussian,
    Laplace,
    OptimalUnbiased,
    RandomizedResponse,
    RPWithPrior,
    RROnBins,
    RRWithPrior,
    Staircase,
)
from skdp_label.plotting import JointDensityDisplay, TransitionMatrixDisplay

domain = np.arange(21.0)
weights = np.exp(-domain / 6.0)  # a skewed public prior: small labels are common
prior = (domain, weights / weights.sum())
rng = np.random.default_rng(0)  # simulated public labels, not label noise
y = rng.choice(domain, size=4000, p=prior[1])
epsilons = (1.0, 3.0)

# %%
# Classification: randomized response and RRWithPrior
# ----------------------------------------------------
# k-ary RR keeps the label with probability e^ε / (e^ε + k - 1). RRWithPrior
# (004) answers only among the k likeliest classes of the prior, so a likely
# label is kept far more often.
classes = list(range(8))
class_prior = np.exp(-np.arange(8) / 1.5)
class_prior /= class_prior.sum()
fig, axes = plt.subplots(2, 2, figsize=(9, 7), layout="constrained")
for row, eps in enumerate(epsilons):
    rr = RandomizedResponse(epsilon=eps, classes=classes).fit(classes)
    TransitionMatrixDisplay.from_mechanism(rr, ax=axes[row, 0])
    rwp = RRWithPrior(epsilon=eps, classes=classes, prior=class_prior).fit(classes)
    TransitionMatrixDisplay.from_mechanism(rwp, ax=axes[row, 1])

# %%
# Discrete regression mechanisms
# ------------------------------
# RR-on-Bins (000) maps every label to one of a few bin values chosen for the
# prior: a biased but low-loss release. Debiased RR and the optimal unbiased
# randomizer (001) output values outside the label range so that the noisy
# label is unbiased. The exponential mechanism favours outputs close to the
# label.
fig, axes = plt.subplots(2, 4, figsize=(15, 7), layout="constrained")
for row, eps in enumerate(epsilons):
    mechanisms = [
        RROnBins(epsilon=eps, prior=prior),
        ExponentialMechanism(epsilon=eps, domain=domain),
        DebiasedRR(epsilon=eps, domain=domain),
        OptimalUnbiased(epsilon=eps, prior=prior),
    ]
    for ax, mech in zip(axes[row], mechanisms):
        TransitionMatrixDisplay.from_mechanism(mech.fit(y), ax=ax, log=True)

# %%
# Continuous-output mechanisms
# ----------------------------
# Additive noise (Laplace, staircase, Gaussian) is centred on the label and
# clipped to the bounds by default; RPWithPrior (003) draws from a window around
# the label inside an interval chosen for the prior.
fig, axes = plt.subplots(2, 4, figsize=(15, 7), layout="constrained")
for row, eps in enumerate(epsilons):
    mechanisms = [
        Laplace(epsilon=eps, bounds=(0, 20)),
        Staircase(epsilon=eps, bounds=(0, 20)),
        Gaussian(epsilon=eps, delta=1e-5, bounds=(0, 20)),
        RPWithPrior(epsilon=eps, prior=prior),
    ]
    for ax, mech in zip(axes[row], mechanisms):
        JointDensityDisplay.from_mechanism(mech, y, bins=[21, 40], ax=ax)
