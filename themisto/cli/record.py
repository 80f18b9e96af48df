"""``themisto record``: run notebooks or JuNE logs in real kernels and write trajectories."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def register(subparsers: argparse._SubParsersAction) -> None:
    from themisto.recorder import RecordOptions

    defaults = RecordOptions()
    parser = subparsers.add_parser(
        "record",
        help="record notebook/JuNE-log trajectories with runtime snapshots",
        description=(
            "Execute each SOURCE (a .ipynb notebook, a JuNE event log .csv/.jsonl/.parquet, or a folder of"
            " them) in a fresh Jupyter kernel and write DIR/<trajectory_id>.jsonl, one step per cell."
            " Trajectory ids: the notebook's file stem; for a log, <log stem>-<kernel_id prefix>."
        ),
    )
    parser.add_argument("sources", nargs="+", metavar="SOURCE", help="notebook, JuNE log, or folder of them")
    parser.add_argument("-o", "--output", required=True, type=Path, metavar="DIR", help="folder for trajectories")
    parser.add_argument(
        "--timeout", type=float, default=defaults.timeout, metavar="SECONDS",
        help=f"interrupt a cell after this long and record a timeout step (default {defaults.timeout:g})",
    )
    parser.add_argument(
        "--workdir", type=Path, default=None, metavar="DIR",
        help="kernel working directory (default: the folder of each source, so relative data paths work)",
    )
    parser.add_argument(
        "--kernel", default=defaults.kernel_name, metavar="NAME",
        help=f"Jupyter kernel to run the cells in (default {defaults.kernel_name})",
    )
    existing = parser.add_mutually_exclusive_group()
    existing.add_argument(
        "--resume", action="store_true",
        help="continue existing trajectories after their last complete step, replaying earlier code",
    )
    existing.add_argument("--overwrite", action="store_true", help="replace existing trajectories")
    parser.add_argument(
        "--max-repr-chars", type=int, default=defaults.max_repr_chars, metavar="N",
        help=f"cut each variable's repr to N characters (default {defaults.max_repr_chars})",
    )
    parser.add_argument(
        "--repr-timeout", type=float, default=defaults.repr_timeout, metavar="SECONDS",
        help=f"time limit for one variable's repr/len/size in the snapshot (default {defaults.repr_timeout:g})",
    )
    parser.add_argument(
        "--max-output-chars", type=int, default=defaults.max_output_chars, metavar="N",
        help=f"cut a step's plain-text output to N characters (default {defaults.max_output_chars})",
    )
    parser.add_argument(
        "--max-raw-output-chars", type=int, default=defaults.max_raw_output_chars, metavar="N",
        help=f"budget for a step's raw nbformat outputs (default {defaults.max_raw_output_chars})",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from themisto.exceptions import InputError
    from themisto.recorder import RecordOptions, record_source

    for name in ("timeout", "repr_timeout"):
        if getattr(args, name) <= 0:
            raise InputError(f"--{name.replace('_', '-')} must be positive")
    for name in ("max_repr_chars", "max_output_chars", "max_raw_output_chars"):
        if getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1")
    options = RecordOptions(
        timeout=args.timeout,
        workdir=args.workdir,
        kernel_name=args.kernel,
        max_repr_chars=args.max_repr_chars,
        repr_timeout=args.repr_timeout,
        max_output_chars=args.max_output_chars,
        max_raw_output_chars=args.max_raw_output_chars,
        resume=args.resume,
        overwrite=args.overwrite,
    )

    def report(path: Path, new_steps: int) -> None:
        print(f"{path}: {new_steps} new step(s)", file=sys.stderr)

    record_source(args.sources, args.output, options, progress=report)
    return 0
