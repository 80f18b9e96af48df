"""The baseline predictors, driven through lm-eval's own Instance requests and model registry.

Importing lm-eval's model registry is most of its time.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pytest
from lm_eval.api.instance import Instance
from lm_eval.api.registry import get_model

from themisto.building.prompts import RenderOptions, render_runtime
from themisto.evaluation.baselines import (
    EmptyBaseline,
    HeuristicBaseline,
    MajorityBaseline,
    RepeatLastBaseline,
    ReprEchoBaseline,
    ShapeMajorityBaseline,
    SimilarCellBaseline,
    StateLookupBaseline,
    code_shape,
    displayed_name,
)
from themisto.exceptions import InputError
from themisto.trajectory import Variable
from themisto.vocabulary import RESTART_MARKER

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


def doc(
    code: str = "", history: Sequence[tuple[str, str]] = (), runtime: Sequence[dict[str, Any]] = ()
) -> dict[str, Any]:
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


@pytest.mark.slow
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


def block(*variables: Variable) -> str:
    """A real runtime block showing ``variables``, as the builder renders it."""
    return render_runtime(list(variables), RenderOptions(), [])


def runtime_doc(code: str, runtime_text: str, target: str = "") -> dict[str, Any]:
    row = doc(code, HISTORY)
    row["runtime_text"], row["target"] = runtime_text, target
    return row


def test_the_new_baselines_are_registered_under_their_names() -> None:
    assert get_model("themisto-state-lookup") is StateLookupBaseline
    assert get_model("themisto-majority") is MajorityBaseline
    assert get_model("themisto-heuristic") is HeuristicBaseline
    assert get_model("themisto-similar-cell") is SimilarCellBaseline
    assert get_model("themisto-shape-majority") is ShapeMajorityBaseline


def test_state_lookup_answers_from_the_runtime_block_alone() -> None:
    frame = Variable("df", "pandas.DataFrame", 4096, "   a\n0  1\n1  2", shape=[2, 1], len=2)
    score = Variable("acc", "numpy.float64", 8, "np.float64(0.9812)")
    counts = Variable("counts", "dict", 232, "{'a': 3, 'b': 5}", len=2)
    shown = block(frame, score, counts)
    model = StateLookupBaseline()
    cases = {
        "df": "   a\n0  1\n1  2",  # a bare name: its whole repr
        "df.shape": "(2, 1)",
        "len(df)": "2",
        "type(df)": "<class 'pandas.DataFrame'>",
        "print(f'accuracy {acc:.2f}')": "accuracy 0.98",
        "counts['b'] * 2": "10",
        "df.shape[0], len(counts)": "(2, 2)",
        "df.head()": "",  # a method call it cannot work out: nothing
        "x": "",  # not in the block
        "df;": "",  # a hidden result
        "n = len(df)\nn": "",  # more than one expression: the block is the state before the cell
    }
    requests = [request("themisto_output_runtime", runtime_doc(code, shown)) for code in cases]
    assert model.generate_until(requests) == list(cases.values())
    # the same rows without the runtime block (the plain task): nothing to read, so what the
    # heuristic makes of the code and history, here nothing for every case
    plain = [request("themisto_output", runtime_doc(code, "")) for code in cases]
    assert model.generate_until(plain) == [""] * len(cases)
    assert model.generate_until([request("themisto_next_cell_runtime", runtime_doc("", shown))]) == ["a + 1"]


def test_state_lookup_answers_what_the_plain_prompt_allows_in_every_arm_and_adds_only_the_block() -> None:
    model, heuristic = StateLookupBaseline(), HeuristicBaseline()
    shown = block(Variable("a", "int", 28, "5"))  # the block says a is 5 now, whatever the history showed
    rows = {
        "a + 1": "6",  # re-run of an earlier cell: the plain arm copies "2", the block decides 6
        "print(2 * 3)": "6",  # literals: the plain prompt decides it, in both arms alike
        "plt.plot(x)": "<Figure size 640x480 with 1 Axes>",  # the heuristic's figure, the block adds nothing
        "b + 1": "",  # neither the history nor the block decides it
    }
    for code, runtime_answer in rows.items():
        for task in ("themisto_output", "themisto_next_cell"):
            plain_row = runtime_doc(code, "")
            # the plain arm is the heuristic's answer, output and next cell alike
            assert model.generate_until([request(task, plain_row)]) == heuristic.generate_until(
                [request(task, plain_row)]
            )
        runtime = model.generate_until([request("themisto_output_runtime", runtime_doc(code, shown))])
        assert runtime == [runtime_answer]
    assert model.generate_until([request("themisto_output", runtime_doc("a + 1", ""))]) == ["2"]


def test_state_lookup_does_not_read_what_the_block_left_out() -> None:
    big = [Variable(f"a{i}", "list", 900, "[" + "0, " * 100 + "0]", len=101) for i in range(10)]
    hidden = Variable("zz", "list", 900, "[" + "7, " * 100 + "7]", len=101)  # ranked last: no room left
    text = render_runtime([*big, hidden], RenderOptions(max_runtime_chars=1000), [], changed=[1] * 10 + [0])
    assert "- zz:" not in text and "- a0:" in text
    row = runtime_doc("len(zz)", text)
    row["runtime"] = [vars(v) for v in [*big, hidden]]  # the row has every variable; the block does not
    assert StateLookupBaseline().generate_until([request("themisto_output_runtime", row)]) == [""]
    cut = block(Variable("s", "str", 80, "'" + "x" * 500 + "'"))  # the repr is cut in the block
    assert StateLookupBaseline().generate_until([request("themisto_output_runtime", runtime_doc("s", cut))]) == [""]


def test_majority_answers_each_tasks_most_frequent_target() -> None:
    output_targets = ["b", "a", "a", "b", "c"]  # a tie between a and b: the earliest (b) wins
    next_targets = ["x = 1", "y", "y"]
    requests = [request("themisto_output", runtime_doc("", "", t)) for t in output_targets] + [
        request("themisto_next_cell_runtime", runtime_doc("", "", t)) for t in next_targets
    ]
    assert MajorityBaseline().generate_until(requests) == ["b"] * 5 + ["y"] * 3
    with pytest.raises(InputError, match="only answer Themisto tasks"):
        MajorityBaseline().generate_until([request("gsm8k", doc())])


@pytest.mark.parametrize(
    ("code", "history", "expected"),
    [
        ("df.describe()", [("df.describe()", "old table"), ("x = 1", "")], "old table"),  # a re-run: its output
        ("plt.plot(x)", [], "<Figure size 640x480 with 1 Axes>"),
        ("fig, axes = plt.subplots(2, 3, figsize=(12, 4.5))\nplt.show()", [], "<Figure size 1200x450 with 6 Axes>"),
        ("df['a'].hist(bins=5);", [], "<Figure size 640x480 with 1 Axes>"),
        ("print('done', 3 * 4)", [], "done 12"),
        ("[1, 2] + [3]", [], "[1, 2, 3]"),
        ("model.fit(X, y)", [("other()", "1")], ""),
        ("import numpy as np", [], ""),
    ],
)
def test_heuristic_output_rules(code: str, history: list[tuple[str, str]], expected: str) -> None:
    answer = HeuristicBaseline().generate_until([request("themisto_output", doc(code, history))])
    assert answer == [expected]


def test_heuristic_next_cell_replays_what_followed_the_last_cell_before() -> None:
    model = HeuristicBaseline()
    replay = [
        ("import pandas", ""),
        ("df = load()", ""),
        ("df.head()", "t"),
        (RESTART_MARKER, ""),
        ("import pandas", ""),
    ]
    fresh = [("a = 1", ""), ("b = 2", "")]
    answers = model.generate_until(
        [
            request("themisto_next_cell", doc("", replay)),  # after a restart the same sequence comes again
            request("themisto_next_cell", doc("", fresh)),  # nothing to replay: run the last cell again
            request("themisto_next_cell", doc("", [])),
        ]
    )
    assert answers == ["df = load()", "b = 2", ""]


def test_restart_markers_are_no_cells_to_repeat() -> None:
    row = doc("x", [("a = 1", "1"), (RESTART_MARKER, "")])
    answers = RepeatLastBaseline().generate_until([request("themisto_next_cell", row), request("themisto_output", row)])
    assert answers == ["a = 1", "1"]


def test_similar_cell_copies_the_output_of_the_most_alike_earlier_cell_without_a_rerun() -> None:
    history = [("sales.head()", "   a\n0  1"), ("sales.describe()", "count 3"), ("x = 2", "")]
    answer = SimilarCellBaseline().generate_until
    # no identical earlier cell (the heuristic answers nothing), but sales.describe() is like it
    assert HeuristicBaseline().generate_until(
        [request("themisto_output", doc("sales.describe(include='all')", history))]
    ) == [""]
    assert answer([request("themisto_output", doc("sales.describe(include='all')", history))]) == ["count 3"]
    assert answer([request("themisto_output", doc("import os", history))]) == [""]  # nothing alike: the heuristic
    # next cell: what followed the earlier cell most like the last one
    runs = [("df = load(1)", ""), ("df.plot()", ""), ("df2 = load(2)", "")]
    assert answer([request("themisto_next_cell", doc("", runs))]) == ["df.plot()"]


def test_code_shape_abstracts_names_numbers_and_strings_but_keeps_calls() -> None:
    assert code_shape("df.head(3)") == code_shape("sales.head(10)") == "_.head(0)"
    assert code_shape("print(len(rows), 'rows')") == "print(len(_), '')"
    assert code_shape("len(x)") != code_shape("x.shape")


def test_shape_majority_answers_the_other_examples_most_frequent_target_of_the_same_shape() -> None:
    cases = [
        ("df.shape", "(3, 2)"), ("sales.shape", "(5, 5)"), ("frame.shape", "(5, 5)"), ("t.shape", "(5, 5)"),
        ("df.dtypes", "a int64"), ("sales.dtypes", "b str"), ("len(x)", "4"), ("print(1)", "1"),
    ]  # fmt: skip
    rows = [runtime_doc(code, "", target) for code, target in cases]
    answers = ShapeMajorityBaseline().generate_until([request("themisto_output", row) for row in rows])
    assert answers[:4] == ["(5, 5)"] * 4
    assert answers[4:6] == ["b str", "a int64"]  # its own target never votes for an example
    assert answers[6:] == ["", "1"]  # alone in its shape: the heuristic (a literal print resolves)
