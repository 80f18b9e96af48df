"""``themisto exec-score``: run next-cell predictions in the recorded kernel state; write exec samples."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from themisto.cli.options import (
    ProgressBars,
    add_data_argument,
    add_kernel_arguments,
    add_quiet_argument,
    kernel_options,
)
from themisto.declaration import add_declared_arguments, declared_values
from themisto.exceptions import ThemistoError
from themisto.kernel import ENVIRONMENT, KernelOptions
from themisto.run_options import RunOptions
from themisto.vocabulary import EXEC_METRICS, REFERENCE_MODEL

if TYPE_CHECKING:
    from themisto.evaluation.exec import ExecReport, TrajectoryScores


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``exec-score`` subcommand."""
    parser = subparsers.add_parser(
        "exec-score",
        help="execute next-cell predictions in the recorded kernel state (exec_ok, exec_match, state_match)",
        description=(
            "For every next-cell prediction in the lm-eval sample logs under RUN_DIR"
            " (samples_themisto_next_cell*_<timestamp>.jsonl, the newest of each task per folder), run the"
            " predicted cell in the kernel state before its step, in a forked child of a kernel that replays"
            " the trajectory once, and write exec_samples_<task>.jsonl next to the log: exec_ok (ran without"
            " an exception), exec_match (output equals the developer's cell's, normalised), state_match (the"
            " namespace after it equals the developer's), error, diverged (the replay of that step did not"
            " reproduce its recorded output: excluded) and tampered (the prediction changed the replay itself:"
            f" scored 0). The developer's own cells are scored as {REFERENCE_MODEL}: its exec_match is the ceiling."
            " Each prediction runs in a Landlock domain of its own (never with network, whatever --allow-network"
            " gives the kernel); a trajectory file replays with the options and folder its provenance names."
        ),
    )
    parser.add_argument(
        "run_dirs", nargs="+", metavar="RUN_DIR", help="folder with lm-eval sample logs (searched recursively)"
    )
    add_data_argument(parser, "built dataset whose trajectories config is replayed, a folder or Hub id")
    parser.add_argument(
        "--trajectories",
        nargs="+",
        default=[],
        metavar="PATH",
        help="trajectory .jsonl files or folders to replay (default: the build's trajectories config)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        default=None,
        metavar="OUT",
        help=(
            "write exec samples under OUT, in the same folders relative to each RUN_DIR (default: next to each"
            f" sample log); the reference's go to OUT/{REFERENCE_MODEL} (default: the first RUN_DIR's)"
        ),
    )
    add_kernel_arguments(
        parser,
        "folder the replay starts from, e.g. the data files the notebooks read: each trajectory replays in a"
        " private copy of it and each prediction in a copy of that (default: an empty folder)",
    )
    add_declared_arguments(
        parser,
        RunOptions,
        helps={
            "jobs": "replay N trajectories at once, each in its own kernel",
            "shard": (
                "score only the trajectories of shard I (0-based) of N, chosen as themisto record chooses them;"
                " files are then named exec_samples_<task>.<I>-of-<N>.jsonl (concatenate the N parts)"
            ),
        },
    )
    add_quiet_argument(parser)
    # SIGTERM and SIGXCPU stop it as Ctrl-C does: the steps scored are written (themisto.cli.main)
    parser.set_defaults(func=run, stops_on_signals=True)


def run(args: argparse.Namespace) -> int:
    """Score with the options given, print one summary line per trajectory and a table per model and task.

    Trajectories that failed are named after the table, one line each, and make the exit status 2 (what they
    scored before the failure is in the files).
    """
    from themisto.evaluation.exec import exec_score

    options, chosen = kernel_options(args, KernelOptions, ENVIRONMENT)
    run_options = RunOptions(**declared_values(args, RunOptions))
    with ProgressBars(args.quiet) as bars:

        def report(scores: TrajectoryScores) -> None:
            diverged = f", {len(scores.diverged)} step(s) diverged" if scores.diverged else ""
            restored = f", restored {scores.restores} time(s) after a prediction reached it" if scores.restores else ""
            failed = f"; failed at step {scores.failed_at}: {scores.failure}" if scores.failure is not None else ""
            bars.write(
                f"{scores.trajectory_id}: {scores.executions} prediction(s) forked over"
                f" {scores.steps_replayed} replayed steps{diverged}{restored}{failed}"
            )

        result = exec_score(
            args.run_dirs,
            data=args.data,
            trajectories=args.trajectories,
            output=args.output,
            options=options,
            chosen=chosen,
            jobs=run_options.jobs,
            shard=run_options.shard,
            progress=bars,
            finished=report,
        )
    print(summary_table(result))
    failures = result.failures
    if failures:
        for scores in failures:
            print(
                f"{scores.trajectory_id}: failed at step {scores.failed_at}"
                f" ({result.left_out.get(scores.trajectory_id, 0)} sample line(s) left out): {scores.failure}",
                file=sys.stderr,
            )
        first = failures[0]
        raise ThemistoError(
            f"{len(failures)} of {len(result.trajectories)} trajectories failed part-way and"
            f" {sum(result.left_out.values())} sample line(s) were left out of the exec samples (listed above);"
            f" the first: {first.trajectory_id} at step {first.failed_at}: {first.failure}"
        )
    return 0


def summary_table(result: ExecReport) -> str:
    """One Markdown row per model and task: samples, excluded and tampered ones, each exec metric's mean and 95% CI."""
    from themisto.evaluation.exec import exec_metric_values
    from themisto.reporting.stats import bootstrap_ci

    lines = [
        "| model | task | samples | excluded | tampered | " + " | ".join(EXEC_METRICS) + " |",
        "|---|---|---:|---:|---:|" + "---:|" * len(EXEC_METRICS),
    ]
    for file in sorted(result.files, key=lambda f: (f.model == REFERENCE_MODEL, f.model, f.task)):
        cells = []
        for metric in EXEC_METRICS:
            values = exec_metric_values(file.records, metric)
            if not values:
                cells.append("-")
                continue
            interval = bootstrap_ci(values)
            cells.append(f"{interval.estimate:.3f} [{interval.low:.3f}, {interval.high:.3f}]")
        excluded = sum(record["exec_ok"] is None for record in file.records)
        tampered = sum(record["tampered"] for record in file.records)
        lines.append(
            f"| {file.model} | {file.task} | {len(file.records)} | {excluded} | {tampered} | "
            + " | ".join(cells)
            + " |"
        )
    return "\n".join(lines)
