"""The ``themisto`` command line: one module per subcommand, errors as one line.

Each subcommand module exposes ``register(subparsers)``, which adds its parser
and sets ``func`` to a callable taking the parsed namespace and returning an
exit code. Modules are imported here so ``themisto --help`` lists them all;
heavy libraries are imported inside the ``func`` bodies to keep start-up fast
(``tests/test_cli_startup.py`` holds the parser to that).
"""

from __future__ import annotations

import argparse
import importlib
import sys

from themisto import __version__
from themisto.cli.options import error_line, option_flags
from themisto.exceptions import ThemistoError

# The order in which subcommands appear in ``themisto --help``.
SUBCOMMANDS = [
    "record",
    "build",
    "show",
    "publish",
    "import_zenodo",
    "eval",
    "exec_score",
    "report",
    "stability",
    "tasks_path",
]

EXIT_BAD_INPUT = 2


def build_parser() -> argparse.ArgumentParser:
    """The top-level parser with every subcommand registered."""
    parser = argparse.ArgumentParser(
        prog="themisto", description="Record Jupyter trajectories and benchmark models on them."
    )
    parser.add_argument("--version", action="version", version=f"themisto {__version__}")
    subparsers = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in SUBCOMMANDS:
        importlib.import_module(f"themisto.cli.{name}").register(subparsers)
    for subparser in subparsers.choices.values():
        # how each subcommand spells the library's option names in its errors
        subparser.set_defaults(option_flags=option_flags(subparser))
    return parser


def main(argv: list[str] | None = None) -> int:
    """Run one subcommand; a ThemistoError becomes one line on stderr and exit code 2."""
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        return int(args.func(args) or 0)
    except ThemistoError as exc:
        # One line, whatever a wrapped library put into the message; options named by their flags.
        print(f"themisto {args.command}: error: {error_line(exc, args.option_flags)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print(f"themisto {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
