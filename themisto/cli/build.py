"""``themisto build``: trajectories -> the Hugging Face dataset folder (Parquet + dataset card)."""

from __future__ import annotations

import argparse

from themisto.building.prompts import RUNTIME_FORMATS, RenderOptions
from themisto.building.tasks import PAPER_MIN_HISTORY, SAMPLES, TASK_SAMPLES, SelectionOptions
from themisto.cli.options import ProgressBars, add_quiet_argument

_SELECTION = SelectionOptions()
_RENDER = RenderOptions()


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "build",
        help="build the benchmark dataset from trajectories",
        description="Turn trajectory JSONL files into the Themisto tasks and write them as a Hugging Face "
        "dataset folder: <config>/<split>-<hash>.parquet plus a README.md dataset card that names them.",
    )
    parser.add_argument("trajectories", nargs="+", help="trajectory .jsonl files or folders holding them")
    parser.add_argument("-o", "--output", default="hf_dataset", help="dataset folder to write (default: %(default)s)")
    parser.add_argument(
        "--sample",
        choices=SAMPLES,
        default=_SELECTION.sample,
        help="test split: 'paper' = 200 per task stratified by target-length quartile (10/180/10), "
        "'all' = every eligible example (default: %(default)s)",
    )
    parser.add_argument(
        "--seed", type=int, default=_SELECTION.seed, help="seed of the paper sample (default: %(default)s)"
    )
    parser.add_argument(
        "--include-errors", action="store_true", help="keep steps whose output is an exception (excluded by default)"
    )
    parser.add_argument(
        "--include-images",
        action="store_true",
        help="keep steps whose output shows only images (plots) as output-prediction targets (excluded by default)",
    )
    parser.add_argument(
        "--include-empty",
        action="store_true",
        help="keep examples whose target is empty: cells without output, empty cells (excluded by default)",
    )
    parser.add_argument(
        "--min-history",
        type=int,
        default=None,  # SelectionOptions picks the sample's default
        metavar="N",
        help="draw into the test split only steps with at least N earlier executions in their trajectory; the full "
        f"split keeps every eligible example (default: {PAPER_MIN_HISTORY} with --sample paper, as the paper's "
        "selected cells had, 0 with --sample all)",
    )
    parser.add_argument(
        "--samples",
        choices=TASK_SAMPLES,
        default=_SELECTION.samples,
        help="'shared' = one test sample for both tasks, the output-prediction draw (the paper's reading), "
        "'separate' = each task drawn by its own target's length (default: %(default)s)",
    )
    parser.add_argument(
        "--keep-figure-text",
        dest="figure_text_as_image",
        action="store_false",
        help="keep outputs that are only a figure's text stand-in ('<Figure size 640x480 with 1 Axes>') as "
        "output-prediction targets (by default they count as image-only outputs)",
    )
    parser.add_argument(
        "--include-timing",
        action="store_true",
        help="keep output-prediction targets of cells that measure time and print a duration (excluded by default)",
    )
    parser.add_argument(
        "--keep-machine-text",
        dest="mask_machine_text",
        action="store_false",
        help="show outputs as recorded: by default kernel pids (ipykernel_<pid>), random temp names (tmp<random>) "
        "and memory addresses (at 0x?) are masked in the history and the targets",
    )
    parser.add_argument(
        "--stable-only",
        action="store_true",
        help="keep only steps whose output was reproducible across re-executions, for both tasks "
        "(needs the annotations of `themisto stability`)",
    )
    parser.add_argument(
        "--quantile",
        type=float,
        default=_SELECTION.quantile,
        help="drop steps whose code or output is longer than this length quantile (default: %(default)s)",
    )
    parser.add_argument(
        "--max-context-chars",
        type=int,
        default=_SELECTION.max_context_chars,
        help="history budget: characters of code and output, oldest whole cells cut first; 0 keeps the whole "
        "history, as the paper does (default: %(default)s)",
    )
    parser.add_argument(
        "--runtime-format",
        choices=RUNTIME_FORMATS,
        default=_RENDER.runtime_format,
        help="how the runtime block lists the variables (default: %(default)s)",
    )
    parser.add_argument(
        "--max-runtime-chars",
        type=int,
        default=_RENDER.max_runtime_chars,
        help="budget of the whole runtime block (default: %(default)s)",
    )
    parser.add_argument(
        "--prompt-repr-chars",
        type=int,
        default=_RENDER.prompt_repr_chars,
        help="each variable's repr is cut to this many characters in the prompt (default: %(default)s); "
        "record's --max-repr-chars is the cap of the recording itself",
    )
    parser.add_argument(
        "--no-descriptions",
        dest="descriptions",
        action="store_false",
        help="leave the variables' structured descriptions (columns and dtypes, index, ranges) out of the runtime "
        "block, so it shows type, size, shape/len and repr alone: the block before issue 20, for ablations",
    )
    parser.add_argument("--license", default="apache-2.0", help="license id written to the card (default: %(default)s)")
    add_quiet_argument(parser)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import datasets

    from themisto.building.parquet import build_dataset
    from themisto.trajectory import trajectory_files

    datasets.disable_progress_bars()
    datasets.logging.set_verbosity_error()
    selection = SelectionOptions(
        sample=args.sample,
        seed=args.seed,
        include_errors=args.include_errors,
        include_images=args.include_images,
        quantile=args.quantile,
        stable_only=args.stable_only,
        max_context_chars=args.max_context_chars,
        include_empty=args.include_empty,
        min_history=args.min_history,
        samples=args.samples,
        figure_text_as_image=args.figure_text_as_image,
        include_timing=args.include_timing,
        mask_machine_text=args.mask_machine_text,
    )
    render = RenderOptions(
        runtime_format=args.runtime_format,
        max_runtime_chars=args.max_runtime_chars,
        prompt_repr_chars=args.prompt_repr_chars,
        descriptions=args.descriptions,
    )
    with ProgressBars(args.quiet, units={"select": "trajectory"}) as bars:  # select reads whole trajectories
        summary = build_dataset(
            trajectory_files(args.trajectories), args.output, selection, render, args.license, progress=bars
        )
    print(f"built {args.output} from {summary.selection.trajectories} trajectories ({summary.selection.steps} steps)")
    if summary.selection.skipped:
        print(f"  skipped {len(summary.selection.skipped)} invalid trajectory file(s) (see the warnings above)")
    for config, splits in summary.rows.items():
        print(f"  {config}: " + ", ".join(f"{split} {count}" for split, count in splits.items()))
    return 0
