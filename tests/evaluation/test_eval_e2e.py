"""End to end: real lm-eval runs of a tiny GPT-2 and of the baselines on the four tasks.

The model is a randomly initialised 2-layer GPT-2 with a byte-level BPE
tokenizer trained here on the prompts, so nothing is downloaded. The plain ``lm_eval``
command's indexing of its built-in tasks is most of its time.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from dataset_fixture import task_rows
from repository import REPOSITORY

from themisto.cli import main as themisto_main
from themisto.evaluation.limit import spread_sample
from themisto.evaluation.metrics import score_sample
from themisto.vocabulary import GROUP_TASKS as TASKS
from themisto.vocabulary import METRIC_NAMES

pytestmark = pytest.mark.slow  # each test runs lm-eval end to end (the tiny model alone takes seconds)

LIMIT = 3
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def read_run(run_dir: Path) -> tuple[dict[str, Any], dict[str, list[dict[str, Any]]]]:
    """The single results JSON under ``run_dir`` and its sample records per task."""
    (results_file,) = run_dir.glob("*/results_*.json")
    results = json.loads(results_file.read_text(encoding="utf-8"))
    date = results_file.stem.removeprefix("results_")
    samples = {}
    for task in results["configs"]:
        lines = (results_file.parent / f"samples_{task}_{date}.jsonl").read_text(encoding="utf-8").splitlines()
        samples[task] = [json.loads(line) for line in lines]
    return results, samples


def test_lm_eval_command_scores_a_tiny_gpt2_on_all_four_tasks(data_dir: Path, tiny_model: Path, tmp_path: Path) -> None:
    out = tmp_path / "out"
    command = [
        str(Path(sys.executable).parent / "lm_eval"), "run",
        "--include_path", str(REPOSITORY / "lm_eval_tasks"), "--tasks", "themisto",
        "--model", "hf", "--model_args", f"pretrained={tiny_model},dtype=float32",
        "--device", "cpu", "--batch_size", "4", "--limit", str(LIMIT),
        # A random model never stops early; 16 tokens keep CPU generation to seconds.
        "--gen_kwargs", "max_gen_toks=16",
        "--log_samples", "--output_path", str(out),
    ]  # fmt: skip
    env = os.environ | OFFLINE | {"THEMISTO_DATA": str(data_dir)}
    # A working directory with no lm_eval_tasks/ or hf_dataset/: nothing may rely on the cwd.
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    done = subprocess.run(command, cwd=elsewhere, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]

    results, samples = read_run(out)
    assert set(results["results"]) == {"themisto", *TASKS}
    assert results["configs"]["themisto_output"]["generation_kwargs"]["max_gen_toks"] == 16
    for task, config in TASKS.items():
        expected_ids = [row["example_id"] for row in task_rows(data_dir, config)][:LIMIT]
        records = samples[task]
        assert [record["doc"]["example_id"] for record in records] == expected_ids
        for record in records:
            (answer,) = record["filtered_resps"]
            assert record["arguments"]["gen_args_0"]["arg_0"] == record["doc"]["prompt"]  # the prompt, unaltered
            assert record["target"] == record["doc"]["target"]
            assert {name: record[name] for name in METRIC_NAMES} == pytest.approx(
                score_sample(answer, record["doc"]["target"])
            )
        for name in METRIC_NAMES:
            value = results["results"][task][f"{name},answer"]
            assert 0.0 <= value <= 1.0  # metrics are on a 0-1 scale
            assert value == pytest.approx(sum(record[name] for record in records) / len(records))


def test_a_trainer_evaluates_the_model_object_it_holds(data_dir: Path, tiny_model: Path, tmp_path: Path) -> None:
    from lm_eval.models.huggingface import HFLM
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from themisto.evaluation.harness import evaluate

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    results = evaluate(
        HFLM(pretrained=model, tokenizer=tokenizer, device="cpu"),
        tasks="themisto_next_cell_runtime",
        limit=2,
        output_path=tmp_path,
        data=str(data_dir),
        gen_kwargs={"max_gen_toks": 8},
    )
    assert set(results["results"]) == {"themisto_next_cell_runtime"}
    assert len(results["samples"]["themisto_next_cell_runtime"]) == 2
    written, samples = read_run(tmp_path)
    # named after the checkpoint it was loaded from, so two checkpoints' runs do not share a folder
    assert [path.name for path in tmp_path.iterdir()] == [tiny_model.name]
    assert written["results"]["themisto_next_cell_runtime"] == results["results"]["themisto_next_cell_runtime"]
    rows = task_rows(data_dir, "next_cell_prediction_runtime")
    spread = [rows[i]["example_id"] for i in spread_sample([row["trajectory_id"] for row in rows], 2)]
    assert [record["doc"]["example_id"] for record in samples["themisto_next_cell_runtime"]] == spread


def test_eval_runs_a_transformers_model_on_the_cpu_into_runs_by_default(
    data_dir: Path, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """No --device on a machine without CUDA (lm-eval alone would pick cuda), no -o: ./runs/<model folder>/."""
    import torch

    assert not torch.cuda.is_available()  # what this test is about; a GPU machine would hide the default
    monkeypatch.chdir(tmp_path)
    args = ["eval", "--model", "hf", "--model-args", f"pretrained={tiny_model}", "--tasks", "themisto_output"]
    assert themisto_main([*args, "--data", str(data_dir), "--limit", "2", "--gen-kwargs", "max_gen_toks=4"]) == 0
    results, samples = read_run(tmp_path / "runs")
    assert (tmp_path / "runs" / tiny_model.name).is_dir()
    assert results["config"]["device"] == "cpu"
    assert results["configs"]["themisto_output"]["generation_kwargs"]["max_gen_toks"] == 4
    assert len(samples["themisto_output"]) == 2


def test_a_model_argument_the_model_does_not_take_is_one_line(
    data_dir: Path, tiny_model: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["eval", "--model", "hf", "--model-args", f"pretrained={tiny_model},bogus=1", "--device", "cpu"]
    assert themisto_main([*args, "--data", str(data_dir), "--limit", "1", "-o", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("themisto eval: error: hf: a model argument is not accepted") and "'bogus'" in err[-1]
    assert not (tmp_path / "run").exists()


def baseline_run(model: str, data_dir: Path, out: Path, *options: str) -> dict[str, list[dict[str, Any]]]:
    """Run ``themisto eval`` on a baseline over all test examples; return its samples per task."""
    code = themisto_main(["eval", "--model", model, "-o", str(out), "--data", str(data_dir), *options])
    assert code == 0
    results, samples = read_run(out)
    for task, records in samples.items():
        for name in METRIC_NAMES:
            mean = sum(record[name] for record in records) / len(records)
            assert results["results"][task][f"{name},answer"] == pytest.approx(mean)
    return samples


def share(rows: list[dict[str, Any]], predicate: Callable[[dict[str, Any]], bool]) -> float:
    """The fraction of ``rows`` for which ``predicate`` holds."""
    return sum(1 for row in rows if predicate(row)) / len(rows)


def last_cell(row: dict[str, Any], field: str) -> str:
    """``field`` of the row's last history cell; "" when the history is empty (a session's first step)."""
    return row["history"][-1][field] if row["history"] else ""


def test_themisto_empty_scores_the_share_of_empty_targets(data_dir: Path, tmp_path: Path) -> None:
    samples = baseline_run("themisto-empty", data_dir, tmp_path)
    for task, config in TASKS.items():
        rows = task_rows(data_dir, config)
        assert len(samples[task]) == len(rows)
        exact = sum(record["exact_match"] for record in samples[task]) / len(samples[task])
        assert exact == pytest.approx(share(rows, lambda row: row["target"] == ""))


def test_themisto_repeat_last_scores_the_share_of_repeated_cells(data_dir: Path, tmp_path: Path) -> None:
    samples = baseline_run("themisto-repeat-last", data_dir, tmp_path)
    for task, config in TASKS.items():
        rows = task_rows(data_dir, config)
        field = "code" if config.startswith("next_cell") else "output"
        expected = share(rows, lambda row, field=field: last_cell(row, field) == row["target"])  # type: ignore[misc]
        exact = sum(record["exact_match"] for record in samples[task]) / len(samples[task])
        assert exact == pytest.approx(expected)
        assert 0 < expected < 1  # the fixture has repeated and new cells in every task
    # A run with chat templates (shared flags for models and baselines) scores the same.
    chat = baseline_run("themisto-repeat-last", data_dir, tmp_path / "chat", "--apply-chat-template")
    assert {task: [r["exact_match"] for r in records] for task, records in chat.items()} == {
        task: [r["exact_match"] for r in records] for task, records in samples.items()
    }


def test_themisto_repr_echo_helps_only_with_the_runtime_state(
    data_dir: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    samples = baseline_run("themisto-repr-echo", data_dir, tmp_path)
    rows = task_rows(data_dir, "output_prediction_runtime")
    reprs_shown = [
        record["doc"]["example_id"] for record in samples["themisto_output_runtime"] if record["filtered_resps"] != [""]
    ]
    # Cells whose code is a bare name of a variable defined before them.
    displayed = [row["example_id"] for row in rows if row["code"] in {variable["name"] for variable in row["runtime"]}]
    assert reprs_shown == displayed and displayed
    for task in ("themisto_output", "themisto_next_cell", "themisto_next_cell_runtime"):
        assert all(record["filtered_resps"] == [""] for record in samples[task])
    runtime = sum(r["exact_match"] for r in samples["themisto_output_runtime"])
    plain = sum(r["exact_match"] for r in samples["themisto_output"])
    assert runtime > plain

    # `themisto report` on these real logs: rows named by task alone (`answer`, every
    # task's only filter, is left out) and the gain as a paired runtime-vs-none row.
    capsys.readouterr()
    assert themisto_main(["report", str(tmp_path), "--resamples", "200"]) == 0
    report_rows = [[cell.strip() for cell in line.strip("|").split("|")] for line in capsys.readouterr().out.splitlines()
                   if line.startswith("| themisto-repr-echo ")]  # fmt: skip
    scores = [row for row in report_rows if len(row) == 7 and " vs " not in row[1]]  # the scores table
    assert sorted(row[1] for row in scores) == sorted(TASKS)
    # The first pair table is the per-example one (the trajectory-resampled table follows it).
    gain = next(row for row in report_rows if row[1:4] == ["themisto_output", "runtime − plain", "exact_match"])
    mean_gain = (runtime - plain) / len(samples["themisto_output"])
    assert float(gain[7].split()[0]) == pytest.approx(mean_gain, abs=5e-4)  # shown with 3 decimals
