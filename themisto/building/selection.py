"""Which steps become examples: eligibility, the test sample per task, and the counts the card reports.

:func:`select` is the build's first pass: :func:`scan` collects only lengths and
flags per step (:class:`StepStats`), then each rule of the paper's protocol, each an
option of :class:`SelectionOptions`, decides which steps are eligible for each task
(``full``) and :func:`stratified_sample` draws the ``test`` split by target-length
quartile. The rules, their defaults and where they deviate from the paper are those
of ``docs/protocol.md`` ("Selection").
"""

from __future__ import annotations

import dataclasses
import random
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from themisto.building.forked import Forked
from themisto.building.history import example_id, target_stable
from themisto.declaration import at_least, check_declared, option, within
from themisto.exceptions import InputError, OptionError, TrajectoryError
from themisto.progress import Progress
from themisto.recording.fidelity import Fidelity
from themisto.trajectory import IMAGE_PLACEHOLDER, Step, ValidatedFiles, invented_error, is_image_only
from themisto.vocabulary import OUTPUT_PREDICTION, TASKS

SAMPLES = ("paper", "all")
# One test sample for both tasks (the output-prediction draw), or one per task.
SHARED, SEPARATE = "shared", "separate"
TASK_SAMPLES = (SEPARATE, SHARED)
# A matplotlib figure's text stand-in, printed when a figure is a cell's value but not drawn inline.
FIGURE_TEXT = re.compile(r"<Figure size \d+(?:\.\d+)?x\d+(?:\.\d+)? with \d+ Axes>")
# What a plotting call returns beside the picture it draws: the axes, a seaborn grid, artists (a list of them too),
# a title's Text, a figure; matched with the address as recorded or masked (``at 0x?``).
_PLOT_OBJECT = (
    r"<(?:Axes|AxesSubplot|Axes3D|PolarAxes)\b[^\n]*>"
    r"|<[\w.]*(?:matplotlib|seaborn|mpl_toolkits)\.[\w.]+ (?:object )?at 0x[0-9a-fA-F?]+>"
    r"|<\w*Container object of \d+ artists>|Text\([^\n]*\)|<Figure size [^\n]*>"
)
# a line of them: one, or a list's items (pandas and IPython break a long list over lines: "[<a>,", " <b>]")
PLOT_OBJECT_LINE = re.compile(rf"[ \t]*\[?(?:{_PLOT_OBJECT})(?:,[ \t]*(?:{_PLOT_OBJECT}))*,?\]?")
# Examples drawn from the target-length quartiles Q1, Q2+Q3 and Q4 (the paper's 10/180/10).
PAPER_STRATA = (10, 180, 10)
# The paper's selected cells had at least five earlier actions: min_history's default with sample="paper".
PAPER_MIN_HISTORY = 5


@dataclass(frozen=True)
class SelectionOptions:
    """Which steps become examples and how the history is bounded."""

    # The field order is the order of the card's build options (and of --help). A switch's help says what
    # giving its flag does.
    sample: str = option(
        "paper",
        "test split: 'paper' = 200 per task stratified by target-length quartile (10/180/10), "
        "'all' = every eligible example",
        choices=SAMPLES,
    )
    seed: int = option(0, "seed of the paper sample")
    include_errors: bool = option(False, "keep steps whose output is an exception (excluded by default)")
    include_invented_errors: bool = option(
        False,
        "with --include-errors, keep also the errors a replay raised where the source's stored output shows "
        "none (excluded by default: an error of the replay, not of the author's session)",
    )
    include_images: bool = option(
        False,
        "keep steps whose output shows only images (plots) as output-prediction targets (excluded by default)",
    )
    quantile: float = option(
        0.99, "drop steps whose code or output is longer than this length quantile", check=within(0, 1)
    )
    stable_only: bool = option(
        False,
        "keep only steps whose output was reproducible across re-executions, for both tasks "
        "(needs the annotations of `themisto stability`)",
    )
    max_context_chars: int = option(
        8000,
        "history budget: characters of code and output, oldest whole cells cut first; 0 keeps the whole "
        "history, as the paper does",
        check=at_least(0),
    )
    include_empty: bool = option(
        False, "keep examples whose target is empty: cells without output, empty cells (excluded by default)"
    )
    # None: resolved from the sample in __post_init__
    min_history: int | None = option(
        None,
        "draw into the test split only steps with at least N earlier executions in their trajectory; the full "
        "split keeps every eligible example",
        metavar="N",
        parse=int,
        check=at_least(0),
        default_text=f"{PAPER_MIN_HISTORY} with --sample paper, as the paper's selected cells had, 0 with --sample all",
    )
    samples: str = option(
        SEPARATE,
        "'shared' = one test sample for both tasks, the output-prediction draw (the paper's reading), "
        "'separate' = each task drawn by its own target's length",
        choices=TASK_SAMPLES,
    )
    figure_text_as_image: bool = option(
        True,
        "keep outputs that are only a figure's text stand-in ('<Figure size 640x480 with 1 Axes>') as "
        "output-prediction targets (by default they count as image-only outputs)",
        flag="--keep-figure-text",
    )
    include_timing: bool = option(
        False,
        "keep output-prediction targets of cells that measure time and print a duration (excluded by default)",
    )
    original_history: bool = option(
        False,
        "show each history cell with the output its source stored (a notebook's own outputs, a log's "
        "original_output) where there is one, the replay's elsewhere; targets stay the replay's",
    )
    mask_machine_text: bool = option(
        True,
        "show outputs as recorded: by default kernel pids (ipykernel_<pid>), random temp names (tmp<random>) "
        "and memory addresses (at 0x?) are masked in the history and the targets",
        flag="--keep-machine-text",
    )

    def __post_init__(self) -> None:
        check_declared(self)
        if self.min_history is None:  # frozen: resolved once, so the card records the number used
            object.__setattr__(self, "min_history", PAPER_MIN_HISTORY if self.sample == "paper" else 0)


@dataclass(frozen=True, slots=True)  # one per input step: slots keep selection memory small
class StepStats:
    """What selection needs to know about a step, without its payload."""

    example_id: str
    step: int  # also the number of earlier executions in the trajectory
    code_chars: int
    output_chars: int
    is_error: bool
    invented_error: bool  # an error the source's stored output does not show (invented_error)
    recording_stopped: bool  # a recorder artefact (Step.recording_stopped), never a target
    image_only: bool  # the output shows nothing but images (is_image_only)
    plot_object: bool  # the output is images and the plot objects drawn there (is_plot_output)
    figure_text: bool  # the output is nothing but figures' text stand-ins (is_figure_text)
    timing: bool  # the step measures time and its output shows a duration (shows_timing)
    stable: bool | None  # the step's output, as ``Step.stable``
    code_blank: bool
    output_blank: bool

    def target_chars(self, task: str) -> int:
        return self.output_chars if task == OUTPUT_PREDICTION else self.code_chars

    def target_blank(self, task: str) -> bool:
        """Whether the task's target (the output, or the code for next cell) is empty or blank."""
        return self.output_blank if task == OUTPUT_PREDICTION else self.code_blank


@dataclass
class TaskSelection:
    """The example ids of one task: all eligible ones and the test sample."""

    full: list[str]
    test: list[str]
    strata: tuple[int, int, int] | None  # sizes of Q1, Q2+Q3, Q4 among eligible examples (paper sample)
    # per split: how many examples have a stable / unstable / unknown target (see target_stable)
    stability: dict[str, tuple[int, int, int]] = field(default_factory=dict)


@dataclass
class Selection:
    """The outcome of selection over a set of trajectories."""

    trajectories: int
    steps: int
    errors: int
    invented_errors: int  # errors the sources' stored outputs do not show (invented_error)
    plot_objects: int  # outputs of images and the plot objects drawn (is_plot_output)
    fidelity: Fidelity  # the recorded outputs against the sources' stored ones
    max_code_chars: float
    max_output_chars: float
    tasks: dict[str, TaskSelection] = field(default_factory=dict)
    skipped: dict[Path, str] = field(default_factory=dict)  # invalid trajectory files left out, and why
    # the files read whole and found valid: the build's second pass reads them unchanged without validating again
    validated: ValidatedFiles = field(default_factory=ValidatedFiles, repr=False, compare=False)


def scan(
    paths: Sequence[Path],
    options: SelectionOptions,
    progress: Progress | None = None,
    validated: ValidatedFiles | None = None,
    jobs: int = 1,
) -> tuple[list[StepStats], dict[Path, str], Fidelity]:
    """First pass: lengths and flags of every step, in trajectory-file order, the invalid files skipped and
    the replay's fidelity to the sources' stored outputs over the valid files.

    Output lengths are those of the output as a model is shown it (masked, with ``options.mask_machine_text``).
    A file that breaks the step schema or repeats a step number is skipped
    whole (one bad trajectory never fails a corpus), and so is one whose
    ``state_hash`` repeats the previous step's while its variables differ
    (the build takes an equal hash for an unchanged state); a step id found in two
    files is an error of the corpus, not of either file. ``progress`` counts files;
    ``validated`` remembers the files read whole and found valid. ``jobs=2`` reads the later files, about
    half the bytes, in a forked process: the same outcome in about half the time on two cores.
    """
    validated = ValidatedFiles() if validated is None else validated
    later = _later_half(paths) if jobs == 2 else len(paths)
    second = (
        Forked("the selection's second process", _scan_part, paths[later:], options) if later < len(paths) else None
    )
    try:
        scanned: list[_Scanned] = []
        for done, path in enumerate(paths[:later]):
            if progress is not None:
                progress("select", done, len(paths))
            scanned.append(_scan_file(path, options, validated))
    except BaseException:
        if second is not None:
            second.process.kill()  # its answer is no longer wanted
            second.process.join()
        raise
    if second is not None:
        answer = second.result()
        scanned.extend(_scanned_from_json(item) for item in answer["files"])
        validated.trust(answer["validated"])
    stats: list[StepStats] = []
    skipped: dict[Path, str] = {}
    seen: set[str] = set()
    faithful: list[Fidelity] = []
    for path, outcome in zip(paths, scanned, strict=True):
        if isinstance(outcome, str):
            skipped[path] = outcome
            continue
        mine, compared = outcome
        for one in mine:
            if one.example_id in seen:
                raise InputError(f"{path}: step {one.example_id} occurs twice (duplicate trajectory id or step number)")
            seen.add(one.example_id)
        stats.extend(mine)
        faithful.append(compared)
    if progress is not None:
        progress("select", len(paths), len(paths))
    return stats, skipped, Fidelity.total(faithful)


# One file's scan: its steps' stats and its fidelity, or why the file is skipped.
_Scanned = tuple[list[StepStats], Fidelity] | str
_STATS_FIELDS = tuple(field.name for field in dataclasses.fields(StepStats))
_FIDELITY_COUNTS = ("steps", "exact", "norm", "unknown", "invented_errors")  # what Fidelity.total adds up


def _scan_file(path: Path, options: SelectionOptions, validated: ValidatedFiles) -> _Scanned:
    """The stats of one file's steps and its fidelity, or why the whole file is skipped."""
    from themisto.kernel import mask_machine_text as mask

    mine: dict[str, StepStats] = {}
    compared = Fidelity(steps=0, exact=0, norm=0)
    previous: Step | None = None
    try:
        for step in validated.steps(path):
            key = example_id(step.trajectory_id, step.step)
            if key in mine:
                raise TrajectoryError(f"{path}: step {key} occurs twice in the file")
            if previous is not None and step.state_hash == previous.state_hash and step.runtime != previous.runtime:
                raise TrajectoryError(f"{path}: step {key} has the state_hash of the step before, not its variables'")
            previous = step
            compared.add(step)
            mine[key] = StepStats(
                key,
                step.step,
                len(step.code),
                len(mask(step.output) if options.mask_machine_text else step.output),
                step.error is not None,
                invented_error(step),
                step.recording_stopped,
                is_image_only(step.output),
                is_plot_output(step.output),
                is_figure_text(step.output),
                shows_timing(step.code, step.output),
                step.stable,
                not step.code.strip(),
                not step.output.strip(),
            )
    except TrajectoryError as exc:
        return str(exc)
    return list(mine.values()), compared


def _later_half(paths: Sequence[Path]) -> int:
    """Where the files after the first half of the bytes start (by size on disk; 0 bytes count as 1)."""
    sizes = []
    for path in paths:
        try:
            sizes.append(max(path.stat().st_size, 1))
        except OSError:  # the scan says why it cannot be read
            sizes.append(1)
    total, running = sum(sizes), 0
    for index, size in enumerate(sizes):
        if running * 2 >= total:
            return index
        running += size
    return len(paths)


def _scan_part(paths: Sequence[Path], options: SelectionOptions) -> dict[str, Any]:
    """The second process of a two-process scan: its files' outcomes and the contents it found valid, as JSON."""
    validated = ValidatedFiles()
    files = [_scanned_to_json(_scan_file(path, options, validated)) for path in paths]
    return {"files": files, "validated": validated.digests()}


def _scanned_to_json(outcome: _Scanned) -> Any:
    if isinstance(outcome, str):
        return outcome
    mine, compared = outcome
    return [
        [[getattr(one, name) for name in _STATS_FIELDS] for one in mine],
        [getattr(compared, name) for name in _FIDELITY_COUNTS],
    ]


def _scanned_from_json(item: Any) -> _Scanned:
    if isinstance(item, str):
        return item
    mine, counts = item
    return [StepStats(*values) for values in mine], Fidelity(**dict(zip(_FIDELITY_COUNTS, counts, strict=True)))


def select(
    paths: Sequence[Path], options: SelectionOptions, progress: Progress | None = None, jobs: int = 1
) -> Selection:
    """Apply the selection protocol and return the chosen example ids per task (``jobs``: see :func:`scan`)."""
    validated = ValidatedFiles()
    stats, skipped, faithful = scan(paths, options, progress, validated, jobs)
    if not stats:
        if skipped:
            first = next(iter(skipped.values()))
            raise InputError(f"none of the {len(skipped)} trajectory file(s) is valid; the first: {first}")
        raise InputError("the trajectories hold no steps")
    import numpy as np  # here, not at the top: the CLI imports this module to build its parser

    max_code = float(np.quantile([s.code_chars for s in stats], options.quantile))
    max_output = float(np.quantile([s.output_chars for s in stats], options.quantile))
    if options.stable_only and not any(s.stable is not None for s in stats):
        raise OptionError(
            "{stable_only:True} needs stability annotations, and no step has them: re-execute the trajectories"
            " with the stability stage (themisto.recording.stability) first"
        )
    min_history = options.min_history or 0
    eligible_steps = [
        s
        for s in stats
        if s.code_chars <= max_code
        and s.output_chars <= max_output
        and (options.include_errors or not s.is_error)
        and (options.include_invented_errors or not s.invented_error)
        and not s.recording_stopped
        and (not options.stable_only or s.stable is True)
    ]
    selection = Selection(
        trajectories=len({s.example_id.rsplit("/", 1)[0] for s in stats}),
        steps=len(stats),
        errors=sum(s.is_error for s in stats),
        invented_errors=sum(s.invented_error for s in stats),
        plot_objects=sum(s.plot_object for s in stats),
        fidelity=faithful,
        max_code_chars=max_code,
        max_output_chars=max_output,
        skipped=skipped,
        validated=validated,
    )
    output_stable = {s.example_id: s.stable for s in eligible_steps}
    shared: tuple[set[str], tuple[int, int, int]] | None = None  # the output-prediction draw (samples="shared")
    for task in TASKS:  # output prediction first, so a shared sample is drawn before next cell uses it
        candidates = [s for s in eligible_steps if _task_eligible(s, task, options)]
        full = [s.example_id for s in candidates]
        drawn = [s for s in candidates if s.step >= min_history]
        if options.sample == "all":
            chosen_task = TaskSelection(full, [s.example_id for s in drawn], None)
        else:
            if shared is None or options.samples == SEPARATE:
                lengths = {s.example_id: s.target_chars(task) for s in drawn}
                chosen, strata = stratified_sample(lengths, f"{options.seed}:{task}")
                shared = shared or (chosen, strata)
            else:
                chosen, strata = shared
            # the test split keeps the trajectory order of the full split
            chosen_task = TaskSelection(full, [i for i in full if i in chosen], strata)
        chosen_task.stability = {
            split: stability_counts(target_stable(task, output_stable[i]) for i in ids)
            for split, ids in (("test", chosen_task.test), ("full", chosen_task.full))
        }
        selection.tasks[task] = chosen_task
    return selection


def _task_eligible(stats: StepStats, task: str, options: SelectionOptions) -> bool:
    """Whether an eligible step makes an example of ``task``: a target that is not empty, not an image or
    figure (output prediction), not a measured duration (output prediction), unless the options keep these."""
    if not options.include_empty and stats.target_blank(task):
        return False
    if task != OUTPUT_PREDICTION:
        return True
    image = stats.image_only or stats.plot_object or (options.figure_text_as_image and stats.figure_text)
    return (options.include_images or not image) and (options.include_timing or not stats.timing)


def is_plot_output(output: str) -> bool:
    """Whether an output is images and the objects the plotting call returned (``<Axes: ...>``, a seaborn
    ``FacetGrid``, a list of ``Line2D``, a title's ``Text(...)``), one per line beside an ``<image/...>``
    placeholder: a target that says what was drawn no more than the image alone does."""
    lines = output.split("\n")
    images = [line for line in lines if IMAGE_PLACEHOLDER.fullmatch(line)]
    return (
        bool(images)
        and len(images) < len(lines)
        and all(IMAGE_PLACEHOLDER.fullmatch(line) or PLOT_OBJECT_LINE.fullmatch(line) for line in lines)
    )


def is_figure_text(output: str) -> bool:
    """Whether every line of an output is a figure's text stand-in (``<Figure size 640x480 with 1 Axes>``)."""
    return bool(output) and all(FIGURE_TEXT.fullmatch(line) for line in output.split("\n"))


def shows_timing(code: str, output: str) -> bool:
    """Whether a step measures time (``%time``, ``time.time()``, ``perf_counter``, ``tqdm``) and its output shows a
    duration (``1.2 ms``, ``3 s``): the rules :func:`themisto.recording.instability.instability_causes` names ``time`` by."""
    from themisto.recording.instability import DURATION, calls_clock

    return calls_clock(code) and DURATION.search(output) is not None


def stability_counts(flags: Iterable[bool | None]) -> tuple[int, int, int]:
    """How many of ``flags`` are True (stable), False (unstable) and None (unknown)."""
    counts = Counter(flags)
    return counts[True], counts[False], counts[None]


def stratified_sample(
    lengths: dict[str, int], seed: str, counts: tuple[int, int, int] = PAPER_STRATA
) -> tuple[set[str], tuple[int, int, int]]:
    """Draw ``counts`` ids from the rank quartiles Q1, Q2+Q3, Q4 of the target lengths."""
    ranked = sorted(lengths, key=lambda key: (lengths[key], key))
    n = len(ranked)
    q1_end, q3_end = round(n / 4), round(3 * n / 4)
    strata = [ranked[:q1_end], ranked[q1_end:q3_end], ranked[q3_end:]]
    rng = random.Random(seed)  # str seeds hash with SHA-512: stable across processes
    chosen: set[str] = set()
    for stratum, wanted in zip(strata, counts, strict=True):
        chosen.update(rng.sample(stratum, min(wanted, len(stratum))))
    return chosen, (len(strata[0]), len(strata[1]), len(strata[2]))
