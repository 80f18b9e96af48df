"""Scores with bootstrap CIs and paired tests of the runtime arm against the plain and placebo arms.

Every figure comes twice where the data allow: resampling examples, and
resampling whole trajectories (``doc.trajectory_id``), because examples of one
trajectory share a notebook, a person and a kernel state and so are not
independent. The runtime arm of a task is compared with its plain arm (no
runtime block) and its placebo arm (another step's block) on the same
examples; the headline metric, bits per byte of the likelihood tasks, also
within the ``runtime_only`` stratum and outside it. Metrics are also broken
down by the dataset's category columns and computed with and without
duplicate examples. Every two models scored on the same task and build are
compared the same way, model − model on the examples both scored.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from themisto.exceptions import InputError
from themisto.reporting.resampling import Resampling
from themisto.reporting.samples import (
    PLACEBO,
    PLAIN,
    RUNTIME,
    TRAJECTORY_COLUMN,
    TaskSamples,
    is_likelihood_task,
    load_samples,
)
from themisto.reporting.stats import (
    DEFAULT_RESAMPLES,
    DEFAULT_SEED,
    Interval,
    McNemarResult,
    bootstrap_cis,
    design_effect,
    disagreement_mde,
    mcnemar,
    minimum_detectable_effect,
    sign_flip_p_value,
)
from themisto.vocabulary import (
    BINARY_METRICS,
    BPB_METRIC,
    CATEGORY_COLUMNS,
    DUPLICATE_COLUMN,
    EXEC_METRICS,
    GREEDY_METRIC,
    RUNTIME_ONLY_COLUMN,
)

# Disagreement rates (share of examples whose 0/1 score differs between the
# two conditions) at which the report states the minimum detectable effect.
MDE_RATES = (0.05, 0.10, 0.20)
# The two rows of the duplicates breakdown; ALL_EXAMPLES also names the whole sample of a comparison.
ALL_EXAMPLES = "all"
WITHOUT_DUPLICATES = "without duplicates"
# A category value for samples whose doc holds null in the category column.
MISSING_VALUE = "(missing)"
# The strata of the ``runtime_only`` column (examples whose target holds a token only the runtime block
# has, and the rest), and the metrics compared within them: the headline and the generative headline.
RUNTIME_ONLY, REST = RUNTIME_ONLY_COLUMN, "rest"
STRATUM_METRICS = (BPB_METRIC, "exact_match_norm")
# The arms the runtime arm is compared with, in the order the report shows them.
REFERENCE_ARMS = (PLAIN, PLACEBO)


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
    """The runtime arm's score minus another arm's (plain or placebo) for one metric, paired by ``doc.example_id``.

    ``task`` is the task family (the plain arm's name), ``reference`` the arm
    subtracted, ``stratum`` the examples compared (all, or those in or out of
    the ``runtime_only`` stratum). ``disagreement`` is the share of pairs whose
    two scores differ; ``mde`` the minimum detectable effect at this n (for a
    binary metric at the observed disagreement rate, else from the spread of
    the differences; ``nan`` when no pair differs). The ``clustered_*`` figures
    resample and flip whole trajectories (``clusters`` of them), and
    ``clustered_mde`` widens a continuous metric's MDE by the ``design_effect``
    of the trajectories; all None where trajectories are unknown.
    """

    model: str
    task: str
    reference: str
    reference_task: str
    runtime_task: str
    metric: str
    n: int
    mean_reference: float
    mean_runtime: float
    difference: Interval
    p_value: float
    mcnemar: McNemarResult | None
    disagreement: float
    mde: float
    stratum: str = ALL_EXAMPLES
    clusters: int = 0
    clustered_difference: Interval | None = None
    clustered_p_value: float | None = None
    clustered_mde: float | None = None
    design_effect: float | None = None

    @property
    def contrast(self) -> str:
        """``runtime − plain`` or ``runtime − placebo``."""
        return f"{RUNTIME} − {self.reference}"

    @property
    def quoted_p_value(self) -> float:
        """The p-value to quote: flipping whole trajectories where they are known."""
        return self.p_value if self.clustered_p_value is None else self.clustered_p_value

    @property
    def quoted_difference(self) -> Interval:
        """The interval to quote: resampling whole trajectories where they are known."""
        return self.difference if self.clustered_difference is None else self.clustered_difference


# The level below which a model comparison's sign-flip p, with an interval excluding 0, separates the models.
SEPARATING_P = 0.05


@dataclass(frozen=True)
class ModelComparison:
    """One model's score minus another's on one task (arm) and build, paired by ``doc.example_id``.

    ``figures`` holds the paired statistics of ``model_b − model_a`` in the arms' record: ``model_a`` stands
    in the reference role (``mean_reference``), ``model_b`` in the runtime role (``mean_runtime``), and
    ``difference`` is b − a per example, averaged. ``build`` is the build both evaluated (None when not logged).
    """

    model_a: str
    model_b: str
    task: str
    build: str | None
    figures: PairedComparison

    @property
    def separated(self) -> bool:
        """Whether the quoted 95% interval of b − a (whole trajectories where known) excludes 0, with p < 0.05.

        The p guards the degenerate case: one trajectory resampled gives a zero-width interval, and a
        sign-flip p of 1.
        """
        interval = self.figures.quoted_difference
        excludes = not math.isnan(interval.estimate) and (interval.high < 0 or interval.low > 0)
        return excludes and self.figures.quoted_p_value < SEPARATING_P

    @property
    def verdict(self) -> str:
        """The plain statement: which model the benchmark ranks above (better than) the other, or that it does not
        separate them. Better is lower bits per byte, and a higher score of every other metric."""
        if not self.separated:
            return "does not separate them at this n"
        lower, higher = (
            (self.model_b, self.model_a) if self.figures.quoted_difference.high < 0 else (self.model_a, self.model_b)
        )
        better, worse = (lower, higher) if self.figures.metric == BPB_METRIC else (higher, lower)
        return f"ranks {better} above {worse}"


@dataclass(frozen=True)
class DetectableEffects:
    """Minimum detectable effects of a binary metric for one task family and split, at :data:`MDE_RATES`."""

    task: str
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
    # The splits and builds the runs evaluated, as their logs name them (empty where not logged).
    splits: list[str]
    builds: list[str]
    # Every pair of models scored on the same task and build: b − a on the examples both scored.
    models_compared: list[ModelComparison] = field(default_factory=list)


def _clusters(samples: TaskSamples) -> np.ndarray | None:
    """Each sample's trajectory id, or None when a sample does not name it."""
    ids = samples.column(TRAJECTORY_COLUMN)
    return None if ids is None or None in ids else np.asarray(ids)


def _is_binary(metric: str, values: np.ndarray) -> bool:
    """Whether a metric is a 0/1 outcome (exact match, greedy match, an exec outcome) and its values say so."""
    return metric in (*BINARY_METRICS, GREEDY_METRIC, *EXEC_METRICS) and bool(np.all(np.isin(values, [0, 1])))


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


def _paired_indices(reference: TaskSamples, runtime: TaskSamples) -> tuple[list[int], list[int]] | None:
    """Row indices of the examples both tasks scored, aligned by example id (never by position)."""
    if None in reference.example_ids or None in runtime.example_ids:
        return None
    for samples in (reference, runtime):
        if len(set(samples.example_ids)) != len(samples.example_ids):
            raise InputError(f"{samples.source}: duplicate doc.example_id values")
    position = {example_id: i for i, example_id in enumerate(runtime.example_ids)}
    pairs = [(i, position[e]) for i, e in enumerate(reference.example_ids) if e in position]
    return [i for i, _ in pairs], [j for _, j in pairs]


@dataclass(frozen=True)
class _Pairs:
    """Two arms' scores on the examples both scored, aligned: what every paired figure is computed from."""

    reference: TaskSamples
    runtime: TaskSamples
    metrics: list[str]
    a: np.ndarray  # (pairs, metrics): the reference arm's scores
    b: np.ndarray  # the runtime arm's scores of the same examples
    clusters: np.ndarray | None
    # Per pair the runtime arm's ``runtime_only`` flag (None where unknown); None where the column is absent.
    runtime_only: list[bool | None] | None


def _comparison(
    pairs: _Pairs,
    metric: str,
    a: np.ndarray,
    b: np.ndarray,
    intervals: tuple[Interval, Interval | None],
    clusters: np.ndarray | None,
    stratum: str,
    resamples: int,
    seed: int,
) -> PairedComparison:
    """One metric's paired statistics, given its difference CIs (examples, whole trajectories)."""
    differences = b - a
    binary = _is_binary(metric, np.concatenate([a, b]))
    disagreement = float(np.mean(differences != 0))
    if disagreement == 0:
        mde = math.nan  # no pair differs: an MDE "at this data" would read 0, as if power were perfect
    elif binary:
        mde = disagreement_mde(len(differences), disagreement)
    else:
        mde = minimum_detectable_effect(differences)
    clustered_mde = None
    if clusters is not None:
        # The design effect widens the spread-based MDE only; a 0/1 metric's MDE comes from its disagreement rate.
        unusable = binary or disagreement == 0
        clustered_mde = math.nan if unusable else minimum_detectable_effect(differences, clusters=clusters)
    return PairedComparison(
        model=pairs.reference.model,
        task=pairs.reference.family,
        reference=pairs.reference.arm,
        reference_task=pairs.reference.label,
        runtime_task=pairs.runtime.label,
        metric=metric,
        n=len(differences),
        mean_reference=float(a.mean()),
        mean_runtime=float(b.mean()),
        difference=intervals[0],
        p_value=sign_flip_p_value(differences, resamples=resamples, seed=seed),
        mcnemar=mcnemar(a, b) if binary else None,
        disagreement=disagreement,
        mde=mde,
        stratum=stratum,
        clusters=0 if clusters is None else len(np.unique(clusters)),
        clustered_difference=intervals[1],
        clustered_p_value=None
        if clusters is None
        else sign_flip_p_value(differences, clusters=clusters, resamples=resamples, seed=seed),
        clustered_mde=clustered_mde,
        design_effect=None if clusters is None else design_effect(differences, clusters),
    )


def _compare_rows(
    pairs: _Pairs, rows: np.ndarray, metrics: list[str], stratum: str, resamples: int, seed: int
) -> list[PairedComparison]:
    """Paired statistics of the given metrics over the given pairs."""
    columns_of = [pairs.metrics.index(m) for m in metrics]
    a_all, b_all = pairs.a[rows][:, columns_of], pairs.b[rows][:, columns_of]
    clusters = None if pairs.clusters is None else pairs.clusters[rows]
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
                pairs,
                metrics[j],
                a[:, k],
                b[:, k],
                (intervals[k], cluster_intervals[k]),
                group_clusters,
                stratum,
                resamples,
                seed,
            )
    return [found[j] for j in sorted(found)]


def _pairs(reference: TaskSamples, runtime: TaskSamples, subject: str | None = None) -> tuple[_Pairs | None, list[str]]:
    """Two arms' (or two models') scores aligned by example id, or None with a note on why they cannot be paired."""
    indices = _paired_indices(reference, runtime)
    subject = subject or f"{reference.model}: {reference.label} vs {runtime.label}"
    if indices is None:
        return None, [f"{subject}: not paired, samples lack doc.example_id"]
    rows_reference, rows_runtime = indices
    if not rows_reference:
        return None, [f"{subject}: no example in common"]
    notes = []
    if len(rows_reference) < max(len(reference.example_ids), len(runtime.example_ids)):
        notes.append(f"{subject}: only {len(rows_reference)} examples appear in both")
    metrics = [m for m in reference.scores if m in runtime.scores]
    a = np.column_stack([np.asarray(reference.scores[m], dtype=np.float64)[rows_reference] for m in metrics])
    b = np.column_stack([np.asarray(runtime.scores[m], dtype=np.float64)[rows_runtime] for m in metrics])
    clusters = _clusters(reference)
    # The runtime arm's flag: the stratum is defined by the real runtime block, not the placebo's.
    flags = runtime.column(RUNTIME_ONLY_COLUMN)
    runtime_only = None if flags is None else [flags[j] for j in rows_runtime]
    aligned = _Pairs(
        reference, runtime, metrics, a, b, None if clusters is None else clusters[rows_reference], runtime_only
    )
    return aligned, notes


def _compare(
    reference: TaskSamples, runtime: TaskSamples, resamples: int, seed: int
) -> tuple[list[PairedComparison], list[str], int]:
    """Paired statistics of every metric the two arms share (and of the stratum metrics per stratum), notes, pairs."""
    pairs, notes = _pairs(reference, runtime)
    if pairs is None:
        return [], notes, 0
    count = len(pairs.a)
    comparisons = _compare_rows(pairs, np.arange(count), pairs.metrics, ALL_EXAMPLES, resamples, seed)
    stratum_metrics = [m for m in STRATUM_METRICS if m in pairs.metrics]
    if pairs.runtime_only is not None and stratum_metrics:
        for stratum, flag in ((RUNTIME_ONLY, True), (REST, False)):
            rows = np.flatnonzero([value is flag for value in pairs.runtime_only])
            if len(rows):
                comparisons += _compare_rows(pairs, rows, stratum_metrics, stratum, resamples, seed)
    return comparisons, notes, count


# The metrics compared between models: the headline, and the generative headline and chrF.
MODEL_METRICS = (BPB_METRIC, "exact_match_norm", "chrf")


def model_comparisons(
    all_samples: list[TaskSamples], resamples: int, seed: int
) -> tuple[list[ModelComparison], list[str]]:
    """Every pair of models on every task, filter and build both scored: b − a of the model metrics, and notes."""
    groups: dict[tuple[str, str, str | None, str | None], list[TaskSamples]] = {}
    for samples in all_samples:
        groups.setdefault((samples.task, samples.filter, samples.build, samples.split), []).append(samples)
    found: list[ModelComparison] = []
    notes: list[str] = []
    for (_, _, build, _), members in sorted(groups.items(), key=lambda item: tuple(map(str, item[0]))):
        members = sorted(members, key=lambda s: s.model)
        for i, first in enumerate(members):
            for second in members[i + 1 :]:
                pairs, pair_notes = _pairs(first, second, f"{first.label}: {first.model} vs {second.model}")
                notes += pair_notes
                metrics = [m for m in MODEL_METRICS if pairs is not None and m in pairs.metrics]
                if pairs is None or not metrics:
                    continue
                rows = _compare_rows(pairs, np.arange(len(pairs.a)), metrics, ALL_EXAMPLES, resamples, seed)
                found += [ModelComparison(first.model, second.model, first.label, build, row) for row in rows]
    return found, notes


def _ceilings(all_samples: list[TaskSamples]) -> list[StabilityCeiling]:
    """Per generative task, the stable share of the examples any model was scored on.

    Stability belongs to the dataset row, so the filters of a task share one
    row; the likelihood tasks read the same rows and bits per byte has no
    ceiling, so they get none.
    """
    stable_by_task: dict[str, dict[str, bool | None]] = {}
    for samples in all_samples:
        flags = samples.column("stable")
        if flags is None or is_likelihood_task(samples.task):
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
    for column in (*CATEGORY_COLUMNS, DUPLICATE_COLUMN, RUNTIME_ONLY_COLUMN):
        if not any(samples.column(column) is not None for samples in all_samples):
            notes.append(f"the samples' docs have no `{column}` column (a build older than it): its breakdown omitted")
    return found, notes


def build_report(run_dirs: Sequence[Path], *, resamples: int = DEFAULT_RESAMPLES, seed: int = DEFAULT_SEED) -> Report:
    """Scores with bootstrap CIs and paired tests of the runtime arm for the run folders."""
    from threadpoolctl import threadpool_limits

    Resampling(resamples=resamples, seed=seed)  # an OptionError naming the option, before anything is read
    all_samples, notes = load_samples(run_dirs)
    # The resampling is many small matrix products: BLAS threads cost more than
    # they give, most of all on a busy machine (bench/bench_stats.py: on the
    # loaded 2-core machine one thread halved the report's CPU and wall time).
    with threadpool_limits(limits=1, user_api="blas"):
        return _report(run_dirs, all_samples, notes, resamples, seed)


def _empty_target_notes(samples: TaskSamples) -> list[str]:
    """A note where a likelihood task's empty targets (no bytes) were left out of its bits per byte."""
    values = samples.scores.get(BPB_METRIC)
    empty = 0 if values is None else int(np.count_nonzero(np.isnan(values)))
    if not empty:
        return []
    return [f"{samples.model}: {samples.label}: {empty} examples with an empty target have no bits per byte; left out"]


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
        notes += _empty_target_notes(samples)
    if not summaries:  # nothing to tabulate or plot
        listed = ", ".join(str(d) for d in run_dirs)
        raise InputError(f"the sample logs under {listed} hold no scored samples")
    by_arm = {(s.model, s.family, s.filter, s.arm): s for s in all_samples}
    comparisons: list[PairedComparison] = []
    pair_sizes: dict[tuple[str, str], set[int]] = {}
    for runtime in (s for s in all_samples if s.arm == RUNTIME):
        for arm in REFERENCE_ARMS:
            reference = by_arm.get((runtime.model, runtime.family, runtime.filter, arm))
            if reference is None:
                continue
            pair_rows, pair_notes, pairs = _compare(reference, runtime, resamples, seed)
            comparisons += pair_rows
            notes += pair_notes
            if pairs:
                pair_sizes.setdefault((runtime.family, runtime.split or "?"), set()).add(pairs)
    detectable = [
        DetectableEffects(task, split, n, tuple(disagreement_mde(n, rate) for rate in MDE_RATES))
        for (task, split), sizes in sorted(pair_sizes.items())
        for n in sorted(sizes)
    ]
    models_compared, model_notes = model_comparisons(all_samples, resamples, seed)
    notes += model_notes
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
        splits=sorted({s.split for s in all_samples if s.split is not None}),
        builds=sorted({s.build for s in all_samples if s.build is not None}),
        models_compared=models_compared,
    )
