"""The report as a PNG: one panel per metric, each model's mean per task with its 95% CI."""

from __future__ import annotations

from pathlib import Path

from themisto.exceptions import InputError
from themisto.reporting.analysis import Report


def plot_report(report: Report, path: Path) -> None:
    """A PNG with one panel per metric: each model's mean per task with 95% CI error bars."""
    from matplotlib.figure import Figure  # heavy; no pyplot, so no global backend state

    tasks = list(dict.fromkeys(s.task for s in report.summaries))
    models = list(dict.fromkeys(s.model for s in report.summaries))
    figure = Figure(figsize=(max(4.0, 1.2 * len(tasks)) * len(report.metrics), 4.5))
    axes = figure.subplots(1, len(report.metrics), squeeze=False)[0]
    width = 0.8 / len(models)
    by_key = {(s.model, s.task, s.metric): s.interval for s in report.summaries}
    for ax, metric in zip(axes, report.metrics):
        for m, model in enumerate(models):
            xs: list[float] = []
            means: list[float] = []
            errors: list[list[float]] = [[], []]
            for t, task in enumerate(tasks):
                interval = by_key.get((model, task, metric))
                if interval is None:
                    continue
                xs.append(t - 0.4 + width * (m + 0.5))
                means.append(interval.estimate)
                errors[0].append(interval.estimate - interval.low)
                errors[1].append(interval.high - interval.estimate)
            ax.bar(xs, means, width, yerr=errors, capsize=3, label=model)
        ax.set_title(metric)
        ax.set_xticks(range(len(tasks)), tasks, rotation=30, ha="right", fontsize=8)
        ax.set_ylim(bottom=0)
    axes[0].set_ylabel("mean (95% bootstrap CI)")
    axes[-1].legend(fontsize=8)
    figure.tight_layout()
    try:
        figure.savefig(path, dpi=120, format="png")
    except OSError as exc:
        raise InputError(f"cannot write plot {path}: {exc}") from None
