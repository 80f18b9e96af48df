"""Materialise a build: every config and split as Parquet, then the dataset card, moved in atomically.

Five configs (see :mod:`themisto.vocabulary`): ``trajectories`` (the raw steps,
one split ``full``) and the two tasks, each without and with the runtime block
(``X`` / ``X_runtime``), with splits ``test`` (the sample) and ``full`` (every
eligible example).

``datasets`` 4 and later refuse loading scripts, so :func:`build_dataset`
writes every split as ``<folder>/<config>/<split>-<hash>.parquet`` plus a
``README.md`` dataset card whose YAML ``configs:`` block names those files.
``datasets.load_dataset(folder, config, split=...)`` then reads the folder as
it is, locally or after ``themisto publish``; :func:`parquet_path` finds a
split's file through the card.

``<hash>`` is the start of the file's SHA-256. ``load_dataset`` keys its cache
of a local folder on the card's ``configs`` block (and the folder's name), not
on the files' contents, so with fixed file names a rebuild into the same folder
would be served from the cache of the previous build. Content-hashed names make
every different build a different ``configs`` block, hence a different cache
entry, while an identical rebuild keeps its names (and its cache).

:func:`build_dataset` reads the trajectories twice: selection
(:func:`themisto.building.tasks.select`), then one pass of
:func:`themisto.building.tables.iter_tables` whose Arrow tables of all nine
splits stream straight into ``pyarrow`` Parquet writers with the configs' own
schemas (``load_dataset`` sees the same features), in row groups of a fixed
number of rows.

A build is byte-for-byte reproducible from the same trajectories and options:
rows come out in trajectory-file order, the sample is drawn with a seeded
``random.Random``, floats are copied from the JSON unchanged, row groups have
fixed sizes, and neither the Parquet metadata nor the card holds a timestamp
or an absolute path.
"""

from __future__ import annotations

import hashlib
import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from themisto.building.card import check_license, dataset_card, read_data_files
from themisto.building.prompts import RenderOptions
from themisto.building.tables import BATCH_ROWS, config_features, config_splits, iter_tables
from themisto.building.tasks import Selection, SelectionOptions, select
from themisto.exceptions import InputError, OptionError
from themisto.progress import Progress
from themisto.vocabulary import CONFIG_NAMES, OUTPUT_PREDICTION, RUNTIME_SUFFIX, TRAJECTORIES


@dataclass
class BuildSummary:
    """What a build produced: the selection, the options and the row counts per config and split."""

    selection: Selection
    selection_options: SelectionOptions
    render_options: RenderOptions
    rows: dict[str, dict[str, int]]
    trajectory_files: list[str]  # file names only, so the card does not depend on where inputs lie
    files: dict[str, dict[str, str]]  # per config and split: the Parquet file, relative to the build folder


# Hex digits of the SHA-256 in a Parquet file's name: enough that no two builds collide.
NAME_HASH_CHARS = 16


def parquet_path(folder: str | Path, config: str, split: str) -> Path:
    """The Parquet file of one split of one config of a build, as the build's dataset card names it."""
    files = read_data_files(folder)
    if (config, split) not in files:
        raise InputError(f"{folder}: the dataset card names no file for config {config!r}, split {split!r}")
    return Path(folder) / files[config, split]


def _hashed_name(path: Path) -> Path:
    """Rename a finished Parquet file to ``<split>-<hash>.parquet`` after its content; return the new path."""
    with path.open("rb") as handle:
        digest = hashlib.file_digest(handle, "sha256").hexdigest()[:NAME_HASH_CHARS]
    return path.rename(path.with_name(f"{path.stem}-{digest}{path.suffix}"))


class _SplitWriter:
    """One split's Parquet file, in row groups of exactly ``BATCH_ROWS`` rows (the last one shorter).

    Fixed row groups keep the bytes independent of how the input was batched.
    zstd rather than the default snappy: a third of the size for the same CPU time
    (each prompt repeats its history), and every Parquet reader `datasets` uses has it.
    """

    def __init__(self, path: Path, schema: pa.Schema) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self._writer = pq.ParquetWriter(path, schema, compression="zstd")
        self._pending: list[pa.Table] = []
        self._pending_rows = 0
        self.rows = 0

    def write(self, table: pa.Table) -> None:
        self._pending.append(table)
        self._pending_rows += len(table)
        if self._pending_rows >= BATCH_ROWS:
            self._flush(final=False)

    def _flush(self, final: bool) -> None:
        table = pa.concat_tables(self._pending)
        whole = len(table) if final else len(table) - len(table) % BATCH_ROWS
        if whole:
            self._writer.write_table(table.slice(0, whole), row_group_size=BATCH_ROWS)
            self.rows += whole
        rest = table.slice(whole)
        self._pending, self._pending_rows = ([rest] if len(rest) else []), len(rest)

    def close(self) -> int:
        """Write what is pending, close the file and return its row count."""
        if self._pending:
            self._flush(final=True)
        self._writer.close()
        return self.rows


def build_dataset(
    trajectories: Sequence[str | Path],
    out_dir: str | Path,
    selection: SelectionOptions | None = None,
    render: RenderOptions | None = None,
    license_id: str = "apache-2.0",
    progress: Progress | None = None,
) -> BuildSummary:
    """Write every config of ``trajectories`` as Parquet plus a dataset card into ``out_dir``.

    Two passes over the input: selection reads and validates every step (so bad
    input fails before any rendering), then one pass renders and writes all splits.
    Files are staged next to ``out_dir`` and moved in only when complete.
    ``progress`` follows both passes: ``"select"`` counts files, ``"write"`` steps.
    """
    check_license(license_id)  # before any work: the card could not be written
    selection = selection or SelectionOptions()
    render = render or RenderOptions()
    out_dir = Path(out_dir)
    paths = [Path(p) for p in trajectories]
    chosen = select(paths, selection, progress)
    for task, ids in chosen.tasks.items():
        if not ids.full:
            raise OptionError(
                "no eligible {task} examples among {steps} steps ({errors} exceptions);"
                " see {include_errors}, {include_empty}, {min_history}, {quantile} and {stable_only}",
                task=task,
                steps=chosen.steps,
                errors=chosen.errors,
            )
    out_dir.parent.mkdir(parents=True, exist_ok=True)
    # staged in the same file system as out_dir, so moving the result in is a rename, not a copy
    with tempfile.TemporaryDirectory(prefix=".themisto-build-", dir=out_dir.parent) as tmp:
        staged = Path(tmp)
        writers = {
            (config, split): _SplitWriter(staged / config / f"{split}.parquet", config_features(config).arrow_schema)
            for config in CONFIG_NAMES
            for split in config_splits(config)
        }
        try:
            written = 0
            for piece in iter_tables(paths, chosen, selection.max_context_chars, render):
                writers[piece.config, piece.split].write(piece.table)
                if piece.config == TRAJECTORIES and progress is not None:  # one trajectories piece per batch of steps
                    written += len(piece.table)
                    progress("write", written, chosen.steps)
        finally:
            counts = {key: writer.close() for key, writer in writers.items()}
        rows = {config: {split: counts[config, split] for split in config_splits(config)} for config in CONFIG_NAMES}
        files = {
            config: {
                split: _hashed_name(writers[config, split].path).relative_to(staged).as_posix()
                for split in config_splits(config)
            }
            for config in CONFIG_NAMES
        }
        summary = BuildSummary(chosen, selection, render, rows, [p.name for p in paths], files)
        showcase = _showcase_row(staged / files[OUTPUT_PREDICTION + RUNTIME_SUFFIX]["test"])
        (staged / "README.md").write_text(dataset_card(summary, license_id, staged, showcase), encoding="utf-8")
        _replace_build(staged, out_dir)
    return summary


def _showcase_row(path: Path) -> dict[str, Any] | None:
    """The first row of a runtime split whose state has variables (else its first row)."""
    rows = pq.read_table(path, columns=["example_id", "runtime_text", "runtime"]).to_pylist()
    return next((row for row in rows if row["runtime"]), rows[0] if rows else None)


def _replace_build(staged: Path, out_dir: Path) -> None:
    """Move a finished build into ``out_dir``, replacing only the files a build owns."""
    out_dir.mkdir(parents=True, exist_ok=True)
    for config in CONFIG_NAMES:
        shutil.rmtree(out_dir / config, ignore_errors=True)
        shutil.move(str(staged / config), str(out_dir / config))
    shutil.move(str(staged / "README.md"), str(out_dir / "README.md"))
