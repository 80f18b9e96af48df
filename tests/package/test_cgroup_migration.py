"""``bench/cgroup_migration.py``: every step of a cgroup per prediction timed, and no cgroup left behind."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile

import pytest
from repository import REPOSITORY, bench_module

SCRIPT = REPOSITORY / "bench" / "cgroup_migration.py"
cgroup_migration = bench_module("cgroup_migration")


def _run(command: list[str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, capture_output=True, text=True, check=False, timeout=120, cwd="/")


def _writable_cgroup() -> bool:
    own = cgroup_migration.own_cgroup()
    if own is None:
        return False
    probe = own / "themisto-test-probe"
    try:
        probe.mkdir()
    except OSError:
        return False
    probe.rmdir()
    return True


@pytest.mark.skipif(not _writable_cgroup(), reason="needs a cgroup v2 this user may write")
def test_each_step_is_timed_for_each_gap_and_the_cgroups_are_removed() -> None:
    own = cgroup_migration.own_cgroup()
    assert own is not None
    before = {path.name for path in own.iterdir() if path.is_dir()}
    done = _run([sys.executable, str(SCRIPT), "--runs", "3", "--gap", "0", "0.01"])
    assert done.returncode == 0, done.stderr
    rows = [line.strip("| ").split(" | ") for line in done.stdout.splitlines()[2:]]
    assert [(gap, step) for gap, step, _, _ in rows] == [
        (gap, step) for gap in ("0", "10") for step in ("mkdir", "move", "cgroup.kill", "rmdir")
    ]
    for _, _, median, spread in rows:
        low, high = (float(value) for value in spread.split(" to "))
        assert 0 < low <= float(median) <= high
    assert {path.name for path in own.iterdir() if path.is_dir()} == before


def test_where_no_cgroup_can_be_made_it_says_so_in_one_line_and_exits_2() -> None:
    # a cgroup v2 of a process that cannot write it: an unprivileged user's, or none mounted at all
    if not _writable_cgroup():
        done = _run([sys.executable, str(SCRIPT), "--runs", "1"])
    else:
        # as nobody, who may read neither a checkout in a private folder nor this interpreter's installation: the
        # script (standard library only) copied where anyone reads it, run by the system's interpreter
        system_python = shutil.which("python3", path="/usr/bin:/bin")
        if system_python is None:
            pytest.skip("no system python3 to run as an unprivileged user")
        with tempfile.TemporaryDirectory(prefix="themisto-cgroup-test-") as shared:
            os.chmod(shared, 0o755)
            script = shutil.copy(SCRIPT, shared)
            os.chmod(script, 0o644)
            nobody = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups"]
            done = _run([*nobody, system_python, script, "--runs", "1"])
    assert done.returncode == 2, done.stdout + done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and done.stderr.startswith("error: no cgroup to write here: ")
