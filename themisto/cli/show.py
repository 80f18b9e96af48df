"""``themisto show``: print both prompts of an example pair and its target, as a model sees them."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction) -> None:
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
    parser.add_argument("example_id", help="example id, <trajectory_id>/<step>")
    parser.add_argument("--data", default="hf_dataset", help="built dataset folder (default: %(default)s)")
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from themisto.building.lookup import find_pair

    pair = find_pair(args.data, args.config, args.example_id)
    rule = "=" * 72
    print(f"{rule}\n{pair.task} / {pair.example_id} (split {pair.split})\n{rule}")
    print(f"--- prompt without runtime ({pair.task}) ---\n{pair.plain['prompt']}")
    print(f"--- prompt with runtime ({pair.task}_runtime) ---\n{pair.runtime['prompt']}")
    print(f"--- runtime block (the only difference between the two prompts) ---\n{pair.runtime['runtime_text']}")
    print(f"--- target{' (an exception)' if pair.plain['target_is_error'] else ''} ---\n{pair.plain['target']}")
    return 0
