"""Option helpers shared by the subcommands: kernel options, data, progress, errors.

Every flag's destination is the keyword name of the library option it sets
(``--kernel`` sets ``kernel_name``), so a library :class:`OptionError` that
names an option by keyword is shown with the flag that sets it
(:func:`option_flags`, :func:`error_line`).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Collection, Mapping
from typing import TYPE_CHECKING, Any, TypeVar

from themisto.declaration import add_declared_arguments, declared_values
from themisto.exceptions import CallerSpelledError, InputError, one_line
from themisto.kernel import ENVIRONMENT, KernelOptions
from themisto.vocabulary import DATA_ENV

if TYPE_CHECKING:
    from themisto.evaluation.data import DataLocation

Options = TypeVar("Options", bound=KernelOptions)


def add_kernel_arguments(parser: argparse.ArgumentParser, workdir_help: str) -> None:
    """The flags of the environment options, shared by the commands that start kernels, from their declarations.

    ``workdir_help`` says what ``--workdir`` is to this command, and what it is when not given.
    """
    add_declared_arguments(parser, KernelOptions, ENVIRONMENT, {"workdir": workdir_help})
    # this command starts kernels: it runs without credentials in its environment (see themisto.cli.main)
    parser.set_defaults(starts_kernels=True)


def kernel_options(
    args: argparse.Namespace, kind: type[Options], names: Collection[str], **run_control: Any
) -> tuple[Options, frozenset[str]]:
    """The options of class ``kind`` (:class:`~themisto.kernel.KernelOptions` or one that extends it) from
    the options ``names`` the user gave (defaults for the others), and which were given.

    A variable ``--pass-env`` names must be in this environment: it is this process's to pass on.
    """
    given = declared_values(args, kind, names)
    unset = [name for name in given.get("pass_env", ()) if name not in os.environ]
    if unset:
        raise InputError(f"--pass-env {unset[0]}: no such variable in this environment")
    return kind(**given, **run_control), frozenset(given)


def option_flags(parser: argparse.ArgumentParser) -> dict[str, str]:
    """Each option's destination (its library keyword name) and the longest flag that sets it."""
    return {
        action.dest: max(action.option_strings, key=len)
        for action in parser._actions
        if action.option_strings and action.help is not argparse.SUPPRESS
    }


def error_line(exc: BaseException, flags: Mapping[str, str]) -> str:
    """An error as one line; the options a :class:`CallerSpelledError` names are spelled as these flags."""
    if not isinstance(exc, CallerSpelledError):
        return one_line(exc)

    def spell(name: str, value: str | None) -> str:
        flag = flags.get(name, "--" + name.replace("_", "-"))
        switched_off = value == "False" and flag.startswith("--no-")  # a store_false flag: --no-sandbox
        return flag if value in (None, "True") or switched_off else f"{flag} {value}"

    return one_line(exc.render(spell))


def add_data_argument(parser: argparse.ArgumentParser, what: str = "built dataset folder or Hub id") -> None:
    """``--data``: the build a command reads, found by the one data rule of :mod:`themisto.evaluation.data`."""
    parser.add_argument(
        "--data",
        default=None,
        metavar="DIR",
        help=f"{what} (default: ${DATA_ENV}, else ./hf_dataset if present, else the build bundled with the package)",
    )


def describe_data(data: DataLocation) -> str:
    """Which build a command reads and which rule chose it, for its status line on stderr."""
    from themisto.evaluation.data import GIVEN

    return f"{data.location} (from {'--data' if data.source == GIVEN else data.source})"


class ProgressBars:
    """tqdm bars on stderr, one per kind of work; silent with ``quiet`` or when stderr is not a terminal.

    An instance is the ``progress(what, done, total)`` hook the library's long functions call
    (see :mod:`themisto.progress`); use it as a context manager so the bars are closed.
    """

    def __init__(self, quiet: bool = False, unit: str = "step", units: Mapping[str, str] | None = None) -> None:
        self.enabled = not quiet and sys.stderr.isatty()
        self.unit = unit
        self.units = dict(units or {})  # the unit of a bar that counts something else than ``unit``
        self._bars: dict[str, Any] = {}

    def __call__(self, what: str, done: int, total: int) -> None:
        if not self.enabled:
            return
        from tqdm import tqdm

        bar = self._bars.get(what)
        if bar is None:
            unit = self.units.get(what, self.unit)
            bar = self._bars[what] = tqdm(desc=what, total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)
        bar.total = total
        bar.update(done - bar.n)  # through update(), so tqdm's rate and ETA follow the work

    def write(self, message: str) -> None:
        """Print a line on stderr without tearing a bar."""
        if self._bars:
            from tqdm import tqdm

            tqdm.write(message, file=sys.stderr)
        else:
            print(message, file=sys.stderr)

    def __enter__(self) -> ProgressBars:
        return self

    def __exit__(self, *exc: object) -> None:
        for bar in self._bars.values():
            bar.close()
        self._bars.clear()


def add_quiet_argument(parser: argparse.ArgumentParser) -> None:
    """``-q``: no progress bars (they are off anyway when stderr is not a terminal)."""
    parser.add_argument("-q", "--quiet", action="store_true", help="no progress bars on stderr")
