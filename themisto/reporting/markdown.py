"""The report as Markdown: how to read it, scores, paired comparisons, effects, categories, ceiling, notes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import cast

from tabulate import tabulate

from themisto.reporting.analysis import MDE_RATES, CategorySummary, MetricSummary, PairedComparison, Report
from themisto.reporting.stats import Interval, McNemarResult
from themisto.vocabulary import DUPLICATE_COLUMN

DASH = "–"


def _number(value: float) -> str:
    """A score with three decimals, or a dash when undefined."""
    return DASH if math.isnan(value) else f"{value:.3f}"


def _interval(interval: Interval | None, signed: bool = False) -> str:
    """``estimate [low, high]`` with three decimals, or a dash when there is none."""
    if interval is None or math.isnan(interval.estimate):
        return DASH
    sign = "+" if signed else ""
    return f"{interval.estimate:{sign}.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def _p_value(p: float | None) -> str:
    """A p-value: three decimals, or scientific notation below 0.001."""
    if p is None:
        return DASH
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def _mcnemar_cell(result: McNemarResult | None) -> str:
    """``only_without/only_with, p=... (method)`` or a dash for non-binary metrics."""
    if result is None:
        return DASH
    return f"{result.only_a}/{result.only_b}, p={_p_value(result.p_value)} ({result.method})"


def _table(header: list[str], rows: list[list[str]], numeric_from: int) -> list[str]:
    """A Markdown table, columns from ``numeric_from`` on right-aligned; cells are shown as given."""
    align = ["left" if i < numeric_from else "right" for i in range(len(header))]
    text = tabulate(rows, headers=header, tablefmt="pipe", colalign=align, disable_numparse=True)
    return cast(str, text).splitlines()  # tabulate is untyped


def _metric_rows(
    keyed: Sequence[tuple[tuple[str, ...], MetricSummary]],
    metrics: list[str],
    cell: Callable[[MetricSummary], Interval | None],
    clusters: bool = False,
) -> list[list[str]]:
    """One row per key with n (and trajectories), then each metric's cell; a metric over fewer examples says so."""
    grouped: dict[tuple[str, ...], dict[str, MetricSummary]] = {}
    for key, summary in keyed:
        grouped.setdefault(key, {})[summary.metric] = summary
    rows = []
    for key, by_metric in grouped.items():
        n = max(s.n for s in by_metric.values())
        counts = [str(max(s.clusters for s in by_metric.values()))] if clusters else []
        cells = []
        for metric in metrics:
            found = by_metric.get(metric)
            text = _interval(cell(found)) if found is not None else DASH
            if found is not None and found.n != n and text != DASH:
                text += f" (n={found.n})"
            cells.append(text)
        rows.append([*key, str(n), *counts, *cells])
    return rows


def _by_model_task(summaries: Sequence[MetricSummary]) -> list[tuple[tuple[str, ...], MetricSummary]]:
    """Summaries keyed by (model, task)."""
    return [((s.model, s.task), s) for s in summaries]


def _by_value(rows: Sequence[CategorySummary]) -> list[tuple[tuple[str, ...], MetricSummary]]:
    """Category summaries keyed by (model, task, value)."""
    return [((r.summary.model, r.summary.task, r.value), r.summary) for r in rows]


def _how_to_read(report: Report) -> list[str]:
    """The opening section: what the numbers are and which to quote."""
    return [
        "## How to read this",
        "",
        "- Every score is a mean over examples on a 0–1 scale, written `mean [low, high]`: the 95% "
        f"confidence interval of a percentile bootstrap ({report.resamples:,} resamples, seed {report.seed}; "
        "the same seed gives the same report).",
        "- Examples come from a few notebook trajectories and are not independent. Tables marked *whole "
        "trajectories* resample trajectories instead of examples; their wider intervals are the ones to "
        "quote when trajectories are few (the `trajectories` column says how many).",
        "- The headline is **Runtime vs no runtime**: on the same examples, the score with the runtime block "
        "minus the score without. Δ > 0 means the runtime block helped; an interval that excludes 0 with "
        "p < 0.05 means chance alone is unlikely to explain it.",
        "- A Δ that is not significant and smaller than the *minimum detectable effect* (MDE) means this many "
        "examples could not have shown it, not that runtime context has no effect.",
        "- `exact_match` is strict (leading whitespace counts), `exact_match_norm` ignores whitespace "
        "differences, `rougeL` and `chrf` give partial credit; `exec_*` and `state_match` come from "
        "`themisto exec-score` (next-cell predictions run in the recorded state).",
        "",
    ]


def _scores(report: Report) -> list[str]:
    """The per-example and the whole-trajectory score tables."""
    metrics = report.metrics
    lines = ["## Scores", ""]
    rows = _metric_rows(_by_model_task(report.summaries), metrics, lambda s: s.interval)
    lines += _table(["model", "task", "n", *metrics], rows, numeric_from=2)
    clustered = [s for s in report.summaries if s.clustered is not None]
    if clustered:
        lines += [
            "",
            "## Scores, whole trajectories resampled",
            "",
            "The same means; each bootstrap resample draws whole trajectories (`doc.trajectory_id`) with replacement.",
            "",
        ]
        rows = _metric_rows(_by_model_task(clustered), metrics, lambda s: s.clustered, clusters=True)
        lines += _table(["model", "task", "n", "trajectories", *metrics], rows, numeric_from=2)
    return lines


def _tasks(c: PairedComparison) -> str:
    """The pair's column: ``task vs runtime task``."""
    return f"{c.task} vs {c.runtime_task}"


def _comparisons(report: Report) -> list[str]:
    """The paired tables: per example, then whole trajectories, then the MDE at fixed disagreement rates."""
    if not report.comparisons:
        return []
    lines = [
        "## Runtime vs no runtime",
        "",
        "Per-example difference runtime − no runtime, paired by `doc.example_id`: mean "
        "with paired bootstrap 95% CI, two-sided sign-flip permutation p-value, McNemar's "
        "test for 0/1 metrics (pairs right only without / only with runtime; exact binomial "
        "below 25 discordant pairs, else continuity-corrected chi-square), the share of pairs whose "
        "scores differ, and the minimum detectable effect at this n (alpha 0.05, power 0.8): for a "
        "0/1 metric at the observed disagreement rate, else from the spread of the differences; "
        "– where no pair differs, or where no effect the observed rate allows is detectable at this n "
        "(see the fixed rates below).",
        "",
    ]
    rows = [
        [
            c.model,
            _tasks(c),
            c.metric,
            str(c.n),
            _number(c.mean_without),
            _number(c.mean_with),
            _interval(c.difference, signed=True),
            _p_value(c.p_value),
            _mcnemar_cell(c.mcnemar),
            _number(c.disagreement),
            _number(c.mde),
        ]
        for c in report.comparisons
    ]
    header = ["model", "tasks", "metric", "n", "no runtime", "runtime", "Δ [95% CI]", "sign-flip p", "McNemar"]
    lines += _table([*header, "disagree", "MDE"], rows, numeric_from=3)
    clustered = [c for c in report.comparisons if c.clustered_difference is not None]
    if clustered:
        lines += [
            "",
            "## Runtime vs no runtime, whole trajectories resampled",
            "",
            "The same differences; the bootstrap draws whole trajectories and the sign-flip test flips "
            "the summed difference of each trajectory (exact below 17 trajectories with a difference).",
            "",
        ]
        rows = [
            [
                c.model,
                _tasks(c),
                c.metric,
                str(c.n),
                str(c.clusters),
                _interval(c.clustered_difference, signed=True),
                _p_value(c.clustered_p_value),
            ]
            for c in clustered
        ]
        lines += _table(
            ["model", "tasks", "metric", "n", "trajectories", "Δ [95% CI]", "sign-flip p"], rows, numeric_from=3
        )
    if report.detectable:
        rates = [f"at {rate:.0%}" for rate in MDE_RATES]
        lines += [
            "",
            "## Minimum detectable effect",
            "",
            "The smallest true runtime − no-runtime difference of a 0/1 metric (exact match, exec outcomes) "
            "that a two-sided paired test at alpha 0.05 detects with power 0.8, for the number of paired "
            "examples of each task pair and split evaluated, if the two conditions disagree on the given "
            "share of examples (`themisto.reporting.stats.disagreement_mde`: about 2.8·sqrt(rate/n)). "
            "– : no effect that rate allows is detectable at this n.",
            "",
        ]
        rows = [[d.tasks, d.split, str(d.n), *(_number(m) for m in d.mde)] for d in report.detectable]
        lines += _table(["tasks", "split", "pairs", *rates], rows, numeric_from=2)
    return lines


def _breakdowns(report: Report) -> list[str]:
    """Every metric by category column, and with and without duplicates."""
    lines: list[str] = []
    for column in report.category_columns:
        rows_of: list[CategorySummary] = [row for row in report.categories if row.column == column]
        lines += [
            "",
            f"## By {column}",
            "",
            f"Every metric per value of the dataset column `{column}`, with per-example bootstrap 95% CIs.",
            "",
        ]
        rows = _metric_rows(_by_value(rows_of), report.metrics, lambda s: s.interval)
        lines += _table(["model", "task", column, "n", *report.metrics], rows, numeric_from=3)
    if report.duplicates:
        lines += [
            "",
            "## With and without duplicates",
            "",
            f"Every metric over all examples and over those that repeat no earlier example of their "
            f"trajectory (`{DUPLICATE_COLUMN}` null), with per-example bootstrap 95% CIs.",
            "",
        ]
        rows = _metric_rows(_by_value(report.duplicates), report.metrics, lambda s: s.interval)
        lines += _table(["model", "task", "examples", "n", *report.metrics], rows, numeric_from=3)
    return lines


def render_markdown(report: Report) -> str:
    """The report as Markdown: how to read it, scores, comparisons, breakdowns, determinism ceiling, notes."""
    lines = ["# Themisto report", "", *_how_to_read(report), *_scores(report), ""]
    lines += _comparisons(report)
    lines += _breakdowns(report)
    if report.ceilings:
        lines += [
            "",
            "## Determinism ceiling",
            "",
            "Examples whose target is reproducible across re-executions (`doc.stable`). "
            "An unstable target differs from run to run, so the stable share (unknown "
            "counted as not stable) bounds the exact match a model can be expected to reach.",
            "",
        ]
        ceiling_rows = [
            [c.task, str(c.n), str(c.stable), str(c.unstable), str(c.unknown), _number(c.ceiling)]
            for c in report.ceilings
        ]
        header = ["task", "examples", "stable", "unstable", "unknown", "ceiling"]
        lines += _table(header, ceiling_rows, numeric_from=1)
    if report.notes:
        lines += ["", "## Notes", "", *[f"- {note}" for note in report.notes]]
    return "\n".join(lines) + "\n"
