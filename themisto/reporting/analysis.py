"""Scores with bootstrap CIs and paired runtime-vs-none tests, computed from loaded samples.

Every figure comes twice where the data allow: resampling examples, and
resampling whole trajectories (``doc.trajectory_id``), because examples of one
trajectory share a notebook, a person and a kernel state and so are not
independent. Metrics are also broken down by the dataset's category columns
and computed with and without duplicate examples.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from themisto.exceptions import InputError
from themisto.reporting.samples import TRAJECTORY_COLUMN, TaskSamples, load_samples
from themisto.reporting.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Interval,
    McNemarResult,
    bootstrap_cis,
    disagreement_mde,
    mcnemar,
    minimum_detectable_effect,
    sign_flip_p_value,
)
from themisto.vocabulary import BINARY_METRICS, CATEGORY_COLUMNS, DUPLICATE_COLUMN, EXEC_METRICS, RUNTIME_SUFFIX

# Disagreement rates (share of examples whose 0/1 score differs between the
# two conditions) at which the report states the minimum detectable effect.
MDE_RATES = (0.05, 0.10, 0.20)
# The two rows of the duplicates breakdown.
ALL_EXAMPLES = "all"
WITHOUT_DUPLICATES = "without duplicates"
# A category value for samples whose doc holds null in the category column.
MISSING_VALUE = "(missing)"


@dataclass(frozen=True)
class MetricSummary:
    """A metric's mean over one model's samples of one task, with its bootstrap CIs.

    ``clustered`` resamples whole trajectories (``clusters`` of them); None
    where the samples do not name their trajectory.
    """

    model: str
    task: str
    metric: str
    n: int
    interval: Interval
    clusters: int = 0
    clustered: Interval | None = None


@dataclass(frozen=True)
class CategorySummary:
    """A metric's summary over the samples whose ``column`` has ``value``."""

    column: str
    value: str
    summary: MetricSummary


@dataclass(frozen=True)
class PairedComparison:
    """Runtime minus no-runtime scores of one metric, paired by ``doc.example_id``.

    ``disagreement`` is the share of pairs whose two scores differ; ``mde`` the
    minimum detectable effect at this n (for a binary metric at the observed
    disagreement rate, else from the spread of the differences; ``nan`` when
    no pair differs). The ``clustered_*`` figures resample and flip whole
    trajectories (``clusters`` of them), None where trajectories are unknown.
    """

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
    disagreement: float
    mde: float
    clusters: int = 0
    clustered_difference: Interval | None = None
    clustered_p_value: float | None = None


@dataclass(frozen=True)
class DetectableEffects:
    """Minimum detectable effects of a binary metric for one task pair and split, at :data:`MDE_RATES`."""

    tasks: str
    split: str
    n: int
    mde: tuple[float, ...]


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
    categories: list[CategorySummary]
    duplicates: list[CategorySummary]
    detectable: list[DetectableEffects]
    # The category columns found in the samples (the others were omitted with a note).
    category_columns: list[str]


def _clusters(samples: TaskSamples) -> np.ndarray | None:
    """Each sample's trajectory id, or None when a sample does not name it."""
    ids = samples.column(TRAJECTORY_COLUMN)
    return None if ids is None or None in ids else np.asarray(ids)


def _is_binary(metric: str, values: np.ndarray) -> bool:
    """Whether a metric is a 0/1 outcome (exact match, an exec outcome) and its values say so."""
    return metric in (*BINARY_METRICS, *EXEC_METRICS) and bool(np.all(np.isin(values, [0, 1])))


def _groups_by_mask(matrix: np.ndarray, metrics: list[str]) -> list[tuple[np.ndarray, list[int]]]:
    """Columns grouped by which rows hold a number (exec metrics leave excluded examples as nan).

    Each group is bootstrapped with one set of draws, so the common case (every
    metric on every example) costs one resampling for all metrics.
    """
    groups: dict[bytes, tuple[np.ndarray, list[int]]] = {}
    for j in range(len(metrics)):
        mask = ~np.isnan(matrix[:, j])
        groups.setdefault(mask.tobytes(), (mask, []))[1].append(j)
    return [(mask, columns) for mask, columns in groups.values() if mask.any()]


def _summaries(
    samples: TaskSamples, rows: np.ndarray, clustered: bool, resamples: int, seed: int
) -> list[MetricSummary]:
    """Every metric's mean and CIs over the given rows of the samples."""
    metrics = list(samples.scores)
    matrix = np.column_stack([np.asarray(samples.scores[m], dtype=np.float64) for m in metrics])[rows]
    clusters = _clusters(samples) if clustered else None
    if clusters is not None:
        clusters = clusters[rows]
    result: dict[int, MetricSummary] = {}
    for mask, columns in _groups_by_mask(matrix, metrics):
        values = matrix[mask][:, columns]
        intervals = bootstrap_cis(values, resamples=resamples, seed=seed)
        cluster_intervals: list[Interval | None] = [None] * len(columns)
        count = 0
        if clusters is not None:
            cluster_intervals = list(bootstrap_cis(values, clusters=clusters[mask], resamples=resamples, seed=seed))
            count = len(np.unique(clusters[mask]))
        for j, interval, cluster_interval in zip(columns, intervals, cluster_intervals):
            summary = MetricSummary(
                samples.model, samples.label, metrics[j], int(mask.sum()), interval, count, cluster_interval
            )
            result[j] = summary
    return [result[j] for j in sorted(result)]


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


def _comparison(
    without: TaskSamples,
    with_runtime: TaskSamples,
    metric: str,
    a: np.ndarray,
    b: np.ndarray,
    interval: Interval,
    clusters: np.ndarray | None,
    cluster_interval: Interval | None,
    resamples: int,
    seed: int,
) -> PairedComparison:
    """One metric's paired statistics, given its difference CIs."""
    differences = b - a
    binary = _is_binary(metric, np.concatenate([a, b]))
    disagreement = float(np.mean(differences != 0))
    if disagreement == 0:
        mde = float("nan")  # no pair differs: an MDE "at this data" would read 0, as if power were perfect
    elif binary:
        mde = disagreement_mde(len(differences), disagreement)
    else:
        mde = minimum_detectable_effect(differences)
    return PairedComparison(
        model=without.model,
        task=without.label,
        runtime_task=with_runtime.label,
        metric=metric,
        n=len(differences),
        mean_without=float(a.mean()),
        mean_with=float(b.mean()),
        difference=interval,
        p_value=sign_flip_p_value(differences, resamples=resamples, seed=seed),
        mcnemar=mcnemar(a, b) if binary else None,
        disagreement=disagreement,
        mde=mde,
        clusters=0 if clusters is None else len(np.unique(clusters)),
        clustered_difference=cluster_interval,
        clustered_p_value=None
        if clusters is None
        else sign_flip_p_value(differences, clusters=clusters, resamples=resamples, seed=seed),
    )


def _compare(
    without: TaskSamples, with_runtime: TaskSamples, resamples: int, seed: int
) -> tuple[list[PairedComparison], list[str], int]:
    """Paired runtime-vs-none statistics of every metric the two tasks share, notes, and the number of pairs."""
    indices = _paired_indices(without, with_runtime)
    subject = f"{without.model}: {without.label} vs {with_runtime.label}"
    if indices is None:
        return [], [f"{subject}: not paired, samples lack doc.example_id"], 0
    rows_without, rows_with = indices
    if not rows_without:
        return [], [f"{subject}: no example in common"], 0
    notes = []
    if len(rows_without) < max(len(without.example_ids), len(with_runtime.example_ids)):
        notes.append(f"{subject}: only {len(rows_without)} examples appear in both")
    metrics = [m for m in without.scores if m in with_runtime.scores]
    a_all = np.column_stack([np.asarray(without.scores[m], dtype=np.float64)[rows_without] for m in metrics])
    b_all = np.column_stack([np.asarray(with_runtime.scores[m], dtype=np.float64)[rows_with] for m in metrics])
    clusters = _clusters(without)
    if clusters is not None:
        clusters = clusters[rows_without]
    found: dict[int, PairedComparison] = {}
    for mask, columns in _groups_by_mask(a_all + b_all, metrics):  # nan where either side is excluded
        a, b = a_all[mask][:, columns], b_all[mask][:, columns]
        group_clusters = None if clusters is None else clusters[mask]
        intervals = bootstrap_cis(b - a, resamples=resamples, seed=seed)
        cluster_intervals: list[Interval | None] = [None] * len(columns)
        if group_clusters is not None:
            cluster_intervals = list(bootstrap_cis(b - a, clusters=group_clusters, resamples=resamples, seed=seed))
        for k, j in enumerate(columns):
            found[j] = _comparison(
                without,
                with_runtime,
                metrics[j],
                a[:, k],
                b[:, k],
                intervals[k],
                group_clusters,
                cluster_intervals[k],
                resamples,
                seed,
            )
    return [found[j] for j in sorted(found)], notes, len(rows_without)


def _ceilings(all_samples: list[TaskSamples]) -> list[StabilityCeiling]:
    """Per task, the stable share of the examples any model was scored on.

    Stability belongs to the dataset row, so the filters of a task share one row.
    """
    stable_by_task: dict[str, dict[str, bool | None]] = {}
    for samples in all_samples:
        flags = samples.column("stable")
        if flags is None:
            continue
        seen = stable_by_task.setdefault(samples.task, {})
        for row, (example_id, flag) in enumerate(zip(samples.example_ids, flags)):
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


def _categories(samples: TaskSamples, column: str, resamples: int, seed: int) -> list[CategorySummary]:
    """Every metric per value of a category column (values sorted, missing last), per-example CIs."""
    values = samples.column(column)
    if values is None:
        return []
    labels = np.asarray([MISSING_VALUE if v is None else v for v in values], dtype=object)
    order = sorted(set(labels), key=lambda v: (v == MISSING_VALUE, v))
    rows = []
    for value in order:
        subset = np.flatnonzero(labels == value)
        rows += [CategorySummary(column, value, s) for s in _summaries(samples, subset, False, resamples, seed)]
    return rows


def _duplicates(samples: TaskSamples, overall: list[MetricSummary], resamples: int, seed: int) -> list[CategorySummary]:
    """Every metric over all examples (``overall``, already computed) and over those that repeat no earlier one."""
    repeats = samples.column(DUPLICATE_COLUMN)
    if repeats is None:
        return []
    originals = np.flatnonzero([value is None for value in repeats])
    # The same rows under the same seed give the same figures: compute them only when rows were dropped.
    kept = overall if len(originals) == len(repeats) else _summaries(samples, originals, False, resamples, seed)
    return [CategorySummary(DUPLICATE_COLUMN, ALL_EXAMPLES, summary) for summary in overall] + [
        CategorySummary(DUPLICATE_COLUMN, WITHOUT_DUPLICATES, summary) for summary in kept
    ]


def _missing_column_notes(all_samples: list[TaskSamples]) -> tuple[list[str], list[str]]:
    """The category columns some samples have, and a note for each doc column no sample has."""
    notes = []
    if not any(_clusters(samples) is not None for samples in all_samples):
        notes.append(
            f"no sample names its {TRAJECTORY_COLUMN} in every doc: CIs and tests resampling whole trajectories omitted"
        )
    found = [c for c in CATEGORY_COLUMNS if any(s.column(c) is not None for s in all_samples)]
    for column in (*CATEGORY_COLUMNS, DUPLICATE_COLUMN):
        if not any(samples.column(column) is not None for samples in all_samples):
            notes.append(f"the samples' docs have no `{column}` column (a build older than it): its breakdown omitted")
    return found, notes


def build_report(run_dirs: Sequence[Path], *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> Report:
    """Scores with bootstrap CIs and paired runtime-vs-none tests for the run folders."""
    from threadpoolctl import threadpool_limits

    all_samples, notes = load_samples(run_dirs)
    # The resampling is many small matrix products: BLAS threads cost more than
    # they give, most of all on a busy machine (bench/bench_stats.py: on the
    # loaded 2-core machine one thread halved the report's CPU and wall time).
    with threadpool_limits(limits=1, user_api="blas"):
        return _report(run_dirs, all_samples, notes, resamples, seed)


def _report(
    run_dirs: Sequence[Path], all_samples: list[TaskSamples], notes: list[str], resamples: int, seed: int
) -> Report:
    """The figures of :func:`build_report` from the loaded samples."""
    metrics: list[str] = []
    summaries: list[MetricSummary] = []
    duplicates: list[CategorySummary] = []
    for samples in all_samples:
        overall = _summaries(samples, np.arange(len(samples.example_ids)), True, resamples, seed)
        # A metric with no value anywhere (an exec outcome null on every example) gets no column.
        metrics += [s.metric for s in overall if s.metric not in metrics]
        summaries += overall
        duplicates += _duplicates(samples, overall, resamples, seed)
    if not summaries:  # nothing to tabulate or plot
        listed = ", ".join(str(d) for d in run_dirs)
        raise InputError(f"the sample logs under {listed} hold no scored samples")
    by_key = {(s.model, s.task, s.filter): s for s in all_samples}
    comparisons: list[PairedComparison] = []
    pair_sizes: dict[tuple[str, str], set[int]] = {}
    for samples in all_samples:
        partner = by_key.get((samples.model, samples.task + RUNTIME_SUFFIX, samples.filter))
        if partner is None:
            continue
        pair_rows, pair_notes, pairs = _compare(samples, partner, resamples, seed)
        comparisons += pair_rows
        notes += pair_notes
        if pairs:
            tasks = f"{samples.task} vs {partner.task}"
            pair_sizes.setdefault((tasks, samples.split or "?"), set()).add(pairs)
    detectable = [
        DetectableEffects(tasks, split, n, tuple(disagreement_mde(n, rate) for rate in MDE_RATES))
        for (tasks, split), sizes in sorted(pair_sizes.items())
        for n in sorted(sizes)
    ]
    category_columns, column_notes = _missing_column_notes(all_samples)
    notes += column_notes
    categories = [
        row for column in category_columns for s in all_samples for row in _categories(s, column, resamples, seed)
    ]
    return Report(
        metrics=metrics,
        summaries=summaries,
        comparisons=comparisons,
        ceilings=_ceilings(all_samples),
        notes=notes,
        resamples=resamples,
        seed=seed,
        categories=categories,
        duplicates=duplicates,
        detectable=detectable,
        category_columns=category_columns,
    )
