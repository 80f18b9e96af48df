"""Describe the user namespace of an IPython kernel, from inside that kernel.

The recorder sends this module, compiled, to the kernel, which executes it
into a private module registered as ``sys.modules["_themisto_snapshot"]``; no
name is bound in the user namespace. The recorder evaluates
:func:`snapshot_expression` as a ``user_expression`` of each cell's own execute
request (or of a silent one after a cell that raised), so the user's history,
execution count, ``_`` and ``Out`` stay untouched.

Snapshots cost what changed: :data:`CACHE` keeps each variable's description
with its object and a cheap change fingerprint, and reuses it while both are
the same (see the fingerprint notes below for what a fingerprint cannot see).

The module uses only the standard library so it runs in any Python kernel, and
it is importable in-process so its helpers are unit-tested directly.

What it reports per variable (the fields of ``themisto.trajectory.Variable``):
the qualified type, a size estimate that never walks the object (``nbytes``,
pandas ``memory_usage(deep=False)``, ``sys.getsizeof`` plus a bounded sample of
a container's items; named in ``size_method``), a ``repr`` cut to
``max_repr_chars`` (``repr_truncated``; builtin and ``collections`` containers
are streamed, so a huge list costs only what is printed),
and ``shape``/``len`` where the object offers them. Everything that calls user
code (``__repr__``, ``__len__``, properties) runs under a per-variable time
limit; a call that raises or overruns yields a placeholder and ``repr_failed``.
"""

from __future__ import annotations

import builtins
import collections
import contextlib
import io
import itertools
import json
import numbers
import os
import re
import signal
import sys
import threading
import time
import types
import warnings
import weakref
import zlib
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for the type checker only: the kernel gets the request decoded by the wire module
    from themisto.kernel.inside.wire import SnapshotRequest

MODULE_NAME = "_themisto_snapshot"
WIRE_MODULE = "_themisto_wire"  # installed before this module (see themisto.kernel.inject)


class _Bound(types.ModuleType):
    """A module's functions as they were when the snapshot module was installed; its other attributes, live.

    A cell that patches ``json.dumps`` or ``signal.setitimer`` changes what its own code calls, not what
    the snapshot calls; ``sys.stdout`` and the like are still read as they are now.
    """

    def __init__(self, module: types.ModuleType) -> None:
        super().__init__(module.__name__)
        self.__dict__.update({name: value for name, value in vars(module).items() if callable(value)})
        self.__dict__["_live"] = module

    def __getattr__(self, name: str) -> Any:
        return getattr(self._live, name)

    def __setattr__(self, name: str, value: Any) -> None:
        # this module's own writes (guard_streams puts sys.stdout back) are meant for the real module
        self.__dict__.pop(name, None)
        setattr(self._live, name, value)


# Bound at install time, as are the builtins (a private copy, so ``builtins.len = ...`` changes nothing here):
# every function below is made after these lines and looks its globals up here.
contextlib, io, itertools, json, os, signal, sys, threading, time, weakref, zlib = (
    _Bound(module) for module in (contextlib, io, itertools, json, os, signal, sys, threading, time, weakref, zlib)
)
globals()["__builtins__"] = dict(vars(builtins))

# Builtin containers whose repr is streamed element by element, so a huge list
# costs at most ``max_repr_chars`` of work instead of a full repr.
_STREAMED_SEQUENCES: dict[type, tuple[str, str]] = {list: ("[", "]"), tuple: ("(", ")")}
_STREAMED_SETS: dict[type, tuple[str, str]] = {set: ("{", "}"), frozenset: ("frozenset({", "})")}
# Builtin containers whose size estimate adds their items' sizes (all of them, or a sample of this many).
_SIZED_CONTAINERS = frozenset(
    {
        list,
        tuple,
        set,
        frozenset,
        dict,
        collections.deque,
        collections.defaultdict,
        collections.OrderedDict,
        collections.Counter,
    }
)
SIZE_SAMPLE = 100
# Integers the recorder stores are 64-bit (Parquet int64): sizes, lengths and shapes must be below this.
INT64_LIMIT = 2**63


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
    """A size estimate and the method used, bounded in work whatever the object's size.

    Methods: ``memory_usage`` (pandas, ``deep=False``), ``nbytes`` (arrays),
    ``getsizeof+items`` (a builtin or ``collections`` container plus each item's ``getsizeof``, up
    to :data:`SIZE_SAMPLE` items), ``getsizeof+sample`` (larger containers: the
    average of a sample of items times ``len``), ``getsizeof`` (anything else).
    Items are measured one level deep, and an item shared by many slots counts
    once per slot.
    """
    module = getattr(type(value), "__module__", "") or ""
    if module.split(".")[0] == "pandas" and callable(getattr(value, "memory_usage", None)):
        usage = value.memory_usage(index=True, deep=False)
        total = usage.sum() if hasattr(usage, "sum") else usage
        return int(total), "memory_usage"
    if not isinstance(value, type):
        nbytes = getattr(value, "nbytes", None)
        # any object may claim an nbytes; one that no 64-bit size can hold is not believed
        if isinstance(nbytes, numbers.Integral) and not isinstance(nbytes, bool) and 0 <= int(nbytes) < INT64_LIMIT:
            return int(nbytes), "nbytes"
    try:
        own = sys.getsizeof(value)
    except TypeError:  # an extension type without __sizeof__
        return None, None
    if type(value) not in _SIZED_CONTAINERS or not value:  # exact types: a subclass may iterate lazily
        return own, "getsizeof"
    sizes = _item_sizes(value, SIZE_SAMPLE)
    if len(sizes) == len(value):
        return own + sum(sizes), "getsizeof+items"
    return own + round(sum(sizes) / len(sizes) * len(value)), "getsizeof+sample"


def _item_sizes(value: Any, count: int) -> list[int]:
    """``getsizeof`` of up to ``count`` items (key plus value for a dict), evenly spaced where indexable."""
    if isinstance(value, dict):
        return [_getsizeof(key) + _getsizeof(item) for key, item in itertools.islice(value.items(), count)]
    if type(value) in (list, tuple):
        sample: Iterable[Any] = value[:: max(1, len(value) // count)][:count]
    else:
        sample = itertools.islice(value, count)
    return [_getsizeof(item) for item in sample]


def _getsizeof(item: Any) -> int:
    try:
        return sys.getsizeof(item)
    except TypeError:
        return 0


def cheap_shape(value: Any) -> list[int] | None:
    """The ``shape`` attribute when it is a tuple of integers (arrays, frames, tensors)."""
    if isinstance(value, type):
        return None
    shape = getattr(value, "shape", None)
    if not isinstance(shape, tuple):
        return None
    try:
        dims = [int(dim) for dim in shape]
    except (TypeError, ValueError):
        return None
    return dims if all(0 <= dim < INT64_LIMIT for dim in dims) else None


def cheap_len(value: Any) -> int | None:
    """``len(value)`` for objects whose type defines ``__len__``; classes and iterators are skipped."""
    if isinstance(value, type) or not hasattr(type(value), "__len__"):
        return None
    try:
        return len(value)
    except BaseException:  # noqa: B036 -- a __len__ raising SystemExit must not end the snapshot
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
    elif kind is collections.deque:
        closer = "])" if value.maxlen is None else f"], maxlen={value.maxlen})"
        yield from _stream_items("deque([", closer, value, budget, _stream_repr)
    elif kind is collections.defaultdict:
        yield f"defaultdict({value.default_factory!r}, "
        yield from _stream_items("{", "})", value.items(), budget, _stream_pair)
    elif kind is collections.OrderedDict and value:
        if sys.version_info >= (3, 12):
            yield from _stream_items("OrderedDict({", "})", value.items(), budget, _stream_pair)
        else:  # older Pythons print the items as a list of pairs
            yield from _stream_items("OrderedDict([", "])", value.items(), budget, _stream_repr)
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


# --- structured descriptions ------------------------------------------------------------------
#
# What a person looks at first, recorded beside the repr (``Variable.description``): a frame's columns
# with their dtypes and its index, a series' name, dtype and index, an array's dtype and value range, a
# container's item types. Objects are recognised by what they offer (duck typing), never by importing
# their library, and every part is bounded: at most DESCRIBED_COLUMNS columns (then a count), range
# statistics only for arrays of at most RANGE_ELEMENTS elements, at most DESCRIPTION_CHARS in all.

DESCRIBED_COLUMNS = 100
DESCRIBED_ITEMS = 32  # container items whose types are named
RANGE_ELEMENTS = 1_000_000
DESCRIPTION_CHARS = 4000
LABEL_CHARS = 60
# A memory address in a repr (``<function f at 0x7f3a...>``) differs between runs: it is masked.
ADDRESS = re.compile(r"(?<=\bat )0x[0-9a-fA-F]+")
MASKED_ADDRESS = "0x?"


def mask_addresses(text: str) -> str:
    """``text`` with every ``at 0x...`` memory address masked, so equal objects read the same in every run."""
    return ADDRESS.sub(MASKED_ADDRESS, text)


def _label(label: Any) -> str:
    """A column label as a person reads it: a plain string bare, anything else by its repr; cut short."""
    text = label if type(label) is str and label and ", " not in label and label.strip() == label else repr(label)
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _value_text(value: Any) -> str:
    """An index label or statistic: strings quoted, a tuple (a MultiIndex label) part by part, anything else
    as ``str`` shows it (a Timestamp's date, a numpy integer's digits)."""
    if type(value) is tuple:
        text = "(" + ", ".join(_value_text(part) for part in value) + ("," if len(value) == 1 else "") + ")"
    else:
        text = repr(value) if isinstance(value, str) else str(value)
    return text if len(text) <= LABEL_CHARS else text[: LABEL_CHARS - 1] + "…"


def _index_line(index: Any) -> str | None:
    """``index: RangeIndex 0 to 999`` (the first and last labels, ``first 2, last 1, not sorted`` where they do not
    increase, and the index's name); None: no index."""
    if index is None or isinstance(index, type):
        return None
    kind = type(index).__name__
    names = [name for name in (getattr(index, "names", None) or []) if name is not None]
    named = f", name{'s' if len(names) > 1 else ''} {', '.join(_value_text(name) for name in names)}" if names else ""
    length = len(index)
    if length == 0:
        return f"index: {kind}, empty{named}"
    step = getattr(index, "step", None)
    if isinstance(step, int) and step != 1:
        named = f", step {step}" + named
    dtype = getattr(index, "dtype", None)
    typed = f" ({dtype})" if dtype is not None and kind in ("Index", "CategoricalIndex") else ""
    first, last = _value_text(index[0]), _value_text(index[length - 1])
    if length == 1:
        labels = first
    elif _ascending(index):
        labels = f"{first} to {last}"
    else:  # "2 to 1" would read as a range: say the labels are the ends of an unsorted index
        labels = f"first {first}, last {last}, not sorted"
    return f"index: {kind}{typed} {labels}{named}"


def _ascending(index: Any) -> bool:
    """Whether an index's labels increase (pandas' ``is_monotonic_increasing``); False where it cannot say."""
    try:
        return getattr(index, "is_monotonic_increasing", False) is True
    except Exception:  # noqa: BLE001 -- labels that do not compare (mixed types): not sorted
        return False


def _frame_lines(value: Any, width: int) -> list[str]:
    """A data frame's columns with their dtypes (up to DESCRIBED_COLUMNS, then a count) and its index."""
    columns = list(itertools.islice(iter(value.columns), DESCRIBED_COLUMNS))
    shown = value.iloc[:, :DESCRIBED_COLUMNS] if width > DESCRIBED_COLUMNS and hasattr(value, "iloc") else value
    dtypes = list(itertools.islice(iter(shown.dtypes), len(columns)))
    listing = ", ".join(f"{_label(label)} {dtype}" for label, dtype in zip(columns, dtypes, strict=False))
    more = f", ... {width - len(columns)} more" if width > len(columns) else ""
    lines = [f"columns ({width}): {listing}{more}"]
    index = _index_line(getattr(value, "index", None))
    return lines + ([index] if index else [])


def _series_lines(value: Any) -> list[str]:
    """A series' name and dtype, and its index."""
    lines = [f"name: {_value_text(value.name)}, dtype: {value.dtype}"]
    index = _index_line(getattr(value, "index", None))
    return lines + ([index] if index else [])


def _array_lines(value: Any, size: int) -> list[str]:
    """An array's dtype, and for numbers the minimum and maximum (of arrays small enough to scan)."""
    dtype = value.dtype
    line = f"dtype: {dtype}"
    numpy = sys.modules.get("numpy")  # loaded, when the array is numpy's
    numeric = getattr(dtype, "kind", "") in ("i", "u", "f")
    if numpy is not None and _module(type(value)) == "numpy" and numeric and 0 < size <= RANGE_ELEMENTS:
        with warnings.catch_warnings():  # an all-NaN array warns, and its range is NaN
            warnings.simplefilter("ignore")
            low, high = numpy.nanmin(value), numpy.nanmax(value)
        line += f", min {_value_text(low.item() if hasattr(low, 'item') else low)}"
        line += f", max {_value_text(high.item() if hasattr(high, 'item') else high)}"
    return [line]


def _type_names(items: Iterable[Any]) -> str:
    """The distinct type names of ``items`` (the first DESCRIBED_ITEMS of them), in order of appearance."""
    names = dict.fromkeys(type(item).__name__ for item in itertools.islice(items, DESCRIBED_ITEMS))
    return " | ".join(names) or "none"


def _container_lines(value: Any) -> list[str]:
    """The types of a builtin container's items (a mapping's keys and values), from its first items."""
    if isinstance(value, dict):
        return [f"keys: {_type_names(iter(value))}; values: {_type_names(iter(value.values()))}"]
    return [f"items: {_type_names(iter(value))}"]


def structure(value: Any) -> str | None:
    """The structured description of ``value`` (see above), or None for objects described by type and repr alone."""
    if isinstance(value, type):
        return None
    kind = type(value)
    if kind in _SIZED_CONTAINERS:
        lines = _container_lines(value) if value else []
    else:
        shape = cheap_shape(value)
        if not shape or not hasattr(value, "dtype") and not hasattr(value, "dtypes"):
            return None  # no shape, or a scalar's (its repr says it all)
        if len(shape) == 2 and hasattr(value, "columns") and hasattr(value, "dtypes"):
            lines = _frame_lines(value, shape[1])
        elif len(shape) == 1 and hasattr(value, "index") and hasattr(value, "name") and hasattr(value, "dtype"):
            lines = _series_lines(value)
        elif hasattr(value, "dtype"):
            size = 1
            for dim in shape:
                size *= dim
            lines = _array_lines(value, size)
        else:
            return None
    if not lines:
        return None
    text = clean_text("\n".join(lines))
    return text if len(text) <= DESCRIPTION_CHARS else text[: DESCRIPTION_CHARS - 1] + "…"


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
        "description": None,
    }
    # Size, shape and len are best effort: a failure leaves them None. User code may raise anything,
    # SystemExit and KeyboardInterrupt included, and none of it may end the snapshot of the others.
    try:
        with TimeLimit(timeout):
            record["size_bytes"], record["size_method"] = estimate_size(value)
            record["shape"] = cheap_shape(value)
            record["len"] = cheap_len(value)
    except BaseException:  # noqa: B036
        record["size_bytes"] = record["size_method"] = None
    try:
        with TimeLimit(timeout):
            text, record["repr_truncated"] = bounded_repr(value, max_repr_chars)
    except UserCodeTimeout:
        text = f"<repr of {record['type']} timed out after {timeout:g} s>"
        record["repr_failed"] = True
    except BaseException as exc:  # noqa: B036
        text = f"<repr of {record['type']} failed: {type(exc).__name__}>"
        record["repr_failed"] = True
    record["repr"] = mask_addresses(clean_text(text))
    try:
        with TimeLimit(timeout):
            record["description"] = structure(value)
    except BaseException:  # noqa: B036 -- a description is best effort, as size and shape are
        record["description"] = None
    return record


def user_variables(namespace: Mapping[str, Any], hidden: Mapping[str, Any]) -> list[tuple[str, Any]]:
    """The user's own variables, sorted by name.

    Excluded, as IPython's ``%who`` does: ``_``-prefixed names, names IPython put
    there itself (``In``, ``Out``, ``exit``, ``get_ipython`` ... unless the user
    rebound them) and modules; and keys that are not strings
    (``globals()[1] = 2``), which no code can name. No user code runs here:
    the module test looks at the type, not at a ``__class__`` the object may fake.
    """
    missing = object()
    chosen = []
    for name, value in list(namespace.items()):
        if type(name) is not str or name.startswith("_") or hidden.get(name, missing) is value:
            continue
        if issubclass(type(value), types.ModuleType):
            continue
        chosen.append((name, value))
    return sorted(chosen, key=lambda pair: pair[0])


# --- change fingerprints ----------------------------------------------------------------------
#
# A snapshot reuses a variable's description when the name still holds the very
# same object (checked with ``is``, through a reference the cache keeps) and the
# object's fingerprint is unchanged. The fingerprint is cheap, so it sees only
# part of the object; a mutation it does not see keeps the old description:
#
# - list/tuple/dict/set/deque (and defaultdict, OrderedDict, Counter): ``len`` and the identity (plus ``len`` of builtin
#   containers) of up to FINGERPRINT_ITEMS items, evenly spaced for sequences,
#   the first ones plus the last for dicts, the first ones for sets. Missed:
#   rebinding an unsampled slot of a big container, a mutation two levels down,
#   or one that keeps the nested container's length (``rows[0][1] = 5``).
# - numpy arrays (anything with ``__array_interface__``): shape, dtype and a CRC-32
#   of the whole buffer up to FULL_HASH_BYTES; beyond that the data pointer and
#   strides too, and the CRC of ARRAY_SAMPLE evenly spaced elements. Missed:
#   writing only unsampled elements of a big array, or a change whose CRC-32 is
#   the old one's (one in 2**32 by chance; a CRC is no defence against a cell
#   that means to hide a write, which can write unsampled elements anyway).
# - pandas objects: the axes (a frame's columns and index, a series'
#   index) by the identity of their Index objects, kept alive by the key (an
#   Index takes no item assignment: new labels are a new Index), a series' name,
#   and per column block the array fingerprint above (numpy-backed) or, for
#   extension arrays, the buffers they hold (an Arrow column's array is replaced
#   on write). Missed: what changes an Index in place, as a name given to it
#   (``frame.index.name = "row"``) or a write to its private ``_data`` (its
#   ``values`` are read-only).
# - torch tensors: shape, dtype, data pointer and the tensor's own version
#   counter, which every in-place operation bumps.
# - other objects with a ``__dict__``: the attribute names and the identity
#   (plus ``len`` of builtin containers) of their values. Missed: a mutation
#   inside an attribute's object (``model.layer.weight += 1``) or state kept
#   outside ``__dict__`` (slots, C structures, globals a ``__repr__`` reads).
#   Read under a time limit, as user code, unless the class reads it plainly
#   (:func:`_reads_attributes_plainly`, checked at every snapshot: a class may be changed).
# - immutable builtins (numbers, str, bytes, None, functions, classes): identity
#   (exact types only: a subclass instance is fingerprinted by its ``__dict__``).
# Any other object is described again at every snapshot.

FINGERPRINT_ITEMS = 32
FULL_HASH_BYTES = 65_536
ARRAY_SAMPLE = 1024
# Exact types whose description depends on their identity alone (a subclass may add mutable state).
_IMMUTABLE = frozenset(
    {int, float, complex, str, bytes, bool, type(None), range, types.FunctionType, types.BuiltinFunctionType}
)


def _items_key(items: list[Any]) -> tuple[tuple[int, ...], list[int]]:
    """The items' identities, and the lengths of those that are builtin containers (appends one level down
    show); at C speed, as the items are the bulk of a fingerprint's work: the lengths are looked for only
    when an item is such a container (most samples are numbers or strings)."""
    if _SIZED_CONTAINERS.isdisjoint(map(type, items)):
        return tuple(map(id, items)), []
    return tuple(map(id, items)), [len(item) for item in items if type(item) in _SIZED_CONTAINERS]


class _Same:
    """An object in a fingerprint, equal only to itself: the key keeps it alive, so no other object can
    take its address (as one whose ``id`` alone were kept could), and comparing runs none of its code."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return type(other) is _Same and other.value is self.value

    def __hash__(self) -> int:
        return id(self.value)


def _container_fingerprint(value: Any) -> tuple[Any, ...]:
    kind = type(value)
    count = len(value)
    if kind in (list, tuple):
        step = max(1, -(-count // FINGERPRINT_ITEMS))
        sample = list(value[::step])  # evenly spaced items, sliced at C speed, and the last one
        if count and (count - 1) % step:
            sample.append(value[-1])
        return count, _items_key(sample)
    if isinstance(value, dict):
        keys = tuple(map(id, itertools.islice(value, FINGERPRINT_ITEMS)))  # the first ones and the last one
        items = list(itertools.islice(value.values(), FINGERPRINT_ITEMS))
        if count > FINGERPRINT_ITEMS:
            keys += (id(next(reversed(value))),)
            items.append(next(reversed(value.values())))
        return count, keys, _items_key(items)
    return count, _items_key(list(itertools.islice(value, FINGERPRINT_ITEMS)))


def _array_fingerprint(value: Any) -> tuple[Any, ...]:
    if value.nbytes <= FULL_HASH_BYTES:
        # the whole buffer, copied in C order whatever the layout: with the shape and dtype it is all a
        # description reads, so the data pointer (a dict built by ``__array_interface__``) is not needed
        return tuple(value.shape), value.dtype.str, zlib.crc32(value.tobytes())
    interface = value.__array_interface__
    # ``flat`` slicing copies only the selected elements
    sample = value.flat[:: max(1, -(-value.size // ARRAY_SAMPLE))].tobytes() + value.flat[-1:].tobytes()
    return (
        interface["data"][0],
        tuple(interface["shape"]),
        interface["typestr"],
        interface.get("strides"),
        zlib.crc32(sample),
    )


def _pandas_fingerprint(value: Any) -> tuple[Any, ...]:
    # The axes (a frame's columns and index, a series' index) are pandas Index objects, which allow no
    # item assignment: a new label replaces the Index, so the object itself stands for its labels.
    # The axes' lengths are the shape, so it needs no key of its own.
    axes = tuple(_Same(axis) for axis in value._mgr.axes)  # pandas' block manager: private but long-stable
    blocks = tuple(
        _array_fingerprint(array) if _has_array_interface(type(array)) else _extension_fingerprint(array)
        for array in value._mgr.arrays
    )
    return axes, _label_key(vars(value).get("_name")), blocks


def _has_array_interface(kind: type) -> bool:
    """Whether values of type ``kind`` are numpy arrays (or scalars): looked up on the type, as reading
    ``__array_interface__`` on a value builds a dict (a microsecond and a half)."""
    return hasattr(kind, "__array_interface__")


def _label_key(label: Any) -> Hashable:
    """A label (a series' name) as a key: its value if a str, int or tuple of them, else its identity.

    Only builtin values are compared, so no user ``__eq__``/``__str__`` runs.
    """
    if type(label) is tuple:
        return tuple(_label_key(part) for part in label)
    return label if type(label) in (str, int, float, bool) else _Same(label)


def _extension_fingerprint(array: Any) -> tuple[Any, ...]:
    """A pandas extension array: the buffers it holds, which a write replaces (Arrow) or changes (numpy-backed)."""
    parts = tuple(
        (name, _array_fingerprint(part) if _has_array_interface(type(part)) else _Same(part))
        for name, part in sorted(vars(array).items())
    )
    return _Same(array), parts


def _module(kind: type) -> str:
    """The top-level package a type comes from."""
    return (getattr(kind, "__module__", "") or "").split(".")[0]


def _immutable_fingerprint(value: Any) -> tuple[()]:
    return ()


def _pandas_or_attributes(value: Any) -> Hashable | None:
    return _pandas_fingerprint(value) if hasattr(value, "_mgr") else _attributes_fingerprint(value)


def _torch_fingerprint(value: Any) -> Hashable | None:
    if isinstance(getattr(value, "_version", None), int):
        return tuple(value.shape), str(value.dtype), value.data_ptr(), value._version
    return _attributes_fingerprint(value)


def _attributes_fingerprint(value: Any) -> Hashable | None:
    attributes = getattr(value, "__dict__", None)
    return _container_fingerprint(attributes) if type(attributes) is dict else None


# A class's own namespace and its method resolution order, read through ``type``'s descriptors: no metaclass's
# ``__getattribute__`` runs.
_NAMESPACE_OF = type.__dict__["__dict__"].__get__
_MRO_OF = type.__dict__["__mro__"].__get__


def _reads_attributes_plainly(kind: type) -> bool:
    """Whether reading ``__dict__`` of an instance of ``kind`` runs no Python code: no class of its MRO but
    ``object`` defines ``__getattribute__`` (a C type with its own attribute lookup has one too), and the first
    that defines ``__dict__`` holds the instance dictionary's C descriptor there (not a property; without one,
    the read fails into a ``__getattr__``)."""
    for cls in _MRO_OF(kind):
        namespace = _NAMESPACE_OF(cls)
        if "__getattribute__" in namespace and cls is not object:
            return False
        if "__dict__" in namespace:
            return type(namespace["__dict__"]) is types.GetSetDescriptorType
    return False


_LIBRARY_FINGERPRINTERS: dict[str, Callable[[Any], Hashable | None]] = {
    "pandas": _pandas_or_attributes,
    "torch": _torch_fingerprint,
}
# Each type's fingerprint function and whether it may run user code (then under a time limit), found once per
# type: the lookup is most of the cost of an unchanged value. Classes made by cells (``__main__``) are looked up
# every time, so the table keeps none alive; it is emptied if it ever holds _FINGERPRINTER_TYPES types.
_FINGERPRINTERS: dict[type, tuple[Callable[[Any], Hashable | None], bool]] = {}
_FINGERPRINTER_TYPES = 4096


def _fingerprinter(kind: type) -> tuple[Callable[[Any], Hashable | None], bool]:
    """The fingerprint function of values of exact type ``kind``, and whether it runs user code."""
    found = _FINGERPRINTERS.get(kind)
    if found is not None:
        return found
    module = _module(kind)
    if kind in _IMMUTABLE or issubclass(kind, type):  # a class's repr is its name
        found = (_immutable_fingerprint, False)
    elif kind in _SIZED_CONTAINERS:
        found = (_container_fingerprint, False)
    elif module == "numpy":  # library code only: no time limit
        found = (_array_fingerprint if _has_array_interface(kind) else _attributes_fingerprint, False)
    elif module in _LIBRARY_FINGERPRINTERS:
        found = (_LIBRARY_FINGERPRINTERS[module], False)
    else:
        found = (_attributes_fingerprint, True)
    if module != "__main__":
        if len(_FINGERPRINTERS) >= _FINGERPRINTER_TYPES:
            _FINGERPRINTERS.clear()
        _FINGERPRINTERS[kind] = found
    return found


def fingerprint(value: Any) -> Hashable | None:
    """A cheap key that changes when ``value`` is mutated in place (within the limits above); None: no key."""
    return _fingerprinter(type(value))[0](value)


def _reference(value: Any) -> Callable[[], Any]:
    """A weak reference where the type allows one, so the cache never keeps a deleted array alive."""
    try:
        return weakref.ref(value)
    except TypeError:
        return lambda: value


_Entry = tuple[Callable[[], Any], Hashable, dict[str, Any]]  # a reference to the object, its key, its description


class DescriptionCache:
    """The previous snapshot's descriptions, reused for variables whose object is unchanged."""

    def __init__(self) -> None:
        # name -> (reference to the object, fingerprint and settings, description)
        self._entries: dict[str, _Entry] = {}
        self.described = 0  # descriptions computed (not reused) since the cache was made
        self.generation = 0  # how many times describe_all has finished
        self.reused: set[str] = set()  # names whose description the last call took from the one before
        self._settings: tuple[int, float] | None = None  # the max_repr_chars and timeout of the entries
        self.names: tuple[str, ...] = ()  # the names the last call described, in order

    def describe_all(
        self,
        variables: list[tuple[str, Any]],
        max_repr_chars: int,
        timeout: float,
        before_user_code: Callable[[], None] = lambda: None,
    ) -> list[dict[str, Any]]:
        """Describe ``variables``; the cache then holds exactly these names (deleted ones are dropped).

        ``before_user_code`` is called before any user code runs (a description, a fingerprint that may run
        some), perhaps more than once; not at all when every variable is reused on a fingerprint of its own.
        """
        if (max_repr_chars, timeout) != self._settings:  # a description depends on them: none is reused
            self._entries, self._settings = {}, (max_repr_chars, timeout)
        entries = {}
        records = []
        reused = set()
        kept = [_entry_of_same(self._entries.get(name), value) for name, value in variables]
        if any(entry is None for entry in kept):
            # a description will run user code, whatever the fingerprints say: said before them, the cell's output,
            # handed over, has their time to leave the kernel before user code that may end it runs
            before_user_code()
        keys = _cache_keys([value for _, value in variables], timeout, before_user_code)
        for (name, value), key, cached in zip(variables, keys, kept, strict=True):
            if key is not None and cached is not None and cached[1] == key:
                entries[name] = cached  # the same object, reference and description
                records.append(cached[2])
                reused.add(name)
                continue
            before_user_code()
            record = describe(name, value, max_repr_chars, timeout)
            self.described += 1
            if key is not None:
                entries[name] = (_reference(value), key, record)
            records.append(record)
        self._entries, self.reused = entries, reused
        self.names = tuple(name for name, _ in variables)
        self.generation += 1
        return records


def _entry_of_same(cached: _Entry | None, value: Any) -> _Entry | None:
    """A variable's cache entry ``cached`` if it was made for ``value`` itself; None: the variable is described
    again, whatever its fingerprint (no entry, or one made for another object)."""
    return cached if cached is not None and cached[0]() is value else None


def _cache_keys(values: list[Any], timeout: float, before_user_code: Callable[[], None]) -> list[Hashable | None]:
    """Each value's fingerprint; None: not cacheable.

    A fingerprint that may run user code (an object's ``__dict__`` its class does not read plainly) runs under
    a time limit, one for all of them rather than one each, as arming one costs more than most fingerprints,
    after ``before_user_code``: when it runs out, or a fingerprint raises, that value gets no key (it is
    described again, under its own limit) and the rest go on under a new one.
    """
    keys: list[Hashable | None] = [None] * len(values)
    functions: list[Callable[[Any], Hashable | None] | None] = []  # None: guarded
    for value in values:
        found, runs_user_code = _fingerprinter(type(value))
        functions.append(None if runs_user_code and not _reads_attributes_plainly(type(value)) else found)
    guarded = [index for index, function in enumerate(functions) if function is None]
    if guarded:
        # before the other fingerprints: their time lets the cell's output, handed over, leave the kernel before
        # user code that may end it runs
        before_user_code()
    for index, function in enumerate(functions):
        if function is None:
            continue
        try:
            keys[index] = function(values[index])
        except BaseException:  # noqa: B036 -- a broken object is described again, never fatal
            continue
    done = 0
    while done < len(guarded):
        try:
            with TimeLimit(timeout):
                while done < len(guarded):
                    index = guarded[done]
                    keys[index] = _attributes_fingerprint(values[index])
                    done += 1
        except BaseException:  # noqa: B036 -- user code (a __dict__ property) may raise SystemExit
            if done < len(guarded):
                keys[guarded[done]] = None
                done += 1
    return keys


# The kernel's cache: one per kernel process, so a restarted kernel starts empty.
CACHE = DescriptionCache()


class JsonText:
    """A string IPython's plain-text formatter prints verbatim (no quoting, no line wrapping)."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __repr__(self) -> str:
        return self.text

    def _repr_pretty_(self, printer: Any, cycle: bool) -> None:
        printer.text(self.text)


def take(request: SnapshotRequest) -> JsonText:
    """Snapshot the running IPython shell's user namespace (the kernel-side entry point).

    Returns a :class:`~themisto.kernel.inside.wire.SnapshotResult` as JSON text: the
    first ``request.max_variables`` variables by name, and how many more there
    were (``omitted``). ``request.known`` is the generation of the last snapshot the recorder
    received; if it is this cache's latest, a variable whose description is
    unchanged since then is sent as ``{"name": ...}`` alone, and a namespace whose names and
    descriptions are all unchanged as ``unchanged`` with no variable, so it costs little to encode,
    send and parse. ``seconds`` lets the
    recorder subtract the snapshot from a cell's execution time when it rides
    on the cell's own execute request. What user code prints while being
    described is discarded, so it never lands in the cell's output. With
    ``request.announce`` (a file path) the file says that the cell finished, its output flushed first, before
    the snapshot runs any user code, and that the snapshot is done (see :func:`announce_snapshot`); a snapshot
    that runs no user code (every variable unchanged by a fingerprint that runs none) says only the latter.
    Text is cleaned of lone surrogates (a name like ``globals()['\\ud800']``), which no message can carry.
    """
    shell = _shell()
    started = time.perf_counter()
    finished = _Finished(request.announce)
    delta = request.known == CACHE.generation
    known_names = CACHE.names
    variables = user_variables(shell.user_ns, shell.user_ns_hidden)
    with contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        records = CACHE.describe_all(
            variables[: request.max_variables], request.max_repr_chars, request.repr_timeout, finished.say
        )
    unchanged = delta and len(CACHE.reused) == len(records) and CACHE.names == known_names
    if unchanged:
        records = []
    elif delta:
        records = [{"name": record["name"]} if record["name"] in CACHE.reused else record for record in records]
    if request.announce is not None:
        announce_snapshot(request.announce, "done")
    result = _INSTALLED["wire"].SnapshotResult(
        generation=CACHE.generation,
        variables=records,
        seconds=time.perf_counter() - started - finished.seconds,
        omitted=max(0, len(variables) - request.max_variables),
        unchanged=unchanged,
    )
    return JsonText(clean_text(result.to_json()))


class _Finished:
    """The word that the cell finished, said to the file ``path`` (if any) once, when the snapshot is about to
    run user code (:func:`announce_snapshot`): with the time the snapshot began, after the cell's output on
    the kernel's own streams is handed over. ``seconds``: the time that took, the cell's rather than the
    snapshot's (its output's)."""

    def __init__(self, path: str | None) -> None:
        self.path, self.began = path, repr(time.time())
        self.streams = (sys.stdout, sys.stderr)  # the kernel's, before the snapshot's own redirection
        self.said, self.seconds = path is None, 0.0

    def say(self) -> None:
        if self.said:
            return
        self.said = True
        started = time.perf_counter()
        announce_snapshot(self.path, self.began, self.streams)  # type: ignore[arg-type]
        self.seconds = time.perf_counter() - started


# The IPython shell, kept when the module is installed (install), so a cell that replaces
# IPython.get_ipython cannot hand the snapshot a namespace of its own making.
_INSTALLED: dict[str, Any] = {}


def _shell() -> Any:
    """The shell the module was installed in (or, when it was not, the running one)."""
    if "shell" not in _INSTALLED:
        from IPython import get_ipython

        return get_ipython()
    return _INSTALLED["shell"]


def announce_snapshot(path: str, word: str, streams: Iterable[Any] = ()) -> None:
    """Hand over the cell's output on ``streams``, then write to ``path`` the request's id and ``word``: the
    time the cell finished, or ``done``.

    A file, written before the snapshot runs any user code, so it stands even when a ``__repr__`` then ends
    the process: the recorder knows the death, or the hang, was the snapshot's (a message could be lost).
    ``done``: the snapshot has run all user code it calls, so what fails later is the kernel's, not its.
    """
    for stream in streams:
        hand_over(stream)
    kernel = _INSTALLED.get("kernel")
    request = kernel.get_parent().get("header", {}).get("msg_id", "") if kernel is not None else ""
    record = _INSTALLED["wire"].announcement(request, word)
    # rewritten in place (the wire module's announcement): a half-written record fails its check and reads as no
    # announcement, as a missing file does; opened for each write, so no forked child inherits a descriptor of it
    marker = os.open(path, os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        os.pwrite(marker, record, 0)
    finally:
        os.close(marker)


def hand_over(stream: Any) -> None:
    """Return once the cell's output on ``stream`` is in its socket's hands, not a Python queue's.

    ipykernel's ``flush`` returns when its IO thread has turned the buffered text into a message, but that
    thread sends the message a turn later, and only when it next holds the GIL: a ``__repr__`` that ends
    the process during the snapshot would take the cell's output with it. Here the wait is for a callback
    queued behind the send. Nothing pending, nothing queued: no wait (a round trip, a millisecond a step).
    A stream that is not ipykernel's is flushed.
    """
    thread: Any = getattr(stream, "pub_thread", None)
    queued = getattr(thread, "_events", None)
    io_thread = getattr(thread, "thread", None)
    pending = getattr(stream, "_flush_pending", True) or getattr(stream, "_subprocess_flush_pending", False)
    if queued is None or io_thread is None or not io_thread.is_alive() or io_thread is threading.current_thread():
        if pending:
            stream.flush()
        return
    if not pending and not queued:
        return
    sent = threading.Event()
    if pending:
        thread.schedule(stream._flush)  # what flush() does; the send it queues runs before the callback below
    thread.schedule(lambda: thread.schedule(sent.set))
    sent.wait(getattr(stream, "flush_timeout", 10.0))


# The libraries whose versions the provenance records (and a prompt's environment header names), when
# installed: those whose output formatting a target depends on (numpy 2 prints ``np.float64(1.0)``).
LIBRARIES = (
    "numpy",
    "pandas",
    "scipy",
    "scikit-learn",
    "matplotlib",
    "seaborn",
    "pyarrow",
    "polars",
    "torch",
    "statsmodels",
    "patsy",
    "lxml",
)


def versions() -> JsonText:
    """The kernel's own Python and ipykernel versions, and the installed :data:`LIBRARIES`' versions, as JSON
    text for the trajectory's provenance; the libraries are looked up in their metadata, never imported."""
    import platform

    ipykernel = sys.modules.get("ipykernel")
    libraries = {}
    for library in LIBRARIES:
        try:
            libraries[library] = installed_version(library)
        except Exception:  # noqa: BLE001 -- not installed, or broken metadata: not named
            continue
    record = _INSTALLED["wire"].Versions(platform.python_version(), getattr(ipykernel, "__version__", None), libraries)
    return JsonText(record.to_json())


def installed_version(library: str) -> str:
    """``importlib.metadata.version(library)``, read from the metadata's first ``Version`` header.

    ``importlib.metadata`` parses the whole metadata file as e-mail for one header (numpy's holds its licences):
    13 of the versions' 16.5 ms in every kernel's set-up. A header it would read otherwise (one folded over
    lines, none in the header block) is left to it.
    """
    import importlib.metadata

    distribution = importlib.metadata.distribution(library)
    text = distribution.read_text("METADATA") or distribution.read_text("PKG-INFO") or ""
    lines = text.splitlines()
    headers = lines[: lines.index("")] if "" in lines else lines  # the header block ends at the first empty line
    for number, line in enumerate(headers):
        name, colon, value = line.partition(":")
        if colon and name.lower() == "version":
            if number + 1 < len(headers) and headers[number + 1][:1] in (" ", "\t"):
                break  # folded
            return value.lstrip(" \t")
    return importlib.metadata.version(library)


def install() -> None:
    """Once the module is in the kernel: keep the shell, guard the streams, answer the snapshot unformatted."""
    from IPython import get_ipython

    shell = get_ipython()
    # the wire's records too, so a cell that replaces the wire's entry of sys.modules changes no answer
    _INSTALLED.update(shell=shell, kernel=getattr(shell, "kernel", None), wire=sys.modules[WIRE_MODULE])
    guard_streams(shell)
    answer_unformatted(shell)


def answer_unformatted(shell: Any) -> None:
    """Answer a ``user_expression`` whose value is a :class:`JsonText` with its text alone, without IPython's
    display formatters.

    IPython formats an expression's value with each of its dozen formatters (HTML, LaTeX, PNG...), a lookup
    by type and attribute each, which took more of a step than the snapshot of an empty namespace; a
    JsonText has only its plain text, so the answer is the same. Other values are formatted as before.
    """
    formatted = getattr(shell, "_format_user_obj", None)
    if formatted is None:  # an IPython without it
        return
    formatted = getattr(formatted, "__wrapped__", formatted)  # the shell's own, under an earlier install's wrapper

    def format_user_obj(value: Any) -> dict[str, Any]:
        if type(value) is JsonText:
            return {"status": "ok", "data": {"text/plain": value.text}, "metadata": {}}
        return formatted(value)  # type: ignore[no-any-return]

    format_user_obj.__wrapped__ = formatted  # type: ignore[attr-defined]
    shell._format_user_obj = format_user_obj


def guard_streams(shell: Any) -> None:
    """Start every cell with the kernel's own ``sys.stdout`` and ``sys.stderr``, whatever earlier cells did.

    A cell that sets ``sys.stdout = None`` otherwise breaks the kernel's own
    message handling, so every later cell hangs. The streams are put back
    after each cell (IPython's ``post_run_cell`` event, before the kernel
    flushes them); a cell's reassignment lasts that cell. A stream the cell
    closed stays closed, as in Jupyter. ``sys.displayhook`` needs no guard:
    IPython sets it around every cell itself.
    """
    streams = {"stdout": sys.stdout, "stderr": sys.stderr}

    def restore_streams(*args: Any) -> None:
        for name, stream in streams.items():
            if getattr(sys, name) is not stream:
                setattr(sys, name, stream)

    callbacks = shell.events.callbacks["post_run_cell"]
    # a re-installed snapshot module replaces the guard of the one before it
    callbacks[:] = [callback for callback in callbacks if getattr(callback, "__module__", None) != MODULE_NAME]
    shell.events.register("post_run_cell", restore_streams)
