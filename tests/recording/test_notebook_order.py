"""Notebooks replayed in the order their cells last ran, their stored outputs kept as each step's original."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from dataset_fixture import task_rows

from themisto.building.parquet import build_dataset
from themisto.building.selection import SelectionOptions
from themisto.cli import main
from themisto.exceptions import SourceError
from themisto.recording.fidelity import fidelity
from themisto.recording.sources import Execute, Restart, read_sources
from themisto.recording.sources.notebook import read_notebook
from themisto.trajectory import read_trajectory

pytestmark = pytest.mark.kernel  # the tests record real kernels


def notebook(path: Path, cells: list[tuple[str, int | None, str]]) -> Path:
    """Write a notebook of (code, execution_count, stored stdout) cells, a markdown cell first."""
    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_markdown_cell("# notes")]
    for index, (code, count, printed) in enumerate(cells):
        cell = nbformat.v4.new_code_cell(code, id=f"c{index}", execution_count=count)
        if printed:
            cell.outputs = [nbformat.v4.new_output("stream", name="stdout", text=printed)]
        book.cells.append(cell)
    nbformat.write(book, path)
    return path


def plan(path: Path, order: str = "execution") -> list[str]:
    """The cell ids (``restart`` for a restart) in the order the reader replays them."""
    actions = read_notebook(path, order).actions
    return ["restart" if isinstance(action, Restart) else action.cell_id for action in actions]


# File order 1, 3, 2: the second cell ran last and prints what the third defined.
OUT_OF_ORDER = [("a = 1\nprint(a)", 1, "1\n"), ("print(a + b)", 3, "3\n"), ("b = 2\nprint(b)", 2, "2\n")]


def test_counts_1_3_2_replay_as_1_2_3_with_their_stored_outputs(tmp_path: Path) -> None:
    path = notebook(tmp_path / "nb.ipynb", OUT_OF_ORDER)
    assert plan(path) == ["c0", "c2", "c1"]
    assert plan(path, "file") == ["c0", "c1", "c2"]
    executions = read_notebook(path).executions
    assert [execution.original_output for execution in executions] == ["1", "2", "3"]


def test_uncounted_cells_keep_their_file_position_between_counted_neighbours(tmp_path: Path) -> None:
    # an import without a count between counts 2 and 1 runs right after the counted cell above it
    cells = [("x = 1", None, ""), ("print(2)", 2, "2\n"), ("import math", None, ""), ("w = 4", 1, "")]
    path = notebook(tmp_path / "nb.ipynb", cells)
    assert plan(path) == ["c0", "c3", "c1", "c2"]
    executions = {execution.cell_id: execution for execution in read_notebook(path).executions}
    assert executions["c0"].original_output is None and executions["c3"].original_output == ""  # ran, printed nothing


def test_an_uncounted_import_between_counts_runs_before_the_cell_that_uses_it(tmp_path: Path) -> None:
    cells = [("a = 2", 6, ""), ("import math", None, ""), ("print(math.sqrt(a * 8))", 8, "4.0\n")]
    path = notebook(tmp_path / "nb.ipynb", cells)
    assert plan(path) == ["c0", "c1", "c2"]
    assert main(["record", str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    steps = read_trajectory(tmp_path / "out" / "nb.jsonl")
    assert [step.error for step in steps] == [None, None, None] and steps[-1].output == "4.0"


def test_a_repeated_count_is_a_kernel_restart_when_two_cells_are_counted_1(tmp_path: Path) -> None:
    # cells 1-4 ran as 1..4, then the kernel restarted and the third cell ran first (1), then the fourth (2)
    cells = [("a = 1", 1, ""), ("b = 2", 2, ""), ("c = 3", 1, ""), ("d = 4", 2, ""), ("e = 5", None, "")]
    assert plan(notebook(tmp_path / "nb.ipynb", cells)) == ["c0", "c1", "restart", "c2", "c3", "c4"]


def test_a_repeated_count_without_a_second_1_is_one_session(tmp_path: Path) -> None:
    # count 3 twice but one cell counted 1: no fresh kernel, so read_csv's frame is still there for the last cell
    cells = [("import io", 1, ""), ("df = 'frame'", 2, ""), ("n = len(df)", 3, ""), ("m = n", 3, ""), ("m", 4, "5")]
    assert plan(notebook(tmp_path / "nb.ipynb", cells)) == ["c0", "c1", "c2", "c3", "c4"]


def test_a_copied_cell_keeps_its_file_position_and_is_no_restart(tmp_path: Path) -> None:
    # the last cell is a copy of the first (same count, same code): it runs where it stands, in one session
    cells = [("a = 1", 1, ""), ("b = a + 1", 2, ""), ("c = b * 2", 3, ""), ("a = 1", 1, "")]
    assert plan(notebook(tmp_path / "nb.ipynb", cells)) == ["c0", "c1", "c2", "c3"]
    cells = [("a = 1", 1, ""), ("a = 1", 1, ""), ("b = a + 1", 2, "")]
    assert plan(notebook(tmp_path / "copy.ipynb", cells)) == ["c0", "c1", "c2"]


def test_a_notebook_stripped_of_outputs_has_unknown_original_outputs(tmp_path: Path) -> None:
    stripped = notebook(tmp_path / "stripped.ipynb", [("a = 1", 1, ""), ("print(a)", 2, "")])
    assert [e.original_output for e in read_notebook(stripped).executions] == [None, None]
    kept = notebook(tmp_path / "kept.ipynb", [("a = 1", 1, ""), ("print(a)", 2, "1\n")])
    assert [e.original_output for e in read_notebook(kept).executions] == ["", "1"]


def test_counts_that_allow_no_order_keep_the_file_order(tmp_path: Path) -> None:
    assert plan(notebook(tmp_path / "none.ipynb", [("a = 1", None, ""), ("b = 2", None, "")])) == ["c0", "c1"]
    assert plan(notebook(tmp_path / "zero.ipynb", [("a = 1", 2, ""), ("b = 2", 0, "")])) == ["c0", "c1"]


def test_an_unknown_order_is_a_one_line_error(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    path = notebook(tmp_path / "nb.ipynb", OUT_OF_ORDER)
    with pytest.raises(SystemExit) as exit_info:
        main(["record", str(path), "-o", str(tmp_path / "out"), "--order", "random"])
    assert exit_info.value.code == 2 and "invalid choice: 'random'" in capsys.readouterr().err
    with pytest.raises(SourceError, match="unknown notebook order 'random'"):
        read_sources([path], notebook_order="random")


def test_a_recorded_notebook_reports_fidelity_to_its_stored_outputs(tmp_path: Path) -> None:
    cells = [*OUT_OF_ORDER, ("print('stored, not replayed')", 4, "something else\n")]
    path = notebook(tmp_path / "nb.ipynb", cells)
    assert main(["record", str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    steps = read_trajectory(tmp_path / "out" / "nb.jsonl")
    assert [step.cell_id for step in steps] == ["c0", "c2", "c1", "c3"]
    assert [step.output for step in steps] == ["1", "2", "3", "stored, not replayed"]
    assert [step.original_output for step in steps] == ["1", "2", "3", "something else"]
    result = fidelity(steps)
    assert result is not None and (result.steps, result.exact) == (4, 3)
    assert result.first_divergence is not None and result.first_divergence.cell_id == "c3"
    # top to bottom, the second cell fails: the order the counts give is the one that reproduces the notebook
    assert main(["record", str(path), "-o", str(tmp_path / "file"), "--order", "file", "-q"]) == 0
    in_file_order = read_trajectory(tmp_path / "file" / "nb.jsonl")
    assert in_file_order[1].error is not None and in_file_order[1].error["ename"] == "NameError"
    assert isinstance(read_notebook(path).actions[0], Execute)


def test_a_build_says_the_history_was_re_recorded_and_can_show_the_notebooks_own_outputs(tmp_path: Path) -> None:

    cells = [("x = 41", 1, ""), ("print(x + 1)", 2, "42\n"), ("print(sys.version_info[0])", 4, "2\n"), ("x", 5, "41")]
    cells.insert(2, ("import sys", 3, ""))
    path = notebook(tmp_path / "old.ipynb", cells)
    book = nbformat.read(path, as_version=4)
    book.metadata["language_info"] = {"name": "python", "version": "3.5.1"}
    nbformat.write(book, path)
    assert main(["record", str(path), "-o", str(tmp_path / "out"), "-q"]) == 0
    for folder, original in (("replayed", False), ("own", True)):
        options = SelectionOptions(sample="all", quantile=1.0, original_history=original)
        build_dataset([tmp_path / "out" / "old.jsonl"], tmp_path / folder, options)
    note = "The notebook's author ran Python 3.5.1: the outputs were recorded again under the versions above."
    for config in ("output_prediction", "output_prediction_runtime"):
        assert all(note in row["prompt"] for row in task_rows(tmp_path / "replayed", config, "full"))
    card = (tmp_path / "replayed" / "README.md").read_text(encoding="utf-8")
    assert "1 trajectories re-execute notebooks whose authors ran another Python than the recording kernel" in card
    (replayed,) = [r for r in task_rows(tmp_path / "replayed", "output_prediction", "full") if r["code"] == "x"]
    (own,) = [r for r in task_rows(tmp_path / "own", "output_prediction", "full") if r["code"] == "x"]
    assert replayed["history"][3] == {"code": "print(sys.version_info[0])", "output": "3"}  # today's Python
    assert own["history"][3] == {"code": "print(sys.version_info[0])", "output": "2"}  # the author's output
    assert replayed["target"] == own["target"] == "41"
