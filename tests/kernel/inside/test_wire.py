"""The records that cross the kernel boundary: built from the options, decoded strictly, the same on both sides."""

from __future__ import annotations

import dataclasses
import json

import pytest

from themisto.kernel.inside import fork, wire
from themisto.kernel.recorder import Recorder
from themisto.recording.options import RecordOptions


def test_a_snapshot_request_carries_every_option_the_snapshot_reads(tmp_path: object) -> None:
    options = RecordOptions(max_repr_chars=77, repr_timeout=0.25, max_variables=2)
    request = Recorder("t", tmp_path, options).snapshot_request()  # type: ignore[arg-type]
    assert request == wire.SnapshotRequest(77, 0.25, 2, known=-1, announce=None)
    assert wire.SnapshotRequest.from_json(request.to_json()) == request


def test_no_kernel_side_entry_point_has_a_default_of_its_own() -> None:
    import inspect

    from themisto.kernel.inside import snapshot

    for function in (snapshot.take, fork.run):
        assert all(p.default is inspect.Parameter.empty for p in inspect.signature(function).parameters.values())
    for record in (wire.SnapshotRequest, wire.ForkRequest, wire.ChildResult, wire.SnapshotResult):
        assert all(f.default is dataclasses.MISSING for f in dataclasses.fields(record))


def test_a_fork_request_round_trips_with_its_nested_snapshot_request() -> None:
    snapshot = wire.SnapshotRequest(10, 1.0, 3, 4, "/a")
    request = wire.ForkRequest(["/s/0.py"], 5.0, 100, "/w", "/s", True, snapshot, True, "/m", 1 << 20)
    assert wire.ForkRequest.from_json(request.to_json()) == request


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"max_repr_chars": 1, "repr_timeout": 1.0, "max_variables": 1, "known": 0}', "missing or unexpected"),
        ('{"max_repr_chars": 1, "repr_timeout": 1.0, "max_variables": 1, "known": 0, "announce": null, "x": 1}', "x"),
        ('{"max_repr_chars": "1", "repr_timeout": 1.0, "max_variables": 1, "known": 0, "announce": null}', "str, not"),
        (
            '{"max_repr_chars": true, "repr_timeout": 1.0, "max_variables": 1, "known": 0, "announce": null}',
            "bool, not",
        ),
        ('{"max_repr_chars": 1, "repr_timeout": 1.0, "max_variables": 1, "known": 0, "announce": 3}', "int, not"),
        ("[1]", "not an object"),
        ("{", "not JSON"),
    ],
)
def test_a_malformed_record_is_refused_naming_what_is_wrong(text: str, message: str) -> None:
    with pytest.raises(wire.WireError, match=message):
        wire.SnapshotRequest.from_json(text)


def test_every_result_a_child_can_send_is_a_child_result(monkeypatch: pytest.MonkeyPatch) -> None:
    # the kernel side builds its results as the wire's records, taken from the installed wire module (bind)
    monkeypatch.setitem(fork._BOUND, "wire", wire)
    ran = wire.ChildResult(
        "ok", "", "", 0.5, [{"msg_type": "stream", "content": {"name": "stdout", "text": "1"}}], 0, 0, None, None
    )
    made = [
        fork._frame("fault", "OSError", "x"),
        fork._outcome([], True, 0, 1.0, 0.0),
        fork._outcome([], False, 9, 1.0, 0.0),
        fork._outcome(["not json", fork.ACK_FRAME], False, 0, 1.0, 1.0),
        fork._outcome([ran.to_json(), fork.ACK_FRAME, '{"generation": 0}'], False, 0, 1.0, 1.0),
        fork._outcome([ran.to_json(), fork.ACK_FRAME], True, 0, 1.0, 1.0),
        # no answer to the acknowledgement: what wrote the outcome was not the runner, or ended itself
        fork._outcome([ran.to_json()], False, 0, 1.0, 1.0),
        fork._outcome([ran.to_json(), '{"generation": 0}'], False, 0, 1.0, 1.0),
    ]
    statuses = ["fault", "timeout", "exited", "fault", "ok", "ok", "exited", "fault"]
    assert [result.status for result in made] == statuses
    assert made[4].snapshot == '{"generation": 0}' and made[5].snapshot_error is not None
    # the cell's time is at most what the parent saw
    assert fork._outcome([ran.to_json(), fork.ACK_FRAME], False, 0, 1.0, 0.25).seconds == 0.25
    for folder in (None, [["a.csv", 0o100644, 3, 1_700_000_000_000_000_000]]):
        answer = wire.ForkResult(made, folder, 1_800_000_000.5).to_json()
        # what the host decodes, field for field
        assert wire.ForkResult.from_json(answer) == wire.ForkResult(made, folder, 1_800_000_000.5)
    with pytest.raises(wire.WireError, match="snapshot"):
        wire.ChildResult.from_dict({**json.loads(made[0].to_json()), "snapshot": 3})


def test_the_kernel_side_describes_a_variable_with_exactly_the_fields_of_the_hosts_record() -> None:
    # a field added to Variable (the host's record and the trajectory's schema) or to describe() alone fails here
    from themisto.kernel.inside import snapshot
    from themisto.trajectory import Variable

    described = snapshot.describe("frame", {"a": [1, 2]}, 100, 1.0)
    assert set(described) == {field.name for field in dataclasses.fields(Variable)}
    assert Variable(**described).name == "frame"


def test_every_record_the_kernel_sends_decodes_as_it_was_built() -> None:
    # the records of both directions round-trip through JSON with every field, nested ones included
    records: list[wire.Record] = [
        wire.SnapshotResult(3, [{"name": "x"}], 0.25, 1, False),
        wire.LaunchRequest(1, None, 5, wire.Sandbox(["/w"], False, [8888])),
        wire.LaunchRequest(1, 2**30, None, None),
    ]
    for record in records:
        assert type(record).from_json(record.to_json()) == record


@pytest.mark.parametrize(
    "text", ["abcdef\n\n", "abc\n\n\n\n", "abcdefgh", "ab\ncdef\n"], ids=["text-newlines", "newlines", "text", "mixed"]
)
def test_text_the_kernel_dropped_is_counted_as_if_the_recorder_had_dropped_it(text: str) -> None:
    # the recorder's budget takes what the kernel kept, then counts the rest (kernel/inside/channels.py)
    whole = wire.StreamBudget(3)
    whole.take(text)
    kernel = wire.StreamBudget(3)
    kept = kernel.take(text)
    recorder = wire.StreamBudget(3)
    recorder.take(kept)
    trailing = len(text) - len(text.rstrip("\n"))
    recorder.count_dropped(kernel.dropped_chars, min(trailing, kernel.dropped_chars))
    assert (recorder.dropped_chars, recorder.dropped_trailing_newlines) == (
        whole.dropped_chars,
        whole.dropped_trailing_newlines,
    )


def test_an_announcement_reads_back_and_a_torn_or_foreign_one_reads_as_none() -> None:
    old, new = wire.announcement("request-1", "1700000000.25"), wire.announcement("request-22", "done")
    assert len(old) == len(new) == wire.ANNOUNCEMENT_BYTES  # rewritten in place, no stale tail
    assert wire.announced(old) == ("request-1", "1700000000.25")
    assert wire.announced(new) == ("request-22", "done")
    # a read while the new record is half written over the old reads as no announcement, or as the old one
    # where the bytes written so far equal it: never as a mix of the two
    torn = [wire.announced(new[:cut] + old[cut:]) for cut in range(1, len(new))]
    assert set(torn) == {None, ("request-1", "1700000000.25"), ("request-22", "done")}
    assert torn.index(("request-22", "done")) >= len(new.rstrip())  # the new one only once written whole
    assert wire.announced(b"") is None
    assert wire.announced(b"request-1 done") is None  # the file a kernel of an older release wrote
    assert wire.announced(wire.announcement("x" * 5000, "done"))[0] == "x" * 200  # an id is cut, never overflows
