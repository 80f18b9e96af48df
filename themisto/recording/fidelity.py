"""Replay fidelity: how far a recording reproduces the outputs its source stored, and what is unknown.

A step whose source stored an output (a JuNE log's ``finished_execute``, a
notebook cell's outputs) is compared with it twice: exactly, and after the
declared normalisations of :data:`FIDELITY_NORMALISATIONS` (what differs
between library versions and runs without saying anything of the state). A
step without one (a JuNE output kept only as its size, a notebook stripped of
its outputs, a cell that never ran) is *unknown*: nothing says whether the
replay reproduced it, so it counts neither as equal nor as unequal. Errors the
replay raised where the stored output shows none are counted apart
(:func:`~themisto.trajectory.invented_error`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterable
from dataclasses import dataclass

from themisto.kernel import normalize_output
from themisto.trajectory import Step, invented_error

EXCERPT_CHARS = 60  # characters of each side shown around a first divergence, a quarter of them before it

# numpy 2 prints a scalar with its type (np.int64(9)) where numpy 1 printed 9
_NUMPY_SCALAR = re.compile(
    r"\bnp\.(?:u?int\d*|float\d*|complex\d*|longdouble|clongdouble|intp|uintp|bool_?|str_|bytes_|datetime64|"
    r"timedelta64)\(((?:[^()]|\([^()]*\))*)\)"
)
_NUMPY_BOOL = re.compile(r"\bnp\.(True|False)_")
# IPython's %time / %timeit reports, a duration no re-run repeats
_TIMING_LINE = re.compile(r"^(?:CPU times:.*|Wall time:.*|.*\bper loop\b.*|The slowest run took .*)$", re.MULTILINE)

# The normalisations fidelity applies beside exact equality, in order, each (name, what it does).
FIDELITY_NORMALISATIONS = (
    ("whitespace, addresses, pids", "normalize_output: line breaks, trailing blanks, 0x addresses, kernel pids"),
    ("numpy scalar reprs", "np.int64(9) -> 9, np.float64(0.5) -> 0.5, np.True_ -> True, np.str_('a') -> 'a'"),
    ("timing lines", "%time and %timeit report lines (CPU times, Wall time, ... per loop) -> <timing>"),
)


def fidelity_form(text: str) -> str:
    """``text`` after every normalisation of :data:`FIDELITY_NORMALISATIONS`."""
    text = _NUMPY_BOOL.sub(r"\1", _NUMPY_SCALAR.sub(r"\1", text))
    return normalize_output(_TIMING_LINE.sub("<timing>", text))


@dataclass
class Divergence:
    """The first step whose re-executed output differs from the original log's."""

    step: int
    cell_id: str
    replayed: str  # excerpt around the first differing character
    original: str
    stable: bool | None  # whether the step itself reproduces (False: the difference may be chance)


@dataclass
class Fidelity:
    """How far a replay matches the outputs the original session stored."""

    steps: int  # steps that carry an original output, the ones compared
    exact: int  # of which the re-executed output is identical
    norm: int  # identical after the normalisations (FIDELITY_NORMALISATIONS)
    first_divergence: Divergence | None = None
    first_divergence_norm: Divergence | None = None
    unknown: int = 0  # steps without an original output: neither equal nor unequal
    invented_errors: int = 0  # errors of the replay that the original output does not show

    @property
    def exact_share(self) -> float | None:
        """Share of the compared steps reproduced exactly; None when no step could be compared."""
        return self.exact / self.steps if self.steps else None

    @property
    def norm_share(self) -> float | None:
        """Share of the compared steps reproduced after normalisation; None when none could be compared."""
        return self.norm / self.steps if self.steps else None

    def add(self, step: Step) -> None:
        """Count one step: unknown without an original output, else compared exactly and normalised."""
        if step.original_output is None:
            self.unknown += 1
            return
        self.steps += 1
        self.invented_errors += invented_error(step)
        if step.output == step.original_output:
            self.exact += 1
            self.norm += 1
            return
        if self.first_divergence is None:
            self.first_divergence = divergence(step)
        if fidelity_form(step.output) == fidelity_form(step.original_output):
            self.norm += 1
        elif self.first_divergence_norm is None:
            self.first_divergence_norm = divergence(step)

    @classmethod
    def total(cls, parts: Iterable[Fidelity]) -> Fidelity:
        """The counts of ``parts`` summed (no divergence listed)."""
        result = cls(steps=0, exact=0, norm=0)
        for part in parts:
            result.steps += part.steps
            result.exact += part.exact
            result.norm += part.norm
            result.unknown += part.unknown
            result.invented_errors += part.invented_errors
        return result


def fidelity(steps: Iterable[Step]) -> Fidelity | None:
    """Compare each step's recorded output with its ``original_output``; None when there are no steps."""
    result: Fidelity | None = None
    for step in steps:
        result = result or Fidelity(steps=0, exact=0, norm=0)
        result.add(step)
    return result


def divergence(step: Step) -> Divergence:
    """Describe how a step's output differs from its original output."""
    replayed, original = excerpts(step.output, step.original_output or "")
    return Divergence(step.step, step.cell_id, replayed, original, step.stable)


def excerpts(a: str, b: str, width: int = EXCERPT_CHARS) -> tuple[str, str]:
    """``width`` characters of each text around their first difference (a quarter before it); ``…`` marks a cut."""
    begin = max(0, len(os.path.commonprefix([a, b])) - width // 4)

    def cut(text: str) -> str:
        head = "…" if begin else ""
        tail = "…" if begin + width < len(text) else ""
        return head + text[begin : begin + width] + tail

    return cut(a), cut(b)
