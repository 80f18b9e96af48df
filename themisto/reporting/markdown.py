"""The report as Markdown: the paired bits per byte first, then how to read it, scores, other metrics, notes."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import cast

from tabulate import tabulate

from themisto.reporting.analysis import (
    ALL_EXAMPLES,
    MDE_RATES,
    RUNTIME_ONLY,
    CategorySummary,
    MetricSummary,
    ModelComparison,
    PairedComparison,
    Report,
)
from themisto.reporting.samples import is_likelihood_task
from themisto.reporting.stats import Interval, McNemarResult
from themisto.vocabulary import BPB_METRIC, DUPLICATE_COLUMN

DASH = "–"
# Below this many trajectories the report warns that the trajectory figures rest on few independent units.
FEW_TRAJECTORIES = 10
# The generative metric whose runtime_only strata the report shows (the likelihood one leads).
_GENERATIVE_STRATUM_METRIC = "exact_match_norm"


def _number(value: float | None, digits: int = 3) -> str:
    """A figure with three decimals (or ``digits``), or a dash when undefined."""
    return DASH if value is None or math.isnan(value) else f"{value:.{digits}f}"


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
    """``only_reference/only_runtime, p=... (method)`` or a dash for non-binary metrics."""
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


def _family_tables(
    keyed: Sequence[tuple[tuple[str, ...], MetricSummary]],
    report: Report,
    cell: Callable[[MetricSummary], Interval | None],
    key_header: list[str],
    clusters: bool = False,
) -> list[str]:
    """One table for the likelihood tasks and one for the generative tasks, each with only its own metrics.

    ``key[1]`` of every row is its task; a table is captioned only when both kinds are there.
    """
    families = {
        "Likelihood tasks (bits per byte: lower is better):": [k for k in keyed if is_likelihood_task(k[0][1])],
        "Generative tasks:": [k for k in keyed if not is_likelihood_task(k[0][1])],
    }
    present = {caption: rows for caption, rows in families.items() if rows}
    lines: list[str] = []
    for caption, rows in present.items():
        metrics = [m for m in report.metrics if any(summary.metric == m for _, summary in rows)]
        if len(present) > 1:
            lines += ["", caption, ""] if lines else [caption, ""]
        header = [*key_header, "n", *(["trajectories"] if clusters else []), *metrics]
        lines += _table(header, _metric_rows(rows, metrics, cell, clusters), numeric_from=len(key_header))
    return lines


def _run_line(report: Report) -> str:
    """What was evaluated: the split(s), the build(s) and the resampling."""
    splits = ", ".join(f"`{s}`" for s in report.splits) or "not logged"
    builds = ", ".join(f"`{b}`" for b in report.builds) or "not logged"
    return (
        f"Split {splits} · build {builds} · {report.resamples:,} bootstrap resamples, seed {report.seed} "
        "(the same seed gives the same report)."
    )


def _how_to_read() -> list[str]:
    """What the numbers are and which to quote."""
    return [
        "## How to read this",
        "",
        "- **The headline is bits per byte** of the gold target under each prompt (the likelihood tasks, "
        "`*_bpb`): −log₂ P(target | prompt) over the target's UTF-8 bytes, per example. Lower is better. "
        "Each task has three arms on the same examples: *plain* (no runtime block), *runtime* (the block "
        "describing the live kernel) and *placebo* (the block of another step: same format, comparable "
        "length, wrong information).",
        "- **Δ = runtime − plain** is what the runtime block is worth; **Δ = runtime − placebo** is what "
        "its *content* is worth, with format and length held fixed. Δ < 0: the block made the right "
        "answer more likely. Differences are per example, paired by `doc.example_id`, then averaged.",
        "- `Δ [low, high]` is a 95% percentile-bootstrap interval. *examples* resamples examples; "
        "*trajectories* resamples whole notebook trajectories (`doc.trajectory_id`). Examples of one "
        "trajectory are not independent: quote the trajectory interval and its p (a sign-flip permutation "
        "test flipping each trajectory's summed difference). An interval excluding 0 with p < 0.05 means "
        "chance alone is unlikely to explain the difference.",
        "- **MDE**: the smallest true Δ this sample detects (two-sided, alpha 0.05, power 0.8), from the "
        "observed spread of the differences, widened by the design effect **deff** (how many times the "
        "trajectories inflate the variance of the mean; 1 = as if examples were independent). A Δ that "
        "is not significant and smaller than the MDE was not detectable here, which is not the same as no effect.",
        "- The `runtime_only` rows keep the examples whose target holds a token that appears in the runtime "
        "block and nowhere in the plain prompt: there the block holds information nothing else does.",
        "- Generative metrics follow, on a 0–1 scale (higher is better): `exact_match` is strict (leading "
        "whitespace counts), `exact_match_norm` ignores whitespace differences, `rougeL` and `chrf` give "
        "partial credit; `exec_*` and `state_match` come from `themisto exec-score`; `greedy_match` (likelihood "
        "tasks) is 1 where greedy decoding would have produced the target. Bits per byte in tables is the mean "
        "of the per-example values; lm-eval's own `bits_per_byte` in its results file weighs examples by "
        "their bytes, so it differs.",
        "",
    ]


def _arm_means(c: PairedComparison) -> list[str]:
    """The two arms' means of a comparison."""
    return [_number(c.mean_reference), _number(c.mean_runtime)]


def _quoted_cells(c: PairedComparison) -> list[str]:
    """n, trajectories, the two means, Δ resampling examples and trajectories, the quoted p and MDE."""
    return [
        str(c.n),
        str(c.clusters) if c.clustered_difference is not None else DASH,
        *_arm_means(c),
        _interval(c.difference, signed=True),
        _interval(c.clustered_difference, signed=True),
        _p_value(c.quoted_p_value),
        _number(c.mde if c.clustered_mde is None else c.clustered_mde),
    ]


def _headline(report: Report) -> list[str]:
    """The paired bits per byte: every task and contrast, then the runtime_only strata."""
    rows_of = [c for c in report.comparisons if c.metric == BPB_METRIC]
    overall = [c for c in rows_of if c.stratum == ALL_EXAMPLES]
    if not overall:
        return []
    lines = [
        "## Bits per byte: runtime vs plain and placebo",
        "",
        "Per example, bits per byte of the gold target under the runtime prompt minus under the plain "
        "(or placebo) prompt, paired by `doc.example_id`; the mean with its 95% CI resampling examples "
        "and resampling whole trajectories, the trajectory sign-flip p, and the MDE with the design effect "
        "of the trajectories (p and MDE per example where the samples name no trajectory). "
        "**Δ < 0: the runtime block helped.**",
        "",
    ]
    header = ["model", "task", "Δ", "n", "trajectories", "plain / placebo", "runtime"]
    header += ["Δ [95% CI], examples", "Δ [95% CI], trajectories", "p", "MDE", "deff"]
    rows = [
        [
            c.model,
            c.task,
            c.contrast,
            *_quoted_cells(c),
            _number(c.design_effect, 2),
        ]
        for c in overall
    ]
    lines += _table(header, rows, numeric_from=3)
    few = sorted({c.clusters for c in overall if 0 < c.clusters < FEW_TRAJECTORIES})
    if few:
        lines += [
            "",
            f"With {' or '.join(map(str, few))} trajectories the trajectory p cannot fall below "
            + ", ".join(f"2/2^{g} = {2 / 2**g:.2g}" for g in few)
            + f", and the design effect and MDE are rough: fewer than {FEW_TRAJECTORIES} independent units.",
        ]
    strata = [c for c in rows_of if c.stratum != ALL_EXAMPLES]
    if strata:
        lines += ["", *_strata_section(strata, "Bits per byte")]
    return lines


def _strata_section(strata: list[PairedComparison], what: str) -> list[str]:
    """The runtime_only and rest strata of one metric's comparisons."""
    lines = [
        f"## {what} where only the runtime block holds the answer",
        "",
        f"The same differences within the `{RUNTIME_ONLY}` stratum (the target holds a token found in the "
        "runtime block and nowhere in the plain prompt; the runtime arm's `doc.runtime_only`) and outside "
        "it (`rest`). A block that carries information should help most in the first.",
        "",
    ]
    header = ["model", "task", "Δ", "examples", "n", "trajectories", "plain / placebo", "runtime"]
    header += ["Δ [95% CI], examples", "Δ [95% CI], trajectories", "p"]
    rows = [
        [
            c.model,
            c.task,
            c.contrast,
            c.stratum,
            str(c.n),
            str(c.clusters) if c.clustered_difference is not None else DASH,
            *_arm_means(c),
            _interval(c.difference, signed=True),
            _interval(c.clustered_difference, signed=True),
            _p_value(c.quoted_p_value),
        ]
        for c in strata
    ]
    return lines + _table(header, rows, numeric_from=4)


def _scores(report: Report) -> list[str]:
    """The per-example and the whole-trajectory score tables."""
    lines = ["## Scores", "", "Every metric's mean per model and task with its 95% CI, resampling examples.", ""]
    lines += _family_tables(_by_model_task(report.summaries), report, lambda s: s.interval, ["model", "task"])
    clustered = [s for s in report.summaries if s.clustered is not None]
    if clustered:
        lines += [
            "",
            "## Scores, whole trajectories resampled",
            "",
            "The same means; each bootstrap resample draws whole trajectories (`doc.trajectory_id`) with replacement.",
            "",
        ]
        lines += _family_tables(
            _by_model_task(clustered), report, lambda s: s.clustered, ["model", "task"], clusters=True
        )
    return lines


def _comparisons(report: Report) -> list[str]:
    """The paired tables of every metric but the headline's, the strata of the generative headline, the MDEs."""
    shown = [c for c in report.comparisons if c.stratum == ALL_EXAMPLES and c.metric != BPB_METRIC]
    if not shown:
        return []
    lines = [
        "## Runtime vs plain and placebo, every other metric",
        "",
        "Per-example difference runtime − plain (or − placebo), paired by `doc.example_id`: mean "
        "with paired bootstrap 95% CI, two-sided sign-flip permutation p-value, McNemar's "
        "test for 0/1 metrics (pairs right only in the other arm / only with runtime; exact binomial "
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
            c.task,
            c.contrast,
            c.metric,
            str(c.n),
            *_arm_means(c),
            _interval(c.difference, signed=True),
            _p_value(c.p_value),
            _mcnemar_cell(c.mcnemar),
            _number(c.disagreement),
            _number(c.mde),
        ]
        for c in shown
    ]
    header = ["model", "task", "Δ", "metric", "n", "plain / placebo", "runtime", "Δ [95% CI]", "sign-flip p"]
    lines += _table([*header, "McNemar", "disagree", "MDE"], rows, numeric_from=4)
    clustered = [c for c in shown if c.clustered_difference is not None]
    if clustered:
        lines += [
            "",
            "## Runtime vs plain and placebo, whole trajectories resampled",
            "",
            "The same differences; the bootstrap draws whole trajectories and the sign-flip test flips "
            "the summed difference of each trajectory (exact below 17 trajectories with a difference).",
            "",
        ]
        rows = [
            [
                c.model,
                c.task,
                c.contrast,
                c.metric,
                str(c.n),
                str(c.clusters),
                _interval(c.clustered_difference, signed=True),
                _p_value(c.clustered_p_value),
            ]
            for c in clustered
        ]
        lines += _table(
            ["model", "task", "Δ", "metric", "n", "trajectories", "Δ [95% CI]", "sign-flip p"], rows, numeric_from=4
        )
    strata = [c for c in report.comparisons if c.stratum != ALL_EXAMPLES and c.metric == _GENERATIVE_STRATUM_METRIC]
    if strata:
        lines += ["", *_strata_section(strata, f"`{_GENERATIVE_STRATUM_METRIC}`")]
    if report.detectable:
        rates = [f"at {rate:.0%}" for rate in MDE_RATES]
        lines += [
            "",
            "## Minimum detectable effect",
            "",
            "The smallest true runtime − plain (or − placebo) difference of a 0/1 metric (exact match, greedy "
            "match, exec outcomes) that a two-sided paired test at alpha 0.05 detects with power 0.8, for the "
            "number of paired examples of each task and split evaluated, if the two arms disagree on the given "
            "share of examples (`themisto.reporting.stats.disagreement_mde`: about 2.8·sqrt(rate/n)). "
            "– : no effect that rate allows is detectable at this n.",
            "",
        ]
        rows = [[d.task, d.split, str(d.n), *(_number(m) for m in d.mde)] for d in report.detectable]
        lines += _table(["task", "split", "pairs", *rates], rows, numeric_from=2)
    return lines


def _models_compared(report: Report) -> list[str]:
    """Model − model on the same examples: bits per byte per task and arm, then the generative metrics."""
    if not report.models_compared:
        return []
    builds = {c.build for c in report.models_compared}
    lines = [
        "## Models compared",
        "",
        "Per example, model B's score minus model A's on the examples both scored (paired by `doc.example_id`, "
        "per task, arm and build); the mean with its 95% CI resampling examples and resampling whole "
        "trajectories, the trajectory sign-flip p and the MDE (per example where the samples name no "
        "trajectory). The benchmark *ranks* one model above the other (better: lower bits per byte, higher "
        "generative scores) where the quoted interval (whole "
        "trajectories where known) excludes 0 and its sign-flip p is below 0.05; otherwise it does not "
        "separate them at this n.",
    ]
    header = ["task", *(["build"] if len(builds) > 1 else []), "metric", "model A", "model B", "n", "trajectories"]
    header += ["A", "B", "B − A [95% CI], examples", "B − A [95% CI], trajectories", "p", "MDE", "the benchmark"]
    captions = (("Bits per byte (lower is better)", True), ("Generative metrics (higher is better)", False))
    for caption, wanted in captions:
        shown = [c for c in report.models_compared if (c.figures.metric == BPB_METRIC) is wanted]
        if shown:
            lines += [
                "",
                f"{caption}:",
                "",
                *_table(header, [_model_row(c, len(builds) > 1) for c in shown], header.index("n")),
            ]
    return lines


def _model_row(c: ModelComparison, with_build: bool) -> list[str]:
    """One row of the model comparisons."""
    return [
        c.task,
        *([c.build or DASH] if with_build else []),
        c.figures.metric,
        c.model_a,
        c.model_b,
        *_quoted_cells(c.figures),
        c.verdict,
    ]


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
        lines += _family_tables(_by_value(rows_of), report, lambda s: s.interval, ["model", "task", column])
    if report.duplicates:
        lines += [
            "",
            "## With and without duplicates",
            "",
            f"Every metric over all examples and over those that repeat no earlier example of their "
            f"trajectory (`{DUPLICATE_COLUMN}` null), with per-example bootstrap 95% CIs.",
            "",
        ]
        lines += _family_tables(
            _by_value(report.duplicates), report, lambda s: s.interval, ["model", "task", "examples"]
        )
    return lines


def render_markdown(report: Report) -> str:
    """The report as Markdown: the paired bits per byte, how to read it, scores, other metrics, ceiling, notes."""
    lines = ["# Themisto report", "", _run_line(report), ""]
    headline = _headline(report)
    lines += [*headline, ""] if headline else []
    lines += [*_how_to_read(), *_scores(report), ""]
    models = _models_compared(report)
    lines += [*models, ""] if models else []
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
