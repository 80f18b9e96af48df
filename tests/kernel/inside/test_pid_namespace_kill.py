"""A prediction's PID namespace killed from the kernel (``fork.kill_pid_namespace``): in-process, real namespaces."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import sys
import time
import warnings
from collections.abc import Callable, Iterator

import psutil
import pytest
from attacks import processes_named, wait_for

from themisto.kernel.inside import fork, namespaces

pytestmark = [
    pytest.mark.skipif(not sys.platform.startswith("linux"), reason="PID namespaces, /proc"),
    pytest.mark.skipif(
        sys.platform.startswith("linux") and namespaces.unavailable() is not None,
        reason=f"no user and PID namespaces here: {namespaces.unavailable()}",
    ),
]
SLEEP = shutil.which("sleep") or "/bin/sleep"


def _in_a_pid_namespace(then: Callable[[], None], map_ids: bool = True) -> int:
    """Fork a process that enters a user and PID namespace, as a prediction's child does, and runs ``then`` in
    the namespace's process that is not its init, this process's child (``namespaces.contain``); that process's
    pid, once the forked one, which started it, is killed and reaped, as the kernel does. ``map_ids``: as
    ``namespaces.enter`` (a process without capabilities cannot map its ids in a namespace it nests)."""
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        pid = os.fork()
    if pid == 0:
        try:
            os.close(read)
            namespaces.enter(network=True, map_ids=map_ids, pid=True)
            os.write(write, f"{namespaces.contain()}\n".encode())
            then()
        finally:
            os._exit(0)
    os.close(write)
    with os.fdopen(read, "rb") as answer:
        runner = int(answer.readline())  # not to the end: the forked process holds the pipe until it is killed
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return runner


def _sleep_in_a_session_of_its_own(mark: str) -> Callable[[], None]:
    def then() -> None:
        subprocess.Popen([SLEEP, mark], start_new_session=True)
        time.sleep(600)

    return then


def _sleep_in_a_nested_pid_namespace(mark: str) -> Callable[[], None]:
    def then() -> None:
        subprocess.Popen([SLEEP, mark], start_new_session=True)
        _in_a_pid_namespace(_sleep_in_a_session_of_its_own(f"{mark}1"), map_ids=False)
        time.sleep(600)

    return then


def _sleepers(*marks: str) -> dict[str, psutil.Process]:
    """The ``sleep`` process named by each of ``marks``, once each has started."""
    wait_for(lambda: all(processes_named(mark) for mark in marks), what=f"sleep {' and '.join(marks)}")
    return {mark: processes_named(mark)[0] for mark in marks}


@pytest.fixture
def started() -> Iterator[list[int]]:
    """The pids of the processes a test forks, killed and reaped after it."""
    pids: list[int] = []
    yield pids
    for pid in pids:
        with contextlib.suppress(OSError):
            os.kill(pid, 9)
        with contextlib.suppress(OSError):
            os.waitpid(pid, 0)


def test_every_process_of_the_namespace_and_of_those_nested_in_it_is_killed_and_no_other(
    started: list[int],
) -> None:
    # before: a process a prediction left in a session of its own lived until the namespace's init (reniced to
    # the lowest priority with the child's group) ran again: once in six runs it wrote into memory it shared
    # with the replay 4 ms after the replay's check
    marks = [f"{4400 + number}.25" for number in range(2)]
    started.append(_in_a_pid_namespace(_sleep_in_a_session_of_its_own(marks[0])))
    started.append(_in_a_pid_namespace(_sleep_in_a_nested_pid_namespace(marks[1])))
    spared_marks = [f"{4500 + number}.25" for number in range(2)]
    outside = subprocess.Popen([SLEEP, spared_marks[0]])  # the kernel's own namespace: the replay's processes
    # another PID namespace: a later child of the same request
    started.append(_in_a_pid_namespace(_sleep_in_a_session_of_its_own(spared_marks[1])))
    try:
        sleepers = _sleepers(*marks, f"{marks[1]}1", *spared_marks)
        assert len(sleepers) == 5, sleepers
        namespace = os.stat(f"/proc/{started[0]}/ns/pid").st_ino
        other = os.stat(f"/proc/{started[1]}/ns/pid").st_ino
        own = os.stat("/proc/self/ns/pid").st_ino
        assert own not in (namespace, other)
        # the sleeper in the namespace nested in the second is in it too; the others are in theirs alone
        members = {mark: fork._in_pid_namespace(sleepers[mark].pid, other, own) for mark in sleepers}
        assert members == {marks[0]: False, marks[1]: True, f"{marks[1]}1": True, **dict.fromkeys(spared_marks, False)}
        fork.kill_pid_namespace(namespace)
        fork.kill_pid_namespace(other)
        killed = [sleepers[mark] for mark in (*marks, f"{marks[1]}1")]
        assert psutil.wait_procs(killed, timeout=5)[1] == []
        assert [sleepers[mark].status() for mark in spared_marks] == [psutil.STATUS_SLEEPING] * 2
    finally:
        outside.kill()
        outside.wait()
        for process in _sleepers(spared_marks[1]).values():
            process.kill()
