"""Hostile notebooks on real kernels: every fault ends as a recorded step, and the next step runs.

Each test records a small notebook through :func:`record_source`, so a fault
must reach the trajectory file on disk, not just a return value.
"""

from __future__ import annotations

import json
import os
import resource
import signal
import subprocess
import sys
import tracemalloc
from dataclasses import replace
from pathlib import Path

import nbformat
import psutil
import pytest
from attacks import STARTED, is_gone_from_box, wait_for

from themisto.cli import main
from themisto.exceptions import KernelError
from themisto.kernel.inside.wire import LaunchRequest, Sandbox
from themisto.kernel.launcher import launcher_command
from themisto.kernel.recorder import Recorder
from themisto.recording.options import RecordOptions
from themisto.recording.record import record_source
from themisto.trajectory import Step, read_trajectory

pytestmark = pytest.mark.kernel  # every test drives a real kernel

OPTIONS = RecordOptions(timeout=2, repr_timeout=0.3, max_output_chars=200, max_raw_output_chars=1000)
NEXT = "print('next step ran')"


def record_cells(tmp_path: Path, cells: list[str], options: RecordOptions = OPTIONS) -> list[Step]:
    """Record a notebook of ``cells`` (in a fresh kernel in ``tmp_path``) and read its trajectory back."""
    notebook = nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(code) for code in cells])
    source = tmp_path / "hostile.ipynb"
    nbformat.write(notebook, source)
    [path] = record_source(source, tmp_path / "out", options)
    steps = read_trajectory(path)
    assert [step.step for step in steps] == list(range(len(cells)))
    return steps


def assert_next_step_ran(step: Step, restarted: bool) -> None:
    assert step.error is None and step.output == "next step ran" and step.restarted is restarted


def assert_process_gone(pid: list[int]) -> None:
    """The process a cell named by ``started(pid)`` has exited (a zombie awaiting its reaper counts as gone)."""
    wait_for(lambda: is_gone_from_box(*pid), timeout=5, what=f"process {pid} to end, which outlived the kernel")


# --- the kernel dies ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("cell", "cause"),
    [
        ("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)", "killed by SIGKILL"),
        ("import ctypes\nctypes.string_at(0)", "killed by SIGSEGV"),
        # another process kills the kernel while the cell waits, as the OOM killer would
        (
            "import os, subprocess, sys, time\n"
            "subprocess.Popen([sys.executable, '-c', f'import os; os.kill({os.getpid()}, 9)'])\ntime.sleep(30)",
            "killed by SIGKILL",
        ),
    ],
    ids=["self-sigkill", "segfault", "killed-from-outside"],
)
def test_kernel_killed_mid_cell_is_a_step_and_the_next_step_runs(tmp_path: Path, cell: str, cause: str) -> None:
    before, dead, after = record_cells(tmp_path, ["lost = 1", cell, NEXT])
    assert [variable.name for variable in before.runtime] == ["lost"]
    assert dead.error["ename"] == "DeadKernelError" and cause in dead.error["evalue"]
    assert dead.runtime == [] and dead.memory_bytes is None and dead.execution_time < OPTIONS.timeout + 5
    assert_next_step_ran(after, restarted=True)
    assert after.runtime == []


# --- resource limits ---------------------------------------------------------------------------


def test_unbounded_allocation_under_max_memory_is_a_step(tmp_path: Path) -> None:
    limit = 400 * 2**20
    steps = record_cells(
        tmp_path,
        [
            "import resource\nresource.getrlimit(resource.RLIMIT_DATA)",
            "fits = bytearray(100 * 2**20)\nlen(fits)",  # work within the limit is unaffected
            "hoard = []\nwhile True:\n    hoard.append(bytearray(16 * 2**20))",
            NEXT,
        ],
        replace(OPTIONS, max_memory=limit, timeout=20),
    )
    limits, fits, hoard, after = steps
    assert limits.output == f"({limit}, {limit})"
    assert fits.error is None and fits.output == str(100 * 2**20)
    # the allocation fails fast, as a MemoryError in the cell or as the death of the kernel
    assert hoard.error["ename"] in {"MemoryError", "DeadKernelError"} and hoard.execution_time < 10
    assert hoard.memory_bytes is None or hoard.memory_bytes < limit
    assert_next_step_ran(after, restarted=hoard.error["ename"] == "DeadKernelError")


def test_cpu_time_limit_kills_the_kernel_and_a_restart_gets_a_fresh_budget(tmp_path: Path) -> None:
    spin, after, spin_again, last = record_cells(
        tmp_path,
        [
            "while True: pass",
            NEXT,
            "import signal\nsignal.signal(signal.SIGXCPU, signal.SIG_IGN)\nwhile True: pass",
            NEXT,
        ],
        replace(OPTIONS, max_cpu_seconds=3, timeout=30),
    )
    assert spin.error["ename"] == "DeadKernelError" and "SIGXCPU: CPU time limit" in spin.error["evalue"]
    assert_next_step_ran(after, restarted=True)
    # a kernel that ignores SIGXCPU is killed at the hard limit a second later
    assert spin_again.error["ename"] == "DeadKernelError" and "SIGKILL" in spin_again.error["evalue"]
    assert_next_step_ran(last, restarted=True)


def test_a_memory_limit_too_small_for_the_kernel_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(KernelError, match="did not start.*memory limit"):
        with Recorder(trajectory_id="tiny", workdir=tmp_path, options=replace(OPTIONS, max_memory=8 * 2**20)):
            pass


def test_every_kernel_command_runs_under_the_launcher_with_its_limits() -> None:
    command = ["python", "-m", "ipykernel_launcher", "-f", "conn.json"]
    launcher = [sys.executable, "-m", "themisto.kernel.launcher"]
    plain = launcher_command(command, None, None, None)
    assert plain[:3] == launcher and plain[4:] == ["--", *command]
    assert LaunchRequest.from_json(plain[3]) == LaunchRequest(os.getpid(), None, None, None)
    sandbox = Sandbox(["/work", "/dev/null"], allow_network=True, bind_ports=[])
    confined = launcher_command(command, 2**30, 5, sandbox)
    assert confined[:3] == launcher and confined[4:] == ["--", *command]
    assert LaunchRequest.from_json(confined[3]) == LaunchRequest(os.getpid(), 2**30, 5, sandbox)


@pytest.mark.parametrize(
    "arguments",
    [
        ["{}", "--", "python"],  # fields missing
        ['{"parent": 1, "max_memory": "1G", "max_cpu_seconds": null, "sandbox": null}', "--", "python"],
        ['{"parent": 1, "max_memory": null, "max_cpu_seconds": null, "sandbox": null}'],  # no command
        [
            '{"parent": 1, "max_memory": null, "max_cpu_seconds": null,'
            ' "sandbox": {"writable": [], "allow_network": false, "bind_ports": []}}',
            "--",
            "python",
        ],  # a sandbox that lets the kernel write nowhere, not even its sockets
    ],
)
def test_the_launcher_refuses_a_request_the_wire_does_not_decode_in_one_line(arguments: list[str]) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "themisto.kernel.launcher", *arguments], capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 2 and result.stderr.count("\n") == 1, result.stderr
    assert result.stderr.startswith("python -m themisto.kernel.launcher: ")


def test_launcher_sets_limits_on_the_kernel_it_supervises() -> None:
    probe = (
        "import os, resource, signal, sys\n"
        "signal.signal(signal.SIGINT, lambda *a: (print('interrupted', flush=True), sys.exit(7)))\n"
        "print(os.getppid(), resource.getrlimit(resource.RLIMIT_DATA), resource.getrlimit(resource.RLIMIT_CPU),"
        " flush=True)\n"
        "signal.pause()"
    )
    # an inherited hard CPU limit below the request wins: an unprivileged process cannot raise it
    process = subprocess.Popen(
        launcher_command([sys.executable, "-c", probe], 2**30, 100, None),
        stdout=subprocess.PIPE,
        text=True,
        start_new_session=True,  # as jupyter_client starts it
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_CPU, (50, 50)),
    )
    assert process.stdout is not None
    parent, limits = process.stdout.readline().split(" ", 1)
    assert limits.strip() == f"({2**30}, {2**30}) (50, 50)"
    assert int(parent) == process.pid  # the kernel is the launcher's child ...
    assert resource.getrlimit(resource.RLIMIT_DATA) == psutil.Process(process.pid).rlimit(resource.RLIMIT_DATA)
    # ... interrupts sent to the process group (as jupyter_client does) reach the kernel, not the launcher,
    # and the launcher exits as the kernel did
    os.killpg(process.pid, signal.SIGINT)
    out, _ = process.communicate(timeout=30)
    assert out.strip() == "interrupted" and process.returncode == 7


def test_record_cli_takes_limits_and_rejects_bad_sizes(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    notebook = nbformat.v4.new_notebook(
        cells=[
            nbformat.v4.new_code_cell(
                "import resource\nresource.getrlimit(resource.RLIMIT_DATA)[0], "
                "resource.getrlimit(resource.RLIMIT_CPU)[0]"
            )
        ]
    )
    nbformat.write(notebook, tmp_path / "limits.ipynb")
    out = tmp_path / "out"
    limits = ["--max-memory", "1.5G", "--max-cpu-seconds", "60"]
    assert main(["record", str(tmp_path / "limits.ipynb"), "-o", str(out), *limits]) == 0
    [step] = read_trajectory(out / "limits.jsonl")
    assert step.output == f"({3 * 2**29}, 60)"
    capsys.readouterr()
    for flag, value in [("--max-memory", "lots"), ("--max-memory", "0"), ("--max-cpu-seconds", "0")]:
        assert main(["record", str(tmp_path / "limits.ipynb"), "-o", str(tmp_path / "bad"), flag, value]) == 2
        error = capsys.readouterr().err
        assert error.count("\n") == 1 and error.startswith("themisto record: error:") and flag in error
    assert not (tmp_path / "bad").exists()


# --- output floods -----------------------------------------------------------------------------


def test_endless_print_loop_is_truncated_and_timed_out(tmp_path: Path) -> None:
    flood, after = record_cells(tmp_path, ["i = 0\nwhile True:\n    print(i, 'x' * 100)\n    i += 1", NEXT])
    assert flood.error["ename"] == "TimeoutError"
    assert flood.output_truncated and flood.output_length > 100 * OPTIONS.max_output_chars
    assert flood.output.startswith("0 xxx")
    assert flood.output.endswith(f"[output truncated: {flood.output_length} characters in all]")
    assert len(json.dumps(flood.outputs)) < 2 * OPTIONS.max_raw_output_chars  # the raw outputs keep their budget
    assert [variable.name for variable in flood.runtime] == ["i"]
    assert_next_step_ran(after, restarted=False)


def test_recorder_memory_stays_bounded_while_output_pours_in(tmp_path: Path) -> None:
    # The kernel sends its output in one message per 0.2 s. Paced writes keep those messages even, so
    # the recorder, which holds a few copies of one message at a time, peaks at a fixed share of the
    # output of 5 s (about a quarter at most), while keeping all of it would hold the whole.
    cell = "import sys, time\nwhile True:\n    sys.stdout.write('x' * 2**20 + '\\n')\n    time.sleep(0.05)"
    with Recorder(trajectory_id="flood", workdir=tmp_path, options=replace(OPTIONS, timeout=5)) as recorder:
        tracemalloc.start()
        try:
            flood = recorder.run_cell(cell, "flood")
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
        after = recorder.run_cell(NEXT, "next")
    print(f"recorder peak {peak / 2**20:.1f} MiB (tracemalloc) for {flood.output_length / 2**20:.1f} MiB of output")
    assert flood.error["ename"] == "TimeoutError" and flood.output_truncated
    assert flood.output_length > 20 * 2**20
    assert peak < flood.output_length / 2, f"recorder peaked at {peak} bytes for {flood.output_length} of output"
    assert_next_step_ran(after, restarted=False)


# --- stdin, exits, closed streams ------------------------------------------------------------------


def test_reading_input_fails_fast_instead_of_waiting(tmp_path: Path) -> None:
    prompt, password, stdin, after = record_cells(
        tmp_path, ["input('name? ')", "import getpass\ngetpass.getpass()", "import sys\nsys.stdin.read()", NEXT]
    )
    assert prompt.error["ename"] == password.error["ename"] == "StdinNotImplementedError"
    assert stdin.error is None and stdin.output == "''"  # the kernel's stdin is at end of file
    assert max(step.execution_time for step in (prompt, password, stdin)) < OPTIONS.timeout
    assert_next_step_ran(after, restarted=False)


def test_sys_exit_and_exit_are_steps_and_the_kernel_lives_on(tmp_path: Path) -> None:
    setup, sys_exit, ipython_exit, after = record_cells(
        tmp_path, ["kept = 'alive'", "import sys\nsys.exit(3)", "exit()", NEXT]
    )
    assert sys_exit.error == {"ename": "SystemExit", "evalue": "3"} and sys_exit.output.startswith("SystemExit: 3")
    # IPython's exit() only asks the front end to close the kernel; the recorder keeps it
    assert ipython_exit.error is None
    assert_next_step_ran(after, restarted=False)
    assert [variable.name for variable in after.runtime] == ["kept"]


def test_closed_stdout_is_a_step_and_later_cells_still_run(tmp_path: Path) -> None:
    close, printing, value = record_cells(tmp_path, ["import sys\nsys.stdout.close()", NEXT, "answer = 40 + 2\nanswer"])
    assert close.error is None
    # as in Jupyter, later prints fail on the closed stream; the kernel and its snapshots carry on
    assert printing.error == {"ename": "ValueError", "evalue": "I/O operation on closed file"}
    assert value.error is None and value.output == "42" and [v.name for v in value.runtime] == ["answer"]


def test_closed_file_descriptors_are_steps_and_later_cells_still_run(tmp_path: Path) -> None:
    steps = record_cells(tmp_path, ["import os\nos.close(0)\nos.close(1)\nos.close(2)", "print('x')\n40 + 2", "40 + 2"])
    # whether ipykernel's output capture survives losing its descriptors depends on timing:
    # either the kernel carries on or its death is recorded and it is restarted
    assert all(step.error is None or step.error["ename"] == "DeadKernelError" for step in steps)
    assert steps[-1].error is None and steps[-1].output == "42"


# --- shell escapes -------------------------------------------------------------------------------


def test_shell_lines_and_bash_cells_are_steps(tmp_path: Path) -> None:
    bang, captured, bash_ok, bash_failing, hanging, after = record_cells(
        tmp_path,
        [
            "!echo from-bang",
            "files = !echo one two\nfiles",
            "%%bash\necho from-bash\necho to-stderr >&2",
            "%%bash\necho partial\nexit 3",
            "!sleep 60",
            NEXT,
        ],
    )
    assert bang.error is None and bang.output.strip() == "from-bang"
    assert captured.error is None and captured.output == "['one two']"
    assert bash_ok.error is None and bash_ok.output.split() == ["from-bash", "to-stderr"]
    assert bash_failing.error["ename"] == "CalledProcessError" and bash_failing.output.startswith("partial\n")
    # the interrupt reaches the shell's child too: it is in the kernel's process group
    assert hanging.error["ename"] == "TimeoutError" and hanging.execution_time < OPTIONS.timeout + 3
    assert_next_step_ran(after, restarted=False)


# --- forks ---------------------------------------------------------------------------------------


def test_forks_are_steps_and_no_child_outlives_the_kernel(tmp_path: Path) -> None:
    reaped, lingering, twin, after = record_cells(
        tmp_path,
        [
            "import os\npid = os.fork()\nif pid == 0:\n    os._exit(0)\nos.waitpid(pid, 0)[1]",
            STARTED
            + "import time\nchild = os.fork()\nif child == 0:\n    time.sleep(600)\n    os._exit(0)\nstarted(child)",
            # no branch: the child carries on as a second copy of the kernel
            "import os\nparent = os.getpid()\nos.fork()\nif os.getpid() != parent:\n    time.sleep(600)",
            NEXT,
        ],
    )
    assert reaped.error is None and reaped.output == "0"
    assert lingering.error is None and json.loads(lingering.output)[0] > 0
    assert twin.error is None
    assert_next_step_ran(after, restarted=False)
    # the kernel is shut down with its whole process group, so a lingering child dies with it
    assert_process_gone(json.loads(lingering.output))


def test_a_cell_that_tampers_with_the_snapshot_module_is_still_recorded(tmp_path: Path) -> None:
    tampered, after, removed, last = record_cells(
        tmp_path,
        [
            "import sys\nsys.modules['_themisto_snapshot'].take = lambda *args: 5\nvalue = 1",
            NEXT,
            "del sys.modules['_themisto_snapshot']",
            NEXT,
        ],
    )
    assert tampered.error is None and tampered.runtime == []
    assert_next_step_ran(after, restarted=False)
    assert removed.error is None and removed.runtime == []
    assert_next_step_ran(last, restarted=False)
