"""The hosted-model path end to end: lm-eval's API models against a real OpenAI-compatible server.

The server is ``transformers serve`` (``transformers[serving]``), started here on
127.0.0.1 with the tiny random GPT-2 of ``tests/tiny_model.py`` given a chat
template, offline; nothing is downloaded. The commands are those of the task
README (``lm_eval_tasks/themisto/README.md``), with ``--limit`` and a short
``max_gen_toks`` so a random model's generations take seconds. Its time goes to
making the model, the server's start, and the plain ``lm_eval`` command's
indexing of its built-in tasks.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from dataset_fixture import task_rows
from openai_server import posts, running_server
from repository import REPOSITORY
from test_eval_e2e import read_run
from tiny_model import make_tiny_model

from themisto.cli import main as themisto_main
from themisto.evaluation.harness import task_manager
from themisto.evaluation.limit import spread_sample
from themisto.evaluation.metrics import score_sample
from themisto.vocabulary import LM_EVAL_TASKS, METRIC_NAMES

BIN = Path(sys.executable).parent
OFFLINE = {"HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"}
# a prompt is one user message; the template only joins the messages, as a chat model's would
CHAT_TEMPLATE = "{% for message in messages %}{{ message['content'] }}{% endfor %}"
SERVER_START_S = 180
LIMIT = 2
# the model arguments of both runs, as the task README gives them (MODEL, and the server on port 8000)
CHAT_ARGS = "model={model},base_url={base}/chat/completions,num_concurrent=1,max_retries=1"
COMPLETION_ARGS = (
    "model={model},base_url={base}/completions,tokenizer_backend=huggingface,tokenizer={model},"
    "tokenized_requests=False,num_concurrent=1,max_retries=1"
)


@pytest.fixture(scope="module")
def chat_model(data_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The tiny GPT-2 with a chat template, as a local model folder."""
    from transformers import AutoTokenizer

    folder = make_tiny_model(data_dir, tmp_path_factory.mktemp("tiny-chat-gpt2"))
    tokenizer = AutoTokenizer.from_pretrained(folder)
    tokenizer.chat_template = CHAT_TEMPLATE
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def server(chat_model: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path]]:
    """``transformers serve`` on 127.0.0.1 with the chat model loaded; its base URL and its log."""
    log = tmp_path_factory.mktemp("server") / "serve.log"
    command = [str(BIN / "transformers"), "serve", str(chat_model), "--device", "cpu", "--log-level", "info"]
    with running_server(command, log, SERVER_START_S, os.environ | OFFLINE) as (base, models):
        assert models == [str(chat_model)]
        yield base, log


def check_samples(samples: dict[str, list[dict]], data_dir: Path, spread: bool = False) -> None:
    """Each sample is a real answer of the server, scored by the package's metrics.

    The rows are lm-eval's first ``LIMIT``, or with ``spread`` (``themisto eval``) its sample over the trajectories.
    """
    for task, records in samples.items():
        rows = task_rows(data_dir, LM_EVAL_TASKS[task])
        chosen = spread_sample([row["trajectory_id"] for row in rows], LIMIT) if spread else range(LIMIT)
        expected = [rows[i]["example_id"] for i in chosen]
        assert [record["doc"]["example_id"] for record in records] == expected
        for record in records:
            (answer,) = record["filtered_resps"]
            assert isinstance(record["resps"][0][0], str)
            assert {name: record[name] for name in METRIC_NAMES} == pytest.approx(
                score_sample(answer, record["doc"]["target"])
            )


def test_lm_eval_scores_a_chat_model_through_chat_completions(
    server: tuple[str, Path], chat_model: Path, data_dir: Path, tmp_path: Path
) -> None:
    base, log = server
    before = posts(log, "chat/completions")
    out = tmp_path / "runs"
    command = [
        str(BIN / "lm_eval"), "run", "--include_path", str(REPOSITORY / "lm_eval_tasks"), "--tasks", "themisto_output_runtime",
        "--model", "local-chat-completions",
        "--model_args", CHAT_ARGS.format(model=chat_model, base=base),
        "--apply_chat_template", "--log_samples", "--output_path", str(out),
        "--limit", str(LIMIT), "--gen_kwargs", "max_gen_toks=8",
    ]  # fmt: skip
    env = os.environ | OFFLINE | {"THEMISTO_DATA": str(data_dir)}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    results, samples = read_run(out)
    check_samples(samples, data_dir)
    for record in samples["themisto_output_runtime"]:
        # the prompt went as one user message of the chat
        (messages,) = record["arguments"]["gen_args_0"]["arg_0"]  # lm-eval logs them as one JSON string
        messages = json.loads(messages)
        assert messages == [{"role": "user", "content": record["doc"]["prompt"]}]
    assert posts(log, "chat/completions") - before == LIMIT


def test_themisto_eval_scores_a_completion_model_with_its_tokenizer(
    server: tuple[str, Path], chat_model: Path, data_dir: Path, tmp_path: Path
) -> None:
    base, log = server
    before = posts(log, "completions")
    # the tokenizer gives lm-eval the EOS string it adds to the stop sequences; the prompt goes as text
    # (tokenized_requests=False), the one form transformers serve's /v1/completions takes
    model_args = COMPLETION_ARGS.format(model=chat_model, base=base)
    argv = ["eval", "--model", "local-completions", "--model-args", model_args]
    argv += ["--tasks", "themisto_next_cell", "--limit", str(LIMIT), "--gen-kwargs", "max_gen_toks=8"]
    assert themisto_main([*argv, "--data", str(data_dir), "-o", str(tmp_path / "runs")]) == 0
    results, samples = read_run(tmp_path / "runs")
    check_samples(samples, data_dir, spread=True)
    assert posts(log, "completions") - before == LIMIT
    for record in samples["themisto_next_cell"]:
        assert record["arguments"]["gen_args_0"]["arg_0"] == record["doc"]["prompt"]  # the prompt, unaltered


def test_every_request_stays_within_the_apis_four_stop_sequences(chat_model: Path, data_dir: Path) -> None:
    """lm-eval appends the tokenizer's EOS string to a task's stop sequences; the API honours four."""
    from lm_eval.models.openai_completions import LocalChatCompletion, LocalCompletionsAPI

    completions = LocalCompletionsAPI(
        model=str(chat_model), base_url="http://127.0.0.1:9/v1/completions", tokenizer=str(chat_model)
    )
    chat = LocalChatCompletion(model=str(chat_model), base_url="http://127.0.0.1:9/v1/chat/completions")
    eos = completions.eos_string
    assert eos == "<|endoftext|>"
    tasks = task_manager(str(data_dir)).load(list(LM_EVAL_TASKS))["tasks"]
    for name, task in tasks.items():
        if task.config.output_type != "generate_until":
            continue  # a likelihood task sends no stop sequences
        until = task.config.generation_kwargs["until"]
        sent = completions._create_payload(
            [1, 2], generate=True, gen_kwargs=copy.deepcopy(task.config.generation_kwargs), eos=eos
        )
        assert sent["stop"] == [*until, eos] and len(sent["stop"]) <= 4, name
        message = [{"role": "user", "content": "x"}]
        sent = chat._create_payload(
            message, generate=True, gen_kwargs=copy.deepcopy(task.config.generation_kwargs), eos=eos
        )
        assert sent["stop"] == [*until, eos], name  # none dropped by the chat model's cut at four


def test_the_task_readme_gives_the_commands_these_tests_run() -> None:
    readme = (REPOSITORY / "lm_eval_tasks" / "themisto" / "README.md").read_text(encoding="utf-8")
    documented = {"model": "MODEL", "base": "http://127.0.0.1:8000/v1"}
    assert f"--model local-chat-completions \\\n    --model_args {CHAT_ARGS.format(**documented)} \\\n" in readme
    assert "--apply_chat_template --log_samples" in readme
    assert (
        f"themisto eval --model local-completions \\\n    --model-args {COMPLETION_ARGS.format(**documented)}\n"
        in readme
    )
