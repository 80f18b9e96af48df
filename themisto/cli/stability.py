"""``themisto stability``: re-execute trajectories K times; mark stable steps, name causes, measure fidelity."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from themisto.cli.options import ProgressBars, add_kernel_arguments, add_quiet_argument, kernel_options
from themisto.declaration import add_declared_arguments
from themisto.kernel import ENVIRONMENT
from themisto.recording.options import RecordOptions
from themisto.vocabulary import INSTABILITY_CAUSES


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``stability`` subcommand."""
    parser = subparsers.add_parser(
        "stability",
        help="re-execute trajectories to find reproducible steps (determinism ceiling) and replay fidelity",
        description=(
            "Replay each TRAJECTORY K times, each time in a fresh kernel (restarted where a step is marked"
            " restarted), and mark each step stable when its output is identical in every run and in the"
            " recording, stable_norm when identical after exact_match_norm's normalisation, and name the"
            f" likely causes of instability ({', '.join(INSTABILITY_CAUSES)}). Prints per trajectory the share of stable"
            " steps and, for steps that carry the original log's output, the share the recording reproduces"
            " and the first divergence."
            " The determinism ceiling is the share of stable steps over all trajectories."
            " Each trajectory is replayed with the options and in the folder it was recorded with, as its"
            " provenance file says; the options below change the replay environment, or stand in for a"
            " trajectory without provenance."
        ),
    )
    parser.add_argument("trajectories", nargs="+", metavar="TRAJECTORY", help="trajectory .jsonl file or folder")
    parser.add_argument(
        "--runs",
        type=int,
        default=2,
        metavar="K",
        help="re-executions per trajectory, each in a fresh kernel, compared with the recording (default 2)",
    )
    parser.add_argument(
        "-o",
        "--output",
        type=Path,
        metavar="DIR",
        help=(
            "write annotated copies of the trajectories (same file names, replacing files of those names)"
            " and stability.json here; without it only the table is printed"
        ),
    )
    add_kernel_arguments(
        parser,
        "kernel working directory (default: the one each trajectory was recorded in, else the current one)",
    )
    # a replay keeps the recorded cap (it decides what a step holds), so the flag only stands in for a missing one
    narrower = (
        "cut each re-executed output to N characters; only for trajectories without provenance, as a recorded"
        " trajectory keeps its recorded cap"
    )
    add_declared_arguments(parser, RecordOptions, ("max_output_chars",), {"max_output_chars": narrower})
    add_quiet_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Re-execute, print the table, and write the annotated trajectories and summary."""
    from themisto.recording.stability import SUMMARY_FILE, check_stability
    from themisto.reporting.stability_table import render_table

    options, chosen = kernel_options(args, RecordOptions, (*ENVIRONMENT, "max_output_chars"))

    with ProgressBars(args.quiet) as bars:
        report = check_stability(args.trajectories, args.runs, args.output, options, progress=bars, chosen=chosen)
    print(render_table(report))
    if args.output is not None:
        print(f"annotated trajectories and {SUMMARY_FILE} written to {args.output}", file=sys.stderr)
    return 0
