"""The baseline predictors, driven through lm-eval's own Instance requests and model registry.

Budget: under 5 s (importing lm-eval's model registry dominates).
"""

from __future__ import annotations

from typing import Any

import pytest
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_model

from themisto.evaluation.baselines import EmptyBaseline, RepeatLastBaseline, ReprEchoBaseline, displayed_name
from themisto.exceptions import InputError

UNTIL = {"until": ["\nCell ", "\nPredict the "], "max_gen_toks": 64}


def variable(name: str, text: str) -> dict[str, Any]:
    """A runtime variable struct of the dataset contract with the repr ``text``."""
    return {
        "name": name,
        "type": "int",
        "size_bytes": 28,
        "repr": text,
        "repr_truncated": False,
        "shape": None,
        "len": None,
    }


def doc(code: str = "", history: list[tuple[str, str]] = (), runtime: list[dict[str, Any]] = ()) -> dict[str, Any]:
    """A task row with the fields the baselines read."""
    return {
        "example_id": "t/1",
        "history": [{"code": c, "output": o} for c, o in history],
        "code": code,
        "runtime": list(runtime),
        "prompt": "PROMPT",
        "target": "",
    }


def request(task: str, row: dict[str, Any], gen_kwargs: dict[str, Any] = UNTIL) -> Instance:
    """A generate_until request of ``task`` as lm-eval builds it for ``row``."""
    return Instance(
        request_type="generate_until",
        doc=row,
        arguments=(row["prompt"], gen_kwargs),
        idx=0,
        metadata=(task, 0, 1),
    )


HISTORY = [("a = 1", ""), ("a + 1", "2")]


def test_the_baselines_are_registered_without_hiding_lm_evals_own_models() -> None:
    assert get_model("themisto-empty") is EmptyBaseline
    assert get_model("themisto-repeat-last") is RepeatLastBaseline
    assert get_model("themisto-repr-echo") is ReprEchoBaseline
    # lm-eval only lazy-loads its built-in models into an empty registry.
    assert get_model("hf").__name__ == "HFLM"


def test_empty_answers_nothing_for_every_task() -> None:
    requests = [
        request(task, doc("a", HISTORY, [variable("a", "1")]))
        for task in ("themisto_output", "themisto_next_cell_runtime")
    ]
    assert EmptyBaseline().generate_until(requests) == ["", ""]


def test_repeat_last_answers_the_last_cell_code_or_output_by_task() -> None:
    model = RepeatLastBaseline()
    row = doc("print(a)", HISTORY)
    answers = model.generate_until(
        [
            request("themisto_next_cell", row),
            request("themisto_next_cell_runtime", row),
            request("themisto_output", row),
            request("themisto_output_runtime", row),
            request("themisto_output", doc("a = 1")),  # first cell of a session: nothing to repeat
        ]
    )
    assert answers == ["a + 1", "a + 1", "2", "2", ""]


def test_answers_are_cut_at_the_stop_sequences_like_generated_text() -> None:
    row = doc("x", [("print('a')", "a\nCell 3: looks like a header\n")])
    assert RepeatLastBaseline().generate_until([request("themisto_output", row)]) == ["a"]
    assert RepeatLastBaseline().generate_until([request("themisto_output", row, {"until": []})]) == [
        "a\nCell 3: looks like a header\n"
    ]


@pytest.mark.parametrize(
    ("code", "name"),
    [
        ("x", "x"),
        ("print(1)\nx", "x"),
        ("(x)", "x"),
        ("x  # show it", "x"),
        ("x # a comment;", "x"),  # the semicolon is in the comment: IPython still displays
        ("x;", None),  # a trailing semicolon hides the result
        ("x;  # quiet", None),
        ("x.head()", None),
        ("y = x", None),
        ("x + 1", None),
        ("%timeit x", None),  # IPython magic, not Python
        ("if x:\n    x", None),
        ("", None),
    ],
)
def test_displayed_name_is_the_bare_name_a_cell_ends_with(code: str, name: str | None) -> None:
    assert displayed_name(code) == name


def test_repr_echo_answers_the_recorded_repr_of_the_displayed_variable() -> None:
    runtime = [variable("df", "   a\n0  1"), variable("n", "3")]
    model = ReprEchoBaseline()
    answers = model.generate_until(
        [
            request("themisto_output_runtime", doc("df", HISTORY, runtime)),
            request("themisto_output_runtime", doc("n = 4\nn", HISTORY, runtime)),  # n shown, state before: 3
            request("themisto_output_runtime", doc("missing", HISTORY, runtime)),
            request("themisto_output_runtime", doc("df.shape", HISTORY, runtime)),
            request("themisto_output", doc("df", HISTORY)),  # no runtime in the prompt's row
            request("themisto_next_cell_runtime", doc("", HISTORY, runtime)),
        ]
    )
    assert answers == ["   a\n0  1", "3", "", "", "", ""]


def test_baselines_refuse_tasks_they_cannot_answer() -> None:
    with pytest.raises(InputError, match="only answer Themisto tasks"):
        EmptyBaseline().generate_until([request("gsm8k", doc())])
    with pytest.raises(InputError, match="loglikelihood"):
        EmptyBaseline().loglikelihood([request("themisto_output", doc())])
    with pytest.raises(InputError, match="loglikelihood"):
        RepeatLastBaseline().loglikelihood_rolling([request("themisto_output", doc())])


def test_lm_eval_builds_a_baseline_from_its_arguments() -> None:
    model = get_model("themisto-repeat-last").create_from_arg_string("", {"batch_size": 8, "device": "cpu"})
    assert isinstance(model, RepeatLastBaseline)
