"""Record a corpus: each source trajectory in its own kernel, resumable, sharded, in a pool of workers."""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable, Iterable
from pathlib import Path

from themisto.exceptions import InputError, SourceError, ThemistoError
from themisto.recording import snapshot
from themisto.recording.kernel import Recorder, RecordOptions, check_options
from themisto.recording.sources import Execute, SourceTrajectory, read_sources
from themisto.trajectory import Step, TrajectoryWriter, read_trajectory, repair_tail


def record_trajectory(source: SourceTrajectory, out_dir: Path, options: RecordOptions) -> tuple[Path, int]:
    """Record one source trajectory to ``out_dir/<trajectory_id>.jsonl``; returns the path and new step count.

    With ``options.resume`` the steps already in the file are kept: their code
    is replayed (restarts included) to rebuild the state, then recording goes on.
    """
    path = Path(out_dir) / f"{source.trajectory_id}.jsonl"
    if path.exists() and not (options.resume or options.overwrite):
        raise InputError(f"{path} exists; pass --resume to continue it or --overwrite to replace it")
    if path.exists() and options.overwrite and not options.resume:
        path.unlink()
    executions = source.executions
    if options.resume:
        repair_tail(path)  # an interrupted run may have left a torn last line
    done = read_trajectory(path) if options.resume and path.exists() else []
    _check_resumable(path, done, executions)
    if len(done) == len(executions):
        return path, 0
    workdir = options.workdir or source.source.resolve().parent
    with Recorder(trajectory_id=source.trajectory_id, workdir=Path(workdir), options=options) as recorder:
        # the file is opened only once the kernel runs, so a failed start leaves no empty trajectory
        with TrajectoryWriter(path) as writer:
            for action in source.actions:
                if not isinstance(action, Execute):
                    recorder.restart()
                elif recorder.next_step < len(done):
                    recorder.replay(action.code)
                else:
                    writer.write(recorder.run_cell(action.code, action.cell_id, action.original_output))
    return path, len(executions) - len(done)


def _check_resumable(path: Path, done: list[Step], executions: list[Execute]) -> None:
    """A resumed file must be a prefix of what the source would record."""
    if len(done) > len(executions):
        raise SourceError(f"{path} has {len(done)} steps but its source has only {len(executions)} executions")
    for recorded, execution in zip(done, executions):
        if recorded.code != snapshot.clean_text(execution.code):
            raise SourceError(
                f"{path}: step {recorded.step} does not match its source's code; pass --overwrite to re-record"
            )


def shard_of(trajectory_id: str, count: int) -> int:
    """The 0-based shard of ``count`` a trajectory belongs to: a stable hash of its id.

    A hash (not the position in a sorted listing) keeps a trajectory in the same
    shard when other sources are added to the corpus, so a sharded ``--resume``
    never moves work between machines; shards are balanced only on average.
    """
    digest = hashlib.sha256(trajectory_id.encode("utf-8")).digest()
    return int.from_bytes(digest[:8], "big") % count


def select_shard(sources: list[SourceTrajectory], index: int, count: int) -> list[SourceTrajectory]:
    """The sources of the 0-based shard ``index`` of ``count``, in their given order."""
    if not (count >= 1 and 0 <= index < count):
        raise InputError(f"shard {index}/{count}: the index must be 0 to count-1 (shards are 0-based)")
    return [source for source in sources if shard_of(source.trajectory_id, count) == index]


def record_source(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    options: RecordOptions | None = None,
    progress: Callable[[Path, int], None] | None = None,
    jobs: int = 1,
    shard: tuple[int, int] | None = None,
    failed: Callable[[str, Exception], None] | None = None,
) -> list[Path]:
    """Record every trajectory of the given notebooks, logs or folders; returns the trajectory files.

    All sources are read (and rejected if malformed) before any kernel starts.
    ``jobs`` kernels run at once, each recording whole trajectories (each file
    is written by one worker only). ``shard=(index, count)`` keeps only the
    trajectories of the 0-based shard ``index`` of ``count`` (see
    :func:`shard_of`). ``progress(path, new_steps)`` is called after each
    trajectory, ``failed(trajectory_id, error)`` after each that failed; a
    failure does not stop the others, and is raised once all have finished
    (the error itself if it is the only one).
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    options = options or RecordOptions()
    if jobs < 1:
        raise InputError("jobs must be at least 1")
    check_options(options)
    sources = read_sources(paths)
    if shard is not None:
        sources = select_shard(sources, *shard)
    written: dict[str, Path] = {}
    errors: list[Exception] = []
    # Threads suffice: each worker mostly waits on its kernel subprocess.
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="themisto-record") as pool:
        futures = {pool.submit(record_trajectory, source, Path(out_dir), options): source for source in sources}
        try:
            for future in as_completed(futures):
                trajectory_id = futures[future].trajectory_id
                try:
                    path, new_steps = future.result()
                except Exception as exc:
                    errors.append(exc)
                    if failed is not None:
                        failed(trajectory_id, exc)
                    continue
                written[trajectory_id] = path
                if progress is not None:
                    progress(path, new_steps)
        except BaseException:  # Ctrl-C: start no further trajectory; running ones finish their steps
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    _raise_failures(errors, len(sources))
    return [written[source.trajectory_id] for source in sources]


def _raise_failures(errors: list[Exception], total: int) -> None:
    """Re-raise a lone or unexpected failure as itself; several input/kernel failures as one summary."""
    if not errors:
        return
    unexpected = [error for error in errors if not isinstance(error, ThemistoError)]
    if unexpected or len(errors) == 1:
        raise (unexpected or errors)[0]
    raise ThemistoError(f"{len(errors)} of {total} trajectories failed; the first: {errors[0]}")
