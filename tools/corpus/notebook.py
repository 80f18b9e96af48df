"""A simulated notebook session: live kernels, cells, and the JuNE events a session's actions emit.

A session script drives a :class:`Notebook` (add, edit, run, delete, save,
restart, rename); every call appends JuNE events to the :class:`SessionLog`
its notebooks share, and ``run`` really executes the cell in a live
``python3`` kernel (:class:`Kernel`) whose working directory holds a copy of
``data/files/`` as ``files/``. The outputs are cleaned of what depends on the
machine (interpreter prefix, temporary-file paths, the kernel's pid) before
they become the ``cell_output`` of the ``finished_execute`` event.
"""

from __future__ import annotations

import datetime as dt
import filecmp
import json
import os
import random
import re
import shutil
import sys
import tempfile
import threading
import uuid
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager, start_new_kernel

from tools.corpus import FILES_DIR

# Any single string inside an output (a stream text, an HTML table, a
# traceback line) longer than this is cut, so one runaway print cannot bloat
# the corpus; today no output reaches it. Images are kept whole: a cut PNG is useless.
MAX_OUTPUT_CHARS = 20_000
UNTRUNCATED_MIME_TYPES = {"image/png"}
# A table's HTML repeats its text/plain and would make up half the corpus; no reader of the logs uses it
# (the replay renders text/plain), so an output that has text/plain keeps only that and its images.
DROPPED_MIME_TYPES = {"text/html"}
# A cell_output field stays under Python's default csv field limit (128 KiB) so
# every CSV reader takes the logs as they are; the largest images give way to a placeholder.
MAX_FIELD_CHARS = 120_000
EXECUTION_TIMEOUT_S = 120
# All sessions share one namespace of ids; uuid5 under it makes ids stable.
ID_NAMESPACE = uuid.UUID("6d1b8f0e-6f0b-4a57-9a4e-7f5a1c3e2b90")
# Machine-dependent text in outputs, replaced by fixed strings (see normalise_text).
FIXED_PREFIX = "/opt/conda"
FIXED_TMP = "/tmp"
# Printed once by a matplotlib without a font cache; it depends on the machine, not the session.
MACHINE_NOISE = re.compile(r"Matplotlib is building the font cache; this may take a moment\.\n")


def stable_id(*parts: str) -> uuid.UUID:
    """A UUID that depends only on ``parts``."""
    return uuid.uuid5(ID_NAMESPACE, "/".join(parts))


def interpreter_prefixes() -> list[str]:
    """Where this interpreter's site-packages and standard library live, as tracebacks spell them.

    IPython shortens paths under the home directory to ``~/...``, so both
    spellings are listed, longest first so no prefix is replaced inside another.
    """
    home = os.path.expanduser("~")
    prefixes = set()
    for prefix in (sys.prefix, sys.base_prefix):
        prefixes.add(prefix)
        if prefix.startswith(home + os.sep):
            prefixes.add("~" + prefix[len(home) :])
    return sorted(prefixes, key=len, reverse=True)


def normalise_text(text: str, kernel_pid: int) -> str:
    """Rewrite the machine-dependent parts of an output string to fixed ones."""
    text = MACHINE_NOISE.sub("", text)
    for prefix in interpreter_prefixes():
        text = text.replace(prefix, FIXED_PREFIX)
    text = text.replace(tempfile.gettempdir(), FIXED_TMP)
    return re.sub(r"ipykernel_\d+", f"ipykernel_{kernel_pid}", text)


def cap(text: str) -> str:
    """Cut ``text`` to MAX_OUTPUT_CHARS with a marker that gives its original length."""
    if len(text) <= MAX_OUTPUT_CHARS:
        return text
    return text[:MAX_OUTPUT_CHARS] + f"\n...[truncated, {len(text)} chars in total]"


def clean_output(output: dict[str, Any], kernel_pid: int) -> dict[str, Any] | None:
    """Normalise and cap one nbformat output; None when nothing is left of it."""
    output = dict(output)
    if output["output_type"] == "stream":
        output["text"] = cap(normalise_text(output["text"], kernel_pid))
        return output if output["text"] else None
    if output["output_type"] == "error":
        output["evalue"] = cap(normalise_text(output["evalue"], kernel_pid))
        output["traceback"] = [cap(normalise_text(line, kernel_pid)) for line in output["traceback"]]
        return output
    data = {}
    for mime, value in output["data"].items():
        if mime in DROPPED_MIME_TYPES and "text/plain" in output["data"]:
            continue
        if isinstance(value, str) and mime not in UNTRUNCATED_MIME_TYPES:
            value = cap(normalise_text(value, kernel_pid))
        data[mime] = value
    output["data"] = data
    return output


def image_placeholder(data: str) -> str:
    return f"<image/png omitted: {len(data)} base64 characters>"


def serialise_outputs(outputs: list[dict[str, Any]]) -> str:
    """The cell_output JSON, with the largest images replaced by placeholders until it fits MAX_FIELD_CHARS."""
    images = sorted(
        (o["data"] for o in outputs if "image/png" in o.get("data", {})),
        key=lambda data: len(data["image/png"]),
        reverse=True,
    )
    text = json.dumps(outputs, ensure_ascii=False, sort_keys=True)
    for data in images:
        if len(text) <= MAX_FIELD_CHARS:
            break
        data["image/png"] = image_placeholder(data["image/png"])
        text = json.dumps(outputs, ensure_ascii=False, sort_keys=True)
    return text


def merge_streams(outputs: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Join consecutive stream outputs of the same name, as Jupyter front ends store them."""
    merged: list[dict[str, Any]] = []
    for output in outputs:
        previous = merged[-1] if merged else None
        if (
            previous is not None
            and output["output_type"] == "stream"
            and previous["output_type"] == "stream"
            and previous["name"] == output["name"]
        ):
            previous["text"] += output["text"]
        else:
            merged.append(dict(output))
    return merged


class Kernel:
    """A live python3 kernel that executes code and returns nbformat outputs."""

    def __init__(self, workdir: Path) -> None:
        env = dict(os.environ)
        # A fixed hash seed keeps set/dict-of-str ordering stable between runs;
        # one BLAS thread keeps float reductions bit-identical on any core count.
        env.update(
            PYTHONHASHSEED="0",
            OMP_NUM_THREADS="1",
            OPENBLAS_NUM_THREADS="1",
            MKL_NUM_THREADS="1",
            MPLBACKEND="module://matplotlib_inline.backend_inline",
            PYDEVD_DISABLE_FILE_VALIDATION="1",
        )
        env.pop("PYTHONSTARTUP", None)
        self.manager: KernelManager
        self.client: BlockingKernelClient
        self.manager, self.client = start_new_kernel(kernel_name="python3", cwd=str(workdir), env=env)

    def execute(self, code: str, interrupt_after_s: float | None = None) -> list[dict[str, Any]]:
        """Run ``code``; optionally interrupt it after ``interrupt_after_s`` seconds."""
        outputs: list[dict[str, Any]] = []

        def collect(msg: dict[str, Any]) -> None:
            kind = msg["msg_type"]
            if kind in ("stream", "execute_result", "display_data", "error"):
                outputs.append(nbformat.v4.output_from_msg(msg))
            elif kind == "clear_output":
                outputs.clear()

        timer = None
        if interrupt_after_s is not None:
            timer = threading.Timer(interrupt_after_s, self.manager.interrupt_kernel)
            timer.start()
        try:
            self.client.execute_interactive(code, output_hook=collect, timeout=EXECUTION_TIMEOUT_S, allow_stdin=False)
        finally:
            if timer is not None:
                timer.cancel()
        return outputs

    def restart(self) -> None:
        self.manager.restart_kernel(now=True)
        self.client.wait_for_ready(timeout=60)

    def shutdown(self) -> None:
        self.client.stop_channels()
        self.manager.shutdown_kernel(now=True)


@dataclass
class Cell:
    """A notebook cell: stable id, type, current source and the execution count it shows."""

    cell_index: str
    cell_type: str
    source: str
    execution_count: int | None = None

    def saved(self) -> dict[str, Any]:
        """The cell as JuNE's logging plugin saves it: nbformat without outputs and metadata, plus its id."""
        cell: dict[str, Any] = {"id": self.cell_index, "cell_type": self.cell_type, "source": self.source}
        if self.cell_type == "code":
            cell["execution_count"] = self.execution_count
        return cell


class SessionLog:
    """What the notebooks of one simulated session share: the event table, the clock, the seeded pauses."""

    def __init__(self, session: str, user_id: str, expert: bool, start: dt.datetime, kernels: ExitStack) -> None:
        self.session = session
        self.user_id = user_id
        self.expert = expert
        self.events: list[dict[str, Any]] = []
        self.clock = start
        # Think and execution times are pseudo-random but seeded by the session name.
        self.rng = random.Random(session)
        self.cells_created = 0
        self.kernels = kernels

    def think(self, low: float, high: float) -> None:
        """Advance the clock by a seeded pause between ``low`` and ``high`` seconds."""
        self.clock += dt.timedelta(milliseconds=round(self.rng.uniform(low, high) * 1000))

    def new_cell_index(self) -> str:
        """A stable 32-digit hex id for the next created cell, shaped like the front end's cell ids."""
        self.cells_created += 1
        return stable_id(self.session, "cell", str(self.cells_created)).hex

    def start_kernel(self) -> Kernel:
        """A live kernel that is shut down when the session ends."""
        return self.kernels.enter_context(live_kernel())


class Notebook:
    """The API a session script drives; every call appends JuNE events, ``run`` executes for real.

    Each notebook has its own kernel (and kernel_id); ``open`` starts another
    notebook whose events interleave with this one's in the same log.
    """

    def __init__(self, log: SessionLog, notebook_name: str) -> None:
        self.log = log
        self.notebook_name = notebook_name
        # Ids derive from the session and the name the notebook was opened under.
        self.session_id = str(stable_id(log.session, notebook_name, "session"))
        self.kernel_id = str(stable_id(log.session, notebook_name, "kernel"))
        # The pid shown in normalised temp paths: fixed per notebook, like a real kernel's.
        self.shown_pid = 1000 + stable_id(log.session, notebook_name, "pid").int % 9000
        self.cells: list[Cell] = []
        self.last_error: dict[str, str] | None = None  # ename and evalue of the last run, when it failed
        self.executions = 0  # the kernel's execution counter: In [n]
        self.kernel = log.start_kernel()
        # the logging plugin saves the notebook as soon as its kernel is ready
        self.save()

    def open(self, notebook_name: str) -> Notebook:
        """Open a second notebook (with its own kernel) in the same session."""
        return Notebook(self.log, notebook_name)

    # -- events --------------------------------------------------------------

    def _emit(self, event: str, cell: Cell | None = None, source: str = "", output: str = "") -> None:
        self.log.events.append(
            {
                "action_id": len(self.log.events),
                "time": self.log.clock.isoformat(sep=" ", timespec="milliseconds"),  # JuNE's format, no zone
                "session_id": self.session_id,
                "kernel_id": self.kernel_id,
                "notebook_name": self.notebook_name,
                "event": event,
                "cell_index": cell.cell_index if cell else "",
                "cell_num": self.cells.index(cell) if cell in self.cells else "",
                "cell_type": cell.cell_type if cell else "",
                "cell_source": source,
                "cell_output": output,
                "user_id": self.log.user_id,
                "expert": self.log.expert,
            }
        )

    # -- cell operations -----------------------------------------------------

    def add(self, source: str, cell_type: str = "code", after: Cell | None = None) -> Cell:
        """Create a cell (at the end, or right after ``after``) and type ``source`` into it."""
        cell = Cell(self.log.new_cell_index(), cell_type, source.strip("\n"))
        position = self.cells.index(after) + 1 if after is not None else len(self.cells)
        self.cells.insert(position, cell)
        self.log.think(1, 4)
        self._emit("create", cell)
        return cell

    def edit(self, cell: Cell, source: str) -> None:
        """Replace a cell's source (JuNE logs no edit event; the change shows at the next run or save)."""
        cell.source = source.strip("\n")
        self.log.think(5, 40)

    def fix(self, cell: Cell, old: str, new: str) -> None:
        """Edit a cell by replacing the text ``old`` (which must occur) with ``new``."""
        if old not in cell.source:
            raise ValueError(f"{self.log.session}: {old!r} is not in cell {cell.cell_index}")
        self.edit(cell, cell.source.replace(old, new, 1))

    def run(self, cell: Cell, interrupt_after_s: float | None = None) -> bool:
        """Execute a cell in the kernel; True when it raised no exception."""
        if cell.cell_type == "markdown":
            self.log.think(2, 10)
            self._emit("rendered", cell, cell.source)
            return True
        self.log.think(2, 15)
        self._emit("execute", cell, cell.source)
        self.executions += 1
        cell.execution_count = self.executions
        raw = self.kernel.execute(cell.source, interrupt_after_s)
        outputs = [o for o in (clean_output(o, self.shown_pid) for o in merge_streams(raw)) if o is not None]
        # the developer interrupts only a cell still running then (one that failed at once ended before)
        if interrupt_after_s is not None and any(o.get("ename") == "KeyboardInterrupt" for o in outputs):
            self.log.clock += dt.timedelta(seconds=interrupt_after_s)
            self._emit("kernel_interrupting", cell)
        self.log.think(0.01, 1.5)
        self._emit("finished_execute", cell, cell.source, serialise_outputs(outputs))
        errors = [o for o in outputs if o["output_type"] == "error"]
        self.last_error = {"ename": errors[0]["ename"], "evalue": errors[0]["evalue"]} if errors else None
        if errors:
            # the plugin logs the error output without its traceback as the row's cell_source
            error = {key: value for key, value in errors[0].items() if key != "traceback"}
            self._emit("error", cell, json.dumps(error, ensure_ascii=False, separators=(",", ":")))
        return not errors

    def run_all(self, cells: list[Cell] | None = None) -> bool:
        """Run the given cells (default: every cell, top to bottom) until one fails, as 'Run All' does."""
        for cell in list(self.cells if cells is None else cells):
            if not self.run(cell):
                return False
        return True

    def delete(self, cell: Cell) -> None:
        self.log.think(1, 5)
        self._emit("delete", cell, cell.source)
        self.cells.remove(cell)

    def save(self) -> None:
        """Save: cell_source holds the cells as a JSON list, indented as the logging plugin writes it."""
        self.log.think(1, 5)
        self._emit("save_notebook", source=json.dumps([c.saved() for c in self.cells], indent=2, ensure_ascii=False))

    def rename(self, new_name: str) -> None:
        self.log.think(2, 8)
        self.notebook_name = new_name
        self._emit("notebook_renamed", source=new_name)

    def restart(self) -> None:
        """Restart the kernel: same kernel_id, fresh state."""
        self.log.think(2, 8)
        self._emit("kernel_restarting")
        self.kernel.restart()
        self.executions = 0
        self.log.clock += dt.timedelta(seconds=2)


@contextmanager
def live_kernel() -> Iterator[Kernel]:
    """A kernel in a scratch directory holding a copy of data/files as files/, shut down afterwards.

    The directory must hold nothing else afterwards and the copy must be
    unchanged: a session that writes files would litter the folder a replay
    runs in, and one that changes its inputs would not replay.
    """
    with tempfile.TemporaryDirectory(prefix="themisto-session-") as workdir:
        shutil.copytree(FILES_DIR, Path(workdir) / "files")
        kernel = Kernel(Path(workdir))
        try:
            yield kernel
        finally:
            kernel.shutdown()
        leftovers = sorted(set(os.listdir(workdir)) - {"files"})
        if leftovers:
            raise RuntimeError(f"the session wrote {', '.join(leftovers)}; sessions must not write files")
        comparison = filecmp.dircmp(FILES_DIR, Path(workdir) / "files")
        if comparison.left_only or comparison.right_only or comparison.diff_files:
            raise RuntimeError("the session changed files/; sessions must not write files")
