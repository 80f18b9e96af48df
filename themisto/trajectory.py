"""The trajectory step schema, JSONL reading and writing, and validation.

A trajectory is a JSONL file, one step per line, in execution order. A step is
the state of a live kernel after one cell execution: the code, its plain-text
output, the error, timing, memory and a snapshot of the user's variables.
The state *before* step t is the snapshot of step t-1, or empty when step t
has ``restarted`` set.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Iterable, Iterator
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from themisto.exceptions import TrajectoryError
from themisto.jsonl import iter_json_objects

SCHEMA_VERSION = 1


@dataclass
class Variable:
    """One user variable as the snapshot describes it."""

    name: str
    type: str  # qualified, e.g. "pandas.core.frame.DataFrame"
    size_bytes: int | None
    repr: str
    repr_truncated: bool = False
    repr_failed: bool = False  # __repr__ raised or hung: ``repr`` is a placeholder
    shape: list[int] | None = None
    len: int | None = None
    size_method: str | None = None  # how size_bytes was estimated (getsizeof, nbytes, ...)


@dataclass
class Step:
    """One executed cell and the kernel state right after it."""

    trajectory_id: str
    step: int
    cell_id: str
    code: str
    output: str
    error: dict[str, str] | None
    execution_time: float
    memory_bytes: int | None
    runtime: list[Variable]
    state_hash: str
    restarted: bool = False
    outputs: list[dict[str, Any]] = field(default_factory=list)  # raw nbformat outputs, size-capped
    original_output: str | None = None  # output recorded in the source log, if any
    output_truncated: bool = False
    output_length: int | None = None  # length of the output before truncation
    stable: bool | None = None  # output identical across re-executions (themisto stability)
    stable_norm: bool | None = None  # identical after exact_match_norm's normalisation
    instability: list[str] = field(default_factory=list)  # detected causes: "random", "time", ...

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), ensure_ascii=False, sort_keys=False)


_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "trajectory_id": str,
    "step": int,
    "cell_id": str,
    "code": str,
    "output": str,
    "error": (dict, type(None)),
    "execution_time": (int, float),
    "memory_bytes": (int, type(None)),
    "runtime": list,
    "state_hash": str,
    "restarted": bool,
}
_VARIABLE_REQUIRED: dict[str, type | tuple[type, ...]] = {
    "name": str,
    "type": str,
    "size_bytes": (int, type(None)),
    "repr": str,
}
# Fields a line may omit (they have defaults); when present they must have these types.
_OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "outputs": list,
    "original_output": (str, type(None)),
    "output_truncated": bool,
    "output_length": (int, type(None)),
    "stable": (bool, type(None)),
    "stable_norm": (bool, type(None)),
    "instability": list,
}
_VARIABLE_OPTIONAL: dict[str, type | tuple[type, ...]] = {
    "repr_truncated": bool,
    "repr_failed": bool,
    "shape": (list, type(None)),
    "len": (int, type(None)),
    "size_method": (str, type(None)),
}
_ITEM_TYPES: dict[str, type] = {"instability": str, "shape": int}  # the type of each item of these list fields
_INT64 = 2**63  # the builder stores integers as Parquet int64
_STEP_FIELDS = set(Step.__dataclass_fields__)
_VARIABLE_FIELDS = set(Variable.__dataclass_fields__)


def _check_fields(
    record: Any,
    required: dict[str, type | tuple[type, ...]],
    what: str,
    optional: dict[str, type | tuple[type, ...]] | None = None,
) -> None:
    if not isinstance(record, dict):
        raise TrajectoryError(f"{what} is {type(record).__name__}, expected an object")
    missing = [k for k in required if k not in record]
    if missing:
        raise TrajectoryError(f"{what} lacks field(s) {', '.join(missing)}")
    present = {key: kind for key, kind in (optional or {}).items() if key in record}
    for key, kind in {**required, **present}.items():
        _check_value(record[key], kind, f"{what} field {key!r}")
        if key in _ITEM_TYPES and isinstance(record[key], list):
            for item in record[key]:
                _check_value(item, _ITEM_TYPES[key], f"{what} field {key!r} item")


def _check_value(value: Any, kind: type | tuple[type, ...], what: str) -> None:
    """Raise :class:`TrajectoryError` unless ``value`` has type ``kind`` and fits a Parquet column."""
    kinds = kind if isinstance(kind, tuple) else (kind,)
    # bool is an int subclass; a step number of True is still wrong
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise TrajectoryError(f"{what} has type {type(value).__name__}")
    if isinstance(value, int) and not -_INT64 <= value < _INT64:
        raise TrajectoryError(f"{what} does not fit in 64 bits")
    if isinstance(value, str) and not value.isascii():
        try:
            value.encode("utf-8")
        except UnicodeEncodeError:  # JSON can spell a lone surrogate (\ud800), which no UTF-8 file can hold
            raise TrajectoryError(f"{what} holds an unpaired surrogate, not text") from None


def step_from_dict(record: Any, where: str = "step") -> Step:
    """Validate one decoded JSON object and return it as a :class:`Step`."""
    _check_fields(record, _REQUIRED, where, _OPTIONAL)
    if record["error"] is not None:
        _check_fields(record["error"], {"ename": str, "evalue": str}, f"{where} field 'error'")
    variables = []
    for i, var in enumerate(record["runtime"]):
        _check_fields(var, _VARIABLE_REQUIRED, f"{where} runtime[{i}]", _VARIABLE_OPTIONAL)
        variables.append(Variable(**{k: v for k, v in var.items() if k in _VARIABLE_FIELDS}))
    values = {k: v for k, v in record.items() if k in _STEP_FIELDS}
    values["runtime"] = variables
    return Step(**values)


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

    Each line is written with a single ``write`` and flushed, so a run that is
    killed leaves at most a torn final line, which :func:`repair_tail` removes.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        repair_tail(self.path)
        self._handle = self.path.open("a", encoding="utf-8")

    def write(self, step: Step) -> None:
        self._handle.write(step.to_json() + "\n")
        self._handle.flush()
        os.fsync(self._handle.fileno())

    def close(self) -> None:
        self._handle.close()

    def __enter__(self) -> TrajectoryWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def write_trajectory(path: Path, steps: Iterable[Step]) -> None:
    """Write a whole trajectory through a temporary file, replacing any file at ``path`` at once.

    A reader never sees half a trajectory, and an interrupted write never
    replaces a complete file.
    """
    partial = path.with_name(f".{path.name}.partial")
    partial.unlink(missing_ok=True)  # a leftover of an interrupted run; the writer would append to it
    with TrajectoryWriter(partial) as writer:
        for step in steps:
            writer.write(step)
    os.replace(partial, path)


def repair_tail(path: Path) -> None:
    """Drop a torn last line (no trailing newline) left by an interrupted run."""
    if not path.exists() or path.stat().st_size == 0:
        return
    with path.open("rb+") as handle:
        data = handle.read()
        if data.endswith(b"\n"):
            return
        handle.truncate(data.rfind(b"\n") + 1)
