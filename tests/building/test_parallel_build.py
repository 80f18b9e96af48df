"""A build in two processes (``jobs=2``, ``themisto build --jobs 2``) writes the bytes of a build in one."""

from __future__ import annotations

import gc
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from synthetic import synthetic_steps, write_corpus, write_steps

import themisto.building.categories
import themisto.building.parquet
import themisto.building.placebo
import themisto.building.selection
import themisto.building.tables
from themisto.building.parquet import build_dataset
from themisto.building.selection import SelectionOptions
from themisto.cli import main
from themisto.exceptions import InputError, OptionError
from themisto.vocabulary import CONFIG_NAMES, PLACEBO_SUFFIX


def _files(folder: Path) -> dict[str, bytes]:
    return {p.relative_to(folder).as_posix(): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    # errors (10%), restarts (3%) and a namespace that changes: placebo states within and across trajectories
    return write_corpus(tmp_path_factory.mktemp("trajectories"), trajectories=4, steps_each=150)


@pytest.mark.parametrize("batch_rows", [1000, 64])
def test_two_processes_write_the_bytes_of_one(
    corpus: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, batch_rows: int
) -> None:
    # 64-step batches: many runtime_only batches cross the pipe, and row groups end mid-trajectory
    monkeypatch.setattr(themisto.building.tables, "BATCH_ROWS", batch_rows)
    monkeypatch.setattr(themisto.building.parquet, "BATCH_ROWS", batch_rows)
    options = SelectionOptions(sample="all", include_errors=True, max_context_chars=600)
    one = build_dataset(corpus, tmp_path / "one", options, jobs=1)
    two = build_dataset(corpus, tmp_path / "two", options, jobs=2)
    assert two.rows == one.rows and two.files == one.files
    files = _files(tmp_path / "one")
    assert files == _files(tmp_path / "two")
    # every config is there, the placebo ones (written by the second process) included, with rows
    assert {name.split("/")[0] for name in files if name.endswith(".parquet")} == set(CONFIG_NAMES)
    assert all(one.rows[config]["full"] > 0 for config in CONFIG_NAMES if config.endswith(PLACEBO_SUFFIX))


def test_cli_jobs_2_writes_the_bytes_of_jobs_1_and_takes_no_other_count(corpus: list[Path], tmp_path: Path) -> None:
    folder = str(corpus[0].parent)
    for jobs in ("1", "2"):
        assert main(["build", folder, "-o", str(tmp_path / jobs), "--jobs", jobs, "-q"]) == 0
    assert _files(tmp_path / "1") == _files(tmp_path / "2")
    with pytest.raises(SystemExit):
        main(["build", folder, "-o", str(tmp_path / "3"), "--jobs", "3"])
    with pytest.raises(OptionError, match="jobs=3"):
        build_dataset(corpus, tmp_path / "3", jobs=3)
    assert not (tmp_path / "3").exists()


def test_an_input_that_changes_during_a_two_process_build_fails_it_and_leaves_no_folder(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    steps = synthetic_steps("grows", 40)
    path = write_steps(tmp_path / "in" / "grows.jsonl", steps[:30])
    select = themisto.building.selection.select

    def select_then_append(*args: object, **kwargs: object) -> object:
        chosen = select(*args, **kwargs)  # type: ignore[arg-type]
        write_steps(path, steps)  # a recording still appending: both processes read 40 steps, not 30
        return chosen

    monkeypatch.setattr(themisto.building.parquet, "select", select_then_append)
    with pytest.raises(InputError, match="changed during the build"):
        build_dataset([path], tmp_path / "out", SelectionOptions(sample="all"), jobs=2)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in"]  # no output, no staging folder left


def test_an_error_of_the_second_process_alone_is_the_builds_error(
    corpus: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # only the second process chooses placebo states (the forked child inherits this patch)
    def fail(*args: object) -> None:
        raise InputError("no placebo state for you")

    monkeypatch.setattr(themisto.building.placebo.PlaceboStates, "choose", fail)
    with pytest.raises(InputError, match="no placebo state for you"):
        build_dataset(corpus, tmp_path / "out", jobs=2)
    assert not (tmp_path / "out").exists()
    with pytest.raises(InputError, match="no placebo state for you"):  # one process: the same error
        build_dataset(corpus, tmp_path / "out", jobs=1)


def test_a_second_process_that_dies_without_an_answer_fails_the_build_in_one_line(
    corpus: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def die(*args: object) -> None:
        os._exit(3)  # as a process killed mid-build: no answer, no cleanup

    monkeypatch.setattr(themisto.building.placebo.PlaceboStates, "choose", die)
    with pytest.raises(RuntimeError, match=r"^the build's second process ended without an answer \(exit 3\)$"):
        build_dataset(corpus, tmp_path / "out", jobs=2)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("fails", [False, True])
def test_the_second_pass_runs_with_the_heap_frozen_and_puts_it_back(
    corpus: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, fails: bool
) -> None:
    # a long-lived caller (a notebook, the tests) builds again and again: a freeze left behind would keep
    # every object of every build out of the collector for good
    choose = themisto.building.placebo.PlaceboStates.choose
    frozen: list[int] = []

    def record(self: themisto.building.placebo.PlaceboStates, *args: object) -> object:
        frozen.append(gc.get_freeze_count())
        if fails:
            raise InputError("stop here")
        return choose(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(themisto.building.placebo.PlaceboStates, "choose", record)
    assert gc.get_freeze_count() == 0
    if fails:
        with pytest.raises(InputError, match="stop here"):
            build_dataset(corpus, tmp_path / "out", jobs=1)
    else:
        build_dataset(corpus, tmp_path / "out", jobs=1)
    # the selection, modules and caches of the caller are out of the pass's collections
    assert frozen and min(frozen) > 10_000
    assert gc.get_freeze_count() == 0


def _batch_files(folder: Path) -> list[Path]:
    return list(folder.glob("*/.batch-*.arrow"))


def test_a_receiver_held_back_leaves_at_most_two_batch_files_and_none_after(
    corpus: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 64-step batches, a second process slowed at every step: unpaced, the first would leave a file per batch
    monkeypatch.setattr(themisto.building.tables, "BATCH_ROWS", 64)
    monkeypatch.setattr(themisto.building.parquet, "BATCH_ROWS", 64)
    choose = themisto.building.placebo.PlaceboStates.choose

    def slow(self: themisto.building.placebo.PlaceboStates, *args: object) -> object:
        time.sleep(0.002)
        return choose(self, *args)  # type: ignore[arg-type]

    monkeypatch.setattr(themisto.building.placebo.PlaceboStates, "choose", slow)
    seen: list[int] = []
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(len(_batch_files(tmp_path)))
            time.sleep(0.005)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        build_dataset(corpus, tmp_path / "out", SelectionOptions(sample="all"), jobs=2)
    finally:
        done.set()
        watcher.join()
    assert max(seen) == themisto.building.tables.BATCHES_AHEAD  # the first process waited for the second
    assert not _batch_files(tmp_path) and not list((tmp_path / "out").rglob(".batch-*"))


def test_a_receipt_after_the_sender_has_finished_is_no_error(
    corpus: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # one batch: the first process sends it, finishes and closes its end before the second takes it and answers
    exchange = themisto.building.tables.exchange_batch

    def late(examples: themisto.building.tables._TaskColumns, link: themisto.building.tables.PassLink) -> None:
        if not examples.pairs:
            time.sleep(1.0)
        exchange(examples, link)

    monkeypatch.setattr(themisto.building.tables, "exchange_batch", late)
    one = build_dataset(corpus[:1], tmp_path / "one", SelectionOptions(sample="all"), jobs=1)
    two = build_dataset(corpus[:1], tmp_path / "two", SelectionOptions(sample="all"), jobs=2)
    assert two.rows == one.rows and _files(tmp_path / "one") == _files(tmp_path / "two")


def test_an_error_of_the_first_process_alone_ends_the_second_and_is_the_builds_error(
    corpus: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # only the first process computes runtime_only. The second held the first's end of the link (inherited at the
    # fork), so it waited for good for a batch that never came, and the build with it.
    monkeypatch.setattr(themisto.building.tables, "BATCH_ROWS", 64)
    monkeypatch.setattr(themisto.building.parquet, "BATCH_ROWS", 64)
    calls = itertools.count()
    original = themisto.building.categories.runtime_only

    def fail_later(*args: str) -> bool:
        if next(calls) > 200:  # in the second batch or later: the second process is waiting for one
            raise InputError("the first process fails")
        return original(*args)

    def hung(signum: int, frame: object) -> None:
        raise TimeoutError("the build hung")

    monkeypatch.setattr(themisto.building.tables, "runtime_only", fail_later)
    previous = signal.signal(signal.SIGALRM, hung)
    signal.alarm(60)
    try:
        with pytest.raises(InputError, match="^the first process fails$"):
            build_dataset(corpus, tmp_path / "out", SelectionOptions(sample="all"), jobs=2)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, previous)
    assert list(tmp_path.iterdir()) == []  # no output, no staging folder


def _children(pid: int) -> list[int]:
    return [int(child) for child in Path(f"/proc/{pid}/task/{pid}/children").read_text().split()]


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (a zombie that no one reaps, as an orphan's may be in a container, does not)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.slow
def test_a_build_killed_while_writing_leaves_no_second_process_behind(tmp_path: Path) -> None:
    # the orphan held the killed parent's end of the link: it never saw the end of file, and waited for good
    corpus = write_corpus(tmp_path / "in", trajectories=12, steps_each=500)
    build = subprocess.Popen(
        [sys.executable, "-m", "themisto", "build", str(corpus[0].parent), "-o", str(tmp_path / "out"), "-q"],
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 60
        while not _batch_files(tmp_path) and time.monotonic() < deadline:  # a batch file: both processes write
            assert build.poll() is None, "the build ended before it was killed"
            time.sleep(0.01)
        second = _children(build.pid)
        assert len(second) == 1, second
    finally:
        build.kill()
        build.wait()
    deadline = time.monotonic() + 10
    while _running(second[0]) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = _running(second[0])
    if left:
        os.kill(second[0], signal.SIGKILL)  # no process of the test outlives it
    assert not left
