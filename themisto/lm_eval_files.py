"""lm-eval's sample logs on disk: found under run folders, named and dated by lm-eval's own rule, newest per task.

lm-eval writes ``<output_path>/<model>/samples_<task>_<timestamp>.jsonl`` per
task and run; a folder that holds several runs holds several logs of a task.
``exec-score`` and ``report`` read the newest of each, as lm-eval's own
``lm_eval.utils`` helpers name and date them (the task between the first and
the last underscore, the timestamp after the last), so the rule is lm-eval's
and cannot drift from it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from themisto.exceptions import InputError

SAMPLE_LOG_GLOB = "samples_*.jsonl"


@dataclass(frozen=True)
class SampleLogFile:
    """One lm-eval sample log: its path, the run folder it was found under, its task and timestamp."""

    path: Path
    run_dir: Path
    task: str
    stamp: str


def find_sample_log_files(run_dirs: Sequence[Path]) -> list[SampleLogFile]:
    """Every lm-eval sample log under ``run_dirs`` (each file once, however often its folder is given).

    Raises :class:`InputError` for a run folder that does not exist. A file
    whose name has no task by lm-eval's rule (``samples_x.jsonl``) is skipped.
    """
    from lm_eval.utils import get_file_datetime, get_file_task_name

    found: dict[Path, SampleLogFile] = {}  # by resolved path: nested or repeated folders count once
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            raise InputError(f"run folder not found: {run_dir}")
        for path in sorted(run_dir.rglob(SAMPLE_LOG_GLOB)):
            task = get_file_task_name(path.name)
            if task and path.is_file():
                found.setdefault(path.resolve(), SampleLogFile(path, run_dir, task, get_file_datetime(path.name)))
    return list(found.values())


def newest_sample_logs(logs: Sequence[SampleLogFile]) -> tuple[list[SampleLogFile], list[SampleLogFile]]:
    """The newest log of each task in each folder, by lm-eval's timestamp, and the older ones, both by path."""
    from lm_eval.utils import get_latest_filename

    by_key: dict[tuple[Path, str], dict[str, SampleLogFile]] = {}
    for log in logs:
        by_key.setdefault((log.path.parent.resolve(), log.task), {})[str(log.path)] = log
    newest = [group[get_latest_filename(list(group))] for group in by_key.values()]
    older = [log for group in by_key.values() for log in group.values() if log not in newest]
    return sorted(newest, key=lambda log: str(log.path)), sorted(older, key=lambda log: str(log.path))
