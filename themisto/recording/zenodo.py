"""Read the published Themisto record (Zenodo 14861889) and convert it to trajectory JSONL.

The paper describes the record as trajectories of re-executed notebooks where
every step carries: code, output, execution time, memory bytes, runtime
variables and a hash index of the state. The exact file layout of the record
could not be checked from here (no network at development time), so the reader
accepts that content in the usual serialisations and fails with one line that
names the fields it found and the ones it expected when a file does not match.

Assumed shape:

- the source is a local file, a folder, a ``.zip`` archive, a Zenodo record
  (``https://zenodo.org/records/14861889``, ``zenodo:14861889`` or the bare
  number) or a direct file URL; online sources are fetched with ``fsspec``
  (the record's file list from the Zenodo API) and ``datasets``' download
  manager (cached, resumable), never in tests;
- every data file is one trajectory, named after the file stem unless its
  records carry a ``notebook``/``trajectory_id`` field. Formats: ``.jsonl`` (a
  step per line), ``.json`` (a list of steps, an object holding that list under
  ``steps``/``trajectory``/``cells``/``data``, or an object mapping notebook
  names to such lists), ``.csv`` (a step per row, nested values as JSON text)
  and ``.parquet``;
- a step has the fields below, under any of the listed names. Only the code
  and the output are required; a release may leave out the others: execution
  time (0 when unknown), memory (None), the runtime variables (none) and the
  hash index (computed from the variables, as the recorder computes it). A
  ``time`` field counts as the execution time only when it is a duration, not
  a timestamp. Runtime variables are a list of objects with a ``name`` or an
  object mapping names to either a description (``type``, ``size``, ``repr``)
  or a repr string. The output is text or a list of nbformat outputs;
- the runtime may describe the state before or after each step: names a step's
  code defines for the first time show which (present in the same step's
  variables: after; only in the next step's: before). The trajectory schema
  wants the state after the step, so a "before" trajectory is shifted by one
  (the last step, and one just before a restart, then have no known state).
  The finding is reported per file;
- every data file, and every member of a zip archive, must be under
  :data:`MAX_FILE_BYTES`, and all of them together under :data:`MAX_TOTAL_BYTES`
  (checked before reading, so a small archive that inflates to gigabytes, in
  one member or in many, is refused, not unpacked);
- a trajectory file that exists is replaced only with ``overwrite``.

Nothing is evaluated: JSON is parsed with ``json``, CSV with ``csv``, code with ``ast``.
"""

from __future__ import annotations

import ast
import csv
import datetime as dt
import io
import json
import math
import re
import zipfile
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any, cast

from themisto.exceptions import OptionError, SourceError
from themisto.kernel import joined_text, render_outputs
from themisto.notebook_code import parse_cell
from themisto.provenance import IMPORTED_BY, Provenance, SourceFile, sidecar, write_provenance
from themisto.trajectory import Step, Variable, state_hash, step_from_dict, write_trajectory

RECORD_ID = "14861889"
ZENODO_API = "https://zenodo.org/api/records/{record}"
DATA_SUFFIXES = (".jsonl", ".json", ".csv", ".parquet")
# A data file or zip member larger than this is refused before it is read; and so is a source whose data
# files together are larger than MAX_TOTAL_BYTES (the published record is far smaller than either).
MAX_FILE_BYTES = 512 << 20
MAX_TOTAL_BYTES = 768 << 20
# A number under ``time`` at least this large is a Unix timestamp (after 1973), not a cell's duration.
_EPOCH_SECONDS = 1e8

# canonical field -> the names it may have in the published files; a step must have these
FIELDS: dict[str, tuple[str, ...]] = {
    "code": ("code", "source", "cell_source"),
    "output": ("output", "outputs", "cell_output"),
}
# fields the paper lists that a release may leave out
PUBLISHED: dict[str, tuple[str, ...]] = {
    "execution_time": ("execution_time", "exec_time", "time"),
    "memory_bytes": ("memory_bytes", "memory", "memory_usage"),
    "variables": ("runtime_variables", "variables", "runtime", "vars"),
    "hash_index": ("hash_index", "hash", "state_hash"),
}
_OPTIONAL: dict[str, tuple[str, ...]] = {
    "trajectory_id": ("trajectory_id", "notebook", "notebook_name"),
    "cell_id": ("cell_id", "cell_index", "cell_num"),
    "error": ("error",),
    "restarted": ("restarted", "kernel_restarted"),
}
_LIST_KEYS = ("steps", "trajectory", "cells", "data")
_RECORD_URL = re.compile(r"^(?:https?://(?:www\.)?zenodo\.org/(?:records|record)/|zenodo:)?(\d+)/?$")


def _pick(record: dict[str, Any], names: tuple[str, ...]) -> Any:
    for name in names:
        if name in record:
            return record[name]
    return None


def _check_fields(record: Any, where: str) -> None:
    """Raise a one-line :class:`SourceError` naming the fields found and expected unless ``record`` is a step."""
    if isinstance(record, dict) and all(any(name in record for name in names) for names in FIELDS.values()):
        return
    found = ", ".join(sorted(record)) if isinstance(record, dict) else type(record).__name__
    expected = "; ".join(f"{key} ({'|'.join(names)})" for key, names in FIELDS.items())
    optional = "; ".join(f"{key} ({'|'.join(names)})" for key, names in PUBLISHED.items())
    raise SourceError(f"{where}: not a Themisto step: found fields {found}; expected {expected}; optional {optional}")


def _execution_time(record: dict[str, Any]) -> float:
    """Seconds the step ran; 0 when unknown. A ``time`` that is a timestamp says when, not how long."""
    for name in PUBLISHED["execution_time"]:
        if name not in record:
            continue
        value = record[name]
        if name == "time" and _is_timestamp(value):
            continue
        number = _number(value, float)
        if number is not None:
            return cast(float, number)
    return 0.0


def _is_timestamp(value: Any) -> bool:
    """A date-time text (ISO 8601, JuNE's ``2023-05-06 10:32:26.282``) or a Unix time in seconds."""
    if isinstance(value, str):
        try:
            dt.datetime.fromisoformat(value.strip().replace("Z", "+00:00"))
            return True
        except ValueError:
            number = _number(value, float)
            return number is not None and number >= _EPOCH_SECONDS
    number = _number(value, float)
    return number is not None and number >= _EPOCH_SECONDS


def _output_and_error(raw: Any) -> tuple[str, dict[str, str] | None]:
    """Plain text of a published output field (text or nbformat outputs) and the error it shows, if any.

    nbformat outputs are rendered by :func:`themisto.kernel.outputs.render_outputs`, as the recorder renders them.
    """
    if raw is None:
        return "", None
    if isinstance(raw, str):
        return raw, None
    if not isinstance(raw, list):
        return json.dumps(raw, ensure_ascii=False, sort_keys=True), None
    errors = [out for out in raw if isinstance(out, dict) and out.get("output_type") == "error"]
    error = None
    if errors:
        error = {"ename": joined_text(errors[-1].get("ename")), "evalue": joined_text(errors[-1].get("evalue"))}
    return render_outputs(raw), error


def _variables(raw: Any, where: str) -> list[dict[str, Any]]:
    """Published runtime variables (a list, an object by name, or either as JSON text) as step-schema objects."""
    if raw is None:  # a release without runtime variables
        return []
    if isinstance(raw, str):
        try:
            raw = json.loads(raw) if raw.strip() else []
        except json.JSONDecodeError:
            raise SourceError(f"{where}: runtime variables are not JSON text") from None
    if isinstance(raw, dict):
        raw = [
            dict(desc, name=name) if isinstance(desc, dict) else {"name": name, "repr": desc}
            for name, desc in raw.items()
        ]
    if not isinstance(raw, list):
        raise SourceError(f"{where}: runtime variables are {type(raw).__name__}, expected a list or an object")
    variables = []
    for var in raw:
        if not isinstance(var, dict) or "name" not in var:
            raise SourceError(f"{where}: a runtime variable has no name")
        variables.append(
            {
                "name": str(var["name"]),
                "type": str(_pick(var, ("type", "dtype")) or "unknown"),
                "size_bytes": _number(_pick(var, ("size_bytes", "size", "memory")), int),
                "repr": joined_text(_pick(var, ("repr", "value"))),
                "shape": _shape(var.get("shape")),
                "len": _number(var.get("len"), int),
            }
        )
    return variables


def _shape(raw: Any) -> list[int] | None:
    """The dimensions of a published shape; None when it is missing or not all numbers."""
    if not isinstance(raw, list):
        return None
    dims = [_number(d, int) for d in raw]
    return None if None in dims else [int(d) for d in dims]


def _number(value: Any, kind: type[int] | type[float]) -> Any:
    """``value`` as a finite ``kind``, or None: a field may be missing, text (CSV) or no number at all."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int) and kind is int:
        return value  # as it is: a round trip through float would change integers beyond 2**53
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    if not math.isfinite(number):
        return None
    return int(number) if kind is int else number


def _flag(value: Any) -> bool:
    """A boolean that CSV may spell as text."""
    if isinstance(value, str):
        return value.strip().lower() in ("true", "1", "yes")
    return bool(value)


def convert_steps(records: list[Any], trajectory_id: str, where: str) -> list[Step]:
    """Validate published step records and turn them into trajectory steps.

    Each step passes the trajectory reader's own validation, so a file the importer writes is one the
    builder reads (e.g. every integer fits the dataset's int64 columns).
    """
    steps = []
    for index, record in enumerate(records):
        at = f"{where} step {index}"
        _check_fields(record, at)
        output, error = _output_and_error(_pick(record, FIELDS["output"]))
        raw_error = _pick(record, _OPTIONAL["error"])
        if isinstance(raw_error, dict) and {"ename", "evalue"} <= set(raw_error):
            error = {"ename": str(raw_error["ename"]), "evalue": str(raw_error["evalue"])}
        cell_id = _pick(record, _OPTIONAL["cell_id"])
        published_hash = _pick(record, PUBLISHED["hash_index"])
        fields = {
            "trajectory_id": str(_pick(record, _OPTIONAL["trajectory_id"]) or trajectory_id),
            "step": index,
            "cell_id": str(cell_id) if cell_id is not None else str(index),
            "code": joined_text(_pick(record, FIELDS["code"])),  # nbformat may store a source as a list of lines
            "output": output,
            "error": error,
            "execution_time": _execution_time(record),
            "memory_bytes": _number(_pick(record, PUBLISHED["memory_bytes"]), int),
            "runtime": _variables(_pick(record, PUBLISHED["variables"]), at),
            "state_hash": "" if published_hash is None else joined_text(published_hash),
            "restarted": _flag(_pick(record, _OPTIONAL["restarted"])),
        }
        step = step_from_dict(fields, at)
        if published_hash is None:
            step.state_hash = state_hash(step.runtime)  # the hash index the recorder would have written
        steps.append(step)
    return steps


def runtime_timing(steps: list[Step]) -> str:
    """Whether the steps' runtime is the state ``"after"`` or ``"before"`` each step, or ``"unknown"``.

    The evidence is the names a step's code binds for the first time in its kernel
    session: after the step they are in its own variables; before it, only in the
    next step's.
    """
    after = before = 0
    bound: set[str] = set()
    for index, step in enumerate(steps):
        if step.restarted:
            bound = set()
        new = _bound_names(step.code) - bound
        bound |= new
        if not new or step.error is not None or not any(s.runtime for s in steps):
            continue
        own = {v.name for v in step.runtime}
        following = steps[index + 1] if index + 1 < len(steps) and not steps[index + 1].restarted else None
        if new & own:
            after += 1
        elif following is not None and new & {v.name for v in following.runtime}:
            before += 1
    if after > before:
        return "after"
    # shifting a whole trajectory needs clear evidence: several steps, and twice as many as the other way
    return "before" if before >= 2 and before > 2 * after else "unknown"


def _bound_names(code: str) -> set[str]:
    """Names a cell binds at module level: assignments, imports, functions and classes."""
    try:
        tree = parse_cell(code)
    except (SyntaxError, ValueError):
        return set()
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
        elif isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign, ast.For, ast.With)):
            names.update(n.id for n in ast.walk(node) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Store))
    return names


def shift_to_after(steps: list[Step]) -> list[Step]:
    """Steps whose runtime was the state before each step, given the state after it (the next step's).

    The state after the last step of a kernel session is unknown: it gets no variables.
    """
    shifted = []
    for index, step in enumerate(steps):
        following = steps[index + 1] if index + 1 < len(steps) and not steps[index + 1].restarted else None
        runtime: list[Variable] = following.runtime if following is not None else []
        digest = following.state_hash if following is not None else state_hash([])
        shifted.append(replace(step, runtime=runtime, state_hash=digest))
    return shifted


def _parse_json_document(data: Any, stem: str, where: str) -> Iterator[tuple[str, list[Any]]]:
    if isinstance(data, list):
        yield stem, data
        return
    if isinstance(data, dict):
        for key in _LIST_KEYS:
            if isinstance(data.get(key), list):
                yield str(data.get("trajectory_id") or data.get("notebook") or stem), data[key]
                return
        if data and all(isinstance(v, list) for v in data.values()):
            for name, steps in data.items():
                yield str(name), steps
            return
    found = ", ".join(sorted(data)) if isinstance(data, dict) else type(data).__name__
    raise SourceError(
        f"{where}: no list of steps; found {found}; expected a list or an object with {'/'.join(_LIST_KEYS)}"
    )


def _json_lines(text: str, name: str) -> list[Any]:
    """The records of JSON Lines text; a bad line is named by its number (the decoder only sees one line)."""
    records = []
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                records.append(json.loads(line))
            except json.JSONDecodeError as exc:
                raise SourceError(f"{name}:{number}: not valid JSON ({exc.msg})") from None
    return records


def read_records(name: str, data: bytes) -> Iterator[tuple[str, list[Any]]]:
    """(trajectory name, step records) for every trajectory in one data file's bytes."""
    stem = Path(name).stem
    suffix = Path(name).suffix.lower()
    try:
        if suffix == ".parquet":
            import pyarrow.parquet as pq

            yield stem, pq.read_table(io.BytesIO(data)).to_pylist()
            return
        text = data.decode("utf-8")
        if suffix == ".jsonl":
            yield stem, _json_lines(text, name)
        elif suffix == ".json":
            yield from _parse_json_document(json.loads(text), stem, name)
        elif suffix == ".csv":
            yield stem, list(csv.DictReader(io.StringIO(text)))
        else:
            raise SourceError(f"{name}: unsupported file type; expected one of {', '.join(DATA_SUFFIXES)} or .zip")
    except UnicodeDecodeError:
        raise SourceError(f"{name}: not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise SourceError(f"{name}: not valid JSON ({exc.msg} at line {exc.lineno})") from None
    except (OSError, ValueError) as exc:  # pyarrow raises ArrowInvalid (a ValueError) on a corrupt file
        raise SourceError(f"{name}: cannot read ({exc})") from None


class _Budget:
    """The bytes the importer may still read: every data file of a source together."""

    def __init__(self) -> None:
        self.left = MAX_TOTAL_BYTES

    def check_total(self, what: str, size: int) -> None:
        """SourceError if ``size`` more bytes (of ``what``) would pass the total."""
        if size > self.left:
            raise SourceError(f"{what}: the data files are over {MAX_TOTAL_BYTES} bytes uncompressed in all")

    @staticmethod
    def check_file(what: str, size: int) -> None:
        """SourceError if one file (``what``) of ``size`` bytes is over the limit of one file."""
        if size > MAX_FILE_BYTES:
            raise SourceError(f"{what} is {size} bytes uncompressed, over the {MAX_FILE_BYTES}-byte limit")

    def limit(self, what: str, size: int) -> int:
        """The most bytes ``what``, declared ``size`` bytes long, may have; SourceError if that is already too many."""
        self.check_file(what, size)
        self.check_total(what, size)
        return min(MAX_FILE_BYTES, self.left)

    def take(self, what: str, data: bytes) -> bytes:
        """Count ``data`` (read with at most one byte past its limit) against the budget; SourceError if over."""
        self.limit(what, len(data))
        self.left -= len(data)
        return data


def _data_files(path: Path, name: str | None = None, budget: _Budget | None = None) -> Iterator[tuple[str, bytes]]:
    """(name, bytes) of every data file in a file, folder or zip archive, in name order, within ``budget``.

    ``name`` stands for the file's own name when the path does not carry it (a download cache entry).
    """
    name = name or path.name
    budget = budget or _Budget()
    if not path.exists():  # before the suffix decides how to open it: a missing .zip is missing, not broken
        raise SourceError(f"no such file or folder: {path}")
    if path.is_dir():
        for child in sorted(p for p in path.rglob("*") if p.is_file()):
            if child.suffix.lower() in (*DATA_SUFFIXES, ".zip"):
                yield from _data_files(child, budget=budget)
    elif Path(name).suffix.lower() == ".zip":
        try:
            with zipfile.ZipFile(path) as archive:
                members = [
                    info
                    for info in sorted(archive.infolist(), key=lambda i: i.filename)
                    if not info.is_dir() and Path(info.filename).suffix.lower() in DATA_SUFFIXES
                ]
                for info in members:  # before any member is read
                    budget.check_file(f"{name}: member {info.filename}", info.file_size)
                budget.check_total(name, sum(info.file_size for info in members))
                for info in members:
                    what = f"{name}: member {info.filename}"
                    limit = budget.limit(what, info.file_size)
                    with archive.open(info) as member:
                        # a member may inflate past the size its header declares: never read more
                        data = member.read(limit + 1)
                    yield info.filename, budget.take(what, data)
        except zipfile.BadZipFile:
            raise SourceError(f"{name}: not a valid zip archive") from None
    else:
        limit = budget.limit(name, path.stat().st_size)
        with path.open("rb") as handle:
            yield name, budget.take(name, handle.read(limit + 1))


def download(source: str) -> list[tuple[Path, str]]:
    """Fetch a Zenodo record (all its files) or a file URL into the ``datasets`` cache.

    Returns (cached path, file name) pairs: the cache names files by hash, the name keeps the format.
    """
    import datasets
    import fsspec

    match = _RECORD_URL.match(source)
    if match:
        api = ZENODO_API.format(record=match.group(1))
        try:
            with fsspec.open(api, "rb") as handle:
                record = json.loads(handle.read())
            files = [(entry["links"]["self"], entry["key"]) for entry in record["files"]]
        except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
            raise SourceError(f"cannot list the files of Zenodo record {match.group(1)}: {exc}") from None
    else:
        files = [(source, source.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1])]
    try:
        paths = datasets.DownloadManager().download([url for url, _ in files])
    except (OSError, ConnectionError) as exc:
        raise SourceError(f"cannot download {source}: {exc}") from None
    return [(Path(path), name) for path, (_, name) in zip(paths, files, strict=True)]


def _is_online(source: str) -> bool:
    """A URL, ``zenodo:ID``, or a bare record number that is not also a local path."""
    if source.startswith(("http://", "https://", "zenodo:")):
        return True
    return bool(_RECORD_URL.match(source)) and not Path(source).exists()


def load_trajectories(source: str, notice: Callable[[str], None] | None = None) -> list[tuple[list[Step], SourceFile]]:
    """Every trajectory of a local or online Themisto source, as steps whose runtime is the state after them,
    with the data file it came from.

    ``notice`` receives one line per trajectory whose runtime turned out to be the state before each step
    (and was shifted) or could not be told.
    """
    online = _is_online(source)
    locations = download(source) if online else [(Path(source), None)]
    trajectories: list[tuple[list[Step], SourceFile]] = []
    for location, file_name in locations:
        # a local data file is named by its path; a download, a folder's file or an archive member by its name
        plain = not online and location.is_file() and location.suffix.lower() in DATA_SUFFIXES
        for name, data in _data_files(location, file_name):
            made = SourceFile.of(name, data, location if plain else None)
            for trajectory_id, records in read_records(name, data):
                steps = convert_steps(records, trajectory_id, f"{name}")
                timing = runtime_timing(steps)
                if timing == "before":
                    steps = shift_to_after(steps)
                if timing != "after" and notice is not None:
                    notice(
                        f"{name} ({trajectory_id}): runtime is the state {timing} each step"
                        + (", shifted to the state after it" if timing == "before" else ", kept as it is")
                    )
                trajectories.append((steps, made))
    if not trajectories:
        raise SourceError(f"{source}: no data files ({', '.join(DATA_SUFFIXES)} or .zip) found")
    return trajectories


def import_zenodo(
    source: str, out_dir: str | Path, notice: Callable[[str], None] | None = None, overwrite: bool = False
) -> list[Path]:
    """Convert a Themisto source to one trajectory JSONL file per trajectory in ``out_dir``.

    Each is written with its provenance: the data file it came from and its sha256 (no recording
    options: Themisto did not record it). ``notice`` is told how each file's runtime was read.
    A trajectory file that exists (one recorded, say) is replaced only with ``overwrite``; otherwise
    :class:`OptionError` names it before any file is written.
    """
    out_dir = Path(out_dir)
    targets: dict[Path, tuple[list[Step], SourceFile]] = {}
    for steps, made in load_trajectories(source, notice):
        if not steps:
            continue
        safe = re.sub(r"[^A-Za-z0-9_.-]+", "_", steps[0].trajectory_id)
        target = out_dir / f"{safe}.jsonl"
        if target in targets:
            raise SourceError(f"{source}: two trajectories are named {steps[0].trajectory_id!r}")
        if not overwrite and (target.exists() or sidecar(target).exists()):
            raise OptionError("{path} exists; replace it with {overwrite:True}", path=target)
        targets[target] = steps, made
    for target, (steps, made) in targets.items():
        # the provenance first: a trajectory file never stands without it
        write_provenance(target, Provenance(IMPORTED_BY, made))
        write_trajectory(target, steps)  # a half-converted file never replaces a complete one
    return list(targets)
