"""``themisto record``: run notebooks or JuNE logs in real kernels and write trajectories."""

from __future__ import annotations

import argparse
from pathlib import Path

from themisto.cli.options import (
    ProgressBars,
    add_kernel_arguments,
    add_quiet_argument,
    error_line,
    kernel_options,
)
from themisto.declaration import add_declared_arguments, declared_values
from themisto.kernel import ENVIRONMENT, TRUST
from themisto.recording.options import RECORDED, RUN_CONTROL, RecordOptions
from themisto.recording.sources import SourceTrajectory
from themisto.run_options import RunOptions

# What the options recorded beyond the environment decide: how much of each step is kept, which cells run.
_STEP_OPTIONS = tuple(name for name in RECORDED if name not in ENVIRONMENT)


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``record`` subcommand."""
    parser = subparsers.add_parser(
        "record",
        help="record notebook/JuNE-log trajectories with runtime snapshots",
        description=(
            "Execute each SOURCE (a .ipynb notebook, a JuNE event log .csv/.jsonl/.parquet, a folder of them,"
            " or a URL fsspec opens such as hf://datasets/ORG/NAME) in a fresh Jupyter kernel and write"
            " DIR/<trajectory_id>.jsonl, one step per cell, with"
            " DIR/<trajectory_id>.provenance.json: the versions, options and source file it was recorded with."
            " Trajectory ids: the notebook's file stem; for a log, <log stem>-<kernel_id prefix>."
        ),
    )
    parser.add_argument(
        "sources", nargs="+", metavar="SOURCE", help="notebook, JuNE log, folder of them, or URL (hf://...)"
    )
    parser.add_argument("-o", "--output", required=True, type=Path, metavar="DIR", help="folder for trajectories")
    add_kernel_arguments(
        parser, "kernel working directory (default: the folder of each source, so relative data paths work)"
    )
    add_declared_arguments(parser.add_mutually_exclusive_group(), RecordOptions, ("resume", "overwrite"))
    add_declared_arguments(parser, RecordOptions, ("resume_diverged",))
    add_declared_arguments(parser, RecordOptions, _STEP_OPTIONS)
    add_declared_arguments(
        parser,
        RunOptions,
        helps={
            "jobs": (
                "record N trajectories at once, each in its own kernel and file; with any N a trajectory that"
                " fails is reported and the others still finish, then the exit status is 2"
            ),
            "shard": (
                "record only shard I (0-based: 0 to N-1) of N, chosen by a stable hash of each trajectory id, so"
                " every trajectory falls in exactly one shard whatever the listing order; for a cluster array job"
                " pass e.g. --shard $SLURM_ARRAY_TASK_ID/N with --array=0-(N-1), or $JOB_COMPLETION_INDEX/N"
            ),
        },
    )
    add_quiet_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Record every source with the options given, reporting each trajectory on stderr."""
    from themisto.recording.record import record_source

    run_options = RunOptions(**declared_values(args, RunOptions))
    options, chosen = kernel_options(
        args, RecordOptions, (*RECORDED, *TRUST), **declared_values(args, RecordOptions, RUN_CONTROL)
    )

    with ProgressBars(args.quiet) as bars:

        def report(path: Path, new_steps: int) -> None:
            bars.write(f"{path}: {new_steps} new step(s)")

        def report_failure(trajectory_id: str, error: Exception) -> None:
            bars.write(f"{trajectory_id}: failed: {error_line(error, args.option_flags)}")

        def report_skipped(source: SourceTrajectory) -> None:
            bars.write(f"warning: {source.source}: no code cells to run, skipped")

        record_source(
            args.sources,
            args.output,
            options,
            progress=report,
            jobs=run_options.jobs,
            shard=run_options.shard,
            failed=report_failure,
            chosen=chosen,
            steps=bars,
            skipped=report_skipped,
        )
    return 0
