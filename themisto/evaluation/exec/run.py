"""A whole exec-score run: read and check everything, score the trajectories in parallel, write the files.

One run at a time writes an output folder (a lock beside it); Ctrl-C (and SIGTERM, SIGXCPU: see the command
line) stops every replay within a fraction of a second and still writes what was scored; a run killed outright
leaves the lines of every step it scored (:mod:`~themisto.evaluation.exec.journal`).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Callable, Collection, Sequence
from concurrent.futures import Future, ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themisto.evaluation.exec.files import exec_samples_name, write_records, write_reference_log
from themisto.evaluation.exec.inputs import (
    SampleLog,
    check_predictions,
    find_sample_logs,
    load_recorded,
    plan_codes,
    reference_logs,
    replay_options,
)
from themisto.evaluation.exec.journal import Journal
from themisto.evaluation.exec.replay import TrajectoryScores, score_trajectory
from themisto.exceptions import InputError, OutputError
from themisto.filesystem import ExclusiveLock, lock_path
from themisto.kernel import FORK_ABI, KernelOptions, check_options, chosen_options
from themisto.progress import Progress, ProgressCounter
from themisto.run_options import RunOptions, select_shard


@dataclass
class ExecFile:
    """One ``exec_samples`` file written: its model, task and lines."""

    model: str
    task: str
    path: Path
    records: list[dict[str, Any]]


@dataclass
class ExecReport:
    """What ``themisto exec-score`` scored and wrote, and what it cost."""

    files: list[ExecFile] = field(default_factory=list)
    trajectories: list[TrajectoryScores] = field(default_factory=list)
    # per failed trajectory, its sample lines (models' and reference's) left out of the exec samples
    left_out: dict[str, int] = field(default_factory=dict)

    @property
    def failures(self) -> list[TrajectoryScores]:
        """The trajectories whose scoring failed part-way (``failed_at``, ``failure``), in trajectory order."""
        return sorted((t for t in self.trajectories if t.failure is not None), key=lambda t: t.trajectory_id)

    @property
    def executions(self) -> int:
        """Forked runs: distinct codes per step (identical predictions run once)."""
        return sum(t.executions for t in self.trajectories)

    @property
    def execution_seconds(self) -> float:
        """The predictions' own run time in their children, summed."""
        return sum(t.execution_seconds for t in self.trajectories)

    @property
    def fork_seconds(self) -> float:
        """Wall time of running the predictions, forks and comparisons included."""
        return sum(t.fork_seconds for t in self.trajectories)

    @property
    def steps_replayed(self) -> int:
        return sum(t.steps_replayed for t in self.trajectories)


def exec_score(
    run_dirs: Sequence[str | os.PathLike[str]],
    *,
    data: str | None = None,
    trajectories: Sequence[str | os.PathLike[str]] = (),
    output: str | os.PathLike[str] | None = None,
    options: KernelOptions | None = None,
    chosen: Collection[str] | None = None,
    jobs: int = 1,
    shard: tuple[int, int] | None = None,
    progress: Progress | None = None,
    finished: Callable[[TrajectoryScores], None] | None = None,
) -> ExecReport:
    """Score every next-cell prediction under ``run_dirs`` by execution; write ``exec_samples_<task>.jsonl`` files.

    Everything is read and checked before any kernel starts: the sample logs,
    the trajectories (``trajectories`` files or folders, else the build's
    ``trajectories`` config found as :func:`themisto.evaluation.data.data_location`
    says) and the options. A trajectory file replays with the options its
    provenance names (:func:`~themisto.evaluation.exec.inputs.replay_options`;
    ``chosen``, by default the options that differ from their defaults, may change
    its environment). ``jobs`` trajectories are replayed at once;
    ``shard=(index, count)`` keeps only the trajectories of one shard (as
    ``themisto record`` does) and names its files ``exec_samples_<task>.<I>-of-<N>.jsonl``.
    The reference pseudo-model's files go to ``<output or the first run dir>/themisto-reference``.
    With ``options.sandbox`` every prediction runs in a Landlock domain of its own, nested in its kernel's.
    ``progress`` is called as ``("exec-score", steps replayed, steps to replay)``, ``finished`` after
    each trajectory.

    A trajectory that fails (see :func:`score_trajectory`) does not stop the
    others: the samples it scored before the failure are written with the
    rest, those after it are left out (counted in ``ExecReport.left_out``), and
    ``ExecReport.failures`` says where and why; nothing is raised for it. A
    trajectory whose every scored step diverged is a failure too: its replay
    is evidently not in the folder it was recorded in. On ``KeyboardInterrupt``
    the replays stop, what was scored is written, and the interrupt goes on.
    """
    options = options or KernelOptions()
    chosen = chosen_options(options) if chosen is None else chosen
    RunOptions(jobs, shard)  # checks both
    if not run_dirs:
        raise InputError("no run folder given")
    out = None if output is None else Path(output)
    logs = find_sample_logs([Path(d) for d in run_dirs], out)
    recorded = load_recorded({p.trajectory_id for log in logs for p in log.predictions}, data, trajectories)
    check_predictions(logs, recorded.steps)
    check_options(options, FORK_ABI)
    per_trajectory = {
        trajectory_id: replay_options(recorded.files.get(trajectory_id), options, chosen)
        for trajectory_id in recorded.steps
    }
    for replay in {(o.workdir, o.kernel_name): o for o in per_trajectory.values()}.values():
        check_options(replay, FORK_ABI)
    root = out if out is not None else Path(run_dirs[0])
    references = reference_logs(logs, recorded.steps, root)
    # the reference's cell first at each step: it runs before any prediction could reach the replay
    plans = plan_codes(references + logs)
    plans = select_shard(plans, shard)
    with contextlib.ExitStack() as locks:
        for folder in sorted({root.resolve(), *(Path(d).resolve() for d in run_dirs if out is None)}):
            locks.enter_context(_output_lock(folder))
        report = ExecReport()
        counter = ProgressCounter("exec-score", sum(max(plan.wanted) + 1 for plan in plans), progress)
        stop = threading.Event()
        journal = Journal(logs + references, references, shard)  # a run killed outright leaves what it scored
        try:
            # Threads suffice: each worker mostly waits on its kernel and its children.
            with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="themisto-exec") as pool:
                futures = [
                    pool.submit(
                        score_trajectory,
                        plan.trajectory_id,
                        recorded.steps[plan.trajectory_id],
                        plan.wanted,
                        per_trajectory[plan.trajectory_id],
                        counter.add,
                        stop=stop,
                        on_scored=journal.scored,
                    )
                    for plan in plans
                ]
                _collect(futures, report, finished, stop, pool)
        finally:  # on Ctrl-C, SIGTERM and SIGXCPU too: what was scored is written, in sample-log order
            journal.close()
            _write(logs + references, references, report, shard)
    return report


def _collect(
    futures: list[Future[TrajectoryScores]],
    report: ExecReport,
    finished: Callable[[TrajectoryScores], None] | None,
    stop: threading.Event,
    pool: ThreadPoolExecutor,
) -> None:
    """Gather each trajectory's scores as it ends; on Ctrl-C, stop the replays and gather what they scored."""
    try:
        for future in as_completed(futures):
            scores = future.result()
            if scores.all_diverged and scores.failure is None:
                scores.failure = (
                    "every step with predictions replayed to another output than recorded; replay it in the"
                    " folder its notebook read its files from (--workdir)"
                )
                scores.failed_at = min(scores.compared)
            report.trajectories.append(scores)
            if finished is not None:
                finished(scores)
    except BaseException:  # Ctrl-C: every replay stops within a poll interval; start no further trajectory
        stop.set()
        pool.shutdown(wait=True, cancel_futures=True)
        done = {id(scores) for scores in report.trajectories}
        for future in futures:
            if future.done() and not future.cancelled() and future.exception() is None:
                if id(future.result()) not in done:
                    report.trajectories.append(future.result())
        raise


def _write(
    logs: Sequence[SampleLog], references: Sequence[SampleLog], report: ExecReport, shard: tuple[int, int] | None
) -> None:
    """The exec samples of what was scored, and the reference's sample logs."""
    scored = {t.trajectory_id: t for t in report.trajectories}
    if not scored:
        return
    for log in references:
        write_reference_log(log)
    for log in logs:
        records = []
        for p in log.predictions:
            trajectory = scored.get(p.trajectory_id)
            if trajectory is None:  # another shard's, or not reached before a Ctrl-C
                continue
            score = trajectory.scores.get((p.step, p.code))
            if score is None:  # its trajectory failed (or stopped) before this step
                report.left_out[p.trajectory_id] = report.left_out.get(p.trajectory_id, 0) + 1
                continue
            records.append(score.record(p))
        if records:
            path = log.out_dir / exec_samples_name(log.task, shard)
            write_records(path, records)
            report.files.append(ExecFile(log.model, log.task, path, records))


def _output_lock(folder: Path) -> ExclusiveLock:
    """The lock that keeps a second exec-score from writing the exec samples under ``folder`` at the same time."""
    try:
        folder.parent.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise OutputError(f"cannot make {folder.parent}: {exc.strerror or exc}") from None
    return ExclusiveLock(lock_path(folder), f"the exec samples under {folder}")
