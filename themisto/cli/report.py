"""``themisto report``: scores with bootstrap CIs and runtime-vs-none tests from lm-eval logs."""

from __future__ import annotations

import argparse
from pathlib import Path

from themisto.declaration import add_declared_arguments, declared_values
from themisto.exceptions import InputError
from themisto.reporting.resampling import Resampling


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``report`` subcommand."""
    parser = subparsers.add_parser(
        "report",
        help="summarise lm-eval sample logs: paired bits per byte first, then CIs and paired tests of every metric",
        description=(
            "Read the per-sample logs lm-eval writes with --log_samples --output_path RUN_DIR "
            "(and the exec_samples_<task>.jsonl of themisto exec-score beside them) and print a "
            "Markdown report. It leads with the likelihood tasks (themisto_bpb): per task, bits per "
            "byte of the target under the runtime prompt minus under the plain and under the placebo "
            "prompt, paired by example id, with 95% CIs resampling examples and whole trajectories, "
            "the trajectory sign-flip p, the minimum detectable effect with the design effect of the "
            "trajectories, and the same within the runtime_only stratum. Then each metric's mean with "
            "its CIs per model and task; for the generative tasks the runtime − plain and runtime − "
            "placebo differences with sign-flip p-values, McNemar's test for 0/1 metrics and the "
            "minimum detectable effect; every metric by output kind and step kind, with and without "
            "duplicate examples, and the determinism ceiling."
        ),
    )
    parser.add_argument(
        "run_dirs",
        nargs="+",
        type=Path,
        metavar="RUN_DIR",
        help="an lm-eval --output_path folder (searched recursively for samples_*.jsonl)",
    )
    parser.add_argument("-o", "--output", type=Path, help="also write the Markdown report to this file")
    parser.add_argument(
        "--plot",
        type=Path,
        help=(
            "write the plot, as PNG, PDF or SVG by the file's suffix: the paired differences (bits per byte, exact_match_norm) with 95%% CIs and p-values, "
            "then each metric's means (strict exact_match included) with the floors and the ceiling as lines"
        ),
    )
    add_declared_arguments(parser, Resampling)
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Build the report, print it, and write the requested files."""
    from themisto.filesystem import prepare_output_file
    from themisto.reporting.analysis import build_report
    from themisto.reporting.markdown import render_markdown
    from themisto.reporting.plot import check_plot_path, plot_report

    for path in (args.output, args.plot):
        if path is not None:
            prepare_output_file(path)  # an unwritable file fails now, not after the bootstrap
    if args.plot is not None:
        check_plot_path(args.plot)
    report = build_report(args.run_dirs, **declared_values(args, Resampling))
    markdown = render_markdown(report)
    print(markdown, end="")
    if args.output is not None:
        try:
            args.output.parent.mkdir(parents=True, exist_ok=True)
            args.output.write_text(markdown, encoding="utf-8")
        except OSError as exc:
            raise InputError(f"cannot write {args.output}: {exc}") from None
    if args.plot is not None:
        try:
            args.plot.parent.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise InputError(f"cannot write {args.plot}: {exc}") from None
        plot_report(report, args.plot)
    return 0
