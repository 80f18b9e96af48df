"""The progress hook of long work (record, build, stability), shared by every stage.

A long library function takes ``progress: Progress | None`` and calls it as
``progress(what, done, total)`` whenever its work advances: ``what`` names the
kind of work (``"record"``, ``"select"``, ...), ``done`` and ``total`` count its
units so far and in all. The library never draws anything; the command line
turns the calls into tqdm bars on stderr (:class:`themisto.cli.options.ProgressBars`).
"""

from __future__ import annotations

import threading
from collections.abc import Callable

Progress = Callable[[str, int, int], None]


class ProgressCounter:
    """Units of one kind of work done so far, told to a progress hook as ``(what, done, total)``.

    Safe to share between worker threads: each call updates the count and
    reports it under one lock, so the hook sees the counts in order. Units
    that need no work (:meth:`skip`) leave the total, so the rate and the
    time left count only the work still to do.
    """

    def __init__(self, what: str, total: int, progress: Progress | None) -> None:
        self.what = what
        self.total = total
        self.done = 0
        self._progress = progress
        self._lock = threading.Lock()

    def add(self) -> None:
        """One more unit done."""
        self._advance(1, 0)

    def skip(self, units: int) -> None:
        """``units`` need no work (e.g. steps a resumed file already holds)."""
        self._advance(0, units)

    def _advance(self, done: int, skipped: int) -> None:
        with self._lock:
            self.done += done
            self.total -= skipped
            if self._progress is not None:
                self._progress(self.what, self.done, self.total)
