"""``--limit`` draws a seeded sample spread over trajectories, the same rows for every arm of a task."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest
from dataset_fixture import task_rows

from themisto.evaluation import evaluate
from themisto.evaluation.limit import spread_sample

# 42 trajectories of unequal length, their rows one trajectory after another, as a build lays them out
LENGTHS = [5 + (7 * i) % 40 for i in range(42)]
IDS = [f"nb{i}" for i, length in enumerate(LENGTHS) for _ in range(length)]


def test_a_limit_covers_every_trajectory_in_proportion_to_its_rows() -> None:
    chosen = spread_sample(IDS, 100)
    assert len(chosen) == 100 == len(set(chosen)) and chosen == sorted(chosen)
    per = Counter(IDS[i] for i in chosen)
    assert len({IDS[i] for i in range(100)}) < 10  # lm-eval's first 100 rows cover a few trajectories
    assert len(per) >= sum(100 * length >= len(IDS) for length in LENGTHS)  # every one with a row's share
    for trajectory, length in zip((f"nb{i}" for i in range(42)), LENGTHS, strict=True):
        share = 100 * length / len(IDS)
        assert int(share) <= per[trajectory] <= int(share) + 1  # floor or ceil of its proportional share


def test_the_draw_is_seeded_and_a_fraction_is_a_share_of_the_rows() -> None:
    assert spread_sample(IDS, 50) == spread_sample(list(IDS), 50)
    assert spread_sample(IDS, 50) != spread_sample(IDS, 50, seed=1)
    assert len(spread_sample(IDS, 0.1)) == -(-len(IDS) // 10)
    assert spread_sample(IDS, 10**6) == list(range(len(IDS)))


@pytest.mark.slow
def test_evaluate_with_a_limit_scores_the_same_spread_rows_in_every_arm(data_dir: Path, tmp_path: Path) -> None:
    tasks = ["themisto_output", "themisto_output_runtime"]
    evaluate("themisto-empty", tasks=tasks, data=str(data_dir), output_path=tmp_path, limit=4)
    rows = task_rows(data_dir, "output_prediction")
    expected = {rows[i]["example_id"] for i in spread_sample([row["trajectory_id"] for row in rows], 4)}
    assert len({example.split("/")[0] for example in expected}) > 1
    for task in tasks:
        (log,) = tmp_path.glob(f"*/samples_{task}_20*.jsonl")  # a date follows the name
        scored = {json.loads(line)["doc"]["example_id"] for line in log.read_text(encoding="utf-8").splitlines()}
        assert scored == expected
