"""Execution-checked next-cell prediction: run each predicted cell in the kernel state the model was shown.

Text similarity cannot tell a correct cell written differently from a wrong
one, nor see whether a cell fits the live state (real column names, variable
names, types). ``themisto exec-score`` runs every next-cell prediction of an
lm-eval sample log (``samples_themisto_next_cell*_<stamp>.jsonl``) in the state
before its target step and writes, per sample, to
``exec_samples_<task>.jsonl``:

- ``exec_ok``: 1 when the cell ran without an exception within the timeout;
- ``exec_match``: 1 when its plain-text output equals the developer's cell's
  recorded output after :func:`~themisto.recording.outputs.normalize_output`
  (what ``exact_match_norm`` compares);
- ``state_match``: 1 when the user namespace after it equals the namespace
  after the developer's cell, compared by the snapshot's per-variable
  descriptions (name, type, repr with memory addresses masked, shape, len; not
  the size estimate, which depends on how a container was grown, see
  :func:`state_key`);
- ``error``: ``EName: evalue`` (one line) when it failed, else null;
- ``diverged``: the replay of the target step did not reproduce its recorded
  output, so the state differs from what was recorded: the three outcomes are
  null there (excluded from every exec metric).

Each line also names ``example_id``, ``trajectory_id`` and ``step``.

The design: one replay per trajectory, one fork per prediction
---------------------------------------------------------------
Replaying a trajectory prefix per prediction would cost the sum of all
prefixes. Instead each trajectory involved is replayed once, in one kernel
(:class:`ForkingRecorder`, the recorder of ``themisto record`` with its
credential scrubbing, resource limits and timeouts), up to its last step with
a prediction. Before the developer's cell of a step where predictions wait,
one silent request runs all of them (distinct codes only: baselines often
agree) through :mod:`themisto.kernelside.fork`: the kernel forks itself per
prediction, the child runs it with its output captured and sends back its
output and namespace snapshot, and exits; the parent's state is untouched.
Then the developer's cell runs in the parent, which gives the reference output
and state to compare with and moves the replay on. Forking copies no memory
(copy-on-write) and reuses the snapshot's description cache, so a prediction
costs its own run time plus 14 to 19 ms on the bundled corpus, and scoring a
run about 1.04 times one replay plus the predictions (``bench/bench_exec.py``).

The replay repeats the recording, not just its code: the kernel restarts
where a step is ``restarted``, a cell the user interrupted is interrupted
after the same ``interrupt_after`` seconds (run on, it would leave another
state), and a step that stopped an earlier recording is not run again (the
kernel restarts there, as it did; predictions at it are excluded). A
trajectory whose replay fails (a kernel that cannot start or restart, a
working directory that cannot be copied) ends alone: what it scored before
is kept, and :func:`exec_score` reports where and why.

The developer's own next cell runs through the same path for every example as
the pseudo-model ``themisto-reference``; its ``exec_match`` rate is the ceiling
(the share of cells whose output reproduces in a forked child), reported beside
the models.

Isolation: what a prediction can and cannot change
--------------------------------------------------
- Variables, modules, random generators, open figures: the child's own
  copy-on-write memory; nothing it does reaches the parent or the next
  prediction.
- The working directory: the replay runs in a private copy of the ``workdir``
  option (default: an empty folder), made per trajectory and deleted after it; each
  prediction runs in a fresh copy of that folder as it was before the step
  (cloned copy-on-write where the filesystem supports it), deleted after it.
  Files it writes, deletes or changes there are seen by no later prediction and
  not by the replay.
- What leaks: files reached by absolute paths outside those copies (including
  a path an earlier cell stored, e.g. ``os.path.abspath('data.csv')``, which
  points into the replay's folder), file objects an earlier cell left open
  (shared with the parent), and anything outside the process (network,
  servers an earlier cell started). Processes the prediction starts are killed
  with its process group after it; one that leaves the group (``setsid``)
  escapes until the kernel is shut down.
- The kernel's sockets: the child never writes to them (see
  :mod:`themisto.kernelside.fork`). A prediction that kills the kernel itself
  (signals its parent) fails; the kernel is restarted, the session replayed,
  and the step's other predictions run again one by one.
"""

from __future__ import annotations

import json
import logging
import os
import re
import tempfile
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from themisto.exceptions import InputError, KernelError, OptionError, ThemistoError, short_message
from themisto.jsonl import iter_json_objects
from themisto.kernelside import fork
from themisto.progress import Progress
from themisto.recording import inject
from themisto.recording.kernel import DEAD_KERNEL_ERROR, KERNEL_START_TIMEOUT, Execution, Recorder, check_options
from themisto.recording.options import RecordOptions
from themisto.recording.outputs import OutputCollector, normalize_output
from themisto.recording.record import select_shard
from themisto.trajectory import Step, Variable, is_recording_stopped, state_hash, trajectory_files
from themisto.vocabulary import (
    EXEC_METRICS,
    EXEC_SAMPLES_PREFIX,
    NEXT_CELL_TASK,
    REFERENCE_MODEL,
    RUNTIME_SUFFIX,
    TRAJECTORIES,
    TRAJECTORY_SPLIT,
)

log = logging.getLogger(__name__)

NEXT_CELL_TASKS = (NEXT_CELL_TASK, NEXT_CELL_TASK + RUNTIME_SUFFIX)
_SAMPLE_FILE = re.compile(
    rf"^samples_(?P<task>{'|'.join(map(re.escape, NEXT_CELL_TASKS))})(?:_(?P<stamp>\d{{4}}-\d{{2}}-\d{{2}}T[\d.\-]+))?$"
)


# --- inputs: sample logs and trajectories ---------------------------------------------------


@dataclass(frozen=True)
class Prediction:
    """One next-cell prediction of a sample log: the code to run before ``step`` of a trajectory."""

    example_id: str
    trajectory_id: str
    step: int
    code: str
    target: str | None  # the developer's cell as the sample log states it, to check the trajectories
    filter: str | None = None  # the lm-eval filter of the sample line
    doc: dict[str, Any] = field(default_factory=dict, compare=False)  # the dataset row, for the reference's log


@dataclass
class SampleLog:
    """The predictions of one model on one next-cell task, and where their exec samples go."""

    task: str
    source: Path
    out_dir: Path
    predictions: list[Prediction]
    stamp: str = ""  # the lm-eval timestamp of the log's file name

    @property
    def model(self) -> str:
        return self.out_dir.name


@dataclass(frozen=True)
class RecordedStep:
    """What the replay needs of a recorded step."""

    step: int
    cell_id: str
    code: str
    output: str
    restarted: bool
    interrupt_after: float | None = None  # the user interrupted the cell this many seconds after it started
    recording_stopped: bool = False  # an earlier recording stopped while it ran: it is never run again (Step)


def exec_samples_name(task: str, shard: tuple[int, int] | None = None) -> str:
    """``exec_samples_<task>.jsonl``; a shard's part is ``exec_samples_<task>.<I>-of-<N>.jsonl``."""
    part = "" if shard is None else f".{shard[0]}-of-{shard[1]}"
    return f"{EXEC_SAMPLES_PREFIX}{task}{part}.jsonl"


def find_sample_logs(run_dirs: Sequence[Path], output: Path | None = None) -> list[SampleLog]:
    """The newest next-cell sample log of each task in each folder under ``run_dirs``, with its predictions.

    Exec samples go next to each log, or with ``output`` to the same relative
    folder under ``output``. A ``themisto-reference`` folder holds what an
    earlier exec-score wrote for the developer's cells, not a model's
    predictions: its logs are skipped (each run writes the reference anew).
    """
    newest: dict[tuple[Path, str], tuple[str, Path, Path]] = {}
    for run_dir in run_dirs:
        if not run_dir.is_dir():
            raise InputError(f"run folder not found: {run_dir}")
        for path in sorted(run_dir.rglob("samples_*.jsonl")):
            match = _SAMPLE_FILE.match(path.stem)
            if match is None or path.parent.name == REFERENCE_MODEL:
                continue
            key = (path.parent.resolve(), match["task"])
            candidate = (match["stamp"] or "", path, run_dir)
            if key not in newest or candidate[0] > newest[key][0]:
                newest[key] = candidate
    if not newest:
        listed = ", ".join(str(d) for d in run_dirs)
        raise InputError(
            f"no next-cell sample logs (samples_{NEXT_CELL_TASK}*_<timestamp>.jsonl) under {listed};"
            f" evaluate with the tasks {', '.join(NEXT_CELL_TASKS)} and log the samples"
        )
    logs = []
    targets: dict[Path, Path] = {}
    for (_, task), (stamp, path, run_dir) in sorted(newest.items(), key=lambda item: str(item[1][1])):
        out_dir = path.parent if output is None else output / path.parent.relative_to(run_dir)
        target = (out_dir / exec_samples_name(task)).resolve()
        if target in targets:
            raise InputError(f"{path} and {targets[target]} would both write {target}; score them separately")
        targets[target] = path
        logs.append(SampleLog(task, path, out_dir, read_predictions(path), stamp))
    return logs


def read_predictions(path: Path) -> list[Prediction]:
    """The predictions of one lm-eval sample log (its filtered answer, else its raw response)."""
    predictions = []
    for number, record in iter_json_objects(path, InputError, "sample log"):
        where = f"{path}:{number}"
        doc = record.get("doc")
        if not isinstance(doc, dict):
            raise InputError(f"{where}: not an lm-eval sample (no 'doc')")
        example_id, trajectory_id, step = doc.get("example_id"), doc.get("trajectory_id"), doc.get("step")
        if not (isinstance(example_id, str) and isinstance(trajectory_id, str) and type(step) is int and step >= 0):
            raise InputError(
                f"{where}: the doc lacks example_id, trajectory_id or step; not a Themisto next-cell sample"
            )
        target = doc.get("target")
        code = _answer(record)
        if code is None:
            raise InputError(f"{where}: no prediction text in 'filtered_resps' or 'resps'")
        filter_name = record.get("filter")
        predictions.append(
            Prediction(
                example_id,
                trajectory_id,
                step,
                code,
                target if isinstance(target, str) else None,
                None if filter_name is None else str(filter_name),
                doc,
            )
        )
    return predictions


def _answer(record: dict[str, Any]) -> str | None:
    """The model's answer: the first filtered response (after the tasks' unfencing), else the first raw one."""
    for key in ("filtered_resps", "resps"):
        value = record.get(key)
        while isinstance(value, list) and value:  # one response per repeat; raw ones nest a level deeper
            value = value[0]
        if isinstance(value, str):
            return value
    return None


def load_recorded(
    trajectory_ids: Iterable[str], data: str | None = None, trajectories: Sequence[str | os.PathLike[str]] = ()
) -> dict[str, list[RecordedStep]]:
    """The recorded steps of each trajectory, from trajectory files or from the build's ``trajectories`` config."""
    wanted = set(trajectory_ids)
    found: dict[str, dict[int, RecordedStep]] = {}
    if trajectories:
        for path in trajectory_files(trajectories):
            steps = _read_trajectory_file(path, wanted)
            for trajectory_id, by_step in steps.items():
                if trajectory_id in found:
                    raise InputError(f"{path}: trajectory {trajectory_id} is also in another file")
                found[trajectory_id] = by_step
        where = ", ".join(str(path) for path in trajectories)
    else:
        where = _read_build(data, wanted, found)
    missing = sorted(wanted - set(found))
    if missing:
        raise InputError(f"trajectory {missing[0]} of the samples is not in {where}")
    result = {}
    for trajectory_id, by_step in found.items():
        if sorted(by_step) != list(range(len(by_step))):
            raise InputError(f"trajectory {trajectory_id} in {where} lacks steps; a replay needs all of them")
        result[trajectory_id] = [by_step[number] for number in range(len(by_step))]
    return result


def _read_trajectory_file(path: Path, wanted: set[str]) -> dict[str, dict[int, RecordedStep]]:
    from themisto.trajectory import iter_steps

    found: dict[str, dict[int, RecordedStep]] = {}
    for step in iter_steps(path):
        if step.trajectory_id in wanted:
            found.setdefault(step.trajectory_id, {})[step.step] = _recorded(step)
    return found


def _recorded(step: Step) -> RecordedStep:
    return RecordedStep(
        step.step, step.cell_id, step.code, step.output, step.restarted, step.interrupt_after, step.recording_stopped
    )


_COLUMNS = ["trajectory_id", "step", "cell_id", "code", "output", "restarted", "interrupt_after", "error"]


def _read_build(data: str | None, wanted: set[str], found: dict[str, dict[int, RecordedStep]]) -> str:
    """Fill ``found`` from the build's ``trajectories`` config (a folder, or a Hub id); returns where it was."""
    from themisto.building.parquet import parquet_path
    from themisto.evaluation.data import data_location

    location = data_location(data)
    if Path(location).is_dir():
        path = parquet_path(Path(location), TRAJECTORIES, TRAJECTORY_SPLIT)
        if not path.is_file():
            raise OptionError(
                "{path} is missing: the build has no {config} config; pass {trajectories}",
                path=path,
                config=TRAJECTORIES,
            )
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(path, columns=_COLUMNS, filters=[("trajectory_id", "in", sorted(wanted))]).to_pylist()
        except Exception as exc:  # pyarrow raises its own errors for a damaged or foreign file
            raise InputError(f"{path}: cannot read the trajectories: {short_message(exc)}") from exc
        source = str(path)
    else:
        import datasets

        try:
            table = datasets.load_dataset(location, TRAJECTORIES, split=TRAJECTORY_SPLIT)
        except (ValueError, OSError) as exc:
            raise InputError(f"{location}: cannot load config {TRAJECTORIES!r}: {short_message(exc)}") from exc
        rows = [row for row in table.select_columns(_COLUMNS) if row["trajectory_id"] in wanted]
        source = location
    for row in rows:
        step = RecordedStep(
            row["step"],
            row["cell_id"],
            row["code"],
            row["output"],
            bool(row["restarted"]),
            row["interrupt_after"],
            is_recording_stopped(row["error"]),
        )
        found.setdefault(row["trajectory_id"], {})[step.step] = step
    return source


def check_predictions(logs: Sequence[SampleLog], recorded: dict[str, list[RecordedStep]]) -> None:
    """Every prediction's step exists, and its target is that step's code (the right trajectories were given)."""
    for log in logs:
        for prediction in log.predictions:
            steps = recorded[prediction.trajectory_id]
            if prediction.step >= len(steps):
                raise InputError(
                    f"{log.source}: example {prediction.example_id}: trajectory {prediction.trajectory_id}"
                    f" has only {len(steps)} steps"
                )
            if prediction.target is not None and prediction.target != steps[prediction.step].code:
                raise InputError(
                    f"{log.source}: example {prediction.example_id}: the target is not the code of step"
                    f" {prediction.step} of the trajectory; pass the trajectories the dataset was built from"
                )


# --- running predictions in forked children -------------------------------------------------


@dataclass
class ForkingRecorder(Recorder):
    """A :class:`Recorder` whose kernel can also run cells in forked children (see :mod:`themisto.kernelside.fork`).

    ``scratch`` holds the children's copies of the working directory.
    """

    scratch: Path | None = None

    def writable(self) -> list[Path]:
        """The sandboxed kernel writes its children's copies into ``scratch`` too."""
        return [*super().writable(), *([self.scratch] if self.scratch is not None else [])]

    def _connect(self) -> None:
        super()._connect()
        install = self._execute(inject.fork_install_code(), silent=True, timeout=KERNEL_START_TIMEOUT)
        if install.reply is None or install.reply["content"]["status"] != "ok":
            raise KernelError(f"kernel {self.options.kernel_name!r} cannot run forked predictions")

    def before(self) -> dict[str, Variable] | None:
        """The namespace as the last snapshot received described it (the state before the next cell); None: unknown."""
        generation, entries = self._known
        return None if generation < 0 else {name: entry[0] for name, entry in entries.items()}

    def fork_execution(self, codes: Sequence[str]) -> Execution:
        """The silent execute request whose user expression runs ``codes`` in forked children (``fork.run``)."""
        if self.scratch is None:
            raise KernelError("ForkingRecorder.fork_run needs a scratch folder")
        request = json.dumps(
            {
                "codes": list(codes),
                "timeout": self.options.timeout,
                "scratch": str(self.scratch),
                "root": str(self.workdir),
                "max_raw_output_chars": self.options.max_raw_output_chars,
                "max_repr_chars": self.options.max_repr_chars,
                "repr_timeout": self.options.repr_timeout,
                # the children's snapshots name the variables unchanged since the recorder's last one
                "known": self._known[0],
            }
        )
        # Each child has its timeout for the cell and again for the snapshot; the copies take the rest.
        limit = len(codes) * 2 * self.options.timeout + KERNEL_START_TIMEOUT
        return self._execute(
            "", silent=True, timeout=limit, user_expressions={"fork": inject.fork_run_expression(request)}
        )

    def fork_run(self, codes: Sequence[str]) -> list[dict[str, Any]] | None:
        """Each code's result in a forked child of the kernel; None if the kernel died (it has been restarted)."""
        execution = self.fork_execution(codes)
        if execution.died or execution.wedged:
            self.restart()
            return None
        answer = (execution.reply or {}).get("content", {}).get("user_expressions", {}).get("fork")
        if not isinstance(answer, dict) or answer.get("status") != "ok":
            # notebook code broke os.fork or the module (or the request timed out and was interrupted)
            evalue = answer.get("evalue", "no answer") if isinstance(answer, dict) else "no answer"
            fault = {"status": "fault", "ename": "KernelError", "evalue": f"the forked run failed: {evalue}"}
            return [fault] * len(codes)
        try:
            results = json.loads(answer["data"]["text/plain"])
        except (KeyError, TypeError, ValueError):
            results = None
        if not isinstance(results, list) or len(results) != len(codes) or not all(isinstance(r, dict) for r in results):
            fault = {"status": "fault", "ename": "KernelError", "evalue": "malformed answer from the kernel"}
            return [fault] * len(codes)
        return results


@dataclass(frozen=True)
class Outcome:
    """What one predicted cell did in its forked child."""

    ok: bool
    output: str
    error: str | None  # "EName: evalue", one line
    state: str | None  # state_key of the namespace after it; None when no snapshot came back
    seconds: float  # the cell's own run time in the child
    forked: bool = True  # False: a blank cell, whose outcome is known without running it


def state_key(variables: Sequence[Variable]) -> str:
    """A hash of a namespace by what a cell decides: names, types, reprs (addresses masked), shapes, lengths.

    The size estimate is left out: ``getsizeof`` of a list depends on how it
    was grown (``list(range(3))`` and ``[0, 1, 2]`` differ), not on its value.
    """
    return state_hash([replace(v, size_bytes=None, size_method=None, repr=normalize_output(v.repr)) for v in variables])


_KILLED = "DeadKernelError: the prediction killed the kernel, which was restarted"
KILLED_KERNEL = Outcome(False, _KILLED, _KILLED, None, 0.0)


def parse_outcome(result: dict[str, Any], options: RecordOptions, before: dict[str, Variable]) -> Outcome:
    """An :class:`Outcome` from a child's result, rendered with the recorder's own output path.

    A variable the child's snapshot sends by name alone is unchanged since the
    snapshot ``before`` the step (see :func:`themisto.kernelside.snapshot.take`).

    The result passed through code the prediction could have replaced, so
    every field is checked; a malformed one makes the outcome a failure.
    """
    try:
        status, ename, evalue = result["status"], str(result.get("ename", "")), str(result.get("evalue", ""))
        collector = OutputCollector(options.max_raw_output_chars)
        for message in result.get("messages", []):
            msg_type = message["msg_type"]
            collector.add({"msg_type": msg_type, "header": {"msg_type": msg_type}, "content": message["content"]})
        collector.dropped_chars += int(result.get("dropped_chars", 0))
        collector.dropped_trailing_newlines = max(
            collector.dropped_trailing_newlines, int(result.get("dropped_trailing_newlines", 0))
        )
        outputs = collector.outputs
        if status in ("timeout", "exited", "fault"):  # the recorder adds its own faults as error outputs
            outputs = outputs + [{"output_type": "error", "ename": ename, "evalue": evalue, "traceback": []}]
        output, _, _ = collector.render(options.max_output_chars, outputs)
        state = None
        if isinstance(result.get("snapshot"), str):
            payload = json.loads(result["snapshot"])
            records = payload["variables"]
            state = state_key([before[r["name"]] if r.keys() == {"name"} else Variable(**r) for r in records])
        seconds = float(result.get("seconds", 0.0))
    except (KeyError, TypeError, ValueError, AttributeError) as exc:
        return Outcome(False, "", f"KernelError: malformed result of the forked cell ({exc!r})", None, 0.0)
    error = None if status == "ok" else short_message(ValueError(f"{ename}: {evalue}" if evalue else ename))
    return Outcome(status == "ok", output, error, state, seconds)


# --- scoring a trajectory -------------------------------------------------------------------


@dataclass(frozen=True)
class ExecScore:
    """The exec outcomes of one prediction at one step (None: excluded, the step's replay diverged)."""

    exec_ok: int | None
    exec_match: int | None
    state_match: int | None
    diverged: bool
    error: str | None

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
    failed_at: int | None = None  # the step being replayed when scoring failed; later steps were not scored
    failure: str | None = None  # why, one line

    def add(self, step: RecordedStep, replayed: Step, codes: Sequence[str], outcomes: Sequence[Outcome]) -> None:
        """Score the outcomes of ``codes`` against the replay of ``step``."""
        expected = normalize_output(step.output)
        diverged = normalize_output(replayed.output) != expected
        if diverged:
            self.diverged.add(step.step)
        state = state_key(replayed.runtime)
        for code, outcome in zip(codes, outcomes, strict=True):
            self.executions += outcome.forked
            self.execution_seconds += outcome.seconds
            if diverged:
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
    options: RecordOptions,
    on_step: Callable[[], None] | None = None,
) -> TrajectoryScores:
    """Replay one trajectory once, running the codes ``wanted`` at each step in forked children before it.

    ``on_step`` is called after each replayed step. A failure (a kernel that
    cannot start or restart, a working directory that cannot be copied) ends
    this trajectory alone: the result keeps what was scored before it and says
    where and why in ``failed_at`` and ``failure``.
    """
    result = TrajectoryScores(trajectory_id)
    if not wanted:
        return result
    try:
        with tempfile.TemporaryDirectory(prefix="themisto-exec-", ignore_cleanup_errors=True) as root:
            _replay(result, Path(root), steps, wanted, options, on_step)
    except Exception as exc:  # the other trajectories go on; exec_score reports this one and its examples
        log.debug("%s: scoring failed at step %d", trajectory_id, result.steps_replayed, exc_info=True)
        result.failed_at = result.steps_replayed
        message = short_message(exc)
        result.failure = message if isinstance(exc, ThemistoError) else f"{type(exc).__name__}: {message}"
    return result


def _replay(
    result: TrajectoryScores,
    root: Path,
    steps: Sequence[RecordedStep],
    wanted: dict[int, list[str]],
    options: RecordOptions,
    on_step: Callable[[], None] | None,
) -> None:
    """Score into ``result``, replaying in a private copy of the working directory under ``root``."""
    work, scratch = root / "work", root / "predictions"
    if options.workdir is not None:
        fork.copy_tree(str(options.workdir), str(work))
    else:
        work.mkdir()
    scratch.mkdir()
    recorder = ForkingRecorder(result.trajectory_id, work, options, scratch=scratch)
    with recorder:
        # the cells run since the kernel (re)started, with their recorded interrupts, to rebuild it after a death
        session: list[tuple[str, float | None]] = []
        fresh = True  # the kernel has run nothing since it (re)started
        for step in steps[: max(wanted) + 1]:
            if step.restarted and not fresh:
                recorder.restart()
                session = []
            codes = wanted.get(step.step)
            if step.recording_stopped:
                # never run again what stopped a recording: the kernel restarts there, as it did then, and
                # the step shows nothing of its cell to compare with (builds never make it a target)
                recorder.skip_stopped()
                session, fresh = [], True
                if codes:
                    result.exclude(step, codes)
            else:
                started = time.perf_counter()
                outcomes = _run_forked(recorder, codes, session, options) if codes else None
                result.fork_seconds += time.perf_counter() - started
                # the user's interrupt too: a cell they stopped must not run on and leave another state
                replayed = recorder.run_cell(step.code, step.cell_id, interrupt_after=step.interrupt_after)
                fresh = replayed.error is not None and replayed.error.get("ename") == DEAD_KERNEL_ERROR
                if fresh:
                    session = []
                else:
                    session.append((step.code, step.interrupt_after))
                if codes and outcomes is not None:
                    result.add(step, replayed, codes, outcomes)
            result.steps_replayed += 1
            if on_step is not None:
                on_step()


def _run_forked(
    recorder: ForkingRecorder, codes: list[str], session: Sequence[tuple[str, float | None]], options: RecordOptions
) -> list[Outcome]:
    """The outcomes of ``codes`` in the state before the step."""
    before = recorder.before()
    outcomes: dict[str, Outcome] = {}
    if before is not None:
        # IPython returns at once for a blank cell (no code, no output, no event): its outcome is known
        state = state_key(list(before.values()))
        outcomes.update((code, Outcome(True, "", None, state, 0.0, forked=False)) for code in codes if not code.strip())
    forked = [code for code in codes if code not in outcomes]
    if forked:
        outcomes.update(zip(forked, _fork_all(recorder, forked, session, options, before or {}), strict=True))
    return [outcomes[code] for code in codes]


def _fork_all(
    recorder: ForkingRecorder,
    codes: list[str],
    session: Sequence[tuple[str, float | None]],
    options: RecordOptions,
    before: dict[str, Variable],
) -> list[Outcome]:
    """The forked outcomes of ``codes``; if one kills the kernel, it is rebuilt and the codes run one at a time."""
    results = recorder.fork_run(codes)
    if results is not None:
        return [parse_outcome(result, options, before) for result in results]
    outcomes = []
    broken = True  # the kernel has been restarted: its namespace is empty
    for code in codes:
        if broken:
            _rebuild(recorder, session)
        single = recorder.fork_run([code])
        broken = single is None
        outcomes.append(KILLED_KERNEL if single is None else parse_outcome(single[0], options, before))
    if broken:
        _rebuild(recorder, session)
    return outcomes


def _rebuild(recorder: ForkingRecorder, session: Sequence[tuple[str, float | None]]) -> None:
    """Run the session's cells again in the (restarted) kernel, bringing it back to the state before the step."""
    for code, interrupt_after in session:
        recorder.replay(code, interrupt_after)


# --- a whole run ----------------------------------------------------------------------------


@dataclass(frozen=True)
class TrajectoryPlan:
    """The distinct codes to run before each step of one trajectory."""

    trajectory_id: str
    wanted: dict[int, list[str]]


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


def reference_logs(
    logs: Sequence[SampleLog], recorded: dict[str, list[RecordedStep]], out_dir: Path
) -> list[SampleLog]:
    """The pseudo-model ``themisto-reference`` per task: the developer's own cell for every example scored."""
    by_task: dict[str, dict[tuple[str | None, str], Prediction]] = {}
    stamps: dict[str, str] = {}
    for log in logs:
        examples = by_task.setdefault(log.task, {})
        stamps[log.task] = max(stamps.get(log.task, ""), log.stamp)
        for p in log.predictions:
            code = recorded[p.trajectory_id][p.step].code
            reference = Prediction(p.example_id, p.trajectory_id, p.step, code, code, p.filter, p.doc)
            examples.setdefault((p.filter, p.example_id), reference)
    folder = out_dir / REFERENCE_MODEL
    return [
        SampleLog(task, folder, folder, list(examples.values()), stamps[task])
        for task, examples in sorted(by_task.items())
    ]


def write_reference_log(log: SampleLog) -> Path:
    """The reference's lm-eval sample log, so reports show its row (the ceiling) beside the models'.

    Its lines are those lm-eval writes (``doc``, ``target``, the responses,
    ``filter``, ``metrics`` and their values), with the developer's cell as the
    answer. The file is named with the newest stamp of the models' logs of the
    task, so every shard of a run writes the same file.
    """
    from themisto.evaluation.metrics import score_sample
    from themisto.vocabulary import METRIC_NAMES

    stamp = log.stamp or time.strftime("%Y-%m-%dT%H-%M-%S.000000")
    records = [
        {
            "doc_id": number,
            "doc": p.doc,
            "target": p.code,
            "resps": [[p.code]],
            "filtered_resps": [p.code],
            "filter": p.filter or "none",
            "metrics": list(METRIC_NAMES),
            **score_sample(p.code, p.code),
        }
        for number, p in enumerate(log.predictions)
    ]
    path = log.out_dir / f"samples_{log.task}_{stamp}.jsonl"
    write_records(path, records)
    return path


def plan_codes(logs: Sequence[SampleLog]) -> list[TrajectoryPlan]:
    """Per trajectory, the distinct codes of all logs to run before each step, in first-seen order."""
    plans: dict[str, dict[int, dict[str, None]]] = {}
    for log in logs:
        for p in log.predictions:
            plans.setdefault(p.trajectory_id, {}).setdefault(p.step, {})[p.code] = None
    return [
        TrajectoryPlan(trajectory_id, {step: list(codes) for step, codes in sorted(steps.items())})
        for trajectory_id, steps in plans.items()
    ]


def exec_score(
    run_dirs: Sequence[str | os.PathLike[str]],
    *,
    data: str | None = None,
    trajectories: Sequence[str | os.PathLike[str]] = (),
    output: str | os.PathLike[str] | None = None,
    options: RecordOptions | None = None,
    jobs: int = 1,
    shard: tuple[int, int] | None = None,
    progress: Progress | None = None,
    finished: Callable[[TrajectoryScores], None] | None = None,
) -> ExecReport:
    """Score every next-cell prediction under ``run_dirs`` by execution; write ``exec_samples_<task>.jsonl`` files.

    Everything is read and checked before any kernel starts: the sample logs,
    the trajectories (``trajectories`` files or folders, else the build's
    ``trajectories`` config found as :func:`themisto.evaluation.data.data_location`
    says) and the options. ``jobs`` trajectories are replayed at once;
    ``shard=(index, count)`` keeps only the trajectories of one shard (as
    ``themisto record`` does) and names its files ``exec_samples_<task>.<I>-of-<N>.jsonl``.
    The reference pseudo-model's files go to ``<output or the first run dir>/themisto-reference``.
    ``progress`` is called as ``("exec-score", steps replayed, steps to replay)``, ``finished`` after
    each trajectory.
    A trajectory that fails (see :func:`score_trajectory`) does not stop the
    others: the samples it scored before the failure are written with the
    rest, those after it are left out (counted in ``ExecReport.left_out``), and
    ``ExecReport.failures`` says where and why; nothing is raised for it.
    """
    options = options or RecordOptions()
    if jobs < 1:
        raise OptionError("{jobs} must be at least 1")
    if not run_dirs:
        raise InputError("no run folder given")
    out = None if output is None else Path(output)
    logs = find_sample_logs([Path(d) for d in run_dirs], out)
    recorded = load_recorded({p.trajectory_id for log in logs for p in log.predictions}, data, trajectories)
    check_predictions(logs, recorded)
    check_options(options)
    references = reference_logs(logs, recorded, out if out is not None else Path(run_dirs[0]))
    plans = plan_codes(logs + references)
    if shard is not None:
        plans = select_shard(plans, *shard)
    report = ExecReport()
    counter = _StepCounter(sum(max(plan.wanted) + 1 for plan in plans), progress)
    # Threads suffice: each worker mostly waits on its kernel and its children.
    with ThreadPoolExecutor(max_workers=jobs, thread_name_prefix="themisto-exec") as pool:
        futures = [
            pool.submit(
                score_trajectory, plan.trajectory_id, recorded[plan.trajectory_id], plan.wanted, options, counter.step
            )
            for plan in plans
        ]
        try:
            for future in as_completed(futures):
                scores = future.result()
                report.trajectories.append(scores)
                if finished is not None:
                    finished(scores)
        except BaseException:  # Ctrl-C: start no further trajectory
            pool.shutdown(wait=False, cancel_futures=True)
            raise
    scored = {t.trajectory_id: t for t in report.trajectories}
    for log in references:
        write_reference_log(log)
    for log in logs + references:
        records = []
        for p in log.predictions:
            trajectory = scored.get(p.trajectory_id)
            if trajectory is None:  # another shard's
                continue
            score = trajectory.scores.get((p.step, p.code))
            if score is None:  # its trajectory failed before this step
                report.left_out[p.trajectory_id] = report.left_out.get(p.trajectory_id, 0) + 1
                continue
            records.append(score.record(p))
        if records:
            path = log.out_dir / exec_samples_name(log.task, shard)
            write_records(path, records)
            report.files.append(ExecFile(log.model, log.task, path, records))
    return report


class _StepCounter:
    """Steps replayed across the pool's threads, reported to a progress hook."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.total, self.done, self._progress = total, 0, progress
        self._lock = threading.Lock()

    def step(self) -> None:
        with self._lock:
            self.done += 1
            if self._progress is not None:
                self._progress("exec-score", self.done, self.total)


def write_records(path: Path, records: Iterable[dict[str, Any]]) -> None:
    """Write JSON Lines through a temporary file, so a reader never sees half of them."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        partial = path.with_name(f".{path.name}.partial")
        with partial.open("w", encoding="utf-8") as handle:
            for record in records:
                handle.write(json.dumps(record, ensure_ascii=False) + "\n")
        os.replace(partial, path)
    except OSError as exc:
        raise InputError(f"{path}: cannot write: {exc.strerror or exc}") from exc


def exec_metric_values(records: Iterable[dict[str, Any]], metric: str) -> list[int]:
    """The 0/1 values of one exec metric, excluded (null) samples left out."""
    if metric not in EXEC_METRICS:
        raise InputError(f"unknown exec metric {metric!r} (choose from {', '.join(EXEC_METRICS)})")
    return [record[metric] for record in records if record[metric] is not None]
