"""Read a ``.ipynb`` notebook as one trajectory: its code cells, top to bottom."""

from __future__ import annotations

import json
from pathlib import Path

from themisto.exceptions import SourceError, one_line
from themisto.recording.outputs import joined_text
from themisto.recording.sources import Execute, SourceTrajectory


def read_notebook(path: Path) -> SourceTrajectory:
    """The notebook's code cells as executions; markdown and raw cells are skipped.

    A cell's id is its nbformat ``id`` (nbformat >= 4.5) or ``cell-<index>``,
    the index counting all cells, so ids stay put when markdown is edited.
    """
    import nbformat

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
    trajectory = SourceTrajectory(trajectory_id=path.stem, source=path)
    for index, cell in enumerate(cells):
        if not isinstance(cell, dict) or cell.get("cell_type") != "code":
            continue
        code = joined_text(cell.get("source"))
        cell_id = cell.get("id") or f"cell-{index}"
        trajectory.actions.append(Execute(cell_id=str(cell_id), code=code))
    return trajectory
