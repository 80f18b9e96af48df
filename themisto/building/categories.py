"""Categories of an example, so every metric can be broken down by them: what the target step printed, what
kind of step it was, and whether an earlier example already asked the same question.

- :func:`output_kind`: the kind of a step's output, one of :data:`~themisto.vocabulary.OUTPUT_KINDS`.
- :class:`StepKinds`: the kind of each step of a trajectory, one of :data:`~themisto.vocabulary.STEP_KINDS`.
- :class:`Duplicates`: the first earlier example of a trajectory with the same (code, target) pair.
- :func:`runtime_only`: the target holds a token found in the runtime block and nowhere in the plain prompt.

Both tasks of a step carry the same ``output_kind`` and ``step_kind``; ``duplicate_of`` depends on the
task, as the pair compared is the task's own (code, target).
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from themisto.trajectory import Step

# A rendered figure: matplotlib's text/plain of a Figure, or the placeholder of rich data without text.
_IMAGE_LINE = re.compile(r"<Figure size \d+(?:\.\d+)?x\d+(?:\.\d+)? with \d+ Axes>|<image/[\w.+-]+[^<>\n]*>")
# What plotting calls return next to their figure: <Axes: ...>, [<matplotlib.lines.Line2D at 0x...>], Text(...)
_PLOT_OBJECT_LINE = re.compile(r"\[?<[^<>\n]*>(?:, <[^<>\n]*>)*\]?|Text\(.*\)")
# pandas: a Series ends with its dtype line, a long DataFrame with its size, an empty one starts so
_SERIES_END = re.compile(r"(?:Name: .*, )?(?:Length: \d+, )?(?:Freq: .*, )?dtype: \S+")
_FRAME_END = re.compile(r"\[\d+ rows x \d+ columns\]")
_COLLECTION_CALL = re.compile(
    r"(?:array|dict_keys|dict_values|dict_items|set|frozenset|deque|defaultdict|OrderedDict|Counter|range|"
    r"(?:Multi|Range|Datetime)?Index)\(.*\)",
    re.DOTALL,
)
_BRACKETS = {"[": "]", "(": ")", "{": "}"}
_NUMBER = re.compile(r"[-+]?(?:\d[\d_]*\.?\d*|\.\d+)(?:[eE][-+]?\d+)?j?|[-+]?(?:inf|nan)")
_NUMPY_SCALAR = re.compile(r"np\.\w+\(.*\)|np\.(?:True_|False_)")
_STRING_LITERAL = re.compile(r"'[^'\n]*'|\"[^\"\n]*\"")
# a single word of at most this many characters (a dtype, a name, a timestamp) is a scalar too
SHORT_TOKEN_CHARS = 40


def output_kind(output: str, is_error: bool, outputs: Sequence[Mapping[str, Any]] = ()) -> str:
    """The kind of a step's output, from its plain text and raw nbformat ``outputs``; the first rule that holds:

    1. ``error``: the step raised an exception;
    2. ``none``: the output is empty or blank;
    3. ``image``: a figure (``<Figure size ... with N Axes>``) or an image placeholder (``<image/png>``),
       with at most the objects plotting calls return beside it (``<Axes: ...>``, ``[<...Line2D ...>]``,
       ``Text(...)``);
    4. ``table``: a pandas table: an HTML ``<table>`` among the raw outputs (DataFrames), or text ending
       in a Series' ``dtype:`` line or a DataFrame's ``[N rows x M columns]``, or ``Empty DataFrame``;
    5. ``collection``: one bracketed repr (list, tuple, dict, set) or a container constructor repr
       (``array(...)``, ``dict_keys(...)``, ``Index(...)``, ...);
    6. ``scalar``: one line holding a number, a bool, None, a numpy scalar (``np.float64(...)``), a
       quoted string or a single word of at most :data:`SHORT_TOKEN_CHARS` characters;
    7. ``text``: anything else (prints, reports, mixed output).
    """
    if is_error:
        return "error"
    text = output.strip()
    if not text:
        return "none"
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if any(_IMAGE_LINE.fullmatch(line) for line in lines) and all(
        _IMAGE_LINE.fullmatch(line) or _PLOT_OBJECT_LINE.fullmatch(line) for line in lines
    ):
        return "image"
    if (
        _has_html_table(outputs)
        or _SERIES_END.fullmatch(lines[-1])
        or _FRAME_END.fullmatch(lines[-1])
        or lines[0] == "Empty DataFrame"
    ):
        return "table"
    if (text[0] in _BRACKETS and text[-1] == _BRACKETS[text[0]]) or _COLLECTION_CALL.fullmatch(text):
        return "collection"
    if len(lines) == 1 and (
        _NUMBER.fullmatch(text)
        or text in ("True", "False", "None")
        or _NUMPY_SCALAR.fullmatch(text)
        or _STRING_LITERAL.fullmatch(text)
        or (len(text) <= SHORT_TOKEN_CHARS and not any(char.isspace() for char in text))
    ):
        return "scalar"
    return "text"


def _has_html_table(outputs: Sequence[Mapping[str, Any]]) -> bool:
    """Whether a result or display among the raw outputs carries an HTML table (how DataFrames display)."""
    for output in outputs:
        data = output.get("data") if isinstance(output, Mapping) else None
        if isinstance(data, Mapping):
            html = data.get("text/html")
            text = "".join(html) if isinstance(html, list) else str(html or "")
            if "<table" in text:
                return True
    return False


class StepKinds:
    """The kind of each step of one trajectory, fed in execution order; the first rule that holds:

    - ``after_restart``: the kernel was restarted just before the step (not the trajectory's first step);
    - ``rerun_unchanged``: the step's cell ran earlier in the trajectory, and its latest earlier run had
      the same code;
    - ``rerun_edited``: the cell ran earlier with other code (the developer edited it);
    - ``first_run``: the cell's first execution.
    """

    def __init__(self) -> None:
        self._code: dict[str, str] = {}  # cell id -> the code of its latest run
        self._started = False

    def classify(self, step: Step) -> str:
        """The kind of ``step``, the next step of the trajectory."""
        earlier = self._code.get(step.cell_id)
        self._code[step.cell_id] = step.code
        started, self._started = self._started, True
        if step.restarted and started:
            return "after_restart"
        if earlier is None:
            return "first_run"
        return "rerun_unchanged" if earlier == step.code else "rerun_edited"


class Duplicates:
    """The first earlier example of the same trajectory whose (code, target) pair is identical.

    Fed the examples of one task and split in trajectory order; a trajectory's examples are
    contiguous (one trajectory per file), so only the current trajectory's pairs are kept, each as
    a digest rather than its text.
    """

    def __init__(self) -> None:
        self._trajectory: str | None = None
        self._first: dict[bytes, str] = {}

    def first(self, trajectory_id: str, example_id: str, code: str, target: str) -> str | None:
        """The id of the first earlier example with this pair, else None (``example_id`` becomes that first one)."""
        if trajectory_id != self._trajectory:
            self._trajectory, self._first = trajectory_id, {}
        # the code's length first, so that no other split of the same characters gives the same key
        key = hashlib.blake2b(f"{len(code)}:{code}{target}".encode(), digest_size=16).digest()
        earlier = self._first.get(key)
        if earlier is None:
            self._first[key] = example_id
        return earlier


# What counts as a token for runtime_only: a run of word characters (an identifier, a number's digits).
_TOKEN = re.compile(r"\w+")


def runtime_only(target: str, runtime_block: str, plain_prompt: str, head: str = "") -> bool:
    """Whether ``target`` holds a token that appears in ``runtime_block`` and nowhere in the plain prompt,
    ``head + plain_prompt`` (a prompt's start, given apart where it is held apart).

    Such a target can be copied from the block and from nothing else a model is shown: the stratum where
    runtime information is needed, not merely helpful.
    """
    if head and _WORD.match(head, len(head) - 1):  # a token could run across the two: look in them joined
        plain_prompt, head = head + plain_prompt, ""
    # the target is short and the block and the plain prompt are long: tokenise the target and look only
    # its tokens up in the block and the prompt (str.find), rather than tokenising either; a head that ends
    # in no word character ends every token before it, so the prompt's parts are looked in one by one
    return any(
        _has_token(runtime_block, token) and not _has_token(head, token) and not _has_token(plain_prompt, token)
        for token in set(_TOKEN.findall(target))
    )


_WORD = re.compile(r"\w")


def _has_token(text: str, token: str) -> bool:
    """Whether ``token`` (a run of word characters) is one of ``_TOKEN.findall(text)``: a whole run in ``text``."""
    at = text.find(token)
    while at >= 0:
        end = at + len(token)
        if (at == 0 or not _WORD.match(text, at - 1)) and (end == len(text) or not _WORD.match(text, end)):
            return True
        at = text.find(token, at + 1)
    return False
