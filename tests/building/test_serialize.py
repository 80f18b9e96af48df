"""Prompt rendering: pairs differ exactly by the runtime block, formats, budgets, referenced names."""

from __future__ import annotations

import dataclasses
import json

import pytest

from themisto.building import prompts
from themisto.building.history import RESTART_CELL, Example, HistoryCell, imported_environment, imported_modules
from themisto.building.prompts import (
    MIN_REPR_CHARS,
    PROMPT_REPR_TRUNCATION_MARK,
    RESTART_LINE,
    RUNTIME_FORMATS,
    RenderOptions,
    referenced_names,
    render_history,
    render_pair,
    render_pairs,
    render_runtime,
    shown_variables,
)
from themisto.exceptions import OptionError
from themisto.trajectory import Variable
from themisto.vocabulary import RESTART_MARKER


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


def test_bad_options_are_option_errors_naming_the_option() -> None:
    with pytest.raises(OptionError, match=r"^runtime_format must be one of text, json, referenced, got 'yaml'$"):
        RenderOptions(runtime_format="yaml")
    with pytest.raises(OptionError, match=r"^max_runtime_chars must be at least 200, got 10$"):
        RenderOptions(max_runtime_chars=10)


def test_a_restart_in_the_history_is_a_line_of_its_own_not_a_numbered_cell() -> None:
    history = [HistoryCell("a = 1", ""), RESTART_CELL, HistoryCell("b = 2", "")]
    text = render_history(history)
    assert text.count("Cell ") == 2 and "Cell 1:\n```python\na = 1" in text and "Cell 2:\n```python\nb = 2" in text
    assert text.index("Cell 1:") < text.index(RESTART_LINE) < text.index("Cell 2:")
    assert RESTART_MARKER not in text  # the marker is data; the prompt says it in words


def tight_state() -> tuple[list[Variable], list[int]]:
    """Twelve big variables in snapshot (name) order; ``zz_used`` sorts last and changed first."""
    names = [f"a{i:02d}" for i in range(11)] + ["zz_used"]
    state = [Variable(name, "builtins.list", 100, f"[{name}" + ", 0" * 80 + "]", len=81) for name in names]
    changed = [10 + i for i in range(11)] + [0]  # zz_used is also the oldest
    return state, changed


@pytest.mark.parametrize("runtime_format", RUNTIME_FORMATS)
def test_a_tight_block_keeps_the_variable_the_cell_reads_even_if_it_sorts_last(runtime_format: str) -> None:
    state, changed = tight_state()
    options = RenderOptions(runtime_format=runtime_format, max_runtime_chars=1000, prompt_repr_chars=120)
    task = example("output_prediction", state, code="len(zz_used) + len(a03)")
    task.runtime_changed = changed
    pair = render_pair(task, options)
    shown = [variable.name for variable in shown_variables(pair.runtime_text)]
    assert len(pair.runtime_text) <= 1000
    assert "zz_used" in shown and "a03" in shown
    assert shown == sorted(shown, key=[v.name for v in state].index)  # listed in snapshot order
    if runtime_format != "referenced":
        assert len(shown) < len(state)  # the budget really dropped variables
        # after the variables read, the most recently changed fill the rest: a10, a09, ...
        others = [name for name in shown if name not in ("zz_used", "a03")]
        assert others and others == [f"a{i:02d}" for i in range(11) if i != 3][-len(others) :]


@pytest.mark.parametrize("runtime_format", ["text", "json"])
def test_next_cell_blocks_keep_the_most_recently_changed_variables(runtime_format: str) -> None:
    state, changed = tight_state()
    changed[0] = 99  # a00 changed last of all
    options = RenderOptions(runtime_format=runtime_format, max_runtime_chars=600, prompt_repr_chars=120)
    task = example("next_cell_prediction", state)
    task.runtime_changed = changed
    shown = [variable.name for variable in shown_variables(render_pair(task, options).runtime_text)]
    assert shown and shown[0] == "a00" and "zz_used" not in shown
    recency = dict(zip([v.name for v in state], changed))
    dropped = [v.name for v in state if v.name not in shown]
    assert min(recency[name] for name in shown) >= max(recency[name] for name in dropped)
    # without recency (a hand-made example) the ranking keeps snapshot order
    task.runtime_changed = None
    unranked = [variable.name for variable in shown_variables(render_pair(task, options).runtime_text)]
    assert unranked == [v.name for v in state][: len(unranked)]


@pytest.mark.parametrize("runtime_format", ["text", "json"])
def test_a_tight_block_shows_data_before_functions_classes_and_modules(runtime_format: str) -> None:
    code = [Variable(f"helper{i}", "function", 136, f"<function helper{i} at 0x?>" + " " * 60) for i in range(6)] + [
        Variable("Model", "type", 1064, "<class '__main__.Model'>"),
        Variable("np", "module", 72, "<module 'numpy'>"),
    ]
    data = [Variable(f"frame{i}", "pandas.DataFrame", 9000, f"   a  b\n0  {i}  2" + " " * 60) for i in range(3)]
    state = code + data
    task = example("next_cell_prediction", state)
    task.runtime_changed = [50] * len(code) + [1] * len(data)  # the code changed last, the frames long ago
    options = RenderOptions(runtime_format=runtime_format, max_runtime_chars=800, prompt_repr_chars=120)
    shown = {variable.name for variable in shown_variables(render_pair(task, options).runtime_text)}
    assert {"frame0", "frame1", "frame2"} <= shown  # the data came first
    assert len(shown) < len(state)  # and the budget left code out


def test_the_library_line_names_what_the_cells_imported() -> None:
    code = "import numpy as np, matplotlib.pyplot as plt\nfrom sklearn.linear_model import X\n%timeit f()\n!pip list"
    assert imported_modules(code) == {"numpy", "matplotlib", "sklearn"}
    recorded = (("python", "3.11.7"), ("numpy", "2.4.6"), ("scikit-learn", "1.9.1"), ("torch", "2.13.0"))
    assert imported_environment(recorded, imported_modules(code)) == recorded[:3]  # torch was never imported
    assert imported_environment(recorded, set()) == recorded[:1]


def test_the_header_gives_memory_and_the_previous_cells_execution_time() -> None:
    task = example("output_prediction", variables(2))
    task.execution_time_before = 1.23456
    header = render_pair(task, RenderOptions()).runtime_text.splitlines()[0]
    assert header == (
        "Runtime state of the kernel before this cell "
        "(2 user variables, kernel memory 123456 bytes, previous cell ran in 1.235 s):"
    )


@pytest.mark.parametrize("runtime_format", ["text", "json"])
def test_shown_variables_reads_back_what_the_block_shows(runtime_format: str) -> None:
    state = [
        Variable("df", "pandas.DataFrame", 4096, "   a  b\n0  1  2", shape=[1, 2], len=1),
        Variable("n", "int", 28, "3"),
        Variable("s", "str", None, "'x'", repr_truncated=True),
        Variable("big", "list", 900, "[" + "1, " * 200 + "1]", len=201),
    ]
    text = render_runtime(state, RenderOptions(runtime_format=runtime_format, prompt_repr_chars=100), [])
    back = {variable.name: variable for variable in shown_variables(text)}
    assert list(back) == ["df", "n", "s", "big"]
    assert (back["df"].type, back["df"].size_bytes, back["df"].shape, back["df"].len) == (
        "pandas.DataFrame",
        4096,
        [1, 2],
        1,
    )
    assert back["df"].repr == "   a  b\n0  1  2" and not back["df"].repr_truncated
    assert (back["n"].repr, back["n"].repr_truncated, back["n"].size_bytes) == ("3", False, 28)
    assert back["s"].repr_truncated and back["s"].size_bytes is None  # cut by the snapshot
    assert back["big"].repr_truncated and len(back["big"].repr) < 100  # cut by the block
    assert shown_variables("") == [] and shown_variables("not a block\n- x: int, 1 bytes\n") == []


@pytest.mark.parametrize("runtime_format", RUNTIME_FORMATS)
def test_when_the_variables_read_do_not_fit_whole_their_reprs_are_cut_shorter(runtime_format: str) -> None:
    state = [
        Variable(f"v{i}", "numpy.ndarray", 800, "array([" + "1.5, " * 150 + "1.5])", shape=[151]) for i in range(9)
    ]
    code = "v1 + v2 + v3 + v4 + v5 + v6"  # six arrays whose whole entries need about 2,400 characters
    options = RenderOptions(runtime_format=runtime_format, max_runtime_chars=1200, prompt_repr_chars=300)
    block = render_pair(example("output_prediction", state, code=code), options).runtime_text
    shown = {variable.name: variable for variable in shown_variables(block)}
    assert len(block) <= 1200
    assert {f"v{i}" for i in range(1, 7)} <= set(shown)
    shortest = MIN_REPR_CHARS - len(PROMPT_REPR_TRUNCATION_MARK)  # a cut repr ends with the mark, which reading drops
    assert all(shown[f"v{i}"].repr_truncated and shortest <= len(shown[f"v{i}"].repr) < 300 for i in range(1, 7))


_DESCRIBED = Variable(
    "frame", "pandas.DataFrame", 900, "   a\n0  1", shape=[1, 1], len=1, description="columns: a int64"
)


@pytest.mark.parametrize("runtime_format", ["text", "json"])
def test_a_rendered_entry_is_reused_only_for_a_variable_described_alike(runtime_format: str) -> None:
    # blocks of variables that differ from the first in one fact each, rendered after it: each block must be the
    # one rendered with nothing cached, whatever entry the first left behind
    options = RenderOptions(runtime_format=runtime_format)
    variants = [
        _DESCRIBED,
        dataclasses.replace(_DESCRIBED, name="other"),
        dataclasses.replace(_DESCRIBED, type="pandas.Series"),
        dataclasses.replace(_DESCRIBED, size_bytes=901),
        dataclasses.replace(_DESCRIBED, size_bytes=None),
        dataclasses.replace(_DESCRIBED, shape=[1, 2]),
        dataclasses.replace(_DESCRIBED, shape=None),
        dataclasses.replace(_DESCRIBED, len=2),
        dataclasses.replace(_DESCRIBED, repr="   a\n0  2"),
        dataclasses.replace(_DESCRIBED, repr_truncated=True),
        dataclasses.replace(_DESCRIBED, description="columns: b int64"),
        dataclasses.replace(_DESCRIBED, description=None),
    ]
    for described in (True, False):
        chosen = dataclasses.replace(options, descriptions=described)
        for limit in (options.prompt_repr_chars, MIN_REPR_CHARS):
            blocks = [
                render_runtime([variable], dataclasses.replace(chosen, prompt_repr_chars=limit), [])
                for variable in variants
            ]
            prompts._ENTRIES.clear()
            fresh = []
            for variable in variants:
                fresh.append(render_runtime([variable], dataclasses.replace(chosen, prompt_repr_chars=limit), []))
                prompts._ENTRIES.clear()
            assert blocks == fresh
            if described and limit == options.prompt_repr_chars:  # every fact shows: each block is another
                assert len(set(blocks)) == len(blocks)
