"""The kernel's own messages to the recorder: packed by the functions of install time, stream text within a budget.

Installed in the kernel after the wire module (see :mod:`themisto.kernel.inject`), by :func:`install`:

- The session's packer and unpacker are copied with the modules they call frozen as they were at install
  time, so a cell that sets ``json.dumps`` or ``json.loads`` (a harmless-looking patch) changes its own
  code's JSON, not the kernel's messages. What a cell can still reach (``json.JSONEncoder``, the session
  object itself) may garble or stop the messages; the recorder then waits only its grace for the reply
  (:mod:`themisto.kernel.transport`).
- Every ``stream`` message the kernel's streams send (``sys.stdout``, ``sys.stderr``) leaves the kernel cut
  to the request's output budget
  (:class:`~themisto.kernel.inside.wire.StreamBudget`, the budget the recorder keeps), naming what it
  dropped in ``themisto_dropped`` (characters, trailing newlines), so a cell that prints 200 MB sends the
  recorder at most its budget and the recorder still knows the output's full length. The stream of a
  request other than the latest one (a thread of an earlier cell) is dropped whole: the recorder reads
  only the latest request's output.
- ipykernel's wait before each reply (``Kernel._execute_sleep``, 0.5 ms, against clients that stop reading
  outputs at the reply) is set to zero: the recorder reads a request's outputs until its ``idle`` status,
  which the kernel publishes on the same channel after them (exec-score's overhead per prediction fell by
  1.0 ms, ``docs/performance.md``).
- Before a silent request's reply (the recorder's own: a forked run, a snapshot, the install) ipykernel flushes
  ``sys.stdout`` and ``sys.stderr``, a round trip to its IO thread each, with nothing to send: the kernel's
  streams skip that wait (:class:`SilentFlush`) when nothing is buffered. A cell's request, never silent,
  flushes as ipykernel does.
- A write to one of the kernel's streams first sends what the other holds (:class:`InOrder`), so a cell's
  ``stdout`` and ``stderr`` text arrive in the order it wrote them. ipykernel sends a stream's text from a timer
  0.2 s after a write, and a timer a flushed write left behind still fires: ``print('a')`` then
  ``sys.stderr.write('b')`` arrived as ``b``, ``a`` where the cell had flushed ``stderr`` 0.1 s before, and did
  so now and then in a loop of quick cells (one run of the test suite in many).
"""

from __future__ import annotations

import sys
import types
from collections.abc import Callable
from typing import Any

MODULE_NAME = "_themisto_channels"
WIRE_MODULE = "_themisto_wire"  # installed before this module
DROPPED_KEY = "themisto_dropped"  # a stream message's content: [characters dropped, trailing newlines of them]


def install(stream_budget: int) -> None:
    """Freeze the kernel session's packer and unpacker, cut its stream messages to ``stream_budget``, and reply
    without ipykernel's wait."""
    from IPython import get_ipython

    kernel = get_ipython().kernel
    session = kernel.session
    session.pack = _frozen(session.pack)
    session.unpack = _frozen(session.unpack)
    # a module installed again wraps the session's own send, not the wrapper of the module before it
    original = getattr(session.send, "__wrapped__", session.send)
    session.send = StreamCap(original, stream_budget, sys.modules[WIRE_MODULE].StreamBudget, kernel)
    if hasattr(kernel, "_execute_sleep"):  # an ipykernel's; the recorder waits for the idle status instead
        kernel._execute_sleep = 0
    streams = [stream for stream in (sys.stdout, sys.stderr) if hasattr(stream, "pub_thread")]  # ipykernel's
    for stream in streams:
        stream.flush = SilentFlush(stream, kernel)  # type: ignore[method-assign]
    if len(streams) == 2:
        for stream, other in zip(streams, reversed(streams), strict=True):
            stream.write = InOrder(stream, other)  # type: ignore[method-assign]


def _frozen(function: Callable[..., Any]) -> Callable[..., Any]:
    """``function`` with every module among its globals replaced by a copy of that module as it is now."""
    if not isinstance(function, types.FunctionType):
        return function
    names = {
        name: _copy(value) if isinstance(value, types.ModuleType) else value
        for name, value in function.__globals__.items()
    }
    return types.FunctionType(function.__code__, names, function.__name__, function.__defaults__, function.__closure__)


def _copy(module: types.ModuleType) -> types.ModuleType:
    copy = types.ModuleType(module.__name__)
    copy.__dict__.update(vars(module))
    return copy


class StreamCap:
    """The session's ``send``, with the text of each stream message cut to what its request's budget has left."""

    def __init__(self, send: Callable[..., Any], budget: int, kind: type[Any], kernel: Any) -> None:
        self.__wrapped__ = send
        self.budget, self.kind, self.kernel = budget, kind, kernel
        self.request: str | None = None  # the request the budget below is for
        self.room: Any = kind(budget)  # a StreamBudget

    def __call__(
        self, stream: Any, msg: Any, content: Any = None, parent: Any = None, *args: Any, **kwargs: Any
    ) -> Any:
        if isinstance(msg, dict) and msg.get("msg_type") == "stream" and not self._cut(msg.get("content"), msg):
            return None
        return self.__wrapped__(stream, msg, content, parent, *args, **kwargs)

    def _cut(self, content: Any, msg: dict[str, Any]) -> bool:
        """Cut a stream message's text to the budget; False: the message is an earlier request's, not to send."""
        if not isinstance(content, dict) or not isinstance(content.get("text"), str):
            return True
        latest = self.kernel.get_parent("shell").get("header", {}).get("msg_id")
        if msg.get("parent_header", {}).get("msg_id") != latest:
            return False
        if latest != self.request:
            self.request, self.room = latest, self.kind(self.budget)
        text = content["text"]
        dropped_before = self.room.dropped_chars
        content["text"] = self.room.take(text)
        dropped = self.room.dropped_chars - dropped_before
        if dropped:
            trailing = 0  # counted from the end, not by stripping a copy of what may be 200 MB
            while trailing < dropped and text[-1 - trailing] == "\n":
                trailing += 1
            content[DROPPED_KEY] = [dropped, trailing]
        return True


class SilentFlush:
    """A kernel stream's ``flush`` that returns at once in a silent request when the stream has nothing buffered,
    and otherwise flushes as ipykernel does.

    What it skips is a wait for the IO thread to turn an empty buffer into no message, behind whatever it has
    queued (0.4 ms, twice before each reply). A silent request's outputs belong to no step: text a ``__repr__`` of
    its snapshot wrote is still flushed, under that request, not left to the next cell's; one the IO thread has
    queued already may reach the recorder after the reply, which the recorder does not read for.
    """

    def __init__(self, stream: Any, kernel: Any) -> None:
        # a module installed again wraps the stream's own flush, not the wrapper of the module before it
        self.__wrapped__ = getattr(stream.flush, "__wrapped__", stream.flush)
        self.stream, self.kernel = stream, kernel

    def __call__(self) -> None:
        if not self._nothing_to_send():
            self.__wrapped__()

    def _nothing_to_send(self) -> bool:
        """Whether the request is silent and the stream has nothing buffered."""
        content = self.kernel.get_parent("shell").get("content")
        if not isinstance(content, dict) or content.get("silent") is not True:
            return False
        return not _unsent(self.stream)


class InOrder:
    """A kernel stream's ``write`` that first flushes the other stream where it holds text not sent yet.

    Each stream sends its text when a timer 0.2 s after a write fires, or on a flush; the other stream's timer may
    fire first, with text written later. A write that follows the other stream's waits for that stream's text to
    be sent (a round trip to the IO thread, 0.4 ms); writes to one stream in a row cost nothing more.
    """

    def __init__(self, stream: Any, other: Any) -> None:
        # a module installed again wraps the stream's own write, not the wrapper of the module before it
        self.__wrapped__ = getattr(stream.write, "__wrapped__", stream.write)
        self.other = other

    def __call__(self, text: str) -> Any:
        if _unsent(self.other):
            self.other.flush()
        return self.__wrapped__(text)


def _unsent(stream: Any) -> bool:
    """Whether ipykernel's ``stream`` may hold text it has not sent (a write since its last flush, in this process
    or a forked one); True where it keeps no such flag."""
    return bool(getattr(stream, "_flush_pending", True) or getattr(stream, "_subprocess_flush_pending", True))
