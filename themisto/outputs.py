"""Plain-text rendering of nbformat outputs, shared by the recorder and the source readers."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


def render_outputs(outputs: Iterable[Any]) -> str:
    """Plain text of nbformat outputs: streams verbatim, ``text/plain`` of results and
    displays, ``EName: evalue`` for errors, ``<mime/type>`` for rich data without text;
    each non-stream output on its own line, trailing newlines dropped."""
    parts: list[str] = []
    for output in outputs:
        if not isinstance(output, Mapping):
            continue
        kind = output.get("output_type")
        if kind == "stream":
            parts.append(joined_text(output.get("text")))
            continue
        if kind in ("execute_result", "display_data"):
            text = _rich_text(output.get("data"))
        elif kind == "error":
            ename, evalue = joined_text(output.get("ename")), joined_text(output.get("evalue"))
            text = f"{ename}: {evalue}" if evalue else ename
        else:
            continue
        if parts and not parts[-1].endswith("\n"):
            parts.append("\n")
        parts.append(text + "\n")
    return "".join(parts).rstrip("\n")


def joined_text(value: Any) -> str:
    """nbformat multiline strings may be stored as lists of lines."""
    if isinstance(value, list):
        return "".join(str(item) for item in value)
    return "" if value is None else str(value)


def _rich_text(data: Any) -> str:
    if not isinstance(data, Mapping) or not data:
        return ""
    if "text/plain" in data:
        return joined_text(data["text/plain"])
    images = [mime for mime in data if str(mime).startswith("image/")]
    return f"<{images[0] if images else next(iter(data))}>"
