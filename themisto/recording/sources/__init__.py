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

A source may also be a URL that fsspec opens (``hf://datasets/<org>/<name>``
reads the Hugging Face Hub): a file, or a folder whose logs are read in
name order. Cells whose code matches a skip pattern are left out
(:func:`skip_cells`): by default the JuNE logging plugin's cell, so a replay
never makes its network call.

- :mod:`~themisto.recording.sources.notebook`: a notebook's code cells, in execution or file order
- :mod:`~themisto.recording.sources.june`: a JuNE event log's executions, edits and restarts per kernel
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from themisto.exceptions import InputError, SourceError, one_line

NOTEBOOK_SUFFIXES = (".ipynb",)
LOG_SUFFIXES = (".csv", ".jsonl", ".parquet")
# The cell JuNE's logging plugin puts first in every notebook: it imports the plugin and calls its server.
JUNE_PLUGIN_PATTERN = r"from\s+mining_extension\s+import|check_logging\s*\("
# The orders a notebook's cells may run in (see themisto.recording.sources.notebook): by execution count, or top
# to bottom.
FILE, EXECUTION = "file", "execution"
NOTEBOOK_ORDERS = (EXECUTION, FILE)
_URL = re.compile(r"^[A-Za-z][A-Za-z0-9+.-]*://")


@dataclass(frozen=True)
class Execute:
    """Run ``code`` as the cell ``cell_id``; ``original_output`` is what the source saw, if known."""

    cell_id: str
    code: str
    original_output: str | None = None
    interrupt_after: float | None = None  # the source interrupted the cell this many seconds after its start


@dataclass(frozen=True)
class Restart:
    """Restart the kernel: the next execution starts from an empty namespace."""


Action = Execute | Restart


@dataclass
class SourceTrajectory:
    """The actions of one kernel session, in execution order."""

    trajectory_id: str
    source: Path | str  # a local file, or the URL it was read from
    actions: list[Action] = field(default_factory=list)

    @property
    def executions(self) -> list[Execute]:
        """The executions alone, one per step the trajectory records."""
        return [action for action in self.actions if isinstance(action, Execute)]


def is_url(path: str | os.PathLike[str]) -> bool:
    """Whether a source is a URL (``hf://...``, ``file://...``) rather than a local path."""
    return isinstance(path, str) and bool(_URL.match(path))


def _remote_files(url: str) -> list[str]:
    """A URL's source files: itself, or a folder's notebooks and logs in name order."""
    import fsspec

    try:
        fs, root = fsspec.core.url_to_fs(url)
        if not fs.isdir(root):
            return [url]
        protocol = url.split("://", 1)[0]
        inside = sorted(p for p in fs.find(root) if PurePosixPath(p).suffix in NOTEBOOK_SUFFIXES + LOG_SUFFIXES)
    except (OSError, ValueError, ImportError) as exc:
        raise SourceError(f"cannot read {url}: {one_line(exc)}") from None
    if not inside:
        raise SourceError(f"{url}: folder holds no .ipynb, .csv, .jsonl or .parquet source")
    return [f"{protocol}://{p}" for p in inside]


def source_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path | str]:
    """Expand files, folders and URLs into source files; a folder contributes its notebooks and logs, sorted."""
    found: list[Path | str] = []
    for raw in paths:
        if is_url(raw):
            found.extend(_remote_files(str(raw)))
            continue
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


def read_source(path: str | os.PathLike[str], notebook_order: str = "execution") -> list[SourceTrajectory]:
    """Read a notebook (its cells in ``notebook_order``, see :mod:`.notebook`) or JuNE log (a local file or a
    URL), chosen by file suffix."""
    suffix = PurePosixPath(str(path)).suffix
    if suffix in NOTEBOOK_SUFFIXES and not is_url(path):
        from themisto.recording.sources.notebook import read_notebook

        return [read_notebook(Path(path), notebook_order)]
    if suffix in LOG_SUFFIXES:
        from themisto.recording.sources.june import read_june_log

        return read_june_log(str(path) if is_url(path) else Path(path))
    raise SourceError(
        f"{path}: unknown source type {suffix or '(no suffix)'!r};"
        f" expected {'a JuNE log' if is_url(path) else '.ipynb or a JuNE log'} (.csv, .jsonl, .parquet)"
    )


def compile_skip_pattern(pattern: str | None) -> re.Pattern[str] | None:
    """The compiled skip pattern; None (skip nothing) for None or ``""``."""
    if not pattern:
        return None
    try:
        return re.compile(pattern)
    except re.error as exc:
        raise InputError(f"skip pattern {pattern!r} is not a regular expression: {exc}") from None


def skip_cells(trajectories: list[SourceTrajectory], pattern: str | None) -> list[SourceTrajectory]:
    """The trajectories without the executions whose code matches ``pattern`` (searched anywhere in the code).

    A trajectory the pattern leaves with no execution is dropped; restarts stay where they were. One that
    had no execution to begin with (a notebook without code cells) is kept, so recording it says so.
    """
    compiled = compile_skip_pattern(pattern)
    if compiled is None:
        return trajectories
    kept = []
    for trajectory in trajectories:
        actions = [a for a in trajectory.actions if not (isinstance(a, Execute) and compiled.search(a.code))]
        if any(isinstance(action, Execute) for action in actions) or not trajectory.executions:
            kept.append(SourceTrajectory(trajectory.trajectory_id, trajectory.source, actions))
    return kept


def read_sources(
    paths: Iterable[str | os.PathLike[str]], skip_pattern: str | None = None, notebook_order: str = "execution"
) -> list[SourceTrajectory]:
    """Read every source (files, folders or URLs), check that trajectory ids are unique, skip matching cells."""
    trajectories: list[SourceTrajectory] = []
    seen: dict[str, Path | str] = {}
    for path in source_files(paths):
        for trajectory in read_source(path, notebook_order):
            if trajectory.trajectory_id in seen:
                raise SourceError(
                    f"trajectory id {trajectory.trajectory_id!r} comes from both"
                    f" {seen[trajectory.trajectory_id]} and {path}; rename one of them"
                )
            seen[trajectory.trajectory_id] = path
            trajectories.append(trajectory)
    return skip_cells(trajectories, skip_pattern)
