"""The report as a figure (PNG, PDF or SVG, as the file's suffix says): the paired differences first, then each metric.

The title names the split(s) and the build; every bar is labelled with its
number of examples (``n=2`` beside ``n=200`` shows what a model scored on a
``--limit`` run was measured on). Every
panel shows one bar per model and task with its 95% CI; the intervals
resample whole trajectories where the samples name them (the wider, honest
ones), else examples. A marker sits on every mean, so a score or difference of
exactly 0 is visible rather than a missing bar. Paired panels write each
difference's p-value (trajectory sign flips where known) beside it, with a
``*`` where p < 0.05, in a strip of their own at the panel's edge so no label covers a marker. The
majority and heuristic baselines, where the runs include them, are drawn as reference lines over each
task rather than as bars, and the determinism ceiling over the exact-match panels. One legend names
the models and the lines; it takes the grid's spare cell where there is one.

So that figures of several reports can be set side by side, a model keeps its colour in every report
(a baseline has its own; any other model's follows from its name) and tasks and arms keep one order:
output before next cell; plain, runtime, placebo.
"""

from __future__ import annotations

import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from themisto.exceptions import InputError
from themisto.reporting.analysis import ALL_EXAMPLES, MetricSummary, PairedComparison, Report
from themisto.reporting.samples import PLACEBO, PLAIN, RUNTIME, is_likelihood_task, task_arm
from themisto.reporting.stats import Interval
from themisto.vocabulary import (
    BASELINES,
    BINARY_METRICS,
    BPB_METRIC,
    BPB_SUFFIX,
    COMPRESSION_BASELINE,
    GREEDY_METRIC,
    HEURISTIC_BASELINE,
    MAJORITY_BASELINE,
    TASK_PAIRS,
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
# The axis range over the data's, so the strips at the edges hold the rotated labels: n and p (paired
# panels: p above, n below), n alone (panels of means, above).
_LABEL_ROOM = {True: 1.7, False: 1.18}
# Three panels a row beyond four; a build location longer than this is shortened to its last parts.
_BUILD_CHARS = 60
# The file types a figure is written as, by suffix.
PLOT_FORMATS = {".png": "png", ".pdf": "pdf", ".svg": "svg"}
# 38 distinguishable colours (tab20 without its greys, then tab20b): the baselines take the first ones, in a
# fixed order; other models the rest, by a hash of the name. A model whose colour is taken, or whose hue is
# within _HUE_APART of a colour of the figure, is moved on to the next colour of a hue far enough from every one
# given (which would give it another colour in a report without the first): two shades of one hue read as one.
_PALETTES = ("tab20", "tab20b")
_HUE_APART = 20 / 360  # of the colour circle
_GREYS = (14, 15)  # tab20's two greys
_FIXED_COLOURS = (*BASELINES, COMPRESSION_BASELINE)
_ARM_ORDER = (PLAIN, RUNTIME, PLACEBO)
# How a task family reads on an axis (the plain tasks of TASK_PAIRS, in their order).
_FAMILY_LABELS = {plain: plain.removeprefix("themisto_").replace("_", " ") for plain, _ in TASK_PAIRS}

Key = tuple[str, str]  # (model, group)


def _base_model(model: str) -> str:
    """A model's name without the ``(folder)`` the report adds when one name ran in two folders."""
    return model.split(" (", 1)[0]


def _family(task: str) -> str:
    """A task's family without the likelihood suffix: ``themisto_output_placebo_bpb`` -> ``themisto_output``."""
    return task_arm(task)[0].removesuffix(BPB_SUFFIX)


def task_label(task: str) -> str:
    """How a task reads on an axis: its family and arm (``output\nruntime``), not its lm-eval name."""
    family = _family(task)
    return f"{_FAMILY_LABELS.get(family, family.removeprefix('themisto_'))}\n{task_arm(task)[1]}"


def task_order(task: str) -> tuple[int, str, int]:
    """The one order of tasks in every figure: output before next cell, then plain, runtime, placebo."""
    family = _family(task)
    families = list(_FAMILY_LABELS)
    known = families.index(family) if family in families else len(families)
    arm = task_arm(task)[1]
    return known, family, _ARM_ORDER.index(arm) if arm in _ARM_ORDER else len(_ARM_ORDER)


def model_colours(models: list[str]) -> dict[str, str]:
    """A colour per model that stays the same in every report: fixed for the baselines, from the name for others.

    Two models of one figure never share a colour, nor (while the palette has one left) a hue within
    ``_HUE_APART`` of each other: such a model gets the next colour whose hue is apart from every one given.
    """
    import colorsys

    from matplotlib import colormaps

    # the dark shades first, then the light ones, so the baselines' are far apart; no greys: the
    # reference lines are black and grey
    order = (*range(0, 20, 2), *range(1, 20, 2))
    palette = [colormaps[_PALETTES[0]](i) for i in order if i not in _GREYS]
    palette += [colormaps[_PALETTES[1]](i) for i in order]
    hexes = ["#{:02x}{:02x}{:02x}".format(*(round(255 * c) for c in colour[:3])) for colour in palette]
    hues = [colorsys.rgb_to_hsv(*colour[:3])[0] for colour in palette]
    free = len(hexes) - len(_FIXED_COLOURS)
    colours: dict[str, str] = {}
    given: list[float] = []  # the hues of the colours given so far

    def apart(slot: int) -> bool:
        return all(min(abs(hues[slot] - hue), 1 - abs(hues[slot] - hue)) >= _HUE_APART for hue in given)

    for model in sorted(models, key=lambda m: (_base_model(m) not in _FIXED_COLOURS, m)):
        base = _base_model(model)
        if base in _FIXED_COLOURS:
            slot = _FIXED_COLOURS.index(base)
        else:
            start = zlib.crc32(base.encode("utf-8")) % free
            candidates = [len(_FIXED_COLOURS) + (start + k) % free for k in range(free)]
            # the first colour of a hue apart from every one given, else the first colour not given, else the hashed
            unused = [c for c in candidates if hexes[c] not in colours.values()] or candidates[:1]
            slot = next((c for c in unused if apart(c)), unused[0])
        colours[model] = hexes[slot]
        given.append(hues[slot])
    return colours


def _bars(
    ax: Axes,
    groups: list[str],
    labels: list[str],
    colours: dict[str, str],
    intervals: dict[Key, Interval],
    sizes: dict[Key, int],
    p_values: dict[Key, float] | None = None,
) -> None:
    """One bar per model in each group, with CI whiskers, a marker on the mean, its n and, if given, its p-value.

    The labels stand in strips at the panel's edges (n at the bottom, p at the top of a paired panel; n at the
    top of a panel of means), rotated, so they never cover a marker or each other.
    """
    # Bars only for the models this panel has (the others leave no gap); colours are the models' own.
    present = [model for model in colours if any((model, group) in intervals for group in groups)]
    width = 0.8 / max(len(present), 1)
    for slot, model in enumerate(present):
        xs, means, below, above, keys = [], [], [], [], []
        for g, group in enumerate(groups):
            interval = intervals.get((model, group))
            if interval is None:
                continue
            xs.append(g - 0.4 + width * (slot + 0.5))
            means.append(interval.estimate)
            # an interval of whole trajectories need not hold the mean of the examples: no negative whisker
            below.append(max(interval.estimate - interval.low, 0.0))
            above.append(max(interval.high - interval.estimate, 0.0))
            keys.append((model, group))
        colour = colours[model]
        ax.bar(xs, means, width, color=colour, alpha=0.6, edgecolor=colour, linewidth=1.2, label=model)
        # Not clipped: a diamond on a mean of exactly 0 shows whole on the axis line.
        ax.errorbar(
            xs, means, yerr=[below, above], fmt="D", color=colour, markeredgecolor="black", capsize=3, clip_on=False
        )
        for x, key in zip(xs, keys):
            n_at_top = p_values is None
            _edge_label(ax, x, f"n={sizes[key]}", top=n_at_top)
            if p_values is not None and key in p_values:
                p = p_values[key]
                significant = p < SIGNIFICANCE
                _edge_label(ax, x, f"p={p:.2g}{'*' if significant else ''}", top=True, bold=significant)
    ax.set_xticks(range(len(groups)), labels, fontsize=8)
    ax.set_xlim(-0.5, len(groups) - 0.5)
    ax.grid(axis="y", alpha=0.3)


def _edge_label(ax: Axes, x: float, text: str, top: bool, bold: bool = False) -> None:
    """``text`` rotated at the top or bottom edge of the panel above ``x`` (axes coordinates in y)."""
    ax.text(
        x,
        0.985 if top else 0.015,
        text,
        transform=ax.get_xaxis_transform(),
        rotation=90,
        ha="center",
        va="top" if top else "bottom",
        fontsize=6.5,
        fontweight="bold" if bold else "normal",
    )


def _headroom(ax: Axes, low: float, high: float, symmetric: bool) -> None:
    """A y range leaving the edge strips free for the labels: 0 to beyond ``high``, or symmetric around 0."""
    if symmetric:
        ax.axhline(0.0, color="black", linewidth=0.8)
        span = max(abs(low), abs(high), 0.05) * _LABEL_ROOM[True]
        ax.set_ylim(-span, span)
    else:
        ax.set_ylim(0.0, max(high, 0.05) * _LABEL_ROOM[False])


def _reference_line(ax: Axes, groups: list[str], values: dict[str, float], style: LineStyle, label: str) -> None:
    """A short horizontal line over each group that has a value (a baseline's score, a ceiling)."""
    for g, group in enumerate(groups):
        if group in values:
            ax.hlines(values[group], g - 0.45, g + 0.45, colors="black", linestyles=style, linewidth=1.3, label=label)


def _paired_panel(ax: Axes, comparisons: list[PairedComparison], colours: dict[str, str], clustered: bool) -> None:
    """Δ per task and contrast, one bar per model, with its n and the p-value to quote."""
    contrasts = sorted(
        {(c.task, c.reference) for c in comparisons},
        key=lambda pair: (task_order(pair[0]), _ARM_ORDER.index(pair[1]) if pair[1] in _ARM_ORDER else 0),
    )
    names = [f"{task}|{reference}" for task, reference in contrasts]
    labels = [f"{task_label(task).split(chr(10))[0]}\nruntime − {reference}" for task, reference in contrasts]
    intervals, p_values, sizes = {}, {}, {}
    for c in comparisons:
        key = (c.model, f"{c.task}|{c.reference}")
        intervals[key] = c.quoted_difference if clustered else c.difference
        p_values[key] = c.quoted_p_value if clustered else c.p_value
        sizes[key] = c.n
    _bars(ax, names, labels, colours, intervals, sizes, p_values=p_values)
    values = [v for i in intervals.values() for v in (i.low, i.high, i.estimate)]
    _headroom(ax, min(values), max(values), symmetric=True)


def _title(report: Report) -> str:
    """Split(s) and build, for the figure's title (each bar carries its own n)."""
    builds = []
    for build in report.builds:
        parts = Path(build).parts
        builds.append(build if len(build) <= _BUILD_CHARS else "…/" + "/".join(parts[-2:]))
    return f"Themisto · split {', '.join(report.splits) or 'not logged'} · build {', '.join(builds) or 'not logged'}"


def _grid(panels: int) -> tuple[int, int]:
    """Rows and columns for ``panels`` plus the legend: the fewest spare cells, then the squarest."""
    options = []
    for columns in (2, 3, 4):
        rows = -(-panels // columns)
        options.append((rows * columns - panels, abs(rows - columns), rows, columns))
    _, _, rows, columns = min(options)
    return rows, columns


def _all_zero(summaries: list[MetricSummary]) -> bool:
    """Whether every mean and interval end of a metric is 0: a panel of it would look empty."""
    return all(v == 0.0 for s in summaries for v in (s.interval.estimate, s.interval.low, s.interval.high))


def report_figure(report: Report) -> Figure:
    """The figure: the paired differences per model and task, then one panel per metric."""
    from matplotlib.figure import Figure  # heavy; no pyplot, so no global backend state

    every_model = list(dict.fromkeys(s.model for s in report.summaries))
    # The floors become lines; they stay bars only where no other model was run.
    references = {m for m in every_model if _base_model(m) in _REFERENCE_LINES}
    models = [m for m in every_model if m not in references] or every_model
    lines_of = references if models != every_model else set()
    colours = model_colours(models)
    colours = {model: colours[model] for model in sorted(models)}  # bars in one order: by name
    tasks = sorted({s.task for s in report.summaries}, key=task_order)
    clustered = all(s.clustered is not None for s in report.summaries)
    overall = [c for c in report.comparisons if c.stratum == ALL_EXAMPLES and c.model in models]
    paired = [
        (metric, [c for c in overall if c.metric == metric and is_likelihood_task(c.task) == likelihood])
        for metric, likelihood in ((BPB_METRIC, True), (_HEADLINE_METRIC, False))
    ]
    paired = [(metric, rows) for metric, rows in paired if rows]
    # The likelihood metrics first, beside the headline; then the generative ones as the report lists them.
    metrics = sorted(report.metrics, key=lambda m: m not in _LIKELIHOOD_METRICS)
    drawn = [s for s in report.summaries if s.model in models]
    # a metric at 0 for every model, floors included, would be a panel of markers on the axis: said in the caption
    left_out = [m for m in metrics if _all_zero([s for s in report.summaries if s.metric == m])]
    metrics = [m for m in metrics if m not in left_out and any(s.metric == m for s in drawn)]
    panels = len(metrics) + len(paired)
    rows, columns = _grid(panels + 1)  # + the legend's cell, where a row has room for it
    spare = rows * columns - panels
    widest = max([len({s.task for s in drawn if s.metric == m}) for m in metrics] or [4])
    figure = Figure(figsize=((0.9 * max(widest, 4) + 2.5) * columns, 4.6 * rows + 1.3))
    axes = list(figure.subplots(rows, columns, squeeze=False).ravel())
    for ax in axes[panels:]:
        ax.set_visible(False)
    legend_cell = axes[panels] if spare else None
    for metric, comparisons in paired:
        ax = axes.pop(0)
        _paired_panel(ax, comparisons, colours, clustered)
        unit = "bits/byte" if metric == BPB_METRIC else metric
        better = "< 0: runtime helped" if metric == BPB_METRIC else "> 0: runtime helped"
        ax.set_title(f"Δ {unit}: runtime − plain, runtime − placebo", fontweight="bold", fontsize=10)
        ax.set_xlabel("task and arm subtracted (paired on the same examples)")
        ax.set_ylabel(f"Δ {unit} ({better})")
    for ax, metric in zip(axes, metrics):
        summaries = [s for s in report.summaries if s.metric == metric]
        intervals = {(s.model, s.task): (s.clustered or s.interval) if clustered else s.interval for s in summaries}
        sizes = {(s.model, s.task): s.n for s in summaries}
        # Only the tasks that have the metric (exec outcomes exist for next-cell prediction only).
        shown = [task for task in tasks if any((model, task) in intervals for model in models)]
        _bars(ax, shown, [task_label(task) for task in shown], colours, intervals, sizes)
        highest = [v for key, i in intervals.items() if key[0] in models for v in (i.high, i.estimate)]
        for model in sorted(lines_of):
            style, label = _REFERENCE_LINES[_base_model(model)]
            values = {s.task: s.interval.estimate for s in summaries if s.model == model}
            _reference_line(ax, shown, values, style, label)
            highest += [values[task] for task in shown if task in values]
        if metric in _CEILING_METRICS:
            ceilings = {c.task: c.ceiling for c in report.ceilings}
            _reference_line(ax, shown, ceilings, ":", "determinism ceiling")
            highest += [ceilings[task] for task in shown if task in ceilings]
        _headroom(ax, 0.0, max(highest, default=0.0), symmetric=False)  # the n strip above every line
        strict = " (strict)" if metric == "exact_match" else ""
        ax.set_title(f"{metric}{strict}", fontsize=10)
        ax.set_xlabel("task and arm")
        ax.set_ylabel(f"mean {metric}" + (" (lower is better)" if metric == BPB_METRIC else ""))
    figure.suptitle(_title(report), fontsize=11, fontweight="bold", y=0.995)
    resampled = "whole trajectories" if clustered else "examples"
    omitted = f" {', '.join(left_out)}: 0 for every model, no panel." if left_out else ""
    figure.text(
        0.5,
        0.01,
        f"Bars and diamonds: means; whiskers: 95% bootstrap CIs resampling {resampled} "
        f"({report.resamples:,} resamples); n: examples. Δ: runtime arm minus the plain or placebo arm on the same"
        f" examples; p: sign-flip test{' of whole trajectories' if clustered else ''}, * p < {SIGNIFICANCE}.{omitted}",
        ha="center",
        fontsize=9,
        wrap=True,
    )
    handles: dict[str, Artist] = {}  # one per model and line, from whichever panel shows it
    for ax in figure.axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    height = figure.get_figheight()
    if legend_cell is not None:  # the grid's spare cell holds the legend, so no cell stays blank
        legend_cell.set_visible(True)
        legend_cell.axis("off")
        legend_cell.legend(list(handles.values()), list(handles), loc="center", fontsize=9, frameon=False)
        figure.tight_layout(rect=(0, 0.35 / height, 1, 1 - 0.35 / height))
    else:
        figure.legend(
            list(handles.values()), list(handles), loc="upper center", ncol=min(len(handles), 6), fontsize=9,
            frameon=False, bbox_to_anchor=(0.5, 1 - 0.35 / height),
        )  # fmt: skip
        figure.tight_layout(rect=(0, 0.35 / height, 1, 1 - 0.85 / height))
    return figure


def check_plot_path(path: Path) -> str:
    """The file type a plot path names by its suffix (png, pdf, svg); :class:`InputError` for any other."""
    kind = PLOT_FORMATS.get(path.suffix.lower())
    if kind is None:
        raise InputError(
            f"{path}: a plot is written as PNG, PDF or SVG; name the file with one of {', '.join(PLOT_FORMATS)}"
        )
    return kind


def plot_report(report: Report, path: Path) -> None:
    """Write :func:`report_figure` in the file type the suffix of ``path`` names."""
    kind = check_plot_path(path)
    try:
        report_figure(report).savefig(path, dpi=110, format=kind)
    except OSError as exc:
        raise InputError(f"cannot write plot {path}: {exc}") from None
