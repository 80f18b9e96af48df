"""Where exec-score's overhead per prediction goes in the quick bench's own scoring run, request by request.

``bench/fork_timeline.py`` times a request of one-line cells in a kernel that loaded pandas and scikit-learn; this
times every fork request of the run that ``bench_exec.py --quick`` scores (the baselines' and the references' next
cells of shard 0 of 4 of the bundled build, real notebooks' kernels and cells). Before each request a silent request
of its own wraps the kernel-side functions (``fork_timeline.WRAP``, once per kernel), clears the kernel's list and
takes a bare fork of the kernel (``bench_exec.fork_floor``); after it another reads the kernel's list back. Each
child appends its own steps, from its fork to its ready frame, as a line of JSON to a file in the scratch folder
through a descriptor it inherits (its Landlock domain lets it open nothing there). None of these requests counts in
the times below, which are the requests' own. Printed, for the requests of the most common number of codes: each
phase's mean and median in milliseconds, from the host's send to its last check, the cells' own time left out; the
children's steps; and the overhead per prediction as ``bench_exec.py`` counts it within the run, beside the bare
fork. A profile to read, no target; the probes cost the run about a second a trajectory. It profiles fork requests
of their own: the run rides no fork on a replay cell's request (``ForkingSession.folds`` is off), where its phases
would sit inside the cell's.

Usage: ``OMP_NUM_THREADS=1 .venv/bin/python bench/exec_timeline.py [--shard K/N]``
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
# The file in a session's scratch folder the children log their steps to.
CHILDREN_LOG = "children.log"
# The children's steps, wrapped in the kernel after fork_timeline.WRAP (with its wrapper); each child writes its own to
# LOG at its ready frame (``_as_last_input`` is its last step before it), through a descriptor it inherits.
CHILD_LOG = r"""
import json as _json, os as _os, sys as _sys
_fork = _sys.modules["_themisto_fork"]
_fork.LOG = _os.open({log!r}, _os.O_WRONLY | _os.O_APPEND | _os.O_CREAT, 0o600)
for _name in ("_read_all", "_close_channels", "_copy_work"):
    setattr(_fork, _name, _fork.TIMED("child: " + _name, getattr(_fork, _name)))
_last = _fork._as_last_input
def _logged(*args, **kwargs):
    try:
        return _last(*args, **kwargs)
    finally:
        names = [step[0] for step in _fork.TIMELINE]
        first = len(names) - 1 - names[::-1].index("child: _read_all")  # its own first step; before it, the kernel's
        steps = [step for step in _fork.TIMELINE[first:] if step[0] != "child: copy_tree"]
        _os.write(_fork.LOG, (_json.dumps(steps) + "\n").encode())
_fork._as_last_input = _logged
"""
INSTALLED = "hasattr(__import__('sys').modules['_themisto_fork'], 'LOG')"
CLEAR = "__import__('sys').modules['_themisto_fork'].TIMELINE.clear()"
READ = (
    "__import__('sys').modules['_themisto_snapshot'].JsonText("
    "__import__('json').dumps(__import__('sys').modules['_themisto_fork'].TIMELINE))"
)


def _expression(reply: dict[str, Any] | None, name: str) -> str:
    """The text of user expression ``name`` in a request's reply."""
    return str(
        ((reply or {}).get("content", {}).get("user_expressions", {}).get(name, {}).get("data", {})).get(
            "text/plain", ""
        )
    )


def _phases(request: dict[str, Any]) -> dict[str, float]:
    """One request's phases in milliseconds (see the module's docstring), from its kernel-side steps."""
    steps: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for name, began, ended in request["kernel"]:
        steps[name].append((began, ended))
    for spans in steps.values():
        spans.sort()
    asked, run = steps["kernel: user_expressions"][-1], steps["kernel: fork.run"][-1]
    forks, starts, collects, goes_sent = (
        steps[f"kernel: Child.{name}"] for name in ("__init__", "start", "collect", "go")
    )
    # a child's go: where the go that sent it began. The first child's is the first go (confined, sent once its
    # folder is copied, before it is ready; else within its start); a later child's, the one within its start (the
    # child it wakes may take the kernel's CPU before the go returns)
    goes = [goes_sent[0][0]] + [
        min(began for began, _ in goes_sent if start[0] <= began <= start[1]) for start in starts[1:]
    ]
    own = request["own"]
    later = range(1, len(own))
    phases = {
        "the request, to the kernel's fork.run": run[0] - request["sent"],
        "the first fork": forks[0][1] - forks[0][0],
        "the first child's folder, to its go": goes[0] - forks[0][1],
        "the first cell's request beyond the cell (its readiness where it had its go before, later forks, reaps,"
        " outcome, snapshot, kill)": collects[0][1] - goes[0] - own[0],
    }
    if later:
        phases["a later child's readiness, after the cell before it"] = sum(
            goes[index] - collects[index - 1][1] for index in later
        )
        phases["a later cell's request beyond the cell"] = sum(
            collects[index][1] - goes[index] - own[index] for index in later
        )
    phases["fork.run's end (reaps, the answer's text)"] = run[1] - collects[-1][1]
    phases["the check's snapshot and ipykernel's reply"] = asked[1] - run[1]
    phases["the answer to the host, and the host's checks"] = request["done"] - asked[1]
    return {name: 1000 * value for name, value in phases.items()}


def _instrument(requests: list[dict[str, Any]], probing: list[float]) -> Callable[[], None]:
    """Wrap ``ForkingSession.fork_run`` and ``changed_since`` to time each request and probe around it, with no fork
    riding on a cell's request; the undo."""
    from bench_exec import fork_floor
    from fork_timeline import WRAP

    from themisto.kernel.forking import ForkingSession

    fork_run, changed_since, folds = ForkingSession.fork_run, ForkingSession.changed_since, ForkingSession.folds

    def timed_fork_run(session: ForkingSession, codes: Sequence[str]) -> Any:
        started = time.perf_counter()
        log = str(session.scratch / CHILDREN_LOG)
        if _expression(session.recorder.request({"x": INSTALLED}, 60).reply, "x") != "True":
            install = f"exec({WRAP!r}, {{}}), exec({CHILD_LOG.format(log=log)!r}, {{}})"
            session.recorder.request({"install": install}, 60)
        session.recorder.request({"clear": CLEAR}, 60)
        floor = fork_floor(session.recorder)
        probing.append(time.perf_counter() - started)
        request: dict[str, Any] = {"sent": time.monotonic(), "floor": floor, "codes": len(codes)}
        results = fork_run(session, codes)
        request["own"] = [result.seconds for result in results or []]
        requests.append(request)
        session.pending = request  # type: ignore[attr-defined]
        return results

    def timed_changed_since(session: ForkingSession, checkpoint: Any) -> str | None:
        changed = changed_since(session, checkpoint)
        request = getattr(session, "pending", None)
        if request is not None:
            request["done"] = time.monotonic()
            started = time.perf_counter()
            request["kernel"] = json.loads(_expression(session.recorder.request({"t": READ}, 60).reply, "t"))
            log = session.scratch / CHILDREN_LOG
            request["children"] = [json.loads(line) for line in log.read_text().splitlines()] if log.exists() else []
            log.write_text("")
            probing.append(time.perf_counter() - started)
            session.pending = None  # type: ignore[attr-defined]
        return changed

    ForkingSession.fork_run = timed_fork_run  # type: ignore[method-assign,assignment]
    ForkingSession.changed_since = timed_changed_since  # type: ignore[method-assign,assignment]
    ForkingSession.folds = property(lambda session: False)  # type: ignore[method-assign,assignment]

    def undo() -> None:
        ForkingSession.fork_run, ForkingSession.changed_since = fork_run, changed_since  # type: ignore[method-assign]
        ForkingSession.folds = folds  # type: ignore[method-assign]

    return undo


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shard", default="0/4", help="K/N: the shard of the trajectories scored (the quick bench's, 0/4, by default)"
    )
    arguments = parser.parse_args(argv)
    index, count = (int(part) for part in arguments.shard.split("/"))
    sys.path[:0] = [str(ROOT), str(ROOT / "bench")]
    from bench_exec import _run

    from themisto.evaluation.exec import exec_score
    from themisto.recording.options import RecordOptions

    requests: list[dict[str, Any]] = []
    probing: list[float] = []
    with tempfile.TemporaryDirectory(prefix="themisto-exec-timeline-") as scratch:
        workdir = Path(scratch) / "workdir"
        shutil.copytree(ROOT / "data" / "files", workdir / "files")
        run_dir = _run(Path(scratch) / "run")
        undo = _instrument(requests, probing)
        try:
            report = exec_score(
                [run_dir],
                data=str(ROOT / "hf_dataset"),
                output=Path(scratch) / "out",
                options=RecordOptions(timeout=120, workdir=workdir),
                shard=(index, count),
            )
        finally:
            undo()
    codes = Counter(request["codes"] for request in requests).most_common(1)[0][0]
    chosen = [r for r in requests if r["codes"] == codes == len(r["own"]) and "kernel" in r and r["children"]]
    each = [_phases(request) for request in chosen]
    phases: dict[str, list[float]] = defaultdict(list)
    for request_phases in each:
        for name, value in request_phases.items():
            phases[name].append(value)
    print(f"| phase ({len(chosen)} requests of {codes} codes, of {len(requests)}), ms a request | mean | median |")
    print("|---|--:|--:|")
    for name, values in phases.items():
        print(f"| {name} | {statistics.mean(values):.2f} | {statistics.median(values):.2f} |")
    total = [sum(request_phases.values()) for request_phases in each]
    print(f"| the request beyond its cells | {statistics.mean(total):.2f} | {statistics.median(total):.2f} |")
    steps: dict[str, list[float]] = defaultdict(list)
    for request in chosen:
        for child in request["children"]:
            for name, began, ended in child:
                steps[name].append(1000 * (ended - began))
    print("\n| a child's step | median ms |\n|---|--:|")
    for name, values in steps.items():
        print(f"| {name.removeprefix('child: ')} | {statistics.median(values):.2f} |")
    within = 1000 * (report.fork_seconds - sum(probing) - report.execution_seconds) / report.executions
    floor = statistics.mean(request["floor"] for request in requests)  # over the requests
    print(
        f"\noverhead per prediction within the run, as bench_exec.py counts it: {within:.1f} ms"
        f" ({report.executions} runs); a bare fork of the kernel: {floor:.1f} ms ({within / floor:.2f}x)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
