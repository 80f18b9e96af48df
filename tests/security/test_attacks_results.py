"""Attacks on exec-score's results: a prediction that forges its own result, sends a malformed one, slows or
stops the scorer; a scorer killed or out of CPU time (SECURITY.md, threat 12).

Real ``themisto record`` and ``exec-score`` processes, real kills.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from attacks import processes_named, run_themisto, start_themisto, wait_for, write_notebook
from exec_logs import write_next_cell_logs

from themisto.kernel.inside import fork, landlock, snapshot, wire
from themisto.trajectory import read_trajectory
from themisto.vocabulary import NEXT_CELL_TASK, REFERENCE_MODEL

# The session: at step 2 the developer printed 42.
SESSION = ["counter = 6", "counter += 0", "print(counter * 7)", "counter + 1"]

# The pipes it holds, past fds 0 to 2, by direction: its result pipe among them.
PIPES = """
import fcntl, json, os, select, stat
def pipes(mode):
    found = []
    for name in os.listdir('/proc/self/fd'):
        try:
            fd = int(name)
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & 3 == mode:
                found.append(fd)
        except OSError:
            pass
    return found
def claim(line):
    for descriptor in pipes(os.O_WRONLY):
        try:
            os.write(descriptor, (line + '\\n').encode())
        except OSError:  # an earlier child's pipe, whose reader is gone
            pass
ran = {'status': 'ok', 'ename': '', 'evalue': '', 'seconds': 0.0, 'dropped_chars': 0,
       'dropped_trailing_newlines': 0, 'snapshot': None, 'snapshot_error': None,
       'messages': [{'msg_type': 'stream', 'content': {'name': 'stdout', 'text': '42\\n'}}]}
"""
# Before: its outcome was accepted, exec_ok 1 and exec_match 1.
FORGE_AND_EXIT = PIPES + "claim(json.dumps(ran))\nos._exit(0)"
FORGE_WITH_SNAPSHOT = PIPES + (
    "claim(json.dumps(ran))\nclaim(json.dumps({'generation': 0, 'variables': [], 'seconds': 0.0, 'omitted': 0, 'unchanged': False}))\n"
    "os._exit(0)"
)
# Sends the runner's frames as the runner would, answering the parent where it asks (after: it does), with a
# malformed part: JSON nested past the stack. Before: nested in the outcome it failed the whole step (the
# reference's exec_ok 0), nested in the snapshot the whole trajectory (exit 2, the later steps lost).
NESTED = "'[' * 100000 + ']' * 100000"
EMULATE = (
    "claim({outcome})\n"
    "import time\n"
    "waiting, until, answered = pipes(os.O_RDONLY), time.monotonic() + 3.0, False\n"
    "while waiting and not answered and time.monotonic() < until:\n"
    "    for answer in select.select(waiting, [], [], max(until - time.monotonic(), 0))[0]:\n"
    "        byte = os.read(answer, 1)\n"
    "        answered = answered or byte == b'k'\n"
    "        if not byte:\n"
    "            waiting.remove(answer)\n"
    "if answered:\n"
    "    claim('')\n"
    "claim({snapshot})\n"
    "os._exit(0)"
)
NESTED_OUTCOME = PIPES + EMULATE.format(outcome=NESTED, snapshot="'{}'")
NESTED_SNAPSHOT = PIPES + EMULATE.format(outcome="json.dumps(ran)", snapshot=NESTED)


def _scorer_attack(action: str) -> str:
    """A cell that applies ``action`` (to ``target``) to the scorer and to its kernel, printing the developer's 42
    only where every attempt was refused or found nothing to reach. Before: priority and CPUs were changed."""
    return (
        "import errno, os, resource, signal\nimport psutil\n"
        "targets = [p.pid for p in psutil.Process().parents() if 'exec-score' in ' '.join(p.cmdline())]\n"
        "targets += [os.getppid()] if os.getppid() > 1 else []\n"
        "verdicts = []\n"
        "for target in targets:\n"
        "    try:\n"
        f"        {action}\n"
        "        verdicts.append('allowed')\n"
        "    except OSError as exc:\n"
        "        verdicts.append(errno.errorcode[exc.errno])\n"
        "print(42 if set(verdicts) <= {'EPERM'} else verdicts)"
    )


SCORER_ATTACKS = {
    "nice": _scorer_attack("os.setpriority(os.PRIO_PROCESS, target, 19)"),
    "affinity": _scorer_attack("os.sched_setaffinity(target, {0})"),
    "scheduler": _scorer_attack("os.sched_setscheduler(target, os.SCHED_IDLE, os.sched_param(0))"),
    "cpulimit": _scorer_attack("resource.prlimit(target, resource.RLIMIT_CPU, (1, 1))"),
    "stop": _scorer_attack("os.kill(target, signal.SIGSTOP)"),
    "kill": _scorer_attack("os.kill(target, signal.SIGKILL)"),
}

sandboxed = pytest.mark.skipif(landlock.abi_version() < 6, reason="needs Landlock ABI >= 6 (scoped signals)")


@pytest.fixture(scope="module")
def trajectory(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The session recorded by a real ``themisto record``."""
    folder = tmp_path_factory.mktemp("attacks-results")
    work = folder / "work"
    work.mkdir()
    recorded = run_themisto("record", str(write_notebook(work / "session.ipynb", SESSION)), "-o", str(folder / "out"))
    assert recorded.returncode == 0, recorded.stderr
    return folder / "out" / "session.jsonl"


def _lines(run_dir: Path, model: str) -> dict[int, dict[str, Any]]:
    path = run_dir / model / f"exec_samples_{NEXT_CELL_TASK}.jsonl"
    return {record["step"]: record for record in map(json.loads, path.read_text().splitlines())}


def _score(trajectory: Path, run_dir: Path, predictions: dict[str, str]) -> subprocess.CompletedProcess[str]:
    """``themisto exec-score`` of ``predictions`` (model -> code at step 2) beside an honest model's."""
    logs = {(model, NEXT_CELL_TASK): {2: code} for model, code in predictions.items()}
    logs["honest", NEXT_CELL_TASK] = {2: "print(6 * 7)", 3: "counter + 1"}
    write_next_cell_logs(run_dir, read_trajectory(trajectory), logs)
    return run_themisto("exec-score", str(run_dir), "--trajectories", str(trajectory), "--timeout", "60", "--quiet")


def _untouched(run_dir: Path) -> None:
    """The ceiling and the honest model score 1 at both steps: nothing an attacker did reached them."""
    for model in (REFERENCE_MODEL, "honest"):
        assert [line["exec_match"] for line in _lines(run_dir, model).values()] == [1, 1], model


@pytest.mark.kernel
def test_a_prediction_that_writes_frames_into_its_result_pipe_and_ends_gets_no_result(
    trajectory: Path, tmp_path: Path
) -> None:
    # before: its frames were taken as its result: exec_ok 1, exec_match 1 (its claimed output, 42)
    attacks = {"forger": FORGE_AND_EXIT, "forger-snapshot": FORGE_WITH_SNAPSHOT}
    scored = _score(trajectory, tmp_path / "run", attacks)
    assert scored.returncode == 0, scored.stderr
    verdicts = {model: _lines(tmp_path / "run", model)[2] for model in attacks}
    assert [(line["exec_ok"], line["exec_match"]) for line in verdicts.values()] == [(0, 0), (0, 0)]
    assert verdicts["forger"]["error"] == "ChildProcessError: the cell ended its process (exit code 0)"
    assert verdicts["forger-snapshot"]["error"] == (
        "ValueError: malformed result from the child: a frame of the child's past 0 bytes"
    )
    _untouched(tmp_path / "run")


@pytest.mark.kernel
def test_a_malformed_result_fails_its_prediction_alone(trajectory: Path, tmp_path: Path) -> None:
    # before: JSON nested past the stack in the outcome failed every code of the step (the reference's exec_ok 0),
    # in the snapshot (by reading the code: a RecursionError out of the host's parse) the whole trajectory
    attacks = {"nested-outcome": NESTED_OUTCOME, "nested-snapshot": NESTED_SNAPSHOT}
    scored = _score(trajectory, tmp_path / "run", attacks)
    assert scored.returncode == 0, scored.stderr
    verdicts = {model: _lines(tmp_path / "run", model)[2] for model in attacks}
    assert [(line["exec_ok"], line["exec_match"]) for line in verdicts.values()] == [(0, 0), (0, 0)]
    assert verdicts["nested-outcome"]["error"] == "ValueError: malformed result from the child"
    assert verdicts["nested-snapshot"]["error"].startswith("KernelError: malformed result of the forked cell")
    _untouched(tmp_path / "run")


@pytest.mark.kernel
@sandboxed
def test_a_prediction_cannot_slow_limit_stop_or_kill_the_scorer_or_its_kernel(trajectory: Path, tmp_path: Path) -> None:
    scored = _score(trajectory, tmp_path / "run", SCORER_ATTACKS)
    assert scored.returncode == 0, scored.stderr
    outputs = {model: _lines(tmp_path / "run", model)[2] for model in SCORER_ATTACKS}
    assert {model: line["exec_match"] for model, line in outputs.items()} == dict.fromkeys(SCORER_ATTACKS, 1), outputs
    _untouched(tmp_path / "run")


@pytest.mark.kernel
@pytest.mark.parametrize("number", [signal.SIGTERM, signal.SIGXCPU, signal.SIGKILL], ids=lambda n: n.name)
def test_a_killed_scorer_leaves_what_it_scored_for_the_report(trajectory: Path, tmp_path: Path, number: int) -> None:
    # before: SIGTERM, SIGXCPU (a CPU limit reached) and SIGKILL each ended exec-score with no exec samples at all
    run_dir, marker = tmp_path / "run", f"{4300 + number}.5"
    slow = f"import subprocess\nsubprocess.run(['sleep', '{marker}'])"
    predictions = {("m", NEXT_CELL_TASK): {1: "counter += 0", 3: slow}}
    write_next_cell_logs(run_dir, read_trajectory(trajectory), predictions)
    scorer = start_themisto("exec-score", str(run_dir), "--trajectories", str(trajectory), "--timeout", "600")
    try:
        wait_for(
            lambda: bool(processes_named(marker)) or scorer.poll() is not None, what="the slow prediction at step 3"
        )
        os.kill(scorer.pid, number)
        _, stderr = scorer.communicate(timeout=60)
    finally:
        scorer.kill()
        for sleeper in processes_named(marker):  # a SIGKILL-ed scorer leaves its kernels to the launcher's watch
            sleeper.kill()
    if number == signal.SIGKILL:
        assert scorer.returncode == -signal.SIGKILL
    else:
        assert scorer.returncode == 128 + number
        assert stderr.strip().splitlines()[-1] == f"themisto exec-score: stopped by {signal.Signals(number).name}"
    # step 1 was scored before step 3 began: its lines are on disk, whole, for the model and the ceiling
    assert sorted(_lines(run_dir, "m")) == [1] and _lines(run_dir, "m")[1]["exec_match"] == 1
    assert sorted(_lines(run_dir, REFERENCE_MODEL)) == [1]
    report = run_themisto("report", str(run_dir))
    assert report.returncode == 0, report.stderr
    rows = [line for line in report.stdout.splitlines() if line.startswith(("| m ", f"| {REFERENCE_MODEL} "))]
    # exec_ok, exec_match and state_match of the one step scored, in every table
    assert rows and all(row.count("1.000 [1.000, 1.000] (n=1)") == 3 for row in rows), report.stdout


def test_a_frame_past_its_bound_is_refused_without_being_held(monkeypatch: pytest.MonkeyPatch) -> None:
    # before: the kernel kept reading a child's frame, however long, into one growing buffer
    monkeypatch.setitem(fork._BOUND, "description_chars", snapshot.DESCRIPTION_CHARS)
    request = wire.SnapshotRequest(max_repr_chars=10, repr_timeout=1.0, max_variables=1, known=0, announce=None)
    limit = fork.snapshot_limit(request)
    read, write = os.pipe()
    output_read, output_write = os.pipe()
    sent: list[int] = []

    def flood() -> None:  # a child writing without end, never a newline
        try:
            while True:
                sent.append(os.write(write, b"[" * (1 << 16)))
        except OSError:  # the reader closed the pipe
            pass

    writer = threading.Thread(target=flood)
    writer.start()
    try:
        frames = fork._frames(read, [time.monotonic() + 60], [limit], fork.FdOutput(output_read, 10), bytearray())
        with pytest.raises(fork.Oversized):
            next(frames)
    finally:
        os.close(read)
        writer.join()
        for descriptor in (write, output_write):
            os.close(descriptor)
    assert limit < sum(sent) < limit + (1 << 20)  # it stopped reading just past the bound
