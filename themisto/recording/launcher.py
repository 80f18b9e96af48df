"""Start a kernel under resource limits: ``python -m themisto.recording.launcher [LIMITS] -- KERNEL_COMMAND...``.

The recorder puts this module in front of the kernel command when a limit is
requested. It sets the limits on its own process and then replaces itself with
the kernel (``exec``), so the limits bind the kernel process (same pid, and
inherited by every process the notebook spawns) and never the recorder.

Limits are POSIX rlimits, enforced by the operating system on Linux:

- memory: ``RLIMIT_DATA``, the process's private writable memory (heap and
  anonymous mappings, which is where Python, NumPy and pandas allocate). An
  allocation past it fails, so the cell raises ``MemoryError`` (or the kernel
  dies if the failure hits it elsewhere). It is the right bound for runaway
  allocations, not a hard cap on hostile code: shared mappings are not counted.
  ``RLIMIT_AS`` would count the address space ipykernel reserves but never
  uses (about 0.8 GB per kernel), so a limit would not mean what it says.
- CPU: ``RLIMIT_CPU``, CPU seconds of the kernel process since it started
  (restarts start afresh). At the limit the kernel gets ``SIGXCPU`` and dies;
  one second later ``SIGKILL`` ends a kernel that ignores it.
"""

from __future__ import annotations

import argparse
import os
import resource
import sys

MODULE = "themisto.recording.launcher"
# Seconds past the CPU limit at which the kernel is killed if it survived SIGXCPU.
CPU_KILL_GRACE = 1


def launcher_command(command: list[str], max_memory: int | None, max_cpu_seconds: int | None) -> list[str]:
    """``command`` prefixed with this launcher so it runs under the limits; unchanged without limits."""
    limits = []
    if max_memory is not None:
        limits += ["--max-memory", str(max_memory)]
    if max_cpu_seconds is not None:
        limits += ["--max-cpu-seconds", str(max_cpu_seconds)]
    if not limits:
        return command
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


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def main(argv: list[str] | None = None) -> None:
    """Parse the limits, set them on this process and become the kernel command."""
    parser = argparse.ArgumentParser(prog=f"python -m {MODULE}", description=__doc__.splitlines()[0])
    parser.add_argument("--max-memory", type=_positive_int, metavar="BYTES", help="RLIMIT_DATA of the kernel")
    parser.add_argument("--max-cpu-seconds", type=_positive_int, metavar="S", help="RLIMIT_CPU of the kernel")
    parser.add_argument("command", nargs=argparse.REMAINDER, help="-- then the kernel command line")
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no kernel command given")
    apply_limits(args.max_memory, args.max_cpu_seconds)
    os.execvp(command[0], command)


if __name__ == "__main__":
    main()
