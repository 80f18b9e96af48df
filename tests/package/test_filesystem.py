"""The shared writing helpers: an atomic write never leaves half a file, and the progress counter counts in order."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from repository import REPOSITORY

from themisto.exceptions import OutputError
from themisto.filesystem import partial_path, write_atomically
from themisto.progress import ProgressCounter


def test_an_atomic_write_replaces_the_file_with_exactly_the_data(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    path.write_text("old, and longer than the new data\n")
    write_atomically(path, "Ωmega\n")
    assert path.read_bytes() == "Ωmega\n".encode()
    write_atomically(path, b"\x00\xff")
    assert path.read_bytes() == b"\x00\xff"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]


def test_a_write_the_disk_refuses_midway_keeps_the_old_file_and_leaves_no_partial(tmp_path: Path) -> None:
    path = tmp_path / "out.json"
    path.write_text("complete\n")
    # a file size limit makes the kernel refuse the write after 4 KiB (EFBIG), as a full disk would
    script = (
        "import resource, signal, sys\n"
        "from pathlib import Path\n"
        "from themisto.exceptions import OutputError\n"
        "from themisto.filesystem import write_atomically\n"
        "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"
        "resource.setrlimit(resource.RLIMIT_FSIZE, (4096, resource.RLIM_INFINITY))\n"
        "try:\n"
        f"    write_atomically(Path({str(path)!r}), 'x' * 100_000)\n"
        "except OutputError as exc:\n"
        "    print(exc)\n"
        "    sys.exit(3)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPOSITORY)}
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=60)
    assert result.returncode == 3, result.stderr
    assert result.stdout.startswith(f"cannot write {path}: File too large")
    assert path.read_text() == "complete\n"
    assert not partial_path(path).exists()


def test_a_write_that_cannot_take_the_place_of_the_target_removes_its_partial(tmp_path: Path) -> None:
    target = tmp_path / "taken"
    (target / "inside").mkdir(parents=True)  # a folder in the way: the rename fails after the data is written
    with pytest.raises(OutputError, match=f"cannot write {target}: "):
        write_atomically(target, "data")
    assert (target / "inside").is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["taken"]


def test_the_progress_counter_reports_every_unit_once_and_in_order_across_threads() -> None:
    calls: list[tuple[str, int, int]] = []
    counter = ProgressCounter("record", 8 * 500 + 10, lambda what, done, total: calls.append((what, done, total)))
    counter.skip(10)  # already done: out of the total before any work

    def work() -> None:
        for _ in range(500):
            counter.add()

    threads = [threading.Thread(target=work) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert calls[0] == ("record", 0, 8 * 500)
    assert [done for _, done, _ in calls[1:]] == list(range(1, 8 * 500 + 1))
    assert {total for _, _, total in calls} == {8 * 500}
    assert (counter.done, counter.total) == (8 * 500, 8 * 500)
