"""Read a ``.ipynb`` notebook as one trajectory: its code cells in the order they last ran, or top to bottom.

A notebook's ``execution_count`` of a code cell is the number the kernel gave
its last run, so with ``order="execution"`` (:data:`~themisto.recording.sources.EXECUTION`, the default)
the cells are replayed by count when the counts allow it: every count a
positive integer, at least one cell counted. Cells without a count (never run,
or cleared) come after the counted ones, in file order. A count held by two
cells means the kernel was restarted (the numbering began again): the first
cell in file order holding each count belongs to the first session, the
second to the next, and so on; each session runs by count, a
:class:`~themisto.recording.sources.Restart` between sessions. Otherwise, and
with ``order="file"``, cells run top to bottom.

Each counted cell's stored outputs, rendered as the recorder renders outputs
(:func:`~themisto.kernel.outputs.render_outputs`), become the execution's
``original_output``, so ``stability`` reports replay fidelity for notebooks as
for JuNE logs. A cell without a count carries none: it did not run.
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
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        count = cell.get("execution_count")
        counted = count if type(count) is int else None
        outputs = cell.get("outputs")
        original = render_outputs(outputs if isinstance(outputs, list) else []) if counted is not None else None
        cell_id = str(cell.get("id") or f"cell-{index}")
        code = joined_text(cell.get("source"))
        code_cells.append((counted, Execute(cell_id=cell_id, code=code, original_output=original)))
    trajectory = SourceTrajectory(trajectory_id=path.stem, source=path)
    trajectory.actions = execution_order(code_cells) if order == EXECUTION else [cell for _, cell in code_cells]
    return trajectory


def execution_order(cells: list[tuple[int | None, Execute]]) -> list[Action]:
    """The cells (each with its count, None if uncounted, in file order) in the order they ran (see the module).

    Top to bottom when the counts do not allow an order: no cell counted, or a count below 1.
    """
    counts = [count for count, _ in cells if count is not None]
    if not counts or min(counts) < 1:
        return [cell for _, cell in cells]
    seen: Counter[int] = Counter()
    sessions: list[list[tuple[int, Execute]]] = []
    for count, cell in cells:
        if count is None:
            continue
        number = seen[count]  # the n-th cell holding this count ran in the n-th kernel session
        seen[count] += 1
        while len(sessions) <= number:
            sessions.append([])
        sessions[number].append((count, cell))
    actions: list[Action] = []
    for number, session in enumerate(sessions):
        if number:
            actions.append(Restart())
        actions.extend(cell for _, cell in sorted(session, key=lambda pair: pair[0]))
    actions.extend(cell for count, cell in cells if count is None)
    return actions
