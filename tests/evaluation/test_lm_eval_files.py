"""Sample logs are found and dated by lm-eval's own naming rule: the newest run of each task per folder wins."""

from __future__ import annotations

import inspect
import shutil
from pathlib import Path

import pytest
import yaml
from sample_logs import lm_eval_sample, write_run

from themisto.evaluation.data import load_task_dataset, tasks_path
from themisto.exceptions import InputError
from themisto.lm_eval_files import find_sample_log_files, newest_sample_logs
from themisto.vocabulary import CONFIG_KEY, DATA_KEY, LM_EVAL_TASKS, SPLIT_KEY

TASKS = ("themisto_next_cell", "themisto_next_cell_runtime")  # a task name with underscores of its own


def _run(output: Path) -> str:
    """One lm-eval run of both tasks, saved by lm-eval's EvaluationTracker; the timestamp it named its files by."""
    before = set(output.rglob("results_*.json"))
    doc = {"example_id": "e", "trajectory_id": "t", "step": 1, "prompt": "p", "target": "x = 1"}
    write_run(output, "hf", "pretrained=m", {task: [lm_eval_sample(0, doc, "x = 1")] for task in TASKS})
    (results,) = set(output.rglob("results_*.json")) - before
    return results.stem.removeprefix("results_")


def test_the_newest_run_of_each_task_is_chosen_by_the_name_not_the_file_time(tmp_path: Path) -> None:
    first, second = _run(tmp_path), _run(tmp_path)
    (folder,) = {path.parent for path in tmp_path.rglob("samples_*.jsonl")}
    # a copy of the first run's log written last, under a yet older timestamp: its file time is the newest
    shutil.copy(
        folder / f"samples_{TASKS[0]}_{first}.jsonl", folder / f"samples_{TASKS[0]}_2000-01-01T00-00-00.0.jsonl"
    )
    (folder / "samples_notes.jsonl").write_text("")  # no task by lm-eval's rule: not a sample log

    logs = find_sample_log_files([tmp_path, folder])  # a folder given twice counts its files once
    assert len(logs) == 5 and {log.task for log in logs} == set(TASKS)
    newest, older = newest_sample_logs(logs)
    assert [(log.path, log.task, log.stamp) for log in newest] == [
        (folder / f"samples_{task}_{second}.jsonl", task, second) for task in TASKS
    ]
    assert sorted(log.stamp for log in older) == ["2000-01-01T00-00-00.0", first, first]


def test_a_run_folder_that_does_not_exist_is_an_input_error(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="^run folder not found: "):
        find_sample_log_files([tmp_path / "absent"])


def test_the_metadata_keys_are_the_task_loaders_parameters_and_the_task_files_keys() -> None:
    parameters = inspect.signature(load_task_dataset).parameters
    assert {CONFIG_KEY, DATA_KEY, SPLIT_KEY} <= set(parameters)
    for task, config in LM_EVAL_TASKS.items():
        spec = yaml.safe_load((tasks_path() / f"{task}.yaml").read_text(encoding="utf-8"))
        assert spec["metadata"][CONFIG_KEY] == config


def test_a_log_named_without_a_timestamp_is_not_taken_for_its_task(tmp_path: Path) -> None:
    (tmp_path / "samples_themisto_next_cell.jsonl").write_text("")  # lm-eval always names the run's timestamp
    (log,) = find_sample_log_files([tmp_path])
    assert (log.task, log.stamp) == ("themisto_next", "cell")  # lm-eval's rule reads it so: not a next-cell log
