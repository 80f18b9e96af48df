"""Helpers for the attack tests (``tests/test_attacks_*.py``): notebooks, real ``themisto`` processes, probes."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import nbformat
import psutil
import pytest
from repository import REPOSITORY

# Seconds a real `themisto` process may take; kernel start-up is slow on a loaded machine.
PROCESS_TIMEOUT = 300


def write_notebook(path: Path, cells: list[str]) -> Path:
    """A notebook of code cells ``c0``, ``c1``, ... at ``path``."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code, id=f"c{i}") for i, code in enumerate(cells)]
    nbformat.write(notebook, path)
    return path


def themisto_command(*arguments: str) -> list[str]:
    """The command line of a real ``themisto`` process."""
    return [sys.executable, "-m", "themisto", *arguments]


def process_environment(**extra: str) -> dict[str, str]:
    """This process's environment, with this checkout importable, plus ``extra``."""
    environment = dict(os.environ)
    environment["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPOSITORY), environment.get("PYTHONPATH")]))
    environment.update(extra)
    return environment


def run_themisto(*arguments: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``themisto ARGUMENTS`` to the end in a process of its own."""
    return subprocess.run(
        themisto_command(*arguments),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        env=env or process_environment(),
        cwd=REPOSITORY,
    )


def start_themisto(*arguments: str, env: dict[str, str] | None = None) -> subprocess.Popen[str]:
    """Start ``themisto ARGUMENTS`` in a process of its own, its output captured."""
    return subprocess.Popen(
        themisto_command(*arguments),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=env or process_environment(),
        cwd=REPOSITORY,
    )


def assert_one_line_error(stderr: str, command: str, *fragments: str) -> None:
    """``stderr`` ends with one ``themisto COMMAND: error:`` line containing every fragment, and holds no traceback.

    (``record`` also names each failed trajectory on a line of its own before it.)
    """
    lines = stderr.strip().splitlines()
    assert lines and lines[-1].startswith(f"themisto {command}: error:") and "Traceback" not in stderr, stderr
    for fragment in fragments:
        assert fragment in lines[-1], (fragment, lines[-1])


def wait_for(condition: Callable[[], bool], timeout: float = PROCESS_TIMEOUT, what: str = "condition") -> None:
    """Poll ``condition`` every 20 ms until it holds; fail after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            pytest.fail(f"timed out waiting for {what}")
        time.sleep(0.02)


def interrupt(process: subprocess.Popen[str]) -> tuple[float, str]:
    """Ctrl-C ``process`` (a themisto command), wait for it to end; the seconds it took and its stderr."""
    interrupted = time.monotonic()
    try:
        process.send_signal(signal.SIGINT)
        _, stderr = process.communicate(timeout=30)
    finally:
        process.kill()
    return time.monotonic() - interrupted, stderr


def processes_named(marker: str) -> list[psutil.Process]:
    """The processes whose command line has ``marker`` as one of its arguments."""
    return [p for p in psutil.process_iter(["cmdline"]) if marker in (p.info["cmdline"] or [])]


def is_gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie awaiting its reaper has ended)."""
    try:
        return psutil.Process(pid).status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


# A cell's ``started(pid)``: the start time of its process ``pid`` (clock ticks since boot, which a PID namespace
# does not change), by which the host finds a process of a box whose pid there is not the host's.
STARTED = "def started(pid):\n    return [pid, int(open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[19])]\n"


# A prediction's ``the_kernel()``: the replay kernel's pid as /proc names it. Unconfined, its parent; in its box its
# parent is outside its PID namespace (``getppid()`` reads 0), and /proc, the replay kernel's box's, shows the
# kernel as the oldest process running ipykernel (the others are its forks, the predictions).
# ``signal_the_kernel(number)``: by its pid, unconfined; in the box, through the kernel's /proc folder.
THE_KERNEL = """
def the_kernel():
    import os
    if os.getppid():
        return os.getppid()
    def command(name):
        try:
            return open(f'/proc/{name}/cmdline', 'rb').read().split(b'\\0')[1:3]
        except OSError:
            return []
    return min(int(name) for name in os.listdir('/proc') if name.isdigit() and command(name) == [b'-m', b'ipykernel_launcher'])
def signal_the_kernel(number):
    import os, signal
    if os.getppid():
        os.kill(os.getppid(), number)
    else:  # a pid in a kill() names a process of the caller's PID namespace: the kernel's /proc folder as a pidfd
        signal.pidfd_send_signal(os.open(f'/proc/{the_kernel()}', os.O_RDONLY), number)
"""


def host_process(box_pid: int, start: int) -> psutil.Process | None:
    """The live process of the host that has pid ``box_pid`` in its innermost PID namespace and started at
    ``start`` (a cell's ``started(pid)``); None when it has ended (a zombie has ended)."""
    for process in psutil.process_iter():
        try:
            status = Path(f"/proc/{process.pid}/status").read_text()
            fields = Path(f"/proc/{process.pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        innermost = next(line.split()[-1] for line in status.splitlines() if line.startswith("NSpid:"))
        if int(innermost) == box_pid and int(fields[19]) == start and fields[0] != "Z":
            return process
    return None


def is_gone_from_box(box_pid: int, start: int) -> bool:
    """Whether the process a cell named by ``started(pid)`` has ended."""
    return host_process(box_pid, start) is None


def lines_of(path: Path) -> int:
    """Complete lines in a file (0 if it does not exist)."""
    return path.read_bytes().count(b"\n") if path.exists() else 0


def private_mount_command(script: str) -> list[str]:
    """``sh -c SCRIPT`` in a mount namespace of its own, where the script may mount file systems.

    Skips the test where namespaces are not available (no ``unshare``, or a
    container that forbids them).
    """
    unshare = shutil.which("unshare")
    if unshare is None or not sys.platform.startswith("linux"):
        pytest.skip("needs unshare (Linux mount namespaces)")
    base = [unshare, "--mount", "--propagation", "private"]
    if os.geteuid() != 0:
        base.insert(1, "--map-root-user")
    probe = subprocess.run([*base, "mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", "/mnt"], capture_output=True)
    if probe.returncode != 0:
        pytest.skip(f"cannot mount in a private namespace here: {probe.stderr.decode().strip()}")
    return [*base, "sh", "-ec", script]


def seccomp_stand_in(rules: str) -> list[str]:
    """``python -c CODE`` that runs the rest of its command line under a seccomp filter: ``rules``, lines of BPF
    instructions ``(code, jt, jf, k),`` seeing the syscall number, then "allow". A stand-in for a system that
    lacks what the rules refuse; the filter is inherited by every process started below it."""
    code = f"""
import ctypes, os, struct, sys
libc = ctypes.CDLL(None, use_errno=True)
program = b''.join(struct.pack('HBBI', *instruction) for instruction in [
    (0x20, 0, 0, 0),  # load the syscall number
{rules}
    (0x06, 0, 0, 0x7FFF0000),  # allow
])
buffer = ctypes.create_string_buffer(program)
fprog = struct.pack('HxxxxxxQ', len(program) // 8, ctypes.addressof(buffer))
assert libc.prctl(38, 1, 0, 0, 0) == 0  # no new privileges
assert libc.prctl(22, 2, ctypes.c_char_p(fprog), 0, 0) == 0, ctypes.get_errno()  # seccomp filter
os.execv(sys.executable, [sys.executable, *sys.argv[1:]])
"""
    return [sys.executable, "-c", code]


def assert_refused_unless_unconfined(tmp_path: Path, rules: str, *fragments: str) -> Path:
    """Under the seccomp stand-in of ``rules``, ``record`` and ``stability`` refuse in one line holding every
    fragment (and ``--no-sandbox``), before writing anything; ``record --no-sandbox`` runs. Its trajectory."""
    notebook = write_notebook(tmp_path / "plain.ipynb", ["x = 1"])
    wrapper = seccomp_stand_in(rules)

    def run(*arguments: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [*wrapper, *themisto_command(*arguments)[1:]],
            capture_output=True, text=True, env=process_environment(), cwd=REPOSITORY, timeout=PROCESS_TIMEOUT,
        )  # fmt: skip

    for command in (["record", str(notebook), "-o", str(tmp_path / "out")], ["stability", str(tmp_path / "none")]):
        refused = run(*command)
        assert refused.returncode == 2
        assert_one_line_error(refused.stderr, command[0], *fragments, "--no-sandbox")
    assert not (tmp_path / "out" / "plain.jsonl").exists()
    unconfined = run("record", str(notebook), "-o", str(tmp_path / "out"), "--no-sandbox")
    assert unconfined.returncode == 0, unconfined.stderr
    return tmp_path / "out" / "plain.jsonl"
