"""``themisto tasks-path``: print the lm-eval task folder, for ``lm_eval --include_path``."""

from __future__ import annotations

import argparse


def register(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """Add the ``tasks-path`` subcommand."""
    parser = subparsers.add_parser(
        "tasks-path",
        help="print the folder of the Themisto lm-eval tasks (for lm_eval --include_path)",
        description="Print the folder holding the Themisto lm-eval task YAMLs of this installation, e.g. "
        'lm_eval --include_path "$(themisto tasks-path)" --tasks themisto --model hf ...',
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from themisto.evaluation.data import tasks_path

    print(tasks_path())
    return 0
