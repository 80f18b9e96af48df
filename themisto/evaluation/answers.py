"""Answer post-processing shared by every model: unwrap a fenced code block."""

from __future__ import annotations

import re

# An opening Markdown fence at the very start of an answer (backticks and an
# optional info string such as "python"), possibly after one short lead-in
# line ending in a colon ("Output:", "Here is the code:").
_OPENING_FENCE = re.compile(r"\s*(?:[^`\n]{0,80}:[ \t]*\n\s*)?(`{3,})[^`\n]*\n")


def unfence(answer: str) -> str:
    """The body of ``answer`` when it starts with a fenced code block, else ``answer`` unchanged.

    Chat models wrap outputs and code in ```` ```python ... ``` ```` even when
    asked for the bare text, and models imitating the prompt's history write
    ``Output:`` and a fence; one lead-in line ending in a colon is therefore
    allowed before the block. The body runs to the closing fence (a line of
    at least as many backticks), without the line break that ends the last
    body line (it belongs to the fence: ``"```\\n42\\n```"`` is ``"42"``, and a
    recorded output never ends in a line break), or, when generation stopped inside the block,
    to the end; text after the block is commentary and dropped.
    """
    opening = _OPENING_FENCE.match(answer)
    if opening is None:
        return answer
    body = answer[opening.end() :]
    closing = re.search(rf"^ *{opening.group(1)}`*[ \t]*$", body, flags=re.MULTILINE)
    if closing is None:
        return body
    return body[: closing.start()].removesuffix("\n").removesuffix("\r")
