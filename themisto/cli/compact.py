"""``themisto compact``: copy lm-eval run folders keeping only what the report reads, to commit or share."""

from __future__ import annotations

import argparse
from pathlib import Path


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``compact`` subcommand."""
    parser = subparsers.add_parser(
        "compact",
        help="copy lm-eval run folders with only what themisto report reads (per-example metrics and doc columns)",
        description=(
            "Copy the sample logs of lm-eval run folders keeping, per line, the example id, the doc columns "
            "the report reads, the per-sample metrics and lm-eval's hashes (no prompts or responses), the "
            "results files without their embedded samples, and the exec-score files unchanged. "
            "themisto report gives the same report on the copy as on the original, at a few per cent of the size."
        ),
    )
    parser.add_argument("run_dirs", nargs="+", type=Path, metavar="RUN_DIR", help="an lm-eval --output_path folder")
    parser.add_argument("-o", "--output", type=Path, required=True, help="the folder to write the copy into")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    """Write the compact copy and say how many sample logs it holds."""
    from themisto.reporting.compact import compact_runs

    count = compact_runs(args.run_dirs, args.output)
    print(f"themisto compact: {count} sample logs written beneath {args.output}")
    return 0
