"""Execution-checked next-cell scoring, with real kernels: a notebook recorded by the real recorder, sample
logs in lm-eval's format holding chosen predictions, and ``exec_score`` replaying it once with forks."""

from __future__ import annotations

import json
import re
import shutil
import signal
import subprocess
import sys
import time
from functools import partial
from pathlib import Path
from typing import Any

import nbformat
import pytest
from attacks import THE_KERNEL, processes_named
from exec_logs import write_next_cell_logs

from themisto.cli import main
from themisto.evaluation.exec import ExecReport, exec_samples_name, exec_score
from themisto.evaluation.exec.replay import parse_outcome
from themisto.evaluation.metrics import exact_match
from themisto.kernel import forking, inject
from themisto.kernel.environment import FORK_ABI
from themisto.kernel.forking import ForkingSession, state_key
from themisto.kernel.inside import landlock
from themisto.kernel.inside.wire import ForkResult
from themisto.kernel.recorder import Recorder
from themisto.kernel.transport import Execution
from themisto.recording.options import RecordOptions
from themisto.recording.record import record_source
from themisto.trajectory import Step, Variable, read_trajectory, variable_json, write_trajectory
from themisto.vocabulary import NEXT_CELL_TASK, REFERENCE_MODEL, RUNTIME_SUFFIX

pytestmark = pytest.mark.kernel  # every test but one replays in a real kernel

RUNTIME_TASK = NEXT_CELL_TASK + RUNTIME_SUFFIX
CELLS = [
    "import os\nimport pandas as pd",
    "df = pd.DataFrame({'price': [1.5, 2.5], 'qty': [2, 4]})",
    "open('notes.txt', 'w').write('hello')",
    "counter = 10",
    "print('total:', (df['price'] * df['qty']).sum())",
    "counter + 1",
    "print(open('notes.txt').read())",
    "x = [1, 2, 3]",
]
# A child process the prediction at step 7 starts, found by its unusual argument after scoring.
SLEEPER = "3131.5"
# Predictions per model and task: {step: code}. At one step the codes run in this order (files sorted by
# path, lines in order), so a destructive prediction runs before the one that checks it had no effect.
PREDICTIONS: dict[tuple[str, str], dict[int, str]] = {
    ("m1", NEXT_CELL_TASK): {
        3: "counter = 5 + 5",  # another text for the same state
        4: 'print("total:",  (df["price"]*df["qty"]).sum())  # the total',  # reformatted developer's cell
        5: "counter = 99",  # rebinds a global
        6: "os.remove('notes.txt')",  # deletes a file the developer's cell reads
    },
    ("m1", RUNTIME_TASK): {
        3: "counter = 11",  # no output either, but another state
        4: "df['qty'].sum()",  # a column only the runtime state has
        5: "while True:\n    pass",  # loops forever
        6: "open('notes.txt', 'w').write('changed')",  # rewrites the file
    },
    ("m2", NEXT_CELL_TASK): {
        2: THE_KERNEL + "import signal\nsignal_the_kernel(signal.SIGKILL)",  # kills the kernel itself
        4: "df['quantity'].sum()",  # a misspelled column
        5: "counter + 1",  # the developer's cell, after the rebinding and the endless loop
        6: "print(open('notes.txt').read())",  # the developer's cell, after the deletion and the rewrite
        7: f"import subprocess\nchild = subprocess.Popen(['sleep', '{SLEEPER}'])",
    },
}
TIMEOUT = 15.0


def _record(folder: Path, cells: list[str] = CELLS) -> Path:
    """The notebook of ``cells`` recorded by the real recorder; returns the trajectory file."""
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code) for code in cells]
    source = folder / "shop.ipynb"
    nbformat.write(notebook, source)
    workdir = folder / "recording-workdir"
    workdir.mkdir()
    (path,) = record_source(source, folder / "trajectories", RecordOptions(workdir=workdir))
    return path


@pytest.fixture(scope="module")
def recorded(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = _record(tmp_path_factory.mktemp("exec-recorded"))
    assert [step.output for step in read_trajectory(path)][4:7] == ["total: 13.0", "11", "hello"]
    return path


@pytest.fixture(scope="module")
def scored(recorded: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, ExecReport, float]:
    run_dir = tmp_path_factory.mktemp("exec-run")
    write_next_cell_logs(run_dir, read_trajectory(recorded), PREDICTIONS)
    started = time.monotonic()
    report = exec_score([run_dir], trajectories=[recorded], options=RecordOptions(timeout=TIMEOUT))
    return run_dir, report, time.monotonic() - started


def _lines(run_dir: Path, model: str, task: str) -> dict[int, dict[str, Any]]:
    path = run_dir / model / exec_samples_name(task)
    return {record["step"]: record for record in map(json.loads, path.read_text().splitlines())}


def test_reformatted_cell_matches_by_execution_not_text(scored: tuple[Path, ExecReport, float]) -> None:
    run_dir = scored[0]
    line = _lines(run_dir, "m1", NEXT_CELL_TASK)[4]
    prediction = PREDICTIONS["m1", NEXT_CELL_TASK][4]
    assert exact_match(prediction, CELLS[4]) == 0.0
    assert (line["exec_ok"], line["exec_match"], line["state_match"], line["error"]) == (1, 1, 1, None)


def test_runtime_column_runs_and_misspelled_column_fails(scored: tuple[Path, ExecReport, float]) -> None:
    run_dir = scored[0]
    runs = _lines(run_dir, "m1", RUNTIME_TASK)[4]
    fails = _lines(run_dir, "m2", NEXT_CELL_TASK)[4]
    assert (runs["exec_ok"], runs["exec_match"], runs["error"]) == (1, 0, None)
    assert (fails["exec_ok"], fails["exec_match"]) == (0, 0)
    assert fails["error"] == "KeyError: 'quantity'"


def test_state_match_compares_the_namespace(scored: tuple[Path, ExecReport, float]) -> None:
    run_dir = scored[0]
    same = _lines(run_dir, "m1", NEXT_CELL_TASK)[3]
    other = _lines(run_dir, "m1", RUNTIME_TASK)[3]
    # neither prints anything, so both outputs match; only the namespace tells them apart
    assert (same["exec_match"], same["state_match"]) == (1, 1)
    assert (other["exec_match"], other["state_match"]) == (1, 0)


def test_deleted_file_and_rebound_global_do_not_reach_the_next_prediction(
    scored: tuple[Path, ExecReport, float],
) -> None:
    run_dir = scored[0]
    m1 = _lines(run_dir, "m1", NEXT_CELL_TASK)
    assert m1[5]["exec_ok"] == 1 and m1[6]["exec_ok"] == 1  # the rebinding and the deletion ran
    after = _lines(run_dir, "m2", NEXT_CELL_TASK)
    assert (after[5]["exec_match"], after[5]["state_match"]) == (1, 1)  # counter is 10 again: 11
    assert (after[6]["exec_match"], after[6]["state_match"]) == (1, 1)  # notes.txt is back, unchanged
    # nor the replay: the developer's cells after them reproduce their recorded outputs
    reference = _lines(run_dir, REFERENCE_MODEL, NEXT_CELL_TASK)
    assert not any(line["diverged"] for line in reference.values())


def test_endless_loop_ends_at_the_timeout_and_the_next_prediction_runs(
    scored: tuple[Path, ExecReport, float],
) -> None:
    run_dir, _, elapsed = scored
    loop = _lines(run_dir, "m1", RUNTIME_TASK)[5]
    assert (loop["exec_ok"], loop["exec_match"], loop["state_match"]) == (0, 0, 0)
    assert loop["error"] == f"TimeoutError: cell did not finish within {TIMEOUT:g} s"
    assert _lines(run_dir, "m2", NEXT_CELL_TASK)[5]["exec_match"] == 1
    assert elapsed < 10 * TIMEOUT  # one timeout, not the kernel's whole budget


def test_a_prediction_cannot_signal_the_kernel_from_its_sandbox(scored: tuple[Path, ExecReport, float]) -> None:
    run_dir, report = scored[0], scored[1]
    killer = _lines(run_dir, "m2", NEXT_CELL_TASK)[2]
    assert (killer["exec_ok"], killer["exec_match"], killer["tampered"]) == (0, 0, False)
    # in its PID namespace the kernel has no pid, and a pidfd of its /proc folder is refused for it
    assert killer["error"] == "OSError: [Errno 22] Invalid argument"
    # the kernel lived on: nothing had to be restored, and the replay went on
    assert [t.restores for t in report.trajectories] == [0]
    reference = _lines(run_dir, REFERENCE_MODEL, NEXT_CELL_TASK)
    assert reference[2]["exec_match"] == 1 and reference[4]["exec_match"] == 1


def test_without_the_sandbox_a_prediction_that_kills_the_kernel_fails_alone(recorded: Path, tmp_path: Path) -> None:
    steps = read_trajectory(recorded)
    run_dir = tmp_path / "run"
    killer = "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)"
    write_next_cell_logs(run_dir, steps, {("m", NEXT_CELL_TASK): {2: killer, 3: "counter = 10", 4: CELLS[4]}})
    report = exec_score([run_dir], trajectories=[recorded], options=RecordOptions(timeout=60, sandbox=False))
    lines = _lines(run_dir, "m", NEXT_CELL_TASK)
    assert (lines[2]["exec_ok"], lines[2]["tampered"]) == (0, True)
    assert lines[2]["error"].startswith("DeadKernelError")
    # the replay was rebuilt from its start (with notes.txt, written at step 2) after the run of the step's codes
    # together, and again after the killer alone (the others ran alone too, unharmed); then the replay went on
    assert report.trajectories[0].restores == 2
    assert [lines[step]["exec_match"] for step in (3, 4)] == [1, 1]
    reference = _lines(run_dir, REFERENCE_MODEL, NEXT_CELL_TASK)
    assert [reference[step]["exec_match"] for step in (2, 3, 4)] == [1, 1, 1]


def test_nothing_a_prediction_started_outlives_scoring(scored: tuple[Path, ExecReport, float]) -> None:
    run_dir = scored[0]
    assert _lines(run_dir, "m2", NEXT_CELL_TASK)[7]["exec_ok"] == 1  # it did start the process
    assert processes_named(SLEEPER) == []


def test_reference_is_the_ceiling_and_files_have_the_contract_format(
    scored: tuple[Path, ExecReport, float],
) -> None:
    run_dir, report = scored[0], scored[1]
    reference = _lines(run_dir, REFERENCE_MODEL, NEXT_CELL_TASK)
    # the union of the examples of every model's log of that task, each the developer's own cell
    assert sorted(reference) == [2, 3, 4, 5, 6, 7]
    assert all((line["exec_ok"], line["exec_match"], line["state_match"]) == (1, 1, 1) for line in reference.values())
    for file in report.files:
        for line in map(json.loads, file.path.read_text().splitlines()):
            assert set(line) == {"example_id", "trajectory_id", "step", "exec_ok", "exec_match", "state_match"} | {
                "filter",
                "diverged",
                "tampered",
                "error",
            }
            assert all(line[name] in (0, 1) and type(line[name]) is int for name in ("exec_ok", "exec_match"))
    # distinct codes run once each: 13 predictions and 6 reference cells, one shared (step 5 and 6 of m2)
    assert report.executions == 13 + 6 - 2


def test_the_report_reads_the_exec_samples_beside_the_models_and_the_reference(
    scored: tuple[Path, ExecReport, float],
) -> None:
    from themisto.reporting.samples import load_samples

    samples, notes = load_samples([scored[0]])
    rows = {(s.model, s.task): s for s in samples}
    assert set(rows) == {(model, task) for model, task in PREDICTIONS} | {
        (REFERENCE_MODEL, NEXT_CELL_TASK),
        (REFERENCE_MODEL, RUNTIME_TASK),
    }
    assert not [note for note in notes if "exec" in note]  # every line joined its sample
    reference = rows[REFERENCE_MODEL, NEXT_CELL_TASK]
    assert reference.scores["exec_match"] == [1.0] * 6 and reference.scores["exact_match"] == [1.0] * 6
    killer = rows["m2", NEXT_CELL_TASK]
    assert killer.scores["exec_ok"][killer.example_ids.index("shop/2")] == 0.0


def test_a_step_whose_replay_diverged_is_excluded(recorded: Path, tmp_path: Path) -> None:
    steps = read_trajectory(recorded)
    steps[5].output = "12"  # the recording disagrees with what the replay will print
    changed = tmp_path / "shop.jsonl"
    write_trajectory(changed, steps)
    run_dir = tmp_path / "run"
    write_next_cell_logs(run_dir, steps, {("m", NEXT_CELL_TASK): {5: "counter + 1", 6: CELLS[6]}})
    exec_score([run_dir], trajectories=[changed], options=RecordOptions(timeout=60))
    lines = _lines(run_dir, "m", NEXT_CELL_TASK)
    assert lines[5]["diverged"] is True
    assert (lines[5]["exec_ok"], lines[5]["exec_match"], lines[5]["state_match"]) == (None, None, None)
    assert lines[6]["diverged"] is False and lines[6]["exec_match"] == 1


def test_state_key_ignores_size_and_addresses_but_not_values() -> None:
    a = Variable("f", "function", 136, "<function f at 0x7f3a2c1b>")
    b = Variable("f", "function", 144, "<function f at 0x7e0000aa>", size_method="getsizeof")
    assert state_key([a]) == state_key([b])
    assert state_key([a]) != state_key([Variable("g", "function", 136, "<function g at 0x7f3a2c1b>")])


def test_state_key_hashes_a_record_once_and_answers_as_without_its_cache(monkeypatch: pytest.MonkeyPatch) -> None:
    def uncached(variables: list[Variable]) -> str:
        forking._KEY_TEXTS.clear()
        return state_key(variables)

    records = [Variable(f"v{n}", "int", 28, f"{n} at 0x{n:x}") for n in range(8)]
    encoded: list[str] = []

    def counted(variable: Variable) -> str:
        encoded.append(variable.name)
        return variable_json(variable)

    monkeypatch.setattr(forking, "variable_json", counted)
    twin = Variable("v3", "int", 28, "3 at 0x3")
    mixed = [*records[4:], *records[:3], twin]
    expected = uncached(mixed)
    first = uncached(records)
    assert encoded[-8:] == [v.name for v in records]
    # the same records again, in another order, with a record of its own equal to one: only that one is encoded
    encoded.clear()
    assert state_key(mixed) == expected and encoded == ["v3"]
    encoded.clear()
    assert state_key(records) == first and encoded == []
    # past the records it keeps, it starts again, with the same answers
    monkeypatch.setattr(forking, "KEY_TEXTS_KEPT", 4)
    fresh = [Variable(f"v{n}", "int", 28, f"{n} at 0x{n:x}") for n in range(8)]
    assert state_key(fresh) == first and len(forking._KEY_TEXTS) <= 4
    # a record that took the id of one no longer held is encoded anew (the cache holds its record, so no id is
    # reused while its entry lives; an entry is checked by identity all the same)
    assert state_key([Variable("w", "str", 50, "'w'")]) != state_key([Variable("w", "str", 50, "'x'")])


def test_the_check_after_a_forked_run_hashes_only_a_namespace_it_does_not_hold_already(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    a, b = Variable("a", "int", 28, "1"), Variable("b", "str", 50, "'x'")
    before = {"a": a, "b": b}
    hashed: list[int] = []

    def counted(variables: list[Variable]) -> str:
        hashed.append(len(variables))
        return state_key(variables)

    monkeypatch.setattr(forking, "state_key", counted)
    # the very records of the last snapshot, in its order (what an unchanged snapshot hands back): no hash
    assert forking._same_state([a, b], before) and hashed == []
    # records of their own, equal or not, and the same records in another order: hashed as before
    assert forking._same_state([Variable("a", "int", 28, "1"), Variable("b", "str", 50, "'x'")], before)
    assert not forking._same_state([a, Variable("b", "str", 50, "'y'")], before)
    assert not forking._same_state([b, a], before)
    assert not forking._same_state([a], before)
    assert hashed == [2, 2, 2, 2, 2, 2, 1, 2]


def test_cli_scores_a_real_lm_eval_run_with_trajectories_from_the_build(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from themisto.building.parquet import build_dataset
    from themisto.building.selection import SelectionOptions

    data = tmp_path / "data"
    build_dataset([recorded], data, SelectionOptions(sample="all", quantile=1.0))
    run_dir = tmp_path / "run"
    tasks = f"{NEXT_CELL_TASK},{RUNTIME_TASK}"
    assert (
        main(["eval", "--model", "themisto-repeat-last", "--tasks", tasks, "--data", str(data), "-o", str(run_dir)])
        == 0
    )
    out = tmp_path / "out"
    assert main(["exec-score", str(run_dir), "--data", str(data), "-o", str(out), "--timeout", "60"]) == 0
    table = capsys.readouterr().out
    assert f"| {REFERENCE_MODEL} | {NEXT_CELL_TASK} | 8 | 0 | 0 | 1.000" in table
    for task in (NEXT_CELL_TASK, RUNTIME_TASK):
        repeat = _lines(out, "themisto-repeat-last", task)
        assert sorted(repeat) == list(range(8))
        # repeating the last cell reproduces the output only where the developer re-ran a cell of equal output:
        # step 0 (empty prediction, no output) and the silent assignments
        assert repeat[4]["exec_match"] == 0 and repeat[0]["exec_match"] == 1
    assert not list(run_dir.rglob("exec_samples_*"))  # -o: nothing written next to the logs


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["exec-score", "{missing}"], "run folder not found"),
        (["exec-score", "{empty}"], "no next-cell sample logs"),
        (["exec-score", "{run}", "--trajectories", "{other}"], "trajectory shop of the samples is not in"),
        (["exec-score", "{run}", "--trajectories", "{recorded}", "--shard", "2/2"], "shard 2/2"),
        (
            ["exec-score", "{run}", "--trajectories", "{recorded}", "--timeout", "0"],
            "--timeout must be positive, got 0",
        ),
        (["exec-score", "{run}", "--trajectories", "{recorded}", "--jobs", "0"], "--jobs must be at least 1"),
        (["exec-score", "{run}", "--data", "{cardonly}"], "names no file for config 'trajectories'"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    recorded: Path,
    data_dir: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    arguments: list[str],
    message: str,
) -> None:
    run_dir, empty, other = tmp_path / "run", tmp_path / "empty", tmp_path / "other"
    empty.mkdir()
    other.mkdir()
    (other / "x.jsonl").write_text(read_trajectory(recorded)[0].to_json().replace('"shop"', '"x"') + "\n")
    write_next_cell_logs(run_dir, read_trajectory(recorded), {("m", NEXT_CELL_TASK): {1: "pass"}})
    cardonly = tmp_path / "cardonly"
    cardonly.mkdir()
    # a Themisto card whose configs block lists no trajectories config
    card = (data_dir / "README.md").read_text(encoding="utf-8")
    without = re.sub(r"^- config_name: trajectories\n(?:  .*\n)+", "", card, count=1, flags=re.MULTILINE)
    assert without != card
    (cardonly / "README.md").write_text(without, encoding="utf-8")
    paths = {"missing": tmp_path / "nope", "empty": empty, "run": run_dir, "other": other, "recorded": recorded}
    paths["cardonly"] = cardonly
    assert main([argument.format(**paths) for argument in arguments]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1


def test_a_target_that_is_not_the_trajectory_step_is_rejected(recorded: Path, tmp_path: Path) -> None:
    steps = read_trajectory(recorded)
    run_dir = tmp_path / "run"
    write_next_cell_logs(run_dir, steps, {("m", NEXT_CELL_TASK): {3: "pass"}})
    path = next(run_dir.rglob("samples_*.jsonl"))
    path.write_text(path.read_text().replace("counter = 10", "counter = 12"))
    with pytest.raises(Exception, match="pass the trajectories the dataset was built from"):
        exec_score([run_dir], trajectories=[recorded])


def test_predictions_run_under_the_recorders_limits_and_without_credentials(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code) for code in ("n = 3", "n * 2")]
    source = tmp_path / "small.ipynb"
    nbformat.write(notebook, source)
    (recorded,) = record_source(source, tmp_path / "trajectories", RecordOptions(workdir=tmp_path))
    steps = read_trajectory(recorded)
    run_dir = tmp_path / "run"
    predictions = {
        ("m", NEXT_CELL_TASK): {1: "while True:\n    pass"},  # burns CPU: the child's own CPU limit ends it
        ("m", RUNTIME_TASK): {1: "blob = bytearray(3 * 2**30)"},  # past the memory limit
        # prints the developer's output, 6, only if the scorer's token did not reach the prediction
        ("n", NEXT_CELL_TASK): {1: "import os\nprint(0 if 'HF_TOKEN' in os.environ else 6)"},
    }
    write_next_cell_logs(run_dir, steps, predictions)
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    options = RecordOptions(timeout=120, max_cpu_seconds=8, max_memory=2**30)
    started = time.monotonic()
    exec_score([run_dir], trajectories=[recorded], options=options)
    assert time.monotonic() - started < 120  # the CPU limit, not the timeout, ended the loop
    loop = _lines(run_dir, "m", NEXT_CELL_TASK)[1]
    assert (loop["exec_ok"], loop["error"]) == (0, "ChildProcessError: the cell ended its process (killed by SIGXCPU)")
    assert _lines(run_dir, "m", RUNTIME_TASK)[1]["error"].startswith("MemoryError")
    assert _lines(run_dir, "n", NEXT_CELL_TASK)[1]["exec_match"] == 1
    reference = _lines(run_dir, REFERENCE_MODEL, NEXT_CELL_TASK)[1]
    assert (reference["exec_match"], reference["state_match"]) == (1, 1)  # the kernel survived both


def _forking_session(tmp_path: Path, options: RecordOptions | None = None) -> ForkingSession:
    """A forking session of trajectory ``t`` whose kernel works in ``tmp_path/work``, its children in ``scratch``."""
    (tmp_path / "work").mkdir()
    (tmp_path / "scratch").mkdir()
    return ForkingSession("t", tmp_path / "work", options or RecordOptions(timeout=60), tmp_path / "scratch")


def test_children_capture_every_output_and_publish_nothing_on_the_kernels_channels(tmp_path: Path) -> None:
    codes = {
        "print('out')": "out",
        "import sys\nprint('err', file=sys.stderr)": "err",
        "from IPython.display import display\ndisplay('shown')\nprint('after')": "'shown'\nafter",
        "print('before')\n1 / 0": "before\nZeroDivisionError: division by zero",
        "x": "41",
        "import os\nos.system('echo from-fd')": "0\nfrom-fd",  # the result, then the fd output at the end
        "import warnings\nwarnings.warn('careful', FutureWarning)": "FutureWarning: careful",
    }
    options = RecordOptions(timeout=60)
    with _forking_session(tmp_path, options) as session:
        session.run_cell("x = 41", "c")
        execution = session.fork_execution(list(codes))
        # a child writing to the kernel's IOPub socket would publish under this request's header
        assert execution.collector.outputs == []
        assert execution.reply is not None and execution.reply["content"]["status"] == "ok"
        results = ForkResult.from_json(execution.reply["content"]["user_expressions"]["fork"]["data"]["text/plain"])
        before = session.before()
        assert before is not None
        state_of = partial(session.child_state, before=before)
        outcomes = [parse_outcome(result, options, state_of) for result in results.children]
        # and the parent's own next cell is unaffected
        assert session.run_cell("print(x)", "d").output == "41"
    for (code, expected), outcome in zip(codes.items(), outcomes, strict=True):
        if "warn" in code:  # the warning names the cell's file, which holds the process id
            assert outcome.output.endswith("FutureWarning: careful\n  warnings.warn('careful', FutureWarning)")
        else:
            assert outcome.output == expected, code
    assert [outcome.ok for outcome in outcomes] == [True, True, True, False, True, True, True]
    assert outcomes[3].error == "ZeroDivisionError: division by zero"


# A user interrupts a cell this many seconds after it starts (the recording and the replay alike).
INTERRUPT_AFTER = 0.5


def _record_session(path: Path, workdir: Path, cells: list[tuple[str, str]]) -> list[Step]:
    """Record ``cells`` in one real kernel as a JuNE log's replay does, and write the trajectory to ``path``.

    Each cell is ``(code, how)``: ``"run"``; ``"restart"``, after a kernel restart; ``"interrupt"``, interrupted
    by the user after INTERRUPT_AFTER seconds; ``"stopped"``, recorded as the cell an earlier recording was
    running when it stopped (not run; the kernel restarts after it).
    """
    steps = []
    with Recorder(path.stem, workdir, RecordOptions(workdir=workdir)) as recorder:
        for number, (code, how) in enumerate(cells):
            if how == "restart":
                recorder.restart()
            if how == "stopped":
                steps.append(recorder.stopped_step(code, f"c{number}"))
                continue
            interrupt_after = INTERRUPT_AFTER if how == "interrupt" else None
            steps.append(recorder.run_cell(code, f"c{number}", interrupt_after=interrupt_after))
    write_trajectory(path, steps)
    return steps


def test_a_trailing_semicolon_hides_the_value_of_its_own_cell_only(tmp_path: Path) -> None:
    # IPython reads the trailing ';' from the last cell in its history; a forked cell must be that cell
    path = _record(tmp_path, ["x = 41", "x;", "x + 1", "x + 2;", "x + 3"])
    steps = read_trajectory(path)
    assert [step.output for step in steps] == ["", "", "42", "", "44"]
    run_dir = tmp_path / "run"
    write_next_cell_logs(run_dir, steps, {("m", NEXT_CELL_TASK): {2: "(x + 1)", 3: "x + 2;  # quiet", 4: "x+3"}})
    exec_score([run_dir], trajectories=[path], options=RecordOptions(timeout=60))
    for model in ("m", REFERENCE_MODEL):
        lines = _lines(run_dir, model, NEXT_CELL_TASK)
        assert [(lines[step]["exec_ok"], lines[step]["exec_match"]) for step in (2, 3, 4)] == [(1, 1)] * 3, model
    # scoring the run again reads the reference it wrote as its own output, not as one more model's log
    again = exec_score([run_dir], trajectories=[path], options=RecordOptions(timeout=60))
    assert sorted((file.model, file.task) for file in again.files) == [
        ("m", NEXT_CELL_TASK),
        (REFERENCE_MODEL, NEXT_CELL_TASK),
    ]


def test_the_replay_restarts_and_interrupts_where_the_recording_did(tmp_path: Path) -> None:
    workdir = tmp_path / "files"
    workdir.mkdir()
    (workdir / "data.txt").write_text("seed")
    path = tmp_path / "session.jsonl"
    loop = "import time\nfor i in range(400):\n    time.sleep(0.05)\ndone = True"  # 20 s unless interrupted
    cells = [
        ("a = 1", "run"),
        (loop, "interrupt"),
        ("'done' in dir()", "run"),
        ("b = 2", "restart"),
        ("print(open('data.txt').read(), 'a' in dir())", "run"),
    ]
    steps = _record_session(path, workdir, cells)
    assert steps[1].output.endswith("KeyboardInterrupt") and steps[3].restarted
    assert [step.output for step in steps[2:]] == ["False", "", "seed False"]
    run_dir = tmp_path / "run"
    predictions = {2: "'done' in globals()", 3: "a", 4: "print(open('data.txt').read(), 'a' in globals())"}
    write_next_cell_logs(run_dir, steps, {("m", NEXT_CELL_TASK): predictions})
    started = time.monotonic()
    exec_score([run_dir], trajectories=[path], options=RecordOptions(timeout=60, workdir=workdir))
    assert time.monotonic() - started < 20  # the loop was interrupted, not run out
    lines = _lines(run_dir, "m", NEXT_CELL_TASK)
    # the replay interrupted the loop as the user did: the state before step 2 has no `done`, as recorded
    assert (lines[2]["diverged"], lines[2]["exec_match"], lines[2]["state_match"]) == (False, 1, 1)
    # a prediction at a restarted step runs in the restarted kernel, the state the model was shown
    assert (lines[3]["exec_ok"], lines[3]["error"]) == (0, "NameError: name 'a' is not defined")
    # and after the restart the kernel still works in the private copy of the working directory
    assert (lines[4]["exec_ok"], lines[4]["exec_match"]) == (1, 1)
    reference = _lines(run_dir, REFERENCE_MODEL, NEXT_CELL_TASK)
    assert [(line["diverged"], line["exec_match"]) for line in reference.values()] == [(False, 1)] * 3


def test_a_cell_that_stopped_a_recording_is_not_run_again(tmp_path: Path) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    path = tmp_path / "stopped.jsonl"
    cells = [
        ("a = 1", "run"),
        ("open('ran.txt', 'w').write('x')", "stopped"),  # say, the cell that filled the disk
        ("import os\nprint(os.path.exists('ran.txt'), 'a' in dir())", "run"),
    ]
    steps = _record_session(path, workdir, cells)
    assert steps[2].restarted and steps[2].output == "False False"
    run_dir = tmp_path / "run"
    write_next_cell_logs(run_dir, steps, {("m", NEXT_CELL_TASK): {1: "a", 2: "print(False, False)"}})
    exec_score([run_dir], trajectories=[path], options=RecordOptions(timeout=60, workdir=workdir))
    lines = _lines(run_dir, "m", NEXT_CELL_TASK)
    assert (lines[1]["diverged"], lines[1]["exec_ok"]) == (True, None)  # nothing to compare with: excluded
    assert (lines[2]["diverged"], lines[2]["exec_match"]) == (False, 1)
    # the replay restarted there without writing ran.txt, as the recording did
    assert _lines(run_dir, REFERENCE_MODEL, NEXT_CELL_TASK)[2]["exec_match"] == 1


def test_a_trajectory_that_fails_ends_alone_and_keeps_what_it_scored(
    recorded: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    workdir = tmp_path / "work"
    workdir.mkdir()
    path = tmp_path / "deleting.jsonl"
    steps = _record_session(path, workdir, [("a = 1", "run"), ("pass", "run"), ("a = 2", "restart"), ("a", "run")])
    # a session that deletes its working directory: no kernel can restart in it, in a recording or a replay
    steps[1].code = "import os, shutil\nshutil.rmtree(os.getcwd())"
    write_trajectory(path, steps)
    run_dir = tmp_path / "run"
    write_next_cell_logs(run_dir, steps, {("a", NEXT_CELL_TASK): {1: "a + 1", 3: "a"}})
    write_next_cell_logs(run_dir, read_trajectory(recorded), {("b", NEXT_CELL_TASK): {4: CELLS[4], 6: CELLS[6]}})
    # (unconfined: the kernel's sandbox would keep the cell from deleting the folder itself)
    command = [
        "exec-score",
        str(run_dir),
        "--trajectories",
        str(path),
        str(recorded),
        "--timeout",
        "60",
        "--no-sandbox",
    ]
    assert main(command) == 2
    out, err = capsys.readouterr()
    assert "Traceback" not in err
    assert "deleting: failed at step 2 (2 sample line(s) left out): cannot restart kernel: [Errno 2]" in err
    assert err.strip().splitlines()[-1].startswith("themisto exec-score: error: 1 of 2 trajectories failed part-way")
    # what the failed trajectory scored before the failure is kept, and the other trajectory was scored whole
    assert "| a | themisto_next_cell | 1 | 0 | 0 | 1.000" in out
    assert sorted(_lines(run_dir, "a", NEXT_CELL_TASK)) == [1]
    assert [line["exec_match"] for line in _lines(run_dir, "b", NEXT_CELL_TASK).values()] == [1, 1]


# In a forked child: its PID namespace's init (the process whose parent is its own, pid 1 there), described by
# its name and resident memory, and whether it still runs once the child has stopped. /proc is the box's.
FIND_THE_INIT = """
import os
def fields(pid):
    try:
        lines = open(f'/proc/{pid}/status').read().splitlines()
    except OSError:  # ended meanwhile
        return {}
    return {line.split(':')[0]: line.split(':', 1)[1].split() for line in lines if ':' in line}
def namespace(pid):
    try:
        return os.readlink(f'/proc/{pid}/ns/pid')
    except OSError:
        return None
def group(pid):
    try:
        return open(f'/proc/{pid}/stat').read().rsplit(')', 1)[1].split()[2]
    except OSError:
        return None
mine = fields('self')
pids = list(filter(str.isdigit, os.listdir('/proc')))
inits = [pid for pid in pids if namespace(pid) == namespace('self') and fields(pid).get('NSpid', [''])[-1] == '1']
(init,) = inits
print(open(f'/proc/{init}/comm').read().strip(), int(fields(init)['VmRSS'][0]) < 20_000, init)
# the processes of the cell's group that hold memory of the kernel's size: the cell's own alone
copies = [pid for pid in pids if group(pid) == group('self') and int(fields(pid).get('VmRSS', ['0'])[0]) > 150_000]
print(int(mine['VmRSS'][0]) > 150_000, len(copies), mine['PPid'][0])
"""


@pytest.mark.skipif(landlock.abi_version() < FORK_ABI, reason="a confined child needs Landlock ABI 6")
def test_a_predictions_init_is_no_copy_of_the_kernel_and_ends_with_it(tmp_path: Path) -> None:
    with _forking_session(tmp_path) as session:
        session.run_cell("big = b'x' * (200 * 2**20)", "c")  # a kernel of over 200 MB resident
        kernel = session.run_cell("import os\nprint(os.getpid())", "k").output.strip()
        results = session.fork_run([FIND_THE_INIT])
        assert results is not None and results[0].status == "ok", results
        text = "".join(message["content"]["text"] for message in results[0].messages)
        name, small, init = text.splitlines()[0].split()
        # the init is cat (posix_spawn: no copy of the kernel's 200 MB), the process that ran the cell is one, the
        # kernel's own child, and the only one alive: the child that started it, sharing its memory, is dead
        assert (name, small, text.splitlines()[1].split()) == ("cat", "True", ["True", "1", kernel])
        # once the child is killed its init ends (and with it its namespace), done once the kernel has reaped the
        # process that ran the cell (at the next request: Linux keeps a namespace's init until every process of it
        # is reaped, the kernel's child too); the box's /proc no longer has it
        assert session.fork_run(["pass"]) is not None
        probe = f"import os, time\nfor _ in range(100):\n    if not os.path.exists('/proc/{init}/comm'): break\n    time.sleep(0.05)\nprint(os.path.exists('/proc/{init}/comm'))"
        assert session.run_cell(probe, "d").output == "False"


# Memory the replay shares with its children (an anonymous MAP_SHARED mapping): a child's write to it changes the
# replay's namespace behind every sandbox, so only the check after the run can see it.
SHARED_ARRAY = "import mmap\nimport numpy as np\nshared = np.frombuffer(mmap.mmap(-1, 32), dtype=np.int64)"


@pytest.mark.parametrize("sandbox", [True, False])
def test_a_child_that_writes_memory_it_shares_with_the_replay_is_caught(tmp_path: Path, sandbox: bool) -> None:
    if sandbox and landlock.abi_version() < FORK_ABI:
        pytest.skip("a confined child needs Landlock ABI 6")
    with _forking_session(tmp_path, RecordOptions(timeout=60, sandbox=sandbox)) as session:
        session.run_cell(SHARED_ARRAY, "c")
        requests: list[list[str]] = []
        request = session.recorder.request

        def counted(user_expressions: dict[str, str], timeout: float) -> Execution:
            requests.append(list(user_expressions))
            return request(user_expressions, timeout)

        session.recorder.request = counted  # type: ignore[method-assign]
        for code, changed in (("shared.sum()", None), ("shared[0] = 7", "the replay's namespace")):
            checkpoint = session.checkpoint()
            results = session.fork_run([code])
            assert results is not None and results[0].status == "ok", results
            assert session.changed_since(checkpoint) == changed
        # confined, the check rides on the fork request (no child reaches the kernel's channels); unconfined it
        # is a request of its own, after any a child may have sent
        expected = [["fork", "snapshot"]] if sandbox else [["fork"], ["snapshot"]]
        assert requests == expected * 2
        # a check without a forked run since its checkpoint takes a snapshot of its own
        assert session.changed_since(session.checkpoint()) is None
        assert requests[-1] == ["snapshot"]


# A cell of the replay after which a child's own copy of the working folder (every child's but the first's, which
# the kernel copies) starts late: the kernel-side module's copy_tree wrapped, in the state every child forks from.
SLOW_COPY = """import os as _os, sys as _sys, time as _time
_fork = _sys.modules["_themisto_fork"]
_copy, _kernel = _fork.copy_tree, _os.getpid()
def _slow_copy(source, target):
    if _os.getpid() != _kernel:
        _time.sleep({seconds})
    _copy(source, target)
_fork.copy_tree = _slow_copy"""


def _text(result: Any) -> str:
    """A forked cell's output text: its streams and the plain text of its results."""
    return "".join(
        m["content"].get("text", m["content"].get("data", {}).get("text/plain", "")) for m in result.messages
    )


@pytest.mark.parametrize("sandbox", [True, False])
def test_a_slow_copy_counts_against_no_cell_and_no_cell_writes_into_a_later_childs_copy(
    tmp_path: Path, sandbox: bool
) -> None:
    if sandbox and landlock.abi_version() < FORK_ABI:
        pytest.skip("this machine's Landlock cannot confine a prediction")
    leak = tmp_path / "work" / "leak.txt"
    with _forking_session(tmp_path, RecordOptions(timeout=1, sandbox=sandbox)) as session:
        session.run_cell(SLOW_COPY.format(seconds=1.5), "c")
        # the second child's copy takes longer than a cell's time limit, which starts only once it is ready
        results = session.fork_run([f"open({str(leak)!r}, 'w').write('x')", "import os\nos.path.exists('leak.txt')"])
    assert results is not None
    # unconfined, the first cell writes the kernel's folder, but only once the second child has its copy (it
    # would otherwise still be copying when the first runs); confined, Landlock refuses the write
    assert [result.status for result in results] == ["error" if sandbox else "ok", "ok"], results
    assert leak.exists() is not sandbox
    assert _text(results[1]) == "False"


# A replay cell that notes when the kernel has forked a child and when it lets one run its cell: Child's constructor
# and start wrapped, in the state every child forks from.
NOTE_FORKS = """import os as _os, sys as _sys, time as _time
_fork = _sys.modules["_themisto_fork"]
_events, _kernel = [], _os.getpid()
def _noted(name, method):
    def noted(self, *args, **kwargs):
        method(self, *args, **kwargs)
        _events.append((name, _time.monotonic()))
    return noted
_fork.Child.__init__ = _noted("forked", _fork.Child.__init__)
_go = _fork.Child.go
def _noted_go(self):
    going = self._going
    _go(self)
    if self._going and not going:  # the go sent, by go itself or by start
        _events.append(("go", _time.monotonic()))
_fork.Child.go = _noted_go"""
# What makes the first child ready before its go (the kernel's copy of its folder slowed), or after it (a confined
# child's seccomp step slowed), added to NOTE_FORKS.
FIRST_READY = {
    "soon": """
_copy_first = _fork.Child.copy
def _slow_copy_first(self, root):
    _time.sleep(1)
    _copy_first(self, root)
_fork.Child.copy = _slow_copy_first""",
    "late": """
_seccomp = _fork._BOUND["seccomp"]
def _slow_seccomp(*args, **kwargs):
    if _os.getpid() != _kernel:
        _time.sleep(0.5)
    _seccomp(*args, **kwargs)
_fork._BOUND["seccomp"] = _slow_seccomp""",
}
# The first of two cells: it waits while the kernel may fork the second, then looks for the second's code through
# the kernel's file descriptors (the kernel holds the code files until its last fork, and the cell may list their
# numbers through /proc, Landlock or not), as E1 of
# tests/security/test_attacks_exec.py looks everywhere, and for a file the replay holds open, which it finds where
# it may look; the needles are built, so the cell never finds its own text.
SEEK_THE_NEXT_CELL = (
    THE_KERNEL
    + """
import os, stat, time
started = time.monotonic()
time.sleep(0.5)
texts, refused = [], set()
for name in os.listdir(f'/proc/{the_kernel()}/fd'):
    path = f'/proc/{the_kernel()}/fd/{name}'
    try:
        if stat.S_ISREG(os.stat(path).st_mode):
            texts.append(open(path, errors='replace').read())
    except OSError as exc:
        refused.add(type(exc).__name__)
print(started, ','.join(sorted(refused)) or 'none', *(any(needle in text for text in texts) for needle in ('the-' + 'secret-cell', 'the-' + 'decoy')))
"""
)


@pytest.mark.parametrize(("sandbox", "first_ready"), [(True, "soon"), (True, "late"), (False, "soon")])
def test_confined_the_first_child_has_its_go_before_the_other_forks_ready_or_not(
    tmp_path: Path, sandbox: bool, first_ready: str
) -> None:
    if sandbox and landlock.abi_version() < FORK_ABI:
        pytest.skip("this machine's Landlock cannot confine a prediction")
    with _forking_session(tmp_path, RecordOptions(timeout=60, sandbox=sandbox)) as session:
        session.run_cell(NOTE_FORKS + FIRST_READY[first_ready], "c")
        (tmp_path / "work" / "decoy.txt").write_text("the-decoy")
        session.run_cell("held = open('decoy.txt')", "h")
        results = session.fork_run([SEEK_THE_NEXT_CELL, "secret = 'the-secret-cell'"])
        events = json.loads(session.run_cell("print(__import__('json').dumps(_events))", "d").output)
    assert results is not None and [result.status for result in results] == ["ok", "ok"], results
    started, refused, code, decoy = _text(results[0]).split()
    # confined, the first child has its go once its folder is copied, ready or not, and the second is forked after
    # that go, while the first cell may run: the kernel then holds the second's code file, which Landlock keeps the
    # first from reaching (no ptrace access, so no link of /proc/PID/fd of the kernel's is followed); unconfined,
    # every child is forked, and the code files closed, before the first cell may run
    order = [name for name, _ in events]
    if sandbox:
        assert order == ["forked", "go", "forked", "go"]
        (_, first_fork), (_, first_go), (_, second_fork) = events[:3]
        if first_ready == "late":  # the go came before the child was ready, the second fork before its cell
            assert first_go < float(started) - 0.3 and second_fork < float(started)
        else:  # a child ready before its go runs its cell at once, while the kernel forks the second
            assert first_go > first_fork + 1 and float(started) < first_go + 0.3 and second_fork < float(started) + 0.5
    else:
        assert order == ["forked", "forked", "go", "go"]
    # the search finds what the kernel holds where it may look (the decoy), and the code file never; confined, it
    # lists the kernel's descriptors but may follow none
    assert (refused, code, decoy) == (("PermissionError", "False", "False") if sandbox else ("none", "False", "True"))


# The kernel's fork of the second child, held up (the first child, let go, gets ready and may run its cell meanwhile);
# "interrupted": the fork request then ends as an interrupt would end it, before the second fork.
SECOND_FORK_HELD = """import os as _os, sys as _sys, time as _time
_fork = _sys.modules["_themisto_fork"]
_init, _kernel = _fork.Child.__init__, _os.getpid()
def _held(self, index, *args, **kwargs):
    if index == 1 and _os.getpid() == _kernel:
        _time.sleep(1)
        if {interrupted}:
            raise KeyboardInterrupt
    _init(self, index, *args, **kwargs)
_fork.Child.__init__ = _held"""


@pytest.mark.skipif(landlock.abi_version() < FORK_ABI, reason="a confined child needs Landlock ABI 6")
def test_a_first_child_that_answers_before_the_kernel_reads_it_ready_keeps_its_outcome(tmp_path: Path) -> None:
    # the first cell runs while the kernel forks the second: its outcome is in the pipe behind its ready frame when
    # the kernel reads that frame, and read with it (before, the rest of that read was dropped: a timeout)
    with _forking_session(tmp_path, RecordOptions(timeout=5)) as session:
        session.run_cell(SECOND_FORK_HELD.format(interrupted=False), "c")
        results = session.fork_run(["print('first')\n1 + 1", "2 + 2"])
    assert results is not None and [(result.status, _text(result)) for result in results] == [
        ("ok", "first\n2"),
        ("ok", "4"),
    ]
    assert all(result.snapshot is not None for result in results)


# A first cell that starts a process in a session of its own, then leaves its process group too (a session of its
# own) and goes on writing the time to a file.
LEAVES_ITS_GROUP = """import os, subprocess, time
subprocess.Popen(['sleep', {mark!r}], start_new_session=True)
os.setsid()
until = time.monotonic() + 20
while time.monotonic() < until:
    with open('alive.tmp', 'w') as file:
        file.write(str(time.monotonic()))
    os.replace('alive.tmp', 'alive.txt')
    time.sleep(0.02)"""


@pytest.mark.skipif(landlock.abi_version() < FORK_ABI, reason="a confined child needs Landlock ABI 6")
def test_a_first_child_let_go_before_it_was_read_ready_dies_with_an_interrupted_request(tmp_path: Path) -> None:
    # the request ends (an interrupt) while the first cell runs in a session of its own, its ready frame not read
    # yet: the kill reads it, so that every process of its PID namespace is killed before the answer, as after a
    # cell collected (the init's end, with the child's process group, would kill them too, but only once the init
    # has run again: on a quiet machine mostly before the answer reaches the host, so this passes without it too)
    mark = "4700.5"
    with _forking_session(tmp_path) as session:
        session.run_cell(SECOND_FORK_HELD.format(interrupted=True), "c")
        results = session.fork_run([LEAVES_ITS_GROUP.format(mark=mark), "2 + 2"])
        assert results is not None and {result.status for result in results} == {"fault"}
        left = processes_named(mark)
        assert all(_runs_no_more(process.pid) for process in left), left
        [alive] = session.children_place(2).glob("p-*/work/alive.txt")
        time.sleep(0.3)
        last = alive.read_text()
        time.sleep(0.3)
        assert alive.read_text() == last
        session.run_cell("_fork.Child.__init__ = _init", "d")
        again = session.fork_run(["1 + 1"])
    assert again is not None and _text(again[0]) == "2"


def test_a_child_not_ready_in_time_is_a_fault_and_the_next_request_runs(tmp_path: Path) -> None:
    with _forking_session(tmp_path) as session:
        session.run_cell(SLOW_COPY.format(seconds=3) + "\n_fork.READY_SECONDS = 0.5", "c")
        results = session.fork_run(["1 + 1", "2 + 2"])
        assert results is not None
        assert (results[0].status, _text(results[0])) == ("ok", "2")
        assert (results[1].status, results[1].evalue) == ("fault", "the child was not ready within 0.5 s")
        session.run_cell("_fork.copy_tree = _copy", "d")
        again = session.fork_run(["1 + 1", "2 + 2"])
        assert again is not None and [_text(result) for result in again] == ["2", "4"]


def test_a_working_folder_that_cannot_be_copied_fails_the_cells_alone(tmp_path: Path) -> None:
    work, scratch = tmp_path / "work", tmp_path / "scratch"
    work.mkdir()
    scratch.mkdir()
    unreadable = work / "unreadable.txt"
    unreadable.write_text("x")
    with ForkingSession("t", work, RecordOptions(timeout=60), scratch) as session:
        session.run_cell("x = 1", "c")
        unreadable.chmod(0)  # the kernel has no capability that reads it anyway (a root kernel neither)
        try:
            results = session.fork_run(["x + 1", "x + 2"])
        finally:
            unreadable.chmod(0o644)
        assert results is not None
        faults = [(result.status, result.evalue.split(":")[0]) for result in results]
        assert faults == [("fault", "cannot copy the working directory")] * 2
        # the children were killed before their cells ran, and the kernel forks again once the folder can be read
        again = session.fork_run(["x + 1"])
        assert again is not None and again[0].status == "ok"
        assert _text(again[0]) == "2"
        # the failed children's folders went with them (the last request's child is removed by the next request)
        place = session.children_place(1)
        assert len([path for path in place.iterdir() if path.name.startswith("p-")]) <= 1


def test_each_request_deletes_the_folders_of_the_one_before_and_no_other(tmp_path: Path) -> None:
    with _forking_session(tmp_path) as session:
        session.run_cell("x = 1", "c")
        left: list[set[str]] = []
        for _ in range(3):
            # one child writes its folder; the other would read what an earlier child left there, were it shared
            results = session.fork_run(["open('mine.txt', 'w').write('y')", "import os\nsorted(os.listdir('.'))"])
            assert results is not None and [result.status for result in results] == ["ok", "ok"]
            assert _text(results[1]) == "[]"
            place = session.children_place(2)
            left.append({path.name for path in place.iterdir() if path.name.startswith("p-")})
            session.run_cell("x += 1", "c")
        # deleted once the next request has started, if not before: none of the first two requests' folders is left
        assert not left[-1] & (left[0] | left[1]) and len(left[-1]) <= 2


WHERE_AM_I = "import os\nprint(os.getcwd())"


def test_the_children_of_a_small_folder_work_in_memory_and_of_a_large_one_on_disk(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    if not forking._is_memory_file_system(forking.MEMORY_ROOT):
        pytest.skip("no memory file system at /dev/shm")
    monkeypatch.setattr(forking, "MEMORY_MAX_BYTES", 3000)  # a request's copies: at most 3000 bytes
    with _forking_session(tmp_path) as session:
        memory = session.memory
        assert memory is not None and memory.parent == forking.MEMORY_ROOT and memory.stat().st_mode & 0o777 == 0o700
        (tmp_path / "work" / "data.bin").write_bytes(bytes(1000))
        places = []
        for codes in ([WHERE_AM_I, WHERE_AM_I], [WHERE_AM_I] * 3, [WHERE_AM_I] * 4):  # 2000, 3000, 4000 bytes
            results = session.fork_run(codes)
            assert results is not None and {result.status for result in results} == {"ok"}, results
            places.append({Path(_text(result).strip()).parent.parent for result in results})
            # each works in its own copy, wherever it is
            assert len({_text(result) for result in results}) == len(codes)
        assert places == [{memory}, {memory}, {tmp_path / "scratch"}]
    # the session's end removes its memory folder, the children's folders in it too
    assert not memory.exists()


# Where a confined cell looks for what the cell before it wrote in its own folder in memory: its folder's parents,
# the memory file system, and a search of it.
SNOOP = """
import glob, os
here, seen = os.getcwd(), []
for folder in (os.path.dirname(os.path.dirname(here)), os.path.dirname(here), '/dev/shm'):
    try:
        seen.append(sorted(os.listdir(folder)))
    except PermissionError:
        seen.append('denied')
print(seen, glob.glob('/dev/shm/**/secret.txt', recursive=True))
"""


@pytest.mark.skipif(landlock.abi_version() < FORK_ABI, reason="a confined child needs Landlock ABI 6")
def test_a_confined_cell_finds_no_other_cells_folder_in_memory(tmp_path: Path) -> None:
    with _forking_session(tmp_path) as session:
        if session.memory is None:
            pytest.skip("no memory file system at /dev/shm")
        write = "open('secret.txt', 'w').write('42')\nimport os\nprint(os.getcwd())"
        results = session.fork_run([write, SNOOP])
        assert results is not None and [result.status for result in results] == ["ok", "ok"], results
        assert Path(_text(results[0]).strip()).parent.parent == session.memory
        assert _text(results[1]).strip() == "['denied', ['tmp', 'work'], 'denied'] []"  # its own folder alone


# A process that holds the lock of a session folder, as a live session does, until its standard input ends.
HOLDS_THE_LOCK = "import fcntl, os, sys\nfcntl.flock(os.open(sys.argv[1], os.O_RDONLY), fcntl.LOCK_EX)\nprint(1, flush=True)\nsys.stdin.read()"


def test_a_session_removes_the_memory_folders_no_live_session_holds(tmp_path: Path) -> None:
    if not forking._is_memory_file_system(forking.MEMORY_ROOT):
        pytest.skip("no memory file system at /dev/shm")
    # a folder whose session was killed (nothing holds its lock), one whose session lives (in another process, in
    # another PID namespace it may be: the lock says it lives, not its pid), and a link named as a session's
    left, alive = (forking.MEMORY_ROOT / f"{forking.MEMORY_PREFIX}{name}" for name in ("1-killed", "1-alive"))
    link = forking.MEMORY_ROOT / f"{forking.MEMORY_PREFIX}1-link"
    for folder in (left, alive):
        (folder / "p-x" / "work").mkdir(parents=True)
        (folder / "p-x" / "work" / "data.csv").write_text("a,b\n")
    link.symlink_to(tmp_path)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDS_THE_LOCK, str(alive)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "1\n"
        with _forking_session(tmp_path) as session:
            assert (left.exists(), alive.exists(), link.is_symlink()) == (False, True, True)
            # its own folder is locked as it starts: another session starting now leaves it
            assert session.memory is not None
            with ForkingSession("u", tmp_path / "work", RecordOptions(timeout=60), tmp_path / "scratch"):
                assert session.memory.exists()
    finally:
        holder.communicate("")
        shutil.rmtree(alive, ignore_errors=True)
        link.unlink()
    assert tmp_path.exists()
    # once its holder has ended, the next session removes it
    alive.mkdir()
    (tmp_path / "next").mkdir()
    with _forking_session(tmp_path / "next"):
        assert not alive.exists()


def test_the_kernel_keeps_its_priority_when_its_children_exit_at_the_lowest(tmp_path: Path) -> None:
    priorities = "import os\nos.getpriority(os.PRIO_PROCESS, 0), os.getpriority(os.PRIO_PGRP, 0)"
    with _forking_session(tmp_path) as session:
        before = session.run_cell(priorities, "c").output
        # a child that reads its own priority while it runs: the kernel's, until it is killed
        results = session.fork_run(["import os\nos.getpriority(os.PRIO_PROCESS, 0)", "1 + 1"])
        assert results is not None and [result.status for result in results] == ["ok", "ok"]
        shown = results[0].messages[-1]["content"]["data"]["text/plain"]
        assert shown == before.strip("()").split(",")[0]
        # the killed children's groups were made the lowest priority, never the kernel's own group
        assert session.run_cell(priorities, "d").output == before


# Writes a marker into every pipe it holds past fd 2 that it may write (its result pipe among them), and leaves a
# process in a session of its own that goes on doing so while the child's PID namespace is torn down.
INTO_EVERY_PIPE = """
import os, stat, fcntl, time
def into_every_pipe():
    for name in os.listdir('/proc/self/fd'):
        try:
            fd = int(name)
            if fd > 2 and stat.S_ISFIFO(os.fstat(fd).st_mode) and fcntl.fcntl(fd, fcntl.F_GETFL) & 3 == os.O_WRONLY:
                os.set_blocking(fd, False)
                os.write(fd, b'INJECTED-MARKER\\n')
        except OSError:
            pass
into_every_pipe()
if os.fork() == 0:
    os.setsid()
    until = time.monotonic() + 2.0
    while time.monotonic() < until:
        into_every_pipe()
        time.sleep(0.001)
    os._exit(0)
time.sleep(0.05)
"""


def test_a_child_holds_no_end_of_the_kernels_output_pipes(tmp_path: Path) -> None:
    # before: a child kept ipykernel's pipes behind the kernel's fds 1 and 2 (both ends, past fd 2), so what it
    # wrote into them the kernel published as its own output, under whichever request it was answering
    pipes = "import os\nprint(sorted({os.fstat(fd).st_ino for fd in (1, 2)}))"
    with _forking_session(tmp_path) as session:
        kernels = session.run_cell(pipes, "c").output
        listing = (
            "import os, stat\nfound = set()\nfor name in os.listdir('/proc/self/fd'):\n    try:\n"
            "        status = os.fstat(int(name))\n    except OSError:  # the listing's own\n        continue\n"
            "    if stat.S_ISFIFO(status.st_mode):\n        found.add(status.st_ino)\nprint(sorted(found))"
        )
        children = session.fork_run([listing])
        assert children is not None and children[0].status == "ok"
        held = json.loads("".join(m["content"]["text"] for m in children[0].messages if m["msg_type"] == "stream"))
        assert held and not set(held) & set(json.loads(kernels))
        # the fork request's outputs read until its idle status, as a cell's are (a silent request ends at its reply)
        request = {"fork": inject.fork_run_expression(session.fork_request([INTO_EVERY_PIPE]))}
        execution = session.recorder.session.execute("", silent=True, timeout=60, user_expressions=request)
        assert execution.reply is not None and "INJECTED" not in json.dumps(execution.collector.outputs)
        later = [session.run_cell("import time\ntime.sleep(0.3)\nprint('replayed')", f"r{n}").output for n in range(4)]
    assert later == ["replayed"] * 4


@pytest.mark.skipif(landlock.abi_version() < FORK_ABI, reason="a confined child needs Landlock ABI 6")
def test_what_a_confined_child_reads_is_fixed_as_the_kernel_starts(tmp_path: Path) -> None:
    # before: each child read the variables that name the kernel's profile and caches as the replay left them, so
    # a cell that pointed one at another folder let every later prediction read there: here a folder of the
    # kernel's working directory, which a child reads only in its own copy
    session = _forking_session(tmp_path)
    elsewhere = tmp_path / "work" / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / "answer.txt").write_text("42")
    read = f"print(open({str(elsewhere / 'answer.txt')!r}).read())"
    with session:
        assert session.run_cell(read, "kernel").output == "42"  # the kernel reads it: only its children may not
        session.run_cell(f"import os\nos.environ['MPLCONFIGDIR'] = {str(elsewhere)!r}", "points")
        children = session.fork_run([read])
    assert children is not None and (children[0].status, children[0].ename) == ("error", "PermissionError")


def _runs_no_more(pid: int) -> bool:
    """Whether process ``pid`` can run no more of its code: gone, a zombie, exiting, or with SIGKILL pending."""
    try:
        with open(f"/proc/{pid}/stat") as stat, open(f"/proc/{pid}/status") as status:
            fields = stat.read().rsplit(")", 1)[1].split()
            pending = {
                line.split(":")[0]: int(line.split()[1], 16) for line in status if line.startswith(("SigPnd", "ShdPnd"))
            }
    except FileNotFoundError:
        return True
    exiting = int(fields[6]) & 0x4  # PF_EXITING, in the task's flags (the stat file's ninth field)
    return fields[0] in "ZX" or bool(exiting) or any(mask & (1 << (signal.SIGKILL - 1)) for mask in pending.values())


@pytest.mark.skipif(landlock.abi_version() < FORK_ABI, reason="a confined child needs Landlock ABI 6")
def test_a_process_a_prediction_left_in_a_session_of_its_own_runs_no_more_once_the_request_is_answered(
    tmp_path: Path,
) -> None:
    # before: it lived on until the PID namespace's init, killed with the child's group at the lowest priority,
    # ran again, which could come after the replay's check (once in six runs of a child that also kept the two
    # cores busy, 4 ms after it) and into the replay's next cell. On a quiet machine the init mostly ran before
    # the answer reached the host, so this passed without the kill too; the kill itself is
    # tests/kernel/inside/test_pid_namespace_kill.py's
    marks = [f"{4600 + number}.5" for number in range(3)]
    leave = "import subprocess\nsubprocess.Popen(['sleep', {mark!r}], start_new_session=True)"
    with _forking_session(tmp_path) as session:
        for number, mark in enumerate(marks):
            results = session.fork_run([leave.format(mark=mark), "1 + 1"])
            assert results is not None and [result.status for result in results] == ["ok", "ok"]
            left = processes_named(mark)
            assert all(_runs_no_more(process.pid) for process in left), (number, left)  # if not gone already
