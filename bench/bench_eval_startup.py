"""Start-up of ``themisto eval`` against plain ``lm_eval --include_path lm_eval_tasks``.

Both run the four Themisto tasks on lm-eval's ``dummy`` model in a fresh
process; the figure is the time from process creation to the model's first
``generate_until`` request (imports, task indexing, data loading, request
building), after which the process exits. Plain ``lm_eval`` indexes its
~14,000 built-in tasks before loading ours; ``themisto eval`` indexes only the
Themisto folder. Runs are interleaved and the median is reported. The data is
the bundled build when it exists, else the test fixture's sessions built by
the real builder (tests/dataset_fixture.py).
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TARGET_RATIO = 0.5

# Runs in the measured process: report the first request's time and stop there.
_DRIVER = """
import sys, time
import psutil
from lm_eval.models.dummy import DummyLM

def first_request(self, requests, disable_tqdm=False):
    print(f"FIRST_REQUEST {time.time() - psutil.Process().create_time():.3f}", flush=True)
    raise SystemExit(0)

DummyLM.generate_until = first_request
if sys.argv[1] == "lm_eval":
    from lm_eval.__main__ import cli_evaluate
    sys.argv = ["lm_eval", *sys.argv[2:]]
    cli_evaluate()
else:
    from themisto.cli import main
    main(sys.argv[2:])
"""


def _data_dir(scratch: Path) -> Path:
    """The bundled build if built, else the fixture dataset the tests use, built into ``scratch``."""
    bundled = REPO / "hf_dataset"
    if (bundled / "README.md").is_file():
        return bundled
    from run_all import load  # bench/ is on sys.path whichever way a benchmark runs

    return load(REPO / "tests" / "dataset_fixture.py").write_dataset(scratch / "data")


def _first_request_seconds(tool: str, out: Path, env: dict[str, str]) -> float:
    """Seconds from process creation to the first model request of ``tool`` (lm_eval or themisto)."""
    if tool == "lm_eval":
        args = ["run", "--include_path", str(REPO / "lm_eval_tasks"), "--tasks", "themisto", "--model", "dummy",
                "--limit", "1", "--output_path", str(out)]  # fmt: skip
    else:
        args = ["eval", "--model", "dummy", "--limit", "1", "-o", str(out)]
    done = subprocess.run(
        [sys.executable, "-c", _DRIVER, tool, *args],
        cwd=out.parent,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    for line in done.stdout.splitlines():
        if line.startswith("FIRST_REQUEST "):
            return float(line.split()[1])
    raise RuntimeError(f"{tool} never reached the model:\n{done.stderr[-2000:]}")


def run(quick: bool = False) -> list[dict]:
    """Median start-up of themisto eval over plain lm_eval, measured interleaved."""
    repetitions = 1 if quick else 3
    with tempfile.TemporaryDirectory() as scratch_name:
        scratch = Path(scratch_name)
        env = os.environ | {
            "THEMISTO_DATA": str(_data_dir(scratch)),
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_DATASETS_CACHE": str(scratch / "cache"),
        }
        times: dict[str, list[float]] = {"themisto": [], "lm_eval": []}
        for tool in times:  # warm-up: fills the datasets cache and the OS file cache
            _first_request_seconds(tool, scratch / f"warm-{tool}", env)
        for repetition in range(repetitions):
            for tool in times:
                times[tool].append(_first_request_seconds(tool, scratch / f"{tool}-{repetition}", env))
    themisto = statistics.median(times["themisto"])
    plain = statistics.median(times["lm_eval"])
    ratio = themisto / plain
    return [
        {
            "benchmark": "eval_startup",
            "measure": "themisto eval / lm_eval --include_path: time to the first model request",
            "target": f"<= {TARGET_RATIO}x",
            "value": f"{ratio:.2f}x ({themisto:.1f} s vs {plain:.1f} s, median of {repetitions})",
            "passed": ratio <= TARGET_RATIO,
        }
    ]


if __name__ == "__main__":
    from run_all import main  # bench/ is on sys.path when a benchmark runs as a script

    sys.exit(main([*sys.argv[1:], Path(__file__).stem]))
