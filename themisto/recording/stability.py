"""The determinism ceiling and re-execution fidelity of recorded trajectories.

:func:`check_stability` replays every trajectory ``runs`` times, each run in a
fresh kernel (restarting it where a step is marked ``restarted``), and
compares each step's output across the runs *and* with the recorded output.
A step is ``stable`` when all of them are identical, ``stable_norm`` when they
are identical after :func:`themisto.kernel.outputs.normalize_output`. The
determinism ceiling is the share of stable steps: no predictor, however
perfect, can match an unstable target exactly.

Fidelity needs no extra run: for steps that carry the ``original_output`` of
the source (a JuNE log's ``finished_execute``, a notebook cell's stored outputs), the recorded
re-execution is compared with what the original session printed
(:mod:`themisto.recording.fidelity`: exact, after declared normalisations, unknown).

Each trajectory is replayed with the options it was recorded with, read from
its provenance (:mod:`themisto.provenance`), and annotated copies
carry that provenance along.

Causes of instability are named per unstable step by
:func:`themisto.recording.instability.instability_causes`. Each kernel gets
the recorder's environment, so it draws its own str hash seed unless
``PYTHONHASHSEED`` is set: printed sets of strings then show up as
``hash_order`` instability, as they would for any user re-running the notebook.
"""

from __future__ import annotations

import json
import os
from collections import Counter
from collections.abc import Callable, Collection, Iterable, Sequence
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from themisto.exceptions import InputError, OptionError
from themisto.filesystem import write_atomically
from themisto.kernel import (
    DEAD_KERNEL_ERROR,
    ENVIRONMENT,
    Recorder,
    check_options,
    chosen_options,
    normalize_output,
    with_recorded,
)
from themisto.progress import Progress, ProgressCounter
from themisto.provenance import copy_provenance, read_provenance
from themisto.recording.fidelity import Fidelity, fidelity
from themisto.recording.instability import instability_causes
from themisto.recording.options import RecordOptions
from themisto.trajectory import Step, read_trajectory, trajectory_files, write_trajectory
from themisto.vocabulary import INSTABILITY_CAUSES

SUMMARY_FILE = "stability.json"


# --- replay and comparison -----------------------------------------------------------------


def replay_outputs(
    steps: Sequence[Step], options: RecordOptions, on_step: Callable[[], None] | None = None
) -> list[str]:
    """Run the steps' code in order in one fresh kernel, restarting where a step was ``restarted``.

    A step recorded as ``RecordingStopped`` is not run: the kernel restarts there, as it did in the recording.

    ``on_step`` is called after each step.
    """
    if not steps:
        return []
    outputs: list[str] = []
    workdir = Path(options.workdir) if options.workdir is not None else Path.cwd()
    with Recorder(trajectory_id=steps[0].trajectory_id, workdir=workdir, options=options) as recorder:
        fresh = True  # the kernel has run nothing since it started
        for step in steps:
            if step.restarted and not fresh:
                recorder.restart()
            if step.recording_stopped:
                recorder.skip_stopped()  # never run again what stopped a recording; its output is the marker
                outputs.append(step.output)
                fresh = True
            else:
                rerun = recorder.run_cell(step.code, step.cell_id, interrupt_after=step.interrupt_after)
                outputs.append(rerun.output)
                fresh = rerun.error is not None and rerun.error.get("ename") == DEAD_KERNEL_ERROR
            if on_step is not None:
                on_step()
    return outputs


def annotate(steps: Sequence[Step], runs: Sequence[Sequence[str]]) -> list[Step]:
    """Copies of ``steps`` with ``stable``, ``stable_norm`` and ``instability`` set from the reruns' outputs."""
    annotated = []
    code_since_restart = ""
    for index, step in enumerate(steps):
        code_since_restart = step.code if step.restarted else code_since_restart + "\n" + step.code
        outputs = [step.output] + [run[index] for run in runs]
        stable = len(set(outputs)) == 1
        annotated.append(
            replace(
                step,
                stable=stable,
                stable_norm=len({normalize_output(text) for text in outputs}) == 1,
                instability=[] if stable else instability_causes(outputs, step.code, code_since_restart),
            )
        )
    return annotated


# --- summaries -----------------------------------------------------------------------------


@dataclass
class TrajectoryStability:
    """Stability and fidelity of one trajectory file."""

    file: str
    trajectory_id: str
    steps: int
    stable: int
    stable_norm: int
    causes: dict[str, int]  # unstable steps per named cause
    unstable: list[dict[str, Any]]  # step, cell_id, causes of each unstable step
    fidelity: Fidelity | None

    @property
    def stable_share(self) -> float | None:
        """Share of the steps whose output reproduced exactly; None: no steps."""
        return _share(self.stable, self.steps)

    @property
    def stable_norm_share(self) -> float | None:
        """Share of the steps whose output reproduced after normalisation; None: no steps."""
        return _share(self.stable_norm, self.steps)


@dataclass
class StabilityReport:
    """All trajectories of one ``themisto stability`` run and their totals."""

    runs: int
    trajectories: list[TrajectoryStability] = field(default_factory=list)

    @property
    def steps(self) -> int:
        """Steps over all trajectories."""
        return sum(t.steps for t in self.trajectories)

    def ceiling(self, normalised: bool = False) -> float | None:
        """Share of steps whose output a perfect predictor could match (exactly, or after normalisation)."""
        stable = sum(t.stable_norm if normalised else t.stable for t in self.trajectories)
        return stable / self.steps if self.steps else None

    def causes(self) -> dict[str, int]:
        """Unstable steps per cause over all trajectories, in :data:`INSTABILITY_CAUSES` order."""
        total: Counter[str] = Counter()
        for trajectory in self.trajectories:
            total.update(trajectory.causes)
        return {cause: total[cause] for cause in INSTABILITY_CAUSES if total[cause]}

    def fidelity(self) -> Fidelity | None:
        """Fidelity over all steps, those without an original output counted as unknown (no divergence listed)."""
        parts = [t.fidelity for t in self.trajectories if t.fidelity is not None]
        if not parts:
            return None
        return Fidelity.total(parts)

    def to_dict(self) -> dict[str, Any]:
        """The report as the JSON object of ``stability.json``."""
        overall_fidelity = self.fidelity()
        return {
            "runs": self.runs,
            "trajectories": [
                {
                    **asdict(t),
                    "stable_share": t.stable_share,
                    "stable_norm_share": t.stable_norm_share,
                    "fidelity": _fidelity_dict(t.fidelity),
                }
                for t in self.trajectories
            ],
            "overall": {
                "steps": self.steps,
                "ceiling": self.ceiling(),
                "ceiling_norm": self.ceiling(normalised=True),
                "causes": self.causes(),
                "fidelity": _fidelity_dict(overall_fidelity),
            },
        }


def _share(part: int, whole: int) -> float | None:
    return part / whole if whole else None


def _fidelity_dict(result: Fidelity | None) -> dict[str, Any] | None:
    if result is None:
        return None
    return {**asdict(result), "exact_share": result.exact_share, "norm_share": result.norm_share}


def summarise(path: Path, steps: Sequence[Step]) -> TrajectoryStability:
    """Counts of one annotated trajectory."""
    unstable = [s for s in steps if not s.stable]
    causes: Counter[str] = Counter(cause for s in unstable for cause in s.instability)
    return TrajectoryStability(
        file=path.name,
        trajectory_id=steps[0].trajectory_id if steps else path.stem,
        steps=len(steps),
        stable=sum(bool(s.stable) for s in steps),
        stable_norm=sum(bool(s.stable_norm) for s in steps),
        causes={cause: causes[cause] for cause in INSTABILITY_CAUSES if causes[cause]},
        unstable=[{"step": s.step, "cell_id": s.cell_id, "causes": s.instability} for s in unstable],
        fidelity=fidelity(steps),
    )


# --- the command ---------------------------------------------------------------------------


def check_stability(
    paths: Iterable[str | os.PathLike[str]],
    runs: int,
    out_dir: str | os.PathLike[str] | None = None,
    options: RecordOptions | None = None,
    progress: Progress | None = None,
    chosen: Collection[str] | None = None,
) -> StabilityReport:
    """Replay each trajectory ``runs`` times, annotate its steps and summarise.

    Each trajectory is replayed with the options it was recorded with (:func:`replay_options`);
    ``chosen`` names the options of ``options`` the caller set on purpose (default: those that
    differ from their defaults). Annotated copies carry their trajectory's provenance.

    With ``out_dir``, each annotated trajectory is written there under its own
    file name as soon as it is done (replacing the file atomically, so
    ``out_dir`` may be the input folder), and ``stability.json`` is rewritten
    after every trajectory, so an interrupted run keeps what it finished.
    All files are read and validated before any kernel starts. ``progress`` follows
    the steps re-executed, ``("stability", done, runs * steps)``.
    """
    if runs < 1:
        raise OptionError("{runs} must be at least 1, got {got}", got=runs)
    options = options or RecordOptions()
    chosen = chosen_options(options) if chosen is None else chosen
    check_options(options)
    files = trajectory_files(paths)
    if not files:
        raise InputError("no trajectory files given")
    names = Counter(path.name for path in files)
    clashes = sorted(name for name, count in names.items() if count > 1)
    if out_dir is not None and clashes:
        raise InputError(f"two inputs share the file name {clashes[0]}; their annotated copies would collide")
    if out_dir is not None and Path(out_dir).exists() and not Path(out_dir).is_dir():
        raise InputError(f"output {out_dir} exists and is not a folder")
    trajectories = [(path, read_trajectory(path), replay_options(path, options, chosen)) for path in files]
    for replay in {(t[2].workdir, t[2].kernel_name): t[2] for t in trajectories}.values():
        check_options(replay)
    report = StabilityReport(runs=runs)
    counter = ProgressCounter("stability", runs * sum(len(steps) for _, steps, _ in trajectories), progress)
    for path, steps, replay in trajectories:
        reruns = [replay_outputs(steps, replay, counter.add) for _ in range(runs)]
        annotated = annotate(steps, reruns)
        report.trajectories.append(summarise(path, annotated))
        if out_dir is not None:
            copy = Path(out_dir) / path.name
            write_trajectory(copy, annotated)
            copy_provenance(path, copy, RecordOptions)
            summary = json.dumps(report.to_dict(), indent=2, ensure_ascii=False) + "\n"
            write_atomically(Path(out_dir) / SUMMARY_FILE, summary)
    return report


def replay_options(path: Path, given: RecordOptions, chosen: Collection[str]) -> RecordOptions:
    """The options to replay one trajectory with: those it was recorded with, where its provenance says.

    The caller's ``chosen`` options may change the replay environment (timeout, working directory,
    kernel, memory and CPU limits) but not what a step holds (output and repr caps): outputs cut
    differently could never compare equal. Without provenance (recorded before it existed, or
    imported), ``given`` applies, and the working directory defaults to the current one.
    """
    recorded = read_provenance(path, RecordOptions)
    if recorded is None or recorded.options is None:
        return given
    options = with_recorded(given, recorded.options, chosen, str(path), may_change=ENVIRONMENT)
    if "workdir" in chosen:
        return options
    if recorded.workdir is None or not recorded.workdir.is_dir():
        raise OptionError(
            "{path}: the folder it was recorded in, {folder}, is gone; give the {workdir} to replay it in",
            path=path,
            folder=recorded.workdir,
        )
    return replace(options, workdir=recorded.workdir)
