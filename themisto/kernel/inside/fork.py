"""Run cells in forked copies of an IPython kernel, from inside that kernel.

Execution-checked scoring (:mod:`themisto.evaluation.exec`) replays a
trajectory once and, at each step where predictions wait, runs every
prediction in the state *before* that step. The scorer sends this module,
compiled, to the kernel, which executes it into a private module registered
as ``sys.modules["_themisto_fork"]`` (no user name is bound, as with
:mod:`themisto.kernel.inside.snapshot`), and evaluates :func:`run` on a
:class:`~themisto.kernel.inside.wire.ForkRequest` as the ``user_expression`` of a
silent execute request, or of the replay cell's own request, after its snapshot (``after_cell``: the kernel then
walks its working folder first, for the check after the run, see :func:`folder_signature`). :func:`run` first
opens every cell's code file and deletes it, so the kernel never holds a cell's text; then for each cell it:

1. forks the kernel process (``os.fork``): the child has the parent's whole
   state, copy-on-write, and the parent's state is untouched by what the child
   does;
2. in the child: closes the other cells' code files, reads its own; moves into
   a process group of its own (so a timeout kills the child and whatever it
   started) and dies with the kernel (``PR_SET_PDEATHSIG``); closes every socket
   it inherited (the kernel's channels) and every end past fd 2 of ipykernel's
   pipes behind fds 1 and 2 (which would carry its writes into the kernel's own
   output); copies the kernel's working directory
   into its private folder (each child after the first its own, beside the
   first's readiness and cell; the kernel copies the first's while it gets
   ready); with ``request.confine``, enters
   user, IPC and PID namespaces of its own
   (:mod:`themisto.kernel.inside.namespaces`), a Landlock domain of its own (writes only in its private folder and
   ``/dev/null``, reads only there, in the interpreter's and the system's files
   and the kernel's profile and caches, no TCP, signals and abstract sockets
   scoped, no ptrace outside)
   and a seccomp filter (:mod:`themisto.kernel.inside.seccomp`) that refuses, on
   top of the kernel's own, every new socket but an anonymous pair (the kernel's channels are Unix
   sockets in a folder, which Landlock does not guard; no network of any protocol, even where the kernel
   has it) and changes to another
   process's priority or CPUs (the scorer's, the kernel's); starts the
   namespace's init and the process that runs the cell, a clone that shares the
   child's memory (no second copy of the kernel's) and is the kernel's own child,
   while the child, suspended since, is killed by the kernel at the ready frame
   (:func:`themisto.kernel.inside.namespaces.contain`); that process then points its
   temporary folder into its private folder; points file descriptors 1 and 2 at a
   pipe the kernel reads itself (:class:`FdOutput`), and ``sys.stdout``/``sys.stderr`` at capturing streams that
   flush the way ipykernel's do (before every rich output, on ``flush()``, at
   the end, and once a write is 0.2 s old), dropping the text ipykernel's streams held unsent at the fork (the
   replay cell's, see :func:`_drop_unsent`); replaces ``send`` of the kernel's
   ``Session`` objects with a capture, so every message the shell would publish
   (``display_data``, ``execute_result``, ``error`` tracebacks, ``clear_output``,
   comm traffic) is kept in order and nothing reaches the kernel's sockets;
   limits OpenMP to one thread (see :func:`single_threaded_openmp`); has the
   cell added to the in-memory input history as it is transformed to run, where
   IPython looks for a trailing ``;`` (see :func:`_as_last_input`); writes a ready frame and waits for the parent's
   go (the cell's time limit starts at the go, so a slow copy does not count
   against it); moves into its copy of the working directory; runs the cell
   with ``shell.run_cell(code, store_history=False)`` (no write to the history
   database, no execution count); writes the outcome
   (status, error cut to the output budget, the captured messages) as a frame into its
   result pipe; answers the kernel's acknowledgement; takes the snapshot of its namespace
   (:func:`themisto.kernel.inside.snapshot.take`, reusing the parent's description
   cache copy-on-write); writes it; and waits to be killed, never returning
   into the kernel;
3. in the parent: copies the first child's folder while it gets ready; waits
   for the child's ready frame (or the fault that says why it could not get
   ready), sends the go, reads the child's frames until the cell's deadline (then the
   acknowledgement's, then the snapshot's), each within a bound (:func:`outcome_limit`,
   :func:`snapshot_limit`: a longer one makes the result a fault, and is not held),
   and the child's file descriptors 1 and 2 meanwhile; takes the outcome only once
   the child has answered the acknowledgement sent on reading it (a process that
   wrote an outcome and ended itself is ``exited``), its time at most what the
   parent saw, and adds what it read of fds 1 and 2 as its last stdout text; and
   kills the child's process group (at a deadline, and after
   every cell, so nothing it started survives), then every process of its PID
   namespace (:func:`kill_pid_namespace`: those in sessions of their own too,
   which would otherwise live until the namespace's init ran again). Every
   child of the request is forked before the first result comes back (so no child is a copy of a kernel
   that holds another child's result, the reference's among them): where they are
   confined, the first alone and the others while it gets ready or, those left when
   it is ready, while its cell runs; cells run one
   at a time (a confined child may still be copying the kernel's folder while
   an earlier one runs, since a confined cell writes only its own folder; an
   unconfined request forks every child, and waits until each is ready, before
   the first cell runs), and killed children
   are reaped once all cells of the request have run, or, those still exiting then, and the folders of all, while the
   next request's first child gets ready: an exit costs tens of milliseconds for a kernel
   that loaded pandas and scikit-learn (about 1,400 memory mappings to unmap),
   and overlaps the next cells, the scorer's comparisons and the replay's own
   cell instead of adding to them.

Each frame is one line of JSON; together they make a
:class:`~themisto.kernel.inside.wire.ChildResult`. What the frames say is the
child's claim about itself: the cell's code runs in the same process as the
runner and can write into the result pipe too (it is an open descriptor of
the process), answering the acknowledgement as the runner does. What the
kernel observes itself holds whatever the cell does: fds 1 and 2, the time, a
timeout, a process that ended, a frame past its bound. SECURITY.md, threat 12,
says what follows for the score. The module uses only the
standard library and IPython (present in any IPython kernel), and is
importable in-process so its helpers are tested directly.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import io
import json
import os
import select
import shutil
import signal
import stat
import sys
import tempfile
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, NoReturn

if TYPE_CHECKING:  # for the type checker only: the kernel gets the request decoded by the wire module
    from themisto.kernel.inside.wire import ChildResult, ForkRequest, SnapshotRequest

MODULE_NAME = "_themisto_fork"
SNAPSHOT_MODULE = "_themisto_snapshot"
WIRE_MODULE = "_themisto_wire"
LANDLOCK_MODULE = "_themisto_landlock"
SECCOMP_MODULE = "_themisto_seccomp"
NAMESPACES_MODULE = "_themisto_namespaces"
# What a confined child may write besides its own folder: opening /dev/null to write is a write to a file.
ALSO_WRITABLE = ("/dev/null",)
# The kernel's private folders a confined child reads (IPython's profile, matplotlib's font list, caches), named
# by the variables that point to them; it reads nothing else of the kernel's but the interpreter's and the
# system's files (``landlock.runtime_readable``): not the kernel's working directory, whose copy it has.
ALSO_READABLE = ("IPYTHONDIR", "MPLCONFIGDIR", "XDG_CACHE_HOME")
# ipykernel's OutStream publishes buffered text this long after the first write (its flush_interval).
FLUSH_INTERVAL = 0.2
# Non-stream messages a child keeps, in JSON characters, as a multiple of the output budget;
# the scorer's OutputCollector then applies the budget itself, as the recorder does.
RICH_BUDGET_FACTOR = 4
_READ_CHUNK = 1 << 16
# A child runs untrusted code, so its frames are its claim about itself, read within bounds: the outcome holds
# at most the stream budget, RICH_BUDGET_FACTOR times it of rich messages (each charged MESSAGE_CHARGE for its
# fields), an error cut to the budget, JSON escapes at most 6 bytes a character; a snapshot at most
# max_variables records of a cut repr, a bounded description and their fields.
MESSAGE_CHARGE = 64
_OUTCOME_BYTES_PER_CHAR = 32
_SLACK = 1 << 20
_VARIABLE_FIELDS_BYTES = 16 << 10
# The child's first frame, once it is ready for its cell (confined, its folder copied where it copies it itself),
# is the pid of the process that runs the cell, in decimal: the child's own, or where it is confined, the clone it
# started in its PID namespace (``namespaces.contain``), which is the kernel's child too. It then waits for the go.
# Seconds a child has to get ready, from when the kernel waits for it: milliseconds as a rule, longer where it
# copies a large working folder; past them its result is a fault that says so.
READY_SECONDS = 60.0
# The runner's answer to the parent's acknowledgement, between the outcome frame and the snapshot's.
ACK_FRAME = ""
# Seconds the runner has to answer it (it does at once: it only waits for the parent's byte).
ACK_SECONDS = 5.0
# The nice value a killed child's process group exits at (see Child.kill).
LOWEST_PRIORITY = 19
# Linux ``ioctl(dst, FICLONE, src)``: share the source's blocks copy-on-write (btrfs, XFS, bcachefs).
_FICLONE = 0x40049409


# --- the working directory ------------------------------------------------------------------


def clone_file(source: str, target: str, info: os.stat_result) -> None:
    """Copy the regular file ``source`` (whose ``lstat`` is ``info``) to a new ``target``, with its mode and times:
    a copy-on-write clone where the filesystem offers one, else a copy made in the kernel of Linux."""
    # O_NONBLOCK: a FIFO put in the file's place since its lstat is opened without waiting for a writer (and
    # copied as what it holds, nothing or what a writer left); no effect on a regular file
    reader = os.open(source, os.O_RDONLY | os.O_CLOEXEC | os.O_NOFOLLOW | os.O_NONBLOCK)
    try:
        writer = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC | os.O_NOFOLLOW, 0o600)
        try:
            try:
                fcntl.ioctl(writer, _FICLONE, reader)
            except OSError:
                _copy_bytes(reader, writer)
            _keep_mode_and_times(writer, info)
        finally:
            os.close(writer)
    finally:
        os.close(reader)


def _copy_bytes(reader: int, writer: int) -> None:
    """Copy what is left to read of ``reader`` to ``writer``: ``copy_file_range`` (no buffer of this process's:
    no page of it to fault in after a fork), or reads and writes where it is refused (across filesystems)."""
    try:
        while os.copy_file_range(reader, writer, 1 << 30):
            pass
        return
    except OSError:  # EXDEV, ENOSYS, EINVAL: its offsets are where it stopped
        pass
    while chunk := os.read(reader, 1 << 20):
        while chunk:
            chunk = chunk[os.write(writer, chunk) :]


def _keep_mode_and_times(copy: int | str, info: os.stat_result) -> None:
    """Give ``copy`` (a path, or a descriptor open on it) the mode and times of the entry whose stat is ``info``."""
    os.chmod(copy, stat.S_IMODE(info.st_mode))
    os.utime(copy, ns=(info.st_atime_ns, info.st_mtime_ns))


def copy_tree(source: str, target: str) -> None:
    """Copy the contents of the folder ``source`` into the folder ``target`` (made if missing), with their modes
    and times: files cloned, symbolic links kept as links, anything else (FIFOs, sockets, devices) left out.

    Leaner than ``shutil.copytree`` (no Python file object, buffer or extended attributes for each file): the
    copy is on a prediction's path, 1.9 to 3.5 ms against 3.0 to 4.4 ms for the bundled ``data/files`` in the
    kernel after its forks (docs/performance.md).
    """
    os.makedirs(target, exist_ok=True)
    _copy_entries(source, target)
    _keep_mode_and_times(target, os.stat(source))


def _copy_entries(source: str, target: str) -> None:
    with os.scandir(source) as entries:
        for entry in entries:
            copy = os.path.join(target, entry.name)
            info = entry.stat(follow_symlinks=False)
            if stat.S_ISLNK(info.st_mode):
                os.symlink(os.readlink(entry.path), copy)
                os.utime(copy, ns=(info.st_atime_ns, info.st_mtime_ns), follow_symlinks=False)
            elif stat.S_ISDIR(info.st_mode):
                os.mkdir(copy, 0o700)
                _copy_entries(entry.path, copy)
                _keep_mode_and_times(copy, info)
            elif stat.S_ISREG(info.st_mode):
                clone_file(entry.path, copy, info)


def _private_cwd(root: str, copy: str) -> str:
    """Where the child works: the same place inside ``copy`` as the kernel's cwd is inside ``root``.

    A kernel whose notebook ``os.chdir``-ed out of its working directory keeps
    that folder (a cell can always reach files by absolute paths).
    """
    try:
        here = os.getcwd()
    except OSError:  # the cwd was deleted
        return copy
    relative = os.path.relpath(here, root)
    if relative == os.curdir:
        return copy
    if relative == os.pardir or relative.startswith(os.pardir + os.sep):
        return here
    return os.path.join(copy, relative)


def folder_signature(root: str | os.PathLike[str]) -> tuple[tuple[str, int, int, int], ...]:
    """Every entry under ``root`` with its type, size and modification time (links not followed).

    The check that a forked run left the replay's folder alone compares two of them: the host takes both, or the
    kernel the first, just before its first fork, where the run rides on a cell's request (``run``). By
    ``os.scandir``, each entry's path built from its folder's (a ``relpath`` per entry cost as much as the rest).
    """
    entries = []
    folders = [(str(root), "")]
    while folders:
        folder, prefix = folders.pop()
        try:
            with os.scandir(folder) as listing:
                found = list(listing)
        except OSError:  # vanished or unreadable: the walk after says so
            continue
        for entry in found:
            try:
                info = entry.stat(follow_symlinks=False)
            except OSError:  # vanished while walked
                continue
            relative = prefix + entry.name
            if stat.S_ISDIR(info.st_mode):
                entries.append((relative, info.st_mode, 0, info.st_mtime_ns))
                folders.append((entry.path, relative + os.sep))
            else:
                entries.append((relative, info.st_mode, info.st_size, info.st_mtime_ns))
    return tuple(sorted(entries))


def regular_bytes(signature: Sequence[Sequence[Any]]) -> int:
    """The bytes of the regular files of a :func:`folder_signature`: what a copy of the folder writes."""
    return sum(size for _, mode, size, _ in signature if stat.S_ISREG(mode))


# --- capture in the child -------------------------------------------------------------------


class Capture:
    """The messages a forked cell would have published, in order, within a budget.

    ``budget`` bounds the stream text kept (the rest is counted through the
    wire's ``StreamBudget``, as the recorder's OutputCollector counts it, so a
    truncated output names its real length); rich messages are kept up to ``RICH_BUDGET_FACTOR`` times the
    budget in JSON characters, beyond which only their ``text/plain`` length is
    counted.
    """

    def __init__(self, budget: int) -> None:
        self._messages: list[dict[str, Any]] = []
        # the text of the last stream message, still growing: consecutive text of one stream is one message
        # (as the scorer's OutputCollector merges it), so the count of messages is bounded by the rich ones
        self._open: tuple[str, list[str]] | None = None
        self.stream = _BOUND["wire"].StreamBudget(budget)
        self.rich_room = budget * RICH_BUDGET_FACTOR
        self.streams = {name: CaptureStream(name, self) for name in ("stdout", "stderr")}

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The messages kept, in order."""
        self._close_stream()
        return self._messages

    def _close_stream(self) -> None:
        if self._open is not None:
            name, parts = self._open
            self._messages.append({"msg_type": "stream", "content": {"name": name, "text": "".join(parts)}})
            self._open = None

    def add_stream(self, name: str, text: str) -> None:
        kept = self.stream.take(text)
        if kept:
            if self._open is not None and self._open[0] != name:
                self._close_stream()
            if self._open is None:
                self._open = (name, [])
            self._open[1].append(kept)

    def flush_streams(self) -> None:
        """Publish buffered stream text, stdout first, as ipykernel does before a rich output."""
        for stream in self.streams.values():
            stream.flush()

    def send(self, stream: Any, msg_or_type: Any, content: Any = None, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """Stands in for ``jupyter_client.session.Session.send``: keeps the message, sends nothing."""
        if isinstance(msg_or_type, dict):
            msg_type = msg_or_type.get("msg_type") or msg_or_type.get("header", {}).get("msg_type")
            content = msg_or_type.get("content")
        else:
            msg_type = msg_or_type
        content = content if isinstance(content, dict) else {}
        if msg_type == "stream":  # an OutStream object user code kept from before the fork
            self.add_stream(str(content.get("name", "stdout")), str(content.get("text", "")))
            return {}
        self.flush_streams()
        try:
            text = json.dumps(content, default=str)
        except (TypeError, ValueError):
            return {}
        if len(text) + MESSAGE_CHARGE > self.rich_room:
            plain = content.get("data", {}).get("text/plain") if isinstance(content.get("data"), dict) else None
            self.stream.dropped_chars += len(plain) if isinstance(plain, str) else 0
            return {}
        self.rich_room -= len(text) + MESSAGE_CHARGE
        self._close_stream()
        self._messages.append({"msg_type": str(msg_type), "content": json.loads(text)})
        return {}


class CaptureStream(io.TextIOBase):
    """``sys.stdout``/``sys.stderr`` of a forked cell: buffered like ipykernel's OutStream, published to a Capture."""

    def __init__(self, name: str, capture: Capture) -> None:
        super().__init__()
        self.name = name  # ipykernel's streams have a name too
        self._capture = capture
        self._pending: list[str] = []
        self._since = 0.0

    def writable(self) -> bool:
        return True

    def write(self, text: str) -> int:
        if not isinstance(text, str):
            raise TypeError(f"write() argument must be str, not {type(text).__name__}")
        if not self._pending:
            self._since = time.monotonic()
        self._pending.append(text)
        if time.monotonic() - self._since >= FLUSH_INTERVAL:
            self.flush()
        return len(text)

    def flush(self) -> None:
        if self._pending:
            text, self._pending = "".join(self._pending), []
            self._capture.add_stream(self.name, text)

    def isatty(self) -> bool:
        return False


def _sessions(shell: Any) -> list[Any]:
    """The distinct Session objects through which the shell and its kernel publish."""
    found: dict[int, Any] = {}
    for owner in (getattr(shell, "kernel", None), shell.displayhook, shell.display_pub):
        session = getattr(owner, "session", None)
        if session is not None:
            found[id(session)] = session
    return list(found.values())


def _isolate(capture: Capture, fd_output: int) -> None:
    """Cut the child off from the kernel's channels and files: sessions, streams, file descriptors."""
    from IPython import get_ipython

    shell = get_ipython()
    for session in _sessions(shell):
        session.send = capture.send
    # Only ``EName: evalue`` of an error is kept, so tracebacks need not be formatted (a slow first time
    # in every child, whose imports die with it).
    with contextlib.suppress(Exception):
        shell.InteractiveTB.set_mode(mode="Minimal")
    # ipykernel reads fds 1 and 2 in a thread of the kernel: the child's go into a pipe the kernel reads itself (the
    # other ends of ipykernel's pipes were closed with the sockets, _close_channels)
    os.dup2(fd_output, 1)
    os.dup2(fd_output, 2)
    os.close(fd_output)
    _drop_unsent(sys.stdout, sys.stderr)
    sys.stdout, sys.stderr = capture.streams["stdout"], capture.streams["stderr"]


def _drop_unsent(*streams: Any) -> None:
    """Drop the text ipykernel's ``streams`` held unsent when the child was forked.

    A run that rides on the replay's cell request forks before ipykernel sends the cell's last output (it flushes
    at the request's end), and a stream kept from before the fork (a logging handler's) flushes, in a child, at
    once and through the capture: that text is the replay's, never the child's. Only this thread runs here, so
    the buffers are cleared without their lock (its holder at the fork may be a thread the child does not have).
    """
    for stream in streams:
        buffers = getattr(stream, "_buffers", None)  # ipykernel 7: one buffer per parent request
        if isinstance(buffers, dict):
            buffers.clear()
        buffer = getattr(stream, "_buffer", None)  # ipykernel 6
        if isinstance(buffer, io.StringIO):
            buffer.seek(0)
            buffer.truncate()


# The omp_set_num_threads functions of the loaded OpenMP runtimes, found in the parent and called in each
# child, and the size of sys.modules when they were looked for (an import may have loaded another runtime).
_OPENMP: tuple[int, list[Any]] = (-1, [])


def openmp_setters() -> list[Any]:
    """``omp_set_num_threads`` of every OpenMP runtime mapped into this process (libgomp, libomp, libiomp5)."""
    global _OPENMP
    if _OPENMP[0] == len(sys.modules):
        return _OPENMP[1]
    import ctypes

    try:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split(None, 5)[5].strip() for line in maps if "omp" in line and line.count(" ") >= 5}
    except OSError:  # not Linux: no /proc
        paths = set()
    setters = []
    for path in sorted(paths):
        if "omp" not in os.path.basename(path):
            continue
        with contextlib.suppress(OSError, AttributeError):
            setters.append(ctypes.CDLL(path).omp_set_num_threads)
    _OPENMP = (len(sys.modules), setters)
    return setters


def single_threaded_openmp(setters: list[Any]) -> None:
    """Make the OpenMP runtimes run parallel regions on one thread (in a forked child).

    A forked child has only the forking thread, but GNU OpenMP (libgomp)
    believes the worker pool of the parent's last parallel region still
    exists, and its next region waits on them forever (scikit-learn's k-NN
    does this). With one thread a region uses no pool.
    """
    for setter in setters:
        setter(1)


def _as_last_input(shell: Any) -> None:
    """Make the cell ``run_cell`` runs next the last of the shell's in-memory input history, as
    ``store_history=True`` would.

    IPython's displayhook decides whether a trailing ``;`` silences a cell's
    value by reading the last *stored* input (``DisplayHook.quiet``). The child
    runs with ``store_history=False``, so without this it would read the
    replay's previous cell: a value after a ``plt.plot(...);`` cell would be
    hidden and one ending in ``;`` shown. The cell is stored as ``run_cell``
    transforms it, by that one transformation (a transformation of its own
    here would double the child's slowest step before its ready frame), before
    it runs, where ``store_inputs`` puts it. Only the child's copy of the lists
    changes; nothing reaches the history database (its writer thread is not in
    the child, and ``store_inputs`` would start one).
    """
    transform = shell.transform_cell
    history = shell.history_manager

    def transform_and_store(raw_cell: str) -> str:
        shell.transform_cell = transform  # this cell's alone
        try:
            transformed: str = transform(raw_cell)
        except Exception:  # IPython then stores the raw cell, and run_cell reports the error
            transformed = raw_cell
            raise
        finally:
            history.input_hist_parsed.append(transformed.rstrip("\n"))
            history.input_hist_raw.append(raw_cell.rstrip("\n"))
        return transformed

    shell.transform_cell = transform_and_store


def _error_fields(error: BaseException | None, limit: int) -> tuple[str, str]:
    """``EName`` and ``evalue`` of ``error``, each cut to ``limit`` characters (the frame's bound counts on it)."""
    if error is None:
        return "", ""
    return type(error).__name__[:limit], str(error)[:limit]


def _child(
    code_fd: int,
    request: ForkRequest,
    folder: str,
    cwd: str,
    go: int,
    fd_output: int,
    write: Callable[[str], None],
    copies: bool,
) -> None:
    """In the forked process: get ready (copying the working folder itself where it ``copies``), wait for the
    go, run the cell, write the outcome frame, answer the parent's acknowledgement, then write the snapshot
    frame."""
    from IPython import get_ipython

    code = _read_all(code_fd)
    # the kernel's sockets (its channels to the scorer) and its output's pipes are no business of the cell's
    _close_channels()
    # before it confines itself: its domain does not read the kernel's folder
    if copies and (fault := _copy_work(request.root, folder)) is not None:
        write(fault.to_json())
        return
    if request.confine:
        try:
            # namespaces of its own (a PID namespace); no network even where the kernel has it (--allow-network): no
            # socket of any family (seccomp), where a network namespace of its own cost more (docs/performance.md)
            _BOUND["namespaces"](network=True, map_ids=False, pid=True)
            _BOUND["confine"]([folder, *ALSO_WRITABLE], readable=_BOUND["readable"], allow_network=False, scope=True)
            _BOUND["seccomp"](unix_sockets=False, network=False, other_processes=False)
            runner = _BOUND["contain"]()  # returns in the PID namespace's process that runs the cell
        except OSError as exc:
            write(_frame("fault", "OSError", f"cannot confine the prediction: {exc}").to_json())
            return
    else:
        runner = os.getpid()
    temporary = os.path.join(folder, "tmp")
    os.mkdir(temporary)
    os.environ["TMPDIR"] = tempfile.tempdir = temporary
    capture = Capture(request.max_raw_output_chars)
    _isolate(capture, fd_output)
    single_threaded_openmp(openmp_setters())  # the parent's list, found before the fork
    shell = get_ipython()
    _as_last_input(shell)
    write(str(runner))  # the ready frame; nothing more is written until the go, so the parent reads it alone
    if os.read(go, 1) != b"g":  # the parent gave up on this cell
        return
    os.chdir(cwd)  # the first child's folder is the parent's to copy, done by the go
    started = time.perf_counter()
    result = shell.run_cell(code, store_history=False)
    seconds = time.perf_counter() - started
    capture.flush_streams()
    error = result.error_before_exec or result.error_in_exec
    ename, evalue = _error_fields(error, request.max_raw_output_chars)
    outcome = _BOUND["wire"].ChildResult(
        "ok" if error is None else "error",
        ename,
        evalue,
        seconds,
        capture.messages,
        capture.stream.dropped_chars,
        capture.stream.dropped_trailing_newlines,
        None,
        None,
    )
    write(outcome.to_json())
    if os.read(go, 1) != b"k":  # the parent gave up on this child
        return
    write(ACK_FRAME)
    # then it waits to be killed (_end): a child that ends itself is "exited"
    write(_BOUND["take"](request.snapshot).text)


def _frame(status: str, ename: str, evalue: str) -> ChildResult:
    """A child's result without a run or a snapshot (``wire.fault``)."""
    result: ChildResult = _BOUND["wire"].fault(status, ename, evalue)
    return result


def _read_all(fd: int) -> str:
    """The whole text behind ``fd`` (a cell's code file), then ``fd`` closed."""
    chunks = []
    while chunk := os.read(fd, _READ_CHUNK):
        chunks.append(chunk)
    os.close(fd)
    return b"".join(chunks).decode("utf-8")


def _descriptors() -> list[int]:
    """This process's open file descriptors (a guess at the usual range where there is no ``/proc``)."""
    try:
        return [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return list(range(3, 1024))


def _close_channels() -> None:
    """Close every socket this process holds (the kernel's ZeroMQ channels and whatever earlier cells opened) and
    every descriptor past 2 of the pipes that descriptors 1 and 2 are ends of, in one pass over the descriptors.

    ipykernel points fds 1 and 2 at pipes that a thread of the kernel reads and publishes as the kernel's output,
    and keeps both ends open past fd 2: a child that held them could write into the kernel's output (a process
    it left in a session of its own, while the child's PID namespace is torn down, into the next cell of the
    replay's) and read from it. Fds 1 and 2 themselves are pointed elsewhere once the child is confined
    (:func:`_isolate`).
    """
    pipes = set()
    for descriptor in (1, 2):
        with contextlib.suppress(OSError):
            status = os.fstat(descriptor)
            if stat.S_ISFIFO(status.st_mode):
                pipes.add((status.st_dev, status.st_ino))
    for descriptor in _descriptors():
        with contextlib.suppress(OSError):
            status = os.fstat(descriptor)
            if stat.S_ISSOCK(status.st_mode) or (descriptor > 2 and (status.st_dev, status.st_ino) in pipes):
                os.close(descriptor)


# --- the parent -----------------------------------------------------------------------------

_PR_SET_PDEATHSIG = 1
# Linux ``ioctl(fd, NS_GET_PARENT)`` on a PID namespace: the one it is nested in (EPERM past the caller's own).
_NS_GET_PARENT = 0xB702
# Linux nests PID namespaces 32 deep at most.
_MAX_NESTING = 32
_PRCTL: list[Any] = []


def _prctl() -> Any:
    """The C library's ``prctl`` (found once, in the parent), or None where there is none."""
    if not _PRCTL:
        import ctypes

        try:
            _PRCTL.append(ctypes.CDLL(None, use_errno=True).prctl)
        except (OSError, AttributeError):
            _PRCTL.append(None)
    return _PRCTL[0]


class Oversized(Exception):
    """A child's frame longer than its bound."""


class FdOutput:
    """What a child writes to its file descriptors 1 and 2, read by the kernel itself from a pipe.

    The first ``cap`` bytes are kept; the rest is read and dropped, so the child never blocks on a full pipe.
    """

    def __init__(self, descriptor: int, cap: int) -> None:
        self.descriptor, self.cap = descriptor, cap
        self.data = bytearray()
        os.set_blocking(descriptor, False)

    def read(self) -> None:
        """Take what the pipe holds now (all the child wrote before its last frame, once that has come)."""
        while self.descriptor >= 0:
            try:
                chunk = os.read(self.descriptor, _READ_CHUNK)
            except BlockingIOError:
                return
            if not chunk:  # every writer is gone
                self.close()
                return
            self.data += chunk[: max(self.cap - len(self.data), 0)]

    def close(self) -> None:
        if self.descriptor >= 0:
            os.close(self.descriptor)
            self.descriptor = -1


def _frames(
    read: int, deadlines: list[float], limits: list[int], output: FdOutput, buffer: bytearray
) -> Iterator[str | None]:
    """The child's frames as they arrive, one per deadline; None when the frame waited for is late.

    ``deadlines[0]`` is a time; each later entry is a duration counted from the
    arrival of the frame before it. A frame longer than its entry of ``limits``
    raises :class:`Oversized`. Meanwhile the child's ``output`` is read. Reading
    stops at the last frame: the end of the pipe comes only once the child's
    memory has been unmapped, which is slow for a large kernel and need not be
    waited for. ``buffer`` holds what was read past the last frame taken: it starts the next call (a child let go
    before it was read ready may have written its outcome behind its ready frame).
    """
    position = 0
    searched = 0  # where a newline may be in buffer
    while position < len(deadlines):
        if (end := buffer.find(b"\n", searched)) >= 0:
            line = bytes(buffer[:end])
            del buffer[: end + 1]
            searched = 0
            if len(line) > limits[position]:
                raise Oversized(f"a frame of the child's past {limits[position]} bytes")
            position += 1
            if position < len(deadlines):  # the next frame's time starts when this one has come
                deadlines[position] = time.monotonic() + deadlines[position]
            yield line.decode("utf-8", "replace")
            continue
        searched = len(buffer)
        if len(buffer) > limits[position]:
            raise Oversized(f"a frame of the child's past {limits[position]} bytes")
        remaining = deadlines[position] - time.monotonic()
        if remaining <= 0:
            yield None
            return
        watched = [read] + ([output.descriptor] if output.descriptor >= 0 else [])
        ready, _, _ = select.select(watched, [], [], remaining)
        if output.descriptor in ready:
            output.read()
        if read not in ready:
            continue
        chunk = os.read(read, _READ_CHUNK)
        if not chunk:
            return
        buffer += chunk


def _pid_namespace(pid: int) -> int | None:
    """The PID namespace (its inode) of process ``pid``; None where it has ended or may not be inspected."""
    try:
        return os.stat(f"/proc/{pid}/ns/pid").st_ino
    except OSError:
        return None


def _runner(frames: list[str | None]) -> int | None:
    """The pid a child's ready frame names (the process that runs its cell); None for any other first frame."""
    if len(frames) == 1 and frames[0] and frames[0].isascii() and frames[0].isdigit():
        return int(frames[0])
    return None


def _end(go: int) -> NoReturn:
    """A child's last step, whatever happened: wait until the kernel has killed it (or has ended, which closes
    ``go``), then exit. A runner must not end first, while the child that started it is suspended
    (``namespaces.contain``); nor need any other, since the kernel kills every child after its cell."""
    with contextlib.suppress(OSError):
        while os.read(go, 1):
            pass
    os._exit(0)


def _in_pid_namespace(pid: int, namespace: int, own: int) -> bool:
    """Whether process ``pid`` is in PID namespace ``namespace`` or one nested in it (``own``: this process's)."""
    try:
        descriptor = os.open(f"/proc/{pid}/ns/pid", os.O_RDONLY)
    except OSError:  # ended, or a zombie
        return False
    try:
        for _ in range(_MAX_NESTING):
            inode = os.fstat(descriptor).st_ino
            if inode in (namespace, own):
                return inode == namespace
            parent = fcntl.ioctl(descriptor, _NS_GET_PARENT)
            os.close(descriptor)
            descriptor = parent
    except OSError:  # nested in none this process sees
        pass
    finally:
        os.close(descriptor)
    return False


def kill_pid_namespace(namespace: int) -> None:
    """SIGKILL every process of PID namespace ``namespace`` and of those nested in it, pass after pass over
    ``/proc``, until a pass finds none not yet signalled (one that forked meanwhile has its child found by the
    next pass; a killed process starts none and runs no more of its code). Each is signalled through a pidfd
    opened before it is checked, so no process that took a pid freed meanwhile is signalled."""
    own = os.stat("/proc/self/ns/pid").st_ino
    signalled: set[int] = {os.getpid()}
    while True:
        found = False
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) in signalled:
                continue
            # one call rules out a process of this process's own namespace, where an unboxed kernel sees every
            # process of the machine (0.18 ms a pass over 71 processes, against 0.38 ms with the pidfd and the
            # namespace's descriptor opened for each), and one ended meanwhile or not this process's to inspect
            if _pid_namespace(int(name)) in (own, None):
                continue
            try:
                handle = os.pidfd_open(int(name))  # Linux 5.3; a confined child needs Landlock's ABI 6 (6.12)
            except OSError:  # ended meanwhile
                continue
            try:
                if _in_pid_namespace(int(name), namespace, own):
                    with contextlib.suppress(OSError):
                        signal.pidfd_send_signal(handle, signal.SIGKILL)
                    signalled.add(int(name))
                    found = True
            finally:
                os.close(handle)
        if not found:
            return


def _exit_description(status: int) -> str:
    if os.WIFSIGNALED(status):
        number = os.WTERMSIG(status)
        try:
            name = signal.Signals(number).name
        except ValueError:
            name = f"signal {number}"
        return f"killed by {name}"
    return f"exit code {os.waitstatus_to_exitcode(status)}"


def _waitpid(pid: int) -> int:
    """The exit status of child ``pid``, once it has ended."""
    while True:
        try:
            return os.waitpid(pid, 0)[1]
        except InterruptedError:
            continue
        except ChildProcessError:  # already reaped
            return 0


def _ended(pid: int, block: bool) -> bool:
    """Whether child ``pid`` has ended (and is now reaped), waiting for it with ``block``."""
    if block:
        _waitpid(pid)
        return True
    try:
        return os.waitpid(pid, os.WNOHANG)[0] != 0
    except ChildProcessError:  # already reaped
        return True


# The killed children of the last request, removed (reaped, their folders deleted) at the start of the next one.
_DYING: list[Child] = []
# The child's copy of the kernel's working directory, inside its private folder.
WORK_FOLDER = "work"


def _copy_work(root: str, directory: str) -> ChildResult | None:
    """Copy the kernel's working directory ``root`` into a child's private folder ``directory``; the fault that
    says why it failed, or None."""
    try:
        copy_tree(root, os.path.join(directory, WORK_FOLDER))
    except OSError as exc:
        return _frame("fault", "OSError", f"cannot copy the working directory: {exc}")
    return None


class Child:
    """One forked child, from its fork (it then waits for its go: :meth:`go` or :meth:`start`) to its death
    (:meth:`reap`).

    ``pid`` is the forked child's, also its process group's; ``runner`` (once it is ready) that of the process
    that runs the cell: the child itself, or where it is confined, the clone it started in a PID namespace of its
    own, the kernel's child too, while the child itself is killed (``namespaces.contain``).

    ``code_fds`` are the open code files of the whole request: the child reads ``code_fds[index]`` and closes
    the others before anything of its cell runs; it closes ``earlier`` too, the kernel's ends of the pipes of
    the children forked before it (the reference's among them).
    """

    def __init__(self, index: int, code_fds: Sequence[int], request: ForkRequest, earlier: Sequence[int] = ()) -> None:
        self.timeout = request.timeout
        self.budget = request.max_raw_output_chars
        self.limits = [outcome_limit(self.budget), len(ACK_FRAME), snapshot_limit(request.snapshot)]
        self.pid = 0
        self.runner = 0
        # the kernel's children of this one not reaped yet: the child, then its runner too
        self._alive: set[int] = set()
        self.confined = request.confine
        # the PID namespace the process that runs the cell is in (its inode), once known (start)
        self.namespace: int | None = None
        self.fault: ChildResult | None = None
        self._looked = False  # its ready frame waited for (ready), whatever came
        self._going = False  # its go sent: it runs its cell once ready
        self._buffer = bytearray()  # read from its frames' pipe past the last frame taken
        # the first child's folder is the kernel's to copy, while that child gets ready (copy); each later child
        # copies its own, beside the first's readiness and cell (the kernel would copy them one after another
        # before the first cell could start)
        self.copies_itself = index > 0
        self.directory = tempfile.mkdtemp(prefix="p-", dir=request.scratch)
        cwd = _private_cwd(request.root, os.path.join(self.directory, WORK_FOLDER))
        openmp_setters()  # found here, in the parent, so each child only calls them
        prctl = _prctl()
        parent = os.getpid()
        self._read, write_end = os.pipe()
        go_read, self._go = os.pipe()
        output_read, output_write = os.pipe()
        written = [0]  # the child's frames so far

        def write(text: str) -> None:
            data = (text + "\n").encode("utf-8", "replace")  # JSON text holds no raw newline
            while data:
                data = data[os.write(write_end, data) :]
            written[0] += 1

        with warnings.catch_warnings():
            warnings.simplefilter(
                "ignore", DeprecationWarning
            )  # "multi-threaded, use of fork()": the child runs no thread
            pid = os.fork()
        if pid == 0:  # the child: never returns
            try:
                os.close(self._read)
                os.close(self._go)
                os.close(output_read)
                for number, descriptor in enumerate(code_fds):
                    if number != index and descriptor >= 0:
                        os.close(descriptor)
                for descriptor in earlier:
                    os.close(descriptor)
                os.setpgid(0, 0)
                # the child dies with the kernel, even one killed while the child runs (it has a group of its own)
                if prctl is not None:
                    prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
                if os.getppid() != parent:
                    return
                _child(code_fds[index], request, self.directory, cwd, go_read, output_write, write, self.copies_itself)
            except BaseException as exc:  # before its ready frame, the child says why it could not get ready
                if not written[0]:
                    write(_frame("fault", type(exc).__name__, f"the child failed to get ready: {exc}").to_json())
            finally:
                _end(go_read)
        self.pid = pid
        self._alive.add(pid)
        os.close(write_end)
        os.close(go_read)
        os.close(output_write)
        self.output = FdOutput(output_read, self.budget + 1)
        with contextlib.suppress(OSError):  # the child may already have done it, or exited
            os.setpgid(pid, pid)

    def copy(self, root: str) -> None:
        """Copy the kernel's working directory ``root`` into the folder of a child that does not copy it itself,
        while the child gets ready (it moves in on its go, which follows this); a child whose copy fails is
        killed, its result a fault."""
        self.fault = _copy_work(root, self.directory)
        if self.fault is not None:
            self.kill()

    def ready(self) -> None:
        """Wait for the child's first frame: ready (confined, its folder copied where it copies it), or why it could
        not get ready; a child that is not ready within :data:`READY_SECONDS` is killed, its result a fault. A
        confined child's PID namespace is noted once it is ready, so that :meth:`kill` finds every process in it.
        """
        if self.fault is not None or self._looked:
            return
        self._looked = True
        try:
            frames = list(
                _frames(self._read, [time.monotonic() + READY_SECONDS], self.limits[:1], self.output, self._buffer)
            )
        except Oversized as exc:
            self.kill()
            self.fault = _frame("fault", "ValueError", f"malformed result from the child: {exc}")
            return
        runner = _runner(frames)
        if runner is None:
            self.kill()
            self.fault = _not_ready(frames, self._status(self.pid) if not frames else 0)
            return
        self.runner = runner
        self._alive.add(runner)
        if runner != self.pid:
            # the child that started the runner has been suspended since, its memory and stack the runner's now: it
            # must never run again, and it holds the runner's pipes open while it lives
            with contextlib.suppress(OSError):
                os.kill(self.pid, signal.SIGKILL)
        if self.confined:
            self.namespace = _pid_namespace(runner)

    def pipes(self) -> list[int]:
        """The kernel's ends of this child's pipes (none once it has been killed, or for a fault)."""
        if self.fault is not None or self._read < 0:
            return []
        return [self._read, self._go, self.output.descriptor]

    def start(self) -> None:
        """Wait until the child is ready (:meth:`ready`), then let it run its cell, unless :meth:`go` did already."""
        self.ready()
        self.go()

    def go(self) -> None:
        """Let the child run its cell as soon as it is ready (at once if it is); its time limit starts now."""
        if self.fault is None and not self._going:
            self._going = True
            self._started = time.monotonic()
            self._deadline = self._started + self.timeout
            with contextlib.suppress(OSError):  # the child is gone: collect() says how
                os.write(self._go, b"g")

    def collect(self) -> ChildResult:
        """The child's result once its frames have come or its deadline has passed; the child is then killed."""
        if self.fault is not None:
            return self.fault
        frames: list[str] = []
        timed_out = False
        elapsed = 0.0
        try:
            for frame in _frames(
                self._read,
                [self._deadline, min(ACK_SECONDS, self.timeout), self.timeout],
                self.limits,
                self.output,
                self._buffer,
            ):
                if frame is None:
                    timed_out = True
                    break
                frames.append(frame)
                if len(frames) == 1:  # the outcome: the runner answers this before its snapshot
                    elapsed = time.monotonic() - self._started
                    with contextlib.suppress(OSError):
                        os.write(self._go, b"k")
            self.output.read()  # all the child wrote before its last frame
        except Oversized as exc:
            return _frame("fault", "ValueError", f"malformed result from the child: {exc}")
        finally:
            self.kill()
        status = self._status(self.runner) if len(frames) < 2 and not timed_out else 0  # it ended early: say how
        result = _outcome(frames, timed_out, status, self.timeout, elapsed)
        return (
            _with_output(result, bytes(self.output.data), self.budget) if result.status in ("ok", "error") else result
        )

    def kill(self) -> None:
        """SIGKILL the child's process group (the child and everything it started that stayed in it), then every
        process of its PID namespace: those in sessions of their own, which its init's end would kill only once
        that init had run again, at the lowest priority, maybe after the replay's check and into its next cell.

        The child is reaped later (:meth:`reap`): until then its zombie keeps the group id from being reused.
        The group gets the lowest priority first: a killed process unmaps its copy of the kernel at its own
        priority, and two of them (the child and the process that ran the cell) otherwise take the CPU from
        the kernel's answer and the scorer for several milliseconds (exec-score's overhead per prediction fell
        by 0.6 to 4.3 ms in two side-by-side runs, ``docs/performance.md``).
        """
        if self._going and not self._looked and self._read >= 0 and select.select([self._read], [], [], 0)[0]:
            # a child let go before it was read ready may run its cell already, in a runner that left the child's
            # process group: its ready frame, if it came (or its end, no wait here), names that runner and its PID
            # namespace for the kill
            self.ready()
        if self.pid and self._read >= 0:
            with contextlib.suppress(OSError):  # a process of the group it may not renice, or none left
                os.setpriority(os.PRIO_PGRP, self.pid, LOWEST_PRIORITY)
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.pid, signal.SIGKILL)
            if self.namespace is not None:
                kill_pid_namespace(self.namespace)
            os.close(self._read)
            os.close(self._go)
            self.output.close()
            self._read = -1

    def _status(self, pid: int) -> int:
        """The wait status of ``pid``, the child or its runner, once it has ended (it is reaped)."""
        self._alive.discard(pid)
        return _waitpid(pid)

    def reap(self, block: bool = True) -> None:
        """Kill the child, and wait for it and its runner (``block``) or reap those of them that have ended."""
        self.kill()
        for pid in sorted(self._alive):
            if _ended(pid, block):
                self._alive.discard(pid)

    def remove(self) -> None:
        """Kill the child, wait for it and its runner, then delete its folder."""
        self.reap()
        shutil.rmtree(self.directory, ignore_errors=True)


def outcome_limit(budget: int) -> int:
    """The most bytes an outcome frame may have, for an output budget of ``budget`` characters."""
    return _OUTCOME_BYTES_PER_CHAR * budget + _SLACK


def snapshot_limit(request: SnapshotRequest) -> int:
    """The most bytes a snapshot frame may have under ``request``'s caps."""
    per_variable = 6 * (request.max_repr_chars + int(_BOUND["description_chars"])) + _VARIABLE_FIELDS_BYTES
    return request.max_variables * per_variable + _SLACK


def _outcome(frames: list[str], timed_out: bool, status: int, timeout: float, elapsed: float) -> ChildResult:
    """The result of one forked cell from its frames (outcome, acknowledgement, snapshot) and how the child ended.

    An outcome counts only once the child has answered the acknowledgement the parent sent on reading it:
    the runner answers and goes on to the snapshot, while code that wrote an outcome into the pipe and ended
    its process (or wrote a snapshot straight after) does not. The cell's time is at most what the parent saw.
    """
    wire = _BOUND["wire"]
    if len(frames) < 2:
        if timed_out:
            return _frame("timeout", "TimeoutError", f"cell did not finish within {timeout:g} s")
        return _frame("exited", "ChildProcessError", f"the cell ended its process ({_exit_description(status)})")
    try:
        outcome: ChildResult = wire.ChildResult.from_json(frames[0])
    except wire.WireError:
        return _frame("fault", "ValueError", "malformed result from the child")
    if frames[1] != ACK_FRAME or outcome.status not in ("ok", "error"):
        return _frame("fault", "ValueError", "malformed result from the child: not the runner's frames")
    seconds = outcome.seconds if 0.0 <= outcome.seconds <= elapsed else elapsed
    outcome = dataclasses.replace(outcome, seconds=seconds, snapshot=None, snapshot_error=None)
    if len(frames) > 2:
        return dataclasses.replace(outcome, snapshot=frames[2])
    if timed_out:
        return dataclasses.replace(outcome, snapshot_error=f"the snapshot did not finish within {timeout:g} s")
    return outcome


def _not_ready(frames: list[str | None], status: int) -> ChildResult:
    """The fault of a child that did not get ready, from its first frame (None: none came in time) and, where
    none came at all, its wait status. No cell code has run yet, so a ``fault`` frame is the runner's own: a
    child that could not copy its folder, confine itself or start its init says why in one."""
    wire = _BOUND["wire"]
    if frames == [None]:
        return _frame("fault", "TimeoutError", f"the child was not ready within {READY_SECONDS:g} s")
    with contextlib.suppress(wire.WireError):
        if frames and frames[0] and (claimed := wire.ChildResult.from_json(frames[0])).status == "fault":
            return _frame("fault", claimed.ename, claimed.evalue)
    if frames:
        return _frame("fault", "ValueError", "malformed result from the child: not its ready frame")
    return _frame("fault", "ChildProcessError", f"the child ended before its cell ({_exit_description(status)})")


def _with_output(outcome: ChildResult, data: bytes, budget: int) -> ChildResult:
    """``outcome`` with what its child wrote to file descriptors 1 and 2 (read by the parent) as its last stdout
    text, within what is left of the stream budget, as the child's own capture would have kept it."""
    text = data.decode("utf-8", "replace")
    if not text:
        return outcome
    wire = _BOUND["wire"]
    kept_before = sum(
        len(message["content"]["text"])
        for message in outcome.messages
        if message.get("msg_type") == "stream"
        and isinstance(message.get("content"), dict)
        and isinstance(message["content"].get("text"), str)
    )
    room = wire.StreamBudget(max(budget - kept_before, 0))
    room.dropped_trailing_newlines = outcome.dropped_trailing_newlines
    kept = room.take(text)
    stream = [{"msg_type": "stream", "content": {"name": "stdout", "text": kept}}] if kept else []
    return dataclasses.replace(
        outcome,
        messages=outcome.messages + stream,
        dropped_chars=outcome.dropped_chars + room.dropped_chars,
        dropped_trailing_newlines=room.dropped_trailing_newlines,
    )


# The functions of the other kernel-side modules a child calls, taken when this module is installed (bind).
_BOUND: dict[str, Any] = {}


def bind() -> None:
    """Take the snapshot's ``take`` and ``JsonText``, Landlock's ``confine``, seccomp's ``confine``, the namespaces'
    ``enter`` and ``contain`` and the wire's records from their installed modules; find what a confined child reads
    (Landlock's ``runtime_readable`` and :data:`ALSO_READABLE`), build the children's seccomp filter and read the
    last capability's number."""
    snapshot = sys.modules[SNAPSHOT_MODULE]
    _BOUND.update(
        take=snapshot.take,
        text=snapshot.JsonText,
        description_chars=snapshot.DESCRIPTION_CHARS,
        confine=sys.modules[LANDLOCK_MODULE].confine,
        # found as the kernel starts, before any cell (whose changes to the environment widen nothing), once rather
        # than in each child, just before its ready frame
        readable=[
            *sys.modules[LANDLOCK_MODULE].runtime_readable(),
            *filter(None, map(os.environ.get, ALSO_READABLE)),
        ],
        wire=sys.modules[WIRE_MODULE],
        seccomp=sys.modules[SECCOMP_MODULE].confine,
        namespaces=sys.modules[NAMESPACES_MODULE].enter,
        contain=sys.modules[NAMESPACES_MODULE].contain,
    )
    # what every confined child needs, found once here rather than in each child (which says why it cannot)
    with contextlib.suppress(OSError):
        sys.modules[SECCOMP_MODULE].compiled(unix_sockets=False, network=False, other_processes=False)
        sys.modules[NAMESPACES_MODULE].last_capability()


def run(request: ForkRequest) -> Any:
    """The kernel-side entry point: run each cell of ``request`` in its own forked child, in turn.

    Returns a ``wire.ForkResult`` as JSON text, one ``wire.ChildResult`` per cell. The code files are
    opened and deleted before the first fork: the kernel never reads a cell, and each child reads its own.

    Every child is forked before the first result comes back, so no child's memory holds the result of another
    (the reference's, first, among them); confined, the first child alone, and the others once it has its go (it
    runs its cell as soon as it is ready). Each gets ready (its folder copied), and the cells run one at a time.
    Killed children are reaped at the end (or at the next request, those still exiting) and their folders deleted
    at the next request, so their exits (unmapping a copy of a large kernel) and the deletions overlap the next cells
    and the next child's readiness.
    """
    began = time.time()
    folder = None
    if request.after_cell:
        # the replay's cell has just run in this request: the folder as it left it is the check's "before", and
        # its size, not the one the host saw a cell ago, decides where the copies go
        folder = folder_signature(request.root)
        fits = len(request.code_files) * regular_bytes(folder) <= request.memory_bytes
        request = dataclasses.replace(request, scratch=request.memory if request.memory and fits else request.scratch)
    code_fds: list[int] = []
    try:
        for path in request.code_files:
            code_fds.append(os.open(path, os.O_RDONLY))
            os.unlink(path)
    except OSError:
        for descriptor in code_fds:
            os.close(descriptor)
        raise
    children: list[Child] = []
    results = []

    def fork_the_rest() -> None:
        """Fork a child for each cell not forked yet, one after another, then close the code files: the kernel keeps
        no way to them."""
        while len(children) < len(code_fds):
            earlier = [fd for child in children for fd in child.pipes()]
            children.append(Child(len(children), code_fds, request, earlier))
        for index, descriptor in enumerate(code_fds):
            if descriptor >= 0:
                os.close(descriptor)
                code_fds[index] = -1

    try:
        # Every child is forked before any result comes back: none is a copy of a kernel that holds another's
        # result. Confined, the first child is forked alone, and the others while it gets ready and its cell runs
        # (the fork of a large kernel takes milliseconds, which the first cell need not wait for): a confined cell
        # reaches neither the kernel's memory nor its file descriptors (the other cells' code files among them),
        # nor the other children. An unconfined cell may, and may write the kernel's working folder: every child is
        # forked, and has copied that folder, before one runs.
        if code_fds:
            children.append(Child(0, code_fds, request))
        if not request.confine:
            fork_the_rest()
        # while the children get ready, the kernel copies the folder of the one that does not copy it itself
        for child in children:
            if not child.copies_itself:
                child.copy(request.root)
        if request.confine and children:
            # its folder copied, the first child runs its cell as soon as it is ready, whatever the kernel does then:
            # a go sent only once it was ready waited for the second fork (docs/performance.md, the fourteenth stop)
            children[0].go()
            fork_the_rest()
        # then the kernel removes the last request's children, which ended while the scorer compared their results
        # and ran the replay's cell
        while _DYING:
            _DYING.pop().remove()
        if not request.confine:
            for child in children:
                child.ready()
        for child in children:
            child.start()
            results.append(child.collect())
    finally:
        for descriptor in code_fds:
            if descriptor >= 0:
                os.close(descriptor)
        # An exit unmaps a copy of the kernel (tens of milliseconds for one that loaded pandas and scikit-learn), and
        # deleting a copy of the working folder took 0.3 to 1 ms a child on ext4: the children are killed and those
        # already over reaped now, and the rest waited for and every folder deleted at the next request, while its
        # first child gets ready, so the answer goes back meanwhile
        for child in children:
            child.reap(block=False)
        _DYING.extend(children)
    wire = _BOUND["wire"]
    return _BOUND["text"](wire.ForkResult(results, folder, began).to_json())
