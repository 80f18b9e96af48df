"""lm-eval's ``vllm`` model on the real model, end to end, and its agreement with lm-eval's ``hf`` model.

SmolLM2-135M-Instruct, exported once (the ``smollm2_dir`` fixture of ``tests/conftest.py``), is loaded by vLLM's CPU engine once
for the module and by lm-eval's ``hf`` model once; both score the same examples of the fixture build,
in float32. Agreement: every example's bits per byte within ``BPB_TOLERANCE`` on the six likelihood
arms, with and without the chat template, and the same greedy answer on at least ``AGREEMENT`` of the
generative examples. The commands (``themisto eval --model vllm``, plain ``lm_eval --model vllm``) each
load an engine of their own, and score as the module's engine does.
"""

from __future__ import annotations

import gc
import json
import math
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from vllm_engine import DTYPE, IN_PROCESS, MAX_MODEL_LEN, engine_args

from themisto.evaluation.harness import evaluate
from themisto.lm_eval_files import find_sample_log_files
from themisto.vocabulary import BPB_GROUP, BPB_METRIC, BPB_TASKS, GROUP_TASKS, OUTPUT_TASK, RUNTIME_SUFFIX

pytestmark = pytest.mark.vllm

BIN = Path(sys.executable).parent
LIMIT = 4  # examples per task: 24 likelihood requests, 16 generations
MAX_GEN_TOKS = 48
# Both backends run the same float32 weights; their log-likelihoods differ only by the order of float32
# sums (vLLM's CPU attention and matmul kernels against torch's), relative errors near 1e-6 per token,
# far below 1e-3 bits per byte, while arms and examples differ by 1e-2 and more.
BPB_TOLERANCE = 1e-3
AGREEMENT = 0.9
CHAT_TASKS = (OUTPUT_TASK + RUNTIME_SUFFIX, OUTPUT_TASK + RUNTIME_SUFFIX + "_bpb")


def bits_per_byte(samples: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], float]:
    """(task, example id) -> the target's bits per byte (per byte of at least one: some targets are empty)."""
    return {
        (task, record["doc"]["example_id"]): -record[BPB_METRIC][0] / max(record[BPB_METRIC][1], 1) / math.log(2)
        for task, records in samples.items()
        for record in records
    }


def answers(samples: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], str]:
    """(task, example id) -> the model's greedy answer, as the metrics saw it."""
    return {
        (task, record["doc"]["example_id"]): record["filtered_resps"][0]
        for task, records in samples.items()
        for record in records
    }


def run(model: Any, tasks: list[str], data_dir: Path, **kwargs: Any) -> dict[str, list[dict[str, Any]]]:
    """``evaluate`` of a loaded lm-eval model on ``tasks``; its sample records per task."""
    results = evaluate(model, tasks=tasks, limit=LIMIT, data=str(data_dir), **kwargs)
    assert results is not None
    return results["samples"]


@pytest.fixture(scope="module")
def engine(smollm2_dir: Path) -> Iterator[Any]:
    """lm-eval's vllm model on the exported SmolLM2, one engine for the module."""
    from lm_eval.models.vllm_causallms import VLLM

    lm = VLLM(pretrained=str(smollm2_dir), dtype=DTYPE, max_model_len=MAX_MODEL_LEN, seed=0, **IN_PROCESS)
    yield lm
    del lm  # the engine's process ends with the last reference
    gc.collect()


@pytest.fixture(scope="module")
def hf(smollm2_dir: Path) -> Any:
    """lm-eval's hf model on the same folder, float32 on the CPU."""
    from lm_eval.models.huggingface import HFLM

    return HFLM(pretrained=str(smollm2_dir), dtype=DTYPE, device="cpu", max_length=MAX_MODEL_LEN)


@pytest.fixture(scope="module")
def engine_bpb(engine: Any, data_dir: Path) -> dict[tuple[str, str], float]:
    """The engine's bits per byte on the six likelihood arms."""
    return bits_per_byte(run(engine, [BPB_GROUP], data_dir))


@pytest.mark.parametrize("chat", [False, True], ids=["plain", "chat-template"])
def test_vllm_scores_each_example_as_hf_does(
    engine: Any, hf: Any, engine_bpb: dict[tuple[str, str], float], data_dir: Path, chat: bool
) -> None:
    tasks = [BPB_GROUP] if not chat else [CHAT_TASKS[1]]
    got = engine_bpb if not chat else bits_per_byte(run(engine, tasks, data_dir, apply_chat_template=True))
    want = bits_per_byte(run(hf, tasks, data_dir, apply_chat_template=chat))
    assert got.keys() == want.keys()
    assert {task for task, _ in got} == (set(BPB_TASKS) if not chat else {CHAT_TASKS[1]})
    worst = max(abs(got[key] - want[key]) for key in want)
    print(f"largest |vllm - hf| bits per byte over {len(want)} examples: {worst:.2e}")  # shown by pytest -rP
    assert worst <= BPB_TOLERANCE, worst
    assert len({round(value, 3) for value in want.values()}) > len(want) // 2  # real scores, not a constant


@pytest.mark.parametrize("chat", [False, True], ids=["plain", "chat-template"])
def test_vllm_gives_hfs_greedy_answers(engine: Any, hf: Any, data_dir: Path, chat: bool) -> None:
    tasks = list(GROUP_TASKS) if not chat else [CHAT_TASKS[0]]
    options = {"gen_kwargs": f"max_gen_toks={MAX_GEN_TOKS}", "apply_chat_template": chat}
    vllm_samples, hf_samples = (run(model, tasks, data_dir, **options) for model in (engine, hf))
    got, want = answers(vllm_samples), answers(hf_samples)
    assert got.keys() == want.keys() and len(want) == LIMIT * len(tasks)
    same = sum(got[key] == want[key] for key in want) / len(want)
    print(f"the same greedy answer on {same:.0%} of {len(want)} examples")  # shown by pytest -rP
    assert same >= AGREEMENT, {key: (got[key], want[key]) for key in want if got[key] != want[key]}
    assert any(answer.strip() for answer in want.values())  # the model answered something
    for task, records in vllm_samples.items():
        for record, hf_record in zip(records, hf_samples[task], strict=True):
            (prompt, _), (hf_prompt, _) = record["arguments"][0], hf_record["arguments"][0]
            assert prompt == hf_prompt  # the same rendered prompt
            assert prompt.startswith("<|im_start|>") == chat


def _command_samples(command: list[str], out: Path, data_dir: Path) -> dict[str, list[dict[str, Any]]]:
    env = os.environ | {"THEMISTO_DATA": str(data_dir)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900, cwd=out.parent)
    assert done.returncode == 0, done.stderr[-4000:]
    return {
        log.task: [json.loads(line) for line in log.path.read_text().splitlines()]
        for log in find_sample_log_files([out])
    }


def test_themisto_eval_runs_vllm_on_the_exported_folder(
    smollm2_dir: Path, engine_bpb: dict[tuple[str, str], float], data_dir: Path, tmp_path: Path
) -> None:
    out = tmp_path / "runs"
    command = [str(BIN / "themisto"), "eval", "--model", "vllm", "--model-args", engine_args(smollm2_dir)]
    command += ["--tasks", f"{BPB_GROUP},{OUTPUT_TASK}", "--limit", str(LIMIT), "--data", str(data_dir)]
    samples = _command_samples(
        [*command, "--gen-kwargs", f"max_gen_toks={MAX_GEN_TOKS}", "-o", str(out)], out, data_dir
    )
    assert set(samples) == {*BPB_TASKS, OUTPUT_TASK}
    got = bits_per_byte({task: records for task, records in samples.items() if task in BPB_TASKS})
    assert got.keys() == engine_bpb.keys()
    assert max(abs(got[key] - engine_bpb[key]) for key in got) <= BPB_TOLERANCE
    assert len(samples[OUTPUT_TASK]) == LIMIT


def test_plain_lm_eval_runs_vllm_with_the_chat_template(smollm2_dir: Path, data_dir: Path, tmp_path: Path) -> None:
    tasks_path = subprocess.run([str(BIN / "themisto"), "tasks-path"], capture_output=True, text=True, check=True)
    out = tmp_path / "runs"
    command = [
        str(BIN / "lm_eval"), "run", "--include_path", tasks_path.stdout.strip(), "--model", "vllm",
        "--model_args", engine_args(smollm2_dir), "--tasks", ",".join(CHAT_TASKS), "--apply_chat_template",
        "--limit", str(LIMIT), "--gen_kwargs", f"max_gen_toks={MAX_GEN_TOKS}", "--log_samples", "--output_path", str(out),
    ]  # fmt: skip
    samples = _command_samples(command, out, data_dir)
    assert set(samples) == set(CHAT_TASKS)
    for records in samples.values():
        assert len(records) == LIMIT
        assert all(record["arguments"]["gen_args_0"]["arg_0"].startswith("<|im_start|>") for record in records)
