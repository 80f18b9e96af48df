"""Render an example's history and runtime state into the prompts a model sees.

:func:`render_pair` makes both prompts of a pair at once::

    with runtime    = head + runtime_block + question
    without runtime = head + question

so the two differ exactly by the runtime block, which is also returned on its
own (the dataset's ``runtime_text``). A prompt ends at its question's last visible character: the line
break before the answer is :data:`~themisto.vocabulary.TARGET_DELIMITER`, which the tasks put before the
target, so no whitespace of the prompt merges with the target's own in a token. The block is never empty: a session with
no variables says so, so the runtime condition always visibly carries the
snapshot. Its header gives the number of variables, the kernel's memory and the
execution time of the previous cell (the paper's runtime fields: execution
time, memory and variables).

The history lists every earlier cell with its output, numbered ``Cell 1:``,
``Cell 2:``, ...; a kernel restart is a line of its own between them
(:data:`RESTART_LINE`), not a numbered cell.

Both prompts of a pair open with the kernel's environment (:func:`render_environment`: its Python and main
libraries' versions, from the trajectory's provenance), which the developer knew either way.

Runtime formats (each bounded by ``max_runtime_chars`` for the whole block):

- ``text``: one entry per variable, ``name: type, size, shape/len``, then its
  structured description (``Variable.description``: a frame's columns and
  dtypes and its index, ...) indented by two spaces, then its repr, indented by four.
- ``json``: an object ``{"variables": [...], "not_shown": k}`` with one
  variable object per line (keys sorted; the description under ``description``).
- ``referenced``: the ``text`` format restricted to the variables the target
  cell's code refers to (output prediction) or, for next-cell prediction, the
  code of the last ``referenced_window`` history cells. Names come from the
  ``ast`` of the code, IPython magics and shell lines removed; code that still
  does not parse falls back to a regex over identifiers.

Truncation is deterministic: each repr is cut to ``prompt_repr_chars``; then, when
the whole block does not fit the budget, variables are taken whole in order of
importance, each one that still fits, and the rest are counted in a closing
line (``not_shown`` in JSON). The variables the target cell reads always come
first, their descriptions whole; when even they do not fit, their reprs are cut shorter (halving, down to
:data:`MIN_REPR_CHARS`, then, for a variable that has a description, to nothing) until they do.
``descriptions=False`` renders the block without descriptions (type, size, shape/len and repr alone, for
ablations). Importance (:func:`rank_variables`): first the variables the target cell's code refers to
(output prediction; for next-cell prediction the code is unknown), then data (frames, arrays, containers,
scalars, other objects) before code (functions, methods, classes, modules: :func:`is_code_object`), each
the most recently changed first (by the step at which their description last changed), ties by snapshot
order; never by name alone. The kept variables are listed in snapshot order.

:func:`shown_variables` reads a block back: the variables it shows, as a model
sees them.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass
from typing import Any

from themisto.building.history import AUTHOR_PYTHON, Example, HistoryCell
from themisto.declaration import at_least, check_declared, option
from themisto.notebook_code import parse_cell
from themisto.trajectory import Variable
from themisto.vocabulary import OUTPUT_PREDICTION, RESTART_MARKER

RUNTIME_FORMATS = ("text", "json", "referenced")
# Ends a repr cut for the prompt (a short mark, as reprs are short). Not the recorder's
# OUTPUT_TRUNCATION_MARKER (themisto.kernel.outputs): that one ends a recorded output, is part of the
# target a model predicts, and names the full length.
PROMPT_REPR_TRUNCATION_MARK = "…[truncated]"
# The reprs of the variables a cell reads are cut down to this, at the shortest, so that all of them show.
MIN_REPR_CHARS = 40
# Room for what closes a block that leaves variables out: the count line, JSON's brackets and count.
_CLOSING_CHARS = 48
# The types of variables that hold code: shown after the data in a block that cannot show everything.
CODE_TYPES = frozenset(
    {"function", "builtin_function_or_method", "method", "type", "module", "functools.partial", "classmethod"}
)
_IDENTIFIER = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# IPython lines that are not Python: magics (%, %%), shell escapes (!) and help (?name)
_IPYTHON_LINE = re.compile(r"^\s*(%|!|\?)")

_INTRO = (
    "Below is the execution history of a Jupyter notebook session: the code cells in the order "
    "they were executed, each followed by its output.\n\n"
)
# How a kernel restart shows in the history: not a numbered cell, so no model takes it for code that ran.
RESTART_LINE = "--- The kernel was restarted here: variables defined by the cells above no longer exist. ---\n\n"
_RUNTIME_HEADER = "Runtime state of the kernel before this cell"
_QUESTIONS = {
    "output_prediction": "Predict the output of this code cell. Answer with the output only.\n",
    "next_cell_prediction": ("Predict the code of the next cell that will be executed. Answer with the code only.\n"),
}


@dataclass(frozen=True)
class RenderOptions:
    """How the runtime block is rendered and bounded."""

    # as in SelectionOptions: the card lists the options in field order, a switch's help says what its flag does
    runtime_format: str = option("text", "how the runtime block lists the variables", choices=RUNTIME_FORMATS)
    max_runtime_chars: int = option(2000, "budget of the whole runtime block, header included", check=at_least(200))
    # the recording cut each repr already, at RecordOptions.max_repr_chars: another cap, under another name
    prompt_repr_chars: int = option(
        300,
        "each variable's repr is cut to this many characters in the prompt; record's --max-repr-chars is the cap "
        "of the recording itself",
        check=at_least(len(PROMPT_REPR_TRUNCATION_MARK)),
    )
    # next-cell "referenced": names used in this many latest history cells (not a command-line option)
    referenced_window: int = 3
    descriptions: bool = option(
        True,
        "leave the variables' structured descriptions (columns and dtypes, index, ranges) out of the runtime "
        "block, so it shows type, size, shape/len and repr alone, as it did before the recording described "
        "variables: for ablations",
    )

    def __post_init__(self) -> None:
        check_declared(self)


@dataclass(frozen=True)
class PromptPair:
    """The two prompts of an example and the block that tells them apart."""

    with_runtime: str
    without_runtime: str
    runtime_text: str


def render_pair(example: Example, options: RenderOptions) -> PromptPair:
    """Render both prompts of ``example``; they differ exactly by ``runtime_text``."""
    return render_pairs([example], options)[0]


def render_pairs(examples: Sequence[Example], options: RenderOptions, head: str | None = None) -> list[PromptPair]:
    """Render the prompt pairs of examples of one step (one per task).

    They share the history and the runtime state, so the history is rendered once
    for all of them, and so is the runtime block unless the tasks need different
    ones: the ``referenced`` format depends on each task's code, and a block that
    must leave variables out keeps those the output-prediction cell reads first.
    ``head`` is :func:`prompt_head` of the examples, where the caller has it from
    rendering the same step with another state.
    """
    first = examples[0]
    if any(e.history != first.history or e.runtime != first.runtime for e in examples[1:]):
        raise ValueError("render_pairs needs examples of one step (the same history and runtime)")
    if any(e.environment != first.environment for e in examples[1:]):
        raise ValueError("render_pairs needs examples of one step (the same environment)")
    head = prompt_head(first) if head is None else head
    shared: tuple[str, int] | None = None  # the block ranked by recency alone, and how many it left out
    pairs = []
    for example in examples:
        question = _QUESTIONS[example.task]
        if example.task == OUTPUT_PREDICTION:
            question += fence(example.code, "python")
        question = question.rstrip()  # the line break before the answer is the task's TARGET_DELIMITER
        block = None
        if options.runtime_format != "referenced":
            shared = shared or _runtime_block(first, options, reads=frozenset())
            # a block that shows every variable is the same whatever the ranking
            block = shared[0] if shared[1] == 0 or example.task != OUTPUT_PREDICTION else None
        if block is None:
            block = _runtime_block(example, options, reads=read_names(example))[0]
        pairs.append(PromptPair(head + block + question, head + question, block))
    return pairs


def prompt_head(example: Example) -> str:
    """The start both prompts of an example share: the introduction, the environment line and the history."""
    return render_history(example.history, start=_INTRO + render_environment(example.environment))


def read_names(example: Example) -> frozenset[str]:
    """The names the target cell refers to: kept first in a tight runtime block (none for next cell)."""
    return referenced_names(example.code) if example.task == OUTPUT_PREDICTION else frozenset()


def _runtime_block(example: Example, options: RenderOptions, reads: Collection[str]) -> tuple[str, int]:
    """The runtime block of ``example`` and the number of variables it leaves out."""
    return _render_runtime(
        example.runtime,
        options,
        referencing_code(example, options),
        example.memory_bytes_before,
        reads=reads,
        changed=example.runtime_changed,
        execution_time=example.execution_time_before,
    )


def render_environment(environment: Sequence[tuple[str, str]]) -> str:
    """The line naming the kernel's Python and libraries (``("python", "3.12.3")`` first); "" when unknown."""
    if not environment:
        return ""
    named = [
        f"{'Python' if name == 'python' else name} {version}" for name, version in environment if name != AUTHOR_PYTHON
    ]
    author = dict(environment).get(AUTHOR_PYTHON)
    note = (
        f" The notebook's author ran Python {author}: the outputs were recorded again under the versions above."
        if author
        else ""
    )
    return f"The kernel ran {', '.join(named)}.{note}\n\n"


def referencing_code(example: Example, options: RenderOptions) -> list[str]:
    """The code whose names decide which variables ``referenced`` shows."""
    if example.task == OUTPUT_PREDICTION:
        return [example.code]
    recent = example.history[-options.referenced_window :] if options.referenced_window else []
    return [cell.code for cell in recent]


def fence(text: str, lang: str = "") -> str:
    """A Markdown code block around ``text``, with a fence longer than any backtick run inside."""
    # most text holds no backtick: `in` says so without the pattern (a build fences every cell and question)
    longest = max((len(run) for run in re.findall(r"`+", text)), default=0) if "`" in text else 0
    marks = "`" * max(3, longest + 1)
    body = text if text.endswith("\n") or not text else text + "\n"
    return f"{marks}{lang}\n{body}{marks}\n"


def render_history(history: list[HistoryCell], start: str = "") -> str:
    """The history part of a prompt: each cell's code and output, oldest first, or a note that there is none.

    Executed cells are numbered; a restart marker becomes :data:`RESTART_LINE`. ``start`` is text put before
    it, in the same join (the history is about 12,000 characters, which a concatenation after would copy).
    """
    if not history:
        return start + "Previous code cells and their outputs: none (this is the first cell executed).\n\n"
    title = start + "Previous code cells and their outputs:\n\n"
    bodies = [cell.rendered for cell in history]
    if RESTART_LINE not in bodies:  # the common case: one label per cell
        # labels and bodies interleaved by slice assignment, in C: half the time of a flattened zip
        parts = [title] * (2 * len(bodies) + 1)
        parts[1::2] = _cell_labels(len(bodies))
        parts[2::2] = bodies
        return "".join(parts)
    numbered = iter(_cell_labels(len(bodies) - bodies.count(RESTART_LINE)))
    parts = [title]
    for body in bodies:
        parts += [body] if body is RESTART_LINE else [next(numbered), body]
    return "".join(parts)


def _cell_labels(count: int) -> list[str]:
    """``["Cell 1:\\n", ..., f"Cell {count}:\\n"]``, grown once and reused by every prompt."""
    while len(_CELL_LABELS) < count:
        _CELL_LABELS.append(f"Cell {len(_CELL_LABELS) + 1}:\n")
    return _CELL_LABELS[:count]


_CELL_LABELS: list[str] = []


def render_cell(code: str, output: str) -> str:
    """One history cell: its code and output fenced, or :data:`RESTART_LINE` for a restart marker."""
    if code == RESTART_MARKER and not output:
        return RESTART_LINE
    rendered_output = fence(output) if output else "(no output)\n"
    return f"{fence(code, 'python')}Output:\n{rendered_output}\n"


# cached: a step's code is parsed for its runtime block, its placebo's and the placebo's choice
@functools.lru_cache(maxsize=256)
def referenced_names(code: str) -> frozenset[str]:
    """Names a piece of notebook code refers to (loads, stores and attribute bases)."""
    python = "\n".join("" if _IPYTHON_LINE.match(line) else line for line in code.splitlines())
    try:
        tree = parse_cell(python)
    except (SyntaxError, ValueError):
        return frozenset(_IDENTIFIER.findall(code))
    # ast.walk's names, by a walk of our own: twice as fast, as every step's code is walked
    names: set[str] = set()
    stack: list[ast.AST] = [tree]
    while stack:
        node = stack.pop()
        kind = type(node)
        if kind is ast.Name:
            names.add(node.id)  # type: ignore[attr-defined]
        elif kind is ast.Global or kind is ast.Nonlocal:
            names.update(node.names)  # type: ignore[attr-defined]
        else:
            for field in node._fields:
                value = getattr(node, field, None)
                if isinstance(value, list):
                    stack.extend([item for item in value if isinstance(item, ast.AST)])
                elif isinstance(value, ast.AST):
                    stack.append(value)
    return frozenset(names)


def render_runtime(
    variables: list[Variable],
    options: RenderOptions,
    referenced_from: list[str],
    memory: int | None = None,
    *,
    reads: Collection[str] = (),
    changed: Sequence[int] | None = None,
    execution_time: float | None = None,
) -> str:
    """The runtime block in the chosen format, within ``options.max_runtime_chars``.

    ``referenced_from`` is the code whose names the ``referenced`` format shows;
    ``reads`` and ``changed`` rank the variables when some must be left out (see
    :func:`rank_variables`); ``memory`` and ``execution_time`` (of the previous
    cell) go into the header.
    """
    return _render_runtime(
        variables, options, referenced_from, memory, reads=reads, changed=changed, execution_time=execution_time
    )[0]


def _render_runtime(
    variables: list[Variable],
    options: RenderOptions,
    referenced_from: list[str],
    memory: int | None,
    *,
    reads: Collection[str],
    changed: Sequence[int] | None,
    execution_time: float | None,
) -> tuple[str, int]:
    """:func:`render_runtime`, and how many of the variables in scope it leaves out."""
    indices = list(range(len(variables)))
    scope = "user variables"
    if options.runtime_format == "referenced":
        names = set().union(*(referenced_names(code) for code in referenced_from)) if referenced_from else set()
        indices = [i for i in indices if variables[i].name in names]
        scope = f"variables referenced by the code, out of {len(variables)} user variables"
    if changed is not None and len(changed) != len(variables):
        raise ValueError(f"{len(changed)} change steps for {len(variables)} variables")
    shown = [variables[i] for i in indices]
    ranked = rank_variables(shown, reads, [changed[i] for i in indices] if changed is not None else None)
    facts = [f"{len(shown)} {scope}"]
    if memory is not None:
        facts.append(f"kernel memory {memory} bytes")
    if execution_time is not None:
        facts.append(f"previous cell ran in {execution_time:.3f} s")
    header = f"{_RUNTIME_HEADER} ({', '.join(facts)}):\n"
    render_entry = _json_line if options.runtime_format == "json" else _text_entry

    def entry(var: Variable, limit: int) -> str:
        """A variable's entry with its repr cut to ``limit``; below MIN_REPR_CHARS only one with a description."""
        described = options.descriptions and var.description is not None
        return _entry(render_entry, var, limit if limit >= MIN_REPR_CHARS or described else MIN_REPR_CHARS, described)

    entries = [entry(var, options.prompt_repr_chars) for var in shown]
    budget = options.max_runtime_chars
    read = [i for i in ranked if shown[i].name in reads]
    # the variables the cell reads must all show, descriptions whole: when they do not fit, cut their reprs
    limit = options.prompt_repr_chars
    while limit > 0 and len(header) + sum(len(entries[i]) + 2 for i in read) > budget - _CLOSING_CHARS:
        limit = max(limit // 2, MIN_REPR_CHARS) if limit > MIN_REPR_CHARS else 0
        for i in read:
            entries[i] = entry(shown[i], limit)
    if options.runtime_format == "json":

        def render(kept: list[int]) -> str:
            body = ",\n".join(entries[i] for i in kept) + ("\n" if kept else "")
            return f'{header}{{"variables": [\n{body}], "not_shown": {len(entries) - len(kept)}}}\n\n'

    else:

        def render(kept: list[int]) -> str:
            omitted = len(entries) - len(kept)
            listing = "".join(entries[i] for i in kept) if entries else "(none)\n"
            return header + listing + (f"... {omitted} more variables not shown\n" if omitted else "") + "\n"

    kept, text = _fitting(render, ranked, [len(item) for item in entries], budget, len(header))
    return text, len(entries) - len(kept)


def rank_variables(variables: list[Variable], reads: Collection[str], changed: Sequence[int] | None) -> list[int]:
    """The indices of ``variables``, most important first: those in ``reads``, then data before code
    (:func:`is_code_object`), each the most recently changed first.

    ``changed`` gives, per variable, the step at which it last changed (None: no
    recency known); ties keep snapshot order.
    """
    recency = changed if changed is not None else [0] * len(variables)
    return sorted(
        range(len(variables)),
        key=lambda i: (variables[i].name not in reads, is_code_object(variables[i]), -recency[i], i),
    )


def is_code_object(variable: Variable) -> bool:
    """Whether a variable holds code rather than data: a function, method, class or module, whose entry
    (``<function f at 0x?>``) says nothing the cell's code does not; frames, arrays, containers, scalars and
    other objects are data."""
    return variable.type in CODE_TYPES or variable.type.endswith("Meta")


def _fitting(
    render: Callable[[list[int]], str], ranked: list[int], sizes: list[int], budget: int, fixed: int
) -> tuple[list[int], str]:
    """The entries ``render`` keeps within ``budget`` (in snapshot order), and its text.

    Entries are taken in rank order, each one that still fits beside those taken
    before (``fixed`` characters are taken already), so a large entry does not
    shut out smaller, less important ones; then, while the text with its closing
    line does not fit, the least important taken entry goes.
    """
    taken, used = [], fixed
    for index in ranked:
        if used + sizes[index] <= budget:
            taken.append(index)
            used += sizes[index]
    while True:
        text = render(sorted(taken))
        if len(text) <= budget or not taken:
            return taken, text
        taken.pop()


# Entries rendered, by everything an entry shows: most variables are described alike from one step to the next,
# and a lookup costs a quarter of rendering one (measured on the synthetic corpus, 8 variables a step). Emptied
# when full: a bound on memory, not an eviction order.
_ENTRIES: dict[tuple[Any, ...], str] = {}
_ENTRIES_KEPT = 1 << 14


def _entry(render: Callable[[Variable, int, bool], str], var: Variable, limit: int, described: bool) -> str:
    """``render(var, limit, described)``, rendered once for the same facts."""
    shape = None if var.shape is None else tuple(var.shape)
    key: tuple[Any, ...] = (render, var.name, var.type, var.size_bytes, shape, var.len, var.repr, var.repr_truncated)
    key += (limit, var.description) if described else (limit,)
    text = _ENTRIES.get(key)
    if text is None:
        if len(_ENTRIES) >= _ENTRIES_KEPT:
            _ENTRIES.clear()
        text = _ENTRIES[key] = render(var, limit, described)
    return text


def _cut_repr(text: str, limit: int) -> str:
    """``text`` within ``limit`` characters, a cut one ending with the mark (the mark alone below its length)."""
    if len(text) <= limit:
        return text
    return text[: max(limit - len(PROMPT_REPR_TRUNCATION_MARK), 0)] + PROMPT_REPR_TRUNCATION_MARK


def _text_entry(var: Variable, max_repr_chars: int, described: bool = False) -> str:
    facts = [var.type, f"{var.size_bytes} bytes" if var.size_bytes is not None else "size unknown"]
    if var.shape is not None:
        facts.append("shape " + "x".join(str(d) for d in var.shape))
    if var.len is not None:
        facts.append(f"len {var.len}")
    value = _cut_repr(var.repr, max_repr_chars)
    if var.repr_truncated and not value.endswith(PROMPT_REPR_TRUNCATION_MARK):
        value += PROMPT_REPR_TRUNCATION_MARK
    indented = "\n".join("    " + line for line in value.splitlines() or [""])
    description = (
        "".join(f"  {line}\n" for line in var.description.splitlines()) if described and var.description else ""
    )
    return f"- {var.name}: {', '.join(facts)}\n{description}{indented}\n"


def _json_line(var: Variable, max_repr_chars: int, described: bool = False) -> str:
    entry: dict[str, Any] = {"name": var.name, "type": var.type, "size_bytes": var.size_bytes}
    if var.shape is not None:
        entry["shape"] = var.shape
    if var.len is not None:
        entry["len"] = var.len
    cut = _cut_repr(var.repr, max_repr_chars)
    entry["repr"] = cut
    entry["repr_truncated"] = var.repr_truncated or cut != var.repr
    if described and var.description is not None:
        entry["description"] = var.description
    return "  " + json.dumps(entry, ensure_ascii=False, sort_keys=True)


def shown_variables(runtime_text: str) -> list[Variable]:
    """The variables a runtime block shows, read back from its text (either format); [] for no block.

    Each comes with what the block says of it: type, size, shape, len, the description and the repr
    as shown (``repr_truncated`` when the block or the snapshot cut it).
    """
    header, _, body = runtime_text.partition("\n")
    if not header.startswith(_RUNTIME_HEADER):
        return []
    if body.startswith('{"variables"'):
        return [_json_variable(entry) for entry in json.loads(body)["variables"]]
    variables: list[Variable] = []
    lines: list[str] = []
    for line in body.splitlines():
        if line.startswith("- "):
            if variables:
                _set_repr(variables[-1], lines)
            variables.append(_text_variable(line[2:]))
            lines = []
        elif line.startswith("    ") and variables:
            lines.append(line[4:])
        elif line.startswith("  ") and variables:  # a description line, indented by two
            described = variables[-1].description
            variables[-1].description = line[2:] if described is None else f"{described}\n{line[2:]}"
    if variables:
        _set_repr(variables[-1], lines)
    return variables


def _text_variable(line: str) -> Variable:
    """A variable from the first line of its ``text`` entry: ``name: type, N bytes, shape AxB, len N``."""
    name, _, rest = line.partition(": ")
    kind, size, *extra = rest.split(", ")
    variable = Variable(name, kind, int(size.split()[0]) if size.endswith(" bytes") else None, "")
    for fact in extra:
        if fact.startswith("shape "):
            variable.shape = [int(dim) for dim in fact[len("shape ") :].split("x") if dim]
        elif fact.startswith("len "):
            variable.len = int(fact[len("len ") :])
    return variable


def _set_repr(variable: Variable, lines: list[str]) -> None:
    text = "\n".join(lines)
    variable.repr_truncated = text.endswith(PROMPT_REPR_TRUNCATION_MARK)
    variable.repr = text.removesuffix(PROMPT_REPR_TRUNCATION_MARK)


def _json_variable(entry: dict[str, Any]) -> Variable:
    truncated = bool(entry["repr_truncated"])
    text = entry["repr"]
    return Variable(
        entry["name"],
        entry["type"],
        entry["size_bytes"],
        text.removesuffix(PROMPT_REPR_TRUNCATION_MARK) if truncated else text,
        repr_truncated=truncated,
        shape=entry.get("shape"),
        len=entry.get("len"),
        description=entry.get("description"),
    )
