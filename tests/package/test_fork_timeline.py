"""``bench/fork_timeline.py``: every phase it names is found in a real fork request, in the order it runs."""

from __future__ import annotations

import re

import pytest
from repository import run_profile


@pytest.mark.kernel
def test_the_timeline_finds_every_phase_of_a_fork_request_on_one_clock() -> None:
    output, rows = run_profile("fork_timeline", "--runs", "2", timeout=300)
    # a wrapper whose function was renamed, or a child's list not read, drops its phase
    for phase in ("kernel: fork.run", "kernel: Child.__init__", "kernel: snapshot.take", "child: _isolate"):
        assert phase in rows, (phase, sorted(rows))
    if "child: contain" in rows:  # the sandbox (a PID namespace a prediction) where the machine has it
        assert rows["child: namespaces"][0] < rows["child: contain"][0] < rows["child: _isolate"][0]
        # the design's floor: its runner runs before both of its processes have exited
        floor = re.search(
            r"the clone that runs the cell\): ([\d.]+) ms until the runner runs .* ([\d.]+) ms until both", output
        )
        assert floor is not None, output[-500:]
        assert 0 < float(floor[1]) < float(floor[2])
    # the host, the kernel and the child read one clock: the child's steps fall after its fork began and before
    # the kernel's run ended, the cell after the child got ready, the check's snapshot after the run
    run_start, run_length = rows["kernel: fork.run"][:2]
    # the first fork follows the run's start within a tenth of a millisecond, the table's resolution
    assert run_start <= rows["kernel: Child.__init__"][0] < rows["child: _isolate"][0]
    assert rows["child: _isolate"][0] < rows["child: the cell (own time)"][0] < run_start + run_length
    # the run's end is the sum of two values each rounded to the table's 0.1 ms, the snapshot's start a third
    assert rows["kernel: snapshot.take"][0] >= run_start + run_length - 0.15
    assert "a bare os.fork() and exit of the kernel:" in output
