"""Sources the recorder replays: notebooks and JuNE event logs, read into actions.

A source file yields one or more :class:`SourceTrajectory` objects, each a
sequence of actions for one live kernel: :class:`Execute` (run this code) and
:class:`Restart` (restart the kernel).

Trajectory ids are stable, so re-recording and ``--resume`` find the same file:

- a notebook ``dir/name.ipynb`` gives the id ``name``;
- a JuNE log ``dir/log.csv`` gives ``log-<first 8 characters of kernel_id>``
  per kernel; if two kernels of a log share that prefix (or a kernel_id has
  characters unfit for a file name) every kernel of that log is named
  ``log-<index>`` instead, the 0-based order of the kernel's first event.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from themisto.exceptions import SourceError

NOTEBOOK_SUFFIXES = (".ipynb",)
LOG_SUFFIXES = (".csv", ".jsonl", ".parquet")


@dataclass(frozen=True)
class Execute:
    """Run ``code`` as the cell ``cell_id``; ``original_output`` is what the source saw, if known."""

    cell_id: str
    code: str
    original_output: str | None = None


@dataclass(frozen=True)
class Restart:
    """Restart the kernel: the next execution starts from an empty namespace."""


Action = Execute | Restart


@dataclass
class SourceTrajectory:
    """The actions of one kernel session, in execution order."""

    trajectory_id: str
    source: Path
    actions: list[Action] = field(default_factory=list)

    @property
    def executions(self) -> list[Execute]:
        """The executions alone, one per step the trajectory records."""
        return [action for action in self.actions if isinstance(action, Execute)]


def source_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Expand files and folders into source files; a folder contributes its notebooks and logs, sorted."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            inside = sorted(p for p in path.iterdir() if p.suffix in NOTEBOOK_SUFFIXES + LOG_SUFFIXES)
            if not inside:
                raise SourceError(f"{path}: folder holds no .ipynb, .csv, .jsonl or .parquet source")
            found.extend(inside)
        elif path.is_file():
            found.append(path)
        else:
            raise SourceError(f"no such source file or folder: {path}")
    return found


def read_source(path: str | os.PathLike[str]) -> list[SourceTrajectory]:
    """Read a notebook or JuNE log, chosen by file suffix."""
    path = Path(path)
    if path.suffix in NOTEBOOK_SUFFIXES:
        from themisto.recording.sources.notebook import read_notebook

        return [read_notebook(path)]
    if path.suffix in LOG_SUFFIXES:
        from themisto.recording.sources.june import read_june_log

        return read_june_log(path)
    raise SourceError(
        f"{path}: unknown source type {path.suffix or '(no suffix)'!r};"
        " expected .ipynb or a JuNE log (.csv, .jsonl, .parquet)"
    )


def read_sources(paths: Iterable[str | os.PathLike[str]]) -> list[SourceTrajectory]:
    """Read every source (files or folders) and check that trajectory ids are unique."""
    trajectories: list[SourceTrajectory] = []
    seen: dict[str, Path] = {}
    for path in source_files(paths):
        for trajectory in read_source(path):
            if trajectory.trajectory_id in seen:
                raise SourceError(
                    f"trajectory id {trajectory.trajectory_id!r} comes from both"
                    f" {seen[trajectory.trajectory_id]} and {path}; rename one of them"
                )
            seen[trajectory.trajectory_id] = path
            trajectories.append(trajectory)
    return trajectories
