"""The exception hierarchy of Themisto.

Every error that bad input can cause derives from :class:`ThemistoError`; the
CLI turns it into one line on stderr and exit code 2 instead of a traceback.

An error that says what happened also derives from the built-in class a caller
would catch for it, as nbclient's do: a kernel that cannot be driven is a
:class:`RuntimeError` (:class:`KernelError`), one that did not answer in time
also a :class:`TimeoutError` (:class:`KernelTimeoutError`).

Library errors speak the library's language: an option is named by its keyword
(``runs``, ``resume=True``), never by a command-line flag the caller may never
have typed. A :class:`CallerSpelledError` (such as :class:`OptionError`)
carries the option names apart from the text, so the CLI can spell them as
its flags (``--runs``, ``--resume``) instead.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Self

# How an option is spelled in a message: (keyword name, value or None) -> text.
Spelling = Callable[[str, str | None], str]


class ThemistoError(Exception):
    """Base class of every error Themisto raises on purpose."""


class InputError(ThemistoError):
    """A user-supplied file, argument or record is missing, unreadable or malformed."""


class TrajectoryError(InputError):
    """A trajectory JSONL line does not follow the step schema."""


class SourceError(InputError):
    """A notebook, JuNE log or Zenodo record cannot be read as a source."""


class KernelError(ThemistoError, RuntimeError):
    """The Jupyter kernel could not be started or driven at all."""


class KernelTimeoutError(KernelError, TimeoutError):
    """The Jupyter kernel did not answer within its time limit (it did not start in time)."""


class OutputError(ThemistoError):
    """An output file or folder cannot be created, locked or written (a full disk, a read-only file system)."""


def keyword_spelling(name: str, value: str | None) -> str:
    """An option as a Python caller writes it: ``runs``, or ``resume=True`` with a value."""
    return name if value is None else f"{name}={value}"


class CallerSpelledError(ThemistoError):
    """An error whose message names options, each spelled the way its caller sets them.

    ``template`` is a :meth:`str.format` string whose fields are either keys of
    ``values`` (the facts: paths, numbers) or option keyword names: ``{runs}``
    reads ``runs`` in Python and ``--runs`` at the command line, and
    ``{resume:True}`` reads ``resume=True`` or ``--resume`` (the format spec is
    the option's value). ``str(error)`` is the Python spelling;
    :meth:`render` takes another.
    """

    def __init__(self, template: str, **values: Any) -> None:
        self.template = template
        self.values = values
        super().__init__(self.render(keyword_spelling))

    def render(self, spelling: Spelling) -> str:
        """The message with every option spelled by ``spelling``."""
        return self.template.format_map(_Fields(self.values, spelling))

    def prefixed(self, text: str) -> Self:
        """The same error (of the same class) with ``text`` (literal, braces and all) in front of its message."""
        return type(self)(text.replace("{", "{{").replace("}", "}}") + self.template, **self.values)


class OptionError(CallerSpelledError, InputError):
    """An option out of range or in conflict (its message names the options in the caller's spelling)."""


class ReplayDivergedError(CallerSpelledError):
    """A resume replayed a trajectory's recorded steps and they did not reproduce, so its state cannot be rebuilt."""


class _Fields(dict[str, Any]):
    """The values of a message, and for any other field name an option spelled on demand."""

    def __init__(self, values: dict[str, Any], spelling: Spelling) -> None:
        super().__init__(values)
        self.spelling = spelling

    def __missing__(self, name: str) -> _Option:
        return _Option(name, self.spelling)


class _Option:
    """An option name in a message template; its format spec, if any, is its value."""

    def __init__(self, name: str, spelling: Spelling) -> None:
        self.name = name
        self.spelling = spelling

    def __format__(self, spec: str) -> str:
        return self.spelling(self.name, spec or None)


def one_line(text: object) -> str:
    """Error text of another library (pyarrow, nbformat) on one line, so the CLI's error stays one line."""
    return " ".join(str(text).split())


def short_message(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message, cut to ``limit`` characters for a one-line error."""
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"
