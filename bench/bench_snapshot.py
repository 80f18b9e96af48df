"""Snapshot cost per step: a recorded step vs the same cell executed without a snapshot.

One kernel holds the state; the same cell (``1 + 1``, which changes nothing)
is sent alternately as a plain execute request (what nbclient sends) and as a
recorded step (``Recorder.run_cell``: the snapshot piggy-backed on the request,
memory read, the step built). The p50 difference is what the snapshot adds.

Rows:

- 100 unchanged variables of mixed kinds (numbers, strings, lists, dicts,
  small arrays and DataFrames, objects of a user class); target <= 2 ms;
- the same 100 variables with the description cache emptied before every
  step, to show what the cache saves (no target);
- a 1 GiB numpy array and a 10-million-item list alive; target <= 50 ms;
- describing each of those two from scratch, in this process (no cache);
  target: milliseconds (<= 50 ms each).
"""

from __future__ import annotations

import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from themisto.kernel.recorder import Recorder

# 100 variables: 16 each of numbers, strings, lists, dicts and user objects; 10 arrays, 10 DataFrames.
HUNDRED_VARIABLES = """
import numpy as np
import pandas as pd

class Point:
    def __init__(self, x, y):
        self.x, self.y = x, y
    def __repr__(self):
        return f"Point({self.x}, {self.y})"

for i in range(16):
    globals()[f"number_{i}"] = i * 1.5
    globals()[f"text_{i}"] = f"value {i}" * 5
    globals()[f"items_{i}"] = list(range(100))
    globals()[f"table_{i}"] = {f"key{j}": j for j in range(50)}
    globals()[f"point_{i}"] = Point(i, -i)
for i in range(10):
    globals()[f"array_{i}"] = np.arange(1000.0).reshape(100, 10)
    globals()[f"frame_{i}"] = pd.DataFrame({"a": range(200), "b": ["x"] * 200})
del i, Point  # the class is no variable of the hundred
"""
HUGE_OBJECTS = "import numpy as np\nhuge_array = np.ones(2**27)\nhuge_list = list(range(10_000_000))"
RESET_CACHE = "__import__('sys').modules['_themisto_snapshot'].CACHE.__init__()"
CELL = "1 + 1"


def _paired_steps(recorder: Recorder, steps: int, reset_cache: bool = False) -> tuple[float, float]:
    """p50 wall seconds of a plain execution and of a recorded step of CELL, interleaved."""
    plain: list[float] = []
    recorded: list[float] = []
    for index in range(steps):
        started = time.perf_counter()
        recorder.session.execute(CELL, silent=False, timeout=600)
        plain.append(time.perf_counter() - started)
        if reset_cache:
            recorder.session.execute(RESET_CACHE, silent=True, timeout=600)
        started = time.perf_counter()
        recorder.run_cell(CELL, f"c{index}")
        recorded.append(time.perf_counter() - started)
    return statistics.median(plain), statistics.median(recorded)


def _row(measure: str, target_ms: float | None, plain: float, recorded: float) -> dict:
    added = (recorded - plain) * 1000
    return {
        "benchmark": "snapshot",
        "measure": measure,
        "target": "measured" if target_ms is None else f"<= {target_ms:g} ms",
        "value": f"+{added:.2f} ms ({recorded * 1000:.2f} vs {plain * 1000:.2f} ms, {recorded / plain:.2f}x)",
        "passed": None if target_ms is None else added <= target_ms,
    }


def _describe_cold(value: object) -> float:
    """Seconds to describe ``value`` from scratch (size, shape, len, bounded repr)."""
    from themisto.kernel.inside import snapshot

    started = time.perf_counter()
    snapshot.describe("value", value, 500, 10.0)
    return time.perf_counter() - started


def _kernel_rows(steps: int, workdir: Path) -> list[dict]:
    from themisto.kernel.recorder import Recorder
    from themisto.recording.options import RecordOptions

    options = RecordOptions(timeout=600)
    rows = []
    with Recorder(trajectory_id="bench", workdir=workdir, options=options) as recorder:
        recorder.run_cell(HUNDRED_VARIABLES, "setup")
        _paired_steps(recorder, 3)  # warm-up
        measure = f"100 unchanged variables, added per step (p50 of {steps})"
        rows.append(_row(measure, 2, *_paired_steps(recorder, steps)))
        measure = f"100 variables, description cache emptied every step (p50 of {steps})"
        rows.append(_row(measure, None, *_paired_steps(recorder, steps, reset_cache=True)))
    with Recorder(trajectory_id="bench", workdir=workdir, options=options) as recorder:
        recorder.run_cell(HUGE_OBJECTS, "setup")
        _paired_steps(recorder, 3)
        measure = f"1 GiB array + 10M-item list alive, added per step (p50 of {steps})"
        rows.append(_row(measure, 50, *_paired_steps(recorder, steps)))
    return rows


def _cold_rows() -> list[dict]:
    import numpy as np

    rows = []
    makers = {"1 GiB numpy array": lambda: np.ones(2**27), "10M-item list": lambda: list(range(10_000_000))}
    for name, make in makers.items():
        value = make()
        seconds = statistics.median(_describe_cold(value) for _ in range(5))
        del value
        rows.append(
            {
                "benchmark": "snapshot",
                "measure": f"describe a {name} from scratch (size, len, repr; median of 5)",
                "target": "<= 50 ms",
                "value": f"{seconds * 1000:.2f} ms",
                "passed": seconds <= 0.05,
            }
        )
    return rows


def run(quick: bool = False) -> list[dict]:
    with tempfile.TemporaryDirectory() as tmp:
        rows = _kernel_rows(15 if quick else 41, Path(tmp))
    return rows + _cold_rows()


if __name__ == "__main__":
    from run_all import main  # bench/ is on sys.path when a benchmark runs as a script

    sys.exit(main([*sys.argv[1:], Path(__file__).stem]))
