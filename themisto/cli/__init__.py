"""The ``themisto`` command line: one module per subcommand, errors as one line.

Each subcommand module exposes ``register(subparsers)``, which adds its parser
and sets ``func`` to a callable taking the parsed namespace and returning an
exit code. Modules are imported here so ``themisto --help`` lists them all;
heavy libraries are imported inside the ``func`` bodies to keep start-up fast
(``tests/package/test_cli_startup.py`` holds the parser to that).

- :mod:`~themisto.cli.record`, :mod:`~themisto.cli.stability`: recording and re-execution
- :mod:`~themisto.cli.build`, :mod:`~themisto.cli.show`, :mod:`~themisto.cli.publish`,
  :mod:`~themisto.cli.import_zenodo`: the dataset, an example of it, the Hub, the published logs
- :mod:`~themisto.cli.eval`, :mod:`~themisto.cli.exec_score`, :mod:`~themisto.cli.tasks_path`: scoring models
- :mod:`~themisto.cli.report`, :mod:`~themisto.cli.compact`: the report of one or more runs, their logs made small
- :mod:`~themisto.cli.options`: what the subcommands share: flags of declared options, sizes, shards, progress
  bars, errors spelled with flags
"""

from __future__ import annotations

import argparse
import importlib
import os
import signal
import sys
from collections.abc import Sequence

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
    "compact",
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
    """Run one subcommand; a ThemistoError becomes one line on stderr and exit code 2.

    Run as the command-line process (``argv`` None), a subcommand that starts
    kernels first re-executes itself without credentials in its environment,
    and a second Ctrl-C ends it at once.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    try:
        if argv is None and getattr(args, "starts_kernels", False):
            _reexec_without_credentials(getattr(args, "pass_env", None) or ())
            _second_interrupt_quits(args.command)
        if argv is None and getattr(args, "stops_on_signals", False):
            _signals_stop(args.command)
        _warn_of_trust(args)
        return int(args.func(args) or 0)
    except ThemistoError as exc:
        # One line, whatever a wrapped library put into the message; options named by their flags.
        print(f"themisto {args.command}: error: {error_line(exc, args.option_flags)}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except Signalled as exc:
        print(f"themisto {args.command}: stopped by {signal.Signals(exc.signum).name}", file=sys.stderr)
        return 128 + exc.signum
    except KeyboardInterrupt:
        print(f"themisto {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())


def _reexec_without_credentials(keep: Sequence[str]) -> None:
    """Become this same command (same process id) without credentials in its environment, but those in ``keep``.

    A kernel can read the environment of the processes above it (``/proc/<pid>/environ``) where no sandbox
    stops it; after this, the command that starts kernels holds no credential to read but those the user
    passes to the kernels anyway (``--pass-env``).
    """
    from themisto.exceptions import KernelError
    from themisto.kernel import has_credentials, kernel_environment

    if not has_credentials(os.environ, keep):
        return
    sys.stdout.flush()
    sys.stderr.flush()
    try:
        os.execve(sys.executable, sys.orig_argv, kernel_environment(os.environ, keep))
    except OSError as exc:
        raise KernelError(f"cannot run without credentials in the environment: {exc.strerror or exc}") from None


def _warn_of_trust(args: argparse.Namespace) -> None:
    """One line on stderr where the caller lets the kernels out of the sandbox, or onto the network."""
    if getattr(args, "sandbox", True) is False:
        what = "--no-sandbox: the kernels run unconfined, with every file, process and network your user can reach"
    elif getattr(args, "allow_network", False):
        what = "--allow-network: the kernels may use the network, of any protocol"
    else:
        return
    print(f"themisto {args.command}: warning: {what}", file=sys.stderr)


class Signalled(KeyboardInterrupt):
    """SIGTERM or SIGXCPU, stopping the command as Ctrl-C does (what it did so far is written)."""

    def __init__(self, signum: int) -> None:
        super().__init__(signum)
        self.signum = signum


def _signals_stop(command: str) -> None:
    """SIGTERM and SIGXCPU (a CPU limit's warning) stop the command as Ctrl-C does (by default either ends the
    process where it stands); a second SIGTERM ends it at once, a later SIGXCPU is ignored (it repeats each
    second of CPU while the command writes; the hard limit's SIGKILL ends it if it comes)."""

    def again(signum: int, frame: object) -> None:
        print(f"themisto {command}: SIGTERM again, stopping at once", file=sys.stderr, flush=True)
        os._exit(128 + signum)

    def first(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, again)
        signal.signal(signal.SIGXCPU, signal.SIG_IGN)
        raise Signalled(signum)

    for number in (signal.SIGTERM, signal.SIGXCPU):
        signal.signal(number, first)


def _second_interrupt_quits(command: str) -> None:
    """The first Ctrl-C stops the command cleanly (KeyboardInterrupt); a second one ends the process at once."""

    def second(signum: int, frame: object) -> None:
        print(f"themisto {command}: interrupted again, stopping at once", file=sys.stderr, flush=True)
        os._exit(130)

    def first(signum: int, frame: object) -> None:
        signal.signal(signal.SIGINT, second)
        raise KeyboardInterrupt

    signal.signal(signal.SIGINT, first)
