"""The exception hierarchy of Themisto.

Every error that bad input can cause derives from :class:`ThemistoError`; the
CLI turns it into one line on stderr and exit code 2 instead of a traceback.
"""


class ThemistoError(Exception):
    """Base class of every error Themisto raises on purpose."""


class InputError(ThemistoError):
    """A user-supplied file, argument or record is missing, unreadable or malformed."""


class TrajectoryError(InputError):
    """A trajectory JSONL line does not follow the step schema."""


class SourceError(InputError):
    """A notebook, JuNE log or Zenodo record cannot be read as a source."""


class KernelError(ThemistoError):
    """The Jupyter kernel could not be started or driven at all."""


def short_message(exc: BaseException, limit: int = 300) -> str:
    """The first line of an exception's message, cut to ``limit`` characters for a one-line error."""
    lines = str(exc).strip().splitlines()
    line = lines[0] if lines else type(exc).__name__
    return line if len(line) <= limit else line[: limit - 1] + "…"
