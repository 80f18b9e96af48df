"""The process that runs a confined cell (``namespaces.contain``): a clone of the forked child that shares its
memory, the caller's child, in the child's PID namespace, with the C library's state of a forked process.
In-process, real namespaces: this test's process plays the kernel."""

from __future__ import annotations

import ctypes
import faulthandler
import os
import shutil
import signal
import sys
import time
import warnings
from collections.abc import Callable, Iterator

import psutil
import pytest

from themisto.kernel.inside import namespaces

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PID namespaces, clone"),
    pytest.mark.skipif(
        sys.platform.startswith("linux") and namespaces.unavailable() is not None,
        reason=f"no user and PID namespaces here: {namespaces.unavailable()}",
    ),
]
# pthread_rwlock_t is 56 bytes on x86_64 and aarch64; all zeros is PTHREAD_RWLOCK_INITIALIZER
RWLOCK_BYTES = 64


class Started:
    """A forked child that entered a PID namespace and started its runner, which waits for the test's byte."""

    def __init__(self, then: Callable[[], None]) -> None:
        self.answers, answer = os.pipe()
        go, self.go = os.pipe()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", DeprecationWarning)
            self.child = os.fork()
        if self.child == 0:
            try:
                os.close(self.answers)
                os.close(self.go)
                os.dup2(answer, 3)  # the runner's answers, where ``then`` writes them
                # a child that resumes once its runner has ended dies of its reused stack, which pytest's fault
                # handler would report
                faulthandler.disable()
                os.setpgid(0, 0)
                namespaces.enter(network=False, map_ids=False, pid=True)
                runner = namespaces.contain()
                os.write(answer, f"{runner} {os.getpid()}\n".encode())
                os.read(go, 1)
                then()
            finally:
                os._exit(0)
        os.close(answer)
        os.close(go)
        self.reader = os.fdopen(self.answers, "rb")
        # not read to the end: the suspended child holds the pipe until it is killed
        self.runner, self.inside = map(int, self.reader.readline().split())

    def kill_child(self) -> int:
        """Kill the child that started the runner, as the kernel does at the ready frame; its wait status."""
        os.kill(self.child, signal.SIGKILL)
        return os.waitpid(self.child, 0)[1]

    def go_on(self) -> list[str]:
        """Let the runner run ``then``; the lines it writes to its descriptor 3, until it ends."""
        os.write(self.go, b"g")
        return [line.decode().strip() for line in self.reader]

    def close(self) -> None:
        for pid in (self.runner, self.child):
            try:
                os.kill(pid, signal.SIGKILL)
                os.waitpid(pid, 0)
            except (ChildProcessError, ProcessLookupError):
                pass
        self.reader.close()
        os.close(self.go)


@pytest.fixture
def started() -> Iterator[list[Started]]:
    made: list[Started] = []
    yield made
    for each in made:
        each.close()


def _report_locks() -> None:
    """In the runner: whether a fresh rwlock can be taken for writing, and whether it has a robust list."""
    libc = ctypes.CDLL(None, use_errno=True)
    lock = ctypes.create_string_buffer(RWLOCK_BYTES)
    head, length = ctypes.c_void_p(), ctypes.c_size_t()
    calls = namespaces._CALLS[os.uname().machine]
    libc.syscall(calls["get_robust_list"], 0, ctypes.byref(head), ctypes.byref(length))
    os.write(3, f"{libc.pthread_rwlock_wrlock(lock)} {bool(head.value)}\n".encode())


def test_the_runner_is_the_callers_child_and_its_locks_work_once_the_child_is_dead(started: list[Started]) -> None:
    # before: the child's death cleared the C library's thread id in the memory the runner shares, and every lock
    # that compares owners took the runner for the owner of a free lock: importing pyarrow (pandas does) aborted
    # with "Resource deadlock avoided"
    run = Started(_report_locks)
    started.append(run)
    assert psutil.Process(run.runner).ppid() == os.getpid()
    assert run.inside == 2  # its namespace's second process: the init (cat) is the first
    assert psutil.Process(run.child).status() == psutil.STATUS_DISK_SLEEP  # suspended until the runner ends
    assert os.WTERMSIG(run.kill_child()) == signal.SIGKILL
    assert run.go_on() == ["0 True"]
    assert os.waitpid(run.runner, 0)[1] == 0


@pytest.mark.parametrize("ending", ["exit", "signal"])
def test_how_the_runner_ends_reaches_the_caller(started: list[Started], ending: str) -> None:
    # the runner is no init: a signal it sends itself ends it, and the caller, its parent, sees it
    run = Started(lambda: os._exit(7) if ending == "exit" else os.kill(os.getpid(), signal.SIGTERM))
    started.append(run)
    run.kill_child()
    assert run.go_on() == []
    status = os.waitpid(run.runner, 0)[1]
    assert (os.WEXITSTATUS(status) if ending == "exit" else os.WTERMSIG(status)) == (
        7 if ending == "exit" else signal.SIGTERM
    )


def test_a_child_whose_runner_ends_first_does_not_go_on_as_a_runner(started: list[Started]) -> None:
    # the child resumes once its runner has ended, on a stack the runner used: it must end, writing nothing
    run = Started(lambda: None)
    started.append(run)
    os.kill(run.runner, signal.SIGKILL)
    assert os.WTERMSIG(os.waitpid(run.runner, 0)[1]) == signal.SIGKILL
    status = os.waitpid(run.child, 0)[1]
    assert os.WIFSIGNALED(status), status
    assert run.reader.read() == b""


def test_a_runner_that_execs_ends_its_namespace(started: list[Started]) -> None:
    # the init's pipe end the runner holds is closed on exec: the init ends, and Linux kills the namespace's
    # processes, the program the runner became among them (a cell that replaces its process cannot run on unseen)
    sleep = shutil.which("sleep") or "/bin/sleep"

    def become_sleep() -> None:
        os.close(3)  # its answers end here, whatever becomes of the program
        os.execv(sleep, [sleep, "4600.25"])

    run = Started(become_sleep)
    started.append(run)
    run.kill_child()
    assert run.go_on() == []
    deadline = time.monotonic() + 10
    while (ended := os.waitpid(run.runner, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert ended[0] == run.runner, "the program the runner became still runs"
    assert os.WTERMSIG(ended[1]) == signal.SIGKILL
