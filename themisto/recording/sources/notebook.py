"""Read a ``.ipynb`` notebook as one trajectory: its code cells in the order they last ran, or top to bottom.

A notebook's ``execution_count`` of a code cell is the number the kernel gave
its last run, so with ``order="execution"`` (:data:`~themisto.recording.sources.EXECUTION`, the default)
the cells are replayed by count when the counts allow it: every count a
positive integer, at least one cell counted. Otherwise, and with
``order="file"``, cells run top to bottom. By count, as the author ran them:

- a cell without a count (never run, or cleared) keeps its file position: it
  runs right after the nearest counted cell above it (first, if none is), so
  an uncounted ``import`` between counts 6 and 8 runs between them;
- a later cell holding both the count and the code of one above it is a copy
  made in the editor (copying keeps the count) and keeps its file position too;
- a repeated count is a kernel restart only when two cells are counted 1 (a
  fresh kernel numbers from 1): the first cell in file order holding each
  count belongs to the first session, the second to the next, and so on; each
  session runs by count, a :class:`~themisto.recording.sources.Restart`
  between sessions. Any other repeated count is one session, the holders of
  a count in file order.

Each counted cell's stored outputs, rendered as the recorder renders outputs
(:func:`~themisto.kernel.outputs.render_outputs`), become the execution's
``original_output``, so ``stability`` reports replay fidelity for notebooks as
for JuNE logs. A cell without a count carries none (it did not run), and
neither does any cell of a notebook whose code cells hold no output at all:
its outputs were stripped, so what they showed is unknown, not empty.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from themisto.exceptions import SourceError, one_line
from themisto.kernel import joined_text, render_outputs
from themisto.recording.sources import EXECUTION, NOTEBOOK_ORDERS, Action, Execute, Restart, SourceTrajectory


def read_notebook(path: Path, order: str = EXECUTION) -> SourceTrajectory:
    """The notebook's code cells as executions, in ``order`` (see the module); markdown and raw cells are skipped.

    A cell's id is its nbformat ``id`` (nbformat >= 4.5) or ``cell-<index>``,
    the index counting all cells, so ids stay put when markdown is edited.
    """
    import nbformat

    if order not in NOTEBOOK_ORDERS:
        raise SourceError(f"unknown notebook order {order!r}; expected one of {', '.join(NOTEBOOK_ORDERS)}")
    try:
        with path.open(encoding="utf-8") as handle:
            notebook = nbformat.read(handle, as_version=4)  # type: ignore[no-untyped-call]
    except OSError as exc:
        raise SourceError(f"cannot read notebook {path}: {one_line(exc.strerror or exc)}") from None
    except UnicodeDecodeError:
        raise SourceError(f"{path}: not a notebook (not UTF-8 text)") from None
    except (json.JSONDecodeError, nbformat.reader.NotJSONError):
        raise SourceError(f"{path}: not a notebook (not JSON)") from None
    except Exception as exc:  # nbformat raises assorted errors on JSON that is not a notebook
        raise SourceError(f"{path}: not a notebook ({type(exc).__name__}: {one_line(exc)})") from None
    cells = notebook.get("cells") if isinstance(notebook, dict) else None
    if not isinstance(cells, list):
        raise SourceError(f"{path}: not a notebook (no cell list)")
    code_cells: list[tuple[int | None, Execute]] = []
    stripped = not any(_outputs(cell) for cell in cells if isinstance(cell, dict) and cell.get("cell_type") == "code")
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        count = cell.get("execution_count")
        counted = count if type(count) is int else None
        original = render_outputs(_outputs(cell)) if counted is not None and not stripped else None
        cell_id = str(cell.get("id") or f"cell-{index}")
        code = joined_text(cell.get("source"))
        code_cells.append((counted, Execute(cell_id=cell_id, code=code, original_output=original)))
    trajectory = SourceTrajectory(trajectory_id=path.stem, source=path)
    trajectory.actions = execution_order(code_cells) if order == EXECUTION else [cell for _, cell in code_cells]
    return trajectory


def _outputs(cell: dict[str, object]) -> list[object]:
    """A code cell's stored outputs (none where the field is missing or not a list)."""
    outputs = cell.get("outputs")
    return outputs if isinstance(outputs, list) else []


def execution_order(cells: list[tuple[int | None, Execute]]) -> list[Action]:
    """The cells (each with its count, None if uncounted, in file order) in the order they ran (see the module).

    Top to bottom when the counts do not allow an order: no cell counted, or a count below 1.
    """
    counts = [count for count, _ in cells if count is not None]
    if not counts or min(counts) < 1:
        return [cell for _, cell in cells]
    ordered = _ordered_cells(cells)
    sessions_counted = restarted(cells, ordered)
    seen: Counter[int] = Counter()
    sessions: list[list[tuple[int, int]]] = []  # per session, (count, file index) of the cells it ran
    for index, (count, _) in enumerate(cells):
        if index not in ordered or count is None:
            continue
        number = seen[count] if sessions_counted else 0  # the n-th holder of a count ran in session n
        seen[count] += 1
        while len(sessions) <= number:
            sessions.append([])
        sessions[number].append((count, index))
    # each cell placed by file position runs right after the nearest ordered cell above it (first, if none)
    followers: dict[int | None, list[Execute]] = {}
    anchor: int | None = None
    for index, (_, cell) in enumerate(cells):
        if index in ordered:
            anchor = index
        else:
            followers.setdefault(anchor, []).append(cell)
    actions: list[Action] = list(followers.get(None, []))
    for number, session in enumerate(sessions):
        if number:
            actions.append(Restart())
        for _, index in sorted(session):
            actions.append(cells[index][1])
            actions.extend(followers.get(index, []))
    return actions


def _ordered_cells(cells: list[tuple[int | None, Execute]]) -> set[int]:
    """The file indexes of the cells that run by their count: counted, and not a copy of a cell above.

    A later cell with the count *and* the code of one above it is the editor's copy (copying a cell keeps its
    count): it keeps its file position instead.
    """
    first: dict[tuple[int, str], int] = {}
    for index, (count, cell) in enumerate(cells):
        if count is not None:
            first.setdefault((count, cell.code), index)
    return set(first.values())


def restarted(cells: list[tuple[int | None, Execute]], ordered: set[int]) -> bool:
    """Whether the counts show a second kernel session: two ordered cells counted 1 (a fresh kernel counts from 1).

    Any other repeated count (no second 1) is read as an edit that kept a count, not a restart: every ordered
    cell then runs in one session, by count, a repeated count in file order.
    """
    return sum(1 for index in ordered if cells[index][0] == 1) > 1
