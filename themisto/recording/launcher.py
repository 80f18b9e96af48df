"""Supervise one kernel: ``python -m themisto.recording.launcher --parent PID [LIMITS] -- KERNEL_COMMAND...``.

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
- The kernel is confined (unless ``--no-sandbox``): just before it becomes the kernel command it enters a
  Landlock domain (:mod:`themisto.kernelside.landlock`) in which it may write only beneath the ``--writable``
  paths (its working directory and private folders), connect or bind no TCP socket (unless
  ``--allow-network``; it may bind the ``--bind-port`` ports, its own over the tcp transport), and signal, ptrace or reach by abstract socket no process outside the domain: not
  this launcher (so it cannot stop it and escape the clean-up), not the recorder. Every process it starts
  inherits the domain.
- A confined kernel also runs in namespaces of its own (:mod:`themisto.kernelside.namespaces`: user, IPC and,
  without the network, network) with no capability at all, whatever the caller's uid, and under a seccomp
  filter (:mod:`themisto.kernelside.seccomp`: no foreign-architecture entry, ``ptrace``, ``prlimit`` of another
  process, reboot, clock, module or device-node call).
- An unconfined kernel started by root loses, from its capability bounding set, the
  capabilities that read another process's memory or environment
  (``CAP_SYS_PTRACE``, ``CAP_SYS_ADMIN``, ``CAP_PERFMON``, ``CAP_BPF``,
  ``CAP_SYS_MODULE``, ``CAP_SYS_RAWIO``), so it cannot read the recorder's,
  which is not dumpable while kernels run (see ``environment.undumpable``).
"""

from __future__ import annotations

import argparse
import os
import resource
import signal
import sys
import time
from dataclasses import dataclass
from typing import Any

from themisto.kernelside import landlock, namespaces, seccomp

MODULE = "themisto.recording.launcher"
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


@dataclass(frozen=True)
class Sandbox:
    """The Landlock domain a kernel runs in: where it may write, and whether it may use TCP."""

    writable: tuple[str, ...]
    allow_network: bool = False
    bind_ports: tuple[int, ...] = ()  # TCP ports the kernel may bind without the network (its own, over tcp)

    def arguments(self) -> list[str]:
        """The launcher's options that set up this domain."""
        options = [option for path in self.writable for option in ("--writable", path)]
        options += [option for port in self.bind_ports for option in ("--bind-port", str(port))]
        return options + (["--allow-network"] if self.allow_network else [])


class _Stop(Exception):
    """Raised by the SIGTERM handler: kill the kernel and every descendant, then exit."""


def launcher_command(
    command: list[str], max_memory: int | None, max_cpu_seconds: int | None, sandbox: Sandbox | None
) -> list[str]:
    """``command`` run under this launcher, supervised, under the limits and in ``sandbox`` (None: unconfined).

    This process is its parent.
    """
    limits = ["--parent", str(os.getpid())]
    limits += ["--no-sandbox"] if sandbox is None else sandbox.arguments()
    if max_memory is not None:
        limits += ["--max-memory", str(max_memory)]
    if max_cpu_seconds is not None:
        limits += ["--max-cpu-seconds", str(max_cpu_seconds)]
    return [sys.executable, "-m", MODULE, *limits, "--", *command]


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


def _become_kernel(
    command: list[str], max_memory: int | None, max_cpu_seconds: int | None, sandbox: Sandbox | None, launcher: int
) -> None:
    """In the forked child: die with the launcher, take the limits, shed capabilities, enter the sandbox, exec."""
    try:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
        if os.getppid() != launcher:  # the launcher died before the death signal was armed
            os._exit(1)
        if sandbox is not None:  # namespaces first: a new user namespace needs this single-threaded child
            namespaces.enter(network=sandbox.allow_network or bool(sandbox.bind_ports))
        else:
            for capability in _MEMORY_READING_CAPABILITIES:
                _prctl(_PR_CAPBSET_DROP, capability)  # fails harmlessly for a user who has no capabilities
        apply_limits(max_memory, max_cpu_seconds)
        if sandbox is not None:
            confine(sandbox)
        os.execvp(command[0], command)
    except BaseException as exc:
        print(f"themisto launcher: cannot start the kernel: {exc}", file=sys.stderr)
    os._exit(127)


def confine(sandbox: Sandbox) -> int:
    """Enter the Landlock domain of ``sandbox`` and the seccomp filter (this process, single-threaded, from now
    on); the Landlock ABI in force."""
    abi = landlock.confine(
        sandbox.writable, allow_network=sandbox.allow_network, scope=True, bind_ports=sandbox.bind_ports
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
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a SIGSEGV re-raised here must not write a core file
        if number not in (signal.SIGKILL, signal.SIGSTOP):  # these two cannot be handled anyway
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)  # a signal whose default action is not to terminate
    os._exit(os.waitstatus_to_exitcode(status))


def _raise_stop(signum: int, frame: object) -> None:
    raise _Stop


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv: list[str] | None = None) -> None:
    """Parse the options, start the kernel as a supervised child, and clean up after it."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.splitlines()[0])
    parser.add_argument("--parent", type=int, metavar="PID", help="the recorder: this launcher dies with it")
    parser.add_argument("--max-memory", type=_positive_int, metavar="BYTES", help="RLIMIT_DATA of the kernel")
    parser.add_argument("--max-cpu-seconds", type=_positive_int, metavar="S", help="RLIMIT_CPU of the kernel")
    parser.add_argument(
        "--writable", action="append", default=[], metavar="PATH", help="a path the kernel may write beneath"
    )
    parser.add_argument("--allow-network", action="store_true", help="let the kernel use TCP")
    parser.add_argument(
        "--bind-port", action="append", type=int, default=[], metavar="PORT", help="a TCP port the kernel may bind"
    )
    parser.add_argument("--no-sandbox", action="store_true", help="run the kernel unconfined")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the kernel command line")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no kernel command given")
    if not args.no_sandbox and not args.writable:
        parser.error("give the kernel's --writable paths, or --no-sandbox")
    sandbox = None if args.no_sandbox else Sandbox(tuple(args.writable), args.allow_network, tuple(args.bind_port))
    # interrupts are sent to the whole process group and are meant for the kernel alone
    signal.signal(signal.SIGINT, lambda signum, frame: None)
    status = None
    try:
        signal.signal(signal.SIGTERM, _raise_stop)
        _prctl(_PR_SET_CHILD_SUBREAPER, 1)
        _prctl(_PR_SET_PDEATHSIG, signal.SIGTERM)
        if args.parent is not None and os.getppid() != args.parent:
            raise _Stop  # the recorder died before the death signal was armed
        launcher = os.getpid()
        kernel = os.fork()
        if kernel == 0:
            _become_kernel(command, args.max_memory, args.max_cpu_seconds, sandbox, launcher)
        status = _wait_for(kernel)
    except _Stop:
        pass
    signal.signal(signal.SIGTERM, signal.SIG_IGN)  # cleaning up is not interrupted
    kill_descendants()
    _exit_like(status)


if __name__ == "__main__":
    main()
