"""How trajectories are recorded: :class:`RecordOptions`, and how a recording's own options prevail.

Light on purpose (the CLI builds its parsers from these defaults). A
trajectory's options are saved beside it (:mod:`themisto.recording.provenance`);
a later run over it, a ``resume`` or a stability replay, starts from them
(:func:`with_recorded`): an option the caller did not choose is taken from
the recording, and one the caller chose must agree with it, except the
replay environment where the caller allows a change.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from themisto.exceptions import OptionError
from themisto.recording.sources import JUNE_PLUGIN_PATTERN


@dataclass
class RecordOptions:
    """How a kernel is run and how much of each step is kept."""

    timeout: float = 600.0  # seconds a cell may run before it is interrupted
    workdir: Path | None = None  # kernel working directory; None: the source file's folder
    kernel_name: str = "python3"
    max_repr_chars: int = 500  # a variable's repr is cut to this many characters
    repr_timeout: float = 1.0  # seconds a variable's __repr__/__len__/size may take
    max_output_chars: int = 10_000  # the plain-text output is cut to this many characters
    max_raw_output_chars: int = 1_000_000  # budget for the raw nbformat outputs of one step
    resume: bool = False  # continue an existing trajectory file after its last complete step
    overwrite: bool = False  # replace an existing trajectory file (resume takes precedence)
    # Resource limits of the kernel process (see themisto.recording.launcher); None: unlimited.
    max_memory: int | None = None  # bytes of private writable memory (RLIMIT_DATA)
    max_cpu_seconds: int | None = None  # CPU seconds from kernel start to its restart (RLIMIT_CPU)
    max_variables: int = 1000  # a snapshot describes this many variables (by name), the rest are counted
    isolate_home: bool = False  # the kernel gets a temporary empty HOME, so ~/.netrc and the like are not found
    resume_diverged: str = "stop"  # on a resume whose replay does not reproduce a step: "stop" or "continue"
    # cells of a source whose code matches this regex are not run (default: JuNE's logging plugin); "" runs all
    skip_pattern: str | None = JUNE_PLUGIN_PATTERN
    # a notebook's cells run in the order of their execution counts when these allow it, or "file": top to bottom
    notebook_order: str = "execution"
    # The kernel's sandbox (see themisto.recording.launcher): Landlock confines its writes to its working
    # directory and private folders, denies TCP and keeps its signals and ptrace inside; False: unconfined.
    sandbox: bool = True
    allow_network: bool = False  # the sandboxed kernel may use TCP
    pass_env: tuple[str, ...] = ()  # variables passed to the kernel beyond its allowlist


# What a resume does when its replay does not reproduce a recorded step (RecordOptions.resume_diverged).
RESUME_DIVERGED = ("stop", "continue")
# What a run does with files that exist, not how steps are made: never saved with a trajectory.
RUN_CONTROL = ("resume", "overwrite", "resume_diverged")
# How far the kernel is trusted: the caller's choice alone, never saved as an option nor taken from a
# recording, so no trajectory's provenance (which anyone may write) turns the sandbox off or passes a variable.
# The provenance says which sandbox was in force (Provenance.sandbox).
TRUST = ("sandbox", "allow_network", "pass_env")
# Every option that is saved with a trajectory; a field added to RecordOptions is saved unless it is run
# control or trust.
RECORDED = tuple(f.name for f in fields(RecordOptions) if f.name not in RUN_CONTROL + TRUST)
# Where, with what resources and how confined the kernel runs: a replay may change these to suit its machine;
# the others decide what a step holds (output and repr caps), so a replay compared with the recording keeps them.
ENVIRONMENT = (
    "timeout",
    "workdir",
    "kernel_name",
    "max_memory",
    "max_cpu_seconds",
    "isolate_home",
    "sandbox",
    "allow_network",
    "pass_env",
)


def chosen_options(options: RecordOptions) -> frozenset[str]:
    """The recorded options that differ from their defaults: what a Python caller evidently chose."""
    default = RecordOptions()
    return frozenset(name for name in RECORDED if getattr(options, name) != getattr(default, name))


def _same(name: str, first: Any, second: Any) -> bool:
    """Whether two values of option ``name`` agree; working directories are compared as resolved paths."""
    if name == "workdir" and first is not None and second is not None:
        return Path(first).resolve() == Path(second).resolve()
    return bool(first == second)


def _shown(name: str, value: Any) -> str:
    """An option's value in a message; an unset working directory is the source's folder."""
    if value is None:
        return "(the source's folder)" if name == "workdir" else "unset"
    return str(value)


def with_recorded(
    given: RecordOptions,
    recorded: RecordOptions,
    chosen: Collection[str],
    where: str,
    may_change: Collection[str] = (),
    instead: str | None = None,
) -> RecordOptions:
    """``given`` with every recorded option taken from ``recorded``, unless chosen and allowed to change.

    ``chosen`` names the options the caller set on purpose; one of them that
    differs from the recording and is not in ``may_change`` raises
    :class:`OptionError` naming it (``instead``, a template like the error's,
    says what else the caller may do). Run-control options (``resume``,
    ``overwrite``) always come from ``given``.
    """
    values = {}
    for name in RECORDED:
        mine, theirs = getattr(given, name), getattr(recorded, name)
        if name in chosen and not _same(name, mine, theirs):
            if name not in may_change:
                raise OptionError(
                    "{where} was recorded with {" + name + "} {recorded}, not {given}:"
                    " leave it out to use the recorded value" + ("" if instead is None else ", or " + instead),
                    where=where,
                    recorded=_shown(name, theirs),
                    given=_shown(name, mine),
                )
            values[name] = mine
        else:
            values[name] = theirs
    return replace(given, **values)
