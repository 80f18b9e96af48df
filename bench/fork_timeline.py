"""Where a fork request's time goes: a timeline of exec-score's forked run, from the host, the kernel and a child.

The replay kernel of ``regression.py``'s ``fork`` probe (pandas and scikit-learn loaded, ``data/files`` as its
working folder, the sandbox on where the machine has it) runs ``--runs`` fork requests of ``--codes`` one-line cells,
each checked as exec-score checks it (``ForkingSession.checkpoint``, ``fork_run``, ``changed_since``,
``child_state``), the replay's own cell between two. A silent cell first wraps the kernel-side
functions a request goes through (``fork.run``, ``Child``'s steps, the child's namespaces, Landlock, seccomp,
``contain`` and ``_isolate``, the snapshot, ipykernel's ``user_expressions``, stream flushes and sends) so that each
appends ``(name, start, end)`` on ``CLOCK_MONOTONIC``, which the host, the kernel and the children share; the
kernel's list is read by a cell after each request, the first child's by its own cell. Printed: each phase's median
start (ms from the host's start of the request) and median length, the request's overhead per prediction as
``regression.py`` counts it, an empty silent request's round trip, a bare ``os.fork()`` and exit of the same
kernel (``bench_exec.fork_floor``), and the floor of the design beside it: the forks a confined prediction needs
before its cell can run, done bare (a fork, the PID namespace and its init, the clone that runs the cell:
``namespaces.enter`` and ``contain``), timed until the runner runs and until both processes (the forked child,
killed once the runner runs, and the runner) have exited: the first is the wall time
no request can save, the second the work each prediction adds to a machine's cores whatever overlaps it.

Usage: ``.venv/bin/python bench/fork_timeline.py [--runs N] [--codes K] [--extra-mib M]``; a profile to read, no
target.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from itertools import pairwise
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
WARM_UP = 3
# --extra-mib comes in files of this many MiB (a working folder of a few large data files)
EXTRA_FILE_MIB = 8
# the kernel-side wrappers, installed once by a silent cell: a name for each function a request goes through
WRAP = r"""
import sys as _sys, time as _time
from IPython import get_ipython as _get_ipython
_fork = _sys.modules["_themisto_fork"]
_fork.TIMELINE = []
def _timed(name, function):
    def timed(*args, **kwargs):
        started = _time.monotonic()
        try:
            return function(*args, **kwargs)
        finally:
            _fork.TIMELINE.append((name, started, _time.monotonic()))
    return timed
_fork.TIMED = _timed  # for the wrappers exec_timeline.py adds
_fork.run = _timed("kernel: fork.run", _fork.run)
_fork._isolate = _timed("child: _isolate", _fork._isolate)
_fork.copy_tree = _timed("child: copy_tree", _fork.copy_tree)
for _name in ("__init__", "ready", "go", "start", "collect", "reap"):
    setattr(_fork.Child, _name, _timed("kernel: Child." + _name, getattr(_fork.Child, _name)))
for _name in ("namespaces", "confine", "seccomp", "contain"):
    _fork._BOUND[_name] = _timed("child: " + _name, _fork._BOUND[_name])
_snapshot = _sys.modules["_themisto_snapshot"]
_snapshot.take = _timed("kernel: snapshot.take", _snapshot.take)
_shell = _get_ipython()
_shell.user_expressions = _timed("kernel: user_expressions", _shell.user_expressions)
_sys.stdout.flush = _timed("kernel: flush", _sys.stdout.flush)
_sys.stderr.flush = _timed("kernel: flush", _sys.stderr.flush)
_send = _shell.kernel.session.send
def _sent(stream, message, content=None, *args, **kwargs):
    kind = message if isinstance(message, str) else message.get("msg_type")
    if kind == "status" and isinstance(content, dict):  # busy, then idle
        kind = "status " + str(content.get("execution_state"))
    return _timed("kernel: send " + str(kind), _send)(stream, message, content, *args, **kwargs)
_shell.kernel.session.send = _sent
"""
# a forked cell: its process's own timeline (the child's wrappers ran in it) and when the cell began
CELL = "import json, sys, time\nprint(json.dumps([time.monotonic(), sys.modules['_themisto_fork'].TIMELINE]))"
# the design's floor (see the module's docstring), in seconds, the medians of FLOOR_RUNS until the runner runs and
# until both processes have ended, as a function installed in the kernel's fork module by a silent cell (no user name
# bound); None where the namespaces are refused
DESIGN_FLOOR = r"""
import os as _os, signal as _signal, statistics as _statistics, sys as _sys, time as _time
def _design_floor(runs):
    namespaces, running, ended = _sys.modules["_themisto_namespaces"], [], []
    for _ in range(runs):
        read, write = _os.pipe()
        go, going = _os.pipe()
        started = _time.perf_counter()
        pid = _os.fork()
        if pid == 0:
            try:
                _os.close(read)
                _os.close(going)
                namespaces.enter(network=False, map_ids=False, pid=True)
                _os.write(write, b"%d\n" % namespaces.contain())  # in the runner, the kernel's child
                _os.read(go, 1)  # it ends only once the child that started it is killed, as a prediction's runner
            finally:
                _os._exit(0)
        _os.close(write)
        _os.close(go)
        answer = _os.read(read, 64).strip()
        running.append(_time.perf_counter() - started)
        _os.close(read)
        _os.kill(pid, _signal.SIGKILL)
        _os.close(going)
        ran = answer.isdigit() and _os.waitpid(int(answer), 0)[1] == 0
        _os.waitpid(pid, 0)
        if not ran:
            return None
        ended.append(_time.perf_counter() - started)
    return _statistics.median(running), _statistics.median(ended)
_sys.modules["_themisto_fork"].DESIGN_FLOOR = _design_floor
"""
FLOOR_RUNS = 5
READ_KERNEL = "import json, sys\nprint(json.dumps(sys.modules['_themisto_fork'].TIMELINE))"
CLEAR_KERNEL = "__import__('sys').modules['_themisto_fork'].TIMELINE.clear()"


def _printed(text: str) -> Any:
    """The JSON a cell printed last."""
    return json.loads(text.strip().splitlines()[-1])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help=f"fork requests measured, after {WARM_UP} warm-up")
    parser.add_argument("--codes", type=int, default=1, help="cells per request (distinct codes of one step)")
    parser.add_argument(
        "--extra-mib", type=int, default=0, help="MiB of zeros added to the working folder, in files of 8 MiB"
    )
    arguments = parser.parse_args(argv)
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
    from bench_exec import fork_floor
    from regression import FORK_SETUP

    from themisto.kernel.forking import ForkingSession
    from themisto.recording.options import RecordOptions

    phases: dict[str, list[tuple[float, float]]] = defaultdict(list)
    overheads: list[float] = []
    with tempfile.TemporaryDirectory(prefix="themisto-fork-timeline-") as scratch_root:
        work, scratch = Path(scratch_root) / "work", Path(scratch_root) / "scratch"
        shutil.copytree(ROOT / "data" / "files", work / "files")
        for number in range(0, arguments.extra_mib, EXTRA_FILE_MIB):
            (work / f"extra-{number}.bin").write_bytes(bytes(min(EXTRA_FILE_MIB, arguments.extra_mib - number) << 20))
        scratch.mkdir()
        with ForkingSession("timeline", work, RecordOptions(timeout=600), scratch) as session:
            session.run_cell(FORK_SETUP, "setup")
            for name, code in (("wrap", WRAP), ("floor", DESIGN_FLOOR)):  # no user name bound
                session.run_cell(f"exec(compile({code!r}, '<timeline>', 'exec'), {{}})", name)
            for run in range(WARM_UP + arguments.runs):
                session.run_cell(CLEAR_KERNEL, "clear")
                marks = [("host: checkpoint", time.monotonic())]
                checkpoint = session.checkpoint()
                marks.append(("host: the fork request, sent, answered and read", time.monotonic()))
                results = session.fork_run([f"{CELL}\n{number}" for number in range(arguments.codes)])
                marks.append(("host: the check and the children's states", time.monotonic()))
                changed = session.changed_since(checkpoint)
                before = session.before() or {}
                for result in results or []:
                    session.child_state(result.snapshot or "", before)
                marks.append(("host: done", time.monotonic()))
                if results is None or changed is not None or any(result.status != "ok" for result in results):
                    raise RuntimeError(f"the forked run failed: {changed} {results}")
                kernel = _printed(session.run_cell(READ_KERNEL, "read").output)
                session.run_cell(f"step = {run}", "next")  # the replay's own cell between two steps' predictions
                if run < WARM_UP:
                    continue
                start, end = marks[0][1], marks[-1][1]
                output = "".join(m["content"]["text"] for m in results[0].messages if m["msg_type"] == "stream")
                cell_started, child = _printed(output)
                for (name, at), (_, until) in pairwise(marks):
                    phases[name].append((at - start, until - at))
                # the kernel's list holds the cells before and after the request too, a child's the kernel's
                # entries from before its fork
                entries = [*kernel, *(entry for entry in child if entry[0].startswith("child:"))]
                for name, began, ended in entries:
                    if start <= began and ended <= end:
                        phases[name].append((began - start, ended - began))
                phases["child: the cell (own time)"].append((cell_started - start, results[0].seconds))
                own = sum(result.seconds for result in results)
                overheads.append((end - start - own) / arguments.codes)
            # the bare fork and the design's floor in turn, a median of each
            floors: list[float] = []
            designs: list[tuple[float, ...]] = []
            for _ in range(FLOOR_RUNS):
                floors.append(fork_floor(session.recorder))
                reply = (
                    session.recorder.request(
                        {"design": f"__import__('sys').modules['_themisto_fork'].DESIGN_FLOOR({FLOOR_RUNS})"}, 60
                    ).reply
                    or {}
                )
                answer = reply.get("content", {}).get("user_expressions", {}).get("design", {})
                text = answer.get("data", {}).get("text/plain", "None")
                if text != "None":  # None: no PID namespace here, the sandbox's neither
                    designs.append(tuple(float(value) for value in text.strip("()").split(",")))
            trips = []
            for _ in range(20):
                started = time.perf_counter()
                session.recorder.request({"x": "1"}, 60)
                trips.append(time.perf_counter() - started)
    print(
        f"| phase ({arguments.runs} requests of {arguments.codes} cells) | starts at, ms | lasts, ms | times a request |"
    )
    print("|---|--:|--:|--:|")
    for name, spans in sorted(phases.items(), key=lambda item: statistics.median(at for at, _ in item[1])):
        at, length = (statistics.median(values) * 1000 for values in zip(*spans, strict=True))
        print(f"| {name} | {at:.1f} | {length:.1f} | {len(spans) / arguments.runs:g} |")
    print(
        f"overhead per prediction (the request and its check, less the cells' own time): "
        f"{statistics.median(overheads) * 1000:.1f} ms"
    )
    print(f"an empty silent request's round trip: {statistics.median(trips) * 1000:.1f} ms")
    floor = statistics.median(floors)
    print(f"a bare os.fork() and exit of the kernel: {floor:.1f} ms")
    if not designs:
        print("the design's floor: not measured (this machine gives a child no PID namespace)")
        return 0
    running, ended = (1000 * statistics.median(values) for values in zip(*designs, strict=True))
    print(
        "the design's floor (a fork, the PID namespace and its init, the clone that runs the cell):"
        f" {running:.1f} ms until the runner runs ({running / floor:.2f}x the bare fork),"
        f" {ended:.1f} ms until both have exited ({ended / floor:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
