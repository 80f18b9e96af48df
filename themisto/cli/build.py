"""``themisto build``: trajectories -> the Hugging Face dataset folder (Parquet + dataset card)."""

from __future__ import annotations

import argparse

from themisto.building import BUILD_JOBS, default_build_jobs
from themisto.building.prompts import RenderOptions
from themisto.building.selection import SelectionOptions
from themisto.cli.options import ProgressBars, add_quiet_argument
from themisto.declaration import add_declared_arguments, declared_values


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "build",
        help="build the benchmark dataset from trajectories",
        description="Turn trajectory JSONL files into the Themisto tasks and write them as a Hugging Face "
        "dataset folder: <config>/<split>-<hash>.parquet plus a README.md dataset card that names them.",
    )
    parser.add_argument("trajectories", nargs="+", help="trajectory .jsonl files or folders holding them")
    parser.add_argument("-o", "--output", default="hf_dataset", help="dataset folder to write (default: %(default)s)")
    # the selection and rendering options, each flag generated from the option's declaration
    add_declared_arguments(parser, SelectionOptions)
    add_declared_arguments(parser, RenderOptions)
    parser.add_argument("--license", default="apache-2.0", help="license id written to the card (default: %(default)s)")
    parser.add_argument(
        "--jobs",
        type=int,
        choices=BUILD_JOBS,
        default=default_build_jobs(),
        metavar="N",
        help="processes the build runs in: 1, or 2, which split the selection's reading of the files and then"
        " write the placebo configs beside the others (the same bytes); default: %(default)s, 2 where this"
        " process may use two cores or more",
    )
    add_quiet_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import datasets

    from themisto.building.parquet import build_dataset
    from themisto.trajectory import trajectory_files

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    selection = SelectionOptions(**declared_values(args, SelectionOptions))
    render = RenderOptions(**declared_values(args, RenderOptions))
    with ProgressBars(args.quiet, units={"select": "trajectory"}) as bars:  # select reads whole trajectories
        summary = build_dataset(
            trajectory_files(args.trajectories), args.output, selection, render, args.license, bars, args.jobs
        )
    print(f"built {args.output} from {summary.selection.trajectories} trajectories ({summary.selection.steps} steps)")
    if summary.selection.skipped:
        print(f"  skipped {len(summary.selection.skipped)} invalid trajectory file(s) (see the warnings above)")
    for config, splits in summary.rows.items():
        print(f"  {config}: " + ", ".join(f"{split} {count}" for split, count in splits.items()))
    return 0
