"""Statistics of the bundled corpus: what the logs hold, and what a build of them offers a benchmark.

From the logs (``data/logs``): sessions, scenarios, families, executions,
exceptions, restarts, and how development happens (edited and unchanged
re-runs, fixes after errors, out-of-order runs, what follows a restart,
interrupted cells, cells that print and return, multi-output cells).

From a build (``--build DIR``, the output of ``themisto build``): per task the
examples of the ``full`` and ``test`` splits, the share of the most frequent
test target, the share of distinct (code, target) pairs, the majority-answer
exact match, and for output prediction the *runtime-information share*: the
share of examples whose target holds a token (a number of two or more
characters, or a word of three or more) that appears nowhere in the prompt
without runtime (history and code) but does appear in the runtime block.

Usage: ``python -m tools.corpus.corpus_stats [--logs DIR] [--build DIR] [--check]``;
``--check`` exits 1 when a threshold below is not met.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import sys
from collections import Counter, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tools.corpus import LOGS_DIR
from tools.corpus.sessions import SESSIONS

FIX_ERRORS = ("NameError", "KeyError", "TypeError")
TOKEN = re.compile(r"[A-Za-z_][A-Za-z0-9_]{2,}|\d[\d.]*\d")
# What a corpus must reach to measure anything: (what, minimum) for the logs, and per task of a build.
LOG_MINIMA = {"sessions": 40, "scenarios": 12, "families": 8, "executions": 2000, "exceptions": 150, "restarts": 25}
FULL_MINIMUM = 1200
MAX_TARGET_SHARE = 0.03
MIN_DISTINCT_PAIRS = 0.90
MAX_MAJORITY_EM = 0.03


@dataclass
class Execution:
    """One execute/finished_execute pair of a log."""

    kernel: str
    cell: str
    position: int
    source: str
    outputs: list[dict[str, Any]]
    after_restart: bool  # first execution of the kernel after a restart

    @property
    def error(self) -> str | None:
        names = [o["ename"] for o in self.outputs if o["output_type"] == "error"]
        return names[0] if names else None


@dataclass
class LogStats:
    """Counts over every log."""

    sessions: int = 0
    scenarios: set[str] = field(default_factory=set)
    families: set[str] = field(default_factory=set)
    users: set[str] = field(default_factory=set)
    kernels: int = 0
    executions: int = 0
    exceptions: Counter[str] = field(default_factory=Counter)
    restarts: int = 0
    after_restart: Counter[str] = field(default_factory=Counter)
    interrupts: int = 0
    behaviours: Counter[str] = field(default_factory=Counter)
    # per scenario: its family, its developers, and its executions, exceptions and restarts
    per_scenario: dict[str, dict[str, Any]] = field(default_factory=dict)


def read_log(path: Path) -> tuple[list[dict[str, str]], list[Execution], list[list[Execution]]]:
    """The rows of a log, its executions, and per restart the executions that follow it (same kernel)."""
    with path.open(newline="", encoding="utf-8") as handle:
        rows = list(csv.DictReader(handle))
    executions: list[Execution] = []
    after: list[list[Execution]] = []
    pending: dict[str, dict[str, str]] = {}
    restarted: set[str] = set()
    current_tail: dict[str, list[Execution]] = {}
    for row in rows:
        kernel = row["kernel_id"]
        if row["event"] == "execute":
            pending[kernel] = row
        elif row["event"] == "kernel_restarting":
            restarted.add(kernel)
            current_tail[kernel] = []
            after.append(current_tail[kernel])
        elif row["event"] == "finished_execute":
            started = pending.pop(kernel)
            execution = Execution(
                kernel,
                row["cell_index"],
                int(started["cell_num"]),
                row["cell_source"],
                json.loads(row["cell_output"] or "[]"),
                kernel in restarted,
            )
            restarted.discard(kernel)
            executions.append(execution)
            if kernel in current_tail:
                current_tail[kernel].append(execution)
    return rows, executions, after


def classify_restart(before: set[str], following: list[Execution]) -> str:
    """What the developer did after a restart: Run All, re-ran some top cells, or carried on with new work."""
    if not following or following[0].cell not in before:
        return "carried on"
    rerun: list[Execution] = []
    for execution in following:
        if execution.cell not in before or (rerun and execution.position <= rerun[-1].position):
            break
        rerun.append(execution)
    return "run all" if len(rerun) >= 0.8 * len(before) else "re-ran some cells"


def log_stats(folder: Path) -> LogStats:
    """Count everything the thresholds ask of the logs."""
    sessions = {s.name: s for s in SESSIONS}
    stats = LogStats()
    for path in sorted(folder.glob("*.csv")):
        rows, executions, after = read_log(path)
        session = sessions.get(path.stem)
        stats.sessions += 1
        if session is not None:
            module = session.module()
            stats.scenarios.add(session.scenario)
            stats.families.add(module.FAMILY)
            scenario = stats.per_scenario.setdefault(
                session.scenario,
                {"family": module.FAMILY, "title": module.TITLE, "developers": [], "counts": Counter()},
            )
            scenario["developers"].append(session.persona.user)
            scenario["counts"].update(
                executions=len(executions),
                exceptions=sum(e.error is not None for e in executions),
                restarts=len(after),
            )
        stats.users.update(r["user_id"] for r in rows)
        stats.kernels += len({r["kernel_id"] for r in rows})
        stats.interrupts += sum(r["event"] == "kernel_interrupting" for r in rows)
        stats.restarts += len(after)
        stats.executions += len(executions)
        count_behaviours(executions, stats)
        # cells run in each kernel before each restart, to classify what follows it
        seen: dict[str, set[str]] = defaultdict(set)
        tails = iter(after)
        for row in rows:
            if row["event"] == "execute":
                seen[row["kernel_id"]].add(row["cell_index"])
            elif row["event"] == "kernel_restarting":
                stats.after_restart[classify_restart(set(seen[row["kernel_id"]]), next(tails))] += 1
    return stats


def count_behaviours(executions: list[Execution], stats: LogStats) -> None:
    """Per execution: re-runs (edited or not), fixes, out-of-order runs, print-and-return and multi-output cells."""
    last: dict[tuple[str, str], Execution] = {}
    previous: dict[str, Execution] = {}
    for execution in executions:
        key = (execution.kernel, execution.cell)
        if execution.error:
            stats.exceptions[execution.error] += 1
        before = last.get(key)
        if before is not None:
            stats.behaviours["re-run, edited" if before.source != execution.source else "re-run, unchanged"] += 1
            if before.error in FIX_ERRORS and execution.source != before.source and not execution.error:
                stats.behaviours[f"fix after {before.error}"] += 1
        earlier = previous.get(execution.kernel)
        if earlier is not None and not execution.after_restart and execution.position < earlier.position:
            stats.behaviours["out of order (a cell above the previous one)"] += 1
        kinds = {o["output_type"] for o in execution.outputs}
        streams = {o.get("name") for o in execution.outputs if o["output_type"] == "stream"}
        if "stdout" in streams and "execute_result" in kinds:
            stats.behaviours["prints and returns"] += 1
        if len(execution.outputs) >= 2:
            stats.behaviours["several outputs"] += 1
        if any("image/png" in o.get("data", {}) for o in execution.outputs):
            stats.behaviours["shows a plot"] += 1
        if not execution.outputs:
            stats.behaviours["no output"] += 1
        last[key] = execution
        previous[execution.kernel] = execution


# -- build statistics ---------------------------------------------------------


def tokens(text: str) -> set[str]:
    """Numbers of two or more characters and words of three or more."""
    return set(TOKEN.findall(text))


def read_rows(build: Path, config: str, split: str, columns: list[str]) -> list[dict[str, Any]]:
    import pyarrow.parquet as pq

    from themisto.building.card_reading import parquet_path  # the build's card names its (content-hashed) files

    return pq.read_table(parquet_path(build, config, split), columns=columns).to_pylist()


@dataclass
class TaskStats:
    """What one task's splits offer."""

    full: int
    test: int
    top_target: str
    top_share: float
    distinct_pairs: float
    majority_em: float


def task_stats(build: Path, config: str) -> TaskStats:
    """Sizes, target concentration and the majority-answer floor of one task config."""
    full = read_rows(build, config, "full", ["target"])
    test = read_rows(build, config, "test", ["code", "target"])
    test_targets = Counter(r["target"] for r in test)
    top_target, top_count = test_targets.most_common(1)[0]
    majority = Counter(r["target"] for r in full).most_common(1)[0][0]
    return TaskStats(
        full=len(full),
        test=len(test),
        top_target=top_target,
        top_share=top_count / len(test),
        distinct_pairs=len({(r["code"], r["target"]) for r in test}) / len(test),
        majority_em=sum(r["target"] == majority for r in test) / len(test),
    )


def runtime_share(build: Path, split: str) -> tuple[float, float, int]:
    """Shares of output-prediction examples whose target needs the runtime block, and that need any unseen value."""
    plain = {
        r["example_id"]: r["prompt"] for r in read_rows(build, "output_prediction", split, ["example_id", "prompt"])
    }
    rows = read_rows(build, "output_prediction_runtime", split, ["example_id", "runtime_text", "target"])
    from_runtime = unseen = 0
    for row in rows:
        missing = tokens(row["target"]) - tokens(plain[row["example_id"]])
        from_runtime += bool(missing & tokens(row["runtime_text"]))
        unseen += bool(missing)
    return from_runtime / len(rows), unseen / len(rows), len(rows)


# -- report -------------------------------------------------------------------


def share(part: int, whole: int) -> str:
    return f"{part} ({100 * part / whole:.1f}%)" if whole else str(part)


def report_logs(stats: LogStats) -> list[str]:
    lines = [
        f"sessions: {stats.sessions} (kernels: {stats.kernels}, developers: {len(stats.users)})",
        f"scenarios: {len(stats.scenarios)} in {len(stats.families)} families ({', '.join(sorted(stats.families))})",
        f"executions: {stats.executions}",
        f"exceptions: {sum(stats.exceptions.values())} ("
        + ", ".join(f"{name} {count}" for name, count in stats.exceptions.most_common())
        + ")",
        f"kernel restarts: {stats.restarts} (then "
        + ", ".join(f"{kind} {count}" for kind, count in sorted(stats.after_restart.items()))
        + ")",
        f"interrupted cells (kernel_interrupting): {stats.interrupts}",
        "per execution:",
    ]
    order = [
        "re-run, edited",
        "re-run, unchanged",
        *(f"fix after {e}" for e in FIX_ERRORS),
        "out of order (a cell above the previous one)",
        "prints and returns",
        "several outputs",
        "shows a plot",
        "no output",
    ]
    lines += [f"  {name}: {share(stats.behaviours[name], stats.executions)}" for name in order]
    return lines


def report_scenarios(stats: LogStats) -> list[str]:
    """A markdown table of the scenarios: family, what the notebook does, developers and what their sessions hold."""
    lines = [
        "| scenario | family | notebook | developers | executions | exceptions | restarts |",
        "| --- | --- | --- | --- | ---: | ---: | ---: |",
    ]
    for name, scenario in sorted(stats.per_scenario.items(), key=lambda item: (item[1]["family"], item[0])):
        counts = scenario["counts"]
        lines.append(
            f"| {name} | {scenario['family']} | {scenario['title']} | {', '.join(scenario['developers'])} |"
            f" {counts['executions']} | {counts['exceptions']} | {counts['restarts']} |"
        )
    return lines


def report_build(build: Path) -> tuple[list[str], dict[str, TaskStats], float]:
    lines = []
    per_task = {}
    for config in ("output_prediction", "next_cell_prediction"):
        t = per_task[config] = task_stats(build, config)
        lines.append(
            f"{config}: full {t.full}, test {t.test}; most frequent test target {t.top_share:.1%} ({t.top_target[:40]!r}),"
            f" distinct (code, target) pairs {t.distinct_pairs:.1%}, majority-answer EM {t.majority_em:.3f}"
        )
    measured = {}
    for split in ("full", "test"):
        needs_runtime, unseen, n = runtime_share(build, split)
        measured[split] = needs_runtime
        lines.append(
            f"output_prediction {split} ({n}): target holds a value found only in the runtime block {needs_runtime:.1%};"
            f" a value found in neither history nor code {unseen:.1%}"
        )
    return lines, per_task, measured["full"]


def failures(stats: LogStats, per_task: dict[str, TaskStats]) -> Iterable[str]:
    """The thresholds that the corpus misses."""
    have = {
        "sessions": stats.sessions,
        "scenarios": len(stats.scenarios),
        "families": len(stats.families),
        "executions": stats.executions,
        "exceptions": sum(stats.exceptions.values()),
        "restarts": stats.restarts,
    }
    for name, minimum in LOG_MINIMA.items():
        if have[name] < minimum:
            yield f"{name}: {have[name]} < {minimum}"
    for config, t in per_task.items():
        if t.full < FULL_MINIMUM:
            yield f"{config}: full split {t.full} < {FULL_MINIMUM}"
        if t.top_share > MAX_TARGET_SHARE:
            yield f"{config}: one target covers {t.top_share:.1%} of the test split"
        if t.distinct_pairs < MIN_DISTINCT_PAIRS:
            yield f"{config}: only {t.distinct_pairs:.1%} distinct (code, target) pairs in the test split"
        if t.majority_em > MAX_MAJORITY_EM:
            yield f"{config}: majority-answer EM {t.majority_em:.3f}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--logs", type=Path, default=LOGS_DIR, help="folder of JuNE logs (default: data/logs)")
    parser.add_argument("--build", type=Path, help="a `themisto build` output folder to measure as well")
    parser.add_argument("--check", action="store_true", help="exit 1 when a corpus threshold is missed")
    parser.add_argument("--scenarios", action="store_true", help="also print the table of scenarios (markdown)")
    args = parser.parse_args(argv)
    stats = log_stats(args.logs)
    print("\n".join(report_logs(stats)))
    if args.scenarios:
        print("\n".join(report_scenarios(stats)))
    per_task: dict[str, TaskStats] = {}
    if args.build:
        lines, per_task, _ = report_build(args.build)
        print("\n".join(lines))
    missed = list(failures(stats, per_task))
    for line in missed:
        print(f"MISSED {line}", file=sys.stderr)
    return 1 if args.check and missed else 0


if __name__ == "__main__":
    sys.exit(main())
