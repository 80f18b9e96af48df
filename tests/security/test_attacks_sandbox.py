"""Attacks on the sandbox: a cell tries to write, signal, trace and connect out of its kernel (SECURITY.md, threat 10).

Real ``themisto record`` and ``stability`` processes, real kernels in their real Landlock domain. Each cell
catches the refusal and prints what happened, so the trajectory holds the verdict of every attempt.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
from functools import partial
from pathlib import Path

import psutil
import pytest
from attacks import (
    PROCESS_TIMEOUT,
    REPOSITORY,
    STARTED,
    assert_one_line_error,
    assert_refused_unless_unconfined,
    host_process,
    is_gone_from_box,
    lines_of,
    process_environment,
    run_themisto,
    seccomp_stand_in,
    start_themisto,
    wait_for,
    write_notebook,
)

from themisto.kernel.inside import landlock
from themisto.kernel.recorder import Recorder
from themisto.provenance import read_provenance
from themisto.recording.options import RecordOptions
from themisto.trajectory import read_trajectory

pytestmark = [
    pytest.mark.kernel,  # every test records with real kernels
    pytest.mark.skipif(landlock.abi_version() < 6, reason="needs Landlock ABI >= 6 (scoped signals)"),
]

# Prints 'allowed' or the exception's name for ATTEMPT (an expression), the cell's whole output.
TRY = "try:\n    {attempt}\n    print('allowed')\nexcept OSError as exc:\n    print(type(exc).__name__)"
# The kernel's parent is its box's init (a fork of its launcher, outside the kernel's domain as the launcher is),
# whose parent, outside the box, it cannot see; the themisto process, the test's child, it cannot see either: the
# test names it by its own pid, which the cell tries as themisto's (a pid of the box, if any, is not the host's).
ANCESTORS = STARTED + (
    f"import json, os, signal, socket, subprocess, time\nlauncher = os.getppid()\nthemisto = {os.getpid()}"
)


def attempt(expression: str) -> str:
    return TRY.format(attempt=expression)


def outputs(out: Path, name: str) -> list[str]:
    """The output of each step of ``out/NAME.jsonl``."""
    return [step.output for step in read_trajectory(out / f"{name}.jsonl")]


def test_a_cell_writes_only_beneath_its_working_directory_and_private_folders(tmp_path: Path) -> None:
    work, elsewhere, out = tmp_path / "work", tmp_path / "elsewhere", tmp_path / "out"
    work.mkdir()
    elsewhere.mkdir()
    (elsewhere / "kept.txt").write_text("kept")
    cells = [
        ANCESTORS,
        attempt("open('mine.txt', 'w').write('x')"),
        attempt("import tempfile; tempfile.NamedTemporaryFile().write(b'x')"),
        attempt(f"open({str(elsewhere / 'new.txt')!r}, 'w')"),
        attempt(f"os.remove({str(elsewhere / 'kept.txt')!r})"),
        attempt(f"open({str(out / 'forged.jsonl')!r}, 'w')"),  # the output folder, outside the working directory
        attempt("open(os.path.expanduser('~/.themisto-attack'), 'w')"),
        # the libraries that write files find their folders writable: matplotlib's cache, IPython's history
        "import matplotlib.pyplot as plt\nplt.plot([1, 2])\nplt.show()",
        "len(list(get_ipython().history_manager.get_range_by_str('1-3'))) > 0",
    ]
    notebook = write_notebook(work / "writes.ipynb", cells)
    result = run_themisto("record", str(notebook), "-o", str(out))
    assert result.returncode == 0, result.stderr
    steps = read_trajectory(out / "writes.jsonl")
    verdicts = [step.output for step in steps[1:7]]
    assert verdicts == [
        "allowed",
        "allowed",
        "PermissionError",
        "PermissionError",
        "PermissionError",
        "PermissionError",
    ]
    assert (work / "mine.txt").read_text() == "x" and (elsewhere / "kept.txt").read_text() == "kept"
    assert not (elsewhere / "new.txt").exists() and not (out / "forged.jsonl").exists()
    assert steps[7].error is None and steps[7].output == "<image/png>" and steps[8].output == "True"
    provenance = read_provenance(out / "writes.jsonl")
    assert provenance is not None and provenance.sandbox == f"landlock-abi-{landlock.abi_version()}"


def test_a_cell_cannot_signal_trace_or_read_its_launcher_or_themisto(tmp_path: Path) -> None:
    cells = [
        ANCESTORS,
        attempt("os.kill(launcher, signal.SIGSTOP)"),
        attempt("os.kill(themisto, signal.SIGKILL)"),
        attempt("open(f'/proc/{launcher}/mem', 'rb')"),
        attempt("open(f'/proc/{themisto}/environ', 'rb').read()"),
        # its own children stay in reach
        attempt("child = subprocess.Popen(['sleep', '60']); os.kill(child.pid, signal.SIGKILL); child.wait()"),
    ]
    notebook = write_notebook(tmp_path / "signals.ipynb", cells)
    recorded = run_themisto("record", str(notebook), "-o", str(tmp_path / "out"))
    assert recorded.returncode == 0, recorded.stderr
    # before: PermissionError each; now the test's process is out of the box's sight as well
    refused = ["PermissionError", "ProcessLookupError", "PermissionError", "FileNotFoundError", "allowed"]
    assert outputs(tmp_path / "out", "signals")[1:] == refused
    # the same cells replayed by stability: its kernels are confined as well, so nothing kills the run, even
    # where the trajectory's provenance (anyone's file) names the trust options
    sidecar = tmp_path / "out" / "signals.provenance.json"
    forged = json.loads(sidecar.read_text())
    forged["options"].update(sandbox=False, allow_network=True, pass_env=["THEMISTO_ATTACK"])
    sidecar.write_text(json.dumps(forged))
    annotated = tmp_path / "annotated"
    replayed = run_themisto("stability", str(tmp_path / "out"), "--runs", "1", "-o", str(annotated))
    assert replayed.returncode == 0, replayed.stderr
    assert outputs(annotated, "signals") == outputs(tmp_path / "out", "signals")


def test_tcp_and_abstract_sockets_are_refused_unless_the_network_is_allowed(tmp_path: Path) -> None:
    name = f"\0themisto-attack-{os.getpid()}"
    with socket.socket() as listener, socket.socket(socket.AF_UNIX) as abstract:
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        abstract.bind(name)
        abstract.listen(8)
        port = listener.getsockname()[1]
        cells = [
            "import socket",
            attempt(f"socket.create_connection(('127.0.0.1', {port}), timeout=10).close()"),
            attempt("socket.socket().bind(('127.0.0.1', 0))"),
            attempt(f"socket.socket(socket.AF_UNIX).connect({name!r})"),
        ]
        notebook = write_notebook(tmp_path / "net.ipynb", cells)
        denied = run_themisto("record", str(notebook), "-o", str(tmp_path / "denied"))
        allowed = run_themisto("record", str(notebook), "-o", str(tmp_path / "allowed"), "--allow-network")
    assert denied.returncode == 0 and allowed.returncode == 0, (denied.stderr, allowed.stderr)
    # without the network the kernel's abstract sockets are those of its own network namespace: none is bound
    assert outputs(tmp_path / "denied", "net")[1:] == ["PermissionError"] * 2 + ["ConnectionRefusedError"]
    # TCP opens with the option; abstract sockets stay scoped to the domain
    assert outputs(tmp_path / "allowed", "net")[1:] == ["allowed", "allowed", "PermissionError"]
    provenance = read_provenance(tmp_path / "allowed" / "net.jsonl")
    assert provenance is not None and provenance.sandbox == f"landlock-abi-{landlock.abi_version()}+network"


# A cell that tries to stop its launcher (D3), then starts a child in a session of its own and writes its pid.
STOP_AND_DETACH = (
    ANCESTORS + "\ntry:\n    os.kill(launcher, signal.SIGSTOP)\n    stopped = 'stopped'\nexcept OSError as exc:\n"
    "    stopped = type(exc).__name__\n"
    "child = subprocess.Popen(['sleep', '600'], start_new_session=True)\n"
    "pids = {'launcher': started(launcher), 'kernel': started(os.getpid()), 'child': started(child.pid)}\n"
    "open('pids.tmp', 'w').write(json.dumps(pids))\n"
    "os.rename('pids.tmp', 'pids.json')\n"
    "print(stopped)"
)


def test_d3_a_cell_that_stops_its_launcher_and_detaches_a_child_leaves_nothing_behind(tmp_path: Path) -> None:
    notebook = write_notebook(tmp_path / "detach.ipynb", [STOP_AND_DETACH, "print('after')"])
    result = run_themisto("record", str(notebook), "-o", str(tmp_path / "out"))
    assert result.returncode == 0, result.stderr
    assert outputs(tmp_path / "out", "detach") == ["PermissionError", "after"]
    pids = json.loads((tmp_path / "pids.json").read_text())
    for role, pid in pids.items():
        wait_for(partial(is_gone_from_box, *pid), timeout=10, what=f"the {role} process {pid} to end")


def test_d4_after_that_a_killed_recorder_still_takes_the_launcher_kernel_and_child(tmp_path: Path) -> None:
    notebook = write_notebook(tmp_path / "detach.ipynb", [STOP_AND_DETACH + "\ntime.sleep(600)"])
    recorder = start_themisto("record", str(notebook), "-o", str(tmp_path / "out"), "--timeout", "900")
    pids_file = tmp_path / "pids.json"
    try:
        wait_for(lambda: pids_file.exists() or recorder.poll() is not None, what="the cell's processes")
        assert recorder.poll() is None, recorder.communicate()
        pids = json.loads(pids_file.read_text())
        launcher = host_process(*pids["launcher"])
        assert launcher is not None and launcher.status() != psutil.STATUS_STOPPED
        recorder.kill()
        recorder.wait(timeout=30)
    finally:
        recorder.kill()
        recorder.communicate()
    for role, pid in pids.items():
        wait_for(partial(is_gone_from_box, *pid), timeout=10, what=f"the {role} process {pid} to end")


def test_b16_a_cell_that_deletes_its_recordings_lock_does_not_let_a_second_recording_in(tmp_path: Path) -> None:
    # the output folder inside the working directory: the cell can reach the lock file beside the trajectory
    out = tmp_path / "out"
    go = tmp_path / "go"
    cells = [
        "import os, time\nos.remove('out/.locks.jsonl.lock')\nprint(os.path.exists('out/.locks.jsonl.lock'))",
        f"while not os.path.exists({str(go)!r}):\n    time.sleep(0.05)",
        "b = 2",
    ]
    notebook = write_notebook(tmp_path / "locks.ipynb", cells)
    first = start_themisto("record", str(notebook), "-o", str(out))
    try:
        wait_for(lambda: lines_of(out / "locks.jsonl") >= 1 or first.poll() is not None, what="the first step")
        second = run_themisto("record", str(notebook), "-o", str(out), "--overwrite")
        go.touch()
        _, stderr = first.communicate(timeout=PROCESS_TIMEOUT)
    finally:
        first.kill()
    assert second.returncode == 2
    assert_one_line_error(second.stderr, "record", "being written by another process")
    assert first.returncode == 0, stderr
    assert outputs(out, "locks") == ["False", "", ""]  # the lock was gone, and the first recording is whole


# Makes every Landlock syscall fail with ENOSYS: a stand-in for a kernel that has no Landlock.
WITHOUT_LANDLOCK = """
    (0x25, 0, 2, 443),  # number > 443?
    (0x25, 1, 0, 446),  # number > 446: allow
    (0x06, 0, 0, 0x00050000 | 38),  # 444-446, the Landlock calls: ENOSYS
"""


def test_where_landlock_is_missing_record_refuses_in_one_line_naming_no_sandbox(tmp_path: Path) -> None:
    probe = subprocess.run(
        [*seccomp_stand_in(WITHOUT_LANDLOCK), "-c", "from themisto.kernel.inside import landlock; print(landlock.abi_version())"],
        capture_output=True, text=True, env=process_environment(), cwd=REPOSITORY, timeout=60,
    )  # fmt: skip
    assert probe.stdout.strip() == "0", probe.stderr  # the stand-in works: no Landlock in there
    # a Python caller meets the same one check, the option spelled as a keyword
    python = subprocess.run(
        [*seccomp_stand_in(WITHOUT_LANDLOCK), "-c", "from themisto.kernel import KernelOptions, check_options\n"
         "try:\n    check_options(KernelOptions())\nexcept Exception as e:\n    print(type(e).__name__, e)"],
        capture_output=True, text=True, env=process_environment(), cwd=REPOSITORY, timeout=60,
    )  # fmt: skip
    assert python.stdout.startswith("OptionError this system has no Landlock"), python.stderr
    assert "run unconfined with sandbox=False" in python.stdout
    trajectory = assert_refused_unless_unconfined(tmp_path, WITHOUT_LANDLOCK, "no Landlock")
    provenance = read_provenance(trajectory)
    assert provenance is not None and provenance.sandbox == "none"


class TcpRecorder(Recorder):
    """A recorder whose kernel talks over TCP (as a replay whose forked children must not reach it may)."""

    def transport(self) -> str:
        return "tcp"


def test_over_tcp_the_sandboxed_kernel_binds_its_own_ports_and_connects_to_none(tmp_path: Path) -> None:
    cell = (
        "import json, socket\nfrom ipykernel.connect import get_connection_info\n"
        "port = json.loads(get_connection_info())['shell_port']\n"
        + attempt("socket.create_connection(('127.0.0.1', port), timeout=5).close()")
        + "\n"
        + attempt("socket.socket().bind(('127.0.0.1', 0))")
    )
    with TcpRecorder("tcp", tmp_path, RecordOptions(timeout=60)) as recorder:
        step = recorder.run_cell(cell, "c0")
        told = recorder.run_cell("json.loads(get_connection_info())['transport']", "c1")
        after = recorder.run_cell("x = 1\nx", "c2")
    # the kernel answered over its TCP ports, yet cannot reach its own shell port nor bind another one
    assert told.output == "'tcp'"
    assert step.error is None and step.output.split() == ["PermissionError", "PermissionError"]
    assert after.output == "1" and not after.restarted
