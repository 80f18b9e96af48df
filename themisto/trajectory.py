"""The trajectory step schema, JSONL reading and writing, and validation.

A trajectory is a JSONL file, one step per line, in execution order. A step is
the state of a live kernel after one cell execution: the code, its plain-text
output, the error, timing, memory and a snapshot of the user's variables.
The state *before* step t is the snapshot of step t-1, or empty when step t
has ``restarted`` set.

The schema is written once, as the :class:`Step` and :class:`Variable`
dataclasses: each field's annotation is its type, its default makes it
optional in a file, and :func:`column` adds its description (and, where the
annotation cannot say it, its keys or storage). Everything else is derived
from them: the validation of :func:`step_from_dict` (through
:data:`STEP_SCHEMA` and :data:`VARIABLE_SCHEMA`), the Arrow/``datasets``
features of the ``trajectories`` config (:mod:`themisto.building.tables`) and
the field list of the dataset card (:mod:`themisto.building.card`).

Adding a field is a one-place change: declare it on :class:`Step` (or
:class:`Variable`) with a default, so older files stay valid, e.g.
``kernel_note: str | None = column("a note the kernel left, if it did", default=None)``;
the validator, the features and the card follow (a committed build then gains
the column: rebuild it).
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import json
import os
import re
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, TypeVar

from themisto.exceptions import OutputError, TrajectoryError
from themisto.filesystem import ExclusiveLock, lock_path, write_atomically
from themisto.jsonl import iter_json_objects

SCHEMA_VERSION = 1
# How a step's plain-text output shows an image (recording.outputs.render_outputs).
IMAGE_PLACEHOLDER = re.compile(r"<image/[\w.+-]+>")
_DOC = "themisto"  # the dataclass field metadata key holding a field's :class:`FieldDoc`


# The ``ename`` of a step that was in progress when an earlier recording stopped without finishing it
# (the recorder was killed, or the disk filled): a resume records it without running it again.
RECORDING_STOPPED_ERROR = "RecordingStopped"


def is_recording_stopped(error: dict[str, str] | None) -> bool:
    """Whether a step's ``error`` marks it as one an earlier recording stopped in (never run again)."""
    return error is not None and error.get("ename") == RECORDING_STOPPED_ERROR


@dataclass(frozen=True)
class FieldDoc:
    """What a field's annotation and default cannot say about it."""

    description: str  # one line for the dataset card
    required: bool | None = None  # None: required in a file exactly when the dataclass has no default
    keys: tuple[str, ...] = ()  # an object field: its keys, each holding a string
    as_json: bool = False  # stored in tables as JSON text, in the column ``<name>_json``: its shape varies


def column(
    description: str,
    *,
    default: Any = dataclasses.MISSING,
    default_factory: Any = dataclasses.MISSING,
    required: bool | None = None,
    keys: tuple[str, ...] = (),
    as_json: bool = False,
) -> Any:
    """A dataclass field of the step schema, with its :class:`FieldDoc`."""
    doc = FieldDoc(description, required, keys, as_json)
    return dataclasses.field(default=default, default_factory=default_factory, metadata={_DOC: doc})


@dataclass
class Variable:
    """One user variable as the snapshot describes it."""

    name: str = column("the variable's name")
    type: str = column("qualified type, e.g. `pandas.core.frame.DataFrame`")
    size_bytes: int | None = column("estimated size in bytes; null when unknown")
    repr: str = column("its repr, cut to the recording's repr cap")
    repr_truncated: bool = column("`repr` was cut", default=False)
    repr_failed: bool = column("`__repr__` raised or hung: `repr` is a placeholder", default=False)
    shape: list[int] | None = column("shape of an array or frame, where cheap", default=None)
    len: int | None = column("`len()`, where cheap", default=None)
    size_method: str | None = column("how `size_bytes` was estimated (`getsizeof`, `nbytes`, ...)", default=None)
    description: str | None = column(
        "what a person looks at first, one fact a line: a frame's columns with dtypes and its index, a series'"
        " name, dtype and index, an array's dtype and range, a container's item types; null for other objects",
        default=None,
    )


@dataclass
class Step:
    """One executed cell and the kernel state right after it."""

    trajectory_id: str = column("the trajectory (one kernel session of a notebook or log) the step belongs to")
    step: int = column("0-based position in execution order")
    cell_id: str = column("the notebook cell that was executed")
    code: str = column("the code that was executed")
    output: str = column(
        "plain text of the outputs: streams, `<image/png>` for a shown image, else `text/plain` of results and"
        " displays, `EName: evalue` for errors, `<mime/type>` for rich data without text; cut to the output cap"
    )
    error: dict[str, str] | None = column("the exception the cell raised, or null", keys=("ename", "evalue"))
    execution_time: float = column("seconds the cell ran")
    memory_bytes: int | None = column("resident memory of the kernel process after the step; null when unknown")
    runtime: list[Variable] = column("the user's variables after the step (the snapshot)")
    state_hash: str = column("hash of the snapshot: equal states hash equal")
    restarted: bool = column(
        "the kernel was restarted before this step, so the state before it is empty", default=False, required=True
    )
    outputs: list[dict[str, Any]] = column("the raw nbformat outputs, size-capped", default_factory=list, as_json=True)
    original_output: str | None = column("the output the source log recorded, if any", default=None)
    output_truncated: bool = column("`output` was cut to the cap", default=False)
    output_length: int | None = column("length of the output before any cut", default=None)
    stable: bool | None = column(
        "the output was identical in every re-execution (`themisto stability`); null when unknown", default=None
    )
    stable_norm: bool | None = column("identical after exact-match normalisation; null when unknown", default=None)
    instability: list[str] = column("detected causes of instability, e.g. `random`, `time`", default_factory=list)
    snapshot_error: str | None = column(
        "why the snapshot, or some of its variable records, were dropped; null when it was taken whole", default=None
    )
    runtime_omitted: int = column("variables left out of `runtime` by the recording's cap on their number", default=0)
    resume_diverged_at: int | None = column(
        "set on the steps recorded after a resume whose replay did not reproduce this earlier step", default=None
    )
    interrupt_after: float | None = column(
        "the source's user interrupted the cell this many seconds after it started (replays do too); null if not",
        default=None,
    )

    @property
    def recording_stopped(self) -> bool:
        """An earlier recording stopped while this cell ran: it was not run again, so it shows nothing of the cell."""
        return is_recording_stopped(self.error)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=False)


@dataclass(frozen=True)
class SchemaField:
    """One field of :class:`Step` or :class:`Variable` as its declaration defines it."""

    name: str
    kind: type  # str, int, float, bool, list or dict
    nullable: bool
    required: bool
    item: type | None  # a list's item type: str, int, dict or a schema dataclass
    doc: FieldDoc

    @property
    def column(self) -> str:
        """The field's column name in a table."""
        return f"{self.name}_json" if self.doc.as_json else self.name


def schema_of(cls: type) -> tuple[SchemaField, ...]:
    """The fields of a schema dataclass, in declaration order, from their annotations and docs."""
    hints = typing.get_type_hints(cls)
    fields = []
    for spec in dataclasses.fields(cls):
        hint = hints[spec.name]
        options = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
        nullable = type(None) in options
        (kind,) = [option for option in options if option is not type(None)]
        origin = typing.get_origin(kind) or kind
        item = typing.get_args(kind)[0] if origin is list else None
        doc = spec.metadata[_DOC]
        has_default = spec.default is not dataclasses.MISSING or spec.default_factory is not dataclasses.MISSING
        required = not has_default if doc.required is None else doc.required
        fields.append(SchemaField(spec.name, origin, nullable, required, typing.get_origin(item) or item, doc))
    return tuple(fields)


STEP_SCHEMA = schema_of(Step)
VARIABLE_SCHEMA = schema_of(Variable)

_INT64 = 2**63  # the builder stores integers as Parquet int64
_Record = TypeVar("_Record")


@dataclass(frozen=True)
class _Rule:
    """How one field of a decoded JSON object is checked, derived from its :class:`SchemaField`."""

    name: str
    kinds: frozenset[type]  # what isinstance must accept
    required: bool
    item: frozenset[type] | None  # a list's item kinds, checked one by one
    keys: tuple[str, ...]  # an object's keys, each holding a string
    record: type | None  # a list of nested schema records (the runtime's variables), built as this class


def _kinds(kind: type, nullable: bool) -> frozenset[type]:
    # a float field accepts JSON integers: json.dumps(1.0) is "1.0", but another writer may write 1
    kinds = {int, float} if kind is float else {kind}
    return frozenset(kinds | {type(None)} if nullable else kinds)


_RULES: dict[type, tuple[_Rule, ...]] = {}  # per schema dataclass, derived on first use


def _rules(cls: type) -> tuple[_Rule, ...]:
    """The checks of a schema dataclass's fields, derived once per class."""
    if cls in _RULES:
        return _RULES[cls]
    rules = []
    for field in schema_of(cls):
        item: type | None = field.item
        record: type | None = None
        if item is not None and dataclasses.is_dataclass(item):
            record, item = item, None  # the items are checked as records, by their own rules
        elif field.doc.as_json:
            item = None  # JSON-stored fields hold whatever shape their producer wrote: only the list is checked
        item_kinds = None if item is None else _kinds(item, False)
        kinds = _kinds(field.kind, field.nullable)
        rules.append(_Rule(field.name, kinds, field.required, item_kinds, field.doc.keys, record))
    _RULES[cls] = tuple(rules)
    return _RULES[cls]


def record_from_dict(cls: type[_Record], record: Any, where: str) -> _Record:
    """Validate one decoded JSON object against schema dataclass ``cls`` and build it; unknown fields are ignored."""
    return cls(**_check_fields(record, _rules(cls), where))


def _check_fields(record: Any, rules: tuple[_Rule, ...], what: str) -> dict[str, Any]:
    """Validate a decoded JSON object; returns its schema fields, nested records built as their classes."""
    if not isinstance(record, dict):
        raise TrajectoryError(f"{what} is {type(record).__name__}, expected an object")
    missing = [rule.name for rule in rules if rule.required and rule.name not in record]
    if missing:
        raise TrajectoryError(f"{what} lacks field(s) {', '.join(missing)}")
    values = {}
    # a message names where it failed: formatted only then, as a build checks millions of values; and the
    # common case (a value of one of the exact types, in the columns' range) is decided inline, without a call
    for rule in rules:
        name = rule.name
        if name not in record:
            continue  # optional: the dataclass default applies
        value = values[name] = record[name]
        kind = type(value)
        if not (
            kind in rule.kinds and (value.isascii() if kind is str else kind is not int or -_INT64 <= value < _INT64)
        ):
            problem = _value_problem(value, rule.kinds)
            if problem:
                raise TrajectoryError(f"{what} field {name!r} {problem}")
        if (rule.item is not None or rule.record is not None) and isinstance(value, list):
            if rule.item is not None:
                for item in value:
                    problem = _value_problem(item, rule.item)
                    if problem:
                        raise TrajectoryError(f"{what} field {name!r} item {problem}")
            if rule.record is not None:
                values[name] = _records(rule.record, value, f"{what} {name}")
        elif rule.keys and isinstance(value, dict):
            _check_fields(value, _key_rules(rule.keys), f"{what} field {name!r}")
    return values


@functools.cache
def _key_rules(keys: tuple[str, ...]) -> tuple[_Rule, ...]:
    """The rules of an object field's keys: each required, each holding a string."""
    return tuple(_Rule(key, frozenset((str,)), True, None, (), None) for key in keys)


def _records(cls: type[_Record], items: list[Any], what: str) -> list[_Record]:
    """``items`` validated and built as records of ``cls``; an error names the item (``what[i]``)."""
    rules = _rules(cls)
    plain = _plain_checks(cls)
    try:
        records = []
        for item in items:
            if plain is not None and type(item) is dict and item.keys() == plain[0] and _plain(item, plain[1]):
                # what __init__ would build from the same fields (the runtime's variables: most items of a build)
                record = object.__new__(cls)
                record.__dict__ = item
                records.append(record)
            else:
                records.append(cls(**_check_fields(item, rules, what)))
        return records
    except TrajectoryError:
        for index, item in enumerate(items):  # again, to say which item: only on the way to an error
            _check_fields(item, rules, f"{what}[{index}]")
        raise


# per field: its name, its kinds and its items' kinds (None: not a list of values)
_FieldCheck = tuple[str, frozenset[type], frozenset[type] | None]
_PlainChecks = tuple[frozenset[str], tuple[_FieldCheck, ...]]


_PLAIN_CHECKS: dict[type, _PlainChecks | None] = {}  # per schema dataclass, derived on first use


def _plain_checks(cls: type) -> _PlainChecks | None:
    """The field names of ``cls`` and each field's kinds and item kinds, for records told valid at once
    (:func:`_plain`); None for a class whose records hold records or objects, or that checks itself after
    ``__init__``: those go field by field."""
    if cls not in _PLAIN_CHECKS:
        rules = _rules(cls)
        plain = not hasattr(cls, "__post_init__") and all(rule.record is None and not rule.keys for rule in rules)
        _PLAIN_CHECKS[cls] = (
            (frozenset(rule.name for rule in rules), tuple((rule.name, rule.kinds, rule.item) for rule in rules))
            if plain
            else None
        )
    return _PLAIN_CHECKS[cls]


def _plain(record: dict[str, Any], checks: tuple[_FieldCheck, ...]) -> bool:
    """Whether every field of ``record`` (which has them all) and every item of its lists is of the common case
    :func:`_check_fields` accepts inline: then it accepts the record, and builds what ``__init__`` would. False
    sends the record to it, which decides (and says why)."""
    for name, kinds, item_kinds in checks:
        value = record[name]
        kind = type(value)
        if not (kind in kinds and (value.isascii() if kind is str else kind is not int or -_INT64 <= value < _INT64)):
            return False
        # the items as _check_fields checks them
        if item_kinds is not None and kind is list and any(_value_problem(item, item_kinds) for item in value):
            return False
    return True


def _value_problem(value: Any, kinds: frozenset[type]) -> str:
    """What is wrong with ``value`` given ``kinds`` and the Parquet columns ("" if nothing): it ends a message."""
    kind = type(value)
    # the common case, decided at once: a value of one of the exact types (a str or int within the columns)
    if kind in kinds and (value.isascii() if kind is str else kind is not int or -_INT64 <= value < _INT64):
        return ""
    # bool is an int subclass; a step number of True is still wrong
    if not isinstance(value, tuple(kinds)) or (isinstance(value, bool) and bool not in kinds):
        return f"has type {type(value).__name__}"
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        return "does not fit in 64 bits"
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # JSON can spell a lone surrogate (\ud800), which no UTF-8 file can hold
            return "holds an unpaired surrogate, not text"
    return ""


def step_from_dict(record: Any, where: str = "step") -> Step:
    """Validate one decoded JSON object and return it as a :class:`Step`; unknown fields are ignored."""
    return record_from_dict(Step, record, where)


class ValidatedFiles:
    """The contents of trajectory files found valid whole, by their SHA-256: the same bytes read again are not
    validated again (a build reads its input twice: to select, then to write).

    A file is read whole, hashed and parsed from those bytes, so what was validated is what a later read finds
    unchanged, whatever happens to the file between the reads; one larger than :data:`WHOLE_FILE_BYTES` is
    streamed and validated at every read.
    """

    def __init__(self) -> None:
        self._digests: set[bytes] = set()

    def __len__(self) -> int:
        return len(self._digests)

    def digests(self) -> list[str]:
        """The digests held, as hex text (for a process of the same build that trusts them)."""
        return sorted(digest.hex() for digest in self._digests)

    def trust(self, digests: Iterable[str]) -> None:
        """Hold ``digests`` (from :meth:`digests`) as those of contents found valid."""
        self._digests.update(bytes.fromhex(digest) for digest in digests)

    def steps(self, path: str | os.PathLike[str]) -> Iterator[Step]:
        """The steps of ``path``, validated unless its bytes are those of a file validated here before; a file
        read to its end without an error is remembered as valid."""
        path = Path(path)
        data = _whole_file(path)
        if data is None:
            yield from iter_steps(path)
            return
        digest = hashlib.sha256(data).digest()
        lines = iter_json_objects(path, TrajectoryError, "trajectory", data)
        if digest in self._digests:
            for _, record in lines:
                yield _valid_step(record)
            return
        for lineno, record in lines:
            yield step_from_dict(record, f"{path}:{lineno}")
        self._digests.add(digest)


# Files up to this size are read whole by ValidatedFiles (twice at once in a build of two processes).
WHOLE_FILE_BYTES = 64 << 20


def _whole_file(path: Path) -> bytes | None:
    """The bytes of ``path`` if it is a file of at most :data:`WHOLE_FILE_BYTES`; None where it is larger or
    cannot be read (then the streaming reader reports why)."""
    try:
        with path.open("rb") as handle:
            data = handle.read(WHOLE_FILE_BYTES + 1)
    except OSError:
        return None
    return data if len(data) <= WHOLE_FILE_BYTES else None


_STEP_FIELDS = frozenset(field.name for field in STEP_SCHEMA)
_VARIABLE_FIELDS = frozenset(field.name for field in VARIABLE_SCHEMA)


def _valid_step(record: dict[str, Any]) -> Step:
    """A step from a record that ``step_from_dict`` accepted before: equal to what it builds, in a fraction of
    the time where the record has exactly the schema's fields (the recorder writes them all)."""
    if record.keys() != _STEP_FIELDS:
        return step_from_dict(record)  # defaults to fill or unknown fields to drop: the dataclasses do it
    # the objects take the parsed dicts as their attributes, as __init__ would assign each of them
    runtime = []
    for variable in record["runtime"]:
        if variable.keys() != _VARIABLE_FIELDS:
            return step_from_dict(record)
        built = object.__new__(Variable)
        built.__dict__ = variable
        runtime.append(built)
    step = object.__new__(Step)
    step.__dict__ = {**record, "runtime": runtime}
    return step


def iter_steps(path: str | os.PathLike[str]) -> Iterator[Step]:
    """Stream the steps of one trajectory file, validating each line."""
    path = Path(path)
    for lineno, record in iter_json_objects(path, TrajectoryError, "trajectory"):
        yield step_from_dict(record, f"{path}:{lineno}")


def read_trajectory(path: str | os.PathLike[str]) -> list[Step]:
    """Read and validate a whole trajectory file."""
    return list(iter_steps(path))


def trajectory_files(paths: Iterable[str | os.PathLike[str]]) -> list[Path]:
    """Expand files and folders into a sorted list of ``*.jsonl`` trajectory files."""
    found: list[Path] = []
    for raw in paths:
        path = Path(raw)
        if path.is_dir():
            found.extend(sorted(path.glob("*.jsonl")))
        elif path.is_file():
            found.append(path)
        else:
            raise TrajectoryError(f"no such trajectory file or folder: {path}")
    return found


def variable_json(variable: Variable) -> str:
    """One variable's canonical JSON, the unit :func:`state_hash` hashes."""
    return json.dumps(vars(variable), sort_keys=True, ensure_ascii=False)


def state_hash(variables: list[Variable], texts: list[str] | None = None) -> str:
    """A hash of the snapshot: equal namespaces (names, types, reprs, sizes) hash equal.

    ``texts``, the variables' :func:`variable_json` if already known, spares
    encoding unchanged variables again; the hash is that of the canonical JSON
    list ``json.dumps([...], sort_keys=True)`` either way.
    """
    texts = [variable_json(variable) for variable in variables] if texts is None else texts
    canonical = "[" + ", ".join(texts) + "]"
    return hashlib.sha256(canonical.encode("utf-8")).hexdigest()[:32]


class TrajectoryWriter:
    """Append steps to a trajectory file, one complete line at a time.

    Each line is written unbuffered and synced, so a run that is killed leaves
    at most a torn final line, which :func:`repair_tail` removes. A line that
    cannot be written whole (a full disk) is cut off again, and
    :class:`OutputError` says so: the file keeps exactly its complete steps.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_tail(self.path)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size  # the bytes of complete lines

    def write(self, step: Step) -> None:
        data = (step.to_json() + "\n").encode("utf-8")
        line = memoryview(data)
        try:
            while line:
                line = line[os.write(self._fd, line) :]
            os.fsync(self._fd)
        except OSError as exc:
            try:
                os.ftruncate(self._fd, self._size)
            except OSError:
                pass  # the torn line stays; repair_tail removes it before the file is appended to again
            raise OutputError(
                f"cannot write step {step.step} to {self.path}: {exc.strerror or exc}; the steps before it are kept"
            ) from None
        self._size += len(data)

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_trajectory(path: Path, steps: Iterable[Step]) -> None:
    """Write a whole trajectory through a temporary file, replacing any file at ``path`` at once.

    A reader never sees half a trajectory, and an interrupted write never
    replaces a complete file. The file is locked as a recording locks it, so
    it is never replaced under a running recording.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    with ExclusiveLock(lock_path(path), f"trajectory {path}"):
        write_atomically(path, "".join(step.to_json() + "\n" for step in steps))


def repair_tail(path: Path) -> None:
    """Drop a torn last line (no trailing newline) left by an interrupted run."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        data = handle.read()
        if data.endswith(b"\n"):
            return
        handle.truncate(data.rfind(b"\n") + 1)


def invented_error(step: Step) -> bool:
    """Whether the replay raised an error that the source's stored output does not show: the step has an
    error, its ``original_output`` is known, and that output never names the error's class. An error of the
    replay (a cell run out of the author's order, a library changed since), not of the author's session."""
    return (
        step.error is not None and step.original_output is not None and step.error["ename"] not in step.original_output
    )


def is_image_only(output: str) -> bool:
    """Whether a step's plain-text output shows nothing but images: every line an ``<image/...>`` placeholder."""
    return bool(output) and all(IMAGE_PLACEHOLDER.fullmatch(line) for line in output.split("\n"))
