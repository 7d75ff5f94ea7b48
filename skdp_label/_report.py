"""``privacy_report()``: what a fitted mechanism or estimator spent, and on what.

A report holds public facts only: the epsilon and delta of each charged step,
the number of labels each step covered (the number of rows), the mechanism's
public parameters and its expected noise level computed from the public
transition (or noise distribution). It never holds labels, label statistics,
or random state, so it can be printed, logged and pickled by whoever receives
the fitted object.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from .utils._repr import public_repr

if TYPE_CHECKING:  # optional dependency: only named in hints
    from pandas import DataFrame

__all__ = ["PrivacyReport", "mechanism_report", "noise_summary"]

# Parameters that are not privacy parameters (or not public state).
_HIDDEN_PARAMS = frozenset({"accountant", "random_state"})
# Transition matrices larger than this are not summarised (built on access).
_MAX_MATRIX_ENTRIES = 25_000_000


@dataclass(frozen=True)
class PrivacyReport:
    """Privacy cost and noise of a fitted mechanism or estimator.

    Attributes
    ----------
    owner : str
        The reported object's class (``LabelDPRegressor``, ``Laplace``, ...).
    mechanism : str
        The mechanism's class.
    epsilon, delta : float
        Cost per label of the last fit and the releases since (sequential
        steps add up; stages on disjoint rows count once, by their maximum).
    steps : list of dict
        One row per charge: ``step``, ``stage`` (multi-stage training),
        ``epsilon``, ``delta``, ``n_labels``.
    parameters : dict
        The mechanism's public parameters (no accountant, no random state).
    noise : dict
        Expected noise level from the public transition: for numeric labels
        ``noise_std`` (additive noise) or ``worst_case_rms_error`` and
        ``worst_case_bias`` (label units); for classes
        ``max_change_probability``.
    selection : dict
        For ``mechanism='auto'``: the chosen candidate, ``n_eff`` and each
        candidate's predicted excess risk over the prior's variance
        (docs/auto.md); empty otherwise.
    """

    owner: str
    mechanism: str
    epsilon: float
    delta: float
    steps: list = field(default_factory=list)
    parameters: dict = field(default_factory=dict)
    noise: dict = field(default_factory=dict)
    selection: dict = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The report as plain Python values (JSON-serialisable but for arrays)."""
        return asdict(self)

    def to_frame(self) -> DataFrame:
        """The charged steps as a pandas DataFrame (needs pandas)."""
        import pandas as pd

        return pd.DataFrame(self.steps, columns=["stage", "step", "epsilon", "delta", "n_labels"])

    def __str__(self) -> str:
        lines = [
            f"Privacy report: {self.owner} ({self.mechanism})",
            f"  epsilon per label: {self.epsilon:.6g}    delta: {self.delta:.3g}",
            f"  {'stage':>5}  {'step':<40} {'epsilon':>9} {'delta':>9} {'labels':>9}",
        ]
        for row in self.steps:
            stage = "" if row.get("stage") is None else str(row["stage"])
            lines.append(
                f"  {stage:>5}  {str(row['step'])[:40]:<40} {row['epsilon']:>9.4g} "
                f"{row['delta']:>9.3g} {row['n_labels']:>9d}"
            )
        if self.parameters:
            shown = ", ".join(f"{k}={public_repr(v)}" for k, v in self.parameters.items())
            lines.append(f"  parameters: {shown}")
        for name, value in [*self.noise.items(), *self.selection.items()]:
            text = f"{value:.4g}" if isinstance(value, float) else str(value)
            lines.append(f"  {name.replace('_', ' ')}: {text}")
        return "\n".join(lines)

    __repr__ = __str__


def noise_summary(mechanism) -> dict[str, float]:
    """Expected noise level of a fitted mechanism, from public quantities only."""
    own = getattr(mechanism, "_noise_summary", None)
    if own is not None:
        summary = own()
        if summary is not None:
            return summary
    try:
        matrix = mechanism.transition_matrix_
        inputs = np.asarray(mechanism.input_values_)
        outputs = np.asarray(mechanism.output_values_)
    except (AttributeError, ValueError):
        return {}
    if matrix.size > _MAX_MATRIX_ENTRIES:
        return {}
    is_classes = "classes" in mechanism.get_params(deep=False)
    if not is_classes and inputs.dtype.kind in "iuf" and outputs.dtype.kind in "iuf":
        diff = outputs[None, :].astype(float) - inputs[:, None].astype(float)
        mse = np.einsum("ij,ij->i", matrix, diff**2)
        bias = matrix @ outputs.astype(float) - inputs.astype(float)
        return {
            "worst_case_rms_error": float(math.sqrt(mse.max())),
            "worst_case_bias": float(np.abs(bias).max()),
        }
    same = outputs[None, :] == inputs[:, None]
    keep = (matrix * same).sum(axis=1)
    return {"max_change_probability": float(1.0 - keep.min())}


def public_parameters(mechanism) -> dict[str, Any]:
    params = {
        name: value
        for name, value in mechanism.get_params(deep=False).items()
        if name not in _HIDDEN_PARAMS and value is not None
    }
    if getattr(mechanism, "_grid_family", None) is not None and hasattr(mechanism, "input_values_"):
        # The grid the mechanism was fitted on (e.g. the size resolution='auto' chose).
        params["grid_points"] = int(len(mechanism.input_values_))
    return params


def mechanism_report(owner, mechanisms, extra_steps=(), parallel=False) -> PrivacyReport:
    """Build the report of ``owner`` from its fitted mechanism(s).

    ``mechanisms`` are fitted mechanisms whose ``charges_`` list what they
    charged; with ``parallel`` they ran on disjoint rows (stages), so the
    cost is the maximum over them. ``extra_steps`` are charges the owner made
    itself (e.g. a cluster prior), added sequentially.
    """
    steps = [dict(row) for row in extra_steps]
    per_mechanism = []
    for mech in mechanisms:
        rows = [
            {k: row.get(k) for k in ("stage", "step", "epsilon", "delta", "n_labels")}
            for row in getattr(mech, "charges_", [])
        ]
        steps.extend(rows)
        per_mechanism.append(
            (sum(r["epsilon"] for r in rows), sum(r["delta"] for r in rows))
        )
    combine = max if parallel else sum
    epsilon = sum(r["epsilon"] for r in extra_steps) + (
        combine(e for e, _ in per_mechanism) if per_mechanism else 0.0
    )
    delta = sum(r["delta"] for r in extra_steps) + (
        combine(d for _, d in per_mechanism) if per_mechanism else 0.0
    )
    last = mechanisms[-1]
    return PrivacyReport(
        owner=type(owner).__name__,
        mechanism=getattr(last, "report_name", type(last).__name__),
        epsilon=float(epsilon),
        delta=float(delta),
        steps=steps,
        parameters=public_parameters(last),
        noise=noise_summary(last),
        selection=last._selection_summary() if hasattr(last, "_selection_summary") else {},
    )
