"""Example construction and selection: no after-state leakage, restarts, filters, sampling, history budget."""

from __future__ import annotations

from pathlib import Path

import pytest
from synthetic import synthetic_steps, write_steps

from themisto.building.history import RESTART_CELL, HistoryCell, HistoryWindow, iter_examples
from themisto.building.selection import PAPER_MIN_HISTORY, SelectionOptions, select, stratified_sample
from themisto.exceptions import InputError, OptionError
from themisto.trajectory import Step, Variable
from themisto.vocabulary import RESTART_MARKER, TASKS


def step(number: int, code: str, output: str = "", runtime: dict[str, str] | None = None, **extra) -> Step:
    variables = [Variable(name, "builtins.int", 28, value) for name, value in (runtime or {}).items()]
    return Step(
        trajectory_id="t",
        step=number,
        cell_id=f"c{number}",
        code=code,
        output=output,
        error=extra.pop("error", None),
        execution_time=0.01,
        memory_bytes=1000 + number,
        runtime=variables,
        state_hash=f"h{number}",
        **extra,
    )


def test_runtime_is_the_state_before_the_step_never_after(tmp_path: Path) -> None:
    path = write_steps(
        tmp_path / "t.jsonl",
        [
            step(0, "x = 1", runtime={"x": "1"}),
            step(1, "x = 2\nprint(x)", "2\n", runtime={"x": "2"}),
            step(2, "y = x * 10", runtime={"x": "2", "y": "20"}),
        ],
    )
    for task in TASKS:
        examples = {
            e.step: e
            for e in iter_examples([path], task, ["t/0", "t/1", "t/2"], SelectionOptions(max_context_chars=10_000))
        }
        assert examples[0].runtime == []
        assert [(v.name, v.repr) for v in examples[1].runtime] == [("x", "1")]  # not the "2" that step 1 makes
        assert [(v.name, v.repr) for v in examples[2].runtime] == [("x", "2")]
        assert examples[1].memory_bytes_before == 1000
    output = {
        e.step: e
        for e in iter_examples([path], "output_prediction", ["t/1"], SelectionOptions(max_context_chars=10_000))
    }[1]
    assert (output.code, output.target) == ("x = 2\nprint(x)", "2\n")
    next_cell = {
        e.step: e
        for e in iter_examples([path], "next_cell_prediction", ["t/1"], SelectionOptions(max_context_chars=10_000))
    }[1]
    assert (next_cell.code, next_cell.target) == ("", "x = 2\nprint(x)")
    assert next_cell.history == [HistoryCell("x = 1", "")]


def test_a_restart_empties_the_runtime_and_shows_as_a_marker_in_the_whole_history(tmp_path: Path) -> None:
    # The history is every earlier execution, across restarts, as in the paper (it is not cut at the
    # last restart). The runtime state still describes the live kernel.
    path = write_steps(
        tmp_path / "t.jsonl",
        [
            step(0, "a = 1", runtime={"a": "1"}),
            step(1, "b = 2", runtime={"a": "1", "b": "2"}),
            step(2, "c = 3", runtime={"c": "3"}, restarted=True),
            step(3, "print(c)", "3\n", runtime={"c": "3"}),
        ],
    )
    ids = ["t/1", "t/2", "t/3"]
    for task in TASKS:
        examples = {e.step: e for e in iter_examples([path], task, ids, SelectionOptions(max_context_chars=10_000))}
        assert [v.name for v in examples[1].runtime] == ["a"]
        assert examples[2].runtime == [] and examples[2].memory_bytes_before is None
        assert examples[2].execution_time_before is None
        before_restart = [HistoryCell("a = 1", ""), HistoryCell("b = 2", "")]
        assert examples[2].history == [*before_restart, RESTART_CELL]
        assert RESTART_CELL == HistoryCell(RESTART_MARKER, "")
        assert [v.name for v in examples[3].runtime] == ["c"]
        assert examples[3].execution_time_before == 0.01
        assert examples[3].history == [*before_restart, RESTART_CELL, HistoryCell("c = 3", "")]
        assert [examples[i].step_kind for i in (1, 2, 3)] == ["first_run", "after_restart", "first_run"]


def test_a_restart_before_the_first_step_adds_no_marker(tmp_path: Path) -> None:
    path = write_steps(tmp_path / "t.jsonl", [step(0, "a = 1", restarted=True), step(1, "a")])
    examples = list(
        iter_examples([path], "next_cell_prediction", ["t/0", "t/1"], SelectionOptions(max_context_chars=10_000))
    )
    assert [e.history for e in examples] == [[], [HistoryCell("a = 1", "")]]
    assert examples[0].step_kind == "first_run"


def test_the_budget_cuts_whole_cells_markers_included_from_the_oldest_end(tmp_path: Path) -> None:
    steps = synthetic_steps("r", 300, restart_rate=0.1)
    assert sum(s.restarted for s in steps) > 10
    path = write_steps(tmp_path / "r.jsonl", steps)
    # the whole history of every step: its cells and a marker before each restarted step
    timeline: list[HistoryCell] = []
    expected_full: dict[int, list[HistoryCell]] = {}
    for s in steps:
        if s.restarted and s.step > 0:
            timeline.append(RESTART_CELL)
        expected_full[s.step] = list(timeline)
        timeline.append(HistoryCell(s.code, s.output))
    ids = [f"r/{i}" for i in range(300)]
    markers_seen = 0
    for example in iter_examples([path], "output_prediction", ids, SelectionOptions(max_context_chars=300)):
        whole = expected_full[example.step]
        assert sum(cell.chars for cell in example.history) <= 300
        assert example.history == whole[len(whole) - len(example.history) :]
        assert example.history_dropped == len(whole) - len(example.history)
        if len(example.history) < len(whole):  # the longest suffix that fits
            assert sum(cell.chars for cell in whole[len(whole) - len(example.history) - 1 :]) > 300
        markers_seen += sum(cell == RESTART_CELL for cell in example.history)
    assert markers_seen > 0


def test_runtime_variables_carry_the_step_they_last_changed_at(tmp_path: Path) -> None:
    path = write_steps(
        tmp_path / "t.jsonl",
        [
            step(0, "a = 1; b = 1", runtime={"a": "1", "b": "1"}),
            step(1, "b = 2", runtime={"a": "1", "b": "2"}),
            step(2, "c = 0", runtime={"a": "1", "b": "2", "c": "0"}),
            step(3, "a = 1", runtime={"a": "1", "b": "2", "c": "0"}),  # same description: no change
            step(4, "x = 9", runtime={"x": "9"}, restarted=True),
            step(5, "x"),
        ],
    )
    examples = {
        e.step: e
        for e in iter_examples(
            [path], "next_cell_prediction", [f"t/{i}" for i in range(6)], SelectionOptions(max_context_chars=999)
        )
    }
    assert examples[0].runtime_changed == []
    assert examples[2].runtime_changed == [0, 1]  # a, b
    assert examples[4].runtime_changed == []  # restarted: an empty kernel
    assert examples[3].runtime_changed == [0, 1, 2]
    assert examples[5].runtime_changed == [4]  # counted afresh after the restart


def _lengths_corpus(tmp_path: Path, n: int) -> Path:
    # step i has code and output of length i + 1, so the quantile cut is easy to predict
    steps = [step(i, "c" * (i + 1), "o" * (i + 1)) for i in range(n)]
    return write_steps(tmp_path / "t.jsonl", steps)


def test_quantile_filter_drops_the_longest_steps(tmp_path: Path) -> None:
    path = _lengths_corpus(tmp_path, 300)
    selection = select([path], SelectionOptions(sample="all"))
    # the 0.99 quantile of 1..300 is 297.01: lengths 298, 299 and 300 go
    assert selection.max_code_chars == pytest.approx(297.01)
    kept = set(selection.tasks["output_prediction"].full)
    assert kept == {f"t/{i}" for i in range(297)}
    loose = select([path], SelectionOptions(sample="all", quantile=1.0))
    assert len(loose.tasks["output_prediction"].full) == 300


def test_errors_are_excluded_by_default_and_kept_on_request(tmp_path: Path) -> None:
    error = {"ename": "ZeroDivisionError", "evalue": "division by zero"}
    path = write_steps(
        tmp_path / "t.jsonl",
        [step(0, "x = 1"), step(1, "1 / 0", "ZeroDivisionError: division by zero", error=error), step(2, "x")],
    )
    default = select([path], SelectionOptions(sample="all", quantile=1.0, include_empty=True))
    assert default.tasks["output_prediction"].full == ["t/0", "t/2"]
    kept = select([path], SelectionOptions(sample="all", quantile=1.0, include_errors=True, include_empty=True))
    assert kept.tasks["output_prediction"].full == ["t/0", "t/1", "t/2"]
    (example,) = iter_examples([path], "output_prediction", ["t/1"], SelectionOptions(max_context_chars=1000))
    assert example.target_is_error and example.target == "ZeroDivisionError: division by zero"


def test_stable_only_keeps_reproducible_steps(tmp_path: Path) -> None:
    path = write_steps(
        tmp_path / "t.jsonl", [step(0, "a", stable=True), step(1, "b", stable=False), step(2, "c", stable=None)]
    )
    chosen = select([path], SelectionOptions(sample="all", quantile=1.0, stable_only=True, include_empty=True))
    # one eligibility rule for both tasks: the step's output reproduced
    assert chosen.tasks["output_prediction"].full == chosen.tasks["next_cell_prediction"].full == ["t/0"]
    unknown = write_steps(tmp_path / "u.jsonl", [step(0, "a")])
    with pytest.raises(InputError, match="stability"):
        select([unknown], SelectionOptions(stable_only=True))


def test_stable_marks_the_target_an_output_as_recorded_and_code_always(tmp_path: Path) -> None:
    flags = [True, False, None]
    path = write_steps(tmp_path / "t.jsonl", [step(i, f"x{i}", stable=flag) for i, flag in enumerate(flags)])
    ids = ["t/0", "t/1", "t/2"]
    assert [
        e.stable for e in iter_examples([path], "output_prediction", ids, SelectionOptions(max_context_chars=1000))
    ] == flags
    assert [
        e.stable for e in iter_examples([path], "next_cell_prediction", ids, SelectionOptions(max_context_chars=1000))
    ] == [True, True, True]
    chosen = select([path], SelectionOptions(sample="all", quantile=1.0, include_empty=True))
    assert chosen.tasks["output_prediction"].stability == {"test": (1, 1, 1), "full": (1, 1, 1)}
    assert chosen.tasks["next_cell_prediction"].stability == {"test": (3, 0, 0), "full": (3, 0, 0)}


def test_empty_targets_are_excluded_by_default_per_task_and_kept_on_request(tmp_path: Path) -> None:
    path = write_steps(
        tmp_path / "t.jsonl",
        [step(0, "x = 1"), step(1, "x", "1"), step(2, "  \n", ""), step(3, "print(' ')", " \n"), step(4, "x", "1")],
    )
    default = select([path], SelectionOptions(sample="all", quantile=1.0))
    # output prediction: no cell without (visible) output; next cell: no empty cell
    assert default.tasks["output_prediction"].full == ["t/1", "t/4"]
    assert default.tasks["next_cell_prediction"].full == ["t/0", "t/1", "t/3", "t/4"]
    kept = select([path], SelectionOptions(sample="all", quantile=1.0, include_empty=True))
    assert (
        kept.tasks["output_prediction"].full == kept.tasks["next_cell_prediction"].full == [f"t/{i}" for i in range(5)]
    )


def test_min_history_follows_the_sample_and_keeps_steps_with_fewer_earlier_executions_out_of_the_test_split(
    tmp_path: Path,
) -> None:
    assert SelectionOptions().min_history == PAPER_MIN_HISTORY == 5  # the paper's selected cells
    assert SelectionOptions(sample="all").min_history == 0
    assert SelectionOptions(sample="all", min_history=2).min_history == 2
    path = write_steps(tmp_path / "t.jsonl", [step(i, f"x{i}", str(i)) for i in range(8)])
    every = [f"t/{i}" for i in range(8)]
    chosen = select([path], SelectionOptions(sample="all", quantile=1.0, min_history=3))
    for task in TASKS:
        assert chosen.tasks[task].test == ["t/3", "t/4", "t/5", "t/6", "t/7"]
        assert chosen.tasks[task].full == every  # full is every eligible example
    paper = select([path], SelectionOptions(quantile=1.0))
    assert paper.tasks["output_prediction"].test == ["t/5", "t/6", "t/7"]
    assert paper.tasks["output_prediction"].full == every
    with pytest.raises(OptionError, match=r"^min_history must be at least 0, got -1$"):
        SelectionOptions(min_history=-1)


def test_paper_sample_draws_10_180_10_from_rank_quartiles() -> None:
    lengths = {f"t/{i}": i for i in range(1000)}
    chosen, strata = stratified_sample(lengths, "0:output_prediction")
    assert strata == (250, 500, 250)
    ranks = sorted(lengths[key] for key in chosen)
    assert len(ranks) == 200
    assert sum(r < 250 for r in ranks) == 10
    assert sum(250 <= r < 750 for r in ranks) == 180
    assert sum(r >= 750 for r in ranks) == 10
    assert stratified_sample(lengths, "0:output_prediction")[0] == chosen
    assert stratified_sample(lengths, "1:output_prediction")[0] != chosen


def test_short_strata_give_all_they_have() -> None:
    chosen, strata = stratified_sample({f"t/{i}": i for i in range(100)}, "0:x")
    assert strata == (25, 50, 25)
    assert len(chosen) == 10 + 50 + 10


def test_paper_sample_on_a_trajectory_corpus(tmp_path: Path) -> None:
    path = write_steps(tmp_path / "s.jsonl", synthetic_steps("s", 800, error_rate=0.05))
    selection = select([path], SelectionOptions())
    for task in TASKS:
        chosen = selection.tasks[task]
        assert len(chosen.test) == 200
        assert set(chosen.test) <= set(chosen.full)
        order = {key: index for index, key in enumerate(chosen.full)}
        assert [order[key] for key in chosen.test] == sorted(order[key] for key in chosen.test)
    assert selection.tasks["output_prediction"].test != selection.tasks["next_cell_prediction"].test


def test_a_history_budget_of_0_keeps_the_whole_history() -> None:
    window = HistoryWindow(0)
    session = [HistoryCell("x" * 500, "y" * 500) for _ in range(3000)]  # past the compaction at 1,024 cells
    for cell in session:
        window.append(cell)
    assert window.cells == session and window.dropped == 0


@pytest.mark.parametrize("budget", [1, 7, 30, 100, 10_000])
def test_history_window_is_the_longest_suffix_of_whole_cells_within_the_budget(budget: int) -> None:
    # 2,500 cells: enough for the window to discard the cells it slid past (after 1,024)
    session = [HistoryCell("x" * (i % 7), "y" * (i % 11)) for i in range(2500)]
    window = HistoryWindow(budget)
    for end in range(len(session) + 1):
        seen, history = session[:end], window.cells
        assert sum(cell.chars for cell in history) <= budget
        assert history == seen[len(seen) - len(history) :]  # a suffix of whole cells
        assert window.dropped == len(seen) - len(history)
        if len(history) < len(seen):  # and the longest one: one more cell would not fit
            assert sum(cell.chars for cell in seen[len(seen) - len(history) - 1 :]) > budget
        if end < len(session):
            window.append(session[end])
    window.clear()
    assert (window.cells, window.dropped) == ([], 0)


def test_examples_respect_the_context_budget(tmp_path: Path) -> None:
    steps = synthetic_steps("b", 200, restart_rate=0.0)
    path = write_steps(tmp_path / "b.jsonl", steps)
    by_step = {s.step: s for s in steps}
    ids = [f"b/{i}" for i in range(200)]
    for example in iter_examples([path], "next_cell_prediction", ids, SelectionOptions(max_context_chars=250)):
        assert sum(cell.chars for cell in example.history) <= 250
        # the history is exactly the latest whole cells before the step
        expected = [
            HistoryCell(by_step[i].code, by_step[i].output)
            for i in range(example.step - len(example.history), example.step)
        ]
        assert example.history == expected
        assert example.history_dropped == example.step - len(example.history)


def test_duplicate_steps_are_rejected(tmp_path: Path) -> None:
    path = write_steps(tmp_path / "a.jsonl", [step(0, "a")])
    copy = tmp_path / "b.jsonl"
    copy.write_bytes(path.read_bytes())
    with pytest.raises(InputError, match="twice"):
        select([path, copy], SelectionOptions())
