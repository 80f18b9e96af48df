"""Where the tests find the checkout they test: the repository root, whatever folder a test module sits in."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

REPOSITORY = Path(__file__).resolve().parent.parent


def bench_module(name: str) -> ModuleType:
    """``bench/<name>.py`` loaded as ``run_all`` loads it: registered first (a dataclass looks its module up while
    it is built), with bench/ on sys.path for its own imports of its neighbours."""
    spec = importlib.util.spec_from_file_location(f"themisto_test_{name}", REPOSITORY / "bench" / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    sys.path.insert(0, str(REPOSITORY / "bench"))
    try:
        spec.loader.exec_module(module)
    finally:
        sys.path.remove(str(REPOSITORY / "bench"))
    return module


def run_profile(script: str, *arguments: str, timeout: float) -> tuple[str, dict[str, list[float]]]:
    """Run the profile ``bench/<script>.py`` from the repository root, which must succeed: its standard output, and
    the rows of its Markdown tables whose first value is a number, as each row's name and its numbers."""
    done = subprocess.run(
        [sys.executable, str(REPOSITORY / "bench" / f"{script}.py"), *arguments],
        cwd=REPOSITORY,
        capture_output=True,
        text=True,
        check=False,
        timeout=timeout,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    rows = {
        cells[1]: [float(value) for value in cells[2:-1]]
        for line in done.stdout.splitlines()
        if line.startswith("| ") and (cells := [cell.strip() for cell in line.split("|")])[2][:1].isdigit()
    }
    return done.stdout, rows
