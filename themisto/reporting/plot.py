"""The report as a PNG: the paired differences first (bits per byte, then the generative headline), then each metric.

The title names the split(s), the number of examples and the build. Every
panel shows one bar per model and task with its 95% CI; the intervals
resample whole trajectories where the samples name them (the wider, honest
ones), else examples. A marker sits on every mean, so a score or difference of
exactly 0 is visible rather than a missing bar. Paired panels write each
difference's p-value (trajectory sign flips where known) beside it, with a
``*`` where p < 0.05. The majority and heuristic baselines, where the runs
include them, are drawn as reference lines over each task rather than as
bars, and the determinism ceiling over the exact-match panels. One legend
names the models and the lines.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from themisto.exceptions import InputError
from themisto.reporting.analysis import ALL_EXAMPLES, PairedComparison, Report
from themisto.reporting.samples import is_likelihood_task
from themisto.reporting.stats import Interval
from themisto.vocabulary import (
    BINARY_METRICS,
    BPB_METRIC,
    BPB_SUFFIX,
    GREEDY_METRIC,
    HEURISTIC_BASELINE,
    MAJORITY_BASELINE,
)

if TYPE_CHECKING:
    from matplotlib.artist import Artist
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

LineStyle = Literal["--", "-.", ":"]
# The generative metric of the second paired panel, when the runs have it.
_HEADLINE_METRIC = "exact_match_norm"
# Baselines shown as reference lines (floors), with their line style.
_REFERENCE_LINES: dict[str, tuple[LineStyle, str]] = {
    MAJORITY_BASELINE: ("--", "majority floor"),
    HEURISTIC_BASELINE: ("-.", "heuristic"),
}
_LIKELIHOOD_METRICS = (BPB_METRIC, GREEDY_METRIC)
# The metrics the determinism ceiling bounds.
_CEILING_METRICS = BINARY_METRICS
SIGNIFICANCE = 0.05
# Three panels a row beyond four; a build location longer than this is shortened to its last parts.
_COLUMNS = {True: 2, False: 3}
_BUILD_CHARS = 60

Key = tuple[str, str]  # (model, group)


def _base_model(model: str) -> str:
    """A model's name without the ``(folder)`` the report adds when one name ran in two folders."""
    return model.split(" (", 1)[0]


def _short_task(task: str) -> str:
    """A task's name without the common prefix, for tick labels."""
    return task.removeprefix("themisto_")


def _bars(
    ax: Axes,
    groups: list[str],
    models: list[str],
    intervals: dict[Key, Interval],
    signed: bool,
    p_values: dict[Key, float] | None = None,
) -> None:
    """One bar per model in each group, with CI whiskers, a marker on the mean and, if given, the p-value."""
    # Bars only for the models this panel has (the others leave no gap); colours stay those of the whole figure.
    present = [model for model in models if any((model, group) in intervals for group in groups)]
    width = 0.8 / max(len(present), 1)
    for slot, model in enumerate(present):
        m = models.index(model)
        xs, means, below, above, keys = [], [], [], [], []
        for g, group in enumerate(groups):
            interval = intervals.get((model, group))
            if interval is None:
                continue
            xs.append(g - 0.4 + width * (slot + 0.5))
            means.append(interval.estimate)
            below.append(interval.estimate - interval.low)
            above.append(interval.high - interval.estimate)
            keys.append((model, group))
        color = f"C{m}"
        ax.bar(xs, means, width, color=color, alpha=0.6, edgecolor=color, linewidth=1.2, label=model)
        # Not clipped: a diamond on a mean of exactly 0 shows whole on the axis line.
        ax.errorbar(
            xs, means, yerr=[below, above], fmt="D", color=color, markeredgecolor="black", capsize=3, clip_on=False
        )
        if p_values is not None:
            for x, key in zip(xs, keys):
                _mark_significance(ax, x, intervals[key], p_values.get(key))
    ax.set_xticks(range(len(groups)), [_short_task(g) for g in groups], rotation=25, ha="right", fontsize=8)
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.grid(axis="y", alpha=0.3)


def _mark_significance(ax: Axes, x: float, interval: Interval, p: float | None) -> None:
    """``p=…*`` (the star where p < 0.05) beyond the whisker's end that points away from 0."""
    if p is None:
        return
    significant = p < SIGNIFICANCE
    below = interval.estimate < 0
    ax.annotate(
        f"p={p:.2g}{'*' if significant else ''}",
        (x, interval.low if below else interval.high),
        xytext=(0, -3 if below else 3),
        textcoords="offset points",
        ha="center",
        va="top" if below else "bottom",
        fontsize=7,
        fontweight="bold" if significant else "normal",
        annotation_clip=False,
    )


def _symmetric(ax: Axes) -> None:
    """A y range symmetric around 0 with room for the p-values, and the 0 line."""
    ax.axhline(0.0, color="black", linewidth=0.8)
    low, high = ax.get_ylim()
    span = max(abs(low), abs(high), 0.05) * 1.25  # the p-values sit beyond the whiskers
    ax.set_ylim(-span, span)


def _reference_line(ax: Axes, groups: list[str], values: dict[str, float], style: LineStyle, label: str) -> None:
    """A short horizontal line over each group that has a value (a baseline's score, a ceiling)."""
    for g, group in enumerate(groups):
        if group in values:
            ax.hlines(values[group], g - 0.45, g + 0.45, colors="black", linestyles=style, linewidth=1.3, label=label)


def _paired_panel(ax: Axes, comparisons: list[PairedComparison], models: list[str], clustered: bool) -> None:
    """Δ per task and contrast, one bar per model, with the p-value to quote."""
    group_of = {id(c): f"{_short_task(c.task).removesuffix(BPB_SUFFIX)}\nvs {c.reference}" for c in comparisons}
    groups = list(dict.fromkeys(group_of.values()))
    intervals = {(c.model, group_of[id(c)]): c.quoted_difference if clustered else c.difference for c in comparisons}
    p_values = {(c.model, group_of[id(c)]): c.quoted_p_value if clustered else c.p_value for c in comparisons}
    _bars(ax, groups, models, intervals, signed=True, p_values=p_values)
    _symmetric(ax)


def _title(report: Report) -> str:
    """Split(s), n and build, for the figure's title."""
    sizes = sorted({s.n for s in report.summaries})
    n = f"{sizes[0]}" if len(sizes) == 1 else f"{sizes[0]}–{sizes[-1]}"
    builds = []
    for build in report.builds:
        parts = Path(build).parts
        builds.append(build if len(build) <= _BUILD_CHARS else "…/" + "/".join(parts[-2:]))
    return (
        f"Themisto · split {', '.join(report.splits) or 'not logged'} · n = {n} examples per task"
        f" · build {', '.join(builds) or 'not logged'}"
    )


def report_figure(report: Report) -> Figure:
    """The figure: the paired differences per model and task, then one panel per metric."""
    from matplotlib.figure import Figure  # heavy; no pyplot, so no global backend state

    every_model = list(dict.fromkeys(s.model for s in report.summaries))
    # The floors become lines; they stay bars only where no other model was run.
    references = {m for m in every_model if _base_model(m) in _REFERENCE_LINES}
    models = [m for m in every_model if m not in references] or every_model
    lines_of = references if models != every_model else set()
    tasks = list(dict.fromkeys(s.task for s in report.summaries))
    clustered = all(s.clustered is not None for s in report.summaries)
    overall = [c for c in report.comparisons if c.stratum == ALL_EXAMPLES and c.model in models]
    paired = [
        (metric, [c for c in overall if c.metric == metric and is_likelihood_task(c.task) == likelihood])
        for metric, likelihood in ((BPB_METRIC, True), (_HEADLINE_METRIC, False))
    ]
    paired = [(metric, rows) for metric, rows in paired if rows]
    # The likelihood metrics first, beside the headline; then the generative ones as the report lists them.
    metrics = sorted(report.metrics, key=lambda m: m not in _LIKELIHOOD_METRICS)
    panels = len(metrics) + len(paired)
    columns = min(panels, _COLUMNS[panels <= 4])
    rows = -(-panels // columns)
    widest = max(len({s.task for s in report.summaries if s.metric == m}) for m in metrics)
    figure = Figure(figsize=((0.9 * max(widest, 4) + 2.5) * columns, 4.4 * rows + 1.3))
    axes = list(figure.subplots(rows, columns, squeeze=False).ravel())
    for ax in axes[panels:]:
        ax.set_visible(False)
    for metric, comparisons in paired:
        ax = axes.pop(0)
        _paired_panel(ax, comparisons, models, clustered)
        unit = "bits/byte" if metric == BPB_METRIC else metric
        better = "< 0: runtime helped" if metric == BPB_METRIC else "> 0: runtime helped"
        ax.set_title(f"Δ {unit}: runtime − plain, runtime − placebo", fontweight="bold", fontsize=10)
        ax.set_xlabel("task and arm subtracted (paired on the same examples)")
        ax.set_ylabel(f"Δ {unit} ({better})")
    for ax, metric in zip(axes, metrics):
        summaries = [s for s in report.summaries if s.metric == metric]
        intervals = {(s.model, s.task): (s.clustered or s.interval) if clustered else s.interval for s in summaries}
        # Only the tasks that have the metric (exec outcomes exist for next-cell prediction only).
        shown = [task for task in tasks if any((model, task) in intervals for model in every_model)]
        _bars(ax, shown, models, intervals, signed=False)
        for model in sorted(lines_of):
            style, label = _REFERENCE_LINES[_base_model(model)]
            values = {s.task: s.interval.estimate for s in summaries if s.model == model}
            _reference_line(ax, shown, values, style, label)
        if metric in _CEILING_METRICS:
            ceilings = {c.task: c.ceiling for c in report.ceilings}
            _reference_line(ax, shown, ceilings, ":", "determinism ceiling")
        ax.set_ylim(0.0, max(ax.get_ylim()[1], 0.05))
        strict = " (strict)" if metric == "exact_match" else ""
        ax.set_title(f"{metric}{strict}", fontsize=10)
        ax.set_xlabel("task")
        ax.set_ylabel(f"mean {metric}" + (" (lower is better)" if metric == BPB_METRIC else ""))
    figure.suptitle(_title(report), fontsize=11, fontweight="bold", y=0.995)
    resampled = "whole trajectories" if clustered else "examples"
    figure.text(
        0.5,
        0.01,
        f"Bars and diamonds: means; whiskers: 95% bootstrap CIs resampling {resampled} "
        f"({report.resamples:,} resamples). Δ: runtime arm minus the plain or placebo arm on the same examples; "
        f"p: sign-flip test{' of whole trajectories' if clustered else ''}, * p < {SIGNIFICANCE}.",
        ha="center",
        fontsize=9,
    )
    handles: dict[str, Artist] = {}  # one per model and line, from whichever panel shows it
    for ax in figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    figure.legend(
        list(handles.values()), list(handles), loc="upper center", ncol=min(len(handles), 6), fontsize=9,
        frameon=False, bbox_to_anchor=(0.5, 1 - 0.35 / figure.get_figheight()),
    )  # fmt: skip
    height = figure.get_figheight()
    figure.tight_layout(rect=(0, 0.35 / height, 1, 1 - 0.85 / height))
    return figure


def plot_report(report: Report, path: Path) -> None:
    """Write :func:`report_figure` as a PNG."""
    try:
        report_figure(report).savefig(path, dpi=110, format="png")
    except OSError as exc:
        raise InputError(f"cannot write plot {path}: {exc}") from None
