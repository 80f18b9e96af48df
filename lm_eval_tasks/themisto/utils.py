"""Hooks the Themisto task YAMLs name with ``!function``.

With the ``themisto`` package installed they are the package's own: its data
loader (which finds the build as ``themisto.evaluation.data`` says) and its
fast metrics. Without it, e.g. with this folder copied into lm-eval's
``lm_eval/tasks/``, this file needs only what lm-eval installs:
``load_dataset`` is None, so lm-eval loads the YAMLs' ``dataset_path`` and
``dataset_name`` itself, and the metrics below compute the same per-sample
values with ``rouge_score`` and ``sacrebleu`` (``tests/evaluation/test_task_folder.py``
proves both give equal values).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable
from typing import Any

load_dataset: Callable[..., Any] | None
try:
    from themisto.evaluation.answers import unfence
    from themisto.evaluation.data import load_task_dataset as load_dataset
    from themisto.evaluation.metrics import score_sample
except ImportError:  # the folder runs inside lm-eval without the package
    load_dataset = None  # `custom_dataset: None`: lm-eval loads dataset_path / dataset_name

    # An opening Markdown fence at the very start of an answer, possibly after one
    # lead-in line ending in a colon (themisto.evaluation.answers).
    _OPENING_FENCE = re.compile(r"\s*(?:[^`\n]{0,80}:[ \t]*\n\s*)?(`{3,})[^`\n]*\n")
    _MEMORY_ADDRESS = re.compile(r"0x[0-9a-fA-F]+")
    _LINE_BREAK = re.compile(r"\r\n?")

    def unfence(answer: str) -> str:
        """The body of ``answer`` when it starts with a fenced code block, else ``answer`` unchanged."""
        opening = _OPENING_FENCE.match(answer)
        if opening is None:
            return answer
        body = answer[opening.end() :]
        closing = re.search(rf"^ *{opening.group(1)}`*[ \t]*$", body, flags=re.MULTILINE)
        if closing is None:
            return body
        # the line break before the closing fence belongs to the fence
        return body[: closing.start()].removesuffix("\n").removesuffix("\r")

    def _normalize(text: str) -> str:
        """Line ends unified, trailing whitespace stripped, memory addresses masked."""
        text = _LINE_BREAK.sub("\n", text)
        text = "\n".join(line.rstrip() for line in text.split("\n")).strip()
        return _MEMORY_ADDRESS.sub("0x?", text)

    def score_sample(pred: str, ref: str) -> dict[str, float]:
        """Exact match (strict and normalised), ROUGE-L F1 and chrF on a 0-1 scale."""
        from rouge_score.rouge_scorer import RougeScorer
        from sacrebleu.metrics import CHRF

        return {
            "exact_match": float(pred == ref),
            "exact_match_norm": float(_normalize(pred) == _normalize(ref)),
            "rougeL": RougeScorer(["rougeL"]).score(ref, pred)["rougeL"].fmeasure,
            "chrf": CHRF().sentence_score(pred, [ref]).score / 100,
        }


# The line break between a prompt and its answer (themisto.vocabulary.TARGET_DELIMITER; repeated here, as the
# folder must run without the package): a model continuing the prompt starts its answer with it.
TARGET_DELIMITER = "\n"


def unfence_answers(resps: Iterable[str], docs: Iterable[dict[str, Any]]) -> list[str]:
    """Filter step: take off the line break that opens a continued answer, unwrap a single fenced code block."""
    return [unfence(resp.removeprefix(TARGET_DELIMITER)) for resp in resps]


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """Score the (filtered) answer against the row's target."""
    return score_sample(results[0], doc["target"])


def scored_target(doc: dict[str, Any]) -> str:
    """A likelihood task's continuation: the line break that separates it from the prompt, then the target
    (lm-eval puts no delimiter before a ``loglikelihood`` continuation of its own)."""
    return TARGET_DELIMITER + doc["target"]


def process_loglikelihood(doc: dict[str, Any], results: list[tuple[float, bool]]) -> dict[str, Any]:
    """A likelihood task's sample: ``[loglikelihood, target bytes]`` for lm-eval's ``bits_per_byte``, and greedy_match.

    The same with or without the package: it needs only the row and lm-eval's (loglikelihood, is_greedy).
    """
    loglikelihood, is_greedy = results[0]
    return {"bits_per_byte": (loglikelihood, len(doc["target"].encode("utf-8"))), "greedy_match": int(is_greedy)}
