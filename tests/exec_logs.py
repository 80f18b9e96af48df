"""Next-cell sample logs holding chosen predictions, in lm-eval's format, for exec-score's tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from themisto.evaluation.metrics import exact_match
from themisto.trajectory import Step


def next_cell_sample(trajectory: list[Step], step: int, prediction: str) -> dict[str, Any]:
    """One line of an lm-eval next-cell sample log, as ``--log_samples`` writes it."""
    target, trajectory_id = trajectory[step].code, trajectory[step].trajectory_id
    doc = {"example_id": f"{trajectory_id}/{step}", "trajectory_id": trajectory_id, "step": step, "target": target}
    return {
        "doc_id": step,
        "doc": doc,
        "target": target,
        "resps": [[prediction]],
        "filtered_resps": [prediction],
        "filter": "answer",
        "metrics": ["exact_match"],
        "exact_match": exact_match(prediction, target),
    }


def write_next_cell_logs(
    run_dir: Path, trajectory: list[Step], predictions: dict[tuple[str, str], dict[int, str]]
) -> None:
    """One lm-eval sample log per (model, task) under ``run_dir/model``, holding the codes ``{step: code}``."""
    for (model, task), by_step in predictions.items():
        lines = [json.dumps(next_cell_sample(trajectory, step, code)) for step, code in by_step.items()]
        folder = run_dir / model
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"samples_{task}_2026-01-01T00-00-00.000000.jsonl").write_text("\n".join(lines) + "\n")
