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

Every process of a box lives in a **PID** namespace of the box's own, so that every descendant dies with it (the
kernel of Linux kills a namespace's processes when its first one, its init, ends) and a fresh ``/proc`` shows
the box's processes only. ``unshare(CLONE_NEWPID)`` moves only the caller's later children, and a process whose
children go to another namespace than its own can start no thread, so a box takes two forks: the launcher
unshares (:func:`enter_user_and_pid`) and forks the box's init (:func:`become_init`: a mount namespace with a
``/proc`` of the box, then it forks the kernel, reaps, and ends with it); a prediction's child unshares
(``enter(..., pid=True)``) and :func:`contain` starts an init and the process that runs the cell. That init
is no copy of the kernel but :data:`INIT_PROGRAM` (``cat``), started with ``posix_spawn`` (a ``vfork`` and an
``exec``, which copies none of the kernel's memory). The process that runs the cell is no copy either: the child
clones it sharing its memory (``CLONE_VM``), as ``vfork`` does, and stays suspended until the kernel, whose
child the runner is (``CLONE_PARENT``), kills it; so a confined prediction is one fork of the kernel's size, not
two. The process that runs code is never the init: an init ignores the signals it sends itself
(``os.kill(os.getpid(), SIGKILL)``) and ``SIGXCPU``.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import resource
import signal
import sys
import warnings
from functools import cache
from typing import Any, NoReturn

CLONE_NEWNS = 0x00020000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
_MS_NOSUID, _MS_NODEV, _MS_NOEXEC, _MS_REC, _MS_PRIVATE = 2, 4, 8, 0x4000, 1 << 18
_PR_SET_NAME = 15
# The name (``comm``) of a box's init, by which the host tells it from the kernel it started.
INIT_NAME = "themisto-box"
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


def enter(network: bool, map_ids: bool = True, pid: bool = False) -> None:
    """Move this single-threaded process into the namespaces of the module and drop every capability.

    Without ``map_ids`` (a process in a Landlock domain, which may not write ``/proc/self/uid_map``) the user
    namespace stays unmapped: its uid and gid read as the overflow ids (65534) inside, while the files it makes
    still belong to its own. With ``pid``, its later children go to a new PID namespace (see :func:`contain`).
    """
    libc = _libc()
    uid, gid = os.geteuid(), os.getegid()
    flags = CLONE_NEWUSER | CLONE_NEWIPC | (0 if network else CLONE_NEWNET) | (CLONE_NEWPID if pid else 0)
    _check(libc.unshare(flags), "unshare")
    if map_ids:
        _map_ids(uid, gid)
    drop_capabilities(libc)


def _map_ids(uid: int, gid: int) -> None:
    """Map this process's uid and gid to themselves in the user namespace it has just entered."""
    _write("/proc/self/setgroups", "deny")  # required before an unprivileged process may map its group
    _write("/proc/self/uid_map", f"{uid} {uid} 1")
    _write("/proc/self/gid_map", f"{gid} {gid} 1")


def enter_user_and_pid() -> None:
    """The launcher's part (single-threaded): a user namespace (its ids mapped to themselves) whose capabilities
    its next child uses, and a PID namespace whose init that child becomes. The launcher itself stays in the
    host's PID namespace, where the recorder sees it and it sees the box's processes by their host pids."""
    uid, gid = os.geteuid(), os.getegid()
    _check(_libc().unshare(CLONE_NEWUSER | CLONE_NEWPID), "unshare")
    _map_ids(uid, gid)


def become_init(network: bool) -> None:
    """In the first process of the PID namespace (pid 1): namespaces for the box, a ``/proc`` of its own.

    Mount, IPC and (without ``network``) network namespaces of its own; ``/proc`` mounted afresh for the box's
    PID namespace, so it lists the box's processes only, seen by their pids in the box. The mounts stay private
    to the box. Named :data:`INIT_NAME`.
    """
    libc = _libc()
    _check(libc.unshare(CLONE_NEWNS | CLONE_NEWIPC | (0 if network else CLONE_NEWNET)), "unshare")
    _check(libc.mount(b"none", b"/", None, _MS_REC | _MS_PRIVATE, None), "making the mounts private")
    proc = _MS_NOSUID | _MS_NODEV | _MS_NOEXEC
    _check(libc.mount(b"proc", b"/proc", b"proc", proc, None), "mounting /proc for the PID namespace")
    libc.prctl(_PR_SET_NAME, INIT_NAME.encode(), 0, 0, 0)


def reap_until(pid: int) -> int:
    """As an init: reap every child (orphans of the namespace come here) until ``pid`` exits; its wait status."""
    while True:
        try:
            ended, status = os.waitpid(-1, 0)
        except InterruptedError:
            continue
        except ChildProcessError:
            return 0
        if ended == pid:
            return status


def contain() -> int:
    """In a process that has just entered a PID namespace (``enter(pid=True)``): returns in a new process of that
    namespace, not its init, which runs the code: that process's pid in this one's namespace.

    The init (pid 1) is :data:`INIT_PROGRAM`, whose standard input is the reading end of a pipe that only the
    runner keeps (this process too, until it ends) and which ends at the pipe's end: when the runner ends, however
    it ends, or ``exec``s (its end is closed on ``exec``), the init ends, and with it every process left in the
    namespace, those in sessions of their own included (processes the runner forked keep the end open, and die
    with their process group or the kernel's kill of the namespace). The runner is a clone that shares this
    process's memory and is this process's parent's child (:func:`_start_runner`); it dies with that parent. This
    process never returns: its parent must kill it once the runner says it runs, before the runner can end (see
    :func:`_start_runner`). OSError (one line) where the init or the runner cannot be started.
    """
    read, write = os.pipe()
    try:
        _spawn_init(read)
    finally:
        os.close(read)
    try:
        return _start_runner()
    except OSError:
        os.close(write)
        raise


_CLONE_VM, _CLONE_VFORK, _CLONE_PARENT, _CLONE_PARENT_SETTID = 0x100, 0x4000, 0x8000, 0x100000
# The system calls the runner's start makes, by number per machine. ``clone`` takes its flags, its stack and where to
# write the new pid first on both.
_CALLS = {
    "x86_64": {"clone": 56, "set_tid_address": 218, "set_robust_list": 273, "get_robust_list": 274},
    "aarch64": {"clone": 220, "set_tid_address": 96, "set_robust_list": 99, "get_robust_list": 100},
}
_PR_SET_PDEATHSIG = 1
_PR_GET_TID_ADDRESS = 40


def _start_runner() -> int:
    """Clone this single-threaded process as ``vfork`` does and return in the clone alone: its pid as this process
    sees it.

    The clone shares this process's memory (``CLONE_VM``), so it costs no copy of the kernel's, and this process
    stays suspended until the clone ends or ``exec``s (``CLONE_VFORK``): the clone runs on with the same stack and
    the same interpreter, which it owns alone while this process is suspended. Its parent is this process's parent
    (``CLONE_PARENT``), which waits for it and sees how it ends, and it dies with that parent. This process must
    never run again, since the clone reuses its stack: its parent kills it once the clone says it runs. Where the
    clone ends before that (a signal during its setup), this process kills itself as it resumes, if it gets that far
    at all on the reused stack; it runs confined as the clone does, and holds the clone's pipes until it is gone.

    What the C library's ``fork`` does for a child, the clone does for itself: the thread id the C library keeps
    (in memory this process's death would otherwise clear, leaving 0, which its locks take for "no owner") becomes
    the clone's own, cleared at the clone's death instead; this process's list of robust locks becomes the clone's.
    """
    import platform

    calls = _CALLS.get(platform.machine())
    if calls is None:
        raise OSError(errno.ENOSYS, f"no clone call known for {platform.machine()}")
    libc = _libc()
    libc.syscall.restype = ctypes.c_long

    def call(name: str, *arguments: int) -> int:
        result: int = libc.syscall(ctypes.c_long(calls[name]), *map(ctypes.c_long, arguments))
        if result < 0:
            code = ctypes.get_errno()
            raise OSError(code, f"cannot start the process that runs the cell: {name}: {os.strerror(code)}")
        return result

    tid_address, robust, robust_length = ctypes.c_void_p(), ctypes.c_void_p(), ctypes.c_size_t()
    _check(libc.prctl(_PR_GET_TID_ADDRESS, ctypes.byref(tid_address), 0, 0, 0), "prctl")
    call("get_robust_list", 0, ctypes.addressof(robust), ctypes.addressof(robust_length))
    # this process's death writes nothing into the memory the clone goes on with
    call("set_tid_address", 0)
    call("set_robust_list", 0, robust_length.value)
    runner = ctypes.c_int(0)  # written by the system before the clone runs: both see it, sharing the memory
    flags = _CLONE_VM | _CLONE_VFORK | _CLONE_PARENT | _CLONE_PARENT_SETTID
    if call("clone", flags, 0, ctypes.addressof(runner), 0, 0) > 0:
        # this process, resumed because the clone ended first: it must not go on as a second runner
        os.kill(os.getpid(), signal.SIGKILL)
    if tid_address.value:
        ctypes.c_int.from_address(tid_address.value).value = call("set_tid_address", tid_address.value)
    call("set_robust_list", robust.value or 0, robust_length.value)
    _check(libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0), "prctl")
    return runner.value


# The PID namespace's init of a prediction: a program that reads its standard input to the end, found in the
# system's folders (which a prediction's Landlock domain may execute).
INIT_PROGRAM = "cat"
_INIT_FOLDERS = ("/usr/bin", "/bin")


def _spawn_init(read: int) -> int:
    """Start :data:`INIT_PROGRAM` with ``read`` as its standard input, its output to ``/dev/null`` and no other
    descriptor of this process's; its pid. ``posix_spawn`` copies no memory, so a large kernel costs nothing."""
    program = next(
        (path for folder in _INIT_FOLDERS if os.access(path := os.path.join(folder, INIT_PROGRAM), os.X_OK)), None
    )
    if program is None:
        raise OSError(errno.ENOENT, f"no {INIT_PROGRAM} in {' or '.join(_INIT_FOLDERS)} to be the init")
    # the descriptors an exec would keep (Python makes its own non-inheritable): the kernel's 0 to 2 and any a
    # notebook made inheritable
    actions: list[tuple[Any, ...]] = [(os.POSIX_SPAWN_DUP2, read, 0)]
    actions += [(os.POSIX_SPAWN_OPEN, number, os.devnull, os.O_WRONLY, 0) for number in (1, 2)]
    actions += [(os.POSIX_SPAWN_CLOSE, number) for number in _inheritable() if number > 2]
    try:
        return os.posix_spawn(program, [INIT_PROGRAM], {}, file_actions=actions)
    except OSError as exc:
        raise OSError(exc.errno, f"cannot start the PID namespace's init {program}: {exc.strerror}") from None


def _inheritable() -> list[int]:
    """The descriptors of this process that an exec keeps."""
    found = []
    for name in os.listdir("/proc/self/fd"):
        with contextlib.suppress(OSError):  # the listing's own descriptor, closed by now
            if os.get_inheritable(int(name)):
                found.append(int(name))
    return found


def _fork() -> int:
    """``os.fork`` without Python's warning about threads: a forked child runs only the forking thread."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        return os.fork()


def exit_like(status: int) -> NoReturn:
    """Exit as the process of wait status ``status`` did: its exit code, or its signal raised on this process."""
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))  # a SIGSEGV re-raised here must not write a core file
        if number not in (signal.SIGKILL, signal.SIGSTOP):  # these two cannot be handled anyway
            signal.signal(number, signal.SIG_DFL)
        os.kill(os.getpid(), number)
        os._exit(128 + number)  # a signal whose default action is not to terminate
    os._exit(os.waitstatus_to_exitcode(status))


class _CapabilityHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapabilityData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32), ("inheritable", ctypes.c_uint32)]


def drop_capabilities(libc: ctypes.CDLL | None = None) -> None:
    """Empty every capability set of this process, the bounding set first (which needs CAP_SETPCAP)."""
    libc = libc or _libc()
    for capability in range(last_capability() + 1):
        _check(libc.prctl(_PR_CAPBSET_DROP, capability, 0, 0, 0), f"dropping capability {capability}")
    _check(libc.prctl(_PR_CAP_AMBIENT, _PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0), "clearing the ambient capabilities")
    data = (_CapabilityData * 2)()  # version 3: two 32-bit halves, all zero
    _check(libc.capset(ctypes.byref(_CapabilityHeader(_CAPABILITY_VERSION_3, 0)), data), "capset")


@cache
def last_capability() -> int:
    """The highest capability number of this system's kernel (read once per process: a kernel reads it before it
    forks its children)."""
    with open(_LAST_CAPABILITY, encoding="ascii") as handle:
        return int(handle.read())


@cache
def unavailable() -> str | None:
    """Why kernels cannot get these namespaces and their ``/proc`` here (tried in a child process, once), or None
    when they can."""
    try:
        _libc()
    except OSError as exc:
        return str(exc.strerror)
    read, write = os.pipe()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # "multi-threaded, use of fork()": the child runs none
        pid = os.fork()
    if pid == 0:  # the child: try as the launcher and the box's init would, report, never return
        try:
            os.close(read)
            enter_user_and_pid()
            if _fork() == 0:
                become_init(network=False)
                drop_capabilities()
                os.write(write, b"ok")
            else:
                os.wait()
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
