"""Run every ``bench/bench_*.py`` and print one table of targets and measured values.

Each benchmark module defines ``run(quick: bool = False) -> list[dict]`` whose
rows have ``benchmark``, ``measure``, ``target``, ``value`` and ``passed``. A row
with a target (anything but ``measured``) passes or fails: one without a verdict
counts as failed, and the run exits 1 when any row failed or a benchmark crashed.
Usage: ``python bench/run_all.py [--quick] [NAME ...]`` (NAME filters modules).
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import traceback
from pathlib import Path
from types import ModuleType

BENCH_DIR = Path(__file__).resolve().parent
COLUMNS = ["benchmark", "measure", "target", "value", "passed"]


def load(path: Path) -> ModuleType:
    """Import a benchmark script as a module without putting bench/ on sys.path."""
    spec = importlib.util.spec_from_file_location(path.stem, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[path.stem] = module  # dataclasses look their module up while the class is built
    spec.loader.exec_module(module)
    return module


def markdown_table(rows: list[dict]) -> str:
    """The benchmark rows as one Markdown table; ``passed`` None (no target) shows as a dash."""
    lines = ["| " + " | ".join(COLUMNS) + " |", "|" + "---|" * len(COLUMNS)]
    for row in rows:
        passed = {True: "yes", False: "NO", None: "-"}[row.get("passed")]
        cells = [str(row.get(c, "")) for c in COLUMNS[:-1]] + [passed]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def verdict(row: dict) -> dict:
    """``row`` with a verdict wherever it has a target: a target row without one (not run) counts as failed."""
    if row.get("passed") is None and row.get("target") not in ("", "measured"):
        return {**row, "passed": False}
    return row


def main(argv: list[str] | None = None) -> int:
    """Run the selected benchmarks, print their table; exit 1 when one crashed or a target was missed."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="smaller sizes, for a smoke run")
    parser.add_argument("names", nargs="*", help="only benchmarks whose file name contains one of these")
    args = parser.parse_args(argv)
    rows: list[dict] = []
    failed = False
    for path in sorted(BENCH_DIR.glob("bench_*.py")):
        if args.names and not any(name in path.stem for name in args.names):
            continue
        print(f"running {path.name} ...", file=sys.stderr, flush=True)
        try:
            rows.extend(load(path).run(quick=args.quick))
        except Exception:  # one broken benchmark must not hide the others' figures
            traceback.print_exc()
            rows.append({"benchmark": path.stem, "measure": "(crashed)", "target": "", "value": "", "passed": False})
            failed = True
    rows = [verdict(row) for row in rows]
    print(markdown_table(rows))
    return 1 if failed or any(row.get("passed") is False for row in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
