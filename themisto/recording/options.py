"""How trajectories are recorded: :class:`RecordOptions`, and how a recording's own options prevail.

Each option is declared once (:func:`themisto.declaration.option`): its
default, help, command-line flag and check, so a Python caller meets the
checks the command line meets and ``record``, ``stability`` and
``exec-score`` generate their flags from it. Light on purpose, as the CLI
builds its parsers from it. A trajectory's options are saved beside it
(:mod:`themisto.recording.provenance`); a later run over it, a ``resume`` or
a stability replay, starts from them (:func:`with_recorded`): an option the
caller did not choose is taken from the recording, and one the caller chose
must agree with it, except the replay environment where the caller allows a
change.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any

from themisto.declaration import at_least, check_declared, option, parse_size, positive, regular_expression
from themisto.exceptions import OptionError
from themisto.recording.sources import EXECUTION, JUNE_PLUGIN_PATTERN, NOTEBOOK_ORDERS

_NO_LIMIT = "no limit"  # how help shows an unset resource limit


@dataclass
class RecordOptions:
    """How a kernel is run and how much of each step is kept."""

    timeout: float = option(
        600.0, "interrupt a cell after this long and record a timeout step", metavar="SECONDS", check=positive
    )
    # each command's help says what an unset working directory is to it
    workdir: Path | None = option(None, "kernel working directory", metavar="DIR", parse=Path, default_text="")
    kernel_name: str = option("python3", "Jupyter kernel to run the cells in", flag="--kernel", metavar="NAME")
    max_repr_chars: int = option(
        500, "cut each variable's recorded repr to N characters", metavar="N", check=at_least(1)
    )
    repr_timeout: float = option(
        1.0, "time limit for one variable's repr/len/size in the snapshot", metavar="SECONDS", check=positive
    )
    max_output_chars: int = option(
        10_000, "cut a step's plain-text output to N characters", metavar="N", check=at_least(1)
    )
    max_raw_output_chars: int = option(
        1_000_000, "budget for a step's raw nbformat outputs", metavar="N", check=at_least(1)
    )
    resume: bool = option(
        False,
        "continue existing trajectories after their last complete step, replaying earlier code, with the options"
        " they were recorded with (an option given here must agree with them)",
    )
    overwrite: bool = option(False, "replace existing trajectories")  # resume takes precedence
    # Resource limits of the kernel process (see themisto.recording.launcher), bytes of private writable
    # memory (RLIMIT_DATA) and CPU seconds from kernel start to its restart (RLIMIT_CPU); None: unlimited.
    max_memory: int | None = option(
        None,
        "limit the kernel's private memory to SIZE (512M, 2G or 2GiB: powers of 1024; 500MB, 2GB: powers of"
        " 1000): an allocation past it raises MemoryError in the cell, or kills the kernel, which is recorded"
        " and restarted",
        metavar="SIZE",
        parse=parse_size,
        check=at_least(1),
        default_text=_NO_LIMIT,
    )
    max_cpu_seconds: int | None = option(
        None,
        "CPU seconds a kernel may use from its start (a restart starts afresh); past them it is killed,"
        " recorded as a dead-kernel step and restarted",
        metavar="S",
        parse=int,
        check=at_least(1),
        default_text=_NO_LIMIT,
    )
    max_variables: int = option(
        1000,
        "describe at most N variables per snapshot, by name; the rest are counted",
        metavar="N",
        check=at_least(1),
    )
    isolate_home: bool = option(
        False,
        "give each kernel a temporary empty HOME, so files found through it (~/.netrc, the Hugging Face token)"
        " are not where the notebook looks; see SECURITY.md",
    )
    resume_diverged: str = option(
        "stop",
        "when a resume's replay does not reproduce a recorded step's output or state: stop with an error naming"
        " the step, or continue and mark every new step with resume_diverged_at",
        choices=("stop", "continue"),
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
    # The kernel's sandbox (see themisto.recording.launcher); False: unconfined. The help says what its
    # switch, --no-sandbox, does.
    sandbox: bool = option(
        True,
        "run the kernels unconfined: without the sandbox (Landlock, namespaces, seccomp) that lets a kernel"
        " write only beneath its working directory and private folders, use no network and no capability,"
        " and signal or trace no process outside; for a system without Landlock or namespaces (see"
        " SECURITY.md); prints a warning",
    )
    allow_network: bool = option(
        False, "let the sandboxed kernels use the network, of any protocol; prints a warning", default_text="denied"
    )
    pass_env: tuple[str, ...] = option(
        (),
        "pass environment variable NAME to the kernels (repeatable); they get only an allowlist (PATH, HOME,"
        " LANG, LC_*, TZ, TERM, the hash seed, thread counts, MPLBACKEND, JUPYTER_*, ...)",
        metavar="NAME",
        repeatable=True,
    )

    def __post_init__(self) -> None:
        check_declared(self)


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
