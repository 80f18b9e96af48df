"""Turn trajectories into the two Themisto tasks: output prediction and next-cell prediction.

For step t of a trajectory one example per task is made:

- ``output_prediction``: the history before t, the code of step t and the
  runtime state before t; the target is the output of step t.
- ``next_cell_prediction``: the same history and runtime state; the target is
  the code of step t (so the example's ``code`` is empty).

The runtime state before t is the snapshot recorded *after* step t-1, never the
one of step t (that would leak the answer). It is empty for the first step of a
trajectory and for a step that has ``restarted`` set.

Restarts bound the history. The history of step t holds only the steps run in
the same kernel session as t, i.e. after the last restart at or before t. The
prompt then describes one live session consistently: cells whose effects were
wiped by a restart are not shown next to a runtime state that no longer holds
them. The step that restarts the kernel therefore has an empty history and an
empty runtime, like the first step of a trajectory; such examples are kept (the
code alone often decides the output, e.g. of imports).

The history is then cut to ``max_context_chars`` (the sum of the code and
output lengths of its cells) from the oldest end, one whole cell at a time, so a
cell is never cut in the middle; it stays a contiguous run of the most recent
cells.

Selection follows the paper's protocol, each rule an option:

1. Steps whose code or output is longer than the ``quantile`` (0.99) quantile
   of all steps of all input trajectories are not eligible, for either task.
2. Steps whose output is an exception are not eligible unless
   ``include_errors`` (the target is then the recorded output, which ends with
   the ``EName: evalue`` line).
3. Steps whose output shows only images (plots: every line an ``<image/png>``
   placeholder) are not eligible for output prediction unless
   ``include_images``: such a target is a constant that says nothing about the
   state. They stay eligible for next-cell prediction, whose target is code.
4. With ``stable_only``, only steps marked ``stable`` (output identical across
   re-executions) are eligible, for either task (one eligibility rule for both).
5. ``sample="paper"``: 200 examples per task, stratified by target length
   (output length, or code length for next cell): the eligible examples are
   ranked by (target length, example id) and cut into four equal rank
   quartiles; 10 are drawn from Q1, 180 from Q2 and Q3 together, 10 from Q4,
   with ``random.Random`` seeded by the seed and the task name. A stratum with
   fewer examples than asked contributes all it has. ``sample="all"`` keeps
   every eligible example in the test split as well.

An example's ``stable`` says whether its *target* is reproducible: for output
prediction the step's ``stable`` flag (None when unknown), for next-cell
prediction always True, as the target is code (:func:`target_stable`).

Building streams: a first pass (:func:`select`) collects only lengths and flags
per step; a second pass (:func:`iter_contexts`) re-reads one trajectory at a
time and yields, for every step, what a model sees before it. The history
window slides along the session (:class:`HistoryWindow`), so a step costs the
same however long its session is.
"""

from __future__ import annotations

import random
from collections import Counter
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from themisto.exceptions import InputError, OptionError
from themisto.progress import Progress
from themisto.trajectory import Step, Variable, is_image_only, iter_steps
from themisto.vocabulary import OUTPUT_PREDICTION, TASKS

SAMPLES = ("paper", "all")
# Examples drawn from the target-length quartiles Q1, Q2+Q3 and Q4 (the paper's 10/180/10).
PAPER_STRATA = (10, 180, 10)


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

    def __post_init__(self) -> None:
        if self.sample not in SAMPLES:
            raise InputError(f"unknown sample {self.sample!r}; expected one of {', '.join(SAMPLES)}")
        if not 0.0 < self.quantile <= 1.0:
            raise OptionError("{quantile} must be in (0, 1], got {got}", got=self.quantile)
        if self.max_context_chars < 0:
            raise OptionError("{max_context_chars} must be >= 0, got {got}", got=self.max_context_chars)


@dataclass(frozen=True)
class HistoryCell:
    """One executed cell shown to the model: its code and plain-text output."""

    code: str
    output: str

    @property
    def chars(self) -> int:
        """What the cell costs of the history budget: its code and output lengths."""
        return len(self.code) + len(self.output)


@dataclass
class Example:
    """One task example before rendering."""

    task: str
    example_id: str
    trajectory_id: str
    step: int
    history: list[HistoryCell]
    history_dropped: int  # older cells of the session left out by the context budget
    code: str
    runtime: list[Variable]
    memory_bytes_before: int | None
    target: str
    target_is_error: bool
    stable: bool | None  # the target is reproducible across re-executions (target_stable)


@dataclass(frozen=True, slots=True)  # one per input step: slots keep selection memory small
class StepStats:
    """What selection needs to know about a step, without its payload."""

    example_id: str
    code_chars: int
    output_chars: int
    is_error: bool
    image_only: bool  # the output shows nothing but images (is_image_only)
    stable: bool | None  # the step's output, as ``Step.stable``

    def target_chars(self, task: str) -> int:
        return self.output_chars if task == "output_prediction" else self.code_chars


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


def example_id(trajectory_id: str, step: int) -> str:
    """The id of the examples of one step: ``<trajectory_id>/<step>``, the same in every task config."""
    return f"{trajectory_id}/{step}"


def target_stable(task: str, output_stable: bool | None) -> bool | None:
    """Whether the target of ``task`` reproduces across re-executions: code always does, an output as marked."""
    return output_stable if task == "output_prediction" else True


def scan(paths: Sequence[Path], progress: Progress | None = None) -> list[StepStats]:
    """First pass: lengths and flags of every step, in trajectory-file order; ``progress`` counts files."""
    stats: list[StepStats] = []
    seen: set[str] = set()
    for done, path in enumerate(paths):
        if progress is not None:
            progress("select", done, len(paths))
        for step in iter_steps(path):
            key = example_id(step.trajectory_id, step.step)
            if key in seen:
                raise InputError(f"{path}: step {key} occurs twice (duplicate trajectory id or step number)")
            seen.add(key)
            stats.append(
                StepStats(
                    key,
                    len(step.code),
                    len(step.output),
                    step.error is not None,
                    is_image_only(step.output),
                    step.stable,
                )
            )
    if progress is not None:
        progress("select", len(paths), len(paths))
    return stats


def select(paths: Sequence[Path], options: SelectionOptions, progress: Progress | None = None) -> Selection:
    """Apply the selection protocol and return the chosen example ids per task."""
    stats = scan(paths, progress)
    if not stats:
        raise InputError("the trajectories hold no steps")
    import numpy as np  # here, not at the top: the CLI imports this module to build its parser

    max_code = float(np.quantile([s.code_chars for s in stats], options.quantile))
    max_output = float(np.quantile([s.output_chars for s in stats], options.quantile))
    if options.stable_only and not any(s.stable is not None for s in stats):
        raise OptionError(
            "{stable_only:True} needs stability annotations, and no step has them: re-execute the trajectories"
            " with the stability stage (themisto.recording.stability) first"
        )
    eligible = [
        s
        for s in stats
        if s.code_chars <= max_code
        and s.output_chars <= max_output
        and (options.include_errors or not s.is_error)
        and (not options.stable_only or s.stable is True)
    ]
    selection = Selection(
        trajectories=len({s.example_id.rsplit("/", 1)[0] for s in stats}),
        steps=len(stats),
        errors=sum(s.is_error for s in stats),
        max_code_chars=max_code,
        max_output_chars=max_output,
    )
    output_stable = {s.example_id: s.stable for s in eligible}
    for task in TASKS:
        candidates = [s for s in eligible if options.include_images or task != OUTPUT_PREDICTION or not s.image_only]
        full = [s.example_id for s in candidates]
        if options.sample == "all":
            chosen_task = TaskSelection(full, list(full), None)
        else:
            lengths = {s.example_id: s.target_chars(task) for s in candidates}
            chosen, strata = stratified_sample(lengths, f"{options.seed}:{task}")
            # the test split keeps the trajectory order of the full split
            chosen_task = TaskSelection(full, [i for i in full if i in chosen], strata)
        chosen_task.stability = {
            split: stability_counts(target_stable(task, output_stable[i]) for i in ids)
            for split, ids in (("test", chosen_task.test), ("full", chosen_task.full))
        }
        selection.tasks[task] = chosen_task
    return selection


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
    """The most recent whole cells of a kernel session whose total size fits a character budget.

    The window is the longest suffix of the session within the budget. Appending a
    cell can only move its start forward, so the window slides in O(1) amortised time
    per cell instead of being recut from the whole session at every step.
    """

    def __init__(self, budget: int) -> None:
        self.budget = budget
        self.clear()

    def clear(self) -> None:
        """Start a new, empty session (a kernel restart)."""
        self._cells: list[HistoryCell] = []
        self._start = 0  # index in _cells of the oldest cell in the window
        self._used = 0  # characters of the cells in the window
        self._forgotten = 0  # cells of the session already discarded from _cells

    def append(self, cell: HistoryCell) -> None:
        """Add the session's newest cell, dropping the oldest ones that no longer fit."""
        self._cells.append(cell)
        self._used += cell.chars
        while self._used > self.budget:
            self._used -= self._cells[self._start].chars
            self._start += 1
        if self._start > 1024 and self._start * 2 > len(self._cells):
            # keep memory bounded by the window, not by the session's length
            del self._cells[: self._start]
            self._forgotten += self._start
            self._start = 0

    @property
    def cells(self) -> list[HistoryCell]:
        """The cells of the window, oldest first."""
        return self._cells[self._start :]

    @property
    def dropped(self) -> int:
        """Older cells of the session left out by the budget."""
        return self._forgotten + self._start


@dataclass
class StepContext:
    """A step and what a model is shown before it: the session history and the previous step."""

    step: Step
    history: list[HistoryCell]
    history_dropped: int
    before: Step | None  # the previous step of the same kernel session; None after a restart

    @property
    def example_id(self) -> str:
        return example_id(self.step.trajectory_id, self.step.step)

    def example(self, task: str) -> Example:
        """The example of ``task`` for this step."""
        step, before = self.step, self.before
        return Example(
            task=task,
            example_id=self.example_id,
            trajectory_id=step.trajectory_id,
            step=step.step,
            history=self.history,
            history_dropped=self.history_dropped,
            code=step.code if task == "output_prediction" else "",
            runtime=before.runtime if before else [],
            memory_bytes_before=before.memory_bytes if before else None,
            target=step.output if task == "output_prediction" else step.code,
            target_is_error=step.error is not None,
            stable=target_stable(task, step.stable),
        )


def iter_contexts(paths: Sequence[Path], max_context_chars: int) -> Iterator[StepContext]:
    """Second pass: every step of ``paths`` in trajectory order, with its history and previous step."""
    for path in paths:
        window = HistoryWindow(max_context_chars)
        before: Step | None = None
        for step in iter_steps(path):
            if step.restarted:
                window.clear()
                before = None
            yield StepContext(step, window.cells, window.dropped, before)
            window.append(HistoryCell(step.code, step.output))
            before = step


def iter_examples(paths: Sequence[Path], task: str, ids: Iterable[str], max_context_chars: int) -> Iterator[Example]:
    """The examples of ``task`` whose ids are in ``ids``, in trajectory order."""
    if task not in TASKS:
        raise InputError(f"unknown task {task!r}; expected one of {', '.join(TASKS)}")
    wanted = set(ids)
    for context in iter_contexts(paths, max_context_chars):
        if context.example_id in wanted:
            yield context.example(task)
