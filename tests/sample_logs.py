"""lm-eval sample logs written by lm-eval's own EvaluationTracker, for the report's tests and benchmark.

``write_run`` saves results and samples exactly as ``lm_eval --log_samples
--output_path`` does; ``write_exec_samples`` writes what ``themisto exec-score``
leaves next to them.
"""

from __future__ import annotations

import json
from pathlib import Path

from lm_eval.loggers import EvaluationTracker
from lm_eval.utils import hash_string

from themisto.evaluation.metrics import score_sample
from themisto.lm_eval_files import task_versions


def lm_eval_sample(doc_id: int, doc: dict, prediction: str, filter_name: str = "answer") -> dict:
    """One logged sample with the keys lm-eval's evaluator gives it (Themisto's filter: answer)."""
    metrics = score_sample(prediction, doc["target"])
    sample = {
        "doc_id": doc_id,
        "doc": doc,
        "target": doc["target"],
        "arguments": [(doc["prompt"], {"until": ["\n\n"]})],
        "resps": [[prediction]],
        "filtered_resps": [prediction],
        "filter": filter_name,
        "metrics": list(metrics),
        "doc_hash": hash_string(json.dumps(doc)),
        "prompt_hash": hash_string(doc["prompt"]),
        "target_hash": hash_string(doc["target"]),
    }
    sample.update(metrics)
    return sample


def lm_eval_likelihood_sample(doc_id: int, doc: dict, loglikelihood: float, greedy: bool) -> dict:
    """One logged sample of a likelihood (``*_bpb``) task: lm-eval's ``[loglikelihood, bytes]`` and greedy_match."""
    size = len(doc["target"].encode("utf-8"))
    return {
        "doc_id": doc_id,
        "doc": doc,
        "target": doc["target"],
        "arguments": [(doc["prompt"], doc["target"])],
        "resps": [[(loglikelihood, greedy)]],
        "filtered_resps": [(loglikelihood, greedy)],
        "filter": "none",
        "metrics": ["bits_per_byte", "greedy_match"],
        "doc_hash": hash_string(json.dumps(doc)),
        "prompt_hash": hash_string(doc["prompt"]),
        "target_hash": hash_string(doc["target"]),
        "bits_per_byte": (loglikelihood, size),
        "greedy_match": int(greedy),
    }


def write_run(
    output: Path,
    model: str,
    model_args: str,
    samples_by_task: dict[str, list[dict]],
    split: str | None = None,
    build: str | None = None,
) -> Path:
    """Save results and samples as ``lm_eval --log_samples --output_path`` does; return the model's folder.

    ``split`` and ``build`` go into each task's logged metadata as ``themisto eval`` puts them.
    """
    tracker = EvaluationTracker(output_path=str(output))
    tracker.general_config_tracker.log_experiment_args(
        model_source=model,
        model_args=model_args,
        system_instruction=None,
        chat_template=None,
        fewshot_as_multiturn=False,
    )
    given = {"themisto_split": split, "themisto_data": build}
    logged = {key: value for key, value in given.items() if value is not None}
    versions = task_versions()  # the version each task YAML has, as lm-eval logs it

    def config(task: str) -> dict:
        metadata = {"metadata": {"version": float(versions.get(task, "1.0")), **logged}} if logged else {}
        return {"task": task, **metadata}

    results = {
        "results": {task: {"alias": task} for task in samples_by_task},
        "configs": {task: config(task) for task in samples_by_task},
        "config": {"model": model, "model_args": model_args},
    }
    tracker.save_results_aggregated(results=results, samples=samples_by_task)
    for task, samples in samples_by_task.items():
        tracker.save_results_samples(task_name=task, samples=samples)
    return output / str(tracker.general_config_tracker.model_name_sanitized)


def write_exec_samples(folder: Path, task: str, lines: list[dict]) -> Path:
    """``exec_samples_<task>.jsonl`` next to the task's sample log, one JSON object a line."""
    path = folder / f"exec_samples_{task}.jsonl"
    path.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    return path
