"""Option helpers shared by the subcommands: kernel arguments, sizes, shards and range checks."""

from __future__ import annotations

import argparse
import re
from collections.abc import Iterable
from pathlib import Path

from themisto.exceptions import InputError

_SIZE = re.compile(r"(\d+(?:\.\d+)?)\s*([KMGT]?)(?:I?B)?", re.IGNORECASE)
_SIZE_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}


def add_kernel_arguments(parser: argparse.ArgumentParser, workdir_help: str) -> None:
    """``--timeout``, ``--workdir`` and ``--kernel``: how cells are run, shared by record and stability."""
    from themisto.recording.kernel import RecordOptions

    defaults = RecordOptions()
    parser.add_argument(
        "--timeout",
        type=float,
        default=defaults.timeout,
        metavar="SECONDS",
        help=f"interrupt a cell after this long and record a timeout step (default {defaults.timeout:g})",
    )
    parser.add_argument("--workdir", type=Path, default=None, metavar="DIR", help=workdir_help)
    parser.add_argument(
        "--kernel",
        default=defaults.kernel_name,
        metavar="NAME",
        help=f"Jupyter kernel to run the cells in (default {defaults.kernel_name})",
    )


def parse_size(text: str) -> int:
    """Bytes in a size such as ``2G``, ``512M``, ``1.5GiB`` or ``1000000`` (K, M, G, T are powers of 1024)."""
    match = _SIZE.fullmatch(text.strip())
    if match is None:
        raise InputError(f"--max-memory {text!r} is not a size such as 512M or 2G")
    size = int(float(match[1]) * _SIZE_UNITS[match[2].upper()])
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
