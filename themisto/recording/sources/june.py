"""Read a JuNE event log (``.csv``, ``.jsonl`` or ``.parquet``) as one trajectory per kernel.

JuNE logs are event tables with the columns of the public JuNE dataset
(:data:`JUNE_COLUMNS`). Events are replayed in ``time``
order (ties keep file order), grouped by ``kernel_id``:

- ``execute`` runs its ``cell_source`` (rows whose ``cell_type`` says markdown
  or raw are skipped);
- ``kernel_restarting`` restarts the kernel;
- ``finished_execute`` carries the original outputs (a JSON list of nbformat
  outputs), rendered to plain text and kept on the latest unfinished execution
  of the same ``cell_index`` as ``original_output``;
- every other event (create, delete, save_notebook, rendered, error,
  notebook_renamed, kernel_interrupting) changes no kernel state.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from themisto.exceptions import SourceError, one_line
from themisto.jsonl import iter_json_objects
from themisto.recording.outputs import render_outputs
from themisto.recording.sources import Action, Execute, Restart, SourceTrajectory

# The columns of a JuNE event table, in the published order; the reader needs only REQUIRED_COLUMNS.
JUNE_COLUMNS = (
    "action_id",
    "time",
    "session_id",
    "kernel_id",
    "notebook_name",
    "event",
    "cell_index",
    "cell_num",
    "cell_type",
    "cell_source",
    "cell_output",
    "user_id",
)
REQUIRED_COLUMNS = ("time", "kernel_id", "event", "cell_index", "cell_source", "cell_output")
NON_CODE_CELL_TYPES = {"markdown", "raw"}
KERNEL_ID_PREFIX = 8
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


def read_june_log(path: Path) -> list[SourceTrajectory]:
    """One :class:`SourceTrajectory` per kernel that executed at least one cell."""
    frame = _load_table(path)
    missing = [column for column in REQUIRED_COLUMNS if column not in frame.columns]
    if missing:
        raise SourceError(f"{path}: not a JuNE log, missing column(s) {', '.join(missing)}")
    rows = frame.to_dict("records")
    sessions: dict[str, list[Action]] = {}
    for position in _time_order(path, frame):
        row = rows[position]
        actions = sessions.setdefault(_text(row["kernel_id"]), [])
        _apply_event(path, position, row, actions)
    sessions = {kernel: actions for kernel, actions in sessions.items() if any(isinstance(a, Execute) for a in actions)}
    if not sessions:
        raise SourceError(f"{path}: JuNE log has no execute events")
    ids = trajectory_ids(path.stem, list(sessions))
    return [
        SourceTrajectory(trajectory_id=ids[kernel], source=path, actions=actions)
        for kernel, actions in sessions.items()
    ]


def trajectory_ids(stem: str, kernel_ids: list[str]) -> dict[str, str]:
    """``<stem>-<kernel_id prefix>``, or ``<stem>-<index>`` for all when prefixes clash or are unsafe."""
    prefixes = [kernel[:KERNEL_ID_PREFIX] for kernel in kernel_ids]
    if len(set(prefixes)) == len(prefixes) and all(_SAFE_ID.match(prefix) for prefix in prefixes):
        return {kernel: f"{stem}-{prefix}" for kernel, prefix in zip(kernel_ids, prefixes)}
    return {kernel: f"{stem}-{index}" for index, kernel in enumerate(kernel_ids)}


def _apply_event(path: Path, position: int, row: dict[str, Any], actions: list[Action]) -> None:
    """Turn one log row into kernel actions, or attach its original output."""
    event = _text(row["event"])
    if event == "execute":
        if _text(row.get("cell_type")).strip().lower() in NON_CODE_CELL_TYPES:
            return
        code = _source(path, position, row["cell_source"])
        actions.append(Execute(cell_id=_text(row["cell_index"]), code=code))
    elif event == "kernel_restarting":
        actions.append(Restart())
    elif event == "finished_execute":
        cell_id = _text(row["cell_index"])
        output = _original_output(path, position, row["cell_output"])
        # The output belongs to the latest execution of that cell since the last restart.
        for index in range(len(actions) - 1, -1, -1):
            action = actions[index]
            if isinstance(action, Restart):
                return
            if action.cell_id == cell_id:
                if action.original_output is None:
                    actions[index] = Execute(action.cell_id, action.code, output)
                return


def _original_output(path: Path, position: int, raw: Any) -> str:
    """Render a ``cell_output`` JSON list of nbformat outputs as plain text."""
    if isinstance(raw, list):  # a JSONL log may hold the list itself
        outputs = raw
    else:
        text = _text(raw)
        if not text.strip():
            return ""
        try:
            outputs = json.loads(text)
        except json.JSONDecodeError as exc:
            raise SourceError(f"{path}: row {position + 1}: cell_output is not JSON ({exc.msg})") from None
    if not isinstance(outputs, list):
        raise SourceError(f"{path}: row {position + 1}: cell_output is not a JSON list of outputs")
    return render_outputs(outputs)


def _source(path: Path, position: int, value: Any) -> str:
    """A ``cell_source``: text, or a list of lines joined as nbformat joins them; anything else is an error."""
    import numpy as np

    if value is None or isinstance(value, str) or (isinstance(value, float) and math.isnan(value)):
        return _text(value)
    if isinstance(value, (list, tuple, np.ndarray)):  # a Parquet list column arrives as an array
        lines = list(value)
        if all(isinstance(line, str) for line in lines):
            return "".join(lines)
    kind = type(value).__name__
    raise SourceError(f"{path}: row {position + 1}: cell_source is {kind}, not text or a list of lines of text")


def _text(value: Any) -> str:
    """A cell value as text: missing values (None, NaN) are empty, 3.0 from a float column is ``3``."""
    if value is None:
        return ""
    if isinstance(value, float):
        if math.isnan(value):
            return ""
        if value.is_integer():
            return str(int(value))
    return str(value)


def _time_order(path: Path, frame: Any) -> list[int]:
    """Row positions sorted by ``time`` (numbers or timestamps, one kind per log), stable for ties.

    The first row decides the kind; the first row of the other kind, or of
    neither, is the one an error names.
    """
    import pandas as pd

    times = frame["time"].reset_index(drop=True)
    numbers = pd.to_numeric(times, errors="coerce")
    if numbers.notna().all():
        return [int(i) for i in numbers.argsort(kind="stable")]
    stamps = pd.to_datetime(times.astype(str), utc=True, format="mixed", errors="coerce")
    kinds = ["number" if pd.notna(n) else "timestamp" if pd.notna(t) else None for n, t in zip(numbers, stamps)]
    for position, kind in enumerate(kinds):
        if kind is None:
            raise SourceError(
                f"{path}: row {position + 1}: time {times.iloc[position]!r} is not a timestamp (nor a number)"
            )
        if kind != kinds[0]:
            raise SourceError(
                f"{path}: row {position + 1}: time {times.iloc[position]!r} is a {kind}, but row 1's is a {kinds[0]};"
                " a log's times must all be numbers or all timestamps"
            )
    return [int(i) for i in stamps.argsort(kind="stable")]


def _load_table(path: Path) -> Any:
    """Load a log file as a pandas DataFrame with the file's columns, values kept as text where possible."""
    import pandas as pd

    try:
        if path.suffix == ".csv":
            return pd.read_csv(path, dtype=str, keep_default_na=False)
        if path.suffix == ".parquet":
            return pd.read_parquet(path)
        return pd.DataFrame([record for _, record in iter_json_objects(path, SourceError, "JuNE log")])
    except SourceError:
        raise
    except OSError as exc:
        raise SourceError(f"cannot read JuNE log {path}: {one_line(exc.strerror or exc)}") from None
    except UnicodeDecodeError:
        raise SourceError(f"{path}: not a JuNE log (not UTF-8 text)") from None
    except Exception as exc:  # pandas/pyarrow parser errors have no common base class
        raise SourceError(f"{path}: not a readable JuNE log ({type(exc).__name__}: {one_line(exc)})") from None
