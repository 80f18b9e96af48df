"""``themisto record``: run notebooks or JuNE logs in real kernels and write trajectories."""

from __future__ import annotations

import argparse
from pathlib import Path

from themisto.cli.options import (
    ProgressBars,
    add_kernel_arguments,
    add_quiet_argument,
    check_ranges,
    error_line,
    parse_shard,
    record_options,
)
from themisto.recording.options import RECORDED, RESUME_DIVERGED, TRUST, RecordOptions

_DEFAULTS = RecordOptions()


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
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument(
        "--resume",
        action="store_true",
        help="continue existing trajectories after their last complete step, replaying earlier code, with the"
        " options they were recorded with (an option given here must agree with them)",
    )
    existing.add_argument("--overwrite", action="store_true", help="replace existing trajectories")
    parser.add_argument(
        "--resume-diverged",
        choices=RESUME_DIVERGED,
        default=_DEFAULTS.resume_diverged,
        help="when a resume's replay does not reproduce a recorded step's output or state: stop with an error"
        " naming the step, or continue and mark every new step with resume_diverged_at (default %(default)s)",
    )
    parser.add_argument(
        "--max-repr-chars",
        type=int,
        metavar="N",
        help=f"cut each variable's recorded repr to N characters (default {_DEFAULTS.max_repr_chars})",
    )
    parser.add_argument(
        "--repr-timeout",
        type=float,
        metavar="SECONDS",
        help=f"time limit for one variable's repr/len/size in the snapshot (default {_DEFAULTS.repr_timeout:g})",
    )
    parser.add_argument(
        "--max-variables",
        type=int,
        metavar="N",
        help=f"describe at most N variables per snapshot, by name; the rest are counted (default {_DEFAULTS.max_variables})",
    )
    parser.add_argument(
        "--max-output-chars",
        type=int,
        metavar="N",
        help=f"cut a step's plain-text output to N characters (default {_DEFAULTS.max_output_chars})",
    )
    parser.add_argument(
        "--max-raw-output-chars",
        type=int,
        metavar="N",
        help=f"budget for a step's raw nbformat outputs (default {_DEFAULTS.max_raw_output_chars})",
    )
    parser.add_argument(
        "--jobs",
        type=int,
        default=1,
        metavar="N",
        help=(
            "record N trajectories at once, each in its own kernel and file (default 1); with any N a"
            " trajectory that fails is reported and the others still finish, then the exit status is 2"
        ),
    )
    parser.add_argument(
        "--skip-pattern",
        metavar="REGEX",
        help="do not run cells whose code matches REGEX (default: JuNE's logging-plugin cell, so a replay never"
        f" calls the log's server: {_DEFAULTS.skip_pattern!r}); '' runs every cell",
    )
    parser.add_argument(
        "--order",
        dest="notebook_order",
        choices=("execution", "file"),
        help="the order a notebook's code cells run in: 'execution' = by their execution counts when these are"
        " positive integers (uncounted cells after the counted ones, in file order; a repeated count is a kernel"
        " restart), else top to bottom; 'file' = top to bottom (default execution; JuNE logs keep their own order)",
    )
    parser.add_argument(
        "--shard",
        default=None,
        metavar="I/N",
        help=(
            "record only shard I (0-based: 0 to N-1) of N, chosen by a stable hash of each trajectory id, so"
            " every trajectory falls in exactly one shard whatever the listing order; for a cluster array job"
            " pass e.g. --shard $SLURM_ARRAY_TASK_ID/N with --array=0-(N-1), or $JOB_COMPLETION_INDEX/N"
        ),
    )
    add_quiet_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Check the options, then record every source, reporting each trajectory on stderr."""
    from themisto.recording.record import record_source

    check_ranges(
        args,
        positive=("timeout", "repr_timeout"),
        at_least_one=(
            "max_repr_chars",
            "max_output_chars",
            "max_raw_output_chars",
            "max_cpu_seconds",
            "max_variables",
            "jobs",
        ),
    )
    shard = None if args.shard is None else parse_shard(args.shard)
    options, chosen = record_options(
        args, (*RECORDED, *TRUST), resume=args.resume, overwrite=args.overwrite, resume_diverged=args.resume_diverged
    )

    with ProgressBars(args.quiet) as bars:

        def report(path: Path, new_steps: int) -> None:
            bars.write(f"{path}: {new_steps} new step(s)")

        def report_failure(trajectory_id: str, error: Exception) -> None:
            bars.write(f"{trajectory_id}: failed: {error_line(error, args.option_flags)}")

        record_source(
            args.sources,
            args.output,
            options,
            progress=report,
            jobs=args.jobs,
            shard=shard,
            failed=report_failure,
            chosen=chosen,
            steps=bars,
        )
    return 0
