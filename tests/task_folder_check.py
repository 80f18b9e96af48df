"""Run lm-eval's checks for new tasks on a task folder and score scripted answers; print JSON.

    python tests/task_folder_check.py TASK_FOLDER [--without-themisto]

Run as a script by ``tests/evaluation/test_task_folder.py``, once on the repository's
``lm_eval_tasks`` with the package importable and once on a copy of the folder
with ``dataset_path`` pointing at a build and ``themisto`` hidden by an import
blocker, as if the folder sat in lm-eval's own ``lm_eval/tasks/`` with no
package installed. The checks follow lm-eval's ``tests/building/test_tasks.py`` (the
suite its CI runs on new tasks), for every task of the folder; then a full
``simple_evaluate`` scores answers chosen per row (the target, fenced targets,
a wrong case, the previous output, nothing) and, for the likelihood tasks,
log-likelihoods chosen per row, so both runs' per-sample values can be compared.
"""

from __future__ import annotations

import importlib.abc
import json
import sys
from itertools import islice
from typing import Any

LIMIT = 10  # docs per task for the request checks, as lm-eval's test uses
GENERATIVE_METRICS = ("exact_match", "exact_match_norm", "rougeL", "chrf")
LIKELIHOOD_METRICS = ("bits_per_byte", "greedy_match")


class HideThemisto(importlib.abc.MetaPathFinder):
    """An import blocker: ``themisto`` and its submodules cannot be imported."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "themisto" or name.startswith("themisto."):
            raise ModuleNotFoundError(f"No module named {name!r} (hidden by the test)", name=name)
        return None


def scripted_answer(doc: dict[str, Any]) -> str:
    """An answer chosen by the row's step, so both runs give every row the same one."""
    target = doc["target"]
    previous = doc["history"][-1]["output"] if doc["history"] else ""
    answers = [
        target,
        f"```python\n{target}\n```\nThis is the answer.",
        f"Output:\n```\n{target.upper()}\n```\n",
        previous,
        "",
        f"{target}   \r\n<object at 0xdeadbeef>",
        f"Output:\n```\n{target}\n```",  # a chat model's right answer
        target.replace("\n", "  \r\n") + "\n",  # right once line ends and trailing whitespace are normalised
    ]
    return answers[doc["step"] % len(answers)]


def scripted_loglikelihood(doc: dict[str, Any]) -> tuple[float, bool]:
    """A (loglikelihood, is_greedy) chosen by the row, so both runs give every row the same one."""
    return -(len(doc["target"]) + doc["step"]) / 10, doc["step"] % 2 == 0


def main(folder: str) -> dict[str, Any]:
    from lm_eval import simple_evaluate
    from lm_eval.api.model import LM
    from lm_eval.tasks import TaskManager

    class ScriptedLM(LM):
        """Answers each request with :func:`scripted_answer` of its row."""

        def generate_until(self, requests: list[Any], disable_tqdm: bool = False) -> list[str]:
            return [scripted_answer(request.doc) for request in requests]

        def loglikelihood(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            return [scripted_loglikelihood(request.doc) for request in requests]

        def loglikelihood_rolling(self, requests: list[Any], disable_tqdm: bool = False) -> list[Any]:
            raise NotImplementedError

    manager = TaskManager(include_path=folder, include_defaults=False)
    report: dict[str, Any] = {"groups": manager.all_groups, "tasks": {}}
    every_task = sorted(manager.all_subtasks)
    for name, task in manager.load(every_task)["tasks"].items():
        # lm-eval's tests/building/test_tasks.py, check by check
        assert task.dataset is not None, name
        assert not task.has_training_docs() and not task.has_validation_docs() and task.has_test_docs(), name
        assert task.config.test_split is not None and task.should_decontaminate() in (True, False), name
        docs = list(islice(task.test_docs(), LIMIT))
        assert docs, f"{name}: no docs"
        texts = [task.doc_to_text(doc) for doc in docs]
        assert all(isinstance(text, str) and text for text in texts), name
        if task.config.target_delimiter.isspace():
            assert not any(text[-1].isspace() for text in texts), f"{name}: prompt and delimiter both end in whitespace"
        assert all(isinstance(task.doc_to_target(doc), str) for doc in docs), name
        task.build_all_requests(rank=0, limit=LIMIT, world_size=1)
        assert task.instances and len(task.instances) == len(docs), name
        requests = [task.construct_requests(doc=doc, ctx=task.doc_to_text(doc)) for doc in docs]
        assert len(requests) == len(docs), name
        report["tasks"][name] = {
            "output_type": task.config.output_type,
            "custom_dataset": task.config.custom_dataset is not None,
            "dataset_path": task.config.dataset_path,
            "dataset_name": task.config.dataset_name,
            "example_ids": list(task.test_docs()["example_id"]),
            "prompts_are_the_rows": texts == [doc["prompt"] for doc in docs],
        }
    results = simple_evaluate(model=ScriptedLM(), tasks=every_task, task_manager=manager, log_samples=True)
    assert results is not None
    for name, samples in results["samples"].items():
        likelihood = report["tasks"][name]["output_type"] == "loglikelihood"
        metrics = LIKELIHOOD_METRICS if likelihood else GENERATIVE_METRICS
        report["tasks"][name]["samples"] = [
            {
                "example_id": sample["doc"]["example_id"],
                "runtime_only": sample["doc"]["runtime_only"],
                "answer": sample["resps"][0][0],
                "target": sample["target"],
                "filtered": sample["filtered_resps"][0],
                "metrics": {metric: sample[metric] for metric in metrics},
            }
            for sample in samples
        ]
        report["tasks"][name]["means"] = {key: value for key, value in results["results"][name].items()}
    return report


if __name__ == "__main__":
    if "--without-themisto" in sys.argv:
        sys.meta_path.insert(0, HideThemisto())
    print(json.dumps(main(sys.argv[1])))
