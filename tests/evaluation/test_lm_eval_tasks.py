"""The lm-eval task files, the data lookup and the packaging that makes both travel.

Most of its time is the wheel test (build, install into a fresh venv, load
the tasks from another directory).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import sysconfig
import textwrap
from pathlib import Path
from typing import Any

import pytest
from dataset_fixture import task_rows, write_dataset
from repository import REPOSITORY

from themisto import __version__
from themisto.cli import main as themisto_main
from themisto.evaluation.answers import unfence
from themisto.evaluation.data import bundled_path, data_location, load_task_dataset, tasks_path
from themisto.evaluation.harness import task_manager
from themisto.evaluation.metrics import score_sample
from themisto.exceptions import InputError
from themisto.vocabulary import DATA_ENV, LM_EVAL_GROUPS, LM_EVAL_TASKS, METRIC_NAMES, PLACEBO_TASKS
from themisto.vocabulary import GROUP_TASKS as TASKS


@pytest.fixture(scope="module")
def loaded(data_dir: Path) -> dict[str, Any]:
    return task_manager(str(data_dir)).load(["themisto"])


def test_the_task_manager_indexes_only_the_themisto_group_and_tasks(data_dir: Path) -> None:
    manager = task_manager(str(data_dir))
    assert sorted(manager.all_groups) == sorted(LM_EVAL_GROUPS)
    assert sorted(manager.all_subtasks) == sorted(LM_EVAL_TASKS)
    assert set(manager.all_tasks) == {*LM_EVAL_GROUPS, *LM_EVAL_TASKS}  # no built-in task such as gsm8k


def test_the_group_holds_the_four_tasks_on_their_configs(data_dir: Path, loaded: dict[str, Any]) -> None:
    assert sorted(loaded["group_map"]["themisto"]) == sorted(TASKS)
    for name, config in TASKS.items():
        docs = loaded["tasks"][name].test_docs()
        rows = task_rows(data_dir, config)
        assert docs["example_id"] == [row["example_id"] for row in rows]
        assert docs["prompt"] == [row["prompt"] for row in rows]


def test_generation_and_metrics_follow_the_task(loaded: dict[str, Any]) -> None:
    for name, task in loaded["tasks"].items():
        config = task.config
        assert config.output_type == "generate_until"
        assert config.metadata["version"] == 1.2
        assert [(m["metric"], m["aggregation"], m["higher_is_better"]) for m in config.metric_list] == [
            (metric, "mean", True) for metric in METRIC_NAMES
        ]
        gen = config.generation_kwargs
        assert gen["do_sample"] is False
        assert "```" not in "".join(gen["until"])  # chat answers open with a fence
        assert len(gen["until"]) <= 4  # the OpenAI API honours four stop sequences
        if name.startswith("themisto_next_cell"):
            assert gen["max_gen_toks"] == 384 and "\nOutput:" in gen["until"]
        else:
            assert gen["max_gen_toks"] == 512 and "\nOutput:" not in gen["until"]


def test_every_stop_sequence_is_a_header_of_the_real_prompt_format(loaded: dict[str, Any]) -> None:
    """The stop sequences must follow themisto.building.prompts: a renamed header would silently stop nothing."""
    from themisto.building.history import Example, HistoryCell
    from themisto.building.prompts import RenderOptions, render_pair
    from themisto.trajectory import Variable

    for name, task in loaded["tasks"].items():
        example = Example(
            task="next_cell_prediction" if name.startswith("themisto_next_cell") else "output_prediction",
            example_id="t/2", trajectory_id="t", step=2,
            history=[HistoryCell("x = 1", ""), HistoryCell("print(x)", "1\n")], history_dropped=0,
            code="" if name.startswith("themisto_next_cell") else "x",
            runtime=[Variable(name="x", type="int", size_bytes=28, repr="1")], memory_bytes_before=None,
            target="1", target_is_error=False, stable=True,
        )  # fmt: skip
        prompt = render_pair(example, RenderOptions()).with_runtime
        for stop in task.config.generation_kwargs["until"]:
            assert stop in prompt, (name, stop)


@pytest.fixture(scope="module")
def loaded_placebo(data_dir: Path) -> dict[str, Any]:
    return task_manager(str(data_dir)).load(list(PLACEBO_TASKS))


def test_a_runtime_task_differs_from_its_pair_only_in_data(
    loaded: dict[str, Any], loaded_placebo: dict[str, Any]
) -> None:
    loaded = {"tasks": loaded["tasks"] | loaded_placebo["tasks"]}

    def comparable(name: str) -> dict[str, Any]:
        config = loaded["tasks"][name].config.to_dict()
        for key in ("task", "dataset_name", "metadata"):
            config.pop(key)
        return config

    for plain in ("themisto_output", "themisto_next_cell"):
        assert comparable(plain) == comparable(plain + "_runtime")
        # the placebo task too: it is the runtime task on the placebo config
        assert comparable(plain) == comparable(plain + "_placebo")
        plain_docs = loaded["tasks"][plain].test_docs()
        runtime_docs = loaded["tasks"][plain + "_runtime"].test_docs()
        assert plain_docs["example_id"] == runtime_docs["example_id"]
        assert all(text for text in runtime_docs["runtime_text"]) and not any(plain_docs["runtime_text"])


def test_a_sample_is_scored_by_the_package_metrics(loaded: dict[str, Any]) -> None:
    task = loaded["tasks"]["themisto_output"]
    row = task.test_docs()[2]
    for answer in (row["target"], "", "something else"):
        assert task.process_results(row, [answer]) == score_sample(answer, row["target"])


def test_the_full_split_can_stand_in_for_the_sample(data_dir: Path) -> None:
    task = task_manager(str(data_dir), split="full").load(["themisto_output"])["tasks"]["themisto_output"]
    # The fixture's test split is a strict subset of full, so loading the wrong one fails here.
    expected = [row["example_id"] for row in task_rows(data_dir, "output_prediction", "full")]
    assert task.test_docs()["example_id"] == expected
    with pytest.raises(InputError, match="unknown split"):
        task_manager(str(data_dir), split="train")


@pytest.mark.parametrize(
    ("answer", "unfenced"),
    [
        ("42", "42"),
        ("```\n42\n```", "42"),  # the line break before the closing fence is the fence's
        ("```\n42\r\n```", "42"),
        ("```\n42\n\n```", "42\n"),  # only that one
        ("```\n```", ""),
        ("```python\nx = 1\n```\nThis assigns x.", "x = 1"),  # commentary after the block dropped
        ("  ```\nunclosed", "unclosed"),  # generation stopped inside the block
        ("```\nunclosed\n", "unclosed\n"),  # no closing fence: nothing is the fence's
        ("````\na\n```\nb\n````", "a\n```\nb"),  # a longer fence may hold a shorter one
        ("Output:\n```\n6311\n```\n", "6311"),  # imitating the history's format
        ("Here is the code:\n\n```python\nx = 1\n```", "x = 1"),
        ("x\n```\ny\n```", "x\n```\ny\n```"),  # not an answer wrapped in a block: kept
        ("a: 1\nb: 2\n```\nc\n```", "a: 1\nb: 2\n```\nc\n```"),  # only one lead-in line
        ("", ""),
    ],
)
def test_unfence_unwraps_an_answer_given_as_one_code_block(answer: str, unfenced: str) -> None:
    assert unfence(answer) == unfenced


def test_data_location_prefers_the_argument_then_the_environment(
    data_dir: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    other = write_dataset(tmp_path / "other")
    monkeypatch.setenv(DATA_ENV, str(other))
    assert data_location() == str(other.resolve())
    assert data_location(str(data_dir)) == str(data_dir.resolve())
    monkeypatch.delenv(DATA_ENV)
    # In a checkout the bundled folders are at the repository root (a wheel: see the test below).
    assert bundled_path("hf_dataset") == REPOSITORY / "hf_dataset"
    assert tasks_path() == REPOSITORY / "lm_eval_tasks" / "themisto"
    assert data_location("some-org/themisto") == "some-org/themisto"  # a Hub id is passed on


def test_a_missing_or_unbuilt_dataset_is_a_clear_error(data_dir: Path, tmp_path: Path) -> None:
    with pytest.raises(InputError, match="dataset folder not found"):
        data_location(str(tmp_path / "nowhere" / "data"))
    with pytest.raises(InputError, match="no README.md dataset card"):
        data_location(str(tmp_path))
    (tmp_path / "README.md").write_text("---\nconfigs: []\n---\n", encoding="utf-8")
    with pytest.raises(InputError, match="not a Themisto build"):
        data_location(str(tmp_path))
    # the fixture's card, its Parquet files absent
    (tmp_path / "README.md").write_text((data_dir / "README.md").read_text(encoding="utf-8"), encoding="utf-8")
    with pytest.raises(InputError, match="cannot load config 'output_prediction'") as error:
        load_task_dataset("output_prediction", str(tmp_path))
    assert "\n" not in str(error.value) and len(str(error.value)) < len(str(tmp_path)) + 400


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["--model", "no-such-model"], "no-such-model"),
        (["--model", "themisto-empty", "--tasks", "gsm8k"], "unknown task(s) gsm8k"),
        (["--model", "themisto-empty", "--data", "/nonexistent/data"], "dataset folder not found"),
        (["--model", "themisto-empty", "--batch-size", "many"], "--batch-size"),
        (["--model", "themisto-empty", "--model-args", "foo=1"], "themisto-empty takes no model arguments, got foo"),
    ],
)
def test_eval_reports_bad_input_in_one_line(
    arguments: list[str], message: str, data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["eval", "-o", str(tmp_path / "run"), "--data", str(data_dir), *arguments]
    assert themisto_main(args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("themisto eval: error:") and message in err[-1]


@pytest.mark.slow
def test_an_installed_wheel_finds_its_tasks_and_default_data(tmp_path: Path) -> None:
    """Build a wheel, install it into a fresh venv, and load the tasks from another directory."""
    source = tmp_path / "src"
    source.mkdir()
    for name in ("setup.py", "setup.cfg", "pyproject.toml", "MANIFEST.in", "README.md"):
        if (REPOSITORY / name).exists():
            shutil.copy2(REPOSITORY / name, source / name)
    ignore = shutil.ignore_patterns("__pycache__", "*.pyc")
    for name in ("themisto", "lm_eval_tasks"):
        shutil.copytree(REPOSITORY / name, source / name, ignore=ignore)
    # The committed default build once it exists; until then a fixture stands in for it.
    if (REPOSITORY / "hf_dataset" / "README.md").is_file():
        shutil.copytree(REPOSITORY / "hf_dataset", source / "hf_dataset", ignore=ignore)
    else:
        write_dataset(source / "hf_dataset")
    python = sys.executable
    run = lambda *command, **kw: subprocess.run(command, check=True, capture_output=True, text=True, **kw)  # noqa: E731
    run(
        python,
        "-m",
        "pip",
        "wheel",
        "-q",
        "--no-deps",
        "--no-build-isolation",
        "-w",
        str(tmp_path / "dist"),
        str(source),
    )
    (wheel,) = (tmp_path / "dist").glob("themisto-*.whl")
    assert wheel.name.startswith(f"themisto-{__version__}-")  # setup.cfg reads the package's one declaration

    venv = tmp_path / "venv"
    base_python = sys._base_executable  # type: ignore[attr-defined]  # CPython: the interpreter this venv runs on
    run(base_python, "-m", "venv", "--without-pip", str(venv))
    venv_python = venv / "bin" / "python"
    run(python, "-m", "pip", "--python", str(venv_python), "install", "-q", "--no-deps", str(wheel))
    # The dependencies (lm-eval, datasets, ...) come from this venv's site-packages,
    # appended after the fresh venv's own, so its installed themisto wins.
    purelib = run(str(venv_python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])").stdout.strip()
    Path(purelib, "dependencies.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")

    check = textwrap.dedent(
        """
        import themisto.evaluation as evaluation
        assert "site-packages" in evaluation.__file__, evaluation.__file__
        manager = evaluation.task_manager()
        print(sorted(manager.all_tasks))
        task = manager.load(["themisto_output_runtime"])["tasks"]["themisto_output_runtime"]
        docs = task.test_docs()
        print(len(docs), docs.column_names)
        """
    )
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    # PYTHONPATH (a checkout on it) would shadow the installed wheel
    env = {k: v for k, v in os.environ.items() if k not in (DATA_ENV, "PYTHONPATH")}
    env |= {"HF_DATASETS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"}
    env["HF_DATASETS_CACHE"] = str(tmp_path / "cache")
    done = run(str(venv_python), "-c", check, cwd=elsewhere, env=env)
    tasks_line, docs_line = done.stdout.strip().splitlines()[-2:]
    assert tasks_line == str(sorted([*LM_EVAL_GROUPS, *LM_EVAL_TASKS]))
    count, columns = docs_line.split(" ", 1)
    assert int(count) > 0
    for column in ("example_id", "history", "code", "runtime", "runtime_text", "prompt", "target"):
        assert f"'{column}'" in columns
