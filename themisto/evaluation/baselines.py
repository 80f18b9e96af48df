"""Reference predictors, registered as lm-eval models so the same pipeline scores them.

They show what the tasks reward without a language model:

- ``themisto-empty``: always the empty string (scores the share of empty targets).
- ``themisto-repeat-last``: the last executed cell of the history: its code
  for next-cell prediction, its output for output prediction.
- ``themisto-repr-echo``: output prediction only: when the target cell ends in
  a bare expression naming a variable of the runtime state before the step,
  that variable's recorded repr (what Jupyter would display); otherwise, and
  in the no-runtime and next-cell tasks, the empty string.
- ``themisto-state-lookup``, the positive control, which counts only what the
  runtime block alone holds: in every arm it first answers what the plain
  prompt allows, ``themisto-heuristic``'s answer; where the row has a runtime
  block (the row's ``runtime_text``, read back with
  :func:`~themisto.building.prompts.shown_variables`) and the target cell is
  one expression or ``print`` that the shown variables decide
  (:func:`~themisto.evaluation.state_lookup.resolve`: a bare name whose repr is
  whole, ``len(x)``, ``x.shape``, ``type(x)``, ``x.dtype``, arithmetic and
  f-strings on recorded values, ...), it answers that output instead. So its
  runtime-minus-plain gain is information found in the block and nowhere else
  in the prompt (a copy of an earlier identical cell's output, which the
  history shows, is the plain arm's too); a placebo block, another step's
  state, can only mislead it. Next-cell prediction: the heuristic's answer in
  every arm.
- ``themisto-majority``, the floor: the most frequent target among the task's
  requests (the evaluated split, or its first ``--limit`` rows), ties to the
  earliest, for every example.
- ``themisto-heuristic``, the bar without runtime: output prediction copies
  the output of the latest identical cell in the history, else answers a
  figure repr for plotting code (its ``figsize`` and subplot grid read from
  the code), else the output of an expression of literals, else nothing;
  next-cell prediction repeats the latest executed cell (see
  :func:`heuristic_next_cell`).
- ``themisto-similar-cell``, a floor for notebooks without re-runs (where the
  heuristic's identical earlier cell seldom exists): output prediction copies
  the output of the earlier history cell whose code is most like the target
  cell's (rapidfuzz ``ratio`` at least :data:`SIMILAR_CODE`, the latest of
  equals), next-cell prediction the cell that followed the earlier cell most
  like the last one; else the heuristic's answer.
- ``themisto-shape-majority``, the other such floor: the most frequent target
  among the *other* requests of the task whose code has the same shape
  (:func:`code_shape`: names, numbers and strings abstracted, so ``df.head()``
  and ``sales.head()`` share one); for next-cell prediction, whose last
  history cell has the same shape; else the heuristic's answer. Leaving the
  example itself out keeps its own target from voting for it.

Each reads the request's ``doc`` (the dataset row), not the rendered prompt,
and cuts its answer at the task's stop sequences, as a generating model's
answer would be cut. Use: ``themisto eval --model themisto-repeat-last -o runs``,
or ``themisto.evaluation.evaluate("themisto-empty")`` from Python.
"""

from __future__ import annotations

import abc
import ast
import re
from collections import Counter
from typing import TYPE_CHECKING, Any

# lm-eval fills its model registry with the built-in models (hf, vllm, ...)
# only while the registry is still empty; registering ours first would hide
# them, so lm_eval.models is imported before the registrations below.
import lm_eval.models  # noqa: F401
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import postprocess_generated_text

from themisto.building.prompts import shown_variables
from themisto.evaluation.state_lookup import ends_with_semicolon, resolve
from themisto.exceptions import InputError
from themisto.notebook_code import parse_cell
from themisto.vocabulary import (
    EMPTY_BASELINE,
    HEURISTIC_BASELINE,
    MAJORITY_BASELINE,
    NEXT_CELL_TASK,
    OUTPUT_TASK,
    REPEAT_LAST_BASELINE,
    REPR_ECHO_BASELINE,
    RESTART_MARKER,
    SHAPE_MAJORITY_BASELINE,
    SIMILAR_CELL_BASELINE,
    STATE_LOOKUP_BASELINE,
)

if TYPE_CHECKING:
    from lm_eval.api.instance import Instance


def is_next_cell_task(task_name: str | None) -> bool:
    """Whether a request belongs to next-cell prediction (else output prediction)."""
    name = task_name or ""
    if name.startswith(NEXT_CELL_TASK):
        return True
    if name.startswith(OUTPUT_TASK):
        return False
    raise InputError(f"Themisto baselines only answer Themisto tasks, not {task_name!r}")


def displayed_name(code: str) -> str | None:
    """The variable a cell displays: the name its last statement evaluates, else None.

    ``x`` and ``print(1)\\nx`` display ``x``; ``x;`` (a trailing semicolon
    hides the display), ``x.head()``, ``y = x`` and code that is not plain
    Python (IPython magics) display no variable by name.
    """
    if ends_with_semicolon(code):
        return None
    try:
        body = parse_cell(code).body
    except (SyntaxError, ValueError):  # ValueError: source with NUL bytes
        return None
    if body and isinstance(body[-1], ast.Expr) and isinstance(body[-1].value, ast.Name):
        return body[-1].value.id
    return None


class _Baseline(LM):  # type: ignore[misc]  # lm-eval is untyped: LM is Any to mypy
    """A generate-only lm-eval model answering requests from their dataset rows."""

    name = ""

    # What lm-eval passes every model besides its --model_args: meaningless for a lookup, so ignored.
    RUN_OPTIONS = frozenset({"batch_size", "max_batch_size", "device"})

    def __init__(self, **options: Any) -> None:
        unknown = sorted(set(options) - self.RUN_OPTIONS)
        if unknown:
            # a misspelt option would otherwise be ignored without a word
            raise InputError(f"{self.name} takes no model arguments, got {', '.join(unknown)}")
        super().__init__()

    @abc.abstractmethod
    def answers(self, requests: list[Instance]) -> list[str]:
        """The prediction for each request."""

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """Each request's answer, cut at its stop sequences."""
        predictions = []
        for request, answer in zip(requests, self.answers(requests), strict=True):
            gen_kwargs = request.args[1] if len(request.args) > 1 else {}
            # Cut at the stop sequences exactly as lm-eval cuts a generated answer.
            predictions.append(postprocess_generated_text(answer, gen_kwargs.get("until"), None))
        return predictions

    # Baselines never read the prompt; a plain chat "template" lets a run pass
    # --apply-chat-template to baselines and models alike.
    @property
    def tokenizer_name(self) -> str:
        """Names the (plain) chat template in lm-eval's request-cache fingerprint."""
        return self.name

    def apply_chat_template(self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True) -> str:
        """The messages' contents, concatenated."""
        return "\n\n".join(message["content"] for message in chat_history)

    def loglikelihood(self, requests: list[Instance]) -> list[tuple[float, bool]]:
        raise InputError(f"{self.name} only generates text: it cannot score loglikelihood tasks")

    def loglikelihood_rolling(self, requests: list[Instance]) -> list[float]:
        raise InputError(f"{self.name} only generates text: it cannot score loglikelihood tasks")


class _RowBaseline(_Baseline):
    """A baseline answering each request from its own row alone."""

    @abc.abstractmethod
    def answer(self, doc: dict[str, Any], next_cell: bool) -> str:
        """The prediction for one dataset row."""

    def answers(self, requests: list[Instance]) -> list[str]:
        return [self.answer(request.doc, is_next_cell_task(request.task_name)) for request in requests]


@register_model(EMPTY_BASELINE)
class EmptyBaseline(_RowBaseline):
    """Always predicts the empty string."""

    name = EMPTY_BASELINE

    def answer(self, doc: dict[str, Any], next_cell: bool) -> str:
        return ""


@register_model(REPEAT_LAST_BASELINE)
class RepeatLastBaseline(_RowBaseline):
    """Predicts the last history cell: its code (next cell) or its output (output prediction)."""

    name = REPEAT_LAST_BASELINE

    def answer(self, doc: dict[str, Any], next_cell: bool) -> str:
        history = executed_cells(doc["history"])
        if not history:
            return ""
        return history[-1]["code" if next_cell else "output"]


@register_model(REPR_ECHO_BASELINE)
class ReprEchoBaseline(_RowBaseline):
    """Predicts the recorded repr of the runtime variable the target cell displays."""

    name = REPR_ECHO_BASELINE

    def answer(self, doc: dict[str, Any], next_cell: bool) -> str:
        if next_cell:
            return ""
        name = displayed_name(doc["code"])
        reprs = {variable["name"]: variable["repr"] for variable in doc["runtime"]}
        return reprs.get(name, "") if name is not None else ""


@register_model(STATE_LOOKUP_BASELINE)
class StateLookupBaseline(_RowBaseline):
    """The positive control: what the plain prompt allows (the heuristic), plus what the block alone decides."""

    name = STATE_LOOKUP_BASELINE

    def answer(self, doc: dict[str, Any], next_cell: bool) -> str:
        plain = heuristic_answer(doc, next_cell)
        if next_cell or not doc["runtime_text"]:
            return plain
        resolved = resolve(doc["code"], shown_variables(doc["runtime_text"]))
        return resolved if resolved is not None else plain


@register_model(MAJORITY_BASELINE)
class MajorityBaseline(_Baseline):
    """The floor: every example of a task gets the task's most frequent target."""

    name = MAJORITY_BASELINE

    def answers(self, requests: list[Instance]) -> list[str]:
        targets: dict[str, Counter[str]] = {}
        for request in requests:
            is_next_cell_task(request.task_name)  # only Themisto tasks
            targets.setdefault(request.task_name, Counter())[request.doc["target"]] += 1
        # most_common keeps first-seen order among equal counts: ties go to the earliest target
        majority = {task: counts.most_common(1)[0][0] for task, counts in targets.items()}
        return [majority[request.task_name] for request in requests]


@register_model(HEURISTIC_BASELINE)
class HeuristicBaseline(_RowBaseline):
    """The strongest cheap guess without runtime: see :func:`heuristic_output` and :func:`heuristic_next_cell`."""

    name = HEURISTIC_BASELINE

    def answer(self, doc: dict[str, Any], next_cell: bool) -> str:
        return heuristic_answer(doc, next_cell)


# How alike two cells' code must be (rapidfuzz ratio, 0-100) for one's output to stand for the other's.
SIMILAR_CODE = 60.0


@register_model(SIMILAR_CELL_BASELINE)
class SimilarCellBaseline(_RowBaseline):
    """The output of the most similar earlier cell (next cell: what followed it); else the heuristic."""

    name = SIMILAR_CELL_BASELINE

    def answer(self, doc: dict[str, Any], next_cell: bool) -> str:
        cells = executed_cells(doc["history"])
        if next_cell:
            found = most_similar(cells[-1]["code"], cells[:-1]) if cells else None
            return cells[found + 1]["code"] if found is not None else heuristic_next_cell(cells)
        found = most_similar(doc["code"], cells)
        return cells[found]["output"] if found is not None else heuristic_output(doc["code"], cells)


def most_similar(code: str, cells: list[dict[str, str]]) -> int | None:
    """The index of the cell whose code is most like ``code`` (at least :data:`SIMILAR_CODE`), latest of equals."""
    from rapidfuzz import fuzz

    best, found = SIMILAR_CODE, None
    for index, cell in enumerate(cells):
        score = fuzz.ratio(code, cell["code"])
        if score >= best:
            best, found = score, index
    return found


@register_model(SHAPE_MAJORITY_BASELINE)
class ShapeMajorityBaseline(_Baseline):
    """The most frequent target among the task's other requests of the same code shape; else the heuristic."""

    name = SHAPE_MAJORITY_BASELINE

    def answers(self, requests: list[Instance]) -> list[str]:
        kinds = [is_next_cell_task(request.task_name) for request in requests]
        keys = [(request.task_name, shape_key(request.doc, kind)) for request, kind in zip(requests, kinds)]
        targets: dict[tuple[str, str], Counter[str]] = {}
        for key, request in zip(keys, requests, strict=True):
            targets.setdefault(key, Counter())[request.doc["target"]] += 1
        answers = []
        for key, request, next_cell in zip(keys, requests, kinds, strict=True):
            others = targets[key] - Counter({request.doc["target"]: 1})  # the example's own target does not vote
            answers.append(others.most_common(1)[0][0] if others else heuristic_answer(request.doc, next_cell))
        return answers


def shape_key(doc: dict[str, Any], next_cell: bool) -> str:
    """What the shape majority groups a row by: its code's shape, or for next cell its last history cell's."""
    if not next_cell:
        return code_shape(doc["code"])
    cells = executed_cells(doc["history"])
    return code_shape(cells[-1]["code"]) if cells else ""


_STRING = re.compile(
    r"""[rbfuRBFU]{0,2}(?:'''.*?'''|\"\"\".*?\"\"\"|'(?:\\.|[^'\\\n])*'|"(?:\\.|[^"\\\n])*")""", re.DOTALL
)
_NUMBER = re.compile(r"(?<![\w.])\d+(?:\.\d*)?(?:[eE][-+]?\d+)?")
_NAME = re.compile(r"(?<![\w.])[A-Za-z_]\w*")
# Names a shape keeps: what a cell calls or says decides what it shows (print, len, ...), not what it names.
_KEPT_NAMES = frozenset(
    {"print", "len", "type", "sum", "min", "max", "sorted", "list", "dict", "set", "tuple", "range", "str", "int",
     "float", "round", "abs", "isinstance", "import", "from", "as", "for", "in", "if", "else", "def", "return",
     "lambda", "True", "False", "None", "and", "or", "not", "with", "class"}
)  # fmt: skip


def code_shape(code: str) -> str:
    """``code`` with its strings, numbers and names (but attributes and :data:`_KEPT_NAMES`) abstracted and
    blanks collapsed: ``df.head(3)`` and ``sales.head(10)`` have the shape ``_.head(0)``."""
    text = _NUMBER.sub("0", _STRING.sub("''", code))
    text = _NAME.sub(lambda name: name[0] if name[0] in _KEPT_NAMES else "_", text)
    return " ".join(text.split())


def heuristic_answer(doc: dict[str, Any], next_cell: bool) -> str:
    """The heuristic's answer to a row: from its code and history alone, never its runtime block."""
    cells = executed_cells(doc["history"])
    return heuristic_next_cell(cells) if next_cell else heuristic_output(doc["code"], cells)


def executed_cells(history: list[dict[str, str]]) -> list[dict[str, str]]:
    """The history without its restart markers: the cells that ran."""
    return [cell for cell in history if cell["code"] != RESTART_MARKER or cell["output"]]


# Calls that draw a matplotlib figure (pyplot, pandas' .plot/.hist, seaborn).
_PLOTTING = re.compile(
    r"\bplt\.|\bsns\.|\.plot\b|\.(?:hist|imshow|scatter|bar|barh|boxplot|pie|heatmap|matshow|subplots)\("
)
_FIGSIZE = re.compile(r"figsize\s*=\s*\(\s*(\d+(?:\.\d*)?)\s*,\s*(\d+(?:\.\d*)?)\s*\)")
_SUBPLOTS = re.compile(r"subplots\(\s*(?:nrows\s*=\s*)?(\d+)\s*,\s*(?:ncols\s*=\s*)?(\d+)")
# matplotlib's default figure: 6.4 x 4.8 inches at 100 dpi
DEFAULT_FIGURE = (640, 480)


def figure_repr(code: str) -> str:
    """The text/plain of the figure ``code`` draws: its size from ``figsize``, its axes from ``subplots(r, c)``."""
    size = _FIGSIZE.search(code)
    width, height = (round(float(size[1]) * 100), round(float(size[2]) * 100)) if size else DEFAULT_FIGURE
    grid = _SUBPLOTS.search(code)
    axes = int(grid[1]) * int(grid[2]) if grid else 1
    return f"<Figure size {width}x{height} with {axes} Axes>"


def heuristic_output(code: str, history: list[dict[str, str]]) -> str:
    """A guess at a cell's output from the code and history alone.

    The output of the latest identical cell in the history (a re-run mostly
    prints the same), else a figure repr for plotting code, else what an
    expression or ``print`` of literals shows, else nothing (most cells that
    assign, import or define show nothing).
    """
    for cell in reversed(history):
        if cell["code"] == code:
            return cell["output"]
    if _PLOTTING.search(code):
        return figure_repr(code)
    resolved = resolve(code, [])  # with no variables, only literals resolve
    return resolved if resolved is not None else ""


def heuristic_next_cell(history: list[dict[str, str]]) -> str:
    """A guess at the next cell's code from the history alone.

    Developers replay what they ran before (Run All after a restart, the same
    edit-run loop), so: the cell that followed the latest earlier run of the
    last cell's code; when that code never ran before, the last cell again.
    """
    if not history:
        return ""
    last = history[-1]["code"]
    for index in range(len(history) - 2, -1, -1):
        if history[index]["code"] == last:
            return history[index + 1]["code"]
    return last
