"""A cell's outputs: collected from the kernel within a budget, rendered as plain text, normalised.

The recorder collects iopub messages into nbformat outputs (:class:`OutputCollector`);
every stage that needs an output as text (the recorder, the log readers, the
Zenodo importer) renders it with :func:`render_outputs`; and every comparison
of two outputs (stability, ``exact_match_norm``, execution-checked scoring)
goes through :func:`normalize_output`.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable, Mapping
from pathlib import Path
from typing import Any

from themisto.kernel.inside import channels, snapshot, wire

# Ends a recorded output cut at KernelOptions.max_output_chars. It is part of the recorded output, so of
# the target a model predicts, and names the full length; the builder's PROMPT_REPR_TRUNCATION_MARK
# (themisto.building.prompts) is another mark, for reprs cut in a prompt.
OUTPUT_TRUNCATION_MARKER = "\n... [output truncated: {length} characters in all]"
MEMORY_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")  # also used to name memory addresses as a cause of instability
_MASKED_ADDRESS = "0x?"
_LINE_BREAK = re.compile(r"\r\n?")
# ipykernel names each cell's file after the kernel's pid (/tmp/ipykernel_<pid>/<hash>.py): warnings quote it.
KERNEL_PID = re.compile(r"(?<=ipykernel_)\d+")
_MASKED_PID = "<pid>"
# tempfile's random names (mkdtemp, NamedTemporaryFile): "tmp" and 8 characters of [a-z0-9_], as a path part.
TEMP_NAME = re.compile(r"(?<=/)tmp[a-z0-9_]{8}(?=[/'\"\s]|$)")
_MASKED_TEMP = "tmp<random>"


def render_outputs(outputs: Iterable[Any]) -> str:
    """Plain text of nbformat outputs: streams verbatim, ``<image/...>`` for results and
    displays that carry an image (a notebook shows the picture, not the ``text/plain``
    fallback such as ``<Figure size 640x480 with 1 Axes>``), else their ``text/plain``,
    else ``<mime/type>``; ``EName: evalue`` for errors; each non-stream output on its own
    line, trailing newlines dropped."""
    parts: list[str] = []
    for output in outputs:
        if not isinstance(output, Mapping):
            continue
        kind = output.get("output_type")
        if kind == "stream":
            parts.append(joined_text(output.get("text")))
            continue
        if kind in ("execute_result", "display_data"):
            text = _rich_text(output.get("data"), output.get("metadata"))
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


def _rich_text(data: Any, metadata: Any) -> str:
    if not isinstance(data, Mapping) or not data:
        return ""
    # an image the recorder dropped for its size (named in the metadata) was still shown
    dropped = metadata.get("themisto_dropped", {}) if isinstance(metadata, Mapping) else {}
    images = [mime for mime in (*data, *dropped) if str(mime).startswith("image/")]
    if images:
        return f"<{images[0]}>"
    if "text/plain" in data:
        return joined_text(data["text/plain"])
    return f"<{next(iter(data))}>"


def normalize_output(text: str) -> str:
    """Canonical form compared by :func:`exact_match_norm`.

    In order: ``\\r\\n`` and ``\\r`` become ``\\n``; trailing whitespace
    (``str.rstrip``) is stripped from every line; leading and trailing
    whitespace of the whole text is stripped; every memory address
    ``0x[0-9a-fA-F]+`` becomes ``0x?`` (object reprs such as
    ``<Foo object at 0x7f3a...>`` differ between runs), and the kernel pid of
    ``ipykernel_<pid>`` paths becomes ``<pid>``. Inner
    whitespace is kept: indentation and column alignment are part of an output.
    Hex literals in outputs (``hex(255)`` prints ``0xff``) are masked too.
    """
    text = _LINE_BREAK.sub("\n", text)
    text = "\n".join(line.rstrip() for line in text.split("\n")).strip()
    return KERNEL_PID.sub(_MASKED_PID, MEMORY_ADDRESS.sub(_MASKED_ADDRESS, text))


def mask_machine_text(text: str) -> str:
    """``text`` with what differs between machines and runs masked, and nothing else changed: the kernel pid
    of ``ipykernel_<pid>`` paths (``<pid>``), tempfile's random folder and file names (``tmp<random>``) and
    the memory addresses of object reprs (``at 0x?``, as the snapshot masks them). The builder shows outputs
    so (:class:`themisto.building.selection.SelectionOptions`, ``mask_machine_text``)."""
    text = KERNEL_PID.sub(_MASKED_PID, text)
    return snapshot.mask_addresses(TEMP_NAME.sub(_MASKED_TEMP, text))


def cap_text(text: str, max_chars: int, length: int | None = None) -> tuple[str, bool]:
    """Cut ``text`` to ``max_chars`` plus a marker naming the original ``length``."""
    length = len(text) if length is None else length
    if length <= max_chars:
        return text, False
    return text[:max_chars] + OUTPUT_TRUNCATION_MARKER.format(length=length), True


# The fields of each output type, in nbformat's order, from an IOPub message's content (nbformat.v4.output_from_msg).
_OUTPUT_FIELDS = {
    "execute_result": ("metadata", "data", "execution_count"),
    "stream": ("name", "text"),
    "display_data": ("metadata", "data"),
    "error": ("ename", "evalue", "traceback"),
}


def output_from_msg(kind: str, content: Mapping[str, Any]) -> dict[str, Any]:
    """The nbformat output of an IOPub message of type ``kind`` (one of :data:`_OUTPUT_FIELDS`) with ``content``,
    text UTF-8 cannot encode replaced (:func:`scrub`): ``nbformat.v4.output_from_msg``'s output, checked against
    the same schema, and its errors: KeyError for a missing field, ``NotebookValidationError`` for a wrong one.

    nbformat checks a single output with jsonschema (its fast validator serves whole notebooks only), which took
    most of the host's 0.4 ms for each forked cell's result (docs/performance.md); this checks it with
    fastjsonschema, compiled once for each type."""
    from fastjsonschema import JsonSchemaException
    from nbformat.validator import NotebookValidationError, ValidationError

    output: dict[str, Any] = scrub({"output_type": kind, **{field: content[field] for field in _OUTPUT_FIELDS[kind]}})
    try:
        _output_check(kind)(output)
    except JsonSchemaException as exc:
        raise NotebookValidationError(ValidationError(str(exc)), ref=kind) from exc  # type: ignore[no-untyped-call]
    return output


@functools.cache
def _output_check(kind: str) -> Callable[[Any], Any]:
    """fastjsonschema's check of the output type ``kind`` by nbformat's current v4 schema."""
    import fastjsonschema
    import nbformat.v4

    name = nbformat.v4.nbformat_schema[(nbformat.v4.nbformat, nbformat.v4.nbformat_minor)]
    schema = json.loads((Path(nbformat.v4.__file__).parent / name).read_text(encoding="utf-8"))
    return fastjsonschema.compile(
        {"$schema": schema["$schema"], "definitions": schema["definitions"], "$ref": f"#/definitions/{kind}"}
    )


class OutputCollector(wire.StreamBudget):
    """Accumulate a cell's iopub outputs as nbformat outputs within a character budget.

    Streams are merged like a notebook front end does; past the budget stream
    text is dropped (and counted, so the original length is known, as a forked
    child counts it: :class:`~themisto.kernel.inside.wire.StreamBudget`), and rich
    data values that do not fit are dropped and named in the output's metadata.
    """

    def __init__(self, budget: int) -> None:
        super().__init__(budget)
        self.outputs: list[dict[str, Any]] = []
        self._clear_pending = False

    def add(self, msg: dict[str, Any]) -> None:
        kind = msg["msg_type"]
        if kind == "clear_output":
            if msg["content"].get("wait"):
                self._clear_pending = True
            else:
                self.outputs.clear()
            return
        if kind not in ("stream", "display_data", "execute_result", "error"):
            return
        if self._clear_pending:
            self.outputs.clear()
            self._clear_pending = False
        output = output_from_msg(kind, msg["content"])
        if kind == "stream":
            self._add_stream(output)
            self._count_kernel_cut(msg["content"].get(channels.DROPPED_KEY))
        else:
            self.outputs.append(self._fit(output))

    def render(self, max_chars: int, outputs: list[dict[str, Any]] | None = None) -> tuple[str, bool, int]:
        """The plain text of ``outputs`` (default: those collected) cut to ``max_chars``, whether it was
        cut, and its full length, counting the stream text dropped past the budget."""
        full_text = render_outputs(self.outputs if outputs is None else outputs)
        length = len(full_text) + self.dropped_chars - self.dropped_trailing_newlines
        text, truncated = cap_text(full_text, max_chars, length)
        return text, truncated, length

    def _add_stream(self, output: dict[str, Any]) -> None:
        kept = self.take(output["text"])
        if not kept:
            return
        last = self.outputs[-1] if self.outputs else None
        if last is not None and last["output_type"] == "stream" and last["name"] == output["name"]:
            last["text"] += kept
        else:
            output["text"] = kept
            self.outputs.append(output)

    def _count_kernel_cut(self, dropped: Any) -> None:
        """Count the stream text the kernel dropped past the same budget (``[characters, trailing newlines]``,
        untrusted: anything else counts nothing)."""
        if not (isinstance(dropped, list) and len(dropped) == 2 and all(type(n) is int for n in dropped)):
            return
        chars, trailing = dropped
        if 0 < chars < snapshot.INT64_LIMIT // 2 and 0 <= trailing <= chars:
            self.count_dropped(chars, trailing)

    def _fit(self, output: dict[str, Any]) -> dict[str, Any]:
        data = output.get("data")
        if isinstance(data, dict):
            dropped = {}
            for mime in sorted(data, key=lambda m: m == "text/plain"):  # text/plain is kept last
                size = len(json.dumps(data[mime]))
                if size > self.room:
                    dropped[mime] = size
                    if mime == "text/plain":
                        self.dropped_chars += len(joined_text(data[mime]))
                    del data[mime]
                else:
                    self.room -= size
            if dropped:
                output.setdefault("metadata", {})["themisto_dropped"] = dropped
        elif output["output_type"] == "error":
            size = sum(len(line) for line in output.get("traceback", []))
            if size > self.room:
                output["traceback"] = []
            else:
                self.room -= size
        return output


def scrub(value: Any) -> Any:
    """Replace text UTF-8 cannot encode, recursively, so every step serialises."""
    if isinstance(value, str):
        return snapshot.clean_text(value)
    if isinstance(value, list):
        return [scrub(item) for item in value]
    if isinstance(value, dict):
        return {str(key): scrub(item) for key, item in value.items()}
    return value
