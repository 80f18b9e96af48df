"""The kernel-side snapshot: its helpers in-process, and its exclusions inside a real kernel."""

from __future__ import annotations

import signal
from typing import Any, ClassVar

import numpy as np
import pandas as pd
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from themisto.kernel.inside import snapshot
from themisto.kernel.recorder import Recorder
from themisto.recording.options import RecordOptions

KERNEL_OPTIONS = RecordOptions(timeout=20)  # the shared `kernel` fixture's (tests/conftest.py)


class CountingRepr:
    """An element whose repr calls are counted, to prove a repr is not walked in full."""

    calls = 0

    def __repr__(self) -> str:
        CountingRepr.calls += 1
        return "item"


def test_huge_list_repr_stops_after_the_budget() -> None:
    CountingRepr.calls = 0
    values = [CountingRepr() for _ in range(10_000)]
    text, truncated = snapshot.bounded_repr(values, 50)
    assert CountingRepr.calls < 15
    assert truncated and text == repr(values)[:50]


# Quotes are left out of strings: a long string's repr is taken of a prefix, whose quote style may differ.
_scalars = (
    st.none()
    | st.booleans()
    | st.integers()
    | st.floats(allow_nan=False)
    | st.text(alphabet=st.characters(blacklist_characters="'\"", blacklist_categories=["Cs"]), max_size=30)
)
_nested = st.recursive(
    _scalars,
    lambda inner: (
        st.lists(inner, max_size=6)
        | st.lists(inner, max_size=6).map(tuple)
        | st.dictionaries(st.text(max_size=5), inner, max_size=6)
        | st.frozensets(st.integers(), max_size=6)
    ),
    max_leaves=40,
)


@settings(max_examples=200, deadline=None)
@given(value=_nested, max_chars=st.integers(min_value=1, max_value=120))
def test_bounded_repr_is_a_prefix_of_repr(value: object, max_chars: int) -> None:
    full = repr(value)
    assert snapshot.bounded_repr(value, max_chars) == (full[:max_chars], len(full) > max_chars)


@pytest.mark.parametrize("value", [(1,), ([1, 2],), set(), {3}, frozenset(), {"a": (1,)}, [], {}])
def test_bounded_repr_matches_small_containers_exactly(value: object) -> None:
    assert snapshot.bounded_repr(value, 100) == (repr(value), False)


def test_size_estimates_name_their_method() -> None:
    array = np.zeros((100, 4))
    frame = pd.DataFrame({"a": range(50), "b": ["x"] * 50})
    assert snapshot.estimate_size(array) == (3200, "nbytes")
    assert snapshot.estimate_size(frame) == (int(frame.memory_usage(index=True, deep=False).sum()), "memory_usage")
    assert snapshot.estimate_size([1, 2, 3])[1] == "getsizeof+items"
    assert snapshot.estimate_size("text")[1] == "getsizeof"


def test_describe_reports_type_shape_len_and_truncation() -> None:
    frame = pd.DataFrame({"a": range(50)})
    record = snapshot.describe("frame", frame, 20, 1.0)
    assert record["type"] == f"{pd.DataFrame.__module__}.DataFrame"
    assert record["shape"] == [50, 1] and record["len"] == 50
    assert record["repr_truncated"] and len(record["repr"]) == 20 and not record["repr_failed"]
    assert snapshot.describe("n", 7, 20, 1.0)["len"] is None


class RaisingRepr:
    def __repr__(self) -> str:
        raise ValueError("boom")


class HangingRepr:
    def __repr__(self) -> str:
        while True:
            try:
                pass
            except Exception:  # a user's blanket except must not swallow the time limit
                pass


class BrokenShape:
    @property
    def shape(self) -> tuple[int, ...]:
        raise RuntimeError("no shape")

    def __repr__(self) -> str:
        return "BrokenShape()"


def test_raising_repr_gives_a_placeholder() -> None:
    record = snapshot.describe("r", RaisingRepr(), 50, 1.0)
    assert record["repr_failed"] and "ValueError" in record["repr"]


def test_hanging_repr_is_bounded_and_user_alarm_restored() -> None:
    fired: list[int] = []
    previous = signal.signal(signal.SIGALRM, lambda signum, frame: fired.append(signum))
    signal.setitimer(signal.ITIMER_REAL, 100.0)
    try:
        record = snapshot.describe("h", HangingRepr(), 50, 0.2)
        remaining, _ = signal.getitimer(signal.ITIMER_REAL)
        handler = signal.getsignal(signal.SIGALRM)
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    assert record["repr_failed"] and "timed out" in record["repr"]
    assert 90 < remaining <= 100 and handler is not snapshot._raise_timeout and not fired


def test_failing_shape_leaves_the_rest_of_the_record() -> None:
    record = snapshot.describe("s", BrokenShape(), 50, 1.0)
    assert record["shape"] is None and record["repr"] == "BrokenShape()" and not record["repr_failed"]


def test_user_variables_excludes_private_hidden_and_modules() -> None:
    hidden_in: list[str] = []
    hidden = {"In": hidden_in, "Out": {}, "exit": object()}
    namespace = {
        "In": hidden_in,  # IPython's own, untouched
        "Out": {"rebound": True},  # the user rebound it: a user variable now
        "exit": hidden["exit"],
        "_private": 1,
        "np": np,
        "value": 3,
    }
    names = [name for name, _ in snapshot.user_variables(namespace, hidden)]
    assert names == ["Out", "value"]


class _KeyThatRecords(str):
    """A key no code names (a str subclass) in the hash slot of ``b``, equal to nothing: a lookup of ``b`` in the
    namespace would compare it with ``b`` and run its ``__eq__``, which records the call."""

    compared: ClassVar[list[object]] = []

    def __hash__(self) -> int:
        return hash("b")

    def __eq__(self, other: object) -> bool:
        _KeyThatRecords.compared.append(other)
        return False


@pytest.mark.parametrize("other_key", [None, 1], ids=["string keys", "an int key too"])
def test_user_variables_among_a_long_history_run_no_code_of_a_key(other_key: int | None) -> None:
    hidden = {"In": [], "exit": object()}
    namespace: dict[Any, Any] = {_KeyThatRecords("shadow"): "first in b's slot"}
    namespace.update({"In": hidden["In"], "exit": hidden["exit"], "np": np, "b": 2, "a": 1})
    for number in range(1, 501):  # what IPython binds per cell: its input and its result
        namespace[f"_i{number}"], namespace[f"_{number}"] = "1 + 1", 2
    if other_key is not None:
        namespace[other_key] = "a key that is not a string"
    _KeyThatRecords.compared.clear()
    assert namespace.get("b") == 2 and _KeyThatRecords.compared == ["b"]  # what a lookup would run
    _KeyThatRecords.compared.clear()
    assert snapshot.user_variables(namespace, hidden) == [("a", 1), ("b", 2)]
    assert _KeyThatRecords.compared == []


def test_strings_are_cleaned_of_surrogates() -> None:
    assert snapshot.clean_text("a\udcffb").encode("utf-8") == b"a?b"


def test_snapshot_in_a_kernel_shows_only_user_variables(kernel: Recorder) -> None:
    cells = [
        "import os\nimport numpy as np\nfrom collections import OrderedDict",
        "counts = OrderedDict(a=1)\n_hidden = 5\n__dunder = 6\ndef helper():\n    return 1",
        "arr = np.arange(6).reshape(2, 3)\narr",
    ]
    steps = [kernel.run_cell(code, f"c{i}") for i, code in enumerate(cells)]
    runtime = {variable.name: variable for variable in steps[-1].runtime}
    assert sorted(runtime) == ["OrderedDict", "arr", "counts", "helper"]
    assert runtime["arr"].shape == [2, 3] and runtime["arr"].size_method == "nbytes"
    assert runtime["arr"].type == "numpy.ndarray" and runtime["counts"].len == 1
    assert runtime["helper"].type == "function"


def test_snapshot_leaves_history_and_results_untouched(kernel: Recorder) -> None:
    assert kernel.run_cell("41 + 1", "a").output == "42"
    # `_` is still the previous cell's result, not anything the snapshot evaluated
    assert kernel.run_cell("_ + 1", "b").output == "43"
    # every recorded cell so far took one history entry; snapshots took none
    number = kernel.next_step + 1
    step = kernel.run_cell("len(In) - 1, max(Out)", "c")
    assert step.output == f"({number}, {number - 1})"


def test_rebinding_an_ipython_name_makes_it_a_user_variable(kernel: Recorder) -> None:
    names = [variable.name for variable in kernel.run_cell("In = 'mine'", "d").runtime]
    assert "In" in names and "Out" not in names and not [name for name in names if name.startswith("_")]


def test_the_cells_output_reaches_the_socket_before_the_snapshot_runs_user_code(kernel: Recorder) -> None:
    # ipykernel's own flush returns before its IO thread sends: a send made slow shows which one waited for it.
    # Before the flush, the IO thread waits until the flush and its wake-up are both queued (else the thread may
    # send before the wake-up is queued, and the flush then waits for the send), and the send is held until the
    # cell has looked (not slept through: a loaded machine once looked after a 0.3 s sleep had ended); no flush
    # of ipykernel's timer (0.2 s after a write) runs meanwhile.
    cell = (
        "import sys, threading, time\n"
        "thread, sent, looked, hold = sys.stdout.pub_thread, [], threading.Event(), [0.3]\n"
        "interval, sys.stdout.flush_interval = sys.stdout.flush_interval, 600.0\n"
        "def slow_send(*args, _send=thread._really_send, **kwargs):\n"
        "    looked.wait(hold[0])\n"
        "    sent.append(1)\n"
        "    return _send(*args, **kwargs)\n"
        "def queued(count, until):\n"
        "    while len(thread._events) < count and time.monotonic() < until:\n"
        "        time.sleep(0.001)\n"
        "thread._really_send = slow_send\n"
        "try:\n"
        "    print('made')\n"
        "    sys.modules['_themisto_snapshot'].hand_over(sys.stdout)\n"
        "    handed, sent[:], hold[0] = bool(sent), [], 30.0\n"
        "    print('again')\n"
        "    thread.schedule(lambda: queued(2, time.monotonic() + 10))\n"
        "    sys.stdout.flush()\n"
        "    flushed = bool(sent)\n"
        "finally:\n"
        "    looked.set()\n"
        "    del thread._really_send\n"
        "    sys.stdout.flush_interval = interval\n"
        "handed, flushed"
    )
    assert kernel.run_cell(cell, "h").output == "made\nagain\n(True, False)"
