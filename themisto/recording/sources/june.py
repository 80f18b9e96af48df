"""Read a JuNE event log (``.csv``, ``.jsonl`` or ``.parquet``) as one trajectory per kernel.

JuNE logs are event tables with the columns of the public JuNE dataset
(:data:`JUNE_COLUMNS`). Events are replayed in ``time``
order (ties keep file order), grouped by ``kernel_id``:

- ``execute`` runs its ``cell_source`` (rows whose ``cell_type`` says markdown
  or raw are skipped);
- ``kernel_restarting`` restarts the kernel;
- ``kernel_interrupting`` interrupts the cell running in that kernel: the
  replay interrupts it as many seconds after its start as the user did;
- ``finished_execute`` carries the original outputs (a JSON list of nbformat
  outputs), rendered to plain text and kept on the latest unfinished execution
  of the same ``cell_index`` as ``original_output``. JuNE's logging plugin
  may keep only each output's type and size (``[{"output_type": "stream",
  "size": 23}]``); the original output is then unknown (None, not ``""``);
- every other event (create, delete, save_notebook, rendered, error,
  notebook_renamed, and any kind this reader does not know) changes no kernel
  state.

The published table has the columns of :data:`JUNE_COLUMNS` (``expert`` says
whether the participant was a professional); ``time`` may carry no zone
(``2023-05-06 10:32:26.282``) and is then read as UTC. A log can be a local
file or a URL that fsspec opens: ``hf://datasets/<org>/<name>/<file>`` reads
the Hugging Face Hub through ``huggingface_hub``, and a folder URL contributes
its .csv, .jsonl and .parquet files.
"""

from __future__ import annotations

import json
import math
import re
from dataclasses import replace
from pathlib import Path, PurePosixPath
from typing import Any

from themisto.exceptions import SourceError, one_line
from themisto.jsonl import iter_json_objects
from themisto.kernel import render_outputs
from themisto.recording.sources import Action, Execute, Restart, SourceTrajectory, is_url

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
    "expert",
)
REQUIRED_COLUMNS = ("time", "kernel_id", "event", "cell_index", "cell_source", "cell_output")
# The events a JuNE table records; the reader acts on executions and kernel restarts and reads past the rest.
JUNE_EVENTS = (
    "execute",
    "finished_execute",
    "create",
    "delete",
    "save_notebook",
    "error",
    "rendered",
    "notebook_renamed",
    "kernel_interrupting",
    "kernel_restarting",
)
# Where each kind of nbformat output keeps its content; an output without it carries only its type and size.
_CONTENT_KEY = {"stream": "text", "execute_result": "data", "display_data": "data", "error": "ename"}
NON_CODE_CELL_TYPES = {"markdown", "raw"}
KERNEL_ID_PREFIX = 8
_SAFE_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


def read_june_log(path: Path | str) -> list[SourceTrajectory]:
    """One :class:`SourceTrajectory` per kernel that executed at least one cell; ``path`` may be a URL."""
    frame = _load_table(path)
    missing = [column for column in REQUIRED_COLUMNS if column not in frame.columns]
    if missing:
        raise SourceError(f"{path}: not a JuNE log, missing column(s) {', '.join(missing)}")
    rows = frame.to_dict("records")
    sessions: dict[str, list[Action]] = {}
    started: dict[str, float] = {}  # per kernel, when its latest execution began (seconds)
    order, seconds = _time_order(path, frame)
    for position in order:
        row = rows[position]
        kernel = _text(row["kernel_id"])
        actions = sessions.setdefault(kernel, [])
        if _text(row["event"]) == "execute":
            started[kernel] = seconds[position]
        elif _text(row["event"]) == "kernel_interrupting" and kernel in started:
            _interrupt(actions, seconds[position] - started[kernel])
        _apply_event(path, position, row, actions)
    sessions = {kernel: actions for kernel, actions in sessions.items() if any(isinstance(a, Execute) for a in actions)}
    if not sessions:
        raise SourceError(f"{path}: JuNE log has no execute events")
    ids = trajectory_ids(_stem(path), list(sessions))
    source = Path(path) if not is_url(path) else path
    return [
        SourceTrajectory(trajectory_id=ids[kernel], source=source, actions=actions)
        for kernel, actions in sessions.items()
    ]


def _stem(path: Path | str) -> str:
    """A file's name without its suffix, for a local path or a URL."""
    return PurePosixPath(str(path).split("://", 1)[-1]).stem


def _interrupt(actions: list[Action], after: float) -> None:
    """Mark the latest execution of a kernel as interrupted ``after`` seconds from its start."""
    last = actions[-1] if actions else None
    if isinstance(last, Execute) and last.original_output is None:
        actions[-1] = replace(last, interrupt_after=max(after, 0.0))


def trajectory_ids(stem: str, kernel_ids: list[str]) -> dict[str, str]:
    """``<stem>-<kernel_id prefix>``, or ``<stem>-<index>`` for all when prefixes clash or are unsafe."""
    prefixes = [kernel[:KERNEL_ID_PREFIX] for kernel in kernel_ids]
    if len(set(prefixes)) == len(prefixes) and all(_SAFE_ID.match(prefix) for prefix in prefixes):
        return {kernel: f"{stem}-{prefix}" for kernel, prefix in zip(kernel_ids, prefixes)}
    return {kernel: f"{stem}-{index}" for index, kernel in enumerate(kernel_ids)}


def _apply_event(path: Path | str, position: int, row: dict[str, Any], actions: list[Action]) -> None:
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
                    actions[index] = replace(action, original_output=output)
                return


def _original_output(path: Path | str, position: int, raw: Any) -> str | None:
    """Render a ``cell_output`` JSON list of nbformat outputs as plain text; None when only sizes were logged."""
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
    if any(_size_only(output) for output in outputs):
        return None
    return render_outputs(outputs)


def _source(path: Path | str, position: int, value: Any) -> str:
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


def _size_only(output: Any) -> bool:
    """Whether an output lost its content: JuNE's logging plugin may keep only its type and size."""
    if not isinstance(output, dict):
        return False
    key = _CONTENT_KEY.get(str(output.get("output_type")))
    return key is not None and key not in output


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


def _time_order(path: Path | str, frame: Any) -> tuple[list[int], list[float]]:
    """Row positions sorted by ``time`` (numbers or timestamps, one kind per log; stable for ties), and each row's
    time in seconds.

    Timestamps without a zone, as JuNE writes them, are read as UTC. The first
    row decides the kind; the first row of the other kind, or of neither, is
    the one an error names.
    """
    import pandas as pd

    times = frame["time"].reset_index(drop=True)
    numbers = pd.to_numeric(times, errors="coerce")
    if numbers.notna().all():
        key = numbers.astype(float)
    else:
        stamps = pd.to_datetime(times.astype(str), utc=True, format="mixed", errors="coerce")
        kinds = ["number" if pd.notna(n) else "timestamp" if pd.notna(t) else None for n, t in zip(numbers, stamps)]
        for position, kind in enumerate(kinds):
            if kind is None:
                raise SourceError(
                    f"{path}: row {position + 1}: time {times.iloc[position]!r} is not a timestamp (nor a number)"
                )
            if kind != kinds[0]:
                raise SourceError(
                    f"{path}: row {position + 1}: time {times.iloc[position]!r} is a {kind}, but row 1's is a"
                    f" {kinds[0]}; a log's times must all be numbers or all timestamps"
                )
        key = (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds()
    return [int(i) for i in key.argsort(kind="stable")], key.astype(float).tolist()


def _load_table(path: Path | str) -> Any:
    """Load a log file (or URL) as a pandas DataFrame with the file's columns, values kept as text where possible."""
    import pandas as pd

    suffix = PurePosixPath(str(path)).suffix
    try:
        if is_url(path):
            return _load_remote(str(path), suffix)
        if suffix == ".csv":
            return pd.read_csv(path, dtype=str, keep_default_na=False)
        if suffix == ".parquet":
            return pd.read_parquet(path)
        return pd.DataFrame([record for _, record in iter_json_objects(Path(path), SourceError, "JuNE log")])
    except SourceError:
        raise
    except OSError as exc:
        raise SourceError(f"cannot read JuNE log {path}: {one_line(exc.strerror or exc)}") from None
    except UnicodeDecodeError:
        raise SourceError(f"{path}: not a JuNE log (not UTF-8 text)") from None
    except Exception as exc:  # pandas/pyarrow parser errors have no common base class
        raise SourceError(f"{path}: not a readable JuNE log ({type(exc).__name__}: {one_line(exc)})") from None


def _load_remote(url: str, suffix: str) -> Any:
    """Read a log through fsspec (``hf://`` goes through huggingface_hub), one file at a time."""
    import fsspec
    import pandas as pd

    with fsspec.open(url, "rb") as handle:
        if suffix == ".csv":
            return pd.read_csv(handle, dtype=str, keep_default_na=False)
        if suffix == ".parquet":
            return pd.read_parquet(handle)
        lines = handle.read().decode("utf-8").splitlines()
    return pd.DataFrame([json.loads(line) for line in lines if line.strip()])
