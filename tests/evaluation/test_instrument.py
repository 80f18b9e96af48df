"""The instrument itself: evaluation scores the files on disk, the positive control is detected,
and the category and duplicate columns hold the known answers of a hand-made trajectory.

Real builds, real ``load_dataset`` and real lm-eval runs of the baselines.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import datasets
import pyarrow.parquet as pq
import pytest
from dataset_fixture import write_dataset
from repository import REPOSITORY
from synthetic import synthetic_steps, write_steps

from themisto.building.card_reading import parquet_path
from themisto.building.categories import output_kind
from themisto.building.parquet import build_dataset
from themisto.building.selection import SelectionOptions
from themisto.cli import main as themisto_main
from themisto.evaluation.data import load_task_dataset
from themisto.reporting.stats import mcnemar, sign_flip_p_value
from themisto.trajectory import Step, trajectory_files
from themisto.vocabulary import OUTPUT_KINDS, RUNTIME_SUFFIX, STEP_KINDS, TASK_CONFIGS, TASKS

datasets.disable_progress_bars()


def ids(folder: Path, config: str, split: str = "test") -> list[str]:
    return pq.read_table(parquet_path(folder, config, split), columns=["example_id"]).column(0).to_pylist()


def eval_samples(model: str, data: Path, out: Path, tasks: str, *options: str) -> dict[str, list[dict[str, Any]]]:
    """Run ``themisto eval`` and return its sample records per task."""
    assert (
        themisto_main(["eval", "--model", model, "--tasks", tasks, "-o", str(out), "--data", str(data), *options]) == 0
    )
    samples: dict[str, list[dict[str, Any]]] = {}
    for path in out.rglob("samples_*.jsonl"):
        task = path.name.removeprefix("samples_").rsplit("_", 1)[0]
        samples[task] = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines()]
    return samples


@pytest.fixture(scope="module")
def two_corpora(tmp_path_factory: pytest.TempPathFactory) -> tuple[list[Path], list[Path]]:
    """Two corpora with different trajectory ids, so their example ids cannot be confused."""
    first = tmp_path_factory.mktemp("a")
    second = tmp_path_factory.mktemp("b")
    a = [write_steps(first / f"alpha{i}.jsonl", synthetic_steps(f"alpha{i}", 150, seed=i)) for i in range(2)]
    b = [write_steps(second / f"beta{i}.jsonl", synthetic_steps(f"beta{i}", 120, seed=9 + i)) for i in range(3)]
    return a, b


@pytest.mark.slow
def test_evaluation_scores_a_rebuild_not_the_previous_build(
    two_corpora: tuple[list[Path], list[Path]], tmp_path: Path
) -> None:
    a, b = two_corpora
    folder = tmp_path / "hf_dataset"
    build_dataset(a, folder)
    first = eval_samples("themisto-repeat-last", folder, tmp_path / "run-a", "themisto_output_runtime")
    assert [r["doc"]["example_id"] for r in first["themisto_output_runtime"]] == ids(
        folder, "output_prediction_runtime"
    )
    build_dataset(b, folder)  # a different corpus into the same folder
    second = eval_samples("themisto-repeat-last", folder, tmp_path / "run-b", "themisto_output_runtime")
    scored = [r["doc"]["example_id"] for r in second["themisto_output_runtime"]]
    assert scored == ids(folder, "output_prediction_runtime") and all(i.startswith("beta") for i in scored)
    # the loader of the task YAMLs (also used by plain `lm_eval --include_path`), on every config and split
    for config in TASK_CONFIGS:
        for split in ("test", "full"):
            loaded = load_task_dataset(config, str(folder), split)["test"]
            assert loaded["example_id"] == ids(folder, config, split)


@pytest.mark.slow
def test_plain_load_dataset_of_a_rebuilt_folder_reads_the_new_files(
    two_corpora: tuple[list[Path], list[Path]], tmp_path: Path
) -> None:
    a, b = two_corpora
    folder, cache = tmp_path / "hf_dataset", str(tmp_path / "cache")
    build_dataset(a, folder)
    old_files = sorted(p.relative_to(folder) for p in folder.rglob("*.parquet"))
    first = datasets.load_dataset(str(folder), "next_cell_prediction", split="test", cache_dir=cache)
    assert first["example_id"] == ids(folder, "next_cell_prediction")
    build_dataset(b, folder)  # the same folder, the same cache
    for config in ("next_cell_prediction", "output_prediction_runtime"):
        for split in ("test", "full"):
            again = datasets.load_dataset(str(folder), config, split=split, cache_dir=cache)
            assert again["example_id"] == ids(folder, config, split)
            assert all(i.startswith("beta") for i in again["example_id"])
    # the old files are gone: only what the card names is left
    new_files = sorted(p.relative_to(folder) for p in folder.rglob("*.parquet"))
    assert not set(old_files) & set(new_files) and len(new_files) == len(old_files)
    # an identical rebuild keeps the names (and so its cache entry)
    build_dataset(b, folder)
    assert sorted(p.relative_to(folder) for p in folder.rglob("*.parquet")) == new_files


def paired_exact_match(samples: dict[str, list[dict[str, Any]]], task: str) -> list[float]:
    """Per example (in order): exact match with the runtime block minus without it."""
    plain = {r["doc"]["example_id"]: r["exact_match"] for r in samples[task]}
    runtime = {r["doc"]["example_id"]: r["exact_match"] for r in samples[task + RUNTIME_SUFFIX]}
    assert plain.keys() == runtime.keys()
    return [runtime[key] - plain[key] for key in plain]


def test_the_positive_control_is_detected_as_a_significant_runtime_effect(tmp_path: Path) -> None:
    # sessions that display variables whose values only the runtime block states at that point
    data = write_dataset(tmp_path / "data")
    samples = eval_samples("themisto-state-lookup", data, tmp_path / "run", "themisto_output,themisto_output_runtime")
    differences = paired_exact_match(samples, "themisto_output")
    assert all(d >= 0 for d in differences)  # the block can only help it
    assert sum(differences) >= 6
    assert sign_flip_p_value(differences) < 0.05
    runtime = [r["exact_match"] for r in samples["themisto_output_runtime"]]
    plain = [r["exact_match"] for r in samples["themisto_output"]]
    assert mcnemar(plain, runtime).p_value < 0.05
    # every answer the block changes is the recorded output: it resolves, it does not guess
    added = from_the_block(samples)
    assert len(added) >= 6 and all(r["filtered_resps"] == [r["doc"]["target"]] for r in added)


def from_the_block(samples: dict[str, list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """The control's runtime-arm samples whose answer differs from its plain arm's: what it read in the block."""
    plain = {r["doc"]["example_id"]: r["filtered_resps"] for r in samples["themisto_output"]}
    return [r for r in samples["themisto_output_runtime"] if r["filtered_resps"] != plain[r["doc"]["example_id"]]]


@pytest.mark.slow
def test_on_the_committed_build_the_positive_control_never_loses_and_never_guesses(tmp_path: Path) -> None:
    committed = REPOSITORY / "hf_dataset"
    samples = eval_samples(
        "themisto-state-lookup",
        committed,
        tmp_path / "run",
        "themisto_output,themisto_output_runtime",
        "--split",
        "full",
    )
    differences = paired_exact_match(samples, "themisto_output")
    assert all(d >= 0 for d in differences)
    added = from_the_block(samples)
    assert added and all(r["filtered_resps"] == [r["doc"]["target"]] for r in added)
    # its plain arm is the heuristic's: the block is credited only with what the plain prompt does not give
    heuristic = eval_samples(
        "themisto-heuristic", committed, tmp_path / "heuristic", "themisto_output", "--split", "full"
    )["themisto_output"]
    assert [r["filtered_resps"] for r in heuristic] == [r["filtered_resps"] for r in samples["themisto_output"]]


@pytest.mark.slow
def test_on_the_committed_test_split_the_positive_control_is_a_significant_runtime_effect(tmp_path: Path) -> None:
    # the README's claim: the paired test detects the runtime effect on the split every score is quoted on
    samples = eval_samples(
        "themisto-state-lookup", REPOSITORY / "hf_dataset", tmp_path / "run", "themisto_output,themisto_output_runtime"
    )
    differences = paired_exact_match(samples, "themisto_output")
    assert len(differences) == 200 and all(d >= 0 for d in differences)
    plain = [r["exact_match"] for r in samples["themisto_output"]]
    runtime = [r["exact_match"] for r in samples["themisto_output_runtime"]]
    assert sum(runtime) > sum(plain) and mcnemar(plain, runtime).p_value < 0.05


# --- categories and duplicates on a trajectory with known answers -------------------------------------

_HTML_TABLE = [{"output_type": "execute_result", "data": {"text/plain": "   a\n0  1", "text/html": "<table></table>"}}]
_ERROR = {"ename": "ZeroDivisionError", "evalue": "division by zero"}
# (cell id, code, output, extra step fields), then the expected output_kind and step_kind
KNOWN: list[tuple[str, str, str, dict[str, Any], str, str]] = [
    ("c0", "import pandas as pd", "", {}, "none", "first_run"),
    ("c1", "x = 41\nx", "41", {}, "scalar", "first_run"),
    ("c2", "[1, 2]", "[1, 2]", {}, "collection", "first_run"),
    ("c3", "df", "   a\n0  1", {"outputs": _HTML_TABLE}, "table", "first_run"),
    ("c4", "s", "0    1\nName: a, dtype: int64", {}, "table", "first_run"),
    (
        "c5",
        "plt.plot([1])",
        "[<matplotlib.lines.Line2D at 0x7f>]\n<Figure size 640x480 with 1 Axes>",
        {},
        "image",
        "first_run",
    ),
    ("c6", "print('hello world')", "hello world", {}, "text", "first_run"),
    ("c7", "1/0", "ZeroDivisionError: division by zero", {"error": _ERROR}, "error", "first_run"),
    ("c1", "x = 41\nx", "41", {}, "scalar", "rerun_unchanged"),
    ("c1", "x = 42\nx", "42", {}, "scalar", "rerun_edited"),
    ("c0", "import pandas as pd", "", {"restarted": True}, "none", "after_restart"),
    ("c2", "[1, 2]", "[1, 2]", {}, "collection", "rerun_unchanged"),
    ("c8", "[1, 2]", "[1, 2]", {}, "collection", "first_run"),  # a new cell with the same code
    ("c6", "print('hello world')", "hello  world", {}, "text", "rerun_unchanged"),
]
# step -> the example it repeats: output prediction compares (code, output), next cell the code
KNOWN_DUPLICATES = {
    "output_prediction": {8: 1, 10: 0, 11: 2, 12: 2},
    "next_cell_prediction": {8: 1, 10: 0, 11: 2, 12: 2, 13: 6},
}


def known_steps() -> list[Step]:
    steps = []
    for number, (cell, code, output, extra, _, _) in enumerate(KNOWN):
        fields = {"error": None, "restarted": False, **extra}
        steps.append(
            Step(
                "k",
                number,
                cell,
                code,
                output,
                execution_time=0.1,
                memory_bytes=1,
                runtime=[],
                state_hash="h",
                **fields,
            )
        )
    return steps


def test_category_and_duplicate_columns_hold_the_known_answers(tmp_path: Path) -> None:
    path = write_steps(tmp_path / "k.jsonl", known_steps())
    options = SelectionOptions(sample="all", quantile=1.0, include_errors=True, include_empty=True)
    build_dataset([path], tmp_path / "out", options)
    for task in TASKS:
        for config in (task, task + RUNTIME_SUFFIX):  # both variants of a pair carry the same values
            rows = pq.read_table(parquet_path(tmp_path / "out", config, "full")).to_pylist()
            assert [r["output_kind"] for r in rows] == [known[4] for known in KNOWN]
            assert [r["step_kind"] for r in rows] == [known[5] for known in KNOWN]
            duplicates = {number: f"k/{first}" for number, first in KNOWN_DUPLICATES[task].items()}
            assert [r["duplicate_of"] for r in rows] == [duplicates.get(number) for number in range(len(KNOWN))]
    assert {known[4] for known in KNOWN} == set(OUTPUT_KINDS) and {known[5] for known in KNOWN} == set(STEP_KINDS)


@pytest.mark.slow
def test_duplicates_are_counted_within_each_split(tmp_path: Path) -> None:
    # a repetitive session: seven cells run over and over, five outputs
    cells = [(f"x{i % 7}", str(i % 5)) for i in range(300)]
    steps = [Step("rep", i, f"c{i % 7}", code, output, None, 0.1, 1, [], "h") for i, (code, output) in enumerate(cells)]
    build_dataset([write_steps(tmp_path / "rep.jsonl", steps)], tmp_path / "out")  # the paper sample in test
    differs = 0
    for config in TASK_CONFIGS:
        by_split = {}
        for split in ("test", "full"):
            rows = pq.read_table(parquet_path(tmp_path / "out", config, split)).to_pylist()
            first: dict[tuple[str, str, str], str] = {}
            expected = []
            for row in rows:
                key = (row["trajectory_id"], row["code"], row["target"])
                expected.append(first.get(key))
                first.setdefault(key, row["example_id"])
            assert [row["duplicate_of"] for row in rows] == expected
            by_split[split] = {row["example_id"]: row["duplicate_of"] for row in rows}
        differs += sum(by_split["full"][key] != value for key, value in by_split["test"].items())
    assert differs  # the test split has first occurrences of its own


@pytest.mark.parametrize(
    ("text", "is_error", "kind"),
    [
        ("", False, "none"),
        ("  \n", False, "none"),
        ("NameError: name 'x' is not defined", True, "error"),
        ("<Figure size 1200x200 with 6 Axes>", False, "image"),
        ("<Axes: ylabel='Frequency'>\n<Figure size 640x480 with 1 Axes>", False, "image"),
        ("<image/png>", False, "image"),
        ("<Axes: >", False, "text"),  # an Axes alone is no picture
        ("loss 0.3\n<Figure size 640x480 with 1 Axes>", False, "text"),
        ("      a    b\n0   1.0  2.0\n\n[100 rows x 2 columns]", False, "table"),
        ("species\nsetosa    50\nName: count, dtype: int64", False, "table"),
        ("Empty DataFrame\nColumns: [a]\nIndex: []", False, "table"),
        ("array([[1, 2],\n       [3, 4]])", False, "collection"),
        ("{'a': 1, 'b': [1, 2]}", False, "collection"),
        ("((426, 30), (143, 30))", False, "collection"),
        ("dict_keys(['a', 'b'])", False, "collection"),
        ("42", False, "scalar"),
        ("-1.5e-03", False, "scalar"),
        ("np.float64(0.9742)", False, "scalar"),
        ("True", False, "scalar"),
        ("'hello world'", False, "scalar"),
        ("float64", False, "scalar"),
        ("accuracy 0.981 +/- 0.007", False, "text"),
        ("1\n2\n3", False, "text"),
    ],
)
def test_output_kind_rules(text: str, is_error: bool, kind: str) -> None:
    assert output_kind(text, is_error) == kind


def test_output_kind_reads_html_tables_from_the_raw_outputs() -> None:
    assert output_kind("   a\n0  1", False, _HTML_TABLE) == "table"
    assert output_kind("   a\n0  1", False) == "text"


def test_the_committed_build_carries_the_columns_and_keeps_what_cells_read() -> None:
    committed = REPOSITORY / "hf_dataset"
    if not trajectory_files([REPOSITORY / "data" / "trajectories"]):
        pytest.skip("no committed trajectories")
    from themisto.building.prompts import referenced_names, shown_variables

    for split in ("test", "full"):
        rows = pq.read_table(parquet_path(committed, "output_prediction_runtime", split)).to_pylist()
        assert {r["output_kind"] for r in rows} <= set(OUTPUT_KINDS)
        assert {r["step_kind"] for r in rows} <= set(STEP_KINDS)
        # the budget keeps the variables a cell reads: at most 1% of examples miss one
        missing = 0
        for row in rows:
            live = {variable["name"] for variable in row["runtime"]}
            shown = {variable.name for variable in shown_variables(row["runtime_text"])}
            missing += bool((referenced_names(row["code"]) & live) - shown)
        assert missing <= 0.01 * len(rows), (split, missing, len(rows))
