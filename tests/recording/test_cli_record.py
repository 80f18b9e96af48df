"""``themisto record`` end to end: notebooks and JuNE logs to valid trajectories, resume, bad input."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import nbformat
import pandas as pd
import pytest

from themisto.cli import main
from themisto.trajectory import read_trajectory


def _notebook(path: Path, cells: list[str]) -> Path:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code, id=f"c{i}") for i, code in enumerate(cells)]
    nbformat.write(notebook, path)
    return path


def _log(path: Path) -> Path:
    def row(second: int, kernel: str, event: str, cell: str = "", source: str = "", output: str = "") -> dict:
        return {
            "action_id": second,
            "time": second,
            "session_id": "s",
            "kernel_id": kernel,
            "notebook_name": "n.ipynb",
            "event": event,
            "cell_index": cell,
            "cell_num": 0,
            "cell_type": "code",
            "cell_source": source,
            "cell_output": output,
            "user_id": "u",
        }

    printed = json.dumps([{"output_type": "stream", "name": "stdout", "text": "3\n"}])
    rows = [
        row(1, "k1-session", "execute", "a", "n = 3\nprint(n)"),
        row(2, "k1-session", "finished_execute", "a", output=printed),
        row(3, "k1-session", "kernel_restarting"),
        row(4, "k1-session", "execute", "b", "n"),
        row(5, "k2-session", "execute", "z", "open('data.txt').read()"),
    ]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _june_csv(events: list[tuple[str, str]]) -> str:
    """A JuNE CSV log of one kernel with the given (event, cell_source) rows."""
    rows = [
        {
            "time": i,
            "kernel_id": "kernel-1",
            "event": event,
            "cell_index": f"c{i}",
            "cell_source": source,
            "cell_output": "",
        }
        for i, (event, source) in enumerate(events)
    ]
    return pd.DataFrame(rows).to_csv(index=False)


NOTEBOOK_CELLS = ["a = 1", "b = a + 1", "print(b)", "c = b * 10\nc"]


@pytest.mark.kernel
def test_records_notebooks_and_logs_into_valid_trajectories(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    sources = tmp_path / "sources"
    sources.mkdir()
    (sources / "data.txt").write_text("relative data")
    _notebook(sources / "nb.ipynb", NOTEBOOK_CELLS)
    _log(sources / "june.jsonl")
    monkeypatch.chdir(tmp_path)  # relative paths in cells must resolve against the source's folder
    assert main(["record", str(sources), "-o", str(tmp_path / "out"), "--timeout", "20"]) == 0
    # each trajectory beside its provenance (tests/recording/test_provenance.py reads them)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == [
        "june-k1-sessi.jsonl",
        "june-k1-sessi.provenance.json",
        "june-k2-sessi.jsonl",
        "june-k2-sessi.provenance.json",
        "nb.jsonl",
        "nb.provenance.json",
    ]
    notebook = read_trajectory(tmp_path / "out" / "nb.jsonl")
    assert [s.step for s in notebook] == [0, 1, 2, 3] and [s.cell_id for s in notebook] == ["c0", "c1", "c2", "c3"]
    assert notebook[2].output == "2" and notebook[3].output == "20"
    assert [v.name for v in notebook[3].runtime] == ["a", "b", "c"]
    first, second = read_trajectory(tmp_path / "out" / "june-k1-sessi.jsonl")
    assert first.original_output == "3" and first.output == "3" and not first.restarted
    assert second.restarted and second.error["ename"] == "NameError" and second.original_output is None
    [data] = read_trajectory(tmp_path / "out" / "june-k2-sessi.jsonl")
    assert data.output == "'relative data'"
    assert "nb.jsonl: 4 new step(s)" in capsys.readouterr().err


@pytest.mark.kernel
def test_a_notebook_without_code_cells_is_skipped_with_a_warning_in_a_batch(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    corpus = tmp_path / "corpus"
    corpus.mkdir()
    _notebook(corpus / "a_prose.ipynb", [])
    _notebook(corpus / "b_code.ipynb", ["print(1 + 1)"])
    assert main(["record", str(corpus), "-o", str(tmp_path / "out"), "-q"]) == 0
    err = capsys.readouterr().err
    assert "warning: " in err and "a_prose.ipynb: no code cells to run, skipped" in err
    assert [path.name for path in (tmp_path / "out").glob("*.jsonl")] == ["b_code.jsonl"]
    assert read_trajectory(tmp_path / "out" / "b_code.jsonl")[0].output == "2"


@pytest.mark.kernel
def test_resume_continues_after_the_last_complete_step(tmp_path: Path) -> None:
    source = _notebook(tmp_path / "nb.ipynb", NOTEBOOK_CELLS)
    out = tmp_path / "out"
    assert main(["record", str(source), "-o", str(out)]) == 0
    trajectory = out / "nb.jsonl"
    lines = trajectory.read_bytes().splitlines(keepends=True)
    # an interrupted run: two complete steps and half of the third
    trajectory.write_bytes(b"".join(lines[:2]) + lines[2][: len(lines[2]) // 2])
    assert main(["record", str(source), "-o", str(out), "--resume"]) == 0
    resumed = trajectory.read_bytes().splitlines(keepends=True)
    assert resumed[:2] == lines[:2]  # recorded steps are not rewritten
    steps = read_trajectory(trajectory)
    # the replayed cells rebuilt `b` and `a`, so the new steps see them
    assert [s.step for s in steps] == [0, 1, 2, 3] and steps[2].output == "2" and steps[3].output == "20"
    assert not steps[2].restarted and steps[3].state_hash == json.loads(lines[3])["state_hash"]
    assert main(["record", str(source), "-o", str(out), "--resume"]) == 0  # complete: nothing to do
    assert trajectory.read_bytes().splitlines(keepends=True) == resumed


@pytest.mark.kernel
def test_resume_replays_restarts_and_kernel_deaths_like_the_original(tmp_path: Path) -> None:
    events = [
        ("execute", "a = 1"),
        ("kernel_restarting", ""),
        ("execute", "b = 2"),
        ("execute", "import os\nos._exit(1)"),
        ("execute", "c = 3"),
        ("execute", "'a' in dir(), 'b' in dir()"),
    ]
    log = tmp_path / "log.csv"
    log.write_text(_june_csv(events))
    out = tmp_path / "out"
    assert main(["record", str(log), "-o", str(out)]) == 0
    [trajectory] = out.glob("*.jsonl")  # beside its provenance file
    original = read_trajectory(trajectory)
    lines = trajectory.read_bytes().splitlines(keepends=True)
    trajectory.write_bytes(b"".join(lines[:3]))  # stopped right after the step that killed the kernel
    assert main(["record", str(log), "-o", str(out), "--resume"]) == 0
    resumed = read_trajectory(trajectory)
    assert [(s.restarted, s.output) for s in resumed] == [(s.restarted, s.output) for s in original]
    assert [s.restarted for s in resumed] == [False, True, False, True, False]
    assert resumed[-1].output == "(False, False)"


@pytest.mark.kernel
def test_existing_trajectory_is_kept_without_resume_or_overwrite(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    source = _notebook(tmp_path / "nb.ipynb", ["1"])
    (tmp_path / "out").mkdir()
    existing = tmp_path / "out" / "nb.jsonl"
    existing.write_text("precious\n")
    assert main(["record", str(source), "-o", str(tmp_path / "out")]) == 2
    captured = capsys.readouterr()
    assert existing.read_text() == "precious\n" and "--resume" in captured.err
    # said once: no "failed:" line before the error line that says the same
    assert (captured.out + captured.err).count("--resume") == 1, captured
    _notebook(source, ["'changed'"])
    existing.write_text(json.dumps({"bad": 1}) + "\n")
    assert main(["record", str(source), "-o", str(tmp_path / "out"), "--overwrite"]) == 0
    assert read_trajectory(existing)[0].output == "'changed'"


def test_resume_refuses_a_trajectory_from_other_code(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    source = _notebook(tmp_path / "nb.ipynb", ["x = 1", "x"])
    out = tmp_path / "out"
    out.mkdir()
    line = {
        "trajectory_id": "nb",
        "step": 0,
        "cell_id": "c0",
        "code": "x = 2",
        "output": "",
        "error": None,
        "execution_time": 0.0,
        "memory_bytes": None,
        "runtime": [],
        "state_hash": "",
        "restarted": False,
    }
    (out / "nb.jsonl").write_text(json.dumps(line) + "\n")
    assert main(["record", str(source), "-o", str(out), "--resume"]) == 2
    assert "does not match" in capsys.readouterr().err


def _one_cell_notebook(folder: Path) -> Path:
    """A valid one-cell notebook, for the cases where only the options are bad."""
    return _notebook(folder / "nb.ipynb", ["1"])


@pytest.mark.parametrize(
    ("make", "extra", "message"),
    [
        (lambda d: d / "absent.ipynb", [], "no such source"),
        (lambda d: _write(d / "bad.ipynb", "{not json"), [], "not a notebook"),
        (lambda d: _write(d / "log.csv", "time,event\n1,execute\n"), [], "missing column(s) kernel_id"),
        (_one_cell_notebook, ["--kernel", "no-such-kernel"], "unknown kernel 'no-such-kernel'"),
        (_one_cell_notebook, ["--workdir", "/no/such/dir"], "working directory"),
        (_one_cell_notebook, ["--timeout", "0"], "--timeout must be positive, got 0"),
        (
            _one_cell_notebook,
            ["--repr-timeout", "-1"],
            "--repr-timeout must be positive, got -1",
        ),
        (
            _one_cell_notebook,
            ["--max-output-chars", "0"],
            "--max-output-chars must be at least 1, got 0",
        ),
        (
            _one_cell_notebook,
            ["--max-cpu-seconds", "0"],
            "--max-cpu-seconds must be at least 1, got 0",
        ),
        (
            _one_cell_notebook,
            ["--max-variables", "0"],
            "--max-variables must be at least 1, got 0",
        ),
        (_one_cell_notebook, ["--max-memory", "0"], "--max-memory must be at least 1, got 0"),
        (
            _one_cell_notebook,
            ["--skip-pattern", "check_logging("],
            "--skip-pattern must be a regular expression, got 'check_logging(' (missing ),",
        ),
        (_one_cell_notebook, ["--jobs", "0"], "--jobs must be at least 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], make: Callable[[Path], Path], extra: list[str], message: str
) -> None:
    source = make(tmp_path)
    assert main(["record", str(source), "-o", str(tmp_path / "out"), *extra]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("themisto record: error:") and message in err
    assert not (tmp_path / "out").exists() or not any((tmp_path / "out").iterdir())


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


@pytest.mark.kernel
def test_command_line_process_reports_bad_input_without_traceback(tmp_path: Path) -> None:
    result = subprocess.run(
        [sys.executable, "-m", "themisto", "record", str(tmp_path / "missing.ipynb"), "-o", str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert result.stderr.strip().splitlines() == [
        f"themisto record: error: no such source file or folder: {tmp_path / 'missing.ipynb'}"
    ]


# The public JuNE table has 13 event kinds; ten are documented (DESIGN.md), and the reader must ignore any
# other kind that changes no kernel state: three stand-ins for the undocumented ones.
JUNE_EVENTS = (
    "save_notebook", "create", "execute", "finished_execute", "error", "rendered", "delete",
    "notebook_renamed", "kernel_interrupting", "kernel_restarting", "kernel_ready", "select", "cell_type_changed",
)  # fmt: skip


@pytest.mark.kernel
def test_a_june_table_with_every_event_kind_records_with_a_real_kernel(tmp_path: Path) -> None:
    plugin = 'from mining_extension import check_logging\ncheck_logging("http://3.249.245.244:9999")'
    slow = "import time\nfor _ in range(100):\n    time.sleep(0.1)"
    rows: list[dict] = []

    def row(event: str, cell: str = "", source: str = "", output: list | None = None, seconds: float = 1.0) -> None:
        clock = 1683369146.282 + sum(r["_dt"] for r in rows) + seconds
        stamp = pd.Timestamp(clock, unit="s").strftime("%Y-%m-%d %H:%M:%S.%f")[:-3]  # JuNE's: no zone
        rows.append({
            "_dt": seconds, "action_id": len(rows), "time": stamp, "session_id": "s-1", "kernel_id": "k-1",
            "notebook_name": "task1.ipynb", "event": event, "cell_index": cell, "cell_num": 0 if cell else "",
            "cell_type": "markdown" if event == "rendered" else ("code" if cell else ""), "cell_source": source,
            "cell_output": json.dumps(output) if output is not None else "", "user_id": "student_7", "expert": False,
        })  # fmt: skip

    row("save_notebook", source="[]")
    row("create", "p")
    row("execute", "p", plugin)
    row("finished_execute", "p", plugin, [{"output_type": "stream", "size": 23}])
    row("kernel_ready")
    row("create", "a")
    row("execute", "a", "x = 41\nx + 1")
    row("finished_execute", "a", "x = 41\nx + 1", [{"output_type": "execute_result", "size": 2}])
    row("rendered", "m", "# Notes")
    row("select", "a")
    row("execute", "b", slow)
    row("kernel_interrupting", seconds=1.5)
    row("finished_execute", "b", slow, [{"output_type": "error", "ename": "KeyboardInterrupt", "evalue": ""}], 0.1)
    row("error", "b", '{"output_type":"error","ename":"KeyboardInterrupt","evalue":""}')
    row("cell_type_changed", "m")
    row("delete", "b", slow)
    row("notebook_renamed", source="analysis.ipynb")
    row("kernel_restarting")
    row("execute", "a", "x = 41\nx + 1")
    row("finished_execute", "a", "x = 41\nx + 1", [{"output_type": "execute_result", "data": {"text/plain": "42"}}])
    row("save_notebook", source="[]")
    log = tmp_path / "june.csv"
    frame = pd.DataFrame(rows).drop(columns="_dt")
    assert set(frame["event"]) == set(JUNE_EVENTS) and "expert" in frame.columns
    frame.to_csv(log, index=False)

    out = tmp_path / "out"
    assert main(["record", str(log), "-o", str(out), "--workdir", str(tmp_path)]) == 0
    steps = read_trajectory(out / "june-k-1.jsonl")
    # the plugin cell is skipped (no import, no network call); the interrupted loop stops as the user stopped it
    assert [s.code for s in steps] == ["x = 41\nx + 1", slow, "x = 41\nx + 1"]
    assert [s.output for s in steps] == ["42", "KeyboardInterrupt", "42"]
    assert [s.original_output for s in steps] == [None, "KeyboardInterrupt", "42"]  # size-only: unknown
    assert steps[1].interrupt_after == pytest.approx(1.5) and steps[1].execution_time < 5
    assert [s.restarted for s in steps] == [False, False, True]
