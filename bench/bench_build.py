"""Build time of the Themisto dataset: ``build_dataset`` over 10,000 synthetic steps.

The corpus is the tests' synthetic generator (20 trajectories of 500 steps,
with errors, restarts and an evolving namespace), written once. Measured side
by side, interleaved over repetitions (median wall time):

- the whole build: selection, all five configs (both splits), Parquet and card;
- one validated read of the same steps (``iter_steps``), the floor any build
  pays at least once; the ratio says how many such reads a build costs.

100,000 steps are not measured by default: the build is linear in the steps
(each config streams them), so it would take about ten times as long.
"""

from __future__ import annotations

import importlib.util
import statistics
import sys
import tempfile
import time
from pathlib import Path

import datasets

from themisto.dataset import build_dataset
from themisto.trajectory import iter_steps

ROOT = Path(__file__).resolve().parent.parent
BUILD_TARGET_S = 30.0  # "seconds" for 10k steps, on a shared 2-core machine


def _synthetic():
    """The tests' synthetic trajectory generator, loaded without putting tests/ on sys.path."""
    spec = importlib.util.spec_from_file_location("themisto_bench_synthetic", ROOT / "tests" / "synthetic.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _write_corpus(folder: Path, trajectories: int, steps_each: int) -> list[Path]:
    # plain writes: the recorder's per-line fsync is not what is measured here
    synthetic = _synthetic()
    paths = []
    for index in range(trajectories):
        steps = synthetic.synthetic_steps(f"nb{index:03d}", steps_each)
        path = folder / f"nb{index:03d}.jsonl"
        path.write_text("".join(step.to_json() + "\n" for step in steps), encoding="utf-8")
        paths.append(path)
    return paths


def _timed(action) -> float:
    start = time.perf_counter()
    action()
    return time.perf_counter() - start


def run(quick: bool = False) -> list[dict]:
    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    trajectories, steps_each, repetitions = (4, 500, 1) if quick else (20, 500, 3)
    steps = trajectories * steps_each
    with tempfile.TemporaryDirectory(prefix="themisto-bench-build-") as tmp:
        paths = _write_corpus(Path(tmp), trajectories, steps_each)
        reads, builds = [], []
        out = Path(tmp) / "out"
        for _ in range(repetitions):
            reads.append(_timed(lambda: [None for path in paths for _ in iter_steps(path)]))
            builds.append(_timed(lambda: build_dataset(paths, out)))  # each build replaces the last
    read, build = statistics.median(reads), statistics.median(builds)
    target = BUILD_TARGET_S * steps / 10_000
    return [
        {
            "benchmark": "build",
            "measure": f"themisto build wall time, {steps:,} steps, 5 configs",
            "target": f"<= {target:g} s",
            "value": f"{build:.1f} s ({steps / build:,.0f} steps/s)",
            "passed": build <= target,
        },
        {
            "benchmark": "build",
            "measure": "build / one validated read of the same steps",
            "target": "informational",
            "value": f"{build / read:.1f}x ({build:.1f} s vs {read:.2f} s)",
            "passed": None,
        },
    ]


if __name__ == "__main__":
    rows = run(quick="--quick" in sys.argv)
    columns = ["benchmark", "measure", "target", "value", "passed"]
    print(" | ".join(columns))
    for row in rows:
        print(" | ".join(str(row[c]) for c in columns))
