"""lm-eval's files on disk: the task folder and its task versions; sample logs, named and dated by lm-eval's rule.

The task folder ships with the package (:func:`tasks_path`); each task YAML's ``metadata: version`` is
bumped when its prompts or scoring change, so a build records the versions it was made for
(:func:`task_versions`) and every reader of a build refuses one made for others.

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
from functools import cache
from pathlib import Path

from themisto.exceptions import InputError

SAMPLE_LOG_GLOB = "samples_*.jsonl"
_PACKAGE_DIR = Path(__file__).resolve().parent


def bundled_path(name: str) -> Path:
    """A top-level resource folder (``lm_eval_tasks``, ``hf_dataset``) of this installation.

    A wheel carries it inside the package (see setup.py); a source checkout or
    an editable install keeps it at the repository root, next to the package.
    """
    inside = _PACKAGE_DIR / name
    return inside if inside.is_dir() else _PACKAGE_DIR.parent / name


def tasks_path() -> Path:
    """The folder holding the Themisto lm-eval task YAMLs (pass it to ``--include_path``)."""
    return bundled_path("lm_eval_tasks") / "themisto"


@cache
def task_versions() -> dict[str, str]:
    """``task -> version`` from every task YAML of the task folder (the groups' files start with ``_``)."""
    import yaml

    versions = {}
    for path in sorted(tasks_path().glob("themisto*.yaml")):
        config = yaml.safe_load(path.read_text(encoding="utf-8"))
        versions[str(config["task"])] = str(config["metadata"]["version"])
    return versions


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
