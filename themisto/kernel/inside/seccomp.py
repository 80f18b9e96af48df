"""A seccomp filter through ``ctypes``: the system calls no kernel or prediction of Themisto needs, refused.

:func:`confine` installs one filter on the calling thread (so: a single-threaded process, or a child just before
``exec``); every process started from it afterwards inherits it, and it can never be lifted. Each call it
refuses fails with ``EPERM``:

- every entry through another architecture than the native one (on x86_64 the 32-bit ``int 0x80`` entry,
  ``AUDIT_ARCH_I386``, and the x32 numbers, ``nr & 0x40000000``): the rules below name native numbers, and a
  filter that lets a foreign entry through could be side-stepped by it;
- ``ptrace`` and ``process_vm_readv``/``process_vm_writev`` (another process's memory, the same domain's too);
- ``prlimit64`` on any process but the caller (``pid`` 0): the limits of the scorer or the launcher;
- ``kexec_load``, ``kexec_file_load``, ``reboot``, ``settimeofday``, ``clock_settime``, ``clock_adjtime``,
  ``adjtimex``, ``init_module``, ``finit_module``, ``delete_module``: the machine's kernel, power and clocks;
- ``mknod``/``mknodat`` of a block or character device (FIFOs and files stay allowed);
- ``io_uring_setup``/``io_uring_enter``/``io_uring_register``: io_uring runs operations (sockets among
  them) that never pass through this filter;
- with ``unix_sockets=False``, ``socket(AF_UNIX, ...)``: a prediction's way to the replay kernel's channels,
  which are Unix sockets in a folder that Landlock does not guard (``socketpair`` stays allowed);
- with ``network=False``, ``socket`` of every other family (IP of any protocol, raw, packet, netlink): a
  prediction's network, refused here rather than by a network namespace of its own, whose making and teardown
  cost 0.25 to 0.5 ms of the machine's time a prediction (docs/performance.md);
- with ``other_processes=False``, ``setpriority``, ``sched_setparam``, ``sched_setscheduler``,
  ``sched_setaffinity``, ``sched_setattr`` and ``ioprio_set`` on any process but the caller: a prediction's
  way to slow the scorer or its kernel (same-user calls that Landlock does not guard).

A module of :mod:`themisto.kernel.inside`, it imports only the standard library, so a kernel or a forked
prediction can run it as sent. Linux on x86_64 and aarch64 only; elsewhere :func:`confine` raises OSError.
"""

from __future__ import annotations

import ctypes
import errno
import os
import platform
import socket
import stat
from functools import cache

_PR_SET_NO_NEW_PRIVS = 38
_PR_SET_SECCOMP = 22
_SECCOMP_MODE_FILTER = 2
_RET_ALLOW = 0x7FFF0000
_RET_ERRNO = 0x00050000
_X32_BIT = 0x40000000
_FILE_TYPE = 0o170000  # S_IFMT, the file-type bits of a mode
# classic BPF opcodes: load a word of seccomp_data, compare, AND, return
_LOAD, _JEQ, _JGE, _AND, _RET = 0x20, 0x15, 0x35, 0x54, 0x06
# offsets into struct seccomp_data: nr, arch, then args[i] at 16 + 8 i (the low word first: little-endian)
_NR, _ARCH = 0, 4

# Per architecture: its audit number, whether it has the x32 numbers, and the native syscall numbers.
_ARCHITECTURES = {
    "x86_64": (
        0xC000003E,
        True,
        {
            "ptrace": 101,
            "process_vm_readv": 310,
            "process_vm_writev": 311,
            "prlimit64": 302,
            "kexec_load": 246,
            "kexec_file_load": 320,
            "reboot": 169,
            "settimeofday": 164,
            "clock_settime": 227,
            "clock_adjtime": 305,
            "adjtimex": 159,
            "init_module": 175,
            "finit_module": 313,
            "delete_module": 176,
            "mknod": 133,
            "mknodat": 259,
            "socket": 41,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "setpriority": 141,
            "sched_setparam": 142,
            "sched_setscheduler": 144,
            "sched_setaffinity": 203,
            "sched_setattr": 314,
            "ioprio_set": 251,
        },
    ),
    "aarch64": (
        0xC00000B7,
        False,
        {
            "ptrace": 117,
            "process_vm_readv": 270,
            "process_vm_writev": 271,
            "prlimit64": 261,
            "kexec_load": 104,
            "kexec_file_load": 294,
            "reboot": 142,
            "settimeofday": 170,
            "clock_settime": 112,
            "clock_adjtime": 266,
            "adjtimex": 171,
            "init_module": 105,
            "finit_module": 273,
            "delete_module": 106,
            "mknodat": 33,
            "socket": 198,
            "io_uring_setup": 425,
            "io_uring_enter": 426,
            "io_uring_register": 427,
            "setpriority": 140,
            "sched_setparam": 118,
            "sched_setscheduler": 119,
            "sched_setaffinity": 122,
            "sched_setattr": 274,
            "ioprio_set": 30,
        },
    ),
}
# Refused whatever their arguments.
REFUSED = (
    "ptrace",
    "process_vm_readv",
    "process_vm_writev",
    "kexec_load",
    "kexec_file_load",
    "reboot",
    "settimeofday",
    "clock_settime",
    "clock_adjtime",
    "adjtimex",
    "init_module",
    "finit_module",
    "delete_module",
    "io_uring_setup",
    "io_uring_enter",
    "io_uring_register",
)
# Calls allowed only on the caller itself: (argument, value) pairs that must all hold, both words of each
# 64-bit argument. prlimit64 always; the others with other_processes=False (a prediction: the scorer's and
# the kernel's priority, CPUs, scheduling and I/O class are theirs).
_OWN_PROCESS = {"prlimit64": ((0, 0),)}
_OWN_SCHEDULING = {
    "setpriority": ((0, 0), (1, 0)),  # PRIO_PROCESS and who 0 (PRIO_USER 0 would be every process of the user)
    "sched_setparam": ((0, 0),),
    "sched_setscheduler": ((0, 0),),
    "sched_setaffinity": ((0, 0),),
    "sched_setattr": ((0, 0),),
    "ioprio_set": ((0, 1), (1, 0)),  # IOPRIO_WHO_PROCESS and who 0
}
# The argument holding the mode of a mknod call.
_MODE_ARGUMENT = {"mknod": 1, "mknodat": 2}


def _low(argument: int) -> int:
    return 16 + 8 * argument


def program(
    machine: str, *, unix_sockets: bool, network: bool = True, other_processes: bool = True
) -> list[tuple[int, int, int, int]]:
    """The filter for ``machine`` as BPF instructions ``(code, jt, jf, k)``; OSError for an unknown machine."""
    found = _ARCHITECTURES.get(machine)
    if found is None:
        raise OSError(errno.ENOSYS, f"no seccomp filter for {machine}")
    arch, x32, numbers = found
    # Written with labels ("refuse", "allow", "mknod", ...), resolved into relative jumps below.
    lines: list[tuple[int, str | int, str | int, int] | str] = [(_LOAD, 0, 0, _ARCH), (_JEQ, 0, "refuse", arch)]
    lines.append((_LOAD, 0, 0, _NR))
    if x32:
        lines.append((_JGE, "refuse", 0, _X32_BIT))
    lines += [(_JEQ, "refuse", 0, numbers[name]) for name in REFUSED]
    own = _OWN_PROCESS if other_processes else {**_OWN_PROCESS, **_OWN_SCHEDULING}
    lines += [(_JEQ, name, 0, numbers[name]) for name in own]
    for name in _MODE_ARGUMENT:
        if name in numbers:
            lines.append((_JEQ, name, 0, numbers[name]))
    if not (unix_sockets and network):
        lines.append((_JEQ, "socket", 0, numbers["socket"]))
    lines.append((_RET, 0, 0, _RET_ALLOW))  # any other call
    for name, required in own.items():  # e.g. prlimit64(pid, ...): only pid 0, the caller itself
        lines.append(name)
        for argument, value in required:
            lines += [(_LOAD, 0, 0, _low(argument)), (_JEQ, 0, "refuse", value)]
            lines += [(_LOAD, 0, 0, _low(argument) + 4), (_JEQ, 0, "refuse", 0)]
        lines.append((_RET, 0, 0, _RET_ALLOW))
    for name, argument in _MODE_ARGUMENT.items():
        if name in numbers:
            lines += [name, (_LOAD, 0, 0, _low(argument)), (_AND, 0, 0, _FILE_TYPE)]
            lines += [(_JEQ, "refuse", 0, stat.S_IFBLK), (_JEQ, "refuse", "allow", stat.S_IFCHR)]
    if not (unix_sockets or network):
        lines += ["socket", (_RET, 0, 0, _RET_ERRNO | errno.EPERM)]
    elif not (unix_sockets and network):  # one of the two: AF_UNIX is refused, or it is the one allowed
        verdicts = ("refuse", "allow") if network else ("allow", "refuse")
        lines += ["socket", (_LOAD, 0, 0, _low(0)), (_JEQ, *verdicts, socket.AF_UNIX)]
    lines += ["allow", (_RET, 0, 0, _RET_ALLOW), "refuse", (_RET, 0, 0, _RET_ERRNO | errno.EPERM)]
    return _assemble(lines)


def _assemble(lines: list[tuple[int, str | int, str | int, int] | str]) -> list[tuple[int, int, int, int]]:
    """Instructions with their label jumps made relative (BPF jumps only forward, by at most 255)."""
    labels: dict[str, int] = {}
    instructions: list[tuple[int, str | int, str | int, int]] = []
    for line in lines:
        if isinstance(line, str):
            labels[line] = len(instructions)
        else:
            instructions.append(line)

    def offset(target: str | int, position: int) -> int:
        if isinstance(target, int):
            return target
        distance = labels[target] - position - 1
        if not 0 <= distance <= 255:
            raise ValueError(f"a BPF jump to {target} of {distance} instructions")
        return distance

    return [(code, offset(jt, i), offset(jf, i), k) for i, (code, jt, jf, k) in enumerate(instructions)]


class _Instruction(ctypes.Structure):
    _fields_ = [("code", ctypes.c_ushort), ("jt", ctypes.c_ubyte), ("jf", ctypes.c_ubyte), ("k", ctypes.c_uint)]


class _Program(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.POINTER(_Instruction))]


@cache
def compiled(*, unix_sockets: bool = True, network: bool = True, other_processes: bool = True) -> _Program:
    """The filter of :func:`confine`, built once per process: a kernel builds it before it forks its children,
    which then only install it."""
    lines = program(platform.machine(), unix_sockets=unix_sockets, network=network, other_processes=other_processes)
    instructions = (_Instruction * len(lines))(*[_Instruction(*line) for line in lines])
    return _Program(len(lines), instructions)  # which keeps ``instructions`` alive


def confine(*, unix_sockets: bool = True, network: bool = True, other_processes: bool = True) -> None:
    """Install the filter (see the module) on this thread, with ``no_new_privs``; OSError where it cannot."""
    filter_program = compiled(unix_sockets=unix_sockets, network=network, other_processes=other_processes)
    libc = ctypes.CDLL(None, use_errno=True)
    # no_new_privs: required of a process without CAP_SYS_ADMIN, and no setuid program sheds the filter
    if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 or (
        libc.prctl(_PR_SET_SECCOMP, _SECCOMP_MODE_FILTER, ctypes.byref(filter_program), 0, 0) != 0
    ):
        code = ctypes.get_errno()
        raise OSError(code, f"seccomp: {os.strerror(code)}")
