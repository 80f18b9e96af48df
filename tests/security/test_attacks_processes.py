"""Attacks on processes: nothing outlives a recording, a broken kernel is seen quickly, Ctrl-C stops at once.

SECURITY.md, threats 5, 6 and 9. Real kernels, real ``themisto`` processes.
"""

from __future__ import annotations

import functools
import json
import signal
import time
from dataclasses import replace
from pathlib import Path

import psutil
import pytest
from attacks import (
    STARTED,
    host_process,
    interrupt,
    is_gone,
    is_gone_from_box,
    lines_of,
    start_themisto,
    wait_for,
    write_notebook,
)

from themisto.kernel.inside.namespaces import INIT_NAME
from themisto.kernel.transport import SILENT_KERNEL_GRACE
from themisto.recording.options import RecordOptions
from themisto.recording.record import record_source
from themisto.trajectory import read_trajectory

pytestmark = pytest.mark.kernel  # every test records or kills a real kernel

OPTIONS = RecordOptions(timeout=30, repr_timeout=0.3)

# A cell that starts a process in a session of its own and a double-forked daemon, and prints their pids.
ESCAPES = (
    STARTED
    + """import json, os, subprocess, sys, time
session = subprocess.Popen(['sleep', '600'], start_new_session=True)
reader, writer = os.pipe()
if os.fork() == 0:  # the classic daemon: fork, new session, fork again, parent exits
    os.setsid()
    if os.fork() == 0:
        os.write(writer, str(os.getpid()).encode())
        time.sleep(600)
    os._exit(0)
os.wait()
pids = {'kernel': started(os.getpid()), 'session': started(session.pid), 'daemon': started(int(os.read(reader, 32)))}"""
)


def test_nothing_the_notebook_started_outlives_the_trajectory(tmp_path: Path) -> None:
    notebook = write_notebook(tmp_path / "escapes.ipynb", [ESCAPES + "\nprint(json.dumps(pids))", "print('done')"])
    [path] = record_source(notebook, tmp_path / "out", OPTIONS)
    started, done = read_trajectory(path)
    pids = json.loads(started.output)
    assert done.output == "done" and not done.restarted
    # all of them were alive while the trajectory ran: they were started in a session of their own,
    # so the process group kill of jupyter_client alone did not reach them
    for name, pid in pids.items():
        wait_for(functools.partial(is_gone_from_box, *pid), timeout=10, what=f"the {name} process {pid} to end")


def test_the_kernel_and_everything_it_started_die_with_a_killed_recorder(tmp_path: Path) -> None:
    pid_file = tmp_path / "pids.json"
    # the pids file appears whole (a rename), then the cell waits
    cell = f"{ESCAPES}\nopen('pids.tmp', 'w').write(json.dumps(pids))\nos.rename('pids.tmp', {str(pid_file)!r})"
    notebook = write_notebook(tmp_path / "escapes.ipynb", [cell + "\ntime.sleep(600)"])
    recorder = start_themisto("record", str(notebook), "-o", str(tmp_path / "out"), "--timeout", "900")
    try:
        wait_for(lambda: pid_file.exists() or recorder.poll() is not None, what="the cell's processes")
        assert recorder.poll() is None, recorder.communicate()
        pids = json.loads(pid_file.read_text())
        kernel = host_process(*pids["kernel"])
        assert kernel is not None and all(not is_gone_from_box(*pid) for pid in pids.values())
        # in the box, the kernel's parent is the box's init, a fork of the launcher with its command line
        launcher = next(process.pid for process in kernel.parents() if process.name() != INIT_NAME)
        recorder.kill()  # SIGKILL: the recorder cannot clean up
        recorder.wait(timeout=30)
    finally:
        recorder.kill()
        recorder.communicate()
    for name, pid in pids.items():
        wait_for(functools.partial(is_gone_from_box, *pid), timeout=10, what=f"the {name} process {pid} to end")
    wait_for(functools.partial(is_gone, launcher), timeout=10, what=f"the launcher {launcher} to end")


def test_replaced_streams_are_restored_and_later_cells_recorded_normally(tmp_path: Path) -> None:
    cells = [
        "import sys\nsys.stdout = None",
        "y = 2",
        "sys.stderr = None\nprint('this cell printed')",
        "print('out')\nprint('err', file=sys.stderr)",
        "sys.displayhook = None",
        "40 + 2",
    ]
    notebook = write_notebook(tmp_path / "streams.ipynb", cells)
    [path] = record_source(notebook, tmp_path / "out", OPTIONS)
    steps = read_trajectory(path)
    assert [step.error for step in steps] == [None] * len(cells)
    assert not any(step.restarted for step in steps)
    assert max(step.execution_time for step in steps) < 5
    assert "y" in [variable.name for variable in steps[1].runtime]
    assert steps[2].output == "this cell printed"  # stdout was still the kernel's in that cell
    assert steps[3].output == "out\nerr" and steps[5].output == "42"


def test_a_kernel_that_stops_handling_requests_is_restarted_within_seconds(tmp_path: Path) -> None:
    cells = [
        # the kernel's request handling fails before it says "busy": the next request gets no answer at all
        "type(get_ipython()).set_parent = lambda *args, **kwargs: 1 / 0",
        "y = 2",
        "z = 3",
        # the kernel takes the request, says "idle", and never replies
        "get_ipython().kernel.shell_handlers['execute_request'] = lambda *args: None",
        "w = 4",
        "print('alive')",
    ]
    notebook = write_notebook(tmp_path / "silent.ipynb", cells)
    [path] = record_source(notebook, tmp_path / "out", replace(OPTIONS, timeout=120))
    broken, silent, after, broken_again, unanswered, last = read_trajectory(path)
    assert broken.error is None and broken_again.error is None
    for step, cause in [(silent, "did not start the cell"), (unanswered, "finished the cell without a reply")]:
        assert step.error["ename"] == "DeadKernelError" and cause in step.error["evalue"]
        assert step.execution_time < SILENT_KERNEL_GRACE + 5  # seconds, not the 120 s timeout
    assert after.restarted and after.error is None and [v.name for v in after.runtime] == ["z"]
    assert last.restarted and last.output == "alive"


def test_ctrl_c_stops_within_two_seconds_keeping_every_completed_step(tmp_path: Path) -> None:
    notebook = write_notebook(tmp_path / "long.ipynb", ["a = 1", "b = 2", "import time\ntime.sleep(600)", "c = 3"])
    out = tmp_path / "out"
    trajectory = out / "long.jsonl"
    recorder = start_themisto("record", str(notebook), "-o", str(out), "--timeout", "900")
    try:
        wait_for(lambda: lines_of(trajectory) == 2 or recorder.poll() is not None, what="two recorded steps")
        kernels = psutil.Process(recorder.pid).children(recursive=True)
        time.sleep(0.5)  # the third cell is running
    except BaseException:
        recorder.kill()
        raise
    elapsed, stderr = interrupt(recorder)
    print(f"stopped {elapsed:.2f} s after Ctrl-C")
    assert elapsed < 2.0
    assert recorder.returncode == 130 and stderr.strip().splitlines()[-1] == "themisto record: interrupted"
    assert [step.code for step in read_trajectory(trajectory)] == ["a = 1", "b = 2"]
    assert not (out / ".long.jsonl.lock").exists()  # the abandoned cell is not marked as one that stopped a run
    assert kernels and all(is_gone(process.pid) for process in kernels)


def test_a_second_ctrl_c_stops_at_once(tmp_path: Path) -> None:
    notebook = write_notebook(tmp_path / "long.ipynb", ["a = 1", "import time\ntime.sleep(600)"])
    out = tmp_path / "out"
    recorder = start_themisto("record", str(notebook), "-o", str(out), "--timeout", "900")
    launcher = None
    try:
        wait_for(lambda: lines_of(out / "long.jsonl") == 1 or recorder.poll() is not None, what="the first step")
        [launcher] = psutil.Process(recorder.pid).children()
        kernels = launcher.children(recursive=True)
        # a clean stop that hangs: the frozen launcher cannot shut its kernel down, so the first Ctrl-C waits
        launcher.suspend()
        recorder.send_signal(signal.SIGINT)
        time.sleep(1.0)
        assert recorder.poll() is None
        interrupted = time.monotonic()
        recorder.send_signal(signal.SIGINT)
        _, stderr = recorder.communicate(timeout=30)
        elapsed = time.monotonic() - interrupted
    finally:
        recorder.kill()
        if launcher is not None:
            launcher.resume()  # once it runs again it sees its recorder is gone and takes the kernel with it
    assert elapsed < 1.0 and recorder.returncode == 130
    assert stderr.strip().splitlines()[-1] == "themisto record: interrupted again, stopping at once"
    assert [step.code for step in read_trajectory(out / "long.jsonl")] == ["a = 1"]
    for process in [launcher, *kernels]:
        wait_for(functools.partial(is_gone, process.pid), timeout=10, what=f"process {process.pid} to end")
