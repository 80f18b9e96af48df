"""exec-score's inputs: the predictions of lm-eval sample logs, the recorded steps to replay, and the plan.

Everything here is read and checked before any kernel starts.
"""

from __future__ import annotations

import os
from collections.abc import Collection, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, TypeVar

from themisto.evaluation.exec.files import exec_samples_name
from themisto.exceptions import InputError, OptionError, short_message
from themisto.jsonl import iter_json_objects
from themisto.kernel import ENVIRONMENT, KernelOptions, with_recorded
from themisto.lm_eval_files import find_sample_log_files, newest_sample_logs
from themisto.provenance import read_provenance
from themisto.trajectory import Step, is_recording_stopped, trajectory_files
from themisto.vocabulary import (
    NEXT_CELL_TASK,
    REFERENCE_MODEL,
    RUNTIME_SUFFIX,
    TRAJECTORIES,
    TRAJECTORY_SPLIT,
)

NEXT_CELL_TASKS = (NEXT_CELL_TASK, NEXT_CELL_TASK + RUNTIME_SUFFIX)

Options = TypeVar("Options", bound=KernelOptions)


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


def find_sample_logs(run_dirs: Sequence[Path], output: Path | None = None) -> list[SampleLog]:
    """The newest next-cell sample log of each task in each folder under ``run_dirs``, with its predictions.

    Exec samples go next to each log, or with ``output`` to the same relative
    folder under ``output``. A ``themisto-reference`` folder holds what an
    earlier exec-score wrote for the developer's cells, not a model's
    predictions: its logs are skipped (each run writes the reference anew).
    """
    newest, _ = newest_sample_logs(find_sample_log_files(run_dirs))
    newest = [log for log in newest if log.task in NEXT_CELL_TASKS and log.path.parent.name != REFERENCE_MODEL]
    if not newest:
        listed = ", ".join(str(d) for d in run_dirs)
        raise InputError(
            f"no next-cell sample logs (samples_{NEXT_CELL_TASK}*_<timestamp>.jsonl) under {listed};"
            f" evaluate with the tasks {', '.join(NEXT_CELL_TASKS)} and log the samples"
        )
    logs = []
    targets: dict[Path, Path] = {}
    for found in newest:
        path = found.path
        out_dir = path.parent if output is None else output / path.parent.relative_to(found.run_dir)
        target = (out_dir / exec_samples_name(found.task)).resolve()
        if target in targets:
            raise InputError(f"{path} and {targets[target]} would both write {target}; score them separately")
        targets[target] = path
        predictions = read_predictions(path)
        if not predictions:
            raise InputError(f"{path}: the sample log is empty; evaluate again with --log_samples")
        logs.append(SampleLog(found.task, path, out_dir, predictions, found.stamp))
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


@dataclass
class Recorded:
    """The recorded steps of each trajectory, and the file each came from (none for a build's)."""

    steps: dict[str, list[RecordedStep]]
    files: dict[str, Path] = field(default_factory=dict)


def load_recorded(
    trajectory_ids: Iterable[str], data: str | None = None, trajectories: Sequence[str | os.PathLike[str]] = ()
) -> Recorded:
    """The recorded steps of each trajectory, from trajectory files or from the build's ``trajectories`` config."""
    wanted = set(trajectory_ids)
    found: dict[str, dict[int, RecordedStep]] = {}
    files: dict[str, Path] = {}
    if trajectories:
        for path in trajectory_files(trajectories):
            steps = _read_trajectory_file(path, wanted)
            for trajectory_id, by_step in steps.items():
                if trajectory_id in found:
                    raise InputError(f"{path}: trajectory {trajectory_id} is also in another file")
                found[trajectory_id] = by_step
                files[trajectory_id] = path
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
    return Recorded(result, files)


def replay_options(path: Path | None, given: Options, chosen: Collection[str]) -> Options:
    """The options to replay a trajectory file with: those its provenance names, as ``stability`` replays it.

    The caller's ``chosen`` options may change the replay environment (timeout, working directory, kernel,
    limits) but not what a step holds (output and repr caps, the variable cap). Unless the caller chose one,
    the replay runs in the folder it was recorded in while that still exists (else in ``given``'s); a
    trajectory without provenance (from a build, or imported) replays with ``given``.
    """
    recorded = None if path is None else read_provenance(path, type(given))
    if recorded is None or recorded.options is None:
        return given
    options = with_recorded(given, recorded.options, chosen, str(path), may_change=ENVIRONMENT)
    if "workdir" in chosen:
        return options
    folder = recorded.workdir if recorded.workdir is not None and recorded.workdir.is_dir() else given.workdir
    return replace(options, workdir=folder)


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
    from themisto.building.card_reading import parquet_path
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


@dataclass(frozen=True)
class TrajectoryPlan:
    """The distinct codes to run before each step of one trajectory."""

    trajectory_id: str
    wanted: dict[int, list[str]]


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
