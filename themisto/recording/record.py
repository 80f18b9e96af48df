"""Record a corpus: each source trajectory in its own kernel, resumable, sharded, in a pool of workers."""

from __future__ import annotations

import dataclasses
import hashlib
import logging
import os
import stat
import tempfile
import threading
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

from themisto.exceptions import (
    CallerSpelledError,
    OptionError,
    OutputError,
    ReplayDivergedError,
    SourceError,
    ThemistoError,
)
from themisto.filesystem import ExclusiveLock, lock_path, partial_path, prepare_output_folder
from themisto.kernel import (
    MEMORY_ADDRESS,
    Recorder,
    Stopped,
    check_options,
    chosen_options,
    clean_text,
    normalize_output,
    with_recorded,
)
from themisto.progress import Progress, ProgressCounter
from themisto.provenance import (
    RECORDED_BY,
    Provenance,
    SourceFile,
    read_provenance,
    sidecar,
    write_provenance,
)
from themisto.recording.fidelity import excerpts
from themisto.recording.options import RecordOptions
from themisto.recording.sources import Execute, SourceTrajectory, read_sources
from themisto.run_options import RunOptions, select_shard
from themisto.trajectory import Step, TrajectoryWriter, Variable, read_trajectory, repair_tail

log = logging.getLogger(__name__)


def record_trajectory(
    source: SourceTrajectory,
    out_dir: Path,
    options: RecordOptions,
    chosen: Collection[str] | None = None,
    counter: ProgressCounter | None = None,
    stop: threading.Event | None = None,
) -> tuple[Path, int]:
    """Record one source trajectory to ``out_dir/<trajectory_id>.jsonl``; returns the path and new step count.

    The trajectory's provenance (:mod:`themisto.provenance`) is written beside it before its
    first step. With ``options.resume`` the steps already in the file are kept: their code since the last
    restart (:func:`replay_start`) is replayed, restarts included, to rebuild the state, then recording goes on with the options, versions and
    source it was recorded with: an option in ``chosen`` (default: those that differ from their
    defaults) must agree with the recording, and so must the source file and the kernel's versions.
    A file recorded before provenance existed resumes with ``options``.
    ``counter`` is told of every step recorded.

    One writer per file: the trajectory is locked (``.<file>.lock``, see
    :class:`~themisto.filesystem.ExclusiveLock`) while it is recorded, and a
    second writer gets :class:`~themisto.exceptions.OutputError`. A second lock,
    in a folder of this user's beneath the system's temporary folder
    (:func:`unreachable_lock_path`), keeps it so even when a cell (which may
    write in an output folder inside its working directory) deletes the first.

    A resume proves the state it rebuilds: each replayed step must reproduce
    the recorded output and variables (memory addresses aside); the first that
    does not raises :class:`~themisto.exceptions.ReplayDivergedError`, or with
    ``options.resume_diverged == "continue"`` is named in the
    ``resume_diverged_at`` of every new step. The step in progress when an
    earlier run died (the lock file's note) is run again in the rebuilt state,
    and named in the provenance's ``resumed_steps``; if that run stops the
    recording too, the next resume records it as a ``RecordingStopped`` step
    without running it a third time.

    ``stop``, once set, abandons the cell in progress (no step, no note) and
    returns what was recorded.
    """
    if not source.executions:
        raise nothing_to_run(source)
    path = Path(out_dir) / f"{source.trajectory_id}.jsonl"
    what = f"trajectory {path}"
    with ExclusiveLock(unreachable_lock_path(path), what), ExclusiveLock(lock_path(path), what) as lock:
        return _record_locked(source, path, options, chosen, counter, lock, stop)


def nothing_to_run(source: SourceTrajectory) -> SourceError:
    """The error of a source without code to run (a notebook of prose alone)."""
    return SourceError(f"{source.source}: no code cells to run, so no trajectory was written")


def unreachable_lock_path(path: Path) -> Path:
    """A lock file for ``path`` out of every kernel's reach: in ``<tmp>/themisto-locks-<uid>``, named by a hash.

    A sandboxed kernel writes only beneath its working directory and its own private folders, so it cannot
    remove this file even where the trajectory's own lock file is within its reach. The folder is this user's
    alone (mode 0700); one that another user made, or a link, is refused.
    """
    folder = Path(tempfile.gettempdir()) / f"themisto-locks-{os.getuid()}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        found = os.lstat(folder)
    except OSError as exc:
        raise OutputError(f"cannot make the lock folder {folder}: {exc.strerror or exc}") from None
    if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.getuid() or found.st_mode & 0o077:
        raise OutputError(f"lock folder {folder} is not a private folder of this user's; remove it")
    digest = hashlib.sha256(str(Path(path).resolve()).encode("utf-8", "surrogateescape")).hexdigest()[:32]
    return folder / f"{digest}.lock"


def _record_locked(
    source: SourceTrajectory,
    path: Path,
    options: RecordOptions,
    chosen: Collection[str] | None,
    counter: ProgressCounter | None,
    lock: ExclusiveLock,
    stop: threading.Event | None,
) -> tuple[Path, int]:
    if path.exists() and not (options.resume or options.overwrite):
        raise OptionError(
            "{path} exists; continue it with {resume:True} or replace it with {overwrite:True}", path=path
        )
    if path.exists() and options.overwrite and not options.resume:
        path.unlink()
    executions = source.executions
    recorded = None
    if options.resume:
        repair_tail(path)  # an interrupted run may have left a torn last line
        recorded = read_provenance(path, RecordOptions)
    made = source_file(source)
    if recorded is not None and recorded.options is not None:
        chosen = chosen_options(options) if chosen is None else chosen
        options = with_recorded(
            options, recorded.options, chosen, str(path), instead="re-record it with {overwrite:True}"
        )
        if recorded.source.sha256 != made.sha256:
            raise OptionError(
                "{path}: its source {name} changed since it was recorded; re-record it with {overwrite:True}",
                path=path,
                name=made.name,
            )
    done = read_trajectory(path) if options.resume and path.exists() else []
    _check_resumable(path, done, executions)
    if counter is not None:
        counter.skip(len(done))
    if len(done) == len(executions):
        return path, 0
    # the step an earlier run was recording when it died (only the first unrecorded step can be it) runs once
    # more, in the state the replay rebuilds; one whose second run stopped the recording too is not run again
    left = lock.left_note if options.resume else None
    rerun_at = len(done) if left == _note(len(done)) else None
    stopped_at = len(done) if left == _note(len(done), again=True) else None
    replay_from = replay_start(done)
    written = 0
    diverged: int | None = None
    workdir = kernel_workdir(source, options)
    with Recorder(trajectory_id=source.trajectory_id, workdir=workdir, options=options, stop=stop) as recorder:
        versions = recorder.kernel_versions
        provenance = Provenance(
            RECORDED_BY,
            made,
            python=versions["python"],
            ipykernel=versions["ipykernel"],
            libraries=recorder.kernel_libraries,
            options=options,
            workdir=workdir.resolve(),
            sandbox=recorder.sandbox.provenance,
        )
        if recorded is not None and recorded.options is not None:
            _check_same_versions(path, recorded, provenance)
        elif not done:  # a new trajectory; one recorded before provenance existed stays without
            write_provenance(path, provenance)
        # the file is opened only once the kernel runs, so a failed start leaves no empty trajectory
        with TrajectoryWriter(path) as writer:
            for action in source.actions:
                number = recorder.next_step
                if number < replay_from or (number == replay_from > 0 and not isinstance(action, Execute)):
                    if isinstance(action, Execute):  # before the last restart: none of it is in the state
                        recorder.skip()
                elif not isinstance(action, Execute):
                    recorder.restart()
                elif number < len(done):
                    diverged = _replay(recorder, path, done[number], action, options, diverged)
                elif number == stopped_at:
                    writer.write(recorder.stopped_step(action.code, action.cell_id, action.original_output))
                    written += 1
                    if counter is not None:
                        counter.add()
                else:
                    # stays if this step kills the recorder or cannot be written
                    lock.note(_note(number, again=number == rerun_at))
                    try:
                        step = recorder.run_cell(
                            action.code, action.cell_id, action.original_output, action.interrupt_after
                        )
                    except (Stopped, KeyboardInterrupt):
                        lock.note(None)  # stopped by the user: the cell was not at fault
                        if stop is not None and stop.is_set():
                            return path, written
                        raise
                    step.resume_diverged_at = diverged
                    writer.write(step)
                    lock.note(None)
                    if number == rerun_at and recorded is not None:
                        resumed = (*recorded.resumed_steps, number)
                        write_provenance(path, dataclasses.replace(recorded, resumed_steps=resumed))
                    written += 1
                    if counter is not None:
                        counter.add()
    return path, written


def _note(step: int, again: bool = False) -> str:
    """The lock file's note while ``step`` runs; ``again``: its second run, after it stopped a recording."""
    return f"recording step {step} again" if again else f"recording step {step}"


def replay_start(done: list[Step]) -> int:
    """The first recorded step a resume replays: the last one after a restart (a log's, a kernel death's, a
    stopped recording's), since nothing before a restart is in the kernel's state; 0 without one."""
    return max((number for number, step in enumerate(done) if step.restarted), default=0)


def _replay(
    recorder: Recorder, path: Path, recorded: Step, action: Execute, options: RecordOptions, diverged: int | None
) -> int | None:
    """Re-run a recorded step to rebuild the state and check it; the first divergent step so far."""
    if recorded.recording_stopped:
        recorder.skip_stopped()  # never run again what stopped a recording
        return diverged
    replayed = recorder.run_cell(action.code, action.cell_id, interrupt_after=action.interrupt_after)
    if diverged is not None:
        return diverged
    difference = replay_difference(recorded, replayed)
    if difference is None:
        return None
    if options.resume_diverged == "stop":
        raise ReplayDivergedError(
            "{path}: step {step} does not reproduce on resume ({difference}), so the recorded state cannot be"
            " rebuilt; re-record it with {overwrite:True}, or continue anyway with {resume_diverged:continue}",
            path=path,
            step=recorded.step,
            difference=difference,
        )
    log.warning("%s: step %d does not reproduce on resume (%s); continuing", path, recorded.step, difference)
    return recorded.step


def replay_difference(recorded: Step, replayed: Step) -> str | None:
    """What a replayed step does not reproduce of the recorded one (memory addresses aside); None if nothing."""
    if normalize_output(recorded.output) != normalize_output(replayed.output):
        was, now = excerpts(recorded.output, replayed.output)
        return f"its output was {was!r}, the replay printed {now!r}"
    if recorded.state_hash == replayed.state_hash:
        return None
    before, after = _state_keys(recorded.runtime), _state_keys(replayed.runtime)
    if before == after:
        return None
    names = sorted({str(key[0]) for key in set(before) ^ set(after)})
    return f"its variables differ: {', '.join(names[:5])}"


def _state_keys(variables: list[Variable]) -> list[tuple[object, ...]]:
    """The variables as comparable keys, memory addresses in reprs masked (they differ from run to run)."""
    return [
        (v.name, v.type, MEMORY_ADDRESS.sub("0x?", v.repr), v.repr_truncated, v.size_bytes, tuple(v.shape or ()), v.len)
        for v in variables
    ]


def _check_same_versions(path: Path, recorded: Provenance[RecordOptions], now: Provenance[RecordOptions]) -> None:
    """A resumed trajectory is continued by the same Themisto and kernel versions that began it."""
    before, after = recorded.versions(), now.versions()
    for name, version in before.items():
        if after[name] != version:
            raise OptionError(
                "{path} was recorded with {what} {before}, but this run has {after}; re-record it with {overwrite:True}",
                path=path,
                what=name,
                before=version,
                after=after[name],
            )


def kernel_workdir(source: SourceTrajectory, options: RecordOptions) -> Path:
    """Where the kernel of ``source`` runs: ``options.workdir``, else the source file's folder."""
    if options.workdir is not None:
        return Path(options.workdir)
    if not isinstance(source.source, Path):
        raise OptionError("{source} is not a local file: pass {workdir} for its kernels", source=source.source)
    return source.source.resolve().parent


def source_file(source: SourceTrajectory) -> SourceFile:
    """The file a trajectory is recorded from, for its provenance: a local file, or a URL read once more."""
    if isinstance(source.source, Path):
        return SourceFile.of(source.source.name, source.source.read_bytes(), source.source)
    import fsspec

    with fsspec.open(source.source, "rb") as handle:
        return SourceFile.of(source.source.rstrip("/").rsplit("/", 1)[-1], handle.read())


def _check_resumable(path: Path, done: list[Step], executions: list[Execute]) -> None:
    """A resumed file must be a prefix of what the source would record."""
    if len(done) > len(executions):
        raise SourceError(f"{path} has {len(done)} steps but its source has only {len(executions)} executions")
    for recorded, execution in zip(done, executions):
        if recorded.code != clean_text(execution.code):
            raise OptionError(
                "{path}: step {step} does not match its source's code; re-record it with {overwrite:True}",
                path=path,
                step=recorded.step,
            )


def record_source(
    paths: str | os.PathLike[str] | Iterable[str | os.PathLike[str]],
    out_dir: str | os.PathLike[str],
    options: RecordOptions | None = None,
    progress: Callable[[Path, int], None] | None = None,
    jobs: int = 1,
    shard: tuple[int, int] | None = None,
    failed: Callable[[str, Exception], None] | None = None,
    chosen: Collection[str] | None = None,
    steps: Progress | None = None,
    skipped: Callable[[SourceTrajectory], None] | None = None,
) -> list[Path]:
    """Record every trajectory of the given notebooks, logs or folders; returns the trajectory files.

    All sources are read (and rejected if malformed) before any kernel starts.
    ``jobs`` kernels run at once, each recording whole trajectories (each file
    is written by one worker only). ``shard=(index, count)`` keeps only the
    trajectories of the 0-based shard ``index`` of ``count`` (see
    :func:`~themisto.run_options.shard_of`). ``progress(path, new_steps)`` is called after each
    trajectory, ``failed(trajectory_id, error)`` after each that failed (with more than one to record); a
    failure does not stop the others, and is raised once all have finished
    (the error itself if it is the only one). ``chosen``: see :func:`record_trajectory`. ``steps``
    follows the steps recorded across the whole corpus (see :class:`~themisto.progress.ProgressCounter`).
    A source with nothing to run (a notebook of prose alone) is left out and passed to ``skipped``, so
    one such notebook does not fail a batch; when every source is so, the first one's error is raised.

    The output folder is checked before any kernel starts (it can be created
    and written, and takes the file names; see
    :func:`~themisto.filesystem.prepare_output_folder`). On Ctrl-C
    (``KeyboardInterrupt``) every running cell is abandoned within about
    :data:`~themisto.kernel.transport.POLL_INTERVAL` seconds, the kernels are
    shut down with every process they started, completed steps stay on disk,
    and the interrupt is raised again.
    """
    from concurrent.futures import ThreadPoolExecutor, as_completed

    if isinstance(paths, (str, os.PathLike)):
        paths = [paths]
    options = options or RecordOptions()
    RunOptions(jobs, shard)  # checks both
    check_options(options)
    sources = select_shard(read_sources(paths, options.skip_pattern, options.notebook_order), shard)
    runnable = [source for source in sources if source.executions]
    if sources and not runnable:
        raise nothing_to_run(sources[0])
    for source in sources:
        if not source.executions and skipped is not None:
            skipped(source)
    sources = runnable
    for source in sources:
        kernel_workdir(source, options)  # a remote source without --workdir fails before any kernel starts
    counter = None if steps is None else ProgressCounter("record", sum(len(s.executions) for s in sources), steps)
    out = Path(out_dir)
    prepare_output_folder(out, [name for source in sources for name in _file_names(out, source.trajectory_id)])
    written: dict[str, Path] = {}
    errors: list[Exception] = []
    stop = threading.Event()
    # Threads suffice: each worker mostly waits on its kernel subprocess.
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="themisto-record") as pool:
        futures = {
            pool.submit(record_trajectory, source, out, options, chosen, counter, stop): source for source in sources
        }
        try:
            for future in as_completed(futures):
                trajectory_id = futures[future].trajectory_id
                try:
                    path, new_steps = future.result()
                except Exception as exc:
                    errors.append(exc)
                    if failed is not None and len(sources) > 1:  # a lone trajectory's error is raised as itself
                        failed(trajectory_id, exc)
                    continue
                written[trajectory_id] = path
                if progress is not None:
                    progress(path, new_steps)
        except BaseException:  # Ctrl-C: start no further trajectory, abandon the running cells
            stop.set()
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    raise_failures(errors, len(sources))
    return [written[source.trajectory_id] for source in sources]


def _file_names(out: Path, trajectory_id: str) -> list[str]:
    """The names of the files a recording of ``trajectory_id`` writes in ``out``, temporary ones included."""
    trajectory = out / f"{trajectory_id}.jsonl"
    provenance = sidecar(trajectory)
    return [trajectory.name, lock_path(trajectory).name, provenance.name, partial_path(provenance).name]


def raise_failures(errors: list[Exception], total: int) -> None:
    """Re-raise a lone or unexpected failure as itself; several input/kernel failures as one summary."""
    if not errors:
        return
    unexpected = [error for error in errors if not isinstance(error, ThemistoError)]
    if unexpected or len(errors) == 1:
        raise (unexpected or errors)[0]
    summary = f"{len(errors)} of {total} trajectories failed; the first: "
    first = errors[0]
    raise first.prefixed(summary) if isinstance(first, CallerSpelledError) else ThemistoError(f"{summary}{first}")
