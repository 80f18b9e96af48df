"""Linux Landlock through ``ctypes``: confine the calling process and everything it later starts.

:func:`confine` builds one Landlock domain and enforces it on the calling thread (so: a single-threaded process,
or a child just before ``exec``); every process started from it afterwards inherits it, and it can never be
lifted. Inside the domain:

- files can be written, created, renamed, linked, truncated or removed only beneath the ``writable`` paths;
- with ``readable``, files can be read or executed and folders listed only beneath the ``readable`` and
  ``writable`` paths (without it, everywhere); :func:`runtime_readable` names what a Python process needs;
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

# Filesystem rights, each with the first ABI that knows it: those that read, and those that change the filesystem.
_EXECUTE = 1 << 0
_READ_FILE = 1 << 2
_READ_DIR = 1 << 3
_FS_READ_RIGHTS = _EXECUTE | _READ_FILE | _READ_DIR
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
_FILE_RIGHTS = _EXECUTE | _READ_FILE | _WRITE_FILE | _TRUNCATE | _IOCTL_DEV
# The system's shared files every process may read: programs, libraries, configuration, the locale and time
# zones, devices' and processes' information (a box's /proc shows its own processes only).
SYSTEM_READABLE = ("/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/proc", "/sys")
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


def runtime_readable() -> list[str]:
    """What this interpreter reads to run: :data:`SYSTEM_READABLE`, its prefixes (the virtual environment and
    the installation it is made from), its site and user site folders, and the folders of ``PYTHONPATH``."""
    import site

    paths = [*SYSTEM_READABLE, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix]
    paths += site.getsitepackages() + ([site.getusersitepackages()] if site.ENABLE_USER_SITE else [])
    paths += [path for path in os.environ.get("PYTHONPATH", "").split(os.pathsep) if os.path.isabs(path)]
    return list(dict.fromkeys(paths))


def confine(
    writable: Sequence[str],
    *,
    readable: Sequence[str] | None = None,
    allow_network: bool = False,
    scope: bool = True,
    bind_ports: Sequence[int] = (),
) -> int:
    """Confine the calling thread from now on (see the module); returns the ABI in force, OSError where it cannot.

    A path of ``writable`` or ``readable`` that does not exist, or that this user cannot reach, is skipped (it
    grants nothing); a file grants the rights on itself alone.
    """
    libc = _libc()
    abi = abi_version()
    if libc is None or abi < 1:
        raise OSError(errno.ENOSYS, "Landlock is not available on this system")
    handled_fs = sum(right for right, since in _FS_WRITE_RIGHTS.items() if since <= abi)
    handled_fs |= _FS_READ_RIGHTS if readable is not None else 0
    handled_net = _NET_BIND_TCP | _NET_CONNECT_TCP if abi >= _NET_ABI and not allow_network else 0
    scoped = _SCOPE_ABSTRACT_UNIX_SOCKET | _SCOPE_SIGNAL if abi >= _SCOPE_ABI and scope else 0
    attr = _RulesetAttr(handled_fs, handled_net, scoped)
    ruleset = _call(libc, _SYS_CREATE_RULESET, ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)), 0)
    try:
        for path in writable:
            _allow(libc, ruleset, path, handled_fs)
        for path in readable or ():
            _allow(libc, ruleset, path, _FS_READ_RIGHTS)
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


def _allow(libc: ctypes.CDLL, ruleset: int, path: str, rights: int) -> None:
    """Add the rule that grants the domain ``rights`` beneath ``path`` (or on the file itself)."""
    try:
        descriptor = os.open(path, _O_PATH | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError, PermissionError):  # no such path, or none this user reaches
        return
    try:
        folder = stat.S_ISDIR(os.fstat(descriptor).st_mode)
        rule = _PathBeneathAttr(rights if folder else rights & _FILE_RIGHTS, descriptor)
        _call(libc, _SYS_ADD_RULE, ruleset, _RULE_PATH_BENEATH, ctypes.byref(rule), 0)
    finally:
        os.close(descriptor)
