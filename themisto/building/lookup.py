"""Look up one example of a build: both rows of a runtime/no-runtime pair, as ``themisto show`` prints them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from themisto.building.card_reading import parquet_path
from themisto.exceptions import InputError, short_message
from themisto.vocabulary import CATEGORY_COLUMNS, RUNTIME_SUFFIX, SPLITS, TASK_CONFIGS, TASKS, task_of_config


@dataclass
class ExamplePair:
    """The two rows of one example: without (``plain``) and with (``runtime``) the runtime block."""

    task: str
    example_id: str
    split: str
    plain: dict[str, Any]
    runtime: dict[str, Any]


def find_pair(folder: str | Path, config: str, example_id: str) -> ExamplePair:
    """Both rows of ``example_id`` in a built dataset, looked up in ``test`` first, then ``full``."""
    task = _task(folder, config)
    for split in SPLITS:
        rows = [
            _read(folder, name, split, filters=[("example_id", "=", example_id)]).to_pylist()
            for name in (task, task + RUNTIME_SUFFIX)
        ]
        if rows[0] and rows[1]:
            return ExamplePair(task, example_id, split, rows[0][0], rows[1][0])
    raise InputError(f"no example {example_id!r} in {task} (ids look like <trajectory_id>/<step>)")


def list_examples(folder: str | Path, config: str, split: str) -> list[dict[str, Any]]:
    """``example_id``, ``step_kind`` and ``output_kind`` of every example of a task's ``split``, in row order."""
    table = _read(folder, _task(folder, config), split, columns=["example_id", *CATEGORY_COLUMNS])
    rows: list[dict[str, Any]] = table.to_pylist()
    return rows


def _task(folder: str | Path, config: str) -> str:
    """The task a config name belongs to, once ``folder`` is known to be a build."""
    task = task_of_config(config)
    if task not in TASKS:
        raise InputError(f"unknown config {config!r}; expected one of {', '.join(TASK_CONFIGS)}")
    if not (Path(folder) / "README.md").is_file():
        raise InputError(f"{folder} is not a built dataset folder (no README.md); run `themisto build` first")
    return task


def _read(folder: str | Path, config: str, split: str, **options: Any) -> pa.Table:
    """A config's Parquet file of ``split`` (``pq.read_table`` options), a missing or broken file one clear error."""
    path = parquet_path(Path(folder), config, split)
    if not path.is_file():
        raise InputError(f"{path} is missing; rebuild the dataset")
    try:
        return pq.read_table(path, **options)
    except (pa.ArrowException, OSError) as exc:  # a truncated or foreign file
        raise InputError(f"{path}: not a readable Parquet file ({short_message(exc)}); rebuild the dataset") from None
