"""How a live kernel runs: :class:`KernelOptions`, and how the options a trajectory was made with prevail.

Each option is declared once (:func:`themisto.declaration.option`) with its
default, help, command-line flag, check and categories, so a Python caller
meets the checks the command line meets, and ``record``, ``stability`` and
``exec-score`` generate their flags from it. The recording's options
(:class:`themisto.recording.options.KernelOptions`) extend these. A
trajectory's options are saved beside it (:mod:`themisto.provenance`); a later
run over it, a ``resume``, a stability replay or exec-score, starts from them
(:func:`with_recorded`): an option the caller did not choose is taken from the
recording, and one the caller chose must agree with it, except where the
caller allows a change (the ``environment`` options).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, fields, replace
from pathlib import Path
from typing import Any, TypeVar

from themisto.declaration import at_least, check_declared, declared_names, option, parse_size, positive
from themisto.exceptions import OptionError

_NO_LIMIT = "no limit"  # how help shows an unset resource limit


@dataclass
class KernelOptions:
    """How a kernel is run, confined and how much of each step and snapshot is kept."""

    timeout: float = option(
        600.0,
        "interrupt a cell after this long and record a timeout step",
        metavar="SECONDS",
        check=positive,
        categories=("environment",),
    )
    # each command's help says what an unset working directory is to it
    workdir: Path | None = option(
        None, "kernel working directory", metavar="DIR", parse=Path, default_text="", categories=("environment",)
    )
    kernel_name: str = option(
        "python3", "Jupyter kernel to run the cells in", flag="--kernel", metavar="NAME", categories=("environment",)
    )
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
    # Resource limits of the kernel process (see themisto.kernel.launcher), bytes of private writable
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
        categories=("environment",),
    )
    max_cpu_seconds: int | None = option(
        None,
        "CPU seconds a kernel may use from its start (a restart starts afresh); past them it is killed,"
        " recorded as a dead-kernel step and restarted",
        metavar="S",
        parse=int,
        check=at_least(1),
        default_text=_NO_LIMIT,
        categories=("environment",),
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
        categories=("environment",),
    )
    # The kernel's sandbox (see themisto.kernel.launcher); False: unconfined. The help says what its
    # switch, --no-sandbox, does. The trust options are the caller's choice alone, never saved as an option nor
    # taken from a recording, so no trajectory's provenance (which anyone may write) turns the sandbox off or
    # passes a variable; the provenance says which sandbox was in force (Provenance.sandbox).
    sandbox: bool = option(
        True,
        "run the kernels unconfined: without the sandbox (Landlock, namespaces, seccomp) that lets a kernel"
        " write only beneath its working directory and private folders, use no network and no capability,"
        " and signal or trace no process outside; for a system without Landlock or namespaces (see"
        " SECURITY.md); prints a warning",
        categories=("trust", "environment"),
    )
    allow_network: bool = option(
        False,
        "let the sandboxed kernels use the network, of any protocol; prints a warning",
        default_text="denied",
        categories=("trust", "environment"),
    )
    pass_env: tuple[str, ...] = option(
        (),
        "pass environment variable NAME to the kernels (repeatable); they get only an allowlist (PATH, HOME,"
        " LANG, LC_*, TZ, TERM, the hash seed, thread counts, MPLBACKEND, JUPYTER_*, ...)",
        metavar="NAME",
        repeatable=True,
        categories=("trust", "environment"),
    )

    def __post_init__(self) -> None:
        check_declared(self)


Options = TypeVar("Options", bound=KernelOptions)

# Where, with what resources and how confined the kernel runs: a replay may change these to suit its machine;
# the others decide what a step holds (output and repr caps), so a replay compared with the recording keeps them.
ENVIRONMENT = declared_names(KernelOptions, "environment")
TRUST = declared_names(KernelOptions, "trust")


def saved_options(cls: type[KernelOptions]) -> tuple[str, ...]:
    """The options of ``cls`` saved with a trajectory: every one that is neither run control nor trust."""
    unsaved = set(declared_names(cls, "run_control") + declared_names(cls, "trust"))
    return tuple(f.name for f in fields(cls) if f.name not in unsaved)


def chosen_options(options: KernelOptions) -> frozenset[str]:
    """The saved options that differ from their defaults: what a Python caller evidently chose."""
    default = type(options)()
    return frozenset(name for name in saved_options(type(options)) if getattr(options, name) != getattr(default, name))


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
    given: Options,
    recorded: Options,
    chosen: Collection[str],
    where: str,
    may_change: Collection[str] = (),
    instead: str | None = None,
) -> Options:
    """``given`` with every saved option taken from ``recorded``, unless chosen and allowed to change.

    ``chosen`` names the options the caller set on purpose; one of them that
    differs from the recording and is not in ``may_change`` raises
    :class:`OptionError` naming it (``instead``, a template like the error's,
    says what else the caller may do). Run-control and trust options always
    come from ``given``.
    """
    values = {}
    for name in saved_options(type(given)):
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
