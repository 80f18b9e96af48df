"""Property-based fuzzing of the readers and of ``themisto build`` on corrupted input.

The property everywhere: an input ends in a valid result or in one clear
error (a :class:`ThemistoError` with a one-line message; through the CLI, exit
code 2 and a single stderr line), never in another exception.

Each test counts the cases hypothesis ran and asserts a floor, so a silently
shrunken run fails; the counts are attached to the test report as
``fuzz_cases`` (``pytest --junitxml``) and printed with ``-s``.
1,500 cases in all.
"""

from __future__ import annotations

import csv
import io
import json
import shutil
import tempfile
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import redirect_stderr
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from synthetic import synthetic_steps

from themisto.cli import main
from themisto.exceptions import ThemistoError
from themisto.recording.sources import Execute, Restart, SourceTrajectory, read_source
from themisto.recording.sources.june import JUNE_COLUMNS, JUNE_EVENTS

SETTINGS = settings(deadline=None, database=None, suppress_health_check=list(HealthCheck), derandomize=True)
READER_CASES = 600
BUILD_CASES = 300

RecordProperty = Callable[[str, object], None]


@pytest.fixture
def scratch() -> Iterator[Path]:
    """A folder that outlives hypothesis's examples within one test (tmp_path is per test, not per example)."""
    folder = Path(tempfile.mkdtemp(prefix="themisto-fuzz-"))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def report(record_property: RecordProperty, name: str, cases: Counter[str], floor: int) -> None:
    total = sum(cases.values())
    record_property("fuzz_cases", total)
    print(f"{name}: {total} fuzz cases ({', '.join(f'{k} {v}' for k, v in sorted(cases.items()))})")
    assert total >= floor


def read_or_clear_error(path: Path) -> str:
    """Read a source; return ``"valid"`` or ``"error"``, failing on anything but a one-line ThemistoError."""
    try:
        trajectories = read_source(path)
    except ThemistoError as exc:
        message = str(exc)
        assert message and "\n" not in message, f"not a one-line error: {message!r}"
        return "error"
    assert trajectories and all(isinstance(t, SourceTrajectory) for t in trajectories)
    for trajectory in trajectories:
        for action in trajectory.actions:
            assert isinstance(action, (Execute, Restart))
            if isinstance(action, Execute):
                assert isinstance(action.code, str) and isinstance(action.cell_id, str)
                assert action.original_output is None or isinstance(action.original_output, str)
    return "valid"


# --- valid documents, then damage ----------------------------------------------------------------

JSON_SCALARS = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20)
JSON_VALUES = st.recursive(
    JSON_SCALARS,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
HUGE = st.sampled_from([10**30, -(10**30), 2**63, float("inf"), float("-inf"), float("nan"), 1e308, ""])
MUTATIONS = st.sampled_from(["similar", "similar", "replace", "huge", "delete", "extra"])
# A value of the same JSON kind, any content: valid to a schema check, still odd (NaN, "", unicode, 2**63 - 1).
SIMILAR: dict[type, st.SearchStrategy[Any]] = {
    str: st.text(),
    bool: st.booleans(),
    int: st.integers(-(2**63), 2**63 - 1),
    float: st.floats(),
}


# How many nodes of a document are mutated (a name of its own: sharing MUTATIONS made every mutation a replace).
MUTATION_COUNT = st.integers(0, 3)


def mutate(data: st.DataObject, document: Any, count: st.SearchStrategy[int] = MUTATION_COUNT) -> Any:
    """``document`` (decoded JSON, changed in place) with a few random nodes replaced, deleted or added.

    Inputs start valid and take a few mutations, so most reach the code past
    the first check (the parts a hand-written corrupt file rarely gets to).
    """
    for _ in range(data.draw(count)):
        node, key = document, None
        while isinstance(node, (dict, list)) and node:
            key = data.draw(st.sampled_from(list(node) if isinstance(node, dict) else range(len(node))))
            child = node[key]
            if not (isinstance(child, (dict, list)) and child and data.draw(st.booleans())):
                break
            node = child
        if key is None:
            continue
        how = data.draw(MUTATIONS)
        if how == "delete":
            del node[key]
        elif how == "extra" and isinstance(node, dict):
            node[data.draw(st.text(max_size=8))] = data.draw(JSON_VALUES)
        elif how == "similar":
            node[key] = data.draw(SIMILAR.get(type(node[key]), JSON_VALUES))
        else:
            node[key] = data.draw(HUGE if how == "huge" else JSON_VALUES)
    return document


def corrupt(data: st.DataObject, raw: bytes) -> bytes:
    """Leave ``raw`` alone, tear it off at a random byte, splice in random bytes, or replace it."""
    how = data.draw(st.sampled_from(["keep", "keep", "keep", "truncate", "splice", "random"]))
    if how == "truncate":
        return raw[: data.draw(st.integers(0, max(len(raw) - 1, 0)))]
    if how == "splice":
        at = data.draw(st.integers(0, len(raw)))
        return raw[:at] + data.draw(st.binary(min_size=1, max_size=8)) + raw[at:]
    if how == "random":
        return data.draw(st.binary(max_size=200))
    return raw


# --- notebooks -------------------------------------------------------------------------------------

SOURCE = st.text(max_size=40) | st.lists(st.text(max_size=20), max_size=4)
CELL_IDS = st.text("abcdef0123456789-", min_size=1, max_size=12)
CODE_CELLS = st.fixed_dictionaries(
    {
        "cell_type": st.just("code"),
        "id": CELL_IDS,
        "metadata": st.just({}),
        "source": SOURCE,
        "outputs": st.just([]),
        "execution_count": st.none() | st.integers(1, 99),
    }
)
TEXT_CELLS = st.fixed_dictionaries(
    {"cell_type": st.sampled_from(["markdown", "raw"]), "id": CELL_IDS, "metadata": st.just({}), "source": SOURCE}
)
NOTEBOOKS = st.fixed_dictionaries(
    {
        "cells": st.lists(CODE_CELLS | TEXT_CELLS, max_size=5, unique_by=lambda cell: cell["id"]),
        "metadata": st.just({}),
        "nbformat": st.just(4),
        "nbformat_minor": st.sampled_from([4, 5]),
    }
)


# nbformat warns about what it repairs (missing or duplicate cell ids); repairing is a valid result
@pytest.mark.slow
@pytest.mark.filterwarnings("ignore::nbformat.warnings.MissingIDFieldWarning")
@pytest.mark.filterwarnings("ignore::nbformat.warnings.DuplicateCellId")
def test_notebook_reader_gives_trajectories_or_one_clear_error(scratch: Path, record_property: RecordProperty) -> None:
    cases: Counter[str] = Counter()

    @settings(SETTINGS, max_examples=READER_CASES)
    @given(data=st.data(), notebook=NOTEBOOKS)
    def check(data: st.DataObject, notebook: dict[str, Any]) -> None:
        path = scratch / "fuzzed.ipynb"
        path.write_bytes(corrupt(data, json.dumps(mutate(data, notebook)).encode("utf-8")))
        cases[read_or_clear_error(path)] += 1

    check()
    report(record_property, "notebook reader", cases, READER_CASES)


# --- JuNE logs -------------------------------------------------------------------------------------

OUTPUTS = st.lists(
    st.fixed_dictionaries({"output_type": st.just("stream"), "name": st.just("stdout"), "text": SOURCE})
    | st.fixed_dictionaries(
        {
            "output_type": st.sampled_from(["execute_result", "display_data"]),
            "metadata": st.just({}),
            "data": st.fixed_dictionaries({"text/plain": SOURCE}),
        }
    )
    | st.fixed_dictionaries(
        {
            "output_type": st.just("error"),
            "ename": st.text(max_size=10),
            "evalue": st.text(max_size=10),
            "traceback": st.just([]),
        }
    ),
    max_size=3,
)
ROW = st.fixed_dictionaries(
    {
        "action_id": st.integers(0, 10**6),
        "session_id": st.just("s1"),
        "kernel_id": st.sampled_from(["k-aaaaaaaa-1", "k-aaaaaaaa-2", "k-bbbbbbbb"]),
        "notebook_name": st.just("task.ipynb"),
        "event": st.sampled_from(
            ["execute", "execute", "execute", "finished_execute", "finished_execute", *JUNE_EVENTS]
        ),
        "cell_index": st.sampled_from(["c1", "c2", "c3"]),
        "cell_num": st.integers(0, 5),
        "cell_type": st.sampled_from(["code", "code", "markdown", "raw"]),
        "cell_source": st.text(max_size=30),
        "cell_output": OUTPUTS.map(json.dumps) | st.just(""),
        "user_id": st.just("u1"),
    }
)


@st.composite
def june_rows(draw: st.DrawFn) -> list[dict[str, Any]]:
    """Log rows in any file order, stamped with one kind of time (seconds or ISO timestamps) as JuNE logs are."""
    rows = draw(st.lists(ROW, min_size=1, max_size=6))
    iso = draw(st.booleans())
    for row, second in zip(rows, draw(st.permutations(range(len(rows))))):
        row["time"] = f"2024-05-01T10:00:{second:02d}Z" if iso else 1_714_557_600 + second
    return rows


# Most logs keep every column; some lose one, which the reader must name.
DROPPED = st.one_of(st.just(None), st.just(None), st.just(None), st.sampled_from(JUNE_COLUMNS))


def as_text(value: Any) -> str:
    """A cell as a CSV or Parquet string column holds it."""
    return value if isinstance(value, str) else json.dumps(value)


def drop_column(row: Any, column: str | None) -> Any:
    return {key: value for key, value in row.items() if key != column} if isinstance(row, dict) else row


def write_log(suffix: str, rows: list[Any]) -> bytes:
    """The rows as a log file; a row that a mutation made a non-object stays so in JSONL, a cell elsewhere."""
    if suffix == ".jsonl":
        return "".join(json.dumps(row) + "\n" for row in rows).encode("utf-8")
    rows = [row if isinstance(row, dict) else {"action_id": row} for row in rows]
    columns = sorted({column for row in rows for column in row})
    if suffix == ".csv":
        buffer = io.StringIO()
        writer = csv.DictWriter(buffer, fieldnames=columns)
        writer.writeheader()
        writer.writerows({k: as_text(v) for k, v in row.items()} for row in rows)
        return buffer.getvalue().encode("utf-8")
    import pyarrow as pa
    import pyarrow.parquet as pq

    # a column of only int64s or only floats (NaN included) stays numeric; any other becomes text
    table = {}
    for column in columns:
        values = [row.get(column) for row in rows]
        present = [v for v in values if v is not None]
        ints = all(type(v) is int and abs(v) < 2**63 for v in present)
        floats = all(type(v) is float for v in present)
        table[column] = values if ints or floats else [None if v is None else as_text(v) for v in values]
    sink = io.BytesIO()
    pq.write_table(pa.table(table) if columns else pa.table({"empty": pa.array([], pa.int64())}), sink)
    return sink.getvalue()


@pytest.mark.slow
def test_june_reader_gives_trajectories_or_one_clear_error(scratch: Path, record_property: RecordProperty) -> None:
    cases: Counter[str] = Counter()

    @settings(SETTINGS, max_examples=READER_CASES)
    @given(data=st.data(), suffix=st.sampled_from([".csv", ".jsonl", ".parquet"]), rows=june_rows(), dropped=DROPPED)
    def check(data: st.DataObject, suffix: str, rows: list[dict[str, Any]], dropped: str | None) -> None:
        rows = [drop_column(row, dropped) for row in mutate(data, rows)]
        path = scratch / f"log{suffix}"
        path.write_bytes(corrupt(data, write_log(suffix, rows)))
        cases[f"{suffix[1:]} {read_or_clear_error(path)}"] += 1

    check()
    report(record_property, "JuNE reader", cases, READER_CASES)


# --- themisto build on corrupted trajectories -------------------------------------------------------


@pytest.mark.slow
def test_build_on_corrupted_trajectories_builds_or_fails_in_one_line(
    scratch: Path, record_property: RecordProperty
) -> None:
    cases: Counter[str] = Counter()
    template = [step.to_dict() for step in synthetic_steps("fuzz", 12, seed=3)]

    @settings(SETTINGS, max_examples=BUILD_CASES)
    @given(data=st.data())
    def check(data: st.DataObject) -> None:
        folder = scratch / "trajectories"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        steps = json.loads(json.dumps(template))
        for _ in range(data.draw(st.integers(0, 3))):
            mutate(data, steps[data.draw(st.integers(0, len(steps) - 1))], st.just(1))
        ascii_only = data.draw(st.booleans())
        lines = [json.dumps(step, ensure_ascii=ascii_only) for step in steps]
        raw = "\n".join(lines).encode("utf-8") + data.draw(st.sampled_from([b"\n", b"", b"\n\n", b'\n{"torn']))
        (folder / "fuzz.jsonl").write_bytes(corrupt(data, raw))
        stderr = io.StringIO()
        with redirect_stderr(stderr):
            code = main(["build", str(folder), "-o", str(scratch / "dataset"), "--sample", "all"])
        if code == 0:
            assert (scratch / "dataset" / "README.md").is_file()
            cases["built"] += 1
        else:
            error = stderr.getvalue()
            assert code == 2 and error.startswith("themisto build: error:") and error.count("\n") == 1, error
            cases["error"] += 1

    check()
    report(record_property, "themisto build", cases, BUILD_CASES)
