"""Prompt rendering: pairs differ exactly by the runtime block, formats, budgets, referenced names."""

from __future__ import annotations

import json

import pytest

from themisto.building.prompts import (
    PROMPT_REPR_TRUNCATION_MARK,
    RUNTIME_FORMATS,
    RenderOptions,
    referenced_names,
    render_pair,
    render_pairs,
    render_runtime,
)
from themisto.building.tasks import Example, HistoryCell
from themisto.exceptions import InputError
from themisto.trajectory import Variable


def variables(count: int, repr_chars: int = 40) -> list[Variable]:
    return [
        Variable(f"var{i}", "builtins.list", 100 + i, f"[{i}" + "," * repr_chars + "]", len=repr_chars, shape=None)
        for i in range(count)
    ]


def example(task: str, runtime: list[Variable], code: str = "print(var1)") -> Example:
    return Example(
        task=task,
        example_id="t/3",
        trajectory_id="t",
        step=3,
        history=[HistoryCell("import math", ""), HistoryCell("var1 = [1]\nvar1", "[1]\n"), HistoryCell("var2 = 3", "")],
        history_dropped=0,
        code=code if task == "output_prediction" else "",
        runtime=runtime,
        memory_bytes_before=123456,
        target="[1]\n",
        target_is_error=False,
        stable=None,
    )


@pytest.mark.parametrize("runtime_format", RUNTIME_FORMATS)
@pytest.mark.parametrize("task", ["output_prediction", "next_cell_prediction"])
@pytest.mark.parametrize("count", [0, 3, 60])
def test_prompts_differ_exactly_by_the_runtime_block(runtime_format: str, task: str, count: int) -> None:
    pair = render_pair(example(task, variables(count)), RenderOptions(runtime_format=runtime_format))
    assert pair.runtime_text  # the runtime condition always shows a block, even for an empty state
    assert pair.runtime_text not in pair.without_runtime
    assert pair.with_runtime.replace(pair.runtime_text, "", 1) == pair.without_runtime
    assert len(pair.with_runtime) == len(pair.without_runtime) + len(pair.runtime_text)
    assert (
        "print(var1)" in pair.without_runtime
        if task == "output_prediction"
        else "Predict the code" in pair.without_runtime
    )


@pytest.mark.parametrize("runtime_format", RUNTIME_FORMATS)
def test_pairs_of_one_step_render_as_each_example_alone(runtime_format: str) -> None:
    options = RenderOptions(runtime_format=runtime_format)
    state = variables(8)
    step = [example(task, state) for task in ("output_prediction", "next_cell_prediction")]
    step[1].history = step[0].history  # as for the two examples of one step
    together = render_pairs(step, options)
    assert together == [render_pair(e, options) for e in step]
    # "referenced" depends on each task's code; the other formats show the same block to both tasks
    assert (together[0].runtime_text == together[1].runtime_text) is (runtime_format != "referenced")
    other_state = example("next_cell_prediction", variables(2))
    other_state.history = step[0].history
    with pytest.raises(ValueError, match="one step"):
        render_pairs([step[0], other_state], options)


def test_text_format_shows_name_type_size_and_repr() -> None:
    text = render_runtime([Variable("df", "pandas.DataFrame", 4096, "   a\n0  1", shape=[1, 1])], RenderOptions(), [])
    assert "- df: pandas.DataFrame, 4096 bytes, shape 1x1\n    a\n    0  1\n" in text.replace("       a", "    a")


@pytest.mark.parametrize("runtime_format", RUNTIME_FORMATS)
@pytest.mark.parametrize("budget", [200, 500, 1500])
def test_runtime_block_respects_its_budget_deterministically(runtime_format: str, budget: int) -> None:
    options = RenderOptions(runtime_format=runtime_format, max_runtime_chars=budget, prompt_repr_chars=60)
    state = variables(50, repr_chars=200)
    code = ["print(" + " + ".join(v.name for v in state) + ")"]
    first = render_runtime(state, options, code, memory=10**9)
    assert len(first) <= budget
    assert first == render_runtime(state, options, code, memory=10**9)
    shown = sum(f'"name": "var{i}"' in first or f"- var{i}:" in first for i in range(50))
    assert 0 <= shown < 50
    if runtime_format == "json":
        payload = json.loads(first.split(":\n", 1)[1])
        assert payload["not_shown"] == 50 - len(payload["variables"])
        assert all(len(v["repr"]) <= 60 and v["repr_truncated"] for v in payload["variables"])
    else:
        assert f"... {50 - shown} more variables not shown" in first
        assert first.count(PROMPT_REPR_TRUNCATION_MARK) == shown


def test_a_block_that_fits_shows_every_variable() -> None:
    state = variables(5)
    payload = json.loads(render_runtime(state, RenderOptions(runtime_format="json"), []).split(":\n", 1)[1])
    assert [v["name"] for v in payload["variables"]] == [v.name for v in state]
    assert payload["not_shown"] == 0


def test_referenced_keeps_only_variables_the_code_uses() -> None:
    state = variables(6)
    options = RenderOptions(runtime_format="referenced")
    text = render_runtime(state, options, ["%matplotlib inline\nresult = var2.count(0) + var4\n!ls"])
    assert "- var2:" in text and "- var4:" in text
    assert not any(f"- var{i}:" in text for i in (0, 1, 3, 5))
    assert "2 variables referenced by the code, out of 6" in text


def test_referenced_for_next_cell_uses_the_recent_history() -> None:
    options = RenderOptions(runtime_format="referenced", referenced_window=1)
    pair = render_pair(example("next_cell_prediction", variables(4)), options)
    # only the last history cell ("var2 = 3") counts with a window of one
    assert "- var2:" in pair.runtime_text and "- var1:" not in pair.runtime_text


def test_referenced_names_parse_code_and_fall_back_on_syntax_errors() -> None:
    assert referenced_names("df.groupby('a').sum()\nz = f'{w}'") == {"df", "z", "w"}
    assert referenced_names("%%time\nx = y") == {"x", "y"}
    assert referenced_names("for x in df\n    print(x") >= {"df", "x", "print"}


def test_code_with_backticks_keeps_its_fence_intact() -> None:
    pair = render_pair(example("output_prediction", [], code='s = """```python\\nx\\n```"""'), RenderOptions())
    assert "````python\n" in pair.without_runtime


def test_bad_options_are_input_errors() -> None:
    with pytest.raises(InputError, match="runtime format"):
        RenderOptions(runtime_format="yaml")
    with pytest.raises(InputError, match="at least 200"):
        RenderOptions(max_runtime_chars=10)
