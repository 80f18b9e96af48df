"""Read lm-eval sample logs and report scores with CIs and runtime-vs-none tests.

lm-eval run with ``--log_samples --output_path RUN_DIR`` writes, per model,
``RUN_DIR/<model_name_sanitized>/samples_<task>_<timestamp>.jsonl`` (one line
per document and filter: ``doc``, ``filter``, ``metrics`` — the names of the
per-sample metrics — and each metric's value under its name) next to
``results_<timestamp>.json`` (``model_name``, ``config.model``). Sample logs
are searched recursively, so any folder layout works; the newest run of each
task in a folder is used. A row names its lm-eval filter (``task [filter]``)
only when the model's task was logged under more than one.
"""

from __future__ import annotations

import json
import math
import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from themisto.exceptions import InputError
from themisto.jsonl import iter_json_objects
from themisto.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Interval,
    McNemarResult,
    bootstrap_ci,
    mcnemar,
    minimum_detectable_effect,
    paired_bootstrap_ci,
    paired_differences,
    sign_flip_p_value,
)

RUNTIME_SUFFIX = "_runtime"
# Per-sample metrics that are 0/1 outcomes, tested with McNemar in the pairs.
BINARY_METRICS = ("exact_match", "exact_match_norm")
_SAMPLE_FILE = re.compile(r"^samples_(?P<task>.+?)(?:_(?P<stamp>\d{4}-\d{2}-\d{2}T[\d.\-]+))?$")


@dataclass
class TaskSamples:
    """One model's per-sample scores on one task (and lm-eval filter)."""

    model: str
    task: str
    filter: str
    source: Path
    example_ids: list[str | None] = field(default_factory=list)
    stable: list[bool | None] = field(default_factory=list)
    has_stable: bool = False
    scores: dict[str, list[float]] = field(default_factory=dict)
    # Set by load_samples when the model's task was logged under several filters.
    filter_shown: bool = False

    @property
    def label(self) -> str:
        """The task name, with ``[filter]`` when the filter tells this row from another."""
        return f"{self.task} [{self.filter}]" if self.filter_shown else self.task


@dataclass(frozen=True)
class MetricSummary:
    """A metric's mean over one model's samples of one task, with its bootstrap CI."""

    model: str
    task: str
    metric: str
    n: int
    interval: Interval


@dataclass(frozen=True)
class PairedComparison:
    """Runtime minus no-runtime scores of one metric, paired by ``doc.example_id``."""

    model: str
    task: str
    runtime_task: str
    metric: str
    n: int
    mean_without: float
    mean_with: float
    difference: Interval
    p_value: float
    mcnemar: McNemarResult | None
    mde: float


@dataclass(frozen=True)
class StabilityCeiling:
    """How many of a task's examples have a target reproducible across re-executions."""

    task: str
    n: int
    stable: int
    unstable: int
    unknown: int

    @property
    def ceiling(self) -> float:
        """Share of examples whose target is known to be stable: the best reachable exact match."""
        return self.stable / self.n if self.n else float("nan")


@dataclass
class Report:
    """Everything :func:`render_markdown` and :func:`plot_report` show."""

    metrics: list[str]
    summaries: list[MetricSummary]
    comparisons: list[PairedComparison]
    ceilings: list[StabilityCeiling]
    notes: list[str]
    resamples: int
    seed: int


def _sample_files(run_dirs: Sequence[Path]) -> list[Path]:
    """Every lm-eval sample log under the run folders, or an InputError."""
    files: dict[Path, Path] = {}  # by resolved path: nested or repeated folders count once
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            raise InputError(f"run folder not found: {run_dir}")
        for path in sorted(run_dir.rglob("samples_*.jsonl")):
            files.setdefault(path.resolve(), path)
    if not files:
        listed = ", ".join(str(d) for d in run_dirs)
        raise InputError(
            f"no lm-eval sample files (samples_<task>_<timestamp>.jsonl) under {listed}; "
            "run lm-eval with --log_samples --output_path"
        )
    return list(files.values())


def _read_json(path: Path) -> object:
    """A JSON file's content, or an InputError naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read JSON: {exc}") from None


def _model_name(folder: Path, stamp: str | None) -> str:
    """The model's name from the run's results file, else the folder's name.

    lm-eval takes ``model_name`` from the model args (``pretrained=...``) and
    makes up a random id when there is none (e.g. a baseline without args); then
    the model type ``config.model`` names the model better.
    """
    results = folder / f"results_{stamp}.json"
    if not stamp or not results.is_file():
        return folder.name
    content = _read_json(results)
    config = content.get("config") if isinstance(content, dict) else None
    if not isinstance(config, dict):
        return folder.name
    name = content.get("model_name")
    if isinstance(name, str) and name and name in str(config.get("model_args") or ""):
        return name
    model = config.get("model")
    return model if isinstance(model, str) and model else folder.name


def _metric_value(record: dict, name: str, where: str) -> float:
    """One per-sample metric value as a float, or an InputError."""
    value = record.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{where}: metric {name!r} is {value!r}, not a finite number")
    return float(value)


def _read_samples(path: Path, model: str, task: str) -> list[TaskSamples]:
    """The samples of one log file, one :class:`TaskSamples` per lm-eval filter."""
    by_filter: dict[str, TaskSamples] = {}
    for number, record in iter_json_objects(path, InputError, "sample log"):
        where = f"{path}:{number}"
        doc = record.get("doc")
        names = record.get("metrics")
        if not isinstance(doc, dict) or not isinstance(names, list):
            raise InputError(f"{where}: not an lm-eval sample (needs 'doc' and 'metrics')")
        filter_name = str(record.get("filter", "none"))
        samples = by_filter.setdefault(filter_name, TaskSamples(model, task, filter_name, path))
        for name in names:
            samples.scores.setdefault(str(name), []).append(_metric_value(record, name, where))
        example_id = doc.get("example_id")
        samples.example_ids.append(None if example_id is None else str(example_id))
        stable = doc.get("stable")
        samples.has_stable = samples.has_stable or "stable" in doc
        samples.stable.append(stable if isinstance(stable, bool) else None)
    for samples in by_filter.values():
        lengths = {len(values) for values in samples.scores.values()}
        if lengths - {len(samples.example_ids)}:
            raise InputError(f"{path}: samples of filter {samples.filter!r} list different metrics")
    return list(by_filter.values())


def load_samples(run_dirs: Sequence[Path]) -> tuple[list[TaskSamples], list[str]]:
    """All tasks' samples under the run folders, and notes on runs left out."""
    newest: dict[tuple[Path, str], tuple[str, Path]] = {}
    notes: list[str] = []
    for path in _sample_files(run_dirs):
        match = _SAMPLE_FILE.match(path.stem)
        if match is None:
            continue
        key = (path.parent, match["task"])
        candidate = (match["stamp"] or "", path)
        if key in newest:
            older, candidate = sorted([newest[key], candidate])
            notes.append(f"older run ignored: {older[1]}")
        newest[key] = candidate
    folders_of_model: dict[str, set[Path]] = {}
    loaded: list[tuple[Path, TaskSamples]] = []
    for (folder, task), (stamp, path) in sorted(newest.items(), key=lambda item: str(item[1][1])):
        model = _model_name(folder, stamp or None)
        folders_of_model.setdefault(model, set()).add(folder)
        task_samples = _read_samples(path, model, task)
        if not task_samples:
            notes.append(f"no samples in {path}")
        loaded.extend((folder, samples) for samples in task_samples)
    # The same model name in two folders (two runs with other settings) stays two rows.
    for folder, samples in loaded:
        if len(folders_of_model[samples.model]) > 1:
            samples.model = f"{samples.model} ({folder})"
    all_samples = [samples for _, samples in loaded]
    # Every Themisto task has the one filter `answer`: naming it in each row is
    # noise. Only a task logged under several filters (a task config with
    # strict and flexible extraction) needs the name to keep its rows apart.
    filters = Counter((samples.model, samples.task) for samples in all_samples)
    for samples in all_samples:
        samples.filter_shown = filters[samples.model, samples.task] > 1
    return all_samples, notes


def _paired_indices(
    without: TaskSamples, with_runtime: TaskSamples
) -> tuple[list[int], list[int]] | None:
    """Row indices of the examples both tasks scored, aligned by example id."""
    if None in without.example_ids or None in with_runtime.example_ids:
        return None
    for samples in (without, with_runtime):
        if len(set(samples.example_ids)) != len(samples.example_ids):
            raise InputError(f"{samples.source}: duplicate doc.example_id values")
    position = {example_id: i for i, example_id in enumerate(with_runtime.example_ids)}
    pairs = [(i, position[e]) for i, e in enumerate(without.example_ids) if e in position]
    return [i for i, _ in pairs], [j for _, j in pairs]


def _compare(
    without: TaskSamples, with_runtime: TaskSamples, resamples: int, seed: int
) -> tuple[list[PairedComparison], list[str]]:
    """Paired runtime-vs-none statistics of every metric the two tasks share."""
    indices = _paired_indices(without, with_runtime)
    subject = f"{without.model}: {without.label} vs {with_runtime.label}"
    if indices is None:
        return [], [f"{subject}: not paired, samples lack doc.example_id"]
    rows_without, rows_with = indices
    if not rows_without:
        return [], [f"{subject}: no example in common"]
    notes = []
    if len(rows_without) < max(len(without.example_ids), len(with_runtime.example_ids)):
        notes.append(f"{subject}: only {len(rows_without)} examples appear in both")
    comparisons = []
    for metric in without.scores:
        if metric not in with_runtime.scores:
            continue
        a = np.asarray(without.scores[metric])[rows_without]
        b = np.asarray(with_runtime.scores[metric])[rows_with]
        differences = paired_differences(a, b)
        binary = metric in BINARY_METRICS and bool(np.all(np.isin(np.concatenate([a, b]), [0, 1])))
        comparisons.append(
            PairedComparison(
                model=without.model,
                task=without.label,
                runtime_task=with_runtime.label,
                metric=metric,
                n=len(differences),
                mean_without=float(a.mean()),
                mean_with=float(b.mean()),
                difference=paired_bootstrap_ci(a, b, resamples=resamples, seed=seed),
                p_value=sign_flip_p_value(differences, resamples=resamples, seed=seed),
                mcnemar=mcnemar(a, b) if binary else None,
                mde=minimum_detectable_effect(differences),
            )
        )
    return comparisons, notes


def _ceilings(all_samples: list[TaskSamples]) -> list[StabilityCeiling]:
    """Per task, the stable share of the examples any model was scored on.

    Stability belongs to the dataset row, so the filters of a task share one row.
    """
    stable_by_task: dict[str, dict[str, bool | None]] = {}
    for samples in all_samples:
        if not samples.has_stable:
            continue
        seen = stable_by_task.setdefault(samples.task, {})
        for row, (example_id, stable) in enumerate(zip(samples.example_ids, samples.stable)):
            seen.setdefault(example_id if example_id is not None else f"row {row}", stable)
    ceilings = []
    for task, stable in stable_by_task.items():
        flags = list(stable.values())
        ceilings.append(
            StabilityCeiling(
                task=task,
                n=len(flags),
                stable=sum(flag is True for flag in flags),
                unstable=sum(flag is False for flag in flags),
                unknown=sum(flag is None for flag in flags),
            )
        )
    return ceilings


def build_report(
    run_dirs: Sequence[Path], *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED
) -> Report:
    """Scores with bootstrap CIs and paired runtime-vs-none tests for the run folders."""
    all_samples, notes = load_samples(run_dirs)
    metrics: list[str] = []
    summaries = []
    for samples in all_samples:
        for metric, values in samples.scores.items():
            if metric not in metrics:
                metrics.append(metric)
            interval = bootstrap_ci(values, resamples=resamples, seed=seed)
            summaries.append(
                MetricSummary(samples.model, samples.label, metric, len(values), interval)
            )
    if not summaries:  # nothing to tabulate or plot
        listed = ", ".join(str(d) for d in run_dirs)
        raise InputError(f"the sample logs under {listed} hold no scored samples")
    by_key = {(s.model, s.task, s.filter): s for s in all_samples}
    comparisons = []
    for samples in all_samples:
        partner = by_key.get((samples.model, samples.task + RUNTIME_SUFFIX, samples.filter))
        if partner is not None:
            pair_rows, pair_notes = _compare(samples, partner, resamples, seed)
            comparisons.extend(pair_rows)
            notes.extend(pair_notes)
    return Report(metrics, summaries, comparisons, _ceilings(all_samples), notes, resamples, seed)


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
        f"Means with percentile-bootstrap 95% CIs ({report.resamples:,} resamples, "
        f"seed {report.seed}).",
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
        scores = [
            _interval(by_metric[m].interval) if m in by_metric else "–" for m in report.metrics
        ]
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
        header = ["model", "tasks", "metric", "n", "no runtime", "runtime", "Δ [95% CI]",
                  "sign-flip p", "McNemar", "MDE"]
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
            xs, means, errors = [], [], [[], []]
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
