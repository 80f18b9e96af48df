"""What a cgroup per prediction would cost: a forked process moving itself into a cgroup of its own.

A cgroup per prediction (``cgroup.kill``) in place of a PID namespace would save the second fork of the kernel
that a PID namespace costs each confined prediction (``namespaces.contain``), if moving the child into its
cgroup were cheap. Here a process forks ``--runs`` children, one at a time; each writes ``0`` into the
``cgroup.procs`` of a new cgroup beneath this process's own (cgroup v2), and the time of that write is kept.
Between two children the process sleeps ``--gap`` seconds, as exec-score's requests are spaced by the replay's
cells and the scorer's checks. Printed: the median and the range of the move for each gap, and of the ``mkdir``,
``cgroup.kill`` and ``rmdir`` around it.

A move takes the kernel's cgroup_threadgroup_rwsem for writing, whose first writer after a quiet spell waits for
an RCU grace period (unless the cgroup2 mount has ``favordynmods``): on 2026-12-05 here, 0.2 ms for moves in a
row and 6 to 21 ms for moves 20 or 100 ms apart, more than the second fork it would save. Needs a cgroup v2 this
user may write (root, or a delegated cgroup); says so in one line and exits 2 where there is none.

Usage: ``.venv/bin/python bench/cgroup_migration.py [--runs N] [--gap S ...]``; a profile to read, no target.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path


def own_cgroup() -> Path | None:
    """This process's cgroup v2 folder (the cgroup2 mount joined with ``/proc/self/cgroup``'s path), or None."""
    try:
        path = next(
            line[3:].strip() for line in Path("/proc/self/cgroup").read_text().splitlines() if line.startswith("0::")
        )
        mounts = [line.split() for line in Path("/proc/self/mountinfo").read_text().splitlines()]
    except (OSError, StopIteration):
        return None
    for fields in mounts:
        after = fields.index("-") if "-" in fields else -1
        if after > 0 and fields[after + 1] == "cgroup2" and fields[3] == "/":
            return Path(fields[4]) / path.lstrip("/")
    return None


def _move_child(folder: Path) -> float:
    """Seconds a forked child takes to move itself into ``folder``'s cgroup; the child then ends."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        os.close(read)
        started = time.perf_counter()
        (folder / "cgroup.procs").write_text("0")
        os.write(write, str(time.perf_counter() - started).encode())
        os._exit(0)
    os.close(write)
    seconds = float(os.read(read, 64))
    os.close(read)
    os.waitpid(pid, 0)
    return seconds


def measure(parent: Path, runs: int, gap: float) -> dict[str, list[float]]:
    """Milliseconds of each step, per run, for moves ``gap`` seconds apart."""
    found: dict[str, list[float]] = {"mkdir": [], "move": [], "cgroup.kill": [], "rmdir": []}
    for run in range(runs):
        folder = parent / f"p{run}"
        started = time.perf_counter()
        folder.mkdir()
        found["mkdir"].append(time.perf_counter() - started)
        found["move"].append(_move_child(folder))
        started = time.perf_counter()
        (folder / "cgroup.kill").write_text("1")
        found["cgroup.kill"].append(time.perf_counter() - started)
        started = time.perf_counter()
        folder.rmdir()
        found["rmdir"].append(time.perf_counter() - started)
        time.sleep(gap)
    return {step: [1000 * value for value in values] for step, values in found.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="moves per gap (default: 20)")
    parser.add_argument("--gap", type=float, nargs="+", default=[0.0, 0.02, 0.1], help="seconds between moves")
    args = parser.parse_args(argv)
    own = own_cgroup()
    parent = own / f"themisto-bench-{os.getpid()}" if own is not None else None
    try:
        if parent is None:
            raise OSError("no cgroup v2 mounted")
        parent.mkdir()
    except OSError as exc:
        print(f"error: no cgroup to write here: {exc}", file=sys.stderr)
        return 2
    try:
        print("| gap, ms | step | median, ms | range, ms |\n|--:|---|--:|---|")
        for gap in args.gap:
            for step, values in measure(parent, args.runs, gap).items():
                print(
                    f"| {1000 * gap:g} | {step} | {statistics.median(values):.2f} | {min(values):.2f} to {max(values):.2f} |"
                )
    finally:
        parent.rmdir()
    return 0


if __name__ == "__main__":
    sys.exit(main())
