"""The report as Markdown: scores, paired comparisons, determinism ceiling, notes."""

from __future__ import annotations

from themisto.reporting.analysis import MetricSummary, Report
from themisto.reporting.stats import Interval, McNemarResult


def _number(value: float) -> str:
    """A score with three decimals."""
    return f"{value:.3f}"


def _interval(interval: Interval, signed: bool = False) -> str:
    """``estimate [low, high]`` with three decimals."""
    sign = "+" if signed else ""
    return f"{interval.estimate:{sign}.3f} [{interval.low:.3f}, {interval.high:.3f}]"


def _p_value(p: float) -> str:
    """A p-value: three decimals, or scientific notation below 0.001."""
    return f"{p:.1e}" if p < 0.001 else f"{p:.3f}"


def _mcnemar_cell(result: McNemarResult | None) -> str:
    """``only_without/only_with, p=... (method)`` or a dash for non-binary metrics."""
    if result is None:
        return "–"
    return f"{result.only_a}/{result.only_b}, p={_p_value(result.p_value)} ({result.method})"


def _table(header: list[str], rows: list[list[str]], numeric_from: int) -> list[str]:
    """A Markdown table, columns from ``numeric_from`` on right-aligned."""
    align = ["---" if i < numeric_from else "---:" for i in range(len(header))]
    return ["| " + " | ".join(cells) + " |" for cells in [header, align, *rows]]


def render_markdown(report: Report) -> str:
    """The report as Markdown: scores, paired comparisons, determinism ceiling, notes."""
    lines = [
        "# Themisto report",
        "",
        f"Means with percentile-bootstrap 95% CIs ({report.resamples:,} resamples, seed {report.seed}).",
        "",
        "## Scores",
        "",
    ]
    cells: dict[tuple[str, str], dict[str, MetricSummary]] = {}
    for summary in report.summaries:
        cells.setdefault((summary.model, summary.task), {})[summary.metric] = summary
    score_rows = []
    for (model, task), by_metric in cells.items():
        n = max(summary.n for summary in by_metric.values())
        scores = [_interval(by_metric[m].interval) if m in by_metric else "–" for m in report.metrics]
        score_rows.append([model, task, str(n), *scores])
    lines += _table(["model", "task", "n", *report.metrics], score_rows, numeric_from=2)
    if report.comparisons:
        lines += [
            "",
            "## Runtime vs no runtime",
            "",
            "Per-example difference runtime − no runtime, paired by `doc.example_id`: mean "
            "with paired bootstrap 95% CI, two-sided sign-flip permutation p-value, McNemar's "
            "test for exact match (pairs right only without / only with runtime; exact binomial "
            "below 25 discordant pairs, else continuity-corrected chi-square), and the minimum "
            "detectable effect at this n (alpha 0.05, power 0.8).",
            "",
        ]
        comparison_rows = [
            [
                c.model,
                f"{c.task} vs {c.runtime_task}",
                c.metric,
                str(c.n),
                _number(c.mean_without),
                _number(c.mean_with),
                _interval(c.difference, signed=True),
                _p_value(c.p_value),
                _mcnemar_cell(c.mcnemar),
                _number(c.mde),
            ]
            for c in report.comparisons
        ]
        header = [
            "model",
            "tasks",
            "metric",
            "n",
            "no runtime",
            "runtime",
            "Δ [95% CI]",
            "sign-flip p",
            "McNemar",
            "MDE",
        ]
        lines += _table(header, comparison_rows, numeric_from=3)
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
