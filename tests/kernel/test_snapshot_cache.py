"""Snapshots cost what changed: the description cache, bounded size estimates, the piggy-backed snapshot.

One kernel for the module; the rest runs in-process.
"""

from __future__ import annotations

import collections
import gc
import json
import sys
import weakref
from dataclasses import replace

import numpy as np
import pandas as pd
import pytest

from themisto.kernel import inject
from themisto.kernel.inside import snapshot, wire
from themisto.kernel.options import KernelOptions
from themisto.kernel.outputs import OutputCollector
from themisto.kernel.recorder import Recorder
from themisto.kernel.snapshots import Snapshot, SnapshotReader
from themisto.kernel.transport import Execution
from themisto.recording.options import RecordOptions
from themisto.trajectory import state_hash

KERNEL_OPTIONS = RecordOptions(timeout=30, repr_timeout=5)  # the shared `kernel` fixture's (tests/conftest.py)


class Probe:
    """A user object whose ``__repr__`` counts its calls."""

    calls = 0

    def __init__(self, tag: str) -> None:
        self.tag = tag

    def __repr__(self) -> str:
        Probe.calls += 1
        return f"Probe({self.tag})"


def _describe(cache: snapshot.DescriptionCache, **variables: object) -> dict[str, dict]:
    return {record["name"]: record for record in cache.describe_all(sorted(variables.items()), 200, 1.0)}


def test_unchanged_objects_reuse_their_description_and_mutated_ones_are_described_again() -> None:
    cache = snapshot.DescriptionCache()
    probe, items = Probe("a"), [1, 2]
    frame = pd.DataFrame({"a": range(100_000)})
    array = np.zeros(100_000)
    Probe.calls = 0
    first = _describe(cache, probe=probe, items=items, frame=frame, array=array)
    second = _describe(cache, probe=probe, items=items, frame=frame, array=array)
    assert Probe.calls == 1 and cache.described == 4
    assert all(second[name] is first[name] for name in first)

    probe.tag = "b"
    items.append(3)
    frame["b"] = 1
    array[0] = 7.0
    third = _describe(cache, probe=probe, items=items, frame=frame, array=array)
    assert Probe.calls == 2 and cache.described == 8
    assert third["probe"]["repr"] == "Probe(b)" and third["items"]["repr"] == "[1, 2, 3]"
    assert third["frame"]["shape"] == [100_000, 2] and third["array"]["repr"].startswith("array([7.,")


@pytest.mark.parametrize(
    "mutate",
    [
        lambda v: v["frame"].loc.__setitem__((0, "a"), -1),  # a value written in place, numpy-backed column
        lambda v: v["frame"].loc.__setitem__((0, "s"), "changed"),  # an Arrow/object string column
        lambda v: v["mapping"].__setitem__("k0", "changed"),  # a dict value rebound
        lambda v: v["nested"][0].append(9),  # a list grown one level down
        lambda v: v["mapping"].pop("k1"),  # a dict shrunk
        lambda v: setattr(v["frame"], "columns", ["renamed", "s"]),  # a column relabelled
        lambda v: setattr(v["series"], "name", "renamed"),  # a series renamed
        lambda v: setattr(v["series"], "index", [7, 8, 9]),  # a series relabelled
        lambda v: v["strided"].base.__setitem__(2, -1),  # a write through the base of a strided view
    ],
)
def test_in_place_mutations_the_fingerprint_sees(mutate) -> None:
    values = {
        "frame": pd.DataFrame({"a": range(10), "s": [f"r{i}" for i in range(10)]}),
        "mapping": {f"k{i}": i for i in range(5)},
        "nested": [[1], [2]],
        "series": pd.Series([1, 2, 3], index=[2, 0, 1], name="n"),
        "strided": np.arange(10.0)[::2],
    }
    keys = {name: snapshot.fingerprint(value) for name, value in values.items()}
    assert keys == {name: snapshot.fingerprint(value) for name, value in values.items()}  # stable when unchanged
    mutate(values)
    assert keys != {name: snapshot.fingerprint(value) for name, value in values.items()}


def test_a_rebound_unsampled_slot_of_a_long_list_is_missed_as_documented_and_a_sampled_one_is_seen() -> None:
    # docs/performance.md: the fingerprint samples FINGERPRINT_ITEMS evenly spaced items (and the last);
    # a slot between two samples rebound to an object of the same kind keeps the old description
    cache = snapshot.DescriptionCache()
    items = list(range(1000))
    step = -(-len(items) // snapshot.FINGERPRINT_ITEMS)  # the sample's spacing
    assert step > 1
    first = _describe(cache, items=items)["items"]
    items[1] = -1  # between the samples 0 and step
    missed = _describe(cache, items=items)["items"]
    assert missed is first and cache.described == 1 and missed["repr"].startswith("[0, 1, 2")
    items[step] = -1  # a sampled slot
    seen = _describe(cache, items=items)["items"]
    assert cache.described == 2 and seen["repr"].startswith("[0, -1, 2")


def test_an_axis_renamed_in_place_is_missed_as_documented_and_a_new_axis_is_seen() -> None:
    # docs/performance.md: a pandas object's axes are fingerprinted by identity (an Index allows no item
    # assignment, so new labels are a new Index), which does not see the name an Index is given in place
    cache = snapshot.DescriptionCache()
    frame = pd.DataFrame({"a": range(3)})
    first = _describe(cache, frame=frame)["frame"]
    frame.index.name = "row"  # the same Index object, renamed
    missed = _describe(cache, frame=frame)["frame"]
    assert missed is first and "row" not in (missed["description"] or "")
    frame.index = pd.Index([5, 6, 7], name="row")  # a new Index
    seen = _describe(cache, frame=frame)["frame"]
    assert cache.described == 2 and "row" in seen["description"] and "5 to 7" in seen["description"]


class HangingAttributes:
    """A user object whose ``__dict__`` never answers: its fingerprint runs out the time limit."""

    @property
    def __dict__(self) -> dict:  # type: ignore[override]
        while True:
            pass

    def __repr__(self) -> str:
        return "HangingAttributes()"


def test_a_fingerprint_that_hangs_is_cut_by_the_shared_limit_and_the_objects_after_it_keep_theirs() -> None:
    cache = snapshot.DescriptionCache()
    variables = sorted({"a_probe": Probe("a"), "b_hangs": HangingAttributes(), "c_probe": Probe("c")}.items())
    for _ in range(2):
        records = cache.describe_all(variables, 200, 0.2)
    assert [record["repr"] for record in records] == ["Probe(a)", "HangingAttributes()", "Probe(c)"]
    # the probes were described once each and then reused; the hanging object has no key, so again each time
    assert cache.described == 4 and cache.reused == {"a_probe", "c_probe"}


class Plain:
    """A user class whose objects' ``__dict__`` is read by the C descriptor alone."""

    def __init__(self) -> None:
        self.x = 1


class Traced:
    """A user class that traces every attribute read of its objects into ``EVENTS``."""

    def __init__(self) -> None:
        self.x = 1

    def __getattribute__(self, name: str) -> object:
        EVENTS.append(f"read {name}")
        return object.__getattribute__(self, name)


class PropertyDict:
    """A user class whose ``__dict__`` is a property: reading it runs the property."""

    @property
    def __dict__(self) -> dict:  # type: ignore[override]
        EVENTS.append("read __dict__")
        return {"x": 1}


class SlotsWithGetattr:
    """A user class with no ``__dict__``: reading one falls into its ``__getattr__``."""

    __slots__ = ("x",)

    def __getattr__(self, name: str) -> object:
        EVENTS.append(f"getattr {name}")
        raise AttributeError(name)


EVENTS: list[str] = []


def _describe_traced(cache: snapshot.DescriptionCache, **variables: object) -> None:
    """Describe ``variables``, tracing into ``EVENTS`` each word that user code may run next."""
    cache.describe_all(sorted(variables.items()), 200, 1.0, lambda: EVENTS.append("announced"))


@pytest.mark.parametrize("kind", [Traced, PropertyDict, SlotsWithGetattr])
def test_the_snapshot_says_it_may_run_user_code_before_a_fingerprint_runs_any(kind: type) -> None:
    cache, value = snapshot.DescriptionCache(), kind()
    _describe_traced(cache, value=value, plain=Plain(), items=[1, 2])
    EVENTS.clear()
    _describe_traced(cache, value=value)  # described: unchanged by no fingerprint it can take without user code
    assert EVENTS[0] == "announced" and len(EVENTS) > 1


def test_unchanged_objects_whose_attributes_read_plainly_need_no_word_until_their_class_changes() -> None:
    cache = snapshot.DescriptionCache()
    EVENTS.clear()

    class Local(Plain):
        pass

    variables = {"plain": Plain(), "local": Local(), "items": [1, 2], "frame": pd.DataFrame({"a": [1]})}
    _describe_traced(cache, **variables)
    assert EVENTS and set(EVENTS) == {"announced"}  # each new object described: no code of theirs ran
    EVENTS.clear()
    _describe_traced(cache, **variables)
    assert EVENTS == [] and cache.reused == set(variables)
    # a class may be changed at any cell: the next snapshot sees it before it reads an attribute
    Local.__getattribute__ = Traced.__getattribute__  # type: ignore[method-assign,assignment]
    _describe_traced(cache, **variables)
    assert EVENTS[0] == "announced" and "read __dict__" in EVENTS and cache.reused == set(variables)


def test_rebinding_to_an_equal_new_object_and_changed_settings_describe_again() -> None:
    cache = snapshot.DescriptionCache()
    _describe(cache, items=[1, 2])
    _describe(cache, items=[1, 2])
    assert cache.described == 2
    cache.describe_all([("items", [1, 2])], 10, 1.0)  # another repr limit
    assert cache.described == 3


def test_the_cache_never_keeps_a_deleted_array_alive() -> None:
    cache = snapshot.DescriptionCache()
    array = np.zeros(1000)
    alive = weakref.ref(array)
    _describe(cache, array=array)
    del array
    gc.collect()
    assert alive() is None


def test_huge_objects_are_estimated_without_walking_them() -> None:
    items = list(range(1_000_000))
    size, method = snapshot.estimate_size(items)
    exact = sys.getsizeof(items) + sum(sys.getsizeof(item) for item in items)
    assert method == "getsizeof+sample" and abs(size - exact) / exact < 0.05
    record = snapshot.describe("huge", list(range(10_000_000)), 100, 1.0)
    assert record["len"] == 10_000_000 and record["repr_truncated"] and len(record["repr"]) == 100
    assert record["size_method"] == "getsizeof+sample"
    # 1 GiB of zeros: calloc leaves it untouched, so only what describe() reads gets paged in
    gigabyte = snapshot.describe("gigabyte", np.zeros(2**27), 100, 1.0)
    assert (gigabyte["size_bytes"], gigabyte["size_method"], gigabyte["shape"]) == (2**30, "nbytes", [2**27])
    assert snapshot.fingerprint(np.zeros(2**27)) is not None


@pytest.mark.parametrize(
    "value",
    [
        collections.deque([1, (2,)]),
        collections.deque([1], maxlen=3),
        collections.deque(),
        collections.defaultdict(list, {"a": [1]}),
        collections.defaultdict(None),
        collections.OrderedDict(a=1, b={"c": 2}),
        collections.OrderedDict(),
    ],
)
def test_collections_reprs_are_streamed_exactly(value: object) -> None:
    assert snapshot.bounded_repr(value, 1000) == (repr(value), False)


@pytest.mark.parametrize(
    "kind", [collections.deque, collections.OrderedDict, lambda items: collections.defaultdict(int, items)]
)
def test_huge_collections_reprs_are_cut_as_the_full_repr_would_be(kind) -> None:
    small = kind(zip(range(30), range(30)))
    huge = kind(zip(range(2_000_000), range(2_000_000)))
    text, truncated = snapshot.bounded_repr(huge, 60)
    assert truncated and text == repr(small)[:60]


def test_small_containers_count_every_item() -> None:
    mapping = {"a": "x" * 100}
    size, method = snapshot.estimate_size(mapping)
    assert method == "getsizeof+items"
    assert size == sys.getsizeof(mapping) + sys.getsizeof("a") + sys.getsizeof("x" * 100)


def test_a_kernel_describes_only_what_changed(kernel: Recorder) -> None:
    kernel.run_cell(
        "import pandas as pd\n"
        "class Probe:\n"
        "    calls = 0\n"
        "    def __repr__(self):\n"
        "        Probe.calls += 1\n"
        "        return f'Probe({Probe.calls})'\n"
        "probe = Probe()\nrows = [1, 2]\nframe = pd.DataFrame({'a': [1, 2]})",
        "setup",
    )
    for index in range(3):
        kernel.run_cell(f"unrelated = {index}", f"other{index}")
    step = kernel.run_cell("rows.append(3)\nframe['b'] = frame['a'] * 2\nprint(Probe.calls)", "mutate")
    runtime = {variable.name: variable for variable in step.runtime}
    assert step.output == "1"  # five snapshots so far, one repr of the unchanged probe
    assert runtime["probe"].repr == "Probe(1)"
    assert runtime["rows"].repr == "[1, 2, 3]" and runtime["rows"].len == 3
    assert runtime["frame"].shape == [2, 2] and "b" in runtime["frame"].repr


def test_a_cell_that_raises_still_gets_its_snapshot(kernel: Recorder) -> None:
    step = kernel.run_cell("before_error = 41\n1 / 0", "raises")
    assert step.error["ename"] == "ZeroDivisionError"
    assert [v.repr for v in step.runtime if v.name == "before_error"] == ["41"]


def test_what_a_repr_prints_stays_out_of_the_cell_and_its_time(kernel: Recorder) -> None:
    step = kernel.run_cell(
        "import time\n"
        "class Loud:\n"
        "    def __repr__(self):\n"
        "        print('LEAKED')\n"
        "        time.sleep(1.5)\n"
        "        return 'Loud()'\n"
        "loud = Loud()\nprint('cell output')",
        "loud",
    )
    assert step.output == "cell output" and [v.repr for v in step.runtime if v.name == "loud"] == ["Loud()"]
    # the 1.5 s spent describing `loud` is the snapshot's, not the cell's
    assert step.execution_time < 1.0


def _raw_snapshot(kernel: Recorder, known: int) -> dict:
    expression = inject.snapshot_expression(replace(kernel.snapshot_request(), known=known))
    execution = kernel.session.execute("", silent=True, timeout=30, user_expressions={"s": expression})
    text = execution.reply["content"]["user_expressions"]["s"]["data"]["text/plain"]
    wire.SnapshotResult.from_json(text)  # the kernel's answer is the record the host decodes, field for field
    return json.loads(text)


def test_an_unchanged_namespace_is_sent_with_no_name_a_changed_one_by_names_and_both_rebuilt_in_full(
    kernel: Recorder,
) -> None:
    kernel.run_cell("kept = list(range(5))", "kept")
    full = kernel.run_cell("changed = 1", "full").runtime
    delta = _raw_snapshot(kernel, kernel.snapshot_request().known)
    assert delta["unchanged"] and delta["variables"] == []
    # a recorder that missed a snapshot (a stale generation) gets every description in full
    stale = _raw_snapshot(kernel, delta["generation"] - 1)
    assert not stale["unchanged"] and {"kept", "changed"} <= {record["name"] for record in stale["variables"]}
    assert all("repr" in record for record in stale["variables"])
    # one value changed: the others by name alone
    kernel.session.execute("changed = 3", silent=True, timeout=30)
    partial = _raw_snapshot(kernel, stale["generation"])
    by_name = {record["name"]: record for record in partial["variables"]}
    assert not partial["unchanged"] and by_name.pop("changed")["repr"] == "3"
    assert all(record.keys() == {"name"} for record in by_name.values()) and "kept" in by_name
    # so is a name gone, though every remaining value is unchanged
    kernel.session.execute("del changed", silent=True, timeout=30)
    gone = _raw_snapshot(kernel, partial["generation"])
    assert not gone["unchanged"] and list(by_name.values()) == gone["variables"]
    step = kernel.run_cell("changed = 2", "again")
    by_name = {variable.name: variable for variable in step.runtime}
    assert by_name["changed"].repr == "2" and by_name["kept"] == {v.name: v for v in full}["kept"]
    same = kernel.run_cell("pass", "same")
    assert same.runtime == step.runtime and same.state_hash == step.state_hash and same.snapshot_error is None


def test_each_steps_state_hash_is_that_of_its_variables_whether_reused_or_not(kernel: Recorder) -> None:
    # the reader hashes again only records it did not hash last: every step's hash still matches its variables
    cells = ["a, b = [1], 2", "pass", "a.append(3)", "pass", "del b", "b = 2.5", "pass", "b = 5 / 2", "a.pop()"]
    steps = [kernel.run_cell(code, f"h{number}") for number, code in enumerate(cells)]
    assert all(step.state_hash == state_hash(step.runtime) for step in steps)
    hashes = [step.state_hash for step in steps]
    assert hashes[0] == hashes[1] != hashes[2] == hashes[3] != hashes[4] != hashes[5] == hashes[6] != hashes[8]
    # an equal value in a new object: described again, a new record, the same hash
    named = [{variable.name: variable for variable in step.runtime} for step in steps[6:8]]
    assert hashes[7] == hashes[6] and named[1]["b"] is not named[0]["b"] and named[1]["b"] == named[0]["b"]


def test_an_unchanged_snapshot_is_taken_only_after_a_known_one_and_with_no_variable() -> None:
    reader = SnapshotReader("forged", KernelOptions())

    def read(variables: list, step: int) -> Snapshot | None:
        text = wire.SnapshotResult(4, variables, 0.0, 0, True).to_json()
        reply = {"content": {"user_expressions": {"snapshot": {"status": "ok", "data": {"text/plain": text}}}}}
        return reader.read(Execution(collector=OutputCollector(100), reply=reply), step)

    forged = read([], 0)
    assert forged is not None and forged.variables == [] and "no snapshot is known" in (forged.error or "")
    listed = read([{"name": "x"}], 1)
    assert listed is not None and "lists variables" in (listed.error or "")
