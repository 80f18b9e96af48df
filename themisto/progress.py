"""The progress hook of long work (record, build, stability), shared by every stage.

A long library function takes ``progress: Progress | None`` and calls it as
``progress(what, done, total)`` whenever its work advances: ``what`` names the
kind of work (``"record"``, ``"select"``, ...), ``done`` and ``total`` count its
units so far and in all. The library never draws anything; the command line
turns the calls into tqdm bars on stderr (:class:`themisto.cli.options.ProgressBars`).
"""

from __future__ import annotations

from collections.abc import Callable

Progress = Callable[[str, int, int], None]
