"""The bundled corpus (data/logs/*.csv, data/files/) meets the corpus thresholds of tools/corpus/corpus_stats.py, and the generators reproduce it.

Its time goes to reading ~10 MB of CSV, validating the outputs with nbformat,
rewriting data/files, and regenerating the smallest session in a real kernel.
"""

from __future__ import annotations

import base64
import csv
import datetime as dt
import filecmp
import json
import os
import re
import subprocess
import sys
import tempfile
from collections import Counter
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import nbformat
import pytest
from repository import REPOSITORY

from themisto.recording.sources.june import JUNE_COLUMNS, JUNE_EVENTS
from tools.corpus import corpus_stats, make_files
from tools.corpus.developer import Developer
from tools.corpus.notebook import MAX_FIELD_CHARS, normalise_text, serialise_outputs
from tools.corpus.sessions import SESSIONS

DATA = REPOSITORY / "data"
LOGS = DATA / "logs"
FILES = DATA / "files"
# the log generator as a command; it runs from the repository root, where its package is
GENERATOR = [sys.executable, "-m", "tools.corpus.make_logs"]

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
# What the generator puts in place of an image too large for one CSV field.
IMAGE_PLACEHOLDER = "<image/png omitted:"
JUNE_TIME = re.compile(r"^\d{4}-\d{2}-\d{2} \d{2}:\d{2}:\d{2}\.\d{3}$")  # 2023-05-06 10:32:26.282, no zone

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


def test_the_corpus_meets_the_issue_thresholds() -> None:
    """At least 40 sessions over 12 scenarios in 8 families; 2,000 executions, 150 exceptions, 25 restarts."""
    stats = corpus_stats.log_stats(LOGS)
    assert list(corpus_stats.failures(stats, {})) == []
    assert stats.sessions == len(logs()) >= 40
    assert stats.interrupts >= 10
    # a debugging corpus needs variety, not forty copies of one mistake
    assert {"KeyError", "TypeError", "ValueError", "NameError", "AttributeError", "KeyboardInterrupt"} <= set(
        stats.exceptions
    )
    # development as it happens: every behaviour the issue names occurs, and restarts are not always Run All
    for behaviour in ("re-run, edited", "fix after NameError", "fix after KeyError", "fix after TypeError"):
        assert stats.behaviours[behaviour] >= 10, behaviour
    assert stats.behaviours["out of order (a cell above the previous one)"] >= 50
    assert stats.behaviours["prints and returns"] >= 10 and stats.behaviours["several outputs"] >= 20
    assert stats.after_restart["re-ran some cells"] >= 5 and stats.after_restart["carried on"] >= 5


def test_the_same_scenario_recurs_with_different_developers_and_trajectories() -> None:
    sessions = SESSIONS
    assert {s.name for s in sessions} == {name.removesuffix(".csv") for name in logs()}
    by_scenario: dict[str, list[str]] = {}
    for session in sessions:
        by_scenario.setdefault(session.scenario, []).append(session.persona.user)
    assert all(len(set(users)) >= 3 for users in by_scenario.values())
    for name, rows in logs().items():
        assert {r["user_id"] for r in rows} == {rows[0]["user_id"]}, name
        assert {r["expert"] for r in rows} <= {"True", "False"}, name
    # developers of one scenario write different code: few executed cells are shared between their sessions
    codes = {name: {r["cell_source"] for r in rows if r["event"] == "execute"} for name, rows in logs().items()}
    first, second = (codes[f"{s.name}.csv"] for s in sessions[:2])
    assert len(first & second) < 0.2 * min(len(first), len(second))


def test_every_log_has_exactly_the_june_columns() -> None:
    for path in sorted(LOGS.glob("*.csv")):
        with path.open(newline="", encoding="utf-8") as handle:
            header = next(csv.reader(handle))
        assert header == list(JUNE_COLUMNS), path.name


def test_event_vocabulary_is_junes_and_every_kind_occurs() -> None:
    used = Counter(r["event"] for r in all_rows())
    assert set(used) == set(JUNE_EVENTS)


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


def test_rows_are_ordered_in_junes_time_format_with_sequential_action_ids() -> None:
    for name, rows in logs().items():
        assert [int(r["action_id"]) for r in rows] == list(range(len(rows))), name
        assert all(JUNE_TIME.match(r["time"]) for r in rows), name
        times = [dt.datetime.fromisoformat(r["time"]) for r in rows]
        assert times == sorted(times), name


def test_error_rows_carry_the_error_output_without_its_traceback() -> None:
    """As JuNE's logging plugin writes them: the error output as JSON, never the code."""
    for rows in logs().values():
        for finished, error in zip(rows, rows[1:]):
            if error["event"] != "error":
                continue
            assert finished["event"] == "finished_execute" and finished["cell_index"] == error["cell_index"]
            logged = json.loads(error["cell_source"])
            [shown] = [o for o in outputs_of(finished) if o["output_type"] == "error"]
            assert logged == {key: value for key, value in shown.items() if key != "traceback"}


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


@pytest.mark.slow
def test_outputs_are_valid_nbformat() -> None:
    notebook = nbformat.v4.new_notebook()
    for row in all_rows():
        if row["event"] == "finished_execute":
            cell = nbformat.v4.new_code_cell(row["cell_source"], outputs=outputs_of(row))
            notebook.cells.append(cell)
    nbformat.validate(notebook)


def test_printed_output_dataframes_arrays_and_plots_as_images() -> None:
    outputs = list(all_outputs())
    stdout = [o for o in outputs if o["output_type"] == "stream" and o["name"] == "stdout"]
    results = [o for o in outputs if o["output_type"] == "execute_result"]
    # a table keeps its text/plain rendering; its HTML alternative is left out of the logs
    dataframes = [r for r in results if re.match(r"^ +\S.*\n\S+ +\S", r["data"]["text/plain"])]
    assert not [o for o in outputs if {"text/plain", "text/html"} <= set(o.get("data", {}))]
    arrays = [r for r in results if r["data"]["text/plain"].startswith("array(")]
    plots = [o for o in outputs if o["output_type"] == "display_data" and "image/png" in o["data"]]
    assert len(stdout) >= 300 and len(dataframes) >= 150 and len(arrays) >= 20
    pngs = [p["data"]["image/png"] for p in plots if not p["data"]["image/png"].startswith(IMAGE_PLACEHOLDER)]
    assert len(pngs) >= 60
    for png in pngs:
        assert base64.b64decode(png).startswith(PNG_SIGNATURE)
    # plotting cells end in plt.show() or ';': a figure shows as a picture, never as a repr
    figure_reprs = [r for r in results if re.search(r"<Figure size|<matplotlib\.|<Axes", r["data"]["text/plain"])]
    assert figure_reprs == []


def test_sessions_read_the_data_files_by_relative_paths_that_exist() -> None:
    """Runtime state the code does not show: the notebooks load files/ (data/files), which the prompt never shows."""
    read: Counter[str] = Counter()
    for row in all_rows():
        if row["event"] == "execute":
            read.update(re.findall(r"'files/([\w.]+)'", row["cell_source"]))
    existing = {path.name for path in FILES.iterdir()}
    assert {name for name in read if name in existing} == existing  # every file is used
    assert set(read) - existing == {"transaction.csv"}  # the debugging session's wrong file name


def test_every_field_fits_the_default_csv_field_limit() -> None:
    """Readers using Python's csv module with its default limit can read the logs."""
    assert max(len(value) for row in all_rows() for value in row.values()) < csv.field_size_limit()


def test_save_events_carry_the_cells_as_the_logging_plugin_saves_them() -> None:
    saves = [r for r in all_rows() if r["event"] == "save_notebook"]
    assert saves
    for save in saves:
        cells = json.loads(save["cell_source"])
        assert isinstance(cells, list)
        for cell in cells:
            assert {"id", "cell_type", "source"} <= set(cell) and isinstance(cell["source"], str)
            assert ("execution_count" in cell) == (cell["cell_type"] == "code")


def test_one_log_interleaves_two_kernels() -> None:
    kernels_per_log = [len({r["kernel_id"] for r in rows}) for rows in logs().values()]
    assert max(kernels_per_log) >= 2


def test_no_machine_specific_paths_or_downloads() -> None:
    """Outputs are normalised (no local interpreter prefix) and code uses only bundled data."""
    home = os.path.expanduser("~")
    for name in logs():
        text = (LOGS / name).read_text(encoding="utf-8")
        for prefix in (sys.prefix, sys.base_prefix, str(REPOSITORY)):
            assert prefix not in text, name
            assert prefix.replace(home, "~", 1) not in text, name
    for row in all_rows():
        # slow services are simulated with time.sleep; the code downloads nothing (sklearn's fetch_*, urls)
        if row["event"] == "execute":
            assert not re.search(r"sklearn\.datasets|urlopen|requests\.get|https?://", row["cell_source"])


def test_rewriting_the_data_files_reproduces_them(tmp_path: Path) -> None:
    make_files.write_all(tmp_path)
    comparison = filecmp.dircmp(FILES, tmp_path)
    assert not (comparison.left_only or comparison.right_only)
    assert filecmp.cmpfiles(FILES, tmp_path, comparison.common_files, shallow=False)[0] == sorted(
        comparison.common_files
    )


def smallest_session() -> str:
    """The session with the fewest rows: regenerating it keeps the byte-for-byte check fast."""
    return min(logs(), key=lambda name: len(logs()[name])).removesuffix(".csv")


@pytest.mark.kernel
def test_regenerating_a_session_reproduces_the_committed_log(tmp_path: Path) -> None:
    name = smallest_session()
    subprocess.run(
        [*GENERATOR, "--only", name, "--out", str(tmp_path)],
        cwd=REPOSITORY,
        check=True,
        capture_output=True,
        timeout=300,
    )
    regenerated = (tmp_path / f"{name}.csv").read_bytes()
    assert regenerated == (LOGS / f"{name}.csv").read_bytes()


def test_generator_rejects_an_unknown_session(tmp_path: Path) -> None:
    done = subprocess.run(
        [*GENERATOR, "--only", "no_such_session", "--out", str(tmp_path)],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode != 0
    assert "unknown session(s): no_such_session" in done.stderr
    assert not list(tmp_path.iterdir())


def test_an_interrupted_cell_records_a_keyboard_interrupt() -> None:
    interrupted = 0
    for rows in logs().values():
        for position, row in enumerate(rows):
            if row["event"] != "kernel_interrupting":
                continue
            finished = next(r for r in rows[position:] if r["event"] == "finished_execute")
            assert [o["ename"] for o in outputs_of(finished) if o["output_type"] == "error"] == ["KeyboardInterrupt"]
            interrupted += 1
    assert interrupted >= 10


def test_oversized_cell_output_gives_up_its_largest_image_first() -> None:
    small, large = "A" * 1000, "B" * (MAX_FIELD_CHARS + 10)
    outputs = [
        {"output_type": "display_data", "metadata": {}, "data": {"image/png": small, "text/plain": "<Figure>"}},
        {"output_type": "display_data", "metadata": {}, "data": {"image/png": large, "text/plain": "<Figure>"}},
    ]
    field = serialise_outputs(outputs)
    assert len(field) <= MAX_FIELD_CHARS
    kept = [o["data"]["image/png"] for o in json.loads(field)]
    assert kept == [small, f"{IMAGE_PLACEHOLDER} {len(large)} base64 characters>"]


def test_machine_specific_text_is_normalised() -> None:
    warning = f"{tempfile.gettempdir()}/ipykernel_48213/1234.py:3: FutureWarning: x\n"
    library = f"File {sys.prefix}/lib/python3.11/site-packages/pandas/core/frame.py:12"
    stdlib = f"File {sys.base_prefix}/lib/python3.11/re/__init__.py:227"
    assert normalise_text(warning, 1500) == "/tmp/ipykernel_1500/1234.py:3: FutureWarning: x\n"
    assert normalise_text(library, 1500) == "File /opt/conda/lib/python3.11/site-packages/pandas/core/frame.py:12"
    assert normalise_text(stdlib, 1500) == "File /opt/conda/lib/python3.11/re/__init__.py:227"


def test_a_developer_renames_variables_in_code_but_not_in_strings_or_keywords() -> None:
    dev = Developer.__new__(Developer)  # renaming needs only the names
    dev.names = {"df": "sales"}
    code = "df = pd.read_csv('df.csv')\nprint(f\"{len(df)} rows\")\nx = dict(df=1).get('df')\ny = other.df"
    assert dev.rename(code) == (
        "sales = pd.read_csv('df.csv')\nprint(f\"{len(sales)} rows\")\nx = dict(df=1).get('df')\ny = other.df"
    )
