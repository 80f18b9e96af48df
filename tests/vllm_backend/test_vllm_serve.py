"""The hosted path against a real vLLM server: lm-eval's API models talking to ``vllm serve``.

``vllm serve`` runs the exported SmolLM2 on 127.0.0.1, offline. The commands are the task README's
(``lm_eval_tasks/themisto/README.md``), as tests/evaluation/test_openai_server.py runs them against
``transformers serve``: ``local-chat-completions`` with the chat template, ``local-completions`` with the
model's tokenizer, for a generative task and, through the completions endpoint's prompt log-probabilities
(``echo``), a likelihood task, whose bits per byte are compared with lm-eval's ``hf`` model on the same
examples.
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from openai_server import posts, running_server
from vllm_engine import DTYPE, MAX_MODEL_LEN

from themisto.cli import main as themisto_main
from themisto.evaluation.harness import evaluate
from themisto.lm_eval_files import find_sample_log_files
from themisto.vocabulary import BPB_METRIC, NEXT_CELL_TASK, OUTPUT_TASK, RUNTIME_SUFFIX

pytestmark = pytest.mark.vllm

BIN = Path(sys.executable).parent
SERVER_START_S = 900  # a first load compiles the model's graphs: minutes on two shared cores
LIMIT = 3
MAX_GEN_TOKS = 32
BPB_TASK = NEXT_CELL_TASK + "_bpb"
BPB_TOLERANCE = 1e-3  # as tests/vllm_backend/test_vllm.py: float32 on both sides
CHAT_ARGS = "model={model},base_url={base}/chat/completions,num_concurrent=1,max_retries=1"
COMPLETION_ARGS = (
    "model={model},base_url={base}/completions,tokenizer_backend=huggingface,tokenizer={model},"
    "tokenized_requests=False,num_concurrent=1,max_retries=1"
)


@pytest.fixture(scope="module")
def server(smollm2_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``vllm serve`` with the exported SmolLM2; its base URL and its log."""
    log = tmp_path_factory.mktemp("vllm-serve") / "serve.log"
    command = [str(BIN / "vllm"), "serve", str(smollm2_dir), "--dtype", DTYPE, "--max-model-len", str(MAX_MODEL_LEN)]
    # the server's engine core runs in a process of its own; the model runs there too, uncompiled
    command += ["--seed", "0", "--enforce-eager", "--distributed-executor-backend", "uni"]
    env = {name: value for name, value in os.environ.items() if name != "VLLM_ENABLE_V1_MULTIPROCESSING"}
    with running_server(command, log, SERVER_START_S, env) as (base, models):
        assert models == [str(smollm2_dir)]
        yield base, log


def samples_of(out: Path) -> dict[str, list[dict[str, Any]]]:
    """The sample records per task of the lm-eval run written under ``out``."""
    logs = find_sample_log_files([out])
    return {log.task: [json.loads(line) for line in log.path.read_text().splitlines()] for log in logs}


def test_lm_eval_scores_through_vllms_chat_completions(
    server: tuple[str, Path], smollm2_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    base, log = server
    before = posts(log, "chat/completions")
    task = OUTPUT_TASK + RUNTIME_SUFFIX
    out = tmp_path / "runs"
    command = [
        str(BIN / "lm_eval"), "run", "--include_path", str(Path(__file__).parents[2] / "lm_eval_tasks"),
        "--tasks", task, "--model", "local-chat-completions",
        "--model_args", CHAT_ARGS.format(model=smollm2_dir, base=base),
        "--apply_chat_template", "--log_samples", "--output_path", str(out),
        "--limit", str(LIMIT), "--gen_kwargs", f"max_gen_toks={MAX_GEN_TOKS}",
    ]  # fmt: skip
    env = os.environ | {"THEMISTO_DATA": str(data_dir)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=600, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    records = samples_of(out)[task]
    assert len(records) == LIMIT and posts(log, "chat/completions") - before == LIMIT
    for record in records:
        (messages,) = record["arguments"]["gen_args_0"]["arg_0"]  # lm-eval logs them as one JSON string
        messages = json.loads(messages)
        assert messages == [{"role": "user", "content": record["doc"]["prompt"]}]
    assert any(record["filtered_resps"][0].strip() for record in records)  # SmolLM2 answered


def test_themisto_eval_scores_through_vllms_completions_as_hf_does(
    server: tuple[str, Path], smollm2_dir: Path, data_dir: Path, tmp_path: Path
) -> None:
    from lm_eval.models.huggingface import HFLM

    base, log = server
    before = posts(log, "completions")
    model_args = COMPLETION_ARGS.format(model=smollm2_dir, base=base)
    argv = [
        "eval",
        "--model",
        "local-completions",
        "--model-args",
        model_args,
        "--tasks",
        f"{NEXT_CELL_TASK},{BPB_TASK}",
    ]
    argv += ["--limit", str(LIMIT), "--gen-kwargs", f"max_gen_toks={MAX_GEN_TOKS}"]
    assert themisto_main([*argv, "--data", str(data_dir), "-o", str(tmp_path / "runs")]) == 0
    samples = samples_of(tmp_path / "runs")
    assert {task: len(records) for task, records in samples.items()} == {NEXT_CELL_TASK: LIMIT, BPB_TASK: LIMIT}
    assert posts(log, "completions") - before == 2 * LIMIT
    for record in samples[NEXT_CELL_TASK]:
        assert record["arguments"]["gen_args_0"]["arg_0"] == record["doc"]["prompt"]  # the prompt, unaltered

    hf = HFLM(pretrained=str(smollm2_dir), dtype=DTYPE, device="cpu", max_length=MAX_MODEL_LEN)
    results = evaluate(hf, tasks=[BPB_TASK], limit=LIMIT, data=str(data_dir))
    assert results is not None
    for served, local in zip(samples[BPB_TASK], results["samples"][BPB_TASK], strict=True):
        assert served["doc"]["example_id"] == local["doc"]["example_id"]
        (served_ll, size), (local_ll, _) = served[BPB_METRIC], local[BPB_METRIC]
        assert abs(served_ll - local_ll) / max(size, 1) / math.log(2) <= BPB_TOLERANCE
