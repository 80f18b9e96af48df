"""``bench/exec_timeline.py``: the phases of real fork requests of the quick bench's scoring add up, on one clock."""

from __future__ import annotations

import re

import pytest
from repository import run_profile

PHASES = (
    "the request, to the kernel's fork.run",
    "the first fork",
    "the first child's folder, to its go",
    "a later cell's request beyond the cell",
    "the check's snapshot and ipykernel's reply",
    "the answer to the host, and the host's checks",
)


@pytest.mark.kernel
def test_the_phases_of_the_scoring_runs_requests_are_found_and_add_up() -> None:
    output, rows = run_profile("exec_timeline", "--shard", "0/16", timeout=600)
    # a wrapper whose function was renamed, or a list not read back, drops a phase or makes the script fail
    for phase in PHASES:
        assert phase in rows, (phase, sorted(rows))
    # the kernel's steps and the host's marks read one clock, in the order a request runs: no phase is negative,
    # and the phases of each request make up its time beyond its cells
    phases = [values[0] for name, values in rows.items() if name != "the request beyond its cells" and len(values) == 2]
    assert min(phases) >= 0, rows
    assert sum(phases) == pytest.approx(rows["the request beyond its cells"][0], abs=0.1)
    # each child logged its own steps, from reading its code to its ready frame
    for step in ("_read_all", "_close_channels", "_isolate"):
        assert rows[step][0] > 0, (step, rows)
    if "contain" in rows:  # the sandbox (a PID namespace a prediction) where the machine has it
        assert rows["namespaces"][0] > 0 and rows["contain"][0] > 0
    figure = re.search(r"as bench_exec.py counts it: ([\d.]+) ms .* a bare fork of the kernel: ([\d.]+) ms", output)
    assert figure is not None, output[-500:]
    assert float(figure[1]) > 0 and float(figure[2]) > 0
