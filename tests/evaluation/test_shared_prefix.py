"""themisto-hf-shared: the arms of an example over one pass of their shared prefix, scored as lm-eval's hf scores them.

Real lm-eval runs of the tiny random GPT-2 (tests/tiny_model.py) on the six
likelihood tasks of the fixture build, through ``themisto eval`` and through
``evaluate()`` with a model object, against lm-eval's own ``hf`` model; and
hand-made requests that share prefixes, repeat a context, or overflow the window.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from dataset_fixture import task_rows

from themisto.cli import main as themisto_main
from themisto.exceptions import InputError
from themisto.vocabulary import BPB_GROUP, BPB_METRIC, BPB_TASKS, SHARED_PREFIX_MODEL

TOLERANCE = 1e-4
LIMIT = 3


def loglikelihoods(samples: dict[str, list[dict[str, Any]]]) -> dict[tuple[str, str], tuple[float, int]]:
    """(task, example id) -> (log-likelihood in nats, greedy_match) from lm-eval's sample records."""
    return {
        (task, record["doc"]["example_id"]): (record[BPB_METRIC][0], record["greedy_match"])
        for task, records in samples.items()
        for record in records
    }


def cli_samples(model: str, tiny_model: Path, data_dir: Path, out: Path) -> dict[str, list[dict[str, Any]]]:
    """``themisto eval`` of ``model`` on the likelihood group; the sample records per task it wrote."""
    args = ["eval", "--model", model, "--model-args", f"pretrained={tiny_model},dtype=float32", "--device", "cpu"]
    assert (
        themisto_main([*args, "--tasks", BPB_GROUP, "--limit", str(LIMIT), "--data", str(data_dir), "-o", str(out)])
        == 0
    )
    return {
        path.name.removeprefix("samples_").rsplit("_", 1)[0]: [
            json.loads(line) for line in path.read_text().splitlines()
        ]
        for path in out.glob("*/samples_*.jsonl")
    }


def assert_same_scores(expected: dict[Any, tuple[float, Any]], actual: dict[Any, tuple[float, Any]]) -> None:
    assert actual.keys() == expected.keys()
    for key, (loglikelihood, greedy) in expected.items():
        assert actual[key][0] == pytest.approx(loglikelihood, abs=TOLERANCE), key
        assert actual[key][1] == greedy, key


def test_themisto_eval_scores_the_six_arms_as_lm_evals_hf_does(
    data_dir: Path, tiny_model: Path, tmp_path: Path
) -> None:
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    rows = [row for config in BPB_TASKS.values() for row in task_rows(data_dir, config)[:LIMIT]]
    # the shared walk, not lm-eval's path for requests beyond the window (1024), scores them
    assert max(len(tokenizer(row["prompt"] + row["target"]).input_ids) for row in rows) <= 1024
    expected = loglikelihoods(cli_samples("hf", tiny_model, data_dir, tmp_path / "hf"))
    actual = loglikelihoods(cli_samples(SHARED_PREFIX_MODEL, tiny_model, data_dir, tmp_path / "shared"))
    assert {task for task, _ in expected} == set(BPB_TASKS)
    assert len(expected) == len(BPB_TASKS) * LIMIT
    assert len({value for value, _ in expected.values()}) > LIMIT  # the arms' prompts score differently
    assert_same_scores(expected, actual)


def test_evaluate_with_a_model_object_shares_the_prefix_on_request(data_dir: Path, tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from themisto.evaluation import evaluate

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tasks = ["themisto_output_bpb", "themisto_output_runtime_bpb", "themisto_output_placebo_bpb"]
    runs = [
        evaluate(model, tasks=tasks, limit=2, data=str(data_dir), tokenizer=tokenizer, shared_prefix=shared)
        for shared in (False, True)
    ]
    plain, shared = (loglikelihoods(run["samples"]) for run in runs)
    assert len(plain) == 6
    assert_same_scores(plain, shared)
    with pytest.raises(InputError, match=SHARED_PREFIX_MODEL):
        evaluate("hf", tasks=tasks, data=str(data_dir), shared_prefix=True)


def test_shared_prefixes_run_once_and_overlong_requests_are_cut_as_lm_eval_cuts_them(tiny_model: Path) -> None:
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from themisto.evaluation.shared_prefix import SharedPrefixHFLM

    history = "Cell 1:\nx = 1\nprint(x)\nOutput:\n1\n" * 8
    pairs = [
        (history + "Runtime: x: int\nPredict:", "1"),
        (history + "Predict:", "1"),
        (history + "Predict:", " 2"),  # the same context twice, as multiple choice asks
        (history, "Predict:"),  # a context that is a prefix of the others'
        ("x", " = 1"),
        (history * 6, " overflow"),  # longer than the window: cut from the left, shared with nothing
    ]
    requests = [Instance("loglikelihood", {}, pair, index) for index, pair in enumerate(pairs)]
    reference = HFLM(pretrained=str(tiny_model), max_length=512, device="cpu")
    shared = SharedPrefixHFLM(pretrained=str(tiny_model), max_length=512, device="cpu")
    expected = reference.loglikelihood(requests)
    actual = shared.loglikelihood(requests)
    assert_same_scores(dict(enumerate(expected)), dict(enumerate(actual)))
    tokens = [len(reference.tok_encode(context + target)) for context, target in pairs[:-1]]
    assert len(reference.tok_encode(pairs[-1][0])) > 512  # the overflow case really overflows
    history_tokens = len(reference.tok_encode(history))
    # the history is run once, not five times; each request reruns at most its own remainder and one token
    assert (
        history_tokens
        < shared.tokens_run
        <= history_tokens + sum(n - history_tokens + 2 for n in tokens[:4]) + tokens[4]
    )
    assert shared.tokens_run < sum(tokens) / 2


def test_the_callback_logs_the_likelihood_deltas_of_the_model_being_trained(
    data_dir: Path, tiny_model: Path, tmp_path: Path
) -> None:
    from transformers import (
        AutoModelForCausalLM,
        AutoTokenizer,
        Trainer,
        TrainerControl,
        TrainerState,
        TrainingArguments,
    )

    from themisto.integrations import ThemistoCallback

    model = AutoModelForCausalLM.from_pretrained(tiny_model).train()
    args = TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True)
    trainer = Trainer(model=model, args=args, processing_class=AutoTokenizer.from_pretrained(tiny_model))
    callback = ThemistoCallback(trainer, tasks=[BPB_GROUP], limit=2, data=str(data_dir), shared_prefix=True)
    callback.on_evaluate(trainer.args, TrainerState(is_world_process_zero=True), TrainerControl(), model=model)
    (logged,) = trainer.state.log_history
    for task in ("themisto_output_bpb", "themisto_next_cell_bpb"):
        runtime = logged[f"themisto/{task.replace('_bpb', '_runtime_bpb')}/{BPB_METRIC}"]
        placebo = logged[f"themisto/{task.replace('_bpb', '_placebo_bpb')}/{BPB_METRIC}"]
        plain = logged[f"themisto/{task}/{BPB_METRIC}"]
        assert logged[f"themisto/delta/{task}/{BPB_METRIC}"] == pytest.approx(runtime - plain)
        assert logged[f"themisto/delta/{task.replace('_bpb', '_placebo_bpb')}/{BPB_METRIC}"] == pytest.approx(
            runtime - placebo
        )
        assert plain > 0 and runtime != plain  # a random model pays bits for every byte, differently per arm
    assert model.training  # put back in the mode it had
