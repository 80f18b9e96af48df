"""Drive one Jupyter kernel through a sequence of cells and record each as a :class:`Step`.

The notebook's code runs only inside the kernel subprocess, started in the
chosen working directory with credentials removed from its environment. The
runtime snapshot (see :mod:`themisto.recording.snapshot`) rides on each cell's own
execute request as a ``user_expression``, evaluated after the cell without a
second round trip; ipykernel skips user expressions when the cell raises, so
after an error a silent execution takes it instead. Either way the user's
history and execution count are the same as in a plain run.

Faults become steps: an exception sets ``error``; a cell past the timeout is
interrupted and recorded as a ``TimeoutError`` step; a kernel that dies (or
ignores the interrupt) is recorded as a ``DeadKernelError`` step, restarted,
and the next step is marked ``restarted``.
"""

from __future__ import annotations

import json
import logging
import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themisto.exceptions import InputError, KernelError
from themisto.recording import snapshot
from themisto.recording.environment import check_kernel, kernel_environment, limited_kernel_manager
from themisto.recording.options import RecordOptions
from themisto.recording.outputs import OutputCollector, cap_text, render_outputs, scrub
from themisto.recording.sources import compile_skip_pattern
from themisto.trajectory import Step, Variable, state_hash, variable_json

log = logging.getLogger(__name__)

# Seconds between liveness checks while a cell is silent: a dead kernel sends nothing.
POLL_INTERVAL = 0.2
# Seconds a kernel gets to answer an interrupt before it is declared wedged and restarted.
INTERRUPT_GRACE = 5.0
KERNEL_START_TIMEOUT = 60.0
# The ``ename`` of a step whose kernel died or ignored the interrupt; the recorder has restarted it.
DEAD_KERNEL_ERROR = "DeadKernelError"


def check_options(options: RecordOptions) -> None:
    """Raise :class:`InputError` for a missing working directory or kernel, before any kernel starts."""
    if options.workdir is not None and not Path(options.workdir).is_dir():
        raise InputError(f"working directory {options.workdir} does not exist")
    compile_skip_pattern(options.skip_pattern)
    check_kernel(options.kernel_name)


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
    exit_code: int | None = None


@dataclass
class Recorder:
    """A live kernel that runs cells one at a time and returns each as a :class:`Step`.

    Use as a context manager. ``run_cell`` records; ``replay`` re-runs an
    already recorded step to rebuild state (``--resume``); ``restart`` restarts
    the kernel and marks the next step ``restarted``.
    """

    trajectory_id: str
    workdir: Path
    options: RecordOptions = field(default_factory=RecordOptions)
    next_step: int = 0

    def __post_init__(self) -> None:
        self._manager: Any = None
        self._client: Any = None
        self._process: Any = None
        self._restarted = False
        # the last snapshot received: its kernel-side generation and, by name, each variable and its
        # variable_json, so unchanged variables are neither sent, parsed nor encoded again
        self._known: tuple[int, dict[str, tuple[Variable, str]]] = (-1, {})
        # the kernel's Python and ipykernel versions, known once it has started (None where unknown)
        self.kernel_versions: dict[str, str | None] = {"python": None, "ipykernel": None}

    # lifecycle

    def __enter__(self) -> Recorder:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def start(self) -> None:
        """Start the kernel in ``workdir`` with credentials removed and install the snapshot module."""
        if not self.workdir.is_dir():
            raise InputError(f"working directory {self.workdir} does not exist")
        check_kernel(self.options.kernel_name)
        self._manager = limited_kernel_manager(
            self.options.kernel_name, self.options.max_memory, self.options.max_cpu_seconds
        )
        try:
            self._manager.start_kernel(
                env=kernel_environment(os.environ),
                cwd=str(self.workdir),
                # the kernel's own fd output must not flood the recorder's terminal
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        except Exception as exc:
            raise KernelError(f"cannot start kernel {self.options.kernel_name!r}: {exc}") from exc
        self._connect()

    def close(self) -> None:
        """Shut the kernel down at once."""
        if self._client is not None:
            self._client.stop_channels()
            self._client = None
        if self._manager is not None:
            self._manager.shutdown_kernel(now=True)
            self._manager = None

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
        try:
            self._client.wait_for_ready(timeout=KERNEL_START_TIMEOUT)
        except RuntimeError as exc:
            hint = ""
            if self.options.max_memory is not None:
                hint = f" (is the memory limit of {self.options.max_memory} bytes too small?)"
            raise KernelError(f"kernel {self.options.kernel_name!r} did not start: {exc}{hint}") from None
        self._process = psutil.Process(self._manager.provisioner.pid)
        self._known = (-1, {})  # a new kernel process has an empty description cache
        install = self._execute(
            snapshot.install_code(),
            silent=True,
            timeout=KERNEL_START_TIMEOUT,
            user_expressions={"versions": snapshot.versions_expression()},
        )
        if install.reply is None or install.reply["content"]["status"] != "ok":
            raise KernelError(f"kernel {self.options.kernel_name!r} is not a Python kernel the snapshot runs in")
        self.kernel_versions = _kernel_versions(install.reply)

    # cells

    def run_cell(
        self, code: str, cell_id: str, original_output: str | None = None, interrupt_after: float | None = None
    ) -> Step:
        """Execute one cell and return it as a step, with the snapshot taken after it.

        ``interrupt_after`` interrupts the cell that many seconds after it starts, as its source's
        user did (a cell that finishes sooner is not interrupted).
        """
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
        if execution.died or execution.wedged:
            variables, memory = [], None
            self.restart()
        else:
            taken = self._snapshot_result(execution)
            if taken is None:  # ipykernel skips user_expressions when the cell raised or was interrupted
                taken = self._snapshot()
            else:
                execution.elapsed = max(execution.elapsed - taken[1], 0.0)
            variables, memory = taken[0], self._memory()
        full_text = render_outputs(outputs)
        collector = execution.collector
        length = len(full_text) + collector.dropped_chars - collector.dropped_trailing_newlines
        text, truncated = cap_text(full_text, self.options.max_output_chars, length)
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
            interrupt_after=interrupt_after,
        )
        self.next_step += 1
        return step

    def replay(self, code: str, interrupt_after: float | None = None) -> None:
        """Re-run an already recorded step to rebuild kernel state, producing no step."""
        self._restarted = False  # a restart before this step is already on its recorded line
        execution = self._execute(code, silent=False, timeout=self.options.timeout, interrupt_after=interrupt_after)
        if execution.died or execution.wedged:
            self.restart()  # as in the original run, the next step is marked restarted
        self.next_step += 1

    def _expression(self) -> str:
        return snapshot.snapshot_expression(self.options.max_repr_chars, self.options.repr_timeout, self._known[0])

    def _snapshot(self) -> tuple[list[Variable], float]:
        """Take the snapshot in a silent execution of its own (after a cell that raised)."""
        execution = self._execute(
            "", silent=True, timeout=self.options.timeout, user_expressions={"snapshot": self._expression()}
        )
        if execution.died or execution.wedged:
            self.restart()
            return [], 0.0
        return self._snapshot_result(execution) or ([], 0.0)

    def _snapshot_result(self, execution: Execution) -> tuple[list[Variable], float] | None:
        """The variables and kernel-side seconds of the snapshot in ``execution``'s reply; None if not evaluated."""
        result = (execution.reply or {}).get("content", {}).get("user_expressions", {}).get("snapshot")
        if result is None:
            return None
        if result.get("status") != "ok":
            # only a cell that tampers with the kernel's modules gets here; the step is still recorded
            log.warning("%s step %d: snapshot failed: %s", self.trajectory_id, self.next_step, result.get("evalue"))
            self._known = (-1, {})
            return [], 0.0
        try:
            payload = json.loads(result["data"]["text/plain"])
            previous = self._known[1]
            # a record holding only a name is unchanged since the last snapshot received (see snapshot.take)
            entries = [previous[r["name"]] if r.keys() == {"name"} else _known_entry(r) for r in payload["variables"]]
            self._known = (int(payload["generation"]), {entry[0].name: entry for entry in entries})
            return [entry[0] for entry in entries], float(payload["seconds"])
        except (AttributeError, KeyError, TypeError, ValueError) as exc:
            # the notebook's code can replace the kernel-side snapshot function, so its answer is untrusted
            log.warning("%s step %d: malformed snapshot: %r", self.trajectory_id, self.next_step, exc)
            self._known = (-1, {})  # the next snapshot comes in full
            return [], 0.0

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

        ``interrupt_after`` seconds after the request (if it is still running) the kernel is
        interrupted as a user would: the cell ends in a KeyboardInterrupt, not a timeout.
        """
        import zmq

        client = self._client
        execution = Execution(collector=OutputCollector(self.options.max_raw_output_chars))
        msg_id = client.execute(
            code,
            silent=silent,
            store_history=not silent,
            user_expressions=user_expressions or {},
            allow_stdin=False,  # input() raises instead of waiting forever for a front end
            stop_on_error=False,
        )
        poller = zmq.Poller()
        poller.register(client.shell_channel.socket, zmq.POLLIN)
        poller.register(client.iopub_channel.socket, zmq.POLLIN)
        started = time.monotonic()
        deadline = started + timeout
        interrupt_at = started + interrupt_after if interrupt_after is not None else None
        idle = False
        while execution.reply is None or not idle:
            if interrupt_at is not None and execution.reply is None and time.monotonic() >= interrupt_at:
                self._manager.interrupt_kernel()
                interrupt_at = None
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                if execution.timed_out or execution.reply is not None:
                    execution.wedged = execution.reply is None
                    break
                execution.timed_out = True
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
                msg = client.shell_channel.get_msg(timeout=0)
                if msg["parent_header"].get("msg_id") == msg_id:
                    execution.reply = msg
                    execution.elapsed = time.monotonic() - started
            if client.iopub_channel.socket in ready:
                msg = client.iopub_channel.get_msg(timeout=0)
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                if msg["msg_type"] == "status":
                    idle = msg["content"]["execution_state"] == "idle"
                else:
                    execution.collector.add(msg)
        if execution.reply is None:
            execution.elapsed = time.monotonic() - started
        return execution


def _kernel_versions(reply: dict[str, Any]) -> dict[str, str | None]:
    """The versions :func:`snapshot.versions` reported on the install request; None where unknown."""
    result = reply["content"].get("user_expressions", {}).get("versions", {})
    try:
        reported = json.loads(result["data"]["text/plain"])
        return {name: str(reported[name]) if reported.get(name) else None for name in ("python", "ipykernel")}
    except (AttributeError, KeyError, TypeError, ValueError):  # a kernel that is not ipykernel may answer otherwise
        return {"python": None, "ipykernel": None}


def _known_entry(record: dict[str, Any]) -> tuple[Variable, str]:
    """A snapshot record as a variable and its variable_json."""
    variable = Variable(**record)
    return variable, variable_json(variable)


def _error_and_outputs(execution: Execution, timeout: float) -> tuple[dict[str, str] | None, list[dict[str, Any]]]:
    """The step's ``error`` and raw outputs; the recorder's own faults are added as error outputs."""
    outputs = execution.collector.outputs
    if execution.died or execution.wedged:
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
