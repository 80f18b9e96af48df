"""The records that cross the kernel boundary: built from the options, decoded strictly, the same on both sides."""

from __future__ import annotations

import dataclasses

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
    request = wire.ForkRequest(["/s/0.py"], 5.0, 100, "/w", "/s", True, wire.SnapshotRequest(10, 1.0, 3, 4, "/a"))
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


def test_every_result_a_child_can_send_is_a_child_result() -> None:
    # the kernel side builds its results as plain dicts (it cannot import the host's wire module)
    made = [
        fork._frame("fault", "OSError", "x"),
        fork._outcome([], True, 0, 1.0),
        fork._outcome([], False, 9, 1.0),
        fork._outcome(["not json"], False, 0, 1.0),
    ]
    for result in made:
        assert wire.ChildResult.from_dict(result).status in ("fault", "timeout", "exited")
    with pytest.raises(wire.WireError, match="snapshot"):
        wire.ChildResult.from_dict({**made[0], "snapshot": 3})
