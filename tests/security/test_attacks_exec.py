"""Attacks on execution-checked scoring: predictions that look for the answer, reach into the replay kernel or
the scorer, or delete what others need; two runs on one output; Ctrl-C; inputs that mislead.

SECURITY.md, threat "exec-score". Real kernels, real ``themisto exec-score`` processes where the attack came
through the command line.
"""

from __future__ import annotations

import json
import signal
from pathlib import Path
from typing import Any

import nbformat
import pytest
from attacks import (
    THE_KERNEL,
    assert_one_line_error,
    interrupt,
    is_gone,
    processes_named,
    run_themisto,
    start_themisto,
    wait_for,
)
from exec_logs import write_next_cell_logs

from themisto.evaluation.exec import ExecReport, exec_samples_name, exec_score
from themisto.recording.options import RecordOptions
from themisto.recording.record import record_source
from themisto.trajectory import read_trajectory
from themisto.vocabulary import NEXT_CELL_TASK, REFERENCE_MODEL

pytestmark = pytest.mark.kernel  # every test records or replays with real kernels

# The session: the answer at step 2 is the developer's `print(counter * 7)`, which prints 42.
CELLS = [
    "import os\nhere = os.getcwd()\nlog = open('log.txt', 'a')",
    "counter = 6",
    "print(counter * 7)",
    "print(open('data.txt').read(), counter)",
    "counter + 1",
]

# E1: look everywhere the child can for the developer's cell (its memory, its files, the kernel's), and run it.
SEEK_THE_ANSWER = (
    THE_KERNEL
    + """
import gc, os, stat, sys
def texts(value, depth=0):
    if isinstance(value, str):
        yield value
    elif depth < 4 and isinstance(value, (list, tuple, set, frozenset)):
        for item in value:
            yield from texts(item, depth + 1)
    elif depth < 4 and isinstance(value, dict):
        for item in list(value.values()) + list(value.keys()):
            yield from texts(item, depth + 1)
    elif depth < 4 and '__dataclass_fields__' in vars(type(value)):
        for name in vars(type(value))['__dataclass_fields__']:
            yield from texts(vars(value).get(name), depth + 1)
def candidates():
    frame = sys._getframe()
    while frame is not None:
        yield from texts(dict(frame.f_locals))
        frame = frame.f_back
    for container in gc.get_objects():
        yield from texts(container, 3)
    for folder in ('/proc/self/fd', f'/proc/{the_kernel()}/fd'):
        try:
            for name in os.listdir(folder):
                try:
                    if not stat.S_ISREG(os.stat(os.path.join(folder, name)).st_mode):
                        continue  # a pipe or a socket would block
                    with open(os.path.join(folder, name), errors='replace') as handle:
                        yield handle.read(100000)
                except OSError:
                    pass
        except OSError:
            pass
# the needles are built, so the search never finds its own text
head, tail = 'print(' + 'counter', '* ' + '7)'
found = None
for text in candidates():
    if head in text and tail in text:
        found = text
        break
    if os.path.isfile(text[:4096]) and not text.startswith('/proc'):
        try:
            content = open(text, errors='replace').read(1000000)
        except (OSError, ValueError):
            continue
        if head in content and tail in content:
            found = content
            break
if found is not None:
    start = found.index(head)
    exec(found[start:found.index(tail, start) + len(tail)])
else:
    print('nothing found')
"""
)  # the search must not find itself

# E2: write the replay kernel's memory through /proc.
WRITE_KERNEL_MEMORY = THE_KERNEL + "with open(f'/proc/{the_kernel()}/mem', 'r+b') as memory:\n    memory.seek(4096)"
# E3: send the replay kernel an execute_request on its own shell channel.
INJECT_REQUEST = """
import time
from ipykernel.connect import get_connection_info
from jupyter_client import BlockingKernelClient
client = BlockingKernelClient()
client.load_connection_info(get_connection_info(unpack=True))
client.start_channels()
client.execute('counter = 999')
time.sleep(1.0)
print('sent')
"""
# E11: delete the replay's working folder, found as an earlier cell stored it and through /proc.
DELETE_THE_REPLAY = (
    THE_KERNEL
    + """
import os, shutil
for folder in (here, os.readlink(f'/proc/{the_kernel()}/cwd')):
    try:
        shutil.rmtree(folder)
    except OSError as error:
        print(type(error).__name__)
"""
)
# Through what no sandbox closes: a file an earlier cell left open for writing, in the replay's folder.
WRITE_AN_OPEN_FILE = "log.write('tampered\\n')\nlog.flush()"

ATTACKS = {
    ("e1", NEXT_CELL_TASK): {2: SEEK_THE_ANSWER},
    ("e2", NEXT_CELL_TASK): {2: WRITE_KERNEL_MEMORY},
    ("e3", NEXT_CELL_TASK): {2: INJECT_REQUEST},
    ("e11", NEXT_CELL_TASK): {2: DELETE_THE_REPLAY},
    ("leak", NEXT_CELL_TASK): {3: WRITE_AN_OPEN_FILE},
    ("honest", NEXT_CELL_TASK): {2: "print(6 * 7)", 3: CELLS[3], 4: "counter+1"},
}


def _record(folder: Path, cells: list[str] = CELLS, **options: Any) -> Path:
    """The notebook of ``cells`` recorded by the real recorder in ``folder/files`` (holding data.txt)."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code) for code in cells]
    source = folder / "session.ipynb"
    nbformat.write(notebook, source)
    workdir = folder / "files"
    workdir.mkdir()
    (workdir / "data.txt").write_text("seed")
    (path,) = record_source(source, folder / "trajectories", RecordOptions(workdir=workdir, **options))
    return path


def _lines(run_dir: Path, model: str, task: str = NEXT_CELL_TASK) -> dict[int, dict[str, Any]]:
    path = run_dir / model / exec_samples_name(task)
    return {record["step"]: record for record in map(json.loads, path.read_text().splitlines())}


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = _record(tmp_path_factory.mktemp("attacks-exec"))
    assert [step.output for step in read_trajectory(path)][2:] == ["42", "seed 6", "7"]
    return path


def _score(recorded: Path, run_dir: Path, sandbox: bool) -> ExecReport:
    write_next_cell_logs(run_dir, read_trajectory(recorded), ATTACKS)
    return exec_score([run_dir], trajectories=[recorded], options=RecordOptions(timeout=60, sandbox=sandbox))


@pytest.fixture(scope="module")
def sandboxed(recorded: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ExecReport]:
    run_dir = tmp_path_factory.mktemp("attacks-exec-sandboxed")
    return run_dir, _score(recorded, run_dir, sandbox=True)


@pytest.fixture(scope="module")
def unconfined(recorded: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ExecReport]:
    run_dir = tmp_path_factory.mktemp("attacks-exec-unconfined")
    return run_dir, _score(recorded, run_dir, sandbox=False)


def _replay_untouched(run_dir: Path) -> None:
    """The ceiling and an honest model score as if no attacker had run before them."""
    reference = _lines(run_dir, REFERENCE_MODEL)
    assert [(line["exec_match"], line["state_match"]) for line in reference.values()] == [(1, 1)] * 3
    honest = _lines(run_dir, "honest")
    assert [(line["exec_match"], line["state_match"]) for line in honest.values()] == [(1, 1)] * 3


@pytest.mark.parametrize("fixture", ["sandboxed", "unconfined"])
def test_e1_a_prediction_finds_no_other_code_in_its_memory(fixture: str, request: pytest.FixtureRequest) -> None:
    # before: it found the fork request's codes, the developer's cell among them, and scored 1/1/1
    run_dir = request.getfixturevalue(fixture)[0]
    line = _lines(run_dir, "e1")[2]
    assert (line["exec_ok"], line["exec_match"]) == (1, 0), line["error"]


def test_e2_e3_e11_the_sandbox_refuses_the_kernels_memory_channels_and_folder(
    sandboxed: tuple[Path, ExecReport],
) -> None:
    run_dir, report = sandboxed
    assert _lines(run_dir, "e2")[2]["error"].startswith("PermissionError: [Errno 13] Permission denied")
    e3, e11 = _lines(run_dir, "e3")[2], _lines(run_dir, "e11")[2]
    assert e3["tampered"] is False and e11["error"].startswith("PermissionError")
    _replay_untouched(run_dir)
    # only the open file, which no sandbox closes, reached the replay: one restore for the step, one after it
    assert _lines(run_dir, "leak")[3]["tampered"] is True
    assert [t.restores for t in report.trajectories] == [2]


def test_e3_e11_without_the_sandbox_the_check_catches_what_changed_the_replay(
    unconfined: tuple[Path, ExecReport],
) -> None:
    # before: the injected request changed the replay (the ceiling's state_match fell to 0.750) and the
    # deleted folder failed every later prediction (exec_ok 0)
    run_dir, report = unconfined
    e3, e11, leak = _lines(run_dir, "e3")[2], _lines(run_dir, "e11")[2], _lines(run_dir, "leak")[3]
    assert (e3["tampered"], e3["exec_ok"], e3["exec_match"], e3["state_match"]) == (True, 0, 0, 0)
    assert e3["error"] == "Tampered: the prediction changed the replay's namespace"
    assert e11["tampered"] is True and e11["error"] == "Tampered: the prediction changed the replay's working folder"
    assert leak["tampered"] is True
    _replay_untouched(run_dir)


def test_e10_a_prediction_that_signals_the_scorer_fails_alone(recorded: Path, tmp_path: Path) -> None:
    # before: SIGKILL of themisto exec-score ended the run with exit 137 and no results, every rerun alike
    kill_the_scorer = (
        "import os, signal\nimport psutil\n"
        "scorers = [p.pid for p in psutil.Process().parents() if 'exec-score' in ' '.join(p.cmdline())]\n"
        "for pid in scorers:\n"
        "    os.kill(pid, signal.SIGKILL)\n"
        "if not scorers:\n"
        "    raise ProcessLookupError('no exec-score in sight')"  # in its box
    )
    stop_the_kernel = THE_KERNEL + "import signal\nsignal_the_kernel(signal.SIGSTOP)"
    run_dir = tmp_path / "run"
    predictions = {("killer", NEXT_CELL_TASK): {2: kill_the_scorer}, ("stopper", NEXT_CELL_TASK): {2: stop_the_kernel}}
    predictions["honest", NEXT_CELL_TASK] = ATTACKS["honest", NEXT_CELL_TASK]
    write_next_cell_logs(run_dir, read_trajectory(recorded), predictions)
    result = run_themisto("exec-score", str(run_dir), "--trajectories", str(recorded), "--timeout", "60", "--quiet")
    assert result.returncode == 0, result.stderr
    # the scorer is out of the box's sight (before: SIGKILL of exec-score, then PermissionError)
    assert _lines(run_dir, "killer")[2]["error"] == "ProcessLookupError: no exec-score in sight"
    # the kernel has no pid in the prediction's PID namespace, and a pidfd of its /proc folder is refused for it
    # (before: SIGSTOP by pid, then PermissionError)
    assert _lines(run_dir, "stopper")[2]["error"] == "OSError: [Errno 22] Invalid argument"
    _replay_untouched(run_dir)


def _slow_run(recorded: Path, run_dir: Path, marker: str) -> None:
    """Sample logs whose prediction at step 3 runs ``sleep MARKER`` (long); steps 1 and 2 are quick."""
    slow = f"import subprocess\nsubprocess.run(['sleep', '{marker}'])"
    write_next_cell_logs(run_dir, read_trajectory(recorded), {("m", NEXT_CELL_TASK): {1: "counter = 6", 3: slow}})


def test_b13_a_second_exec_score_into_the_same_output_is_refused(recorded: Path, tmp_path: Path) -> None:
    # before: both ran, both exited 0, and the last writer won
    run_dir, out, marker = tmp_path / "run", tmp_path / "out", "4141.5"
    _slow_run(recorded, run_dir, marker)
    arguments = ["exec-score", str(run_dir), "--trajectories", str(recorded), "-o", str(out), "--timeout", "600"]
    first = start_themisto(*arguments, "--quiet")
    try:
        wait_for(
            lambda: bool(processes_named(marker)) or first.poll() is not None, what="the first run's slow prediction"
        )
        second = run_themisto(*arguments, "--quiet")
        assert second.returncode == 2
        assert_one_line_error(second.stderr, "exec-score", "is being written by another process")
    finally:
        first.send_signal(signal.SIGINT)
        first.communicate(timeout=60)


def test_b15_ctrl_c_stops_within_two_seconds_and_writes_what_was_scored(recorded: Path, tmp_path: Path) -> None:
    # before: Ctrl-C took 10 to 22 s and wrote none of the scored steps
    run_dir, marker = tmp_path / "run", "4242.5"
    _slow_run(recorded, run_dir, marker)
    scorer = start_themisto("exec-score", str(run_dir), "--trajectories", str(recorded), "--timeout", "600")
    try:
        wait_for(lambda: bool(processes_named(marker)) or scorer.poll() is not None, what="the slow prediction")
        sleepers = processes_named(marker)
    except BaseException:
        scorer.kill()
        raise
    elapsed, stderr = interrupt(scorer)
    print(f"stopped {elapsed:.2f} s after Ctrl-C")
    assert elapsed < 2.0
    assert scorer.returncode == 130 and stderr.strip().splitlines()[-1] == "themisto exec-score: interrupted"
    assert _lines(run_dir, "m")[1]["exec_match"] == 1 and 3 not in _lines(run_dir, "m")
    assert sorted(_lines(run_dir, REFERENCE_MODEL)) == [1]
    wait_for(lambda: all(is_gone(p.pid) for p in sleepers), timeout=10, what="the prediction's process to end")


def test_f14_an_empty_sample_log_is_named(recorded: Path, tmp_path: Path) -> None:
    # before: blamed on the trajectories Parquet
    log = tmp_path / "run" / "m" / f"samples_{NEXT_CELL_TASK}_2026-01-01T00-00-00.000000.jsonl"
    log.parent.mkdir(parents=True)
    log.write_text("")
    result = run_themisto("exec-score", str(tmp_path / "run"), "--trajectories", str(recorded))
    assert result.returncode == 2
    assert_one_line_error(result.stderr, "exec-score", str(log), "is empty")


def test_the_replay_runs_where_its_provenance_says_and_a_wrong_folder_is_named(tmp_path: Path) -> None:
    # before: without --workdir every step diverged, every sample was excluded, exit 0
    path = _record(tmp_path, ["text = open('data.txt').read()", "print(text)", "len(text)"])
    run_dir = tmp_path / "run"
    write_next_cell_logs(run_dir, read_trajectory(path), {("m", NEXT_CELL_TASK): {1: "print(text)", 2: "len(text)"}})
    arguments = ["exec-score", str(run_dir), "--trajectories", str(path), "--timeout", "60", "--quiet"]
    found = run_themisto(*arguments)
    assert found.returncode == 0, found.stderr
    assert [line["exec_match"] for line in _lines(run_dir, "m").values()] == [1, 1]
    (tmp_path / "files").rename(tmp_path / "moved")
    lost = run_themisto(*arguments)
    assert lost.returncode == 2
    assert_one_line_error(lost.stderr, "exec-score", "1 of 1 trajectories", "--workdir")
    moved = run_themisto(*arguments, "--workdir", str(tmp_path / "moved"))
    assert moved.returncode == 0, moved.stderr


def test_the_replay_takes_the_recordings_variable_cap(tmp_path: Path) -> None:
    # before: the children snapshotted 1000 variables, the replay 2, and the developer's cell scored state_match 0
    path = _record(tmp_path, ["a = 1", "b = 2\nc = 3", "d = 4"], max_variables=2)
    assert [len(step.runtime) for step in read_trajectory(path)] == [1, 2, 2]
    run_dir = tmp_path / "run"
    write_next_cell_logs(run_dir, read_trajectory(path), {("m", NEXT_CELL_TASK): {1: "b = 2\nc = 3", 2: "d = 4"}})
    exec_score([run_dir], trajectories=[path], options=RecordOptions(timeout=60))
    reference = _lines(run_dir, REFERENCE_MODEL)
    assert [(line["exec_match"], line["state_match"]) for line in reference.values()] == [(1, 1), (1, 1)]
