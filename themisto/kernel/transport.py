"""One kernel process and its channels: start, restart and close it, and send it one execute request at a time.

The notebook's code runs only inside the kernel subprocess, started in the
chosen working directory with an allowlisted environment, inside a Landlock
sandbox (see :mod:`themisto.kernel.launcher`) that lets it write only
beneath that directory and its private folders.

Whatever the kernel does, a request ends in an :class:`Execution`: a request
past its timeout is interrupted; a kernel that dies, ignores the interrupt, or
stops handling requests (it does not start a request within
:data:`SILENT_KERNEL_GRACE` seconds, or ends one, by its idle status or its
snapshot's end, without a reply for as long) is marked so,
for the caller to restart it. Where that happens after the cell finished,
while its snapshot ran (the kernel writes to a file of its private folder when
the snapshot begins and ends), the execution says how long the cell ran.
Messages that are not messages (a cell that patched ``json.dumps``) are
dropped, never trusted.
"""

from __future__ import annotations

import contextlib
import logging
import os
import shutil
import signal
import subprocess
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themisto.exceptions import InputError, KernelError, KernelTimeoutError
from themisto.kernel.environment import (
    KernelSandbox,
    allowed_environment,
    check_kernel,
    private_folders,
    supervised_kernel_manager,
    undumpable,
)
from themisto.kernel.inside import snapshot, wire
from themisto.kernel.inside.namespaces import INIT_NAME
from themisto.kernel.options import KernelOptions
from themisto.kernel.outputs import OutputCollector

log = logging.getLogger(__name__)

# Seconds between liveness checks while a cell is silent: a dead kernel sends nothing.
POLL_INTERVAL = 0.2
# Seconds a kernel gets to answer an interrupt before it is declared wedged and restarted.
INTERRUPT_GRACE = 5.0
KERNEL_START_TIMEOUT = 60.0
# Seconds a live kernel may take to start a request (its "busy" status), or to reply once it is idle
# again, before it counts as no longer handling requests; a sound kernel takes milliseconds.
SILENT_KERNEL_GRACE = 5.0
# the unit of the kernel's /proc/PID/statm (memory)
PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


class Stopped(Exception):
    """The recording was asked to stop (Ctrl-C): the cell in progress is abandoned and no step is written."""


@dataclass
class Execution:
    """What one execute request produced."""

    collector: OutputCollector
    reply: dict[str, Any] | None = None
    elapsed: float = 0.0
    timed_out: bool = False
    died: bool = False  # the kernel process exited
    wedged: bool = False  # the kernel ignored the interrupt
    unresponsive: str | None = None  # why a live kernel counts as no longer handling requests
    exit_code: int | None = None
    # seconds from the request to the kernel's word that the cell finished and its snapshot began (see
    # snapshot.announce_snapshot), read when the request failed; None: the cell had not finished. A death,
    # hang or timeout after that word is the snapshot's fault, not the cell's.
    cell_seconds: float | None = None
    timed_out_at: float | None = None  # seconds from the request to the recorder's interrupt for --timeout
    # the cell and its snapshot ended and the request's further user expressions began (``more_seconds``)
    more_started: bool = False
    replied_at: float | None = None  # the wall clock (time.time) when the reply came

    @property
    def user_expressions(self) -> dict[str, Any]:
        """The answers to the request's user expressions, by name (none where no reply came)."""
        answers: dict[str, Any] = (self.reply or {}).get("content", {}).get("user_expressions", {})
        return answers

    @property
    def broken(self) -> bool:
        """The kernel has to be restarted: it died, ignored the interrupt or stopped handling requests."""
        return self.died or self.wedged or self.unresponsive is not None


@dataclass
class KernelSession:
    """One kernel process under the launcher, the channels to it, and the execute requests sent over them.

    Setting ``stop`` makes a start or a request in progress raise :class:`Stopped`
    within :data:`POLL_INTERVAL` seconds. While a session runs, the calling process
    is not dumpable (see :func:`~themisto.kernel.environment.undumpable`), so
    the kernel cannot read its environment through ``/proc``.
    """

    workdir: Path
    options: KernelOptions
    writable: tuple[Path, ...]  # where the sandboxed kernel may write, beyond its private folders
    sandbox: KernelSandbox  # how it is confined (checked when it was made)
    transport: str = "ipc"  # how the kernel's channels run (see environment.supervised_kernel_manager)
    stop: threading.Event | None = None
    # where the kernel says a cell finished (see snapshot.announce_snapshot); None until the kernel starts
    announce: Path | None = field(default=None, init=False)

    def __post_init__(self) -> None:
        self._manager: Any = None
        self._client: Any = None
        self._process: Any = None
        self._statm = -1  # a descriptor of the kernel process's /proc/PID/statm, read for its memory at each step
        self._resources = contextlib.ExitStack()  # what lives as long as the session: the private folders

    def start(self) -> None:
        """Start the kernel in ``workdir`` in its sandbox and environment, and wait until it answers."""
        if not self.workdir.is_dir():
            raise InputError(f"working directory {self.workdir} does not exist")
        check_kernel(self.options.kernel_name)
        self._resources.enter_context(undumpable())
        private = Path(tempfile.mkdtemp(prefix="themisto-private-"))
        self._resources.callback(shutil.rmtree, private, ignore_errors=True)
        folders = private_folders(private, self.options.isolate_home, os.environ)
        self.announce = private / "snapshot-started"
        self._manager = supervised_kernel_manager(
            self.options.kernel_name,
            self.options.max_memory,
            self.options.max_cpu_seconds,
            sandbox=self.sandbox.domain([*self.writable, private]),
            transport=self.transport,
        )
        try:
            self._manager.start_kernel(
                env=allowed_environment(os.environ, self.options.pass_env, folders),
                cwd=str(self.workdir),
                # the kernel's own fd output must not flood the recorder's terminal
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except Exception as exc:
            raise KernelError(f"cannot start kernel {self.options.kernel_name!r}: {exc}") from exc
        self._connect()

    def close(self) -> None:
        """Shut the kernel down at once, with every process it started."""
        try:
            if self._client is not None:
                self._client.stop_channels()
                self._client = None
            if self._manager is not None:
                self._manager.shutdown_kernel(now=True)
                self._manager = None
        finally:
            self._close_statm()
            self._resources.close()

    def _close_statm(self) -> None:
        if self._statm >= 0:
            os.close(self._statm)
            self._statm = -1

    def restart(self) -> None:
        """Restart the kernel process and wait until the new one answers."""
        self._client.stop_channels()
        try:
            self._manager.restart_kernel(now=True)
        except Exception as exc:
            raise KernelError(f"cannot restart kernel: {exc}") from exc
        self._connect()

    def _connect(self) -> None:
        import psutil

        self._client = self._manager.blocking_client()
        self._client.start_channels()
        deadline = time.monotonic() + KERNEL_START_TIMEOUT
        while True:  # in slices of a second, so a stop request is honoured while a kernel starts
            try:
                self._client.wait_for_ready(timeout=max(min(1.0, deadline - time.monotonic()), 0.1))
                break
            except RuntimeError as exc:
                if self.stop is not None and self.stop.is_set():
                    raise Stopped from None
                if time.monotonic() < deadline and self._manager.is_alive():
                    continue
                hint = ""
                if self.options.max_memory is not None:
                    hint = f" (is the memory limit of {self.options.max_memory} bytes too small?)"
                # alive past the deadline: it is too slow, not dead
                error = KernelTimeoutError if self._manager.is_alive() else KernelError
                raise error(f"kernel {self.options.kernel_name!r} did not start: {exc}{hint}") from None
        # the kernel is the launcher's first child, or in a box that of the box's init (see themisto.kernel.launcher),
        # seen by its pid on the host, not the one it has in its box
        self._process = psutil.Process(self._manager.provisioner.pid)
        while children := self._process.children():
            self._process = min(children, key=lambda child: child.pid)
            if self._process.name() != INIT_NAME:
                break
        self._close_statm()
        with contextlib.suppress(OSError):  # no /proc: memory() says None
            # the descriptor names this process alone: once it ends, a read fails, whoever has its pid then
            self._statm = os.open(f"/proc/{self._process.pid}/statm", os.O_RDONLY)

    def memory(self) -> int | None:
        """The kernel process's resident memory in bytes; None where it cannot be read.

        Read from the kernel's ``statm`` through a descriptor kept open: psutil opens and parses the file at each
        call, 80 us of every recorded step (as much as reading its snapshot).
        """
        try:
            fields = os.pread(self._statm, 256, 0).split()
            return int(fields[1]) * PAGE_SIZE  # resident pages
        except (OSError, IndexError, ValueError):  # the process ended (ESRCH), or no /proc
            return None

    def execute(
        self,
        code: str,
        *,
        silent: bool,
        timeout: float,
        user_expressions: dict[str, str] | None = None,
        interrupt_after: float | None = None,
        until_idle: bool = True,
        more_seconds: float | None = None,
    ) -> Execution:
        """Send one execute request and wait for its reply and its outputs, within ``timeout``.

        A kernel that does not start the request (no ``busy`` status) within
        :data:`SILENT_KERNEL_GRACE` seconds, or ends it (``idle``, or the end of its snapshot in the file
        :func:`snapshot.announce_snapshot` writes) without a reply for as long, is marked ``unresponsive``; ``stop`` raises :class:`Stopped`.

        ``interrupt_after`` seconds after the request (if it is still running) the kernel is
        interrupted as a user would: the cell ends in a KeyboardInterrupt, not a timeout.

        ``until_idle``: read the request's outputs until the kernel's idle status, which follows them on iopub;
        without it (a request whose outputs belong to no step) the request ends at its reply, and the kernel's
        flushes and idle status after the reply overlap the caller's next work (a later request's own messages
        are told from them by their parent).

        ``more_seconds``: the user expressions after the snapshot (a forked run that rides on the cell's request)
        may run this long. ``timeout`` still bounds the cell and its snapshot: once the snapshot's end is in the
        kernel's file (read as the request runs, and again before the timeout's interrupt), the limit becomes
        ``more_seconds`` from then, and the execution says so (``more_started``).
        """
        import zmq

        client = self._client
        execution = Execution(collector=OutputCollector(self.options.max_raw_output_chars))
        msg_id = client.execute(
            snapshot.clean_text(code),  # a lone surrogate cannot be sent; the step records the same cleaned code
            silent=silent,
            store_history=not silent,
            user_expressions=user_expressions or {},
            allow_stdin=False,  # input() raises instead of waiting forever for a front end
            stop_on_error=False,
        )
        poller = zmq.Poller()
        poller.register(client.shell_channel.socket, zmq.POLLIN)
        poller.register(client.iopub_channel.socket, zmq.POLLIN)
        started, wall_started = time.monotonic(), time.time()
        deadline = started + timeout
        # until the kernel says it is busy with the request, or, once idle, until its reply: the grace period
        silent_after: float | None = started + SILENT_KERNEL_GRACE
        interrupt_at = started + interrupt_after if interrupt_after is not None else None
        idle = False
        finished = False  # the kernel's file says the cell and its snapshot ended: only the reply is left
        look_at = started  # when to read that file next
        while execution.reply is None or (until_idle and not idle):
            if self.stop is not None and self.stop.is_set():
                raise Stopped
            now = time.monotonic()
            if interrupt_at is not None and execution.reply is None and now >= interrupt_at:
                self._manager.interrupt_kernel()
                interrupt_at = None
            if execution.reply is None and silent_after is None and now >= look_at:
                # a reply its packer garbled or never sent (a cell that broke the kernel's messages) is waited
                # for the grace, not the timeout
                look_at = now + POLL_INTERVAL
                if self._announced(msg_id) == "done":
                    if more_seconds is None:
                        finished, silent_after = True, now + SILENT_KERNEL_GRACE
                    elif not execution.more_started:
                        # the file says nothing more until the reply: the rest is waited for up to its own limit
                        execution.more_started, deadline = True, now + more_seconds
            if silent_after is not None and now > silent_after and self._manager.is_alive():
                execution.unresponsive = (
                    f"finished the cell without a reply within {SILENT_KERNEL_GRACE:g} s"
                    if idle or finished
                    else f"did not start the cell within {SILENT_KERNEL_GRACE:g} s"
                )
                break
            remaining = deadline - now
            if remaining <= 0 and more_seconds is not None and not execution.more_started:
                if self._announced(msg_id) == "done":  # the snapshot ended since the file was last read
                    execution.more_started, deadline = True, now + more_seconds
                    continue
            if remaining <= 0:
                if execution.timed_out or execution.reply is not None:
                    execution.wedged = execution.reply is None
                    break
                execution.timed_out, execution.timed_out_at = True, now - started
                self._manager.interrupt_kernel()
                deadline = time.monotonic() + INTERRUPT_GRACE
                continue
            wait = min(remaining, POLL_INTERVAL)
            if interrupt_at is not None:  # wake up in time for the user's interrupt
                wait = min(wait, max(interrupt_at - time.monotonic(), 0.001))
            ready = dict(poller.poll(int(wait * 1000)))
            if not ready:
                if not self._manager.is_alive():
                    execution.died = True
                    execution.exit_code = self._manager.provisioner.process.returncode
                    break
                continue
            if client.shell_channel.socket in ready:
                msg = _message(client.shell_channel)
                if msg is not None and msg["parent_header"].get("msg_id") == msg_id:
                    execution.reply, execution.replied_at = msg, time.time()
                    execution.elapsed = time.monotonic() - started
                    silent_after = None
            if client.iopub_channel.socket in ready:
                msg = _message(client.iopub_channel)
                if msg is None or msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "status":
                    idle = msg["content"]["execution_state"] == "idle"
                    if execution.reply is None:
                        silent_after = time.monotonic() + SILENT_KERNEL_GRACE if idle else None
                else:
                    execution.collector.add(msg)
        if execution.reply is None:
            execution.elapsed = time.monotonic() - started
        if more_seconds is not None and not execution.more_started and execution.reply is None:
            # a kernel that ended within a poll of the snapshot's end ended after the cell
            execution.more_started = self._announced(msg_id) == "done"
        if execution.timed_out or execution.broken:
            seconds = self._cell_seconds(msg_id, wall_started)
            # a snapshot that began only after the timeout's interrupt follows a cell that overran
            if seconds is not None and (execution.timed_out_at is None or seconds < execution.timed_out_at):
                execution.cell_seconds = seconds
        return execution

    def _cell_seconds(self, msg_id: str, wall_started: float) -> float | None:
        """How long the cell of request ``msg_id`` ran, if its snapshot began and did not finish; else None.

        A snapshot that finished (the file says ``done``) leaves what failed afterwards to the kernel.
        """
        when = self._announced(msg_id)
        if when is None or when == "done":
            return None
        try:
            return max(float(when) - wall_started, 0.0)
        except ValueError:
            return None

    def _announced(self, msg_id: str) -> str | None:
        """What the kernel's file says of request ``msg_id``: the time its snapshot began, or ``done``; None:
        nothing (see snapshot.announce_snapshot)."""
        if self.announce is None:
            return None
        try:
            record = wire.announced(self.announce.read_bytes())
        except OSError:
            return None
        return record[1] if record is not None and record[0] == msg_id else None


def _message(channel: Any) -> dict[str, Any] | None:
    """The next message of a channel; None for one that is not a message (a cell that patched ``json.dumps``
    makes the kernel send ``{"forged": 1}`` for each), which the recorder then never waits on."""
    try:
        msg = channel.get_msg(timeout=0)
        if isinstance(msg, dict) and isinstance(msg.get("parent_header"), dict) and isinstance(msg["msg_type"], str):
            return msg
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        log.debug("a message that is not one: %r", exc)
    return None


def exit_status(code: int | None) -> str:
    """`` (exit code N)``, or `` (killed by SIGNAME)`` for a process a signal ended (a negative code)."""
    if code is None:
        return ""
    if code >= 0:
        return f" (exit code {code})"
    try:
        name = signal.Signals(-code).name
    except ValueError:
        return f" (killed by signal {-code})"
    # SIGXCPU comes only from RLIMIT_CPU, so say which limit it was
    return f" (killed by {name}: CPU time limit reached)" if name == "SIGXCPU" else f" (killed by {name})"
