"""Read lm-eval sample logs: every model's per-sample scores of every task, paired by example id.

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

from themisto.exceptions import InputError
from themisto.jsonl import iter_json_objects

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
    if not isinstance(content, dict):
        return folder.name
    config = content.get("config")
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
