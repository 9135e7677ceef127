"""Figures of the papers' diagnostics (matplotlib, Agg canvas, no pyplot state).

* :func:`distance_histogram_figure` -- LMCL Fig. 2 / Fig. 5: pairwise distance histogram with
  the margin ``(d+, d-)`` shaded; same-class vs different-class overlay when labels are given.
* :func:`similarity_profile_figure` -- Wang & Liu Fig. 8: positive vs top-10 negative
  similarities (one profile as box plots, or several, e.g. per temperature, as mean curves).
* :func:`loss_curve_figure`, :func:`curve_figure` -- training curves and any metric vs x.
* :func:`band_figure` -- ``ctk compare --plot`` / ``--curves``: one line per method (mean over
  seeds) with its confidence band, against a swept key or the training step.

Every function returns a :class:`matplotlib.figure.Figure` (save it with ``fig.savefig`` or
``mlflow.log_figure``); nothing is shown and no global pyplot figure is created.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

if TYPE_CHECKING:  # torch only where a figure is drawn from tensors: ctk compare --plot needs none
    from torch import Tensor

__all__ = ["distance_histogram_figure", "similarity_profile_figure", "loss_curve_figure", "curve_figure", "band_figure"]


def _figure(width: float = 6.0, height: float = 4.0) -> tuple[Figure, Any]:
    fig = Figure(figsize=(width, height), layout="constrained")
    FigureCanvasAgg(fig)
    return fig, fig.add_subplot()


def _bars(ax: Any, counts: np.ndarray, edges: np.ndarray, label: str, color: str) -> None:
    total = max(1, int(counts.sum()))
    ax.stairs(counts / total, edges, fill=True, alpha=0.55, color=color, label=label)


def distance_histogram_figure(
    f: Tensor,
    labels: Tensor | None = None,
    bins: int = 50,
    d_plus: float = 0.1,
    d_minus: float = 0.5,
    title: str | None = None,
) -> Figure:
    """LMCL Fig. 2 style histogram of ``D_ij = (1 - f_i.f_j)/2`` over pairs i < j.

    The y axis is the fraction of pairs per bin (each group normalised on its own when
    ``labels`` split the pairs into same-class and different-class). Dashed lines mark
    ``d_plus`` and ``d_minus`` and the margin between them is shaded; the legend gives the
    share of pairs inside the margin.
    """
    from toolkit.evaluation import metrics

    fig, ax = _figure()
    if labels is None:
        h = metrics.distance_histogram(f, bins=bins, d_plus=d_plus, d_minus=d_minus)
        _bars(ax, h["counts"], h["edges"], f"all pairs ({h['num_pairs']})", "tab:blue")
        occupancy = f"margin occupancy {h['margin_occupancy']:.3f}"
    else:
        h = metrics.class_distance_histograms(f, labels, bins=bins, d_plus=d_plus, d_minus=d_minus)
        _bars(ax, h["same"], h["edges"], f"same class ({h['num_same']})", "tab:green")
        _bars(ax, h["different"], h["edges"], f"different class ({h['num_different']})", "tab:red")
        occupancy = (
            f"margin occupancy {h['margin_occupancy']:.3f} (same "
            f"{h['same_margin_occupancy']:.3f}, different "
            f"{h['different_margin_occupancy']:.3f})"
        )
    ax.axvspan(d_plus, d_minus, color="0.85", zorder=0, label=occupancy)
    ax.axvline(d_plus, color="k", linestyle="--", linewidth=1)
    ax.axvline(d_minus, color="k", linestyle="--", linewidth=1)
    ax.text(d_plus, 1.0, " δ⁺", transform=ax.get_xaxis_transform(), va="top")
    ax.text(d_minus, 1.0, " δ⁻", transform=ax.get_xaxis_transform(), va="top")
    ax.set_xlim(0.0, 1.0)
    ax.set_xlabel("pairwise distance D = (1 − f·f′)/2")
    ax.set_ylabel("fraction of pairs")
    ax.set_title(title or "Distance histogram")
    ax.legend(loc="best", fontsize="small")
    return fig


def _is_profile(p: Any) -> bool:
    return isinstance(p, Mapping) and "positive" in p and "negatives" in p


def similarity_profile_figure(profiles: Mapping[str, Any], title: str | None = None) -> Figure:
    """Wang & Liu Fig. 8: the positive similarity ('pos') and the k-th nearest negatives
    ('n1' .. 'n10').

    ``profiles`` is one result of :func:`toolkit.evaluation.metrics.similarity_profile` (drawn as box
    plots of the per-anchor values) or a mapping ``label -> result`` (e.g. one per temperature;
    drawn as mean curves with a one-standard-deviation band).
    """
    fig, ax = _figure()
    if _is_profile(profiles):
        pos = np.asarray(profiles["positive_values"])
        negs = np.asarray(profiles["negative_values"])
        data = [pos] + [negs[:, k] for k in range(negs.shape[1])]
        names = ["pos"] + [f"n{k + 1}" for k in range(negs.shape[1])]
        ax.boxplot(data, showfliers=False)
        ax.set_xticks(range(1, len(names) + 1), names)
    else:
        if not profiles:
            raise ValueError("profiles is empty; expected a similarity_profile result or a mapping label -> result")
        for label, prof in profiles.items():
            if not _is_profile(prof):
                raise ValueError(f"profiles[{label!r}] is not a similarity_profile result")
            mean = np.concatenate([[prof["positive"]], np.asarray(prof["negatives"])])
            std = np.concatenate([[prof["positive_std"]], np.asarray(prof["negatives_std"])])
            x = np.arange(len(mean))
            ax.plot(x, mean, marker="o", label=str(label))
            ax.fill_between(x, mean - std, mean + std, alpha=0.2)
        ax.set_xticks(x, ["pos"] + [f"n{k}" for k in range(1, len(x))])
        ax.legend(fontsize="small")
    ax.set_ylabel("similarity")
    ax.set_title(title or "Positive vs nearest-negative similarities")
    return fig


def _finish_axes(
    ax: Any, xlabel: str, ylabel: str, title: str | None, logx: bool = False, logy: bool = False, legend: bool = True
) -> None:
    """Scales, labels, title, legend and grid of a line plot."""
    if logx:
        ax.set_xscale("log")
    if logy:
        ax.set_yscale("log")
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    if title:
        ax.set_title(title)
    if legend:
        ax.legend(fontsize="small")
    ax.grid(alpha=0.3)


def curve_figure(
    x: Sequence[float],
    ys: Mapping[str, Sequence[float]],
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    logx: bool = False,
    logy: bool = False,
) -> Figure:
    """Generic line plot: one curve per ``ys`` entry against the shared ``x``."""
    if not ys:
        raise ValueError("ys is empty; expected a mapping label -> values")
    xs = np.asarray(x, dtype=float)
    fig, ax = _figure()
    for label, values in ys.items():
        v = np.asarray(values, dtype=float)
        if v.shape != xs.shape:
            raise ValueError(f"ys[{label!r}] has {v.shape[0] if v.ndim else 0} values, x has {xs.shape[0]}")
        ax.plot(xs, v, marker="o" if len(xs) <= 20 else None, label=str(label))
    _finish_axes(ax, xlabel, ylabel, title, logx, logy, legend=len(ys) > 1)
    return fig


def loss_curve_figure(
    steps: Sequence[int],
    values: Sequence[float],
    label: str = "loss",
    title: str | None = None,
    smooth: int | None = None,
) -> Figure:
    """Loss against the optimisation step; ``smooth=k`` adds a k-step moving average."""
    ys = {label: values}
    if smooth is not None:
        if isinstance(smooth, bool) or not isinstance(smooth, int) or smooth < 1:
            raise ValueError(f"smooth must be an integer >= 1, got {smooth!r}")
        v = np.asarray(values, dtype=float)
        kernel = np.ones(min(smooth, len(v))) / min(smooth, len(v))
        pad = np.concatenate([np.full(len(kernel) - 1, v[0]), v]) if len(v) else v
        ys[f"{label} ({smooth}-step mean)"] = np.convolve(pad, kernel, mode="valid")
    return curve_figure(steps, ys, "step", label, title=title or "Training loss")


def band_figure(
    series: Mapping[str, Sequence[tuple[float, Any]]],
    xlabel: str,
    ylabel: str,
    title: str | None = None,
    logx: bool = False,
) -> Figure:
    """One line per ``series`` entry through the means of its ``(x, summary)`` points (a
    :class:`toolkit.studies.stats.Summary`), with the shaded confidence interval where the point has
    one (n >= 2); a point without an interval has no band, never a made-up one."""
    if not series:
        raise ValueError("series is empty; expected a mapping label -> [(x, summary)]")
    fig, ax = _figure(7.0, 4.5)
    for label, points in series.items():
        x = np.array([p[0] for p in points], dtype=float)
        mean = np.array([p[1].mean for p in points], dtype=float)
        (line,) = ax.plot(x, mean, marker="o" if len(x) <= 20 else None, label=str(label))
        low = np.array([np.nan if p[1].low is None else p[1].low for p in points], dtype=float)
        high = np.array([np.nan if p[1].high is None else p[1].high for p in points], dtype=float)
        if np.isfinite(low).any():
            ax.fill_between(x, low, high, where=np.isfinite(low), alpha=0.2, color=line.get_color(), linewidth=0)
    _finish_axes(ax, xlabel, ylabel, title, logx, legend=True)
    return fig


def time_to_accuracy_figure(
    series: Mapping[str, Sequence[tuple[float, float]]],
    title: str | None = None,
    max_lines: int = 6,
    baselines: Mapping[str, float] | None = None,
    ylabel: str = "metric",
) -> Figure:
    """Each metric against the training wall time at which it was measured (the first
    ``max_lines`` metrics), so two recipes compare by how fast they learn; ``baselines`` (label
    -> value, e.g. a random policy's return) are dashed horizontal lines. One metric is one
    line; several get a panel each with its own y axis (a kNN accuracy near 80% and a
    neighbour top-1 near 2% would flatten each other on one axis), side by side."""
    names = list(series)[:max_lines]
    single = len(names) <= 1
    if single:
        fig, ax = _figure()
        axes = [ax]
    else:
        cols = min(3, len(names))
        rows = -(-len(names) // cols)
        fig = Figure(figsize=(4.2 * cols, 3.4 * rows), layout="constrained")
        FigureCanvasAgg(fig)
        axes = [fig.add_subplot(rows, cols, i + 1) for i in range(len(names))]
    for ax, name in zip(axes, names):
        points = sorted(series[name])
        ax.plot([p[0] for p in points], [p[1] for p in points], marker="o", label=str(name))
        for label, value in (baselines or {}).items():
            ax.axhline(value, ls="--", color="grey", label=str(label))
        if not single:
            _finish_axes(ax, "training wall time (s)", str(name), None, legend=bool(baselines))
    if single:
        _finish_axes(axes[0], "training wall time (s)", ylabel, title or "Time to accuracy", legend=True)
    else:
        fig.suptitle(title or "Time to accuracy")
    return fig
