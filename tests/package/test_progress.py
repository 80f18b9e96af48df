"""Progress on long work, and none of the noise: bars on a terminal only, no TCP warning, no git chatter.

Real kernels for record and stability, a build in a pseudo-terminal, two
baseline evaluations.
"""

from __future__ import annotations

import fcntl
import json
import os
import pty
import re
import select
import struct
import subprocess
import sys
import termios
from pathlib import Path

import nbformat
import pytest
from repository import REPOSITORY
from synthetic import write_corpus

from themisto.building.parquet import build_dataset
from themisto.building.selection import SelectionOptions
from themisto.cli import main
from themisto.kernel.environment import kernel_environment, supervised_kernel_manager
from themisto.recording.options import RecordOptions
from themisto.recording.record import record_source
from themisto.recording.stability import check_stability
from themisto.trajectory import read_trajectory

Calls = list[tuple[str, int, int]]


def recorder(calls: Calls):  # noqa: ANN201 (a progress hook)
    """A progress hook that keeps every call."""
    return lambda what, done, total: calls.append((what, done, total))


def notebook(path: Path, cells: list[str]) -> Path:
    book = nbformat.v4.new_notebook()
    book.cells = [nbformat.v4.new_code_cell(code) for code in cells]
    nbformat.write(book, path)
    return path


def check_counts(calls: Calls, what: str, total: int) -> None:
    """``what`` advanced one unit at a time, never past its total, and ended at it."""
    done = [d for w, d, t in calls if w == what]
    assert all(b - a in (0, 1) for a, b in zip(done, done[1:])) and done[-1] == total, done
    assert sorted(set(done)) == list(range(done[0], total + 1)), done
    assert all(t == total for w, _, t in calls if w == what)


@pytest.mark.kernel
def test_record_counts_steps_across_the_corpus_and_leaves_resumed_steps_out(tmp_path: Path) -> None:
    sources = tmp_path / "nb"
    sources.mkdir()
    notebook(sources / "a.ipynb", ["x = 1", "x + 1", "print(x)"])
    notebook(sources / "b.ipynb", ["y = 2", "y"])
    calls: Calls = []
    record_source(sources, tmp_path / "out", RecordOptions(), jobs=2, steps=recorder(calls))
    check_counts(calls, "record", 5)

    # resume after cutting a's last step: one step to record, the four recorded ones are not counted
    path = tmp_path / "out" / "a.jsonl"
    path.write_text("".join(path.read_text().splitlines(keepends=True)[:2]))
    calls.clear()
    record_source(sources, tmp_path / "out", RecordOptions(resume=True), steps=recorder(calls))
    assert calls[-1] == ("record", 1, 1)
    assert len(read_trajectory(path)) == 3


@pytest.mark.kernel
def test_stability_counts_runs_times_steps(tmp_path: Path) -> None:
    sources = tmp_path / "nb"
    sources.mkdir()
    notebook(sources / "a.ipynb", ["x = 1", "x"])
    record_source(sources, tmp_path / "t", RecordOptions())
    calls: Calls = []
    check_stability([tmp_path / "t"], 2, options=RecordOptions(workdir=sources), progress=recorder(calls))
    check_counts(calls, "stability", 4)


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])  # with two, the steps are counted by the process that has no raw steps
def test_build_reports_each_pass(tmp_path: Path, jobs: int) -> None:
    corpus = write_corpus(tmp_path / "t", trajectories=3, steps_each=700)
    calls: Calls = []
    summary = build_dataset(corpus, tmp_path / "out", SelectionOptions(), progress=recorder(calls), jobs=jobs)
    selected = [call for call in calls if call[0] == "select"]
    # with two processes the second scans the later files without a count of its own
    assert selected == [("select", n, 3) for n in range(4)] if jobs == 1 else selected[-1] == ("select", 3, 3)
    written = [call for call in calls if call[0] == "write"]
    assert written[-1] == ("write", summary.selection.steps, summary.selection.steps) and len(written) > 1
    assert [done for _, done, _ in written] == sorted(done for _, done, _ in written)


def run_on_terminal(*args: str) -> tuple[int, str]:
    """Run ``themisto ARGS`` with stderr on a pseudo-terminal; the exit code and what it drew there."""
    primary, secondary = pty.openpty()
    # a terminal of 24 rows by 120 columns (a bare pseudo-terminal has width 0, where tqdm draws nothing)
    fcntl.ioctl(secondary, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 120, 0, 0))
    process = subprocess.Popen(
        [sys.executable, "-m", "themisto", *args], stdout=subprocess.DEVNULL, stderr=secondary, cwd=REPOSITORY
    )
    os.close(secondary)
    drawn = b""
    while True:
        ready, _, _ = select.select([primary], [], [], 120)
        if not ready:
            break
        try:
            chunk = os.read(primary, 4096)
        except OSError:  # the other side closed
            break
        if not chunk:
            break
        drawn += chunk
    os.close(primary)
    return process.wait(timeout=120), drawn.decode("utf-8", "replace")


@pytest.mark.slow
def test_bars_show_on_a_terminal_and_not_with_quiet_or_a_pipe(tmp_path: Path) -> None:
    trajectories = str(REPOSITORY / "data" / "trajectories")
    steps = sum(len(read_trajectory(path)) for path in (REPOSITORY / "data" / "trajectories").glob("*.jsonl"))
    code, drawn = run_on_terminal("build", trajectories, "-o", str(tmp_path / "a"))
    assert code == 0
    assert "select" in drawn and "write: 100%" in drawn and f"{steps}/{steps}" in drawn and "step/s" in drawn
    # select reads whole trajectories, and its bar says so
    files = len(list((REPOSITORY / "data" / "trajectories").glob("*.jsonl")))
    # (the finished bar may be drawn more than once, its rate updated)
    selects = {part.strip() for part in re.split(r"[\r\n]", drawn) if part.startswith("select") and "100%" in part}
    assert selects and all(f"{files}/{files}" in s and "trajectory" in s and "step" not in s for s in selects)
    code, drawn = run_on_terminal("build", trajectories, "-o", str(tmp_path / "b"), "-q")
    assert code == 0 and "write" not in drawn and "select" not in drawn
    piped = subprocess.run(
        [sys.executable, "-m", "themisto", "build", trajectories, "-o", str(tmp_path / "c")],
        capture_output=True, text=True, cwd=REPOSITORY,
    )  # fmt: skip
    assert piped.returncode == 0 and piped.stderr == ""


def kernel_log(manager: object, log: Path) -> str:
    """Start the manager's kernel with its stderr in ``log``, run a cell, stop it; the log."""
    with log.open("w") as stderr:
        manager.start_kernel(env=kernel_environment(os.environ), stderr=stderr)  # type: ignore[attr-defined]
        client = manager.blocking_client()  # type: ignore[attr-defined]
        client.start_channels()
        try:
            client.wait_for_ready(timeout=60)
            assert client.execute_interactive("1 + 1", timeout=60)["content"]["status"] == "ok"
        finally:
            client.stop_channels()
            manager.shutdown_kernel(now=True)  # type: ignore[attr-defined]
    return log.read_text()


@pytest.mark.kernel
def test_kernels_talk_over_private_sockets_without_the_tcp_warning(tmp_path: Path) -> None:
    from jupyter_client import KernelManager

    manager = supervised_kernel_manager("python3", None, None, sandbox=None)
    sockets = Path(manager.ip).parent
    assert manager.transport == "ipc" and sockets.is_dir() and (sockets.stat().st_mode & 0o777) == 0o700
    ours = kernel_log(manager, tmp_path / "ours.log")
    assert "without encryption" not in ours
    # the control: the same kernel over TCP prints the warning, so the check above can fail
    assert "without encryption" in kernel_log(KernelManager(kernel_name="python3"), tmp_path / "tcp.log")


def git(*args: str, cwd: Path) -> str:
    command = ["git", "-c", "user.name=t", "-c", "user.email=t@t", *args]
    return subprocess.run(command, cwd=cwd, capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.parametrize("repository", [False, True])
def test_eval_outside_a_git_repository_prints_no_git_error_and_records_the_hash_inside_one(
    repository: bool, tmp_path: Path, capfd: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.chdir(tmp_path)
    expected = None
    if repository:
        git("init", "-q", cwd=tmp_path)
        git("commit", "-q", "--allow-empty", "-m", "start", cwd=tmp_path)
        expected = git("describe", "--always", cwd=tmp_path)
    run = tmp_path / "run"
    data = str(REPOSITORY / "hf_dataset")
    command = ["eval", "--model", "themisto-empty", "--tasks", "themisto_output", "--limit", "1", "-o", str(run)]
    assert main([*command, "--data", data]) == 0
    err = capfd.readouterr().err  # file-descriptor level: a child process writing to the terminal shows here
    assert "fatal" not in err and "not a git repository" not in err
    (results,) = run.glob("*/results_*.json")
    assert json.loads(results.read_text())["git_hash"] == expected


def test_eval_hides_lm_evals_unlabelled_request_bar_unless_verbose(tmp_path: Path) -> None:
    """lm-eval draws a bar without a label while it builds a task's requests; `themisto eval -v` keeps it."""
    command = ["eval", "--model", "themisto-empty", "--tasks", "themisto_output", "--limit", "3"]
    command += ["--data", str(REPOSITORY / "hf_dataset")]
    unlabelled = re.compile(r"(?:^|[\r\n])\s*100%\|[^\r\n]*\| 3/3 ")  # "100%|████| 3/3 [...]", no "label: " before
    code, quiet = run_on_terminal(*command, "-o", str(tmp_path / "quiet"))
    assert code == 0 and not unlabelled.search(quiet)
    code, verbose = run_on_terminal(*command, "-o", str(tmp_path / "verbose"), "-v")
    assert code == 0 and unlabelled.search(verbose)
