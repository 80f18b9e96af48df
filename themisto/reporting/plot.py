"""The report as a PNG: the paired runtime-minus-no-runtime difference first, then each metric's means.

Every panel shows one bar per model and task with its 95% CI; the intervals
resample whole trajectories where the samples name them (the wider, honest
ones), else examples. A marker sits on every mean, so a score or difference of
exactly 0 is visible rather than a missing bar. One legend names the models.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from themisto.exceptions import InputError
from themisto.reporting.analysis import Report
from themisto.reporting.stats import Interval

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# The near-duplicate of exact_match_norm (they differ only in whitespace) is left out of the plot.
_SHOWN_INSTEAD = {"exact_match": "exact_match_norm"}
# The metric of the headline panel, when the runs have it.
_HEADLINE_METRIC = "exact_match_norm"
# Two panels a row while they fit in four, three beyond (the exec metrics add three).
_COLUMNS = {True: 2, False: 3}


def _bars(
    ax: Axes, groups: list[str], models: list[str], intervals: dict[tuple[str, str], Interval], signed: bool
) -> None:
    """One bar per model in each group, with CI whiskers and a marker on the mean."""
    width = 0.8 / len(models)
    for m, model in enumerate(models):
        xs, means, below, above = [], [], [], []
        for g, group in enumerate(groups):
            interval = intervals.get((model, group))
            if interval is None:
                continue
            xs.append(g - 0.4 + width * (m + 0.5))
            means.append(interval.estimate)
            below.append(interval.estimate - interval.low)
            above.append(interval.high - interval.estimate)
        color = f"C{m}"
        ax.bar(xs, means, width, color=color, alpha=0.6, edgecolor=color, linewidth=1.2, label=model)
        # Not clipped: a diamond on a mean of exactly 0 shows whole on the axis line.
        ax.errorbar(
            xs, means, yerr=[below, above], fmt="D", color=color, markeredgecolor="black", capsize=3, clip_on=False
        )
    ax.set_xticks(range(len(groups)), groups, rotation=25, ha="right", fontsize=8)
    ax.set_xlim(-0.5, len(groups) - 0.5)
    if signed:
        ax.axhline(0.0, color="black", linewidth=0.8)
        low, high = ax.get_ylim()
        span = max(abs(low), abs(high), 0.05)
        ax.set_ylim(-span, span)
    else:
        ax.set_ylim(0.0, max(ax.get_ylim()[1], 0.05))
    ax.grid(axis="y", alpha=0.3)


def report_figure(report: Report) -> Figure:
    """The figure: the paired difference per model and task pair, then one panel per metric."""
    from matplotlib.figure import Figure  # heavy; no pyplot, so no global backend state

    models = list(dict.fromkeys(s.model for s in report.summaries))
    tasks = list(dict.fromkeys(s.task for s in report.summaries))
    clustered = all(s.clustered is not None for s in report.summaries)
    metrics = [m for m in report.metrics if _SHOWN_INSTEAD.get(m) not in report.metrics]
    headline = _HEADLINE_METRIC if _HEADLINE_METRIC in metrics else metrics[0]
    comparisons = [c for c in report.comparisons if c.metric == headline]
    panels = len(metrics) + (1 if comparisons else 0)
    columns = min(panels, _COLUMNS[panels <= 4])
    rows = -(-panels // columns)
    figure = Figure(figsize=((1.1 * len(tasks) + 2.5) * columns, 4.2 * rows + 1.0))
    axes = list(figure.subplots(rows, columns, squeeze=False).ravel())
    for ax in axes[panels:]:
        ax.set_visible(False)
    if comparisons:
        ax = axes.pop(0)
        pairs = list(dict.fromkeys(c.task for c in comparisons))
        differences = {
            (c.model, c.task): (c.clustered_difference or c.difference) if clustered else c.difference
            for c in comparisons
        }
        _bars(ax, pairs, models, differences, signed=True)
        ax.set_title(f"runtime − no runtime: {headline}", fontweight="bold")
        ax.set_xlabel("task (paired on the same examples)")
        ax.set_ylabel(f"Δ {headline}")
    for ax, metric in zip(axes, metrics):
        intervals = {
            (s.model, s.task): (s.clustered or s.interval) if clustered else s.interval
            for s in report.summaries
            if s.metric == metric
        }
        # Only the tasks that have the metric (exec outcomes exist for next-cell prediction only).
        shown = [task for task in tasks if any((model, task) in intervals for model in models)]
        _bars(ax, shown, models, intervals, signed=False)
        ax.set_title(metric)
        ax.set_xlabel("task")
        ax.set_ylabel(f"mean {metric}")
    resampled = "whole trajectories" if clustered else "examples"
    figure.text(
        0.5,
        0.01,
        f"Bars and diamonds: means; whiskers: 95% bootstrap CIs resampling {resampled} "
        f"({report.resamples:,} resamples). Δ: runtime minus no runtime on the same examples.",
        ha="center",
        fontsize=9,
    )
    handles: dict[str, Artist] = {}  # one per model, from whichever panel shows it
    for ax in figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    figure.legend(
        list(handles.values()), list(handles), loc="upper center", ncol=min(len(models), 5), fontsize=9, frameon=False
    )
    height = figure.get_figheight()
    figure.tight_layout(rect=(0, 0.35 / height, 1, 1 - 0.45 / height))
    return figure


def plot_report(report: Report, path: Path) -> None:
    """Write :func:`report_figure` as a PNG."""
    try:
        report_figure(report).savefig(path, dpi=110, format="png")
    except OSError as exc:
        raise InputError(f"cannot write plot {path}: {exc}") from None
