"""What each example carries from before its step: the history of cells, the kernel's state, and the example itself.

:func:`iter_contexts` is the build's second pass: it re-reads one trajectory at a
time and yields, for every step, what a model sees before it (:class:`StepContext`),
from which :meth:`StepContext.example` makes the :class:`Example` of either task.
The history is every earlier execution of the trajectory across kernel restarts (a
restart is a cell of its own, :data:`RESTART_CELL`), cut to a character budget from
the oldest end, one whole cell at a time; the window slides along the trajectory
(:class:`HistoryWindow`), so a step costs the same however long its trajectory is.
The runtime state before a step is the snapshot recorded after the previous step of
the live kernel, none after a restart; :class:`VariableChanges` says when each of
its variables last changed. The rules are those of ``docs/protocol.md``
("What an example holds").
"""

from __future__ import annotations

import functools
import re
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from themisto.building.categories import StepKinds, output_kind
from themisto.exceptions import InputError
from themisto.trajectory import Step, ValidatedFiles, Variable, iter_steps
from themisto.vocabulary import OUTPUT_PREDICTION, RESTART_MARKER, TASKS

if TYPE_CHECKING:  # selection imports this module; the options are only read here
    from themisto.building.selection import SelectionOptions


@dataclass(frozen=True)
class HistoryCell:
    """One executed cell shown to the model: its code and plain-text output (or a restart marker)."""

    code: str
    output: str

    @property
    def chars(self) -> int:
        """What the cell costs of the history budget: its code and output lengths."""
        return len(self.code) + len(self.output)

    @functools.cached_property
    def rendered(self) -> str:
        """The cell as a prompt's history shows it (:func:`themisto.building.prompts.render_cell`).

        Rendered once per cell, which then stays in the windows of many consecutive steps (about 86 in the
        synthetic corpus): looked up here, not in a cache keyed by its text, whose key a lookup hashes.
        """
        from themisto.building.prompts import render_cell  # prompts imports this module

        return render_cell(self.code, self.output)


# The history cell that stands for a kernel restart: the marker as code, no output.
RESTART_CELL = HistoryCell(RESTART_MARKER, "")


@dataclass
class Example:
    """One task example before rendering."""

    task: str
    example_id: str
    trajectory_id: str
    step: int
    history: list[HistoryCell]
    history_dropped: int  # older history cells (restart markers included) left out by the context budget
    code: str
    runtime: list[Variable]
    memory_bytes_before: int | None
    target: str
    target_is_error: bool
    stable: bool | None  # the target is reproducible across re-executions (target_stable)
    execution_time_before: float | None = None  # seconds the previous step of the live kernel took
    # per runtime variable: the step at which it last changed (None: unknown, so no recency ranking)
    runtime_changed: list[int] | None = None
    output_kind: str = "none"  # the target step's output, see themisto.building.categories.output_kind
    step_kind: str = "first_run"  # see themisto.building.categories.StepKinds
    # the kernel's Python and libraries' versions, (name, version) pairs (kernel_environment); () unknown
    environment: tuple[tuple[str, str], ...] = ()


def example_id(trajectory_id: str, step: int) -> str:
    """The id of the examples of one step: ``<trajectory_id>/<step>``, the same in every task config."""
    return f"{trajectory_id}/{step}"


def target_stable(task: str, output_stable: bool | None) -> bool | None:
    """Whether the target of ``task`` reproduces across re-executions: code always does, an output as marked."""
    return output_stable if task == OUTPUT_PREDICTION else True


class HistoryWindow:
    """The most recent whole cells of a trajectory whose total size fits a character budget.

    The window is the longest suffix of the cells appended so far within the budget.
    Appending a cell can only move its start forward, so the window slides in O(1)
    amortised time per cell instead of being recut from the whole trajectory at every step.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget or None  # 0: no budget, the whole history
        self.clear()

    def clear(self) -> None:
        """Start empty."""
        self._cells: list[HistoryCell] = []
        self._start = 0  # index in _cells of the oldest cell in the window
        self._used = 0  # characters of the cells in the window
        self._forgotten = 0  # cells already discarded from _cells

    def append(self, cell: HistoryCell) -> None:
        """Add the newest cell, dropping the oldest ones that no longer fit."""
        self._cells.append(cell)
        self._used += cell.chars
        while self.budget is not None and self._used > self.budget:
            self._used -= self._cells[self._start].chars
            self._start += 1
        if self._start > 1024 and self._start * 2 > len(self._cells):
            # keep memory bounded by the window, not by the trajectory's length
            del self._cells[: self._start]
            self._forgotten += self._start
            self._start = 0

    @property
    def cells(self) -> list[HistoryCell]:
        """The cells of the window, oldest first."""
        return self._cells[self._start :]

    @property
    def dropped(self) -> int:
        """Older cells left out by the budget."""
        return self._forgotten + self._start


class VariableChanges:
    """For each variable of the live kernel, the step at which its description last changed.

    A description is what the snapshot records of a variable (type, size, shape, len,
    repr); a variable that appears, or whose description differs from the previous
    snapshot's, changed at that step. A restart empties the kernel, so it starts afresh.
    """

    def __init__(self) -> None:
        self._last: dict[str, tuple[tuple[object, ...], int]] = {}  # name -> (description, step)
        self._state_hash: str | None = None  # of the snapshot taken in last

    def clear(self) -> None:
        """Forget every variable (a kernel restart)."""
        self._last, self._state_hash = {}, None

    def update(self, step: Step) -> None:
        """Take in the snapshot recorded after ``step``."""
        if step.state_hash == self._state_hash:  # the same snapshot: nothing changed
            return
        self._state_hash = step.state_hash
        last = {}
        for variable in step.runtime:
            description = variable_description(variable)
            known = self._last.get(variable.name)
            last[variable.name] = known if known is not None and known[0] == description else (description, step.step)
        self._last = last

    def steps(self, variables: list[Variable]) -> list[int]:
        """The step at which each of ``variables`` (the latest snapshot taken in) last changed."""
        return [self._last[variable.name][1] for variable in variables]


def variable_description(variable: Variable) -> tuple[object, ...]:
    """What the snapshot says of a variable, its name aside."""
    return (
        variable.type,
        variable.size_bytes,
        variable.shape,
        variable.len,
        variable.repr,
        variable.repr_failed,
        variable.description,
    )


@dataclass
class StepContext:
    """A step and what a model is shown before it: the history and the previous step of the live kernel."""

    step: Step
    history: list[HistoryCell]
    history_dropped: int
    before: Step | None  # the previous step of the same kernel session; None after a restart
    step_kind: str  # see themisto.building.categories.StepKinds
    runtime_changed: list[int]  # per variable of before.runtime: the step at which it last changed
    environment: tuple[tuple[str, str], ...] = ()  # see kernel_environment
    output: str | None = None  # the step's output as a model is shown it (masked); None: as recorded

    @property
    def example_id(self) -> str:
        return example_id(self.step.trajectory_id, self.step.step)

    @functools.cached_property
    def output_kind(self) -> str:
        """The kind of the step's output, shared by its examples of both tasks."""
        return output_kind(self.step.output, self.step.error is not None, self.step.outputs)

    def example(self, task: str) -> Example:
        """The example of ``task`` for this step."""
        step, before = self.step, self.before
        output_task = task == OUTPUT_PREDICTION
        return Example(
            task=task,
            example_id=self.example_id,
            trajectory_id=step.trajectory_id,
            step=step.step,
            history=self.history,
            history_dropped=self.history_dropped,
            code=step.code if output_task else "",
            runtime=before.runtime if before else [],
            memory_bytes_before=before.memory_bytes if before else None,
            target=(step.output if self.output is None else self.output) if output_task else step.code,
            target_is_error=step.error is not None,
            stable=target_stable(task, step.stable),
            execution_time_before=before.execution_time if before else None,
            runtime_changed=self.runtime_changed,
            output_kind=self.output_kind,
            step_kind=self.step_kind,
            environment=self.environment,
        )


# The import name of a library whose distribution (as the provenance names it) is called otherwise.
_IMPORT_NAMES = {"scikit-learn": "sklearn"}
# ``import a.b as c, d`` and ``from a.b import c``, anywhere a line starts (magics and shell lines never match)
_IMPORT_LINE = re.compile(
    r"^[ \t]*(?:from[ \t]+([A-Za-z_]\w*)|import[ \t]+([A-Za-z_][\w.]*(?:[ \t]+as[ \t]+\w+)?"
    r"(?:[ \t]*,[ \t]*[A-Za-z_][\w.]*(?:[ \t]+as[ \t]+\w+)?)*))",
    re.MULTILINE,
)


def imported_modules(code: str) -> set[str]:
    """The top-level modules ``code`` imports (``import numpy as np``, ``from sklearn.x import y``: numpy, sklearn)."""
    found = set()
    for source, names in _IMPORT_LINE.findall(code):
        found.update([source] if source else [name.split()[0].split(".")[0] for name in names.split(",")])
    return found


def imported_environment(environment: tuple[tuple[str, str], ...], imported: set[str]) -> tuple[tuple[str, str], ...]:
    """The kernel's Python and those of its recorded libraries that the session's cells have imported."""
    return tuple(
        (name, version)
        for name, version in environment
        if name in ("python", AUTHOR_PYTHON) or _IMPORT_NAMES.get(name, name) in imported
    )


# The environment entry naming the Python a notebook's author ran (its ``language_info``), where it differs
# from the recording kernel's: the history was re-recorded under other versions than the notebook's own.
AUTHOR_PYTHON = "author-python"


def kernel_environment(path: Path) -> tuple[tuple[str, str], ...]:
    """The kernel's Python and libraries' versions from a trajectory's provenance: ``(("python", "3.12.3"),
    ("numpy", "2.4.0"), ...)``, then ``(AUTHOR_PYTHON, "3.5.1")`` when the source notebook says its author ran
    another Python; () when the trajectory has no provenance or it names no versions."""
    from themisto.provenance import read_provenance

    provenance = read_provenance(path)
    if provenance is None:
        return ()
    python = (("python", provenance.python),) if provenance.python else ()
    author = notebook_python(provenance.source.path)
    kernel = provenance.python or ""
    # "3.11" names no patch release: the kernel's 3.11.7 is the same Python
    same = author is None or kernel == author or kernel.startswith(author + ".")
    other = ((AUTHOR_PYTHON, author),) if python and author and not same else ()
    return python + tuple(sorted(provenance.libraries.items())) + other


def notebook_python(source: Path | None) -> str | None:
    """The Python version a notebook's metadata says its outputs came from; None for other sources or none."""
    import json

    if source is None or source.suffix != ".ipynb":
        return None
    try:
        with source.open(encoding="utf-8") as handle:
            metadata = json.load(handle).get("metadata")
        version = metadata["language_info"]["version"]
    except (OSError, ValueError, KeyError, TypeError, AttributeError):  # gone, not JSON, or no version recorded
        return None
    return version if isinstance(version, str) and len(version) <= 32 else None


def iter_contexts(
    paths: Sequence[Path], options: SelectionOptions, validated: ValidatedFiles | None = None
) -> Iterator[StepContext]:
    """Second pass: every step of ``paths`` in trajectory order, with its history and previous step.

    ``options.max_context_chars`` bounds the history (0: the whole history); with ``options.mask_machine_text``,
    outputs (history and targets) are masked as :func:`themisto.kernel.outputs.mask_machine_text` says.
    With ``options.original_history`` a history cell shows the output its source stored (``original_output``)
    where it stored one, the replay's elsewhere; targets stay the replay's, as the runtime state is.
    ``validated``: the files selection found valid (:attr:`Selection.validated`), read again without validating.
    """
    from themisto.kernel import mask_machine_text as mask

    for path in paths:
        environment = kernel_environment(path)
        imported: set[str] = set()  # what the live kernel's cells have imported: the libraries the line names
        window = HistoryWindow(options.max_context_chars)
        changes = VariableChanges()
        kinds = StepKinds()
        before: Step | None = None
        started = False  # a step of this trajectory has run
        for step in iter_steps(path) if validated is None else validated.steps(path):
            if step.restarted:
                before = None
                changes.clear()
                imported.clear()
                if started:
                    window.append(RESTART_CELL)
            runtime_changed = changes.steps(before.runtime) if before else []
            output = mask(step.output) if options.mask_machine_text else step.output
            kind = kinds.classify(step)
            named = imported_environment(environment, imported)
            yield StepContext(step, window.cells, window.dropped, before, kind, runtime_changed, named, output)
            imported.update(imported_modules(step.code))
            seen = (
                output  # what the developer had on screen: the replay's output, or with original_history the stored one
            )
            if options.original_history and step.original_output is not None:
                seen = mask(step.original_output) if options.mask_machine_text else step.original_output
            window.append(HistoryCell(step.code, seen))
            changes.update(step)
            before, started = step, True


def iter_examples(paths: Sequence[Path], task: str, ids: Iterable[str], options: SelectionOptions) -> Iterator[Example]:
    """The examples of ``task`` whose ids are in ``ids``, in trajectory order, as a build with ``options`` makes them."""
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    wanted = set(ids)
    for context in iter_contexts(paths, options):
        if context.example_id in wanted:
            yield context.example(task)
