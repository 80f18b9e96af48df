"""A build made for other task versions or with another schema is refused by every reader, in one line.

The fixture build is copied and its card changed the way an older Themisto wrote it: no task versions,
an older version of one task, a column fewer. ``eval``, ``show``, ``publish`` and ``exec-score`` (through
the real CLI), ``evaluate()`` (as the ``Trainer`` callback calls it) and ``report`` (a run logged under
an older task version) each refuse it with exit 2 and one line naming the rebuild command.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from themisto.evaluation.harness import evaluate
from themisto.exceptions import InputError
from themisto.lm_eval_files import task_versions

pytestmark = pytest.mark.slow  # the CLI cases start a fresh interpreter each (seconds)

REBUILD = "rebuild it: themisto build TRAJECTORY_DIR -o "


def no_task_versions(card: str) -> str:
    """A card as Themisto wrote it before builds recorded their task versions."""
    return re.sub(r"^themisto_tasks:\n(?:  .*\n)+", "", card, flags=re.MULTILINE)


OUTPUT_VERSION = task_versions()["themisto_output"]  # this Themisto's


def older_output_task(card: str) -> str:
    """A card of a build made for version 1.0 of the output task."""
    return card.replace(f"  themisto_output: '{OUTPUT_VERSION}'\n", "  themisto_output: '1.0'\n", 1)


def column_fewer(card: str) -> str:
    """A card whose first config lacks the runtime_only column (a build from before it existed)."""
    return card.replace("  - name: runtime_only\n    dtype: bool\n", "", 1)


CHANGES: dict[str, tuple[Callable[[str], str], str]] = {
    "no versions": (no_task_versions, "built by an older Themisto (its card records no task versions"),
    "older version": (older_output_task, f"built for themisto_output version 1.0, this Themisto's is {OUTPUT_VERSION}"),
    "other schema": (column_fewer, "has another schema than this Themisto's (differs in runtime_only)"),
}


def old_build(data_dir: Path, folder: Path, change: Callable[[str], str]) -> Path:
    """A copy of the fixture build whose card ``change`` rewrote."""
    shutil.copytree(data_dir, folder)
    card = folder / "README.md"
    text = card.read_text(encoding="utf-8")
    changed = change(text)
    assert changed != text  # the fixture's card has what the change removes
    card.write_text(changed, encoding="utf-8")
    return folder


def refused(done: subprocess.CompletedProcess[str], folder: Path, expected: str) -> None:
    """Exit 2 and one error line, naming what is old and the rebuild command."""
    assert done.returncode == 2, done.stderr[-2000:]
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1 and "Traceback" not in done.stderr, done.stderr
    assert expected in errors[0] and f"{REBUILD}{folder}" in errors[0]


def themisto(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "themisto", *args], capture_output=True, text=True, timeout=300)


@pytest.mark.parametrize("case", CHANGES)
def test_eval_refuses_an_old_build(case: str, data_dir: Path, tmp_path: Path) -> None:
    change, expected = CHANGES[case]
    folder = old_build(data_dir, tmp_path / "old", change)
    done = themisto("eval", "--model", "themisto-empty", "--data", str(folder), "-o", str(tmp_path / "runs"))
    refused(done, folder, expected)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", [["show", "output_prediction"], ["publish", "me/themisto", "--dry-run"]])
def test_show_and_publish_refuse_it_alike(command: list[str], data_dir: Path, tmp_path: Path) -> None:
    change, expected = CHANGES["older version"]
    folder = old_build(data_dir, tmp_path / "old", change)
    refused(themisto(*command, "--data", str(folder)), folder, expected)


def test_evaluate_and_so_the_callback_refuse_it(data_dir: Path, tmp_path: Path) -> None:
    change, expected = CHANGES["no versions"]
    folder = old_build(data_dir, tmp_path / "old", change)
    with pytest.raises(InputError, match=re.escape(expected)):
        evaluate("themisto-empty", tasks=["themisto_output"], data=str(folder), limit=1)


@pytest.mark.kernel  # exec-score starts kernels once its inputs are read
def test_exec_score_refuses_it_before_any_kernel(data_dir: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    made = themisto("eval", "--model", "themisto-repeat-last", "--tasks", "themisto_next_cell", "--limit", "2",
                    "--data", str(data_dir), "-o", str(runs))  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    change, expected = CHANGES["other schema"]
    folder = old_build(data_dir, tmp_path / "old", change)
    refused(themisto("exec-score", str(runs), "--data", str(folder)), folder, expected)


def test_report_refuses_a_run_scored_under_an_older_task_version(data_dir: Path, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    made = themisto("eval", "--model", "themisto-empty", "--tasks", "themisto_output", "--limit", "2",
                    "--data", str(data_dir), "-o", str(runs))  # fmt: skip
    assert made.returncode == 0, made.stderr[-2000:]
    (results_file,) = runs.glob("*/results_*.json")
    results = json.loads(results_file.read_text(encoding="utf-8"))
    results["configs"]["themisto_output"]["metadata"]["version"] = 1.0
    results_file.write_text(json.dumps(results), encoding="utf-8")
    done = themisto("report", str(runs))
    assert done.returncode == 2, done.stderr[-2000:]
    (line,) = [line for line in done.stderr.splitlines() if "error:" in line]
    assert f"themisto_output was scored as version 1.0, this Themisto's is {OUTPUT_VERSION}: evaluate again" in line
