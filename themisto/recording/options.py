"""How trajectories are recorded: :class:`RecordOptions`, the kernel's options and the recording's own.

The kernel's options (how it runs, is confined and what of a step it keeps)
are :class:`themisto.kernel.KernelOptions`; a recording adds what it does with
trajectories that exist (the ``run_control`` options, never saved) and which
cells of a source it runs and in what order (saved with the trajectory, as
the kernel's are, see :func:`themisto.kernel.saved_options`).
"""

from __future__ import annotations

from dataclasses import dataclass

from themisto.declaration import declared_names, option, regular_expression
from themisto.kernel import KernelOptions, saved_options
from themisto.recording.sources import EXECUTION, JUNE_PLUGIN_PATTERN, NOTEBOOK_ORDERS


@dataclass
class RecordOptions(KernelOptions):
    """How a kernel is run, how much of each step is kept, and what a recording does with its sources."""

    resume: bool = option(
        False,
        "continue existing trajectories after their last complete step, replaying earlier code, with the options"
        " they were recorded with (an option given here must agree with them)",
        categories=("run_control",),
    )
    # resume takes precedence
    overwrite: bool = option(False, "replace existing trajectories", categories=("run_control",))
    resume_diverged: str = option(
        "stop",
        "when a resume's replay does not reproduce a recorded step's output or state: stop with an error naming"
        " the step, or continue and mark every new step with resume_diverged_at",
        choices=("stop", "continue"),
        categories=("run_control",),
    )
    skip_pattern: str | None = option(
        JUNE_PLUGIN_PATTERN,
        "do not run cells whose code matches REGEX; '' runs every cell",
        metavar="REGEX",
        check=regular_expression,
        default_text=f"JuNE's logging-plugin cell, so a replay never calls the log's server: {JUNE_PLUGIN_PATTERN!r}",
    )
    notebook_order: str = option(
        EXECUTION,
        "the order a notebook's code cells run in: 'execution' = by their execution counts when these are"
        " positive integers (uncounted cells after the counted ones, in file order; a repeated count is a kernel"
        " restart), else top to bottom; 'file' = top to bottom; JuNE logs keep their own order",
        flag="--order",
        choices=NOTEBOOK_ORDERS,
    )


# What a run does with files that exist, not how steps are made: never saved with a trajectory.
RUN_CONTROL = declared_names(RecordOptions, "run_control")
# Every option that is saved with a trajectory; a field added to RecordOptions is saved unless it is run
# control or trust.
RECORDED = saved_options(RecordOptions)
