"""How a trajectory was made, saved beside it as ``<stem>.provenance.json``.

A sidecar file rather than a header line: every reader of trajectory JSONL
(:func:`themisto.trajectory.iter_steps`, the builder, ``jq``) keeps seeing steps
only, and :func:`themisto.trajectory.trajectory_files` lists ``*.jsonl`` only.
It holds the versions of Themisto, of the kernel's Python and ipykernel and of its main libraries,
the step schema version, every saved option of the options class that made it
(:func:`themisto.kernel.saved_options`: timeout, memory and CPU limits, output
and repr caps, kernel; for a recording, which cells ran in what order), the working
directory and its policy (the source's folder, or one given), and the source
file's name, place and sha256.

Who writes it: ``record`` (when a trajectory file is started, before its first
step), ``import-zenodo`` (the data file a trajectory came from; no options,
Themisto did not record it) and ``stability`` (a copy beside each annotated
trajectory). Who reads it: ``record --resume``, which continues with the
recorded options, ``stability`` and ``exec-score``, which replay with them (see
:func:`themisto.kernel.with_recorded`), each reading the options of its own
class, and the build (versions and source).

Paths are written relative to the sidecar's folder, so a corpus can move as a
whole; in memory they are absolute. A file is written whole through a
temporary file, so a reader never sees half of one.
"""

from __future__ import annotations

import hashlib
import json
import os
import types
import typing
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Generic, TypeVar, overload

from themisto import __version__
from themisto.exceptions import InputError, OptionError
from themisto.filesystem import write_atomically
from themisto.kernel import KernelOptions, saved_options
from themisto.trajectory import SCHEMA_VERSION

SUFFIX = ".provenance.json"
KEY = "themisto_provenance"  # the format version of the file, and a mark that it is one
FORMAT = 1
RECORDED_BY = "record"
IMPORTED_BY = "import-zenodo"
# The working directory was the source file's folder (the default), or one the user gave.
SOURCE_FOLDER, GIVEN = "source", "given"


@dataclass(frozen=True)
class SourceFile:
    """The file a trajectory was made from."""

    name: str
    sha256: str
    path: Path | None = None  # where it was, when it was a plain local file

    @classmethod
    def of(cls, name: str, data: bytes, path: Path | None = None) -> SourceFile:
        """A source file named ``name`` holding ``data``, found at ``path`` if it is a plain local file."""
        return cls(name, hashlib.sha256(data).hexdigest(), None if path is None else path.resolve())


Options = TypeVar("Options", bound=KernelOptions)


@dataclass(frozen=True)
class Provenance(Generic[Options]):
    """How one trajectory was made; ``options`` as the class its reader asked for."""

    made_by: str  # RECORDED_BY or IMPORTED_BY
    source: SourceFile
    themisto: str = __version__
    schema: int = SCHEMA_VERSION  # the step schema version of themisto.trajectory
    python: str | None = None  # the kernel's Python version
    ipykernel: str | None = None  # the kernel's ipykernel version
    # the kernel's installed libraries' versions (kernel.inside.snapshot.LIBRARIES); empty when not recorded
    libraries: dict[str, str] = field(default_factory=dict)
    options: Options | None = None  # None: not recorded by Themisto (an import)
    workdir: Path | None = None  # the folder the kernel ran in
    # the kernel's confinement: "landlock-abi-N" (with "+network" where TCP was allowed), "none", or None: unknown
    sandbox: str | None = None
    # steps a killed recording left unfinished that a resume ran again, in the state it rebuilt by replay
    resumed_steps: tuple[int, ...] = ()

    def versions(self) -> dict[str, str | None]:
        """What made the steps, beyond the options: Themisto, the schema and the kernel's versions."""
        return {
            "themisto": self.themisto,
            "schema": str(self.schema),
            "python": self.python,
            "ipykernel": self.ipykernel,
        }


def sidecar(trajectory: Path) -> Path:
    """The provenance file of a trajectory file."""
    return trajectory.with_name(trajectory.stem + SUFFIX)


def _relative(path: Path, folder: Path) -> str:
    return os.path.relpath(path, folder.resolve())


def write_provenance(trajectory: Path, provenance: Provenance[Any]) -> Path:
    """Write the sidecar of ``trajectory`` at once (through a temporary file); returns its path."""
    path = sidecar(trajectory)
    folder = path.parent
    source = asdict(provenance.source)
    source["path"] = None if provenance.source.path is None else _relative(provenance.source.path, folder)
    data: dict[str, Any] = {
        KEY: FORMAT,
        "made_by": provenance.made_by,
        "themisto": provenance.themisto,
        "schema": provenance.schema,
        "python": provenance.python,
        "ipykernel": provenance.ipykernel,
        "libraries": provenance.libraries,
        "sandbox": provenance.sandbox,
        "source": source,
    }
    if provenance.resumed_steps:  # only a resumed recording says so: every other file is as before
        data["resumed_steps"] = list(provenance.resumed_steps)
    if provenance.options is not None:
        saved = saved_options(type(provenance.options))
        options = {name: getattr(provenance.options, name) for name in saved if name != "workdir"}
        data["options"] = options
        data["workdir"] = {
            "policy": SOURCE_FOLDER if provenance.options.workdir is None else GIVEN,
            "path": None if provenance.workdir is None else _relative(provenance.workdir, folder),
        }
    folder.mkdir(parents=True, exist_ok=True)
    write_atomically(path, json.dumps(data, indent=2, ensure_ascii=False) + "\n")
    return path


@overload
def read_provenance(trajectory: Path) -> Provenance[KernelOptions] | None: ...
@overload
def read_provenance(trajectory: Path, kind: type[Options]) -> Provenance[Options] | None: ...
def read_provenance(trajectory: Path, kind: type[KernelOptions] = KernelOptions) -> Provenance[Any] | None:
    """The provenance of a trajectory file, its options as ``kind``; None when it has no sidecar.

    (None: recorded before provenance, or copied bare.)
    """
    path = sidecar(trajectory)
    if not path.is_file():
        return None
    folder = path.parent.resolve()
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        if data.get(KEY) != FORMAT:
            raise ValueError(f"{KEY} is {data.get(KEY)!r}, expected {FORMAT}")
        raw_source = data["source"]
        source = SourceFile(
            str(raw_source["name"]),
            str(raw_source["sha256"]),
            None if raw_source.get("path") is None else (folder / raw_source["path"]).resolve(),
        )
        options = workdir = None
        if data.get("options") is not None:
            # an option this version does not record is ignored (a trust option a file names among them: it is
            # never the file's to set); one the file lacks keeps its default
            saved = saved_options(kind)
            values = {name: value for name, value in data["options"].items() if name in saved and name != "workdir"}
            for name, value in values.items():
                _check_option(kind, name, value)
            place = data["workdir"]
            workdir = None if place["path"] is None else (folder / place["path"]).resolve()
            options = kind(**values, workdir=workdir if place["policy"] == GIVEN else None)
        return Provenance(
            made_by=str(data["made_by"]),
            source=source,
            themisto=str(data["themisto"]),
            schema=int(data["schema"]),
            python=data.get("python"),
            ipykernel=data.get("ipykernel"),
            libraries={str(name): str(version) for name, version in (data.get("libraries") or {}).items()},
            sandbox=data.get("sandbox"),
            resumed_steps=tuple(int(step) for step in data.get("resumed_steps") or ()),
            options=options,
            workdir=workdir,
        )
    # OptionError: a value the options class refuses (its message names the option as the file does, by keyword)
    except (OSError, UnicodeDecodeError, ValueError, KeyError, TypeError, AttributeError, OptionError) as exc:
        raise InputError(f"{path}: not a Themisto provenance file ({type(exc).__name__}: {exc})") from None


def _check_option(kind: type[KernelOptions], name: str, value: Any) -> None:
    """Raise ValueError unless ``value`` has the type ``kind`` declares for option ``name``."""
    hint = typing.get_type_hints(kind)[name]
    kinds = typing.get_args(hint) if isinstance(hint, types.UnionType) else (hint,)
    kinds += (int,) if float in kinds else ()  # JSON may write a whole float as an integer
    if not isinstance(value, kinds) or (isinstance(value, bool) and bool not in kinds):
        raise ValueError(f"option {name} is {value!r}")


def copy_provenance(trajectory: Path, copy: Path, kind: type[KernelOptions]) -> None:
    """Give ``copy`` (a rewritten ``trajectory``, e.g. annotated) the same provenance, or none if it has none.

    ``kind`` is the options class that made it, so every option it saved is kept.
    """
    provenance = read_provenance(trajectory, kind)
    if provenance is not None:
        write_provenance(copy, provenance)  # paths are rewritten relative to the copy's folder
    elif sidecar(copy) != sidecar(trajectory):
        sidecar(copy).unlink(missing_ok=True)  # a stale sidecar must not describe the new copy
