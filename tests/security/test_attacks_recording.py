"""Attacks on what a recording keeps: a recorder killed mid-cell, a cell that breaks its kernel's messages, a
cell that prints 200 MB.

SECURITY.md, threats 3, 4 and 6 and "Also in place". Real ``themisto record`` processes and kernels.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pandas as pd
import pytest
from attacks import run_themisto, start_themisto, wait_for, write_notebook

from themisto.provenance import read_provenance
from themisto.trajectory import Step, read_trajectory

pytestmark = pytest.mark.kernel

# Writes a marker, sleeps on its first run only (long enough to be killed in), then sets b: the same
# output and state on every run.
SLOW_ONCE = (
    "import os, time\nfirst = not os.path.exists('marker')\nwith open('marker', 'a') as handle:\n"
    "    handle.write('ran\\n')\nif first:\n    time.sleep(120)\nb = 2\nprint('b set')"
)


def record_killed_then_resumed(source: Path, out: Path, trajectory: str) -> list[Step]:
    """``themisto record`` SIGKILLed while the cell that writes ``marker`` sleeps, then ``--resume``; the steps
    of ``trajectory``."""
    process = start_themisto("record", str(source), "-o", str(out))
    try:
        wait_for(lambda: (source.parent / "marker").exists(), what="the slow cell to start")
        process.kill()
    finally:
        process.communicate()
    resumed = run_themisto("record", str(source), "-o", str(out), "--resume")
    assert resumed.returncode == 0, resumed.stderr
    return read_trajectory(out / f"{trajectory}.jsonl")


def test_a_recorder_killed_mid_cell_resumes_that_cell_in_the_state_rebuilt_before_it(tmp_path: Path) -> None:
    notebook = write_notebook(tmp_path / "killed.ipynb", ["a = 21", SLOW_ONCE, "print(a * b)"])
    steps = record_killed_then_resumed(notebook, tmp_path / "out", "killed")
    assert [(s.step, s.output, s.error, s.restarted) for s in steps] == [
        (0, "", None, False),
        (1, "b set", None, False),  # run again, not left RecordingStopped
        (2, "42", None, False),  # the replayed a is in the kernel it runs in
    ]
    assert (tmp_path / "marker").read_text() == "ran\nran\n"  # killed once, run once more
    provenance = read_provenance(tmp_path / "out" / "killed.jsonl")
    assert provenance is not None and provenance.resumed_steps == (1,)


def test_a_resume_after_a_kill_replays_a_log_from_its_last_restart(tmp_path: Path) -> None:
    events = [
        ("execute", "with open('count', 'a') as handle:\n    handle.write('x')\nx = 1"),
        ("kernel_restarting", ""),
        ("execute", "y = 20"),
        ("execute", SLOW_ONCE),
        ("execute", "print(y + b, 'x' in dir())"),
    ]
    rows = [
        {"time": i, "kernel_id": "kernel-1", "event": event, "cell_index": f"c{i}", "cell_source": code}
        for i, (event, code) in enumerate(events)
    ]
    log = tmp_path / "log.csv"
    log.write_text(pd.DataFrame(rows).assign(cell_output="").to_csv(index=False))
    steps = record_killed_then_resumed(log, tmp_path / "out", "log-kernel-1")
    assert [(s.output, s.error, s.restarted) for s in steps] == [
        ("", None, False),
        ("", None, True),
        ("b set", None, False),
        ("22 False", None, False),  # the state since the log's restart, and nothing from before it
    ]
    assert (tmp_path / "count").read_text() == "x"  # the step before the restart was not replayed


def test_a_cell_that_patches_json_dumps_costs_nothing_under_a_long_timeout(tmp_path: Path) -> None:
    cells = ["import json\njson.dumps = lambda *args, **kwargs: '{\"forged\": 1}'\nprint('patched')", "z = 4\nz"]
    notebook = write_notebook(tmp_path / "dumps.ipynb", cells)
    started = time.monotonic()
    result = run_themisto("record", str(notebook), "-o", str(tmp_path / "out"), "--timeout", "600")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 120  # the kernel's own messages never used the patched function
    patched, after = read_trajectory(tmp_path / "out" / "dumps.jsonl")
    assert patched.error is None and patched.output == "patched" and patched.snapshot_error is None
    assert not after.restarted and after.output == "4"


# Cells that break the kernel session's packer itself, past what the install-time binding covers.
BROKEN_PACKERS = {
    "garbled": "get_ipython().kernel.session.pack = lambda message: b'{\"forged\": 1}'",
    "raising": "def pack(message):\n    raise RuntimeError('no')\nget_ipython().kernel.session.pack = pack",
}


@pytest.mark.parametrize("kind", sorted(BROKEN_PACKERS))
def test_a_cell_that_breaks_its_kernels_packer_costs_the_grace_not_the_timeout(tmp_path: Path, kind: str) -> None:
    notebook = write_notebook(tmp_path / "packer.ipynb", ["kept = 1", BROKEN_PACKERS[kind], "z = 4\nz"])
    started = time.monotonic()
    result = run_themisto("record", str(notebook), "-o", str(tmp_path / "out"), "--timeout", "600")
    assert result.returncode == 0, result.stderr
    assert time.monotonic() - started < 120  # not the 600 s timeout
    kept, broken, after = read_trajectory(tmp_path / "out" / "packer.jsonl")
    assert [v.name for v in kept.runtime] == ["kept"]
    assert broken.error is not None and broken.error["ename"] == "DeadKernelError"
    assert "finished the cell without a reply within 5 s" in broken.error["evalue"]
    assert broken.execution_time < 5 + 10  # the grace and slack for a loaded machine
    assert after.restarted and after.output == "4"


# The recorder's peak memory may grow by at most this for a cell that prints 200 MB (SECURITY.md).
HUGE_OUTPUT_BOUND = 100 * 2**20


def peak_memory(tmp_path: Path, name: str, cells: list[str]) -> tuple[int, list[Step]]:
    """Record ``cells``; the recorder process's peak resident memory (``VmHWM``, in bytes) and its steps."""
    notebook = write_notebook(tmp_path / f"{name}.ipynb", cells)
    process = start_themisto("record", str(notebook), "-o", str(tmp_path / "out"))
    status, peak = Path(f"/proc/{process.pid}/status"), 0
    try:
        while process.poll() is None:
            try:
                lines = status.read_text().splitlines()
            except OSError:  # it ended between the poll and the read
                break
            peak = max([peak] + [int(line.split()[1]) * 1024 for line in lines if line.startswith("VmHWM:")])
            time.sleep(0.05)
    finally:
        _, stderr = process.communicate(timeout=300)
    assert process.returncode == 0, stderr
    return peak, read_trajectory(tmp_path / "out" / f"{name}.jsonl")


def test_a_cell_printing_200_mb_keeps_the_recorder_within_its_memory_bound(tmp_path: Path) -> None:
    settle = "import time\ntime.sleep(1)\nprint('alive')"  # the kernel lives, and the peak is read after the cell
    baseline, _ = peak_memory(tmp_path, "small", ["print('x' * 200)", settle])
    peak, (huge, after) = peak_memory(tmp_path, "huge", ["print('x' * 200_000_000)", settle])
    assert peak - baseline < HUGE_OUTPUT_BOUND, (peak, baseline)
    assert huge.error is None and huge.output_truncated and huge.output_length == 200_000_000
    assert huge.output.startswith("x" * 10_000) and len(huge.output) < 10_100
    assert after.error is None and after.output == "alive" and not after.restarted
    assert json.loads(huge.to_json())["outputs"][0]["text"] == "x" * 1_000_000  # the raw output's budget
