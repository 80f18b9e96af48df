"""Read lm-eval sample logs: every model's per-sample scores of every task, paired by example id.

lm-eval run with ``--log_samples --output_path RUN_DIR`` writes, per model,
``RUN_DIR/<model_name_sanitized>/samples_<task>_<timestamp>.jsonl`` (one line
per document and filter: ``doc``, ``filter``, ``metrics`` — the names of the
per-sample metrics — and each metric's value under its name) next to
``results_<timestamp>.json`` (``model_name``, ``config.model``, and per task
its config, whose metadata names the Themisto split). Sample logs are searched
recursively, so any folder layout works; file names are parsed with lm-eval's
own helpers and the newest run of each task in a folder is used. A row names
its lm-eval filter (``task [filter]``) only when the model's task was logged
under more than one.

A likelihood task (``*_bpb``) logs ``bits_per_byte`` as lm-eval's pair
``[loglikelihood in nats, UTF-8 bytes of the target]``; it becomes the
example's bits per byte, ``-loglikelihood / bytes / ln 2`` (``nan`` for an
empty target, which has no bytes to divide by).

``themisto exec-score`` may have written ``exec_samples_<task>.jsonl`` next to
a task's log: one line per example with ``example_id`` and the 0/1 (or
true/false) outcomes ``exec_ok``, ``exec_match`` and ``state_match``, null
where the example is excluded (and optionally ``filter`` and ``error``). They
join the task's samples by example id as further metrics; an excluded or
missing outcome is ``nan`` in :attr:`TaskSamples.scores`.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themisto.exceptions import InputError
from themisto.jsonl import iter_json_objects
from themisto.lm_eval_files import SampleLogFile, find_sample_log_files, newest_sample_logs, task_versions
from themisto.vocabulary import (
    BPB_METRIC,
    BPB_SUFFIX,
    CATEGORY_COLUMNS,
    DATA_KEY,
    DEFAULT_SPLIT,
    DUPLICATE_COLUMN,
    EXEC_METRICS,
    EXEC_SAMPLES_PREFIX,
    PLACEBO_SUFFIX,
    RUN_KEY,
    RUNTIME_ONLY_COLUMN,
    RUNTIME_SUFFIX,
    SPLIT_KEY,
    arm_of,
)

# The doc fields the report reads besides ``example_id``.
TRAJECTORY_COLUMN = "trajectory_id"
STABLE_COLUMN = "stable"
# Doc columns holding a bool (the others are read as strings).
_BOOL_COLUMNS = (STABLE_COLUMN, RUNTIME_ONLY_COLUMN)
DOC_COLUMNS = (TRAJECTORY_COLUMN, STABLE_COLUMN, RUNTIME_ONLY_COLUMN, *CATEGORY_COLUMNS, DUPLICATE_COLUMN)
# The three arms of a task, named by what the prompt carries.
PLAIN, RUNTIME, PLACEBO = "plain", "runtime", "placebo"


def task_arm(task: str) -> tuple[str, str]:
    """A task's family (the plain arm's name) and its arm: ``themisto_output_placebo_bpb`` -> (``themisto_output_bpb``, placebo)."""
    suffix = arm_of(task)
    likelihood = task.endswith(BPB_SUFFIX)
    stem = task.removesuffix(BPB_SUFFIX) if likelihood else task
    family = stem.removesuffix(suffix) + (BPB_SUFFIX if likelihood else "")
    return family, {RUNTIME_SUFFIX: RUNTIME, PLACEBO_SUFFIX: PLACEBO}.get(suffix, PLAIN)


def is_likelihood_task(task: str) -> bool:
    """Whether a task scores the gold target's likelihood (bits per byte) rather than a generation."""
    return task.endswith(BPB_SUFFIX)


@dataclass
class TaskSamples:
    """One model's per-sample scores on one task (and lm-eval filter)."""

    model: str
    task: str
    filter: str
    source: Path
    # The Themisto split the run evaluated (None when the run left no results file).
    split: str | None = None
    # The build evaluated, as the run's task metadata names it (None when not logged).
    build: str | None = None
    example_ids: list[str | None] = field(default_factory=list)
    # Each of DOC_COLUMNS per sample: str values (bool for ``stable``), None where absent.
    docs: dict[str, list[Any]] = field(default_factory=lambda: {name: [] for name in DOC_COLUMNS})
    # The DOC_COLUMNS at least one doc has (a null value counts: the build has the column).
    present: set[str] = field(default_factory=set)
    # Per metric, one value per sample; ``nan`` for an exec metric's excluded examples and an empty target's bits per byte.
    scores: dict[str, list[float]] = field(default_factory=dict)
    # Set by load_samples when the model's task was logged under several filters.
    filter_shown: bool = False

    @property
    def label(self) -> str:
        """The task name, with ``[filter]`` when the filter tells this row from another."""
        return f"{self.task} [{self.filter}]" if self.filter_shown else self.task

    @property
    def family(self) -> str:
        """The task's family (its plain arm's name), with ``[filter]`` as in :attr:`label`."""
        family = task_arm(self.task)[0]
        return f"{family} [{self.filter}]" if self.filter_shown else family

    @property
    def arm(self) -> str:
        """plain, runtime or placebo."""
        return task_arm(self.task)[1]

    def column(self, name: str) -> list[Any] | None:
        """A doc column's values per sample, or None when no doc has it (a build older than the column)."""
        return self.docs[name] if name in self.present else None


def _sample_files(run_dirs: Sequence[Path]) -> list[SampleLogFile]:
    """Every lm-eval sample log under the run folders, or an InputError."""
    files = find_sample_log_files(run_dirs)
    if not files:
        listed = ", ".join(str(d) for d in run_dirs)
        raise InputError(
            f"no lm-eval sample files (samples_<task>_<timestamp>.jsonl) under {listed}; "
            "run lm-eval with --log_samples --output_path"
        )
    return files


def read_json(path: Path) -> object:
    """A JSON file's content, or an InputError naming the file."""
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise InputError(f"{path}: cannot read JSON: {exc}") from None


def _run_info(folder: Path, stamp: str) -> tuple[str, dict[str, Any]]:
    """The model's name and the task configs from the run's results file (else the folder's name, no configs).

    lm-eval takes ``model_name`` from the model args (``pretrained=...``) and
    makes up a random id when there is none (e.g. a baseline without args); then
    the model type ``config.model`` names the model better.
    """
    results = folder / f"results_{stamp}.json"
    if not results.is_file():
        return folder.name, {}
    content = read_json(results)
    if not isinstance(content, dict) or not isinstance(content.get("config"), dict):
        return folder.name, {}
    config = content["config"]
    configs = content.get("configs")
    configs = configs if isinstance(configs, dict) else {}
    _check_task_versions(results, configs)
    run = content.get(RUN_KEY)
    if isinstance(run, dict) and isinstance(run.get("name"), str) and run["name"]:
        return run["name"], configs  # the short name themisto eval filed the run under
    name = content.get("model_name")
    if isinstance(name, str) and name and name in str(config.get("model_args") or ""):
        return name, configs
    model = config.get("model")
    return (model if isinstance(model, str) and model else folder.name), configs


def _check_task_versions(results: Path, configs: dict[str, Any]) -> None:
    """Refuse a run scored under another version of a task than this Themisto's (older prompts or scoring)."""
    current = task_versions()
    for task, config in configs.items():
        metadata = config.get("metadata") if isinstance(config, dict) else None
        logged = metadata.get("version") if isinstance(metadata, dict) else None
        if task in current and logged is not None and str(logged) != current[task]:
            raise InputError(
                f"{results}: {task} was scored as version {logged}, this Themisto's is {current[task]}:"
                f" evaluate again (themisto eval) on a build of this version"
            )


def _split_and_build(configs: dict[str, Any], task: str) -> tuple[str | None, str | None]:
    """The Themisto split and build a task was evaluated on, from its logged config; None when not logged."""
    config = configs.get(task)
    if not isinstance(config, dict):
        return None, None
    metadata = config.get("metadata")
    metadata = metadata if isinstance(metadata, dict) else {}
    split, build = metadata.get(SPLIT_KEY), metadata.get(DATA_KEY)
    return (split if isinstance(split, str) else DEFAULT_SPLIT), (build if isinstance(build, str) else None)


def _bits_per_byte(value: object, where: str) -> float:
    """lm-eval's ``[loglikelihood, bytes]`` pair as bits per byte (``nan`` for 0 bytes), or an InputError."""
    if (
        isinstance(value, list)
        and len(value) == 2
        and all(isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) for v in value)
        and value[1] >= 0
    ):
        loglikelihood, size = value
        return math.nan if size == 0 else -loglikelihood / size / math.log(2)
    raise InputError(f"{where}: metric {BPB_METRIC!r} is {value!r}, not [loglikelihood, bytes]")


def _metric_value(record: dict[str, Any], name: str, where: str) -> float:
    """One per-sample metric value as a float, or an InputError."""
    value = record.get(name)
    if name == BPB_METRIC:  # only the pair: a bare number could be nats or bits, per byte or in total
        return _bits_per_byte(value, where)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise InputError(f"{where}: metric {name!r} is {value!r}, not a finite number")
    return float(value)


def _doc_value(name: str, value: object) -> Any:
    """A doc column's value as the report uses it: a bool column a bool, the others a string; None otherwise."""
    if name in _BOOL_COLUMNS:
        return value if isinstance(value, bool) else None
    return None if value is None else str(value)


def _read_samples(path: Path, model: str, task: str) -> list[TaskSamples]:
    """The samples of one log file, one :class:`TaskSamples` per lm-eval filter."""
    return samples_of_records(iter_json_objects(path, InputError, "sample log"), path, model, task)


def samples_of_records(
    records: Iterable[tuple[int, dict[str, Any]]], source: Path, model: str, task: str
) -> list[TaskSamples]:
    """lm-eval sample records (numbered, as a log's lines or ``results["samples"][task]``), one :class:`TaskSamples` per filter."""
    path = source
    by_filter: dict[str, TaskSamples] = {}
    for number, record in records:
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
        for column in DOC_COLUMNS:
            samples.docs[column].append(_doc_value(column, doc.get(column)))
        samples.present.update(column for column in DOC_COLUMNS if column in doc)
    for samples in by_filter.values():
        lengths = {len(values) for values in samples.scores.values()}
        if lengths - {len(samples.example_ids)}:
            raise InputError(f"{path}: samples of filter {samples.filter!r} list different metrics")
    return list(by_filter.values())


def _exec_outcome(record: dict[str, Any], name: str, where: str) -> float:
    """One exec-score outcome: 1.0 or 0.0, ``nan`` when null (the example is excluded), else an InputError."""
    if name not in record:
        raise InputError(f"{where}: no {name!r} (exec sample lines need example_id, {', '.join(EXEC_METRICS)})")
    value = record[name]
    if value is None:
        return math.nan
    if isinstance(value, bool | int | float) and value in (0, 1):
        return float(value)
    raise InputError(f"{where}: {name!r} is {value!r}, not 0, 1, true, false or null")


def _read_exec(path: Path) -> dict[tuple[str | None, str], dict[str, float]]:
    """An exec sample file's outcomes by (filter or None, example id)."""
    outcomes: dict[tuple[str | None, str], dict[str, float]] = {}
    for number, record in iter_json_objects(path, InputError, "exec sample file"):
        where = f"{path}:{number}"
        example_id = record.get("example_id")
        if example_id is None:
            raise InputError(f"{where}: no 'example_id'")
        filter_name = record.get("filter")
        key = (None if filter_name is None else str(filter_name), str(example_id))
        if key in outcomes:
            raise InputError(f"{where}: example {key[1]!r} appears twice")
        outcomes[key] = {name: _exec_outcome(record, name, where) for name in EXEC_METRICS}
    return outcomes


def _join_exec(path: Path, task_samples: list[TaskSamples]) -> list[str]:
    """Add the exec outcomes of ``path`` to the samples as metrics; notes on examples that do not match."""
    outcomes = _read_exec(path)
    used: set[tuple[str | None, str]] = set()
    notes = []
    for samples in task_samples:
        if None in samples.example_ids:
            notes.append(f"{path}: not joined, the samples of {samples.source} lack doc.example_id")
            continue
        rows = []
        for example_id in samples.example_ids:
            key = next((k for k in ((samples.filter, example_id), (None, example_id)) if k in outcomes), None)
            if key is not None:
                used.add(key)
            rows.append(outcomes.get(key) if key is not None else None)
        for name in EXEC_METRICS:
            samples.scores[name] = [math.nan if row is None else row[name] for row in rows]
        missing = rows.count(None)
        if missing:
            notes.append(
                f"{path}: no line for {missing} of {len(rows)} examples of {samples.label}; left out of its exec metrics"
            )
    unmatched = len(outcomes) - len(used)
    if unmatched:
        notes.append(f"{path}: {unmatched} lines name examples the samples do not have; ignored")
    return notes


def _newest_logs(logs: list[SampleLogFile]) -> tuple[dict[tuple[Path, str], Path], list[str]]:
    """Per (folder, task) the newest sample log, by lm-eval's file-name conventions; notes on older ones."""
    newest, older = newest_sample_logs(logs)
    notes = [f"older run ignored: {log.path}" for log in older]
    return {(log.path.parent, log.task): log.path for log in newest}, notes


def load_samples(run_dirs: Sequence[Path]) -> tuple[list[TaskSamples], list[str]]:
    """All tasks' samples under the run folders, with their exec outcomes, and notes on what was left out."""
    from lm_eval.utils import get_file_datetime

    newest, notes = _newest_logs(_sample_files(run_dirs))
    folders_of_model: dict[str, set[Path]] = {}
    loaded: list[tuple[Path, TaskSamples]] = []
    # One results file serves all tasks of a run, and it can be large: read it once.
    runs: dict[tuple[Path, str], tuple[str, dict[str, Any]]] = {}
    for (folder, task), path in sorted(newest.items(), key=lambda item: str(item[1])):
        stamp = get_file_datetime(path.name)
        if (folder, stamp) not in runs:
            runs[folder, stamp] = _run_info(folder, stamp)
        model, configs = runs[folder, stamp]
        folders_of_model.setdefault(model, set()).add(folder)
        task_samples = _read_samples(path, model, task)
        if not task_samples:
            notes.append(f"no samples in {path}")
        for samples in task_samples:
            samples.split, samples.build = _split_and_build(configs, task)
        exec_path = folder / f"{EXEC_SAMPLES_PREFIX}{task}.jsonl"
        if exec_path.is_file():
            notes.extend(_join_exec(exec_path, task_samples))
        loaded.extend((folder, samples) for samples in task_samples)
    # The same model name in two folders (two runs with other settings) stays two rows.
    for folder, samples in loaded:
        if len(folders_of_model[samples.model]) > 1:
            samples.model = f"{samples.model} ({folder})"
    all_samples = sorted((samples for _, samples in loaded), key=lambda s: (s.model, s.task, s.filter))
    # Every Themisto task has the one filter `answer`: naming it in each row is
    # noise. Only a task logged under several filters (a task config with
    # strict and flexible extraction) needs the name to keep its rows apart.
    filters = Counter((samples.model, samples.task) for samples in all_samples)
    for samples in all_samples:
        samples.filter_shown = filters[samples.model, samples.task] > 1
    return all_samples, notes
