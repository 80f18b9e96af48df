"""Look up one example of a build: its rows without, with and with a placebo runtime block, as ``themisto show`` prints them."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from themisto.building.parquet import parquet_path
from themisto.exceptions import InputError, short_message
from themisto.vocabulary import ARM_SUFFIXES, SPLITS, TASK_CONFIGS, TASKS, task_of_config


@dataclass
class ExamplePair:
    """The rows of one example: without (``plain``) and with (``runtime``) the runtime block, and its ``placebo``."""

    task: str
    example_id: str
    split: str
    plain: dict[str, Any]
    runtime: dict[str, Any]
    placebo: dict[str, Any]


def find_pair(folder: str | Path, config: str, example_id: str) -> ExamplePair:
    """The rows of ``example_id`` in a built dataset (every arm), looked up in ``test`` first, then ``full``."""
    task = task_of_config(config)
    if task not in TASKS:
        raise InputError(f"unknown config {config!r}; expected one of {', '.join(TASK_CONFIGS)}")
    if not (Path(folder) / "README.md").is_file():
        raise InputError(f"{folder} is not a built dataset folder (no README.md); run `themisto build` first")
    for split in SPLITS:
        rows = []
        for name in (task + arm for arm in ARM_SUFFIXES):
            path = parquet_path(Path(folder), name, split)
            if not path.is_file():
                raise InputError(f"{path} is missing; rebuild the dataset")
            try:
                table = pq.read_table(path, filters=[("example_id", "=", example_id)])
            except (pa.ArrowException, OSError) as exc:  # a truncated or foreign file
                raise InputError(
                    f"{path}: not a readable Parquet file ({short_message(exc)}); rebuild the dataset"
                ) from None
            rows.append(table.to_pylist())
        if all(rows):
            return ExamplePair(task, example_id, split, rows[0][0], rows[1][0], rows[2][0])
    raise InputError(f"no example {example_id!r} in {task} (ids look like <trajectory_id>/<step>)")
