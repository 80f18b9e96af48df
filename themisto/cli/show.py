"""``themisto show``: print both prompts of an example pair and its target, as a model sees them."""

from __future__ import annotations

import argparse
import sys

from themisto.cli.options import add_data_argument
from themisto.vocabulary import SPLITS


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    parser = subparsers.add_parser(
        "show",
        help="print both prompts (with and without runtime) and the target of an example",
        description="Print the prompt without runtime, the prompt with runtime, the runtime block that "
        "tells them apart, and the target of one example of a built dataset.",
    )
    parser.add_argument(
        "config",
        help="output_prediction or next_cell_prediction (a *_runtime name shows the same pair)",
    )
    parser.add_argument(
        "example_id",
        nargs="?",
        help="example id, <trajectory_id>/<step> (without it: list the ids of --split with their step and output kind)",
    )
    parser.add_argument("--split", default="test", choices=SPLITS, help="the split whose ids are listed (default test)")
    add_data_argument(parser, "built dataset folder")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from themisto.building.lookup import find_pair, list_examples
    from themisto.cli.options import describe_data
    from themisto.evaluation.data import find_data

    data = find_data(args.data, local=True)
    if args.example_id is None:
        examples = list_examples(data.location, args.config, args.split)
        print(
            f"themisto show: {len(examples)} examples of {args.config} ({args.split}) in {describe_data(data)};"
            f" `themisto show {args.config} ID` prints one",
            file=sys.stderr,
        )
        width = max((len(row["example_id"]) for row in examples), default=10)
        print(f"{'example_id':<{width}}  {'step_kind':<15}  output_kind")
        for row in examples:
            print(f"{row['example_id']:<{width}}  {row['step_kind']:<15}  {row['output_kind']}")
        return 0
    pair = find_pair(data.location, args.config, args.example_id)
    print(f"themisto show: {describe_data(data)}", file=sys.stderr)
    rule = "=" * 72
    print(f"{rule}\n{pair.task} / {pair.example_id} (split {pair.split})\n{rule}")
    print(f"--- prompt without runtime ({pair.task}) ---\n{pair.plain['prompt']}")
    print(f"--- prompt with runtime ({pair.task}_runtime) ---\n{pair.runtime['prompt']}")
    print(f"--- runtime block (the only difference between the two prompts) ---\n{pair.runtime['runtime_text']}")
    print(f"--- target{' (an exception)' if pair.plain['target_is_error'] else ''} ---\n{pair.plain['target']}")
    return 0
