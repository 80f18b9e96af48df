"""Attacks on files: one writer per trajectory and build, file-system faults, atomic builds.

SECURITY.md, threats 2, 7 and 8. Real ``themisto`` processes and kernels; the
full disk and the read-only file system are real (a small tmpfs in a mount
namespace of its own), and a build is killed with SIGKILL at random moments.
"""

from __future__ import annotations

import hashlib
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from attacks import (
    PROCESS_TIMEOUT,
    REPOSITORY,
    assert_one_line_error,
    lines_of,
    private_mount_command,
    process_environment,
    run_themisto,
    start_themisto,
    wait_for,
    write_notebook,
)
from synthetic import synthetic_steps, write_corpus, write_steps

from themisto.building.parquet import build_dataset
from themisto.building.selection import SelectionOptions
from themisto.cli import main
from themisto.exceptions import OutputError
from themisto.filesystem import ExclusiveLock, lock_path
from themisto.trajectory import RECORDING_STOPPED_ERROR, read_trajectory, trajectory_files, write_trajectory

# --- one writer per trajectory and per build ---------------------------------------------------


@pytest.mark.kernel
def test_a_second_record_process_into_the_same_folder_is_refused(tmp_path: Path) -> None:
    go = tmp_path / "go"
    # the first recording holds the trajectory until the test lets it finish
    cells = ["a = 1", f"import os, time\nwhile not os.path.exists({str(go)!r}):\n    time.sleep(0.05)", "b = 2"]
    notebook = write_notebook(tmp_path / "slow.ipynb", cells)
    out = tmp_path / "out"
    first = start_themisto("record", str(notebook), "-o", str(out))
    try:
        wait_for(lambda: lines_of(out / "slow.jsonl") >= 1 or first.poll() is not None, what="the first step")
        for mode in ("--overwrite", "--resume"):
            second = run_themisto("record", str(notebook), "-o", str(out), mode)
            assert second.returncode == 2
            assert "being written by another process" in second.stderr.strip().splitlines()[-1]
        assert first.poll() is None
        go.touch()
        stdout, stderr = first.communicate(timeout=PROCESS_TIMEOUT)
    finally:
        first.kill()
    assert first.returncode == 0, stderr
    assert [step.step for step in read_trajectory(out / "slow.jsonl")] == [0, 1, 2]
    assert not lock_path(out / "slow.jsonl").exists()  # released and removed: nothing left behind


def test_a_build_into_a_folder_another_build_holds_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trajectories = tmp_path / "trajectories"
    write_corpus(trajectories, 3, 40)
    out = tmp_path / "dataset"
    # the lock a running build holds: a real flock, taken here through its own open file
    with ExclusiveLock(lock_path(out), f"dataset folder {out}"):
        assert main(["build", str(trajectories), "-o", str(out)]) == 2
    assert_one_line_error(capsys.readouterr().err, "build", "being written by another process")
    assert not out.exists()
    assert main(["build", str(trajectories), "-o", str(out)]) == 0  # once released, it builds


def test_the_whole_trajectory_writer_waits_for_no_running_recording(tmp_path: Path) -> None:
    # stability annotations and Zenodo imports replace a file whole: never under a running recording
    trajectory = tmp_path / "nb.jsonl"
    write_steps(trajectory, synthetic_steps("nb", 3))
    before = trajectory.read_bytes()
    with ExclusiveLock(lock_path(trajectory), f"trajectory {trajectory}"):
        with pytest.raises(OutputError, match="being written by another process"):
            write_trajectory(trajectory, synthetic_steps("nb", 5))
    assert trajectory.read_bytes() == before
    write_trajectory(trajectory, synthetic_steps("nb", 5))
    assert len(read_trajectory(trajectory)) == 5


# --- file-system faults ------------------------------------------------------------------------

# The first cell leaves a mark: a fault checked before any kernel starts leaves none.
MARKED = "open({mark!r}, 'w').write('a kernel ran')"


@pytest.mark.kernel
def test_output_path_that_is_a_file_is_one_line_before_any_kernel_starts(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    notebook = write_notebook(tmp_path / "nb.ipynb", [MARKED.format(mark=str(mark))])
    (tmp_path / "taken").write_text("a file")
    result = run_themisto("record", str(notebook), "-o", str(tmp_path / "taken"))
    assert result.returncode == 2 and not mark.exists()
    assert_one_line_error(result.stderr, "record", "is a file, not a folder")
    result = run_themisto("build", str(tmp_path / "nb.ipynb"), "-o", str(tmp_path / "taken"))
    assert result.returncode == 2
    assert_one_line_error(result.stderr, "build", "is a file, not a folder")


@pytest.mark.kernel  # a kernel would start if the check failed
@pytest.mark.skipif(os.geteuid() == 0, reason="root writes into any folder")
def test_unwritable_output_folder_is_one_line_before_any_kernel_starts(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    notebook = write_notebook(tmp_path / "nb.ipynb", [MARKED.format(mark=str(mark))])
    locked = tmp_path / "locked"
    locked.mkdir(mode=0o555)
    result = run_themisto("record", str(notebook), "-o", str(locked / "out"))
    assert result.returncode == 2 and not mark.exists()
    assert_one_line_error(result.stderr, "record", "Permission denied")


@pytest.mark.kernel
def test_a_log_name_too_long_for_the_file_system_is_one_line_before_any_kernel_starts(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    log = tmp_path / ("l" * 247 + ".csv")  # a 251-character file name; its trajectory's is 262
    code = MARKED.format(mark=str(mark))
    log.write_text(f'time,kernel_id,event,cell_index,cell_source,cell_output\n1,kernel-1,execute,a,"{code}",\n')
    result = run_themisto("record", str(log), "-o", str(tmp_path / "out"))
    assert result.returncode == 2 and not mark.exists()
    assert_one_line_error(result.stderr, "record", "longer than this file system allows")


def in_small_file_system(tmp_path: Path, script: str) -> subprocess.CompletedProcess[str]:
    """Run ``script`` where ``$FS`` is a fresh 4 MiB tmpfs only it sees; ``$THEMISTO`` runs themisto."""
    command = " ".join(json.dumps(part) for part in [sys.executable, "-m", "themisto"])
    prelude = f'FS={tmp_path}/fs; mkdir -p "$FS"; mount -t tmpfs -o size=4m tmpfs "$FS"; THEMISTO="{command}"\n'
    return subprocess.run(
        private_mount_command(prelude + script),
        capture_output=True,
        text=True,
        timeout=PROCESS_TIMEOUT,
        env=process_environment(),
        cwd=REPOSITORY,
    )


def test_read_only_and_full_file_systems_are_one_line_before_any_kernel_starts(tmp_path: Path) -> None:
    mark = tmp_path / "mark"
    notebook = write_notebook(tmp_path / "nb.ipynb", [MARKED.format(mark=str(mark))])
    result = in_small_file_system(
        tmp_path,
        f"""mkdir "$FS/out"
        mount -o remount,ro "$FS"
        set +e
        $THEMISTO record {notebook} -o "$FS/out" 2> {tmp_path}/read-only.err; echo $? > {tmp_path}/read-only.code
        mount -o remount,rw "$FS"
        head -c 5000000 /dev/zero > "$FS/filler"
        $THEMISTO record {notebook} -o "$FS/out" 2> {tmp_path}/full.err; echo $? > {tmp_path}/full.code
        """,
    )
    assert result.returncode == 0, result.stderr
    assert not mark.exists()
    for case, cause in [("read-only", "Read-only file system"), ("full", "No space left on device")]:
        assert (tmp_path / f"{case}.code").read_text().strip() == "2"
        assert_one_line_error((tmp_path / f"{case}.err").read_text(), "record", "cannot write to", cause)


@pytest.mark.kernel
def test_a_disk_that_fills_mid_run_keeps_the_complete_steps_and_resume_moves_past_the_cell(tmp_path: Path) -> None:
    cells = [
        "a = 1",
        "b = 2",
        # fills the disk the trajectory is written on, then prints more than the disk can take in its step
        "try:\n    with open('filler', 'wb') as handle:\n        while True:\n            handle.write(b'x' * 65536)\n"
        "except OSError:\n    print('full ' * 2000)",
        "c = a + b\nc",
    ]
    notebook = write_notebook(tmp_path / "fill.ipynb", cells)
    result = in_small_file_system(
        tmp_path,
        f"""cp {notebook} "$FS/fill.ipynb"
        set +e
        $THEMISTO record "$FS/fill.ipynb" -o "$FS/out" 2> {tmp_path}/full.err; echo $? > {tmp_path}/full.code
        cp "$FS/out/fill.jsonl" {tmp_path}/after-full.jsonl
        rm "$FS/filler"
        $THEMISTO record "$FS/fill.ipynb" -o "$FS/out" --resume 2> {tmp_path}/rerun.err; echo $? > {tmp_path}/rerun.code
        rm "$FS/filler"
        $THEMISTO record "$FS/fill.ipynb" -o "$FS/out" --resume 2> {tmp_path}/resume.err; echo $? > {tmp_path}/resume.code
        cp "$FS/out/fill.jsonl" {tmp_path}/after-resume.jsonl
        ls -a "$FS/out" > {tmp_path}/listing
        """,
    )
    assert result.returncode == 0, result.stderr
    assert (tmp_path / "full.code").read_text().strip() == "2"
    assert_one_line_error((tmp_path / "full.err").read_text(), "record", "No space left on device")
    kept = read_trajectory(tmp_path / "after-full.jsonl")
    assert [step.code for step in kept] == cells[:2]  # complete steps, and no torn line
    # the first resume runs the cell once more (a recorder killed from outside loses no step): it fills the disk
    assert (tmp_path / "rerun.code").read_text().strip() == "2"
    assert_one_line_error((tmp_path / "rerun.err").read_text(), "record", "No space left on device")
    assert (tmp_path / "resume.code").read_text().strip() == "0", (tmp_path / "resume.err").read_text()
    resumed = read_trajectory(tmp_path / "after-resume.jsonl")
    assert [step.code for step in resumed] == cells
    stopped, after = resumed[2], resumed[3]
    assert stopped.error["ename"] == RECORDING_STOPPED_ERROR  # not run a third time: the disk stays free
    assert after.restarted and after.error is not None  # a fresh kernel: a and b are gone, as is the cell's state
    assert (tmp_path / "listing").read_text().split() == [".", "..", "fill.jsonl", "fill.provenance.json"]


@pytest.mark.kernel
def test_a_cell_that_kills_the_recorder_does_not_stop_every_later_resume(tmp_path: Path) -> None:
    # the kernel's parent is the launcher, whose parent is the recorder
    killer = "import os\nrecorder = int(open(f'/proc/{os.getppid()}/stat').read().rsplit(')', 1)[1].split()[1])\n"
    cells = ["a = 1", killer + "os.kill(recorder, 9)", "b = 2\nb"]
    notebook = write_notebook(tmp_path / "killer.ipynb", cells)
    out = tmp_path / "out"
    # unconfined (the sandbox would refuse the signal): what the recorder does after any death mid-step
    killed = run_themisto("record", str(notebook), "-o", str(out), "--no-sandbox")
    assert killed.returncode == -signal.SIGKILL
    assert [step.code for step in read_trajectory(out / "killer.jsonl")] == cells[:1]
    assert lock_path(out / "killer.jsonl").exists()  # it says which step was running
    # the first resume runs that step once more, in the state rebuilt by replay: it kills the recorder again
    rerun = run_themisto("record", str(notebook), "-o", str(out), "--resume", "--no-sandbox")
    assert rerun.returncode == -signal.SIGKILL
    assert [step.code for step in read_trajectory(out / "killer.jsonl")] == cells[:1]
    resumed = run_themisto("record", str(notebook), "-o", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    steps = read_trajectory(out / "killer.jsonl")
    assert steps[1].error["ename"] == RECORDING_STOPPED_ERROR and steps[2].restarted and steps[2].output == "2"
    # a later resume replays the prefix without running the killer again
    trajectory = out / "killer.jsonl"
    trajectory.write_bytes(b"".join(trajectory.read_bytes().splitlines(keepends=True)[:2]))
    again = run_themisto("record", str(notebook), "-o", str(out), "--resume")
    assert again.returncode == 0, again.stderr
    assert [(s.code, s.output, s.restarted) for s in read_trajectory(trajectory)] == [
        (s.code, s.output, s.restarted) for s in steps
    ]
    # the stability stage replays it the same way: the killer is skipped and the recorder's replay survives
    annotated = tmp_path / "annotated"
    stability = run_themisto("stability", str(trajectory), "--runs", "1", "-o", str(annotated))
    assert stability.returncode == 0, stability.stderr
    replayed = read_trajectory(annotated / "killer.jsonl")
    assert [s.stable for s in replayed] == [True, True, True]
    # and the marker is no cell's output, so no build makes it a target, errors kept or not
    built = run_themisto("build", str(trajectory), "-o", str(tmp_path / "ds"), "--sample", "all", "--include-errors")
    assert built.returncode == 0, built.stderr
    table = pq.read_table(next((tmp_path / "ds" / "output_prediction").glob("full-*.parquet")))
    assert table.column("target").to_pylist() == ["2"]  # "a = 1" shows nothing; the killer's marker is no target


# --- atomic builds -----------------------------------------------------------------------------


def tree(folder: Path) -> dict[str, str]:
    """Every file under ``folder`` by relative path, with the hash of its bytes."""
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def fork_build(trajectories: Path, out: Path, seed: int) -> int:
    """A build in a forked process of its own (no start-up cost, so kills land in the build); its pid."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            build_dataset(trajectory_files([trajectories]), out, SelectionOptions(seed=seed))
            code = 0
        finally:
            os._exit(code)  # never return into the test runner's copy
    return pid


@pytest.mark.slow
def test_a_build_killed_at_any_moment_leaves_one_whole_build(tmp_path: Path) -> None:
    trajectories = tmp_path / "trajectories"
    write_corpus(trajectories, 6, 60)
    references = {}
    duration = 0.0  # how long a build takes: the window the kills aim at
    for seed in (0, 1):  # builds are reproducible: these are exactly what a build into any folder holds
        started = time.monotonic()
        assert os.waitpid(fork_build(trajectories, tmp_path / f"reference-{seed}", seed), 0)[1] == 0
        duration = max(duration, time.monotonic() - started)
        references[seed] = tree(tmp_path / f"reference-{seed}")
    assert references[0] != references[1]
    out = tmp_path / "dataset"
    shutil.copytree(tmp_path / "reference-0", out)
    (out / "LICENSE").write_text("kept across builds")  # not a build's file: it stays, whichever build is there
    license_hash = hashlib.sha256(b"kept across builds").hexdigest()
    rng = random.Random(12)
    swapped = []
    for attempt in range(20):
        seed = attempt % 2
        pid = fork_build(trajectories, out, seed)
        time.sleep(rng.uniform(0, duration))
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
        found = tree(out)
        assert found.pop("LICENSE") == license_hash
        assert found in (references[0], references[1]), f"attempt {attempt}: a mix of two builds"
        swapped.append(found == references[seed])
    print(f"killed {len(swapped)} builds within {duration:.2f} s; {sum(swapped)} had swapped the new build in")
    assert 0 < sum(swapped) < len(swapped)  # the kills fell before and after the swap
    # the next build removes whatever the killed ones left next to the folder
    assert os.waitpid(fork_build(trajectories, out, 0), 0)[1] == 0
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".")] == []
    assert tree(out) == {**references[0], "LICENSE": license_hash}


# --- a build never deletes what is not a build ---------------------------------------------------


def leftovers(folder: Path) -> list[str]:
    """The hidden entries of ``folder``: what a build may leave behind (staging folders, locks)."""
    return sorted(path.name for path in folder.iterdir() if path.name.startswith("."))


@pytest.mark.kernel
def test_b12_a_build_into_the_folder_of_its_inputs_or_of_other_files_is_refused_and_deletes_nothing(
    tmp_path: Path,
) -> None:
    data = tmp_path / "data"
    write_corpus(data / "trajectories", 2, 40)
    (data / "trajectories" / "nb000.provenance.json").write_text("{}")
    (data / "notes.txt").write_text("mine")
    before = tree(data)
    for out in (data, data / "trajectories"):
        refused = run_themisto("build", str(data / "trajectories"), "-o", str(out), "--sample", "all")
        assert refused.returncode == 2
        assert_one_line_error(refused.stderr, "build", "lies in the output folder", "another folder")
    assert tree(data) == before
    other = tmp_path / "other"
    other.mkdir()
    (other / "todo.txt").write_text("mine")
    refused = run_themisto("build", str(data / "trajectories"), "-o", str(other), "--sample", "all")
    assert refused.returncode == 2
    assert_one_line_error(refused.stderr, "build", "not a Themisto build (todo.txt)", "new or empty folder")
    assert tree(other) == {"todo.txt": hashlib.sha256(b"mine").hexdigest()} and leftovers(tmp_path) == []
    # the stand-in sidecar only had to survive the refusals; a build reads a real one
    (data / "trajectories" / "nb000.provenance.json").unlink()
    # a previous build is a build's to replace, and an input lying in one is refused as well
    built = tmp_path / "built"
    for _ in range(2):
        replaced = run_themisto("build", str(data / "trajectories"), "-o", str(built), "--sample", "all")
        assert replaced.returncode == 0, replaced.stderr
    shutil.copy(data / "trajectories" / "nb001.jsonl", built / "nb001.jsonl")
    refused = run_themisto("build", str(built / "nb001.jsonl"), "-o", str(built), "--sample", "all")
    assert refused.returncode == 2 and (built / "nb001.jsonl").exists()


def test_b11_a_build_into_a_link_replaces_the_links_target_or_refuses_leaving_nothing_behind(tmp_path: Path) -> None:
    trajectories = tmp_path / "trajectories"
    write_corpus(trajectories, 2, 40)
    link, target = tmp_path / "link", tmp_path / "target"
    link.symlink_to(target)
    refused = run_themisto("build", str(trajectories), "-o", str(link), "--sample", "all")
    assert refused.returncode == 2
    assert_one_line_error(refused.stderr, "build", "is a link to", "which is not a folder")
    assert link.is_symlink() and not target.exists() and leftovers(tmp_path) == []
    target.mkdir()
    for _ in range(2):  # a first build, then one that replaces it
        built = run_themisto("build", str(trajectories), "-o", str(link), "--sample", "all")
        assert built.returncode == 0, built.stderr
        assert link.is_symlink() and link.resolve() == target.resolve() and (target / "README.md").is_file()
        assert leftovers(tmp_path) == []


def test_b17_import_zenodo_refuses_to_replace_a_recorded_trajectory_without_overwrite(tmp_path: Path) -> None:
    from zenodo_records import published_steps

    out = tmp_path / "trajectories"
    [recorded] = write_corpus(out, 1, 10)  # nb000.jsonl, as a recording left it
    before = recorded.read_bytes()
    record = tmp_path / "nb000.json"
    record.write_text(json.dumps(published_steps(2)))
    refused = run_themisto("import-zenodo", str(record), "-o", str(out))
    assert refused.returncode == 2
    assert_one_line_error(refused.stderr, "import-zenodo", f"{recorded} exists", "--overwrite")
    assert recorded.read_bytes() == before and sorted(path.name for path in out.iterdir()) == ["nb000.jsonl"]
    replaced = run_themisto("import-zenodo", str(record), "-o", str(out), "--overwrite")
    assert replaced.returncode == 0, replaced.stderr
    assert [step.code for step in read_trajectory(recorded)] == ["x = 0\nprint(x * 2)", "x = 1\nprint(x * 2)"]
