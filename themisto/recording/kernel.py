"""Drive one Jupyter kernel through a sequence of cells and record each as a :class:`Step`.

The notebook's code runs only inside the kernel subprocess, started in the
chosen working directory with an allowlisted environment, inside a Landlock
sandbox (see :mod:`themisto.recording.launcher`) that lets it write only
beneath that directory and its private folders. The
runtime snapshot (see :mod:`themisto.kernelside.snapshot`) rides on each cell's own
execute request as a ``user_expression``, evaluated after the cell without a
second round trip; ipykernel skips user expressions when the cell raises, so
after an error a silent execution takes it instead. Either way the user's
history and execution count are the same as in a plain run.

Faults become steps: an exception sets ``error``; a cell past the timeout is
interrupted and recorded as a ``TimeoutError`` step; a kernel that dies,
ignores the interrupt, or stops handling requests (it does not start a cell
within :data:`SILENT_KERNEL_GRACE` seconds, or ends one without a reply) is
recorded as a ``DeadKernelError`` step, restarted, and the next step is
marked ``restarted``. Where that happens after the cell finished, while its
snapshot ran (a ``__repr__`` that calls ``os._exit`` or swallows every
interrupt; the kernel writes to a file of its private folder when the snapshot
begins and ends), the step is the cell's, with its output, and says so in
``snapshot_error``. Messages that are not messages (a cell that patched
``json.dumps``) are dropped, never trusted.

The snapshot a kernel sends back is checked, not trusted: each record is
validated on arrival (types, 64-bit integers, text cleaned of lone
surrogates, lengths of names and types), a bad record is dropped and named in
the step's ``snapshot_error``, and a snapshot module the notebook broke is
installed again before the next cell.
"""

from __future__ import annotations

import contextlib
import json
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

from themisto.exceptions import InputError, KernelError, TrajectoryError
from themisto.kernelside import snapshot, wire
from themisto.recording import inject
from themisto.recording.environment import (
    allowed_environment,
    check_kernel,
    check_sandbox,
    kernel_sandbox,
    private_folders,
    sandbox_in_force,
    supervised_kernel_manager,
    undumpable,
)
from themisto.recording.options import RecordOptions
from themisto.recording.outputs import OutputCollector, cap_text, render_outputs, scrub
from themisto.trajectory import RECORDING_STOPPED_ERROR, Step, Variable, record_from_dict, state_hash, variable_json

log = logging.getLogger(__name__)

# Seconds between liveness checks while a cell is silent: a dead kernel sends nothing.
POLL_INTERVAL = 0.2
# Seconds a kernel gets to answer an interrupt before it is declared wedged and restarted.
INTERRUPT_GRACE = 5.0
KERNEL_START_TIMEOUT = 60.0
# Seconds a live kernel may take to start a request (its "busy" status), or to reply once it is idle
# again, before it counts as no longer handling requests; a sound kernel takes milliseconds.
SILENT_KERNEL_GRACE = 5.0
# The ``ename`` of a step whose kernel died or ignored the interrupt; the recorder has restarted it.
DEAD_KERNEL_ERROR = "DeadKernelError"
# Caps on a snapshot record's names (a variable's name, its type's qualified name, its size method).
MAX_NAME_CHARS = 256
MAX_TYPE_CHARS = 512
MAX_SIZE_METHOD_CHARS = 64


def check_options(options: RecordOptions) -> None:
    """Raise :class:`InputError` for what the options need of this machine and it lacks, before any kernel starts.

    A working directory, the kernel, the sandbox: the values themselves were checked when the options were
    made (:class:`RecordOptions` declares its checks).
    """
    if options.workdir is not None and not Path(options.workdir).is_dir():
        raise InputError(f"working directory {options.workdir} does not exist")
    check_kernel(options.kernel_name)
    check_sandbox(options.sandbox)


class Stopped(Exception):
    """The recording was asked to stop (Ctrl-C): the cell in progress is abandoned and no step is written."""


# --- the recorder ---------------------------------------------------------------------------


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

    @property
    def broken(self) -> bool:
        """The kernel has to be restarted: it died, ignored the interrupt or stopped handling requests."""
        return self.died or self.wedged or self.unresponsive is not None


@dataclass
class Snapshot:
    """The variables a snapshot reported, once checked."""

    variables: list[Variable]
    seconds: float = 0.0  # kernel-side time the snapshot took
    omitted: int = 0  # variables beyond the cap on their number
    error: str | None = None  # what was dropped, and why


@dataclass
class Recorder:
    """A live kernel that runs cells one at a time and returns each as a :class:`Step`.

    Use as a context manager. ``run_cell`` records; ``stopped_step`` records
    a step an earlier recording did not finish, without running it;
    ``restart`` restarts the kernel and marks the next step ``restarted``.
    Setting ``stop`` makes the cell in progress raise :class:`Stopped` within
    :data:`POLL_INTERVAL` seconds.

    While a recorder runs, the calling process is not dumpable (see
    :func:`~themisto.recording.environment.undumpable`), so the kernel cannot
    read its environment through ``/proc``.
    """

    trajectory_id: str
    workdir: Path
    options: RecordOptions = field(default_factory=RecordOptions)
    next_step: int = 0
    stop: threading.Event | None = None
    installs: tuple[str, ...] = ()  # more code run silently in every kernel this recorder starts, after its own
    also_writable: tuple[Path, ...] = ()  # folders the sandboxed kernel may write besides its working directory

    def __post_init__(self) -> None:
        self._manager: Any = None
        self._client: Any = None
        self._process: Any = None
        self._restarted = False
        self._reinstall = False  # the snapshot module failed: install it again before the next cell
        self._announce: Path | None = None  # where the kernel says a cell finished (see snapshot.announce_snapshot)
        self._resources = contextlib.ExitStack()  # what lives as long as the recorder: the private folders
        # the last snapshot received: its kernel-side generation and, by name, each variable and its
        # variable_json, so unchanged variables are neither sent, parsed nor encoded again
        self._known: tuple[int, dict[str, tuple[Variable, str]]] = (-1, {})
        # the kernel's Python and ipykernel versions, known once it has started (None where unknown)
        self.kernel_versions: dict[str, str | None] = {"python": None, "ipykernel": None}
        self.kernel_libraries: dict[str, str] = {}  # installed libraries' versions (snapshot.LIBRARIES)
        # the confinement the kernel runs in, as its provenance records it (see environment.sandbox_in_force)
        self.sandbox = sandbox_in_force(self.options.sandbox, self.options.allow_network)

    # lifecycle

    def __enter__(self) -> Recorder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def writable(self) -> list[Path]:
        """Where the sandboxed kernel may write, beyond its private folders: its working directory (and more)."""
        return [self.workdir, *self.also_writable]

    def transport(self) -> str:
        """How the kernel talks to the recorder: ``ipc`` (unix sockets; see environment.supervised_kernel_manager)."""
        return "ipc"

    def start(self) -> None:
        """Start the kernel in ``workdir`` in its sandbox and environment, and install the snapshot module."""
        if not self.workdir.is_dir():
            raise InputError(f"working directory {self.workdir} does not exist")
        check_kernel(self.options.kernel_name)
        check_sandbox(self.options.sandbox)
        self._resources.enter_context(undumpable())
        private = Path(tempfile.mkdtemp(prefix="themisto-private-"))
        self._resources.callback(shutil.rmtree, private, ignore_errors=True)
        folders = private_folders(private, self.options.isolate_home, os.environ)
        self._announce = private / "snapshot-started"
        sandbox = None
        if self.options.sandbox:
            sandbox = kernel_sandbox([*self.writable(), private], self.options.allow_network)
        self._manager = supervised_kernel_manager(
            self.options.kernel_name,
            self.options.max_memory,
            self.options.max_cpu_seconds,
            sandbox=sandbox,
            transport=self.transport(),
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
            self._resources.close()

    def restart(self) -> None:
        """Restart the kernel; the next step starts from an empty namespace and is marked ``restarted``."""
        self._client.stop_channels()
        try:
            self._manager.restart_kernel(now=True)
        except Exception as exc:
            raise KernelError(f"cannot restart kernel: {exc}") from exc
        self._connect()
        self._restarted = True

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
                raise KernelError(f"kernel {self.options.kernel_name!r} did not start: {exc}{hint}") from None
        # the kernel is the launcher's one child (see themisto.recording.launcher)
        launcher = psutil.Process(self._manager.provisioner.pid)
        children = launcher.children()
        self._process = children[0] if children else launcher
        self._known = (-1, {})  # a new kernel process has an empty description cache
        self._install()
        for install in self.installs:
            reply = self._execute(install, silent=True, timeout=KERNEL_START_TIMEOUT).reply
            if reply is None or reply["content"]["status"] != "ok":
                raise KernelError(f"kernel {self.options.kernel_name!r} did not take the code it was given to install")

    def _install(self, again: bool = False) -> None:
        """Install the snapshot module in the kernel; ``again``: after a cell broke it, and failing quietly."""
        self._reinstall = False
        install = self._execute(
            inject.snapshot_install_code(),
            silent=True,
            timeout=KERNEL_START_TIMEOUT,
            user_expressions={"versions": inject.versions_expression()},
        )
        if install.reply is not None and install.reply["content"]["status"] == "ok":
            if not again:
                self.kernel_versions, self.kernel_libraries = _kernel_versions(install.reply)
            return
        if not again:
            raise KernelError(f"kernel {self.options.kernel_name!r} is not a Python kernel the snapshot runs in")
        log.warning("%s step %d: cannot install the snapshot module again", self.trajectory_id, self.next_step)
        if install.broken:
            self.restart()

    # cells

    def run_cell(
        self, code: str, cell_id: str, original_output: str | None = None, interrupt_after: float | None = None
    ) -> Step:
        """Execute one cell and return it as a step, with the snapshot taken after it.

        ``interrupt_after`` interrupts the cell that many seconds after it starts, as its source's
        user did (a cell that finishes sooner is not interrupted).
        """
        if self._reinstall:
            self._install(again=True)
        # the snapshot rides on the cell's own request: evaluated after the cell, outside history
        execution = self._execute(
            code,
            silent=False,
            timeout=self.options.timeout,
            user_expressions={"snapshot": self._expression()},
            interrupt_after=interrupt_after,
        )
        restarted, self._restarted = self._restarted, False
        error, outputs = _error_and_outputs(execution, self.options.timeout)
        memory = None
        snapshot_fault = _snapshot_fault(execution, self.options.timeout)
        if snapshot_fault is not None:  # the cell ran; its snapshot (a repr) died, hung or overran
            execution.elapsed = execution.cell_seconds or 0.0
            log.warning("%s step %d: %s", self.trajectory_id, self.next_step, snapshot_fault)
        if execution.broken:
            taken = Snapshot([], error=snapshot_fault)
            self._known = (-1, {})
            self.restart()
        else:
            found = self._snapshot_result(execution)
            if found is None:  # ipykernel skips user_expressions when the cell raised or was interrupted
                taken = self._snapshot()
            else:
                taken = found
                if snapshot_fault is None:
                    execution.elapsed = max(execution.elapsed - taken.seconds, 0.0)
                else:  # interrupted in time: what the snapshot kept, and why it is incomplete
                    taken.error = cap_text(f"{snapshot_fault}; {taken.error or 'interrupted'}", 300)[0]
            memory = self._memory()
        variables = taken.variables
        text, truncated, length = execution.collector.render(self.options.max_output_chars, outputs)
        step = Step(
            trajectory_id=self.trajectory_id,
            step=self.next_step,
            cell_id=cell_id,
            code=snapshot.clean_text(code),
            output=text,
            error=error,
            execution_time=round(execution.elapsed, 6),
            memory_bytes=memory,
            runtime=variables,
            state_hash=state_hash(variables, self._variable_texts(variables)),
            restarted=restarted,
            outputs=outputs,
            original_output=None if original_output is None else snapshot.clean_text(original_output),
            output_truncated=truncated,
            output_length=length,
            snapshot_error=taken.error,
            runtime_omitted=taken.omitted,
            interrupt_after=interrupt_after,
        )
        self.next_step += 1
        return step

    def stopped_step(self, code: str, cell_id: str, original_output: str | None = None) -> Step:
        """The step an earlier recording was running when it stopped, recorded without running it again.

        Whatever the cell did then (kill the recorder, fill the disk) is not
        repeated. Its state afterwards is unknown, so the kernel is restarted
        and the next step is marked ``restarted``, as after a kernel death.
        """
        error = {
            "ename": RECORDING_STOPPED_ERROR,
            "evalue": "the recording stopped while this cell ran (the recorder was killed or could not write);"
            " it was not run again and the kernel was restarted",
        }
        outputs = [{"output_type": "error", "traceback": [], **error}]
        step = Step(
            trajectory_id=self.trajectory_id,
            step=self.next_step,
            cell_id=cell_id,
            code=snapshot.clean_text(code),
            output=render_outputs(outputs),
            error=error,
            execution_time=0.0,
            memory_bytes=None,
            runtime=[],
            state_hash=state_hash([]),
            restarted=self._restarted,
            outputs=outputs,
            original_output=None if original_output is None else snapshot.clean_text(original_output),
        )
        self.skip_stopped()
        return step

    def skip_stopped(self) -> None:
        """Pass a recorded :data:`RECORDING_STOPPED_ERROR` step without running it: restart, as it was recorded."""
        self._restarted = False
        self.restart()
        self.next_step += 1

    def replay(self, code: str, interrupt_after: float | None = None) -> None:
        """Re-run a cell only to rebuild kernel state: no step, no snapshot (execution-checked scoring)."""
        self._restarted = False
        execution = self._execute(code, silent=False, timeout=self.options.timeout, interrupt_after=interrupt_after)
        if execution.broken:
            self.restart()
        self.next_step += 1

    def _expression(self) -> str:
        return inject.snapshot_expression(self.snapshot_request())

    # what execution-checked scoring composes (themisto.evaluation.exec.session)

    def snapshot_request(self) -> wire.SnapshotRequest:
        """The snapshot this recorder's options ask for, naming the last snapshot it received."""
        return wire.SnapshotRequest(
            self.options.max_repr_chars,
            self.options.repr_timeout,
            self.options.max_variables,
            self._known[0],
            None if self._announce is None else str(self._announce),
        )

    def known_variables(self) -> dict[str, Variable] | None:
        """The namespace as the last snapshot received described it (the state before the next cell); None: unknown."""
        generation, entries = self._known
        return None if generation < 0 else {name: entry[0] for name, entry in entries.items()}

    def take_snapshot(self) -> Snapshot:
        """A snapshot of the namespace now, in a silent request of its own."""
        return self._snapshot()

    def request(self, user_expressions: dict[str, str], timeout: float) -> Execution:
        """One silent request that runs no code and evaluates ``user_expressions``."""
        return self._execute("", silent=True, timeout=timeout, user_expressions=user_expressions)

    def _snapshot(self) -> Snapshot:
        """Take the snapshot in a silent execution of its own (after a cell that raised)."""
        execution = self._execute(
            "", silent=True, timeout=self.options.timeout, user_expressions={"snapshot": self._expression()}
        )
        if execution.broken:
            self.restart()
            return Snapshot([], error="the kernel stopped while taking the snapshot")
        return self._snapshot_result(execution) or Snapshot([], error="the snapshot was not evaluated")

    def _snapshot_result(self, execution: Execution) -> Snapshot | None:
        """The checked snapshot in ``execution``'s reply; None if it was not evaluated."""
        result = (execution.reply or {}).get("content", {}).get("user_expressions", {}).get("snapshot")
        if result is None:
            return None
        if not isinstance(result, dict) or result.get("status") != "ok":
            # a cell that tampers with the kernel's modules gets here; the step is still recorded
            evalue = result.get("evalue") if isinstance(result, dict) else result
            return self._failed_snapshot(f"snapshot failed: {evalue}")
        try:
            payload = json.loads(result["data"]["text/plain"])
            generation, records = int(payload["generation"]), payload["variables"]
            seconds, omitted = float(payload["seconds"]), int(payload.get("omitted", 0))
            if not isinstance(records, list) or omitted < 0:
                raise TypeError("variables is not a list")
        except (AttributeError, KeyError, TypeError, ValueError, OverflowError) as exc:
            # the notebook's code can replace the kernel-side snapshot function, so its answer is untrusted
            return self._failed_snapshot(f"malformed snapshot: {exc!r}")
        entries, problems = self._checked_entries(records[: self.options.max_variables])
        omitted += max(0, len(records) - self.options.max_variables)
        self._known = (generation, {entry[0].name: entry for entry in entries})
        if problems:
            log.warning("%s step %d: snapshot records dropped: %s", self.trajectory_id, self.next_step, problems[0])
            self._known = (-1, self._known[1])  # the next snapshot comes in full
        error = None
        if problems:
            error = cap_text(f"{len(problems)} variable record(s) dropped: " + "; ".join(problems), 300)[0]
        return Snapshot([entry[0] for entry in entries], max(seconds, 0.0), omitted, error)

    def _checked_entries(self, records: list[Any]) -> tuple[list[tuple[Variable, str]], list[str]]:
        """Each valid record as a variable and its variable_json; the reasons the others were dropped."""
        previous = self._known[1]
        entries: list[tuple[Variable, str]] = []
        problems: list[str] = []
        names: set[str] = set()
        for index, record in enumerate(records):
            try:
                if isinstance(record, dict) and record.keys() == {"name"}:
                    # unchanged since the last snapshot received (see snapshot.take)
                    entry = previous[record["name"]]
                else:
                    entry = _known_entry(self._checked_record(record))
            except (KeyError, TypeError, TrajectoryError) as exc:
                problems.append(f"record {index}: {snapshot.clean_text(str(exc))[:120]}")
                continue
            if entry[0].name in names:
                problems.append(f"record {index}: a second variable named {entry[0].name[:40]!r}")
                continue
            names.add(entry[0].name)
            entries.append(entry)
        return entries, problems

    def _checked_record(self, record: Any) -> Variable:
        """A snapshot record as a :class:`Variable`, or :class:`TrajectoryError` naming what is wrong."""
        variable = record_from_dict(Variable, scrub(record), "the record")
        limits = (("name", MAX_NAME_CHARS), ("type", MAX_TYPE_CHARS), ("size_method", MAX_SIZE_METHOD_CHARS))
        for name, limit in limits:
            value = getattr(variable, name)
            if value is not None and len(value) > limit:
                raise TrajectoryError(f"its {name} is longer than {limit} characters")
        if variable.description is not None and len(variable.description) > snapshot.DESCRIPTION_CHARS:
            variable.description = variable.description[: snapshot.DESCRIPTION_CHARS]
        if len(variable.repr) > self.options.max_repr_chars:
            variable.repr, variable.repr_truncated = variable.repr[: self.options.max_repr_chars], True
        return variable

    def _failed_snapshot(self, reason: str) -> Snapshot:
        """A snapshot the kernel could not take or sent malformed: empty, saying why, and reinstalled next time."""
        reason = cap_text(snapshot.clean_text(reason), 300)[0]
        log.warning("%s step %d: %s", self.trajectory_id, self.next_step, reason)
        self._known = (-1, {})  # the next snapshot comes in full
        self._reinstall = True
        return Snapshot([], error=reason)

    def _variable_texts(self, variables: list[Variable]) -> list[str]:
        """Each variable's variable_json, taken from the last snapshot where it is that very object."""
        known = self._known[1]
        texts = []
        for variable in variables:
            entry = known.get(variable.name)
            texts.append(entry[1] if entry is not None and entry[0] is variable else variable_json(variable))
        return texts

    def _memory(self) -> int | None:
        import psutil

        try:
            return int(self._process.memory_info().rss)
        except psutil.Error:
            return None

    def _execute(
        self,
        code: str,
        *,
        silent: bool,
        timeout: float,
        user_expressions: dict[str, str] | None = None,
        interrupt_after: float | None = None,
    ) -> Execution:
        """Send one execute request and wait for its reply and its outputs, within ``timeout``.

        A kernel that does not start the request (no ``busy`` status) within
        :data:`SILENT_KERNEL_GRACE` seconds, or ends it (``idle``) without a
        reply for as long, is marked ``unresponsive``; ``stop`` raises :class:`Stopped`.

        ``interrupt_after`` seconds after the request (if it is still running) the kernel is
        interrupted as a user would: the cell ends in a KeyboardInterrupt, not a timeout.
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
        while execution.reply is None or not idle:
            if self.stop is not None and self.stop.is_set():
                raise Stopped
            now = time.monotonic()
            if interrupt_at is not None and execution.reply is None and now >= interrupt_at:
                self._manager.interrupt_kernel()
                interrupt_at = None
            if silent_after is not None and now > silent_after and self._manager.is_alive():
                execution.unresponsive = (
                    f"did not start the cell within {SILENT_KERNEL_GRACE:g} s"
                    if not idle
                    else f"finished the cell without a reply within {SILENT_KERNEL_GRACE:g} s"
                )
                break
            remaining = deadline - now
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
                    execution.reply = msg
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
        if self._announce is None:
            return None
        try:
            request, _, when = self._announce.read_text(encoding="utf-8").partition(" ")
            if request != msg_id or when == "done":
                return None
            return max(float(when) - wall_started, 0.0)
        except (OSError, ValueError):
            return None


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


def _snapshot_fault(execution: Execution, timeout: float) -> str | None:
    """Why the snapshot of a cell that ran fine is missing or incomplete; None if it did not fail that way."""
    if execution.cell_seconds is None:
        return None
    if execution.died:
        return f"the kernel died while taking the snapshot{_exit_status(execution.exit_code)} and was restarted"
    if execution.wedged:
        return f"the snapshot did not finish within {timeout:g} s nor stop when interrupted; the kernel was restarted"
    if execution.unresponsive is not None:
        return f"the kernel {execution.unresponsive} while taking the snapshot and was restarted"
    if execution.timed_out:
        return f"the snapshot did not finish within {timeout:g} s and was interrupted"
    return None


def _kernel_versions(reply: dict[str, Any]) -> tuple[dict[str, str | None], dict[str, str]]:
    """The versions :func:`snapshot.versions` reported on the install request (None where unknown), and the
    libraries' versions."""
    result = reply["content"].get("user_expressions", {}).get("versions", {})
    try:
        reported = json.loads(result["data"]["text/plain"])
        found = {name: str(reported[name]) if reported.get(name) else None for name in ("python", "ipykernel")}
        libraries = reported.get("libraries")
        named = libraries.items() if isinstance(libraries, dict) else ()
        return found, {str(name)[:40]: str(version)[:40] for name, version in named}
    except (AttributeError, KeyError, TypeError, ValueError):  # a kernel that is not ipykernel may answer otherwise
        return {"python": None, "ipykernel": None}, {}


def _known_entry(variable: Variable) -> tuple[Variable, str]:
    """A variable and its variable_json."""
    return variable, variable_json(variable)


def _error_and_outputs(execution: Execution, timeout: float) -> tuple[dict[str, str] | None, list[dict[str, Any]]]:
    """The step's ``error`` and raw outputs; the recorder's own faults are added as error outputs."""
    outputs = execution.collector.outputs
    if execution.cell_seconds is not None:  # the cell finished without an error; the snapshot's faults are its own
        return None, outputs
    if execution.broken:
        error = {"ename": DEAD_KERNEL_ERROR, "evalue": _death_message(execution, timeout)}
    elif execution.timed_out:
        error = {"ename": "TimeoutError", "evalue": f"cell did not finish within {timeout:g} s"}
        # the KeyboardInterrupt our interrupt raised is the recorder's doing, not the cell's
        outputs = [o for o in outputs if not (o["output_type"] == "error" and o["ename"] == "KeyboardInterrupt")]
    else:
        assert execution.reply is not None  # neither died, wedged nor timed out: the reply came
        content = execution.reply["content"]
        if content["status"] != "error":
            return None, outputs
        return scrub({"ename": str(content.get("ename", "")), "evalue": str(content.get("evalue", ""))}), outputs
    return error, outputs + [{"output_type": "error", "traceback": [], **error}]


def _death_message(execution: Execution, timeout: float) -> str:
    if execution.unresponsive is not None:
        return f"the kernel {execution.unresponsive} and was restarted"
    if execution.wedged:
        return f"the kernel ignored the interrupt after {timeout:g} s and was restarted"
    return f"the kernel died while running this cell{_exit_status(execution.exit_code)} and was restarted"


def _exit_status(code: int | None) -> str:
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
