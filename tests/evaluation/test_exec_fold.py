"""A step's predictions forked on the request of the replay cell before it (``ForkingSession.run_cell_then_fork``):
the same scores as a fork request of their own, one round trip fewer, with real kernels and confined children."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from exec_logs import write_next_cell_logs

from themisto.evaluation.exec import ExecReport, exec_samples_name, exec_score
from themisto.kernel.environment import FORK_ABI
from themisto.kernel.forking import ForkingSession
from themisto.kernel.inside import landlock
from themisto.kernel.recorder import Recorder
from themisto.kernel.transport import KernelSession
from themisto.recording.options import RecordOptions
from themisto.trajectory import write_trajectory
from themisto.vocabulary import NEXT_CELL_TASK, REFERENCE_MODEL

pytestmark = [
    pytest.mark.kernel,
    pytest.mark.skipif(landlock.abi_version() < FORK_ABI, reason="a run rides on a cell's request when confined"),
]

SCORED = ("exec_ok", "exec_match", "state_match", "diverged", "tampered", "error")


def _recorded(tmp_path: Path, cells: list[str], timeout: float = 60) -> tuple[Path, Path, list[Any]]:
    """``cells`` recorded in a real kernel working in a folder of their own: the trajectory, the folder, the steps."""
    workdir = tmp_path / "files"
    workdir.mkdir()
    (workdir / "data.txt").write_text("seed")
    path = tmp_path / "fold.jsonl"
    with Recorder(path.stem, workdir, RecordOptions(timeout=timeout, workdir=workdir)) as recorder:
        steps = [recorder.run_cell(code, f"c{number}") for number, code in enumerate(cells)]
    write_trajectory(path, steps)
    return path, workdir, steps


def _scored(
    tmp_path: Path,
    name: str,
    recorded: tuple[Path, Path, list[Any]],
    predictions: dict[int, list[str]],
    monkeypatch: pytest.MonkeyPatch,
    folds: bool,
    timeout: float = 60,
) -> tuple[dict[tuple[str, int], tuple[Any, ...]], ExecReport, int]:
    """Score ``predictions`` ({step: codes}, each code a model of its own) with or without the fold: each
    scored line by (model, step), the report, and how many requests the kernels were sent."""
    path, workdir, steps = recorded
    run_dir = tmp_path / name
    models: dict[tuple[str, str], dict[int, str]] = {}
    for step, codes in predictions.items():
        for index, code in enumerate(codes):
            models.setdefault((f"m{index}", NEXT_CELL_TASK), {})[step] = code
    write_next_cell_logs(run_dir, steps, models)
    sent = [0]
    execute = KernelSession.execute

    def counted(session: KernelSession, *args: Any, **kwargs: Any) -> Any:
        sent[0] += 1
        return execute(session, *args, **kwargs)

    with monkeypatch.context() as patched:
        patched.setattr(KernelSession, "execute", counted)
        if not folds:
            patched.setattr(ForkingSession, "folds", property(lambda session: False))
        report = exec_score([run_dir], trajectories=[path], options=RecordOptions(timeout=timeout, workdir=workdir))
    lines: dict[tuple[str, int], tuple[Any, ...]] = {}
    for model in [f"m{index}" for index in range(max(map(len, predictions.values())))] + [REFERENCE_MODEL]:
        for record in map(json.loads, (run_dir / model / exec_samples_name(NEXT_CELL_TASK)).read_text().splitlines()):
            lines[model, record["step"]] = tuple(record[field] for field in SCORED)
    return lines, report, sent[0]


def _both_ways(
    tmp_path: Path, cells: list[str], predictions: dict[int, list[str]], monkeypatch: pytest.MonkeyPatch
) -> tuple[dict[tuple[str, int], tuple[Any, ...]], ExecReport, ExecReport, int]:
    """``predictions`` on the trajectory of ``cells``, scored with their runs riding on the cells' requests and
    without: the scored lines, the same both ways (asserted); both reports; how many requests fewer riding sent."""
    recorded = _recorded(tmp_path, cells)
    folded, report, sent = _scored(tmp_path, "folded", recorded, predictions, monkeypatch, folds=True)
    apart, apart_report, apart_sent = _scored(tmp_path, "apart", recorded, predictions, monkeypatch, folds=False)
    assert folded == apart
    return folded, report, apart_report, apart_sent - sent


def _restores(report: ExecReport) -> int:
    """How many times the replay was rebuilt from its start, over the trajectories scored."""
    return sum(trajectory.restores for trajectory in report.trajectories)


def test_a_fold_scores_as_a_request_of_its_own_with_one_round_trip_fewer_a_step(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cells = [
        "import pandas as pd\ncounter = 10",
        "df = pd.DataFrame({'a': [1, 2]})\nopen('made.txt', 'w').write('x')",  # the folder changes before a fork
        "counter += 1\nprint('last words')",  # output ipykernel has not sent when the children are forked
        "df['a'].sum() + counter",
        "del df\nnames = sorted(name for name in globals() if name in ('df', 'counter'))",
    ]
    predictions = {
        1: ["counter", "counter = 11", ""],
        # the developer's cell, where the file the cell before wrote is there
        2: [
            "counter += 1\nprint('last words' if open('made.txt').read() == 'x' else 'no file')",
            "df['b'] = 1",
            "open('made.txt', 'w').write('y')",
        ],
        3: ["df['a'].sum() + counter", "print(counter)"],
        4: [cells[4], "names = 1"],
    }
    folded, report, apart_report, fewer = _both_ways(tmp_path, cells, predictions, monkeypatch)
    # every step with predictions after the first cell: its fork rode on the cell's request
    assert fewer == len(predictions)
    assert (report.executions, _restores(report)) == (apart_report.executions, 0)
    # the cell before a fork changed the folder and the namespace, the children neither
    assert folded["m0", 2][:5] == (1, 1, 1, False, False)
    assert folded["m1", 2][:3] == (1, 0, 0) and folded["m2", 2][2] == 0  # a state of their own
    assert folded["m0", 4][:3] == (1, 1, 1) and folded[REFERENCE_MODEL, 3][:3] == (1, 1, 1)


def test_a_childs_logging_handler_prints_none_of_the_replays_unsent_output(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cells = [
        "import logging, sys\nlog = logging.getLogger('t')\nlog.addHandler(logging.StreamHandler(sys.stderr))",
        # no value to display, no new variable to describe: nothing flushes the streams before the forks
        "print('the replay cell says this last')\nsys.stderr.write('and this\\n');",
        "log.warning('developer')",
    ]
    predictions = {2: ["log.warning('model')", "log.warning('developer')"]}
    folded, _, _, _ = _both_ways(tmp_path, cells, predictions, monkeypatch)
    # the handler holds the kernel's stream from before the fork: in the child it flushes what it holds at once
    assert folded["m1", 2][:2] == (1, 1) and folded["m0", 2][:2] == (1, 0)


def test_a_child_that_writes_the_replays_folder_through_an_open_file_is_caught_in_a_fold(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Landlock checks a file's opening, so a child writes where the replay holds a file open: only the check of the
    # folder after the run sees it, against the folder as the kernel found it after the cell, before its forks
    cells = ["held = open('held.txt', 'a')", "open('other.txt', 'w').write('x')\nn = 1", "n"]
    predictions = {2: ["n", "held.write('tampered'); held.flush()", "n + 1"]}
    folded, report, _, _ = _both_ways(tmp_path, cells, predictions, monkeypatch)
    assert folded["m1", 2][4:] == (True, "Tampered: the prediction changed the replay's working folder")
    assert folded["m0", 2][:3] == (1, 1, 1) and folded["m2", 2][:2] == (1, 0)
    assert _restores(report) >= 1


def test_a_fork_module_the_notebook_broke_scores_as_apart_and_ends_the_folding(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cells = [
        "import sys\nsys.modules['_themisto_fork'].run = lambda request: 'not a result'",
        "a = 1",
        "a + 1",
        "a + 2",
    ]
    predictions = {1: ["a = 1"], 2: ["a + 1"], 3: ["a + 2"]}
    folded, report, apart_report, _ = _both_ways(tmp_path, cells, predictions, monkeypatch)
    assert folded["m0", 2][5] == "KernelError: malformed answer from the kernel"
    # the unreadable answer could not say the folder was left alone: the replay was rebuilt once, then no run rode
    assert (_restores(report), _restores(apart_report)) == (1, 0)


def test_a_kernel_that_dies_during_a_fold_is_rebuilt_and_its_cell_replayed_again(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cells = [
        "import os, sys\nsys.modules['_themisto_fork'].Child.collect = lambda child: os._exit(3)",
        "y = 2\nprint('y is set')",
        "y",
    ]
    predictions = {1: ["y = 2"], 2: ["y", "y + 1"]}
    folded, report, apart_report, _ = _both_ways(tmp_path, cells, predictions, monkeypatch)
    # step 1 is scored against its cell replayed again (the request that died took its snapshot): not diverged
    assert [folded[model, 2][3:5] for model in ("m0", "m1", REFERENCE_MODEL)] == [(False, True)] * 3
    assert [folded[model, 1][3:5] for model in ("m0", REFERENCE_MODEL)] == [(False, True)] * 2
    assert _restores(report) == _restores(apart_report) >= 1


def test_a_fold_outlasts_the_cells_time_limit_and_the_cell_does_not(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the limit holds for the cell and its snapshot; the run after them has its own, as a request of its own would
    cells = ["import time", "time.sleep(1.2)\nx = 1", "x", "time.sleep(30)", "x + 1"]
    recorded = _recorded(tmp_path, cells, timeout=2)
    assert recorded[2][3].error["ename"] == "TimeoutError"
    predictions = {2: ["time.sleep(1.5)\nprint('slept')"], 4: ["x + 1"]}
    started = time.monotonic()
    folded, _, _ = _scored(tmp_path, "folded", recorded, predictions, monkeypatch, folds=True, timeout=2)
    assert time.monotonic() - started < 20  # the 30-second cell was interrupted at its limit, its run never began
    assert folded["m0", 2][:4] == (1, 0, 1, False)  # it slept past the cell's 2 s and printed
    assert folded["m0", 4][:4] == (1, 1, 1, False)
