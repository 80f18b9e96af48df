"""The records that cross the kernel boundary: what the host asks of a kernel-side function, and what comes back.

The host builds a request from its :class:`~themisto.kernel.options.KernelOptions` (see
:mod:`themisto.kernel.inject`); the kernel decodes the same class from JSON and hands it to the kernel-side
function, which reads every setting from it and has no defaults of its own. The kernel side builds its
answers as the result classes (it takes them from this module, installed in the kernel before the others),
and the host decodes each answer with the same class, which refuses missing, extra or mistyped fields (the
answer passed through a process that runs untrusted code). The launcher's request is a record too.

A module of :mod:`themisto.kernel.inside`: standard library only, sent to the kernel compiled or as source text (and so
without ``from __future__ import annotations``: a dataclass of a module not yet in ``sys.modules`` needs its
annotations evaluated).
"""

import dataclasses
import json
import types
import typing
import zlib
from typing import Any, TypeVar

MODULE_NAME = "_themisto_wire"
# Taken when the module is installed in the kernel, so a cell that patches json.dumps or json.loads later
# changes no record either side encodes or decodes.
_dumps, _loads = json.dumps, json.loads

_Record = TypeVar("_Record", bound="Record")


class WireError(ValueError):
    """A record that is not what its class says: a field missing, extra or of the wrong type."""


class Record:
    """JSON encoding and strict decoding for the dataclasses below."""

    def to_json(self) -> str:
        # fields taken as they are (no deep copy, as dataclasses.asdict makes): a snapshot's records are many
        return _dumps(self, default=_fields, ensure_ascii=False)

    @classmethod
    def from_json(cls: type[_Record], text: str) -> _Record:
        """The record encoded in ``text``; :class:`WireError` when it is not one."""
        try:
            data = _loads(text)
        except (TypeError, ValueError, RecursionError) as exc:  # RecursionError: JSON nested past the stack
            raise WireError(f"{cls.__name__}: not JSON ({exc})") from None
        return cls.from_dict(data)

    @classmethod
    def from_dict(cls: type[_Record], data: Any) -> _Record:
        """The record in the decoded JSON ``data``, every field checked against its annotation."""
        if not isinstance(data, dict):
            raise WireError(f"{cls.__name__}: not an object")
        names = {field.name for field in dataclasses.fields(cls)}  # type: ignore[arg-type]
        if set(data) != names:
            raise WireError(f"{cls.__name__}: fields {sorted(set(data) ^ names)} missing or unexpected")
        checkers = _FIELD_CHECKERS.get(cls) or _FIELD_CHECKERS.setdefault(cls, _field_checkers(cls))
        return cls(**{name: check(data[name], where) for name, (check, where) in checkers.items()})


# Each record class's fields: the checker of its annotation and the field's name in errors, made once per class.
_FIELD_CHECKERS: dict[type, dict[str, tuple[Any, str]]] = {}


def _field_checkers(cls: type) -> dict[str, tuple[Any, str]]:
    return {name: (_checker(kind), f"{cls.__name__}.{name}") for name, kind in typing.get_type_hints(cls).items()}


def _fields(record: Any) -> dict[str, Any]:
    """A record's fields by name, for ``json.dumps``; anything else is not JSON."""
    if not isinstance(record, Record):
        raise TypeError(f"{type(record).__name__} is not JSON serialisable")
    return {field.name: getattr(record, field.name) for field in dataclasses.fields(record)}  # type: ignore[arg-type]


# The checker of each annotation, made once: checking a record's fields is then a call per value, not an
# inspection of its annotation per value (a snapshot's hundreds of records, each step).
_CHECKERS: dict[Any, Any] = {}


def _checker(kind: Any) -> Any:
    """A function ``(value, where) -> value`` that returns ``value`` as the annotated ``kind`` (int, float, str,
    bool, a Record, a list or an Optional of them), or raises :class:`WireError` naming ``where``."""
    found = _CHECKERS.get(kind)
    if found is None:
        found = _CHECKERS[kind] = _make_checker(kind)
    return found


def _make_checker(kind: Any) -> Any:
    origin, arguments = typing.get_origin(kind), typing.get_args(kind)
    if origin is typing.Union or origin is types.UnionType:
        (inner,) = [argument for argument in arguments if argument is not type(None)]
        check_inner, optional = _checker(inner), type(None) in arguments

        def check_union(value: Any, where: str) -> Any:
            return None if value is None and optional else check_inner(value, where)

        return check_union
    if origin is list:
        check_item = _checker(arguments[0])

        def check_list(value: Any, where: str) -> Any:
            if not isinstance(value, list):
                raise WireError(f"{where}: not a list")
            return list(value) if check_item is _check_any else [check_item(item, where) for item in value]

        return check_list
    if origin is dict:

        def check_dict(value: Any, where: str) -> Any:
            if not isinstance(value, dict):
                raise WireError(f"{where}: not an object")
            return value

        return check_dict
    if isinstance(kind, type) and issubclass(kind, Record):
        return lambda value, where: kind.from_dict(value)
    if kind is Any:
        return _check_any
    name = getattr(kind, "__name__", kind)

    def check_exact(value: Any, where: str) -> Any:
        if type(value) is kind:
            return value
        if kind is float and type(value) is int:
            return float(value)
        raise WireError(f"{where}: {type(value).__name__}, not {name}")

    return check_exact


def _check_any(value: Any, where: str) -> Any:
    return value


@dataclasses.dataclass(frozen=True)
class SnapshotRequest(Record):
    """What a snapshot of the user namespace describes (``snapshot.take``)."""

    max_repr_chars: int  # a variable's repr is cut to this many characters
    repr_timeout: float  # seconds one variable's description may take
    max_variables: int  # variables described (by name); the rest are counted
    known: int  # the generation of the last snapshot the host received: unchanged variables go by name alone
    announce: str | None  # the file where the kernel says the cell finished, before the snapshot begins


@dataclasses.dataclass(frozen=True)
class SnapshotResult(Record):
    """A snapshot as the kernel sends it: ``variables`` are records, or ``{"name": ...}`` for an unchanged one.

    ``unchanged``: the variables are those of the snapshot the request named, every one unchanged and in the
    same order, and ``variables`` is empty (an unchanged namespace, the common step, sends no name at all).
    """

    generation: int
    # a record each: the host checks them one by one (see snapshots.SnapshotReader), so a bad one is dropped alone
    variables: list[Any]
    seconds: float
    omitted: int
    unchanged: bool


@dataclasses.dataclass(frozen=True)
class Versions(Record):
    """The kernel's own Python and ipykernel versions and its installed libraries' (``snapshot.versions``)."""

    python: str
    ipykernel: str | None
    libraries: dict[str, str]  # by distribution name; a library not installed is not named


@dataclasses.dataclass(frozen=True)
class ForkRequest(Record):
    """Cells to run, each in a forked copy of the kernel (``fork.run``).

    ``code_files`` name one file per cell, which the kernel opens and deletes before the first fork and only
    the cell's own child reads, so no cell's text is in the kernel's memory when a child is forked.
    """

    code_files: list[str]
    timeout: float  # seconds a cell may run, and again for its snapshot
    max_raw_output_chars: int  # the output a child keeps
    root: str  # the kernel's working directory, copied for each child
    scratch: str  # where the children's private folders are made
    confine: bool  # each child runs confined: namespaces, a nested Landlock domain and seccomp filter of its own
    snapshot: SnapshotRequest  # the snapshot each child takes of its namespace after its cell
    # the run rides on a cell's own request: the kernel walks ``root`` before the first fork, sends its entries back
    # (ForkResult.folder) and puts the children's folders in ``memory`` while their copies take at most
    # ``memory_bytes`` (else in ``scratch``), as the host cannot look at the folder between the cell and the forks
    after_cell: bool
    memory: str | None
    memory_bytes: int


@dataclasses.dataclass(frozen=True)
class ChildResult(Record):
    """What one forked cell did: its status, outcome, captured messages and the snapshot after it."""

    status: str  # ok, error, timeout, exited (the child ended itself), fault (the run could not be set up)
    ename: str
    evalue: str
    seconds: float  # the cell's own run time
    messages: list[dict[str, Any]]  # what the cell would have published, in order: {"msg_type", "content"}
    dropped_chars: int
    dropped_trailing_newlines: int
    snapshot: str | None  # the SnapshotResult JSON, when it came
    snapshot_error: str | None


@dataclasses.dataclass(frozen=True)
class Sandbox(Record):
    """The Landlock domain a process runs in: where it may write, whether it may use TCP, which ports it binds."""

    writable: list[str]
    allow_network: bool
    bind_ports: list[int]  # TCP ports it may bind without the network (a kernel's own, over tcp)


@dataclasses.dataclass(frozen=True)
class LaunchRequest(Record):
    """What the launcher (``python -m themisto.kernel.launcher REQUEST -- COMMAND``) does for the kernel it starts."""

    parent: int  # the recorder's process: the launcher dies with it
    max_memory: int | None  # RLIMIT_DATA of the kernel, bytes
    max_cpu_seconds: int | None  # RLIMIT_CPU of the kernel
    sandbox: Sandbox | None  # None: unconfined


@dataclasses.dataclass(frozen=True)
class ForkResult(Record):
    """What ``fork.run`` sends back: one result per cell of the request, in order."""

    children: list[ChildResult]
    # with ``after_cell``: every entry of the working folder before the first fork (fork.folder_signature)
    folder: list[Any] | None
    began: float  # the kernel's wall clock (time.time) when the run began


# The kernel's file that says a cell has finished (``snapshot.announce_snapshot``) holds one record of this many
# bytes, rewritten in place: no new file, no truncation, so a step costs no file-system metadata change (a new
# file each step cost 0.1 to 0.4 ms of ext4 journal work under load).
ANNOUNCEMENT_BYTES = 256
_ANNOUNCED_ID_CHARS = 200


def announcement(request: str, when: str) -> bytes:
    """The file's record: the request's id, ``when`` (the time the cell finished, or ``done``) and a CRC-32 of
    both, padded to :data:`ANNOUNCEMENT_BYTES`. A record read half-written fails its CRC (see ``announced``)."""
    text = f"{request[:_ANNOUNCED_ID_CHARS]} {when[:40]}"
    return f"{text} {zlib.crc32(text.encode('utf-8', 'replace')):08x}".encode("utf-8", "replace").ljust(
        ANNOUNCEMENT_BYTES
    )


def announced(data: bytes) -> tuple[str, str] | None:
    """The request id and ``when`` of an :func:`announcement` record; None for anything else (a torn or
    foreign record, an empty file)."""
    text, _, crc = data.rstrip(b" ").decode("utf-8", "replace").rpartition(" ")
    if not text or crc != f"{zlib.crc32(text.encode('utf-8', 'replace')):08x}":
        return None
    request, _, when = text.partition(" ")
    return request, when


@dataclasses.dataclass
class StreamBudget:
    """Stream text kept within ``room`` characters and the rest counted: the one output budget of both sides.

    The recorder's ``OutputCollector`` and a forked child's ``Capture`` take stream text through it, so an
    output cut on either side names its real length the same way.
    """

    room: int
    dropped_chars: int = 0
    # newlines ending the dropped text: render_outputs strips them, so they are no part of the length
    dropped_trailing_newlines: int = 0

    def take(self, text: str) -> str:
        """The part of ``text`` that fits the room left, which it uses up; the rest is counted as dropped."""
        kept = text[: max(self.room, 0)]
        dropped = text[len(kept) :]
        if dropped:
            self.dropped_chars += len(dropped)
            stripped = dropped.rstrip("\n")
            trailing = len(dropped) - len(stripped)
            self.dropped_trailing_newlines = trailing if stripped else self.dropped_trailing_newlines + trailing
        self.room -= len(kept)
        return kept

    def count_dropped(self, chars: int, trailing_newlines: int) -> None:
        """Count ``chars`` characters dropped before they reached this budget (the kernel's own cut, see
        ``channels``), the last ``trailing_newlines`` of them newlines, as if ``take`` had dropped them."""
        if chars <= 0:
            return
        self.dropped_chars += chars
        if trailing_newlines < chars:
            self.dropped_trailing_newlines = trailing_newlines
        else:
            self.dropped_trailing_newlines += chars


def fault(status: str, ename: str, evalue: str) -> ChildResult:
    """A result without a run: a child that timed out, ended itself or could not be set up."""
    return ChildResult(status, ename, evalue, 0.0, [], 0, 0, None, None)
