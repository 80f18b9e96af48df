"""Render an example's history and runtime state into the prompts a model sees.

:func:`render_pair` makes both prompts of a pair at once::

    with runtime    = head + runtime_block + question
    without runtime = head + question

so the two differ exactly by the runtime block, which is also returned on its
own (the dataset's ``runtime_text``). The block is never empty: a session with
no variables says so, so the runtime condition always visibly carries the
snapshot.

Runtime formats (each bounded by ``max_runtime_chars`` for the whole block):

- ``text``: one entry per variable, ``name: type, size, shape/len`` then its
  repr, indented.
- ``json``: an object ``{"variables": [...], "not_shown": k}`` with one
  variable object per line (keys sorted).
- ``referenced``: the ``text`` format restricted to the variables the target
  cell's code refers to (output prediction) or, for next-cell prediction, the
  code of the last ``referenced_window`` history cells. Names come from the
  ``ast`` of the code, IPython magics and shell lines removed; code that still
  does not parse falls back to a regex over identifiers.

Truncation is deterministic: each repr is cut to ``prompt_repr_chars``, then
whole variables are kept in snapshot order while the block fits the budget and
the rest are counted in a closing line (``not_shown`` in JSON).
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from themisto.building.tasks import Example, HistoryCell
from themisto.exceptions import InputError, OptionError
from themisto.trajectory import Variable

RUNTIME_FORMATS = ("text", "json", "referenced")
# Ends a repr cut for the prompt (a short mark, as reprs are short). Not the recorder's
# OUTPUT_TRUNCATION_MARKER (themisto.recording.outputs): that one ends a recorded output, is part of the
# target a model predicts, and names the full length.
PROMPT_REPR_TRUNCATION_MARK = "…[truncated]"
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# IPython lines that are not Python: magics (%, %%), shell escapes (!) and help (?name)
_IPYTHON_LINE = re.compile(r"^\s*(%|!|\?)")

_INTRO = (
    "Below is the execution history of a Jupyter notebook session: the code cells in the order "
    "they were executed, each followed by its output.\n\n"
)
_QUESTIONS = {
    "output_prediction": "Predict the output of this code cell. Answer with the output only.\n",
    "next_cell_prediction": ("Predict the code of the next cell that will be executed. Answer with the code only.\n"),
}


@dataclass(frozen=True)
class RenderOptions:
    """How the runtime block is rendered and bounded."""

    runtime_format: str = "text"  # one of RUNTIME_FORMATS
    max_runtime_chars: int = 2000  # budget of the whole runtime block, header included
    # each variable's repr is cut to this many characters in the prompt (the recording cut it already,
    # at RecordOptions.max_repr_chars: another cap, under another name)
    prompt_repr_chars: int = 300
    referenced_window: int = 3  # next-cell "referenced": names used in this many latest history cells

    def __post_init__(self) -> None:
        if self.runtime_format not in RUNTIME_FORMATS:
            raise InputError(
                f"unknown runtime format {self.runtime_format!r}; expected one of {', '.join(RUNTIME_FORMATS)}"
            )
        if self.max_runtime_chars < 200:
            raise OptionError(
                "the runtime budget {max_runtime_chars} must be at least 200 characters, got {got}",
                got=self.max_runtime_chars,
            )
        if self.prompt_repr_chars < len(PROMPT_REPR_TRUNCATION_MARK):
            raise OptionError("{prompt_repr_chars} must be at least {least}", least=len(PROMPT_REPR_TRUNCATION_MARK))


@dataclass(frozen=True)
class PromptPair:
    """The two prompts of an example and the block that tells them apart."""

    with_runtime: str
    without_runtime: str
    runtime_text: str


def render_pair(example: Example, options: RenderOptions) -> PromptPair:
    """Render both prompts of ``example``; they differ exactly by ``runtime_text``."""
    return render_pairs([example], options)[0]


def render_pairs(examples: Sequence[Example], options: RenderOptions) -> list[PromptPair]:
    """Render the prompt pairs of examples of one step (one per task).

    They share the history and the runtime state, so the history and, unless the
    format is ``referenced`` (which depends on each task's code), the runtime block
    are rendered once for all of them.
    """
    first = examples[0]
    if any(e.history != first.history or e.runtime != first.runtime for e in examples[1:]):
        raise ValueError("render_pairs needs examples of one step (the same history and runtime)")
    head = _INTRO + render_history(first.history)
    shared_runtime = None
    if options.runtime_format != "referenced":
        shared_runtime = render_runtime(first.runtime, options, [], memory=first.memory_bytes_before)
    pairs = []
    for example in examples:
        question = _QUESTIONS[example.task]
        if example.task == "output_prediction":
            question += fence(example.code, "python")
        runtime_text = shared_runtime
        if runtime_text is None:
            runtime_text = render_runtime(
                example.runtime,
                options,
                referenced_from=referencing_code(example, options),
                memory=example.memory_bytes_before,
            )
        pairs.append(PromptPair(head + runtime_text + question, head + question, runtime_text))
    return pairs


def referencing_code(example: Example, options: RenderOptions) -> list[str]:
    """The code whose names decide which variables ``referenced`` shows."""
    if example.task == "output_prediction":
        return [example.code]
    recent = example.history[-options.referenced_window :] if options.referenced_window else []
    return [cell.code for cell in recent]


def fence(text: str, lang: str = "") -> str:
    """A Markdown code block around ``text``, with a fence longer than any backtick run inside."""
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0)
    marks = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{marks}{lang}\n{body}{marks}\n"


def render_history(history: list[HistoryCell]) -> str:
    """The history part of a prompt: each cell's code and output, oldest first, or a note that there is none."""
    if not history:
        return "Previous code cells and their outputs: none (this is the first cell of the kernel session).\n\n"
    labels = _cell_labels(len(history))
    bodies = [_render_cell(cell.code, cell.output) for cell in history]
    return "Previous code cells and their outputs:\n\n" + "".join(
        [part for pair in zip(labels, bodies) for part in pair]
    )


def _cell_labels(count: int) -> list[str]:
    """``["Cell 1:\\n", ..., f"Cell {count}:\\n"]``, grown once and reused by every prompt."""
    while len(_CELL_LABELS) < count:
        _CELL_LABELS.append(f"Cell {len(_CELL_LABELS) + 1}:\n")
    return _CELL_LABELS[:count]


_CELL_LABELS: list[str] = []


# larger than any history window (8000 one-character cells fit the default budget): an LRU
# cache smaller than the window it cycles through would miss on every cell
@functools.lru_cache(maxsize=1 << 15)
def _render_cell(code: str, output: str) -> str:
    # cached: the history windows of consecutive steps share almost all their cells
    rendered_output = fence(output) if output else "(no output)\n"
    return f"{fence(code, 'python')}Output:\n{rendered_output}\n"


def referenced_names(code: str) -> set[str]:
    """Names a piece of notebook code refers to (loads, stores and attribute bases)."""
    python = "\n".join("" if _IPYTHON_LINE.match(line) else line for line in code.splitlines())
    try:
        tree = ast.parse(python)
    except (SyntaxError, ValueError):
        return set(_IDENTIFIER.findall(code))
    names: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            names.add(node.id)
        elif isinstance(node, (ast.Global, ast.Nonlocal)):
            names.update(node.names)
    return names


def render_runtime(
    variables: list[Variable], options: RenderOptions, referenced_from: list[str], memory: int | None = None
) -> str:
    """The runtime block in the chosen format, within ``options.max_runtime_chars``."""
    shown = variables
    scope = "user variables"
    if options.runtime_format == "referenced":
        names = set().union(*(referenced_names(code) for code in referenced_from)) if referenced_from else set()
        shown = [var for var in variables if var.name in names]
        scope = f"variables referenced by the code, out of {len(variables)} user variables"
    memory_note = f", kernel memory {memory} bytes" if memory is not None else ""
    header = f"Runtime state of the kernel before this cell ({len(shown)} {scope}{memory_note}):\n"
    if options.runtime_format == "json":
        entries = [_json_line(var, options.prompt_repr_chars) for var in shown]

        def render(kept: int) -> str:
            body = ",\n".join(entries[:kept]) + ("\n" if kept else "")
            return f'{header}{{"variables": [\n{body}], "not_shown": {len(entries) - kept}}}\n\n'

    else:
        entries = [_text_entry(var, options.prompt_repr_chars) for var in shown]

        def render(kept: int) -> str:
            omitted = len(entries) - kept
            listing = "".join(entries[:kept]) if entries else "(none)\n"
            return header + listing + (f"... {omitted} more variables not shown\n" if omitted else "") + "\n"

    return _largest_fitting(render, [len(entry) for entry in entries], options.max_runtime_chars, len(header))


def _largest_fitting(render: Callable[[int], str], sizes: list[int], budget: int, fixed: int) -> str:
    """``render(k)`` for the largest ``k`` whose text fits ``budget`` (``k = 0`` at worst)."""
    # render(k) is at least ``fixed`` plus the first k entries: start where those alone still fit
    start, used = 0, fixed
    for size in sizes:
        if used + size > budget:
            break
        used, start = used + size, start + 1
    for kept in range(start, 0, -1):
        text = render(kept)
        if len(text) <= budget:
            return text
    return render(0)


def _cut_repr(text: str, limit: int) -> str:
    return (
        text if len(text) <= limit else text[: limit - len(PROMPT_REPR_TRUNCATION_MARK)] + PROMPT_REPR_TRUNCATION_MARK
    )


def _text_entry(var: Variable, max_repr_chars: int) -> str:
    facts = [var.type, f"{var.size_bytes} bytes" if var.size_bytes is not None else "size unknown"]
    if var.shape is not None:
        facts.append("shape " + "x".join(str(d) for d in var.shape))
    if var.len is not None:
        facts.append(f"len {var.len}")
    value = _cut_repr(var.repr, max_repr_chars)
    if var.repr_truncated and not value.endswith(PROMPT_REPR_TRUNCATION_MARK):
        value += PROMPT_REPR_TRUNCATION_MARK
    indented = "\n".join("    " + line for line in value.splitlines() or [""])
    return f"- {var.name}: {', '.join(facts)}\n{indented}\n"


def _json_line(var: Variable, max_repr_chars: int) -> str:
    entry: dict[str, Any] = {"name": var.name, "type": var.type, "size_bytes": var.size_bytes}
    if var.shape is not None:
        entry["shape"] = var.shape
    if var.len is not None:
        entry["len"] = var.len
    cut = _cut_repr(var.repr, max_repr_chars)
    entry["repr"] = cut
    entry["repr_truncated"] = var.repr_truncated or cut != var.repr
    return "  " + json.dumps(entry, ensure_ascii=False, sort_keys=True)
