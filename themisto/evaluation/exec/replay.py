"""Scoring one trajectory: replay it once, run each step's predictions in forked children before its cell.

At a step where predictions wait, the session first notes the replay's namespace and working folder, then
runs every distinct code of the step in one forked request, the developer's own cell (the reference) first,
then checks that the replay still holds what it held. If it does not (a prediction reached the replay
through something the sandbox leaves open, or killed the kernel), the replay is restored, by running the
trajectory again from its first step in a fresh copy of the working folder, and the step's codes run one
at a time, each checked: the one that changed the replay is marked ``tampered`` (scored 0) and the replay
restored again before the next. Then the developer's cell runs in the replay, which gives the output and
state the predictions are compared with and moves the replay on.

Where the children are confined, the forked run and its check mostly ride on the request of the cell before the
step (:meth:`_finish_then_fork`): the kernel runs that cell, takes its snapshot, notes its working folder, forks,
and takes the check's snapshot, all in one request. Not where the kernel restarts between the two, the user
interrupted the cell, or the cell raised (ipykernel then evaluates nothing after it): there the step forks in a
request of its own, as above.
"""

from __future__ import annotations

import logging
import shutil
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any

from themisto.evaluation.exec.inputs import Prediction, RecordedStep
from themisto.exceptions import ThemistoError, short_message
from themisto.kernel import (
    DEAD_KERNEL_ERROR,
    ChildResult,
    ForkingSession,
    KernelOptions,
    OutputCollector,
    RiddenFork,
    Stopped,
    copy_tree,
    normalize_output,
    state_key,
)
from themisto.trajectory import Step

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outcome:
    """What one predicted cell did in its forked child."""

    ok: bool
    output: str
    error: str | None  # "EName: evalue", one line
    state: str | None  # state_key of the namespace after it; None when no snapshot came back
    seconds: float  # the cell's own run time in the child
    forked: bool = True  # False: a blank cell, whose outcome is known without running it
    tampered: bool = False  # it changed the replay's namespace or working folder (or killed the kernel)


def _failed(error: str, tampered: bool = False) -> Outcome:
    return Outcome(False, error, error, None, 0.0, tampered=tampered)


KILLED_KERNEL = _failed("DeadKernelError: the prediction killed the kernel; the replay was rebuilt", tampered=True)


def tampered(what: str) -> Outcome:
    """The outcome of a prediction that changed ``what`` of the replay: a failure, whatever it printed."""
    return _failed(f"Tampered: the prediction changed {what}", tampered=True)


def parse_outcome(result: ChildResult, options: KernelOptions, state_of: Callable[[str], str]) -> Outcome:
    """An :class:`Outcome` from a child's result, rendered with the recorder's own output path.

    ``state_of`` gives the state key of the child's snapshot, checked as the
    replay checks its own (:meth:`~themisto.kernel.ForkingSession.child_state`).

    The result passed through code the prediction could have replaced, so
    every field is checked; a malformed one (whatever it makes the parsing raise) fails this outcome alone,
    never the step or the trajectory.
    """
    try:
        collector = OutputCollector(options.max_raw_output_chars)
        for message in result.messages:
            msg_type = message["msg_type"]
            collector.add({"msg_type": msg_type, "header": {"msg_type": msg_type}, "content": message["content"]})
        collector.dropped_chars += result.dropped_chars
        collector.dropped_trailing_newlines = max(collector.dropped_trailing_newlines, result.dropped_trailing_newlines)
        outputs = collector.outputs
        if result.status in ("timeout", "exited", "fault"):  # the recorder adds its own faults as error outputs
            outputs = outputs + [
                {"output_type": "error", "ename": result.ename, "evalue": result.evalue, "traceback": []}
            ]
        output, _, _ = collector.render(options.max_output_chars, outputs)
        state = None
        if result.snapshot is not None:
            state = state_of(result.snapshot)
    except Exception as exc:  # any: JSON nested past the stack (RecursionError), a message nbformat refuses, ...
        return _failed(f"KernelError: malformed result of the forked cell ({short_message(exc)[:200]})")
    ename, evalue = result.ename, result.evalue
    error = None if result.status == "ok" else short_message(ValueError(f"{ename}: {evalue}" if evalue else ename))
    return Outcome(result.status == "ok", output, error, state, result.seconds)


@dataclass(frozen=True)
class ExecScore:
    """The exec outcomes of one prediction at one step (None: excluded, the step's replay diverged)."""

    exec_ok: int | None
    exec_match: int | None
    state_match: int | None
    diverged: bool
    error: str | None
    tampered: bool = False

    def record(self, prediction: Prediction) -> dict[str, Any]:
        """The ``exec_samples`` line of ``prediction`` (with its lm-eval filter, which joins it to its sample)."""
        return {
            "example_id": prediction.example_id,
            **({} if prediction.filter is None else {"filter": prediction.filter}),
            "trajectory_id": prediction.trajectory_id,
            "step": prediction.step,
            "exec_ok": self.exec_ok,
            "exec_match": self.exec_match,
            "state_match": self.state_match,
            "diverged": self.diverged,
            "tampered": self.tampered,
            "error": self.error,
        }


@dataclass
class TrajectoryScores:
    """The scores of every (step, code) run in one trajectory, and what it cost."""

    trajectory_id: str
    scores: dict[tuple[int, str], ExecScore] = field(default_factory=dict)
    diverged: set[int] = field(default_factory=set)
    executions: int = 0  # forked runs: distinct codes per step, blank ones aside
    execution_seconds: float = 0.0  # the predictions' own run time, summed
    fork_seconds: float = 0.0  # wall time of running the predictions, forks and comparisons included
    steps_replayed: int = 0
    restores: int = 0  # times the replay was run again from the start after a prediction reached it
    failed_at: int | None = None  # the step being replayed when scoring failed; later steps were not scored
    failure: str | None = None  # why, one line
    stopped: bool = False  # the run was interrupted (Ctrl-C) while this trajectory was being scored

    compared: set[int] = field(default_factory=set)  # steps whose replayed output was compared with the recording

    @property
    def all_diverged(self) -> bool:
        """Every step compared replayed to another output than recorded (a wrong working folder?)."""
        return bool(self.compared) and self.compared <= self.diverged

    def add(self, step: RecordedStep, replayed: Step, codes: Sequence[str], outcomes: Sequence[Outcome]) -> None:
        """Score the outcomes of ``codes`` against the replay of ``step``."""
        expected = normalize_output(step.output)
        diverged = normalize_output(replayed.output) != expected
        self.compared.add(step.step)
        if diverged:
            self.diverged.add(step.step)
        state = state_key(replayed.runtime)
        for code, outcome in zip(codes, outcomes, strict=True):
            self.executions += outcome.forked
            self.execution_seconds += outcome.seconds
            if outcome.tampered:
                score = ExecScore(0, 0, 0, diverged, outcome.error, tampered=True)
            elif diverged:
                score = ExecScore(None, None, None, True, outcome.error)
            else:
                score = ExecScore(
                    int(outcome.ok),
                    int(normalize_output(outcome.output) == expected),
                    int(outcome.state is not None and outcome.state == state),
                    False,
                    outcome.error,
                )
            self.scores[step.step, code] = score

    def exclude(self, step: RecordedStep, codes: Sequence[str]) -> None:
        """Mark ``codes`` at a step the replay cannot reproduce as excluded (as a diverged step's)."""
        self.diverged.add(step.step)
        for code in codes:
            self.scores[step.step, code] = ExecScore(None, None, None, True, None)


def score_trajectory(
    trajectory_id: str,
    steps: Sequence[RecordedStep],
    wanted: dict[int, list[str]],
    options: KernelOptions,
    on_step: Callable[[], None] | None = None,
    *,
    stop: threading.Event | None = None,
    on_scored: Callable[[TrajectoryScores, int], None] | None = None,
) -> TrajectoryScores:
    """Replay one trajectory once, running the codes ``wanted`` at each step in forked children before it.

    ``on_step`` is called after each replayed step, ``on_scored`` with the result and the step after each
    step whose codes were scored (the journal writes their lines then). A failure (a kernel that
    cannot start or restart, a working directory that cannot be copied) ends
    this trajectory alone: the result keeps what was scored before it and says
    where and why in ``failed_at`` and ``failure``. ``stop`` set ends it within
    a fraction of a second, keeping what was scored (``stopped``). With
    ``options.sandbox`` each prediction runs in a Landlock domain of its own (see :class:`ForkingSession`).
    """
    result = TrajectoryScores(trajectory_id)
    if not wanted:
        return result
    try:
        with tempfile.TemporaryDirectory(prefix="themisto-exec-", ignore_cleanup_errors=True) as root:
            _Replay(result, Path(root), steps, options, stop, on_step).run(wanted, on_scored)
    except Stopped:
        result.stopped = True
    except Exception as exc:  # the other trajectories go on; exec_score reports this one and its examples
        log.debug("%s: scoring failed at step %d", trajectory_id, result.steps_replayed, exc_info=True)
        result.failed_at = result.steps_replayed
        message = short_message(exc)
        result.failure = message if isinstance(exc, ThemistoError) else f"{type(exc).__name__}: {message}"
    return result


class _Replay:
    """The replay of one trajectory in a private copy of the working directory under ``root``."""

    def __init__(
        self,
        result: TrajectoryScores,
        root: Path,
        steps: Sequence[RecordedStep],
        options: KernelOptions,
        stop: threading.Event | None,
        on_step: Callable[[], None] | None,
    ) -> None:
        self.result, self.steps, self.options, self.on_step = result, steps, options, on_step
        self.work, scratch = root / "work", root / "predictions"
        self._reset_folder()
        scratch.mkdir()
        self.session = ForkingSession(result.trajectory_id, self.work, options, scratch, stop=stop)
        self.fresh = True  # the kernel has run nothing since it (re)started
        self.folding = True  # a step's codes may be forked on the request of the cell before it

    def _reset_folder(self) -> None:
        """The working folder as the trajectory starts: a copy of the ``workdir`` option, or empty."""
        if self.work.exists():
            shutil.rmtree(self.work)
        if self.options.workdir is not None:
            copy_tree(str(self.options.workdir), str(self.work))
        else:
            self.work.mkdir()

    def run(self, wanted: dict[int, list[str]], on_scored: Callable[[TrajectoryScores, int], None] | None) -> None:
        steps = self.steps[: max(wanted) + 1]
        with self.session:
            ridden: dict[str, Outcome] = {}  # this step's outcomes, forked on the request of the cell before it
            for index, step in enumerate(steps):
                self._prepare(step)
                codes = wanted.get(step.step)
                if step.recording_stopped:
                    # never run again what stopped a recording: the kernel restarts there, as it did then, and
                    # the step shows nothing of its cell to compare with (builds never make it a target)
                    self._finish(step)
                    if codes:
                        self.result.exclude(step, codes)
                    ridden = {}
                else:
                    started = time.perf_counter()
                    outcomes = self._predictions(step, codes, ridden) if codes else None
                    self.result.fork_seconds += time.perf_counter() - started
                    following = steps[index + 1] if index + 1 < len(steps) else None
                    replayed, ridden = self._finish_then_fork(step, following, wanted)
                    if codes and outcomes is not None and replayed is not None:
                        self.result.add(step, replayed, codes, outcomes)
                if codes and on_scored is not None:
                    on_scored(self.result, step.step)
                self.result.steps_replayed += 1
                if self.on_step is not None:
                    self.on_step()

    def _prepare(self, step: RecordedStep) -> None:
        """Bring the kernel to the state before ``step``'s cell: restart it where the recording did."""
        if step.restarted and not self.fresh:
            self.session.restart()
            self.fresh = True

    def _finish(self, step: RecordedStep) -> Step | None:
        """Run ``step``'s cell in the replay, as recorded (None for a cell that stopped a recording)."""
        return self._finish_then_fork(step, None, {})[0]

    def _finish_then_fork(
        self, step: RecordedStep, following: RecordedStep | None, wanted: dict[int, list[str]]
    ) -> tuple[Step | None, dict[str, Outcome]]:
        """:meth:`_finish`, and where it can, the outcomes of the codes ``wanted`` at the ``following`` step
        forked on the cell's own request, one round trip sooner (``ForkingSession.run_cell_then_fork``);
        where the replay was restored after them, ``step`` as replayed again."""
        if step.recording_stopped:
            self.session.skip_stopped()
            self.fresh = True
            return None, {}
        codes = self._ridable(following, wanted)
        # the user's interrupt too: a cell they stopped must not run on and leave another state
        replayed, ridden = self.session.run_cell_then_fork(
            step.code, step.cell_id, codes, interrupt_after=step.interrupt_after
        )
        self.fresh = replayed.error is not None and replayed.error.get("ename") == DEAD_KERNEL_ERROR
        if ridden is None or following is None:
            return replayed, {}
        started = time.perf_counter()
        outcomes, again = self._ridden_outcomes(following, codes, ridden)
        self.result.fork_seconds += ridden.seconds + time.perf_counter() - started
        return again or replayed, dict(zip(codes, outcomes, strict=True)) if outcomes is not None else {}

    def _ridable(self, following: RecordedStep | None, wanted: dict[int, list[str]]) -> list[str]:
        """The codes of the ``following`` step that may be forked on the request of the cell before it (where the
        session can, :meth:`ForkingSession.run_cell_then_fork`): none where the kernel restarts between them or the
        riding ended (blank codes are known without a fork, :meth:`_predictions`)."""
        if following is None or not self.folding or following.restarted or following.recording_stopped:
            return []
        return [code for code in wanted.get(following.step, []) if code.strip()]

    def _ridden_outcomes(
        self, step: RecordedStep, codes: list[str], ridden: RiddenFork
    ) -> tuple[list[Outcome] | None, Step | None]:
        """The outcomes of ``codes`` at ``step`` from a run that rode on the cell before it (None: they are forked
        the usual way, before ``step``), and that cell replayed again where the replay was restored.

        The run's outcomes count where the replay is as the children were forked from it; else, or where the
        kernel stopped during the run, the replay is restored and the codes run one at a time (as
        :meth:`_fork_all`). An answer the notebook's code made unreadable leaves the codes to their usual fork,
        in a replay checked (or restored) first, and ends the folding for this trajectory.
        """
        if ridden.results is not None and ridden.checkpoint is not None:
            if self.session.changed_since(ridden.checkpoint) is None:
                before = ridden.checkpoint.namespace or {}
                state_of = partial(self.session.child_state, before=before)
                return [parse_outcome(result, self.options, state_of) for result in ridden.results], None
        elif not ridden.broken:
            self.folding = False
            if ridden.checkpoint is not None and self.session.changed_since(ridden.checkpoint) is None:
                return None, None
            return None, self._restore(step)
        again = self._restore(step)
        return self._one_at_a_time(step, codes), again

    def _restore(self, step: RecordedStep) -> Step | None:
        """The replay as it was before ``step``'s predictions: the trajectory run again from its start; the step
        before ``step`` as replayed again (None: none, or one that stopped a recording)."""
        self.result.restores += 1
        self._reset_folder()
        self.session.restart()
        self.fresh = True
        replayed = None
        for earlier in self.steps[: step.step]:
            self._prepare(earlier)
            replayed = self._finish(earlier)
        self._prepare(step)
        return replayed

    def _predictions(self, step: RecordedStep, codes: list[str], ridden: dict[str, Outcome]) -> list[Outcome]:
        """The outcomes of ``codes`` in the state before ``step``, the replay left as it was; those ``ridden``
        already forked on the last cell's request are taken as they are."""
        before = self.session.before()
        outcomes: dict[str, Outcome] = {code: ridden[code] for code in codes if code in ridden}
        if before is not None and any(not code.strip() for code in codes):
            # IPython returns at once for a blank cell (no code, no output, no event): its outcome is known (and its
            # state's key is taken only then: 0.5 ms for 32 variables, inside every step's forked run)
            state = state_key(list(before.values()))
            blank = Outcome(True, "", None, state, 0.0, forked=False)
            outcomes.update((code, blank) for code in codes if not code.strip())
        forked = [code for code in codes if code not in outcomes]
        if forked:
            outcomes.update(zip(forked, self._fork_all(step, forked), strict=True))
        return [outcomes[code] for code in codes]

    def _fork_all(self, step: RecordedStep, codes: list[str]) -> list[Outcome]:
        """The forked outcomes of ``codes``; if the replay changed, it is restored and the codes run one at a time."""
        before = self.session.before() or {}
        checkpoint = self.session.checkpoint()
        results = self.session.fork_run(codes)
        if results is not None and self.session.changed_since(checkpoint) is None:
            return [
                parse_outcome(result, self.options, partial(self.session.child_state, before=before))
                for result in results
            ]
        self._restore(step)
        return self._one_at_a_time(step, codes)

    def _one_at_a_time(self, step: RecordedStep, codes: list[str]) -> list[Outcome]:
        """The outcomes of ``codes`` in a restored replay, forked one at a time, each checked: one that changed the
        replay (or killed the kernel) is marked, and the replay restored before the next."""
        # a replay that changes by itself (a thread of the notebook's, say) cannot tell a prediction's doing
        checks = self.session.changed_since(self.session.checkpoint()) is None
        outcomes = []
        for code in codes:
            before = self.session.before() or {}
            checkpoint = self.session.checkpoint()
            single = self.session.fork_run([code])
            if single is None:
                outcomes.append(KILLED_KERNEL)
                self._restore(step)
                continue
            changed = self.session.changed_since(checkpoint) if checks else None
            if changed is not None:
                outcomes.append(tampered(changed))
                self._restore(step)
                continue
            outcomes.append(parse_outcome(single[0], self.options, partial(self.session.child_state, before=before)))
        return outcomes
