"""The lm-eval task folder is upstream-ready: it runs without the package, and scores as it does with it.

``lm_eval/tasks/`` of the installed lm-eval is shared and never written: the
copy goes to a temporary folder passed as ``--include_path``, the way lm-eval
indexes its own folder. Its ``dataset_path`` names a local build instead of
the Hub id (``datasets`` reads a folder and a Hub repository of the same
files alike; nothing is downloaded). Most of its time: two subprocesses that
import lm-eval.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml
from dataset_fixture import task_rows
from repository import REPOSITORY

from themisto.cli import main as themisto_main
from themisto.evaluation.data import tasks_path
from themisto.vocabulary import BPB_TASKS, DATA_ENV, HUB_DATASET_ID, LM_EVAL_GROUPS, LM_EVAL_TASKS, METRIC_NAMES

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}


def run_checks(folder: Path, env: dict[str, str], *flags: str) -> dict[str, Any]:
    """Run tests/task_folder_check.py on ``folder`` in a fresh interpreter; its JSON report."""
    command = [sys.executable, str(REPOSITORY / "tests" / "task_folder_check.py"), str(folder), *flags]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=folder.parent)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def upstream_copy(data_dir: Path, into: Path) -> Path:
    """The task folder as lm-eval would hold it, ``dataset_path`` set to a build; only that line differs."""
    copy = into / "tasks" / "themisto"
    shutil.copytree(tasks_path(), copy, ignore=shutil.ignore_patterns("__pycache__"))
    base = copy / "_themisto_base"
    original = base.read_text(encoding="utf-8")
    line = f"dataset_path: {HUB_DATASET_ID}\n"
    assert original.count(line) == 1
    base.write_text(original.replace(line, f"dataset_path: {data_dir}\n"), encoding="utf-8")
    return copy


@pytest.fixture(scope="module")
def both_runs(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, Any], dict[str, Any]]:
    """The checks and scores of the package route and of the upstream copy without the package."""
    scratch = tmp_path_factory.mktemp("upstream")
    copy = upstream_copy(data_dir, scratch)
    base_env = {k: v for k, v in os.environ.items() if k != DATA_ENV} | OFFLINE
    base_env["HF_DATASETS_CACHE"] = str(scratch / "cache")
    package = run_checks(tasks_path(), base_env | {DATA_ENV: str(data_dir)})
    upstream = run_checks(copy, base_env, "--without-themisto")
    return package, upstream


@pytest.mark.slow
def test_every_task_passes_lm_evals_new_task_checks_with_and_without_the_package(
    both_runs: tuple[dict[str, Any], dict[str, Any]], data_dir: Path
) -> None:
    for report in both_runs:
        assert sorted(report["groups"]) == sorted(LM_EVAL_GROUPS)
        assert sorted(report["tasks"]) == sorted(LM_EVAL_TASKS)
        for name, config in LM_EVAL_TASKS.items():
            task = report["tasks"][name]
            assert task["dataset_name"] == config
            assert task["example_ids"] == [row["example_id"] for row in task_rows(data_dir, config)]
            assert task["prompts_are_the_rows"]
    package, upstream = both_runs
    # the package loads through its own loader; the copy through lm-eval's, from dataset_path
    assert all(task["custom_dataset"] for task in package["tasks"].values())
    assert not any(task["custom_dataset"] for task in upstream["tasks"].values())
    assert {task["dataset_path"] for task in package["tasks"].values()} == {HUB_DATASET_ID}
    assert {task["dataset_path"] for task in upstream["tasks"].values()} == {str(data_dir)}


@pytest.mark.slow
def test_the_fallback_metrics_give_the_package_values_sample_by_sample(
    both_runs: tuple[dict[str, Any], dict[str, Any]],
) -> None:
    package, upstream = both_runs
    compared = 0
    for name in BPB_TASKS:  # the likelihood tasks: [loglikelihood, target bytes] and greedy_match, alike
        ours, theirs = package["tasks"][name]["samples"], upstream["tasks"][name]["samples"]
        assert package["tasks"][name]["output_type"] == upstream["tasks"][name]["output_type"] == "loglikelihood"
        assert ours == theirs and ours
        assert all(s["metrics"]["bits_per_byte"][1] >= 0 and s["metrics"]["greedy_match"] in (0, 1) for s in ours)
        assert package["tasks"][name]["means"] == pytest.approx(upstream["tasks"][name]["means"])
    for name in LM_EVAL_TASKS.keys() - BPB_TASKS.keys():
        ours, theirs = package["tasks"][name]["samples"], upstream["tasks"][name]["samples"]
        assert [s["example_id"] for s in ours] == [s["example_id"] for s in theirs]
        for mine, other in zip(ours, theirs):
            assert mine["filtered"] == other["filtered"]  # the same unfencing
            for metric in METRIC_NAMES:
                assert mine["metrics"][metric] == pytest.approx(other["metrics"][metric], abs=1e-12), (name, metric)
            compared += 1
        for metric in METRIC_NAMES:
            key = f"{metric},answer"
            assert package["tasks"][name]["means"][key] == pytest.approx(upstream["tasks"][name]["means"][key])
    # the scripted answers reach every kind of value: exact, fenced, normalised-only, partial, empty
    values = [
        s["metrics"] for name in LM_EVAL_TASKS.keys() - BPB_TASKS.keys() for s in package["tasks"][name]["samples"]
    ]
    assert any(v["exact_match"] == 1 for v in values) and any(v["exact_match"] == 0 for v in values)
    assert any(v["exact_match_norm"] == 1 and v["exact_match"] == 0 for v in values)
    assert any(0 < v["rougeL"] < 1 for v in values) and any(0 < v["chrf"] < 1 for v in values)
    assert compared > 40
    # the right answer fenced as chat models write it scores strict exact match, with and without the package
    for report in both_runs:
        fenced = [
            sample
            for name, task in report["tasks"].items()
            if name not in BPB_TASKS  # a likelihood task's answer is a (loglikelihood, is_greedy) pair
            for sample in task["samples"]
            if sample["answer"].startswith(("```python\n", "Output:\n```\n"))
            and sample["answer"].count(sample["target"]) == 1
        ]
        assert len(fenced) > 5 and all(sample["metrics"]["exact_match"] == 1 for sample in fenced)


def test_the_task_readme_follows_lm_evals_template() -> None:
    readme = (tasks_path() / "README.md").read_text(encoding="utf-8")
    headings = [line for line in readme.splitlines() if line.startswith("#")]
    template = [
        "### Paper",
        "### Citation",
        "### Groups, Tags, and Tasks",
        "#### Groups",
        "#### Tags",
        "#### Tasks",
        "### Checklist",
    ]
    positions = [headings.index(heading) for heading in template]
    assert positions == sorted(positions)
    assert "arxiv.org/abs/2504.12365" in readme and "@misc{grotov2025themisto" in readme
    checklist = readme.split("### Checklist", 1)[1]
    for question in (
        "Is the task an existing benchmark in the literature?",
        "Have you referenced the original paper that introduced the task?",
        'Is the "Main" variant of this task clearly denoted?',
        "Have you noted which, if any, published evaluation setups are matched by this variant?",
    ):
        assert question in checklist
    for name in LM_EVAL_TASKS:
        assert f"`{name}`" in readme


def test_the_yaml_names_the_hub_copy_and_the_task_configs() -> None:
    base = yaml.safe_load(
        "\n".join(
            line for line in (tasks_path() / "_themisto_base").read_text().splitlines() if "!function" not in line
        )
    )
    assert base["dataset_path"] == HUB_DATASET_ID
    for name, config in LM_EVAL_TASKS.items():
        task = yaml.safe_load((tasks_path() / f"{name}.yaml").read_text())
        # lm-eval's own loader reads dataset_name; the package's loader reads themisto_config
        assert task["dataset_name"] == task["metadata"]["themisto_config"] == config


def test_tasks_path_prints_the_folder_for_include_path(capsys: pytest.CaptureFixture[str]) -> None:
    assert themisto_main(["tasks-path"]) == 0
    printed = capsys.readouterr().out.strip()
    assert Path(printed) == tasks_path() and (Path(printed) / "_themisto.yaml").is_file()
