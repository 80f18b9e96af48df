"""A batch's history column, built from each cell once, holds every step's window exactly."""

from __future__ import annotations

import random
from pathlib import Path

import pyarrow as pa
import pytest
from synthetic import synthetic_steps, write_steps

from themisto.building.history import RESTART_CELL, HistoryCell, iter_contexts
from themisto.building.selection import SelectionOptions
from themisto.building.tables import _TASK_SCHEMA, _HistoryColumn

HISTORY_TYPE = _TASK_SCHEMA.field("history").type


def _flattened(windows: list[list[HistoryCell]]) -> pa.Array:
    """The column as every cell of every window converted: what the built one must equal."""
    cells = [{"code": cell.code, "output": cell.output} for window in windows for cell in window]
    offsets = [0]
    for window in windows:
        offsets.append(offsets[-1] + len(window))
    values = pa.array(cells, HISTORY_TYPE.value_type)
    return pa.ListArray.from_arrays(pa.array(offsets, pa.int32()), values, type=HISTORY_TYPE)


@pytest.mark.parametrize(("budget", "kept"), [(300, 1.0), (300, 0.3), (2_000, 0.05), (0, 0.5)])
def test_the_column_equals_the_windows_flattened(tmp_path: Path, budget: int, kept: float) -> None:
    # three trajectories with restarts, windows that slide (a small budget) or grow (0: no budget), and steps left
    # out at random, so that a window may start past every cell held (a new run) or add many cells at once
    paths = [
        write_steps(tmp_path / f"{name}.jsonl", synthetic_steps(name, 300, seed=3, restart_rate=0.05))
        for name in ("a", "b", "c")
    ]
    draw = random.Random(f"{budget}:{kept}")
    column, windows = _HistoryColumn(), []
    shown: set[tuple[str, int]] = set()
    for context in iter_contexts(paths, SelectionOptions(max_context_chars=budget)):
        if draw.random() < kept:
            column.add(context.history, context.history_dropped, context.step.trajectory_id)
            windows.append(context.history)
            start = context.history_dropped
            shown.update((context.step.trajectory_id, i) for i in range(start, start + len(context.history)))
    assert any(RESTART_CELL in window for window in windows)
    built = column.array(HISTORY_TYPE)
    assert built.equals(_flattened(windows))
    # each cell of a trajectory once, not once per window showing it
    assert len(column.codes) == len(shown) < sum(map(len, windows))


def test_a_window_of_another_trajectory_is_a_new_run_even_where_its_indices_continue() -> None:
    # the same cell indices in two trajectories: the second's cells are its own, not the first's held ones
    first = [HistoryCell(f"a{i}", "") for i in range(4)]
    second = [HistoryCell(f"b{i}", "") for i in range(6)]
    column = _HistoryColumn()
    column.add(first[:2], 0, "t")
    column.add(first[:4], 0, "t")
    column.add(second[1:6], 1, "u")  # starts within the first's indices, ends past them
    column.add(second[2:6], 2, "u")
    windows = [first[:2], first[:4], second[1:6], second[2:6]]
    assert column.array(HISTORY_TYPE).equals(_flattened(windows))


def test_a_window_whose_earlier_cells_are_other_objects_is_a_new_run() -> None:
    # one trajectory id, indices that continue, but the cell before the new ones is not the one held: read afresh
    column = _HistoryColumn()
    held = [HistoryCell("x", "1"), HistoryCell("y", "2")]
    other = [HistoryCell("p", "3"), HistoryCell("q", "4"), HistoryCell("r", "5")]
    column.add(held, 0, "t")
    column.add(other, 0, "t")
    assert column.array(HISTORY_TYPE).equals(_flattened([held, other]))


def test_an_empty_batch_has_an_empty_column() -> None:
    built = _HistoryColumn().array(HISTORY_TYPE)
    assert len(built) == 0 and built.type == HISTORY_TYPE
