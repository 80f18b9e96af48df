"""Themisto in a training loop: a real ``Trainer`` on a tiny random GPT-2 with ``ThemistoCallback``.

On CPU: a few training steps, two Themisto evaluations of two examples per
task, 8 generated tokens each.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import pytest
from dataset_fixture import task_rows

from themisto.evaluation import evaluate, scores
from themisto.vocabulary import METRIC_NAMES

pytestmark = pytest.mark.slow  # each test runs lm-eval through the Python API or a Trainer

TASKS = ["themisto_output", "themisto_output_runtime", "themisto_next_cell"]
# the likelihood arms of output prediction: the callback logs their deltas too
BPB = ["themisto_output_bpb", "themisto_output_runtime_bpb", "themisto_output_placebo_bpb"]
BPB_METRICS = ("bits_per_byte", "greedy_match")
GEN = {"max_gen_toks": 8}


def samples_means(run_dir: Path) -> dict[str, dict[str, float]]:
    """Each task's per-sample metric means, from the sample logs lm-eval wrote under ``run_dir``."""
    (results_file,) = run_dir.glob("*/results_*.json")
    date = results_file.stem.removeprefix("results_")
    means = {}
    for task in json.loads(results_file.read_text(encoding="utf-8"))["configs"]:
        lines = (results_file.parent / f"samples_{task}_{date}.jsonl").read_text(encoding="utf-8").splitlines()
        records = [json.loads(line) for line in lines]
        means[task] = {metric: sum(r[metric] for r in records) / len(records) for metric in METRIC_NAMES}
    return means


def test_scores_flattens_each_task_and_the_paired_difference(data_dir: Path, tmp_path: Path) -> None:
    results = evaluate("themisto-repeat-last", tasks=["themisto"], data=str(data_dir), output_path=tmp_path, limit=5)
    assert results is not None
    flat = scores(results)
    means = samples_means(tmp_path)
    tasks = sorted(means)
    assert len(tasks) == 4
    expected = {f"themisto/{task}/{metric}": means[task][metric] for task in tasks for metric in METRIC_NAMES}
    for plain in ("themisto_output", "themisto_next_cell"):
        for metric in METRIC_NAMES:
            value = means[plain + "_runtime"][metric] - means[plain][metric]
            expected[f"themisto/delta/{plain}/{metric}"] = value
    assert flat.keys() == expected.keys()  # no group aggregate, no standard errors
    for key, value in expected.items():
        assert flat[key] == pytest.approx(value), key


def test_evaluate_puts_a_model_back_in_the_mode_it_was_in(data_dir: Path, tiny_model: Path) -> None:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    for training in (True, False):
        model.train(training)
        results = evaluate(
            model, tasks="themisto_output", limit=1, data=str(data_dir), tokenizer=tokenizer, gen_kwargs=GEN
        )
        assert results is not None and len(results["samples"]["themisto_output"]) == 1
        assert model.training is training
        assert all(module.training is training for module in model.modules())


class ModeProbe:
    """Callbacks around ThemistoCallback: the one before puts the model in train mode, the one after reads it."""

    def __init__(self) -> None:
        self.seen: list[bool] = []

    def before(self) -> Any:
        from transformers import TrainerCallback

        class Before(TrainerCallback):
            def on_evaluate(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
                model.train()  # as in a loop that evaluates mid-epoch

        return Before()

    def after(self) -> Any:
        from transformers import TrainerCallback

        seen = self.seen

        class After(TrainerCallback):
            def on_evaluate(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
                seen.append(model.training)

        return After()


def test_a_trainer_logs_themisto_scores_at_every_nth_evaluation(
    data_dir: Path, tiny_model: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    import datasets
    from transformers import AutoModelForCausalLM, AutoTokenizer, Trainer, TrainingArguments

    from themisto.integrations import ThemistoCallback

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    texts = [row["prompt"][-300:] + row["target"] for row in task_rows(data_dir, "output_prediction", "full")][:16]
    encoded = tokenizer(texts, truncation=True, max_length=128, padding="max_length")
    train = datasets.Dataset.from_dict({**encoded, "labels": encoded["input_ids"]})
    args = TrainingArguments(
        output_dir=str(tmp_path / "out"), max_steps=4, per_device_train_batch_size=4, per_device_eval_batch_size=4,
        eval_strategy="steps", eval_steps=1, logging_steps=1, report_to=[], use_cpu=True, save_strategy="no",
    )  # fmt: skip
    trainer = Trainer(
        model=model, args=args, train_dataset=train, eval_dataset=train.select(range(4)), processing_class=tokenizer
    )
    probe = ModeProbe()
    # The untrained model's likelihood arms: the callback logs the trained model minus this reference.
    start = evaluate(model, tasks=BPB, limit=2, data=str(data_dir), tokenizer=tokenizer)
    callback = ThemistoCallback(
        trainer, tasks=TASKS + BPB, limit=2, every_n_evals=2, data=str(data_dir), gen_kwargs=GEN,
        output_path=str(tmp_path / "themisto"), reference=start, reference_name="start",
    )  # fmt: skip
    for added in (probe.before(), callback, probe.after()):
        trainer.add_callback(added)
    with caplog.at_level(logging.WARNING):
        trainer.train()
    # the training log holds the scores, not lm-eval's warnings about the settings Themisto chose
    assert [record.getMessage() for record in caplog.records if record.name.startswith("lm_eval")] == []

    logged = [entry for entry in trainer.state.log_history if any(key.startswith("themisto/") for key in entry)]
    # four evaluations (steps 1-4), every second one scored: steps 2 and 4
    assert [entry["step"] for entry in logged] == [2, 4]
    assert callback.evaluations == 4
    for entry in logged:
        versus = {key for key in entry if key.startswith("themisto/vs/")}
        figures = ("", "/low", "/high", "/p", "/n", "/ranks")
        assert versus == {f"themisto/vs/start/{t}/bits_per_byte{f}" for t in BPB for f in figures}
        for task in BPB:
            key = f"themisto/vs/start/{task}/bits_per_byte"
            # two examples at most (an empty target has no bits per byte), of one or two trajectories:
            # the interval holds the mean, but p >= 0.5 and the benchmark does not separate the checkpoints
            assert entry[f"{key}/low"] <= entry[key] <= entry[f"{key}/high"] and entry[f"{key}/n"] in (1, 2)
            assert entry[f"{key}/p"] >= 0.5 and entry[f"{key}/ranks"] == 0
        keys = {key for key in entry if key.startswith("themisto/") and key not in versus}
        assert keys == {f"themisto/{t}/{m}" for t in TASKS for m in METRIC_NAMES} | {
            f"themisto/delta/themisto_output/{m}" for m in METRIC_NAMES
        } | {f"themisto/{t}/{m}" for t in BPB for m in BPB_METRICS} | {
            f"themisto/delta/{t}/{m}"
            for t in ("themisto_output_bpb", "themisto_output_placebo_bpb")
            for m in BPB_METRICS
        }
        for other in ("themisto_output_bpb", "themisto_output_placebo_bpb"):
            runtime = entry["themisto/themisto_output_runtime_bpb/bits_per_byte"]
            assert runtime > 0  # a random model: bits per byte, positive
            delta = entry[f"themisto/delta/{other}/bits_per_byte"]
            assert delta == pytest.approx(runtime - entry[f"themisto/{other}/bits_per_byte"])
        for metric in METRIC_NAMES:
            assert 0.0 <= entry[f"themisto/themisto_output/{metric}"] <= 1.0
            delta = entry[f"themisto/themisto_output_runtime/{metric}"] - entry[f"themisto/themisto_output/{metric}"]
            assert entry[f"themisto/delta/themisto_output/{metric}"] == pytest.approx(delta)
    assert {key: logged[-1][key] for key in callback.last_scores} == callback.last_scores
    # the model is left in the mode it had when the callback ran: train mode
    assert probe.seen == [True] * 4


def test_only_the_main_process_evaluates(data_dir: Path, tiny_model: Path, tmp_path: Path) -> None:
    from transformers import AutoModelForCausalLM, Trainer, TrainerControl, TrainerState, TrainingArguments

    from themisto.integrations import ThemistoCallback

    trainer = Trainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_model),
        args=TrainingArguments(output_dir=str(tmp_path), report_to=[], use_cpu=True),
    )
    callback = ThemistoCallback(trainer, tasks=["themisto_output"], limit=1, data=str(data_dir), gen_kwargs=GEN)
    state = TrainerState(is_world_process_zero=False)
    callback.on_evaluate(trainer.args, state, TrainerControl(), model=trainer.model)
    assert callback.evaluations == 1 and not callback.last_scores and not trainer.state.log_history
    with pytest.raises(Exception, match="every_n_evals"):
        ThemistoCallback(trainer, every_n_evals=0)
