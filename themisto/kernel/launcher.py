"""Supervise one kernel: ``python -m themisto.kernel.launcher REQUEST -- KERNEL_COMMAND...``.

``REQUEST`` is a :class:`~themisto.kernel.inside.wire.LaunchRequest` as JSON (the recorder's process, the
limits, the sandbox), decoded with the wire's checks, so the host and the launcher share one typed record
instead of flags written on one side and parsed back on the other.

Every kernel the recorder starts runs under this launcher, which stays its
parent for the kernel's whole life (Linux; elsewhere it only sets the limits
and waits):

- Nothing outlives the kernel. The launcher is a *child subreaper*
  (``PR_SET_CHILD_SUBREAPER``): a process the notebook starts in a new session
  or double-forks to detach is re-parented to the launcher instead of init, so
  every process the kernel ever started stays its descendant. When the kernel
  exits, or the launcher gets ``SIGTERM`` (how the recorder shuts a kernel
  down), it kills every descendant with ``SIGKILL``, round after round until
  none is left, and then exits as the kernel did (the same exit code, or the
  same signal re-raised, so the recorder reports ``killed by SIGSEGV`` as
  before).
- The kernel dies with the recorder. The launcher asks for ``SIGTERM`` when
  the recorder's thread that started it ends (``PR_SET_PDEATHSIG``), however
  it ends (``SIGKILL`` included), and then cleans up as above; the kernel asks
  for ``SIGKILL`` when the launcher ends.
- Limits bind the kernel only. POSIX rlimits are set in the kernel's process
  just before it becomes the kernel command, and every process the notebook
  spawns inherits them:

  - memory: ``RLIMIT_DATA``, the process's private writable memory (heap and
    anonymous mappings, which is where Python, NumPy and pandas allocate). An
    allocation past it fails, so the cell raises ``MemoryError`` (or the kernel
    dies if the failure hits it elsewhere). It is the right bound for runaway
    allocations, not a hard cap on hostile code: shared mappings are not
    counted. ``RLIMIT_AS`` would count the address space ipykernel reserves but
    never uses (about 0.8 GB per kernel), so a limit would not mean what it says.
  - CPU: ``RLIMIT_CPU``, CPU seconds of the kernel process since it started
    (restarts start afresh). At the limit the kernel gets ``SIGXCPU`` and dies;
    one second later ``SIGKILL`` ends a kernel that ignores it.
- The kernel is confined (unless the request's ``sandbox`` is null): just before it becomes the kernel command
  it enters a Landlock domain (:mod:`themisto.kernel.inside.landlock`) in which it may write only beneath the
  sandbox's ``writable`` paths (its working directory and private folders), connect or bind no TCP socket (unless
  ``allow_network``; it may bind the ``bind_ports``, its own over the tcp transport), and signal, ptrace or reach by abstract socket no process outside the domain: not
  this launcher (so it cannot stop it and escape the clean-up), not the recorder. Every process it starts
  inherits the domain.
- A confined kernel reads only beneath its writable paths, the files its command names (its interpreter, its
  connection file) and what the interpreter needs (``landlock.runtime_readable``: its prefixes and site folders,
  ``PYTHONPATH``, the system's shared folders).
- A confined kernel also runs in a box of namespaces (:mod:`themisto.kernel.inside.namespaces`): the launcher
  enters a user namespace and unshares a PID namespace, whose first process, its child, is the box's init: it
  takes mount, IPC and, without the network, network namespaces, mounts a ``/proc`` of the box's own (which
  shows the box's processes only), forks the kernel, reaps the box's orphans and, when the kernel exits, sends
  the launcher the kernel's wait status and ends, and Linux kills every process left in the box. The kernel has
  no capability at all, whatever the caller's uid, and runs under a seccomp filter
  (:mod:`themisto.kernel.inside.seccomp`: no foreign-architecture entry, ``ptrace``, ``prlimit`` of another
  process, reboot, clock, module or device-node call).
- An unconfined kernel started by root loses, from its capability bounding set, the
  capabilities that read another process's memory or environment
  (``CAP_SYS_PTRACE``, ``CAP_SYS_ADMIN``, ``CAP_PERFMON``, ``CAP_BPF``,
  ``CAP_SYS_MODULE``, ``CAP_SYS_RAWIO``), so it cannot read the recorder's,
  which is not dumpable while kernels run (see ``environment.undumpable``).
"""

from __future__ import annotations

import contextlib
import os
import resource
import select
import shutil
import signal
import socket
import sys
import time
from typing import Any, NoReturn

from themisto.kernel.inside import landlock, namespaces, seccomp
from themisto.kernel.inside.wire import LaunchRequest, Sandbox, WireError

MODULE = "themisto.kernel.launcher"
# Seconds past the CPU limit at which the kernel is killed if it survived SIGXCPU.
CPU_KILL_GRACE = 1
# Rounds of "kill every descendant" before giving up on a process that forks faster than it is killed.
KILL_ROUNDS = 100

_PR_SET_PDEATHSIG = 1
_PR_CAPBSET_DROP = 24
_PR_SET_CHILD_SUBREAPER = 36
# CAP_SYS_MODULE, CAP_SYS_RAWIO, CAP_SYS_PTRACE, CAP_SYS_ADMIN, CAP_PERFMON, CAP_BPF: each is enough
# for root to read a non-dumpable process's /proc/<pid>/environ or memory.
_MEMORY_READING_CAPABILITIES = (16, 17, 19, 21, 38, 39)


class _Stop(Exception):
    """Raised by the SIGTERM handler: kill the kernel and every descendant, then exit."""


def launcher_command(
    command: list[str], max_memory: int | None, max_cpu_seconds: int | None, sandbox: Sandbox | None
) -> list[str]:
    """``command`` run under this launcher, supervised, under the limits and in ``sandbox`` (None: unconfined).

    This process is its parent.
    """
    request = LaunchRequest(os.getpid(), max_memory, max_cpu_seconds, sandbox)
    return [sys.executable, "-m", MODULE, request.to_json(), "--", *command]


def apply_limits(max_memory: int | None, max_cpu_seconds: int | None) -> None:
    """Set the limits on this process; a limit above an existing hard limit is lowered to it."""
    if max_memory is not None:
        _set_limit(resource.RLIMIT_DATA, max_memory, max_memory)
    if max_cpu_seconds is not None:
        _set_limit(resource.RLIMIT_CPU, max_cpu_seconds, max_cpu_seconds + CPU_KILL_GRACE)


def _set_limit(which: int, soft: int, hard: int) -> None:
    # an unprivileged process cannot raise a hard limit, so an inherited lower one wins
    _, current_hard = resource.getrlimit(which)
    if current_hard != resource.RLIM_INFINITY:
        soft, hard = min(soft, current_hard), min(hard, current_hard)
    resource.setrlimit(which, (soft, hard))


def _prctl(option: int, value: int) -> int:
    """``prctl(option, value)``; -1 where there is none (not Linux)."""
    import ctypes

    try:
        return int(ctypes.CDLL(None, use_errno=True).prctl(option, value, 0, 0, 0))
    except (OSError, AttributeError):
        return -1


def _become_kernel(command: list[str], request: LaunchRequest, parent: int) -> None:
    """In the forked child: die with its parent, take the limits, shed capabilities, enter the sandbox, exec."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != parent:  # the parent died before the death signal was armed
            os._exit(1)
        if request.sandbox is not None:  # in the box's namespaces already (_become_box): only the capabilities
            namespaces.drop_capabilities()
            # ipykernel takes a parent of pid 1 for init, so an orphan's: it dies with the box's init instead
            os.environ["JPY_PARENT_PID"] = "1"
        else:
            for capability in _MEMORY_READING_CAPABILITIES:
                _prctl(_PR_CAPBSET_DROP, capability)  # fails harmlessly for a user who has no capabilities
        apply_limits(request.max_memory, request.max_cpu_seconds)
        if request.sandbox is not None:
            confine(request.sandbox, _named_files(command))
        os.execvp(command[0], command)
    except BaseException as exc:
        print(f"themisto launcher: cannot start the kernel: {exc}", file=sys.stderr)
    os._exit(127)


def _become_box(command: list[str], request: LaunchRequest, network: bool, report: socket.socket) -> NoReturn:
    """In the box's init, the first process (pid 1) of the launcher's PID namespace: the box's other namespaces
    and its ``/proc``, then the kernel as its child; it reaps the box's orphans, sends the kernel's wait status
    through ``report`` and ends, and every process left in the box with it."""
    status = 127 << 8  # the wait status of an exit with code 127
    try:
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if select.select([report], [], [], 0)[0]:  # the launcher died before the death signal was armed
            os._exit(1)
        # an init ignores the signals it has no handler for, even from inside its box: none is kept
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        namespaces.become_init(network)
        kernel = os.fork()
        if kernel == 0:
            report.close()
            _become_kernel(command, request, 1)  # its parent is the init, pid 1 in the box
        status = namespaces.reap_until(kernel)
    except BaseException as exc:
        print(f"themisto launcher: cannot start the kernel's box: {exc}", file=sys.stderr)
    with contextlib.suppress(OSError):
        report.sendall(status.to_bytes(4, "little"))
    os._exit(0)


def _named_files(command: list[str]) -> list[str]:
    """The files the kernel's command names (its interpreter, its connection file) and the installation its
    interpreter belongs to, which the kernel reads besides this interpreter's."""
    executable = shutil.which(command[0]) or command[0]
    files = [argument for argument in command if os.path.isabs(argument) and os.path.isfile(argument)]
    prefixes = {os.path.dirname(os.path.dirname(path)) for path in (executable, os.path.realpath(executable))}
    return [*files, *sorted(prefixes)]


def confine(sandbox: Sandbox, readable: list[str]) -> int:
    """Enter the Landlock domain of ``sandbox``, reading only :func:`landlock.runtime_readable` and ``readable``
    besides its writable paths, and the seccomp filter (this process, single-threaded, from now on); the Landlock
    ABI in force."""
    abi = landlock.confine(
        sandbox.writable,
        readable=[*landlock.runtime_readable(), *readable],
        allow_network=sandbox.allow_network,
        scope=True,
        bind_ports=sandbox.bind_ports,
    )
    seccomp.confine(unix_sockets=True)  # the kernel's own channels are Unix sockets
    return abi


def kill_descendants() -> None:
    """SIGKILL every descendant of this process, reaping them, until none is left (or KILL_ROUNDS pass).

    Done means this process has no child at all: as a subreaper it inherits every orphan of its subtree, so a
    process whose parent died between two listings (reparented to it only then) is still seen and killed.
    """
    import psutil

    me = psutil.Process()
    for _ in range(KILL_ROUNDS):
        alive = [process for process in _descendants(me) if _running(process)]
        if not alive and _reap():
            return
        for process in alive:
            try:
                process.kill()
            except psutil.Error:
                pass
        _reap()
        time.sleep(0.005)


def _descendants(process: Any) -> list[Any]:
    """Every descendant of a psutil process (empty if it is gone)."""
    import psutil

    try:
        return list(process.children(recursive=True))
    except psutil.Error:
        return []


def _running(process: Any) -> bool:
    """Whether a psutil process still runs (a zombie has already ended)."""
    import psutil

    try:
        return bool(process.status() != psutil.STATUS_ZOMBIE)
    except psutil.Error:
        return False


def _reap() -> bool:
    """Collect every child that has exited (orphans re-parented to this subreaper included); True when no
    child is left at all."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return True
        if pid == 0:
            return False


def _wait_for(kernel: int) -> int:
    """Reap children (the kernel's orphans come here) until the kernel exits; its wait status."""
    while True:
        pid, status = os.waitpid(-1, 0)
        if pid == kernel:
            return status


def _exit_like(status: int | None) -> None:
    """Exit as the kernel did: its exit code, or the signal that killed it raised on this process."""
    if status is None:  # told to stop
        os._exit(128 + signal.SIGTERM)
    namespaces.exit_like(status)


def _run_box(command: list[str], request: LaunchRequest, sandbox: Sandbox) -> int:
    """Start the kernel in its box (a PID namespace whose init is this process's child); its wait status."""
    namespaces.enter_user_and_pid()
    ours, theirs = socket.socketpair()
    init = os.fork()
    if init == 0:
        ours.close()
        _become_box(command, request, sandbox.allow_network or bool(sandbox.bind_ports), theirs)
    theirs.close()
    status = _wait_for(init)
    reported = ours.recv(4)
    ours.close()
    return int.from_bytes(reported, "little") if len(reported) == 4 else status


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop


def _request(argv: list[str]) -> tuple[LaunchRequest, list[str]]:
    """The request and the kernel command in ``argv`` (``REQUEST -- COMMAND...``); exits 2 on anything else."""
    if len(argv) < 3 or argv[1] != "--":
        _usage("expected REQUEST -- KERNEL_COMMAND...")
    try:
        request = LaunchRequest.from_json(argv[0])
    except WireError as exc:
        _usage(str(exc))
    if request.sandbox is not None and not request.sandbox.writable:
        _usage("a sandbox needs the paths the kernel may write")
    return request, argv[2:]


def _usage(problem: str) -> NoReturn:
    print(f"python -m {MODULE}: {problem}", file=sys.stderr)
    sys.exit(2)


def main(argv: list[str] | None = None) -> None:
    """Read the request, start the kernel as a supervised child, and clean up after it."""
    request, command = _request(sys.argv[1:] if argv is None else argv)
    # interrupts are sent to the whole process group and are meant for the kernel alone
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    status = None
    try:
        signal.signal(signal.SIGTERM, _raise_stop)
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if os.getppid() != request.parent:
            raise _Stop  # the recorder died before the death signal was armed
        if request.sandbox is None:
            launcher = os.getpid()
            kernel = os.fork()
            if kernel == 0:
                _become_kernel(command, request, launcher)
            status = _wait_for(kernel)
        else:
            status = _run_box(command, request, request.sandbox)
    except _Stop:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # cleaning up is not interrupted
    kill_descendants()
    _exit_like(status)


if __name__ == "__main__":
    main()
