"""Source readers: notebooks and JuNE event logs (csv, jsonl, parquet) into kernel actions."""

from __future__ import annotations

import json
import random
from pathlib import Path
from typing import Any

import nbformat
import pandas as pd
import pytest

from themisto.exceptions import InputError, SourceError
from themisto.recording.sources import (
    JUNE_PLUGIN_PATTERN,
    Execute,
    Restart,
    read_source,
    read_sources,
    source_files,
)
from themisto.recording.sources.june import REQUIRED_COLUMNS, trajectory_ids

# --- notebooks ------------------------------------------------------------------------------


def test_notebook_gives_its_code_cells_in_order(tmp_path: Path) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [
        nbformat.v4.new_markdown_cell("# title"),
        nbformat.v4.new_code_cell("a = 1", id="first"),
        nbformat.v4.new_raw_cell("raw"),
        nbformat.v4.new_code_cell("print(a)", id="second"),
    ]
    path = tmp_path / "analysis.ipynb"
    nbformat.write(notebook, path)
    [trajectory] = read_source(path)
    assert trajectory.trajectory_id == "analysis"
    assert trajectory.actions == [Execute("first", "a = 1"), Execute("second", "print(a)")]


def test_old_notebook_without_ids_gets_positional_ids(tmp_path: Path) -> None:
    raw = {
        "nbformat": 4,
        "nbformat_minor": 2,
        "metadata": {},
        "cells": [
            {"cell_type": "markdown", "metadata": {}, "source": ["# t"]},
            {"cell_type": "code", "metadata": {}, "source": ["x = 1\n", "x"], "outputs": [], "execution_count": None},
        ],
    }
    path = tmp_path / "old.ipynb"
    path.write_text(json.dumps(raw))
    [trajectory] = read_source(path)
    assert [(a.cell_id, a.code) for a in trajectory.executions] == [("cell-1", "x = 1\nx")]


def test_code_cell_without_source_runs_empty_code(tmp_path: Path) -> None:
    cells = [
        {"cell_type": "code", "metadata": {}, "source": None, "outputs": [], "execution_count": None},
        {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None},
    ]
    path = tmp_path / "sourceless.ipynb"
    path.write_text(json.dumps({"nbformat": 4, "nbformat_minor": 2, "metadata": {}, "cells": cells}))
    [trajectory] = read_source(path)
    assert [action.code for action in trajectory.executions] == ["", ""]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"not json at all", "not a notebook"),
        (b'{"just": "an object"}', "not a notebook"),
        (b"\xff\xfe\x00garbage", "not a notebook"),
        (b"[1, 2, 3]", "not a notebook"),
    ],
)
def test_malformed_notebook_is_a_source_error(tmp_path: Path, content: bytes, message: str) -> None:
    path = tmp_path / "bad.ipynb"
    path.write_bytes(content)
    with pytest.raises(SourceError, match=message):
        read_source(path)


def test_missing_and_unknown_sources(tmp_path: Path) -> None:
    with pytest.raises(SourceError, match="no such source"):
        source_files([tmp_path / "absent.ipynb"])
    with pytest.raises(SourceError, match="holds no"):
        source_files([tmp_path])
    (tmp_path / "notes.txt").write_text("x")
    with pytest.raises(SourceError, match="unknown source type"):
        read_source(tmp_path / "notes.txt")


# --- JuNE logs ------------------------------------------------------------------------------

KERNEL_A = "aaaaaaaa-0000-4000-8000-000000000001"
KERNEL_B = "bbbbbbbb-0000-4000-8000-000000000002"


def _event(
    second: int, kernel: str, event: str, cell: str = "", source: str = "", output: Any = "", **extra: str
) -> dict:
    row = {
        "action_id": str(second),
        "time": f"2024-03-01T10:{second // 60:02d}:{second % 60:02d}.000Z",
        "session_id": "s1",
        "kernel_id": kernel,
        "notebook_name": "task.ipynb",
        "event": event,
        "cell_index": cell,
        "cell_num": "0",
        "cell_type": "code",
        "cell_source": source,
        "cell_output": json.dumps(output) if isinstance(output, list) else output,
        "user_id": "u1",
    }
    row.update(extra)
    return row


def _log_rows() -> list[dict]:
    stream = [{"output_type": "stream", "name": "stdout", "text": "3\n"}]
    result = [{"output_type": "execute_result", "data": {"text/plain": "4"}, "metadata": {}, "execution_count": 2}]
    return [
        _event(0, KERNEL_A, "create", "c1"),
        _event(1, KERNEL_A, "execute", "c1", "x = 3\nprint(x)"),
        _event(2, KERNEL_A, "finished_execute", "c1", output=stream),
        _event(3, KERNEL_A, "execute", "m1", "# notes", cell_type="markdown"),
        _event(4, KERNEL_A, "execute", "c2", "x + 1"),
        _event(5, KERNEL_A, "save_notebook", source='[{"cell_type": "code"}]'),
        _event(6, KERNEL_A, "execute", "c1", "x = 3\nprint(x)"),  # a re-run of c1
        _event(7, KERNEL_A, "finished_execute", "c2", output=result),
        _event(8, KERNEL_A, "finished_execute", "c1", output=stream),
        _event(9, KERNEL_B, "execute", "d1", "y = 1"),
        _event(10, KERNEL_B, "kernel_restarting"),
        _event(11, KERNEL_B, "execute", "d1", "y = 2"),
        _event(12, KERNEL_B, "finished_execute", "d1", output=[]),
        _event(13, KERNEL_A, "error", "c2"),
    ]


def _write_log(rows: list[dict], path: Path) -> Path:
    frame = pd.DataFrame(rows)
    if path.suffix == ".csv":
        frame.to_csv(path, index=False)
    elif path.suffix == ".parquet":
        frame.to_parquet(path, index=False)
    else:
        path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    return path


@pytest.mark.parametrize("suffix", [".csv", ".jsonl", ".parquet"])
def test_june_log_replays_executions_in_time_order_per_kernel(tmp_path: Path, suffix: str) -> None:
    rows = _log_rows()
    random.Random(4).shuffle(rows)  # file order must not matter, only `time`
    first, second = read_source(_write_log(rows, tmp_path / f"session{suffix}"))
    assert first.trajectory_id == "session-aaaaaaaa" and second.trajectory_id == "session-bbbbbbbb"
    assert first.actions == [
        Execute("c1", "x = 3\nprint(x)", "3"),
        Execute("c2", "x + 1", "4"),
        Execute("c1", "x = 3\nprint(x)", "3"),
    ]
    assert second.actions == [Execute("d1", "y = 1"), Restart(), Execute("d1", "y = 2", "")]


def test_numeric_times_sort_numerically_and_ties_keep_file_order(tmp_path: Path) -> None:
    rows = [
        _event(0, KERNEL_A, "execute", "c", "third", time="10"),
        _event(0, KERNEL_A, "execute", "c", "first", time="9"),
        _event(0, KERNEL_A, "execute", "c", "second", time="9"),
    ]
    [trajectory] = read_source(_write_log(rows, tmp_path / "log.csv"))
    assert [a.code for a in trajectory.executions] == ["first", "second", "third"]


def test_clashing_kernel_prefixes_fall_back_to_indices() -> None:
    assert trajectory_ids("log", ["abcdefgh-1", "abcdefgh-2"]) == {"abcdefgh-1": "log-0", "abcdefgh-2": "log-1"}
    assert trajectory_ids("log", ["../../etc", "k2"]) == {"../../etc": "log-0", "k2": "log-1"}
    assert trajectory_ids("log", ["k1", "k2"]) == {"k1": "log-k1", "k2": "log-k2"}


def test_log_missing_columns_names_them(tmp_path: Path) -> None:
    rows = [
        {key: value for key, value in row.items() if key not in ("kernel_id", "cell_source")} for row in _log_rows()
    ]
    with pytest.raises(SourceError, match="missing column\\(s\\) kernel_id, cell_source"):
        read_source(_write_log(rows, tmp_path / "log.csv"))
    assert set(REQUIRED_COLUMNS) <= set(_log_rows()[0])


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda row: row.update(time="yesterday-ish"), "is not a timestamp"),
        (lambda row: row.update(event="finished_execute", cell_output="[{broken"), "cell_output is not JSON"),
        (lambda row: row.update(event="finished_execute", cell_output='{"a": 1}'), "not a JSON list"),
    ],
)
def test_corrupt_log_rows_are_source_errors(tmp_path: Path, mutate: Any, message: str) -> None:
    rows = _log_rows()
    mutate(rows[1])
    with pytest.raises(SourceError, match=message):
        read_source(_write_log(rows, tmp_path / "log.csv"))


@pytest.mark.parametrize(
    ("name", "content", "message"),
    [
        ("log.jsonl", b'{"time": 1}\nnot json\n', "log.jsonl:2: not valid JSON"),
        ("log.jsonl", b"[1, 2]\n", "expected a JSON object"),
        ("log.parquet", b"PAR1 but not really", "not a readable JuNE log"),
        ("log.csv", b"", "not a readable JuNE log"),
        ("log.csv", b"time,kernel_id,event,cell_index,cell_source,cell_output\n1,k,create,c,,\n", "no execute events"),
    ],
)
def test_unreadable_logs_are_source_errors(tmp_path: Path, name: str, content: bytes, message: str) -> None:
    path = tmp_path / name
    path.write_bytes(content)
    with pytest.raises(SourceError, match=message):
        read_source(path)


def test_duplicate_trajectory_ids_are_refused(tmp_path: Path) -> None:
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        nbformat.write(nbformat.v4.new_notebook(), tmp_path / folder / "same.ipynb")
    with pytest.raises(SourceError, match="'same' comes from both"):
        read_sources([tmp_path / "a", tmp_path / "b" / "same.ipynb"])


# --- the published JuNE format -----------------------------------------------------------------


def _june_row(time: str, event: str, cell: str = "", source: str = "", output: Any = None) -> dict:
    """A row as the published JuNE table has it: zone-less times, an ``expert`` column, nulls."""
    return {
        "action_id": 0,
        "time": time,
        "session_id": "709ce80b",
        "kernel_id": KERNEL_A,
        "notebook_name": "task1.ipynb",
        "event": event,
        "cell_index": cell or None,
        "cell_num": 0.0 if cell else None,
        "cell_type": "code" if cell else None,
        "cell_source": source or None,
        "cell_output": json.dumps(output) if output is not None else None,
        "user_id": "student_7",
        "expert": False,
    }


def test_june_table_size_only_outputs_are_unknown_and_interrupts_are_timed(tmp_path: Path) -> None:
    plugin = 'from mining_extension import check_logging\ncheck_logging("http://3.249.245.244:9999")'
    rows = [
        _june_row("2023-05-06 10:32:26.282", "save_notebook", source="[]"),
        _june_row("2023-05-06 10:32:55.892", "execute", "p", plugin),
        _june_row("2023-05-06 10:32:56.229", "finished_execute", "p", plugin, [{"output_type": "stream", "size": 23}]),
        _june_row("2023-05-06 10:33:00.000", "execute", "a", "x = 1\nx"),
        _june_row(
            "2023-05-06 10:33:00.100",
            "finished_execute",
            "a",
            "x = 1\nx",
            [{"output_type": "execute_result", "data": {"text/plain": "1"}}],
        ),
        _june_row("2023-05-06 10:33:10.000", "execute", "b", "while True: pass"),
        _june_row("2023-05-06 10:33:12.500", "kernel_interrupting"),
        _june_row(
            "2023-05-06 10:33:12.600",
            "finished_execute",
            "b",
            "while True: pass",
            [{"output_type": "error", "size": 80}],
        ),
        _june_row("2023-05-06 10:33:13.000", "cell_type_changed", "b"),  # a kind this reader does not know
    ]
    [trajectory] = read_source(_write_log(rows, tmp_path / "june.parquet"))
    assert trajectory.actions == [
        Execute("p", plugin, None),  # the plugin logged only a size: the original output is unknown, not ""
        Execute("a", "x = 1\nx", "1"),
        Execute("b", "while True: pass", None, interrupt_after=2.5),
    ]


def test_skip_pattern_drops_the_logging_plugin_cell_by_default(tmp_path: Path) -> None:
    plugin = 'from mining_extension import check_logging\ncheck_logging("http://example.org")'
    rows = [_event(0, KERNEL_A, "execute", "p", plugin), _event(1, KERNEL_A, "execute", "a", "x = 1")]
    rows += [_event(2, KERNEL_B, "execute", "q", plugin)]  # a kernel that only ran the plugin cell
    path = _write_log(rows, tmp_path / "log.csv")
    [kept] = read_sources([path], JUNE_PLUGIN_PATTERN)
    assert [a.code for a in kept.executions] == ["x = 1"]
    assert len(read_sources([path], "")) == 2  # "" runs every cell
    with pytest.raises(InputError, match="not a regular expression"):
        read_sources([path], "check_logging(")


def test_a_log_is_read_through_fsspec_urls(tmp_path: Path) -> None:
    folder = tmp_path / "hub"
    folder.mkdir()
    local = _write_log(_log_rows(), folder / "session.parquet")
    _write_log(_log_rows()[:3], folder / "other.jsonl")
    by_path = read_source(local)
    by_url = read_source(local.as_uri())
    assert [t.actions for t in by_url] == [t.actions for t in by_path]
    assert [t.trajectory_id for t in by_url] == ["session-aaaaaaaa", "session-bbbbbbbb"]
    assert by_url[0].source == local.as_uri()  # not a local Path: the recorder then needs --workdir
    files = source_files([folder.as_uri()])
    assert files == [(folder / "other.jsonl").as_uri(), local.as_uri()]
    empty = tmp_path / "empty"
    empty.mkdir()
    (empty / "notes.txt").write_text("nothing to replay")
    with pytest.raises(SourceError, match="holds no"):
        source_files([empty.as_uri()])
