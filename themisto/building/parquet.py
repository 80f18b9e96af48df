"""Materialise a build: every config and split as Parquet, then the dataset card, moved in atomically.

Seven configs (see :mod:`themisto.vocabulary`): ``trajectories`` (the raw steps,
one split ``full``) and the two tasks, each without the runtime block, with it
and with a placebo block (``X`` / ``X_runtime`` / ``X_placebo``), with splits
``test`` (the sample) and ``full`` (every eligible example).

``datasets`` 4 and later refuse loading scripts, so :func:`build_dataset`
writes every split as ``<folder>/<config>/<split>-<hash>.parquet`` plus a
``README.md`` dataset card whose YAML ``configs:`` block names those files.
``datasets.load_dataset(folder, config, split=...)`` then reads the folder as
it is, locally or after ``themisto publish``;
:func:`themisto.building.card_reading.parquet_path` finds a split's file through the card.

``<hash>`` is the start of the file's SHA-256. ``load_dataset`` keys its cache
of a local folder on the card's ``configs`` block (and the folder's name), not
on the files' contents, so with fixed file names a rebuild into the same folder
would be served from the cache of the previous build. Content-hashed names make
every different build a different ``configs`` block, hence a different cache
entry, while an identical rebuild keeps its names (and its cache).

:func:`build_dataset` reads the trajectories twice: selection
(:func:`themisto.building.selection.select`), then one pass of
:func:`themisto.building.tables.iter_tables` whose Arrow tables of all thirteen
splits stream straight into ``pyarrow`` Parquet writers with the configs' own
schemas (``load_dataset`` sees the same features), in row groups of a fixed
number of rows. With ``jobs=2`` that pass runs twice at once, in this process
and a forked one, each writing only its own configs (``_SECOND_CONFIGS``: the
placebo arms in the second). The first renders the true prompt pairs and hands
the second, batch by batch, what the configs share (the targets,
``runtime_only``) and each step's prompt head as an Arrow file in the staging
folder, which the second maps instead of rendering the history again. Each
split's writer gets the tables a single pass gives it, so the files are the
same bytes (``tests/building/test_parallel_build.py``).

A build is atomic: it is written into a staging folder next to the output
folder and swapped in with one ``renameat2(RENAME_EXCHANGE)``, so a build
killed at any moment leaves the previous complete build or the new one,
never a mix (where the file system cannot swap, the output folder is missing
for an instant, and the next build puts the previous one back if killed
then). Entries of the output folder that a build does not write (a
``.git`` folder, a license file) are carried over as hard links. One build
at a time per output folder (a lock, ``.<folder>.lock``); leftover staging
folders of killed builds are removed by the next build.

A build is byte-for-byte reproducible from the same trajectories and options:
rows come out in trajectory-file order, the sample is drawn with a seeded
``random.Random``, floats are copied from the JSON unchanged, row groups have
fixed sizes, and neither the Parquet metadata nor the card holds a timestamp
or an absolute path.
"""

from __future__ import annotations

import contextlib
import gc
import hashlib
import logging
import multiprocessing
import os
import re
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq

from themisto.building import BUILD_JOBS
from themisto.building.card import check_license, dataset_card, source_notes
from themisto.building.card_reading import read_data_files
from themisto.building.forked import Forked, error_of
from themisto.building.prompts import RenderOptions
from themisto.building.selection import Selection, SelectionOptions, select
from themisto.building.summary import BuildSummary
from themisto.building.tables import BATCH_ROWS, PassLink, config_features, config_splits, iter_tables
from themisto.exceptions import InputError, OptionError, OutputError
from themisto.filesystem import ExclusiveLock, exchange, lock_path, prepare_output_folder
from themisto.progress import Progress
from themisto.vocabulary import (
    CONFIG_NAMES,
    OUTPUT_PREDICTION,
    PLACEBO_SUFFIX,
    RUNTIME_SUFFIX,
    arm_of,
)

log = logging.getLogger(__name__)

# A build is staged in ``.themisto-build-<8 random characters>.<output folder name>``, next to the
# output folder; without an atomic swap the previous build waits in ``.themisto-previous-...``.
STAGING_PREFIX = ".themisto-build-"
PREVIOUS_PREFIX = ".themisto-previous-"
_LEFTOVER = re.compile(r"\.themisto-(build|previous)-[a-z0-9_]{8}\.(.+)")


# Hex digits of the SHA-256 in a Parquet file's name: enough that no two builds collide.
NAME_HASH_CHARS = 16


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
    jobs: int = 1,
) -> BuildSummary:
    """Write every config of ``trajectories`` as Parquet plus a dataset card into ``out_dir``.

    Two passes over the input: selection reads and validates every step (an
    invalid trajectory file is skipped with a warning and listed in
    ``summary.selection.skipped``), then one pass renders and writes all
    splits. Files are staged next to ``out_dir`` and swapped in only when
    complete (see the module's notes on atomic builds).
    ``progress`` follows both passes: ``"select"`` counts files, ``"write"`` steps. ``jobs=2`` writes the
    placebo configs in a second process (forked), beside the others: the same bytes in less time on two cores.
    """
    if jobs not in BUILD_JOBS:
        raise OptionError(
            "{jobs:" + str(jobs) + "}: a build runs in 1 or 2 processes (it splits its configs between at most two)"
        )
    check_license(license_id)  # before any work: the card could not be written
    selection = selection or SelectionOptions()
    render = render or RenderOptions()
    out_dir = build_folder(Path(out_dir), [Path(path) for path in trajectories])
    names = [f"{prefix}xxxxxxxx.{out_dir.name}" for prefix in (STAGING_PREFIX, PREVIOUS_PREFIX)]
    prepare_output_folder(out_dir.parent, [*names, lock_path(out_dir).name])
    with ExclusiveLock(lock_path(out_dir), f"dataset folder {out_dir}"):
        _remove_leftovers(out_dir)
        return _build_locked([Path(p) for p in trajectories], out_dir, selection, render, license_id, progress, jobs)


def build_folder(out_dir: Path, inputs: Sequence[Path]) -> Path:
    """The folder a build of ``inputs`` replaces: ``out_dir``, or the folder a link there points to.

    Raises :class:`OutputError`, before anything is written, where the build would lose a file: the folder
    holds an input, or holds anything but a previous build (its card names its files; the entries a build
    does not write, a ``.git`` or a license, are kept), or it is a file or a link to no folder.
    """
    if out_dir.is_symlink():
        target = out_dir.resolve()
        if not target.is_dir():
            raise OutputError(f"{out_dir} is a link to {target}, which is not a folder")
        out_dir = target  # the link stays a link: the build replaces the folder it points to
    if not out_dir.name:  # "." or "/": the staging folder is named after the folder's own name
        out_dir = out_dir.resolve()
    if out_dir.exists() and not out_dir.is_dir():
        raise OutputError(f"{out_dir} is a file, not a folder")
    if not out_dir.is_dir():
        return out_dir
    folder = out_dir.resolve()
    for path in inputs:
        resolved = path.resolve()
        if resolved == folder or folder in resolved.parents:
            raise OutputError(
                f"input {path} lies in the output folder {out_dir}, which a build replaces whole; write the build"
                " to another folder"
            )
    entries = sorted(entry.name for entry in out_dir.iterdir())
    if entries:
        try:
            read_data_files(out_dir)
        except InputError:
            raise OutputError(
                f"{out_dir} holds files that are not a Themisto build ({', '.join(entries[:3])}"
                f"{', ...' if len(entries) > 3 else ''}), which a build would delete; write the build to a new or"
                " empty folder"
            ) from None
    return out_dir


def _build_locked(
    paths: list[Path],
    out_dir: Path,
    selection: SelectionOptions,
    render: RenderOptions,
    license_id: str,
    progress: Progress | None,
    jobs: int,
) -> BuildSummary:
    chosen = select(paths, selection, progress, jobs)
    for path, reason in chosen.skipped.items():
        log.warning("skipped %s: %s", path, reason)
    paths = [path for path in paths if path not in chosen.skipped]
    for task, ids in chosen.tasks.items():
        if not ids.full:
            raise OptionError(
                "no eligible {task} examples among {steps} steps ({errors} exceptions);"
                " see {include_errors}, {include_empty}, {min_history}, {quantile} and {stable_only}",
                task=task,
                steps=chosen.steps,
                errors=chosen.errors,
            )
    # staged in the same file system as out_dir, so moving the result in is a rename, not a copy
    staged = Path(tempfile.mkdtemp(prefix=STAGING_PREFIX, suffix=f".{out_dir.name}", dir=out_dir.parent))
    try:
        work = _Pass(paths, chosen, selection, render, staged)
        with _frozen_heap():
            counts = work.write(CONFIG_NAMES, None, progress) if jobs == 1 else _write_in_two(work, progress)
        rows = {config: {split: counts[config, split] for split in config_splits(config)} for config in CONFIG_NAMES}
        files = {
            config: {
                split: _hashed_name(_split_path(staged, config, split)).relative_to(staged).as_posix()
                for split in config_splits(config)
            }
            for config in CONFIG_NAMES
        }
        sources = [_source_name(path) for path in paths]
        summary = BuildSummary(
            selection=chosen,
            selection_options=selection,
            render_options=render,
            rows=rows,
            trajectory_files=[p.name for p in paths],
            files=files,
            sources=sources,
        )
        summary.attributions, summary.author_pythons = source_notes(paths)
        showcase = _showcase_row(staged / files[OUTPUT_PREDICTION + RUNTIME_SUFFIX]["test"])
        (staged / "README.md").write_text(dataset_card(summary, license_id, staged, showcase), encoding="utf-8")
        _replace_build(staged, out_dir)
    finally:
        shutil.rmtree(staged, ignore_errors=True)  # after a swap: the previous build
    return summary


@contextlib.contextmanager
def _frozen_heap() -> Iterator[None]:
    """The objects alive before the second pass left out of its garbage collections, and put back after.

    The pass allocates for every step while the selection, the modules and the caches stay alive: frozen,
    they are not traversed again by each full collection (about 4% of each writing process), nor written to
    by the collector in a forked second process (a copy of the page each, Python's own advice for gc.freeze).
    """
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _split_path(staged: Path, config: str, split: str) -> Path:
    """Where a split's Parquet file is written, before it is named after its content."""
    return staged / config / f"{split}.parquet"


@dataclass(frozen=True)
class _Pass:
    """What the second pass of a build reads and where it writes: its configs are chosen per call."""

    paths: list[Path]
    chosen: Selection
    selection: SelectionOptions
    render: RenderOptions
    staged: Path

    def write(
        self, configs: Sequence[str], link: PassLink | None, progress: Progress | None
    ) -> dict[tuple[str, str], int]:
        """Write the splits of ``configs`` and return their row counts (``link``: see ``iter_tables``)."""
        writers = {
            (config, split): _SplitWriter(_split_path(self.staged, config, split), config_features(config).arrow_schema)
            for config in configs
            for split in config_splits(config)
        }
        try:
            pieces = iter_tables(self.paths, self.chosen, self.selection, self.render, configs, link, progress)
            for piece in pieces:
                writers[piece.config, piece.split].write(piece.table)
        finally:
            counts = {key: writer.close() for key, writer in writers.items()}
        return counts


# The configs the second process writes: the placebo arms. It receives the prompt heads (exchange_batch); the
# placebo's choice of a state and its runtime blocks, and the Parquet writing of two configs, cost about what the
# first process's true prompt pairs, runtime_only, the batch files and its five configs cost it (measured on
# 20,000 synthetic steps, each process's CPU in one run: the raw steps or the next-cell plain config in the
# second leave it 0.3 to 0.6 s behind; docs/performance.md).
_SECOND_CONFIGS = tuple(config for config in CONFIG_NAMES if arm_of(config) == PLACEBO_SUFFIX)


def _write_in_two(work: _Pass, progress: Progress | None) -> dict[tuple[str, str], int]:
    """Write the configs of ``_SECOND_CONFIGS`` in a forked process and the others here, at once; every split's
    row count.

    The first process sends each batch's shared columns and prompt heads to the second (``iter_tables``), as
    files in the staging folder; the second answers with its row counts or its error.
    """
    link_in, link_out = multiprocessing.get_context("fork").Pipe(duplex=True)  # batches one way, their receipts back
    second = Forked("the build's second process", _second_process, work, PassLink(link_in, work.staged), link_out)
    link_in.close()
    first = tuple(config for config in CONFIG_NAMES if config not in _SECOND_CONFIGS)
    try:
        try:
            counts = work.write(first, PassLink(link_out, work.staged), progress)
        finally:
            link_out.close()  # where this process failed, the second one stops at its next batch
    except (BrokenPipeError, EOFError) as exc:  # the second process ended first: its error is the build's
        answer = second.answer()
        if "error" not in answer:
            raise
        raise error_of(answer) from exc
    except BaseException:
        second.process.join()  # its answer is only that the link closed
        raise
    return {**counts, **{(config, split): count for config, split, count in second.result()}}


def _second_process(work: _Pass, link: PassLink, first_end: Connection) -> list[tuple[str, str, int]]:
    """The second process of a two-process build: write the configs of ``_SECOND_CONFIGS``; their row counts."""
    # the first process's end of the link, inherited: held open here, the end of file that tells this process the
    # first one failed would never come, and the build would wait for it for good
    first_end.close()
    return [(config, split, rows) for (config, split), rows in work.write(_SECOND_CONFIGS, link, None).items()]


def _source_name(trajectory: Path) -> str | None:
    """The source file a trajectory's provenance names, for the card's count of sessions; None if unknown."""
    from themisto.provenance import read_provenance

    try:
        provenance = read_provenance(trajectory)
    except InputError:  # a damaged provenance file: the card counts it as unknown, the build does not need it
        return None
    return provenance.source.name if provenance is not None else None


def _showcase_row(path: Path) -> dict[str, Any] | None:
    """The first row of a runtime split whose state has variables (else its first row)."""
    rows = pq.read_table(path, columns=["example_id", "runtime_text", "runtime"]).to_pylist()
    return next((row for row in rows if row["runtime"]), rows[0] if rows else None)


def _replace_build(staged: Path, out_dir: Path) -> None:
    """Make the finished build in ``staged`` the one in ``out_dir`` in one step; ``staged`` then holds the old one."""
    if not out_dir.exists():
        os.rename(staged, out_dir)
        return
    _carry_over(out_dir, staged)
    if exchange(staged, out_dir):
        return
    # no atomic swap here: out_dir is missing between the two renames (see _remove_leftovers)
    previous = out_dir.with_name(PREVIOUS_PREFIX + staged.name[len(STAGING_PREFIX) :])
    os.rename(out_dir, previous)
    os.rename(staged, out_dir)
    shutil.rmtree(previous, ignore_errors=True)


def _carry_over(out_dir: Path, staged: Path) -> None:
    """Give the new build the entries of ``out_dir`` it does not write itself (a ``.git``, a license), as hard links."""
    written = {entry.name for entry in staged.iterdir()}
    for entry in out_dir.iterdir():
        if entry.name in written:
            continue
        if entry.is_dir() and not entry.is_symlink():
            shutil.copytree(entry, staged / entry.name, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(entry, staged / entry.name)


def _link_or_copy(source: str | os.PathLike[str], target: str | os.PathLike[str]) -> None:
    """A hard link to ``source`` (a symbolic link itself, not its target), or a copy where links fail."""
    try:
        os.link(source, target, follow_symlinks=False)
    except OSError:
        shutil.copy2(source, target, follow_symlinks=False)


def _remove_leftovers(out_dir: Path) -> None:
    """Remove what killed builds of ``out_dir`` left next to it; put a previous build back if it is missing."""
    for entry in sorted(out_dir.parent.iterdir()):
        match = _LEFTOVER.fullmatch(entry.name)
        if match is None or match[2] != out_dir.name or not entry.is_dir():
            continue
        if match[1] == "previous" and not out_dir.exists():
            os.rename(entry, out_dir)  # killed between the two renames of a swap without exchange
        else:
            shutil.rmtree(entry, ignore_errors=True)
