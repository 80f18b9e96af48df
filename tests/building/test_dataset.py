"""The built dataset: card configs, load_dataset round trips, pairing, leakage, budgets, reproducibility, CLI."""

from __future__ import annotations

import json
from pathlib import Path

import datasets
import pyarrow.parquet as pq
import pytest
import yaml
from repository import REPOSITORY
from synthetic import synthetic_steps, write_corpus, write_steps

import themisto.building.parquet
import themisto.building.tables
from themisto.building.card_reading import parquet_path, read_build_options
from themisto.building.parquet import build_dataset
from themisto.building.prompts import RenderOptions
from themisto.building.selection import PAPER_MIN_HISTORY, SelectionOptions, select
from themisto.building.tables import TASK_FEATURES, TRAJECTORY_FEATURES, config_splits, iter_tables
from themisto.cli import main
from themisto.exceptions import InputError
from themisto.trajectory import trajectory_files
from themisto.vocabulary import CONFIG_NAMES, RESTART_MARKER, RUNTIME_SUFFIX, TASK_CONFIGS, TASKS

CONTEXT_BUDGET = 400
RUNTIME_BUDGET = 600

datasets.disable_progress_bars()


@pytest.fixture(scope="module")
def corpus(tmp_path_factory: pytest.TempPathFactory) -> list[Path]:
    return write_corpus(tmp_path_factory.mktemp("trajectories"), trajectories=5, steps_each=120)


@pytest.fixture(scope="module")
def built(corpus: list[Path], tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("build") / "hf_dataset"
    build_dataset(
        corpus,
        out,
        SelectionOptions(max_context_chars=CONTEXT_BUDGET),
        RenderOptions(max_runtime_chars=RUNTIME_BUDGET),
    )
    return out


def rows(folder: Path, config: str, split: str) -> list[dict]:
    return pq.read_table(parquet_path(folder, config, split)).to_pylist()


def card_configs(folder: Path) -> dict[str, dict[str, str]]:
    front = (folder / "README.md").read_text(encoding="utf-8").split("---\n")[1]
    meta = yaml.safe_load(front)
    return {c["config_name"]: {f["split"]: f["path"] for f in c["data_files"]} for c in meta["configs"]}


def test_card_configs_name_exactly_the_parquet_files(built: Path) -> None:
    configs = card_configs(built)
    assert list(configs) == list(CONFIG_NAMES)
    named = {path for splits in configs.values() for path in splits.values()}
    on_disk = {str(p.relative_to(built)) for p in built.rglob("*.parquet")}
    assert named == on_disk
    for config, splits in configs.items():
        assert tuple(splits) == config_splits(config)
    card = (built / "README.md").read_text(encoding="utf-8")
    for needed in (
        "## Selection protocol",
        "## Runtime context",
        "## Fields",
        "arxiv.org/abs/2504.12365",
        "## License",
    ):
        assert needed in card
    assert f"| `output_prediction` | 200 | {len(rows(built, 'output_prediction', 'full'))} |" in card


def test_load_dataset_round_trips_every_config(built: Path, tmp_path: Path) -> None:
    for config in CONFIG_NAMES:
        for split in config_splits(config):
            loaded = datasets.load_dataset(str(built), config, split=split, cache_dir=str(tmp_path / "cache"))
            expected = TRAJECTORY_FEATURES if config == "trajectories" else TASK_FEATURES
            assert loaded.features == expected
            assert loaded.to_list() == rows(built, config, split)
            assert len(loaded) > 0


def test_pairs_share_ids_and_differ_only_by_the_runtime_block(built: Path) -> None:
    for task in TASKS:
        for split in ("test", "full"):
            plain = rows(built, task, split)
            runtime = rows(built, task + RUNTIME_SUFFIX, split)
            assert [r["example_id"] for r in plain] == [r["example_id"] for r in runtime]
            runtime_only = ("runtime", "runtime_text", "prompt", "memory_bytes_before", "execution_time_before")
            for a, b in zip(plain, runtime, strict=True):
                assert a["runtime"] == [] and a["runtime_text"] == "" and a["memory_bytes_before"] is None
                assert a["execution_time_before"] is None
                assert b["runtime_text"] and b["runtime_text"] in b["prompt"]
                assert b["prompt"].replace(b["runtime_text"], "", 1) == a["prompt"]
                assert {k: v for k, v in a.items() if k not in runtime_only} == {
                    k: v for k, v in b.items() if k not in runtime_only
                }


def test_runtime_is_the_snapshot_before_the_step(built: Path) -> None:
    steps = {(r["trajectory_id"], r["step"]): r for r in rows(built, "trajectories", "full")}
    checked_changes = 0
    for task in TASKS:
        for row in rows(built, task + RUNTIME_SUFFIX, "full"):
            this = steps[(row["trajectory_id"], row["step"])]
            previous = steps.get((row["trajectory_id"], row["step"] - 1))
            expected = [] if this["restarted"] or previous is None else previous["runtime"]
            assert row["runtime"] == expected
            if row["runtime"] != this["runtime"]:
                checked_changes += 1
    assert checked_changes > 100  # the corpus really changes state at most steps


def test_targets_and_history_come_from_the_trajectory(built: Path) -> None:
    steps = {(r["trajectory_id"], r["step"]): r for r in rows(built, "trajectories", "full")}
    # every earlier execution of the trajectory, with a restart marker before each restarted step
    timelines: dict[tuple[str, int], list[dict[str, str]]] = {}
    timeline: list[dict[str, str]] = []
    for (trajectory, number), step in steps.items():
        if number == 0:
            timeline = []
        elif step["restarted"]:
            timeline.append({"code": RESTART_MARKER, "output": ""})
        timelines[trajectory, number] = list(timeline)
        timeline.append({"code": step["code"], "output": step["output"]})
    restarts_shown = 0
    for task in TASKS:
        for row in rows(built, task, "full"):
            this = steps[(row["trajectory_id"], row["step"])]
            assert row["target"] == (this["output"] if task == "output_prediction" else this["code"])
            assert not row["target_is_error"] and this["error"] is None
            # the target's stability: an output as re-execution found it, code always reproducible
            assert row["stable"] is (this["stable"] if task == "output_prediction" else True)
            history = row["history"]
            assert sum(len(c["code"]) + len(c["output"]) for c in history) <= CONTEXT_BUDGET
            # the history is the most recent part of the whole timeline, across restarts
            whole = timelines[row["trajectory_id"], row["step"]]
            assert history == whole[len(whole) - len(history) :]
            assert row["history_dropped"] == len(whole) - len(history)
            restarts_shown += sum(cell["code"] == RESTART_MARKER for cell in history)
    assert restarts_shown > 0


def test_load_dataset_reads_the_features_and_rows_build_dataset_writes(built: Path, tmp_path: Path) -> None:
    import datasets

    for config in ("trajectories", "next_cell_prediction_runtime"):
        for split in config_splits(config):
            loaded = datasets.load_dataset(str(built), config, split=split, cache_dir=str(tmp_path / "cache"))
            assert loaded.features == (TRAJECTORY_FEATURES if config == "trajectories" else TASK_FEATURES)
            assert loaded.to_list() == rows(built, config, split)


def test_batch_boundaries_change_only_the_row_groups(
    built: Path, corpus: list[Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 64-step batches cut trajectories mid-session: history windows and runtime states cross them
    monkeypatch.setattr(themisto.building.tables, "BATCH_ROWS", 64)
    monkeypatch.setattr(themisto.building.parquet, "BATCH_ROWS", 64)
    selection, render, license_id = read_build_options(built)
    build_dataset(corpus, tmp_path / "small_batches", selection, render, license_id)
    for config in CONFIG_NAMES:
        for split in config_splits(config):
            path = parquet_path(tmp_path / "small_batches", config, split)
            assert pq.read_table(path).to_pylist() == rows(built, config, split)
            metadata = pq.ParquetFile(path).metadata
            groups = [metadata.row_group(i).num_rows for i in range(metadata.num_row_groups)]
            assert all(size == 64 for size in groups[:-1]) and 0 < groups[-1] <= 64


def test_stable_only_builds_only_reproducible_examples(corpus: list[Path], tmp_path: Path) -> None:
    stable_only = ["--stable-only", "--include-empty", "--min-history", "0"]  # only the stability rule at work
    assert main(["build", str(corpus[0].parent), "-o", str(tmp_path / "stable"), *stable_only]) == 0
    steps = {(r["trajectory_id"], r["step"]): r for r in rows(tmp_path / "stable", "trajectories", "full")}
    for config in TASK_CONFIGS:
        full = rows(tmp_path / "stable", config, "full")
        assert full and all(row["stable"] is True for row in full)
        # one eligibility rule for both tasks: the step's output reproduced
        assert all(steps[(row["trajectory_id"], row["step"])]["stable"] is True for row in full)
    eligible = [key for key, step in steps.items() if step["stable"] is True and step["error"] is None]
    # the corpus marks only some steps stable; the quantile filter takes at most a few of them away
    assert 0.9 * len(eligible) <= len(rows(tmp_path / "stable", "output_prediction", "full")) <= len(eligible)


def test_the_card_states_the_determinism_ceiling_of_the_rows(built: Path) -> None:
    card = (built / "README.md").read_text(encoding="utf-8")
    for split in ("test", "full"):
        flags = [row["stable"] for row in rows(built, "output_prediction", split)]
        stable, unstable, unknown = flags.count(True), flags.count(False), flags.count(None)
        assert stable and unstable and unknown  # the synthetic corpus has all three
        ceiling = stable / len(flags)
        assert f"| `{split}` | {stable} | {unstable} | {unknown} | {ceiling:.3f} |" in card


def test_without_stability_information_the_card_says_the_ceiling_is_unknown(tmp_path: Path) -> None:
    steps = synthetic_steps("plain", 40)
    for step in steps:
        step.stable = None
    build_dataset([write_steps(tmp_path / "plain.jsonl", steps)], tmp_path / "out", SelectionOptions(sample="all"))
    card = (tmp_path / "out" / "README.md").read_text(encoding="utf-8")
    assert (
        "the ceiling is unknown" in card and "| `full` |" not in card.split("## Determinism ceiling")[1].split("##")[0]
    )


def test_a_trajectory_growing_during_the_build_is_an_input_error(tmp_path: Path) -> None:
    path = write_steps(tmp_path / "t.jsonl", synthetic_steps("t", 30))
    chosen = select([path], SelectionOptions(sample="all"))
    write_steps(path, synthetic_steps("t", 31)[30:])  # a recording appends one more step
    with pytest.raises(InputError, match="changed during the build"):
        list(iter_tables([path], chosen, SelectionOptions(max_context_chars=1000), RenderOptions()))


def test_runtime_blocks_respect_their_budget(built: Path) -> None:
    for task in TASKS:
        assert all(len(r["runtime_text"]) <= RUNTIME_BUDGET for r in rows(built, task + RUNTIME_SUFFIX, "full"))


def test_the_paper_sample_has_200_examples_stratified_10_180_10(built: Path) -> None:
    for task in TASKS:
        # the draw is from the full split's examples with enough history (min_history, 5 by default)
        full = [r for r in rows(built, task, "full") if r["step"] >= PAPER_MIN_HISTORY]
        test_ids = {r["example_id"] for r in rows(built, task, "test")}
        ranked = sorted(full, key=lambda r: (len(r["target"]), r["example_id"]))
        n = len(ranked)
        q1, q3 = round(n / 4), round(3 * n / 4)
        in_test = [r["example_id"] in test_ids for r in ranked]
        assert (sum(in_test[:q1]), sum(in_test[q1:q3]), sum(in_test[q3:])) == (10, 180, 10)


def assert_same_files(first: Path, second: Path) -> None:
    files = sorted(p.relative_to(first) for p in first.rglob("*") if p.is_file())
    assert files == sorted(p.relative_to(second) for p in second.rglob("*") if p.is_file())
    for name in files:
        assert (first / name).read_bytes() == (second / name).read_bytes(), name


def test_rebuilding_with_the_options_of_the_card_gives_identical_bytes(
    built: Path, corpus: list[Path], tmp_path: Path
) -> None:
    selection, render, license_id = read_build_options(built)
    assert selection == SelectionOptions(max_context_chars=CONTEXT_BUDGET)
    assert render == RenderOptions(max_runtime_chars=RUNTIME_BUDGET)
    build_dataset(corpus, tmp_path / "again", selection, render, license_id)
    assert_same_files(built, tmp_path / "again")


@pytest.mark.slow
@pytest.mark.parametrize("jobs", [1, 2])  # one process, and two as `themisto build` runs on two cores
@pytest.mark.parametrize(
    ("build", "trajectories"), [("hf_dataset", "data/trajectories"), ("hf_dataset_real", "data/real_trajectories")]
)
def test_the_committed_build_is_reproduced_from_the_committed_trajectories(
    tmp_path: Path, build: str, trajectories: str, jobs: int
) -> None:
    committed, sources = REPOSITORY / build, REPOSITORY / trajectories
    if not (committed / "README.md").is_file():
        pytest.skip(f"no committed build yet: themisto build {trajectories} -o {build}")
    selection, render, license_id = read_build_options(committed)
    build_dataset(trajectory_files([sources]), tmp_path / "again", selection, render, license_id, jobs=jobs)
    assert_same_files(committed, tmp_path / "again")


def test_cli_build_all_with_json_runtime_is_reproducible_and_show_prints_the_pair(
    corpus: list[Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    folder = corpus[0].parent
    for name in ("a", "b"):
        args = [
            "build",
            str(folder),
            "-o",
            str(tmp_path / name),
            "--sample",
            "all",
            "--runtime-format",
            "json",
            "--seed",
            "3",
        ]
        assert main(args) == 0
    assert_same_files(tmp_path / "a", tmp_path / "b")
    test = rows(tmp_path / "a", "next_cell_prediction_runtime", "test")
    assert [r["example_id"] for r in test] == [
        r["example_id"] for r in rows(tmp_path / "a", "next_cell_prediction", "full")
    ]
    payload = json.loads(test[5]["runtime_text"].split(":\n", 1)[1])
    assert payload["not_shown"] == 0 and len(payload["variables"]) == len(test[5]["runtime"])

    capsys.readouterr()
    example_id = test[5]["example_id"]
    assert main(["show", "next_cell_prediction_runtime", example_id, "--data", str(tmp_path / "a")]) == 0
    shown = capsys.readouterr().out
    plain = rows(tmp_path / "a", "next_cell_prediction", "test")[5]
    assert plain["prompt"] in shown and test[5]["prompt"] in shown and plain["target"] in shown


def test_show_without_an_id_lists_the_ids_with_their_step_and_output_kind(
    built: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for config, split in [("output_prediction_runtime", "test"), ("next_cell_prediction", "full")]:
        assert main(["show", config, "--split", split, "--data", str(built)]) == 0
        out, err = capsys.readouterr()
        header, *lines = out.splitlines()
        assert header.split() == ["example_id", "step_kind", "output_kind"]
        expected = [[r["example_id"], r["step_kind"], r["output_kind"]] for r in rows(built, config, split)]
        assert [line.split() for line in lines] == expected and expected
        assert f"{len(expected)} examples of {config} ({split})" in err
    # a listed id is one `show` prints
    assert main(["show", "next_cell_prediction_runtime", expected[-1][0], "--data", str(built)]) == 0


def test_bad_input_is_one_line_and_exit_2(built: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", "output_prediction", "nope/1", "--data", str(built)]) == 2
    assert main(["show", "no_such_task", "t/1", "--data", str(built)]) == 2
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"trajectory_id": "x"}\n', encoding="utf-8")
    assert main(["build", str(bad), "-o", str(tmp_path / "out")]) == 2
    assert main(["build", str(tmp_path / "missing.jsonl"), "-o", str(tmp_path / "out")]) == 2
    only_errors = synthetic_steps("e", 20, error_rate=1.0)
    write_steps(tmp_path / "errors.jsonl", only_errors)
    assert main(["build", str(tmp_path / "errors.jsonl"), "-o", str(tmp_path / "out")]) == 2
    errors = capsys.readouterr().err.strip().splitlines()
    assert len(errors) == 5 and all(line.startswith("themisto ") for line in errors)
    assert "--include-errors" in errors[-1]
    assert not (tmp_path / "out").exists()


@pytest.mark.kernel
def test_plots_are_no_output_prediction_target_unless_images_are_included(tmp_path: Path) -> None:
    import nbformat

    cells = [
        "import matplotlib.pyplot as plt\nplt.rcParams['figure.dpi'] = 30",
        "plt.plot([1, 2, 3])\nplt.show()",  # only a picture
        "plt.plot([3, 1]);",  # a trailing ';' shows the picture without the Axes' repr
        "print('mean', sum([1, 2, 3]) / 3)\nplt.bar(['a', 'b'], [2, 5])\nplt.show()",  # text and a picture
        "len('abc')",
    ]
    notebook = nbformat.v4.new_notebook()
    notebook.cells = [nbformat.v4.new_code_cell(code) for code in cells]
    nbformat.write(notebook, tmp_path / "plots.ipynb")
    assert main(["record", str(tmp_path / "plots.ipynb"), "-o", str(tmp_path / "traj")]) == 0
    for name, flags in (("default", []), ("images", ["--include-images"])):
        args = [
            "build",
            str(tmp_path / "traj"),
            "-o",
            str(tmp_path / name),
            "--sample",
            "all",
            "--quantile",
            "1",
            "--include-empty",
        ]
        assert main(args + flags) == 0
    targets = {r["step"]: r["target"] for r in rows(tmp_path / "images", "output_prediction", "full")}
    assert targets == {0: "", 1: "<image/png>", 2: "<image/png>", 3: "mean 2.0\n<image/png>", 4: "3"}
    assert [r["step"] for r in rows(tmp_path / "default", "output_prediction", "full")] == [0, 3, 4]
    assert [r["step"] for r in rows(tmp_path / "default", "next_cell_prediction", "full")] == [0, 1, 2, 3, 4]
    assert "only images (plots) are dropped from output prediction" in (tmp_path / "default" / "README.md").read_text()
