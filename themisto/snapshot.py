"""Describe the user namespace of an IPython kernel, from inside that kernel.

The recorder sends this module's source text to the kernel, which executes it
into a private module registered as ``sys.modules["_themisto_snapshot"]``; no
name is bound in the user namespace. After each cell the recorder evaluates
:data:`SNAPSHOT_EXPRESSION` as a ``user_expression`` of a *silent* execution,
so the user's history, execution count, ``_`` and ``Out`` stay untouched.

The module uses only the standard library so it runs in any Python kernel, and
it is importable in-process so its helpers are unit-tested directly.

What it reports per variable (the fields of ``themisto.trajectory.Variable``):
the qualified type, a size estimate that never walks the object (``nbytes``,
pandas ``memory_usage(deep=False)`` or ``sys.getsizeof``, named in
``size_method``), a ``repr`` cut to ``max_repr_chars`` (``repr_truncated``),
and ``shape``/``len`` where the object offers them. Everything that calls user
code (``__repr__``, ``__len__``, properties) runs under a per-variable time
limit; a call that raises or overruns yields a placeholder and ``repr_failed``.
"""

from __future__ import annotations

import json
import numbers
import signal
import sys
import threading
import time
import types
from collections.abc import Callable, Iterator, Mapping
from typing import Any

MODULE_NAME = "_themisto_snapshot"

# Builtin containers whose repr is streamed element by element, so a huge list
# costs at most ``max_repr_chars`` of work instead of a full repr.
_STREAMED_SEQUENCES: dict[type, tuple[str, str]] = {list: ("[", "]"), tuple: ("(", ")")}
_STREAMED_SETS: dict[type, tuple[str, str]] = {set: ("{", "}"), frozenset: ("frozenset({", "})")}


class UserCodeTimeout(BaseException):
    """Raised by the alarm handler; a BaseException so a user's ``except Exception`` cannot swallow it."""


class TimeLimit:
    """Run a block under a SIGALRM deadline, restoring any timer the user had set.

    Signals work only in the main thread (where ipykernel runs cells); elsewhere
    the block runs unbounded, which is the best a Python process can do.
    """

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        self._armed = threading.current_thread() is threading.main_thread() and hasattr(signal, "setitimer")

    def __enter__(self) -> TimeLimit:
        if self._armed:
            self._started = time.monotonic()
            self._old_handler = signal.signal(signal.SIGALRM, _raise_timeout)
            self._old_timer = signal.setitimer(signal.ITIMER_REAL, self.seconds)
        return self

    def __exit__(self, *exc: object) -> None:
        if not self._armed:
            return
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, self._old_handler)
        delay, interval = self._old_timer
        if delay > 0:  # give the user's own pending alarm back what is left of it
            remaining = max(delay - (time.monotonic() - self._started), 1e-6)
            signal.setitimer(signal.ITIMER_REAL, remaining, interval)


def _raise_timeout(signum: int, frame: object) -> None:
    raise UserCodeTimeout


def qualified_type(value: Any) -> str:
    """``module.QualName`` of the value's type; builtins keep their bare name."""
    kind = type(value)
    module = getattr(kind, "__module__", None)
    if module in (None, "builtins"):
        return kind.__qualname__
    return f"{module}.{kind.__qualname__}"


def estimate_size(value: Any) -> tuple[int | None, str | None]:
    """A shallow size estimate and the method used; O(1) in the object's size."""
    module = getattr(type(value), "__module__", "") or ""
    if module.split(".")[0] == "pandas" and callable(getattr(value, "memory_usage", None)):
        usage = value.memory_usage(index=True, deep=False)
        total = usage.sum() if hasattr(usage, "sum") else usage
        return int(total), "memory_usage"
    if not isinstance(value, type):
        nbytes = getattr(value, "nbytes", None)
        if isinstance(nbytes, numbers.Integral) and not isinstance(nbytes, bool):
            return int(nbytes), "nbytes"
    try:
        return sys.getsizeof(value), "getsizeof"
    except TypeError:  # an extension type without __sizeof__
        return None, None


def cheap_shape(value: Any) -> list[int] | None:
    """The ``shape`` attribute when it is a tuple of integers (arrays, frames, tensors)."""
    if isinstance(value, type):
        return None
    shape = getattr(value, "shape", None)
    if not isinstance(shape, tuple):
        return None
    try:
        return [int(dim) for dim in shape]
    except (TypeError, ValueError):
        return None


def cheap_len(value: Any) -> int | None:
    """``len(value)`` for objects whose type defines ``__len__``; classes and iterators are skipped."""
    if isinstance(value, type) or not hasattr(type(value), "__len__"):
        return None
    try:
        return len(value)
    except Exception:
        return None


def _stream_repr(value: Any, budget: int) -> Iterator[str]:
    """Yield pieces of ``repr(value)`` lazily; builtin containers are walked only as far as needed."""
    kind = type(value)
    if kind in _STREAMED_SEQUENCES:
        opener, closer = _STREAMED_SEQUENCES[kind]
        if kind is tuple and len(value) == 1:
            closer = ",)"
        yield from _stream_items(opener, closer, value, budget, _stream_repr)
    elif kind in _STREAMED_SETS and value:
        opener, closer = _STREAMED_SETS[kind]
        yield from _stream_items(opener, closer, value, budget, _stream_repr)
    elif kind is dict:
        yield from _stream_items("{", "}", value.items(), budget, _stream_pair)
    elif kind in (str, bytes, bytearray) and len(value) > budget:
        # repr of a prefix: the quote style may differ from the full repr, the text does not
        yield repr(value[:budget])
    else:
        yield repr(value)


def _stream_pair(pair: tuple[Any, Any], budget: int) -> Iterator[str]:
    key, item = pair
    yield from _stream_repr(key, budget)
    yield ": "
    yield from _stream_repr(item, budget)


def _stream_items(
    opener: str, closer: str, items: Any, budget: int, piece: Callable[[Any, int], Iterator[str]]
) -> Iterator[str]:
    yield opener
    for index, item in enumerate(items):
        if index:
            yield ", "
        yield from piece(item, budget)
    yield closer


def bounded_repr(value: Any, max_chars: int) -> tuple[str, bool]:
    """``repr(value)`` cut to ``max_chars``, computing no more of it than needed."""
    pieces: list[str] = []
    length = 0
    for piece in _stream_repr(value, max_chars + 1):
        pieces.append(piece)
        length += len(piece)
        if length > max_chars:
            return "".join(pieces)[:max_chars], True
    return "".join(pieces), False


def clean_text(text: str) -> str:
    """Replace what UTF-8 cannot encode (lone surrogates) so the JSON line stays valid."""
    return text.encode("utf-8", "replace").decode("utf-8")


def describe(name: str, value: Any, max_repr_chars: int, timeout: float) -> dict[str, Any]:
    """One variable as a ``Variable`` dict; user code it triggers is bounded by ``timeout`` seconds."""
    record: dict[str, Any] = {
        "name": name,
        "type": qualified_type(value),
        "size_bytes": None,
        "size_method": None,
        "shape": None,
        "len": None,
        "repr": "",
        "repr_truncated": False,
        "repr_failed": False,
    }
    # Size, shape and len are best effort: a failure leaves them None.
    try:
        with TimeLimit(timeout):
            record["size_bytes"], record["size_method"] = estimate_size(value)
            record["shape"] = cheap_shape(value)
            record["len"] = cheap_len(value)
    except (Exception, UserCodeTimeout):
        pass
    try:
        with TimeLimit(timeout):
            text, record["repr_truncated"] = bounded_repr(value, max_repr_chars)
    except UserCodeTimeout:
        text = f"<repr of {record['type']} timed out after {timeout:g} s>"
        record["repr_failed"] = True
    except Exception as exc:
        text = f"<repr of {record['type']} failed: {type(exc).__name__}>"
        record["repr_failed"] = True
    record["repr"] = clean_text(text)
    return record


def user_variables(namespace: Mapping[str, Any], hidden: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The user's own variables, sorted by name.

    Excluded, as IPython's ``%who`` does: ``_``-prefixed names, names IPython put
    there itself (``In``, ``Out``, ``exit``, ``get_ipython`` ... unless the user
    rebound them) and modules.
    """
    missing = object()
    chosen = []
    for name, value in list(namespace.items()):
        if name.startswith("_") or hidden.get(name, missing) is value:
            continue
        if isinstance(value, types.ModuleType):
            continue
        chosen.append((name, value))
    return sorted(chosen, key=lambda pair: pair[0])


def describe_namespace(
    namespace: Mapping[str, Any], hidden: Mapping[str, Any], max_repr_chars: int, timeout: float
) -> list[dict[str, Any]]:
    """Describe every user variable of ``namespace``."""
    return [describe(name, value, max_repr_chars, timeout) for name, value in user_variables(namespace, hidden)]


class JsonText:
    """A string IPython's plain-text formatter prints verbatim (no quoting, no line wrapping)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text)


def take(max_repr_chars: int, timeout: float) -> JsonText:
    """Snapshot the running IPython shell's user namespace as JSON (the kernel-side entry point)."""
    from IPython import get_ipython

    shell = get_ipython()
    variables = describe_namespace(shell.user_ns, shell.user_ns_hidden, max_repr_chars, timeout)
    return JsonText(json.dumps(variables, ensure_ascii=False))


def snapshot_expression(max_repr_chars: int, timeout: float) -> str:
    """The ``user_expression`` that takes a snapshot once the module is installed."""
    return f"__import__('sys').modules[{MODULE_NAME!r}].take({int(max_repr_chars)}, {float(timeout)!r})"


def install_code() -> str:
    """Code for a silent execution that installs this module in the kernel, binding no user name."""
    with open(__file__, encoding="utf-8") as handle:
        source = handle.read()
    # Lambda parameters are locals, so nothing lands in the user namespace.
    return (
        "(lambda module: (exec(compile({source!r}, {filename!r}, 'exec'), module.__dict__),"
        " __import__('sys').modules.__setitem__({name!r}, module)))"
        "(__import__('types').ModuleType({name!r}))"
    ).format(source=source, filename="<themisto-snapshot>", name=MODULE_NAME)
