"""An output from an IOPub message: nbformat's own, checked against the same schema (by fastjsonschema)."""

from __future__ import annotations

import json
from typing import Any

import nbformat
import pytest

from themisto.kernel.outputs import output_from_msg, scrub

# Messages nbformat accepts, and messages it refuses for a missing field (KeyError) or a wrong one (its schema).
MESSAGES: list[tuple[str, dict[str, Any]]] = [
    ("stream", {"name": "stdout", "text": "hello\n"}),
    ("stream", {"name": "stderr", "text": "bad \udcff byte"}),
    ("execute_result", {"metadata": {}, "data": {"text/plain": "42"}, "execution_count": 3}),
    ("execute_result", {"metadata": {}, "data": {"text/plain": "42"}, "execution_count": None, "extra": 1}),
    ("execute_result", {"metadata": {}, "data": {"application/json": {"a": [1, (2, 3)]}}, "execution_count": 1}),
    ("display_data", {"metadata": {"image/png": {"width": 3}}, "data": {"text/plain": "<Figure>", "image/png": "AA"}}),
    ("display_data", {"metadata": {}, "data": {"text/plain": ["a\n", "b"]}, "transient": {"display_id": "x"}}),
    ("error", {"ename": "KeyError", "evalue": "'x'", "traceback": ["a", "b"]}),
    # refused
    ("stream", {"name": "stdout", "text": 5}),
    ("stream", {"name": "stdout"}),
    ("execute_result", {"metadata": {}, "data": {"text/plain": 42}, "execution_count": 3}),
    ("execute_result", {"metadata": {}, "data": {"text/plain": "42"}, "execution_count": "3"}),
    ("execute_result", {"metadata": {}, "data": {"text/plain": "42"}}),
    ("display_data", {"metadata": [], "data": {}}),
    ("display_data", {"metadata": {}, "data": "x"}),
    ("error", {"ename": "KeyError", "evalue": "'x'"}),
    ("error", {"ename": "KeyError", "evalue": None, "traceback": []}),
]


def _nbformat(kind: str, content: dict[str, Any]) -> Any:
    return scrub(dict(nbformat.v4.output_from_msg({"header": {"msg_type": kind}, "content": content})))


def _outcome(make: Any, kind: str, content: dict[str, Any]) -> tuple[str, str]:
    """What ``make`` gives: the output's JSON, byte for byte (a build's trajectories keep their keys' order), or
    the type of what it raised."""
    try:
        return "output", json.dumps(make(kind, content))
    except Exception as exc:
        return "raised", type(exc).__name__


@pytest.mark.parametrize(("kind", "content"), MESSAGES)
def test_an_output_is_nbformats_own_and_a_malformed_one_raises_what_nbformat_raises(
    kind: str, content: dict[str, Any]
) -> None:
    ours = _outcome(output_from_msg, kind, content)
    assert ours == _outcome(_nbformat, kind, content)
    refused = MESSAGES.index((kind, content)) >= 8
    assert ours[0] == ("raised" if refused else "output")


def test_an_output_does_not_share_the_messages_containers() -> None:
    content = {"metadata": {"m": {"k": 1}}, "data": {"application/json": {"a": [1]}}, "execution_count": 1}
    output = output_from_msg("execute_result", content)
    output["data"]["application/json"]["a"].append(2)
    output["metadata"]["m"]["k"] = 2
    assert content == {"metadata": {"m": {"k": 1}}, "data": {"application/json": {"a": [1]}}, "execution_count": 1}
