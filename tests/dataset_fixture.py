"""A small dataset made by the real builder, for the lm-eval tests and the start-up benchmark.

Hand-written notebook sessions are written as trajectory JSONL files the way
the recorder writes them (each step carries the user variables after the cell,
described by the kernel-side snapshot code, and their state hash), then built
with :func:`themisto.building.parquet.build_dataset` into Parquet files plus a dataset
card. Expected rows are read back from the build's Parquet (:func:`task_rows`),
never rendered here, so the tests see exactly what the builder wrote.

The cells are chosen so that each baseline has something to score: cells
without output (empty targets), re-run cells (next cell equals the last one),
cells that display a variable (the runtime repr is the output). The last
session is long and regular so that the paper sample (at most 10 examples
from each outer quartile of target lengths) leaves examples out: ``test`` is
then a strict subset of ``full``, and a run on the wrong split shows.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

from themisto.building.card_reading import parquet_path
from themisto.building.parquet import build_dataset
from themisto.building.selection import SelectionOptions
from themisto.building.summary import BuildSummary
from themisto.kernel.inside import snapshot
from themisto.recording.options import RecordOptions
from themisto.trajectory import Step, TrajectoryWriter, Variable, state_hash
from themisto.vocabulary import TASK_CONFIGS, TRAJECTORIES

# (code, output, the user variables after the cell); the runtime before a cell
# is the variables after the previous one.
Cell = tuple[str, str, dict[str, Any]]


def _running_total(additions: int) -> list[Cell]:
    """A long, regular session: add to a total and display it, ``additions`` times."""
    cells: list[Cell] = [("total = 0", "", {"total": 0})]
    total = 0
    for number in range(1, additions + 1):
        total += number
        cells += [(f"total += {number}", "", {"total": total}), ("total", str(total), {"total": total})]
    return cells


SESSIONS: dict[str, list[Cell]] = {
    "nb-arith": [
        ("import math", "", {}),
        ("x = 41", "", {"x": 41}),
        ("x = x + 1", "", {"x": 42}),
        ("x", "42", {"x": 42}),
        ("x", "42", {"x": 42}),
        ("print(math.sqrt(x))", "6.48074069840786\n", {"x": 42}),
        ("names = ['a', 'b']", "", {"x": 42, "names": ["a", "b"]}),
        ("names", "['a', 'b']", {"x": 42, "names": ["a", "b"]}),
        ("len(names)", "2", {"x": 42, "names": ["a", "b"]}),
        ("names;", "", {"x": 42, "names": ["a", "b"]}),
    ],
    "nb-text": [
        ("s = 'hello'", "", {"s": "hello"}),
        ("s", "'hello'", {"s": "hello"}),
        ("s.upper()", "'HELLO'", {"s": "hello"}),
        ("s.upper()", "'HELLO'", {"s": "hello"}),
        ("t = s * 2\nt", "'hellohello'", {"s": "hello", "t": "hellohello"}),
        ("t", "'hellohello'", {"s": "hello", "t": "hellohello"}),
        ("for c in 'ab':\n    print(c)", "a\nb\n", {"s": "hello", "t": "hellohello", "c": "b"}),
        ("s", "'hello'", {"s": "hello", "t": "hellohello", "c": "b"}),
    ],
    "nb-sum": _running_total(15),
}

# The paper's sample for `test`; quantile 1.0 keeps the longest cells, so every step is an example.
SELECTION = SelectionOptions(sample="paper", quantile=1.0, include_empty=True, min_history=0)
KERNEL_MEMORY_BYTES = 80 * 2**20  # resident memory of an idle ipykernel, before the user's variables


def session_steps(trajectory_id: str, cells: list[Cell]) -> list[Step]:
    """The steps the recorder would write for one session run top to bottom without errors."""
    options = RecordOptions()
    cell_ids: dict[str, str] = {}  # the same code is the same notebook cell run again
    steps = []
    for number, (code, output, namespace) in enumerate(cells):
        variables = [
            Variable(**snapshot.describe(name, value, options.max_repr_chars, options.repr_timeout))
            for name, value in sorted(namespace.items())  # the snapshot lists variables by name
        ]
        steps.append(
            Step(
                trajectory_id=trajectory_id,
                step=number,
                cell_id=cell_ids.setdefault(code, f"cell-{len(cell_ids)}"),
                code=code,
                output=output,
                error=None,
                execution_time=0.001 + 0.0001 * len(code),
                memory_bytes=KERNEL_MEMORY_BYTES + sum(variable.size_bytes or 0 for variable in variables),
                runtime=variables,
                state_hash=state_hash(variables),
                restarted=False,
                stable=None if number % 3 == 0 else True,
            )
        )
    return steps


def write_dataset(folder: Path) -> Path:
    """Record the sessions as trajectory files, build them into ``folder`` and return ``folder``."""
    with tempfile.TemporaryDirectory(prefix="themisto-fixture-") as scratch:
        paths = []
        for trajectory_id, cells in SESSIONS.items():
            path = Path(scratch) / f"{trajectory_id}.jsonl"
            with TrajectoryWriter(path) as writer:
                for step in session_steps(trajectory_id, cells):
                    writer.write(step)
            paths.append(path)
        summary = build_dataset(paths, Path(folder), SELECTION)
    _check_build(summary)
    return Path(folder)


def _check_build(summary: BuildSummary) -> None:
    """Fail loudly if the build is not what the tests rely on: every step in ``full``, a smaller ``test``."""
    steps = sum(len(cells) for cells in SESSIONS.values())
    assert summary.rows[TRAJECTORIES]["full"] == steps, summary.rows
    for config in TASK_CONFIGS:
        assert summary.rows[config]["full"] == steps, f"{config}: the build dropped steps: {summary.rows[config]}"
        assert 0 < summary.rows[config]["test"] < steps, f"{config}: test is not a sample: {summary.rows[config]}"


def task_rows(folder: Path, config: str, split: str = "test") -> list[dict[str, Any]]:
    """The rows of one config and split of a build, in the order the build wrote them."""
    return pq.read_table(parquet_path(Path(folder), config, split)).to_pylist()
