"""Reference predictors, registered as lm-eval models so the same pipeline scores them.

They show what the tasks reward without a language model:

- ``themisto-empty``: always the empty string (scores the share of empty targets).
- ``themisto-repeat-last``: the last executed cell of the history: its code
  for next-cell prediction, its output for output prediction.
- ``themisto-repr-echo``: output prediction only: when the target cell ends in
  a bare expression naming a variable of the runtime state before the step,
  that variable's recorded repr (what Jupyter would display); otherwise, and
  in the no-runtime and next-cell tasks, the empty string.

Each reads the request's ``doc`` (the dataset row), not the rendered prompt,
and cuts its answer at the task's stop sequences, as a generating model's
answer would be cut. Use: ``themisto eval --model themisto-repeat-last -o runs``,
or ``themisto.evaluation.evaluate("themisto-empty")`` from Python.
"""

from __future__ import annotations

import abc
import ast
import io
import tokenize
from typing import TYPE_CHECKING, Any

# lm-eval fills its model registry with the built-in models (hf, vllm, ...)
# only while the registry is still empty; registering ours first would hide
# them, so lm_eval.models is imported before the registrations below.
import lm_eval.models  # noqa: F401
from lm_eval.api.model import LM
from lm_eval.api.registry import register_model
from lm_eval.models.utils import postprocess_generated_text

from themisto.exceptions import InputError
from themisto.vocabulary import EMPTY_BASELINE, NEXT_CELL_TASK, OUTPUT_TASK, REPEAT_LAST_BASELINE, REPR_ECHO_BASELINE

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
        body = ast.parse(code).body
    except (SyntaxError, ValueError):  # ValueError: source with NUL bytes
        return None
    if body and isinstance(body[-1], ast.Expr) and isinstance(body[-1].value, ast.Name):
        return body[-1].value.id
    return None


def ends_with_semicolon(code: str) -> bool:
    """Whether the last token, comments aside, is ``;``: IPython then shows no result."""
    try:
        tokens = list(tokenize.generate_tokens(io.StringIO(code).readline))
    except (tokenize.TokenError, SyntaxError):
        return code.rstrip().endswith(";")
    meaningful = [token for token in tokens if token.type not in _LAYOUT_TOKENS]
    return bool(meaningful) and meaningful[-1].string == ";"


_LAYOUT_TOKENS = {tokenize.COMMENT, tokenize.NL, tokenize.NEWLINE, tokenize.INDENT, tokenize.DEDENT, tokenize.ENDMARKER}


class _Baseline(LM):
    """A generate-only lm-eval model answering each request from its dataset row."""

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
    def answer(self, doc: dict[str, Any], next_cell: bool) -> str:
        """The prediction for one dataset row."""

    def generate_until(self, requests: list[Instance], disable_tqdm: bool = False) -> list[str]:
        """Each request's answer, cut at its stop sequences."""
        predictions = []
        for request in requests:
            gen_kwargs = request.args[1] if len(request.args) > 1 else {}
            answer = self.answer(request.doc, is_next_cell_task(request.task_name))
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


@register_model(EMPTY_BASELINE)
class EmptyBaseline(_Baseline):
    """Always predicts the empty string."""

    name = EMPTY_BASELINE

    def answer(self, doc: dict[str, Any], next_cell: bool) -> str:
        return ""


@register_model(REPEAT_LAST_BASELINE)
class RepeatLastBaseline(_Baseline):
    """Predicts the last history cell: its code (next cell) or its output (output prediction)."""

    name = REPEAT_LAST_BASELINE

    def answer(self, doc: dict[str, Any], next_cell: bool) -> str:
        history = doc["history"]
        if not history:
            return ""
        return history[-1]["code" if next_cell else "output"]


@register_model(REPR_ECHO_BASELINE)
class ReprEchoBaseline(_Baseline):
    """Predicts the recorded repr of the runtime variable the target cell displays."""

    name = REPR_ECHO_BASELINE

    def answer(self, doc: dict[str, Any], next_cell: bool) -> str:
        if next_cell:
            return ""
        name = displayed_name(doc["code"])
        reprs = {variable["name"]: variable["repr"] for variable in doc["runtime"]}
        return reprs.get(name, "") if name is not None else ""
