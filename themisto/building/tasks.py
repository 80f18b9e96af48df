"""Turn trajectories into the two Themisto tasks: output prediction and next-cell prediction.

For step t of a trajectory one example per task is made:

- ``output_prediction``: the history before t, the code of step t and the
  runtime state before t; the target is the output of step t.
- ``next_cell_prediction``: the same history and runtime state; the target is
  the code of step t (so the example's ``code`` is empty).

The runtime state before t is the snapshot recorded *after* step t-1, never the
one of step t (that would leak the answer). It is empty for the first step of a
trajectory and for a step that has ``restarted`` set: it describes the live
kernel, and a restarted kernel holds nothing. With it come the kernel's memory
and the execution time of step t-1 (none after a restart), and for each variable
the step at which its description (type, size, shape, len or repr) last changed,
which decides what a tight runtime block keeps (:mod:`themisto.building.prompts`).

The history of step t is every earlier execution of the trajectory, as the
paper defines it, across kernel restarts: what the developer saw on screen. A
restart appears in it as a cell of its own whose code is
:data:`~themisto.vocabulary.RESTART_MARKER` (``# --- kernel restarted ---``) and
whose output is empty, placed just before the first step run in the new kernel;
prompts render it as a line saying the variables above are gone. So a step
after a restart sees the cells run before it, and an empty runtime state.

The history is then cut to ``max_context_chars`` (the sum of the code and
output lengths of its cells, restart markers included) from the oldest end, one
whole cell at a time, so a cell is never cut in the middle; it stays a
contiguous run of the most recent cells. ``max_context_chars=0`` keeps the whole
history, as the paper does.

With ``mask_machine_text`` (the default) the outputs a model sees and predicts (history and targets) have
what differs between machines and runs masked (:func:`themisto.recording.outputs.mask_machine_text`: kernel
pids in ``ipykernel_<pid>`` paths, random temporary folder names, ``at 0x...`` memory addresses); the
recorded steps keep them.

Selection follows the paper's protocol, each rule an option:

1. Steps whose code or output is longer than the ``quantile`` (0.99) quantile
   of all steps of all input trajectories are not eligible, for either task.
2. Steps whose output is an exception are not eligible unless
   ``include_errors`` (the target is then the recorded output, which ends with
   the ``EName: evalue`` line).
3. Steps whose output shows only images (plots: every line an ``<image/png>``
   placeholder, or with ``figure_text_as_image`` a figure's text stand-in
   ``<Figure size 640x480 with 1 Axes>``) are not eligible for output prediction unless
   ``include_images``: such a target is a constant that says nothing about the
   state. They stay eligible for next-cell prediction, whose target is code.
   Likewise, unless ``include_timing``, steps whose code reads a clock (``%time``,
   ``time.time()``, ...) and whose output shows a duration: a target no re-run reproduces.
4. With ``stable_only``, only steps marked ``stable`` (output identical across
   re-executions) are eligible, for either task (one eligibility rule for both).
4. Examples with an empty target (a cell without output for output prediction,
   an empty cell for next-cell prediction; blank counts as empty) are not
   eligible for that task unless ``include_empty``: an empty answer is trivial
   to give and says nothing about the runtime.
5. Steps with fewer than ``min_history`` earlier executions in their trajectory
   are not drawn into the test split (the ``full`` split keeps every eligible
   example). Its default follows the sample: 5 with ``sample="paper"``
   (the paper's selected cells had at least five earlier actions), 0 with
   ``sample="all"``.
6. ``sample="paper"``: 200 examples per task, stratified by target length
   (output length, or code length for next cell): the eligible examples are
   ranked by (target length, example id) and cut into four equal rank
   quartiles; 10 are drawn from Q1, 180 from Q2 and Q3 together, 10 from Q4,
   with ``random.Random`` seeded by the seed and the task name. A stratum with
   fewer examples than asked contributes all it has. ``sample="all"`` keeps
   every eligible example in the test split as well. With ``samples="shared"``
   one sample serves both tasks, as in the paper's reading: the output-prediction
   draw (by output length), each of its steps in the next-cell test split too where
   eligible there; ``"separate"`` draws each task on its own (by its target's length).

An example's ``stable`` says whether its *target* is reproducible: for output
prediction the step's ``stable`` flag (None when unknown), for next-cell
prediction always True, as the target is code (:func:`target_stable`). Its
``output_kind`` and ``step_kind`` are the categories of
:mod:`themisto.building.categories`.

Building streams: a first pass (:func:`select`) collects only lengths and flags
per step; a second pass (:func:`iter_contexts`) re-reads one trajectory at a
time and yields, for every step, what a model sees before it. The history
window slides along the trajectory (:class:`HistoryWindow`), so a step costs the
same however long its trajectory is.
"""

from __future__ import annotations

import functools
import random
import re
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from themisto.building.categories import StepKinds, output_kind
from themisto.exceptions import InputError, OptionError, TrajectoryError
from themisto.progress import Progress
from themisto.trajectory import Step, Variable, is_image_only, iter_steps
from themisto.vocabulary import OUTPUT_PREDICTION, RESTART_MARKER, TASKS

SAMPLES = ("paper", "all")
# One test sample for both tasks (the output-prediction draw), or one per task.
SHARED, SEPARATE = "shared", "separate"
TASK_SAMPLES = (SEPARATE, SHARED)
# A matplotlib figure's text stand-in, printed when a figure is a cell's value but not drawn inline.
FIGURE_TEXT = re.compile(r"<Figure size \d+(?:\.\d+)?x\d+(?:\.\d+)? with \d+ Axes>")
# Examples drawn from the target-length quartiles Q1, Q2+Q3 and Q4 (the paper's 10/180/10).
PAPER_STRATA = (10, 180, 10)
# The paper's selected cells had at least five earlier actions: min_history's default with sample="paper".
PAPER_MIN_HISTORY = 5


@dataclass(frozen=True)
class SelectionOptions:
    """Which steps become examples and how the history is bounded."""

    sample: str = "paper"  # "paper" (200 per task, stratified) or "all" (every eligible example)
    seed: int = 0  # seeds the stratified draw of sample="paper"
    include_errors: bool = False  # keep steps whose output is an exception
    include_images: bool = False  # keep image-only outputs (plots) as output-prediction targets
    quantile: float = 0.99  # drop steps whose code or output is longer than this length quantile
    stable_only: bool = False  # keep only steps whose output was reproducible across re-executions
    max_context_chars: int = 8000  # budget of the history: sum of code and output lengths of its cells
    include_empty: bool = False  # keep examples whose target is empty (no output, or an empty cell)
    # earlier executions a step needs to be drawn into the test split; None: PAPER_MIN_HISTORY with
    # sample="paper", else 0
    min_history: int | None = None
    samples: str = SEPARATE  # SHARED: the output-prediction test sample serves next-cell prediction too
    figure_text_as_image: bool = True  # a `<Figure size ...>` text output counts as image-only
    include_timing: bool = False  # keep outputs that show a duration the cell measured
    mask_machine_text: bool = True  # mask pids, temp folder names and memory addresses in outputs

    def __post_init__(self) -> None:
        if self.sample not in SAMPLES:
            raise InputError(f"unknown sample {self.sample!r}; expected one of {', '.join(SAMPLES)}")
        if self.samples not in TASK_SAMPLES:
            raise InputError(f"unknown samples {self.samples!r}; expected one of {', '.join(TASK_SAMPLES)}")
        if self.min_history is None:  # frozen: resolved once, so the card records the number used
            object.__setattr__(self, "min_history", PAPER_MIN_HISTORY if self.sample == "paper" else 0)
        if (self.min_history or 0) < 0:
            raise OptionError("{min_history} must be >= 0, got {got}", got=self.min_history)
        if not 0.0 < self.quantile <= 1.0:
            raise OptionError("{quantile} must be in (0, 1], got {got}", got=self.quantile)
        if self.max_context_chars < 0:
            raise OptionError("{max_context_chars} must be >= 0, got {got}", got=self.max_context_chars)


@dataclass(frozen=True)
class HistoryCell:
    """One executed cell shown to the model: its code and plain-text output (or a restart marker)."""

    code: str
    output: str

    @property
    def chars(self) -> int:
        """What the cell costs of the history budget: its code and output lengths."""
        return len(self.code) + len(self.output)


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


@dataclass(frozen=True, slots=True)  # one per input step: slots keep selection memory small
class StepStats:
    """What selection needs to know about a step, without its payload."""

    example_id: str
    step: int  # also the number of earlier executions in the trajectory
    code_chars: int
    output_chars: int
    is_error: bool
    recording_stopped: bool  # a recorder artefact (Step.recording_stopped), never a target
    image_only: bool  # the output shows nothing but images (is_image_only)
    figure_text: bool  # the output is nothing but figures' text stand-ins (is_figure_text)
    timing: bool  # the step measures time and its output shows a duration (shows_timing)
    stable: bool | None  # the step's output, as ``Step.stable``
    code_blank: bool
    output_blank: bool

    def target_chars(self, task: str) -> int:
        return self.output_chars if task == OUTPUT_PREDICTION else self.code_chars

    def target_blank(self, task: str) -> bool:
        """Whether the task's target (the output, or the code for next cell) is empty or blank."""
        return self.output_blank if task == OUTPUT_PREDICTION else self.code_blank


@dataclass
class TaskSelection:
    """The example ids of one task: all eligible ones and the test sample."""

    full: list[str]
    test: list[str]
    strata: tuple[int, int, int] | None  # sizes of Q1, Q2+Q3, Q4 among eligible examples (paper sample)
    # per split: how many examples have a stable / unstable / unknown target (see target_stable)
    stability: dict[str, tuple[int, int, int]] = field(default_factory=dict)


@dataclass
class Selection:
    """The outcome of selection over a set of trajectories."""

    trajectories: int
    steps: int
    errors: int
    max_code_chars: float
    max_output_chars: float
    tasks: dict[str, TaskSelection] = field(default_factory=dict)
    skipped: dict[Path, str] = field(default_factory=dict)  # invalid trajectory files left out, and why


def example_id(trajectory_id: str, step: int) -> str:
    """The id of the examples of one step: ``<trajectory_id>/<step>``, the same in every task config."""
    return f"{trajectory_id}/{step}"


def target_stable(task: str, output_stable: bool | None) -> bool | None:
    """Whether the target of ``task`` reproduces across re-executions: code always does, an output as marked."""
    return output_stable if task == OUTPUT_PREDICTION else True


def scan(
    paths: Sequence[Path], progress: Progress | None = None, mask_machine_text: bool = True
) -> tuple[list[StepStats], dict[Path, str]]:
    """First pass: lengths and flags of every step, in trajectory-file order, and the invalid files skipped.

    Output lengths are those of the output as a model is shown it (masked, with ``mask_machine_text``).
    A file that breaks the step schema or repeats a step number is skipped
    whole (one bad trajectory never fails a corpus), and so is one whose
    ``state_hash`` repeats the previous step's while its variables differ
    (the build takes an equal hash for an unchanged state); a step id found in two
    files is an error of the corpus, not of either file. ``progress`` counts files.
    """
    from themisto.recording.outputs import mask_machine_text as mask

    stats: list[StepStats] = []
    skipped: dict[Path, str] = {}
    seen: set[str] = set()
    for done, path in enumerate(paths):
        if progress is not None:
            progress("select", done, len(paths))
        mine: dict[str, StepStats] = {}
        previous: Step | None = None
        try:
            for step in iter_steps(path):
                key = example_id(step.trajectory_id, step.step)
                if key in mine:
                    raise TrajectoryError(f"{path}: step {key} occurs twice in the file")
                if previous is not None and step.state_hash == previous.state_hash and step.runtime != previous.runtime:
                    raise TrajectoryError(
                        f"{path}: step {key} has the state_hash of the step before, not its variables'"
                    )
                previous = step
                mine[key] = StepStats(
                    key,
                    step.step,
                    len(step.code),
                    len(mask(step.output) if mask_machine_text else step.output),
                    step.error is not None,
                    step.recording_stopped,
                    is_image_only(step.output),
                    is_figure_text(step.output),
                    shows_timing(step.code, step.output),
                    step.stable,
                    not step.code.strip(),
                    not step.output.strip(),
                )
        except TrajectoryError as exc:
            skipped[path] = str(exc)
            continue
        for key in mine:
            if key in seen:
                raise InputError(f"{path}: step {key} occurs twice (duplicate trajectory id or step number)")
            seen.add(key)
        stats.extend(mine.values())
    if progress is not None:
        progress("select", len(paths), len(paths))
    return stats, skipped


def select(paths: Sequence[Path], options: SelectionOptions, progress: Progress | None = None) -> Selection:
    """Apply the selection protocol and return the chosen example ids per task."""
    stats, skipped = scan(paths, progress, options.mask_machine_text)
    if not stats:
        if skipped:
            first = next(iter(skipped.values()))
            raise InputError(f"none of the {len(skipped)} trajectory file(s) is valid; the first: {first}")
        raise InputError("the trajectories hold no steps")
    import numpy as np  # here, not at the top: the CLI imports this module to build its parser

    max_code = float(np.quantile([s.code_chars for s in stats], options.quantile))
    max_output = float(np.quantile([s.output_chars for s in stats], options.quantile))
    if options.stable_only and not any(s.stable is not None for s in stats):
        raise OptionError(
            "{stable_only:True} needs stability annotations, and no step has them: re-execute the trajectories"
            " with the stability stage (themisto.recording.stability) first"
        )
    min_history = options.min_history or 0
    eligible_steps = [
        s
        for s in stats
        if s.code_chars <= max_code
        and s.output_chars <= max_output
        and (options.include_errors or not s.is_error)
        and not s.recording_stopped
        and (not options.stable_only or s.stable is True)
    ]
    selection = Selection(
        trajectories=len({s.example_id.rsplit("/", 1)[0] for s in stats}),
        steps=len(stats),
        errors=sum(s.is_error for s in stats),
        max_code_chars=max_code,
        max_output_chars=max_output,
        skipped=skipped,
    )
    output_stable = {s.example_id: s.stable for s in eligible_steps}
    shared: tuple[set[str], tuple[int, int, int]] | None = None  # the output-prediction draw (samples="shared")
    for task in TASKS:  # output prediction first, so a shared sample is drawn before next cell uses it
        candidates = [s for s in eligible_steps if _task_eligible(s, task, options)]
        full = [s.example_id for s in candidates]
        drawn = [s for s in candidates if s.step >= min_history]
        if options.sample == "all":
            chosen_task = TaskSelection(full, [s.example_id for s in drawn], None)
        else:
            if shared is None or options.samples == SEPARATE:
                lengths = {s.example_id: s.target_chars(task) for s in drawn}
                chosen, strata = stratified_sample(lengths, f"{options.seed}:{task}")
                shared = shared or (chosen, strata)
            else:
                chosen, strata = shared
            # the test split keeps the trajectory order of the full split
            chosen_task = TaskSelection(full, [i for i in full if i in chosen], strata)
        chosen_task.stability = {
            split: stability_counts(target_stable(task, output_stable[i]) for i in ids)
            for split, ids in (("test", chosen_task.test), ("full", chosen_task.full))
        }
        selection.tasks[task] = chosen_task
    return selection


def _task_eligible(stats: StepStats, task: str, options: SelectionOptions) -> bool:
    """Whether an eligible step makes an example of ``task``: a target that is not empty, not an image or
    figure (output prediction), not a measured duration (output prediction), unless the options keep these."""
    if not options.include_empty and stats.target_blank(task):
        return False
    if task != OUTPUT_PREDICTION:
        return True
    image = stats.image_only or (options.figure_text_as_image and stats.figure_text)
    return (options.include_images or not image) and (options.include_timing or not stats.timing)


def is_figure_text(output: str) -> bool:
    """Whether every line of an output is a figure's text stand-in (``<Figure size 640x480 with 1 Axes>``)."""
    return bool(output) and all(FIGURE_TEXT.fullmatch(line) for line in output.split("\n"))


def shows_timing(code: str, output: str) -> bool:
    """Whether a step measures time (``%time``, ``time.time()``, ``perf_counter``, ``tqdm``) and its output shows a
    duration (``1.2 ms``, ``3 s``): the rules :func:`themisto.recording.stability.instability_causes` names ``time`` by."""
    from themisto.recording.instability import CLOCK_CALL, DURATION

    return bool(CLOCK_CALL.search(code)) and bool(DURATION.search(output))


def stability_counts(flags: Iterable[bool | None]) -> tuple[int, int, int]:
    """How many of ``flags`` are True (stable), False (unstable) and None (unknown)."""
    counts = Counter(flags)
    return counts[True], counts[False], counts[None]


def stratified_sample(
    lengths: dict[str, int], seed: str, counts: tuple[int, int, int] = PAPER_STRATA
) -> tuple[set[str], tuple[int, int, int]]:
    """Draw ``counts`` ids from the rank quartiles Q1, Q2+Q3, Q4 of the target lengths."""
    ranked = sorted(lengths, key=lambda key: (lengths[key], key))
    n = len(ranked)
    q1_end, q3_end = round(n / 4), round(3 * n / 4)
    strata = [ranked[:q1_end], ranked[q1_end:q3_end], ranked[q3_end:]]
    rng = random.Random(seed)  # str seeds hash with SHA-512: stable across processes
    chosen: set[str] = set()
    for stratum, wanted in zip(strata, counts, strict=True):
        chosen.update(rng.sample(stratum, min(wanted, len(stratum))))
    return chosen, (len(strata[0]), len(strata[1]), len(strata[2]))


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


def kernel_environment(path: Path) -> tuple[tuple[str, str], ...]:
    """The kernel's Python and libraries' versions from a trajectory's provenance: ``(("python", "3.12.3"),
    ("numpy", "2.4.0"), ...)``; () when the trajectory has no provenance or it names no versions."""
    from themisto.recording.provenance import read_provenance

    provenance = read_provenance(path)
    if provenance is None:
        return ()
    python = (("python", provenance.python),) if provenance.python else ()
    return python + tuple(sorted(provenance.libraries.items()))


def iter_contexts(
    paths: Sequence[Path], max_context_chars: int, mask_machine_text: bool = True
) -> Iterator[StepContext]:
    """Second pass: every step of ``paths`` in trajectory order, with its history and previous step.

    ``max_context_chars`` bounds the history (0: the whole history); with ``mask_machine_text``, outputs
    (history and targets) are masked as :func:`themisto.recording.outputs.mask_machine_text` says.
    """
    from themisto.recording.outputs import mask_machine_text as mask

    for path in paths:
        environment = kernel_environment(path)
        window = HistoryWindow(max_context_chars)
        changes = VariableChanges()
        kinds = StepKinds()
        before: Step | None = None
        started = False  # a step of this trajectory has run
        for step in iter_steps(path):
            if step.restarted:
                before = None
                changes.clear()
                if started:
                    window.append(RESTART_CELL)
            runtime_changed = changes.steps(before.runtime) if before else []
            output = mask(step.output) if mask_machine_text else step.output
            kind = kinds.classify(step)
            yield StepContext(step, window.cells, window.dropped, before, kind, runtime_changed, environment, output)
            window.append(HistoryCell(step.code, output))
            changes.update(step)
            before, started = step, True


def iter_examples(
    paths: Sequence[Path], task: str, ids: Iterable[str], max_context_chars: int, mask_machine_text: bool = True
) -> Iterator[Example]:
    """The examples of ``task`` whose ids are in ``ids``, in trajectory order."""
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    wanted = set(ids)
    for context in iter_contexts(paths, max_context_chars, mask_machine_text):
        if context.example_id in wanted:
            yield context.example(task)
