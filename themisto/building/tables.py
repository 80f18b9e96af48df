"""The Themisto configs as Arrow tables, built column by column in one streaming pass.

:func:`iter_tables` reads the trajectories once (after :func:`themisto.building.selection.select`
has chosen the examples) and yields, batch after batch of steps, a table piece for
every config and split. Rows are never encoded one by one: a batch's columns are
collected as plain lists and turned into Arrow arrays once, and the columns the
six task configs have in common (ids, history, targets, the runtime state) are
built once for all of them. The placebo configs show the state
:class:`~themisto.building.placebo.PlaceboStates` chooses for each step, rendered
as the step's own runtime block would be. Memory is bounded by one batch, whatever the size of
the input.

Every table has exactly the Arrow schema of its config's ``datasets.Features``
(``features.arrow_schema``, whose metadata lets ``load_dataset`` restore the
features), so the same pieces feed the ``GeneratorBasedBuilder`` and the Parquet
writer of ``themisto build``.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import tempfile
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any, NamedTuple

import datasets
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from themisto.building.categories import Duplicates, runtime_only
from themisto.building.history import Example, HistoryCell, StepContext, iter_contexts
from themisto.building.placebo import KernelState, PlaceboStates, state_before
from themisto.building.prompts import RenderOptions, prompt_head, render_pairs
from themisto.building.selection import Selection, SelectionOptions
from themisto.exceptions import InputError
from themisto.progress import Progress
from themisto.trajectory import STEP_SCHEMA, VARIABLE_SCHEMA, SchemaField, Step, Variable, schema_of
from themisto.vocabulary import (
    CONFIG_NAMES,
    PLACEBO_OF_COLUMN,
    PLACEBO_SUFFIX,
    RUNTIME_ONLY_COLUMN,
    RUNTIME_SUFFIX,
    SPLITS,
    TASKS,
    TRAJECTORIES,
    TRAJECTORY_SPLIT,
    arm_of,
    task_of_config,
)

# per task and split: the example ids in it
SplitIds = dict[str, dict[str, set[str]]]

# Steps per batch, and rows per Parquet row group: the `datasets` writer's default batch size.
BATCH_ROWS = 1000

# A table type per schema field type; see themisto.trajectory, where the step schema is defined.
VALUE_TYPES: dict[type, str] = {str: "string", int: "int64", float: "float64", bool: "bool"}


def _feature(field: SchemaField) -> Any:
    """The ``datasets`` feature of one schema field."""
    if field.doc.as_json:
        return datasets.Value("string")
    if field.kind is dict:
        return {key: datasets.Value("string") for key in field.doc.keys}
    if field.kind is list:
        assert field.item is not None  # a list field's annotation names its item type
        if dataclasses.is_dataclass(field.item):
            return datasets.List(record_features(schema_of(field.item)))
        return datasets.List(datasets.Value(VALUE_TYPES[field.item]))
    return datasets.Value(VALUE_TYPES[field.kind])


def record_features(schema: tuple[SchemaField, ...]) -> dict[str, Any]:
    """The ``datasets`` features of a schema (the step or a variable), column by column."""
    return {field.column: _feature(field) for field in schema}


_VARIABLE = record_features(VARIABLE_SCHEMA)

TASK_FEATURES = datasets.Features(
    {
        "example_id": datasets.Value("string"),
        "trajectory_id": datasets.Value("string"),
        "step": datasets.Value("int64"),
        "history": datasets.List({"code": datasets.Value("string"), "output": datasets.Value("string")}),
        "history_dropped": datasets.Value("int64"),
        "code": datasets.Value("string"),
        "runtime": datasets.List(_VARIABLE),
        "memory_bytes_before": datasets.Value("int64"),
        "execution_time_before": datasets.Value("float64"),
        "runtime_text": datasets.Value("string"),
        "prompt": datasets.Value("string"),
        "target": datasets.Value("string"),
        "target_is_error": datasets.Value("bool"),
        "stable": datasets.Value("bool"),
        "output_kind": datasets.Value("string"),
        "step_kind": datasets.Value("string"),
        "duplicate_of": datasets.Value("string"),
        RUNTIME_ONLY_COLUMN: datasets.Value("bool"),
        PLACEBO_OF_COLUMN: datasets.Value("string"),
    }
)

TRAJECTORY_FEATURES = datasets.Features(record_features(STEP_SCHEMA))

_TASK_SCHEMA = TASK_FEATURES.arrow_schema
_TRAJECTORY_SCHEMA = TRAJECTORY_FEATURES.arrow_schema
# fields copied as they are; the others are converted: lists of records (the runtime's variables) to
# lists of rows, JSON-stored fields to text
_STEP_RECORDS = tuple(field.name for field in STEP_SCHEMA if dataclasses.is_dataclass(field.item))
_STEP_JSON = tuple((field.name, field.column) for field in STEP_SCHEMA if field.doc.as_json)
_STEP_SCALARS = tuple(field.name for field in STEP_SCHEMA if field.name not in _STEP_RECORDS and not field.doc.as_json)


def config_features(config: str) -> datasets.Features:
    """The features of a config: raw steps or task examples."""
    return TRAJECTORY_FEATURES if config == TRAJECTORIES else TASK_FEATURES


def config_splits(config: str) -> tuple[str, ...]:
    """The splits of a config: ``full`` for raw steps, ``test`` and ``full`` for a task."""
    return (TRAJECTORY_SPLIT,) if config == TRAJECTORIES else SPLITS


def variable_row(variable: Variable) -> dict[str, Any]:
    """A variable as a row of the ``runtime`` lists."""
    # the dataclass's own attribute dict, not a copy: the Arrow conversion reads the schema's
    # fields from it and ignores any other key, and nothing mutates a variable once parsed
    return vars(variable)


def trajectory_row(step: Step) -> dict[str, Any]:
    """A step as a row of the ``trajectories`` config."""
    row = {name: getattr(step, name) for name in _STEP_SCALARS}
    for name in _STEP_RECORDS:
        row[name] = [variable_row(v) for v in getattr(step, name)]
    for name, column in _STEP_JSON:
        row[column] = json.dumps(getattr(step, name), ensure_ascii=False, sort_keys=True)
    return row


# Batches the sending pass may have sent that the receiving one has not taken: beyond them the sender waits, so
# that a receiver held back leaves at most this many batch files (about 25 MB each) in the folder.
BATCHES_AHEAD = 2


@dataclass
class PassLink:
    """How the two passes of one build (``themisto build --jobs 2``) hand each other a batch's shared columns:
    messages over ``connection`` (both ways), from the pass that renders the prompt pairs to the other, naming
    Arrow files in ``folder``, and an acknowledgement back for each file taken (:func:`exchange_batch`)."""

    connection: Connection
    folder: Path
    untaken: int = 0  # on the sending side: batches sent and not acknowledged


# The column of a batch sent to the other pass that holds each step's prompt head (prompt_head).
_HEAD_COLUMN = "head"


class TablePiece(NamedTuple):
    """Consecutive rows of one split of one config."""

    config: str
    split: str
    table: pa.Table


class _TaskColumns:
    """The columns of one batch of task examples, shared by the six task configs."""

    def __init__(
        self,
        render: RenderOptions,
        splits: SplitIds,
        duplicates: dict[tuple[str, str], Duplicates],
        configs: Collection[str] = CONFIG_NAMES,
    ) -> None:
        self.render = render
        # the task configs whose tables are built, and their arms (ARM_SUFFIXES), whose columns are: without the
        # runtime arm the true prompt pairs are not rendered, and what the configs share, runtime_only included,
        # comes from the process that renders them (see iter_tables)
        self.configs = frozenset(config for config in configs if config != TRAJECTORIES)
        self.arms = frozenset(arm_of(config) for config in self.configs)
        self.pairs = RUNTIME_SUFFIX in self.arms
        if not self.pairs and "" in self.arms:
            raise ValueError("a pass without the runtime arm writes the placebo arm and the raw steps, no plain config")
        self.splits = splits
        self.duplicates = duplicates  # per (task, split), kept across batches
        self.example_ids: list[str] = []
        self.trajectory_ids: list[str] = []
        self.steps: list[int] = []
        self.history = _HistoryColumn()
        self.history_dropped: list[int] = []
        self.runtime: list[list[dict[str, Any]]] = []
        self.memory_before: list[int | None] = []
        self.execution_before: list[float | None] = []
        self.target_is_error: list[bool] = []
        self.output_kinds: list[str] = []
        self.step_kinds: list[str] = []
        # the placebo state of each step (see themisto.building.placebo); placebo_of is null without one
        self.placebo_runtime: list[list[dict[str, Any]]] = []
        self.placebo_memory: list[int | None] = []
        self.placebo_execution: list[float | None] = []
        self.placebo_of: list[str | None] = []
        # per task: code, target, runtime_text, prompt without and with runtime, placebo block and prompt
        self.by_task: dict[str, dict[str, list[str]]] = {
            task: {
                "code": [],
                "target": [],
                "runtime_text": [],
                "plain": [],
                "with_runtime": [],
                "placebo_text": [],
                "with_placebo": [],
            }
            for task in TASKS
        }
        self.runtime_only: dict[str, list[bool]] = {task: [] for task in TASKS}
        self.heads: list[str] = []  # per step: the start of its prompts (prompt_head), for a pass that sends them
        self.received: pa.RecordBatch | None = None  # the shared columns, where another pass sent them
        # per task, as the target's stability differs: an output may not reproduce, code always does
        self.stable: dict[str, list[bool | None]] = {task: [] for task in TASKS}
        # per task and split: the earlier example of the split with the same (code, target)
        self.duplicate_of: dict[str, dict[str, list[str | None]]] = {task: {s: [] for s in SPLITS} for task in TASKS}

    def __len__(self) -> int:
        return len(self.example_ids)

    def add(self, context: StepContext, runtime_rows: list[dict[str, Any]], placebo: KernelState | None) -> None:
        """Add the examples of one step; ``runtime_rows`` is the state before it as variable rows.

        ``placebo`` is the state its placebo block shows (None: none other known, the block is the true one).
        """
        examples = [context.example(task) for task in TASKS]
        placebo_arm = PLACEBO_SUFFIX in self.arms
        # every prompt is rendered without the step's head (the introduction and the history, about 12 KB), which
        # _prompts puts in front in Arrow: a pass without the prompt pairs receives the heads from the pass that
        # renders them (exchange_batch)
        head = prompt_head(examples[0]) if self.pairs else ""
        # the placebo examples hold the placebo state: rendered alike, they differ from the runtime prompt in the
        # block alone; without a placebo state the placebo block is the true one
        pairs = render_pairs(examples, self.render, "") if self.pairs or not placebo or not placebo_arm else None
        self.example_ids.append(context.example_id)
        self.history.add(context.history, context.history_dropped, context.step.trajectory_id)
        placebos = None
        if placebo_arm:
            placebos = render_pairs([_with_state(e, placebo) for e in examples], self.render, "") if placebo else pairs
            assert placebos is not None  # the true pairs are rendered where there is no placebo state
            self.placebo_runtime.append(placebo.rows if placebo else runtime_rows)
            self.placebo_memory.append(placebo.memory_bytes if placebo else examples[0].memory_bytes_before)
            self.placebo_execution.append(placebo.execution_time if placebo else examples[0].execution_time_before)
            self.placebo_of.append(placebo.example_id if placebo else None)
            for example, placebo_pair in zip(examples, placebos):
                self.by_task[example.task]["placebo_text"].append(placebo_pair.runtime_text)
                self.by_task[example.task]["with_placebo"].append(placebo_pair.with_runtime)
        if not self.pairs:
            return
        assert pairs is not None  # rendered above
        step = context.step
        self.heads.append(head)
        self.trajectory_ids.append(step.trajectory_id)
        self.steps.append(step.step)
        self.history_dropped.append(context.history_dropped)
        self.runtime.append(runtime_rows)
        self.memory_before.append(examples[0].memory_bytes_before)
        self.execution_before.append(examples[0].execution_time_before)
        self.target_is_error.append(examples[0].target_is_error)
        self.output_kinds.append(examples[0].output_kind)
        self.step_kinds.append(examples[0].step_kind)
        for example, pair in zip(examples, pairs):
            self.stable[example.task].append(example.stable)
            columns = self.by_task[example.task]
            columns["code"].append(example.code)
            columns["target"].append(example.target)
            columns["runtime_text"].append(pair.runtime_text)
            columns["plain"].append(pair.without_runtime)
            columns["with_runtime"].append(pair.with_runtime)
            self.runtime_only[example.task].append(
                runtime_only(example.target, pair.runtime_text, pair.without_runtime, head)
            )
            for split, ids in self.splits[example.task].items():
                earlier = None
                if example.example_id in ids:
                    earlier = self.duplicates[example.task, split].first(
                        example.trajectory_id, example.example_id, example.code, example.target
                    )
                self.duplicate_of[example.task][split].append(earlier)

    @functools.cached_property
    def shared(self) -> dict[str, pa.Array]:
        """The columns every task config has, and per task its own that no arm changes (``task/name``): built
        here, or received with the batch where this pass renders no prompt pairs (:func:`exchange_batch`)."""
        if self.received is not None:
            return {**{name: self.received.column(name) for name in self.received.schema.names}, **self._history}
        shared = {
            "example_id": pa.array(self.example_ids, pa.string()),
            "trajectory_id": pa.array(self.trajectory_ids, pa.string()),
            "step": pa.array(self.steps, pa.int64()),
            **self._history,
            "history_dropped": pa.array(self.history_dropped, pa.int64()),
            "target_is_error": pa.array(self.target_is_error, pa.bool_()),
            "output_kind": pa.array(self.output_kinds, pa.string()),
            "step_kind": pa.array(self.step_kinds, pa.string()),
        }
        for task, columns in self.by_task.items():
            shared[f"{task}/code"] = pa.array(columns["code"], pa.string())
            shared[f"{task}/target"] = pa.array(columns["target"], pa.string())
            shared[f"{task}/stable"] = pa.array(self.stable[task], pa.bool_())
            for split in SPLITS:
                shared[f"{task}/duplicate_of/{split}"] = pa.array(self.duplicate_of[task][split], pa.string())
            shared[f"{task}/{RUNTIME_ONLY_COLUMN}"] = pa.array(self.runtime_only[task], pa.bool_())
        return shared

    @property
    def _history(self) -> dict[str, pa.Array]:
        """The history column, built in each pass from the cells its steps' windows hold (not sent)."""
        return {"history": self.history.array(_TASK_SCHEMA.field("history").type)}

    @functools.cached_property
    def heads_column(self) -> pa.Array:
        """Each step's prompt head (prompt_head), converted once for every prompt column, or received."""
        if self.received is not None:
            return self.received.column(_HEAD_COLUMN)
        return pa.array(self.heads, pa.string())

    def _prompts(self, rendered: list[str], rows: _Rows) -> pa.Array:
        """A prompt column of ``rows`` from its prompts as rendered here, without their heads, which are put in
        front in Arrow: a batch's prompts are about 12 MB, which a concatenation in Python and a conversion
        copied again for each column (20 ms a column, against 3.4 for the join)."""
        prompts = pa.array(rows.values(rendered), pa.string())
        return pc.binary_join_element_wise(rows.array(self.heads_column), prompts, "")

    @functools.cached_property
    def _runtimes(self) -> dict[str, pa.Array]:
        """The state columns of the runtime and placebo arms, every row of the batch: converted once for both
        tasks, whose rows are taken from them."""
        runtime_type = _TASK_SCHEMA.field("runtime").type
        arrays = {}
        if RUNTIME_SUFFIX in self.arms:
            arrays[RUNTIME_SUFFIX] = pa.array(self.runtime, runtime_type)
        if PLACEBO_SUFFIX in self.arms:
            arrays[PLACEBO_SUFFIX] = pa.array(self.placebo_runtime, runtime_type)
        return arrays

    def tables(self, full: dict[str, list[int]]) -> dict[str, pa.Table]:
        """One table per task config, of the rows of the batch in its task's ``full`` split (the positions
        ``full`` names per task); ``duplicate_of`` as in that split.

        Each task's columns are built from its own rows: the prompts converted only for them, the shared
        columns (the history among them, about 12 MB a batch) taken once per task, not once per config."""
        schema = _TASK_SCHEMA
        shared = self.shared
        runtime_type = schema.field("runtime").type
        tables = {}
        for task, columns in self.by_task.items():
            rows = _Rows(full[task], len(self))
            if not rows.count:
                continue
            count = rows.count
            # the configs without runtime carry an empty state, no memory, no timing and no runtime block; each
            # arm's columns are built only where the arm is
            no_placebo = {PLACEBO_OF_COLUMN: pa.nulls(count, pa.string())}
            common = {name: rows.array(shared[name]) for name in schema.names if name in shared}
            common.update(
                {
                    "code": rows.array(shared[f"{task}/code"]),
                    "target": rows.array(shared[f"{task}/target"]),
                    "stable": rows.array(shared[f"{task}/stable"]),
                    "duplicate_of": rows.array(shared[f"{task}/duplicate_of/full"]),
                    RUNTIME_ONLY_COLUMN: rows.array(shared[f"{task}/{RUNTIME_ONLY_COLUMN}"]),
                }
            )
            arms: dict[str, dict[str, pa.Array]] = {}
            if "" in self.arms:
                arms[task] = {
                    "runtime": pa.array([[]] * count, runtime_type),
                    "memory_bytes_before": pa.nulls(count, pa.int64()),
                    "execution_time_before": pa.nulls(count, pa.float64()),
                    "runtime_text": pa.array([""] * count, pa.string()),
                    **no_placebo,
                    "prompt": self._prompts(columns["plain"], rows),
                }
            if RUNTIME_SUFFIX in self.arms:
                arms[task + RUNTIME_SUFFIX] = {
                    "runtime": rows.array(self._runtimes[RUNTIME_SUFFIX]),
                    "memory_bytes_before": pa.array(rows.values(self.memory_before), pa.int64()),
                    "execution_time_before": pa.array(rows.values(self.execution_before), pa.float64()),
                    **no_placebo,
                    "runtime_text": pa.array(rows.values(columns["runtime_text"]), pa.string()),
                    "prompt": self._prompts(columns["with_runtime"], rows),
                }
            if PLACEBO_SUFFIX in self.arms:
                arms[task + PLACEBO_SUFFIX] = {
                    "runtime": rows.array(self._runtimes[PLACEBO_SUFFIX]),
                    "memory_bytes_before": pa.array(rows.values(self.placebo_memory), pa.int64()),
                    "execution_time_before": pa.array(rows.values(self.placebo_execution), pa.float64()),
                    PLACEBO_OF_COLUMN: pa.array(rows.values(self.placebo_of), pa.string()),
                    "runtime_text": pa.array(rows.values(columns["placebo_text"]), pa.string()),
                    "prompt": self._prompts(columns["with_placebo"], rows),
                }
            for config, own in arms.items():
                if config not in self.configs:  # a pass may write one task's config of an arm
                    continue
                table = {**common, **own}
                tables[config] = pa.Table.from_pydict({name: table[name] for name in schema.names}, schema=schema)
        return tables


class _HistoryColumn:
    """The history column of a batch, from each cell once and each step's window as a run of them.

    A step's window is the previous step's with a cell or two more at the end and maybe fewer at the start
    (:class:`~themisto.building.history.HistoryWindow`): a batch's 1,000 steps show about 86,000 cells, of
    about 1,100 distinct ones. The distinct cells are converted to Arrow once and the column taken from them,
    in a seventh of the time the 86,000 took.
    """

    def __init__(self) -> None:
        self.codes: list[str] = []
        self.outputs: list[str] = []
        self.starts: list[int] = []  # per step: the position in codes of its window's first cell
        self.counts: list[int] = []  # per step: its window's cells
        # the run of cells held last: the position in codes of the trajectory's first cell (which may not be held),
        # the index in the trajectory after its last cell held and that cell, to tell a continued run from a new one
        self._trajectory: str | None = None
        self._base = 0
        self._end = 0
        self._last: HistoryCell | None = None

    def add(self, history: list[HistoryCell], dropped: int, trajectory_id: str) -> None:
        """The window of the next step: its cells, the ``dropped`` cells of its trajectory before them."""
        start, end = dropped, dropped + len(history)
        continued = (
            trajectory_id == self._trajectory
            and start <= self._end <= end
            and (self._end == start or history[self._end - start - 1] is self._last)
        )
        if not continued:  # a new trajectory, or steps left out since the last window held
            self._trajectory, self._base, self._end = trajectory_id, len(self.codes) - start, start
        new = history[self._end - start :]
        if new:
            self.codes.extend([cell.code for cell in new])
            self.outputs.extend([cell.output for cell in new])
            self._last = new[-1]
        self._end = end
        self.starts.append(self._base + start)
        self.counts.append(len(history))

    def array(self, history_type: pa.DataType) -> pa.Array:
        """The column, one list of cells per step added."""
        counts = np.array(self.counts, np.int64)
        offsets = np.zeros(len(counts) + 1, np.int64)
        np.cumsum(counts, out=offsets[1:])
        # each step's run of positions: 0, 1, ... along the column, shifted by where its window starts
        positions = np.arange(offsets[-1]) - np.repeat(offsets[:-1] - np.array(self.starts, np.int64), counts)
        cells = pa.StructArray.from_arrays(
            [pa.array(self.codes, pa.string()).take(positions), pa.array(self.outputs, pa.string()).take(positions)],
            fields=list(history_type.value_type),
        )
        return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), cells, type=history_type)


class _Rows:
    """The rows of a batch one task's tables hold: ``positions`` among its ``total`` rows, in order."""

    def __init__(self, positions: list[int], total: int) -> None:
        self.count = len(positions)
        self._positions = None if self.count == total else positions  # None: every row, nothing to pick

    def values(self, values: list[Any]) -> list[Any]:
        """The rows' entries of a column of every row, as a list."""
        return values if self._positions is None else [values[i] for i in self._positions]

    def array(self, array: pa.Array) -> pa.Array:
        """The rows' entries of an Arrow column of every row."""
        return array if self._positions is None else array.take(self._positions)


def _with_state(example: Example, state: KernelState) -> Example:
    """``example`` with ``state`` as the runtime state before its step."""
    return dataclasses.replace(
        example,
        runtime=state.variables,
        memory_bytes_before=state.memory_bytes,
        execution_time_before=state.execution_time,
        runtime_changed=state.changed,
    )


def iter_tables(
    paths: Sequence[Path],
    chosen: Selection,
    selection: SelectionOptions,
    render: RenderOptions,
    configs: Collection[str] = CONFIG_NAMES,
    link: PassLink | None = None,
    progress: Progress | None = None,
) -> Iterator[TablePiece]:
    """The configs ``configs`` (every one by default) of a build as table pieces, in trajectory order, in one pass.

    ``chosen`` is the outcome of :func:`themisto.building.selection.select` over the same ``paths``
    with ``selection``, whose history budget and masking the examples follow and whose seed draws the
    placebo states. Every config's pieces are those a pass over all configs yields, whatever ``configs``
    holds, so two processes can each write some of the configs of one build (``themisto build --jobs``).
    A pass whose configs lack the runtime arm (the placebo configs and the raw steps at most) receives, batch
    after batch over ``link``, what the task configs share (ids, targets, the ``runtime_only`` column, which
    needs the runtime blocks) and each step's prompt head from a pass that has it, which sends them there
    (:func:`exchange_batch`); each pass builds the history column itself (:class:`_HistoryColumn`). ``progress`` is told
    the steps read (``"write"``) after each batch's pieces are taken.
    """
    splits: SplitIds = {
        task: {"test": set(chosen.tasks[task].test), "full": set(chosen.tasks[task].full)} for task in TASKS
    }
    eligible = set().union(*(ids["full"] for ids in splits.values()))
    duplicates = {(task, split): Duplicates() for task in TASKS for split in SPLITS}
    steps: list[dict[str, Any]] = []
    examples = _TaskColumns(render, splits, duplicates, configs)
    if not examples.pairs and link is None:
        raise ValueError("a pass without the runtime arm needs the link that sends it what the configs share")
    placebos = PlaceboStates(selection.seed, render.max_runtime_chars) if PLACEBO_SUFFIX in examples.arms else None
    rows = TRAJECTORIES in configs
    before: list[dict[str, Any]] = []  # the previous step's snapshot as variable rows
    count = 0
    contexts = iter_contexts(paths, selection, chosen.validated)
    for count, context in enumerate(contexts, 1):  # noqa: B007 (read after the loop)
        # the state before the step is the previous step's snapshot, converted for that step's row
        if context.before is None:
            before = []
        if placebos is not None:
            state = state_before(context, before)
            if context.example_id in eligible:
                examples.add(context, before, placebos.choose(context, state))
            placebos.add(state)
        elif context.example_id in eligible:
            examples.add(context, before, None)
        if rows:
            row = trajectory_row(context.step)
            steps.append(row)
            before = row["runtime"]
        else:
            before = [variable_row(v) for v in context.step.runtime]
        if count % BATCH_ROWS == 0:
            yield from _pieces(steps, examples, splits, configs, link)
            if progress is not None:
                progress("write", count, chosen.steps)
            steps, examples = [], _TaskColumns(render, splits, duplicates, configs)
    if count % BATCH_ROWS:
        yield from _pieces(steps, examples, splits, configs, link)
        if progress is not None:
            progress("write", count, chosen.steps)
    if count != chosen.steps:
        # e.g. a recording still appending to a file: the selection no longer describes the input
        raise InputError(f"the trajectories changed during the build ({chosen.steps} steps, then {count}); build again")


def exchange_batch(examples: _TaskColumns, link: PassLink) -> None:
    """Send a batch's shared columns over ``link``, or receive them where the batch has no prompt pairs.

    They go as an Arrow file in ``link.folder``, named in a message over ``link.connection``: the receiving pass
    maps it (no copy, no parsing), deletes it and acknowledges. A batch's heads are about 12 KB a
    step, which a pipe copies twice and would make the sender wait for the receiver at every batch.
    """
    if examples.pairs:
        while link.untaken >= BATCHES_AHEAD:  # an end of file here is the receiver's end: its error is the build's
            link.connection.recv_bytes()
            link.untaken -= 1
        sent = {name: column for name, column in examples.shared.items() if name != "history"}  # built there too
        batch = pa.RecordBatch.from_pydict({**sent, _HEAD_COLUMN: examples.heads_column})
        handle, name = tempfile.mkstemp(prefix=".batch-", suffix=".arrow", dir=link.folder)
        with os.fdopen(handle, "wb") as sink, pa.ipc.new_file(sink, batch.schema) as writer:
            writer.write_batch(batch)
        link.connection.send_bytes(Path(name).name.encode())
        link.untaken += 1
        return
    path = link.folder / Path(link.connection.recv_bytes().decode()).name
    try:
        received = pa.ipc.open_file(pa.memory_map(str(path))).get_batch(0)
    finally:
        path.unlink(missing_ok=True)  # the mapping lasts as long as the batch's columns are used
    if not received.column("example_id").equals(pa.array(examples.example_ids, pa.string())):  # ids and count
        raise RuntimeError("the build's two passes disagree on a batch's examples")
    examples.received = received
    try:
        link.connection.send_bytes(b"")  # taken: the sender may send one more
    except BrokenPipeError:  # it has sent its last batch and closed its end (had it failed, the next batch says so)
        pass


def _pieces(
    steps: list[dict[str, Any]],
    examples: _TaskColumns,
    splits: SplitIds,
    configs: Collection[str],
    link: PassLink | None,
) -> Iterator[TablePiece]:
    if TRAJECTORIES in configs:
        yield TablePiece(TRAJECTORIES, TRAJECTORY_SPLIT, pa.Table.from_pylist(steps, schema=_TRAJECTORY_SCHEMA))
    if link is not None:
        exchange_batch(examples, link)
    if not len(examples):
        return
    ids = examples.example_ids
    duplicate_column = _TASK_SCHEMA.get_field_index("duplicate_of")
    full = {task: [i for i, key in enumerate(ids) if key in splits[task]["full"]] for task in TASKS}
    for config, table in examples.tables(full).items():
        task = task_of_config(config)
        yield TablePiece(config, "full", table)
        # positions in the full split's table, whose rows are those of `full`
        in_test = [row for row, i in enumerate(full[task]) if ids[i] in splits[task]["test"]]
        if in_test:
            # duplicates are counted within the split: the test split has its own first examples
            test_duplicates = examples.shared[f"{task}/duplicate_of/test"].take([full[task][row] for row in in_test])
            yield TablePiece(
                config,
                "test",
                table.take(in_test).set_column(duplicate_column, "duplicate_of", test_duplicates),
            )
