"""Option helpers shared by the subcommands: kernel options, data, progress, sizes, shards, range checks, errors.

Every flag's destination is the keyword name of the library option it sets
(``--kernel`` sets ``kernel_name``), so a library :class:`OptionError` that
names an option by keyword is shown with the flag that sets it
(:func:`option_flags`, :func:`error_line`).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

from themisto.exceptions import CallerSpelledError, InputError, one_line
from themisto.recording.options import RecordOptions
from themisto.vocabulary import DATA_ENV

if TYPE_CHECKING:
    from themisto.evaluation.data import DataLocation

# A size: a number and a unit. K, M, G, T alone (any case) and KiB ... TiB are powers of 1024, as in ulimit
# and docker; kB, MB, GB, TB (SI) powers of 1000. KB, mb, gb ... have both readings and are refused.
_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*(?:(?P<binary>[KMGTkmgt]|[KMGT](?=iB))(?:iB)?|(?P<decimal>[kMGT])B|B)?")
_DEFAULTS = RecordOptions()


def add_kernel_arguments(parser: argparse.ArgumentParser, workdir_help: str) -> None:
    """How cells are run, shared by record and stability: timeout, working directory, kernel, resource limits, home.

    Their parsed value is None unless given, so :func:`record_options` knows which the user chose; the
    defaults come from :class:`RecordOptions`.
    """
    parser.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=f"interrupt a cell after this long and record a timeout step (default {_DEFAULTS.timeout:g})",
    )
    parser.add_argument("--workdir", type=Path, metavar="DIR", help=workdir_help)
    parser.add_argument(
        "--kernel",
        dest="kernel_name",
        metavar="NAME",
        help=f"Jupyter kernel to run the cells in (default {_DEFAULTS.kernel_name})",
    )
    parser.add_argument(
        "--max-memory",
        metavar="SIZE",
        help="limit the kernel's private memory to SIZE (512M, 2G or 2GiB: powers of 1024; 500MB, 2GB: powers of"
        " 1000): an allocation past it"
        " raises MemoryError in the cell, or kills the kernel, which is recorded and restarted (default: no limit)",
    )
    parser.add_argument(
        "--max-cpu-seconds",
        type=int,
        metavar="S",
        help="CPU seconds a kernel may use from its start (a restart starts afresh); past them it is killed,"
        " recorded as a dead-kernel step and restarted (default: no limit)",
    )
    parser.add_argument(
        "--isolate-home",
        action="store_true",
        default=None,  # None unless given, as the other kernel options
        help="give each kernel a temporary empty HOME, so files found through it (~/.netrc, the Hugging Face"
        " token) are not where the notebook looks; see SECURITY.md",
    )
    parser.add_argument(
        "--no-sandbox",
        dest="sandbox",
        action="store_const",
        const=False,
        default=None,
        help="run the kernels unconfined: without the Landlock sandbox that lets a kernel write only beneath its"
        " working directory and private folders, use no TCP, and signal or trace no process outside; for a"
        " system without Landlock (see SECURITY.md)",
    )
    parser.add_argument(
        "--allow-network",
        action="store_true",
        default=None,
        help="let the sandboxed kernels connect and bind TCP sockets (default: denied)",
    )
    parser.add_argument(
        "--pass-env",
        action="append",
        metavar="NAME",
        help="pass environment variable NAME to the kernels (repeatable); they get only an allowlist"
        " (PATH, HOME, LANG, LC_*, TZ, TERM, the hash seed, thread counts, MPLBACKEND, JUPYTER_*, ...)",
    )
    # this command starts kernels: it runs without credentials in its environment (see themisto.cli.main)
    parser.set_defaults(starts_kernels=True)


def record_options(
    args: argparse.Namespace, names: Iterable[str], **run_control: Any
) -> tuple[RecordOptions, frozenset[str]]:
    """The :class:`RecordOptions` of the options ``names`` the user gave (defaults for the others), and which were given."""
    given = {name: getattr(args, name) for name in names if getattr(args, name) is not None}
    if "max_memory" in given:
        given["max_memory"] = parse_size(given["max_memory"])
    if "pass_env" in given:
        given["pass_env"] = tuple(dict.fromkeys(given["pass_env"]))
        unset = [name for name in given["pass_env"] if name not in os.environ]
        if unset:
            raise InputError(f"--pass-env {unset[0]}: no such variable in this environment")
    return RecordOptions(**given, **run_control), frozenset(given)


def parse_size(text: str) -> int:
    """Bytes in a size: ``512M``, ``2G``, ``1.5GiB`` (powers of 1024), ``500MB``, ``2GB`` (powers of 1000), ``1000000``."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise InputError(
            f"--max-memory {text!r} is not a size such as 512M, 2GiB (powers of 1024) or 500MB (powers of 1000);"
            " KB, mb, gb and the like have two readings"
        )
    unit, base = (match["binary"], 1024) if match["binary"] else (match["decimal"], 1000)
    factor = base ** (" KMGT".index(unit.upper())) if unit else 1
    size = int(float(match[1]) * factor)
    if size < 1:
        raise InputError("--max-memory must be at least 1 byte")
    return size


def parse_shard(text: str) -> tuple[int, int]:
    """``"I/N"`` as ``(I, N)``; the range of I is checked by the recorder."""
    index, slash, count = text.partition("/")
    if not (slash and index.strip().isdigit() and count.strip().isdigit()):
        raise InputError(f"--shard {text!r} is not I/N with whole numbers, e.g. 0/4")
    return int(index), int(count)


def check_ranges(args: argparse.Namespace, positive: Iterable[str] = (), at_least_one: Iterable[str] = ()) -> None:
    """Raise :class:`InputError` naming the flag of the first option out of range; unset (None) options pass."""
    for name in positive:
        if getattr(args, name) is not None and getattr(args, name) <= 0:
            raise InputError(f"--{name.replace('_', '-')} must be positive")
    for name in at_least_one:
        if getattr(args, name) is not None and getattr(args, name) < 1:
            raise InputError(f"--{name.replace('_', '-')} must be at least 1")


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
