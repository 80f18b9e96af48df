"""The guarded figures of a base commit and of the working tree, measured side by side in one run.

asv's ``continuous BASE HEAD`` idea in the bench runner: the base commit
(``--base REV``, default ``main``) is checked out into a temporary git worktree,
and each guarded figure is measured alternately in it and in the working tree
(``--head PATH`` measures another tree in its place), with the same interpreter,
the same inputs and the repetitions interleaved (base first, then head first), so
a change of the machine's load hits both alike. Each figure is judged by the median, over the repetitions, of
the head's value over the base's taken next to it: this machine's speed drifts by up to 2x over tens of seconds
(docs/performance.md, twelfth stop), and the least of each tree's values compared the fastest stretch each tree
happened to get (a fresh-clone CI run read the fork figure at 1.32x in both rounds, the base's least 12.4 ms
against the head's 16.4; the same two trees read 1.00x straight after). A figure past ``--max-slowdown`` (1.2)
times the base's is measured again, as many
interleaved repetitions more of its probe in both trees (``--confirm`` rounds, default 1), and judged on all of
them: a slowdown of the code stays, while a stretch of load on a shared machine that hit one tree's repetitions
more than the other's passes (a CI run read the fork figure at 1.23x, the same two commits 0.98x on a quiet
machine). The run fails (exit 1) when that median is still more than ``--max-slowdown``.

Guarded figures (``NAME`` arguments choose among them):

- ``build``: wall seconds (shown without a verdict) of ``themisto build``, and CPU seconds and peak memory
  (``ru_maxrss``, or its processes' PSS summed where larger) of the build in one process (``--jobs 1``), on the same synthetic
  corpus (``--steps``, default 4,000 steps, written once by the working tree's
  generator), run in a child process in the tree measured;
- ``snapshot``: a recorded step's p50 time over a plain execution's, 100 unchanged
  variables in one kernel (what ``bench_snapshot.py`` measures, as a ratio);
- ``describe``: the CPU time the tree's snapshot module takes to describe those
  variables unchanged, in-process (the kernel side of that cost, steadier under load:
  ``.ci/run`` guards it with ``build``);
- ``fork``: exec-score's overhead per prediction, in milliseconds: the wall time of a forked run of one
  cell and the check that it left the replay alone (``ForkingSession.fork_run`` and ``changed_since``, the
  sandbox on where the machine has it), less the cell's own run time, in a kernel that loaded pandas and
  scikit-learn with the bundled data files as its working folder (median of :data:`FORK_RUNS`);
- ``setup``: the set-up of a kernel exec-score has just started or restarted, in milliseconds: the one request
  that installs the kernel-side modules, the snapshot's and the forked run's (``Recorder._set_up``), after a
  restart of the kernel's process, which is left out (median of :data:`SETUP_RUNS`). Every trajectory pays it
  once, and again at each of its restarts.

Each measurement runs ``python bench/regression.py --probe NAME`` of the working
tree with that tree's package first on ``sys.path`` and as the working directory,
so the base is measured by the same code as the head.
Usage: ``python bench/regression.py [--base REV] [--repeat N] [NAME ...]``.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
MAX_SLOWDOWN = 1.2
CONFIRM_ROUNDS = 1
PROBES = ("build", "snapshot", "describe", "fork", "setup")
# forked runs per fork measurement, after a warm-up of FORK_WARM_UP
FORK_RUNS, FORK_WARM_UP = 40, 3
# kernel restarts per setup measurement
SETUP_RUNS = 8
# the replay kernel of the fork probe: what most of the corpus's notebooks load, and a few variables
FORK_SETUP = (
    "import numpy as np\nimport pandas as pd\nfrom sklearn.linear_model import LinearRegression\n"
    "df = pd.DataFrame({'a': range(100), 'b': range(100)})\nmodel = LinearRegression().fit(df[['a']], df['b'])"
)
# Figures shown beside the guarded ones, without a verdict: a two-process build's wall time moves with the load
# of a shared machine (1.25x and 0.90x of main in two runs of one evening), more than any slowdown to catch
MEASURED_ONLY = frozenset({"build wall seconds"})


def _probe_build(corpus: Path) -> dict[str, float]:
    """Wall seconds, CPU seconds and peak memory of ``themisto build`` of ``corpus``, each build a child process.

    Wall time (shown, not guarded: :data:`MEASURED_ONLY`) is the default build's. CPU time and peak memory are
    those of a build in one process (``--jobs 1`` where the tree takes it), the per-step work compared like for
    like: a second process costs more CPU on a shared machine and its own memory for the same work, which the
    absolute targets of ``bench_build.py`` guard (its memory row counts both processes).
    """
    wall, cpu, peak = _build_once(corpus, [])
    if "--jobs" in (Path.cwd() / "themisto" / "cli" / "build.py").read_text(encoding="utf-8"):  # cwd: the tree
        _, cpu, peak = _build_once(corpus, ["--jobs", "1"])
    return {
        "build wall seconds": wall,
        "build CPU seconds, one process": cpu,
        "build peak memory MiB, one process": peak / (1 << 20),
    }


def _build_once(corpus: Path, options: list[str]) -> tuple[float, float, int]:
    """Wall and CPU seconds (its workers' included) and peak memory in bytes of one build in a child process."""
    import bench_build  # bench/ is sys.path[0]: this script's folder

    with tempfile.TemporaryDirectory(prefix="themisto-regression-") as out:
        command = [sys.executable, "-m", "themisto", "build", str(corpus), "-o", str(Path(out) / "build"), *options]
        started = time.perf_counter()
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        memory = bench_build.TreeMemory(child.pid)
        _, status, usage = os.wait4(child.pid, 0)  # this child's own rusage, its waited workers' included
        wall = time.perf_counter() - started
        peak = max(usage.ru_maxrss * 1024, memory.stop())
        errors = child.stderr.read().decode(errors="replace") if child.stderr else ""
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"themisto build failed: {errors.strip()}")
    return wall, usage.ru_utime + usage.ru_stime, peak


def _probe_snapshot() -> dict[str, float]:
    """A recorded step's p50 time over a plain execution's, with 100 unchanged variables."""
    import bench_snapshot  # bench/ is sys.path[0]: this script's folder

    from themisto.recording.options import RecordOptions

    try:
        from themisto.kernel import Recorder
    except ImportError:  # a base commit from before the kernel wing (themisto/kernel/)
        from themisto.recording.kernel import Recorder  # type: ignore[no-redef]

    with tempfile.TemporaryDirectory() as tmp:
        options = RecordOptions(timeout=600)
        with Recorder(trajectory_id="regression", workdir=Path(tmp), options=options) as recorder:
            recorder.run_cell(bench_snapshot.HUNDRED_VARIABLES, "setup")
            bench_snapshot._paired_steps(recorder, 3)  # warm-up
            plain, recorded = bench_snapshot._paired_steps(recorder, 41)
    return {"snapshot step / plain step": recorded / plain}


def _probe_describe() -> dict[str, float]:
    """CPU milliseconds this tree's snapshot module takes to describe the same 100 variables unchanged, in-process.

    The kernel-side part of the step figure alone, without the round trip: CPU time (best of 15 runs of
    50) moves far less with the machine's load than a step's wall time.
    """
    import bench_snapshot

    try:
        from themisto.kernel.inside import snapshot
    except ImportError:  # a base commit from before the kernel wing
        from themisto.recording import snapshot  # type: ignore[no-redef,attr-defined]

    namespace: dict[str, object] = {}
    exec(bench_snapshot.HUNDRED_VARIABLES, namespace)  # the bench's own setup cell, as the kernel runs it
    variables = snapshot.user_variables(namespace, {})
    cache = snapshot.DescriptionCache()
    cache.describe_all(variables, 500, 5.0)
    runs = []
    for _ in range(15):
        started = time.process_time()
        for _ in range(50):
            cache.describe_all(variables, 500, 5.0)
        runs.append((time.process_time() - started) / 50)
    return {"snapshot describe CPU ms": min(runs) * 1000}


def _probe_fork() -> dict[str, float]:
    """Milliseconds per forked prediction above the prediction's own run time (see the module's ``fork``)."""
    import shutil

    from themisto.kernel.forking import ForkingSession
    from themisto.recording.options import RecordOptions

    with tempfile.TemporaryDirectory(prefix="themisto-regression-fork-") as tmp:
        work, scratch = Path(tmp) / "work", Path(tmp) / "scratch"
        shutil.copytree(ROOT / "data" / "files", work / "files")  # the same inputs for both trees
        scratch.mkdir()
        overheads = []
        with ForkingSession("regression", work, RecordOptions(timeout=600), scratch) as session:
            session.run_cell(FORK_SETUP, "setup")
            for run in range(FORK_WARM_UP + FORK_RUNS):
                started = time.perf_counter()
                checkpoint = session.checkpoint()
                results = session.fork_run(["total = df['a'].sum()\ntotal"])
                changed = session.changed_since(checkpoint)
                elapsed = time.perf_counter() - started
                if results is None or results[0].status != "ok" or changed is not None:
                    raise RuntimeError(f"the forked run failed: {results} {changed}")
                if run >= FORK_WARM_UP:
                    overheads.append(elapsed - results[0].seconds)
                session.run_cell(f"step = {run}", "next")  # the replay's own cell between two steps' predictions
    return {"exec-score overhead ms per prediction": statistics.median(overheads) * 1000}


def _probe_setup() -> dict[str, float]:
    """Milliseconds to set up a kernel just restarted for exec-score (see the module's ``setup``)."""

    from themisto.kernel.forking import ForkingSession
    from themisto.recording.options import RecordOptions

    with tempfile.TemporaryDirectory(prefix="themisto-regression-setup-") as tmp:
        work, scratch = Path(tmp) / "work", Path(tmp) / "scratch"
        work.mkdir()
        scratch.mkdir()
        times = []
        with ForkingSession("regression", work, RecordOptions(timeout=600), scratch) as session:
            recorder = session.recorder
            for _ in range(SETUP_RUNS):
                recorder.session.restart()  # a fresh kernel process, nothing installed in it
                started = time.perf_counter()
                recorder._set_up()  # the set-up alone, as start and restart call it after the process's start
                times.append(time.perf_counter() - started)
            results = session.fork_run(["1"])  # the set-up installed what a forked run needs
            if results is None or results[0].status != "ok":
                raise RuntimeError(f"the forked run after the set-up failed: {results}")
    return {"kernel set-up ms (exec-score's installs)": statistics.median(times) * 1000}


def _write_corpus(folder: Path, steps: int) -> Path:
    sys.path.insert(0, str(ROOT / "bench"))
    import bench_build

    return bench_build._write_corpus(folder, steps)


def _measure(tree: Path, name: str, corpus: Path) -> dict[str, float]:
    """Run one probe with ``tree``'s package and return its figures."""
    environment = {**os.environ, "PYTHONPATH": str(tree)}
    command = [sys.executable, str(Path(__file__).resolve()), "--probe", name, "--corpus", str(corpus)]
    done = subprocess.run(command, cwd=tree, env=environment, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"the {name} probe failed in {tree}: {done.stderr.strip()[-2000:]}")
    figures: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return figures


def _base_tree(base: str, folder: Path) -> Path:
    """A detached git worktree of ``base`` in ``folder``; exits 2 when ``base`` names no commit."""
    resolved = subprocess.run(
        ["git", "rev-parse", "--verify", "--quiet", f"{base}^{{commit}}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    if resolved.returncode != 0:
        print(f"error: --base {base} names no commit of {ROOT}", file=sys.stderr)
        sys.exit(2)
    tree = folder / "base"
    subprocess.run(
        ["git", "worktree", "add", "--detach", str(tree), resolved.stdout.strip()],
        cwd=ROOT,
        capture_output=True,
        check=True,
    )
    return tree


def compare(base: dict[str, list[float]], head: dict[str, list[float]], max_slowdown: float) -> list[dict[str, object]]:
    """One row per figure: the median of each tree's values, the median of the head's value over the base's of the
    same repetition, and whether that is within ``max_slowdown``."""
    rows: list[dict[str, object]] = []
    for figure, values in head.items():
        before, after = statistics.median(base[figure]), statistics.median(values)
        ratio = statistics.median(now / then for then, now in zip(base[figure], values, strict=True))
        rows.append(
            {
                "figure": figure,
                "base": f"{before:.3f}",
                "head": f"{after:.3f}",
                "head / base": f"{ratio:.2f}x",
                "passed": None if figure in MEASURED_ONLY else ratio <= max_slowdown,
            }
        )
    return rows


def _table(rows: list[dict[str, object]], max_slowdown: float) -> str:
    columns = ["figure", "base", "head", "head / base"]
    lines = [f"| {' | '.join(columns)} | <= {max_slowdown:g}x |", "|" + "---|" * (len(columns) + 1)]
    for row in rows:
        verdict = "measured" if row["passed"] is None else "yes" if row["passed"] else "NO"
        cells = [str(row[column]) for column in columns] + [verdict]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def run(
    names: list[str],
    base: str,
    head: Path,
    repeat: int,
    steps: int,
    max_slowdown: float,
    log: Callable[[str], None],
    confirm: int = CONFIRM_ROUNDS,
) -> list[dict[str, object]]:
    """Measure ``names`` in a worktree of ``base`` and in ``head``, interleaved, and again (``confirm`` rounds
    at most) those with a figure past ``max_slowdown``; the rows of :func:`compare` over every repetition."""
    with tempfile.TemporaryDirectory(prefix="themisto-regression-") as tmp:
        folder = Path(tmp)
        base_tree = _base_tree(base, folder)
        try:
            corpus = _write_corpus(folder / "corpus", steps)
            figures: dict[Path, dict[str, list[float]]] = {base_tree: {}, head: {}}
            probe_of: dict[str, str] = {}  # the probe that measures each figure
            trees = {base_tree: "base", head: "head"}
            probes = list(names)  # measured this round: all of them, then those with a figure past the limit
            for round_number in range(confirm + 1):
                for repetition in range(repeat):
                    # base first, then head first: a load that rises or falls over the run hits both alike
                    order = (base_tree, head) if repetition % 2 == 0 else (head, base_tree)
                    for name in probes:
                        for tree in order:
                            started = time.perf_counter()
                            for figure, value in _measure(tree, name, corpus).items():
                                figures[tree].setdefault(figure, []).append(value)
                                probe_of[figure] = name
                            seconds = time.perf_counter() - started
                            again = f", confirming ({round_number}/{confirm})" if round_number else ""
                            log(f"{name} {trees[tree]} {repetition + 1}/{repeat}{again}: {seconds:.1f} s")
                rows = compare(figures[base_tree], figures[head], max_slowdown)
                past = [row for row in rows if row["passed"] is False]
                probes = sorted({probe_of[str(row["figure"])] for row in past})
                if not probes or round_number == confirm:
                    break
                for row in past:
                    log(f"{row['figure']}: {row['head / base']} past {max_slowdown:g}x; measuring it again")
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(base_tree)], cwd=ROOT, check=False)
    return rows


def main(argv: list[str] | None = None) -> int:
    """Compare the base and head; exit 1 when a guarded figure slowed down beyond the limit."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("names", nargs="*", help=f"guarded figures to measure: {', '.join(PROBES)} (default: all)")
    parser.add_argument("--base", default="main", help="the commit compared against (default: main)")
    parser.add_argument("--head", type=Path, default=ROOT, help="the tree measured (default: this working tree)")
    parser.add_argument("--repeat", type=int, default=3, help="interleaved repetitions per tree (default: 3)")
    parser.add_argument("--steps", type=int, default=4000, help="steps of the build's synthetic corpus")
    parser.add_argument("--max-slowdown", type=float, default=MAX_SLOWDOWN, help="head / base allowed (1.2)")
    parser.add_argument(
        "--confirm",
        type=int,
        default=CONFIRM_ROUNDS,
        help=f"rounds of --repeat repetitions more for a figure past the limit (default: {CONFIRM_ROUNDS})",
    )
    parser.add_argument("--probe", choices=PROBES, help=argparse.SUPPRESS)  # one measurement, in a child
    parser.add_argument("--corpus", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.probe is not None:
        probes = {
            "build": lambda: _probe_build(args.corpus),
            "snapshot": _probe_snapshot,
            "describe": _probe_describe,
            "fork": _probe_fork,
            "setup": _probe_setup,
        }
        figures = probes[args.probe]()
        print(json.dumps(figures))
        return 0
    if args.repeat < 1 or args.steps < 1 or args.confirm < 0:
        parser.error("--repeat and --steps must be at least 1, --confirm at least 0")
    unknown = sorted(set(args.names) - set(PROBES))
    if unknown:
        parser.error(f"no guarded figure {', '.join(unknown)}; choose among {', '.join(PROBES)}")
    names = args.names or list(PROBES)
    rows = run(names, args.base, args.head.resolve(), args.repeat, args.steps, args.max_slowdown, _stderr, args.confirm)
    print(_table(rows, args.max_slowdown))
    return 0 if all(row["passed"] is not False for row in rows) else 1


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


if __name__ == "__main__":
    sys.exit(main())
