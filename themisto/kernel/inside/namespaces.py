"""Linux namespaces around a sandboxed kernel: no capability over the host, no network, whatever the caller's uid.

The launcher's child calls :func:`enter` just before it becomes the kernel (single-threaded, as a forked child
is); a prediction's forked child calls it again, never with the network. It moves into a new **user** namespace in which it keeps its own uid and gid (root stays uid 0 there, mapped
to root, so the files it owns stay its own), a new **IPC** namespace (System V IPC of its own) and, unless the
kernel needs the host's network (``--allow-network``, or its ports over the tcp transport), a new **network**
namespace that holds only a loopback interface, down: no UDP, ICMP, packet, netlink or TCP traffic reaches any
other host or process (the kernel's channels are Unix sockets in a folder, which do not depend on it). Then it
drops every capability: from the bounding set (so no ``exec``, of a setuid or root program included, gets one
back), the ambient, inheritable, permitted and effective sets. Capabilities held in a user namespace count only
over what that namespace owns, and the process has none left there either: ``reboot``, ``settimeofday``,
``SO_MARK``, ``mknod`` of a device and raw or packet sockets all get ``EPERM``.
"""

from __future__ import annotations

import ctypes
import errno
import os
import sys
import warnings
from functools import cache

CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWNET = 0x40000000
_PR_CAPBSET_DROP = 24
_PR_CAP_AMBIENT = 47
_PR_CAP_AMBIENT_CLEAR_ALL = 4
_CAPABILITY_VERSION_3 = 0x20080522
_LAST_CAPABILITY = "/proc/sys/kernel/cap_last_cap"


def _libc() -> ctypes.CDLL:
    """The C library with errno kept; OSError where there is none with ``unshare`` (not Linux)."""
    if not sys.platform.startswith("linux"):
        raise OSError(errno.ENOSYS, "namespaces are Linux only")
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    """Raise OSError with the errno of a failed C call."""
    if result != 0:
        code = ctypes.get_errno()
        raise OSError(code, f"{what}: {os.strerror(code)}")


def _write(path: str, text: str) -> None:
    with open(path, "w", encoding="ascii") as handle:
        handle.write(text)


def enter(network: bool, map_ids: bool = True) -> None:
    """Move this single-threaded process into the namespaces of the module and drop every capability.

    Without ``map_ids`` (a process in a Landlock domain, which may not write ``/proc/self/uid_map``) the user
    namespace stays unmapped: its uid and gid read as the overflow ids (65534) inside, while the files it makes
    still belong to its own.
    """
    libc = _libc()
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWUSER | CLONE_NEWIPC | (0 if network else CLONE_NEWNET)
    _check(libc.unshare(flags), "unshare")
    if map_ids:
        _write("/proc/self/setgroups", "deny")  # required before an unprivileged process may map its group
        _write("/proc/self/uid_map", f"{uid} {uid} 1")
        _write("/proc/self/gid_map", f"{gid} {gid} 1")
    drop_capabilities(libc)


class _CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapabilityData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities(libc: ctypes.CDLL) -> None:
    """Empty every capability set of this process, the bounding set first (which needs CAP_SETPCAP)."""
    with open(_LAST_CAPABILITY, encoding="ascii") as handle:
        last = int(handle.read())
    for capability in range(last + 1):
        _check(libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), f"dropping capability {capability}")
    _check(libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing the ambient capabilities")
    data = (_CapabilityData * 2)()  # version 3: two 32-bit halves, all zero
    _check(libc.capset(ctypes.byref(_CapabilityHeader(_CAPABILITY_VERSION_3, 0)), data), "capset")


@cache
def unavailable() -> str | None:
    """Why kernels cannot get these namespaces here (tried in a child process, once), or None when they can."""
    try:
        _libc()
    except OSError as exc:
        return str(exc.strerror)
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, use of fork()": the child runs none
        pid = os.fork()
    if pid == 0:  # the child: try, report, never return
        try:
            os.close(read)
            enter(network=False)
            os.write(write, b"ok")
        except BaseException as exc:
            os.write(write, str(exc).encode("utf-8", "replace")[:500])
        finally:
            os._exit(0)
    os.close(write)
    try:
        answer = b""
        while chunk := os.read(read, 512):
            answer += chunk
    finally:
        os.close(read)
        os.waitpid(pid, 0)
    return None if answer == b"ok" else answer.decode("utf-8", "replace") or "the probe died"
