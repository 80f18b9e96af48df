"""Hooks the Themisto task YAMLs name with ``!function``; the logic lives in the package."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from themisto.evaluation.answers import unfence
from themisto.evaluation.data import load_task_dataset
from themisto.evaluation.metrics import score_sample


def load_dataset(**kwargs: Any) -> dict[str, Any]:
    """``custom_dataset``: lm-eval passes the task metadata and ``dataset_kwargs`` as keywords."""
    return load_task_dataset(**kwargs)


def unfence_answers(resps: Iterable[str], docs: Iterable[dict[str, Any]]) -> list[str]:
    """Filter step: unwrap answers given as a single fenced code block."""
    return [unfence(resp) for resp in resps]


def process_results(doc: dict[str, Any], results: list[str]) -> dict[str, float]:
    """Score the (filtered) answer against the row's target."""
    return score_sample(results[0], doc["target"])
