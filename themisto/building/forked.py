"""Part of a build's work in a forked process, which answers once, as JSON, with its result or its error.

The fork shares the loaded modules and what the build holds already (the options, the selection), so
nothing is sent to the child; its answer is plain data (counts, lengths, digests), never pickled.
"""

from __future__ import annotations

import json
import multiprocessing
from collections.abc import Callable
from typing import Any

from themisto.exceptions import InputError, OutputError, TrajectoryError

# What a forked part can fail with, raised again as itself in the parent; anything else as a RuntimeError.
PASSED_ERRORS: dict[str, type[Exception]] = {e.__name__: e for e in (InputError, TrajectoryError, OutputError)}


class Forked:
    """``work(*args)`` running in a forked process, named ``what`` in the error of one that ends unanswered."""

    def __init__(self, what: str, work: Callable[..., Any], *args: Any) -> None:
        context = multiprocessing.get_context("fork")
        self.what = what
        self._answer, answer_out = context.Pipe(duplex=False)
        self.process = context.Process(target=_answer, args=(work, args, answer_out), daemon=True)
        self.process.start()
        answer_out.close()

    def answer(self) -> dict[str, Any]:
        """Its answer, once it has ended: ``{"result": ...}`` or ``{"error": name, "message": text}``, the latter
        also where it ended without an answer (killed)."""
        try:
            data: dict[str, Any] = json.loads(self._answer.recv_bytes())
        except EOFError:
            self.process.join()
            data = {
                "error": "RuntimeError",
                "message": f"{self.what} ended without an answer (exit {self.process.exitcode})",
            }
        self.process.join()
        return data

    def result(self) -> Any:
        """Its result, once it has ended; its error raised here."""
        answer = self.answer()
        if "error" in answer:
            raise error_of(answer)
        return answer["result"]


def error_of(answer: dict[str, Any]) -> Exception:
    """The error a forked part reported, as its own class where the build raises that class."""
    kind = PASSED_ERRORS.get(answer["error"])
    if kind is not None:
        return kind(answer["message"])
    return RuntimeError(
        answer["message"] if answer["error"] == "RuntimeError" else f"{answer['error']}: {answer['message']}"
    )


def _answer(work: Callable[..., Any], args: tuple[Any, ...], answer: Any) -> None:
    """The forked process: run ``work`` and send its result or its error."""
    try:
        reply: dict[str, Any] = {"result": work(*args)}
    except Exception as exc:  # noqa: BLE001 (every error goes back to the parent, which raises it)
        reply = {"error": type(exc).__name__, "message": str(exc)}
    answer.send_bytes(json.dumps(reply).encode())
