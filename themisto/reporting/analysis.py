"""Scores with bootstrap CIs and paired runtime-vs-none tests, computed from loaded samples."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from themisto.exceptions import InputError
from themisto.reporting.samples import TaskSamples, load_samples
from themisto.reporting.stats import (
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
from themisto.vocabulary import BINARY_METRICS, RUNTIME_SUFFIX


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


def _paired_indices(without: TaskSamples, with_runtime: TaskSamples) -> tuple[list[int], list[int]] | None:
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
        for row, (example_id, flag) in enumerate(zip(samples.example_ids, samples.stable)):
            seen.setdefault(example_id if example_id is not None else f"row {row}", flag)
    ceilings = []
    for task, by_example in stable_by_task.items():
        flags = list(by_example.values())
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


def build_report(run_dirs: Sequence[Path], *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> Report:
    """Scores with bootstrap CIs and paired runtime-vs-none tests for the run folders."""
    all_samples, notes = load_samples(run_dirs)
    metrics: list[str] = []
    summaries = []
    for samples in all_samples:
        for metric, values in samples.scores.items():
            if metric not in metrics:
                metrics.append(metric)
            interval = bootstrap_ci(values, resamples=resamples, seed=seed)
            summaries.append(MetricSummary(samples.model, samples.label, metric, len(values), interval))
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
