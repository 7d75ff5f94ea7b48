"""Display objects for label-DP mechanisms and estimators, the scikit-learn way.

Each display follows :class:`sklearn.metrics.RocCurveDisplay`: a plain
object holding the numbers to draw, a ``plot(ax=None, ...)`` method that
draws them and stores ``ax_`` and ``figure_``, and ``from_*`` class methods
that compute the numbers and plot in one call.

matplotlib is optional (``pip install skdp_label[plot]``) and is imported
only when something is drawn, so importing this module costs nothing.

.. note::
   :class:`JointDensityDisplay` and :class:`PrivacyUtilityDisplay` are
   analysis tools for the labels party or for simulations on public data:
   they hold statistics of the true labels (a joint histogram, test scores
   against true labels). Do not release them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Self

import numpy as np
from numpy.typing import ArrayLike
from sklearn.base import BaseEstimator, clone
from sklearn.metrics import check_scoring
from sklearn.utils.validation import check_is_fitted

from .mechanisms._base import BaseLabelMechanism

if TYPE_CHECKING:  # optional dependency: only named in hints
    from matplotlib.axes import Axes
    from pandas import DataFrame

__all__ = ["JointDensityDisplay", "PrivacyUtilityDisplay", "TransitionMatrixDisplay"]


def _pyplot():
    """Import matplotlib.pyplot, or explain which extra provides it."""
    try:
        import matplotlib.pyplot as plt
    except ImportError as exc:  # optional dependency: fail with the fix in the message
        raise ImportError(
            "skdp_label.plotting needs matplotlib; install it with "
            "`pip install skdp_label[plot]` (or `pip install matplotlib`)."
        ) from exc
    return plt


def _axes(ax):
    plt = _pyplot()
    if ax is None:
        _, ax = plt.subplots()
    return ax


def _mechanism_title(mechanism):
    return f"{type(mechanism).__name__}, epsilon={float(mechanism.epsilon):g}"


def _tick_labels(values, max_ticks=12):
    """Positions and short labels for at most ``max_ticks`` axis ticks."""
    values = np.asarray(values)
    step = max(1, int(np.ceil(len(values) / max_ticks)))
    positions = np.arange(0, len(values), step)
    return positions, [
        f"{v:.3g}" if np.issubdtype(values.dtype, np.number) else str(v) for v in values[positions]
    ]


class TransitionMatrixDisplay:
    """The transition matrix of a discrete mechanism as a heat map.

    Row ``i`` is the output distribution of input value ``input_values[i]``;
    the matrix is public (it depends only on public inputs and noisy
    statistics), so it can be shown and released.

    Parameters
    ----------
    transition_matrix : ndarray of shape (n_inputs, n_outputs)
        Rows are probability distributions over the outputs.
    input_values : array-like of shape (n_inputs,)
        Label value of each row.
    output_values : array-like of shape (n_outputs,)
        Noisy label value of each column.
    title : str, default=None
        Axes title, e.g. the mechanism and its epsilon.

    Attributes
    ----------
    im_ : matplotlib.image.AxesImage
        The heat map.
    ax_ : matplotlib.axes.Axes
        Axes with the heat map.
    figure_ : matplotlib.figure.Figure
        Figure containing the heat map.

    See Also
    --------
    JointDensityDisplay : label against noisy label for any mechanism.

    Examples
    --------
    >>> from skdp_label.mechanisms import RandomizedResponse
    >>> from skdp_label.plotting import TransitionMatrixDisplay
    >>> rr = RandomizedResponse(epsilon=1.0, classes=[0, 1, 2]).fit([0, 1, 2])
    >>> disp = TransitionMatrixDisplay.from_mechanism(rr)  # doctest: +SKIP
    """

    def __init__(
        self, transition_matrix: ArrayLike, input_values: ArrayLike, output_values: ArrayLike,
        *, title: str | None = None,
    ) -> None:
        self.transition_matrix = transition_matrix
        self.input_values = input_values
        self.output_values = output_values
        self.title = title

    def plot(
        self, ax: Axes | None = None, *, cmap: str = "viridis", colorbar: bool = True,
        log: bool = False,
    ) -> Self:
        """Draw the heat map.

        Parameters
        ----------
        ax : matplotlib Axes, default=None
            Axes to draw on; a new figure is created when None.
        cmap : str or Colormap, default="viridis"
            Colour map of the probabilities.
        colorbar : bool, default=True
            Whether to add a colour bar.
        log : bool, default=False
            Colour by log10 of the probability, which shows the e^epsilon
            ratios of a DP matrix as constant colour steps.

        Returns
        -------
        display : TransitionMatrixDisplay
        """
        ax = _axes(ax)
        matrix = np.asarray(self.transition_matrix, dtype=float)
        shown = np.log10(np.maximum(matrix, 1e-300)) if log else matrix
        self.im_ = ax.imshow(
            shown, cmap=cmap, aspect="auto", origin="lower", interpolation="nearest"
        )
        pos, labels = _tick_labels(self.output_values)
        ax.set_xticks(pos, labels, rotation=45 if len(labels) > 6 else 0)
        pos, labels = _tick_labels(self.input_values)
        ax.set_yticks(pos, labels)
        ax.set_xlabel("noisy label")
        ax.set_ylabel("label")
        if self.title:
            ax.set_title(self.title)
        if colorbar:
            cbar = ax.figure.colorbar(self.im_, ax=ax)
            cbar.set_label("log10 probability" if log else "probability")
        self.ax_, self.figure_ = ax, ax.figure
        return self

    @classmethod
    def from_mechanism(
        cls, mechanism: BaseLabelMechanism, *, ax: Axes | None = None, **plot_kwargs: Any
    ) -> TransitionMatrixDisplay:
        """Plot the transition matrix of a fitted discrete mechanism.

        Parameters
        ----------
        mechanism : fitted mechanism
            A mechanism exposing ``transition_matrix_``, ``input_values_``
            and ``output_values_`` (every :class:`BaseDiscreteMechanism`).
        ax : matplotlib Axes, default=None
            Axes to draw on.
        **plot_kwargs
            Passed to :meth:`plot`.

        Returns
        -------
        display : TransitionMatrixDisplay
        """
        check_is_fitted(mechanism)
        if getattr(mechanism, "transition_matrix_", None) is None:
            raise ValueError(
                f"{type(mechanism).__name__} has no transition_matrix_ (continuous "
                "outputs or a grid too large to tabulate); use "
                "JointDensityDisplay.from_mechanism instead."
            )
        disp = cls(
            mechanism.transition_matrix_,
            mechanism.input_values_,
            mechanism.output_values_,
            title=_mechanism_title(mechanism),
        )
        return disp.plot(ax=ax, **plot_kwargs)


class JointDensityDisplay:
    """Joint histogram of labels against their noisy labels.

    The picture of 000 Fig. 2 and 001 Fig. 3: mass on the diagonal is
    labels kept close, horizontal bands are outputs shared by many labels.

    Parameters
    ----------
    density : ndarray of shape (n_label_bins, n_noisy_bins)
        Fraction of examples in each (label, noisy label) cell.
    label_edges : ndarray of shape (n_label_bins + 1,)
        Bin edges of the labels.
    noisy_edges : ndarray of shape (n_noisy_bins + 1,)
        Bin edges of the noisy labels.
    title : str, default=None
        Axes title.

    Attributes
    ----------
    mesh_ : matplotlib.collections.QuadMesh
        The coloured cells.
    ax_ : matplotlib.axes.Axes
        Axes with the histogram.
    figure_ : matplotlib.figure.Figure
        Figure containing the histogram.

    Examples
    --------
    >>> import numpy as np
    >>> from skdp_label.plotting import JointDensityDisplay
    >>> y = np.linspace(0, 10, 200)
    >>> disp = JointDensityDisplay.from_labels(y, y + 1.0, bins=5)
    >>> disp.density.shape
    (5, 5)
    """

    def __init__(
        self, density: ArrayLike, label_edges: ArrayLike, noisy_edges: ArrayLike, *,
        title: str | None = None,
    ) -> None:
        self.density = density
        self.label_edges = label_edges
        self.noisy_edges = noisy_edges
        self.title = title

    def plot(
        self, ax: Axes | None = None, *, cmap: str = "magma", colorbar: bool = True,
        diagonal: bool = True,
    ) -> Self:
        """Draw the joint histogram.

        Parameters
        ----------
        ax : matplotlib Axes, default=None
            Axes to draw on; a new figure is created when None.
        cmap : str or Colormap, default="magma"
            Colour map of the densities.
        colorbar : bool, default=True
            Whether to add a colour bar.
        diagonal : bool, default=True
            Whether to draw the line noisy label = label.

        Returns
        -------
        display : JointDensityDisplay
        """
        ax = _axes(ax)
        # Noisy label on the x axis, label on the y axis, as TransitionMatrixDisplay.
        self.mesh_ = ax.pcolormesh(
            self.noisy_edges, self.label_edges, np.asarray(self.density, dtype=float), cmap=cmap
        )
        if diagonal:
            lo = max(self.noisy_edges[0], self.label_edges[0])
            hi = min(self.noisy_edges[-1], self.label_edges[-1])
            ax.plot([lo, hi], [lo, hi], color="white", lw=0.8, ls="--", alpha=0.7)
        ax.set_xlabel("noisy label")
        ax.set_ylabel("label")
        if self.title:
            ax.set_title(self.title)
        if colorbar:
            ax.figure.colorbar(self.mesh_, ax=ax).set_label("fraction of examples")
        self.ax_, self.figure_ = ax, ax.figure
        return self

    @classmethod
    def from_labels(
        cls, y: ArrayLike, y_noisy: ArrayLike, *, bins: int = 40, title: str | None = None,
        ax: Axes | None = None, plot: bool = True, **plot_kwargs: Any,
    ) -> JointDensityDisplay:
        """Histogram given labels and noisy labels.

        Parameters
        ----------
        y, y_noisy : array-like of shape (n_samples,)
            Labels and their noisy versions.
        bins : int or [int, int], default=40
            Number of bins (labels, noisy labels), as in ``numpy.histogram2d``.
        title : str, default=None
            Axes title.
        ax : matplotlib Axes, default=None
            Axes to draw on.
        plot : bool, default=True
            Whether to draw; with False only the numbers are computed (no
            matplotlib needed).
        **plot_kwargs
            Passed to :meth:`plot`.

        Returns
        -------
        display : JointDensityDisplay
        """
        y = np.asarray(y, dtype=float).ravel()
        y_noisy = np.asarray(y_noisy, dtype=float).ravel()
        if y.shape != y_noisy.shape or y.size == 0:
            raise ValueError(
                f"y and y_noisy must be non-empty and of the same length; got "
                f"{y.size} and {y_noisy.size} values."
            )
        counts, label_edges, noisy_edges = np.histogram2d(y, y_noisy, bins=bins)
        disp = cls(counts / y.size, label_edges, noisy_edges, title=title)
        return disp.plot(ax=ax, **plot_kwargs) if plot else disp

    @classmethod
    def from_mechanism(
        cls, mechanism: BaseLabelMechanism, y: ArrayLike, *, bins: int = 40,
        ax: Axes | None = None, plot: bool = True, **plot_kwargs: Any,
    ) -> JointDensityDisplay:
        """Randomize ``y`` with a copy of ``mechanism`` and histogram the pairs.

        Parameters
        ----------
        mechanism : mechanism
            An unfitted or fitted mechanism; a clone is fitted on ``y`` and
            releases noisy labels once, charging ``mechanism``'s accountant
            (if any) like any release.
        y : array-like of shape (n_samples,)
            Labels, e.g. public simulated data spread over the bounds.
        bins : int or [int, int], default=40
            Number of bins, as in ``numpy.histogram2d``.
        ax : matplotlib Axes, default=None
            Axes to draw on.
        plot : bool, default=True
            Whether to draw.
        **plot_kwargs
            Passed to :meth:`plot`.

        Returns
        -------
        display : JointDensityDisplay
        """
        y_noisy = clone(mechanism).fit_transform(y)
        return cls.from_labels(
            y,
            y_noisy,
            bins=bins,
            title=_mechanism_title(mechanism),
            ax=ax,
            plot=plot,
            **plot_kwargs,
        )


class PrivacyUtilityDisplay:
    """Test score of an estimator against epsilon.

    Parameters
    ----------
    epsilons : ndarray of shape (n_epsilons,)
        Privacy budgets, increasing.
    scores : ndarray of shape (n_epsilons,)
        Mean test score at each epsilon.
    scores_std : ndarray of shape (n_epsilons,), default=None
        Standard deviation over repeated fits (drawn as a band).
    name : str, default=None
        Legend label of the curve.
    baseline : float, default=None
        Score of the non-private model, drawn as a horizontal line.
    score_name : str, default="score"
        Label of the y axis.

    Attributes
    ----------
    line_ : matplotlib.lines.Line2D
        The curve.
    ax_ : matplotlib.axes.Axes
        Axes with the curve.
    figure_ : matplotlib.figure.Figure
        Figure containing the curve.

    Examples
    --------
    >>> import numpy as np
    >>> from sklearn.linear_model import Ridge
    >>> from skdp_label import LabelDPRegressor
    >>> from skdp_label.plotting import PrivacyUtilityDisplay
    >>> X = np.linspace(0, 1, 200).reshape(-1, 1)
    >>> y = 4 * X.ravel()
    >>> est = LabelDPRegressor(Ridge(), mechanism="laplace", bounds=(0, 4))
    >>> disp = PrivacyUtilityDisplay.from_estimator(
    ...     est, X, y, X, y, epsilons=[0.5, 2.0], plot=False)
    >>> disp.scores.shape
    (2,)
    """

    def __init__(
        self, epsilons: ArrayLike, scores: ArrayLike, *, scores_std: ArrayLike | None = None,
        name: str | None = None, baseline: float | None = None, score_name: str = "score",
    ) -> None:
        self.epsilons = epsilons
        self.scores = scores
        self.scores_std = scores_std
        self.name = name
        self.baseline = baseline
        self.score_name = score_name

    def plot(
        self, ax: Axes | None = None, *, name: str | None = None, logx: bool = True,
        **line_kwargs: Any,
    ) -> Self:
        """Draw the curve (call again with the same ``ax`` to compare estimators).

        Parameters
        ----------
        ax : matplotlib Axes, default=None
            Axes to draw on; a new figure is created when None.
        name : str, default=None
            Legend label; defaults to ``self.name``.
        logx : bool, default=True
            Logarithmic epsilon axis.
        **line_kwargs
            Passed to ``Axes.plot``.

        Returns
        -------
        display : PrivacyUtilityDisplay
        """
        ax = _axes(ax)
        eps = np.asarray(self.epsilons, dtype=float)
        scores = np.asarray(self.scores, dtype=float)
        line_kwargs.setdefault("marker", "o")
        (self.line_,) = ax.plot(eps, scores, label=name or self.name, **line_kwargs)
        if self.scores_std is not None:
            std = np.asarray(self.scores_std, dtype=float)
            ax.fill_between(
                eps, scores - std, scores + std, alpha=0.2, color=self.line_.get_color()
            )
        if self.baseline is not None:
            ax.axhline(self.baseline, color="gray", ls="--", lw=1, label="non-private")
        if logx:
            ax.set_xscale("log")
            ax.set_xticks(eps, [f"{e:g}" for e in eps])  # the budgets tried, not powers of 10
            ax.minorticks_off()
        ax.set_xlabel("epsilon")
        ax.set_ylabel(self.score_name)
        if ax.get_legend_handles_labels()[1]:
            ax.legend()
        self.ax_, self.figure_ = ax, ax.figure
        return self

    @classmethod
    def from_study(
        cls,
        table: DataFrame | list[dict],
        method: str,
        *,
        baseline: bool = True,
        score_name: str = "score",
        ax: Axes | None = None,
        plot: bool = True,
        **plot_kwargs: Any,
    ) -> Self:
        """The curve of one method of a :func:`~skdp_label.study.privacy_utility_study` table.

        Parameters
        ----------
        table : pandas.DataFrame or list of dict
            The study's table; rows with ``status='ok'`` are used.
        method : str
            The ``method`` whose curve to draw (a mechanism label or
            ``'dp-constant'``): mean over seeds, std band when several.
        baseline : bool, default=True
            Draw the table's ``'non-private'`` mean score as the baseline.
        score_name : str, default="score"
            Label of the y axis.
        ax : matplotlib Axes, default=None
            Axes to draw on.
        plot : bool, default=True
            Whether to draw.
        **plot_kwargs
            Passed to :meth:`plot`.

        Returns
        -------
        display : PrivacyUtilityDisplay
        """
        from .study import NON_PRIVATE

        records = table.to_dict("records") if hasattr(table, "to_dict") else list(table)
        ok = [r for r in records if r["status"] == "ok"]
        mine = [r for r in ok if r["method"] == method]
        if not mine:
            raise ValueError(f"the table has no successful row of method {method!r}.")
        epsilons = np.array(sorted({float(r["epsilon"]) for r in mine}))
        by_eps = [[r["score"] for r in mine if float(r["epsilon"]) == e] for e in epsilons]
        reference = [r["score"] for r in ok if r["method"] == NON_PRIVATE]
        disp = cls(
            epsilons,
            np.array([np.mean(s) for s in by_eps]),
            scores_std=np.array([np.std(s) for s in by_eps]) if max(map(len, by_eps)) > 1 else None,
            name=method,
            baseline=float(np.mean(reference)) if baseline and reference else None,
            score_name=score_name,
        )
        return disp.plot(ax=ax, **plot_kwargs) if plot else disp

    @classmethod
    def from_estimator(
        cls,
        estimator: BaseEstimator,
        X: ArrayLike,
        y: ArrayLike,
        X_test: ArrayLike,
        y_test: ArrayLike,
        *,
        epsilons: ArrayLike,
        scoring: str | Callable | None = None,
        n_repeats: int = 1,
        baseline_estimator: BaseEstimator | None = None,
        name: str | None = None,
        ax: Axes | None = None,
        plot: bool = True,
        **plot_kwargs: Any,
    ) -> PrivacyUtilityDisplay:
        """Fit a clone of a label-DP estimator at each epsilon and score it.

        Parameters
        ----------
        estimator : LabelDPRegressor or LabelDPClassifier
            Unfitted label-DP estimator; only its ``epsilon`` is changed.
            Every fit is a release charged to its accountant (if any).
        X, y : array-like
            Training features and private labels.
        X_test, y_test : array-like
            Held-out data scored with true labels: a simulation, not
            something to release.
        epsilons : array-like of float
            Budgets to try.
        scoring : str or callable, default=None
            scikit-learn scoring; None uses the estimator's ``score``.
        n_repeats : int, default=1
            Fits per epsilon (fresh noise each); the band is their std.
        baseline_estimator : estimator, default=None
            Non-private model fitted on the true labels for a reference line.
        name : str, default=None
            Legend label; defaults to the estimator's mechanism.
        ax : matplotlib Axes, default=None
            Axes to draw on.
        plot : bool, default=True
            Whether to draw.
        **plot_kwargs
            Passed to :meth:`plot`.

        Returns
        -------
        display : PrivacyUtilityDisplay
        """
        epsilons = np.asarray(epsilons, dtype=float).ravel()
        if epsilons.size == 0 or not np.all(np.isfinite(epsilons)) or np.any(epsilons <= 0):
            raise ValueError("epsilons must be a non-empty list of positive finite numbers.")
        if int(n_repeats) < 1:
            raise ValueError(f"n_repeats must be at least 1; got {n_repeats}.")
        epsilons = np.sort(epsilons)
        scorer = check_scoring(estimator, scoring=scoring)
        scores = np.empty((epsilons.size, int(n_repeats)))
        for i, eps in enumerate(epsilons):
            for r in range(int(n_repeats)):
                fitted = clone(estimator).set_params(epsilon=float(eps)).fit(X, y)
                scores[i, r] = scorer(fitted, X_test, y_test)
        baseline = None
        if baseline_estimator is not None:
            base = clone(baseline_estimator).fit(X, y)
            baseline = check_scoring(base, scoring=scoring)(base, X_test, y_test)
        score_name = scoring if isinstance(scoring, str) else "score"
        disp = cls(
            epsilons,
            scores.mean(axis=1),
            scores_std=scores.std(axis=1) if n_repeats > 1 else None,
            name=name or str(getattr(estimator, "mechanism", type(estimator).__name__)),
            baseline=baseline,
            score_name=score_name,
        )
        return disp.plot(ax=ax, **plot_kwargs) if plot else disp
