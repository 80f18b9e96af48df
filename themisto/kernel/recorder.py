"""A recorder: one kernel driven through a sequence of cells, each recorded as a :class:`Step`.

The :class:`Recorder` composes the kernel process and its channels
(:mod:`themisto.kernel.transport`) and the reading of its snapshots
(:mod:`themisto.kernel.snapshots`). The runtime snapshot (see
:mod:`themisto.kernel.inside.snapshot`) rides on each cell's own execute request
as a ``user_expression``, evaluated after the cell without a second round
trip; ipykernel skips user expressions when the cell raises, so after an error
a silent execution takes it instead. Either way the user's history and
execution count are the same as in a plain run.

Faults become steps: an exception sets ``error``; a cell past the timeout is
interrupted and recorded as a ``TimeoutError`` step; a kernel that dies,
ignores the interrupt, or stops handling requests is recorded as a
``DeadKernelError`` step, restarted, and the next step is marked
``restarted``. Where that happens after the cell finished, while its snapshot
ran (a ``__repr__`` that calls ``os._exit`` or swallows every interrupt), the
step is the cell's, with its output, and says so in ``snapshot_error``. A
snapshot module the notebook broke is installed again before the next cell.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themisto.exceptions import InputError, KernelError
from themisto.kernel import inject
from themisto.kernel.environment import KERNEL_ABI, KernelSandbox, check_kernel
from themisto.kernel.inside import snapshot, wire
from themisto.kernel.options import KernelOptions
from themisto.kernel.outputs import cap_text, render_outputs, scrub
from themisto.kernel.snapshots import Snapshot, SnapshotReader, snapshot_fault
from themisto.kernel.transport import KERNEL_START_TIMEOUT, Execution, KernelSession, exit_status
from themisto.trajectory import RECORDING_STOPPED_ERROR, Step, Variable, state_hash

log = logging.getLogger(__name__)

# The ``ename`` of a step whose kernel died or ignored the interrupt; the recorder has restarted it.
DEAD_KERNEL_ERROR = "DeadKernelError"


def check_options(options: KernelOptions, sandbox_abi: int = KERNEL_ABI) -> None:
    """Raise :class:`InputError` for what the options need of this machine and it lacks, before any kernel starts.

    A working directory, the kernel, the sandbox: the values themselves were checked when the options were
    made (:class:`KernelOptions` declares its checks).
    """
    if options.workdir is not None and not Path(options.workdir).is_dir():
        raise InputError(f"working directory {options.workdir} does not exist")
    check_kernel(options.kernel_name)
    KernelSandbox.of(options, sandbox_abi)


@dataclass
class Recorder:
    """A live kernel that runs cells one at a time and returns each as a :class:`Step`.

    Use as a context manager. ``run_cell`` records; ``stopped_step`` records
    a step an earlier recording did not finish, without running it;
    ``restart`` restarts the kernel and marks the next step ``restarted``.
    Setting ``stop`` makes the cell in progress raise
    :class:`~themisto.kernel.transport.Stopped` within
    :data:`~themisto.kernel.transport.POLL_INTERVAL` seconds.

    While a recorder runs, the calling process is not dumpable (see
    :class:`~themisto.kernel.transport.KernelSession`), so the kernel cannot
    read its environment through ``/proc``.
    """

    trajectory_id: str
    workdir: Path
    options: KernelOptions = field(default_factory=KernelOptions)
    next_step: int = 0
    stop: threading.Event | None = None
    # more user expressions of the install request of every kernel this recorder starts, evaluated after its own
    installs: Mapping[str, str] = field(default_factory=dict)
    also_writable: tuple[Path, ...] = ()  # folders the sandboxed kernel may write besides its working directory
    sandbox_abi: int = KERNEL_ABI  # the Landlock ABI its sandbox needs (see environment.KernelSandbox)

    def __post_init__(self) -> None:
        # the confinement the kernel runs in, checked here once; the provenance records it (sandbox.provenance)
        self.sandbox = KernelSandbox.of(self.options, self.sandbox_abi)
        # the kernel process and its channels: every request this recorder sends goes through it
        self.session = KernelSession(
            self.workdir,
            self.options,
            tuple(self.writable()),
            self.sandbox,
            transport=self.transport(),
            stop=self.stop,
        )
        self._snapshots = SnapshotReader(self.trajectory_id, self.options)
        self._restarted = False
        # the kernel's Python and ipykernel versions, known once it has started (None where unknown)
        self.kernel_versions: dict[str, str | None] = {"python": None, "ipykernel": None}
        self.kernel_libraries: dict[str, str] = {}  # installed libraries' versions (snapshot.LIBRARIES)

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
        try:
            self.session.start()
            self._set_up()
        except BaseException:
            # a ``with`` block whose start fails never reaches ``__exit__``: the kernel would run on until the
            # host exits (exec-score goes on to its next trajectory), and its private folder stay
            self.close()
            raise

    def close(self) -> None:
        """Shut the kernel down at once, with every process it started."""
        self.session.close()

    def restart(self) -> None:
        """Restart the kernel; the next step starts from an empty namespace and is marked ``restarted``."""
        self.session.restart()
        self._set_up()
        self._restarted = True

    def _set_up(self) -> None:
        """Install the snapshot module and ``installs`` in the kernel just started."""
        self._snapshots.forget()  # a new kernel process has an empty description cache
        self._install()

    def _install(self, again: bool = False) -> None:
        """Install the snapshot module in the kernel, then ``installs``, in one request; ``again``: the snapshot
        module alone, after a cell broke it, and failing quietly."""
        self._snapshots.reinstall = False
        own = inject.snapshot_install_expressions(self.options.max_raw_output_chars)
        # the versions are a report, not an install: a kernel that cannot say them gives None (_kernel_versions)
        more = {} if again else {"versions": inject.versions_expression(), **self.installs}
        install = self.session.execute(
            inject.INSTALL_CODE,
            silent=True,
            timeout=KERNEL_START_TIMEOUT,
            user_expressions={**own, **more},
            until_idle=False,
        )
        reply = install.reply
        if reply is not None and _evaluated(reply, own):
            if again:
                return
            self.kernel_versions, self.kernel_libraries = _kernel_versions(reply)
            if not _evaluated(reply, self.installs):
                raise KernelError(f"kernel {self.options.kernel_name!r} did not take the code it was given to install")
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
        return self.run_cell_then(code, cell_id, {}, 0.0, original_output, interrupt_after)[0]

    def run_cell_then(
        self,
        code: str,
        cell_id: str,
        more: Mapping[str, str],
        more_seconds: float,
        original_output: str | None = None,
        interrupt_after: float | None = None,
    ) -> tuple[Step, Execution]:
        """:meth:`run_cell`, with ``more`` user expressions evaluated after the snapshot within ``more_seconds``
        (see :meth:`KernelSession.execute`); the execution too, for the caller to read their answers. The step's
        ``execution_time`` is the whole request's less the snapshot's: the caller takes the rest's off."""
        if self._snapshots.reinstall:
            self._install(again=True)
        # the snapshot rides on the cell's own request: evaluated after the cell, outside history
        execution = self.session.execute(
            code,
            silent=False,
            timeout=self.options.timeout,
            user_expressions={"snapshot": self.snapshot_expression(), **more},
            interrupt_after=interrupt_after,
            more_seconds=more_seconds if more else None,
        )
        restarted, self._restarted = self._restarted, False
        error, outputs = _error_and_outputs(execution, self.options.timeout)
        memory = None
        fault = snapshot_fault(execution, self.options.timeout)
        if fault is not None:  # the cell ran; its snapshot (a repr) died, hung or overran
            execution.elapsed = execution.cell_seconds or 0.0
            log.warning("%s step %d: %s", self.trajectory_id, self.next_step, fault)
        if execution.broken:
            taken = Snapshot([], error=fault)
            self._snapshots.forget()
            self.restart()
        else:
            found = self._snapshots.read(execution, self.next_step)
            if found is None:  # ipykernel skips user_expressions when the cell raised or was interrupted
                taken = self.take_snapshot()
            else:
                taken = found
                if fault is None:
                    execution.elapsed = max(execution.elapsed - taken.seconds, 0.0)
                else:  # interrupted in time: what the snapshot kept, and why it is incomplete
                    taken.error = cap_text(f"{fault}; {taken.error or 'interrupted'}", 300)[0]
            memory = self.session.memory()
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
            state_hash=self._snapshots.state_hash(variables),
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
        return step, execution

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

    def skip(self) -> None:
        """Pass a recorded step without running it: one before the restart a resume replays from."""
        self.next_step += 1

    def replay(self, code: str, interrupt_after: float | None = None) -> None:
        """Re-run a cell only to rebuild kernel state: no step, no snapshot (execution-checked scoring)."""
        self._restarted = False
        execution = self.session.execute(
            code, silent=False, timeout=self.options.timeout, interrupt_after=interrupt_after
        )
        if execution.broken:
            self.restart()
        self.next_step += 1

    def snapshot_expression(self) -> str:
        """The ``user_expression`` named ``snapshot`` that :meth:`read_snapshot` reads from a request's reply."""
        return inject.snapshot_expression(self.snapshot_request())

    # what execution-checked scoring composes (themisto.kernel.forking)

    def snapshot_request(self) -> wire.SnapshotRequest:
        """The snapshot this recorder's options ask for, naming the last snapshot it received."""
        return self._snapshots.request(self.session.announce)

    def child_variables(self, text: str, before: Mapping[str, Variable]) -> list[Variable]:
        """A forked child's snapshot, checked as this recorder checks its own (see SnapshotReader.child_variables)."""
        return self._snapshots.child_variables(text, before)

    def known_variables(self) -> dict[str, Variable] | None:
        """The namespace as the last snapshot received described it (the state before the next cell); None: unknown."""
        return self._snapshots.known_variables()

    def take_snapshot(self) -> Snapshot:
        """A snapshot of the namespace now, in a silent request of its own (as after a cell that raised)."""
        return self.read_snapshot(self.request({"snapshot": self.snapshot_expression()}, self.options.timeout))

    def read_snapshot(self, execution: Execution, name: str = "snapshot") -> Snapshot:
        """The snapshot a silent request's expression ``name`` took; the kernel is restarted if it stopped."""
        if execution.broken:
            self.restart()
            return Snapshot([], error="the kernel stopped while taking the snapshot")
        found = self._snapshots.read(execution, self.next_step, name)
        return found or Snapshot([], error="the snapshot was not evaluated")

    def known_generation(self) -> int:
        """The kernel-side generation of the last snapshot received (-1: none known)."""
        return self._snapshots.generation

    def request(self, user_expressions: dict[str, str], timeout: float) -> Execution:
        """One silent request that runs no code and evaluates ``user_expressions``; it ends at its reply (its
        outputs belong to no step)."""
        return self.session.execute(
            "", silent=True, timeout=timeout, user_expressions=user_expressions, until_idle=False
        )


def _evaluated(reply: dict[str, Any], expressions: Mapping[str, str]) -> bool:
    """Whether the request of ``reply`` ran and each of its user ``expressions`` was evaluated without an error."""
    if reply["content"].get("status") != "ok":
        return False
    answers = reply["content"].get("user_expressions", {})
    return all(isinstance(answers.get(name), dict) and answers[name].get("status") == "ok" for name in expressions)


def _kernel_versions(reply: dict[str, Any]) -> tuple[dict[str, str | None], dict[str, str]]:
    """The versions :func:`snapshot.versions` reported on the install request (None where unknown), and the
    libraries' versions."""
    result = reply["content"].get("user_expressions", {}).get("versions", {})
    try:
        reported = wire.Versions.from_json(result["data"]["text/plain"])
    except (AttributeError, KeyError, TypeError, ValueError):  # a kernel that is not ipykernel may answer otherwise
        return {"python": None, "ipykernel": None}, {}
    found = {"python": reported.python or None, "ipykernel": reported.ipykernel or None}
    return found, {str(name)[:40]: str(version)[:40] for name, version in reported.libraries.items()}


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
    return f"the kernel died while running this cell{exit_status(execution.exit_code)} and was restarted"
