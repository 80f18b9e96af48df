"""Linux Landlock through ``ctypes``: confine the calling process and everything it later starts.

:func:`confine` builds one Landlock domain and enforces it on the calling thread (so: a single-threaded process,
or a child just before ``exec``); every process started from it afterwards inherits it, and it can never be
lifted. Inside the domain:

- files can be written, created, renamed, linked, truncated or removed only beneath the ``writable`` paths
  (reading and executing stay allowed everywhere);
- TCP ``connect`` is refused, and TCP ``bind`` too except on ``bind_ports`` (Landlock ABI >= 4), unless
  ``allow_network``; UDP and other protocols are not covered by Landlock;
- with ``scope``, signals and abstract unix sockets reach only processes of the same domain or one nested in
  it (ABI >= 6); ptrace, and so ``/proc/<pid>/mem`` of any process outside the domain, is refused at every ABI.

A module of :mod:`themisto.kernel.inside`, it imports only the standard library, so a kernel or a forked
prediction can run it as sent.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from collections.abc import Sequence

# The syscall numbers are the same on every architecture (allocated after the tables were unified).
_SYS_CREATE_RULESET = 444
_SYS_ADD_RULE = 445
_SYS_RESTRICT_SELF = 446
_CREATE_RULESET_VERSION = 1
_RULE_PATH_BENEATH = 1
_RULE_NET_PORT = 2
_PR_SET_NO_NEW_PRIVS = 38
_O_PATH = getattr(os, "O_PATH", 0)

# Filesystem rights, each with the first ABI that knows it; all of them are about changing the filesystem.
_WRITE_FILE = 1 << 1
_TRUNCATE = 1 << 14
_IOCTL_DEV = 1 << 15
_FS_WRITE_RIGHTS = {
    _WRITE_FILE: 1,
    1 << 4: 1,  # REMOVE_DIR
    1 << 5: 1,  # REMOVE_FILE
    1 << 6: 1,  # MAKE_CHAR
    1 << 7: 1,  # MAKE_DIR
    1 << 8: 1,  # MAKE_REG
    1 << 9: 1,  # MAKE_SOCK
    1 << 10: 1,  # MAKE_FIFO
    1 << 11: 1,  # MAKE_BLOCK
    1 << 12: 1,  # MAKE_SYM
    1 << 13: 2,  # REFER: rename or link a file between folders
    _TRUNCATE: 3,
    _IOCTL_DEV: 5,  # ioctl on a device opened inside the domain (TIOCSTI on a terminal, for one)
}
# The rights that apply to a file (not a folder) in a rule.
_FILE_RIGHTS = _WRITE_FILE | _TRUNCATE | _IOCTL_DEV
_NET_BIND_TCP = 1 << 0
_NET_CONNECT_TCP = 1 << 1
_NET_ABI = 4
_SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0
_SCOPE_SIGNAL = 1 << 1
_SCOPE_ABI = 6


class _RulesetAttr(ctypes.Structure):
    _fields_ = [
        ("handled_access_fs", ctypes.c_uint64),
        ("handled_access_net", ctypes.c_uint64),
        ("scoped", ctypes.c_uint64),
    ]


class _PathBeneathAttr(ctypes.Structure):
    _pack_ = 1  # the kernel's struct is packed
    _fields_ = [("allowed_access", ctypes.c_uint64), ("parent_fd", ctypes.c_int32)]


class _NetPortAttr(ctypes.Structure):
    _fields_ = [("allowed_access", ctypes.c_uint64), ("port", ctypes.c_uint64)]


def _libc() -> ctypes.CDLL | None:
    """The C library with errno kept, or None where there is no ``syscall`` (not Linux)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syscall.restype = ctypes.c_long
        libc.prctl.restype = ctypes.c_int
    except (OSError, AttributeError):
        return None
    return libc


def _call(libc: ctypes.CDLL, number: int, *args: object) -> int:
    """``syscall(number, *args)``; raises OSError with the call's errno when it fails."""
    result = int(libc.syscall(ctypes.c_long(number), *args))
    if result < 0:
        code = ctypes.get_errno()
        raise OSError(code, f"Landlock syscall {number}: {os.strerror(code)}")
    return result


def abi_version() -> int:
    """The Landlock ABI this kernel offers; 0 where Landlock is missing or disabled."""
    libc = _libc()
    if libc is None:
        return 0
    try:
        return _call(libc, _SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(_CREATE_RULESET_VERSION))
    except OSError:
        return 0


def confine(
    writable: Sequence[str],
    *,
    allow_network: bool = False,
    scope: bool = True,
    bind_ports: Sequence[int] = (),
) -> int:
    """Confine the calling thread from now on (see the module); returns the ABI in force, OSError where it cannot.

    A path of ``writable`` that does not exist is skipped (it grants nothing); a file grants writing to it alone.
    """
    libc = _libc()
    abi = abi_version()
    if libc is None or abi < 1:
        raise OSError(errno.ENOSYS, "Landlock is not available on this system")
    handled_fs = sum(right for right, since in _FS_WRITE_RIGHTS.items() if since <= abi)
    handled_net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= _NET_ABI and not allow_network else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= _SCOPE_ABI and scope else 0
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    ruleset = _call(libc, _SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0)
    try:
        for path in writable:
            _allow_writing(libc, ruleset, path, handled_fs)
        if handled_net:
            for port in bind_ports:
                rule = _NetPortAttr(_NET_BIND_TCP, port)
                _call(libc, _SYS_ADD_RULE, ruleset, _RULE_NET_PORT, ctypes.byref(rule), 0)
        # required of a process without CAP_SYS_ADMIN, and keeps a setuid program from escaping the domain
        if libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            code = ctypes.get_errno()
            raise OSError(code, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(code)}")
        _call(libc, _SYS_RESTRICT_SELF, ruleset, 0)
    finally:
        os.close(ruleset)
    return abi


def _allow_writing(libc: ctypes.CDLL, ruleset: int, path: str, handled: int) -> None:
    """Add the rule that lets the domain change what lies beneath ``path`` (or the file itself)."""
    try:
        descriptor = os.open(path, _O_PATH | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        folder = stat.S_ISDIR(os.fstat(descriptor).st_mode)
        rule = _PathBeneathAttr(handled if folder else handled & _FILE_RIGHTS, descriptor)
        _call(libc, _SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
    finally:
        os.close(descriptor)
