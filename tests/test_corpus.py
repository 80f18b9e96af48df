"""The bundled corpus (data/logs/*.csv) meets issue 2's requirements, and data/make_logs.py reproduces it.

Budget: 10-20 s (reading ~3 MB of CSV, validating the outputs with
nbformat, and regenerating the smallest session in a real kernel).
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from types import ModuleType
from typing import Any

import nbformat

from themisto.recording.sources.june import JUNE_COLUMNS

ROOT = Path(__file__).resolve().parent.parent
LOGS = ROOT / "data" / "logs"
GENERATOR = ROOT / "data" / "make_logs.py"
# The smallest session: regenerating it keeps the byte-for-byte check fast.
SMALL_SESSION = "s09_linnerud_quick"

EVENTS = {
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
}
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# What make_logs.py puts in place of an image too large for one CSV field.
IMAGE_PLACEHOLDER = "<image/png omitted:"

Row = dict[str, str]


@cache
def logs() -> dict[str, list[Row]]:
    """Every committed log, by file name, as a list of CSV rows (read with the default field limit)."""
    result = {}
    for path in sorted(LOGS.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as handle:
            result[path.name] = list(csv.DictReader(handle))
    return result


def all_rows() -> Iterator[Row]:
    for rows in logs().values():
        yield from rows


def outputs_of(row: Row) -> list[dict[str, Any]]:
    return json.loads(row["cell_output"])


def all_outputs() -> Iterator[dict[str, Any]]:
    for row in all_rows():
        if row["event"] == "finished_execute":
            yield from outputs_of(row)


def test_at_least_eight_logs_by_different_users() -> None:
    assert len(logs()) >= 8
    users = {rows[0]["user_id"] for rows in logs().values()}
    assert len(users) == len(logs())
    for name, rows in logs().items():
        assert {r["user_id"] for r in rows} == {rows[0]["user_id"]}, name


def test_every_log_has_exactly_the_june_columns() -> None:
    for path in sorted(LOGS.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle))
        assert header == list(JUNE_COLUMNS), path.name


def test_event_vocabulary_is_junes_and_every_kind_occurs() -> None:
    used = Counter(r["event"] for r in all_rows())
    assert set(used) == EVENTS


def test_corpus_size_exceptions_and_restarts() -> None:
    events = Counter(r["event"] for r in all_rows())
    assert events["execute"] >= 500
    assert events["kernel_restarting"] >= 5
    errors = [o for o in all_outputs() if o["output_type"] == "error"]
    assert len(errors) >= 40
    # A debugging corpus needs variety, not forty copies of one mistake.
    kinds = {e["ename"] for e in errors}
    assert {"KeyError", "TypeError", "ValueError", "NameError", "IndexError", "AttributeError"} <= kinds


def test_every_execute_is_answered_by_its_finished_execute() -> None:
    for name, rows in logs().items():
        pending: dict[str, Row] = {}  # kernel_id -> the execute waiting for its result
        for row in rows:
            kernel = row["kernel_id"]
            if row["event"] == "execute":
                assert kernel not in pending, f"{name}: two executes in flight on one kernel"
                pending[kernel] = row
            elif row["event"] == "finished_execute":
                started = pending.pop(kernel)
                assert (started["cell_index"], started["cell_source"]) == (row["cell_index"], row["cell_source"])
                assert row["cell_type"] == "code"
        assert not pending, name


def test_rows_are_ordered_in_time_with_sequential_action_ids() -> None:
    for name, rows in logs().items():
        assert [int(r["action_id"]) for r in rows] == list(range(len(rows))), name
        times = [dt.datetime.fromisoformat(r["time"]) for r in rows]
        assert all(t.tzinfo is not None for t in times), name
        assert times == sorted(times), name


def test_cells_are_edited_and_rerun() -> None:
    sources_by_cell: dict[tuple[str, str], list[str]] = {}
    for name, rows in logs().items():
        for row in rows:
            if row["event"] == "execute":
                sources_by_cell.setdefault((name, row["cell_index"]), []).append(row["cell_source"])
    edited = [s for s in sources_by_cell.values() if len(set(s)) > 1]
    rerun_unchanged = [s for s in sources_by_cell.values() if len(s) > len(set(s))]
    assert len(edited) >= 40
    assert len(rerun_unchanged) >= 40


def test_a_restart_is_followed_by_a_fresh_state() -> None:
    """Somewhere a cell that worked before a restart fails right after it with a NameError."""
    fresh_state_failures = 0
    for rows in logs().values():
        restarted: set[str] = set()
        for row in rows:
            if row["event"] == "kernel_restarting":
                restarted.add(row["kernel_id"])
            elif row["event"] == "finished_execute" and row["kernel_id"] in restarted:
                restarted.discard(row["kernel_id"])
                names = [o.get("ename") for o in outputs_of(row)]
                fresh_state_failures += "NameError" in names
    assert fresh_state_failures >= 3


def test_outputs_are_valid_nbformat() -> None:
    notebook = nbformat.v4.new_notebook()
    for row in all_rows():
        if row["event"] == "finished_execute":
            cell = nbformat.v4.new_code_cell(row["cell_source"], outputs=outputs_of(row))
            notebook.cells.append(cell)
    nbformat.validate(notebook)


def test_printed_output_dataframes_arrays_and_plots() -> None:
    outputs = list(all_outputs())
    stdout = [o for o in outputs if o["output_type"] == "stream" and o["name"] == "stdout"]
    results = [o for o in outputs if o["output_type"] == "execute_result"]
    dataframes = [r for r in results if "<table" in r["data"].get("text/html", "") and "text/plain" in r["data"]]
    arrays = [r for r in results if r["data"]["text/plain"].startswith("array(")]
    plots = [o for o in outputs if o["output_type"] == "display_data" and "image/png" in o["data"]]
    assert len(stdout) >= 20
    assert len(dataframes) >= 30
    assert len(arrays) >= 20
    pngs = [p["data"]["image/png"] for p in plots if not p["data"]["image/png"].startswith(IMAGE_PLACEHOLDER)]
    assert len(pngs) >= 20
    for png in pngs:
        assert base64.b64decode(png).startswith(PNG_SIGNATURE)


def test_every_field_fits_the_default_csv_field_limit() -> None:
    """Readers using Python's csv module with its default limit can read the logs."""
    assert max(len(value) for row in all_rows() for value in row.values()) < csv.field_size_limit()


def test_save_events_carry_the_notebook_as_a_json_list() -> None:
    saves = [r for r in all_rows() if r["event"] == "save_notebook"]
    assert saves
    for save in saves:
        sources = json.loads(save["cell_source"])
        assert isinstance(sources, list) and all(isinstance(s, str) for s in sources)


def test_one_log_interleaves_two_kernels() -> None:
    kernels_per_log = [len({r["kernel_id"] for r in rows}) for rows in logs().values()]
    assert max(kernels_per_log) >= 2


def test_no_machine_specific_paths_or_downloads() -> None:
    """Outputs are normalised (no local interpreter prefix) and code uses only bundled data."""
    home = os.path.expanduser("~")
    for name in logs():
        text = (LOGS / name).read_text(encoding="utf-8")
        for prefix in (sys.prefix, sys.base_prefix, str(ROOT)):
            assert prefix not in text, name
            assert prefix.replace(home, "~", 1) not in text, name
    for row in all_rows():
        assert "fetch_" not in row["cell_source"]
        assert "urlopen" not in row["cell_source"]


def test_regenerating_a_session_reproduces_the_committed_log(tmp_path: Path) -> None:
    subprocess.run(
        [sys.executable, str(GENERATOR), "--only", SMALL_SESSION, "--out", str(tmp_path)],
        check=True,
        capture_output=True,
        timeout=120,
    )
    regenerated = (tmp_path / f"{SMALL_SESSION}.csv").read_bytes()
    assert regenerated == (LOGS / f"{SMALL_SESSION}.csv").read_bytes()


def test_generator_rejects_an_unknown_session(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, str(GENERATOR), "--only", "no_such_session", "--out", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "unknown session(s): no_such_session" in done.stderr
    assert not list(tmp_path.iterdir())


def test_an_interrupted_cell_records_a_keyboard_interrupt() -> None:
    rows = next(rows for rows in logs().values() if any(r["event"] == "kernel_interrupting" for r in rows))
    position = next(i for i, r in enumerate(rows) if r["event"] == "kernel_interrupting")
    finished = next(r for r in rows[position:] if r["event"] == "finished_execute")
    assert [o["ename"] for o in outputs_of(finished) if o["output_type"] == "error"] == ["KeyboardInterrupt"]


@cache
def load_generator() -> ModuleType:
    """data/make_logs.py as a module (data/ is not a package)."""
    spec = importlib.util.spec_from_file_location("make_logs_under_test", GENERATOR)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # dataclasses look their module up in sys.modules while the class is created.
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_oversized_cell_output_gives_up_its_largest_image_first() -> None:
    make_logs = load_generator()
    small, large = "A" * 1000, "B" * (make_logs.MAX_FIELD_CHARS + 10)
    outputs = [
        {"output_type": "display_data", "metadata": {}, "data": {"image/png": small, "text/plain": "<Figure>"}},
        {"output_type": "display_data", "metadata": {}, "data": {"image/png": large, "text/plain": "<Figure>"}},
    ]
    field = make_logs.serialise_outputs(outputs)
    assert len(field) <= make_logs.MAX_FIELD_CHARS
    kept = [o["data"]["image/png"] for o in json.loads(field)]
    assert kept == [small, f"{IMAGE_PLACEHOLDER} {len(large)} base64 characters>"]


def test_machine_specific_text_is_normalised() -> None:
    make_logs = load_generator()
    warning = f"{tempfile.gettempdir()}/ipykernel_48213/1234.py:3: FutureWarning: x\n"
    library = f"File {sys.prefix}/lib/python3.11/site-packages/pandas/core/frame.py:12"
    stdlib = f"File {sys.base_prefix}/lib/python3.11/re/__init__.py:227"
    assert make_logs.normalise_text(warning, 1500) == "/tmp/ipykernel_1500/1234.py:3: FutureWarning: x\n"
    assert (
        make_logs.normalise_text(library, 1500)
        == "File /opt/conda/lib/python3.11/site-packages/pandas/core/frame.py:12"
    )
    assert make_logs.normalise_text(stdlib, 1500) == "File /opt/conda/lib/python3.11/re/__init__.py:227"
